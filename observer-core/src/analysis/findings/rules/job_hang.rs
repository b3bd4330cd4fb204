//! A training job's hang: a job that kept a period goes silent for several of them, and for
//! longer than any iteration it had, while the wire is still watched (later packets of other
//! traffic show the observation went on); with the hosts missing from its last phase.

use serde::{Deserialize, Serialize};

use crate::units::{count, duration};
use crate::{
    analysis::findings::{Outcome, Severity, finding},
    model::{
        FlowRef, Report,
        jobs::{Job, Jobs},
    },
};

rule! {
    /// The rule ([`ABOUT`]): `job_hang` below, with its [`JobHang`] table.
    JobHangRule {
        name: "job-hang",
        summary: "a periodic training job silent for several periods while the wire is still watched (with the hosts missing from its last phase)",
        scenario: Some("rule-job-hang"),
        evaluate: |r, t, _ctx| {
            job_hang(r, &t.job_hang)
        },
    }
}

/// The `[job_hang]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobHang {
    /// Periods of silence, past the start its next phase was due, before a job is hung (it
    /// must also be silent longer than its longest iteration so far).
    pub min_silent_periods: f64,
}

impl Default for JobHang {
    fn default() -> Self {
        Self {
            min_silent_periods: 2.0,
        }
    }
}

/// A hung job: how long it has gone without a phase and without a packet, and who was missing.
struct Hang<'a> {
    job: &'a Job,
    period_ns: u64,
    /// From its last phase's start to the observation's end.
    since_phase_ns: u64,
    /// From its last packet (or its last phase's end) to the observation's end.
    silent_ns: u64,
    /// Hosts that send in most of its phases but not in the last one.
    missing: Vec<std::net::IpAddr>,
    /// The last phase's bytes beside the median phase's.
    last_bytes: u64,
    median_bytes: u64,
}

fn hang<'a>(job: &'a Job, jobs: &Jobs, c: &JobHang) -> Result<Option<Hang<'a>>, ()> {
    let (Some(period), Some(last)) = (&job.period, job.phases.last()) else {
        return Err(());
    };
    let since_phase_ns = jobs.end_ns.saturating_sub(last.start_ns);
    // Quiet since its last packet for a period at least: a long last phase running to the end
    // of the observation is no silence.
    let silent_ns = jobs
        .end_ns
        .saturating_sub(job.last_packet_ns.max(last.end_ns));
    let longest = job
        .phases
        .windows(2)
        .map(|w| w[1].start_ns - w[0].start_ns)
        .max()
        .unwrap_or(0);
    let due = period.ns as f64 * (1.0 + c.min_silent_periods);
    if (since_phase_ns as f64) < due || since_phase_ns <= longest || silent_ns < period.ns {
        return Ok(None);
    }
    let phases = job.phases.len();
    let missing = job
        .hosts
        .iter()
        .filter(|h| {
            let sent = job
                .phases
                .iter()
                .filter(|p| p.hosts.iter().any(|x| x.host == **h))
                .count();
            2 * sent > phases && !last.hosts.iter().any(|x| x.host == **h)
        })
        .copied()
        .collect();
    let bytes: Vec<u64> = job.phases.iter().map(|p| p.bytes).collect();
    Ok(Some(Hang {
        job,
        period_ns: period.ns,
        since_phase_ns,
        silent_ns,
        missing,
        last_bytes: last.bytes,
        median_bytes: crate::analysis::jobs::median(&bytes),
    }))
}

fn job_hang(r: &Report, c: &JobHang) -> Outcome {
    let Some(jobs) = &r.jobs else {
        return Outcome::Skipped("no jobs analysis: give --jobs (replay, or diagnose --capture)".into());
    };
    let mut periodic = 0;
    let mut hung = Vec::new();
    for j in &jobs.jobs {
        if let Ok(h) = hang(j, jobs, c) {
            periodic += 1;
            hung.extend(h);
        }
    }
    if periodic == 0 {
        return Outcome::InsufficientData(format!(
            "{}, none with a period: a hang is silence for periods",
            count(jobs.jobs.len() as u64, "job")
        ));
    }
    // Ranks missing from a begun collective first, then the longest silence.
    hung.sort_by_key(|h| (h.missing.is_empty(), std::cmp::Reverse(h.since_phase_ns)));
    let Some(h) = hung.first() else {
        return Outcome::Passed(format!(
            "{} with a period, each with a phase within {:.0} periods of the observation's end or silent no longer than an iteration it had",
            count(periodic as u64, "job"),
            1.0 + c.min_silent_periods
        ));
    };
    let periods = h.since_phase_ns as f64 / h.period_ns.max(1) as f64;
    let last = h.job.phases.last().expect("a job with a period has phases");
    let others = match hung.len() {
        1 => String::new(),
        n => format!(" ({} more hung)", n - 1),
    };
    let missing: Vec<String> = h.missing.iter().map(ToString::to_string).collect();
    // Ranks missing from a begun collective are a hang; a whole last phase may be the end.
    let severity = if missing.is_empty() {
        Severity::Warning
    } else {
        Severity::Critical
    };
    let (title, how, hint) = if missing.is_empty() {
        (
            format!("{} without a phase for {periods:.1} periods", h.job.id),
            format!(
                "its last phase whole ({} of {} bytes of its median phase, every host): it hung between iterations, or ended (the wire shows no teardown)",
                h.last_bytes, h.median_bytes
            ),
            "Every host stopped after a whole phase: the job ended, crashed, or all its ranks wait on something outside the network (storage, a barrier on another fabric). Check the job's state and its ranks' logs.",
        )
    } else {
        (
            format!(
                "{} hung: {} missing from its last phase",
                h.job.id,
                missing.join(", ")
            ),
            format!(
                "{} sent nothing in its last phase ({} of its median phase's {} bytes): its peers began the collective and wait for {}",
                missing.join(", "),
                h.last_bytes,
                h.median_bytes,
                if missing.len() == 1 { "it" } else { "them" }
            ),
            "The ranks on the missing hosts never joined the collective: they are stuck in compute, in the data loader, or dead (a GPU fault, an OOM kill). Look at those hosts first (their processes' stacks, dmesg, GPU health); the others are waiting for them.",
        )
    };
    // The missing hosts' QPs, or (none missing) the job's.
    let flows: Vec<FlowRef> = h
        .job
        .qps
        .iter()
        .filter(|q| {
            h.missing.is_empty()
                || h.missing.contains(&q.src_ip)
                || h.missing.contains(&q.dst_ip)
        })
        .cloned()
        .collect();
    finding(
        ABOUT.name,
        severity,
        &title,
        format!(
            "{} ({} hosts, period {}) without a phase for {} since its last began ({periods:.1} periods, longer than any iteration it had), silent for {} since its last packet, while the wire was watched; {how}{others}",
            h.job.id,
            h.job.hosts.len(),
            duration(h.period_ns),
            duration(h.since_phase_ns),
            duration(h.silent_ns),
        ),
        vec![
            ("job", h.job.id.clone().into()),
            ("period_ns", h.period_ns.into()),
            ("since_last_phase_ns", h.since_phase_ns.into()),
            ("silent_ns", h.silent_ns.into()),
            ("silent_periods", periods.into()),
            ("last_phase_start_ns", last.start_ns.into()),
            ("last_packet_ns", h.job.last_packet_ns.into()),
            ("observed_until_ns", jobs.end_ns.into()),
            ("missing_hosts", missing.join(",").into()),
            ("last_phase_hosts", (last.hosts.len() as u64).into()),
            ("last_phase_bytes", h.last_bytes.into()),
            ("median_phase_bytes", h.median_bytes.into()),
            ("hung_jobs", (hung.len() as u64).into()),
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
    use crate::model::jobs::{HostPhase, Phase};

    const MS: u64 = 1_000_000;

    fn ip(n: u8) -> std::net::IpAddr {
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, n))
    }

    /// A job of 4 hosts with a phase every 100 ms, `phases` of them, the last one sent by
    /// `last_hosts`; the wire watched until `end_ms`.
    fn job(phases: u64, last_hosts: &[u8], end_ms: u64) -> Report {
        let phases: Vec<Phase> = (0..phases)
            .map(|p| {
                let hosts: Vec<u8> = if p + 1 == phases {
                    last_hosts.to_vec()
                } else {
                    vec![1, 2, 3, 4]
                };
                Phase {
                    start_ns: p * 100 * MS,
                    end_ns: p * 100 * MS + 20 * MS,
                    bytes: 100 * hosts.len() as u64,
                    hosts: hosts
                        .iter()
                        .map(|h| {
                            HostPhase::quiet(ip(*h), p * 100 * MS, p * 100 * MS + 20 * MS, 100)
                        })
                        .collect(),
                }
            })
            .collect();
        job_report((1..=4).map(ip).collect(), phases, 100 * MS, end_ms * MS)
    }

    #[test]
    fn a_job_silent_for_three_periods_after_a_partial_phase_hung_on_the_missing_host() {
        // The last phase began at 500 ms; three periods later is 800 ms.
        let r = job(6, &[1, 2, 4], 800);
        let f = fired(run(&JobHangRule, &r, &Thresholds::default()));
        assert_eq!(f.evidence["missing_hosts"], "198.18.0.3");
        assert_eq!(f.evidence["since_last_phase_ns"], 300 * MS);
        assert_eq!(f.evidence["silent_ns"], 280 * MS);
        assert_eq!(f.severity, Severity::Critical);
        assert!(f.title.contains("198.18.0.3 missing"), "{}", f.title);
        // A whole last phase: hung or ended, the wire cannot tell which.
        let f = fired(run(&JobHangRule, &job(6, &[1, 2, 3, 4], 900), &Thresholds::default()));
        assert_eq!(f.evidence["missing_hosts"], "");
        assert!(f.summary.contains("or ended"), "{}", f.summary);
        assert_eq!(f.severity, Severity::Warning);
    }

    #[test]
    fn a_job_active_near_the_end_or_with_no_period_is_no_hang() {
        assert!(matches!(
            run(&JobHangRule, &job(6, &[1, 2, 4], 790), &Thresholds::default()),
            Outcome::Passed(n) if n.starts_with("1 job with a period, each with a phase within 3 periods")
        ));
        // A last phase that runs to the observation's end (its packets until then) is no
        // silence, however long ago it began.
        let mut r = job(6, &[1, 2, 4], 900);
        r.jobs.as_mut().unwrap().jobs[0].last_packet_ns = 850 * MS;
        assert!(matches!(
            run(&JobHangRule, &r, &Thresholds::default()),
            Outcome::Passed(_)
        ));
        let mut r = job(6, &[1, 2, 4], 900);
        r.jobs.as_mut().unwrap().jobs[0].period = None;
        assert!(matches!(
            run(&JobHangRule, &r, &Thresholds::default()),
            Outcome::InsufficientData(n) if n.contains("none with a period")
        ));
        assert!(matches!(
            run(&JobHangRule, &report(), &Thresholds::default()),
            Outcome::Skipped(n) if n.contains("--jobs")
        ));
    }

    #[test]
    fn a_silence_no_longer_than_an_iteration_the_job_had_is_no_hang() {
        // An iteration of 450 ms before its fifth phase (a checkpoint): a silence of 400 ms
        // since its last phase (at 850 ms) is no hang, one of 500 ms is.
        let mut r = job(6, &[1, 2, 3, 4], 1250);
        let j = &mut r.jobs.as_mut().unwrap().jobs[0];
        for p in &mut j.phases[4..] {
            p.start_ns += 350 * MS;
            p.end_ns += 350 * MS;
        }
        assert!(matches!(
            run(&JobHangRule, &r, &Thresholds::default()),
            Outcome::Passed(_)
        ));
        r.jobs.as_mut().unwrap().end_ns = 1350 * MS;
        let f = fired(run(&JobHangRule, &r, &Thresholds::default()));
        assert_eq!(f.evidence["since_last_phase_ns"], 500 * MS);
    }
}
