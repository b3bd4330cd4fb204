//! The findings as terminal text.

use std::fmt::Write as _;

use crate::model::findings::{Check, CheckStatus, Finding, Severity};

/// The findings as terminal text, most severe first; `color`: ANSI colours.
pub fn render(findings: &[Finding], checks: &[Check], color: bool) -> String {
    let mut out = String::new();
    let paint = |s: Severity| -> (&str, &str) {
        if !color {
            return ("", "");
        }
        match s {
            Severity::Critical => ("\x1b[1;31m", "\x1b[0m"),
            Severity::Warning => ("\x1b[1;33m", "\x1b[0m"),
            Severity::Info => ("\x1b[1;36m", "\x1b[0m"),
        }
    };
    if findings.is_empty() {
        let passed = checks
            .iter()
            .filter(|c| c.status == CheckStatus::Passed)
            .count();
        let _ = writeln!(out, "findings: none ({passed} checks passed)");
    } else {
        let _ = writeln!(out, "findings:");
    }
    for f in findings {
        let (on, off) = paint(f.severity);
        let _ = writeln!(
            out,
            "  {on}{:<8}{off} {} [{}]",
            f.severity.name().to_uppercase(),
            f.title,
            f.rule
        );
        let _ = writeln!(out, "           {}", f.summary);
        for flow in f.flows.iter().take(5) {
            let _ = writeln!(out, "           - {flow}");
        }
        if f.flows.len() > 5 {
            let _ = writeln!(
                out,
                "           - ... {} more flows (--json)",
                f.flows.len() - 5
            );
        }
        let _ = writeln!(out, "           hint: {}", f.hint);
    }
    for (status, what) in [
        (CheckStatus::Skipped, "not checked"),
        (CheckStatus::InsufficientData, "too little to judge"),
    ] {
        // Rules that say the same (e.g. every NIC rule without a NIC side) share a line.
        let mut lines: Vec<(Vec<&str>, &str)> = Vec::new();
        for c in checks.iter().filter(|c| c.status == status) {
            match lines.iter_mut().find(|(_, note)| *note == c.note) {
                Some((rules, _)) => rules.push(&c.rule),
                None => lines.push((vec![&c.rule], &c.note)),
            }
        }
        for (rules, note) in lines {
            let _ = writeln!(out, "  {what}: {}: {note}", rule_list(&rules));
        }
    }
    out
}

/// Rules sharing a line: their names, or a family's prefix when more than two of it share it
/// (`nic-* (7 rules)`, `6 of the 7 nic-* rules`).
fn rule_list(rules: &[&str]) -> String {
    let family = rules
        .first()
        .and_then(|r| r.split_once('-'))
        .map(|(p, _)| format!("{p}-"))
        .filter(|p| rules.len() > 2 && rules.iter().all(|r| r.starts_with(p.as_str())));
    let Some(p) = family else {
        return rules.join(", ");
    };
    let all = crate::analysis::findings::RULES
        .iter()
        .filter(|(r, _)| r.starts_with(p.as_str()))
        .count();
    if all == rules.len() {
        format!("{p}* ({all} rules)")
    } else {
        format!("{} of the {all} {p}* rules", rules.len())
    }
}
