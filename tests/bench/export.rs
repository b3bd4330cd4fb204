//! `cargo xtask bench` (after bench-replay): what the fleet records cost a host per interval, for
//! `--qps` QPs (default 10,000), in process:
//! - numbering and encoding one interval's rows (observer-core's export tables), as JSONEachRow
//!   lines and as OTLP log records in requests (observer-otlp: requests cut at about 1 MiB);
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
use observer_otlp::{MAX_REQUEST_BYTES, logs_bytes, write_log_record};
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

fn main() -> ExitCode {
    let args: Args = clap::Parser::parse();
    let report = report(args.qps);
    let resource = Resource {
        exporter: "bench/1/0".into(),
        host: "bench".into(),
        observed: "rx0".into(),
        source: "live".into(),
        ..Resource::default()
    };
    let rows = IntervalRows::of(&report);
    let want_rows = report.flows.len() + 2 * report.connections.len();
    let (mut encode, mut jsonl, mut gzip, mut building) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut encoded_bytes, mut gzip_bytes, mut requests, mut n_rows) = (0, 0, 0, 0);
    for _ in 0..args.runs {
        let mut seq = Sequencer::default();
        // OTLP: rows, log records, requests of about 1 MiB, encoded.
        let t = Instant::now();
        let encoded = seq.interval(&resource, 1, 2, &rows);
        let rows_s = t.elapsed().as_secs_f64();
        let mut bodies: Vec<Vec<u8>> = Vec::new();
        let mut records = Vec::new();
        for row in &encoded {
            let before = records.len();
            write_log_record(row, 3, &mut records);
            if records.len() > MAX_REQUEST_BYTES {
                bodies.push(logs_bytes(&resource, &records[..before]));
                records.drain(..before);
            }
        }
        bodies.push(logs_bytes(&resource, &records));
        building.push(rows_s);
        encode.push(t.elapsed().as_secs_f64());
        n_rows = encoded.len();
        requests = bodies.len();
        encoded_bytes = bodies.iter().map(Vec::len).sum::<usize>();
        let t = Instant::now();
        gzip_bytes = 0;
        for b in &bodies {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(b).unwrap();
            gzip_bytes += gz.finish().unwrap().len();
        }
        gzip.push(t.elapsed().as_secs_f64());
        // JSONEachRow: the same rows as lines.
        let t = Instant::now();
        let mut out = Vec::with_capacity(encoded_bytes);
        for row in &encoded {
            out.extend_from_slice(json_row(row).as_bytes());
            out.push(b'\n');
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
    let (encode, gzip, jsonl, building) = (
        median(&encode),
        median(&gzip),
        median(&jsonl),
        median(&building),
    );
    let otlp = encode + gzip;
    let share = otlp / 1.0;
    let qps = f64::from(args.qps);
    let pass = share <= TARGET_SHARE_OF_CORE * qps / 10_000.0;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "bench": "export",
                "qps": args.qps,
                "rows": n_rows,
                "requests": requests,
                "rows_s": building,
                "otlp_encode_s": encode,
                "gzip_s": gzip,
                "jsonl_s": jsonl,
                "share_of_core_at_1s": share,
                "bytes_per_qp_interval": encoded_bytes as f64 / n_rows as f64,
                "gzip_bytes_per_qp_interval": gzip_bytes as f64 / n_rows as f64,
                "target_share": TARGET_SHARE_OF_CORE,
                "pass": pass,
            })
        );
    } else {
        println!(
            "bench-export: one interval of {} QPs ({n_rows} rows, {requests} OTLP requests)",
            args.qps
        );
        println!(
            "  OTLP encode {:.1} ms (of which the rows {:.1} ms), gzip {:.1} ms: {:.2}% of a core at a 1 s interval (target at most {:.0}%): {}",
            encode * 1e3,
            building * 1e3,
            gzip * 1e3,
            share * 100.0,
            TARGET_SHARE_OF_CORE * 100.0,
            if pass { "PASS" } else { "MISS" }
        );
        println!("  JSONEachRow lines {:.1} ms", jsonl * 1e3);
        println!(
            "  per QP-interval: {:.0} bytes encoded, {:.0} gzip'd (the send buffer holds them gzip'd)",
            encoded_bytes as f64 / n_rows as f64,
            gzip_bytes as f64 / n_rows as f64
        );
    }
    ExitCode::SUCCESS
}
