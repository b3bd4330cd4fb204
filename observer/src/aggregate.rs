//! The one aggregation path: parsed packets to a flow table and global counters. Live capture
//! fills it from the kernel maps, replay and tests from frames; both use the per-flow update of
//! observer-common, so the same frames give the same [`Aggregate`].

use std::collections::{BTreeMap, HashMap};

use crate::model::{Flow, MirrorTotals, PfcReport, Report, SCHEMA, Source, Totals, Window};
use crate::units::count;
use observer_common::{
    Counters, DIRECTION_EGRESS, FlowKey, FlowStats, OpClass, Parsed, PauseKey, PauseStats,
    RocePacket, SkipReason, parse_frame,
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
    #[inline(always)]
    pub fn push_parsed(
        &mut self,
        parsed: Parsed,
        frame: &[u8],
        ts_ns: u64,
    ) -> Result<RocePacket, SkipReason> {
        self.push_seen(parsed, frame, ts_ns, false)
    }

    /// Accounts a parsed request packet that another observation point gave already (replay of
    /// captures that overlap): counted like any packet, and as a duplicate, but kept out of the
    /// PSN analysis, which follows the packets as first seen. (A copy lagging behind a few
    /// packets would look like a go-back-N resend there.)
    pub fn push_copy(
        &mut self,
        parsed: Parsed,
        frame: &[u8],
        ts_ns: u64,
    ) -> Result<RocePacket, SkipReason> {
        self.push_seen(parsed, frame, ts_ns, true)
    }

    #[inline(always)]
    fn push_seen(
        &mut self,
        parsed: Parsed,
        frame: &[u8],
        ts_ns: u64,
        copy: bool,
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
            let stats = match self.flows.get_mut(&key) {
                Some(stats) => stats,
                None => self.flows.entry(key).or_default(),
            };
            if copy {
                stats.count(p, ts_ns);
                stats.seq.duplicates += 1;
                stats.psn_regressions += 1;
            } else {
                stats.record(p, ts_ns);
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
        let flows = self.flows.iter().map(|(k, s)| (*k, s.timeless())).collect();
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
    /// The flows of the report, each joined to its reverse direction (swapped addresses, the
    /// same UDP source port and mirror): the path MTU either direction learned, responses
    /// checked against the requests they answer, requests left unanswered, RNR retries.
    fn linked_flows(&self, window_seconds: f64) -> Vec<Flow> {
        use observer_common::seq::{F_ACKREQ, F_RESP, F_VALID, pmtu_of, psn_after, psn_sub};
        type Tuple = ([u8; 16], [u8; 16], u16, u16);
        let tuple = |k: &FlowKey| -> Tuple {
            (
                k.src_ip,
                k.dst_ip,
                k.udp_src_port,
                k.mirror & !DIRECTION_EGRESS,
            )
        };
        let mut by_tuple: HashMap<Tuple, Vec<&FlowKey>> = HashMap::new();
        for k in self.flows.keys().filter(|k| k.dest_qp != 1) {
            by_tuple.entry(tuple(k)).or_default().push(k);
        }
        // The observation's end: the newest request or response of any flow, on the clock the
        // analysis keeps its times on (live, the kernel's; replay, the capture's).
        let end = self
            .flows
            .values()
            .map(|s| s.seq_track.req_ns.max(s.seq_track.resp_ns))
            .max()
            .unwrap_or(0);
        // The reverse direction: the one flow back, or (host mode sees a connection both
        // leave and arrive) the one flow back in the other direction of the host.
        let reverse = |k: &FlowKey| -> Option<&FlowStats> {
            let (src, dst, sport, mirror) = tuple(k);
            let back = by_tuple.get(&(dst, src, sport, mirror))?;
            let one = match back.as_slice() {
                [r] => Some(*r),
                many => {
                    let mut other = many.iter().filter(|r| r.is_egress() != k.is_egress());
                    match (other.next(), other.next()) {
                        (Some(r), None) => Some(*r),
                        _ => None,
                    }
                }
            };
            one.filter(|_| k.dest_qp != 1)
                .and_then(|r| self.flows.get(r))
        };
        let mut flows: Vec<(FlowKey, Flow)> = self
            .flows
            .iter()
            .map(|(k, s)| {
                let mut f = Flow::new(k, s, window_seconds);
                let Some(r) = reverse(k) else {
                    return (*k, f);
                };
                let pmtu = pmtu_of(s.seq.pmtu_mask | r.seq.pmtu_mask);
                f.psn = f.psn.with_pmtu(s, pmtu);
                // A PSN sent again after an RNR NAK waited out the RNR timer: if the wait was
                // shorter than the analysis can tell from a copy, the resend is no duplicate.
                // RNR NAKs not already answered by a resend after a wait.
                let rnr = r.ops[OpClass::RnrNak as usize]
                    .saturating_sub(f.psn.retransmission_episodes)
                    .min(f.psn.duplicates);
                f.psn.duplicates -= rnr;
                // A wait before a resend after RNR NAKs is the receiver's RNR timer (up to
                // 655 ms), not a stalled fabric: not kept as one.
                if r.ops[OpClass::RnrNak as usize] > 0 {
                    f.psn.longest_resend_wait = None;
                }
                f.psn.retransmissions += rnr;
                f.psn.retransmission_episodes += rnr;
                let (t, rt) = (&s.seq_track, &r.seq_track);
                if t.flags & F_ACKREQ != 0 && end > t.ackreq_ns {
                    let answered = rt.flags & F_RESP != 0
                        && !psn_after(t.ackreq_psn, rt.resp_psn)
                        && !psn_after(rt.resp_psn, psn_sub(t.next_hi, 1))
                        && rt.resp_ns >= t.ackreq_ns;
                    if !answered {
                        f.psn.unanswered = Some(crate::model::Unanswered {
                            since_ns: t.ackreq_ns,
                            for_ns: end - t.ackreq_ns,
                            psn: t.ackreq_psn,
                            answered_psn: (rt.flags & F_RESP != 0).then_some(rt.resp_psn),
                        });
                    }
                }
                (*k, f)
            })
            .collect();
        // Responses to PSNs no request used: the responder's flow carries the violation.
        // Per request flow: its newest request PSN and the newest PSN it may have used (a READ
        // of unknown path MTU, or cut before its RETH, consumes a range).
        let sent_hi: HashMap<Tuple, (u32, u32)> = self
            .flows
            .iter()
            .filter(|(_, s)| s.seq_track.flags & F_VALID != 0)
            .map(|(k, s)| {
                let t = &s.seq_track;
                (tuple(k), (t.top, psn_sub(t.next_hi, 1)))
            })
            .collect();
        for (k, f) in &mut flows {
            let s = &self.flows[k];
            let t = &s.seq_track;
            let (src, dst, sport, mirror) = tuple(k);
            let requests = by_tuple.get(&(dst, src, sport, mirror)).map_or(0, Vec::len);
            if t.flags & F_RESP == 0 || requests != 1 {
                continue;
            }
            if let Some(&(top, hi)) = sent_hi.get(&(dst, src, sport, mirror))
                && psn_after(t.resp_psn, top)
                && psn_sub(t.resp_psn, top) > psn_sub(hi, top)
            {
                f.psn.violations += 1;
                if f.psn.first_violation.is_none() {
                    f.psn.first_violation = Some(crate::model::Violation {
                        at_ns: t.resp_ns,
                        kind: crate::model::ViolationKind::ResponsePsnNeverSent,
                        psn: t.resp_psn,
                        other_psn: hi,
                    });
                }
            }
        }
        flows.into_iter().map(|(_, f)| f).collect()
    }

    /// The report of this aggregate: every flow, largest first, and the totals.
    pub fn report(&self, source: Source, window_seconds: f64) -> Report {
        let agg = self;
        let c = &agg.counters;
        let mut flows = agg.linked_flows(window_seconds);
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
        let mut psn = crate::model::Psn::default();
        for f in &flows {
            psn.add(&f.psn);
        }
        Report {
            schema: SCHEMA.to_string(),
            notice: (c.roce_packets == 0).then(|| {
                format!(
                    "no RoCEv2 packet in {}: nothing below is about RoCE",
                    count(c.frames, "frame")
                )
            }),
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
                psn,
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
