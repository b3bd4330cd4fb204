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
    let ingress = truth_aggregate(&w.truth);
    let mut egress = ingress.clone();
    egress.flows = egress
        .flows
        .into_iter()
        .map(|(k, v)| {
            let mirror = k.mirror | observer_common::DIRECTION_EGRESS;
            (observer_common::FlowKey { mirror, ..k }, v)
        })
        .collect();
    egress.counters.egress_frames = w.frames.len() as u64;
    let mut both = ingress;
    both.merge(&egress);
    both
}

/// A packet socket on `dev` in the lab: every frame that reaches the stack there.
fn tap(lab: &Lab, dev: &'static str) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    lab.ns
        .run_in(move || unsafe {
            let fd = libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK,
                (libc::ETH_P_ALL as u16).to_be() as i32,
            );
            assert!(
                fd >= 0,
                "packet socket: {}",
                std::io::Error::last_os_error()
            );
            let mut addr: libc::sockaddr_ll = std::mem::zeroed();
            addr.sll_family = libc::AF_PACKET as u16;
            addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
            let name = std::ffi::CString::new(dev).unwrap();
            addr.sll_ifindex = libc::if_nametoindex(name.as_ptr()) as i32;
            let rc = libc::bind(
                fd,
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
            let size: libc::c_int = 64 << 20;
            let rc = libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&raw const size).cast(),
                4,
            );
            assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
            std::os::fd::OwnedFd::from_raw_fd(fd)
        })
        .unwrap()
}

/// Every frame queued on a tap, in order.
fn received(fd: &std::os::fd::OwnedFd) -> Vec<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return frames;
        }
        frames.push(buf[..n as usize].to_vec());
    }
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
    let egress_flows = report
        .flows
        .iter()
        .filter(|f| f.direction == roce_observer::report::Direction::Egress)
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

/// Coexistence on TC egress: a program somebody else attached after ours still sees every
/// frame (ours passes each on), and stays attached when the observer leaves.
#[test]
fn egress_observer_passes_on_and_leaves_foreign_programs_alone() {
    if !require_root("egress_observer_passes_on_and_leaves_foreign_programs_alone") {
        return;
    }
    let w = synth::scenario("clean").unwrap();
    let lab = Lab::create("ro-tcx").unwrap();
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &["--iface", "tx0", "--duration", "1500ms", "--json"],
    );
    assert_eq!(
        tcx_programs(&lab, "tx0"),
        1,
        "the observer's egress program"
    );
    // The "foreign" program: another instance of the egress observer, attached after ours
    // (tcx appends), counting into its own maps.
    let foreign = lab
        .ns
        .run_in(|| {
            let mut ebpf = aya::EbpfLoader::new()
                .load(roce_observer::EBPF_OBJECT)
                .unwrap();
            let tc: &mut aya::programs::SchedClassifier = ebpf
                .program_mut(observer_common::programs::OBSERVE_EGRESS)
                .unwrap()
                .try_into()
                .unwrap();
            tc.load().unwrap();
            tc.attach("tx0", aya::programs::TcAttachType::Egress)
                .unwrap();
            ebpf
        })
        .unwrap();
    assert_eq!(tcx_programs(&lab, "tx0"), 2);
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap();
    assert_eq!(report.totals.egress_frames, w.frames.len() as u64);
    assert_eq!(tcx_programs(&lab, "tx0"), 1, "the foreign program stays");
    let theirs = roce_observer::live::read_maps(&foreign, 0).unwrap();
    assert_eq!(
        theirs.counters.egress_frames,
        w.frames.len() as u64,
        "the program after ours saw every frame"
    );
    drop(foreign);
    assert_eq!(tcx_programs(&lab, "tx0"), 0);
}

/// BPF filters on the clsact egress hook of `dev` (`tc filter show`: one "direct-action" line each).
fn clsact_filters(lab: &Lab, dev: &str) -> usize {
    let (status, out, err) = integration_tests::output(
        lab.ns
            .command("tc")
            .args(["filter", "show", "dev", dev, "egress"]),
    );
    assert!(status.success(), "tc filter show: {err}");
    out.lines().filter(|l| l.contains("direct-action")).count()
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
    let foreign = lab
        .ns
        .run_in(|| {
            use aya::programs::tc::{self, NlOptions, TcAttachOptions};
            tc::qdisc_add_clsact("tx0").unwrap();
            let mut ebpf = aya::EbpfLoader::new()
                .load(roce_observer::EBPF_OBJECT)
                .unwrap();
            let prog: &mut aya::programs::SchedClassifier = ebpf
                .program_mut(observer_common::programs::OBSERVE_EGRESS)
                .unwrap()
                .try_into()
                .unwrap();
            prog.load().unwrap();
            prog.attach_with_options(
                "tx0",
                aya::programs::TcAttachType::Egress,
                TcAttachOptions::Netlink(NlOptions::default()),
            )
            .unwrap();
            ebpf
        })
        .unwrap();
    assert_eq!(clsact_filters(&lab, "tx0"), 1);
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
    assert_eq!(
        clsact_filters(&lab, "tx0"),
        2,
        "ours beside the foreign filter"
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
    assert_eq!(clsact_filters(&lab, "tx0"), 1, "only ours removed");
    let theirs = roce_observer::live::read_maps(&foreign, 0).unwrap();
    assert_eq!(
        theirs.counters.egress_frames,
        w.frames.len() as u64,
        "the filter after ours saw every frame"
    );
}
