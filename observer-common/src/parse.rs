//! The one RoCEv2 parser: Ethernet, up to two VLAN tags, IPv4/IPv6, UDP 4791, BTH and the
//! extended transport headers the observer needs (RETH, AETH, DETH).
//!
//! It reads through [`Bytes`], implemented for `[u8]` here and for XDP context memory in the
//! kernel crate, so both compute the same answer from the same code. Every frame that is not a
//! parseable RoCEv2 packet gets a [`SkipReason`].

use core::mem::size_of;

use crate::wire::{self, op};

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
fn be16<B: Bytes + ?Sized>(b: &B, off: usize) -> Option<u16> {
    b.load::<[u8; 2]>(off).map(u16::from_be_bytes)
}

#[inline(always)]
fn be32<B: Bytes + ?Sized>(b: &B, off: usize) -> Option<u32> {
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

/// Transport service, from the top 3 bits of the opcode.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    Rc = 0,
    Uc = 1,
    Rd = 2,
    Ud = 3,
    /// 0x80-0x9F: the RoCEv2 CNP (0x81) and reserved codes.
    Cnp = 4,
    Xrc = 5,
    /// 0xC0-0xFF: manufacturer specific.
    Vendor = 6,
}

impl Transport {
    #[inline(always)]
    pub const fn of(opcode: u8) -> Self {
        match opcode >> 5 {
            0 => Self::Rc,
            1 => Self::Uc,
            2 => Self::Rd,
            3 => Self::Ud,
            4 => Self::Cnp,
            5 => Self::Xrc,
            _ => Self::Vendor,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::Rc => "RC",
            Self::Uc => "UC",
            Self::Rd => "RD",
            Self::Ud => "UD",
            Self::Cnp => "CNP",
            Self::Xrc => "XRC",
            Self::Vendor => "vendor",
        }
    }
}

/// What a packet does; the discriminant indexes [`crate::FlowStats::ops`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpClass {
    Send = 0,
    Write = 1,
    ReadRequest = 2,
    ReadResponse = 3,
    Ack = 4,
    Nak = 5,
    RnrNak = 6,
    Atomic = 7,
    AtomicAck = 8,
    Cnp = 9,
    Other = 10,
}

impl OpClass {
    pub const COUNT: usize = 11;
    pub const ALL: [OpClass; Self::COUNT] = [
        Self::Send,
        Self::Write,
        Self::ReadRequest,
        Self::ReadResponse,
        Self::Ack,
        Self::Nak,
        Self::RnrNak,
        Self::Atomic,
        Self::AtomicAck,
        Self::Cnp,
        Self::Other,
    ];

    /// The name used in reports (`flows[].ops`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Write => "write",
            Self::ReadRequest => "read_request",
            Self::ReadResponse => "read_response",
            Self::Ack => "ack",
            Self::Nak => "nak",
            Self::RnrNak => "rnr_nak",
            Self::Atomic => "atomic",
            Self::AtomicAck => "atomic_ack",
            Self::Cnp => "cnp",
            Self::Other => "other",
        }
    }

    /// Requests consume request PSNs in order; only these feed PSN continuity.
    #[inline(always)]
    pub const fn is_request(self) -> bool {
        matches!(
            self,
            Self::Send | Self::Write | Self::ReadRequest | Self::Atomic
        )
    }
}

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

/// Base Transport Header, every field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bth {
    pub opcode: u8,
    pub solicited: bool,
    pub mig_req: bool,
    pub pad_count: u8,
    pub tver: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    /// 24 bits.
    pub dest_qp: u32,
    pub ack_req: bool,
    /// 24 bits.
    pub psn: u32,
}

impl Bth {
    #[inline(always)]
    pub fn from_bytes(b: [u8; wire::BTH_LEN]) -> Self {
        Self {
            opcode: b[0],
            solicited: b[1] & 0x80 != 0,
            mig_req: b[1] & 0x40 != 0,
            pad_count: (b[1] >> 4) & 0x3,
            tver: b[1] & 0x0F,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: u32::from_be_bytes([0, b[5], b[6], b[7]]),
            ack_req: b[8] & 0x80 != 0,
            psn: u32::from_be_bytes([0, b[9], b[10], b[11]]),
        }
    }

    #[inline(always)]
    pub const fn transport(&self) -> Transport {
        Transport::of(self.opcode)
    }
}

/// ACK extended transport header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: u8,
    /// 24 bits.
    pub msn: u32,
}

/// A parsed RoCEv2 packet. Optional headers are `None` when the opcode has none or when a
/// mirror truncated the copy before them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RocePacket {
    /// IPv4 addresses are stored v4-mapped (`::ffff:a.b.c.d`).
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    pub is_ipv6: bool,
    /// Bytes from the IP header on, from the IP length fields (not the captured length).
    pub ip_len: u32,
    /// IPv4 TOS or IPv6 traffic class: DSCP in the top 6 bits, ECN in the low 2.
    pub tos: u8,
    pub vlan_count: u8,
    pub vlans: [VlanTag; wire::MAX_VLAN_TAGS],
    pub udp_src_port: u16,
    pub udp_len: u16,
    pub bth: Bth,
    /// The RETH DMA length (READ request, WRITE first / only) when `has_reth`, else 0; read it
    /// with [`RocePacket::reth_dma_len`]. Plain values, not an `Option<u32>`: PSN tracking in
    /// the kernel computes with it, and LLVM filled the undefined payload of a `None` from
    /// whatever register was at hand, a packet pointer included, whose masking the BPF
    /// verifier rejects.
    pub reth_len: u32,
    pub has_reth: bool,
    pub aeth: Option<Aeth>,
    /// DETH (UD and RD): Q_Key and source QP.
    pub deth_qkey: Option<u32>,
    pub deth_src_qp: Option<u32>,
    /// Set when the packet was decapsulated from a mirror copy (GRE / ERSPAN); the fields above
    /// describe the inner packet.
    pub mirror: Option<Mirror>,
    /// The AETH syndrome as a plain value, [`NO_AETH`] when there is none (the parser always
    /// sets it; `aeth` holds the same when present). Classification reads this, not the
    /// `Option`: an `Option`'s undefined payload lets LLVM compute on a register that may hold
    /// a packet pointer, which the BPF verifier rejects.
    pub aeth_syndrome: u16,
}

impl RocePacket {
    #[inline(always)]
    pub const fn ecn(&self) -> u8 {
        self.tos & 0x3
    }

    #[inline(always)]
    pub const fn dscp(&self) -> u8 {
        self.tos >> 2
    }

    /// The operation class of this packet.
    #[inline(always)]
    pub fn op_class(&self) -> OpClass {
        classify_raw(self.bth.opcode, self.aeth_syndrome)
    }

    /// The RETH DMA length, if the packet has a RETH (and a mirror did not cut it off).
    #[inline(always)]
    pub const fn reth_dma_len(&self) -> Option<u32> {
        if self.has_reth {
            Some(self.reth_len)
        } else {
            None
        }
    }

    /// Sets (or clears) the RETH DMA length.
    pub fn set_reth(&mut self, len: Option<u32>) {
        self.has_reth = len.is_some();
        self.reth_len = len.unwrap_or(0);
    }
}

/// `classify_raw`'s syndrome for "no AETH".
pub const NO_AETH: u16 = 0x100;

/// Classifies an opcode (with the AETH syndrome for ACKNOWLEDGE packets).
#[inline(always)]
pub fn classify(opcode: u8, aeth_syndrome: Option<u8>) -> OpClass {
    classify_raw(opcode, aeth_syndrome.map_or(NO_AETH, u16::from))
}

/// `classify` with the syndrome as a plain value ([`NO_AETH`] when absent).
#[inline(always)]
pub fn classify_raw(opcode: u8, aeth_syndrome: u16) -> OpClass {
    let aeth_syndrome = if aeth_syndrome == NO_AETH {
        None
    } else {
        Some(aeth_syndrome as u8)
    };
    if opcode == wire::OPCODE_CNP {
        return OpClass::Cnp;
    }
    let low = opcode & 0x1F;
    // Each transport defines a subset of the operations (IBTA 9.2); the rest are reserved.
    let defined = match Transport::of(opcode) {
        Transport::Rc | Transport::Xrc => true,
        Transport::Uc => low <= op::WRITE_ONLY_IMM,
        Transport::Rd => low <= op::FETCH_ADD,
        Transport::Ud => low == op::SEND_ONLY || low == op::SEND_ONLY_IMM,
        Transport::Cnp | Transport::Vendor => false,
    };
    if !defined {
        return OpClass::Other;
    }
    match low {
        op::SEND_FIRST..=op::SEND_ONLY_IMM | op::SEND_LAST_INV | op::SEND_ONLY_INV => OpClass::Send,
        op::WRITE_FIRST..=op::WRITE_ONLY_IMM => OpClass::Write,
        op::READ_REQUEST => OpClass::ReadRequest,
        op::READ_RESPONSE_FIRST..=op::READ_RESPONSE_ONLY => OpClass::ReadResponse,
        op::ACKNOWLEDGE => match aeth_syndrome.map(|s| s >> 5) {
            // An ACKNOWLEDGE cut before its AETH still is an acknowledgement.
            None | Some(wire::AETH_ACK) => OpClass::Ack,
            Some(wire::AETH_RNR_NAK) => OpClass::RnrNak,
            Some(wire::AETH_NAK) => OpClass::Nak,
            Some(_) => OpClass::Other,
        },
        op::ATOMIC_ACKNOWLEDGE => OpClass::AtomicAck,
        op::COMPARE_SWAP | op::FETCH_ADD => OpClass::Atomic,
        _ => OpClass::Other,
    }
}

#[inline(always)]
const fn is_vlan(ethertype: u16) -> bool {
    ethertype == wire::ETHERTYPE_VLAN || ethertype == wire::ETHERTYPE_QINQ
}

#[inline(always)]
fn vlan_tag(tpid: u16, tci: u16) -> VlanTag {
    VlanTag {
        tpid,
        pcp: (tci >> 13) as u8,
        dei: tci & 0x1000 != 0,
        vid: tci & 0x0FFF,
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

/// Bytes of a PFC frame from its EtherType on: EtherType, opcode, class-enable vector and eight
/// times.
const PFC_LEN: usize = 22;
/// Bytes of an 802.3x PAUSE frame from its EtherType on: EtherType, opcode, time.
const PAUSE_LEN: usize = 6;

/// The MAC control frame whose Ethernet header starts at `eth`: `MacControl`, and `eth` when it
/// is a PAUSE / PFC frame ([`NO_PAUSE`] for other opcodes); or `Truncated` when cut in its
/// opcode or times (padding is not needed: a frame seen before the NIC pads it still counts).
#[inline(always)]
fn mac_control<B: Bytes + ?Sized>(b: &B, eth: usize) -> (SkipReason, u32) {
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

enum L3 {
    Done(Result<RocePacket, SkipReason>),
    /// GRE at this offset (only when decapsulating).
    Gre(usize),
}

/// Decapsulates one level of GRE (ERSPAN I/II/III, transparent Ethernet bridging) starting at
/// the GRE header, and parses the inner Ethernet frame without decapsulating again.
#[inline(always)]
fn decapsulate<B: Bytes + ?Sized>(b: &B, gre: usize) -> Parsed {
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

/// VLAN tags, IP, UDP, BTH and the extended headers; with `DECAP`, GRE is handed back to be
/// decapsulated (once: the inner frame is parsed with `DECAP` false).
#[inline(always)]
fn parse_l3<B: Bytes + ?Sized, const DECAP: bool>(b: &B, ethertype: u16, off: usize) -> L3 {
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
    let is_response = (op::READ_RESPONSE_FIRST..=op::ATOMIC_ACKNOWLEDGE).contains(&low);
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

    match transport {
        Transport::Cnp | Transport::Vendor => {}
        _ => match low {
            op::WRITE_FIRST | op::WRITE_ONLY | op::WRITE_ONLY_IMM | op::READ_REQUEST => {
                if let Some(len) = be32(b, ext + 12) {
                    p.reth_len = len;
                    p.has_reth = true;
                }
            }
            op::READ_RESPONSE_FIRST
            | op::READ_RESPONSE_LAST
            | op::READ_RESPONSE_ONLY
            | op::ACKNOWLEDGE
            | op::ATOMIC_ACKNOWLEDGE => {
                if let Some(aeth) = b.load::<[u8; wire::AETH_LEN]>(ext) {
                    syndrome = u16::from(aeth[0]);
                    p.aeth = Some(Aeth {
                        syndrome: aeth[0],
                        msn: u32::from_be_bytes([0, aeth[1], aeth[2], aeth[3]]),
                    });
                }
            }
            _ => {}
        },
    }
    p.aeth_syndrome = syndrome;
    Ok(Ok(p))
}
