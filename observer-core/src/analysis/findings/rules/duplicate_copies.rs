//! Duplicate copies: PSNs seen twice outside any resend (a mirror or tap copying a packet
//! twice, overlapping captures). Not retransmissions, not loss.

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, finding, request_packets, round2},
    model::{FlowRef, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `duplicate_copies` below, with its [`DuplicateCopies`] table.
    DuplicateCopiesRule {
        name: "duplicate-copies",
        summary: "PSNs seen twice with no resend: the mirror, the tap or the capture duplicates packets",
        scenario: Some("rule-duplicate-copies"),
        evaluate: |r, t, _ctx| {
            duplicate_copies(r, &t.duplicate_copies)
        },
    }
}

/// The `[duplicate_copies]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DuplicateCopies {
    /// Duplicate packets, over all flows, from which the rule fires.
    pub min_packets: u64,
}

impl Default for DuplicateCopies {
    fn default() -> Self {
        Self { min_packets: 1 }
    }
}

fn duplicate_copies(r: &Report, c: &DuplicateCopies) -> Outcome {
    let requests = request_packets(r);
    if requests == 0 {
        return Outcome::InsufficientData(
            "no request packet of a connected QP (RC, UC, XRC) to follow PSNs in".into(),
        );
    }
    let dups: u64 = r.flows.iter().map(|f| f.psn.duplicates).sum();
    if dups < c.min_packets.max(1) {
        return Outcome::Passed(format!(
            "{} over {}",
            count(dups, "duplicate"),
            count(requests, "request packet")
        ));
    }
    let mut flows: Vec<(u64, FlowRef)> = r
        .flows
        .iter()
        .filter(|f| f.psn.duplicates > 0)
        .map(|f| (f.psn.duplicates, FlowRef::of_flow(f)))
        .collect();
    flows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mirrored = r
        .flows
        .iter()
        .any(|f| f.psn.duplicates > 0 && f.mirror.is_some());
    let share = dups as f64 * 100.0 / requests as f64;
    finding(
        ABOUT.name,
        Severity::Warning,
        "Packets seen twice: the observation duplicates them",
        format!(
            "{} seen twice with no resend by the sender ({:.2}% of {}) on {}",
            count(dups, "request packet"),
            share,
            count(requests, "request packet"),
            count(flows.len() as u64, "flow")
        ),
        vec![
            ("duplicates", dups.into()),
            ("request_packets", requests.into()),
            ("percent", round2(share).into()),
            ("mirrored", mirrored.into()),
        ],
        flows.into_iter().map(|(_, f)| f).collect(),
        "A sender never sends a PSN twice but to resend it, and these were not resends: the copies come from the observation. Look for a mirror session copying both ingress and egress of one port, or two taps or SPAN sessions feeding one capture. Packet and byte counts of these flows include the copies.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, insufficient, passed, report, run};

    #[test]
    fn duplicates_fire_and_none_passes_on_evidence() {
        let t = Thresholds::default();
        let mut r = report();
        insufficient(run(&DuplicateCopiesRule, &r, &t));
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send) = (40, 40);
        r.flows.push(f);
        assert_eq!(
            passed(run(&DuplicateCopiesRule, &r, &t)),
            "0 duplicates over 40 request packets"
        );
        r.flows[0].psn.duplicates = 4;
        let f = fired(run(&DuplicateCopiesRule, &r, &t));
        assert_eq!(f.evidence["duplicates"], 4);
        assert_eq!(f.evidence["percent"], 10.0);
    }
}
