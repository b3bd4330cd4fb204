//! Fleet records (docs/export.md): the schema and the docs are the record tables', and the
//! records of every real capture and generated scenario load with zero errors into a real
//! ClickHouse engine (chdb, in process, from the tools virtualenv), where the documented
//! queries give what the JSON report says.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use integration_tests::{Scratch, every_capture, generated_file, output, synth_pcap};
use roce_observer::{
    export::{ChType, TABLES, markdown_tables, schema_sql, tables},
    model::Report,
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

#[test]
fn the_schema_and_the_docs_are_the_record_tables() {
    let from = "the record tables";
    generated_file(
        "deploy/clickhouse/schema.sql",
        None,
        &schema_sql("roce", 30),
        from,
        "export",
    );
    generated_file(
        "docs/export.md",
        Some(("<!-- records:begin -->\n", "<!-- records:end -->")),
        &markdown_tables(),
        from,
        "export",
    );
}

/// The records of a replay, and its report.
struct Replayed {
    name: String,
    dir: PathBuf,
    report: Report,
}

fn replay(file: &Path, scratch: &Scratch) -> Replayed {
    let name = file.file_stem().unwrap().to_string_lossy().to_string();
    let dir = scratch.path(&format!("{name}.records"));
    let (status, out, err) = output(
        Command::new(CLI)
            .arg("replay")
            .arg(file)
            .args(["--json", "--no-progress", "--records"])
            .arg(&dir),
    );
    assert!(status.success(), "replay {}: {err}", file.display());
    let report: Report = serde_json::from_str(&out).expect("the report");
    Replayed { name, dir, report }
}

/// The tables `fabric --clickhouse` reads.
const FABRIC_TABLES: [&str; 3] = ["qp_intervals", "connection_sides", "pauses"];

/// `fabric`'s readers give the same evidence from ClickHouse's answers to `fabric --clickhouse`'s
/// queries as from the records files: every row comes back once, in ClickHouse's JSON
/// (64-bit integers quoted, its own columns beside the records').
fn fabric_reads_what_the_files_hold(r: &Replayed, got: &Value) {
    use roce_observer::analysis::fabric;
    let name = &r.name;
    let lines = |table: &str| -> String {
        let answer = got["answers"][format!("fabric-{table}")]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no answer for {table}"));
        assert_eq!(
            answer.len(),
            rows(&r.dir, table).len(),
            "{name}: {table}: every row once"
        );
        answer.iter().map(|row| format!("{row}\n")).collect()
    };
    let file = |table: &str| std::fs::read_to_string(r.dir.join(format!("{table}.jsonl"))).unwrap();
    let evidence = |qps: &str, sides: &str| {
        fabric::merge(
            fabric::records_windows(qps.as_bytes(), "qp_intervals", None)
                .unwrap()
                .into_values()
                .chain(
                    fabric::sides_windows(sides.as_bytes(), "connection_sides", None)
                        .unwrap()
                        .into_values(),
                )
                .flatten(),
        )
    };
    assert_eq!(
        evidence(&lines("qp_intervals"), &lines("connection_sides")),
        evidence(&file("qp_intervals"), &file("connection_sides")),
        "{name}: fabric's evidence"
    );
    assert_eq!(
        fabric::pauses_windows(lines("pauses").as_bytes(), "pauses", None).unwrap(),
        fabric::pauses_windows(file("pauses").as_bytes(), "pauses", None).unwrap(),
        "{name}: fabric's pauses"
    );
}

/// The rows of one table file, as JSON objects.
fn rows(dir: &Path, table: &str) -> Vec<serde_json::Map<String, Value>> {
    std::fs::read_to_string(dir.join(format!("{table}.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object per line"))
        .collect()
}

/// Loads each replay's records into a fresh `roce` database of one chdb session and runs
/// every query on them: per replay, the row counts per table and each query's rows.
fn clickhouse(replays: &[Replayed], queries: &BTreeMap<String, String>) -> Value {
    let loads = replays
        .iter()
        .map(|r| (r.name.clone(), vec![r.dir.clone()]))
        .collect();
    integration_tests::chdb_answers(&loads, queries)
}

fn num(v: &Value) -> u64 {
    // ClickHouse's JSON writes 64-bit integers as strings.
    match v {
        Value::String(s) => s.parse().expect("a number"),
        other => other.as_u64().expect("a number"),
    }
}

fn text(v: &Value) -> String {
    v.as_str().expect("a string").to_string()
}

/// (src, dst, dest QP, source port) -> (CE, packets), summed over directions and vantages.
fn ce_by_qp(r: &Report) -> BTreeMap<(String, String, u64, u64), (u64, u64)> {
    let mut m: BTreeMap<_, (u64, u64)> = BTreeMap::new();
    for f in &r.flows {
        let e = m
            .entry((
                f.src_ip.to_string(),
                f.dst_ip.to_string(),
                u64::from(f.dest_qp),
                u64::from(f.udp_src_port),
            ))
            .or_default();
        e.0 += f.ecn.ce;
        e.1 += f.packets;
    }
    m
}

/// The ACK latency histogram of every connection side, merged: (p99 bucket bound, samples).
fn ack_p99(r: &Report) -> Option<(u64, u64)> {
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    for c in &r.connections {
        for side in [&c.a, &c.b] {
            for b in side.latency.ack.iter().flat_map(|l| &l.buckets) {
                *counts.entry(b.hi_ns).or_default() += b.count;
            }
        }
    }
    let total: u64 = counts.values().sum();
    let mut cumulative = 0;
    for (hi, n) in &counts {
        cumulative += n;
        if cumulative * 100 >= total * 99 && total > 0 {
            return Some((*hi, total));
        }
    }
    None
}

#[test]
fn records_load_into_clickhouse_as_the_report_says() {
    let scratch = Scratch::new("records");
    let replays: Vec<Replayed> = every_capture(
        CLI,
        &scratch,
        "records_load_into_clickhouse_as_the_report_says",
    )
    .iter()
    .map(|f| replay(f, &scratch))
    .collect();
    assert!(replays.len() >= 20, "{} replays", replays.len());
    let queries = integration_tests::documented_queries();
    assert_eq!(
        queries.keys().collect::<Vec<_>>(),
        [
            "ack-p99-per-job",
            "loss-by-host-pair",
            "pauses-by-source",
            "peer-ranks",
            "top-qps-by-ce"
        ]
    );
    // And the queries `fabric --clickhouse` reads the records with, over all time.
    let mut queries = queries;
    for table in FABRIC_TABLES {
        queries.insert(
            format!("fabric-{table}"),
            roce_observer::source::clickhouse::records_query("roce", table, 0, u64::MAX),
        );
    }
    let answers = clickhouse(&replays, &queries);
    let (mut with_buckets, mut with_pauses, mut with_findings) = (0, 0, 0);
    for r in &replays {
        let name = &r.name;
        let got = &answers[name];
        // Every row loaded, and each table's rows numbered 0, 1, 2... in one interval.
        let sides = integration_tests::connection_sides_seen(&r.report) as u64;
        for table in TABLES {
            let rows = rows(&r.dir, table);
            assert_eq!(
                num(&got["counts"][table]),
                rows.len() as u64,
                "{name}: {table} rows loaded"
            );
            let info = tables().into_iter().find(|t| t.name == table).unwrap();
            for (i, row) in rows.iter().enumerate() {
                assert_eq!(row["seq"].as_u64(), Some(i as u64), "{name}: {table} seq");
                // Exactly the table's columns, each value within its type (ClickHouse would
                // wrap a number too large for its column without a word).
                assert_eq!(row.len(), info.columns.len(), "{name}: {table} columns");
                for c in &info.columns {
                    let v = &row[c.name];
                    let max = match c.ty {
                        ChType::UInt8 => Some(u64::from(u8::MAX)),
                        ChType::UInt16 => Some(u64::from(u16::MAX)),
                        ChType::UInt32 => Some(u64::from(u32::MAX)),
                        ChType::UInt64 | ChType::Count => Some(u64::MAX),
                        _ => None,
                    };
                    if let Some(max) = max {
                        let n = v
                            .as_u64()
                            .unwrap_or_else(|| panic!("{table}.{}: {v}", c.name));
                        assert!(n <= max, "{name}: {table}.{} = {n}", c.name);
                    }
                }
                assert_eq!(row["interval_seq"].as_u64(), Some(0), "{name}: {table}");
                assert_eq!(row["schema_version"].as_u64(), Some(1), "{name}: {table}");
            }
        }
        assert_eq!(
            num(&got["counts"]["qp_intervals"]),
            r.report.flows.len() as u64,
            "{name}: a row per flow"
        );
        fabric_reads_what_the_files_hold(r, got);
        // No QP table read, no process: no side names its peer's (tests/jobs.rs has them).
        assert_eq!(
            got["answers"]["peer-ranks"],
            serde_json::json!([]),
            "{name}"
        );
        assert_eq!(
            num(&got["counts"]["connection_sides"]),
            sides,
            "{name}: a row per connection side seen"
        );
        assert_eq!(
            num(&got["counts"]["findings"]),
            r.report.findings.len() as u64,
            "{name}: a row per finding"
        );
        let buckets: usize = r
            .report
            .connections
            .iter()
            .flat_map(|c| [&c.a, &c.b])
            .flat_map(|side| [&side.latency.ack, &side.latency.read])
            .flatten()
            .map(|l| l.buckets.len())
            .sum::<usize>()
            + r.report
                .latency
                .iter()
                .map(|s| s.summary.buckets.len())
                .sum::<usize>();
        assert_eq!(
            num(&got["counts"]["latency_buckets"]),
            buckets as u64,
            "{name}: a row per latency bucket"
        );
        let pauses: usize = r
            .report
            .pfc
            .iter()
            .flat_map(|p| &p.sources)
            .map(|s| s.priorities.len() + usize::from(s.link_pause.is_some()))
            .sum();
        assert_eq!(
            num(&got["counts"]["pauses"]),
            pauses as u64,
            "{name}: a row per PAUSE source and priority"
        );
        // The interval's own row counts the others.
        let interval = &rows(&r.dir, "intervals")[0];
        for (column, table) in [
            ("qp_rows", "qp_intervals"),
            ("connection_side_rows", "connection_sides"),
            ("latency_bucket_rows", "latency_buckets"),
            ("pause_rows", "pauses"),
            ("finding_rows", "findings"),
        ] {
            assert_eq!(
                interval[column].as_u64(),
                Some(num(&got["counts"][table])),
                "{name}: intervals.{column}"
            );
        }
        with_buckets += usize::from(buckets > 0);
        with_pauses += usize::from(num(&got["counts"]["pauses"]) > 0);
        with_findings += usize::from(!r.report.findings.is_empty());

        // Top QPs by CE: each row is the report's, and the CE column is the report's top 20.
        let want = ce_by_qp(&r.report);
        let top = got["answers"]["top-qps-by-ce"].as_array().unwrap();
        for row in top {
            let key = (
                text(&row["src_addr"]),
                text(&row["dst_addr"]),
                num(&row["dest_qp"]),
                num(&row["src_port"]),
            );
            assert_eq!(
                Some(&(num(&row["ce"]), num(&row["packets"]))),
                want.get(&key),
                "{name}: top-qps-by-ce {key:?}"
            );
        }
        let mut ranked: Vec<(u64, u64)> = want.values().copied().collect();
        ranked.sort_by(|a, b| b.cmp(a));
        ranked.truncate(20);
        let got_ranked: Vec<(u64, u64)> = top
            .iter()
            .map(|row| (num(&row["ce"]), num(&row["packets"])))
            .collect();
        assert_eq!(got_ranked, ranked, "{name}: top-qps-by-ce order");

        // Loss by host pair: every pair, every figure.
        let mut pairs: BTreeMap<(String, String), [u64; 4]> = BTreeMap::new();
        for f in &r.report.flows {
            let e = pairs
                .entry((f.src_ip.to_string(), f.dst_ip.to_string()))
                .or_default();
            e[0] += f.packets;
            e[1] += f.psn.missing;
            e[2] += f.psn.retransmissions;
            e[3] += f.ops.nak;
        }
        let got_pairs: BTreeMap<(String, String), [u64; 4]> = got["answers"]["loss-by-host-pair"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                (
                    (text(&row["src_addr"]), text(&row["dst_addr"])),
                    [
                        num(&row["packets"]),
                        num(&row["missing"]),
                        num(&row["resent"]),
                        num(&row["naks"]),
                    ],
                )
            })
            .collect();
        assert_eq!(got_pairs, pairs, "{name}: loss-by-host-pair");

        // ACK p99 from the merged histograms.
        let got_p99: Vec<(u64, u64)> = got["answers"]["ack-p99-per-job"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| (num(&row["p99_ns"]), num(&row["samples"])))
            .collect();
        assert_eq!(
            got_p99,
            ack_p99(&r.report).into_iter().collect::<Vec<_>>(),
            "{name}: ack-p99-per-job"
        );

        // Pauses per source and priority.
        let mut pauses: BTreeMap<(String, u64), (u64, u64)> = BTreeMap::new();
        for s in r.report.pfc.iter().flat_map(|p| &p.sources) {
            for p in &s.priorities {
                let e = pauses
                    .entry((s.src_mac.clone(), p.priority.into()))
                    .or_default();
                e.0 += p.counts.frames;
                e.1 += p.counts.quanta;
            }
            if let Some(l) = &s.link_pause {
                let e = pauses.entry((s.src_mac.clone(), 255)).or_default();
                e.0 += l.frames;
                e.1 += l.quanta;
            }
        }
        let got_pauses: BTreeMap<(String, u64), (u64, u64)> = got["answers"]["pauses-by-source"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                (
                    (text(&row["src_mac"]), num(&row["priority"])),
                    (num(&row["frames"]), num(&row["quanta"])),
                )
            })
            .collect();
        assert_eq!(got_pauses, pauses, "{name}: pauses-by-source");
    }
    // The corpus exercises every table.
    assert!(
        with_buckets > 0 && with_pauses > 0 && with_findings > 0,
        "latency buckets in {with_buckets}, pauses in {with_pauses}, findings in {with_findings} replays"
    );
}

#[test]
fn a_records_directory_that_is_not_empty_or_a_file_is_refused() {
    let scratch = Scratch::new("records-refused");
    let capture = synth_pcap(CLI, &scratch, "clean");
    let full = scratch.path("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("keep.txt"), "mine").unwrap();
    for (dir, what) in [
        (full.clone(), "exists and is not empty"),
        (capture.clone(), "is a file"),
        (scratch.path("no/such/parent"), "cannot create it"),
    ] {
        let (status, out, err) = output(
            Command::new(CLI)
                .arg("replay")
                .arg(&capture)
                .arg("--records")
                .arg(&dir),
        );
        assert_eq!(status.code(), Some(2), "{}: {err}", dir.display());
        assert!(out.is_empty(), "nothing runs: {out}");
        let line = err.trim();
        assert_eq!(line.lines().count(), 1, "one line: {err}");
        assert!(line.contains("--records") && line.contains(what), "{line}");
    }
    assert_eq!(
        std::fs::read_to_string(full.join("keep.txt")).unwrap(),
        "mine",
        "nothing lost"
    );
    assert!(
        std::fs::metadata(&capture).unwrap().len() > 24,
        "the capture kept"
    );
}
