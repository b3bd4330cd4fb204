//! The fleet rules in a real Prometheus server (Debian's `prometheus`): three `run` sidecars,
//! one per lab host (network namespace), scraped over a link of their own, with the shipped
//! rules. The query API's fleet aggregates equal what the generator sent, the recording rules
//! are the hosts' sums, and congestion injected on one host fires RoCEFleetCeFraction after
//! its `for:`. The rules' windows are scaled down for the test (5m and 1m rate windows to
//! 10 s, every `for:` to 3 s); their expressions are the shipped ones.

use std::{
    collections::BTreeMap,
    net::{Ipv4Addr, TcpListener},
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use integration_tests::{LoggedChild, Scratch, output, require_root, send_frames, workspace_root};
use observer_common::{FlowKey, FlowStats, OpClass, wire};
use roce_observer::{
    lab::Lab,
    source::synth::{Ip, QpStream, Workload, host_mac},
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");
const HOSTS: usize = 3;
const METRICS_PORT: u16 = 9477;

fn run_ok(cmd: &mut Command) {
    let (status, _, err) = output(cmd);
    assert!(status.success(), "{cmd:?}: {err}");
}

/// Host `i`: a lab namespace, the sidecar in it, and a link from this namespace to it
/// (198.18.200.4i+1 here, +2 there) that Prometheus scrapes it over.
struct Host {
    lab: Lab,
    sidecar: LoggedChild,
    target: String,
}

fn host(i: usize) -> Host {
    let lab = Lab::create(&format!("ro-fleet{i}")).unwrap();
    let (here, there) = (format!("rofm{i}a"), format!("rofm{i}b"));
    let (a, b) = (
        Ipv4Addr::new(198, 18, 200, 4 * i as u8 + 1),
        Ipv4Addr::new(198, 18, 200, 4 * i as u8 + 2),
    );
    let _ = output(Command::new("ip").args(["link", "del", &here]));
    run_ok(Command::new("ip").args([
        "link",
        "add",
        &here,
        "type",
        "veth",
        "peer",
        "name",
        &there,
        "netns",
        lab.ns.name(),
    ]));
    run_ok(Command::new("ip").args(["addr", "add", &format!("{a}/30"), "dev", &here]));
    run_ok(Command::new("ip").args(["link", "set", &here, "up"]));
    for args in [
        vec!["addr", "add", &format!("{b}/30"), "dev", &there],
        vec!["link", "set", &there, "up"],
        vec!["link", "set", "lo", "up"],
    ] {
        run_ok(lab.ns.command("ip").args(&args));
    }
    let listen = format!("{b}:{METRICS_PORT}");
    let mut cmd = lab.ns.command(CLI);
    cmd.args([
        "run",
        "-i",
        Lab::RX,
        "--interval",
        "500ms",
        "--listen",
        &listen,
    ]);
    let sidecar = LoggedChild::spawn(cmd);
    sidecar.wait_log("attached; serving", Duration::from_secs(30));
    Host {
        lab,
        sidecar,
        target: listen,
    }
}

/// One host's traffic: an RC QP writing and acknowledged, CNPs answering its CE marks; each
/// round's truth added to `sent`.
struct Traffic {
    qp: QpStream,
}

impl Traffic {
    fn new(i: usize) -> Self {
        let ip = Ip::v4(
            Ipv4Addr::new(198, 18, 7, 1 + i as u8),
            Ipv4Addr::new(198, 18, 7, 101 + i as u8),
        );
        let qp = QpStream::new(
            wire::TRANSPORT_RC,
            ip,
            [host_mac(0x800 + i as u16), host_mac(0x880 + i as u16)],
            [0x1400 + i as u32, 0x1500 + i as u32],
            0x1000 * i as u32,
        );
        Self { qp }
    }

    fn round(&mut self, ce_every: u32) -> Workload {
        self.qp.ce_every = ce_every;
        let mut w = Workload::default();
        self.qp.write(&mut w, 4096);
        self.qp.cnp_if_marked(&mut w);
        let last = self.qp.last_psn();
        self.qp.ack(&mut w, last);
        w
    }
}

/// A free TCP port on the loopback.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The shipped rules with their windows scaled down: every rate window to 10 s, every `for:`
/// to 3 s.
fn scaled_rules(scratch: &Scratch) -> std::path::PathBuf {
    let text =
        std::fs::read_to_string(workspace_root().join("deploy/prometheus/roce-observer.rules.yml"))
            .unwrap();
    let mut scaled = text.replace("[5m]", "[10s]").replace("[1m]", "[10s]");
    for f in ["for: 10m", "for: 15m", "for: 5m"] {
        scaled = scaled.replace(f, "for: 3s");
    }
    assert!(scaled.contains("for: 3s") && !scaled.contains("[5m]"));
    scratch.file("rules.yml", &scaled)
}

struct Prometheus {
    _proc: LoggedChild,
    port: u16,
}

impl Prometheus {
    fn start(scratch: &Scratch, targets: &[String]) -> Self {
        let rules = scaled_rules(scratch);
        let config = scratch.file(
            "prometheus.yml",
            &format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: roce-observer\n    static_configs:\n      - targets: {:?}\n",
                rules.display(),
                targets
            ),
        );
        let port = free_port();
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                scratch.path("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"));
        let p = Self {
            _proc: LoggedChild::spawn(cmd),
            port,
        };
        p._proc.wait_log(
            "Server is ready to receive web requests",
            Duration::from_secs(30),
        );
        p
    }

    /// GET over HTTP/1.0 (no chunked answer): the JSON body.
    fn get(&self, path_and_query: &str) -> Value {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path_and_query} HTTP/1.0\r\nHost: localhost\r\n\r\n"
        )
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
        assert!(
            head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
            "{path_and_query}: {head}\n{body}"
        );
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{path_and_query}: {e}: {body}"))
    }

    /// An instant query: each series' labels and value.
    fn query(&self, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let q: String = promql
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let v = self.get(&format!("/api/v1/query?query={q}"));
        assert_eq!(v["status"], "success", "{promql}: {v}");
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                let value: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
                (labels, value)
            })
            .collect()
    }

    /// The one value of `promql`, waiting (up to 30 s) until `ok` holds for it.
    fn wait_value(&self, promql: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = self.query(promql);
            if let [(_, v)] = r.as_slice()
                && ok(*v)
            {
                return *v;
            }
            assert!(Instant::now() < deadline, "{promql}: {r:?}");
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The alerts firing, by name.
    fn firing(&self) -> Vec<(String, BTreeMap<String, String>)> {
        let v = self.get("/api/v1/alerts");
        v["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["state"] == "firing")
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap().to_string(),
                    a["labels"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                        .collect(),
                )
            })
            .collect()
    }
}

/// A truth field.
type Field = fn(&FlowStats) -> u64;

fn total(sent: &[BTreeMap<FlowKey, FlowStats>], f: impl Fn(&FlowStats) -> u64) -> u64 {
    sent.iter().flat_map(|h| h.values()).map(f).sum()
}

#[test]
fn fleet_rules_in_a_real_prometheus_equal_the_generators_truth() {
    if !require_root("fleet_rules_in_a_real_prometheus_equal_the_generators_truth") {
        return;
    }
    assert!(
        Path::new("/usr/bin/prometheus").exists()
            || output(Command::new("prometheus").arg("--version"))
                .0
                .success(),
        "prometheus is missing: cargo xtask setup installs it"
    );
    let scratch = Scratch::new("fleet-prometheus");
    let hosts: Vec<Host> = (0..HOSTS).map(host).collect();
    let targets: Vec<String> = hosts.iter().map(|h| h.target.clone()).collect();
    let prometheus = Prometheus::start(&scratch, &targets);
    prometheus.wait_value("count(up == 1)", |v| v == HOSTS as f64);

    // Quiet traffic on every host (no CE), then congestion on the last one: every packet of
    // its QP CE-marked and answered by a CNP.
    let mut traffic: Vec<Traffic> = (0..HOSTS).map(Traffic::new).collect();
    let mut sent: Vec<BTreeMap<FlowKey, FlowStats>> = vec![BTreeMap::new(); HOSTS];
    let mut round = |congested: bool, traffic: &mut Vec<Traffic>| {
        for (i, t) in traffic.iter_mut().enumerate() {
            let ce_every = if congested && i == HOSTS - 1 { 1 } else { 0 };
            let w = t.round(ce_every);
            send_frames(&hosts[i].lab.ns, w.frames.clone());
            for (k, s) in &w.truth.flows {
                sent[i].entry(*k).or_default().merge(s);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let quiet_from = unix_now();
    let quiet_until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < quiet_until {
        round(false, &mut traffic);
    }
    assert!(
        prometheus
            .firing()
            .iter()
            .all(|(n, _)| n != "RoCEFleetCeFraction"),
        "no congestion yet: {:?}",
        prometheus.firing()
    );
    // Congested until the alert fires (its for: 3 s after the fleet share passes 5%).
    let congested_from = unix_now();
    let deadline = Instant::now() + Duration::from_secs(40);
    let fired = loop {
        round(true, &mut traffic);
        let firing = prometheus.firing();
        if let Some((_, labels)) = firing.iter().find(|(n, _)| n == "RoCEFleetCeFraction") {
            break labels.clone();
        }
        assert!(
            Instant::now() < deadline,
            "RoCEFleetCeFraction never fired: {firing:?}"
        );
    };
    assert_eq!(fired["job"], "roce-observer");
    assert_eq!(fired["severity"], "warning");
    // The recording rules while the traffic runs: the fleet's rates are the hosts' sums, and
    // only the congested host has CE marks.
    let hosts_ce = prometheus.query("roce:host_ce_packets:rate5m");
    assert_eq!(hosts_ce.len(), HOSTS, "{hosts_ce:?}");
    let congested = &hosts[HOSTS - 1].target;
    for (labels, v) in &hosts_ce {
        assert_eq!(
            &labels["instance"] == congested,
            *v > 0.0,
            "{labels:?}: {v}"
        );
    }
    let fleet_ce = prometheus
        .query("roce:fleet_ce_packets:rate5m - on(job) sum by (job) (roce:host_ce_packets:rate5m)");
    assert!(
        fleet_ce.iter().all(|(_, v)| v.abs() < 1e-9),
        "the fleet is the hosts' sum: {fleet_ce:?}"
    );

    // Stop, let the sidecars drain and Prometheus scrape: the fleet's counters, summed by the
    // query API, equal what was sent, host by host and over the fleet.
    std::thread::sleep(Duration::from_secs(3));
    let checks: [(&str, Field); 4] = [
        ("roce_packets_total", |s| s.packets),
        ("roce_bytes_total", |s| s.bytes),
        ("roce_ecn_packets_total{ecn=\"ce\"}", |s| s.ecn[3]),
        ("roce_op_packets_total{op=\"cnp\"}", |s| {
            s.ops[OpClass::Cnp as usize]
        }),
    ];
    for (series, field) in checks {
        let want = total(&sent, field);
        assert!(want > 0, "{series}: nothing sent");
        prometheus.wait_value(&format!("sum by (job) ({series})"), |v| v == want as f64);
        let per_host = prometheus.query(&format!("sum by (instance) ({series})"));
        for (i, h) in hosts.iter().enumerate() {
            let want: u64 = sent[i].values().map(field).sum();
            let got = per_host
                .iter()
                .find(|(l, _)| l["instance"] == h.target)
                .map_or(0.0, |(_, v)| *v);
            assert_eq!(got, want as f64, "{series} on {}", h.target);
        }
    }
    // `fabric --prometheus`: each QP's evidence from the server's counters, over a window
    // covering the run, on a fabric of one switch: every QP the generator sent weighed, and
    // the CE-marked ones (the congested host's) bad.
    let mut topo = String::from(
        "schema = \"roce-observer.topology/1\"\n\n[[node]]\nname = \"sw\"\nrole = \"leaf\"\n",
    );
    for (n, a) in (0..HOSTS).flat_map(|i| [(format!("a{i}"), 1 + i), (format!("b{i}"), 101 + i)]) {
        topo += &format!(
            "\n[[node]]\nname = \"{n}\"\nrole = \"host\"\naddresses = [\"198.18.7.{a}\"]\n\n[[link]]\na = \"{n}\"\nb = \"sw:{n}\"\n"
        );
    }
    let topo = scratch.file("star.toml", &topo);
    let url = format!("http://127.0.0.1:{}", prometheus.port);
    let (status, out, err) = output(
        Command::new(CLI)
            .args(["fabric", "--json", "--min-packets", "1", "--window", "10m"])
            .args([
                "--prometheus",
                &url,
                "--selector",
                "job=\"roce-observer\"",
                "--topology",
            ])
            .arg(&topo),
    );
    assert!(status.success(), "{err}");
    let json: Value = serde_json::from_str(&out).unwrap();
    let qps: usize = sent.iter().map(BTreeMap::len).sum();
    let marked = sent
        .iter()
        .flat_map(|s| s.values())
        .filter(|s| s.ecn[3] > 0)
        .count();
    assert!(marked > 0);
    for l in json["localizations"].as_array().unwrap() {
        assert_eq!(l["qps"], qps, "{l:#}");
        let bad = if l["signal"] == "ce" { marked } else { 0 };
        assert_eq!(l["bad_qps"], bad, "{l:#}");
    }
    // `fabric --prometheus --windows`: one query per 3-second window (three scrapes) over the
    // run: no window that ended before the congestion began has a CE-marked QP, a window
    // during it has, and no window has loss.
    let end = unix_now();
    let span = (end - quiet_from).ceil() as u64 + 1;
    let (status, out, err) = output(
        Command::new(CLI)
            .args(["fabric", "--json", "--min-packets", "1", "--windows", "3s"])
            .args([
                "--window",
                &format!("{span}s"),
                "--at",
                &format!("{end:.3}"),
            ])
            .args([
                "--prometheus",
                &url,
                "--selector",
                "job=\"roce-observer\"",
                "--topology",
            ])
            .arg(&topo),
    );
    assert!(status.success(), "{err}");
    let json: Value = serde_json::from_str(&out).unwrap();
    let windows = json["windows"].as_array().unwrap();
    assert_eq!(windows.len() as u64, span.div_ceil(3), "{json:#}");
    let bad = |w: &Value, signal: &str| {
        w["localizations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["signal"] == signal)
            .map_or(0, |l| l["bad_qps"].as_u64().unwrap())
    };
    let mut before = 0;
    for w in windows {
        // Counted from the epoch, as records' windows are.
        assert_eq!(
            w["start_unix_ns"].as_u64().unwrap() % 3_000_000_000,
            0,
            "{w:#}"
        );
        assert_eq!(bad(w, "loss"), 0, "{w:#}");
        if (w["end_unix_ns"].as_u64().unwrap() as f64) / 1e9 <= congested_from {
            before += 1;
            assert_eq!(bad(w, "ce"), 0, "before the congestion: {w:#}");
        }
    }
    assert!(before >= 1, "no window before the congestion: {json:#}");
    assert!(
        windows.iter().any(|w| bad(w, "ce") > 0),
        "no window with CE: {json:#}"
    );
    // Too many windows for one span: refused before any query.
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["fabric", "--windows", "1s", "--window", "2h"])
            .args(["--prometheus", &url, "--topology"])
            .arg(&topo),
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        integration_tests::error_line(&err).contains("more than 1000 queries"),
        "{err}"
    );
    // A server that is not there: one line.
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["fabric", "--prometheus", "http://127.0.0.1:1", "--topology"])
            .arg(&topo),
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        integration_tests::error_line(&err)
            .starts_with("roce-observer: error: Prometheus at http://127.0.0.1:1: increase(roce_qp_packets_total[300s]): "),
        "{err}"
    );
    for h in &hosts {
        assert!(
            !h.sidecar.text().contains("ERROR"),
            "{}:\n{}",
            h.target,
            h.sidecar.text()
        );
    }
}
