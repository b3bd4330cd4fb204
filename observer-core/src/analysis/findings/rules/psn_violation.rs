//! Protocol violations in the PSN space: a request inside the PSN range a READ consumed (under
//! the path MTU learned from the traffic), or a response to a PSN no request used.

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, finding},
    model::{FlowRef, Report, ViolationKind, qp_hex},
};

rule! {
    /// The rule ([`ABOUT`]): `psn_violation` below, with its [`PsnViolation`] table.
    PsnViolationRule {
        name: "psn-violation",
        summary: "a request inside a READ's PSN range, or a response to a PSN never sent (a NIC or driver bug)",
        scenario: Some("rule-psn-violation"),
        evaluate: |r, t, _ctx| {
            psn_violation(r, &t.psn_violation)
        },
    }
}

/// The `[psn_violation]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PsnViolation {
    /// Violations, over all flows, from which the rule fires.
    pub min_violations: u64,
}

impl Default for PsnViolation {
    fn default() -> Self {
        Self { min_violations: 1 }
    }
}

fn psn_violation(r: &Report, c: &PsnViolation) -> Outcome {
    let followed = r.flows.iter().filter(|f| f.psn_followed()).count() as u64;
    if followed == 0 {
        return Outcome::InsufficientData(
            "no flow with requests of a connected QP (RC, UC, XRC) to follow PSNs in".into(),
        );
    }
    let violations: u64 = r.flows.iter().map(|f| f.psn.violations).sum();
    if violations < c.min_violations.max(1) {
        let reads: u64 = r.flows.iter().map(|f| f.ops.read_request).sum();
        let note = format!(
            "no violation over {}, {}",
            count(followed, "flow"),
            count(reads, "READ")
        );
        // A request inside a READ's range under some path MTUs and not others: only the path
        // MTU (a FIRST or MIDDLE packet either way) tells, so the rule cannot pass it.
        let unverified: Vec<&crate::model::Flow> = r
            .flows
            .iter()
            .filter(|f| f.psn.pmtu.is_none() && f.psn.unverified_violations > 0)
            .collect();
        if !unverified.is_empty() {
            let requests: u64 = unverified.iter().map(|f| f.psn.unverified_violations).sum();
            return Outcome::InsufficientData(format!(
                "{} inside a READ's range under some path MTUs on {} of unknown path MTU (no FIRST or MIDDLE packet either way showed it); {note}",
                count(requests, "request"),
                count(unverified.len() as u64, "flow")
            ));
        }
        return Outcome::Passed(note);
    }
    let named: Vec<&crate::model::Flow> = r.flows.iter().filter(|f| f.psn.violations > 0).collect();
    let first = named
        .iter()
        .filter_map(|f| f.psn.first_violation.map(|v| (v, *f)))
        .min_by_key(|(v, _)| v.at_ns);
    let mut evidence = vec![("violations", violations.into())];
    let what = match first {
        Some((v, f)) => {
            evidence.push(("first_at_ns", v.at_ns.into()));
            evidence.push(("first_psn", v.psn.into()));
            evidence.push(("first_other_psn", v.other_psn.into()));
            evidence.push((
                "pmtu",
                f.psn.pmtu.map_or(serde_json::Value::Null, Into::into),
            ));
            match v.kind {
                ViolationKind::RequestInsideRead => format!(
                    "first: {} -> {} QP {} sent PSN {:#08x} inside the READ at PSN {:#08x}{}",
                    f.src_ip,
                    f.dst_ip,
                    qp_hex(f.dest_qp),
                    v.psn,
                    v.other_psn,
                    f.psn
                        .pmtu
                        .map(|p| format!(" (path MTU {p})"))
                        .unwrap_or_default()
                ),
                ViolationKind::ResponsePsnNeverSent => format!(
                    "first: {} -> {} QP {} answered PSN {:#08x}, beyond the newest request PSN {:#08x}",
                    f.src_ip,
                    f.dst_ip,
                    qp_hex(f.dest_qp),
                    v.psn,
                    v.other_psn
                ),
            }
        }
        None => "no timestamp kept".into(),
    };
    finding(
        ABOUT.name,
        Severity::Critical,
        "PSN protocol violations",
        format!(
            "{} on {}; {what}",
            count(violations, "violation"),
            count(named.len() as u64, "flow")
        ),
        evidence,
        named.into_iter().map(FlowRef::of_flow).collect(),
        "A READ of L bytes consumes ceil(L / path MTU) PSNs; a requester that reuses one of them, or a responder that answers a PSN never sent, breaks the transport: the connection stalls or errors out. This is a NIC, firmware or driver bug (or a path MTU the two ends disagree on): compare firmware versions and the QP's path MTU at both ends.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, insufficient, passed, report, run};
    use crate::model::Violation;

    #[test]
    fn a_violation_is_critical_and_names_the_read() {
        let t = Thresholds::default();
        let mut r = report();
        insufficient(run(&PsnViolationRule, &r, &t));
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send, f.ops.read_request) = (10, 9, 1);
        r.flows.push(f);
        // No request inside the READ's range even under the smallest path MTU: verified.
        assert_eq!(
            passed(run(&PsnViolationRule, &r, &t)),
            "no violation over 1 flow, 1 READ"
        );
        // Inside it under some path MTUs: only the path MTU can tell, and it is unknown.
        r.flows[0].psn.unverified_violations = 1;
        assert_eq!(
            insufficient(run(&PsnViolationRule, &r, &t)),
            "1 request inside a READ's range under some path MTUs on 1 flow of unknown path MTU (no FIRST or MIDDLE packet either way showed it); no violation over 1 flow, 1 READ"
        );
        r.flows[0].psn.unverified_violations = 0;
        r.flows[0].psn.pmtu = Some(1024);
        r.flows[0].psn.violations = 1;
        r.flows[0].psn.first_violation = Some(Violation {
            at_ns: 5,
            kind: ViolationKind::RequestInsideRead,
            psn: 0x102,
            other_psn: 0x100,
        });
        let f = fired(run(&PsnViolationRule, &r, &t));
        assert_eq!(f.severity, Severity::Critical);
        assert!(
            f.summary
                .ends_with("sent PSN 0x000102 inside the READ at PSN 0x000100 (path MTU 1024)"),
            "{}",
            f.summary
        );
    }
}
