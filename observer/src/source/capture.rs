//! Live capture through libpcap (`--capture DEV`): an RDMA device's offloaded-traffic sniffer
//! (libpcap's rdmasniff module opens `mlx5_0` by its RDMA device name, when libpcap is built with
//! it), or any network interface libpcap can open. Where XDP sees nothing (a NIC that offloads
//! RDMA), the sniffer still hands over what the NIC moved.
//!
//! Frames go through replay's way to the parser ([`Link`]: Ethernet, Linux cooked SLL and SLL2,
//! raw IP) and the one aggregation path ([`Aggregate::push_parsed`]), with libpcap's timestamp
//! and original length, exactly as a capture file of the same frames would be replayed. The
//! capture device's frames are also counted as the kernel counts an interface's
//! ([`IfaceCounters`]), and a [`FrameObserver`] (the pipeline's time series) sees each frame.
//!
//! What is opened and how:
//! - **Promiscuous mode on** by default: on a mirror port the copies carry other hosts' MAC
//!   addresses and a NIC not in promiscuous mode drops them before anything sees them. libpcap
//!   holds it through a packet-socket membership, which the kernel releases when the socket
//!   closes (also when the process is killed), without undoing anyone else's. An RDMA sniffer
//!   ignores it.
//! - **Snaplen [`SNAPLEN`]** (256 bytes): every byte the parser can read, the longest case (an
//!   ERSPAN III copy with its platform subheader, QinQ and IPv4 options outside and inside, RD's
//!   extended headers and a RETH) ends at byte 248; lengths come from the IP header, so a
//!   snapped frame counts fully.
//! - **The capture filter [`DEFAULT_FILTER`]**: what the parser accounts for, and nothing it would
//!   only skip: RoCEv2 (UDP to 4791), GRE over IPv4 and IPv6 (mirror copies, whatever is inside
//!   them, and GRE the parser counts as unsupported), and MAC control (PAUSE / PFC), untagged or
//!   under one or two VLAN tags. On a network interface the kernel runs it, so the rest of the
//!   host's traffic is never copied to userspace; the frames it drops are in no count (`frames`
//!   and the skip reasons count what passed). [`CaptureConfig::filter`] replaces it (none: every
//!   frame, as XDP sees them).
//! - **Immediate mode**, a 32 MiB buffer, and waits of at most [`WAIT`]: a quiet capture still
//!   ends its window on time and stops within a wait of being asked to. The descriptor is polled
//!   before reading, because the rdmasniff module's read ignores libpcap's timeout.
//! - **Timestamps** in nanoseconds where the device has them (network interfaces), else in
//!   microseconds (the RDMA sniffer stamps frames with the time of day as it reads them).
//! - **Drops**: libpcap's own counters (`pcap_stats`: no room in its buffer, and the interface's
//!   receive drops since the capture began) are kept in [`CaptureStats`]. The rdmasniff module
//!   counts no drops at all.

use std::{
    io,
    os::fd::RawFd,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use observer_common::IfaceCounters;
use pcap::{Active, Precision};
use pcap_file::DataLink;

use super::replay::{FrameObserver, Link};
use crate::aggregate::Aggregate;

/// Bytes kept of each frame: every byte the parser can read (the longest headers it reads end
/// at byte 248; at 254 behind a Linux cooked v2 header, 6 bytes longer than Ethernet's), and a
/// connection manager's MAD whole (its REQ or REP is read from the frame's end: 322 bytes over
/// IPv4, 342 over IPv6, some 470 inside the longest mirror headers).
pub const SNAPLEN: u32 = 512;

/// What the parser accounts for, untagged or under one or two VLAN tags: RoCEv2 (UDP to port
/// 4791), GRE (mirror copies, decapsulated whatever they carry), and MAC control (PAUSE / PFC;
/// tagged ones the parser only counts as not IP, so they need not pass).
///
/// libpcap's `vlan` moves the offsets of everything after it, so each level's tests come after
/// its `vlan` and the untagged ones first.
pub const DEFAULT_FILTER: &str = "udp dst port 4791 or ip proto 47 or ip6 proto 47 \
     or ether proto 0x8808 \
     or (vlan and (udp dst port 4791 or ip proto 47 or ip6 proto 47 \
     or (vlan and (udp dst port 4791 or ip proto 47 or ip6 proto 47))))";

/// [`DEFAULT_FILTER`] where libpcap cannot filter on VLAN tags (Linux cooked captures, the `any`
/// device): VLAN-tagged frames pass whole, for the parser to sort.
pub const COOKED_FILTER: &str = "udp dst port 4791 or ip proto 47 or ip6 proto 47 \
     or ether proto 0x8808 or ether proto 0x8100 or ether proto 0x88a8";

/// [`DEFAULT_FILTER`] on raw IP link types: no link layer to filter on.
pub const IP_FILTER: &str = "udp dst port 4791 or ip proto 47 or ip6 proto 47";

/// The longest a read waits for frames: how late a window may end and a stop be noticed.
pub const WAIT: Duration = Duration::from_millis(50);

/// libpcap's buffer: at 256 bytes a frame, about 100,000 frames of slack.
const BUFFER_BYTES: i32 = 32 << 20;

/// Frames handed over per libpcap call: what one call holds the aggregate for.
const BATCH: usize = 4096;

/// How often a running capture reads libpcap's counters.
const STATS_EVERY: Duration = Duration::from_millis(100);

const CAP_NET_RAW: u32 = 13;

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("capture device '{0}' not found")]
    NotFound(String),
    #[error(
        "capturing on '{device}' needs root or CAP_NET_RAW (this process runs as uid {uid} without it)"
    )]
    NotPrivileged {
        device: String,
        uid: u32,
        #[source]
        source: pcap::Error,
    },
    #[error("cannot open capture device '{device}'")]
    Open {
        device: String,
        #[source]
        source: pcap::Error,
    },
    #[error(
        "capture device '{device}' has link type {name} ({number}), which carries no RoCEv2 frames this observer reads (Ethernet, Linux cooked SLL/SLL2, raw IP)"
    )]
    UnsupportedLinkType {
        device: String,
        name: String,
        number: i32,
    },
    #[error("capture filter '{filter}' does not compile on '{device}'")]
    Filter {
        device: String,
        filter: String,
        #[source]
        source: pcap::Error,
    },
    #[error("cannot read from capture device '{device}'")]
    Read {
        device: String,
        #[source]
        source: pcap::Error,
    },
    #[error("cannot wait for frames on capture device '{device}'")]
    Wait {
        device: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot start the capture thread")]
    Thread(#[source] io::Error),
    #[error("the capture thread of '{0}' panicked")]
    Panicked(String),
}

/// What to open and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureConfig {
    /// A network interface, or an RDMA device (`mlx5_0`, or `mlx5_0:2` for its second port) when
    /// libpcap has its rdmasniff module.
    pub device: String,
    /// Promiscuous mode (default on: a mirror port receives copies for other MAC addresses).
    pub promiscuous: bool,
    /// The capture filter, a libpcap expression; none: every frame.
    pub filter: Option<String>,
}

impl CaptureConfig {
    /// `device` with the defaults: promiscuous, [`DEFAULT_FILTER`].
    pub fn new(device: impl Into<String>) -> Self {
        Self {
            device: device.into(),
            promiscuous: true,
            filter: Some(DEFAULT_FILTER.to_string()),
        }
    }
}

/// How a capture was opened, as the report's `source.capture` tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureInfo {
    pub device: String,
    /// libpcap's name of the link type (`EN10MB`, `LINUX_SLL`).
    pub link_type: String,
    pub promiscuous: bool,
    pub filter: Option<String>,
    pub snaplen: u32,
    /// Timestamps in nanoseconds (else microseconds).
    pub nanoseconds: bool,
}

/// libpcap's counters (`pcap_stats`), summed over every time the device was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Frames that passed the filter (on Linux including those dropped).
    pub received: u64,
    /// Frames that passed the filter but found no room in libpcap's buffer: dropped.
    pub dropped: u64,
    /// Frames the interface (its driver) dropped on receive while the capture ran.
    pub if_dropped: u64,
}

impl CaptureStats {
    /// These counters plus what libpcap's grew by from `prev` to `now`: libpcap's are 32-bit
    /// (`u_int`) and wrap within minutes at a mirror port's rate, so each step is taken modulo
    /// 2^32.
    fn advance(&self, prev: &pcap::Stat, now: &pcap::Stat) -> Self {
        let step = |a: u32, b: u32| u64::from(b.wrapping_sub(a));
        Self {
            received: self
                .received
                .saturating_add(step(prev.received, now.received)),
            dropped: self.dropped.saturating_add(step(prev.dropped, now.dropped)),
            if_dropped: self
                .if_dropped
                .saturating_add(step(prev.if_dropped, now.if_dropped)),
        }
    }
}

/// What a capture has counted: the aggregate, the device's frames as the kernel counts an
/// interface's, the capture time spanned and libpcap's counters; and the observer of its frames.
#[derive(Debug, Default)]
pub struct Captured<O = ()> {
    pub agg: Aggregate,
    /// Every frame captured (both directions of a host interface) as ingress.
    pub counters: IfaceCounters,
    /// Earliest and latest capture timestamps (Unix-epoch ns).
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: Option<u64>,
    pub stats: CaptureStats,
    /// Told of every frame before it is accounted (source 0: the capture device).
    pub observer: O,
}

impl<O: FrameObserver> Captured<O> {
    /// Counts of the capture of `device`, whose frames `observer` also sees.
    pub fn observed(device: &str, mut observer: O) -> Self {
        observer.begin_source(device);
        Self {
            agg: Aggregate::default(),
            counters: IfaceCounters::default(),
            first_ts_ns: None,
            last_ts_ns: None,
            stats: CaptureStats::default(),
            observer,
        }
    }

    /// One frame of `len` bytes on the wire at `ts_ns`, `data` as captured.
    #[inline]
    pub(crate) fn frame(&mut self, link: Link, ts_ns: u64, len: u32, data: &[u8]) {
        self.first_ts_ns = Some(self.first_ts_ns.map_or(ts_ns, |t| t.min(ts_ns)));
        self.last_ts_ns = Some(self.last_ts_ns.map_or(ts_ns, |t| t.max(ts_ns)));
        // On the wire before the snaplen.
        let len = len.max(data.len() as u32);
        self.observer.frame(0, ts_ns, u64::from(len), &self.agg);
        self.counters.frame(len);
        if let Ok(p) = self.agg.push_parsed(link.parse(data), data, ts_ns) {
            self.counters.roce(&p);
        }
    }
}

/// An open capture device.
pub struct Capture {
    cap: pcap::Capture<Active>,
    /// The descriptor polled before reading (the rdmasniff module's read ignores libpcap's
    /// timeout).
    fd: RawFd,
    link: Link,
    /// The last read stopped at [`BATCH`] frames: more are waiting.
    pending: bool,
    info: CaptureInfo,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("info", &self.info).finish()
    }
}

// libpcap itself (linked by the `pcap` crate), for what the crate does not expose.
unsafe extern "C" {
    /// The precision of the timestamps a handle delivers (0 microseconds, 1 nanoseconds);
    /// libpcap 1.5 and later.
    fn pcap_get_tstamp_precision(p: *mut std::ffi::c_void) -> std::ffi::c_int;
    /// The descriptor to wait on for frames: the packet socket of a network interface, the
    /// completion channel of the RDMA sniffer (which has no `pcap_fileno`).
    fn pcap_get_selectable_fd(p: *mut std::ffi::c_void) -> std::ffi::c_int;
}

impl Capture {
    /// Opens `config.device` and sets its filter. A name that is neither a network interface
    /// nor a device libpcap lists is [`CaptureError::NotFound`].
    pub fn open(config: &CaptureConfig) -> Result<Self, CaptureError> {
        let device = config.device.clone();
        if !exists(&device) {
            return Err(CaptureError::NotFound(device));
        }
        let open_error = |source: pcap::Error| {
            if !has_net_raw() || is_permission(&source) {
                CaptureError::NotPrivileged {
                    device: device.clone(),
                    // SAFETY: getuid cannot fail.
                    uid: unsafe { libc::getuid() },
                    source,
                }
            } else {
                CaptureError::Open {
                    device: device.clone(),
                    source,
                }
            }
        };
        let mut cap = pcap::Capture::from_device(device.as_str())
            .map_err(open_error)?
            .promisc(config.promiscuous)
            .snaplen(SNAPLEN as i32)
            .immediate_mode(true)
            .timeout(WAIT.as_millis() as i32)
            .buffer_size(BUFFER_BYTES)
            // Devices without nanosecond timestamps (the RDMA sniffer) keep microseconds.
            .precision(Precision::Nano)
            .open()
            .map_err(open_error)?;
        let linktype = cap.get_datalink();
        let link_type = linktype
            .get_name()
            .unwrap_or_else(|_| linktype.0.to_string());
        let link = Link::of(DataLink::from(linktype.0 as u32)).map_err(|_| {
            CaptureError::UnsupportedLinkType {
                device: device.clone(),
                name: link_type.clone(),
                number: linktype.0,
            }
        })?;
        // The default: the first of its forms this link type compiles.
        let filter = match config.filter.as_deref() {
            Some(DEFAULT_FILTER) => [DEFAULT_FILTER, COOKED_FILTER, IP_FILTER]
                .into_iter()
                .find(|f| cap.compile(f, true).is_ok())
                .map(str::to_string)
                .or(config.filter.clone()),
            _ => config.filter.clone(),
        };
        if let Some(filter) = &filter {
            cap.filter(filter, true)
                .map_err(|source| CaptureError::Filter {
                    device: device.clone(),
                    filter: filter.clone(),
                    source,
                })?;
        }
        // SAFETY: a live handle of the crate's; the call only reads it.
        let nanoseconds = unsafe { pcap_get_tstamp_precision(cap.as_ptr().cast()) } == 1;
        // SAFETY: as above. -1: none (not on Linux, whose every device has one).
        let fd = unsafe { pcap_get_selectable_fd(cap.as_ptr().cast()) };
        if fd < 0 {
            return Err(CaptureError::Open {
                device,
                source: pcap::Error::InvalidRawFd,
            });
        }
        Ok(Self {
            cap,
            fd,
            link,
            pending: false,
            info: CaptureInfo {
                device,
                link_type,
                promiscuous: config.promiscuous,
                filter,
                snaplen: SNAPLEN,
                nanoseconds,
            },
        })
    }

    pub fn info(&self) -> &CaptureInfo {
        &self.info
    }

    /// Waits up to `wait` for frames (not at all while more are known to wait), then hands
    /// those libpcap holds, up to [`BATCH`], to `captured`: how many.
    pub fn read<O: FrameObserver>(
        &mut self,
        captured: &Mutex<Captured<O>>,
        wait: Duration,
    ) -> Result<usize, CaptureError> {
        if !self.pending && !self.readable(wait)? {
            return Ok(0);
        }
        let (link, nano) = (self.link, self.info.nanoseconds);
        let mut c = captured.lock().unwrap_or_else(PoisonError::into_inner);
        let n = self
            .cap
            .dispatch(Some(BATCH), |p| {
                let ts = &p.header.ts;
                let frac = if nano { 1 } else { 1_000 };
                let ts_ns = (ts.tv_sec as u64)
                    .saturating_mul(1_000_000_000)
                    .saturating_add(ts.tv_usec as u64 * frac);
                c.frame(link, ts_ns, p.header.len, p.data);
            })
            .map_err(|source| CaptureError::Read {
                device: self.info.device.clone(),
                source,
            })?;
        self.pending = n >= BATCH;
        Ok(n)
    }

    /// Whether frames wait on the descriptor within `wait` (an error or hang-up counts: the
    /// read then says what it is).
    fn readable(&self, wait: Duration) -> Result<bool, CaptureError> {
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        match unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as libc::c_int) } {
            0 => Ok(false),
            n if n > 0 => Ok(true),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    Ok(false)
                } else {
                    Err(CaptureError::Wait {
                        device: self.info.device.clone(),
                        source: e,
                    })
                }
            }
        }
    }

    /// libpcap's counters since the device was opened.
    pub fn stats(&mut self) -> Result<pcap::Stat, CaptureError> {
        self.cap.stats().map_err(|source| CaptureError::Read {
            device: self.info.device.clone(),
            source,
        })
    }
}

/// Whether `device` is a network interface here or a device libpcap lists (RDMA devices when
/// it has rdmasniff, `any`, ...).
fn exists(device: &str) -> bool {
    if super::live::if_index(device).is_ok() {
        return true;
    }
    // A port of an RDMA device is named `mlx5_0:2`; libpcap lists the device.
    let base = device.split(':').next().unwrap_or(device);
    match pcap::Device::list() {
        Ok(list) => list.iter().any(|d| d.name == device || d.name == base),
        // Not known: let opening it say what is wrong.
        Err(_) => true,
    }
}

/// Whether the process holds CAP_NET_RAW (packet sockets, the RDMA sniffer's raw QP).
fn has_net_raw() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|eff| eff & (1 << CAP_NET_RAW) != 0)
}

/// libpcap's messages for a refused socket or device.
fn is_permission(e: &pcap::Error) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    ["permission", "not permitted", "cap_net_raw"]
        .iter()
        .any(|w| text.contains(w))
}

/// A capture read on a thread of its own into counts others read while it runs. Dropping it
/// stops the thread.
pub struct Running<O: FrameObserver + Send + 'static = ()> {
    shared: Arc<Mutex<Captured<O>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), CaptureError>>>,
    info: CaptureInfo,
}

impl<O: FrameObserver + Send + 'static> Running<O> {
    /// Reads `capture` into `shared` until stopped (or a read fails: the device went away).
    /// libpcap's counters go on from those `shared` holds (a device opened again).
    pub fn start(
        mut capture: Capture,
        shared: Arc<Mutex<Captured<O>>>,
    ) -> Result<Self, CaptureError> {
        let stop = Arc::new(AtomicBool::new(false));
        let info = capture.info.clone();
        let (flag, counts) = (stop.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || pump(&mut capture, &counts, &flag))
            .map_err(CaptureError::Thread)?;
        Ok(Self {
            shared,
            stop,
            thread: Some(thread),
            info,
        })
    }

    pub fn info(&self) -> &CaptureInfo {
        &self.info
    }

    /// The counts the thread adds to.
    pub fn shared(&self) -> &Arc<Mutex<Captured<O>>> {
        &self.shared
    }

    /// Whether the thread has ended (stopped, or a read failed).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops the thread after it has read what libpcap holds (within [`WAIT`]); how it ended.
    /// Once stopped, the counts are final.
    pub fn stop(&mut self) -> Result<(), CaptureError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(CaptureError::Panicked(self.info.device.clone()))),
            None => Ok(()),
        }
    }
}

impl<O: FrameObserver + Send + 'static> Drop for Running<O> {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Reads `capture` into `counts` until `stop` is set and what libpcap holds is read, or a read
/// fails; libpcap's counters go on from those `counts` held at the start.
fn pump<O: FrameObserver>(
    capture: &mut Capture,
    counts: &Mutex<Captured<O>>,
    stop: &AtomicBool,
) -> Result<(), CaptureError> {
    // libpcap's counters start at 0 with each opening.
    let mut prev = pcap::Stat {
        received: 0,
        dropped: 0,
        if_dropped: 0,
    };
    let mut publish = |capture: &mut Capture| -> Result<(), CaptureError> {
        let s = capture.stats()?;
        let mut c = counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.stats = c.stats.advance(&prev, &s);
        prev = s;
        Ok(())
    };
    let mut last_stats = Instant::now();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        // Stopping: what libpcap holds already, without waiting for more.
        let wait = if stopping { Duration::ZERO } else { WAIT };
        let n = match capture.read(counts, wait) {
            Ok(n) => n,
            Err(e) => {
                // The counters up to the failure, when libpcap still has them.
                let _ = publish(capture);
                return Err(e);
            }
        };
        if stopping && n == 0 || last_stats.elapsed() >= STATS_EVERY {
            last_stats = Instant::now();
            publish(capture)?;
        }
        if stopping && n == 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use observer_common::parse_frame;
    use pcap::Linktype;

    use super::*;
    use crate::source::synth;

    #[test]
    fn libpcaps_32_bit_counters_are_summed_across_their_wrap() {
        let stat = |received, dropped| pcap::Stat {
            received,
            dropped,
            if_dropped: 0,
        };
        let s = CaptureStats {
            received: 10,
            dropped: 1,
            if_dropped: 0,
        };
        let s = s.advance(&stat(0, 0), &stat(u32::MAX - 5, 2));
        assert_eq!((s.received, s.dropped), (10 + u64::from(u32::MAX) - 5, 3));
        // Wrapped: 5 before the top and 10 after it.
        let s = s.advance(&stat(u32::MAX - 5, 2), &stat(10, 2));
        assert_eq!(s.received, 10 + u64::from(u32::MAX) - 5 + 16);
    }

    /// Every frame of every scenario (the corpus holds every encapsulation, skip reason and
    /// deliberately broken frame).
    fn all_frames() -> Vec<synth::Frame> {
        let mut frames = Vec::new();
        let mut built = 0;
        // (That every listed scenario builds is another test's.)
        for w in synth::SCENARIOS
            .iter()
            .filter_map(|(name, _)| synth::scenario(name))
        {
            frames.extend(w.frames);
            built += 1;
        }
        assert!(built > 10 && frames.len() > 10_000, "{built} scenarios");
        frames
    }

    #[test]
    fn the_snaplen_keeps_every_byte_the_parser_reads() {
        let frames = all_frames();
        assert!(frames.iter().any(|f| f.bytes.len() > SNAPLEN as usize));
        for f in &frames {
            let cut = &f.bytes[..f.bytes.len().min(SNAPLEN as usize)];
            let (whole, snapped) = (parse_frame(&f.bytes[..]), parse_frame(cut));
            assert_eq!(whole.result, snapped.result, "{:02x?}", &f.bytes[..64]);
            assert_eq!(whole.mirror, snapped.mirror);
            assert_eq!(whole.pause(&f.bytes[..]), snapped.pause(cut));
        }
        // The longest headers the parser reads, built here: they end at byte 248.
        let f = longest_headers();
        let whole = parse_frame(&f[..]);
        let p = whole.result.expect("the longest headers parse as RoCE");
        assert!(p.has_reth && whole.mirror.is_some(), "{p:?}");
        assert_eq!(parse_frame(&f[..LONGEST_HEADERS]).result, Ok(p));
        let short = parse_frame(&f[..LONGEST_HEADERS - 1]).result;
        assert!(short.is_ok_and(|q| !q.has_reth), "{short:?}");
        // The replayed aggregate of snapped frames is the whole frames'.
        let mut whole = Aggregate::new();
        let mut snapped = Aggregate::new();
        for f in &frames {
            let _ = whole.push(&f.bytes, f.ts_ns);
            let cut = &f.bytes[..f.bytes.len().min(SNAPLEN as usize)];
            let _ = snapped.push(cut, f.ts_ns);
        }
        assert_eq!(whole, snapped);
    }

    /// Where the longest headers the parser reads end.
    const LONGEST_HEADERS: usize = 248;

    /// A frame with the longest headers the parser reads: QinQ, IPv4 with 40 bytes of options,
    /// GRE with checksum, key and sequence number, ERSPAN III with its platform subheader, and
    /// inside QinQ, IPv4 with options again, UDP, and an RD WRITE FIRST's BTH, RDETH, DETH
    /// and RETH (its DMA length is the last field read).
    fn longest_headers() -> Vec<u8> {
        let macs = [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        let qinq = [0x88, 0xA8, 0, 7, 0x81, 0x00, 0, 8];
        let ipv4 = |proto: u8, total: u16| {
            let mut ip = vec![0x4F, 0];
            ip.extend_from_slice(&total.to_be_bytes());
            ip.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2]);
            ip.extend_from_slice(&[1; 40]);
            ip
        };
        let mut f = macs.to_vec();
        f.extend_from_slice(&qinq);
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&ipv4(47, 400));
        // GRE: C, K and S bits, protocol ERSPAN III; checksum, key, sequence number.
        f.extend_from_slice(&[0xB0, 0x00, 0x22, 0xEB]);
        f.extend_from_slice(&[0; 12]);
        // ERSPAN III: version 2, session 101, timestamp, frame type 0 with the O bit.
        f.extend_from_slice(&[0x20, 0x00, 0x00, 101, 0, 0, 0, 0, 0, 0, 0x00, 0x01]);
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&macs);
        f.extend_from_slice(&qinq);
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&ipv4(17, 300));
        f.extend_from_slice(&[0xC0, 0x00, 0x12, 0xB7, 0x00, 0xE8, 0, 0]);
        // BTH: RD RDMA WRITE FIRST (0x46), destination QP 0x12, PSN 1.
        f.extend_from_slice(&[0x46, 0, 0xFF, 0xFF, 0, 0, 0, 0x12, 0, 0, 0, 1]);
        f.extend_from_slice(&[0; 4 + 8]);
        f.extend_from_slice(&[0; 12]);
        f.extend_from_slice(&4096u32.to_be_bytes());
        assert_eq!(f.len(), LONGEST_HEADERS);
        f.resize(400, 0xAB);
        f
    }

    /// `f` under one more VLAN tag.
    fn tagged(f: &[u8], tpid: u16) -> Vec<u8> {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&tpid.to_be_bytes());
        t.extend_from_slice(&[0x60, 0x05]);
        t.extend_from_slice(&f[12..]);
        t
    }

    /// libpcap's own compiler and interpreter (`pcap_offline_filter`) decide what passes: every
    /// frame the parser accounts for in any way but a skip (RoCE, a mirror copy, PAUSE / PFC)
    /// must, and ordinary traffic must not.
    #[test]
    fn the_default_filter_passes_everything_the_parser_accounts_for() {
        let dead = pcap::Capture::dead(Linktype::ETHERNET).unwrap();
        let program = dead.compile(DEFAULT_FILTER, true).unwrap();
        let frames = all_frames();
        let (mut passed, mut kept) = (0, 0);
        let mut all = Aggregate::new();
        let mut filtered = Aggregate::new();
        for f in &frames {
            let parsed = parse_frame(&f.bytes[..]);
            let wanted = parsed.result.is_ok()
                || parsed.mirror.is_some()
                || parsed.pause(&f.bytes[..]).is_some();
            let pass = program.filter(&f.bytes);
            assert!(
                pass || !wanted,
                "the filter drops a frame the parser accounts for: {:?} {:02x?}",
                parsed.result,
                &f.bytes[..f.bytes.len().min(80)]
            );
            kept += usize::from(wanted);
            passed += usize::from(pass);
            let _ = all.push(&f.bytes, f.ts_ns);
            if pass {
                let _ = filtered.push(&f.bytes, f.ts_ns);
            }
        }
        assert!(kept > 1000, "{kept}");
        // Every untagged frame it wants, under one tag and under two (QinQ): the parser still
        // wants it, and the filter passes it.
        let mut tags = 0;
        let untagged = |f: &&synth::Frame| {
            f.bytes.len() >= 14 && !matches!(f.bytes[12..14], [0x81, 0] | [0x88, 0xA8])
        };
        for f in frames.iter().filter(untagged) {
            for t in [
                tagged(&f.bytes, 0x8100),
                tagged(&tagged(&f.bytes, 0x8100), 0x88A8),
            ] {
                let parsed = parse_frame(&t[..]);
                if parsed.result.is_ok() || parsed.mirror.is_some() {
                    tags += 1;
                    assert!(program.filter(&t), "tagged {:02x?}", &t[..t.len().min(80)]);
                }
            }
        }
        assert!(tags > 1000, "{tags}");
        let longest = longest_headers();
        assert!(program.filter(&longest));
        assert!(program.filter(&longest[..LONGEST_HEADERS]));
        // The flows, pauses and RoCE counts are the unfiltered ones.
        assert_eq!(all.flows, filtered.flows);
        assert_eq!(all.unions, filtered.unions);
        assert_eq!(all.pauses, filtered.pauses);
        assert_eq!(all.counters.roce_packets, filtered.counters.roce_packets);
        assert!(
            passed < frames.len(),
            "the corpus's other traffic is filtered"
        );
        // Ordinary traffic does not pass: ARP, TCP, UDP to another port, tagged or not.
        let eth = |ethertype: [u8; 2], payload: &[u8]| {
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
            f.extend_from_slice(&ethertype);
            f.extend_from_slice(payload);
            f.resize(f.len().max(60), 0);
            f
        };
        let ipv4 = |proto: u8, dport: u16| {
            let mut ip = vec![0x45, 0, 0, 48, 0, 0, 0x40, 0, 64, proto, 0, 0];
            ip.extend_from_slice(&[198, 18, 0, 1, 198, 18, 0, 2]);
            ip.extend_from_slice(&[0xc0, 0x00]);
            ip.extend_from_slice(&dport.to_be_bytes());
            ip.extend_from_slice(&[0; 24]);
            ip
        };
        let tagged = |inner: Vec<u8>| {
            let mut t = vec![0, 5];
            t.extend_from_slice(&inner[12..]);
            eth([0x81, 0x00], &t)
        };
        let arp = eth([0x08, 0x06], &[0; 28]);
        let tcp = eth([0x08, 0x00], &ipv4(6, 4791));
        let udp = eth([0x08, 0x00], &ipv4(17, 53));
        let roce = eth([0x08, 0x00], &ipv4(17, 4791));
        for (name, frame, want) in [
            ("ARP", &arp, false),
            ("TCP to 4791", &tcp, false),
            ("UDP to 53", &udp, false),
            ("tagged UDP to 53", &tagged(udp.clone()), false),
            ("tagged TCP", &tagged(tcp.clone()), false),
            ("UDP to 4791", &roce, true),
            ("tagged UDP to 4791", &tagged(roce.clone()), true),
            ("QinQ UDP to 4791", &tagged(tagged(roce.clone())), true),
        ] {
            assert_eq!(program.filter(frame), want, "{name}");
        }
    }

    /// Linux cooked v1 (the `any` device), as replay's SLL reader takes it.
    fn sll(f: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 1, 0, 6];
        v.extend_from_slice(&f[6..12]);
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&f[12..]);
        v
    }

    /// Linux cooked v2: protocol, reserved, ifindex, ARPHRD, packet type, address length,
    /// address.
    fn sll2(f: &[u8]) -> Vec<u8> {
        let mut v = f[12..14].to_vec();
        v.extend_from_slice(&[0, 0, 0, 0, 0, 3, 0, 1, 0, 6]);
        v.extend_from_slice(&f[6..12]);
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&f[14..]);
        v
    }

    /// Raw IP: what follows an untagged IPv4 or IPv6 Ethernet header (others: nothing).
    fn raw(f: &[u8]) -> Vec<u8> {
        match f[12..14] {
            [0x08, 0x00] | [0x86, 0xDD] => f[14..].to_vec(),
            _ => Vec::new(),
        }
    }

    /// Where libpcap cannot filter on VLAN tags (Linux cooked captures, raw IP), a form of the
    /// default compiles, and it passes what the parser accounts for there.
    #[test]
    fn other_link_types_get_a_form_of_the_default_that_compiles() {
        let dead = |link: i32| pcap::Capture::dead(Linktype(link)).unwrap();
        let first = |link: i32| {
            [DEFAULT_FILTER, COOKED_FILTER, IP_FILTER]
                .into_iter()
                .find(|f| dead(link).compile(f, true).is_ok())
        };
        assert_eq!(first(1), Some(DEFAULT_FILTER));
        assert_eq!(first(113), Some(COOKED_FILTER));
        let frames = all_frames();
        type Map = fn(&[u8]) -> Vec<u8>;
        // Linux cooked v1 and v2, DLT_RAW.
        for (link, map, as_link) in [
            (113, sll as Map, Link::Sll),
            (276, sll2 as Map, Link::Sll2),
            (12, raw as Map, Link::RawIp),
        ] {
            let filter = first(link).unwrap_or_else(|| panic!("no form compiles for {link}"));
            let program = dead(link).compile(filter, true).unwrap();
            let mut kept = 0;
            for f in frames.iter().filter(|f| f.bytes.len() >= 14) {
                let mapped = map(&f.bytes);
                if mapped.is_empty() {
                    continue;
                }
                let parsed = as_link.parse(&mapped);
                if parsed.result.is_ok() || parsed.mirror.is_some() {
                    kept += 1;
                    assert!(
                        program.filter(&mapped),
                        "{link}: {:02x?}",
                        &mapped[..mapped.len().min(80)]
                    );
                }
            }
            assert!(kept > 1000, "{link}: {kept}");
        }
    }

    #[test]
    fn unknown_devices_are_named_alone() {
        let e = Capture::open(&CaptureConfig::new("nosuchdev0")).unwrap_err();
        assert_eq!(e.to_string(), "capture device 'nosuchdev0' not found");
        assert!(std::error::Error::source(&e).is_none());
    }
}
