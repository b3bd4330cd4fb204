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
    let skipped: Vec<&Check> = checks
        .iter()
        .filter(|c| c.status == CheckStatus::Skipped)
        .collect();
    for c in skipped {
        let _ = writeln!(out, "  not checked: {}: {}", c.rule, c.note);
    }
    for c in checks
        .iter()
        .filter(|c| c.status == CheckStatus::InsufficientData)
    {
        let _ = writeln!(out, "  too little to judge: {}: {}", c.rule, c.note);
    }
    out
}
