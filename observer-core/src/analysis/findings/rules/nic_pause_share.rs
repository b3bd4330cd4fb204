//! A netdev paused (or pausing its peer) for a large share of the window, by the driver's
//! pause duration counters.

use serde::{Deserialize, Serialize};

use crate::analysis::findings::{Outcome, Severity, finding, nic_window};
use crate::model::Report;

rule! {
    NicPauseShareRule {
        name: "nic-pause-share",
        summary: "NIC counters: a priority paused for a large share of the window",
        scenario: Some("rule-nic-pause-share"),
        needs_roce: false,
        evaluate: |r, t, _ctx| {
            nic_pause_share(r, &t.nic_pause_share)
        },
    }
}

/// The `[nic_pause_share]` table of the rules file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicPauseShare {
    /// Share of the window (%) a priority is paused, received or sent, from which it fires.
    pub min_percent: f64,
}

impl Default for NicPauseShare {
    fn default() -> Self {
        Self { min_percent: 10.0 }
    }
}

fn nic_pause_share(r: &Report, c: &NicPauseShare) -> Outcome {
    let nic = match nic_window(r) {
        Ok(n) => n,
        Err(o) => return *o,
    };
    let window_us = nic.seconds * 1e6;
    let mut judged = 0;
    let mut worst: Vec<(f64, String)> = Vec::new();
    for i in &nic.interfaces {
        for p in &i.priorities {
            for (us, what) in [
                (p.rx_pause_us, "held by received pauses"),
                (p.tx_pause_us, "pausing its peer"),
            ] {
                let Some(us) = us else { continue };
                judged += 1;
                let share = (us as f64 / window_us * 100.0).min(100.0);
                if share >= c.min_percent {
                    worst.push((
                        share,
                        format!(
                            "{} priority {}: {what} {share:.1}% of the time",
                            i.name, p.priority
                        ),
                    ));
                }
            }
        }
    }
    if judged == 0 {
        return Outcome::InsufficientData(
            "the driver counts no pause duration per priority (…_prio<p>_pause_duration)".into(),
        );
    }
    if worst.is_empty() {
        return Outcome::Passed(format!(
            "every priority paused under {}% of {:.1} s",
            c.min_percent, nic.seconds
        ));
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    finding(
        ABOUT.name,
        Severity::Warning,
        "Long PFC pauses at the NIC",
        worst[0].1.clone(),
        vec![
            (
                "pauses",
                worst
                    .iter()
                    .map(|(_, s)| s.clone())
                    .collect::<Vec<_>>()
                    .into(),
            ),
            ("window_seconds", nic.seconds.into()),
        ],
        Vec::new(),
        "Received pauses hold this host's transmitter: congestion downstream (incast at a receiver, a slow receiver) reaches back to it. Sent pauses mean this host cannot take what arrives (receive buffer, PCIe, a host too slow to post receives). ECN/DCQCN should act before PFC does.",
    )
}
