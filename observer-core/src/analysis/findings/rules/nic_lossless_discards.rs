//! Discards on a priority PFC makes lossless: the lossless class drops (headroom too small,
//! PFC thresholds wrong, or PFC not negotiated with the switch).

use serde::{Deserialize, Serialize};

use crate::analysis::findings::{Outcome, Severity, finding, nic_window};
use crate::model::Report;

rule! {
    NicLosslessDiscardsRule {
        name: "nic-lossless-discards",
        summary: "NIC counters: discards on a priority PFC makes lossless",
        scenario: Some("rule-nic-lossless-discards"),
        needs_roce: false,
        evaluate: |r, t, _ctx| {
            nic_lossless_discards(r, &t.nic_lossless_discards)
        },
    }
}

/// The `[nic_lossless_discards]` table of the rules file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicLosslessDiscards {
    /// Discards on one lossless priority over the window from which the rule fires.
    pub min_discards: u64,
}

impl Default for NicLosslessDiscards {
    fn default() -> Self {
        Self { min_discards: 1 }
    }
}

fn nic_lossless_discards(r: &Report, c: &NicLosslessDiscards) -> Outcome {
    let nic = match nic_window(r) {
        Ok(n) => n,
        Err(o) => return *o,
    };
    let mut judged = 0;
    let mut drops = Vec::new();
    for i in &nic.interfaces {
        let Some(pfc) = i.dcb.as_ref().and_then(|d| d.pfc_enabled) else {
            continue;
        };
        let Some(counts) = i.lossless_discards(pfc) else {
            continue;
        };
        for (what, d) in counts {
            judged += 1;
            if d >= c.min_discards {
                drops.push(format!("{} {what}: {d} discarded", i.name));
            }
        }
    }
    if judged == 0 {
        return Outcome::InsufficientData(
            "no discard counter of a lossless priority (needs the DCB settings, and rx_prio<p>_discards or per-class discards with ETS's map)".into(),
        );
    }
    if drops.is_empty() {
        return Outcome::Passed(format!(
            "no discard in {judged} counter(s) of lossless priorities in {:.1} s",
            nic.seconds
        ));
    }
    finding(
        ABOUT.name,
        Severity::Critical,
        "A lossless priority drops",
        format!("in {:.1} s, {}", nic.seconds, drops.join(", ")),
        vec![("discards", drops.clone().into())],
        Vec::new(),
        "PFC should make this priority lossless, yet the NIC dropped on arrival: the receive buffer's headroom is too small for the cable length and MTU, the PFC thresholds are wrong, or the peer ignores the pauses (PFC not enabled on the same priority at the switch).",
    )
}
