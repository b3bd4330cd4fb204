//! The flow book as it was before drains skipped the flows whose readings did not change: every
//! drain settles every flow, and the collector counted the connections among the readings on
//! the way. Kept as the model the book must agree with, drain for drain, whatever the readings.

use std::{cmp::Reverse, collections::BinaryHeap};

use observer_common::{FlowKey, FlowStats, QP_CM};
use rustc_hash::{FxHashMap, FxHashSet};

use super::{BYTES, Counts, Drained, PACKETS, SeriesRow, TOTALLED};
use roce_observer::aggregate::connections::{self, Group};

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

/// Per-flow counts across drains, as the book kept them before it skipped unchanged flows.
pub struct Reference {
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
    /// The connections among this drain's readings (as the collector counted them).
    connections: FxHashSet<Group>,
}

impl Reference {
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
            connections: FxHashSet::default(),
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
        self.connections.clear();
    }

    /// A table entry: its per-CPU values.
    pub fn table_entry(&mut self, key: &FlowKey, per_cpu: &[FlowStats]) {
        for s in per_cpu {
            self.note(key, s);
        }
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
        self.note(key, stats);
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
            connections: self.connections.len(),
            grown: Vec::new(),
        }
    }

    fn note(&mut self, key: &FlowKey, stats: &FlowStats) {
        if stats.transport_mask & connections::CONNECTED != 0 && key.dest_qp != QP_CM {
            self.connections.insert(connections::group_of(key));
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

/// The book against this model, drain for drain, on a small simulated kernel: per-CPU cache
/// slots written back into a per-CPU table, LRU evictions and re-created entries, flows moving
/// between CPUs, readings taken while packets arrive, entries read twice, failed drains, aging.
mod agree {
    use std::collections::HashMap;

    use observer_common::{FlowKey, FlowStats, MIRROR_UNION, OpClass};

    use super::Reference;
    use crate::flowbook::{Counts, Drained, FlowBook, PSN_MISSING, RECORD_WIDTH, TOTALLED};

    /// The daemon's book, and one of the records' width fed the same readings: its drains
    /// must equal the first's, and its growth, flow by flow, add up to what each flow sent.
    struct Books {
        book: FlowBook,
        wide: FlowBook<RECORD_WIDTH>,
        /// Each flow's growth handed over by the wide book, summed, and the DSCP values seen.
        grown: HashMap<FlowKey, (Counts<RECORD_WIDTH>, u64)>,
    }

    impl Books {
        fn new(series: usize, idle: u32) -> Self {
            Self {
                book: FlowBook::new(series, idle),
                wide: FlowBook::new(series, idle),
                grown: HashMap::new(),
            }
        }

        fn begin(&mut self) {
            self.book.begin();
            self.wide.begin();
        }

        fn table_entry(&mut self, k: &FlowKey, v: &[FlowStats]) {
            self.book.table_entry(k, v);
            self.wide.table_entry(k, v);
        }

        fn table_missing(&mut self, k: &FlowKey) {
            self.book.table_missing(k);
            self.wide.table_missing(k);
        }

        fn carry_unread(&mut self) {
            self.book.carry_unread();
            self.wide.carry_unread();
        }

        fn cache_slot(&mut self, k: &FlowKey, s: &FlowStats) {
            self.book.cache_slot(k, s);
            self.wide.cache_slot(k, s);
        }

        fn set_limits(&mut self, s: usize, i: u32) {
            self.book.set_limits(s, i);
            self.wide.set_limits(s, i);
        }

        fn retire(&mut self, k: &FlowKey, last: Option<&[FlowStats]>) {
            self.book.retire(k, last);
            self.wide.retire(k, last);
            assert!(self.book.take_retired_growth().is_empty());
            let retired = self.wide.take_retired_growth();
            self.add(retired);
        }

        fn add(&mut self, grown: Vec<crate::flowbook::Growth>) {
            for (k, c, a) in grown {
                let e = self.grown.entry(k).or_default();
                e.0.add(&c);
                e.1 |= a.dscp_mask;
            }
        }

        fn idle(&self) -> Vec<FlowKey> {
            let idle = self.book.idle();
            assert_eq!(idle, self.wide.idle());
            idle
        }

        fn finish(&mut self, totals: &Counts, seed: u64, drain: usize) -> Drained {
            let got = self.book.finish(totals);
            let mut wide = self.wide.finish(totals);
            assert!(got.grown.is_empty());
            let grown = std::mem::take(&mut wide.grown);
            self.add(grown);
            assert_eq!(got, wide, "seed {seed}, drain {drain}: the wide book");
            got
        }

        /// Every flow's growth equals what it sent (`truth`), but for the PSNs missing (a
        /// late packet's decrement is held at the larger value, as the metrics are).
        fn check_growth(&self, truth: &HashMap<FlowKey, FlowStats>, seed: u64) {
            let mut keys: Vec<&FlowKey> = truth.keys().chain(self.grown.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let mut want =
                    Counts::<RECORD_WIDTH>::of(&truth.get(k).copied().unwrap_or_default());
                let (mut got, dscp) = self.grown.get(k).copied().unwrap_or_default();
                want.0[PSN_MISSING] = 0;
                got.0[PSN_MISSING] = 0;
                assert_eq!(got, want, "seed {seed}: flow {k:?}");
                let sent = truth.get(k).map_or(0, |t| t.dscp_mask);
                assert_eq!(dscp, sent, "seed {seed}: flow {k:?}: the DSCP values seen");
            }
        }
    }

    const CPUS: usize = 2;
    /// Cache slots per CPU: few, so that flows share them and write back often.
    const SLOTS: usize = 3;

    /// A fixed sequence per seed.
    struct Rng(fastrand::Rng);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0.usize(..n)
        }

        fn chance(&mut self, percent: u64) -> bool {
            self.0.u64(..100) < percent
        }
    }

    /// Flow `i`: connections of up to six flows (QPs between two hosts on one UDP source port,
    /// both directions).
    fn key(i: usize) -> FlowKey {
        let mut k = FlowKey {
            dest_qp: 2 + i as u32,
            udp_src_port: 49152 + (i / 12) as u16,
            ..FlowKey::default()
        };
        (k.src_ip[15], k.dst_ip[15]) = ((i % 2) as u8, 10);
        if i % 4 == 3 {
            (k.src_ip, k.dst_ip) = (k.dst_ip, k.src_ip);
        }
        match i % 11 {
            // The PSN analysis of a flow's mirror sessions together.
            9 => k.mirror = MIRROR_UNION,
            // CM traffic: no connection.
            10 => k.dest_qp = observer_common::QP_CM,
            _ => {}
        }
        k
    }

    fn merge(into: &mut FlowStats, s: &FlowStats) {
        if into.packets == 0 || (s.first_seen_ns != 0 && s.first_seen_ns < into.first_seen_ns) {
            into.first_seen_ns = s.first_seen_ns;
        }
        into.packets += s.packets;
        into.bytes += s.bytes;
        for (a, b) in into.ecn.iter_mut().zip(s.ecn) {
            *a += b;
        }
        for (a, b) in into.ops.iter_mut().zip(s.ops) {
            *a += b;
        }
        into.psn_gaps += s.psn_gaps;
        into.psn_regressions += s.psn_regressions;
        into.seq.out_of_order += s.seq.out_of_order;
        into.seq.resets += s.seq.resets;
        into.dscp_mask |= s.dscp_mask;
        into.seq.lost = into.seq.lost.wrapping_add(s.seq.lost);
        into.seq.retransmissions += s.seq.retransmissions;
        into.transport_mask |= s.transport_mask;
    }

    /// A per-CPU flow table (each entry a value per CPU) behind per-CPU cache slots.
    struct Kernel {
        table: Vec<(FlowKey, [FlowStats; CPUS])>,
        cache: [[(FlowKey, FlowStats); SLOTS]; CPUS],
        capacity: usize,
        now: u64,
        /// Every packet alike (100 bytes, no marks) but for its transport, and a clock that
        /// seldom moves: different incarnations of an entry often read alike, or alike but for
        /// their first-seen time or their transport.
        coarse: bool,
        /// What the interfaces counted: every packet, whatever became of its flow.
        totals: Counts,
        /// The keys written back from the cache to the table, in order (the kernel's flow log;
        /// a mirror copy's every-session analysis goes through the cache like any flow).
        log: Vec<FlowKey>,
        /// Every packet of each flow, merged.
        truth: HashMap<FlowKey, FlowStats>,
        /// The table evicted an entry.
        evicted: bool,
    }

    impl Kernel {
        fn entry(&mut self, key: &FlowKey, cpu: usize) -> &mut FlowStats {
            let i = match self.table.iter().position(|(k, _)| k == key) {
                Some(i) => i,
                None => {
                    if self.table.len() == self.capacity {
                        // The LRU makes room (here: the oldest entry).
                        self.table.remove(0);
                        self.evicted = true;
                    }
                    self.table.push((*key, [FlowStats::default(); CPUS]));
                    self.table.len() - 1
                }
            };
            &mut self.table[i].1[cpu]
        }

        fn packet(&mut self, rng: &mut Rng, key: &FlowKey, cpu: usize) {
            if self.coarse {
                self.now += u64::from(rng.chance(2));
                let p = FlowStats {
                    packets: 1,
                    bytes: 100,
                    first_seen_ns: self.now,
                    transport_mask: if rng.chance(70) { 1 } else { 1 << 3 },
                    ..FlowStats::default()
                };
                self.packet_like(key, cpu, p);
                return;
            }
            self.now += 1 + rng.below(3) as u64;
            let mut p = FlowStats {
                packets: 1,
                bytes: 100 + rng.below(1000) as u64,
                first_seen_ns: self.now,
                transport_mask: if rng.chance(90) { 1 } else { 1 << 3 },
                ..FlowStats::default()
            };
            p.ecn[3] = u64::from(rng.chance(20));
            // Counters only the records keep: none of the metrics'.
            p.ecn[2] = 1 - p.ecn[3];
            p.ops[OpClass::Write as usize] = u64::from(rng.chance(60));
            p.psn_regressions = u64::from(rng.chance(5));
            p.seq.out_of_order = u64::from(rng.chance(5));
            p.seq.resets = u64::from(rng.chance(2));
            p.dscp_mask = 1 << rng.below(3);
            p.ops[OpClass::Cnp as usize] = u64::from(rng.chance(10));
            p.ops[OpClass::Nak as usize] = u64::from(rng.chance(5));
            p.psn_gaps = u64::from(rng.chance(5));
            // A late packet may take back a loss counted elsewhere (a decrement).
            p.seq.lost = match rng.below(20) {
                0 => 1,
                1 => u64::MAX,
                _ => 0,
            };
            p.seq.retransmissions = u64::from(rng.chance(5));
            self.packet_like(key, cpu, p);
        }

        fn packet_like(&mut self, key: &FlowKey, cpu: usize, p: FlowStats) {
            merge(self.truth.entry(*key).or_default(), &p);
            let mut c = Counts::of(&p);
            c.0[TOTALLED..].fill(0);
            self.totals.add(&c);
            let slot = (key.dest_qp as usize + key.udp_src_port as usize) % SLOTS;
            let (held, stats) = self.cache[cpu][slot];
            if held != *key || stats.packets == 0 {
                if stats.packets > 0 {
                    merge(self.entry(&held, cpu), &stats);
                    self.log.push(held);
                }
                self.cache[cpu][slot] = (*key, FlowStats::default());
            }
            merge(&mut self.cache[cpu][slot].1, &p);
        }

        fn traffic(&mut self, rng: &mut Rng, flows: usize, packets: usize) {
            for _ in 0..packets {
                let i = rng.below(flows);
                // Mostly one CPU per flow; now and then the other.
                let cpu = if rng.chance(90) {
                    i % CPUS
                } else {
                    (i + 1) % CPUS
                };
                self.packet(rng, &key(i), cpu);
            }
        }
    }

    /// One drain's readings fed to both books: the table in a shuffled order with packets
    /// arriving halfway (write-backs among them), some entries read a second time (to the book
    /// only: the model reads each once), then the cache. `fail`: the drain stops before its
    /// cache read (and is done again).
    fn read(
        rng: &mut Rng,
        kernel: &mut Kernel,
        book: &mut Books,
        model: &mut Reference,
        flows: usize,
    ) {
        let mut order: Vec<usize> = (0..kernel.table.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let half = order.len() / 2;
        let first: Vec<(FlowKey, [FlowStats; CPUS])> =
            order[..half].iter().map(|&i| kernel.table[i]).collect();
        let rest: Vec<FlowKey> = order[half..].iter().map(|&i| kernel.table[i].0).collect();
        for (k, v) in &first {
            book.table_entry(k, v);
            model.table_entry(k, v);
        }
        if rng.chance(50) {
            let n = rng.below(6);
            kernel.traffic(rng, flows, n);
        }
        for k in &rest {
            // Evicted meanwhile: not read.
            if let Some((k, v)) = kernel.table.iter().find(|(x, _)| x == k).copied() {
                book.table_entry(&k, &v);
                model.table_entry(&k, &v);
            }
        }
        // The end of one reader's share read again by the next.
        for (k, _) in first.iter().take(rng.below(3)) {
            if let Some((k, v)) = kernel.table.iter().find(|(x, _)| x == k).copied() {
                book.table_entry(&k, &v);
            }
        }
        if rng.chance(30) {
            let n = rng.below(4);
            kernel.traffic(rng, flows, n);
        }
        for cpu in 0..CPUS {
            for (k, s) in kernel.cache[cpu] {
                book.cache_slot(&k, &s);
                model.cache_slot(&k, &s);
            }
        }
    }

    /// A run's random source, an empty kernel and a book and model of the same random limits.
    fn start(seed: u64, capacity: usize, coarse: bool) -> (Rng, Kernel, Books, Reference) {
        let mut rng = Rng(fastrand::Rng::with_seed(seed));
        let kernel = Kernel {
            table: Vec::new(),
            cache: [[(FlowKey::default(), FlowStats::default()); SLOTS]; CPUS],
            capacity,
            now: 1,
            coarse,
            totals: Counts::default(),
            log: Vec::new(),
            truth: HashMap::new(),
            evicted: false,
        };
        let (series, idle) = (1 + rng.below(4), 1 + rng.below(4) as u32);
        (
            rng,
            kernel,
            Books::new(series, idle),
            Reference::new(series, idle),
        )
    }

    fn run(seed: u64, flows: usize, capacity: usize, coarse: bool, drains: usize) {
        let (mut rng, mut kernel, mut book, mut model) = start(seed, capacity, coarse);
        for drain in 0..drains {
            // Quiet drains let flows go idle.
            if !rng.chance(25) {
                let n = rng.below(3 * flows);
                kernel.traffic(&mut rng, flows, n);
            }
            if rng.chance(10) {
                // A failed drain: readings, no finish.
                book.begin();
                model.begin();
                let k = kernel.table.first().copied();
                if let Some((k, v)) = k {
                    book.table_entry(&k, &v);
                    model.table_entry(&k, &v);
                }
                let n = rng.below(3);
                kernel.traffic(&mut rng, flows, n);
            }
            if rng.chance(5) {
                let (s, i) = (rng.below(4), 1 + rng.below(4) as u32);
                book.set_limits(s, i);
                model.set_limits(s, i);
            }
            book.begin();
            model.begin();
            read(&mut rng, &mut kernel, &mut book, &mut model, flows);
            finish_drain(&mut kernel, &mut book, &mut model, seed, drain);
        }
        quiet_end(&mut kernel, &mut book, &mut model, seed, drains);
    }

    /// Drains with no packet arriving, the whole table read: then every flow's growth, summed
    /// over the drains, is what it sent, unless the table evicted an entry (whose counts after
    /// its last reading no flow holds).
    fn quiet_end(
        kernel: &mut Kernel,
        book: &mut Books,
        model: &mut Reference,
        seed: u64,
        drains: usize,
    ) {
        for drain in drains..drains + 3 {
            book.begin();
            model.begin();
            for (k, v) in &kernel.table {
                book.table_entry(k, v);
                model.table_entry(k, v);
            }
            for cpu in 0..CPUS {
                for (k, s) in kernel.cache[cpu] {
                    book.cache_slot(&k, &s);
                    model.cache_slot(&k, &s);
                }
            }
            finish_drain(kernel, book, model, seed, drain);
        }
        if !kernel.evicted {
            book.check_growth(&kernel.truth, seed);
        }
    }

    /// Ends a drain of both, which must agree on its result and its idle flows, then retires
    /// those from both (and from the kernel's table, their last values read as they go).
    fn finish_drain(
        kernel: &mut Kernel,
        book: &mut Books,
        model: &mut Reference,
        seed: u64,
        drain: usize,
    ) {
        let totals = kernel.totals;
        let got = book.finish(&totals, seed, drain);
        let want = model.finish(&totals);
        assert_eq!(got, want, "seed {seed}, drain {drain}");
        let mut idle = book.idle();
        let mut want_idle = model.idle();
        idle.sort();
        want_idle.sort();
        assert_eq!(idle, want_idle, "seed {seed}, drain {drain}: idle flows");
        for k in idle {
            let last = kernel
                .table
                .iter()
                .position(|(x, _)| *x == k)
                .map(|i| kernel.table.remove(i).1);
            book.retire(&k, last.as_ref().map(|v| &v[..]));
            model.retire(&k, last.as_ref().map(|v| &v[..]));
        }
    }

    /// The book reading only the entries the log shows written since the last drain (and
    /// taking the others as unchanged) whenever the daemon would (`tap::TableCursor`: room in
    /// the table for every key logged, no drain to do again), against
    /// the model reading the whole table, drain for drain.
    fn run_logged(seed: u64, flows: usize, capacity: usize, coarse: bool, drains: usize) -> usize {
        let (mut rng, mut kernel, mut book, mut model) = start(seed, capacity, coarse);
        // Where the last drain began reading the log (none: read the whole table).
        let mut from: Option<usize> = None;
        let mut partial = 0;
        for drain in 0..drains {
            if !rng.chance(25) {
                let n = rng.below(3 * flows);
                kernel.traffic(&mut rng, flows, n);
            }
            if rng.chance(10) {
                book.begin();
                model.begin();
                from = None;
                let n = rng.below(3);
                kernel.traffic(&mut rng, flows, n);
            }
            book.begin();
            model.begin();
            let to = kernel.log.len();
            let logged = from.filter(|&f| {
                !book.book.wants_whole_table()
                    && book.book.last_table_entries() + (to - f) <= kernel.capacity
            });
            match logged {
                Some(f) => {
                    partial += 1;
                    let mut keys = kernel.log[f..to].to_vec();
                    keys.sort_unstable();
                    keys.dedup();
                    for k in &keys {
                        match kernel.table.iter().find(|(x, _)| x == k) {
                            Some((k, v)) => book.table_entry(k, v),
                            None => book.table_missing(k),
                        }
                    }
                    book.carry_unread();
                }
                None => {
                    for (k, v) in &kernel.table {
                        book.table_entry(k, v);
                    }
                }
            }
            for (k, v) in &kernel.table {
                model.table_entry(k, v);
            }
            for cpu in 0..CPUS {
                for (k, s) in kernel.cache[cpu] {
                    book.cache_slot(&k, &s);
                    model.cache_slot(&k, &s);
                }
            }
            from = Some(to);
            finish_drain(&mut kernel, &mut book, &mut model, seed, drain);
        }
        quiet_end(&mut kernel, &mut book, &mut model, seed, drains);
        partial
    }

    #[test]
    fn the_book_reading_the_log_agrees_with_the_model_drain_for_drain() {
        let mut partial = 0;
        for seed in 0..400 {
            let flows = 3 + (seed as usize % 20);
            let capacity = if seed % 3 == 0 { flows / 2 + 1 } else { 64 };
            partial += run_logged(seed * 0x9E37_79B9 + 11, flows, capacity, seed % 2 == 0, 40);
        }
        assert!(partial > 4000, "drains that read the log: {partial}");
    }

    #[test]
    fn the_book_agrees_with_the_model_drain_for_drain() {
        for seed in 0..400 {
            let flows = 3 + (seed as usize % 20);
            // A table that holds every flow, or one the LRU keeps evicting from.
            let capacity = if seed % 3 == 0 { flows / 2 + 1 } else { 64 };
            run(seed * 0x9E37_79B9 + 7, flows, capacity, seed % 2 == 0, 40);
        }
    }
}
