//! Mirror encapsulation and MAC control: [`encapsulate`] wraps a frame the way a switch sends a
//! copy to the observer (ERSPAN I, II, III or GRE TEB, see [`Encap`]); [`pfc_frame`] and
//! [`pause_frame`] build 802.1Qbb PFC and 802.3x PAUSE frames, [`pfc`] and [`link_pause`] describe
//! them for [`Workload::push_pause`](super::Workload::push_pause).

use std::net::Ipv4Addr;

use observer_common::wire;
use observer_common::{Mirror, MirrorKind, Pause};

use super::frame::{host_mac, len16, put_ipv4, put16};

/// A mirror encapsulation: how a switch sends a copy of a frame to the observer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encap {
    /// GRE protocol 0x88BE, no sequence number, no ERSPAN header.
    ErspanI,
    /// GRE 0x88BE with a sequence number and the 8-byte ERSPAN II header.
    ErspanII { session: u16, truncated: bool },
    /// GRE 0x22EB with the 12-byte ERSPAN III header, and the 8-byte platform subheader when
    /// `platform` (O bit).
    ErspanIII {
        session: u16,
        truncated: bool,
        platform: bool,
    },
    /// GRE transparent Ethernet bridging (0x6558), with a GRE key.
    Teb,
}

impl Encap {
    /// The mirror header the observer reads from a copy made this way.
    pub fn mirror(self) -> Mirror {
        let (kind, session, truncated) = match self {
            Encap::ErspanI => (MirrorKind::ErspanI, None, false),
            Encap::ErspanII { session, truncated } => {
                (MirrorKind::ErspanII, Some(session & 0x03FF), truncated)
            }
            Encap::ErspanIII {
                session, truncated, ..
            } => (MirrorKind::ErspanIII, Some(session & 0x03FF), truncated),
            Encap::Teb => (MirrorKind::Teb, None, false),
        };
        Mirror {
            kind,
            session,
            truncated,
        }
    }
}

/// Destination of MAC control frames (802.3 annex 31B): never forwarded by a bridge.
pub const MAC_CONTROL_DST: [u8; 6] = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x01];

/// A MAC control frame from `src` with `opcode` and `body`, padded to the 60-byte minimum.
pub(super) fn mac_control_frame(src: [u8; 6], opcode: u16, body: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(60);
    b.extend_from_slice(&MAC_CONTROL_DST);
    b.extend_from_slice(&src);
    put16(&mut b, wire::ETHERTYPE_MAC_CONTROL);
    put16(&mut b, opcode);
    b.extend_from_slice(body);
    b.resize(b.len().max(60), 0);
    b
}

/// An 802.1Qbb PFC frame from `src`: the class-enable vector and eight pause times in quanta.
pub fn pfc_frame(src: [u8; 6], class_enable: u8, quanta: [u16; 8]) -> Vec<u8> {
    let mut body = vec![0, class_enable];
    for q in quanta {
        body.extend_from_slice(&q.to_be_bytes());
    }
    mac_control_frame(src, wire::MAC_CONTROL_PFC, &body)
}

/// An 802.3x PAUSE frame from `src` asking for `quanta` (0: XON).
pub fn pause_frame(src: [u8; 6], quanta: u16) -> Vec<u8> {
    mac_control_frame(src, wire::MAC_CONTROL_PAUSE, &quanta.to_be_bytes())
}

/// A PFC frame's description for [`Workload::push_pause`](super::Workload::push_pause).
pub fn pfc(src: [u8; 6], class_enable: u8, quanta: [u16; 8]) -> Pause {
    Pause {
        src_mac: src,
        opcode: wire::MAC_CONTROL_PFC,
        class_enable,
        quanta,
    }
}

/// An 802.3x PAUSE frame's description for [`Workload::push_pause`](super::Workload::push_pause).
pub fn link_pause(src: [u8; 6], quanta: u16) -> Pause {
    let mut q = [0; 8];
    q[0] = quanta;
    Pause {
        src_mac: src,
        opcode: wire::MAC_CONTROL_PAUSE,
        class_enable: 0,
        quanta: q,
    }
}

/// Quanta with `q` for priority `p` and 0 elsewhere.
pub fn quanta_at(p: usize, q: u16) -> [u16; 8] {
    let mut a = [0; 8];
    a[p & 7] = q;
    a
}

/// Wraps the Ethernet frame `inner` as a mirror copy: outer Ethernet, IPv4 from the mirror
/// source 198.19.255.1 to the observer 198.19.255.2, GRE and the ERSPAN header.
pub fn encapsulate(inner: &[u8], encap: Encap) -> Vec<u8> {
    let mut gre = Vec::new();
    let session_word = |session: u16, truncated: bool, version: u8| {
        let s = session & 0x03FF;
        [
            version << 4, // VLAN high nibble 0
            0x07,         // VLAN 7
            (3 << 5) | (u8::from(truncated) << 2) | (s >> 8) as u8,
            s as u8,
        ]
    };
    match encap {
        Encap::ErspanI => {
            put16(&mut gre, 0);
            put16(&mut gre, wire::GRE_PROTO_ERSPAN);
        }
        Encap::ErspanII { session, truncated } => {
            put16(&mut gre, wire::GRE_SEQUENCE);
            put16(&mut gre, wire::GRE_PROTO_ERSPAN);
            gre.extend_from_slice(&7u32.to_be_bytes()); // sequence number
            gre.extend_from_slice(&session_word(session, truncated, 1));
            gre.extend_from_slice(&0x0000_0042u32.to_be_bytes()); // index
        }
        Encap::ErspanIII {
            session,
            truncated,
            platform,
        } => {
            put16(&mut gre, wire::GRE_SEQUENCE);
            put16(&mut gre, wire::GRE_PROTO_ERSPAN3);
            gre.extend_from_slice(&9u32.to_be_bytes());
            gre.extend_from_slice(&session_word(session, truncated, 2));
            gre.extend_from_slice(&0x1234_5678u32.to_be_bytes()); // timestamp
            put16(&mut gre, 0); // SGT
            // P 0, frame type 0 (Ethernet), hardware ID 5, D 1, Gra 3, O.
            put16(
                &mut gre,
                (5 << 4) | (1 << 3) | (3 << 1) | u16::from(platform),
            );
            if platform {
                gre.extend_from_slice(&[0x0C, 0, 0, 0, 0, 0, 0, 0x2A]);
            }
        }
        Encap::Teb => {
            put16(&mut gre, wire::GRE_KEY);
            put16(&mut gre, wire::GRE_PROTO_TEB);
            gre.extend_from_slice(&0xBEEFu32.to_be_bytes());
        }
    }
    gre.extend_from_slice(inner);
    let mut b = Vec::new();
    b.extend_from_slice(&host_mac(0x3F2));
    b.extend_from_slice(&host_mac(0x3F1));
    put16(&mut b, wire::ETHERTYPE_IPV4);
    let total = len16(wire::IPV4_MIN_HEADER_LEN + gre.len());
    put_ipv4(
        &mut b,
        wire::IPV4_MIN_HEADER_LEN,
        0,
        total,
        wire::IPPROTO_GRE,
        Ipv4Addr::new(198, 19, 255, 1),
        Ipv4Addr::new(198, 19, 255, 2),
    );
    b.extend_from_slice(&gre);
    b
}
