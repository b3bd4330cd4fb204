//! `roce-observer trace`: Paris traceroute for RoCE, probing each QP direction's own path
//! (docs/fabric.md#tracing-paths).

use std::{net::IpAddr, time::Duration};

use anyhow::{Context, Result};
use clap::Args;
use roce_observer::{
    render,
    trace::{self, DEFAULT_DEST_QP, Flow},
    units::parse_duration,
};

use crate::output::{self, UsageError};

/// The most probes a second `--rate` allows: routers rate-limit ICMP, and a trace must not
/// load their control planes.
const MAX_RATE: u32 = 1000;

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// A QP direction to trace: SRC,SPORT,DST (SRC: the local address it leaves from, or
    /// `any`); repeat for several. The probes go only to these destinations.
    #[arg(long = "flow", value_name = "SRC,SPORT,DST", value_parser = parse_flow, required_unless_present = "report")]
    pub flows: Vec<(Option<IpAddr>, u16, IpAddr)>,
    /// Also trace every QP direction that leaves this host in a JSON report (`diagnose
    /// --json`, `replay --json`) or a sidecar's JSON lines (`run --jsonl`), each with its own
    /// DSCP where the report has it.
    #[arg(long, value_name = "FILE")]
    pub report: Option<String>,
    /// The DSCP the probes carry (the QP's traffic class; ECN is ECT(0), as RoCE's).
    #[arg(long, default_value_t = 26, value_parser = clap::value_parser!(u8).range(0..=63))]
    pub dscp: u8,
    /// The destination QP the probes' BTH names: by default one no NIC hands out early. The
    /// QP's own where switches hash on BTH fields; the far end's observer then counts the
    /// probe in that QP, a PSN jump: trace it outside the window you judge.
    #[arg(long, default_value_t = DEFAULT_DEST_QP, value_parser = parse_qp)]
    pub dest_qp: u32,
    /// The largest TTL tried.
    #[arg(long, default_value_t = trace::Options::default().max_ttl, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub max_ttl: u8,
    /// How long each probe's answer is awaited.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub wait: Duration,
    /// Probes per TTL before it counts as unanswered.
    #[arg(long, default_value_t = trace::Options::default().attempts, value_parser = clap::value_parser!(u8).range(1..=10))]
    pub attempts: u8,
    /// Unanswered TTLs in a row that end a trace.
    #[arg(long, default_value_t = trace::Options::default().gaps, value_parser = clap::value_parser!(u8).range(1..=10))]
    pub gaps: u8,
    /// Probes per second over all flows, at most 1000 (routers rate-limit their ICMP).
    #[arg(long, default_value_t = trace::Options::default().rate)]
    pub rate: u32,
    /// Print JSON (what `fabric --paths` reads) instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn parse_flow(s: &str) -> Result<(Option<IpAddr>, u16, IpAddr), String> {
    let parts: Vec<&str> = s.split(',').collect();
    let [src, sport, dst] = parts[..] else {
        return Err(format!("{s:?}: expected SRC,SPORT,DST"));
    };
    let src = if src == "any" {
        None
    } else {
        Some(
            src.parse()
                .map_err(|_| format!("{src:?} is not an IP address (or `any`)"))?,
        )
    };
    let sport = sport
        .parse()
        .map_err(|_| format!("{sport:?} is not a UDP port"))?;
    let dst = dst
        .parse()
        .map_err(|_| format!("{dst:?} is not an IP address"))?;
    Ok((src, sport, dst))
}

fn parse_qp(s: &str) -> Result<u32, String> {
    let v = match s.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .map_err(|_| format!("{s:?} is not a QP number"))?;
    if v > 0x00ff_ffff {
        return Err(format!("{s} does not fit in 24 bits"));
    }
    Ok(v)
}

pub fn trace(a: TraceArgs) -> Result<()> {
    if a.rate == 0 || a.rate > MAX_RATE {
        return Err(UsageError(format!(
            "--rate {}: between 1 and {MAX_RATE} probes a second",
            a.rate
        ))
        .into());
    }
    let mut flows: Vec<Flow> = a
        .flows
        .iter()
        .map(|&(src, sport, dst)| Flow {
            src,
            dst,
            sport,
            dscp: a.dscp,
            dest_qp: a.dest_qp,
        })
        .collect();
    if let Some(file) = &a.report {
        let local = trace::local_addresses()?;
        let mut mine: Vec<Flow> = Vec::new();
        for (src, dst, sport, dscp) in report_directions(file, a.dscp)? {
            let f = Flow {
                src: Some(src),
                dst,
                sport,
                dscp,
                dest_qp: a.dest_qp,
            };
            // A direction of the flags' already (one socket per source port and destination).
            if !local.contains(&src)
                || flows
                    .iter()
                    .any(|g| g.sport == sport && g.dst == dst && g.src.is_none_or(|s| s == src))
            {
                continue;
            }
            let link_local = match src {
                IpAddr::V6(a) => a.is_unicast_link_local(),
                IpAddr::V4(a) => a.is_link_local(),
            };
            if let Some(why) = f
                .refusal()
                .or_else(|| link_local.then(|| "a link-local source".to_string()))
            {
                eprintln!(
                    "roce-observer: warning: {file}: {src}:{sport} -> {dst} not traced: {why}"
                );
                continue;
            }
            mine.push(f);
        }
        if mine.is_empty() {
            anyhow::bail!(
                "{file}: no QP direction in it leaves from this host's addresses ({})",
                local
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        flows.extend(mine);
    }
    for (i, f) in flows.iter().enumerate() {
        if flows[..i].contains(f) {
            return Err(UsageError(format!(
                "--flow {},{},{} is given twice",
                f.src.map_or("any".to_string(), |s| s.to_string()),
                f.sport,
                f.dst
            ))
            .into());
        }
    }
    let opts = trace::Options {
        max_ttl: a.max_ttl,
        wait: a.wait,
        attempts: a.attempts,
        gaps: a.gaps,
        rate: a.rate,
    };
    let traces = trace::trace(&flows, &opts)?;
    output::stdout(|out| {
        if a.json {
            render::trace::write_json(traces, out)
        } else {
            write!(out, "{}", render::trace::render(&traces))
        }
    })
}

/// The QP directions of a JSON report or a sidecar's JSON lines: source, destination, UDP
/// source port and DSCP (the report's first, else `dscp`), each once.
fn report_directions(file: &str, dscp: u8) -> Result<Vec<(IpAddr, IpAddr, u16, u8)>> {
    use roce_observer::analysis::fabric;
    // Read once (a pipe cannot be opened twice); the first line that is not blank tells the
    // format.
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read the report {file}"))?;
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    let mut out: Vec<(IpAddr, IpAddr, u16, u8)> = Vec::new();
    if fabric::is_sidecar_line(first) {
        let s = fabric::sidecar_evidence(text.as_bytes(), file)?;
        out.extend(s.evidence.iter().map(|e| (e.src, e.dst, e.src_port, dscp)));
    } else {
        let report = fabric::read_report(text.as_bytes(), file)?;
        out.extend(report.flows.iter().filter(|f| f.dest_qp != 1).map(|f| {
            (
                f.src_ip,
                f.dst_ip,
                f.udp_src_port,
                f.dscp.first().copied().unwrap_or(dscp),
            )
        }));
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|d| seen.insert((d.0, d.1, d.2)));
    Ok(out)
}
