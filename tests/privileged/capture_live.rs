//! Live capture through libpcap (`--capture DEV`) against XDP on the same interface: the
//! generator sends known RoCE traffic over a veth pair in a namespace the test creates (and
//! removes), XDP and libpcap observe the receiving end at the same time, and the libpcap view
//! equals the XDP view, and both the generator's truth: per flow, per connection, per pause
//! sender, in the totals and the skip reasons, in the microburst bytes; and through the
//! sidecar's metrics. Addresses are the generator's, inside the namespace.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read, Write},
    process::{Child, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use integration_tests::{
    Diagnose, Sample, Scratch, has_xdp, parse_exposition, require_root, sample_sum, timeless,
    truth_aggregate, tshark_times,
};
use roce_observer::{
    lab::{Lab, Netns},
    model::{Direction, Report},
    source::{capture::SNAPLEN, synth},
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

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

fn report(d: Diagnose, what: &str) -> Report {
    let (status, out, err) = d.finish();
    assert!(status.success(), "{what} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what}: {e}: {out}"))
}

/// `v` without the fields that hold times or rates (the two views stamp frames with different
/// clocks: the kernel's tick and libpcap's timestamps), and, in `totals`, without libpcap's
/// own counters.
fn timeless_json(v: Value) -> Value {
    fn strip(v: &mut Value) {
        const TIMED: &[&str] = &[
            "first_seen_ns",
            "last_seen_ns",
            "rate_bps",
            "active_rate_bps",
            "peak_rate_bps",
            "latency",
            "unanswered",
            "longest_resend_wait",
            "first_violation",
            "capture",
        ];
        match v {
            Value::Object(m) => {
                for k in TIMED {
                    m.remove(*k);
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = v;
    strip(&mut v);
    v
}

/// A report's section as JSON, without times (`timeless_json`).
macro_rules! timeless_section {
    ($e:expr) => {
        timeless_json(serde_json::to_value(&$e).unwrap())
    };
}

/// Bytes on the wire of the frames `w` sends, as microburst slots count them (frame, FCS,
/// preamble and gap).
fn wire_bytes(w: &synth::Workload) -> u64 {
    w.frames.iter().map(|f| f.bytes.len() as u64 + 24).sum()
}

fn ingress_bytes(r: &Report, iface: &str) -> u64 {
    let mb = r.microbursts.as_ref().expect("microbursts");
    mb.interfaces
        .iter()
        .find(|i| i.name == iface && i.direction == Direction::Ingress)
        .unwrap_or_else(|| panic!("no {iface} ingress row: {:?}", mb.interfaces))
        .bytes
}

/// XDP, libpcap with every frame and libpcap with the default filter watch one interface while
/// the e2e scenario (every operation, transport, encapsulation and skip reason) arrives.
#[test]
fn the_libpcap_view_equals_the_xdp_view() {
    if !require_root("the_libpcap_view_equals_the_xdp_view") {
        return;
    }
    let w = synth::scenario("e2e").unwrap();
    let lab = Lab::create("ro-cap").unwrap();
    let args = |extra: &[&'static str]| {
        let mut a = vec!["--duration", "3s", "--json"];
        a.extend_from_slice(extra);
        a
    };
    let xdp = Diagnose::start(&lab.ns, CLI.as_ref(), &args(&["--iface", "rx0"]));
    let every = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &args(&["--capture", "rx0", "--capture-filter", ""]),
    );
    let filtered = Diagnose::start(&lab.ns, CLI.as_ref(), &args(&["--capture", "rx0"]));
    assert!(has_xdp(&lab.ns, "rx0"), "XDP attached beside the captures");
    assert!(
        every
            .stderr_text
            .contains("through libpcap (link type EN10MB, promiscuous, filter none: every frame)"),
        "{}",
        every.stderr_text
    );
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    let (xdp, every, filtered) = (
        report(xdp, "XDP"),
        report(every, "capture"),
        report(filtered, "filtered capture"),
    );
    assert!(!has_xdp(&lab.ns, "rx0"), "detached at exit");

    // What libpcap said of itself.
    assert_eq!(every.source.kind, "capture");
    assert_eq!(every.source.interfaces, vec!["rx0".to_string()]);
    let how = every.source.capture.as_ref().expect("source.capture");
    assert_eq!(
        (
            how.link_type.as_str(),
            how.promiscuous,
            how.snaplen,
            how.timestamps.as_str()
        ),
        ("EN10MB", true, SNAPLEN, "ns")
    );
    assert_eq!(how.filter, None);
    let filter = filtered.source.capture.as_ref().unwrap().filter.clone();
    assert_eq!(
        filter.as_deref(),
        Some(roce_observer::source::capture::DEFAULT_FILTER)
    );
    let counts = every.totals.capture.expect("totals.capture");
    assert_eq!(counts.received, w.frames.len() as u64, "{counts:?}");
    assert_eq!((counts.dropped, counts.interface_dropped), (0, 0));
    // No drop, no early end: what warnings there are, XDP has too (pause times).
    assert_eq!(every.source.warnings, xdp.source.warnings);

    // Every frame: libpcap equals XDP, section by section, and both equal the generator's
    // truth.
    let truth = truth_aggregate(&w.truth).report(xdp.source.clone(), xdp.window.seconds);
    assert_eq!(xdp.totals, truth.totals, "XDP totals");
    assert_eq!(timeless(&xdp.flows), timeless(&truth.flows), "XDP flows");
    let mut totals = every.totals.clone();
    totals.capture = None;
    assert_eq!(totals, xdp.totals, "totals");
    assert_eq!(timeless(&every.flows), timeless(&xdp.flows), "flows");
    for (name, a, b) in [
        (
            "connections",
            timeless_section!(every.connections),
            timeless_section!(xdp.connections),
        ),
        (
            "other traffic",
            timeless_section!(every.other_traffic),
            timeless_section!(xdp.other_traffic),
        ),
        (
            "pfc",
            timeless_section!(every.pfc),
            timeless_section!(xdp.pfc),
        ),
    ] {
        assert_eq!(a, b, "{name}");
    }
    assert!(every.pfc.is_some() && !every.connections.is_empty());
    assert!(
        every.connections.iter().any(|c| c.a.messages.is_some()),
        "messages counted"
    );
    // Microburst slots: the same bytes on the wire, every frame's.
    assert_eq!(ingress_bytes(&every, "rx0"), wire_bytes(&w));
    assert_eq!(ingress_bytes(&xdp, "rx0"), wire_bytes(&w));
    // The series adds up to the totals there too.
    let series = every.series.as_ref().expect("series");
    assert_eq!(
        series.total.packets.iter().sum::<u64>(),
        every.totals.roce_packets
    );
    for r in [&xdp, &every, &filtered] {
        assert!(
            r.findings.iter().any(|f| f.rule == "loss"),
            "{:?}: {:?}",
            r.source.kind,
            r.findings
        );
    }

    // The default filter: everything the parser accounts for, the rest never copied up.
    let mut totals = filtered.totals.clone();
    let kept = totals.capture.take().expect("totals.capture");
    assert_eq!(kept.received, totals.frames);
    assert!(
        totals.frames < xdp.totals.frames,
        "ordinary traffic is filtered"
    );
    for (what, a, b) in [
        ("RoCE packets", totals.roce_packets, xdp.totals.roce_packets),
        ("RoCE bytes", totals.roce_bytes, xdp.totals.roce_bytes),
        ("CE", totals.ce_packets, xdp.totals.ce_packets),
        ("CNPs", totals.cnp_packets, xdp.totals.cnp_packets),
    ] {
        assert_eq!(a, b, "{what}");
    }
    assert_eq!(totals.mirror, xdp.totals.mirror, "mirror copies");
    assert_eq!(totals.psn, xdp.totals.psn, "PSN analysis");
    for reason in ["not_ip", "not_udp", "other_port"] {
        assert!(
            totals.skipped[reason] < xdp.totals.skipped[reason],
            "{reason}: {:?}",
            totals.skipped
        );
    }
    assert_eq!(
        timeless(&filtered.flows),
        timeless(&xdp.flows),
        "filtered flows"
    );
    assert_eq!(
        timeless_section!(filtered.connections),
        timeless_section!(xdp.connections)
    );
    assert_eq!(timeless_section!(filtered.pfc), timeless_section!(xdp.pfc));
}

/// Ctrl-C and SIGTERM end a capture early, on time, and it still reports every frame.
#[test]
fn a_capture_stops_early_on_a_signal_and_reports() {
    if !require_root("a_capture_stops_early_on_a_signal_and_reports") {
        return;
    }
    let w = synth::scenario("demo").unwrap();
    for (signal, said) in [(libc::SIGTERM, "terminated"), (libc::SIGINT, "interrupted")] {
        let lab = Lab::create("ro-capsig").unwrap();
        let d = Diagnose::start(
            &lab.ns,
            CLI.as_ref(),
            &["--capture", "rx0", "--duration", "10m", "--json"],
        );
        send(&lab, "tx0", &w);
        let asked = Instant::now();
        // The child is `ip netns exec`, which execs the observer: same pid.
        unsafe { libc::kill(d.child.id() as i32, signal) };
        let (status, out, err) = d.finish();
        assert!(asked.elapsed() < Duration::from_secs(5), "stopped late");
        assert!(status.success(), "exit after {said}: {status} {err}");
        assert!(err.contains(said), "{err}");
        let r: Report = serde_json::from_str(&out).unwrap();
        assert_eq!(r.totals.frames, w.frames.len() as u64);
        assert_eq!(
            timeless(&r.flows),
            timeless(
                &truth_aggregate(&w.truth)
                    .report(r.source.clone(), 1.0)
                    .flows
            )
        );
    }
}

/// A quiet capture ends its window on time.
#[test]
fn a_quiet_capture_ends_on_time() {
    if !require_root("a_quiet_capture_ends_on_time") {
        return;
    }
    let lab = Lab::create("ro-capquiet").unwrap();
    let started = Instant::now();
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &["--capture", "rx0", "--duration", "1s", "--json"],
    );
    let r = report(d, "quiet capture");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(
        r.window.seconds >= 1.0 && r.window.seconds < 2.0,
        "{}",
        r.window.seconds
    );
    assert_eq!(r.totals.frames, 0);
    assert!(r.notice.is_some());
}

// ---- The sidecar: `run --capture` beside `run --iface` on the same interface.

/// The daemon in a namespace, its stderr collected line by line.
struct Daemon {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Starts `run ARGS` in `ns`, waits until it logs `ready`.
    fn start(ns: &Netns, args: &[&str], ready: &str) -> Self {
        let mut child = ns
            .command(CLI)
            .arg("run")
            .args(args)
            .env_remove("ROCE_OBSERVER_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the daemon");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let mut d = Self { child, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !d.log.lock().unwrap().iter().any(|l| l.contains(ready)) {
            if let Some(status) = d.child.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(100));
                panic!("the daemon exited ({status}): {}", d.text());
            }
            assert!(Instant::now() < deadline, "no '{ready}': {}", d.text());
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    fn text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits (up to 20 s) for a log line containing `needle`.
    fn wait_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.log.lock().unwrap().iter().any(|l| l.contains(needle)) {
            assert!(Instant::now() < deadline, "no '{needle}':\n{}", self.text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM; whether it exited cleanly, and its log.
    fn stop(mut self) -> (bool, String) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        (status.success(), self.text())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lab namespace's loopback up (the daemons listen on it).
fn loopback_up(lab: &Lab) {
    let ok = lab
        .ns
        .command("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// Scrapes `127.0.0.1:port/metrics` in `ns` (OpenMetrics) and parses it with
/// prometheus_client's strict OpenMetrics parser.
fn scrape(ns: &Netns, port: u16) -> Vec<Sample> {
    let request = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n";
    let raw = ns
        .run_in(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(request.as_bytes())?;
            let mut out = Vec::new();
            s.read_to_end(&mut out)?;
            Ok::<_, std::io::Error>(out)
        })
        .unwrap()
        .expect("HTTP GET");
    let text = String::from_utf8(raw).unwrap();
    let (_, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let samples = parse_exposition(body, true);
    integration_tests::assert_in_registry(&samples);
    samples
}

/// The families both daemons export, summed per label set without the queue pairs' own
/// labels (which queue pairs are series depends on the drain they grew in).
fn comparable(samples: &[Sample]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for s in samples {
        let keep = s.name.starts_with("roce_iface_")
            || s.name.starts_with("roce_packets")
            || s.name.starts_with("roce_bytes")
            || s.name.starts_with("roce_ecn_")
            || s.name.starts_with("roce_op_")
            || s.name.starts_with("roce_qp_")
            || s.name == "roce_observer_skipped_frames_total"
            || s.name == "roce_observer_connections";
        if !keep || s.name.contains("latency") {
            continue;
        }
        let labels: Vec<String> = s
            .labels
            .iter()
            .filter(|(k, _)| !["src", "dst", "qp", "sport", "mirror"].contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        *out.entry(format!("{}{{{}}}", s.name, labels.join(",")))
            .or_default() += s.value as u64;
    }
    out
}

#[test]
fn the_sidecar_exports_a_capture_as_it_exports_xdp() {
    if !require_root("the_sidecar_exports_a_capture_as_it_exports_xdp") {
        return;
    }
    let w = synth::scenario("e2e").unwrap();
    let lab = Lab::create("ro-caprun").unwrap();
    loopback_up(&lab);
    let common = ["--interval", "200ms", "--idle-timeout", "10m"];
    let mut xdp_args = vec!["--iface", "rx0", "--listen", "127.0.0.1:9477"];
    xdp_args.extend(common);
    let xdp = Daemon::start(&lab.ns, &xdp_args, "attached; serving");
    let mut cap_args = vec![
        "--capture",
        "rx0",
        "--capture-filter",
        "",
        "--listen",
        "127.0.0.1:9478",
    ];
    cap_args.extend(common);
    let cap = Daemon::start(&lab.ns, &cap_args, "capturing; serving");
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    let packets = w.truth.counters.roce_packets;
    let frames = w.frames.len() as u64;
    // Until both drained everything.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (x, c) = loop {
        let (x, c) = (scrape(&lab.ns, 9477), scrape(&lab.ns, 9478));
        let done = |s: &[Sample]| {
            sample_sum(s, "roce_qp_packets_total", &[]) == packets
                && sample_sum(s, "roce_iface_frames_total", &[]) == frames
        };
        if done(&x)
            && done(&c)
            && sample_sum(&c, "roce_observer_capture_received_frames_total", &[]) == frames
        {
            break (x, c);
        }
        assert!(
            Instant::now() < deadline,
            "not drained: xdp {} / capture {} of {packets} packets",
            sample_sum(&x, "roce_qp_packets_total", &[]),
            sample_sum(&c, "roce_qp_packets_total", &[])
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The same counters, family by family (the XDP daemon's egress rows hold nothing here).
    let (mut xc, cc) = (comparable(&x), comparable(&c));
    xc.retain(|k, v| !(k.contains("dir=tx") && *v == 0));
    assert_eq!(cc, xc);
    // Against the generator: per interface and per queue pair.
    let rx = [("iface", "rx0"), ("dir", "rx")];
    assert_eq!(sample_sum(&c, "roce_packets_total", &rx), packets);
    assert_eq!(
        sample_sum(&c, "roce_bytes_total", &rx),
        w.truth.counters.roce_bytes
    );
    assert_eq!(sample_sum(&c, "roce_iface_frames_total", &rx), frames);
    assert_eq!(
        sample_sum(&c, "roce_qp_ce_packets_total", &[]),
        w.truth.counters.ce_packets
    );
    // libpcap's own counters, none dropped.
    assert_eq!(
        sample_sum(
            &c,
            "roce_observer_capture_received_frames_total",
            &[("iface", "rx0")]
        ),
        frames
    );
    for place in ["buffer", "interface"] {
        assert_eq!(
            sample_sum(
                &c,
                "roce_observer_capture_dropped_frames_total",
                &[("iface", "rx0"), ("where", place)]
            ),
            0,
            "{place}"
        );
    }
    assert!(
        c.iter().any(|s| s.name == "roce_observer_info"
            && s.labels.get("mode").map(String::as_str) == Some("capture")),
        "mode=capture"
    );
    assert_eq!(
        sample_sum(&c, "roce_observer_interface_attached", &[("iface", "rx0")]),
        1
    );
    assert!(
        !x.iter()
            .any(|s| s.name.starts_with("roce_observer_capture_"))
    );
    let (clean, log) = cap.stop();
    assert!(clean, "{log}");
    let (clean, log) = xdp.stop();
    assert!(clean, "{log}");
}

/// Waits (up to 20 s) until the daemon on `port` exports `packets` RoCE packets on rx0.
fn drained(ns: &Netns, port: u16, packets: u64) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = scrape(ns, port);
        let seen = sample_sum(&s, "roce_packets_total", &[("iface", "rx0"), ("dir", "rx")]);
        if seen == packets {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "{seen} of {packets} packets exported"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The captured interface goes away and comes back under its name: the daemon says so, opens
/// it again, and its counts go on.
#[test]
fn the_sidecar_captures_an_interface_again_when_it_comes_back() {
    if !require_root("the_sidecar_captures_an_interface_again_when_it_comes_back") {
        return;
    }
    let w = synth::scenario("demo").unwrap();
    let lab = Lab::create("ro-capback").unwrap();
    let ip = |args: &[&str]| {
        let ok = lab.ns.command("ip").args(args).status().unwrap();
        assert!(ok.success(), "ip {args:?}");
    };
    ip(&["link", "set", "lo", "up"]);
    let d = Daemon::start(
        &lab.ns,
        &[
            "--capture",
            "rx0",
            "--interval",
            "200ms",
            "--listen",
            "127.0.0.1:9479",
        ],
        "capturing; serving",
    );
    let packets = w.truth.counters.roce_packets;
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    drained(&lab.ns, 9479, packets);
    ip(&["link", "del", "rx0"]);
    d.wait_log("interface gone");
    ip(&["link", "add", "rx0", "type", "veth", "peer", "name", "tx0"]);
    ip(&["link", "set", "rx0", "up"]);
    ip(&["link", "set", "tx0", "up"]);
    d.wait_log("re-attached");
    assert_eq!(send(&lab, "tx0", &w), w.frames.len());
    let s = drained(&lab.ns, 9479, 2 * packets);
    assert_eq!(
        sample_sum(&s, "roce_observer_reattachments_total", &[("iface", "rx0")]),
        1
    );
    assert_eq!(
        sample_sum(&s, "roce_observer_interface_attached", &[("iface", "rx0")]),
        1
    );
    assert_eq!(sample_sum(&s, "roce_qp_packets_total", &[]), 2 * packets);
    let (clean, log) = d.stop();
    assert!(clean, "{log}");
}

/// Sends `w` on tx0 while dumpcap captures rx0 (RoCEv2 only, into `dir`): when each
/// iteration of its (first) job began, as the kernel stamped its first frame on receipt (the
/// capture read by tshark; the frames arrive in the order sent).
fn send_job(lab: &Lab, w: &synth::Workload, dir: &Scratch) -> Vec<u64> {
    let pcap = dir.path("truth.pcapng");
    let mut dumpcap = lab
        .ns
        .command("dumpcap")
        .args([
            "-q",
            "-B",
            "64",
            "-i",
            "rx0",
            "-f",
            "udp dst port 4791",
            "-w",
        ])
        .arg(&pcap)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dumpcap");
    // dumpcap says when it captures.
    let mut err = BufReader::new(dumpcap.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("Capturing on") {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "dumpcap ended: {line}"
        );
    }
    // (It says so as it opens the device; the filter and buffer follow.)
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(send(lab, "tx0", w), w.frames.len());
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(dumpcap.id() as i32, libc::SIGINT) };
    assert!(dumpcap.wait().unwrap().success());
    let times = tshark_times(&pcap);
    assert_eq!(times.len(), w.frames.len(), "dumpcap saw every frame");
    w.truth.jobs[0]
        .iteration_starts_ns
        .iter()
        .map(|t| times[w.frames.iter().position(|f| f.ts_ns == *t).unwrap()])
        .collect()
}

/// The period of iteration starts `starts` as the analysis defines it (the mean of the
/// iteration times within a quarter of their median), with how many were near, for a bound of
/// 22%, 25% and 28%: the analysis sees the starts on bins, and a bin either way can move an
/// iteration the load stretched across its bound.
fn periods_of_starts(starts: &[u64]) -> Vec<(f64, usize)> {
    let times: Vec<u64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    let mut sorted = times.clone();
    sorted.sort_unstable();
    let m = sorted[sorted.len() / 2] as f64;
    [0.22, 0.25, 0.28]
        .iter()
        .map(|bound| {
            let near: Vec<f64> = times
                .iter()
                .map(|t| *t as f64)
                .filter(|t| (t - m).abs() <= bound * m)
                .collect();
            (near.iter().sum::<f64>() / near.len() as f64, near.len())
        })
        .collect()
}

/// Whether `period_ns` is within 2% of one of the wire's periods (phases start on 1 ms bins).
fn near_a_wire_period(period_ns: f64, wire: &[(f64, usize)]) -> bool {
    wire.iter().any(|(w, _)| (period_ns / w - 1.0).abs() < 0.02)
}

/// `diagnose --capture --jobs` on the generator's training ring sent over a veth pair: one job
/// of its 8 hosts, a phase per iteration, and its period as the wire kept it. The sender waits
/// out the gaps of 1 ms or more between frames and sends the rest back to back (with a pause
/// per batch), so the truth is the kernel's: when dumpcap, beside it, saw each iteration's
/// first frame.
#[test]
fn diagnose_finds_the_training_job_in_a_live_capture() {
    if !require_root("diagnose_finds_the_training_job_in_a_live_capture") {
        return;
    }
    let w = synth::scenario("training").unwrap();
    let truth = &w.truth.jobs[0];
    let lab = Lab::create("ro-capjobs").unwrap();
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &["--capture", "rx0", "--duration", "10m", "--jobs", "--json"],
    );
    let scratch = Scratch::new("capture-jobs");
    let starts = send_job(&lab, &w, &scratch);
    std::thread::sleep(Duration::from_millis(200));
    unsafe { libc::kill(d.child.id() as i32, libc::SIGINT) };
    let r = report(d, "diagnose --capture --jobs");
    assert_eq!(r.totals.roce_packets, w.frames.len() as u64);
    let wire = periods_of_starts(&starts);
    let near = wire.iter().map(|(_, n)| *n).min().unwrap();
    let jobs = r.jobs.as_ref().expect("a jobs section");
    assert_eq!(jobs.jobs.len(), 1, "{jobs:#?}");
    let job = &jobs.jobs[0];
    assert_eq!(job.hosts, truth.hosts);
    assert_eq!(
        job.phases.len(),
        truth.iteration_starts_ns.len(),
        "{job:#?}"
    );
    let p = job.period.as_ref().expect("a period");
    // (A sleep the machine's load stretched can put an iteration off the median.)
    assert!(
        p.iterations as usize >= near.saturating_sub(1),
        "{p:?}, {near} near on the wire"
    );
    assert!(
        near_a_wire_period(p.ns as f64, &wire),
        "period {} vs the wire's {wire:?}",
        p.ns
    );
    let check = |rule: &str| r.checks.iter().find(|c| c.rule == rule).unwrap().status;
    for rule in ["job-straggler", "job-hang", "job-irregular-iteration"] {
        assert_eq!(
            check(rule),
            roce_observer::model::findings::CheckStatus::Passed,
            "{rule}: {:?}",
            r.checks
        );
    }
}

/// Value of the one sample of `name` with labels `with` (None: no such sample).
fn sample(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
        })
        .map(|s| s.value)
        .collect();
    assert!(found.len() <= 1, "{name} {with:?}: {found:?}");
    found.first().copied()
}

/// The label of the one job whose label starts with `prefix` (its hosts; the rest a hash).
fn job_label(samples: &[Sample], prefix: &str) -> String {
    let labels: std::collections::BTreeSet<&String> = samples
        .iter()
        .filter(|s| s.name == "roce_job_hosts")
        .filter_map(|s| s.labels.get("training_job"))
        .filter(|l| l.starts_with(prefix))
        .collect();
    assert_eq!(labels.len(), 1, "{prefix}: {labels:?}");
    labels.into_iter().next().unwrap().clone()
}

/// `run --capture --jobs` (5 s windows): the generator's training ring sent in the first
/// window is one job of its 8 hosts, its iterations in the histogram at the pace the wire kept
/// (dumpcap beside it), not hung; the ring whose fourth host never comes back, sent in the
/// second window, is hung, and the first job, silent since, keeps its series, not hung, its
/// silent periods grown. The scrape is parsed by prometheus_client's strict OpenMetrics
/// parser.
#[test]
fn the_sidecar_exports_the_training_jobs_of_a_capture() {
    if !require_root("the_sidecar_exports_the_training_jobs_of_a_capture") {
        return;
    }
    let lab = Lab::create("ro-capjobrun").unwrap();
    loopback_up(&lab);
    let args = [
        "--capture",
        "rx0",
        "--listen",
        "127.0.0.1:9479",
        "--interval",
        "200ms",
        "--jobs",
        "--jobs-window",
        "5s",
    ];
    let daemon = Daemon::start(&lab.ns, &args, "capturing; serving");
    let started = Instant::now();
    let w = synth::scenario("training").unwrap();
    let scratch = Scratch::new("capture-jobs-run");
    let starts = send_job(&lab, &w, &scratch);
    let wire_mean = (starts[starts.len() - 1] - starts[0]) as f64 / (starts.len() - 1) as f64;
    let wire = periods_of_starts(&starts);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "sent too late for the first window"
    );
    // The first window's end.
    let wait_windows = |n: f64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = scrape(&lab.ns, 9479);
            if sample(&s, "roce_job_windows_total", &[]).unwrap_or(0.0) >= n {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "no jobs window {n}: {}",
                daemon.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let s = wait_windows(1.0);
    let label = job_label(&s, "198.18.80.1+7/");
    let job = [("training_job", label.as_str())];
    assert_eq!(sample(&s, "roce_jobs", &[]), Some(1.0));
    assert_eq!(sample(&s, "roce_job_hosts", &job), Some(8.0));
    assert_eq!(
        sample(&s, "roce_job_iteration_seconds_count", &job),
        Some(11.0)
    );
    let mean = sample(&s, "roce_job_iteration_seconds_sum", &job).unwrap() / 11.0;
    // Phases start on 1 ms bins.
    assert!(
        (mean * 1e9 / wire_mean - 1.0).abs() < 0.02,
        "{mean} s vs the wire's {wire_mean} ns"
    );
    let period = sample(&s, "roce_job_period_seconds", &job).unwrap();
    assert!(
        near_a_wire_period(period * 1e9, &wire),
        "{period} s vs the wire's {wire:?} ns"
    );
    assert_eq!(sample(&s, "roce_job_hung", &job), Some(0.0));
    let silent = sample(&s, "roce_job_silent_periods", &job).unwrap();
    assert!(silent > 3.0, "{silent}");
    assert_eq!(sample(&s, "roce_job_irregular_iterations", &job), Some(0.0));
    assert!(
        s.iter().all(|x| x.name != "roce_job_straggler"),
        "no straggler"
    );

    // The second window: a ring that hangs.
    let hang = synth::scenario("rule-job-hang").unwrap();
    assert_eq!(send(&lab, "tx0", &hang), hang.frames.len());
    let s = wait_windows(2.0);
    let hung_label = job_label(&s, "198.18.85.1+7/");
    let hung = [("training_job", hung_label.as_str())];
    assert_eq!(sample(&s, "roce_job_hung", &hung), Some(1.0), "{s:?}");
    assert_eq!(sample(&s, "roce_job_hosts", &hung), Some(8.0));
    // The ring and the pair writing beside it.
    assert_eq!(sample(&s, "roce_jobs", &[]), Some(2.0));
    // The first job, silent since: its series stay, judged again at this window's end.
    assert_eq!(sample(&s, "roce_job_hosts", &job), Some(8.0));
    assert_eq!(sample(&s, "roce_job_hung", &job), Some(0.0));
    let later = sample(&s, "roce_job_silent_periods", &job).unwrap();
    assert!(later > silent + 50.0, "{later} vs {silent}");
    assert_eq!(
        sample(&s, "roce_job_iteration_seconds_count", &job),
        Some(11.0)
    );
    let (clean, log) = daemon.stop();
    assert!(clean, "{log}");
}
