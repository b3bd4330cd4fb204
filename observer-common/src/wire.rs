//! RoCEv2 wire constants (see docs/wire.md; IBTA annex A17).

pub const ETH_HEADER_LEN: usize = 14;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
pub const ETHERTYPE_QINQ: u16 = 0x88A8;
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// MAC control (802.3 annex 31B): 802.3x PAUSE and 802.1Qbb PFC.
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// MAC control opcode of an 802.3x PAUSE frame (one 16-bit pause time).
pub const MAC_CONTROL_PAUSE: u16 = 0x0001;
/// MAC control opcode of an 802.1Qbb PFC frame (class-enable vector, eight pause times).
pub const MAC_CONTROL_PFC: u16 = 0x0101;
/// PFC priorities (802.1p classes).
pub const PFC_PRIORITIES: usize = 8;
/// One pause quantum is 512 bit times (5.12 ns at 100 Gb/s).
pub const PAUSE_QUANTUM_BITS: u64 = 512;
pub const VLAN_TAG_LEN: usize = 4;
/// Tags accepted before the IP header (802.1ad outer plus 802.1Q inner).
pub const MAX_VLAN_TAGS: usize = 2;

pub const IPV4_MIN_HEADER_LEN: usize = 20;
pub const IPV6_HEADER_LEN: usize = 40;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;
pub const IPV6_NEXT_FRAGMENT: u8 = 44;
pub const IPV4_MORE_FRAGMENTS: u16 = 0x2000;
pub const IPV4_FRAGMENT_OFFSET_MASK: u16 = 0x1FFF;

pub const IPPROTO_GRE: u8 = 47;
pub const GRE_HEADER_LEN: usize = 4;
pub const GRE_CHECKSUM: u16 = 0x8000;
pub const GRE_ROUTING: u16 = 0x4000;
pub const GRE_KEY: u16 = 0x2000;
pub const GRE_SEQUENCE: u16 = 0x1000;
pub const GRE_VERSION_MASK: u16 = 0x0007;
/// ERSPAN type I (no sequence number, no ERSPAN header) and type II (sequence number, 8-byte
/// header, version 1).
pub const GRE_PROTO_ERSPAN: u16 = 0x88BE;
/// ERSPAN type III (12-byte header, version 2, optional 8-byte platform subheader).
pub const GRE_PROTO_ERSPAN3: u16 = 0x22EB;
/// Transparent Ethernet bridging: raw Ethernet inside GRE.
pub const GRE_PROTO_TEB: u16 = 0x6558;
pub const ERSPAN2_HEADER_LEN: usize = 8;
pub const ERSPAN3_HEADER_LEN: usize = 12;
pub const ERSPAN3_PLATFORM_LEN: usize = 8;
/// ERSPAN session IDs are 10 bits.
pub const ERSPAN_SESSIONS: usize = 1024;

pub const UDP_HEADER_LEN: usize = 8;
/// IANA port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;

pub const BTH_LEN: usize = 12;
pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const DETH_LEN: usize = 8;
pub const RDETH_LEN: usize = 4;
pub const XRCETH_LEN: usize = 4;
pub const IMMDT_LEN: usize = 4;
pub const IETH_LEN: usize = 4;
pub const ATOMIC_ETH_LEN: usize = 28;
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
pub const ICRC_LEN: usize = 4;

/// Transport (top 3 bits of the opcode).
pub const TRANSPORT_RC: u8 = 0x00;
pub const TRANSPORT_UC: u8 = 0x20;
pub const TRANSPORT_RD: u8 = 0x40;
pub const TRANSPORT_UD: u8 = 0x60;
pub const TRANSPORT_CNP: u8 = 0x80;
pub const TRANSPORT_XRC: u8 = 0xA0;

/// The RoCEv2 congestion notification packet.
pub const OPCODE_CNP: u8 = 0x81;

/// Operations (low 5 bits of the opcode).
pub mod op {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0A;
    pub const WRITE_ONLY_IMM: u8 = 0x0B;
    pub const READ_REQUEST: u8 = 0x0C;
    pub const READ_RESPONSE_FIRST: u8 = 0x0D;
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0E;
    pub const READ_RESPONSE_LAST: u8 = 0x0F;
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACKNOWLEDGE: u8 = 0x11;
    pub const ATOMIC_ACKNOWLEDGE: u8 = 0x12;
    pub const COMPARE_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
    pub const SEND_LAST_INV: u8 = 0x16;
    pub const SEND_ONLY_INV: u8 = 0x17;
}

/// AETH syndrome classes (top 3 bits).
pub const AETH_ACK: u8 = 0b000;
pub const AETH_RNR_NAK: u8 = 0b001;
pub const AETH_NAK: u8 = 0b011;
/// NAK code: PSN sequence error (the PSN names the expected PSN).
pub const NAK_PSN_SEQUENCE_ERROR: u8 = 0x60;

/// PSNs are 24 bits and compare modulo 2^24.
pub const PSN_MASK: u32 = 0x00FF_FFFF;
/// Smallest and largest valid path MTU: a READ request of L bytes consumes between
/// ceil(L / 4096) and ceil(L / 256) PSNs (at least one).
pub const PMTU_MIN: u32 = 256;
pub const PMTU_MAX: u32 = 4096;

/// The UDP source port Linux RDMA drivers (mlx5, irdma, hns, rxe) give an RC/UC connection:
/// `rdma_calc_flow_label` then `rdma_flow_label_to_udp_sport`. Symmetric in the two QPNs, so
/// both directions use the same port.
pub const fn rdma_udp_sport(lqpn: u32, rqpn: u32) -> u16 {
    let mut fl = lqpn as u64 * rqpn as u64;
    fl ^= fl >> 20;
    fl ^= fl >> 40;
    flow_label_to_udp_sport((fl & 0xF_FFFF) as u32)
}

/// The UDP source port derived from a 20-bit flow label (a GRH flow label overrides the QPN
/// rule).
pub const fn flow_label_to_udp_sport(flow_label: u32) -> u16 {
    let fl = flow_label & 0xF_FFFF;
    (((fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14)) | 0xC000) as u16
}
