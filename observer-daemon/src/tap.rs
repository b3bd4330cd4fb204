//! What the collector drains: the kernel programs' maps on attached interfaces, or the aggregate
//! a libpcap capture fills (`--capture DEV`). Both hand over the same things, so one collector,
//! one flow book and one exposition serve either: per-interface counters, the flow table read
//! into the [`FlowBook`], latency, the global counters, idle flows taken out.
//!
//! A capture is read on a thread of its own into the aggregate replay uses (the same parser,
//! the same per-flow update); the drain reads that aggregate as it reads the kernel table, one
//! value per flow. A capture whose device goes away is opened again at the next check, its
//! counts going on.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use observer_common::{Counters, FlowKey, FlowStats, IfaceCounters, LatKey, PauseKey, PauseStats};
use tracing::warn;

use roce_observer::{
    aggregate::Aggregate,
    analysis::{jobs, series::TimelineEnd},
    source::{
        capture::{Capture, CaptureConfig, CaptureError, CaptureStats, Captured, Running},
        live::{self, IfaceEvent, LiveError, Observer, OneLine},
    },
};

use super::{
    DaemonError, RunConfig,
    config::JobsSettings,
    flowbook::{FlowBook, Reading},
    jobs::JobsTap,
    records::Messages,
};

/// Threads reading the kernel's flow table side by side, at most.
const TABLE_READERS: usize = 4;

/// Drains that may read only the flow log before one reads the whole table again. The log is
/// exact on its own (see [`TableCursor`]); this bounds what a missed write could cost (the
/// kernel orders the log's stores by program order only, which only a strongly ordered CPU
/// keeps for the reader).
const WHOLE_TABLE_EVERY: u32 = 30;

/// Free entries per possible CPU (and one more) the kernel's LRU table may hold back while
/// already evicting: it evicts once its global free list has fewer than the 128 entries a CPU
/// takes at a time, while each CPU's own list keeps up to 128 (kernel/bpf/bpf_lru_list.c);
/// twice that, as a margin.
const LRU_HELD_PER_CPU: u64 = 256;

/// A table of more entries than this many times the keys written since the last drain is read
/// by looking those keys up (a syscall each); a smaller one in a walk.
const LOOKUPS_PER_WALK: usize = 4;

/// How the drains read the kernel's flow table. The kernel logs every key it writes back from
/// its cache to the table (`FLOW_LOG`: the only writes to a flow's counts there, a mirror
/// copy's every-session analysis included), so a drain can look up just the keys written since
/// the last one, and
/// take every other entry as unchanged; the table cannot have evicted one while it had room
/// for every key written since (counted with repeats), so none is gone either. Otherwise
/// (the first drain, a log overwritten before it was read, a table near full, a drain done again
/// after a failure, and every
/// [`WHOLE_TABLE_EVERY`] drains) a drain reads the whole table.
#[derive(Debug, Default)]
pub(super) struct TableCursor {
    /// Keys each CPU had written to the log when the last drain began reading the table.
    written: Option<Vec<u64>>,
    /// Drains since the last one that read the whole table.
    since_whole: u32,
    /// The last drain read the whole table.
    pub whole: bool,
}

/// One observed interface (or capture device): its counters' slot, name, the index its latency
/// scopes carry, and whether the observer is on it now.
pub(super) struct TapIface {
    pub slot: usize,
    pub name: String,
    pub ifindex: u32,
    pub attached: bool,
}

/// The kernel programs, a libpcap capture, or nothing: the NIC side alone (an offload host,
/// whose RDMA netdev XDP would see no RoCE on), with every wire reading empty.
pub(super) enum Tap {
    Kernel(Observer),
    Capture(CaptureTap),
    Nothing,
}

/// A device captured through libpcap, opened again when it comes back after going away.
pub(super) struct CaptureTap {
    config: CaptureConfig,
    shared: Arc<Mutex<Captured<JobsTap>>>,
    /// None while the device is gone (or failed).
    running: Option<Running<JobsTap>>,
    /// The device's operational state (a network interface's; an RDMA device has none).
    up: Option<bool>,
}

impl CaptureTap {
    /// Opens the device and starts reading it. A device libpcap cannot open now (an interface
    /// that is down) is opened at a later check; one that does not exist, a filter that does
    /// not compile, missing privileges and a link type without RoCE are errors.
    pub(super) fn open(
        config: CaptureConfig,
        jobs: Option<JobsSettings>,
    ) -> Result<Self, CaptureError> {
        let shared = Arc::new(Mutex::new(Captured::observed(
            &config.device,
            JobsTap::new(jobs),
        )));
        let running = match Capture::open(&config) {
            Ok(c) => Some(Running::start(c, shared.clone())?),
            Err(e @ CaptureError::Open { .. }) => {
                warn!(iface = %config.device, "{}; opening it again at each check", OneLine(&e));
                None
            }
            Err(e) => return Err(e),
        };
        let up = live::link_up(&config.device);
        Ok(Self {
            config,
            shared,
            running,
            up,
        })
    }

    pub(super) fn config(&self) -> &CaptureConfig {
        &self.config
    }

    /// The capture filter in use (the default's form for the link type), or as configured
    /// while the device is not open.
    pub(super) fn filter(&self) -> Option<&str> {
        match &self.running {
            Some(r) => r.info().filter.as_deref(),
            None => self.config.filter.as_deref(),
        }
    }

    fn counts(&self) -> MutexGuard<'_, Captured<JobsTap>> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// With jobs: the window's timeline ended on the flow table as it is now, the flows'
    /// kinds, and when the window began (a new window starts with the next frame). Under the capture's lock: a walk of
    /// the flow table, no copy of it.
    pub(super) fn roll_jobs(&self) -> Option<(TimelineEnd, jobs::Kinds, u64)> {
        let mut c = self.counts();
        let (timeline, began) = c.observer.roll()?;
        Some((
            timeline.finish(&c.agg),
            jobs::kinds_of_aggregate(&c.agg),
            began,
        ))
    }

    fn reading(&self) -> bool {
        self.running.as_ref().is_some_and(|r| !r.is_finished())
    }

    /// A capture that ended is gone; one gone is opened again; and the link state.
    fn check(&mut self) -> Vec<IfaceEvent> {
        let iface = self.config.device.clone();
        let mut events = Vec::new();
        if let Some(mut r) = self.running.take_if(|r| r.is_finished()) {
            if let Err(e) = r.stop() {
                warn!(%iface, "the capture ended: {}", OneLine(&e));
            }
            events.push(IfaceEvent::Gone {
                iface: iface.clone(),
            });
        }
        if self.running.is_none() {
            match Capture::open(&self.config).and_then(|c| Running::start(c, self.shared.clone())) {
                Ok(r) => {
                    self.running = Some(r);
                    events.push(IfaceEvent::Reattached {
                        ifindex: live::if_index(&iface).unwrap_or(0),
                        iface: iface.clone(),
                    });
                }
                Err(e) => events.push(IfaceEvent::ReattachFailed {
                    iface: iface.clone(),
                    error: OneLine(&e).to_string(),
                }),
            }
        }
        let up = live::link_up(&iface);
        if up != self.up {
            if let (Some(up), Some(_)) = (up, self.up) {
                events.push(IfaceEvent::Link { iface, up });
            }
            self.up = up;
        }
        events
    }

    /// libpcap's counters, summed over every time the device was opened.
    pub(super) fn stats(&self) -> CaptureStats {
        self.counts().stats
    }
}

/// The keys written to the flow table since `from` (deduplicated), when looking them up makes an
/// exact drain ([`TableCursor`]) and costs less than a walk; `None` when the drain must walk
/// the whole table.
fn logged_keys<const N: usize>(
    o: &Observer,
    book: &FlowBook<N>,
    from: &[u64],
    written: &[u64],
) -> Result<Option<Vec<FlowKey>>, DaemonError> {
    if book.wants_whole_table() {
        return Ok(None);
    }
    // A count that went back is not the log the last drain read.
    if written.iter().zip(from).any(|(w, f)| w < f) {
        return Ok(None);
    }
    let logged: u64 = written.iter().zip(from).map(|(w, f)| w - f).sum();
    let held = LRU_HELD_PER_CPU * (written.len() as u64 + 1);
    let room = u64::from(o.config().max_flows).saturating_sub(book.last_table_entries() as u64);
    if logged.saturating_add(held) > room {
        return Ok(None);
    }
    let Some(mut keys) = live::read_flow_log(o.ebpf(), from, written)? else {
        return Ok(None);
    };
    keys.sort_unstable();
    keys.dedup();
    if keys.len().saturating_mul(LOOKUPS_PER_WALK) > book.last_table_entries().max(1) {
        return Ok(None);
    }
    Ok(Some(keys))
}

impl Tap {
    pub(super) fn mode(&self) -> &'static str {
        match self {
            Self::Kernel(o) => o.config().vantage.name(),
            Self::Capture(_) => "capture",
            Self::Nothing => "nic",
        }
    }

    /// The exporter of this tap's fleet records: what it observes, how, and the RDMA devices
    /// named.
    pub(super) fn resource(&self, config: &RunConfig) -> roce_observer::export::Resource {
        let (observed, kind) = match self {
            Self::Kernel(o) => (o.config().interfaces.clone(), "live"),
            Self::Capture(c) => (vec![c.config().device.clone()], "capture"),
            Self::Nothing => (config.netdevs.clone(), "nic"),
        };
        roce_observer::records::exporter(&observed, kind, &config.rdma_devices)
    }

    /// The `source` of the reports the fleet records are made of.
    pub(super) fn source(&self, config: &RunConfig) -> roce_observer::model::Source {
        use roce_observer::{model::Source, units::Named};
        match self {
            Self::Kernel(o) => {
                let mut s = Source::live(o.config().interfaces.clone(), config.xdp_mode.name());
                s.mode = Some(o.config().vantage.name().to_string());
                s.warnings = o.warnings();
                s
            }
            Self::Capture(c) => Source {
                kind: "capture".into(),
                interfaces: vec![c.config().device.clone()],
                ..Source::nic(Vec::new())
            },
            Self::Nothing => Source::nic(config.netdevs.clone()),
        }
    }

    /// Whether there is a transmit direction (host mode's TC egress).
    pub(super) fn egress(&self) -> bool {
        match self {
            Self::Kernel(o) => o.config().vantage == live::Vantage::Host,
            Self::Capture(_) | Self::Nothing => false,
        }
    }

    pub(super) fn is_nothing(&self) -> bool {
        matches!(self, Self::Nothing)
    }

    pub(super) fn capture(&self) -> Option<&CaptureTap> {
        match self {
            Self::Kernel(_) | Self::Nothing => None,
            Self::Capture(c) => Some(c),
        }
    }

    /// The interfaces the configuration names (a capture's device is no interface of it).
    pub(super) fn configured(&self) -> Vec<String> {
        match self {
            Self::Kernel(o) => o.config().interfaces.clone(),
            Self::Capture(_) | Self::Nothing => Vec::new(),
        }
    }

    pub(super) fn interfaces(&self) -> Vec<TapIface> {
        match self {
            Self::Kernel(o) => o
                .interfaces()
                .map(|(slot, name, ifindex, attached)| TapIface {
                    slot,
                    name: name.to_string(),
                    ifindex,
                    attached: attached && ifindex != 0,
                })
                .collect(),
            // Latency scopes of the aggregate carry interface 0, as in replay.
            Self::Capture(c) => vec![TapIface {
                slot: 0,
                name: c.config.device.clone(),
                ifindex: 0,
                attached: c.reading(),
            }],
            Self::Nothing => Vec::new(),
        }
    }

    /// Interface names by the index latency scopes carry.
    pub(super) fn names(&self) -> HashMap<u32, String> {
        self.interfaces()
            .into_iter()
            .map(|i| (i.ifindex, i.name))
            .collect()
    }

    /// Whether the interface of `slot` is up (a capture of an RDMA device: while it reads).
    pub(super) fn link_up(&self, slot: usize) -> bool {
        match self {
            Self::Kernel(o) => o.link_up(slot).unwrap_or(false),
            Self::Capture(c) => c.up.unwrap_or_else(|| c.reading()),
            Self::Nothing => false,
        }
    }

    /// Cumulative counters of `slot`: [rx, tx] (a capture counts every frame as rx).
    pub(super) fn iface_counters(&self, slot: usize) -> Result<[IfaceCounters; 2], DaemonError> {
        match self {
            Self::Kernel(o) => Ok(o.iface_counters(slot)?),
            Self::Capture(c) => Ok([c.counts().counters, IfaceCounters::default()]),
            Self::Nothing => Ok([IfaceCounters::default(); 2]),
        }
    }

    /// Reads the flow table into `book`: the kernel's table (on a thread per CPU, up to
    /// [`TABLE_READERS`]) and then its cache; or the capture's flows (and mirror sessions' PSN
    /// analyses), one value each.
    pub(super) fn read_flows<const N: usize>(
        &self,
        book: &mut FlowBook<N>,
        cursor: &mut TableCursor,
    ) -> Result<(), DaemonError> {
        match self {
            Self::Kernel(o) => {
                let ebpf = o.ebpf();
                let from = cursor.written.take();
                // Before anything is read: what the kernel writes from here on, the next
                // drain reads again.
                let written = live::flow_log_written(ebpf)?;
                let keys = match from {
                    Some(from) if cursor.since_whole + 1 < WHOLE_TABLE_EVERY => {
                        logged_keys(o, book, &from, &written)?
                    }
                    _ => None,
                };
                cursor.whole = keys.is_none();
                match keys {
                    Some(keys) => {
                        live::read_flow_entries(ebpf, &keys, Reading::of, |key, r| match r {
                            Some(r) => book.table_reading(&r),
                            None => book.table_missing(key),
                        })?;
                        book.carry_unread();
                        cursor.since_whole += 1;
                    }
                    None => {
                        let readers = std::thread::available_parallelism()
                            .map_or(1, |n| n.get())
                            .min(TABLE_READERS);
                        live::read_flow_table(ebpf, readers, Reading::of, |r| {
                            book.table_reading(&r)
                        })?;
                        cursor.since_whole = 0;
                    }
                }
                live::read_flow_cache(ebpf, |key, stats| book.cache_slot(key, stats))?;
                cursor.written = Some(written);
                Ok(())
            }
            Self::Capture(c) => {
                let counts = c.counts();
                for (key, stats) in counts.agg.flows.iter().chain(&counts.agg.unions) {
                    book.table_entry(key, std::slice::from_ref(stats));
                }
                Ok(())
            }
            Self::Nothing => Ok(()),
        }
    }

    /// Adds the latency states and per-interface histograms to `agg`.
    pub(super) fn read_latency(&self, agg: &mut Aggregate) -> Result<(), DaemonError> {
        match self {
            Self::Kernel(o) => Ok(live::read_latency(o.ebpf(), agg)?),
            Self::Capture(c) => {
                let counts = c.counts();
                for (key, state) in &counts.agg.latency {
                    agg.merge_latency(*key, state);
                }
                for (key, hist) in &counts.agg.latency_scopes {
                    agg.merge_latency_scope(*key, hist);
                }
                Ok(())
            }
            Self::Nothing => Ok(()),
        }
    }

    /// Appends the messages of every flow (the kernel's, or the capture's), cumulative, to
    /// `out`.
    pub(super) fn read_messages(&self, out: &mut Messages) -> Result<(), DaemonError> {
        match self {
            Self::Kernel(o) => Ok(live::read_message_list(o.ebpf(), out)?),
            Self::Capture(c) => {
                out.extend(c.counts().agg.messages.iter().map(|(k, m)| (*k, *m)));
                Ok(())
            }
            Self::Nothing => Ok(()),
        }
    }

    /// Deletes an idle flow: its last values, none when it is not there. A capture's flow
    /// takes its messages and the latency state of its requests along (the kernel's bounded
    /// tables age those out by themselves).
    pub(super) fn take_flow(&self, key: &FlowKey) -> Result<Option<Vec<FlowStats>>, DaemonError> {
        match self {
            Self::Kernel(o) => Ok(live::take_flow(o.ebpf(), key)?),
            Self::Capture(c) => {
                let mut counts = c.counts();
                let agg = &mut counts.agg;
                let taken = agg.flows.remove(key).or_else(|| agg.unions.remove(key));
                agg.messages.remove(key);
                agg.latency.remove(&LatKey::of_request(key));
                Ok(taken.map(|s| vec![s]))
            }
            Self::Nothing => Ok(None),
        }
    }

    /// The global counters (skip reasons and all).
    pub(super) fn read_counters(&self) -> Result<Counters, DaemonError> {
        match self {
            Self::Kernel(o) => Ok(live::read_counters(o.ebpf())?),
            Self::Capture(c) => Ok(c.counts().agg.counters),
            Self::Nothing => Ok(Counters::default()),
        }
    }

    /// The pause table: PAUSE / PFC frames per sender (the kernel's, summed over CPUs; or the
    /// capture's).
    pub(super) fn read_pauses(&self) -> Result<BTreeMap<PauseKey, PauseStats>, DaemonError> {
        match self {
            Self::Kernel(o) => Ok(live::read_pauses(o.ebpf())?),
            Self::Capture(c) => Ok(c.counts().agg.pauses.clone()),
            Self::Nothing => Ok(BTreeMap::new()),
        }
    }

    /// The speed of the links pause frames were seen on, as `diagnose` takes it: the observed
    /// interfaces' own in host mode (when they all report one), the captured device's; none in
    /// mirror mode (a mirror port's speed is not the mirrored links').
    pub(super) fn link_speed(&self) -> Option<u64> {
        match self {
            Self::Kernel(o) if o.config().vantage == live::Vantage::Host => {
                live::interfaces_speed(&o.config().interfaces)
            }
            Self::Kernel(_) | Self::Nothing => None,
            Self::Capture(c) => live::interfaces_speed(std::slice::from_ref(&c.config.device)),
        }
    }

    /// Follows interfaces that go and come back (and a capture that ended).
    pub(super) fn check_interfaces(&mut self) -> Vec<IfaceEvent> {
        match self {
            Self::Kernel(o) => o.check_interfaces(),
            Self::Capture(c) => c.check(),
            Self::Nothing => Vec::new(),
        }
    }

    pub(super) fn add_interface(&mut self, iface: &str) -> Result<usize, LiveError> {
        match self {
            Self::Kernel(o) => o.add_interface(iface),
            Self::Capture(_) | Self::Nothing => Err(LiveError::UnknownInterface(iface.to_string())),
        }
    }

    pub(super) fn remove_interface(&mut self, iface: &str) -> Result<(), LiveError> {
        match self {
            Self::Kernel(o) => o.remove_interface(iface),
            Self::Capture(_) | Self::Nothing => Err(LiveError::UnknownInterface(iface.to_string())),
        }
    }

    /// Detaches (stops the capture, after reading what libpcap holds): a drain afterwards is
    /// final.
    pub(super) fn detach(&mut self) -> Result<(), DaemonError> {
        match self {
            Self::Kernel(o) => Ok(o.detach()?),
            Self::Capture(c) => match c.running.take() {
                Some(mut r) => Ok(r.stop()?),
                None => Ok(()),
            },
            Self::Nothing => Ok(()),
        }
    }
}
