//! Capture files of one traffic taken at several observation points (per-node captures of one
//! job, a tap and a host): the same packet is in several files. Each packet counts once, at
//! the first point that gave it; what the others gave of it is a sighting: how many points saw
//! it, the time between two points (a one-way delay plus their clocks' offset), and, for a
//! point that carries the flow but never saw the packet, where it was seen last.
//!
//! A packet is told by its flow, PSN, opcode and AETH syndrome; a point gives one sighting of
//! it at most: a sender's resend seen again at the first point is a new packet, and the other
//! points' sightings of that PSN go to the oldest packet they have not seen (in order: a
//! point's clock may run so far ahead of another's that the resend there comes before the
//! original here). Sightings are kept for [`SIGHT_WINDOW_NS`] after the first: a copy later
//! than that (clocks further apart) is a packet of its own.

use std::collections::{BTreeMap, HashMap, VecDeque};

use observer_common::{FlowKey, LatKey, LatState, RocePacket, SeqInput, seq::Request};

use crate::aggregate::{Aggregate, LatencyMap};

/// A copy comes within this of the first sighting of its packet (as mirror copies do): the
/// transit between two points plus their clocks' offset.
pub const SIGHT_WINDOW_NS: u64 = observer_common::seq::RETX_IDLE_NS;

/// Most files read as points (a bit each).
pub const MAX_POINTS: usize = 64;

/// Requests two points shared in order before a request reordered between them is taken for
/// theirs too.
const TRUST_REQUESTS: u32 = 4;

/// One-way samples kept per pair of points and direction (beyond that, counted only).
const MAX_SAMPLES: usize = 1 << 20;

type FxMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SightKey {
    flow: FlowKey,
    psn: u32,
    opcode: u8,
    syndrome: u16,
}

#[derive(Clone, Copy, Debug)]
struct Sighting {
    /// When the first point saw it.
    ts_ns: u64,
    first: u8,
    /// The points that saw it (bit per file).
    seen: u64,
    /// The point that saw it last (in its own clock), and when.
    last: u8,
    last_ts_ns: u64,
    /// A request behind the newest its first point saw of the flow: sent again.
    resent: bool,
    request: bool,
}

/// Samples of one direction between two points: the second point's time minus the first's
/// (the lower file number first), per packet seen at both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Crossing {
    pub samples: Vec<i64>,
    /// Samples beyond those kept.
    pub more: u64,
}

/// Packets a point carrying their flow never saw, where they were seen last.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Missing {
    pub packets: u64,
    /// Some of their PSNs (up to 8).
    pub psns: Vec<u32>,
}

/// The key of a direction between two points: (lower point, higher point, source, destination).
pub type CrossingKey = (u8, u8, [u8; 16], [u8; 16]);

/// What the points saw of each other's packets.
#[derive(Debug, Default)]
pub struct Points {
    /// Files read as points, in the order given.
    pub files: Vec<String>,
    /// Packets counted once among the files that share traffic, by how many points saw them
    /// (index 0: one point).
    pub seen_at: Vec<u64>,
    /// Per pair of points and direction.
    pub crossings: BTreeMap<CrossingKey, Crossing>,
    /// Per flow, the point that saw a packet last and the point that carries the flow but did
    /// not see it.
    pub missing: BTreeMap<(FlowKey, u8, u8), Missing>,
    /// Each point's own accounting of its file: its latency, timed in its own clock (a request
    /// seen first at one point and its answer first at another would mix two clocks).
    pub views: Vec<Aggregate>,
    /// Per packet key, the packets of that key still open, oldest first (mostly one).
    sightings: FxMap<SightKey, VecDeque<Sighting>>,
    /// Sightings by first time, to let go of them after the window.
    order: VecDeque<(u64, SightKey)>,
    /// The points that gave a packet of each flow, and when each first and last did.
    carried: FxMap<FlowKey, u64>,
    /// Packets a point carrying their flow did not see, judged when every file has ended.
    absent: Vec<(SightKey, Sighting, u8)>,
    span: Vec<(u64, u64)>,
    /// The newest PSN each point saw of each flow.
    newest: FxMap<(FlowKey, u8), (u32, u64)>,
    /// Per file, the requests it shared with each other file (in order: no resend of one
    /// matched to the other's original). One is a point of the same traffic; from
    /// [`TRUST_REQUESTS`] on, one trusted with requests reordered between them.
    shared: Vec<[u32; MAX_POINTS]>,
    /// Per file, the files that were capturing while it was (a bit each).
    overlapped: Vec<u64>,
}

impl Points {
    pub fn new(files: Vec<String>) -> Self {
        let n = files.len();
        Self {
            files,
            seen_at: vec![0; n],
            span: vec![(u64::MAX, 0); n],
            overlapped: vec![0; n],
            shared: vec![[0; MAX_POINTS]; n],
            views: (0..n).map(|_| Aggregate::new()).collect(),
            ..Self::default()
        }
    }

    /// Any file gave a sighting of a packet of another's.
    pub fn shared(&self) -> bool {
        self.seen_at.iter().skip(1).any(|n| *n > 0)
    }

    /// Packet `p` from point `file` at `ts_ns` (files merged by time), while the files of
    /// `live` (a bit each) are capturing too: whether another point gave it already (a
    /// sighting of a packet counted there). Only files that captured at the same time are
    /// points of one traffic: a rotated capture's next file repeats no packet of the one before
    /// (a resend or an ACK repeated across the cut is a packet of its own).
    pub fn sight(&mut self, file: usize, p: &RocePacket, ts_ns: u64, live: u64) -> bool {
        let Ok(point) = u8::try_from(file) else {
            return false;
        };
        if file >= MAX_POINTS {
            return false;
        }
        self.expire(ts_ns);
        if let Some(o) = self.overlapped.get_mut(file) {
            *o |= live;
        }
        let mut others = live;
        while others != 0 {
            let j = others.trailing_zeros() as usize;
            others &= others - 1;
            if let Some(o) = self.overlapped.get_mut(j) {
                *o |= 1 << file;
            }
        }
        let overlapped = self.overlapped.get(file).copied().unwrap_or(0);
        if let Some(s) = self.span.get_mut(file) {
            s.0 = s.0.min(ts_ns);
            s.1 = s.1.max(ts_ns);
        }
        let flow = FlowKey::of(p);
        *self.carried.entry(flow).or_default() |= 1 << file;
        let input = SeqInput::of(p);
        let key = SightKey {
            flow,
            psn: input.psn,
            opcode: input.opcode,
            syndrome: input.aeth_syndrome,
        };
        // A request's PSN behind the newest this point saw of the flow's requests is sent
        // again: it is another point's packet only if that one was sent again too (a resend
        // seen at both), not the original (a resend the files share out, as the links of a
        // sprayed flow do). (Answers travel in another PSN space, the peer's.)
        let request = Request::of(&input, input.class()).is_some();
        let mut behind = false;
        if request {
            let newest = self
                .newest
                .entry((flow, point))
                .or_insert((input.psn, ts_ns));
            behind = observer_common::seq::psn_after(newest.0, input.psn)
                && ts_ns.saturating_sub(newest.1) <= SIGHT_WINDOW_NS;
            if !behind {
                *newest = (input.psn, ts_ns);
            }
        }
        // Answers (ACKs) repeat their PSN often: they go to another point's only once a
        // request (a PSN sent once but to resend it) showed the two points see one traffic.
        // Once two points shared enough requests, a request behind the newest at one of them
        // and not at the other is reordered between them (adaptive routing, spraying), not
        // a resend shared out.
        const NONE: [u32; MAX_POINTS] = [0; MAX_POINTS];
        let shared = self.shared.get(file).unwrap_or(&NONE);
        let shared_with = |other: u8| shared.get(usize::from(other)).copied().unwrap_or(0);
        let trusted = |other: u8| shared_with(other) >= TRUST_REQUESTS;
        let open = self.sightings.entry(key).or_default();
        let candidate = |s: &Sighting| {
            s.seen & (1 << file) == 0
                && overlapped & (1 << s.first) != 0
                && (request || shared_with(s.first) > 0)
                && ts_ns.abs_diff(s.ts_ns) <= SIGHT_WINDOW_NS
        };
        // Sent again at both points first (a resend is not its lost original's), then, between
        // trusted points, one reordered.
        let at = open
            .iter()
            .position(|s| candidate(s) && s.resent == behind)
            .or_else(|| open.iter().position(|s| candidate(s) && trusted(s.first)));
        if let Some(s) = at.and_then(|i| open.get_mut(i)) {
            if request && s.resent == behind {
                let first = usize::from(s.first);
                for (x, y) in [(file, first), (first, file)] {
                    if let Some(n) = self.shared.get_mut(x).and_then(|c| c.get_mut(y)) {
                        *n += 1;
                    }
                }
            }
            s.seen |= 1 << file;
            if ts_ns >= s.last_ts_ns {
                s.last = point;
                s.last_ts_ns = ts_ns;
            }
            let (lo, hi, d) = if s.first < point {
                (s.first, point, ts_ns.wrapping_sub(s.ts_ns) as i64)
            } else {
                (point, s.first, s.ts_ns.wrapping_sub(ts_ns) as i64)
            };
            let c = self
                .crossings
                .entry((lo, hi, flow.src_ip, flow.dst_ip))
                .or_default();
            if c.samples.len() < MAX_SAMPLES {
                c.samples.push(d);
            } else {
                c.more += 1;
            }
            return true;
        }
        open.push_back(Sighting {
            resent: behind,
            request,
            ts_ns,
            first: point,
            seen: 1 << file,
            last: point,
            last_ts_ns: ts_ns,
        });
        self.order.push_back((ts_ns, key));
        false
    }

    /// The latency of each requester direction, from one point: the requester's own (its
    /// round trips), else the responder's (its answer times), else the first that timed it
    /// (files of one host in the same role together: rotated files of one point). A point's host is the one address every connected flow of its file has at an end.
    pub fn latency(&self) -> LatencyMap {
        let hosts: Vec<Vec<[u8; 16]>> = self
            .views
            .iter()
            .map(|v| v.capture_host(&mut Vec::new()))
            .collect();
        // Per requester direction, the best rank any point has for it, then the states of
        // the points of that rank together (rotated files of one point).
        let rank = |i: usize, k: &LatKey, state: &LatState| -> (bool, u8) {
            let timed = state.hist.iter().any(|h| h.count > 0);
            let r = if hosts[i].contains(&k.requester) {
                0
            } else if hosts[i].contains(&k.responder) {
                1
            } else {
                2
            };
            (!timed, r)
        };
        let mut best: BTreeMap<LatKey, (bool, u8)> = BTreeMap::new();
        for (i, v) in self.views.iter().enumerate() {
            for (k, state) in &v.latency {
                let r = rank(i, k, state);
                let b = best.entry(*k).or_insert(r);
                *b = (*b).min(r);
            }
        }
        let mut chosen: BTreeMap<LatKey, (u8, LatState)> = BTreeMap::new();
        for (i, v) in self.views.iter().enumerate() {
            for (k, state) in &v.latency {
                let r = rank(i, k, state);
                if best.get(k) != Some(&r) {
                    continue;
                }
                match chosen.get_mut(k) {
                    // Files of one host in the same role: together. Where no file's host is
                    // known (a capture of two hosts only), the first file's alone: two points'
                    // times are different measurements in different clocks.
                    Some((_, s)) if r.1 < 2 => s.merge(state),
                    Some(_) => {}
                    None => {
                        chosen.insert(*k, (0, *state));
                    }
                }
            }
        }
        chosen.into_iter().map(|(k, (_, s))| (k, s)).collect()
    }

    /// Lets go of the sightings whose window closed before `now_ns`.
    fn expire(&mut self, now_ns: u64) {
        while let Some(&(ts, key)) = self.order.front() {
            if ts.saturating_add(SIGHT_WINDOW_NS) >= now_ns {
                break;
            }
            self.order.pop_front();
            // The oldest open packet of the key is this one (opened in time order).
            let Some(open) = self.sightings.get_mut(&key) else {
                continue;
            };
            let s = open.pop_front();
            if open.is_empty() {
                self.sightings.remove(&key);
            }
            if let Some(s) = s {
                self.settle(&key, &s);
            }
        }
    }

    /// Every file has ended: the sightings still open are settled, and the packets a point
    /// carrying their flow did not see are missing there if it was capturing then (between
    /// its first and last packet).
    pub fn finish(&mut self) {
        let open: Vec<(SightKey, VecDeque<Sighting>)> = self.sightings.drain().collect();
        self.order.clear();
        for (k, list) in open {
            for s in list {
                self.settle(&k, &s);
            }
        }
        for (key, s, i) in std::mem::take(&mut self.absent) {
            let Some(&(from, to)) = self.span.get(usize::from(i)) else {
                continue;
            };
            if from <= s.ts_ns && s.ts_ns <= to {
                let m = self.missing.entry((key.flow, s.last, i)).or_default();
                m.packets += 1;
                if m.psns.len() < 8 {
                    m.psns.push(key.psn);
                }
            }
        }
    }

    /// A packet's sightings are all in: how many points saw it, and the points that carry its
    /// flow and were capturing then but did not see it.
    fn settle(&mut self, key: &SightKey, s: &Sighting) {
        let n = s.seen.count_ones() as usize;
        if let Some(c) = self.seen_at.get_mut(n.saturating_sub(1)) {
            *c += 1;
        }
        // Missing: requests (answers repeat their PSNs), at points that carry the flow and
        // shared requests with the first (points of the same traffic, not shares of it).
        if !s.request {
            return;
        }
        let carried = self.carried.get(&key.flow).copied().unwrap_or(0);
        let shares = self
            .shared
            .get(usize::from(s.first))
            .copied()
            .unwrap_or([0; MAX_POINTS]);
        let mut absent = carried & !s.seen;
        while absent != 0 {
            let i = absent.trailing_zeros() as u8;
            absent &= absent - 1;
            if shares[usize::from(i)] == 0 {
                continue;
            }
            // (Bounded: points that each carry part of a flow, as the links of a sprayed
            // one do, would list every packet.)
            if self.absent.len() < MAX_SAMPLES {
                self.absent.push((*key, *s, i));
            }
        }
    }
}
