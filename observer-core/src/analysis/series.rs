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

/// Builds the flow part of a [`Series`] from successive flow tables, in bins of one interval
/// (or, for a series fitted to the capture, of the finest interval still possible, merged ten
/// into one as time goes on: see [`SeriesBuilder::coarsen`]).
#[derive(Debug)]
pub struct SeriesBuilder {
    interval_ns: u64,
    start_ns: u64,
    /// The flow table at the end of the last closed interval.
    prev: FlowMap,
    /// The PSN analyses of mirror sessions together then (their gaps and resends count in the
    /// totals; the sessions' flows have the packets).
    prev_unions: FlowMap,
    /// The interval being filled.
    open: usize,
    /// Where the interval after it begins: a time before it stays in the open interval (a
    /// comparison per frame, not a division).
    next_ns: u64,
    total: Vec<Delta>,
    flows: HashMap<FlowKey, Vec<(u32, Delta)>, rustc_hash::FxBuildHasher>,
    /// The latency histograms (ACK, READ; every interface and side) at the end of the last
    /// closed interval, and what each interval with samples added.
    prev_latency: [LatHist; 2],
    latency: Vec<(u32, [LatHist; 2])>,
    /// Set when a time fell beyond [`MAX_INTERVALS`]: the series stops there.
    pub overflow: bool,
}

/// The latency histograms of an aggregate, every interface and side together: [ACK, READ].
fn latency_totals(agg: &Aggregate) -> [LatHist; 2] {
    let mut out = [LatHist::default(); 2];
    for (k, h) in &agg.latency_scopes {
        out[usize::from(k.kind & 1)].merge(h);
    }
    out
}

/// Merges latency points renumbered by `to` (monotonic) that land together.
fn merge_latency(points: &mut Vec<(u32, [LatHist; 2])>, to: impl Fn(u32) -> u32) {
    for p in points.iter_mut() {
        p.0 = to(p.0);
    }
    points.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1[0].merge(&b.1[0]);
            a.1[1].merge(&b.1[1]);
            true
        } else {
            false
        }
    });
}

impl SeriesBuilder {
    /// A series of `interval_ns` intervals from `start_ns` on; `prev` is the flow table before
    /// the first (what is already in it does not count).
    pub fn new(interval_ns: u64, start_ns: u64, prev: &Aggregate) -> Self {
        Self {
            interval_ns: interval_ns.max(1),
            start_ns,
            prev: prev.flows.clone(),
            prev_unions: prev.unions.clone(),
            open: 0,
            next_ns: start_ns.saturating_add(interval_ns.max(1)),
            total: Vec::new(),
            flows: HashMap::default(),
            prev_latency: latency_totals(prev),
            latency: Vec::new(),
            overflow: false,
        }
    }

    /// The interval `ts_ns` falls in (times before the start fall in the first).
    pub fn index_of(&self, ts_ns: u64) -> usize {
        (ts_ns.saturating_sub(self.start_ns) / self.interval_ns) as usize
    }

    /// Time moves on to `ts_ns` with the flow table `flows`: when that is a later interval, the
    /// open one is closed with `flows` (what happened up to now) and the later one opened.
    #[inline]
    pub fn advance(&mut self, ts_ns: u64, flows: &Aggregate) {
        if ts_ns < self.next_ns {
            return;
        }
        let i = self.index_of(ts_ns);
        if i <= self.open {
            return;
        }
        if i >= MAX_INTERVALS as usize {
            self.overflow = true;
            return;
        }
        self.close(flows);
        self.open = i;
        self.next_ns = self.next_start();
    }

    /// Where the interval after the open one begins.
    fn next_start(&self) -> u64 {
        self.start_ns
            .saturating_add((self.open as u64 + 1).saturating_mul(self.interval_ns))
    }

    /// Closes the open interval with the flow table as it stands at its end.
    pub fn close(&mut self, agg: &Aggregate) {
        self.close_flows(agg);
        let now = latency_totals(agg);
        self.latency_point(self.open, now);
    }

    /// The flows' part of [`SeriesBuilder::close`]: what each flow, and all of them, added.
    fn close_flows(&mut self, agg: &Aggregate) {
        let index = self.open;
        if self.total.len() <= index {
            self.total.resize(index + 1, Delta::default());
        }
        let mut sum = Delta::default();
        for (key, now) in &agg.flows {
            let before = self.prev.get(key);
            if before.is_some_and(|b| b.packets == now.packets && b.bytes == now.bytes) {
                continue;
            }
            let d = Delta::between(now, before);
            if d.is_zero() {
                continue;
            }
            sum.add(&d);
            let points = self.flows.entry(*key).or_default();
            match points.last_mut() {
                Some((i, acc)) if *i as usize == index => acc.add(&d),
                _ => points.push((index as u32, d)),
            }
        }
        for (key, now) in &agg.unions {
            let d = Delta::between(now, self.prev_unions.get(key));
            sum.gaps += d.gaps;
            sum.retransmissions += d.retransmissions;
        }
        self.total[index].add(&sum);
        self.prev.clone_from(&agg.flows);
        self.prev_unions.clone_from(&agg.unions);
    }

    /// The latency part of [`SeriesBuilder::close`]: the histograms `now`, at the end of
    /// interval `index`, against those at the end of the last.
    fn latency_point(&mut self, index: usize, now: [LatHist; 2]) {
        let d = [
            now[0].since(&self.prev_latency[0]),
            now[1].since(&self.prev_latency[1]),
        ];
        if d[0].count + d[1].count > 0 {
            match self.latency.last_mut() {
                Some((i, acc)) if *i as usize == index => {
                    acc[0].merge(&d[0]);
                    acc[1].merge(&d[1]);
                }
                _ => self.latency.push((index as u32, d)),
            }
        }
        self.prev_latency = now;
    }

    /// Merges every `factor` intervals into one: the interval grows `factor` times, what was
    /// counted stays where it was in time.
    pub fn coarsen(&mut self, factor: u64) {
        let f = factor.max(1) as usize;
        if f == 1 {
            return;
        }
        self.interval_ns *= factor;
        self.open /= f;
        self.next_ns = self.next_start();
        self.total = merge_bins(&self.total, f, Delta::add);
        for points in self.flows.values_mut() {
            merge_points(points, |i| i / f as u32);
        }
        merge_latency(&mut self.latency, |i| i / f as u32);
    }

    /// Adds another builder's intervals (same grid: another capture file of the same run).
    pub fn absorb(&mut self, other: SeriesBuilder) {
        if self.total.len() < other.total.len() {
            self.total.resize(other.total.len(), Delta::default());
        }
        for (a, b) in self.total.iter_mut().zip(&other.total) {
            a.add(b);
        }
        self.open = self.open.max(other.open);
        self.overflow |= other.overflow;
        for (key, points) in other.flows {
            let mine = self.flows.entry(key).or_default();
            mine.extend(points);
            mine.sort_by_key(|(i, _)| *i);
            merge_points(mine, |i| i);
        }
        self.latency.extend(other.latency);
        self.latency.sort_by_key(|(i, _)| *i);
        merge_latency(&mut self.latency, |i| i);
    }

    /// The series on `grid` (whose bins are this builder's intervals), with `interfaces` and
    /// the `top` largest flows; and every flow's busiest interval as a rate (bits/s).
    pub fn finish(
        self,
        grid: &Grid,
        interfaces: Vec<InterfaceSeries>,
        top: usize,
    ) -> (Series, HashMap<FlowKey, f64>) {
        let n = grid.len();
        let mut total = vec![Delta::default(); n];
        for (bin, d) in self.total.iter().enumerate() {
            total[grid.of(bin)].add(d);
        }
        type Ranked = (u64, FlowKey, Vec<Delta>);
        let mut peaks = HashMap::with_capacity(self.flows.len());
        let mut flows: Vec<Ranked> = self
            .flows
            .into_iter()
            .map(|(key, points)| {
                let mut deltas = vec![Delta::default(); n];
                for (bin, d) in &points {
                    deltas[grid.of(*bin as usize)].add(d);
                }
                let peak = deltas
                    .iter()
                    .zip(&grid.covered_s)
                    .map(|(d, secs)| per_s(d.bytes as f64 * 8.0, *secs))
                    .fold(0.0, f64::max);
                peaks.insert(key, peak);
                (points.iter().map(|(_, d)| d.bytes).sum(), key, deltas)
            })
            .collect();
        flows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let flows = flows
            .into_iter()
            .take(top)
            .map(|(_, key, deltas)| FlowSeries {
                flow: FlowRef::of_key(&key),
                metrics: metrics_of(&deltas, &grid.covered_s),
            })
            .collect();
        let latency = (!self.latency.is_empty()).then(|| {
            let mut bins = vec![[LatHist::default(); 2]; n];
            for (bin, h) in &self.latency {
                let b = &mut bins[grid.of(*bin as usize)];
                b[0].merge(&h[0]);
                b[1].merge(&h[1]);
            }
            let q = |k: usize, q: f64| bins.iter().map(|b| b[k].quantile(q)).collect();
            LatencySeries {
                ack_samples: bins.iter().map(|b| b[0].count).collect(),
                ack_p50_ns: q(0, 0.5),
                ack_p99_ns: q(0, 0.99),
                read_samples: bins.iter().map(|b| b[1].count).collect(),
                read_p50_ns: q(1, 0.5),
                read_p99_ns: q(1, 0.99),
            }
        });
        let interval_s = grid.interval_ns as f64 / 1e9;
        let series = Series {
            latency,
            interval_s,
            start_ns: self.start_ns,
            t: (0..n).map(|i| i as f64 * interval_s).collect(),
            total: metrics_of(&total, &grid.covered_s),
            interfaces,
            flows,
            span_s: grid.span_s,
            interval_fitted: false,
        };
        (series, peaks)
    }
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

/// Renumbers sorted points with `to` (monotonic) and merges those that land together.
fn merge_points(points: &mut Vec<(u32, Delta)>, to: impl Fn(u32) -> u32) {
    for p in points.iter_mut() {
        p.0 = to(p.0);
    }
    points.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1.add(&b.1);
            true
        } else {
            false
        }
    });
}

/// Slot accounting of one interface and direction.
#[derive(Clone, Debug)]
pub struct BurstTracker {
    pub name: String,
    pub direction: Direction,
    slot_ns: u64,
    /// Slot bytes from which a slot is busy; none when the link speed is unknown.
    busy_bytes: Option<u64>,
    link_speed_bps: Option<u64>,
    /// Added to slot start times for reporting (monotonic to Unix time in live capture).
    clock_offset_ns: i128,
    /// Open slot of the per-packet feed.
    open: Option<(u64, u64)>,
    /// Where the slot after the open one begins (a comparison per frame, not a division).
    open_end_ns: u64,
    /// The current run of busy slots: (first slot, last slot, bytes, peak slot bytes).
    run: Option<(u64, u64, u64, u64)>,
    bytes: u64,
    peak: (u64, u64),
    busy_slots: u64,
    bursts: u64,
    longest: (u64, u64),
    top: Vec<Burst>,
    lost_slots: u64,
    uncertain_slots: u64,
    /// Per interval of the series: (wire bytes, peak slot bytes).
    per_interval: Vec<(u64, u64)>,
    series_start_ns: u64,
    interval_ns: u64,
}

impl BurstTracker {
    /// `threshold_percent` of `link_speed_bps` makes a slot busy. Slot times are `clock_offset_ns`
    /// away from the report's clock; intervals of `interval_ns` from `series_start_ns` on (the
    /// report's clock).
    pub fn new(
        name: String,
        direction: Direction,
        slot_ns: u64,
        link_speed_bps: Option<u64>,
        threshold_percent: f64,
        series: (u64, u64),
        clock_offset_ns: i128,
    ) -> Self {
        let slot_ns = slot_ns.max(1);
        let busy_bytes = link_speed_bps.map(|bps| {
            let full = bps as f64 / 8.0 * slot_ns as f64 / 1e9;
            ((full * threshold_percent / 100.0).ceil() as u64).max(1)
        });
        Self {
            name,
            direction,
            slot_ns,
            busy_bytes,
            link_speed_bps,
            clock_offset_ns,
            open: None,
            open_end_ns: 0,
            run: None,
            bytes: 0,
            peak: (0, 0),
            busy_slots: 0,
            bursts: 0,
            longest: (0, 0),
            top: Vec::new(),
            lost_slots: 0,
            uncertain_slots: 0,
            per_interval: Vec::new(),
            series_start_ns: series.0,
            interval_ns: series.1.max(1),
        }
    }

    /// Per-packet feed (replay): a frame of `frame_len` bytes at `ts_ns`. Frames a little out
    /// of order count in the open slot.
    #[inline]
    pub fn frame(&mut self, ts_ns: u64, frame_len: u64) {
        let wire = frame_len + WIRE_OVERHEAD;
        if let Some((_, b)) = &mut self.open
            && ts_ns < self.open_end_ns
        {
            *b += wire;
            return;
        }
        let slot = ts_ns / self.slot_ns;
        match &mut self.open {
            Some((s, b)) if slot <= *s => *b += wire,
            Some((s, b)) => {
                let (s, b) = (*s, *b);
                self.open = Some((slot, wire));
                self.open_end_ns = (slot + 1).saturating_mul(self.slot_ns);
                self.slot(s, b);
            }
            None => {
                self.open = Some((slot, wire));
                self.open_end_ns = (slot + 1).saturating_mul(self.slot_ns);
            }
        }
    }

    /// A whole slot's wire bytes; slots come in increasing order, empty ones may be left out.
    pub fn slot(&mut self, slot: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let start = self.report_ns(slot);
        self.bytes += bytes;
        if bytes > self.peak.1 {
            self.peak = (start, bytes);
        }
        let i = (start.saturating_sub(self.series_start_ns) / self.interval_ns) as usize;
        if i < MAX_INTERVALS as usize {
            if self.per_interval.len() <= i {
                self.per_interval.resize(i + 1, (0, 0));
            }
            let p = &mut self.per_interval[i];
            p.0 += bytes;
            p.1 = p.1.max(bytes);
        }
        let busy = self.busy_bytes.is_some_and(|t| bytes >= t);
        match (&mut self.run, busy) {
            (Some((_, last, b, peak)), true) if *last + 1 == slot => {
                *last = slot;
                *b += bytes;
                *peak = (*peak).max(bytes);
            }
            (_, true) => {
                self.end_run();
                self.run = Some((slot, slot, bytes, bytes));
            }
            (_, false) => self.end_run(),
        }
        self.busy_slots += u64::from(busy);
    }

    /// The wire bytes of `slots` slots from `first` on, whose frames came at times not known
    /// more finely (live: the kernel clock's tick stood at `first` that long): spread evenly
    /// over them (the remainder a byte each to the first). Each shows about the span's average
    /// rate (the span is known to within a slot): a burst shorter than the span may not show.
    pub fn span(&mut self, first: u64, bytes: u64, slots: u64) {
        if slots <= 1 {
            return self.slot(first, bytes);
        }
        self.uncertain_slots += slots;
        let (each, rest) = (bytes / slots, bytes % slots);
        for j in 0..slots {
            self.slot(first + j, each + u64::from(j < rest));
        }
    }

    /// Slots lost to the kernel ring's reuse.
    pub fn lost(&mut self, slots: u64) {
        self.lost_slots += slots;
        self.end_run();
    }

    fn report_ns(&self, slot: u64) -> u64 {
        (slot as i128 * self.slot_ns as i128 + self.clock_offset_ns).clamp(0, u64::MAX as i128)
            as u64
    }

    fn rate(&self, bytes: u64) -> f64 {
        bytes as f64 * 8.0 * 1e9 / self.slot_ns as f64
    }

    fn percent(&self, bps: f64) -> Option<f64> {
        self.link_speed_bps.map(|l| bps * 100.0 / l as f64)
    }

    fn end_run(&mut self) {
        let Some((first, last, bytes, peak)) = self.run.take() else {
            return;
        };
        self.bursts += 1;
        let slots = last - first + 1;
        let duration_ns = slots * self.slot_ns;
        let at_ns = self.report_ns(first);
        if duration_ns > self.longest.0 {
            self.longest = (duration_ns, at_ns);
        }
        let peak_bps = self.rate(peak);
        self.top.push(Burst {
            at_ns,
            duration_ns,
            bytes,
            peak_bps,
            peak_percent: self.percent(peak_bps),
        });
        self.top.sort_by(|a, b| {
            b.peak_bps
                .total_cmp(&a.peak_bps)
                .then(b.duration_ns.cmp(&a.duration_ns))
                .then(a.at_ns.cmp(&b.at_ns))
        });
        self.top.truncate(TOP_BURSTS);
    }

    /// Closes the open slot and run.
    pub fn flush(&mut self) {
        if let Some((s, b)) = self.open.take() {
            self.slot(s, b);
        }
        self.end_run();
    }

    /// The interface's row of the `microbursts` section.
    pub fn report(&mut self) -> InterfaceBursts {
        self.flush();
        let peak_bps = self.rate(self.peak.1);
        InterfaceBursts {
            name: self.name.clone(),
            direction: self.direction,
            bytes: self.bytes,
            peak_bps,
            peak_percent: self.percent(peak_bps),
            peak_at_ns: self.peak.0,
            busy_slots: self.busy_slots,
            bursts: self.bursts,
            longest_burst_ns: self.longest.0,
            longest_burst_at_ns: self.longest.1,
            top: self.top.clone(),
            lost_slots: self.lost_slots,
            uncertain_slots: self.uncertain_slots,
        }
    }

    /// Merges every `factor` intervals of the per-interval counts into one (see
    /// [`SeriesBuilder::coarsen`]).
    /// (A slot still open counts later, on the new intervals.)
    pub fn coarsen(&mut self, factor: u64) {
        self.interval_ns *= factor.max(1);
        self.per_interval = merge_bins(&self.per_interval, factor.max(1) as usize, |a, b| {
            a.0 += b.0;
            a.1 = a.1.max(b.1);
        });
    }

    /// The interface's row of the `series` section on `grid` (whose bins are this tracker's
    /// intervals).
    pub fn series(&mut self, grid: &Grid) -> InterfaceSeries {
        self.flush();
        let mut per = vec![(0u64, 0u64); grid.len()];
        for (bin, (bytes, peak)) in self.per_interval.iter().enumerate() {
            let p = &mut per[grid.of(bin)];
            p.0 += bytes;
            p.1 = p.1.max(*peak);
        }
        InterfaceSeries {
            name: self.name.clone(),
            direction: self.direction,
            bps: per
                .iter()
                .zip(&grid.covered_s)
                .map(|((b, _), secs)| per_s(*b as f64 * 8.0, *secs))
                .collect(),
            peak_bps: per.iter().map(|(_, p)| self.rate(*p)).collect(),
        }
    }
}

/// The `microbursts` section from the trackers.
pub fn microbursts(
    trackers: &mut [BurstTracker],
    link_speed_bps: Option<u64>,
    threshold_percent: f64,
) -> Option<Microbursts> {
    let slot_ns = trackers.first()?.slot_ns;
    Some(Microbursts {
        slot_ns,
        link_speed_bps,
        threshold_percent,
        interfaces: trackers.iter_mut().map(BurstTracker::report).collect(),
    })
}

/// What the series and microbursts are built with.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineConfig {
    /// The interval; fitted: the shortest the series may end with.
    pub interval_ns: u64,
    /// Fitted to the capture (replay without `--interval`): the interval is chosen at the end,
    /// about [`TARGET_INTERVALS`] over the span, from `interval_ns` x 1, 2 or 5 x 10^k.
    pub fitted: bool,
    /// Microburst slot width (0: no slots).
    pub slot_ns: u64,
    pub link_speed_bps: Option<u64>,
    /// A slot is busy from this share of the link speed.
    pub threshold_percent: f64,
    /// Flows given their own series.
    pub series_flows: usize,
}

impl TimelineConfig {
    /// Replay's: `interval_ns` when given, else fitted to the capture, never under a slot.
    pub fn replay(interval_ns: Option<u64>, slot_ns: u64) -> Self {
        Self {
            interval_ns: interval_ns.unwrap_or(shortest_interval(slot_ns)),
            fitted: interval_ns.is_none(),
            slot_ns,
            ..Self::default()
        }
    }
}

impl Default for TimelineConfig {
    /// As `replay` does it without flags: fitted to the capture, 100 us slots.
    fn default() -> Self {
        Self {
            interval_ns: shortest_interval(DEFAULT_SLOT_NS),
            fitted: true,
            slot_ns: DEFAULT_SLOT_NS,
            link_speed_bps: None,
            threshold_percent: 90.0,
            series_flows: SERIES_FLOWS,
        }
    }
}

/// What a timeline ends with: the `series` and `microbursts` sections, and each flow's busiest
/// interval as a rate (bits/s) on the series' grid.
#[derive(Debug, Default)]
pub struct TimelineEnd {
    pub series: Option<Series>,
    pub microbursts: Option<Microbursts>,
    pub flow_peaks: HashMap<FlowKey, f64>,
}

/// The series and the microburst trackers of one run: replay feeds it frame by frame (a
/// tracker per capture file, the files merged by time), live capture interval by interval and
/// slot by slot.
#[derive(Debug)]
pub struct Timeline {
    pub config: TimelineConfig,
    start_ns: Option<u64>,
    /// The latest time seen (a frame's, or the live clock's when it advanced).
    end_ns: Option<u64>,
    /// The bins recorded now: `config.interval_ns`, times ten per coarsening.
    bin_ns: u64,
    /// Fitted: times from the start past which the bins coarsen.
    horizon_ns: u64,
    /// Builders of the sources done (absorbed into one).
    done: Option<SeriesBuilder>,
    cur: Option<SeriesBuilder>,
    pub trackers: Vec<BurstTracker>,
    /// Replay: the capture files in the order given, and each one's tracker from its first
    /// frame on.
    sources: Vec<(String, Option<usize>)>,
    /// Fitted: how many times the bins have grown tenfold.
    coarsened: u32,
}

impl Timeline {
    /// Replay: the start is the first frame's timestamp.
    pub fn new(config: TimelineConfig) -> Self {
        let bin_ns = config.interval_ns.max(1);
        let horizon_ns = if config.fitted {
            bin_ns.saturating_mul(MAX_FINE_BINS)
        } else {
            u64::MAX
        };
        Self {
            config,
            start_ns: None,
            end_ns: None,
            bin_ns,
            horizon_ns,
            done: None,
            cur: None,
            trackers: Vec::new(),
            sources: Vec::new(),
            coarsened: 0,
        }
    }

    /// Live: starts at `start_ns` (Unix-epoch ns) with the flow table `flows`.
    pub fn starting(config: TimelineConfig, start_ns: u64, flows: &Aggregate) -> Self {
        let mut t = Self::new(config);
        t.start_ns = Some(start_ns);
        t.end_ns = Some(start_ns);
        t.cur = Some(SeriesBuilder::new(t.bin_ns, start_ns, flows));
        t
    }

    /// Live: adds a tracker for an interface and direction whose slot times are
    /// `clock_offset_ns` from the report's clock; its index.
    pub fn add_tracker(
        &mut self,
        name: String,
        direction: Direction,
        clock_offset_ns: i128,
    ) -> usize {
        let start = self.start_ns.unwrap_or(0);
        self.trackers.push(BurstTracker::new(
            name,
            direction,
            self.config.slot_ns,
            self.config.link_speed_bps,
            self.config.threshold_percent,
            (start, self.bin_ns),
            clock_offset_ns,
        ));
        self.trackers.len() - 1
    }

    /// Replay: the capture `name` is read (its own interface), as the next source. The files
    /// are merged by time, so one series takes the frames of them all.
    pub fn begin_source(&mut self, name: &str) {
        self.sources.push((name.to_string(), None));
    }

    /// Replay: the tracker of `source`, added at its first frame (when the start is known).
    #[cold]
    fn source_tracker(&mut self, source: usize) -> usize {
        if self.sources.len() <= source {
            self.sources.resize(source + 1, (String::new(), None));
        }
        let name = self.sources[source].0.clone();
        let i = self.add_tracker(name, Direction::Ingress, 0);
        self.sources[source].1 = Some(i);
        i
    }

    fn absorb(&mut self, mut b: SeriesBuilder, flows: &Aggregate) {
        b.close(flows);
        match &mut self.done {
            Some(d) => d.absorb(b),
            None => self.done = Some(b),
        }
    }

    /// Fitted: the bins grow tenfold until `ts_ns` lies within [`MAX_FINE_BINS`] of them.
    #[cold]
    fn coarsen_for(&mut self, ts_ns: u64, start: u64) {
        while ts_ns.saturating_sub(start) >= self.horizon_ns && self.bin_ns <= u64::MAX / 10 {
            self.bin_ns *= 10;
            self.coarsened += 1;
            self.horizon_ns = self.bin_ns.saturating_mul(MAX_FINE_BINS);
            for b in self.cur.iter_mut().chain(self.done.iter_mut()) {
                b.coarsen(10);
            }
            for t in &mut self.trackers {
                t.coarsen(10);
            }
        }
    }

    /// Replay: a frame of `source` of `len` bytes on the wire (as captured, before snaplen)
    /// at `ts_ns`; `flows` is the flow table before it.
    #[inline(always)]
    pub fn frame(&mut self, source: usize, ts_ns: u64, len: u64, flows: &Aggregate) {
        let start = *self.start_ns.get_or_insert(ts_ns);
        if self.end_ns.is_none_or(|e| ts_ns > e) {
            self.end_ns = Some(ts_ns);
        }
        if ts_ns.saturating_sub(start) >= self.horizon_ns {
            self.coarsen_for(ts_ns, start);
        }
        let bin = self.bin_ns;
        self.cur
            .get_or_insert_with(|| SeriesBuilder::new(bin, start, flows))
            .advance(ts_ns, flows);
        if self.config.slot_ns == 0 {
            return;
        }
        let i = match self.sources.get(source) {
            Some((_, Some(i))) => *i,
            _ => self.source_tracker(source),
        };
        self.trackers[i].frame(ts_ns, len);
    }

    /// Live: whether `now_ns` lies in a later interval than the open one (time to sample).
    pub fn due(&self, now_ns: u64) -> bool {
        self.cur
            .as_ref()
            .is_some_and(|b| b.index_of(now_ns) > b.open && !b.overflow)
    }

    /// Live: time moves on to `now_ns` (Unix-epoch ns) with the flow table `flows`.
    pub fn advance(&mut self, now_ns: u64, flows: &Aggregate) {
        if self.end_ns.is_none_or(|e| now_ns > e) {
            self.end_ns = Some(now_ns);
        }
        if let Some(cur) = &mut self.cur {
            cur.advance(now_ns, flows);
        }
    }

    /// Live: the observation ends at `now_ns`; what is counted after it goes into the open
    /// interval. When that has ended already (the sampler did not catch its end, at most one
    /// tick ago), the series ends with it, and the little that came since counts in it: an
    /// interval of a few milliseconds without samples would show no traffic.
    pub fn end_at(&mut self, now_ns: u64) {
        let mut end = now_ns;
        if let (Some(cur), Some(start)) = (&self.cur, self.start_ns)
            && cur.index_of(now_ns) > cur.open
        {
            end = end.min(start.saturating_add((cur.open as u64 + 1) * self.bin_ns));
        }
        if self.end_ns.is_none_or(|e| end > e) {
            self.end_ns = Some(end);
        }
    }

    /// Replay: the trackers in the order the files were given (they were added as each file's
    /// first frame came, in time order).
    fn trackers_in_file_order(&mut self) {
        if self.sources.is_empty() {
            return;
        }
        let mut trackers: Vec<Option<BurstTracker>> = std::mem::take(&mut self.trackers)
            .into_iter()
            .map(Some)
            .collect();
        for (_, t) in &mut self.sources {
            if let Some(i) = t
                && let Some(tracker) = trackers.get_mut(*i).and_then(Option::take)
            {
                *i = self.trackers.len();
                self.trackers.push(tracker);
            }
        }
    }

    /// Whether a time fell beyond [`MAX_INTERVALS`] intervals (the series stops there).
    pub fn overflowed(&self) -> bool {
        self.cur.as_ref().is_some_and(|b| b.overflow)
            || self.done.as_ref().is_some_and(|b| b.overflow)
    }

    /// The grid the series ends with: the interval (fitted to the span, or as configured), and
    /// the time each interval covers, up to the latest time seen.
    pub fn grid(&self) -> Grid {
        let start = self.start_ns.unwrap_or(0);
        let span = self.end_ns.unwrap_or(start).saturating_sub(start);
        let interval = if self.config.fitted {
            fitted_interval(span, self.config.interval_ns, self.bin_ns)
        } else {
            self.bin_ns
        };
        Grid::new(interval, interval / self.bin_ns, span)
    }

    /// The `series` and `microbursts` sections and the flows' peaks, `flows` being the final
    /// flow table.
    pub fn finish(mut self, flows: &Aggregate) -> TimelineEnd {
        if let Some(cur) = self.cur.take() {
            self.absorb(cur, flows);
        }
        self.trackers_in_file_order();
        let grid = self.grid();
        let interfaces: Vec<InterfaceSeries> =
            self.trackers.iter_mut().map(|t| t.series(&grid)).collect();
        let (series, flow_peaks) = match self.done {
            Some(b) => {
                let (mut s, peaks) = b.finish(&grid, interfaces, self.config.series_flows);
                s.interval_fitted = self.config.fitted;
                (Some(s), peaks)
            }
            None => (None, HashMap::new()),
        };
        let microbursts = microbursts(
            &mut self.trackers,
            self.config.link_speed_bps,
            self.config.threshold_percent,
        );
        TimelineEnd {
            series,
            microbursts,
            flow_peaks,
        }
    }
}

/// Replay over several threads: the timeline sees every frame on the reading thread (its
/// clock, intervals and microburst slots), with no flow table; in each shard a [`SeriesShard`]
/// closes the same intervals at the same frames on the shard's flow table.
impl Sharded for Timeline {
    /// How many times the bins grew tenfold, and the open interval.
    type Mark = (u32, usize);
    type Part = SeriesShard;

    fn part(&self) -> SeriesShard {
        SeriesShard {
            builder: SeriesBuilder::new(self.bin_ns, 0, &Aggregate::default()),
            coarsened: 0,
            closes: 0,
            counted: 0,
            latency: Vec::new(),
        }
    }

    #[inline(always)]
    fn mark(&self) -> (u32, usize) {
        (self.coarsened, self.cur.as_ref().map_or(0, |b| b.open))
    }

    /// The shards' intervals join this timeline's (which closed them on no flow table): each
    /// flow's and the totals add up. The latency series is worked out again as one flow table
    /// would have given it: at each close where some shard's histograms grew, every shard's
    /// (as of its latest close) together, against those of the close before.
    fn join(&mut self, parts: Vec<SeriesShard>) {
        let Some(mut cur) = self.cur.take() else {
            return;
        };
        let mut marks = Vec::new();
        for (shard, p) in parts.into_iter().enumerate() {
            cur.absorb(p.builder);
            marks.extend(p.latency.into_iter().map(|m| (m, shard)));
        }
        marks.sort_by_key(|(m, shard)| (m.close, *shard));
        let shards = marks.iter().map(|(_, s)| s + 1).max().unwrap_or(0);
        let mut totals = vec![[LatHist::default(); 2]; shards];
        let mut k = 0;
        while k < marks.len() {
            let (close, coarsened, index) =
                (marks[k].0.close, marks[k].0.coarsened, marks[k].0.index);
            while k < marks.len() && marks[k].0.close == close {
                totals[marks[k].1] = marks[k].0.totals;
                k += 1;
            }
            let mut now = [LatHist::default(); 2];
            for t in &totals {
                now[0].merge(&t[0]);
                now[1].merge(&t[1]);
            }
            // Where the interval lies once the bins grew as often as they did in the end.
            let grown = self.coarsened.saturating_sub(coarsened);
            let index = (0..grown).fold(index, |i, _| i / 10);
            cur.latency_point(index, now);
        }
        match &mut self.done {
            Some(d) => d.absorb(cur),
            None => self.done = Some(cur),
        }
    }
}

/// A shard's part of a [`Timeline`]: its flows' series, closed at the frames where the
/// timeline's were, and its latency histograms at each close where they grew.
#[derive(Debug)]
pub struct SeriesShard {
    builder: SeriesBuilder,
    coarsened: u32,
    /// Intervals closed so far.
    closes: u64,
    /// Latency samples in the shard at its last mark.
    counted: u64,
    latency: Vec<LatencyMark>,
}

/// A shard's latency histograms (all interfaces and sides: ACK, READ) at the `close`th close,
/// of interval `index` when the bins had grown `coarsened` times.
#[derive(Debug)]
struct LatencyMark {
    close: u64,
    coarsened: u32,
    index: usize,
    totals: [LatHist; 2],
}

impl SeriesShard {
    fn close(&mut self, agg: &Aggregate) {
        self.builder.close_flows(agg);
        let totals = latency_totals(agg);
        let counted = totals[0].count + totals[1].count;
        if counted != self.counted {
            self.counted = counted;
            self.latency.push(LatencyMark {
                close: self.closes,
                coarsened: self.coarsened,
                index: self.builder.open,
                totals,
            });
        }
        self.closes += 1;
    }
}

impl ShardPart for SeriesShard {
    type Mark = (u32, usize);

    /// As [`Timeline::frame`] moved on: the bins grow first, then the open interval closes.
    fn mark(&mut self, (coarsened, open): (u32, usize), agg: &Aggregate) {
        while self.coarsened < coarsened {
            self.builder.coarsen(10);
            self.coarsened += 1;
        }
        if open != self.builder.open {
            self.close(agg);
            self.builder.open = open;
        }
    }

    /// As [`Timeline::finish`] closes the interval open at the end.
    fn end(&mut self, agg: &Aggregate) {
        self.close(agg);
    }
}

/// Replay feeds the timeline frame by frame.
impl crate::aggregate::FrameObserver for Timeline {
    fn begin_source(&mut self, name: &str) {
        Timeline::begin_source(self, name);
    }

    #[inline(always)]
    fn frame(&mut self, source: usize, ts_ns: u64, len: u64, flows: &Aggregate) {
        Timeline::frame(self, source, ts_ns, len, flows);
    }
}

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
