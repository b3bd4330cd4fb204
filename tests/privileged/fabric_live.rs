//! `trace` and `fabric` on a real leaf-spine in network namespaces (the test creates and
//! removes them): 2 spines, 4 leaves and 8 hosts, Linux routers with multipath routes hashed on
//! the 5-tuple, RoCE traffic from the hosts' own UDP sockets (many QPs, each direction on a
//! source port of its own), `run` sidecars on the hosts writing JSON lines, and faults set by
//! the lab's BPF program on a link's direction (the kernel has no netem): drop a share of the
//! RoCEv2 frames, or mark a share CE.
//!
//! Ground truth comes from outside the code under test: the traced paths are checked against
//! the routers' own per-link counters, and the faults are the test's.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
    time::Duration,
};

use integration_tests::{LoggedChild, Scratch, fabric::LeafSpine, require_root};
use observer_common::LabFault;
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");
/// WRITEs per QP each run.
const PACKETS: usize = 150;

/// Each host's QP directions traced from the host itself, as `trace --json` files.
fn trace_all(
    lab: &LeafSpine,
    qps: &[integration_tests::fabric::LabQp],
    scratch: &Scratch,
) -> Vec<PathBuf> {
    let children: Vec<_> = lab
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let mut cmd = h.ns.command(CLI);
            cmd.args(["trace", "--json", "--rate", "1000", "--wait", "300ms"])
                .args(["--attempts", "2", "--gaps", "1", "--max-ttl", "6"]);
            for q in qps {
                let flow = if q.requester == i {
                    (q.req_port, q.responder)
                } else if q.responder == i {
                    (q.resp_port, q.requester)
                } else {
                    continue;
                };
                cmd.arg("--flow")
                    .arg(format!("{},{},{}", h.addr, flow.0, lab.hosts[flow.1].addr));
            }
            cmd.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            cmd.spawn().expect("start trace")
        })
        .collect();
    children
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "trace on h{i}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            scratch.file(
                &format!("paths-h{i}.json"),
                &String::from_utf8(out.stdout).unwrap(),
            )
        })
        .collect()
}

/// Every traced direction's path as node names, host to host, by (src, dst, sport); the node
/// of a router address from the topology.
fn traced_paths(
    lab: &LeafSpine,
    files: &[PathBuf],
) -> BTreeMap<(String, String, u16), Vec<String>> {
    let topo = roce_observer::analysis::fabric::Topology::parse(&lab.topology, "lab").unwrap();
    let mut traces = Vec::new();
    for f in files {
        let file: roce_observer::model::trace::TraceFile =
            serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        traces.extend(file.traces);
    }
    roce_observer::analysis::fabric::traced_paths(&topo, &traces)
        .into_iter()
        .map(|((s, d, p), path)| ((s.to_string(), d.to_string(), p), path))
        .collect()
}

/// One run: sidecars on every host, `faults` set, the traffic, the sidecars stopped; then
/// `fabric` over their JSON lines with the traced paths. Its JSON.
fn run_once(
    lab: &mut LeafSpine,
    qps: &[integration_tests::fabric::LabQp],
    scratch: &Scratch,
    paths: &[PathBuf],
    tag: &str,
    faults: &[(String, String, LabFault)],
) -> Value {
    let jsonl: Vec<PathBuf> = (0..lab.hosts.len())
        .map(|i| scratch.path(&format!("{tag}-h{i}.jsonl")))
        .collect();
    let sidecars: Vec<LoggedChild> = lab
        .hosts
        .iter()
        .zip(&jsonl)
        .map(|(h, file)| {
            let mut cmd = h.ns.command(CLI);
            cmd.args([
                "run",
                "--iface",
                "eth0",
                "--interval",
                "250ms",
                "--max-series",
                "10000",
            ])
            .arg("--jsonl")
            .arg(file);
            LoggedChild::spawn(cmd)
        })
        .collect();
    for s in &sidecars {
        s.wait_log("attached; serving", Duration::from_secs(30));
    }
    for (from, to, f) in faults {
        lab.set_fault(from, to, *f);
    }
    lab.send(qps, PACKETS);
    lab.clear_faults();
    // Two drains after the last frame, then the last one at the exit.
    std::thread::sleep(Duration::from_millis(600));
    for s in sidecars {
        let (status, log) = s.stop();
        assert!(status.success(), "{log}");
    }
    let topology = scratch.file("fabric.toml", &lab.topology);
    let mut cmd = std::process::Command::new(CLI);
    cmd.arg("fabric")
        .arg("--topology")
        .arg(&topology)
        .arg("--json");
    for p in paths {
        cmd.arg("--paths").arg(p);
    }
    cmd.args(&jsonl);
    let (status, out, err) = integration_tests::output(&mut cmd);
    assert!(status.success(), "fabric: {err}");
    serde_json::from_str(&out).unwrap()
}

/// The localization of `signal` in fabric's JSON.
fn localization<'a>(v: &'a Value, signal: &str) -> &'a Value {
    v["localizations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["signal"] == signal)
        .unwrap()
}

/// The two node names a link suspect's name joins ("a:port - b:port").
fn link_ends(name: &str) -> BTreeSet<String> {
    name.split(" - ")
        .map(|end| end.split(':').next().unwrap_or_default().to_string())
        .collect()
}

fn ends(a: &str, b: &str) -> BTreeSet<String> {
    [a.to_string(), b.to_string()].into()
}

/// The link suspects named, in rank order, as their ends.
fn links_named(l: &Value) -> Vec<BTreeSet<String>> {
    l["suspects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "link")
        .map(|s| link_ends(s["name"].as_str().unwrap()))
        .collect()
}

#[test]
fn trace_finds_each_qps_path_and_fabric_names_the_faulty_link_switch_or_host() {
    if !require_root("trace_finds_each_qps_path_and_fabric_names_the_faulty_link_switch_or_host") {
        return;
    }
    let scratch = Scratch::new("fabric-live");
    let mut lab = LeafSpine::create(2, 4, 2);
    let qps = lab.qps(6);

    // Every QP direction traced from its own host.
    let paths = trace_all(&lab, &qps, &scratch);
    let traced = traced_paths(&lab, &paths);
    assert_eq!(traced.len(), 2 * qps.len(), "every direction traced");
    let host_names: BTreeMap<String, String> = lab
        .hosts
        .iter()
        .map(|h| (h.addr.to_string(), h.name.clone()))
        .collect();
    for ((src, dst, port), path) in &traced {
        assert_eq!(
            path.first(),
            host_names.get(src),
            "{src}:{port} -> {dst}: {path:?}"
        );
        assert_eq!(
            path.last(),
            host_names.get(dst),
            "{src}:{port} -> {dst}: {path:?}"
        );
        assert!(
            !path.iter().any(|n| n == "*"),
            "{src}:{port} -> {dst}: {path:?}"
        );
    }
    // Both spines carry some of the QPs (the hash spreads them).
    let spines: BTreeSet<&String> = traced.values().filter_map(|p| p.get(2)).collect();
    assert!(spines.len() >= 2, "{spines:?}");

    // The traced paths against the routers' counters: the frames each link direction carried
    // are exactly those of the QP directions whose traced path crosses it.
    let before = lab.counts();
    let sent = lab.send(&qps, 20);
    let after = lab.counts();
    let mut expected: BTreeMap<(String, String), u64> = BTreeMap::new();
    for ((src, dst, port), n) in &sent {
        let key = (
            lab.hosts[*src].addr.to_string(),
            lab.hosts[*dst].addr.to_string(),
            *port,
        );
        let path = &traced[&key];
        for hop in path.windows(2) {
            *expected
                .entry((hop[0].clone(), hop[1].clone()))
                .or_default() += n;
        }
    }
    for (dir, a) in &after {
        let carried = a.frames - before[dir].frames;
        assert_eq!(
            carried,
            expected.get(dir).copied().unwrap_or(0),
            "{} -> {}: the frames the link carried against the traced paths",
            dir.0,
            dir.1
        );
    }

    // Single-link faults on the fabric's links, either direction, drop or CE.
    let fabric_dirs: Vec<(String, String)> = lab
        .directions
        .iter()
        .filter(|d| !d.from.starts_with('h') && !d.to.starts_with('h'))
        .map(|d| (d.from.clone(), d.to.clone()))
        .collect();
    let seed = std::env::var("FABRIC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("fabric_live: faults drawn with FABRIC_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let fault = |rng: &mut fastrand::Rng| {
        if rng.bool() {
            (
                "loss",
                LabFault {
                    drop_per_million: 30_000,
                    ce_per_million: 0,
                },
            )
        } else {
            (
                "ce",
                LabFault {
                    drop_per_million: 0,
                    ce_per_million: 50_000,
                },
            )
        }
    };
    let mut first = 0;
    let mut report = Vec::new();
    const SINGLE: usize = 20;
    for t in 0..SINGLE {
        let (from, to) = fabric_dirs[rng.usize(..fabric_dirs.len())].clone();
        let (signal, f) = fault(&mut rng);
        let v = run_once(
            &mut lab,
            &qps,
            &scratch,
            &paths,
            &format!("single{t}"),
            &[(from.clone(), to.clone(), f)],
        );
        let l = localization(&v, signal);
        let named = links_named(l);
        let ok = l["verdict"] == "found" && named.first() == Some(&ends(&from, &to));
        first += usize::from(ok);
        report.push(format!(
            "{signal} on {from}->{to}: {} {named:?}",
            l["verdict"]
        ));
    }
    eprintln!("fabric_live single-link faults:\n{}", report.join("\n"));
    assert!(
        first * 10 >= SINGLE * 9,
        "the faulted link named first in {first} of {SINGLE} (seed {seed}):\n{}",
        report.join("\n")
    );

    // Two-link faults: two different links, the same kind.
    let mut both = 0;
    let mut report = Vec::new();
    const DOUBLE: usize = 5;
    for t in 0..DOUBLE {
        let i = rng.usize(..fabric_dirs.len());
        let (a_from, a_to) = fabric_dirs[i].clone();
        let (b_from, b_to) = loop {
            let d = &fabric_dirs[rng.usize(..fabric_dirs.len())];
            if ends(&d.0, &d.1) != ends(&a_from, &a_to) {
                break d.clone();
            }
        };
        let (signal, f) = fault(&mut rng);
        let v = run_once(
            &mut lab,
            &qps,
            &scratch,
            &paths,
            &format!("double{t}"),
            &[
                (a_from.clone(), a_to.clone(), f),
                (b_from.clone(), b_to.clone(), f),
            ],
        );
        let l = localization(&v, signal);
        let named = links_named(l);
        let ok = l["verdict"] == "found"
            && named.contains(&ends(&a_from, &a_to))
            && named.contains(&ends(&b_from, &b_to));
        both += usize::from(ok);
        report.push(format!(
            "{signal} on {a_from}->{a_to} and {b_from}->{b_to}: {} {named:?}",
            l["verdict"]
        ));
    }
    eprintln!("fabric_live two-link faults:\n{}", report.join("\n"));
    assert!(
        both * 10 >= DOUBLE * 8,
        "both faulted links named in {both} of {DOUBLE} (seed {seed}):\n{}",
        report.join("\n")
    );

    // A host's own link (frames to it dropped at its leaf): the host, not the fabric.
    let h = rng.usize(..lab.hosts.len());
    let host = lab.hosts[h].name.clone();
    let leaf = format!("l{}", lab.hosts[h].leaf);
    let v = run_once(
        &mut lab,
        &qps,
        &scratch,
        &paths,
        "host",
        &[(
            leaf,
            host.clone(),
            LabFault {
                drop_per_million: 30_000,
                ce_per_million: 0,
            },
        )],
    );
    let l = localization(&v, "loss");
    let top = l["suspects"][0]["name"].as_str().unwrap_or_default();
    assert!(
        l["verdict"] == "found"
            && l["suspects"][0]["kind"] == "host"
            && (top == host || top.starts_with(&format!("{host} "))),
        "a fault on {host}'s own link: {l:#}"
    );

    // A clean run: nothing.
    let v = run_once(&mut lab, &qps, &scratch, &paths, "clean", &[]);
    for signal in ["loss", "ce"] {
        let l = localization(&v, signal);
        assert_eq!(l["verdict"], "clean", "{signal}: {l:#}");
        assert_eq!(l["suspects"].as_array().unwrap().len(), 0, "{l:#}");
        assert!(l["qps"].as_u64().unwrap() >= qps.len() as u64, "{l:#}");
    }

    // `trace --report`: the directions a host's own sidecar saw leave it, traced again, give
    // the paths the first traces gave.
    let (status, out, err) = integration_tests::output(
        lab.hosts[0]
            .ns
            .command(CLI)
            .args([
                "trace", "--json", "--rate", "1000", "--wait", "300ms", "--gaps", "1",
            ])
            .arg("--report")
            .arg(scratch.path("clean-h0.jsonl")),
    );
    assert!(status.success(), "{err}");
    let again = traced_paths(&lab, &[scratch.file("again-h0.json", &out)]);
    let h0 = lab.hosts[0].addr.to_string();
    let first: BTreeMap<_, _> = traced.iter().filter(|(k, _)| k.0 == h0).collect();
    assert_eq!(again.len(), first.len(), "every direction leaving h0");
    for (k, path) in &again {
        assert_eq!(Some(&path), first.get(k), "{k:?}");
    }
}
