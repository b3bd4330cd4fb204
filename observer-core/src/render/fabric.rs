//! The terminal view and the JSON of a fabric localization.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::analysis::fabric::{Localization, PathSource, Verdict};
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
                    "; left out: {s} with too few packets, {u} with an end on no host of the topology (or none reachable), {t} traces not on it"
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
                "  {}. {} {}: {:.0} of {:.0} QPs crossing it bad ({:.1}%, {:.2}% elsewhere), {} bad packets, placed {:.0}%",
                i + 1,
                s.kind.name(),
                s.name,
                s.bad_qps,
                s.qps,
                s.rate * 100.0,
                s.baseline * 100.0,
                s.bad_packets,
                s.placed * 100.0
            );
        }
    }
    let (findings, checks) = crate::analysis::fabric::findings(runs);
    out.push('\n');
    out += &crate::render::findings::render(&findings, &checks, false);
    out
}
