//! Pairing: which directions are the two halves of one connection, decided without assuming
//! that both use one UDP source port. Real NICs differ: mlx5 and the drivers since the 2022
//! "make the source UDP port vary" series derive one port from both QPNs (the same both ways);
//! older Soft-RoCE, irdma and hns drivers take it from the sender's own QPN or a per-QP
//! context, applications set a flow label per side, and NICs or load balancers that re-spray
//! move a connection to other ports mid-way. So a direction is the sender, the receiver, the
//! receiver's QP and the observation, over every port it used, and two directions pair on the
//! evidence, strongest first:
//!
//! 1. **port**: the only direction each way of the two hosts on a UDP source port (today's
//!    drivers' rule, and one port both ways in general);
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
pub(crate) const CONNECTED: u32 = RC | UC | XRC;

/// One direction of a connection: sender, receiver, the receiver's QP (the destination QP),
/// and the observation (0 direct, [`MIRROR_UNION`] every mirror session together). Its flows
/// are every UDP source port, mirror session and host direction it was seen on.
pub(crate) type Dir = ([u8; 16], [u8; 16], u32, u16);

/// The direction of flow `k`.
pub(crate) fn dir_of(k: &FlowKey) -> Dir {
    let scope = if k.mirror & 0x8000 != 0 {
        MIRROR_UNION
    } else {
        0
    };
    (k.src_ip, k.dst_ip, k.dest_qp, scope)
}

/// The evidence two directions were paired on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PairedBy {
    Port,
    Psn,
}

impl PairedBy {
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Port => "port",
            Self::Psn => "psn",
        }
    }
}

/// The pairing of an aggregate's connected directions.
#[derive(Debug, Default)]
pub(crate) struct Pairing {
    /// Each paired direction's reverse, and the evidence.
    pub partner: HashMap<Dir, (Dir, PairedBy)>,
    /// Directions left one-sided because no reverse direction fits them alone: how many
    /// directions are in contention (at least 2: several fit it equally, or its one fit fits
    /// another as well).
    pub ambiguous: HashMap<Dir, usize>,
}

impl Pairing {
    fn join(&mut self, a: Dir, b: Dir, by: PairedBy) {
        self.partner.insert(a, (b, by));
        self.partner.insert(b, (a, by));
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

impl Aggregate {
    /// The flows a pairing considers: those of a connected transport (or CNPs alone), not the
    /// connection manager's; with the analysis entry of each (a mirror copy's is every
    /// session's).
    pub(crate) fn connected_flows(&self) -> impl Iterator<Item = (&FlowKey, &FlowStats)> {
        self.flows.iter().filter(|(k, s)| {
            let mask = s.transport_mask;
            k.dest_qp != QP_CM && (mask & CONNECTED != 0 || mask == CNP)
        })
    }

    /// Pairs the connected directions ([module docs](self)).
    pub(crate) fn pairing(&self) -> Pairing {
        // Each direction's flows.
        let mut dirs: BTreeMap<Dir, Vec<&FlowKey>> = BTreeMap::new();
        for (k, _) in self.connected_flows() {
            dirs.entry(dir_of(k)).or_default().push(k);
        }
        let mut out = Pairing::default();
        // 1. Per two hosts, observation and UDP source port: the directions each way.
        type PortGroup = ([u8; 16], [u8; 16], u16, u16);
        let mut ports: BTreeMap<PortGroup, [BTreeSet<Dir>; 2]> = BTreeMap::new();
        for (d, keys) in &dirs {
            let (src, dst, _, scope) = *d;
            let (lo, hi, way) = if src <= dst {
                (src, dst, 0)
            } else {
                (dst, src, 1)
            };
            for k in keys {
                ports.entry((lo, hi, k.udp_src_port, scope)).or_default()[way].insert(*d);
            }
        }
        let mut by_port: BTreeMap<Dir, BTreeSet<Dir>> = BTreeMap::new();
        for [up, down] in ports.values() {
            if let ([u], [d]) = (
                up.iter().collect::<Vec<_>>().as_slice(),
                down.iter().collect::<Vec<_>>().as_slice(),
            ) {
                by_port.entry(**u).or_default().insert(**d);
                by_port.entry(**d).or_default().insert(**u);
            }
        }
        for (a, partners) in &by_port {
            // A direction whose ports name two different reverse directions pairs on PSNs.
            if let [b] = partners.iter().collect::<Vec<_>>().as_slice()
                && by_port.get(*b).is_some_and(|p| p.len() == 1)
                && a < *b
            {
                out.join(*a, **b, PairedBy::Port);
            }
        }
        // 2. Per two hosts and observation, the directions left: by their PSNs.
        let first_ns = |keys: &[&FlowKey]| {
            keys.iter()
                .filter_map(|k| self.flows.get(k))
                .map(|s| s.first_seen_ns)
                .min()
                .unwrap_or(0)
        };
        let score = |x: &[&FlowKey], y: &[&FlowKey]| -> u8 {
            let (fx, fy) = (first_ns(x), first_ns(y));
            let mut best = 0;
            for kx in x {
                let Some(sx) = self.analysis_of(kx) else {
                    continue;
                };
                for ky in y {
                    let Some(sy) = self.analysis_of(ky) else {
                        continue;
                    };
                    best = best.max(answers(sx, fx, sy)).max(answers(sy, fy, sx));
                }
            }
            best
        };
        type HostPair = ([u8; 16], [u8; 16], u16);
        let mut hosts: BTreeMap<HostPair, [Vec<Dir>; 2]> = BTreeMap::new();
        for d in dirs.keys().filter(|d| !out.partner.contains_key(*d)) {
            let (src, dst, _, scope) = *d;
            if src <= dst {
                hosts.entry((src, dst, scope)).or_default()[0].push(*d);
            } else {
                hosts.entry((dst, src, scope)).or_default()[1].push(*d);
            }
        }
        for [mut up, mut down] in hosts.into_values() {
            if up.is_empty() || down.is_empty() {
                continue;
            }
            let scores: HashMap<(Dir, Dir), u8> = up
                .iter()
                .flat_map(|u| down.iter().map(move |d| (*u, *d)))
                .map(|(u, d)| ((u, d), score(&dirs[&u], &dirs[&d])))
                .filter(|(_, s)| *s > 0)
                .collect();
            let s = |u: &Dir, d: &Dir| scores.get(&(*u, *d)).copied().unwrap_or(0);
            // The strongest fits of `x` among `others`.
            let best = |x: &Dir, others: &[Dir], flip: bool| -> Vec<Dir> {
                let of = |o: &Dir| if flip { s(o, x) } else { s(x, o) };
                let top = others.iter().map(of).max().unwrap_or(0);
                if top == 0 {
                    return Vec::new();
                }
                others.iter().filter(|o| of(o) == top).copied().collect()
            };
            loop {
                let mut joined = None;
                for u in &up {
                    if let [d] = best(u, &down, false).as_slice()
                        && best(d, &up, true).as_slice() == [*u]
                    {
                        joined = Some((*u, *d));
                        break;
                    }
                }
                let Some((u, d)) = joined else { break };
                out.join(u, d, PairedBy::Psn);
                up.retain(|x| *x != u);
                down.retain(|x| *x != d);
            }
            // What is left with a fit had no unique one (a fit it shares counts two).
            for u in &up {
                let n = best(u, &down, false).len();
                if n > 0 {
                    out.ambiguous.insert(*u, n.max(2));
                }
            }
            for d in &down {
                let n = best(d, &up, true).len();
                if n > 0 {
                    out.ambiguous.insert(*d, n.max(2));
                }
            }
        }
        out
    }

    /// The entry holding a flow's PSN analysis (a mirror copy's is every session's).
    pub(crate) fn analysis_of(&self, k: &FlowKey) -> Option<&FlowStats> {
        match k.union() {
            Some(u) => self.unions.get(&u),
            None => self.flows.get(k),
        }
    }
}
