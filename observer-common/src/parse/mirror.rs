//! Mirror copies: GRE, ERSPAN I/II/III and transparent Ethernet bridging, decapsulated once.

use super::{Bytes, L3, NO_PAUSE, Parsed, SkipReason, be16, mac_control, parse_l3};
use crate::wire;

/// How a mirror copy was encapsulated.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MirrorKind {
    #[default]
    ErspanI = 1,
    ErspanII = 2,
    ErspanIII = 3,
    /// GRE transparent Ethernet bridging.
    Teb = 4,
}

impl MirrorKind {
    pub const fn name(self) -> &'static str {
        match self {
            Self::ErspanI => "erspan1",
            Self::ErspanII => "erspan2",
            Self::ErspanIII => "erspan3",
            Self::Teb => "gre_teb",
        }
    }
}

/// The GRE / ERSPAN header a frame was decapsulated from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mirror {
    pub kind: MirrorKind,
    /// ERSPAN II and III: the 10-bit session ID.
    pub session: Option<u16>,
    /// The ERSPAN truncated bit: the mirror cut the copy.
    pub truncated: bool,
}

/// Decapsulates one level of GRE (ERSPAN I/II/III, transparent Ethernet bridging) starting at
/// the GRE header, and parses the inner Ethernet frame without decapsulating again.
#[inline(always)]
pub(super) fn decapsulate<B: Bytes + ?Sized>(b: &B, gre: usize) -> Parsed {
    // Plain matches, no Result combinators: LLVM outlines their closures into BPF subprograms,
    // where the verifier loses the packet bounds.
    let (mirror, inner) = gre_mirror(b, gre);
    let mut pause_at = NO_PAUSE;
    let result = match inner {
        Err(reason) => Err(reason),
        Ok(inner) => match be16(b, inner + 12) {
            None => Err(SkipReason::Truncated),
            Some(ethertype) => {
                let result = match parse_l3::<B, false>(b, ethertype, inner + wire::ETH_HEADER_LEN)
                {
                    L3::Done(Ok(mut p)) => {
                        p.mirror = mirror;
                        Ok(p)
                    }
                    L3::Done(Err(reason)) => Err(reason),
                    L3::Gre(_) => Err(SkipReason::GreUnsupported),
                };
                // A mirror that copies MAC control frames: PFC seen on the mirrored link
                // (classified after the common parse, as in `parse_frame`).
                if ethertype == wire::ETHERTYPE_MAC_CONTROL {
                    let (reason, at) = mac_control(b, inner);
                    pause_at = at;
                    Err(reason)
                } else {
                    result
                }
            }
        },
    };
    Parsed {
        result,
        mirror,
        pause_at,
    }
}

/// The GRE and ERSPAN headers: the mirror description (once the headers say it is a mirror
/// copy) and the inner Ethernet frame's offset, or why there is none to parse.
#[inline(always)]
fn gre_mirror<B: Bytes + ?Sized>(b: &B, gre: usize) -> (Option<Mirror>, Result<usize, SkipReason>) {
    use SkipReason::*;
    let Some(h) = b.load::<[u8; wire::GRE_HEADER_LEN]>(gre) else {
        return (None, Err(Truncated));
    };
    let flags = u16::from_be_bytes([h[0], h[1]]);
    let proto = u16::from_be_bytes([h[2], h[3]]);
    if flags & (wire::GRE_ROUTING | wire::GRE_VERSION_MASK) != 0 {
        return (None, Err(GreUnsupported));
    }
    let word = |bit: u16| if flags & bit != 0 { 4 } else { 0 };
    let off = gre
        + wire::GRE_HEADER_LEN
        + word(wire::GRE_CHECKSUM)
        + word(wire::GRE_KEY)
        + word(wire::GRE_SEQUENCE);
    let plain = |kind| {
        Some(Mirror {
            kind,
            session: None,
            truncated: false,
        })
    };
    // ERSPAN II and III share the layout of their first word: version (4 bits), VLAN (12),
    // COS (3), encapsulation / BSO (2), truncated (1), session ID (10).
    let sessioned = |kind, e: [u8; 4]| Mirror {
        kind,
        session: Some((u16::from(e[2] & 0x03) << 8) | u16::from(e[3])),
        truncated: e[2] & 0x04 != 0,
    };
    match proto {
        wire::GRE_PROTO_ERSPAN if flags & wire::GRE_SEQUENCE != 0 => {
            match b.load::<[u8; wire::ERSPAN2_HEADER_LEN]>(off) {
                None => (None, Err(Truncated)),
                Some(e) if e[0] >> 4 != 1 => (None, Err(GreUnsupported)),
                Some(e) => (
                    Some(sessioned(MirrorKind::ErspanII, [e[0], e[1], e[2], e[3]])),
                    Ok(off + wire::ERSPAN2_HEADER_LEN),
                ),
            }
        }
        wire::GRE_PROTO_ERSPAN => (plain(MirrorKind::ErspanI), Ok(off)),
        wire::GRE_PROTO_ERSPAN3 => match b.load::<[u8; wire::ERSPAN3_HEADER_LEN]>(off) {
            None => (None, Err(Truncated)),
            Some(e) if e[0] >> 4 != 2 => (None, Err(GreUnsupported)),
            Some(e) => {
                let m = sessioned(MirrorKind::ErspanIII, [e[0], e[1], e[2], e[3]]);
                // Last 16 bits: P (1), frame type (5), hardware ID (6), D (1), Gra (2), O (1).
                let w = u16::from_be_bytes([e[10], e[11]]);
                if (w >> 10) & 0x1F != 0 {
                    return (Some(m), Err(MirrorNotEthernet));
                }
                let platform = if w & 1 != 0 {
                    wire::ERSPAN3_PLATFORM_LEN
                } else {
                    0
                };
                (Some(m), Ok(off + wire::ERSPAN3_HEADER_LEN + platform))
            }
        },
        wire::GRE_PROTO_TEB => (plain(MirrorKind::Teb), Ok(off)),
        _ => (None, Err(GreUnsupported)),
    }
}
