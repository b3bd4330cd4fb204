//! RoCE data over several DSCPs or mixed with DSCP 0: the lossless class is not one class
//! end to end.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{
        About, Context, Outcome, Rule, Severity, Thresholds, data_dscps, data_packets, finding,
        list, pct,
    },
    model::{FlowRef, Report},
};

pub const ABOUT: About = About {
    name: "dscp-mix",
    summary: "RoCE data over several DSCPs or mixed with DSCP 0 (class separation broken)",
    scenario: Some("rule-dscp-mix"),
};

/// The rule ([`ABOUT`]): `dscp_mix` below, with its [`DscpMix`] table.
pub struct DscpMixRule;

impl Rule for DscpMixRule {
    fn about(&self) -> &'static About {
        &ABOUT
    }

    fn evaluate(&self, r: &Report, t: &Thresholds, _ctx: &Context) -> Outcome {
        dscp_mix(r, &t.dscp_mix)
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

fn dscp_mix(r: &Report, c: &DscpMix) -> Outcome {
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
    if used.len() <= 1 {
        return Outcome::Passed(match used.first() {
            Some((d, _, _)) => format!("RoCE data uses one DSCP ({d})"),
            None => "no RoCE data".into(),
        });
    }
    let with_zero = used.iter().any(|u| u.0 == 0);
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
    let mut flows = remarked;
    if with_zero {
        flows.extend(
            r.flows
                .iter()
                .filter(|f| data_packets(f) > 0 && data_dscps(f).contains(&0))
                .map(FlowRef::of_flow),
        );
    }
    finding(
        ABOUT.name,
        Severity::Warning,
        if with_zero {
            "RoCE data mixed with best effort (DSCP 0)"
        } else {
            "RoCE data spread over several DSCPs"
        },
        format!(
            "RoCE data travels in {} ({})",
            count(used.len() as u64, "DSCP"),
            list(used.iter().map(|u| u.0))
        ),
        vec![("dscps", per.into())],
        flows,
        "RoCE needs one lossless class end to end: data in another DSCP lands in a lossy queue (drops, go-back-N) or shares the lossless one with other traffic. Set one RoCE DSCP/traffic class on every NIC (e.g. mlx5 default_roce_tos / cma_roce_tos, NCCL_IB_TC) and check that no switch re-marks it.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::testing::{fired, flow, passed, report, run};

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
    fn roce_data_over_several_dscps_fires() {
        let t = Thresholds::default();
        let f = fired(run(&DscpMixRule, &data_in(&[26, 0]), &t));
        assert_eq!(f.title, "RoCE data mixed with best effort (DSCP 0)");
        let f = fired(run(&DscpMixRule, &data_in(&[26, 24]), &t));
        assert_eq!(f.title, "RoCE data spread over several DSCPs");
        let note = passed(run(&DscpMixRule, &data_in(&[26, 26]), &t));
        assert_eq!(note, "RoCE data uses one DSCP (26)");
        assert_eq!(passed(run(&DscpMixRule, &report(), &t)), "no RoCE data");
    }
}
