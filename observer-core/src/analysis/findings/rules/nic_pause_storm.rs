//! The NIC's pause storm watchdog acted: a port kept pausing its peer, and the NIC stopped
//! sending its pauses.

use serde::{Deserialize, Serialize};

use crate::analysis::findings::{Outcome, Severity, finding, nic_window};
use crate::model::Report;

rule! {
    NicPauseStormRule {
        name: "nic-pause-storm",
        summary: "NIC counters: pause storm events (the NIC's watchdog stopped a pause storm)",
        scenario: Some("rule-nic-pause-storm"),
        needs_roce: false,
        evaluate: |r, t, _ctx| {
            nic_pause_storm(r, &t.nic_pause_storm)
        },
    }
}

/// The `[nic_pause_storm]` table of the rules file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicPauseStorm {
    /// Pause storm events on a netdev over the window from which the rule fires.
    pub min_events: u64,
}

impl Default for NicPauseStorm {
    fn default() -> Self {
        Self { min_events: 1 }
    }
}

fn nic_pause_storm(r: &Report, c: &NicPauseStorm) -> Outcome {
    let nic = match nic_window(r) {
        Ok(n) => n,
        Err(o) => return *o,
    };
    let mut judged = 0;
    let mut events = Vec::new();
    for i in &nic.interfaces {
        for (name, n) in i.counters.iter().filter(|(n, _)| n.contains("pause_storm")) {
            judged += 1;
            if n.delta >= c.min_events {
                events.push(format!("{} {name} +{}", i.name, n.delta));
            }
        }
    }
    if judged == 0 {
        return Outcome::InsufficientData("the driver counts no pause storm events".into());
    }
    if events.is_empty() {
        return Outcome::Passed(format!("no pause storm event in {:.1} s", nic.seconds));
    }
    finding(
        ABOUT.name,
        Severity::Critical,
        "Pause storm at the NIC",
        format!("in {:.1} s: {}", nic.seconds, events.join(", ")),
        vec![("events", events.clone().into())],
        Vec::new(),
        "The NIC kept its receive side paused (it could not drain what arrived: a stuck host, PCIe back-pressure, a receive buffer that does not empty) until its watchdog stopped sending pauses: the lossless priority drops meanwhile. Look at the host (CPU, PCIe errors, the driver's log).",
    )
}
