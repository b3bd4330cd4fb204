//! The sidecar's fleet records (`--otlp-endpoint`): every interval, the rows of
//! docs/export.md for what the interval added. Every QP that grew, with its exact growth (the
//! flow book's, through write-backs, evictions and retirements); its connections; the latency
//! histograms' growth, per requester direction and per interface; the PAUSE / PFC frames'
//! growth per sender; and the findings of the interval's report. They are built as a report of
//! that interval alone, by the same code that builds `replay`'s, and sent by an exporter on a
//! thread of its own: the collector only queues them (a full queue drops its oldest), and
//! neither a slow receiver nor the encoding's compression ever holds up a drain or `/metrics`.

use std::{
    collections::{BTreeMap, HashMap, hash_map::Entry},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
        mpsc::{Receiver, SyncSender, TrySendError, sync_channel},
    },
    thread::JoinHandle,
    time::Duration,
};

use observer_common::{
    FlowKey, LAT_BUCKETS, LatHist, LatKey, LatScopeKey, MSG_BUCKETS, MsgKind, MsgStats, PauseKey,
    PauseStats,
};
use observer_otlp::{Exporter, Stats};
use rustc_hash::FxHashMap;
use tokio::sync::oneshot;
use tracing::{error, info, warn};

use roce_observer::{
    aggregate::Aggregate,
    export::{IntervalRows, Resource, Sequencer},
    model::Source,
    pipeline::{AnalysisOptions, conclude},
    source::live,
};

use super::{
    DaemonError,
    flowbook::{Attrs, Counts, Growth, RECORD_WIDTH},
};

/// Every flow's cumulative messages (under its analysis entry's key), each once, as read.
pub(super) type Messages = Vec<(FlowKey, MsgStats)>;

/// Flows' growth, by flow.
type GrowthMap = FxHashMap<observer_common::FlowKey, (Counts<RECORD_WIDTH>, Attrs)>;

/// Flows' growth as handed over: the lists of drains and retirements, one after another (a
/// list has each flow once; a flow may be in several). They are summed by flow on the
/// builder's thread, and only when there are several: an interval is one drain's list.
#[derive(Default)]
pub(super) struct Grown {
    lists: Vec<Vec<Growth>>,
}

/// The lists kept apart at most: more (an interval held while the builder is behind) are
/// summed, so that what is held is bounded by the flows, not by the drains.
const LISTS_KEPT: usize = 4;

impl Grown {
    fn add(&mut self, list: Vec<Growth>) {
        if !list.is_empty() {
            self.lists.push(list);
            self.bound();
        }
    }

    fn append(&mut self, later: Grown) {
        self.lists.extend(later.lists);
        self.bound();
    }

    fn bound(&mut self) {
        if self.lists.len() > LISTS_KEPT {
            let summed = std::mem::take(self).summed();
            self.lists.push(summed);
        }
    }

    fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// Each flow once, with its growth summed. (A list has each flow once: a drain settles a
    /// flow once, and a retired flow leaves the book.)
    fn summed(mut self) -> Vec<Growth> {
        if self.lists.len() <= 1 {
            return self.lists.pop().unwrap_or_default();
        }
        let mut by_flow = GrowthMap::default();
        by_flow.reserve(self.lists.iter().map(Vec::len).max().unwrap_or(0));
        for list in self.lists {
            add_growth(&mut by_flow, list.into_iter().map(|(k, c, a)| (k, (c, a))));
        }
        by_flow.into_iter().map(|(k, (c, a))| (k, c, a)).collect()
    }
}

/// What the collector hands over of one interval (or of several, when the builder was behind).
#[derive(Default)]
pub(super) struct Interval {
    /// Every flow's growth ([`Records::add_growth`]).
    pub grown: Grown,
    /// Flows whose latency state and messages were deleted before this interval's were read:
    /// their growth starts from nothing ([`Records::forget_flow`]).
    pub forget: Vec<FlowKey>,
    /// The kernel's cumulative latency states and per-interface histograms, at its end.
    pub latency: HashMap<LatKey, observer_common::LatState>,
    /// The cumulative messages per flow, at its end.
    pub messages: Messages,
    pub scopes: BTreeMap<LatScopeKey, LatHist>,
    /// The pause table, cumulative, at its end.
    pub pauses: BTreeMap<PauseKey, PauseStats>,
    pub names: HashMap<u32, String>,
    pub link_speed: Option<u64>,
    /// Unix-epoch ns.
    pub bounds: (u64, u64),
    pub seconds: f64,
    /// The exporter's `job` and `rank` at its end, from the host's QP table (none: no table
    /// read).
    pub job_and_rank: Option<(String, String)>,
}

impl Interval {
    /// `later` follows this one: one interval of both (growth added, the cumulative values
    /// the later ones).
    fn absorb(&mut self, later: Interval) {
        self.grown.append(later.grown);
        self.forget.extend(later.forget);
        self.latency = later.latency;
        self.messages = later.messages;
        self.scopes = later.scopes;
        self.pauses = later.pauses;
        self.names = later.names;
        self.link_speed = later.link_speed;
        self.bounds.1 = later.bounds.1;
        self.seconds += later.seconds;
        if later.job_and_rank.is_some() {
            self.job_and_rank = later.job_and_rank;
        }
    }
}

/// The intervals handed over, at most, before the collector holds the next ones back (and
/// hands them over as one with the interval after).
const HANDED_OVER: usize = 2;

/// The collector's side: hands intervals to the builder thread, reads the exporter's counts.
pub(super) struct Records {
    /// None once finished.
    tx: Option<SyncSender<Interval>>,
    /// An interval the builder had no room for yet.
    held: Option<Interval>,
    /// The flows' growth since the last interval handed over.
    growth: Grown,
    /// Flows whose latency state and messages were deleted since the last read of them, and
    /// those deleted before it.
    forget_new: Vec<FlowKey>,
    forget: Vec<FlowKey>,
    /// The end of the last interval handed over (Unix-epoch ns).
    last_end: u64,
    /// The flows with messages at the last read (the next read's room).
    pub messages_read: usize,
    builder: Option<JoinHandle<()>>,
    /// For the counts; dropped before the sending thread is told to stop (it then holds the
    /// only one).
    exporter: Option<Arc<Exporter>>,
    stop: Option<oneshot::Sender<Duration>>,
    sender: Option<JoinHandle<Stats>>,
    /// How long the last records may take at shutdown.
    timeout: Duration,
    buffer_bytes: usize,
    /// Intervals whose records were queued (by the builder).
    queued: Arc<AtomicU64>,
    /// The last error logged (each new one is logged once).
    logged_error: Option<String>,
}

/// What the exporter did, for the metrics.
#[derive(Clone, Debug, Default)]
pub struct ExportRow {
    pub stats: Stats,
    pub buffer_capacity: u64,
    pub intervals: u64,
}

/// What the builder thread keeps between intervals.
struct Builder {
    resource: Resource,
    sequencer: Sequencer,
    source: Source,
    /// The flows' and pauses' times are the kernel's monotonic clock (XDP), not Unix time (a
    /// capture's).
    monotonic: bool,
    exporter: Arc<Exporter>,
    queued: Arc<AtomicU64>,
    /// The cumulative values the last interval ended with.
    latency: HashMap<LatKey, [LatHist; 2]>,
    /// The messages counted so far, per flow.
    messages: Counted,
    scopes: BTreeMap<LatScopeKey, LatHist>,
    pauses: BTreeMap<PauseKey, PauseStats>,
    /// The most flows an interval had since memory was last given back to the system, and
    /// the intervals since.
    held_for: usize,
    since_trim: u32,
}

/// Has glibc keep freed memory until [`Builder::interval`] gives it back. By default it hands
/// back on its own a heap's top beyond a threshold as soon as a free leaves one, and serves
/// large blocks (an interval's rows, its requests) by mmap: either way each interval's memory
/// is faulted in again page by page in the next (a sixth of the export's time when measured).
/// Setting either threshold stops glibc from adjusting them. (bench-export measures the
/// builder's interval with it too.)
pub fn hold_memory() {
    // Blocks up to 32 MiB (glibc's most) from the heap; a heap's top handed back only by
    // malloc_trim.
    // SAFETY: mallopt has no preconditions; it only changes the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// The builder gives its memory back to the system at least this often (in intervals).
const TRIM_INTERVALS: u32 = 60;

impl Records {
    /// Starts the exporter's sending thread (its own single-threaded runtime) and the builder
    /// thread that makes each interval's rows.
    pub(super) fn start(
        config: observer_otlp::Config,
        resource: Resource,
        source: Source,
        monotonic: bool,
    ) -> Result<Self, DaemonError> {
        let (timeout, buffer_bytes) = (config.timeout, config.buffer_bytes);
        let (tx, rx) = sync_channel(1);
        let sender = std::thread::Builder::new()
            .name("otlp".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return Stats::default();
                    }
                };
                runtime.block_on(async move {
                    let exporter = match Exporter::start(config) {
                        Ok(e) => Arc::new(e),
                        Err(e) => {
                            let _ = tx.send(Err(e.to_string()));
                            return Stats::default();
                        }
                    };
                    let (stop_tx, stop_rx) = oneshot::channel();
                    let _ = tx.send(Ok((exporter.clone(), stop_tx)));
                    // Told to stop (or the collector gone): the last records get `deadline`.
                    let deadline = stop_rx.await.unwrap_or(Duration::ZERO);
                    match Arc::try_unwrap(exporter) {
                        Ok(e) => e.flush(deadline).await,
                        Err(e) => e.stats(),
                    }
                })
            })
            .map_err(DaemonError::Runtime)?;
        let (exporter, stop) = match rx.recv() {
            Ok(Ok(started)) => started,
            Ok(Err(why)) => return Err(DaemonError::Export(why)),
            Err(_) => return Err(DaemonError::Export("the exporter's thread ended".into())),
        };
        hold_memory();
        let queued = Arc::new(AtomicU64::new(0));
        let (tx, rx) = sync_channel(HANDED_OVER);
        let builder = Builder {
            resource,
            sequencer: Sequencer::default(),
            source,
            monotonic,
            exporter: exporter.clone(),
            queued: queued.clone(),
            latency: HashMap::new(),
            messages: Counted::default(),
            scopes: BTreeMap::new(),
            pauses: BTreeMap::new(),
            held_for: 0,
            since_trim: 0,
        };
        let builder = std::thread::Builder::new()
            .name("records".into())
            .spawn(move || builder.run(rx))
            .map_err(DaemonError::Runtime)?;
        Ok(Self {
            tx: Some(tx),
            held: None,
            growth: Grown::default(),
            forget_new: Vec::new(),
            forget: Vec::new(),
            last_end: live::unix_ns(),
            messages_read: 0,
            builder: Some(builder),
            exporter: Some(exporter),
            stop: Some(stop),
            sender: Some(sender),
            timeout,
            buffer_bytes,
            queued,
            logged_error: None,
        })
    }

    /// Adds flows' growth (a drain's, or flows retired) to the next interval handed over.
    pub(super) fn add_growth(&mut self, grown: Vec<Growth>) {
        self.growth.add(grown);
    }

    /// The latency states and messages were read (for the interval about to be handed over).
    pub(super) fn latency_read(&mut self) {
        self.forget.append(&mut self.forget_new);
    }

    /// A flow was deleted with its latency state and messages (a capture's): the next
    /// interval's samples and messages of its keys are all new.
    pub(super) fn forget_flow(&mut self, key: FlowKey) {
        self.forget_new.push(key);
    }

    /// Hands an interval over to the builder (with the growth and the deletions since the last
    /// one), never waiting: when it is behind, the interval is held and handed over with the
    /// next one, as one interval of both.
    pub(super) fn interval(&mut self, mut interval: Interval) {
        interval.grown = std::mem::take(&mut self.growth);
        interval.forget = std::mem::take(&mut self.forget);
        self.last_end = interval.bounds.1;
        let interval = match self.held.take() {
            Some(mut held) => {
                held.absorb(interval);
                held
            }
            None => interval,
        };
        let Some(tx) = &self.tx else {
            return;
        };
        match tx.try_send(interval) {
            Ok(()) => {}
            Err(TrySendError::Full(back)) => self.held = Some(back),
            Err(TrySendError::Disconnected(_)) => {
                error!("fleet records: the builder thread is gone");
                self.tx = None;
            }
        }
    }

    /// Where the records went, for the metrics; a new export error is logged once.
    pub(super) fn row(&mut self) -> Option<ExportRow> {
        let stats = self.exporter.as_ref()?.stats();
        if stats.failing && stats.last_error != self.logged_error {
            warn!(
                "fleet records: {}",
                stats.last_error.as_deref().unwrap_or("export failing")
            );
            self.logged_error = stats.last_error.clone();
        } else if !stats.failing && self.logged_error.is_some() {
            info!("fleet records: the receiver takes them again");
            self.logged_error = None;
        }
        Some(ExportRow {
            stats,
            buffer_capacity: self.buffer_bytes as u64,
            intervals: self.queued.load(Ordering::Relaxed),
        })
    }

    /// Builds and queues what was handed over (and held), then sends what is queued for up
    /// to the request timeout, and says where every record went.
    pub(super) fn finish(mut self) {
        // Growth no interval took (the last drain failed after the book moved on): with the
        // held interval, or in one of its own up to now.
        if !self.growth.is_empty() {
            let grown = std::mem::take(&mut self.growth);
            match &mut self.held {
                Some(held) => held.grown.append(grown),
                None => {
                    let now = live::unix_ns().max(self.last_end);
                    self.held = Some(Interval {
                        grown,
                        bounds: (self.last_end, now),
                        seconds: (now - self.last_end) as f64 / 1e9,
                        ..Interval::default()
                    });
                }
            }
        }
        if let (Some(tx), Some(held)) = (&self.tx, self.held.take()) {
            // The builder takes it once it is through with the others.
            let _ = tx.send(held);
        }
        self.tx = None;
        if let Some(b) = self.builder.take()
            && b.join().is_err()
        {
            error!("fleet records: the builder thread panicked");
        }
        self.exporter = None;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(self.timeout);
        }
        let Some(Ok(s)) = self.sender.take().map(JoinHandle::join) else {
            error!("fleet records: the exporter's thread panicked");
            return;
        };
        let undelivered = s.rejected + s.dropped + s.pending;
        if undelivered == 0 {
            info!(records = s.pushed, "fleet records: every record sent");
        } else {
            error!(
                records = s.pushed,
                sent = s.sent,
                rejected = s.rejected,
                dropped = s.dropped,
                pending = s.pending,
                "fleet records: {undelivered} of {} records not delivered{}",
                s.pushed,
                s.last_error
                    .as_deref()
                    .map(|e| format!(" (last error: {e})"))
                    .unwrap_or_default()
            );
        }
    }
}

impl Builder {
    fn run(mut self, rx: Receiver<Interval>) {
        while let Ok(interval) = rx.recv() {
            self.interval(interval);
        }
    }

    /// Queues the records of one interval: a report of what it added, as `replay` makes one.
    fn interval(&mut self, mut iv: Interval) {
        let grown = std::mem::take(&mut iv.grown).summed();
        let flows = grown.len();
        let agg = self.interval_aggregate(&mut iv, grown);
        let mut report = agg.report(self.source.clone(), iv.seconds);
        drop(agg);
        report.name_latency_interfaces(&iv.names);
        report.set_link_speed(iv.link_speed);
        let (start, end) = iv.bounds;
        if let Some((job, rank)) = iv.job_and_rank.take() {
            (self.resource.job, self.resource.rank) = (job, rank);
        }
        drop(iv);
        conclude(&mut report, &AnalysisOptions::default());
        self.exporter.push_interval(
            &self.resource,
            &mut self.sequencer,
            start,
            end,
            &IntervalRows::of(&report),
        );
        self.queued.fetch_add(1, Ordering::Relaxed);
        drop(report);
        // An interval's report is many small allocations, freed now. The allocator keeps them
        // for the next interval (given back each time, they cost a page fault each when taken
        // again: a sixth of the export's time). They are given back (every arena is trimmed,
        // this thread's holding most) once intervals are less than half the size of the
        // largest since, so a burst of QPs is not held for good, and every
        // [`TRIM_INTERVALS`] intervals anyway (what is not the QPs', e.g. requests queued
        // while the receiver was away).
        self.since_trim += 1;
        if flows.saturating_mul(2) < self.held_for || self.since_trim >= TRIM_INTERVALS {
            // SAFETY: malloc_trim has no preconditions.
            unsafe { libc::malloc_trim(0) };
            self.held_for = flows;
            self.since_trim = 0;
        } else {
            self.held_for = self.held_for.max(flows);
        }
    }

    /// What the interval added: the flows' growth, and the growth of the cumulative latency
    /// histograms, messages and pause counts since the last interval.
    fn interval_aggregate(&mut self, iv: &mut Interval, grown: Vec<Growth>) -> Aggregate {
        for key in &iv.forget {
            self.latency.remove(&LatKey::of_request(key));
            self.messages.forget(key);
        }
        let start_ns = iv.bounds.0;
        let offset = if self.monotonic {
            live::monotonic_to_unix_offset()
        } else {
            0
        };
        let unix = |ns: u64| (i128::from(ns) + offset).clamp(0, i128::from(u64::MAX)) as u64;
        let mut agg = Aggregate::new();
        agg.flows.reserve(grown.len());
        for (key, counts, attrs) in grown {
            let mut stats = counts.stats(&attrs);
            // What was seen of a flow is its table entry's: a first packet before the interval
            // is the interval's start.
            stats.first_seen_ns = unix(stats.first_seen_ns).max(start_ns);
            stats.last_seen_ns = unix(stats.last_seen_ns).max(stats.first_seen_ns);
            if stats.seq.timeout_at_ns != 0 {
                stats.seq.timeout_at_ns = unix(stats.seq.timeout_at_ns);
            }
            // Every growth, a PSN count's without a packet too (a value held back at the last
            // reading, caught up).
            let map = if key.is_union() {
                &mut agg.unions
            } else {
                &mut agg.flows
            };
            map.insert(key, stats);
        }
        let mut latency = HashMap::with_capacity(iv.latency.len());
        for (key, state) in &iv.latency {
            let then = self.latency.get(key);
            let hist = [0, 1].map(|k| hist_growth(&state.hist[k], then.map(|t| &t[k])));
            if hist.iter().any(|h| h.count > 0) {
                let mut s = *state;
                s.hist = hist;
                agg.latency.insert(*key, s);
            }
            latency.insert(*key, state.hist);
        }
        self.latency = latency;
        // (The read freed before the report is made.)
        self.messages
            .interval(&std::mem::take(&mut iv.messages), &mut agg);
        for (key, hist) in &iv.scopes {
            let h = hist_growth(hist, self.scopes.get(key));
            if h.count > 0 {
                agg.latency_scopes.insert(*key, h);
            }
        }
        self.scopes = iv.scopes.clone();
        for (key, stats) in &iv.pauses {
            let mut p = pause_growth(stats, self.pauses.get(key));
            if p.frames_total() > 0 || p.pfc_frames > 0 {
                p.first_seen_ns = unix(p.first_seen_ns).max(start_ns);
                p.last_seen_ns = unix(p.last_seen_ns).max(p.first_seen_ns);
                agg.pauses.insert(*key, p);
            }
        }
        self.pauses = iv.pauses.clone();
        agg
    }
}

/// Adds growth to `into`, flow by flow.
fn add_growth(
    into: &mut GrowthMap,
    from: impl IntoIterator<Item = (observer_common::FlowKey, (Counts<RECORD_WIDTH>, Attrs))>,
) {
    for (key, (c, a)) in from {
        let e = into.entry(key).or_default();
        e.0.add(&c);
        e.1.merge(&a);
    }
}

/// The samples a cumulative histogram gained since `then` (all of it when it went back in
/// any bucket: a state made again). Its lowest and highest stay the cumulative ones, which
/// bound the interval's.
fn hist_growth(now: &LatHist, then: Option<&LatHist>) -> LatHist {
    let Some(then) = then.filter(|t| {
        t.count <= now.count
            && t.sum_ns <= now.sum_ns
            && t.buckets.iter().zip(&now.buckets).all(|(a, b)| a <= b)
    }) else {
        return *now;
    };
    let mut h = *now;
    h.count -= then.count;
    h.sum_ns = now.sum_ns.saturating_sub(then.sum_ns);
    for i in 0..LAT_BUCKETS {
        h.buckets[i] = now.buckets[i].saturating_sub(then.buckets[i]);
    }
    h
}

/// The messages counted so far, per flow (under its analysis entry's key), with the read that
/// last had the flow.
#[derive(Default)]
struct Counted {
    flows: FxHashMap<FlowKey, (MsgStats, u32)>,
    read: u32,
}

impl Counted {
    /// Puts the messages an interval added (`now`, the cumulative values) into `agg`, whose
    /// flows are the interval's, and counts them. Messages are read after the flows: a
    /// message whose packets came in between goes with its flow's next growth, and one whose
    /// flow has no row in this interval is held for it (the next interval has it), or it would
    /// go with no connection side and be lost. A message read in part (its count without its
    /// bucket, or its bytes without its count) is held until it is whole. A flow the read did
    /// not have (the kernel forgot it) is forgotten.
    fn interval(&mut self, now: &[(FlowKey, MsgStats)], agg: &mut Aggregate) {
        self.read = self.read.wrapping_add(1);
        let read = self.read;
        // The analysis entries of the interval's flows, as a connection side looks its
        // messages up (a mirror copy's under every session's together): made only when a
        // mirror copy's messages grew.
        let mut analysed: Option<rustc_hash::FxHashSet<FlowKey>> = None;
        self.flows
            .reserve(now.len().saturating_sub(self.flows.len()));
        agg.messages.reserve(now.len().min(agg.flows.len()));
        for (key, cum) in now {
            let (counted, then) = match self.flows.entry(*key) {
                // A read a key at a time can give a key twice: the first is the one counted.
                Entry::Occupied(e) if e.get().1 == read => continue,
                Entry::Occupied(e) => {
                    let (counted, at) = e.into_mut();
                    *at = read;
                    (counted, true)
                }
                // A flow the last read did not have starts from nothing.
                Entry::Vacant(e) => (&mut e.insert((MsgStats::default(), read)).0, false),
            };
            let (m, from_nothing) = msg_growth(cum, then.then_some(&*counted));
            let counted_grew = m.messages() > 0 || m.unknown_size > 0;
            if !counted_grew && m.bytes.iter().chain(&m.buckets).all(|n| *n == 0) {
                *counted = *cum;
                continue;
            }
            // Each message of known size adds one to its count and one to a bucket: a read
            // between the two (the kernel adds count, bytes and bucket one after the other,
            // and a read copies them one after the other) is held until they agree.
            let whole = m.buckets.iter().sum::<u64>() == m.messages();
            let with_flow = if key.is_union() {
                analysed
                    .get_or_insert_with(|| agg.flows.keys().filter_map(FlowKey::union).collect())
                    .contains(key)
            } else {
                agg.flows.contains_key(key)
            };
            if with_flow && counted_grew && whole {
                agg.messages.insert(*key, m);
                *counted = *cum;
            } else if from_nothing {
                // Held from nothing: the flow is new, or was made again since.
                *counted = MsgStats::default();
            }
        }
        self.flows.retain(|_, (_, at)| *at == read);
    }

    /// A flow was deleted with its messages (a capture's): its next ones are all new.
    fn forget(&mut self, key: &FlowKey) {
        self.flows.remove(key);
    }
}

/// The messages a flow's cumulative counts gained since `then`, and whether they are all of
/// them (no `then`, or any count went back: an entry made again; one made again that has
/// already reached the old counts cannot be told). Its smallest and largest sizes stay the
/// cumulative ones, which bound the interval's; the open SEND is the newest.
fn msg_growth(now: &MsgStats, then: Option<&MsgStats>) -> (MsgStats, bool) {
    let went_back = |t: &&MsgStats| {
        t.unknown_size > now.unknown_size
            || (0..MsgKind::COUNT).any(|k| t.count[k] > now.count[k] || t.bytes[k] > now.bytes[k])
            || t.buckets.iter().zip(&now.buckets).any(|(a, b)| a > b)
    };
    let Some(then) = then.filter(|t| !went_back(t)) else {
        return (*now, true);
    };
    let mut m = *now;
    for k in 0..MsgKind::COUNT {
        m.count[k] -= then.count[k];
        m.bytes[k] -= then.bytes[k];
    }
    m.unknown_size -= then.unknown_size;
    for i in 0..MSG_BUCKETS {
        m.buckets[i] -= then.buckets[i];
    }
    (m, false)
}

/// The pause frames a sender's cumulative counts gained since `then` (all of them when they
/// went back).
fn pause_growth(now: &PauseStats, then: Option<&PauseStats>) -> PauseStats {
    let went_back = |t: &&PauseStats| {
        t.pfc_frames > now.pfc_frames
            || (0..now.frames.len()).any(|c| {
                t.frames[c] > now.frames[c] || t.xon[c] > now.xon[c] || t.quanta[c] > now.quanta[c]
            })
    };
    let Some(then) = then.filter(|t| !went_back(t)) else {
        return *now;
    };
    let mut p = *now;
    for c in 0..p.frames.len() {
        p.frames[c] = now.frames[c].saturating_sub(then.frames[c]);
        p.xon[c] = now.xon[c].saturating_sub(then.xon[c]);
        p.quanta[c] = now.quanta[c].saturating_sub(then.quanta[c]);
    }
    p.pfc_frames -= then.pfc_frames;
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_handed_over_in_several_lists_is_summed_by_flow() {
        let key = |qp: u32| observer_common::FlowKey {
            dest_qp: qp,
            ..Default::default()
        };
        let growth = |qp: u32, packets: u64, dscp: u64| {
            let mut c = Counts::<RECORD_WIDTH>::default();
            c.0[crate::flowbook::PACKETS] = packets;
            let a = Attrs {
                dscp_mask: 1 << dscp,
                ..Default::default()
            };
            (key(qp), c, a)
        };
        // One list: as it is.
        let mut one = Grown::default();
        one.add(vec![growth(1, 5, 26), growth(2, 7, 26)]);
        one.add(Vec::new());
        assert_eq!(one.summed().len(), 2);
        // A drain's, then a retirement's with one of the same flows, then a later interval's.
        let mut first = Grown::default();
        first.add(vec![growth(1, 5, 26), growth(2, 7, 26)]);
        first.add(vec![growth(2, 1, 46)]);
        let mut later = Grown::default();
        later.add(vec![growth(3, 4, 26), growth(1, 2, 26)]);
        first.append(later);
        let mut got: Vec<(u32, u64, u64)> = first
            .summed()
            .into_iter()
            .map(|(k, c, a)| (k.dest_qp, c.0[crate::flowbook::PACKETS], a.dscp_mask))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [(1, 7, 1 << 26), (2, 8, 1 << 26 | 1 << 46), (3, 4, 1 << 26)]
        );
        assert!(Grown::default().is_empty());
        // Many drains held (the builder behind): summed as they come, never more lists kept
        // than LISTS_KEPT, the sums the same.
        let mut held = Grown::default();
        for round in 0..10 {
            held.add(vec![growth(1, 1, 26), growth(100 + round, 1, 26)]);
            assert!(held.lists.len() <= LISTS_KEPT, "{}", held.lists.len());
        }
        let summed = held.summed();
        assert_eq!(summed.len(), 11);
        let one = summed.iter().find(|(k, ..)| k.dest_qp == 1).unwrap();
        assert_eq!(one.1.0[crate::flowbook::PACKETS], 10);
    }

    #[test]
    fn a_histogram_grows_by_its_new_samples_and_starts_over_when_made_again() {
        let mut then = LatHist {
            count: 3,
            sum_ns: 3000,
            ..LatHist::default()
        };
        then.buckets[2] = 3;
        let mut now = then;
        now.count = 5;
        now.sum_ns = 7000;
        now.buckets[4] = 2;
        let g = hist_growth(&now, Some(&then));
        assert_eq!(
            (g.count, g.sum_ns, g.buckets[2], g.buckets[4]),
            (2, 4000, 0, 2)
        );
        let mut again = LatHist {
            count: 1,
            ..LatHist::default()
        };
        again.buckets[0] = 1;
        assert_eq!(hist_growth(&again, Some(&now)), again);
    }

    #[test]
    fn messages_grow_by_the_new_ones_and_start_over_when_made_again() {
        let mut then = MsgStats::default();
        then.record(MsgKind::Send, Some(4096));
        then.record(MsgKind::Write, None);
        let mut now = then;
        now.record(MsgKind::Send, Some(100));
        now.record(MsgKind::Read, Some(1 << 20));
        now.open_pmtu = 1024;
        let (g, from_nothing) = msg_growth(&now, Some(&then));
        assert!(!from_nothing);
        assert_eq!(g.messages(), 2);
        assert_eq!(g.unknown_size, 0);
        assert_eq!(g.bytes.iter().sum::<u64>(), 100 + (1 << 20));
        assert_eq!(g.buckets.iter().sum::<u64>(), 2);
        // The extremes stay the cumulative ones (they bound the interval's); the open SEND is
        // the newest.
        assert_eq!((g.min, g.max, g.open_pmtu), (100, 1 << 20, 1024));
        // Nothing new: nothing.
        let (none, _) = msg_growth(&now, Some(&now));
        assert_eq!((none.messages(), none.unknown_size), (0, 0));
        // An entry made again (evicted, then a new message): all of it is new.
        let mut again = MsgStats::default();
        again.record(MsgKind::Send, Some(64));
        assert_eq!(msg_growth(&again, Some(&now)), (again, true));
        assert_eq!(msg_growth(&again, None), (again, true));
    }

    /// An interval's aggregate whose flows are `keys` (one packet each).
    fn with_flows(keys: &[FlowKey]) -> Aggregate {
        let mut agg = Aggregate::new();
        for k in keys {
            let s = observer_common::FlowStats {
                packets: 1,
                ..Default::default()
            };
            agg.flows.insert(*k, s);
        }
        agg
    }

    fn sends(n: u64, size: u64) -> MsgStats {
        let mut m = MsgStats::default();
        for _ in 0..n {
            m.record(MsgKind::Send, Some(size));
        }
        m
    }

    #[test]
    fn a_message_waits_for_its_flow_and_then_goes_once() {
        let k = FlowKey {
            dest_qp: 7,
            ..Default::default()
        };
        let mut c = Counted::default();
        let counted = |c: &Counted| c.flows[&k].0.messages();
        // Interval 1: two messages, and the flow is there.
        let mut agg = with_flows(&[k]);
        c.interval(&[(k, sends(2, 100))], &mut agg);
        assert_eq!(agg.messages[&k].messages(), 2);
        // Interval 2: a third message whose flow's packets go with interval 3: held.
        let mut agg = with_flows(&[]);
        c.interval(&[(k, sends(3, 100))], &mut agg);
        assert!(agg.messages.is_empty());
        assert_eq!(counted(&c), 2);
        // Interval 3: the flow is there, with a fourth message: both go.
        let mut agg = with_flows(&[k]);
        c.interval(&[(k, sends(4, 100))], &mut agg);
        assert_eq!(agg.messages[&k].messages(), 2);
        assert_eq!(counted(&c), 4);
        // Nothing new: nothing, whether the flow is there or not.
        for flows in [&[k][..], &[]] {
            let mut agg = with_flows(flows);
            c.interval(&[(k, sends(4, 100))], &mut agg);
            assert!(agg.messages.is_empty());
            assert_eq!(counted(&c), 4);
        }
        // A message's bytes read before its count (torn): held for the count.
        let mut torn = sends(4, 100);
        torn.bytes[MsgKind::Send as usize] += 64;
        let mut agg = with_flows(&[k]);
        c.interval(&[(k, torn)], &mut agg);
        assert!(agg.messages.is_empty());
        let mut agg = with_flows(&[k]);
        c.interval(&[(k, sends(5, 100))], &mut agg);
        assert_eq!(agg.messages[&k].messages(), 1);
        // Its count read without its bytes and bucket: held until they are there.
        let mut torn = sends(5, 100);
        torn.count[MsgKind::Send as usize] += 1;
        let mut agg = with_flows(&[k]);
        c.interval(&[(k, torn)], &mut agg);
        assert!(agg.messages.is_empty());
        let mut agg = with_flows(&[k]);
        c.interval(&[(k, sends(6, 100))], &mut agg);
        assert_eq!(agg.messages[&k].messages(), 1);
        assert_eq!(agg.messages[&k].bytes.iter().sum::<u64>(), 100);
        // A key given twice by one read: the first counts.
        let mut agg = with_flows(&[k]);
        c.interval(&[(k, sends(7, 100)), (k, sends(9, 100))], &mut agg);
        assert_eq!(agg.messages[&k].messages(), 1);
        assert_eq!(counted(&c), 7);
        // The entry made again (evicted) while its flow had no row: held from nothing, so
        // when it has passed the old counts all of it still goes.
        let mut agg = with_flows(&[]);
        c.interval(&[(k, sends(1, 64))], &mut agg);
        assert_eq!(c.flows[&k].0, MsgStats::default());
        let mut agg = with_flows(&[k]);
        c.interval(&[(k, sends(6, 64))], &mut agg);
        assert_eq!(agg.messages[&k].messages(), 6);
        // A flow the kernel forgot is forgotten; back, all of it is new.
        let mut agg = with_flows(&[]);
        c.interval(&[], &mut agg);
        assert!(c.flows.is_empty());
        let mut agg = with_flows(&[k]);
        c.interval(&[(k, sends(7, 64))], &mut agg);
        assert_eq!(agg.messages[&k].messages(), 7);
        // A capture's flow deleted: the same.
        c.forget(&k);
        let mut agg = with_flows(&[k]);
        c.interval(&[(k, sends(1, 64))], &mut agg);
        assert_eq!(agg.messages[&k].messages(), 1);
    }

    #[test]
    fn a_mirror_copys_messages_go_with_its_sessions_rows() {
        // Two sessions' copies of one flow: the messages are under every session's together.
        let session = |m: u16| FlowKey {
            dest_qp: 9,
            mirror: 0xC000 | m,
            ..Default::default()
        };
        let union = session(1).union().unwrap();
        assert_eq!(session(2).union(), Some(union));
        let mut c = Counted::default();
        // Only the union's own entry grew (the copies' growth is the next drain's): held.
        let mut agg = with_flows(&[]);
        agg.unions
            .insert(union, observer_common::FlowStats::default());
        c.interval(&[(union, sends(3, 256))], &mut agg);
        assert!(agg.messages.is_empty());
        // A session's copy has a row: they go.
        let mut agg = with_flows(&[session(2)]);
        c.interval(&[(union, sends(3, 256))], &mut agg);
        assert_eq!(agg.messages[&union].messages(), 3);
    }

    #[test]
    fn pause_counts_grow_by_the_new_frames() {
        let mut then = PauseStats::default();
        then.frames[3] = 10;
        then.quanta[3] = 1000;
        then.pfc_frames = 10;
        let mut now = then;
        now.frames[3] = 15;
        now.quanta[3] = 1600;
        now.xon[3] = 1;
        now.pfc_frames = 15;
        let g = pause_growth(&now, Some(&then));
        assert_eq!(
            (g.frames[3], g.quanta[3], g.xon[3], g.pfc_frames),
            (5, 600, 1, 5)
        );
    }
}
