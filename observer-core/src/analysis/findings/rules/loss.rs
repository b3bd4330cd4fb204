//! Confirmed loss: PSNs that never arrived (their hole left the analysis window, or was open
//! at the end), NAK sequence errors, and go-back-N resends (RNR retries aside). Reordering and
//! duplicate copies are not loss (rules `reorder` and `duplicate-copies`).

use std::{collections::BTreeMap, net::IpAddr};

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Context, Finding, MAX_FLOWS_NAMED, Outcome, Severity, request_packets},
    model::{FlowRef, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `loss` below, with its [`Loss`] table.
    LossRule {
        name: "loss",
        summary: "PSNs lost, NAK sequence errors or go-back-N resends (drops in what should be lossless)",
        scenario: Some("rule-loss"),
        evaluate: |r, t, ctx| {
            loss(r, &t.loss, t.observer_drops.min_frames, ctx)
        },
    }
}

/// The `[loss]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Loss {
    /// Loss events (ranges of lost PSNs, NAK sequence errors, resend episodes) over all flows
    /// from which the rule fires.
    pub min_events: u64,
    /// Events from which it is critical.
    pub critical_events: u64,
    /// Lost and resent PSNs as a share of the request packets, in percent, from which it is
    /// critical. (It is critical anyway when a lossless class is configured.)
    pub critical_percent: f64,
}

impl Default for Loss {
    fn default() -> Self {
        Self {
            min_events: 1,
            critical_events: 100,
            critical_percent: 0.1,
        }
    }
}

/// `min_drops`: the observer's own drops from which they may explain missing PSNs (the
/// `observer-drops` rule's threshold).
fn loss(r: &Report, c: &Loss, min_drops: u64, ctx: &Context) -> Outcome {
    let requests = request_packets(r);
    if requests == 0 {
        return Outcome::InsufficientData(
            "no request packet of a connected QP (RC, UC, XRC) to follow PSNs in".into(),
        );
    }
    // A request sent again after an RNR NAK waited out the receiver, nothing was lost: per
    // host pair, resend episodes up to the RNR NAKs coming back are those retries.
    // (Host pairs with RNR NAKs only: most intervals have none.)
    let mut rnr_back: BTreeMap<(IpAddr, IpAddr), u64> = BTreeMap::new();
    for f in r.flows.iter().filter(|f| f.ops.rnr_nak > 0) {
        *rnr_back.entry((f.dst_ip, f.src_ip)).or_default() += f.ops.rnr_nak;
    }
    let mut rnr_retries = 0;
    let mut flows: Vec<(u64, FlowRef, bool)> = Vec::new();
    let (mut missing, mut lost_events, mut naks, mut retx, mut episodes) = (0, 0, 0, 0, 0);
    for f in &r.flows {
        let retried = match rnr_back.get_mut(&(f.src_ip, f.dst_ip)) {
            Some(rnr) if f.psn.retransmission_episodes > 0 => {
                let retried = f.psn.retransmission_episodes.min(*rnr);
                *rnr -= retried;
                retried
            }
            _ => 0,
        };
        rnr_retries += retried;
        let own_episodes = f.psn.retransmission_episodes - retried;
        // The resends of RNR retries: a retry resends what the RNR NAK named onwards.
        let own_retx = if own_episodes == 0 {
            0
        } else {
            f.psn.retransmissions
        };
        // A sprayed direction's holes are its other ports' packets: not loss. (Its NAKs and
        // resends still are what they are.)
        let (f_missing, f_lost) = if f.psn.sprayed > 0 {
            (0, 0)
        } else {
            (f.psn.missing, f.psn.lost_events)
        };
        missing += f_missing;
        lost_events += f_lost;
        naks += f.psn.nak_seq_errors;
        retx += own_retx;
        episodes += own_episodes;
        let n = f_lost + f.psn.nak_seq_errors + own_episodes;
        if n > 0 {
            flows.push((n, FlowRef::of_flow(f), f.mirror.is_some()));
        }
    }
    let events = lost_events + naks + episodes;
    if events < c.min_events.max(1) {
        let seen = if events == 0 {
            "no PSN lost, no NAK sequence error, no go-back-N".to_string()
        } else {
            format!(
                "{} (lost ranges, NAK sequence errors, go-back-N), below min_events {}",
                count(events, "loss event"),
                c.min_events
            )
        };
        return Outcome::Passed(format!(
            "{seen} over {} ({} out of order, {}{}){}",
            count(requests, "request packet"),
            r.flows
                .iter()
                .filter(|f| f.psn.sprayed == 0)
                .map(|f| f.psn.out_of_order)
                .sum::<u64>(),
            count(
                r.flows.iter().map(|f| f.psn.duplicates).sum::<u64>(),
                "duplicate"
            ),
            match rnr_retries {
                0 => String::new(),
                1 => ", 1 retry after an RNR NAK".into(),
                n => format!(", {n} retries after RNR NAKs"),
            },
            sprayed_note(r)
        ));
    }
    // PSNs missing with no NAK and no resend are what the observer's own drops look like: as
    // long as it dropped as many frames itself, they prove nothing (a drop hides one PSN).
    let dropped = match r.observer_dropped() {
        d if d >= min_drops.max(1) => d,
        _ => 0,
    };
    if dropped > 0 && missing <= dropped && naks == 0 && episodes == 0 {
        return Outcome::InsufficientData(format!(
            "{} missing in {}, no NAK, no resend, and the observer itself dropped {} (observer-drops): the missing PSNs may be its own",
            count(missing, "PSN"),
            count(lost_events, "range"),
            count(dropped, "frame")
        ));
    }
    flows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let lossless = ctx.pfc_seen || ctx.dscp_in_use;
    let rate = (missing + retx) as f64 * 100.0 / requests as f64;
    // PSNs missing in mirror copies while no sender resent anything and no responder NAKed:
    // the packets arrived; the mirror session dropped its copies.
    let mirror_only = naks == 0 && episodes == 0 && flows.iter().all(|f| f.2);
    let severity = if mirror_only {
        Severity::Warning
    } else if lossless || events >= c.critical_events || rate >= c.critical_percent {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let hint = if mirror_only {
        "No sender resent these PSNs and no responder NAKed them: the packets reached their receivers, and the mirror session dropped its copies (an oversubscribed SPAN or ERSPAN destination, or a truncating policer). Check the mirror session's drops before the fabric."
    } else {
        "RoCE recovers from a drop with go-back-N, which costs far more than the packet: check that PFC is enabled on the RoCE priority on every hop (NICs and switches), that the RoCE DSCP maps to that lossless queue, the switches' buffer headroom, and their discard counters on the path of the flows named."
    };
    Outcome::Fired(Finding {
        rule: ABOUT.name.into(),
        severity,
        title: if mirror_only {
            "PSNs missing in the mirror copies only".into()
        } else if lossless {
            "Packet loss in the lossless RoCE class".into()
        } else {
            "Packet loss in RoCE traffic".into()
        },
        summary: {
            let mut parts = Vec::new();
            if missing > 0 {
                parts.push(format!(
                    "{} lost in {}",
                    count(missing, "PSN"),
                    count(lost_events, "range")
                ));
            }
            if naks > 0 {
                parts.push(count(naks, "NAK sequence error"));
            }
            if episodes > 0 {
                parts.push(format!(
                    "{} resent in {}",
                    count(retx, "PSN"),
                    count(episodes, "go-back-N episode")
                ));
            }
            let own = if dropped > 0 && missing > 0 {
                format!(
                    "; the observer itself dropped {}: the missing PSNs may include them ({} at least not)",
                    count(dropped, "frame"),
                    missing.saturating_sub(dropped)
                )
            } else {
                String::new()
            };
            // NAKs alone: the responder saw a PSN missing, yet none is missing or resent here.
            let share = if missing + retx == 0 {
                format!(
                    "with no PSN missing or resent in view: the loss was past this point of observation, or the resend was not seen; over {}",
                    count(requests, "request packet")
                )
            } else {
                format!("{rate:.3}% of {}", count(requests, "request packet"))
            };
            format!(
                "{} ({share}) on {}{own}",
                parts.join(", "),
                count(flows.len() as u64, "flow")
            )
        },
        evidence: [
            (
                "psn_gaps",
                r.flows.iter().map(|f| f.psn.gaps).sum::<u64>().into(),
            ),
            ("psns_missing", missing.into()),
            ("lost_events", lost_events.into()),
            ("naks", naks.into()),
            ("retransmissions", retx.into()),
            ("retransmission_episodes", episodes.into()),
            ("rnr_retries_not_counted", rnr_retries.into()),
            ("request_packets", requests.into()),
            ("loss_percent", ((rate * 1000.0).round() / 1000.0).into()),
            ("lossless_class_configured", lossless.into()),
            ("mirror_only", mirror_only.into()),
            ("observer_dropped", dropped.into()),
        ]
        .into_iter()
        .map(|(k, v): (&str, serde_json::Value)| (k.to_string(), v))
        .collect(),
        flows: flows
            .into_iter()
            .map(|(_, f, _)| f)
            .take(MAX_FLOWS_NAMED)
            .collect(),
        hint: hint.into(),
    })
}

/// What the flows sprayed over several ports leave unjudged, if any: "; ...".
pub(crate) fn sprayed_note(r: &Report) -> String {
    let sprayed: Vec<&crate::model::Flow> = r.flows.iter().filter(|f| f.psn.sprayed > 0).collect();
    if sprayed.is_empty() {
        return String::new();
    }
    let holes: u64 = sprayed.iter().map(|f| f.psn.missing).sum();
    format!(
        "; {} of directions sprayed over several ports in turn not judged: each port holds a share of the PSNs, so its {} are the other ports' packets",
        count(sprayed.len() as u64, "flow"),
        count(holes, "missing PSN")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, passed, report, run};

    /// A NAK (PSN sequence error) with nothing missing or resent in view says so, not "0.000%".
    #[test]
    fn a_nak_with_nothing_missing_or_resent_says_what_it_is() {
        let t = Thresholds::default();
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send) = (76, 76);
        r.flows.push(f);
        let mut b = flow("10.0.0.2", "10.0.0.1");
        (b.packets, b.ops.nak, b.psn.nak_seq_errors) = (1, 1, 1);
        r.flows.push(b);
        let f = fired(run(&LossRule, &r, &t));
        assert_eq!(
            f.summary,
            "1 NAK sequence error (with no PSN missing or resent in view: the loss was past this point of observation, or the resend was not seen; over 76 request packets) on 1 flow"
        );
        assert!(!f.summary.contains('%'));
    }

    #[test]
    fn lost_psns_fire_critical_in_a_lossless_class_and_rnr_retries_do_not_count() {
        let t = Thresholds::default();
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send, f.psn.gaps) = (10_000, 10_000, 1);
        (f.psn.missing, f.psn.lost_events) = (3, 1);
        r.flows.push(f);
        let f = fired(run(&LossRule, &r, &t));
        assert_eq!(f.severity, Severity::Warning, "0.03% in no lossless class");
        assert_eq!(f.title, "Packet loss in RoCE traffic");
        assert_eq!(f.evidence["psns_missing"], 3);
        r.flows[0].ops.send = 1000;
        assert_eq!(
            fired(run(&LossRule, &r, &t)).severity,
            Severity::Critical,
            "0.3%"
        );
        r.flows[0].ops.send = 10_000;
        r.flows[0].dscp = vec![26];
        let f = fired(run(&LossRule, &r, &t));
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.evidence["lossless_class_configured"], true);

        // Two SENDs retried after two RNR NAKs: no loss.
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send, f.psn.regressions) = (10, 10, 2);
        (f.psn.retransmissions, f.psn.retransmission_episodes) = (2, 2);
        r.flows.push(f);
        let mut b = flow("10.0.0.2", "10.0.0.1");
        (b.packets, b.ops.rnr_nak) = (2, 2);
        r.flows.push(b);
        let note = passed(run(&LossRule, &r, &t));
        assert_eq!(
            note,
            "no PSN lost, no NAK sequence error, no go-back-N over 10 request packets (0 out of order, 0 duplicates, 2 retries after RNR NAKs)"
        );

        // Loss below a raised threshold passes, and says what it saw.
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send, f.psn.missing, f.psn.lost_events) = (100, 100, 4, 2);
        r.flows.push(f);
        let t = Thresholds {
            loss: Loss {
                min_events: 5,
                ..Loss::default()
            },
            ..Thresholds::default()
        };
        assert_eq!(
            passed(run(&LossRule, &r, &t)),
            "2 loss events (lost ranges, NAK sequence errors, go-back-N), below min_events 5 over 100 request packets (0 out of order, 0 duplicates)"
        );
    }

    #[test]
    fn reordering_and_copies_are_not_loss_and_no_requests_is_no_evidence() {
        let t = Thresholds::default();
        let mut r = report();
        assert!(matches!(
            run(&LossRule, &r, &t),
            Outcome::InsufficientData(_)
        ));
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.write, f.psn.gaps, f.psn.regressions) = (100, 100, 5, 15);
        (f.psn.out_of_order, f.psn.duplicates) = (5, 10);
        r.flows.push(f);
        passed(run(&LossRule, &r, &t));
    }

    #[test]
    fn psns_missing_only_in_mirror_copies_blame_the_mirror() {
        let t = Thresholds::default();
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.write, f.psn.gaps) = (100, 100, 2);
        (f.psn.missing, f.psn.lost_events) = (4, 2);
        f.mirror = Some(crate::model::FlowMirror {
            session: Some(7),
            kind: Some("erspan3".into()),
            truncated: 0,
        });
        f.dscp = vec![26];
        r.flows.push(f);
        let f = fired(run(&LossRule, &r, &t));
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.title, "PSNs missing in the mirror copies only");
        // A NAK from the responder: the fabric lost them.
        let mut b = flow("10.0.0.2", "10.0.0.1");
        (b.packets, b.ops.nak, b.psn.nak_seq_errors) = (1, 1, 1);
        b.mirror = r.flows[0].mirror.clone();
        r.flows.push(b);
        assert_eq!(fired(run(&LossRule, &r, &t)).severity, Severity::Critical);
    }

    #[test]
    fn psns_missing_while_the_observer_dropped_frames_prove_nothing() {
        let t = Thresholds::default();
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.write, f.psn.gaps) = (100, 100, 2);
        (f.psn.missing, f.psn.lost_events) = (4, 2);
        r.flows.push(f);
        fired(run(&LossRule, &r, &t));
        for (spread, capture) in [(4, 0), (0, 5)] {
            r.totals.spread_dropped = spread;
            r.totals.capture = Some(crate::model::CaptureCounts {
                received: 100,
                dropped: capture,
                interface_dropped: 0,
            });
            match run(&LossRule, &r, &t) {
                Outcome::InsufficientData(why) => assert_eq!(
                    why,
                    format!(
                        "4 PSNs missing in 2 ranges, no NAK, no resend, and the observer itself dropped {} frames (observer-drops): the missing PSNs may be its own",
                        spread + capture
                    )
                ),
                _ => panic!("the loss rule fired or passed on PSNs the observer may have dropped"),
            }
        }
        // Fewer drops than missing PSNs: some were lost on the wire.
        r.totals.capture = None;
        r.totals.spread_dropped = 3;
        let f = fired(run(&LossRule, &r, &t));
        assert!(
            f.summary.ends_with(
                "; the observer itself dropped 3 frames: the missing PSNs may include them (1 at least not)"
            ),
            "{}",
            f.summary
        );
        assert_eq!(f.evidence["observer_dropped"], 3);
        // Drops below observer-drops' threshold are neither its finding nor an excuse here.
        let raised = Thresholds {
            observer_drops: crate::analysis::findings::ObserverDrops { min_frames: 10 },
            ..Thresholds::default()
        };
        r.totals.spread_dropped = 5;
        assert_eq!(
            fired(run(&LossRule, &r, &raised)).evidence["observer_dropped"],
            0
        );
        // An interface's receive drops are not the observer's.
        r.totals.spread_dropped = 0;
        r.totals.capture = Some(crate::model::CaptureCounts {
            received: 100,
            dropped: 0,
            interface_dropped: 50,
        });
        assert_eq!(
            fired(run(&LossRule, &r, &t)).evidence["observer_dropped"],
            0
        );
        // XDP live: the observed interfaces' full receive rings are the observer's drops on a
        // mirror port only (copies it never saw); a host's own interface lost the host's packets.
        r.totals.capture = None;
        r.totals.interface_missed = 4;
        for (mode, excused) in [
            (None, false),
            (Some("host"), false),
            (Some("mirror"), true),
            (Some("mirror+consume"), true),
        ] {
            r.source.mode = mode.map(String::from);
            match run(&LossRule, &r, &t) {
                Outcome::InsufficientData(why) => {
                    assert!(excused, "{mode:?}: {why}");
                    assert!(
                        why.contains("the observer itself dropped 4 frames"),
                        "{why}"
                    );
                }
                Outcome::Fired(f) => {
                    assert!(!excused, "{mode:?}: {}", f.summary);
                    assert_eq!(f.evidence["observer_dropped"], 0);
                }
                _ => panic!("{mode:?}: the loss rule passed or skipped"),
            }
        }
        r.source.mode = None;
        r.totals.interface_missed = 0;
        // A NAK from the responder: the fabric lost packets, whatever the observer dropped.
        r.totals.capture = None;
        r.totals.spread_dropped = 4;
        let mut b = flow("10.0.0.2", "10.0.0.1");
        (b.packets, b.ops.nak, b.psn.nak_seq_errors) = (1, 1, 1);
        r.flows.push(b);
        let f = fired(run(&LossRule, &r, &t));
        assert!(
            f.summary.ends_with(
                "; the observer itself dropped 4 frames: the missing PSNs may include them (0 at least not)"
            ),
            "{}",
            f.summary
        );
    }
}
