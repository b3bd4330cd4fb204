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
    Counters, DEFAULT_MAX_FLOWS, FlowKey, FlowSlot, FlowStats, PauseKey, PauseStats, maps, programs,
};

use crate::{EBPF_OBJECT, aggregate::Aggregate};

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
}

/// XDP attach mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AttachMode {
    /// Native when the driver supports it, generic otherwise (the kernel decides).
    #[default]
    Auto,
    /// Generic XDP (works on every interface).
    Skb,
    /// Driver (native) XDP.
    Native,
}

impl AttachMode {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Skb => "skb",
            Self::Native => "native",
        }
    }

    const fn xdp(self) -> XdpMode {
        match self {
            Self::Auto => XdpMode::Default,
            Self::Skb => XdpMode::Skb,
            Self::Native => XdpMode::Driver,
        }
    }
}

/// Which TC egress hook host mode uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
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
}

impl LiveConfig {
    pub fn new(interfaces: Vec<String>) -> Self {
        Self {
            interfaces,
            mode: AttachMode::Auto,
            vantage: Vantage::Host,
            max_flows: DEFAULT_MAX_FLOWS,
            tc_hook: TcHook::Auto,
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

/// Largest flow table accepted (per-CPU values: memory is max_flows x 208 B x CPUs).
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
const CAP_BPF: u32 = 39;

/// Checks the effective capabilities XDP needs: CAP_BPF (or CAP_SYS_ADMIN) and CAP_NET_ADMIN.
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

/// The observer attached to its interfaces. Dropping it detaches every program it attached
/// (and only those).
pub struct Observer {
    ebpf: Ebpf,
    config: LiveConfig,
    links: Vec<XdpLinkId>,
    /// Host mode: the TC egress links, one per interface.
    egress_links: Vec<SchedClassifierLinkId>,
    /// Mirror mode: promiscuous mode held on each interface (dropped after the links).
    _promiscuous: Vec<Promiscuous>,
}

impl Observer {
    /// Checks privileges and interfaces, loads the object, attaches XDP everywhere (all or none).
    pub fn attach(config: LiveConfig) -> Result<Self, LiveError> {
        if config.max_flows == 0 || config.max_flows > MAX_FLOWS_LIMIT {
            return Err(LiveError::MaxFlows {
                got: config.max_flows,
                max: MAX_FLOWS_LIMIT,
            });
        }
        for (i, iface) in config.interfaces.iter().enumerate() {
            if config.interfaces[..i].contains(iface) {
                return Err(LiveError::DuplicateInterface(iface.clone()));
            }
            if_index(iface)?;
        }
        check_privileges()?;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(maps::FLOWS, config.max_flows)
            .load(EBPF_OBJECT)
            .map_err(|e| load_error(&e))?;
        let name = config.vantage.program();
        let prog: &mut Xdp = ebpf
            .program_mut(name)
            .ok_or_else(|| LiveError::Load(format!("no program {name}")))?
            .try_into()
            .map_err(|e: ProgramError| load_error(&e))?;
        prog.load().map_err(|e| load_error(&e))?;
        let mut promiscuous = Vec::new();
        if let Vantage::Mirror { .. } = config.vantage {
            for iface in &config.interfaces {
                promiscuous.push(Promiscuous::enable(iface)?);
            }
        }
        let mut links = Vec::new();
        for iface in &config.interfaces {
            // On error, dropping `ebpf` detaches what was attached so far.
            links.push(
                prog.attach(iface, config.mode.xdp())
                    .map_err(|e| attach_error(iface, config.mode, &e))?,
            );
        }
        let mut egress_links = Vec::new();
        if config.vantage == Vantage::Host {
            let tc: &mut SchedClassifier = ebpf
                .program_mut(programs::OBSERVE_EGRESS)
                .ok_or_else(|| LiveError::Load(format!("no program {}", programs::OBSERVE_EGRESS)))?
                .try_into()
                .map_err(|e: ProgramError| load_error(&e))?;
            tc.load().map_err(|e| load_error(&e))?;
            for iface in &config.interfaces {
                egress_links.push(attach_egress(tc, iface, config.tc_hook)?);
            }
        }
        Ok(Self {
            ebpf,
            config,
            links,
            egress_links,
            _promiscuous: promiscuous,
        })
    }

    /// Detaches from every interface now (the maps stay readable): a snapshot taken afterwards
    /// is final and races no packet.
    pub fn detach(&mut self) -> Result<(), LiveError> {
        let name = self.config.vantage.program();
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(name)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| LiveError::Load(format!("no program {name}")))?;
        for (link, iface) in self.links.drain(..).zip(&self.config.interfaces) {
            prog.detach(link).map_err(|e| LiveError::Detach {
                iface: iface.clone(),
                detail: chain(&e),
            })?;
        }
        if !self.egress_links.is_empty() {
            let tc: &mut SchedClassifier = self
                .ebpf
                .program_mut(programs::OBSERVE_EGRESS)
                .and_then(|p| p.try_into().ok())
                .ok_or_else(|| {
                    LiveError::Load(format!("no program {}", programs::OBSERVE_EGRESS))
                })?;
            for (link, iface) in self.egress_links.drain(..).zip(&self.config.interfaces) {
                tc.detach(link).map_err(|e| LiveError::Detach {
                    iface: iface.clone(),
                    detail: format!("TC egress: {}", chain(&e)),
                })?;
            }
        }
        Ok(())
    }

    pub fn config(&self) -> &LiveConfig {
        &self.config
    }

    /// Reads and sums the kernel maps. First/last-seen times are converted from the kernel's
    /// monotonic clock to Unix-epoch nanoseconds.
    pub fn snapshot(&self) -> Result<Aggregate, LiveError> {
        read_maps(&self.ebpf, monotonic_to_unix_offset())
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

/// Unix-epoch ns minus CLOCK_MONOTONIC ns, now.
fn monotonic_to_unix_offset() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let mono = ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128;
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
