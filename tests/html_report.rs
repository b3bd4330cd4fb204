//! `roce_observer::render::html::render`: the self-contained HTML report, opened in headless Chromium.
//!
//! The page marks itself when done (`body[data-rendered="1"]`, `body[data-charts=N]`) and counts
//! its own errors (`body[data-errors]`, `<pre id="errors">`), so the DOM Chromium dumps says
//! whether every chart was drawn and nothing failed. No privileges needed; Chromium is
//! (`cargo xtask setup` installs it): missing, the tests skip loudly, or fail under CI.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::atomic::{AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use integration_tests::Scratch;
use roce_observer::{
    aggregate::Aggregate,
    analysis::ecmp::{EcmpOptions, analyse},
    analysis::findings::{Check, Finding},
    analysis::series::{Microbursts, Series},
    model::{Flow, Report, Source},
    render::html,
    source::synth,
};
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
/// Markup a packet or a file name could carry; it must show as text, never run.
const INJECTION: &str = "</script><script>alert(1)</script><img src=x onerror=alert(2)>";

/// True when Chromium is there. Missing: skip loudly, except under CI (a skip there fails).
fn require_chromium(test: &str) -> bool {
    if Path::new(CHROMIUM).is_file() {
        return true;
    }
    if std::env::var("CI").is_ok() {
        panic!(
            "{test}: needs {CHROMIUM}, which is missing, and CI is set: failing. \
             Install chromium (cargo xtask setup, as root)"
        );
    }
    eprintln!(
        "\n*** SKIPPED {test}: {CHROMIUM} missing: install chromium (cargo xtask setup, as root) ***\n"
    );
    false
}

/// The target directory (target/debug/deps/this-test -> target).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .nth(3)
        .expect("test binary under target/<profile>/deps")
        .to_path_buf()
}

/// Runs headless Chromium on `page` with `args` (a fresh profile each time); returns stdout.
fn chromium(dir: &Scratch, page: &Path, args: &[&str]) -> String {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let profile = dir.path(&format!("profile-{}", RUNS.fetch_add(1, Ordering::Relaxed)));
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    // Read both pipes on threads so that a chatty Chromium cannot block on a full pipe.
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out_pipe, &mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err_pipe, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium {args:?} still running after 120 s: {}",
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "chromium {args:?}: {status}\n{err}");
    out
}

/// The rendered page as Chromium's DOM, after its scripts ran.
fn dump_dom(dir: &Scratch, report: &Report, name: &str) -> (String, String) {
    let page = html::render(report);
    let path = dir.path(&format!("{name}.html"));
    std::fs::write(&path, &page).unwrap();
    let dom = chromium(dir, &path, &["--dump-dom"]);
    assert!(dom.contains("</html>"), "no DOM dumped: {dom}");
    (page, dom)
}

/// The attributes of the `<body>` start tag.
fn body_tag(dom: &str) -> &str {
    let start = dom.find("<body").expect("a body element");
    let end = start + dom[start..].find('>').unwrap();
    &dom[start..=end]
}

/// Elements whose class list holds `class`.
fn with_class(dom: &str, class: &str) -> usize {
    dom.split("class=\"")
        .skip(1)
        .filter(|rest| {
            rest.split('"')
                .next()
                .unwrap()
                .split_whitespace()
                .any(|c| c == class)
        })
        .count()
}

/// Checks what every rendered page must satisfy; returns the body tag.
fn assert_rendered(page: &str, dom: &str, charts: usize) {
    let body = body_tag(dom);
    let errors = {
        let start = dom.find("<pre id=\"errors\"").expect("the errors list");
        let open = start + dom[start..].find('>').unwrap() + 1;
        let close = open + dom[open..].find("</pre>").unwrap();
        &dom[open..close]
    };
    assert!(
        !body.contains("data-errors") && errors.is_empty(),
        "the page reported errors: {body}\n{errors}"
    );
    assert!(body.contains("data-rendered=\"1\""), "not rendered: {body}");
    assert!(
        body.contains(&format!("data-charts=\"{charts}\"")),
        "expected {charts} charts: {body}"
    );
    assert_eq!(with_class(dom, "uplot"), charts, "uPlot roots");
    assert!(dom.matches("<canvas").count() >= charts, "uPlot canvases");
    // Self-contained: nothing to fetch, and a policy that forbids fetching anyway.
    // (The report's own strings are data: they may say anything.)
    assert!(page.contains("default-src 'none'"), "CSP");
    let json_start = page
        .find("<script type=\"application/json\" id=\"report\">")
        .expect("the report's JSON");
    let json_end = json_start + page[json_start..].find("</script>").unwrap();
    let code = format!("{}{}", &page[..json_start], &page[json_end..]);
    for needle in ["http://", " src=", " href=", "<link", "@import", "url("] {
        assert!(!code.contains(needle), "the page references {needle:?}");
    }
    // Only the page's own four script elements, before and after the scripts ran.
    assert_eq!(page.matches("<script").count(), 4);
    assert_eq!(
        dom.matches("<script").count(),
        4,
        "script elements in the DOM"
    );
}

/// The demo scenario: its aggregate, its span, and the `series` and `microbursts` sections a
/// replay would give it over `intervals` intervals, counted here by hand (JSON, so that fields
/// the report gains later do not break this test).
struct Demo {
    agg: Aggregate,
    secs: f64,
    series: Series,
    bursts: Microbursts,
}

/// Microburst slot: the synthetic frames are 1 us apart.
const SLOT_NS: u64 = 2_000;
const LINK_BPS: u64 = 10_000_000_000;
const THRESHOLD_PERCENT: f64 = 85.0;
/// Bytes a frame takes on the wire besides itself (preamble, FCS, gap).
const WIRE_OVERHEAD: u64 = 24;

fn same_flow(a: &Flow, b: &Flow) -> bool {
    (a.src_ip, a.dst_ip, a.udp_src_port, a.dest_qp, a.direction)
        == (b.src_ip, b.dst_ip, b.udp_src_port, b.dest_qp, b.direction)
}

/// The metrics columns of the flows `per_interval[i]` of each interval.
fn metrics(per_interval: &[Vec<&Flow>], interval_s: f64) -> serde_json::Map<String, Value> {
    let sum = |g: &dyn Fn(&Flow) -> u64| -> Vec<u64> {
        per_interval
            .iter()
            .map(|fs| fs.iter().map(|f| g(f)).sum())
            .collect()
    };
    let packets = sum(&|f| f.packets);
    let ce = sum(&|f| f.ecn.ce);
    let per_s = |v: Vec<u64>| -> Vec<f64> { v.iter().map(|x| *x as f64 / interval_s).collect() };
    let Value::Object(m) = json!({
        "bps": per_s(sum(&|f| f.bytes * 8)),
        "ce_fraction": ce.iter().zip(&packets)
            .map(|(c, p)| if *p == 0 { 0.0 } else { *c as f64 / *p as f64 })
            .collect::<Vec<f64>>(),
        "packets": packets,
        "cnp_per_s": per_s(sum(&|f| f.ops.cnp)),
        "naks": sum(&|f| f.ops.nak + f.ops.rnr_nak),
        "psn_gaps": sum(&|f| f.psn.gaps),
        "retransmissions": sum(&|f| f.psn.regressions),
    }) else {
        unreachable!()
    };
    m
}

fn demo(intervals: u64) -> Demo {
    let w = synth::scenario("demo").expect("demo scenario");
    let first = w.frames[0].ts_ns;
    let last = w.frames.last().unwrap().ts_ns;
    let interval_ns = (last - first) / intervals + 1;
    let n = ((last - first) / interval_ns + 1) as usize;
    let interval_s = interval_ns as f64 / 1e9;
    let mut agg = Aggregate::new();
    let mut slices = vec![Aggregate::new(); n];
    // Wire bytes per microburst slot (slot 0 starts at the first frame).
    let mut slots: BTreeMap<u64, u64> = BTreeMap::new();
    for f in &w.frames {
        let _ = agg.push(&f.bytes, f.ts_ns);
        let _ = slices[((f.ts_ns - first) / interval_ns) as usize].push(&f.bytes, f.ts_ns);
        *slots.entry((f.ts_ns - first) / SLOT_NS).or_default() +=
            f.bytes.len() as u64 + WIRE_OVERHEAD;
    }
    let secs = (last - first) as f64 / 1e9;
    let src = Source::pcap(Vec::new(), Vec::new());
    let whole = agg.report(src.clone(), secs);
    let slices: Vec<Report> = slices
        .iter()
        .map(|a| a.report(src.clone(), interval_s))
        .collect();

    let total = metrics(
        &slices
            .iter()
            .map(|r| r.flows.iter().collect())
            .collect::<Vec<_>>(),
        interval_s,
    );
    let flows: Vec<Value> = whole
        .flows
        .iter()
        .take(10)
        .map(|f| {
            let per: Vec<Vec<&Flow>> = slices
                .iter()
                .map(|r| r.flows.iter().filter(|g| same_flow(f, g)).collect())
                .collect();
            let mut m = metrics(&per, interval_s);
            m.extend(
                [
                    ("src_ip", json!(f.src_ip)),
                    ("dst_ip", json!(f.dst_ip)),
                    ("udp_src_port", json!(f.udp_src_port)),
                    ("dest_qp", json!(f.dest_qp)),
                    ("direction", json!(f.direction)),
                ]
                .map(|(k, v)| (k.to_string(), v)),
            );
            Value::Object(m)
        })
        .collect();

    // The interface: wire rate and busiest slot per interval; bursts are runs of busy slots.
    let rate = |bytes: u64| bytes as f64 * 8.0 * 1e9 / SLOT_NS as f64;
    let percent = |bps: f64| bps * 100.0 / LINK_BPS as f64;
    let mut wire = vec![0u64; n];
    let mut peak = vec![0u64; n];
    for (slot, bytes) in &slots {
        let i = ((slot * SLOT_NS / interval_ns) as usize).min(n - 1);
        wire[i] += bytes;
        peak[i] = peak[i].max(*bytes);
    }
    let busy = |bytes: u64| percent(rate(bytes)) >= THRESHOLD_PERCENT;
    let mut runs: Vec<(u64, u64, u64, u64)> = Vec::new(); // first slot, slots, bytes, peak
    let mut prev: Option<u64> = None;
    for (slot, bytes) in slots.iter().filter(|(_, b)| busy(**b)) {
        match runs.last_mut() {
            Some(r) if prev == Some(slot - 1) => {
                r.1 += 1;
                r.2 += bytes;
                r.3 = r.3.max(*bytes);
            }
            _ => runs.push((*slot, 1, *bytes, *bytes)),
        }
        prev = Some(*slot);
    }
    let (peak_slot, peak_bytes) = slots.iter().max_by_key(|(_, b)| **b).unwrap();
    let longest = runs.iter().max_by_key(|r| r.1).copied();
    let mut top = runs.clone();
    top.sort_by_key(|r| std::cmp::Reverse(r.3));
    let top: Vec<Value> = top
        .iter()
        .take(10)
        .map(|r| {
            json!({"at_ns": first + r.0 * SLOT_NS, "duration_ns": r.1 * SLOT_NS, "bytes": r.2,
                   "peak_bps": rate(r.3), "peak_percent": percent(rate(r.3))})
        })
        .collect();
    let series = json!({
        "interval_s": interval_s,
        "start_ns": first,
        "t": (0..n).map(|i| i as f64 * interval_s).collect::<Vec<f64>>(),
        "total": total,
        "interfaces": [{
            "name": "ens1f0", "direction": "ingress",
            "bps": wire.iter().map(|b| *b as f64 * 8.0 / interval_s).collect::<Vec<f64>>(),
            "peak_bps": peak.iter().map(|b| rate(*b)).collect::<Vec<f64>>(),
        }],
        "flows": flows,
    });
    let bursts = json!({
        "slot_ns": SLOT_NS,
        "link_speed_bps": LINK_BPS,
        "threshold_percent": THRESHOLD_PERCENT,
        "interfaces": [{
            "name": "ens1f0", "direction": "ingress",
            "bytes": slots.values().sum::<u64>(),
            "peak_bps": rate(*peak_bytes),
            "peak_percent": percent(rate(*peak_bytes)),
            "peak_at_ns": first + peak_slot * SLOT_NS,
            "busy_slots": runs.iter().map(|r| r.1).sum::<u64>(),
            "bursts": runs.len(),
            "longest_burst_ns": longest.map_or(0, |r| r.1 * SLOT_NS),
            "longest_burst_at_ns": longest.map_or(0, |r| first + r.0 * SLOT_NS),
            "top": top,
            "lost_slots": 0,
        }],
    });
    Demo {
        agg,
        secs,
        series: serde_json::from_value(series).expect("a series"),
        bursts: serde_json::from_value(bursts).expect("microbursts"),
    }
}

fn finding(
    rule: &str,
    severity: &str,
    title: &str,
    summary: &str,
    evidence: serde_json::Value,
    flows: serde_json::Value,
    hint: &str,
) -> Finding {
    serde_json::from_value(json!({
        "rule": rule, "severity": severity, "title": title, "summary": summary,
        "evidence": evidence, "flows": flows, "hint": hint,
    }))
    .unwrap()
}

fn flow_ref(r: &Report, i: usize) -> serde_json::Value {
    let f = &r.flows[i];
    json!({
        "src_ip": f.src_ip, "dst_ip": f.dst_ip, "udp_src_port": f.udp_src_port,
        "dest_qp": f.dest_qp, "direction": f.direction,
    })
}

const TITLES: [&str; 4] = [
    "CE marks but no CNPs back on 1 flow",
    "Loss: PSN gaps, NAKs and retransmissions on 1 flow",
    "Microbursts above 85% of the link on ens1f0",
    "RoCE data over DSCP 26 and 0 <b>mixed</b>",
];

/// The demo report with everything a diagnosis fills in, and markup in its strings.
fn full_report() -> Report {
    let Demo {
        agg,
        secs,
        series,
        bursts,
    } = demo(24);
    let mut r = agg.report(
        Source::pcap(
            vec!["/captures/rack7-leaf3.pcap".into()],
            vec![format!("capture cut short: {INJECTION}")],
        ),
        secs,
    );
    r.series = Some(series);
    // Latency per interval: the p99 climbing in the middle intervals, one without samples.
    let n = r.series.as_ref().unwrap().t.len();
    r.series.as_mut().unwrap().latency = Some(roce_observer::model::series::LatencySeries {
        ack_samples: (0..n as u64)
            .map(|i| if i == 3 { 0 } else { 40 + i })
            .collect(),
        ack_p50_ns: (0..n as u64)
            .map(|i| (i != 3).then_some(18_000 + 100 * i))
            .collect(),
        ack_p99_ns: (0..n as u64)
            .map(|i| {
                (i != 3).then_some(if (8..12).contains(&i) {
                    2_100_000
                } else {
                    60_000
                })
            })
            .collect(),
        read_samples: vec![5; n],
        read_p50_ns: vec![Some(30_000); n],
        read_p99_ns: vec![Some(90_000); n],
    });
    let mb = bursts.interfaces[0].clone();
    assert!(
        mb.bursts > 0,
        "the demo bursts over {THRESHOLD_PERCENT}% of the link"
    );
    r.microbursts = Some(bursts);
    let ce_flow = r.flows.iter().position(|f| f.ecn.ce > 0).unwrap_or(0);
    let lossy = r
        .flows
        .iter()
        .position(|f| f.psn.gaps > 0 || f.ops.nak > 0)
        .unwrap_or(1);
    let (f_ce, f_loss) = (flow_ref(&r, ce_flow), flow_ref(&r, lossy));
    let ce = &r.flows[ce_flow];
    r.findings = vec![
        finding(
            "ce-without-cnp",
            "critical",
            TITLES[0],
            &format!(
                "{} of {} packets CE-marked, 0 CNPs seen back",
                ce.ecn.ce, ce.packets
            ),
            json!({"ce_packets": ce.ecn.ce, "cnp_packets": 0, "ce_percent": ce.ce_percent()}),
            json!([f_ce]),
            "Enable the DCQCN notification point on the receiver (mlxconfig / ethtool priv flags).",
        ),
        finding(
            "loss",
            "warning",
            TITLES[1],
            &format!("loss in a lossless class: {INJECTION}"),
            json!({"psn_gaps": r.flows[lossy].psn.gaps, "naks": r.flows[lossy].ops.nak,
                   "retransmissions": r.flows[lossy].psn.regressions, "note": INJECTION}),
            json!([f_loss]),
            "Check PFC on the RoCE priority along the path and switch buffer drops.",
        ),
        finding(
            "microburst",
            "warning",
            TITLES[2],
            &format!(
                "{} bursts, the longest {} ns, peak {:.1} Gb/s",
                mb.bursts,
                mb.longest_burst_ns,
                mb.peak_bps / 1e9
            ),
            json!({"bursts": mb.bursts, "peak_bps": mb.peak_bps, "longest_burst_ns": mb.longest_burst_ns,
                   "peak_percent": mb.peak_percent, "threshold_percent": THRESHOLD_PERCENT}),
            json!([]),
            "Bursts this short are invisible to 1 s counters; look at egress queue depth.",
        ),
        finding(
            "dscp-mix",
            "info",
            TITLES[3],
            "2 DSCP values carry RoCE data",
            json!({"dscp": [0, 26]}),
            json!([flow_ref(&r, 0), flow_ref(&r, 1)]),
            "Map all RoCE traffic to one lossless class.",
        ),
    ];
    let fired = ["ce-without-cnp", "loss", "microburst", "dscp-mix"];
    r.checks = roce_observer::analysis::findings::RULES
        .iter()
        .map(|(rule, _)| {
            let (status, note) = if fired.contains(rule) {
                ("fired", "")
            } else if *rule == "ecmp-imbalance" {
                ("skipped", "no ECMP model (--uplinks)")
            } else {
                ("passed", "")
            };
            serde_json::from_value::<Check>(json!({"rule": rule, "status": status, "note": note}))
                .unwrap()
        })
        .collect();
    r.ecmp = Some(analyse(
        &r.flows,
        &r.connections,
        &EcmpOptions {
            uplinks: 4,
            ..Default::default()
        },
    ));
    r
}

#[test]
fn full_report_renders_every_chart_without_errors() {
    let test = "full_report_renders_every_chart_without_errors";
    if !require_chromium(test) {
        return;
    }
    let dir = Scratch::new("html-full");
    let report = full_report();
    assert!(report.series.as_ref().unwrap().t.len() > 1);
    let (page, dom) = dump_dom(&dir, &report, "full");
    // Throughput, congestion, per-flow, loss, microbursts, latency over time; the latency
    // histograms.
    assert_rendered(&page, &dom, 8);
    // The connections table, sortable, with both QP numbers of the largest connection.
    assert!(!report.connections.is_empty() && !report.latency.is_empty());
    assert!(dom.contains("id=\"connections\"") && dom.contains("id=\"latency\""));
    assert!(dom.contains("class=\"sortable\""), "sortable headers");
    let c = &report.connections[0];
    for qp in [c.a.qp, c.b.qp].into_iter().flatten() {
        assert!(
            dom.contains(&format!("0x{qp:06x}")),
            "connection QP {qp:#x}"
        );
    }
    eprintln!("{test}: page {:.1} KB", page.len() as f64 / 1024.0);

    // Findings first, in the report's order, with their text escaped.
    let at = |needle: &str| {
        dom.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in the DOM"))
    };
    let titles: Vec<usize> = TITLES
        .iter()
        .map(|t| at(&t.replace('<', "&lt;").replace('>', "&gt;")))
        .collect();
    assert!(titles.is_sorted(), "findings out of order: {titles:?}");
    assert!(at("id=\"findings\"") < at("id=\"checks\""));
    assert!(at("id=\"checks\"") < at("id=\"charts\""));
    assert!(at("id=\"charts\"") < at("id=\"flows\""));
    assert!(at("id=\"flows\"") < at("id=\"ecmp\""));
    assert!(
        !dom.contains("<b>mixed</b>"),
        "markup in a title was parsed"
    );
    for sev in ["badge critical", "badge warning", "badge info"] {
        assert!(dom.contains(sev), "{sev}");
    }
    // The injected markup is text: no script, no image element, in the warning and the summary.
    let escaped =
        "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;";
    assert!(
        dom.matches(escaped).count() >= 3,
        "warning, summary and evidence show the markup as text"
    );
    assert!(!dom.contains("<script>alert") && !dom.contains("<img"));
    // Tables: checks (every rule), top flows (dest QP in hex), ECMP uplinks.
    for (rule, _) in roce_observer::analysis::findings::RULES {
        assert!(dom.contains(&format!(">{rule}<")), "check {rule}");
    }
    // The latency histogram's time axis: labels on the decades, as durations, none "0 s".
    let at_labels = dom
        .find("data-x-labels=\"")
        .expect("the latency histogram keeps its axis labels");
    let rest = &dom[at_labels + "data-x-labels=\"".len()..];
    let labels: Vec<&str> = rest[..rest.find('"').unwrap()].split('|').collect();
    assert!(labels.len() >= 2, "{labels:?}");
    for l in &labels {
        assert!(
            *l != "0 s"
                && (l.ends_with("µs")
                    || l.ends_with("ms")
                    || l.ends_with(" s")
                    || l.ends_with("ns")),
            "{labels:?}"
        );
    }
    let distinct: std::collections::BTreeSet<&&str> = labels.iter().collect();
    assert_eq!(distinct.len(), labels.len(), "{labels:?}");
    let qp = format!("0x{:06x}", report.flows[0].dest_qp);
    assert!(dom.contains(&qp), "top flow QP {qp}");
    assert!(dom.contains(&report.ecmp.as_ref().unwrap().verdict));
    let ip: IpAddr = report.flows[0].src_ip;
    assert!(dom.contains(&ip.to_string()));

    // A screenshot for humans: target/html-report.png (and the page beside it).
    let png = dir.path("page.png");
    let shot = format!("--screenshot={}", png.display());
    chromium(
        &dir,
        &dir.path("full.html"),
        &[&shot, "--window-size=1200,3000", "--hide-scrollbars"],
    );
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(size > 0, "no screenshot at {}", png.display());
    let keep = target_dir().join("html-report.png");
    std::fs::copy(&png, &keep).unwrap();
    std::fs::write(target_dir().join("html-report.html"), &page).unwrap();
    eprintln!("{test}: screenshot at {}", keep.display());
}

#[test]
fn a_plain_report_renders_without_charts_or_errors() {
    if !require_chromium("a_plain_report_renders_without_charts_or_errors") {
        return;
    }
    let dir = Scratch::new("html-plain");
    let Demo { agg, secs, .. } = demo(1);
    let report = agg.report(Source::live(vec!["eth0".into()], "auto"), secs);
    assert!(report.series.is_none() && report.findings.is_empty());
    let (page, dom) = dump_dom(&dir, &report, "plain");
    // No series: only the latency histograms (the demo's ACKs answer its requests).
    assert!(!report.latency.is_empty());
    assert_rendered(&page, &dom, 1);
    assert!(dom.contains("No time series in this report"));
    assert!(dom.contains("Live capture on eth0"));

    // Nothing at all: no flows, a zero window.
    let empty = Aggregate::new().report(Source::pcap(vec!["empty.pcap".into()], Vec::new()), 0.0);
    let (page, dom) = dump_dom(&dir, &empty, "empty");
    assert_rendered(&page, &dom, 0);
    assert!(dom.contains("No RoCEv2 flows"));

    // PFC storms: the PAUSE / PFC table, with pause times at a known link speed.
    let w = synth::scenario("pfc").expect("pfc scenario");
    let mut agg = Aggregate::new();
    for f in &w.frames {
        let _ = agg.push(&f.bytes, f.ts_ns);
    }
    let mut pfc = agg.report(Source::pcap(vec!["pfc.pcap".into()], Vec::new()), 1.0);
    let p = pfc.pfc.as_mut().expect("a pfc section");
    p.set_link_speed(Some(100_000_000_000));
    let mac = p.sources[0].src_mac.clone();
    let (page, dom) = dump_dom(&dir, &pfc, "pfc");
    // No series; the latency histograms when its RoCE traffic gave samples.
    assert_rendered(&page, &dom, usize::from(!pfc.latency.is_empty()));
    assert!(
        dom.contains("id=\"pfc\"") && dom.contains(&mac),
        "PFC table"
    );
    assert!(dom.contains("priority 3"));
}

#[test]
fn a_single_interval_still_charts() {
    if !require_chromium("a_single_interval_still_charts") {
        return;
    }
    let dir = Scratch::new("html-single");
    let Demo {
        agg,
        secs,
        series,
        bursts,
    } = demo(1);
    assert_eq!(series.t.len(), 1);
    let mut report = agg.report(Source::pcap(vec!["one.pcap".into()], Vec::new()), secs);
    report.series = Some(series);
    report.microbursts = Some(bursts);
    let (page, dom) = dump_dom(&dir, &report, "single");
    // Throughput, congestion, per-flow, loss, microbursts, the latency histograms; no ECMP
    // model.
    assert_rendered(&page, &dom, 6);
}

/// `fabric --html`'s page (`render::fabric_html`), opened in Chromium: one drawing per signal,
/// every link and node drawn, the lossy link marked on the loss drawing alone, markup in a
/// node's name shown as text.
#[test]
fn the_fabric_page_draws_the_topology_with_the_suspect_marked() {
    use roce_observer::analysis::fabric::{self, Options, Signal, sim};
    if !require_chromium("the_fabric_page_draws_the_topology_with_the_suspect_marked") {
        return;
    }
    let dir = Scratch::new("html-fabric");
    let truth = sim::leaf_spine(2, 3, 4, Some(8));
    let link = truth
        .link_between(truth.node("l1").unwrap(), truth.node("s0").unwrap())
        .unwrap();
    let work = sim::Workload {
        qps: 600,
        packets: 2000,
        background: 0.0,
        seed: 5,
    };
    let ev: Vec<_> = sim::evidence(
        &truth,
        &work,
        &[sim::Fault {
            link,
            loss: 0.01,
            ce: 0.0,
        }],
    )
    .into_iter()
    .map(|(e, _)| e)
    .collect();
    let runs: Vec<_> = [Signal::Loss, Signal::Ce]
        .into_iter()
        .map(|s| fabric::localize(&truth, &ev, s, &Options::default()))
        .collect();
    let mut named = truth.clone();
    let last = named.nodes.len() - 1;
    named.nodes[last].name = format!("{}{INJECTION}", named.nodes[last].name);
    let page = roce_observer::render::fabric_html::html(&named, &runs);
    let path = dir.path("fabric.html");
    std::fs::write(&path, &page).unwrap();
    let dom = chromium(&dir, &path, &["--dump-dom"]);
    assert!(dom.contains("</html>"), "no DOM dumped: {dom}");
    assert_eq!(dom.matches("<svg").count(), 2, "{dom}");
    assert_eq!(with_class(&dom, "link"), 2 * truth.links.len());
    assert_eq!(with_class(&dom, "node"), 2 * truth.nodes.len());
    // The loss drawing marks the link; the CE drawing (clean) marks nothing.
    let loss =
        &dom[dom.find("data-signal=\"loss\"").unwrap()..dom.find("data-signal=\"ce\"").unwrap()];
    assert_eq!(with_class(loss, "suspect"), 1, "{loss}");
    assert!(
        loss.contains(&format!("<title>{}:", truth.link_name(link))),
        "{loss}"
    );
    assert_eq!(with_class(&dom, "suspect"), 1);
    assert!(dom.contains("[fabric-link]"), "{dom}");
    assert!(!dom.contains(INJECTION), "markup in a name must be escaped");
    assert!(
        dom.contains("onerror=alert(2)&gt;"),
        "the name shown as text"
    );
}

/// `replay --jobs --html` on the generated ring whose fourth host hangs: the jobs section draws
/// a bar per phase and per host's part of each, the hung host's row marked missing; a ring
/// whose host computes longer has that host's row marked the straggler, and, with the host's
/// process joined, its rank.
#[test]
fn the_jobs_section_draws_each_hosts_phases_with_the_straggler_and_the_hung_host_marked() {
    let test =
        "the_jobs_section_draws_each_hosts_phases_with_the_straggler_and_the_hung_host_marked";
    if !require_chromium(test) {
        return;
    }
    let dir = Scratch::new("html-jobs");
    for (scenario, mark) in [
        ("rule-job-hang", "198.18.85.4 (missing)"),
        ("rule-job-straggler", "198.18.81.4 (straggler)"),
    ] {
        let w = synth::scenario(scenario).unwrap();
        let pcap = dir.path(&format!("{scenario}.pcap"));
        synth::write_pcap(std::fs::File::create(&pcap).unwrap(), &w.frames).unwrap();
        let html = dir.path(&format!("{scenario}.html"));
        let json = std::process::Command::new(env!("CARGO_BIN_EXE_roce-observer-under-test"))
            .arg("replay")
            .arg(&pcap)
            .args(["--jobs", "--json", "--html"])
            .arg(&html)
            .output()
            .unwrap();
        assert!(
            json.status.success(),
            "{}",
            String::from_utf8_lossy(&json.stderr)
        );
        let report: Report = serde_json::from_slice(&json.stdout).unwrap();
        let jobs = report.jobs.as_ref().unwrap();
        let bars: usize = jobs
            .jobs
            .iter()
            .map(|j| j.phases.len() + j.phases.iter().map(|p| p.hosts.len()).sum::<usize>())
            .sum();
        let page = std::fs::read_to_string(&html).unwrap();
        let dom = chromium(&dir, &html, &["--dump-dom"]);
        let body = body_tag(&dom);
        assert!(
            body.contains("data-rendered=\"1\"") && !body.contains("data-errors"),
            "{body}"
        );
        assert!(
            body.contains(&format!("data-job-bars=\"{bars}\"")),
            "{bars}: {body}"
        );
        assert!(dom.contains("id=\"jobs\""));
        assert!(dom.contains(mark), "{scenario}: {mark}");
        assert!(page.contains("default-src 'none'"));
        if scenario != "rule-job-straggler" {
            continue;
        }
        // The observed host's process of the job (as `--nic-root` or `diagnose` join it):
        // its row and the job's summary name its rank and the job's launcher.
        let mut report = report;
        let job = &mut report.jobs.as_mut().unwrap().jobs[0];
        job.name = Some("torchelastic:r9".into());
        job.ranks = vec![roce_observer::model::jobs::JobRank {
            host: "198.18.81.4".parse().unwrap(),
            pid: 4001,
            comm: Some("python".into()),
            qps: 2,
            seen_by: None,
            process: roce_observer::model::nic::ProcessJob {
                job: Some("torchelastic:r9".into()),
                rank: Some(3),
                world_size: Some(8),
                ..Default::default()
            },
        }];
        // And a peer's, as its host's records name it (`--peer-records`).
        job.ranks.push(roce_observer::model::jobs::JobRank {
            host: "198.18.81.5".parse().unwrap(),
            pid: 5001,
            comm: None,
            qps: 2,
            seen_by: Some("gpu-node-5".into()),
            process: roce_observer::model::nic::ProcessJob {
                job: Some("torchelastic:r9".into()),
                rank: Some(4),
                ..Default::default()
            },
        });
        let (_, dom) = dump_dom(&dir, &report, "ranks");
        let body = body_tag(&dom);
        assert!(
            body.contains("data-rendered=\"1\"") && !body.contains("data-errors"),
            "{body}"
        );
        assert!(
            dom.contains("198.18.81.4 rank 3 (straggler)"),
            "the host's row"
        );
        assert!(dom.contains("198.18.81.5 rank 4"), "the peer's row");
        assert!(
            dom.contains("gpu-node-5's records"),
            "where the peer's rank comes from"
        );
        assert!(dom.contains("rank 3 of 8"), "the job's summary");
        assert!(dom.contains("torchelastic:r9"), "the launcher's name");
    }
}
