//! Per interface and direction (`dir="rx"`: XDP, `dir="tx"`: TC egress in host mode), from the kernel's `IFACE_COUNTERS`.

#[allow(unused_imports)]
use super::{Family, Kind, Unit};

pub static FRAMES: Family = Family::new(
    "roce_iface_frames",
    Kind::Counter,
    None,
    "Frames seen on the interface (RoCE or not)",
    &["iface", "dir"],
);

pub static FRAME_BYTES: Family = Family::new(
    "roce_iface_frame",
    Kind::Counter,
    Some(Unit::Bytes),
    "Bytes of the frames seen on the interface (Ethernet frame length)",
    &["iface", "dir"],
);

pub static ROCE_PACKETS: Family = Family::new(
    "roce_packets",
    Kind::Counter,
    None,
    "RoCEv2 packets",
    &["iface", "dir"],
);

pub static ROCE_BYTES: Family = Family::new(
    "roce",
    Kind::Counter,
    Some(Unit::Bytes),
    "RoCEv2 bytes (IP length)",
    &["iface", "dir"],
);

pub static ECN_PACKETS: Family = Family::new(
    "roce_ecn_packets",
    Kind::Counter,
    None,
    "RoCEv2 packets by ECN codepoint",
    &["iface", "dir", "ecn"],
);

pub static OP_PACKETS: Family = Family::new(
    "roce_op_packets",
    Kind::Counter,
    None,
    "RoCEv2 packets by operation class (cnp, nak, rnr_nak, ack, send, write, ...)",
    &["iface", "dir", "op"],
);

/// Every family of this subject.
pub fn all() -> Vec<Family> {
    vec![
        FRAMES.clone(),
        FRAME_BYTES.clone(),
        ROCE_PACKETS.clone(),
        ROCE_BYTES.clone(),
        ECN_PACKETS.clone(),
        OP_PACKETS.clone(),
    ]
}
