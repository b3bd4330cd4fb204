//! `roce-observer run`, the continuous sidecar, end to end in lab namespaces: a bounded soak
//! with link flaps and an interface re-creation (as a non-root user with only CAP_BPF,
//! CAP_NET_ADMIN and CAP_PERFMON), a full flow table, idle aging, SIGHUP reloads, the HTTP
//! endpoints, and errors. Scrapes are parsed by the Prometheus project's own Python parsers
//! (prometheus_client: OpenMetrics and the Prometheus text format) and linted by promtool.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader, Read, Write},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use integration_tests::{
    Sample, Scratch, output, parse_exposition, require_root, run_with_input, sample_sum,
};
use observer_common::{FlowStats, OpClass, SkipReason, wire};
use roce_observer::{
    lab::{Lab, Netns},
    source::synth::{self, Ip, QpStream, Workload, host_mac},
};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");
const PORT: u16 = 9477;

/// The CLI in `ns` as `nobody` (uid and gid 65534, no groups) with only the capabilities
/// `caps` (setpriv syntax: inheritable, ambient and bounding).
fn as_nobody(ns: &Netns, caps: &str) -> Command {
    let mut c = ns.command("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        &format!("--inh-caps={caps}"),
        &format!("--ambient-caps={caps}"),
        &format!("--bounding-set={caps}"),
        CLI,
    ]);
    c
}

/// The daemon in a namespace, its stderr collected line by line.
struct Daemon {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Starts `run ARGS` in `ns` (as `nobody` with only the three capabilities when
    /// `unprivileged`), waits until it serves.
    fn start(ns: &Netns, args: &[&str], unprivileged: bool) -> Self {
        Self::start_env(ns, args, unprivileged, None)
    }

    /// As `start`, with ROCE_OBSERVER_LOG set to `log` (unset when None).
    fn start_env(ns: &Netns, args: &[&str], unprivileged: bool, log: Option<&str>) -> Self {
        let cmd = if unprivileged {
            as_nobody(ns, "-all,+bpf,+net_admin,+perfmon")
        } else {
            ns.command(CLI)
        };
        Self::spawn(cmd, args, log)
    }

    /// Starts `run ARGS` with `cmd` (the CLI, or setpriv running it), waits until it serves.
    fn spawn(mut cmd: Command, args: &[&str], log: Option<&str>) -> Self {
        let mut child = cmd
            .arg("run")
            .args(args)
            .env_remove("ROCE_OBSERVER_LOG")
            .envs(log.map(|l| ("ROCE_OBSERVER_LOG", l)))
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
        let d = Self { child, log };
        d.wait_log("attached; serving", 0);
        d
    }

    fn lines(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    fn text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits (up to 20 s) for a line from `from` on containing `needle`; the index after it.
    fn wait_log(&self, needle: &str, from: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            {
                let log = self.log.lock().unwrap();
                if let Some(i) = log.iter().skip(from).position(|l| l.contains(needle)) {
                    return from + i + 1;
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "no log line with '{needle}' after line {from}:\n{}",
                    self.text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(self.pid() as libc::pid_t, sig) }, 0);
    }

    /// SIGTERM; the exit status and the whole log.
    fn stop(mut self) -> (ExitStatus, String) {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(100));
                return (status, self.text());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the daemon did not exit on SIGTERM:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// VmRSS in kB.
    fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP GET inside `ns`: (status, content type, body).
fn get(ns: &Netns, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{}\r\n",
        accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"))
    );
    let raw = ns
        .run_in(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", PORT))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(request.as_bytes())?;
            let mut out = Vec::new();
            s.read_to_end(&mut out)?;
            Ok::<_, std::io::Error>(out)
        })
        .unwrap()
        .expect("HTTP GET");
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    (status, content_type, body.to_string())
}

/// Scrapes /metrics as OpenMetrics and parses it.
fn scrape(ns: &Netns) -> Vec<Sample> {
    let (status, content_type, body) = get(
        ns,
        "/metrics",
        Some("application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(body.ends_with("# EOF\n"));
    let samples = parse_exposition(&body, true);
    integration_tests::assert_in_registry(&samples);
    samples
}

fn one(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
        })
        .collect();
    assert_eq!(found.len(), 1, "{name} {with:?}: {found:?}");
    found[0].value
}

/// The per-QP metrics and the truth field each must sum to.
/// A truth field.
type Field = fn(&FlowStats) -> u64;

const QP_METRICS: [(&str, Field); 9] = [
    ("roce_qp_packets_total", |s| s.packets),
    ("roce_qp_bytes_total", |s| s.bytes),
    ("roce_qp_ce_packets_total", |s| s.ecn[3]),
    ("roce_qp_cnp_packets_total", |s| {
        s.ops[OpClass::Cnp as usize]
    }),
    ("roce_qp_nak_packets_total", |s| {
        s.ops[OpClass::Nak as usize]
    }),
    ("roce_qp_rnr_nak_packets_total", |s| {
        s.ops[OpClass::RnrNak as usize]
    }),
    ("roce_qp_psn_gaps_total", |s| s.psn_gaps),
    ("roce_qp_psn_missing_total", |s| s.seq.lost),
    ("roce_qp_retransmissions_total", |s| s.seq.retransmissions),
];

/// What the generator sent, summed over rounds.
#[derive(Default)]
struct Sent {
    frames: u64,
    frame_bytes: u64,
    flows: BTreeMap<observer_common::FlowKey, FlowStats>,
    skipped: [u64; SkipReason::COUNT],
}

impl Sent {
    fn add(&mut self, w: &Workload) {
        self.frames += w.frames.len() as u64;
        self.frame_bytes += w.frames.iter().map(|f| f.bytes.len() as u64).sum::<u64>();
        for (k, s) in &w.truth.flows {
            self.flows.entry(*k).or_default().merge(s);
        }
        for (a, b) in self.skipped.iter_mut().zip(w.truth.counters.skipped) {
            *a += b;
        }
    }

    fn total(&self, f: impl Fn(&FlowStats) -> u64) -> u64 {
        self.flows.values().map(f).sum()
    }
}

/// Steady traffic: four RC QPs whose PSNs continue from round to round (one congested: CE
/// marks and CNPs; one lossy: a gap, a NAK and go-back-N every few rounds; one with RNR NAKs;
/// one clean), plus malformed and non-RoCE frames.
struct Traffic {
    qps: Vec<QpStream>,
    round: usize,
}

impl Traffic {
    fn new() -> Self {
        let qps = (0..4u32)
            .map(|i| {
                let ip = Ip::v4(
                    std::net::Ipv4Addr::new(198, 18, 7, 1 + i as u8),
                    std::net::Ipv4Addr::new(198, 18, 7, 101),
                );
                let mut qp = QpStream::new(
                    wire::TRANSPORT_RC,
                    ip,
                    [host_mac(0x700 + i as u16), host_mac(0x765)],
                    [0x1100 + i, 0x1200 + i],
                    0x10_0000 * i,
                );
                if i == 1 {
                    qp.ce_every = 3;
                }
                qp
            })
            .collect();
        Self { qps, round: 0 }
    }

    fn next(&mut self) -> Workload {
        let mut w = Workload::default();
        let r = self.round;
        self.round += 1;
        for (i, qp) in self.qps.iter_mut().enumerate() {
            match i {
                1 => {
                    qp.write(&mut w, 4096);
                    qp.cnp_if_marked(&mut w);
                }
                2 if r % 5 == 2 => {
                    qp.write(&mut w, 2048);
                    let first = qp.next_psn();
                    qp.lose_next(2);
                    qp.write(&mut w, 4096);
                    qp.nak(&mut w, first, synth::SYNDROME_NAK_SEQ);
                    qp.retransmit_from(&mut w, first);
                }
                3 if r % 7 == 3 => {
                    // The retry comes after the RNR timer (the sender waits it out too).
                    let psn = qp.send(&mut w, 512);
                    qp.rnr_retry(&mut w, psn);
                }
                _ => {
                    qp.write(&mut w, 1024 * (1 + r % 3));
                }
            }
            let last = qp.last_psn();
            qp.ack(&mut w, last);
        }
        if r.is_multiple_of(4) {
            for (bytes, reason) in synth::basic_noise() {
                w.push_noise(bytes, reason);
            }
        }
        w
    }
}

/// Sends rounds of traffic on `tx` in `ns` for `dur`, one every 50 ms.
fn send_for(ns: &Netns, traffic: &mut Traffic, sent: &mut Sent, dur: Duration) {
    let end = Instant::now() + dur;
    while Instant::now() < end {
        let w = traffic.next();
        // One CPU: PSN continuity is per CPU.
        integration_tests::send_frames(ns, w.frames.clone());
        sent.add(&w);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Takes `dev` down and up again; the daemon must log rx0 going down and coming back (from log
/// line `at` on). The log line after.
fn flap(ns: &Netns, daemon: &Daemon, dev: &str, at: usize) -> usize {
    ip(ns, &["link", "set", dev, "down"]);
    let at = daemon.wait_log("link down iface=rx0", at);
    std::thread::sleep(Duration::from_millis(500));
    ip(ns, &["link", "set", dev, "up"]);
    daemon.wait_log("link up iface=rx0", at)
}

/// A lab whose loopback is up (the metrics endpoint listens there).
fn lab(prefix: &str) -> Lab {
    let lab = Lab::create(prefix).unwrap();
    ip(&lab.ns, &["link", "set", "lo", "up"]);
    lab
}

fn ip(ns: &Netns, args: &[&str]) {
    let (status, _, err) = output(ns.command("ip").args(args));
    assert!(status.success(), "ip {args:?}: {err}");
}

fn chmod_777(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
}

/// Checks a scrape against what was sent: interface totals exactly, every per-QP family's
/// series plus rest exactly, and the skipped frames.
fn check_against(samples: &[Sample], sent: &Sent, max_series: usize) {
    let rx = [("iface", "rx0"), ("dir", "rx")];
    assert_eq!(
        sample_sum(samples, "roce_iface_frames_total", &rx),
        sent.frames
    );
    assert_eq!(
        sample_sum(samples, "roce_iface_frame_bytes_total", &rx),
        sent.frame_bytes
    );
    assert_eq!(
        sample_sum(samples, "roce_packets_total", &rx),
        sent.total(|s| s.packets)
    );
    assert_eq!(
        sample_sum(samples, "roce_bytes_total", &rx),
        sent.total(|s| s.bytes)
    );
    assert_eq!(
        sample_sum(samples, "roce_ecn_packets_total", &[("ecn", "ce")]),
        sent.total(|s| s.ecn[3])
    );
    for op in OpClass::ALL {
        assert_eq!(
            sample_sum(samples, "roce_op_packets_total", &[("op", op.name())]),
            sent.total(|s| s.ops[op as usize]),
            "{}",
            op.name()
        );
    }
    // Nothing leaves rx0.
    assert_eq!(
        sample_sum(samples, "roce_iface_frames_total", &[("dir", "tx")]),
        0
    );
    // Series that stopped keep their counts: only then are the series plus the rest less.
    let demotions = one(samples, "roce_observer_series_demotions_total", &[]);
    for (name, f) in QP_METRICS {
        if demotions == 0.0 {
            assert_eq!(sample_sum(samples, name, &[]), sent.total(f), "{name}");
        } else {
            assert!(sample_sum(samples, name, &[]) <= sent.total(f), "{name}");
        }
        let series = samples.iter().filter(|s| s.name == name).count();
        assert!(series <= max_series + 1, "{name}: {series} series");
        // Each series counts a real flow, at most what it sent.
        for s in samples.iter().filter(|s| s.name == name) {
            if s.labels["qp"] == "rest" {
                continue;
            }
            let key = sent
                .flows
                .iter()
                .find(|(k, _)| {
                    format!("0x{:06x}", k.dest_qp) == s.labels["qp"]
                        && roce_observer::model::ip_of(k.src_ip).to_string() == s.labels["src"]
                })
                .unwrap_or_else(|| panic!("a series of no sent flow: {s:?}"));
            assert!(s.value as u64 <= f(key.1), "{s:?}");
        }
    }
    for r in SkipReason::ALL {
        assert_eq!(
            sample_sum(
                samples,
                "roce_observer_skipped_frames_total",
                &[("reason", r.name())]
            ),
            sent.skipped[r as usize],
            "{}",
            r.name()
        );
    }
}

#[test]
fn soak_flaps_recreation_nonroot() {
    if !require_root("soak_flaps_recreation_nonroot") {
        return;
    }
    let lab = lab("ro-soak");
    let scratch = Scratch::new("soak");
    chmod_777(&scratch.path(""));
    let jsonl = scratch.path("intervals.jsonl");
    let max_series = 3;
    let started_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let daemon = Daemon::start(
        &lab.ns,
        &[
            "--iface",
            "rx0",
            "--interval",
            "1s",
            "--max-series",
            &max_series.to_string(),
            "--jsonl",
            jsonl.to_str().unwrap(),
        ],
        true,
    );
    // Running as nobody, with exactly the three capabilities.
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap()
            .trim()
            .to_string()
    };
    assert!(field("Uid:").starts_with("65534"), "{status}");
    let caps = u64::from_str_radix(&field("CapEff:"), 16).unwrap();
    assert_eq!(caps, (1 << 12) | (1 << 38) | (1 << 39), "CapEff {caps:#x}");

    let mut traffic = Traffic::new();
    let mut sent = Sent::default();
    let phase = Duration::from_secs(11);
    let mut rss = Vec::new();
    let mut at = daemon.lines();

    send_for(&lab.ns, &mut traffic, &mut sent, phase);
    rss.push(daemon.rss_kb());
    // Flap 1: rx0 itself.
    at = flap(&lab.ns, &daemon, "rx0", at);

    send_for(&lab.ns, &mut traffic, &mut sent, phase);
    rss.push(daemon.rss_kb());
    // Flap 2: the peer (rx0 loses its carrier).
    at = flap(&lab.ns, &daemon, "tx0", at);

    send_for(&lab.ns, &mut traffic, &mut sent, phase);
    rss.push(daemon.rss_kb());
    // Re-creation: the pair is deleted and made again under the same names.
    ip(&lab.ns, &["link", "del", "rx0"]);
    at = daemon.wait_log("interface gone", at);
    let scrape_gone = scrape(&lab.ns);
    assert_eq!(
        one(
            &scrape_gone,
            "roce_observer_interface_attached",
            &[("iface", "rx0")]
        ),
        0.0
    );
    ip(
        &lab.ns,
        &["link", "add", "rx0", "type", "veth", "peer", "name", "tx0"],
    );
    at = daemon.wait_log("re-attached", at);
    ip(&lab.ns, &["link", "set", "rx0", "up"]);
    ip(&lab.ns, &["link", "set", "tx0", "up"]);
    daemon.wait_log("link up iface=rx0", at);

    send_for(&lab.ns, &mut traffic, &mut sent, phase);
    rss.push(daemon.rss_kb());
    // Two more drains, then the counters must equal what was sent.
    std::thread::sleep(Duration::from_millis(2500));
    let samples = scrape(&lab.ns);
    check_against(&samples, &sent, max_series);
    assert_eq!(
        one(
            &samples,
            "roce_observer_reattachments_total",
            &[("iface", "rx0")]
        ),
        1.0
    );
    assert_eq!(
        one(
            &samples,
            "roce_observer_interface_attached",
            &[("iface", "rx0")]
        ),
        1.0
    );
    assert_eq!(
        one(&samples, "roce_observer_flow_evictions_total", &[]),
        0.0
    );
    assert_eq!(
        one(&samples, "roce_observer_unattributed_packets_total", &[]),
        0.0
    );
    assert!(one(&samples, "roce_observer_drains_total", &[]) >= 40.0);
    // The maps are named from the daemon's own descriptors: no CAP_SYS_ADMIN needed.
    let maps = by_label(&samples, "roce_observer_kernel_map_memory_bytes", "map");
    assert!(
        maps.contains_key("FLOWS") && maps.keys().all(|m| !m.starts_with("map-")),
        "{maps:?}"
    );
    // The same exposition in the Prometheus text format, parsed and linted.
    let (status, content_type, text) = get(&lab.ns, "/metrics", None);
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let plain = parse_exposition(&text, false);
    integration_tests::assert_in_registry(&plain);
    check_against(&plain, &sent, max_series);
    promtool_lint(&text);
    // Health.
    assert_eq!(get(&lab.ns, "/healthz", None).0, 200);
    // Every metric the deployment files use (alert and recording rules, the dashboard) is one
    // the daemon exports, and the daemon exports exactly the documented list.
    deploy_metrics_exported(&samples);
    let names: std::collections::BTreeSet<&str> = samples.iter().map(|s| s.name.as_str()).collect();
    let listed: std::collections::BTreeSet<&str> = integration_tests::EXPORTED_METRICS
        .iter()
        .copied()
        .collect();
    // Latency histograms appear once samples do (the soak's traffic may time none).
    let latency: std::collections::BTreeSet<&str> =
        integration_tests::LATENCY_METRICS.iter().copied().collect();
    let (always, _): (std::collections::BTreeSet<&str>, _) =
        names.iter().partition(|n| !latency.contains(*n));
    assert_eq!(always, listed);

    // Resident memory flat: the last sample within 2 MiB of the first (after warm-up).
    eprintln!("soak: RSS kB at the end of each phase: {rss:?}");
    assert!(rss[3] <= rss[0] + 2048, "resident memory grew: {rss:?} kB");

    let (status, log) = daemon.stop();
    assert!(status.success(), "{status}\n{log}");
    assert!(log.contains("SIGTERM: detaching"), "{log}");
    assert!(log.contains("detached from every interface"), "{log}");
    assert!(!integration_tests::has_xdp(&lab.ns, "rx0"));
    assert!(!log.contains("ERROR"), "{log}");

    // The JSON lines: intervals that follow one another from the attach on, QPs and ports as
    // numbers.
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let mut end = None;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let (a, b) = (
            v["start_unix_ns"].as_u64().unwrap(),
            v["end_unix_ns"].as_u64().unwrap(),
        );
        assert!(a <= b, "{line}");
        if let Some(prev) = end {
            assert_eq!(a, prev, "an interval starts where the last ended: {line}");
        }
        end = Some(b);
        for q in v["qps"].as_array().unwrap() {
            assert!(q["qp"].is_u64() && q["sport"].is_u64(), "{q}");
        }
    }
    // The first interval runs from the attach, after the run started.
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(first["start_unix_ns"].as_u64().unwrap() >= started_unix_ns);
    // The JSON lines: per-interval deltas that add up to the same totals, every metric.
    let (lines, ifaces, qps) = jsonl_sums(&[&jsonl]);
    assert!(lines >= 40, "{lines} lines");
    assert_eq!(ifaces["packets"], sent.total(|s| s.packets));
    assert_eq!(ifaces["bytes"], sent.total(|s| s.bytes));
    for (name, f) in QP_METRICS {
        let key = name
            .strip_prefix("roce_qp_")
            .unwrap()
            .strip_suffix("_total")
            .unwrap();
        assert_eq!(qps[key], sent.total(f), "JSON lines: {key}");
    }
}

/// Sums of the JSON lines of `files`: (lines, per-interface deltas by field, series plus rest
/// deltas by metric).
fn jsonl_sums(files: &[&Path]) -> (usize, BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let mut lines = 0;
    let mut ifaces = BTreeMap::new();
    let mut qps = BTreeMap::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            lines += 1;
            for i in v["interfaces"].as_array().unwrap() {
                for (k, x) in i.as_object().unwrap() {
                    if let Some(n) = x.as_u64() {
                        *ifaces.entry(k.clone()).or_default() += n;
                    }
                }
            }
            let rows = v["qps"].as_array().unwrap().iter().chain([&v["rest"]]);
            for q in rows {
                for (k, x) in q.as_object().unwrap() {
                    if let Some(n) = x.as_u64() {
                        *qps.entry(k.clone()).or_default() += n;
                    }
                }
            }
        }
    }
    (lines, ifaces, qps)
}

/// Checks that the `roce_*` metric names in deploy/ (Prometheus rules, Grafana dashboard) are
/// all in the scrape.
fn deploy_metrics_exported(samples: &[Sample]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    let exported: std::collections::BTreeSet<&str> =
        samples.iter().map(|s| s.name.as_str()).collect();
    let mut used = std::collections::BTreeSet::new();
    for file in [
        "prometheus/roce-observer.rules.yml",
        "grafana/roce-observer.json",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let bytes = text.as_bytes();
        let mut i = 0;
        while let Some(at) = text[i..].find("roce_") {
            let start = i + at;
            let before = start.checked_sub(1).map(|b| bytes[b]);
            let mut end = start;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
                end += 1;
            }
            if !before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':') {
                used.insert(text[start..end].to_string());
            }
            i = end;
        }
    }
    assert!(used.len() >= 10, "{used:?}");
    // Latency histograms appear once samples do, the NIC side with an RDMA device, the wire's
    // PFC families with pause frames: known names, even when this scrape has none.
    let missing: Vec<&String> = used
        .iter()
        .filter(|u| !exported.contains(u.as_str()))
        .filter(|u| {
            ![
                integration_tests::LATENCY_METRICS,
                integration_tests::NIC_METRICS,
                integration_tests::PFC_METRICS,
            ]
            .iter()
            .any(|list| list.contains(&u.as_str()))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "used in deploy/ but not exported: {missing:?}"
    );
}

/// `promtool check metrics` on a Prometheus-text exposition, when promtool is installed (setup
/// installs it; under CI its absence fails).
fn promtool_lint(text: &str) {
    let out = match run_with_input(
        Command::new("promtool").args(["check", "metrics"]),
        text.as_bytes(),
    ) {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var_os("CI").is_none(),
                "promtool is missing under CI (cargo xtask setup installs it)"
            );
            eprintln!("\n*** promtool not installed: the exposition lint is SKIPPED ***\n");
            return;
        }
        Err(e) => panic!("promtool check metrics: {e}"),
    };
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool check metrics: {report}");
}

/// Sends a workload on `dev` in `ns` from one CPU.
fn send_on(ns: &Netns, dev: &'static str, w: &Workload) {
    let frames = w.frames.clone();
    let n = ns
        .run_in(move || {
            roce_observer::lab::pin_current_thread().expect("pin");
            synth::send(dev, &frames)
        })
        .unwrap()
        .expect("send");
    assert_eq!(n, w.frames.len());
}

/// Waits for `drains` more drains (as the endpoint counts them).
fn wait_drains(ns: &Netns, drains: f64) -> Vec<Sample> {
    let start = one(&scrape(ns), "roce_observer_drains_total", &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let s = scrape(ns);
        if one(&s, "roce_observer_drains_total", &[]) >= start + drains {
            return s;
        }
        assert!(Instant::now() < deadline, "no drains");
    }
}

/// The series plus the rest at most the totals (series that stopped keep their counts), and
/// the JSON lines so far: their deltas add up to the interfaces' exactly.
fn qp_sums_match(s: &[Sample], jsonl: &[&Path]) {
    for (family, total) in [
        (
            "roce_qp_packets_total",
            sample_sum(s, "roce_packets_total", &[]),
        ),
        (
            "roce_qp_bytes_total",
            sample_sum(s, "roce_bytes_total", &[]),
        ),
        (
            "roce_qp_ce_packets_total",
            sample_sum(s, "roce_ecn_packets_total", &[("ecn", "ce")]),
        ),
        (
            "roce_qp_cnp_packets_total",
            sample_sum(s, "roce_op_packets_total", &[("op", "cnp")]),
        ),
    ] {
        assert!(sample_sum(s, family, &[]) <= total, "{family}");
    }
    let (_, ifaces, qps) = jsonl_sums(jsonl);
    for k in ["packets", "bytes", "cnp_packets", "nak_packets"] {
        assert_eq!(qps[k], ifaces[k], "JSON lines: {k}");
    }
}

#[test]
fn full_table_aging_and_reload() {
    if !require_root("full_table_aging_and_reload") {
        return;
    }
    let lab = lab("ro-reload");
    ip(
        &lab.ns,
        &["link", "add", "rx1", "type", "veth", "peer", "name", "tx1"],
    );
    ip(&lab.ns, &["link", "set", "rx1", "up"]);
    ip(&lab.ns, &["link", "set", "tx1", "up"]);
    let scratch = Scratch::new("reload");
    let jsonl = scratch.path("a.jsonl");
    let config = |ifaces: &str, extra: &str| {
        scratch.file(
            "config.toml",
            &format!(
                "iface = [{ifaces}]\ninterval = \"500ms\"\nmax_series = 2\nmax_flows = 64\nidle_timeout = \"2s\"\njsonl = \"{}\"\n{extra}",
                jsonl.display()
            ),
        )
    };
    let path = config("\"rx0\"", "");
    let daemon = Daemon::start(&lab.ns, &["--config", path.to_str().unwrap()], false);

    // 1000 QPs through a 64-entry table: evictions, and nothing lost from the totals.
    let many = synth::scenario("many-qps").unwrap();
    send_on(&lab.ns, Lab::TX, &many);
    let s = wait_drains(&lab.ns, 3.0);
    let packets: u64 = many.truth.flows.values().map(|f| f.packets).sum();
    assert_eq!(
        sample_sum(&s, "roce_packets_total", &[("iface", "rx0"), ("dir", "rx")]),
        packets
    );
    qp_sums_match(&s, &[&jsonl]);
    // Most flows were evicted before any drain read them: their packets are unattributed
    // (and in the rest), exactly the packets no flow holds.
    let in_flows: u64 = sample_sum(&s, "roce_qp_packets_total", &[]);
    let unattributed = one(&s, "roce_observer_unattributed_packets_total", &[]) as u64;
    assert!(unattributed > 0);
    assert!(unattributed <= in_flows);
    assert_eq!(one(&s, "roce_observer_flow_table_capacity", &[]), 64.0);
    assert!(one(&s, "roce_observer_flow_table_entries", &[]) <= 64.0);
    assert!(one(&s, "roce_observer_series", &[]) <= 2.0);
    let series = s
        .iter()
        .filter(|x| x.name == "roce_qp_packets_total")
        .count();
    assert!(series <= 3, "{series}");
    assert_eq!(sample_sum(&s, "roce_qp_psn_gaps_total", &[]), 0);
    assert_eq!(sample_sum(&s, "roce_qp_retransmissions_total", &[]), 0);

    // Idle flows are deleted from the kernel table after 2 s; the totals stay.
    let entries = one(&s, "roce_observer_flow_table_entries", &[]);
    std::thread::sleep(Duration::from_secs(3));
    let s = wait_drains(&lab.ns, 1.0);
    assert!(one(&s, "roce_observer_flows_aged_total", &[]) > 0.0);
    assert!(one(&s, "roce_observer_flow_table_entries", &[]) < entries);
    assert_eq!(sample_sum(&s, "roce_packets_total", &[]), packets);
    qp_sums_match(&s, &[&jsonl]);

    // SIGHUP: a second interface, more series, debug logging, a fixed setting changed; the
    // JSON-lines file was rotated away meanwhile.
    std::fs::rename(&jsonl, scratch.path("a.jsonl.1")).unwrap();
    config(
        "\"rx0\", \"rx1\", \"rx2\"",
        "log_level = \"debug\"\nlisten = \"127.0.0.1:9999\"\n",
    );
    let at = daemon.lines();
    daemon.signal(libc::SIGHUP);
    let after = daemon.wait_log("configuration reloaded", at);
    let log = daemon.text();
    assert!(log.contains("reload: attached iface=rx1"), "{log}");
    assert!(
        log.contains("reload: listen changes only with a restart"),
        "{log}"
    );
    let clean = synth::scenario("clean").unwrap();
    send_on(&lab.ns, "tx1", &clean);
    daemon.wait_log("drained", after);
    let s = wait_drains(&lab.ns, 2.0);
    let clean_packets: u64 = clean.truth.flows.values().map(|f| f.packets).sum();
    assert_eq!(
        sample_sum(&s, "roce_packets_total", &[("iface", "rx1"), ("dir", "rx")]),
        clean_packets
    );
    assert_eq!(
        sample_sum(&s, "roce_packets_total", &[("iface", "rx0"), ("dir", "rx")]),
        packets
    );
    qp_sums_match(&s, &[&scratch.path("a.jsonl.1"), &jsonl]);
    assert_eq!(
        one(
            &s,
            "roce_observer_config_reloads_total",
            &[("result", "ok")]
        ),
        1.0
    );
    assert!(jsonl.exists(), "the JSON-lines file is re-opened on SIGHUP");
    // rx2 did not exist at the reload: attached when it appears.
    assert!(daemon.text().contains("reload: no such interface yet"));
    assert_eq!(
        one(&s, "roce_observer_interface_attached", &[("iface", "rx2")]),
        0.0
    );
    let at = daemon.lines();
    ip(
        &lab.ns,
        &["link", "add", "rx2", "type", "veth", "peer", "name", "tx2"],
    );
    daemon.wait_log("interface appeared: attached iface=rx2", at);
    assert!(integration_tests::has_xdp(&lab.ns, "rx2"));
    let s = wait_drains(&lab.ns, 1.0);
    assert_eq!(
        one(&s, "roce_observer_interface_attached", &[("iface", "rx2")]),
        1.0
    );

    // A broken file: an error in the log and the count, and the daemon goes on as it was.
    scratch.file("config.toml", "iface = [\"rx0\"\n");
    let at = daemon.lines();
    daemon.signal(libc::SIGHUP);
    daemon.wait_log("reload failed, keeping the running configuration", at);
    let s = wait_drains(&lab.ns, 1.0);
    assert_eq!(
        one(
            &s,
            "roce_observer_config_reloads_total",
            &[("result", "error")]
        ),
        1.0
    );
    assert_eq!(get(&lab.ns, "/healthz", None).0, 200);

    // Dropping an interface detaches from it; the totals keep what it counted.
    config("\"rx1\"", "");
    let at = daemon.lines();
    daemon.signal(libc::SIGHUP);
    daemon.wait_log("configuration reloaded", at);
    assert!(daemon.text().contains("reload: detached iface=rx0"));
    assert!(daemon.text().contains("reload: detached iface=rx2"));
    assert!(!integration_tests::has_xdp(&lab.ns, "rx0"));
    assert!(!integration_tests::has_xdp(&lab.ns, "rx2"));
    assert!(integration_tests::has_xdp(&lab.ns, "rx1"));
    let s = wait_drains(&lab.ns, 2.0);
    assert!(sample_sum(&s, "roce_qp_packets_total", &[]) <= packets + clean_packets);
    let (_, _, qps) = jsonl_sums(&[&scratch.path("a.jsonl.1"), &jsonl]);
    assert_eq!(qps["packets"], packets + clean_packets);
    let (status, log) = daemon.stop();
    assert!(status.success(), "{log}");
    assert!(!integration_tests::has_xdp(&lab.ns, "rx1"));
    let rotated = std::fs::read_to_string(scratch.path("a.jsonl.1")).unwrap();
    let fresh = std::fs::read_to_string(&jsonl).unwrap();
    assert!(rotated.lines().count() >= 4 && fresh.lines().count() >= 2);
}

#[test]
fn endpoints_listener_and_errors() {
    if !require_root("endpoints_listener_and_errors") {
        return;
    }
    let lab = lab("ro-endpoints");
    let run = |args: &[&str]| {
        let (status, out, err) = output(lab.ns.command(CLI).arg("run").args(args));
        assert_eq!(status.code(), Some(1), "{args:?}: {out}{err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"));
        lines[0].to_string()
    };
    let scratch = Scratch::new("endpoints");
    assert!(run(&[]).contains("nothing to observe"));
    // The NIC side alone: a wrong name at start is an error, not an absent source.
    assert!(run(&["--rdma-dev", "nosuchdev9"]).contains("nosuchdev9"));
    assert!(run(&["--netdev", "nosuch0"]).contains("nosuch0"));
    assert!(run(&["--netdev", "lo", "--max-flows", "5"]).contains("max_flows without iface"));
    assert_eq!(
        run(&["--iface", "nosuch0"]),
        "roce-observer: error: interface 'nosuch0' not found"
    );
    assert!(run(&["--config", "/nonexistent/roce.toml"]).starts_with(
        "roce-observer: error: cannot read config file /nonexistent/roce.toml: No such file"
    ));
    let bad = scratch.file("bad.toml", "iface = [\"rx0\"]\nintervall = \"1s\"\n");
    let line = run(&["--config", bad.to_str().unwrap()]);
    assert!(line.contains("unknown field `intervall`"), "{line}");
    assert!(line.contains("bad.toml"), "{line}");
    assert!(run(&["-i", "rx0", "--interval", "10ms"]).contains("below the minimum of 100ms"));
    // A named RDMA device the host lacks, or a name that is none: one line, nothing attached.
    assert_eq!(
        run(&["-i", "rx0", "--rdma-dev", "nosuch_9"]),
        "roce-observer: error: no RDMA device nosuch_9"
    );
    assert!(!integration_tests::has_xdp(&lab.ns, "rx0"));
    assert!(run(&["-i", "rx0", "--rdma-dev", "../x"]).contains("not a device name"));
    // Only CAP_BPF and CAP_NET_ADMIN: CAP_PERFMON is named.
    let caps = "-all,+bpf,+net_admin";
    let (status, _, err) = output(as_nobody(&lab.ns, caps).args(["run", "-i", "rx0"]));
    assert_eq!(status.code(), Some(1));
    assert!(
        err.contains("CAP_PERFMON") && !err.contains("CAP_BPF+"),
        "{err}"
    );

    // The port is taken: a one-line error, nothing left attached.
    let holder = lab
        .ns
        .run_in(|| std::net::TcpListener::bind(("127.0.0.1", PORT)))
        .unwrap()
        .unwrap();
    assert_eq!(
        run(&["-i", "rx0"]),
        format!(
            "roce-observer: error: cannot listen on 127.0.0.1:{PORT}: Address already in use (os error 98)"
        )
    );
    assert!(!integration_tests::has_xdp(&lab.ns, "rx0"));
    drop(holder);

    // Loopback by default; any other address only when asked, with a warning.
    let d = Daemon::start(&lab.ns, &["-i", "rx0"], false);
    assert!(d.text().contains("listen=127.0.0.1:9477"), "{}", d.text());
    assert!(!d.text().contains("reachable from the network"));
    let (status, _, body) = get(&lab.ns, "/healthz", None);
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    assert_eq!(get(&lab.ns, "/", None).0, 200);
    assert_eq!(get(&lab.ns, "/nope", None).0, 404);
    let s = scrape(&lab.ns);
    assert_eq!(one(&s, "roce_observer_interval_seconds", &[]), 10.0);
    assert_eq!(
        one(
            &s,
            "roce_observer_info",
            &[("mode", "host"), ("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
    assert!(!log.contains("DEBUG"), "{log}");
    // The level from the environment: debug lines (the drains).
    let d = Daemon::start_env(&lab.ns, &["-i", "rx0"], false, Some("debug"));
    d.wait_log("DEBUG drained", 0);
    // SIGTERM right after the start (handlers are set before attaching): a clean exit.
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
    let d = Daemon::start(&lab.ns, &["-i", "rx0", "--listen", "0.0.0.0:9477"], false);
    assert!(
        d.text()
            .contains("the metrics endpoint is reachable from the network and unauthenticated"),
        "{}",
        d.text()
    );
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
}

#[test]
fn mirror_mode_counts_erspan_copies_per_session() {
    if !require_root("mirror_mode_counts_erspan_copies_per_session") {
        return;
    }
    use roce_observer::source::synth::Encap;
    let lab = lab("ro-sidemirror");
    let promiscuous = || integration_tests::link_details(&lab.ns, "rx0").contains("promiscuity 1");
    assert!(!promiscuous());
    let w = synth::scenario("loss").unwrap();
    let mut copies = w.clone();
    for f in &mut copies.frames {
        f.bytes = synth::encapsulate(
            &f.bytes,
            Encap::ErspanII {
                session: 42,
                truncated: false,
            },
        );
    }
    let d = Daemon::start(
        &lab.ns,
        &[
            "-i",
            "rx0",
            "--mode",
            "mirror",
            "--interval",
            "500ms",
            "--max-series",
            "100",
        ],
        false,
    );
    assert!(promiscuous());
    send_on(&lab.ns, Lab::TX, &copies);
    let s = wait_drains(&lab.ns, 3.0);
    assert_eq!(one(&s, "roce_observer_info", &[("mode", "mirror")]), 1.0);
    let packets: u64 = w.truth.flows.values().map(|f| f.packets).sum();
    assert_eq!(
        sample_sum(&s, "roce_packets_total", &[("iface", "rx0")]),
        packets
    );
    // Mirror mode has no TC egress direction.
    assert_eq!(
        s.iter()
            .filter(|x| x.name == "roce_packets_total" && x.labels["dir"] == "tx")
            .count(),
        0
    );
    // Every flow has its own series (fewer than --max-series), labelled with the session.
    assert_eq!(
        sample_sum(&s, "roce_qp_packets_total", &[("mirror", "erspan-42")]),
        packets
    );
    assert_eq!(
        sample_sum(&s, "roce_qp_psn_gaps_total", &[]),
        w.truth.flows.values().map(|f| f.psn_gaps).sum::<u64>()
    );
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
    assert!(!promiscuous());
}

/// Passive latency in the sidecar: WRITEs answered by ACKs and READs by their response, each
/// answer sent 3 ms after its request (the generator sleeps, then spins to the due time, and
/// times what it kept). The scrape, parsed by the OpenMetrics parser, has the ACK and READ
/// histograms of rx0: every pair counted, none below 2.1 ms, as many below 4.2 ms as the
/// generator's windows say, the sums the generator's; the same counts per queue pair on the
/// requester's series; one connection.
#[test]
fn latency_histograms_are_exported() {
    if !require_root("latency_histograms_are_exported") {
        return;
    }
    let lab = lab("ro-sidelat");
    let d = Daemon::start(
        &lab.ns,
        &["-i", "rx0", "--interval", "500ms", "--max-series", "10"],
        false,
    );
    let ip = Ip::v4(
        std::net::Ipv4Addr::new(198, 18, 0, 1),
        std::net::Ipv4Addr::new(198, 18, 0, 2),
    );
    let mut qp = QpStream::new(
        wire::TRANSPORT_RC,
        ip,
        [host_mac(1), host_mac(2)],
        [0x11, 0x22],
        7,
    );
    let mut w = Workload::default();
    let n = 20;
    for _ in 0..n {
        let psn = qp.write(&mut w, 256);
        qp.ack(&mut w, psn);
        qp.read(&mut w, 256);
    }
    assert_eq!(w.frames.len(), 4 * n);
    let frames = w.frames.clone();
    let delay = Duration::from_millis(3);
    // Per pair (ACK, READ alternating), the generator's window around the delay it kept.
    let windows: Vec<(u64, u64)> = lab
        .ns
        .run_in(move || {
            roce_observer::lab::pin_current_thread().unwrap();
            let sock = synth::PacketSocket::open(Lab::TX).unwrap();
            let mut windows = Vec::new();
            for (i, pair) in frames.chunks(2).enumerate() {
                let t0 = Instant::now();
                sock.send(&pair[0].bytes, 2 * i).unwrap();
                let t1 = Instant::now();
                let due = t1 + delay;
                std::thread::sleep(delay - Duration::from_micros(300));
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
                let t2 = Instant::now();
                sock.send(&pair[1].bytes, 2 * i + 1).unwrap();
                windows.push(((t2 - t1).as_secs_f64(), (Instant::now() - t0).as_secs_f64()));
            }
            windows
                .into_iter()
                .map(|(a, b)| ((a * 1e9) as u64, (b * 1e9) as u64))
                .collect()
        })
        .unwrap();
    let s = wait_drains(&lab.ns, 2.0);
    let side = [("iface", "rx0"), ("side", "requests_in")];
    // The two sends' paths to the observer differ by microseconds.
    const SLACK: u64 = 300_000;
    const EDGE: u64 = 4_194_304;
    for (k, kind) in ["ack", "read"].into_iter().enumerate() {
        let mine = windows.iter().skip(k).step_by(2);
        let surely_below = mine.clone().filter(|(_, hi)| hi + SLACK < EDGE).count() as f64;
        let maybe_below = mine.clone().filter(|(lo, _)| *lo < EDGE + SLACK).count() as f64;
        let family = format!("roce_{kind}_latency_seconds");
        assert_eq!(
            sample_sum(&s, &format!("{family}_count"), &side),
            n as u64,
            "{kind}"
        );
        let bucket = |le: &str| {
            one(
                &s,
                &format!("{family}_bucket"),
                &[side[0], side[1], ("le", le)],
            )
        };
        assert_eq!(bucket("0.002097152"), 0.0, "{kind}: none below 2.1 ms");
        let below = bucket("0.004194304");
        assert!(
            (surely_below..=maybe_below).contains(&below),
            "{kind}: {below} below 4.2 ms, the generator's {surely_below}..{maybe_below}"
        );
        assert_eq!(bucket("+Inf"), n as f64);
        let want: u64 = mine.map(|(lo, hi)| (lo + hi) / 2).sum();
        let got = (one(&s, &format!("{family}_sum"), &side) * 1e9) as u64;
        assert!(
            got.abs_diff(want) <= n as u64 * SLACK,
            "{kind}: sum {got} ns, the generator's {want}"
        );
        // The requester's flow (to QP 0x22 or 0x11, whichever the requests go to) carries them.
        let qp_count = sample_sum(
            &s,
            &format!("roce_qp_{kind}_latency_seconds_count"),
            &[("src", "198.18.0.1")],
        );
        assert_eq!(qp_count, n as u64, "{kind} per queue pair");
    }
    assert_eq!(one(&s, "roce_observer_connections", &[]), 1.0);
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
}

/// Copies the directory tree `from` to `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// A copied host tree (tests/fixtures/hosts/good/before: mlx5_0 port 1 behind ens1f0np0) the
/// test changes between drains. Files are replaced whole (written beside the tree, then renamed
/// over the old one), so a drain reads each one before or after, never half written.
struct NicTree {
    dir: PathBuf,
    tmp: PathBuf,
}

impl NicTree {
    const PORT: &str = "sys/class/infiniband/mlx5_0/ports/1";
    const IFACE: &str = "ens1f0np0";

    fn copy(scratch: &Scratch) -> Self {
        let dir = scratch.path("tree");
        copy_tree(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hosts/good/before"),
            &dir,
        );
        Self {
            dir,
            tmp: scratch.path("replacement"),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn replace(&self, rel: &str, text: &str) {
        std::fs::write(&self.tmp, text).unwrap();
        std::fs::rename(&self.tmp, self.path(rel)).unwrap();
    }

    fn text(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    /// `hw_counters/NAME` or `counters/NAME` of the port.
    fn counter(&self, sub: &str, name: &str) -> u64 {
        self.text(&format!("{}/{sub}/{name}", Self::PORT))
            .trim()
            .parse()
            .unwrap()
    }

    fn set_counter(&self, sub: &str, name: &str, v: u64) {
        self.replace(&format!("{}/{sub}/{name}", Self::PORT), &format!("{v}\n"));
    }

    fn names(&self, sub: &str) -> std::collections::BTreeSet<String> {
        std::fs::read_dir(self.path(&format!("{}/{sub}", Self::PORT)))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    }

    fn stats_rel() -> String {
        format!("ethtool/{}/statistics", Self::IFACE)
    }

    /// The `ethtool -S` statistics of the netdev.
    fn stats(&self) -> BTreeMap<String, u64> {
        self.text(&Self::stats_rel())
            .lines()
            .skip(1)
            .map(|l| {
                let (k, v) = l.trim().split_once(": ").unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    }

    /// Adds to statistics of the netdev (a new one starts at 0).
    fn add_stats(&self, add: &[(&str, u64)]) {
        let mut stats = self.stats();
        for (k, v) in add {
            *stats.entry(k.to_string()).or_default() += v;
        }
        let mut text = String::from("NIC statistics:\n");
        for (k, v) in stats {
            text.push_str(&format!("     {k}: {v}\n"));
        }
        self.replace(&Self::stats_rel(), &text);
    }

    /// `ethtool -i`'s value of `key`.
    fn driver(&self, key: &str) -> String {
        self.text(&format!("ethtool/{}/driver", Self::IFACE))
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}: ")))
            .unwrap()
            .trim()
            .to_string()
    }
}

/// The value of each sample of `name`, by the value of its label `by`.
fn by_label(samples: &[Sample], name: &str, by: &str) -> BTreeMap<String, f64> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| (s.labels[by].clone(), s.value))
        .collect()
}

/// The NIC side from a copied tree that changes between drains: every counter file of the port
/// is a series starting at 0, and each then adds exactly what the test added, across a 32-bit
/// wrap of out_of_sequence, a reset of a 32-bit Q counter and of a 64-bit port counter; the
/// driver statistics by family (per-priority pauses, pause time in seconds, discards, pause
/// storms, the other RoCE-health ones; none of the others); the info and configuration gauges
/// equal the tree's files; a source the tree loses is 0 with its reason logged once.
#[test]
fn nic_side_from_a_changing_tree() {
    if !require_root("nic_side_from_a_changing_tree") {
        return;
    }
    const HW: &str = "hw_counters";
    const IBTA: &str = "counters";
    let lab = lab("ro-sidenic");
    let scratch = Scratch::new("sidenic");
    let tree = NicTree::copy(&scratch);
    // In the upper half of the 32-bit range: going to a small value is a wrap.
    tree.set_counter(HW, "out_of_sequence", 0xFFFF_FFF0);
    tree.set_counter(HW, "local_ack_timeout_err", 5000);
    // mlx5's per-priority discards, which the fixture lacks.
    let discards: Vec<String> = (0..8).map(|p| format!("rx_prio{p}_discards")).collect();
    tree.add_stats(
        &discards
            .iter()
            .map(|d| (d.as_str(), 100))
            .collect::<Vec<_>>(),
    );
    let config = scratch.file(
        "run.toml",
        &format!(
            "iface = [\"rx0\"]\ninterval = \"300ms\"\nrdma_devices = [\"mlx5_0\"]\nnic_root = \"{}\"\n",
            tree.dir.display()
        ),
    );
    let d = Daemon::start(&lab.ns, &["--config", config.to_str().unwrap()], false);
    let iface = [("iface", NicTree::IFACE)];
    let s = wait_drains(&lab.ns, 2.0);

    // Every counter file is a series, starting at 0 (the IBTA ones node_exporter names under
    // its names: the fixture has only those).
    let ibta: Vec<String> = tree.names(IBTA).into_iter().collect();
    assert!(
        ibta.iter()
            .all(|f| observer_daemon::openmetrics::INFINIBAND_COUNTERS
                .iter()
                .any(|(file, _)| file == f)),
        "{ibta:?}"
    );
    for (file, name) in observer_daemon::openmetrics::INFINIBAND_COUNTERS {
        let family = if file.ends_with("_data") {
            format!("roce_nic_infiniband_{name}_bytes_total")
        } else {
            format!("roce_nic_infiniband_{name}_total")
        };
        let series: Vec<&Sample> = s.iter().filter(|x| x.name == family).collect();
        if ibta.iter().any(|f| f == file) {
            assert_eq!(series.len(), 1, "{family}");
            assert_eq!(series[0].value, 0.0, "{family}");
            assert_eq!(series[0].labels["device"], "mlx5_0");
            assert_eq!(series[0].labels["port"], "1");
        } else {
            assert!(series.is_empty(), "{family}");
        }
    }
    for (family, sub) in [("roce_nic_rdma_stat_total", HW)] {
        let got = by_label(&s, family, "counter");
        let names: Vec<&String> = got.keys().collect();
        assert_eq!(
            names,
            tree.names(sub).iter().collect::<Vec<_>>(),
            "{family}"
        );
        assert!(got.values().all(|v| *v == 0.0), "{family}: {got:?}");
        for x in s.iter().filter(|x| x.name == family) {
            assert_eq!(
                (&x.labels["device"][..], &x.labels["port"][..]),
                ("mlx5_0", "1")
            );
        }
    }
    // Per priority and direction, from the statistics the tree has; nothing else.
    let stats = tree.stats();
    let count = |pred: &dyn Fn(&str) -> bool| stats.keys().filter(|k| pred(k)).count();
    let is_prio = |k: &str, what: &str| {
        (k.starts_with("rx_prio") || k.starts_with("tx_prio"))
            && k[7..].split_once('_').map(|x| x.1) == Some(what)
    };
    for (family, n) in [
        (
            "roce_nic_pfc_pause_frames_total",
            count(&|k| is_prio(k, "pause")),
        ),
        (
            "roce_nic_pfc_pause_seconds_total",
            count(&|k| is_prio(k, "pause_duration")),
        ),
        (
            "roce_nic_priority_discards_total",
            count(&|k| k.starts_with("rx_prio") && is_prio(k, "discards")),
        ),
        (
            "roce_nic_class_discards_total",
            count(&|k| {
                k.starts_with("rx_prio")
                    && (is_prio(k, "buf_discard") || is_prio(k, "cong_discard"))
            }),
        ),
        ("roce_nic_pause_storm_events_total", 2),
        (
            "roce_nic_driver_stat_total",
            count(&|k| {
                [
                    "rx_discards_phy",
                    "rx_vport_rdma_unicast_packets",
                    "tx_vport_rdma_unicast_packets",
                    "rx_crc_errors_phy",
                    "rx_symbol_err_phy",
                ]
                .contains(&k)
            }),
        ),
    ] {
        let series: Vec<&Sample> = s.iter().filter(|x| x.name == family).collect();
        assert_eq!(series.len(), n, "{family}: {series:?}");
        assert!(
            series
                .iter()
                .all(|x| x.value == 0.0 && x.labels["iface"] == NicTree::IFACE)
        );
    }
    assert_eq!(count(&|k| is_prio(k, "pause")), 16);
    // The info and the configuration: the tree's own files.
    let firmware = tree.text("sys/class/infiniband/mlx5_0/fw_ver");
    assert_eq!(
        one(
            &s,
            "roce_nic_info",
            &[
                ("iface", NicTree::IFACE),
                ("device", "mlx5_0"),
                ("driver", &tree.driver("driver")),
                ("version", &tree.driver("version")),
                ("firmware", firmware.trim()),
                (
                    "model",
                    tree.text("sys/class/infiniband/mlx5_0/hca_type").trim(),
                ),
                ("bus", &tree.driver("bus-info")),
            ]
        ),
        1.0
    );
    assert_eq!(s.iter().filter(|x| x.name == "roce_nic_info").count(), 1);
    let mtu: f64 = tree
        .text(&format!("sys/class/net/{}/mtu", NicTree::IFACE))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(one(&s, "roce_nic_mtu_bytes", &iface), mtu);
    let dcb: serde_json::Value =
        serde_json::from_str(&tree.text(&format!("dcb/{}.json", NicTree::IFACE))).unwrap();
    let pfc = dcb["pfc_enabled"].as_u64().unwrap();
    for p in 0..8u64 {
        let prio = p.to_string();
        assert_eq!(
            one(&s, "roce_nic_pfc_enabled", &[iface[0], ("priority", &prio)]),
            ((pfc >> p) & 1) as f64,
            "PFC on priority {p}"
        );
        for point in ["np", "rp"] {
            let enabled: f64 = tree
                .text(&format!(
                    "sys/class/net/{}/ecn/roce_{point}/enable/{p}",
                    NicTree::IFACE
                ))
                .trim()
                .parse()
                .unwrap();
            assert_eq!(
                one(
                    &s,
                    "roce_nic_dcqcn_enabled",
                    &[iface[0], ("priority", &prio), ("point", point)]
                ),
                enabled
            );
        }
    }
    for (source, subject) in [
        ("rdma", ""),
        ("driver", NicTree::IFACE),
        ("stats", NicTree::IFACE),
        ("dcb", NicTree::IFACE),
        ("dcqcn", NicTree::IFACE),
    ] {
        assert_eq!(
            one(
                &s,
                "roce_nic_source_up",
                &[("source", source), ("subject", subject)]
            ),
            1.0,
            "{source} {subject}"
        );
    }

    // Known increments, drain after drain.
    let oos = |s: &[Sample]| {
        one(
            s,
            "roce_nic_rdma_stat_total",
            &[("counter", "out_of_sequence")],
        )
    };
    let hw = |s: &[Sample], c: &str| one(s, "roce_nic_rdma_stat_total", &[("counter", c)]);
    let prio3 = |s: &[Sample], family: &str, dir: &str| {
        one(s, family, &[iface[0], ("priority", "3"), ("dir", dir)])
    };
    let cnp = tree.counter(HW, "np_cnp_sent");
    tree.set_counter(HW, "out_of_sequence", 0x10);
    tree.set_counter(HW, "np_cnp_sent", cnp + 123);
    tree.set_counter(HW, "local_ack_timeout_err", 3);
    tree.set_counter(IBTA, "port_rcv_data", 500);
    tree.add_stats(&[
        ("rx_prio3_pause", 7),
        ("tx_prio3_pause", 2),
        ("rx_prio3_pause_duration", 2_500_000),
        ("rx_prio3_cong_discard", 4),
        ("rx_prio3_discards", 5),
        ("tx_pause_storm_error_events", 1),
        ("rx_discards_phy", 9),
        ("rx_prio3_bytes", 999),
    ]);
    let s = wait_drains(&lab.ns, 2.0);
    assert_eq!(oos(&s), 32.0, "0xfffffff0 to 0x10 wraps: 32");
    assert_eq!(hw(&s, "np_cnp_sent"), 123.0);
    assert_eq!(hw(&s, "local_ack_timeout_err"), 3.0, "reset: 3 since");
    assert_eq!(
        one(
            &s,
            "roce_nic_infiniband_port_data_received_bytes_total",
            &[]
        ),
        2000.0,
        "a 64-bit counter going back was reset: 500 words since, in bytes"
    );
    assert_eq!(prio3(&s, "roce_nic_pfc_pause_frames_total", "rx"), 7.0);
    assert_eq!(prio3(&s, "roce_nic_pfc_pause_frames_total", "tx"), 2.0);
    assert!((prio3(&s, "roce_nic_pfc_pause_seconds_total", "rx") - 2.5).abs() < 1e-9);
    assert_eq!(
        one(
            &s,
            "roce_nic_class_discards_total",
            &[iface[0], ("class", "3"), ("kind", "cong_discard")]
        ),
        4.0
    );
    assert_eq!(
        one(
            &s,
            "roce_nic_priority_discards_total",
            &[iface[0], ("priority", "3")]
        ),
        5.0
    );
    assert_eq!(
        one(
            &s,
            "roce_nic_pause_storm_events_total",
            &[iface[0], ("level", "error")]
        ),
        1.0
    );
    assert_eq!(
        one(
            &s,
            "roce_nic_driver_stat_total",
            &[iface[0], ("counter", "rx_discards_phy")]
        ),
        9.0
    );
    assert!(
        !s.iter()
            .any(|x| x.labels.values().any(|v| v == "rx_prio3_bytes"))
    );

    tree.set_counter(HW, "out_of_sequence", 0x30);
    tree.set_counter(HW, "np_cnp_sent", cnp + 200);
    tree.set_counter(IBTA, "port_rcv_data", 800);
    tree.add_stats(&[("rx_prio3_pause", 3), ("tx_pause_storm_error_events", 1)]);
    let s = wait_drains(&lab.ns, 2.0);
    assert_eq!(oos(&s), 64.0);
    assert_eq!(hw(&s, "np_cnp_sent"), 200.0);
    assert_eq!(hw(&s, "local_ack_timeout_err"), 3.0);
    assert_eq!(
        one(
            &s,
            "roce_nic_infiniband_port_data_received_bytes_total",
            &[]
        ),
        3200.0
    );
    assert_eq!(prio3(&s, "roce_nic_pfc_pause_frames_total", "rx"), 10.0);
    assert_eq!(
        one(
            &s,
            "roce_nic_pause_storm_events_total",
            &[iface[0], ("level", "error")]
        ),
        2.0
    );
    // Nothing else moved.
    assert_eq!(
        sample_sum(&s, "roce_nic_rdma_stat_total", &[]),
        64 + 200 + 3
    );
    assert_eq!(
        sample_sum(
            &s,
            "roce_nic_infiniband_port_data_received_bytes_total",
            &[]
        ),
        3200
    );
    assert_eq!(
        one(&s, "roce_nic_ethtool_info", &[("device", NicTree::IFACE)]),
        1.0
    );
    assert_eq!(sample_sum(&s, "roce_nic_pfc_pause_frames_total", &[]), 12);
    assert_eq!(sample_sum(&s, "roce_nic_priority_discards_total", &[]), 5);
    assert_eq!(sample_sum(&s, "roce_nic_class_discards_total", &[]), 4);
    // Exactly the documented families, in both formats (parsed, and linted by promtool).
    let names: std::collections::BTreeSet<&str> = s.iter().map(|x| x.name.as_str()).collect();
    let want: std::collections::BTreeSet<&str> = integration_tests::EXPORTED_METRICS
        .iter()
        .chain(integration_tests::NIC_METRICS)
        .copied()
        .collect();
    assert_eq!(names, want);
    let (status, _, text) = get(&lab.ns, "/metrics", None);
    assert_eq!(status, 200);
    assert_eq!(
        sample_sum(
            &parse_exposition(&text, false),
            "roce_nic_rdma_stat_total",
            &[]
        ),
        64 + 200 + 3
    );
    promtool_lint(&text);
    assert!(!d.text().contains("NIC source absent"), "{}", d.text());

    // The tree loses its DCB settings: the source is 0, its reason logged once.
    let dcb_file = tree.path(&format!("dcb/{}.json", NicTree::IFACE));
    std::fs::rename(&dcb_file, scratch.path("dcb.json")).unwrap();
    let s = wait_drains(&lab.ns, 4.0);
    let dcb_up = [("source", "dcb"), ("subject", NicTree::IFACE)];
    assert_eq!(one(&s, "roce_nic_source_up", &dcb_up), 0.0);
    assert_eq!(one(&s, "roce_nic_source_up", &[("source", "stats")]), 1.0);
    assert!(!s.iter().any(|x| x.name == "roce_nic_pfc_enabled"));
    assert_eq!(
        d.text().matches("NIC source absent").count(),
        1,
        "{}",
        d.text()
    );
    assert!(
        d.text().contains("source=dcb subject=ens1f0np0"),
        "{}",
        d.text()
    );
    std::fs::rename(scratch.path("dcb.json"), &dcb_file).unwrap();
    let s = wait_drains(&lab.ns, 2.0);
    assert_eq!(one(&s, "roce_nic_source_up", &dcb_up), 1.0);
    assert!(
        d.text().contains("NIC source readable again"),
        "{}",
        d.text()
    );
    // The counters stand.
    assert_eq!(oos(&s), 64.0);

    // A reload that names no device (none is behind rx0): nothing of the NIC side stays.
    let with_device = std::fs::read_to_string(&config).unwrap();
    scratch.file(
        "run.toml",
        &with_device.replace("rdma_devices = [\"mlx5_0\"]\n", ""),
    );
    let at = d.lines();
    d.signal(libc::SIGHUP);
    d.wait_log("configuration reloaded", at);
    let s = wait_drains(&lab.ns, 2.0);
    assert_eq!(
        one(
            &s,
            "roce_nic_source_up",
            &[("source", "rdma"), ("subject", "")]
        ),
        0.0
    );
    let nic: Vec<&str> = s
        .iter()
        .map(|x| x.name.as_str())
        .filter(|n| integration_tests::NIC_METRICS.contains(n))
        .collect();
    assert!(nic.is_empty(), "{nic:?}");
    assert!(
        d.text()
            .contains("no RDMA device named (rdma_devices) or behind rx0")
    );
    // Named again: its counters start over.
    scratch.file("run.toml", &with_device);
    let at = d.lines();
    d.signal(libc::SIGHUP);
    d.wait_log("configuration reloaded", at);
    let s = wait_drains(&lab.ns, 2.0);
    assert_eq!(oos(&s), 0.0);
    assert_eq!(one(&s, "roce_nic_source_up", &[("source", "rdma")]), 1.0);
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
    assert!(!log.contains("ERROR"), "{log}");
}

/// The effective capabilities and the real uid of process `pid`.
fn caps_and_uid(pid: u32) -> (u64, u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    (
        u64::from_str_radix(&field("CapEff:"), 16).unwrap(),
        field("Uid:").parse().unwrap(),
    )
}

/// Whatever is attached to `dev` in `ns` (XDP, TC programs): ip's and tc's own words.
fn attached_programs(ns: &Netns, dev: &str) -> String {
    let (_, link, _) = output(ns.command("ip").args(["-d", "link", "show", "dev", dev]));
    let mut found: Vec<String> = link
        .lines()
        .filter(|l| l.contains("xdp") || l.contains("prog/"))
        .map(str::to_string)
        .collect();
    for dir in ["ingress", "egress"] {
        let (_, tc, _) = output(ns.command("tc").args(["filter", "show", "dev", dev, dir]));
        found.extend(
            tc.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string),
        );
    }
    found.join("\n")
}

/// The NIC side alone (`rdma_devices` and no interface): as `nobody` with no capability at all,
/// nothing is attached anywhere, no wire family is exported (not even at 0), and every counter,
/// setting and the QP table of the tree are, following the tree's changes; promtool lints the
/// text. Then live, `--netdev` of a veth: its driver information and statistics are read as
/// nobody without capabilities (the SIOCETHTOOL reads need none), DCB absent and said so.
#[test]
fn nic_only_sidecar_attaches_nothing_and_needs_no_capability() {
    if !require_root("nic_only_sidecar_attaches_nothing_and_needs_no_capability") {
        return;
    }
    const HW: &str = "hw_counters";
    let lab = lab("ro-nicalone");
    let scratch = Scratch::new("nicalone");
    let tree = NicTree::copy(&scratch);
    // The QP's process: rank 5 of a torchrun job.
    std::fs::create_dir_all(tree.path("proc/4242")).unwrap();
    std::fs::write(
        tree.path("proc/4242/environ"),
        "RANK=5\0TORCHELASTIC_RUN_ID=r1\0",
    )
    .unwrap();
    let config = scratch.file(
        "run.toml",
        &format!(
            "rdma_devices = [\"mlx5_0\"]\ninterval = \"300ms\"\nnic_root = \"{}\"\n",
            tree.dir.display()
        ),
    );
    let d = Daemon::spawn(
        as_nobody(&lab.ns, "-all"),
        &["--config", config.to_str().unwrap()],
        None,
    );
    assert_eq!(caps_and_uid(d.pid()), (0, 65534), "nobody, no capability");
    let s = wait_drains(&lab.ns, 2.0);
    let names: std::collections::BTreeSet<&str> = s.iter().map(|x| x.name.as_str()).collect();
    let want: std::collections::BTreeSet<&str> = integration_tests::NIC_ONLY_METRICS
        .iter()
        .chain(integration_tests::NIC_METRICS)
        .copied()
        .filter(|n| *n != "roce_nic_priority_discards_total")
        .collect();
    assert_eq!(names, want);
    assert_eq!(one(&s, "roce_observer_info", &[("mode", "nic")]), 1.0);
    for dev in ["lo", "rx0", "tx0"] {
        assert_eq!(attached_programs(&lab.ns, dev), "", "{dev}");
    }
    // The QP table, counted per process.
    let qps: serde_json::Value = serde_json::from_str(&tree.text("rdma/qps.json")).unwrap();
    let q = &qps[0];
    assert_eq!(
        one(
            &s,
            "roce_nic_queue_pairs",
            &[
                ("device", q["ifname"].as_str().unwrap()),
                ("state", q["state"].as_str().unwrap()),
                ("pid", &q["pid"].to_string()),
                ("comm", q["comm"].as_str().unwrap()),
                ("training_job", "torchelastic:r1"),
                ("rank", "5"),
            ]
        ),
        qps.as_array().unwrap().len() as f64
    );
    assert_eq!(one(&s, "roce_nic_source_up", &[("source", "qps")]), 1.0);
    // The module's diagnostics, in base units (the generator's: 45.5 °C, lane 2 at 0.90 mW in
    // and 7.8 mA of bias).
    assert_eq!(one(&s, "roce_nic_source_up", &[("source", "module")]), 1.0);
    assert_eq!(one(&s, "roce_nic_module_temperature_celsius", &[]), 45.5);
    let near = |a: f64, b: f64| assert!((a - b).abs() < b * 1e-6, "{a} vs {b}");
    near(
        one(&s, "roce_nic_module_rx_power_watts", &[("lane", "2")]),
        0.90e-3,
    );
    near(
        one(&s, "roce_nic_module_tx_bias_amperes", &[("lane", "2")]),
        7.8e-3,
    );
    assert_eq!(
        one(
            &s,
            "roce_nic_module_info",
            &[
                ("part", "MMA1T00-VS"),
                ("module", "QSFP+ or later (CMIS 5.0)")
            ]
        ),
        1.0
    );
    // Counters follow the tree.
    let cnp = tree.counter(HW, "np_cnp_sent");
    tree.set_counter(HW, "np_cnp_sent", cnp + 41);
    tree.add_stats(&[("rx_prio3_pause", 6), ("rx_discards_phy", 2)]);
    let s = wait_drains(&lab.ns, 2.0);
    assert_eq!(
        one(
            &s,
            "roce_nic_rdma_stat_total",
            &[("counter", "np_cnp_sent")]
        ),
        41.0
    );
    assert_eq!(
        one(
            &s,
            "roce_nic_pfc_pause_frames_total",
            &[("priority", "3"), ("dir", "rx")]
        ),
        6.0
    );
    assert_eq!(
        one(
            &s,
            "roce_nic_driver_stat_total",
            &[("counter", "rx_discards_phy")]
        ),
        2.0
    );
    let (status, _, text) = get(&lab.ns, "/metrics", None);
    assert_eq!(status, 200);
    promtool_lint(&text);
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
    assert!(
        log.contains("the NIC side alone, nothing attached"),
        "{log}"
    );
    assert!(!log.contains("ERROR") && !log.contains("WARN"), "{log}");

    // Live: a veth's driver side, named with --netdev.
    let d = Daemon::spawn(
        as_nobody(&lab.ns, "-all"),
        &["--netdev", "rx0", "--interval", "300ms"],
        None,
    );
    assert_eq!(caps_and_uid(d.pid()).0, 0);
    let s = wait_drains(&lab.ns, 2.0);
    // A veth has no module; and nobody may not read one: the kernel refuses before asking the
    // driver (CAP_NET_ADMIN), and the log says so.
    for (source, up) in [
        ("driver", 1.0),
        ("stats", 1.0),
        ("dcb", 0.0),
        ("module", 0.0),
    ] {
        assert_eq!(
            one(
                &s,
                "roce_nic_source_up",
                &[("source", source), ("subject", "rx0")]
            ),
            up,
            "{source}"
        );
    }
    assert_eq!(
        one(&s, "roce_nic_info", &[("iface", "rx0")]),
        1.0,
        "ethtool -i of a veth"
    );
    assert_eq!(attached_programs(&lab.ns, "rx0"), "");
    d.wait_log("reading a module's EEPROM needs CAP_NET_ADMIN", 0);
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
}

/// `run` and `diagnose` on one interface at once: the sidecar holds rx0's XDP hook; diagnose
/// sees it is roce-observer's own, observes at TC ingress instead and says so (never asking to
/// detach the sidecar); traffic sent while both watch is counted exactly by each: the sidecar's
/// scrape against the generator's truth, and diagnose's totals and every flow's packets and
/// bytes. The sidecar goes on unharmed after diagnose detaches.
#[test]
fn run_and_diagnose_on_one_interface_both_exact() {
    if !require_root("run_and_diagnose_on_one_interface_both_exact") {
        return;
    }
    let lab = lab("ro-beside");
    let d = Daemon::start(&lab.ns, &["--iface", "rx0", "--interval", "300ms"], false);
    let mut diag = lab
        .ns
        .command(CLI)
        .args(["diagnose", "-i", "rx0", "--duration", "4s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for its attached line before sending.
    let mut stderr = BufReader::new(diag.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(
        line.contains("roce-observer: attached")
            && line.contains("at TC ingress on rx0, beside the running sidecar's XDP program"),
        "{line}"
    );
    // The traffic without its three-VLAN-tag noise frame: TC sees frames with the outer tag
    // taken out by the kernel (the report says so), which makes it a RoCE packet there.
    let mut traffic = Traffic::new();
    let mut sent = Sent::default();
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        let mut w = traffic.next();
        let before = w.frames.len();
        w.frames
            .retain(|f| f.bytes[12..14] != wire::ETHERTYPE_QINQ.to_be_bytes());
        w.truth.counters.skipped[SkipReason::TooManyVlanTags as usize] -=
            (before - w.frames.len()) as u64;
        send_on(&lab.ns, Lab::TX, &w);
        sent.add(&w);
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = diag.wait_with_output().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(out.status.success(), "{line}{rest}");
    assert!(!rest.contains("xdp off"), "{rest}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &r["totals"];
    // The veth carries the kernel's own frames too (IPv6 neighbour discovery): at least ours.
    assert!(t["frames"].as_u64().unwrap() >= sent.frames, "{t}");
    assert_eq!(
        t["roce_packets"].as_u64().unwrap(),
        sent.total(|s| s.packets)
    );
    assert_eq!(t["roce_bytes"].as_u64().unwrap(), sent.total(|s| s.bytes));
    let flows = r["flows"].as_array().unwrap();
    assert_eq!(flows.len(), sent.flows.len());
    for (k, truth) in &sent.flows {
        let src = roce_observer::model::ip_of(k.src_ip).to_string();
        let f = flows
            .iter()
            .find(|f| f["dest_qp"] == k.dest_qp && f["src_ip"] == src.as_str())
            .unwrap_or_else(|| panic!("no flow {src} qp {:#x}", k.dest_qp));
        assert_eq!(f["packets"].as_u64().unwrap(), truth.packets, "{f}");
        assert_eq!(f["bytes"].as_u64().unwrap(), truth.bytes, "{f}");
    }
    let warnings = r["source"]["warnings"].to_string();
    assert!(
        warnings.contains("rx0 observed at TC ingress"),
        "{warnings}"
    );
    // The sidecar: exact, still attached after diagnose left.
    let s = wait_drains(&lab.ns, 2.0);
    check_against(&s, &sent, 100);
    assert_eq!(
        one(&s, "roce_observer_interface_attached", &[("iface", "rx0")]),
        1.0
    );
    assert!(attached_programs(&lab.ns, "rx0").contains("xdp"));
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
}

/// `diagnose` with the NIC side alone (`--netdev` of a veth, no interface): as `nobody` with no
/// capability, nothing attached while it reads; the report says the wire is not observed (no
/// wire rule judges it, not even as "too little"), holds the netdev's NIC side over the
/// duration, and says why DCB is absent; XDP settings without an interface are refused.
#[test]
fn diagnose_the_nic_side_alone_as_nobody() {
    if !require_root("diagnose_the_nic_side_alone_as_nobody") {
        return;
    }
    let lab = lab("ro-diagnic");
    let child = as_nobody(&lab.ns, "-all")
        .args(["diagnose", "--netdev", "rx0", "--duration", "2s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(caps_and_uid(child.id()), (0, 65534));
    for dev in ["rx0", "tx0"] {
        assert_eq!(attached_programs(&lab.ns, dev), "", "{dev}");
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("attached to nothing"), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["source"]["kind"], "nic");
    assert_eq!(r["source"]["interfaces"], serde_json::json!(["rx0"]));
    let seconds = r["nic"]["seconds"].as_f64().unwrap();
    assert!((1.9..10.0).contains(&seconds), "{seconds}");
    assert_eq!(r["nic"]["interfaces"][0]["name"], "rx0");
    let absent = r["nic"]["absent"].as_array().unwrap();
    assert!(
        absent
            .iter()
            .any(|a| a["source"] == "dcb" && a["subject"] == "rx0"),
        "{absent:?}"
    );
    assert_eq!(r["findings"], serde_json::json!([]));
    for c in r["checks"].as_array().unwrap() {
        let rule = c["rule"].as_str().unwrap();
        if rule.starts_with("nic-") && rule != "nic-wire-mismatch" {
            assert_ne!(c["status"], "skipped", "{c}");
        } else {
            assert_eq!(c["status"], "skipped", "{c}");
            assert_eq!(c["note"], "the wire is not observed (the NIC side alone)");
        }
    }
    let (status, _, err) =
        output(
            lab.ns
                .command(CLI)
                .args(["diagnose", "--netdev", "rx0", "--xdp-mode", "skb"]),
        );
    assert_eq!(status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim(),
        "roce-observer: error: --xdp-mode needs --iface: the NIC side alone (--rdma-dev, --netdev) attaches nothing"
    );
}

/// PAUSE / PFC frames on the wire (the pfc scenario: a storm on priority 3, PFC on 3 and 4
/// from a second sender, 802.3x PAUSE from a NIC) sent twice: per sender and class the frames,
/// XON frames and quanta equal the generator's counts, the seconds those quanta at the veth's
/// own speed; one series per sender and class that had frames.
#[test]
fn pfc_frames_on_the_wire_per_sender_and_priority() {
    if !require_root("pfc_frames_on_the_wire_per_sender_and_priority") {
        return;
    }
    use observer_common::{LINK_PAUSE, PAUSE_CLASSES};
    let lab = lab("ro-sidepfc");
    let d = Daemon::start(&lab.ns, &["-i", "rx0", "--interval", "300ms"], false);
    let (status, speed, _) = output(lab.ns.command("cat").arg("/sys/class/net/rx0/speed"));
    assert!(status.success());
    let bps = speed.trim().parse::<f64>().unwrap() * 1e6;
    let w = synth::scenario("pfc").unwrap();
    assert_eq!(w.truth.pauses.len(), synth::PFC_SENDERS.len());
    for round in 1..=2u64 {
        send_on(&lab.ns, Lab::TX, &w);
        let s = wait_drains(&lab.ns, 2.0);
        let mut series = 0;
        for (key, truth) in &w.truth.pauses {
            assert_eq!(key.mirror, 0);
            let m = key.src_mac;
            let mac = format!(
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            );
            for c in (0..PAUSE_CLASSES).filter(|c| truth.frames[*c] > 0) {
                series += 1;
                let priority = if c == LINK_PAUSE {
                    "link".to_string()
                } else {
                    c.to_string()
                };
                let l = [
                    ("src_mac", mac.as_str()),
                    ("priority", priority.as_str()),
                    ("dir", "rx"),
                    ("mirror", ""),
                ];
                let at = format!("round {round}: {l:?}");
                assert_eq!(
                    one(&s, "roce_pfc_frames_total", &l),
                    (round * truth.frames[c]) as f64,
                    "{at}"
                );
                assert_eq!(
                    one(&s, "roce_pfc_xon_frames_total", &l),
                    (round * truth.xon[c]) as f64,
                    "{at}"
                );
                assert_eq!(
                    one(&s, "roce_pfc_pause_quanta_total", &l),
                    (round * truth.quanta[c]) as f64,
                    "{at}"
                );
                let want = (round * truth.quanta[c]) as f64 * 512.0 / bps;
                let got = one(&s, "roce_pfc_pause_seconds_total", &l);
                assert!(
                    (got - want).abs() <= want * 1e-9,
                    "{at}: {got} s, want {want}"
                );
            }
        }
        for family in ["roce_pfc_frames_total", "roce_pfc_pause_quanta_total"] {
            assert_eq!(
                s.iter().filter(|x| x.name == family).count(),
                series,
                "{family}"
            );
        }
        if round == 2 {
            let names: std::collections::BTreeSet<&str> =
                s.iter().map(|x| x.name.as_str()).collect();
            for n in integration_tests::PFC_METRICS {
                assert!(names.contains(n), "{n}");
            }
            // No RDMA device behind rx0: the NIC side is an absent source, said once.
            assert_eq!(
                one(
                    &s,
                    "roce_nic_source_up",
                    &[("source", "rdma"), ("subject", "")]
                ),
                0.0
            );
            assert!(
                !names
                    .iter()
                    .any(|n| integration_tests::NIC_METRICS.contains(n))
            );
        }
    }
    let (status, log) = d.stop();
    assert!(status.success(), "{log}");
    assert_eq!(log.matches("NIC source absent").count(), 1, "{log}");
}

/// The kernel memory of the maps (`roce_observer_kernel_map_memory_bytes`, per map) is the
/// kernel's own accounting: each map's `memlock` in the daemon's fdinfo, read here. The flow
/// table, its cache and its log are named, and the model of that accounting (what grows with
/// the possible CPUs) gives the kernel's total on this host within 1%.
#[test]
fn the_maps_kernel_memory_is_the_kernels_accounting() {
    if !require_root("the_maps_kernel_memory_is_the_kernels_accounting") {
        return;
    }
    let lab = lab("ro-sidemem");
    let d = Daemon::start(&lab.ns, &["-i", "rx0", "--interval", "500ms"], false);
    let samples = wait_drains(&lab.ns, 1.0);
    let by_map = by_label(&samples, "roce_observer_kernel_map_memory_bytes", "map");
    // The kernel's accounting, read from the daemon's descriptors.
    let mut kernel = BTreeMap::new();
    for entry in std::fs::read_dir(format!("/proc/{}/fdinfo", d.pid())).unwrap() {
        let Ok(text) = std::fs::read_to_string(entry.unwrap().path()) else {
            continue;
        };
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().parse::<u64>().unwrap())
        };
        if let (Some(id), Some(memlock)) = (field("map_id:"), field("memlock:")) {
            kernel.insert(id, memlock);
        }
    }
    let total: u64 = kernel.values().sum();
    assert_eq!(by_map.len(), kernel.len(), "{by_map:?} vs {kernel:?}");
    assert_eq!(by_map.values().sum::<f64>() as u64, total, "{by_map:?}");
    for name in ["FLOWS", "FLOW_CACHE", "FLOW_LOG"] {
        assert!(
            by_map.get(name).is_some_and(|b| *b > 0.0),
            "{name}: {by_map:?}"
        );
    }
    let maps = roce_observer::source::live::memory::open_maps(Some(d.pid())).unwrap();
    let cpus = roce_observer::source::live::bpfsys::possible_cpus().unwrap() as u64;
    let model: u64 = maps.iter().map(|m| m.model(cpus)).sum();
    let ratio = model as f64 / total as f64;
    println!(
        "kernel memory of the maps: {total} B on {cpus} possible CPUs; the model {model} B ({ratio:.4}x)"
    );
    // The model is of the kernel's accounting since Linux 6.4 (each map type's own count).
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release
        .trim()
        .split(['.', '-'])
        .map(|x| x.parse::<u32>().unwrap_or(0));
    if (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 4) {
        assert!((ratio - 1.0).abs() < 0.01, "{ratio}: {maps:#?}");
    } else {
        eprintln!("kernel {release}: memlock is the older estimate, the model not compared");
    }
    d.stop();
}
