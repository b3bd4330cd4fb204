//! RNR NAKs: receivers with no receive posted (an application problem, not the network).

use std::{collections::BTreeSet, net::IpAddr};

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, finding, list},
    model::{FlowRef, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `rnr` below, with its [`Rnr`] table.
    RnrRule {
        name: "rnr",
        summary: "RNR NAKs: the receiver had no receive posted (an application problem, not the network)",
        scenario: Some("rule-rnr"),
        evaluate: |r, t, _ctx| {
            rnr(r, &t.rnr)
        },
    }
}

/// The `[rnr]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rnr {
    /// RNR NAKs, over all flows, from which the rule fires.
    pub min_rnr_naks: u64,
}

impl Default for Rnr {
    fn default() -> Self {
        Self { min_rnr_naks: 1 }
    }
}

fn rnr(r: &Report, c: &Rnr) -> Outcome {
    let total: u64 = r.flows.iter().map(|f| f.ops.rnr_nak).sum();
    // RNR NAKs travel with the responders' ACKs and NAKs: none of those seen, no RNR NAK could
    // have been.
    let responses: u64 = r
        .flows
        .iter()
        .map(|f| f.ops.ack + f.ops.nak + f.ops.rnr_nak + f.ops.read_response + f.ops.atomic_ack)
        .sum();
    if responses == 0 {
        return Outcome::InsufficientData(
            "no ACK, NAK or response seen: the responders' direction, where RNR NAKs travel, is not observed".into(),
        );
    }
    if total == 0 || total < c.min_rnr_naks {
        return Outcome::Passed(format!(
            "{} in {}",
            count(total, "RNR NAK"),
            count(responses, "response")
        ));
    }
    let flows: Vec<FlowRef> = r
        .flows
        .iter()
        .filter(|f| f.ops.rnr_nak > 0)
        .map(FlowRef::of_flow)
        .collect();
    let receivers: BTreeSet<IpAddr> = flows.iter().map(|f| f.src_ip).collect();
    finding(
        ABOUT.name,
        Severity::Warning,
        "RNR NAKs: receivers not ready (an application problem, not the network)",
        format!(
            "{} from {} ({})",
            count(total, "RNR NAK"),
            count(receivers.len() as u64, "receiver"),
            list(&receivers)
        ),
        vec![
            ("rnr_naks", total.into()),
            ("receivers", list(&receivers).into()),
        ],
        flows,
        "A SEND arrived with no receive buffer posted, and the sender waits out its RNR timer: the application (or NCCL/UCX) must post receives ahead of the traffic, use a larger receive queue or SRQ, or a shorter min_rnr_timer. The network is not at fault.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, passed, report, run};

    #[test]
    fn rnr_naks_fire_from_the_threshold() {
        let mut r = report();
        let mut f = flow("10.0.0.2", "10.0.0.1");
        (f.packets, f.ops.rnr_nak) = (3, 3);
        r.flows.push(f);
        let f = fired(run(&RnrRule, &r, &Thresholds::default()));
        assert_eq!(f.evidence["rnr_naks"], 3);
        assert_eq!(f.evidence["receivers"], "10.0.0.2");
        let t = Thresholds {
            rnr: Rnr { min_rnr_naks: 4 },
            ..Thresholds::default()
        };
        assert_eq!(passed(run(&RnrRule, &r, &t)), "3 RNR NAKs in 3 responses");
    }

    #[test]
    fn no_response_seen_is_too_little_to_judge() {
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send) = (10, 10);
        r.flows.push(f);
        assert!(matches!(
            run(&RnrRule, &r, &Thresholds::default()),
            Outcome::InsufficientData(why) if why.contains("not observed")
        ));
        r.flows[0].ops.ack = 1;
        assert_eq!(
            passed(run(&RnrRule, &r, &Thresholds::default())),
            "0 RNR NAKs in 1 response"
        );
    }
}
