//! End to end on a veth pair in a network namespace: the generator sends known traffic, the
//! `roce-observer diagnose --json` binary observes it through XDP, and its report equals the
//! generator's ground truth exactly, packet for packet.

use std::time::{SystemTime, UNIX_EPOCH};

use integration_tests::{Diagnose, has_xdp, require_root, timeless, truth_aggregate};
use roce_observer::{
    aggregate::Aggregate,
    lab::Lab,
    report::{Report, Source},
    synth,
};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

fn expected(truth: &Aggregate, report: &Report) -> Report {
    Report::new(truth, report.source.clone(), report.window.seconds)
}

fn send(lab: &Lab, dev: &str, w: &synth::Workload) -> usize {
    let dev = dev.to_string();
    let frames = w.frames.clone();
    lab.ns
        .run_in(move || {
            roce_observer::lab::pin_current_thread().unwrap();
            synth::send(&dev, &frames)
        })
        .unwrap()
        .unwrap()
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn diagnose_json_equals_ground_truth() {
    if !require_root("diagnose_json_equals_ground_truth") {
        return;
    }
    let w = synth::scenario("e2e").unwrap();
    let lab = Lab::create("ro-e2e").unwrap();
    let start_ns = now_ns();
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &["--iface", "rx0", "--duration", "2s", "--json"],
    );
    assert!(has_xdp(&lab.ns, "rx0"), "observer attached");
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let end_ns = now_ns();
    let report: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(report.schema, "roce-observer/report/v1");
    assert_eq!(report.source.kind, "live");
    assert_eq!(report.source.interfaces, vec!["rx0".to_string()]);
    assert!(report.window.seconds >= 2.0 && report.window.seconds < 10.0);

    let want = expected(&truth_aggregate(&w.truth), &report);
    assert_eq!(report.totals, want.totals, "totals");
    assert_eq!(timeless(&report.flows), timeless(&want.flows), "flows");
    for f in &report.flows {
        assert!(
            start_ns <= f.first_seen_ns
                && f.first_seen_ns <= f.last_seen_ns
                && f.last_seen_ns <= end_ns,
            "{}->{} qp {}: seen {}..{} outside the run {start_ns}..{end_ns}",
            f.src_ip,
            f.dst_ip,
            f.dest_qp,
            f.first_seen_ns,
            f.last_seen_ns
        );
        assert!((f.rate_bps - f.bytes as f64 * 8.0 / report.window.seconds).abs() < 1e-6);
    }
    // What the workload was built to contain, seen live.
    let t = &report.totals;
    assert!(t.ce_packets > 0 && t.cnp_packets > 0, "CE and CNPs: {t:?}");
    assert!(report.flows.iter().any(|f| f.ops.nak > 0), "a NAK");
    assert!(report.flows.iter().any(|f| f.psn.gaps > 0), "a gap");
    assert!(
        report.flows.iter().any(|f| f.psn.regressions > 0),
        "a retransmission"
    );
    assert!(report.flows.iter().any(|f| f.src_ip.is_ipv6()), "IPv6");
    assert!(
        t.skipped.values().all(|n| *n > 0),
        "every skip reason: {:?}",
        t.skipped
    );
    assert!(!has_xdp(&lab.ns, "rx0"), "detached at exit");
}

#[test]
fn sigterm_and_sigint_stop_early_report_and_detach() {
    if !require_root("sigterm_and_sigint_stop_early_report_and_detach") {
        return;
    }
    let w = synth::scenario("demo").unwrap();
    for (signal, said) in [(libc::SIGTERM, "terminated"), (libc::SIGINT, "interrupted")] {
        let lab = Lab::create("ro-sig").unwrap();
        let d = Diagnose::start(
            &lab.ns,
            CLI.as_ref(),
            &["--iface", "rx0", "--duration", "10m", "--json"],
        );
        send(&lab, "tx0", &w);
        // The child is `ip netns exec`, which execs the observer: same pid.
        unsafe { libc::kill(d.child.id() as i32, signal) };
        let (status, out, err) = d.finish();
        assert!(status.success(), "exit after {said}: {status} {err}");
        assert!(err.contains(said), "{err}");
        let report: Report = serde_json::from_str(&out).unwrap();
        assert!(report.window.seconds < 60.0);
        assert_eq!(report.totals.frames, w.frames.len() as u64);
        assert!(!has_xdp(&lab.ns, "rx0"), "detached after {said}");
    }
}

#[test]
fn several_interfaces_are_summed() {
    if !require_root("several_interfaces_are_summed") {
        return;
    }
    // Different flows on each end: one flow table spans the interfaces, so the same flow seen
    // twice would be one flow with retransmissions.
    let a = synth::scenario("demo").unwrap();
    let b = synth::scenario("many-qps").unwrap();
    assert!(a.truth.flows.keys().all(|k| !b.truth.flows.contains_key(k)));
    let lab = Lab::create("ro-two").unwrap();
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &[
            "--iface",
            "rx0",
            "--iface",
            "tx0",
            "--duration",
            "2s",
            "--json",
            "--xdp-mode",
            "skb",
        ],
    );
    assert!(has_xdp(&lab.ns, "rx0") && has_xdp(&lab.ns, "tx0"));
    send(&lab, "tx0", &a);
    send(&lab, "rx0", &b);
    let (status, out, err) = d.finish();
    assert!(status.success(), "{err}");
    let report: Report = serde_json::from_str(&out).unwrap();
    let mut want_source = Source::live(vec!["rx0".into(), "tx0".into()], "skb");
    want_source.mode = Some("host".into());
    assert_eq!(report.source, want_source);
    let mut both = truth_aggregate(&a.truth);
    both.merge(&truth_aggregate(&b.truth));
    let want = expected(&both, &report);
    assert_eq!(report.totals, want.totals);
    assert_eq!(timeless(&report.flows), timeless(&want.flows));
    assert!(!has_xdp(&lab.ns, "rx0") && !has_xdp(&lab.ns, "tx0"));
}
