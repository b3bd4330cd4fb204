//! Live capture: load the kernel object, attach the XDP observer to interfaces (and in host mode
//! the TC egress observer), read and sum the per-CPU maps into an [`Aggregate`], detach on drop.
//!
//! Attaching never replaces a program somebody else attached: a busy interface (XDP) is an
//! error; TC egress goes ahead of the programs already there (tcx: first; clsact: a new filter,
//! which the kernel places first), sees frames before any of them can drop or redirect one, and
//! passes every packet on to them.

use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd, FromRawFd},
    time::SystemTime,
};

use aya::{
    Ebpf, EbpfLoader,
    maps::{PerCpuArray, PerCpuHashMap},
    programs::{
        ProgramError, SchedClassifier, TcAttachType, Xdp, XdpMode, tc::SchedClassifierLinkId,
        xdp::XdpLinkId,
    },
};
use observer_common::{
    BURST_IFACE_SLOTS, BURST_RING_SLOTS, BurstIface, BurstSlot, Counters, DEFAULT_MAX_FLOWS,
    FlowKey, FlowSlot, FlowStats, IfaceCounters, MAX_BURST_IFACES, PauseKey, PauseStats, maps,
    programs,
};

pub mod bpfsys;

use crate::{EBPF_OBJECT, aggregate::Aggregate, units::Named};

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("interface '{0}' not found")]
    UnknownInterface(String),
    #[error(
        "live capture needs root or the capabilities {missing} (this process runs as uid {uid} without them)"
    )]
    NotPrivileged { missing: String, uid: u32 },
    #[error(
        "interface '{0}' already has an XDP program attached by someone else; refusing to replace it (detach it first, e.g. `ip link set dev {0} xdp off`, if it is not needed)"
    )]
    XdpBusy(String),
    #[error("XDP mode '{mode}' is not supported on interface '{iface}' (try --xdp-mode skb)")]
    ModeUnsupported { iface: String, mode: &'static str },
    #[error("cannot load the kernel object: {0}")]
    Load(String),
    #[error("cannot attach XDP to '{iface}': {detail}")]
    Attach { iface: String, detail: String },
    #[error("cannot attach the TC egress observer to '{iface}': {detail}")]
    TcAttach { iface: String, detail: String },
    #[error("cannot put '{iface}' in promiscuous mode: {detail}")]
    Promiscuous { iface: String, detail: String },
    #[error("cannot detach XDP from '{iface}': {detail}")]
    Detach { iface: String, detail: String },
    #[error("interface '{0}' is given twice")]
    DuplicateInterface(String),
    #[error("cannot read the kernel map {map}: {detail}")]
    ReadMap { map: &'static str, detail: String },
    #[error("--max-flows must be between 1 and {max}, not {got}")]
    MaxFlows { got: u32, max: u32 },
    #[error("at most {max} interfaces per observer, not {got}")]
    TooManyInterfaces { got: usize, max: u32 },
    #[error("cannot map the microburst slots into memory: {0}")]
    BurstMap(String),
    #[error(
        "interfaces '{first}' and '{second}' share the kernel's interface entry {entry} (ifindex modulo {BURST_IFACE_SLOTS}); observe them in two processes"
    )]
    EntryClash {
        first: String,
        second: String,
        entry: u32,
    },
}

/// XDP attach mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttachMode {
    /// Native when the driver supports it, generic otherwise (the kernel decides).
    #[default]
    Auto,
    /// Generic XDP (works on every interface).
    Skb,
    /// Driver (native) XDP.
    Native,
}

impl crate::units::Named for AttachMode {
    const ALL: &'static [Self] = &[Self::Auto, Self::Skb, Self::Native];

    fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Skb => "skb",
            Self::Native => "native",
        }
    }
}

impl AttachMode {
    const fn xdp(self) -> XdpMode {
        match self {
            Self::Auto => XdpMode::Default,
            Self::Skb => XdpMode::Skb,
            Self::Native => XdpMode::Driver,
        }
    }
}

/// Which TC egress hook host mode uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TcHook {
    /// tcx on kernels from 6.6, clsact before.
    #[default]
    Auto,
    /// tcx (kernel 6.6+): a link ahead of the programs already there.
    Tcx,
    /// A filter on the clsact qdisc (added when missing, left afterwards), ahead of the
    /// filters already there.
    Clsact,
}

impl crate::units::Named for TcHook {
    const ALL: &'static [Self] = &[Self::Auto, Self::Tcx, Self::Clsact];

    fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Tcx => "tcx",
            Self::Clsact => "clsact",
        }
    }
}

/// Where the observer sits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Vantage {
    /// On a host's own interface: every frame passes on unchanged.
    #[default]
    Host,
    /// On a mirror port (SPAN or ERSPAN destination): the interface is put in promiscuous mode
    /// (restored afterwards) so copies addressed elsewhere are seen; with `consume` the copies
    /// are dropped after accounting instead of climbing the stack.
    Mirror { consume: bool },
}

impl Vantage {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Mirror { consume: false } => "mirror",
            Self::Mirror { consume: true } => "mirror+consume",
        }
    }

    const fn program(self) -> &'static str {
        match self {
            Self::Mirror { consume: true } => programs::OBSERVE_CONSUME,
            _ => programs::OBSERVE,
        }
    }
}

/// What to attach where.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    pub interfaces: Vec<String>,
    pub mode: AttachMode,
    pub vantage: Vantage,
    pub max_flows: u32,
    /// Host mode: the TC egress hook.
    pub tc_hook: TcHook,
    /// Microburst slot width in ns (0: the kernel keeps no slots).
    pub burst_slot_ns: u64,
}

impl LiveConfig {
    pub fn new(interfaces: Vec<String>) -> Self {
        Self {
            interfaces,
            mode: AttachMode::Auto,
            vantage: Vantage::Host,
            max_flows: DEFAULT_MAX_FLOWS,
            tc_hook: TcHook::Auto,
            burst_slot_ns: crate::analysis::series::DEFAULT_SLOT_NS,
        }
    }
}

/// Promiscuous mode on an interface for as long as this lives: a packet-socket membership
/// (PACKET_MR_PROMISC), which the kernel counts and releases when the socket closes, also when
/// the process is killed; it does not undo promiscuous mode somebody else asked for.
pub struct Promiscuous {
    _socket: std::os::fd::OwnedFd,
}

impl Promiscuous {
    pub fn enable(iface: &str) -> Result<Self, LiveError> {
        let fail = |e: io::Error| LiveError::Promiscuous {
            iface: iface.to_string(),
            detail: e.to_string(),
        };
        let index = if_index(iface)?;
        // SAFETY: plain socket/setsockopt calls; protocol 0: the socket receives nothing.
        unsafe {
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(fail(io::Error::last_os_error()));
            }
            let socket = std::os::fd::OwnedFd::from_raw_fd(fd);
            let mut mreq: libc::packet_mreq = std::mem::zeroed();
            mreq.mr_ifindex = index as libc::c_int;
            mreq.mr_type = libc::PACKET_MR_PROMISC as libc::c_ushort;
            let rc = libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                (&raw const mreq).cast(),
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            );
            if rc != 0 {
                return Err(fail(io::Error::last_os_error()));
            }
            Ok(Self { _socket: socket })
        }
    }
}

/// Largest flow table accepted (per-CPU values: memory is max_flows x 216 B x CPUs).
pub const MAX_FLOWS_LIMIT: u32 = 1 << 20;

/// The ifindex of `name`, or `UnknownInterface`.
pub fn if_index(name: &str) -> Result<u32, LiveError> {
    let c = CString::new(name).map_err(|_| LiveError::UnknownInterface(name.to_string()))?;
    // SAFETY: a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(LiveError::UnknownInterface(name.to_string())),
        i => Ok(i),
    }
}

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Checks the effective capabilities live capture needs: CAP_BPF and CAP_PERFMON (or
/// CAP_SYS_ADMIN for both) and CAP_NET_ADMIN.
pub fn check_privileges() -> Result<(), LiveError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| eff & (1u64 << cap) != 0;
    let mut missing = Vec::new();
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_NET_ADMIN) {
        missing.push("CAP_NET_ADMIN");
    }
    // Without it the verifier refuses the program's pointer arithmetic on packet data.
    if !has(CAP_PERFMON) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_PERFMON");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(LiveError::NotPrivileged {
            missing: missing.join("+"),
            // SAFETY: getuid cannot fail.
            uid: unsafe { libc::getuid() },
        })
    }
}

/// One interface the observer is attached to (or was: `ifindex` 0 while it is gone).
struct Attached {
    name: String,
    ifindex: u32,
    xdp: Option<XdpLinkId>,
    /// Host mode: the TC egress link.
    egress: Option<SchedClassifierLinkId>,
    /// Mirror mode: promiscuous mode held (dropped after the links).
    _promiscuous: Option<Promiscuous>,
}

/// What [`Observer::check_interfaces`] found and did about an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfaceEvent {
    /// The interface went away: its links went with it.
    Gone { iface: String },
    /// The interface (re-)appeared under its name with a new ifindex and was attached again.
    Reattached { iface: String, ifindex: u32 },
    /// It came back but attaching failed (tried again at the next check).
    ReattachFailed { iface: String, error: String },
    /// Its operational state changed (`up`: IFF_UP and IFF_RUNNING).
    Link { iface: String, up: bool },
}

/// The observer attached to its interfaces. Dropping it detaches every program it attached
/// (and only those).
pub struct Observer {
    ebpf: Ebpf,
    config: LiveConfig,
    /// Indexed by interface slot (rings 2i and 2i + 1, counters likewise); None: a free slot.
    slots: Vec<Option<Attached>>,
    /// Slots the microburst rings were sized for.
    ring_slots: usize,
    /// Last operational state seen per slot (for `Link` events).
    oper: Vec<Option<bool>>,
}

impl Observer {
    /// Checks privileges and interfaces, loads the object, attaches XDP everywhere (all or none).
    pub fn attach(config: LiveConfig) -> Result<Self, LiveError> {
        for (i, iface) in config.interfaces.iter().enumerate() {
            if config.interfaces[..i].contains(iface) {
                return Err(LiveError::DuplicateInterface(iface.clone()));
            }
            if_index(iface)?;
        }
        let mut observer = Self::load(config)?;
        let names = observer.config.interfaces.clone();
        observer.config.interfaces.clear();
        for iface in &names {
            // On error, dropping the observer detaches what was attached so far.
            observer.add_interface(iface)?;
        }
        Ok(observer)
    }

    /// Checks privileges, loads the object and its programs, attaches to nothing yet. The
    /// microburst rings are sized for `config.interfaces.len()` interfaces (at least one).
    pub fn load(config: LiveConfig) -> Result<Self, LiveError> {
        if config.max_flows == 0 || config.max_flows > MAX_FLOWS_LIMIT {
            return Err(LiveError::MaxFlows {
                got: config.max_flows,
                max: MAX_FLOWS_LIMIT,
            });
        }
        if config.interfaces.len() > MAX_BURST_IFACES as usize {
            return Err(LiveError::TooManyInterfaces {
                got: config.interfaces.len(),
                max: MAX_BURST_IFACES,
            });
        }
        check_privileges()?;
        let ring_slots = if config.burst_slot_ns > 0 {
            config.interfaces.len().max(1)
        } else {
            0
        };
        let rings = 2 * ring_slots.max(1) as u32;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(maps::FLOWS, config.max_flows)
            .map_max_entries(maps::BURSTS, rings * BURST_RING_SLOTS)
            .load(EBPF_OBJECT)
            .map_err(|e| load_error(&e))?;
        let name = config.vantage.program();
        let prog: &mut Xdp = ebpf
            .program_mut(name)
            .ok_or_else(|| LiveError::Load(format!("no program {name}")))?
            .try_into()
            .map_err(|e: ProgramError| load_error(&e))?;
        prog.load().map_err(|e| load_error(&e))?;
        if config.vantage == Vantage::Host {
            let tc: &mut SchedClassifier = ebpf
                .program_mut(programs::OBSERVE_EGRESS)
                .ok_or_else(|| LiveError::Load(format!("no program {}", programs::OBSERVE_EGRESS)))?
                .try_into()
                .map_err(|e: ProgramError| load_error(&e))?;
            tc.load().map_err(|e| load_error(&e))?;
        }
        Ok(Self {
            ebpf,
            config,
            slots: Vec::new(),
            ring_slots,
            oper: Vec::new(),
        })
    }

    /// Attaches to one more interface: its slot (rings and counters 2 slot, 2 slot + 1).
    pub fn add_interface(&mut self, iface: &str) -> Result<usize, LiveError> {
        if self.config.interfaces.iter().any(|i| i == iface) {
            return Err(LiveError::DuplicateInterface(iface.to_string()));
        }
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(free) => free,
            None if self.slots.len() < MAX_BURST_IFACES as usize => {
                self.slots.push(None);
                self.oper.push(None);
                self.slots.len() - 1
            }
            None => {
                return Err(LiveError::TooManyInterfaces {
                    got: self.slots.len() + 1,
                    max: MAX_BURST_IFACES,
                });
            }
        };
        if self.config.burst_slot_ns > 0 && slot >= self.ring_slots {
            return Err(LiveError::BurstMap(format!(
                "no microburst ring left for '{iface}' (the rings were sized for {} interfaces at start)",
                self.ring_slots
            )));
        }
        let attached = self.attach_slot(iface, slot, true)?;
        self.oper[slot] = link_up(iface);
        self.slots[slot] = Some(attached);
        self.config.interfaces.push(iface.to_string());
        Ok(slot)
    }

    /// Registers the interface for its counters (and slots), then attaches the programs.
    /// `fresh`: a new interface in the slot, whose counters start from zero (not one re-created
    /// under the same name, whose counters go on).
    fn attach_slot(
        &mut self,
        iface: &str,
        slot: usize,
        fresh: bool,
    ) -> Result<Attached, LiveError> {
        let ifindex = if_index(iface)?;
        let others = self
            .slots
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != slot)
            .filter_map(|(_, a)| a.as_ref())
            .filter(|a| a.ifindex != 0)
            .map(|a| (a.name.as_str(), a.ifindex));
        check_entry_clash(others, iface, ifindex)?;
        if fresh {
            zero_iface_counters(&mut self.ebpf, slot)?;
        }
        register_interface(&mut self.ebpf, slot, ifindex, self.config.burst_slot_ns)?;
        let mut attached = Attached {
            name: iface.to_string(),
            ifindex,
            xdp: None,
            egress: None,
            _promiscuous: None,
        };
        if let Vantage::Mirror { .. } = self.config.vantage {
            match Promiscuous::enable(iface) {
                Ok(p) => attached._promiscuous = Some(p),
                Err(e) => {
                    let _ = self.release(&mut attached, true);
                    return Err(e);
                }
            }
        }
        let name = self.config.vantage.program();
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(name)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| LiveError::Load(format!("no program {name}")))?;
        match prog.attach(iface, self.config.mode.xdp()) {
            Ok(link) => attached.xdp = Some(link),
            Err(e) => {
                let e = attach_error(iface, self.config.mode, &e);
                let _ = self.release(&mut attached, true);
                return Err(e);
            }
        }
        if self.config.vantage == Vantage::Host {
            let tc: &mut SchedClassifier = self
                .ebpf
                .program_mut(programs::OBSERVE_EGRESS)
                .and_then(|p| p.try_into().ok())
                .ok_or_else(|| {
                    LiveError::Load(format!("no program {}", programs::OBSERVE_EGRESS))
                })?;
            match attach_egress(tc, iface, self.config.tc_hook) {
                Ok(link) => attached.egress = Some(link),
                Err(e) => {
                    let _ = self.release(&mut attached, true);
                    return Err(e);
                }
            }
        }
        Ok(attached)
    }

    /// Detaches `a`'s links; `present`: the interface is still there (errors matter). Errors of
    /// an interface that is gone are expected: its links went with it.
    fn release(&mut self, a: &mut Attached, present: bool) -> Result<(), LiveError> {
        let name = self.config.vantage.program();
        let mut first = Ok(());
        if let Some(link) = a.xdp.take()
            && let Some(prog) = self
                .ebpf
                .program_mut(name)
                .and_then(|p| <&mut Xdp>::try_from(p).ok())
            && let Err(e) = prog.detach(link)
            && present
        {
            first = Err(LiveError::Detach {
                iface: a.name.clone(),
                detail: chain(&e),
            });
        }
        if let Some(link) = a.egress.take()
            && let Some(tc) = self
                .ebpf
                .program_mut(programs::OBSERVE_EGRESS)
                .and_then(|p| <&mut SchedClassifier>::try_from(p).ok())
            && let Err(e) = tc.detach(link)
            && present
            && first.is_ok()
        {
            first = Err(LiveError::Detach {
                iface: a.name.clone(),
                detail: format!("TC egress: {}", chain(&e)),
            });
        }
        a._promiscuous = None;
        if a.ifindex != 0 {
            unregister_interface(&mut self.ebpf, a.ifindex);
        }
        first
    }

    /// Detaches from `iface` and frees its slot (a later interface may take it: readers of the
    /// slot's counters must take their current values as the new start).
    pub fn remove_interface(&mut self, iface: &str) -> Result<(), LiveError> {
        let slot = self
            .slot_of(iface)
            .ok_or_else(|| LiveError::UnknownInterface(iface.to_string()))?;
        let mut a = self.slots[slot].take().expect("slot_of found it");
        self.oper[slot] = None;
        self.config.interfaces.retain(|i| i != iface);
        let present = a.ifindex != 0 && if_index(&a.name).ok() == Some(a.ifindex);
        self.release(&mut a, present)
    }

    /// The slot of an attached interface.
    pub fn slot_of(&self, iface: &str) -> Option<usize> {
        self.slots
            .iter()
            .position(|a| a.as_ref().is_some_and(|a| a.name == iface))
    }

    /// (slot, name, ifindex (0 while gone), attached) of every interface.
    pub fn interfaces(&self) -> impl Iterator<Item = (usize, &str, u32, bool)> {
        self.slots.iter().enumerate().filter_map(|(i, a)| {
            a.as_ref()
                .map(|a| (i, a.name.as_str(), a.ifindex, a.xdp.is_some()))
        })
    }

    /// Finds interfaces that went away, came back under their name (a new ifindex) or changed
    /// operational state, and re-attaches to those that came back. Cheap: one ioctl and one
    /// name lookup per interface.
    pub fn check_interfaces(&mut self) -> Vec<IfaceEvent> {
        let mut events = Vec::new();
        for slot in 0..self.slots.len() {
            let Some((name, ifindex)) = self.slots[slot]
                .as_ref()
                .map(|a| (a.name.clone(), a.ifindex))
            else {
                continue;
            };
            let now = if_index(&name).unwrap_or(0);
            if now != ifindex {
                let mut a = self.slots[slot].take().expect("checked above");
                if ifindex != 0 {
                    // Gone, or re-created meanwhile: either way the old links are dead.
                    let _ = self.release(&mut a, false);
                    a.ifindex = 0;
                    events.push(IfaceEvent::Gone {
                        iface: name.clone(),
                    });
                }
                if now != 0 {
                    match self.attach_slot(&name, slot, false) {
                        Ok(fresh) => {
                            a = fresh;
                            events.push(IfaceEvent::Reattached {
                                iface: name.clone(),
                                ifindex: now,
                            });
                        }
                        Err(e) => events.push(IfaceEvent::ReattachFailed {
                            iface: name.clone(),
                            error: e.to_string(),
                        }),
                    }
                }
                self.slots[slot] = Some(a);
            }
            let up = link_up(&name);
            if up != self.oper[slot] {
                if let Some(up) = up
                    && self.oper[slot].is_some()
                {
                    events.push(IfaceEvent::Link {
                        iface: name.clone(),
                        up,
                    });
                }
                self.oper[slot] = up;
            }
        }
        events
    }

    /// Whether the interface of `slot` is operationally up (None: gone).

    pub fn link_up(&self, slot: usize) -> Option<bool> {
        self.oper.get(slot).copied().flatten()
    }

    /// Detaches from every interface now (the maps stay readable): a snapshot taken afterwards
    /// is final and races no packet.
    pub fn detach(&mut self) -> Result<(), LiveError> {
        let mut first = Ok(());
        for slot in 0..self.slots.len() {
            if let Some(mut a) = self.slots[slot].take() {
                let present = a.ifindex != 0 && if_index(&a.name).ok() == Some(a.ifindex);
                let r = self.release(&mut a, present);
                if first.is_ok() {
                    first = r;
                }
            }
        }
        first
    }

    pub fn config(&self) -> &LiveConfig {
        &self.config
    }

    /// The loaded object (maps to read).
    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// Per-interface counters of `slot`, summed over CPUs: [ingress, egress].
    pub fn iface_counters(&self, slot: usize) -> Result<[IfaceCounters; 2], LiveError> {
        let read_err = |e: aya::maps::MapError| LiveError::ReadMap {
            map: maps::IFACE_COUNTERS,
            detail: chain(&e),
        };
        let counters: PerCpuArray<_, IfaceCounters> =
            PerCpuArray::try_from(map(&self.ebpf, maps::IFACE_COUNTERS)?).map_err(read_err)?;
        let mut out = [IfaceCounters::default(); 2];
        for (dir, total) in out.iter_mut().enumerate() {
            for c in counters
                .get(&(2 * slot as u32 + dir as u32), 0)
                .map_err(read_err)?
                .iter()
            {
                total.merge(c);
            }
        }
        Ok(out)
    }

    /// The microburst rings mapped into memory (ring 2i: interface slot i ingress, 2i + 1:
    /// egress); none when the configuration keeps no slots.
    pub fn burst_reader(&self) -> Result<Option<BurstReader>, LiveError> {
        if self.config.burst_slot_ns == 0 {
            return Ok(None);
        }
        let rings = 2 * self.ring_slots;
        let data = match map(&self.ebpf, maps::BURSTS)? {
            aya::maps::Map::Array(data) => data,
            _ => return Err(LiveError::BurstMap("BURSTS is not an array".into())),
        };
        BurstReader::new(data, rings, self.config.burst_slot_ns).map(Some)
    }

    /// Reads and sums the kernel maps. First/last-seen times are converted from the kernel's
    /// monotonic clock to Unix-epoch nanoseconds.
    pub fn snapshot(&self) -> Result<Aggregate, LiveError> {
        read_maps(&self.ebpf, monotonic_to_unix_offset())
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let _ = self.detach();
    }
}

/// The speed the interfaces report (sysfs, Mb/s), in bits/s, when they all report the same.
pub fn interfaces_speed(ifaces: &[String]) -> Option<u64> {
    let speeds: Vec<Option<u64>> = ifaces
        .iter()
        .map(|i| {
            std::fs::read_to_string(format!("/sys/class/net/{i}/speed"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .filter(|mbps| *mbps > 0)
                .map(|mbps| mbps as u64 * 1_000_000)
        })
        .collect();
    match speeds.first() {
        Some(Some(first)) if speeds.iter().all(|s| *s == Some(*first)) => Some(*first),
        _ => None,
    }
}

/// Whether `iface` is up and running (IFF_UP and IFF_RUNNING), None when it does not exist.
pub fn link_up(iface: &str) -> Option<bool> {
    let name = CString::new(iface).ok()?;
    if name.as_bytes().len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: a datagram socket for the ioctl, closed by OwnedFd; ifreq zeroed then named.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let socket = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut req: libc::ifreq = std::mem::zeroed();
        for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
            *d = *s as libc::c_char;
        }
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return None;
        }
        let flags = req.ifr_ifru.ifru_flags as libc::c_int;
        Some(flags & libc::IFF_UP != 0 && flags & libc::IFF_RUNNING != 0)
    }
}

/// Sums the observer's per-CPU maps of a loaded object (the flow table and the flow cache in
/// front of it); timestamps shifted by `ts_offset_ns` (0 keeps the kernel's monotonic clock).
/// While the program runs, a flow written back from the cache between the two reads can be
/// missed or counted twice; detach first for a final read.
pub fn read_maps(ebpf: &Ebpf, ts_offset_ns: i128) -> Result<Aggregate, LiveError> {
    let read_err = |map: &'static str| {
        move |e: aya::maps::MapError| LiveError::ReadMap {
            map,
            detail: chain(&e),
        }
    };
    let mut agg = Aggregate::new();
    let counters_map = map(ebpf, maps::COUNTERS)?;
    let counters: PerCpuArray<_, Counters> =
        PerCpuArray::try_from(counters_map).map_err(read_err(maps::COUNTERS))?;
    for c in counters
        .get(&0, 0)
        .map_err(read_err(maps::COUNTERS))?
        .iter()
    {
        agg.counters.merge(c);
    }
    let flows_map = map(ebpf, maps::FLOWS)?;
    let flows: PerCpuHashMap<_, FlowKey, FlowStats> =
        PerCpuHashMap::try_from(flows_map).map_err(read_err(maps::FLOWS))?;
    let mut add = |key: FlowKey, s: &FlowStats| {
        let mut s = *s;
        if s.packets > 0 {
            s.first_seen_ns = shift(s.first_seen_ns, ts_offset_ns);
            s.last_seen_ns = shift(s.last_seen_ns, ts_offset_ns);
        }
        agg.merge_flow(key, &s);
    };
    for entry in flows.iter() {
        let (key, per_cpu) = match entry {
            Ok(kv) => kv,
            // An LRU entry evicted while iterating: skip it.
            Err(aya::maps::MapError::KeyNotFound) => continue,
            Err(e) => return Err(read_err(maps::FLOWS)(e)),
        };
        for s in per_cpu.iter() {
            add(key, s);
        }
    }
    let cache_map = map(ebpf, maps::FLOW_CACHE)?;
    let cache: PerCpuArray<_, FlowSlot> =
        PerCpuArray::try_from(cache_map).map_err(read_err(maps::FLOW_CACHE))?;
    for per_cpu in cache.iter() {
        for slot in per_cpu.map_err(read_err(maps::FLOW_CACHE))?.iter() {
            add(slot.key, &slot.stats);
        }
    }
    let pauses_map = map(ebpf, maps::PAUSES)?;
    let pauses: PerCpuHashMap<_, PauseKey, PauseStats> =
        PerCpuHashMap::try_from(pauses_map).map_err(read_err(maps::PAUSES))?;
    for entry in pauses.iter() {
        let (key, per_cpu) = match entry {
            Ok(kv) => kv,
            Err(aya::maps::MapError::KeyNotFound) => continue,
            Err(e) => return Err(read_err(maps::PAUSES)(e)),
        };
        for s in per_cpu.iter() {
            let mut s = *s;
            if s.frames_total() > 0 {
                s.first_seen_ns = shift(s.first_seen_ns, ts_offset_ns);
                s.last_seen_ns = shift(s.last_seen_ns, ts_offset_ns);
            }
            agg.merge_pause(key, &s);
        }
    }
    Ok(agg)
}

/// Has the loaded object count the interfaces `interfaces` (name, ifindex) and keep their
/// microburst slots of `slot_ns` (0: none): interface i gets slot i (rings and counters 2i and
/// 2i + 1). Two interfaces in one entry of the ifindex-modulo array are refused. (For a bare
/// loaded object, as the kernel tests and the benchmark use; the observer registers its
/// interfaces one by one as it attaches.)
pub fn observe_bursts(
    ebpf: &mut Ebpf,
    interfaces: &[(&str, u32)],
    slot_ns: u64,
) -> Result<(), LiveError> {
    for (i, (name, ifindex)) in interfaces.iter().enumerate() {
        check_entry_clash(interfaces[..i].iter().copied(), name, *ifindex)?;
        register_interface(ebpf, i, *ifindex, slot_ns)?;
    }
    Ok(())
}

/// Refuses `name` (`ifindex`) when one of `others` (name, ifindex) has the same entry in the
/// kernel's ifindex-modulo interface array.
fn check_entry_clash<'a>(
    mut others: impl Iterator<Item = (&'a str, u32)>,
    name: &str,
    ifindex: u32,
) -> Result<(), LiveError> {
    let entry = ifindex % BURST_IFACE_SLOTS;
    match others.find(|(_, o)| o % BURST_IFACE_SLOTS == entry) {
        Some((other, _)) => Err(LiveError::EntryClash {
            first: other.to_string(),
            second: name.to_string(),
            entry,
        }),
        None => Ok(()),
    }
}

fn burst_ifaces(
    ebpf: &mut Ebpf,
) -> Result<aya::maps::Array<&mut aya::maps::MapData, BurstIface>, LiveError> {
    aya::maps::Array::try_from(ebpf.map_mut(maps::BURST_IFACES).ok_or(LiveError::ReadMap {
        map: maps::BURST_IFACES,
        detail: "missing".into(),
    })?)
    .map_err(|e| LiveError::Load(chain(&e)))
}

/// Zeroes the per-interface counters of interface slot `slot` (no interface is registered
/// there: nothing writes them meanwhile).
fn zero_iface_counters(ebpf: &mut Ebpf, slot: usize) -> Result<(), LiveError> {
    let fail = |detail: String| LiveError::ReadMap {
        map: maps::IFACE_COUNTERS,
        detail,
    };
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| fail(e.to_string()))?;
    let mut counters: PerCpuArray<_, IfaceCounters> = PerCpuArray::try_from(
        ebpf.map_mut(maps::IFACE_COUNTERS)
            .ok_or_else(|| fail("missing".into()))?,
    )
    .map_err(|e| fail(chain(&e)))?;
    for dir in 0..2 {
        let zero = aya::maps::PerCpuValues::try_from(vec![IfaceCounters::default(); cpus])
            .map_err(|e| fail(e.to_string()))?;
        counters
            .set(2 * slot as u32 + dir, zero, 0)
            .map_err(|e| fail(chain(&e)))?;
    }
    Ok(())
}

/// Points the kernel's entry for `ifindex` at interface slot `slot`.
fn register_interface(
    ebpf: &mut Ebpf,
    slot: usize,
    ifindex: u32,
    slot_ns: u64,
) -> Result<(), LiveError> {
    let value = BurstIface {
        ring: 2 * slot as u32,
        ifindex,
        slot_ns,
    };
    burst_ifaces(ebpf)?
        .set(ifindex % BURST_IFACE_SLOTS, value, 0)
        .map_err(|e| LiveError::Load(chain(&e)))
}

/// Clears the kernel's entry for `ifindex` (if it is still that interface's).
fn unregister_interface(ebpf: &mut Ebpf, ifindex: u32) {
    if let Ok(mut ifaces) = burst_ifaces(ebpf) {
        let at = ifindex % BURST_IFACE_SLOTS;
        if ifaces.get(&at, 0).is_ok_and(|v| v.ifindex == ifindex) {
            let _ = ifaces.set(at, BurstIface::default(), 0);
        }
    }
}

/// What reading a ring slot found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotRead {
    /// The slot's wire bytes (non-zero).
    Bytes(u64, u64),
    /// Slots the ring had reused before they were read.
    Lost(u64),
}

/// The kernel's microburst rings, mapped into this process: reads complete slots in order and
/// zeroes them for the ring's next turn.
pub struct BurstReader {
    ptr: std::ptr::NonNull<BurstSlot>,
    len_bytes: usize,
    rings: usize,
    slot_ns: u64,
    /// Per ring, the next slot to read.
    next: Vec<u64>,
}

// SAFETY: the mapping is owned by the reader and only touched through &mut self.
unsafe impl Send for BurstReader {}

impl BurstReader {
    fn new(data: &aya::maps::MapData, rings: usize, slot_ns: u64) -> Result<Self, LiveError> {
        use std::os::fd::AsFd;
        let len_bytes = rings * BURST_RING_SLOTS as usize * std::mem::size_of::<BurstSlot>();
        let fd = data.fd().as_fd();
        // SAFETY: mapping the map's value area (BPF_F_MMAPABLE), shared with the kernel.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(LiveError::BurstMap(io::Error::last_os_error().to_string()));
        }
        let now = monotonic_ns() / slot_ns;
        Ok(Self {
            ptr: std::ptr::NonNull::new(ptr.cast()).expect("mmap succeeded"),
            len_bytes,
            rings,
            slot_ns,
            next: vec![now; rings],
        })
    }

    pub fn slot_ns(&self) -> u64 {
        self.slot_ns
    }

    /// How often to drain so that no slot is reused before it is read: a quarter of a ring.
    pub fn period(&self) -> std::time::Duration {
        std::time::Duration::from_nanos((self.slot_ns * BURST_RING_SLOTS as u64 / 4).max(1))
    }

    /// Reads every ring's slots before `upto` (exclusive): `f(ring, what)`. Live, `upto` is the
    /// current slot less one (slots still being written stay); after detaching, any later slot.
    pub fn drain_until(&mut self, upto: u64, mut f: impl FnMut(usize, SlotRead)) {
        use std::sync::atomic::{AtomicU64, Ordering};
        let ring_len = BURST_RING_SLOTS as u64;
        for ring in 0..self.rings {
            let mut s = self.next[ring];
            if upto > s + ring_len {
                f(ring, SlotRead::Lost(upto - ring_len - s));
                s = upto - ring_len;
            }
            while s < upto {
                let i = ring * BURST_RING_SLOTS as usize + (s % ring_len) as usize;
                // SAFETY: i < rings * BURST_RING_SLOTS, inside the mapping; the kernel writes
                // the tag with plain stores and the bytes atomically.
                unsafe {
                    let e = self.ptr.as_ptr().add(i);
                    let tag = std::ptr::read_volatile(&raw const (*e).slot);
                    if tag == s {
                        let bytes =
                            AtomicU64::from_ptr(&raw mut (*e).bytes).swap(0, Ordering::AcqRel);
                        if bytes > 0 {
                            f(ring, SlotRead::Bytes(s, bytes));
                        }
                    }
                }
                s += 1;
            }
            self.next[ring] = s.max(self.next[ring]);
        }
    }

    /// Reads the complete slots (all but the current one and the one before it).
    pub fn drain(&mut self, f: impl FnMut(usize, SlotRead)) {
        let now = monotonic_ns() / self.slot_ns;
        self.drain_until(now.saturating_sub(1), f);
    }
}

impl Drop for BurstReader {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len_bytes) };
    }
}

/// A map of the loaded object, or `ReadMap` naming it.
fn map<'a>(ebpf: &'a Ebpf, name: &'static str) -> Result<&'a aya::maps::Map, LiveError> {
    ebpf.map(name).ok_or(LiveError::ReadMap {
        map: name,
        detail: "missing".into(),
    })
}

fn shift(ns: u64, by: i128) -> u64 {
    (ns as i128 + by).clamp(0, u64::MAX as i128) as u64
}

/// CLOCK_MONOTONIC in ns (the kernel program's clock).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Unix-epoch ns, now.
pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Unix-epoch ns minus CLOCK_MONOTONIC ns, now.
pub fn monotonic_to_unix_offset() -> i128 {
    let mono = monotonic_ns() as i128;
    let unix = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    unix - mono
}

/// A load error on one line: a rejected program's verifier log is long and multi-line, so keep
/// the first line and the log's last lines that say why (the rejected instruction, the reason).
fn load_error(e: &dyn std::error::Error) -> LiveError {
    // The message itself, not the source chain: aya's load error already names the errno,
    // and a source appended after the log's last newline would push the reason out.
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default().to_string();
    let rest: Vec<&str> = lines
        .filter(|l| !l.starts_with("verification time") && !l.starts_with("stack depth"))
        .filter(|l| !l.starts_with("processed "))
        .collect();
    LiveError::Load(match rest.len() {
        0 => first,
        n => format!("{first} ... {}", rest[n.saturating_sub(2)..].join("; ")),
    })
}

/// The error and its sources on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

fn os_error(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return io.raw_os_error();
        }
        cur = err.source();
    }
    None
}

/// Attaches the TC egress observer to `iface`: tcx as the first program, or a new filter on the
/// clsact qdisc (added when missing, and left in place afterwards: other filters may use it by
/// then) that the kernel places ahead of the existing ones. First, so that it sees every frame
/// before another program may drop or redirect it; it passes every packet on, so the others see
/// what they saw before. Neither replaces anything.
fn attach_egress(
    tc: &mut SchedClassifier,
    iface: &str,
    hook: TcHook,
) -> Result<SchedClassifierLinkId, LiveError> {
    use aya::{
        programs::{
            LinkOrder,
            tc::{NlOptions, TcAttachOptions},
        },
        util::KernelVersion,
    };
    let fail = |detail: String| LiveError::TcAttach {
        iface: iface.to_string(),
        detail,
    };
    let tcx = match hook {
        TcHook::Auto => KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0)),
        TcHook::Tcx => true,
        TcHook::Clsact => false,
    };
    let options = if tcx {
        TcAttachOptions::TcxOrder(LinkOrder::first())
    } else {
        if let Err(e) = aya::programs::tc::qdisc_add_clsact(iface) {
            // EEXIST: the qdisc is there already, which is what we need.
            if os_error(&e) != Some(libc::EEXIST) {
                return Err(fail(chain(&e)));
            }
        }
        TcAttachOptions::Netlink(NlOptions::default())
    };
    tc.attach_with_options(iface, TcAttachType::Egress, options)
        .map_err(|e| match e {
            ProgramError::UnknownInterface { name } => LiveError::UnknownInterface(name),
            e => fail(chain(&e)),
        })
}

fn attach_error(iface: &str, mode: AttachMode, e: &ProgramError) -> LiveError {
    match e {
        ProgramError::UnknownInterface { name } => LiveError::UnknownInterface(name.clone()),
        _ => match os_error(e) {
            Some(libc::EBUSY) | Some(libc::EEXIST) => LiveError::XdpBusy(iface.to_string()),
            Some(libc::EOPNOTSUPP) if mode == AttachMode::Native => LiveError::ModeUnsupported {
                iface: iface.to_string(),
                mode: mode.name(),
            },
            _ => LiveError::Attach {
                iface: iface.to_string(),
                detail: chain(e),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Verifier(&'static str);
    impl std::fmt::Display for Verifier {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Verifier {
        // As aya's load error: the errno is in the message and is the source too.
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&ERRNO)
        }
    }
    static ERRNO: Errno = Errno;
    #[derive(Debug)]
    struct Errno;
    impl std::fmt::Display for Errno {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Permission denied (os error 13)")
        }
    }
    impl std::error::Error for Errno {}

    #[test]
    fn interfaces_in_one_kernel_entry_are_refused() {
        let others = [("eth0", 5), ("eth1", 6)];
        assert!(check_entry_clash(others.iter().copied(), "eth2", 7).is_ok());
        let e = check_entry_clash(others.iter().copied(), "veth9", 5 + BURST_IFACE_SLOTS)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "interfaces 'eth0' and 'veth9' share the kernel's interface entry 5 (ifindex modulo 4096); observe them in two processes"
        );
    }

    #[test]
    fn verifier_logs_become_one_line() {
        let e = Verifier(
            "the BPF_PROG_LOAD syscall returned Permission denied (os error 13). Verifier output: 0: R1=ctx() R10=fp0\n; #[xdp]\n1446: (71) r0 = *(u8 *)(r5 +0)\ninvalid access to packet, off=0 size=1\nR5 offset is outside of the packet\nverification time 46957 usec\nstack depth 296\nprocessed 7124 insns (limit 1000000)\n",
        );
        let LiveError::Load(msg) = load_error(&e) else {
            panic!("not a load error")
        };
        assert!(!msg.contains('\n'), "{msg}");
        assert_eq!(
            msg,
            "the BPF_PROG_LOAD syscall returned Permission denied (os error 13). Verifier output: 0: R1=ctx() R10=fp0 ... invalid access to packet, off=0 size=1; R5 offset is outside of the packet"
        );
    }
}
