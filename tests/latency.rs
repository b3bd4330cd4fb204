//! Passive latency through the userspace aggregation, against the generator's truth: the
//! `latency` scenario's responders answer after known latencies (one ACK per request, coalesced
//! ACKs, more requests in flight than are timed, go-back-N after a NAK, an RNR NAK, a timeout
//! resend, pipelined READs, a WRITE never answered), and every requester direction's histogram of each kind must
//! hold exactly the samples the generator meant, and no other direction any. No privileges
//! needed.

use std::net::Ipv6Addr;

use observer_common::{LatHist, LatKey, LatKind};
use roce_observer::{aggregate::Aggregate, source::synth};

/// A requester direction, readable: requester > responder, UDP source port.
fn name(key: &LatKey) -> String {
    let ip = |b: [u8; 16]| Ipv6Addr::from(b).to_canonical();
    format!(
        "{} > {} port {} mirror {:#x}",
        ip(key.requester),
        ip(key.responder),
        key.udp_src_port,
        key.mirror
    )
}

#[test]
fn latency_histograms_hold_the_samples_the_generator_meant() {
    samples_as_meant("latency");
}

/// The same schedule on connections whose directions use ports of their own (each side's
/// from its own QPN, flow labels per side, fixed per QP), two of them between the same hosts:
/// the answers find their requests by PSN, and every sample is the one the generator meant.
#[test]
fn latency_with_ports_per_direction_holds_the_samples_the_generator_meant() {
    samples_as_meant("latency-ports");
}

fn samples_as_meant(scenario: &str) {
    let w = synth::scenario(scenario).expect("the scenario");
    let mut agg = Aggregate::new();
    for f in &w.frames {
        let _ = agg.push(&f.bytes, f.ts_ns);
    }
    let kinds: Vec<LatKind> = w.truth.latency.keys().map(|(_, kind)| *kind).collect();
    assert!(
        kinds.contains(&LatKind::Ack) && kinds.contains(&LatKind::Read),
        "the scenario times both kinds: {kinds:?}"
    );
    for ((key, kind), samples) in &w.truth.latency {
        let mut want = LatHist::default();
        for &ns in samples {
            want.record(ns);
        }
        let state = agg
            .latency
            .get(key)
            .unwrap_or_else(|| panic!("no latency state for {}", name(key)));
        let got = &state.hist[*kind as usize];
        assert_eq!(
            (got.count, got.sum_ns, got.min_ns, got.max_ns),
            (want.count, want.sum_ns, want.min_ns, want.max_ns),
            "{} {}",
            name(key),
            kind.name()
        );
        assert_eq!(got, &want, "{} {}: buckets", name(key), kind.name());
    }
    // No sample anywhere else: neither another kind of a timed direction, nor the responders'
    // own directions (their answers are no requests).
    for (key, state) in &agg.latency {
        for kind in LatKind::ALL {
            let n = state.hist[kind as usize].count;
            assert!(
                n == 0 || w.truth.latency.contains_key(&(*key, kind)),
                "{} {}: {n} samples the generator never meant",
                name(key),
                kind.name()
            );
        }
    }
}

/// A capture taken on one host holds its own requests' round trips and its answers to the
/// others' requests: with the host's address, the latency section splits them (requests_out,
/// requests_in), each exactly the samples the generator meant for the requests of that side.
#[test]
fn a_capture_hosts_own_requests_and_its_answers_are_told_apart() {
    let w = synth::scenario("latency").expect("the latency scenario");
    let mut agg = Aggregate::new();
    for f in &w.frames {
        let _ = agg.push(&f.bytes, f.ts_ns);
    }
    // One requester of the scenario as the capture's host.
    let host = w.truth.latency.keys().next().unwrap().0.requester;
    let local = roce_observer::model::ip_of(host);
    let (scopes, said) = agg.capture_latency(&[local]);
    assert!(said.is_empty(), "{said:?}");
    for kind in LatKind::ALL {
        let want = |out: bool| -> u64 {
            w.truth
                .latency
                .iter()
                .filter(|((k, kd), _)| *kd == kind && (k.requester == host) == out)
                .map(|(_, s)| s.len() as u64)
                .sum()
        };
        let got = |side: &str| -> u64 {
            scopes
                .iter()
                .filter(|s| s.kind == kind.name() && s.side == side)
                .map(|s| s.summary.samples)
                .sum()
        };
        assert_eq!(got("requests_out"), want(true), "{}", kind.name());
        assert_eq!(got("requests_in"), want(false), "{}", kind.name());
    }
    assert!(scopes.iter().any(|s| s.side == "requests_out"));
}

/// On a real NCCL node's capture the host is the one address every flow has at an end: the
/// split is the same as with that address given; a two-host capture cannot tell and says so.
#[test]
fn the_capture_host_is_inferred_or_the_report_says_it_cannot() {
    use roce_observer::source::replay::Replay;
    let Some(files) = integration_tests::shared_capture_files(
        "the_capture_host_is_inferred_or_the_report_says_it_cannot",
        "real",
    ) else {
        return;
    };
    let read = |name: &str| {
        let file = files.iter().find(|f| f.ends_with(name)).unwrap();
        let mut r = Replay::new();
        r.file(file.to_str().unwrap(), false).unwrap();
        r.agg
    };
    let node0 = read("nccl_nccl_node0.pcap");
    let (inferred, said) = node0.capture_latency(&[]);
    assert!(said.is_empty(), "{said:?}");
    let sides: std::collections::BTreeSet<&str> =
        inferred.iter().map(|s| s.side.as_str()).collect();
    assert_eq!(sides, ["requests_in", "requests_out"].into());
    // The host: the one address common to every flow.
    let r = node0.report(roce_observer::model::Source::pcap(vec![], vec![]), 1.0);
    let mut common: Vec<std::net::IpAddr> = vec![r.flows[0].src_ip, r.flows[0].dst_ip];
    for f in r.flows.iter().filter(|f| f.dest_qp != 1) {
        common.retain(|ip| *ip == f.src_ip || *ip == f.dst_ip);
    }
    assert_eq!(common.len(), 1, "{common:?}");
    let host = common[0];
    let (given, _) = node0.capture_latency(&[host]);
    assert_eq!(
        inferred
            .iter()
            .map(|s| (&s.kind, &s.side, s.summary.samples))
            .collect::<Vec<_>>(),
        given
            .iter()
            .map(|s| (&s.kind, &s.side, s.summary.samples))
            .collect::<Vec<_>>()
    );
    // Two hosts both requesting: unknown, said, all under requests_in.
    let lat = read("rdma_write_lat.pcap");
    let (scopes, said) = lat.capture_latency(&[]);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("give --local-ip"), "{said:?}");
    assert!(scopes.iter().all(|s| s.side == "requests_in"));
}

/// On every real capture, the ACK and READ latency of each requester direction that never has
/// more than four requests in flight (where every request is timed) equals a computation
/// from tshark's decoding of the same packets, made here without the observer's code: an
/// AckReq request (seen once: a PSN seen again is resent, Karn's rule) to the first ACK back
/// on its connection covering it, the ACK going to the newest request it covers (an older
/// one it also covers gives none); a READ request to the first packet of its response (the
/// same PSN). Count, sum, min and max per direction, in the capture's nanoseconds.
#[test]
fn latency_equals_a_tshark_computation_on_the_real_captures() {
    use std::collections::{BTreeMap, BTreeSet};
    use std::process::Command;
    if Command::new("tshark").arg("-v").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "tshark is missing: CI must have it"
        );
        eprintln!("SKIPPED latency_equals_a_tshark_computation_on_the_real_captures: no tshark");
        return;
    }
    let Some(files) = integration_tests::shared_capture_files(
        "latency_equals_a_tshark_computation_on_the_real_captures",
        "real",
    ) else {
        return;
    };
    let mut compared = [0u64; 2];
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "pcap"))
    {
        let out = Command::new("tshark")
            .arg("-n")
            .arg("-r")
            .arg(file)
            .args(["-Y", "udp.dstport == 4791", "-T", "fields"])
            .args(["-e", "frame.time_epoch", "-e", "ip.src", "-e", "ip.dst"])
            .args(["-e", "udp.srcport", "-e", "infiniband.bth.opcode"])
            .args(["-e", "infiniband.bth.psn", "-e", "infiniband.bth.a"])
            .args(["-e", "infiniband.aeth.syndrome"])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        // (requester, responder, port) -> per kind: samples.
        type Dir = (String, String, u16);
        let mut samples: BTreeMap<(Dir, usize), Vec<u64>> = BTreeMap::new();
        // Requests in flight per direction: (psn, ns, kind); PSNs seen (resends).
        let mut flight: BTreeMap<Dir, Vec<(u32, u64, usize)>> = BTreeMap::new();
        let mut seen: BTreeSet<(Dir, u32)> = BTreeSet::new();
        let mut crowded: BTreeSet<Dir> = BTreeSet::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let (secs, frac) = f[0].split_once('.').unwrap();
            let ns = secs.parse::<u64>().unwrap() * 1_000_000_000
                + format!("{frac:0<9}")[..9].parse::<u64>().unwrap();
            let port: u16 = f[3].parse().unwrap();
            let opcode: u8 = f[4].parse().unwrap();
            if opcode >= 0x20 {
                continue; // RC only
            }
            let psn: u32 = f[5].parse().unwrap();
            let ackreq = f[6] == "1";
            let request = matches!(opcode, 0..=5 | 6..=12 | 0x16 | 0x17);
            if request {
                let dir = (f[1].to_string(), f[2].to_string(), port);
                let resent = !seen.insert((dir.clone(), psn));
                let fl = flight.entry(dir.clone()).or_default();
                if resent {
                    fl.retain(|r| r.0 != psn);
                    continue;
                }
                let kind = if opcode == 12 { 1 } else { 0 };
                if kind == 1 || ackreq {
                    fl.push((psn, ns, kind));
                    if fl.len() > 4 {
                        crowded.insert(dir);
                    }
                }
                continue;
            }
            // Answers: ACK (17, syndrome ACK) or the first packet of a READ response.
            let dir = (f[2].to_string(), f[1].to_string(), port);
            let Some(fl) = flight.get_mut(&dir) else {
                continue;
            };
            let covers = |req: u32| (psn.wrapping_sub(req) & 0xFF_FFFF) < 1 << 16;
            if opcode == 17 {
                let syndrome: u8 = f[7].parse().unwrap_or(0);
                if syndrome >> 5 != 0 {
                    continue; // NAK or RNR NAK: none in these captures
                }
                let covered: Vec<(u32, u64, usize)> = fl
                    .iter()
                    .copied()
                    .filter(|r| r.2 == 0 && covers(r.0))
                    .collect();
                if let Some(newest) = covered
                    .iter()
                    .min_by_key(|r| psn.wrapping_sub(r.0) & 0xFF_FFFF)
                {
                    samples
                        .entry((dir.clone(), 0))
                        .or_default()
                        .push(ns - newest.1);
                }
                fl.retain(|r| !(r.2 == 0 && covers(r.0)));
            } else if (opcode == 13 || opcode == 16)
                && let Some(i) = fl.iter().position(|r| r.2 == 1 && r.0 == psn)
            {
                samples
                    .entry((dir.clone(), 1))
                    .or_default()
                    .push(ns - fl[i].1);
                fl.remove(i);
            }
        }
        let mut replay = roce_observer::source::replay::Replay::new();
        replay.file(file.to_str().unwrap(), false).unwrap();
        let agg = &replay.agg;
        for ((dir, kind), want) in &samples {
            if crowded.contains(dir) {
                continue;
            }
            let ip = |s: &str| match s.parse::<std::net::IpAddr>().unwrap() {
                std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                std::net::IpAddr::V6(v6) => v6.octets(),
            };
            let key = LatKey {
                requester: ip(&dir.0),
                responder: ip(&dir.1),
                udp_src_port: dir.2,
                mirror: 0,
                _pad: 0,
            };
            let got = agg
                .latency
                .get(&key)
                .map(|s| s.hist[*kind])
                .unwrap_or_default();
            let sum: u64 = want.iter().sum();
            assert_eq!(
                (got.count, got.sum_ns, got.min_ns, got.max_ns),
                (
                    want.len() as u64,
                    sum,
                    *want.iter().min().unwrap(),
                    *want.iter().max().unwrap()
                ),
                "{}: {} kind {kind}",
                file.display(),
                name(&key)
            );
            compared[*kind] += want.len() as u64;
        }
    }
    assert!(
        compared[0] > 500 && compared[1] >= 10,
        "{compared:?} samples compared"
    );
}
