//! The NIC side in the sidecar: at each drain, one reading (on a thread of its own, waited for
//! half a second at most) of the RDMA devices named
//! (`rdma_devices`), or behind the observed interfaces or the captured device, and the netdevs
//! behind their ports ([`host::snapshot`]); counters folded into cumulative values that never go
//! back (a 32-bit wrap of mlx5's Q counters is carried over, a reset adds what was counted
//! since), so Prometheus' `rate()` sees no false reset; the configuration as last read; and
//! which sources the host lacks, each reason logged once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use tracing::{info, warn};

use super::{
    config::{RunConfig, is_device_name},
    openmetrics::{
        NicConfigRow, NicInfoRow, NicMetrics, QpGroup, RdmaCounterRow, SourceRow, StatFamily,
        StatRow,
    },
};
use roce_observer::source::live::OneLine;
use roce_observer::source::nic::{
    Availability, NicError,
    host::{self, Host, Selection},
    rdma::{Delta, Width, counter_width, delta, device_of_capture},
};

/// How often the QP table and the pluggable modules are read (a dump of every QP, each with its
/// process's name: on a host with tens of thousands of QPs, too much for every drain; a module's
/// EEPROM is I2C reads of milliseconds each); the last ones are exported between.
const QP_EVERY: Duration = Duration::from_secs(30);

/// How long a drain waits for the NIC side's reading (a few milliseconds normally); a reading
/// still running then is picked up by a later drain.
const READ_WAIT: Duration = Duration::from_millis(500);

/// The readings, on a thread of their own: a driver's counter reads are firmware commands,
/// and one that hangs (mlx5 gives up after about a minute) must not stall the drains of the
/// kernel maps.
struct Reader {
    ask: Option<mpsc::Sender<(Host, Selection)>>,
    answers: Option<mpsc::Receiver<Result<host::Snapshot, NicError>>>,
    /// A reading asked for and not answered yet.
    pending: bool,
}

impl Reader {
    fn new() -> Self {
        Self {
            ask: None,
            answers: None,
            pending: false,
        }
    }

    /// The answer to a reading asked for now, waiting up to [`READ_WAIT`]; while an earlier
    /// one is still running, its answer if it is back, without waiting; none when it is not.
    fn read(
        &mut self,
        host: &Host,
        selection: Selection,
    ) -> Option<Result<host::Snapshot, NicError>> {
        if self.ask.is_none() {
            let (ask, asked) = mpsc::channel::<(Host, Selection)>();
            let (answer, answers) = mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("nic-reader".into())
                .spawn(move || {
                    while let Ok((host, selection)) = asked.recv() {
                        if answer.send(host::snapshot(&host, &selection)).is_err() {
                            break;
                        }
                    }
                });
            if let Err(e) = spawned {
                return Some(Err(NicError::Read {
                    path: PathBuf::from("nic-reader thread"),
                    source: e,
                }));
            }
            self.ask = Some(ask);
            self.answers = Some(answers);
        }
        // A reading still running from an earlier drain is not waited for again: a hanging
        // one costs the drains nothing after the first wait.
        let wait = if self.pending {
            Duration::ZERO
        } else {
            let sent = self
                .ask
                .as_ref()
                .is_some_and(|a| a.send((host.clone(), selection)).is_ok());
            self.pending = sent;
            READ_WAIT
        };
        let answers = self.answers.as_ref()?;
        match answers.recv_timeout(wait) {
            Ok(r) => {
                self.pending = false;
                Some(r)
            }
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // The thread is gone: start another at the next drain.
                self.ask = None;
                self.answers = None;
                self.pending = false;
                None
            }
        }
    }
}

/// One counter: its last reading and the sum of its deltas since the first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Fold {
    last: u64,
    total: u64,
    /// Successful readings in a row without its device or netdev.
    missing: u32,
}

/// Readings in a row a device or netdev may be missing from before its series are dropped (a
/// LAG formed, a netdev renamed): a driver reload's brief absence keeps them.
const MISSING_READINGS: u32 = 30;

impl Fold {
    /// Folds the reading `now` of a counter of `width` in.
    fn step(&mut self, width: Width, now: u64) {
        let d = match delta(width, self.last, now) {
            Delta::Grew(d) => d,
            Delta::Reset { since } => since,
        };
        self.total = self.total.saturating_add(d);
        self.last = now;
    }
}

/// Ages the series of devices and netdevs a reading lacks; those gone for [`MISSING_READINGS`]
/// readings are dropped, not exported frozen.
fn age_out(
    hw: &mut BTreeMap<PortKey, Fold>,
    port: &mut BTreeMap<PortKey, Fold>,
    stats: &mut BTreeMap<(String, String), Fold>,
    devices: &[&str],
    ifaces: &[&str],
) {
    let age = |f: &mut Fold, present: bool| {
        f.missing = if present {
            0
        } else {
            f.missing.saturating_add(1)
        };
    };
    for ((d, _, _), f) in hw.iter_mut().chain(port.iter_mut()) {
        age(f, devices.contains(&d.as_str()));
    }
    for ((i, _), f) in stats.iter_mut() {
        age(f, ifaces.contains(&i.as_str()));
    }
    hw.retain(|_, f| f.missing < MISSING_READINGS);
    port.retain(|_, f| f.missing < MISSING_READINGS);
    stats.retain(|_, f| f.missing < MISSING_READINGS);
}

/// Folds `now` into the counter `key` of `map`: a counter first read starts at 0.
fn fold<K: Ord>(map: &mut BTreeMap<K, Fold>, key: K, width: Width, now: u64) {
    map.entry(key)
        .and_modify(|f| f.step(width, now))
        .or_insert(Fold {
            last: now,
            total: 0,
            missing: 0,
        });
}

/// A device port's counter.
type PortKey = (String, u32, String);

/// The NIC side the collector reads at each drain.
pub(super) struct NicSide {
    host: Host,
    /// RDMA devices named in the configuration.
    named: Vec<String>,
    /// Netdevs named in the configuration (read whether or not an RDMA device is behind them).
    netdevs: Vec<String>,
    /// Every RDMA device of the host.
    all: bool,
    /// The observed interfaces (and a captured netdev): the RDMA devices behind them are read.
    observed: Vec<String>,
    /// A captured device: read when it is an RDMA device.
    capture: Option<String>,
    /// The RDMA devices the host had when the devices to read were last found, and those
    /// devices; found again when the host's devices change, after a reload, an interface event
    /// or a failed reading.
    resolved: Option<(Vec<String>, Vec<String>)>,
    hw: BTreeMap<PortKey, Fold>,
    port: BTreeMap<PortKey, Fold>,
    /// Per netdev and exported driver statistic.
    stats: BTreeMap<(String, String), Fold>,
    /// The last successful reading (configuration, driver info).
    last: Option<host::Snapshot>,
    sources: Vec<SourceRow>,
    /// Sources absent or failing, with the reason logged.
    logged: BTreeMap<(String, String), String>,
    /// After a reload: the next reading drops what it no longer selects.
    prune: bool,
    reader: Reader,
    /// When the QP table was last asked for.
    qps_asked: Option<std::time::Instant>,
    /// Per netdev and module flag: the readings in which the module raised it (reading
    /// clears SFF-8636's and CMIS's latched flags: counted here, they are not lost).
    module_flags: BTreeMap<(String, String), u64>,
}

/// At the start, a named RDMA device or netdev the host lacks is an error (a wrong name);
/// afterwards (a reload, a driver reload) it is an absent source.
pub(super) fn check_named(config: &RunConfig) -> Result<(), NicError> {
    let side = NicSide::new(config);
    let class = side.class();
    if let Some(missing) = side.named.iter().find(|d| !class.join(d).is_dir()) {
        return Err(NicError::NoRdmaDevice(missing.clone()));
    }
    match side.netdevs.iter().find(|n| !side.has_netdev(n)) {
        Some(missing) => Err(NicError::NoInterface(missing.clone())),
        None => Ok(()),
    }
}

impl NicSide {
    /// The NIC side of `config`; nothing read yet.
    pub(super) fn new(config: &RunConfig) -> Self {
        let mut side = Self {
            host: Host::Live,
            named: Vec::new(),
            netdevs: Vec::new(),
            all: false,
            observed: Vec::new(),
            capture: None,
            resolved: None,
            hw: BTreeMap::new(),
            port: BTreeMap::new(),
            stats: BTreeMap::new(),
            last: None,
            sources: Vec::new(),
            logged: BTreeMap::new(),
            prune: false,
            reader: Reader::new(),
            qps_asked: None,
            module_flags: BTreeMap::new(),
        };
        side.configure(config);
        side
    }

    /// Takes a (reloaded) configuration: a different tree starts over.
    pub(super) fn configure(&mut self, config: &RunConfig) {
        let host = config
            .nic_root
            .clone()
            .map_or(Host::Live, |r: PathBuf| Host::Root(r));
        let capture = config.capture.as_ref().map(|c| c.device.clone());
        let mut observed = config.ifaces.clone();
        observed.extend(capture.iter().cloned());
        if host != self.host {
            self.hw.clear();
            self.port.clear();
            self.stats.clear();
            self.last = None;
        }
        if host != self.host
            || observed != self.observed
            || config.rdma_devices != self.named
            || config.netdevs != self.netdevs
            || config.all_rdma_devices != self.all
            || capture != self.capture
        {
            self.prune = true;
        }
        self.host = host;
        self.named = config.rdma_devices.clone();
        self.netdevs = config.netdevs.clone();
        self.all = config.all_rdma_devices;
        self.observed = observed;
        self.capture = capture;
        self.resolved = None;
    }

    /// Interfaces came, went or were re-created: find the devices behind them again.
    pub(super) fn interfaces_changed(&mut self) {
        self.resolved = None;
    }

    fn root(&self) -> &Path {
        match &self.host {
            Host::Live => Path::new("/"),
            Host::Root(r) => r,
        }
    }

    fn class(&self) -> PathBuf {
        self.root().join("sys/class/infiniband")
    }

    /// Whether the host (or the tree) has the netdev `name`.
    fn has_netdev(&self, name: &str) -> bool {
        self.root().join("sys/class/net").join(name).is_dir()
    }

    /// The RDMA devices the host has (none without the class).
    fn host_devices(&self) -> Vec<String> {
        let mut devices: Vec<String> = std::fs::read_dir(self.class())
            .map(|e| {
                e.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        devices.sort();
        devices
    }

    /// The RDMA devices to read among the host's `devices`: the named ones, the captured one,
    /// and those with a port behind an observed interface.
    fn resolve(&self, devices: &[String]) -> Vec<String> {
        let class = self.class();
        // A named device the host lacks now (a driver reload, a LAG formed) is left out, not a
        // reading failed for every other device: its `rdma` source says so.
        let mut out: Vec<String> = self
            .named
            .iter()
            .filter(|d| devices.contains(d))
            .cloned()
            .collect();
        // A captured device's port (`mlx5_0:1`) is its device's.
        if let Some(c) = &self.capture {
            let c = device_of_capture(c).to_string();
            if is_device_name(&c) && devices.contains(&c) && !out.contains(&c) {
                out.push(c);
            }
        }
        for d in devices {
            if !out.contains(d) && (self.all || behind(&class.join(d), &self.observed)) {
                out.push(d.clone());
            }
        }
        out
    }

    /// One reading, folded in.
    pub(super) fn read(&mut self) {
        // Listing the class is cheap; the devices' GID tables are read only when it changed.
        let host = self.host_devices();
        let devices = match &self.resolved {
            Some((had, chosen)) if *had == host => chosen.clone(),
            _ => {
                let chosen = self.resolve(&host);
                self.resolved = Some((host, chosen.clone()));
                chosen
            }
        };
        // Named netdevs the host has now (one gone is left out: its sources say so).
        let netdevs: Vec<String> = self
            .netdevs
            .iter()
            .filter(|n| self.has_netdev(n))
            .cloned()
            .collect();
        if devices.is_empty() && netdevs.is_empty() {
            let reason = if self.all {
                "the host has no RDMA device".to_string()
            } else if self.observed.is_empty() {
                "no RDMA device named (rdma_devices)".to_string()
            } else {
                format!(
                    "no RDMA device named (rdma_devices) or behind {}",
                    self.observed.join(", ")
                )
            };
            self.set_sources(
                vec![(("rdma".to_string(), String::new()), Err(reason))],
                None,
            );
            if self.prune {
                // A reload left nothing to read: nothing of before is exported.
                self.prune = false;
                self.hw.clear();
                self.port.clear();
                self.stats.clear();
                self.last = None;
            }
            return;
        }
        // The last reading's QP table and modules stand in until they are due (none kept: read
        // now).
        let slow_later = self.last.is_some()
            && !self.prune
            && self.qps_asked.is_some_and(|t| t.elapsed() < QP_EVERY);
        let selection = Selection {
            interfaces: netdevs,
            rdma_devices: devices,
            no_qps: slow_later,
            no_modules: slow_later,
            gpus: false,
        };
        if !selection.no_qps {
            self.qps_asked = Some(std::time::Instant::now());
        }
        let Some(result) = self.reader.read(&self.host, selection) else {
            // Still reading (a firmware command that hangs): the drain goes on, the counters
            // stand still, and the source says so.
            let reason = format!(
                "a reading has taken over {:.1} s (a firmware command hanging?): the NIC counters stand still",
                READ_WAIT.as_secs_f64()
            );
            let mut all: Vec<((String, String), Result<(), String>)> = self
                .sources
                .iter()
                .filter(|r| !(r.source == "rdma" && r.subject.is_empty()))
                .map(|r| {
                    let state = if r.up {
                        Ok(())
                    } else {
                        Err("not read".to_string())
                    };
                    ((r.source.clone(), r.subject.clone()), state)
                })
                .collect();
            all.insert(0, (("rdma".to_string(), String::new()), Err(reason)));
            self.set_sources(all, Some("rdma"));
            return;
        };
        match result {
            Ok(s) => self.fold(s),
            Err(e) => {
                self.resolved = None;
                let reason = format!("cannot read the NIC side: {}", OneLine(&e));
                // Nothing is fresh: every source known is down.
                let mut all: Vec<((String, String), Result<(), String>)> = self
                    .sources
                    .iter()
                    .filter(|r| r.source != "rdma")
                    .map(|r| {
                        (
                            (r.source.clone(), r.subject.clone()),
                            Err("the reading failed".to_string()),
                        )
                    })
                    .collect();
                all.insert(0, (("rdma".to_string(), String::new()), Err(reason)));
                self.set_sources(all, Some("rdma"));
            }
        }
    }

    /// Folds a reading's counters in and keeps it as the configuration's.
    fn fold(&mut self, mut s: host::Snapshot) {
        // A reading without the QP table and modules (read every QP_EVERY) keeps the last ones.
        fn not_read<T>(a: &Availability<T>) -> bool {
            matches!(a, Availability::Absent { reason } if reason == host::NOT_READ)
        }
        for i in &s.interfaces {
            let fresh = i
                .module
                .present()
                .and_then(roce_observer::source::nic::optics::decode);
            for f in fresh.iter().flat_map(|o| &o.flags) {
                *self
                    .module_flags
                    .entry((i.name.clone(), f.clone()))
                    .or_default() += 1;
            }
        }
        if let Some(last) = &self.last {
            if not_read(&s.qps) {
                s.qps = last.qps.clone();
            }
            for i in &mut s.interfaces {
                if not_read(&i.module)
                    && let Some(l) = last.interface(&i.name)
                {
                    i.module = l.module.clone();
                }
            }
        }
        if self.prune {
            self.prune = false;
            let devices: Vec<&str> = s.devices().iter().map(|d| d.name.as_str()).collect();
            let ifaces: Vec<&str> = s.interfaces.iter().map(|i| i.name.as_str()).collect();
            self.hw.retain(|(d, _, _), _| devices.contains(&d.as_str()));
            self.port
                .retain(|(d, _, _), _| devices.contains(&d.as_str()));
            self.stats.retain(|(i, _), _| ifaces.contains(&i.as_str()));
            self.module_flags
                .retain(|(i, _), _| ifaces.contains(&i.as_str()));
        }
        {
            let devices: Vec<&str> = s.devices().iter().map(|d| d.name.as_str()).collect();
            let ifaces: Vec<&str> = s.interfaces.iter().map(|i| i.name.as_str()).collect();
            age_out(
                &mut self.hw,
                &mut self.port,
                &mut self.stats,
                &devices,
                &ifaces,
            );
        }
        for d in s.devices() {
            for p in &d.ports {
                for (name, &v) in &p.hw_counters {
                    let key = (d.name.clone(), p.port, name.clone());
                    fold(&mut self.hw, key, counter_width(name), v);
                }
                // The IBTA counters are read through the extended (64-bit) attributes.
                for (name, &v) in &p.counters {
                    let key = (d.name.clone(), p.port, name.clone());
                    fold(&mut self.port, key, Width::Bits64, v);
                }
            }
        }
        for i in &s.interfaces {
            if let Availability::Present(stats) = &i.stats {
                for (name, &v) in stats {
                    if StatFamily::of(name).is_some() {
                        fold(
                            &mut self.stats,
                            (i.name.clone(), name.clone()),
                            Width::Bits64,
                            v,
                        );
                    }
                }
            }
        }
        let mut sources = vec![(("rdma".to_string(), String::new()), s.rdma.reason())];
        for missing in self
            .named
            .iter()
            .filter(|n| !s.devices().iter().any(|d| &d.name == *n))
        {
            sources.push((
                ("rdma".to_string(), missing.clone()),
                Err(format!("the host has no RDMA device {missing} now")),
            ));
        }
        for i in &s.interfaces {
            for (source, r) in [
                ("driver", i.driver.reason()),
                ("stats", i.stats.reason()),
                ("dcb", i.dcb.reason()),
                ("dcqcn", i.dcqcn.reason()),
                ("module", i.module.reason()),
            ] {
                sources.push(((source.to_string(), i.name.clone()), r));
            }
        }
        // The QP table: RDMA netlink (a host without it, or an older kernel, says why).
        if !s.devices().is_empty() {
            sources.push((("qps".to_string(), String::new()), s.qps.reason()));
        }
        self.set_sources(sources, None);
        self.last = Some(s);
    }

    /// The sources' states now. A reason is logged (at warn) when it is new for its source,
    /// and a source coming back is logged; with `only`, reasons are logged for that source
    /// alone (after a failed reading, the one reason is the failure's).
    fn set_sources(
        &mut self,
        now: Vec<((String, String), Result<(), String>)>,
        only: Option<&str>,
    ) {
        let mut rows = Vec::with_capacity(now.len());
        for ((source, subject), state) in now {
            let key = (source.clone(), subject.clone());
            match &state {
                Ok(()) => {
                    if self.logged.remove(&key).is_some() {
                        info!(%source, %subject, "NIC source readable again");
                    }
                }
                Err(reason) if only.is_none_or(|o| o == source) => {
                    if self.logged.get(&key) != Some(reason) {
                        warn!(%source, %subject, "NIC source absent: {reason}");
                        self.logged.insert(key, reason.clone());
                    }
                }
                Err(_) => {}
            }
            rows.push(SourceRow {
                source,
                subject,
                up: state.is_ok(),
            });
        }
        self.sources = rows;
    }

    /// The fleet records' `job` and `rank` from the last QP table read (empty when it is
    /// absent now; none before the first reading).
    pub(super) fn job_and_rank(&self) -> Option<(String, String)> {
        let qps = self
            .last
            .as_ref()?
            .qps
            .present()
            .map_or(&[][..], Vec::as_slice);
        Some(roce_observer::export::job_and_rank(qps.iter()))
    }

    /// What the endpoint shows.
    pub(super) fn metrics(&self) -> NicMetrics {
        let port_rows = |m: &BTreeMap<PortKey, Fold>| {
            m.iter()
                .map(|((device, port, counter), f)| RdmaCounterRow {
                    device: device.clone(),
                    port: *port,
                    counter: counter.clone(),
                    value: f.total,
                })
                .collect()
        };
        let stats = self
            .stats
            .iter()
            .filter_map(|((iface, stat), f)| {
                Some(StatRow {
                    iface: iface.clone(),
                    stat: stat.clone(),
                    family: StatFamily::of(stat)?,
                    value: f.total,
                })
            })
            .collect();
        let mut info = Vec::new();
        let mut config = Vec::new();
        let mut optics = Vec::new();
        let mut qps: BTreeMap<QpGroup, u64> = BTreeMap::new();
        if let Some(s) = &self.last {
            // The QPs of the devices read, counted per process and state: which process holds
            // the host's QPs, without a series per QP.
            let devices: Vec<&str> = s.devices().iter().map(|d| d.name.as_str()).collect();
            for q in s.qps.present().map_or(&[][..], Vec::as_slice) {
                if !devices.contains(&q.device.as_str()) {
                    continue;
                }
                let key = QpGroup {
                    device: q.device.clone(),
                    port: q.port.map_or_else(String::new, |p| p.to_string()),
                    qp_type: q.qp_type.clone(),
                    state: q.state.clone(),
                    pid: q.pid.map_or_else(String::new, |p| p.to_string()),
                    comm: q.comm.clone().unwrap_or_default(),
                    job: q
                        .job
                        .as_ref()
                        .and_then(|j| j.job.clone())
                        .unwrap_or_default(),
                    rank: q
                        .job
                        .as_ref()
                        .and_then(|j| j.rank)
                        .map_or_else(String::new, |r| r.to_string()),
                };
                *qps.entry(key).or_default() += 1;
            }
            for i in &s.interfaces {
                if let Some(o) = i
                    .module
                    .present()
                    .and_then(roce_observer::source::nic::optics::decode)
                {
                    optics.push((i.name.clone(), o));
                }
                let device = s
                    .devices()
                    .iter()
                    .find(|d| d.ports.iter().any(|p| p.netdevs.contains(&i.name)));
                let driver = i.driver.present().cloned().unwrap_or_default();
                // The device's firmware version; else the driver's without its PSID
                // ("28.39.1002 (MT_0000000838)").
                let firmware = device.and_then(|d| d.fw_ver.clone()).unwrap_or_else(|| {
                    driver
                        .firmware
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string()
                });
                info.push(NicInfoRow {
                    iface: i.name.clone(),
                    device: device.map(|d| d.name.clone()).unwrap_or_default(),
                    driver: driver.driver,
                    version: driver.version,
                    firmware,
                    model: device.and_then(|d| d.hca_type.clone()).unwrap_or_default(),
                    driver_firmware: driver.firmware.clone(),
                    bus: driver.bus,
                });
                config.push(NicConfigRow {
                    iface: i.name.clone(),
                    mtu: i.mtu,
                    pfc_enabled: i.dcb.present().and_then(|d| d.pfc_enabled),
                    // Bits whose files could not be read are unknown, not off: left out.
                    dcqcn: i.dcqcn.present().map_or_else(Vec::new, |d| {
                        (0..8u8)
                            .flat_map(|p| {
                                let (np, rp) = d.enabled(p);
                                [(p, "np", np), (p, "rp", rp)]
                            })
                            .filter_map(|(p, point, on)| Some((p, point, on?)))
                            .collect()
                    }),
                });
            }
        }
        NicMetrics {
            hw_counters: port_rows(&self.hw),
            port_counters: port_rows(&self.port),
            stats,
            info,
            config,
            qps: qps.into_iter().collect(),
            optics,
            module_flags: self
                .module_flags
                .iter()
                .map(|((i, f), n)| (i.clone(), f.clone(), *n))
                .collect(),
            sources: self.sources.clone(),
        }
    }
}

/// Present, or the reason it is absent.
/// Whether a port of the RDMA device at `dev` is behind one of `ifaces`: its GID table names
/// the netdev (RoCE), or the device's PCI function has it (`device/net/`).
fn behind(dev: &Path, ifaces: &[String]) -> bool {
    if ifaces.is_empty() {
        return false;
    }
    let names = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|e| {
                e.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    if names(&dev.join("device/net"))
        .iter()
        .any(|n| ifaces.contains(n))
    {
        return true;
    }
    let ports = dev.join("ports");
    names(&ports).iter().any(|p| {
        let ndevs = ports.join(p).join("gid_attrs/ndevs");
        names(&ndevs).iter().any(|g| {
            std::fs::read_to_string(ndevs.join(g))
                .is_ok_and(|n| ifaces.iter().any(|i| i == n.trim()))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading that hangs (here a copied tree's `taken` file that is a FIFO no one writes
    /// yet, as a firmware command that does not return) costs the first drain half a second and
    /// the next ones nothing; its answer is taken once it comes.
    #[test]
    fn a_hanging_reading_does_not_stall_the_drains() {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let dir = std::env::temp_dir().join(format!("nic-reader-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("taken");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let host = Host::Root(dir.clone());
        let mut reader = Reader::new();
        let t = std::time::Instant::now();
        assert!(reader.read(&host, Selection::default()).is_none());
        assert!(t.elapsed() >= READ_WAIT);
        let t = std::time::Instant::now();
        assert!(reader.read(&host, Selection::default()).is_none());
        assert!(t.elapsed() < READ_WAIT / 2, "{:?}", t.elapsed());
        // The firmware answers.
        std::fs::write(&fifo, "7\n").unwrap();
        let mut answer = None;
        for _ in 0..50 {
            answer = reader.read(&host, Selection::default());
            if answer.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let s = answer.expect("answered").expect("read");
        assert_eq!(s.taken_ns, 7);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn folds_carry_32_bit_wraps_and_add_resets() {
        let mut m = BTreeMap::new();
        let w = counter_width("out_of_sequence");
        fold(&mut m, "oos", w, 0xFFFF_FFF0);
        assert_eq!(m["oos"].total, 0, "the first reading is the baseline");
        fold(&mut m, "oos", w, 0x10);
        assert_eq!(m["oos"].total, 0x20, "across the 32-bit wrap");
        fold(&mut m, "oos", w, 0x15);
        assert_eq!(m["oos"].total, 0x25);
        // From the lower half back: a reset, counting what came since.
        fold(&mut m, "oos", w, 3);
        assert_eq!(m["oos"].total, 0x28);
        // A 64-bit counter never wraps: going back is a reset.
        fold(&mut m, "data", Width::Bits64, 1 << 40);
        fold(&mut m, "data", Width::Bits64, 500);
        fold(&mut m, "data", Width::Bits64, 700);
        assert_eq!(m["data"].total, 700);
    }

    #[test]
    fn series_of_a_device_gone_for_long_are_dropped() {
        let mut hw = BTreeMap::new();
        let mut port = BTreeMap::new();
        let mut stats = BTreeMap::new();
        for d in ["mlx5_0", "mlx5_1"] {
            fold(
                &mut hw,
                (d.into(), 1, "np_cnp_sent".into()),
                Width::Bits64,
                5,
            );
            fold(
                &mut port,
                (d.into(), 1, "port_rcv_data".into()),
                Width::Bits64,
                5,
            );
        }
        fold(
            &mut stats,
            ("eth0".into(), "rx_prio3_pause".into()),
            Width::Bits64,
            1,
        );
        // mlx5_1 and eth0 gone (a LAG formed): kept through a brief absence, then dropped.
        for _ in 1..MISSING_READINGS {
            age_out(&mut hw, &mut port, &mut stats, &["mlx5_0"], &[]);
        }
        assert_eq!((hw.len(), port.len(), stats.len()), (2, 2, 1));
        age_out(&mut hw, &mut port, &mut stats, &["mlx5_0"], &[]);
        let left: Vec<&str> = hw.keys().map(|(d, _, _)| d.as_str()).collect();
        assert_eq!(left, ["mlx5_0"]);
        assert_eq!((port.len(), stats.len()), (1, 0));
    }

    #[test]
    fn only_the_roce_health_statistics_are_exported() {
        use StatFamily::*;
        for (name, want) in [
            (
                "rx_prio3_pause",
                Some(PfcFrames {
                    rx: true,
                    priority: 3,
                }),
            ),
            (
                "tx_prio0_pause_duration",
                Some(PfcPauseMicros {
                    rx: false,
                    priority: 0,
                }),
            ),
            (
                "rx_prio7_cong_discard",
                Some(ClassDiscards {
                    class: 7,
                    kind: "cong_discard",
                }),
            ),
            ("rx_prio2_discards", Some(Discards { priority: 2 })),
            (
                "tx_pause_storm_error_events",
                Some(StormEvents { level: "error" }),
            ),
            ("rx_vport_rdma_unicast_bytes", Some(Driver)),
            ("rx_prio3_bytes", None),
            ("rx_prio3_pause_transition", None),
            ("tx_prio3_discards", None),
            ("rx_prio8_pause", None),
            ("rx_bytes", None),
        ] {
            assert_eq!(StatFamily::of(name), want, "{name}");
        }
    }
}
