//! The PSN analysis of one flow (one direction of one queue pair), shared by the kernel program,
//! replay and the daemon: every request packet of a reliable or unreliable connected QP gets
//! exactly one class ([`SeqClass`]), with bounded state per flow, in the manner of Wireshark's
//! TCP sequence analysis: nothing is called loss without evidence.
//!
//! State: the expected next PSN (a range after a READ whose path MTU is unknown), a bitmap of
//! the last [`WINDOW`] PSNs (seen, or consumed by a READ), the current run of PSNs behind the
//! expected one (a go-back-N resend is a run of already-sent PSNs), and the last READ (for the
//! overlap check). The response direction of the same flow key (ACK, NAK, READ responses seen
//! towards this QP's peer) keeps the newest response PSN; userspace pairs the two directions.
//!
//! Written by hand: no crate analyses InfiniBand PSN sequences, and this one must compile for
//! the BPF target (no allocation, no loops the verifier cannot bound, no 128-bit arithmetic).

use core::mem::size_of;

use crate::message::is_boundary;
use crate::parse::{
    AETH_OPS, FULL_OPS, OpClass, REQUEST_END_OPS, RESPONSE_OPS, RETH_OPS, RocePacket, Transport,
    classify_raw, in_set,
};
use crate::wire::{self, PMTU_MAX, PMTU_MIN, PSN_MASK};

/// PSNs kept in the bitmap behind the expected one. A hole that leaves it unfilled is lost.
pub const WINDOW: u32 = 64;
/// A jump (ahead or behind) no sender makes within one connection: a new incarnation of the
/// QP number (QP reuse). An RC requester's outstanding window is far smaller.
pub const REUSE_JUMP: u32 = 1 << 20;
/// After this long without a request, a jump beyond the window starts a new incarnation.
pub const REUSE_IDLE_NS: u64 = 100_000_000;
/// A PSN sent again after this long without a request is a retransmission after a timeout
/// (or an RNR wait), never a duplicate copy: mirror copies of one packet arrive microseconds
/// apart, and local ACK timeouts are milliseconds and more. (Shorter RNR waits are told apart
/// by the RNR NAKs of the reverse direction, in the report.)
pub const RETX_IDLE_NS: u64 = 5_000_000;
/// Candidate path MTUs: 256 << k for k in 0..PMTUS.
pub const PMTUS: usize = 5;

/// The class of one request packet.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqClass {
    /// The expected PSN (or, after a READ of unknown path MTU, within its possible range).
    InOrder,
    /// Ahead of the expected PSN: opens a hole.
    Ahead,
    /// Fills a hole inside the window (arrived late).
    OutOfOrder,
    /// A PSN already seen, not part of a resend.
    Duplicate,
    /// The sender went back: a run of already-sent PSNs (go-back-N), or a PSN sent again after
    /// a timeout. The first packets of a run are counted as out of order or duplicate until
    /// the run shows itself; then they move here.
    Retransmission,
    /// Inside the PSN range a READ consumed under the known path MTU: a protocol violation.
    Violation,
    /// A jump no sender could make: a new incarnation of the QP number.
    NewIncarnation,
    /// Not a request of a connected transport: not analysed.
    NotAnalysed,
}

impl SeqClass {
    /// The class of a discriminant (`class as u8`); [`SeqClass::NotAnalysed`] for any other.
    #[inline(always)]
    pub const fn of(v: u8) -> Self {
        match v {
            0 => Self::InOrder,
            1 => Self::Ahead,
            2 => Self::OutOfOrder,
            3 => Self::Duplicate,
            4 => Self::Retransmission,
            5 => Self::Violation,
            6 => Self::NewIncarnation,
            _ => Self::NotAnalysed,
        }
    }
}

/// Counts of the PSN analysis, summed over views (CPUs, cache slots) with [`SeqCounts::merge`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqCounts {
    pub out_of_order: u64,
    pub duplicates: u64,
    pub retransmissions: u64,
    /// Runs of retransmitted PSNs (go-back-N episodes and timeout resends).
    pub retx_episodes: u64,
    /// PSNs whose hole left the window unfilled (holes still open are in the track state).
    pub lost: u64,
    /// Contiguous ranges of such PSNs.
    pub lost_events: u64,
    /// New incarnations of the QP number.
    pub resets: u64,
    /// NAKs with the PSN sequence error code (response direction).
    pub nak_seq: u64,
    /// The longest time without a request before a retransmission, and when it began.
    pub timeout_max_ns: u64,
    pub timeout_at_ns: u64,
    /// The first overlap of a READ's range: when, the request's PSN and the READ's PSN.
    pub violation_ns: u64,
    pub violation_psn: u32,
    pub violation_read_psn: u32,
    /// Requests inside the last READ's consumed range, per candidate path MTU (256 << k): the
    /// path MTU, once learned from either direction, says which count is the truth.
    pub violations: [u32; PMTUS],
    /// Bit k: the candidate path MTUs under which the first overlap is one.
    pub violation_mask: u32,
    /// Bit k: a FIRST or MIDDLE packet carried exactly 256 << k bytes of payload.
    pub pmtu_mask: u32,
    /// Resend episodes that began after a wait of [`RETX_IDLE_NS`] or more (a timeout, an RNR
    /// wait); the others are runs of PSNs sent before, which only a NAK explains (else they are
    /// copies lagging behind, as the report settles once it sees the NAKs or their absence).
    pub retx_waited: u32,
}
const _: () = assert!(size_of::<SeqCounts>() == 11 * 8 + 8 + 4 * PMTUS + 12);

/// The continuation state: follows the most recent view on merge.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqTrack {
    /// Bit i: PSN `top - i` was seen (or consumed by a READ, or came before the first).
    pub seen: u64,
    /// The last request's time.
    pub req_ns: u64,
    /// The last request that asks for an answer (AckReq, a message's last packet, a READ or an
    /// atomic): its time.
    pub ackreq_ns: u64,
    /// The newest response PSN's time (response direction).
    pub resp_ns: u64,
    /// The next request PSN lies in [next_lo, next_hi] (a READ of unknown path MTU).
    pub next_lo: u32,
    pub next_hi: u32,
    /// The last READ request: its PSN and DMA length.
    pub read_psn: u32,
    pub read_len: u32,
    /// The run of PSNs behind the expected one: the PSN that would continue it, its length
    /// and how many of its packets were counted as out of order and as duplicates.
    pub run_next: u32,
    pub run_len: u32,
    pub run_fills: u32,
    pub run_dups: u32,
    /// The range of the most recent PSNs counted lost (a late arrival there is out of order).
    pub lost_lo: u32,
    pub lost_hi: u32,
    /// The PSN of the last request that asks for an answer.
    pub ackreq_psn: u32,
    /// The newest response PSN (response direction).
    pub resp_psn: u32,
    /// `F_*` bits.
    pub flags: u32,
    /// The newest request PSN moved past (bit 0 of `seen`).
    pub top: u32,
    /// The first request PSN of this incarnation of the QP number.
    pub base: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<SeqTrack>() == 4 * 8 + 16 * 4);

/// `SeqTrack::flags`: a request was seen.
pub const F_VALID: u32 = 1;
/// `read_psn`/`read_len` hold a READ.
pub const F_READ: u32 = 1 << 1;
/// A run is open (`run_*`).
pub const F_RUN: u32 = 1 << 2;
/// The open run is a retransmission.
pub const F_RUN_RETX: u32 = 1 << 3;
/// `lost_lo`/`lost_hi` hold a range.
pub const F_LOST: u32 = 1 << 4;
/// The newest PSN that left the window was a hole (the next one out continues its range).
pub const F_LOST_TAIL: u32 = 1 << 5;
/// `ackreq_psn` holds a request.
pub const F_ACKREQ: u32 = 1 << 6;
/// `resp_psn` holds a response.
pub const F_RESP: u32 = 1 << 7;
/// The open run started by filling a hole.
pub const F_RUN_FILL_FIRST: u32 = 1 << 8;
/// The open run's latest packet had been seen before.
pub const F_RUN_LAST_SEEN: u32 = 1 << 9;
/// The last request's PSN was seen for the first time (not sent again, nor a copy): what a
/// message is counted from.
pub const F_FRESH: u32 = 1 << 10;
/// A request PSN jumped ahead (or a new incarnation began) since the last message boundary
/// ([`is_boundary`]).
pub const F_GAP: u32 = 1 << 11;
/// The last message boundary ends a stretch in which a request PSN jumped ahead: the SEND it
/// ends lost packets before the observation point, or began in another incarnation.
pub const F_HOLED: u32 = 1 << 12;
/// The bits of `SeqTrack::flags` the message update reads, from `F_FRESH` up.
pub const MESSAGE_BITS: u32 = F_FRESH | F_GAP | F_HOLED;
/// A go-back longer than this many PSNs is no resend (a new incarnation after a silence).
pub const MAX_GO_BACK: u32 = 1 << 16;

/// `v` as a count: a wrapped negative (a decrement in one view of what another view counted,
/// summed with wrapping arithmetic) is 0.
#[inline(always)]
pub const fn non_negative(v: u64) -> u64 {
    if v >= 1 << 63 { 0 } else { v }
}

/// (a - b) mod 2^24.
#[inline(always)]
pub const fn psn_sub(a: u32, b: u32) -> u32 {
    a.wrapping_sub(b) & PSN_MASK
}

/// `b` is ahead of `a` (by less than half the PSN space).
#[inline(always)]
pub const fn psn_after(b: u32, a: u32) -> bool {
    let d = psn_sub(b, a);
    d != 0 && d < 1 << 23
}

/// PSNs a READ request of `len` bytes consumes for a path MTU of `pmtu`: ceil(len / pmtu), at
/// least 1.
#[inline(always)]
pub const fn read_psns(len: u32, pmtu: u32) -> u32 {
    let n = len.div_ceil(pmtu);
    if n == 0 { 1 } else { n }
}

/// The largest path MTU of `mask` (bit k: 256 << k), if any.
#[inline(always)]
pub const fn pmtu_of(mask: u32) -> Option<u32> {
    let m = mask & ((1 << PMTUS) - 1);
    if m == 0 {
        None
    } else {
        Some(PMTU_MIN << (31 - m.leading_zeros()))
    }
}

/// The bits (256 << k) under which an offset `off` behind a READ of `len` bytes is inside the
/// READ's consumed range.
#[inline(always)]
const fn overlap_mask(off: u32, len: u32) -> u32 {
    let mut m = 0;
    if off < read_psns(len, 256) {
        m |= 1;
    }
    if off < read_psns(len, 512) {
        m |= 2;
    }
    if off < read_psns(len, 1024) {
        m |= 4;
    }
    if off < read_psns(len, 2048) {
        m |= 8;
    }
    if off < read_psns(len, 4096) {
        m |= 16;
    }
    m
}

/// Whether an overlap under the candidate path MTUs `new` is the one to keep rather than the
/// one kept (`kept`, 0: none) as the first violation. The masks are prefixes (an overlap under
/// a path MTU is one under every smaller one). Under the known path MTU (`pmtu_mask`), the
/// first violation under it; until it is known, the first of the overlaps under the most
/// candidates (an ordinary next request after a READ overlaps it under the smallest
/// candidates alone, and must not hide a real violation after it).
#[inline(always)]
const fn keeps_over(new: u32, kept: u32, pmtu_mask: u32) -> bool {
    if kept == 0 {
        return true;
    }
    match pmtu_of(pmtu_mask) {
        Some(pmtu) => {
            let b = pmtu_bit(pmtu);
            kept & b == 0 && new & b != 0
        }
        None => new > kept,
    }
}

/// `n` low bits set (n <= 64).
#[inline(always)]
const fn ones(n: u32) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// The payload of a FIRST or MIDDLE packet (SEND, WRITE, READ response), which is exactly one
/// path MTU; `None` for other packets. From the UDP length, so truncated mirror copies count.
#[inline(always)]
pub fn pmtu_payload(p: &SeqInput) -> Option<u32> {
    if !in_set(FULL_OPS, p.opcode) {
        return None;
    }
    let ext = if in_set(RETH_OPS, p.opcode) {
        wire::RETH_LEN as u32
    } else if in_set(AETH_OPS, p.opcode) {
        wire::AETH_LEN as u32
    } else {
        0
    };
    let xrc = match p.transport() {
        Transport::Xrc if !in_set(RESPONSE_OPS, p.opcode) => wire::XRCETH_LEN as u32,
        Transport::Rc | Transport::Uc | Transport::Xrc => 0,
        _ => return None,
    };
    // UDP header, BTH, ICRC.
    (p.udp_len as u32).checked_sub(8 + 12 + 4 + ext + xrc)
}

/// Bit k when `len` is 256 << k (k < PMTUS), else 0.
#[inline(always)]
pub const fn pmtu_bit(len: u32) -> u32 {
    match len {
        256 => 1,
        512 => 2,
        1024 => 4,
        2048 => 8,
        4096 => 16,
        _ => 0,
    }
}

/// What the PSN analysis reads of a packet, in one plain value. The kernel passes it through a
/// map before the analysis: a value loaded from a map carries none of the ranges the parser's
/// paths gave it, so the verifier can merge those paths before the analysis's branches (else
/// they multiply beyond its limit).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqInput {
    pub psn: u32,
    /// The READ's DMA length when `has_reth`.
    pub reth_len: u32,
    pub udp_len: u16,
    /// The AETH syndrome, `NO_AETH` when there is none.
    pub aeth_syndrome: u16,
    pub opcode: u8,
    pub ack_req: u8,
    pub has_reth: u8,
    /// The BTH pad count: bytes of padding before the ICRC.
    pub pad: u8,
}
const _: () = assert!(size_of::<SeqInput>() == 16);

impl SeqInput {
    #[inline(always)]
    pub fn of(p: &RocePacket) -> Self {
        let mut s = Self::default();
        s.set(p);
        s
    }

    /// Becomes the input of `p`, field by field in place (the kernel's is a map value: no
    /// temporary on its stack).
    #[inline(always)]
    pub fn set(&mut self, p: &RocePacket) {
        self.pad = p.bth.pad_count;
        self.psn = p.bth.psn & PSN_MASK;
        self.reth_len = p.reth_len;
        self.udp_len = p.udp_len;
        self.aeth_syndrome = p.aeth_syndrome;
        self.opcode = p.bth.opcode;
        self.ack_req = p.bth.ack_req as u8;
        self.has_reth = p.has_reth as u8;
    }

    #[inline(always)]
    pub fn transport(&self) -> Transport {
        Transport::of(self.opcode)
    }

    #[inline(always)]
    pub fn class(&self) -> OpClass {
        classify_raw(self.opcode, self.aeth_syndrome)
    }
}

/// What the PSN analysis needs of one request packet.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub psn: u32,
    pub class: OpClass,
    /// The READ's RETH is there and `read_len` is its DMA length.
    pub has_len: bool,
    pub read_len: u32,
    /// The packet asks for an answer (AckReq, a message's last packet, a READ, an atomic) of
    /// a reliable transport (RC, XRC: UC has no acknowledgements).
    pub wants_answer: bool,
}

impl Request {
    /// The request of a packet, if it is one of a connected transport.
    #[inline(always)]
    pub fn of(p: &SeqInput, class: OpClass) -> Option<Self> {
        if !class.is_request()
            || !matches!(
                p.transport(),
                Transport::Rc | Transport::Uc | Transport::Xrc
            )
        {
            return None;
        }
        let last = in_set(REQUEST_END_OPS, p.opcode);
        Some(Self {
            psn: p.psn & PSN_MASK,
            class,
            has_len: p.has_reth != 0,
            read_len: p.reth_len,
            wants_answer: (p.ack_req != 0 || last) && !matches!(p.transport(), Transport::Uc),
        })
    }
}

/// The analysis of one flow: counts and continuation state, as they sit in `FlowStats`.
pub struct Seq<'a> {
    pub counts: &'a mut SeqCounts,
    pub track: &'a mut SeqTrack,
    /// The same flow's gaps (ahead jumps) and regressions (any PSN behind the expected one).
    pub gaps: &'a mut u64,
    pub regressions: &'a mut u64,
}

impl Seq<'_> {
    /// Learns the path MTU from a FIRST or MIDDLE packet, and follows responses.
    #[inline(always)]
    pub fn other(&mut self, p: &SeqInput, class: OpClass, now_ns: u64) {
        if let Some(len) = pmtu_payload(p) {
            self.counts.pmtu_mask |= pmtu_bit(len);
        }
        if matches!(
            class,
            OpClass::Ack
                | OpClass::Nak
                | OpClass::RnrNak
                | OpClass::AtomicAck
                | OpClass::ReadResponse
        ) && matches!(p.transport(), Transport::Rc | Transport::Xrc)
        {
            let psn = p.psn & PSN_MASK;
            let t = &mut *self.track;
            // The newest response PSN, and when it was last answered (an ACK repeating it after
            // a retry is a newer answer).
            // A response far behind the newest belongs to a new incarnation of the QP number.
            if t.flags & F_RESP == 0
                || !psn_after(t.resp_psn, psn)
                || psn_sub(t.resp_psn, psn) >= REUSE_JUMP
            {
                t.resp_psn = psn;
                t.resp_ns = now_ns;
                t.flags |= F_RESP;
            }
            // NAK with the PSN sequence error code.
            if p.aeth_syndrome == 0x60 {
                self.counts.nak_seq += 1;
            }
        }
    }

    /// The whole analysis of one packet: learns the path MTU, follows responses, classifies a
    /// request.
    #[inline(always)]
    pub fn packet(
        &mut self,
        p: &SeqInput,
        now_ns: u64,
        cm_after: impl FnOnce(u64) -> bool,
    ) -> SeqClass {
        let class = p.class();
        self.other(p, class, now_ns);
        let Some(r) = Request::of(p, class) else {
            self.track.flags &= !F_FRESH;
            return SeqClass::NotAnalysed;
        };
        let class = self.request(&r, now_ns, cm_after);
        // At a message boundary, whether a PSN jumped since the previous one; without a
        // branch (the kernel runs this in every path of the analysis).
        let t = &mut *self.track;
        let m = (is_boundary(p) as u32).wrapping_neg();
        t.flags = (t.flags & !(m & (F_GAP | F_HOLED))) | (m & ((t.flags & F_GAP) << 1));
        class
    }

    /// Classifies one request packet at `now_ns`. `cm_after(t)`: connection-manager traffic
    /// between the flow's hosts was seen after time `t` (asked only on a jump).
    #[inline(always)]
    pub fn request(
        &mut self,
        r: &Request,
        now_ns: u64,
        cm_after: impl FnOnce(u64) -> bool,
    ) -> SeqClass {
        let psn = r.psn;
        // Fresh unless found behind, already seen.
        self.track.flags |= F_FRESH;
        if self.track.flags & F_VALID == 0 {
            self.start(r, now_ns);
            return SeqClass::InOrder;
        }
        let idle = now_ns.saturating_sub(self.track.req_ns);
        let last_req = self.track.req_ns;
        self.track.req_ns = now_ns;
        if r.wants_answer {
            self.track.ackreq_psn = psn;
            self.track.ackreq_ns = now_ns;
            self.track.flags |= F_ACKREQ;
        }
        if !matches!(r.class, OpClass::ReadRequest) && self.overlaps_read(psn, now_ns) {
            // Not marked seen: each copy of it would count as new.
            self.track.flags &= !F_FRESH;
            return SeqClass::Violation;
        }
        let t = &*self.track;
        let d = psn_sub(psn, t.next_lo);
        let window = psn_sub(t.next_hi, t.next_lo);
        if d <= window {
            self.end_run();
            self.advance(psn, r);
            return SeqClass::InOrder;
        }
        let ahead = d < 1 << 23;
        let dist = if ahead {
            d - window
        } else {
            psn_sub(t.next_lo, psn)
        };
        // Behind, within what this incarnation sent and no further than a go-back reaches: a
        // resend, however long the silence before it (a timeout).
        let resend =
            !ahead && dist < MAX_GO_BACK && psn_sub(psn, t.base) < psn_sub(t.next_lo, t.base);
        // After connection-manager traffic between the two hosts (a connection set up again,
        // or only another QP's): ahead, a jump beyond any go-back (hosts set QPs up all the
        // time, and loss must not pass for reuse); behind, to a PSN this incarnation never
        // sent (no resend goes there).
        if dist >= REUSE_JUMP
            || (dist > WINDOW && !resend && idle >= REUSE_IDLE_NS)
            || ((if ahead {
                dist >= MAX_GO_BACK
            } else {
                dist > WINDOW && !resend
            }) && cm_after(last_req))
        {
            self.reset(r, now_ns);
            return SeqClass::NewIncarnation;
        }
        if ahead {
            self.end_run();
            self.track.flags |= F_GAP;
            *self.gaps += 1;
            self.advance(psn, r);
            return SeqClass::Ahead;
        }
        *self.regressions += 1;
        self.behind(psn, idle, last_req)
    }

    /// A request PSN behind the expected one.
    #[inline(always)]
    fn behind(&mut self, psn: u32, idle: u64, last_req: u64) -> SeqClass {
        let t = &mut *self.track;
        let c = &mut *self.counts;
        // Its place in the window; after `top` it lies in a READ's range (a READ asked again
        // from the middle): consumed.
        let pos = psn_sub(t.top, psn);
        let consumed = pos >= 1 << 23;
        let back = pos >= WINDOW && !consumed;
        // Behind the window: in the range last counted lost, it arrived late; else it was seen.
        let late = back
            && t.flags & F_LOST != 0
            && psn_sub(psn, t.lost_lo) <= psn_sub(t.lost_hi, t.lost_lo);
        let seen = if consumed {
            true
        } else if pos < WINDOW {
            let bit = 1u64 << pos;
            let seen = t.seen & bit != 0;
            t.seen |= bit;
            seen
        } else {
            !late
        };
        t.flags &= !((seen as u32) * F_FRESH);
        if late {
            // Counted lost when its hole left the window: it was only late. The range shrinks
            // (a copy of it is no second late packet); emptied, its loss event is gone too.
            // (Wrapping: in the kernel this view's counts may be in the flow table's value.)
            c.lost = c.lost.wrapping_sub(1);
            if pos == WINDOW {
                // It was the PSN just past the window's end: the next to leave joins no range.
                t.flags &= !F_LOST_TAIL;
            }
            if psn == t.lost_lo && psn == t.lost_hi {
                t.flags &= !F_LOST;
                c.lost_events = c.lost_events.wrapping_sub(1);
            } else if psn == t.lost_lo {
                t.lost_lo = (psn + 1) & PSN_MASK;
            } else if psn == t.lost_hi {
                t.lost_hi = psn_sub(psn, 1);
            } else {
                // In the middle: two ranges now; the newer one is kept.
                t.lost_lo = (psn + 1) & PSN_MASK;
                c.lost_events = c.lost_events.wrapping_add(1);
            }
        }
        if t.flags & F_RUN != 0 && psn == t.run_next {
            t.run_next = (psn + 1) & PSN_MASK;
            t.run_len += 1;
            if t.flags & F_RUN_RETX != 0 {
                c.retransmissions = c.retransmissions.wrapping_add(1);
                return SeqClass::Retransmission;
            }
            let last_seen = t.flags & F_RUN_LAST_SEEN != 0;
            t.flags = if seen {
                t.flags | F_RUN_LAST_SEEN
            } else {
                t.flags & !F_RUN_LAST_SEEN
            };
            // The run resends what was sent: a go-back-N. It shows itself by a PSN seen before
            // right after another, or after a first one that filled a hole (copies lagging
            // behind reordered packets alternate seen and unseen PSNs). Its first packets move
            // here.
            if seen && (last_seen || t.flags & F_RUN_FILL_FIRST != 0) {
                c.out_of_order = c.out_of_order.wrapping_sub(t.run_fills as u64);
                c.duplicates = c.duplicates.wrapping_sub(t.run_dups as u64);
                c.retransmissions = c.retransmissions.wrapping_add(t.run_len as u64);
                c.retx_episodes = c.retx_episodes.wrapping_add(1);
                t.flags |= F_RUN_RETX;
                return SeqClass::Retransmission;
            }
            if seen {
                t.run_dups += 1;
                c.duplicates = c.duplicates.wrapping_add(1);
                return SeqClass::Duplicate;
            }
            t.run_fills += 1;
            c.out_of_order = c.out_of_order.wrapping_add(1);
            return SeqClass::OutOfOrder;
        }
        // A new run.
        t.flags = (t.flags | F_RUN) & !(F_RUN_RETX | F_RUN_FILL_FIRST | F_RUN_LAST_SEEN);
        t.run_next = (psn + 1) & PSN_MASK;
        t.run_len = 1;
        t.run_fills = 0;
        t.run_dups = 0;
        if idle >= RETX_IDLE_NS || (seen && back) {
            // After a timeout (or an RNR wait), or a go-back beyond the window.
            if idle > c.timeout_max_ns {
                c.timeout_max_ns = idle;
                c.timeout_at_ns = last_req;
            }
            t.flags |= F_RUN_RETX;
            c.retransmissions = c.retransmissions.wrapping_add(1);
            c.retx_episodes = c.retx_episodes.wrapping_add(1);
            if idle >= RETX_IDLE_NS {
                c.retx_waited = c.retx_waited.wrapping_add(1);
            }
            return SeqClass::Retransmission;
        }
        if seen {
            t.flags |= F_RUN_LAST_SEEN;
            t.run_dups = 1;
            c.duplicates = c.duplicates.wrapping_add(1);
            SeqClass::Duplicate
        } else {
            t.flags |= F_RUN_FILL_FIRST;
            t.run_fills = 1;
            c.out_of_order = c.out_of_order.wrapping_add(1);
            SeqClass::OutOfOrder
        }
    }

    #[inline(always)]
    fn end_run(&mut self) {
        self.track.flags &= !(F_RUN | F_RUN_RETX | F_RUN_FILL_FIRST | F_RUN_LAST_SEEN);
    }

    /// Checks a non-READ request against the last READ's consumed range: counts it per
    /// candidate path MTU, and says whether it is a violation under the known one.
    #[inline(always)]
    fn overlaps_read(&mut self, psn: u32, now_ns: u64) -> bool {
        let t = &*self.track;
        if t.flags & F_READ == 0 {
            return false;
        }
        let off = psn_sub(psn, t.read_psn);
        if off == 0 || off >= 1 << 23 {
            return false;
        }
        let mask = overlap_mask(off, t.read_len);
        if mask == 0 {
            return false;
        }
        let read_psn = t.read_psn;
        let c = &mut *self.counts;
        if mask & 1 != 0 {
            c.violations[0] += 1;
        }
        if mask & 2 != 0 {
            c.violations[1] += 1;
        }
        if mask & 4 != 0 {
            c.violations[2] += 1;
        }
        if mask & 8 != 0 {
            c.violations[3] += 1;
        }
        if mask & 16 != 0 {
            c.violations[4] += 1;
        }
        if keeps_over(mask, c.violation_mask, c.pmtu_mask) {
            c.violation_ns = now_ns;
            c.violation_psn = psn;
            c.violation_read_psn = read_psn;
            c.violation_mask = mask;
        }
        // A violation under every candidate, or under the known path MTU (the largest seen:
        // the fewest violations).
        mask == (1 << PMTUS) - 1
            || match pmtu_of(c.pmtu_mask) {
                Some(pmtu) => mask & pmtu_bit(pmtu) != 0,
                None => false,
            }
    }

    /// The first request of a flow or of a new incarnation.
    #[inline(always)]
    fn start(&mut self, r: &Request, now_ns: u64) {
        let t = &mut *self.track;
        // The PSNs before the first count as seen: a capture that starts mid-flow has no holes.
        t.seen = u64::MAX;
        t.next_lo = r.psn;
        t.next_hi = r.psn;
        t.top = psn_sub(r.psn, 1);
        t.base = r.psn;
        t.flags = (t.flags & F_RESP) | F_VALID | F_FRESH | F_GAP;
        t.req_ns = now_ns;
        if r.wants_answer {
            t.ackreq_psn = r.psn;
            t.ackreq_ns = now_ns;
            t.flags |= F_ACKREQ;
        }
        self.advance(r.psn, r);
    }

    /// A jump no sender makes: the old incarnation's open holes are lost, a new one starts.
    #[inline(always)]
    fn reset(&mut self, r: &Request, now_ns: u64) {
        let open = !self.track.seen;
        if open != 0 {
            self.counts.lost = self.counts.lost.wrapping_add(open.count_ones() as u64);
            let joined = self.track.flags & F_LOST_TAIL != 0 && open >> 63 != 0;
            self.counts.lost_events = self
                .counts
                .lost_events
                .wrapping_add(zero_runs(open, joined));
        }
        self.counts.resets += 1;
        self.track.flags &= !(F_LOST | F_LOST_TAIL);
        self.start(r, now_ns);
    }

    /// Moves the expected PSN past `psn` (at or ahead of `next_lo`): the PSNs a READ consumed
    /// are marked seen, the others skipped are holes; what leaves the window unfilled is lost.
    #[inline(always)]
    fn advance(&mut self, psn: u32, r: &Request) {
        let t = &mut *self.track;
        // PSNs top + 1 .. min(psn, next_hi) - 1 were consumed by a READ; up to psn - 1, holes.
        let shift = psn_sub(psn, t.top);
        let reach = psn_sub(t.next_hi, t.top);
        let consumed = if shift < reach { shift - 1 } else { reach - 1 };
        let holes = shift - 1 - consumed;
        // Old bits leaving the window, oldest at the top.
        let (out, out_n) = if shift >= 64 {
            (t.seen, 64)
        } else {
            (t.seen >> (64 - shift), shift)
        };
        let out_holes = !out & ones(out_n);
        // Holes past the window's end at once (positions WINDOW..=holes: a jump of more than
        // the window).
        let gone = holes.saturating_sub(WINDOW - 1);
        if out_holes != 0 || gone != 0 {
            let c = &mut *self.counts;
            c.lost = c
                .lost
                .wrapping_add(out_holes.count_ones() as u64 + gone as u64);
            // The oldest hole out continues a range counted before.
            let joined = t.flags & F_LOST_TAIL != 0 && (out_holes >> (out_n - 1)) & 1 != 0;
            let mut events = zero_runs(out_holes, joined);
            // The holes gone at once are one range, unless it continues the newest old hole.
            if gone != 0 && !(out_holes & 1 != 0 && consumed == 0) {
                events += 1;
            }
            c.lost_events = c.lost_events.wrapping_add(events);
            // The newest contiguous run of PSNs counted lost: a late packet there was only
            // late. Bit j of `out` is PSN top - (j + 64 - out_n); the holes gone at once are
            // PSNs psn - 64 down to psn - holes.
            // A hole that leaves one PSN at a time leaves over several packets: when the
            // newest run reaches back to the oldest bit out and that continues the range kept
            // before, the range grows (else a late packet of its older PSNs is taken for a
            // resend, and its loss is never taken back).
            let had = t.flags & F_LOST != 0;
            let prev_lo = t.lost_lo;
            let prev_hi = t.lost_hi;
            let (lo, spans_out) = if gone != 0 {
                t.lost_hi = psn_sub(psn, WINDOW);
                if out_holes & 1 != 0 && consumed == 0 {
                    // The holes gone at once continue the newest run out.
                    let run = (!out_holes).trailing_zeros();
                    (psn_sub(t.top, 64 - out_n + run - 1), run == out_n)
                } else {
                    (psn_sub(psn, holes), false)
                }
            } else {
                let j = out_holes.trailing_zeros();
                let run = (!(out_holes >> j)).trailing_zeros();
                t.lost_hi = psn_sub(t.top, j + 64 - out_n);
                (psn_sub(t.lost_hi, run - 1), j + run == out_n)
            };
            t.lost_lo = if spans_out && joined && had && prev_hi == psn_sub(lo, 1) {
                prev_lo
            } else {
                lo
            };
            t.flags |= F_LOST;
        }
        // Whether the PSN just past the window's end was a hole (the next to leave joins it).
        let tail = if gone != 0 {
            true
        } else if shift > 64 {
            false
        } else {
            out_holes & 1 != 0
        };
        t.flags = if tail {
            t.flags | F_LOST_TAIL
        } else {
            t.flags & !F_LOST_TAIL
        };
        let consumed_bits = if holes + 1 >= 64 {
            0
        } else {
            ones(consumed) << (holes + 1)
        };
        let old = if shift >= 64 { 0 } else { t.seen << shift };
        t.seen = old | consumed_bits | 1;
        // The next expected PSN; a READ consumes a range of PSNs.
        let (lo, hi) = match (r.class, r.has_len) {
            (OpClass::ReadRequest, true) => {
                // At most 2^31 bytes (the IBTA message limit), and a range below 2^23 PSNs.
                const MAX_LEN: u32 = ((1 << 23) - 1) * PMTU_MIN;
                let len = if r.read_len > MAX_LEN {
                    MAX_LEN
                } else {
                    r.read_len
                };
                t.read_psn = psn;
                t.read_len = len;
                t.flags |= F_READ;
                match pmtu_of(self.counts.pmtu_mask) {
                    Some(pmtu) => {
                        let n = read_psns(len, pmtu);
                        (n, n)
                    }
                    None => (read_psns(len, PMTU_MAX), read_psns(len, PMTU_MIN)),
                }
            }
            // A READ cut before its RETH: any length is possible, accept up to 2^23 - 1 ahead.
            (OpClass::ReadRequest, false) => {
                t.flags &= !F_READ;
                (1, (1 << 23) - 1)
            }
            _ => {
                // Past the last READ's range under any path MTU: it is done with (else, 2^24
                // PSNs on, the PSN space wraps into it again).
                if t.flags & F_READ != 0
                    && psn_sub(psn, t.read_psn) >= read_psns(t.read_len, PMTU_MIN)
                {
                    t.flags &= !F_READ;
                }
                (1, 1)
            }
        };
        t.top = psn;
        // A go-back reaches MAX_GO_BACK PSNs at most: the incarnation's base follows, so that
        // 2^24 PSNs on it still means what it sent.
        if psn_sub(psn, t.base) > MAX_GO_BACK {
            t.base = psn_sub(psn, MAX_GO_BACK);
        }
        t.next_lo = (psn + lo) & PSN_MASK;
        t.next_hi = (psn + hi) & PSN_MASK;
    }
}

/// Maximal runs of set bits in `z` (holes), oldest at the top; `joined`: the top run continues
/// one counted before.
#[inline(always)]
fn zero_runs(z: u64, joined: bool) -> u64 {
    // A run starts (from the top) at bit j when bit j + 1 is clear.
    let starts = (z & !(z >> 1)).count_ones() as u64;
    if joined && starts > 0 {
        starts - 1
    } else {
        starts
    }
}

impl SeqCounts {
    #[inline(always)]
    pub fn merge(&mut self, o: &SeqCounts) {
        self.out_of_order = self.out_of_order.wrapping_add(o.out_of_order);
        self.duplicates = self.duplicates.wrapping_add(o.duplicates);
        self.retransmissions = self.retransmissions.wrapping_add(o.retransmissions);
        self.retx_episodes = self.retx_episodes.wrapping_add(o.retx_episodes);
        self.lost = self.lost.wrapping_add(o.lost);
        self.lost_events = self.lost_events.wrapping_add(o.lost_events);
        self.resets = self.resets.wrapping_add(o.resets);
        self.nak_seq = self.nak_seq.wrapping_add(o.nak_seq);
        if o.timeout_max_ns > self.timeout_max_ns {
            self.timeout_max_ns = o.timeout_max_ns;
            self.timeout_at_ns = o.timeout_at_ns;
        }
        // The overlap kept as in the analysis; of two alike, the earlier.
        let pmtu_mask = self.pmtu_mask | o.pmtu_mask;
        if o.violation_mask != 0
            && (keeps_over(o.violation_mask, self.violation_mask, pmtu_mask)
                || (!keeps_over(self.violation_mask, o.violation_mask, pmtu_mask)
                    && o.violation_ns < self.violation_ns))
        {
            self.violation_ns = o.violation_ns;
            self.violation_psn = o.violation_psn;
            self.violation_read_psn = o.violation_read_psn;
            self.violation_mask = o.violation_mask;
        }
        for (a, b) in self.violations.iter_mut().zip(o.violations) {
            *a += b;
        }
        self.pmtu_mask |= o.pmtu_mask;
        self.retx_waited = self.retx_waited.wrapping_add(o.retx_waited);
    }
}

impl SeqTrack {
    /// Copies `o` field by field: a struct assignment between map values became a byte-wise
    /// memmove call in the kernel program, which the verifier walks byte by byte.
    #[inline(always)]
    pub fn assign(&mut self, o: &SeqTrack) {
        self.seen = o.seen;
        self.req_ns = o.req_ns;
        self.ackreq_ns = o.ackreq_ns;
        self.resp_ns = o.resp_ns;
        self.next_lo = o.next_lo;
        self.next_hi = o.next_hi;
        self.read_psn = o.read_psn;
        self.read_len = o.read_len;
        self.run_next = o.run_next;
        self.run_len = o.run_len;
        self.run_fills = o.run_fills;
        self.run_dups = o.run_dups;
        self.lost_lo = o.lost_lo;
        self.lost_hi = o.lost_hi;
        self.ackreq_psn = o.ackreq_psn;
        self.resp_psn = o.resp_psn;
        self.flags = o.flags;
        self.top = o.top;
        self.base = o.base;
    }

    /// Holes still open in the window (lost if the flow ends here), and their ranges.
    pub fn open_holes(&self) -> (u64, u64) {
        if self.flags & F_VALID == 0 {
            return (0, 0);
        }
        let open = !self.seen;
        (
            open.count_ones() as u64,
            zero_runs(open, self.flags & F_LOST_TAIL != 0 && open >> 63 != 0),
        )
    }
}
