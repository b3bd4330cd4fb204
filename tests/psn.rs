//! The PSN analysis end to end through `replay`, on captures whose truth is the generator's
//! intent: connections at each path MTU from 256 to 4096 (each flow reports its own path MTU,
//! READ accounting is exact, and a request inside a READ is a violation under exactly the path
//! MTU used), and each behaviour the analysis classifies with the PSNs wrapping from 0xFFFFFF
//! to 0 in the middle of it, counted as without the wrap. No privileges needed.

use std::{collections::BTreeSet, net::Ipv4Addr, path::PathBuf, process::Command};

use integration_tests::{Scratch, output};
use observer_common::{FlowKey, wire};
use roce_observer::{
    model::{Flow, FlowRef, Psn, Report},
    source::synth::{self, Ip, QpStream, SYNDROME_NAK_SEQ, Workload, host_mac},
};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

const MASK24: u32 = 0xFF_FFFF;

/// Writes `w` as `name.pcap` in `dir` and replays it (`--json`).
fn replay(dir: &Scratch, name: &str, w: &Workload) -> Report {
    let path: PathBuf = dir.path(&format!("{name}.pcap"));
    let f = std::fs::File::create(&path).unwrap();
    synth::write_pcap(std::io::BufWriter::new(f), &w.frames).unwrap();
    let (status, out, err) = output(
        Command::new(CLI)
            .arg("replay")
            .arg(&path)
            .args(["--no-progress", "--json"]),
    );
    assert!(status.success(), "replay {name}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn flow<'a>(r: &'a Report, key: &FlowKey) -> &'a Flow {
    let want = FlowRef::of_key(key);
    r.flows
        .iter()
        .find(|f| FlowRef::of_flow(f) == want)
        .unwrap_or_else(|| panic!("no flow {want}"))
}

/// An RC QP from 198.18.`net`.`h` to 198.18.`net`.(100 + `h`) at path MTU `pmtu`, its first
/// request at `first_psn`.
fn qp(net: u8, h: u8, pmtu: u32, first_psn: u32) -> QpStream {
    let ip = Ip::v4(
        Ipv4Addr::new(198, 18, net, h),
        Ipv4Addr::new(198, 18, net, 100 + h),
    );
    let mac = |x: u8| host_mac(u16::from(net) << 8 | u16::from(x));
    let qpn = |x: u32| u32::from(net) << 8 | x;
    let mut q = QpStream::new(
        wire::TRANSPORT_RC,
        ip,
        [mac(h), mac(100 + h)],
        [qpn(u32::from(h)), qpn(0x80 | u32::from(h))],
        first_psn,
    );
    q.pmtu = pmtu;
    q
}

/// The request PSNs the frames of `w` carry toward `key`'s destination QP, read by hand from
/// the fixed offsets of an untagged IPv4 frame (BTH at byte 42).
fn request_psns(w: &Workload, key: &FlowKey) -> Vec<u32> {
    let f = FlowRef::of_key(key);
    w.frames
        .iter()
        .map(|fr| &fr.bytes)
        .filter(|b| b[12..14] == [0x08, 0x00] && b[23] == 17)
        .filter(|b| {
            let src = Ipv4Addr::new(b[26], b[27], b[28], b[29]);
            let qpn = u32::from_be_bytes([0, b[47], b[48], b[49]]);
            f.src_ip == src && f.dest_qp == qpn
        })
        .map(|b| u32::from_be_bytes([0, b[51], b[52], b[53]]))
        .collect()
}

const PMTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// Connections at each path MTU of [`PMTUS`] (198.18.60.1-5 to .101-105), each with
/// multi-packet SENDs and WRITEs, READs with their responses, and once a SEND inside a READ:
/// the workload and, per connection, (data flow, its reverse, path MTU, the overlapped READ's
/// PSN).
fn pmtu_connections() -> (Workload, Vec<(FlowKey, FlowKey, u32, u32)>) {
    let mut w = Workload::default();
    let mut qps = Vec::new();
    for (i, &p) in PMTUS.iter().enumerate() {
        let mut q = qp(60, 1 + i as u8, p, 0x1000 * i as u32 + 7);
        let len = p as usize;
        // Multi-packet SENDs and WRITEs: their FIRST and MIDDLE packets carry one path MTU.
        q.write(&mut w, 3 * len + 100);
        q.send(&mut w, 2 * len + 1);
        // READs of several sizes, with their responses, each followed by a request at the
        // PSN after the last one it consumed: ceil(L / p).
        for dma in [p / 2, p, p + 1, 5 * p - 3, 8192] {
            let psn = q.read(&mut w, dma);
            assert_eq!(q.next_psn(), (psn + dma.div_ceil(p)) & MASK24, "{p}: {dma}");
            q.write(&mut w, 64);
        }
        // A READ of two path MTUs consumes two PSNs: a SEND two on is in order (under any
        // smaller path MTU it would lie inside the READ) ...
        q.read(&mut w, 2 * p);
        q.send(&mut w, 64);
        // ... and one a PSN on lies inside it (under any larger path MTU the READ would be
        // one PSN and the SEND in order).
        let overlapped = q.read_then_overlap(&mut w, 2 * p, 64);
        q.write(&mut w, 2 * len);
        let last = q.last_psn();
        q.ack(&mut w, last);
        qps.push((q.req.flow_key(), q.resp.flow_key(), p, overlapped));
    }
    (w, qps)
}

#[test]
fn each_flow_reports_its_own_path_mtu_and_a_read_overlap_under_exactly_it() {
    let dir = Scratch::new("psn-pmtu");
    let (w, qps) = pmtu_connections();
    let r = replay(&dir, "pmtu", &w);
    for (key, back, p, _) in &qps {
        let f = flow(&r, key);
        let t = &w.truth.flows[key];
        assert_eq!(f.psn.pmtu, Some(*p), "{p}: data flow");
        assert_eq!(flow(&r, back).psn.pmtu, Some(*p), "{p}: READ responses");
        assert_eq!(f.ops.read_request, 7, "{p}");
        assert_eq!(
            flow(&r, back).ops.read_response,
            w.truth.flows[back].ops[observer_common::OpClass::ReadResponse as usize],
            "{p}"
        );
        assert_eq!((f.packets, f.bytes), (t.packets, t.bytes), "{p}");
        // READ accounting exact: nothing ahead, behind, lost or resent.
        let psn = f.psn;
        assert_eq!(
            (
                psn.gaps,
                psn.missing,
                psn.regressions,
                psn.out_of_order,
                psn.duplicates,
                psn.retransmissions,
                psn.resets
            ),
            (0, 0, 0, 0, 0, 0, 0),
            "{p}: {psn:?}"
        );
        // One violation: the SEND a PSN after the overlapped READ; the in-order SEND two
        // PSNs after the other READ is none.
        assert_eq!(psn.violations, 1, "{p}: {psn:?}");
        // The generator's intent agrees: under this path MTU one overlap, under any larger
        // none (bit k: 256 << k).
        let k = (p / 256).trailing_zeros() as usize;
        assert_eq!(t.seq.violations[k], 1, "{p}");
        assert!(t.seq.violations[k + 1..].iter().all(|v| *v == 0), "{p}");
    }
    let fired: BTreeSet<&str> = r.findings.iter().map(|f| f.rule.as_str()).collect();
    assert_eq!(fired, BTreeSet::from(["psn-violation"]), "{:?}", r.findings);
    let finding = &r.findings[0];
    assert_eq!(finding.evidence["violations"], 5);
    let named: BTreeSet<FlowRef> = finding.flows.iter().cloned().collect();
    let want: BTreeSet<FlowRef> = qps.iter().map(|q| FlowRef::of_key(&q.0)).collect();
    assert_eq!(named, want);
}

/// The violation each flow counts is the one it names: the SEND a PSN after the overlapped
/// READ. Earlier requests in order after a READ lie inside it under smaller candidate path
/// MTUs only: kept as the first violation, they would hide the real one, and the report would
/// name none ("no timestamp kept").
#[test]
fn each_flow_names_its_first_violation_under_its_path_mtu() {
    let dir = Scratch::new("psn-pmtu-first");
    let (w, qps) = pmtu_connections();
    let r = replay(&dir, "pmtu", &w);
    for (key, _, p, read) in &qps {
        let v = flow(&r, key).psn.first_violation;
        assert_eq!(
            v.map(|v| (v.psn, v.other_psn)),
            Some(((read + 1) & MASK24, *read)),
            "{p}"
        );
    }
    assert!(
        !r.findings[0].summary.contains("no timestamp kept"),
        "{}",
        r.findings[0].summary
    );
}

/// The behaviours, each on a QP of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behaviour {
    Reorder,
    Copies,
    GoBackN,
    TimeoutResend,
    QpReuse,
    ReadOverlap,
    Loss,
}

const BEHAVIOURS: [Behaviour; 7] = [
    Behaviour::Reorder,
    Behaviour::Copies,
    Behaviour::GoBackN,
    Behaviour::TimeoutResend,
    Behaviour::QpReuse,
    Behaviour::ReadOverlap,
    Behaviour::Loss,
];

impl Behaviour {
    /// PSNs before `base` at which the QP starts, so that `base` falls in the middle of the
    /// behaviour (path MTU 1024).
    fn lead(self) -> u32 {
        match self {
            // A 4-packet WRITE, then an 8-packet one with packets 1 and 2 (base - 1, base)
            // and 5 and 6 swapped.
            Self::Reorder => 6,
            // A 4-packet WRITE, then four 1-packet WRITEs, each copied: base - 2 .. base + 1.
            Self::Copies => 6,
            // A 4-packet WRITE, then an 8-packet one whose first two (base - 1, base) are lost.
            Self::GoBackN => 5,
            // Two 4-packet WRITEs; after a silence, base - 2 .. base + 1 sent again.
            Self::TimeoutResend => 6,
            // Two 4-packet WRITEs, base - 4 .. base + 3, then the QP number reused.
            Self::QpReuse => 4,
            // A 4-packet WRITE, a READ of 3000 bytes at base - 2 (consuming base - 2 ..
            // base), a SEND at base.
            Self::ReadOverlap => 6,
            // A 4-packet WRITE, then base - 1 .. base + 1 lost, then 70 more.
            Self::Loss => 5,
        }
    }

    /// What the sender did, worked out by hand: (gaps, regressions, out of order,
    /// duplicates, retransmissions, episodes, missing, lost events, resets, violations).
    fn counts(self) -> [u64; 10] {
        match self {
            Self::Reorder => [2, 2, 2, 0, 0, 0, 0, 0, 0, 0],
            Self::Copies => [0, 4, 0, 4, 0, 0, 0, 0, 0, 0],
            Self::GoBackN => [1, 8, 0, 0, 8, 1, 0, 0, 0, 0],
            Self::TimeoutResend => [0, 4, 0, 0, 4, 1, 0, 0, 0, 0],
            Self::QpReuse => [0, 0, 0, 0, 0, 0, 0, 0, 1, 0],
            Self::ReadOverlap => [0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            Self::Loss => [1, 0, 0, 0, 0, 0, 3, 1, 0, 0],
        }
    }

    fn run(self, w: &mut Workload, q: &mut QpStream, base: u32) {
        q.write(w, 4096);
        match self {
            Self::Reorder => {
                q.write_reordered(w, 8192, &[0, 2, 1, 3, 4, 6, 5, 7]);
            }
            Self::Copies => {
                for _ in 0..4 {
                    q.write(w, 1024);
                    q.duplicate_last(w);
                }
            }
            Self::GoBackN => {
                let first = q.next_psn();
                q.lose_next(2);
                q.write(w, 8192);
                q.nak(w, first, SYNDROME_NAK_SEQ);
                q.retransmit_from(w, first);
            }
            Self::TimeoutResend => {
                q.write(w, 4096);
                // Longer than the analysis's resend threshold (5 ms), far below a stall.
                w.wait(10_000_000);
                q.retransmit_from(w, base.wrapping_sub(2) & MASK24);
            }
            Self::QpReuse => {
                q.write(w, 4096);
                let last = q.last_psn();
                q.ack(w, last);
                w.wait(1_000_000_000);
                q.reincarnate(base.wrapping_add(0x70_0000) & MASK24);
                q.write(w, 4096);
            }
            Self::ReadOverlap => {
                q.read_then_overlap(w, 3000, 512);
                q.write(w, 2048);
            }
            Self::Loss => {
                q.lose_next(3);
                q.write(w, 3072);
                for _ in 0..70 {
                    q.write(w, 1024);
                }
            }
        }
        let last = q.last_psn();
        q.ack(w, last);
    }
}

fn counts(p: &Psn) -> [u64; 10] {
    [
        p.gaps,
        p.regressions,
        p.out_of_order,
        p.duplicates,
        p.retransmissions,
        p.retransmission_episodes,
        p.missing,
        p.lost_events,
        p.resets,
        p.violations,
    ]
}

/// Every behaviour, one QP each, around PSN `base`: the workload and each QP's flows.
fn behaviours(base: u32) -> (Workload, Vec<(Behaviour, FlowKey, FlowKey)>) {
    let mut w = Workload::default();
    let mut keys = Vec::new();
    for (i, b) in BEHAVIOURS.into_iter().enumerate() {
        let mut q = qp(61, 1 + i as u8, 1024, base.wrapping_sub(b.lead()) & MASK24);
        b.run(&mut w, &mut q, base);
        keys.push((b, q.req.flow_key(), q.resp.flow_key()));
    }
    (w, keys)
}

#[test]
fn each_behaviour_counts_the_same_with_the_psns_wrapping_inside_it() {
    let dir = Scratch::new("psn-wrap");
    let (far_w, far_keys) = behaviours(0x10_0000);
    let (w, keys) = behaviours(0);
    let far = replay(&dir, "far", &far_w);
    let r = replay(&dir, "wrap", &w);
    for ((b, key, back), (_, far_key, far_back)) in keys.iter().zip(&far_keys) {
        // The wrap lies inside the behaviour: its requests carry PSNs just before it and just
        // after it.
        let psns = request_psns(&w, key);
        assert!(
            psns.iter().any(|p| *p >= MASK24 - 2) && psns.iter().any(|p| *p <= 2),
            "{b:?}: {psns:x?}"
        );
        let (wrapped, unwrapped) = (flow(&r, key), flow(&far, far_key));
        assert_eq!(counts(&wrapped.psn), b.counts(), "{b:?}: across the wrap");
        assert_eq!(
            counts(&unwrapped.psn),
            b.counts(),
            "{b:?}: far from the wrap"
        );
        assert_eq!(wrapped.psn.pmtu, Some(1024), "{b:?}");
        assert_eq!(
            flow(&r, back).psn.nak_seq_errors,
            u64::from(*b == Behaviour::GoBackN),
            "{b:?}"
        );
        assert_eq!(
            flow(&far, far_back).psn.nak_seq_errors,
            flow(&r, back).psn.nak_seq_errors
        );
        // Every request answered, wrap or not.
        assert!(wrapped.psn.unanswered.is_none(), "{b:?}: {:?}", wrapped.psn);
        assert!(unwrapped.psn.unanswered.is_none(), "{b:?}");
        // The times are the same in both captures.
        assert_eq!(
            wrapped.psn.longest_resend_wait, unwrapped.psn.longest_resend_wait,
            "{b:?}"
        );
        // The truth the generator recorded as it went says the same.
        let t = &w.truth.flows[key];
        assert_eq!(
            (
                t.psn_gaps,
                t.psn_regressions,
                t.seq.retransmissions,
                t.seq.resets
            ),
            (b.counts()[0], b.counts()[1], b.counts()[4], b.counts()[8]),
            "{b:?}"
        );
    }
    let overlap = &keys[5];
    assert_eq!(overlap.0, Behaviour::ReadOverlap);
    let v = flow(&r, &overlap.1).psn.first_violation.unwrap();
    assert_eq!((v.psn, v.other_psn), (0, MASK24 - 1));
    let timeout = &keys[3];
    let wait = flow(&r, &timeout.1).psn.longest_resend_wait.unwrap();
    assert!((10_000_000..11_000_000).contains(&wait.for_ns), "{wait:?}");
    // The same findings either way.
    let rules = |r: &Report| -> Vec<(String, String)> {
        r.checks
            .iter()
            .map(|c| (c.rule.clone(), format!("{:?}", c.status)))
            .collect()
    };
    assert_eq!(rules(&r), rules(&far));
    let fired: BTreeSet<&str> = r.findings.iter().map(|f| f.rule.as_str()).collect();
    assert_eq!(
        fired,
        BTreeSet::from([
            "loss",
            "psn-violation",
            "reorder",
            "duplicate-copies",
            "qp-reuse"
        ])
    );
}
