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
pub mod jobs;
pub mod nic;
pub mod points;
pub mod series;
pub mod trace;

pub use series::FlowRef;

mod flow;
mod pfc;

pub use flow::{
    Direction, Ecn, Flow, FlowMirror, Ops, Psn, PsnScope, Unanswered, Violation, ViolationKind,
    Wait, violations_under,
};
pub use pfc::{PauseCounts, PausePriority, PauseSource, PfcReport, mac_string};

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
    /// Training jobs: the hosts talking RC, their communication phases and iteration period
    /// (replay with `--jobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<jobs::Jobs>,
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

/// The connections of a report paired both ways, by direction (sender, receiver, the
/// receiver's QP).
pub struct PairedConnections<'r> {
    by_direction:
        std::collections::HashMap<(IpAddr, IpAddr, u32), Vec<&'r connections::Connection>>,
}

impl<'r> PairedConnections<'r> {
    /// The connection, paired both ways, that flow `f` is a direction of (its sender's and
    /// receiver's addresses, the receiver's QP, the same observation), if any.
    pub fn of(&self, f: &Flow) -> Option<&'r connections::Connection> {
        self.by_direction
            .get(&(f.src_ip, f.dst_ip, f.dest_qp))?
            .iter()
            .copied()
            .find(|c| match &f.mirror {
                None => c.mirrors.is_empty(),
                Some(m) => c.mirrors.contains(m),
            })
    }
}

impl Report {
    /// The connections paired both ways, by direction: [`PairedConnections::of`] finds the
    /// one a flow is a direction of without going through every connection.
    pub fn paired_connections(&self) -> PairedConnections<'_> {
        let mut by_direction: std::collections::HashMap<_, Vec<&connections::Connection>> =
            std::collections::HashMap::new();
        for c in self.connections.iter().filter(|c| c.paired_by.is_some()) {
            for (from, to) in [(&c.a, &c.b), (&c.b, &c.a)] {
                if let Some(qp) = to.qp {
                    let list = by_direction.entry((from.ip, to.ip, qp)).or_default();
                    if !list.iter().any(|x| std::ptr::eq(*x, c)) {
                        list.push(c);
                    }
                }
            }
        }
        PairedConnections { by_direction }
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
    use flow::transport_names;

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
