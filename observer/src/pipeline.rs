//! How a report is made, whatever asks for it (the CLI, the tests): a source's frames through
//! the aggregate into a [`Report`], then the time series and microbursts, the link speed, the
//! ECMP model and the findings.
//!
//! - [`replay_report`]: capture files, read to the end.
//! - [`LiveSession`]: the kernel programs attached to interfaces for a while, their maps and
//!   microburst rings sampled as time goes on, then detached and reported.
//! - [`CaptureSession`]: a device captured through libpcap for a while (an RDMA device's
//!   offloaded-traffic sniffer, or a network interface), its frames through the parser and the
//!   aggregate as replay's, then reported.
//!
//! Nothing here prints: warnings go to `report.source.warnings`, and the caller says what it
//! likes about them.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use crate::{
    analysis::{
        ecmp::EcmpOptions,
        findings::{self, Thresholds},
        series::{
            DEFAULT_INTERVAL_NS, DEFAULT_SLOT_NS, MAX_INTERVALS, SERIES_FLOWS, Timeline,
            TimelineConfig, TimelineEnd,
        },
    },
    model::{CaptureCounts, CaptureSource, Direction, Report, Source},
    source::{
        capture::{Capture, CaptureConfig, CaptureError, CaptureInfo, Captured, Running},
        live::{
            self, AttachMode, BurstReader, LiveConfig, LiveError, Observer, SlotRead, TcHook,
            Vantage,
        },
        replay::{FrameObserver, Replay, ReplayError, Sharded, UNSUPPORTED_LINK_TYPE},
    },
    units::Named as _,
};

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Replay(#[from] ReplayError),
    #[error(transparent)]
    Live(#[from] LiveError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error("cannot start the runtime")]
    Runtime(#[source] std::io::Error),
    #[error("cannot watch SIGTERM")]
    Signal(#[source] std::io::Error),
}

/// What is worked out beyond the counts: the time series and microbursts, the ECMP model the
/// ecmp-imbalance rule judges, and the findings' thresholds (`diagnose` and `replay` alike).
#[derive(Clone, Debug, Default)]
pub struct AnalysisOptions {
    /// Interval of the time series; the default: fitted to the capture in replay (about 100
    /// intervals), one second live.
    pub interval_ns: Option<u64>,
    /// Microburst slot width; 0: no slots; the default is 100 us.
    pub slot_ns: Option<u64>,
    pub thresholds: Thresholds,
    /// The switch's ECMP as modelled for the ecmp-imbalance rule; none: not modelled.
    pub ecmp: Option<EcmpOptions>,
    /// The host's NIC side, for the report's `nic` section; none: not read.
    pub nic: Option<NicPlan>,
    /// Replay: the addresses of the host the capture was taken on (`--local-ip`), which tell
    /// its own requests' round trips from its answers to others' requests; empty: inferred
    /// from the capture where it can be.
    pub local_hosts: Vec<std::net::IpAddr>,
    /// The jobs analysis on bins of this width (`--jobs`); none: not done.
    pub jobs_bin_ns: Option<u64>,
    /// Other hosts' processes, from their fleet records: they name the jobs' remote ranks.
    pub peer_processes: Vec<crate::analysis::jobs::PeerProcess>,
}

/// The NIC side of a report: its first reading, taken when the observation starts, and where
/// the second is read when it ends.
#[derive(Clone, Debug)]
pub struct NicPlan {
    pub before: crate::source::nic::host::Snapshot,
    pub host: crate::source::nic::host::Host,
    pub selection: crate::source::nic::host::Selection,
}

impl NicPlan {
    /// Reads the first reading now.
    pub fn start(
        host: crate::source::nic::host::Host,
        selection: crate::source::nic::host::Selection,
    ) -> Result<Self, crate::source::nic::NicError> {
        Ok(Self {
            before: crate::source::nic::host::snapshot(&host, &selection)?,
            host,
            selection,
        })
    }

    /// The plan for `diagnose`: the RDMA devices named, or behind the observed interfaces;
    /// none when the host has none of either (its NIC side is then not the point).
    pub fn live(
        interfaces: &[String],
        rdma_devices: &[String],
    ) -> Result<Option<Self>, crate::source::nic::NicError> {
        use crate::source::nic::host::{Host, Selection};
        let selection = Selection {
            interfaces: interfaces.to_vec(),
            rdma_devices: rdma_devices.to_vec(),
            no_qps: false,
            no_modules: false,
            gpus: false,
        };
        let plan = Self::start(Host::Live, selection)?;
        Ok((!plan.before.devices().is_empty()).then_some(plan))
    }

    /// The `nic` section: the second reading, the deltas, the QPs joined to the wire's flows. A
    /// second reading that fails is a warning: the wire view stands.
    fn finish(&self, report: &mut Report) {
        match crate::source::nic::host::snapshot(&self.host, &self.selection) {
            Ok(after) => {
                let mut nic = crate::source::nic::window::window(&self.before, &after);
                if nic.seconds <= 0.0 && after.taken_ns == 0 {
                    // Copies without their time: they bracket the observed window.
                    nic.seconds = report.window.seconds;
                }
                crate::source::nic::window::join_wire(&mut nic, &report.flows);
                report.nic = Some(nic);
            }
            Err(e) => report
                .source
                .warnings
                .push(format!("the NIC side was not read at the end: {e}")),
        }
    }
}

impl AnalysisOptions {
    /// The live series and microburst settings for links of `link_speed_bps`: a fixed
    /// interval (the observation's length is known only when it ends early or not).
    pub fn timeline(&self, link_speed_bps: Option<u64>) -> TimelineConfig {
        TimelineConfig {
            interval_ns: self.interval_ns.unwrap_or(DEFAULT_INTERVAL_NS),
            fitted: false,
            slot_ns: self.slot_ns.unwrap_or(DEFAULT_SLOT_NS),
            link_speed_bps,
            threshold_percent: self.thresholds.microburst.share_percent,
            series_flows: SERIES_FLOWS,
            jobs_bin_ns: self.jobs_bin_ns.unwrap_or(0),
        }
    }

    /// Replay's: without an interval, one fitted to the capture.
    pub fn replay_timeline(&self, link_speed_bps: Option<u64>) -> TimelineConfig {
        let slot_ns = self.slot_ns.unwrap_or(DEFAULT_SLOT_NS);
        TimelineConfig {
            link_speed_bps,
            threshold_percent: self.thresholds.microburst.share_percent,
            jobs_bin_ns: self.jobs_bin_ns.unwrap_or(0),
            ..TimelineConfig::replay(self.interval_ns, slot_ns)
        }
    }
}

/// Puts what a timeline ended with into the report: the series, microbursts and flows' peaks.
fn apply_timeline(report: &mut Report, end: TimelineEnd) {
    if let Some(bins) = end.jobs {
        if bins.overflow {
            report.source.warnings.push(format!(
                "the observation spans more than {MAX_INTERVALS} job bins: the jobs analysis stops there (give longer --jobs-bin)"
            ));
        }
        let jobs = crate::analysis::jobs::of_report(report, bins, &Default::default());
        report.jobs = Some(jobs);
    }
    if end.series.is_some() {
        report.set_flow_peaks(&end.flow_peaks);
    }
    report.series = end.series;
    report.microbursts = end.microbursts;
    // The series counts resends as the analysis classed them packet by packet; the report
    // settles some of them with both directions in view (copies lagging behind, RNR
    // retries). The series follows the report's counts, spread as the resends came.
    if let Some(s) = &mut report.series {
        spread(
            &mut s.total.retransmissions,
            report.totals.psn.retransmissions,
        );
        for fs in &mut s.flows {
            if let Some(f) = report
                .flows
                .iter()
                .find(|f| crate::model::FlowRef::of_flow(f) == fs.flow)
            {
                spread(&mut fs.metrics.retransmissions, f.psn.retransmissions);
            }
        }
    }
}

/// Scales `bins` to sum to `want`, each in proportion to what it holds (cumulatively rounded, so
/// the sum is exact); bins that hold nothing stay empty.
fn spread(bins: &mut [u64], want: u64) {
    let have: u64 = bins.iter().sum();
    if have == want || have == 0 {
        return;
    }
    let (mut cum, mut placed) = (0u128, 0u64);
    for b in bins.iter_mut() {
        cum += u128::from(*b);
        let upto = (cum * u128::from(want) / u128::from(have)) as u64;
        *b = upto - placed;
        placed = upto;
    }
}

/// Adds the ECMP model (when asked for) and the findings to a report whose counts, series and
/// link speed are final.
pub fn conclude(report: &mut Report, options: &AnalysisOptions) {
    if let Some(plan) = &options.nic {
        plan.finish(report);
    }
    if let (Some(jobs), Some(nic)) = (&mut report.jobs, &report.nic) {
        crate::analysis::jobs::join_processes(jobs, nic);
    }
    if let Some(jobs) = &mut report.jobs
        && !options.peer_processes.is_empty()
    {
        crate::analysis::jobs::join_peer_processes(jobs, &options.peer_processes);
    }
    warn_above_line_rate(report);
    if let Some(ecmp) = &options.ecmp {
        report.ecmp = Some(crate::analysis::ecmp::analyse(
            &report.flows,
            &report.connections,
            ecmp,
        ));
    }
    let (findings, checks) = findings::evaluate(report, &options.thresholds);
    report.findings = findings;
    report.checks = checks;
}

/// Says in `source.warnings` when a microburst slot carried more than the link speed allows:
/// the speed given is wrong, or the interface or capture carries several links' traffic (a
/// mirror port fed by several links, captures of several links merged).
fn warn_above_line_rate(report: &mut Report) {
    let Some(mb) = &report.microbursts else {
        return;
    };
    let Some(speed) = mb.link_speed_bps else {
        return;
    };
    let mut warnings = Vec::new();
    for i in &mb.interfaces {
        if let Some(p) = i.peak_percent.filter(|p| *p > 100.0) {
            warnings.push(format!(
                "{} {}: a {} slot carried {p:.0}% of the link speed ({} Gb/s): the link speed is wrong (--link-speed), or this holds the traffic of several links",
                i.name,
                match i.direction {
                    crate::model::Direction::Ingress => "in",
                    crate::model::Direction::Egress => "out",
                },
                crate::units::duration(mb.slot_ns),
                speed as f64 / 1e9
            ));
        }
    }
    report.source.warnings.extend(warnings);
}

/// Sets the report's link speed; when pause frames were seen but no speed is known, says why in
/// `source.warnings`.
pub fn apply_link_speed(report: &mut Report, speed: Option<u64>, why_unknown: &str) {
    report.set_link_speed(speed);
    if report.pfc.is_some() && speed.is_none() {
        report.source.warnings.push(format!(
            "PAUSE / PFC frames seen but no pause times: {why_unknown}"
        ));
    }
}

/// Sets the link speed of a live report: the one given, else the observed device's own, which
/// says nothing of links whose PFC came inside mirror copies.
fn apply_observed_speed(
    report: &mut Report,
    given: Option<u64>,
    own: Option<u64>,
    why_unknown: &str,
) {
    let mirrored = report
        .pfc
        .iter()
        .flat_map(|p| &p.sources)
        .any(|s| s.mirror.is_some());
    let (speed, why_unknown) = match given {
        Some(s) => (Some(s), why_unknown),
        None if mirrored => (
            None,
            "some came inside mirror copies, whose links' speed is unknown; give --link-speed",
        ),
        None => (own, why_unknown),
    };
    apply_link_speed(report, speed, why_unknown);
}

/// Replays capture files (`-` is standard input) into a report. With `analysis`, the time series,
/// microbursts, link speed and findings too; without, the counts alone. Frames of unsupported
/// pcapng interfaces are counted under `skipped.unsupported_link_type`. One file is read on
/// this thread and its frames accounted by `threads` more when that is over one (several files
/// are merged on this thread alone); the report is the same whatever the number.
pub fn replay_report(
    files: &[String],
    progress: bool,
    link_speed: Option<u64>,
    analysis: Option<&AnalysisOptions>,
    threads: usize,
) -> Result<Report, PipelineError> {
    let Some(a) = analysis else {
        let replay = read(Replay::new(), files, progress, threads)?;
        return Ok(replay_counts(&replay));
    };
    let replay = read(
        Replay::observed(Timeline::new(a.replay_timeline(link_speed))),
        files,
        progress,
        threads,
    )?;
    Ok(analysed(replay, link_speed, a))
}

/// The report of a replay with the analysis: counts, the time series and microbursts, the link
/// speed, the ECMP model and the findings.
fn analysed(mut replay: Replay<Timeline>, link_speed: Option<u64>, a: &AnalysisOptions) -> Report {
    if replay.observer.overflowed() {
        replay.warnings.push(format!(
            "the capture spans more than {MAX_INTERVALS} intervals: the time series stops there (give a longer --interval)"
        ));
    }
    let mut report = replay_counts(&replay);
    match &replay.points {
        // Several points of one traffic: each point's latency, in its own clock.
        Some(points) => {
            for (view, file) in points.views.iter().zip(&points.files) {
                let (latency, said) = view.capture_latency(&a.local_hosts);
                report.latency.extend(latency.into_iter().map(|mut l| {
                    l.interface = Some(file.clone());
                    l
                }));
                report
                    .source
                    .warnings
                    .extend(said.into_iter().map(|w| format!("{file}: {w}")));
            }
        }
        None => {
            let (latency, said) = replay.agg.capture_latency(&a.local_hosts);
            report.latency = latency;
            report.source.warnings.extend(said);
        }
    }
    apply_timeline(&mut report, replay.observer.finish(&replay.agg));
    apply_link_speed(&mut report, link_speed, "give --link-speed");
    conclude(&mut report, a);
    report
}

/// Most threads [`default_replay_threads`] gives.
pub const MAX_DEFAULT_REPLAY_THREADS: usize = 8;

/// The threads replay accounts frames on by default: the CPUs available (1 when unknown), at
/// most [`MAX_DEFAULT_REPLAY_THREADS`].
pub fn default_replay_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(MAX_DEFAULT_REPLAY_THREADS)
}

/// Reads every file into `replay`, as one stream merged by capture time (one file over
/// `threads` threads).
fn read<O: Sharded>(
    mut replay: Replay<O>,
    files: &[String],
    progress: bool,
    threads: usize,
) -> Result<Replay<O>, PipelineError> {
    replay.files_sharded(files, progress, threads)?;
    Ok(replay)
}

/// The report of what a replay counted: totals, flows and PFC, over the capture's time span.
fn replay_counts<O: FrameObserver>(replay: &Replay<O>) -> Report {
    let mut report = replay.agg.report(
        Source::pcap(replay.files.clone(), replay.warnings.clone()),
        replay.window_seconds(),
    );
    report.points = replay
        .points
        .as_ref()
        .map(crate::analysis::points::summarize);
    if replay.unsupported_link_frames > 0 {
        report.totals.skipped.insert(
            UNSUPPORTED_LINK_TYPE.to_string(),
            replay.unsupported_link_frames,
        );
    }
    report
}

/// Runs `tick` every `period` for `duration`, or until SIGINT or SIGTERM, or until `tick` says
/// how the observation ended, whichever comes first (the live and the libpcap sessions alike).
fn watch(
    duration: Duration,
    period: Duration,
    mut tick: impl FnMut() -> Result<Option<Ended>, PipelineError>,
) -> Result<Ended, PipelineError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(PipelineError::Runtime)?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(PipelineError::Signal)?;
        let deadline = tokio::time::sleep(duration);
        tokio::pin!(deadline);
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut deadline => return Ok(Ended::Elapsed),
                _ = tokio::signal::ctrl_c() => return Ok(Ended::Interrupted),
                _ = term.recv() => return Ok(Ended::Terminated),
                _ = every.tick() => {
                    if let Some(ended) = tick()? {
                        return Ok(ended);
                    }
                }
            }
        }
    })
}

/// Where and how to observe live.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    pub interfaces: Vec<String>,
    pub xdp_mode: AttachMode,
    pub vantage: Vantage,
    /// Capacity of the kernel flow table.
    pub max_flows: u32,
    pub tc_hook: TcHook,
    /// The links' speed; none: host mode reads the interfaces' own.
    pub link_speed: Option<u64>,
    /// Mirror mode: the CPUs that account the copies.
    pub spread: live::Spread,
}

/// Why an observation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The duration ran out.
    Elapsed,
    /// SIGINT (Ctrl-C).
    Interrupted,
    /// SIGTERM.
    Terminated,
    /// The source failed (a captured device went away): reported up to then, with a warning.
    Failed,
}

/// The kernel programs attached to interfaces, sampled interval by interval into a time series
/// and slot by slot into microbursts; [`LiveSession::finish`] detaches and reports.
pub struct LiveSession {
    options: LiveOptions,
    analysis: AnalysisOptions,
    observer: Observer,
    timeline: Timeline,
    /// The tracker of each kernel ring (2i: interface i ingress, 2i + 1: its egress in host
    /// mode), if any.
    rings: Vec<Option<usize>>,
    reader: Option<BurstReader>,
    speed: Option<u64>,
    why_unknown: &'static str,
    started: Instant,
    /// Each interface's device index and frames missed for lack of buffer space, when
    /// attached (None: unreadable).
    missed_at_start: Vec<Option<(u32, u64)>>,
}

impl LiveSession {
    /// The interfaces observed at TC ingress beside a running sidecar's XDP program.
    pub fn beside(&self) -> Vec<&str> {
        self.observer.beside()
    }

    /// Mirror mode: the CPUs the copies are spread over (none: accounted where received).
    pub fn spread_cpus(&self) -> &[u32] {
        self.observer.spread_cpus()
    }

    /// Attaches to the interfaces.
    pub fn attach(options: LiveOptions, analysis: AnalysisOptions) -> Result<Self, PipelineError> {
        let (speed, why_unknown) = match (options.link_speed, options.vantage) {
            (Some(s), _) => (Some(s), ""),
            (None, Vantage::Host) => (
                live::interfaces_speed(&options.interfaces),
                "the interfaces report no common speed; give --link-speed",
            ),
            (None, Vantage::Mirror { .. }) => (
                None,
                "a mirror port's speed is not the mirrored links'; give --link-speed",
            ),
        };
        let timeline_config = analysis.timeline(speed);
        let config = LiveConfig {
            interfaces: options.interfaces.clone(),
            xdp_mode: options.xdp_mode,
            vantage: options.vantage,
            max_flows: options.max_flows,
            tc_hook: options.tc_hook,
            burst_slot_ns: timeline_config.slot_ns,
            spread: options.spread.clone(),
            // diagnose beside a running sidecar observes at TC ingress, and says so.
            beside_sidecar: true,
        };
        let observer = Observer::attach(config)?;
        let mut timeline =
            Timeline::starting(timeline_config, live::unix_ns(), &Default::default());
        let offset = live::monotonic_to_unix_offset();
        let mut rings = Vec::new();
        for iface in &options.interfaces {
            rings.push(Some(timeline.add_tracker(
                iface.clone(),
                Direction::Ingress,
                offset,
            )));
            rings.push(
                (options.vantage == Vantage::Host)
                    .then(|| timeline.add_tracker(iface.clone(), Direction::Egress, offset)),
            );
        }
        let reader = observer.burst_reader()?;
        let missed_at_start = options
            .interfaces
            .iter()
            .map(|i| live::receive_missed(i))
            .collect();
        Ok(Self {
            options,
            analysis,
            observer,
            timeline,
            rings,
            reader,
            speed,
            why_unknown,
            started: Instant::now(),
            missed_at_start,
        })
    }

    /// Moves the microburst slots the kernel has completed into the timeline: all of them
    /// once detached (`detached`), else those the kernel clock's tick left a period ago.
    fn feed(&mut self, detached: bool) -> Result<(), PipelineError> {
        let Some(reader) = self.reader.as_mut() else {
            return Ok(());
        };
        let clock = self.observer.clock()?;
        let (rings, timeline) = (&self.rings, &mut self.timeline);
        let mut take = |ring: usize, read: SlotRead| {
            if let Some(Some(t)) = rings.get(ring) {
                match read {
                    SlotRead::Bytes { slot, bytes, slots } => {
                        timeline.trackers[*t].span(slot, bytes, slots)
                    }
                    SlotRead::Lost(n) => timeline.trackers[*t].lost(n),
                }
            }
        };
        if detached {
            let now_slot = live::monotonic_ns() / reader.slot_ns();
            reader.drain_all(&clock, now_slot, &mut take);
        } else {
            reader.drain(&clock, &mut take);
        }
        Ok(())
    }

    /// Samples the rings and, at each interval's end, the flow table.
    fn tick(&mut self) -> Result<(), PipelineError> {
        self.feed(false)?;
        let now = live::unix_ns();
        if self.timeline.due(now) {
            let agg = self.observer.snapshot()?;
            self.timeline.advance(now, &agg);
        }
        Ok(())
    }

    /// Observes for `duration`, or until SIGINT or SIGTERM, whichever comes first.
    pub fn observe(&mut self, duration: Duration) -> Result<Ended, PipelineError> {
        let period = self
            .reader
            .as_ref()
            .map_or(Duration::from_millis(100), |r| r.period())
            .min(Duration::from_millis(100));
        watch(duration, period, || self.tick().map(|()| None))
    }

    /// Detaches and reports: totals, flows, PFC, the time series and microbursts, the link
    /// speed, the ECMP model and the findings.
    pub fn finish(mut self) -> Result<Report, PipelineError> {
        // The interfaces' names by index, read while attached (detaching forgets the index).
        let names: std::collections::HashMap<u32, String> = self
            .observer
            .interfaces()
            .map(|(_, name, ifindex, _)| (ifindex, name.to_string()))
            .collect();
        let beside: Vec<String> = self.beside().iter().map(|s| s.to_string()).collect();
        // Read before detaching (frames that arrive after it are not the observer's to miss).
        let interface_missed = self
            .options
            .interfaces
            .iter()
            .zip(&self.missed_at_start)
            .filter_map(|(i, start)| {
                // A device made again, or a counter that went back, says nothing of the window.
                let ((index, end), (index_then, start)) = (live::receive_missed(i)?, (*start)?);
                (index == index_then).then_some(end.checked_sub(start)?)
            })
            .fold(0u64, u64::saturating_add);
        self.observer.detach()?;
        let window = self.started.elapsed().as_secs_f64();
        self.feed(true)?;
        self.reader = None;
        let agg = self.observer.snapshot()?;
        // The last interval ends now: its rates are over the part of it that passed.
        self.timeline.end_at(live::unix_ns());
        let o = &self.options;
        let mut source = Source::live(o.interfaces.clone(), o.xdp_mode.name());
        source.mode = Some(o.vantage.name().to_string());
        source.warnings = self.observer.warnings();
        if !beside.is_empty() {
            source.warnings.push(format!(
                "{} observed at TC ingress beside roce-observer's own XDP program (a sidecar running there): every frame it passes, VLAN tags as the kernel hands them to TC (taken out of the frame, so neither their priority nor their 4 bytes are counted)",
                beside.join(", ")
            ));
        }
        let mut report = agg.report(source, window);
        report.totals.interface_missed = interface_missed;
        report.name_latency_interfaces(&names);
        apply_timeline(&mut report, self.timeline.finish(&agg));
        apply_observed_speed(&mut report, o.link_speed, self.speed, self.why_unknown);
        conclude(&mut report, &self.analysis);
        Ok(report)
    }
}

/// The NIC side alone (an offload host, whose RDMA netdev XDP sees no RoCE on): nothing is
/// attached; the plan's first reading was taken when the session started, the second is taken
/// by [`NicSession::finish`], and the findings that read NIC data judge the window between.
pub struct NicSession {
    analysis: AnalysisOptions,
    started: Instant,
}

impl NicSession {
    /// Starts the window now; `analysis.nic` is the plan, read at its start.
    pub fn start(analysis: AnalysisOptions) -> Self {
        Self {
            analysis,
            started: Instant::now(),
        }
    }

    /// Waits for `duration`, or until SIGINT or SIGTERM, whichever comes first.
    pub fn observe(&mut self, duration: Duration) -> Result<Ended, PipelineError> {
        watch(duration, Duration::from_millis(100), || Ok(None))
    }

    /// The second reading and the report: no wire view (its counts are empty, and no wire rule
    /// has anything to judge), the `nic` section and its findings.
    pub fn finish(self) -> Report {
        let window = self.started.elapsed().as_secs_f64();
        let subjects = self.analysis.nic.as_ref().map_or_else(Vec::new, |p| {
            p.selection
                .rdma_devices
                .iter()
                .chain(&p.selection.interfaces)
                .cloned()
                .collect()
        });
        let mut report = crate::aggregate::Aggregate::new().report(Source::nic(subjects), window);
        conclude(&mut report, &self.analysis);
        report
    }
}

/// Where and how to capture through libpcap.
#[derive(Clone, Debug)]
pub struct CaptureOptions {
    pub capture: CaptureConfig,
    /// The links' speed; none: the device's own, when it is a network interface reporting one.
    pub link_speed: Option<u64>,
}

/// A device captured through libpcap (`--capture`): its frames read on a thread of their own
/// through replay's parser and the aggregate, the time series fed frame by frame with their
/// capture timestamps (and moved on between frames by the clock);
/// [`CaptureSession::finish`] stops and reports.
pub struct CaptureSession {
    options: CaptureOptions,
    analysis: AnalysisOptions,
    running: Running<Timeline>,
    speed: Option<u64>,
    why_unknown: &'static str,
    /// Why the capture ended before it was stopped.
    failed: Option<CaptureError>,
    started: Instant,
}

impl CaptureSession {
    /// Opens the device and starts reading it.
    pub fn open(options: CaptureOptions, analysis: AnalysisOptions) -> Result<Self, PipelineError> {
        let device = options.capture.device.clone();
        let (speed, why_unknown) = match options.link_speed {
            Some(s) => (Some(s), ""),
            None => (
                live::interfaces_speed(std::slice::from_ref(&device)),
                "the capture device reports no speed; give --link-speed",
            ),
        };
        let capture = Capture::open(&options.capture)?;
        let timeline = Timeline::starting(
            analysis.timeline(speed),
            live::unix_ns(),
            &Default::default(),
        );
        let captured = Arc::new(Mutex::new(Captured::observed(&device, timeline)));
        let running = Running::start(capture, captured)?;
        Ok(Self {
            options,
            analysis,
            running,
            speed,
            why_unknown,
            failed: None,
            started: Instant::now(),
        })
    }

    /// How the device was opened.
    pub fn info(&self) -> &CaptureInfo {
        self.running.info()
    }

    /// Moves the time series on to now (an interval without frames ends all the same).
    fn tick(&self) {
        let mut c = self
            .running
            .shared()
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = live::unix_ns();
        if c.observer.due(now) {
            let Captured { agg, observer, .. } = &mut *c;
            observer.advance(now, agg);
        }
    }

    /// Captures for `duration`, or until SIGINT or SIGTERM, or the capture fails, whichever
    /// comes first.
    pub fn observe(&mut self, duration: Duration) -> Result<Ended, PipelineError> {
        let ended = watch(duration, Duration::from_millis(100), || {
            if self.running.is_finished() {
                return Ok(Some(Ended::Failed));
            }
            self.tick();
            Ok(None)
        })?;
        if ended == Ended::Failed {
            self.failed = self.running.stop().err();
        }
        Ok(ended)
    }

    /// Stops (reading what libpcap holds first) and reports: totals with libpcap's counters,
    /// flows, PFC, the time series and microbursts, the link speed, the ECMP model and the
    /// findings.
    pub fn finish(mut self) -> Result<Report, PipelineError> {
        if let Err(e) = self.running.stop() {
            self.failed.get_or_insert(e);
        }
        let window = self.started.elapsed().as_secs_f64();
        let info = self.running.info().clone();
        let mut c = self
            .running
            .shared()
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        c.observer.end_at(live::unix_ns());
        let source = Source::capture(
            info.device.clone(),
            CaptureSource {
                link_type: info.link_type.clone(),
                promiscuous: info.promiscuous,
                filter: info.filter.clone(),
                snaplen: info.snaplen,
                timestamps: if info.nanoseconds { "ns" } else { "us" }.to_string(),
            },
        );
        let mut report = c.agg.report(source, window);
        let stats = c.stats;
        report.totals.capture = Some(CaptureCounts {
            received: stats.received,
            dropped: stats.dropped,
            interface_dropped: stats.if_dropped,
        });
        // Replay's latency scope: interface 0, the capture device.
        report.name_latency_interfaces(&[(0, info.device.clone())].into_iter().collect());
        let timeline = std::mem::replace(
            &mut c.observer,
            Timeline::new(crate::analysis::series::TimelineConfig::default()),
        );
        apply_timeline(&mut report, timeline.finish(&c.agg));
        drop(c);
        let w = &mut report.source.warnings;
        if let Some(e) = &self.failed {
            w.push(format!(
                "the capture ended early: {}; reported up to then",
                live::OneLine(e)
            ));
        }
        if stats.dropped + stats.if_dropped > 0 {
            w.push(format!(
                "libpcap dropped {} frames (no room in its buffer) and the interface {}: PSN gaps and loss may be the capture's, not the network's",
                stats.dropped, stats.if_dropped
            ));
        }
        apply_observed_speed(
            &mut report,
            self.options.link_speed,
            self.speed,
            self.why_unknown,
        );
        conclude(&mut report, &self.analysis);
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::{borrow::Cow, path::PathBuf, time::Duration};

    use pcap_file::{
        DataLink,
        pcapng::{
            PcapNgWriter,
            blocks::{
                enhanced_packet::EnhancedPacketBlock,
                interface_description::InterfaceDescriptionBlock,
                section_header::SectionHeaderBlock,
            },
        },
    };

    use super::*;
    use crate::source::synth::{self, Frame};

    /// A scratch folder, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!("roce-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }

        fn write(&self, name: &str, bytes: &[u8]) -> String {
            let p = self.0.join(name);
            std::fs::write(&p, bytes).unwrap();
            p.display().to_string()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn pcap(frames: &[Frame]) -> Vec<u8> {
        synth::pcap_bytes(frames).unwrap()
    }

    /// Ethernet frames on interface 0 and frames of an interface of unsupported link type.
    fn pcapng(frames: &[Frame]) -> Vec<u8> {
        let mut w =
            PcapNgWriter::with_section_header(Vec::new(), SectionHeaderBlock::default()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535))
            .unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::ERF, 65535))
            .unwrap();
        for (k, f) in frames.iter().enumerate() {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: u32::from(k % 7 == 3),
                timestamp: Duration::from_nanos(f.ts_ns / 1_000),
                original_len: f.bytes.len() as u32,
                data: Cow::Borrowed(&f.bytes[..]),
                options: vec![],
            })
            .unwrap();
        }
        w.into_inner()
    }

    /// The report of `path` replayed with `a` on one thread, or read in buffers of `chunk`
    /// bytes by this thread with its frames accounted by `shards` more.
    fn report(
        path: &str,
        a: &AnalysisOptions,
        speed: Option<u64>,
        shards: usize,
        chunk: usize,
    ) -> String {
        let mut replay = Replay::observed(Timeline::new(a.replay_timeline(speed)));
        if shards == 1 {
            replay.file(path, false).unwrap();
        } else {
            replay.file_sharded(path, false, shards, chunk).unwrap();
        }
        serde_json::to_string(&analysed(replay, speed, a)).unwrap()
    }

    #[test]
    fn shards_give_the_report_of_one_thread() {
        let dir = Dir::new("pipeline-shards");
        let fitted = AnalysisOptions::default();
        let fixed = AnalysisOptions {
            interval_ns: Some(50_000),
            slot_ns: Some(10_000),
            ..Default::default()
        };
        let same =
            |path: &str, a: &AnalysisOptions, speed: Option<u64>, runs: &[(usize, usize)]| {
                let one = report(path, a, speed, 1, 0);
                for &(shards, chunk) in runs {
                    let many = report(path, a, speed, shards, chunk);
                    assert!(
                        one == many,
                        "{path}, {shards} shards, {chunk} B buffers:\n{one}\n{many}"
                    );
                }
            };
        // Every scenario, in buffers of a few frames.
        for name in crate::source::synth::scenario_names() {
            let w = synth::scenario(name).unwrap();
            let path = dir.write(&format!("{name}.pcap"), &pcap(&w.frames));
            same(&path, &fitted, None, &[(2, 4096), (3, 700)]);
        }
        // Long captures: the bins grow tenfold twice (the span passes 100 ms, then 1 s),
        // latency samples fall in many intervals, the files span many buffers.
        let latency = synth::scenario("latency").unwrap().frames;
        let long = pcap(&synth::played_again(&latency, 25, 1_000_000));
        let demo = synth::scenario("demo").unwrap().frames;
        let files = [
            dir.write("long.pcap", &long),
            dir.write(
                "demo-again.pcap",
                &pcap(&synth::played_again(&demo, 20, 10_000_000)),
            ),
            // Cut in a record half-way, and in the last.
            dir.write("cut-middle.pcap", &long[..long.len() / 2 + 7]),
            dir.write("cut-end.pcap", &long[..long.len() - 5]),
            dir.write(
                "mixed.pcapng",
                &pcapng(&synth::played_again(&latency, 3, 1_000_000)),
            ),
        ];
        for path in &files {
            same(path, &fitted, None, &[(2, 64 << 10), (3, 700)]);
        }
        same(&files[0], &fixed, Some(25_000_000_000), &[(2, 16 << 10)]);
        // A record header claiming 100 MB, followed by 80 MiB: a corrupt length, not a cut file
        // (the buffers grow to the same limit on any number of threads).
        let mut huge = pcap(&demo);
        let mut record = [0u8; 16];
        let claim = 100_000_000u32;
        let big_endian =
            huge[..4] == [0xA1, 0xB2, 0xC3, 0xD4] || huge[..4] == [0xA1, 0xB2, 0x3C, 0x4D];
        record[8..12].copy_from_slice(&if big_endian {
            claim.to_be_bytes()
        } else {
            claim.to_le_bytes()
        });
        huge.extend_from_slice(&record);
        huge.resize(huge.len() + (80 << 20), 0);
        let path = dir.write("huge.pcap", &huge);
        same(&path, &fitted, None, &[(2, 4096), (3, 1 << 20)]);
        let r = report(&path, &fitted, None, 2, 4096);
        assert!(r.contains("corrupt record header"), "{r}");
    }
}
