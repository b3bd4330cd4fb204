//! The collector thread: owns the attached observer (or the libpcap capture: [`Tap`]); every
//! interval it drains the kernel maps (or the capture's aggregate)
//! into the flow book, publishes a snapshot and writes the JSON line; between drains it follows
//! link events and the signal handlers' commands (reload, stop).

use std::{
    fs::File,
    io::{BufWriter, Write},
    os::{fd::AsFd, unix::net::UnixStream},
    path::Path,
    sync::{Arc, atomic::Ordering, mpsc},
    time::{Duration, Instant},
};

use observer_common::{IfaceCounters, OpClass, SkipReason};
use serde_json::json;
use tracing::{debug, error, info, warn};

use super::{
    DaemonError, RunConfig, RunOverrides,
    flowbook::{
        BYTES, CE, CNP, Counts, Drained, FlowBook, METRIC_NAMES, NAK, PACKETS, RECORD_WIDTH,
        RNR_NAK,
    },
    http::Health,
    logging::{LogHandle, log_filter},
    netlink,
    nic::NicSide,
    openmetrics::{self, CaptureRow, IfaceRow, MetricsView, flow_fields},
    pauses::PauseBook,
    procfs::{cpu_seconds, resident_bytes},
    records::{Interval, Records},
    signals::Command,
    tap::{TableCursor, Tap},
};
use roce_observer::source::live::{self, IfaceEvent, LiveError, OneLine};

pub(super) fn open_jsonl(path: &Path) -> Result<BufWriter<File>, DaemonError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(BufWriter::new)
        .map_err(|source| DaemonError::Jsonl {
            path: path.to_path_buf(),
            source,
        })
}

/// One interface's cumulative counters.
struct IfaceTrack {
    name: String,
    slot: usize,
    /// The slot's kernel values: cumulative, since the observer zeroes a slot before a new
    /// interface takes it, and keeps them across the interface's re-creation.
    cum: [IfaceCounters; 2],
    /// At the previous drain (for the JSON-lines deltas).
    prev: [IfaceCounters; 2],
    reattachments: u64,
}

fn minus(a: &IfaceCounters, b: &IfaceCounters) -> IfaceCounters {
    let s = |x: u64, y: u64| x.saturating_sub(y);
    let mut d = IfaceCounters {
        frames: s(a.frames, b.frames),
        frame_bytes: s(a.frame_bytes, b.frame_bytes),
        roce_packets: s(a.roce_packets, b.roce_packets),
        roce_bytes: s(a.roce_bytes, b.roce_bytes),
        ..IfaceCounters::default()
    };
    for i in 0..4 {
        d.ecn[i] = s(a.ecn[i], b.ecn[i]);
    }
    for i in 0..OpClass::COUNT {
        d.ops[i] = s(a.ops[i], b.ops[i]);
    }
    d
}

/// The per-flow metrics the kernel also counts per interface.
fn totalled(c: &IfaceCounters) -> Counts {
    let mut t = Counts::default();
    t.0[PACKETS] = c.roce_packets;
    t.0[BYTES] = c.roce_bytes;
    t.0[CE] = c.ecn[3];
    t.0[CNP] = c.ops[OpClass::Cnp as usize];
    t.0[NAK] = c.ops[OpClass::Nak as usize];
    t.0[RNR_NAK] = c.ops[OpClass::RnrNak as usize];
    t
}

fn iface_json(name: &str, dir: &str, d: &IfaceCounters) -> serde_json::Value {
    json!({
        "iface": name,
        "dir": dir,
        "frames": d.frames,
        "frame_bytes": d.frame_bytes,
        "packets": d.roce_packets,
        "bytes": d.roce_bytes,
        "ecn": {"not_ect": d.ecn[0], "ect1": d.ecn[1], "ect0": d.ecn[2], "ce": d.ecn[3]},
        "cnp_packets": d.ops[OpClass::Cnp as usize],
        "nak_packets": d.ops[OpClass::Nak as usize],
        "rnr_nak_packets": d.ops[OpClass::RnrNak as usize],
    })
}

fn counts_json(c: &Counts) -> serde_json::Map<String, serde_json::Value> {
    METRIC_NAMES
        .iter()
        .zip(c.0)
        .map(|((name, _), v)| (name.to_string(), v.into()))
        .collect()
}

/// The collector thread's state.
pub(super) struct Collector {
    /// The kernel programs, or a libpcap capture.
    tap: Tap,
    config: RunConfig,
    args: RunOverrides,
    jsonl: Option<BufWriter<File>>,
    publisher: openmetrics::Publisher,
    health: Arc<Health>,
    log: LogHandle,
    book: Book,
    /// The fleet records' export (`--otlp-endpoint`).
    records: Option<Records>,
    /// How the drains read the kernel's flow table (the whole of it, or what was written).
    table: TableCursor,
    ifaces: Vec<IfaceTrack>,
    /// Cumulative totals of interfaces no longer observed.
    removed: Counts,
    drains: u64,
    reloads_ok: u64,
    reloads_failed: u64,
    last_drain: Instant,
    /// The same, on the wall clock: the JSON lines' interval bounds.
    last_drain_unix_ns: u64,
    /// Interfaces a reload named that do not exist yet: attached when they appear.
    pending: Vec<String>,
    /// The last re-attach error per interface (logged once per reason).
    attach_errors: std::collections::HashMap<String, String>,
    /// The NIC side, read at each drain.
    nic: NicSide,
    /// PAUSE / PFC frames on the wire.
    pauses: PauseBook,
    /// Training jobs (with a capture and `jobs`): when the open window began, and what the
    /// windows found.
    jobs_window_start: Instant,
    jobs: Option<crate::jobs::JobsView>,
    /// The kernel memory of the observer's BPF maps (name, bytes), read once: they are
    /// preallocated when the programs load.
    kernel_maps: Vec<(String, u64)>,
}

impl Collector {
    /// `attached`: when the tap began counting (the attach, or the capture's opening): the
    /// first interval runs from then.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        tap: Tap,
        attached: (Instant, u64),
        config: RunConfig,
        args: RunOverrides,
        jsonl: Option<BufWriter<File>>,
        records: Option<Records>,
        publisher: openmetrics::Publisher,
        health: Arc<Health>,
        log: LogHandle,
    ) -> Self {
        let (series, idle) = (config.max_series, config.idle_drains());
        let book = match records {
            Some(_) => Book::Records(Box::new(FlowBook::new(series, idle))),
            None => Book::Metrics(Box::new(FlowBook::new(series, idle))),
        };
        let nic = NicSide::new(&config);
        let kernel_maps = match &tap {
            Tap::Kernel(_) => match roce_observer::source::live::memory::open_maps(None) {
                // One sample per name: maps of one name (were there any) summed.
                Ok(maps) => {
                    let mut by_name: std::collections::BTreeMap<String, u64> = Default::default();
                    for m in maps {
                        *by_name.entry(m.name).or_default() += m.bytes;
                    }
                    by_name.into_iter().collect()
                }
                Err(e) => {
                    warn!("cannot read the kernel memory of the BPF maps: {e}");
                    Vec::new()
                }
            },
            _ => Vec::new(),
        };
        let mut c = Self {
            tap,
            config,
            args,
            jsonl,
            publisher,
            health,
            log,
            book,
            records,
            table: TableCursor::default(),
            ifaces: Vec::new(),
            removed: Counts::default(),
            drains: 0,
            reloads_ok: 0,
            reloads_failed: 0,
            last_drain: attached.0,
            last_drain_unix_ns: attached.1,
            pending: Vec::new(),
            attach_errors: std::collections::HashMap::new(),
            nic,
            pauses: PauseBook::default(),
            jobs_window_start: attached.0,
            jobs: None,
            kernel_maps,
        };
        c.sync_ifaces();
        c
    }

    /// Tracks the observer's interfaces: a slot taken by another interface starts from the
    /// slot's current values.
    fn sync_ifaces(&mut self) {
        let now: Vec<(usize, String)> = self
            .tap
            .interfaces()
            .into_iter()
            .map(|i| (i.slot, i.name))
            .collect();
        let mut gone = Vec::new();
        self.ifaces.retain(|t| {
            let keep = now.iter().any(|(s, n)| *s == t.slot && *n == t.name);
            if !keep {
                gone.push(t.cum);
            }
            keep
        });
        for cum in gone {
            for dir in &cum {
                self.removed.add(&totalled(dir));
            }
        }
        for (slot, name) in now {
            if !self.ifaces.iter().any(|t| t.slot == slot) {
                // The observer zeroed the slot's counters before attaching to it.
                self.ifaces.push(IfaceTrack {
                    name,
                    slot,
                    cum: [IfaceCounters::default(); 2],
                    prev: [IfaceCounters::default(); 2],
                    reattachments: 0,
                });
            }
        }
        self.ifaces.sort_by(|a, b| a.name.cmp(&b.name));
    }

    pub(super) fn run(
        mut self,
        rx: mpsc::Receiver<Command>,
        mut wake: UnixStream,
    ) -> Result<(), DaemonError> {
        let netlink = netlink::link_events();
        if netlink.is_none() {
            debug!("no netlink link events: interfaces are checked once per interval");
        }
        let mut next = Instant::now() + self.config.interval;
        loop {
            let timeout = next.saturating_duration_since(Instant::now());
            let (link_event, woken) =
                netlink::wait(netlink.as_ref().map(|f| f.as_fd()), wake.as_fd(), timeout);
            if woken {
                let mut buf = [0u8; 64];
                while matches!(std::io::Read::read(&mut wake, &mut buf), Ok(n) if n > 0) {}
            }
            if link_event {
                if let Some(fd) = &netlink {
                    netlink::drain_socket(fd.as_fd());
                }
                self.check_interfaces();
            }
            while let Ok(cmd) = rx.try_recv() {
                match cmd {
                    Command::Stop(signal) => return self.stop(signal),
                    Command::Reload => {
                        let interval = self.config.interval;
                        self.reload();
                        if self.config.interval != interval {
                            next = Instant::now() + self.config.interval;
                        }
                    }
                }
            }
            if Instant::now() >= next {
                self.check_interfaces();
                if let Err(e) = self.drain() {
                    error!("{}", OneLine(&e));
                }
                next += self.config.interval;
                if next < Instant::now() {
                    next = Instant::now() + self.config.interval;
                }
            }
        }
    }

    fn stop(mut self, signal: &str) -> Result<(), DaemonError> {
        let nothing = self.tap.is_nothing();
        info!(
            "{signal}: {}",
            if nothing { "stopping" } else { "detaching" }
        );
        let detached = self.tap.detach();
        // After detaching, the last drain races no packet.
        let drained = self.drain();
        if detached.is_ok() && drained.is_ok() {
            if nothing {
                info!("final counters published; exiting");
            } else {
                info!("detached from every interface; final counters published; exiting");
            }
        }
        // The last interval's records go out (or are counted as not delivered) before exiting.
        if let Some(records) = self.records.take() {
            records.finish();
        }
        detached?;
        drained
    }

    fn check_interfaces(&mut self) {
        let mut events = self.tap.check_interfaces();
        let mut appeared = false;
        for iface in std::mem::take(&mut self.pending) {
            match self.tap.add_interface(&iface) {
                Ok(_) => {
                    info!(%iface, "interface appeared: attached");
                    appeared = true;
                }
                Err(LiveError::UnknownInterface(_)) => self.pending.push(iface),
                Err(e) => events.push(IfaceEvent::ReattachFailed {
                    iface,
                    error: OneLine(&e).to_string(),
                }),
            }
        }
        if appeared {
            self.sync_ifaces();
        }
        let changed = !events.is_empty() || appeared;
        for event in events {
            match event {
                IfaceEvent::Gone { iface } => {
                    warn!(%iface, "interface gone; will re-attach when it comes back")
                }
                IfaceEvent::Reattached { iface, ifindex } => {
                    self.attach_errors.remove(&iface);
                    if let Some(t) = self.ifaces.iter_mut().find(|t| t.name == iface) {
                        t.reattachments += 1;
                    }
                    info!(%iface, ifindex, "interface re-created: re-attached")
                }
                IfaceEvent::ReattachFailed { iface, error } => {
                    // Tried again at every check: logged when the reason changes.
                    if self.attach_errors.get(&iface) != Some(&error) {
                        error!(%iface, "cannot re-attach: {error}");
                        self.attach_errors.insert(iface, error);
                    }
                }
                IfaceEvent::Link { iface, up } => {
                    if up {
                        info!(%iface, "link up")
                    } else {
                        warn!(%iface, "link down")
                    }
                }
            }
        }
        if changed {
            self.nic.interfaces_changed();
            // The endpoint shows the states at once, not at the next drain.
            let rows = self.iface_rows();
            let published = self.publisher.update(|s| {
                for row in rows {
                    match s.interfaces.iter_mut().find(|r| r.name == row.name) {
                        Some(r) => {
                            r.attached = row.attached;
                            r.up = row.up;
                            r.reattachments = row.reattachments;
                        }
                        None => s.interfaces.push(row),
                    }
                }
            });
            if published.is_err() {
                error!("cannot encode the metrics");
            }
        }
    }

    /// The interfaces' states and cumulative counters.
    fn iface_rows(&self) -> Vec<IfaceRow> {
        let pending = self.pending.iter().map(|name| IfaceRow {
            name: name.clone(),
            ..IfaceRow::default()
        });
        self.ifaces
            .iter()
            .map(|t| {
                let attached = self
                    .tap
                    .interfaces()
                    .iter()
                    .any(|i| i.slot == t.slot && i.attached);
                IfaceRow {
                    name: t.name.clone(),
                    attached,
                    up: self.tap.link_up(t.slot),
                    reattachments: t.reattachments,
                    counters: t.cum,
                }
            })
            .chain(pending)
            .collect()
    }

    fn reload(&mut self) {
        let new = match RunConfig::load(&self.args) {
            Ok(c) => c,
            Err(e) => {
                self.reloads_failed += 1;
                error!(
                    "reload failed, keeping the running configuration: {}",
                    OneLine(&e)
                );
                return;
            }
        };
        for what in self.config.fixed_changes(&new) {
            warn!("reload: {what} changes only with a restart; keeping the running value");
        }
        let old: Vec<String> = self.tap.configured();
        // Between XDP interfaces, a capture and the NIC side alone, or from one capture to
        // another, only a restart changes (said above): the interfaces stay as they are.
        let same_source =
            matches!(self.tap, Tap::Kernel(_)) && new.capture.is_none() && !new.nic_only();
        let wanted: &[String] = if same_source { &new.ifaces } else { &old };
        self.pending.retain(|i| wanted.contains(i));
        for iface in old.iter().filter(|i| !wanted.contains(i)) {
            // Its counts up to now stay in the totals.
            if let Some(t) = self.ifaces.iter_mut().find(|t| t.name == *iface)
                && let Ok(now) = self.tap.iface_counters(t.slot)
            {
                t.cum = now;
            }
            match self.tap.remove_interface(iface) {
                Ok(()) => info!(%iface, "reload: detached"),
                Err(e) => error!(%iface, "reload: {}", OneLine(&e)),
            }
        }
        let mut failed = false;
        for iface in wanted.iter().filter(|i| !old.contains(i)) {
            match self.tap.add_interface(iface) {
                Ok(_) => info!(%iface, "reload: attached"),
                Err(LiveError::UnknownInterface(_)) => {
                    if !self.pending.contains(iface) {
                        self.pending.push(iface.clone());
                    }
                    warn!(%iface, "reload: no such interface yet; attaching when it appears");
                }
                Err(e) => {
                    failed = true;
                    error!(%iface, "reload: {}", OneLine(&e))
                }
            }
        }
        self.sync_ifaces();
        match &mut self.book {
            Book::Metrics(b) => b.set_limits(new.max_series, new.idle_drains()),
            Book::Records(b) => b.set_limits(new.max_series, new.idle_drains()),
        }
        self.health
            .interval_ns
            .store(new.interval.as_nanos() as u64, Ordering::Relaxed);
        if new.log_level != self.config.log_level
            && let Err(e) = self.log.reload(log_filter(new.log_level.as_deref()))
        {
            error!("reload: log level: {e}");
        }
        // Re-opened every time: log rotation moves the file away and sends SIGHUP.
        self.jsonl = match new.jsonl.as_deref().map(open_jsonl).transpose() {
            Ok(j) => j,
            Err(e) => {
                failed = true;
                error!("reload: {}", OneLine(&e));
                None
            }
        };
        let keep = self.config.clone();
        // Between the NIC side alone and interfaces only a restart changes (said above): the
        // NIC side's selection stays with what is observed.
        let new = if keep.nic_only() == new.nic_only() {
            new
        } else {
            RunConfig {
                rdma_devices: keep.rdma_devices.clone(),
                netdevs: keep.netdevs.clone(),
                all_rdma_devices: keep.all_rdma_devices,
                ..new
            }
        };
        self.config = RunConfig {
            listen: keep.listen,
            vantage: keep.vantage,
            max_flows: keep.max_flows,
            xdp_mode: keep.xdp_mode,
            tc_hook: keep.tc_hook,
            ifaces: if same_source { new.ifaces } else { keep.ifaces },
            capture: keep.capture,
            // The export and the jobs' windows are set up at start only (said above when
            // they changed).
            otlp: keep.otlp,
            jobs: keep.jobs,
            ..new
        };
        self.nic.configure(&self.config);
        if failed {
            self.reloads_failed += 1;
        } else {
            self.reloads_ok += 1;
            info!(
                interfaces = ?self.config.ifaces,
                interval = ?self.config.interval,
                max_series = self.config.max_series,
                "configuration reloaded"
            );
        }
    }

    /// One interval: reads the interface counters, then the flow table and cache; ages idle
    /// flows; publishes the snapshot and the JSON line.
    pub(super) fn drain(&mut self) -> Result<(), DaemonError> {
        let started = Instant::now();
        let elapsed = started.duration_since(self.last_drain);
        // Moved on once the drain has gone through: after a failed one the next interval
        // starts where the last good one ended.
        let (start_unix_ns, end_unix_ns) = (self.last_drain_unix_ns, live::unix_ns());
        // Interface counters first: the flows read afterwards hold at least what they count.
        let mut totals = self.removed;
        for t in &mut self.ifaces {
            let now = self.tap.iface_counters(t.slot)?;
            t.prev = t.cum;
            t.cum = now;
            for dir in &t.cum {
                totals.add(&totalled(dir));
            }
        }
        let mut drained = match &mut self.book {
            Book::Metrics(b) => drain_book(&self.tap, b.as_mut(), &mut self.table, &totals)?,
            Book::Records(b) => drain_book(&self.tap, b.as_mut(), &mut self.table, &totals)?,
        };
        // The book has moved on: its growth is the records' now, whatever fails below (it goes
        // with the next interval handed over).
        if let Some(records) = &mut self.records {
            records.add_growth(std::mem::take(&mut drained.grown));
        }
        // Latency: the kernel's histograms are cumulative; the interfaces' by index.
        let mut lat = roce_observer::aggregate::Aggregate::new();
        self.tap.read_latency(&mut lat)?;
        // The messages, cumulative too, for the records alone (the metrics have none).
        let mut messages = Vec::new();
        if let Some(records) = &mut self.records {
            messages.reserve(records.messages_read);
            self.tap.read_messages(&mut messages)?;
            records.messages_read = messages.len();
            records.latency_read();
        }
        let names = self.tap.names();
        let latency = lat
            .latency_scopes
            .iter()
            .map(|(k, h)| openmetrics::LatRow {
                iface: names
                    .get(&k.ifindex)
                    .cloned()
                    .unwrap_or_else(|| format!("ifindex-{}", k.ifindex)),
                side: roce_observer::model::connections::side_name(observer_common::LatSide::of(
                    k.side,
                )),
                kind: k.kind,
                hist: *h,
            })
            .collect();
        // One series per requester direction: a flow seen in several mirror sessions has one
        // latency (every session's together), on its first series.
        let mut exported = std::collections::HashSet::new();
        let qp_latency = drained
            .series
            .iter()
            .filter_map(|r| {
                let key = observer_common::LatKey::of_request(&r.key);
                let state = lat.latency.get(&key)?;
                exported.insert(key).then_some((r.key, state.hist))
            })
            .collect();
        // Idle flows: deleted with their last values (nothing lost in between).
        match &mut self.book {
            Book::Metrics(b) => {
                retire_idle(&self.tap, b.as_mut())?;
            }
            Book::Records(b) => {
                let retired = retire_idle(&self.tap, b.as_mut());
                if let Some(records) = &mut self.records {
                    records.add_growth(b.take_retired_growth());
                    // A capture's latency states and messages go with their flows (the
                    // kernel's stay).
                    if self.tap.capture().is_some() {
                        for key in retired.as_deref().unwrap_or_default() {
                            records.forget_flow(*key);
                        }
                    }
                }
                retired?;
            }
        }
        let mut skipped = [0u64; SkipReason::COUNT];
        let counters = self.tap.read_counters()?;
        skipped.copy_from_slice(&counters.skipped);
        let pauses = self.tap.read_pauses()?;
        self.pauses.update(&pauses, self.tap.link_speed());
        self.drains += 1;
        let drain_seconds = started.elapsed().as_secs_f64();
        // The NIC side (sysfs, ioctls, netlink): not the kernel maps' drain time.
        self.nic.read();
        let interfaces = self.iface_rows();
        let capture = self.tap.capture().map(|c| {
            let s = c.stats();
            CaptureRow {
                device: c.config().device.clone(),
                received: s.received,
                dropped: s.dropped,
                if_dropped: s.if_dropped,
            }
        });
        // A jobs window that has ended: its jobs.
        if let (Some(settings), Some(cap)) = (self.config.jobs, self.tap.capture())
            && started.duration_since(self.jobs_window_start) >= settings.window
        {
            self.jobs_window_start = started;
            if let Some((end, kinds, began)) = cap.roll_jobs() {
                self.jobs.get_or_insert_with(Default::default).window(
                    end,
                    &kinds,
                    (began, end_unix_ns),
                );
            }
        }
        let snapshot = MetricsView {
            mode: self.tap.mode(),
            egress: self.tap.egress(),
            interfaces,
            series: drained.series,
            rest: drained.rest,
            interval_seconds: self.config.interval.as_secs_f64(),
            max_series: self.config.max_series,
            drain_seconds,
            drains: self.drains,
            table_entries: drained.table_entries,
            table_capacity: self.config.max_flows,
            flows: drained.flows,
            evictions: drained.evictions,
            unattributed_packets: drained.unattributed_packets,
            aged: drained.aged,
            demotions: drained.demotions,
            cpu_seconds: cpu_seconds(),
            resident_bytes: resident_bytes(),
            kernel_maps: self.kernel_maps.clone(),
            skipped,
            reloads_ok: self.reloads_ok,
            reloads_failed: self.reloads_failed,
            latency,
            qp_latency,
            connections: drained.connections,
            capture,
            spread_dropped: counters.spread_dropped,
            nic: self.nic.metrics(),
            pfc: self.pauses.rows(),
            export: self.records.as_mut().and_then(Records::row),
            jobs: self
                .config
                .jobs
                .map(|_| self.jobs.clone().unwrap_or_default()),
        };
        self.last_drain = started;
        self.last_drain_unix_ns = end_unix_ns;
        if let Some(w) = self.jsonl.as_mut() {
            let line = json_line(
                &snapshot,
                &self.ifaces,
                &drained.rest_delta,
                (start_unix_ns, end_unix_ns),
                elapsed,
            );
            let written = serde_json::to_writer(&mut *w, &line)
                .map_err(std::io::Error::other)
                .and_then(|()| w.write_all(b"\n"))
                .and_then(|()| w.flush());
            if let Err(e) = written {
                error!("cannot write the JSON-lines file: {e}");
            }
        }
        debug!(
            drain_ms = drain_seconds * 1e3,
            flows = drained.flows,
            table = drained.table_entries,
            whole_table = self.table.whole,
            series = snapshot.series.len(),
            "drained"
        );
        if self.publisher.publish(snapshot).is_err() {
            error!("cannot encode the metrics");
        }
        // After publishing; the builder thread makes the rows.
        if let Some(records) = &mut self.records {
            records.interval(Interval {
                latency: std::mem::take(&mut lat.latency).into_iter().collect(),
                messages,
                scopes: std::mem::take(&mut lat.latency_scopes),
                pauses,
                names,
                link_speed: self.tap.link_speed(),
                bounds: (start_unix_ns, end_unix_ns),
                seconds: elapsed.as_secs_f64(),
                job_and_rank: self.nic.job_and_rank(),
                // Taken from what was added since the last interval.
                ..Interval::default()
            });
        }
        self.health
            .last_drain_ns
            .store(live::monotonic_ns(), Ordering::Relaxed);
        Ok(())
    }
}

/// The flow book: the metrics' counts alone, or every counter of a flow that adds up, when
/// each drain's growth leaves as fleet records.
enum Book {
    Metrics(Box<FlowBook>),
    Records(Box<FlowBook<RECORD_WIDTH>>),
}

/// One drain of the flow table and cache into `book`.
fn drain_book<const N: usize>(
    tap: &Tap,
    book: &mut FlowBook<N>,
    table: &mut TableCursor,
    totals: &Counts,
) -> Result<Drained, DaemonError> {
    book.begin();
    tap.read_flows(book, table)?;
    Ok(book.finish(totals))
}

/// Idle flows: deleted with their last values (nothing lost in between); the flows retired.
fn retire_idle<const N: usize>(
    tap: &Tap,
    book: &mut FlowBook<N>,
) -> Result<Vec<observer_common::FlowKey>, DaemonError> {
    let idle = book.idle();
    for key in &idle {
        let last = tap.take_flow(key)?;
        book.retire(key, last.as_deref());
    }
    Ok(idle)
}

/// The JSON line of a drain: its snapshot's deltas (`rest_delta`: the rest's) over the
/// interval `bounds` (unix ns: the last drain, or the attach, to this one) that took `elapsed`
/// on the monotonic clock.
fn json_line(
    s: &MetricsView,
    ifaces: &[IfaceTrack],
    rest_delta: &Counts,
    bounds: (u64, u64),
    elapsed: Duration,
) -> serde_json::Value {
    let dirs: &[(usize, &str)] = if s.egress {
        &[(0, "rx"), (1, "tx")]
    } else {
        &[(0, "rx")]
    };
    let mut interfaces = Vec::new();
    for t in ifaces {
        for (d, dir) in dirs {
            interfaces.push(iface_json(&t.name, dir, &minus(&t.cum[*d], &t.prev[*d])));
        }
    }
    let qps: Vec<serde_json::Value> = s
        .series
        .iter()
        .filter(|r| !r.delta.is_zero())
        .map(|r| {
            let mut o: serde_json::Map<String, serde_json::Value> =
                flow_fields(&r.key, r.key.dest_qp.to_string())
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.into()))
                    .collect();
            // Numbers stay numbers here (the labels are strings only for Prometheus).
            o.insert("qp".into(), r.key.dest_qp.into());
            o.insert("sport".into(), r.key.udp_src_port.into());
            o.extend(counts_json(&r.delta));
            o.into()
        })
        .collect();
    json!({
        "time": bounds.1 as f64 / 1e9,
        "start_unix_ns": bounds.0,
        "end_unix_ns": bounds.1,
        "interval_seconds": elapsed.as_secs_f64(),
        "interfaces": interfaces,
        "qps": qps,
        "rest": counts_json(rest_delta),
        "observer": {
            "drain_seconds": s.drain_seconds,
            "flows_tracked": s.flows,
            "flow_table_entries": s.table_entries,
            "flow_table_capacity": s.table_capacity,
            "flow_evictions": s.evictions,
            "unattributed_packets": s.unattributed_packets,
            "flows_aged": s.aged,
            "series_demotions": s.demotions,
            "series": s.series.len(),
            "cpu_seconds": s.cpu_seconds,
            "resident_bytes": s.resident_bytes,
            "capture": s.capture.as_ref().map(|c| json!({
                "device": c.device,
                "received": c.received,
                "dropped": c.dropped,
                "if_dropped": c.if_dropped,
            })),
        },
    })
}
