//! A training job's straggler: one host late to start its communication phases (it computes
//! longer) or last to finish them, in most phases, by a margin; the cause as its QPs show it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::units::{count, duration};
use crate::{
    analysis::findings::{Outcome, Severity, finding},
    model::{
        FlowRef, Report,
        jobs::{HostPhase, Job, Phase},
    },
};

rule! {
    /// The rule ([`ABOUT`]): `job_straggler` below, with its [`JobStraggler`] table.
    JobStragglerRule {
        name: "job-straggler",
        summary: "a training job's host late to start or last to finish its communication phases, in most of them (with the cause: host or network)",
        scenario: Some("rule-job-straggler"),
        evaluate: |r, t, _ctx| {
            job_straggler(r, &t.job_straggler)
        },
    }
}

/// The `[job_straggler]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobStraggler {
    /// Phases a job needs before a host can be judged late in most of them.
    pub min_phases: usize,
    /// Hosts sending in a phase for it to count (one host late needs peers to be late to).
    pub min_hosts: usize,
    /// The share of the phases in which the same host must be the late one.
    pub min_share_percent: f64,
    /// How much later than the sample's median host it must be, in bins of the jobs' grid...
    pub min_margin_bins: u64,
    /// ...and as a share of the sample's scale (the median host's compute time, or the
    /// phase's length). Jitter is answered by the share and the chance test.
    pub min_margin_percent: f64,
    /// The chance that the late host's count came by chance (each of the sample's hosts as
    /// likely to be the late one) must be below this.
    pub max_chance: f64,
}

impl Default for JobStraggler {
    fn default() -> Self {
        Self {
            min_phases: 4,
            min_hosts: 3,
            min_share_percent: 66.0,
            min_margin_bins: 2,
            min_margin_percent: 3.0,
            max_chance: 0.001,
        }
    }
}

/// What a host is late in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// Its compute: the time from its last send in one phase to its first in the next.
    Compute,
    /// Its first send in a phase.
    Start,
    /// Its last send in a phase.
    Finish,
    /// The time from the last data it received to its first send, among the hosts whose
    /// inputs came in the same phase (`in_phase`: a tree's inner hosts and root, which send
    /// once their children's data is in) or in the phase before (its leaves: their compute).
    Held { in_phase: bool },
    /// Its first send to its last, among the hosts fed in the phase before (a tree's leaves,
    /// which send one part each).
    Sending,
}

/// The measures of a job whose hosts play one role (a ring: each sends to as many peers), and
/// of one whose hosts play several (a tree), where a host's start and finish are its place in
/// the collective and only what it does with its own inputs compares host with host.
const ONE_ROLE: [End; 3] = [End::Compute, End::Start, End::Finish];
const ROLES: [End; 3] = [
    End::Held { in_phase: false },
    End::Held { in_phase: true },
    End::Sending,
];

type Host = std::net::IpAddr;

/// One sample of a measure: each host's value, and the scale a share of which is the margin
/// (the phase's length, or the median host's compute time).
struct Sample {
    values: Vec<(Host, u64)>,
    scale: u64,
}

/// The median of `v` (sorted here): of an even count, the mean of the middle two; 0 of none.
fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    match v.len() {
        0 => 0,
        n => (v[(n - 1) / 2] + v[n / 2]) / 2,
    }
}

/// Each host's class in a job whose hosts play different roles: fed in the phase (true: a
/// tree's inner hosts and root) or in the phase before (false: its leaves), as it was in most
/// of the phases that tell; a host with as many of each has none. One class for the whole job,
/// so a host late enough to change how it looks in some phases keeps its peers.
fn classes(phases: &[Phase]) -> BTreeMap<Host, bool> {
    let mut counts: BTreeMap<Host, (u32, u32)> = BTreeMap::new();
    for h in phases.iter().flat_map(|p| &p.hosts).filter(|h| h.fed_ns.is_some()) {
        let c = counts.entry(h.host).or_default();
        if h.fed_in_phase {
            c.0 += 1;
        } else {
            c.1 += 1;
        }
    }
    counts
        .into_iter()
        .filter(|(_, (i, b))| i != b)
        .map(|(h, (i, b))| (h, i > b))
        .collect()
}

/// Each host's measure of `end`, per sample: a phase's start or finish (from the phase's
/// start), the compute between two consecutive phases (for the hosts that sent in both), or,
/// among the hosts of one class (`classes`) fed as their class is in the phase, their hold or
/// compute from their last input, or their sending.
fn samples(phases: &[Phase], end: End, classes: &BTreeMap<Host, bool>) -> Vec<Sample> {
    let phase = |p: &Phase, f: fn(&HostPhase) -> u64| Sample {
        values: p
            .hosts
            .iter()
            .map(|h| (h.host, f(h).saturating_sub(p.start_ns)))
            .collect(),
        scale: p.end_ns.saturating_sub(p.start_ns),
    };
    // The hosts of a class fed as it is in the phase, each with its value; the scale the
    // median value, or the phase's length.
    let class = |p: &Phase, in_phase: bool, of: fn(&HostPhase, u64) -> u64, by_length: bool| {
        let values: Vec<(Host, u64)> = p
            .hosts
            .iter()
            .filter(|h| classes.get(&h.host) == Some(&in_phase) && h.fed_in_phase == in_phase)
            .filter_map(|h| Some((h.host, of(h, h.fed_ns?))))
            .collect();
        let scale = if by_length {
            p.end_ns.saturating_sub(p.start_ns)
        } else {
            median(&mut values.iter().map(|x| x.1).collect::<Vec<_>>())
        };
        Sample { values, scale }
    };
    match end {
        End::Start => phases.iter().map(|p| phase(p, |h| h.start_ns)).collect(),
        End::Finish => phases.iter().map(|p| phase(p, |h| h.end_ns)).collect(),
        End::Held { in_phase } => phases
            .iter()
            .map(|p| class(p, in_phase, |h, fed| h.start_ns.saturating_sub(fed), in_phase))
            .collect(),
        End::Sending => phases
            .iter()
            .map(|p| class(p, false, |h, _| h.end_ns.saturating_sub(h.start_ns), false))
            .collect(),
        End::Compute => phases
            .windows(2)
            .map(|w| {
                let values: Vec<(Host, u64)> = w[0]
                    .hosts
                    .iter()
                    .filter_map(|a| {
                        let b = w[1].hosts.iter().find(|b| b.host == a.host)?;
                        Some((a.host, b.start_ns.saturating_sub(a.end_ns)))
                    })
                    .collect();
                let scale = median(&mut values.iter().map(|x| x.1).collect::<Vec<_>>());
                Sample { values, scale }
            })
            .collect(),
    }
}

/// The chance of `n` or more of `samples` trials with probability `p` each (binomial tail).
fn chance_at_least(n: usize, samples: usize, p: f64) -> f64 {
    let ln_choose = |n: usize, k: usize| -> f64 {
        (1..=k)
            .map(|i| ((n - k + i) as f64).ln() - (i as f64).ln())
            .sum()
    };
    (n..=samples)
        .map(|k| {
            (ln_choose(samples, k) + k as f64 * p.ln() + (samples - k) as f64 * (1.0 - p).ln())
                .exp()
        })
        .sum()
}

/// The hosts last in `sample` (several when tied on the bins), when that is at least `margin`
/// ns after its median host: by how much, and who.
fn late(sample: &[(Host, u64)], margin: u64) -> Option<(u64, Vec<Host>)> {
    let mut times: Vec<u64> = sample.iter().map(|s| s.1).collect();
    let median = median(&mut times);
    let last = *times.last()?;
    (last - median >= margin).then(|| {
        let hosts = sample
            .iter()
            .filter(|s| s.1 == last)
            .map(|s| s.0)
            .collect();
        (last - median, hosts)
    })
}

/// A job's straggler: the host, what it is late in, in how many of how many samples (phases,
/// or iterations for compute), its mean lateness over the median host (ns), and its network
/// evidence beside its peers'.
struct Straggler {
    host: Host,
    end: End,
    late: usize,
    samples: usize,
    mean_margin_ns: u64,
    /// CE marks, CNPs, NAKs and resends per phase on its QPs, and on its peers' (mean per
    /// host).
    evidence: f64,
    peers_evidence: f64,
}

/// What a job's judgement found.
enum Judged {
    Straggler(Straggler),
    /// Judged on at least one measure: no host late in most samples.
    Clean,
    /// No measure had samples enough (too few hosts in each role).
    Not,
}

/// Whether `job`'s hosts play several roles: they send data to different numbers of peers (a
/// tree's leaves, inner hosts and root; or other traffic beside a ring).
fn has_roles(job: &Job) -> bool {
    job.data_peers.is_some_and(|(lo, hi)| lo != hi)
}

fn straggler(job: &Job, bin_ns: u64, c: &JobStraggler) -> Judged {
    let judged: Vec<&Phase> = job
        .phases
        .iter()
        .filter(|p| p.hosts.len() >= c.min_hosts)
        .collect();
    if judged.len() < c.min_phases {
        return Judged::Not;
    }
    let floor = c.min_margin_bins.max(1).saturating_mul(bin_ns);
    let mut measured = false;
    let mut best: Option<Straggler> = None;
    let roles = has_roles(job);
    let classes = if roles {
        classes(&job.phases)
    } else {
        BTreeMap::new()
    };
    for end in if roles { ROLES } else { ONE_ROLE } {
        // (Consecutive phases first, then the samples with hosts enough.)
        let samples: Vec<Sample> = samples(&job.phases, end, &classes)
            .into_iter()
            .filter(|s| s.values.len() >= c.min_hosts)
            .collect();
        if samples.len() < c.min_phases {
            continue;
        }
        measured = true;
        let lates: Vec<Option<(u64, Vec<Host>)>> = samples
            .iter()
            .map(|s| {
                let relative = (s.scale as f64 * c.min_margin_percent / 100.0) as u64;
                late(&s.values, floor.max(relative))
            })
            .collect();
        let mut by_host: std::collections::BTreeMap<Host, usize> = Default::default();
        for (_, hosts) in lates.iter().flatten() {
            for h in hosts {
                *by_host.entry(*h).or_default() += 1;
            }
        }
        let Some((&host, &n)) = by_host
            .iter()
            .max_by_key(|(h, n)| (**n, std::cmp::Reverse(**h)))
        else {
            continue;
        };
        // Most samples, and not by chance: each host as likely as any to be the late one.
        let hosts = samples.iter().map(|s| s.values.len()).sum::<usize>() as f64
            / samples.len() as f64;
        if (n as f64) < c.min_share_percent / 100.0 * samples.len() as f64
            || chance_at_least(n, samples.len(), 1.0 / hosts) >= c.max_chance
        {
            continue;
        }
        let margin_sum: u64 = lates
            .iter()
            .flatten()
            .filter(|(_, hosts)| hosts.contains(&host))
            .map(|(by, _)| by)
            .sum();
        // Per host and phase it sent in: its own, and its peers' on average (in a job of roles,
        // the hosts of its class: an inner host's QPs carry more than a leaf's).
        let (mut mine, mut mine_count, mut peers, mut peer_count) = (0u64, 0u64, 0u64, 0u64);
        for p in &judged {
            for h in &p.hosts {
                let e = h.events();
                if h.host == host {
                    mine += e;
                    mine_count += 1;
                } else if !roles || classes.get(&h.host) == classes.get(&host) {
                    peers += e;
                    peer_count += 1;
                }
            }
        }
        let s = Straggler {
            host,
            end,
            late: n,
            samples: samples.len(),
            mean_margin_ns: margin_sum / n as u64,
            evidence: mine as f64 / mine_count.max(1) as f64,
            peers_evidence: peers as f64 / peer_count.max(1) as f64,
        };
        // The measure in which it is late most consistently (the first of equals).
        let share = |s: &Straggler| s.late as f64 / s.samples as f64;
        if best.as_ref().is_none_or(|b| share(&s) > share(b)) {
            best = Some(s);
        }
    }
    match best {
        Some(s) => Judged::Straggler(s),
        None if measured => Judged::Clean,
        None => Judged::Not,
    }
}

fn job_straggler(r: &Report, c: &JobStraggler) -> Outcome {
    let Some(jobs) = &r.jobs else {
        return Outcome::Skipped("no jobs analysis: give --jobs (replay, or diagnose --capture)".into());
    };
    let enough: Vec<&Job> = jobs
        .jobs
        .iter()
        .filter(|j| {
            j.phases.iter().filter(|p| p.hosts.len() >= c.min_hosts).count() >= c.min_phases
        })
        .collect();
    if enough.is_empty() {
        return Outcome::InsufficientData(format!(
            "{}, none with {} of {} sending hosts or more",
            count(jobs.jobs.len() as u64, "job"),
            count(c.min_phases as u64, "phase"),
            c.min_hosts
        ));
    }
    // Hosts in different roles (a tree's leaves, inner hosts and root) start and finish late
    // by their place in the collective, not by being slow: such a job's hosts are compared
    // only on what each does with its own inputs, within the hosts fed alike.
    let mut found = None;
    let (mut clean, mut not): (Vec<&Job>, Vec<&Job>) = (Vec::new(), Vec::new());
    for j in &enough {
        match straggler(j, jobs.bin_ns, c) {
            Judged::Straggler(s) => {
                found = Some((*j, s));
                break;
            }
            Judged::Clean => clean.push(j),
            Judged::Not => not.push(j),
        }
    }
    let roles = |j: &Job| {
        let (lo, hi) = j.data_peers.unwrap_or_default();
        format!("{}'s hosts send data to {lo} to {hi} peers each", j.id)
    };
    let Some((job, s)) = found else {
        if clean.is_empty() {
            let said: Vec<String> = not.iter().map(|j| roles(j)).collect();
            return Outcome::InsufficientData(format!(
                "{}: hosts in different roles, fewer than {} fed alike in each phase (a host late by its place cannot be told from a slow one)",
                said.join("; "),
                c.min_hosts
            ));
        }
        let phases: usize = clean.iter().map(|j| j.phases.len()).sum();
        let within: Vec<&str> = clean
            .iter()
            .filter(|j| has_roles(j))
            .map(|j| j.id.as_str())
            .collect();
        let within = if within.is_empty() {
            String::new()
        } else {
            format!(
                "; {} compared within the hosts fed alike (hosts in different roles)",
                within.join(", ")
            )
        };
        let unjudged = if !not.is_empty() {
            let ids: Vec<&str> = not.iter().map(|j| j.id.as_str()).collect();
            format!(
                "; not judged: {} (hosts in different roles, too few fed alike)",
                ids.join(", ")
            )
        } else {
            String::new()
        };
        return Outcome::Passed(format!(
            "no host late in most phases: {} in {}{within}{unjudged}",
            count(phases as u64, "phase"),
            count(clean.len() as u64, "job")
        ));
    };
    // The cause as the evidence shows it: its QPs troubled where its peers' are not is the
    // network; a late start with its QPs quiet is the host (it computes longer); a late finish
    // with its QPs quiet cannot tell.
    let network = s.evidence > 0.0 && s.evidence >= 2.0 * s.peers_evidence;
    let cause = match (network, s.end) {
        (true, _) => "network",
        (false, End::Compute | End::Start | End::Held { .. }) => "host",
        (false, End::Finish | End::Sending) => "unknown",
    };
    let (what, unit) = match s.end {
        End::Compute => (
            "computes longest between its communication phases (its last send to its next first)",
            "iterations",
        ),
        End::Start => ("starts its communication phase last", "phases"),
        End::Finish => ("finishes its communication phase last", "phases"),
        End::Held { in_phase: false } => (
            "computes longest from the data it last received to its next send, among the hosts fed in the phase before",
            "phases",
        ),
        End::Held { in_phase: true } => (
            "holds longest between its inputs coming in and its own send, among the hosts fed in the phase",
            "phases",
        ),
        End::Sending => (
            "takes longest to send its part, among the hosts fed in the phase before",
            "phases",
        ),
    };
    let late_at = match s.end {
        End::Compute | End::Held { in_phase: false } => "compute",
        End::Start => "start",
        End::Finish => "finish",
        End::Held { in_phase: true } => "hold",
        End::Sending => "sending",
    };
    let flows: Vec<FlowRef> = job
        .qps
        .iter()
        .filter(|q| q.src_ip == s.host || q.dst_ip == s.host)
        .cloned()
        .collect();
    finding(
        ABOUT.name,
        Severity::Warning,
        &format!("A straggler in {}: {} (cause: {cause})", job.id, s.host),
        format!(
            "{} {what} in {} of {} {unit} of {} ({} hosts), {} beyond the median host on average; {:.1} CE marks, CNPs, NAKs and resends per phase on its QPs, {:.1} on each peer's",
            s.host,
            s.late,
            s.samples,
            job.id,
            job.hosts.len(),
            duration(s.mean_margin_ns),
            s.evidence,
            s.peers_evidence
        ),
        vec![
            ("job", job.id.clone().into()),
            ("host", s.host.to_string().into()),
            ("cause", cause.into()),
            ("late_in", late_at.into()),
            ("late_samples", (s.late as u64).into()),
            ("samples", (s.samples as u64).into()),
            ("mean_margin_ns", s.mean_margin_ns.into()),
            ("network_events_per_phase", s.evidence.into()),
            ("peers_network_events_per_phase", s.peers_evidence.into()),
        ],
        flows,
        match cause {
            "host" => "The host starts its part of each collective late while the network is quiet on its QPs: it computes longer than its peers (a slower GPU, thermal throttling, a noisy neighbour, an input pipeline stall, a different batch). The whole job waits for it every iteration.",
            "network" => "The host's QPs carry CE marks, CNPs, NAKs or resends its peers' do not: its link or path is congested or lossy. Check its NIC port, its leaf link, and `fabric` for the link its QPs share.",
            _ => "The host finishes last with its QPs quiet: it may wait on a peer or its receive side. Look at its peers' phases and its NIC's counters.",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, job_report, report, run};
    use crate::model::jobs::HostPhase;

    fn ip(n: u8) -> std::net::IpAddr {
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, n))
    }

    /// A job of `hosts` hosts over `phases` phases of 20 ms, 100 ms apart: each host starts at
    /// `start(phase, host)` ms into it, with `ce(phase, host)` CE marks.
    fn job(
        phases: usize,
        hosts: u8,
        start: impl Fn(usize, u8) -> u64,
        ce: impl Fn(usize, u8) -> u64,
    ) -> Report {
        let ms = 1_000_000;
        let phases = (0..phases)
            .map(|p| {
                let t0 = p as u64 * 100 * ms;
                Phase {
                    start_ns: t0,
                    end_ns: t0 + 30 * ms,
                    bytes: 1000,
                    hosts: (1..=hosts)
                        .map(|h| HostPhase {
                            ce: ce(p, h),
                            ..HostPhase::quiet(
                                ip(h),
                                t0 + start(p, h) * ms,
                                t0 + 20 * ms + start(p, h) * ms,
                                100,
                            )
                        })
                        .collect(),
                }
            })
            .collect();
        job_report((1..=hosts).map(ip).collect(), phases, 0, 0)
    }

    #[test]
    fn a_host_late_to_start_with_its_qps_quiet_is_the_host() {
        let r = job(10, 8, |p, h| if h == 3 && p != 4 { 8 } else { u64::from(h % 3) }, |_, _| 0);
        let f = fired(run(&JobStragglerRule, &r, &Thresholds::default()));
        assert_eq!(f.evidence["host"], "198.18.0.3");
        assert_eq!(f.evidence["cause"], "host");
        assert_eq!(f.evidence["late_in"], "start");
        assert_eq!(f.evidence["late_samples"], 9);
        assert_eq!(f.evidence["samples"], 10);
        assert_eq!(f.evidence["mean_margin_ns"], 6_500_000);
    }

    #[test]
    fn a_host_computing_longest_between_its_phases_is_the_host() {
        // As in a ring: the slow host finishes its part early (its peers wait for its data),
        // starts with them: its own gap from its last send to its next first is the longest.
        let mut r = job(8, 6, |_, h| u64::from(h % 2), |_, _| 0);
        for p in &mut r.jobs.as_mut().unwrap().jobs[0].phases {
            p.hosts[4].end_ns -= 9_000_000;
        }
        let f = fired(run(&JobStragglerRule, &r, &Thresholds::default()));
        assert_eq!(f.evidence["host"], "198.18.0.5");
        assert_eq!(f.evidence["late_in"], "compute");
        assert_eq!(f.evidence["cause"], "host");
        assert_eq!(f.evidence["samples"], 7);
    }

    #[test]
    fn a_host_late_with_its_qps_marked_is_the_network() {
        let r = job(
            6,
            4,
            |_, h| if h == 2 { 5 } else { 0 },
            |_, h| if h == 2 { 40 } else { 1 },
        );
        let f = fired(run(&JobStragglerRule, &r, &Thresholds::default()));
        assert_eq!(f.evidence["cause"], "network");
    }

    #[test]
    fn lateness_that_moves_from_host_to_host_is_no_straggler() {
        let r = job(12, 8, |p, h| if usize::from(h) == p % 8 + 1 { 5 } else { 0 }, |_, _| 0);
        assert!(matches!(
            run(&JobStragglerRule, &r, &Thresholds::default()),
            Outcome::Passed(n) if n == "no host late in most phases: 12 phases in 1 job"
        ));
    }

    #[test]
    fn jitter_and_a_few_late_samples_are_no_straggler() {
        // Late by 1 ms in phases of 30 (on 1 ms bins): under the two bins of the margin.
        let r = job(10, 8, |_, h| u64::from(h == 3), |_, _| 0);
        assert!(matches!(
            run(&JobStragglerRule, &r, &Thresholds::default()),
            Outcome::Passed(_)
        ));
        // Late in 4 of 5 phases of 8 hosts: 80%, but as likely as 1 in 900 by chance.
        let r = job(5, 8, |p, h| if h == 3 && p != 2 { 8 } else { 0 }, |_, _| 0);
        assert!(matches!(
            run(&JobStragglerRule, &r, &Thresholds::default()),
            Outcome::Passed(_)
        ));
        assert!((chance_at_least(4, 5, 0.125) - 0.001_098_6).abs() < 1e-6);
    }

    /// A job of roles: hosts 1 to 4 fed in the phase before (leaves: 60 ms of compute from
    /// their input, host 2's 70 ms), hosts 5 to 8 in the phase (holding 0 ms). Host 2 looks
    /// fed in the phase in four phases (its slowness lets a neighbour's data in first), and
    /// host 5 fed before in four others, 90 ms after its input: each keeps its class, those
    /// phases leave it out, and host 2 is named (judged phase by phase, host 5 would be late in
    /// four of its samples and host 2 in too few). The network cause is weighed against its
    /// class: host 2's few marks are more than its fellow leaves' none, the inner hosts' many
    /// are theirs.
    #[test]
    fn a_job_of_roles_is_judged_within_each_hosts_class() {
        let ms = 1_000_000;
        let ce = |_, h| match h {
            2 => 5,
            5..=8 => 50,
            _ => 0,
        };
        let mut r = job(16, 8, |_, h| if h > 4 { 10 } else { 0 }, ce);
        let j = &mut r.jobs.as_mut().unwrap().jobs[0];
        j.data_peers = Some((1, 3));
        for (i, p) in j.phases.iter_mut().enumerate() {
            for h in &mut p.hosts {
                let n = h.host.to_string().rsplit('.').next().unwrap().parse::<u8>().unwrap();
                // (The first phase's leaves were fed by nothing seen.)
                let (fed, in_phase) = match n {
                    2 if i % 4 == 1 => (Some(h.start_ns - ms), true),
                    2 => (h.start_ns.checked_sub(70 * ms).filter(|_| i > 0), false),
                    1..=4 => (h.start_ns.checked_sub(60 * ms).filter(|_| i > 0), false),
                    5 if i % 4 == 3 => (Some(h.start_ns - 90 * ms), false),
                    _ => (Some(h.start_ns), true),
                };
                h.fed_ns = fed;
                h.fed_in_phase = in_phase;
            }
        }
        let f = fired(run(&JobStragglerRule, &r, &Thresholds::default()));
        assert_eq!(f.evidence["host"], "198.18.0.2");
        assert_eq!(f.evidence["late_in"], "compute");
        assert_eq!(f.evidence["cause"], "network");
        assert_eq!(f.evidence["samples"], 15);
        assert_eq!(f.evidence["late_samples"], 11);
        assert_eq!(f.evidence["peers_network_events_per_phase"], 0.0);
    }

    #[test]
    fn too_few_phases_or_no_jobs_analysis_say_so() {
        let r = job(3, 8, |_, h| u64::from(h == 3) * 8, |_, _| 0);
        assert!(matches!(
            run(&JobStragglerRule, &r, &Thresholds::default()),
            Outcome::InsufficientData(n) if n.contains("none with 4 phases")
        ));
        assert!(matches!(
            run(&JobStragglerRule, &report(), &Thresholds::default()),
            Outcome::Skipped(n) if n.contains("--jobs")
        ));
    }
}
