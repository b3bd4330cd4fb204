//! The user scenarios of an ordinary fabric's life, plain complete frames only: `clean`, `incast`,
//! `loss`, `mixed-dscp` and `ipv6-vlan`.

use observer_common::wire;

use super::{CNP_INTERVAL_NS, ack_all, everyday_op, go_back_n, qp_v4, qp_v6};
use crate::source::synth::frame::tag;
use crate::source::synth::qp::QpStream;
use crate::source::synth::workload::Workload;
use crate::source::synth::{DATA_DSCP, ECT0, ECT1, NOT_ECT};

pub(super) fn clean(w: &mut Workload) {
    // Three clients (198.18.10.1-3) and two servers (.101, .102).
    let mut qps: Vec<QpStream> = (0..6u32)
        .map(|i| {
            let hosts = [1 + (i % 3) as u8, 101 + (i % 2) as u8];
            let qpns = [0x0A10 + i, 0x0B20 + 3 * i];
            qp_v4(wire::TRANSPORT_RC, 10, hosts, qpns, 0x0010_0000 * i + 3)
        })
        .collect();
    for round in 0..18 {
        for (i, qp) in qps.iter_mut().enumerate() {
            everyday_op(w, qp, round + 2 * i);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn incast(w: &mut Workload) {
    // Eight senders (198.18.11.1-8) WRITE 4 KiB messages to one receiver (198.18.11.100): its
    // switch port congests, so the share of CE-marked packets grows from none to all, and the
    // receiver's NIC answers with rate-limited CNPs.
    w.set_frame_gap(500);
    let mut qps: Vec<QpStream> = (0..8u32)
        .map(|i| {
            let qpns = [0x0C01 + 0x10 * i, 0x0D01 + i];
            qp_v4(wire::TRANSPORT_RC, 11, [1 + i as u8, 100], qpns, 7 * i + 1)
        })
        .collect();
    for round in 0..40 {
        let ce_every = match round {
            0..8 => 0,
            8..16 => 8,
            16..24 => 4,
            24..32 => 2,
            _ => 1,
        };
        for qp in &mut qps {
            qp.ce_every = ce_every;
            qp.write(w, 4096);
            qp.ack_if_due(w, 16);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn loss(w: &mut Workload) {
    let mut qps: Vec<QpStream> = (0..4u32)
        .map(|i| {
            let hosts = [1 + i as u8, 11 + (i % 2) as u8];
            let qpns = [0x0E10 + i, 0x0F10 + i];
            qp_v4(wire::TRANSPORT_RC, 12, hosts, qpns, 0x00FF_FF00 + 0x40 * i)
        })
        .collect();
    for round in 0..24 {
        for (i, qp) in qps.iter_mut().enumerate() {
            match (i, round) {
                // Two packets lost inside a burst; three more messages' worth arrive before the
                // NAK gets back (the PSNs of the first QP wrap around 2^24 on the way).
                (0, 6) => go_back_n(w, qp, 4096, 2, 8192),
                (0, 17) => go_back_n(w, qp, 1024, 1, 2048),
                // A single lost packet: the very next one is the gap.
                (1, 10) => go_back_n(w, qp, 2048, 1, 3072),
                // The responder has no receive WQE for a SEND: RNR NAK, the requester waits
                // out the RNR timer and sends it again.
                (2, 12) => {
                    let psn = qp.send(w, 512);
                    qp.rnr_retry(w, psn);
                }
                (3, 15) => go_back_n(w, qp, 512, 3, 16384),
                _ => everyday_op(w, qp, round + i),
            }
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn mixed_dscp(w: &mut Workload) {
    // (DSCP, ECN) per QP: best effort without ECN, AF11 with ECT(1), the RoCE class with ECT(0)
    // and a congested path (CE, CNPs on DSCP 48), AF41 with ECT(0), EF with ECT(1).
    let classes = [
        (0, NOT_ECT),
        (10, ECT1),
        (DATA_DSCP, ECT0),
        (34, ECT0),
        (46, ECT1),
    ];
    let mut qps: Vec<QpStream> = classes
        .iter()
        .zip(0u32..)
        .map(|(&(dscp, ecn), i)| {
            let qpns = [0x1310 + i, 0x1410 + i];
            qp_v4(wire::TRANSPORT_RC, 13, [1 + i as u8, 21], qpns, 0x500 * i).with_tos(dscp, ecn)
        })
        .collect();
    qps[2].ce_every = 3;
    // Re-marked by a QoS policy change half way: DSCP 26 then 34 (both directions).
    let mut remarked = qp_v4(wire::TRANSPORT_RC, 13, [9, 22], [0x1501, 0x1601], 42);
    for round in 0..20 {
        if round == 10 {
            remarked = remarked.with_tos(34, ECT0);
        }
        for (i, qp) in qps.iter_mut().chain([&mut remarked]).enumerate() {
            everyday_op(w, qp, round + i);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
    }
    ack_all(w, qps.iter_mut().chain([&mut remarked]));
}

pub(super) fn ipv6_vlan(w: &mut Workload) {
    let dot1q = [tag(wire::ETHERTYPE_VLAN, 100)];
    let qinq = [
        tag(wire::ETHERTYPE_QINQ, 10),
        tag(wire::ETHERTYPE_VLAN, 100),
    ];
    let mut qps = vec![
        // IPv6 without a flow label (UDP source port from the QPNs) and with one.
        qp_v6([0x0E01, 0x0E02], 0, [0x1701, 0x1801], 5),
        qp_v6([0x0E03, 0x0E02], 0x1_2345, [0x1702, 0x1802], 0x00FF_FFF0),
        // 802.1Q, IPv4 and IPv6.
        qp_v4(wire::TRANSPORT_RC, 14, [1, 2], [0x1703, 0x1803], 1000).with_vlans(&dot1q),
        qp_v6([0x0E04, 0x0E05], 0xA_BCDE, [0x1704, 0x1804], 2000).with_vlans(&dot1q),
        // QinQ, IPv4 and IPv6.
        qp_v4(wire::TRANSPORT_RC, 14, [3, 4], [0x1705, 0x1805], 3000).with_vlans(&qinq),
        qp_v6([0x0E06, 0x0E07], 0, [0x1706, 0x1806], 4000).with_vlans(&qinq),
        // Untagged IPv4.
        qp_v4(wire::TRANSPORT_RC, 14, [5, 6], [0x1707, 0x1807], 6000),
    ];
    // The tagged IPv6 path is congested: CE marks and CNPs over 802.1Q and IPv6.
    qps[3].ce_every = 5;
    for round in 0..16 {
        for (i, qp) in qps.iter_mut().enumerate() {
            everyday_op(w, qp, round + i);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
    }
    ack_all(w, &mut qps);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::Ipv4Addr;

    use observer_common::{FlowKey, OpClass, parse};

    use super::*;
    use crate::source::synth::frame::intended_class;
    use crate::source::synth::scenarios::scenario;
    use crate::source::synth::scenarios::tests::{class_totals, cnp_count, sum_flows};
    use crate::source::synth::{CE, CNP_DSCP};

    #[test]
    fn clean_has_reads_writes_sends_and_no_trouble() {
        let w = scenario("clean").unwrap();
        let ops = class_totals(&w.truth);
        for class in [
            OpClass::Write,
            OpClass::Send,
            OpClass::ReadRequest,
            OpClass::ReadResponse,
            OpClass::Ack,
        ] {
            assert!(ops[class as usize] > 0, "no {class:?}");
        }
        // Coalesced: far fewer ACKs than request packets.
        assert!(ops[OpClass::Write as usize] > 2 * ops[OpClass::Ack as usize]);
        assert_eq!(w.truth.counters.ce_packets + cnp_count(&w), 0);
        assert_eq!(sum_flows(&w, |s| s.psn_gaps + s.psn_regressions), 0);
        assert_eq!(
            ops[OpClass::Nak as usize] + ops[OpClass::RnrNak as usize],
            0
        );
        for s in w.truth.flows.values() {
            assert_eq!(s.dscp_mask, 1 << DATA_DSCP);
            assert_eq!(s.ecn[usize::from(ECT0)], s.packets);
        }
    }

    #[test]
    fn incast_congests_and_cnps_are_rate_limited_per_flow() {
        let w = scenario("incast").unwrap();
        let c = &w.truth.counters;
        assert!(c.ce_packets > 0 && c.cnp_packets > 0);
        assert!(c.cnp_packets < c.ce_packets);
        // The share of CE grows: the last quarter of the data has more marks than the first half.
        let data: Vec<bool> = w
            .frames
            .iter()
            .map(|f| parse(f.bytes.as_slice()).unwrap())
            .filter(|p| intended_class(p.bth.opcode, 0) == OpClass::Write)
            .map(|p| p.tos & 3 == CE)
            .collect();
        let n = data.len();
        let marked = |s: &[bool]| s.iter().filter(|&&b| b).count();
        assert!(marked(&data[..n / 2]) < marked(&data[3 * n / 4..]));
        // Every sender's QP gets CNPs, never two within 50 us.
        let mut last: BTreeMap<FlowKey, u64> = BTreeMap::new();
        for f in &w.frames {
            let p = parse(f.bytes.as_slice()).unwrap();
            if p.bth.opcode != wire::OPCODE_CNP {
                continue;
            }
            assert!(p.bth.becn && p.tos >> 2 == CNP_DSCP);
            if let Some(prev) = last.insert(FlowKey::of(&p), f.ts_ns) {
                assert!(
                    f.ts_ns - prev >= CNP_INTERVAL_NS,
                    "CNPs {} ns apart",
                    f.ts_ns - prev
                );
            }
        }
        assert_eq!(last.len(), 8, "one CNP flow per sender");
        let receivers: std::collections::BTreeSet<[u8; 16]> =
            w.truth.flows.keys().map(|k| k.dst_ip).collect();
        assert_eq!(receivers.len(), 9, "8 senders and one receiver");
    }

    #[test]
    fn loss_has_gaps_regressions_naks_and_an_rnr_nak() {
        let w = scenario("loss").unwrap();
        let ops = class_totals(&w.truth);
        assert!(ops[OpClass::Nak as usize] >= 3);
        assert_eq!(ops[OpClass::RnrNak as usize], 1);
        assert_eq!(sum_flows(&w, |s| s.psn_gaps), 4);
        // Every lost PSN was sent again: four go-back-N runs and an RNR retry, nothing missing.
        assert_eq!(sum_flows(&w, |s| s.seq.lost), 0);
        assert_eq!(sum_flows(&w, |s| s.seq.retx_episodes), 5);
        assert_eq!(
            sum_flows(&w, |s| s.psn_regressions),
            sum_flows(&w, |s| s.seq.retransmissions)
        );
        assert_eq!(w.truth.counters.ce_packets, 0);
    }

    #[test]
    fn mixed_dscp_covers_six_dscps_every_ecn_and_a_remarked_flow() {
        let w = scenario("mixed-dscp").unwrap();
        let mut dscp = 0u64;
        let mut ecn = [0; 4];
        for s in w.truth.flows.values() {
            dscp |= s.dscp_mask;
            for (a, b) in ecn.iter_mut().zip(s.ecn) {
                *a += b;
            }
        }
        for d in [0, 10, 26, 34, 46, 48] {
            assert!(dscp & (1 << d) != 0, "no DSCP {d}");
        }
        assert!(dscp.count_ones() >= 6);
        assert!(ecn.iter().all(|&n| n > 0), "ECN {ecn:?}");
        let both = (1 << 26) | (1 << 34);
        let remarked = w
            .truth
            .flows
            .values()
            .filter(|s| s.dscp_mask == both)
            .count();
        assert_eq!(remarked, 2, "the re-marked QP, both directions");
        assert!(cnp_count(&w) > 0);
    }

    #[test]
    fn ipv6_vlan_mixes_ipv6_one_and_two_tags() {
        let w = scenario("ipv6-vlan").unwrap();
        let mut seen = BTreeMap::new();
        for f in &w.frames {
            let p = parse(f.bytes.as_slice()).unwrap();
            let v6 = p.src_ip[..12] != Ipv4Addr::UNSPECIFIED.to_ipv6_mapped().octets()[..12];
            let tags: Vec<(u16, u8)> = p.vlans[..usize::from(p.vlan_count)]
                .iter()
                .map(|t| (t.tpid, t.pcp))
                .collect();
            *seen.entry((v6, tags)).or_insert(0) += 1;
        }
        let q = (wire::ETHERTYPE_VLAN, 3);
        let ad = (wire::ETHERTYPE_QINQ, 3);
        for v6 in [false, true] {
            for tags in [vec![], vec![q], vec![ad, q]] {
                assert!(
                    seen.contains_key(&(v6, tags.clone())),
                    "v6 {v6} tags {tags:?}"
                );
            }
        }
        assert_eq!(seen.len(), 6);
    }
}
