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

use std::{cmp::Reverse, collections::BinaryHeap};

use observer_common::{FlowKey, FlowStats, OpClass};
use rustc_hash::FxHashMap;

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

/// One value per metric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Counts(pub [u64; METRICS]);

impl Counts {
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
        Self([
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
        ])
    }

    pub fn add(&mut self, o: &Counts) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a = a.saturating_add(b);
        }
    }

    /// Field by field `self - o`, 0 where `o` is larger.
    pub fn minus(&self, o: &Counts) -> Counts {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(o.0) {
            *a = a.saturating_sub(b);
        }
        d
    }

    /// Field by field maximum.
    pub fn each_max(&self, o: &Counts) -> Counts {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(o.0) {
            *a = (*a).max(b);
        }
        d
    }

    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|v| *v == 0)
    }
}

/// What the book knows of one flow.
#[derive(Clone, Debug, Default)]
struct FlowState {
    /// Counts of earlier incarnations (evicted and re-inserted table entries).
    base: Option<Box<Counts>>,
    /// The largest values read of the current incarnation (table entry + cache slots).
    last: Counts,
    /// The latest reading of the table entry (this drain's when `table_epoch` is the drain's).
    read_table: Counts,
    /// Earliest first-seen time of the table entry (0: none seen).
    table_first: u64,
    /// This drain's earliest first-seen time of the table entry.
    table_first_read: u64,
    /// The drain this flow's counts last grew in.
    last_change: u32,
    /// The drain the table last held it in (0: never).
    table_epoch: u32,
    /// The drain before that one.
    prev_table_epoch: u32,
    /// This drain's table entry has fewer packets than the last drain's: a new entry.
    shrunk: bool,
}

impl FlowState {
    fn cum(&self) -> Counts {
        let mut c = self.last;
        if let Some(b) = &self.base {
            c.add(b);
        }
        c
    }

    /// The table entry is gone: its counts (all but `cache`, the cache slots' part at the last
    /// read) become an earlier incarnation's.
    fn evicted(&mut self, cache: Counts) {
        let table = self.last.minus(&cache);
        let mut base = self.base.take().map_or_else(Counts::default, |b| *b);
        base.add(&table);
        self.base = Some(Box::new(base));
        self.last = self.last.minus(&table);
        self.table_first = 0;
    }
}

/// A flow exported as its own series.
#[derive(Clone, Debug)]
struct Member {
    key: FlowKey,
    /// The flow's counts when it was promoted (they stay in the rest).
    promo: Counts,
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
#[derive(Clone, Debug, Default)]
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
}

/// Per-flow counts across drains.
pub struct FlowBook {
    max_series: usize,
    /// Drains a flow may stay unchanged before it is aged out.
    idle_drains: u32,
    states: FxHashMap<FlowKey, FlowState>,
    members: Vec<Member>,
    /// Counts of flows aged out.
    retired: Counts,
    rest: Counts,
    /// `grand` at the last drain.
    grand: Counts,
    /// Totals minus flows at the last drain, and the part of it counted.
    slack: Counts,
    lost: Counts,
    /// This drain's flow cache slots, summed per flow.
    cache_now: FxHashMap<FlowKey, Counts>,
    /// The last drain's.
    cache_last: FxHashMap<FlowKey, Counts>,
    epoch: u32,
    /// The last drain ended with `finish` (a failed one is done again under its epoch).
    finished: bool,
    evictions: u64,
    aged: u64,
    demotions: u64,
    table_entries: usize,
}

impl FlowBook {
    pub fn new(max_series: usize, idle_drains: u32) -> Self {
        Self {
            max_series,
            idle_drains: idle_drains.max(1),
            states: FxHashMap::default(),
            members: Vec::new(),
            retired: Counts::default(),
            rest: Counts::default(),
            grand: Counts::default(),
            slack: Counts::default(),
            lost: Counts::default(),
            cache_now: FxHashMap::default(),
            cache_last: FxHashMap::default(),
            epoch: 0,
            finished: true,
            evictions: 0,
            aged: 0,
            demotions: 0,
            table_entries: 0,
        }
    }

    /// Changes the limits (a reload): series beyond the new maximum are demoted at the next
    /// drain.
    pub fn set_limits(&mut self, max_series: usize, idle_drains: u32) {
        self.max_series = max_series;
        self.idle_drains = idle_drains.max(1);
    }

    /// Starts a drain: table entries, then cache slots, then [`finish`](Self::finish). After a
    /// drain that failed before `finish`, the same drain starts over.
    pub fn begin(&mut self) {
        if self.finished {
            self.epoch += 1;
        }
        self.finished = false;
        self.table_entries = 0;
        self.cache_now.clear();
    }

    /// A table entry: its per-CPU values.
    pub fn table_entry(&mut self, key: &FlowKey, per_cpu: &[FlowStats]) {
        self.table_entries += 1;
        let epoch = self.epoch;
        let s = self.states.entry(*key).or_insert_with(|| FlowState {
            last_change: epoch,
            ..FlowState::default()
        });
        if s.table_epoch != epoch {
            s.prev_table_epoch = s.table_epoch;
        }
        let before = s.read_table;
        let mut read = Counts::default();
        let mut first = 0;
        for v in per_cpu.iter().filter(|v| v.packets > 0) {
            read.add(&Counts::of(v));
            if first == 0 || v.first_seen_ns < first {
                first = v.first_seen_ns;
            }
        }
        // Within one entry the counts only grow.
        s.shrunk = s.prev_table_epoch != 0
            && s.prev_table_epoch + 1 == epoch
            && read.0[PACKETS] < before.0[PACKETS];
        s.table_epoch = epoch;
        s.read_table = read;
        s.table_first_read = first;
    }

    /// A flow cache slot of one CPU, read after the table: a slot written back in between is
    /// missed this drain (and held at its last value), never counted twice.
    pub fn cache_slot(&mut self, key: &FlowKey, stats: &FlowStats) {
        if stats.packets > 0 {
            self.cache_now
                .entry(*key)
                .or_default()
                .add(&Counts::of(stats));
        }
    }

    /// Flows idle long enough to be forgotten: delete each from the kernel table (whether a
    /// drain saw it there or not: a write-back may have put it there meanwhile) and call
    /// [`retire`](Self::retire) with what deleting returned. Flows a cache slot holds are kept
    /// (deleting the table entry would not clear the slot).
    pub fn idle(&self) -> Vec<FlowKey> {
        let epoch = self.epoch;
        self.states
            .iter()
            .filter(|(k, s)| {
                epoch.saturating_sub(s.last_change) >= self.idle_drains
                    && !self.cache_last.contains_key(k)
            })
            .map(|(k, _)| *k)
            .collect()
    }

    /// Forgets an idle flow; `last` is its table entry's final values (deleted from the kernel
    /// table), if it had one.
    pub fn retire(&mut self, key: &FlowKey, last: Option<&[FlowStats]>) {
        let Some(mut s) = self.states.remove(key) else {
            return;
        };
        if let Some(per_cpu) = last {
            let mut read = Counts::default();
            for v in per_cpu.iter().filter(|v| v.packets > 0) {
                read.add(&Counts::of(v));
            }
            // Held as any reading (an entry written back since holds counts already seen in
            // the cache); what it misses is in the totals' slack.
            s.last = s.last.each_max(&read);
        }
        self.retired.add(&s.cum().exported(key));
        let before = self.members.len();
        self.members.retain(|m| m.key != *key);
        self.demotions += (before - self.members.len()) as u64;
        self.aged += 1;
    }

    /// Ends a drain: applies the readings, accounts evictions, re-ranks the series and grows
    /// the rest by what no continuing series took.
    pub fn finish(&mut self, totals: &Counts) -> Drained {
        let epoch = self.epoch;
        self.finished = true;
        let mut sum = self.retired;
        // This drain's growth of the members, and of the K fastest other flows (a bounded
        // min-heap: no allocation per active flow).
        let mut member_delta = vec![Counts::default(); self.members.len()];
        let member_index: FxHashMap<FlowKey, usize> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.key, i))
            .collect();
        let mut fastest: BinaryHeap<Reverse<(u64, FlowKey, Counts)>> = BinaryHeap::new();
        let mut unions = 0;
        for key in self.cache_now.keys() {
            self.states.entry(*key).or_insert_with(|| FlowState {
                last_change: epoch,
                ..FlowState::default()
            });
        }
        for (key, s) in self.states.iter_mut() {
            let mut delta = Counts::default();
            let in_table = s.table_epoch == epoch;
            let cache = self.cache_now.get(key);
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
                    s.evicted(self.cache_last.get(key).copied().unwrap_or_default());
                }
                let mut read = if in_table {
                    s.read_table
                } else {
                    Counts::default()
                };
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
                s.last = next;
                if !delta.is_zero() {
                    s.last_change = epoch;
                }
            } else if was_in_table {
                // In the table at the last drain, gone now, not deleted by us: evicted.
                self.evictions += 1;
                s.evicted(Counts::default());
            }
            s.shrunk = false;
            sum.add(&s.cum().exported(key));
            if key.is_union() {
                unions += 1;
            }
            if let Some(i) = member_index.get(key) {
                member_delta[*i] = delta;
            } else if self.max_series > 0 && (delta.0[BYTES] > 0 || delta.0[PACKETS] > 0) {
                fastest.push(Reverse((delta.0[BYTES], *key, delta)));
                if fastest.len() > self.max_series {
                    fastest.pop();
                }
            }
        }
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
        let before: FxHashMap<FlowKey, Counts> = self
            .members
            .iter()
            .zip(&member_delta)
            .map(|(m, d)| (m.key, *d))
            .collect();
        let candidates: Vec<(u64, FlowKey, Counts)> =
            fastest.into_iter().map(|Reverse(c)| c).collect();
        let grew: FxHashMap<FlowKey, Counts> =
            candidates.iter().map(|(_, k, d)| (*k, *d)).collect();
        self.rank(candidates);
        let mut series = Vec::with_capacity(self.members.len());
        let mut continuing = Counts::default();
        for m in &self.members {
            let cum = self
                .states
                .get(&m.key)
                .map(FlowState::cum)
                .unwrap_or_default();
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
                counts: cum.minus(&m.promo).exported(&m.key),
                delta: delta.exported(&m.key),
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
        let rest_delta = grown.minus(&continuing);
        self.rest.add(&rest_delta);
        self.cache_last = std::mem::take(&mut self.cache_now);
        Drained {
            series,
            rest: self.rest,
            rest_delta,
            flows: self.states.len() - unions,
            table_entries: self.table_entries,
            evictions: self.evictions,
            unattributed_packets: self.lost.0[PACKETS],
            aged: self.aged,
            demotions: self.demotions,
        }
    }

    /// Top K by this drain's bytes, sticky: a member stays until a flow grows more than twice
    /// as fast as the slowest member, or it is aged out; free places go to the fastest flows.
    /// A promoted flow's series starts at its counts now.
    fn rank(&mut self, mut candidates: Vec<(u64, FlowKey, Counts)>) {
        // A flow with counts before this drain starts its series at its counts now; a new
        // flow at 0 (its series has all of its counts).
        let promo_of = |states: &FxHashMap<FlowKey, FlowState>, key: &FlowKey, delta: &Counts| {
            let cum = states.get(key).map(FlowState::cum).unwrap_or_default();
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
                let promo = promo_of(&self.states, &key, &delta);
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
            let promo = promo_of(&self.states, &key, &delta);
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
        let mut book = FlowBook::new(4, 2);
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
        let mut book = FlowBook::new(2, 100);
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
        let mut book = FlowBook::new(1, 1000);
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
        let mut book = FlowBook::new(1, 100);
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
        let mut book = FlowBook::new(1, 100);
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
        let mut book = FlowBook::new(1, 100);
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
        let mut book = FlowBook::new(10, 100);
        book.begin();
        book.cache_slot(&key(1), &stats(5, 1));
        book.cache_slot(&key(2), &stats(5, 1));
        assert_eq!(book.finish(&totals(10)).evictions, 0);
    }

    #[test]
    fn a_reinsert_with_an_older_first_seen_is_a_new_entry() {
        let mut book = FlowBook::new(1, 100);
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
        let mut book = FlowBook::new(1, 100);
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
        let mut book = FlowBook::new(0, 2);
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

    #[test]
    fn idle_flows_retire_and_their_series_stop() {
        let mut book = FlowBook::new(1, 2);
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
