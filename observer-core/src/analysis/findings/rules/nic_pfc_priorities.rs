//! PFC enabled on more priorities than RoCE needs: the first configuration mistake, which
//! spreads pauses to traffic that needs none and shares the buffer headroom.

use serde::{Deserialize, Serialize};

use crate::analysis::findings::{Outcome, Severity, finding};
use crate::model::{Report, nic::priority_list};

rule! {
    NicPfcPrioritiesRule {
        name: "nic-pfc-priorities",
        summary: "NIC configuration: PFC enabled on more priorities than RoCE's",
        scenario: Some("rule-nic-pfc-priorities"),
        needs_roce: false,
        evaluate: |r, t, _ctx| {
            nic_pfc_priorities(r, &t.nic_pfc_priorities)
        },
    }
}

/// The `[nic_pfc_priorities]` table of the rules file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicPfcPriorities {
    /// Lossless priorities a netdev may have.
    pub max_priorities: u32,
}

impl Default for NicPfcPriorities {
    fn default() -> Self {
        Self { max_priorities: 1 }
    }
}

fn nic_pfc_priorities(r: &Report, c: &NicPfcPriorities) -> Outcome {
    let Some(nic) = &r.nic else {
        return Outcome::Skipped(super::super::NO_NIC.into());
    };
    let with_dcb: Vec<_> = nic
        .interfaces
        .iter()
        .filter_map(|i| i.dcb.as_ref().and_then(|d| d.pfc_enabled).map(|d| (i, d)))
        .collect();
    if with_dcb.is_empty() {
        return Outcome::InsufficientData("no netdev's PFC settings read".into());
    }
    let many: Vec<String> = with_dcb
        .iter()
        .filter(|(_, d)| d.count_ones() > c.max_priorities)
        .map(|(i, d)| format!("{}: priorities {}", i.name, priority_list(*d)))
        .collect();
    if many.is_empty() {
        return Outcome::Passed(format!(
            "PFC on at most {} priorit{} of {} netdev(s)",
            c.max_priorities,
            if c.max_priorities == 1 { "y" } else { "ies" },
            with_dcb.len()
        ));
    }
    finding(
        ABOUT.name,
        Severity::Warning,
        "PFC on too many priorities",
        format!("PFC enabled on {}", many.join("; ")),
        vec![("netdevs", many.clone().into())],
        Vec::new(),
        "Enable PFC on the RoCE priority only (e.g. `mlnx_qos -i IF --pfc 0,0,0,1,0,0,0,0`, or `dcb pfc set dev IF prio-pfc 3:on`): every lossless priority takes buffer headroom, and pauses on the others spread congestion to traffic that could have been dropped and resent.",
    )
}
