//! Two readings of a host's NIC side into the report's `nic` section: counter deltas (32-bit
//! wraps and resets told apart), the per-priority pause and discard table, the configuration
//! of the second reading, the sources the host lacks, and the QP table joined to the wire.

use std::collections::BTreeMap;

use super::Availability;
use super::host::Snapshot;
use super::rdma::{Delta, Width, counter_width, delta};
use crate::model::Flow;
use crate::model::nic::{
    AbsentSource, Counter, Device, Interface, Nic, Port, Priority, QpRow, per_priority,
};

/// The `nic` section from a reading at the start of the window and one at its end.
pub fn window(before: &Snapshot, after: &Snapshot) -> Nic {
    let mut nic = Nic {
        // A reading without its time (a copy without `taken`) leaves the window unknown.
        seconds: if before.taken_ns == 0 || after.taken_ns == 0 {
            0.0
        } else {
            after.taken_ns.saturating_sub(before.taken_ns) as f64 / 1e9
        },
        ..Nic::default()
    };
    // The sources the second reading lacks, as a copied tree records them.
    nic.absent = super::host::absences(after)
        .into_iter()
        .map(|a| AbsentSource {
            source: a.source,
            subject: a.subject,
            reason: a.reason,
        })
        .collect();
    for d in after.devices() {
        let prev = before.devices().iter().find(|p| p.name == d.name);
        nic.devices.push(Device {
            name: d.name.clone(),
            firmware: d.fw_ver.clone(),
            hca_type: d.hca_type.clone(),
            board_id: d.board_id.clone(),
            pci: d.pci.clone(),
            ports: d
                .ports
                .iter()
                .map(|p| {
                    let pp = prev.and_then(|d| d.ports.iter().find(|q| q.port == p.port));
                    Port {
                        port: p.port,
                        state: p.state.clone(),
                        link_layer: p.link_layer.clone(),
                        rate: p.rate.clone(),
                        netdevs: p.netdevs.clone(),
                        // The IBTA counters are read through the extended (64-bit) attributes.
                        counters: deltas(&p.counters, pp.map(|q| &q.counters), |_| Width::Bits64),
                        hw_counters: deltas(&p.hw_counters, pp.map(|q| &q.hw_counters), |n| {
                            counter_width(n)
                        }),
                        gids: p.gids.clone(),
                        rdma_cm: p.rdma_cm.clone(),
                    }
                })
                .collect(),
        });
    }
    for i in &after.interfaces {
        let prev = before.interface(&i.name);
        let stats = i.stats.present().map(|s| {
            let relevant: BTreeMap<String, u64> = s
                .iter()
                .filter(|(k, _)| is_roce_health(k))
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            let prev = prev.and_then(|p| p.stats.present());
            deltas(&relevant, prev, |_| Width::Bits64)
        });
        let mut counters = stats.unwrap_or_default();
        // Link flaps: sysfs's, beside the driver's statistics.
        if let Some(now) = i.carrier_changes {
            let carrier = BTreeMap::from([("carrier_changes".to_string(), now)]);
            // A first reading of the netdev without it: no known start (no delta), as for the
            // driver's counters; no first reading at all: from zero.
            let prev = prev.map(|p| {
                p.carrier_changes
                    .map(|t| BTreeMap::from([("carrier_changes".to_string(), t)]))
                    .unwrap_or_default()
            });
            counters.extend(deltas(&carrier, prev.as_ref(), |_| Width::Bits64));
        }
        nic.interfaces.push(Interface {
            optics: i.module.present().and_then(super::optics::decode),
            pfc_watchdog_ms: i.pfc_watchdog.present().copied(),
            sysctls: i.sysctls.clone(),
            name: i.name.clone(),
            mtu: i.mtu,
            addresses: i.addresses.clone(),
            driver: i.driver.present().cloned(),
            dcb: i.dcb.present().cloned(),
            dcqcn: i.dcqcn.present().cloned(),
            priorities: priorities(&counters),
            counters,
        });
    }
    nic.gpus = after.gpus.clone();
    if let Availability::Present(qps) = &after.qps {
        nic.qps = qps
            .iter()
            .map(|qp| QpRow {
                qp: qp.clone(),
                wire_packets: None,
                wire_bytes: None,
            })
            .collect();
    }
    nic
}

/// Joins each QP to the wire's flows to it (destination QP = its number, destination address
/// one of the host's where known), when the report has a wire view: a QPN is unique per device,
/// and a host's wire view has one RDMA device behind it in practice; with several, the flows
/// to that number on any of them are summed.
pub fn join_wire(nic: &mut Nic, flows: &[Flow]) {
    if flows.is_empty() {
        return;
    }
    // Where the host's addresses are known, only flows to them: a mirror port carries other
    // hosts' QPs of the same numbers.
    let addrs: Vec<std::net::IpAddr> = nic
        .interfaces
        .iter()
        .flat_map(|i| i.addresses.iter().copied())
        .collect();
    for row in &mut nic.qps {
        let (packets, bytes) = flows
            .iter()
            .filter(|f| f.dest_qp == row.qp.lqpn)
            .filter(|f| addrs.is_empty() || addrs.contains(&f.dst_ip))
            .fold((0u64, 0u64), |(p, b), f| {
                (p.saturating_add(f.packets), b.saturating_add(f.bytes))
            });
        row.wire_packets = Some(packets);
        row.wire_bytes = Some(bytes);
    }
}

/// Every counter of `now` with its delta from `prev` (a counter new in `now` grew from 0).
fn deltas(
    now: &BTreeMap<String, u64>,
    prev: Option<&BTreeMap<String, u64>>,
    width: impl Fn(&str) -> Width,
) -> BTreeMap<String, Counter> {
    now.iter()
        .map(|(name, &value)| {
            // A counter the first reading of its port lacked (unreadable then, or the netlink
            // counters missing from it) has no known start: no delta. With no first reading of
            // the port at all, it is new and counted from 0.
            let before = match prev {
                Some(p) => p.get(name).copied().unwrap_or(value),
                None => 0,
            };
            let c = match delta(width(name), before, value) {
                Delta::Grew(d) => Counter {
                    value,
                    delta: d,
                    reset: false,
                },
                Delta::Reset { since } => Counter {
                    value,
                    delta: since,
                    reset: true,
                },
            };
            (name.clone(), c)
        })
        .collect()
}

/// A driver statistic that tells of RoCE's health: PFC and link pauses, pause storms, discards,
/// per-priority traffic, the RDMA traffic of the vport, ECN and CNP counts.
pub fn is_roce_health(name: &str) -> bool {
    [
        "pause",
        "prio",
        "discard",
        "storm",
        "vport_rdma",
        "out_of_buffer",
        "ecn",
        "cnp",
    ]
    .iter()
    .any(|k| name.contains(k))
        || crate::model::nic::is_link_error(name)
}

/// The per-priority table from the driver statistics' names (mlx5's `rx_prio<p>_pause`,
/// `tx_prio<p>_pause`, `…_pause_duration` in µs, `rx_prio<p>_discards`): the priorities with
/// any of these counters. (mlx5's `rx_prio<n>_buf_discard` and `_cong_discard` count per traffic
/// class, not priority: [`Interface::lossless_discards`] maps them.)
fn priorities(counters: &BTreeMap<String, Counter>) -> Vec<Priority> {
    let mut out: BTreeMap<u8, Priority> = BTreeMap::new();
    for (name, c) in counters {
        let Some((rx, prio, what)) = per_priority(name) else {
            continue;
        };
        let p = match (rx, what) {
            (_, "pause" | "pause_duration") | (true, "discards") => {
                out.entry(prio).or_insert(Priority {
                    priority: prio,
                    ..Priority::default()
                })
            }
            // Bytes, packets, transitions: in `counters` only.
            _ => continue,
        };
        match (rx, what) {
            (true, "pause") => p.rx_pause = p.rx_pause.saturating_add(c.delta),
            (false, "pause") => p.tx_pause = p.tx_pause.saturating_add(c.delta),
            (true, "pause_duration") => {
                let us = p.rx_pause_us.get_or_insert(0);
                *us = us.saturating_add(c.delta);
            }
            (false, "pause_duration") => {
                let us = p.tx_pause_us.get_or_insert(0);
                *us = us.saturating_add(c.delta);
            }
            _ => p.discards = p.discards.saturating_add(c.delta),
        }
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::nic::host::Interface as HostInterface;
    use crate::source::nic::rdma::{RdmaDevice, RdmaPort};

    fn reading(taken_ns: u64, oos: u64, timeouts: u64, stats: &[(&str, u64)]) -> Snapshot {
        let mut port = RdmaPort {
            port: 1,
            netdevs: vec!["eth9".into()],
            ..RdmaPort::default()
        };
        port.hw_counters.insert("out_of_sequence".into(), oos);
        port.hw_counters
            .insert("local_ack_timeout_err".into(), timeouts);
        Snapshot {
            taken_ns,
            rdma: Availability::Present(vec![RdmaDevice {
                name: "mlx5_9".into(),
                fw_ver: None,
                hca_type: None,
                board_id: None,
                pci: BTreeMap::new(),
                ports: vec![port],
            }]),
            interfaces: vec![HostInterface {
                carrier_changes: None,
                pfc_watchdog: Availability::Absent {
                    reason: "none".into(),
                },
                module: Availability::Absent {
                    reason: "none".into(),
                },
                sysctls: BTreeMap::new(),
                name: "eth9".into(),
                mtu: Some(4200),
                addresses: Vec::new(),
                driver: Availability::Absent {
                    reason: "none".into(),
                },
                stats: Availability::Present(
                    stats.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                ),
                dcb: Availability::Absent {
                    reason: "no DCB".into(),
                },
                dcqcn: Availability::Absent {
                    reason: "no DCQCN".into(),
                },
            }],
            qps: Availability::Absent {
                reason: "no RDMA netlink".into(),
            },
            gpus: Vec::new(),
        }
    }

    #[test]
    fn deltas_tell_wraps_from_resets_and_fill_the_priority_table() {
        let before = reading(
            1_000_000_000,
            0xFFFF_FFF0,
            900,
            &[
                ("rx_prio3_pause", 10),
                ("rx_prio3_pause_duration", 100),
                ("rx_prio3_discards", 6),
                ("rx_prio3_buf_discard", 1),
                ("rx_prio3_cong_discard", 2),
                ("tx_prio5_pause", 0),
                ("rx_prio3_bytes", 4),
                ("rx_bytes", 1),
            ],
        );
        let after = reading(
            3_000_000_000,
            0x10,
            3,
            &[
                ("rx_prio3_pause", 15),
                ("rx_prio3_pause_duration", 600),
                ("rx_prio3_discards", 8),
                ("rx_prio3_buf_discard", 4),
                ("rx_prio3_cong_discard", 3),
                ("tx_prio5_pause", 2),
                ("rx_prio3_bytes", 9),
                ("rx_bytes", 100),
            ],
        );
        let nic = window(&before, &after);
        assert_eq!(nic.seconds, 2.0);
        let p = &nic.devices[0].ports[0];
        // Across the 32-bit wrap: 0x10 more than 0xFFFFFFF0 is 0x20.
        assert_eq!(
            p.hw_counters["out_of_sequence"],
            Counter {
                value: 0x10,
                delta: 0x20,
                reset: false
            }
        );
        // A 32-bit counter that went back from the lower half was reset.
        assert_eq!(
            p.hw_counters["local_ack_timeout_err"],
            Counter {
                value: 3,
                delta: 3,
                reset: true
            }
        );
        let i = &nic.interfaces[0];
        // Only the statistics that tell of RoCE's health.
        assert!(!i.counters.contains_key("rx_bytes"));
        assert_eq!(i.stat("rx_prio3_bytes"), Some(5));
        assert_eq!(
            i.priorities,
            [
                // The per-class discards (buf, cong) are not a priority's.
                Priority {
                    priority: 3,
                    rx_pause: 5,
                    rx_pause_us: Some(500),
                    discards: 2,
                    ..Priority::default()
                },
                Priority {
                    priority: 5,
                    tx_pause: 2,
                    ..Priority::default()
                }
            ]
        );
        let absent: Vec<(&str, &str)> = nic
            .absent
            .iter()
            .map(|a| (a.source.as_str(), a.subject.as_str()))
            .collect();
        assert_eq!(
            absent,
            [
                ("qps", ""),
                ("driver", "eth9"),
                ("dcb", "eth9"),
                ("dcqcn", "eth9"),
                ("pfc-watchdog", "eth9"),
                ("module", "eth9")
            ]
        );
    }
}
