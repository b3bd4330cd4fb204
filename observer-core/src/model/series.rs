//! The `series` and `microbursts` sections of the report.

use std::net::IpAddr;

use observer_common::FlowKey;
use serde::{Deserialize, Serialize};

use super::{Direction, Flow, ip_of};

/// Per-interval metrics, one value per interval (columns, as charting libraries take them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// RoCE throughput (IP bytes), bits/s.
    pub bps: Vec<f64>,
    pub packets: Vec<u64>,
    /// CE-marked share of the packets, 0..1.
    pub ce_fraction: Vec<f64>,
    pub cnp_per_s: Vec<f64>,
    /// NAKs and RNR NAKs.
    pub naks: Vec<u64>,
    pub psn_gaps: Vec<u64>,
    pub retransmissions: Vec<u64>,
}

/// The `series` section of the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// The interval used: `--interval`, or fitted to the capture (`interval_fitted`).
    pub interval_s: f64,
    /// Start of the first interval: Unix-epoch ns (live), the first frame's timestamp (replay).
    pub start_ns: u64,
    /// Start of each interval, seconds after `start_ns`.
    pub t: Vec<f64>,
    /// Every RoCE flow together.
    pub total: Metrics,
    /// Per interface and direction: every frame's bytes on the wire (RoCE or not).
    pub interfaces: Vec<InterfaceSeries>,
    /// The largest flows by bytes.
    pub flows: Vec<FlowSeries>,
    /// Passive latency per interval (all interfaces and sides together); absent without
    /// samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencySeries>,
    /// The time the series covers, seconds from `start_ns`: to the last frame (replay) or to
    /// the end of the observation (live). Every interval is `interval_s` long but the last,
    /// which ends here; rates are over the time each interval covers.
    #[serde(default)]
    pub span_s: f64,
    /// The interval was chosen to fit the capture (replay without `--interval`): about 100
    /// intervals over its span, never shorter than a microburst slot.
    #[serde(default)]
    pub interval_fitted: bool,
}

/// Latency samples per interval, and their quantiles (null where an interval has none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySeries {
    pub ack_samples: Vec<u64>,
    pub ack_p50_ns: Vec<Option<u64>>,
    pub ack_p99_ns: Vec<Option<u64>>,
    pub read_samples: Vec<u64>,
    pub read_p50_ns: Vec<Option<u64>>,
    pub read_p99_ns: Vec<Option<u64>>,
}

impl Series {
    /// Seconds interval `i` covers: `interval_s`, but the last ends at `span_s` (an older
    /// report without `span_s`: every interval is whole).
    pub fn covered_s(&self, i: usize) -> f64 {
        let start = self.t.get(i).copied().unwrap_or(0.0);
        if i + 1 == self.t.len() && self.span_s > 0.0 {
            (self.span_s - start).clamp(0.0, self.interval_s)
        } else {
            self.interval_s
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InterfaceSeries {
    pub name: String,
    pub direction: Direction,
    /// Wire rate: frame bytes plus preamble, FCS and inter-frame gap, bits/s.
    pub bps: Vec<f64>,
    /// The busiest microburst slot of each interval, as a rate in bits/s.
    pub peak_bps: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowSeries {
    #[serde(flatten)]
    pub flow: FlowRef,
    #[serde(flatten)]
    pub metrics: Metrics,
}

/// A flow's identity as reports name it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlowRef {
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub udp_src_port: u16,
    pub dest_qp: u32,
    #[serde(default)]
    pub direction: Direction,
}

impl FlowRef {
    pub fn of_key(k: &FlowKey) -> Self {
        Self {
            src_ip: ip_of(k.src_ip),
            dst_ip: ip_of(k.dst_ip),
            udp_src_port: k.udp_src_port,
            dest_qp: k.dest_qp,
            direction: Direction::of(k.mirror),
        }
    }

    pub fn of_flow(f: &Flow) -> Self {
        Self {
            src_ip: f.src_ip,
            dst_ip: f.dst_ip,
            udp_src_port: f.udp_src_port,
            dest_qp: f.dest_qp,
            direction: f.direction,
        }
    }
}

impl std::fmt::Display for FlowRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} -> {} QP {} sport {}{}",
            self.src_ip,
            self.dst_ip,
            super::qp_hex(self.dest_qp),
            self.udp_src_port,
            if self.direction == Direction::Egress {
                " (tx)"
            } else {
                ""
            }
        )
    }
}

/// The `microbursts` section of the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Microbursts {
    pub slot_ns: u64,
    /// The link speed shares are computed for; absent when unknown (no bursts then, only peaks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_speed_bps: Option<u64>,
    /// A slot is busy at or above this share of the link speed; a burst is a run of busy slots.
    pub threshold_percent: f64,
    pub interfaces: Vec<InterfaceBursts>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InterfaceBursts {
    pub name: String,
    pub direction: Direction,
    /// Wire bytes (frames plus preamble, FCS and gap) in the slots seen.
    pub bytes: u64,
    /// The busiest slot as a rate, bits/s.
    pub peak_bps: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_percent: Option<f64>,
    /// Start of the busiest slot (the report's clock).
    pub peak_at_ns: u64,
    /// Slots at or above the threshold.
    pub busy_slots: u64,
    /// Runs of busy slots.
    pub bursts: u64,
    pub longest_burst_ns: u64,
    pub longest_burst_at_ns: u64,
    /// The bursts with the highest peaks, highest first.
    pub top: Vec<Burst>,
    /// Slots the kernel's ring had already reused when read (their bytes are lost here):
    /// the reader fell behind.
    #[serde(default)]
    pub lost_slots: u64,
    /// Slots whose frames came at times known only over a longer span (live: the kernel
    /// clock's timer ran late, its tick standing at one slot that long): their bytes are spread
    /// evenly over the span, so a burst shorter than its span may not show.
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub uncertain_slots: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    pub at_ns: u64,
    pub duration_ns: u64,
    pub bytes: u64,
    pub peak_bps: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_percent: Option<f64>,
}
