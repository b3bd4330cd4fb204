//! Connections paired without assuming one UDP source port both ways: on the generator's
//! scenarios of every port rule real NICs follow (one port both ways, each side's port from its
//! own QPN, fixed ports per QP, flow labels per side, several QPs per pair of hosts from PSN 0,
//! ports changed mid-way), every connection the generator made with traffic both ways is one
//! connection with both QPNs and its path MTU; QPs in lockstep that nothing tells apart stay
//! one-sided and say so; and the real captures still pair as before. No privileges needed (the
//! kernel's side is in `kernel_test_run`).

use std::collections::BTreeSet;
use std::net::IpAddr;

use roce_observer::{
    aggregate::Aggregate,
    model::{Report, Source, connections::Connection, ip_of},
    source::replay::Replay,
    source::synth::{self, Workload},
};

/// A connection as (lower end, its QP, higher end, its QP).
type Ends = (IpAddr, u32, IpAddr, u32);

fn ends(a: (IpAddr, u32), b: (IpAddr, u32)) -> Ends {
    let (x, y) = if a <= b { (a, b) } else { (b, a) };
    (x.0, x.1, y.0, y.1)
}

/// The connections the generator made that carried packets both ways.
fn truth(w: &Workload) -> BTreeSet<Ends> {
    w.truth
        .connections
        .iter()
        .filter(|(_, ways)| ways[0] && ways[1])
        .map(|(c, _)| {
            ends(
                (ip_of(c.requester), c.requester_qp),
                (ip_of(c.responder), c.responder_qp),
            )
        })
        .collect()
}

/// The userspace report of a scenario's frames, at their capture times.
fn report(w: &Workload) -> Report {
    let mut agg = Aggregate::new();
    for f in &w.frames {
        let _ = agg.push(&f.bytes, f.ts_ns);
    }
    agg.report(Source::pcap(vec![], vec![]), 1.0)
}

fn paired(r: &Report) -> Vec<&Connection> {
    r.connections
        .iter()
        .filter(|c| c.a.qp.is_some() && c.b.qp.is_some())
        .collect()
}

fn ends_of(c: &Connection) -> Ends {
    ends((c.a.ip, c.a.qp.unwrap()), (c.b.ip, c.b.qp.unwrap()))
}

/// Every connection of the truth is one paired connection (by `by`, and where `by` is "port"
/// or "psn", with path MTU 1024: the pairing scenarios all show it); no other connection is
/// paired, and nothing is left one-sided.
fn assert_paired(name: &str, by: &str) -> Report {
    let w = synth::scenario(name).unwrap();
    let want = truth(&w);
    assert!(!want.is_empty(), "{name}: no connection in the truth");
    let r = report(&w);
    let got: Vec<Ends> = paired(&r).into_iter().map(ends_of).collect();
    assert_eq!(
        got.iter().copied().collect::<BTreeSet<_>>(),
        want,
        "{name}: connections {:#?}",
        r.connections
    );
    assert_eq!(got.len(), want.len(), "{name}: a connection twice");
    assert_eq!(r.connections.len(), want.len(), "{name}: one-sided left");
    for c in &r.connections {
        if by != "any" {
            assert_eq!(c.paired_by.as_deref(), Some(by), "{name}: {c:?}");
        }
        if name.starts_with("pairing-") {
            assert_eq!(c.pmtu, Some(1024), "{name}: {c:?}");
        }
        assert_eq!(c.ambiguous, None, "{name}");
        assert!(!c.a.ports.is_empty() && !c.b.ports.is_empty(), "{name}");
    }
    r
}

#[test]
fn each_side_taking_its_port_from_its_own_qpn_pairs_on_psns() {
    let r = assert_paired("pairing-local-port", "psn");
    for c in &r.connections {
        assert_ne!(c.a.ports, c.b.ports, "ports per direction: {c:?}");
        // The port of each side is the one Soft-RoCE derives from that side's QPN.
        assert_eq!(c.a.ports, [synth::rxe_local_sport(c.a.qp.unwrap())]);
        assert_eq!(c.b.ports, [synth::rxe_local_sport(c.b.qp.unwrap())]);
    }
}

/// The hash model takes the report's pairing: each connection with a port per direction is
/// a connection to it too, with both its 5-tuples, and no flow is "without a reverse".
#[test]
fn the_hash_model_pairs_what_the_report_paired() {
    use roce_observer::analysis::ecmp::{EcmpOptions, analyse};
    for name in [
        "pairing-local-port",
        "pairing-fixed-port",
        "pairing-flow-labels",
    ] {
        let r = report(&synth::scenario(name).unwrap());
        let e = analyse(&r.flows, &r.connections, &EcmpOptions::default());
        let c = &e.connections;
        assert_eq!(c.paired, r.connections.len(), "{name}: {c:?}");
        assert_eq!(c.per_direction, r.connections.len(), "{name}: {c:?}");
        assert_eq!(c.unpaired_flows, 0, "{name}: {c:?}");
        assert_eq!(e.flows, 2 * r.connections.len() as u64, "{name}");
    }
}

#[test]
fn fixed_ports_per_qp_pair_on_psns() {
    let r = assert_paired("pairing-fixed-port", "psn");
    let ports: BTreeSet<(Vec<u16>, Vec<u16>)> = r
        .connections
        .iter()
        .map(|c| (c.a.ports.clone(), c.b.ports.clone()))
        .collect();
    assert_eq!(
        ports,
        [(vec![62017], vec![57236]), (vec![72], vec![69])].into()
    );
}

#[test]
fn flow_labels_per_side_pair_on_psns() {
    assert_paired("pairing-flow-labels", "psn");
}

/// NCCL's channels: four QPs each way between two hosts, all from PSN 0; the answers name the
/// last request of their own channel only.
#[test]
fn several_qps_between_two_hosts_from_psn_0_pair_on_their_last_answers() {
    let r = assert_paired("pairing-many-qps", "psn");
    assert_eq!(r.connections.len(), 8);
}

/// Flowlets: a connection that moves to other ports stays one connection, with every port it
/// used, and the ACK of a request sent before a move, coming back after it, answers it.
#[test]
fn a_connection_moved_to_other_ports_stays_one() {
    let r = assert_paired("pairing-respray", "any");
    let both = r
        .connections
        .iter()
        .find(|c| c.a.qp == Some(0x310) || c.b.qp == Some(0x310))
        .unwrap();
    assert_eq!(both.paired_by.as_deref(), Some("port"));
    assert_eq!(both.a.ports.len(), 4, "{both:?}");
    assert_eq!(
        both.a.ports.iter().collect::<BTreeSet<_>>(),
        both.b.ports.iter().collect()
    );
    let one = r
        .connections
        .iter()
        .find(|c| c.a.qp == Some(0x311) || c.b.qp == Some(0x311))
        .unwrap();
    let (req, resp) = if one.a.qp == Some(0x311) {
        (&one.a, &one.b)
    } else {
        (&one.b, &one.a)
    };
    assert_eq!(one.paired_by.as_deref(), Some("psn"));
    assert_eq!(req.ports.len(), 4, "{one:?}");
    assert_eq!(resp.ports, [synth::rxe_local_sport(0x321)]);
    // No request was left unanswered, no PSN lost.
    for f in &r.flows {
        assert!(f.psn.unanswered.is_none(), "{f:?}");
        assert_eq!(f.psn.missing, 0, "{f:?}");
    }
}

/// QPs numbered alike on both hosts: one connection's requests share their port with the
/// other's answers. That coincidence pairs nothing: the PSNs pair both connections right.
#[test]
fn a_port_shared_by_coincidence_pairs_nothing() {
    let r = assert_paired("pairing-port-collision", "psn");
    assert_eq!(r.connections.len(), 2);
    for f in &r.flows {
        assert!(f.psn.unanswered.is_none() && f.psn.violations == 0, "{f:?}");
    }
}

/// A QP number reused with another peer QP, from a PSN behind: two connections, each by its
/// port, and the first one's last request is not taken for unanswered.
#[test]
fn a_qp_number_reused_with_another_peer_is_two_connections() {
    let r = assert_paired("pairing-qp-reuse", "port");
    assert_eq!(r.connections.len(), 2);
    for f in &r.flows {
        assert!(f.psn.unanswered.is_none(), "{f:?}");
    }
}

/// Same-port traffic pairs by port, as before, on everyday scenarios.
#[test]
fn one_port_both_ways_pairs_by_port() {
    for name in [
        "demo",
        "clean",
        "loss",
        "latency",
        "rules-clean",
        "rule-stall",
    ] {
        assert_paired(name, "port");
    }
}

/// Several QPs on one port between two hosts (the ECMP rule's scenario: 16 of them) were left
/// one-sided when only the port paired; their answers pair them now, as do the port
/// collisions among 1000 QPs.
#[test]
fn qps_sharing_one_port_pair_on_psns() {
    let r = assert_paired("rule-ecmp-imbalance", "psn");
    assert_eq!(r.connections.len(), 16);
    let r = assert_paired("many-qps", "any");
    assert!(
        r.connections
            .iter()
            .any(|c| c.paired_by.as_deref() == Some("psn"))
    );
}

/// Two QPs in lockstep from PSN 0 with ports per direction: each answer stream fits both
/// request streams exactly. Nothing is paired by a guess: four one-sided connections, each
/// saying two directions were in contention.
#[test]
fn qps_nothing_tells_apart_stay_one_sided_and_say_so() {
    let w = synth::scenario("pairing-ambiguous").unwrap();
    assert_eq!(truth(&w).len(), 2);
    let r = report(&w);
    assert!(paired(&r).is_empty(), "{:#?}", r.connections);
    assert_eq!(r.connections.len(), 4);
    for c in &r.connections {
        assert_eq!(c.paired_by, None);
        assert_eq!(c.ambiguous, Some(2), "{c:?}");
        // A is the side that sent something, requests or (a responder seen alone) answers.
        assert!(c.a.packets > 0 && c.b.packets == 0, "{c:?}");
    }
    // The JSON says it; the one-sided rows too.
    let json = serde_json::to_value(&r.connections[0]).unwrap();
    assert_eq!(json["ambiguous"], 2);
    assert!(json.get("paired_by").is_none());
}

/// The fault of the real failure captures with ports per direction: the READ responses are on
/// the other direction, which now pairs, so the path MTU is known and the SEND inside the
/// READ's range is a violation; the request left unanswered is a stall.
#[test]
fn the_read_overlap_fault_with_ports_per_direction_is_seen_whole() {
    let w = synth::scenario("rule-psn-violation-split").unwrap();
    let r = report(&w);
    let bad = r
        .flows
        .iter()
        .find(|f| f.dest_qp == 0x12 && f.psn.violations > 0)
        .unwrap_or_else(|| panic!("no violation: {:#?}", r.flows));
    assert_eq!(bad.psn.pmtu, Some(1024));
    assert_eq!(bad.psn.violations, 1);
    assert!(bad.psn.unanswered.is_some(), "{bad:?}");
    assert_eq!(paired(&r).len(), 2);
}

/// The real Soft-RoCE captures use one port both ways: every connection with traffic both ways
/// pairs by port, as before (the single READ request of one capture has no answer).
#[test]
fn real_captures_pair_by_port_or_cm() {
    let Some(files) =
        integration_tests::shared_capture_files("real_captures_pair_by_port_or_cm", "real")
    else {
        return;
    };
    let mut pairs = 0;
    for file in files {
        let mut replay = Replay::new();
        replay.file(file.to_str().unwrap(), false).unwrap();
        let r = replay
            .agg
            .report(Source::pcap(vec![], vec![]), replay.window_seconds());
        // Who sent connected traffic to whom.
        let sent: BTreeSet<(IpAddr, IpAddr)> = r
            .flows
            .iter()
            .filter(|f| f.dest_qp != 1 && !f.transports.iter().any(|t| t == "UD"))
            .map(|f| (f.src_ip, f.dst_ip))
            .collect();
        for c in &r.connections {
            if c.a.qp.is_some() && c.b.qp.is_some() {
                pairs += 1;
                // (The connection manager's exchange, where it was captured, pairs first:
                // `the_connection_manager_pairs_as_tshark_reads_it`.)
                let by = c.paired_by.as_deref();
                assert!(by == Some("port") || by == Some("cm"), "{file:?}: {c:?}");
            } else {
                // One-sided: nothing came back between these hosts at all.
                let (from, to) = if c.a.packets > 0 {
                    (c.a.ip, c.b.ip)
                } else {
                    (c.b.ip, c.a.ip)
                };
                assert!(
                    !sent.contains(&(to, from)),
                    "{file:?}: one-sided with a way back: {c:?}"
                );
            }
        }
    }
    assert!(pairs >= 20, "{pairs} connections paired");
}

/// The answers of connections whose directions use ports of their own time their requests
/// (the samples themselves are checked against the generator in `tests/latency.rs`): every
/// connection of these scenarios has ACK and READ samples on its requester's side, including
/// two whose requests and answers share ports crosswise by coincidence.
#[test]
fn answers_on_ports_of_their_own_time_their_requests() {
    for name in [
        "pairing-local-port",
        "pairing-fixed-port",
        "pairing-flow-labels",
        "pairing-port-collision",
    ] {
        let r = report(&synth::scenario(name).unwrap());
        assert!(!r.connections.is_empty(), "{name}");
        for c in &r.connections {
            let l = &c.a.latency;
            let n = |s: &Option<roce_observer::model::connections::LatencySummary>| {
                s.as_ref().map_or(0, |l| l.samples)
            };
            assert!(n(&l.ack) > 0 && n(&l.read) > 0, "{name}: {c:#?}");
        }
    }
}

/// Lockstep QPs (nothing in their PSNs or ports tells them apart) whose connection manager's
/// exchange was seen pair on it.
#[test]
fn the_connection_manager_tells_lockstep_qps_apart() {
    assert_paired("pairing-cm", "cm");
}

/// The REQ and REP as tshark reads them (its own InfiniBand dissector: the sender's address,
/// local QPN and starting PSN of each) make the connections paired by "cm", exactly: on the
/// real `rdma_cm.pcap` (two connections set up by RDMA-CM) and on the generated `pairing-cm`.
#[test]
fn the_connection_manager_pairs_as_tshark_reads_it() {
    use std::process::Command;
    if Command::new("tshark").arg("-v").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "tshark is missing: CI must have it (cargo xtask setup installs it)"
        );
        eprintln!("SKIPPED the_connection_manager_pairs_as_tshark_reads_it: no tshark");
        return;
    }
    let dir = integration_tests::Scratch::new("pairing-cm");
    let generated = dir.path("pairing-cm.pcap");
    let w = synth::scenario("pairing-cm").unwrap();
    synth::write_pcap(std::fs::File::create(&generated).unwrap(), &w.frames).unwrap();
    let mut files = vec![generated];
    if let Some(real) = integration_tests::shared_capture_files(
        "the_connection_manager_pairs_as_tshark_reads_it",
        "real",
    ) {
        files.extend(real.into_iter().filter(|f| f.ends_with("rdma_cm.pcap")));
    }
    for file in files {
        let out = Command::new("tshark")
            .arg("-n")
            .arg("-r")
            .arg(&file)
            .args(["-Y", "infiniband.bth.destqp == 1", "-T", "fields"])
            .args([
                "-e",
                "ip.src",
                "-e",
                "ip.dst",
                "-e",
                "infiniband.mad.attributeid",
            ])
            .args([
                "-e",
                "infiniband.cm.req.localqpn",
                "-e",
                "infiniband.cm.rep.localqpn",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        // REQ: (requester, responder) -> requester's QP; REP: (requester, responder) -> the
        // responder's QP (a REP goes back to the requester).
        let (mut reqs, mut reps) = (Vec::new(), Vec::new());
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let qpn = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            let (src, dst): (IpAddr, IpAddr) = (f[0].parse().unwrap(), f[1].parse().unwrap());
            match f[2] {
                "0x0010" => reqs.push(((src, dst), qpn(f[3]))),
                "0x0013" => reps.push(((dst, src), qpn(f[4]))),
                _ => {}
            }
        }
        assert_eq!(reqs.len(), reps.len(), "{file:?}: {text}");
        assert!(!reqs.is_empty(), "{file:?}");
        // In order: the n-th REP answers the n-th REQ between the same hosts.
        let want: BTreeSet<Ends> = reqs
            .iter()
            .zip(&reps)
            .map(|(((a, b), qa), (hosts, qb))| {
                assert_eq!((*a, *b), *hosts, "{file:?}");
                ends((*a, *qa), (*b, *qb))
            })
            .collect();
        let mut replay = Replay::new();
        replay.file(file.to_str().unwrap(), false).unwrap();
        let r = replay
            .agg
            .report(Source::pcap(vec![], vec![]), replay.window_seconds());
        let got: BTreeSet<Ends> = r
            .connections
            .iter()
            .filter(|c| c.paired_by.as_deref() == Some("cm"))
            .map(ends_of)
            .collect();
        assert_eq!(got, want, "{file:?}: {:#?}", r.connections);
    }
}

/// Per-packet spraying: every request packet of one connection on the next of four ports. The
/// connection is one, its four request flows are marked sprayed (each port holds every fourth
/// PSN), their holes stay out of the totals, and neither loss nor reordering fires: nothing
/// was lost. Flowlets that move on to new ports are not marked.
#[test]
fn per_packet_spraying_is_not_loss() {
    use roce_observer::pipeline::{AnalysisOptions, conclude};
    let w = synth::scenario("pairing-spray").unwrap();
    let mut r = report(&w);
    conclude(&mut r, &AnalysisOptions::default());
    assert_eq!(paired(&r).len(), 1, "{:#?}", r.connections);
    let sprayed: Vec<_> = r.flows.iter().filter(|f| f.psn.sprayed > 0).collect();
    assert_eq!(sprayed.len(), 4, "{:#?}", r.flows);
    assert!(sprayed.iter().all(|f| f.psn.sprayed == 4));
    assert!(
        sprayed.iter().any(|f| f.psn.missing > 0 || f.psn.gaps > 0),
        "the holes are there"
    );
    assert_eq!(
        (
            r.totals.psn.missing,
            r.totals.psn.lost_events,
            r.totals.psn.out_of_order
        ),
        (0, 0, 0)
    );
    let c = paired(&r)[0];
    assert_eq!((c.a.psn.missing, c.b.psn.missing), (0, 0), "{c:#?}");
    let fired: Vec<&str> = r.findings.iter().map(|f| f.rule.as_str()).collect();
    assert!(
        !fired.contains(&"loss") && !fired.contains(&"reorder"),
        "{fired:?}"
    );
    let loss = r.checks.iter().find(|c| c.rule == "loss").unwrap();
    assert!(loss.note.contains("sprayed over several ports"), "{loss:?}");
    let flowlets = report(&synth::scenario("pairing-respray").unwrap());
    assert!(flowlets.flows.iter().all(|f| f.psn.sprayed == 0));
}

/// A host that talks to itself (loopback, one Soft-RoCE host), its connection set up by the
/// connection manager: both directions have the same two addresses, so they are not two ways
/// of a pair of hosts, and the exchange pairs them as it does two hosts'.
#[test]
fn a_host_with_itself_pairs_by_the_connection_manager() {
    use observer_common::wire;
    use roce_observer::source::synth::{Ip, PortRule, QpStream, host_mac};
    let a = std::net::Ipv4Addr::new(198, 18, 78, 1);
    let mut w = Workload::default();
    let mut qp = QpStream::new(
        wire::TRANSPORT_RC,
        Ip::v4(a, a),
        [host_mac(0x4e01), host_mac(0x4e01)],
        [0x51, 0x61],
        0,
    )
    .with_port_rule(PortRule::LocalQpn);
    qp.cm_exchange(&mut w);
    for _ in 0..8 {
        qp.write(&mut w, 2048);
        let last = qp.last_psn();
        qp.ack(&mut w, last);
    }
    let r = report(&w);
    let c = match r.connections.as_slice() {
        [c] => c,
        other => panic!("want one connection: {other:#?}"),
    };
    assert_eq!(c.paired_by.as_deref(), Some("cm"), "{c:?}");
    assert_eq!(
        ends_of(c),
        ends((IpAddr::V4(a), 0x51), (IpAddr::V4(a), 0x61))
    );
}
