//! Captures of one traffic taken at two observation points (a requester's host and its peer's),
//! made from the generator's `latency` scenario with delays and a clock offset we choose: each
//! packet counts once, the one-way delays and the clocks' offset are the ones put in, the
//! round trip at the requester's point is the one-way delays plus the answer time at the
//! peer's, and a packet dropped between the points is named with where it was seen last. On
//! the real per-node NCCL captures, each packet counts once and the latency of each point is
//! that point's own. No privileges needed.

use std::path::PathBuf;

use integration_tests::Scratch;
use observer_common::{FlowKey, parse_frame};
use roce_observer::{
    model::Report,
    pipeline::{AnalysisOptions, replay_report},
    source::synth,
};

const A: [u8; 4] = [198, 18, 70, 1];
const B: [u8; 4] = [198, 18, 70, 101];
/// A to B, B to A, and the peer's clock ahead of the requester's.
const D_AB: u64 = 2_000;
const D_BA: u64 = 3_000;
const THETA: u64 = 1_234_567;

fn v4(b: [u8; 16]) -> Option<[u8; 4]> {
    std::net::Ipv6Addr::from(b)
        .to_ipv4_mapped()
        .map(|v| v.octets())
}

/// The scenario's connection between A and B as captured at A (`at_a`) or at B: A's packets
/// leave A at their time and reach B `D_AB` later, B's the other way; B's clock runs `THETA`
/// ahead. Without the frame of index `drop` at B.
fn point(at_a: bool, drop: Option<usize>) -> Vec<synth::Frame> {
    let w = synth::scenario("latency").unwrap();
    let mut out: Vec<synth::Frame> = Vec::new();
    for (i, f) in w.frames.iter().enumerate() {
        let Ok(p) = parse_frame(f.bytes.as_slice()).result else {
            continue;
        };
        let k = FlowKey::of(&p);
        let (src, dst) = (v4(k.src_ip), v4(k.dst_ip));
        let from_a = src == Some(A) && dst == Some(B);
        let from_b = src == Some(B) && dst == Some(A);
        if !(from_a || from_b) {
            continue;
        }
        if !at_a && drop == Some(i) {
            continue;
        }
        let ts_ns = match (at_a, from_a) {
            (true, true) => f.ts_ns,
            (true, false) => f.ts_ns + D_BA,
            (false, true) => f.ts_ns + D_AB + THETA,
            (false, false) => f.ts_ns + THETA,
        };
        out.push(synth::Frame {
            bytes: f.bytes.clone(),
            ts_ns,
        });
    }
    out.sort_by_key(|f| f.ts_ns);
    out
}

fn write(dir: &Scratch, name: &str, frames: &[synth::Frame]) -> String {
    let path: PathBuf = dir.path(name);
    synth::write_pcap(std::fs::File::create(&path).unwrap(), frames).unwrap();
    path.display().to_string()
}

fn replay(files: &[String]) -> Report {
    replay_report(files, false, None, Some(&AnalysisOptions::default()), 1).unwrap()
}

#[test]
fn two_points_give_one_way_delays_clocks_and_round_trips() {
    let dir = Scratch::new("points-two");
    let a = write(&dir, "a.pcap", &point(true, None));
    let b = write(&dir, "b.pcap", &point(false, None));
    let alone = replay(std::slice::from_ref(&a));
    let r = replay(&[a.clone(), b.clone()]);
    // Each packet once: the flows are the one point's (the rates over the window aside: it
    // spans both points' clocks).
    assert_eq!(
        integration_tests::timeless(&r.flows),
        integration_tests::timeless(&alone.flows)
    );
    assert_eq!(r.totals.psn, alone.totals.psn);
    assert!(r.findings.iter().all(|f| f.rule != "duplicate-copies"));
    let p = r.points.as_ref().expect("points");
    assert_eq!(p.seen_at, vec![0, alone.totals.roce_packets]);
    assert!(p.missing.is_empty(), "{:?}", p.missing);
    // The clocks: half-way between the two directions' fastest packets.
    assert_eq!(p.clocks.len(), 1, "{:?}", p.clocks);
    let c = &p.clocks[0];
    assert_eq!((c.a.as_str(), c.b.as_str()), (a.as_str(), b.as_str()));
    assert_eq!(c.round_trip_ns, (D_AB + D_BA) as i64);
    assert_eq!(c.offset_ns, THETA as i64 + (D_AB as i64 - D_BA as i64) / 2);
    // Each way: the round trip's half (the offset taken out), every packet alike.
    assert_eq!(p.one_way.len(), 2);
    for w in &p.one_way {
        let half = ((D_AB + D_BA) / 2) as i64;
        assert_eq!(
            (w.min_ns, w.p50_ns, w.max_ns, w.mean_ns),
            (half, half, half, half)
        );
        assert!(w.clock_corrected);
        let there = w.src.to_string() == "198.18.70.1";
        assert_eq!(w.from, if there { a.clone() } else { b.clone() });
    }
    // Latency per point, in its own clock: A's round trips are the one-way delays plus B's
    // answer times, sample for sample (so their means too).
    let at = |file: &str| {
        let l: Vec<_> = r
            .latency
            .iter()
            .filter(|l| l.kind == "ack" && l.interface.as_deref() == Some(file))
            .collect();
        assert_eq!(l.len(), 1, "{file}: {:?}", r.latency);
        l[0].summary.clone()
    };
    let (rtt, answer) = (at(&a), at(&b));
    assert_eq!(rtt.samples, answer.samples);
    let one_way: i64 = p.one_way.iter().map(|w| w.mean_ns).sum();
    assert_eq!(rtt.min_ns - answer.min_ns, one_way as u64);
    assert_eq!(rtt.max_ns - answer.max_ns, one_way as u64);
    assert!(rtt.mean_ns.abs_diff(answer.mean_ns + one_way as u64) <= 1);
    // A's single capture times the same round trips; the connection's latency is one point's
    // (the first file's: the capture of two hosts says not whose each is), not both together.
    let own: Vec<_> = alone.latency.iter().filter(|l| l.kind == "ack").collect();
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].summary, rtt);
    let conn = |r: &Report| {
        let c: Vec<_> = r
            .connections
            .iter()
            .filter_map(|c| c.a.latency.ack.clone())
            .collect();
        assert_eq!(c.len(), 1, "{:#?}", r.connections);
        c[0].clone()
    };
    assert_eq!(conn(&r), conn(&alone));
}

#[test]
fn a_packet_lost_between_points_is_named_where_it_was_seen_last() {
    let dir = Scratch::new("points-lost");
    let all = point(true, None);
    // A WRITE from A in the middle of the capture, lost before B.
    let w = synth::scenario("latency").unwrap();
    let drop = (w.frames.len() / 3..)
        .find(|&i| {
            parse_frame(w.frames[i].bytes.as_slice())
                .result
                .is_ok_and(|p| {
                    let k = FlowKey::of(&p);
                    v4(k.src_ip) == Some(A) && v4(k.dst_ip) == Some(B)
                })
        })
        .unwrap();
    let psn = observer_common::SeqInput::of(
        &parse_frame(w.frames[drop].bytes.as_slice()).result.unwrap(),
    )
    .psn;
    let a = write(&dir, "a.pcap", &all);
    let b = write(&dir, "b.pcap", &point(false, Some(drop)));
    let r = replay(&[a.clone(), b.clone()]);
    let p = r.points.as_ref().expect("points");
    assert_eq!(p.seen_at, vec![1, all.len() as u64 - 1]);
    assert_eq!(p.missing.len(), 1, "{:?}", p.missing);
    let m = &p.missing[0];
    assert_eq!(
        (m.last_seen.as_str(), m.not_seen_at.as_str(), m.packets),
        (a.as_str(), b.as_str(), 1)
    );
    assert_eq!(m.psns, vec![psn]);
    assert_eq!(m.src.to_string(), "198.18.70.1");
    // Counted once all the same: A saw it.
    let alone = replay(std::slice::from_ref(&a));
    assert_eq!(
        integration_tests::timeless(&r.flows),
        integration_tests::timeless(&alone.flows)
    );
}

/// The per-node NCCL captures (three nodes, each talking to the two others): every packet is
/// in two files and counts once; each node's latency is the one its own capture gives; and
/// between two nodes, the fabric's round trip (the fastest packet each way) fits inside the
/// round trips the requester's node measured less the answer times its peer measured.
#[test]
fn per_node_nccl_captures_count_each_packet_once() {
    let Some(files) = integration_tests::shared_capture_files(
        "per_node_nccl_captures_count_each_packet_once",
        "real",
    ) else {
        return;
    };
    let nodes: Vec<String> = files
        .iter()
        .filter(|f| {
            f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("nccl_nccl_node"))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert_eq!(nodes.len(), 3, "{files:?}");
    let r = replay(&nodes);
    let singles: Vec<Report> = nodes
        .iter()
        .map(|n| replay(std::slice::from_ref(n)))
        .collect();
    let p = r.points.as_ref().expect("points");
    let total: u64 = singles.iter().map(|s| s.totals.roce_packets).sum();
    assert_eq!(p.seen_at, vec![0, total / 2]);
    assert_eq!(r.totals.roce_packets, total / 2);
    assert_eq!(r.totals.psn.duplicates, 0);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert!(p.missing.is_empty());
    for (node, single) in nodes.iter().zip(&singles) {
        let mine: Vec<_> = r
            .latency
            .iter()
            .filter(|l| l.interface.as_deref() == Some(node.as_str()))
            .map(|l| (l.kind.clone(), l.side.clone(), l.summary.clone()))
            .collect();
        let own: Vec<_> = single
            .latency
            .iter()
            .map(|l| (l.kind.clone(), l.side.clone(), l.summary.clone()))
            .collect();
        assert_eq!(mine, own, "{node}");
    }
    assert_eq!(p.clocks.len(), 3);
    // Each node's host: the address in every connection of its capture.
    let host = |k: usize| {
        let c = &singles[k].connections;
        [c[0].a.ip, c[0].b.ip]
            .into_iter()
            .find(|ip| c.iter().all(|x| x.a.ip == *ip || x.b.ip == *ip))
            .unwrap()
    };
    for c in &p.clocks {
        assert!(c.round_trip_ns > 0, "{c:?}");
        let node = |f: &str| nodes.iter().position(|n| n == f).unwrap();
        let (i, j) = (node(&c.a), node(&c.b));
        // The fastest ACK round trip of each side of their connection, timed at its own node
        // (the requester's) and at the other (the answer times).
        let fastest = |k: usize, requester: std::net::IpAddr| {
            let conn = singles[k]
                .connections
                .iter()
                .find(|x| {
                    let ends = [x.a.ip, x.b.ip];
                    ends.contains(&host(i)) && ends.contains(&host(j))
                })
                .unwrap();
            let side = if conn.a.ip == requester {
                &conn.a
            } else {
                &conn.b
            };
            side.latency.ack.as_ref().unwrap().min_ns as i64
        };
        for (req, resp) in [(i, j), (j, i)] {
            let rtt = fastest(req, host(req));
            let answer = fastest(resp, host(req));
            // Each round trip is the fabric's part plus the answer time: the fastest round
            // trip is at least the fabric's fastest plus the fastest answer (the captures
            // stamp to 0.5 us).
            assert!(
                rtt >= c.round_trip_ns + answer - 1_000,
                "{c:?}: round trip {rtt} at {}, answer {answer} at {}",
                nodes[req],
                nodes[resp]
            );
        }
    }
}
