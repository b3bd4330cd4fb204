//! The sidecar's fleet records: each interval, every QP whose counters grew, as its growth.
//!
//! The drain hands over each flow-table entry it reads (its CPUs' values merged) and each cache
//! slot (counts not yet written back to the table, added on top). A QP's row is what each
//! counter grew since the last row it had. A counter read lower than before (a slot written back
//! between the table read and the cache read) grows by nothing and is held until it is caught
//! up; an entry evicted and inserted again (a later first-seen time) starts again from zero.
//! So the rows of a QP sum to its counts, interval after interval, and nothing counts twice.

use observer_common::{FlowKey, FlowStats};
use roce_observer::model::Flow;
use rustc_hash::FxHashMap;

/// Per QP, the counters its rows have carried so far, and what this drain read.
#[derive(Default)]
pub struct RecordBook {
    exported: FxHashMap<FlowKey, FlowStats>,
    now: FxHashMap<FlowKey, FlowStats>,
}

/// A table entry's per-CPU values merged (those with packets).
pub fn merged(per_cpu: &[FlowStats]) -> FlowStats {
    let mut m = FlowStats::default();
    for v in per_cpu {
        m.merge(v);
    }
    m
}

/// `now` less `*prev` when it grew (and `*prev` moves up to it); 0 otherwise.
fn grow(now: u64, prev: &mut u64) -> u64 {
    let d = now.wrapping_sub(*prev);
    if d != 0 && d < 1 << 63 {
        *prev = now;
        d
    } else {
        0
    }
}

impl RecordBook {
    /// A table entry read in this drain (its per-CPU values).
    pub fn table_entry(&mut self, key: &FlowKey, per_cpu: &[FlowStats]) {
        self.table_merged(key, &merged(per_cpu));
    }

    /// A table entry read in this drain, its CPUs' values merged ([`merged`]). An entry handed
    /// over twice in one drain (the readers' shares of the table meet) counts once, as first
    /// read.
    pub fn table_merged(&mut self, key: &FlowKey, merged: &FlowStats) {
        self.now.entry(*key).or_insert(*merged);
    }

    /// A cache slot of one CPU read in this drain: counts on top of the table's.
    pub fn cache_slot(&mut self, key: &FlowKey, stats: &FlowStats) {
        if stats.packets > 0 {
            self.now.entry(*key).or_default().merge(stats);
        }
    }

    /// A flow deleted from the table with its last values (idle): read like an entry, its
    /// growth in this interval's rows, then forgotten after [`finish`](Self::finish).
    pub fn retired(&mut self, key: &FlowKey, last: &[FlowStats]) {
        self.now.insert(*key, merged(last));
    }

    /// The QPs that grew since their last row, as their growth over the interval that starts
    /// at `start_ns`; `retired` flows are forgotten.
    pub fn finish(&mut self, start_ns: u64, retired: &[FlowKey]) -> Vec<Flow> {
        let mut rows = Vec::new();
        for (key, now) in self.now.drain() {
            let prev = self.exported.entry(key).or_default();
            if now.packets > 0 && now.first_seen_ns > prev.first_seen_ns && prev.packets > 0 {
                // Evicted and inserted again: a new entry, counted from zero.
                *prev = FlowStats::default();
            }
            let first = prev.packets == 0;
            let mut d = FlowStats {
                dscp_mask: now.dscp_mask,
                cnp_dscp_mask: now.cnp_dscp_mask,
                pcp_mask: now.pcp_mask,
                transport_mask: now.transport_mask,
                vids: now.vids,
                first_seen_ns: if first { now.first_seen_ns } else { start_ns },
                last_seen_ns: now.last_seen_ns,
                ..FlowStats::default()
            };
            d.packets = grow(now.packets, &mut prev.packets);
            d.bytes = grow(now.bytes, &mut prev.bytes);
            for i in 0..d.ecn.len() {
                d.ecn[i] = grow(now.ecn[i], &mut prev.ecn[i]);
            }
            for i in 0..d.ops.len() {
                d.ops[i] = grow(now.ops[i], &mut prev.ops[i]);
            }
            d.psn_gaps = grow(now.psn_gaps, &mut prev.psn_gaps);
            d.psn_regressions = grow(now.psn_regressions, &mut prev.psn_regressions);
            d.mirror_truncated = grow(now.mirror_truncated, &mut prev.mirror_truncated);
            let (s, p) = (&now.seq, &mut prev.seq);
            d.seq.out_of_order = grow(s.out_of_order, &mut p.out_of_order);
            d.seq.duplicates = grow(s.duplicates, &mut p.duplicates);
            d.seq.retransmissions = grow(s.retransmissions, &mut p.retransmissions);
            d.seq.retx_episodes = grow(s.retx_episodes, &mut p.retx_episodes);
            // Confirmed losses only: a hole still open may fill later (reordering).
            d.seq.lost = grow(s.lost, &mut p.lost);
            d.seq.lost_events = grow(s.lost_events, &mut p.lost_events);
            d.seq.resets = grow(s.resets, &mut p.resets);
            d.seq.nak_seq = grow(s.nak_seq, &mut p.nak_seq);
            d.seq.pmtu_mask = s.pmtu_mask;
            if first {
                prev.first_seen_ns = now.first_seen_ns;
            }
            if d.packets > 0 {
                rows.push(Flow::new(&key, &d, 0.0));
            }
        }
        for key in retired {
            self.exported.remove(key);
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(packets: u64, lost: u64, first: u64) -> FlowStats {
        let mut s = FlowStats {
            packets,
            bytes: packets * 100,
            first_seen_ns: first,
            last_seen_ns: first + packets,
            ..FlowStats::default()
        };
        s.seq.lost = lost;
        s
    }

    #[test]
    fn rows_are_growth_and_sum_to_the_counts() {
        let key = FlowKey::default();
        let mut b = RecordBook::default();
        b.table_entry(&key, &[stats(10, 1, 5), stats(0, 0, 0)]);
        let r = b.finish(0, &[]);
        assert_eq!(
            (r[0].packets, r[0].psn.missing, r[0].first_seen_ns),
            (10, 1, 5)
        );
        // Unchanged: no row.
        b.table_entry(&key, &[stats(10, 1, 5)]);
        assert!(b.finish(100, &[]).is_empty());
        // A cache slot on top of the table.
        b.table_entry(&key, &[stats(12, 1, 5)]);
        b.cache_slot(&key, &stats(3, 0, 5));
        let r = b.finish(200, &[]);
        assert_eq!(
            (r[0].packets, r[0].bytes, r[0].first_seen_ns),
            (5, 500, 200)
        );
        // The slot written back before the table read missed it: lower, held, no row.
        b.table_entry(&key, &[stats(14, 1, 5)]);
        assert!(b.finish(300, &[]).is_empty());
        b.table_entry(&key, &[stats(20, 2, 5)]);
        let r = b.finish(400, &[]);
        assert_eq!((r[0].packets, r[0].psn.missing), (5, 1));
        // Evicted and inserted again: counted from zero.
        b.table_entry(&key, &[stats(4, 0, 1000)]);
        let r = b.finish(500, &[]);
        assert_eq!((r[0].packets, r[0].first_seen_ns), (4, 1000));
        // Retired with its last values: its growth, then forgotten.
        b.retired(&key, &[stats(6, 0, 1000)]);
        let r = b.finish(600, &[key]);
        assert_eq!(r[0].packets, 2);
        assert!(b.exported.is_empty());
    }
}
