//! Connection pairing for the hash model: the two directions of an RC connection (swapped IP
//! addresses, the same UDP source port: ACKs, NAKs and CNPs travel in reverse), with both QP
//! numbers recovered from the BTH destination QPs, and the source port checked against the
//! Linux RDMA drivers' rule; then the connections the report paired on their PSNs, whose
//! directions have ports of their own.

use std::{collections::BTreeMap, net::IpAddr};

use crate::model::Flow;
pub use crate::model::ecmp::Unpaired;

pub use observer_common::wire::{flow_label_to_udp_sport, rdma_udp_sport};

/// What the source port of a connection says about its ECMP entropy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum SourcePort {
    /// Equal to the drivers' rule for the two QPNs: varies per connection.
    Conforming,
    /// Not the drivers' rule (a GRH flow label, an application's or NIC's fixed port):
    /// `expected` is what the rule would have given.
    Overridden { expected: u16 },
    /// Several queue pairs share this 5-tuple in one direction: they hash alike, no entropy.
    SharedTuple,
    /// Each direction has a port of its own (older drivers take it from the sender's own QPN
    /// or a per-QP context, applications set a flow label per side): the report paired the
    /// directions on their PSNs. `b_to_a` is the reverse direction's port.
    PerDirection { b_to_a: u16 },
}

/// Both directions of one connection.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Connection {
    /// The endpoints, `a` the lower address.
    pub a: IpAddr,
    pub b: IpAddr,
    pub udp_src_port: u16,
    /// The QP numbers at `a` (the destination QP of b -> a) and at `b` (of a -> b).
    pub qpn_a: u32,
    pub qpn_b: u32,
    /// Indexes of the flows a -> b and b -> a in the input.
    pub flows: [usize; 2],
    pub source_port: SourcePort,
}

/// The pairing of a flow set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairing {
    pub connections: Vec<Connection>,
    /// Flows without a reverse direction (one-way capture, UD, a connection whose other
    /// direction was not seen, QPs sharing a 5-tuple the rule cannot match up), by index.
    pub unpaired: Vec<usize>,
    /// Flows that share their 5-tuple (addresses, source port, one direction) with another
    /// flow to another QP: no entropy between them, paired or not.
    pub shared_tuple_flows: Vec<usize>,
    /// Flows to QP 1 (the GSI QP: connection management over UD), never paired.
    pub qp1: Vec<usize>,
    /// Why the unpaired flows are.
    pub why: Unpaired,
}

/// Where a flow was seen, apart from its addresses: the mirror session or kind (the same
/// connection through two mirrors is two). Direction (host egress) is left out: a host sees
/// its own connections leave and arrive.
type Context = (Option<u16>, Option<String>);

fn context(f: &Flow) -> Context {
    match &f.mirror {
        None => (None, None),
        Some(m) => (m.session, m.kind.clone()),
    }
}

/// Pairs the flows: per (address pair, source port, mirror), a flow each way is a connection.
/// Where several flows share a direction, the drivers' rule matches them up (both QPNs must give
/// the port); the rest stay unpaired, and the connections found are marked `SharedTuple`.
pub fn pair(flows: &[Flow]) -> Pairing {
    pair_with(flows, &[])
}

/// [`pair`], then the flows it left unpaired that are the two directions of a connection the
/// report paired on its PSNs (`joined`: the report's connections), one flow each way in one
/// observation: a connection whose directions have ports of their own
/// ([`SourcePort::PerDirection`]), or whose one port other QPs share
/// ([`SourcePort::SharedTuple`]). A connection that moved ports keeps a connection per port
/// where both ways moved together, and its other flows stay unpaired: each port is a path of
/// its own to the hash.
pub fn pair_with(flows: &[Flow], joined: &[crate::model::connections::Connection]) -> Pairing {
    let (mut out, mut reasons) = pair_by_port(flows);
    for c in joined
        .iter()
        .filter(|c| c.paired_by.as_deref() == Some("psn"))
    {
        let (Some(qa), Some(qb)) = (c.a.qp, c.b.qp) else {
            continue;
        };
        // The unpaired flow from `from` to `to`'s QP `qp`, if exactly one.
        let one = |from: IpAddr, to: IpAddr, qp: u32, out: &Pairing| -> Option<usize> {
            let mut it = out.unpaired.iter().copied().filter(|i| {
                let f = &flows[*i];
                f.src_ip == from && f.dst_ip == to && f.dest_qp == qp
            });
            match (it.next(), it.next()) {
                (Some(i), None) => Some(i),
                _ => None,
            }
        };
        let (Some(f), Some(r)) = (one(c.a.ip, c.b.ip, qb, &out), one(c.b.ip, c.a.ip, qa, &out))
        else {
            continue;
        };
        if context(&flows[f]) != context(&flows[r]) {
            continue;
        }
        out.unpaired.retain(|i| *i != f && *i != r);
        reasons.retain(|(i, _)| *i != f && *i != r);
        // `a` the lower address, as the port pairing has it.
        let (f, r, qa, qb) = if flows[f].src_ip <= flows[f].dst_ip {
            (f, r, qa, qb)
        } else {
            (r, f, qb, qa)
        };
        out.connections.push(Connection {
            a: flows[f].src_ip,
            b: flows[f].dst_ip,
            udp_src_port: flows[f].udp_src_port,
            qpn_a: qa,
            qpn_b: qb,
            flows: [f, r],
            // One port both ways that other QPs share: the port could not pair them.
            source_port: if flows[f].udp_src_port == flows[r].udp_src_port {
                SourcePort::SharedTuple
            } else {
                SourcePort::PerDirection {
                    b_to_a: flows[r].udp_src_port,
                }
            },
        });
    }
    for (_, why) in reasons {
        match why {
            Why::OneWay => out.why.one_way += 1,
            Why::OtherMirror => out.why.other_mirror += 1,
            Why::SharedTuple => out.why.shared_tuple += 1,
        }
    }
    out
}

/// Why a flow was left unpaired by its port.
#[derive(Clone, Copy)]
enum Why {
    OneWay,
    OtherMirror,
    SharedTuple,
}

/// The pairing by port, with why each unpaired flow is (tallied by the caller).
fn pair_by_port(flows: &[Flow]) -> (Pairing, Vec<(usize, Why)>) {
    let mut reasons = Vec::new();
    type Group = (Vec<usize>, Vec<usize>);
    let mut groups: BTreeMap<(IpAddr, IpAddr, u16, Context), Group> = BTreeMap::new();
    let mut out = Pairing::default();
    for (i, f) in flows.iter().enumerate() {
        if f.dest_qp == 1 {
            out.qp1.push(i);
            continue;
        }
        let (lo, hi, forward) = if f.src_ip <= f.dst_ip {
            (f.src_ip, f.dst_ip, true)
        } else {
            (f.dst_ip, f.src_ip, false)
        };
        let g = groups
            .entry((lo, hi, f.udp_src_port, context(f)))
            .or_default();
        if forward { &mut g.0 } else { &mut g.1 }.push(i);
    }
    // Address pairs and ports seen each way, whatever the mirror: a flow without its reverse in
    // its own mirror may have it in another.
    let mut ways: BTreeMap<(IpAddr, IpAddr, u16), [usize; 2]> = BTreeMap::new();
    for ((a, b, sport, _), (fwd, rev)) in &groups {
        let w = ways.entry((*a, *b, *sport)).or_default();
        w[0] += fwd.len();
        w[1] += rev.len();
    }
    for ((a, b, sport, _), (mut fwd, mut rev)) in groups {
        let shared = fwd.len() > 1 || rev.len() > 1;
        for side in [&fwd, &rev] {
            if side.len() > 1 {
                out.shared_tuple_flows.extend(side.iter().copied());
            }
        }
        let connect = |out: &mut Pairing, f: usize, r: usize| {
            // a -> b is addressed to b's QP; b -> a to a's.
            let (qpn_b, qpn_a) = (flows[f].dest_qp, flows[r].dest_qp);
            let expected = rdma_udp_sport(qpn_a, qpn_b);
            out.connections.push(Connection {
                a,
                b,
                udp_src_port: sport,
                qpn_a,
                qpn_b,
                flows: [f, r],
                source_port: if shared {
                    SourcePort::SharedTuple
                } else if expected == sport {
                    SourcePort::Conforming
                } else {
                    SourcePort::Overridden { expected }
                },
            });
        };
        if shared {
            // Match by the drivers' rule first.
            let mut i = 0;
            while i < fwd.len() {
                let f = fwd[i];
                let found = rev
                    .iter()
                    .position(|&r| rdma_udp_sport(flows[r].dest_qp, flows[f].dest_qp) == sport);
                match found {
                    Some(j) => {
                        let r = rev.remove(j);
                        fwd.remove(i);
                        connect(&mut out, f, r);
                    }
                    None => i += 1,
                }
            }
        }
        if fwd.len() == 1 && rev.len() == 1 {
            connect(&mut out, fwd[0], rev[0]);
        } else {
            let all_ways = ways[&(a, b, sport)];
            for (side, other, seen_other) in [(&fwd, &rev, all_ways[1]), (&rev, &fwd, all_ways[0])]
            {
                let why = if shared {
                    Why::SharedTuple
                } else if other.is_empty() && seen_other > 0 {
                    Why::OtherMirror
                } else {
                    Why::OneWay
                };
                reasons.extend(side.iter().map(|i| (*i, why)));
            }
            out.unpaired.extend(fwd);
            out.unpaired.extend(rev);
        }
    }
    out.unpaired.sort_unstable();
    out.shared_tuple_flows.sort_unstable();
    (out, reasons)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Direction;

    fn flow(src: &str, dst: &str, sport: u16, dest_qp: u32) -> Flow {
        Flow {
            direction: Direction::Ingress,
            packets: 1,
            bytes: 100,
            dscp: vec![26],
            untagged: true,
            ..Flow::empty(src.parse().unwrap(), dst.parse().unwrap(), sport, dest_qp)
        }
    }

    #[test]
    fn the_drivers_source_port_rule() {
        // Worked by hand from the rule in docs/wire.md.
        assert_eq!(rdma_udp_sport(0x11, 0x12), 0xC132);
        assert_eq!(rdma_udp_sport(0x000D40, 0x001A80), 0xE029);
        assert_eq!(rdma_udp_sport(0xABCDEF, 0x123456), 0xC3C8);
        assert_eq!(rdma_udp_sport(0xFFFFFF, 0xFFFFFF), 0xFF21);
        assert_eq!(rdma_udp_sport(1, 1), 0xC001);
        // Symmetric: both directions of a connection use one port.
        assert_eq!(rdma_udp_sport(0x12, 0x11), rdma_udp_sport(0x11, 0x12));
        assert_eq!(flow_label_to_udp_sport(0x5_4321), 0xC000 | (0x0321 ^ 0x15));
    }

    #[test]
    fn directions_pair_and_ports_are_checked() {
        let sport = rdma_udp_sport(0x11, 0x12);
        let flows = vec![
            // A conforming connection: 198.18.0.1 (QP 0x11) <-> 198.18.0.2 (QP 0x12).
            flow("198.18.0.1", "198.18.0.2", sport, 0x12),
            flow("198.18.0.2", "198.18.0.1", sport, 0x11),
            // A fixed port.
            flow("198.18.0.3", "198.18.0.4", 4791, 0x21),
            flow("198.18.0.4", "198.18.0.3", 4791, 0x22),
            // One way only.
            flow("198.18.0.5", "198.18.0.6", 0xC555, 0x31),
            // The reverse of the first, but another port: not the same connection.
            flow("198.18.0.2", "198.18.0.1", sport ^ 1, 0x11),
        ];
        let p = pair(&flows);
        assert_eq!(p.connections.len(), 2);
        let c = &p.connections[0];
        assert_eq!((c.qpn_a, c.qpn_b, c.flows), (0x11, 0x12, [0, 1]));
        assert_eq!(c.source_port, SourcePort::Conforming);
        let fixed = &p.connections[1];
        assert_eq!(
            fixed.source_port,
            SourcePort::Overridden {
                expected: rdma_udp_sport(0x21, 0x22)
            }
        );
        assert_eq!((fixed.qpn_a, fixed.qpn_b), (0x22, 0x21));
        assert_eq!(p.unpaired, vec![4, 5]);
        // Flow 4 has no reverse at all; flow 5's port has no flow the other way either.
        assert_eq!(
            p.why,
            Unpaired {
                one_way: 2,
                other_mirror: 0,
                shared_tuple: 0
            }
        );
    }

    /// A connection whose directions have ports of their own stays unpaired by port; the
    /// report's pairing on its PSNs joins it, and only it.
    #[test]
    fn connections_the_report_paired_on_psns_join_with_a_port_per_direction() {
        use crate::model::connections::testing::{connection as joined, side};
        let flows = vec![
            flow("198.18.0.1", "198.18.0.2", 0xC011, 0x12),
            flow("198.18.0.2", "198.18.0.1", 0xC022, 0x11),
            flow("198.18.0.3", "198.18.0.4", 0xC033, 0x21),
            flow("198.18.0.4", "198.18.0.3", 0xC044, 0x22),
        ];
        let alone = pair(&flows);
        assert!(alone.connections.is_empty());
        assert_eq!(alone.why.one_way, 4);
        let report = [
            // B first: the side order of the report does not matter.
            joined(
                Some("psn"),
                side("198.18.0.2", Some(0x12), 1),
                side("198.18.0.1", Some(0x11), 1),
            ),
            // Not paired by the report: stays unpaired.
            joined(
                None,
                side("198.18.0.3", Some(0x22), 1),
                side("198.18.0.4", Some(0x21), 1),
            ),
        ];
        let p = pair_with(&flows, &report);
        assert_eq!(p.connections.len(), 1);
        let c = &p.connections[0];
        assert_eq!(
            (c.a, c.b, c.qpn_a, c.qpn_b, c.flows, c.udp_src_port),
            (
                "198.18.0.1".parse().unwrap(),
                "198.18.0.2".parse().unwrap(),
                0x11,
                0x12,
                [0, 1],
                0xC011
            )
        );
        assert_eq!(c.source_port, SourcePort::PerDirection { b_to_a: 0xC022 });
        assert_eq!(p.unpaired, vec![2, 3]);
        assert_eq!(p.why.one_way, 2);
    }

    #[test]
    fn a_connection_split_over_two_mirror_sessions_is_unpaired_and_says_so() {
        let sport = rdma_udp_sport(0x11, 0x12);
        let mut flows = vec![
            flow("198.18.0.1", "198.18.0.2", sport, 0x12),
            flow("198.18.0.2", "198.18.0.1", sport, 0x11),
        ];
        flows[0].mirror = Some(crate::model::FlowMirror {
            session: Some(101),
            kind: None,
            truncated: 0,
        });
        let p = pair(&flows);
        assert!(p.connections.is_empty());
        assert_eq!(p.why.other_mirror, 2);
    }

    #[test]
    fn shared_tuples_pair_by_the_rule_and_are_flagged() {
        // Two QP pairs between the same hosts on one (fixed) port: the rule tells them apart
        // only when it produced that port, so here with port = rule(qa, qb) for the first.
        let port = rdma_udp_sport(0x41, 0x42);
        let flows = vec![
            flow("198.18.0.1", "198.18.0.2", port, 0x42),
            flow("198.18.0.1", "198.18.0.2", port, 0x52),
            flow("198.18.0.2", "198.18.0.1", port, 0x51),
            flow("198.18.0.2", "198.18.0.1", port, 0x41),
        ];
        let p = pair(&flows);
        assert_eq!(p.connections.len(), 2, "{p:?}");
        assert!(
            p.connections
                .iter()
                .all(|c| c.source_port == SourcePort::SharedTuple)
        );
        let first = p.connections.iter().find(|c| c.qpn_b == 0x42).unwrap();
        assert_eq!(first.qpn_a, 0x41);
        let second = p.connections.iter().find(|c| c.qpn_b == 0x52).unwrap();
        assert_eq!(second.qpn_a, 0x51);
        assert!(p.unpaired.is_empty());
        assert_eq!(p.shared_tuple_flows, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_fixed_port_shared_by_several_qps_is_reported() {
        // Three QP pairs on port 4791: the rule never gives it, so they cannot be matched up,
        // but every one of them is a flow without entropy. QP 1 (UD connection management)
        // is never paired.
        let flows = vec![
            flow("198.18.0.1", "198.18.0.2", 4791, 0x42),
            flow("198.18.0.1", "198.18.0.2", 4791, 0x52),
            flow("198.18.0.1", "198.18.0.2", 4791, 0x62),
            flow("198.18.0.2", "198.18.0.1", 4791, 0x41),
            flow("198.18.0.2", "198.18.0.1", 4791, 0x51),
            flow("198.18.0.2", "198.18.0.1", 4791, 0x61),
            flow("198.18.0.1", "198.18.0.2", 0xD000, 1),
            flow("198.18.0.2", "198.18.0.1", 0xD000, 1),
        ];
        let p = pair(&flows);
        assert!(p.connections.is_empty());
        assert_eq!(p.unpaired, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(p.why.shared_tuple, 6);
        assert_eq!(p.shared_tuple_flows, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(p.qp1, vec![6, 7]);
    }
}
