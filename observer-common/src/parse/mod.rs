//! The one RoCEv2 parser: Ethernet, up to two VLAN tags, IPv4/IPv6, UDP 4791, BTH and the
//! extended transport headers the observer needs (RETH, AETH, DETH).
//!
//! It reads through [`Bytes`], implemented for `[u8]` here and for XDP context memory in the
//! kernel crate, so both compute the same answer from the same code. Every frame that is not a
//! parseable RoCEv2 packet gets a [`SkipReason`].
//!
//! One file per layer: [`ethernet`] (VLAN tags, PAUSE / PFC), [`mirror`] (GRE and ERSPAN),
//! [`headers`] (the BTH and the extended transport headers as parsed), [`opcode`] (the table of
//! operations every opcode decision reads); this file holds the entry points and the walk from
//! IP to the extended headers.

use core::mem::size_of;

use crate::wire;

mod ethernet;
mod headers;
mod mirror;
mod opcode;

pub use ethernet::{Pause, VlanTag, read_pause};
use ethernet::{is_vlan, mac_control, vlan_tag};
pub use headers::{Aeth, Bth, RocePacket};
use mirror::decapsulate;
pub use mirror::{Mirror, MirrorKind};
pub use opcode::{
    AETH_OPS, BOUNDARY_OPS, FULL_OPS, Header, IMM_OPS, NO_AETH, OPERATIONS, OpClass, OpSet,
    Operation, Place, REQUEST_END_OPS, RESPONSE_OPS, RESPONSE_START_OPS, RETH_OPS, SEND_LAST_OPS,
    SEND_ONLY_OPS, SEND_OPS, Transport, classify, classify_raw, in_set,
};

/// Plain old data that may be read from any byte offset: integers and byte arrays.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` bytes must be a valid value.
pub unsafe trait Plain: Copy {}
unsafe impl Plain for u8 {}
unsafe impl Plain for u16 {}
unsafe impl Plain for u32 {}
unsafe impl Plain for u64 {}
unsafe impl<const N: usize> Plain for [u8; N] {}

/// Bounds-checked, unaligned reads of packet memory.
pub trait Bytes {
    /// Reads a `T` at byte offset `off`, or `None` when the packet ends first.
    fn load<T: Plain>(&self, off: usize) -> Option<T>;
}

impl Bytes for [u8] {
    #[inline(always)]
    fn load<T: Plain>(&self, off: usize) -> Option<T> {
        let end = off.checked_add(size_of::<T>())?;
        let bytes = self.get(off..end)?;
        // SAFETY: `bytes` holds exactly size_of::<T>() bytes and T is Plain.
        Some(unsafe { core::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
    }
}

#[inline(always)]
pub(super) fn be16<B: Bytes + ?Sized>(b: &B, off: usize) -> Option<u16> {
    b.load::<[u8; 2]>(off).map(u16::from_be_bytes)
}

#[inline(always)]
pub(super) fn be32<B: Bytes + ?Sized>(b: &B, off: usize) -> Option<u32> {
    b.load::<[u8; 4]>(off).map(u32::from_be_bytes)
}

/// Why a frame was not accounted as RoCEv2. The discriminant indexes [`crate::Counters::skipped`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SkipReason {
    /// EtherType is neither IPv4 nor IPv6 (ARP, LLDP, ...) nor MAC control.
    NotIp = 0,
    /// IP, but the payload is not UDP.
    NotUdp = 1,
    /// UDP, but the destination port is not 4791.
    OtherPort = 2,
    /// An IPv4 fragment or an IPv6 fragment header (RoCE never fragments).
    IpFragment = 3,
    /// The frame ends before the BTH is complete.
    Truncated = 4,
    /// IPv4 IHL below 5, or an IP/UDP length too small for UDP plus a BTH.
    BadHeaderLength = 5,
    /// The IP version nibble disagrees with the EtherType.
    BadIpVersion = 6,
    /// More than two VLAN tags.
    TooManyVlanTags = 7,
    /// GRE that is not a mirror copy this observer decapsulates: another protocol, a version
    /// other than 0, source routing, an ERSPAN header of an unknown version, or GRE inside a
    /// mirror copy.
    GreUnsupported = 8,
    /// An ERSPAN type III copy whose frame type is not Ethernet.
    MirrorNotEthernet = 9,
    /// An untagged MAC control frame (EtherType 0x8808): 802.3x PAUSE and 802.1Qbb PFC,
    /// accounted per source MAC and priority in the pause table, or another MAC control opcode.
    /// (MAC control is never VLAN-tagged: a tagged one is `NotIp`.)
    MacControl = 10,
}

impl SkipReason {
    pub const COUNT: usize = 11;
    pub const ALL: [SkipReason; Self::COUNT] = [
        Self::NotIp,
        Self::NotUdp,
        Self::OtherPort,
        Self::IpFragment,
        Self::Truncated,
        Self::BadHeaderLength,
        Self::BadIpVersion,
        Self::TooManyVlanTags,
        Self::GreUnsupported,
        Self::MirrorNotEthernet,
        Self::MacControl,
    ];

    /// The name used in reports (`totals.skipped`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::NotIp => "not_ip",
            Self::NotUdp => "not_udp",
            Self::OtherPort => "other_port",
            Self::IpFragment => "ip_fragment",
            Self::Truncated => "truncated",
            Self::BadHeaderLength => "bad_header_length",
            Self::BadIpVersion => "bad_ip_version",
            Self::TooManyVlanTags => "too_many_vlan_tags",
            Self::GreUnsupported => "gre_unsupported",
            Self::MirrorNotEthernet => "mirror_not_ethernet",
            Self::MacControl => "mac_control",
        }
    }
}

/// A parsed frame: the RoCE packet or why not, and the mirror header it came in, if any (also
/// for copies whose inner frame is not RoCE, which mirror sessions count), and the PAUSE / PFC
/// frame it is (then `result` is `Err(MacControl)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub result: Result<RocePacket, SkipReason>,
    pub mirror: Option<Mirror>,
    /// A PAUSE / PFC frame: the offset of its Ethernet header (the inner frame of a mirror
    /// copy); [`NO_PAUSE`] otherwise. Read it with [`Parsed::pause`]. An offset, not the frame's
    /// values: a larger `Parsed` made LLVM compute on a register holding a packet pointer (an
    /// undefined payload), which the BPF verifier rejects; and pause frames are rare.
    pub pause_at: u32,
}

/// [`Parsed::pause_at`] of a frame that is no PAUSE / PFC frame.
pub const NO_PAUSE: u32 = u32::MAX;

impl Parsed {
    /// The PAUSE / PFC frame this is (`b`: the frame that was parsed), if it is one.
    #[inline(always)]
    pub fn pause<B: Bytes + ?Sized>(&self, b: &B) -> Option<Pause> {
        if self.pause_at == NO_PAUSE {
            return None;
        }
        let p = read_pause(b, self.pause_at as usize);
        if p.opcode != 0 { Some(p) } else { None }
    }
}

/// Parses one Ethernet frame.
#[inline(always)]
pub fn parse<B: Bytes + ?Sized>(b: &B) -> Result<RocePacket, SkipReason> {
    parse_frame(b).result
}

/// Parses one Ethernet frame, keeping the mirror header of decapsulated copies.
#[inline(always)]
pub fn parse_frame<B: Bytes + ?Sized>(b: &B) -> Parsed {
    match be16(b, 12) {
        Some(ethertype) => {
            // MAC control is classified after the common parse (which calls it not_ip), not in
            // a match arm of its own: an arm there cost the RoCE path ~10 ns in the kernel
            // (LLVM spilled more registers across the whole inlined parser).
            let mut parsed = parse_frame_from(b, ethertype, wire::ETH_HEADER_LEN);
            if ethertype == wire::ETHERTYPE_MAC_CONTROL {
                let (reason, pause_at) = mac_control(b, 0);
                parsed.result = Err(reason);
                parsed.pause_at = pause_at;
            }
            parsed
        }
        None => Parsed {
            result: Err(SkipReason::Truncated),
            mirror: None,
            pause_at: NO_PAUSE,
        },
    }
}

/// Parses what follows a link-layer header whose EtherType / protocol field was `ethertype`,
/// starting at byte `off` (VLAN tags, IP, GRE/ERSPAN, UDP, BTH). Ethernet is `parse`; capture
/// link types without an Ethernet header (Linux cooked SLL/SLL2, raw IP) enter here.
#[inline(always)]
pub fn parse_from<B: Bytes + ?Sized>(
    b: &B,
    ethertype: u16,
    off: usize,
) -> Result<RocePacket, SkipReason> {
    parse_frame_from(b, ethertype, off).result
}

/// `parse_from`, keeping the mirror header of decapsulated copies.
#[inline(always)]
pub fn parse_frame_from<B: Bytes + ?Sized>(b: &B, ethertype: u16, off: usize) -> Parsed {
    match parse_l3::<B, true>(b, ethertype, off) {
        L3::Done(result) => Parsed {
            result,
            mirror: None,
            pause_at: NO_PAUSE,
        },
        L3::Gre(gre) => decapsulate(b, gre),
    }
}

pub(super) enum L3 {
    Done(Result<RocePacket, SkipReason>),
    /// GRE at this offset (only when decapsulating).
    Gre(usize),
}

/// VLAN tags, IP, UDP, BTH and the extended headers; with `DECAP`, GRE is handed back to be
/// decapsulated (once: the inner frame is parsed with `DECAP` false).
#[inline(always)]
pub(super) fn parse_l3<B: Bytes + ?Sized, const DECAP: bool>(
    b: &B,
    ethertype: u16,
    off: usize,
) -> L3 {
    L3::Done(match parse_l3_inner::<B, DECAP>(b, ethertype, off) {
        Ok(Ok(p)) => Ok(p),
        Ok(Err(gre)) => return L3::Gre(gre),
        Err(reason) => Err(reason),
    })
}

/// `Ok(Ok(packet))`, `Ok(Err(gre offset))` to decapsulate, or `Err(reason)`.
#[inline(always)]
fn parse_l3_inner<B: Bytes + ?Sized, const DECAP: bool>(
    b: &B,
    ethertype: u16,
    off: usize,
) -> Result<Result<RocePacket, usize>, SkipReason> {
    use SkipReason::*;
    let mut p = RocePacket::default();

    // Up to two VLAN tags, unrolled for the verifier.
    let mut off = off;
    let mut ethertype = ethertype;
    if is_vlan(ethertype) {
        let tci = be16(b, off).ok_or(Truncated)?;
        p.vlans[0] = vlan_tag(ethertype, tci);
        p.vlan_count = 1;
        ethertype = be16(b, off + 2).ok_or(Truncated)?;
        off += wire::VLAN_TAG_LEN;
        if is_vlan(ethertype) {
            let tci = be16(b, off).ok_or(Truncated)?;
            p.vlans[1] = vlan_tag(ethertype, tci);
            p.vlan_count = 2;
            ethertype = be16(b, off + 2).ok_or(Truncated)?;
            off += wire::VLAN_TAG_LEN;
            if is_vlan(ethertype) {
                return Err(TooManyVlanTags);
            }
        }
    }

    // IP.
    let l4 = if ethertype == wire::ETHERTYPE_IPV4 {
        // Two bytes, not one: for a one-byte load LLVM turns the bounds check into `at >= end`,
        // from which the verifier proves no readable byte at a variable offset (after GRE).
        let vhl = b.load::<[u8; 2]>(off).ok_or(Truncated)?[0];
        if vhl >> 4 != 4 {
            return Err(BadIpVersion);
        }
        let header_len = ((vhl & 0x0F) as usize) * 4;
        if header_len < wire::IPV4_MIN_HEADER_LEN {
            return Err(BadHeaderLength);
        }
        let fixed = b.load::<[u8; 20]>(off).ok_or(Truncated)?;
        let total_len = u16::from_be_bytes([fixed[2], fixed[3]]) as usize;
        let frag = u16::from_be_bytes([fixed[6], fixed[7]]);
        if frag & (wire::IPV4_MORE_FRAGMENTS | wire::IPV4_FRAGMENT_OFFSET_MASK) != 0 {
            return Err(IpFragment);
        }
        if fixed[9] == wire::IPPROTO_GRE {
            // GRE inside a mirror copy is not decapsulated again.
            return if DECAP {
                Ok(Err(off + header_len))
            } else {
                Err(GreUnsupported)
            };
        }
        if fixed[9] != wire::IPPROTO_UDP {
            return Err(NotUdp);
        }
        if total_len < header_len + wire::UDP_HEADER_LEN + wire::BTH_LEN {
            return Err(BadHeaderLength);
        }
        p.tos = fixed[1];
        p.ip_len = total_len as u32;
        p.src_ip[10] = 0xFF;
        p.src_ip[11] = 0xFF;
        p.src_ip[12..16].copy_from_slice(&fixed[12..16]);
        p.dst_ip[10] = 0xFF;
        p.dst_ip[11] = 0xFF;
        p.dst_ip[12..16].copy_from_slice(&fixed[16..20]);
        off + header_len
    } else if ethertype == wire::ETHERTYPE_IPV6 {
        let head = b.load::<[u8; 8]>(off).ok_or(Truncated)?;
        if head[0] >> 4 != 6 {
            return Err(BadIpVersion);
        }
        let payload_len = u16::from_be_bytes([head[4], head[5]]) as usize;
        let next = head[6];
        if next == wire::IPV6_NEXT_FRAGMENT {
            return Err(IpFragment);
        }
        if next == wire::IPPROTO_GRE {
            return if DECAP {
                Ok(Err(off + wire::IPV6_HEADER_LEN))
            } else {
                Err(GreUnsupported)
            };
        }
        if next != wire::IPPROTO_UDP {
            return Err(NotUdp);
        }
        if payload_len < wire::UDP_HEADER_LEN + wire::BTH_LEN {
            return Err(BadHeaderLength);
        }
        p.is_ipv6 = true;
        p.tos = (head[0] << 4) | (head[1] >> 4);
        p.ip_len = (wire::IPV6_HEADER_LEN + payload_len) as u32;
        p.src_ip = b.load::<[u8; 16]>(off + 8).ok_or(Truncated)?;
        p.dst_ip = b.load::<[u8; 16]>(off + 24).ok_or(Truncated)?;
        off + wire::IPV6_HEADER_LEN
    } else {
        return Err(NotIp);
    };

    // UDP.
    let udp = b.load::<[u8; 8]>(l4).ok_or(Truncated)?;
    if u16::from_be_bytes([udp[2], udp[3]]) != wire::ROCEV2_UDP_PORT {
        return Err(OtherPort);
    }
    p.udp_src_port = u16::from_be_bytes([udp[0], udp[1]]);
    p.udp_len = u16::from_be_bytes([udp[4], udp[5]]);
    if (p.udp_len as usize) < wire::UDP_HEADER_LEN + wire::BTH_LEN {
        return Err(BadHeaderLength);
    }

    // BTH: required. What follows is optional (mirrors truncate copies).
    let bth_off = l4 + wire::UDP_HEADER_LEN;
    p.bth = Bth::from_bytes(b.load::<[u8; wire::BTH_LEN]>(bth_off).ok_or(Truncated)?);
    let opcode = p.bth.opcode;
    let low = opcode & 0x1F;
    let mut ext = bth_off + wire::BTH_LEN;
    let mut syndrome = NO_AETH;

    // Responses (READ response .. ATOMIC ACKNOWLEDGE) carry no DETH (RD) and no XRCETH (XRC).
    let is_response = in_set(RESPONSE_OPS, low);
    let transport = p.bth.transport();
    if transport == Transport::Rd {
        ext += wire::RDETH_LEN;
    }
    if transport == Transport::Ud || (transport == Transport::Rd && !is_response) {
        if let Some(deth) = b.load::<[u8; wire::DETH_LEN]>(ext) {
            p.deth_qkey = Some(u32::from_be_bytes([deth[0], deth[1], deth[2], deth[3]]));
            p.deth_src_qp = Some(u32::from_be_bytes([0, deth[5], deth[6], deth[7]]));
        }
        ext += wire::DETH_LEN;
    }
    if transport == Transport::Xrc && !is_response {
        ext += wire::XRCETH_LEN;
    }

    // Headers by operation code alone: a code a transport reserves (classed Other) still has
    // its row's header read, e.g. the RETH of a UC READ request.
    if !matches!(transport, Transport::Cnp | Transport::Vendor) {
        if in_set(RETH_OPS, low) {
            if let Some(len) = be32(b, ext + 12) {
                p.reth_len = len;
                p.has_reth = true;
            }
        } else if in_set(AETH_OPS, low)
            && let Some(aeth) = b.load::<[u8; wire::AETH_LEN]>(ext)
        {
            syndrome = u16::from(aeth[0]);
            p.aeth = Some(Aeth {
                syndrome: aeth[0],
                msn: u32::from_be_bytes([0, aeth[1], aeth[2], aeth[3]]),
            });
        }
    }
    p.aeth_syndrome = syndrome;
    Ok(Ok(p))
}
