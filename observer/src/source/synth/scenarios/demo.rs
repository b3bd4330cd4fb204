//! `demo` (RC WRITEs with one congested and one lossy QP) and `e2e`, which adds every feature
//! the observer handles: IPv6, VLAN tags, every operation and transport, ECN variants,
//! mirror-truncated copies, PAUSE and PFC (also mirrored) and noise for every skip reason.

use observer_common::OpClass;
use observer_common::wire::{self, op};

use super::qp_v4;
use crate::source::synth::encap::{Encap, link_pause, pfc, quanta_at};
use crate::source::synth::frame::{Ext, Ip, RoceFrame, host_mac, tag, v4, v6};
use crate::source::synth::noise::{basic_noise, mirror_noise};
use crate::source::synth::qp::QpStream;
use crate::source::synth::workload::Workload;
use crate::source::synth::{ECT1, NOT_ECT, SYNDROME_NAK_SEQ};

pub(super) fn demo(w: &mut Workload) {
    const RC: u8 = wire::TRANSPORT_RC;
    let sizes = [1024, 4096, 16384, 2048, 8192, 512];
    let mut normal: Vec<QpStream> = (0..4u8)
        .map(|i| {
            let qpns = [0x0D40 + u32::from(i), 0x1A80 + u32::from(i)];
            qp_v4(
                RC,
                0,
                [1 + i % 2, 3 + i % 2],
                qpns,
                0x1000 * u32::from(i) + 17,
            )
        })
        .collect();
    let mut congested = qp_v4(RC, 0, [5, 6], [0x0E01, 0x1B01], 0x0042_0000);
    let mut lossy = qp_v4(RC, 0, [7, 8], [0x0E02, 0x1B02], 1000);

    for round in 0..24 {
        for (i, qp) in normal.iter_mut().enumerate() {
            qp.write(w, sizes[(round + i) % sizes.len()]);
            qp.ack_if_due(w, 8);
        }
        if round == 4 {
            congested.ce_every = 3;
        }
        congested.write(w, 8192);
        congested.ack_if_due(w, 8);
        if round % 2 == 0 {
            congested.cnp_if_marked(w);
        }
        match round {
            6 => {
                // The first 3 packets of this message are lost before the mirror: the 4th is a
                // gap, the responder NAKs the first missing PSN, the requester goes back to it.
                let first = lossy.next_psn();
                lossy.lose_next(3);
                lossy.write(w, 8192);
                lossy.nak(w, first, SYNDROME_NAK_SEQ);
                lossy.retransmit_from(w, first);
                let last = lossy.last_psn();
                lossy.ack(w, last);
            }
            _ => {
                lossy.write(w, 4096);
                lossy.ack_if_due(w, 8);
            }
        }
    }
    for qp in normal.iter_mut().chain([&mut congested, &mut lossy]) {
        let last = qp.last_psn();
        qp.ack(w, last);
    }
}

pub(super) fn e2e(w: &mut Workload) {
    const RC: u8 = wire::TRANSPORT_RC;
    demo(w);

    // IPv6 with a flow label (which picks the UDP source port): writes and a READ.
    let ip6 = Ip::V6 {
        src: v6(0x101),
        dst: v6(0x102),
        flow_label: 0x5_4321,
    };
    let mut qp6 = QpStream::new(
        RC,
        ip6,
        [host_mac(0x101), host_mac(0x102)],
        [0x2001, 0x2002],
        77,
    );
    for len in [4096, 1024, 2048] {
        qp6.write(w, len);
    }
    let last = qp6.last_psn();
    qp6.ack(w, last);
    qp6.read(w, 65536);

    // 802.1Q and QinQ tagged flows.
    let mut dot1q =
        qp_v4(RC, 1, [1, 2], [0x2101, 0x2102], 500).with_vlans(&[tag(wire::ETHERTYPE_VLAN, 100)]);
    let mut qinq = qp_v4(RC, 1, [3, 4], [0x2201, 0x2202], 900).with_vlans(&[
        tag(wire::ETHERTYPE_QINQ, 200),
        tag(wire::ETHERTYPE_VLAN, 300),
    ]);
    for qp in [&mut dot1q, &mut qinq] {
        qp.write(w, 3000);
        qp.write(w, 1024);
        let last = qp.last_psn();
        qp.ack(w, last);
    }

    // READs (multi-packet and single), SENDs with immediate and invalidate, WRITE with
    // immediate, atomics, on one RC QP; then an RNR NAK and the retransmitted SEND.
    let mut ops = qp_v4(RC, 1, [5, 6], [0x2301, 0x2302], 0x00FF_FFF0);
    ops.read(w, 65536);
    ops.read(w, 65536);
    ops.read(w, 512);
    ops.send_imm(w, 3000, 0xCAFE_0001);
    ops.send_imm(w, 100, 0xCAFE_0002);
    ops.send_inv(w, 2048, 0x0005_5555);
    ops.send_inv(w, 64, 0x0005_5556);
    ops.write_imm(w, 2048, 0xCAFE_0003);
    ops.write_imm(w, 256, 0xCAFE_0004);
    ops.atomic(w, op::COMPARE_SWAP, 1, 0);
    ops.atomic(w, op::FETCH_ADD, 5, 0);
    let last = ops.last_psn();
    ops.ack(w, last);
    let psn = ops.send(w, 256);
    ops.rnr_retry(w, psn);

    // UD SENDs with DETH (no PSN tracking, no ACKs).
    let mut ud = RoceFrame::new(
        Ip::v4(v4(1, 7), v4(1, 8)),
        wire::TRANSPORT_UD | op::SEND_ONLY,
        0x2402,
    );
    ud.src_mac = host_mac(0x107);
    ud.dst_mac = host_mac(0x108);
    ud.udp_src_port = 0xD123;
    ud.ext = Ext {
        qkey: 0x1111_1111,
        src_qp: 0x2401,
        imm: 0xBEEF,
        ..Ext::default()
    };
    for (i, opcode) in [op::SEND_ONLY, op::SEND_ONLY_IMM, op::SEND_ONLY]
        .into_iter()
        .enumerate()
    {
        ud.bth.opcode = wire::TRANSPORT_UD | opcode;
        ud.bth.psn = i as u32;
        ud.payload_len = 256;
        w.push_roce(&ud, OpClass::Send);
    }

    // XRC SENDs (XRCETH) with ACKs.
    let mut xrc = qp_v4(wire::TRANSPORT_XRC, 1, [9, 10], [0x2501, 0x2502], 4000);
    xrc.req.ext.xrc_srq = 0x42;
    xrc.send(w, 2048);
    xrc.send(w, 128);
    let last = xrc.last_psn();
    xrc.ack(w, last);

    // UC with ECT(1) (no ACKs on UC); RC with Not-ECT and a UDP source port below 1024.
    let mut uc = qp_v4(wire::TRANSPORT_UC, 1, [11, 12], [0x2601, 0x2602], 10).with_tos(10, ECT1);
    uc.write(w, 4096);
    uc.send(w, 1500);
    let mut low_port = qp_v4(RC, 1, [13, 14], [0x2701, 0x2702], 20)
        .with_tos(0, NOT_ECT)
        .with_udp_src_port(999);
    low_port.write(w, 2048);
    let last = low_port.last_psn();
    low_port.ack(w, last);

    // Mirror-truncated copies: one session cutting inside the payload, one right after the BTH.
    for (i, snap) in [96, 54].into_iter().enumerate() {
        let i = i as u8;
        let qpns = [0x2801 + u32::from(i), 0x2901 + u32::from(i)];
        let mut mirrored = qp_v4(RC, 1, [15 + 2 * i, 16 + 2 * i], qpns, 300);
        mirrored.snap = Some(snap);
        mirrored.write(w, 4096);
        mirrored.read(w, 2048);
        mirrored.write(w, 1024);
        let last = mirrored.last_psn();
        mirrored.ack(w, last);
    }

    // A PSN wrap with loss across it and go-back-N.
    let mut wrap = qp_v4(RC, 1, [19, 20], [0x2A01, 0x2A02], 0x00FF_FFFC);
    wrap.write(w, 2048);
    let first = wrap.next_psn();
    wrap.lose_next(4);
    wrap.write(w, 8192);
    wrap.nak(w, first, SYNDROME_NAK_SEQ);
    wrap.retransmit_from(w, first);
    let last = wrap.last_psn();
    wrap.ack(w, last);

    // PFC on priority 3 (pause, XON), an 802.3x PAUSE, and PFC copied through ERSPAN III.
    let port = host_mac(0xF01);
    w.push_pause(&pfc(port, 0x08, quanta_at(3, 0xFFFF)), None);
    w.push_pause(&pfc(port, 0x18, [0, 0, 0, 0x100, 0x80, 0, 0, 0]), None);
    w.push_pause(&pfc(port, 0x08, quanta_at(3, 0)), None);
    w.push_pause(&link_pause(host_mac(0xF02), 0x200), None);
    w.push_pause(
        &pfc(port, 0x08, quanta_at(3, 0x4000)),
        Some(Encap::ErspanIII {
            session: 9,
            truncated: false,
            platform: true,
        }),
    );

    for (bytes, reason, session) in mirror_noise() {
        w.push_mirror_noise(bytes, reason, session);
    }
    for (bytes, reason) in basic_noise() {
        w.push_noise(bytes, reason);
    }
}

#[cfg(test)]
mod tests {
    use observer_common::SkipReason;

    use super::*;
    use crate::source::synth::scenarios::scenario;
    use crate::source::synth::scenarios::tests::class_totals;

    #[test]
    fn e2e_truth_covers_every_reason_class_and_event() {
        let w = scenario("e2e").unwrap();
        let c = &w.truth.counters;
        for reason in SkipReason::ALL {
            assert!(c.skipped[reason as usize] > 0, "no {reason:?} frame");
        }
        let ops = class_totals(&w.truth);
        for class in OpClass::ALL {
            if class != OpClass::Other {
                assert!(ops[class as usize] > 0, "no {class:?} packet");
            }
        }
        let mut ecn = [0; 4];
        for s in w.truth.flows.values() {
            for (a, b) in ecn.iter_mut().zip(s.ecn) {
                *a += b;
            }
        }
        assert!(ecn.iter().all(|&n| n > 0), "ECN codepoints {ecn:?}");
        assert!(c.ce_packets > 0 && c.cnp_packets > 0);
        assert!(c.cnp_packets < c.ce_packets, "CNPs are rate limited");
        assert!(w.truth.flows.values().any(|s| s.psn_gaps > 0));
        assert!(w.truth.flows.values().any(|s| s.psn_regressions > 0));
        assert_eq!(c.frames, w.frames.len() as u64);
        let skipped: u64 = c.skipped.iter().sum();
        assert_eq!(c.roce_packets + skipped, c.frames);
    }

    #[test]
    fn lossy_demo_qp_has_one_gap_and_one_go_back_n_run() {
        let w = scenario("demo").unwrap();
        let key = qp_v4(wire::TRANSPORT_RC, 0, [7, 8], [0x0E02, 0x1B02], 0)
            .req
            .flow_key();
        let s = w.truth.flows[&key];
        // Three lost before the mirror, five more seen, then all eight sent again.
        assert_eq!((s.psn_gaps, s.seq.lost, s.psn_regressions), (1, 0, 8));
        assert_eq!((s.seq.retransmissions, s.seq.retx_episodes), (8, 1));
        assert_eq!(s.ops[OpClass::Nak as usize], 0, "NAKs flow the other way");
        let others: u64 = w
            .truth
            .flows
            .iter()
            .filter(|(k, _)| **k != key)
            .map(|(_, s)| s.psn_gaps + s.psn_regressions)
            .sum();
        assert_eq!(others, 0);
    }
}
