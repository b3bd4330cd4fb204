//! End to end on a veth pair in a network namespace: the generator sends known traffic, the
//! `roce-observer diagnose --json` binary observes it through XDP, and its report equals the
//! generator's ground truth exactly, packet for packet.

use std::time::{SystemTime, UNIX_EPOCH};

use integration_tests::{
    Diagnose, has_xdp, received, require_root, tap, timeless, truth_aggregate,
};
use roce_observer::{
    aggregate::Aggregate,
    lab::Lab,
    model::{Report, Source},
    source::synth,
};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

fn expected(truth: &Aggregate, report: &Report) -> Report {
    truth.report(report.source.clone(), report.window.seconds)
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

    // The time series adds up to the totals, interval by interval summed.
    let series = report.series.as_ref().expect("series");
    assert_eq!(series.interval_s, 1.0);
    assert!(series.t.len() >= 2 && series.t.len() <= 4, "{:?}", series.t);
    assert_eq!(
        series.total.packets.iter().sum::<u64>(),
        t.roce_packets,
        "series packets"
    );
    // Rates are over the time each interval covers (the last ends with the observation).
    let bytes_of = |bps: &[f64]| -> f64 {
        bps.iter()
            .enumerate()
            .map(|(i, b)| b * series.covered_s(i) / 8.0)
            .sum()
    };
    let series_bytes = bytes_of(&series.total.bps);
    assert!(
        (series_bytes - t.roce_bytes as f64).abs() < 1.0,
        "series bytes"
    );
    assert_eq!(
        series.total.naks.iter().sum::<u64>(),
        report
            .flows
            .iter()
            .map(|f| f.ops.nak + f.ops.rnr_nak)
            .sum::<u64>()
    );
    assert!(series.start_ns >= start_ns - 1_000_000_000 && series.start_ns <= end_ns);
    // Microburst slots: every frame's bytes on the wire, counted by the kernel, read through
    // the mapped rings, none lost.
    let wire: u64 = w.frames.iter().map(|f| f.bytes.len() as u64 + 24).sum();
    let mb = report.microbursts.as_ref().expect("microbursts");
    assert_eq!(mb.slot_ns, 100_000);
    let rx_in = mb
        .interfaces
        .iter()
        .find(|i| i.name == "rx0" && i.direction == roce_observer::model::Direction::Ingress)
        .expect("rx0 ingress");
    assert_eq!(rx_in.bytes, wire, "microburst bytes");
    assert_eq!(rx_in.lost_slots, 0);
    assert!(rx_in.peak_bps > 0.0);
    assert!(start_ns <= rx_in.peak_at_ns && rx_in.peak_at_ns <= end_ns);
    let iface_series = series
        .interfaces
        .iter()
        .find(|i| i.name == "rx0" && i.direction == roce_observer::model::Direction::Ingress)
        .expect("rx0 series");
    let iface_bytes = bytes_of(&iface_series.bps);
    assert!(
        (iface_bytes - wire as f64).abs() < 1.0,
        "interface series bytes"
    );
    assert_eq!(
        iface_series.peak_bps.iter().cloned().fold(0.0, f64::max),
        rx_in.peak_bps
    );
    // The findings ran: every rule has a check; the workload's loss is found.
    assert_eq!(
        report.checks.len(),
        roce_observer::analysis::findings::RULES.len()
    );
    assert!(
        report.findings.iter().any(|f| f.rule == "loss"),
        "{:?}",
        report.findings
    );
}

/// A flow table too small for the traffic: the kernel's LRU evicts, the totals keep every
/// packet, and the flow-table-full finding says so.
#[test]
fn a_full_flow_table_is_a_finding() {
    if !require_root("a_full_flow_table_is_a_finding") {
        return;
    }
    let w = synth::scenario("many-qps").unwrap();
    let lab = Lab::create("ro-full").unwrap();
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &[
            "--iface",
            "rx0",
            "--duration",
            "2s",
            "--json",
            "--max-flows",
            "64",
        ],
    );
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(report.totals.roce_packets, w.truth.counters.roce_packets);
    let lost = report.totals.evicted_packets + report.totals.flow_insert_failures;
    assert!(lost > 0, "{:?}", report.totals);
    let f = report
        .findings
        .iter()
        .find(|f| f.rule == "flow-table-full")
        .unwrap_or_else(|| panic!("no flow-table-full finding: {:?}", report.findings));
    assert_eq!(
        f.evidence["evicted_packets"].as_u64().unwrap()
            + f.evidence["flow_insert_failures"].as_u64().unwrap(),
        lost
    );
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
    // Host mode: each frame is seen leaving one interface (TC egress) and arriving at the other.
    let mut both = seen_both_ways(&a);
    both.merge(&seen_both_ways(&b));
    let want = expected(&both, &report);
    assert_eq!(report.totals, want.totals);
    assert_eq!(timeless(&report.flows), timeless(&want.flows));
    assert!(!has_xdp(&lab.ns, "rx0") && !has_xdp(&lab.ns, "tx0"));
}

/// The truth of `w` seen twice: sent (TC egress, flows marked egress) and received.
fn seen_both_ways(w: &synth::Workload) -> Aggregate {
    let ingress = integration_tests::with_tracks(truth_aggregate(&w.truth), w);
    let mut egress = ingress.clone();
    egress.flows = egress
        .flows
        .into_iter()
        .map(|(k, v)| {
            let mirror = k.mirror | observer_common::DIRECTION_EGRESS;
            (observer_common::FlowKey { mirror, ..k }, v)
        })
        .collect();
    egress.pauses = egress
        .pauses
        .into_iter()
        .map(|(k, v)| {
            let mirror = k.mirror | observer_common::DIRECTION_EGRESS;
            (observer_common::PauseKey { mirror, ..k }, v)
        })
        .collect();
    egress.counters.egress_frames = w.frames.len() as u64;
    let mut both = ingress;
    both.merge(&egress);
    both
}

/// Host mode on both ends of the veth pair: frames transmitted on tx0 are seen by the TC egress
/// program there (flows marked egress) and by XDP on rx0 (ingress), each exactly as the truth,
/// and every frame reaches rx0's stack with its bytes unchanged.
#[test]
fn host_mode_sees_egress_and_ingress_and_changes_nothing() {
    if !require_root("host_mode_sees_egress_and_ingress_and_changes_nothing") {
        return;
    }
    let w = synth::scenario("e2e").unwrap();
    let lab = Lab::create("ro-egress").unwrap();
    // What rx0's stack receives with no observer (packet sockets see VLAN tags moved to
    // metadata): the reference for "unchanged".
    let plain = tap(&lab, "rx0");
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut reference = received(&plain);
    drop(plain);
    assert_eq!(
        reference.len(),
        w.frames.len(),
        "frames without an observer"
    );
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &[
            "--iface",
            "tx0",
            "--iface",
            "rx0",
            "--duration",
            "2s",
            "--json",
        ],
    );
    assert!(has_xdp(&lab.ns, "tx0") && has_xdp(&lab.ns, "rx0"));
    assert_eq!(tcx_programs(&lab, "tx0"), 1, "TC egress on tx0");
    let fd = tap(&lab, "rx0");
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));

    let want = expected(&seen_both_ways(&w), &report);
    assert_eq!(report.totals, want.totals, "totals");
    assert_eq!(timeless(&report.flows), timeless(&want.flows), "flows");
    // PAUSE / PFC senders apart by direction too (times aside; veth's 10 Gb/s applies to
    // neither: e2e's pause frames include mirror copies, so no speed is assumed).
    let strip = |r: &Report| {
        r.pfc.clone().map(|mut p| {
            for s in &mut p.sources {
                (s.first_seen_ns, s.last_seen_ns) = (0, 0);
            }
            p
        })
    };
    assert_eq!(strip(&report), strip(&want), "pfc");
    let pfc = report.pfc.as_ref().unwrap();
    assert!(pfc.link_speed_bps.is_none());
    assert!(
        pfc.sources
            .iter()
            .any(|s| s.direction == roce_observer::model::Direction::Egress)
    );
    let egress_flows = report
        .flows
        .iter()
        .filter(|f| f.direction == roce_observer::model::Direction::Egress)
        .count();
    assert_eq!(
        egress_flows,
        w.truth.flows.len(),
        "every flow seen leaving tx0"
    );
    assert_eq!(report.totals.egress_frames, w.frames.len() as u64);

    // Host mode never drops or changes a packet: rx0's stack got every frame, byte for byte.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut got = received(&fd);
    got.sort();
    reference.sort();
    assert_eq!(got.len(), reference.len(), "frames reaching rx0's stack");
    assert!(got == reference, "bytes changed on the way");
    // And detached from both hooks afterwards.
    assert!(!has_xdp(&lab.ns, "tx0") && !has_xdp(&lab.ns, "rx0"));
    assert_eq!(tcx_programs(&lab, "tx0"), 0, "TC egress detached from tx0");
}

/// How many tcx egress programs `dev` has (`ip link` does not show tcx; the kernel says).
fn tcx_programs(lab: &Lab, dev: &'static str) -> usize {
    lab.ns
        .run_in(move || {
            aya::programs::SchedClassifier::query_tcx(dev, aya::programs::TcAttachType::Egress)
                .map(|(_, progs)| progs.len())
                .unwrap()
        })
        .unwrap()
}

/// Coexistence on TC egress (tcx): a program somebody else attached earlier stays attached, the
/// observer goes ahead of it (it sees frames before anything may drop them), passes every frame
/// on to it, and only its own link goes when it leaves.
#[test]
fn egress_observer_passes_on_and_leaves_foreign_programs_alone() {
    if !require_root("egress_observer_passes_on_and_leaves_foreign_programs_alone") {
        return;
    }
    let w = synth::scenario("clean").unwrap();
    let lab = Lab::create("ro-tcx").unwrap();
    let (foreign, foreign_id) = foreign_egress_program(&lab, false);
    assert_eq!(tcx_order(&lab, "tx0"), vec![foreign_id]);
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &["--iface", "tx0", "--duration", "1500ms", "--json"],
    );
    let order = tcx_order(&lab, "tx0");
    assert_eq!(order.len(), 2, "ours beside the foreign program");
    assert_eq!(order[1], foreign_id, "ours goes first: {order:?}");
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap();
    assert_eq!(report.totals.egress_frames, w.frames.len() as u64);
    assert_eq!(
        tcx_order(&lab, "tx0"),
        vec![foreign_id],
        "the foreign program stays"
    );
    let theirs = roce_observer::source::live::read_maps(&foreign, 0).unwrap();
    assert_eq!(
        theirs.counters.egress_frames,
        w.frames.len() as u64,
        "the program after ours saw every frame"
    );
    drop(foreign);
    assert!(
        integration_tests::detached_soon(|| tcx_programs(&lab, "tx0") == 0),
        "the foreign program's link went with its last handle"
    );
}

/// The ids of the tcx egress programs of `dev`, in the order they run.
fn tcx_order(lab: &Lab, dev: &'static str) -> Vec<u32> {
    lab.ns
        .run_in(move || {
            aya::programs::SchedClassifier::query_tcx(dev, aya::programs::TcAttachType::Egress)
                .map(|(_, progs)| progs.iter().map(|p| p.id()).collect())
                .unwrap()
        })
        .unwrap()
}

/// The BPF filters on the clsact egress hook of `dev` as (pref, program id), in the order they
/// run (`tc filter show`: one "direct-action" line each; a lower pref runs first).
fn clsact_filters(lab: &Lab, dev: &str) -> Vec<(u32, u32)> {
    let (status, out, err) = integration_tests::output(
        lab.ns
            .command("tc")
            .args(["filter", "show", "dev", dev, "egress"]),
    );
    assert!(status.success(), "tc filter show: {err}");
    let after = |words: &[&str], key: &str| -> u32 {
        let i = words.iter().position(|w| *w == key).expect(key);
        words[i + 1].parse().unwrap()
    };
    let mut v: Vec<(u32, u32)> = out
        .lines()
        .filter(|l| l.contains("direct-action"))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            (after(&words, "pref"), after(&words, "id"))
        })
        .collect();
    v.sort();
    v
}

/// The clsact path (kernels before 6.6, or --tc-hook clsact): the observer's filter goes ahead
/// of a filter somebody else added, passes every frame on to it, and is the only one removed.
#[test]
fn clsact_egress_passes_on_to_the_next_filter_and_leaves_it() {
    if !require_root("clsact_egress_passes_on_to_the_next_filter_and_leaves_it") {
        return;
    }
    let w = synth::scenario("clean").unwrap();
    let lab = Lab::create("ro-clsact").unwrap();
    let (foreign, foreign_id) = foreign_egress_program(&lab, true);
    let before = clsact_filters(&lab, "tx0");
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].1, foreign_id);
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &[
            "--iface",
            "tx0",
            "--tc-hook",
            "clsact",
            "--duration",
            "1500ms",
            "--json",
        ],
    );
    let filters = clsact_filters(&lab, "tx0");
    assert_eq!(filters.len(), 2, "ours beside the foreign filter");
    assert_eq!(
        filters[1], before[0],
        "ours ahead of the foreign filter: {filters:?}"
    );
    assert_eq!(
        tcx_programs(&lab, "tx0"),
        0,
        "no tcx link with --tc-hook clsact"
    );
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap();
    let mut egress = seen_both_ways(&w);
    // Only tx0 is observed: the egress half.
    egress.flows.retain(|k, _| k.is_egress());
    egress.counters = truth_aggregate(&w.truth).counters;
    egress.counters.egress_frames = w.frames.len() as u64;
    let want = expected(&egress, &report);
    assert_eq!(report.totals, want.totals);
    assert_eq!(timeless(&report.flows), timeless(&want.flows));
    assert_eq!(clsact_filters(&lab, "tx0"), before, "only ours removed");
    let theirs = roce_observer::source::live::read_maps(&foreign, 0).unwrap();
    assert_eq!(
        theirs.counters.egress_frames,
        w.frames.len() as u64,
        "the filter after ours saw every frame"
    );
}

/// RoCEv2 sent through the host's UDP stack with sendfile: the datagrams' payload (the BTH on)
/// sits in page fragments, outside the skb's linear part, where the TC egress program cannot
/// read it directly. It pulls the headers in (bytes unchanged) and counts every packet.
#[test]
fn egress_of_non_linear_udp_is_parsed() {
    if !require_root("egress_of_non_linear_udp_is_parsed") {
        return;
    }
    use std::net::Ipv4Addr;
    let lab = Lab::create("ro-frags").unwrap();
    for args in [
        &["ip", "addr", "add", "198.18.200.1/24", "dev", "tx0"][..],
        &["ip", "route", "add", "198.18.201.0/24", "dev", "tx0"][..],
        &[
            "ip",
            "neigh",
            "add",
            "198.18.201.2",
            "lladdr",
            "02:00:00:00:02:01",
            "dev",
            "tx0",
        ][..],
    ] {
        let (status, _, err) = integration_tests::output(lab.ns.command(args[0]).args(&args[1..]));
        assert!(status.success(), "{args:?}: {err}");
    }
    let (src, dst, sport) = (
        Ipv4Addr::new(198, 18, 200, 1),
        Ipv4Addr::new(198, 18, 201, 2),
        49152u16,
    );
    // The UDP payload of an RC WRITE middle: BTH, 1024 bytes, ICRC.
    let mut frame = synth::RoceFrame::new(
        synth::Ip::v4(src, dst),
        observer_common::wire::TRANSPORT_RC | observer_common::wire::op::WRITE_MIDDLE,
        0x00ABCD,
    );
    frame.payload_len = 1024;
    let udp_payload = frame.to_bytes()[frame.bth_offset()..].to_vec();
    let ip_len = (20 + 8 + udp_payload.len()) as u64;
    const SENT: u64 = 50;
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &["--iface", "tx0", "--duration", "1500ms", "--json"],
    );
    lab.ns
        .run_in(move || unsafe {
            roce_observer::lab::pin_current_thread().unwrap();
            let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
            assert!(sock >= 0);
            let addr = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: port.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(ip).to_be(),
                },
                sin_zero: [0; 8],
            };
            let len = std::mem::size_of::<libc::sockaddr_in>() as u32;
            let local = addr(src, sport);
            assert_eq!(libc::bind(sock, (&raw const local).cast(), len), 0);
            let remote = addr(dst, 4791);
            assert_eq!(libc::connect(sock, (&raw const remote).cast(), len), 0);
            let mem = libc::memfd_create(c"roce-payload".as_ptr(), 0);
            assert!(mem >= 0);
            let n = libc::write(mem, udp_payload.as_ptr().cast(), udp_payload.len());
            assert_eq!(n as usize, udp_payload.len());
            for _ in 0..SENT {
                let mut off: libc::off_t = 0;
                let sent = libc::sendfile(sock, mem, &mut off, udp_payload.len());
                assert_eq!(
                    sent as usize,
                    udp_payload.len(),
                    "sendfile: {}",
                    std::io::Error::last_os_error()
                );
            }
            libc::close(mem);
            libc::close(sock);
        })
        .unwrap();
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap();
    assert_eq!(report.totals.skipped["truncated"], 0, "headers pulled in");
    let f = report
        .flows
        .iter()
        .find(|f| f.dest_qp == 0x00ABCD)
        .unwrap_or_else(|| panic!("no egress flow: {out}"));
    assert_eq!(f.direction, roce_observer::model::Direction::Egress);
    assert_eq!(
        (f.src_ip, f.dst_ip, f.udp_src_port),
        (src.into(), dst.into(), sport)
    );
    assert_eq!(
        (f.packets, f.bytes, f.ops.write),
        (SENT, SENT * ip_len, SENT)
    );
}

/// A "foreign" TC egress program on tx0, as somebody else would attach it: another instance of
/// the egress observer, counting into its own maps, on tcx (appended) or, with `clsact`, as a
/// filter on a clsact qdisc the call adds. Returns the object (dropping it detaches) and the
/// program's id.
fn foreign_egress_program(lab: &Lab, clsact: bool) -> (aya::Ebpf, u32) {
    use aya::programs::{
        LinkOrder, SchedClassifier, TcAttachType,
        tc::{self, NlOptions, TcAttachOptions},
    };
    lab.ns
        .run_in(move || {
            let mut ebpf = aya::EbpfLoader::new()
                .load(roce_observer::EBPF_OBJECT)
                .unwrap();
            let prog: &mut SchedClassifier = ebpf
                .program_mut(observer_common::programs::OBSERVE_EGRESS)
                .unwrap()
                .try_into()
                .unwrap();
            prog.load().unwrap();
            let options = if clsact {
                tc::qdisc_add_clsact("tx0").unwrap();
                TcAttachOptions::Netlink(NlOptions::default())
            } else {
                TcAttachOptions::TcxOrder(LinkOrder::default())
            };
            prog.attach_with_options("tx0", TcAttachType::Egress, options)
                .unwrap();
            let id = prog.info().unwrap().id();
            (ebpf, id)
        })
        .unwrap()
}

/// Reordering, duplicate copies and go-back-N sent through a veth pair: the live analysis
/// classifies them as the generator intended (flow by flow, the PSN counts of its ground truth),
/// and the findings name each: `reorder`, `duplicate-copies`, `loss`.
#[test]
fn reorder_copies_and_go_back_n_are_told_apart_live() {
    if !require_root("reorder_copies_and_go_back_n_are_told_apart_live") {
        return;
    }
    let scenarios = ["rule-reorder", "rule-duplicate-copies", "rule-loss"];
    let lab = Lab::create("ro-psn").unwrap();
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &["--iface", "rx0", "--duration", "2s", "--json"],
    );
    assert!(has_xdp(&lab.ns, "rx0"), "observer attached");
    let mut truth = Aggregate::new();
    for name in scenarios {
        let w = synth::scenario(name).unwrap();
        assert_eq!(send(&lab, "tx0", &w), w.frames.len());
        truth.merge(&truth_aggregate(&w.truth));
    }
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let want = expected(&truth, &report);
    let psn = |r: &Report| {
        let mut v: Vec<_> = timeless(&r.flows)
            .into_iter()
            .map(|f| (f.src_ip, f.dst_ip, f.dest_qp, f.psn))
            .collect();
        v.sort_by_key(|x| (x.0, x.1, x.2));
        v
    };
    assert_eq!(psn(&report), psn(&want), "per-flow PSN analysis");
    let t = &report.totals.psn;
    assert_eq!(
        (
            t.out_of_order,
            t.duplicates,
            t.retransmission_episodes,
            t.missing
        ),
        (14, 5, 2, 0),
        "{t:?}"
    );
    let fired: std::collections::BTreeSet<&str> =
        report.findings.iter().map(|f| f.rule.as_str()).collect();
    for rule in ["reorder", "duplicate-copies", "loss"] {
        assert!(fired.contains(rule), "{rule}: fired {fired:?}");
    }
}

/// Connections whose directions use different UDP source ports, sent on the wire and observed
/// live: each connection the generator made is one connection with both QPNs, paired on its
/// PSNs (or its ports, for the flowlets), with its path MTU; the fault of the psn-violation
/// rule with ports per direction fires it.
#[test]
fn connections_with_ports_per_direction_pair_live() {
    if !require_root("connections_with_ports_per_direction_pair_live") {
        return;
    }
    let scenarios = [
        "pairing-local-port",
        "pairing-fixed-port",
        "pairing-flow-labels",
        "pairing-many-qps",
        "pairing-respray",
        "pairing-cm",
        "rule-psn-violation-split",
    ];
    let lab = Lab::create("ro-pair").unwrap();
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &["--iface", "rx0", "--duration", "3s", "--json"],
    );
    assert!(has_xdp(&lab.ns, "rx0"), "observer attached");
    let mut want = std::collections::BTreeSet::new();
    for name in scenarios {
        let w = synth::scenario(name).unwrap();
        assert_eq!(send(&lab, "tx0", &w), w.frames.len());
        for (c, ways) in &w.truth.connections {
            if ways[0] && ways[1] {
                let a = (roce_observer::model::ip_of(c.requester), c.requester_qp);
                let b = (roce_observer::model::ip_of(c.responder), c.responder_qp);
                want.insert(if a <= b { (a, b) } else { (b, a) });
            }
        }
    }
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let got: std::collections::BTreeSet<_> = report
        .connections
        .iter()
        .filter(|c| c.paired_by.is_some())
        .map(|c| {
            let a = (c.a.ip, c.a.qp.unwrap());
            let b = (c.b.ip, c.b.qp.unwrap());
            if a <= b { (a, b) } else { (b, a) }
        })
        .collect();
    assert_eq!(got, want, "{:#?}", report.connections);
    assert_eq!(report.connections.len(), want.len(), "nothing one-sided");
    assert!(report.connections.iter().all(|c| c.pmtu == Some(1024)));
    // The answers found their requests across the ports: the connections of one QP per pair
    // of hosts have their ACK latency.
    for c in &report.connections {
        let lone = report
            .connections
            .iter()
            .filter(|o| {
                (o.a.ip, o.b.ip) == (c.a.ip, c.b.ip) || (o.a.ip, o.b.ip) == (c.b.ip, c.a.ip)
            })
            .count()
            == 1;
        if lone {
            let ack = c.a.latency.ack.as_ref().map_or(0, |l| l.samples);
            assert!(ack > 0, "no ACK latency: {c:#?}");
        }
    }
    let fired: std::collections::BTreeSet<&str> =
        report.findings.iter().map(|f| f.rule.as_str()).collect();
    // (The stall needs the scenario's 300 ms of silence, which sending back to back does not
    // keep: the replay tests have it.)
    assert!(fired.contains("psn-violation"), "fired {fired:?}");
}
