//! The NIC counts ECN-marked RoCE arrivals but sends no CNP: its notification point is off on
//! that priority (or counts wrong), so senders never slow down.

use serde::{Deserialize, Serialize};

use crate::analysis::findings::{Outcome, Severity, finding, nic_window};
use crate::model::Report;

rule! {
    NicEcnWithoutCnpRule {
        name: "nic-ecn-without-cnp",
        summary: "NIC counters: ECN-marked RoCE packets received, but no CNP sent",
        scenario: Some("rule-nic-ecn-without-cnp"),
        needs_roce: false,
        evaluate: |r, t, _ctx| {
            nic_ecn_without_cnp(r, &t.nic_ecn_without_cnp)
        },
    }
}

/// The `[nic_ecn_without_cnp]` table of the rules file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicEcnWithoutCnp {
    /// ECN-marked arrivals on a port, over the window, from which no CNP at all is wrong.
    pub min_marked: u64,
}

impl Default for NicEcnWithoutCnp {
    fn default() -> Self {
        Self { min_marked: 100 }
    }
}

fn nic_ecn_without_cnp(r: &Report, c: &NicEcnWithoutCnp) -> Outcome {
    let nic = match nic_window(r) {
        Ok(n) => n,
        Err(o) => return *o,
    };
    let mut judged = 0;
    let mut silent = Vec::new();
    for d in &nic.devices {
        for p in &d.ports {
            let (Some(marked), Some(sent)) =
                (p.hw("np_ecn_marked_roce_packets"), p.hw("np_cnp_sent"))
            else {
                continue;
            };
            judged += 1;
            if marked >= c.min_marked && sent == 0 {
                silent.push((format!("{}/{}", d.name, p.port), marked));
            }
        }
    }
    if judged == 0 {
        return Outcome::InsufficientData(
            "no port counts ECN-marked arrivals and CNPs sent (np_ecn_marked_roce_packets, np_cnp_sent)".into(),
        );
    }
    let Some((port, marked)) = silent.first().cloned() else {
        return Outcome::Passed(format!(
            "{judged} port(s) sent CNPs for their ECN-marked arrivals (or had fewer than {})",
            c.min_marked
        ));
    };
    finding(
        ABOUT.name,
        Severity::Warning,
        "ECN marks answered by no CNP",
        format!(
            "{port}: {marked} ECN-marked RoCE packets received in {:.1} s, no CNP sent",
            nic.seconds
        ),
        vec![
            (
                "ports",
                silent
                    .iter()
                    .map(|(p, _)| p.clone())
                    .collect::<Vec<_>>()
                    .into(),
            ),
            ("np_ecn_marked_roce_packets", marked.into()),
            ("np_cnp_sent", 0.into()),
        ],
        Vec::new(),
        "The notification point is off on the priority the marked packets arrive in (ecn/roce_np/enable/<priority>), or the firmware counts wrong: check `roce-observer check`, and the CNPs on the wire.",
    )
}
