//! The `points` section: capture files of one traffic taken at several observation points
//! (per-node captures of one job, two taps), read as one.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Points {
    /// The files, in the order given.
    pub files: Vec<String>,
    /// RoCE packets each counted once, by how many points saw it (`[0]` at one point only,
    /// `[1]` at two, ...): those a file gave while another file was near in time (within a
    /// copy's lag of its span), where another point could have seen them.
    pub seen_at: Vec<u64>,
    /// Per pair of points and pair of hosts seen both ways between them: the second point's
    /// clock minus the first's, taking the fastest packet each way as equally fast.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clocks: Vec<ClockOffset>,
    /// Per pair of points and direction: the time a packet took from one to the other.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub one_way: Vec<OneWay>,
    /// Requests a point that carries their flow (and shared requests with the point that saw
    /// them) did not see: lost between the points, or not captured there; by where they were
    /// seen last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

/// Two points' clocks, from the packets of two hosts seen at both, each way.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockOffset {
    pub a: String,
    pub b: String,
    pub hosts: [IpAddr; 2],
    /// `b`'s clock minus `a`'s (ns): half-way between the fastest packet each way, as NTP
    /// takes it. A path slower one way than the other moves it by half the difference.
    pub offset_ns: i64,
    /// The fastest packet a to b plus the fastest b to a (ns): the fabric's part of a round
    /// trip between the points, whatever the clocks.
    pub round_trip_ns: i64,
}

/// Packets of one direction seen at two points: the time from the first point to the second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OneWay {
    pub from: String,
    pub to: String,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub packets: u64,
    pub min_ns: i64,
    pub p50_ns: i64,
    pub p99_ns: i64,
    pub max_ns: i64,
    pub mean_ns: i64,
    /// The clock offset (`clocks`) is taken out. False: the direction was seen one way only,
    /// and the times are `to`'s clock minus `from`'s as captured (offset included).
    pub clock_corrected: bool,
}

/// Packets of one flow a point did not see.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Missing {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dest_qp: u32,
    pub udp_src_port: u16,
    /// The point that saw them last (the first that saw them, when only one did).
    pub last_seen: String,
    /// The point that carries the flow and did not see them.
    pub not_seen_at: String,
    pub packets: u64,
    /// Some of their PSNs (up to 8).
    pub psns: Vec<u32>,
}
