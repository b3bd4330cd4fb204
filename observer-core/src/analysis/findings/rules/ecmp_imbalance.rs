//! ECMP load worse than random hashing would give (needs the ECMP model, `--uplinks`).

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, finding, round2},
    model::Report,
};

rule! {
    /// The rule ([`ABOUT`]): `ecmp_imbalance` below, with its [`EcmpImbalance`] table.
    EcmpImbalanceRule {
        name: "ecmp-imbalance",
        summary: "ECMP load worse than random hashing would give",
        scenario: Some("rule-ecmp-imbalance"),
        evaluate: |r, t, _ctx| {
            ecmp_imbalance(r, &t.ecmp_imbalance)
        },
    }
}

/// The `[ecmp_imbalance]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EcmpImbalance {
    /// Percentile of random hashing's max/mean from which the observed balance is worse.
    pub min_percentile: f64,
}

impl Default for EcmpImbalance {
    fn default() -> Self {
        Self {
            min_percentile: 95.0,
        }
    }
}

fn ecmp_imbalance(r: &Report, c: &EcmpImbalance) -> Outcome {
    let Some(e) = &r.ecmp else {
        return Outcome::Skipped(
            "no ECMP model: give --uplinks N (and the switch's --hash, --fields, --seed)".into(),
        );
    };
    // Fewer than two flows per uplink spread no better than chance whatever the hash: the
    // model has no verdict to judge (as `ecmp` says: too few flows).
    let uplinks = u64::from(e.model.uplinks);
    if e.flows < 2 * uplinks {
        return Outcome::InsufficientData(format!(
            "{} over {}: at least {} needed to judge the spread",
            count(e.flows, "data flow"),
            count(uplinks, "uplink"),
            2 * uplinks
        ));
    }
    // Worse than random: busier than `min_percentile` of random placements of the same flows
    // (the measure `ecmp`'s verdict is on).
    let percentile = e.random_percentile * 100.0;
    if percentile < c.min_percentile {
        let mut note = format!(
            "{}: max/mean {:.2} (random {:.2})",
            e.verdict, e.balance_bytes.max_over_mean, e.random_bytes.max_over_mean
        );
        // The hash is not at fault, yet the busiest uplink is above the what-if's target:
        // what the ecmp command recommends is said here too.
        if !e.what_if.meets_target {
            note.push_str(&format!(
                "; above the target max/mean {:.2} all the same, as few flows are under any hash: {}",
                e.what_if.target,
                match e.what_if.qps_per_connection {
                    Some(k) => format!("{k} QPs per connection would meet it (ecmp's what-if)"),
                    None => "no count up to 16 QPs per connection would (ecmp's what-if)".into(),
                }
            ));
        }
        return Outcome::Passed(note);
    }
    finding(
        ABOUT.name,
        Severity::Warning,
        // The verdict's "worse than random" is at 95%: a lower threshold fires on less.
        if e.random_percentile >= crate::analysis::ecmp::analysis::WORSE_PERCENTILE {
            "ECMP imbalance worse than random hashing"
        } else {
            "ECMP imbalance beyond the percentile threshold"
        },
        format!(
            "{}, {} hash on {}: busiest uplink at {:.2}x the mean where random hashing gives {:.2}x ({})",
            count(e.model.uplinks.into(), "uplink"),
            e.model.hash,
            e.model.fields,
            e.balance_bytes.max_over_mean,
            e.random_bytes.max_over_mean,
            e.verdict
        ),
        vec![
            (
                "max_over_mean",
                round2(e.balance_bytes.max_over_mean).into(),
            ),
            (
                "random_max_over_mean",
                round2(e.random_bytes.max_over_mean).into(),
            ),
            ("random_percentile", round2(percentile).into()),
            ("idle_uplinks", e.balance_bytes.idle.into()),
            ("colliding_top_flows", e.top_k_colliding.into()),
        ],
        Vec::new(),
        &match &e.what_if.hint {
            Some(h) => format!("Few large RoCE flows with little entropy collide on uplinks: {h}; the ecmp command's what-if shows what each would give."),
            None => "Few large RoCE flows with little entropy collide on uplinks: use more QPs per connection (NCCL_IB_QPS_PER_CONNECTION), let the NIC vary the UDP source port per QP, or hash on the destination QP where the switch supports it; the ecmp command's what-if shows what each would give.".to_string(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::ecmp::{EcmpOptions, analyse};
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{flow, insufficient, passed, report, run, skipped};

    #[test]
    fn without_an_ecmp_model_it_is_skipped() {
        let note = skipped(run(&EcmpImbalanceRule, &report(), &Thresholds::default()));
        assert!(note.contains("--uplinks"), "{note}");
    }

    /// `n` flows of equal bytes from distinct hosts and ports, modelled over 4 uplinks.
    fn modelled(n: u16) -> Report {
        let mut r = report();
        for i in 0..n {
            let mut f = flow(&format!("10.0.{}.{}", i / 200, 1 + i % 200), "10.1.0.1");
            (f.packets, f.ops.write, f.bytes) = (10, 10, 10_000);
            f.udp_src_port = 0xC000 + 7 * i;
            r.flows.push(f);
        }
        r.ecmp = Some(analyse(&r.flows, &r.connections, &EcmpOptions::default()));
        r
    }

    #[test]
    fn too_few_flows_for_the_uplinks_is_too_little_and_enough_passes() {
        let t = Thresholds::default();
        let note = insufficient(run(&EcmpImbalanceRule, &modelled(7), &t));
        assert_eq!(
            note,
            "7 data flows over 4 uplinks: at least 8 needed to judge the spread"
        );
        // 400 flows of equal size: any sane hash spreads them about as random hashing does.
        let note = passed(run(&EcmpImbalanceRule, &modelled(400), &t));
        assert!(note.contains(" than random: busier than "), "{note}");
        // 10 flows over 4 uplinks: as random, and above the target 1.1 all the same: the pass
        // says what the what-if recommends, never a plain pass beside a recommendation.
        let r = modelled(10);
        let note = passed(run(&EcmpImbalanceRule, &r, &t));
        let w = &r.ecmp.as_ref().unwrap().what_if;
        assert!(!w.meets_target && w.hint.is_some(), "{w:?}");
        assert!(
            note.contains("above the target max/mean 1.10 all the same"),
            "{note}"
        );
    }

    /// ACK-only flows weigh nothing on an uplink: they are no data flows to count.
    #[test]
    fn answers_alone_are_no_data_flows() {
        let mut r = modelled(4);
        for i in 0..8u16 {
            let mut b = flow("10.1.0.1", &format!("10.0.0.{}", 1 + i));
            (b.packets, b.ops.ack, b.bytes) = (10, 10, 480);
            r.flows.push(b);
        }
        r.ecmp = Some(analyse(&r.flows, &r.connections, &EcmpOptions::default()));
        assert_eq!(r.ecmp.as_ref().unwrap().flows, 4);
        let note = insufficient(run(&EcmpImbalanceRule, &r, &Thresholds::default()));
        assert_eq!(
            note,
            "4 data flows over 4 uplinks: at least 8 needed to judge the spread"
        );
    }
}
