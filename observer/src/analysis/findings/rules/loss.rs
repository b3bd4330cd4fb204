//! PSN gaps, NAK sequence errors and retransmissions (RNR retries aside): drops, in what
//! should be lossless when a RoCE class is configured.

use std::{collections::BTreeMap, net::IpAddr};

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{
        About, Context, Finding, MAX_FLOWS_NAMED, Outcome, Rule, Severity, Thresholds,
    },
    model::{FlowRef, Report},
};

pub const ABOUT: About = About {
    name: "loss",
    summary: "PSN gaps, NAK sequence errors or retransmissions (drops in what should be lossless)",
    scenario: Some("rule-loss"),
};

/// The rule ([`ABOUT`]): `loss` below, with its [`Loss`] table.
pub struct LossRule;

impl Rule for LossRule {
    fn about(&self) -> &'static About {
        &ABOUT
    }

    fn evaluate(&self, r: &Report, t: &Thresholds, ctx: &Context) -> Outcome {
        loss(r, &t.loss, ctx)
    }
}

/// The `[loss]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Loss {
    /// PSN gaps, NAKs (sequence error) and retransmissions together, over all flows, from
    /// which the rule fires.
    pub min_events: u64,
    /// Events from which it is critical.
    pub critical_events: u64,
}

impl Default for Loss {
    fn default() -> Self {
        Self {
            min_events: 1,
            critical_events: 100,
        }
    }
}

fn loss(r: &Report, c: &Loss, ctx: &Context) -> Outcome {
    let gaps: u64 = r.flows.iter().map(|f| f.psn.gaps).sum();
    let missing: u64 = r.flows.iter().map(|f| f.psn.missing).sum();
    // A SEND retried after an RNR NAK reuses its PSN: a regression, but nothing was lost.
    // Per host pair, regressions up to the RNR NAKs coming back are those retries.
    let mut rnr_back: BTreeMap<(IpAddr, IpAddr), u64> = BTreeMap::new();
    let mut retx_of: BTreeMap<(IpAddr, IpAddr), u64> = BTreeMap::new();
    for f in &r.flows {
        *rnr_back.entry((f.dst_ip, f.src_ip)).or_default() += f.ops.rnr_nak;
        *retx_of.entry((f.src_ip, f.dst_ip)).or_default() += f.psn.regressions;
    }
    let rnr_retries: u64 = retx_of
        .iter()
        .map(|(pair, n)| (*n).min(rnr_back.get(pair).copied().unwrap_or(0)))
        .sum();
    let retx: u64 = r.flows.iter().map(|f| f.psn.regressions).sum::<u64>() - rnr_retries;
    let naks: u64 = r.flows.iter().map(|f| f.ops.nak).sum();
    let events = gaps + retx + naks;
    if events < c.min_events {
        return Outcome::Passed(format!(
            "no PSN gap, NAK or retransmission ({})",
            count(events, "event")
        ));
    }
    let mut flows: Vec<(u64, FlowRef)> = r
        .flows
        .iter()
        .map(|f| {
            let retries = rnr_back.get(&(f.src_ip, f.dst_ip)).copied().unwrap_or(0);
            let own = f.psn.regressions.saturating_sub(retries);
            (f.psn.gaps + own + f.ops.nak, FlowRef::of_flow(f))
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    flows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let lossless = ctx.pfc_seen || ctx.dscp_in_use;
    let severity = if events >= c.critical_events || lossless {
        Severity::Critical
    } else {
        Severity::Warning
    };
    let mirrored = r.flows.iter().any(|f| f.mirror.is_some());
    let mut hint = String::from(
        "RoCE recovers from a drop with go-back-N, which costs far more than the packet: check that PFC is enabled on the RoCE priority on every hop (NICs and switches), that the RoCE DSCP maps to that lossless queue, the switches' buffer headroom, and their discard counters on the path of the flows named.",
    );
    if mirrored && naks == 0 && retx == 0 {
        hint.push_str(" Gaps with no NAK and no retransmission, seen on a mirror port, can also be copies the mirror session dropped (an oversubscribed SPAN).");
    }
    Outcome::Fired(Finding {
        rule: ABOUT.name.into(),
        severity,
        title: if lossless {
            "Packet loss in the lossless RoCE class".into()
        } else {
            "Packet loss in RoCE traffic".into()
        },
        summary: format!(
            "{} (~{} missing), {}, {} on {}",
            count(gaps, "PSN gap"),
            count(missing, "PSN"),
            count(naks, "NAK"),
            count(retx, "retransmission"),
            count(flows.len() as u64, "flow")
        ),
        evidence: [
            ("psn_gaps", gaps.into()),
            ("psns_missing", missing.into()),
            ("naks", naks.into()),
            ("retransmissions", retx.into()),
            ("rnr_retries_not_counted", rnr_retries.into()),
            ("lossless_class_configured", lossless.into()),
        ]
        .into_iter()
        .map(|(k, v): (&str, serde_json::Value)| (k.to_string(), v))
        .collect(),
        flows: flows
            .into_iter()
            .map(|(_, f)| f)
            .take(MAX_FLOWS_NAMED)
            .collect(),
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::testing::{fired, flow, passed, report, run};

    #[test]
    fn psn_gaps_fire_critical_in_a_lossless_class_and_rnr_retries_do_not_count() {
        let t = Thresholds::default();
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send, f.psn.gaps, f.psn.missing) = (10, 10, 1, 3);
        r.flows.push(f);
        let f = fired(run(&LossRule, &r, &t));
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.title, "Packet loss in RoCE traffic");
        assert_eq!(f.evidence["psns_missing"], 3);
        r.flows[0].dscp = vec![26];
        let f = fired(run(&LossRule, &r, &t));
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.evidence["lossless_class_configured"], true);

        // Two SENDs retried after two RNR NAKs: no loss.
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send, f.psn.regressions) = (10, 10, 2);
        r.flows.push(f);
        let mut b = flow("10.0.0.2", "10.0.0.1");
        (b.packets, b.ops.rnr_nak) = (2, 2);
        r.flows.push(b);
        let note = passed(run(&LossRule, &r, &t));
        assert_eq!(note, "no PSN gap, NAK or retransmission (0 events)");
    }
}
