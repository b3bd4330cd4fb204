//! Live capture: load the kernel object, attach the XDP observer to interfaces (and in host mode
//! the TC egress observer), read and sum the per-CPU maps into an [`Aggregate`], detach on drop.
//!
//! Attaching never replaces a program somebody else attached: a busy interface (XDP) is an
//! error; TC egress goes ahead of the programs already there (tcx: first; clsact: a new filter,
//! which the kernel places first), sees frames before any of them can drop or redirect one, and
//! passes every packet on to them.

use aya::{
    Ebpf, EbpfLoader,
    programs::{
        ProgramError, SchedClassifier, TcAttachType, Xdp, XdpMode, tc::SchedClassifierLinkId,
        xdp::XdpLinkId,
    },
};
use observer_common::{
    DEFAULT_MAX_FLOWS, IfaceCounters, MAX_BURST_IFACES, maps as map_names, programs,
};

mod attach;
pub mod bpfsys;
mod bursts;
mod clock;
mod error;
mod maps;
pub mod memory;
mod netdev;
mod spread;

pub use bursts::{BurstReader, SlotRead, burst_entries, observe_bursts};
pub use clock::{
    RUN_TICK_NS, freeze_clock, monotonic_ns, monotonic_to_unix_offset, read_clock, start_clock,
    unix_ns,
};
pub use error::{LiveError, OneLine};
pub use maps::{
    FlowSink, flow_log_written, iface_counters, read_counters, read_flow_cache, read_flow_entries,
    read_flow_log, read_flow_table, read_flows, read_latency, read_maps, read_message_list,
    read_messages, read_pauses, take_flow,
};
pub use netdev::{
    Promiscuous, check_privileges, if_index, interfaces_speed, link_up, receive_missed,
};
pub use spread::{Spread, cpu_list, online_cpus, parse_cpu_list, set_up as set_up_spread};

use self::{
    attach::{XdpOwner, attach_error, attach_tc, xdp_owner},
    bursts::{check_entry_clash, register_interface, unregister_interface, zero_iface_counters},
    error::load_error,
};
use crate::{EBPF_OBJECT, aggregate::Aggregate};

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

/// Where the observer sits, as people choose it (`--mode`, `mode = "mirror"`); with `consume`
/// it makes the [`Vantage`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Host,
    Mirror,
}

impl crate::units::Named for Mode {
    const ALL: &'static [Self] = &[Self::Host, Self::Mirror];

    fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Mirror => "mirror",
        }
    }
}

/// Where the observer sits, and what it does with mirror copies.
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
    /// The vantage of `mode` with `consume`; none for consuming in host mode (host mode never
    /// drops a packet).
    pub const fn of(mode: Mode, consume: bool) -> Option<Self> {
        match (mode, consume) {
            (Mode::Host, true) => None,
            (Mode::Host, false) => Some(Self::Host),
            (Mode::Mirror, consume) => Some(Self::Mirror { consume }),
        }
    }

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
    /// How XDP attaches (driver or generic); where the observer sits is `vantage`.
    pub xdp_mode: AttachMode,
    pub vantage: Vantage,
    pub max_flows: u32,
    /// Host mode: the TC egress hook.
    pub tc_hook: TcHook,
    /// Microburst slot width in ns (0: the kernel keeps no slots).
    pub burst_slot_ns: u64,
    /// Mirror mode: the CPUs that account the copies.
    pub spread: Spread,
    /// Host mode: where an interface's XDP hook holds roce-observer's own observer (a sidecar
    /// running there), attach at TC ingress instead, which sees every frame it passes
    /// (`diagnose` beside `run`).
    pub beside_sidecar: bool,
}

impl LiveConfig {
    pub fn new(interfaces: Vec<String>) -> Self {
        Self {
            interfaces,
            xdp_mode: AttachMode::Auto,
            vantage: Vantage::Host,
            max_flows: DEFAULT_MAX_FLOWS,
            tc_hook: TcHook::Auto,
            burst_slot_ns: crate::units::DEFAULT_SLOT_NS,
            spread: Spread::QueueCpus,
            beside_sidecar: false,
        }
    }
}

/// Largest flow table accepted (per-CPU values: memory is max_flows x 216 B x CPUs).
pub const MAX_FLOWS_LIMIT: u32 = 1 << 20;

/// One interface the observer is attached to (or was: `ifindex` 0 while it is gone).
struct Attached {
    name: String,
    ifindex: u32,
    xdp: Option<XdpLinkId>,
    /// Host mode: the TC egress link.
    egress: Option<SchedClassifierLinkId>,
    /// Host mode beside a sidecar: the TC ingress link (instead of XDP).
    ingress: Option<SchedClassifierLinkId>,
    /// It was observed at TC ingress beside a sidecar: a re-created interface is attached there
    /// again (never racing the sidecar for the XDP hook).
    beside: bool,
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
    /// Mirror mode: the CPUs the copies are spread over (none: accounted where received).
    spread: Vec<u32>,
    /// The XDP program attached to the interfaces.
    xdp_program: &'static str,
}

/// The warning of a spreading observer whose copies carry no arrival time.
pub const SPREAD_UNSTAMPED: &str = "this kernel refuses XDP metadata to XDP programs \
     (bpf_xdp_adjust_meta): copies spread over CPUs cannot carry the time they arrived, so \
     passive latency is not measured (timed after a CPU's queue, a sample would be off by its \
     wait); copies accounted where they are received (--cpus off) are timed";

/// Loads XDP program `name`.
fn load_xdp(ebpf: &mut Ebpf, name: &'static str) -> Result<(), LiveError> {
    let prog: &mut Xdp = ebpf
        .program_mut(name)
        .ok_or(LiveError::MissingProgram(name))?
        .try_into()
        .map_err(|e: ProgramError| load_error(&e))?;
    prog.load().map_err(|e| load_error(&e))
}

/// Loads the spreading program: the one that stamps each copy with its arrival time, or, on a
/// kernel whose verifier refuses it the metadata helper (and for no other reason), the one
/// without.
pub fn load_spread(ebpf: &mut Ebpf) -> Result<&'static str, LiveError> {
    match load_xdp(ebpf, programs::SPREAD) {
        Ok(()) => Ok(programs::SPREAD),
        Err(stamping)
            if stamping
                .to_string()
                .contains("cannot use helper bpf_xdp_adjust_meta") =>
        {
            load_xdp(ebpf, programs::SPREAD_BARE)?;
            spread::set_untimed(ebpf)?;
            Ok(programs::SPREAD_BARE)
        }
        Err(other) => Err(other),
    }
}

/// The kernel object `object` loaded, its programs not yet: the maps `sizes` (name, entries)
/// resized, the microburst rings sized for `ifaces` interfaces per CPU (two rings each), the
/// spreading cpumap for the host's CPUs, and its clock ticking every `tick_ns`.
pub fn load_object(
    object: &[u8],
    sizes: &[(&str, u32)],
    ifaces: u32,
    tick_ns: u64,
) -> Result<Ebpf, LiveError> {
    if object.is_empty() {
        return Err(LiveError::NoKernelPrograms);
    }
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| LiveError::BurstMap(e))? as u32;
    let mut loader = EbpfLoader::new();
    loader.map_max_entries(map_names::SPREAD_CPUS, cpus);
    for (name, entries) in sizes {
        loader.map_max_entries(name, *entries);
    }
    loader.map_max_entries(map_names::BURSTS, burst_entries(2 * ifaces)?);
    let mut ebpf = loader.load(object).map_err(|e| load_error(&e))?;
    start_clock(&mut ebpf, tick_ns)?;
    Ok(ebpf)
}

impl Observer {
    /// Checks privileges and interfaces, loads the object, attaches XDP everywhere (all or none).
    pub fn attach(config: LiveConfig) -> Result<Self, LiveError> {
        // First: a build without the kernel programs says so before anything else.
        if EBPF_OBJECT.is_empty() {
            return Err(LiveError::NoKernelPrograms);
        }
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
        if EBPF_OBJECT.is_empty() {
            return Err(LiveError::NoKernelPrograms);
        }
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
        let tick_ns = if config.burst_slot_ns > 0 {
            config.burst_slot_ns
        } else {
            RUN_TICK_NS
        };
        let spread = match config.vantage {
            Vantage::Mirror { .. } => spread::resolve(&config.spread, &config.interfaces)?,
            Vantage::Host if !matches!(config.spread, Spread::QueueCpus | Spread::Off) => {
                return Err(LiveError::Spread(
                    "host mode accounts every frame where it is received; spreading is for mirror mode".into(),
                ));
            }
            Vantage::Host => Vec::new(),
        };
        let mut ebpf = load_object(
            EBPF_OBJECT,
            // The benchmark-only shared table is loaded with the object: at its smallest, as
            // nothing here writes it.
            &[
                (map_names::FLOWS, config.max_flows),
                (map_names::FLOWS_SHARED, 1),
            ],
            ring_slots as u32,
            tick_ns,
        )?;
        if !spread.is_empty() {
            spread::set_up(&mut ebpf, config.vantage, &spread)?;
        }
        let xdp_program = if spread.is_empty() {
            let name = config.vantage.program();
            load_xdp(&mut ebpf, name)?;
            name
        } else {
            load_spread(&mut ebpf)?
        };
        if config.vantage == Vantage::Host {
            let tc: &mut SchedClassifier = ebpf
                .program_mut(programs::OBSERVE_EGRESS)
                .ok_or(LiveError::MissingProgram(programs::OBSERVE_EGRESS))?
                .try_into()
                .map_err(|e: ProgramError| load_error(&e))?;
            tc.load().map_err(|e| load_error(&e))?;
            if config.beside_sidecar {
                let tc: &mut SchedClassifier = ebpf
                    .program_mut(programs::OBSERVE_INGRESS)
                    .ok_or(LiveError::MissingProgram(programs::OBSERVE_INGRESS))?
                    .try_into()
                    .map_err(|e: ProgramError| load_error(&e))?;
                tc.load().map_err(|e| load_error(&e))?;
            }
        }
        Ok(Self {
            ebpf,
            config,
            slots: Vec::new(),
            ring_slots,
            oper: Vec::new(),
            spread,
            xdp_program,
        })
    }

    /// What the observer could not do as it would on this kernel, for the report's source.
    pub fn warnings(&self) -> Vec<String> {
        if self.xdp_program == programs::SPREAD_BARE {
            vec![SPREAD_UNSTAMPED.to_string()]
        } else {
            Vec::new()
        }
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
            return Err(LiveError::NoBurstRing {
                iface: iface.to_string(),
                rings: self.ring_slots,
            });
        }
        let attached = self.attach_slot(iface, slot, true, false)?;
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
        beside: bool,
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
        let rings = if self.config.burst_slot_ns > 0 {
            2 * self.ring_slots as u32
        } else {
            0
        };
        register_interface(&mut self.ebpf, slot, ifindex, rings)?;
        let mut attached = Attached {
            name: iface.to_string(),
            ifindex,
            xdp: None,
            egress: None,
            ingress: None,
            beside,
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
        let xdp = if beside {
            // Beside the sidecar before: straight to TC ingress.
            match self.attach_ingress(iface) {
                Ok(link) => {
                    attached.ingress = Some(link);
                    None
                }
                Err(e) => {
                    let _ = self.release(&mut attached, true);
                    return Err(e);
                }
            }
        } else {
            let name = self.attached_program();
            let prog: &mut Xdp = self
                .ebpf
                .program_mut(name)
                .and_then(|p| p.try_into().ok())
                .ok_or(LiveError::MissingProgram(name))?;
            Some(prog.attach(iface, self.config.xdp_mode.xdp()))
        };
        match xdp {
            None => {}
            Some(Ok(link)) => attached.xdp = Some(link),
            Some(Err(e)) => {
                let e = attach_error(iface, self.config.xdp_mode, e);
                // A hook taken by roce-observer's own observer (a sidecar): TC ingress sees every
                // frame it passes, in host mode.
                let beside = match (&e, self.beside_sidecar()) {
                    (LiveError::XdpBusy(..), beside) => match xdp_owner(iface) {
                        XdpOwner::Observer(_) if beside => Some(self.attach_ingress(iface)),
                        XdpOwner::OurMirror(id, name) => Some(Err(LiveError::SidecarMirror(
                            iface.to_string(),
                            format!("program {id}, {name}"),
                        ))),
                        _ => None,
                    },
                    _ => None,
                };
                match beside {
                    Some(Ok(link)) => {
                        attached.ingress = Some(link);
                        attached.beside = true;
                    }
                    Some(Err(e2)) => {
                        let _ = self.release(&mut attached, true);
                        return Err(e2);
                    }
                    None => {
                        let _ = self.release(&mut attached, true);
                        return Err(e);
                    }
                }
            }
        }
        if self.config.vantage == Vantage::Host {
            let tc: &mut SchedClassifier = self
                .ebpf
                .program_mut(programs::OBSERVE_EGRESS)
                .and_then(|p| p.try_into().ok())
                .ok_or(LiveError::MissingProgram(programs::OBSERVE_EGRESS))?;
            match attach_tc(tc, iface, self.config.tc_hook, TcAttachType::Egress) {
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
        let name = self.attached_program();
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
                source: e,
            });
        }
        for (link, program, error) in [
            (
                a.ingress.take(),
                programs::OBSERVE_INGRESS,
                (|iface, source| LiveError::DetachIngress { iface, source })
                    as fn(String, ProgramError) -> LiveError,
            ),
            (
                a.egress.take(),
                programs::OBSERVE_EGRESS,
                |iface, source| LiveError::DetachEgress { iface, source },
            ),
        ] {
            if let Some(link) = link
                && let Some(tc) = self
                    .ebpf
                    .program_mut(program)
                    .and_then(|p| <&mut SchedClassifier>::try_from(p).ok())
                && let Err(e) = tc.detach(link)
                && present
                && first.is_ok()
            {
                first = Err(error(a.name.clone(), e));
            }
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
            a.as_ref().map(|a| {
                let on = a.xdp.is_some() || a.ingress.is_some();
                (i, a.name.as_str(), a.ifindex, on)
            })
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
                    match self.attach_slot(&name, slot, false, a.beside) {
                        Ok(fresh) => {
                            a = fresh;
                            events.push(IfaceEvent::Reattached {
                                iface: name.clone(),
                                ifindex: now,
                            });
                        }
                        Err(e) => events.push(IfaceEvent::ReattachFailed {
                            iface: name.clone(),
                            error: OneLine(&e).to_string(),
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

    /// The interfaces observed at TC ingress beside a sidecar's XDP program (not through XDP).
    pub fn beside(&self) -> Vec<&str> {
        self.slots
            .iter()
            .flatten()
            .filter(|a| a.beside)
            .map(|a| a.name.as_str())
            .collect()
    }

    /// Whether an interface whose XDP hook a sidecar holds is observed at TC ingress instead.
    fn beside_sidecar(&self) -> bool {
        self.config.beside_sidecar && self.config.vantage == Vantage::Host
    }

    /// Attaches the TC ingress observer to `iface` (beside a sidecar's XDP program).
    fn attach_ingress(&mut self, iface: &str) -> Result<SchedClassifierLinkId, LiveError> {
        let tc: &mut SchedClassifier = self
            .ebpf
            .program_mut(programs::OBSERVE_INGRESS)
            .and_then(|p| p.try_into().ok())
            .ok_or(LiveError::MissingProgram(programs::OBSERVE_INGRESS))?;
        attach_tc(tc, iface, self.config.tc_hook, TcAttachType::Ingress)
    }

    /// Whether the interface of `slot` is operationally up (None: gone).
    pub fn link_up(&self, slot: usize) -> Option<bool> {
        self.oper.get(slot).copied().flatten()
    }

    /// Detaches from every interface now (the maps stay readable), and waits for the frames
    /// still queued for spread CPUs: a snapshot taken afterwards is final and races no packet.
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
        if !self.spread.is_empty() {
            spread::settle(&self.ebpf);
        }
        first
    }

    pub fn config(&self) -> &LiveConfig {
        &self.config
    }

    /// Mirror mode: the CPUs the copies are spread over (none: accounted where received).
    pub fn spread_cpus(&self) -> &[u32] {
        &self.spread
    }

    /// The XDP program attached to the interfaces.
    fn attached_program(&self) -> &'static str {
        self.xdp_program
    }

    /// The loaded object (maps to read).
    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// Per-interface counters of `slot`, summed over CPUs: [ingress, egress].
    pub fn iface_counters(&self, slot: usize) -> Result<[IfaceCounters; 2], LiveError> {
        iface_counters(&self.ebpf, slot)
    }

    /// The microburst rings mapped into memory (ring 2i: interface slot i ingress, 2i + 1:
    /// egress); none when the configuration keeps no slots.
    pub fn burst_reader(&self) -> Result<Option<BurstReader>, LiveError> {
        if self.config.burst_slot_ns == 0 {
            return Ok(None);
        }
        BurstReader::new(&self.ebpf, 2 * self.ring_slots, self.config.burst_slot_ns).map(Some)
    }

    /// The kernel programs' clock now: its tick is the microburst slot they give a frame
    /// (behind CLOCK_MONOTONIC while its timer runs late).
    pub fn clock(&self) -> Result<observer_common::Clock, LiveError> {
        Ok(read_clock(&self.ebpf)?.clock)
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
