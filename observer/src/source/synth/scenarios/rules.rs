//! Rule scenarios: one per rule of the findings engine, each made to fire exactly that rule when
//! replayed with `--link-speed 10G --uplinks 4`, and `rules-clean`, which fires none.

use observer_common::wire;

use super::{CNP_INTERVAL_NS, ack_all, everyday_op, go_back_n, qp_v4};
use crate::source::synth::encap::{pfc, quanta_at};
use crate::source::synth::frame::host_mac;
use crate::source::synth::qp::QpStream;
use crate::source::synth::script::{ConnId, Script};
use crate::source::synth::workload::Workload;
use crate::source::synth::{BASE_TS_NS, DATA_DSCP, ECT0, NOT_ECT};

/// Spacing of the rule scenarios' frames: PMTU-sized frames (about 1.1 KB on the wire) 2 us
/// apart load a 10 Gb/s link to about 45%, far below the microburst threshold (90%).
pub const RULE_FRAME_GAP_NS: u64 = 2_000;

/// A RoCE QP of the rule scenarios: RC between 198.18.`net`.`hosts[0]` and `hosts[1]`, DSCP 26
/// ECT(0) both ways.
fn rule_qp(net: u8, hosts: [u8; 2], qpns: [u32; 2], first_psn: u32) -> QpStream {
    qp_v4(wire::TRANSPORT_RC, net, hosts, qpns, first_psn)
}

/// `n` RC QPs of a rule scenario, sender 198.18.`net`.(1 + i) to receiver .(101 + i), QP
/// numbers `qp_base + i` and `qp_base + 0x80 + i`, first PSN `psn_step * i`.
fn rule_pairs(net: u8, n: u32, qp_base: u32, psn_step: u32) -> Vec<QpStream> {
    (0..n)
        .map(|i| {
            let h = 1 + i as u8;
            rule_qp(
                net,
                [h, 100 + h],
                [qp_base + i, qp_base + 0x80 + i],
                psn_step * i,
            )
        })
        .collect()
}

/// The switch port of 198.18.`net`.0/24 that sends PFC frames in the rule scenarios.
fn rule_switch_port(net: u8) -> [u8; 6] {
    host_mac(u16::from(net) << 8 | 0xFE)
}

pub(super) fn rules_clean(w: &mut Workload) {
    // Six clients (198.18.40.1-6), two QPs each, to two servers (clients 1-3 to .101, 4-6 to
    // .102: three senders per receiver at most): WRITEs, SENDs and READs in DSCP 26 ECT(0),
    // coalesced ACKs. Two QPs cross a congested hop (a CE mark on every 6th request), their
    // receivers answer with CNPs in DSCP 48 (one per 50 us at most). One XOFF on priority 3
    // (52 us at 10 Gb/s) and its XON. Frames 3 us apart (the pauses stay far below 1000 frames/s).
    // The QP numbers (and so the UDP source ports) are ones a crc32 5-tuple hash over 4 uplinks
    // spreads about as well as random hashing would (the median of the random trials): some
    // choices are unlucky, as on a real fabric.
    w.set_frame_gap(3_000);
    let port = rule_switch_port(40);
    let mut qps: Vec<QpStream> = (0..12u32)
        .map(|i| {
            let client = 1 + (i % 6) as u8;
            let server = if client <= 3 { 101 } else { 102 };
            let qpns = [0x401E + i, 0x411E + 7 * i];
            rule_qp(40, [client, server], qpns, 0x1000 * i + 5)
        })
        .collect();
    qps[1].ce_every = 6;
    qps[10].ce_every = 6;
    for round in 0..16 {
        for (i, qp) in qps.iter_mut().enumerate() {
            everyday_op(w, qp, round + 3 * i);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
        match round {
            5 => w.push_pause(&pfc(port, 0x08, quanta_at(3, 0x0400)), None),
            6 => w.push_pause(&pfc(port, 0x08, quanta_at(3, 0)), None),
            _ => {}
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_ce_without_cnp(w: &mut Workload) {
    // Two senders (198.18.41.1-2) WRITE to one receiver (.100) over a congested hop: every 4th
    // request is CE-marked. The receiver ACKs but its notification point is off: no CNP.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps: Vec<QpStream> = (0..2u32)
        .map(|i| rule_qp(41, [1 + i as u8, 100], [0x4101 + i, 0x4181 + i], 100 * i))
        .collect();
    for qp in &mut qps {
        qp.ce_every = 4;
    }
    for _ in 0..30 {
        for qp in &mut qps {
            qp.write(w, 4096);
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_not_ect(w: &mut Workload) {
    // Three senders (198.18.42.1-3) WRITE to three receivers (.101-.103) in DSCP 26: the first
    // two ECT(0), the third Not-ECT (ECN off on its NIC; its receiver's ACKs too).
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(42, 3, 0x4201, 10);
    qps[2] = qps[2].clone().with_tos(DATA_DSCP, NOT_ECT);
    for step in 0..20 {
        for qp in &mut qps {
            qp.write(w, [4096, 2048, 8192][step % 3]);
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_cnp_priority(w: &mut Workload) {
    // Two senders (198.18.43.1-2) WRITE to two receivers (.101-.102) over a congested hop (every
    // 5th request CE-marked); the receivers answer with CNPs (one per 50 us at most), but in
    // best-effort DSCP 0.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps: Vec<QpStream> = rule_pairs(43, 2, 0x4301, 7)
        .into_iter()
        .map(|qp| {
            let mut qp = qp.with_cnp_dscp(0);
            qp.ce_every = 5;
            qp
        })
        .collect();
    for _ in 0..24 {
        for qp in &mut qps {
            qp.write(w, 4096);
            qp.ack_if_due(w, 8);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_dscp_mix(w: &mut Workload) {
    // Three senders (198.18.44.1-3) WRITE to three receivers (.101-.103), all ECT(0): two in
    // DSCP 26, the third left in best-effort DSCP 0 (both directions). No congestion.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(44, 3, 0x4401, 3);
    qps[2] = qps[2].clone().with_tos(0, ECT0);
    for step in 0..20 {
        for qp in &mut qps {
            qp.write(w, [2048, 4096][step % 2]);
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_loss(w: &mut Workload) {
    // Two senders (198.18.45.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0); packets
    // are dropped twice on the way: PSN gaps, NAKs (PSN sequence error) and go-back-N.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(45, 2, 0x4501, 0x100);
    for round in 0..20 {
        for (i, qp) in qps.iter_mut().enumerate() {
            match (i, round) {
                (0, 5) => go_back_n(w, qp, 4096, 2, 8192),
                (1, 12) => go_back_n(w, qp, 2048, 1, 4096),
                _ => {
                    qp.write(w, 4096);
                    qp.ack_if_due(w, 8);
                }
            }
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_rnr(w: &mut Workload) {
    // Two senders (198.18.46.1-2) SEND to two receivers (.101-.102) in DSCP 26 ECT(0). Twice
    // the second receiver has no receive posted: an RNR NAK, and the requester sends the SEND
    // again after its RNR timer (the same PSN: the observer counts the retry as a
    // retransmission). No packet is lost.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(46, 2, 0x4601, 0x200);
    for round in 0..20 {
        for (i, qp) in qps.iter_mut().enumerate() {
            match (i, round) {
                (1, 6) | (1, 14) => {
                    let psn = qp.send(w, 512);
                    qp.rnr_retry(w, psn);
                }
                _ => {
                    qp.send(w, 2048);
                    qp.ack_if_due(w, 8);
                }
            }
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_pfc_storm(w: &mut Workload) {
    // Two senders (198.18.47.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0), untagged
    // (priority 3), while a switch port keeps priority 3 paused: an XOFF of 192 quanta (9.8 us at
    // 10 Gb/s) every 12 us (some 90,000 frames/s, ~85% of the time paused), released by an XON
    // at the end.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let port = rule_switch_port(47);
    let mut qps = rule_pairs(47, 2, 0x4701, 11);
    for step in 0..40 {
        for qp in &mut qps {
            qp.write(w, 2048);
            qp.ack_if_due(w, 8);
        }
        let q3 = if step == 39 { 0 } else { 0x00C0 };
        w.push_pause(&pfc(port, 0x08, quanta_at(3, q3)), None);
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_pfc_idle_priority(w: &mut Workload) {
    // Two senders (198.18.48.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0), untagged
    // (priority 3), frames 50 us apart; a switch port pauses priority 5, which carries no RoCE,
    // three times (256 quanta each): a few frames, no storm.
    w.set_frame_gap(50_000);
    let port = rule_switch_port(48);
    let mut qps = rule_pairs(48, 2, 0x4801, 13);
    for step in 0..40 {
        for qp in &mut qps {
            qp.write(w, 2048);
            qp.ack_if_due(w, 8);
        }
        if step % 12 == 6 {
            w.push_pause(&pfc(port, 0x20, quanta_at(5, 0x0100)), None);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_incast(w: &mut Workload) {
    // Six senders (198.18.49.1-6) WRITE to one receiver (.100) whose port congests: every 10th
    // request CE-marked; the receiver answers with CNPs in DSCP 48 (one per 50 us per QP at
    // most). Frames 2 us apart: no microburst.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps: Vec<QpStream> = (0..6u32)
        .map(|i| {
            let mut qp = rule_qp(49, [1 + i as u8, 100], [0x4901 + i, 0x4981 + i], 17 * i);
            qp.ce_every = 10;
            qp
        })
        .collect();
    for _ in 0..24 {
        for qp in &mut qps {
            qp.write(w, 4096);
            qp.ack_if_due(w, 16);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_microburst(w: &mut Workload) {
    // One sender (198.18.50.1) WRITEs 4 KiB messages to one receiver (.2) in DSCP 26 ECT(0):
    // 2 us apart, then back to back for about 500 us (PMTU frames 900 ns apart, some 96% of
    // 10 Gb/s), then 2 us apart again.
    let mut qp = rule_qp(50, [1, 2], [0x5001, 0x5081], 0);
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    for _ in 0..10 {
        qp.write(w, 4096);
        qp.ack_if_due(w, 8);
    }
    w.set_frame_gap(900);
    for _ in 0..140 {
        qp.write(w, 4096);
        qp.ack_if_due(w, 32);
    }
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    for _ in 0..10 {
        qp.write(w, 4096);
        qp.ack_if_due(w, 8);
    }
    let last = qp.last_psn();
    qp.ack(w, last);
}

pub(super) fn rule_ecmp_imbalance(w: &mut Workload) {
    // Sixteen QPs between one pair of hosts (198.18.51.1 to .2) in DSCP 26 ECT(0), all with
    // the same UDP source port (overridden instead of varied per QP): one 5-tuple each way, so
    // a 5-tuple hash puts every QP's data on one uplink.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps: Vec<QpStream> = (0..16u32)
        .map(|i| rule_qp(51, [1, 2], [0x5101 + i, 0x5181 + i], 1000 * i).with_udp_src_port(0xC000))
        .collect();
    for _ in 0..8 {
        for qp in &mut qps {
            qp.write(w, 4096);
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_reorder(w: &mut Workload) {
    // Two senders (198.18.50.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0) across
    // a fabric that sprays packets: every third 8 KiB WRITE of the first QP arrives with two
    // pairs of its packets swapped. Nothing is lost; the receivers ACK everything.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(50, 2, 0x5001, 0x300);
    for round in 0..20 {
        for (i, qp) in qps.iter_mut().enumerate() {
            if i == 0 && round % 3 == 1 {
                qp.write_reordered(w, 8192, &[0, 2, 1, 3, 4, 6, 5, 7]);
            } else {
                qp.write(w, 8192);
            }
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_duplicate_copies(w: &mut Workload) {
    // Two senders (198.18.51.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0); the
    // mirror session copies some packets of the second QP twice (ingress and egress of one
    // port into one session). No sender resends anything.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(51, 2, 0x5101, 0x400);
    for round in 0..20 {
        for (i, qp) in qps.iter_mut().enumerate() {
            qp.write(w, 4096);
            if i == 1 && round % 4 == 0 {
                qp.duplicate_last(w);
            }
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_psn_violation(w: &mut Workload) {
    // Two senders (198.18.52.1-2) to two receivers (.101-.102) in DSCP 26 ECT(0), path MTU
    // 1024 (multi-packet WRITEs show it). Once, the first requester READs 3000 bytes (PSNs N to
    // N+2) and sends its next SEND at N+2; the responder ACKs it.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(52, 2, 0x5201, 0x500);
    for round in 0..20 {
        for (i, qp) in qps.iter_mut().enumerate() {
            if i == 0 && round == 10 {
                qp.read_then_overlap(w, 3000, 512);
                let last = qp.last_psn();
                qp.ack(w, last);
            } else {
                qp.write(w, 4096);
                qp.ack_if_due(w, 8);
            }
        }
    }
    ack_all(w, &mut qps);
}

pub(super) fn rule_stall(w: &mut Workload) {
    // Two senders (198.18.53.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0). After
    // a while the first receiver stops answering: its last WRITEs are never ACKed, while the
    // second QP goes on for another 300 ms (a WRITE every 20 ms).
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(53, 2, 0x5301, 0x600);
    for _ in 0..10 {
        for qp in qps.iter_mut() {
            qp.write(w, 4096);
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
    qps[0].write(w, 4096);
    for _ in 0..15 {
        w.wait(20_000_000);
        qps[1].write(w, 4096);
        let last = qps[1].last_psn();
        qps[1].ack(w, last);
    }
}

pub(super) fn rule_latency(w: &mut Workload) {
    // Two senders (198.18.55.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0), one
    // WRITE at a time, each ACKed: the first receiver answers after 1.5 ms (a queue on its
    // path), the second after 10 us. 30 WRITEs each; the second pair's frames sit 500 ns off
    // the first's.
    let mut tl = Script::new();
    let conns: Vec<ConnId> = rule_pairs(55, 2, 0x5501, 0x800)
        .into_iter()
        .map(|qp| tl.connect(qp))
        .collect();
    for (k, (c, latency)) in conns.iter().zip([1_500_000, 10_000]).enumerate() {
        let mut t = BASE_TS_NS + 500 * k as u64;
        for _ in 0..30 {
            let r = tl.write(*c, t, 1024);
            let at = tl.sent_at(r) + latency;
            tl.ack(at, r);
            t = at + 20_000;
        }
    }
    tl.run(w);
}

pub(super) fn rule_qp_reuse(w: &mut Workload) {
    // Two senders (198.18.54.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0). The
    // first pair's tool runs twice: after a second's pause, a new connection with the same QP
    // numbers (and UDP port) starts at another, random PSN. The second pair's connection is
    // set up again at once: the connection manager's MADs (QP 1) between the two hosts, then
    // the same QP numbers 2^17 PSNs on, with no silence that would tell.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(54, 2, 0x5401, 0x700);
    for round in 0..20 {
        if round == 10 {
            w.wait(1_000_000_000);
            // Behind the old PSNs (modulo 2^24), as half of all random starts are: the
            // responder's ACKs jump back with them.
            qps[0].reincarnate(0xA0_3C11);
        }
        if round == 15 {
            qps[1].cm_exchange(w);
            let next = qps[1].last_psn() + 0x2_0000;
            qps[1].reincarnate(next);
        }
        for qp in qps.iter_mut() {
            qp.write(w, 4096);
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

#[cfg(test)]
mod tests {
    use observer_common::OpClass;

    use crate::source::synth::CNP_DSCP;
    use crate::source::synth::scenarios::scenario_names;
    use crate::source::synth::scenarios::tests::{all_scenarios, assert_deterministic};

    #[test]
    fn rule_scenarios_are_deterministic_and_cnps_keep_dscp_48_unless_told() {
        let rules: Vec<&str> = scenario_names()
            .filter(|n| n.starts_with("rule-") || n.starts_with("rules-clean"))
            .collect();
        // One per rule but flow-table-full, the two clean ones, and psn-violation's second
        // (ports per direction).
        assert_eq!(rules.len(), 30, "{rules:?}");
        for (name, w) in all_scenarios() {
            if rules.contains(&name) {
                assert_deterministic(name, &w);
            }
            if name == "corpus" {
                // Its every-opcode frames include a hand-built CNP in DSCP 26.
                continue;
            }
            let want = if name == "rule-cnp-priority" {
                1
            } else {
                1 << CNP_DSCP
            };
            for s in w.truth.flows.values() {
                if s.ops[OpClass::Cnp as usize] > 0 {
                    assert_eq!(s.cnp_dscp_mask, want, "{name}");
                }
            }
        }
    }
}
