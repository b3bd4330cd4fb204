//! PAUSE / PFC frames on the wire, per sender and class.

#[allow(unused_imports)]
use super::{Family, Kind, Unit};

pub static FRAMES: Family = Family::new(
    "roce_pfc_frames",
    Kind::Counter,
    None,
    "PAUSE / PFC frames seen on the wire per sender MAC and class: a PFC frame counts on each priority its class-enable vector names, an 802.3x PAUSE frame on priority=\"link\"; XON frames included (dir: rx ingress, tx host mode's egress; mirror: as the per-QP series; src_mac=\"other\": the senders beyond the first 64)",
    &["src_mac", "priority", "dir", "mirror"],
);

pub static XON_FRAMES: Family = Family::new(
    "roce_pfc_xon_frames",
    Kind::Counter,
    None,
    "Of roce_pfc_frames_total, the XON frames (pause time 0: resume)",
    &["src_mac", "priority", "dir", "mirror"],
);

pub static PAUSE_QUANTA: Family = Family::new(
    "roce_pfc_pause_quanta",
    Kind::Counter,
    None,
    "Pause times the frames asked for, summed, in quanta of 512 bit times",
    &["src_mac", "priority", "dir", "mirror"],
);

pub static PAUSE: Family = Family::new(
    "roce_pfc_pause",
    Kind::Counter,
    Some(Unit::Seconds),
    "Pause time the frames asked for at the observed interfaces' link speed (host mode, or a captured netdev, when the interfaces report one speed): an upper bound of the time paused, as a refresh before a pause runs out overlaps it",
    &["src_mac", "priority", "dir", "mirror"],
);

/// Every family of this subject.
pub fn all() -> Vec<Family> {
    vec![
        FRAMES.clone(),
        XON_FRAMES.clone(),
        PAUSE_QUANTA.clone(),
        PAUSE.clone(),
    ]
}
