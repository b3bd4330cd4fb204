//! `cargo xtask bench` (second part): offline replay throughput, beside tshark, in the same run.
//!
//! Writes a pcap of `--frames` synthetic RoCEv2 frames to a temporary file (streamed: frames are
//! encoded and written one at a time), then measures the path `roce-observer replay FILE` takes,
//! with the whole analysis on (`pipeline::replay_report` with the default analysis options:
//! counts, flows, PSN analysis, connections, latency, time series, microbursts, findings):
//! - on one thread (`--threads 1`), and with the file read on one thread and its frames
//!   accounted by `--threads` more (default: the CPUs available, as `replay` does): frames/s
//!   and MB/s, the median of `--runs` runs each, and how the second scales on the first;
//! - `tshark -n -r FILE` (output to /dev/null), `tshark -n -r FILE -q` and
//!   `tshark -n -r FILE -q -Y infiniband` (dissects, prints nothing), once each;
//! - the ratio of replay to `tshark -n -r FILE` (`-q` with no tap skips dissection: it only
//!   reads the records), a figure;
//! - the page-cache read floor: the file read through in 1 MiB chunks, nothing else. The
//!   target: replay of whole frames at least half of it;
//! - `replay --jobs` (every flow on 1 ms bins, the jobs analysis) on as many threads: its time
//!   as a multiple of the plain replay's, a figure.
//!
//! The traffic: 64 RC QPs (IPv4, DSCP 26) doing RDMA WRITE middle with 256..1024-byte payloads
//! and in-sequence PSNs, an ACK from the responder every 16 requests of a QP, 1% of requests CE
//! marked, and a CNP after every 8th CE mark of a QP. Each report is checked against what was
//! written (frames, RoCE packets, CE, CNPs, flows, connections, the time series' packets, zero
//! PSN gaps and regressions, no warning), and the threaded report against the one-thread report
//! (the same JSON), so a broken path cannot pass as a fast one. Exit code 0 on a missed target
//! (noisy machines), non-zero on a wrong replay result or a failure to run.

use integration_tests::median;
use std::{
    collections::BTreeSet,
    fs::File,
    io::{BufWriter, Write},
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::{Command, ExitCode, Stdio},
    time::Instant,
};

use observer_common::{FlowKey, wire};
use roce_observer::{
    model::Report,
    pipeline::{AnalysisOptions, default_replay_threads, replay_report},
    source::synth::{CE, CNP_DSCP, ECT0, Ip, NOT_ECT, RoceFrame, SYNDROME_ACK},
};

/// Replay of whole frames with the whole analysis, at least this share of the page-cache read
/// floor: the same file read through in 1 MiB chunks from the page cache, in the same run.
const TARGET_SHARE_OF_FLOOR: f64 = 0.5;
const QPS: u32 = 64;
const ACK_EVERY: u64 = 16;
/// One request in CE_EVERY is CE marked (1%).
const CE_EVERY: u64 = 100;
/// A QP's responder sends a CNP after this many CE marks.
const CNP_EVERY_CE: u64 = 8;
const FRAME_GAP_NS: u64 = 100;
const BASE_TS_NS: u64 = 1_750_000_000_000_000_000;
/// Replay throughput beside `tshark -n -r` on a generated capture.
#[derive(clap::Parser)]
#[command(name = "bench-replay")]
struct Args {
    /// Frames in the generated capture.
    #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    frames: u64,
    /// Store at most this many bytes of each frame, as a header-only mirror or sniffer capture
    /// does (65535: whole frames).
    #[arg(long, default_value_t = 65_535, value_parser = clap::value_parser!(u32).range(64..=65_535))]
    snaplen: u32,
    /// Replay measurements per thread count; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Threads accounting frames in the threaded measurement (default: as `replay`, the CPUs
    /// available, at most 8).
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=64))]
    threads: Option<u32>,
    /// Skip the tshark measurements (no ratio).
    #[arg(long = "no-tshark", action = clap::ArgAction::SetFalse)]
    tshark: bool,
    /// Leave the generated capture in place (to profile `roce-observer replay` on it).
    #[arg(long)]
    keep: bool,
    /// Print the figures as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// What the generator wrote: what every replay must report.
#[derive(Debug, Default)]
struct Written {
    frames: u64,
    bytes: u64,
    ce: u64,
    cnps: u64,
    acks: u64,
    flows: BTreeSet<FlowKey>,
}

/// One RC QP: the requester's WRITE template and the responder's ACK and CNP templates.
struct Qp {
    req: RoceFrame,
    ack: RoceFrame,
    cnp: RoceFrame,
    requests: u64,
    ce: u64,
}

fn qps() -> Vec<Qp> {
    (0..QPS)
        .map(|i| {
            let a = Ipv4Addr::new(198, 18, 0, 1 + (i % 8) as u8);
            let b = Ipv4Addr::new(198, 18, 1, 1 + (i / 8) as u8);
            let (lqpn, rqpn) = (0x100 + i, 0x200 + i);
            let sport = roce_observer::source::synth::rdma_udp_sport(lqpn, rqpn);
            let mut req = RoceFrame::new(
                Ip::v4(a, b),
                wire::TRANSPORT_RC | wire::op::WRITE_MIDDLE,
                rqpn,
            );
            req.udp_src_port = sport;
            req.bth.psn = i * 0x1000;
            let mut ack = RoceFrame::new(
                Ip::v4(b, a),
                wire::TRANSPORT_RC | wire::op::ACKNOWLEDGE,
                lqpn,
            );
            (ack.src_mac, ack.dst_mac) = (req.dst_mac, req.src_mac);
            ack.udp_src_port = sport;
            ack.ext.syndrome = SYNDROME_ACK;
            let mut cnp = RoceFrame::new(Ip::v4(b, a), wire::OPCODE_CNP, lqpn);
            (cnp.src_mac, cnp.dst_mac) = (req.dst_mac, req.src_mac);
            cnp.udp_src_port = sport;
            cnp.bth.becn = true;
            cnp.dscp = CNP_DSCP;
            cnp.ecn = NOT_ECT;
            Qp {
                req,
                ack,
                cnp,
                requests: 0,
                ce: 0,
            }
        })
        .collect()
}

/// A nanosecond-resolution little-endian pcap writer (records streamed, nothing held) that
/// stores at most `snaplen` bytes of each frame.
struct Pcap<W: Write> {
    w: W,
    snaplen: u32,
    frames: u64,
    bytes: u64,
}

impl<W: Write> Pcap<W> {
    fn new(mut w: W, snaplen: u32) -> std::io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xA1B2_3C4Du32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&snaplen.to_le_bytes());
        h.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
        w.write_all(&h)?;
        Ok(Self {
            w,
            snaplen,
            frames: 0,
            bytes: 24,
        })
    }

    fn frame(&mut self, bytes: &[u8], ts_ns: u64) -> std::io::Result<()> {
        let len = bytes.len() as u32;
        let kept = len.min(self.snaplen);
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        rec[8..12].copy_from_slice(&kept.to_le_bytes());
        rec[12..16].copy_from_slice(&len.to_le_bytes());
        self.w.write_all(&rec)?;
        self.w.write_all(&bytes[..kept as usize])?;
        self.frames += 1;
        self.bytes += 16 + u64::from(kept);
        Ok(())
    }
}

fn generate(path: &Path, frames: u64, snaplen: u32) -> std::io::Result<Written> {
    let mut qps = qps();
    let mut out = Pcap::new(
        BufWriter::with_capacity(1 << 20, File::create(path)?),
        snaplen,
    )?;
    // A fixed sequence: the same capture every run.
    let mut rng = fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15);
    let mut written = Written::default();
    let mut ts = BASE_TS_NS;
    let mut requests = 0u64;
    while out.frames < frames {
        let q = &mut qps[rng.usize(..QPS as usize)];
        // A request: in-sequence PSN, 256..1024 bytes (a multiple of 4: no pad).
        q.req.payload_len = 256 + 4 * rng.usize(..193);
        requests += 1;
        let ce = requests.is_multiple_of(CE_EVERY);
        q.req.ecn = if ce { CE } else { ECT0 };
        out.frame(&q.req.to_bytes(), ts)?;
        ts += FRAME_GAP_NS;
        written.flows.insert(q.req.flow_key());
        q.req.bth.psn = (q.req.bth.psn + 1) & 0xFF_FFFF;
        q.requests += 1;
        if ce {
            written.ce += 1;
            q.ce += 1;
            if q.ce.is_multiple_of(CNP_EVERY_CE) && out.frames < frames {
                out.frame(&q.cnp.to_bytes(), ts)?;
                ts += FRAME_GAP_NS;
                written.flows.insert(q.cnp.flow_key());
                written.cnps += 1;
            }
        }
        if q.requests.is_multiple_of(ACK_EVERY) && out.frames < frames {
            q.ack.bth.psn = (q.req.bth.psn + 0xFF_FFFF) & 0xFF_FFFF;
            q.ack.ext.msn = (q.ack.ext.msn + 1) & 0xFF_FFFF;
            out.frame(&q.ack.to_bytes(), ts)?;
            ts += FRAME_GAP_NS;
            written.flows.insert(q.ack.flow_key());
            written.acks += 1;
        }
    }
    out.w.flush()?;
    written.frames = out.frames;
    written.bytes = out.bytes;
    Ok(written)
}

/// Checks a replay report against what was written; the problems found.
fn check(r: &Report, w: &Written) -> Vec<String> {
    let mut bad = Vec::new();
    let t = &r.totals;
    let mut expect = |what: &str, got: u64, want: u64| {
        if got != want {
            bad.push(format!("{what}: {got}, expected {want}"));
        }
    };
    expect("frames", t.frames, w.frames);
    expect("roce packets", t.roce_packets, w.frames);
    expect("CE packets", t.ce_packets, w.ce);
    expect("CNP packets", t.cnp_packets, w.cnps);
    expect("flows", r.flows.len() as u64, w.flows.len() as u64);
    expect("connections", r.connections.len() as u64, u64::from(QPS));
    let acks: u64 = r.flows.iter().map(|f| f.ops.ack).sum();
    expect("ACKs", acks, w.acks);
    let series_packets: u64 = r
        .series
        .as_ref()
        .map_or(0, |s| s.total.packets.iter().sum());
    expect("time series packets", series_packets, w.frames);
    expect("PSN gaps", t.psn.gaps, 0);
    expect("PSN regressions", t.psn.regressions, 0);
    if r.microbursts.is_none() {
        bad.push("no microbursts section".to_string());
    }
    if !r.source.warnings.is_empty() {
        bad.push(format!("warnings: {:?}", r.source.warnings));
    }
    bad
}

/// One replay of `path` on `threads` threads, its report checked: its seconds and the report.
fn measure(path: &str, threads: usize, written: &Written) -> Result<(f64, Report), String> {
    let options = AnalysisOptions::default();
    let start = Instant::now();
    let report = replay_report(&[path.to_string()], false, None, Some(&options), threads)
        .map_err(|e| format!("replay failed: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    let bad = check(&report, written);
    if !bad.is_empty() {
        return Err(format!(
            "wrong replay result ({threads} threads): {}",
            bad.join("; ")
        ));
    }
    Ok((secs, report))
}

/// One replay of `path` with the jobs analysis (`replay --jobs`, 1 ms bins) on `threads`
/// threads: its seconds (the report must have its jobs).
fn measure_jobs(path: &str, threads: usize) -> Result<f64, String> {
    let options = AnalysisOptions {
        jobs_bin_ns: Some(1_000_000),
        ..AnalysisOptions::default()
    };
    let start = Instant::now();
    let report = replay_report(&[path.to_string()], false, None, Some(&options), threads)
        .map_err(|e| format!("replay --jobs failed: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    match report.jobs {
        Some(j) if !j.jobs.is_empty() => Ok(secs),
        _ => Err("replay --jobs found no job".into()),
    }
}

/// Wall seconds of `tshark -n -r FILE [extra]`, output to /dev/null.
fn tshark(file: &Path, extra: &[&str]) -> Result<f64, String> {
    let start = Instant::now();
    let st = Command::new("tshark")
        .arg("-n")
        .arg("-r")
        .arg(file)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run tshark: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    if !st.success() {
        return Err(format!("tshark {extra:?} failed: {st}"));
    }
    Ok(secs)
}

/// The capture, removed at the end unless kept.
struct TempFile(PathBuf, bool);

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.1 {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Seconds to read `path` through in 1 MiB chunks.
fn read_through(path: &Path) -> std::io::Result<f64> {
    use std::io::Read;
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let t0 = Instant::now();
    while f.read(&mut buf)? > 0 {}
    Ok(t0.elapsed().as_secs_f64())
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    let file = TempFile(
        std::env::temp_dir().join(format!("roce-bench-replay-{}.pcap", std::process::id())),
        args.keep,
    );
    let gen_start = Instant::now();
    let written = match generate(&file.0, args.frames, args.snaplen) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("bench-replay: cannot write {}: {e}", file.0.display());
            return ExitCode::FAILURE;
        }
    };
    let gen_secs = gen_start.elapsed().as_secs_f64();
    if !args.json {
        println!(
            "generated {} frames ({:.1} MB, snaplen {}, {} QPs, {} CE, {} CNPs, {} ACKs) in {:.1} s: {}",
            written.frames,
            written.bytes as f64 / 1e6,
            args.snaplen,
            QPS,
            written.ce,
            written.cnps,
            written.acks,
            gen_secs,
            file.0.display()
        );
    }

    // Replay as `roce-observer replay FILE` does it, on one thread and on several; every report
    // is checked, and the threaded one must equal the one-thread one.
    let path = file.0.display().to_string();
    let threads = args
        .threads
        .map_or_else(|| default_replay_threads().max(2), |n| n as usize);
    // One thread and several in turn, so that the machine's other load falls on both alike.
    let (mut one_secs, mut many_secs, mut jobs_secs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.runs {
        let runs = measure(&path, 1, &written).and_then(|(s1, r1)| {
            let (sn, rn) = measure(&path, threads, &written)?;
            let json_of = |r: &Report| serde_json::to_string(r).expect("serializable");
            if json_of(&r1) != json_of(&rn) {
                return Err(format!(
                    "wrong replay result: the report on {threads} threads differs from the one on 1"
                ));
            }
            Ok((s1, sn, measure_jobs(&path, threads)?))
        });
        match runs {
            Ok((s1, sn, sj)) => {
                one_secs.push(s1);
                many_secs.push(sn);
                jobs_secs.push(sj);
            }
            Err(e) => {
                eprintln!("bench-replay: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let one = median(&one_secs);
    let replay_secs = median(&many_secs);
    let jobs_secs_median = median(&jobs_secs);
    let jobs_cost = jobs_secs_median / replay_secs;
    let fps = written.frames as f64 / replay_secs;
    let mbps = written.bytes as f64 / replay_secs / 1e6;
    let scaling = one / replay_secs;

    let (ts_full, ts_quiet, ts_filter) = if args.tshark {
        let full = tshark(&file.0, &[]);
        let quiet = tshark(&file.0, &["-q"]);
        // A display filter makes tshark dissect every frame without printing anything.
        let filter = tshark(&file.0, &["-q", "-Y", "infiniband"]);
        for r in [&full, &quiet, &filter] {
            if let Err(e) = r {
                eprintln!("bench-replay: {e}");
            }
        }
        (full.ok(), quiet.ok(), filter.ok())
    } else {
        (None, None, None)
    };
    // The ratio against `tshark -n -r FILE`, which dissects every frame. `-q` without a tap or
    // filter does not dissect at all (tshark only reads the records), so its ratio is shown for
    // information only.
    let ratio = ts_full.map(|t| t / replay_secs);
    let ratio_one = ts_full.map(|t| t / one);
    let ratio_quiet = ts_quiet.map(|t| t / replay_secs);
    let ratio_filter = ts_filter.map(|t| t / replay_secs);

    // The floor: the file (in the page cache after the replays) read through and nothing
    // else, the median of as many runs.
    let file_bytes = match std::fs::metadata(&file.0) {
        Ok(m) if m.len() > 0 => m.len(),
        other => {
            eprintln!(
                "bench-replay: {}: no size to judge ({other:?})",
                file.0.display()
            );
            return ExitCode::FAILURE;
        }
    };
    let mut floor_secs = Vec::new();
    for _ in 0..args.runs {
        match read_through(&file.0) {
            Ok(s) => floor_secs.push(s),
            Err(e) => {
                eprintln!("bench-replay: reading {} back: {e}", file.0.display());
                return ExitCode::FAILURE;
            }
        }
    }
    let floor_mbps = file_bytes as f64 / median(&floor_secs) / 1e6;
    let replay_file_mbps = file_bytes as f64 / replay_secs / 1e6;
    let share = replay_file_mbps / floor_mbps;
    // Judged on whole frames only (a snaplen run is a figure).
    let share_pass = (args.snaplen == 65_535).then_some(share >= TARGET_SHARE_OF_FLOOR);
    let verdict = format!(
        "{}: replay on {threads} threads reads {replay_file_mbps:.0} MB/s of the file, {:.1}% of the page-cache read floor's {floor_mbps:.0} MB/s (target: at least {:.0}% on whole frames)",
        match share_pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "----",
        },
        100.0 * share,
        100.0 * TARGET_SHARE_OF_FLOOR
    );

    if args.json {
        let figures = |secs: &[f64], median_s: f64, ratio: Option<f64>| {
            serde_json::json!({
                "runs_seconds": secs,
                "seconds": median_s,
                "frames_per_second": written.frames as f64 / median_s,
                "mb_per_second": written.bytes as f64 / median_s / 1e6,
                "ratio": ratio,
            })
        };
        let json = serde_json::json!({
            "frames": written.frames,
            "snaplen": args.snaplen,
            "bytes": written.bytes,
            "qps": QPS,
            "ce": written.ce,
            "cnps": written.cnps,
            "acks": written.acks,
            "generate_seconds": gen_secs,
            "statistic": "median",
            "path": "pipeline::replay_report, default analysis options (roce-observer replay FILE)",
            "threads": threads,
            "replay": {
                "runs_seconds": many_secs,
                "seconds": replay_secs,
                "frames_per_second": fps,
                "mb_per_second": mbps,
            },
            "replay_one_thread": figures(&one_secs, one, ratio_one),
            "replay_threads": figures(&many_secs, replay_secs, ratio),
            "replay_jobs": figures(&jobs_secs, jobs_secs_median, None),
            "jobs_cost": jobs_cost,
            "scaling": scaling,
            "tshark": {
                "seconds": ts_full,
                "quiet_seconds": ts_quiet,
                "quiet_filter_seconds": ts_filter,
            },
            "ratio": ratio,
            "ratio_quiet": ratio_quiet,
            "ratio_quiet_filter": ratio_filter,
            "read_floor": {
                "runs_seconds": floor_secs,
                "mb_per_second": floor_mbps,
            },
            "share_of_read_floor": share,
            "target": {
                "min_share_of_read_floor": TARGET_SHARE_OF_FLOOR,
                "pass": share_pass,
            },
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json).expect("serializable")
        );
    } else {
        let runs = |secs: &[f64]| {
            secs.iter()
                .map(|s| format!("{s:.3} s"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "replay FILE with the whole analysis (median of {} runs; 1 thread: {}; {threads} threads: {})",
            args.runs,
            runs(&one_secs),
            runs(&many_secs)
        );
        println!(
            "{:<30} {:>10} {:>12} {:>10} {:>12}",
            "", "seconds", "M frames/s", "MB/s", "vs tshark"
        );
        let row = |name: &str, s: f64, ratio: Option<f64>| {
            println!(
                "{name:<30} {s:>10.3} {:>12.3} {:>10.1} {:>12}",
                written.frames as f64 / s / 1e6,
                written.bytes as f64 / s / 1e6,
                ratio.map_or("-".to_string(), |r| format!("{r:.1}x"))
            )
        };
        row("replay, 1 thread", one, ratio_one);
        row(&format!("replay, {threads} threads"), replay_secs, ratio);
        row(
            &format!("replay --jobs, {threads} threads"),
            jobs_secs_median,
            None,
        );
        if let Some(s) = ts_full {
            row("tshark -n -r FILE", s, None);
        }
        if let Some(s) = ts_quiet {
            row("tshark -n -r FILE -q", s, None);
        }
        if let Some(s) = ts_filter {
            row("tshark ... -q -Y infiniband", s, None);
        }
        if let Some(r) = ratio_quiet {
            println!(
                "(tshark -q reads the records without dissecting them: {r:.1}x, not a target)"
            );
        }
        if let Some(r) = ratio_filter {
            println!("(tshark -q -Y infiniband dissects without printing: {r:.1}x, not a target)");
        }
        println!("scaling: 1 -> {threads} threads: {scaling:.2}x the throughput");
        println!(
            "--jobs (1 ms bins): {jobs_cost:.2}x the plain replay's time (a figure, no target)"
        );
        println!("{verdict}");
    }
    ExitCode::SUCCESS
}
