//! `replay --jobs`: training jobs from the wire. The real NCCL captures (three nodes of one
//! all-reduce) give one job of their three hosts, its phases where tshark puts the RoCE
//! frames, and no period (two bursts: the evidence cannot tell one); the jobs are the same on
//! any number of threads; bad flags are one line.

use std::{net::IpAddr, process::Command};

use integration_tests::{
    Scratch, epoch_ns, output, shared_capture_files, synth_pcap, tshark_fields, tshark_times,
};
use roce_observer::model::Report;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

fn replay(args: &[&str]) -> Report {
    let (status, out, err) = output(Command::new(CLI).arg("replay").args(args).arg("--json"));
    assert!(status.success(), "{args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

/// The NCCL captures of one node set: `nccl_{set}_node{0,1,2}.pcap`.
fn node_files(test: &str, set: &str) -> Option<Vec<String>> {
    let files: Vec<String> = shared_capture_files(test, "real")?
        .into_iter()
        .map(|p| p.display().to_string())
        .filter(|p| p.contains(&format!("nccl_{set}_node")))
        .collect();
    assert_eq!(files.len(), 3, "{files:?}");
    Some(files)
}

#[test]
fn the_nccl_captures_are_one_job_of_three_hosts_in_two_phases() {
    let test = "the_nccl_captures_are_one_job_of_three_hosts_in_two_phases";
    let Some(files) = node_files(test, "nccl") else {
        return;
    };
    let args: Vec<&str> = files.iter().map(String::as_str).chain(["--jobs"]).collect();
    let r = replay(&args);
    let jobs = r.jobs.as_ref().expect("a jobs section");
    assert_eq!(jobs.bin_ns, 1_000_000);
    assert_eq!(jobs.jobs.len(), 1, "{jobs:#?}");
    let job = &jobs.jobs[0];
    let hosts: Vec<String> = job.hosts.iter().map(ToString::to_string).collect();
    assert_eq!(hosts, ["172.30.0.11", "172.30.0.12", "172.30.0.25"]);
    // Its bytes are every data flow's among its hosts (not the ACKs' directions), each packet
    // once (seen at two points).
    let flows: u64 = r
        .flows
        .iter()
        .filter(|f| f.ops.write + f.ops.send + f.ops.read_request + f.ops.read_response > 0)
        .map(|f| f.bytes)
        .sum();
    assert_eq!(job.bytes, flows);
    assert_eq!(job.phases.iter().map(|p| p.bytes).sum::<u64>(), job.bytes);
    // The set-up and the all-reduce, ten seconds apart: no period from two phases.
    assert_eq!(job.phases.len(), 2, "{job:#?}");
    assert!(job.period.is_none());
    assert_eq!(
        job.no_period.as_deref(),
        Some("2 phases: a period needs 3 iterations at least")
    );
    // In the all-reduce, every host sends its share (a ring: the same bytes each).
    let reduce = &job.phases[1];
    assert_eq!(reduce.hosts.len(), 3);
    assert!(
        reduce
            .hosts
            .iter()
            .all(|h| h.bytes == reduce.hosts[0].bytes)
    );
    assert!(reduce.hosts.iter().all(|h| h.ce + h.retransmissions == 0));

    // One node's capture: each phase holds RoCE frames as tshark times them, its bounds
    // within a bin of its first and last; and every frame is in a phase.
    let r = replay(&[files[0].as_str(), "--jobs"]);
    let job = &r.jobs.as_ref().unwrap().jobs[0];
    let times = tshark_times(files[0].as_ref());
    assert!(!times.is_empty());
    let bin = 1_000_000;
    for t in &times {
        assert!(
            job.phases.iter().any(|p| p.start_ns <= *t && *t < p.end_ns),
            "a frame at {t} in no phase: {job:#?}"
        );
    }
    for p in &job.phases {
        let inside: Vec<u64> = times
            .iter()
            .copied()
            .filter(|t| p.start_ns <= *t && *t < p.end_ns)
            .collect();
        let (first, last) = (inside[0], *inside.last().unwrap());
        assert!(first - p.start_ns < bin, "{p:?} first {first}");
        assert!(p.end_ns - last <= bin, "{p:?} last {last}");
    }
}

/// The generator's ring all-reduce (`training`): one job of its 8 hosts, a phase per
/// iteration starting in the bin the generator started it, the period within 1% of the
/// generator's own after its 11 iterations.
#[test]
fn the_generated_ring_gives_its_iterations_and_period() {
    let scratch = Scratch::new("jobs-training");
    let truth = roce_observer::source::synth::scenario("training")
        .unwrap()
        .truth
        .jobs;
    assert_eq!(truth.len(), 1);
    let truth = &truth[0];
    let pcap = synth_pcap(CLI, &scratch, "training");
    let r = replay(&[pcap.to_str().unwrap(), "--jobs"]);
    let jobs = r.jobs.unwrap();
    assert_eq!(jobs.jobs.len(), 1, "{jobs:#?}");
    let job = &jobs.jobs[0];
    assert_eq!(job.hosts, truth.hosts);
    let starts = &truth.iteration_starts_ns;
    assert_eq!(job.phases.len(), starts.len());
    for (phase, start) in job.phases.iter().zip(starts) {
        assert!(
            phase.start_ns <= *start && *start < phase.start_ns + jobs.bin_ns,
            "{phase:?} vs {start}"
        );
        assert_eq!(phase.hosts.len(), 8);
    }
    let times: Vec<f64> = starts.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let want = times.iter().sum::<f64>() / times.len() as f64;
    let p = job.period.as_ref().expect("a period");
    assert_eq!(p.iterations, 11);
    let err = (p.ns as f64 - want).abs() / want;
    assert!(
        err < 0.01,
        "period {} vs the generator's {want}: {err}",
        p.ns
    );
}

/// Two generated rings on the same 8 hosts at once, on their own QPs (`training-two-jobs`):
/// two jobs, each with its own QPs, a phase per iteration of its ring, and its ring's period
/// within 1%.
#[test]
fn two_jobs_on_the_same_hosts_are_kept_apart() {
    let scratch = Scratch::new("jobs-two");
    let w = roce_observer::source::synth::scenario("training-two-jobs").unwrap();
    let pcap = synth_pcap(CLI, &scratch, "training-two-jobs");
    let r = replay(&[pcap.to_str().unwrap(), "--jobs"]);
    let jobs = r.jobs.unwrap();
    assert_eq!(jobs.jobs.len(), 2, "{jobs:#?}");
    for truth in &w.truth.jobs {
        let starts = &truth.iteration_starts_ns;
        // Its job: the one whose first phase holds its first start.
        let job = jobs
            .jobs
            .iter()
            .find(|j| j.phases.len() == starts.len())
            .unwrap_or_else(|| panic!("no job of {} phases: {jobs:#?}", starts.len()));
        assert_eq!(job.hosts, truth.hosts);
        for (phase, start) in job.phases.iter().zip(starts) {
            assert!(
                phase.start_ns <= *start && *start < phase.start_ns + jobs.bin_ns,
                "{phase:?} vs {start}"
            );
        }
        let want = (starts[starts.len() - 1] - starts[0]) as f64 / (starts.len() - 1) as f64;
        let p = job.period.as_ref().expect("a period");
        assert!((p.ns as f64 / want - 1.0).abs() < 0.01, "{p:?} vs {want}");
    }
    let qps = |j: &roce_observer::model::jobs::Job| -> std::collections::BTreeSet<u32> {
        j.qps.iter().map(|q| q.dest_qp).collect()
    };
    assert!(qps(&jobs.jobs[0]).is_disjoint(&qps(&jobs.jobs[1])));
}

/// The generator's binary tree all-reduce (`training-tree`): one job of its 8 hosts, a phase
/// per iteration starting in the bin the generator started it, every host in each; its
/// hosts' roles (leaves send first, the root last) are no straggler: compared within the hosts
/// fed alike, none is. With a leaf computing 25% longer (`training-tree-straggler`), that leaf
/// is named, cause host, late in its compute in nearly every iteration.
#[test]
fn the_generated_tree_is_one_job_its_roles_no_straggler_its_slow_leaf_one() {
    let scratch = Scratch::new("jobs-tree");
    let w = roce_observer::source::synth::scenario("training-tree").unwrap();
    let truth = &w.truth.jobs[0];
    let pcap = synth_pcap(CLI, &scratch, "training-tree");
    let r = replay(&[pcap.to_str().unwrap(), "--jobs"]);
    let jobs = r.jobs.as_ref().unwrap();
    assert_eq!(jobs.jobs.len(), 1, "{jobs:#?}");
    let job = &jobs.jobs[0];
    assert_eq!(job.hosts, truth.hosts);
    assert_eq!(job.phases.len(), truth.iteration_starts_ns.len());
    for (phase, start) in job.phases.iter().zip(&truth.iteration_starts_ns) {
        assert!(
            phase.start_ns <= *start && *start < phase.start_ns + jobs.bin_ns,
            "{phase:?} vs {start}"
        );
        assert_eq!(phase.hosts.len(), 8);
    }
    let check = r.checks.iter().find(|c| c.rule == "job-straggler").unwrap();
    assert_eq!(
        check.status,
        roce_observer::model::findings::CheckStatus::Passed,
        "{check:?}"
    );
    assert!(
        check.note.contains("compared within the hosts fed alike"),
        "{check:?}"
    );
    assert!(r.findings.iter().all(|f| f.rule != "job-straggler"));
    let pcap = synth_pcap(CLI, &scratch, "training-tree-straggler");
    let r = replay(&[pcap.to_str().unwrap(), "--jobs"]);
    let f = r
        .findings
        .iter()
        .find(|f| f.rule == "job-straggler")
        .unwrap_or_else(|| panic!("no straggler: {:?}", r.checks));
    assert_eq!(f.evidence["host"], "198.18.88.8", "{f:?}");
    assert_eq!(f.evidence["cause"], "host");
    assert_eq!(f.evidence["late_in"], "compute");
    assert_eq!(f.evidence["samples"], 11);
    assert!(f.evidence["late_samples"].as_u64().unwrap() >= 10, "{f:?}");
}

/// The period checked against an estimator that shares nothing with ours
/// (`tests/support/period.py`): scipy's autocorrelation of each job's bytes, binned by numpy
/// on the report's grid from tshark's reading of its QPs' frames. On generated all-reduces (a
/// clean ring, two at once on the same hosts, a host straggler, a network straggler, and a
/// binary tree, each host's compute jittered by 5%), ours and scipy's agree within 1%, and both are within 1% of the
/// generator's mean iteration time.
#[test]
fn the_period_agrees_with_scipy_autocorrelation() {
    let scratch = Scratch::new("jobs-scipy");
    let script = integration_tests::workspace_root().join("tests/support/period.py");
    println!("scenario                    job    generator ms   ours ms  scipy ms  ours/scipy");
    for name in [
        "training",
        "training-two-jobs",
        "rule-job-straggler",
        "training-network-straggler",
        "training-tree",
    ] {
        let w = roce_observer::source::synth::scenario(name).unwrap();
        let pcap = synth_pcap(CLI, &scratch, name);
        let jobs = replay(&[pcap.to_str().unwrap(), "--jobs"]).jobs.unwrap();
        let frames = tshark_fields(
            &pcap,
            &[
                "frame.time_epoch",
                "frame.len",
                "ip.dst",
                "ipv6.dst",
                "infiniband.bth.destqp",
            ],
        );
        assert!(!w.truth.jobs.is_empty(), "{name}");
        for truth in &w.truth.jobs {
            let starts = &truth.iteration_starts_ns;
            let job = jobs
                .jobs
                .iter()
                .find(|j| j.hosts == truth.hosts && j.phases.len() == starts.len())
                .unwrap_or_else(|| panic!("{name}: no job of {} phases: {jobs:#?}", starts.len()));
            let mine: std::collections::BTreeSet<(IpAddr, u32)> =
                job.qps.iter().map(|q| (q.dst_ip, q.dest_qp)).collect();
            let input: String = frames
                .iter()
                .filter(|f| {
                    let dst = if f[2].is_empty() { &f[3] } else { &f[2] };
                    let qp = u32::from_str_radix(f[4].trim_start_matches("0x"), 16).unwrap();
                    mine.contains(&(dst.parse().unwrap(), qp))
                })
                .map(|f| format!("{} {}\n", epoch_ns(&f[0]), f[1]))
                .collect();
            let out = integration_tests::run_with_input(
                Command::new(integration_tests::venv_python())
                    .arg(&script)
                    .arg(jobs.bin_ns.to_string())
                    .arg(jobs.start_ns.to_string()),
                input.as_bytes(),
            )
            .expect("run tests/support/period.py");
            assert!(
                out.status.success(),
                "{name} {}: period.py: {}",
                job.id,
                String::from_utf8_lossy(&out.stderr)
            );
            let scipy: f64 = String::from_utf8(out.stdout)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let ours = job.period.as_ref().expect("a period").ns as f64;
            let want = (starts[starts.len() - 1] - starts[0]) as f64 / (starts.len() - 1) as f64;
            let ms = 1e-6;
            println!(
                "{name:<27} {:<6} {:>12.3} {:>9.3} {:>9.3} {:>11.4}",
                job.id,
                want * ms,
                ours * ms,
                scipy * ms,
                ours / scipy
            );
            assert!(
                (ours / scipy - 1.0).abs() < 0.01,
                "{name} {}: ours {ours} scipy {scipy}",
                job.id
            );
            assert!(
                (scipy / want - 1.0).abs() < 0.01,
                "{name} {}: scipy {scipy} generator {want}",
                job.id
            );
            assert!(
                (ours / want - 1.0).abs() < 0.01,
                "{name} {}: ours {ours} generator {want}",
                job.id
            );
        }
    }
}

/// The QP table rows of `host`'s connections among `flows` (its QP, the peer's: from the
/// directions both ways), all of process `pid`.
fn connections(
    flows: &[roce_observer::model::FlowRef],
    host: IpAddr,
    pid: u32,
) -> Vec<serde_json::Value> {
    flows
        .iter()
        .filter(|f| f.dst_ip == host)
        .map(|f| {
            let back = flows
                .iter()
                .find(|r| r.src_ip == host && r.dst_ip == f.src_ip)
                .expect("the reverse direction");
            serde_json::json!({"ifname": "mlx5_0", "port": 1, "lqpn": f.dest_qp,
            "rqpn": back.dest_qp, "type": "RC", "state": "RTS", "pid": pid, "comm": "python"})
        })
        .collect()
}

/// `host`'s NIC side as two copied trees (before and after: tests/fixtures/hosts/good, named
/// `{tag}before`, `{tag}after`): its RoCE v2 GID `host` (IPv4-mapped), the QP table `table`,
/// and each process's environment and cgroup (pid, environ, cgroup).
fn host_trees(
    scratch: &Scratch,
    tag: &str,
    host: IpAddr,
    table: &[serde_json::Value],
    procs: &[(u32, &str, Option<&str>)],
) -> Vec<std::path::PathBuf> {
    let IpAddr::V4(v4) = host else {
        panic!("an IPv4 host")
    };
    let [a, b, c, d] = v4.octets();
    let good = integration_tests::workspace_root().join("tests/fixtures/hosts/good");
    ["before", "after"]
        .iter()
        .map(|t| {
            let to = scratch.path(&format!("{tag}{t}"));
            let status = Command::new("cp")
                .arg("-r")
                .arg(good.join(t))
                .arg(&to)
                .status()
                .unwrap();
            assert!(status.success());
            std::fs::write(
                to.join("rdma/qps.json"),
                serde_json::to_string(table).unwrap(),
            )
            .unwrap();
            std::fs::write(
                to.join("sys/class/infiniband/mlx5_0/ports/1/gids/3"),
                format!("0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}\n"),
            )
            .unwrap();
            for (pid, environ, cgroup) in procs {
                let p = to.join(format!("proc/{pid}"));
                std::fs::create_dir_all(&p).unwrap();
                std::fs::write(p.join("environ"), environ).unwrap();
                if let Some(cgroup) = cgroup {
                    std::fs::write(p.join("cgroup"), cgroup).unwrap();
                }
            }
            to
        })
        .collect()
}

/// The remote side's rank across hosts: two hosts' records, each naming its own QPs'
/// processes, joined by (peer address, QP) in ClickHouse (docs/export.md's `peer-ranks`, both
/// exporters' records in one in-process database) and by `replay --jobs --peer-records` with
/// both directories, which names both hosts' ranks and the job from a third host's view.
#[test]
fn the_fleet_joins_each_sides_peer_rank() {
    let scratch = Scratch::new("jobs-peer-ranks");
    let pcap = synth_pcap(CLI, &scratch, "training");
    let plain = replay(&[pcap.to_str().unwrap(), "--jobs"]).jobs.unwrap();
    let flows = &plain.jobs[0].qps;
    let mut dirs = Vec::new();
    let mut want = std::collections::BTreeSet::new();
    let hosts: [(IpAddr, u32, u32); 2] = [
        ("198.18.80.3".parse().unwrap(), 4001, 2),
        ("198.18.80.4".parse().unwrap(), 4101, 3),
    ];
    for (i, (host, pid, rank)) in hosts.iter().enumerate() {
        let table = connections(flows, *host, *pid);
        assert_eq!(table.len(), 2, "{host}: {flows:?}");
        // Each of its QPs is the peer of the side at the other end of its connection.
        for q in &table {
            let peer = flows
                .iter()
                .find(|f| f.dst_ip == *host && u64::from(f.dest_qp) == q["lqpn"])
                .unwrap()
                .src_ip;
            want.insert((
                peer.to_string(),
                q["rqpn"].as_u64().unwrap(),
                host.to_string(),
                q["lqpn"].as_u64().unwrap(),
                format!("node-{i}"),
                rank.to_string(),
            ));
        }
        let environ = format!("RANK={rank}\0SLURM_JOB_ID=77\0");
        let trees = host_trees(
            &scratch,
            &format!("h{i}-"),
            *host,
            &table,
            &[(*pid, &environ, None)],
        );
        let dir = scratch.path(&format!("records-{i}"));
        let (status, _, err) = output(
            Command::new(CLI)
                .arg("replay")
                .arg(&pcap)
                .args(["--jobs", "--no-progress", "--json", "--nic-root"])
                .arg(&trees[0])
                .arg("--nic-root")
                .arg(&trees[1])
                .arg("--records")
                .arg(&dir),
        );
        assert!(status.success(), "{err}");
        // Each host its own exporter, as in a fleet (both replays ran on this machine).
        for table in roce_observer::export::TABLES {
            let file = dir.join(format!("{table}.jsonl"));
            let rows: String = std::fs::read_to_string(&file)
                .unwrap()
                .lines()
                .map(|l| {
                    let mut row: serde_json::Value = serde_json::from_str(l).unwrap();
                    row["host"] = format!("node-{i}").into();
                    row["exporter"] = format!("node-{i}/1/0").into();
                    format!("{row}\n")
                })
                .collect();
            std::fs::write(&file, rows).unwrap();
        }
        dirs.push(dir);
    }
    // ClickHouse: each side's peer process, from the peer's exporter's rows.
    let queries: std::collections::BTreeMap<String, String> =
        integration_tests::documented_queries()
            .into_iter()
            .filter(|(name, _)| name == "peer-ranks")
            .collect();
    let loads = [("fleet".to_string(), dirs.clone())].into_iter().collect();
    let answers = integration_tests::chdb_answers(&loads, &queries);
    let rows = answers["fleet"]["answers"]["peer-ranks"]
        .as_array()
        .unwrap();
    let text = |v: &serde_json::Value| v.as_str().unwrap().to_string();
    let num = |v: &serde_json::Value| v.as_u64().or_else(|| v.as_str()?.parse().ok()).unwrap();
    let got: std::collections::BTreeSet<_> = rows
        .iter()
        .map(|r| {
            assert_eq!(r["peer_job"], "slurm:77", "{r}");
            (
                text(&r["addr"]),
                num(&r["qp"]),
                text(&r["peer_addr"]),
                num(&r["peer_qp"]),
                text(&r["peer_host"]),
                text(&r["peer_rank"]),
            )
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(rows.len(), want.len(), "each side once: {rows:?}");
    // The records of both hosts name both ranks of the job, each from its own exporter.
    let mut args = vec![pcap.to_str().unwrap(), "--jobs", "--no-progress"];
    for d in &dirs {
        args.extend(["--peer-records", d.to_str().unwrap()]);
    }
    let job = &replay(&args).jobs.unwrap().jobs[0];
    let ranks: Vec<(IpAddr, u32, u32, Option<u32>)> = job
        .ranks
        .iter()
        .map(|r| (r.host, r.pid, r.qps, r.process.rank))
        .collect();
    assert_eq!(
        ranks,
        hosts.map(|(h, pid, rank)| (h, pid, 2, Some(rank))),
        "{:?}",
        job.ranks
    );
    let seen: Vec<Option<&str>> = job.ranks.iter().map(|r| r.seen_by.as_deref()).collect();
    assert_eq!(seen, [Some("node-0"), Some("node-1")]);
    assert_eq!(job.name.as_deref(), Some("slurm:77"));
}

/// Ranks from the processes (`replay --jobs --nic-root`): a host's QP table whose connections
/// are the generated ring's, both ways, names the ring's process on that host with what its
/// environment and cgroup tell, and the job after its launcher; a QP seen one way only (its
/// number on another host's traffic) joins nothing. Nothing of the environment but the
/// launchers' variables reaches the report, the records or a snapshot; the records' `job` and
/// `rank` are the process's; a snapshot of the trees gives the same ranks.
#[test]
fn ranks_and_the_jobs_name_come_from_the_qps_processes() {
    let scratch = Scratch::new("jobs-ranks");
    let pcap = synth_pcap(CLI, &scratch, "training");
    let plain = replay(&[pcap.to_str().unwrap(), "--jobs"]).jobs.unwrap();
    let flows = &plain.jobs[0].qps;
    let host: IpAddr = "198.18.80.3".parse().unwrap();
    // The host's connections: (its QP, the peer's), from the directions both ways.
    let mut table = connections(flows, host, 4001);
    assert_eq!(
        table.len(),
        2,
        "its predecessor and its successor: {flows:?}"
    );
    // Another host's QP number, with a peer the wire never sends to.
    let elsewhere = flows.iter().find(|f| f.dst_ip != host).unwrap();
    table.push(
        serde_json::json!({"ifname": "mlx5_0", "port": 1, "lqpn": elsewhere.dest_qp,
        "rqpn": 0x77_7777, "type": "RC", "state": "RTS", "pid": 4002, "comm": "python"}),
    );
    let uid = "0c1a6e2f-5ad6-4c4f-9d5c-0b2f8e2d2c1a";
    let container = "4f1c8a2b9d3e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a";
    let cgroup = format!(
        "0::/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{container}.scope\n",
        uid.replace('-', "_")
    );
    let trees = host_trees(
        &scratch,
        "",
        host,
        &table,
        &[
            (
                4001,
                "HOME=/root\0HF_TOKEN=secret-never-shown\0RANK=2\0LOCAL_RANK=2\0WORLD_SIZE=8\0TORCHELASTIC_RUN_ID=train-37\0",
                Some(&cgroup),
            ),
            (4002, "RANK=7\0SLURM_JOB_ID=99\0", None),
        ],
    );
    let records = scratch.path("records");
    let run = |roots: &[&std::path::Path], json: bool| -> String {
        let mut cmd = Command::new(CLI);
        cmd.arg("replay")
            .arg(&pcap)
            .args(["--jobs", "--no-progress"]);
        for r in roots {
            cmd.arg("--nic-root").arg(r);
        }
        if json {
            cmd.arg("--json").arg("--records").arg(&records);
        }
        let (status, out, err) = output(&mut cmd);
        assert!(status.success(), "{err}");
        out
    };
    let text = run(&[&trees[0], &trees[1]], true);
    assert!(!text.contains("secret-never-shown") && !text.contains("HF_TOKEN"));
    let report: Report = serde_json::from_str(&text).unwrap();
    let job = &report.jobs.as_ref().unwrap().jobs[0];
    assert_eq!(job.ranks.len(), 1, "{:?}", job.ranks);
    let r = &job.ranks[0];
    assert_eq!((r.host, r.pid, r.qps), (host, 4001, 2));
    assert_eq!(r.comm.as_deref(), Some("python"));
    let p = &r.process;
    assert_eq!(
        (p.rank, p.local_rank, p.world_size),
        (Some(2), Some(2), Some(8))
    );
    assert_eq!(p.job.as_deref(), Some("torchelastic:train-37"));
    assert_eq!(
        (p.pod.as_deref(), p.container.as_deref()),
        (Some(uid), Some(container))
    );
    assert_eq!(job.name.as_deref(), Some("torchelastic:train-37"));
    // The records' exporter: the RC QPs' processes, both of them.
    for line in std::fs::read_to_string(records.join("qp_intervals.jsonl"))
        .unwrap()
        .lines()
    {
        assert!(!line.contains("secret-never-shown"));
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(row["job"], "slurm:99,torchelastic:train-37", "{row}");
        assert_eq!(row["rank"], "2,7", "{row}");
    }
    // Each connection side of the host's QPs names its process; the others' name none.
    let sides = std::fs::read_to_string(records.join("connection_sides.jsonl")).unwrap();
    let mut named = 0;
    let mut exporter = String::new();
    for line in sides.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        exporter = row["host"].as_str().unwrap().to_string();
        if row["addr"] == "198.18.80.3" {
            assert_eq!(
                (&row["qp_pid"], &row["qp_rank"], &row["qp_job"]),
                (
                    &serde_json::json!(4001),
                    &serde_json::json!("2"),
                    &serde_json::json!("torchelastic:train-37")
                ),
                "{row}"
            );
            named += 1;
        } else {
            assert_eq!(
                (&row["qp_pid"], &row["qp_rank"], &row["qp_job"]),
                (
                    &serde_json::json!(0),
                    &serde_json::json!(""),
                    &serde_json::json!("")
                ),
                "{row}"
            );
        }
    }
    assert_eq!(named, 2, "its two sides: {sides}");
    // Another host's view of the same job, with no QP table of its own: the records name the
    // remote side's process (by its address and QP, connected to its peer's), and so the
    // job; from the directory or its file alike.
    for peers in [records.clone(), records.join("connection_sides.jsonl")] {
        let other = replay(&[
            pcap.to_str().unwrap(),
            "--jobs",
            "--no-progress",
            "--peer-records",
            peers.to_str().unwrap(),
        ]);
        let job = &other.jobs.as_ref().unwrap().jobs[0];
        assert_eq!(job.ranks.len(), 1, "{:?}", job.ranks);
        let r = &job.ranks[0];
        assert_eq!((r.host, r.pid, r.qps), (host, 4001, 2));
        assert_eq!(r.seen_by.as_deref(), Some(exporter.as_str()));
        assert_eq!(
            (r.process.rank, r.process.job.as_deref()),
            (Some(2), Some("torchelastic:train-37"))
        );
        assert_eq!(job.name.as_deref(), Some("torchelastic:train-37"));
    }
    // Records that are not: a directory without the table, a line that is not a side's.
    let empty = scratch.path("no-sides");
    std::fs::create_dir_all(&empty).unwrap();
    let bad = scratch.path("bad-sides.jsonl");
    std::fs::write(
        &bad,
        format!(
            "{}\n{{\"addr\": \"198.18.80.3\"}}\n",
            sides.lines().next().unwrap()
        ),
    )
    .unwrap();
    for (path, want) in [
        (&empty, "without connection_sides.jsonl".to_string()),
        (
            &bad,
            format!("{} line 2: qp_pid is not a count", bad.display()),
        ),
    ] {
        let (status, out, err) = output(
            Command::new(CLI)
                .arg("replay")
                .arg(&pcap)
                .args(["--jobs", "--no-progress", "--peer-records"])
                .arg(path),
        );
        assert!(!status.success() && out.is_empty(), "{out}");
        assert!(
            err.contains(&want) && err.lines().count() == 1,
            "{want}: {err}"
        );
    }
    // The terminal report: the job's launcher and the host's rank.
    let text = run(&[&trees[0], &trees[1]], false);
    assert!(text.contains("launched as torchelastic:train-37"), "{text}");
    let jobs_part = &text[text.find("\njobs (").expect("a jobs section")..];
    let row = jobs_part
        .lines()
        .find(|l| l.trim_start().starts_with("198.18.80.3 "))
        .unwrap_or_else(|| panic!("no row of 198.18.80.3: {text}"));
    assert_eq!(row.split_whitespace().nth(1), Some("2"), "{row}");
    assert!(
        text.contains("torchelastic:train-37/2"),
        "the QP table: {text}"
    );
    // A snapshot keeps the launchers' variables alone, and reads back the same.
    let snap = scratch.path("snap");
    let mut cmd = Command::new(CLI);
    cmd.arg("snapshot");
    for t in &trees {
        cmd.arg("--root").arg(t);
    }
    let (status, _, err) = output(cmd.arg(&snap));
    assert!(status.success(), "{err}");
    let mut kept = String::new();
    for entry in integration_tests::files_under(&snap) {
        if entry.ends_with("environ") {
            kept += &String::from_utf8_lossy(&std::fs::read(&entry).unwrap());
        }
    }
    assert!(
        kept.contains("RANK=2") && !kept.contains("secret") && !kept.contains("HOME"),
        "{kept:?}"
    );
    let again = replay(&[
        pcap.to_str().unwrap(),
        "--jobs",
        "--no-progress",
        "--nic-root",
        snap.to_str().unwrap(),
    ]);
    assert_eq!(again.jobs.unwrap().jobs[0].ranks, job.ranks);
}

#[test]
fn jobs_are_the_same_on_any_number_of_threads() {
    let scratch = Scratch::new("jobs-threads");
    for scenario in ["demo", "latency", "training", "training-two-jobs"] {
        let pcap = synth_pcap(CLI, &scratch, scenario);
        let pcap = pcap.to_str().unwrap();
        let one = replay(&[pcap, "--jobs", "--threads", "1"]).jobs.unwrap();
        assert!(!one.jobs.is_empty(), "{scenario}");
        for threads in ["2", "3"] {
            let many = replay(&[pcap, "--jobs", "--threads", threads])
                .jobs
                .unwrap();
            assert_eq!(many, one, "{scenario}, {threads} threads");
        }
        // Without --jobs, no section (and no cost).
        assert!(replay(&[pcap]).jobs.is_none());
    }
}

/// Past 100,000 bins the jobs' bins stop, said in a warning: the NCCL capture of one node on
/// 10 us bins (10 s: a million) keeps its first second, the set-up (whose QPs carry too few
/// bytes to join hosts), and not the all-reduce ten seconds later, whose bytes would make the
/// job; on one thread as on two.
#[test]
fn past_the_last_bin_nothing_counts() {
    let test = "past_the_last_bin_nothing_counts";
    let Some(files) = node_files(test, "nccl") else {
        return;
    };
    assert_eq!(
        replay(&[files[0].as_str(), "--jobs"])
            .jobs
            .unwrap()
            .jobs
            .len(),
        1
    );
    let mut got = Vec::new();
    for threads in ["1", "2"] {
        let r = replay(&[
            files[0].as_str(),
            "--jobs",
            "--jobs-bin",
            "10us",
            "--threads",
            threads,
        ]);
        assert!(
            r.source
                .warnings
                .iter()
                .any(|w| w.contains("more than 100000 job bins: the jobs analysis stops there")),
            "{:?}",
            r.source.warnings
        );
        let jobs = r.jobs.unwrap();
        assert!(jobs.jobs.is_empty(), "{threads} threads: {jobs:#?}");
        got.push(jobs);
    }
    assert_eq!(got[0], got[1]);
}

#[test]
fn bad_jobs_flags_are_one_line() {
    for (args, want) in [
        (
            vec!["--jobs", "--jobs-bin", "5us"],
            "5us is not between 10us and 1s",
        ),
        (
            vec!["--jobs", "--jobs-bin", "2s"],
            "2s is not between 10us and 1s",
        ),
        (
            vec!["--jobs-bin", "1ms"],
            "the following required arguments were not provided",
        ),
    ] {
        let (status, _, err) = output(Command::new(CLI).args(["replay", "x.pcap"]).args(&args));
        // (clap's usage errors: the error, then where to read more.)
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("error: ") && first.contains(want),
            "{args:?}: {err}"
        );
    }
    // The XDP observer has no frame times: diagnose --jobs needs a capture, before anything
    // is attached (no root needed to be told).
    let (status, out, err) =
        output(Command::new(CLI).args(["diagnose", "--iface", "lo", "--jobs"]));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--jobs needs every frame's time: give --capture DEV"),
        "{err}"
    );
}
