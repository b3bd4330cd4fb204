//! The map types (`#[repr(C)]`, no implicit padding) and the per-flow update used by both the
//! kernel program and userspace aggregation.

use core::mem::size_of;

use crate::parse::{Mirror, MirrorKind, OpClass, RocePacket, SkipReason};
use crate::seq::{Seq, SeqClass, SeqCounts, SeqInput, SeqTrack};
use crate::wire::ERSPAN_SESSIONS;

/// One direction of one queue pair as seen on the wire.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowKey {
    /// IPv4 v4-mapped (`::ffff:a.b.c.d`).
    pub src_ip: [u8; 16],
    pub dst_ip: [u8; 16],
    /// 24 bits.
    pub dest_qp: u32,
    pub udp_src_port: u16,
    /// 0 for a packet seen directly on ingress. A mirror copy has bit 15 set, and then either
    /// bit 14 plus the 10-bit ERSPAN session ID (II, III) or the `MirrorKind` in bits 12..10
    /// (I, GRE TEB): two mirror sessions never merge. Bit 13 ([`DIRECTION_EGRESS`]): seen
    /// leaving the host (TC egress, host mode).
    pub mirror: u16,
}

/// `FlowKey::mirror` bit of a packet seen leaving the host (TC egress).
pub const DIRECTION_EGRESS: u16 = 0x2000;

/// `FlowKey::mirror` of the entry where the PSN analysis of a flow's mirror copies runs: the
/// copies of every mirror session together (a QP sprayed over several mirrored links is whole
/// only there; two taps on one path show there as duplicates), while each session's entry
/// keeps its own counts. Bits 15, 14 and 12..10: no copy's key has them all (a session's has
/// bits 13..10 clear, a sessionless kind's has bit 14 clear).
pub const MIRROR_UNION: u16 = 0xDC00;
const _: () = assert!(size_of::<FlowKey>() == 40);

/// Two hosts, the lower address first: the key under which connection-manager traffic (MADs to
/// QP 1) between them is remembered. A connection set up again between the same hosts (QP
/// numbers reused) exchanges MADs first, so a PSN jump after them is a new incarnation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPair {
    pub lo: [u8; 16],
    pub hi: [u8; 16],
}
const _: () = assert!(size_of::<HostPair>() == 32);

impl HostPair {
    #[inline(always)]
    pub fn of(k: &FlowKey) -> Self {
        let mut pair = Self::default();
        pair.set(k);
        pair
    }

    /// Becomes the hosts of `k`, in place (the kernel keeps it in a map value: no 32-byte
    /// temporary on its stack).
    #[inline(always)]
    pub fn set(&mut self, k: &FlowKey) {
        // Any order will do, so one the BPF target computes without a memcmp: the addresses
        // as pairs of words.
        let w = |a: &[u8; 16]| (u64::from_ne_bytes(to8(a, 0)), u64::from_ne_bytes(to8(a, 8)));
        let (lo, hi) = if w(&k.src_ip) <= w(&k.dst_ip) {
            (&k.src_ip, &k.dst_ip)
        } else {
            (&k.dst_ip, &k.src_ip)
        };
        self.lo = *lo;
        self.hi = *hi;
    }
}

/// The destination QP of connection-manager MADs (the GSI).
pub const QP_CM: u32 = 1;

/// `FlowKey::mirror` of the PSN analysis of a mirror copy ([`FlowKey::union`]).
#[inline(always)]
pub const fn union_mirror(mirror: u16) -> u16 {
    MIRROR_UNION | (mirror & DIRECTION_EGRESS)
}

/// `FlowKey::mirror` of a mirror copy.
#[inline(always)]
pub const fn mirror_key(m: &Mirror) -> u16 {
    match m.session {
        Some(id) => 0xC000 | (id & 0x03FF),
        None => 0x8000 | ((m.kind as u16 & 0x7) << 10),
    }
}

/// What `FlowKey::mirror` says: not mirrored, an ERSPAN session, or a sessionless mirror kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MirrorOf {
    Direct,
    Session(u16),
    Kind(MirrorKind),
    /// Every mirror session of a flow together ([`MIRROR_UNION`]).
    Union,
}

impl MirrorOf {
    pub const fn of(mirror: u16) -> Self {
        if mirror & 0x8000 == 0 {
            Self::Direct
        } else if mirror & !DIRECTION_EGRESS == MIRROR_UNION {
            Self::Union
        } else if mirror & 0x4000 != 0 {
            Self::Session(mirror & 0x03FF)
        } else {
            match (mirror >> 10) & 0x7 {
                2 => Self::Kind(MirrorKind::ErspanII),
                3 => Self::Kind(MirrorKind::ErspanIII),
                4 => Self::Kind(MirrorKind::Teb),
                _ => Self::Kind(MirrorKind::ErspanI),
            }
        }
    }
}

impl FlowKey {
    /// Seen leaving the host (TC egress), not arriving.
    #[inline(always)]
    pub const fn is_egress(&self) -> bool {
        self.mirror & DIRECTION_EGRESS != 0
    }

    /// The entry of the PSN analysis of a mirror copy: every mirror session of the flow
    /// together ([`MIRROR_UNION`]); `None` for a packet seen directly.
    #[inline(always)]
    pub const fn union(&self) -> Option<Self> {
        if self.is_copy() {
            Some(Self {
                mirror: union_mirror(self.mirror),
                ..*self
            })
        } else {
            None
        }
    }

    /// A mirror copy's flow (not the analysis of all its sessions).
    #[inline(always)]
    pub const fn is_copy(&self) -> bool {
        self.mirror & 0x8000 != 0 && !self.is_union()
    }

    /// The entry of the PSN analysis of all mirror sessions of a flow, not a flow of its own.
    #[inline(always)]
    pub const fn is_union(&self) -> bool {
        self.mirror & !DIRECTION_EGRESS == MIRROR_UNION
    }

    #[inline(always)]
    pub fn of(p: &RocePacket) -> Self {
        Self {
            src_ip: p.src_ip,
            dst_ip: p.dst_ip,
            dest_qp: p.bth.dest_qp,
            udp_src_port: p.udp_src_port,
            mirror: match &p.mirror {
                Some(m) => mirror_key(m),
                None => 0,
            },
        }
    }
}

/// Per-flow accounting. In the kernel it is a per-CPU value; userspace sums with [`merge`].
///
/// [`merge`]: FlowStats::merge
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    pub packets: u64,
    /// From the IP length fields, so truncated mirror copies count fully.
    pub bytes: u64,
    /// Indexed by the ECN codepoint: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: [u64; 4],
    /// Indexed by [`OpClass`].
    pub ops: [u64; OpClass::COUNT],
    /// Request PSNs that jumped forward (opened a hole).
    pub psn_gaps: u64,
    /// Request PSNs behind the expected one (out of order, duplicate, retransmitted).
    pub psn_regressions: u64,
    /// Bit d set when DSCP d was seen.
    pub dscp_mask: u64,
    /// Bit d set when a CNP was seen with DSCP d (the flow's ACKs share its key).
    pub cnp_dscp_mask: u64,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    /// Mirror copies with the ERSPAN truncated bit set.
    pub mirror_truncated: u64,
    /// Bit p set when a frame's outer VLAN tag had priority (PCP) p; bit 8 ([`UNTAGGED`]) when
    /// a frame had no tag.
    pub pcp_mask: u32,
    /// Bit t set when an opcode of transport t ([`Transport`](crate::parse::Transport): the
    /// opcode's top three bits) was seen.
    pub transport_mask: u32,
    /// VLAN IDs seen, each stored as VID + 1 (0: no tag seen): the outer tag's lowest and
    /// highest, then the inner (QinQ) tag's.
    pub vids: [u16; 4],
    /// The PSN analysis: counts (summed on merge) and continuation state (follows the more
    /// recent view).
    pub seq: SeqCounts,
    pub seq_track: SeqTrack,
}
const _: () =
    assert!(size_of::<FlowStats>() == 24 * 8 + 16 + size_of::<SeqCounts>() + size_of::<SeqTrack>());

/// Widens [lo, hi] (0: empty) to hold `v`.
#[inline(always)]
fn widen(lo: &mut u16, hi: &mut u16, v: u16) {
    if v == 0 {
        return;
    }
    if *lo == 0 || v < *lo {
        *lo = v;
    }
    if v > *hi {
        *hi = v;
    }
}

/// `class` as an index the BPF verifier can bound. LLVM knows an enum's range and may compute
/// the class with a table lookup whose result the verifier cannot bound, dropping any explicit
/// check as redundant; a volatile read hides the range, so the check stays.
#[inline(always)]
pub fn class_index(class: OpClass) -> usize {
    let raw = class as u8;
    // SAFETY: reading a local u8.
    let i = unsafe { core::ptr::read_volatile(&raw) } as usize;
    if i < OpClass::COUNT {
        i
    } else {
        OpClass::Other as usize
    }
}

/// `FlowStats::pcp_mask` bit of an untagged frame.
pub const UNTAGGED: u32 = 1 << 8;

impl FlowStats {
    /// Accounts one packet of this flow at time `now_ns`; the class of a request's PSN.
    #[inline(always)]
    pub fn record(&mut self, p: &RocePacket, now_ns: u64) -> SeqClass {
        self.record_with(p, now_ns, |_| false)
    }

    /// [`record`](Self::record), with `cm_after(t)` saying whether connection-manager traffic
    /// between the flow's hosts was seen after time `t` (asked only when a PSN jumps).
    #[inline(always)]
    pub fn record_with(
        &mut self,
        p: &RocePacket,
        now_ns: u64,
        cm_after: impl FnOnce(u64) -> bool,
    ) -> SeqClass {
        self.count(p, now_ns);
        self.seq().packet(&SeqInput::of(p), now_ns, cm_after)
    }

    /// Accounts one packet of this flow at time `now_ns`, all but the PSN analysis (the kernel
    /// runs it apart, on a [`SeqInput`]; a mirror session's flow has none).
    #[inline(always)]
    pub fn count(&mut self, p: &RocePacket, now_ns: u64) {
        self.seen(p, now_ns);
        self.ecn[(p.ecn() & 3) as usize] += 1;
        self.dscp_mask |= 1u64 << (p.dscp() & 63);
        if let Some(Mirror {
            truncated: true, ..
        }) = &p.mirror
        {
            self.mirror_truncated += 1;
        }
        if p.vlan_count > 0 {
            self.see_vlan(false, p.vlans[0].vid);
        }
        if p.vlan_count > 1 {
            self.see_vlan(true, p.vlans[1].vid);
        }
        self.pcp_mask |= if p.vlan_count > 0 {
            1u32 << (p.vlans[0].pcp & 7)
        } else {
            UNTAGGED
        };
        self.transport_mask |= 1 << (p.bth.opcode >> 5);
        let class = p.op_class();
        self.ops[class_index(class)] += 1;
        if matches!(class, OpClass::Cnp) {
            self.cnp_dscp_mask |= 1u64 << (p.dscp() & 63);
        }
    }

    /// Notes one more packet (and its bytes) seen at `now_ns`: all that the PSN analysis of
    /// mirror sessions together ([`FlowKey::union`]) counts besides the analysis (the daemon
    /// ranks its series by the bytes).
    #[inline(always)]
    pub fn seen(&mut self, p: &RocePacket, now_ns: u64) {
        // Captures replayed out of order (several files, interleaved interfaces) can go back.
        if self.packets == 0 || now_ns < self.first_seen_ns {
            self.first_seen_ns = now_ns;
        }
        if now_ns > self.last_seen_ns {
            self.last_seen_ns = now_ns;
        }
        self.packets += 1;
        self.bytes += p.ip_len as u64;
    }

    /// Notes VLAN ID `vid` of the outer tag, or the inner one of QinQ.
    #[inline(always)]
    pub fn see_vlan(&mut self, inner: bool, vid: u16) {
        let v = (vid & 0x0FFF) + 1;
        if inner {
            let (mut lo, mut hi) = (self.vids[2], self.vids[3]);
            widen(&mut lo, &mut hi, v);
            (self.vids[2], self.vids[3]) = (lo, hi);
        } else {
            let (mut lo, mut hi) = (self.vids[0], self.vids[1]);
            widen(&mut lo, &mut hi, v);
            (self.vids[0], self.vids[1]) = (lo, hi);
        }
    }

    /// The PSN analysis over this flow's fields.
    #[inline(always)]
    pub fn seq(&mut self) -> Seq<'_> {
        Seq {
            counts: &mut self.seq,
            track: &mut self.seq_track,
            gaps: &mut self.psn_gaps,
            regressions: &mut self.psn_regressions,
        }
    }

    /// Adds another partial view of the same flow (another CPU's value, or the cache slot being
    /// written back). The PSN continuation state follows the more recent view; on a tie (times
    /// have one kernel tick's resolution) `o` counts as the more recent, as a written-back slot is.
    #[inline(always)]
    pub fn merge(&mut self, o: &FlowStats) {
        if o.packets == 0 {
            return;
        }
        if self.packets == 0 || o.first_seen_ns < self.first_seen_ns {
            self.first_seen_ns = o.first_seen_ns;
        }
        if o.last_seen_ns >= self.last_seen_ns {
            self.seq_track.assign(&o.seq_track);
            self.last_seen_ns = o.last_seen_ns;
        }
        self.packets += o.packets;
        self.bytes += o.bytes;
        for (a, b) in self.ecn.iter_mut().zip(o.ecn) {
            *a += b;
        }
        for (a, b) in self.ops.iter_mut().zip(o.ops) {
            *a += b;
        }
        self.psn_gaps += o.psn_gaps;
        self.psn_regressions += o.psn_regressions;
        self.seq.merge(&o.seq);
        self.dscp_mask |= o.dscp_mask;
        self.cnp_dscp_mask |= o.cnp_dscp_mask;
        self.pcp_mask |= o.pcp_mask;
        self.transport_mask |= o.transport_mask;
        for (lo, hi) in [(0, 1), (2, 3)] {
            if o.vids[lo] != 0 {
                let (mut l, mut h) = (self.vids[lo], self.vids[hi]);
                widen(&mut l, &mut h, o.vids[lo]);
                widen(&mut l, &mut h, o.vids[hi]);
                (self.vids[lo], self.vids[hi]) = (l, h);
            }
        }
        self.mirror_truncated += o.mirror_truncated;
    }
}

/// One slot of the kernel's per-CPU, direct-mapped flow cache: the hot flows' stats live here
/// and are written back to the flow table when another flow takes the slot. A slot is empty
/// while `stats.packets` is 0. A flow's stats are the table's value merged with its slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowSlot {
    pub key: FlowKey,
    pub stats: FlowStats,
}
const _: () = assert!(size_of::<FlowSlot>() == 40 + size_of::<FlowStats>());

/// Slots of the flow cache (a power of two).
pub const FLOW_CACHE_SLOTS: u32 = 4096;

/// Keys per CPU in the log of flows written back to the flow table (`FLOW_LOG`, a ring; a power
/// of two). A drain that finds more written since the last one reads the whole table instead.
pub const FLOW_LOG_SLOTS: u32 = 1 << 14;

/// Hashes the key as its five 64-bit words (the derived impl hashes field by field, with
/// length prefixes for the address arrays: slower in userspace flow tables).
impl core::hash::Hash for FlowKey {
    #[inline]
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        for w in self.words() {
            state.write_u64(w);
        }
    }
}

impl FlowKey {
    /// The key as five 64-bit words.
    #[inline(always)]
    pub fn words(&self) -> [u64; 5] {
        [
            u64::from_ne_bytes(to8(&self.src_ip, 0)),
            u64::from_ne_bytes(to8(&self.src_ip, 8)),
            u64::from_ne_bytes(to8(&self.dst_ip, 0)),
            u64::from_ne_bytes(to8(&self.dst_ip, 8)),
            (self.dest_qp as u64)
                | ((self.udp_src_port as u64) << 32)
                | ((self.mirror as u64) << 48),
        ]
    }

    /// The cache slot of this key: a multiplicative hash of the key's five words (cheaper than
    /// the table's jhash; collisions only cost a write-back). The product's top bits: they
    /// depend on every bit of the word hashed, where lower ones ignore its high bits (there
    /// the mirror field's session bits, so a mirror copy's session and every-session keys, or
    /// a flow's two directions, would share a slot and take it from each other per packet).
    #[inline(always)]
    pub fn slot(&self) -> u32 {
        let w = self.words();
        let h = w[0] ^ w[1].rotate_left(17) ^ w[2].rotate_left(31) ^ w[3].rotate_left(47) ^ w[4];
        (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FLOW_CACHE_SLOTS.trailing_zeros())) as u32
    }
}

#[inline(always)]
fn to8(b: &[u8; 16], at: usize) -> [u8; 8] {
    [
        b[at],
        b[at + 1],
        b[at + 2],
        b[at + 3],
        b[at + 4],
        b[at + 5],
        b[at + 6],
        b[at + 7],
    ]
}

impl FlowStats {
    /// The same stats without what depends on when and in which order packets were seen (the
    /// times, the evidence times, the continuation state), holes still open counted as lost:
    /// what ground truth can be compared to.
    pub fn timeless(&self) -> Self {
        let mut s = *self;
        let (open, events) = s.seq_track.open_holes();
        s.seq.lost = s.seq.lost.wrapping_add(open);
        s.seq.lost_events = s.seq.lost_events.wrapping_add(events);
        s.seq.timeout_max_ns = 0;
        s.seq.timeout_at_ns = 0;
        s.seq.violation_ns = 0;
        s.seq.violation_psn = 0;
        s.seq.violation_read_psn = 0;
        s.seq.violation_mask = 0;
        s.seq_track = SeqTrack::default();
        s.first_seen_ns = 0;
        s.last_seen_ns = 0;
        s
    }

    /// The counts alone, without the PSN analysis: what a mirror session's flow holds (its
    /// analysis is with every session's, under [`FlowKey::union`]).
    pub fn counts_only(&self) -> Self {
        Self {
            psn_gaps: 0,
            psn_regressions: 0,
            seq: SeqCounts::default(),
            seq_track: SeqTrack::default(),
            ..*self
        }
    }

    /// The PSN analysis alone, with the packets and times: what the analysis of a flow's
    /// mirror sessions together holds ([`FlowKey::union`]).
    pub fn analysis_only(&self) -> Self {
        Self {
            packets: self.packets,
            bytes: self.bytes,
            first_seen_ns: self.first_seen_ns,
            last_seen_ns: self.last_seen_ns,
            psn_gaps: self.psn_gaps,
            psn_regressions: self.psn_regressions,
            seq: self.seq,
            seq_track: self.seq_track,
            ..Self::default()
        }
    }

    /// A fresh value that continues the PSN tracking of `prev` (the flow's table entry).
    #[inline(always)]
    pub fn continuing(prev: &FlowStats) -> Self {
        Self {
            seq_track: prev.seq_track,
            ..Self::default()
        }
    }
}

/// The kernel programs' clock, a value of the `CLOCK` array written by a BPF timer at every
/// tick (a multiple of `period_ns` of CLOCK_MONOTONIC): a frame reads the latest tick, one load,
/// where the clock helper cost as much as the rest of a packet's accounting. Packet times so
/// have one period's resolution (the microburst slot width when slots are kept); passive
/// latency alone reads the clock itself.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    /// CLOCK_MONOTONIC ns of the latest tick (0: the timer was never started).
    pub now_ns: u64,
    /// `now_ns / period_ns`: the microburst slot of the frames until the next tick.
    pub tick: u64,
    /// The tick period in ns (set by the loader before it starts the timer).
    pub period_ns: u64,
    /// Ticks so far.
    pub ticks: u64,
    /// How late the timer ran after the tick it was armed for: the largest and the sum, in ns
    /// (more than a period: ticks were missed, and frames meanwhile had the older tick).
    pub late_max_ns: u64,
    pub late_sum_ns: u64,
    /// 1: the timer is armed for each tick's absolute time; 0: one period after it ran (kernels
    /// without absolute BPF timers), so ticks drift by its lateness.
    pub absolute: u64,
    /// Records written to `BURST_SPANS` so far (record n at n % `BURST_SPAN_LOG`).
    pub spans: u64,
}
const _: () = assert!(size_of::<Clock>() == 8 * 8);

/// The `CLOCK` array's value as userspace sees it: the clock and the kernel's timer (opaque,
/// read back as zeroes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockValue {
    pub clock: Clock,
    pub timer: [u64; 2],
}
const _: () = assert!(size_of::<ClockValue>() == 10 * 8);

/// Global counters (one per-CPU array slot).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    pub frames: u64,
    pub roce_packets: u64,
    pub roce_bytes: u64,
    pub ce_packets: u64,
    pub cnp_packets: u64,
    /// RoCE packets not accounted per flow because the flow table refused the insert.
    pub flow_insert_failures: u64,
    /// Indexed by [`SkipReason`].
    pub skipped: [u64; SkipReason::COUNT],
    /// Mirror copies (RoCE or not) with the ERSPAN truncated bit set.
    pub mirror_truncated: u64,
    /// Mirror copies without a session ID (ERSPAN I, GRE TEB).
    pub mirror_sessionless: u64,
    /// Mirror copies (RoCE or not) per ERSPAN session ID.
    pub mirror_sessions: [u64; ERSPAN_SESSIONS],
    /// Frames seen leaving the host (TC egress, host mode); `frames` includes them.
    pub egress_frames: u64,
    /// PAUSE / PFC frames not itemized because the pause table refused the insert.
    pub pause_insert_failures: u64,
    /// Mirror copies dropped before any accounting: spread over CPUs, the queue of the CPU
    /// they were sent to was full.
    pub spread_dropped: u64,
}
const _: () =
    assert!(size_of::<Counters>() == (6 + SkipReason::COUNT + 2 + ERSPAN_SESSIONS + 3) * 8);

impl Default for Counters {
    fn default() -> Self {
        Self {
            frames: 0,
            roce_packets: 0,
            roce_bytes: 0,
            ce_packets: 0,
            cnp_packets: 0,
            flow_insert_failures: 0,
            skipped: [0; SkipReason::COUNT],
            mirror_truncated: 0,
            mirror_sessionless: 0,
            mirror_sessions: [0; ERSPAN_SESSIONS],
            egress_frames: 0,
            pause_insert_failures: 0,
            spread_dropped: 0,
        }
    }
}

impl Counters {
    /// Accounts one frame's parse result.
    #[inline(always)]
    pub fn record(&mut self, result: &Result<RocePacket, SkipReason>) {
        self.frames += 1;
        match result {
            Ok(p) => {
                self.roce_packets += 1;
                self.roce_bytes += p.ip_len as u64;
                if p.ecn() == 3 {
                    self.ce_packets += 1;
                }
                if p.op_class() == OpClass::Cnp {
                    self.cnp_packets += 1;
                }
            }
            Err(reason) => self.skipped[*reason as usize] += 1,
        }
    }

    /// Accounts the mirror header a frame came in (RoCE inside or not).
    #[inline(always)]
    pub fn record_mirror(&mut self, mirror: &Option<Mirror>) {
        if let Some(m) = mirror {
            if m.truncated {
                self.mirror_truncated += 1;
            }
            match m.session {
                Some(id) => self.mirror_sessions[(id & 0x03FF) as usize] += 1,
                None => self.mirror_sessionless += 1,
            }
        }
    }

    pub fn merge(&mut self, o: &Counters) {
        self.frames += o.frames;
        self.roce_packets += o.roce_packets;
        self.roce_bytes += o.roce_bytes;
        self.ce_packets += o.ce_packets;
        self.cnp_packets += o.cnp_packets;
        self.flow_insert_failures += o.flow_insert_failures;
        for (a, b) in self.skipped.iter_mut().zip(o.skipped) {
            *a += b;
        }
        self.mirror_truncated += o.mirror_truncated;
        self.mirror_sessionless += o.mirror_sessionless;
        for (a, b) in self.mirror_sessions.iter_mut().zip(o.mirror_sessions) {
            *a += b;
        }
        self.egress_frames += o.egress_frames;
        self.pause_insert_failures += o.pause_insert_failures;
        self.spread_dropped += o.spread_dropped;
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), no padding (asserted above), every bit pattern valid.
    unsafe impl aya::Pod for super::FlowKey {}
    unsafe impl aya::Pod for super::FlowStats {}
    unsafe impl aya::Pod for super::Counters {}
    unsafe impl aya::Pod for super::FlowSlot {}
    unsafe impl aya::Pod for super::ClockValue {}
}
