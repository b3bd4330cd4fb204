//! CE marks on RoCE data with no CNPs coming back from its receiver: the switches signal
//! congestion but the receivers' DCQCN notification point does not answer.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, data_packets, finding, list},
    model::{FlowRef, Report},
};

rule! {
    /// The rule ([`ABOUT`]): `ce_without_cnp` below, with its [`CeWithoutCnp`] table.
    CeWithoutCnpRule {
        name: "ce-without-cnp",
        summary: "CE marks on a flow but no CNPs back from its receiver (DCQCN notification point off)",
        scenario: Some("rule-ce-without-cnp"),
        evaluate: |r, t, _ctx| {
            ce_without_cnp(r, &t.ce_without_cnp)
        },
    }
}

/// The `[ce_without_cnp]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CeWithoutCnp {
    /// CE-marked packets a flow needs before its missing CNPs count.
    pub min_ce_packets: u64,
    /// CNPs per CE-marked packet below which the receiver is taken not to react.
    pub max_cnp_per_ce: f64,
}

impl Default for CeWithoutCnp {
    fn default() -> Self {
        Self {
            min_ce_packets: 10,
            max_cnp_per_ce: 0.01,
        }
    }
}

fn ce_without_cnp(r: &Report, c: &CeWithoutCnp) -> Outcome {
    // Per direction of a host pair: CE marks on its data, packets and CNPs the other way.
    let mut ce: BTreeMap<(IpAddr, IpAddr), (u64, Vec<FlowRef>)> = BTreeMap::new();
    let mut back: BTreeMap<(IpAddr, IpAddr), (u64, u64)> = BTreeMap::new();
    for f in &r.flows {
        if f.ecn.ce > 0 && data_packets(f) > 0 {
            let e = ce.entry((f.src_ip, f.dst_ip)).or_default();
            e.0 += f.ecn.ce;
            e.1.push(FlowRef::of_flow(f));
        }
    }
    if ce.is_empty() {
        return Outcome::Passed("no CE marks on RoCE data".into());
    }
    // (The way back of the marked directions only.)
    for f in &r.flows {
        if ce.contains_key(&(f.dst_ip, f.src_ip)) {
            let b = back.entry((f.dst_ip, f.src_ip)).or_default();
            b.0 += f.packets;
            b.1 += f.ops.cnp;
        }
    }
    let mut offenders = Vec::new();
    let (mut unseen, mut judged) = (0, 0);
    for ((src, dst), (marks, flows)) in &ce {
        if *marks < c.min_ce_packets {
            continue;
        }
        judged += 1;
        let (packets_back, cnps) = back.get(&(*src, *dst)).copied().unwrap_or_default();
        if packets_back == 0 {
            unseen += 1;
            continue;
        }
        if (cnps as f64) < c.max_cnp_per_ce * *marks as f64 {
            offenders.push((*src, *dst, *marks, cnps, flows.clone()));
        }
    }
    if judged == 0 {
        // A few marks draw no CNP on a NIC whose notification point is on but rate-limited:
        // below the threshold nothing can be said of any receiver.
        let marks: u64 = ce.values().map(|(m, _)| m).sum();
        return Outcome::InsufficientData(format!(
            "{} on {}, none with the {} needed to judge its receiver",
            count(marks, "CE mark"),
            count(ce.len() as u64, "host pair"),
            c.min_ce_packets
        ));
    }
    if offenders.is_empty() {
        return if unseen > 0 {
            Outcome::Skipped(format!(
                "CE marks on {unseen} host pairs whose reverse direction (where CNPs travel) is not observed here"
            ))
        } else {
            Outcome::Passed(format!(
                "every receiver of CE-marked data (at least {} marks) answers with CNPs",
                c.min_ce_packets
            ))
        };
    }
    let marks: u64 = offenders.iter().map(|o| o.2).sum();
    let cnps: u64 = offenders.iter().map(|o| o.3).sum();
    let receivers: BTreeSet<IpAddr> = offenders.iter().map(|o| o.1).collect();
    let pairs: Vec<String> = offenders
        .iter()
        .map(|o| format!("{} -> {}: {} CE, {} back", o.0, o.1, o.2, count(o.3, "CNP")))
        .collect();
    finding(
        ABOUT.name,
        Severity::Critical,
        "CE marks without CNPs: the receivers do not react to congestion",
        format!(
            "{} to {} ({}) drew {} back",
            count(marks, "CE-marked packet"),
            count(receivers.len() as u64, "receiver"),
            list(&receivers),
            count(cnps, "CNP")
        ),
        vec![
            ("ce_packets", marks.into()),
            ("cnps_back", cnps.into()),
            ("host_pairs", pairs.into()),
        ],
        offenders.into_iter().flat_map(|o| o.4).collect(),
        "The switches mark CE but the receiving NICs send no CNP, so senders never slow down and queues (and PFC) take the load: enable the DCQCN notification point for the RoCE priority on the receivers (e.g. mlx5: /sys/class/net/<if>/ecn/roce_np/enable/<prio> = 1), and check that nothing on the way back drops CNPs.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{
        fired, flow, insufficient, passed, report, run, skipped,
    };

    /// 20 CE-marked SENDs from .1 to .2, and what .2 sends back: `back` packets, `cnps` CNPs.
    fn marked(back: Option<(u64, u64)>) -> Report {
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send, f.ecn.ce) = (20, 20, 20);
        r.flows.push(f);
        if let Some((packets, cnps)) = back {
            let mut b = flow("10.0.0.2", "10.0.0.1");
            (b.packets, b.ops.ack, b.ops.cnp) = (packets, packets - cnps, cnps);
            r.flows.push(b);
        }
        r
    }

    #[test]
    fn ce_marks_without_cnps_back_fire_with_cnps_pass_unseen_skips() {
        let t = Thresholds::default();
        let f = fired(run(&CeWithoutCnpRule, &marked(Some((5, 0))), &t));
        assert_eq!(
            (f.rule.as_str(), f.severity),
            ("ce-without-cnp", Severity::Critical)
        );
        assert_eq!(f.evidence["ce_packets"], 20);
        assert_eq!(f.flows.len(), 1);
        passed(run(&CeWithoutCnpRule, &marked(Some((5, 1))), &t));
        let note = skipped(run(&CeWithoutCnpRule, &marked(None), &t));
        assert!(note.contains("not observed here"), "{note}");
        let t = Thresholds {
            ce_without_cnp: CeWithoutCnp {
                min_ce_packets: 21,
                ..CeWithoutCnp::default()
            },
            ..Thresholds::default()
        };
        let note = insufficient(run(&CeWithoutCnpRule, &marked(Some((5, 0))), &t));
        assert_eq!(
            note,
            "20 CE marks on 1 host pair, none with the 21 needed to judge its receiver"
        );
    }

    #[test]
    fn data_without_ce_marks_passes_saying_so() {
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.send) = (20, 20);
        r.flows.push(f);
        let note = passed(run(&CeWithoutCnpRule, &r, &Thresholds::default()));
        assert_eq!(note, "no CE marks on RoCE data");
    }
}
