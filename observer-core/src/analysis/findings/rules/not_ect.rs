//! RoCE data sent Not-ECT where ECN is in use: switches cannot mark it, DCQCN never sees
//! congestion for these flows.

use std::{collections::BTreeSet, net::IpAddr};

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Context, Outcome, Severity, data_packets, finding, list, pct},
    model::{FlowRef, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `not_ect` below, with its [`NotEct`] table.
    NotEctRule {
        name: "not-ect",
        summary: "RoCE data sent Not-ECT where ECN is in use (ECN not enabled at the sender)",
        scenario: Some("rule-not-ect"),
        evaluate: |r, t, ctx| {
            not_ect(r, &t.not_ect, ctx)
        },
    }
}

/// The `[not_ect]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotEct {
    /// Not-ECT share of a flow's data packets from which it counts.
    pub min_percent: f64,
    /// Data packets a flow needs to be judged.
    pub min_packets: u64,
}

impl Default for NotEct {
    fn default() -> Self {
        Self {
            min_percent: 50.0,
            min_packets: 10,
        }
    }
}

fn not_ect(r: &Report, c: &NotEct, ctx: &Context) -> Outcome {
    if !(ctx.ecn_in_use || ctx.dscp_in_use) {
        return Outcome::Skipped(
            "no ECN marking, no CNP and no RoCE DSCP besides 0 anywhere: no RoCE QoS is configured at this observation point (typical of Soft-RoCE and labs), so ECN settings are not judged".into(),
        );
    }
    let mut offenders = Vec::new();
    let (mut judged, mut largest) = (0u64, 0u64);
    for f in &r.flows {
        let data = data_packets(f);
        largest = largest.max(data);
        if data < c.min_packets {
            continue;
        }
        judged += 1;
        // CNPs are Not-ECT by design; the rest of the flow's packets are its own.
        let own = f.packets.saturating_sub(f.ops.cnp);
        let not_ect = f.ecn.not_ect.saturating_sub(f.ops.cnp).min(own);
        let share = pct(not_ect, own);
        if share >= c.min_percent {
            offenders.push((FlowRef::of_flow(f), share, data));
        }
    }
    if judged == 0 {
        return Outcome::InsufficientData(format!(
            "no flow with {} data packets or more to judge (the largest has {largest})",
            c.min_packets
        ));
    }
    if offenders.is_empty() {
        return Outcome::Passed(format!(
            "RoCE data is sent ECN-capable ({} judged)",
            count(judged, "flow")
        ));
    }
    let senders: BTreeSet<IpAddr> = offenders.iter().map(|o| o.0.src_ip).collect();
    let packets: u64 = offenders.iter().map(|o| o.2).sum();
    finding(
        ABOUT.name,
        Severity::Warning,
        "RoCE data sent Not-ECT: ECN is off at these senders",
        format!(
            "{} from {} ({}) send their data Not-ECT ({}), while ECN is in use here",
            count(offenders.len() as u64, "flow"),
            count(senders.len() as u64, "sender"),
            list(&senders),
            count(packets, "data packet")
        ),
        vec![
            ("flows", offenders.len().into()),
            ("senders", list(&senders).into()),
            ("data_packets", packets.into()),
        ],
        offenders.into_iter().map(|o| o.0).collect(),
        "Switches cannot CE-mark Not-ECT packets (they drop or pause them instead), so DCQCN never sees congestion for these flows: enable ECN for RoCE on the sending NICs (e.g. mlx5: /sys/class/net/<if>/ecn/roce_rp/enable/<prio> = 1, or the traffic class's ECN setting) and check the DSCP/TOS the application or RDMA-CM sets.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, passed, report, run, skipped};

    #[test]
    fn not_ect_data_fires_only_where_ecn_is_in_use() {
        let t = Thresholds::default();
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send, f.ecn.not_ect) = (20, 20, 20);
        r.flows.push(f);
        let note = skipped(run(&NotEctRule, &r, &t));
        assert!(note.contains("no RoCE QoS"), "{note}");
        let mut ecn = flow("10.0.0.3", "10.0.0.2");
        (ecn.packets, ecn.ops.send, ecn.ecn.ect0) = (20, 20, 20);
        r.flows.push(ecn);
        let f = fired(run(&NotEctRule, &r, &t));
        assert_eq!(f.evidence["senders"], "10.0.0.1");
        assert_eq!(f.evidence["data_packets"], 20);
        r.flows.remove(0);
        passed(run(&NotEctRule, &r, &t));
    }

    #[test]
    fn connection_management_is_neither_judged_nor_a_sign_of_ecn() {
        let t = Thresholds::default();
        // RDMA-CM MADs (to QP 1) sent ECT in DSCP 26 beside Not-ECT data in DSCP 0: no RoCE
        // QoS is configured for the data, so the rule does not judge.
        let mut r = report();
        let mut cm = flow("10.0.0.1", "10.0.0.2");
        (cm.dest_qp, cm.packets, cm.ops.send, cm.ecn.ect0, cm.dscp) = (1, 20, 20, 20, vec![26]);
        r.flows.push(cm);
        let mut data = flow("10.0.0.1", "10.0.0.2");
        (data.packets, data.ops.write, data.ecn.not_ect) = (20, 20, 20);
        r.flows.push(data);
        skipped(run(&NotEctRule, &r, &t));
        // With ECN in use by the data elsewhere, Not-ECT MADs are not offenders.
        r.flows[1].ecn = Default::default();
        r.flows[1].ecn.ect0 = 20;
        r.flows[0].ecn = Default::default();
        r.flows[0].ecn.not_ect = 20;
        passed(run(&NotEctRule, &r, &t));
    }

    #[test]
    fn too_few_packets_per_flow_is_too_little_to_judge() {
        let t = Thresholds::default();
        let mut r = crate::analysis::findings::testing::report();
        let mut f = crate::analysis::findings::testing::flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.write, f.ecn.not_ect, f.dscp) = (9, 9, 9, vec![26]);
        r.flows.push(f);
        let note = crate::analysis::findings::testing::insufficient(run(&NotEctRule, &r, &t));
        assert_eq!(
            note,
            "no flow with 10 data packets or more to judge (the largest has 9)"
        );
    }
}
