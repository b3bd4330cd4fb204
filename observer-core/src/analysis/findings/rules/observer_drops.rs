//! The observer dropped frames itself before accounting them: mirror copies spread over CPUs
//! that found their CPU's queue full, copies the mirror port's device dropped for lack of
//! buffer space (XDP, mirror mode), frames a libpcap capture had no room for. Their PSNs look
//! lost on the wire, so the loss rule does not conclude on missing PSNs alone while this fires.
//! No synth scenario fires it (a replay drops nothing).

use serde::{Deserialize, Serialize};

use crate::{
    analysis::findings::{Outcome, Severity, finding, pct},
    model::Report,
    units::count,
};

rule! {
    /// The rule ([`ABOUT`]): `observer_drops` below, with its [`ObserverDrops`] table. Dropped
    /// frames are unseen ones: a run that dropped every RoCE packet saw none.
    ObserverDropsRule {
        name: "observer-drops",
        summary: "The observer dropped frames itself (CPU queues, mirror port or capture buffer full): PSNs may look lost",
        scenario: None,
        needs_roce: false,
        evaluate: |r, t, _ctx| {
            observer_drops(r, &t.observer_drops)
        },
    }
}

/// The `[observer_drops]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ObserverDrops {
    /// Frames dropped by the observer from which the rule fires.
    pub min_frames: u64,
}

impl Default for ObserverDrops {
    fn default() -> Self {
        Self { min_frames: 1 }
    }
}

fn observer_drops(r: &Report, c: &ObserverDrops) -> Outcome {
    let t = &r.totals;
    let dropped = r.observer_dropped();
    // The mirror port's device's drops are in `dropped`; a host interface's are context.
    let port = r.port_dropped();
    if dropped == 0 || dropped < c.min_frames {
        if t.roce_packets == 0 && dropped == 0 {
            return Outcome::InsufficientData(format!(
                "no RoCE packet seen, none dropped ({} accounted)",
                count(t.frames, "frame")
            ));
        }
        return Outcome::Passed(if dropped == 0 {
            format!("every one of {} accounted", count(t.frames, "frame"))
        } else {
            format!(
                "{} dropped by the observer, below min_frames {}",
                count(dropped, "frame"),
                c.min_frames
            )
        });
    }
    let (buffer, interface) = t
        .capture
        .map_or((0, 0), |c| (c.dropped, c.interface_dropped));
    let mut parts = Vec::new();
    if t.spread_dropped > 0 {
        parts.push(format!(
            "{} spread over CPUs found the queue of their CPU full",
            count(t.spread_dropped, "frame")
        ));
    }
    if port > 0 {
        parts.push(format!(
            "{} dropped by the mirror port's device for lack of buffer space (rx_missed_errors, RoCE or not)",
            count(port, "frame")
        ));
    }
    if buffer > 0 {
        parts.push(format!(
            "{} found no room in libpcap's buffer",
            count(buffer, "frame")
        ));
    }
    // Context, not the observer's: a captured interface's drops count every frame the stack
    // dropped, and a host interface's device lost the host's own packets.
    let missed = t.interface_missed.saturating_sub(port);
    let context = match (interface, missed) {
        (0, 0) => String::new(),
        (0, m) => format!(
            "; the interface's device also missed {} for lack of buffer space, RoCE or not",
            count(m, "frame")
        ),
        (i, _) => format!(
            "; the interface also dropped {} on receive, RoCE or not",
            count(i, "frame")
        ),
    };
    finding(
        ABOUT.name,
        Severity::Warning,
        "The observer dropped frames itself: PSNs missing in what it saw may be its own",
        format!(
            "{} ({:.2}% of what it saw): never accounted, their PSNs look lost; the loss rule does not count missing PSNs up to their number as loss{context}",
            parts.join(", "),
            pct(dropped, t.frames + dropped)
        ),
        vec![
            ("spread_dropped", t.spread_dropped.into()),
            ("port_dropped", port.into()),
            ("capture_dropped", buffer.into()),
            ("interface_dropped", interface.into()),
            ("interface_missed", t.interface_missed.into()),
            ("frames", t.frames.into()),
        ],
        Vec::new(),
        "Spread over more CPUs (--cpus), drop the copies once accounted (--consume) if they still climb the stack, or mirror less traffic to this port; for the mirror port's own drops, also a larger receive ring (ethtool -G) or more receive queues; for a capture, XDP on the interface instead.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, passed, report, run};

    #[test]
    fn frames_the_observer_dropped_fire() {
        let t = Thresholds::default();
        let mut r = report();
        assert!(matches!(
            run(&ObserverDropsRule, &r, &t),
            Outcome::InsufficientData(_)
        ));
        r.totals.frames = 997;
        assert!(matches!(
            run(&ObserverDropsRule, &r, &t),
            Outcome::InsufficientData(_)
        ));
        r.totals.roce_packets = 900;
        assert_eq!(
            passed(run(&ObserverDropsRule, &r, &t)),
            "every one of 997 frames accounted"
        );
        r.totals.spread_dropped = 3;
        let f = fired(run(&ObserverDropsRule, &r, &t));
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            f.summary,
            "3 frames spread over CPUs found the queue of their CPU full (0.30% of what it saw): never accounted, their PSNs look lost; the loss rule does not count missing PSNs up to their number as loss"
        );
        assert_eq!(f.evidence["spread_dropped"], 3);
        r.totals.spread_dropped = 0;
        r.totals.capture = Some(crate::model::CaptureCounts {
            received: 1000,
            dropped: 2,
            interface_dropped: 1,
        });
        let f = fired(run(&ObserverDropsRule, &r, &t));
        assert_eq!(f.evidence["capture_dropped"], 2);
        assert_eq!(f.evidence["interface_dropped"], 1);
        assert!(
            f.summary
                .starts_with("2 frames found no room in libpcap's buffer (0.20%")
                && f.summary
                    .ends_with("; the interface also dropped 1 frame on receive, RoCE or not"),
            "{}",
            f.summary
        );
        let t = Thresholds {
            observer_drops: ObserverDrops { min_frames: 10 },
            ..Thresholds::default()
        };
        assert_eq!(
            passed(run(&ObserverDropsRule, &r, &t)),
            "2 frames dropped by the observer, below min_frames 10"
        );
    }

    #[test]
    fn a_mirror_ports_full_rings_are_the_observers_a_hosts_are_context() {
        let t = Thresholds::default();
        let mut r = report();
        (r.totals.frames, r.totals.roce_packets) = (995, 900);
        r.totals.interface_missed = 5;
        r.source.mode = Some("mirror+consume".into());
        let f = fired(run(&ObserverDropsRule, &r, &t));
        assert_eq!(
            f.summary,
            "5 frames dropped by the mirror port's device for lack of buffer space (rx_missed_errors, RoCE or not) (0.50% of what it saw): never accounted, their PSNs look lost; the loss rule does not count missing PSNs up to their number as loss"
        );
        assert_eq!(f.evidence["port_dropped"], 5);
        assert_eq!(f.evidence["interface_missed"], 5);
        // In host mode the interface dropped the host's own packets: not the observer's.
        r.source.mode = Some("host".into());
        assert_eq!(
            passed(run(&ObserverDropsRule, &r, &t)),
            "every one of 995 frames accounted"
        );
        r.totals.spread_dropped = 3;
        let f = fired(run(&ObserverDropsRule, &r, &t));
        assert_eq!(f.evidence["port_dropped"], 0);
        assert_eq!(f.evidence["interface_missed"], 5);
        assert!(
            f.summary.ends_with(
                "; the interface's device also missed 5 frames for lack of buffer space, RoCE or not"
            ),
            "{}",
            f.summary
        );
    }
}
