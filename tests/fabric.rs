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
        // The QPs behind it, most bad packets first.
        let named = l["suspects"][0]["qps_named"].as_array().unwrap();
        assert!(!named.is_empty() && named.len() <= 20, "{l}");
        assert!(named[0]["bad_packets"].as_u64() >= named[named.len() - 1]["bad_packets"].as_u64());
    }
    // In the findings' usual format: the link, for each signal; the other rules passed.
    let f = json["findings"].as_array().unwrap();
    assert_eq!(f.len(), 2, "{json}");
    assert!(
        f.iter()
            .all(|f| f["rule"] == "fabric-link" && f["evidence"]["suspect"] == "l1:up0 - s0:down1")
    );
    assert_eq!(f[0]["severity"], "critical");
    assert_eq!(f[1]["severity"], "warning");
    let checks: Vec<(&str, &str)> = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["rule"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        checks,
        [
            ("fabric-link", "fired"),
            ("fabric-switch", "passed"),
            ("fabric-host", "passed")
        ]
    );
    // The table says the same.
    let (status, out, err) = fabric(&["--signal", "loss"], &topo, &files);
    assert!(status.success(), "{err}");
    assert!(
        out.contains("  found:\n  1. link l1:up0 - s0:down1:"),
        "{out}"
    );
    assert!(
        out.contains("link l1:up0 - s0:down1 loses packets [fabric-link]"),
        "{out}"
    );
    // The page too; never over an input.
    let page = _dir.path("fabric.html");
    let page_arg = page.display().to_string();
    let (status, _, err) = fabric(&["--html", &page_arg], &topo, &files);
    assert!(status.success(), "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("class=\"link suspect\""), "{html}");
    let topo_arg = topo.display().to_string();
    let (status, _, err) = fabric(&["--html", &topo_arg], &topo, &files);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        error_line(&err).contains("is an input of this run"),
        "{err}"
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
    let sides = std::fs::read_to_string(records.join("connection_sides.jsonl")).unwrap();
    let from_records = sort(fabric::merge(
        fabric::records_evidence(text.as_bytes(), "qp_intervals.jsonl")
            .unwrap()
            .into_iter()
            .chain(
                fabric::sides_windows(sides.as_bytes(), "connection_sides.jsonl", None)
                    .unwrap()
                    .into_values()
                    .flatten(),
            ),
    ));
    // (The congested QP's CNPs go to the direction they answer, from the sides' table as
    // from the report's connections.)
    assert!(from_report.iter().any(|e| e.lost > 0) && from_report.iter().any(|e| e.ce > 0));
    assert!(from_report.iter().any(|e| e.cnp > 0));
    assert_eq!(from_records, from_report);
    // A line that is not a row: named with its line.
    let bad = fabric::records_evidence("{\"src_addr\": 1}\n".as_bytes(), "x.jsonl").unwrap_err();
    assert_eq!(
        bad.to_string(),
        "x.jsonl line 1: no src_addr: not a qp_intervals row"
    );
}

/// `topology_file` without the switches' hashes (paths unknown), each switch with the address
/// it answers traces from: the text and each switch's address.
fn untraced_topology(
    spines: u32,
    leaves: u32,
) -> (String, std::collections::HashMap<String, String>) {
    let mut addresses = std::collections::HashMap::new();
    let mut out = String::new();
    let mut name = String::new();
    for line in topology_file(spines, leaves).lines() {
        if line.starts_with("hash = ") {
            continue;
        }
        out += line;
        out += "\n";
        if let Some(n) = line.strip_prefix("name = ") {
            name = n.trim_matches('"').to_string();
        }
        if line == "role = \"spine\"" || line == "role = \"leaf\"" {
            let a = format!("198.19.{}.1", addresses.len());
            out += &format!("addresses = [\"{a}\"]\n");
            addresses.insert(name.clone(), a);
        }
    }
    (out, addresses)
}

/// Sidecars' JSON lines (`run --jsonl`), each QP at its receiver over two intervals, and the
/// paths `trace` found: with the paths, the lossy link is named on switches whose hashes
/// nobody gave; without them, the evidence cannot tell.
#[test]
fn sidecar_lines_and_traced_paths_are_read() {
    let dir = Scratch::new("fabric-traced");
    let (text, switch_addr) = untraced_topology(2, 3);
    let topo_path = dir.file("fabric.toml", &text);
    let truth = Topology::parse(&text, "fabric.toml").unwrap();
    let lossy = truth
        .link_between(truth.node("l1").unwrap(), truth.node("s0").unwrap())
        .unwrap();
    let work = Workload {
        qps: 400,
        packets: 2000,
        background: 0.0,
        seed: 21,
    };
    let ev = sim::evidence(
        &truth,
        &work,
        &[Fault {
            link: lossy,
            loss: 0.01,
            ce: 0.0,
        }],
    );
    // Each receiver's lines: every QP's counts split over two intervals; a rest series
    // holding a loss on the first host's.
    let mut files = Vec::new();
    let receivers: std::collections::BTreeSet<std::net::IpAddr> =
        ev.iter().map(|(e, _)| e.dst).collect();
    for (i, host) in receivers.iter().enumerate() {
        let mut lines = String::new();
        for half in 0..2u64 {
            let qps: Vec<serde_json::Value> = ev
                .iter()
                .filter(|(e, _)| e.dst == *host)
                .map(|(e, _)| {
                    let part = |n: u64| if half == 0 { n / 2 } else { n - n / 2 };
                    serde_json::json!({
                        "src": e.src.to_string(), "dst": e.dst.to_string(), "qp": e.dest_qp,
                        "sport": e.src_port, "dir": "rx", "mirror": "",
                        "packets": part(e.packets), "bytes": 0, "ce_packets": part(e.ce),
                        "cnp_packets": 0, "nak_packets": 0, "rnr_nak_packets": 0,
                        "psn_gaps": part(e.lost), "psn_missing": part(e.lost),
                        "retransmissions": 0,
                    })
                })
                .collect();
            let rest_lost = u64::from(i == 0 && half == 0) * 3;
            let line = serde_json::json!({
                "time": half, "qps": qps,
                "rest": { "packets": 1000, "bytes": 0, "ce_packets": 0, "cnp_packets": 0,
                          "nak_packets": 0, "rnr_nak_packets": 0, "psn_gaps": rest_lost,
                          "psn_missing": rest_lost, "retransmissions": 0 },
            });
            lines += &format!("{line}\n");
        }
        files.push(dir.file(&format!("h{i}.jsonl"), &lines));
    }
    // The traces: each QP's routers, then the destination's answer.
    let traces: Vec<serde_json::Value> = ev
        .iter()
        .map(|(e, path)| {
            let mut hops: Vec<serde_json::Value> = path[1..path.len() - 1]
                .iter()
                .enumerate()
                .map(|(i, node)| {
                    serde_json::json!({"ttl": i + 1, "address": switch_addr[node],
                                       "rtt_us": 50, "answer": "time-exceeded"})
                })
                .collect();
            hops.push(
                serde_json::json!({"ttl": path.len() - 1, "address": e.dst.to_string(),
                                         "rtt_us": 60, "answer": "reached"}),
            );
            serde_json::json!({"src": e.src.to_string(), "dst": e.dst.to_string(),
                               "sport": e.src_port, "dscp": 26, "dest_qp": e.dest_qp,
                               "hops": hops, "end": "reached"})
        })
        .collect();
    let paths = dir.file(
        "paths.json",
        &serde_json::json!({"schema": "roce-observer.trace/1", "traces": traces}).to_string(),
    );

    let (status, out, err) = fabric(&["--signal", "loss", "--json"], &topo_path, &files);
    assert!(status.success(), "{err}");
    assert!(
        err.contains("packets of QPs in the sidecars' rest series (3 lost, 0 CE) cannot be placed"),
        "{err}"
    );
    let l: serde_json::Value = serde_json::from_str(&out).unwrap();
    let l = &l["localizations"][0];
    assert_eq!(l["qps"], 400, "{l}");
    // The QPs within a leaf have one path; the others' split between the spines.
    assert!(l["paths"]["candidates"].as_u64().unwrap() > 300, "{l}");
    assert_eq!(l["verdict"], "not_enough_evidence", "{l}");

    let mut args = vec!["--signal", "loss", "--json", "--paths"];
    let paths_arg = paths.display().to_string();
    args.push(&paths_arg);
    let (status, out, err) = fabric(&args, &topo_path, &files);
    assert!(status.success(), "{err}");
    let l: serde_json::Value = serde_json::from_str(&out).unwrap();
    let l = &l["localizations"][0];
    assert_eq!(l["paths"]["known"], 400, "{l}");
    assert_eq!(l["left_out"]["traces_not_on_the_topology"], 0, "{l}");
    assert_eq!(l["verdict"], "found", "{l}");
    assert_eq!(l["suspects"][0]["name"], "l1:up0 - s0:down1", "{l}");

    // A trace file that is not one: one line.
    let (status, _, err) = fabric(
        &["--paths", &files[0].display().to_string()],
        &topo_path,
        &files,
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        error_line(&err).contains("is not a trace file (trace --json)"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// `trace` probes only unicast addresses of other hosts, at a bounded rate: anything else is
/// refused before a probe is sent (no root needed to see it).
#[test]
fn trace_refuses_what_it_may_not_probe() {
    let cases: [(&[&str], i32, &str); 5] = [
        (
            &["--flow", "any,49152,224.0.0.1"],
            1,
            "trace to 224.0.0.1: refused: not a unicast address of another host",
        ),
        (
            &["--flow", "any,49152,127.0.0.1"],
            1,
            "trace to 127.0.0.1: refused: not a unicast address of another host",
        ),
        (
            &["--flow", "2001:db8::1,49152,198.18.0.1"],
            1,
            "refused: the source and destination are of different IP versions",
        ),
        (
            &["--flow", "any,49152,198.18.0.1", "--rate", "5000"],
            2,
            "--rate 5000: between 1 and 1000 probes a second",
        ),
        (&["--flow", "198.18.0.1"], 2, "expected SRC,SPORT,DST"),
    ];
    for (args, code, want) in cases {
        let (status, out, err) = output(Command::new(CLI).arg("trace").args(args));
        assert_eq!(status.code(), Some(code), "{args:?}: {err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains(want), "{args:?}: {err:?} should say {want:?}");
    } // A report none of whose QP directions leaves from this host: nothing to trace.
    let dir = Scratch::new("trace-report");
    let lines = dir.file(
        "h9.jsonl",
        r#"{"qps":[{"src":"198.18.99.1","dst":"198.18.99.2","qp":17,"sport":49152,"dir":"rx","mirror":"","packets":10,"ce_packets":0,"psn_missing":0,"retransmissions":0}],"rest":{"packets":0,"ce_packets":0,"psn_missing":0,"retransmissions":0}}"#,
    );
    let (status, out, err) = output(Command::new(CLI).args(["trace", "--report"]).arg(&lines));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        error_line(&err).contains("no QP direction in it leaves from this host's addresses"),
        "{err}"
    );
}

/// `roce-observer topology --lldp`: real lldpd output (recorded in a netns lab) gives the hosts'
/// links to their leaves, merged into a file of the spines, the leaves' uplinks and the hosts'
/// addresses; `fabric` reads the result. A contradiction is one line.
#[test]
fn lldp_neighbours_give_the_host_links() {
    let dir = Scratch::new("fabric-lldp");
    let fixtures = integration_tests::workspace_root().join("tests/fixtures/lldp");
    let base = dir.file(
        "base.toml",
        "schema = \"roce-observer.topology/1\"\n\n\
         [[node]]\nname = \"s0\"\nrole = \"spine\"\n\n\
         [[node]]\nname = \"h1\"\nrole = \"host\"\naddresses = [\"198.18.1.2\"]\n\n\
         [[link]]\na = \"leaf0:up0\"\nb = \"s0:down0\"\n\n\
         [[link]]\na = \"leaf1:up0\"\nb = \"s0:down1\"\n",
    );
    let lldp = |host: &str, file: &str| format!("{host}={}", fixtures.join(file).display());
    let (status, out, err) = output(
        Command::new(CLI)
            .args(["topology", "--base"])
            .arg(&base)
            .args(["--lldp", &lldp("h0", "h0-one-nic.json")])
            .args(["--lldp", &lldp("h1", "h1-two-nics.json")])
            .args(["--lldp", &lldp("h3", "h3-no-neighbour.json")]),
    );
    assert!(status.success(), "{err}");
    assert!(err.contains("warning: h3 has no LLDP neighbour"), "{err}");
    assert!(
        err.contains(
            "hosts without addresses (their QPs cannot be placed until they have them): h0, h3"
        ),
        "{err}"
    );
    let t = Topology::parse(&out, "merged").unwrap();
    let mut links: Vec<String> = (0..t.links.len() as u32).map(|l| t.link_name(l)).collect();
    links.sort();
    assert_eq!(
        links,
        [
            "h0:eth0 - leaf0:swp3",
            "h1:eth0 - leaf0:swp4",
            "h1:eth1 - leaf1:swp4",
            "leaf0:up0 - s0:down0",
            "leaf1:up0 - s0:down1",
        ]
    );
    // The base says otherwise about h1's eth1.
    let contradicting = dir.file(
        "contra.toml",
        "schema = \"roce-observer.topology/1\"\n\n[[link]]\na = \"h1:eth1\"\nb = \"leaf0:swp9\"\n",
    );
    let (status, out, err) = output(
        Command::new(CLI)
            .args(["topology", "--base"])
            .arg(&contradicting)
            .args(["--lldp", &lldp("h1", "h1-two-nics.json")]),
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(out.is_empty());
    assert_eq!(
        error_line(&err),
        format!(
            "roce-observer: error: the merged topology (into {}): LLDP says h1:eth1 goes to leaf1:swp4, the topology file h1:eth1 - leaf0:swp9",
            contradicting.display()
        )
    );
}

/// `fabric --windows`: sidecars' lines over seven one-minute windows, the link lossy in the
/// first two and the fourth (one clean window between: the same incident), then again in the
/// seventh (after two clean windows: a new one, still open).
#[test]
fn windows_follow_one_incident_across_a_clean_window() {
    let dir = Scratch::new("fabric-windows");
    let text = topology_file(2, 3);
    let topo_path = dir.file("fabric.toml", &text);
    let truth = Topology::parse(&text, "fabric.toml").unwrap();
    let lossy = truth
        .link_between(truth.node("l1").unwrap(), truth.node("s0").unwrap())
        .unwrap();
    const MINUTE: u64 = 60_000_000_000;
    let t0 = 1_800_000_000 * 1_000_000_000u64;
    let pattern = [true, true, false, true, false, false, true];
    let mut per_host: std::collections::BTreeMap<std::net::IpAddr, String> = Default::default();
    for (w, faulty) in pattern.iter().enumerate() {
        let work = Workload {
            qps: 400,
            packets: 2000,
            background: 0.0,
            seed: 40 + w as u64,
        };
        let faults = if *faulty {
            vec![Fault {
                link: lossy,
                loss: 0.01,
                ce: 0.0,
            }]
        } else {
            Vec::new()
        };
        let ev = sim::evidence(&truth, &work, &faults);
        let receivers: std::collections::BTreeSet<std::net::IpAddr> =
            ev.iter().map(|(e, _)| e.dst).collect();
        for host in receivers {
            let qps: Vec<serde_json::Value> = ev
                .iter()
                .filter(|(e, _)| e.dst == host)
                .map(|(e, _)| {
                    serde_json::json!({
                        "src": e.src.to_string(), "dst": e.dst.to_string(), "qp": e.dest_qp,
                        "sport": e.src_port, "dir": "rx", "mirror": "", "packets": e.packets,
                        "ce_packets": e.ce, "psn_missing": e.lost, "retransmissions": 0,
                    })
                })
                .collect();
            let start = t0 + w as u64 * MINUTE + 5_000_000_000;
            let line = serde_json::json!({
                "start_unix_ns": start, "end_unix_ns": start + 10_000_000_000, "qps": qps,
                "rest": {"packets": 0, "ce_packets": 0, "psn_missing": 0, "retransmissions": 0},
            });
            *per_host.entry(host).or_default() += &format!("{line}\n");
        }
    }
    let files: Vec<PathBuf> = per_host
        .values()
        .enumerate()
        .map(|(i, t)| dir.file(&format!("h{i}.jsonl"), t))
        .collect();
    let (status, out, err) = fabric(
        &["--signal", "loss", "--windows", "1m", "--json"],
        &topo_path,
        &files,
    );
    assert!(status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema"], "roce-observer.fabric-incidents/1");
    assert_eq!(v["windows"].as_array().unwrap().len(), 7, "{v:#}");
    let inc = v["incidents"].as_array().unwrap();
    assert_eq!(inc.len(), 2, "{v:#}");
    assert_eq!(inc[0]["name"], "l1:up0 - s0:down1");
    assert_eq!(inc[0]["windows"], 3);
    assert_eq!(inc[0]["start_unix_ns"], t0);
    assert_eq!(inc[0]["end_unix_ns"], t0 + 4 * MINUTE);
    assert_eq!(inc[0]["open"], false);
    assert_eq!(inc[1]["start_unix_ns"], t0 + 6 * MINUTE);
    assert_eq!(inc[1]["open"], true);
    // The table.
    let (status, out, err) = fabric(&["--signal", "loss", "--windows", "1m"], &topo_path, &files);
    assert!(status.success(), "{err}");
    assert!(
        out.contains("loss link l1:up0 - s0:down1: +0s .. +240s, named in 3 windows"),
        "{out}"
    );
    // Windows too short for the span: refused, not weighed by the billion.
    let (status, _, err) = fabric(&["--windows", "1ms"], &topo_path, &files);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(error_line(&err).contains("more than 10000"), "{err}");
    // A JSON report is one window: a usage error.
    let (_d, topo2, reports) = lab("windows-report", 3, |_| Vec::new());
    let (status, _, err) = fabric(&["--windows", "1m"], &topo2, &reports[..1]);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        error_line(&err).contains("--windows needs the evidence's times"),
        "{err}"
    );
}

const MINUTE: u64 = 60_000_000_000;

/// Each exporter's next row number in one table (as an exporter numbers its rows).
#[derive(Default)]
struct Seq(std::collections::HashMap<String, u64>);

impl Seq {
    fn next(&mut self, exporter: &str) -> u64 {
        let n = self.0.entry(exporter.to_string()).or_default();
        *n += 1;
        *n - 1
    }
}

/// Fleet records (`qp_intervals`, `connection_sides`) of 400 QPs over a 2-spine, 3-leaf
/// topology in eight one-minute windows from `t0` (unix ns): the QPs' ACK latency rises in
/// windows 5 and 6 on the QPs whose round trip (either way: answers come back from ports of
/// their own half the time) crosses the link l2 - s1. The topology file and the records
/// directory.
fn latency_records(dir: &Scratch, t0: u64) -> (PathBuf, PathBuf) {
    let text = topology_file(2, 3);
    let topo_path = dir.file("fabric.toml", &text);
    let truth = Topology::parse(&text, "fabric.toml").unwrap();
    let slow = truth
        .link_between(truth.node("l2").unwrap(), truth.node("s1").unwrap())
        .unwrap();
    let records = dir.path("records");
    std::fs::create_dir_all(&records).unwrap();
    let (mut qp_rows, mut side_rows) = (String::new(), String::new());
    let (mut qp_seq, mut side_seq) = (Seq::default(), Seq::default());
    for w in 0..8u64 {
        // The same QPs every window (one seed): only the delay changes.
        let work = Workload {
            qps: 400,
            packets: 2000,
            background: 0.0,
            seed: 77,
        };
        let delays = if (5..7).contains(&w) {
            vec![sim::Delay {
                link: slow,
                ns: 60_000,
            }]
        } else {
            Vec::new()
        };
        let start = t0 + w * MINUTE + 1_000_000_000;
        for (e, _) in sim::evidence_delayed(&truth, &work, &[], &delays) {
            let ack = e.ack.unwrap();
            let (back_port, back_qp) = ack.reverse.unwrap();
            let exporter = format!("{}/mlx5_0/1", e.src);
            qp_rows += &format!(
                "{}\n",
                serde_json::json!({
                    "exporter": exporter, "seq": qp_seq.next(&exporter),
                    "interval_start_ns": start, "direction": "transmit",
                    "vantage": "host", "mirror_session": "", "src_addr": e.src.to_string(),
                    "dst_addr": e.dst.to_string(), "src_port": e.src_port,
                    "dest_qp": e.dest_qp, "packets": e.packets, "psn_missing": 0,
                    "psn_retransmissions": 0, "ce": 0,
                })
            );
            // The requester's host sees the whole round trip; the responder's host sees the
            // same requests answered after its own 2 µs only (no fabric in it), with as many
            // samples: the requester's view is the one weighed.
            let responder = format!("{}/mlx5_0/1", e.dst);
            let requests = (e.src, back_qp, e.dst, e.dest_qp, e.src_port);
            let answers = (e.dst, e.dest_qp, e.src, back_qp, back_port);
            for (exporter, (addr, qp, peer, peer_qp, port), samples, p50) in [
                (&exporter, requests, ack.samples, ack.p50_ns),
                (&exporter, answers, 0, 0),
                (&responder, requests, ack.samples, 2_000),
                (&responder, answers, 0, 0),
            ] {
                side_rows += &format!(
                    "{}\n",
                    serde_json::json!({
                        "exporter": exporter, "seq": side_seq.next(exporter),
                        "interval_start_ns": start.to_string(), "addr": addr.to_string(), "qp": qp, "peer_addr": peer.to_string(),
                        "peer_qp": peer_qp, "ports": [port], "packets": e.packets,
                        "ops_cnp": 0, "ack_samples": samples, "ack_p50_ns": p50.to_string(),
                    })
                );
            }
        }
    }
    std::fs::write(records.join("qp_intervals.jsonl"), qp_rows).unwrap();
    std::fs::write(records.join("connection_sides.jsonl"), side_rows).unwrap();
    (topo_path, records)
}

/// `fabric --windows` over fleet records with their connection sides: the QPs' ACK latency
/// rises in two of eight one-minute windows on the QPs whose round trip crosses one delaying
/// link; latency names that link as one incident, loss and CE nothing.
#[test]
fn records_ack_latency_names_the_delaying_link() {
    let dir = Scratch::new("fabric-latency");
    let t0 = 1_800_000_000 * 1_000_000_000u64;
    let (topo_path, records) = latency_records(&dir, t0);
    let (status, out, err) = fabric(
        &["--windows", "1m", "--json"],
        &topo_path,
        std::slice::from_ref(&records),
    );
    assert!(status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let inc = v["incidents"].as_array().unwrap();
    assert_eq!(inc.len(), 1, "{v:#}");
    assert_eq!(inc[0]["signal"], "latency");
    assert_eq!(inc[0]["name"], "l2:up1 - s1:down2");
    assert_eq!(inc[0]["windows"], 2);
    assert_eq!(inc[0]["start_unix_ns"], t0 + 5 * MINUTE);
    // Without windows there is no baseline: `latency` alone is refused, `all` leaves it out.
    let (status, _, err) = fabric(
        &["--signal", "latency"],
        &topo_path,
        std::slice::from_ref(&records),
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(error_line(&err).contains("needs --windows"), "{err}");
    let (status, out, err) = fabric(&["--json"], &topo_path, std::slice::from_ref(&records));
    assert!(status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let signals: Vec<&str> = v["localizations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["signal"].as_str().unwrap())
        .collect();
    assert_eq!(signals, ["loss", "ce"]);
}

/// Fleet records' rows over a 4-spine, 12-leaf topology, all at unix time 0: 500 QPs'
/// `qp_intervals`, and the `pauses` the hosts that sent through one congested link direction
/// (spine s1 down to leaf l2) received, as PFC's backpressure gives them (with pauses that are
/// not received pauses, and pauses of hosts the topology does not have).
struct PauseRecords {
    topo_path: PathBuf,
    records: PathBuf,
    qp_rows: String,
    pause_rows: String,
    /// The frames each paused host received.
    paused: std::collections::BTreeMap<String, u64>,
}

fn pause_records(dir: &Scratch) -> PauseRecords {
    let text = topology_file(4, 12);
    let topo_path = dir.file("fabric.toml", &text);
    let truth = Topology::parse(&text, "fabric.toml").unwrap();
    let (s1, l2) = (truth.node("s1").unwrap(), truth.node("l2").unwrap());
    let link = truth.link_between(l2, s1).unwrap();
    let mut ev = sim::evidence(
        &truth,
        &Workload {
            qps: 500,
            packets: 2000,
            background: 0.0,
            seed: 88,
        },
        &[],
    );
    sim::pause(&truth, &mut ev, &[(link, Some(s1))]);
    let records = dir.path("records");
    std::fs::create_dir_all(&records).unwrap();
    let (mut qp_rows, mut pause_rows) = (String::new(), String::new());
    let (mut qp_seq, mut pause_seq) = (Seq::default(), Seq::default());
    let mut paused = std::collections::BTreeMap::new();
    for (e, _) in &ev {
        let host = truth.name(truth.host_of(&e.src).unwrap()).to_string();
        let exporter = format!("{host}/mlx5_0/1");
        qp_rows += &format!(
            "{}\n",
            serde_json::json!({
                "seq": qp_seq.next(&exporter), "exporter": exporter, "host": host,
                "interval_start_ns": 0, "direction": "transmit", "vantage": "host",
                "mirror_session": "", "src_addr": e.src.to_string(),
                "dst_addr": e.dst.to_string(), "src_port": e.src_port, "dest_qp": e.dest_qp,
                "packets": e.packets, "psn_missing": 0, "psn_retransmissions": 0, "ce": 0,
            })
        );
        if e.paused > 0 {
            paused.insert(host, e.paused);
        }
    }
    assert!(paused.len() >= 3, "{paused:?}");
    for (host, frames) in &paused {
        for (direction, vantage) in [
            ("receive", "host"),
            ("transmit", "host"),
            ("receive", "mirror"),
        ] {
            let exporter = format!("{host}/mlx5_0/1");
            pause_rows += &format!(
                "{}\n",
                serde_json::json!({
                    "seq": pause_seq.next(&exporter), "exporter": exporter, "host": host,
                    "interval_start_ns": "0", "src_mac": "02:00:00:00:00:01",
                    "direction": direction, "vantage": vantage, "priority": 3,
                    "frames": frames, "xon": 0, "quanta": 0, "pause_ns": 0,
                })
            );
        }
    }
    // Hosts not paused: the pauses they sent, and those a mirror saw arrive, are not pauses
    // they received.
    for h in ["h0", "h23"].iter().filter(|h| !paused.contains_key(**h)) {
        for (direction, vantage) in [("transmit", "host"), ("receive", "mirror")] {
            let exporter = format!("{h}/mlx5_0/1");
            pause_rows += &format!(
                "{}\n",
                serde_json::json!({
                    "seq": pause_seq.next(&exporter), "exporter": exporter, "host": h,
                    "interval_start_ns": 0,
                    "src_mac": "02:00:00:00:00:03", "direction": direction,
                    "vantage": vantage, "priority": 3, "frames": 400, "xon": 0,
                    "quanta": 0, "pause_ns": 0,
                })
            );
        }
    }
    // A switch's name is no host's; nor is a host the topology does not have: told, left out.
    pause_rows += &format!(
        "{}\n",
        serde_json::json!({
            "exporter": "s1/x/1", "host": "s1", "interval_start_ns": 0,
            "src_mac": "02:00:00:00:00:04", "direction": "receive", "vantage": "host",
            "priority": 3, "frames": 5, "xon": 0, "quanta": 0, "pause_ns": 0,
        })
    );
    pause_rows += &format!(
        "{}\n",
        serde_json::json!({
            "exporter": "elsewhere/mlx5_0/1", "host": "", "interval_start_ns": 0,
            "src_mac": "02:00:00:00:00:02", "direction": "receive", "vantage": "host",
            "priority": 3, "frames": 5, "xon": 0, "quanta": 0, "pause_ns": 0,
        })
    );
    PauseRecords {
        topo_path,
        records,
        qp_rows,
        pause_rows,
        paused,
    }
}

/// Fleet records with their `pauses` table (see `pause_records`): `fabric` names the congested
/// link direction from the hosts' pauses alone.
#[test]
fn records_pauses_name_the_congested_link_direction() {
    let dir = Scratch::new("fabric-pauses");
    let PauseRecords {
        topo_path,
        records,
        qp_rows,
        pause_rows,
        paused,
    } = pause_records(&dir);
    std::fs::write(records.join("qp_intervals.jsonl"), qp_rows).unwrap();
    let (status, _, err) = fabric(
        &["--signal", "pfc"],
        &topo_path,
        std::slice::from_ref(&records),
    );
    assert_eq!(status.code(), Some(2), "no pauses table: {err}");
    assert!(error_line(&err).contains("needs pause counts"), "{err}");
    // A pauses table without a row: no host was paused, clean.
    std::fs::write(records.join("pauses.jsonl"), "").unwrap();
    let (status, out, err) = fabric(
        &["--signal", "pfc", "--json"],
        &topo_path,
        std::slice::from_ref(&records),
    );
    assert!(status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["localizations"][0]["verdict"], "clean", "{v:#}");
    std::fs::write(records.join("pauses.jsonl"), pause_rows).unwrap();
    let (status, out, err) = fabric(&["--json"], &topo_path, std::slice::from_ref(&records));
    assert!(status.success(), "{err}");
    assert!(
        err.contains(
            "pauses of hosts the topology does not name as hosts, left out: elsewhere, s1"
        ),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let pfc = v["localizations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["signal"] == "pfc")
        .unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(pfc["verdict"], "found", "{pfc:#}");
    assert_eq!(
        pfc["suspects"][0]["name"], "l2:up1 - s1:down2 (s1 to l2)",
        "{pfc:#}"
    );
    assert_eq!(
        pfc["suspects"][0]["bad_qps"],
        paused.len() as f64,
        "{pfc:#}"
    );
}

/// `fabric --clickhouse`: the records loaded into a real ClickHouse server (as docs/export.md
/// loads them, each file twice: a retried load) give the answer their files give, over the
/// span asked, each row once; the user and password go as the server takes them and never into
/// an error; a server's refusal is one line with its own words.
#[test]
fn records_in_clickhouse_give_the_files_answer() {
    let test = "records_in_clickhouse_give_the_files_answer";
    let Some(ch) = integration_tests::ClickHouseServer::start(test) else {
        return;
    };
    let version = &ch.version;
    // ACK latency over eight windows from 2027 on (connection sides), and pauses at time 0.
    let dir = Scratch::new("fabric-clickhouse");
    let t0 = 1_800_000_000 * 1_000_000_000u64;
    let (latency_topo, latency) = latency_records(&dir, t0);
    let pause_dir = Scratch::new("fabric-clickhouse-pauses");
    let p = pause_records(&pause_dir);
    std::fs::write(p.records.join("qp_intervals.jsonl"), &p.qp_rows).unwrap();
    std::fs::write(p.records.join("pauses.jsonl"), &p.pause_rows).unwrap();
    for _ in 0..2 {
        ch.load(&latency);
        ch.load(&p.records);
    }
    let rows = std::fs::read_to_string(latency.join("qp_intervals.jsonl"))
        .unwrap()
        .lines()
        .count()
        + p.qp_rows.lines().count();
    assert_eq!(
        ch.query("SELECT count() FROM roce.qp_intervals").trim(),
        (2 * rows).to_string(),
        "every row in twice"
    );
    let run = |topo: &Path, args: &[&str], env: &[(&str, &str)]| {
        output(
            Command::new(CLI)
                .arg("fabric")
                .args(args)
                .arg("--topology")
                .arg(topo)
                .env_remove("CLICKHOUSE_USER")
                .env_remove("CLICKHOUSE_PASSWORD")
                .envs(env.iter().copied()),
        )
    };
    let with_password = ch.url.replace(
        "http://",
        "http://fabric:s3cret%20pass@", // FABRIC_PASSWORD, percent-encoded
    );
    assert_eq!(integration_tests::FABRIC_PASSWORD, "s3cret pass");

    // The latency windows: the files' answer, the user and password in the address or in the
    // environment. (The rows at time 0 are outside the span.)
    let latency_path = latency.display().to_string();
    let (status, files, err) = run(
        &latency_topo,
        &["--windows", "1m", "--json", &latency_path],
        &[],
    );
    assert!(status.success(), "{err}");
    let at = ((t0 + 8 * MINUTE) / 1_000_000_000).to_string();
    let span = ["--at", &at, "--window", "8m", "--windows", "1m", "--json"];
    let (status, out, err) = run(
        &latency_topo,
        &[&["--clickhouse", &with_password][..], &span].concat(),
        &[],
    );
    assert!(status.success(), "ClickHouse {version}: {err}");
    assert_eq!(err, "");
    assert_eq!(out, files, "ClickHouse {version}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["incidents"][0]["name"], "l2:up1 - s1:down2", "{v:#}");
    assert_eq!(v["incidents"][0]["windows"], 2);
    let (status, out, err) = run(
        &latency_topo,
        &[&["--clickhouse", &ch.url][..], &span].concat(),
        &[
            ("CLICKHOUSE_USER", "fabric"),
            ("CLICKHOUSE_PASSWORD", integration_tests::FABRIC_PASSWORD),
        ],
    );
    assert!(status.success(), "{err}");
    assert_eq!(out, files);
    // (The environment's password is the one sent: a wrong one is refused.)
    let (status, _, err) = run(
        &latency_topo,
        &[&["--clickhouse", &ch.url][..], &span].concat(),
        &[
            ("CLICKHOUSE_USER", "fabric"),
            ("CLICKHOUSE_PASSWORD", "hunter2-bad"),
        ],
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(!err.contains("hunter2-bad"), "{err}");
    // A span wider than the rows: its windows without rows are weighed too (they cannot
    // tell), the incident the same.
    // (`fabric --clickhouse --windows 1m --json` over the span of WINDOW ending at AT.)
    let windows_json = |topo: &Path, at: &str, window: &str| -> serde_json::Value {
        let args = ["--clickhouse", &ch.url, "--at", at, "--window", window];
        let (status, out, err) = run(
            topo,
            &[&args[..], &["--windows", "1m", "--json"]].concat(),
            &[],
        );
        assert!(status.success(), "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let later = ((t0 + 10 * MINUTE) / 1_000_000_000).to_string();
    let v = windows_json(&latency_topo, &later, "12m");
    let windows = v["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 12, "{v:#}");
    assert_eq!(windows[0]["start_unix_ns"], t0 - 2 * MINUTE);
    assert_eq!(v["incidents"].as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(v["incidents"][0]["name"], "l2:up1 - s1:down2");
    assert_eq!(v["incidents"][0]["start_unix_ns"], t0 + 5 * MINUTE);

    // The pauses, one window at time 0: the files' answer, with the same warning.
    let pause_path = p.records.display().to_string();
    let (status, files, files_err) = run(&p.topo_path, &["--json", &pause_path], &[]);
    assert!(status.success(), "{files_err}");
    let (status, out, err) = run(
        &p.topo_path,
        &[
            "--clickhouse",
            &ch.url,
            "--at",
            "60",
            "--window",
            "1m",
            "--json",
        ],
        &[],
    );
    assert!(status.success(), "{err}");
    assert_eq!(out, files);
    assert_eq!(err, files_err);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let pfc = v["localizations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["signal"] == "pfc")
        .unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(pfc["suspects"][0]["name"], "l2:up1 - s1:down2 (s1 to l2)");
    assert_eq!(pfc["suspects"][0]["bad_qps"], p.paused.len() as f64);

    // A span without rows: told, and nothing found (with --windows: every window clean or
    // unable to tell).
    let (status, out, err) = run(
        &p.topo_path,
        &[
            "--clickhouse",
            &ch.url,
            "--at",
            "1000",
            "--window",
            "1m",
            "--json",
        ],
        &[],
    );
    assert!(status.success(), "{err}");
    assert!(
        err.contains("no QP rows began between unix 940.000 s and 1000.000 s"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["localizations"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["verdict"] != "found"),
        "{v:#}"
    );
    let v = windows_json(&p.topo_path, "1000", "3m");
    assert_eq!(v["windows"].as_array().unwrap().len(), 3, "{v:#}");
    assert_eq!(v["incidents"].as_array().unwrap().len(), 0, "{v:#}");

    // Refusals: one line each, with the server's words, never the password.
    let wrong = ch.url.replace("http://", "http://fabric:hunter2-bad@");
    for (args, want) in [
        (
            vec!["--clickhouse", wrong.as_str()],
            format!("ClickHouse at {}: roce.qp_intervals: HTTP ", ch.url),
        ),
        (
            vec!["--clickhouse", ch.url.as_str(), "--database", "nope"],
            "nope".to_string(),
        ),
        (
            vec!["--clickhouse", ch.url.as_str(), "--database", "roce;drop"],
            "is not a plain name".to_string(),
        ),
        (
            vec!["--clickhouse", "ftp://fabric:hunter2-bad@127.0.0.1"],
            "is not http:// or https://".to_string(),
        ),
        (
            vec!["--clickhouse", "http://fabric:hunter2-bad/x@127.0.0.1"],
            "percent-encode".to_string(),
        ),
    ] {
        let (status, _, err) = run(&p.topo_path, &args, &[]);
        assert_eq!(status.code(), Some(1), "{args:?}: {err}");
        let line = error_line(&err);
        assert!(line.contains(&want), "{args:?}: {line}");
        assert!(!line.contains("hunter2-bad"), "{line}");
    }
    // Nobody listening: the address named.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nobody = format!("http://127.0.0.1:{port}");
    let (status, _, err) = run(&p.topo_path, &["--clickhouse", &nobody], &[]);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        error_line(&err).contains(&format!("ClickHouse at {nobody}: roce.qp_intervals")),
        "{err}"
    );
}
