//! QP reuse: a PSN jump no sender makes within a connection (far, or after the QP was idle):
//! a new connection with the same QP number, not loss.

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, finding},
    model::{FlowRef, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `qp_reuse` below, with its [`QpReuse`] table.
    QpReuseRule {
        name: "qp-reuse",
        summary: "a QP number reused by a new connection (a PSN jump no sender makes): not loss",
        scenario: Some("rule-qp-reuse"),
        evaluate: |r, t, _ctx| {
            qp_reuse(r, &t.qp_reuse)
        },
    }
}

/// The `[qp_reuse]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QpReuse {
    /// New incarnations, over all flows, from which the rule fires.
    pub min_resets: u64,
}

impl Default for QpReuse {
    fn default() -> Self {
        Self { min_resets: 1 }
    }
}

fn qp_reuse(r: &Report, c: &QpReuse) -> Outcome {
    let followed = r.flows.iter().filter(|f| f.psn_followed()).count() as u64;
    if followed == 0 {
        return Outcome::InsufficientData(
            "no flow with requests of a connected QP (RC, UC, XRC) to follow PSNs in".into(),
        );
    }
    let resets: u64 = r.flows.iter().map(|f| f.psn.resets).sum();
    if resets < c.min_resets.max(1) {
        return Outcome::Passed(format!(
            "no QP number reused over {}",
            count(followed, "flow")
        ));
    }
    let flows: Vec<FlowRef> = r
        .flows
        .iter()
        .filter(|f| f.psn.resets > 0)
        .map(FlowRef::of_flow)
        .collect();
    finding(
        ABOUT.name,
        Severity::Info,
        "QP numbers reused by new connections",
        format!(
            "{} on {}: their PSNs start afresh (counted apart, not as loss)",
            count(resets, "new incarnation"),
            count(flows.len() as u64, "flow")
        ),
        vec![("resets", resets.into())],
        flows,
        "A PSN jump no sender makes within one connection (far beyond any outstanding window, or after the QP sat idle) is a new connection on the same QP number and UDP port: a tool run twice, or a job restarted. Each incarnation is analysed on its own: the reuse itself loses nothing (holes the old one left open count as lost, in loss).",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, insufficient, passed, report, run};

    #[test]
    fn resets_fire_as_info() {
        let t = Thresholds::default();
        let mut r = report();
        insufficient(run(&QpReuseRule, &r, &t));
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.write) = (10, 10);
        r.flows.push(f);
        assert_eq!(
            passed(run(&QpReuseRule, &r, &t)),
            "no QP number reused over 1 flow"
        );
        r.flows[0].psn.resets = 1;
        assert_eq!(fired(run(&QpReuseRule, &r, &t)).severity, Severity::Info);
    }
}
