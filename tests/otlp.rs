//! Fleet records over OTLP (docs/export.md), to an independent receiver built on the official
//! protobufs (tests/support/otlp_receiver.py: opentelemetry-proto and grpcio): the records of
//! every real capture and generated scenario arrive over gRPC and over HTTP/protobuf, with
//! gzip and headers, per QP equal to the JSON report, numbered without gaps; a receiver that
//! fails for a while gets everything once it answers; one that refuses, or none at all, is an
//! error naming how many records were lost, after the report is printed.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use integration_tests::{OtlpReceiver as Receiver, Scratch, every_capture, output, synth_pcap};
use roce_observer::model::Report;
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// `replay FILE --json` with `extra` flags: exit status, the report (if printed), stderr.
fn replay(file: &Path, extra: &[&str]) -> (Option<i32>, Option<Report>, String) {
    let (status, out, err) = output(
        Command::new(CLI)
            .arg("replay")
            .arg(file)
            .args(["--json", "--no-progress"])
            .args(extra),
    );
    (status.code(), serde_json::from_str(&out).ok(), err)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("a number: {v}"))
}

/// A count attribute: left out when 0. One that is there is never 0.
fn count_of(a: &Value, k: &str) -> u64 {
    match a.get(k) {
        None => 0,
        Some(v) => {
            assert_ne!(u(v), 0, "{k}: a count of 0 is left out");
            u(v)
        }
    }
}

/// A QP row's key and counts, from a received record's attributes.
type QpKey = (String, String, u64, u64, String, String, String);

fn qp_key(a: &Value) -> QpKey {
    let s = |k: &str| {
        a[k].as_str()
            .unwrap_or_else(|| panic!("{k}: {a}"))
            .to_string()
    };
    // An empty value is left out.
    let or_empty = |k: &str| a[k].as_str().unwrap_or_default().to_string();
    (
        s("source.address"),
        s("destination.address"),
        u(&a["source.port"]),
        u(&a["rdma.qp.destination"]),
        s("network.io.direction"),
        s("roce.vantage"),
        or_empty("roce.mirror.session"),
    )
}

/// The counts compared per QP.
const COUNTS: [&str; 9] = [
    "roce.packets",
    "roce.bytes",
    "roce.ecn.ce",
    "roce.ops.cnp",
    "roce.ops.nak",
    "roce.psn.gaps",
    "roce.psn.missing",
    "roce.psn.retransmissions",
    "roce.psn.duplicates",
];

fn report_qps(r: &Report) -> BTreeMap<QpKey, [u64; 9]> {
    r.flows
        .iter()
        .map(|f| {
            let session = f.mirror.as_ref().map_or(String::new(), |m| {
                m.session
                    .map(|s| s.to_string())
                    .or_else(|| m.kind.clone())
                    .unwrap_or_default()
            });
            let direction = match f.direction {
                roce_observer::model::Direction::Ingress => "receive",
                roce_observer::model::Direction::Egress => "transmit",
            };
            (
                (
                    f.src_ip.to_string(),
                    f.dst_ip.to_string(),
                    u64::from(f.udp_src_port),
                    u64::from(f.dest_qp),
                    direction.to_string(),
                    if f.mirror.is_some() { "mirror" } else { "host" }.to_string(),
                    session,
                ),
                [
                    f.packets,
                    f.bytes,
                    f.ecn.ce,
                    f.ops.cnp,
                    f.ops.nak,
                    f.psn.gaps,
                    f.psn.missing,
                    f.psn.retransmissions,
                    f.psn.duplicates,
                ],
            )
        })
        .collect()
}

/// Checks one exporter's records against its report: a QP record per flow with its counts, a
/// connection side record per side seen, a finding per finding; each table's `seq` 0, 1, 2...; the
/// interval's totals as metrics; the headers sent.
fn check_exporter(name: &str, records: &[&Value], report: &Report, transport: &str) {
    let logs: Vec<&&Value> = records.iter().filter(|r| r["signal"] == "log").collect();
    let mut by_event: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for r in records {
        assert_eq!(r["transport"], transport, "{name}");
        assert_eq!(r["headers"]["x-tenant"], "lab", "{name}: the header");
    }
    for r in &logs {
        assert_eq!(r["scope"], "roce-observer", "{name}");
        by_event
            .entry(r["event"].as_str().unwrap())
            .or_default()
            .push(&r["attributes"]);
    }
    for (event, rows) in &by_event {
        let mut seqs: Vec<u64> = rows.iter().map(|a| u(&a["roce.record.seq"])).collect();
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (0..rows.len() as u64).collect::<Vec<_>>(),
            "{name}: {event} numbered without gaps"
        );
    }
    let qps: BTreeMap<QpKey, [u64; 9]> = by_event
        .get("roce.qp_intervals")
        .into_iter()
        .flatten()
        .map(|a| (qp_key(a), COUNTS.map(|k| count_of(a, k))))
        .collect();
    let want = report_qps(report);
    assert_eq!(qps, want, "{name}: every QP's counts");
    let count = |e: &str| by_event.get(e).map_or(0, Vec::len);
    assert_eq!(
        count("roce.connection_sides"),
        integration_tests::connection_sides_seen(report),
        "{name}: a row per connection side seen"
    );
    assert_eq!(
        count("roce.findings"),
        report.findings.len(),
        "{name}: findings"
    );
    // The interval's own row: its rows in each table.
    let intervals = &by_event["roce.intervals"];
    assert_eq!(intervals.len(), 1, "{name}: one interval");
    for (attribute, event) in [
        ("roce.rows.qp_intervals", "roce.qp_intervals"),
        ("roce.rows.connection_sides", "roce.connection_sides"),
        ("roce.rows.latency_buckets", "roce.latency_buckets"),
        ("roce.rows.pauses", "roce.pauses"),
        ("roce.rows.findings", "roce.findings"),
    ] {
        assert_eq!(
            count_of(intervals[0], attribute) as usize,
            count(event),
            "{name}: {attribute}"
        );
    }
    // The interval's totals, each once, over its bounds, as delta sums.
    let points: Vec<&&Value> = records.iter().filter(|r| r["signal"] == "metric").collect();
    let metrics: BTreeMap<&str, u64> = points
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), u(&r["value"])))
        .collect();
    assert_eq!(points.len(), metrics.len(), "{name}: each metric once");
    for r in &points {
        assert_eq!(r["temporality"], 1, "{name}: delta");
        assert_eq!(r["time"], intervals[0]["roce.interval.end"], "{name}");
        assert_eq!(r["start"], intervals[0]["roce.interval.start"], "{name}");
    }
    let flows = &report.flows;
    let sum = |f: fn(&roce_observer::model::Flow) -> u64| flows.iter().map(f).sum::<u64>();
    let want: BTreeMap<&str, u64> = [
        ("roce.packets", sum(|f| f.packets)),
        ("roce.bytes", sum(|f| f.bytes)),
        ("roce.ecn.ce", sum(|f| f.ecn.ce)),
        ("roce.cnp", sum(|f| f.ops.cnp)),
        ("roce.nak", sum(|f| f.ops.nak)),
        ("roce.psn.missing", sum(|f| f.psn.missing)),
        ("roce.psn.retransmissions", sum(|f| f.psn.retransmissions)),
    ]
    .into();
    assert_eq!(metrics, want, "{name}: the interval's totals");
    // The resource, and the records' times and severities.
    for r in &logs {
        assert_eq!(r["resource"]["service.name"], "roce-observer", "{name}");
        assert!(r["resource"]["host.name"].is_string(), "{name}");
        assert_eq!(r["time"], intervals[0]["roce.interval.end"], "{name}");
        let want = match r["attributes"]["roce.finding.severity"].as_str() {
            Some("critical") => "ERROR",
            Some("warning") => "WARN",
            _ => "INFO",
        };
        assert_eq!(r["severity"], want, "{name}: {}", r["event"]);
    }
}

fn by_exporter(received: &[Value]) -> BTreeMap<String, Vec<&Value>> {
    let mut m: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for r in received {
        m.entry(
            r["resource"]["service.instance.id"]
                .as_str()
                .unwrap()
                .to_string(),
        )
        .or_default()
        .push(r);
    }
    m
}

#[test]
fn every_replay_arrives_over_grpc_and_http_as_the_report_says() {
    let scratch = Scratch::new("otlp");
    let files = every_capture(
        CLI,
        &scratch,
        "every_replay_arrives_over_grpc_and_http_as_the_report_says",
    );
    assert!(files.len() >= 20, "{} captures", files.len());
    for (protocol, transport) in [("grpc", "grpc"), ("http-protobuf", "http")] {
        let receiver = Receiver::start(&scratch, transport, &[]);
        let mut reports = Vec::new();
        for (i, file) in files.iter().enumerate() {
            // gzip on every other one: both bodies decode.
            let compression = if i % 2 == 0 { "gzip" } else { "none" };
            let (code, report, err) = replay(
                file,
                &[
                    "--otlp-endpoint",
                    &receiver.url(transport),
                    "--otlp-protocol",
                    protocol,
                    "--otlp-compression",
                    compression,
                    "--otlp-header",
                    "x-tenant=lab",
                ],
            );
            assert_eq!(code, Some(0), "{}: {err}", file.display());
            assert!(err.contains("sent "), "{err}");
            reports.push(report.expect("the report"));
        }
        let received = receiver.received();
        let exporters = by_exporter(&received);
        assert_eq!(
            exporters.len(),
            files.len(),
            "{transport}: one exporter per replay"
        );
        // Each exporter is one replay: match them by the file they observed.
        for (file, report) in files.iter().zip(&reports) {
            let name = file.display().to_string();
            let (_, records) = exporters
                .iter()
                .find(|(_, rs)| {
                    rs.iter().any(|r| {
                        r["signal"] == "log" && r["resource"]["roce.observed"] == name.as_str()
                    })
                })
                .unwrap_or_else(|| panic!("{transport}: no records of {name}"));
            check_exporter(&name, records, report, transport);
        }
    }
}

#[test]
fn a_receiver_failing_for_a_while_gets_everything() {
    let scratch = Scratch::new("otlp-retry");
    let file = synth_pcap(CLI, &scratch, "rule-loss");
    for (protocol, transport) in [("grpc", "grpc"), ("http-protobuf", "http")] {
        let receiver = Receiver::start(&scratch, transport, &["--fail-first", "3"]);
        let (code, report, err) = replay(
            &file,
            &[
                "--otlp-endpoint",
                &receiver.url(transport),
                "--otlp-protocol",
                protocol,
                "--otlp-header",
                "x-tenant=lab",
            ],
        );
        assert_eq!(code, Some(0), "{transport}: {err}");
        assert!(err.contains("3 retries"), "{transport}: {err}");
        let received = receiver.received();
        let exporters = by_exporter(&received);
        assert_eq!(exporters.len(), 1);
        let records = exporters.values().next().unwrap();
        check_exporter(transport, records, &report.unwrap(), transport);
    }
}

#[test]
fn a_receiver_refusing_or_missing_is_an_error_after_the_report() {
    let scratch = Scratch::new("otlp-refused");
    let file = synth_pcap(CLI, &scratch, "clean");
    // Every row of the report's one interval, and the interval's own.
    let rows = |r: &Report| {
        let rows = roce_observer::export::IntervalRows::of(r);
        rows.qps.len()
            + rows.sides.len()
            + rows.buckets.len()
            + rows.pauses.len()
            + rows.findings.len()
            + 1
    };
    // Refused for good (INVALID_ARGUMENT, HTTP 400): no retry, every record lost.
    for (protocol, transport) in [("grpc", "grpc"), ("http-protobuf", "http")] {
        let receiver = Receiver::start(&scratch, transport, &["--refuse"]);
        let (code, report, err) = replay(
            &file,
            &[
                "--otlp-endpoint",
                &receiver.url(transport),
                "--otlp-protocol",
                protocol,
            ],
        );
        let report = report.expect("the report is printed first");
        assert_eq!(code, Some(1), "{transport}: {err}");
        let line = err.lines().last().unwrap();
        assert!(
            line.contains(&receiver.url(transport)) && line.contains("not delivered"),
            "{line}"
        );
        let n = rows(&report);
        assert!(n > 0);
        assert!(
            line.contains(&format!(": {n} of {n} records not delivered")),
            "{line}"
        );
        assert!(receiver.received().is_empty());
    }
    // Nobody listening: retried until the deadline, then an error; the report is whole.
    let (code, report, err) = replay(
        &file,
        &[
            "--otlp-endpoint",
            "http://127.0.0.1:9",
            "--otlp-timeout",
            "2s",
        ],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(report.is_some_and(|r| !r.flows.is_empty()));
    let line = err.lines().last().unwrap();
    assert!(
        line.contains("http://127.0.0.1:9") && line.contains("not delivered"),
        "{line}"
    );
    // Bad flags are refused before anything runs.
    for (flags, what) in [
        (&["--otlp-header", "novalue"][..], "NAME=VALUE"),
        (&["--otlp-protocol", "grpc"][..], "--otlp-endpoint"),
        (
            &["--otlp-endpoint", "collector:4317"][..],
            "give http://HOST:PORT",
        ),
        (
            &[
                "--otlp-endpoint",
                "http://127.0.0.1:9",
                "--otlp-header",
                "bad name=x",
            ][..],
            "header bad name",
        ),
        (
            &[
                "--otlp-endpoint",
                "http://127.0.0.1:9",
                "--otlp-ca",
                "/nonexistent.pem",
            ][..],
            "/nonexistent.pem",
        ),
    ] {
        let (code, report, err) = replay(&file, flags);
        assert_eq!(code, Some(2), "{flags:?}: {err}");
        assert!(report.is_none(), "{flags:?}: nothing runs");
        assert!(err.contains(what), "{flags:?}: {err}");
    }
}

/// A CA and a server certificate it signed for 127.0.0.1 (openssl): (CA, certificate, key).
fn certificates(scratch: &Scratch) -> (PathBuf, PathBuf, PathBuf) {
    let p = |n: &str| scratch.path(n);
    let ext = scratch.file(
        "leaf.ext",
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n\
         keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    );
    let openssl = |args: &[&str], key: &str, out: &str| {
        let (status, _, err) = output(
            Command::new("openssl")
                .args(args)
                .arg("-keyout")
                .arg(p(key))
                .arg("-out")
                .arg(p(out)),
        );
        assert!(status.success(), "openssl {args:?}: {err}");
    };
    let ca_subject = "/CN=roce-observer test CA";
    openssl(
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", ca_subject,
        ],
        "ca.key",
        "ca.pem",
    );
    openssl(
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
        ],
        "leaf.key",
        "leaf.csr",
    );
    let (status, _, err) = output(
        Command::new("openssl")
            .args(["x509", "-req", "-days", "2", "-in"])
            .arg(p("leaf.csr"))
            .arg("-CA")
            .arg(p("ca.pem"))
            .arg("-CAkey")
            .arg(p("ca.key"))
            .arg("-CAcreateserial")
            .arg("-extfile")
            .arg(&ext)
            .arg("-out")
            .arg(p("leaf.pem")),
    );
    assert!(status.success(), "openssl x509: {err}");
    (p("ca.pem"), p("leaf.pem"), p("leaf.key"))
}

#[test]
fn tls_with_the_named_ca_and_refused_without_it() {
    let scratch = Scratch::new("otlp-tls");
    let file = synth_pcap(CLI, &scratch, "clean");
    let (ca, cert, key) = certificates(&scratch);
    let receiver = Receiver::start(
        &scratch,
        "tls",
        &["--tls", cert.to_str().unwrap(), key.to_str().unwrap()],
    );
    for (protocol, transport) in [("grpc", "grpc"), ("http-protobuf", "http")] {
        let url = receiver.tls_url(transport);
        let (code, report, err) = replay(
            &file,
            &[
                "--otlp-endpoint",
                &url,
                "--otlp-protocol",
                protocol,
                "--otlp-ca",
                ca.to_str().unwrap(),
                "--otlp-header",
                "x-tenant=lab",
            ],
        );
        assert_eq!(code, Some(0), "{transport}: {err}");
        let received = receiver.received();
        let exporters = by_exporter(&received);
        let records: Vec<&Value> = exporters
            .values()
            .flatten()
            .copied()
            .filter(|r| r["transport"] == transport)
            .collect();
        check_exporter(transport, &records, &report.unwrap(), transport);
        // Without the CA the server is not trusted: nothing is sent, and the error says so.
        let (code, report, err) = replay(
            &file,
            &[
                "--otlp-endpoint",
                &url,
                "--otlp-protocol",
                protocol,
                "--otlp-timeout",
                "2s",
            ],
        );
        assert_eq!(code, Some(1), "{transport}: {err}");
        assert!(report.is_some());
        assert!(err.contains("not delivered"), "{transport}: {err}");
    }
}

/// `fabric` on records that went over OTLP: the receiver (the official protobufs) writes what
/// it accepted as OTLP/JSON lines, as a collector's file exporter does; read back into their
/// tables, they give the evidence the same replay's records directory gives (QPs, CNPs), and
/// `fabric` the same localizations.
#[test]
fn fabric_reads_records_sent_over_otlp_as_their_directory() {
    use roce_observer::analysis::fabric;
    let scratch = Scratch::new("otlp-fabric");
    let pcap = synth_pcap(CLI, &scratch, "demo");
    let otlp_json = scratch.path("collector.json");
    let receiver = Receiver::start(
        &scratch,
        "fabric",
        &["--otlp-json", otlp_json.to_str().unwrap()],
    );
    let records = scratch.path("records");
    let (code, report, err) = replay(
        &pcap,
        &[
            "--otlp-endpoint",
            &receiver.url("http"),
            "--otlp-protocol",
            "http-protobuf",
            "--records",
            records.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    let report = report.unwrap();
    let text = std::fs::read_to_string(&otlp_json).unwrap();
    let tables =
        roce_observer::export::otlp_json::tables_of(text.as_bytes(), "collector.json").unwrap();
    let sort = |mut v: Vec<fabric::QpEvidence>| {
        v.sort_by_key(|e| (e.src, e.dst, e.src_port, e.dest_qp));
        v
    };
    let evidence = |qp: &[u8], sides: &[u8]| {
        sort(fabric::merge(
            fabric::records_evidence(qp, "qp")
                .unwrap()
                .into_iter()
                .chain(
                    fabric::sides_windows(sides, "sides", None)
                        .unwrap()
                        .into_values()
                        .flatten(),
                ),
        ))
    };
    let read = |t: &str| std::fs::read(records.join(format!("{t}.jsonl"))).unwrap();
    let from_dir = evidence(&read("qp_intervals"), &read("connection_sides"));
    let from_otlp = evidence(&tables["qp_intervals"], &tables["connection_sides"]);
    assert!(from_dir.iter().any(|e| e.cnp > 0) && from_dir.iter().any(|e| e.lost > 0));
    assert_eq!(from_otlp, from_dir);
    // The command, on a star of the capture's hosts: the same localizations either way.
    let mut hosts: Vec<std::net::IpAddr> = report
        .flows
        .iter()
        .flat_map(|f| [f.src_ip, f.dst_ip])
        .collect();
    hosts.sort();
    hosts.dedup();
    let mut topo = String::from(
        "schema = \"roce-observer.topology/1\"\n\n[[node]]\nname = \"sw\"\nrole = \"leaf\"\n",
    );
    for (i, a) in hosts.iter().enumerate() {
        topo += &format!(
            "\n[[node]]\nname = \"h{i}\"\nrole = \"host\"\naddresses = [\"{a}\"]\n\n[[link]]\na = \"h{i}\"\nb = \"sw:p{i}\"\n"
        );
    }
    let topo = scratch.file("star.toml", &topo);
    let fabric_json = |input: &Path| {
        let (status, out, err) = output(
            Command::new(CLI)
                .args(["fabric", "--json", "--min-packets", "1", "--topology"])
                .arg(&topo)
                .arg(input),
        );
        assert!(status.success(), "{}: {err}", input.display());
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let (a, b) = (fabric_json(&otlp_json), fabric_json(&records));
    assert!(
        a["localizations"].as_array().is_some_and(|l| !l.is_empty()),
        "{a:#}"
    );
    assert_eq!(a, b);
    // A line that is not a request: named with its line.
    let bad =
        roce_observer::export::otlp_json::tables_of("{\"resourceLogs\": 1}\n".as_bytes(), "c.json")
            .unwrap_err();
    assert_eq!(
        bad.to_string(),
        "c.json line 1: no resourceLogs: not an OTLP/JSON logs request"
    );
}
