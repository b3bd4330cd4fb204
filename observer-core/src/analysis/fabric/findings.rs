//! A localization's conclusions in the findings' usual format: `fabric-link`, `fabric-switch`
//! and `fabric-host`, each suspect a finding (severity, title, one line with the numbers, the
//! numbers by name, the QPs behind it, a hint), and each rule a check that says whether it
//! fired, passed on evidence, or had too little to tell.

use std::collections::BTreeMap;

use serde_json::json;

use crate::model::findings::{Check, CheckStatus, Finding, Severity};

use super::localize::{Localization, Signal, Suspect, SuspectKind, Verdict};

/// The rules, by the kind of suspect they name.
pub const FABRIC_RULES: [(SuspectKind, &str); 3] = [
    (SuspectKind::Link, "fabric-link"),
    (SuspectKind::Switch, "fabric-switch"),
    (SuspectKind::Host, "fabric-host"),
];

fn rule_of(kind: SuspectKind) -> &'static str {
    FABRIC_RULES
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("fabric-link", |(_, r)| r)
}

fn finding(signal: Signal, s: &Suspect) -> Finding {
    let (what, severity) = match signal {
        Signal::Loss => ("loses packets", Severity::Critical),
        Signal::Ce => ("marks packets CE", Severity::Warning),
        Signal::Latency => ("delays packets", Severity::Warning),
        Signal::Pfc => ("holds traffic back (PFC)", Severity::Warning),
    };
    let kind = s.kind.name();
    let hint = match (s.kind, signal) {
        (SuspectKind::Link, Signal::Loss) => {
            "the link's both ends: interface error and FEC counters, the optics' power \
             (`check` on a host end); reseat or replace the cable or optic"
        }
        (SuspectKind::Link, Signal::Ce) => {
            "a congested port: the link's utilisation and the ECN thresholds of its queue; \
             ECMP spreading unevenly onto it (`roce-observer ecmp`)"
        }
        (SuspectKind::Link, Signal::Latency) => {
            "a queue building on the link without loss or marks: its utilisation, PFC pauses \
             on its ports (a paused port delays everything behind it), ECN thresholds set too \
             high for the queue"
        }
        (SuspectKind::Link, Signal::Pfc) => {
            "the root of the pause tree: the link's egress queue for the lossless priority, its \
             PFC thresholds (xoff, headroom), a slow receiver behind it (`check` on the hosts \
             past it: their NICs sending pauses)"
        }
        (SuspectKind::Switch, _) => {
            "the switch itself: its counters on every port, its buffers and ECN profile, its \
             line cards; drain it and see whether the QPs recover"
        }
        (SuspectKind::Host, _) => {
            "the host or its NIC: `roce-observer check` there (NIC counters, PFC, DCQCN, \
             optics), its PCIe link, the cable to its switch"
        }
    };
    let mut evidence = BTreeMap::new();
    evidence.insert("signal".into(), json!(signal.name()));
    evidence.insert("suspect".into(), json!(s.name));
    evidence.insert("bad_qps".into(), json!(s.bad_qps));
    evidence.insert("qps".into(), json!(s.qps));
    evidence.insert("rate".into(), json!(s.rate));
    evidence.insert("rate_elsewhere".into(), json!(s.baseline));
    evidence.insert("bad_packets".into(), json!(s.bad_packets));
    evidence.insert("placed".into(), json!(s.placed));
    Finding {
        rule: rule_of(s.kind).to_string(),
        severity,
        title: format!("{kind} {} {what}", s.name),
        summary: format!(
            "{:.0} of {:.0} {} crossing it show {} ({:.1}%, {:.2}% elsewhere), {} {}",
            s.bad_qps,
            s.qps,
            signal.units(),
            signal.name(),
            s.rate * 100.0,
            s.baseline * 100.0,
            s.bad_packets,
            match signal {
                Signal::Loss => "packets lost",
                Signal::Ce => "packets CE-marked (or CNPs)",
                Signal::Latency => "ACK samples above their QP's baseline",
                Signal::Pfc => "pause frames their sources received",
            }
        ),
        evidence,
        flows: s.qps_named.iter().map(|(f, _)| f.clone()).collect(),
        hint: hint.into(),
    }
}

/// The findings of the localizations (one per signal) and the three rules' checks: `fired`
/// when a signal named a suspect of the rule's kind; else `insufficient-data` when a signal's
/// evidence could not tell; else `passed`, with what each signal concluded.
pub fn findings(runs: &[Localization]) -> (Vec<Finding>, Vec<Check>) {
    let mut findings = Vec::new();
    for l in runs {
        if l.verdict == Verdict::Found {
            findings.extend(l.suspects.iter().map(|s| finding(l.signal, s)));
        }
    }
    let checks = FABRIC_RULES
        .iter()
        .map(|(kind, rule)| {
            let mut status = CheckStatus::Passed;
            let mut notes = Vec::new();
            for l in runs {
                let named = l.suspects.iter().filter(|s| s.kind == *kind).count();
                let (this, note) = match &l.verdict {
                    Verdict::Found if named > 0 => (CheckStatus::Fired, format!("{named} named")),
                    Verdict::Found => (
                        CheckStatus::Passed,
                        format!(
                            "none named; the suspects are of other kinds, on {} QPs",
                            l.qps
                        ),
                    ),
                    Verdict::Clean(why) => (CheckStatus::Passed, why.clone()),
                    Verdict::NotEnoughEvidence(why) => (CheckStatus::InsufficientData, why.clone()),
                };
                notes.push(format!("{}: {note}", l.signal.name()));
                status = match (status, this) {
                    (CheckStatus::Fired, _) | (_, CheckStatus::Fired) => CheckStatus::Fired,
                    (CheckStatus::InsufficientData, _) | (_, CheckStatus::InsufficientData) => {
                        CheckStatus::InsufficientData
                    }
                    _ => CheckStatus::Passed,
                };
            }
            if runs.is_empty() {
                status = CheckStatus::InsufficientData;
                notes.push("no signal weighed".into());
            }
            Check {
                rule: rule.to_string(),
                status,
                note: notes.join("; "),
            }
        })
        .collect();
    (findings, checks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::fabric::{Options, localize, sim};

    #[test]
    fn a_named_link_is_a_fabric_link_finding_and_the_other_rules_pass() {
        let truth = sim::leaf_spine(2, 3, 2, Some(4));
        let link = truth
            .link_between(truth.node("l1").unwrap(), truth.node("s0").unwrap())
            .unwrap();
        let work = sim::Workload {
            qps: 400,
            packets: 2000,
            background: 0.0,
            seed: 3,
        };
        let ev: Vec<_> = sim::evidence(
            &truth,
            &work,
            &[sim::Fault {
                link,
                loss: 0.01,
                ce: 0.0,
            }],
        )
        .into_iter()
        .map(|(e, _)| e)
        .collect();
        let runs: Vec<_> = [Signal::Loss, Signal::Ce]
            .map(|s| localize(&truth, &ev, s, &Options::default()))
            .into();
        let (f, checks) = findings(&runs);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].rule, "fabric-link");
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].title,
            format!("link {} loses packets", truth.link_name(link))
        );
        assert!(!f[0].flows.is_empty() && f[0].flows.len() <= 20);
        let status: Vec<(&str, CheckStatus)> =
            checks.iter().map(|c| (c.rule.as_str(), c.status)).collect();
        assert_eq!(
            status,
            [
                ("fabric-link", CheckStatus::Fired),
                ("fabric-switch", CheckStatus::Passed),
                ("fabric-host", CheckStatus::Passed),
            ]
        );
        assert!(checks[1].note.contains("ce: none of"), "{}", checks[1].note);
        // Nothing to weigh: the rules cannot pass on it.
        let none: Vec<_> = [Signal::Loss]
            .map(|s| localize(&truth, &[], s, &Options::default()))
            .into();
        let (f, checks) = findings(&none);
        assert!(f.is_empty());
        assert!(
            checks
                .iter()
                .all(|c| c.status == CheckStatus::InsufficientData)
        );
    }
}
