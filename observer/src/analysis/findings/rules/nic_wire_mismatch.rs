//! The wire against the NIC, when both views hold the same traffic (a host observed in host
//! mode with Soft-RoCE, or a host whose mirror copies are observed while its counters are
//! read): CE-marked arrivals, CNPs sent and received, and loss on arrival, counted by each.
//! A disagreement means one of them counts wrong (a NIC's CNP counters have been wrong after
//! firmware changes) or the tap does not see all of the host's traffic.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::analysis::findings::{
    About, Context, Outcome, Rule, Severity, Thresholds, finding, nic_window,
};
use crate::model::{Direction, Flow, Report};

pub const ABOUT: About = About {
    name: "nic-wire-mismatch",
    summary: "The wire and the NIC's counters disagree on CE marks, CNPs or loss",
    scenario: Some("rule-nic-wire-mismatch"),
};

pub struct NicWireMismatchRule;

impl Rule for NicWireMismatchRule {
    fn about(&self) -> &'static About {
        &ABOUT
    }

    fn needs_roce(&self) -> bool {
        false
    }

    fn evaluate(&self, r: &Report, t: &Thresholds, _ctx: &Context) -> Outcome {
        nic_wire_mismatch(r, &t.nic_wire_mismatch)
    }
}

/// The `[nic_wire_mismatch]` table of the rules file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicWireMismatch {
    /// Counts below this on both sides are not compared (the readings bracket the capture
    /// loosely).
    pub min_count: u64,
    /// Difference, as a share of the larger count (%), from which the two disagree.
    pub min_difference_percent: f64,
}

impl Default for NicWireMismatch {
    fn default() -> Self {
        Self {
            min_count: 10,
            min_difference_percent: 10.0,
        }
    }
}

/// Which flows are the host's own: arriving at it and leaving it.
fn sides<'a>(r: &'a Report, addrs: &[IpAddr]) -> Option<(Vec<&'a Flow>, Vec<&'a Flow>)> {
    if !addrs.is_empty() {
        let into = r
            .flows
            .iter()
            .filter(|f| addrs.contains(&f.dst_ip))
            .collect();
        let from = r
            .flows
            .iter()
            .filter(|f| addrs.contains(&f.src_ip))
            .collect();
        return Some((into, from));
    }
    // Host mode sees both directions, told apart by its hooks.
    if r.flows.iter().any(|f| f.direction == Direction::Egress) {
        let into = r
            .flows
            .iter()
            .filter(|f| f.direction == Direction::Ingress)
            .collect();
        let from = r
            .flows
            .iter()
            .filter(|f| f.direction == Direction::Egress)
            .collect();
        return Some((into, from));
    }
    None
}

fn nic_wire_mismatch(r: &Report, c: &NicWireMismatch) -> Outcome {
    let nic = match nic_window(r) {
        Ok(n) => n,
        Err(o) => return *o,
    };
    if r.flows.is_empty() {
        return Outcome::InsufficientData("no wire view to compare the NIC's counters with".into());
    }
    let addrs: Vec<IpAddr> = nic
        .interfaces
        .iter()
        .flat_map(|i| i.addresses.iter().copied())
        .collect();
    let Some((into, from)) = sides(r, &addrs) else {
        return Outcome::InsufficientData(
            "which wire traffic is the host's own is unknown (no address of its netdevs, no host-mode directions)".into(),
        );
    };
    let sum = |names: &[&str]| -> Option<u64> {
        let mut any = false;
        let mut total = 0;
        for p in nic.devices.iter().flat_map(|d| &d.ports) {
            for n in names {
                if let Some(v) = p.hw(n) {
                    any = true;
                    total += v;
                }
            }
        }
        any.then_some(total)
    };
    let wire = |flows: &[&Flow], f: fn(&Flow) -> u64| flows.iter().map(|x| f(x)).sum::<u64>();
    let pairs = [
        (
            "CE-marked arrivals",
            wire(&into, |f| f.ecn.ce),
            sum(&["np_ecn_marked_roce_packets"]),
        ),
        (
            "CNPs sent",
            wire(&from, |f| f.ops.cnp),
            sum(&["np_cnp_sent"]),
        ),
        (
            "CNPs received",
            wire(&into, |f| f.ops.cnp),
            sum(&["rp_cnp_handled", "rp_cnp_ignored"]),
        ),
    ];
    let mut compared = Vec::new();
    let mut differ = Vec::new();
    for (what, w, n) in pairs {
        let Some(n) = n else { continue };
        let big = w.max(n);
        if big < c.min_count {
            continue;
        }
        let diff = w.abs_diff(n) as f64 * 100.0 / big as f64;
        compared.push(format!("{what}: wire {w}, NIC {n}"));
        if diff >= c.min_difference_percent {
            differ.push(format!("{what}: wire {w}, NIC {n}"));
        }
    }
    // Loss: the wire counts loss events, the NIC out-of-sequence arrivals (one loss makes one
    // or more): only one side seeing any is a disagreement.
    if let Some(n) = sum(&["out_of_sequence"]) {
        let w = wire(&into, |f| f.psn.lost_events);
        if w > 0 || n > 0 {
            compared.push(format!(
                "loss on arrival: wire {w} events, NIC {n} out of sequence"
            ));
            if (w == 0) != (n == 0) {
                differ.push(format!(
                    "loss on arrival: wire {w} events, NIC {n} out of sequence"
                ));
            }
        }
    }
    if compared.is_empty() {
        return Outcome::InsufficientData(format!(
            "no count of {} or more on either side to compare (CE, CNPs, loss)",
            c.min_count
        ));
    }
    if differ.is_empty() {
        return Outcome::Passed(format!("wire and NIC agree: {}", compared.join("; ")));
    }
    finding(
        ABOUT.name,
        Severity::Warning,
        "The wire and the NIC disagree",
        differ.join("; "),
        vec![
            ("differences", differ.clone().into()),
            ("compared", compared.into()),
        ],
        Vec::new(),
        "One side counts wrong or sees other traffic: a tap that carries only some of the host's links, or readings that bracket more than the capture, explain a NIC that counts more; a NIC counting less than the wire shows has been seen after firmware changes (CNP counters). Compare over a quiet window, then check the firmware.",
    )
}
