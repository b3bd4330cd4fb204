//! The terminal view of the ECMP analysis.

use std::fmt::Write as _;

use crate::{
    model::ecmp::EcmpReport,
    units::{count, noun},
};

/// The terminal view: the model, a bar per uplink, the verdict, pairing, tier 2, what-if.
/// Without flows, one line says so.
pub fn render(report: &EcmpReport) -> String {
    let mut out = String::new();
    let m = &report.model;
    let model = format!(
        "ECMP model: {}, {} of {}, seed {:#x}, {}",
        count(m.uplinks.into(), "uplink"),
        m.hash,
        m.fields,
        m.seed,
        m.bucket,
    );
    if report.flows == 0 {
        let _ = writeln!(out, "{model}: {}", report.verdict);
        return out;
    }
    let _ = writeln!(
        out,
        "{model}; {}; {}",
        if report.tier2.is_some() {
            "one hashing stage per tier (leaf, then spine; later hops not modelled)"
        } else {
            "one hashing stage (the first switch's; later hops not modelled)"
        },
        count(report.flows, "flow")
    );
    let total: u64 = report.uplinks.iter().map(|u| u.bytes).sum();
    let max = report
        .uplinks
        .iter()
        .map(|u| u.bytes)
        .max()
        .unwrap_or(0)
        .max(1);
    for u in &report.uplinks {
        let bar = "#".repeat((u.bytes * 40 / max) as usize);
        let share = if total > 0 {
            u.bytes as f64 * 100.0 / total as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "  uplink {:>3} {:<40} {:>5.1}% {:>6} {}",
            u.uplink,
            bar,
            share,
            u.flows,
            noun(u.flows, "flow")
        );
    }
    let b = &report.balance_bytes;
    let r = &report.random_bytes;
    let _ = writeln!(
        out,
        "max/mean {:.2} (random hash: {:.2} on average), CV {:.2}, Jain {:.3}, idle uplinks {}: {}",
        b.max_over_mean, r.max_over_mean, b.cv, b.jain, b.idle, report.verdict
    );
    let _ = writeln!(
        out,
        "top {}: {} share an uplink with another of them",
        count(report.top_k as u64, "flow"),
        report.top_k_colliding
    );
    let c = &report.connections;
    let why = &c.unpaired_why;
    let reasons: Vec<String> = [
        (why.one_way, "without a reverse direction"),
        (
            why.other_mirror,
            "whose reverse came through another mirror",
        ),
        (
            why.shared_tuple,
            "on a 5-tuple shared by QPs the drivers' rule cannot match up",
        ),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    let mut unpaired = format!("{} unpaired", count(c.unpaired_flows as u64, "flow"));
    if !reasons.is_empty() {
        unpaired = format!("{unpaired} ({})", reasons.join(", "));
    }
    let _ = writeln!(
        out,
        "connections: {} paired ({} drivers' source port, {} overridden, {} sharing a 5-tuple{}), {unpaired}, {} sharing a 5-tuple, {} to QP 1",
        c.paired,
        c.conforming,
        c.overridden,
        c.shared_tuple,
        if c.per_direction > 0 {
            format!(", {} with a port per direction", c.per_direction)
        } else {
            String::new()
        },
        count(c.shared_tuple_flows as u64, "flow"),
        count(c.qp1_flows as u64, "flow")
    );
    if let Some(t) = &report.tier2 {
        let _ = writeln!(
            out,
            "tier 2: {} per spine, {} seed {:#x} {}: {} of {} spines polarized (under half the uplinks a random hash would use)",
            count(t.uplinks.into(), "uplink"),
            t.hash,
            t.seed,
            t.bucket,
            t.polarized,
            t.spines.len()
        );
    }
    let w = &report.what_if;
    let qps = match w.qps_per_connection {
        _ if w.meets_target => "the flows as they are already meet the target".to_string(),
        Some(k) => format!("{k} QPs per connection would meet it"),
        None => "no count up to 16 QPs per connection would".to_string(),
    };
    let dest_qp = match w.with_dest_qp {
        Some(m) => format!("destination QP in the hash gives {m:.2}"),
        None => "the destination QP is hashed already".to_string(),
    };
    let _ = writeln!(
        out,
        "what-if (target max/mean {:.2}): {dest_qp}; {qps}",
        w.target
    );
    if let Some(hint) = &w.hint {
        let _ = writeln!(out, "hint: {hint}");
    }
    out
}
