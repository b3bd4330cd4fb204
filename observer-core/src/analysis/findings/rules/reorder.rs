//! Reordering: late packets filling holes (adaptive routing, packet spraying). Not loss: the
//! NICs must tolerate it.

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, finding, request_packets, round2},
    model::{FlowRef, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `reorder` below, with its [`Reorder`] table.
    ReorderRule {
        name: "reorder",
        summary: "request packets arriving out of order (adaptive routing or packet spraying): not loss",
        scenario: Some("rule-reorder"),
        evaluate: |r, t, _ctx| {
            reorder(r, &t.reorder)
        },
    }
}

/// The `[reorder]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Reorder {
    /// Out-of-order packets, over all flows, from which the rule fires (as info).
    pub min_packets: u64,
    /// Share of the request packets out of order, in percent, from which it is a warning.
    pub warning_percent: f64,
}

impl Default for Reorder {
    fn default() -> Self {
        Self {
            min_packets: 1,
            warning_percent: 1.0,
        }
    }
}

fn reorder(r: &Report, c: &Reorder) -> Outcome {
    let requests = request_packets(r);
    if requests == 0 {
        return Outcome::InsufficientData(
            "no request packet of a connected QP (RC, UC, XRC) to follow PSNs in".into(),
        );
    }
    // A sprayed direction's ports each hold a share of its PSNs: their order is no evidence.
    let late: u64 = r
        .flows
        .iter()
        .filter(|f| f.psn.sprayed == 0)
        .map(|f| f.psn.out_of_order)
        .sum();
    if late < c.min_packets.max(1) {
        return Outcome::Passed(format!(
            "{} out of order over {}{}",
            count(late, "packet"),
            count(requests, "request packet"),
            super::loss::sprayed_note(r)
        ));
    }
    let share = late as f64 * 100.0 / requests as f64;
    let mut flows: Vec<(u64, FlowRef)> = r
        .flows
        .iter()
        .filter(|f| f.psn.out_of_order > 0 && f.psn.sprayed == 0)
        .map(|f| (f.psn.out_of_order, FlowRef::of_flow(f)))
        .collect();
    flows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    finding(
        ABOUT.name,
        if share >= c.warning_percent {
            Severity::Warning
        } else {
            Severity::Info
        },
        "Packets arrive out of order (reordering, not loss)",
        format!(
            "{} of {} arrived out of order ({:.2}%) on {}",
            count(late, "packet"),
            count(requests, "request packet"),
            share,
            count(flows.len() as u64, "flow")
        ),
        vec![
            ("out_of_order", late.into()),
            ("request_packets", requests.into()),
            ("percent", round2(share).into()),
        ],
        flows.into_iter().map(|(_, f)| f).collect(),
        "Adaptive routing and packet spraying (Spectrum-X class fabrics) reorder by design, and NICs built for them place packets out of order; other NICs treat every reordered packet as a loss (a NAK and a go-back-N). Make sure the NICs on these flows tolerate reordering, or that ECMP keeps each flow on one path (no LAG or path changes mid-flow).",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, insufficient, passed, report, run};

    #[test]
    fn reordering_fires_as_info_then_warning_by_share() {
        let t = Thresholds::default();
        let mut r = report();
        insufficient(run(&ReorderRule, &r, &t));
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.write) = (1000, 1000);
        r.flows.push(f);
        assert_eq!(
            passed(run(&ReorderRule, &r, &t)),
            "0 packets out of order over 1000 request packets"
        );
        r.flows[0].psn.out_of_order = 5;
        let f = fired(run(&ReorderRule, &r, &t));
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(f.evidence["percent"], 0.5);
        r.flows[0].psn.out_of_order = 20;
        assert_eq!(fired(run(&ReorderRule, &r, &t)).severity, Severity::Warning);
    }
}
