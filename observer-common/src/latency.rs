//! Passive latency: how long the responder side takes to answer, measured on the wire from a
//! request to its answer in the reverse direction, with no probe of our own. The same update
//! runs in the kernel and in replay.
//!
//! - **ACK latency**: a request with AckReq, seen for the first time, to the first ACK or NAK
//!   whose PSN covers it. ACKs are coalesced: an ACK is matched to the newest timed request it
//!   covers, never to an older one (that would inflate the sample), and not at all when it
//!   also covers a request that was not timed.
//! - **READ latency**: a READ request to the first packet of its response (same PSN).
//! - Karn's rule: a request sent again (resent, or a duplicate of it seen) before its answer
//!   gives no sample; nor does a READ response for the requests before its READ, which it
//!   acknowledges implicitly (it ends their timing: a later ACK is no answer to them). An RNR
//!   NAK answers the requests before the one it names, like an ACK; the one it names waits for
//!   the receiver's RNR timer (not latency) and is sent again, untimed.
//! - A request first seen just after the answer covering it (a copy through a slower mirror
//!   session) is not timed.
//! - Not ruled out: an ACK naming a request the observation point never saw (lost before it)
//!   goes to the newest timed request before it; the sample includes the wait for the unseen
//!   one's ACK when the responder coalesced them.
//!
//! Each direction of requests of a connection keeps up to [`LAT_SLOTS`] timed requests of each
//! kind in flight. Beyond that a request is not timed; a request seen late (filling a PSN hole)
//! or sent again is untimed too. The untimed ones lie in a PSN range: an answer covering one of
//! them newer than the timed request it would go to gives no sample.
//!
//! The state is keyed by the requester, the responder, the UDP source port (one per RC
//! connection, both directions) and the observation (direct, or every mirror session together),
//! not by QP number: the request carries the responder's QPN, its ACK the requester's. Two
//! connections sharing the key (a UDP port collision between the same hosts) are noticed from
//! their requests' QPNs: the key is not timed from then on (until a new incarnation).
//!
//! In the kernel the state is one value shared by the CPUs (a request and its answer may be
//! handled on different ones): each timed request is one word, published by one store, and no
//! word ever moves (slots are emptied in place; age is told by PSN distance), so a request and
//! its answer handled at the same instant on two CPUs can at worst lose a timed request (a
//! sample lost), never pair an answer with a request's stale copy.

use core::mem::size_of;

use crate::flow::{DIRECTION_EGRESS, FlowKey, MIRROR_UNION};
use crate::loghist::LogScale;
use crate::parse::{OpClass, RESPONSE_START_OPS, Transport, in_set};
use crate::seq::{MAX_GO_BACK, REUSE_IDLE_NS, SeqClass, SeqInput, psn_sub};

/// Timed requests in flight per kind and requester direction of a connection.
pub const LAT_SLOTS: usize = 4;
/// Sub-buckets per octave (a power of two): bucket edges 12.5% apart or less.
pub const LAT_SUB_BITS: u32 = 3;
/// The first octave: 2^10 ns (1.024 us). Bucket 0 holds everything below.
pub const LAT_MIN_SHIFT: u32 = 10;
/// Octaves: up to 2^34 ns (17.2 s). The last bucket holds everything above.
pub const LAT_OCTAVES: u32 = 24;
/// Buckets of a [`LatHist`]: below 1.024 us, the octaves' sub-buckets, above 17.2 s.
pub const LAT_BUCKETS: usize = 2 + (LAT_OCTAVES << LAT_SUB_BITS) as usize;

/// The kinds of latency.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LatKind {
    Ack = 0,
    Read = 1,
}

impl LatKind {
    pub const ALL: [LatKind; 2] = [Self::Ack, Self::Read];

    pub const fn name(self) -> &'static str {
        match self {
            Self::Ack => "ack",
            Self::Read => "read",
        }
    }
}

/// A log-scale latency histogram. Counts are summed on merge; `min_ns`/`max_ns` follow.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatHist {
    pub count: u64,
    pub sum_ns: u64,
    /// Meaningful when `count > 0`.
    pub min_ns: u64,
    pub max_ns: u64,
    pub buckets: [u64; LAT_BUCKETS],
}
const _: () = assert!(size_of::<LatHist>() == (4 + LAT_BUCKETS) * 8);

impl Default for LatHist {
    fn default() -> Self {
        Self {
            count: 0,
            sum_ns: 0,
            min_ns: 0,
            max_ns: 0,
            buckets: [0; LAT_BUCKETS],
        }
    }
}

/// The latency histograms' buckets: 2^3 per octave from 2^10 ns to 2^34 ns.
pub const LAT_SCALE: LogScale = LogScale {
    min_shift: LAT_MIN_SHIFT,
    octaves: LAT_OCTAVES,
    sub_bits: LAT_SUB_BITS,
};
const _: () = assert!(LAT_SCALE.buckets() == LAT_BUCKETS);

/// The bucket of a latency of `ns`: 0 below 2^10 ns; then 2^3 buckets per octave, each octave
/// split linearly (the bits after the leading one); the last above 2^34 ns.
#[inline(always)]
pub const fn lat_bucket(ns: u64) -> usize {
    LAT_SCALE.bucket(ns)
}

/// The latencies bucket `i` holds: [lo, hi) in ns (`u64::MAX` for the last).
pub const fn lat_bucket_bounds(i: usize) -> (u64, u64) {
    LAT_SCALE.bounds(i)
}

/// [`lat_bucket`] as an index the BPF verifier can bound: LLVM knows the function's range and
/// drops an explicit check as redundant, which the verifier then misses; a volatile read hides
/// the range, so the check stays.
#[inline(always)]
pub fn lat_bucket_index(ns: u64) -> usize {
    let raw = lat_bucket(ns);
    // SAFETY: reading a local.
    let i = unsafe { core::ptr::read_volatile(&raw) };
    if i < LAT_BUCKETS { i } else { LAT_BUCKETS - 1 }
}

impl LatHist {
    #[inline(always)]
    pub fn record(&mut self, ns: u64) {
        if self.count == 0 || ns < self.min_ns {
            self.min_ns = ns;
        }
        if ns > self.max_ns {
            self.max_ns = ns;
        }
        self.count += 1;
        self.sum_ns += ns;
        self.buckets[lat_bucket_index(ns)] += 1;
    }

    pub fn merge(&mut self, o: &LatHist) {
        if o.count == 0 {
            return;
        }
        if self.count == 0 || o.min_ns < self.min_ns {
            self.min_ns = o.min_ns;
        }
        self.max_ns = self.max_ns.max(o.max_ns);
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        for (a, b) in self.buckets.iter_mut().zip(o.buckets) {
            *a += b;
        }
    }

    /// What this (cumulative) histogram gained since `before`, an earlier state of it. The
    /// extremes of that part are unknown: they become its buckets' edges.
    pub fn since(&self, before: &LatHist) -> LatHist {
        let mut d = LatHist {
            count: self.count.saturating_sub(before.count),
            sum_ns: self.sum_ns.saturating_sub(before.sum_ns),
            ..LatHist::default()
        };
        for (i, (a, b)) in self.buckets.iter().zip(&before.buckets).enumerate() {
            d.buckets[i] = a.saturating_sub(*b);
        }
        let first = d.buckets.iter().position(|n| *n > 0);
        let last = d.buckets.iter().rposition(|n| *n > 0);
        if let (Some(f), Some(l)) = (first, last) {
            d.min_ns = lat_bucket_bounds(f).0.max(self.min_ns);
            d.max_ns = lat_bucket_bounds(l).1.saturating_sub(1).min(self.max_ns);
        }
        d
    }

    /// The `q` quantile (0..=1) in ns: the bucket holding it, interpolated linearly inside it
    /// (as Prometheus's `histogram_quantile` does), kept within the exact minimum and maximum.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        LAT_SCALE.quantile(&self.buckets, self.min_ns, self.max_ns, q)
    }
}

/// Whose requests a [`LatState`] times, and where it saw them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LatKey {
    pub requester: [u8; 16],
    pub responder: [u8; 16],
    pub udp_src_port: u16,
    /// 0 for packets seen directly (either direction of a host), [`MIRROR_UNION`] for mirror
    /// copies (every session together: requests and answers may take different links).
    pub mirror: u16,
    pub _pad: u32,
}
const _: () = assert!(size_of::<LatKey>() == 40);

#[inline(always)]
const fn scope(mirror: u16) -> u16 {
    if mirror & 0x8000 != 0 {
        MIRROR_UNION
    } else {
        0
    }
}

impl LatKey {
    /// The key of a request of flow `k` (its sender is the requester).
    #[inline(always)]
    pub fn of_request(k: &FlowKey) -> Self {
        let mut key = Self::default();
        key.set(k, false);
        key
    }

    /// The key of an answer of flow `k` (its receiver is the requester).
    #[inline(always)]
    pub fn of_answer(k: &FlowKey) -> Self {
        let mut key = Self::default();
        key.set(k, true);
        key
    }

    /// Sets this key to the request or answer key of `k`, in place (the kernel keeps it in a
    /// map value: no 40-byte temporary on its stack).
    #[inline(always)]
    pub fn set(&mut self, k: &FlowKey, answer: bool) {
        if answer {
            self.requester = k.dst_ip;
            self.responder = k.src_ip;
        } else {
            self.requester = k.src_ip;
            self.responder = k.dst_ip;
        }
        self.udp_src_port = k.udp_src_port;
        self.mirror = scope(k.mirror);
        self._pad = 0;
    }
}

/// Where latency was measured, for the per-interface histograms.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LatSide {
    /// The requests arrived (a host answering them, or a capture): the time the answering
    /// side took, seen from where the requests arrive.
    RequestsIn = 0,
    /// The requests left this host (TC egress): the round trip through the fabric and the
    /// peer.
    RequestsOut = 1,
    /// Mirror copies: tap to responder to tap.
    Mirror = 2,
}

impl LatSide {
    pub const fn of(bits: u8) -> Self {
        match bits {
            1 => Self::RequestsOut,
            2 => Self::Mirror,
            _ => Self::RequestsIn,
        }
    }
}

/// The per-interface histogram a sample goes to (a per-CPU map's key in the kernel).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LatScopeKey {
    /// 0 in replay.
    pub ifindex: u32,
    /// [`LatKind`].
    pub kind: u8,
    /// [`LatSide`].
    pub side: u8,
    pub _pad: u16,
}
const _: () = assert!(size_of::<LatScopeKey>() == 8);

/// A sample: its kind and value, and the side the requests were seen on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatSample {
    pub kind: LatKind,
    pub ns: u64,
    pub side: LatSide,
}

/// A timed request in one word, so that one store publishes it whole (the kernel's state is
/// shared by the CPUs that see the requests and the answers): bit 63 set, the PSN in bits
/// 62..39, the time in ns modulo 2^39 (550 s; samples are kept to 17 s) below.
#[inline(always)]
const fn slot_word(psn: u32, now_ns: u64) -> u64 {
    (1 << 63) | (((psn & 0xFF_FFFF) as u64) << 39) | (now_ns & SLOT_NS_MASK)
}
const SLOT_NS_MASK: u64 = (1 << 39) - 1;

#[inline(always)]
const fn slot_psn(w: u64) -> u32 {
    ((w >> 39) & 0xFF_FFFF) as u32
}

#[inline(always)]
const fn slot_elapsed(w: u64, now_ns: u64) -> u64 {
    now_ns.wrapping_sub(w) & SLOT_NS_MASK
}

/// The answer of PSN `answer` covers request PSN `psn` (at or after it, within the distance a
/// sender can have in flight).
#[inline(always)]
const fn covers(answer: u32, psn: u32) -> bool {
    psn_sub(answer, psn) < MAX_GO_BACK
}

/// `LatState::flags`: `untimed` holds the first AckReq request not timed; no new one is
/// timed until an ACK covers it.
pub const LF_UNTIMED: u32 = 1;
/// Requests of two QP numbers were seen under the key while samples were in flight.
pub const LF_SHARED: u32 = 1 << 1;
/// The requests were seen leaving the host (TC egress).
pub const LF_EGRESS: u32 = 1 << 2;
/// `LatState::newest` holds a PSN.
pub const LF_NEWEST: u32 = 1 << 3;
/// `LatState::last` holds a PSN.
pub const LF_LAST: u32 = 1 << 4;

/// Mirror copies of one packet through several sessions arrive within this of each other; a
/// request seen again later is a resend, whatever the PSN analysis calls it (it calls the first
/// packet of a go-back-N run a duplicate until the run shows itself).
pub const COPY_WINDOW_NS: u64 = 1_000_000;
/// An elapsed time above this is a negative one wrapped (an answer seen before its request's
/// timing: clocks of merged captures, mirror sessions with different delays): no sample.
const ELAPSED_MAX_NS: u64 = 1 << 38;

/// The latency state of one requester direction of a connection: the timed requests in flight
/// and the histograms of its samples.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatState {
    /// Timed AckReq requests in flight, in any order ([`slot_word`]; 0 empty).
    pub ack: [u64; LAT_SLOTS],
    /// Timed READ requests in flight, in any order.
    pub read: [u64; LAT_SLOTS],
    /// While `LF_UNTIMED`: requests with AckReq that are not timed lie in [untimed,
    /// untimed_hi] (an answer covering any of them gives no sample).
    pub untimed: u32,
    pub untimed_hi: u32,
    /// The newest request with AckReq seen (`LF_NEWEST`): an answer ahead of it answers one
    /// not seen yet.
    pub newest: u32,
    /// The responder's QP number, from the requests.
    pub qp: u32,
    pub flags: u32,
    /// ACKs that answered a timed request but gave no sample: they also covered an untimed
    /// one, or the request had been sent again.
    pub skipped: u32,
    /// Requests whose QP number differed from the one in flight (see `LF_SHARED`).
    pub conflicts: u32,
    /// Nonzero once an answer reached this state (under its own port, or through a
    /// [`LatLinkKey`]): its requests stop noting themselves in their hosts' [`LatPeers`].
    /// Written by the answers' CPU only (a request of a new incarnation clears it).
    pub answered: u32,
    /// The newest request of any kind seen in order (`LF_LAST`): what an answer must be near
    /// to be to these requests ([`LatState::fits`]).
    pub last: u32,
    pub _pad: u32,
    /// The newest PSN an answer acknowledged and when ([`slot_word`]; 0 none): a request at or
    /// behind it seen soon after (a copy through a slower mirror session, a late capture) was
    /// answered before it was seen. One word: answers write it with one store, and never
    /// `flags`, which the requests' CPU writes.
    pub acked: u64,
    pub hist: [LatHist; 2],
}
const _: () = assert!(size_of::<LatState>() == 16 * LAT_SLOTS + 48 + 2 * size_of::<LatHist>());

impl Default for LatState {
    fn default() -> Self {
        Self {
            ack: [0; LAT_SLOTS],
            read: [0; LAT_SLOTS],
            untimed: 0,
            untimed_hi: 0,
            newest: 0,
            qp: 0,
            flags: 0,
            skipped: 0,
            conflicts: 0,
            answered: 0,
            last: 0,
            _pad: 0,
            acked: 0,
            hist: [LatHist::default(); 2],
        }
    }
}

/// A slot of the ring holds a request timed less than [`REUSE_IDLE_NS`] before `now_ns`.
#[inline(always)]
fn recent(ring: &[u64; LAT_SLOTS], now_ns: u64) -> bool {
    let mut any = false;
    let mut i = 0;
    while i < LAT_SLOTS {
        let w = ring[i];
        any |= w != 0 && slot_elapsed(w, now_ns) < REUSE_IDLE_NS;
        i += 1;
    }
    any
}

/// The first empty slot of a ring, if any.
#[inline(always)]
fn free_slot(ring: &[u64; LAT_SLOTS]) -> Option<usize> {
    let mut i = 0;
    while i < LAT_SLOTS {
        if ring[i] == 0 {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Empties the slots whose request the answer of PSN `answer` covers; the word of the newest of
/// them (the nearest behind the answer), if any. Slots stay where they are (no word moves: the
/// kernel's CPUs share the ring), so age is told by PSN distance, not by position.
#[inline(always)]
fn take_covered(ring: &mut [u64; LAT_SLOTS], answer: u32) -> Option<u64> {
    let mut newest = 0u64;
    let mut best = u32::MAX;
    let mut i = 0;
    while i < LAT_SLOTS {
        let w = ring[i];
        if w != 0 && covers(answer, slot_psn(w)) {
            let d = psn_sub(answer, slot_psn(w));
            if d < best {
                best = d;
                newest = w;
            }
            ring[i] = 0;
        }
        i += 1;
    }
    if newest != 0 { Some(newest) } else { None }
}

/// Empties the slots of requests at or after `psn` (sent again: Karn's rule); the PSN of the
/// oldest emptied.
#[inline(always)]
fn forget_from(ring: &mut [u64; LAT_SLOTS], psn: u32) -> Option<u32> {
    let mut first = None;
    let mut best = u32::MAX;
    let mut i = 0;
    while i < LAT_SLOTS {
        let w = ring[i];
        if w != 0 && covers(slot_psn(w), psn) {
            // The oldest: the nearest at or after `psn`.
            let d = psn_sub(slot_psn(w), psn);
            if d < best {
                best = d;
                first = Some(slot_psn(w));
            }
            ring[i] = 0;
        }
        i += 1;
    }
    first
}

/// The packet is an answer of a reliable connection that ends ACK samples, and the last PSN it
/// acknowledges (a NAK's PSN is the one it did not take).
#[inline(always)]
fn ack_psn(p: &SeqInput, class: OpClass) -> Option<(u32, bool)> {
    match class {
        OpClass::Ack | OpClass::AtomicAck => Some((p.psn, false)),
        OpClass::Nak => Some((psn_sub(p.psn, 1), false)),
        // The PSN it names was not taken either: it comes again after the RNR timer.
        OpClass::RnrNak => Some((psn_sub(p.psn, 1), true)),
        _ => None,
    }
}

/// What a packet is to the latency analysis (checked before any lookup: most packets are
/// neither): `Some(false)` a request it may time (with AckReq, or a READ), `Some(true)` an
/// answer that may end a sample, `None` neither. Only such requests matter: a request without
/// AckReq is never timed, and a resend reaches a timed request (Karn's rule) only when the timed
/// one is itself sent again, before its ACK can come.
///
/// `class`, the PSN analysis's: the first request of a new incarnation of the QP number is one,
/// AckReq or not (it starts the state afresh).
#[inline(always)]
pub fn role(p: &SeqInput, class: SeqClass) -> Option<bool> {
    if !matches!(p.transport(), Transport::Rc | Transport::Xrc) {
        return None;
    }
    match p.class() {
        OpClass::ReadRequest => Some(false),
        OpClass::Send | OpClass::Write | OpClass::Atomic => {
            if p.ack_req != 0 || class == SeqClass::NewIncarnation {
                Some(false)
            } else {
                None
            }
        }
        OpClass::Ack | OpClass::AtomicAck | OpClass::Nak | OpClass::RnrNak => Some(true),
        OpClass::ReadResponse => {
            let first = in_set(RESPONSE_START_OPS, p.opcode);
            if first { Some(true) } else { None }
        }
        _ => None,
    }
}

/// Empties the slots no answer covering `psn` can cover too (an older incarnation of the QP,
/// or requests whose answers were never seen).
#[inline(always)]
fn expire(ring: &mut [u64; LAT_SLOTS], psn: u32) {
    let mut i = 0;
    while i < LAT_SLOTS {
        if ring[i] != 0 && !covers(psn, slot_psn(ring[i])) {
            ring[i] = 0;
        }
        i += 1;
    }
}

impl LatState {
    /// A request of this direction (`dest_qp` the responder's QP), classed by the PSN
    /// analysis, seen at `now_ns` (a fine clock). `copies`: the observation is mirror copies,
    /// where a duplicate is another session's copy of the same transmission, not a second one.
    #[inline(always)]
    pub fn request(
        &mut self,
        p: &SeqInput,
        dest_qp: u32,
        class: SeqClass,
        copies: bool,
        now_ns: u64,
    ) {
        let psn = p.psn & 0xFF_FFFF;
        match class {
            // Another session's copy of the same transmission, unless it comes long after
            // the timed one: then it is sent again.
            SeqClass::Duplicate if copies => {
                if self.timed_long_ago(psn, now_ns) {
                    self.resent(psn);
                }
                return;
            }
            SeqClass::NewIncarnation => {
                self.ack = [0; LAT_SLOTS];
                self.read = [0; LAT_SLOTS];
                self.flags &= !(LF_UNTIMED | LF_SHARED | LF_NEWEST);
                self.acked = 0;
                self.answered = 0;
                self.qp = dest_qp;
            }
            // Sent again, or a copy of it seen: no sample from it (Karn's rule).
            SeqClass::Duplicate | SeqClass::Retransmission => {
                self.resent(psn);
                return;
            }
            // Seen for the first time, but late (it fills a hole): older than the timed requests
            // in flight, so not timed; untimed, so that no ACK covering it gives a sample.
            SeqClass::OutOfOrder => {
                if p.ack_req != 0 && p.class() != OpClass::ReadRequest {
                    self.untime(psn);
                }
                return;
            }
            SeqClass::InOrder | SeqClass::Ahead => {}
            _ => return,
        }
        self.last = psn;
        self.flags |= LF_LAST;
        // Two connections under the key (a UDP port shared between the same hosts): their
        // ACKs cannot be told apart, so nothing is timed from then on. Checked first: the
        // other connection's PSNs would expire this one's timed requests.
        if self.flags & LF_SHARED != 0 {
            return;
        }
        if self.qp != dest_qp {
            // In flight: timed within the silence after which the PSN analysis takes a jump
            // for a new incarnation. Older slots are requests whose answers were never seen
            // (the last of an earlier connection on the port): no conflict.
            let idle = !recent(&self.ack, now_ns) && !recent(&self.read, now_ns);
            if idle || self.qp == 0 {
                self.qp = dest_qp;
                self.ack = [0; LAT_SLOTS];
                self.read = [0; LAT_SLOTS];
                self.acked = 0;
                self.answered = 0;
            } else {
                // Another connection under the same key: nothing is timed any more (until a
                // new incarnation).
                self.conflicts += 1;
                self.flags |= LF_SHARED;
                self.ack = [0; LAT_SLOTS];
                self.read = [0; LAT_SLOTS];
                return;
            }
        }
        expire(&mut self.ack, psn);
        expire(&mut self.read, psn);
        if self.flags & LF_UNTIMED != 0 && !covers(psn, self.untimed) {
            self.flags &= !LF_UNTIMED;
        }
        if p.ack_req != 0 && p.class() != OpClass::ReadRequest {
            self.newest = psn;
            self.flags |= LF_NEWEST;
        }
        // Answered already, just before it was seen: not timed. (Long after, it is a new
        // connection's behind an old one's answers.)
        let a = self.acked;
        if a != 0 && covers(slot_psn(a), psn) && slot_elapsed(a, now_ns) < REUSE_IDLE_NS {
            return;
        }
        if p.class() == OpClass::ReadRequest {
            if let Some(i) = free_slot(&self.read) {
                self.read[i] = slot_word(psn, now_ns);
            }
        } else if p.ack_req != 0 {
            match free_slot(&self.ack) {
                Some(i) => self.ack[i] = slot_word(psn, now_ns),
                None => self.untime(psn),
            }
        }
    }

    /// Notes request `psn` (with AckReq) as not timed: [untimed, untimed_hi] grows to hold it.
    #[inline(always)]
    fn untime(&mut self, psn: u32) {
        if self.flags & LF_UNTIMED == 0 {
            self.untimed = psn;
            self.untimed_hi = psn;
            self.flags |= LF_UNTIMED;
            return;
        }
        if covers(self.untimed, psn) {
            self.untimed = psn;
        }
        if covers(psn, self.untimed_hi) {
            self.untimed_hi = psn;
        }
    }

    /// Requests from `psn` on are sent again (Karn's rule): the timed ones are forgotten and
    /// count as untimed.
    #[inline(always)]
    fn resent(&mut self, psn: u32) {
        let first = forget_from(&mut self.ack, psn);
        if let Some(first) = first {
            self.skipped += 1;
            self.untime(first);
        }
        // Every request with AckReq from `psn` to the newest seen goes again.
        if self.flags & LF_NEWEST != 0 && covers(self.newest, psn) {
            self.untime(self.newest);
        }
        forget_from(&mut self.read, psn);
    }

    /// A timed request of PSN `psn` was timed more than [`COPY_WINDOW_NS`] before `now_ns`.
    #[inline(always)]
    fn timed_long_ago(&self, psn: u32, now_ns: u64) -> bool {
        let mut i = 0;
        while i < LAT_SLOTS {
            let w = self.ack[i];
            if w != 0 && slot_psn(w) == psn && slot_elapsed(w, now_ns) > COPY_WINDOW_NS {
                return true;
            }
            let w = self.read[i];
            if w != 0 && slot_psn(w) == psn && slot_elapsed(w, now_ns) > COPY_WINDOW_NS {
                return true;
            }
            i += 1;
        }
        false
    }

    /// An answer in the reverse direction seen at `now_ns`: the sample it ends, if any.
    #[inline(always)]
    pub fn answer(&mut self, p: &SeqInput, now_ns: u64) -> Option<(LatKind, u64)> {
        let class = p.class();
        if class == OpClass::ReadResponse {
            let first = in_set(RESPONSE_START_OPS, p.opcode);
            let psn = p.psn & 0xFF_FFFF;
            if !first {
                return None;
            }
            // It acknowledges the requests before its READ too (an implicit ACK): the timed ones
            // it covers are answered, without a sample (its time is the READ's latency), so a
            // later ACK is not matched to them.
            let before = psn_sub(psn, 1);
            if take_covered(&mut self.ack, before).is_some() {
                self.skipped += 1;
            }
            if self.flags & LF_UNTIMED != 0 && covers(before, self.untimed) {
                if covers(before, self.untimed_hi) {
                    self.flags &= !LF_UNTIMED;
                } else {
                    self.untimed = psn;
                }
            }
            self.answered(psn, now_ns);
            let w = take_covered(&mut self.read, psn)?;
            let elapsed = slot_elapsed(w, now_ns);
            let clean = self.flags & LF_SHARED == 0 && elapsed <= ELAPSED_MAX_NS;
            return (slot_psn(w) == psn && clean).then_some((LatKind::Read, elapsed));
        }
        let (psn, rnr) = ack_psn(p, class)?;
        // A NAK (sequence error) or an RNR NAK names the first request the responder did not
        // take: go-back-N sends it and those after it again. Their timing ends here.
        if class == OpClass::Nak || rnr {
            self.resent(psn.wrapping_add(1) & 0xFF_FFFF);
        }
        self.answered(psn, now_ns);
        let untimed = self.flags & LF_UNTIMED != 0;
        let (lo, hi) = (self.untimed, self.untimed_hi);
        let untimed_covered = untimed && covers(psn, lo);
        if untimed_covered {
            if covers(psn, hi) {
                self.flags &= !LF_UNTIMED;
            } else {
                self.untimed = psn.wrapping_add(1) & 0xFF_FFFF;
            }
        }
        let w = take_covered(&mut self.ack, psn)?;
        // An untimed request newer than the timed one it would be matched to, and covered:
        // the answer may be its (the untimed ones lie in [lo, hi]).
        // The newest untimed request it can cover: `hi`, or its own PSN short of it.
        let top = if covers(psn, hi) { hi } else { psn };
        let newer_untimed = untimed_covered && crate::seq::psn_after(top, slot_psn(w));
        // Ahead of every request with AckReq seen: it answers one not seen yet (its request
        // went by another way, or is late), not a timed one.
        let unseen = self.flags & LF_NEWEST != 0 && !covers(self.newest, psn);
        let elapsed = slot_elapsed(w, now_ns);
        // An RNR NAK acknowledges what precedes the PSN it names: a sample of the newest of
        // those like any ACK's (the RNR wait that follows is the named request's, untimed).
        if newer_untimed || unseen || self.flags & LF_SHARED != 0 || elapsed > ELAPSED_MAX_NS {
            self.skipped += 1;
            return None;
        }
        Some((LatKind::Ack, elapsed))
    }

    /// Requests up to `psn` are answered at `now_ns`: one seen just after is not timed.
    #[inline(always)]
    fn answered(&mut self, psn: u32, now_ns: u64) {
        let a = self.acked;
        if a == 0 || !covers(slot_psn(a), psn) || slot_elapsed(a, now_ns) >= REUSE_IDLE_NS {
            self.acked = slot_word(psn, now_ns);
        }
    }

    /// An answer of PSN `psn` can be to these requests: at or behind the newest (or just
    /// ahead, [`PEER_AHEAD`]); true when no request told yet. Another connection's answers
    /// under the same port (its directions use ports of their own, one of them this one's)
    /// fit nothing here, unless their PSNs are this one's too.
    #[inline(always)]
    pub fn fits(&self, psn: u32) -> bool {
        self.flags & LF_LAST == 0
            || psn_sub(self.last.wrapping_add(PEER_AHEAD), psn & 0xFF_FFFF)
                < MAX_GO_BACK + PEER_AHEAD
    }

    /// Records a sample in this state's histogram of its kind.
    #[inline(always)]
    pub fn record(&mut self, kind: LatKind, ns: u64) {
        match kind {
            LatKind::Ack => self.hist[0].record(ns),
            LatKind::Read => self.hist[1].record(ns),
        }
    }

    /// Where the requests were seen.
    #[inline(always)]
    pub fn side(&self, key: &LatKey) -> LatSide {
        if key.mirror != 0 {
            LatSide::Mirror
        } else if self.flags & LF_EGRESS != 0 {
            LatSide::RequestsOut
        } else {
            LatSide::RequestsIn
        }
    }

    /// Notes the direction a request of flow `k` was seen in.
    #[inline(always)]
    pub fn note_direction(&mut self, k: &FlowKey) {
        if k.mirror & DIRECTION_EGRESS != 0 && k.mirror & 0x8000 == 0 {
            self.flags |= LF_EGRESS;
        } else {
            self.flags &= !LF_EGRESS;
        }
    }

    /// Adds another view (userspace merging of kernel reads is per key: the kernel's state is
    /// one shared value; this sums the histograms and counts).
    pub fn merge(&mut self, o: &LatState) {
        self.hist[0].merge(&o.hist[0]);
        self.hist[1].merge(&o.hist[1]);
        self.skipped += o.skipped;
        self.conflicts += o.conflicts;
        self.flags |= o.flags & (LF_EGRESS | LF_SHARED);
    }
}

/// Requester directions of one pair of hosts (a [`LatKey`] with port 0) not answered yet, each
/// one word: the port its requests travel with and its newest request's PSN. The answers of a
/// connection whose directions use ports of their own (each side's from its own QPN, fixed
/// per QP, a flow label per side) find no [`LatState`] under their port: the requester
/// direction whose newest request their PSN falls behind, when it is the only one, is theirs,
/// and a [`LatLinkKey`] keeps it for their later answers. Two that fit give no link: nothing
/// is guessed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatPeers {
    /// Bit 63 set, the port in bits 62..47, the PSN in 46..23, the time in units of
    /// 2^[`PEER_TIME_SHIFT`] ns modulo 2^23 below; 0 empty.
    pub slot: [u64; LAT_PEER_SLOTS],
}
const _: () = assert!(size_of::<LatPeers>() == 8 * LAT_PEER_SLOTS);

/// Unanswered requester directions kept per pair of hosts (the oldest makes room).
pub const LAT_PEER_SLOTS: usize = 8;
/// [`LatPeers`]' clock: about a millisecond.
const PEER_TIME_SHIFT: u32 = 20;
const PEER_TIME_MASK: u64 = (1 << 23) - 1;
/// A direction noted longer ago than this (about 17 s, the longest sample kept) fits no answer.
const PEER_MAX_AGE: u64 = 1 << 14;
/// An ACK may name a request after the newest noted (coalesced over requests without AckReq,
/// which are not noted: the middle of a long WRITE): by this many PSNs at most.
const PEER_AHEAD: u32 = MAX_GO_BACK;

#[inline(always)]
const fn peer_word(port: u16, psn: u32, now_ns: u64) -> u64 {
    (1 << 63)
        | ((port as u64) << 47)
        | (((psn & 0xFF_FFFF) as u64) << 23)
        | ((now_ns >> PEER_TIME_SHIFT) & PEER_TIME_MASK)
}

#[inline(always)]
const fn peer_port(w: u64) -> u16 {
    (w >> 47) as u16
}

#[inline(always)]
const fn peer_psn(w: u64) -> u32 {
    ((w >> 23) & 0xFF_FFFF) as u32
}

#[inline(always)]
const fn peer_age(w: u64, now_ns: u64) -> u64 {
    ((now_ns >> PEER_TIME_SHIFT).wrapping_sub(w)) & PEER_TIME_MASK
}

impl LatPeers {
    /// A request of PSN `psn` on `port`, not answered yet, seen at `now_ns`. One store per
    /// slot: a CPU reading it meanwhile sees the old word or the new one.
    #[inline(always)]
    pub fn note(&mut self, port: u16, psn: u32, now_ns: u64) {
        // Each port starts looking at a slot of its own: two CPUs noting two ports at once
        // rarely pick the same empty slot (one note would be lost, and with it an ambiguity).
        let home = usize::from(port) % LAT_PEER_SLOTS;
        let (mut same, mut empty, mut old) = (LAT_PEER_SLOTS, LAT_PEER_SLOTS, 0);
        let mut old_age = 0;
        let mut n = 0;
        while n < LAT_PEER_SLOTS {
            let i = (home + n) % LAT_PEER_SLOTS;
            let mut w = self.slot[i];
            // Noted too long ago to fit an answer: free (told before its time wraps).
            if w != 0 && peer_age(w, now_ns) >= PEER_MAX_AGE {
                self.slot[i] = 0;
                w = 0;
            }
            if w == 0 {
                if empty == LAT_PEER_SLOTS {
                    empty = i;
                }
            } else if peer_port(w) == port {
                same = i;
            } else if peer_age(w, now_ns) >= old_age {
                old_age = peer_age(w, now_ns);
                old = i;
            }
            n += 1;
        }
        let mut psn = psn & 0xFF_FFFF;
        let at = if same < LAT_PEER_SLOTS {
            // A request sent again is a little behind the newest: the newest stays. (Far
            // behind: a new connection on the port.)
            let w = self.slot[same];
            let back = psn_sub(peer_psn(w), psn);
            if back != 0 && back < MAX_GO_BACK {
                psn = peer_psn(w);
            }
            same
        } else if empty < LAT_PEER_SLOTS {
            empty
        } else {
            old
        };
        if at < LAT_PEER_SLOTS {
            self.slot[at] = peer_word(port, psn, now_ns);
        }
    }

    /// The port of the only direction an answer of PSN `psn` seen at `now_ns` fits: at or
    /// behind its newest request by less than a sender can have in flight (or just ahead,
    /// [`PEER_AHEAD`]), noted recently.
    #[inline(always)]
    pub fn fit(&self, psn: u32, now_ns: u64) -> Option<u16> {
        let mut found = None;
        let mut i = 0;
        while i < LAT_PEER_SLOTS {
            let w = self.slot[i];
            if w != 0
                && peer_age(w, now_ns) < PEER_MAX_AGE
                && psn_sub(peer_psn(w).wrapping_add(PEER_AHEAD), psn) < MAX_GO_BACK + PEER_AHEAD
            {
                if found.is_some() {
                    return None;
                }
                found = Some(peer_port(w));
            }
            i += 1;
        }
        found
    }

    /// The direction on `port` is answered: its slot is free.
    #[inline(always)]
    pub fn forget(&mut self, port: u16) {
        let mut i = 0;
        while i < LAT_PEER_SLOTS {
            let w = self.slot[i];
            if w != 0 && peer_port(w) == port {
                self.slot[i] = 0;
            }
            i += 1;
        }
    }
}

/// The answers of a requester direction whose answers travel on a port of their own: the
/// requester and responder, the QP the answers name (the requester's), the observation. The
/// value is the port of the requests (the [`LatKey`] of their [`LatState`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LatLinkKey {
    pub requester: [u8; 16],
    pub responder: [u8; 16],
    pub qp: u32,
    pub mirror: u16,
    pub _pad: u16,
}
const _: () = assert!(size_of::<LatLinkKey>() == 40);

impl LatLinkKey {
    /// The link key of an answer of flow `k` under its latency key `lk`.
    #[inline(always)]
    pub fn set(&mut self, lk: &LatKey, k: &FlowKey) {
        self.requester = lk.requester;
        self.responder = lk.responder;
        self.qp = k.dest_qp;
        self.mirror = lk.mirror;
        self._pad = 0;
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), no padding (asserted above), every bit pattern valid.
    unsafe impl aya::Pod for super::LatKey {}
    unsafe impl aya::Pod for super::LatState {}
    unsafe impl aya::Pod for super::LatHist {}
    unsafe impl aya::Pod for super::LatScopeKey {}
    unsafe impl aya::Pod for super::LatLinkKey {}
    unsafe impl aya::Pod for super::LatPeers {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::op;

    const US: u64 = 1_000;

    fn req(psn: u32, opcode: u8, ack_req: bool) -> SeqInput {
        SeqInput {
            psn,
            opcode,
            ack_req: ack_req as u8,
            aeth_syndrome: crate::parse::NO_AETH,
            ..Default::default()
        }
    }

    fn ack(psn: u32, syndrome: u16) -> SeqInput {
        SeqInput {
            psn,
            opcode: op::ACKNOWLEDGE,
            aeth_syndrome: syndrome,
            ..Default::default()
        }
    }

    fn write(s: &mut LatState, psn: u32, t: u64) {
        s.request(
            &req(psn, op::WRITE_ONLY, true),
            7,
            SeqClass::InOrder,
            false,
            t,
        );
    }

    #[test]
    fn buckets_are_ordered_and_cover_the_range() {
        let mut prev = 0;
        for i in 0..LAT_BUCKETS {
            let (lo, hi) = lat_bucket_bounds(i);
            assert_eq!(lo, prev, "bucket {i}");
            assert!(hi > lo);
            assert_eq!(lat_bucket(lo), i);
            if hi != u64::MAX {
                assert_eq!(lat_bucket(hi - 1), i);
            }
            prev = hi;
        }
        assert_eq!(lat_bucket(1023), 0);
        assert_eq!(lat_bucket(1024), 1);
        assert_eq!(lat_bucket(u64::MAX), LAT_BUCKETS - 1);
        // Edges at most 12.5% apart.
        for i in 1..LAT_BUCKETS - 1 {
            let (lo, hi) = lat_bucket_bounds(i);
            assert!((hi - lo) * 8 <= lo, "bucket {i}: {lo}..{hi}");
        }
    }

    #[test]
    fn quantiles_stay_within_a_bucket_and_the_extremes() {
        let mut h = LatHist::default();
        for _ in 0..100 {
            h.record(1_000 * US);
        }
        assert_eq!(h.quantile(0.5), Some(1_000 * US));
        assert_eq!(h.quantile(0.99), Some(1_000 * US));
        let mut h = LatHist::default();
        for v in 1..=1000u64 {
            h.record(v * US);
        }
        for (q, want) in [(0.5, 500 * US), (0.9, 900 * US), (0.99, 990 * US)] {
            let got = h.quantile(q).unwrap();
            assert!(got.abs_diff(want) * 8 <= want, "q{q}: {got} vs {want}");
        }
        assert_eq!(h.quantile(1.0), Some(1000 * US));
        assert_eq!(LatHist::default().quantile(0.5), None);
    }

    #[test]
    fn one_ack_one_sample() {
        let mut s = LatState::default();
        write(&mut s, 10, 1_000 * US);
        assert_eq!(
            s.answer(&ack(10, 0), 1_020 * US),
            Some((LatKind::Ack, 20 * US))
        );
        // Answered: a repeated ACK gives nothing.
        assert_eq!(s.answer(&ack(10, 0), 1_030 * US), None);
    }

    #[test]
    fn a_coalesced_ack_matches_the_newest_request_it_covers() {
        let mut s = LatState::default();
        write(&mut s, 1, 0);
        write(&mut s, 2, 5 * US);
        write(&mut s, 3, 9 * US);
        assert_eq!(s.answer(&ack(2, 0), 30 * US), Some((LatKind::Ack, 25 * US)));
        assert_eq!(s.answer(&ack(3, 0), 31 * US), Some((LatKind::Ack, 22 * US)));
    }

    #[test]
    fn past_the_slots_nothing_is_guessed() {
        let mut s = LatState::default();
        for psn in 1..=6 {
            write(&mut s, psn, psn as u64 * US);
        }
        // 1..4 timed, 5 and 6 not. An ACK up to 3: timed, newest covered is 3.
        assert_eq!(
            s.answer(&ack(3, 0), 100 * US),
            Some((LatKind::Ack, 97 * US))
        );
        // A slot is free again: 7 is timed.
        write(&mut s, 7, 101 * US);
        // An ACK of 5 covers timed 4 and untimed 5, newer than 4: no sample.
        assert_eq!(s.answer(&ack(5, 0), 102 * US), None);
        assert_eq!(s.skipped, 1);
        // An ACK of 7 covers untimed 6 too, but 7 is newer and timed: its sample.
        assert_eq!(s.answer(&ack(7, 0), 103 * US), Some((LatKind::Ack, 2 * US)));
        write(&mut s, 8, 104 * US);
        assert_eq!(s.answer(&ack(8, 0), 110 * US), Some((LatKind::Ack, 6 * US)));
    }

    #[test]
    fn karn_resent_or_duplicated_requests_give_no_sample() {
        let mut s = LatState::default();
        write(&mut s, 1, 0);
        write(&mut s, 2, 0);
        s.request(
            &req(2, op::WRITE_ONLY, true),
            7,
            SeqClass::Retransmission,
            false,
            50 * US,
        );
        // The ACK of 2 covers the timed 1 too: still no sample (2 is the newest it answers).
        assert_eq!(s.answer(&ack(2, 0), 60 * US), None);
        assert_eq!(s.skipped, 2);
        // An ACK of 1 alone would have been a sample.
        let mut s = LatState::default();
        write(&mut s, 1, 0);
        write(&mut s, 2, 0);
        s.request(
            &req(2, op::WRITE_ONLY, true),
            7,
            SeqClass::Retransmission,
            false,
            50 * US,
        );
        assert_eq!(s.answer(&ack(1, 0), 60 * US), Some((LatKind::Ack, 60 * US)));
        let mut s = LatState::default();
        write(&mut s, 1, 0);
        s.request(
            &req(1, op::WRITE_ONLY, true),
            7,
            SeqClass::Duplicate,
            false,
            US,
        );
        assert_eq!(s.answer(&ack(1, 0), 60 * US), None);
        // Mirror copies: a duplicate is another session's copy of the same packet.
        let mut s = LatState::default();
        write(&mut s, 1, 0);
        s.request(
            &req(1, op::WRITE_ONLY, true),
            7,
            SeqClass::Duplicate,
            true,
            US,
        );
        assert_eq!(s.answer(&ack(1, 0), 60 * US), Some((LatKind::Ack, 60 * US)));
    }

    #[test]
    fn a_late_request_is_untimed_and_no_ack_goes_past_it() {
        let mut s = LatState::default();
        write(&mut s, 1, 0);
        // 3 arrived ahead of 2 (a hole), then 2 late.
        s.request(
            &req(3, op::WRITE_ONLY, true),
            7,
            SeqClass::Ahead,
            false,
            10 * US,
        );
        s.request(
            &req(2, op::WRITE_ONLY, true),
            7,
            SeqClass::OutOfOrder,
            false,
            20 * US,
        );
        // An ACK of 2 covers timed 1 and untimed 2: no sample (2 may be what it answers).
        assert_eq!(s.answer(&ack(2, 0), 50 * US), None);
        // Then 3's ACK: timed, and newer than the untimed 2.
        assert_eq!(s.answer(&ack(3, 0), 60 * US), Some((LatKind::Ack, 50 * US)));
    }

    /// Another QP's request under the key while a timed request sits in any slot (not only the
    /// first) is a conflict, and its PSN does not expire this connection's timed requests.
    #[test]
    fn a_conflict_is_seen_whatever_slot_is_in_flight() {
        let mut s = LatState::default();
        write(&mut s, 10, 0);
        write(&mut s, 11, US);
        assert_eq!(s.answer(&ack(10, 0), 5 * US), Some((LatKind::Ack, 5 * US)));
        // Slot 0 is empty, 11 is in flight: a request to QP 9 far away in PSN space.
        s.request(
            &req(0x80_0000, op::WRITE_ONLY, true),
            9,
            SeqClass::InOrder,
            false,
            6 * US,
        );
        assert_eq!((s.conflicts, s.flags & LF_SHARED), (1, LF_SHARED));
        assert_eq!(s.answer(&ack(11, 0), 8 * US), None);
    }

    /// A request first seen after the answer that covers it (a slower mirror session's copy, a
    /// late capture) is not timed: the next ACK would make a sample of it.
    #[test]
    fn a_request_seen_after_its_answer_is_not_timed() {
        let mut s = LatState::default();
        write(&mut s, 10, 0);
        assert_eq!(
            s.answer(&ack(10, 0), 10 * US),
            Some((LatKind::Ack, 10 * US))
        );
        // 11's ACK passes before 11 itself is seen: ahead of every request, no sample.
        assert_eq!(s.answer(&ack(11, 0), 12 * US), None);
        write(&mut s, 11, 13 * US);
        assert_eq!(s.ack, [0; LAT_SLOTS]);
        // A repeated ACK of 11 makes no sample of the late copy.
        assert_eq!(s.answer(&ack(11, 0), 14 * US), None);
        write(&mut s, 12, 20 * US);
        assert_eq!(s.answer(&ack(12, 0), 28 * US), Some((LatKind::Ack, 8 * US)));
    }

    /// The first packet of a new incarnation reaches the latency state, AckReq or not, and
    /// starts it afresh (a conflict of the old incarnation ends).
    #[test]
    fn a_new_incarnation_without_ackreq_starts_afresh() {
        let first = req(500, op::WRITE_FIRST, false);
        assert_eq!(role(&first, SeqClass::NewIncarnation), Some(false));
        assert_eq!(role(&first, SeqClass::InOrder), None);
        let mut s = LatState::default();
        write(&mut s, 10, 0);
        s.request(
            &req(20, op::WRITE_ONLY, true),
            9,
            SeqClass::InOrder,
            false,
            US,
        );
        assert_eq!(s.flags & LF_SHARED, LF_SHARED);
        s.request(&first, 9, SeqClass::NewIncarnation, false, 2 * US);
        assert_eq!(s.flags & LF_SHARED, 0);
        write(&mut s, 501, 3 * US);
        assert_eq!(s.answer(&ack(501, 0), 9 * US), Some((LatKind::Ack, 6 * US)));
    }

    /// An RNR NAK of 6 answers 5 (taken) like an ACK of 5; 6 waits for the RNR timer, untimed.
    #[test]
    fn an_rnr_nak_answers_what_precedes_it() {
        let mut s = LatState::default();
        write(&mut s, 5, 0);
        write(&mut s, 6, US);
        assert_eq!(
            s.answer(&ack(6, 0x20), 7 * US),
            Some((LatKind::Ack, 7 * US))
        );
        assert_eq!(s.ack, [0; LAT_SLOTS]);
        assert_eq!(
            (s.flags & LF_UNTIMED, s.untimed, s.untimed_hi),
            (LF_UNTIMED, 6, 6)
        );
    }

    /// The last request of a connection never answered (its ACK lost at the tap) stays in its
    /// slot; a new connection on the same port with another QP, past the silence that makes a
    /// new incarnation, is no conflict, and its requests are timed whatever PSNs it uses.
    #[test]
    fn a_port_reused_after_a_silence_is_no_conflict() {
        let mut s = LatState::default();
        write(&mut s, 0x10_0000, 0);
        assert_eq!(
            s.answer(&ack(0x10_0000, 0), 3 * US),
            Some((LatKind::Ack, 3 * US))
        );
        write(&mut s, 0x10_0001, 4 * US);
        let later = 4 * US + REUSE_IDLE_NS;
        // The new connection starts just behind the old one's answers.
        s.request(
            &req(0x0F_FFF0, op::WRITE_ONLY, true),
            9,
            SeqClass::InOrder,
            false,
            later,
        );
        assert_eq!((s.conflicts, s.flags & LF_SHARED, s.qp), (0, 0, 9));
        assert_eq!(
            s.answer(&ack(0x0F_FFF0, 0), later + 2 * US),
            Some((LatKind::Ack, 2 * US))
        );
    }

    #[test]
    fn rnr_naks_give_no_sample_and_naks_cover_what_precedes() {
        let mut s = LatState::default();
        write(&mut s, 5, 0);
        assert_eq!(s.answer(&ack(5, 0x20), 10 * US), None); // RNR NAK
        // 5 was not taken: it stays untimed, sent again after the RNR timer, then ACKed.
        assert_eq!(s.flags & LF_UNTIMED, LF_UNTIMED);
        assert_eq!((s.untimed, s.untimed_hi), (5, 5));
        s.request(
            &req(5, op::WRITE_ONLY, true),
            7,
            SeqClass::Retransmission,
            false,
            15 * US,
        );
        assert_eq!(s.answer(&ack(5, 0), 18 * US), None);
        assert_eq!(s.flags & LF_UNTIMED, 0);
        write(&mut s, 6, 20 * US);
        write(&mut s, 8, 21 * US);
        // NAK sequence error at 8: 6 and 7 were taken, 8 was not (and will be sent again: its
        // timing ends).
        assert_eq!(
            s.answer(&ack(8, 0x60), 40 * US),
            Some((LatKind::Ack, 20 * US))
        );
        assert_eq!(s.ack[0], 0);
        assert_eq!(s.answer(&ack(8, 0), 90 * US), None);
    }

    #[test]
    fn reads_match_their_first_response() {
        let mut s = LatState::default();
        let read = |psn| req(psn, op::READ_REQUEST, false);
        s.request(&read(100), 7, SeqClass::InOrder, false, 0);
        s.request(&read(104), 7, SeqClass::InOrder, false, 2 * US);
        let resp = |psn, opcode| SeqInput {
            psn,
            opcode,
            aeth_syndrome: 0,
            ..Default::default()
        };
        assert_eq!(
            s.answer(&resp(100, op::READ_RESPONSE_FIRST), 30 * US),
            Some((LatKind::Read, 30 * US))
        );
        assert_eq!(
            s.answer(&resp(101, op::READ_RESPONSE_MIDDLE), 31 * US),
            None
        );
        assert_eq!(
            s.answer(&resp(104, op::READ_RESPONSE_ONLY), 40 * US),
            Some((LatKind::Read, 38 * US))
        );
    }

    #[test]
    fn a_read_response_answers_the_writes_before_its_read_without_a_sample() {
        let mut s = LatState::default();
        write(&mut s, 10, 0);
        s.request(
            &req(11, op::READ_REQUEST, false),
            7,
            SeqClass::InOrder,
            false,
            US,
        );
        let resp = SeqInput {
            psn: 11,
            opcode: op::READ_RESPONSE_ONLY,
            aeth_syndrome: 0,
            ..Default::default()
        };
        assert_eq!(s.answer(&resp, 30 * US), Some((LatKind::Read, 29 * US)));
        // An ACK later covering the WRITE: not its answer any more.
        assert_eq!(s.answer(&ack(11, 0), 500 * US), None);
        assert_eq!(s.skipped, 1);
    }

    #[test]
    fn two_connections_under_one_key_are_not_timed() {
        let mut s = LatState::default();
        write(&mut s, 1, 0);
        s.request(
            &req(900, op::WRITE_ONLY, true),
            8,
            SeqClass::InOrder,
            false,
            US,
        );
        assert_eq!(s.conflicts, 1);
        assert_eq!(s.answer(&ack(1, 0), 10 * US), None);
        assert_eq!(s.answer(&ack(900, 0), 10 * US), None);
    }

    #[test]
    fn requests_never_answered_leave_room_in_the_end() {
        let mut s = LatState::default();
        for psn in 1..=6 {
            write(&mut s, psn, 0);
        }
        // Never answered; the connection goes on far ahead (a new incarnation whose first
        // request had no AckReq, or answers out of view): timing resumes.
        write(&mut s, 1 << 17, US);
        assert_eq!(
            s.answer(&ack(1 << 17, 0), 9 * US),
            Some((LatKind::Ack, 8 * US))
        );
    }

    #[test]
    fn a_deep_pipeline_keeps_giving_samples() {
        // More than four requests in flight all along: each ACK covers requests up to a timed
        // one newer than every untimed one it covers.
        let mut s = LatState::default();
        for psn in 1..=5 {
            write(&mut s, psn, psn as u64 * US);
        }
        assert_eq!(s.answer(&ack(2, 0), 20 * US), Some((LatKind::Ack, 18 * US)));
        assert_eq!(s.answer(&ack(4, 0), 21 * US), Some((LatKind::Ack, 17 * US)));
        for psn in 6..=8 {
            write(&mut s, psn, 20 * US + psn as u64 * US);
        }
        // Slots 6, 7, 8; untimed 5 (older). ACK 7 covers 5, older than 7: a sample.
        assert_eq!(s.answer(&ack(7, 0), 40 * US), Some((LatKind::Ack, 13 * US)));
        let sampled = (9..=40u32)
            .filter(|psn| {
                write(&mut s, *psn, u64::from(*psn) * 10 * US);
                s.answer(&ack(psn - 1, 0), u64::from(*psn) * 10 * US + 5 * US)
                    .is_some()
            })
            .count();
        assert!(sampled >= 30, "{sampled} samples over 32 ACKs");
    }

    #[test]
    fn samples_survive_the_psn_wrap_and_the_slot_clock_wrap() {
        let mut s = LatState::default();
        let t = (1u64 << 39) - 5;
        write(&mut s, 0xFF_FFFF, t);
        write(&mut s, 1, t + 10);
        assert_eq!(s.answer(&ack(1, 0), t + 25), Some((LatKind::Ack, 15)));
    }

    #[test]
    fn an_answer_ahead_of_every_request_seen_gives_no_sample() {
        // Its request went another way (another mirror session, delayed): not the timed one's.
        let mut s = LatState::default();
        write(&mut s, 10, 0);
        assert_eq!(s.answer(&ack(11, 0), 40 * US), None);
        assert_eq!(s.skipped, 1);
    }

    #[test]
    fn a_late_request_with_timed_ones_after_it_keeps_the_newer_untimed_one() {
        // 1, 3, 4, 5 timed; 6 untimed (full); 2 arrives late: untimed 2..6.
        let mut s = LatState::default();
        write(&mut s, 1, 0);
        s.request(&req(3, op::WRITE_ONLY, true), 7, SeqClass::Ahead, false, US);
        for psn in 4..=6 {
            write(&mut s, psn, US);
        }
        s.request(
            &req(2, op::WRITE_ONLY, true),
            7,
            SeqClass::OutOfOrder,
            false,
            2 * US,
        );
        assert_eq!(s.answer(&ack(2, 0), 10 * US), None);
        // 6 is still untimed: an ACK of 6 gives nothing (not 5's time).
        assert_eq!(s.answer(&ack(6, 0), 20 * US), None);
    }

    #[test]
    fn mirror_copies_long_after_are_resends() {
        let mut s = LatState::default();
        write(&mut s, 1, 0);
        // Another session's copy 2 us later: the same transmission.
        s.request(
            &req(1, op::WRITE_ONLY, true),
            7,
            SeqClass::Duplicate,
            true,
            2 * US,
        );
        assert_eq!(s.answer(&ack(1, 0), 30 * US), Some((LatKind::Ack, 30 * US)));
        // Seen again 3 ms after: sent again (a timeout's first resent packet).
        write(&mut s, 2, 100 * US);
        s.request(
            &req(2, op::WRITE_ONLY, true),
            7,
            SeqClass::Duplicate,
            true,
            3_100 * US,
        );
        assert_eq!(s.answer(&ack(2, 0), 3_200 * US), None);
    }

    /// An answer finds the only unanswered direction whose newest request it falls behind
    /// (or just ahead of); two that fit give nothing; a request sent again keeps the newest.
    #[test]
    fn peers_fit_only_one_direction() {
        let mut p = LatPeers::default();
        p.note(50001, 100, US);
        p.note(50002, 0x20_0000, US);
        assert_eq!(p.fit(100, 2 * US), Some(50001));
        assert_eq!(p.fit(90, 2 * US), Some(50001));
        assert_eq!(p.fit(100 + PEER_AHEAD / 2, 2 * US), Some(50001));
        assert_eq!(p.fit(0x20_0000, 2 * US), Some(50002));
        assert_eq!(p.fit(0x80_0000, 2 * US), None, "nobody's");
        // Sent again: behind the newest, which stays.
        p.note(50001, 50, 3 * US);
        assert_eq!(p.fit(100, 4 * US), Some(50001));
        // A third direction near the first: their answers are told apart by nothing.
        p.note(50003, 120, 5 * US);
        assert_eq!(p.fit(100, 6 * US), None);
        p.forget(50003);
        assert_eq!(p.fit(100, 6 * US), Some(50001));
        // Too old to fit (about 17 s).
        assert_eq!(p.fit(100, 20_000_000 * US), None);
    }

    /// A full set makes room by its oldest direction.
    #[test]
    fn peers_replace_the_oldest() {
        let mut p = LatPeers::default();
        let ms = 1_000 * US;
        for i in 0..LAT_PEER_SLOTS as u16 {
            p.note(
                40000 + i,
                u32::from(i) * 0x10_0000,
                (u64::from(i) + 1) * 4 * ms,
            );
        }
        p.note(49999, 0xF0_0000, 40 * ms);
        assert_eq!(p.fit(0, 41 * ms), None, "the oldest (port 40000) made room");
        assert_eq!(p.fit(0x10_0000, 41 * ms), Some(40001));
        assert_eq!(p.fit(0xF0_0000, 41 * ms), Some(49999));
    }
}
