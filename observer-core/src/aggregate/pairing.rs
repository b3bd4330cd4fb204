//! Pairing: which directions are the two halves of one connection, decided without assuming
//! that both use one UDP source port. Real NICs differ: mlx5 and the drivers since the 2022
//! "make the source UDP port vary" series derive one port from both QPNs (the same both ways);
//! older Soft-RoCE, irdma and hns drivers take it from the sender's own QPN or a per-QP
//! context, applications set a flow label per side, and NICs or load balancers that re-spray
//! move a connection to other ports mid-way. So a direction is the sender, the receiver, the
//! receiver's QP and the observation, over every port it used, and two directions pair on the
//! evidence, strongest first:
//!
//! 0. **cm**: the connection manager's REQ and REP, when seen: they name both QPs (and the PSNs
//!    each side starts at), so the directions to them are one connection, exactly;
//! 1. **port**: the only direction each way of the two hosts on a UDP source port (today's
//!    drivers' rule, and one port both ways in general), unless their PSNs show unrelated
//!    ranges or another direction fits strictly better; a direction whose ports name several
//!    partners (a QP number reused with another peer QP) pairs per port. Not where the hosts'
//!    directions have ports of their own: there a shared port is a coincidence;
//! 2. **psn**: one direction's answers (ACK, NAK, READ and atomic responses) follow the other's
//!    requests: the newest answer lies within a sender's reach behind the newest request PSN
//!    and came after the requests began; an answer naming exactly the last request that asked
//!    for one (or the last PSN a READ consumed) is stronger. Two directions pair when each is
//!    the other's only strongest fit; where several fit equally (QPs of one pair of hosts in
//!    lockstep from the same starting PSN, as NCCL's channels are), the directions stay
//!    one-sided and say how many fit: never a guess.
//!
//! Both steps read only what the per-flow analysis keeps (the same in the kernel and in
//! replay), so the same frames pair the same way in every memory.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use observer_common::cm::{CmConn, CmKey};
use observer_common::seq::{F_ACKREQ, F_RESP, F_VALID, MAX_GO_BACK, psn_sub};
use observer_common::{FlowKey, FlowStats, MIRROR_UNION, QP_CM};

use super::Aggregate;

/// `FlowStats::transport_mask` bits of the connected transports (RC, UC, XRC), UD and CNPs.
pub(crate) const RC: u32 = 1;
pub(crate) const UC: u32 = 1 << 1;
pub(crate) const UD: u32 = 1 << 3;
pub(crate) const CNP: u32 = 1 << 4;
pub(crate) const XRC: u32 = 1 << 5;
/// The connected transports: RC, UC and XRC.
pub const CONNECTED: u32 = RC | UC | XRC;

/// One direction of a connection: sender, receiver, the receiver's QP (the destination QP),
/// and the observation (0 direct, [`MIRROR_UNION`] every mirror session together). Its flows
/// are every UDP source port, mirror session and host direction it was seen on.
pub(crate) type Dir = ([u8; 16], [u8; 16], u32, u16);

/// The observation a flow belongs to: direct (either direction of a host), or every mirror
/// session together.
pub(crate) fn scope_of(k: &FlowKey) -> u16 {
    if k.mirror & 0x8000 != 0 {
        MIRROR_UNION
    } else {
        0
    }
}

/// The direction of flow `k`.
pub(crate) fn dir_of(k: &FlowKey) -> Dir {
    (k.src_ip, k.dst_ip, k.dest_qp, scope_of(k))
}

/// The evidence two directions were paired on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PairedBy {
    Cm,
    Port,
    Psn,
}

impl PairedBy {
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Cm => "cm",
            Self::Port => "port",
            Self::Psn => "psn",
        }
    }
}

/// One connection as the pairing found it: the flows (rows) each way, `lo` what the lower
/// address sent; one side empty when it stayed one-sided.
#[derive(Clone, Debug, Default)]
pub(crate) struct Unit {
    pub lo: Vec<FlowKey>,
    pub hi: Vec<FlowKey>,
    pub by: Option<PairedBy>,
    /// One-sided because no reverse direction fits it alone: how many directions were in
    /// contention (at least 2).
    pub ambiguous: Option<usize>,
}

/// The pairing of an aggregate's connected flows: its connections, and each flow's.
#[derive(Debug, Default)]
pub(crate) struct Pairing {
    pub units: Vec<Unit>,
    /// Each connected flow's unit (by index).
    pub unit_of: rustc_hash::FxHashMap<FlowKey, usize>,
}

impl Pairing {
    fn push(&mut self, u: Unit) {
        let i = self.units.len();
        for k in u.lo.iter().chain(&u.hi) {
            self.unit_of.insert(*k, i);
        }
        self.units.push(u);
    }

    /// The flows `k`'s way of its connection (`k` among them); `None` when `k` is no
    /// connected flow.
    pub(crate) fn same_side(&self, k: &FlowKey) -> Option<&[FlowKey]> {
        let u = &self.units[*self.unit_of.get(k)?];
        Some(if u.lo.contains(k) { &u.lo } else { &u.hi })
    }

    /// The flows the other way of `k`'s connection; `None` when `k` is no connected flow (the
    /// pairing did not consider it), empty when its connection is one-sided.
    pub(crate) fn reverse(&self, k: &FlowKey) -> Option<&[FlowKey]> {
        let u = &self.units[*self.unit_of.get(k)?];
        Some(if u.lo.contains(k) { &u.hi } else { &u.lo })
    }
}

/// How well `resp`'s answers follow `req`'s requests: 2 when the newest answer names the last
/// request that asked for one (or the last PSN a READ consumed) and came after it, 1 when it
/// merely lies within a sender's reach behind the newest request and came after the first,
/// 0 otherwise.
fn answers(req: &FlowStats, req_first_ns: u64, resp: &FlowStats) -> u8 {
    let (r, a) = (&req.seq_track, &resp.seq_track);
    if r.flags & F_VALID == 0 || a.flags & F_RESP == 0 || a.resp_ns < req_first_ns {
        return 0;
    }
    let newest = psn_sub(r.next_hi, 1);
    let exact = (r.flags & F_ACKREQ != 0 && a.resp_psn == r.ackreq_psn && a.resp_ns >= r.ackreq_ns)
        || (a.resp_psn == newest && a.resp_ns >= r.req_ns);
    if exact {
        2
    } else if psn_sub(newest, a.resp_psn) < MAX_GO_BACK {
        1
    } else {
        0
    }
}

/// `resp`'s answers and `req`'s requests are of unrelated PSN ranges: the newest answer lies
/// farther from the newest request, either way, than a sender can have in flight. (An answer
/// a little ahead of every request is no proof of another connection: it is the protocol
/// violation of a response to a PSN never sent.)
fn unrelated(req: &FlowStats, resp: &FlowStats) -> bool {
    let (r, a) = (&req.seq_track, &resp.seq_track);
    if r.flags & F_VALID == 0 || a.flags & F_RESP == 0 {
        return false;
    }
    let newest = psn_sub(r.next_hi, 1);
    psn_sub(newest, a.resp_psn) >= MAX_GO_BACK && psn_sub(a.resp_psn, newest) >= MAX_GO_BACK
}

/// What the pairing reads of one side's flows.
struct Summary<'a> {
    stats: Vec<&'a FlowStats>,
    first_ns: u64,
    /// Some flow sent requests; some answered.
    requests: bool,
    answers: bool,
}

/// The PSN evidence between two sides, the opposite ways of two hosts: the best fit
/// ([`answers`], either way), and whether some answers and requests between them are of
/// unrelated ranges with nothing fitting.
fn evidence(x: &Summary, y: &Summary) -> (u8, bool) {
    if !(x.requests && y.answers || y.requests && x.answers) {
        return (0, false);
    }
    let (mut best, mut unrelated_seen) = (0, false);
    for sx in &x.stats {
        for sy in &y.stats {
            best = best
                .max(answers(sx, x.first_ns, sy))
                .max(answers(sy, y.first_ns, sx));
            unrelated_seen |= unrelated(sx, sy) || unrelated(sy, sx);
        }
    }
    (best, unrelated_seen && best == 0)
}

impl Aggregate {
    /// The flows a pairing considers: those of a connected transport (or CNPs alone), not the
    /// connection manager's.
    pub(crate) fn connected_flows(&self) -> impl Iterator<Item = (&FlowKey, &FlowStats)> {
        self.flows.iter().filter(|(k, s)| {
            let mask = s.transport_mask;
            k.dest_qp != QP_CM && (mask & CONNECTED != 0 || mask == CNP)
        })
    }

    /// What the pairing reads of some flows: their PSN analyses and when the first began.
    fn summary(&self, keys: &[FlowKey]) -> Summary<'_> {
        let stats: Vec<&FlowStats> = keys.iter().filter_map(|k| self.analysis_of(k)).collect();
        let flags = stats.iter().fold(0, |f, s| f | s.seq_track.flags);
        Summary {
            stats,
            first_ns: keys
                .iter()
                .filter_map(|k| self.flows.get(k))
                .map(|s| s.first_seen_ns)
                .min()
                .unwrap_or(0),
            requests: flags & F_VALID != 0,
            answers: flags & F_RESP != 0,
        }
    }

    /// The PSN evidence between two sets of flows, the opposite ways of two hosts.
    fn evidence(&self, x: &[FlowKey], y: &[FlowKey]) -> (u8, bool) {
        evidence(&self.summary(x), &self.summary(y))
    }

    /// Pairs the connected flows ([module docs](self)).
    pub(crate) fn pairing(&self) -> Pairing {
        // Each direction's flows: the connected flows sorted by direction (sorts, not maps:
        // this runs on every interval's flows).
        let mut flows: Vec<(Dir, FlowKey)> = self
            .connected_flows()
            .map(|(k, _)| (dir_of(k), *k))
            .collect();
        flows.sort_unstable();
        let mut dirs: Vec<(Dir, Vec<FlowKey>)> = flows
            .chunk_by(|a, b| a.0 == b.0)
            .map(|d| (d[0].0, d.iter().map(|(_, k)| *k).collect()))
            .collect();
        // Per two hosts and observation (lower address first), the directions each way (0:
        // from the lower address), in direction order.
        type HostPair = ([u8; 16], [u8; 16], u16);
        let mut hosts: Vec<(HostPair, usize, usize)> = dirs
            .iter()
            .enumerate()
            .map(|(i, ((src, dst, _, scope), _))| {
                if src <= dst {
                    ((*src, *dst, *scope), 0, i)
                } else {
                    ((*dst, *src, *scope), 1, i)
                }
            })
            .collect();
        hosts.sort_unstable();
        // The connection manager's exchanges complete, per two hosts and observation: looked
        // up per two hosts, not searched.
        let mut exchanges: BTreeMap<HostPair, Vec<(&CmKey, &CmConn)>> = BTreeMap::new();
        for (k, c) in self.cm_conns.iter().filter(|(_, c)| c.complete()) {
            let (lo, hi) = if k.requester <= k.responder {
                (k.requester, k.responder)
            } else {
                (k.responder, k.requester)
            };
            exchanges
                .entry((lo, hi, k.mirror))
                .or_default()
                .push((k, c));
        }
        let mut out = Pairing::default();
        out.unit_of.reserve(flows.len());
        for group in hosts.chunk_by(|a, b| a.0 == b.0) {
            let pair = group[0].0;
            let lo = pair.0;
            // Each direction belongs to one pair of hosts: its flows are moved, not copied.
            let mut take = |i: usize| (dirs[i].0, std::mem::take(&mut dirs[i].1));
            if pair.0 != pair.1 && group.iter().all(|(_, way, _)| *way == group[0].1) {
                // Directions one way only: nothing to pair them with (no step pairs without a
                // direction each way), one-sided and never ambiguous, as step 2 leaves them.
                // (Not a host with itself, whose directions all count one way: its connection
                // manager's exchanges pair them.)
                for (_, way, i) in group {
                    let (_, rows) = take(*i);
                    out.push(if *way == 0 {
                        unit(lo, rows, Vec::new(), None)
                    } else {
                        unit(lo, Vec::new(), rows, None)
                    });
                }
                continue;
            }
            let mut left: BTreeMap<Dir, Vec<FlowKey>> =
                group.iter().map(|(_, _, i)| take(*i)).collect();
            self.pair_by_cm(
                exchanges.get(&pair).map_or(&[], Vec::as_slice),
                &mut left,
                &mut out,
                lo,
            );
            let way = |w: usize| -> Vec<Dir> {
                group
                    .iter()
                    .filter(|(_, way, _)| *way == w)
                    .map(|(_, _, i)| dirs[*i].0)
                    .filter(|d| left.contains_key(d))
                    .collect()
            };
            let (up, down) = (way(0), way(1));
            self.pair_by_port(&up, &down, &mut left, &mut out, lo);
            self.pair_by_psn(&mut left, &mut out, lo);
        }
        out
    }

    /// Step 0, per two hosts: a connection the connection manager set up while observed (its
    /// REQ and REP both seen, `exchanges` those of the two hosts) pairs the direction to the
    /// responder's QP with the one to the requester's, unless another exchange names one of
    /// them too.
    fn pair_by_cm(
        &self,
        exchanges: &[(&CmKey, &CmConn)],
        left: &mut BTreeMap<Dir, Vec<FlowKey>>,
        out: &mut Pairing,
        lo: [u8; 16],
    ) {
        let pairs: Vec<(Dir, Dir)> = exchanges
            .iter()
            .map(|(k, c)| {
                (
                    (k.requester, k.responder, c.rep_qpn, k.mirror),
                    (k.responder, k.requester, c.req_qpn, k.mirror),
                )
            })
            .collect();
        // A direction two exchanges name (a QP number set up again with another peer QP) is
        // left to the port step, which splits it per port.
        let mut claims: BTreeMap<Dir, usize> = BTreeMap::new();
        for (u, d) in &pairs {
            *claims.entry(*u).or_default() += 1;
            *claims.entry(*d).or_default() += 1;
        }
        for (u, d) in pairs {
            if claims[&u] > 1 || claims[&d] > 1 {
                continue;
            }
            let (Some(rx), Some(ry)) = (left.get(&u), left.get(&d)) else {
                continue;
            };
            let (rx, ry) = (rx.clone(), ry.clone());
            left.remove(&u);
            left.remove(&d);
            out.push(unit(lo, rx, ry, Some(PairedBy::Cm)));
        }
    }

    /// Step 1, per two hosts: on each UDP source port the only direction each way pairs, unless
    /// their PSNs show unrelated ranges. A direction whose ports name one partner pairs whole (a
    /// connection that moved ports); one whose ports name several pairs per port (a QP number
    /// reused with another peer QP). Skipped where the hosts' directions have ports of their
    /// own (some direction with requests or answers has no direction back on any of its
    /// ports): there one port both ways is a coincidence, no evidence.
    fn pair_by_port(
        &self,
        up: &[Dir],
        down: &[Dir],
        left: &mut BTreeMap<Dir, Vec<FlowKey>>,
        out: &mut Pairing,
        lo: [u8; 16],
    ) {
        let ports_of =
            |d: &Dir| -> BTreeSet<u16> { left[d].iter().map(|k| k.udp_src_port).collect() };
        // Per port: the directions each way.
        let mut by_port: BTreeMap<u16, [Vec<Dir>; 2]> = BTreeMap::new();
        for (way, side) in [up, down].iter().enumerate() {
            for d in *side {
                for p in ports_of(d) {
                    by_port.entry(p).or_default()[way].push(*d);
                }
            }
        }
        let talks = |d: &Dir| {
            left[d]
                .iter()
                .filter_map(|k| self.analysis_of(k))
                .any(|s| s.seq_track.flags & (F_VALID | F_RESP) != 0)
        };
        // 0: this direction goes up, 1: down; a port's other way is the other index.
        let way_of = |d: &Dir| usize::from(!up.contains(d));
        let own_ports = up.iter().chain(down).any(|d| {
            talks(d)
                && ports_of(d)
                    .iter()
                    .all(|p| by_port[p][1 - way_of(d)].is_empty())
        });
        if own_ports {
            return;
        }
        // The port edges: a port with one direction each way; each direction's partners.
        let mut edges: Vec<(u16, Dir, Dir)> = Vec::new();
        let mut partners: BTreeMap<Dir, BTreeSet<Dir>> = BTreeMap::new();
        for (p, [u, d]) in &by_port {
            if let ([u], [d]) = (u.as_slice(), d.as_slice()) {
                edges.push((*p, *u, *d));
                partners.entry(*u).or_default().insert(*d);
                partners.entry(*d).or_default().insert(*u);
            }
        }
        let single = |d: &Dir| partners.get(d).is_some_and(|p| p.len() == 1);
        let whole: BTreeSet<(Dir, Dir)> = edges
            .iter()
            .filter(|(_, u, d)| single(u) && single(d))
            .map(|(_, u, d)| (*u, *d))
            .collect();
        // A port pair stands unless the PSNs say otherwise: unrelated ranges, or another
        // direction whose answers fit strictly better (only looked for below an exact fit).
        let summaries: HashMap<Dir, Summary> = left
            .iter()
            .map(|(d, rows)| (*d, self.summary(rows)))
            .collect();
        let ev = |u: &Dir, d: &Dir| evidence(&summaries[u], &summaries[d]);
        let fits_better_elsewhere = |u: &Dir, d: &Dir, score: u8| {
            score < 2
                && (down.iter().any(|o| o != d && ev(u, o).0 > score)
                    || up.iter().any(|o| o != u && ev(o, d).0 > score))
        };
        let refused: BTreeSet<(Dir, Dir)> = whole
            .iter()
            .filter(|(u, d)| {
                let (score, unrelated) = ev(u, d);
                unrelated || fits_better_elsewhere(u, d, score)
            })
            .copied()
            .collect();
        for (u, d) in whole {
            if refused.contains(&(u, d)) {
                continue;
            }
            let (x, y) = (left[&u].clone(), left[&d].clone());
            left.remove(&u);
            left.remove(&d);
            out.push(unit(lo, x, y, Some(PairedBy::Port)));
        }
        // A direction whose ports name several partners: per port.
        for (p, u, d) in edges {
            let (Some(xs), Some(ys)) = (left.get(&u), left.get(&d)) else {
                continue;
            };
            let at = |rows: &[FlowKey]| -> Vec<FlowKey> {
                rows.iter()
                    .copied()
                    .filter(|k| k.udp_src_port == p)
                    .collect()
            };
            let (x, y) = (at(xs), at(ys));
            if x.is_empty() || y.is_empty() || self.evidence(&x, &y).1 || refused.contains(&(u, d))
            {
                continue;
            }
            for (dir, rows) in [(u, &x), (d, &y)] {
                if let Some(r) = left.get_mut(&dir) {
                    r.retain(|k| !rows.contains(k));
                    if r.is_empty() {
                        left.remove(&dir);
                    }
                }
            }
            out.push(unit(lo, x, y, Some(PairedBy::Port)));
        }
    }

    /// Step 2, per two hosts: the directions left pair on their PSNs, each the other's only
    /// strongest fit; what is left stays one-sided, saying when it had fits it shared.
    fn pair_by_psn(&self, left: &mut BTreeMap<Dir, Vec<FlowKey>>, out: &mut Pairing, lo: [u8; 16]) {
        let (up, down): (Vec<Dir>, Vec<Dir>) = left.keys().copied().partition(|d| d.0 == lo);
        let summaries: HashMap<Dir, Summary> = left
            .iter()
            .map(|(d, rows)| (*d, self.summary(rows)))
            .collect();
        // The fits (score > 0) of each direction, the other way: few per direction.
        let mut fits: HashMap<Dir, Vec<(Dir, u8)>> = HashMap::new();
        for u in &up {
            for d in &down {
                let score = evidence(&summaries[u], &summaries[d]).0;
                if score > 0 {
                    fits.entry(*u).or_default().push((*d, score));
                    fits.entry(*d).or_default().push((*u, score));
                }
            }
        }
        let mut remaining: BTreeSet<Dir> = left.keys().copied().collect();
        // The strongest fits of `x` among the directions remaining.
        let best = |x: &Dir, remaining: &BTreeSet<Dir>| -> Vec<Dir> {
            let here: Vec<(Dir, u8)> = fits
                .get(x)
                .into_iter()
                .flatten()
                .filter(|(o, _)| remaining.contains(o))
                .copied()
                .collect();
            let top = here.iter().map(|(_, s)| *s).max().unwrap_or(0);
            here.into_iter()
                .filter(|(_, s)| *s == top && top > 0)
                .map(|(o, _)| o)
                .collect()
        };
        // In rounds: every pair each other's only strongest fit joins at once (such pairs are
        // disjoint, and stay such when others leave), then the fits are worked out again
        // among the directions left, until a round joins nothing.
        loop {
            let joined: Vec<(Dir, Dir)> = up
                .iter()
                .filter(|u| remaining.contains(u))
                .filter_map(|u| match best(u, &remaining).as_slice() {
                    [d] if best(d, &remaining).as_slice() == [*u] => Some((*u, *d)),
                    _ => None,
                })
                .collect();
            if joined.is_empty() {
                break;
            }
            for (u, d) in joined {
                remaining.remove(&u);
                remaining.remove(&d);
                let (x, y) = (left.remove(&u).unwrap(), left.remove(&d).unwrap());
                out.push(unit(lo, x, y, Some(PairedBy::Psn)));
            }
        }
        // What is left is one-sided; with a fit it shared, ambiguous.
        for (d, rows) in std::mem::take(left) {
            let n = best(&d, &remaining).len();
            let mut u = if d.0 == lo {
                unit(lo, rows, Vec::new(), None)
            } else {
                unit(lo, Vec::new(), rows, None)
            };
            u.ambiguous = (n > 0).then(|| n.max(2));
            out.push(u);
        }
    }

    /// The entry holding a flow's PSN analysis (a mirror copy's is every session's).
    pub(crate) fn analysis_of(&self, k: &FlowKey) -> Option<&FlowStats> {
        match k.union() {
            Some(u) => self.unions.get(&u),
            None => self.flows.get(k),
        }
    }
}

/// A connection of `x` and `y` (one direction's flows each, or one of them empty), sorted
/// into what the lower address `lo` sent and what the other sent.
fn unit(lo: [u8; 16], x: Vec<FlowKey>, y: Vec<FlowKey>, by: Option<PairedBy>) -> Unit {
    let x_from_lo = match (x.first(), y.first()) {
        (Some(k), _) => k.src_ip == lo,
        (None, Some(k)) => k.src_ip != lo,
        (None, None) => true,
    };
    let (lo_rows, hi_rows) = if x_from_lo { (x, y) } else { (y, x) };
    Unit {
        lo: lo_rows,
        hi: hi_rows,
        by,
        ambiguous: None,
    }
}
