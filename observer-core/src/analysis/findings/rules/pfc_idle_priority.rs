//! PFC pauses on a priority that carries no RoCE: PFC enabled on more priorities than the
//! lossless class.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, finding, is_connection_management, list},
    model::{Flow, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `pfc_idle_priority` below, with its [`PfcIdlePriority`] table.
    PfcIdlePriorityRule {
        name: "pfc-idle-priority",
        summary: "PFC pauses on a priority that carries no RoCE (PFC enabled on too many priorities)",
        scenario: Some("rule-pfc-idle-priority"),
        evaluate: |r, t, _ctx| {
            pfc_idle_priority(r, &t.pfc_idle_priority)
        },
    }
}

/// The `[pfc_idle_priority]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PfcIdlePriority {
    /// The priorities RoCE uses when the frames carry no VLAN tag to tell (the common
    /// lossless class is 3).
    pub roce_priorities: Vec<u8>,
    /// Pause frames (XOFF) on an idle priority from which the rule fires.
    pub min_frames: u64,
}

impl Default for PfcIdlePriority {
    fn default() -> Self {
        Self {
            roce_priorities: vec![3],
            min_frames: 1,
        }
    }
}

fn pfc_idle_priority(r: &Report, c: &PfcIdlePriority) -> Outcome {
    let Some(pfc) = &r.pfc else {
        return Outcome::InsufficientData("no PAUSE / PFC frame to judge".into());
    };
    // Connection management's priority is not the RoCE data's.
    let data: Vec<&Flow> = r
        .flows
        .iter()
        .filter(|f| !is_connection_management(f))
        .collect();
    let mut roce: BTreeSet<u8> = data.iter().flat_map(|f| f.pcp.clone()).collect();
    if data.is_empty() || data.iter().any(|f| f.untagged) {
        roce.extend(c.roce_priorities.iter().copied());
    }
    let mut idle: BTreeMap<u8, u64> = BTreeMap::new();
    for src in &pfc.sources {
        for p in &src.priorities {
            let xoff = p.counts.frames - p.counts.xon;
            if !roce.contains(&p.priority) && xoff > 0 {
                *idle.entry(p.priority).or_default() += xoff;
            }
        }
    }
    idle.retain(|_, n| *n >= c.min_frames);
    if idle.is_empty() {
        return Outcome::Passed(format!("pauses only on RoCE priorities ({})", list(&roce)));
    }
    let per: Vec<String> = idle
        .iter()
        .map(|(p, n)| format!("priority {p}: {}", count(*n, "pause frame")))
        .collect();
    finding(
        ABOUT.name,
        Severity::Warning,
        "PFC pauses on priorities that carry no RoCE",
        format!(
            "pauses on {} {} while RoCE uses {}",
            if idle.len() == 1 {
                "priority"
            } else {
                "priorities"
            },
            list(idle.keys()),
            list(&roce)
        ),
        vec![
            ("idle_priorities", per.into()),
            ("roce_priorities", list(&roce).into()),
        ],
        Vec::new(),
        "PFC is enabled on more priorities than the lossless RoCE class: other traffic gets paused too (and can spread congestion). Enable PFC only on the RoCE priority on NICs and switches; if RoCE really uses these priorities untagged, list them in pfc_idle_priority.roce_priorities.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, insufficient, passed, pfc, report, run};

    #[test]
    fn pauses_on_a_priority_without_roce_fire() {
        let t = Thresholds::default();
        let mut r = report();
        // No pause frame: nothing to judge.
        assert_eq!(
            insufficient(run(&PfcIdlePriorityRule, &r, &t)),
            "no PAUSE / PFC frame to judge"
        );
        // No flows: RoCE is taken to use the configured priorities (3).
        r.pfc = Some(pfc(&[(3, 5, 0, None), (5, 4, 1, None)]));
        let f = fired(run(&PfcIdlePriorityRule, &r, &t));
        assert_eq!(
            f.evidence["idle_priorities"][0],
            "priority 5: 3 pause frames"
        );
        // Tagged RoCE on priority 5.
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send, f.pcp) = (10, 10, vec![5]);
        r.flows.push(f);
        r.pfc = Some(pfc(&[(5, 4, 1, None)]));
        let note = passed(run(&PfcIdlePriorityRule, &r, &t));
        assert_eq!(note, "pauses only on RoCE priorities (5)");
        // Connection management on priority 4 does not make 4 a RoCE priority.
        let mut cm = flow("10.0.0.1", "10.0.0.2");
        (cm.dest_qp, cm.packets, cm.ops.send, cm.pcp) = (1, 4, 4, vec![4]);
        r.flows.push(cm);
        r.pfc = Some(pfc(&[(4, 4, 1, None)]));
        let f = fired(run(&PfcIdlePriorityRule, &r, &t));
        assert_eq!(f.evidence["roce_priorities"], "5");
    }
}
