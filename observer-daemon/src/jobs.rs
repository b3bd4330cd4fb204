//! The sidecar's training jobs (`run --capture DEV --jobs`): the capture's frames go through a
//! timeline with the jobs' fixed bins, as replay's do; at the first drain after each window
//! (`jobs_window`), the window's bins become jobs (`analysis::jobs`, the same analysis), the
//! job rules judge each job on its own, and the metrics take what they found. A job's series
//! are labelled by its hosts (`<lowest host>+<others>/<hash of the hosts>`, `#2`... for a
//! second job on the same hosts), matched from window to window by its hosts and QPs; at most
//! [`MAX_JOB_SERIES`] jobs are exported, and a job unseen for [`KEEP_WINDOWS`] windows goes.
//!
//! The window ends where the sidecar stopped looking, not at the last packet: a job silent
//! since is silent in the window (`job-hang` weighs it).

use roce_observer::{
    aggregate::{Aggregate, FrameObserver},
    analysis::{
        findings::{Context, Outcome, Thresholds, rules},
        jobs,
        series::{Timeline, TimelineConfig, TimelineEnd},
    },
    model::{
        Report, Source,
        findings::Finding,
        jobs::{Job, Jobs},
    },
};

use crate::config::JobsSettings;

/// Jobs exported as their own series, at most (others are counted in `roce_jobs_unexported`).
pub const MAX_JOB_SERIES: usize = 32;

/// Upper bounds of the iteration-time histogram's buckets (s): 1 ms to 65.536 s, doubling.
pub fn iteration_buckets() -> Vec<f64> {
    (0..17).map(|k| 0.001 * f64::from(1u32 << k)).collect()
}

/// What the capture thread feeds: the open window's timeline (none: jobs off), and when it
/// began (Unix ns).
#[derive(Debug, Default)]
pub struct JobsTap {
    pub timeline: Option<Timeline>,
    config: Option<TimelineConfig>,
    began_ns: u64,
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
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
            began_ns: unix_ns(),
        }
    }

    /// The open window's timeline and when it began, and a new one in its place.
    pub fn roll(&mut self) -> Option<(Timeline, u64)> {
        let fresh = self.config.clone().map(Timeline::new);
        let began = std::mem::replace(&mut self.began_ns, unix_ns());
        std::mem::replace(&mut self.timeline, fresh).map(|t| (t, began))
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

/// Windows a job's series stay after its last sighting (then they go, histogram too).
pub const KEEP_WINDOWS: u64 = 10;

/// One job's series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobRow {
    pub label: String,
    /// As of its last sighting: its hosts, its period (s) when it kept one; in the last
    /// window: the straggler named (host, cause) and its irregular iterations.
    pub hosts: usize,
    pub period_seconds: Option<f64>,
    pub straggler: Option<(String, String)>,
    /// job-hang fired by the last window's end with hosts missing from its last phase (a
    /// collective begun and waited on), and its periods without a phase by then.
    pub hung: bool,
    pub silent_periods: Option<f64>,
    pub irregular: u64,
    /// Iteration times over every window (cumulative): per bucket of [`iteration_buckets`]
    /// and +Inf, their sum (s) and count.
    pub buckets: Vec<u64>,
    pub sum_seconds: f64,
    pub count: u64,
    /// What matches a window's job to this row: its hosts and its QPs (destination, QPN).
    host_set: Vec<std::net::IpAddr>,
    qps: std::collections::BTreeSet<(std::net::IpAddr, u32)>,
    /// The job as last seen, judged again at each window's end while it is not seen.
    last_job: Option<Job>,
    last_window: u64,
}

/// The jobs' metrics, kept from window to window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobsView {
    pub rows: Vec<JobRow>,
    /// Jobs in the last window, and those it could not export (beyond [`MAX_JOB_SERIES`]).
    pub jobs: usize,
    pub unexported: usize,
    pub windows: u64,
}

/// A job's series label: `<lowest host>+<others>/<hash of its hosts>` (FNV-1a, 16 bits): the
/// same hosts give the same label in every window and on every sidecar.
fn base_label(hosts: &[std::net::IpAddr]) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for ip in hosts {
        for b in ip.to_string().bytes().chain([b',']) {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
    }
    match hosts.first() {
        Some(first) => format!(
            "{first}+{}/{:04x}",
            hosts.len().saturating_sub(1),
            (h ^ (h >> 16)) & 0xffff
        ),
        None => "none".to_string(),
    }
}

/// Runs the job rule `name` on `job` alone, against a window of `jobs`' bins.
fn judge(name: &str, job: &Job, jobs: &Jobs) -> Option<Finding> {
    let rule = rules().iter().find(|r| r.name() == name)?;
    let mut one: Report = Aggregate::default().report(Source::live(Vec::new(), "capture"), 0.0);
    one.jobs = Some(Jobs {
        jobs: vec![job.clone()],
        ..jobs.clone()
    });
    match rule.evaluate(&one, &Thresholds::default(), &Context::of(&one)) {
        Outcome::Fired(f) => Some(f),
        _ => None,
    }
}

fn evidence(f: &Finding, k: &str) -> String {
    f.evidence
        .get(k)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

/// Periods from `job`'s last phase's start to `end_ns`.
fn silent_periods(job: &Job, end_ns: u64) -> Option<f64> {
    let (p, last) = (job.period.as_ref()?, job.phases.last()?);
    Some(end_ns.saturating_sub(last.start_ns) as f64 / p.ns.max(1) as f64)
}

impl JobsView {
    /// A window that began at `began_ns` ended at `end_ns` (Unix ns): `end` is its
    /// timeline's, `kinds` the flows' (connected, carrying data). Its jobs are matched to
    /// their rows (the same hosts, most QPs in common first) and judged each on its own; the
    /// rows not seen are judged again at this window's end (a hang goes on), and go after
    /// [`KEEP_WINDOWS`] windows unseen (first when the rows are full).
    pub fn window(
        &mut self,
        end: TimelineEnd,
        kinds: &jobs::Kinds,
        (began_ns, end_ns): (u64, u64),
    ) {
        self.windows += 1;
        let window = self.windows;
        // A window without a frame has no bins, and no jobs: the rows are judged all the same.
        let mut found = match end.jobs {
            Some(bins) => {
                if bins.overflow {
                    tracing::warn!(
                        "a jobs window spans more than 100,000 bins: its jobs stop there (give a longer jobs_bin or a shorter jobs_window)"
                    );
                }
                jobs::of_kinds(kinds, bins, &Default::default())
            }
            None => Jobs {
                bin_ns: 0,
                start_ns: began_ns,
                end_ns,
                jobs: Vec::new(),
            },
        };
        // The sidecar watched until now, traffic or not.
        found.end_ns = found.end_ns.max(end_ns);
        self.jobs = found.jobs.len();
        self.unexported = 0;
        self.rows
            .retain(|r| window.saturating_sub(r.last_window) < KEEP_WINDOWS);
        let qps_of = |job: &Job| -> std::collections::BTreeSet<(std::net::IpAddr, u32)> {
            job.qps.iter().map(|q| (q.dst_ip, q.dest_qp)).collect()
        };
        // Rows for the jobs: first the pairs with QPs in common (most first), then any row of
        // the same hosts, then new rows.
        let mut row_of: Vec<Option<usize>> = vec![None; found.jobs.len()];
        let mut taken = vec![false; self.rows.len()];
        let mut pairs: Vec<(usize, usize, usize)> = Vec::new();
        for (j, job) in found.jobs.iter().enumerate() {
            let qps = qps_of(job);
            for (i, r) in self.rows.iter().enumerate() {
                if r.host_set == job.hosts {
                    pairs.push((r.qps.intersection(&qps).count(), j, i));
                }
            }
        }
        pairs.sort_by_key(|&(n, j, i)| (std::cmp::Reverse(n), j, i));
        for pass in [true, false] {
            for &(n, j, i) in &pairs {
                if (n > 0) == pass && row_of[j].is_none() && !taken[i] {
                    row_of[j] = Some(i);
                    taken[i] = true;
                }
            }
        }
        for (j, job) in found.jobs.iter().enumerate() {
            let at = match row_of[j] {
                Some(i) => i,
                None => {
                    if self.rows.len() >= MAX_JOB_SERIES {
                        // The row unseen longest gives way, if one is unseen.
                        let oldest = (0..self.rows.len())
                            .filter(|&i| !taken[i] && self.rows[i].last_window < window)
                            .min_by_key(|&i| self.rows[i].last_window);
                        match oldest {
                            Some(i) => {
                                self.rows.remove(i);
                                taken.remove(i);
                                for r in row_of.iter_mut().flatten() {
                                    if *r > i {
                                        *r -= 1;
                                    }
                                }
                            }
                            None => {
                                self.unexported += 1;
                                continue;
                            }
                        }
                    }
                    // The first free label of these hosts: `base`, `base#2`...
                    let base = base_label(&job.hosts);
                    let label = (1..)
                        .map(|k| {
                            if k == 1 {
                                base.clone()
                            } else {
                                format!("{base}#{k}")
                            }
                        })
                        .find(|l| self.rows.iter().all(|r| r.label != *l))
                        .expect("a free label");
                    self.rows.push(JobRow {
                        label,
                        buckets: vec![0; iteration_buckets().len() + 1],
                        host_set: job.hosts.clone(),
                        ..JobRow::default()
                    });
                    taken.push(true);
                    self.rows.len() - 1
                }
            };
            let row = &mut self.rows[at];
            row.qps = qps_of(job);
            row.last_window = window;
            row.hosts = job.hosts.len();
            row.period_seconds = job.period.as_ref().map(|p| p.ns as f64 / 1e9);
            row.straggler = judge("job-straggler", job, &found)
                .map(|f| (evidence(&f, "host"), evidence(&f, "cause")));
            row.hung = judge("job-hang", job, &found)
                .is_some_and(|f| !evidence(&f, "missing_hosts").is_empty());
            row.silent_periods = silent_periods(job, found.end_ns);
            row.irregular = judge("job-irregular-iteration", job, &found)
                .and_then(|f| {
                    f.evidence
                        .get("irregular_iterations")
                        .and_then(|v| v.as_u64())
                })
                .unwrap_or(0);
            // Iterations from a phase the window's start may have cut (traffic within 2 bins
            // of it) are left out.
            let bounds = iteration_buckets();
            let cut = began_ns.saturating_add(2 * found.bin_ns);
            for w in job.phases.windows(2) {
                if w[0].start_ns < cut {
                    continue;
                }
                let s = (w[1].start_ns - w[0].start_ns) as f64 / 1e9;
                let i = bounds.iter().position(|b| s <= *b).unwrap_or(bounds.len());
                row.buckets[i] += 1;
                row.sum_seconds += s;
                row.count += 1;
            }
            row.last_job = Some(job.clone());
        }
        // The rows not seen: judged again at this window's end.
        for r in self.rows.iter_mut().filter(|r| r.last_window != window) {
            r.straggler = None;
            r.irregular = 0;
            if let Some(job) = &r.last_job {
                r.hung = judge("job-hang", job, &found)
                    .is_some_and(|f| !evidence(&f, "missing_hosts").is_empty());
                r.silent_periods = silent_periods(job, found.end_ns);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_observer::source::synth;

    /// The frames of `scenarios` (the later ones shifted by `gap_ns` after the earlier end)
    /// through a jobs tap as the capture thread feeds it, then a window rolled at the end.
    fn window(view: &mut JobsView, scenarios: &[&str]) {
        let mut agg = Aggregate::default();
        let mut tap = JobsTap::new(Some(JobsSettings {
            bin: std::time::Duration::from_millis(1),
            window: std::time::Duration::from_secs(60),
        }));
        let began = tap.began_ns;
        // Frames in the past of `began` would be cut: start the scenarios after it.
        let mut at = began + 10_000_000;
        for name in scenarios {
            let w = synth::scenario(name).unwrap();
            let first = w.frames[0].ts_ns;
            for f in &w.frames {
                let ts = at + (f.ts_ns - first);
                tap.frame(0, ts, f.bytes.len() as u64, &agg);
                let _ = agg.push(&f.bytes, ts);
            }
            at += w.frames.last().unwrap().ts_ns - first + 10_000_000;
        }
        let (timeline, began) = tap.roll().unwrap();
        let end = timeline.finish(&agg);
        view.window(
            end,
            &jobs::kinds_of_aggregate(&agg),
            (began, at + 3_000_000_000),
        );
    }

    #[test]
    fn jobs_keep_their_series_and_labels_from_window_to_window() {
        let mut view = JobsView::default();
        window(&mut view, &["training-two-jobs"]);
        assert_eq!(view.jobs, 2);
        let labels: Vec<&str> = view.rows.iter().map(|r| r.label.as_str()).collect();
        // The same hosts: a label with a hash of them, and `#2`.
        assert!(labels[0].starts_with("198.18.86.1+7/"), "{labels:?}");
        assert_eq!(labels[1], format!("{}#2", labels[0]));
        let counts: Vec<u64> = view.rows.iter().map(|r| r.count).collect();
        // 17 and 11 iterations of the two rings.
        let mut sorted = counts.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [11, 17]);
        // The same two jobs again: the same rows (their QPs), their histograms growing.
        window(&mut view, &["training-two-jobs"]);
        assert_eq!(view.rows.len(), 2);
        let again: Vec<u64> = view.rows.iter().map(|r| r.count).collect();
        assert_eq!(again, counts.iter().map(|c| 2 * c).collect::<Vec<_>>());
        // A ring that hangs, then windows without a frame: judged at each window's end.
        window(&mut view, &["rule-job-hang"]);
        let hung = view
            .rows
            .iter()
            .find(|r| r.label.starts_with("198.18.85.1+7/"))
            .unwrap();
        assert!(hung.hung);
        let silent = hung.silent_periods.unwrap();
        view.window(
            TimelineEnd::default(),
            &Default::default(),
            (0, crate::jobs::unix_ns() + 60_000_000_000),
        );
        let hung = view
            .rows
            .iter()
            .find(|r| r.label.starts_with("198.18.85.1+7/"))
            .unwrap();
        assert!(
            hung.hung && hung.silent_periods.unwrap() > silent,
            "{hung:?}"
        );
        // Unseen for 10 windows, they go.
        for _ in 0..10 {
            view.window(TimelineEnd::default(), &Default::default(), (0, 0));
        }
        assert!(view.rows.is_empty(), "{:?}", view.rows);
        // Labels from the first free one again.
        window(&mut view, &["training-two-jobs"]);
        assert_eq!(view.rows[1].label, format!("{}#2", view.rows[0].label));
    }
}
