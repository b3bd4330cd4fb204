//! Connections whose two directions do not share one UDP source port, as real NICs make them:
//! `pairing-local-port` (Soft-RoCE before 2022: each side's port from its own QPN),
//! `pairing-fixed-port` (a fixed port per QP on each side), `pairing-flow-labels` (IPv6, each
//! side's application sets its own flow label), `pairing-many-qps` (NCCL: several QPs per pair
//! of hosts, every one starting at PSN 0), `pairing-respray` (a NIC or load balancer moving
//! connections to other ports mid-way, in flowlets), `pairing-ambiguous` (two QPs of one pair of hosts in
//! lockstep: no evidence tells their directions apart), `pairing-cm` (the same, with the
//! connection manager's REQ and REP seen: they do), `pairing-spray` (every request packet on
//! the next of 4 ports) and `rule-psn-violation-split` (the READ
//! overlap of the psn-violation rule, then a bogus ACK and silence, ports per direction).

use observer_common::wire;

use super::{ack_all, qp_v4, qp_v6};
use crate::source::synth::qp::{PortRule, QpStream};
use crate::source::synth::workload::Workload;

/// Frames 2 us apart: a few hundred frames take about a millisecond.
const GAP_NS: u64 = 2_000;

/// An RC QP from 198.18.`net`.`hosts[0]` (QP `qpns[0]`) to .`hosts[1]` (QP `qpns[1]`) with
/// the ports of `rule`.
fn pair_qp(net: u8, hosts: [u8; 2], qpns: [u32; 2], first_psn: u32, rule: PortRule) -> QpStream {
    qp_v4(wire::TRANSPORT_RC, net, hosts, qpns, first_psn).with_port_rule(rule)
}

/// A day's mix on one QP: WRITEs of several packets, a READ, SENDs; ACKs coalesced.
fn mix(w: &mut Workload, qp: &mut QpStream, round: usize) {
    match round % 4 {
        0 => {
            qp.write(w, 4096);
        }
        1 => {
            qp.read(w, 3000);
        }
        2 => {
            qp.send(w, 2048);
        }
        _ => {
            qp.write(w, 1024);
        }
    }
    qp.ack_if_due(w, 4);
}

/// Three pairs of hosts, one QP each, every port from its sender's own QPN.
pub(super) fn pairing_local_port(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut qps: Vec<QpStream> = (0..3u32)
        .map(|i| {
            let h = 1 + i as u8;
            let qpns = [0x11 + i, 0x12 + 3 * i];
            pair_qp(
                70,
                [h, 100 + h],
                qpns,
                0x0012_3400 * (i + 1),
                PortRule::LocalQpn,
            )
        })
        .collect();
    for round in 0..12 {
        for qp in &mut qps {
            mix(w, qp, round);
        }
    }
    ack_all(w, &mut qps);
}

/// Two pairs of hosts, one QP each, a fixed port per QP on each side.
pub(super) fn pairing_fixed_port(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut qps = [
        pair_qp(
            71,
            [1, 101],
            [0x200, 0x301],
            77,
            PortRule::Fixed(62017, 57236),
        ),
        pair_qp(
            71,
            [2, 102],
            [0x201, 0x302],
            0xABCDE,
            PortRule::Fixed(72, 69),
        ),
    ];
    for round in 0..12 {
        for qp in &mut qps {
            mix(w, qp, round + 1);
        }
    }
    ack_all(w, &mut qps);
}

/// IPv6: each side's application sets its own flow label per QP, and each side's port follows
/// its own label.
pub(super) fn pairing_flow_labels(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut qps = [
        qp_v6([0x71, 0x171], 0, [0x400, 0x500], 1000)
            .with_port_rule(PortRule::FlowLabels(0x1_2345, 0x5_4321)),
        qp_v6([0x72, 0x172], 0, [0x401, 0x501], 0x00FF_FFF0)
            .with_port_rule(PortRule::FlowLabels(0xA_BCDE, 0x3)),
    ];
    for round in 0..12 {
        for qp in &mut qps {
            mix(w, qp, round + 2);
        }
    }
    ack_all(w, &mut qps);
}

/// NCCL between two hosts: four QPs (channels) each way of one pair of hosts, every QP starting
/// at PSN 0, ports per direction; the channels carry different amounts, so the PSNs of their
/// answers tell them apart.
pub(super) fn pairing_many_qps(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut qps: Vec<QpStream> = (0..4u32)
        .flat_map(|i| {
            [
                pair_qp(72, [1, 2], [0x60 + i, 0x90 + i], 0, PortRule::LocalQpn),
                pair_qp(72, [2, 1], [0x70 + i, 0xA0 + i], 0, PortRule::LocalQpn),
            ]
        })
        .collect();
    for round in 0..16 {
        for (i, qp) in qps.iter_mut().enumerate() {
            // Channel k sends on k + 1 rounds of 4: 4, 8, 12 and 16 WRITEs.
            if round % 4 < i / 2 + 1 {
                qp.write(w, 2048);
                let last = qp.last_psn();
                qp.ack(w, last);
            }
        }
    }
}

/// Connections re-sprayed in flowlets: every 5 WRITEs both sides of one move to another port
/// (one port both ways), and the requester alone of another (ports per direction), each move
/// with an ACK still due that comes back on the new port.
pub(super) fn pairing_respray(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut both = pair_qp(73, [1, 101], [0x310, 0x320], 500, PortRule::Symmetric);
    // Two packets per WRITE, an ACK every 4 packets: one is due across each move.
    let mut one = pair_qp(73, [2, 102], [0x311, 0x321], 9000, PortRule::LocalQpn);
    for round in 0..20u16 {
        if round % 5 == 0 {
            let p = 0xD000 + 17 * round;
            both.set_request_port(p);
            both.set_response_port(p);
            one.set_request_port(0xE000 + round);
        }
        both.write(w, 2048);
        both.ack_if_due(w, 4);
        one.write(w, 2048);
        one.ack_if_due(w, 4);
    }
    ack_all(w, [&mut both, &mut one]);
}

/// Per-packet spraying: a NIC or load balancer gives every request packet of a connection the
/// next of 4 UDP source ports (the ACKs keep one), so each port's flow holds every fourth PSN
/// and nothing is lost.
pub(super) fn pairing_spray(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut qp = pair_qp(79, [1, 101], [0x410, 0x420], 7000, PortRule::Symmetric);
    for k in 0..64u16 {
        qp.set_request_port(0xD100 + (k % 4));
        qp.write(w, 1024);
        qp.ack_if_due(w, 8);
    }
    ack_all(w, [&mut qp]);
}

/// Two QPs of one pair of hosts in lockstep, from PSN 0, with ports per direction: both
/// answer streams fit both request streams, and nothing else tells them apart.
pub(super) fn pairing_ambiguous(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut qps = [
        pair_qp(74, [1, 2], [0x51, 0x61], 0, PortRule::LocalQpn),
        pair_qp(74, [1, 2], [0x52, 0x62], 0, PortRule::LocalQpn),
    ];
    for _ in 0..8 {
        for qp in &mut qps {
            qp.write(w, 1024);
        }
        for qp in &mut qps {
            let last = qp.last_psn();
            qp.ack(w, last);
        }
    }
}

/// `pairing-ambiguous` with the connection manager's exchange seen before each QP starts: its
/// REQ and REP name both QPs, which tells the lockstep directions apart exactly.
pub(super) fn pairing_cm(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut qps = [
        pair_qp(78, [1, 2], [0x51, 0x61], 0, PortRule::LocalQpn),
        pair_qp(78, [1, 2], [0x52, 0x62], 0, PortRule::LocalQpn),
    ];
    for qp in &mut qps {
        qp.cm_exchange(w);
    }
    for _ in 0..8 {
        for qp in &mut qps {
            qp.write(w, 2048);
        }
        for qp in &mut qps {
            let last = qp.last_psn();
            qp.ack(w, last);
        }
    }
}

/// The fault of two real failure captures, with each side's port from its own QPN: a READ of
/// 3000 bytes at PSN N under path MTU 1024 (PSNs N..N+2) answered in full, then a SEND at N+2
/// inside the READ's range, an ACK naming PSN 0xFFFFFF (before any request), then silence
/// while another QP goes on for 300 ms.
pub(super) fn rule_psn_violation_split(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut bad = pair_qp(75, [1, 101], [0x11, 0x12], 0, PortRule::LocalQpn);
    let mut other = pair_qp(75, [2, 102], [0x13, 0x14], 0x4000, PortRule::LocalQpn);
    for _ in 0..4 {
        for qp in [&mut bad, &mut other] {
            qp.write(w, 2048);
            let last = qp.last_psn();
            qp.ack(w, last);
        }
    }
    bad.read_then_overlap(w, 3000, 512);
    bad.ack(w, 0x00FF_FFFF);
    for _ in 0..15 {
        w.wait(20_000_000);
        other.write(w, 1024);
        let last = other.last_psn();
        other.ack(w, last);
    }
}

/// Soft-RoCE before 2022 numbers QPs alike on every host: A's QP 0x11 talks to B's 0x12 and
/// A's 0x12 to B's 0x11, so one connection's requests share their port with the other's
/// answers. The port is no evidence there: their PSNs pair them.
pub(super) fn pairing_port_collision(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut qps = [
        pair_qp(76, [1, 101], [0x11, 0x12], 0x0001_0000, PortRule::LocalQpn),
        pair_qp(76, [1, 101], [0x12, 0x11], 0x0080_0000, PortRule::LocalQpn),
    ];
    for round in 0..10 {
        for qp in &mut qps {
            mix(w, qp, round);
        }
    }
    ack_all(w, &mut qps);
}

/// B's QP number 0x40 reused: first with A's QP 0x30, then, after a second's silence, with A's
/// 0x31 from a PSN behind the first connection's (one port both ways, as mlx5 makes them):
/// two connections, each paired by its port, nothing left unanswered.
pub(super) fn pairing_qp_reuse(w: &mut Workload) {
    w.set_frame_gap(GAP_NS);
    let mut first = pair_qp(77, [1, 101], [0x30, 0x40], 0x50_0000, PortRule::Symmetric);
    for _ in 0..8 {
        first.write(w, 2048);
        first.ack_if_due(w, 4);
    }
    ack_all(w, [&mut first]);
    w.wait(1_000_000_000);
    let mut second = pair_qp(77, [1, 101], [0x31, 0x40], 0x10_0000, PortRule::Symmetric);
    for _ in 0..8 {
        second.write(w, 2048);
        second.ack_if_due(w, 4);
    }
    ack_all(w, [&mut second]);
}
