//! Synthetic RoCEv2 traffic with independent ground truth.
//!
//! [`RoceFrame`] encodes one RoCEv2 packet (Ethernet, VLAN tags, IPv4/IPv6, UDP, BTH, the extension
//! headers its opcode implies, payload and the real ICRC). [`QpStream`] emits the correctly
//! sequenced requests of one queue pair and the responder's answers, and injects loss and
//! go-back-N retransmission. [`Workload`] collects frames together with the [`Truth`] the observer
//! must report for them. The truth is derived from what the generator meant to build (the operation
//! class it chose, the PSN events it injected, the reason it broke a frame), never by parsing its own
//! output: tests compare the kernel program and the parser against it.
//!
//! [`scenario`] builds the named workloads of [`SCENARIOS`]; [`send`] transmits frames on an
//! interface and [`write_pcap`] writes them to a capture file.
//!
//! All addresses are documentation/benchmark ranges (198.18.0.0/15, 2001:db8::/32); all MACs are
//! locally administered unicast (02:...).

use std::collections::{BTreeMap, VecDeque};
use std::ffi::CString;
use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use observer_common::wire::{self, op};
use observer_common::{
    Bth, Counters, FlowKey, FlowStats, LINK_PAUSE, Mirror, MirrorKind, OpClass, Pause, PauseKey,
    PauseStats, SkipReason, VlanTag, mirror_key,
};

const MASK24: u32 = wire::PSN_MASK;
/// AETH syndrome of a plain ACK with an unlimited credit count.
pub const SYNDROME_ACK: u8 = 0x1F;
/// AETH syndrome of a NAK "PSN sequence error" (the PSN names the expected PSN).
pub const SYNDROME_NAK_SEQ: u8 = wire::NAK_PSN_SEQUENCE_ERROR;
/// AETH syndrome of an RNR NAK (timer code 14).
pub const SYNDROME_RNR_NAK: u8 = 0x20 | 14;
/// DSCP and ECN of data traffic in the scenarios (priority 3, ECT(0)).
pub const DATA_DSCP: u8 = 26;
pub const ECT0: u8 = 2;
pub const ECT1: u8 = 1;
pub const NOT_ECT: u8 = 0;
pub const CE: u8 = 3;
/// DSCP of CNPs (priority 6).
pub const CNP_DSCP: u8 = 48;
/// P_Key of the default partition.
pub const DEFAULT_PKEY: u16 = 0xFFFF;
/// Path MTU of the scenarios' queue pairs.
pub const SCENARIO_PMTU: u32 = 1024;
/// Capture timestamp of a workload's first frame (2025-06-15) and the spacing of its frames.
pub const BASE_TS_NS: u64 = 1_750_000_000_000_000_000;
pub const FRAME_GAP_NS: u64 = 1_000;
/// [`send`] pauses [`SEND_PAUSE`] after every [`SEND_BATCH`] frames so that a veth peer's
/// 256-entry XDP ring never overflows.
pub const SEND_BATCH: usize = 64;
pub const SEND_PAUSE: Duration = Duration::from_micros(500);

/// Errors of [`send`] and [`write_pcap`].
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("no network interface named {0:?}")]
    UnknownInterface(String),
    #[error("sending raw frames on {0:?} needs CAP_NET_RAW (run as root or grant the capability)")]
    NeedsCapNetRaw(String),
    #[error("{what} for interface {iface:?} failed")]
    Socket {
        iface: String,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("sending frame {index} ({len} bytes) on {iface:?} failed")]
    Send {
        iface: String,
        index: usize,
        len: usize,
        #[source]
        source: io::Error,
    },
    #[error("frame {index}: only {sent} of {len} bytes were sent on {iface:?}")]
    ShortSend {
        iface: String,
        index: usize,
        len: usize,
        sent: usize,
    },
    #[error("frame {index} is too long for a pcap record ({len} bytes)")]
    FrameTooLong { index: usize, len: usize },
    #[error("writing the pcap failed")]
    Pcap(#[from] pcap_file::PcapError),
    #[error("writing the pcap failed")]
    Io(#[from] io::Error),
}

// ---------------------------------------------------------------------------------------------
// One RoCEv2 frame.
// ---------------------------------------------------------------------------------------------

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
    fn mapped(&self) -> ([u8; 16], [u8; 16]) {
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

    /// Offset just after the BTH: a copy cut shorter than this is [`SkipReason::Truncated`].
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
        b.extend((0..self.payload_len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)));
        let icrc = icrc(&b, &l, matches!(self.ip, Ip::V6 { .. }));
        b.extend_from_slice(&icrc.to_le_bytes());
        b
    }
}

fn put16(b: &mut Vec<u8>, v: u16) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_be_bytes());
}

fn put24(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&(v & MASK24).to_be_bytes()[1..]);
}

fn len16(len: usize) -> u16 {
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
fn put_ipv4(
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

fn put_ipv6(
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
fn refresh_ipv4_checksum(ip: &mut [u8]) {
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

// The drivers' source-port rule lives with the ECMP analysis; the generator uses it.
pub use crate::analysis::ecmp::{flow_label_to_udp_sport, rdma_udp_sport};

/// A locally administered unicast MAC 02:00:00:00:hi:lo.
pub fn host_mac(id: u16) -> [u8; 6] {
    let [hi, lo] = id.to_be_bytes();
    [0x02, 0, 0, 0, hi, lo]
}

// ---------------------------------------------------------------------------------------------
// Workload and truth.
// ---------------------------------------------------------------------------------------------

/// Frames plus independent ground truth.
#[derive(Clone, Debug, Default)]
pub struct Workload {
    pub frames: Vec<Frame>,
    pub truth: Truth,
    /// Spacing of the frames' timestamps; 0 means [`FRAME_GAP_NS`].
    frame_gap_ns: u64,
}

/// One frame and its capture timestamp (strictly increasing within a workload).
#[derive(Clone, Debug)]
pub struct Frame {
    pub bytes: Vec<u8>,
    pub ts_ns: u64,
}

/// What the observer must report. In `flows`, `first_seen_ns`, `last_seen_ns`, `psn_next_lo`,
/// `psn_next_hi` and `psn_valid` are left 0; `counters.flow_insert_failures` is 0. In `pauses`,
/// `first_seen_ns` and `last_seen_ns` are left 0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Truth {
    pub flows: BTreeMap<FlowKey, FlowStats>,
    pub pauses: BTreeMap<PauseKey, PauseStats>,
    pub counters: Counters,
}

/// What a request packet does to its flow's PSN continuity, as the generator injected it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PsnEvent {
    /// In sequence, not a tracked request, or the flow's first request.
    #[default]
    None,
    /// A forward jump: `missing` PSNs beyond the expected range never arrived.
    Gap { missing: u32 },
    /// A backward step (retransmission or duplicate).
    Regression,
}

impl Workload {
    /// Appends a RoCE frame and accounts it with `class` (no PSN event).
    pub fn push_roce(&mut self, frame: &RoceFrame, class: OpClass) {
        self.push_roce_psn(frame, class, PsnEvent::None);
    }

    /// Appends a RoCE frame and accounts it with `class` and the PSN `event` it causes.
    pub fn push_roce_psn(&mut self, frame: &RoceFrame, class: OpClass, event: PsnEvent) {
        self.account_roce(frame, class, event);
        self.push_frame(frame.to_bytes());
    }

    /// Appends the first `keep` bytes of `frame`, like a mirror that truncates copies. Cut before
    /// the end of the BTH it is skipped as [`SkipReason::Truncated`]; otherwise it is a RoCE packet
    /// with its full IP length, `class` (the class of the whole frame; an ACKNOWLEDGE cut inside its
    /// AETH counts as [`OpClass::Ack`], its syndrome being invisible) and `event`.
    pub fn push_cut(&mut self, frame: &RoceFrame, class: OpClass, event: PsnEvent, keep: usize) {
        let mut bytes = frame.to_bytes();
        bytes.truncate(keep);
        if keep < frame.bth_end() {
            self.push_noise(bytes, SkipReason::Truncated);
            return;
        }
        let aeth_cut = frame.bth.opcode & 0x1F == op::ACKNOWLEDGE
            && ext_headers(frame.bth.opcode).contains(&ExtHeader::Aeth)
            && keep < frame.headers_end();
        let class = if aeth_cut { OpClass::Ack } else { class };
        self.account_roce(frame, class, event);
        self.push_frame(bytes);
    }

    /// Appends a frame the observer must skip for `reason`.
    pub fn push_noise(&mut self, bytes: Vec<u8>, reason: SkipReason) {
        self.truth.counters.frames += 1;
        self.truth.counters.skipped[reason as usize] += 1;
        self.push_frame(bytes);
    }

    /// A mirror copy (ERSPAN session `session`, or none for ERSPAN I / GRE TEB) whose inner
    /// frame is skipped for `reason`.
    pub fn push_mirror_noise(&mut self, bytes: Vec<u8>, reason: SkipReason, session: Option<u16>) {
        match session {
            Some(id) => self.truth.counters.mirror_sessions[usize::from(id & 0x03FF)] += 1,
            None => self.truth.counters.mirror_sessionless += 1,
        }
        self.push_noise(bytes, reason);
    }

    /// Appends a PAUSE / PFC frame, as a mirror copy through `encap` when given, and accounts
    /// it: per enabled priority (PFC) or as 802.3x PAUSE, a frame, its quanta, XON when 0.
    pub fn push_pause(&mut self, pause: &Pause, encap: Option<Encap>) {
        let frame = if pause.is_pfc() {
            pfc_frame(pause.src_mac, pause.class_enable, pause.quanta)
        } else {
            pause_frame(pause.src_mac, pause.quanta[0])
        };
        let mirror = encap.map(Encap::mirror);
        let key = PauseKey {
            src_mac: pause.src_mac,
            mirror: mirror.as_ref().map_or(0, mirror_key),
        };
        let s = self.truth.pauses.entry(key).or_default();
        let mut count = |class: usize, quanta: u16| {
            s.frames[class] += 1;
            s.quanta[class] += u64::from(quanta);
            s.xon[class] += u64::from(quanta == 0);
        };
        if pause.is_pfc() {
            s.pfc_frames += 1;
            for (p, &quanta) in pause.quanta.iter().enumerate() {
                if pause.class_enable & (1 << p) != 0 {
                    count(p, quanta);
                }
            }
        } else {
            count(LINK_PAUSE, pause.quanta[0]);
        }
        match encap {
            None => self.push_noise(frame, SkipReason::MacControl),
            Some(e) => {
                let m = e.mirror();
                self.truth.counters.mirror_truncated += u64::from(m.truncated);
                self.push_mirror_noise(encapsulate(&frame, e), SkipReason::MacControl, m.session);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Spaces the timestamps of the frames appended from now on `gap_ns` apart (at least 1 ns;
    /// the default is [`FRAME_GAP_NS`]).
    pub fn set_frame_gap(&mut self, gap_ns: u64) {
        self.frame_gap_ns = gap_ns.max(1);
    }

    /// The capture timestamp the next appended frame gets.
    pub fn next_ts(&self) -> u64 {
        let gap = match self.frame_gap_ns {
            0 => FRAME_GAP_NS,
            gap => gap,
        };
        self.frames.last().map_or(BASE_TS_NS, |f| f.ts_ns + gap)
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    fn push_frame(&mut self, bytes: Vec<u8>) {
        let ts_ns = self.next_ts();
        self.frames.push(Frame { bytes, ts_ns });
    }

    fn account_roce(&mut self, frame: &RoceFrame, class: OpClass, event: PsnEvent) {
        let ip_len = u64::from(frame.ip_len());
        let ecn = frame.ecn & 3;
        let f = self.truth.flows.entry(frame.flow_key()).or_default();
        f.packets += 1;
        f.bytes += ip_len;
        f.ecn[usize::from(ecn)] += 1;
        f.ops[class as usize] += 1;
        f.dscp_mask |= 1 << (frame.dscp & 63);
        if class == OpClass::Cnp {
            f.cnp_dscp_mask |= 1 << (frame.dscp & 63);
        }
        f.pcp_mask |= match frame.vlans.first() {
            Some(tag) => 1 << (tag.pcp & 7),
            None => observer_common::UNTAGGED,
        };
        match event {
            PsnEvent::None => {}
            PsnEvent::Gap { missing } => {
                f.psn_gaps += 1;
                f.psn_missing += u64::from(missing);
            }
            PsnEvent::Regression => f.psn_regressions += 1,
        }
        let c = &mut self.truth.counters;
        c.frames += 1;
        c.roce_packets += 1;
        c.roce_bytes += ip_len;
        c.ce_packets += u64::from(ecn == CE);
        c.cnp_packets += u64::from(class == OpClass::Cnp);
    }
}

// ---------------------------------------------------------------------------------------------
// Queue pair streams.
// ---------------------------------------------------------------------------------------------

/// PSNs a READ of `len` bytes consumes at path MTU `pmtu`: ceil(len / pmtu), at least 1.
fn read_psns(len: u32, pmtu: u32) -> u32 {
    len.div_ceil(pmtu.max(1)).max(1)
}

/// (a - b) mod 2^24.
fn psn_sub(a: u32, b: u32) -> u32 {
    a.wrapping_sub(b) & MASK24
}

/// Opcodes (low 5 bits) of the packets of a multi-packet message.
#[derive(Clone, Copy)]
struct Segments {
    first: u8,
    middle: u8,
    last: u8,
    only: u8,
}

const WRITE: Segments = Segments {
    first: op::WRITE_FIRST,
    middle: op::WRITE_MIDDLE,
    last: op::WRITE_LAST,
    only: op::WRITE_ONLY,
};
const WRITE_IMM: Segments = Segments {
    last: op::WRITE_LAST_IMM,
    only: op::WRITE_ONLY_IMM,
    ..WRITE
};
const SEND: Segments = Segments {
    first: op::SEND_FIRST,
    middle: op::SEND_MIDDLE,
    last: op::SEND_LAST,
    only: op::SEND_ONLY,
};
const SEND_IMM: Segments = Segments {
    last: op::SEND_LAST_IMM,
    only: op::SEND_ONLY_IMM,
    ..SEND
};
const SEND_INV: Segments = Segments {
    last: op::SEND_LAST_INV,
    only: op::SEND_ONLY_INV,
    ..SEND
};
const READ_RESPONSE: Segments = Segments {
    first: op::READ_RESPONSE_FIRST,
    middle: op::READ_RESPONSE_MIDDLE,
    last: op::READ_RESPONSE_LAST,
    only: op::READ_RESPONSE_ONLY,
};

/// Requests kept for go-back-N retransmission.
const HISTORY: usize = 4096;

/// One RC/UC/XRC queue pair: emits correctly sequenced request packets (requester to responder) and
/// the responder's ACKs, NAKs, READ responses and CNPs, and lets a scenario inject loss (a gap of n
/// PSNs) and go-back-N retransmission, recording those events into the truth as it injects them.
///
/// The PSN events follow the observer's rules (rocev2-wire.md): requests of RC/UC/XRC only; a READ
/// of L bytes makes the next request PSN acceptable anywhere in [psn + ceil(L/4096),
/// psn + ceil(L/256)] (the stream itself advances by ceil(L/pmtu)); beyond that a jump is one gap,
/// missing = the distance past the end of that range; a backward step is one regression.
#[derive(Clone, Debug)]
pub struct QpStream {
    /// Template of the requester's packets (addresses, tags, TOS, ports, P_Key, dest QP). Its `ext`
    /// supplies the per-QP values of every request (XRC SRQ, EE context).
    pub req: RoceFrame,
    /// Template of the responder's packets (the reverse direction, dest QP = requester's QP).
    pub resp: RoceFrame,
    /// Path MTU used to segment messages and READ responses.
    pub pmtu: u32,
    /// When non-zero, every `ce_every`-th new request is CE-marked (a congested path).
    pub ce_every: u32,
    /// When set, every frame of this QP is cut to this many bytes (a truncating mirror session).
    pub snap: Option<usize>,
    /// DSCP the responder sends its CNPs with ([`CNP_DSCP`] unless [`QpStream::with_cnp_dscp`]).
    cnp_dscp: u8,
    transport: u8,
    next_psn: u32,
    /// The observer's acceptable range for the next request PSN, once it saw a request.
    expect: Option<(u32, u32)>,
    drop_next: u32,
    msn: u32,
    requests: u64,
    ce_since_cnp: u32,
    /// Capture timestamp of the last CNP.
    last_cnp_ns: Option<u64>,
    since_ack: u32,
    va: u64,
    history: VecDeque<RoceFrame>,
}

impl QpStream {
    /// A queue pair of `transport` (`wire::TRANSPORT_RC`, `_UC` or `_XRC`) from `macs[0]`/`ip.src`
    /// (QP `qpns[0]`) to `macs[1]`/`ip.dst` (QP `qpns[1]`), starting at `first_psn`, with DSCP 26
    /// ECT(0), P_Key 0xFFFF, PMTU 1024 and the UDP source port the Linux drivers would choose
    /// (from the flow label when an IPv6 one is set).
    pub fn new(transport: u8, ip: Ip, macs: [[u8; 6]; 2], qpns: [u32; 2], first_psn: u32) -> Self {
        let transport = transport & 0xE0;
        let sport = match ip {
            Ip::V6 { flow_label, .. } if flow_label & 0xF_FFFF != 0 => {
                flow_label_to_udp_sport(flow_label)
            }
            _ => rdma_udp_sport(qpns[0], qpns[1]),
        };
        let mut req = RoceFrame::new(ip, transport | op::SEND_ONLY, qpns[1]);
        req.src_mac = macs[0];
        req.dst_mac = macs[1];
        req.udp_src_port = sport;
        let mut resp = req.clone();
        resp.src_mac = macs[1];
        resp.dst_mac = macs[0];
        resp.ip = ip.reversed();
        resp.bth.dest_qp = qpns[0] & MASK24;
        Self {
            req,
            resp,
            pmtu: SCENARIO_PMTU,
            ce_every: 0,
            snap: None,
            cnp_dscp: CNP_DSCP,
            transport,
            next_psn: first_psn & MASK24,
            expect: None,
            drop_next: 0,
            msn: 0,
            requests: 0,
            ce_since_cnp: 0,
            last_cnp_ns: None,
            since_ack: 0,
            va: 0x7F00_0000_0000 | (u64::from(qpns[0]) << 24),
            history: VecDeque::new(),
        }
    }

    /// Sets the VLAN tags of both directions.
    pub fn with_vlans(mut self, vlans: &[VlanTag]) -> Self {
        self.req.vlans = vlans.to_vec();
        self.resp.vlans = vlans.to_vec();
        self
    }

    /// Sets DSCP and ECN of both directions.
    pub fn with_tos(mut self, dscp: u8, ecn: u8) -> Self {
        for f in [&mut self.req, &mut self.resp] {
            f.dscp = dscp;
            f.ecn = ecn;
        }
        self
    }

    /// Sets the UDP source port of both directions.
    pub fn with_udp_src_port(mut self, port: u16) -> Self {
        self.req.udp_src_port = port;
        self.resp.udp_src_port = port;
        self
    }

    /// Sets the DSCP of the responder's CNPs (by default [`CNP_DSCP`]), e.g. 0 for a NIC whose
    /// CNPs are left in best effort.
    pub fn with_cnp_dscp(mut self, dscp: u8) -> Self {
        self.cnp_dscp = dscp & 63;
        self
    }

    /// The PSN the next new request gets.
    pub fn next_psn(&self) -> u32 {
        self.next_psn
    }

    /// The PSN of the most recent request.
    pub fn last_psn(&self) -> u32 {
        psn_sub(self.next_psn, 1)
    }

    /// The next `n` request packets are lost upstream of the observation point: they consume PSNs
    /// (and stay available for retransmission) but are not emitted.
    pub fn lose_next(&mut self, n: u32) {
        self.drop_next += n;
    }

    /// Emits one request packet with operation `low_op` (low 5 bits; the transport is the QP's) and
    /// returns its PSN. AckReq is set on packets that end a message.
    pub fn request(&mut self, w: &mut Workload, low_op: u8, ext: Ext, payload_len: usize) -> u32 {
        let low = low_op & 0x1F;
        let mut f = self.req.clone();
        f.bth.opcode = self.transport | low;
        f.bth.psn = self.next_psn;
        f.bth.ack_req = !matches!(
            low,
            op::SEND_FIRST | op::SEND_MIDDLE | op::WRITE_FIRST | op::WRITE_MIDDLE
        );
        f.ext = Ext {
            xrc_srq: self.req.ext.xrc_srq,
            ee_ctx: self.req.ext.ee_ctx,
            ..ext
        };
        f.payload_len = payload_len;
        self.requests += 1;
        if self.ce_every != 0 && self.requests.is_multiple_of(u64::from(self.ce_every)) {
            f.ecn = CE;
        }
        self.emit_request(w, f)
    }

    fn emit_request(&mut self, w: &mut Workload, f: RoceFrame) -> u32 {
        let psn = f.bth.psn & MASK24;
        let is_read = f.bth.opcode & 0x1F == op::READ_REQUEST;
        let consumed = if is_read {
            read_psns(f.ext.dma_len, self.pmtu)
        } else {
            1
        };
        self.next_psn = psn.wrapping_add(consumed) & MASK24;
        self.history.push_back(f.clone());
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
        if self.drop_next > 0 {
            self.drop_next -= 1;
            return psn;
        }
        let keep = self.snap.unwrap_or(usize::MAX);
        let class = intended_class(f.bth.opcode, 0);
        let mut event = PsnEvent::None;
        let tracked = matches!(
            self.transport,
            wire::TRANSPORT_RC | wire::TRANSPORT_UC | wire::TRANSPORT_XRC
        );
        if tracked && class.is_request() && keep >= f.bth_end() {
            event = self.psn_event(psn);
            let (lo, hi) = match (is_read, keep >= f.headers_end()) {
                (true, true) => (
                    read_psns(f.ext.dma_len, wire::PMTU_MAX),
                    read_psns(f.ext.dma_len, wire::PMTU_MIN),
                ),
                // The observer cannot see the DMA length of a READ cut inside its RETH.
                (true, false) => (1, (1 << 23) - 1),
                _ => (1, 1),
            };
            self.expect = Some((psn.wrapping_add(lo) & MASK24, psn.wrapping_add(hi) & MASK24));
        }
        if f.ecn == CE {
            self.ce_since_cnp += 1;
        }
        self.since_ack += 1;
        self.push(w, &f, class, event);
        psn
    }

    fn psn_event(&self, psn: u32) -> PsnEvent {
        let Some((lo, hi)) = self.expect else {
            return PsnEvent::None;
        };
        let ahead = psn_sub(psn, lo);
        if ahead <= psn_sub(hi, lo) {
            PsnEvent::None
        } else if ahead < 1 << 23 {
            PsnEvent::Gap {
                missing: psn_sub(psn, hi),
            }
        } else {
            PsnEvent::Regression
        }
    }

    fn push(&self, w: &mut Workload, f: &RoceFrame, class: OpClass, event: PsnEvent) {
        match self.snap {
            Some(keep) => w.push_cut(f, class, event, keep),
            None => w.push_roce_psn(f, class, event),
        }
    }

    fn message(&mut self, w: &mut Workload, ops: Segments, len: usize, ext: Ext) -> u32 {
        let pmtu = self.pmtu.max(1) as usize;
        let n = len.div_ceil(pmtu).max(1);
        let mut psn = self.next_psn;
        for i in 0..n {
            let low = match i {
                _ if n == 1 => ops.only,
                0 => ops.first,
                _ if i == n - 1 => ops.last,
                _ => ops.middle,
            };
            let payload = if i == n - 1 { len - i * pmtu } else { pmtu };
            psn = self.request(w, low, ext, payload);
        }
        self.msn = (self.msn + 1) & MASK24;
        psn
    }

    fn remote(&mut self, len: usize) -> Ext {
        let ext = Ext {
            va: self.va,
            rkey: 0x0001_2345,
            dma_len: len as u32,
            ..Ext::default()
        };
        self.va += len as u64;
        ext
    }

    /// An RDMA WRITE of `len` bytes (first/middle/last or only); returns the last PSN.
    pub fn write(&mut self, w: &mut Workload, len: usize) -> u32 {
        let ext = self.remote(len);
        self.message(w, WRITE, len, ext)
    }

    /// An RDMA WRITE with immediate (last-imm or only-imm).
    pub fn write_imm(&mut self, w: &mut Workload, len: usize, imm: u32) -> u32 {
        let ext = Ext {
            imm,
            ..self.remote(len)
        };
        self.message(w, WRITE_IMM, len, ext)
    }

    /// A SEND of `len` bytes.
    pub fn send(&mut self, w: &mut Workload, len: usize) -> u32 {
        self.message(w, SEND, len, Ext::default())
    }

    /// A SEND with immediate.
    pub fn send_imm(&mut self, w: &mut Workload, len: usize, imm: u32) -> u32 {
        let ext = Ext {
            imm,
            ..Ext::default()
        };
        self.message(w, SEND_IMM, len, ext)
    }

    /// A SEND with invalidate of `rkey`.
    pub fn send_inv(&mut self, w: &mut Workload, len: usize, rkey: u32) -> u32 {
        let ext = Ext {
            rkey,
            ..Ext::default()
        };
        self.message(w, SEND_INV, len, ext)
    }

    /// An RDMA READ request of `dma_len` bytes followed by its responses (first/middle/last or
    /// only, one per PMTU, AETH on first/last/only); returns the request PSN.
    pub fn read(&mut self, w: &mut Workload, dma_len: u32) -> u32 {
        let ext = self.remote(dma_len as usize);
        let psn = self.request(w, op::READ_REQUEST, ext, 0);
        self.msn = (self.msn + 1) & MASK24;
        let pmtu = self.pmtu.max(1) as usize;
        let len = dma_len as usize;
        let n = len.div_ceil(pmtu).max(1);
        for i in 0..n {
            let low = match i {
                _ if n == 1 => READ_RESPONSE.only,
                0 => READ_RESPONSE.first,
                _ if i == n - 1 => READ_RESPONSE.last,
                _ => READ_RESPONSE.middle,
            };
            let payload = if i == n - 1 { len - i * pmtu } else { pmtu };
            let ext = self.aeth(SYNDROME_ACK);
            self.response(w, low, psn.wrapping_add(i as u32), ext, payload);
        }
        psn
    }

    /// An atomic (`op::COMPARE_SWAP` or `op::FETCH_ADD`) and its ATOMIC ACKNOWLEDGE; returns the
    /// request PSN.
    pub fn atomic(&mut self, w: &mut Workload, low_op: u8, swap_add: u64, compare: u64) -> u32 {
        let ext = Ext {
            swap_add,
            compare,
            ..self.remote(8)
        };
        let psn = self.request(w, low_op, ext, 0);
        self.msn = (self.msn + 1) & MASK24;
        let ack = Ext {
            atomic_orig: compare,
            ..self.aeth(SYNDROME_ACK)
        };
        self.response(w, op::ATOMIC_ACKNOWLEDGE, psn, ack, 0);
        psn
    }

    fn aeth(&self, syndrome: u8) -> Ext {
        Ext {
            syndrome,
            msn: self.msn,
            ..Ext::default()
        }
    }

    fn response(&mut self, w: &mut Workload, low_op: u8, psn: u32, ext: Ext, payload_len: usize) {
        let mut f = self.resp.clone();
        f.bth.opcode = self.transport | (low_op & 0x1F);
        f.bth.psn = psn & MASK24;
        f.ext = ext;
        f.payload_len = payload_len;
        let class = intended_class(f.bth.opcode, ext.syndrome);
        self.push(w, &f, class, PsnEvent::None);
    }

    /// The responder acknowledges everything up to `psn` (one coalesced ACK).
    pub fn ack(&mut self, w: &mut Workload, psn: u32) {
        self.since_ack = 0;
        let ext = self.aeth(SYNDROME_ACK);
        self.response(w, op::ACKNOWLEDGE, psn, ext, 0);
    }

    /// ACKs the most recent request when at least `every` requests arrived since the last ACK.
    pub fn ack_if_due(&mut self, w: &mut Workload, every: u32) {
        if self.since_ack >= every.max(1) {
            let psn = self.last_psn();
            self.ack(w, psn);
        }
    }

    /// The responder sends an ACKNOWLEDGE with `syndrome` (NAK or RNR NAK) naming `psn`.
    pub fn nak(&mut self, w: &mut Workload, psn: u32, syndrome: u8) {
        let ext = self.aeth(syndrome);
        self.response(w, op::ACKNOWLEDGE, psn, ext, 0);
    }

    /// The responder (notification point) sends a CNP to the requester's QP: opcode 0x81, BECN,
    /// P_Key 0xFFFF, PSN 0, DSCP 48 (or the one set with [`QpStream::with_cnp_dscp`]), Not-ECT.
    pub fn cnp(&mut self, w: &mut Workload) {
        self.ce_since_cnp = 0;
        self.last_cnp_ns = Some(w.next_ts());
        let mut f = self.resp.clone();
        f.bth = Bth {
            opcode: wire::OPCODE_CNP,
            becn: true,
            pkey: DEFAULT_PKEY,
            dest_qp: self.resp.bth.dest_qp,
            psn: 0,
            ..Bth::default()
        };
        f.ext = Ext::default();
        f.payload_len = 0;
        f.dscp = self.cnp_dscp;
        f.ecn = NOT_ECT;
        self.push(w, &f, OpClass::Cnp, PsnEvent::None);
    }

    /// Sends a CNP if any request was CE-marked since the last one (a rate-limited notification
    /// point); returns whether it did.
    pub fn cnp_if_marked(&mut self, w: &mut Workload) -> bool {
        let marked = self.ce_since_cnp > 0;
        if marked {
            self.cnp(w);
        }
        marked
    }

    /// Like a NIC's notification point with a per-QP CNP timer: sends a CNP if a request was
    /// CE-marked since the last call and the last CNP lies at least `interval_ns` of capture time
    /// back; marks seen while the timer runs are dropped. Returns whether it sent one.
    pub fn cnp_rate_limited(&mut self, w: &mut Workload, interval_ns: u64) -> bool {
        if self.ce_since_cnp == 0 {
            return false;
        }
        let due = self
            .last_cnp_ns
            .is_none_or(|last| w.next_ts() - last >= interval_ns);
        if due {
            self.cnp(w);
        } else {
            self.ce_since_cnp = 0;
        }
        due
    }

    /// Go-back-N: re-emits every remembered request from `psn` on, in order, and returns how many.
    /// The first one steps back (a regression unless nothing after it was seen). Returns 0 when
    /// `psn` is not a remembered request PSN.
    pub fn retransmit_from(&mut self, w: &mut Workload, psn: u32) -> usize {
        let Some(pos) = self.history.iter().position(|f| f.bth.psn == psn) else {
            return 0;
        };
        let frames: Vec<RoceFrame> = self.history.drain(pos..).collect();
        let n = frames.len();
        for f in frames {
            self.emit_request(w, f);
        }
        n
    }
}

// ---------------------------------------------------------------------------------------------
// Noise: frames the observer must skip.
// ---------------------------------------------------------------------------------------------

fn v4(c: u8, d: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, c, d)
}

fn v6(host: u16) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, host)
}

fn tag(tpid: u16, vid: u16) -> VlanTag {
    VlanTag {
        tpid,
        pcp: 3,
        dei: false,
        vid,
    }
}

/// The RoCE frame the noise frames are derived from (untagged IPv4 RC SEND only, 32 bytes).
fn noise_base() -> RoceFrame {
    let mut f = RoceFrame::new(
        Ip::v4(v4(3, 1), v4(3, 2)),
        wire::TRANSPORT_RC | op::SEND_ONLY,
        0x300,
    );
    f.src_mac = host_mac(0x301);
    f.dst_mac = host_mac(0x302);
    f.payload_len = 32;
    f
}

/// Ethernet header plus an IPv4 header with `payload`.
fn ipv4_packet(proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&host_mac(0x302));
    b.extend_from_slice(&host_mac(0x301));
    put16(&mut b, wire::ETHERTYPE_IPV4);
    let total = len16(wire::IPV4_MIN_HEADER_LEN + payload.len());
    put_ipv4(&mut b, 20, DATA_DSCP << 2, total, proto, v4(3, 1), v4(3, 2));
    b.extend_from_slice(payload);
    b
}

/// Ethernet header plus an IPv6 header with next header `next` and `payload`.
fn ipv6_packet(next: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&host_mac(0x302));
    b.extend_from_slice(&host_mac(0x301));
    put16(&mut b, wire::ETHERTYPE_IPV6);
    put_ipv6(
        &mut b,
        0,
        0,
        len16(payload.len()),
        next,
        v6(0x301),
        v6(0x302),
    );
    b.extend_from_slice(payload);
    b
}

fn udp_datagram(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    put16(&mut b, sport);
    put16(&mut b, dport);
    put16(&mut b, len16(wire::UDP_HEADER_LEN + payload.len()));
    put16(&mut b, 0);
    b.extend_from_slice(payload);
    b
}

/// A minimal TCP SYN header towards `dport`.
fn tcp_syn(dport: u16) -> Vec<u8> {
    let mut b = Vec::new();
    put16(&mut b, 40_000);
    put16(&mut b, dport);
    put32(&mut b, 1);
    put32(&mut b, 0);
    b.extend_from_slice(&[0x50, 0x02, 0xFF, 0xFF, 0, 0, 0, 0]);
    b
}

/// Ethernet frame with `ethertype` and `payload`, padded to 60 bytes.
fn ether(dst: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&dst);
    b.extend_from_slice(&host_mac(0x301));
    put16(&mut b, ethertype);
    b.extend_from_slice(payload);
    b.resize(b.len().max(60), 0);
    b
}

fn arp_request() -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    p.extend_from_slice(&host_mac(0x301));
    p.extend_from_slice(&v4(3, 1).octets());
    p.extend_from_slice(&[0; 6]);
    p.extend_from_slice(&v4(3, 2).octets());
    ether([0xFF; 6], wire::ETHERTYPE_ARP, &p)
}

/// A RoCE frame whose IPv4 header bytes are changed by `edit` (checksum refreshed).
fn edited_ipv4(edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut b = noise_base().to_bytes();
    let ip = &mut b[wire::ETH_HEADER_LEN..];
    edit(ip);
    refresh_ipv4_checksum(ip);
    b
}

/// A RoCE datagram (UDP + BTH + payload + ICRC bytes) for hand-built IP packets.
fn roce_udp() -> Vec<u8> {
    let f = noise_base();
    f.to_bytes()[f.bth_offset() - wire::UDP_HEADER_LEN..].to_vec()
}

/// Frames the observer must skip, one per [`SkipReason`] (the e2e set), with their reasons.
pub fn basic_noise() -> Vec<(Vec<u8>, SkipReason)> {
    use SkipReason::*;
    let base = noise_base();
    let mut three_tags = base.clone();
    three_tags.vlans = vec![
        tag(wire::ETHERTYPE_QINQ, 10),
        tag(wire::ETHERTYPE_VLAN, 20),
        tag(wire::ETHERTYPE_VLAN, 30),
    ];
    let mut frag6 = vec![wire::IPPROTO_UDP, 0, 0x00, 0x01];
    frag6.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    frag6.extend_from_slice(&roce_udp());
    let cut = base.to_bytes()[..base.bth_end() - 5].to_vec();
    vec![
        (arp_request(), NotIp),
        // MAC control with an opcode other than PAUSE / PFC (0x0002, EPON GATE).
        (
            mac_control_frame(host_mac(0x303), 0x0002, &[0; 6]),
            MacControl,
        ),
        (ipv4_packet(wire::IPPROTO_TCP, &tcp_syn(4791)), NotUdp),
        (
            ipv4_packet(wire::IPPROTO_UDP, &udp_datagram(5353, 53, &[0; 17])),
            OtherPort,
        ),
        (edited_ipv4(|ip| ip[6] = 0x20), IpFragment),
        (ipv6_packet(wire::IPV6_NEXT_FRAGMENT, &frag6), IpFragment),
        (cut, Truncated),
        (edited_ipv4(|ip| ip[0] = 0x44), BadHeaderLength),
        (edited_ipv4(|ip| ip[0] = 0x65), BadIpVersion),
        (three_tags.to_bytes(), TooManyVlanTags),
        // GRE that is no mirror copy: IPv4 inside GRE.
        (
            ipv4_packet(wire::IPPROTO_GRE, &[0, 0, 0x08, 0x00, 0x45, 0, 0, 20]),
            GreUnsupported,
        ),
    ]
}

/// Mirror copies that are skipped: (frame, reason, ERSPAN session).
pub fn mirror_noise() -> Vec<(Vec<u8>, SkipReason, Option<u16>)> {
    let inner = noise_base().to_bytes();
    vec![
        (
            erspan3_not_ethernet(&inner),
            SkipReason::MirrorNotEthernet,
            Some(3),
        ),
        // ERSPAN II carrying ARP.
        (
            encapsulate(
                &arp_request(),
                Encap::ErspanII {
                    session: 5,
                    truncated: false,
                },
            ),
            SkipReason::NotIp,
            Some(5),
        ),
        // GRE TEB carrying TCP.
        (
            encapsulate(&ipv4_packet(wire::IPPROTO_TCP, &tcp_syn(4791)), Encap::Teb),
            SkipReason::NotUdp,
            None,
        ),
    ]
}

/// An ERSPAN III copy whose frame type says IP, not Ethernet.
fn erspan3_not_ethernet(inner: &[u8]) -> Vec<u8> {
    let mut b = encapsulate(
        inner,
        Encap::ErspanIII {
            session: 3,
            truncated: false,
            platform: false,
        },
    );
    // Outer Ethernet 14 + IPv4 20 + GRE with sequence 8: the ERSPAN III word with the frame
    // type is at bytes 10..12 of its header.
    let at = 14 + 20 + 8 + 10;
    let w = u16::from_be_bytes([b[at], b[at + 1]]) | (2 << 10);
    b[at..at + 2].copy_from_slice(&w.to_be_bytes());
    b
}

/// More skip cases for the corpus: other non-IP EtherTypes, IPv6 variants, bad lengths, ...
pub fn extra_noise() -> Vec<(Vec<u8>, SkipReason)> {
    use SkipReason::*;
    let base = noise_base();
    // A tagged PFC frame (MAC control is never tagged: not_ip) and one cut in its times.
    let mut tagged_pfc = pfc_frame(host_mac(0x302), 0x08, quanta_at(3, 0xFFFF));
    tagged_pfc.splice(12..12, [0x81, 0x00, 0x60, 0x64]);
    let cut_pfc = pfc_frame(host_mac(0x302), 0x08, quanta_at(3, 0xFFFF))[..30].to_vec();
    let mut tagged_arp = arp_request();
    tagged_arp.splice(12..12, [0x81, 0x00, 0x60, 0x64]);
    let mut four_tags = base.clone();
    four_tags.vlans = (0..4).map(|i| tag(wire::ETHERTYPE_VLAN, 40 + i)).collect();
    let mut v6_as_v4 = ipv6_packet(wire::IPPROTO_UDP, &roce_udp());
    v6_as_v4[14] = 0x45;
    let mut short_udp = roce_udp();
    short_udp[4..6].copy_from_slice(&19u16.to_be_bytes());
    let mut vlan = base.clone();
    vlan.vlans = vec![tag(wire::ETHERTYPE_VLAN, 7)];
    vec![
        (tagged_pfc, NotIp),
        (cut_pfc, Truncated),
        (
            ether([0x01, 0x80, 0xC2, 0, 0, 0x0E], 0x88CC, &[0; 46]),
            NotIp,
        ),
        (tagged_arp, NotIp),
        (ipv6_packet(wire::IPPROTO_TCP, &tcp_syn(4791)), NotUdp),
        (
            ipv4_packet(wire::IPPROTO_UDP, &udp_datagram(4791, 4792, &roce_udp())),
            OtherPort,
        ),
        (
            ipv6_packet(wire::IPPROTO_UDP, &udp_datagram(4791, 53, &[0; 20])),
            OtherPort,
        ),
        (
            edited_ipv4(|ip| ip[6..8].copy_from_slice(&185u16.to_be_bytes())),
            IpFragment,
        ),
        (v6_as_v4, BadIpVersion),
        (edited_ipv4(|ip| ip[0] = 0x40), BadHeaderLength),
        (
            edited_ipv4(|ip| ip[2..4].copy_from_slice(&39u16.to_be_bytes())),
            BadHeaderLength,
        ),
        (ipv4_packet(wire::IPPROTO_UDP, &short_udp), BadHeaderLength),
        (
            ipv6_packet(wire::IPPROTO_UDP, &roce_udp()[..19]),
            BadHeaderLength,
        ),
        (four_tags.to_bytes(), TooManyVlanTags),
        (Vec::new(), Truncated),
        (vlan.to_bytes()[..16].to_vec(), Truncated),
    ]
}

// ---------------------------------------------------------------------------------------------
// Scenarios.
// ---------------------------------------------------------------------------------------------

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
fn mac_control_frame(src: [u8; 6], opcode: u16, body: &[u8]) -> Vec<u8> {
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

/// A PFC frame's description for [`Workload::push_pause`].
pub fn pfc(src: [u8; 6], class_enable: u8, quanta: [u16; 8]) -> Pause {
    Pause {
        src_mac: src,
        opcode: wire::MAC_CONTROL_PFC,
        class_enable,
        quanta,
    }
}

/// An 802.3x PAUSE frame's description for [`Workload::push_pause`].
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

/// The scenarios meant to be written to capture files: plain, complete frames only (no
/// deliberately broken ones), so any dissector must agree with the truth on every frame.
pub const USER_SCENARIOS: [&str; 7] = [
    "clean",
    "incast",
    "loss",
    "mixed-dscp",
    "ipv6-vlan",
    "many-qps",
    "pfc",
];

/// (name, one-line description) of every scenario.
pub const SCENARIOS: &[(&str, &str)] = &[
    (
        "demo",
        "RC RDMA WRITEs with coalesced ACKs, one congested QP (CE marks, CNPs), one lossy QP (gap, NAK, go-back-N)",
    ),
    (
        "e2e",
        "demo plus IPv6, 802.1Q and QinQ, READ, SEND imm/inv, UD, atomics, RNR NAK, XRC, UC, ECN variants, mirror-truncated copies, PFC and PAUSE (also inside ERSPAN III), noise for every skip reason",
    ),
    (
        "corpus",
        "e2e plus every opcode, ECN and DSCP, IPv4 options, and frames truncated at every byte offset (for BPF_PROG_TEST_RUN)",
    ),
    ("many-qps", "1000 RC QPs doing a few RDMA WRITEs each"),
    (
        "clean",
        "6 RC QPs between 5 hosts: RDMA WRITE (also with immediate), SEND, READ with responses, coalesced ACKs; DSCP 26 ECT(0), no CE, no loss",
    ),
    (
        "incast",
        "8 senders WRITE to one receiver whose port congests: a growing share of CE marks, CNPs (DSCP 48, BECN) to each sender's QP at most one per 50 us, frames 500 ns apart",
    ),
    (
        "loss",
        "4 RC QPs with loss: PSN gaps answered by NAKs (PSN sequence error) and go-back-N retransmission, and an RNR NAK with its retransmission",
    ),
    (
        "mixed-dscp",
        "RC QPs on DSCP 0, 10, 26, 34 and 46 with Not-ECT, ECT(1), ECT(0) and CE, CNPs on DSCP 48, and a flow re-marked from DSCP 26 to 34 mid-stream",
    ),
    (
        "ipv6-vlan",
        "IPv6 (with and without flow label), 802.1Q (PCP 3) and QinQ (0x88A8 + 0x8100) flows, IPv4 and IPv6, interleaved with untagged IPv4",
    ),
    (
        "pfc",
        "RoCE on 4 QPs with a PFC storm on priority 3 (refreshed, then XON), PFC on priorities 3+4, an empty class-enable vector, and 802.3x PAUSE",
    ),
    (
        "rules-clean",
        "a well-configured fabric: 12 QPs, DSCP 26 ECT(0), CE answered by CNPs in DSCP 48, one short pause on priority 3; no rule fires (replay --link-speed 10G --uplinks 4)",
    ),
    (
        "rule-ce-without-cnp",
        "CE-marked WRITEs whose receiver ACKs but sends no CNP (rule ce-without-cnp)",
    ),
    (
        "rule-not-ect",
        "three senders in DSCP 26, one of them Not-ECT while the others are ECT(0) (rule not-ect)",
    ),
    (
        "rule-cnp-priority",
        "CE marks answered by CNPs sent in best-effort DSCP 0 (rule cnp-priority)",
    ),
    (
        "rule-dscp-mix",
        "RoCE data in DSCP 26 and in DSCP 0, all ECT(0) (rule dscp-mix)",
    ),
    (
        "rule-loss",
        "two drops in DSCP 26: PSN gaps, NAKs (sequence error), go-back-N (rule loss)",
    ),
    (
        "rule-rnr",
        "SENDs answered by RNR NAKs and sent again, no drop (rules rnr and loss: the retry is a PSN regression)",
    ),
    (
        "rule-pfc-storm",
        "RoCE in DSCP 26 while priority 3 is paused again every 12 us, ~85% of the time (rule pfc-storm)",
    ),
    (
        "rule-pfc-idle-priority",
        "untagged RoCE (priority 3) and a few pauses on priority 5 (rule pfc-idle-priority)",
    ),
    (
        "rule-incast",
        "six senders to one receiver, 10% CE, CNPs in DSCP 48 (rule incast)",
    ),
    (
        "rule-microburst",
        "4 KiB WRITEs back to back at ~96% of 10 Gb/s for ~500 us (rule microburst, with --link-speed 10G)",
    ),
    (
        "rule-ecmp-imbalance",
        "16 QPs between two hosts on one UDP source port: one uplink of 4 takes them all (rule ecmp-imbalance, with --uplinks 4)",
    ),
];

/// The names of [`SCENARIOS`], in order.
pub fn scenario_names() -> impl Iterator<Item = &'static str> {
    SCENARIOS.iter().map(|(name, _)| *name)
}

/// Builds the named scenario of [`SCENARIOS`] (deterministic).
pub fn scenario(name: &str) -> Option<Workload> {
    let mut w = Workload::default();
    match name {
        "demo" => demo(&mut w),
        "e2e" => e2e(&mut w),
        "corpus" => corpus(&mut w),
        "many-qps" => many_qps(&mut w),
        "clean" => clean(&mut w),
        "incast" => incast(&mut w),
        "loss" => loss(&mut w),
        "mixed-dscp" => mixed_dscp(&mut w),
        "ipv6-vlan" => ipv6_vlan(&mut w),
        "pfc" => pfc_scenario(&mut w),
        "rules-clean" => rules_clean(&mut w),
        "rule-ce-without-cnp" => rule_ce_without_cnp(&mut w),
        "rule-not-ect" => rule_not_ect(&mut w),
        "rule-cnp-priority" => rule_cnp_priority(&mut w),
        "rule-dscp-mix" => rule_dscp_mix(&mut w),
        "rule-loss" => rule_loss(&mut w),
        "rule-rnr" => rule_rnr(&mut w),
        "rule-pfc-storm" => rule_pfc_storm(&mut w),
        "rule-pfc-idle-priority" => rule_pfc_idle_priority(&mut w),
        "rule-incast" => rule_incast(&mut w),
        "rule-microburst" => rule_microburst(&mut w),
        "rule-ecmp-imbalance" => rule_ecmp_imbalance(&mut w),
        _ => return None,
    }
    Some(w)
}

/// An IPv4 RC QP between hosts 198.18.`net`.`a` and 198.18.`net`.`b`.
fn qp_v4(transport: u8, net: u8, hosts: [u8; 2], qpns: [u32; 2], first_psn: u32) -> QpStream {
    let ip = Ip::v4(v4(net, hosts[0]), v4(net, hosts[1]));
    let mac = |h: u8| host_mac(u16::from(net) << 8 | u16::from(h));
    QpStream::new(
        transport,
        ip,
        [mac(hosts[0]), mac(hosts[1])],
        qpns,
        first_psn,
    )
}

fn demo(w: &mut Workload) {
    const RC: u8 = wire::TRANSPORT_RC;
    let sizes = [1024, 4096, 16384, 2048, 8192, 512];
    let mut normal: Vec<QpStream> = (0..4u8)
        .map(|i| {
            let qpns = [0x0D40 + u32::from(i), 0x1A80 + u32::from(i)];
            qp_v4(
                RC,
                0,
                [1 + i % 2, 3 + i % 2],
                qpns,
                0x1000 * u32::from(i) + 17,
            )
        })
        .collect();
    let mut congested = qp_v4(RC, 0, [5, 6], [0x0E01, 0x1B01], 0x0042_0000);
    let mut lossy = qp_v4(RC, 0, [7, 8], [0x0E02, 0x1B02], 1000);

    for round in 0..24 {
        for (i, qp) in normal.iter_mut().enumerate() {
            qp.write(w, sizes[(round + i) % sizes.len()]);
            qp.ack_if_due(w, 8);
        }
        if round == 4 {
            congested.ce_every = 3;
        }
        congested.write(w, 8192);
        congested.ack_if_due(w, 8);
        if round % 2 == 0 {
            congested.cnp_if_marked(w);
        }
        match round {
            6 => {
                // The first 3 packets of this message are lost before the mirror: the 4th is a
                // gap, the responder NAKs the first missing PSN, the requester goes back to it.
                let first = lossy.next_psn();
                lossy.lose_next(3);
                lossy.write(w, 8192);
                lossy.nak(w, first, SYNDROME_NAK_SEQ);
                lossy.retransmit_from(w, first);
                let last = lossy.last_psn();
                lossy.ack(w, last);
            }
            _ => {
                lossy.write(w, 4096);
                lossy.ack_if_due(w, 8);
            }
        }
    }
    for qp in normal.iter_mut().chain([&mut congested, &mut lossy]) {
        let last = qp.last_psn();
        qp.ack(w, last);
    }
}

fn e2e(w: &mut Workload) {
    const RC: u8 = wire::TRANSPORT_RC;
    demo(w);

    // IPv6 with a flow label (which picks the UDP source port): writes and a READ.
    let ip6 = Ip::V6 {
        src: v6(0x101),
        dst: v6(0x102),
        flow_label: 0x5_4321,
    };
    let mut qp6 = QpStream::new(
        RC,
        ip6,
        [host_mac(0x101), host_mac(0x102)],
        [0x2001, 0x2002],
        77,
    );
    for len in [4096, 1024, 2048] {
        qp6.write(w, len);
    }
    let last = qp6.last_psn();
    qp6.ack(w, last);
    qp6.read(w, 65536);

    // 802.1Q and QinQ tagged flows.
    let mut dot1q =
        qp_v4(RC, 1, [1, 2], [0x2101, 0x2102], 500).with_vlans(&[tag(wire::ETHERTYPE_VLAN, 100)]);
    let mut qinq = qp_v4(RC, 1, [3, 4], [0x2201, 0x2202], 900).with_vlans(&[
        tag(wire::ETHERTYPE_QINQ, 200),
        tag(wire::ETHERTYPE_VLAN, 300),
    ]);
    for qp in [&mut dot1q, &mut qinq] {
        qp.write(w, 3000);
        qp.write(w, 1024);
        let last = qp.last_psn();
        qp.ack(w, last);
    }

    // READs (multi-packet and single), SENDs with immediate and invalidate, WRITE with
    // immediate, atomics, on one RC QP; then an RNR NAK and the retransmitted SEND.
    let mut ops = qp_v4(RC, 1, [5, 6], [0x2301, 0x2302], 0x00FF_FFF0);
    ops.read(w, 65536);
    ops.read(w, 65536);
    ops.read(w, 512);
    ops.send_imm(w, 3000, 0xCAFE_0001);
    ops.send_imm(w, 100, 0xCAFE_0002);
    ops.send_inv(w, 2048, 0x0005_5555);
    ops.send_inv(w, 64, 0x0005_5556);
    ops.write_imm(w, 2048, 0xCAFE_0003);
    ops.write_imm(w, 256, 0xCAFE_0004);
    ops.atomic(w, op::COMPARE_SWAP, 1, 0);
    ops.atomic(w, op::FETCH_ADD, 5, 0);
    let last = ops.last_psn();
    ops.ack(w, last);
    let psn = ops.send(w, 256);
    ops.nak(w, psn, SYNDROME_RNR_NAK);
    ops.retransmit_from(w, psn);
    ops.ack(w, psn);

    // UD SENDs with DETH (no PSN tracking, no ACKs).
    let mut ud = RoceFrame::new(
        Ip::v4(v4(1, 7), v4(1, 8)),
        wire::TRANSPORT_UD | op::SEND_ONLY,
        0x2402,
    );
    ud.src_mac = host_mac(0x107);
    ud.dst_mac = host_mac(0x108);
    ud.udp_src_port = 0xD123;
    ud.ext = Ext {
        qkey: 0x1111_1111,
        src_qp: 0x2401,
        imm: 0xBEEF,
        ..Ext::default()
    };
    for (i, opcode) in [op::SEND_ONLY, op::SEND_ONLY_IMM, op::SEND_ONLY]
        .into_iter()
        .enumerate()
    {
        ud.bth.opcode = wire::TRANSPORT_UD | opcode;
        ud.bth.psn = i as u32;
        ud.payload_len = 256;
        w.push_roce(&ud, OpClass::Send);
    }

    // XRC SENDs (XRCETH) with ACKs.
    let mut xrc = qp_v4(wire::TRANSPORT_XRC, 1, [9, 10], [0x2501, 0x2502], 4000);
    xrc.req.ext.xrc_srq = 0x42;
    xrc.send(w, 2048);
    xrc.send(w, 128);
    let last = xrc.last_psn();
    xrc.ack(w, last);

    // UC with ECT(1) (no ACKs on UC); RC with Not-ECT and a UDP source port below 1024.
    let mut uc = qp_v4(wire::TRANSPORT_UC, 1, [11, 12], [0x2601, 0x2602], 10).with_tos(10, ECT1);
    uc.write(w, 4096);
    uc.send(w, 1500);
    let mut low_port = qp_v4(RC, 1, [13, 14], [0x2701, 0x2702], 20)
        .with_tos(0, NOT_ECT)
        .with_udp_src_port(999);
    low_port.write(w, 2048);
    let last = low_port.last_psn();
    low_port.ack(w, last);

    // Mirror-truncated copies: one session cutting inside the payload, one right after the BTH.
    for (i, snap) in [96, 54].into_iter().enumerate() {
        let i = i as u8;
        let qpns = [0x2801 + u32::from(i), 0x2901 + u32::from(i)];
        let mut mirrored = qp_v4(RC, 1, [15 + 2 * i, 16 + 2 * i], qpns, 300);
        mirrored.snap = Some(snap);
        mirrored.write(w, 4096);
        mirrored.read(w, 2048);
        mirrored.write(w, 1024);
        let last = mirrored.last_psn();
        mirrored.ack(w, last);
    }

    // A PSN wrap with loss across it and go-back-N.
    let mut wrap = qp_v4(RC, 1, [19, 20], [0x2A01, 0x2A02], 0x00FF_FFFC);
    wrap.write(w, 2048);
    let first = wrap.next_psn();
    wrap.lose_next(4);
    wrap.write(w, 8192);
    wrap.nak(w, first, SYNDROME_NAK_SEQ);
    wrap.retransmit_from(w, first);
    let last = wrap.last_psn();
    wrap.ack(w, last);

    // PFC on priority 3 (pause, XON), an 802.3x PAUSE, and PFC copied through ERSPAN III.
    let port = host_mac(0xF01);
    w.push_pause(&pfc(port, 0x08, quanta_at(3, 0xFFFF)), None);
    w.push_pause(&pfc(port, 0x18, [0, 0, 0, 0x100, 0x80, 0, 0, 0]), None);
    w.push_pause(&pfc(port, 0x08, quanta_at(3, 0)), None);
    w.push_pause(&link_pause(host_mac(0xF02), 0x200), None);
    w.push_pause(
        &pfc(port, 0x08, quanta_at(3, 0x4000)),
        Some(Encap::ErspanIII {
            session: 9,
            truncated: false,
            platform: true,
        }),
    );

    for (bytes, reason, session) in mirror_noise() {
        w.push_mirror_noise(bytes, reason, session);
    }
    for (bytes, reason) in basic_noise() {
        w.push_noise(bytes, reason);
    }
}

/// Switch ports (and a NIC) sending PAUSE / PFC frames in the `pfc` scenario.
pub const PFC_SENDERS: [[u8; 6]; 3] = [
    [0x02, 0x00, 0x00, 0x00, 0x0F, 0x01],
    [0x02, 0x00, 0x00, 0x00, 0x0F, 0x02],
    [0x02, 0x00, 0x00, 0x00, 0x0F, 0x03],
];

/// RoCE on priority 3 interleaved with a PFC storm on priority 3 from one switch port (pause
/// refreshed, then XON), PFC on priorities 3 and 4 at once from another (times of priorities
/// not enabled must be ignored), an empty class-enable vector, and 802.3x PAUSE from a NIC.
fn pfc_scenario(w: &mut Workload) {
    const RC: u8 = wire::TRANSPORT_RC;
    let [storm, dual, nic] = PFC_SENDERS;
    let mut qps: Vec<QpStream> = (0..4u8)
        .map(|i| {
            qp_v4(
                RC,
                5,
                [1 + 2 * i, 2 + 2 * i],
                [0x5001 + u32::from(i), 0x5101],
                10,
            )
            .with_tos(DATA_DSCP, ECT0)
        })
        .collect();
    for step in 0..40 {
        for qp in qps.iter_mut() {
            qp.write(w, 4096);
            qp.ack_if_due(w, 4);
        }
        // Priority 3 paused for 65535 quanta, refreshed every step, released at the end.
        let q3 = if step == 39 { 0 } else { 0xFFFF };
        w.push_pause(&pfc(storm, 0x08, quanta_at(3, q3)), None);
        if step % 4 == 0 {
            let (q3, q4) = if step == 36 { (0, 0) } else { (0x1000, 0x0800) };
            // Priority 5's time is set but not enabled: ignored.
            w.push_pause(&pfc(dual, 0x18, [0, 0, 0, q3, q4, 0x7777, 0, 0]), None);
        }
        if step % 10 == 5 {
            w.push_pause(&link_pause(nic, if step == 35 { 0 } else { 0x0200 }), None);
        }
    }
    w.push_pause(&pfc(storm, 0x00, [0x1111; 8]), None);
    ack_all(w, qps.iter_mut());
}

/// Opcodes the corpus covers: every defined opcode of every transport, the low codes reserved in
/// every transport (0x15, 0x18-0x1F), 0x80-0x9F and the vendor range. Left out: operations
/// defined elsewhere but not for their transport (e.g. a UC READ), because observer-common's
/// classify counts those by their low bits where the IBTA tables call them reserved.
fn corpus_opcodes() -> impl Iterator<Item = u8> {
    (0..=255u8).filter(|&opcode| {
        let low = opcode & 0x1F;
        let low_reserved = low == 0x15 || low >= 0x18;
        let transport_specific = matches!(
            opcode & 0xE0,
            wire::TRANSPORT_UC | wire::TRANSPORT_RD | wire::TRANSPORT_UD
        );
        opcode_defined(opcode) || low_reserved || !transport_specific
    })
}

/// One frame of `opcode` with plausible header values.
fn opcode_frame(opcode: u8, syndrome: u8, dest_qp: u32) -> RoceFrame {
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

/// Every kind of AETH syndrome: ACK (credit count 31 and 0), RNR NAK, the five NAK codes and the
/// reserved classes 010, 100 and 111.
const ACK_SYNDROMES: &[u8] = &[
    0x1F, 0x00, 0x2E, 0x60, 0x61, 0x62, 0x63, 0x64, 0x40, 0x80, 0xE0,
];

fn corpus(w: &mut Workload) {
    e2e(w);

    // Every opcode, each on its own flow; ACKNOWLEDGE with every kind of syndrome on RC and XRC.
    // RD ACKNOWLEDGE only with an ACK syndrome (see the report on RD responses).
    let mut qp = 0x10_0000;
    for opcode in corpus_opcodes() {
        let syndromes: &[u8] = match opcode {
            0x11 | 0xB1 => ACK_SYNDROMES,
            _ => &[SYNDROME_ACK],
        };
        for &syndrome in syndromes {
            let f = opcode_frame(opcode, syndrome, qp);
            w.push_roce(&f, intended_class(opcode, syndrome));
            qp += 1;
        }
    }

    // Every DSCP and ECN on one RC flow (consecutive PSNs).
    let mut tos = qp_v4(wire::TRANSPORT_RC, 2, [3, 4], [0x3001, 0x3002], 0);
    for dscp in 0..64u8 {
        tos.req.dscp = dscp;
        tos.req.ecn = dscp % 4;
        tos.write(w, 128);
    }

    // IPv4 options of 1..=10 words on READs (the RETH must be found behind them).
    let mut opts = qp_v4(wire::TRANSPORT_RC, 2, [5, 6], [0x3101, 0x3102], 0x00FF_FF00);
    for words in 1..=10u8 {
        if let Ip::V4 { option_words, .. } = &mut opts.req.ip {
            *option_words = words;
        }
        if let Ip::V4 { option_words, .. } = &mut opts.resp.ip {
            *option_words = words;
        }
        opts.read(w, 65536);
    }

    // Truncation at every byte offset: a WRITE first (IPv4), a READ request (802.1Q) and an
    // ACKNOWLEDGE carrying a NAK (IPv6). Each request copy gets its own flow (dest QP).
    let mut write = opcode_frame(wire::TRANSPORT_RC | op::WRITE_FIRST, 0, 0);
    write.payload_len = 256;
    let mut read = opcode_frame(wire::TRANSPORT_RC | op::READ_REQUEST, 0, 0);
    read.vlans = vec![tag(wire::ETHERTYPE_VLAN, 5)];
    read.ext.dma_len = 65536;
    for (base, first_qp) in [(write, 0x20_0000), (read, 0x21_0000)] {
        let class = intended_class(base.bth.opcode, 0);
        for keep in 0..=base.frame_len() {
            let mut f = base.clone();
            f.bth.dest_qp = first_qp + keep as u32;
            w.push_cut(&f, class, PsnEvent::None, keep);
        }
    }
    let mut nak = opcode_frame(
        wire::TRANSPORT_RC | op::ACKNOWLEDGE,
        SYNDROME_NAK_SEQ,
        0x22_0000,
    );
    nak.ip = Ip::V6 {
        src: v6(0x201),
        dst: v6(0x202),
        flow_label: 0,
    };
    for keep in 0..=nak.frame_len() {
        w.push_cut(&nak, OpClass::Nak, PsnEvent::None, keep);
    }

    for (bytes, reason) in extra_noise() {
        w.push_noise(bytes, reason);
    }
}

fn many_qps(w: &mut Workload) {
    let mut qps: Vec<QpStream> = (0..1000u32)
        .map(|i| {
            let client = (i / 100) as u8;
            let ip = Ip::v4(
                Ipv4Addr::new(198, 19, client, 1),
                Ipv4Addr::new(198, 19, client, 2),
            );
            let id = 0x4000 | ((i / 100) as u16 * 2);
            let macs = [host_mac(id), host_mac(id + 1)];
            QpStream::new(
                wire::TRANSPORT_RC,
                ip,
                macs,
                [0x1_0000 + i, 0x2_0000 + i],
                i * 7919 % 0x0100_0000,
            )
        })
        .collect();
    for len in [1024, 2048, 3072] {
        for qp in &mut qps {
            qp.write(w, len);
        }
    }
    for qp in &mut qps {
        let last = qp.last_psn();
        qp.ack(w, last);
    }
}

/// An IPv6 queue pair between 2001:db8::`hosts[0]` and 2001:db8::`hosts[1]` (MACs 02:..:hi:lo of
/// the same numbers).
fn qp_v6(hosts: [u16; 2], flow_label: u32, qpns: [u32; 2], first_psn: u32) -> QpStream {
    let ip = Ip::V6 {
        src: v6(hosts[0]),
        dst: v6(hosts[1]),
        flow_label,
    };
    QpStream::new(
        wire::TRANSPORT_RC,
        ip,
        [host_mac(hosts[0]), host_mac(hosts[1])],
        qpns,
        first_psn,
    )
}

/// The responder of each QP acknowledges its last request (the end of a scenario).
fn ack_all<'a>(w: &mut Workload, qps: impl IntoIterator<Item = &'a mut QpStream>) {
    for qp in qps {
        let last = qp.last_psn();
        qp.ack(w, last);
    }
}

/// One step of a QP's ordinary traffic, chosen by `step`: WRITEs, SENDs (plain and with
/// immediate) and READs of varied sizes; the responder ACKs every 8 requests (coalesced).
fn everyday_op(w: &mut Workload, qp: &mut QpStream, step: usize) {
    const SIZES: [usize; 7] = [4096, 1024, 16384, 300, 8192, 2048, 32768];
    let len = SIZES[step % SIZES.len()];
    match step % 6 {
        0 | 3 => {
            qp.write(w, len);
        }
        1 => {
            qp.send(w, len.min(4096));
        }
        2 => {
            qp.read(w, (len as u32).max(512));
            return;
        }
        4 => {
            qp.write_imm(w, len, 0xC1EA_0000 | step as u32);
        }
        _ => {
            qp.send_imm(w, 64, step as u32);
        }
    }
    qp.ack_if_due(w, 8);
}

/// Minimum capture time between two CNPs of one flow (the NICs' per-QP CNP timer).
pub const CNP_INTERVAL_NS: u64 = 50_000;

fn clean(w: &mut Workload) {
    // Three clients (198.18.10.1-3) and two servers (.101, .102).
    let mut qps: Vec<QpStream> = (0..6u32)
        .map(|i| {
            let hosts = [1 + (i % 3) as u8, 101 + (i % 2) as u8];
            let qpns = [0x0A10 + i, 0x0B20 + 3 * i];
            qp_v4(wire::TRANSPORT_RC, 10, hosts, qpns, 0x0010_0000 * i + 3)
        })
        .collect();
    for round in 0..18 {
        for (i, qp) in qps.iter_mut().enumerate() {
            everyday_op(w, qp, round + 2 * i);
        }
    }
    ack_all(w, &mut qps);
}

fn incast(w: &mut Workload) {
    // Eight senders (198.18.11.1-8) WRITE 4 KiB messages to one receiver (198.18.11.100): its
    // switch port congests, so the share of CE-marked packets grows from none to all, and the
    // receiver's NIC answers with rate-limited CNPs.
    w.set_frame_gap(500);
    let mut qps: Vec<QpStream> = (0..8u32)
        .map(|i| {
            let qpns = [0x0C01 + 0x10 * i, 0x0D01 + i];
            qp_v4(wire::TRANSPORT_RC, 11, [1 + i as u8, 100], qpns, 7 * i + 1)
        })
        .collect();
    for round in 0..40 {
        let ce_every = match round {
            0..8 => 0,
            8..16 => 8,
            16..24 => 4,
            24..32 => 2,
            _ => 1,
        };
        for qp in &mut qps {
            qp.ce_every = ce_every;
            qp.write(w, 4096);
            qp.ack_if_due(w, 16);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
    }
    ack_all(w, &mut qps);
}

/// Loses `lost` request packets after the QP's next `before` bytes of WRITE, lets `after` more
/// bytes arrive out of order, then the responder NAKs the first missing PSN and the requester
/// goes back to it; finally the responder ACKs everything.
fn go_back_n(w: &mut Workload, qp: &mut QpStream, before: usize, lost: u32, after: usize) {
    qp.write(w, before);
    let first = qp.next_psn();
    qp.lose_next(lost);
    qp.write(w, after);
    qp.nak(w, first, SYNDROME_NAK_SEQ);
    qp.retransmit_from(w, first);
    let last = qp.last_psn();
    qp.ack(w, last);
}

fn loss(w: &mut Workload) {
    let mut qps: Vec<QpStream> = (0..4u32)
        .map(|i| {
            let hosts = [1 + i as u8, 11 + (i % 2) as u8];
            let qpns = [0x0E10 + i, 0x0F10 + i];
            qp_v4(wire::TRANSPORT_RC, 12, hosts, qpns, 0x00FF_FF00 + 0x40 * i)
        })
        .collect();
    for round in 0..24 {
        for (i, qp) in qps.iter_mut().enumerate() {
            match (i, round) {
                // Two packets lost inside a burst; three more messages' worth arrive before the
                // NAK gets back (the PSNs of the first QP wrap around 2^24 on the way).
                (0, 6) => go_back_n(w, qp, 4096, 2, 8192),
                (0, 17) => go_back_n(w, qp, 1024, 1, 2048),
                // A single lost packet: the very next one is the gap.
                (1, 10) => go_back_n(w, qp, 2048, 1, 3072),
                // The responder has no receive WQE for a SEND: RNR NAK, the requester waits
                // out the RNR timer and sends it again.
                (2, 12) => {
                    let psn = qp.send(w, 512);
                    qp.nak(w, psn, SYNDROME_RNR_NAK);
                    qp.retransmit_from(w, psn);
                    qp.ack(w, psn);
                }
                (3, 15) => go_back_n(w, qp, 512, 3, 16384),
                _ => everyday_op(w, qp, round + i),
            }
        }
    }
    ack_all(w, &mut qps);
}

fn mixed_dscp(w: &mut Workload) {
    // (DSCP, ECN) per QP: best effort without ECN, AF11 with ECT(1), the RoCE class with ECT(0)
    // and a congested path (CE, CNPs on DSCP 48), AF41 with ECT(0), EF with ECT(1).
    let classes = [
        (0, NOT_ECT),
        (10, ECT1),
        (DATA_DSCP, ECT0),
        (34, ECT0),
        (46, ECT1),
    ];
    let mut qps: Vec<QpStream> = classes
        .iter()
        .zip(0u32..)
        .map(|(&(dscp, ecn), i)| {
            let qpns = [0x1310 + i, 0x1410 + i];
            qp_v4(wire::TRANSPORT_RC, 13, [1 + i as u8, 21], qpns, 0x500 * i).with_tos(dscp, ecn)
        })
        .collect();
    qps[2].ce_every = 3;
    // Re-marked by a QoS policy change half way: DSCP 26 then 34 (both directions).
    let mut remarked = qp_v4(wire::TRANSPORT_RC, 13, [9, 22], [0x1501, 0x1601], 42);
    for round in 0..20 {
        if round == 10 {
            remarked = remarked.with_tos(34, ECT0);
        }
        for (i, qp) in qps.iter_mut().chain([&mut remarked]).enumerate() {
            everyday_op(w, qp, round + i);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
    }
    ack_all(w, qps.iter_mut().chain([&mut remarked]));
}

fn ipv6_vlan(w: &mut Workload) {
    let dot1q = [tag(wire::ETHERTYPE_VLAN, 100)];
    let qinq = [
        tag(wire::ETHERTYPE_QINQ, 10),
        tag(wire::ETHERTYPE_VLAN, 100),
    ];
    let mut qps = vec![
        // IPv6 without a flow label (UDP source port from the QPNs) and with one.
        qp_v6([0x0E01, 0x0E02], 0, [0x1701, 0x1801], 5),
        qp_v6([0x0E03, 0x0E02], 0x1_2345, [0x1702, 0x1802], 0x00FF_FFF0),
        // 802.1Q, IPv4 and IPv6.
        qp_v4(wire::TRANSPORT_RC, 14, [1, 2], [0x1703, 0x1803], 1000).with_vlans(&dot1q),
        qp_v6([0x0E04, 0x0E05], 0xA_BCDE, [0x1704, 0x1804], 2000).with_vlans(&dot1q),
        // QinQ, IPv4 and IPv6.
        qp_v4(wire::TRANSPORT_RC, 14, [3, 4], [0x1705, 0x1805], 3000).with_vlans(&qinq),
        qp_v6([0x0E06, 0x0E07], 0, [0x1706, 0x1806], 4000).with_vlans(&qinq),
        // Untagged IPv4.
        qp_v4(wire::TRANSPORT_RC, 14, [5, 6], [0x1707, 0x1807], 6000),
    ];
    // The tagged IPv6 path is congested: CE marks and CNPs over 802.1Q and IPv6.
    qps[3].ce_every = 5;
    for round in 0..16 {
        for (i, qp) in qps.iter_mut().enumerate() {
            everyday_op(w, qp, round + i);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
    }
    ack_all(w, &mut qps);
}

// ---------------------------------------------------------------------------------------------
// Rule scenarios: one per rule of the findings engine, each made to fire exactly that rule when
// replayed with `--link-speed 10G --uplinks 4`, and `rules-clean`, which fires none.
// ---------------------------------------------------------------------------------------------

/// Spacing of the rule scenarios' frames: PMTU-sized frames (about 1.1 KB on the wire) 2 us
/// apart load a 10 Gb/s link to about 45%, far below the microburst threshold (90%).
pub const RULE_FRAME_GAP_NS: u64 = 2_000;

/// A RoCE QP of the rule scenarios: RC between 198.18.`net`.`hosts[0]` and `hosts[1]`, DSCP 26
/// ECT(0) both ways.
fn rule_qp(net: u8, hosts: [u8; 2], qpns: [u32; 2], first_psn: u32) -> QpStream {
    qp_v4(wire::TRANSPORT_RC, net, hosts, qpns, first_psn)
}

/// `n` RC QPs of a rule scenario, sender 198.18.`net`.(1 + i) to receiver .(101 + i), QP
/// numbers `qp_base + i` and `qp_base + 0x80 + i`, first PSN `psn_step * i`.
fn rule_pairs(net: u8, n: u32, qp_base: u32, psn_step: u32) -> Vec<QpStream> {
    (0..n)
        .map(|i| {
            let h = 1 + i as u8;
            rule_qp(
                net,
                [h, 100 + h],
                [qp_base + i, qp_base + 0x80 + i],
                psn_step * i,
            )
        })
        .collect()
}

/// The switch port of 198.18.`net`.0/24 that sends PFC frames in the rule scenarios.
fn rule_switch_port(net: u8) -> [u8; 6] {
    host_mac(u16::from(net) << 8 | 0xFE)
}

fn rules_clean(w: &mut Workload) {
    // Six clients (198.18.40.1-6), two QPs each, to two servers (clients 1-3 to .101, 4-6 to
    // .102: three senders per receiver at most): WRITEs, SENDs and READs in DSCP 26 ECT(0),
    // coalesced ACKs. Two QPs cross a congested hop (a CE mark on every 6th request), their
    // receivers answer with CNPs in DSCP 48 (one per 50 us at most). One XOFF on priority 3
    // (52 us at 10 Gb/s) and its XON. Frames 3 us apart (the pauses stay far below 1000 frames/s).
    // The QP numbers (and so the UDP source ports) are ones a crc32 5-tuple hash over 4 uplinks
    // spreads about as well as random hashing would (the median of the random trials): some
    // choices are unlucky, as on a real fabric.
    w.set_frame_gap(3_000);
    let port = rule_switch_port(40);
    let mut qps: Vec<QpStream> = (0..12u32)
        .map(|i| {
            let client = 1 + (i % 6) as u8;
            let server = if client <= 3 { 101 } else { 102 };
            let qpns = [0x401E + i, 0x411E + 7 * i];
            rule_qp(40, [client, server], qpns, 0x1000 * i + 5)
        })
        .collect();
    qps[1].ce_every = 6;
    qps[10].ce_every = 6;
    for round in 0..16 {
        for (i, qp) in qps.iter_mut().enumerate() {
            everyday_op(w, qp, round + 3 * i);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
        match round {
            5 => w.push_pause(&pfc(port, 0x08, quanta_at(3, 0x0400)), None),
            6 => w.push_pause(&pfc(port, 0x08, quanta_at(3, 0)), None),
            _ => {}
        }
    }
    ack_all(w, &mut qps);
}

fn rule_ce_without_cnp(w: &mut Workload) {
    // Two senders (198.18.41.1-2) WRITE to one receiver (.100) over a congested hop: every 4th
    // request is CE-marked. The receiver ACKs but its notification point is off: no CNP.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps: Vec<QpStream> = (0..2u32)
        .map(|i| rule_qp(41, [1 + i as u8, 100], [0x4101 + i, 0x4181 + i], 100 * i))
        .collect();
    for qp in &mut qps {
        qp.ce_every = 4;
    }
    for _ in 0..30 {
        for qp in &mut qps {
            qp.write(w, 4096);
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

fn rule_not_ect(w: &mut Workload) {
    // Three senders (198.18.42.1-3) WRITE to three receivers (.101-.103) in DSCP 26: the first
    // two ECT(0), the third Not-ECT (ECN off on its NIC; its receiver's ACKs too).
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(42, 3, 0x4201, 10);
    qps[2] = qps[2].clone().with_tos(DATA_DSCP, NOT_ECT);
    for step in 0..20 {
        for qp in &mut qps {
            qp.write(w, [4096, 2048, 8192][step % 3]);
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

fn rule_cnp_priority(w: &mut Workload) {
    // Two senders (198.18.43.1-2) WRITE to two receivers (.101-.102) over a congested hop (every
    // 5th request CE-marked); the receivers answer with CNPs (one per 50 us at most), but in
    // best-effort DSCP 0.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps: Vec<QpStream> = rule_pairs(43, 2, 0x4301, 7)
        .into_iter()
        .map(|qp| {
            let mut qp = qp.with_cnp_dscp(0);
            qp.ce_every = 5;
            qp
        })
        .collect();
    for _ in 0..24 {
        for qp in &mut qps {
            qp.write(w, 4096);
            qp.ack_if_due(w, 8);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
    }
    ack_all(w, &mut qps);
}

fn rule_dscp_mix(w: &mut Workload) {
    // Three senders (198.18.44.1-3) WRITE to three receivers (.101-.103), all ECT(0): two in
    // DSCP 26, the third left in best-effort DSCP 0 (both directions). No congestion.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(44, 3, 0x4401, 3);
    qps[2] = qps[2].clone().with_tos(0, ECT0);
    for step in 0..20 {
        for qp in &mut qps {
            qp.write(w, [2048, 4096][step % 2]);
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

fn rule_loss(w: &mut Workload) {
    // Two senders (198.18.45.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0); packets
    // are dropped twice on the way: PSN gaps, NAKs (PSN sequence error) and go-back-N.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(45, 2, 0x4501, 0x100);
    for round in 0..20 {
        for (i, qp) in qps.iter_mut().enumerate() {
            match (i, round) {
                (0, 5) => go_back_n(w, qp, 4096, 2, 8192),
                (1, 12) => go_back_n(w, qp, 2048, 1, 4096),
                _ => {
                    qp.write(w, 4096);
                    qp.ack_if_due(w, 8);
                }
            }
        }
    }
    ack_all(w, &mut qps);
}

fn rule_rnr(w: &mut Workload) {
    // Two senders (198.18.46.1-2) SEND to two receivers (.101-.102) in DSCP 26 ECT(0). Twice
    // the second receiver has no receive posted: an RNR NAK, and the requester sends the SEND
    // again after its RNR timer (the same PSN: the observer counts the retry as a
    // retransmission). No packet is lost.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps = rule_pairs(46, 2, 0x4601, 0x200);
    for round in 0..20 {
        for (i, qp) in qps.iter_mut().enumerate() {
            match (i, round) {
                (1, 6) | (1, 14) => {
                    let psn = qp.send(w, 512);
                    qp.nak(w, psn, SYNDROME_RNR_NAK);
                    qp.retransmit_from(w, psn);
                    qp.ack(w, psn);
                }
                _ => {
                    qp.send(w, 2048);
                    qp.ack_if_due(w, 8);
                }
            }
        }
    }
    ack_all(w, &mut qps);
}

fn rule_pfc_storm(w: &mut Workload) {
    // Two senders (198.18.47.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0), untagged
    // (priority 3), while a switch port keeps priority 3 paused: an XOFF of 192 quanta (9.8 us at
    // 10 Gb/s) every 12 us (some 90,000 frames/s, ~85% of the time paused), released by an XON
    // at the end.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let port = rule_switch_port(47);
    let mut qps = rule_pairs(47, 2, 0x4701, 11);
    for step in 0..40 {
        for qp in &mut qps {
            qp.write(w, 2048);
            qp.ack_if_due(w, 8);
        }
        let q3 = if step == 39 { 0 } else { 0x00C0 };
        w.push_pause(&pfc(port, 0x08, quanta_at(3, q3)), None);
    }
    ack_all(w, &mut qps);
}

fn rule_pfc_idle_priority(w: &mut Workload) {
    // Two senders (198.18.48.1-2) WRITE to two receivers (.101-.102) in DSCP 26 ECT(0), untagged
    // (priority 3), frames 50 us apart; a switch port pauses priority 5, which carries no RoCE,
    // three times (256 quanta each): a few frames, no storm.
    w.set_frame_gap(50_000);
    let port = rule_switch_port(48);
    let mut qps = rule_pairs(48, 2, 0x4801, 13);
    for step in 0..40 {
        for qp in &mut qps {
            qp.write(w, 2048);
            qp.ack_if_due(w, 8);
        }
        if step % 12 == 6 {
            w.push_pause(&pfc(port, 0x20, quanta_at(5, 0x0100)), None);
        }
    }
    ack_all(w, &mut qps);
}

fn rule_incast(w: &mut Workload) {
    // Six senders (198.18.49.1-6) WRITE to one receiver (.100) whose port congests: every 10th
    // request CE-marked; the receiver answers with CNPs in DSCP 48 (one per 50 us per QP at
    // most). Frames 2 us apart: no microburst.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps: Vec<QpStream> = (0..6u32)
        .map(|i| {
            let mut qp = rule_qp(49, [1 + i as u8, 100], [0x4901 + i, 0x4981 + i], 17 * i);
            qp.ce_every = 10;
            qp
        })
        .collect();
    for _ in 0..24 {
        for qp in &mut qps {
            qp.write(w, 4096);
            qp.ack_if_due(w, 16);
            qp.cnp_rate_limited(w, CNP_INTERVAL_NS);
        }
    }
    ack_all(w, &mut qps);
}

fn rule_microburst(w: &mut Workload) {
    // One sender (198.18.50.1) WRITEs 4 KiB messages to one receiver (.2) in DSCP 26 ECT(0):
    // 2 us apart, then back to back for about 500 us (PMTU frames 900 ns apart, some 96% of
    // 10 Gb/s), then 2 us apart again.
    let mut qp = rule_qp(50, [1, 2], [0x5001, 0x5081], 0);
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    for _ in 0..10 {
        qp.write(w, 4096);
        qp.ack_if_due(w, 8);
    }
    w.set_frame_gap(900);
    for _ in 0..140 {
        qp.write(w, 4096);
        qp.ack_if_due(w, 32);
    }
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    for _ in 0..10 {
        qp.write(w, 4096);
        qp.ack_if_due(w, 8);
    }
    let last = qp.last_psn();
    qp.ack(w, last);
}

fn rule_ecmp_imbalance(w: &mut Workload) {
    // Sixteen QPs between one pair of hosts (198.18.51.1 to .2) in DSCP 26 ECT(0), all with
    // the same UDP source port (overridden instead of varied per QP): one 5-tuple each way, so
    // a 5-tuple hash puts every QP's data on one uplink.
    w.set_frame_gap(RULE_FRAME_GAP_NS);
    let mut qps: Vec<QpStream> = (0..16u32)
        .map(|i| rule_qp(51, [1, 2], [0x5101 + i, 0x5181 + i], 1000 * i).with_udp_src_port(0xC000))
        .collect();
    for _ in 0..8 {
        for qp in &mut qps {
            qp.write(w, 4096);
            qp.ack_if_due(w, 8);
        }
    }
    ack_all(w, &mut qps);
}

// ---------------------------------------------------------------------------------------------
// Output: raw socket and pcap.
// ---------------------------------------------------------------------------------------------

/// Sends frames as raw Ethernet on `iface` (AF_PACKET SOCK_RAW bound to its ifindex), pausing
/// [`SEND_PAUSE`] every [`SEND_BATCH`] frames and retrying when the device queue is full, so that a
/// receiving veth ring never overflows. Returns the number of frames sent. Frames shorter than an
/// Ethernet header are refused by the kernel (use BPF_PROG_TEST_RUN for those).
pub fn send(iface: &str, frames: &[Frame]) -> Result<usize, SynthError> {
    let socket = PacketSocket::open(iface)?;
    for (index, frame) in frames.iter().enumerate() {
        socket.send(&frame.bytes, index)?;
        if (index + 1) % SEND_BATCH == 0 {
            std::thread::sleep(SEND_PAUSE);
        }
    }
    Ok(frames.len())
}

/// An AF_PACKET raw socket bound to one interface, that only sends (open it in the namespace of
/// the interface).
pub struct PacketSocket {
    fd: OwnedFd,
    iface: String,
}

impl PacketSocket {
    pub fn open(iface: &str) -> Result<Self, SynthError> {
        let unknown = || SynthError::UnknownInterface(iface.to_string());
        let name = CString::new(iface).map_err(|_| unknown())?;
        // SAFETY: `name` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(unknown());
        }
        let socket_err = |what, source: io::Error| match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => SynthError::NeedsCapNetRaw(iface.to_string()),
            _ => SynthError::Socket {
                iface: iface.to_string(),
                what,
                source,
            },
        };
        // SAFETY: plain socket(2) call; protocol 0: this socket only sends.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(socket_err("socket(AF_PACKET)", io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: `addr` is a valid sockaddr_ll of the given size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast::<libc::sockaddr>(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(socket_err("bind", io::Error::last_os_error()));
        }
        Ok(Self {
            fd,
            iface: iface.to_string(),
        })
    }

    /// Sends one frame (`index`: its position, for errors), retrying while the device queue
    /// is full.
    pub fn send(&self, bytes: &[u8], index: usize) -> Result<(), SynthError> {
        let len = bytes.len();
        let mut busy = 0;
        loop {
            // SAFETY: the pointer and length describe `bytes`.
            let n = unsafe { libc::send(self.fd.as_raw_fd(), bytes.as_ptr().cast(), len, 0) };
            if n >= 0 {
                let sent = n as usize;
                if sent != len {
                    return Err(SynthError::ShortSend {
                        iface: self.iface.clone(),
                        index,
                        len,
                        sent,
                    });
                }
                return Ok(());
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) if busy < 10_000 => {
                    busy += 1;
                    std::thread::sleep(Duration::from_micros(100));
                }
                _ => {
                    return Err(SynthError::Send {
                        iface: self.iface.clone(),
                        index,
                        len,
                        source: err,
                    });
                }
            }
        }
    }
}

/// Writes a classic pcap (Ethernet link type, nanosecond timestamps).
pub fn write_pcap<W: Write>(w: W, frames: &[Frame]) -> Result<(), SynthError> {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let header = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        snaplen: 65535,
        ..PcapHeader::default()
    };
    let mut writer = PcapWriter::with_header(w, header)?;
    for (index, f) in frames.iter().enumerate() {
        let len = f.bytes.len();
        let orig_len = u32::try_from(len).map_err(|_| SynthError::FrameTooLong { index, len })?;
        let packet = PcapPacket::new(Duration::from_nanos(f.ts_ns), orig_len, &f.bytes);
        writer.write_packet(&packet)?;
    }
    writer.into_writer().flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    use observer_common::parse;

    fn all_scenarios() -> Vec<(&'static str, Workload)> {
        SCENARIOS
            .iter()
            .map(|(name, _)| (*name, scenario(name).expect("listed scenario builds")))
            .collect()
    }

    /// What observer-common computes for the frames (the cross-check), with the fields the truth
    /// leaves out zeroed.
    fn parsed_truth(w: &Workload) -> Truth {
        let mut t = Truth::default();
        for f in &w.frames {
            let parsed = observer_common::parse_frame(f.bytes.as_slice());
            let r = parsed.result;
            t.counters.record(&r);
            t.counters.record_mirror(&parsed.mirror);
            if let Some(p) = parsed.pause(f.bytes.as_slice()) {
                t.pauses
                    .entry(PauseKey::of(&p, &parsed.mirror))
                    .or_default()
                    .record(&p, 0);
            }
            if let Ok(p) = &r {
                t.flows
                    .entry(FlowKey::of(p))
                    .or_default()
                    .record(p, f.ts_ns);
            }
        }
        for s in t.flows.values_mut() {
            s.first_seen_ns = 0;
            s.last_seen_ns = 0;
            s.psn_next_lo = 0;
            s.psn_next_hi = 0;
            s.psn_valid = 0;
        }
        t
    }

    #[test]
    fn parser_agrees_with_truth_in_every_scenario() {
        for (name, w) in all_scenarios() {
            let got = parsed_truth(&w);
            assert_eq!(got.counters, w.truth.counters, "{name}: counters");
            for (key, want) in &w.truth.flows {
                assert_eq!(got.flows.get(key), Some(want), "{name}: flow {key:?}");
            }
            assert_eq!(got.flows.len(), w.truth.flows.len(), "{name}: flow count");
            assert_eq!(got.pauses, w.truth.pauses, "{name}: pauses");
        }
    }

    fn class_totals(t: &Truth) -> [u64; OpClass::COUNT] {
        let mut ops = [0; OpClass::COUNT];
        for s in t.flows.values() {
            for (a, b) in ops.iter_mut().zip(s.ops) {
                *a += b;
            }
        }
        ops
    }

    #[test]
    fn e2e_truth_covers_every_reason_class_and_event() {
        let w = scenario("e2e").unwrap();
        let c = &w.truth.counters;
        for reason in SkipReason::ALL {
            assert!(c.skipped[reason as usize] > 0, "no {reason:?} frame");
        }
        let ops = class_totals(&w.truth);
        for class in OpClass::ALL {
            if class != OpClass::Other {
                assert!(ops[class as usize] > 0, "no {class:?} packet");
            }
        }
        let mut ecn = [0; 4];
        for s in w.truth.flows.values() {
            for (a, b) in ecn.iter_mut().zip(s.ecn) {
                *a += b;
            }
        }
        assert!(ecn.iter().all(|&n| n > 0), "ECN codepoints {ecn:?}");
        assert!(c.ce_packets > 0 && c.cnp_packets > 0);
        assert!(c.cnp_packets < c.ce_packets, "CNPs are rate limited");
        assert!(w.truth.flows.values().any(|s| s.psn_gaps > 0));
        assert!(w.truth.flows.values().any(|s| s.psn_regressions > 0));
        assert_eq!(c.frames, w.frames.len() as u64);
        let skipped: u64 = c.skipped.iter().sum();
        assert_eq!(c.roce_packets + skipped, c.frames);
    }

    #[test]
    fn corpus_covers_every_opcode_dscp_and_option_length() {
        let w = scenario("corpus").unwrap();
        let mut dscp = 0u64;
        for s in w.truth.flows.values() {
            dscp |= s.dscp_mask;
        }
        assert_eq!(dscp, u64::MAX);
        let opcodes: Vec<u8> = corpus_opcodes().collect();
        assert!(opcodes.len() > 200, "{} opcodes", opcodes.len());
        for opcode in [
            0x00, 0x2B, 0x4C, 0x55, 0x64, 0x65, 0x81, 0x9F, 0xB4, 0xC0, 0xFF,
        ] {
            assert!(opcodes.contains(&opcode), "{opcode:#x}");
        }
        assert!(class_totals(&w.truth)[OpClass::Other as usize] > 0);
    }

    #[test]
    fn lossy_demo_qp_has_one_gap_of_three_and_one_regression() {
        let w = scenario("demo").unwrap();
        let key = qp_v4(wire::TRANSPORT_RC, 0, [7, 8], [0x0E02, 0x1B02], 0)
            .req
            .flow_key();
        let s = w.truth.flows[&key];
        assert_eq!((s.psn_gaps, s.psn_missing, s.psn_regressions), (1, 3, 1));
        assert_eq!(s.ops[OpClass::Nak as usize], 0, "NAKs flow the other way");
        let others: u64 = w
            .truth
            .flows
            .iter()
            .filter(|(k, _)| **k != key)
            .map(|(_, s)| s.psn_gaps + s.psn_regressions)
            .sum();
        assert_eq!(others, 0);
    }

    #[test]
    fn read_consumes_psns_by_pmtu_and_responses_use_them() {
        let mut w = Workload::default();
        let mut qp = qp_v4(wire::TRANSPORT_RC, 9, [1, 2], [1, 2], 100);
        let psn = qp.read(&mut w, 65536);
        assert_eq!(psn, 100);
        assert_eq!(qp.next_psn(), 164);
        assert_eq!(w.len(), 1 + 64);
        qp.write(&mut w, 1024);
        assert_eq!(w.truth.flows[&qp.req.flow_key()].psn_gaps, 0);
        // A loss right after a READ: the observer accepts up to ceil(65536/256) = 256 PSNs past
        // the READ's PSN while the stream moved on by 64, so 100 lost PSNs go unnoticed and 300
        // show as a gap of 64 + 300 - 256.
        qp.read(&mut w, 65536);
        qp.lose_next(100);
        qp.write(&mut w, 101 * 1024);
        assert_eq!(w.truth.flows[&qp.req.flow_key()].psn_gaps, 0);
        qp.read(&mut w, 65536);
        qp.lose_next(300);
        qp.write(&mut w, 301 * 1024);
        let s = w.truth.flows[&qp.req.flow_key()];
        assert_eq!((s.psn_gaps, s.psn_missing), (1, 64 + 300 - 256));
    }

    #[test]
    fn push_cut_decides_from_the_offset() {
        let mut nak = opcode_frame(wire::TRANSPORT_RC | op::ACKNOWLEDGE, SYNDROME_NAK_SEQ, 7);
        nak.payload_len = 0;
        let mut w = Workload::default();
        let bth_end = nak.bth_end();
        for keep in [
            bth_end - 1,
            bth_end,
            bth_end + 3,
            bth_end + 4,
            nak.frame_len(),
        ] {
            w.push_cut(&nak, OpClass::Nak, PsnEvent::None, keep);
        }
        let s = w.truth.flows[&nak.flow_key()];
        assert_eq!(w.truth.counters.skipped[SkipReason::Truncated as usize], 1);
        assert_eq!(
            (s.ops[OpClass::Ack as usize], s.ops[OpClass::Nak as usize]),
            (2, 2)
        );
        assert_eq!(s.bytes, 4 * u64::from(nak.ip_len()));
    }

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

    #[test]
    fn scenario_frames_are_plausible() {
        for (name, w) in all_scenarios() {
            assert!(!w.is_empty(), "{name}");
            for pair in w.frames.windows(2) {
                assert!(pair[0].ts_ns < pair[1].ts_ns, "{name}: timestamps");
            }
            for (i, f) in w.frames.iter().enumerate() {
                if f.bytes.len() >= 12 {
                    let src = f.bytes[6];
                    assert_eq!(src & 3, 2, "{name} frame {i}: source MAC {src:#x}");
                }
                let parsed = SlicedPacket::from_ethernet(&f.bytes);
                if let Ok(SlicedPacket {
                    net: Some(NetSlice::Ipv4(ip)),
                    ..
                }) = parsed
                {
                    let h = ip.header();
                    assert_eq!(
                        h.header_checksum(),
                        h.to_header().calc_header_checksum(),
                        "{name} frame {i}"
                    );
                }
            }
            for key in w.truth.flows.keys() {
                for ip in [key.src_ip, key.dst_ip] {
                    let v4_bench = ip[..12]
                        == Ipv4Addr::UNSPECIFIED.to_ipv6_mapped().octets()[..12]
                        && ip[12] == 198
                        && (ip[13] & 0xFE) == 18;
                    let v6_doc = ip[..4] == [0x20, 0x01, 0x0d, 0xb8];
                    assert!(v4_bench || v6_doc, "{name}: address {ip:?}");
                }
            }
        }
    }

    #[test]
    fn scenarios_are_deterministic_and_sized() {
        let a = scenario("e2e").unwrap();
        let b = scenario("e2e").unwrap();
        assert_eq!(a.truth, b.truth);
        assert!(
            a.frames
                .iter()
                .zip(&b.frames)
                .all(|(x, y)| x.bytes == y.bytes)
        );
        let demo = scenario("demo").unwrap();
        assert!(
            (500..4000).contains(&demo.len()),
            "demo has {} frames",
            demo.len()
        );
        let many = scenario("many-qps").unwrap();
        let requesters = many
            .truth
            .flows
            .values()
            .filter(|s| s.ops[OpClass::Write as usize] > 0)
            .count();
        assert_eq!(requesters, 1000);
        assert!(scenario("no-such-scenario").is_none());
    }

    fn cnp_count(w: &Workload) -> u64 {
        w.truth.counters.cnp_packets
    }

    fn sum_flows(w: &Workload, f: impl Fn(&FlowStats) -> u64) -> u64 {
        w.truth.flows.values().map(f).sum()
    }

    #[test]
    fn user_scenarios_are_deterministic_whole_and_sized() {
        let names: Vec<&str> = scenario_names().collect();
        for name in USER_SCENARIOS {
            assert!(names.contains(&name), "{name} not in SCENARIOS");
            let w = scenario(name).unwrap();
            let again = scenario(name).unwrap();
            assert_eq!(w.truth, again.truth, "{name}");
            assert!(
                w.frames
                    .iter()
                    .zip(&again.frames)
                    .all(|(x, y)| x.bytes == y.bytes && x.ts_ns == y.ts_ns),
                "{name}: not deterministic"
            );
            if name != "many-qps" {
                assert!((300..5000).contains(&w.len()), "{name}: {} frames", w.len());
            }
            // Only RoCE, and PAUSE / PFC frames (whole, each itemized in the pause table).
            let c = &w.truth.counters;
            let pauses: u64 = w.truth.pauses.values().map(|s| s.frames_total()).sum();
            assert_eq!(c.skipped[SkipReason::MacControl as usize], pauses, "{name}");
            assert_eq!(c.roce_packets + pauses, c.frames, "{name}: skipped frames");
            for (i, f) in w.frames.iter().enumerate() {
                if f.bytes[12..14] == wire::ETHERTYPE_MAC_CONTROL.to_be_bytes() {
                    assert_eq!(f.bytes.len(), 60, "{name} frame {i}");
                    continue;
                }
                let p = parse(f.bytes.as_slice()).unwrap();
                assert_eq!(
                    p.ip_len as usize + 14 + 4 * usize::from(p.vlan_count),
                    f.bytes.len()
                );
                assert!(
                    p.udp_src_port >= 1024,
                    "{name} frame {i}: port {}",
                    p.udp_src_port
                );
            }
            for pair in w.frames.windows(2) {
                assert!(pair[1].ts_ns - pair[0].ts_ns <= FRAME_GAP_NS, "{name}");
            }
        }
    }

    #[test]
    fn clean_has_reads_writes_sends_and_no_trouble() {
        let w = scenario("clean").unwrap();
        let ops = class_totals(&w.truth);
        for class in [
            OpClass::Write,
            OpClass::Send,
            OpClass::ReadRequest,
            OpClass::ReadResponse,
            OpClass::Ack,
        ] {
            assert!(ops[class as usize] > 0, "no {class:?}");
        }
        // Coalesced: far fewer ACKs than request packets.
        assert!(ops[OpClass::Write as usize] > 2 * ops[OpClass::Ack as usize]);
        assert_eq!(w.truth.counters.ce_packets + cnp_count(&w), 0);
        assert_eq!(sum_flows(&w, |s| s.psn_gaps + s.psn_regressions), 0);
        assert_eq!(
            ops[OpClass::Nak as usize] + ops[OpClass::RnrNak as usize],
            0
        );
        for s in w.truth.flows.values() {
            assert_eq!(s.dscp_mask, 1 << DATA_DSCP);
            assert_eq!(s.ecn[usize::from(ECT0)], s.packets);
        }
    }

    #[test]
    fn incast_congests_and_cnps_are_rate_limited_per_flow() {
        let w = scenario("incast").unwrap();
        let c = &w.truth.counters;
        assert!(c.ce_packets > 0 && c.cnp_packets > 0);
        assert!(c.cnp_packets < c.ce_packets);
        // The share of CE grows: the last quarter of the data has more marks than the first half.
        let data: Vec<bool> = w
            .frames
            .iter()
            .map(|f| parse(f.bytes.as_slice()).unwrap())
            .filter(|p| intended_class(p.bth.opcode, 0) == OpClass::Write)
            .map(|p| p.tos & 3 == CE)
            .collect();
        let n = data.len();
        let marked = |s: &[bool]| s.iter().filter(|&&b| b).count();
        assert!(marked(&data[..n / 2]) < marked(&data[3 * n / 4..]));
        // Every sender's QP gets CNPs, never two within 50 us.
        let mut last: BTreeMap<FlowKey, u64> = BTreeMap::new();
        for f in &w.frames {
            let p = parse(f.bytes.as_slice()).unwrap();
            if p.bth.opcode != wire::OPCODE_CNP {
                continue;
            }
            assert!(p.bth.becn && p.tos >> 2 == CNP_DSCP);
            if let Some(prev) = last.insert(FlowKey::of(&p), f.ts_ns) {
                assert!(
                    f.ts_ns - prev >= CNP_INTERVAL_NS,
                    "CNPs {} ns apart",
                    f.ts_ns - prev
                );
            }
        }
        assert_eq!(last.len(), 8, "one CNP flow per sender");
        let receivers: std::collections::BTreeSet<[u8; 16]> =
            w.truth.flows.keys().map(|k| k.dst_ip).collect();
        assert_eq!(receivers.len(), 9, "8 senders and one receiver");
    }

    #[test]
    fn loss_has_gaps_regressions_naks_and_an_rnr_nak() {
        let w = scenario("loss").unwrap();
        let ops = class_totals(&w.truth);
        assert!(ops[OpClass::Nak as usize] >= 3);
        assert_eq!(ops[OpClass::RnrNak as usize], 1);
        assert_eq!(sum_flows(&w, |s| s.psn_gaps), 4);
        assert_eq!(sum_flows(&w, |s| s.psn_missing), 2 + 1 + 1 + 3);
        assert_eq!(sum_flows(&w, |s| s.psn_regressions), 5);
        assert_eq!(w.truth.counters.ce_packets, 0);
    }

    #[test]
    fn mixed_dscp_covers_six_dscps_every_ecn_and_a_remarked_flow() {
        let w = scenario("mixed-dscp").unwrap();
        let mut dscp = 0u64;
        let mut ecn = [0; 4];
        for s in w.truth.flows.values() {
            dscp |= s.dscp_mask;
            for (a, b) in ecn.iter_mut().zip(s.ecn) {
                *a += b;
            }
        }
        for d in [0, 10, 26, 34, 46, 48] {
            assert!(dscp & (1 << d) != 0, "no DSCP {d}");
        }
        assert!(dscp.count_ones() >= 6);
        assert!(ecn.iter().all(|&n| n > 0), "ECN {ecn:?}");
        let both = (1 << 26) | (1 << 34);
        let remarked = w
            .truth
            .flows
            .values()
            .filter(|s| s.dscp_mask == both)
            .count();
        assert_eq!(remarked, 2, "the re-marked QP, both directions");
        assert!(cnp_count(&w) > 0);
    }

    #[test]
    fn pfc_scenario_pauses_priority_3_and_4_and_the_link() {
        let w = scenario("pfc").unwrap();
        let [storm, dual, nic] = PFC_SENDERS.map(|m| {
            &w.truth.pauses[&PauseKey {
                src_mac: m,
                mirror: 0,
            }]
        });
        // Storm: 39 pauses of 65535 quanta on priority 3, one XON, and one empty vector.
        assert_eq!(
            (storm.pfc_frames, storm.frames[3], storm.xon[3]),
            (41, 40, 1)
        );
        assert_eq!(storm.quanta[3], 39 * 65535);
        assert_eq!(
            storm.frames.iter().sum::<u64>(),
            40,
            "only priority 3 named"
        );
        // Priorities 3 and 4 together; 5's time is not enabled and never counted.
        assert_eq!(
            (dual.frames[3], dual.frames[4], dual.frames[5]),
            (10, 10, 0)
        );
        assert_eq!((dual.xon[3], dual.xon[4], dual.quanta[5]), (1, 1, 0));
        // 802.3x PAUSE: the whole link.
        assert_eq!(
            (nic.pfc_frames, nic.frames[LINK_PAUSE], nic.xon[LINK_PAUSE]),
            (0, 4, 1)
        );
        assert_eq!(nic.quanta[LINK_PAUSE], 3 * 0x200);
        // The RoCE beside it is clean.
        assert!(
            w.truth
                .flows
                .values()
                .all(|s| s.psn_gaps + s.psn_regressions == 0)
        );
        assert!(
            w.truth
                .flows
                .values()
                .any(|s| s.ops[OpClass::Write as usize] > 0)
        );
    }

    #[test]
    fn ipv6_vlan_mixes_ipv6_one_and_two_tags() {
        let w = scenario("ipv6-vlan").unwrap();
        let mut seen = BTreeMap::new();
        for f in &w.frames {
            let p = parse(f.bytes.as_slice()).unwrap();
            let v6 = p.src_ip[..12] != Ipv4Addr::UNSPECIFIED.to_ipv6_mapped().octets()[..12];
            let tags: Vec<(u16, u8)> = p.vlans[..usize::from(p.vlan_count)]
                .iter()
                .map(|t| (t.tpid, t.pcp))
                .collect();
            *seen.entry((v6, tags)).or_insert(0) += 1;
        }
        let q = (wire::ETHERTYPE_VLAN, 3);
        let ad = (wire::ETHERTYPE_QINQ, 3);
        for v6 in [false, true] {
            for tags in [vec![], vec![q], vec![ad, q]] {
                assert!(
                    seen.contains_key(&(v6, tags.clone())),
                    "v6 {v6} tags {tags:?}"
                );
            }
        }
        assert_eq!(seen.len(), 6);
    }

    #[test]
    fn rule_scenarios_are_deterministic_and_cnps_keep_dscp_48_unless_told() {
        let rules: Vec<&str> = scenario_names()
            .filter(|n| n.starts_with("rule-") || *n == "rules-clean")
            .collect();
        assert_eq!(rules.len(), 12, "{rules:?}");
        for (name, w) in all_scenarios() {
            if rules.contains(&name) {
                let again = scenario(name).unwrap();
                assert_eq!(w.truth, again.truth, "{name}");
                assert!(
                    w.frames
                        .iter()
                        .zip(&again.frames)
                        .all(|(x, y)| x.bytes == y.bytes && x.ts_ns == y.ts_ns),
                    "{name}: not deterministic"
                );
            }
            if name == "corpus" {
                // Its every-opcode frames include a hand-built CNP in DSCP 26.
                continue;
            }
            let want = if name == "rule-cnp-priority" {
                1
            } else {
                1 << CNP_DSCP
            };
            for s in w.truth.flows.values() {
                if s.ops[OpClass::Cnp as usize] > 0 {
                    assert_eq!(s.cnp_dscp_mask, want, "{name}");
                }
            }
        }
    }

    #[test]
    fn pcap_round_trip_keeps_bytes_and_timestamps() {
        let w = scenario("e2e").unwrap();
        let mut buf = Vec::new();
        write_pcap(&mut buf, &w.frames).unwrap();
        let mut r = pcap_file::pcap::PcapReader::new(buf.as_slice()).unwrap();
        assert_eq!(r.header().datalink, pcap_file::DataLink::ETHERNET);
        let mut n = 0;
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            let f = &w.frames[n];
            assert_eq!(p.data.as_ref(), f.bytes.as_slice());
            assert_eq!(p.timestamp.as_nanos(), u128::from(f.ts_ns));
            n += 1;
        }
        assert_eq!(n, w.len());
    }

    #[test]
    fn send_names_an_unknown_interface() {
        let err = send("synth-nonexistent0", &[]).unwrap_err();
        assert!(matches!(&err, SynthError::UnknownInterface(n) if n == "synth-nonexistent0"));
        assert!(err.to_string().contains("synth-nonexistent0"));
        assert!(matches!(
            send("bad\0name", &[]),
            Err(SynthError::UnknownInterface(_))
        ));
    }
}
