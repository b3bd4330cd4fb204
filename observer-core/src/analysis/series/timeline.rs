//! The time series and microbursts of one observation together, and their split over the
//! shards of a replay on several threads.

use super::*;

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
    /// Replay: every flow's bins of this width as well, fixed however long the capture (the
    /// jobs analysis); 0: none.
    pub jobs_bin_ns: u64,
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
            jobs_bin_ns: 0,
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
    /// With `jobs_bin_ns`: every flow's bins of that width.
    pub jobs: Option<FlowBins>,
}

/// Every flow's traffic on a fixed grid: what each bin with traffic added.
#[derive(Debug, Default)]
pub struct FlowBins {
    pub bin_ns: u64,
    /// The first bin's start (unix ns).
    pub start_ns: u64,
    pub flows: HashMap<FlowKey, Vec<(u32, Delta)>, rustc_hash::FxBuildHasher>,
    /// A time fell beyond [`MAX_INTERVALS`] bins: the bins stop there.
    pub overflow: bool,
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
    pub(super) bin_ns: u64,
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
    /// With `jobs_bin_ns`: the fixed bins open, and (replay on several threads) those the
    /// shards' joined.
    jobs: Option<SeriesBuilder>,
    jobs_done: Option<SeriesBuilder>,
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
            jobs: None,
            jobs_done: None,
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
        if self.config.jobs_bin_ns > 0 {
            self.jobs_frame(ts_ns, start, flows);
        }
        if self.config.slot_ns == 0 {
            return;
        }
        let i = match self.sources.get(source) {
            Some((_, Some(i))) => *i,
            _ => self.source_tracker(source),
        };
        self.trackers[i].frame(ts_ns, len);
    }

    /// The fixed bins move on to `ts_ns`; past [`MAX_INTERVALS`] of them they stop (what
    /// came before is kept, nothing after counts).
    #[inline]
    fn jobs_frame(&mut self, ts_ns: u64, start: u64, flows: &Aggregate) {
        let bin = self.config.jobs_bin_ns;
        let b = self
            .jobs
            .get_or_insert_with(|| SeriesBuilder::new(bin, start, flows));
        if b.frozen {
            return;
        }
        b.advance_or_freeze(ts_ns, flows);
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
        let jobs = match (self.jobs_done, self.jobs) {
            (Some(done), _) => Some(done),
            (None, Some(mut open)) => {
                open.close_flows(flows);
                Some(open)
            }
            (None, None) => None,
        }
        .map(SeriesBuilder::into_bins);
        TimelineEnd {
            series,
            microbursts,
            flow_peaks,
            jobs,
        }
    }
}

/// Replay over several threads: the timeline sees every frame on the reading thread (its
/// clock, intervals and microburst slots), with no flow table; in each shard a [`SeriesShard`]
/// closes the same intervals at the same frames on the shard's flow table.
impl Sharded for Timeline {
    /// How many times the bins grew tenfold, the open interval, and the open fixed bin.
    type Mark = (u32, usize, usize);
    type Part = SeriesShard;

    fn part(&self) -> SeriesShard {
        SeriesShard {
            builder: SeriesBuilder::new(self.bin_ns, 0, &Aggregate::default()),
            jobs: (self.config.jobs_bin_ns > 0)
                .then(|| SeriesBuilder::new(self.config.jobs_bin_ns, 0, &Aggregate::default())),
            coarsened: 0,
            closes: 0,
            counted: 0,
            latency: Vec::new(),
        }
    }

    #[inline(always)]
    fn mark(&self) -> (u32, usize, usize) {
        (
            self.coarsened,
            self.cur.as_ref().map_or(0, |b| b.open),
            // (Frozen: a mark past every bin, at which the shards freeze too.)
            self.jobs
                .as_ref()
                .map_or(0, |b| if b.frozen { usize::MAX } else { b.open }),
        )
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
        let mut jobs = self.jobs.take();
        for (shard, p) in parts.into_iter().enumerate() {
            cur.absorb(p.builder);
            if let (Some(j), Some(pj)) = (&mut jobs, p.jobs) {
                j.absorb(pj);
            }
            marks.extend(p.latency.into_iter().map(|m| (m, shard)));
        }
        self.jobs_done = match (self.jobs_done.take(), jobs) {
            (Some(mut done), Some(j)) => {
                done.absorb(j);
                Some(done)
            }
            (done, j) => done.or(j),
        };
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
    /// The fixed bins, when the timeline has them.
    jobs: Option<SeriesBuilder>,
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
    type Mark = (u32, usize, usize);

    /// As [`Timeline::frame`] moved on: the bins grow first, then the open interval closes.
    fn mark(&mut self, (coarsened, open, jobs_open): (u32, usize, usize), agg: &Aggregate) {
        while self.coarsened < coarsened {
            self.builder.coarsen(10);
            self.coarsened += 1;
        }
        if open != self.builder.open {
            self.close(agg);
            self.builder.open = open;
        }
        if let Some(j) = &mut self.jobs
            && jobs_open != j.open
            && !j.frozen
        {
            if jobs_open == usize::MAX {
                j.freeze(agg);
            } else {
                j.close_flows(agg);
                j.open = jobs_open;
            }
        }
    }

    /// As [`Timeline::finish`] closes the interval open at the end.
    fn end(&mut self, agg: &Aggregate) {
        self.close(agg);
        if let Some(j) = &mut self.jobs {
            j.close_flows(agg);
        }
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
