//! One RoCEv2 frame: [`RoceFrame`] with its IP layer ([`Ip`]) and extension header values
//! ([`Ext`]), the IBTA opcode tables ([`opcode_defined`], [`ext_headers`], [`intended_class`]),
//! and the encoding: header writers, the IPv4 checksum and the RoCEv2 ICRC. Also the address
//! helpers every part of the generator shares ([`host_mac`] and the documentation ranges).

use std::net::{Ipv4Addr, Ipv6Addr};

use observer_common::wire::{self, op};
use observer_common::{Bth, FlowKey, MsgKind, OpClass, VlanTag};

use super::{DATA_DSCP, DEFAULT_PKEY, ECT0, MASK24};

/// The IP layer of a [`RoceFrame`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ip {
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        /// IPv4 options in 4-byte words, 0..=10 (larger values are clamped to 10).
        option_words: u8,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        /// 20 bits.
        flow_label: u32,
    },
}

impl Ip {
    /// IPv4 without options.
    pub fn v4(src: Ipv4Addr, dst: Ipv4Addr) -> Self {
        Self::V4 {
            src,
            dst,
            option_words: 0,
        }
    }

    /// The same addresses with IPv6 flow label `label` (IPv4 unchanged).
    pub fn with_flow_label(self, label: u32) -> Self {
        match self {
            Self::V6 { src, dst, .. } => Self::V6 {
                src,
                dst,
                flow_label: label & 0xF_FFFF,
            },
            v4 => v4,
        }
    }

    /// The opposite direction (options and flow label kept).
    pub fn reversed(self) -> Self {
        match self {
            Self::V4 {
                src,
                dst,
                option_words,
            } => Self::V4 {
                src: dst,
                dst: src,
                option_words,
            },
            Self::V6 {
                src,
                dst,
                flow_label,
            } => Self::V6 {
                src: dst,
                dst: src,
                flow_label,
            },
        }
    }

    fn header_len(&self) -> usize {
        match self {
            Self::V4 { option_words, .. } => {
                wire::IPV4_MIN_HEADER_LEN + 4 * usize::from((*option_words).min(10))
            }
            Self::V6 { .. } => wire::IPV6_HEADER_LEN,
        }
    }

    /// (source, destination), IPv4 v4-mapped.
    pub(super) fn mapped(&self) -> ([u8; 16], [u8; 16]) {
        match self {
            Self::V4 { src, dst, .. } => {
                (src.to_ipv6_mapped().octets(), dst.to_ipv6_mapped().octets())
            }
            Self::V6 { src, dst, .. } => (src.octets(), dst.octets()),
        }
    }
}

/// Values for the extension headers an opcode requires. Only the headers the opcode implies are
/// encoded (see [`ext_headers`]); the other fields are ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ext {
    /// RETH.
    pub dma_len: u32,
    /// RETH and AtomicETH.
    pub va: u64,
    /// RETH, AtomicETH, and IETH (the R_Key to invalidate).
    pub rkey: u32,
    /// AETH.
    pub syndrome: u8,
    /// AETH (24 bits).
    pub msn: u32,
    /// DETH.
    pub qkey: u32,
    /// DETH (24 bits).
    pub src_qp: u32,
    /// ImmDt.
    pub imm: u32,
    /// XRCETH: the XRC SRQ number (24 bits).
    pub xrc_srq: u32,
    /// RDETH: the EE context (24 bits).
    pub ee_ctx: u32,
    /// AtomicETH: swap (CMP_SWAP) or add (FETCH_ADD) data.
    pub swap_add: u64,
    /// AtomicETH: compare data.
    pub compare: u64,
    /// AtomicAckETH: the original remote data.
    pub atomic_orig: u64,
}

/// An extension header after the BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtHeader {
    Rdeth,
    Deth,
    Xrceth,
    Reth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    /// The 16 reserved bytes of a CNP.
    CnpReserved,
}

impl ExtHeader {
    /// Length on the wire in bytes.
    pub const fn wire_len(self) -> usize {
        match self {
            Self::Rdeth => wire::RDETH_LEN,
            Self::Deth => wire::DETH_LEN,
            Self::Xrceth => wire::XRCETH_LEN,
            Self::Reth => wire::RETH_LEN,
            Self::AtomicEth => wire::ATOMIC_ETH_LEN,
            Self::Aeth => wire::AETH_LEN,
            Self::AtomicAckEth => wire::ATOMIC_ACK_ETH_LEN,
            Self::ImmDt => wire::IMMDT_LEN,
            Self::Ieth => wire::IETH_LEN,
            Self::CnpReserved => 16,
        }
    }

    fn encode(self, e: &Ext, out: &mut Vec<u8>) {
        match self {
            Self::Rdeth => put32(out, e.ee_ctx & MASK24),
            Self::Deth => {
                put32(out, e.qkey);
                put32(out, e.src_qp & MASK24);
            }
            Self::Xrceth => put32(out, e.xrc_srq & MASK24),
            Self::Reth => {
                put64(out, e.va);
                put32(out, e.rkey);
                put32(out, e.dma_len);
            }
            Self::AtomicEth => {
                put64(out, e.va);
                put32(out, e.rkey);
                put64(out, e.swap_add);
                put64(out, e.compare);
            }
            Self::Aeth => put32(out, (u32::from(e.syndrome) << 24) | (e.msn & MASK24)),
            Self::AtomicAckEth => put64(out, e.atomic_orig),
            Self::ImmDt => put32(out, e.imm),
            Self::Ieth => put32(out, e.rkey),
            Self::CnpReserved => out.extend_from_slice(&[0; 16]),
        }
    }
}

/// Whether `opcode` is defined for its transport (IBTA vol. 1 table 38 and annex A17: RC and XRC
/// have every operation, UC only SEND and WRITE, RD all but the invalidate sends (plus RESYNC,
/// 0x55), UD only SEND only (-imm); 0x81 is the CNP; 0x80-0x9F otherwise and 0xC0-0xFF are reserved
/// or vendor specific).
pub const fn opcode_defined(opcode: u8) -> bool {
    let low = opcode & 0x1F;
    match opcode & 0xE0 {
        wire::TRANSPORT_RC | wire::TRANSPORT_XRC => {
            low <= op::FETCH_ADD || low == op::SEND_LAST_INV || low == op::SEND_ONLY_INV
        }
        wire::TRANSPORT_UC => low <= op::WRITE_ONLY_IMM,
        wire::TRANSPORT_RD => low <= 0x15,
        wire::TRANSPORT_UD => low == op::SEND_ONLY || low == op::SEND_ONLY_IMM,
        _ => opcode == wire::OPCODE_CNP,
    }
}

const fn is_response(low: u8) -> bool {
    low >= op::READ_RESPONSE_FIRST && low <= op::ATOMIC_ACKNOWLEDGE
}

/// The extension headers after the BTH of `opcode`, in wire order. Reserved and vendor opcodes get
/// only their transport's base headers (none outside RC/UC/RD/UD/XRC).
pub fn ext_headers(opcode: u8) -> Vec<ExtHeader> {
    use ExtHeader::*;
    if opcode == wire::OPCODE_CNP {
        return vec![CnpReserved];
    }
    let low = opcode & 0x1F;
    let mut h = match opcode & 0xE0 {
        // RD: RDETH on every packet, DETH on requests only (responses carry none).
        wire::TRANSPORT_RD if is_response(low) => vec![Rdeth],
        wire::TRANSPORT_RD => vec![Rdeth, Deth],
        wire::TRANSPORT_UD => vec![Deth],
        wire::TRANSPORT_XRC if !is_response(low) => vec![Xrceth],
        _ => Vec::new(),
    };
    if opcode_defined(opcode) {
        let op_specific: &[ExtHeader] = match low {
            op::SEND_LAST_IMM | op::SEND_ONLY_IMM | op::WRITE_LAST_IMM => &[ImmDt],
            op::WRITE_FIRST | op::WRITE_ONLY | op::READ_REQUEST => &[Reth],
            op::WRITE_ONLY_IMM => &[Reth, ImmDt],
            op::READ_RESPONSE_FIRST
            | op::READ_RESPONSE_LAST
            | op::READ_RESPONSE_ONLY
            | op::ACKNOWLEDGE => &[Aeth],
            op::ATOMIC_ACKNOWLEDGE => &[Aeth, AtomicAckEth],
            op::COMPARE_SWAP | op::FETCH_ADD => &[AtomicEth],
            op::SEND_LAST_INV | op::SEND_ONLY_INV => &[Ieth],
            _ => &[],
        };
        h.extend_from_slice(op_specific);
    }
    h
}

/// The message request `f` (cut to `keep` bytes) completes as the generator made it, for a
/// connected transport: a WRITE's FIRST or ONLY and a READ as long as their DMA length (unknown
/// when the RETH is cut off), a SEND ONLY as its payload, a SEND LAST of a size only its FIRST
/// tells (here unknown). `None` for a SEND's FIRST and packets that complete no message.
pub fn intended_message(f: &RoceFrame, keep: usize) -> Option<(MsgKind, Option<u64>)> {
    if !matches!(
        f.bth.opcode & 0xE0,
        wire::TRANSPORT_RC | wire::TRANSPORT_UC | wire::TRANSPORT_XRC
    ) {
        return None;
    }
    let dma = (keep >= f.headers_end()).then_some(u64::from(f.ext.dma_len));
    match f.bth.opcode & 0x1F {
        op::SEND_LAST | op::SEND_LAST_IMM | op::SEND_LAST_INV => Some((MsgKind::Send, None)),
        op::SEND_ONLY | op::SEND_ONLY_IMM | op::SEND_ONLY_INV => {
            Some((MsgKind::Send, Some(f.payload_len as u64)))
        }
        op::WRITE_FIRST | op::WRITE_ONLY | op::WRITE_ONLY_IMM => Some((MsgKind::Write, dma)),
        op::READ_REQUEST => Some((MsgKind::Read, dma)),
        _ => None,
    }
}

/// The operation class the generator means by `opcode` (with the AETH `syndrome` of an
/// ACKNOWLEDGE), from the IBTA opcode tables: opcodes not defined for their transport, reserved
/// syndromes and vendor codes are [`OpClass::Other`].
pub const fn intended_class(opcode: u8, syndrome: u8) -> OpClass {
    if opcode == wire::OPCODE_CNP {
        return OpClass::Cnp;
    }
    if !opcode_defined(opcode) {
        return OpClass::Other;
    }
    match opcode & 0x1F {
        0x00..=0x05 | op::SEND_LAST_INV | op::SEND_ONLY_INV => OpClass::Send,
        0x06..=0x0B => OpClass::Write,
        op::READ_REQUEST => OpClass::ReadRequest,
        0x0D..=0x10 => OpClass::ReadResponse,
        op::ACKNOWLEDGE => match syndrome >> 5 {
            wire::AETH_ACK => OpClass::Ack,
            wire::AETH_RNR_NAK => OpClass::RnrNak,
            wire::AETH_NAK => OpClass::Nak,
            _ => OpClass::Other,
        },
        op::ATOMIC_ACKNOWLEDGE => OpClass::AtomicAck,
        op::COMPARE_SWAP | op::FETCH_ADD => OpClass::Atomic,
        _ => OpClass::Other,
    }
}

/// One RoCEv2 packet, every header field explicit.
#[derive(Clone, Debug)]
pub struct RoceFrame {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// Emitted in order, each with its own TPID (0x88A8 / 0x8100).
    pub vlans: Vec<VlanTag>,
    pub ip: Ip,
    pub dscp: u8,
    /// 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: u8,
    pub udp_src_port: u16,
    /// Normally 4791.
    pub udp_dst_port: u16,
    /// All fields honoured when encoding.
    pub bth: Bth,
    /// Values for the extension headers the opcode requires.
    pub ext: Ext,
    /// Bytes of payload (including pad bytes) after the extension headers, before the ICRC.
    pub payload_len: usize,
    /// The payload's first bytes (a MAD's fields); the rest is a pattern.
    pub payload_head: Vec<u8>,
}

/// Byte offsets of a frame's layers, from the generator's own layout.
#[derive(Clone, Copy, Debug)]
struct Layout {
    l2: usize,
    ip_header: usize,
    ext: usize,
    payload: usize,
}

impl Layout {
    fn udp(&self) -> usize {
        self.l2 + self.ip_header
    }
    fn bth(&self) -> usize {
        self.udp() + wire::UDP_HEADER_LEN
    }
    fn bth_end(&self) -> usize {
        self.bth() + wire::BTH_LEN
    }
    fn ext_end(&self) -> usize {
        self.bth_end() + self.ext
    }
    fn udp_len(&self) -> usize {
        wire::UDP_HEADER_LEN + wire::BTH_LEN + self.ext + self.payload + wire::ICRC_LEN
    }
    fn total(&self) -> usize {
        self.udp() + self.udp_len()
    }
}

impl RoceFrame {
    /// A frame with defaults: MACs 02:00:00:00:00:01 -> 02:00:00:00:00:02, no VLAN, DSCP 26
    /// ECT(0), UDP 0xC000 -> 4791, P_Key 0xFFFF, PSN 0, no payload.
    pub fn new(ip: Ip, opcode: u8, dest_qp: u32) -> Self {
        Self {
            src_mac: host_mac(1),
            dst_mac: host_mac(2),
            vlans: Vec::new(),
            ip,
            dscp: DATA_DSCP,
            ecn: ECT0,
            udp_src_port: 0xC000,
            udp_dst_port: wire::ROCEV2_UDP_PORT,
            bth: Bth {
                opcode,
                pkey: DEFAULT_PKEY,
                dest_qp: dest_qp & MASK24,
                ..Bth::default()
            },
            ext: Ext::default(),
            payload_len: 0,
            payload_head: Vec::new(),
        }
    }

    fn layout(&self) -> Layout {
        Layout {
            l2: wire::ETH_HEADER_LEN + wire::VLAN_TAG_LEN * self.vlans.len(),
            ip_header: self.ip.header_len(),
            ext: ext_headers(self.bth.opcode)
                .iter()
                .map(|h| h.wire_len())
                .sum(),
            payload: self.payload_len,
        }
    }

    /// Offset of the BTH in the frame.
    pub fn bth_offset(&self) -> usize {
        self.layout().bth()
    }

    /// Offset just after the BTH: a copy cut shorter than this is
    /// [`SkipReason::Truncated`](observer_common::SkipReason::Truncated).
    pub fn bth_end(&self) -> usize {
        self.layout().bth_end()
    }

    /// Offset just after the extension headers (where the payload starts).
    pub fn headers_end(&self) -> usize {
        self.layout().ext_end()
    }

    /// Length of the whole frame in bytes.
    pub fn frame_len(&self) -> usize {
        self.layout().total()
    }

    /// IPv4 TOS / IPv6 traffic class.
    pub fn tos(&self) -> u8 {
        (self.dscp << 2) | (self.ecn & 3)
    }

    /// The IP total length (IPv4) or 40 + payload length (IPv6), from the layout.
    pub fn ip_len(&self) -> u32 {
        let l = self.layout();
        (l.ip_header + l.udp_len()) as u32
    }

    /// The observer's flow key of this frame (IPv4 v4-mapped).
    pub fn flow_key(&self) -> FlowKey {
        let (src_ip, dst_ip) = self.ip.mapped();
        FlowKey {
            src_ip,
            dst_ip,
            dest_qp: self.bth.dest_qp & MASK24,
            udp_src_port: self.udp_src_port,
            mirror: 0,
        }
    }

    /// Encodes the frame. Lengths that do not fit their 16-bit fields (payloads near 64 KiB) are
    /// written as 0xFFFF, which makes such a frame inconsistent: keep payloads below the MTU.
    pub fn to_bytes(&self) -> Vec<u8> {
        let l = self.layout();
        let mut b = Vec::with_capacity(l.total());
        b.extend_from_slice(&self.dst_mac);
        b.extend_from_slice(&self.src_mac);
        for t in &self.vlans {
            put16(&mut b, t.tpid);
            let tci = (u16::from(t.pcp & 7) << 13) | (u16::from(t.dei) << 12) | (t.vid & 0x0FFF);
            put16(&mut b, tci);
        }
        let ip_len = len16(self.ip_len() as usize);
        match self.ip {
            Ip::V4 { src, dst, .. } => {
                put16(&mut b, wire::ETHERTYPE_IPV4);
                put_ipv4(
                    &mut b,
                    l.ip_header,
                    self.tos(),
                    ip_len,
                    wire::IPPROTO_UDP,
                    src,
                    dst,
                );
            }
            Ip::V6 {
                src,
                dst,
                flow_label,
            } => {
                put16(&mut b, wire::ETHERTYPE_IPV6);
                let payload = len16(l.udp_len());
                put_ipv6(
                    &mut b,
                    self.tos(),
                    flow_label,
                    payload,
                    wire::IPPROTO_UDP,
                    src,
                    dst,
                );
            }
        }
        put16(&mut b, self.udp_src_port);
        put16(&mut b, self.udp_dst_port);
        put16(&mut b, len16(l.udp_len()));
        put16(&mut b, 0);
        put_bth(&mut b, &self.bth);
        for h in ext_headers(self.bth.opcode) {
            h.encode(&self.ext, &mut b);
        }
        b.extend(
            (0..self.payload_len).map(|i| match self.payload_head.get(i) {
                Some(v) => *v,
                None => (i as u8).wrapping_mul(31).wrapping_add(7),
            }),
        );
        let icrc = icrc(&b, &l, matches!(self.ip, Ip::V6 { .. }));
        b.extend_from_slice(&icrc.to_le_bytes());
        b
    }
}

pub(super) fn put16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_be_bytes());
}

pub(super) fn put32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put24(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&(v & MASK24).to_be_bytes()[1..]);
}

pub(super) fn len16(len: usize) -> u16 {
    u16::try_from(len).unwrap_or(u16::MAX)
}

fn put_bth(b: &mut Vec<u8>, t: &Bth) {
    b.push(t.opcode);
    b.push(
        (u8::from(t.solicited) << 7)
            | (u8::from(t.mig_req) << 6)
            | ((t.pad_count & 3) << 4)
            | (t.tver & 0x0F),
    );
    put16(b, t.pkey);
    b.push((u8::from(t.fecn) << 7) | (u8::from(t.becn) << 6));
    put24(b, t.dest_qp);
    b.push(u8::from(t.ack_req) << 7);
    put24(b, t.psn);
}

/// An IPv4 header of `header_len` bytes (options NOP..., EOL) with a valid checksum, DF set.
pub(super) fn put_ipv4(
    b: &mut Vec<u8>,
    header_len: usize,
    tos: u8,
    total_len: u16,
    proto: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
) {
    let start = b.len();
    b.push(0x40 | (header_len / 4) as u8);
    b.push(tos);
    put16(b, total_len);
    put16(b, 0); // identification
    put16(b, 0x4000); // DF
    b.push(64); // TTL
    b.push(proto);
    put16(b, 0);
    b.extend_from_slice(&src.octets());
    b.extend_from_slice(&dst.octets());
    let options = header_len - wire::IPV4_MIN_HEADER_LEN;
    b.extend((0..options).map(|i| if i + 1 == options { 0 } else { 1 }));
    refresh_ipv4_checksum(&mut b[start..]);
}

pub(super) fn put_ipv6(
    b: &mut Vec<u8>,
    tclass: u8,
    flow_label: u32,
    payload_len: u16,
    next: u8,
    src: Ipv6Addr,
    dst: Ipv6Addr,
) {
    put32(
        b,
        (6 << 28) | (u32::from(tclass) << 20) | (flow_label & 0x000F_FFFF),
    );
    put16(b, payload_len);
    b.push(next);
    b.push(64); // hop limit
    b.extend_from_slice(&src.octets());
    b.extend_from_slice(&dst.octets());
}

/// Recomputes the checksum of the IPv4 header at the start of `ip` (IHL below 5 treated as 5).
pub(super) fn refresh_ipv4_checksum(ip: &mut [u8]) {
    let len = (usize::from(ip[0] & 0x0F) * 4).clamp(wire::IPV4_MIN_HEADER_LEN, ip.len());
    ip[10] = 0;
    ip[11] = 0;
    let mut sum: u32 = ip[..len]
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

const CRC32_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// The reflected CRC-32 (IEEE 802.3) register update, without pre/post inversion.
fn crc32_update(mut crc: u32, data: &[u8]) -> u32 {
    for &byte in data {
        crc = CRC32_TABLE[((crc ^ u32::from(byte)) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc
}

/// RoCEv2 ICRC (IBTA annex A17.3.3, as Linux rxe_icrc.c computes it): CRC-32 over 8 bytes of 1s
/// (the masked LRH), the IP header with TOS/traffic class, flow label, TTL/hop limit and checksum
/// set to 1s, the UDP header with its checksum set to 1s, the BTH with byte 4 (FECN, BECN,
/// reserved) set to 1s, and everything after the BTH up to the ICRC. Stored little-endian.
fn icrc(frame: &[u8], l: &Layout, ipv6: bool) -> u32 {
    let mut masked = frame[l.l2..l.bth_end()].to_vec();
    if ipv6 {
        masked[0] |= 0x0F;
        masked[1..4].fill(0xFF);
        masked[7] = 0xFF;
    } else {
        masked[1] = 0xFF;
        masked[8] = 0xFF;
        masked[10..12].fill(0xFF);
    }
    let udp = l.ip_header;
    masked[udp + 6..udp + 8].fill(0xFF);
    masked[udp + wire::UDP_HEADER_LEN + 4] = 0xFF;
    let crc = crc32_update(!0, &[0xFF; 8]);
    let crc = crc32_update(crc, &masked);
    !crc32_update(crc, &frame[l.bth_end()..])
}

/// A locally administered unicast MAC 02:00:00:00:hi:lo.
pub fn host_mac(id: u16) -> [u8; 6] {
    let [hi, lo] = id.to_be_bytes();
    [0x02, 0, 0, 0, hi, lo]
}

pub(super) fn v4(c: u8, d: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, c, d)
}

pub(super) fn v6(host: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, host)
}

pub(super) fn tag(tpid: u16, vid: u16) -> VlanTag {
    VlanTag {
        tpid,
        pcp: 3,
        dei: false,
        vid,
    }
}

/// One frame of `opcode` with plausible header values.
pub(super) fn opcode_frame(opcode: u8, syndrome: u8, dest_qp: u32) -> RoceFrame {
    let mut f = RoceFrame::new(Ip::v4(v4(2, 1), v4(2, 2)), opcode, dest_qp);
    f.src_mac = host_mac(0x201);
    f.dst_mac = host_mac(0x202);
    f.udp_src_port = 0xE000 | (dest_qp & 0xFFF) as u16;
    f.bth.psn = 0x1234;
    f.ext = Ext {
        dma_len: 64,
        va: 0x7F00_1000,
        rkey: 0x77,
        syndrome,
        msn: 9,
        qkey: 0x8000_0001,
        src_qp: 0x33,
        imm: 0x1234_5678,
        xrc_srq: 0x99,
        ee_ctx: 0x5,
        swap_add: 1,
        compare: 2,
        atomic_orig: 3,
    };
    let class = intended_class(opcode, syndrome);
    let carries_payload = matches!(
        class,
        OpClass::Send | OpClass::Write | OpClass::ReadResponse | OpClass::Other
    ) && opcode != wire::OPCODE_CNP;
    f.payload_len = if carries_payload { 64 } else { 0 };
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::synth::SYNDROME_ACK;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    /// Representative frames: every opcode over IPv4, IPv4 with options and IPv6, with 0-2 tags.
    fn sample_frames() -> Vec<RoceFrame> {
        let ips = [
            Ip::v4(v4(9, 1), v4(9, 2)),
            Ip::V4 {
                src: v4(9, 1),
                dst: v4(9, 2),
                option_words: 3,
            },
            Ip::V6 {
                src: v6(1),
                dst: v6(2),
                flow_label: 0xABCDE,
            },
        ];
        let tags = [
            vec![],
            vec![tag(wire::ETHERTYPE_VLAN, 4094)],
            vec![tag(wire::ETHERTYPE_QINQ, 1), tag(wire::ETHERTYPE_VLAN, 2)],
        ];
        let mut out = Vec::new();
        for opcode in 0..=255u8 {
            for ip in ips {
                for vlans in &tags {
                    let mut f = opcode_frame(opcode, SYNDROME_ACK, 0xABCDEF);
                    f.ip = ip;
                    f.vlans = vlans.clone();
                    f.bth.solicited = true;
                    f.bth.pad_count = 2;
                    f.bth.fecn = opcode % 2 == 0;
                    f.bth.ack_req = true;
                    f.bth.psn = 0xFEDCBA;
                    out.push(f);
                }
            }
        }
        out
    }

    #[test]
    fn frames_are_well_formed() {
        for f in sample_frames() {
            let bytes = f.to_bytes();
            let what = format!(
                "opcode {:#x} {:?} {} tags",
                f.bth.opcode,
                f.ip,
                f.vlans.len()
            );
            assert_eq!(bytes.len(), f.frame_len(), "{what}");
            let l2 = 14 + 4 * f.vlans.len();
            assert_eq!(bytes.len() - l2, f.ip_len() as usize, "{what}");
            let p = SlicedPacket::from_ethernet(&bytes).expect(&what);
            assert_eq!(p.link_exts.len(), f.vlans.len(), "{what}");
            let ip_header_len = match p.net {
                Some(NetSlice::Ipv4(ip)) => {
                    let h = ip.header();
                    assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
                    assert_eq!(u32::from(h.total_len()), f.ip_len(), "{what}");
                    assert_eq!(h.dcp(), f.dscp.try_into().unwrap());
                    usize::from(h.ihl()) * 4
                }
                Some(NetSlice::Ipv6(ip)) => {
                    let h = ip.header();
                    assert_eq!(40 + u32::from(h.payload_length()), f.ip_len(), "{what}");
                    assert_eq!(h.flow_label().value(), 0xABCDE);
                    40
                }
                other => panic!("{what}: {other:?}"),
            };
            let Some(TransportSlice::Udp(udp)) = p.transport else {
                panic!("{what}: not UDP");
            };
            assert_eq!(udp.destination_port(), 4791);
            assert_eq!(
                usize::from(udp.length()),
                f.ip_len() as usize - ip_header_len
            );
            assert_eq!(udp.checksum(), 0);
            let o = f.bth_offset();
            let bth: [u8; 12] = bytes[o..o + 12].try_into().unwrap();
            assert_eq!(Bth::from_bytes(bth), f.bth, "{what}");
            assert_eq!(
                bytes.len() - f.headers_end() - wire::ICRC_LEN,
                f.payload_len,
                "{what}"
            );
        }
    }

    #[test]
    fn extension_header_lengths_follow_the_ibta_tables() {
        let cases: &[(u8, usize)] = &[
            (0x04, 0),  // RC SEND only
            (0x05, 4),  // RC SEND only imm: ImmDt
            (0x06, 16), // RC WRITE first: RETH
            (0x0B, 20), // RC WRITE only imm: RETH + ImmDt
            (0x0C, 16), // RC READ request
            (0x0E, 0),  // RC READ response middle
            (0x10, 4),  // RC READ response only: AETH
            (0x11, 4),  // RC ACK
            (0x12, 12), // RC ATOMIC ACK: AETH + AtomicAckETH
            (0x13, 28), // RC CMP_SWAP: AtomicETH
            (0x17, 4),  // RC SEND only inv: IETH
            (0x15, 0),  // RC reserved
            (0x2A, 16), // UC WRITE only
            (0x44, 12), // RD SEND only: RDETH + DETH
            (0x46, 28), // RD WRITE first: RDETH + DETH + RETH
            (0x51, 8),  // RD ACK: RDETH + AETH
            (0x52, 16), // RD ATOMIC ACK: RDETH + AETH + AtomicAckETH
            (0x54, 40), // RD FETCH_ADD: RDETH + DETH + AtomicETH
            (0x64, 8),  // UD SEND only: DETH
            (0x65, 12), // UD SEND only imm: DETH + ImmDt
            (0xA4, 4),  // XRC SEND only: XRCETH
            (0xAB, 24), // XRC WRITE only imm: XRCETH + RETH + ImmDt
            (0xB1, 4),  // XRC ACK: AETH, no XRCETH
            (0x81, 16), // CNP
            (0x80, 0),  // reserved
            (0xC6, 0),  // vendor
        ];
        for &(opcode, len) in cases {
            let f = RoceFrame::new(Ip::v4(v4(9, 1), v4(9, 2)), opcode, 1);
            assert_eq!(f.headers_end() - f.bth_end(), len, "opcode {opcode:#x}");
        }
        let cnp = RoceFrame::new(Ip::v4(v4(9, 1), v4(9, 2)), wire::OPCODE_CNP, 1);
        assert_eq!(cnp.ip_len(), 20 + 8 + 32, "CNP UDP payload is 32 bytes");
    }

    #[test]
    fn crc32_matches_the_standard_and_rxe_seed() {
        assert_eq!(!crc32_update(!0, b"123456789"), 0xCBF4_3926);
        // rxe_icrc.c starts from 0xdebb20e3, "a CRC with a seed of 0xffffffff and 8 bytes of
        // 0xff representing a masked LRH".
        assert_eq!(crc32_update(!0, &[0xFF; 8]), 0xDEBB_20E3);
    }

    #[test]
    fn icrc_matches_a_connectx4_capture() {
        // A CNP captured on a ConnectX-4 Lx (published with scapy's RoCE tests): IPv4,
        // TOS 0xC2, UDP source port 0, ICRC 82 fd 00 2a.
        let hex = "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161\
                   0a0011010a0012010000 12b700280000 8100ffff400001180000 0000\
                   00000000000000000000000000000000 82fd002a";
        let hex: String = hex.chars().filter(|c| !c.is_whitespace()).collect();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(bytes.len(), 74);
        let layout = Layout {
            l2: 14,
            ip_header: 20,
            ext: 16,
            payload: 0,
        };
        let crc = icrc(&bytes[..70], &layout, false);
        assert_eq!(crc.to_le_bytes(), [0x82, 0xFD, 0x00, 0x2A]);

        // The same packet from the encoder.
        let mut f = RoceFrame::new(
            Ip::v4(Ipv4Addr::new(10, 0, 17, 1), Ipv4Addr::new(10, 0, 18, 1)),
            wire::OPCODE_CNP,
            0x0118,
        );
        f.dst_mac = bytes[0..6].try_into().unwrap();
        f.src_mac = bytes[6..12].try_into().unwrap();
        f.dscp = 0xC2 >> 2;
        f.ecn = 2;
        f.udp_src_port = 0;
        f.bth.becn = true;
        let mut ours = f.to_bytes();
        // Identification differs (0 here); TTL and the checksum are masked in the ICRC anyway.
        ours[18..20].copy_from_slice(&bytes[18..20]);
        refresh_ipv4_checksum(&mut ours[14..]);
        let n = ours.len();
        let crc = icrc(&ours[..n - 4], &layout, false);
        ours[n - 4..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(ours, bytes);
    }
}
