//! The link layer around IP: VLAN tags (802.1Q, 802.1ad) and MAC control frames (802.3x PAUSE,
//! 802.1Qbb PFC).

use super::{Bytes, NO_PAUSE, SkipReason};
use crate::wire;

/// An 802.3x PAUSE or 802.1Qbb PFC frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pause {
    /// The sender: the port of the device asking its peer to pause.
    pub src_mac: [u8; 6],
    /// `MAC_CONTROL_PFC` (0x0101) or `MAC_CONTROL_PAUSE` (0x0001).
    pub opcode: u16,
    /// PFC: the class-enable vector, bit p set when priority p's time is valid. PAUSE: 0.
    pub class_enable: u8,
    /// PFC: the pause time of each priority, in quanta of 512 bit times (0 is XON, resume).
    /// PAUSE: the one pause time in `quanta[0]`.
    pub quanta: [u16; wire::PFC_PRIORITIES],
}

impl Pause {
    /// An 802.1Qbb PFC frame (else 802.3x PAUSE).
    #[inline(always)]
    pub const fn is_pfc(&self) -> bool {
        self.opcode == wire::MAC_CONTROL_PFC
    }
}

/// A VLAN tag (802.1Q or 802.1ad).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VlanTag {
    pub tpid: u16,
    /// 802.1p priority (3 bits).
    pub pcp: u8,
    pub dei: bool,
    pub vid: u16,
}

#[inline(always)]
pub(super) const fn is_vlan(ethertype: u16) -> bool {
    ethertype == wire::ETHERTYPE_VLAN || ethertype == wire::ETHERTYPE_QINQ
}

#[inline(always)]
pub(super) fn vlan_tag(tpid: u16, tci: u16) -> VlanTag {
    VlanTag {
        tpid,
        pcp: (tci >> 13) as u8,
        dei: tci & 0x1000 != 0,
        vid: tci & 0x0FFF,
    }
}

/// Bytes of a PFC frame from its EtherType on: EtherType, opcode, class-enable vector and eight
/// times.
const PFC_LEN: usize = 22;
/// Bytes of an 802.3x PAUSE frame from its EtherType on: EtherType, opcode, time.
const PAUSE_LEN: usize = 6;

/// The MAC control frame whose Ethernet header starts at `eth`: `MacControl`, and `eth` when it
/// is a PAUSE / PFC frame ([`NO_PAUSE`] for other opcodes); or `Truncated` when cut in its
/// opcode or times (padding is not needed: a frame seen before the NIC pads it still counts).
#[inline(always)]
pub(super) fn mac_control<B: Bytes + ?Sized>(b: &B, eth: usize) -> (SkipReason, u32) {
    let Some(h) = b.load::<[u8; PAUSE_LEN]>(eth + 12) else {
        return (SkipReason::Truncated, NO_PAUSE);
    };
    match u16::from_be_bytes([h[2], h[3]]) {
        wire::MAC_CONTROL_PAUSE => (SkipReason::MacControl, eth as u32),
        wire::MAC_CONTROL_PFC => match b.load::<[u8; PFC_LEN]>(eth + 12) {
            Some(_) => (SkipReason::MacControl, eth as u32),
            None => (SkipReason::Truncated, NO_PAUSE),
        },
        _ => (SkipReason::MacControl, NO_PAUSE),
    }
}

/// The PAUSE / PFC frame whose Ethernet header starts at `eth` (opcode 0 when it is none).
#[inline(always)]
pub fn read_pause<B: Bytes + ?Sized>(b: &B, eth: usize) -> Pause {
    // Ethernet headers start at 0 or inside the first few hundred bytes (a mirror copy's inner
    // frame). The mask tells the BPF verifier so: LLVM may compute the packet address before
    // the caller's `pause_at != NO_PAUSE` test, and a pointer plus an unbounded scalar is
    // rejected.
    let eth = eth & 0x3FF;
    let mut pause = Pause::default();
    let (Some(src_mac), Some(h)) = (
        b.load::<[u8; 6]>(eth + 6),
        b.load::<[u8; PAUSE_LEN]>(eth + 12),
    ) else {
        return pause;
    };
    if u16::from_be_bytes([h[0], h[1]]) != wire::ETHERTYPE_MAC_CONTROL {
        return pause;
    }
    let opcode = u16::from_be_bytes([h[2], h[3]]);
    pause.src_mac = src_mac;
    if opcode == wire::MAC_CONTROL_PAUSE {
        pause.opcode = opcode;
        pause.quanta[0] = u16::from_be_bytes([h[4], h[5]]);
    } else if opcode == wire::MAC_CONTROL_PFC {
        let Some(h) = b.load::<[u8; PFC_LEN]>(eth + 12) else {
            return pause;
        };
        pause.opcode = opcode;
        // The vector is 16 bits; 802.1Qbb uses the low 8 (the high octet is reserved).
        pause.class_enable = h[5];
        let mut p = 0;
        while p < wire::PFC_PRIORITIES {
            pause.quanta[p] = u16::from_be_bytes([h[6 + 2 * p], h[7 + 2 * p]]);
            p += 1;
        }
    }
    pause
}
