//! Messages: what the verbs posted, told from the requests of a connected QP (RC, UC, XRC).
//! One update for kernel and replay.
//!
//! - A **WRITE** is as long as the DMA length of the RETH of its FIRST or ONLY packet.
//! - A **READ** is as long as its request's DMA length (the data flows the other way).
//! - A **SEND** is assembled from its FIRST and LAST packets: every FIRST and MIDDLE packet
//!   carries exactly one path MTU, so a SEND of FIRST at PSN f (payload m) and LAST at PSN l
//!   (payload r) holds (l - f) * m + r bytes; an ONLY packet is the whole message. The MIDDLE
//!   packets need not be seen (nor touch any state).
//!
//! Only a request's first sighting counts (its PSN never seen before by the PSN analysis: in
//! order, ahead, or filling a hole, even inside a resend run): a resent or duplicated packet
//! repeats a message already counted. A request inside a READ's range (a protocol violation,
//! reported by the PSN analysis) is none. A SEND whose PSNs jumped between its FIRST and LAST
//! (packets lost before the observation point, a new incarnation of the QP) has no size: its
//! LAST may end another SEND than the FIRST began. A SEND whose LAST comes without its
//! FIRST (lost before the tap, or before the observation began) and a WRITE or READ whose RETH
//! was cut off (a truncated mirror copy) are counted as messages of unknown size.
//!
//! UD has no PSN analysis to tell a datagram from its copy; each UD packet is one message, and
//! the flow's packet count says how many.

use core::mem::size_of;

use crate::loghist::LogScale;
use crate::parse::{
    BOUNDARY_OPS, IMM_OPS, SEND_LAST_OPS, SEND_ONLY_OPS, SEND_OPS, Transport, in_set,
};
use crate::seq::{F_FRESH, F_HOLED, SeqInput, psn_after, psn_sub};
use crate::wire::op;

/// The kinds of message, as indexes of [`MsgStats::count`] and [`MsgStats::bytes`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MsgKind {
    Send = 0,
    Write = 1,
    Read = 2,
}

impl MsgKind {
    pub const ALL: [MsgKind; 3] = [Self::Send, Self::Write, Self::Read];
    pub const COUNT: usize = 3;

    pub const fn name(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Write => "write",
            Self::Read => "read",
        }
    }
}

/// Message sizes: 4 buckets per octave (edges 25% apart or less) from 16 B to 4 GiB.
pub const MSG_SCALE: LogScale = LogScale {
    min_shift: 4,
    octaves: 28,
    sub_bits: 2,
};
/// Buckets of [`MsgStats::buckets`].
pub const MSG_BUCKETS: usize = MSG_SCALE.buckets();

/// The messages of one flow (one direction of a QP), in the flow's analysis entry (a mirror
/// copy's: every mirror session's together). Counts are summed on merge; the open SEND
/// follows the newer view.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgStats {
    /// Messages of known size, per [`MsgKind`].
    pub count: [u64; MsgKind::COUNT],
    /// Their bytes, per [`MsgKind`].
    pub bytes: [u64; MsgKind::COUNT],
    /// Messages whose size the observation could not tell.
    pub unknown_size: u64,
    /// The smallest and largest size (meaningful when a count is non-zero).
    pub min: u64,
    pub max: u64,
    /// Sizes, every kind together ([`MSG_SCALE`]).
    pub buckets: [u64; MSG_BUCKETS],
    /// The open SEND: its FIRST's PSN and payload (one path MTU); none while `open_pmtu` is 0.
    pub open_psn: u32,
    pub open_pmtu: u32,
}
const _: () = assert!(size_of::<MsgStats>() == (2 * MsgKind::COUNT + 3 + MSG_BUCKETS + 1) * 8);

impl Default for MsgStats {
    fn default() -> Self {
        Self {
            count: [0; MsgKind::COUNT],
            bytes: [0; MsgKind::COUNT],
            unknown_size: 0,
            min: 0,
            max: 0,
            buckets: [0; MSG_BUCKETS],
            open_psn: 0,
            open_pmtu: 0,
        }
    }
}

/// The bytes of payload of a SEND packet (pad bytes excluded), from the UDP length (so a
/// truncated mirror copy counts fully); `None` for any other packet or a length too short.
#[inline(always)]
pub fn send_payload(p: &SeqInput) -> Option<u32> {
    if !in_set(SEND_OPS, p.opcode) {
        return None;
    }
    // ImmDt, IETH.
    let ext = if in_set(IMM_OPS, p.opcode) { 4 } else { 0 };
    let xrc = match p.transport() {
        Transport::Xrc => 4,
        Transport::Rc | Transport::Uc => 0,
        _ => return None,
    };
    // UDP header, BTH, ICRC.
    (p.udp_len as u32).checked_sub(8 + 12 + 4 + ext + xrc + (p.pad & 3) as u32)
}

/// Bit `opcode >> 5` of the connected transports (RC, UC, XRC).
const CONNECTED: u32 =
    1 << Transport::Rc as u32 | 1 << Transport::Uc as u32 | 1 << Transport::Xrc as u32;

/// Whether the packet starts or ends a message of a connected QP ([`BOUNDARY_OPS`]: a SEND's
/// FIRST, LAST or ONLY, a WRITE's FIRST or ONLY, a READ request). Only
/// these touch [`MsgStats`]. Without a branch: the kernel asks it of every RoCE packet, in
/// every state the verifier follows out of the accounting.
#[inline(always)]
pub fn is_boundary(p: &SeqInput) -> bool {
    (BOUNDARY_OPS >> (p.opcode & 0x1F)) & (CONNECTED >> (p.opcode >> 5)) & 1 != 0
}

impl MsgStats {
    /// The message a boundary packet completes: its kind and size (`None`: unknown).
    /// `analysis`: the flow's PSN analysis flags right after the packet ([`MESSAGE_BITS`] of
    /// `SeqTrack::flags`): a packet whose PSN was seen before (sent again, copied) counts
    /// nothing ([`F_FRESH`]); a SEND with a PSN jump since its FIRST has no size ([`F_HOLED`]).
    /// A SEND's FIRST opens it and completes nothing.
    #[inline(always)]
    pub fn packet(&mut self, p: &SeqInput, analysis: u32) -> Option<(MsgKind, Option<u64>)> {
        if analysis & F_FRESH == 0 || !is_boundary(p) {
            return None;
        }
        let code = p.opcode & 0x1F;
        let reth = if p.has_reth != 0 {
            Some(p.reth_len as u64)
        } else {
            None
        };
        let open = (self.open_pmtu, self.open_psn);
        // Any boundary ends what was open: messages of a QP go one after the other.
        self.open_pmtu = 0;
        if code == op::SEND_FIRST {
            if let Some(m) = send_payload(p)
                && m > 0
            {
                self.open_psn = p.psn;
                self.open_pmtu = m;
            }
            None
        } else if in_set(SEND_LAST_OPS, code) {
            let size = match (open, send_payload(p)) {
                ((m, f), Some(r)) if m != 0 && psn_after(p.psn, f) && analysis & F_HOLED == 0 => {
                    Some(psn_sub(p.psn, f) as u64 * m as u64 + r as u64)
                }
                _ => None,
            };
            Some((MsgKind::Send, size))
        } else if in_set(SEND_ONLY_OPS, code) {
            Some((MsgKind::Send, send_payload(p).map(u64::from)))
        } else if code == op::READ_REQUEST {
            Some((MsgKind::Read, reth))
        } else {
            Some((MsgKind::Write, reth))
        }
    }

    /// Counts a message of `kind` and `size` (`None`: unknown).
    #[inline(always)]
    pub fn record(&mut self, kind: MsgKind, size: Option<u64>) {
        let Some(size) = size else {
            self.unknown_size += 1;
            return;
        };
        if self.messages() == 0 || size < self.min {
            self.min = size;
        }
        if size > self.max {
            self.max = size;
        }
        let k = kind_index(kind);
        self.count[k] += 1;
        self.bytes[k] += size;
        self.buckets[msg_bucket_index(size)] += 1;
    }

    /// Messages of known size, every kind.
    pub fn messages(&self) -> u64 {
        self.count.iter().sum()
    }

    /// The `q` quantile of the sizes (every kind together).
    pub fn quantile(&self, q: f64) -> Option<u64> {
        MSG_SCALE.quantile(&self.buckets, self.min, self.max, q)
    }

    /// Adds another partial view of the same flow (or another flow, for a side's total).
    pub fn merge(&mut self, o: &MsgStats) {
        if o.messages() > 0 {
            if self.messages() == 0 || o.min < self.min {
                self.min = o.min;
            }
            self.max = self.max.max(o.max);
        }
        for k in 0..MsgKind::COUNT {
            self.count[k] += o.count[k];
            self.bytes[k] += o.bytes[k];
        }
        self.unknown_size += o.unknown_size;
        for (a, b) in self.buckets.iter_mut().zip(o.buckets) {
            *a += b;
        }
        if o.open_pmtu != 0 {
            self.open_psn = o.open_psn;
            self.open_pmtu = o.open_pmtu;
        }
    }

    /// The counts alone, without the open SEND: what two views that saw the same packets agree
    /// on whatever their order.
    pub fn counts(&self) -> Self {
        Self {
            open_psn: 0,
            open_pmtu: 0,
            ..*self
        }
    }
}

/// `kind` as an index the BPF verifier can bound (see [`crate::flow::class_index`]).
#[inline(always)]
pub fn kind_index(kind: MsgKind) -> usize {
    let raw = kind as u8;
    // SAFETY: reading a local u8.
    let i = unsafe { core::ptr::read_volatile(&raw) } as usize;
    if i < MsgKind::COUNT { i } else { 0 }
}

/// The bucket of a message of `size` bytes, as an index the BPF verifier can bound (see
/// [`crate::latency::lat_bucket_index`]).
#[inline(always)]
pub fn msg_bucket_index(size: u64) -> usize {
    let raw = MSG_SCALE.bucket(size);
    // SAFETY: reading a local.
    let i = unsafe { core::ptr::read_volatile(&raw) };
    if i < MSG_BUCKETS { i } else { MSG_BUCKETS - 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(opcode: u8, psn: u32, udp_len: u16, reth: Option<u32>) -> SeqInput {
        SeqInput {
            psn,
            reth_len: reth.unwrap_or(0),
            udp_len,
            aeth_syndrome: 0xFFFF,
            opcode,
            ack_req: 0,
            has_reth: reth.is_some() as u8,
            pad: 0,
        }
    }

    fn feed(s: &mut MsgStats, p: &SeqInput, fresh: bool) {
        feed_bits(s, p, if fresh { F_FRESH } else { 0 });
    }

    fn feed_bits(s: &mut MsgStats, p: &SeqInput, analysis: u32) {
        if let Some((kind, size)) = s.packet(p, analysis) {
            s.record(kind, size);
        }
    }

    /// A SEND of 1024 + 1024 + 952 bytes (a real capture's), 28 bytes of headers and ICRC.
    #[test]
    fn a_send_is_assembled_from_its_first_and_last() {
        let mut s = MsgStats::default();
        feed(&mut s, &pkt(op::SEND_FIRST, 100, 1048, None), true);
        // The MIDDLE is no boundary.
        assert!(!is_boundary(&pkt(op::SEND_MIDDLE, 101, 1048, None)));
        feed(&mut s, &pkt(op::SEND_LAST, 102, 976, None), true);
        assert_eq!(
            (s.count, s.bytes, s.min, s.max),
            ([1, 0, 0], [3000, 0, 0], 3000, 3000)
        );
        // Across the PSN wrap, with padding and immediate data.
        let mut p = pkt(op::SEND_FIRST, 0xFF_FFFF, 1048, None);
        feed(&mut s, &p, true);
        p = pkt(op::SEND_LAST_IMM, 1, 24 + 4 + 8 + 3, None);
        p.pad = 3;
        feed(&mut s, &p, true);
        assert_eq!(s.count[0], 2);
        assert_eq!(s.bytes[0], 3000 + 2 * 1024 + 8);
    }

    #[test]
    fn writes_and_reads_are_their_dma_length() {
        let mut s = MsgStats::default();
        feed(&mut s, &pkt(op::WRITE_FIRST, 1, 1064, Some(65536)), true);
        feed(&mut s, &pkt(op::WRITE_ONLY, 17, 104, Some(64)), true);
        feed(&mut s, &pkt(op::READ_REQUEST, 18, 44, Some(1 << 20)), true);
        feed(&mut s, &pkt(op::WRITE_ONLY_IMM, 274, 44, Some(0)), true);
        assert_eq!(s.count, [0, 3, 1]);
        assert_eq!(s.bytes, [0, 65536 + 64, 1 << 20]);
        assert_eq!((s.min, s.max), (0, 1 << 20));
        // A cut RETH: a message of unknown size.
        feed(&mut s, &pkt(op::WRITE_FIRST, 275, 1064, None), true);
        assert_eq!(s.unknown_size, 1);
    }

    #[test]
    fn resends_and_copies_count_nothing() {
        let mut s = MsgStats::default();
        feed(&mut s, &pkt(op::SEND_ONLY, 5, 128, None), false);
        feed(&mut s, &pkt(op::WRITE_ONLY, 5, 128, Some(64)), false);
        assert_eq!(s, MsgStats::default());
        // A resent FIRST does not reopen, nor close, the SEND.
        feed(&mut s, &pkt(op::SEND_FIRST, 10, 280, None), true);
        feed(&mut s, &pkt(op::SEND_FIRST, 10, 280, None), false);
        feed(&mut s, &pkt(op::SEND_LAST, 11, 40, None), true);
        assert_eq!((s.count[0], s.bytes[0]), (1, 256 + 16));
    }

    #[test]
    fn a_last_without_its_first_has_no_size() {
        let mut s = MsgStats::default();
        feed(&mut s, &pkt(op::SEND_LAST, 7, 976, None), true);
        assert_eq!((s.messages(), s.unknown_size), (0, 1));
        // A FIRST, then another message's start: the SEND's LAST was missed.
        feed(&mut s, &pkt(op::SEND_FIRST, 8, 1048, None), true);
        feed(&mut s, &pkt(op::WRITE_ONLY, 20, 104, Some(64)), true);
        feed(&mut s, &pkt(op::SEND_LAST, 23, 976, None), true);
        assert_eq!((s.count, s.unknown_size), ([0, 1, 0], 2));
        // UD and responses are no messages here.
        assert!(!is_boundary(&pkt(0x64, 1, 100, None)));
        assert!(!is_boundary(&pkt(op::ACKNOWLEDGE, 1, 28, None)));
        assert!(is_boundary(&pkt(0xA0 | op::SEND_ONLY, 1, 100, None)));
    }

    /// SEND A's FIRST seen, its LAST and SEND B's FIRST lost, B's LAST seen: the PSN analysis
    /// saw a jump since A's FIRST, so B has no size (never A's FIRST with B's LAST).
    #[test]
    fn a_send_across_a_jump_has_no_size() {
        let mut s = MsgStats::default();
        feed(&mut s, &pkt(op::SEND_FIRST, 1, 1048, None), true);
        feed_bits(&mut s, &pkt(op::SEND_LAST, 6, 976, None), F_FRESH | F_HOLED);
        assert_eq!((s.messages(), s.unknown_size), (0, 1));
    }

    /// The flags the PSN analysis leaves after `p`.
    fn analysed(f: &mut crate::FlowStats, p: &SeqInput) -> u32 {
        f.seq().packet(p, 0, |_| false);
        f.seq_track.flags
    }

    /// Driven by the real PSN analysis: a jump inside a SEND, a clean SEND after it, a resend,
    /// and a packet that is no request (which leaves nothing fresh behind).
    #[test]
    fn the_psn_analysis_says_what_is_fresh_and_what_jumped() {
        let mut f = crate::FlowStats::default();
        let mut s = MsgStats::default();
        let run = |f: &mut crate::FlowStats, s: &mut MsgStats, p: SeqInput| {
            let bits = analysed(f, &p);
            feed_bits(s, &p, bits);
            bits
        };
        // SEND A: FIRST 1, MIDDLE 2; A's LAST (3) and B's FIRST (4) lost; B's MIDDLE 5, LAST 6.
        run(&mut f, &mut s, pkt(op::SEND_FIRST, 1, 1048, None));
        run(&mut f, &mut s, pkt(op::SEND_MIDDLE, 2, 1048, None));
        run(&mut f, &mut s, pkt(op::SEND_MIDDLE, 5, 1048, None));
        run(&mut f, &mut s, pkt(op::SEND_LAST, 6, 124, None));
        assert_eq!((s.messages(), s.unknown_size), (0, 1));
        // A clean SEND: sized.
        run(&mut f, &mut s, pkt(op::SEND_FIRST, 7, 1048, None));
        run(&mut f, &mut s, pkt(op::SEND_LAST, 8, 124, None));
        assert_eq!((s.messages(), s.bytes[0]), (1, 1124));
        // Its LAST again (a go-back-N resend of it): nothing.
        let bits = run(&mut f, &mut s, pkt(op::SEND_LAST, 8, 124, None));
        assert_eq!(bits & F_FRESH, 0);
        assert_eq!(s.messages(), 1);
        // The lost A LAST arrives late (fills a hole): counted, of unknown size.
        run(&mut f, &mut s, pkt(op::SEND_LAST, 3, 124, None));
        assert_eq!((s.messages(), s.unknown_size), (1, 2));
        // A packet the analysis does not take as a request leaves nothing fresh.
        run(&mut f, &mut s, pkt(op::WRITE_ONLY, 9, 104, Some(64)));
        let bits = analysed(&mut f, &pkt(op::ACKNOWLEDGE, 9, 28, None));
        assert_eq!(bits & F_FRESH, 0);
        // UC's reserved READ code (0x2C) carries a RETH but is no request: no message.
        let before = s;
        let bits = run(
            &mut f,
            &mut s,
            pkt(0x20 | op::READ_REQUEST, 10, 44, Some(4096)),
        );
        assert_eq!((bits & F_FRESH, s), (0, before));
    }

    #[test]
    fn views_merge() {
        let mut a = MsgStats::default();
        let mut b = MsgStats::default();
        a.record(MsgKind::Write, Some(4096));
        b.record(MsgKind::Send, Some(100));
        b.record(MsgKind::Send, None);
        b.open_pmtu = 1024;
        b.open_psn = 9;
        a.merge(&b);
        assert_eq!(
            (a.messages(), a.unknown_size, a.min, a.max),
            (2, 1, 100, 4096)
        );
        assert_eq!((a.open_psn, a.open_pmtu), (9, 1024));
        assert_eq!(a.quantile(1.0), Some(4096));
        assert_eq!(a.counts().open_pmtu, 0);
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), no padding (asserted above), every bit pattern valid.
    unsafe impl aya::Pod for super::MsgStats {}
}
