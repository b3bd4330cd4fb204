//! The `roce-observer/report/v1` JSON report and the terminal table, built from an
//! [`Aggregate`]. Later versions add fields, never rename these.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    net::{IpAddr, Ipv6Addr},
};

use observer_common::{
    FlowKey, FlowStats, LINK_PAUSE, MirrorOf, OpClass, PauseKey, PauseStats, SkipReason,
    wire::{PAUSE_QUANTUM_BITS, PFC_PRIORITIES},
};
use serde::{Deserialize, Serialize};

use crate::aggregate::Aggregate;

pub const SCHEMA: &str = "roce-observer/report/v1";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    pub source: Source,
    pub window: Window,
    pub totals: Totals,
    /// Every flow, largest byte count first.
    pub flows: Vec<Flow>,
    /// PAUSE / PFC frames per sender and priority; absent when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pfc: Option<PfcReport>,
    /// `roce-observer ecmp` only: the flows run through a switch hash model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecmp: Option<crate::ecmp::EcmpReport>,
    /// Per-interval time series (diagnose, replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<crate::series::Series>,
    /// Per-interface microburst slots (diagnose, replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub microbursts: Option<crate::series::Microbursts>,
    /// What the rules found, most severe first (diagnose, replay).
    #[serde(default)]
    pub findings: Vec<crate::findings::Finding>,
    /// Every rule: fired, passed, or skipped and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<crate::findings::Check>,
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
    /// "live" or "pcap".
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
            warnings,
        }
    }
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
    pub psn: Psn,
    /// DSCP values seen, ascending.
    pub dscp: Vec<u8>,
    /// DSCP values CNPs of this flow were sent with, ascending (absent without CNPs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cnp_dscp: Vec<u8>,
    /// VLAN priorities (PCP of the outer tag) seen, ascending; absent when never tagged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcp: Vec<u8>,
    /// Some frames of the flow carried no VLAN tag.
    #[serde(default)]
    pub untagged: bool,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// bytes * 8 / window.seconds
    pub rate_bps: f64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Psn {
    pub gaps: u64,
    pub missing: u64,
    pub regressions: u64,
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
            psn: Psn {
                gaps: s.psn_gaps,
                missing: s.psn_missing,
                regressions: s.psn_regressions,
            },
            dscp: (0..64u8).filter(|d| s.dscp_mask & (1 << d) != 0).collect(),
            cnp_dscp: (0..64u8)
                .filter(|d| s.cnp_dscp_mask & (1 << d) != 0)
                .collect(),
            pcp: (0..8u8).filter(|p| s.pcp_mask & (1 << p) != 0).collect(),
            untagged: s.pcp_mask & observer_common::UNTAGGED != 0,
            first_seen_ns: s.first_seen_ns,
            last_seen_ns: s.last_seen_ns,
            rate_bps: rate(s.bytes, window_seconds),
        }
    }

    /// Share of packets marked CE, in percent.
    pub fn ce_percent(&self) -> f64 {
        percent(self.ecn.ce, self.packets)
    }
}

fn mirror_totals(c: &observer_common::Counters) -> Option<MirrorTotals> {
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

fn rate(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

impl Report {
    pub fn new(agg: &Aggregate, source: Source, window_seconds: f64) -> Self {
        let c = &agg.counters;
        let mut flows: Vec<Flow> = agg
            .flows
            .iter()
            .map(|(k, s)| Flow::new(k, s, window_seconds))
            .collect();
        flows.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(b.packets.cmp(&a.packets))
                .then(a.src_ip.cmp(&b.src_ip))
                .then(a.dst_ip.cmp(&b.dst_ip))
                .then(a.dest_qp.cmp(&b.dest_qp))
                .then(a.udp_src_port.cmp(&b.udp_src_port))
                .then(a.direction.cmp(&b.direction))
        });
        Self {
            schema: SCHEMA.to_string(),
            source,
            window: Window {
                seconds: window_seconds,
            },
            totals: Totals {
                frames: c.frames,
                roce_packets: c.roce_packets,
                roce_bytes: c.roce_bytes,
                ce_packets: c.ce_packets,
                cnp_packets: c.cnp_packets,
                flow_insert_failures: c.flow_insert_failures,
                evicted_packets: c
                    .roce_packets
                    .saturating_sub(c.flow_insert_failures)
                    .saturating_sub(agg.flows.values().map(|s| s.packets).sum()),
                egress_frames: c.egress_frames,
                pause_insert_failures: c.pause_insert_failures,
                skipped: SkipReason::ALL
                    .iter()
                    .map(|r| (r.name().to_string(), c.skipped[*r as usize]))
                    .collect(),
                mirror: mirror_totals(c),
            },
            flows,
            pfc: PfcReport::new(&agg.pauses),
            ecmp: None,
            series: None,
            microbursts: None,
            findings: Vec::new(),
            checks: Vec::new(),
        }
    }

    /// Sets the link speed of the `pfc` section (pause times follow from it).
    pub fn set_link_speed(&mut self, bps: Option<u64>) {
        if let Some(pfc) = &mut self.pfc {
            pfc.set_link_speed(bps);
        }
    }

    /// The terminal table: totals, the top `top` flows by bytes, skip reasons.
    pub fn render_table(&self, top: usize) -> String {
        let mut out = String::new();
        let t = &self.totals;
        let names = if self.source.files.is_empty() {
            &self.source.interfaces
        } else {
            &self.source.files
        };
        let src = match names.as_slice() {
            [] => self.source.kind.clone(),
            names => format!("{} {}", self.source.kind, names.join(",")),
        };
        let _ = writeln!(
            out,
            "roce-observer: {src}, {:.1} s: {} frames, {} RoCEv2 packets ({}), {} flows",
            self.window.seconds,
            t.frames,
            t.roce_packets,
            human_bytes(t.roce_bytes),
            self.flows.len()
        );
        let _ = writeln!(
            out,
            "  CE-marked {} ({:.2}%), CNPs {}, NAKs {}, RNR NAKs {}, PSN gaps {} (~{} PSNs missing), retransmissions {}",
            t.ce_packets,
            percent(t.ce_packets, t.roce_packets),
            t.cnp_packets,
            self.flows.iter().map(|f| f.ops.nak).sum::<u64>(),
            self.flows.iter().map(|f| f.ops.rnr_nak).sum::<u64>(),
            self.flows.iter().map(|f| f.psn.gaps).sum::<u64>(),
            self.flows.iter().map(|f| f.psn.missing).sum::<u64>(),
            self.flows.iter().map(|f| f.psn.regressions).sum::<u64>(),
        );
        if t.egress_frames > 0 {
            let _ = writeln!(
                out,
                "  {} of the frames seen leaving the host (TC egress): flows marked (tx)",
                t.egress_frames
            );
        }
        if t.pause_insert_failures > 0 {
            let _ = writeln!(
                out,
                "  pause table full: {} PAUSE / PFC frames counted in mac_control only",
                t.pause_insert_failures
            );
        }
        if t.flow_insert_failures + t.evicted_packets > 0 {
            let _ = writeln!(
                out,
                "  flow table full: {} packets counted in totals only (raise --max-flows)",
                t.flow_insert_failures + t.evicted_packets
            );
        }
        if !self.flows.is_empty() {
            let _ = writeln!(
                out,
                "\n{:<41} {:>5} {:>8} {:>11} {:>8} {:>6} {:>6} {:>5} {:>5} {:>5} {:>5}",
                "SOURCE -> DESTINATION",
                "SPORT",
                "DEST QP",
                "RATE",
                "PACKETS",
                "CE%",
                "CNPs",
                "NAKs",
                "RNR",
                "GAPS",
                "RETX"
            );
            for f in self.flows.iter().take(top) {
                let tx = if f.direction == Direction::Egress {
                    " (tx)"
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    "{:<41} {:>5} {:>8} {:>11} {:>8} {:>6.2} {:>6} {:>5} {:>5} {:>5} {:>5}",
                    format!("{} -> {}{tx}", f.src_ip, f.dst_ip),
                    f.udp_src_port,
                    format!("0x{:06x}", f.dest_qp),
                    human_rate(f.rate_bps),
                    f.packets,
                    f.ce_percent(),
                    f.ops.cnp,
                    f.ops.nak,
                    f.ops.rnr_nak,
                    f.psn.gaps,
                    f.psn.regressions
                );
            }
            if self.flows.len() > top {
                let _ = writeln!(
                    out,
                    "  ... {} more flows (--top N, or --json for all)",
                    self.flows.len() - top
                );
            }
        }
        if let Some(pfc) = &self.pfc {
            render_pfc(&mut out, pfc, top);
        }
        let skipped: Vec<String> = t
            .skipped
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        if !skipped.is_empty() {
            let _ = writeln!(out, "\nnot RoCEv2: {}", skipped.join(", "));
        }
        out
    }
}

impl Report {
    /// The terminal summary of the time series and the microburst slots (empty without them).
    pub fn render_timeline(&self) -> String {
        let mut out = String::new();
        if let Some(s) = &self.series {
            let peak = |v: &[f64]| {
                v.iter().enumerate().fold(
                    (0usize, 0.0f64),
                    |m, (i, x)| if *x > m.1 { (i, *x) } else { m },
                )
            };
            let (ti, tp) = peak(&s.total.bps);
            let (ci, cp) = peak(&s.total.ce_fraction);
            let (ni, np) = peak(&s.total.cnp_per_s);
            let at = |i: usize| s.t.get(i).copied().unwrap_or(0.0);
            let _ = writeln!(
                out,
                "\ntime series: {} intervals of {}: RoCE peak {} at +{:.2}s, CE peak {:.2}% at +{:.2}s, CNPs peak {:.0}/s at +{:.2}s",
                s.t.len(),
                human_duration((s.interval_s * 1e9).round() as u64),
                human_rate(tp),
                at(ti),
                cp * 100.0,
                at(ci),
                np,
                at(ni)
            );
        }
        if let Some(m) = &self.microbursts {
            let link = match m.link_speed_bps {
                Some(bps) => format!(
                    "link {}, busy from {}%",
                    human_rate(bps as f64),
                    m.threshold_percent
                ),
                None => "link speed unknown: give --link-speed for bursts".to_string(),
            };
            let _ = writeln!(
                out,
                "\nMICROBURSTS ({} slots, {link})",
                human_duration(m.slot_ns)
            );
            let _ = writeln!(
                out,
                "{:<16} {:<7} {:>11} {:>7} {:>7} {:>9} {:>12}",
                "INTERFACE", "DIR", "PEAK", "LINK%", "BURSTS", "LONGEST", "LOST SLOTS"
            );
            for i in &m.interfaces {
                let _ = writeln!(
                    out,
                    "{:<16} {:<7} {:>11} {:>7} {:>7} {:>9} {:>12}",
                    i.name,
                    match i.direction {
                        Direction::Ingress => "in",
                        Direction::Egress => "out",
                    },
                    human_rate(i.peak_bps),
                    i.peak_percent
                        .map_or("-".to_string(), |p| format!("{p:.1}")),
                    i.bursts,
                    if i.bursts > 0 {
                        human_duration(i.longest_burst_ns)
                    } else {
                        "-".to_string()
                    },
                    i.lost_slots
                );
            }
        }
        out
    }
}

/// The PAUSE / PFC table: a row per sender and class.
fn render_pfc(out: &mut String, pfc: &PfcReport, top: usize) {
    let speed = match pfc.link_speed_bps {
        Some(bps) => format!("pause time at {}", human_rate(bps as f64)),
        None => "pause time unknown: give --link-speed".to_string(),
    };
    let _ = writeln!(
        out,
        "\nPFC / PAUSE from {} senders ({speed})",
        pfc.sources.len()
    );
    let _ = writeln!(
        out,
        "{:<17} {:<10} {:>5} {:>8} {:>6} {:>12} {:>12}",
        "SOURCE MAC", "MIRROR", "PRIO", "FRAMES", "XON", "QUANTA", "PAUSE TIME"
    );
    for src in pfc.sources.iter().take(top) {
        let mirror = match &src.mirror {
            None if src.direction == Direction::Egress => "(tx)".to_string(),
            None => "-".to_string(),
            Some(FlowMirror {
                session: Some(id), ..
            }) => format!("session {id}"),
            Some(m) => m.kind.clone().unwrap_or_default(),
        };
        let rows = src
            .priorities
            .iter()
            .map(|p| (p.priority.to_string(), &p.counts))
            .chain(src.link_pause.iter().map(|l| ("all".to_string(), l)));
        for (class, c) in rows {
            let _ = writeln!(
                out,
                "{:<17} {:<10} {:>5} {:>8} {:>6} {:>12} {:>12}",
                src.src_mac,
                mirror,
                class,
                c.frames,
                c.xon,
                c.quanta,
                c.pause_ns.map_or("-".to_string(), human_duration)
            );
        }
        if src.priorities.is_empty() && src.link_pause.is_none() {
            let _ = writeln!(
                out,
                "{:<17} {:<10} {:>5} {:>8} {:>6} {:>12} {:>12}",
                src.src_mac, mirror, "none", src.pfc_frames, 0, 0, "-"
            );
        }
    }
    if pfc.sources.len() > top {
        let _ = writeln!(
            out,
            "  ... {} more senders (--top N, or --json for all)",
            pfc.sources.len() - top
        );
    }
}

fn human_duration(ns: u64) -> String {
    let v = ns as f64;
    if v >= 1e9 {
        format!("{:.2} s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2} us", v / 1e3)
    } else {
        format!("{ns} ns")
    }
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1000.0 && i < UNITS.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

fn human_rate(bps: f64) -> String {
    const UNITS: [&str; 5] = ["b/s", "kb/s", "Mb/s", "Gb/s", "Tb/s"];
    let mut v = bps;
    let mut i = 0;
    while v >= 1000.0 && i < UNITS.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    format!("{v:.1} {}", UNITS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v4_mapped_addresses_print_as_ipv4() {
        let mut b = [0u8; 16];
        b[10] = 0xFF;
        b[11] = 0xFF;
        b[12..].copy_from_slice(&[198, 18, 0, 2]);
        assert_eq!(ip_of(b).to_string(), "198.18.0.2");
        let v6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(ip_of(v6.octets()).to_string(), "2001:db8::1");
    }

    #[test]
    fn report_fields_follow_the_flow_stats() {
        let mut agg = Aggregate::new();
        let key = FlowKey {
            dest_qp: 18,
            udp_src_port: 49152,
            ..Default::default()
        };
        let mut s = FlowStats {
            packets: 10,
            bytes: 1000,
            ecn: [1, 2, 3, 4],
            dscp_mask: (1 << 26) | (1 << 48),
            psn_gaps: 1,
            psn_missing: 3,
            psn_regressions: 2,
            ..Default::default()
        };
        s.ops[OpClass::Cnp as usize] = 5;
        s.ops[OpClass::Nak as usize] = 1;
        agg.flows.insert(key, s);
        agg.counters.frames = 12;
        agg.counters.skipped[SkipReason::NotIp as usize] = 2;
        let r = Report::new(&agg, Source::live(vec!["veth0".into()], "auto"), 2.0);
        let f = &r.flows[0];
        assert_eq!(
            (f.ecn.not_ect, f.ecn.ect1, f.ecn.ect0, f.ecn.ce),
            (1, 2, 3, 4)
        );
        assert_eq!((f.ops.cnp, f.ops.nak, f.ops.send), (5, 1, 0));
        assert_eq!(f.dscp, vec![26, 48]);
        assert_eq!(f.rate_bps, 4000.0);
        assert_eq!(r.totals.skipped["not_ip"], 2);
        assert_eq!(r.totals.skipped.len(), SkipReason::COUNT);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["schema"], SCHEMA);
        assert_eq!(json["flows"][0]["psn"]["missing"], 3);
        let back: Report = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.totals.evicted_packets, 0);
        let mut evicted = agg.clone();
        evicted.counters.roce_packets = 25;
        let e = Report::new(&evicted, r.source.clone(), 2.0);
        assert_eq!(e.totals.evicted_packets, 15);
        assert!(
            e.render_table(5).contains("flow table full: 15 packets"),
            "{}",
            e.render_table(5)
        );
        let table = r.render_table(10);
        assert!(table.contains("0x000012"), "{table}");
        assert!(table.contains("not RoCEv2: not_ip 2"), "{table}");
    }
}
