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
