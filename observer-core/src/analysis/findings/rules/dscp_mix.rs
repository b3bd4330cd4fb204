//! RoCE data over several DSCPs or mixed with DSCP 0: the lossless class is not one class
//! end to end.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use serde::{Deserialize, Serialize};

use crate::units::{count, noun};
use crate::{
    analysis::findings::{
        MAX_FLOWS_NAMED, Outcome, Severity, data_dscps, data_packets, finding, list, pct,
    },
    model::{FlowRef, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `dscp_mix` below, with its [`DscpMix`] table.
    DscpMixRule {
        name: "dscp-mix",
        summary: "RoCE data over several DSCPs or mixed with DSCP 0 (class separation broken)",
        scenario: Some("rule-dscp-mix"),
        evaluate: |r, t, _ctx| {
            dscp_mix(r, &t.dscp_mix)
        },
    }
}

/// The `[dscp_mix]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DscpMix {
    /// Share of RoCE data bytes a DSCP needs to count as used (ignores a stray packet).
    pub min_percent: f64,
}

impl Default for DscpMix {
    fn default() -> Self {
        Self { min_percent: 1.0 }
    }
}

/// Host pairs named in the summary; the evidence names them all (up to
/// [`MAX_FLOWS_NAMED`](crate::analysis::findings::MAX_FLOWS_NAMED)).
const PAIRS_IN_SUMMARY: usize = 4;

fn dscp_mix(r: &Report, c: &DscpMix) -> Outcome {
    // Per DSCP: data bytes and flows.
    let mut bytes: BTreeMap<u8, (u64, usize)> = BTreeMap::new();
    let mut total = 0u64;
    let mut remarked = Vec::new();
    for f in r.flows.iter().filter(|f| data_packets(f) > 0) {
        let dscps = data_dscps(f);
        if dscps.is_empty() {
            continue;
        }
        total += f.bytes;
        let share = f.bytes / dscps.len() as u64;
        for d in &dscps {
            let e = bytes.entry(*d).or_default();
            e.0 += share;
            e.1 += 1;
        }
        if dscps.len() > 1 {
            remarked.push(FlowRef::of_flow(f));
        }
    }
    let used: Vec<(u8, u64, usize)> = bytes
        .iter()
        .filter(|(_, (b, _))| pct(*b, total) >= c.min_percent)
        .map(|(d, (b, n))| (*d, *b, *n))
        .collect();
    match used.as_slice() {
        [] => return Outcome::InsufficientData("no RoCE data to judge".into()),
        [(d, _, _)] => return Outcome::Passed(format!("RoCE data uses one DSCP ({d})")),
        _ => {}
    }
    // Per host pair: its DSCPs and bytes (only wanted when there is a mix).
    let mut pairs: BTreeMap<(IpAddr, IpAddr), (BTreeSet<u8>, u64)> = BTreeMap::new();
    for f in r.flows.iter().filter(|f| data_packets(f) > 0) {
        let dscps = data_dscps(f);
        if dscps.is_empty() {
            continue;
        }
        let p = pairs.entry((f.src_ip, f.dst_ip)).or_default();
        p.0.extend(&dscps);
        p.1 += f.bytes;
    }
    let with_zero = used.iter().any(|u| u.0 == 0);
    // The RoCE class: the DSCP besides 0 that carries the most bytes (best effort is never
    // the class to keep); flows in the others are the ones to fix.
    let main = used
        .iter()
        .filter(|u| u.0 != 0)
        .max_by_key(|u| (u.1, std::cmp::Reverse(u.0)))
        .map_or(0, |u| u.0);
    let per: Vec<String> = used
        .iter()
        .map(|(d, b, n)| {
            format!(
                "DSCP {d}: {:.1}% of bytes, {}",
                pct(*b, total),
                count(*n as u64, "flow")
            )
        })
        .collect();
    // Who sends what: host pairs in another class than the main one first, then by bytes.
    let used_set: BTreeSet<u8> = used.iter().map(|u| u.0).collect();
    let mut senders: Vec<(IpAddr, IpAddr, Vec<u8>, u64)> = pairs
        .into_iter()
        .map(|((src, dst), (d, b))| (src, dst, d.intersection(&used_set).copied().collect(), b))
        .filter(|(_, _, d, _): &(IpAddr, IpAddr, Vec<u8>, u64)| !d.is_empty())
        .collect();
    senders.sort_by_key(|(src, dst, d, b)| (*d == [main], std::cmp::Reverse(*b), *src, *dst));
    let says = |(src, dst, d, _): &(IpAddr, IpAddr, Vec<u8>, u64)| {
        let d: Vec<String> = d.iter().map(u8::to_string).collect();
        format!("{src} -> {dst} sends DSCP {}", d.join(" and "))
    };
    let mut named: Vec<String> = senders.iter().take(PAIRS_IN_SUMMARY).map(says).collect();
    if senders.len() > PAIRS_IN_SUMMARY {
        let more = (senders.len() - PAIRS_IN_SUMMARY) as u64;
        named.push(format!("{more} more {}", noun(more, "host pair")));
    }
    let mut flows = remarked;
    flows.extend(
        r.flows
            .iter()
            .filter(|f| data_packets(f) > 0)
            .filter(|f| {
                let d = data_dscps(f);
                d.len() == 1 && d[0] != main && used_set.contains(&d[0])
            })
            .map(FlowRef::of_flow),
    );
    finding(
        ABOUT.name,
        Severity::Warning,
        if with_zero {
            "RoCE data mixed with best effort (DSCP 0)"
        } else {
            "RoCE data spread over several DSCPs"
        },
        format!(
            "RoCE data travels in {} ({}): {}",
            count(used.len() as u64, "DSCP"),
            list(used.iter().map(|u| u.0)),
            named.join(", ")
        ),
        vec![
            ("dscps", per.into()),
            (
                "senders",
                senders
                    .iter()
                    .take(MAX_FLOWS_NAMED)
                    .map(says)
                    .collect::<Vec<_>>()
                    .into(),
            ),
        ],
        flows,
        "RoCE needs one lossless class end to end: data in another DSCP lands in a lossy queue (drops, go-back-N) or shares the lossless one with other traffic. Set one RoCE DSCP/traffic class on every NIC (e.g. mlx5 default_roce_tos / cma_roce_tos, NCCL_IB_TC) and check that no switch re-marks it.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, insufficient, passed, report, run};

    fn data_in(dscps: &[u8]) -> Report {
        let mut r = report();
        for (i, d) in dscps.iter().enumerate() {
            let mut f = flow(&format!("10.0.0.{}", i + 1), "10.0.1.1");
            (f.packets, f.ops.write, f.bytes, f.dscp) = (10, 10, 10_000, vec![*d]);
            r.flows.push(f);
        }
        r
    }

    #[test]
    fn the_finding_says_which_sender_uses_which_dscp() {
        let t = Thresholds::default();
        // Two senders to one receiver in 26, a third in 0 (twice their bytes each).
        let mut r = data_in(&[26, 26, 0]);
        r.flows[2].bytes = 20_000;
        let f = fired(run(&DscpMixRule, &r, &t));
        assert_eq!(
            f.summary,
            "RoCE data travels in 2 DSCPs (0, 26): 10.0.0.3 -> 10.0.1.1 sends DSCP 0, \
             10.0.0.1 -> 10.0.1.1 sends DSCP 26, 10.0.0.2 -> 10.0.1.1 sends DSCP 26"
        );
        // DSCP 0 carries as many bytes as 26, but best effort is never the RoCE class: the
        // flow named is the one in 0.
        assert_eq!(
            f.flows
                .iter()
                .map(|f| f.src_ip.to_string())
                .collect::<Vec<_>>(),
            ["10.0.0.3"]
        );
        assert_eq!(f.evidence["senders"].as_array().unwrap().len(), 3);
        // Five pairs: four named, then how many more.
        let f = fired(run(&DscpMixRule, &data_in(&[26, 26, 26, 26, 0]), &t));
        assert!(
            f.summary.starts_with(
                "RoCE data travels in 2 DSCPs (0, 26): 10.0.0.5 -> 10.0.1.1 sends DSCP 0, "
            ) && f.summary.ends_with(", 1 more host pair"),
            "{}",
            f.summary
        );
        assert_eq!(f.flows.len(), 1, "the flow off the main class");
    }

    #[test]
    fn connection_management_is_not_roce_data() {
        let t = Thresholds::default();
        // Data in 26; RDMA-CM MADs (to QP 1) in 0 are not a second class.
        let mut r = data_in(&[26, 0]);
        r.flows[1].dest_qp = 1;
        let note = passed(run(&DscpMixRule, &r, &t));
        assert_eq!(note, "RoCE data uses one DSCP (26)");
    }

    #[test]
    fn roce_data_over_several_dscps_fires() {
        let t = Thresholds::default();
        let f = fired(run(&DscpMixRule, &data_in(&[26, 0]), &t));
        assert_eq!(f.title, "RoCE data mixed with best effort (DSCP 0)");
        let f = fired(run(&DscpMixRule, &data_in(&[26, 24]), &t));
        assert_eq!(f.title, "RoCE data spread over several DSCPs");
        let note = passed(run(&DscpMixRule, &data_in(&[26, 26]), &t));
        assert_eq!(note, "RoCE data uses one DSCP (26)");
        assert_eq!(
            insufficient(run(&DscpMixRule, &report(), &t)),
            "no RoCE data to judge"
        );
    }
}
