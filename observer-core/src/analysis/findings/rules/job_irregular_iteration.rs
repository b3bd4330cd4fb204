//! A training job's irregular iteration: one much longer than the job's period, with where the
//! extra time went (its communication phase, or the compute gap after it) and what the network
//! showed during it beside a usual phase.

use serde::{Deserialize, Serialize};

use crate::analysis::jobs::median;
use crate::units::{count, duration};
use crate::{
    analysis::findings::{Outcome, Severity, finding},
    model::{
        FlowRef, Report,
        jobs::{Job, Phase},
    },
};

rule! {
    /// The rule ([`ABOUT`]): `job_irregular_iteration` below, with its
    /// [`JobIrregularIteration`] table.
    JobIrregularIterationRule {
        name: "job-irregular-iteration",
        summary: "a training job's iteration much longer than its period (with where the time went and what the network showed then)",
        scenario: Some("rule-job-irregular-iteration"),
        evaluate: |r, t, _ctx| {
            job_irregular_iteration(r, &t.job_irregular_iteration)
        },
    }
}

/// The `[job_irregular_iteration]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobIrregularIteration {
    /// Iterations a job with a period needs (at least) before one can be irregular.
    pub min_iterations: usize,
    /// How much longer than the period an iteration must be, in percent of it...
    pub min_excess_percent: f64,
    /// ...and in bins of the jobs' grid.
    pub min_excess_bins: u64,
    /// The network's events (CE marks, CNPs, NAKs, resends) in its phase, as a multiple of a
    /// usual phase's, for the network to be the cause...
    pub min_network_ratio: f64,
    /// ...and at least this many (counted at both ends of each QP): a mark or two is not a
    /// cause.
    pub min_network_events: u64,
}

impl Default for JobIrregularIteration {
    fn default() -> Self {
        Self {
            min_iterations: 5,
            min_excess_percent: 50.0,
            min_excess_bins: 2,
            min_network_ratio: 2.0,
            min_network_events: 10,
        }
    }
}

/// CE marks, CNPs, NAKs and resends on a phase's QPs (each QP's counted at both its ends).
fn events(p: &Phase) -> u64 {
    p.hosts
        .iter()
        .map(crate::model::jobs::HostPhase::events)
        .sum()
}


/// One job's irregular iterations (by their first phase's index), the longest first.
fn irregular(job: &Job, bin_ns: u64, c: &JobIrregularIteration) -> Option<Vec<usize>> {
    let period = job.period.as_ref()?;
    if job.phases.len().saturating_sub(1) < c.min_iterations.max(1) {
        return None;
    }
    let over = (period.ns as f64 * c.min_excess_percent / 100.0)
        .max((c.min_excess_bins.max(1) * bin_ns) as f64);
    let mut long: Vec<(u64, usize)> = job
        .phases
        .windows(2)
        .enumerate()
        .map(|(i, w)| (w[1].start_ns - w[0].start_ns, i))
        .filter(|(t, _)| *t as f64 >= period.ns as f64 + over)
        .collect();
    long.sort_by_key(|(t, i)| (std::cmp::Reverse(*t), *i));
    Some(long.into_iter().map(|(_, i)| i).collect())
}

fn job_irregular_iteration(r: &Report, c: &JobIrregularIteration) -> Outcome {
    let Some(jobs) = &r.jobs else {
        return Outcome::Skipped("no jobs analysis: give --jobs (replay, or diagnose --capture)".into());
    };
    let judged: Vec<(&Job, Vec<usize>)> = jobs
        .jobs
        .iter()
        .filter_map(|j| irregular(j, jobs.bin_ns, c).map(|i| (j, i)))
        .collect();
    if judged.is_empty() {
        return Outcome::InsufficientData(format!(
            "{}, none with a period and {} iterations",
            count(jobs.jobs.len() as u64, "job"),
            c.min_iterations
        ));
    }
    let Some((job, long)) = judged.iter().find(|(_, l)| !l.is_empty()) else {
        let iterations: usize = judged.iter().map(|(j, _)| j.phases.len() - 1).sum();
        return Outcome::Passed(format!(
            "no iteration {:.0}% over its job's period: {} in {}",
            c.min_excess_percent,
            count(iterations as u64, "iteration"),
            count(judged.len() as u64, "job")
        ));
    };
    let period = job.period.as_ref().expect("judged jobs have a period").ns;
    let i = long[0];
    let (this, next) = (&job.phases[i], &job.phases[i + 1]);
    let time = next.start_ns - this.start_ns;
    // Where the time went: its phase beside the usual phase, the gap after it beside the usual
    // gap.
    let usual_phase = median(&job.phases.iter().map(|p| p.end_ns - p.start_ns).collect::<Vec<_>>());
    let usual_gap = median(
        &job.phases
            .windows(2)
            .map(|w| w[1].start_ns.saturating_sub(w[0].end_ns))
            .collect::<Vec<_>>(),
    );
    let phase_len = this.end_ns - this.start_ns;
    let gap = next.start_ns.saturating_sub(this.end_ns);
    let in_phase = phase_len.saturating_sub(usual_phase) >= gap.saturating_sub(usual_gap);
    let (seen, usual) = (
        events(this),
        median(&job.phases.iter().map(events).collect::<Vec<_>>()),
    );
    let network =
        seen >= c.min_network_events.max(1) && seen as f64 >= c.min_network_ratio * usual as f64;
    let cause = match (in_phase, network) {
        (true, true) => "network",
        (true, false) => "unknown",
        (false, _) => "compute",
    };
    let (severity, hint) = match cause {
        "network" => (
            Severity::Warning,
            "Its communication phase took longer while its QPs showed CE marks, CNPs, NAKs or resends well beyond a usual phase's: congestion or loss slowed this collective. See `fabric` and the flows named for the link, and the other traffic at that time.",
        ),
        "compute" => (
            Severity::Info,
            "The time went to the compute gap, not the collective: a checkpoint, an evaluation, a data-loader or storage stall, or a host's hiccup. If it repeats at a fixed number of iterations it is likely planned work.",
        ),
        _ => (
            Severity::Info,
            "Its communication phase took longer with the network quiet on its QPs: a rank late to join a step, or a collective larger than usual. Compare its hosts' starts in that phase.",
        ),
    };
    let hosts: std::collections::BTreeSet<std::net::IpAddr> =
        this.hosts.iter().map(|h| h.host).collect();
    let flows: Vec<FlowRef> = job
        .qps
        .iter()
        .filter(|q| hosts.contains(&q.src_ip))
        .cloned()
        .collect();
    let more = match long.len() {
        1 => String::new(),
        n => format!(" ({} more of {} iterations)", n - 1, job.phases.len() - 1),
    };
    finding(
        ABOUT.name,
        severity,
        &format!(
            "An irregular iteration in {}: {} against a period of {} (cause: {cause})",
            job.id,
            duration(time),
            duration(period)
        ),
        format!(
            "{}'s iteration {} ({} after its first phase) took {} ({:.1}x its period){more}: its communication phase {} (usually {}), the compute after it {} (usually {}); {seen} CE marks, CNPs, NAKs and resends on its QPs in the phase (counted at both ends), {usual} in a usual one",
            job.id,
            i + 1,
            duration(this.start_ns.saturating_sub(job.first_ns)),
            duration(time),
            time as f64 / period.max(1) as f64,
            duration(phase_len),
            duration(usual_phase),
            duration(gap),
            duration(usual_gap),
        ),
        vec![
            ("job", job.id.clone().into()),
            ("cause", cause.into()),
            ("iteration_start_ns", this.start_ns.into()),
            ("iteration_ns", time.into()),
            ("period_ns", period.into()),
            ("irregular_iterations", (long.len() as u64).into()),
            ("iterations", ((job.phases.len() - 1) as u64).into()),
            ("phase_ns", phase_len.into()),
            ("usual_phase_ns", usual_phase.into()),
            ("gap_ns", gap.into()),
            ("usual_gap_ns", usual_gap.into()),
            ("network_events", seen.into()),
            ("usual_network_events", usual.into()),
        ],
        flows,
        hint,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, job_report, report, run};
    use crate::model::jobs::HostPhase;

    const MS: u64 = 1_000_000;

    /// A job of 4 hosts, 10 phases of `phase(i)` ms, each followed by `gap(i)` ms of compute,
    /// with `ce(i)` CE marks per host in phase i; its period 100 ms.
    fn job(phase: impl Fn(usize) -> u64, gap: impl Fn(usize) -> u64, ce: impl Fn(usize) -> u64) -> Report {
        let mut at = 0;
        let phases: Vec<Phase> = (0..10)
            .map(|i| {
                let (start, end) = (at, at + phase(i) * MS);
                at = end + gap(i) * MS;
                Phase {
                    start_ns: start,
                    end_ns: end,
                    bytes: 400,
                    hosts: (1..=4)
                        .map(|h| HostPhase {
                            ce: ce(i),
                            ..HostPhase::quiet(
                                std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, h)),
                                start,
                                end,
                                100,
                            )
                        })
                        .collect(),
                }
            })
            .collect();
        job_report(Vec::new(), phases, 100 * MS, at)
    }

    #[test]
    fn a_long_phase_with_the_network_marked_is_the_network() {
        let r = job(|i| if i == 4 { 90 } else { 20 }, |_| 80, |i| if i == 4 { 30 } else { 1 });
        let f = fired(run(&JobIrregularIterationRule, &r, &Thresholds::default()));
        assert_eq!(f.evidence["cause"], "network");
        assert_eq!(f.evidence["iteration_ns"], 170 * MS);
        assert_eq!(f.evidence["iteration_start_ns"], 400 * MS);
        assert_eq!(f.evidence["network_events"], 120);
        assert_eq!(f.evidence["usual_network_events"], 4);
        assert_eq!(f.severity, Severity::Warning);
    }

    #[test]
    fn a_long_compute_gap_is_compute_and_a_quiet_long_phase_unknown() {
        let r = job(|_| 20, |i| if i == 6 { 300 } else { 80 }, |_| 0);
        let f = fired(run(&JobIrregularIterationRule, &r, &Thresholds::default()));
        assert_eq!(f.evidence["cause"], "compute");
        assert_eq!(f.severity, Severity::Info);
        let r = job(|i| if i == 2 { 90 } else { 20 }, |_| 80, |_| 1);
        let f = fired(run(&JobIrregularIterationRule, &r, &Thresholds::default()));
        assert_eq!(f.evidence["cause"], "unknown");
    }

    #[test]
    fn jitter_is_regular_and_too_few_iterations_say_so() {
        // 40% over the period at most.
        let r = job(|_| 20, |i| 80 + (i as u64 % 3) * 20, |_| 0);
        assert!(matches!(
            run(&JobIrregularIterationRule, &r, &Thresholds::default()),
            Outcome::Passed(n) if n == "no iteration 50% over its job's period: 9 iterations in 1 job"
        ));
        let mut r = job(|_| 20, |_| 80, |_| 0);
        r.jobs.as_mut().unwrap().jobs[0].phases.truncate(5);
        assert!(matches!(
            run(&JobIrregularIterationRule, &r, &Thresholds::default()),
            Outcome::InsufficientData(n) if n.contains("none with a period and 5 iterations")
        ));
        assert!(matches!(
            run(&JobIrregularIterationRule, &report(), &Thresholds::default()),
            Outcome::Skipped(n) if n.contains("--jobs")
        ));
    }
}
