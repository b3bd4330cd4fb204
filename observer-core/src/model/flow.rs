//! One flow of the `flows` section: its identity, counts, ECN, operations and PSN analysis.

use super::*;

/// Which mirror a flow was seen through.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

/// The bits set in `mask`, lowest first.
fn bits(mask: u64) -> Vec<u8> {
    let mut v = Vec::new();
    let mut m = mask;
    while m != 0 {
        v.push(m.trailing_zeros() as u8);
        m &= m - 1;
    }
    v
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
pub(super) fn transport_names(mask: u32) -> Vec<String> {
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

    pub fn from_counts(c: &[u64; OpClass::COUNT]) -> Self {
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
    /// A flow from `src_ip` to `dst_ip` with nothing counted: the one place a flow is built by
    /// hand (tests, and tools that make reports of their own); set what it counts with struct
    /// update syntax.
    pub fn empty(src_ip: IpAddr, dst_ip: IpAddr, udp_src_port: u16, dest_qp: u32) -> Self {
        Self {
            src_ip,
            dst_ip,
            udp_src_port,
            dest_qp,
            mirror: None,
            direction: Direction::default(),
            packets: 0,
            bytes: 0,
            ecn: Ecn::default(),
            ops: Ops::default(),
            psn: Psn::default(),
            psn_scope: None,
            transports: Vec::new(),
            dscp: Vec::new(),
            cnp_dscp: Vec::new(),
            pcp: Vec::new(),
            vlans: Vec::new(),
            inner_vlans: Vec::new(),
            untagged: false,
            first_seen_ns: 0,
            last_seen_ns: 0,
            rate_bps: 0.0,
            active_rate_bps: None,
            peak_rate_bps: None,
        }
    }

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
            dscp: bits(s.dscp_mask),
            cnp_dscp: bits(s.cnp_dscp_mask),
            pcp: bits(u64::from(s.pcp_mask & 0xff)),
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
