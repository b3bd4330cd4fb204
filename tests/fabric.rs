//! `roce-observer fabric` end to end: hosts' JSON reports of QPs that crossed a leaf-spine with
//! one lossy link, and the topology file; the link the generator made lossy is named first.
//! Bad input: one line, a non-zero exit.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use integration_tests::{Scratch, error_line, output};
use roce_observer::{
    analysis::fabric::{
        self, QpEvidence, Topology,
        sim::{self, Fault, Workload},
    },
    model::{Flow, Report, Source},
    render,
};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// A leaf-spine's topology file: `spines` spines, `leaves` leaves, two hosts per leaf (the
/// names and addresses `sim::leaf_spine` gives), every switch's hash known.
fn topology_file(spines: u32, leaves: u32) -> String {
    let mut t = String::from("schema = \"roce-observer.topology/1\"\n");
    let hash = |role: &str, seed: u32| {
        let function = if role == "leaf" {
            "crc32"
        } else {
            "crc16-ccitt"
        };
        format!("hash = {{ function = \"{function}\", seed = {seed} }}\n")
    };
    for i in 0..spines {
        t += &format!(
            "\n[[node]]\nname = \"s{i}\"\nrole = \"spine\"\n{}",
            hash("spine", i)
        );
    }
    for j in 0..leaves {
        t += &format!(
            "\n[[node]]\nname = \"l{j}\"\nrole = \"leaf\"\n{}",
            hash("leaf", 100 + j)
        );
        for h in 2 * j..2 * j + 2 {
            t += &format!(
                "\n[[node]]\nname = \"h{h}\"\nrole = \"host\"\naddresses = [\"{}\"]\n",
                sim::host_address(h)
            );
            t += &format!("\n[[link]]\na = \"h{h}:eth0\"\nb = \"l{j}:down{h}\"\n");
        }
        for i in 0..spines {
            t += &format!("\n[[link]]\na = \"l{j}:up{i}\"\nb = \"s{i}:down{j}\"\n");
        }
    }
    t
}

/// Each host's report: the QPs it sent (as its egress saw them: packets and resends) and, for
/// every other QP it received, the receiver's view (holes); a QP is in two reports.
fn reports(truth: &Topology, ev: &[roce_observer::analysis::fabric::QpEvidence]) -> Vec<Report> {
    let hosts: Vec<std::net::IpAddr> = truth
        .nodes
        .iter()
        .flat_map(|n| n.addresses.clone())
        .collect();
    hosts
        .iter()
        .map(|h| {
            let mut r = roce_observer::aggregate::Aggregate::new()
                .report(Source::pcap(vec![format!("{h}.pcap")], Vec::new()), 10.0);
            for e in ev.iter().filter(|e| e.src == *h || e.dst == *h) {
                let mut f = Flow::empty(e.src, e.dst, e.src_port, e.dest_qp);
                f.packets = e.packets;
                f.ecn.ce = e.ce;
                if e.src == *h {
                    f.psn.retransmissions = e.lost;
                } else {
                    f.psn.missing = e.lost;
                }
                r.flows.push(f);
            }
            r
        })
        .collect()
}

fn write_reports(dir: &Scratch, reports: &[Report]) -> Vec<std::path::PathBuf> {
    reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let path = dir.path(&format!("host{i}.json"));
            let mut out = Vec::new();
            render::json::write(r, &mut out).unwrap();
            std::fs::write(&path, out).unwrap();
            path
        })
        .collect()
}

/// A scratch directory `name` with a 2-spine, 3-leaf topology file and the hosts' reports of
/// 400 QPs over it, with the faults `faults` picks on the topology: the directory, the file,
/// the reports.
fn lab(
    name: &str,
    seed: u64,
    faults: impl Fn(&Topology) -> Vec<Fault>,
) -> (Scratch, PathBuf, Vec<PathBuf>) {
    let dir = Scratch::new(&format!("fabric-{name}"));
    let text = topology_file(2, 3);
    let topo_path = dir.file("fabric.toml", &text);
    let truth = Topology::parse(&text, "fabric.toml").unwrap();
    let work = Workload {
        qps: 400,
        packets: 2000,
        background: 0.0,
        seed,
    };
    let ev: Vec<_> = sim::evidence(&truth, &work, &faults(&truth))
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    let files = write_reports(&dir, &reports(&truth, &ev));
    (dir, topo_path, files)
}

/// `roce-observer fabric ARGS --topology TOPO FILES...`: its exit status, stdout and stderr.
fn fabric(
    args: &[&str],
    topo: &Path,
    files: &[PathBuf],
) -> (std::process::ExitStatus, String, String) {
    output(
        Command::new(CLI)
            .arg("fabric")
            .args(args)
            .arg("--topology")
            .arg(topo)
            .args(files),
    )
}

#[test]
fn the_lossy_link_is_named_from_the_hosts_reports() {
    let (_dir, topo, files) = lab("lossy", 11, |t| {
        let link = t
            .link_between(t.node("l1").unwrap(), t.node("s0").unwrap())
            .unwrap();
        vec![Fault {
            link,
            loss: 0.01,
            ce: 0.002,
        }]
    });
    let (status, out, err) = fabric(&["--json"], &topo, &files);
    assert!(status.success(), "{err}");
    let json: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["schema"], "roce-observer.fabric/1");
    for (i, signal) in ["loss", "ce"].into_iter().enumerate() {
        let l = &json["localizations"][i];
        assert_eq!(l["signal"], signal);
        assert_eq!(l["verdict"], "found", "{l}");
        // Every QP once, though two hosts reported it.
        assert_eq!(l["qps"], 400, "{l}");
        assert_eq!(l["paths"]["hashed"], 400, "{l}");
        assert_eq!(l["suspects"][0]["kind"], "link", "{l}");
        assert_eq!(l["suspects"][0]["name"], "l1:up0 - s0:down1", "{l}");
    }
    // The table says the same.
    let (status, out, err) = fabric(&["--signal", "loss"], &topo, &files);
    assert!(status.success(), "{err}");
    assert!(
        out.contains("  found:\n  1. link l1:up0 - s0:down1:"),
        "{out}"
    );
}

#[test]
fn a_clean_fabric_names_nothing() {
    let (_dir, topo, files) = lab("clean", 12, |_| Vec::new());
    let (status, out, err) = fabric(&["--signal", "loss"], &topo, &files);
    assert!(status.success(), "{err}");
    assert!(out.contains("  clean: none of 400 QPs shows loss"), "{out}");
}

#[test]
fn bad_inputs_are_one_line_errors() {
    let dir = Scratch::new("fabric-bad");
    let topo = dir.file("fabric.toml", &topology_file(1, 1));
    let bad_topo = dir.file(
        "bad.toml",
        "schema = \"roce-observer.topology/1\"\n[[link]]\na = \"x\"\nb = \"y\"\n",
    );
    let not_report = dir.file("not-a-report.json", "{\"hello\": 1}");
    let report = dir.path("r.json");
    let mut out = Vec::new();
    render::json::write(
        &roce_observer::aggregate::Aggregate::new().report(Source::pcap(vec![], vec![]), 1.0),
        &mut out,
    )
    .unwrap();
    std::fs::write(&report, out).unwrap();
    let empty = dir.path("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let p = |p: &Path| p.display().to_string();
    let cases: [(Vec<String>, String); 5] = [
        (
            vec!["--topology".into(), p(&topo), p(&empty)],
            format!(
                "roce-observer: error: {} is a directory without qp_intervals.jsonl",
                p(&empty)
            ),
        ),
        (
            vec!["--topology".into(), p(&dir.path("none.toml")), p(&report)],
            format!(
                "roce-observer: error: cannot read the topology file {}: ",
                p(&dir.path("none.toml"))
            ),
        ),
        (
            vec!["--topology".into(), p(&bad_topo), p(&report)],
            format!(
                "roce-observer: error: topology {}: link 1 (x - y): no node \"x\"",
                p(&bad_topo)
            ),
        ),
        (
            vec!["--topology".into(), p(&topo), p(&not_report)],
            format!(
                "roce-observer: error: {} is not a roce-observer JSON report: ",
                p(&not_report)
            ),
        ),
        (
            vec!["--topology".into(), p(&topo), p(&dir.path("gone.json"))],
            format!(
                "roce-observer: error: cannot read the report {}: ",
                p(&dir.path("gone.json"))
            ),
        ),
    ];
    for (args, want) in cases {
        let (status, out, err) = output(Command::new(CLI).arg("fabric").args(&args));
        assert_eq!(status.code(), Some(1), "{args:?}: {err}");
        assert!(out.is_empty(), "{out}");
        let line = error_line(&err);
        assert!(
            line.starts_with(&want),
            "{line:?} should start with {want:?}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    // No report at all: a usage error.
    let (status, _, err) = output(Command::new(CLI).args(["fabric", "--topology"]).arg(&topo));
    assert_eq!(status.code(), Some(2), "{err}");
}

/// A capture's fleet records (`replay --records`) give `fabric` the evidence its JSON report
/// gives (the report's flows are the reference).
#[test]
fn records_give_the_evidence_their_report_gives() {
    let dir = Scratch::new("fabric-records");
    let pcap = dir.path("demo.pcap");
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["synth", "--scenario", "demo", "-o"])
            .arg(&pcap),
    );
    assert!(status.success(), "{err}");
    let (status, json, err) = output(Command::new(CLI).arg("replay").arg(&pcap).arg("--json"));
    assert!(status.success(), "{err}");
    let records = dir.path("records");
    let (status, _, err) = output(
        Command::new(CLI)
            .arg("replay")
            .arg(&pcap)
            .arg("--records")
            .arg(&records),
    );
    assert!(status.success(), "{err}");
    let report = fabric::read_report(json.as_bytes(), "report").unwrap();
    let sort = |mut v: Vec<QpEvidence>| {
        v.sort_by_key(|e| (e.src, e.dst, e.src_port, e.dest_qp));
        v
    };
    let from_report = sort(fabric::merge(fabric::evidence_of(&report)));
    let table = records.join("qp_intervals.jsonl");
    let text = std::fs::read_to_string(&table).unwrap();
    let from_records = sort(fabric::merge(
        fabric::records_evidence(text.as_bytes(), "qp_intervals.jsonl").unwrap(),
    ));
    assert!(from_report.iter().any(|e| e.lost > 0) && from_report.iter().any(|e| e.ce > 0));
    assert_eq!(from_records, from_report);
    // A line that is not a row: named with its line.
    let bad = fabric::records_evidence("{\"src_addr\": 1}\n".as_bytes(), "x.jsonl").unwrap_err();
    assert_eq!(
        bad.to_string(),
        "x.jsonl line 1: no src_addr: not a qp_intervals row"
    );
}
