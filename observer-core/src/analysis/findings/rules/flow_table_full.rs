//! The observer's flow or pause table was full: some traffic is in the totals only, and per-flow
//! rules can miss it. No synth scenario fires it (a replay's flow table is unbounded).

use serde::{Deserialize, Serialize};

use crate::{
    analysis::findings::{Outcome, Severity, finding, pct},
    model::Report,
};

rule! {
    /// The rule ([`ABOUT`]): `flow_table_full` below, with its [`FlowTableFull`] table.
    FlowTableFullRule {
        name: "flow-table-full",
        summary: "The observer's flow or pause table was full: some traffic is in totals only",
        scenario: None,
        evaluate: |r, t, _ctx| {
            flow_table_full(r, &t.flow_table_full)
        },
    }
}

/// The `[flow_table_full]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlowTableFull {
    /// Packets (or PAUSE frames) outside the tables from which the rule fires.
    pub min_packets: u64,
}

impl Default for FlowTableFull {
    fn default() -> Self {
        Self { min_packets: 1 }
    }
}

fn flow_table_full(r: &Report, c: &FlowTableFull) -> Outcome {
    let tt = &r.totals;
    let lost = tt.flow_insert_failures + tt.evicted_packets;
    let pauses = tt.pause_insert_failures;
    if lost + pauses < c.min_packets || lost + pauses == 0 {
        return Outcome::Passed("every RoCE packet and PAUSE frame is in a table".into());
    }
    finding(
        ABOUT.name,
        Severity::Warning,
        "The observer's flow table was full: part of the traffic is in totals only",
        format!(
            "{lost} RoCE packets ({:.2}% of them) and {pauses} PAUSE / PFC frames are counted in the totals but in no flow: per-flow findings can miss them",
            pct(lost, tt.roce_packets)
        ),
        vec![
            ("flow_insert_failures", tt.flow_insert_failures.into()),
            ("evicted_packets", tt.evicted_packets.into()),
            ("pause_insert_failures", pauses.into()),
            ("flows_tracked", r.flows.len().into()),
        ],
        Vec::new(),
        "Raise --max-flows (each flow costs 216 bytes per CPU in the kernel), or observe fewer interfaces per process.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, passed, report, run};

    #[test]
    fn packets_outside_the_tables_fire() {
        let t = Thresholds::default();
        let mut r = report();
        passed(run(&FlowTableFullRule, &r, &t));
        (r.totals.roce_packets, r.totals.flow_insert_failures) = (200, 3);
        r.totals.pause_insert_failures = 1;
        let f = fired(run(&FlowTableFullRule, &r, &t));
        assert!(
            f.summary
                .starts_with("3 RoCE packets (1.50% of them) and 1 PAUSE"),
            "{}",
            f.summary
        );
        assert_eq!(f.evidence["flow_insert_failures"], 3);
    }
}
