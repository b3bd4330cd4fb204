//! The NIC counts out-of-sequence arrivals, sequence errors or ACK timeouts: packets lost or
//! reordered on the way, which a tap may not show (beyond it, or with no tap at all).

use serde::{Deserialize, Serialize};

use crate::analysis::findings::{Outcome, Severity, finding, nic_window};
use crate::model::Report;
use crate::model::nic::TRANSPORT_ERRORS;

rule! {
    NicTransportErrorsRule {
        name: "nic-transport-errors",
        summary: "NIC counters: out-of-sequence arrivals, sequence errors or ACK timeouts (loss the wire may not show)",
        scenario: Some("rule-nic-transport-errors"),
        needs_roce: false,
        evaluate: |r, t, _ctx| {
            nic_transport_errors(r, &t.nic_transport_errors)
        },
    }
}

/// The `[nic_transport_errors]` table of the rules file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicTransportErrors {
    /// Errors on one port over the window from which the rule fires.
    pub min_errors: u64,
}

impl Default for NicTransportErrors {
    fn default() -> Self {
        Self { min_errors: 1 }
    }
}

fn nic_transport_errors(r: &Report, c: &NicTransportErrors) -> Outcome {
    let nic = match nic_window(r) {
        Ok(n) => n,
        Err(o) => return *o,
    };
    let mut judged = 0;
    let mut bad = Vec::new();
    let mut timeouts = 0;
    for d in &nic.devices {
        for p in &d.ports {
            let counts: Vec<(&str, u64)> = TRANSPORT_ERRORS
                .iter()
                .filter_map(|n| p.hw(n).map(|v| (*n, v)))
                .collect();
            if counts.is_empty() {
                continue;
            }
            judged += 1;
            let total: u64 = counts.iter().map(|(_, v)| v).sum();
            timeouts += p.hw("local_ack_timeout_err").unwrap_or(0);
            if total >= c.min_errors {
                let what: Vec<String> = counts
                    .iter()
                    .filter(|(_, v)| *v > 0)
                    .map(|(n, v)| format!("{n} +{v}"))
                    .collect();
                bad.push(format!("{}/{}: {}", d.name, p.port, what.join(", ")));
            }
        }
    }
    if judged == 0 {
        return Outcome::InsufficientData(
            "no port counts out-of-sequence arrivals or ACK timeouts (out_of_sequence, local_ack_timeout_err)".into(),
        );
    }
    if bad.is_empty() {
        return Outcome::Passed(format!(
            "no out-of-sequence arrival, sequence error or ACK timeout on {judged} port(s) in {:.1} s",
            nic.seconds
        ));
    }
    finding(
        ABOUT.name,
        if timeouts > 0 {
            Severity::Critical
        } else {
            Severity::Warning
        },
        "NIC counts lost or reordered packets",
        format!("in {:.1} s, {}", nic.seconds, bad[0]),
        vec![
            ("ports", bad.clone().into()),
            ("local_ack_timeout_err", timeouts.into()),
        ],
        Vec::new(),
        "Packets of the host's connections are lost or reordered: out_of_sequence and packet_seq_err count go-back-N recoveries, local_ack_timeout_err a resend after the transport timer (milliseconds each). Look for drops on the path (switch discards, a lossless priority that is not, links with errors) and for spraying that reorders.",
    )
}
