//! The daemon's per-flow book: cumulative counts per flow from successive reads of the kernel
//! flow table (and the flow cache in front of it), the top-K flows exported as their own series
//! and the aggregate rest, idle-flow aging and eviction accounting.
//!
//! Every exported value is a monotonic counter, and at every read the top-K series plus the
//! rest sum to the interface totals:
//! - a flow's counts are the sum over its *incarnations* (an LRU eviction and re-insert starts a
//!   new table entry, seen as a later first-seen time) of the largest values read;
//! - a series counts from the interval its flow was promoted into the top K (the counts before
//!   stay in the rest), and a demoted flow's counts move back into the rest;
//! - the rest is everything else: `grand - sum(series)`, where `grand` is the larger of the
//!   kernel's per-interface totals and the flows' sum (packets, bytes, CE, CNP, NAK, RNR NAK),
//!   so packets of evicted flows are in it; held so that it never goes back.

use observer_common::{FlowKey, FlowStats, OpClass};
use std::{cmp::Reverse, collections::BinaryHeap};

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
        "Request PSNs that jumped forward (loss upstream of the observation point)",
    ),
    ("psn_missing", "PSNs missing in those gaps (lower bound)"),
    (
        "retransmissions",
        "Request PSNs that went backwards (go-back-N retransmission)",
    ),
];

/// One value per metric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Counts(pub [u64; METRICS]);

impl Counts {
    pub fn of(s: &FlowStats) -> Self {
        Self([
            s.packets,
            s.bytes,
            s.ecn[3],
            s.ops[OpClass::Cnp as usize],
            s.ops[OpClass::Nak as usize],
            s.ops[OpClass::RnrNak as usize],
            s.psn_gaps,
            s.psn_missing,
            s.psn_regressions,
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
    /// This drain's reading of the table entry, valid when `table_epoch` is the drain's.
    read_table: Counts,
    /// Earliest first-seen time of the table entry (0: none seen): a later one is a new
    /// incarnation.
    table_first: u64,
    /// This drain's earliest first-seen time of the table entry.
    table_first_read: u64,
    /// The drain this flow's counts last grew in.
    last_change: u32,
    /// The drain the table last held it in.
    table_epoch: u32,
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
    /// Growth in the last drain.
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
    /// Flows the table lost without the daemon deleting them (LRU evictions), ever.
    pub evictions: u64,
    /// RoCE packets in the totals that no flow holds (evicted before being read, or refused
    /// by a full table), ever.
    pub unattributed_packets: u64,
    /// Idle flows deleted, ever.
    pub aged: u64,
}

/// Per-flow counts across drains.
pub struct FlowBook {
    max_series: usize,
    /// Drains a flow may stay unchanged before it is aged out.
    idle_drains: u32,
    states: FxHashMap<FlowKey, FlowState>,
    members: Vec<Member>,
    /// Counts of flows aged out or forgotten.
    retired: Counts,
    rest: Counts,
    /// This drain's flow cache slots, summed per flow.
    cache_now: FxHashMap<FlowKey, Counts>,
    /// The last drain's.
    cache_last: FxHashMap<FlowKey, Counts>,
    epoch: u32,
    evictions: u64,
    unattributed: u64,
    aged: u64,
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
            cache_now: FxHashMap::default(),
            cache_last: FxHashMap::default(),
            epoch: 0,
            evictions: 0,
            unattributed: 0,
            aged: 0,
            table_entries: 0,
        }
    }

    /// Changes the limits (a reload): series beyond the new maximum are demoted at the next
    /// drain.
    pub fn set_limits(&mut self, max_series: usize, idle_drains: u32) {
        self.max_series = max_series;
        self.idle_drains = idle_drains.max(1);
    }

    /// Starts a drain: table entries, then cache slots, then [`finish`](Self::finish).
    pub fn begin(&mut self) {
        self.epoch += 1;
        self.table_entries = 0;
    }

    /// A table entry: its per-CPU values.
    pub fn table_entry(&mut self, key: &FlowKey, per_cpu: &[FlowStats]) {
        self.table_entries += 1;
        let epoch = self.epoch;
        let s = self.states.entry(*key).or_insert_with(|| FlowState {
            last_change: epoch,
            ..FlowState::default()
        });
        s.table_epoch = epoch;
        s.read_table = Counts::default();
        s.table_first_read = 0;
        for v in per_cpu.iter().filter(|v| v.packets > 0) {
            s.read_table.add(&Counts::of(v));
            if s.table_first_read == 0 || v.first_seen_ns < s.table_first_read {
                s.table_first_read = v.first_seen_ns;
            }
        }
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

    /// Flows idle long enough to be deleted from the kernel table: call [`retire`](Self::retire)
    /// for each with what deleting it returned. Flows still in the cache are kept (deleting
    /// the table entry would not clear the slot).
    pub fn idle(&self) -> Vec<(FlowKey, bool)> {
        let epoch = self.epoch;
        self.states
            .iter()
            .filter(|(k, s)| {
                epoch.saturating_sub(s.last_change) >= self.idle_drains
                    && !self.cache_last.contains_key(k)
            })
            .map(|(k, s)| (*k, s.table_epoch == epoch))
            .collect()
    }

    /// Forgets an idle flow; `last` is the table entry's final values (deleted from the kernel
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
            s.last = s.last.each_max(&read);
        }
        self.retired.add(&s.cum());
        self.members.retain(|m| m.key != *key);
        self.aged += 1;
    }

    /// Ends a drain: applies the readings, accounts evictions, re-ranks the series and
    /// computes the rest against the interface totals.
    pub fn finish(&mut self, totals: &Counts) -> Drained {
        let epoch = self.epoch;
        let mut sum = self.retired;
        // This drain's growth of the members, and of the K fastest other flows (a bounded
        // min-heap: no allocation per active flow).
        let mut deltas: FxHashMap<FlowKey, Counts> = FxHashMap::default();
        let mut fastest: BinaryHeap<Reverse<(u64, FlowKey, Counts)>> = BinaryHeap::new();
        let member_keys: FxHashMap<FlowKey, usize> = self
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| (m.key, i))
            .collect();
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
            let was_in_table = s.table_epoch + 1 == epoch;
            if in_table || cache.is_some() {
                // Re-inserted (a later first-seen time), or gone from the table while the
                // cache holds it: the old entry's counts after its last read are lost (they
                // are in the totals, hence the rest).
                let reinserted = in_table
                    && s.table_first != 0
                    && s.table_first_read != 0
                    && s.table_first_read > s.table_first;
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
                    s.table_first = s.table_first_read;
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
            sum.add(&s.cum());
            if member_keys.contains_key(key) {
                if !delta.is_zero() {
                    deltas.insert(*key, delta);
                }
            } else if self.max_series > 0 && (delta.0[BYTES] > 0 || delta.0[PACKETS] > 0) {
                fastest.push(Reverse((delta.0[BYTES], *key, delta)));
                if fastest.len() > self.max_series {
                    fastest.pop();
                }
            }
        }
        // Packets the totals have and no flow has.
        self.unattributed = self
            .unattributed
            .max(totals.0[PACKETS].saturating_sub(sum.0[PACKETS]));
        for m in &mut self.members {
            m.delta_bytes = deltas.get(&m.key).map_or(0, |d| d.0[BYTES]);
        }
        let candidates: Vec<(u64, FlowKey)> = fastest
            .into_iter()
            .map(|Reverse((bytes, key, delta))| {
                deltas.insert(key, delta);
                (bytes, key)
            })
            .collect();
        self.rank(candidates, &deltas);
        let mut grand = sum;
        for m in 0..TOTALLED {
            grand.0[m] = grand.0[m].max(totals.0[m]);
        }
        let mut series = Vec::with_capacity(self.members.len());
        let mut in_series = Counts::default();
        for m in &self.members {
            let cum = self
                .states
                .get(&m.key)
                .map(FlowState::cum)
                .unwrap_or_default();
            let counts = cum.minus(&m.promo);
            in_series.add(&counts);
            series.push(SeriesRow {
                key: m.key,
                counts,
                delta: deltas.get(&m.key).copied().unwrap_or_default(),
            });
        }
        series.sort_by(|a, b| {
            b.delta.0[BYTES]
                .cmp(&a.delta.0[BYTES])
                .then(b.counts.0[BYTES].cmp(&a.counts.0[BYTES]))
                .then(a.key.cmp(&b.key))
        });
        let rest = self.rest.each_max(&grand.minus(&in_series));
        let rest_delta = rest.minus(&self.rest);
        self.rest = rest;
        self.cache_last = std::mem::take(&mut self.cache_now);
        Drained {
            series,
            rest,
            rest_delta,
            flows: self.states.len(),
            table_entries: self.table_entries,
            evictions: self.evictions,
            unattributed_packets: self.unattributed,
            aged: self.aged,
        }
    }

    /// Top K by this drain's bytes, sticky: a member stays until a flow grows more than twice
    /// as fast as the slowest member, or it is aged out; free places go to the fastest flows.
    fn rank(&mut self, mut candidates: Vec<(u64, FlowKey)>, deltas: &FxHashMap<FlowKey, Counts>) {
        let promo_of = |states: &FxHashMap<FlowKey, FlowState>, key: &FlowKey| {
            // The counts before this drain's growth stay in the rest.
            let cum = states.get(key).map(FlowState::cum).unwrap_or_default();
            cum.minus(&deltas.get(key).copied().unwrap_or_default())
        };
        // Too many after a reload: drop the slowest.
        if self.members.len() > self.max_series {
            self.members
                .sort_by(|a, b| b.delta_bytes.cmp(&a.delta_bytes).then(a.key.cmp(&b.key)));
            self.members.truncate(self.max_series);
        }
        candidates.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        candidates.truncate(self.max_series);
        for (delta_bytes, key) in candidates {
            if self.members.len() < self.max_series {
                let promo = promo_of(&self.states, &key);
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
            let promo = promo_of(&self.states, &key);
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

    fn sum(d: &Drained) -> Counts {
        let mut s = d.rest;
        for r in &d.series {
            s.add(&r.counts);
        }
        s
    }

    #[test]
    fn series_and_rest_sum_to_the_totals_and_never_go_back() {
        let mut book = FlowBook::new(2, 100);
        let mut prev: Option<Drained> = None;
        let mut sent = [0u64; 5];
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
            assert_eq!(sum(&d).0[PACKETS], total, "round {round}");
            assert_eq!(sum(&d).0[BYTES], total * 1000);
            assert!(d.series.len() <= 2);
            if let Some(p) = &prev {
                assert!(d.rest.0.iter().zip(p.rest.0).all(|(a, b)| *a >= b));
                for r in &d.series {
                    if let Some(o) = p.series.iter().find(|o| o.key == r.key) {
                        assert!(r.counts.0[PACKETS] >= o.counts.0[PACKETS]);
                    }
                }
            }
            prev = Some(d);
        }
        let last = prev.unwrap();
        assert_eq!(last.series[0].key, key(4), "the fast late flow is promoted");
    }

    #[test]
    fn evicted_packets_stay_in_the_rest() {
        let mut book = FlowBook::new(1, 100);
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        book.table_entry(&key(2), &[stats(3, 1)]);
        let d = book.finish(&totals(13));
        assert_eq!(sum(&d).0[PACKETS], 13);
        // Flow 2 got 4 more packets, then was evicted before this drain.
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        let d = book.finish(&totals(17));
        assert_eq!(d.evictions, 1);
        assert_eq!(d.unattributed_packets, 4);
        assert_eq!(sum(&d).0[PACKETS], 17);
        // Re-inserted with a later first-seen: a new incarnation, counted on top.
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        book.table_entry(&key(2), &[stats(2, 5)]);
        let d = book.finish(&totals(19));
        assert_eq!(sum(&d).0[PACKETS], 19);
    }

    #[test]
    fn a_missed_cache_part_is_held_not_counted_twice() {
        let mut book = FlowBook::new(1, 100);
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        book.cache_slot(&key(1), &stats(5, 2));
        let d = book.finish(&totals(15));
        assert_eq!(d.series[0].counts.0[PACKETS], 15);
        // Written back between the table and the cache read: this drain misses it.
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        let d = book.finish(&totals(15));
        assert_eq!(d.series[0].counts.0[PACKETS], 15);
        book.begin();
        book.table_entry(&key(1), &[stats(15, 1)]);
        let d = book.finish(&totals(15));
        assert_eq!(d.series[0].counts.0[PACKETS], 15);
        assert_eq!(d.evictions, 0);
    }

    #[test]
    fn idle_flows_retire_into_the_rest() {
        let mut book = FlowBook::new(1, 2);
        book.begin();
        book.table_entry(&key(1), &[stats(10, 1)]);
        book.finish(&totals(10));
        for _ in 0..2 {
            book.begin();
            book.table_entry(&key(1), &[stats(10, 1)]);
            book.finish(&totals(10));
        }
        let idle = book.idle();
        assert_eq!(idle, vec![(key(1), true)]);
        book.retire(&key(1), Some(&[stats(11, 1)]));
        book.begin();
        let d = book.finish(&totals(11));
        assert!(d.series.is_empty());
        assert_eq!(d.rest.0[PACKETS], 11);
        assert_eq!(d.aged, 1);
        assert_eq!(d.flows, 0);
        assert_eq!(d.evictions, 0);
    }
}
