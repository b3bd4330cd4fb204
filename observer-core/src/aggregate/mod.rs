//! The one aggregation path: parsed packets to a flow table and global counters. Live capture
//! fills it from the kernel maps, replay and tests from frames; both use the per-flow update of
//! observer-common, so the same frames give the same [`Aggregate`].

use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap};

pub mod connections;
mod observer;
pub(crate) mod pairing;
pub mod sightings;

pub use observer::{FrameObserver, ShardPart, Sharded};

use crate::model::{Flow, MirrorTotals, PfcReport, Report, SCHEMA, Source, Totals, Window};
use crate::units::count;
use observer_common::cm::{CmConn, CmKey, mad_at, read_cm};
use observer_common::latency::role;
use observer_common::{
    Counters, DIRECTION_EGRESS, FlowKey, FlowStats, HostPair, LatHist, LatKey, LatLinkKey,
    LatPeers, LatScopeKey, LatState, MsgStats, OpClass, Parsed, PauseKey, PauseStats, QP_CM,
    RocePacket, SeqClass, SeqInput, SkipReason,
    message::is_boundary,
    parse_frame,
    seq::{F_FRESH, MESSAGE_BITS},
};

/// The flow table: a hash map with a fast non-cryptographic hasher (keys come from packets, and
/// a 40-byte key ordered in a tree cost a fifth of replay time). Reports sort the flows.
pub type FlowMap = HashMap<FlowKey, FlowStats, rustc_hash::FxBuildHasher>;
/// Passive latency per requester direction (the same fast hasher: ACKs look it up).
pub type LatencyMap = HashMap<LatKey, LatState, rustc_hash::FxBuildHasher>;
/// How answers on a port of their own find their requests' latency state: the unanswered
/// requester directions per pair of hosts, and the links found (the kernel's `LAT_PEERS` and
/// `LAT_LINKS`). Working state only: never reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyLinks {
    pub peers: HashMap<LatKey, LatPeers, rustc_hash::FxBuildHasher>,
    pub links: HashMap<LatLinkKey, u16, rustc_hash::FxBuildHasher>,
}

/// Messages per flow (the same fast hasher: message boundaries look it up).
pub type MessageMap = HashMap<FlowKey, MsgStats, rustc_hash::FxBuildHasher>;

/// Flow table, pause table and global counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aggregate {
    pub flows: FlowMap,
    /// The PSN analysis of mirror copies, every mirror session of a flow together (keys with
    /// [`MIRROR_UNION`](observer_common::MIRROR_UNION)); the sessions' flows keep the counts.
    pub unions: FlowMap,
    /// When connection-manager traffic (MADs to QP 1) between two hosts was last seen: a PSN
    /// jump after it is a new incarnation of the QP number (the connection was set up again).
    pub cm_seen: HashMap<HostPair, u64, rustc_hash::FxBuildHasher>,
    /// What the connection manager's REQ and REP said of each connection set up while
    /// observed: both QPs, exactly.
    pub cm_conns: BTreeMap<CmKey, CmConn>,
    /// PAUSE / PFC frames per sender (few: switch ports and NICs).
    pub pauses: BTreeMap<PauseKey, PauseStats>,
    pub counters: Counters,
    /// Passive latency per requester direction of a connection: the timed requests in flight
    /// and the histograms of the samples.
    pub latency: LatencyMap,
    /// The same samples per interface (0 in replay), kind and side.
    pub latency_scopes: BTreeMap<LatScopeKey, LatHist>,
    /// How answers on a port of their own find their requests' latency state.
    pub latency_links: LatencyLinks,
    /// Messages per flow, under the key of its PSN analysis (a mirror copy's: every session's
    /// together, [`FlowKey::union`]).
    pub messages: MessageMap,
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
            let Self {
                flows,
                unions,
                cm_seen,
                ..
            } = self;
            if key.dest_qp == QP_CM {
                let t = cm_seen.entry(HostPair::of(&key)).or_insert(ts_ns);
                *t = (*t).max(ts_ns);
                let m = read_cm(frame, mad_at(frame.len()));
                let mut ck = CmKey::default();
                if ck.set(&m, &key) {
                    self.cm_conns.entry(ck).or_default().record(&m);
                }
            }
            // At the same time as the flow's last request counts as after it, as in the kernel,
            // whose clock cannot order the two within one tick.
            let cm_after = |t: u64| cm_seen.get(&HostPair::of(&key)).is_some_and(|c| *c >= t);
            let input = SeqInput::of(p);
            let mut class = SeqClass::NotAnalysed;
            // What the message update reads of the analysis.
            let mut analysis = 0;
            let mut analyse = |s: &mut FlowStats| {
                class = s.seq().packet(&input, ts_ns, cm_after);
                analysis = s.seq_track.flags & MESSAGE_BITS;
            };
            match key.union() {
                None => with_entry(flows, key, |s| {
                    s.count(p, ts_ns);
                    analyse(s);
                }),
                // A mirror copy: counted in its session's flow, analysed with every session's.
                Some(union) => {
                    with_entry(flows, key, |s| {
                        s.count(p, ts_ns);
                    });
                    with_entry(unions, union, |s| {
                        s.seen(p, ts_ns);
                        analyse(s);
                    });
                }
            }
            if is_boundary(&input) && analysis & F_FRESH != 0 {
                let analysed = key.union().unwrap_or(key);
                message_update(&mut self.messages, &analysed, &input, analysis);
            }
            let copies = key.is_copy();
            latency_update(
                &mut self.latency,
                &mut self.latency_links,
                &mut self.latency_scopes,
                &key,
                &input,
                class,
                copies,
                0,
                ts_ns,
            );
        }
        result
    }

    /// Adds a partial view of one flow (a per-CPU value read from the kernel).
    pub fn merge_flow(&mut self, key: FlowKey, stats: &FlowStats) {
        if stats.packets == 0 {
            return;
        }
        let map = if key.is_union() {
            &mut self.unions
        } else {
            &mut self.flows
        };
        map.entry(key).or_default().merge(stats);
    }

    /// Adds the latency state of one requester direction read from the kernel (one shared
    /// value per key there).
    pub fn merge_latency(&mut self, key: LatKey, state: &LatState) {
        self.latency.entry(key).or_default().merge(state);
    }

    /// Adds the messages of one flow read from the kernel (one shared value per key there).
    pub fn merge_messages(&mut self, key: FlowKey, stats: &MsgStats) {
        self.messages.entry(key).or_default().merge(stats);
    }

    /// Adds a partial view of one per-interface latency histogram (a per-CPU value).
    pub fn merge_latency_scope(&mut self, key: LatScopeKey, hist: &LatHist) {
        if hist.count > 0 {
            self.latency_scopes.entry(key).or_default().merge(hist);
        }
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
        for (key, stats) in other.flows.iter().chain(&other.unions) {
            self.merge_flow(*key, stats);
        }
        for (pair, t) in &other.cm_seen {
            let mine = self.cm_seen.entry(*pair).or_insert(*t);
            *mine = (*mine).max(*t);
        }
        for (key, stats) in &other.pauses {
            self.merge_pause(*key, stats);
        }
        for (key, conn) in &other.cm_conns {
            self.cm_conns.entry(*key).or_default().merge(conn);
        }
        for (key, state) in &other.latency {
            self.merge_latency(*key, state);
        }
        for (key, hist) in &other.latency_scopes {
            self.merge_latency_scope(*key, hist);
        }
        for (key, stats) in &other.messages {
            self.merge_messages(*key, stats);
        }
    }

    /// Takes in the aggregate of another shard of the same frames, dealt out by their pair of
    /// hosts (replay over several threads): its flows, hosts, requester directions and
    /// messages are none of this one's and move in as they are; counters, PAUSE senders and
    /// the per-interface latency histograms add up.
    pub fn absorb(&mut self, other: Aggregate) {
        use std::collections::{btree_map, hash_map};
        fn move_in<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
            into: &mut HashMap<K, V, S>,
            from: impl IntoIterator<Item = (K, V)>,
            merge: impl Fn(&mut V, &V),
        ) {
            for (k, v) in from {
                match into.entry(k) {
                    hash_map::Entry::Vacant(e) => {
                        e.insert(v);
                    }
                    hash_map::Entry::Occupied(mut e) => merge(e.get_mut(), &v),
                }
            }
        }
        fn add_in<K: Ord, V>(
            into: &mut BTreeMap<K, V>,
            from: BTreeMap<K, V>,
            merge: impl Fn(&mut V, &V),
        ) {
            for (k, v) in from {
                match into.entry(k) {
                    btree_map::Entry::Vacant(e) => {
                        e.insert(v);
                    }
                    btree_map::Entry::Occupied(mut e) => merge(e.get_mut(), &v),
                }
            }
        }
        self.counters.merge(&other.counters);
        move_in(&mut self.flows, other.flows, FlowStats::merge);
        move_in(&mut self.unions, other.unions, FlowStats::merge);
        move_in(&mut self.cm_seen, other.cm_seen, |a, b| *a = (*a).max(*b));
        move_in(&mut self.latency, other.latency, LatState::merge);
        move_in(
            &mut self.latency_links.peers,
            other.latency_links.peers,
            |_, _| {},
        );
        move_in(
            &mut self.latency_links.links,
            other.latency_links.links,
            |_, _| {},
        );
        move_in(&mut self.messages, other.messages, MsgStats::merge);
        add_in(&mut self.pauses, other.pauses, PauseStats::merge);
        add_in(&mut self.cm_conns, other.cm_conns, CmConn::merge);
        add_in(
            &mut self.latency_scopes,
            other.latency_scopes,
            LatHist::merge,
        );
    }

    /// The same aggregate with the fields that depend on when and in which order packets were
    /// seen (timestamps, PSN continuation state) cleared: what ground truth can be compared to.
    pub fn comparable(&self) -> Aggregate {
        let flows = self.flows.iter().map(|(k, s)| (*k, s.timeless())).collect();
        let unions = self
            .unions
            .iter()
            .map(|(k, s)| (*k, s.timeless()))
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
            unions,
            cm_seen: Default::default(),
            cm_conns: self.cm_conns.clone(),
            pauses,
            counters: self.counters,
            // Latency samples depend on the clock: compared apart (`latency_counts`).
            latency: Default::default(),
            latency_scopes: BTreeMap::new(),
            latency_links: Default::default(),
            messages: self
                .messages
                .iter()
                .map(|(k, m)| (*k, m.counts()))
                .filter(|(_, m)| *m != MsgStats::default())
                .collect(),
        }
    }

    /// Per requester direction, the samples of each kind and the skipped ACKs: what kernel and
    /// replay agree on whatever their clocks.
    pub fn latency_counts(&self) -> BTreeMap<LatKey, [u64; 3]> {
        self.latency
            .iter()
            .map(|(k, s)| (*k, [s.hist[0].count, s.hist[1].count, u64::from(s.skipped)]))
            .filter(|(_, c)| c.iter().any(|n| *n > 0))
            .collect()
    }
}

/// The message update of a boundary packet seen for the first time (`key`: its PSN
/// analysis's entry, `analysis` that analysis's flags after it), the same the kernel program
/// makes.
#[inline]
pub fn message_update(messages: &mut MessageMap, key: &FlowKey, input: &SeqInput, analysis: u32) {
    let stats = messages.entry(*key).or_default();
    if let Some((kind, size)) = stats.packet(input, analysis) {
        stats.record(kind, size);
    }
}

/// The passive latency update of one packet (`class`: its PSN analysis's; `copies`: the
/// observation is mirror copies), the same the kernel program makes.
#[allow(clippy::too_many_arguments)]
#[inline]
pub fn latency_update(
    latency: &mut LatencyMap,
    links: &mut LatencyLinks,
    scopes: &mut BTreeMap<LatScopeKey, LatHist>,
    key: &FlowKey,
    input: &SeqInput,
    class: SeqClass,
    copies: bool,
    ifindex: u32,
    ts_ns: u64,
) {
    match role(input, class) {
        None => {}
        Some(false) => {
            let lk = LatKey::of_request(key);
            let state = latency.entry(lk).or_default();
            state.note_direction(key);
            state.request(input, key.dest_qp, class, copies, ts_ns);
            if state.answered == 0 {
                let pair = LatKey {
                    udp_src_port: 0,
                    ..lk
                };
                let peers = links.peers.entry(pair).or_default();
                peers.note(lk.udp_src_port, input.psn, ts_ns);
            }
        }
        Some(true) => latency_answer(latency, links, scopes, key, input, ifindex, ts_ns),
    }
}

fn latency_answer(
    latency: &mut LatencyMap,
    links: &mut LatencyLinks,
    scopes: &mut BTreeMap<LatScopeKey, LatHist>,
    key: &FlowKey,
    input: &SeqInput,
    ifindex: u32,
    ts_ns: u64,
) {
    let mut lk = LatKey::of_answer(key);
    if !latency.get(&lk).is_some_and(|s| s.fits(input.psn)) {
        // No requests under the answers' port that it can answer: the directions use ports of
        // their own (and another connection's requests may use this one's answer port). The
        // link found before, while its requests can be the ones answered; else the only
        // unanswered direction the answer fits (the first answer, or the requests moved to
        // another port), linked from now on.
        let mut link = LatLinkKey::default();
        link.set(&lk, key);
        // (Port 0, never a RoCE source port, is no link: as in the kernel.)
        let linked = links.links.get(&link).copied().filter(|port| {
            let at = LatKey {
                udp_src_port: *port,
                ..lk
            };
            *port != 0 && latency.get(&at).is_some_and(|s| s.fits(input.psn))
        });
        let port = match linked {
            Some(port) => port,
            None => {
                lk.udp_src_port = 0;
                let Some(port) = links.peers.get_mut(&lk).and_then(|peers| {
                    let port = peers.fit(input.psn, ts_ns)?;
                    peers.forget(port);
                    Some(port)
                }) else {
                    return;
                };
                links.links.insert(link, port);
                port
            }
        };
        lk.udp_src_port = port;
    }
    let Some(state) = latency.get_mut(&lk) else {
        return;
    };
    if state.answered == 0 {
        state.answered = 1;
        // Answered under its own port: its requests leave the unanswered ones.
        let port = lk.udp_src_port;
        let pair = LatKey {
            udp_src_port: 0,
            ..lk
        };
        if let Some(peers) = links.peers.get_mut(&pair) {
            peers.forget(port);
        }
    }
    if let Some((kind, ns)) = state.answer(input, ts_ns) {
        state.record(kind, ns);
        let scope = LatScopeKey {
            ifindex,
            kind: kind as u8,
            side: state.side(&lk) as u8,
            _pad: 0,
        };
        scopes.entry(scope).or_default().record(ns);
    }
}

/// What a flow's reverse direction says of it: the answers (packets per operation), the path
/// MTU it learned, and the PSN state of the flow that answered last (a direction seen on
/// several ports is taken together).
struct Reverse {
    ops: [u64; OpClass::COUNT],
    pmtu_mask: u32,
    track: observer_common::SeqTrack,
}

impl Reverse {
    fn of(
        rows: &[(&FlowKey, &FlowStats)],
        ops_of: impl Fn(&FlowKey, &FlowStats) -> [u64; OpClass::COUNT],
    ) -> Self {
        let mut r = Reverse {
            ops: [0; OpClass::COUNT],
            pmtu_mask: 0,
            track: observer_common::SeqTrack::default(),
        };
        let mut newest = None;
        for (k, s) in rows {
            for (a, b) in r.ops.iter_mut().zip(ops_of(k, s)) {
                *a += b;
            }
            r.pmtu_mask |= s.seq.pmtu_mask;
            let at = (s.seq_track.flags & observer_common::seq::F_RESP != 0)
                .then_some(s.seq_track.resp_ns);
            if newest.is_none() || at > newest.flatten() {
                newest = Some(at);
                r.track = s.seq_track;
            }
        }
        r
    }
}

/// The longest RNR NAK timer (the IBTA's encoding 0: 655.36 ms).
const RNR_TIMER_MAX_NS: u64 = 655_360_000;

/// Applies `f` to the entry of `key`, made when missing. A probe first: `entry` moves the key in
/// and builds an entry on every packet.
#[inline]
fn with_entry(map: &mut FlowMap, key: FlowKey, f: impl FnOnce(&mut FlowStats)) {
    match map.get_mut(&key) {
        Some(stats) => f(stats),
        None => f(map.entry(key).or_default()),
    }
}

impl Aggregate {
    /// The flows of the report, each joined to its reverse direction (the other way of its
    /// connection as `pairing` found it, or for a flow the pairing does not consider, the one
    /// flow back on its port): the path MTU either direction learned, responses checked
    /// against the requests they answer, requests left unanswered, RNR retries.
    fn linked_flows(
        &self,
        window_seconds: f64,
        pairing: &pairing::Pairing,
    ) -> Vec<(FlowKey, Flow)> {
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
        // The flows by tuple, made when first wanted: only for a flow the pairing did not
        // consider (UD, CNPs alone), which most intervals of a sidecar have none of.
        let by_tuple: std::cell::OnceCell<FxHashMap<Tuple, Vec<&FlowKey>>> =
            std::cell::OnceCell::new();
        let by_tuple = || {
            by_tuple.get_or_init(|| {
                let mut m: FxHashMap<Tuple, Vec<&FlowKey>> = FxHashMap::default();
                for k in self.all().map(|(k, _)| k).filter(|k| k.dest_qp != 1) {
                    m.entry(tuple(k)).or_default().push(k);
                }
                m
            })
        };
        // The observation's end: the newest request or response of any flow, on the clock the
        // analysis keeps its times on (live, the kernel's; replay, the capture's).
        let end = self
            .all()
            .map(|(_, s)| s.seq_track.req_ns.max(s.seq_track.resp_ns))
            .max()
            .unwrap_or(0);
        // The packets per operation of an entry: the analysis of mirror sessions together
        // counts none of its own, its sessions' flows have them.
        let mut union_ops: FxHashMap<FlowKey, [u64; OpClass::COUNT]> = FxHashMap::default();
        // The mirror sessions that saw each flow.
        let mut views: FxHashMap<FlowKey, u32> = FxHashMap::default();
        for (k, s) in &self.flows {
            if let Some(u) = k.union() {
                *views.entry(u).or_default() += 1;
                let ops = union_ops.entry(u).or_default();
                for (a, b) in ops.iter_mut().zip(s.ops) {
                    *a += b;
                }
            }
        }
        let ops_of = |k: &FlowKey, s: &FlowStats| -> [u64; OpClass::COUNT] {
            if k.is_union() {
                union_ops.get(k).copied().unwrap_or_default()
            } else {
                s.ops
            }
        };
        // The reverse direction: the one flow back, or (host mode sees a connection both
        // leave and arrive) the one flow back in the other direction of the host.
        let reverse_by_port = |k: &FlowKey| -> Option<(&FlowKey, &FlowStats)> {
            let (src, dst, sport, mirror) = tuple(k);
            let back = by_tuple().get(&(dst, src, sport, mirror))?;
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
                .and_then(|r| Some((r, self.stats(r)?)))
        };
        // A connected flow's reverse is what the pairing found: the other way's flows (over
        // every port it used) in the same observation (direct, one mirror session, or the
        // sessions' union), the other host direction preferred (host mode sees a connection
        // both leave and arrive). A flow the pairing did not consider (UD) takes the one flow
        // back on its port.
        let mut union_member: FxHashMap<FlowKey, FlowKey> = FxHashMap::default();
        for k in pairing.unit_of.keys() {
            if let Some(u) = k.union() {
                union_member.entry(u).or_insert(*k);
            }
        }
        let view = |r: &FlowKey| (r.mirror & !DIRECTION_EGRESS, r.is_union());
        // The flows of one side of `k`'s connection (`own`: `k`'s side) as `k` sees them.
        let side_of = |k: &FlowKey, own: bool| -> Option<Vec<FlowKey>> {
            let member = if k.is_union() {
                *union_member.get(k)?
            } else {
                *k
            };
            let rows = if own {
                pairing.same_side(&member)?
            } else {
                pairing.reverse(&member)?
            };
            let mut rows: Vec<FlowKey> = rows
                .iter()
                .map(|r| {
                    if k.is_union() {
                        r.union().unwrap_or(*r)
                    } else {
                        *r
                    }
                })
                .filter(|r| view(r) == view(k))
                .collect();
            rows.sort();
            rows.dedup();
            if !own && rows.iter().any(|r| r.is_egress() != k.is_egress()) {
                rows.retain(|r| r.is_egress() != k.is_egress());
            }
            if own {
                rows.retain(|r| r.is_egress() == k.is_egress());
            }
            Some(rows)
        };
        // The PSN state of the flow among `rows` that sent a request last (several flows when
        // the connection moved ports).
        let last_sender = |rows: &[FlowKey]| -> Option<&observer_common::SeqTrack> {
            rows.iter()
                .filter_map(|r| self.stats(r))
                .filter(|s| s.seq_track.flags & F_VALID != 0)
                .map(|s| &s.seq_track)
                .max_by_key(|t| t.req_ns)
        };
        // The next PSN a direction expects.
        let newest_sent =
            |k: &FlowKey| -> Option<u32> { Some(last_sender(&side_of(k, true)?)?.next_hi) };
        let reverse = |k: &FlowKey| -> Option<Reverse> {
            let Some(keys) = side_of(k, false) else {
                let (rk, r) = reverse_by_port(k)?;
                return Some(Reverse::of(&[(rk, r)], |k, s| ops_of(k, s)));
            };
            let rows: Vec<(&FlowKey, &FlowStats)> = keys
                .iter()
                .filter_map(|r| Some((r, self.stats(r)?)))
                .collect();
            (!rows.is_empty()).then(|| Reverse::of(&rows, |k, s| ops_of(k, s)))
        };
        let mut flows: Vec<(FlowKey, Flow)> = self
            .all()
            .map(|(k, s)| {
                let mut f = Flow::new(k, s, window_seconds);
                let Some(r) = reverse(k) else {
                    return (*k, f);
                };
                let r_ops = r.ops;
                let pmtu = pmtu_of(s.seq.pmtu_mask | r.pmtu_mask);
                f.psn = f.psn.with_pmtu(s, pmtu);
                // A sender goes back only after a NAK or a timeout. Where the observation
                // copies packets (two taps, a switch mirroring a packet twice) and the flow's
                // responses are in view, the runs of PSNs seen before that neither a NAK nor a
                // wait explains are copies lagging behind, not resends: their share of the
                // resent PSNs moves to the duplicates.
                let op = |o: OpClass| r_ops[o as usize];
                let responses = op(OpClass::Ack)
                    + op(OpClass::Nak)
                    + op(OpClass::RnrNak)
                    + op(OpClass::ReadResponse)
                    + op(OpClass::AtomicAck);
                let episodes = f.psn.retransmission_episodes;
                let unexplained = episodes
                    .saturating_sub(u64::from(s.seq.retx_waited))
                    .saturating_sub(op(OpClass::Nak) + op(OpClass::RnrNak));
                // Copies in evidence: two mirror sessions saw the flow, or some copies came
                // right behind their originals (one tap mirroring a packet twice).
                let copied = views.get(k).is_some_and(|v| *v > 1) || s.seq.duplicates > 0;
                if copied && responses > 0 && unexplained > 0 {
                    let copies = (u128::from(f.psn.retransmissions) * u128::from(unexplained)
                        / u128::from(episodes)) as u64;
                    f.psn.duplicates += copies;
                    f.psn.retransmissions -= copies;
                    f.psn.retransmission_episodes -= unexplained;
                    if f.psn.retransmission_episodes == 0 {
                        f.psn.longest_resend_wait = None;
                    }
                }
                // A PSN sent again after an RNR NAK waited out the RNR timer: if the wait was
                // shorter than the analysis can tell from a copy, the resend is no duplicate.
                // RNR NAKs not already answered by a resend after a wait.
                let rnr = r_ops[OpClass::RnrNak as usize]
                    .saturating_sub(f.psn.retransmission_episodes)
                    .min(f.psn.duplicates);
                f.psn.duplicates -= rnr;
                // A wait before a resend after RNR NAKs is the receiver's RNR timer (at most
                // 655.36 ms), not a stalled fabric: not kept as one. A longer wait is no RNR
                // timer.
                if r_ops[OpClass::RnrNak as usize] > 0
                    && f.psn
                        .longest_resend_wait
                        .is_some_and(|w| w.for_ns <= RNR_TIMER_MAX_NS)
                {
                    f.psn.longest_resend_wait = None;
                }
                f.psn.retransmissions += rnr;
                f.psn.retransmission_episodes += rnr;
                let (t, rt) = (&s.seq_track, &r.track);
                if t.flags & F_ACKREQ != 0 && end > t.ackreq_ns {
                    // The newest request of the direction: a connection moved to another
                    // port sent its later requests there.
                    let newest = newest_sent(k).unwrap_or(t.next_hi);
                    let answered = rt.flags & F_RESP != 0
                        && !psn_after(t.ackreq_psn, rt.resp_psn)
                        && !psn_after(rt.resp_psn, psn_sub(newest, 1))
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
        // The requests are the reverse's flows (as for `reverse`), of which the one that sent
        // last.
        let sent_hi = |k: &FlowKey| -> Option<(u32, u32)> {
            let back: Vec<FlowKey> = match side_of(k, false) {
                Some(rows) => rows,
                None => vec![*reverse_by_port(k)?.0],
            };
            let t = last_sender(&back)?;
            Some((t.top, psn_sub(t.next_hi, 1)))
        };
        for (k, f) in &mut flows {
            let Some(s) = self.stats(k) else { continue };
            let t = &s.seq_track;
            if t.flags & F_RESP == 0 {
                continue;
            }
            if let Some((top, hi)) = sent_hi(k)
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
        flows
    }

    /// Every entry: the flows, then the PSN analyses of mirror sessions together.
    fn all(&self) -> impl Iterator<Item = (&FlowKey, &FlowStats)> {
        self.flows.iter().chain(&self.unions)
    }

    fn stats(&self, k: &FlowKey) -> Option<&FlowStats> {
        if k.is_union() {
            self.unions.get(k)
        } else {
            self.flows.get(k)
        }
    }

    /// The report of this aggregate: every flow, largest first, and the totals.
    pub fn report(&self, source: Source, window_seconds: f64) -> Report {
        let agg = self;
        let c = &agg.counters;
        // Which flows are one connection: worked out once, for the flows' reverse directions
        // and the connections.
        let pairing = agg.pairing();
        let mut rows = agg.linked_flows(window_seconds, &pairing);
        // The unions out, the rows left in place (few or none move).
        let unions: Vec<(FlowKey, Flow)> = rows.extract_if(.., |(k, _)| k.is_union()).collect();
        sort_large(&mut rows, |(k, f)| {
            (
                std::cmp::Reverse(f.bytes),
                std::cmp::Reverse(f.packets),
                f.src_ip,
                f.dst_ip,
                f.dest_qp,
                f.udp_src_port,
                f.direction,
                k.mirror,
            )
        });
        // A mirror copy's PSNs are analysed with its flow's copies in every session: that
        // analysis goes to the first of the flow's rows (the most bytes), once.
        let unions: HashMap<FlowKey, crate::model::Psn> =
            unions.into_iter().map(|(k, f)| (k, f.psn)).collect();
        let mut views: HashMap<FlowKey, u32> = HashMap::new();
        for u in rows.iter().filter_map(|(k, _)| k.union()) {
            *views.entry(u).or_default() += 1;
        }
        let mut told = std::collections::HashSet::new();
        for (k, f) in &mut rows {
            let Some(u) = k.union() else { continue };
            let here = told.insert(u);
            f.psn = match unions.get(&u) {
                Some(psn) if here => *psn,
                _ => crate::model::Psn::default(),
            };
            let mirror_views = views.get(&u).copied().unwrap_or(1);
            if mirror_views > 1 {
                f.psn_scope = Some(crate::model::PsnScope { mirror_views, here });
            }
        }
        mark_sprayed(&mut rows);
        let (connections, other_traffic) = agg.connections(&rows, &pairing);
        let flows: Vec<Flow> = rows.into_iter().map(|(_, f)| f).collect();
        let mut psn = crate::model::Psn::default();
        for f in &flows {
            psn.add(&f.psn);
        }
        Report {
            schema: SCHEMA.to_string(),
            notice: if source.kind == "nic" {
                Some("the NIC side alone: nothing attached, the wire not observed".to_string())
            } else {
                (c.roce_packets == 0).then(|| {
                    format!(
                        "no RoCEv2 packet in {}: nothing below is about RoCE",
                        count(c.frames, "frame")
                    )
                })
            },
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
                capture: None,
                spread_dropped: c.spread_dropped,
                interface_missed: 0,
            },
            flows,
            connections,
            other_traffic,
            latency: agg.latency_scopes(),
            pfc: PfcReport::new(&agg.pauses),
            ecmp: None,
            series: None,
            microbursts: None,
            jobs: None,
            findings: Vec::new(),
            checks: Vec::new(),
            nic: None,
            points: None,
        }
    }
}

/// Sorts `items` (stably) by `key`: their keys are sorted with their indices (side by side,
/// not compared through the items), then each item is moved once into its place. A sort
/// moves its elements many times, and a report's flows and connections are hundreds of bytes
/// each.
pub(crate) fn sort_large<T, K: Ord>(items: &mut Vec<T>, key: impl Fn(&T) -> K) {
    let mut keyed: Vec<(K, usize)> = items.iter().map(&key).zip(0..).collect();
    // The index makes every key distinct, and the unstable sort stable.
    keyed.sort_unstable();
    let order: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
    if order.iter().enumerate().all(|(i, &j)| i == j) {
        return;
    }
    // Each item moved once, into its place in a new vector: the safe ways (an Option per
    // item, or swaps along the permutation's cycles) move each two or three times.
    let mut sorted = Vec::with_capacity(items.len());
    // SAFETY: `order` is a permutation of the indices (sorted from `0..len`), so each item is
    // read exactly once; the old vector's length is set to 0 first, so it drops none of them
    // (nothing between can panic: the sort is done, and `sorted` has the room).
    unsafe {
        let from = items.as_ptr();
        items.set_len(0);
        for i in order {
            sorted.push(std::ptr::read(from.add(i)));
        }
    }
    *items = sorted;
}

/// Marks the flows of directions (sender, receiver, QP, observation) seen on several UDP source
/// ports in turn: two of its ports' flows overlap in time (per-packet spraying, or flowlets that
/// come back to a port). Each port's PSN analysis holds only its share of the PSNs, so its holes
/// are the other ports' packets ([`crate::model::Psn::sprayed`]). Flowlets that move on to new
/// ports (one after the other in time) are followed whole and stay unmarked.
fn mark_sprayed(rows: &mut [(FlowKey, Flow)]) {
    // Each port's span per direction (its mirror sessions' rows together), sorted by direction
    // and port: a sort of the flows, not a map per direction.
    let mut spans: Vec<(pairing::Dir, u16, u64, u64)> = rows
        .iter()
        .filter(|(k, f)| f.packets > 0 && k.dest_qp != QP_CM)
        .map(|(k, f)| {
            (
                pairing::dir_of(k),
                k.udp_src_port,
                f.first_seen_ns,
                f.last_seen_ns,
            )
        })
        .collect();
    spans.sort_unstable_by_key(|s| (s.0, s.1));
    let mut sprayed: FxHashMap<pairing::Dir, u64> = FxHashMap::default();
    for dir in spans.chunk_by(|a, b| a.0 == b.0) {
        if dir.iter().all(|s| s.1 == dir[0].1) {
            // One port: followed whole.
            continue;
        }
        let ports: Vec<(u64, u64)> = dir
            .chunk_by(|a, b| a.1 == b.1)
            .map(|port| {
                port.iter()
                    .fold((u64::MAX, 0), |(f, l), s| (f.min(s.2), l.max(s.3)))
            })
            .collect();
        let overlap = ports
            .iter()
            .enumerate()
            .any(|(i, a)| ports[i + 1..].iter().any(|b| a.0 < b.1 && b.0 < a.1));
        if overlap {
            sprayed.insert(dir[0].0, ports.len() as u64);
        }
    }
    if sprayed.is_empty() {
        return;
    }
    for (k, f) in rows.iter_mut() {
        if let Some(n) = sprayed.get(&pairing::dir_of(k)) {
            f.psn.sprayed = *n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sort_large;

    #[test]
    fn sort_large_sorts_stably_and_keeps_every_item_once() {
        // Items that own memory: an item read twice or dropped twice would show (a double
        // free aborts), one lost would be missing.
        let mut items: Vec<(u32, String)> = [5, 1, 4, 1, 3, 5, 0]
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, format!("item {i}")))
            .collect();
        sort_large(&mut items, |a| a.0);
        let got: Vec<(u32, &str)> = items.iter().map(|(k, s)| (*k, s.as_str())).collect();
        assert_eq!(
            got,
            [
                (0, "item 6"),
                (1, "item 1"),
                (1, "item 3"),
                (3, "item 4"),
                (4, "item 2"),
                (5, "item 0"),
                (5, "item 5"),
            ]
        );
        // Already in order, and empty.
        sort_large(&mut items, |a| a.0);
        assert_eq!(items.len(), 7);
        let mut none: Vec<String> = Vec::new();
        sort_large(&mut none, |a| a.clone());
        assert!(none.is_empty());
    }
}
