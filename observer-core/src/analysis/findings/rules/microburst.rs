//! Microbursts near line rate, from the microburst slots (needs the link speed).

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, finding},
    model::{Direction, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `microburst` below, with its [`Microburst`] table.
    MicroburstRule {
        name: "microburst",
        summary: "Microbursts above a share of the link speed",
        scenario: Some("rule-microburst"),
        evaluate: |r, t, _ctx| {
            microburst(r, &t.microburst)
        },
    }
}

/// The `[microburst]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Microburst {
    /// A slot is busy from this share of the link speed; bursts are runs of busy slots.
    pub share_percent: f64,
    /// Bursts on one interface from which the rule fires.
    pub min_bursts: u64,
}

impl Default for Microburst {
    fn default() -> Self {
        Self {
            share_percent: 90.0,
            min_bursts: 1,
        }
    }
}

fn microburst(r: &Report, c: &Microburst) -> Outcome {
    let Some(mb) = &r.microbursts else {
        return Outcome::Skipped("no microburst slots in this report".into());
    };
    if mb.link_speed_bps.is_none() {
        return Outcome::Skipped(
            "link speed unknown: give --link-speed (host mode reads it from the interface when it reports one)".into(),
        );
    }
    let hits: Vec<_> = mb
        .interfaces
        .iter()
        .filter(|i| i.bursts >= c.min_bursts && i.bursts > 0)
        .collect();
    if hits.is_empty() {
        let peak = mb
            .interfaces
            .iter()
            .filter_map(|i| i.peak_percent)
            .fold(0.0, f64::max);
        let mut note = format!(
            "no {} us slot at or above {}% of the link speed (peak {peak:.1}%)",
            mb.slot_ns / 1000,
            mb.threshold_percent
        );
        // What the slots could not see.
        let uncertain: u64 = mb.interfaces.iter().map(|i| i.uncertain_slots).sum();
        if uncertain > 0 {
            note.push_str(&format!(
                "; {} averaged over longer spans (the kernel clock's timer ran late): a burst shorter than its span may not show",
                count(uncertain, "slot")
            ));
        }
        let lost: u64 = mb.interfaces.iter().map(|i| i.lost_slots).sum();
        if lost > 0 {
            note.push_str(&format!("; {} lost before being read", count(lost, "slot")));
        }
        return Outcome::Passed(note);
    }
    let per: Vec<String> = hits
        .iter()
        .map(|i| {
            format!(
                "{} {}: {}, peak {:.1}%, longest {} us",
                i.name,
                match i.direction {
                    Direction::Ingress => "in",
                    Direction::Egress => "out",
                },
                count(i.bursts, "burst"),
                i.peak_percent.unwrap_or(0.0),
                i.longest_burst_ns / 1000
            )
        })
        .collect();
    finding(
        ABOUT.name,
        Severity::Warning,
        "Microbursts near line rate",
        format!(
            "slots of {} us at or above {}% of {} Gb/s: {}{}",
            mb.slot_ns / 1000,
            mb.threshold_percent,
            mb.link_speed_bps.unwrap_or(0) as f64 / 1e9,
            per.join("; "),
            // More than one link can carry: the speed or the observation is not one link's.
            if hits
                .iter()
                .any(|i| i.peak_percent.is_some_and(|p| p > 100.0))
            {
                "; above 100%: the link speed is wrong, or this holds several links' traffic"
            } else {
                ""
            }
        ),
        vec![
            ("interfaces", per.into()),
            ("slot_ns", mb.slot_ns.into()),
            ("threshold_percent", mb.threshold_percent.into()),
        ],
        Vec::new(),
        "Bursts at line rate fill switch buffers faster than ECN can slow senders: they show up as CE marks, PFC pauses or drops just after. Check the ECN marking thresholds (mark early enough for the burst length), and whether collective phases line up (many ranks starting a step at once).",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, passed, report, run, skipped};
    use crate::model::series::{InterfaceBursts, Microbursts};

    fn bursts(link_speed_bps: Option<u64>, bursts: u64) -> Microbursts {
        Microbursts {
            slot_ns: 100_000,
            link_speed_bps,
            threshold_percent: 90.0,
            interfaces: vec![InterfaceBursts {
                name: "eth0".into(),
                direction: Direction::Ingress,
                bytes: 0,
                peak_bps: 0.0,
                peak_percent: Some(95.0),
                peak_at_ns: 0,
                busy_slots: bursts,
                bursts,
                longest_burst_ns: 200_000,
                longest_burst_at_ns: 0,
                top: Vec::new(),
                lost_slots: 0,
                uncertain_slots: 0,
            }],
        }
    }

    #[test]
    fn bursts_fire_only_with_a_link_speed() {
        let t = Thresholds::default();
        let mut r = report();
        skipped(run(&MicroburstRule, &r, &t));
        r.microbursts = Some(bursts(None, 0));
        let note = skipped(run(&MicroburstRule, &r, &t));
        assert!(note.starts_with("link speed unknown"), "{note}");
        r.microbursts = Some(bursts(Some(10_000_000_000), 2));
        let f = fired(run(&MicroburstRule, &r, &t));
        assert_eq!(
            f.evidence["interfaces"][0],
            "eth0 in: 2 bursts, peak 95.0%, longest 200 us"
        );
        r.microbursts = Some(bursts(Some(10_000_000_000), 0));
        let note = passed(run(&MicroburstRule, &r, &t));
        assert_eq!(
            note,
            "no 100 us slot at or above 90% of the link speed (peak 95.0%)"
        );
        // A pass on slots that saw less says so.
        let mut mb = bursts(Some(10_000_000_000), 0);
        mb.interfaces[0].uncertain_slots = 12;
        mb.interfaces[0].lost_slots = 1;
        r.microbursts = Some(mb);
        let note = passed(run(&MicroburstRule, &r, &t));
        assert_eq!(
            note,
            "no 100 us slot at or above 90% of the link speed (peak 95.0%); 12 slots averaged over longer spans (the kernel clock's timer ran late): a burst shorter than its span may not show; 1 slot lost before being read"
        );
    }
}
