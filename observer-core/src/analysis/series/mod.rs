//! Time series and microbursts, built the same way whatever the source.
//!
//! * [`SeriesBuilder`] closes an interval by diffing the flow table against the previous
//!   interval's: live capture samples the kernel maps every interval, replay samples its
//!   aggregate when a packet's timestamp crosses an interval boundary.
//! * [`BurstTracker`] takes the byte count of each short time slot of one interface and
//!   direction, in slot order: live capture from the kernel's slot ring (see
//!   [`observer_common::BurstSlot`]), replay from the frames' timestamps. It keeps the peak slot,
//!   runs of slots above a share of the link speed (bursts) and per-interval peaks.

use std::collections::HashMap;

use observer_common::{FlowKey, FlowStats, LatHist, OpClass};

pub use crate::model::series::{
    Burst, FlowRef, FlowSeries, InterfaceBursts, InterfaceSeries, LatencySeries, Metrics,
    Microbursts, Series,
};
use crate::{
    aggregate::{Aggregate, FlowMap},
    aggregate::{ShardPart, Sharded},
    model::Direction,
};

/// Bytes a frame occupies on the wire besides the frame the observer sees (preamble, FCS, gap).
pub const WIRE_OVERHEAD: u64 = observer_common::WIRE_OVERHEAD as u64;

/// Default interval of a live time series (replay fits its interval to the capture).
pub const DEFAULT_INTERVAL_NS: u64 = 1_000_000_000;
/// Shortest interval: replay, without microburst slots (with them, the slot width; see
/// [`shortest_interval`]).
pub const MIN_REPLAY_INTERVAL_NS: u64 = crate::units::MIN_SLOT_NS;
/// Intervals a fitted series (replay without `--interval`) aims at over the capture's span.
pub const TARGET_INTERVALS: u64 = 100;
/// Bins a fitted series records while the span is still unknown: when time runs past them,
/// every ten merge into one (memory stays constant in the capture's length).
pub const MAX_FINE_BINS: u64 = 1000;
/// Shortest interval: live capture (each interval reads the kernel's flow table).
pub const MIN_LIVE_INTERVAL_NS: u64 = 100_000_000;
/// Most intervals a series holds; a longer capture needs a longer `--interval`.
pub const MAX_INTERVALS: u64 = 100_000;
/// Default microburst slot.
pub use crate::units::DEFAULT_SLOT_NS;
/// Flows given their own series (the largest by bytes).
pub const SERIES_FLOWS: usize = 10;
/// Bursts listed per interface (the highest peaks).
pub const TOP_BURSTS: usize = 10;

/// What one interval adds to a flow (or to all flows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    pub packets: u64,
    pub bytes: u64,
    pub ce: u64,
    pub cnp: u64,
    /// NAKs and RNR NAKs.
    pub naks: u64,
    pub gaps: u64,
    pub retransmissions: u64,
}

impl Delta {
    fn between(now: &FlowStats, before: Option<&FlowStats>) -> Self {
        let zero = FlowStats::default();
        let b = before.unwrap_or(&zero);
        // An LRU eviction and re-insert can make a counter go back: the interval gets 0.
        let d = |x: u64, y: u64| x.saturating_sub(y);
        let op = |s: &FlowStats, o: OpClass| s.ops[o as usize];
        Self {
            packets: d(now.packets, b.packets),
            bytes: d(now.bytes, b.bytes),
            ce: d(now.ecn[3], b.ecn[3]),
            cnp: d(op(now, OpClass::Cnp), op(b, OpClass::Cnp)),
            naks: d(
                op(now, OpClass::Nak) + op(now, OpClass::RnrNak),
                op(b, OpClass::Nak) + op(b, OpClass::RnrNak),
            ),
            gaps: d(now.psn_gaps, b.psn_gaps),
            retransmissions: d(now.seq.retransmissions, b.seq.retransmissions),
        }
    }

    fn add(&mut self, o: &Delta) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.ce += o.ce;
        self.cnp += o.cnp;
        self.naks += o.naks;
        self.gaps += o.gaps;
        self.retransmissions += o.retransmissions;
    }

    fn is_zero(&self) -> bool {
        *self == Delta::default()
    }
}

/// The shortest interval a replay series may have: a microburst slot (an interval must hold its
/// busiest slot), and never under [`MIN_REPLAY_INTERVAL_NS`].
pub fn shortest_interval(slot_ns: u64) -> u64 {
    MIN_REPLAY_INTERVAL_NS.max(slot_ns)
}

/// The interval a fitted series ends with: the shortest of `base` x 1, 2 or 5 x 10^k that
/// gives at most [`TARGET_INTERVALS`] over `span_ns` and is a whole number of the `fine` bins
/// recorded (`fine` is `base` x 10^c).
pub fn fitted_interval(span_ns: u64, base: u64, fine: u64) -> u64 {
    let want = span_ns.div_ceil(TARGET_INTERVALS).max(1);
    let mut decade = base.max(1);
    loop {
        for m in [1, 2, 5] {
            let w = decade.saturating_mul(m);
            if w >= want && w.is_multiple_of(fine.max(1)) {
                return w;
            }
        }
        if decade > u64::MAX / 10 {
            return fine.max(1);
        }
        decade *= 10;
    }
}

/// Per-second rate of `x` over `seconds` (0 over no time: one instant has no rate).
fn per_s(x: f64, seconds: f64) -> f64 {
    if seconds > 0.0 { x / seconds } else { 0.0 }
}

/// The final grid of a series: its interval, how many, and the time each covers.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    pub interval_ns: u64,
    /// Recorded bins per interval.
    pub group: u64,
    /// Seconds each interval covers: the interval, but the last ends at the span's end.
    pub covered_s: Vec<f64>,
    /// Seconds from the start to the end of the last interval.
    pub span_s: f64,
}

impl Grid {
    /// `n` intervals: enough for `span_ns` (at least one), at most [`MAX_INTERVALS`].
    fn new(interval_ns: u64, group: u64, span_ns: u64) -> Self {
        let interval_ns = interval_ns.max(1);
        let n = span_ns.div_ceil(interval_ns).clamp(1, MAX_INTERVALS);
        // A span past MAX_INTERVALS intervals (a fixed --interval) ends the series with a full
        // interval: the time beyond it is not shown.
        let end = span_ns.min(n * interval_ns);
        let covered_s = (0..n)
            .map(|i| (end - i * interval_ns).min(interval_ns) as f64 / 1e9)
            .collect();
        Self {
            interval_ns,
            group: group.max(1),
            covered_s,
            span_s: end as f64 / 1e9,
        }
    }

    pub fn len(&self) -> usize {
        self.covered_s.len()
    }

    pub fn is_empty(&self) -> bool {
        self.covered_s.is_empty()
    }

    /// The interval a recorded bin falls in (bins past the end fall in the last: a frame
    /// exactly at the span's end belongs to the interval it ends).
    fn of(&self, bin: usize) -> usize {
        (bin / self.group as usize).min(self.len() - 1)
    }
}

/// The metrics of each interval from its deltas, rates over the time each interval covers.
fn metrics_of(deltas: &[Delta], covered_s: &[f64]) -> Metrics {
    let mut m = Metrics::default();
    for (d, &secs) in deltas.iter().zip(covered_s) {
        m.bps.push(per_s(d.bytes as f64 * 8.0, secs));
        m.packets.push(d.packets);
        m.ce_fraction.push(if d.packets == 0 {
            0.0
        } else {
            d.ce as f64 / d.packets as f64
        });
        m.cnp_per_s.push(per_s(d.cnp as f64, secs));
        m.naks.push(d.naks);
        m.psn_gaps.push(d.gaps);
        m.retransmissions.push(d.retransmissions);
    }
    m
}

/// The latency histograms of an aggregate, every interface and side together: [ACK, READ].
fn latency_totals(agg: &Aggregate) -> [LatHist; 2] {
    let mut out = [LatHist::default(); 2];
    for (k, h) in &agg.latency_scopes {
        out[usize::from(k.kind & 1)].merge(h);
    }
    out
}

/// `bins` with every `f` consecutive ones merged by `add`.
fn merge_bins<T: Default + Clone>(bins: &[T], f: usize, add: impl Fn(&mut T, &T)) -> Vec<T> {
    bins.chunks(f)
        .map(|chunk| {
            let mut acc = T::default();
            for b in chunk {
                add(&mut acc, b);
            }
            acc
        })
        .collect()
}

mod builder;
mod bursts;
mod timeline;

pub use builder::SeriesBuilder;
pub use bursts::{BurstTracker, microbursts};
pub use timeline::{FlowBins, SeriesShard, Timeline, TimelineConfig, TimelineEnd};

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(speed: Option<u64>) -> BurstTracker {
        // 100 us slots on a 10 Gb/s link: 125,000 bytes fill a slot; 50% = 62,500.
        BurstTracker::new(
            "if0".into(),
            Direction::Ingress,
            100_000,
            speed,
            50.0,
            (0, 1_000_000),
            0,
        )
    }

    #[test]
    fn runs_of_busy_slots_are_bursts() {
        let mut t = tracker(Some(10_000_000_000));
        t.slot(1, 1000);
        t.slot(2, 70_000);
        t.slot(3, 125_000);
        t.slot(4, 80_000);
        t.slot(5, 100);
        t.slot(9, 62_500);
        t.slot(10, 62_499);
        let r = t.report();
        assert_eq!(r.bursts, 2);
        assert_eq!(r.busy_slots, 4);
        assert_eq!(r.longest_burst_ns, 300_000);
        assert_eq!(r.longest_burst_at_ns, 200_000);
        assert_eq!(r.peak_bps, 10e9);
        assert_eq!(r.peak_percent, Some(100.0));
        assert_eq!(r.peak_at_ns, 300_000);
        assert_eq!(r.top[0].bytes, 275_000);
        assert_eq!(r.top[0].duration_ns, 300_000);
        assert_eq!(r.top[1].duration_ns, 100_000);
        assert_eq!(
            r.bytes,
            1000 + 70_000 + 125_000 + 80_000 + 100 + 62_500 + 62_499
        );
        // A gap between busy slots ends a burst even without an idle slot reported.
        let mut t = tracker(Some(10_000_000_000));
        t.slot(1, 100_000);
        t.slot(3, 100_000);
        assert_eq!(t.report().bursts, 2);
    }

    /// A slot the kernel's clock stood at for longer (its timer late): its bytes spread over
    /// the span at the average rate. One that would have looked like line rate in a single
    /// slot is below the threshold over four; a span whose average is busy is a burst as long.
    #[test]
    fn a_span_spreads_its_bytes_over_its_slots() {
        let mut t = tracker(Some(10_000_000_000));
        t.span(1, 125_000, 1);
        t.span(4, 200_000, 4);
        t.span(10, 250_003, 3);
        let r = t.report();
        assert_eq!(r.bytes, 125_000 + 200_000 + 250_003);
        assert_eq!(r.uncertain_slots, 7);
        assert_eq!((r.busy_slots, r.bursts), (1 + 3, 2));
        assert_eq!(r.peak_bps, 10e9, "slot 1 alone");
        assert_eq!(r.longest_burst_ns, 300_000);
        assert_eq!(r.longest_burst_at_ns, 1_000_000);
        assert_eq!(r.top[1].bytes, 250_003, "the remainder kept");
        // Four slots of 50,000 bytes each: none busy.
        let mut t = tracker(Some(10_000_000_000));
        t.span(4, 200_000, 4);
        let r = t.report();
        assert_eq!((r.busy_slots, r.bursts, r.peak_bps), (0, 0, 4e9));
    }

    #[test]
    fn per_packet_feed_sums_slots_and_intervals() {
        let mut t = tracker(None);
        for ts in [0, 10, 99_999, 100_000, 1_500_000] {
            t.frame(ts, 976);
        }
        let r = t.report();
        assert_eq!(r.bytes, 5000);
        assert_eq!(r.peak_bps, 3000.0 * 8.0 * 1e4);
        assert_eq!(r.bursts, 0, "no link speed, no bursts");
        assert_eq!(r.peak_percent, None);
        // Two 1 ms intervals, the second covering 0.5 ms up to the last frame at 1.5 ms.
        let s = t.series(&Grid::new(1_000_000, 1, 1_500_000));
        assert_eq!(s.bps, vec![4000.0 * 8.0 * 1000.0, 1000.0 * 8.0 * 2000.0]);
        assert_eq!(s.peak_bps[1], 1000.0 * 8.0 * 1e4);
    }

    #[test]
    fn series_diffs_flow_tables() {
        let key = |qp| FlowKey {
            dest_qp: qp,
            ..Default::default()
        };
        let mut flows = Aggregate::default();
        let mut b = SeriesBuilder::new(1_000_000_000, 0, &Aggregate::default());
        let s = flows.flows.entry(key(1)).or_default();
        s.packets = 10;
        s.bytes = 1000;
        s.ecn[3] = 5;
        b.advance(500_000_000, &flows);
        b.advance(2_100_000_000, &flows);
        let s = flows.flows.get_mut(&key(1)).unwrap();
        s.packets = 15;
        s.bytes = 1500;
        s.ops[OpClass::Nak as usize] = 1;
        flows.flows.entry(key(2)).or_default().bytes = 10_000;
        flows.flows.get_mut(&key(2)).unwrap().packets = 1;
        b.close(&flows);
        let (series, peaks) = b.finish(&Grid::new(1_000_000_000, 1, 4_000_000_000), Vec::new(), 10);
        assert_eq!(series.t, vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(series.span_s, 4.0);
        assert_eq!(peaks[&key(2)], 80_000.0);
        assert_eq!(peaks[&key(1)], 8000.0);
        assert_eq!(series.total.packets, vec![10, 0, 6, 0]);
        assert_eq!(series.total.bps, vec![8000.0, 0.0, 84000.0, 0.0]);
        assert_eq!(series.total.ce_fraction[0], 0.5);
        assert_eq!(series.total.naks, vec![0, 0, 1, 0]);
        assert_eq!(series.flows.len(), 2);
        assert_eq!(series.flows[0].flow.dest_qp, 2, "largest first");
        assert_eq!(series.flows[1].metrics.packets, vec![10, 0, 5, 0]);
    }

    /// A mirrored flow: the session's flow has the packets, the analysis of its sessions
    /// together the gaps and resends; the totals take each once.
    #[test]
    fn the_psn_counts_of_mirror_sessions_together_reach_the_totals() {
        let session = FlowKey {
            dest_qp: 1,
            mirror: 0xC000 | 3,
            ..Default::default()
        };
        let union = session.union().unwrap();
        let mut agg = Aggregate::default();
        let mut b = SeriesBuilder::new(1_000_000_000, 0, &agg);
        for (k, packets, gaps) in [(session, 10, 0), (union, 10, 2)] {
            let map = if k.is_union() {
                &mut agg.unions
            } else {
                &mut agg.flows
            };
            let s = map.entry(k).or_default();
            (s.packets, s.bytes, s.psn_gaps, s.seq.retransmissions) = (packets, 1000, gaps, gaps);
        }
        b.close(&agg);
        let (series, _) = b.finish(&Grid::new(1_000_000_000, 1, 1_000_000_000), Vec::new(), 10);
        assert_eq!(series.total.packets, vec![10]);
        assert_eq!(series.total.psn_gaps, vec![2]);
        assert_eq!(series.total.retransmissions, vec![2]);
        assert_eq!(series.flows.len(), 1);
    }

    /// A frame of `bytes` on flow `qp` at `ts_ns`, through the timeline as replay does it.
    fn feed(t: &mut Timeline, flows: &mut Aggregate, qp: u32, ts_ns: u64, bytes: u64) {
        t.frame(0, ts_ns, bytes, flows);
        let s = flows
            .flows
            .entry(FlowKey {
                dest_qp: qp,
                ..Default::default()
            })
            .or_default();
        s.packets += 1;
        s.bytes += bytes;
    }

    #[test]
    fn the_fitted_interval_is_a_round_hundredth_of_the_span() {
        // Base 100 us (the slot), no coarsening yet.
        assert_eq!(fitted_interval(720_000, 100_000, 100_000), 100_000);
        assert_eq!(fitted_interval(0, 100_000, 100_000), 100_000);
        // 10 s: 100 ms; 12.4 s: 200 ms (62 intervals), never 124 ms.
        assert_eq!(
            fitted_interval(10_000_000_000, 100_000, 100_000),
            100_000_000
        );
        assert_eq!(
            fitted_interval(12_400_000_000, 100_000, 1_000_000),
            200_000_000
        );
        // 30 ms: 500 us if the bins are still 100 us; a whole number of coarser bins else.
        assert_eq!(fitted_interval(30_000_000, 100_000, 100_000), 500_000);
        assert_eq!(fitted_interval(30_000_000, 100_000, 1_000_000), 1_000_000);
        // Without slots the base is 10 us.
        assert_eq!(fitted_interval(720_000, 10_000, 10_000), 10_000);
        assert_eq!(shortest_interval(0), 10_000);
        assert_eq!(shortest_interval(100_000), 100_000);
    }

    #[test]
    fn a_short_capture_reports_rates_over_its_own_span() {
        // 9 packets of 1000 bytes 90 us apart: 0 to 720 us. The generator's rate is
        // 9000 B over 720 us; by 100 us interval: 2 packets in the first (0, 90 us), then
        // one or two per interval; the last interval (700 to 720 us) holds the packet at
        // 720 us over 20 us.
        let mut t = Timeline::new(TimelineConfig::replay(None, 100_000));
        let mut flows = Aggregate::default();
        let base = 1_000_000_000;
        for k in 0..9u64 {
            feed(&mut t, &mut flows, 7, base + k * 90_000, 1000);
        }
        let end = t.finish(&flows);
        let s = end.series.unwrap();
        assert!(s.interval_fitted);
        assert_eq!(s.interval_s, 100e-6);
        assert_eq!(s.t.len(), 8);
        assert!((s.span_s - 720e-6).abs() < 1e-12, "{}", s.span_s);
        // Packets at 0, 90, 180, 270, 360, 450, 540, 630, 720 us.
        assert_eq!(s.total.packets, vec![2, 1, 1, 1, 1, 1, 1, 1]);
        let bps = |bytes: f64, secs: f64| bytes * 8.0 / secs;
        assert!((s.total.bps[0] - bps(2000.0, 100e-6)).abs() < 1e-3);
        assert!(
            (s.total.bps[7] - bps(1000.0, 20e-6)).abs() < 1e-3,
            "{:?}",
            s.total.bps
        );
        assert!((s.covered_s(7) - 20e-6).abs() < 1e-12);
        // The flow's peak is its busiest interval: the last, 400 Mb/s.
        let peak = end.flow_peaks[&FlowKey {
            dest_qp: 7,
            ..Default::default()
        }];
        assert!((peak - 400e6).abs() < 1e-3, "{peak}");
    }

    #[test]
    fn a_long_capture_is_recorded_in_bounded_bins_and_re_binned() {
        // One packet every 10 ms for 10 s: the 100 us bins coarsen to 10 ms, and at 10 s,
        // the 1000th of those, to 100 ms; the series ends with 100 intervals of 100 ms, ten
        // packets each.
        let mut t = Timeline::new(TimelineConfig::replay(None, 100_000));
        let mut flows = Aggregate::default();
        for k in 0..=1000u64 {
            feed(&mut t, &mut flows, 1, k * 10_000_000, 100);
        }
        assert_eq!(t.bin_ns, 100_000_000);
        let s = t.finish(&flows).series.unwrap();
        assert_eq!(s.interval_s, 0.1);
        assert_eq!(s.t.len(), 100);
        // The frame at exactly 10 s ends the last interval rather than opening one.
        assert_eq!(s.total.packets.iter().sum::<u64>(), 1001);
        assert_eq!(s.total.packets[0], 10);
        assert_eq!(s.total.packets[99], 11);
        assert_eq!(s.total.bps[5], 10.0 * 100.0 * 8.0 / 0.1);
        // An explicit interval is kept.
        let mut fixed = Timeline::new(TimelineConfig::replay(Some(1_000_000_000), 100_000));
        let mut flows = Aggregate::default();
        for k in 0..=1000u64 {
            feed(&mut fixed, &mut flows, 1, k * 10_000_000, 100);
        }
        let s = fixed.finish(&flows).series.unwrap();
        assert!(!s.interval_fitted);
        assert_eq!((s.interval_s, s.t.len()), (1.0, 10));
    }
}
