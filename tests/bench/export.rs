//! `cargo xtask bench` (after bench-replay): what the fleet records cost a host per interval, for
//! `--qps` QPs (default 10,000), in process:
//! - numbering and encoding one interval's rows (observer-core's export tables), as JSONEachRow
//!   lines and as OTLP log records in requests (cut by observer-otlp as its exporter cuts them);
//! - gzip of the requests, as the OTLP exporter sends them;
//! - bytes per QP-interval, encoded and compressed, and the queue's bytes per QP (what a
//!   buffered interval holds in memory);
//! - the share of one core the OTLP path takes at a 1 s interval, against the target: at most
//!   2% of a core for 10k QPs. This is the encoding side alone (the rows from a report); the
//!   sidecar's own reading of every QP is measured with it once `run` exports records.
//!
//! The rows: `--qps` flows with every counter set, half of them with a connection side, so the
//! tables and attributes are those a real interval carries. Each run's encoded rows are checked
//! (a row per flow, per side, the interval's own), so a broken path cannot pass as a fast one.

use std::{
    io::Write,
    net::{IpAddr, Ipv4Addr},
    process::ExitCode,
    time::Instant,
};

use integration_tests::median;
use observer_otlp::{MAX_ROWS_PER_REQUEST, RecordWriter, Requests, logs_bytes};
use roce_observer::{
    export::{IntervalRows, Resource, Sequencer, json_row},
    model::{Flow, Report},
};

/// At most this share of one core for 10k QPs at a 1 s interval.
const TARGET_SHARE_OF_CORE: f64 = 0.02;

#[derive(clap::Parser)]
#[command(name = "bench-export")]
struct Args {
    /// QPs in the interval.
    #[arg(long, default_value_t = 10_000)]
    qps: u32,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 15)]
    runs: usize,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

fn report(qps: u32) -> Report {
    let replay = roce_observer::source::synth::scenario("clean").expect("the clean scenario");
    let mut agg = roce_observer::aggregate::Aggregate::new();
    for f in &replay.frames {
        let _ = agg.push(&f.bytes, f.ts_ns);
    }
    let mut r = agg.report(roce_observer::model::Source::pcap(vec![], vec![]), 1.0);
    let template = r.connections.first().cloned();
    r.flows = (0..qps)
        .map(|i| {
            let src = IpAddr::V4(Ipv4Addr::from(0xC612_0000 | (i >> 8)));
            let dst = IpAddr::V4(Ipv4Addr::from(0xC613_0000 | (i & 0xFF)));
            let mut f = Flow::empty(src, dst, 0xC000 | (i as u16 & 0x3FFF), 0x100 + i);
            f.packets = 1_000_000 + u64::from(i);
            f.bytes = f.packets * 4096;
            f.ecn.ect0 = f.packets - 100;
            f.ecn.ce = 100;
            f.ops.write = f.packets - 10;
            f.ops.ack = 10;
            f.psn.gaps = 3;
            f.psn.retransmissions = 7;
            f.transports = vec!["RC".into()];
            f.dscp = vec![26];
            f.first_seen_ns = 1_750_000_000_000_000_000;
            f.last_seen_ns = f.first_seen_ns + 999_000_000;
            f
        })
        .collect();
    r.connections = template
        .map(|c| vec![c; qps as usize / 4])
        .unwrap_or_default();
    r
}

/// The sidecar's interval: `qps` QPs (one direction each, as bench-daemon sends them), two
/// SEND frames each, parsed into the aggregate the sidecar builds from its flows' growth.
fn sidecar_aggregate(qps: u32) -> roce_observer::aggregate::Aggregate {
    use roce_observer::source::synth::{Ip, RoceFrame};
    let mut agg = roce_observer::aggregate::Aggregate::new();
    let dst = Ipv4Addr::new(198, 19, 0, 1);
    for psn in 0..2u32 {
        for i in 0..qps {
            let src = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + (i & 0xFFFF));
            let mut f = RoceFrame::new(Ip::v4(src, dst), 0x04, i + 1);
            f.bth.psn = psn;
            f.payload_len = 64;
            let ts = 1_750_000_000_000_000_000 + u64::from(psn) * 500_000_000 + u64::from(i);
            let _ = agg.push(&f.to_bytes(), ts);
        }
    }
    agg
}

/// One interval's rows, streamed as the sidecar's exporter writes them: OTLP requests
/// (encoded, not compressed) cut as the exporter cuts them, and the rows written.
fn otlp_requests(
    resource: &Resource,
    seq: &mut Sequencer,
    rows: &IntervalRows<'_>,
) -> (Vec<Vec<u8>>, usize) {
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    let mut n = 0;
    let mut requests = Requests::new(
        RecordWriter::new(Vec::new(), 2, 3),
        MAX_ROWS_PER_REQUEST,
        |records, rows| {
            bodies.push(logs_bytes(resource, records));
            n += rows as usize;
        },
    );
    seq.each_row(resource, 1, 2, rows, false, &mut requests);
    requests.finish();
    (bodies, n)
}

fn gzip_all(bodies: &[Vec<u8>]) -> usize {
    bodies
        .iter()
        .map(|b| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(b).unwrap();
            gz.finish().unwrap().len()
        })
        .sum()
}

/// The sidecar's builder thread on one interval, stage by stage (medians, seconds).
#[derive(Default)]
struct Sidecar {
    report_s: f64,
    conclude_s: f64,
    rows_s: f64,
    gzip_s: f64,
    rows: usize,
    gzip_bytes: usize,
}

impl Sidecar {
    fn total(&self) -> f64 {
        self.report_s + self.conclude_s + self.rows_s + self.gzip_s
    }
}

fn sidecar(qps: u32, runs: usize, resource: &Resource) -> Result<Sidecar, String> {
    let agg = sidecar_aggregate(qps);
    let (mut report_t, mut conclude_t, mut rows_t, mut gzip_t) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut out = Sidecar::default();
    for _ in 0..runs {
        let t = Instant::now();
        let mut report = agg.report(roce_observer::model::Source::live(vec![], "auto"), 1.0);
        report_t.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        roce_observer::pipeline::conclude(
            &mut report,
            &roce_observer::pipeline::AnalysisOptions::default(),
        );
        conclude_t.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let (bodies, n) = otlp_requests(
            resource,
            &mut Sequencer::default(),
            &IntervalRows::of(&report),
        );
        rows_t.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        out.gzip_bytes = gzip_all(&bodies);
        gzip_t.push(t.elapsed().as_secs_f64());
        out.rows = n;
        if report.flows.len() != qps as usize {
            return Err(format!(
                "the sidecar's interval has {} QPs, want {qps}",
                report.flows.len()
            ));
        }
    }
    out.report_s = median(&report_t);
    out.conclude_s = median(&conclude_t);
    out.rows_s = median(&rows_t);
    out.gzip_s = median(&gzip_t);
    Ok(out)
}

fn main() -> ExitCode {
    let args: Args = clap::Parser::parse();
    // The allocator kept as the sidecar keeps it.
    observer_daemon::hold_memory();
    let report = report(args.qps);
    let resource = Resource {
        exporter: "bench/1/0".into(),
        host: "bench".into(),
        observed: "rx0".into(),
        source: "live".into(),
        ..Resource::default()
    };
    let side = match sidecar(args.qps, args.runs, &resource) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench-export: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rows = IntervalRows::of(&report);
    let want_rows = report.flows.len() + 2 * report.connections.len();
    let (mut encode, mut jsonl, mut gzip) = (Vec::new(), Vec::new(), Vec::new());
    let (mut encoded_bytes, mut gzip_bytes, mut requests, mut n_rows) = (0, 0, 0, 0);
    for _ in 0..args.runs {
        // OTLP: rows, log records, requests as the exporter cuts them, encoded.
        let t = Instant::now();
        let (bodies, n) = otlp_requests(&resource, &mut Sequencer::default(), &rows);
        encode.push(t.elapsed().as_secs_f64());
        n_rows = n;
        requests = bodies.len();
        encoded_bytes = bodies.iter().map(Vec::len).sum::<usize>();
        let t = Instant::now();
        gzip_bytes = gzip_all(&bodies);
        gzip.push(t.elapsed().as_secs_f64());
        // JSONEachRow: the same rows as lines.
        let t = Instant::now();
        let mut out = String::with_capacity(encoded_bytes);
        for row in Sequencer::default().interval(&resource, 1, 2, &rows) {
            out.push_str(&json_row(&row));
            out.push('\n');
        }
        jsonl.push(t.elapsed().as_secs_f64());
        std::hint::black_box(out);
    }
    // One row per flow and connection side, the latency buckets, and the interval's own.
    if n_rows < want_rows + 1 {
        eprintln!(
            "bench-export: {n_rows} rows, want at least {}",
            want_rows + 1
        );
        return ExitCode::FAILURE;
    }
    let (encode, gzip, jsonl) = (median(&encode), median(&gzip), median(&jsonl));
    let qps = f64::from(args.qps);
    // The builder's whole interval, at a 1 s interval.
    let share = side.total() / 1.0;
    let pass = share <= TARGET_SHARE_OF_CORE * qps / 10_000.0;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "bench": "export",
                "qps": args.qps,
                "sidecar": {
                    "report_s": side.report_s,
                    "conclude_s": side.conclude_s,
                    "rows_s": side.rows_s,
                    "gzip_s": side.gzip_s,
                    "rows": side.rows,
                    "gzip_bytes": side.gzip_bytes,
                },
                "share_of_core_at_1s": share,
                "records_alone_share_of_core_at_1s": side.rows_s + side.gzip_s,
                "target_share": TARGET_SHARE_OF_CORE,
                "pass": pass,
                "every_counter": {
                    "rows": n_rows,
                    "requests": requests,
                    "otlp_encode_s": encode,
                    "gzip_s": gzip,
                    "jsonl_s": jsonl,
                    "bytes_per_qp_interval": encoded_bytes as f64 / n_rows as f64,
                    "gzip_bytes_per_qp_interval": gzip_bytes as f64 / n_rows as f64,
                },
            })
        );
    } else {
        println!(
            "bench-export: the sidecar's records of one interval of {} QPs ({} rows), as its builder thread makes them",
            args.qps, side.rows
        );
        println!(
            "  report {:.1} ms, findings {:.1} ms, rows and OTLP encoding {:.1} ms, gzip {:.1} ms ({:.1} B a record)",
            side.report_s * 1e3,
            side.conclude_s * 1e3,
            side.rows_s * 1e3,
            side.gzip_s * 1e3,
            side.gzip_bytes as f64 / side.rows as f64,
        );
        println!(
            "  {:.2}% of a core at a 1 s interval (target at most {:.0}%): {}",
            share * 100.0,
            TARGET_SHARE_OF_CORE * 100.0,
            if pass { "PASS" } else { "MISS" }
        );
        // What no analysis can save: the records themselves.
        println!(
            "  the records alone (rows made, encoded and gzip'd; no report, no findings): {:.2}% of a core",
            (side.rows_s + side.gzip_s) * 100.0
        );
        println!(
            "every counter set: {n_rows} rows, {requests} OTLP requests: encoding {:.1} ms, gzip {:.1} ms; JSONEachRow (rows made, then written) {:.1} ms",
            encode * 1e3,
            gzip * 1e3,
            jsonl * 1e3
        );
        println!(
            "  per QP-interval: {:.0} bytes encoded, {:.0} gzip'd (the send buffer holds them gzip'd)",
            encoded_bytes as f64 / n_rows as f64,
            gzip_bytes as f64 / n_rows as f64
        );
    }
    ExitCode::SUCCESS
}
