//! The terminal view and the JSON of a fabric localization.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::analysis::fabric::{Localization, PathSource, Signal, Verdict};
use crate::units::count;

/// The version of [`json`]'s document.
pub const FABRIC_SCHEMA: &str = "roce-observer.fabric/1";

fn verdict(v: &Verdict) -> (&'static str, Option<&str>) {
    match v {
        Verdict::Found => ("found", None),
        Verdict::Clean(why) => ("clean", Some(why)),
        Verdict::NotEnoughEvidence(why) => ("not_enough_evidence", Some(why)),
    }
}

/// The localizations (one per signal) as one JSON document.
pub fn json(runs_in: &[Localization]) -> Value {
    let runs: Vec<Value> = runs_in
        .iter()
        .map(|l| {
            let (v, why) = verdict(&l.verdict);
            json!({
                "signal": l.signal.name(),
                "verdict": v,
                "why": why,
                "qps": l.qps,
                "bad_qps": l.bad_qps,
                "left_out": {
                    "too_few_packets": l.too_small,
                    "not_on_the_topology": l.unplaced,
                    "traces_not_on_the_topology": l.bad_traces,
                },
                "paths": {
                    "known": l.by_source[PathSource::Known as usize],
                    "hashed": l.by_source[PathSource::Hashed as usize],
                    "candidates": l.by_source[PathSource::Candidates as usize],
                },
                "suspects": l.suspects.iter().map(|s| json!({
                    "kind": s.kind.name(),
                    "name": s.name,
                    "votes": s.votes,
                    "bad_qps": s.bad_qps,
                    "qps": s.qps,
                    "bad_packets": s.bad_packets,
                    "rate": s.rate,
                    "rate_elsewhere": s.baseline,
                    "placed": s.placed,
                    "qps_named": s.qps_named.iter().map(|(q, bad)| json!({
                        "src": q.src_ip, "dst": q.dst_ip, "sport": q.udp_src_port,
                        "qp": q.dest_qp, "bad_packets": bad,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let (findings, checks) = crate::analysis::fabric::findings(runs_in);
    json!({
        "schema": FABRIC_SCHEMA,
        "localizations": runs,
        "findings": findings,
        "checks": checks,
    })
}

/// Writes [`json`]'s document, pretty, and a newline.
pub fn write_json(runs: &[Localization], mut out: impl std::io::Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut out, &json(runs))?;
    writeln!(out)
}

/// The terminal view: per signal, its verdict and the suspects ranked.
pub fn render(runs: &[Localization]) -> String {
    let mut out = String::new();
    for l in runs {
        let _ = writeln!(
            out,
            "{}: {} weighed, {} with {} (paths: {} known, {} hashed, {} candidates){}",
            l.signal.name(),
            count(l.qps as u64, "QP"),
            l.bad_qps,
            l.signal.name(),
            l.by_source[PathSource::Known as usize],
            l.by_source[PathSource::Hashed as usize],
            l.by_source[PathSource::Candidates as usize],
            match (l.too_small, l.unplaced, l.bad_traces) {
                (0, 0, 0) => String::new(),
                (s, u, t) => format!(
                    "; left out: {s} with {}, {u} with an end on no host of the topology (or none reachable), {t} traces not on it",
                    match l.signal {
                        Signal::Latency => "too few ACK samples or no baseline",
                        Signal::Loss | Signal::Ce | Signal::Pfc => "too few packets",
                    }
                ),
            }
        );
        match &l.verdict {
            Verdict::Found => {
                let _ = writeln!(out, "  found:");
            }
            Verdict::Clean(why) => {
                let _ = writeln!(out, "  clean: {why}");
            }
            Verdict::NotEnoughEvidence(why) => {
                let _ = writeln!(out, "  not enough evidence: {why}");
            }
        }
        for (i, s) in l.suspects.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {}. {} {}: {:.0} of {:.0} {} crossing it bad ({:.1}%, {:.2}% elsewhere), {} {}, placed {:.0}%",
                i + 1,
                s.kind.name(),
                s.name,
                s.bad_qps,
                s.qps,
                l.signal.units(),
                s.rate * 100.0,
                s.baseline * 100.0,
                s.bad_packets,
                match l.signal {
                    Signal::Latency => "slow ACK samples",
                    Signal::Pfc => "pause frames at their sources",
                    Signal::Loss | Signal::Ce => "bad packets",
                },
                s.placed * 100.0
            );
        }
    }
    let (findings, checks) = crate::analysis::fabric::findings(runs);
    out.push('\n');
    out += &crate::render::findings::render(&findings, &checks, false);
    out
}

/// The version of [`incidents_json`]'s document.
pub const INCIDENTS_SCHEMA: &str = "roce-observer.fabric-incidents/1";

/// `fabric --windows`: each window's localizations and the incidents over them, as JSON.
pub fn incidents_json(
    windows: &[crate::analysis::fabric::Window],
    incidents: &[crate::analysis::fabric::Incident],
    quiet: usize,
) -> Value {
    json!({
        "schema": INCIDENTS_SCHEMA,
        "quiet_windows": quiet,
        "windows": windows.iter().map(|w| json!({
            "start_unix_ns": w.start_ns,
            "end_unix_ns": w.end_ns,
            "localizations": json(&w.runs)["localizations"],
        })).collect::<Vec<_>>(),
        "incidents": incidents.iter().map(|i| json!({
            "signal": i.signal.name(),
            "kind": i.kind.name(),
            "name": i.name,
            "start_unix_ns": i.start_ns,
            "end_unix_ns": i.end_ns,
            "windows": i.windows,
            "peak_rate": i.peak_rate,
            "bad_packets": i.bad_packets,
            "open": i.open,
        })).collect::<Vec<_>>(),
    })
}

/// `fabric --windows` as text: a line per window and signal, then the incidents; times in
/// seconds from the first window's start.
pub fn render_incidents(
    windows: &[crate::analysis::fabric::Window],
    incidents: &[crate::analysis::fabric::Incident],
    quiet: usize,
) -> String {
    let mut out = String::new();
    let t0 = windows.first().map_or(0, |w| w.start_ns);
    let at = |ns: u64| ns.saturating_sub(t0) as f64 / 1e9;
    let _ = writeln!(
        out,
        "{} from unix {:.0}:",
        count(windows.len() as u64, "window"),
        t0 as f64 / 1e9
    );
    for w in windows {
        let said: Vec<String> = w
            .runs
            .iter()
            .map(|l| {
                let v = match &l.verdict {
                    Verdict::Found => format!(
                        "found {}",
                        l.suspects
                            .iter()
                            .map(|s| format!("{} {}", s.kind.name(), s.name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    Verdict::Clean(_) => "clean".into(),
                    Verdict::NotEnoughEvidence(_) => "not enough evidence".into(),
                };
                format!("{}: {v} ({}/{} QPs bad)", l.signal.name(), l.bad_qps, l.qps)
            })
            .collect();
        let _ = writeln!(
            out,
            "  +{:>6.0}s .. +{:>6.0}s  {}",
            at(w.start_ns),
            at(w.end_ns),
            said.join("; ")
        );
    }
    if incidents.is_empty() {
        let _ = writeln!(out, "incidents: none");
    } else {
        let _ = writeln!(
            out,
            "incidents (closed after {quiet} clean windows in a row):"
        );
    }
    for i in incidents {
        let _ = writeln!(
            out,
            "  {} {} {}: +{:.0}s .. +{:.0}s, named in {}, peak {:.1}% of its QPs bad, {} bad \
             packets{}",
            i.signal.name(),
            i.kind.name(),
            i.name,
            at(i.start_ns),
            at(i.end_ns),
            count(i.windows as u64, "window"),
            i.peak_rate * 100.0,
            i.bad_packets,
            if i.open { ", still open" } else { "" }
        );
    }
    out
}

/// Writes [`incidents_json`]'s document, pretty, and a newline.
pub fn write_incidents_json(
    windows: &[crate::analysis::fabric::Window],
    incidents: &[crate::analysis::fabric::Incident],
    quiet: usize,
    mut out: impl std::io::Write,
) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut out, &incidents_json(windows, incidents, quiet))?;
    writeln!(out)
}
