//! The `connections` and `latency` sections: the two directions of each RDMA connection
//! joined, with both QP numbers and the passive latency of each side's requests; traffic that
//! is no connection (UD datagrams, connection management on QP 1) listed apart.

use std::net::IpAddr;

use observer_common::{
    FlowKey, LatHist, LatKind, LatSide, MSG_SCALE, MsgKind, MsgStats, lat_bucket_bounds,
};
use serde::{Deserialize, Serialize};

use super::{FlowMirror, Ops, Psn};

/// One RC, UC or XRC connection: two hosts, one UDP source port (both directions use it), one
/// observation (direct, or every mirror session together).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Connection {
    /// "RC", "UC" or "XRC" (from the opcodes seen).
    pub transport: String,
    /// The UDP source port of side A (its busiest), or of B when A sent nothing; each side's
    /// ports are in `a.ports` and `b.ports`.
    pub udp_src_port: u16,
    /// How its two directions were found to be one connection: "port" (the only directions
    /// each way of the two hosts on one UDP source port), "psn" (one direction's answers follow
    /// the other's requests, and no other's fit as well). Absent when one-sided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired_by: Option<String>,
    /// One-sided because several reverse directions fit its PSNs equally (or its one fit fits
    /// another too): how many directions were in contention. Never paired by a guess.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ambiguous: Option<u32>,
    /// The mirror sessions the connection was seen in (empty: seen directly).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<FlowMirror>,
    /// The path MTU learned from FIRST and MIDDLE payloads of either direction.
    #[serde(default)]
    pub pmtu: Option<u32>,
    pub packets: u64,
    pub bytes: u64,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// bytes * 8 over first to last packet; absent when those are one instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_rate_bps: Option<f64>,
    /// The side that sent more requests (the requester of a one-way transfer).
    pub a: ConnSide,
    /// The other side. Its `qp` is absent when it sent nothing seen.
    pub b: ConnSide,
}

/// One end of a connection: what it sent, and the latency of its requests' answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnSide {
    pub ip: IpAddr,
    /// Its QP number: the destination QP of the packets sent to it. Absent when none was seen.
    #[serde(default)]
    pub qp: Option<u32>,
    /// The UDP source ports of what it sent, the busiest first (several when the connection
    /// moved to other paths mid-way).
    #[serde(default)]
    pub ports: Vec<u16>,
    pub packets: u64,
    pub bytes: u64,
    pub ops: Ops,
    /// Packets it sent marked CE (its CNPs are in `ops.cnp`).
    pub ce: u64,
    /// The PSN analysis of the requests it sent, summarised (the flows have it whole).
    pub psn: PsnSummary,
    /// Its flow's busiest interval of the time series, bits/s (absent without a series).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rate_bps: Option<f64>,
    /// The messages it posted (absent when none was seen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Messages>,
    /// How long the other side took to answer this side's requests.
    pub latency: SideLatency,
    /// The flows this side sent (their keys), for the time series' peaks.
    #[serde(skip)]
    pub keys: Vec<FlowKey>,
}

/// What the PSN analysis concluded about one side's requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PsnSummary {
    pub missing: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub retransmissions: u64,
    pub resets: u64,
    pub violations: u64,
}

impl PsnSummary {
    pub fn add(&mut self, p: &Psn) {
        // A sprayed direction's holes are its other ports' packets ([`Psn::sprayed`]).
        if p.sprayed == 0 {
            self.missing += p.missing;
            self.out_of_order += p.out_of_order;
        }
        self.duplicates += p.duplicates;
        self.retransmissions += p.retransmissions;
        self.resets += p.resets;
        self.violations += p.violations;
    }
}

/// The messages one side posted, first sightings only: a WRITE or READ as long as its RETH's
/// DMA length (a READ's data flows the other way), a SEND assembled from its FIRST and LAST
/// packets. Sizes of every kind together: exact count, bytes and extremes; quantiles from
/// buckets at most 25% wide, interpolated inside the bucket and kept within the extremes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Messages {
    /// Messages of known size.
    pub count: u64,
    pub bytes: u64,
    pub send: u64,
    pub write: u64,
    pub read: u64,
    /// Messages whose size the observation could not tell: a SEND whose FIRST was not seen, a
    /// WRITE or READ whose RETH was cut off. Not in the other fields.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unknown_size: u64,
    pub min_bytes: u64,
    pub p50_bytes: u64,
    pub p99_bytes: u64,
    pub max_bytes: u64,
    pub mean_bytes: u64,
}

impl Messages {
    /// The summary of a side's messages; none when it posted none seen.
    pub fn of(m: &MsgStats) -> Option<Self> {
        let count = m.messages();
        if count == 0 && m.unknown_size == 0 {
            return None;
        }
        let of = |k: MsgKind| m.count[k as usize];
        let bytes: u64 = m.bytes.iter().sum();
        // The extremes only of messages of known size (as a merge of views has them: a view
        // without any keeps its own out).
        let (min, max) = if count > 0 { (m.min, m.max) } else { (0, 0) };
        let quantile = |q| MSG_SCALE.quantile(&m.buckets, min, max, q).unwrap_or(0);
        Some(Self {
            count,
            bytes,
            send: of(MsgKind::Send),
            write: of(MsgKind::Write),
            read: of(MsgKind::Read),
            unknown_size: m.unknown_size,
            min_bytes: min,
            p50_bytes: quantile(0.5),
            p99_bytes: quantile(0.99),
            max_bytes: max,
            mean_bytes: bytes.checked_div(count).unwrap_or(0),
        })
    }
}

/// The latency of one side's requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SideLatency {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<LatencySummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<LatencySummary>,
    /// ACKs that answered timed requests without giving a sample: they also covered a request
    /// not timed (more than four in flight) or sent again (Karn's rule).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u64,
    /// Requests to another QP number under this connection's key while samples were in
    /// flight (two connections on one UDP port between the same hosts): not timed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub conflicts: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// A latency histogram, summarised: exact count, extremes and mean; quantiles from the
/// buckets (each at most 12.5% wide), interpolated inside the bucket and kept within the
/// extremes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub samples: u64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
    /// The non-empty buckets, ascending: [lo_ns, hi_ns) and the samples in it.
    pub buckets: Vec<LatencyBucket>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyBucket {
    pub lo_ns: u64,
    pub hi_ns: u64,
    pub count: u64,
}

impl LatencySummary {
    /// The summary of a histogram; none without samples.
    pub fn of(h: &LatHist) -> Option<Self> {
        if h.count == 0 {
            return None;
        }
        Some(Self {
            samples: h.count,
            min_ns: h.min_ns,
            p50_ns: h.quantile(0.5)?,
            p90_ns: h.quantile(0.9)?,
            p99_ns: h.quantile(0.99)?,
            max_ns: h.max_ns,
            mean_ns: h.sum_ns / h.count,
            buckets: h
                .buckets
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| {
                    let (lo_ns, hi_ns) = lat_bucket_bounds(i);
                    LatencyBucket {
                        lo_ns,
                        hi_ns,
                        count: *n,
                    }
                })
                .collect(),
        })
    }
}

/// Samples of one kind on one side of one interface.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyScope {
    /// The interface the answers arrived on (live); absent in replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    #[serde(skip)]
    pub ifindex: u32,
    /// "ack" or "read".
    pub kind: String,
    /// What was measured where: "requests_out" (this host's requests: the round trip through
    /// the fabric and the peer's NIC), "requests_in" (requests arriving, live at a host: its
    /// own answering time; in a capture: the time from where the requests were seen to where
    /// the answers were), "mirror" (tap to responder to tap).
    pub side: String,
    #[serde(flatten)]
    pub summary: LatencySummary,
}

pub fn side_name(side: LatSide) -> &'static str {
    match side {
        LatSide::RequestsIn => "requests_in",
        LatSide::RequestsOut => "requests_out",
        LatSide::Mirror => "mirror",
    }
}

pub fn kind_name(kind: u8) -> &'static str {
    if kind == LatKind::Read as u8 {
        LatKind::Read.name()
    } else {
        LatKind::Ack.name()
    }
}

/// Traffic that is no connection: UD datagrams and connection management (MADs to QP 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OtherTraffic {
    /// "UD" or "management".
    pub kind: String,
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub dest_qp: u32,
    pub udp_src_port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<FlowMirror>,
    pub packets: u64,
    pub bytes: u64,
}

impl Connection {
    /// Requests both sides sent.
    pub fn requests(&self) -> u64 {
        self.a.requests() + self.b.requests()
    }
}

impl ConnSide {
    pub fn requests(&self) -> u64 {
        self.ops.send + self.ops.write + self.ops.read_request + self.ops.atomic
    }

    /// Whether anything of this side was seen: a flow it sent (on some UDP source port, even
    /// with no packet of its own in an interval, only a PSN count caught up), a message it
    /// posted, a request of its timed, skipped or in conflict. A side seen in none of these
    /// (the far end of a direction seen alone) is known only by what its peer sent it.
    pub fn seen(&self) -> bool {
        let l = &self.latency;
        !self.ports.is_empty()
            || self.packets > 0
            || self.messages.is_some()
            || l.ack.is_some()
            || l.read.is_some()
            || l.skipped > 0
            || l.conflicts > 0
    }
}

/// Connections to judge, for unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::{ConnSide, Connection};

    /// A side at `ip` with QP `qp` that sent `packets` packets and nothing else counted.
    pub fn side(ip: &str, qp: Option<u32>, packets: u64) -> ConnSide {
        ConnSide {
            ip: ip.parse().unwrap(),
            qp,
            ports: Vec::new(),
            packets,
            bytes: packets,
            ops: Default::default(),
            ce: 0,
            psn: Default::default(),
            peak_rate_bps: None,
            messages: None,
            latency: Default::default(),
            keys: Vec::new(),
        }
    }

    /// An RC connection of `a` and `b`, paired by `paired_by` (`None`: one-sided).
    pub fn connection(paired_by: Option<&str>, a: ConnSide, b: ConnSide) -> Connection {
        Connection {
            transport: "RC".into(),
            udp_src_port: 0,
            paired_by: paired_by.map(str::to_string),
            ambiguous: None,
            mirrors: Vec::new(),
            pmtu: None,
            packets: a.packets + b.packets,
            bytes: a.bytes + b.bytes,
            first_seen_ns: 0,
            last_seen_ns: 0,
            active_rate_bps: None,
            a,
            b,
        }
    }
}
