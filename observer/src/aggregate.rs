//! The one aggregation path: parsed packets to a flow table and global counters. Live capture
//! fills it from the kernel maps, replay and tests from frames; both use the per-flow update of
//! observer-common, so the same frames give the same [`Aggregate`].

use std::collections::{BTreeMap, HashMap};

use crate::model::{Flow, MirrorTotals, PfcReport, Report, SCHEMA, Source, Totals, Window};
use observer_common::{
    Counters, FlowKey, FlowStats, Parsed, PauseKey, PauseStats, RocePacket, SkipReason, parse_frame,
};

/// The flow table: a hash map with a fast non-cryptographic hasher (keys come from packets, and
/// a 40-byte key ordered in a tree cost a fifth of replay time). Reports sort the flows.
pub type FlowMap = HashMap<FlowKey, FlowStats, rustc_hash::FxBuildHasher>;

/// Flow table, pause table and global counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aggregate {
    pub flows: FlowMap,
    /// PAUSE / PFC frames per sender (few: switch ports and NICs).
    pub pauses: BTreeMap<PauseKey, PauseStats>,
    pub counters: Counters,
}

impl Aggregate {
    pub fn new() -> Self {
        Self::default()
    }

    /// Accounts one Ethernet frame seen at `ts_ns`, exactly as the kernel program does.
    pub fn push(&mut self, frame: &[u8], ts_ns: u64) -> Result<RocePacket, SkipReason> {
        self.push_parsed(parse_frame(frame), frame, ts_ns)
    }

    /// Accounts one parsed frame (of any link type; `frame` the bytes parsed) seen at `ts_ns`.
    pub fn push_parsed(
        &mut self,
        parsed: Parsed,
        frame: &[u8],
        ts_ns: u64,
    ) -> Result<RocePacket, SkipReason> {
        if let Some(pause) = parsed.pause(frame) {
            self.pauses
                .entry(PauseKey::of(&pause, &parsed.mirror))
                .or_default()
                .record(&pause, ts_ns);
        }
        let Parsed { result, mirror, .. } = parsed;
        self.counters.record(&result);
        self.counters.record_mirror(&mirror);
        if let Ok(p) = &result {
            let key = FlowKey::of(p);
            // A probe first: `entry` moves the key in and builds an entry on every packet.
            match self.flows.get_mut(&key) {
                Some(stats) => stats.record(p, ts_ns),
                None => self.flows.entry(key).or_default().record(p, ts_ns),
            }
        }
        result
    }

    /// Adds a partial view of one flow (a per-CPU value read from the kernel).
    pub fn merge_flow(&mut self, key: FlowKey, stats: &FlowStats) {
        if stats.packets == 0 {
            return;
        }
        self.flows.entry(key).or_default().merge(stats);
    }

    /// Adds a partial view of one pause sender (a per-CPU value read from the kernel).
    pub fn merge_pause(&mut self, key: PauseKey, stats: &PauseStats) {
        if stats.frames_total() == 0 {
            return;
        }
        self.pauses.entry(key).or_default().merge(stats);
    }

    /// Adds another aggregate (another interface, another CPU).
    pub fn merge(&mut self, other: &Aggregate) {
        self.counters.merge(&other.counters);
        for (key, stats) in &other.flows {
            self.merge_flow(*key, stats);
        }
        for (key, stats) in &other.pauses {
            self.merge_pause(*key, stats);
        }
    }

    /// The same aggregate with the fields that depend on when and in which order packets were
    /// seen (timestamps, PSN continuation state) cleared: what ground truth can be compared to.
    pub fn comparable(&self) -> Aggregate {
        let flows = self
            .flows
            .iter()
            .map(|(k, s)| {
                let mut s = *s;
                s.first_seen_ns = 0;
                s.last_seen_ns = 0;
                s.psn_next_lo = 0;
                s.psn_next_hi = 0;
                s.psn_valid = 0;
                (*k, s)
            })
            .collect();
        let pauses = self
            .pauses
            .iter()
            .map(|(k, s)| {
                let mut s = *s;
                s.first_seen_ns = 0;
                s.last_seen_ns = 0;
                (*k, s)
            })
            .collect();
        Aggregate {
            flows,
            pauses,
            counters: self.counters,
        }
    }
}

impl Aggregate {
    /// The report of this aggregate: every flow, largest first, and the totals.
    pub fn report(&self, source: Source, window_seconds: f64) -> Report {
        let agg = self;
        let c = &agg.counters;
        let mut flows: Vec<Flow> = agg
            .flows
            .iter()
            .map(|(k, s)| Flow::new(k, s, window_seconds))
            .collect();
        flows.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(b.packets.cmp(&a.packets))
                .then(a.src_ip.cmp(&b.src_ip))
                .then(a.dst_ip.cmp(&b.dst_ip))
                .then(a.dest_qp.cmp(&b.dest_qp))
                .then(a.udp_src_port.cmp(&b.udp_src_port))
                .then(a.direction.cmp(&b.direction))
        });
        Report {
            schema: SCHEMA.to_string(),
            source,
            window: Window {
                seconds: window_seconds,
            },
            totals: Totals {
                frames: c.frames,
                roce_packets: c.roce_packets,
                roce_bytes: c.roce_bytes,
                ce_packets: c.ce_packets,
                cnp_packets: c.cnp_packets,
                flow_insert_failures: c.flow_insert_failures,
                evicted_packets: c
                    .roce_packets
                    .saturating_sub(c.flow_insert_failures)
                    .saturating_sub(agg.flows.values().map(|s| s.packets).sum()),
                egress_frames: c.egress_frames,
                pause_insert_failures: c.pause_insert_failures,
                skipped: SkipReason::ALL
                    .iter()
                    .map(|r| (r.name().to_string(), c.skipped[*r as usize]))
                    .collect(),
                mirror: MirrorTotals::of(c),
            },
            flows,
            pfc: PfcReport::new(&agg.pauses),
            ecmp: None,
            series: None,
            microbursts: None,
            findings: Vec::new(),
            checks: Vec::new(),
        }
    }
}
