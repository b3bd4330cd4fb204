//! The findings engine: named rules over a [`Report`] (flows, totals, PFC, microbursts, ECMP),
//! each finding with a severity, its evidence (numbers and the flows involved) and a hint.
//! Thresholds come from a TOML file ([`Thresholds`]; every key has a documented default).
//!
//! Rules judge what the observation point can show. Where the evidence a rule needs is not
//! there (no link speed, no ECMP model, no RoCE QoS configured at all), the rule is not run and
//! the `checks` list says why, rather than guessing.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use serde::{Deserialize, Serialize};

pub use crate::model::findings::{Check, CheckStatus, Finding, Severity};
use crate::model::{Direction, Flow, FlowRef, Report};

/// Flows named in one finding at most.
pub const MAX_FLOWS_NAMED: usize = 20;

/// The rules, in the order they run, with a line each.
pub const RULES: &[(&str, &str)] = &[
    (
        "ce-without-cnp",
        "CE marks on a flow but no CNPs back from its receiver (DCQCN notification point off)",
    ),
    (
        "not-ect",
        "RoCE data sent Not-ECT where ECN is in use (ECN not enabled at the sender)",
    ),
    (
        "cnp-priority",
        "CNPs in best-effort DSCP 0 or in the data's own class (CNPs must be prioritized)",
    ),
    (
        "dscp-mix",
        "RoCE data over several DSCPs or mixed with DSCP 0 (class separation broken)",
    ),
    (
        "loss",
        "PSN gaps, NAK sequence errors or retransmissions (drops in what should be lossless)",
    ),
    (
        "rnr",
        "RNR NAKs: the receiver had no receive posted (an application problem, not the network)",
    ),
    (
        "pfc-storm",
        "PFC pause storms: a priority paused for a large share of the time",
    ),
    (
        "pfc-idle-priority",
        "PFC pauses on a priority that carries no RoCE (PFC enabled on too many priorities)",
    ),
    ("incast", "Many senders to one receiver, with CE marks"),
    ("microburst", "Microbursts above a share of the link speed"),
    (
        "ecmp-imbalance",
        "ECMP load worse than random hashing would give",
    ),
    (
        "flow-table-full",
        "The observer's flow or pause table was full: some traffic is in totals only",
    ),
];

/// Rule thresholds: the TOML file given with `--rules` (every key optional, unknown keys are
/// errors). `Thresholds::default()` is the documented default; `rules.example.toml` spells it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thresholds {
    pub ce_without_cnp: CeWithoutCnp,
    pub not_ect: NotEct,
    pub cnp_priority: CnpPriority,
    pub dscp_mix: DscpMix,
    pub loss: Loss,
    pub rnr: Rnr,
    pub pfc_storm: PfcStorm,
    pub pfc_idle_priority: PfcIdlePriority,
    pub incast: Incast,
    pub microburst: Microburst,
    pub ecmp_imbalance: EcmpImbalance,
    pub flow_table_full: FlowTableFull,
    /// Rules not to run, by name.
    pub disabled: Vec<String>,
}

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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CnpPriority {
    /// CNPs needed to judge their class.
    pub min_cnps: u64,
}

impl Default for CnpPriority {
    fn default() -> Self {
        Self { min_cnps: 1 }
    }
}

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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rnr {
    pub min_rnr_naks: u64,
}

impl Default for Rnr {
    fn default() -> Self {
        Self { min_rnr_naks: 1 }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PfcStorm {
    /// Pause time asked for, as a share of the observed window, from which a priority storms
    /// (needs the link speed).
    pub min_pause_percent: f64,
    /// Or PFC frames per second on one priority (without a link speed too).
    pub min_frames_per_s: f64,
}

impl Default for PfcStorm {
    fn default() -> Self {
        Self {
            min_pause_percent: 10.0,
            min_frames_per_s: 1000.0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PfcIdlePriority {
    /// The priorities RoCE uses when the frames carry no VLAN tag to tell (the common
    /// lossless class is 3).
    pub roce_priorities: Vec<u8>,
    /// Pause frames (XOFF) on an idle priority from which the rule fires.
    pub min_frames: u64,
}

impl Default for PfcIdlePriority {
    fn default() -> Self {
        Self {
            roce_priorities: vec![3],
            min_frames: 1,
        }
    }
}

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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Microburst {
    /// A slot is busy from this share of the link speed; bursts are runs of busy slots.
    pub share_percent: f64,
    /// Bursts on one interface from which the rule fires.
    pub min_bursts: u64,
}

impl Default for Microburst {
    fn default() -> Self {
        Self {
            share_percent: 90.0,
            min_bursts: 1,
        }
    }
}

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

#[derive(Debug, thiserror::Error)]
pub enum ThresholdsError {
    #[error("cannot read the rules file {path}: {detail}")]
    Read { path: String, detail: String },
    #[error("rules file {path}: {detail}")]
    Parse { path: String, detail: String },
    #[error("rules file {path}: unknown rule '{rule}' in `disabled` (known: {known})")]
    UnknownRule {
        path: String,
        rule: String,
        known: String,
    },
    #[error("rules file {path}: {what}")]
    Invalid { path: String, what: String },
}

impl Thresholds {
    /// Reads a TOML thresholds file.
    pub fn load(path: &str) -> Result<Self, ThresholdsError> {
        let text = std::fs::read_to_string(path).map_err(|e| ThresholdsError::Read {
            path: path.to_string(),
            detail: e.to_string(),
        })?;
        Self::parse(&text, path)
    }

    /// Parses TOML text (`path` names it in errors).
    pub fn parse(text: &str, path: &str) -> Result<Self, ThresholdsError> {
        let t: Thresholds = toml::from_str(text).map_err(|e| ThresholdsError::Parse {
            path: path.to_string(),
            // toml's message spans lines (a snippet of the file): keep it on one.
            detail: e
                .to_string()
                .lines()
                .map(str::trim)
                .filter(|l| {
                    // Drop the snippet: `|`, `N | text` and `^^^` lines.
                    let snippet = l
                        .split_once('|')
                        .is_some_and(|(n, _)| n.trim().chars().all(|c| c.is_ascii_digit()));
                    !l.is_empty() && !snippet && !l.chars().all(|c| c == '^')
                })
                .collect::<Vec<_>>()
                .join(" "),
        })?;
        for rule in &t.disabled {
            if !RULES.iter().any(|(r, _)| r == rule) {
                return Err(ThresholdsError::UnknownRule {
                    path: path.to_string(),
                    rule: rule.clone(),
                    known: RULES.iter().map(|(r, _)| *r).collect::<Vec<_>>().join(", "),
                });
            }
        }
        let invalid = |what: String| ThresholdsError::Invalid {
            path: path.to_string(),
            what,
        };
        for (name, v) in [
            ("not_ect.min_percent", t.not_ect.min_percent),
            ("dscp_mix.min_percent", t.dscp_mix.min_percent),
            ("pfc_storm.min_pause_percent", t.pfc_storm.min_pause_percent),
            ("incast.min_ce_percent", t.incast.min_ce_percent),
            ("microburst.share_percent", t.microburst.share_percent),
            (
                "ecmp_imbalance.min_percentile",
                t.ecmp_imbalance.min_percentile,
            ),
        ] {
            if !(0.0..=100.0).contains(&v) {
                return Err(invalid(format!(
                    "{name} is a percentage (0 to 100), not {v}"
                )));
            }
        }
        if t.microburst.share_percent == 0.0 {
            return Err(invalid("microburst.share_percent must be above 0".into()));
        }
        let non_negative = |v: f64| v.is_finite() && v >= 0.0;
        if !non_negative(t.ce_without_cnp.max_cnp_per_ce)
            || !non_negative(t.pfc_storm.min_frames_per_s)
        {
            return Err(invalid(
                "ce_without_cnp.max_cnp_per_ce and pfc_storm.min_frames_per_s must be 0 or more"
                    .into(),
            ));
        }
        if let Some(p) = t.pfc_idle_priority.roce_priorities.iter().find(|p| **p > 7) {
            return Err(invalid(format!(
                "pfc_idle_priority.roce_priorities: {p} is not a priority (0 to 7)"
            )));
        }
        Ok(t)
    }

    fn enabled(&self, rule: &str) -> bool {
        !self.disabled.iter().any(|r| r == rule)
    }
}

/// Packets of a flow that carry data (requests and READ responses).
fn data_packets(f: &Flow) -> u64 {
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

/// What the whole observation says about the fabric's RoCE configuration.
struct Context {
    /// Some RoCE packet was ECT or CE, or a CNP was seen: ECN is in use somewhere.
    ecn_in_use: bool,
    /// RoCE data in a DSCP other than 0: a RoCE class is configured.
    dscp_in_use: bool,
    pfc_seen: bool,
}

impl Context {
    fn of(r: &Report) -> Self {
        Self {
            ecn_in_use: r
                .flows
                .iter()
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

/// The outcome of one rule.
enum Outcome {
    Fired(Finding),
    Passed(String),
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

/// Runs every enabled rule on the report; the findings (most severe first) and every rule's
/// check.
pub fn evaluate(r: &Report, t: &Thresholds) -> (Vec<Finding>, Vec<Check>) {
    let ctx = Context::of(r);
    let mut findings = Vec::new();
    let mut checks = Vec::new();
    for (rule, _) in RULES {
        if !t.enabled(rule) {
            checks.push(Check {
                rule: rule.to_string(),
                status: CheckStatus::Skipped,
                note: "disabled in the rules file".into(),
            });
            continue;
        }
        let outcome = match *rule {
            "ce-without-cnp" => ce_without_cnp(r, t),
            "not-ect" => not_ect(r, t, &ctx),
            "cnp-priority" => cnp_priority(r, t),
            "dscp-mix" => dscp_mix(r, t),
            "loss" => loss(r, t, &ctx),
            "rnr" => rnr(r, t),
            "pfc-storm" => pfc_storm(r, t),
            "pfc-idle-priority" => pfc_idle_priority(r, t),
            "incast" => incast(r, t),
            "microburst" => microburst(r, t),
            "ecmp-imbalance" => ecmp_imbalance(r, t),
            "flow-table-full" => flow_table_full(r, t),
            _ => unreachable!("every rule of RULES has a function"),
        };
        let (status, note) = match outcome {
            Outcome::Fired(f) => {
                let note = f.summary.clone();
                findings.push(f);
                (CheckStatus::Fired, note)
            }
            Outcome::Passed(n) => (CheckStatus::Passed, n),
            Outcome::Skipped(n) => (CheckStatus::Skipped, n),
        };
        checks.push(Check {
            rule: rule.to_string(),
            status,
            note,
        });
    }
    // Stable: rules of one severity keep their order.
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    (findings, checks)
}

fn ce_without_cnp(r: &Report, t: &Thresholds) -> Outcome {
    let c = &t.ce_without_cnp;
    // Per direction of a host pair: CE marks on its data, packets and CNPs the other way.
    let mut ce: BTreeMap<(IpAddr, IpAddr), (u64, Vec<FlowRef>)> = BTreeMap::new();
    let mut back: BTreeMap<(IpAddr, IpAddr), (u64, u64)> = BTreeMap::new();
    for f in &r.flows {
        if f.ecn.ce > 0 && data_packets(f) > 0 {
            let e = ce.entry((f.src_ip, f.dst_ip)).or_default();
            e.0 += f.ecn.ce;
            e.1.push(FlowRef::of_flow(f));
        }
        let b = back.entry((f.dst_ip, f.src_ip)).or_default();
        b.0 += f.packets;
        b.1 += f.ops.cnp;
    }
    if ce.is_empty() {
        return Outcome::Passed("no CE marks on RoCE data".into());
    }
    let mut offenders = Vec::new();
    let mut unseen = 0;
    for ((src, dst), (marks, flows)) in &ce {
        if *marks < c.min_ce_packets {
            continue;
        }
        let (packets_back, cnps) = back.get(&(*src, *dst)).copied().unwrap_or_default();
        if packets_back == 0 {
            unseen += 1;
            continue;
        }
        if (cnps as f64) < c.max_cnp_per_ce * *marks as f64 {
            offenders.push((*src, *dst, *marks, cnps, flows.clone()));
        }
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
        .map(|o| format!("{} -> {}: {} CE, {} CNPs back", o.0, o.1, o.2, o.3))
        .collect();
    finding(
        "ce-without-cnp",
        Severity::Critical,
        "CE marks without CNPs: the receivers do not react to congestion",
        format!(
            "{marks} CE-marked packets to {} receivers ({}) drew {cnps} CNPs back",
            receivers.len(),
            list(&receivers)
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

fn not_ect(r: &Report, t: &Thresholds, ctx: &Context) -> Outcome {
    if !(ctx.ecn_in_use || ctx.dscp_in_use) {
        return Outcome::Skipped(
            "no ECN marking, no CNP and no RoCE DSCP besides 0 anywhere: no RoCE QoS is configured at this observation point (typical of Soft-RoCE and labs), so ECN settings are not judged".into(),
        );
    }
    let c = &t.not_ect;
    let mut offenders = Vec::new();
    for f in &r.flows {
        let data = data_packets(f);
        if data < c.min_packets {
            continue;
        }
        // CNPs are Not-ECT by design; the rest of the flow's packets are its own.
        let own = f.packets.saturating_sub(f.ops.cnp);
        let not_ect = f.ecn.not_ect.saturating_sub(f.ops.cnp).min(own);
        let share = pct(not_ect, own);
        if share >= c.min_percent {
            offenders.push((FlowRef::of_flow(f), share, data));
        }
    }
    if offenders.is_empty() {
        return Outcome::Passed("RoCE data is sent ECN-capable".into());
    }
    let senders: BTreeSet<IpAddr> = offenders.iter().map(|o| o.0.src_ip).collect();
    let packets: u64 = offenders.iter().map(|o| o.2).sum();
    finding(
        "not-ect",
        Severity::Warning,
        "RoCE data sent Not-ECT: ECN is off at these senders",
        format!(
            "{} flows from {} senders ({}) send their data Not-ECT ({packets} data packets), while ECN is in use here",
            offenders.len(),
            senders.len(),
            list(&senders)
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

fn cnp_priority(r: &Report, t: &Thresholds) -> Outcome {
    let cnps: u64 = r.flows.iter().map(|f| f.ops.cnp).sum();
    if cnps == 0 {
        return Outcome::Passed("no CNPs seen".into());
    }
    if cnps < t.cnp_priority.min_cnps {
        return Outcome::Passed(format!("only {cnps} CNPs seen"));
    }
    let data: BTreeSet<u8> = r
        .flows
        .iter()
        .filter(|f| data_packets(f) > 0)
        .flat_map(data_dscps)
        .filter(|d| *d != 0)
        .collect();
    let mut best_effort = Vec::new();
    let mut same_class = Vec::new();
    for f in r.flows.iter().filter(|f| f.ops.cnp > 0) {
        if f.cnp_dscp.contains(&0) {
            best_effort.push(FlowRef::of_flow(f));
        } else if f.cnp_dscp.iter().any(|d| data.contains(d)) {
            same_class.push(FlowRef::of_flow(f));
        }
    }
    let cnp_dscps: BTreeSet<u8> = r.flows.iter().flat_map(|f| f.cnp_dscp.clone()).collect();
    if best_effort.is_empty() && same_class.is_empty() {
        return Outcome::Passed(format!(
            "CNPs travel in DSCP {}, apart from the data's ({})",
            list(&cnp_dscps),
            list(&data)
        ));
    }
    let what = match (best_effort.is_empty(), same_class.is_empty()) {
        (false, true) => "in best-effort DSCP 0".to_string(),
        (true, false) => format!("in the data's own class (DSCP {})", list(&data)),
        _ => format!(
            "in best-effort DSCP 0 and in the data's class (DSCP {})",
            list(&data)
        ),
    };
    finding(
        "cnp-priority",
        Severity::Warning,
        "CNPs are not prioritized",
        format!(
            "CNPs of {} flows travel {what}; CNP DSCPs seen: {}",
            best_effort.len() + same_class.len(),
            list(&cnp_dscps)
        ),
        vec![
            ("cnps", cnps.into()),
            ("cnp_dscps", list(&cnp_dscps).into()),
            ("data_dscps", list(&data).into()),
            ("flows_best_effort", best_effort.len().into()),
            ("flows_same_class", same_class.len().into()),
        ],
        best_effort.into_iter().chain(same_class).collect(),
        "A CNP queued behind the congestion it reports arrives too late for DCQCN to act: send CNPs in their own strict-priority class (commonly DSCP 48, e.g. mlx5: /sys/class/net/<if>/ecn/roce_np/cnp_dscp and cnp_802p_prio) and map that DSCP to a high-priority queue on every switch.",
    )
}

fn dscp_mix(r: &Report, t: &Thresholds) -> Outcome {
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
        .filter(|(_, (b, _))| pct(*b, total) >= t.dscp_mix.min_percent)
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
        .map(|(d, b, n)| format!("DSCP {d}: {:.1}% of bytes, {n} flows", pct(*b, total)))
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
        "dscp-mix",
        Severity::Warning,
        if with_zero {
            "RoCE data mixed with best effort (DSCP 0)"
        } else {
            "RoCE data spread over several DSCPs"
        },
        format!(
            "RoCE data travels in {} DSCPs ({})",
            used.len(),
            list(used.iter().map(|u| u.0))
        ),
        vec![("dscps", per.into())],
        flows,
        "RoCE needs one lossless class end to end: data in another DSCP lands in a lossy queue (drops, go-back-N) or shares the lossless one with other traffic. Set one RoCE DSCP/traffic class on every NIC (e.g. mlx5 default_roce_tos / cma_roce_tos, NCCL_IB_TC) and check that no switch re-marks it.",
    )
}

fn loss(r: &Report, t: &Thresholds, ctx: &Context) -> Outcome {
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
    if events < t.loss.min_events {
        return Outcome::Passed(format!(
            "no PSN gap, NAK or retransmission ({events} events)"
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
    let severity = if events >= t.loss.critical_events || lossless {
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
        rule: "loss".into(),
        severity,
        title: if lossless {
            "Packet loss in the lossless RoCE class".into()
        } else {
            "Packet loss in RoCE traffic".into()
        },
        summary: format!(
            "{gaps} PSN gaps (~{missing} PSNs missing), {naks} NAKs, {retx} retransmissions on {} flows",
            flows.len()
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

fn rnr(r: &Report, t: &Thresholds) -> Outcome {
    let total: u64 = r.flows.iter().map(|f| f.ops.rnr_nak).sum();
    if total == 0 || total < t.rnr.min_rnr_naks {
        return Outcome::Passed(format!("{total} RNR NAKs"));
    }
    let flows: Vec<FlowRef> = r
        .flows
        .iter()
        .filter(|f| f.ops.rnr_nak > 0)
        .map(FlowRef::of_flow)
        .collect();
    let receivers: BTreeSet<IpAddr> = flows.iter().map(|f| f.src_ip).collect();
    finding(
        "rnr",
        Severity::Warning,
        "RNR NAKs: receivers not ready (an application problem, not the network)",
        format!(
            "{total} RNR NAKs from {} receivers ({})",
            receivers.len(),
            list(&receivers)
        ),
        vec![
            ("rnr_naks", total.into()),
            ("receivers", list(&receivers).into()),
        ],
        flows,
        "A SEND arrived with no receive buffer posted, and the sender waits out its RNR timer: the application (or NCCL/UCX) must post receives ahead of the traffic, use a larger receive queue or SRQ, or a shorter min_rnr_timer. The network is not at fault.",
    )
}

fn pfc_storm(r: &Report, t: &Thresholds) -> Outcome {
    let Some(pfc) = &r.pfc else {
        return Outcome::Passed("no PAUSE / PFC frames".into());
    };
    let window = r.window.seconds;
    let c = &t.pfc_storm;
    let mut storms = Vec::new();
    for src in &pfc.sources {
        for p in &src.priorities {
            let share = p
                .counts
                .pause_ns
                .filter(|_| window > 0.0)
                // Refreshes before the previous pause ran out overlap: at most all the time.
                .map(|ns| (ns as f64 / (window * 1e9) * 100.0).min(100.0));
            let rate = (window > 0.0).then(|| p.counts.frames as f64 / window);
            if share.is_some_and(|s| s >= c.min_pause_percent)
                || rate.is_some_and(|f| f >= c.min_frames_per_s)
            {
                storms.push(format!(
                    "{} priority {}: {} frames{}{}",
                    src.src_mac,
                    p.priority,
                    p.counts.frames,
                    rate.map_or(String::new(), |f| format!(" ({f:.0}/s)")),
                    share.map_or(String::new(), |s| format!(", paused {s:.1}% of the time")),
                ));
            }
        }
    }
    if storms.is_empty() {
        return Outcome::Passed(format!(
            "PFC below {}% paused and {} frames/s on every priority",
            c.min_pause_percent, c.min_frames_per_s
        ));
    }
    finding(
        "pfc-storm",
        Severity::Critical,
        "PFC pause storm",
        format!(
            "{} sender-priorities pause heavily: {}",
            storms.len(),
            storms[0]
        ),
        vec![
            ("storms", storms.clone().into()),
            ("window_seconds", window.into()),
            (
                "link_speed_bps",
                pfc.link_speed_bps
                    .map_or(serde_json::Value::Null, Into::into),
            ),
        ],
        Vec::new(),
        "A port that keeps pausing spreads congestion upstream (head-of-line blocking, possibly a deadlock): find the congested receiver behind the pausing port, check that ECN/DCQCN reacts before PFC does (ECN marking threshold below the PFC XOFF threshold), and that no NIC is stuck (a PFC watchdog on the switch helps).",
    )
}

fn pfc_idle_priority(r: &Report, t: &Thresholds) -> Outcome {
    let Some(pfc) = &r.pfc else {
        return Outcome::Passed("no PAUSE / PFC frames".into());
    };
    let mut roce: BTreeSet<u8> = r.flows.iter().flat_map(|f| f.pcp.clone()).collect();
    if r.flows.is_empty() || r.flows.iter().any(|f| f.untagged) {
        roce.extend(t.pfc_idle_priority.roce_priorities.iter().copied());
    }
    let mut idle: BTreeMap<u8, u64> = BTreeMap::new();
    for src in &pfc.sources {
        for p in &src.priorities {
            let xoff = p.counts.frames - p.counts.xon;
            if !roce.contains(&p.priority) && xoff > 0 {
                *idle.entry(p.priority).or_default() += xoff;
            }
        }
    }
    idle.retain(|_, n| *n >= t.pfc_idle_priority.min_frames);
    if idle.is_empty() {
        return Outcome::Passed(format!("pauses only on RoCE priorities ({})", list(&roce)));
    }
    let per: Vec<String> = idle
        .iter()
        .map(|(p, n)| format!("priority {p}: {n} pause frames"))
        .collect();
    finding(
        "pfc-idle-priority",
        Severity::Warning,
        "PFC pauses on priorities that carry no RoCE",
        format!(
            "pauses on priorities {} while RoCE uses {}",
            list(idle.keys()),
            list(&roce)
        ),
        vec![
            ("idle_priorities", per.into()),
            ("roce_priorities", list(&roce).into()),
        ],
        Vec::new(),
        "PFC is enabled on more priorities than the lossless RoCE class: other traffic gets paused too (and can spread congestion). Enable PFC only on the RoCE priority on NICs and switches; if RoCE really uses these priorities untagged, list them in pfc_idle_priority.roce_priorities.",
    )
}

fn incast(r: &Report, t: &Thresholds) -> Outcome {
    let mut by_dst: BTreeMap<IpAddr, (BTreeSet<IpAddr>, u64, u64, Vec<FlowRef>)> = BTreeMap::new();
    for f in r.flows.iter().filter(|f| data_packets(f) > 0) {
        let e = by_dst.entry(f.dst_ip).or_default();
        e.0.insert(f.src_ip);
        e.1 += f.packets;
        e.2 += f.ecn.ce;
        e.3.push(FlowRef::of_flow(f));
    }
    let c = &t.incast;
    let hits: Vec<(IpAddr, usize, f64, Vec<FlowRef>)> = by_dst
        .into_iter()
        .filter(|(_, (s, p, ce, _))| s.len() >= c.min_senders && pct(*ce, *p) >= c.min_ce_percent)
        .map(|(d, (s, p, ce, f))| (d, s.len(), pct(ce, p), f))
        .collect();
    if hits.is_empty() {
        return Outcome::Passed(format!(
            "no receiver with {} or more senders and {}% CE",
            c.min_senders, c.min_ce_percent
        ));
    }
    let per: Vec<String> = hits
        .iter()
        .map(|(d, s, ce, _)| format!("{d}: {s} senders, {ce:.1}% CE"))
        .collect();
    finding(
        "incast",
        Severity::Warning,
        "Incast: many senders congest one receiver",
        per.join("; "),
        vec![("receivers", per.clone().into())],
        hits.into_iter().flat_map(|h| h.3).collect(),
        "Many-to-one traffic (all-to-all, parameter servers, checkpoints) overflows the receiver's switch port: make sure DCQCN reacts (CNPs back, see ce-without-cnp), consider limiting in-flight data per sender, or spreading the receivers (NCCL's algorithms/channels, job placement).",
    )
}

fn microburst(r: &Report, t: &Thresholds) -> Outcome {
    let Some(mb) = &r.microbursts else {
        return Outcome::Skipped("no microburst slots in this report".into());
    };
    if mb.link_speed_bps.is_none() {
        return Outcome::Skipped(
            "link speed unknown: give --link-speed (host mode reads it from the interface when it reports one)".into(),
        );
    }
    let hits: Vec<_> = mb
        .interfaces
        .iter()
        .filter(|i| i.bursts >= t.microburst.min_bursts && i.bursts > 0)
        .collect();
    if hits.is_empty() {
        let peak = mb
            .interfaces
            .iter()
            .filter_map(|i| i.peak_percent)
            .fold(0.0, f64::max);
        return Outcome::Passed(format!(
            "no {} us slot at or above {}% of the link speed (peak {peak:.1}%)",
            mb.slot_ns / 1000,
            mb.threshold_percent
        ));
    }
    let per: Vec<String> = hits
        .iter()
        .map(|i| {
            format!(
                "{} {}: {} bursts, peak {:.1}%, longest {} us",
                i.name,
                match i.direction {
                    Direction::Ingress => "in",
                    Direction::Egress => "out",
                },
                i.bursts,
                i.peak_percent.unwrap_or(0.0),
                i.longest_burst_ns / 1000
            )
        })
        .collect();
    finding(
        "microburst",
        Severity::Warning,
        "Microbursts near line rate",
        format!(
            "slots of {} us at or above {}% of {} Gb/s: {}",
            mb.slot_ns / 1000,
            mb.threshold_percent,
            mb.link_speed_bps.unwrap_or(0) as f64 / 1e9,
            per.join("; ")
        ),
        vec![
            ("interfaces", per.into()),
            ("slot_ns", mb.slot_ns.into()),
            ("threshold_percent", mb.threshold_percent.into()),
        ],
        Vec::new(),
        "Bursts at line rate fill switch buffers faster than ECN can slow senders: they show up as CE marks, PFC pauses or drops just after. Check the ECN marking thresholds (mark early enough for the burst length), and whether collective phases line up (many ranks starting a step at once).",
    )
}

fn ecmp_imbalance(r: &Report, t: &Thresholds) -> Outcome {
    let Some(e) = &r.ecmp else {
        return Outcome::Skipped(
            "no ECMP model: give --uplinks N (and the switch's --hash, --fields, --seed)".into(),
        );
    };
    let worse = e.verdict.ends_with("worse than random would be");
    let percentile = e.random_percentile * 100.0;
    if !worse || percentile < t.ecmp_imbalance.min_percentile {
        return Outcome::Passed(format!(
            "{}: max/mean {:.2} (random {:.2}), percentile {percentile:.0}",
            e.verdict, e.balance_bytes.max_over_mean, e.random_bytes.max_over_mean
        ));
    }
    finding(
        "ecmp-imbalance",
        Severity::Warning,
        "ECMP imbalance worse than random hashing",
        format!(
            "{} uplinks, {} hash on {}: busiest uplink at {:.2}x the mean where random hashing gives {:.2}x ({})",
            e.model.uplinks,
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
        "Few large RoCE flows with little entropy collide on uplinks: use more QPs per connection (NCCL_IB_QPS_PER_CONNECTION), let the NIC vary the UDP source port per QP, or hash on the destination QP where the switch supports it; the ecmp command's what-if shows what each would give.",
    )
}

fn flow_table_full(r: &Report, t: &Thresholds) -> Outcome {
    let tt = &r.totals;
    let lost = tt.flow_insert_failures + tt.evicted_packets;
    let pauses = tt.pause_insert_failures;
    if lost + pauses < t.flow_table_full.min_packets || lost + pauses == 0 {
        return Outcome::Passed("every RoCE packet and PAUSE frame is in a table".into());
    }
    finding(
        "flow-table-full",
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

    #[test]
    fn the_example_rules_file_spells_the_defaults() {
        let t =
            Thresholds::parse(include_str!("../../../../rules.example.toml"), "example").unwrap();
        assert_eq!(t, Thresholds::default());
        assert_eq!(
            Thresholds::parse("", "empty").unwrap(),
            Thresholds::default()
        );
        let t = Thresholds::parse("[loss]\nmin_events = 5\n", "f").unwrap();
        assert_eq!(t.loss.min_events, 5);
        assert_eq!(t.loss.critical_events, Loss::default().critical_events);
    }

    #[test]
    fn bad_rules_files_are_one_line_errors_naming_the_file() {
        for (text, want) in [
            ("[loss]\nmin_events = \"x\"\n", "rules file f.toml:"),
            ("[loss]\nmin_event = 1\n", "unknown field"),
            ("[losses]\n", "unknown field"),
            ("disabled = [\"nope\"]\n", "unknown rule 'nope'"),
            ("[incast]\nmin_ce_percent = 150.0\n", "is a percentage"),
            ("[microburst]\nshare_percent = 0.0\n", "must be above 0"),
            (
                "[pfc_idle_priority]\nroce_priorities = [9]\n",
                "not a priority",
            ),
            ("not toml at all", "rules file f.toml:"),
        ] {
            let e = Thresholds::parse(text, "f.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains("f.toml"), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let e = Thresholds::load("/nonexistent/rules.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cannot read the rules file /nonexistent/rules.toml"),
            "{e}"
        );
    }

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
}
