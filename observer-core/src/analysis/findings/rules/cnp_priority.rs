//! CNPs in best-effort DSCP 0 or in the data's own class: they queue behind the congestion
//! they report.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, data_dscps, data_packets, finding, list},
    model::{FlowRef, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `cnp_priority` below, with its [`CnpPriority`] table.
    CnpPriorityRule {
        name: "cnp-priority",
        summary: "CNPs in best-effort DSCP 0 or in the data's own class (CNPs must be prioritized)",
        scenario: Some("rule-cnp-priority"),
        evaluate: |r, t, _ctx| {
            cnp_priority(r, &t.cnp_priority)
        },
    }
}

/// The `[cnp_priority]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CnpPriority {
    /// CNPs needed to judge their class.
    pub min_cnps: u64,
}

impl Default for CnpPriority {
    fn default() -> Self {
        Self { min_cnps: 1 }
    }
}

fn cnp_priority(r: &Report, c: &CnpPriority) -> Outcome {
    let cnps: u64 = r.flows.iter().map(|f| f.ops.cnp).sum();
    if cnps == 0 || cnps < c.min_cnps {
        // Where CNPs travel cannot be judged without CNPs.
        return Outcome::InsufficientData(format!(
            "{} seen, {} needed to judge their class",
            count(cnps, "CNP"),
            c.min_cnps.max(1)
        ));
    }
    let data: BTreeSet<u8> = r
        .flows
        .iter()
        .filter(|f| data_packets(f) > 0)
        .flat_map(data_dscps)
        .filter(|d| *d != 0)
        .collect();
    let mut best_effort = Vec::new();
    let mut same_class = Vec::new();
    for f in r.flows.iter().filter(|f| f.ops.cnp > 0) {
        if f.cnp_dscp.contains(&0) {
            best_effort.push(FlowRef::of_flow(f));
        } else if f.cnp_dscp.iter().any(|d| data.contains(d)) {
            same_class.push(FlowRef::of_flow(f));
        }
    }
    let cnp_dscps: BTreeSet<u8> = r.flows.iter().flat_map(|f| f.cnp_dscp.clone()).collect();
    if best_effort.is_empty() && same_class.is_empty() {
        return Outcome::Passed(format!(
            "CNPs travel in DSCP {}, apart from the data's ({})",
            list(&cnp_dscps),
            list(&data)
        ));
    }
    let what = match (best_effort.is_empty(), same_class.is_empty()) {
        (false, true) => "in best-effort DSCP 0".to_string(),
        (true, false) => format!("in the data's own class (DSCP {})", list(&data)),
        _ => format!(
            "in best-effort DSCP 0 and in the data's class (DSCP {})",
            list(&data)
        ),
    };
    finding(
        ABOUT.name,
        Severity::Warning,
        "CNPs are not prioritized",
        format!(
            "CNPs of {} travel {what}; CNP DSCPs seen: {}",
            count((best_effort.len() + same_class.len()) as u64, "flow"),
            list(&cnp_dscps)
        ),
        vec![
            ("cnps", cnps.into()),
            ("cnp_dscps", list(&cnp_dscps).into()),
            ("data_dscps", list(&data).into()),
            ("flows_best_effort", best_effort.len().into()),
            ("flows_same_class", same_class.len().into()),
        ],
        best_effort.into_iter().chain(same_class).collect(),
        "A CNP queued behind the congestion it reports arrives too late for DCQCN to act: send CNPs in their own strict-priority class (commonly DSCP 48, e.g. mlx5: /sys/class/net/<if>/ecn/roce_np/cnp_dscp and cnp_802p_prio) and map that DSCP to a high-priority queue on every switch.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, passed, report, run};

    /// Data in DSCP 26 from .1 to .2, and .2's CNPs back in `cnp_dscp`.
    fn cnps_in(cnp_dscp: u8) -> Report {
        let mut r = report();
        let mut d = flow("10.0.0.1", "10.0.0.2");
        (d.packets, d.ops.send, d.dscp) = (10, 10, vec![26]);
        r.flows.push(d);
        let mut c = flow("10.0.0.2", "10.0.0.1");
        (c.packets, c.ops.cnp, c.dscp, c.cnp_dscp) = (2, 2, vec![cnp_dscp], vec![cnp_dscp]);
        r.flows.push(c);
        r
    }

    #[test]
    fn cnps_in_dscp_0_or_the_data_class_fire_in_their_own_class_pass() {
        let t = Thresholds::default();
        let f = fired(run(&CnpPriorityRule, &cnps_in(0), &t));
        assert!(f.summary.contains("best-effort DSCP 0"), "{}", f.summary);
        let f = fired(run(&CnpPriorityRule, &cnps_in(26), &t));
        assert!(f.summary.contains("the data's own class"), "{}", f.summary);
        let note = passed(run(&CnpPriorityRule, &cnps_in(48), &t));
        assert_eq!(note, "CNPs travel in DSCP 48, apart from the data's (26)");
        // No CNP: where they travel cannot be judged.
        assert_eq!(
            crate::analysis::findings::testing::insufficient(run(&CnpPriorityRule, &report(), &t)),
            "0 CNPs seen, 1 needed to judge their class"
        );
        // Connection management in DSCP 48 is not the data's class.
        let mut r = cnps_in(48);
        let mut cm = flow("10.0.0.1", "10.0.0.2");
        (cm.dest_qp, cm.packets, cm.ops.send, cm.dscp) = (1, 4, 4, vec![48]);
        r.flows.push(cm);
        let note = passed(run(&CnpPriorityRule, &r, &t));
        assert_eq!(note, "CNPs travel in DSCP 48, apart from the data's (26)");
    }
}
