//! The findings engine: named rules over a [`Report`] (flows, totals, PFC, microbursts, ECMP),
//! each finding with a severity, its evidence (numbers and the flows involved) and a hint.
//! Thresholds come from a TOML file ([`Thresholds`]; every key has a documented default).
//!
//! Rules judge what the observation point can show. Where the evidence a rule needs is not
//! there (no link speed, no ECMP model, no RoCE QoS configured at all), the rule is not run and
//! the `checks` list says why, rather than guessing.
//!
//! # Layout
//!
//! One file per rule under `rules/`: its [`About`] (name, [`RULES`] line, the synth scenario
//! that fires exactly it), a unit struct implementing [`Rule`], its thresholds table (a struct
//! with its documented `Default`), the rule function and its unit tests. This file holds the
//! registry (the order rules run in) and what rules share: [`Context`], [`Outcome`],
//! `finding()` and small helpers. `thresholds.rs` reads the rules file.
//!
//! # Adding a rule
//!
//! 1. `rules/<rule>.rs`, modelled on a neighbour (e.g. `rules/rnr.rs`);
//! 2. here: its line in `registry!` (where it runs), which declares its file, adds its table
//!    to [`Thresholds`] and lists it;
//! 3. `rules.example.toml` (repository root): its table, spelling the defaults (and, in
//!    `thresholds.rs`, any validation of its values);
//! 4. a synth scenario firing exactly it (roce-observer's `source/synth`), named in its
//!    [`About`].
//!
//! The unit tests in `thresholds.rs` catch step 3 left out, roce-observer's `source/synth`
//! tests step 4.

pub use crate::model::findings::{Check, CheckStatus, Finding, Severity};
use crate::model::{Flow, FlowRef, Report};

mod thresholds;

pub use thresholds::ThresholdsError;

/// Flows named in one finding at most.
pub const MAX_FLOWS_NAMED: usize = 20;

/// What a rule is, as a constant (so that [`RULES`] is one too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct About {
    /// Its name in findings, checks and `disabled` (its thresholds table is this name with `_`
    /// for `-`).
    pub name: &'static str,
    /// One line: what it finds (the [`RULES`] line).
    pub summary: &'static str,
    /// The synth scenario that fires exactly this rule (`synth --list`), if one can.
    pub scenario: Option<&'static str>,
}

/// One rule: what it is and how it judges a report.
pub trait Rule: Sync {
    /// Its `ABOUT` constant (the rule file's).
    fn about(&self) -> &'static About;

    /// Its name in findings, checks and `disabled`.
    fn name(&self) -> &'static str {
        self.about().name
    }

    /// The [`RULES`] line.
    fn summary(&self) -> &'static str {
        self.about().summary
    }

    /// The synth scenario that fires exactly this rule (e.g. "rule-loss").
    fn scenario(&self) -> Option<&'static str> {
        self.about().scenario
    }

    /// Judges the report with the rule's thresholds (its table of `t`); `ctx` is what the whole
    /// observation says about the fabric.
    fn evaluate(&self, report: &Report, t: &Thresholds, ctx: &Context) -> Outcome;

    /// The rule judges RoCE traffic: with no RoCE data packet at all it has nothing to judge
    /// (rather than passing on nothing). Rules that judge other frames say no.
    fn needs_roce(&self) -> bool {
        true
    }
}

/// A rule's opening, in its file: its [`About`] (`ABOUT`: name, [`RULES`] line, the synth
/// scenario that fires exactly it), its unit struct and the [`Rule`] impl calling `evaluate`
/// (`needs_roce` when it judges frames other than RoCE's).
macro_rules! rule {
    (
        $(#[$doc:meta])*
        $rule:ident {
            name: $name:expr,
            summary: $summary:expr,
            scenario: $scenario:expr,
            $(needs_roce: $needs:expr,)?
            evaluate: |$r:ident, $t:ident, $ctx:ident| $body:block $(,)?
        }
    ) => {
        pub const ABOUT: $crate::analysis::findings::About = $crate::analysis::findings::About {
            name: $name,
            summary: $summary,
            scenario: $scenario,
        };

        $(#[$doc])*
        pub struct $rule;

        impl $crate::analysis::findings::Rule for $rule {
            fn about(&self) -> &'static $crate::analysis::findings::About {
                &ABOUT
            }

            $(fn needs_roce(&self) -> bool {
                $needs
            })?

            fn evaluate(
                &self,
                $r: &$crate::model::Report,
                $t: &$crate::analysis::findings::Thresholds,
                $ctx: &$crate::analysis::findings::Context,
            ) -> $crate::analysis::findings::Outcome $body
        }
    };
}

/// The registry: one line per rule, `module::{Rule, Table}`, in the order the rules run (checks
/// are listed in and findings of one severity keep). From it: the rule's file
/// (`rules/<module>.rs`), its thresholds table re-exported, [`rules()`], [`RULES`], and
/// [`Thresholds`], whose field for the rule is named as its module and its rules-file table.
macro_rules! registry {
    ($($module:ident::{$rule:ident, $table:ident}),+ $(,)?) => {
        /// One file per rule (`rules/<rule>.rs`).
        mod rules {
            $(pub mod $module;)+
        }

        /// The rules' thresholds tables (the fields of [`Thresholds`]).
        pub use rules::{$($module::$table),+};

        static REGISTRY: &[&dyn Rule] = &[$(&rules::$module::$rule),+];

        /// The rules, in the order they run, with a line each.
        pub const RULES: &[(&str, &str)] =
            &[$((rules::$module::ABOUT.name, rules::$module::ABOUT.summary)),+];

        /// Rule thresholds: the TOML file given with `--rules` (every key optional, unknown
        /// keys are errors). `Thresholds::default()` is the documented default;
        /// `rules.example.toml` spells it. One table per rule, named as its module (the rule's
        /// name with `_` for `-`), plus `disabled`.
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct Thresholds {
            $(pub $module: $table,)+
            /// Rules not to run, by name.
            pub disabled: Vec<String>,
        }
    };
}

registry! {
    ce_without_cnp::{CeWithoutCnpRule, CeWithoutCnp},
    not_ect::{NotEctRule, NotEct},
    cnp_priority::{CnpPriorityRule, CnpPriority},
    dscp_mix::{DscpMixRule, DscpMix},
    loss::{LossRule, Loss},
    psn_violation::{PsnViolationRule, PsnViolation},
    stall::{StallRule, Stall},
    reorder::{ReorderRule, Reorder},
    duplicate_copies::{DuplicateCopiesRule, DuplicateCopies},
    qp_reuse::{QpReuseRule, QpReuse},
    rnr::{RnrRule, Rnr},
    pfc_storm::{PfcStormRule, PfcStorm},
    pfc_idle_priority::{PfcIdlePriorityRule, PfcIdlePriority},
    incast::{IncastRule, Incast},
    microburst::{MicroburstRule, Microburst},
    latency::{LatencyRule, Latency},
    ecmp_imbalance::{EcmpImbalanceRule, EcmpImbalance},
    job_straggler::{JobStragglerRule, JobStraggler},
    job_irregular_iteration::{JobIrregularIterationRule, JobIrregularIteration},
    job_hang::{JobHangRule, JobHang},
    flow_table_full::{FlowTableFullRule, FlowTableFull},
    observer_drops::{ObserverDropsRule, ObserverDrops},
    nic_pfc_priorities::{NicPfcPrioritiesRule, NicPfcPriorities},
    nic_ecn_without_cnp::{NicEcnWithoutCnpRule, NicEcnWithoutCnp},
    nic_transport_errors::{NicTransportErrorsRule, NicTransportErrors},
    nic_pause_share::{NicPauseShareRule, NicPauseShare},
    nic_pause_storm::{NicPauseStormRule, NicPauseStorm},
    nic_lossless_discards::{NicLosslessDiscardsRule, NicLosslessDiscards},
    nic_wire_mismatch::{NicWireMismatchRule, NicWireMismatch},
}

/// Every rule, in the order they run.
pub fn rules() -> &'static [&'static dyn Rule] {
    REGISTRY
}

/// Runs every enabled rule on the report; the findings (most severe first) and every rule's
/// check.
pub fn evaluate(r: &Report, t: &Thresholds) -> (Vec<Finding>, Vec<Check>) {
    let ctx = Context::of(r);
    let mut findings = Vec::new();
    let mut checks = Vec::new();
    for rule in rules() {
        let rule_name = rule.name();
        if !t.enabled(rule_name) {
            checks.push(Check {
                rule: rule_name.to_string(),
                status: CheckStatus::Skipped,
                note: "disabled in the rules file".into(),
            });
            continue;
        }
        // The NIC side alone (`diagnose --rdma-dev` without an interface): the wire's rules
        // (every rule but the `nic-` ones, which read the NIC's counters and settings, and the
        // wire against the NIC) have no view to judge, which is not too little of one.
        if r.source.kind == "nic"
            && (!rule_name.starts_with("nic-") || rule_name == "nic-wire-mismatch")
        {
            checks.push(Check {
                rule: rule_name.to_string(),
                status: CheckStatus::Skipped,
                note: "the wire is not observed (the NIC side alone)".into(),
            });
            continue;
        }
        let outcome = if rule.needs_roce() && ctx.roce_data == 0 {
            Outcome::InsufficientData(format!(
                "no RoCEv2 data packet (of {}) to judge",
                crate::units::count(r.totals.frames, "frame")
            ))
        } else {
            rule.evaluate(r, t, &ctx)
        };
        let (status, note) = match outcome {
            Outcome::Fired(f) => {
                let note = f.summary.clone();
                findings.push(f);
                (CheckStatus::Fired, note)
            }
            Outcome::Passed(n) => (CheckStatus::Passed, n),
            Outcome::InsufficientData(n) => (CheckStatus::InsufficientData, n),
            Outcome::Skipped(n) => (CheckStatus::Skipped, n),
        };
        checks.push(Check {
            rule: rule_name.to_string(),
            status,
            note,
        });
    }
    // Stable: rules of one severity keep their order.
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    (findings, checks)
}

/// Connection management: MADs to QP 1 (the GSI QP, over UD). Their DSCP, ECN and priority
/// are the CM's, not the RoCE data's: no QoS rule judges them.
fn is_connection_management(f: &Flow) -> bool {
    f.dest_qp == 1
}

/// Request packets of connected QPs (SEND, WRITE, READ request, atomic), the ones the PSN
/// analysis follows; connection management (QP 1) aside.
fn request_packets(r: &Report) -> u64 {
    r.flows
        .iter()
        .filter(|f| f.psn_followed())
        .map(|f| f.ops.send + f.ops.write + f.ops.read_request + f.ops.atomic)
        .sum()
}

/// Packets of a flow that carry RoCE data (requests and READ responses; none on connection
/// management).
fn data_packets(f: &Flow) -> u64 {
    if is_connection_management(f) {
        return 0;
    }
    f.ops.send + f.ops.write + f.ops.read_request + f.ops.read_response + f.ops.atomic
}

/// The DSCPs a flow's data travelled with: its DSCPs less those of its CNPs (a flow's CNPs
/// share its key with its ACKs and the other side's requests).
fn data_dscps(f: &Flow) -> Vec<u8> {
    if f.ops.cnp == 0 {
        return f.dscp.clone();
    }
    let rest: Vec<u8> = f
        .dscp
        .iter()
        .copied()
        .filter(|d| !f.cnp_dscp.contains(d))
        .collect();
    if rest.is_empty() && data_packets(f) > 0 {
        f.dscp.clone()
    } else {
        rest
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the whole observation says about the fabric's RoCE configuration (computed once, for
/// every rule).
pub struct Context {
    /// RoCE data packets (requests and READ responses, connection management aside).
    roce_data: u64,
    /// Some RoCE packet (not connection management) was ECT or CE, or a CNP was seen: ECN is
    /// in use somewhere.
    ecn_in_use: bool,
    /// RoCE data in a DSCP other than 0: a RoCE class is configured.
    dscp_in_use: bool,
    pfc_seen: bool,
}

impl Context {
    pub fn of(r: &Report) -> Self {
        Self {
            roce_data: r.flows.iter().map(data_packets).sum(),
            ecn_in_use: r
                .flows
                .iter()
                .filter(|f| !is_connection_management(f))
                .any(|f| f.ecn.ect0 + f.ecn.ect1 + f.ecn.ce > 0)
                || r.totals.cnp_packets > 0,
            dscp_in_use: r
                .flows
                .iter()
                .filter(|f| data_packets(f) > 0)
                .any(|f| data_dscps(f).iter().any(|d| *d != 0)),
            pfc_seen: r.pfc.is_some(),
        }
    }
}

/// What NIC rules say with no NIC side in the report.
const NO_NIC: &str =
    "no NIC side (diagnose: an RDMA device behind --iface or --rdma-dev; replay: --nic-root)";

/// The report's NIC side over a window, or why a rule on its counters cannot judge.
fn nic_window(r: &Report) -> Result<&crate::model::nic::Nic, Box<Outcome>> {
    match &r.nic {
        None => Err(Box::new(Outcome::Skipped(NO_NIC.into()))),
        Some(n) if n.seconds <= 0.0 => Err(Box::new(Outcome::InsufficientData(
            "one NIC reading: no window to count over".into(),
        ))),
        Some(n) => Ok(n),
    }
}

/// The outcome of one rule (its check's status and note).
pub enum Outcome {
    /// The finding; its summary is the check's note.
    Fired(Finding),
    /// What it looked at (never nothing: with no evidence, [`Outcome::InsufficientData`]).
    Passed(String),
    /// What it needed and what it saw.
    InsufficientData(String),
    /// Why it could not judge (the evidence it needs is not in the report).
    Skipped(String),
}

fn finding(
    rule: &str,
    severity: Severity,
    title: &str,
    summary: String,
    evidence: Vec<(&str, serde_json::Value)>,
    flows: Vec<FlowRef>,
    hint: &str,
) -> Outcome {
    Outcome::Fired(Finding {
        rule: rule.to_string(),
        severity,
        title: title.to_string(),
        summary,
        evidence: evidence
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        flows: flows.into_iter().take(MAX_FLOWS_NAMED).collect(),
        hint: hint.to_string(),
    })
}

/// Reports and flows to judge, for the rules' unit tests (and the analyses' that feed them).
#[cfg(test)]
pub(crate) mod testing {
    use crate::model::{Flow, PauseCounts, PausePriority, PauseSource, PfcReport, Report, Source};

    /// A report whose jobs analysis (on 1 ms bins, the wire seen until `end_ns`) holds one
    /// job, `job-1`, of `hosts` and `phases`, its period `period_ns` (0: none).
    pub fn job_report(
        hosts: Vec<std::net::IpAddr>,
        phases: Vec<crate::model::jobs::Phase>,
        period_ns: u64,
        end_ns: u64,
    ) -> Report {
        use crate::model::jobs::{Job, Jobs, Period};
        let mut r = report();
        let last = phases.last().map_or(0, |p| p.end_ns);
        r.jobs = Some(Jobs {
            bin_ns: 1_000_000,
            start_ns: 0,
            end_ns,
            jobs: vec![Job {
                id: "job-1".into(),
                hosts,
                qps: Vec::new(),
                bytes: 0,
                first_ns: 0,
                last_ns: last,
                last_packet_ns: last,
                period: (period_ns > 0).then(|| Period {
                    ns: period_ns,
                    iterations: phases.len().saturating_sub(1) as u32,
                    cv: 0.0,
                    stderr_ns: 0,
                }),
                no_period: None,
                iteration_p50_ns: None,
                iteration_p99_ns: None,
                phases,
                data_peers: None,
                ranks: Vec::new(),
                name: None,
            }],
        });
        r
    }

    /// A report with no traffic (no flows, no PFC, no microbursts, no ECMP model).
    pub fn report() -> Report {
        crate::aggregate::Aggregate::new().report(Source::pcap(Vec::new(), Vec::new()), 1.0)
    }

    /// A flow from `src` to `dst` with nothing counted.
    pub fn flow(src: &str, dst: &str) -> Flow {
        Flow::empty(src.parse().unwrap(), dst.parse().unwrap(), 49152, 0x11)
    }

    /// PFC frames from one sender: `(priority, frames, xon, pause_ns)` each.
    pub fn pfc(priorities: &[(u8, u64, u64, Option<u64>)]) -> PfcReport {
        PfcReport {
            link_speed_bps: None,
            sources: vec![PauseSource {
                src_mac: "02:00:00:00:00:01".into(),
                mirror: None,
                direction: Default::default(),
                pfc_frames: priorities.iter().map(|p| p.1).sum(),
                priorities: priorities
                    .iter()
                    .map(|&(priority, frames, xon, pause_ns)| PausePriority {
                        priority,
                        counts: PauseCounts {
                            frames,
                            xon,
                            quanta: 0,
                            pause_ns,
                        },
                    })
                    .collect(),
                link_pause: None,
                first_seen_ns: 0,
                last_seen_ns: 0,
            }],
        }
    }

    /// The finding of a rule that fired.
    pub fn fired(o: super::Outcome) -> super::Finding {
        match o {
            super::Outcome::Fired(f) => f,
            super::Outcome::Passed(n) => panic!("passed: {n}"),
            super::Outcome::InsufficientData(n) => panic!("insufficient data: {n}"),
            super::Outcome::Skipped(n) => panic!("skipped: {n}"),
        }
    }

    /// The note of a rule that had too little to judge.
    pub fn insufficient(o: super::Outcome) -> String {
        match o {
            super::Outcome::InsufficientData(n) => n,
            super::Outcome::Fired(f) => panic!("fired: {}", f.summary),
            super::Outcome::Passed(n) => panic!("passed: {n}"),
            super::Outcome::Skipped(n) => panic!("skipped: {n}"),
        }
    }

    /// The note of a rule that passed.
    pub fn passed(o: super::Outcome) -> String {
        match o {
            super::Outcome::Passed(n) => n,
            super::Outcome::Fired(f) => panic!("fired: {}", f.summary),
            super::Outcome::InsufficientData(n) => panic!("insufficient data: {n}"),
            super::Outcome::Skipped(n) => panic!("skipped: {n}"),
        }
    }

    /// The note of a rule that was skipped.
    pub fn skipped(o: super::Outcome) -> String {
        match o {
            super::Outcome::Skipped(n) => n,
            super::Outcome::Fired(f) => panic!("fired: {}", f.summary),
            super::Outcome::Passed(n) => panic!("passed: {n}"),
            super::Outcome::InsufficientData(n) => panic!("insufficient data: {n}"),
        }
    }

    /// Runs one rule with these thresholds, as `evaluate` does.
    pub fn run(rule: &dyn super::Rule, r: &Report, t: &super::Thresholds) -> super::Outcome {
        rule.evaluate(r, t, &super::Context::of(r))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_rule_has_a_check_and_disabled_rules_are_skipped() {
        let agg = crate::aggregate::Aggregate::new();
        let r = agg.report(crate::model::Source::pcap(Vec::new(), Vec::new()), 0.0);
        let (findings, checks) = evaluate(&r, &Thresholds::default());
        assert!(findings.is_empty());
        assert_eq!(
            checks.iter().map(|c| c.rule.as_str()).collect::<Vec<_>>(),
            RULES.iter().map(|(r, _)| *r).collect::<Vec<_>>()
        );
        let t = Thresholds {
            disabled: vec!["loss".into()],
            ..Thresholds::default()
        };
        let (_, checks) = evaluate(&r, &t);
        let loss = checks.iter().find(|c| c.rule == "loss").unwrap();
        assert_eq!(loss.status, CheckStatus::Skipped);
    }

    #[test]
    fn the_registry_runs_the_rules_in_their_order_once_each() {
        let names: Vec<&str> = rules().iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            [
                "ce-without-cnp",
                "not-ect",
                "cnp-priority",
                "dscp-mix",
                "loss",
                "psn-violation",
                "stall",
                "reorder",
                "duplicate-copies",
                "qp-reuse",
                "rnr",
                "pfc-storm",
                "pfc-idle-priority",
                "incast",
                "microburst",
                "latency",
                "ecmp-imbalance",
                "job-straggler",
                "job-irregular-iteration",
                "job-hang",
                "flow-table-full",
                "observer-drops",
                "nic-pfc-priorities",
                "nic-ecn-without-cnp",
                "nic-transport-errors",
                "nic-pause-share",
                "nic-pause-storm",
                "nic-lossless-discards",
                "nic-wire-mismatch",
            ]
        );
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "names are unique: {names:?}");
    }

    #[test]
    fn rules_lists_the_registry() {
        assert_eq!(
            RULES.to_vec(),
            rules()
                .iter()
                .map(|r| (r.name(), r.summary()))
                .collect::<Vec<_>>()
        );
        for rule in rules() {
            assert!(!rule.summary().is_empty(), "{}", rule.name());
        }
    }

    #[test]
    fn a_finding_names_a_bounded_number_of_flows() {
        let flows = (0..MAX_FLOWS_NAMED + 5)
            .map(|i| FlowRef::of_flow(&testing::flow(&format!("10.0.0.{i}"), "10.0.1.1")))
            .collect();
        let Outcome::Fired(f) = finding(
            "loss",
            Severity::Warning,
            "t",
            "s".into(),
            vec![("n", 1.into())],
            flows,
            "h",
        ) else {
            panic!("fired");
        };
        assert_eq!(f.flows.len(), MAX_FLOWS_NAMED);
        assert_eq!(f.evidence["n"], 1);
    }
}
