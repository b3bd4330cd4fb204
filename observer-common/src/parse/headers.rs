//! The parsed packet: the BTH, every field, and the extended transport headers kept (AETH,
//! RETH length, DETH).

use super::{Mirror, OpClass, Transport, VlanTag, classify_raw};
use crate::wire;

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
