//! The wire against the NIC, when both views hold the same traffic (a host whose mirror copies
//! are observed while its counters are read, or one observed in host mode whose driver has
//! mlx5's counter names): CE-marked arrivals, CNPs sent and received, and loss on arrival,
//! counted by each.
//!
//! The NIC's readings bracket the wire's window (taken before the observation starts and after
//! it ends), and a tap may carry only some of the host's links: the NIC counting *more* than
//! the wire is innocent. Only a NIC counting *less* than the wire shows is a disagreement (a
//! NIC's counters have been wrong after firmware changes: CNPs at Meta).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::analysis::findings::{Outcome, Severity, finding, nic_window};
use crate::model::{Direction, Flow, Report};

rule! {
    NicWireMismatchRule {
        name: "nic-wire-mismatch",
        summary: "The wire and the NIC's counters disagree on CE marks, CNPs or loss",
        scenario: Some("rule-nic-wire-mismatch"),
        needs_roce: false,
        evaluate: |r, t, _ctx| {
            nic_wire_mismatch(r, &t.nic_wire_mismatch)
        },
    }
}

/// Loss events on the wire from which the NIC must have counted some.
const MIN_LOSS_EVENTS: u64 = 3;

/// The `[nic_wire_mismatch]` table of the rules file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicWireMismatch {
    /// Wire counts below this are not compared.
    pub min_count: u64,
    /// How far (%) the NIC's count may fall short of the wire's before they disagree.
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
    let Some((into, from)) = sides(r, &addrs).filter(|(i, f)| !i.is_empty() || !f.is_empty())
    else {
        return Outcome::InsufficientData(
            "no wire traffic is the host's own (none to or from its netdevs' addresses, no host-mode directions)".into(),
        );
    };
    let sum = |names: &[&str]| -> Option<u64> {
        let mut any = false;
        let mut total = 0u64;
        for p in nic.devices.iter().flat_map(|d| &d.ports) {
            for n in names {
                if let Some(v) = p.hw(n) {
                    any = true;
                    total = total.saturating_add(v);
                }
            }
        }
        any.then_some(total)
    };
    // A flow seen in several mirror sessions (two taps on one path) is one flow: its largest
    // count, not their sum.
    let wire = |flows: &[&Flow], f: fn(&Flow) -> u64| {
        let mut per: std::collections::BTreeMap<_, u64> = std::collections::BTreeMap::new();
        for x in flows {
            let v = per
                .entry((x.src_ip, x.dst_ip, x.dest_qp, x.udp_src_port, x.direction))
                .or_default();
            *v = (*v).max(f(x));
        }
        per.values().fold(0u64, |t, v| t.saturating_add(*v))
    };
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
        if w < c.min_count {
            continue;
        }
        compared.push(format!("{what}: wire {w}, NIC {n}"));
        // The NIC counts a longer window than the wire's: only fewer than the wire is wrong.
        let short = w.saturating_sub(n) as f64 * 100.0 / w as f64;
        if short >= c.min_difference_percent {
            differ.push(format!("{what}: wire {w}, NIC {n}"));
        }
    }
    // Loss: the wire counts loss events, the NIC out-of-sequence arrivals (one loss makes one or
    // more): the wire seeing loss the NIC never counted is a disagreement.
    // Only where the wire is the host's own (no mirror copies, which a mirror session may drop
    // on its own).
    let direct: Vec<&Flow> = into
        .iter()
        .copied()
        .filter(|f| f.mirror.is_none())
        .collect();
    if let Some(n) = sum(&["out_of_sequence"]) {
        let w = wire(&direct, |f| f.psn.lost_events);
        if w >= MIN_LOSS_EVENTS {
            compared.push(format!(
                "loss on arrival: wire {w} events, NIC {n} out of sequence"
            ));
            if n == 0 {
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
        "The NIC counts fewer than the wire shows it received or sent, though its readings span a longer window: its counter is wrong or stuck (seen after firmware changes, for CNP counters), or the counter counts on another port or device than the traffic uses. Compare over a quiet window, check the firmware against the fleet's, and do not trust that counter in dashboards meanwhile.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, insufficient, passed, report, run};
    use crate::model::nic::{Counter, Device, Interface, Nic, Port};

    /// A NIC whose port counted `marked` ECN-marked arrivals and `oos` out-of-sequence ones
    /// over a second, on a host with `addrs`.
    fn nic(addrs: &[&str], marked: u64, oos: u64) -> Nic {
        let mut port = Port::default();
        for (name, delta) in [
            ("np_ecn_marked_roce_packets", marked),
            ("out_of_sequence", oos),
        ] {
            port.hw_counters.insert(
                name.into(),
                Counter {
                    value: delta,
                    delta,
                    reset: false,
                },
            );
        }
        Nic {
            seconds: 1.0,
            devices: vec![Device {
                name: "mlx5_0".into(),
                ports: vec![port],
                ..Device::default()
            }],
            interfaces: vec![Interface {
                name: "eth0".into(),
                addresses: addrs.iter().map(|a| a.parse().unwrap()).collect(),
                ..Interface::default()
            }],
            ..Nic::default()
        }
    }

    #[test]
    fn only_a_nic_counting_less_than_the_wire_disagrees() {
        let t = Thresholds::default();
        let mut r = report();
        let mut f = flow("198.18.0.1", "198.18.0.2");
        f.ecn.ce = 50;
        r.flows = vec![f];
        // The host's traffic is unknown without its addresses or host-mode directions.
        r.nic = Some(nic(&[], 0, 0));
        insufficient(run(&NicWireMismatchRule, &r, &t));
        // None of the wire's flows is the host's.
        r.nic = Some(nic(&["198.18.0.9"], 0, 0));
        insufficient(run(&NicWireMismatchRule, &r, &t));
        // The NIC counts more than the wire over its longer window: innocent.
        r.nic = Some(nic(&["198.18.0.2"], 80, 0));
        let note = passed(run(&NicWireMismatchRule, &r, &t));
        assert_eq!(
            note,
            "wire and NIC agree: CE-marked arrivals: wire 50, NIC 80"
        );
        // Fewer than the wire shows: wrong.
        r.nic = Some(nic(&["198.18.0.2"], 40, 0));
        let f = fired(run(&NicWireMismatchRule, &r, &t));
        assert_eq!(f.summary, "CE-marked arrivals: wire 50, NIC 40");
        // Host mode: its directions name its traffic; loss the NIC never counted disagrees.
        let mut rx = flow("198.18.0.1", "198.18.0.2");
        rx.psn.lost_events = 4;
        let mut tx = flow("198.18.0.2", "198.18.0.1");
        tx.direction = Direction::Egress;
        r.flows = vec![rx, tx];
        r.nic = Some(nic(&[], 0, 0));
        let f = fired(run(&NicWireMismatchRule, &r, &t));
        assert_eq!(
            f.summary,
            "loss on arrival: wire 4 events, NIC 0 out of sequence"
        );
        r.nic = Some(nic(&[], 0, 9));
        passed(run(&NicWireMismatchRule, &r, &t));
    }
}
