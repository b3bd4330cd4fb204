//! Incast: many senders to one receiver, with CE marks.

use std::{collections::BTreeMap, net::IpAddr};

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, data_packets, finding, pct},
    model::{FlowRef, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `incast` below, with its [`Incast`] table.
    IncastRule {
        name: "incast",
        summary: "Many senders to one receiver, with CE marks",
        scenario: Some("rule-incast"),
        evaluate: |r, t, _ctx| {
            incast(r, &t.incast)
        },
    }
}

/// The `[incast]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Incast {
    /// Distinct senders to one receiver from which it is incast.
    pub min_senders: usize,
    /// Share of the receiver's packets marked CE.
    pub min_ce_percent: f64,
}

impl Default for Incast {
    fn default() -> Self {
        Self {
            min_senders: 4,
            min_ce_percent: 1.0,
        }
    }
}

fn incast(r: &Report, c: &Incast) -> Outcome {
    // Per receiver: its senders (a list made unique once, not a set grown flow by flow).
    let mut by_dst: BTreeMap<IpAddr, (Vec<IpAddr>, u64, u64, Vec<FlowRef>)> = BTreeMap::new();
    for f in r.flows.iter().filter(|f| data_packets(f) > 0) {
        let e = by_dst.entry(f.dst_ip).or_default();
        e.0.push(f.src_ip);
        e.1 += f.packets;
        e.2 += f.ecn.ce;
        e.3.push(FlowRef::of_flow(f));
    }
    for (senders, ..) in by_dst.values_mut() {
        senders.sort_unstable();
        senders.dedup();
    }
    let receivers = by_dst.len() as u64;
    let most = by_dst.values().map(|(s, ..)| s.len()).max().unwrap_or(0);
    let hits: Vec<(IpAddr, usize, f64, Vec<FlowRef>)> = by_dst
        .into_iter()
        .filter(|(_, (s, p, ce, _))| s.len() >= c.min_senders && pct(*ce, *p) >= c.min_ce_percent)
        .map(|(d, (s, p, ce, f))| (d, s.len(), pct(ce, p), f))
        .collect();
    if hits.is_empty() {
        return Outcome::Passed(format!(
            "no receiver with {} or more senders and {}% CE ({}, at most {} to one)",
            c.min_senders,
            c.min_ce_percent,
            count(receivers, "data receiver"),
            count(most as u64, "sender")
        ));
    }
    let per: Vec<String> = hits
        .iter()
        .map(|(d, s, ce, _)| format!("{d}: {}, {ce:.1}% CE", count(*s as u64, "sender")))
        .collect();
    finding(
        ABOUT.name,
        Severity::Warning,
        "Incast: many senders congest one receiver",
        per.join("; "),
        vec![("receivers", per.clone().into())],
        hits.into_iter().flat_map(|h| h.3).collect(),
        "Many-to-one traffic (all-to-all, parameter servers, checkpoints) overflows the receiver's switch port: make sure DCQCN reacts (CNPs back, see ce-without-cnp), consider limiting in-flight data per sender, or spreading the receivers (NCCL's algorithms/channels, job placement).",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, passed, report, run};

    fn senders(n: usize) -> Report {
        let mut r = report();
        for i in 0..n {
            let mut f = flow(&format!("10.0.0.{}", i + 1), "10.0.1.1");
            (f.packets, f.ops.write, f.ecn.ce) = (100, 100, 5);
            r.flows.push(f);
        }
        r
    }

    #[test]
    fn many_senders_with_ce_marks_to_one_receiver_fire() {
        let t = Thresholds::default();
        let f = fired(run(&IncastRule, &senders(4), &t));
        assert_eq!(f.summary, "10.0.1.1: 4 senders, 5.0% CE");
        assert_eq!(f.flows.len(), 4);
        assert_eq!(
            passed(run(&IncastRule, &senders(3), &t)),
            "no receiver with 4 or more senders and 1% CE (1 data receiver, at most 3 senders to one)"
        );
    }
}
