//! Scenarios: the named workloads of [`SCENARIOS`], built by [`scenario`], and the helpers the
//! scenario families share (queue pairs between documentation addresses, everyday traffic,
//! go-back-N). One file per family:
//!
//! - `demo`: `demo` and `e2e` (demo plus every feature the observer handles);
//! - `corpus`: `corpus` (every opcode and truncation offset) and `many-qps`;
//! - `traffic`: the user scenarios of a fabric's life: `clean`, `incast`, `loss`, `mixed-dscp`,
//!   `ipv6-vlan`;
//! - `pfc`: `pfc`, pauses beside RoCE;
//! - `latency`: `latency`, responders answering after known latencies;
//! - `rules`: `rules-clean` and one `rule-*` scenario per rule of the findings engine;
//! - `pairing`: `pairing-*`, connections whose directions use different UDP source ports (as
//!   NICs other than mlx5 make them), and `rule-psn-violation-split`.

use observer_common::wire;

use super::SYNDROME_NAK_SEQ;
use super::frame::{Ip, host_mac, v4, v6};
use super::qp::QpStream;
use super::workload::Workload;

mod corpus;
mod demo;
mod latency;
mod nic;
mod pairing;
mod pfc;
mod rules;
mod traffic;
mod training;

pub use pfc::PFC_SENDERS;
pub use rules::RULE_FRAME_GAP_NS;

use corpus::{corpus, many_qps};
use demo::{demo, e2e};
use latency::{latency, latency_ports};
pub use nic::{NIC_DEVICE, NIC_NETDEV};
use nic::{
    rule_nic_ecn_without_cnp, rule_nic_lossless_discards, rule_nic_pause_share,
    rule_nic_pause_storm, rule_nic_pfc_priorities, rule_nic_transport_errors,
    rule_nic_wire_mismatch, rules_clean_nic,
};
use pairing::{
    pairing_ambiguous, pairing_cm, pairing_fixed_port, pairing_flow_labels, pairing_local_port,
    pairing_many_qps, pairing_port_collision, pairing_qp_reuse, pairing_respray, pairing_spray,
    rule_psn_violation_split,
};
use pfc::pfc_scenario;
use rules::{
    rule_ce_without_cnp, rule_cnp_priority, rule_dscp_mix, rule_duplicate_copies,
    rule_ecmp_imbalance, rule_incast, rule_latency, rule_loss, rule_microburst, rule_not_ect,
    rule_pfc_idle_priority, rule_pfc_storm, rule_psn_violation, rule_qp_reuse, rule_reorder,
    rule_rnr, rule_stall, rules_clean,
};
use traffic::{clean, incast, ipv6_vlan, loss, mixed_dscp};
use training::{
    rule_job_hang, rule_job_irregular_iteration, rule_job_straggler, training,
    training_network_straggler, training_tree, training_tree_straggler, training_two_jobs,
};

/// The scenarios meant to be written to capture files: plain, complete frames only (no
/// deliberately broken ones), so any dissector must agree with the truth on every frame.
pub const USER_SCENARIOS: [&str; 8] = [
    "clean",
    "incast",
    "loss",
    "mixed-dscp",
    "ipv6-vlan",
    "many-qps",
    "pfc",
    "latency",
];

/// (name, one-line description) of every scenario.
pub const SCENARIOS: &[(&str, &str)] = &[
    (
        "demo",
        "RC RDMA WRITEs with coalesced ACKs, one congested QP (CE marks, CNPs), one lossy QP (gap, NAK, go-back-N)",
    ),
    (
        "e2e",
        "demo plus IPv6, 802.1Q and QinQ, READ, SEND imm/inv, UD, atomics, RNR NAK, XRC, UC, ECN variants, mirror-truncated copies, PFC and PAUSE (also inside ERSPAN III), noise for every skip reason",
    ),
    (
        "corpus",
        "e2e plus every opcode, ECN and DSCP, IPv4 options, and frames truncated at every byte offset (for BPF_PROG_TEST_RUN)",
    ),
    ("many-qps", "1000 RC QPs doing a few RDMA WRITEs each"),
    (
        "clean",
        "6 RC QPs between 5 hosts: RDMA WRITE (also with immediate), SEND, READ with responses, coalesced ACKs; DSCP 26 ECT(0), no CE, no loss",
    ),
    (
        "incast",
        "8 senders WRITE to one receiver whose port congests: a growing share of CE marks, CNPs (DSCP 48, BECN) to each sender's QP at most one per 50 us, frames 500 ns apart",
    ),
    (
        "loss",
        "4 RC QPs with loss: PSN gaps answered by NAKs (PSN sequence error) and go-back-N retransmission, and an RNR NAK with its retransmission",
    ),
    (
        "mixed-dscp",
        "RC QPs on DSCP 0, 10, 26, 34 and 46 with Not-ECT, ECT(1), ECT(0) and CE, CNPs on DSCP 48, and a flow re-marked from DSCP 26 to 34 mid-stream",
    ),
    (
        "ipv6-vlan",
        "IPv6 (with and without flow label), 802.1Q (PCP 3) and QinQ (0x88A8 + 0x8100) flows, IPv4 and IPv6, interleaved with untagged IPv4",
    ),
    (
        "pfc",
        "RoCE on 4 QPs with a PFC storm on priority 3 (refreshed, then XON), PFC on priorities 3+4, an empty class-enable vector, and 802.3x PAUSE",
    ),
    (
        "latency",
        "3 RC QPs (IPv4, IPv6) whose responders answer after 5 us to 12 ms: one ACK per request, coalesced ACKs, more than 4 requests in flight, go-back-N after a NAK, an RNR NAK, a timeout resend, pipelined READs, a WRITE never answered",
    ),
    (
        "training",
        "a training job: a ring all-reduce among 8 hosts, 12 iterations of 40 ms compute (up to 5% apart per host) then 14 ring steps of 4 WRITEs and an ACK each; a host's step waits for its predecessor's",
    ),
    (
        "training-two-jobs",
        "two training rings on the same 8 hosts at once, each on its own QPs (the training ring's pace, and one computing 25 ms per iteration for 18 iterations): two jobs with --jobs",
    ),
    (
        "training-tree",
        "the training job's 8 hosts and pace in a binary tree all-reduce: each host sends its subtree's data to its parent once its children's is in, the root broadcasts back down, each host to its children one after the other (one job with --jobs)",
    ),
    (
        "training-tree-straggler",
        "the training tree with a leaf (its eighth host) computing 25% longer every iteration: it sends to its parent late while the network is quiet (job-straggler, cause host, with --jobs)",
    ),
    (
        "training-network-straggler",
        "the training ring with its sixth host's link slow: its steps take twice as long, every other packet CE-marked, one lost and resent per step (a NAK, a CNP): it finishes its phases last (job-straggler, cause network, with --jobs)",
    ),
    (
        "rules-clean",
        "a well-configured fabric: 12 QPs, DSCP 26 ECT(0), CE answered by CNPs in DSCP 48, one short pause on priority 3; no rule fires (replay --link-speed 10G --uplinks 4)",
    ),
    (
        "rule-ce-without-cnp",
        "CE-marked WRITEs whose receiver ACKs but sends no CNP (rule ce-without-cnp)",
    ),
    (
        "rule-not-ect",
        "three senders in DSCP 26, one of them Not-ECT while the others are ECT(0) (rule not-ect)",
    ),
    (
        "rule-cnp-priority",
        "CE marks answered by CNPs sent in best-effort DSCP 0 (rule cnp-priority)",
    ),
    (
        "rule-dscp-mix",
        "RoCE data in DSCP 26 and in DSCP 0, all ECT(0) (rule dscp-mix)",
    ),
    (
        "rule-loss",
        "two drops in DSCP 26: PSN gaps, NAKs (sequence error), go-back-N (rule loss)",
    ),
    (
        "rule-reorder",
        "WRITEs whose packets a spraying fabric swaps in pairs, nothing lost (rule reorder)",
    ),
    (
        "rule-duplicate-copies",
        "WRITEs some of whose packets the mirror copies twice, nothing resent (rule duplicate-copies)",
    ),
    (
        "rule-psn-violation",
        "a READ of 3000 bytes at path MTU 1024 (PSNs N..N+2) followed by a SEND at N+2 (rule psn-violation)",
    ),
    (
        "rule-psn-violation-split",
        "the psn-violation fault with each side's UDP port from its own QPN (Soft-RoCE before 2022): a READ of 3 packets answered, a SEND inside its range, an ACK naming PSN 0xFFFFFF, then silence while another QP goes on for 300 ms (rules psn-violation and stall)",
    ),
    (
        "rule-stall",
        "a receiver that stops answering while another QP goes on for 300 ms (rule stall)",
    ),
    (
        "rule-latency",
        "WRITEs one at a time, each ACKed: one receiver after 1.5 ms (a queue on its path), the other after 10 us (rule latency)",
    ),
    (
        "rule-qp-reuse",
        "QP numbers reused by new connections: after a second's pause, and at once after the connection manager's MADs (QP 1), from other PSNs (rule qp-reuse)",
    ),
    (
        "rule-rnr",
        "SENDs answered by RNR NAKs and sent again after the RNR timer, no drop (rule rnr)",
    ),
    (
        "rule-pfc-storm",
        "RoCE in DSCP 26 while priority 3 is paused again every 12 us, ~85% of the time (rule pfc-storm)",
    ),
    (
        "rule-pfc-idle-priority",
        "untagged RoCE (priority 3) and a few pauses on priority 5 (rule pfc-idle-priority)",
    ),
    (
        "rule-incast",
        "six senders to one receiver, 10% CE, CNPs in DSCP 48 (rule incast)",
    ),
    (
        "rule-microburst",
        "4 KiB WRITEs back to back at ~96% of 10 Gb/s for ~500 us (rule microburst, with --link-speed 10G)",
    ),
    (
        "rule-job-straggler",
        "the training ring (8 hosts) with its fourth host computing 25% longer every iteration: it starts its part of each phase late, the network quiet (rule job-straggler, with --jobs)",
    ),
    (
        "rule-job-irregular-iteration",
        "the training ring with its seventh iteration's collective four times as slow, its packets CE-marked, lost and resent (rule job-irregular-iteration, cause network, with --jobs)",
    ),
    (
        "rule-job-hang",
        "the training ring whose fourth host never finishes computing for its ninth iteration (its peers send what they can and wait), another pair of hosts writing for 250 ms more (rule job-hang, with --jobs)",
    ),
    (
        "rule-ecmp-imbalance",
        "16 QPs between two hosts on one UDP source port: one uplink of 4 takes them all (rule ecmp-imbalance, with --uplinks 4)",
    ),
    (
        "latency-ports",
        "the latency scenario on connections whose directions use ports of their own (each side's from its own QPN, flow labels per side, fixed per QP), two of them between the same hosts",
    ),
    (
        "pairing-local-port",
        "3 RC connections whose sides each take their UDP source port from their own QPN (Soft-RoCE, irdma, hns before 2022): WRITE, READ, SEND, coalesced ACKs",
    ),
    (
        "pairing-fixed-port",
        "2 RC connections with a fixed UDP source port per QP on each side (62017 one way, 57236 the other; 72 and 69)",
    ),
    (
        "pairing-flow-labels",
        "2 IPv6 RC connections whose sides set flow labels of their own (each side's port from its own label)",
    ),
    (
        "pairing-many-qps",
        "NCCL between two hosts: 4 RC QPs each way, all starting at PSN 0, ports per direction, channels carrying 4 to 16 WRITEs",
    ),
    (
        "pairing-respray",
        "flowlets: a connection moved to another UDP source port (both ways) every 5 WRITEs, and one whose requester alone moves (ports per direction), an ACK due coming back on the new port",
    ),
    (
        "pairing-port-collision",
        "Soft-RoCE numbering QPs alike on both hosts (0x11 to 0x12, 0x12 to 0x11), ports per direction: one connection's requests share a port with the other's answers",
    ),
    (
        "pairing-qp-reuse",
        "a QP number reused with another peer QP after a second's silence, from a PSN behind the first connection's, one port both ways",
    ),
    (
        "pairing-ambiguous",
        "2 RC QPs between the same hosts in lockstep from PSN 0, ports per direction: nothing tells their directions apart",
    ),
    (
        "pairing-cm",
        "pairing-ambiguous with the connection manager's REQ, REP and RTU seen before each QP starts: they name both QPs",
    ),
    (
        "pairing-spray",
        "per-packet spraying: every request packet of a connection on the next of 4 UDP source ports, the ACKs on one; nothing lost",
    ),
    (
        "rules-clean-nic",
        "rules-clean beside a well-configured mlx5 host's NIC, read a second apart: no NIC rule fires",
    ),
    (
        "rule-nic-pfc-priorities",
        "rules-clean-nic with PFC on priorities 0, 3 and 4 (rule nic-pfc-priorities)",
    ),
    (
        "rule-nic-ecn-without-cnp",
        "rules-clean-nic whose NIC counts 400 ECN-marked arrivals and no CNP sent (rule nic-ecn-without-cnp)",
    ),
    (
        "rule-nic-transport-errors",
        "rules-clean-nic whose NIC counts 7 out-of-sequence arrivals (across a 32-bit wrap) and 2 sequence errors (rule nic-transport-errors)",
    ),
    (
        "rule-nic-pause-share",
        "rules-clean-nic whose priority 3 is held by received pauses 35% of the second (rule nic-pause-share)",
    ),
    (
        "rule-nic-pause-storm",
        "rules-clean-nic whose NIC counts pause storm warning and error events (rule nic-pause-storm)",
    ),
    (
        "rule-nic-lossless-discards",
        "rules-clean-nic whose lossless priority 3 discards 120 frames (rule nic-lossless-discards)",
    ),
    (
        "rule-nic-wire-mismatch",
        "rules-clean seen from receiver 198.18.40.101, whose NIC counts its CNPs but none of the CE-marked arrivals the wire shows (rule nic-wire-mismatch)",
    ),
];

/// The names of [`SCENARIOS`], in order.
pub fn scenario_names() -> impl Iterator<Item = &'static str> {
    SCENARIOS.iter().map(|(name, _)| *name)
}

/// Builds the named scenario of [`SCENARIOS`] (deterministic).
pub fn scenario(name: &str) -> Option<Workload> {
    let mut w = Workload::default();
    match name {
        "demo" => demo(&mut w),
        "e2e" => e2e(&mut w),
        "corpus" => corpus(&mut w),
        "many-qps" => many_qps(&mut w),
        "clean" => clean(&mut w),
        "incast" => incast(&mut w),
        "loss" => loss(&mut w),
        "mixed-dscp" => mixed_dscp(&mut w),
        "ipv6-vlan" => ipv6_vlan(&mut w),
        "pfc" => pfc_scenario(&mut w),
        "latency" => latency(&mut w),
        "training" => training(&mut w),
        "training-network-straggler" => training_network_straggler(&mut w),
        "training-two-jobs" => training_two_jobs(&mut w),
        "training-tree" => training_tree(&mut w),
        "training-tree-straggler" => training_tree_straggler(&mut w),
        "rules-clean" => rules_clean(&mut w),
        "rule-ce-without-cnp" => rule_ce_without_cnp(&mut w),
        "rule-not-ect" => rule_not_ect(&mut w),
        "rule-cnp-priority" => rule_cnp_priority(&mut w),
        "rule-dscp-mix" => rule_dscp_mix(&mut w),
        "rule-loss" => rule_loss(&mut w),
        "rule-reorder" => rule_reorder(&mut w),
        "rule-duplicate-copies" => rule_duplicate_copies(&mut w),
        "rule-psn-violation" => rule_psn_violation(&mut w),
        "rule-stall" => rule_stall(&mut w),
        "rule-latency" => rule_latency(&mut w),
        "rule-qp-reuse" => rule_qp_reuse(&mut w),
        "rule-rnr" => rule_rnr(&mut w),
        "rule-pfc-storm" => rule_pfc_storm(&mut w),
        "rule-pfc-idle-priority" => rule_pfc_idle_priority(&mut w),
        "rule-incast" => rule_incast(&mut w),
        "rule-microburst" => rule_microburst(&mut w),
        "rule-ecmp-imbalance" => rule_ecmp_imbalance(&mut w),
        "rule-job-straggler" => rule_job_straggler(&mut w),
        "rule-job-irregular-iteration" => rule_job_irregular_iteration(&mut w),
        "rule-job-hang" => rule_job_hang(&mut w),
        "rule-psn-violation-split" => rule_psn_violation_split(&mut w),
        "latency-ports" => latency_ports(&mut w),
        "pairing-local-port" => pairing_local_port(&mut w),
        "pairing-fixed-port" => pairing_fixed_port(&mut w),
        "pairing-flow-labels" => pairing_flow_labels(&mut w),
        "pairing-many-qps" => pairing_many_qps(&mut w),
        "pairing-respray" => pairing_respray(&mut w),
        "pairing-ambiguous" => pairing_ambiguous(&mut w),
        "pairing-cm" => pairing_cm(&mut w),
        "pairing-spray" => pairing_spray(&mut w),
        "pairing-port-collision" => pairing_port_collision(&mut w),
        "pairing-qp-reuse" => pairing_qp_reuse(&mut w),
        "rules-clean-nic" => rules_clean_nic(&mut w),
        "rule-nic-pfc-priorities" => rule_nic_pfc_priorities(&mut w),
        "rule-nic-ecn-without-cnp" => rule_nic_ecn_without_cnp(&mut w),
        "rule-nic-transport-errors" => rule_nic_transport_errors(&mut w),
        "rule-nic-pause-share" => rule_nic_pause_share(&mut w),
        "rule-nic-pause-storm" => rule_nic_pause_storm(&mut w),
        "rule-nic-lossless-discards" => rule_nic_lossless_discards(&mut w),
        "rule-nic-wire-mismatch" => rule_nic_wire_mismatch(&mut w),
        _ => return None,
    }
    Some(w)
}

/// An IPv4 RC QP between hosts 198.18.`net`.`a` and 198.18.`net`.`b`.
pub(super) fn qp_v4(
    transport: u8,
    net: u8,
    hosts: [u8; 2],
    qpns: [u32; 2],
    first_psn: u32,
) -> QpStream {
    let ip = Ip::v4(v4(net, hosts[0]), v4(net, hosts[1]));
    let mac = |h: u8| host_mac(u16::from(net) << 8 | u16::from(h));
    QpStream::new(
        transport,
        ip,
        [mac(hosts[0]), mac(hosts[1])],
        qpns,
        first_psn,
    )
}

/// An IPv6 RC QP between 2001:db8::`hosts[0]` and 2001:db8::`hosts[1]` (MACs 02:..:hi:lo of
/// the same numbers).
pub(super) fn qp_v6(hosts: [u16; 2], flow_label: u32, qpns: [u32; 2], first_psn: u32) -> QpStream {
    let ip = Ip::V6 {
        src: v6(hosts[0]),
        dst: v6(hosts[1]),
        flow_label,
    };
    QpStream::new(
        wire::TRANSPORT_RC,
        ip,
        [host_mac(hosts[0]), host_mac(hosts[1])],
        qpns,
        first_psn,
    )
}

/// The responder of each QP acknowledges its last request (the end of a scenario).
fn ack_all<'a>(w: &mut Workload, qps: impl IntoIterator<Item = &'a mut QpStream>) {
    for qp in qps {
        let last = qp.last_psn();
        qp.ack(w, last);
    }
}

/// One step of a QP's ordinary traffic, chosen by `step`: WRITEs, SENDs (plain and with
/// immediate) and READs of varied sizes; the responder ACKs every 8 requests (coalesced).
fn everyday_op(w: &mut Workload, qp: &mut QpStream, step: usize) {
    const SIZES: [usize; 7] = [4096, 1024, 16384, 300, 8192, 2048, 32768];
    let len = SIZES[step % SIZES.len()];
    match step % 6 {
        0 | 3 => {
            qp.write(w, len);
        }
        1 => {
            qp.send(w, len.min(4096));
        }
        2 => {
            qp.read(w, (len as u32).max(512));
            return;
        }
        4 => {
            qp.write_imm(w, len, 0xC1EA_0000 | step as u32);
        }
        _ => {
            qp.send_imm(w, 64, step as u32);
        }
    }
    qp.ack_if_due(w, 8);
}

/// Minimum capture time between two CNPs of one flow (the NICs' per-QP CNP timer).
pub const CNP_INTERVAL_NS: u64 = 50_000;

/// Loses `lost` request packets after the QP's next `before` bytes of WRITE, lets `after` more
/// bytes arrive out of order, then the responder NAKs the first missing PSN and the requester
/// goes back to it; finally the responder ACKs everything.
fn go_back_n(w: &mut Workload, qp: &mut QpStream, before: usize, lost: u32, after: usize) {
    qp.write(w, before);
    let first = qp.next_psn();
    qp.lose_next(lost);
    qp.write(w, after);
    qp.nak(w, first, SYNDROME_NAK_SEQ);
    qp.retransmit_from(w, first);
    let last = qp.last_psn();
    qp.ack(w, last);
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use etherparse::{NetSlice, SlicedPacket};
    use observer_common::{FlowStats, OpClass, SkipReason, parse, wire};

    use super::*;
    use crate::source::synth::{FRAME_GAP_NS, Truth};

    /// A resend after an RNR NAK waits out the RNR timer (at most 655.36 ms): no stall. A
    /// resend a second after an RNR NAK waited for something else: kept as the longest wait.
    #[test]
    fn an_rnr_wait_is_no_stall_but_a_longer_wait_after_an_rnr_nak_is() {
        for (wait_ns, kept) in [
            (crate::source::synth::qp::RNR_WAIT_NS, false),
            (1_000_000_000, true),
        ] {
            let mut w = Workload::default();
            let mut qp = qp_v4(wire::TRANSPORT_RC, 60, [1, 101], [0x6001, 0x6081], 0);
            for _ in 0..4 {
                qp.write(&mut w, 1024);
            }
            let psn = qp.send(&mut w, 256);
            qp.nak(&mut w, psn, crate::source::synth::SYNDROME_RNR_NAK);
            w.wait(wait_ns);
            qp.retransmit_from(&mut w, psn);
            qp.ack(&mut w, psn);
            let mut agg = crate::aggregate::Aggregate::new();
            for f in &w.frames {
                let _ = agg.push(f.bytes.as_slice(), f.ts_ns);
            }
            let r = agg.report(crate::model::Source::pcap(Vec::new(), Vec::new()), 1.0);
            let f = r
                .flows
                .iter()
                .find(|f| f.dest_qp == 0x6081)
                .expect("requests");
            assert_eq!(f.psn.retransmissions, 1, "{wait_ns}");
            let wait = f.psn.longest_resend_wait.map(|w| w.for_ns);
            assert_eq!(wait.is_some(), kept, "{wait_ns}: {wait:?}");
            if kept {
                assert!(wait >= Some(wait_ns), "{wait:?}");
            }
        }
    }

    pub(super) fn all_scenarios() -> Vec<(&'static str, Workload)> {
        SCENARIOS
            .iter()
            .map(|(name, _)| (*name, scenario(name).expect("listed scenario builds")))
            .collect()
    }

    /// What the one aggregation path computes for the frames (the cross-check), with the fields
    /// the truth leaves out zeroed.
    fn parsed_truth(w: &Workload) -> Truth {
        let mut agg = crate::aggregate::Aggregate::new();
        for f in &w.frames {
            let _ = agg.push(f.bytes.as_slice(), f.ts_ns);
        }
        assert!(
            agg.unions.is_empty(),
            "the scenarios copy no RoCE through a mirror"
        );
        let c = agg.comparable();
        Truth {
            flows: c.flows.into_iter().collect(),
            pauses: c.pauses,
            counters: c.counters,
            latency: Default::default(),
            messages: c.messages.into_iter().collect(),
            connections: Default::default(),
            cm: c.cm_conns,
            jobs: Vec::new(),
        }
    }

    #[test]
    fn parser_agrees_with_truth_in_every_scenario() {
        for (name, w) in all_scenarios() {
            let got = parsed_truth(&w);
            assert_eq!(got.counters, w.truth.counters, "{name}: counters");
            for (key, want) in &w.truth.flows {
                let got = got.flows.get(key).copied();
                // Per-packet spraying: the generator's PSN truth follows the QP, the analysis
                // each port's share (holes the report marks as such: `psn.sprayed`, tested in
                // tests/pairing.rs). Everything else must agree.
                let (got, want) = if name == "pairing-spray" {
                    let clear = |mut s: FlowStats| {
                        s.seq = Default::default();
                        s.seq_track = Default::default();
                        s.psn_gaps = 0;
                        s.psn_regressions = 0;
                        s
                    };
                    (got.map(clear), clear(*want))
                } else {
                    (got, *want)
                };
                assert_eq!(got, Some(want), "{name}: flow {key:?}");
            }
            assert_eq!(got.flows.len(), w.truth.flows.len(), "{name}: flow count");
            assert_eq!(got.pauses, w.truth.pauses, "{name}: pauses");
            let counted = |m: &std::collections::BTreeMap<_, observer_common::MsgStats>| {
                m.iter()
                    .map(|(k, s)| (*k, s.counts()))
                    .filter(|(_, s)| *s != Default::default())
                    .collect::<std::collections::BTreeMap<_, _>>()
            };
            let (got_m, want_m) = (counted(&got.messages), counted(&w.truth.messages));
            for key in got_m.keys().chain(want_m.keys()) {
                let show = |m: Option<&observer_common::MsgStats>| {
                    m.map(|m| (m.count, m.bytes, m.unknown_size, m.min, m.max))
                };
                assert_eq!(
                    show(got_m.get(key)),
                    show(want_m.get(key)),
                    "{name}: messages of {key:?}: replay, then the scenario's"
                );
            }
            assert_eq!(got_m, want_m, "{name}: message sizes");
        }
    }

    /// The scenario `name` built again gives `w` again: the same truth, frames and times.
    pub(super) fn assert_deterministic(name: &str, w: &Workload) {
        let again = scenario(name).unwrap();
        assert_eq!(w.truth, again.truth, "{name}");
        assert!(
            w.frames.len() == again.frames.len()
                && w.frames
                    .iter()
                    .zip(&again.frames)
                    .all(|(x, y)| x.bytes == y.bytes && x.ts_ns == y.ts_ns),
            "{name}: not deterministic"
        );
    }

    pub(super) fn class_totals(t: &Truth) -> [u64; OpClass::COUNT] {
        let mut ops = [0; OpClass::COUNT];
        for s in t.flows.values() {
            for (a, b) in ops.iter_mut().zip(s.ops) {
                *a += b;
            }
        }
        ops
    }

    pub(super) fn cnp_count(w: &Workload) -> u64 {
        w.truth.counters.cnp_packets
    }

    pub(super) fn sum_flows(w: &Workload, f: impl Fn(&FlowStats) -> u64) -> u64 {
        w.truth.flows.values().map(f).sum()
    }

    #[test]
    fn scenario_frames_are_plausible() {
        for (name, w) in all_scenarios() {
            assert!(!w.is_empty(), "{name}");
            for pair in w.frames.windows(2) {
                assert!(pair[0].ts_ns < pair[1].ts_ns, "{name}: timestamps");
            }
            for (i, f) in w.frames.iter().enumerate() {
                if f.bytes.len() >= 12 {
                    let src = f.bytes[6];
                    assert_eq!(src & 3, 2, "{name} frame {i}: source MAC {src:#x}");
                }
                let parsed = SlicedPacket::from_ethernet(&f.bytes);
                if let Ok(SlicedPacket {
                    net: Some(NetSlice::Ipv4(ip)),
                    ..
                }) = parsed
                {
                    let h = ip.header();
                    assert_eq!(
                        h.header_checksum(),
                        h.to_header().calc_header_checksum(),
                        "{name} frame {i}"
                    );
                }
            }
            for key in w.truth.flows.keys() {
                for ip in [key.src_ip, key.dst_ip] {
                    let v4_bench = ip[..12]
                        == Ipv4Addr::UNSPECIFIED.to_ipv6_mapped().octets()[..12]
                        && ip[12] == 198
                        && (ip[13] & 0xFE) == 18;
                    let v6_doc = ip[..4] == [0x20, 0x01, 0x0d, 0xb8];
                    assert!(v4_bench || v6_doc, "{name}: address {ip:?}");
                }
            }
        }
    }

    #[test]
    fn scenarios_are_deterministic_and_sized() {
        let a = scenario("e2e").unwrap();
        let b = scenario("e2e").unwrap();
        assert_eq!(a.truth, b.truth);
        assert!(
            a.frames
                .iter()
                .zip(&b.frames)
                .all(|(x, y)| x.bytes == y.bytes)
        );
        let demo = scenario("demo").unwrap();
        assert!(
            (500..4000).contains(&demo.len()),
            "demo has {} frames",
            demo.len()
        );
        let many = scenario("many-qps").unwrap();
        let requesters = many
            .truth
            .flows
            .values()
            .filter(|s| s.ops[OpClass::Write as usize] > 0)
            .count();
        assert_eq!(requesters, 1000);
        assert!(scenario("no-such-scenario").is_none());
    }

    #[test]
    fn user_scenarios_are_deterministic_whole_and_sized() {
        let names: Vec<&str> = scenario_names().collect();
        for name in USER_SCENARIOS {
            assert!(names.contains(&name), "{name} not in SCENARIOS");
            let w = scenario(name).unwrap();
            assert_deterministic(name, &w);
            if name != "many-qps" {
                assert!((300..5000).contains(&w.len()), "{name}: {} frames", w.len());
            }
            // Only RoCE, and PAUSE / PFC frames (whole, each itemized in the pause table).
            let c = &w.truth.counters;
            let pauses: u64 = w.truth.pauses.values().map(|s| s.frames_total()).sum();
            assert_eq!(c.skipped[SkipReason::MacControl as usize], pauses, "{name}");
            assert_eq!(c.roce_packets + pauses, c.frames, "{name}: skipped frames");
            for (i, f) in w.frames.iter().enumerate() {
                if f.bytes[12..14] == wire::ETHERTYPE_MAC_CONTROL.to_be_bytes() {
                    assert_eq!(f.bytes.len(), 60, "{name} frame {i}");
                    continue;
                }
                let p = parse(f.bytes.as_slice()).unwrap();
                assert_eq!(
                    p.ip_len as usize + 14 + 4 * usize::from(p.vlan_count),
                    f.bytes.len()
                );
                assert!(
                    p.udp_src_port >= 1024,
                    "{name} frame {i}: port {}",
                    p.udp_src_port
                );
            }
            for pair in w.frames.windows(2) {
                // Frames come back to back, or after a requester waited out its RNR timer.
                assert!(
                    pair[1].ts_ns - pair[0].ts_ns
                        <= FRAME_GAP_NS + crate::source::synth::qp::RNR_WAIT_NS,
                    "{name}"
                );
            }
        }
    }
}
