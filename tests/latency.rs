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
    let w = synth::scenario("latency").expect("the latency scenario");
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
