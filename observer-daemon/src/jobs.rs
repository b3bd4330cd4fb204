//! The sidecar's training jobs (`run --capture DEV --jobs`): the capture's frames go through a
//! timeline with the jobs' fixed bins, as replay's do; at the first drain after each window
//! (`jobs_window`), the window's bins become jobs (`analysis::jobs`, the same analysis), the
//! job rules judge each job on its own, and the metrics take what they found. A job's series
//! are labelled by its hosts (`<lowest host>+<others>`, `#2`... for a second job on the same
//! hosts), which stays the same from window to window while its hosts do; at most
//! [`MAX_JOB_SERIES`] jobs are exported.
//!
//! The window ends where the sidecar stopped looking, not at the last packet: a job silent
//! since is silent in the window (`job-hang` weighs it).

use std::collections::BTreeMap;

use roce_observer::{
    aggregate::{Aggregate, FrameObserver},
    analysis::{
        findings::{Outcome, Thresholds, rules},
        jobs,
        series::{Timeline, TimelineConfig, TimelineEnd},
    },
    model::{Report, Source},
};

use crate::config::JobsSettings;

/// Jobs exported as their own series, at most (others are counted in `roce_jobs_unexported`).
pub const MAX_JOB_SERIES: usize = 32;

/// Upper bounds of the iteration-time histogram's buckets (s): 1 ms to 65.536 s, doubling.
pub fn iteration_buckets() -> Vec<f64> {
    (0..17).map(|k| 0.001 * f64::from(1u32 << k)).collect()
}

/// What the capture thread feeds: the open window's timeline (none: jobs off).
#[derive(Debug, Default)]
pub struct JobsTap {
    pub timeline: Option<Timeline>,
    config: Option<TimelineConfig>,
}

impl JobsTap {
    pub fn new(settings: Option<JobsSettings>) -> Self {
        let config = settings.map(|s| TimelineConfig {
            // One interval per window: the series are not what is wanted here.
            interval_ns: s.window.as_nanos() as u64,
            fitted: false,
            slot_ns: 0,
            link_speed_bps: None,
            threshold_percent: 90.0,
            series_flows: 0,
            jobs_bin_ns: s.bin.as_nanos() as u64,
        });
        Self {
            timeline: config.clone().map(Timeline::new),
            config,
        }
    }

    /// The open window's timeline, and a new one in its place.
    pub fn roll(&mut self) -> Option<Timeline> {
        let fresh = self.config.clone().map(Timeline::new);
        std::mem::replace(&mut self.timeline, fresh)
    }
}

impl FrameObserver for JobsTap {
    fn begin_source(&mut self, name: &str) {
        if let Some(t) = &mut self.timeline {
            t.begin_source(name);
        }
    }

    fn frame(&mut self, source: usize, ts_ns: u64, len: u64, flows: &Aggregate) {
        if let Some(t) = &mut self.timeline {
            t.frame(source, ts_ns, len, flows);
        }
    }
}

/// One job's series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobRow {
    pub label: String,
    /// In the last window: its hosts, its period (s) when it kept one, the straggler named
    /// (host, cause), whether it hung, its irregular iterations.
    pub hosts: usize,
    pub period_seconds: Option<f64>,
    pub straggler: Option<(String, String)>,
    /// job-hang fired with hosts missing from its last phase (a collective begun and waited
    /// on), and its periods without a phase by the window's end.
    pub hung: bool,
    pub silent_periods: Option<f64>,
    pub irregular: u64,
    /// Seen in the last window.
    pub current: bool,
    /// Iteration times over every window (cumulative): per bucket of [`iteration_buckets`]
    /// and +Inf, their sum (s) and count.
    pub buckets: Vec<u64>,
    pub sum_seconds: f64,
    pub count: u64,
}

/// The jobs' metrics, kept from window to window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobsView {
    pub rows: Vec<JobRow>,
    /// Jobs in the last window, and those beyond [`MAX_JOB_SERIES`].
    pub jobs: usize,
    pub unexported: usize,
    pub windows: u64,
}

/// The series label of each job: `<lowest host>+<others>`, with `#2`... for a second job on
/// the same hosts (jobs in order of first traffic).
fn labels(jobs: &[roce_observer::model::jobs::Job]) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    jobs.iter()
        .map(|j| {
            let base = match j.hosts.first() {
                Some(h) => format!("{h}+{}", j.hosts.len().saturating_sub(1)),
                None => "none".to_string(),
            };
            let n = seen.entry(base.clone()).or_default();
            *n += 1;
            if *n == 1 { base } else { format!("{base}#{n}") }
        })
        .collect()
}

impl JobsView {
    /// A window ended at `end_ns` (Unix ns): `end` is its timeline's, `agg` the flow table
    /// then. Its jobs are judged each on its own (so each job's straggler is named).
    pub fn window(&mut self, end: TimelineEnd, agg: &Aggregate, end_ns: u64, device: &str) {
        self.windows += 1;
        for r in &mut self.rows {
            r.current = false;
        }
        let Some(bins) = end.jobs else {
            self.jobs = 0;
            self.unexported = 0;
            return;
        };
        let report = agg.report(Source::live(vec![device.to_string()], "capture"), 0.0);
        let mut found = jobs::of_report(&report, bins, &Default::default());
        // The sidecar watched until now, traffic or not.
        found.end_ns = found.end_ns.max(end_ns);
        let names = labels(&found.jobs);
        self.jobs = found.jobs.len();
        self.unexported = 0;
        let t = Thresholds::default();
        for (job, label) in found.jobs.iter().zip(names) {
            let at = match self.rows.iter().position(|r| r.label == label) {
                Some(i) => i,
                None if self.rows.len() < MAX_JOB_SERIES => {
                    self.rows.push(JobRow {
                        label: label.clone(),
                        buckets: vec![0; iteration_buckets().len() + 1],
                        ..JobRow::default()
                    });
                    self.rows.len() - 1
                }
                None => {
                    self.unexported += 1;
                    continue;
                }
            };
            let one = Report {
                jobs: Some(roce_observer::model::jobs::Jobs {
                    jobs: vec![job.clone()],
                    ..found.clone()
                }),
                ..report.clone()
            };
            let fired = |name: &str| -> Option<roce_observer::model::findings::Finding> {
                let rule = rules().iter().find(|r| r.name() == name)?;
                match rule.evaluate(
                    &one,
                    &t,
                    &roce_observer::analysis::findings::Context::of(&one),
                ) {
                    Outcome::Fired(f) => Some(f),
                    _ => None,
                }
            };
            let evidence = |f: &roce_observer::model::findings::Finding, k: &str| {
                f.evidence
                    .get(k)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            let row = &mut self.rows[at];
            row.current = true;
            row.hosts = job.hosts.len();
            row.period_seconds = job.period.as_ref().map(|p| p.ns as f64 / 1e9);
            row.straggler =
                fired("job-straggler").map(|f| (evidence(&f, "host"), evidence(&f, "cause")));
            row.hung = fired("job-hang").is_some_and(|f| !evidence(&f, "missing_hosts").is_empty());
            row.silent_periods = match (&job.period, job.phases.last()) {
                (Some(p), Some(last)) => {
                    Some(found.end_ns.saturating_sub(last.start_ns) as f64 / p.ns.max(1) as f64)
                }
                _ => None,
            };
            row.irregular = fired("job-irregular-iteration")
                .and_then(|f| {
                    f.evidence
                        .get("irregular_iterations")
                        .and_then(|v| v.as_u64())
                })
                .unwrap_or(0);
            let bounds = iteration_buckets();
            for w in job.phases.windows(2) {
                let s = (w[1].start_ns - w[0].start_ns) as f64 / 1e9;
                let i = bounds.iter().position(|b| s <= *b).unwrap_or(bounds.len());
                row.buckets[i] += 1;
                row.sum_seconds += s;
                row.count += 1;
            }
        }
    }
}
