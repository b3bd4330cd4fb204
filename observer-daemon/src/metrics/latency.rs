//! Passive latency histograms, in seconds.

#[allow(unused_imports)]
use super::{Family, Kind, Unit};

pub static ACK: Family = Family::new(
    "roce_ack_latency",
    Kind::Histogram,
    Some(Unit::Seconds),
    "Passive ACK latency: a request with AckReq seen to the first ACK or NAK covering it (coalesced ACKs to the newest timed request, Karn's rule), per interface the answers arrived on and side (requests_out: this host's requests, the round trip through the fabric and the peer; requests_in: requests arriving; mirror: tap to responder to tap)",
    &["iface", "side"],
);

pub static READ: Family = Family::new(
    "roce_read_latency",
    Kind::Histogram,
    Some(Unit::Seconds),
    "Passive READ latency: a READ request seen to the first packet of its response, per interface and side (as roce_ack_latency_seconds)",
    &["iface", "side"],
);

pub static QP_ACK: Family = Family::new(
    "roce_qp_ack_latency",
    Kind::Histogram,
    Some(Unit::Seconds),
    "Passive ACK latency of the requests a queue pair's flow sent (its source is the requester), top K series only",
    &super::queue_pairs::FLOW_LABELS,
);

pub static QP_READ: Family = Family::new(
    "roce_qp_read_latency",
    Kind::Histogram,
    Some(Unit::Seconds),
    "Passive READ latency of the requests a queue pair's flow sent (its source is the requester), top K series only",
    &super::queue_pairs::FLOW_LABELS,
);

/// Every family of this subject.
pub fn all() -> Vec<Family> {
    vec![ACK.clone(), READ.clone(), QP_ACK.clone(), QP_READ.clone()]
}
