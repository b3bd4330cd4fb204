//! Microbursts: the byte count of each short slot of one interface and direction, its peaks
//! and runs above a share of the link speed.

use super::*;

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
