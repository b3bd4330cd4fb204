//! Time series: an interval closed by diffing the flow table against the previous interval's.

use super::*;

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
    pub(super) open: usize,
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
    /// Closed for good (the jobs' fixed bins past [`MAX_INTERVALS`]): nothing after counts.
    pub(super) frozen: bool,
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
            frozen: false,
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

    /// As [`SeriesBuilder::advance`], but a time beyond [`MAX_INTERVALS`] freezes the bins
    /// ([`SeriesBuilder::freeze`]) instead of lumping what follows into the last one.
    #[inline]
    pub(super) fn advance_or_freeze(&mut self, ts_ns: u64, flows: &Aggregate) {
        if ts_ns < self.next_ns {
            return;
        }
        if self.index_of(ts_ns) >= MAX_INTERVALS as usize {
            self.freeze(flows);
            return;
        }
        self.advance(ts_ns, flows);
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
    pub(super) fn close_flows(&mut self, agg: &Aggregate) {
        if self.frozen {
            return;
        }
        let index = self.open;
        if self.total.len() <= index {
            self.total.resize(index + 1, Delta::default());
        }
        let mut sum = Delta::default();
        // The last table is kept by updating what changed, not by copying the table: a bin
        // of a busy capture changes a few flows of many.
        for (key, now) in &agg.flows {
            let before = self.prev.get(key);
            if before.is_some_and(|b| b.packets == now.packets && b.bytes == now.bytes) {
                continue;
            }
            let d = Delta::between(now, before);
            self.prev.insert(*key, *now);
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
        // Flows gone from the table (evicted, or aged out) are gone from the last one too:
        // one coming back counts from nothing.
        if self.prev.len() > agg.flows.len() {
            self.prev.retain(|k, _| agg.flows.contains_key(k));
        }
        for (key, now) in &agg.unions {
            let d = Delta::between(now, self.prev_unions.get(key));
            sum.gaps += d.gaps;
            sum.retransmissions += d.retransmissions;
        }
        self.total[index].add(&sum);
        self.prev_unions.clone_from(&agg.unions);
    }

    /// The latency part of [`SeriesBuilder::close`]: the histograms `now`, at the end of
    /// interval `index`, against those at the end of the last.
    pub(super) fn latency_point(&mut self, index: usize, now: [LatHist; 2]) {
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

    /// Closes the open interval with `flows` and counts nothing more: a time fell beyond
    /// [`MAX_INTERVALS`], and what comes after it is not lumped into the last interval.
    pub(super) fn freeze(&mut self, flows: &Aggregate) {
        self.close_flows(flows);
        self.frozen = true;
        self.overflow = true;
    }

    /// Every flow's bins as recorded (the jobs analysis's fixed grid).
    pub fn into_bins(self) -> FlowBins {
        FlowBins {
            bin_ns: self.interval_ns,
            start_ns: self.start_ns,
            flows: self.flows,
            overflow: self.overflow,
        }
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
