//! Training jobs (`run --capture DEV --jobs`), one series per job (at most 32), labelled by its
//! hosts: `job="<lowest host>+<others>"` (docs/jobs.md).

#[allow(unused_imports)]
use super::{Family, Kind, Unit};

pub static JOBS: Family = Family::new(
    "roce_jobs",
    Kind::Gauge,
    None,
    "Training jobs (hosts joined by RC traffic, kept apart by their QPs' activity) in the last jobs window",
    &[],
);

pub static UNEXPORTED: Family = Family::new(
    "roce_jobs_unexported",
    Kind::Gauge,
    None,
    "Jobs of the last window beyond the 32 exported as their own series",
    &[],
);

pub static WINDOWS: Family = Family::new(
    "roce_job_windows",
    Kind::Counter,
    None,
    "Jobs windows analysed (each covers jobs_window; the gauges below are the last one's)",
    &[],
);

pub static HOSTS: Family = Family::new(
    "roce_job_hosts",
    Kind::Gauge,
    None,
    "A job's hosts in the last window (present while the job was seen in it)",
    &["training_job"],
);

pub static PERIOD: Family = Family::new(
    "roce_job_period",
    Kind::Gauge,
    Some(Unit::Seconds),
    "A job's iteration period in the last window (present when its phases kept one)",
    &["training_job"],
);

pub static ITERATION: Family = Family::new(
    "roce_job_iteration",
    Kind::Histogram,
    Some(Unit::Seconds),
    "A job's iteration times (one communication phase's start to the next's), over every window",
    &["training_job"],
);

pub static STRAGGLER: Family = Family::new(
    "roce_job_straggler",
    Kind::Gauge,
    None,
    "1 for the host job-straggler named in a job in the last window, with its cause (host, network, unknown); absent when none",
    &["training_job", "host", "cause"],
);

pub static HUNG: Family = Family::new(
    "roce_job_hung",
    Kind::Gauge,
    None,
    "1 when job-hang found the job silent for three periods by the last window's end with hosts missing from its last phase (a collective begun and waited on), else 0",
    &["training_job"],
);

pub static SILENT: Family = Family::new(
    "roce_job_silent_periods",
    Kind::Gauge,
    None,
    "Periods from a job's last phase's start to the last window's end (a job that ended shows it once; one that hangs, growing)",
    &["training_job"],
);

pub static IRREGULAR: Family = Family::new(
    "roce_job_irregular_iterations",
    Kind::Gauge,
    None,
    "A job's iterations in the last window over its period by half or more (job-irregular-iteration)",
    &["training_job"],
);

/// Every family of this subject.
pub fn all() -> Vec<Family> {
    vec![
        JOBS.clone(),
        UNEXPORTED.clone(),
        WINDOWS.clone(),
        HOSTS.clone(),
        PERIOD.clone(),
        ITERATION.clone(),
        STRAGGLER.clone(),
        HUNG.clone(),
        SILENT.clone(),
        IRREGULAR.clone(),
    ]
}
