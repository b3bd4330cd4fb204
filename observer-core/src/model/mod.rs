//! The `roce-observer/report/v1` JSON report: every section's type. Later versions add fields,
//! never rename these. Built by `aggregate` and `pipeline`, drawn by `render`.

use std::{
    collections::BTreeMap,
    net::{IpAddr, Ipv6Addr},
};

use observer_common::{
    FlowKey, FlowStats, LINK_PAUSE, MirrorOf, OpClass, PauseKey, PauseStats,
    wire::{PAUSE_QUANTUM_BITS, PFC_PRIORITIES},
};
use serde::{Deserialize, Serialize};

pub mod connections;
pub mod ecmp;
pub mod findings;
pub mod nic;
pub mod points;
pub mod series;

pub use series::FlowRef;

pub const SCHEMA: &str = "roce-observer/report/v1";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    /// One line said before anything else, when the source holds no RoCEv2 packet at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    pub source: Source,
    pub window: Window,
    pub totals: Totals,
    /// Every flow, largest byte count first.
    pub flows: Vec<Flow>,
    /// RC, UC and XRC connections: both directions of each joined, most bytes first.
    #[serde(default)]
    pub connections: Vec<connections::Connection>,
    /// UD datagrams and connection management (MADs to QP 1): no connection.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_traffic: Vec<connections::OtherTraffic>,
    /// Passive latency (answers to requests, timed on the wire) per interface, side and kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency: Vec<connections::LatencyScope>,
    /// PAUSE / PFC frames per sender and priority; absent when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pfc: Option<PfcReport>,
    /// `roce-observer ecmp` only: the flows run through a switch hash model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecmp: Option<ecmp::EcmpReport>,
    /// Per-interval time series (diagnose, replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<series::Series>,
    /// Per-interface microburst slots (diagnose, replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub microbursts: Option<series::Microbursts>,
    /// What the rules found, most severe first (diagnose, replay).
    #[serde(default)]
    pub findings: Vec<findings::Finding>,
    /// Every rule: fired, passed, or skipped and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<findings::Check>,
    /// The host's NIC side over the window (diagnose with an RDMA device, or one behind an
    /// interface).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<nic::Nic>,
    /// Replay of captures taken at several observation points of the same traffic: what each
    /// saw of the others' packets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<points::Points>,
}

/// The `pfc` section: who asked whom to pause, on which priority, for how long.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PfcReport {
    /// The link speed pause times are computed for (bits/s): `--link-speed`, or the observed
    /// interfaces' speed in host mode. Absent when unknown: `pause_ns` are then absent too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_speed_bps: Option<u64>,
    /// Senders, most paused first.
    pub sources: Vec<PauseSource>,
}

/// The PAUSE / PFC frames of one sender (a switch port or a NIC).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PauseSource {
    pub src_mac: String,
    /// Set when the frames were seen inside mirror copies; part of the sender's identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<FlowMirror>,
    /// "egress" for frames the observed host sent (TC egress, host mode); part of the identity.
    #[serde(default)]
    pub direction: Direction,
    /// PFC frames (one frame may name several priorities, or none).
    pub pfc_frames: u64,
    /// Per PFC priority named at least once, ascending.
    pub priorities: Vec<PausePriority>,
    /// 802.3x PAUSE frames (the whole link); absent when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_pause: Option<PauseCounts>,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PausePriority {
    pub priority: u8,
    #[serde(flatten)]
    pub counts: PauseCounts,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PauseCounts {
    /// Frames naming this class, XON frames included.
    pub frames: u64,
    /// Frames with time 0 (resume).
    pub xon: u64,
    /// Pause times asked for, summed, in quanta of 512 bit times.
    pub quanta: u64,
    /// `quanta` as time at the link speed: the pause asked for. A refresh before the previous
    /// pause ran out overlaps it, so this bounds the time actually paused from above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_ns: Option<u64>,
}

impl PauseCounts {
    fn of(s: &PauseStats, class: usize) -> Self {
        Self {
            frames: s.frames[class],
            xon: s.xon[class],
            quanta: s.quanta[class],
            pause_ns: None,
        }
    }

    fn set_speed(&mut self, bps: Option<u64>) {
        self.pause_ns = bps.filter(|b| *b > 0).map(|bps| {
            let ns = self.quanta as u128 * PAUSE_QUANTUM_BITS as u128 * 1_000_000_000 / bps as u128;
            ns.min(u64::MAX as u128) as u64
        });
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_string(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// The mirror a key's `mirror` field names (a flow's or a pause sender's).
fn flow_mirror(mirror: u16, truncated: u64) -> Option<FlowMirror> {
    match MirrorOf::of(mirror) {
        MirrorOf::Direct => None,
        MirrorOf::Session(id) => Some(FlowMirror {
            session: Some(id),
            kind: None,
            truncated,
        }),
        MirrorOf::Kind(k) => Some(FlowMirror {
            session: None,
            kind: Some(k.name().to_string()),
            truncated,
        }),
        MirrorOf::Union => Some(FlowMirror {
            session: None,
            kind: Some("all-sessions".to_string()),
            truncated,
        }),
    }
}

impl PauseSource {
    pub fn new(key: &PauseKey, s: &PauseStats) -> Self {
        Self {
            src_mac: mac_string(key.src_mac),
            mirror: flow_mirror(key.mirror, 0),
            direction: Direction::of(key.mirror),
            pfc_frames: s.pfc_frames,
            priorities: (0..PFC_PRIORITIES)
                .filter(|p| s.frames[*p] > 0)
                .map(|p| PausePriority {
                    priority: p as u8,
                    counts: PauseCounts::of(s, p),
                })
                .collect(),
            link_pause: (s.frames[LINK_PAUSE] > 0).then(|| PauseCounts::of(s, LINK_PAUSE)),
            first_seen_ns: s.first_seen_ns,
            last_seen_ns: s.last_seen_ns,
        }
    }

    /// Quanta asked for on every class.
    pub fn total_quanta(&self) -> u64 {
        self.priorities.iter().map(|p| p.counts.quanta).sum::<u64>()
            + self.link_pause.as_ref().map_or(0, |l| l.quanta)
    }
}

impl PfcReport {
    /// The section for an aggregate's pause table, or none when it is empty.
    pub fn new(pauses: &BTreeMap<PauseKey, PauseStats>) -> Option<Self> {
        let mut sources: Vec<PauseSource> = pauses
            .iter()
            .filter(|(_, s)| s.frames_total() > 0)
            .map(|(k, s)| PauseSource::new(k, s))
            .collect();
        sources.sort_by(|a, b| {
            b.total_quanta()
                .cmp(&a.total_quanta())
                .then(a.src_mac.cmp(&b.src_mac))
                .then(a.direction.cmp(&b.direction))
        });
        (!sources.is_empty()).then_some(Self {
            link_speed_bps: None,
            sources,
        })
    }

    /// Sets the link speed and the pause times that follow from it (none clears them).
    pub fn set_link_speed(&mut self, bps: Option<u64>) {
        self.link_speed_bps = bps.filter(|b| *b > 0);
        for src in &mut self.sources {
            for p in &mut src.priorities {
                p.counts.set_speed(self.link_speed_bps);
            }
            if let Some(l) = &mut src.link_pause {
                l.set_speed(self.link_speed_bps);
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// "live", "capture", "pcap", or "nic" (the NIC side alone).
    pub kind: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
    /// Live only: the XDP attach mode asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_mode: Option<String>,
    /// Live only: "host", "mirror" or "mirror+consume".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Replay only: the capture files, in the order read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// Capture only (`--capture`): how libpcap captured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureSource>,
    /// Problems that did not stop the run (a capture cut short, an unsupported interface).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Source {
    pub fn live(interfaces: Vec<String>, xdp_mode: &str) -> Self {
        Self {
            kind: "live".into(),
            interfaces,
            xdp_mode: Some(xdp_mode.into()),
            mode: None,
            files: Vec::new(),
            capture: None,
            warnings: Vec::new(),
        }
    }

    /// A libpcap capture of `device` (`kind` "capture").
    pub fn capture(device: String, capture: CaptureSource) -> Self {
        Self {
            kind: "capture".into(),
            interfaces: vec![device],
            xdp_mode: None,
            mode: None,
            files: Vec::new(),
            capture: Some(capture),
            warnings: Vec::new(),
        }
    }

    /// The NIC side alone (`kind` "nic"): nothing attached, no wire seen; `subjects` are the
    /// RDMA devices and netdevs read.
    pub fn nic(subjects: Vec<String>) -> Self {
        Self {
            kind: "nic".into(),
            interfaces: subjects,
            xdp_mode: None,
            mode: None,
            files: Vec::new(),
            capture: None,
            warnings: Vec::new(),
        }
    }

    pub fn pcap(files: Vec<String>, warnings: Vec<String>) -> Self {
        Self {
            kind: "pcap".into(),
            interfaces: Vec::new(),
            xdp_mode: None,
            mode: None,
            files,
            capture: None,
            warnings,
        }
    }
}

/// How a live capture through libpcap (`--capture`) was taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureSource {
    /// libpcap's name of the device's link type (`EN10MB`, `LINUX_SLL`).
    pub link_type: String,
    pub promiscuous: bool,
    /// The capture filter; absent: every frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Bytes kept of each frame.
    pub snaplen: u32,
    /// `ns` or `us`: the resolution of the timestamps.
    pub timestamps: String,
}

/// libpcap's own counters of a live capture (`pcap_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureCounts {
    /// Frames that passed the capture filter (on Linux including those dropped).
    pub received: u64,
    /// Frames that passed the filter but found no room in libpcap's buffer: never seen.
    pub dropped: u64,
    /// Frames the interface dropped on receive while the capture ran.
    pub interface_dropped: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub seconds: f64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub frames: u64,
    pub roce_packets: u64,
    pub roce_bytes: u64,
    pub ce_packets: u64,
    pub cnp_packets: u64,
    /// RoCE packets the flow table could not take (counted in the totals, in no flow).
    pub flow_insert_failures: u64,
    /// RoCE packets of flows the full flow table evicted (LRU): in the totals, in no flow.
    #[serde(default)]
    pub evicted_packets: u64,
    /// Frames seen leaving the host (TC egress, host mode), included in `frames`.
    #[serde(default)]
    pub egress_frames: u64,
    /// PAUSE / PFC frames the pause table could not take (in `skipped.mac_control` only).
    #[serde(default)]
    pub pause_insert_failures: u64,
    /// Every skip reason, zero or not.
    pub skipped: BTreeMap<String, u64>,
    /// Mirror copies (GRE / ERSPAN), RoCE or not; absent when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<MirrorTotals>,
    /// The PSN analysis summed over the flows (`pmtu` is absent here).
    #[serde(default)]
    pub psn: Psn,
    /// A live capture through libpcap (`--capture`): its own counters, drops included (XDP
    /// has none to report: it sees each frame as it is received).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureCounts>,
    /// Frames dropped before they were accounted: mirror mode spread over CPUs (`--cpus`),
    /// the queue of the CPU a frame was sent to was full.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub spread_dropped: u64,
    /// XDP live: frames the observed interfaces' devices dropped while observed for lack of
    /// buffer space (`rx_missed_errors`, what each driver counts there), RoCE or not, before
    /// the observer. On a mirror port they are copies it never saw.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub interface_missed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Totals {
    /// Frames the observer itself dropped in any mode: its CPU queues' drops, a capture's
    /// buffer drops. Their PSNs look lost on the wire. (A capture's interface drops are not in
    /// it: on Linux they count every frame the stack dropped, most of them not RoCE.) The rules
    /// use [`Report::observer_dropped`], which adds a mirror port's own.
    pub fn observer_dropped(&self) -> u64 {
        self.spread_dropped
            .saturating_add(self.capture.map_or(0, |c| c.dropped))
    }
}

impl Report {
    /// Frames dropped before the observer accounted them: [`Totals::observer_dropped`], and in
    /// mirror mode [`Report::port_dropped`], copies it never saw. In host mode an interface's
    /// are the host's own packets lost, not the observer's.
    pub fn observer_dropped(&self) -> u64 {
        self.totals
            .observer_dropped()
            .saturating_add(self.port_dropped())
    }

    /// In mirror mode, the frames the mirror port's device dropped before the observer
    /// (`totals.interface_missed`); 0 in any other mode.
    pub fn port_dropped(&self) -> u64 {
        match self.source.mode.as_deref() {
            Some("mirror" | "mirror+consume") => self.totals.interface_missed,
            _ => 0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MirrorTotals {
    /// Copies per ERSPAN session ID (II, III), those seen.
    pub sessions: BTreeMap<u16, u64>,
    /// Copies without a session ID (ERSPAN I, GRE transparent Ethernet bridging).
    pub sessionless: u64,
    /// Copies with the ERSPAN truncated bit set.
    pub truncated: u64,
}

/// Which mirror a flow was seen through.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowMirror {
    /// "erspan2" / "erspan3" with a session; "erspan1" / "gre_teb" without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Copies of this flow with the ERSPAN truncated bit set.
    pub truncated: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Flow {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub udp_src_port: u16,
    pub dest_qp: u32,
    /// Set for flows seen inside mirror copies; part of the flow's identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<FlowMirror>,
    /// "ingress" (received, or a mirror copy) or "egress" (transmitted by the observed host,
    /// seen by the TC egress program in host mode); part of the flow's identity.
    #[serde(default)]
    pub direction: Direction,
    pub packets: u64,
    pub bytes: u64,
    pub ecn: Ecn,
    pub ops: Ops,
    /// The transports of the opcodes seen (`RC`, `UC`, `RD`, `UD`, `XRC`, `CNP` for the
    /// congestion notifications, `vendor` for manufacturer-specific opcodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transports: Vec<String>,
    pub psn: Psn,
    /// Set on each row of a flow seen in several mirror sessions (a QP sprayed over mirrored
    /// links, or two taps on one path): its PSNs are analysed all sessions together, and that
    /// analysis is the `psn` of the first of its rows (the others' is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psn_scope: Option<PsnScope>,
    /// DSCP values seen, ascending.
    pub dscp: Vec<u8>,
    /// DSCP values CNPs of this flow were sent with, ascending (absent without CNPs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cnp_dscp: Vec<u8>,
    /// VLAN priorities (PCP of the outer tag) seen, ascending; absent when never tagged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcp: Vec<u8>,
    /// VLAN IDs of the outer tag seen: the lowest and the highest (one when equal); absent
    /// when never tagged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vlans: Vec<u16>,
    /// The same for the inner tag of QinQ frames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inner_vlans: Vec<u16>,
    /// Some frames of the flow carried no VLAN tag.
    #[serde(default)]
    pub untagged: bool,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// bytes * 8 / window.seconds: the flow's share of the whole observation.
    pub rate_bps: f64,
    /// bytes * 8 / (last_seen_ns - first_seen_ns): the rate while the flow was active. Absent
    /// below 3 packets or a span of 1 us (a single packet, two packets whose gap says nothing
    /// of a rate, or a flow shorter than the clock's resolution: one kernel tick live).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_rate_bps: Option<f64>,
    /// The flow's busiest interval of the time series, bits/s (over the time that interval
    /// covers), or its `active_rate_bps` when that is higher (an interval's rate counts the
    /// time the flow was idle in it): never below it. Absent without a series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rate_bps: Option<f64>,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    #[default]
    Ingress,
    Egress,
}

impl Direction {
    /// The direction a key's `mirror` field (`FlowKey::mirror`, `PauseKey::mirror`) says.
    pub const fn of(mirror: u16) -> Self {
        if mirror & observer_common::DIRECTION_EGRESS != 0 {
            Self::Egress
        } else {
            Self::Ingress
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ecn {
    pub not_ect: u64,
    pub ect0: u64,
    pub ect1: u64,
    pub ce: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ops {
    pub send: u64,
    pub write: u64,
    pub read_request: u64,
    pub read_response: u64,
    pub ack: u64,
    pub nak: u64,
    pub rnr_nak: u64,
    pub atomic: u64,
    pub atomic_ack: u64,
    pub cnp: u64,
    pub other: u64,
}

/// The PSN analysis of a flow's requests (RC, UC, XRC): every request packet is in order,
/// ahead (opens a hole), out of order, a duplicate, a retransmission, a violation or the start
/// of a new incarnation of the QP number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Psn {
    /// Request PSNs ahead of the expected one (each opened a hole).
    pub gaps: u64,
    /// PSNs confirmed lost: their hole left the analysis window unfilled, or was still open
    /// when the flow (or an incarnation of its QP number) ended.
    pub missing: u64,
    /// Request PSNs behind the expected one (out of order, duplicates, retransmissions).
    pub regressions: u64,
    /// Late packets that filled a hole (reordering).
    #[serde(default)]
    pub out_of_order: u64,
    /// PSNs seen again outside any resend (a mirror or tap copying a packet twice).
    #[serde(default)]
    pub duplicates: u64,
    /// PSNs the sender sent again (a go-back-N run, or a resend after a timeout).
    #[serde(default)]
    pub retransmissions: u64,
    /// Resend episodes (go-back-N runs and timeout resends).
    #[serde(default)]
    pub retransmission_episodes: u64,
    /// Contiguous ranges of missing PSNs.
    #[serde(default)]
    pub lost_events: u64,
    /// New incarnations of the QP number (QP reuse: a PSN jump no sender makes).
    #[serde(default)]
    pub resets: u64,
    /// Requests inside a READ's consumed PSN range under the path MTU (while it is unknown,
    /// those inside it under every candidate path MTU).
    #[serde(default)]
    pub violations: u64,
    /// While the path MTU is unknown: the requests inside a READ's range under some candidate
    /// path MTU (the smallest gives the widest range), which only the path MTU can confirm or
    /// clear. 0 once it is known.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unverified_violations: u64,
    /// The path MTU learned from FIRST and MIDDLE payloads (of this flow or its reverse
    /// direction); null until learned.
    #[serde(default)]
    pub pmtu: Option<u32>,
    /// NAKs with the PSN sequence error code this flow carried (the responder saw a hole).
    #[serde(default)]
    pub nak_seq_errors: u64,
    /// The first violation (under the path MTU): when, the request's PSN and the READ's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_violation: Option<Violation>,
    /// Requests still unanswered when the observation ended (no ACK, NAK or response in the
    /// reverse direction covers the last one that asked for an answer): since when, for how
    /// long. Absent when answered or when the reverse direction was not seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unanswered: Option<Unanswered>,
    /// The longest wait without a request before a resend (a timeout or an RNR wait): when it
    /// began and how long it lasted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_resend_wait: Option<Wait>,
    /// The flow's direction (sender, receiver, QP) was seen on this many UDP source ports in
    /// turn (per-packet spraying, or flowlets coming back to a port): its PSNs are followed per
    /// port, so `gaps`, `missing`, `lost_events` and `out_of_order` count the other ports'
    /// packets, not loss or reordering. They stay out of the totals and are not judged. 0: not
    /// sprayed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sprayed: u64,
}

/// Where the PSN analysis of a flow seen in several mirror sessions is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PsnScope {
    /// The mirror sessions (rows) whose packets were analysed together.
    pub mirror_views: u32,
    /// This row's `psn` holds the analysis.
    pub here: bool,
}

/// A protocol violation with its place in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub at_ns: u64,
    /// What is wrong: "request_inside_read" (the request's PSN lies in the READ's range) or
    /// "response_psn_never_sent" (a response to a PSN no request used).
    pub kind: ViolationKind,
    pub psn: u32,
    /// The READ's PSN (request inside a READ's range), or the newest request PSN sent
    /// (response to a PSN never sent).
    pub other_psn: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    RequestInsideRead,
    ResponsePsnNeverSent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unanswered {
    pub since_ns: u64,
    pub for_ns: u64,
    /// The last request that asked for an answer.
    pub psn: u32,
    /// The newest response PSN seen back, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_psn: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wait {
    pub at_ns: u64,
    pub for_ns: u64,
}

impl Psn {
    /// The analysis of `s`: holes still open count as missing.
    pub fn of(s: &FlowStats) -> Self {
        let (open, open_events) = s.seq_track.open_holes();
        let c = &s.seq;
        // Counts of the kernel's views read at different moments can come out negative
        // (wrapping: a decrement in a cache slot of what the table counted): none is.
        let n = observer_common::seq::non_negative;
        let pmtu = observer_common::seq::pmtu_of(c.pmtu_mask);
        Self {
            gaps: s.psn_gaps,
            missing: n(c.lost.wrapping_add(open)),
            regressions: s.psn_regressions,
            out_of_order: n(c.out_of_order),
            duplicates: n(c.duplicates),
            retransmissions: n(c.retransmissions),
            retransmission_episodes: c.retx_episodes,
            lost_events: n(c.lost_events.wrapping_add(open_events)),
            resets: c.resets,
            violations: 0,
            unverified_violations: 0,
            pmtu: None,
            nak_seq_errors: c.nak_seq,
            first_violation: None,
            unanswered: None,
            longest_resend_wait: (c.timeout_max_ns > 0).then_some(Wait {
                at_ns: c.timeout_at_ns,
                for_ns: c.timeout_max_ns,
            }),
            sprayed: 0,
        }
        .with_pmtu(s, pmtu)
    }

    /// Sets the path MTU (learned here or from the reverse direction) and the violations under
    /// it.
    pub fn with_pmtu(mut self, s: &FlowStats, pmtu: Option<u32>) -> Self {
        let c = &s.seq;
        self.pmtu = pmtu;
        // Overlaps under every candidate are violations whatever the path MTU.
        self.violations = match pmtu {
            Some(p) => violations_under(c, p),
            None => u64::from(c.violations.iter().copied().min().unwrap_or(0)),
        };
        self.unverified_violations = match pmtu {
            Some(_) => 0,
            None => u64::from(c.violations.iter().copied().max().unwrap_or(0)) - self.violations,
        };
        let k = pmtu.map_or(observer_common::seq::PMTUS as u32 - 1, |p| {
            (p / 256).trailing_zeros()
        });
        self.first_violation = (c.violation_mask >> k & 1 != 0
            && (pmtu.is_some() || c.violation_mask == 0b1_1111))
            .then_some(Violation {
                at_ns: c.violation_ns,
                kind: ViolationKind::RequestInsideRead,
                psn: c.violation_psn,
                other_psn: c.violation_read_psn,
            });
        self
    }

    /// Adds another flow's analysis (totals); the path MTU stays if they agree.
    pub fn add(&mut self, o: &Psn) {
        // A sprayed direction's holes are its other ports' packets.
        if o.sprayed == 0 {
            self.gaps += o.gaps;
            self.missing += o.missing;
            self.out_of_order += o.out_of_order;
            self.lost_events += o.lost_events;
        }
        self.regressions += o.regressions;
        self.duplicates += o.duplicates;
        self.retransmissions += o.retransmissions;
        self.retransmission_episodes += o.retransmission_episodes;
        self.resets += o.resets;
        self.violations += o.violations;
        self.unverified_violations += o.unverified_violations;
        self.nak_seq_errors += o.nak_seq_errors;
    }
}

/// The VLAN IDs of a stored range (each VID + 1, 0 when none): the lowest and the highest.
fn vid_range(lo: u16, hi: u16) -> Vec<u16> {
    match (lo, hi) {
        (0, _) => Vec::new(),
        (lo, hi) if hi <= lo => vec![lo - 1],
        (lo, hi) => vec![lo - 1, hi - 1],
    }
}

/// The transports of `FlowStats::transport_mask`, by the opcode's top three bits.
fn transport_names(mask: u32) -> Vec<String> {
    const NAMES: [&str; 8] = ["RC", "UC", "RD", "UD", "CNP", "XRC", "vendor", "vendor"];
    let mut v: Vec<String> = Vec::new();
    for (t, name) in NAMES.iter().enumerate() {
        if mask >> t & 1 != 0 && v.last().is_none_or(|l| l != name) {
            v.push((*name).to_string());
        }
    }
    v
}

/// Requests inside a READ's range under path MTU `pmtu`.
pub fn violations_under(c: &observer_common::SeqCounts, pmtu: u32) -> u64 {
    let k = (pmtu / 256).trailing_zeros() as usize;
    c.violations.get(k).map_or(0, |v| u64::from(*v))
}

/// Everything that tells flows apart: the key as the report spells it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ReportKey {
    src_ip: IpAddr,
    dst_ip: IpAddr,
    udp_src_port: u16,
    dest_qp: u32,
    mirror: Option<(Option<u16>, Option<String>)>,
    direction: Direction,
}

impl ReportKey {
    fn of_key(k: &FlowKey) -> Self {
        Self {
            src_ip: ip_of(k.src_ip),
            dst_ip: ip_of(k.dst_ip),
            udp_src_port: k.udp_src_port,
            dest_qp: k.dest_qp,
            mirror: flow_mirror(k.mirror, 0).map(|m| (m.session, m.kind)),
            direction: Direction::of(k.mirror),
        }
    }

    fn of_flow(f: &Flow) -> Self {
        Self {
            src_ip: f.src_ip,
            dst_ip: f.dst_ip,
            udp_src_port: f.udp_src_port,
            dest_qp: f.dest_qp,
            mirror: f.mirror.as_ref().map(|m| (m.session, m.kind.clone())),
            direction: f.direction,
        }
    }
}

/// A queue pair number as the table, the findings and the metrics labels show it, and as tshark
/// prints it: `0x` and six hex digits (a QPN is 24 bits). JSON keeps the number.
pub fn qp_hex(qp: u32) -> String {
    format!("0x{qp:06x}")
}

/// An address as the keys carry it: IPv4 v4-mapped.
pub fn ip_bytes(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// IPv4 addresses travel v4-mapped; reports show them in their usual form.
pub fn ip_of(bytes: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(bytes);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

impl Ops {
    pub fn add(&mut self, o: &Ops) {
        self.send += o.send;
        self.write += o.write;
        self.read_request += o.read_request;
        self.read_response += o.read_response;
        self.ack += o.ack;
        self.nak += o.nak;
        self.rnr_nak += o.rnr_nak;
        self.atomic += o.atomic;
        self.atomic_ack += o.atomic_ack;
        self.cnp += o.cnp;
        self.other += o.other;
    }

    fn from_counts(c: &[u64; OpClass::COUNT]) -> Self {
        let at = |o: OpClass| c[o as usize];
        Self {
            send: at(OpClass::Send),
            write: at(OpClass::Write),
            read_request: at(OpClass::ReadRequest),
            read_response: at(OpClass::ReadResponse),
            ack: at(OpClass::Ack),
            nak: at(OpClass::Nak),
            rnr_nak: at(OpClass::RnrNak),
            atomic: at(OpClass::Atomic),
            atomic_ack: at(OpClass::AtomicAck),
            cnp: at(OpClass::Cnp),
            other: at(OpClass::Other),
        }
    }
}

impl Flow {
    pub fn new(key: &FlowKey, s: &FlowStats, window_seconds: f64) -> Self {
        Self {
            src_ip: ip_of(key.src_ip),
            dst_ip: ip_of(key.dst_ip),
            udp_src_port: key.udp_src_port,
            dest_qp: key.dest_qp,
            mirror: flow_mirror(key.mirror, s.mirror_truncated),
            direction: Direction::of(key.mirror),
            packets: s.packets,
            bytes: s.bytes,
            ecn: Ecn {
                not_ect: s.ecn[0],
                ect1: s.ecn[1],
                ect0: s.ecn[2],
                ce: s.ecn[3],
            },
            ops: Ops::from_counts(&s.ops),
            transports: transport_names(s.transport_mask),
            psn: Psn::of(s),
            psn_scope: None,
            dscp: (0..64u8).filter(|d| s.dscp_mask & (1 << d) != 0).collect(),
            cnp_dscp: (0..64u8)
                .filter(|d| s.cnp_dscp_mask & (1 << d) != 0)
                .collect(),
            pcp: (0..8u8).filter(|p| s.pcp_mask & (1 << p) != 0).collect(),
            vlans: vid_range(s.vids[0], s.vids[1]),
            inner_vlans: vid_range(s.vids[2], s.vids[3]),
            untagged: s.pcp_mask & observer_common::UNTAGGED != 0,
            first_seen_ns: s.first_seen_ns,
            last_seen_ns: s.last_seen_ns,
            rate_bps: rate(s.bytes, window_seconds),
            active_rate_bps: active_rate(s),
            peak_rate_bps: None,
        }
    }

    /// The flow has request packets (SEND, WRITE, READ, atomic) whose PSNs are followed
    /// (connection management on QP 1 aside).
    pub fn psn_followed(&self) -> bool {
        self.dest_qp != 1
            && self.ops.send + self.ops.write + self.ops.read_request + self.ops.atomic > 0
    }

    /// Share of packets marked CE, in percent.
    pub fn ce_percent(&self) -> f64 {
        percent(self.ecn.ce, self.packets)
    }
}

impl MirrorTotals {
    /// The mirror copies of the counters; none when there were none.
    pub fn of(c: &observer_common::Counters) -> Option<Self> {
        let sessions: BTreeMap<u16, u64> = c
            .mirror_sessions
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(id, n)| (id as u16, *n))
            .collect();
        (!sessions.is_empty() || c.mirror_sessionless > 0).then_some(MirrorTotals {
            sessions,
            sessionless: c.mirror_sessionless,
            truncated: c.mirror_truncated,
        })
    }
}

/// Bits/s over a flow's first to last packet; none when they are one instant.
fn active_rate(s: &FlowStats) -> Option<f64> {
    active_rate_of(s.packets, s.bytes, s.first_seen_ns, s.last_seen_ns)
}

/// A rate needs this many packets: over two, the span between them says little (two packets
/// 285 ns apart would read as tens of Gb/s).
pub const MIN_RATE_PACKETS: u64 = 3;
/// And a span of at least this long.
pub const MIN_RATE_SPAN_NS: u64 = 1_000;

/// `bytes` * 8 over `first_ns` to `last_ns`, when `packets` and the span are enough to tell a
/// rate ([`MIN_RATE_PACKETS`], [`MIN_RATE_SPAN_NS`]).
pub fn active_rate_of(packets: u64, bytes: u64, first_ns: u64, last_ns: u64) -> Option<f64> {
    let ns = last_ns
        .checked_sub(first_ns)
        .filter(|ns| *ns >= MIN_RATE_SPAN_NS)?;
    (packets >= MIN_RATE_PACKETS).then(|| bytes as f64 * 8.0 * 1e9 / ns as f64)
}

pub fn rate(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

impl Report {
    /// The connection, paired both ways, that flow `f` is a direction of (its sender's and
    /// receiver's addresses, the receiver's QP, the same observation), if any.
    pub fn paired_connection_of(&self, f: &Flow) -> Option<&connections::Connection> {
        self.connections.iter().find(|c| {
            let side = |from: &connections::ConnSide, to: &connections::ConnSide| {
                from.ip == f.src_ip && to.ip == f.dst_ip && to.qp == Some(f.dest_qp)
            };
            c.paired_by.is_some()
                && (side(&c.a, &c.b) || side(&c.b, &c.a))
                && match &f.mirror {
                    None => c.mirrors.is_empty(),
                    Some(m) => c.mirrors.contains(m),
                }
        })
    }

    /// Sets each flow's `peak_rate_bps` from the series' peaks by flow key (flows without
    /// traffic in the series get 0).
    pub fn set_flow_peaks(&mut self, peaks: &std::collections::HashMap<FlowKey, f64>) {
        let by_id: std::collections::HashMap<_, f64> = peaks
            .iter()
            .map(|(k, p)| (ReportKey::of_key(k), *p))
            .collect();
        for f in &mut self.flows {
            // An interval's rate is over all of the interval, also where the flow was idle:
            // the rate over its active span is one it reached too, so the peak is never below
            // it.
            let interval = by_id.get(&ReportKey::of_flow(f)).copied().unwrap_or(0.0);
            f.peak_rate_bps = Some(interval.max(f.active_rate_bps.unwrap_or(0.0)));
        }
        // A side's flows (several mirror sessions of one flow, or the ports a connection
        // moved through): the busiest one's interval, not a sum per interval.
        for c in &mut self.connections {
            for side in [&mut c.a, &mut c.b] {
                side.peak_rate_bps = (!side.keys.is_empty()).then(|| {
                    side.keys
                        .iter()
                        .map(|k| peaks.get(k).copied().unwrap_or(0.0))
                        .fold(0.0, f64::max)
                });
            }
        }
    }

    /// Names the interfaces of the `latency` section (live capture: `names` by ifindex).
    pub fn name_latency_interfaces(&mut self, names: &std::collections::HashMap<u32, String>) {
        for l in &mut self.latency {
            l.interface = names.get(&l.ifindex).cloned();
        }
    }

    /// Sets the link speed of the `pfc` section (pause times follow from it).
    pub fn set_link_speed(&mut self, bps: Option<u64>) {
        if let Some(pfc) = &mut self.pfc {
            pfc.set_link_speed(bps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transports_are_named_by_the_opcodes_top_bits() {
        // An RC flow that also carries CNPs (the responder's ACKs and CNPs share its key).
        assert_eq!(transport_names(1 | 1 << 4), ["RC", "CNP"]);
        assert_eq!(transport_names(1 << 3 | 1 << 5), ["UD", "XRC"]);
        // 0xC0-0xDF and 0xE0-0xFF are both manufacturer specific.
        assert_eq!(transport_names(1 << 6 | 1 << 7), ["vendor"]);
        assert!(transport_names(0).is_empty());
    }

    /// Two packets 285 ns apart are no rate; three over a microsecond or more are.
    #[test]
    fn a_rate_needs_three_packets_over_a_microsecond() {
        assert_eq!(active_rate_of(2, 2000, 1_000, 1_285), None);
        assert_eq!(active_rate_of(3, 3000, 1_000, 1_500), None);
        assert_eq!(active_rate_of(3, 3000, 1_000, 2_000), Some(24e9));
        assert_eq!(active_rate_of(1, 1000, 5, 5), None);
    }

    /// PEAK is never below RATE: a flow busy for a tenth of its only interval has its
    /// interval's rate a tenth of its active rate.
    #[test]
    fn the_peak_is_never_below_the_active_rate() {
        let key = FlowKey {
            src_ip: [1; 16],
            dst_ip: [2; 16],
            dest_qp: 7,
            udp_src_port: 49152,
            mirror: 0,
        };
        let s = FlowStats {
            packets: 10,
            bytes: 10_000,
            first_seen_ns: 0,
            last_seen_ns: 100_000,
            ..FlowStats::default()
        };
        let mut r: Report = serde_json::from_value(serde_json::json!({
            "schema": SCHEMA, "source": {"kind": "pcap"}, "window": {"seconds": 1.0},
            "totals": {"frames": 0, "roce_packets": 0, "roce_bytes": 0, "ce_packets": 0,
                "cnp_packets": 0, "flow_insert_failures": 0, "evicted_packets": 0,
                "egress_frames": 0, "pause_insert_failures": 0, "skipped": {},
                "psn": Psn::default()},
            "flows": []
        }))
        .unwrap();
        r.flows.push(Flow::new(&key, &s, 1.0));
        let active = r.flows[0].active_rate_bps.unwrap();
        assert_eq!(active, 800e6);
        let peaks = [(key, active / 10.0)].into_iter().collect();
        r.set_flow_peaks(&peaks);
        assert_eq!(r.flows[0].peak_rate_bps, Some(active));
        let peaks = [(key, active * 2.0)].into_iter().collect();
        r.set_flow_peaks(&peaks);
        assert_eq!(r.flows[0].peak_rate_bps, Some(active * 2.0));
    }
}
