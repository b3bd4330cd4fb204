//! The daemon's per-flow book: cumulative counts per flow from successive reads of the kernel
//! flow table (and the per-CPU flow cache in front of it), the top-K flows exported as their own
//! series and the aggregate rest, idle-flow aging and eviction accounting.
//!
//! Every exported value is a monotonic counter, and every drain's growth is exported exactly
//! once: the growth of the series that stay series, plus the growth of the rest, is the growth
//! of the totals. So `sum(rate(...))` over the series and the rest is the total rate, and the
//! JSON lines' deltas add up to the totals exactly.
//! - A flow's counts are the sum over its *incarnations* (an LRU eviction and re-insert starts a
//!   new table entry: seen as fewer packets in the entry, or a later first-seen time) of the
//!   largest values read. A value read lower than before (a cache slot written back between the
//!   table read and the cache read) is held until the next read catches up.
//! - A series starts at 0 in the drain its flow is promoted (that drain's growth goes to the
//!   rest), or, for a flow new in that drain, with all of its counts. A demoted or aged series
//!   stops where it was; its last drain's growth goes to the rest. So, once series have come and gone, the series plus the rest are less than the
//!   totals by the counts of the series gone ([`Drained::demotions`] counts them).
//! - The rest grows by the growth of `grand` minus the series' growth. `grand` is the flows'
//!   sum (with the flows aged out), plus, for the metrics the kernel also counts per interface
//!   (packets, bytes, CE, CNP, NAK, RNR NAK), what the totals have and no flow has: packets of
//!   flows evicted before a drain read them. That slack counts once it was there at two drains
//!   in a row: a write-back missed by one drain shows up in its flow at the next.
//!
//!
//! What a drain costs, at a million flows: a reading finds its flow where the one after the last
//! reading's flow is (the kernel hands its entries over in the same order at every drain), else
//! through a hash table of indices into the vector of flows. A reading equal to the last one
//! (counts and first-seen time: a flow without a packet since) changes nothing, so only the
//! flows that changed, and those in a cache slot, go through the accounting above; one pass over
//! the flows' first bytes finds the entries gone, the idle flows and the connections that came
//! or went. The sum of every flow's counts is kept as they grow, not added up again. The
//! model in `flowbook/reference.rs` (every flow settled at every drain) is what the tests hold
//! this to, drain for drain.

use std::{cmp::Reverse, collections::BinaryHeap, hash::Hasher};

use hashbrown::HashTable;
use observer_common::{FlowKey, FlowStats, OpClass, QP_CM};
use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use roce_observer::aggregate::connections::{self, Group};

#[cfg(test)]
mod reference;

/// Metrics kept per flow.
pub const METRICS: usize = 9;
pub const PACKETS: usize = 0;
pub const BYTES: usize = 1;
pub const CE: usize = 2;
pub const CNP: usize = 3;
pub const NAK: usize = 4;
pub const RNR_NAK: usize = 5;
pub const PSN_GAPS: usize = 6;
pub const PSN_MISSING: usize = 7;
pub const RETRANSMISSIONS: usize = 8;
/// Metrics `0..TOTALLED` are also counted per interface by the kernel.
pub const TOTALLED: usize = 6;

/// (name in `roce_qp_<name>_total` and the JSON lines, help) per metric.
pub const METRIC_NAMES: [(&str, &str); METRICS] = [
    ("packets", "RoCEv2 packets"),
    ("bytes", "RoCEv2 bytes (IP length)"),
    (
        "ce_packets",
        "RoCEv2 packets marked CE (congestion experienced)",
    ),
    ("cnp_packets", "Congestion notification packets (CNP)"),
    (
        "nak_packets",
        "NAKs (PSN sequence error and other NAK codes)",
    ),
    ("rnr_nak_packets", "RNR NAKs (receiver not ready)"),
    (
        "psn_gaps",
        "Request PSNs ahead of the expected one (each opened a hole: loss or reordering)",
    ),
    (
        "psn_missing",
        "PSNs confirmed lost (their hole left the analysis window unfilled)",
    ),
    (
        "retransmissions",
        "Request PSNs sent again (go-back-N runs, resends after a timeout or RNR wait)",
    ),
];

/// The record counters after the metrics' (a book built with [`RECORD_WIDTH`] counts them
/// too): every counter of a flow that adds up, so that a flow's growth over an interval is a
/// [`FlowStats`] of its own ([`Counts::stats`]).
pub const ECN: usize = METRICS;
/// [`OpClass`] counts, every class.
pub const OPS: usize = ECN + 3;
pub const PSN_REGRESSIONS: usize = OPS + OpClass::COUNT;
pub const MIRROR_TRUNCATED: usize = PSN_REGRESSIONS + 1;
pub const OUT_OF_ORDER: usize = MIRROR_TRUNCATED + 1;
pub const DUPLICATES: usize = OUT_OF_ORDER + 1;
pub const RETX_EPISODES: usize = DUPLICATES + 1;
pub const LOST_EVENTS: usize = RETX_EPISODES + 1;
pub const RESETS: usize = LOST_EVENTS + 1;
pub const NAK_SEQ: usize = RESETS + 1;
pub const RETX_WAITED: usize = NAK_SEQ + 1;
/// The width of a book whose flows' growth leaves as fleet records.
pub const RECORD_WIDTH: usize = RETX_WAITED + 1;

/// One value per metric: the first [`METRICS`], and with [`RECORD_WIDTH`] the record counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Counts<const N: usize = METRICS>(pub [u64; N]);

impl<const N: usize> Default for Counts<N> {
    fn default() -> Self {
        Self([0; N])
    }
}

impl<const N: usize> Counts<N> {
    /// The counts of entry `key` as exported and totalled: the PSN analysis of mirror sessions
    /// together ([`FlowKey::is_union`]) adds its PSN counts alone (each session's flow has the
    /// others; the union's packets and bytes, all the sessions' copies, only rank its series).
    pub fn exported(self, key: &FlowKey) -> Self {
        let mut c = self;
        if key.is_union() {
            c.0[..TOTALLED].fill(0);
        }
        c
    }

    pub fn of(s: &FlowStats) -> Self {
        let mut c = [0; N];
        let metrics = [
            s.packets,
            s.bytes,
            s.ecn[3],
            s.ops[OpClass::Cnp as usize],
            s.ops[OpClass::Nak as usize],
            s.ops[OpClass::RnrNak as usize],
            s.psn_gaps,
            // One view (a cache slot) may hold a late packet's decrement whose loss the table
            // counted: negative there (wrapping), not 2^64 - 1.
            observer_common::seq::non_negative(s.seq.lost),
            s.seq.retransmissions,
        ];
        let n = N.min(METRICS);
        c[..n].copy_from_slice(&metrics[..n]);
        if N >= RECORD_WIDTH {
            c[ECN..OPS].copy_from_slice(&s.ecn[..3]);
            c[OPS..PSN_REGRESSIONS].copy_from_slice(&s.ops);
            c[PSN_REGRESSIONS] = s.psn_regressions;
            c[MIRROR_TRUNCATED] = s.mirror_truncated;
            c[OUT_OF_ORDER] = s.seq.out_of_order;
            c[DUPLICATES] = s.seq.duplicates;
            c[RETX_EPISODES] = s.seq.retx_episodes;
            c[LOST_EVENTS] = s.seq.lost_events;
            c[RESETS] = s.seq.resets;
            c[NAK_SEQ] = s.seq.nak_seq;
            c[RETX_WAITED] = u64::from(s.seq.retx_waited);
        }
        Self(c)
    }

    /// These counts in a book of the records' width (those this one does not keep at 0).
    pub fn widened(&self) -> Counts<RECORD_WIDTH> {
        let mut c = Counts::default();
        let n = N.min(RECORD_WIDTH);
        c.0[..n].copy_from_slice(&self.0[..n]);
        c
    }

    /// The metrics alone.
    pub fn metrics(&self) -> Counts {
        let mut c = Counts::default();
        let n = N.min(METRICS);
        c.0[..n].copy_from_slice(&self.0[..n]);
        c
    }

    /// A flow's growth as the flow statistics of its own: the counters from these counts
    /// (those a book of this width keeps), the rest from `attrs`.
    pub fn stats(&self, attrs: &Attrs) -> FlowStats {
        let at = |i: usize| self.0.get(i).copied().unwrap_or(0);
        let mut s = FlowStats {
            packets: at(PACKETS),
            bytes: at(BYTES),
            psn_gaps: at(PSN_GAPS),
            psn_regressions: at(PSN_REGRESSIONS),
            mirror_truncated: at(MIRROR_TRUNCATED),
            dscp_mask: attrs.dscp_mask,
            cnp_dscp_mask: attrs.cnp_dscp_mask,
            pcp_mask: attrs.pcp_mask,
            transport_mask: attrs.transport_mask,
            vids: attrs.vids,
            first_seen_ns: attrs.first_seen_ns,
            last_seen_ns: attrs.last_seen_ns,
            ..FlowStats::default()
        };
        for (e, i) in s.ecn.iter_mut().zip(ECN..) {
            *e = at(i);
        }
        s.ecn[3] = at(CE);
        for (o, i) in s.ops.iter_mut().zip(OPS..) {
            *o = at(i);
        }
        if N < RECORD_WIDTH {
            s.ops[OpClass::Cnp as usize] = at(CNP);
            s.ops[OpClass::Nak as usize] = at(NAK);
            s.ops[OpClass::RnrNak as usize] = at(RNR_NAK);
        }
        s.seq.lost = at(PSN_MISSING);
        s.seq.retransmissions = at(RETRANSMISSIONS);
        s.seq.out_of_order = at(OUT_OF_ORDER);
        s.seq.duplicates = at(DUPLICATES);
        s.seq.retx_episodes = at(RETX_EPISODES);
        s.seq.lost_events = at(LOST_EVENTS);
        s.seq.resets = at(RESETS);
        s.seq.nak_seq = at(NAK_SEQ);
        s.seq.retx_waited = u32::try_from(at(RETX_WAITED)).unwrap_or(u32::MAX);
        s.seq.pmtu_mask = attrs.pmtu_mask;
        s.seq.timeout_max_ns = attrs.timeout_max_ns;
        s.seq.timeout_at_ns = attrs.timeout_at_ns;
        s
    }

    pub fn add(&mut self, o: &Self) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a = a.saturating_add(b);
        }
    }

    /// Field by field `self - o`, 0 where `o` is larger.
    pub fn minus(&self, o: &Self) -> Self {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(o.0) {
            *a = a.saturating_sub(b);
        }
        d
    }

    /// Field by field maximum.
    pub fn each_max(&self, o: &Self) -> Self {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(o.0) {
            *a = (*a).max(b);
        }
        d
    }

    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|v| *v == 0)
    }

    /// Field by field `self + o`, wrapping: with [`wrapping_minus`](Self::wrapping_minus), a
    /// running sum that parts leave exactly as they came.
    fn wrapping_plus(&self, o: &Self) -> Self {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(o.0) {
            *a = a.wrapping_add(b);
        }
        d
    }

    fn wrapping_minus(&self, o: &Self) -> Self {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(o.0) {
            *a = a.wrapping_sub(b);
        }
        d
    }
}

/// What a flow's records carry beside its counters: what was seen of it (masks, VLAN IDs,
/// times, the path MTU and the longest resend wait), over its table entry's and cache slots'
/// lives, not one interval's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    pub dscp_mask: u64,
    pub cnp_dscp_mask: u64,
    pub pcp_mask: u32,
    pub transport_mask: u32,
    pub vids: [u16; 4],
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
    pub pmtu_mask: u32,
    pub timeout_max_ns: u64,
    pub timeout_at_ns: u64,
}

impl Attrs {
    /// Adds what `s` (a view with packets) saw.
    pub fn add(&mut self, s: &FlowStats) {
        self.merge(&Attrs {
            dscp_mask: s.dscp_mask,
            cnp_dscp_mask: s.cnp_dscp_mask,
            pcp_mask: s.pcp_mask,
            transport_mask: s.transport_mask,
            vids: s.vids,
            first_seen_ns: s.first_seen_ns,
            last_seen_ns: s.last_seen_ns,
            pmtu_mask: s.seq.pmtu_mask,
            timeout_max_ns: s.seq.timeout_max_ns,
            timeout_at_ns: s.seq.timeout_at_ns,
        });
    }

    pub fn merge(&mut self, o: &Attrs) {
        self.dscp_mask |= o.dscp_mask;
        self.cnp_dscp_mask |= o.cnp_dscp_mask;
        self.pcp_mask |= o.pcp_mask;
        self.transport_mask |= o.transport_mask;
        self.pmtu_mask |= o.pmtu_mask;
        // VLAN IDs as VID + 1, 0 none: the lowest and the highest of each tag.
        for (lo, hi) in [(0, 1), (2, 3)] {
            for v in [o.vids[lo], o.vids[hi]] {
                if v != 0 && (self.vids[lo] == 0 || v < self.vids[lo]) {
                    self.vids[lo] = v;
                }
                self.vids[hi] = self.vids[hi].max(v);
            }
        }
        if o.first_seen_ns != 0 && (self.first_seen_ns == 0 || o.first_seen_ns < self.first_seen_ns)
        {
            self.first_seen_ns = o.first_seen_ns;
        }
        self.last_seen_ns = self.last_seen_ns.max(o.last_seen_ns);
        if o.timeout_max_ns > self.timeout_max_ns {
            self.timeout_max_ns = o.timeout_max_ns;
            self.timeout_at_ns = o.timeout_at_ns;
        }
    }
}

/// What the book takes of a table entry (its per-CPU values): made where the entry is read, so
/// that a reader thread hands over these few bytes, not every CPU's 432.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading<const N: usize = METRICS> {
    pub key: FlowKey,
    /// The counts of the CPUs' values with packets, summed.
    pub counts: Counts<N>,
    /// The earliest first-seen time among them (0: no value with packets).
    pub first: u64,
    /// A value saw a connected transport (RC, UC, XRC), and the flow is no CM traffic: its
    /// connection counts among the drain's.
    pub connected: bool,
    /// What the values saw (a book of [`RECORD_WIDTH`] only).
    pub attrs: Attrs,
}

impl<const N: usize> Reading<N> {
    pub fn of(key: &FlowKey, per_cpu: &[FlowStats]) -> Self {
        let mut r = Self {
            key: *key,
            counts: Counts::default(),
            first: 0,
            connected: false,
            attrs: Attrs::default(),
        };
        for v in per_cpu {
            r.connected |= v.transport_mask & connections::CONNECTED != 0;
            if v.packets > 0 {
                r.counts.add(&Counts::of(v));
                if r.first == 0 || v.first_seen_ns < r.first {
                    r.first = v.first_seen_ns;
                }
                if N >= RECORD_WIDTH {
                    r.attrs.add(v);
                }
            }
        }
        r.connected &= key.dest_qp != QP_CM;
        r
    }
}

/// Entries of the settle queue kept allocated between drains.
const QUEUE_KEPT: usize = 1 << 16;

/// No flow: the end of a connection group's list.
const NONE: u32 = u32::MAX;

/// The hash of a connection group in the book's table of groups.
fn hash_group(g: &Group) -> u64 {
    let mut h = FxHasher::default();
    h.write(&g.0);
    h.write(&g.1);
    h.write_u16(g.2);
    h.write_u16(g.3);
    h.finish()
}

/// The hash of a flow key in the book's index.
fn hash_key(key: &FlowKey) -> u64 {
    const _: () = assert!(size_of::<FlowKey>() == 40);
    // SAFETY: FlowKey is 40 bytes of plain integer fields without padding.
    let words: [u64; 5] = unsafe { std::ptr::read_unaligned(std::ptr::from_ref(key).cast()) };
    let mut h = FxHasher::default();
    for w in words {
        h.write_u64(w);
    }
    h.finish()
}

/// What the book knows of one flow.
#[derive(Clone, Debug, Default)]
struct Slot<const N: usize> {
    // What the pass over every flow reads, first.
    /// The pass (one per [`FlowBook::begin`]) the table last handed this flow over in.
    table_pass: u32,
    /// The pass this flow was queued in for [`FlowBook::finish`] to settle.
    queued_pass: u32,
    /// The drain this flow's counts last grew in.
    last_change: u32,
    /// The drain the table last held it in (0: never).
    table_epoch: u32,
    /// The drain before that one.
    prev_table_epoch: u32,
    /// This drain's table entry has fewer packets than the last drain's: a new entry.
    shrunk: bool,
    /// The latest table reading had a connected transport.
    connected: bool,
    /// Counts for its connection group at the last finished drain: the table held it with a
    /// connected transport.
    counted: bool,
    /// The next flow of its connection group ([`NONE`]: the last); see
    /// [`FlowBook::group_heads`].
    group_next: u32,
    /// Earliest first-seen time of the table entry (0: none seen).
    table_first: u64,
    /// The latest reading's earliest first-seen time of the table entry.
    table_first_read: u64,
    key: FlowKey,
    /// The largest values read of the current incarnation (table entry + cache slots): set
    /// with [`set_last`](Self::set_last).
    last: Counts<N>,
    /// The latest settled reading of the table entry, when it differs from `last`; mostly they
    /// are equal, and it takes no room ([`read_table`](Self::read_table)). A reading that
    /// changed waits in [`FlowBook::queue`] until `finish` settles it.
    table_apart: Option<Box<Counts<N>>>,
    /// Counts of earlier incarnations (evicted and re-inserted table entries).
    base: Option<Box<Counts<N>>>,
}

// What a million flows cost the daemon, mostly (docs/benchmarks.md).
const _: () = assert!(size_of::<Slot<METRICS>>() == 176);

impl<const N: usize> Slot<N> {
    fn new(key: FlowKey, epoch: u32) -> Self {
        Self {
            key,
            last_change: epoch,
            group_next: NONE,
            ..Self::default()
        }
    }

    fn cum(&self) -> Counts<N> {
        let mut c = self.last;
        if let Some(b) = &self.base {
            c.add(b);
        }
        c
    }

    /// The latest reading of the table entry.
    fn read_table(&self) -> Counts<N> {
        self.table_apart.as_deref().copied().unwrap_or(self.last)
    }

    fn set_read_table(&mut self, read: Counts<N>) {
        if read == self.last {
            self.table_apart = None;
        } else if let Some(b) = &mut self.table_apart {
            **b = read;
        } else {
            self.table_apart = Some(Box::new(read));
        }
    }

    /// Sets `last`, the latest table reading staying what it was.
    fn set_last(&mut self, last: Counts<N>) {
        let read = self.read_table();
        self.last = last;
        self.set_read_table(read);
    }

    /// The table entry is gone: its counts (all but `cache`, the cache slots' part at the last
    /// read) become an earlier incarnation's.
    fn evicted(&mut self, cache: Counts<N>) {
        let table = self.last.minus(&cache);
        let mut base = self.base.take().map_or_else(Counts::default, |b| *b);
        base.add(&table);
        self.base = Some(Box::new(base));
        self.set_last(self.last.minus(&table));
        self.table_first = 0;
    }
}

/// A flow exported as its own series.
#[derive(Clone, Debug)]
struct Member<const N: usize> {
    key: FlowKey,
    /// The flow's counts when it was promoted (they stay in the rest).
    promo: Counts<N>,
    /// This drain's growth (ranking).
    delta_bytes: u64,
}

/// One exported series: a flow and its counts since promotion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeriesRow {
    pub key: FlowKey,
    pub counts: Counts,
    /// Growth in the last drain (0 in the drain a flow with earlier counts was promoted).
    pub delta: Counts,
}

/// The result of one drain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// The top-K series, largest by bytes in this drain first.
    pub series: Vec<SeriesRow>,
    pub rest: Counts,
    pub rest_delta: Counts,
    /// Flows in the book.
    pub flows: usize,
    /// Entries the kernel table held.
    pub table_entries: usize,
    /// Flows a drain saw in the table that the table then lost without the daemon deleting
    /// them (LRU evictions), ever.
    pub evictions: u64,
    /// RoCE packets in the totals that no flow holds (evicted before being read, or refused
    /// by a full table), ever.
    pub unattributed_packets: u64,
    /// Idle flows forgotten (and deleted from the kernel table), ever.
    pub aged: u64,
    /// Series that stopped (demoted, or aged out), ever.
    pub demotions: u64,
    /// Connections (RC, UC, XRC; both directions of a queue pair, every QP between two hosts
    /// on one UDP source port, joined) among this drain's readings.
    pub connections: usize,
    /// Every flow's growth in this drain, with what was seen of it (a book of
    /// [`RECORD_WIDTH`] only; empty otherwise): the QPs' records of the interval. The
    /// entries of mirror sessions together ([`FlowKey::is_union`]) are among them, with the
    /// PSN analysis of their sessions together.
    pub grown: Vec<Growth>,
}

/// A flow's growth in a drain: its record counters, and what was seen of it.
pub type Growth = (FlowKey, Counts<RECORD_WIDTH>, Attrs);

/// Per-flow counts across drains.
pub struct FlowBook<const N: usize = METRICS> {
    max_series: usize,
    /// Drains a flow may stay unchanged before it is aged out.
    idle_drains: u32,
    /// The flows, in no order; `index` finds them by key.
    slots: Vec<Slot<N>>,
    /// Indices into `slots`, by [`hash_key`] of their keys.
    index: HashTable<u32>,
    members: Vec<Member<N>>,
    /// Counts of flows aged out.
    retired: Counts<N>,
    /// Every flow's counts as exported, summed (wrapping, so that a flow leaves it exactly).
    flows_sum: Counts<N>,
    rest: Counts,
    /// `grand` at the last drain.
    grand: Counts<N>,
    /// Totals minus flows at the last drain, and the part of it counted.
    slack: Counts<N>,
    lost: Counts<N>,
    /// This drain's flow cache slots, summed per flow.
    cache_now: FxHashMap<FlowKey, Counts<N>>,
    /// The last drain's.
    cache_last: FxHashMap<FlowKey, Counts<N>>,
    /// What this drain's changed readings and cache slots saw per flow (a book of
    /// [`RECORD_WIDTH`] only).
    attrs: FxHashMap<FlowKey, Attrs>,
    /// Growth of flows retired since [`take_retired_growth`](Self::take_retired_growth) (their
    /// entries' final values).
    retired_growth: Vec<Growth>,
    /// The connections of this drain's connected cache slots.
    cache_groups: FxHashSet<Group>,
    /// The first flow of each connection group (the flows of one [`connections::group_of`]),
    /// found by the group's hash; the others follow it through [`Slot::group_next`].
    group_heads: HashTable<u32>,
    /// Groups with a `counted` flow: the connections the table held at the last finished drain.
    live_groups: usize,
    /// The flows [`finish`](Self::finish) settles: those whose table reading changed (with
    /// it), those in a cache slot.
    queue: Vec<(u32, Option<Counts<N>>)>,
    /// The idle flows found by the last `finish`.
    idle: Vec<FlowKey>,
    /// Where the next table reading's flow probably is: the one after the last reading's.
    /// The kernel hands its entries over in the same order at every drain (its hash buckets'),
    /// and new flows are added in that order, so the guess mostly holds and the readings walk
    /// the flows in memory order instead of looking each up at random.
    next: usize,
    /// Entries of the PSN analysis of mirror sessions together (no flows of their own).
    unions: usize,
    epoch: u32,
    /// One per `begin`: a drain done again after a failure is a pass of its own.
    pass: u32,
    /// This pass does again a drain that failed before `finish`: its readings may be stored
    /// unsettled, so every flow is settled, as none can be known unchanged.
    full: bool,
    /// The last drain ended with `finish` (a failed one is done again under its epoch).
    finished: bool,
    evictions: u64,
    aged: u64,
    demotions: u64,
    table_entries: usize,
    /// `table_entries` at the last finished drain.
    last_table_entries: usize,
}

impl<const N: usize> FlowBook<N> {
    /// The book keeps the record counters, and hands each drain's growth over.
    const RECORDS: bool = N >= RECORD_WIDTH;

    pub fn new(max_series: usize, idle_drains: u32) -> Self {
        Self {
            max_series,
            idle_drains: idle_drains.max(1),
            slots: Vec::new(),
            index: HashTable::new(),
            members: Vec::new(),
            retired: Counts::default(),
            flows_sum: Counts::default(),
            rest: Counts::default(),
            grand: Counts::default(),
            slack: Counts::default(),
            lost: Counts::default(),
            cache_now: FxHashMap::default(),
            cache_last: FxHashMap::default(),
            attrs: FxHashMap::default(),
            retired_growth: Vec::new(),
            cache_groups: FxHashSet::default(),
            group_heads: HashTable::new(),
            live_groups: 0,
            queue: Vec::new(),
            idle: Vec::new(),
            next: 0,
            unions: 0,
            epoch: 0,
            pass: 0,
            full: false,
            finished: true,
            evictions: 0,
            aged: 0,
            demotions: 0,
            table_entries: 0,
            last_table_entries: 0,
        }
    }

    /// Changes the limits (a reload): series beyond the new maximum are demoted at the next
    /// drain.
    pub fn set_limits(&mut self, max_series: usize, idle_drains: u32) {
        self.max_series = max_series;
        self.idle_drains = idle_drains.max(1);
    }

    fn find(&self, key: &FlowKey) -> Option<usize> {
        let slots = &self.slots;
        self.index
            .find(hash_key(key), |&i| slots[i as usize].key == *key)
            .map(|&i| i as usize)
    }

    /// The flow of `key`, added (with no counts) when new.
    fn find_or_add(&mut self, key: &FlowKey) -> usize {
        let hash = hash_key(key);
        let slots = &self.slots;
        if let Some(&i) = self.index.find(hash, |&i| slots[i as usize].key == *key) {
            return i as usize;
        }
        let i = self.slots.len();
        self.slots.push(Slot::new(*key, self.epoch));
        let slots = &self.slots;
        self.index
            .insert_unique(hash, i as u32, |&j| hash_key(&slots[j as usize].key));
        self.link(i);
        if key.is_union() {
            self.unions += 1;
        }
        i
    }

    /// Takes flow `i` out of the book; the last flow takes its place.
    fn remove_at(&mut self, i: usize) -> Slot<N> {
        let key = self.slots[i].key;
        if let Ok(entry) = self.index.find_entry(hash_key(&key), |&j| j as usize == i) {
            entry.remove();
        }
        self.unlink(i);
        let slot = self.slots.swap_remove(i);
        let from = self.slots.len();
        if i < from {
            let moved = self.slots[i].key;
            if let Some(j) = self
                .index
                .find_mut(hash_key(&moved), |&j| j as usize == from)
            {
                *j = i as u32;
            }
            self.relink(from, i);
        }
        if key.is_union() {
            self.unions -= 1;
        }
        slot
    }

    /// The first flow of group `g` (hash `h`).
    fn group_head(&self, g: &Group, h: u64) -> Option<usize> {
        let slots = &self.slots;
        self.group_heads
            .find(h, |&j| {
                slots
                    .get(j as usize)
                    .is_some_and(|s| connections::group_of(&s.key) == *g)
            })
            .map(|&j| j as usize)
    }

    /// Puts new flow `i` on its group's list.
    fn link(&mut self, i: usize) {
        let g = connections::group_of(&self.slots[i].key);
        let h = hash_group(&g);
        match self.group_head(&g, h) {
            Some(head) => {
                self.slots[i].group_next = self.slots[head].group_next;
                self.slots[head].group_next = i as u32;
            }
            None => {
                self.slots[i].group_next = NONE;
                let slots = &self.slots;
                self.group_heads.insert_unique(h, i as u32, |&j| {
                    hash_group(&connections::group_of(&slots[j as usize].key))
                });
            }
        }
    }

    /// Takes flow `i` off its group's list.
    fn unlink(&mut self, i: usize) {
        let g = connections::group_of(&self.slots[i].key);
        let h = hash_group(&g);
        let next = self.slots[i].group_next;
        if let Ok(entry) = self.group_heads.find_entry(h, |&j| j as usize == i) {
            match next {
                NONE => {
                    entry.remove();
                }
                n => *entry.into_mut() = n,
            }
            return;
        }
        let Some(mut p) = self.group_head(&g, h) else {
            return;
        };
        while self.slots[p].group_next != NONE {
            if self.slots[p].group_next as usize == i {
                self.slots[p].group_next = next;
                return;
            }
            p = self.slots[p].group_next as usize;
        }
    }

    /// The flow that was at `from` is at `to` now: its group's list follows it.
    fn relink(&mut self, from: usize, to: usize) {
        let g = connections::group_of(&self.slots[to].key);
        let h = hash_group(&g);
        if let Some(j) = self.group_heads.find_mut(h, |&j| j as usize == from) {
            *j = to as u32;
            return;
        }
        let Some(mut p) = self.group_head(&g, h) else {
            return;
        };
        while self.slots[p].group_next != NONE {
            if self.slots[p].group_next as usize == from {
                self.slots[p].group_next = to as u32;
                return;
            }
            p = self.slots[p].group_next as usize;
        }
    }

    /// Whether a flow of the list from `head`, other than `except`, is `counted`.
    fn group_counted(&self, head: usize, except: usize) -> bool {
        let mut p = head as u32;
        while p != NONE {
            let s = &self.slots[p as usize];
            if p as usize != except && s.counted {
                return true;
            }
            p = s.group_next;
        }
        false
    }

    /// Flow `i`'s `counted` changed: its group's first counted flow came, or its last went.
    fn counted_changed(&mut self, i: usize) {
        let g = connections::group_of(&self.slots[i].key);
        let Some(head) = self.group_head(&g, hash_group(&g)) else {
            return;
        };
        if !self.group_counted(head, i) {
            if self.slots[i].counted {
                self.live_groups += 1;
            } else {
                self.live_groups -= 1;
            }
        }
    }

    /// Queues flow `i` for `finish` to settle (once per pass), with its table reading when it
    /// changed.
    fn queue(&mut self, i: usize, read: Option<Counts<N>>) {
        let s = &mut self.slots[i];
        if s.queued_pass != self.pass {
            s.queued_pass = self.pass;
            self.queue.push((i as u32, read));
        }
    }

    /// Starts a drain: table entries, then cache slots, then [`finish`](Self::finish). After a
    /// drain that failed before `finish`, the same drain starts over.
    pub fn begin(&mut self) {
        if self.finished {
            self.epoch += 1;
            // A drain done again keeps what the failed one saw (a flow it read and this one
            // does not, evicted in between, still grew).
            self.attrs.clear();
        } else {
            self.full = true;
            // The failed drain's readings stand where this one does not read again.
            for (i, read) in std::mem::take(&mut self.queue) {
                if let Some(read) = read {
                    self.slots[i as usize].set_read_table(read);
                }
            }
        }
        self.pass += 1;
        self.finished = false;
        self.table_entries = 0;
        self.cache_now.clear();
        self.cache_groups.clear();
        self.queue.clear();
        self.next = 0;
    }

    /// A table entry: its per-CPU values.
    pub fn table_entry(&mut self, key: &FlowKey, per_cpu: &[FlowStats]) {
        self.table_reading(&Reading::of(key, per_cpu));
    }

    /// A table entry, as read ([`Reading::of`]). An entry handed over twice in one drain (the
    /// readers' shares of the table meet) counts once, as first read.
    pub fn table_reading(&mut self, r: &Reading<N>) {
        let (epoch, pass, full) = (self.epoch, self.pass, self.full);
        let i = match self.slots.get(self.next) {
            Some(s) if s.key == r.key => self.next,
            _ => self.find_or_add(&r.key),
        };
        self.next = i + 1;
        let s = &mut self.slots[i];
        if s.table_pass == pass {
            return;
        }
        s.table_pass = pass;
        self.table_entries += 1;
        if s.table_epoch != epoch {
            s.prev_table_epoch = s.table_epoch;
        }
        let was_read = s.prev_table_epoch != 0 && s.prev_table_epoch + 1 == epoch;
        // Read at the last drain, and the same again (counts and first-seen time): nothing to
        // settle, the accounting of `finish` would leave it as it is.
        let before = s.read_table();
        let unchanged = !full && was_read && r.counts == before && r.first == s.table_first_read;
        // Within one entry the counts only grow.
        s.shrunk = was_read && r.counts.0[PACKETS] < before.0[PACKETS];
        s.table_epoch = epoch;
        s.table_first_read = r.first;
        s.connected = r.connected;
        if !unchanged {
            self.queue(i, Some(r.counts));
            if Self::RECORDS {
                self.attrs.entry(r.key).or_default().merge(&r.attrs);
            }
        }
    }

    /// Whether this drain must read the whole table: it does again a drain that failed (see
    /// [`begin`](Self::begin)), whose readings are not all known.
    pub fn wants_whole_table(&self) -> bool {
        self.full
    }

    /// Entries the table held at the last finished drain.
    pub fn last_table_entries(&self) -> usize {
        self.last_table_entries
    }

    /// A key the table was asked for in this drain and does not hold (evicted, or never
    /// inserted): not in the table, whatever [`carry_unread`](Self::carry_unread) does next.
    pub fn table_missing(&mut self, key: &FlowKey) {
        if let Some(i) = self.find(key) {
            let s = &mut self.slots[i];
            if s.table_pass != self.pass {
                s.table_pass = self.pass;
                s.connected = false;
            }
        }
    }

    /// After a drain that read only the entries written since the last one (the rest of the
    /// table unchanged: none written, none evicted), the entries the table held at the last
    /// drain and this one did not read, as if read again unchanged. Costs one pass over the
    /// flows' first bytes, no kernel read.
    pub fn carry_unread(&mut self) {
        let (epoch, pass) = (self.epoch, self.pass);
        for s in &mut self.slots {
            if s.table_pass != pass && s.table_epoch != 0 && s.table_epoch + 1 == epoch {
                // What `table_reading` does with a reading equal to the last one.
                s.table_pass = pass;
                s.prev_table_epoch = s.table_epoch;
                s.table_epoch = epoch;
                s.shrunk = false;
                self.table_entries += 1;
            }
        }
    }

    /// A flow cache slot of one CPU, read after the table: a slot written back in between is
    /// missed this drain (and held at its last value), never counted twice.
    pub fn cache_slot(&mut self, key: &FlowKey, stats: &FlowStats) {
        if stats.transport_mask & connections::CONNECTED != 0 && key.dest_qp != QP_CM {
            self.cache_groups.insert(connections::group_of(key));
        }
        if stats.packets > 0 {
            self.cache_now
                .entry(*key)
                .or_default()
                .add(&Counts::of(stats));
            if Self::RECORDS {
                self.attrs.entry(*key).or_default().add(stats);
            }
        }
    }

    /// Flows idle long enough to be forgotten (found by the last [`finish`](Self::finish)):
    /// delete each from the kernel table (whether a drain saw it there or not: a write-back
    /// may have put it there meanwhile) and call [`retire`](Self::retire) with what deleting
    /// returned. Flows a cache slot holds are kept (deleting the table entry would not clear
    /// the slot).
    pub fn idle(&self) -> Vec<FlowKey> {
        self.idle.clone()
    }

    /// The growth of the flows retired since the last call (a book of [`RECORD_WIDTH`] only):
    /// what their entries' final values had beyond the last reading.
    pub fn take_retired_growth(&mut self) -> Vec<Growth> {
        std::mem::take(&mut self.retired_growth)
    }

    /// Forgets an idle flow; `last` is its table entry's final values (deleted from the kernel
    /// table), if it had one.
    pub fn retire(&mut self, key: &FlowKey, last: Option<&[FlowStats]>) {
        let Some(i) = self.find(key) else {
            return;
        };
        if self.slots[i].counted {
            self.slots[i].counted = false;
            self.counted_changed(i);
        }
        let mut s = self.remove_at(i);
        let before = s.cum().exported(key);
        if let Some(per_cpu) = last {
            let mut read = Counts::default();
            let mut attrs = Attrs::default();
            for v in per_cpu.iter().filter(|v| v.packets > 0) {
                read.add(&Counts::of(v));
                attrs.add(v);
            }
            // Held as any reading (an entry written back since holds counts already seen in
            // the cache); what it misses is in the totals' slack.
            let next = s.last.each_max(&read);
            if Self::RECORDS && next != s.last {
                self.retired_growth
                    .push((*key, next.minus(&s.last).widened(), attrs));
            }
            s.set_last(next);
        }
        self.flows_sum = self.flows_sum.wrapping_minus(&before);
        self.retired.add(&s.cum().exported(key));
        let before = self.members.len();
        self.members.retain(|m| m.key != *key);
        self.demotions += (before - self.members.len()) as u64;
        self.aged += 1;
    }

    /// Settles flow `i` for this drain: applies its readings (`read`: the table's, when it
    /// changed; and the cache's), accounts an eviction; its growth.
    fn settle(&mut self, i: usize, read: Option<Counts<N>>) -> Counts<N> {
        let epoch = self.epoch;
        let s = &mut self.slots[i];
        let table = read.unwrap_or_else(|| s.read_table());
        let key = s.key;
        let mut delta = Counts::default();
        let in_table = s.table_epoch == epoch;
        let cache = self.cache_now.get(&key);
        let last_table = if in_table {
            s.prev_table_epoch
        } else {
            s.table_epoch
        };
        let was_in_table = last_table != 0 && last_table + 1 == epoch;
        if in_table || cache.is_some() {
            // Re-inserted (fewer packets in the entry, or a later first-seen time), or
            // gone from the table while the cache holds it: the old entry's counts after
            // its last read are lost (they are in the totals, hence the rest).
            let reinserted = in_table
                && (s.shrunk
                    || (s.table_first != 0
                        && s.table_first_read != 0
                        && s.table_first_read > s.table_first));
            if reinserted || (!in_table && was_in_table) {
                self.evictions += 1;
                s.evicted(self.cache_last.get(&key).copied().unwrap_or_default());
            }
            let mut read = if in_table { table } else { Counts::default() };
            if in_table && s.table_first_read != 0 {
                s.table_first = match s.table_first {
                    0 => s.table_first_read,
                    t => t.min(s.table_first_read),
                };
            }
            if let Some(c) = cache {
                read.add(c);
            }
            let next = s.last.each_max(&read);
            delta = next.minus(&s.last);
            s.set_last(next);
            // Idle by the metrics' counts alone: a book of any width ages the same flows.
            if !delta.metrics().is_zero() {
                s.last_change = epoch;
            }
        } else if was_in_table {
            // In the table at the last drain, gone now, not deleted by us: evicted.
            self.evictions += 1;
            s.evicted(Counts::default());
        }
        if let Some(read) = read {
            s.set_read_table(read);
        }
        s.shrunk = false;
        delta
    }

    /// Ends a drain: applies the readings, accounts evictions, re-ranks the series and grows
    /// the rest by what no continuing series took.
    pub fn finish(&mut self, totals: &Counts) -> Drained {
        let mut records = Vec::new();
        self.finished = true;
        // This drain's growth of the members, and of the K fastest other flows (a bounded
        // min-heap: no allocation per active flow).
        let mut member_delta = vec![Counts::<N>::default(); self.members.len()];
        let member_index: FxHashMap<FlowKey, usize> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.key, i))
            .collect();
        let mut fastest: BinaryHeap<Reverse<(u64, FlowKey, Counts<N>)>> = BinaryHeap::new();
        let cached: Vec<FlowKey> = self.cache_now.keys().copied().collect();
        for key in &cached {
            let i = self.find_or_add(key);
            self.queue(i, None);
        }
        if self.full {
            for i in 0..self.slots.len() {
                self.queue(i, None);
            }
        }
        let mut queue = std::mem::take(&mut self.queue);
        for &(i, read) in &queue {
            let delta = self.settle(i as usize, read);
            let key = self.slots[i as usize].key;
            self.flows_sum = self.flows_sum.wrapping_plus(&delta.exported(&key));
            if Self::RECORDS && !delta.is_zero() {
                let attrs = self.attrs.get(&key).copied().unwrap_or_default();
                records.push((key, delta.widened(), attrs));
            }
            if let Some(m) = member_index.get(&key) {
                member_delta[*m] = delta;
            } else if self.max_series > 0 && (delta.0[BYTES] > 0 || delta.0[PACKETS] > 0) {
                fastest.push(Reverse((delta.0[BYTES], key, delta)));
                if fastest.len() > self.max_series {
                    fastest.pop();
                }
            }
        }
        // Settled; a drain that changed many flows (the first, after a fill) leaves no large
        // buffer behind.
        queue.clear();
        queue.shrink_to(QUEUE_KEPT);
        self.queue = queue;
        self.pass_over_every_flow();
        let mut sum = self.retired;
        sum.add(&self.flows_sum);
        // What the totals have and no flow has, counted once it held for two drains.
        let mut grand = sum;
        for m in 0..TOTALLED {
            let slack = totals.0[m].saturating_sub(sum.0[m]);
            self.lost.0[m] = self.lost.0[m].max(slack.min(self.slack.0[m]));
            self.slack.0[m] = slack;
            grand.0[m] = grand.0[m].saturating_add(self.lost.0[m]);
        }
        let grown = grand.minus(&self.grand);
        self.grand = self.grand.each_max(&grand);
        for (m, d) in self.members.iter_mut().zip(&member_delta) {
            m.delta_bytes = d.0[BYTES];
        }
        let before: FxHashMap<FlowKey, Counts<N>> = self
            .members
            .iter()
            .zip(&member_delta)
            .map(|(m, d)| (m.key, *d))
            .collect();
        let candidates: Vec<(u64, FlowKey, Counts<N>)> =
            fastest.into_iter().map(|Reverse(c)| c).collect();
        let grew: FxHashMap<FlowKey, Counts<N>> =
            candidates.iter().map(|(_, k, d)| (*k, *d)).collect();
        self.rank(candidates);
        let mut series = Vec::with_capacity(self.members.len());
        let mut continuing = Counts::<N>::default();
        for m in &self.members {
            let cum = self.cum_of(&m.key);
            // A series promoted in this drain starts at 0 (its growth is the rest's), unless
            // its flow is new: then it starts with the flow's counts, all of them this drain's.
            let delta = match before.get(&m.key) {
                Some(d) => *d,
                None if m.promo.is_zero() => grew.get(&m.key).copied().unwrap_or_default(),
                None => Counts::default(),
            };
            continuing.add(&delta.exported(&m.key));
            series.push(SeriesRow {
                key: m.key,
                counts: cum.minus(&m.promo).exported(&m.key).metrics(),
                delta: delta.exported(&m.key).metrics(),
            });
        }
        self.demotions += before
            .keys()
            .filter(|k| !self.members.iter().any(|m| m.key == **k))
            .count() as u64;
        series.sort_by(|a, b| {
            b.delta.0[BYTES]
                .cmp(&a.delta.0[BYTES])
                .then(b.counts.0[BYTES].cmp(&a.counts.0[BYTES]))
                .then(a.key.cmp(&b.key))
        });
        let rest_delta = grown.minus(&continuing).metrics();
        self.rest.add(&rest_delta);
        // The table's connections, and those of cache slots the table has none of.
        let connections = self.live_groups
            + self
                .cache_groups
                .iter()
                .filter(|g| {
                    self.group_head(g, hash_group(g))
                        .is_none_or(|head| !self.group_counted(head, usize::MAX))
                })
                .count();
        self.cache_last = std::mem::take(&mut self.cache_now);
        self.full = false;
        self.last_table_entries = self.table_entries;
        Drained {
            series,
            rest: self.rest,
            rest_delta,
            flows: self.slots.len() - self.unions,
            table_entries: self.table_entries,
            evictions: self.evictions,
            unattributed_packets: self.lost.0[PACKETS],
            aged: self.aged,
            demotions: self.demotions,
            connections,
            grown: records,
        }
    }

    /// What a drain asks of every flow, settled or not, in one pass: an entry the table held at
    /// the last drain and neither the table nor a cache slot holds now was evicted; the
    /// connections of the table's connected entries; the idle flows.
    fn pass_over_every_flow(&mut self) {
        let (epoch, pass) = (self.epoch, self.pass);
        self.idle.clear();
        for i in 0..self.slots.len() {
            let s = &mut self.slots[i];
            if s.queued_pass != pass && s.table_epoch != 0 && s.table_epoch + 1 == epoch {
                self.evictions += 1;
                s.evicted(Counts::default());
            }
            if epoch.saturating_sub(s.last_change) >= self.idle_drains
                && !self.cache_now.contains_key(&s.key)
            {
                self.idle.push(s.key);
            }
            let counted = s.table_pass == pass && s.connected;
            if counted != s.counted {
                s.counted = counted;
                self.counted_changed(i);
            }
        }
    }

    /// A flow's counts, every incarnation's (0 for one not in the book).
    fn cum_of(&self, key: &FlowKey) -> Counts<N> {
        self.find(key)
            .map(|i| self.slots[i].cum())
            .unwrap_or_default()
    }
    /// Top K by this drain's bytes, sticky: a member stays until a flow grows more than twice
    /// as fast as the slowest member, or it is aged out; free places go to the fastest flows.
    /// A promoted flow's series starts at its counts now.
    fn rank(&mut self, mut candidates: Vec<(u64, FlowKey, Counts<N>)>) {
        // A flow with counts before this drain starts its series at its counts now; a new
        // flow at 0 (its series has all of its counts).
        let promo_of = |book: &Self, key: &FlowKey, delta: &Counts<N>| {
            let cum = book.cum_of(key);
            if cum.minus(delta).is_zero() {
                Counts::default()
            } else {
                cum
            }
        };
        // Too many after a reload: drop the slowest.
        if self.members.len() > self.max_series {
            self.members
                .sort_by(|a, b| b.delta_bytes.cmp(&a.delta_bytes).then(a.key.cmp(&b.key)));
            self.members.truncate(self.max_series);
        }
        candidates.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        candidates.truncate(self.max_series);
        for (delta_bytes, key, delta) in candidates {
            if self.members.len() < self.max_series {
                let promo = promo_of(self, &key, &delta);
                self.members.push(Member {
                    key,
                    promo,
                    delta_bytes,
                });
                continue;
            }
            let Some((slowest, m)) = self.members.iter().enumerate().min_by(|a, b| {
                a.1.delta_bytes
                    .cmp(&b.1.delta_bytes)
                    .then(b.1.key.cmp(&a.1.key))
            }) else {
                break;
            };
            if delta_bytes <= m.delta_bytes.saturating_mul(2) {
                break;
            }
            let promo = promo_of(self, &key, &delta);
            self.members[slowest] = Member {
                key,
                promo,
                delta_bytes,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(qp: u32) -> FlowKey {
        FlowKey {
            dest_qp: qp,
            ..FlowKey::default()
        }
    }

    fn stats(packets: u64, first: u64) -> FlowStats {
        FlowStats {
            packets,
            bytes: packets * 1000,
            first_seen_ns: first,
            ..FlowStats::default()
        }
    }

    fn totals(packets: u64) -> Counts {
        let mut c = Counts::default();
        c.0[PACKETS] = packets;
        c.0[BYTES] = packets * 1000;
        c
    }

    /// Growth exported by a drain: the series' deltas and the rest's.
    fn exported(d: &Drained) -> Counts {
        let mut s = d.rest_delta;
        for r in &d.series {
            s.add(&r.delta);
        }
        s
    }

    fn instant(d: &Drained) -> u64 {
        d.rest.0[PACKETS] + d.series.iter().map(|r| r.counts.0[PACKETS]).sum::<u64>()
    }

    /// A mirrored flow: its session's entry has the counts, the entry of its sessions
    /// together the PSN analysis (and all the copies' packets, which only rank it).
    #[test]
    fn the_analysis_of_mirror_sessions_together_exports_its_psn_counts_alone() {
        let session = FlowKey {
            mirror: 0xC000 | 7,
            ..key(1)
        };
        let union = session.union().unwrap();
        let mut book = FlowBook::<METRICS>::new(4, 2);
        let mut growth = Counts::default();
        for round in 1..=5u64 {
            book.begin();
            book.table_entry(&session, &[stats(10 * round, 1)]);
            let mut u = stats(10 * round, 1);
            u.seq.lost = round;
            book.table_entry(&union, &[u]);
            let d = book.finish(&totals(10 * round));
            growth.add(&exported(&d));
            // The packets once (the session's), the PSN counts once (the union's).
            assert_eq!(growth.0[PACKETS], 10 * round, "round {round}");
            assert_eq!(growth.0[PSN_MISSING], round, "round {round}");
            assert_eq!(d.flows, 1, "the union is no flow of its own");
            let u = d.series.iter().find(|r| r.key == union).expect("a series");
            assert_eq!((u.counts.0[PACKETS], u.counts.0[PSN_MISSING]), (0, round));
            // Busy, never idle, though its PSN counts may not grow.
            assert!(book.idle().is_empty(), "round {round}");
        }
    }

    #[test]
    fn every_drain_exports_the_growth_of_the_totals_once() {
        let mut book = FlowBook::<METRICS>::new(2, 100);
        let mut prev: Option<Drained> = None;
        let mut sent = [0u64; 5];
        let mut growth = Counts::default();
        for round in 1..=20u64 {
            book.begin();
            let mut total = 0;
            for (qp, n) in sent.iter_mut().enumerate() {
                // Flow 4 starts late and fast: it must displace a slow member.
                *n += if qp == 4 && round > 10 {
                    50
                } else if qp == 4 {
                    0
                } else {
                    qp as u64 + 1
                };
                if *n > 0 {
                    book.table_entry(&key(qp as u32), &[stats(*n, 1)]);
                }
                total += *n;
            }
            let d = book.finish(&totals(total));
            growth.add(&exported(&d));
            assert_eq!(growth.0[PACKETS], total, "round {round}");
            assert_eq!(growth.0[BYTES], total * 1000);
            assert!(d.series.len() <= 2);
            if let Some(p) = &prev {
                assert!(d.rest.0.iter().zip(p.rest.0).all(|(a, b)| *a >= b));
                for r in &d.series {
                    if let Some(o) = p.series.iter().find(|o| o.key == r.key) {
                        assert_eq!(
                            r.counts.0[PACKETS],
                            o.counts.0[PACKETS] + r.delta.0[PACKETS]
                        );
                    }
                }
            }
            if d.demotions == 0 {
                assert_eq!(instant(&d), total);
            }
            prev = Some(d);
        }
        let last = prev.unwrap();
        assert_eq!(last.series[0].key, key(4), "the fast late flow is promoted");
        assert_eq!(last.demotions, 1);
    }

    #[test]
    fn a_demoted_series_moves_nothing_into_the_rest() {
        let mut book = FlowBook::<METRICS>::new(1, 1000);
        let (mut a, mut c) = (0u64, 0u64);
        for i in 0..10 {
            a += 100;
            if i >= 5 {
                c += 1000;
            }
            book.begin();
            book.table_entry(&key(1), &[stats(a, 1)]);
            if c > 0 {
                book.table_entry(&key(2), &[stats(c, 1)]);
            }
            let d = book.finish(&totals(a + c));
            // The rest grows by what arrived outside the continuing series, never more.
            assert!(
                d.rest_delta.0[PACKETS] <= 1100,
                "drain {i}: {:?}",
                d.rest_delta
            );
        }
    }

    #[test]
    fn evicted_packets_reach_the_rest_after_two_drains() {
        let mut book = FlowBook::<METRICS>::new(1, 100);
        let mut growth = Counts::default();
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        book.table_entry(&key(2), &[stats(3, 1)]);
        growth.add(&exported(&book.finish(&totals(13))));
        assert_eq!(growth.0[PACKETS], 13);
        // Flow 2 got 4 more packets, then was evicted before this drain.
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        let d = book.finish(&totals(17));
        growth.add(&exported(&d));
        assert_eq!(d.evictions, 1);
        assert_eq!(
            growth.0[PACKETS], 13,
            "not yet: could be a write-back missed"
        );
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        let d = book.finish(&totals(17));
        growth.add(&exported(&d));
        assert_eq!(d.unattributed_packets, 4);
        assert_eq!(growth.0[PACKETS], 17);
        // Re-inserted: a new incarnation, counted on top.
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        book.table_entry(&key(2), &[stats(2, 5)]);
        growth.add(&exported(&book.finish(&totals(19))));
        assert_eq!(growth.0[PACKETS], 19);
    }

    #[test]
    fn a_missed_write_back_is_held_and_never_counted_twice() {
        let mut book = FlowBook::<METRICS>::new(1, 100);
        let mut growth = Counts::default();
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        book.cache_slot(&key(1), &stats(5, 2));
        growth.add(&exported(&book.finish(&totals(15))));
        // The cache grew to 8 and was written back between the table and the cache read.
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        growth.add(&exported(&book.finish(&totals(18))));
        assert!(growth.0[PACKETS] <= 18);
        for n in [18, 28, 38, 48] {
            book.begin();
            book.table_entry(&key(1), &[stats(n, 1)]);
            let d = book.finish(&totals(n));
            growth.add(&exported(&d));
            assert_eq!(growth.0[PACKETS], n);
            assert_eq!(d.evictions, 0);
            assert_eq!(instant(&d), n);
        }
    }

    #[test]
    fn a_new_flow_series_has_all_its_counts_an_old_one_starts_at_zero() {
        let mut book = FlowBook::<METRICS>::new(1, 100);
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        let d = book.finish(&totals(10));
        assert_eq!(d.series[0].counts.0[PACKETS], 10);
        assert_eq!(exported(&d).0[PACKETS], 10);
        assert_eq!(d.rest.0[PACKETS], 0);
        // Flow 2 had counts before it outgrew flow 1: its series starts at 0.
        book.begin();
        book.table_entry(&key(1), &[stats(30, 1)]);
        book.table_entry(&key(2), &[stats(5, 1)]);
        assert_eq!(book.finish(&totals(35)).series[0].key, key(1));
        book.begin();
        book.table_entry(&key(1), &[stats(31, 1)]);
        book.table_entry(&key(2), &[stats(105, 1)]);
        let d = book.finish(&totals(136));
        assert_eq!(d.series[0].key, key(2));
        assert_eq!(d.series[0].counts.0[PACKETS], 0);
        assert_eq!(exported(&d).0[PACKETS], 101);
    }

    #[test]
    fn cache_only_flows_are_no_evictions() {
        let mut book = FlowBook::<METRICS>::new(10, 100);
        book.begin();
        book.cache_slot(&key(1), &stats(5, 1));
        book.cache_slot(&key(2), &stats(5, 1));
        assert_eq!(book.finish(&totals(10)).evictions, 0);
    }

    #[test]
    fn a_reinsert_with_an_older_first_seen_is_a_new_entry() {
        let mut book = FlowBook::<METRICS>::new(1, 100);
        let mut growth = Counts::default();
        book.begin();
        // CPU 0's table value (written back from t=5), CPU 1's cache slot since t=1.
        book.table_entry(&key(1), &[stats(50, 5), FlowStats::default()]);
        book.cache_slot(&key(1), &stats(30, 1));
        growth.add(&exported(&book.finish(&totals(80))));
        // The entry was evicted; CPU 1's slot (35 packets, since t=1) was written back anew.
        book.begin();
        book.table_entry(&key(1), &[FlowStats::default(), stats(35, 1)]);
        let d = book.finish(&totals(85));
        growth.add(&exported(&d));
        assert_eq!(d.evictions, 1);
        book.begin();
        book.table_entry(&key(1), &[FlowStats::default(), stats(45, 1)]);
        growth.add(&exported(&book.finish(&totals(95))));
        book.begin();
        book.table_entry(&key(1), &[FlowStats::default(), stats(45, 1)]);
        growth.add(&exported(&book.finish(&totals(95))));
        assert_eq!(growth.0[PACKETS], 95);
    }

    #[test]
    fn a_failed_drain_is_done_again() {
        let mut book = FlowBook::<METRICS>::new(1, 100);
        book.begin();
        book.cache_slot(&key(1), &stats(10, 1));
        let d = book.finish(&totals(10));
        assert_eq!(exported(&d).0[PACKETS], 10);
        // Fails after reading the cache slot: no finish.
        book.begin();
        book.cache_slot(&key(1), &stats(10, 1));
        book.begin();
        book.cache_slot(&key(1), &stats(10, 1));
        let d = book.finish(&totals(10));
        assert_eq!(exported(&d).0[PACKETS], 0);
        assert_eq!(instant(&d), 10);
    }

    #[test]
    fn an_idle_flow_written_back_meanwhile_is_taken_not_counted_twice() {
        let mut book = FlowBook::<METRICS>::new(0, 2);
        let mut growth = Counts::default();
        for _ in 0..4 {
            book.begin();
            book.cache_slot(&key(1), &stats(10, 1));
            growth.add(&exported(&book.finish(&totals(10))));
            assert!(book.idle().is_empty());
        }
        // Written back between the reads: neither saw it; idle; the delete returns the entry.
        book.begin();
        growth.add(&exported(&book.finish(&totals(10))));
        assert_eq!(book.idle(), vec![key(1)]);
        book.retire(&key(1), Some(&[stats(10, 1)]));
        for _ in 0..3 {
            book.begin();
            growth.add(&exported(&book.finish(&totals(10))));
        }
        assert_eq!(growth.0[PACKETS], 10);
    }

    /// Drains both the book and the model of the book before drains skipped unchanged flows
    /// with the same readings (table entries, then cache slots); the book's result, checked
    /// equal to the model's.
    fn both(
        book: &mut FlowBook,
        model: &mut reference::Reference,
        table: &[(FlowKey, Vec<FlowStats>)],
        cache: &[(FlowKey, FlowStats)],
        total: u64,
    ) -> Drained {
        book.begin();
        model.begin();
        for (k, v) in table {
            book.table_entry(k, v);
            model.table_entry(k, v);
        }
        for (k, s) in cache {
            book.cache_slot(k, s);
            model.cache_slot(k, s);
        }
        let d = book.finish(&totals(total));
        assert_eq!(d, model.finish(&totals(total)));
        d
    }

    #[test]
    fn one_more_packet_between_drains_shows() {
        let (mut book, mut model) = (
            FlowBook::<METRICS>::new(0, 100),
            reference::Reference::new(0, 100),
        );
        let quiet = (key(2), vec![stats(7, 1), FlowStats::default()]);
        let mut growth = Counts::default();
        for n in [10, 10, 11, 11, 11, 12] {
            let d = both(
                &mut book,
                &mut model,
                &[
                    (key(1), vec![stats(n, 1), FlowStats::default()]),
                    quiet.clone(),
                ],
                &[],
                n + 7,
            );
            growth.add(&exported(&d));
            assert_eq!(growth.0[PACKETS], n + 7);
        }
        // In a cache slot, on either CPU, in front of an unchanged table entry.
        for (cpu, n) in [(0, 1), (0, 2), (1, 3)] {
            let slot = FlowStats {
                first_seen_ns: 9 + cpu,
                ..stats(n, 9)
            };
            let d = both(
                &mut book,
                &mut model,
                &[
                    (key(1), vec![stats(12, 1), FlowStats::default()]),
                    quiet.clone(),
                ],
                &[(key(1), slot)],
                19 + n,
            );
            growth.add(&exported(&d));
            assert_eq!(growth.0[PACKETS], 19 + n);
        }
    }

    #[test]
    fn an_entry_re_created_with_the_same_counts_is_a_new_one() {
        let (mut book, mut model) = (
            FlowBook::<METRICS>::new(1, 100),
            reference::Reference::new(1, 100),
        );
        let entry = |first| (key(1), vec![stats(5, first), FlowStats::default()]);
        let mut growth = Counts::default();
        growth.add(&exported(&both(&mut book, &mut model, &[entry(1)], &[], 5)));
        // Evicted and re-created between two drains, with as many packets, seen later.
        let d = both(&mut book, &mut model, &[entry(2)], &[], 10);
        growth.add(&exported(&d));
        assert_eq!((d.evictions, growth.0[PACKETS]), (1, 10));
        // Gone at one drain, back at the next with the very same values.
        let d = both(&mut book, &mut model, &[], &[], 10);
        growth.add(&exported(&d));
        assert_eq!(d.evictions, 2);
        let d = both(&mut book, &mut model, &[entry(2)], &[], 15);
        growth.add(&exported(&d));
        assert_eq!(growth.0[PACKETS], 15);
        assert_eq!(
            d.series[0].counts.0[PACKETS], 15,
            "every incarnation counts"
        );
    }

    #[test]
    fn values_moving_between_cpus_count_once() {
        let (mut book, mut model) = (
            FlowBook::<METRICS>::new(1, 100),
            reference::Reference::new(1, 100),
        );
        let mut growth = Counts::default();
        let readings: [(Vec<FlowStats>, u64); 4] = [
            (vec![stats(10, 1), FlowStats::default()], 10),
            // A packet on the other CPU.
            (vec![stats(10, 1), stats(1, 3)], 11),
            // Re-created on the other CPU alone, as many packets, the same first tick.
            (vec![FlowStats::default(), stats(11, 1)], 11),
            (vec![stats(2, 4), stats(11, 1)], 13),
        ];
        for (per_cpu, total) in readings {
            let d = both(&mut book, &mut model, &[(key(1), per_cpu)], &[], total);
            growth.add(&exported(&d));
            assert_eq!(growth.0[PACKETS], total);
        }
    }

    #[test]
    fn an_entry_read_twice_in_a_drain_counts_once() {
        let mut book = FlowBook::<METRICS>::new(1, 100);
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        book.table_entry(&key(1), &[stats(12, 1)]);
        let d = book.finish(&totals(12));
        assert_eq!(d.table_entries, 1);
        assert_eq!(
            d.series[0].counts.0[PACKETS], 10,
            "the first reading stands"
        );
        book.begin();
        book.table_entry(&key(1), &[stats(12, 1)]);
        assert_eq!(exported(&book.finish(&totals(12))).0[PACKETS], 2);
    }

    #[test]
    fn connections_join_both_directions_and_follow_the_readings() {
        let mut book = FlowBook::<METRICS>::new(0, 100);
        let rc = |packets| FlowStats {
            transport_mask: 1,
            ..stats(packets, 1)
        };
        let (mut a, mut b) = (key(5), key(6));
        (a.src_ip[15], a.dst_ip[15]) = (1, 2);
        (b.src_ip, b.dst_ip) = (a.dst_ip, a.src_ip);
        let mut c = a;
        c.udp_src_port = 7;
        book.begin();
        book.table_entry(&a, &[rc(1)]);
        book.cache_slot(&b, &rc(1));
        book.cache_slot(&c, &stats(1, 1));
        assert_eq!(
            book.finish(&totals(3)).connections,
            1,
            "a and b: one connection"
        );
        book.begin();
        book.table_entry(&a, &[rc(1)]);
        book.table_entry(&c, &[rc(2)]);
        assert_eq!(book.finish(&totals(4)).connections, 2);
        book.begin();
        book.table_entry(&c, &[rc(2)]);
        assert_eq!(book.finish(&totals(4)).connections, 1, "a is gone");
    }

    #[test]
    fn idle_flows_retire_and_their_series_stop() {
        let mut book = FlowBook::<METRICS>::new(1, 2);
        let mut growth = Counts::default();
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        growth.add(&exported(&book.finish(&totals(10))));
        for _ in 0..2 {
            book.begin();
            book.table_entry(&key(1), &[stats(10, 1)]);
            growth.add(&exported(&book.finish(&totals(10))));
        }
        assert_eq!(book.idle(), vec![key(1)]);
        book.retire(&key(1), Some(&[stats(11, 1)]));
        book.begin();
        let d = book.finish(&totals(11));
        growth.add(&exported(&d));
        assert!(d.series.is_empty());
        assert_eq!(growth.0[PACKETS], 11);
        assert_eq!((d.aged, d.flows, d.evictions, d.demotions), (1, 0, 0, 1));
    }
}
