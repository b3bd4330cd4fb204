//! The connection manager's MADs (InfiniBand Architecture vol. 1, chapter 12), carried in UD
//! SENDs to QP 1: a REQ names the requester's QP and its starting PSN, the REP the responder's
//! and its own, and the REP names the REQ by its communication ID. Together they pair the two
//! directions of a connection exactly, whatever ports they use. Read from the frame's end, for
//! packets to QP 1, the same in the kernel and in replay: a MAD is always 256 bytes, the
//! datagram's last bytes before the ICRC, and its header (base version 1, the CM class) is
//! checked. (Not from an offset the parser
//! keeps: a field more in every parsed packet cost the kernel program's verification more
//! than half again, for a packet seen a few times per connection.)

use core::mem::size_of;

use crate::flow::{FlowKey, MIRROR_UNION};
use crate::parse::Bytes;

/// The MAD management class of the communication manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// Attribute IDs: ConnectRequest, ConnectReply.
pub const CM_REQ: u16 = 0x0010;
pub const CM_REP: u16 = 0x0013;
/// The MAD header: base version, class, class version, method, status, class specific,
/// transaction ID, attribute ID, reserved, attribute modifier.
const MAD_HEADER_LEN: usize = 24;
/// A MAD, and the ICRC after it.
const MAD_LEN: usize = 256;
const ICRC_LEN: usize = 4;
/// Where the MAD of a UD datagram to QP 1 starts in a frame of `len` bytes
/// (the frame ends with the datagram: no Ethernet FCS or padding kept).
#[inline(always)]
pub const fn mad_at(len: usize) -> usize {
    len.wrapping_sub(MAD_LEN + ICRC_LEN)
}

/// What a REQ or a REP says (`attr` 0: neither, or cut before its fields).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmMad {
    pub attr: u16,
    pub _pad: u16,
    /// The sender's communication ID.
    pub local_comm: u32,
    /// The REP's: the REQ's communication ID (0 in a REQ).
    pub remote_comm: u32,
    /// The sender's QP and the PSN its requests start at.
    pub qpn: u32,
    pub psn: u32,
}

#[inline(always)]
fn be32<B: Bytes + ?Sized>(b: &B, off: usize) -> Option<u32> {
    b.load::<[u8; 4]>(off).map(u32::from_be_bytes)
}

/// The REQ or REP whose MAD starts at byte `mad` of frame `b` ([`CmMad::default`] for any other
/// MAD, or one cut short).
#[inline(always)]
pub fn read_cm<B: Bytes + ?Sized>(b: &B, mad: usize) -> CmMad {
    // MADs start within the first few hundred bytes (after a mirror copy's outer headers, the
    // inner ones). The mask tells the BPF verifier so (see `read_pause`).
    let mad = mad & 0x3FF;
    let mut m = CmMad::default();
    let Some(head) = b.load::<[u8; 20]>(mad) else {
        return m;
    };
    // Base version 1, the CM class.
    if head[0] != 1 || head[1] != MGMT_CLASS_CM {
        return m;
    }
    let attr = u16::from_be_bytes([head[16], head[17]]);
    let data = mad + MAD_HEADER_LEN;
    // REQ: local communication ID at 0, local QPN at 32, starting PSN at 44 (24 bits each,
    // then 8 bits of other fields). REP: local and remote communication IDs at 0 and 4, local
    // QPN at 12, starting PSN at 20.
    let (qpn_at, psn_at) = match attr {
        CM_REQ => (32, 44),
        CM_REP => (12, 20),
        _ => return m,
    };
    let (Some(local), Some(remote), Some(qpn), Some(psn)) = (
        be32(b, data),
        be32(b, data + 4),
        be32(b, data + qpn_at),
        be32(b, data + psn_at),
    ) else {
        return m;
    };
    m.attr = attr;
    m.local_comm = local;
    m.remote_comm = if attr == CM_REP { remote } else { 0 };
    m.qpn = qpn >> 8;
    m.psn = psn >> 8;
    m
}

/// One connection set up by the connection manager: the requester (who sent the REQ), the
/// responder, the REQ's communication ID and the observation (direct, or every mirror session
/// together).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmKey {
    pub requester: [u8; 16],
    pub responder: [u8; 16],
    pub comm: u32,
    pub mirror: u16,
    pub _pad: u16,
}
const _: () = assert!(size_of::<CmKey>() == 40);

/// `CmConn::flags`: the REQ was seen, the REP was seen.
pub const CM_SEEN_REQ: u32 = 1;
pub const CM_SEEN_REP: u32 = 1 << 1;

/// What the REQ and the REP of one connection said.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmConn {
    pub req_qpn: u32,
    pub req_psn: u32,
    pub rep_qpn: u32,
    pub rep_psn: u32,
    pub flags: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<CmConn>() == 24);

impl CmKey {
    /// Sets this key to the connection of MAD `m`, sent in flow `k`; false when `m` is no REQ or
    /// REP.
    #[inline(always)]
    pub fn set(&mut self, m: &CmMad, k: &FlowKey) -> bool {
        match m.attr {
            CM_REQ => {
                self.requester = k.src_ip;
                self.responder = k.dst_ip;
                self.comm = m.local_comm;
            }
            CM_REP => {
                self.requester = k.dst_ip;
                self.responder = k.src_ip;
                self.comm = m.remote_comm;
            }
            _ => return false,
        }
        self.mirror = if k.mirror & 0x8000 != 0 {
            MIRROR_UNION
        } else {
            0
        };
        self._pad = 0;
        true
    }
}

impl CmConn {
    /// Takes in what MAD `m` says (REQ or REP). Plain stores of whole fields: a REQ and its
    /// REP are far apart in time.
    #[inline(always)]
    pub fn record(&mut self, m: &CmMad) {
        if m.attr == CM_REQ {
            self.req_qpn = m.qpn;
            self.req_psn = m.psn;
            self.flags |= CM_SEEN_REQ;
        } else if m.attr == CM_REP {
            self.rep_qpn = m.qpn;
            self.rep_psn = m.psn;
            self.flags |= CM_SEEN_REP;
        }
    }

    /// Both the REQ and the REP were seen.
    pub const fn complete(&self) -> bool {
        self.flags & (CM_SEEN_REQ | CM_SEEN_REP) == CM_SEEN_REQ | CM_SEEN_REP
    }

    /// Adds another view (per key, as the kernel's shared value is read).
    pub fn merge(&mut self, o: &CmConn) {
        if o.flags & CM_SEEN_REQ != 0 {
            self.req_qpn = o.req_qpn;
            self.req_psn = o.req_psn;
        }
        if o.flags & CM_SEEN_REP != 0 {
            self.rep_qpn = o.rep_qpn;
            self.rep_psn = o.rep_psn;
        }
        self.flags |= o.flags;
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), no padding (asserted above), every bit pattern valid.
    unsafe impl aya::Pod for super::CmKey {}
    unsafe impl aya::Pod for super::CmConn {}
}
