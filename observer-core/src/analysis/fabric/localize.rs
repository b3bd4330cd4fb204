//! Where in the fabric: from many QPs' evidence (loss or CE marks) and the paths they take,
//! the links, switches and hosts that explain it, or an honest "not enough evidence".
//!
//! The method is 007's (NSDI) voting with vote adjustment, with a host screen first:
//! 1. **Hosts.** An endpoint whose QPs degrade on nearly all of them, towards several peers
//!    (so over several paths), is the host or its NIC (its own link included), not a switch:
//!    it is named, and its QPs leave the vote.
//! 2. **Links.** Every bad QP gives each link of its path 1/h of a vote (h its links; a path
//!    of a QP whose path is not known splits its vote among the candidates by their
//!    probability). The link with the most votes is named if enough bad QPs cross it and the
//!    share of the QPs crossing it that are bad stands out from the fabric's; the bad QPs it
//!    explains leave the vote and the votes are counted again, until no link stands out.
//! 3. **Switches.** A switch most of whose loaded links were named is named instead of them.
//!
//! A QP's own host link is on every one of its paths: a fault there is named as its host.

use std::{collections::HashMap, net::IpAddr};

use crate::analysis::ecmp::hash::FlowFields;

use super::{
    paths::{PathSource, Paths, Router},
    topology::{LinkId, NodeId, Role, Topology},
};

/// One QP's evidence over a window, as a host's records give it.
#[derive(Clone, Debug, PartialEq)]
pub struct QpEvidence {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dest_qp: u32,
    pub packets: u64,
    /// Request PSNs lost (or resent).
    pub lost: u64,
    /// Packets that arrived CE-marked.
    pub ce: u64,
    /// CNPs the receiver sent about this direction (it received packets marked CE): the CE
    /// marks told where they themselves were not seen (a sender's host sees the CNPs only).
    pub cnp: u64,
    /// PFC pause frames its source host received in the window (its leaf held all of the
    /// host's traffic of the priority, this QP's with it).
    pub paused: u64,
    /// The ACK latency of this direction's requests in the window against the QP's own
    /// baseline; none when there is no baseline (one window, or too few samples).
    pub ack: Option<AckShift>,
    /// The path a trace found, node by node from `src`'s host to `dst`'s; none when not traced.
    pub path: Option<Vec<String>>,
}

impl QpEvidence {
    /// A QP direction with nothing counted yet.
    pub fn new(src: IpAddr, dst: IpAddr, src_port: u16, dest_qp: u32) -> Self {
        Self {
            src,
            dst,
            src_port,
            dest_qp,
            packets: 0,
            lost: 0,
            ce: 0,
            cnp: 0,
            paused: 0,
            ack: None,
            path: None,
        }
    }
}

/// A QP's ACK latency in one window against its own baseline. An ACK's latency is a round
/// trip: the requests' path and the answers' way back (which a NIC may send from another UDP
/// source port, so over another path), both weighed.
#[derive(Clone, Debug, PartialEq)]
pub struct AckShift {
    /// ACK latency samples in the window, and their median (ns).
    pub samples: u64,
    pub p50_ns: u64,
    /// The QP's own baseline (ns): the lower quartile of its windows' medians.
    pub baseline_ns: u64,
    /// The answers' direction (the peer's UDP source port and this side's QP), when seen.
    pub reverse: Option<(u16, u32)>,
    /// The answers' traced path, node by node from `dst`'s host to `src`'s.
    pub reverse_path: Option<Vec<String>>,
}

/// Which evidence a localization weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Signal {
    Loss,
    /// CE marks, or the CNPs that tell of them.
    Ce,
    /// A shift of ACK latency above each QP's own baseline.
    Latency,
    /// PFC pauses its source host received.
    Pfc,
}

impl Signal {
    /// What a suspect's `bad_qps` and `qps` count: QPs, or for PFC the sending hosts.
    pub const fn units(self) -> &'static str {
        match self {
            Self::Pfc => "sending hosts",
            Self::Loss | Self::Ce | Self::Latency => "QPs",
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::Loss => "loss",
            Self::Ce => "ce",
            Self::Latency => "latency",
            Self::Pfc => "pfc",
        }
    }

    /// Whether `e` says anything of this signal: enough packets (for latency, enough ACK
    /// samples in the window, and a baseline).
    fn weighs(self, e: &QpEvidence, opts: &Options) -> bool {
        match self {
            Self::Loss | Self::Ce | Self::Pfc => e.packets >= opts.min_packets,
            Self::Latency => e.ack.as_ref().is_some_and(|a| a.samples >= opts.min_acks),
        }
    }

    /// `e`'s bad packets: lost, CE-marked (or CNPs where fewer marks were seen), or its ACK
    /// samples when their median rose far enough above its baseline.
    fn count(self, e: &QpEvidence, opts: &Options) -> u64 {
        match self {
            Self::Loss => e.lost,
            Self::Ce => e.ce.max(e.cnp),
            Self::Pfc => e.paused,
            Self::Latency => match &e.ack {
                Some(a)
                    if a.p50_ns as f64 >= opts.latency_ratio * a.baseline_ns as f64
                        && a.p50_ns >= a.baseline_ns.saturating_add(opts.latency_shift_ns) =>
                {
                    a.samples
                }
                _ => 0,
            },
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    /// A QP with fewer packets says nothing.
    pub min_packets: u64,
    /// For latency: a QP with fewer ACK samples in the window says nothing.
    pub min_acks: u64,
    /// For latency: a QP is bad when its window's median ACK latency is at least this many
    /// times its baseline, and at least `latency_shift_ns` above it.
    pub latency_ratio: f64,
    pub latency_shift_ns: u64,
    /// The bad QPs a suspect must explain at least (weighted by their probability of crossing
    /// it).
    pub min_qps: f64,
    /// How many times the share of bad QPs among those not crossing a link the share among
    /// those crossing it must be.
    pub rate_ratio: f64,
    /// The share of a host's QPs that must be bad for the host to be named.
    pub host_share: f64,
    /// For PFC: the share of the hosts sending through a link direction that must have been
    /// paused for it to be named (sustained congestion pauses every source feeding it).
    pub pause_share: f64,
    /// How unlikely a link's bad QPs must be by chance, at the rate of those not crossing it,
    /// over all the fabric's links together (each link's test at this over the links).
    pub significance: f64,
    /// The most suspects named.
    pub max_suspects: usize,
    /// A suspect is placed when the bad QPs it explains cross it with at least this
    /// probability on average (paths known or hashed: 1); the verdict is `found` only when
    /// every suspect is.
    pub placed: f64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            min_packets: 100,
            min_acks: 8,
            latency_ratio: 2.0,
            latency_shift_ns: 5_000,
            min_qps: 3.0,
            rate_ratio: 4.0,
            host_share: 0.8,
            pause_share: 0.9,
            significance: 0.01,
            max_suspects: 8,
            placed: 0.9,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SuspectKind {
    Link,
    Switch,
    Host,
}

impl SuspectKind {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Link => "link",
            Self::Switch => "switch",
            Self::Host => "host",
        }
    }
}

/// A link, switch or host named, with the evidence for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Suspect {
    pub kind: SuspectKind,
    /// A link "a:port - b:port", a switch's or a host's name.
    pub name: String,
    /// The link named, when it is a link or a host's own link.
    pub link: Option<LinkId>,
    pub node: Option<NodeId>,
    /// Its votes when named.
    pub votes: f64,
    /// The bad QPs it explains (each weighted by its probability of crossing it), and those
    /// crossing it in all.
    pub bad_qps: f64,
    pub qps: f64,
    /// The bad QPs' bad packets (lost or CE-marked).
    pub bad_packets: u64,
    /// The share of the QPs crossing it that are bad, and of those that do not (a host's:
    /// the fabric's).
    pub rate: f64,
    pub baseline: f64,
    /// The bad QPs it explains with the most bad packets (at most [`QPS_NAMED`]), each with
    /// its bad packets.
    pub qps_named: Vec<(crate::model::FlowRef, u64)>,
    /// The mean probability that the bad QPs it explains cross it: 1 when their paths are
    /// known or hashed.
    pub placed: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// The suspects explain the evidence.
    Found,
    /// No QP degraded, or the bad ones are spread: nothing stands out.
    Clean(String),
    NotEnoughEvidence(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Localization {
    pub signal: Signal,
    /// QPs weighed (enough packets, both ends placed on the topology), and the bad ones.
    pub qps: usize,
    pub bad_qps: usize,
    /// QPs left out: too few packets; an end on no host of the topology; a traced path that
    /// is not the topology's (then routed as untraced).
    pub too_small: usize,
    pub unplaced: usize,
    pub bad_traces: usize,
    /// QPs weighed by where their path comes from: known, hashed, candidates.
    pub by_source: [usize; 3],
    /// Per link, the QPs crossing it and the bad ones (each by its probability), before any
    /// suspect is named: what a drawing of the fabric shades.
    pub link_load: Vec<(f64, f64)>,
    pub suspects: Vec<Suspect>,
    pub verdict: Verdict,
}

/// The most voted links tried in pairs when none stands out alone.
const PAIR_CANDIDATES: usize = 8;

/// One QP placed on the topology.
struct Placed {
    src: NodeId,
    dst: NodeId,
    paths: Paths,
    bad: u64,
    /// Its QP.
    qp: crate::model::FlowRef,
}

/// The bad QPs a suspect names at most.
pub const QPS_NAMED: usize = 20;

/// The QPs among `qps` (with their bad packets) that bad packets name first, at most
/// [`QPS_NAMED`].
fn name_qps<'a>(qps: impl Iterator<Item = &'a Placed>) -> Vec<(crate::model::FlowRef, u64)> {
    let mut v: Vec<(crate::model::FlowRef, u64)> = qps
        .filter(|q| q.bad > 0)
        .map(|q| (q.qp.clone(), q.bad))
        .collect();
    v.sort_by(|a, b| {
        b.1.cmp(&a.1).then_with(|| {
            (a.0.src_ip, a.0.dst_ip, a.0.udp_src_port).cmp(&(
                b.0.src_ip,
                b.0.dst_ip,
                b.0.udp_src_port,
            ))
        })
    });
    v.truncate(QPS_NAMED);
    v
}

/// Localizes `signal`'s evidence on `topo`.
pub fn localize(
    topo: &Topology,
    evidence: &[QpEvidence],
    signal: Signal,
    opts: &Options,
) -> Localization {
    let mut router = Router::new(topo);
    let mut placed = Vec::with_capacity(evidence.len());
    let (mut too_small, mut unplaced, mut bad_traces) = (0, 0, 0);
    let mut by_source = [0; 3];
    for e in evidence {
        if !signal.weighs(e, opts) {
            too_small += 1;
            continue;
        }
        let (Some(src), Some(dst)) = (topo.host_of(&e.src), topo.host_of(&e.dst)) else {
            unplaced += 1;
            continue;
        };
        let traced = e.path.as_ref().and_then(|p| match router.known(p) {
            Ok(paths)
                if p.first().map(String::as_str) == Some(topo.name(src))
                    && p.last().map(String::as_str) == Some(topo.name(dst)) =>
            {
                Some(paths)
            }
            _ => {
                bad_traces += 1;
                None
            }
        });
        let fields = FlowFields {
            src_ip: e.src,
            dst_ip: e.dst,
            src_port: e.src_port,
            dst_port: 4791,
            protocol: 17,
            dest_qp: e.dest_qp,
        };
        let Some(mut paths) = traced.or_else(|| router.paths(src, dst, Some(&fields))) else {
            unplaced += 1;
            continue;
        };
        // Latency is a round trip's: the answers' path too (every candidate when the port
        // they come from is not known).
        if signal == Signal::Latency
            && let Some(ack) = &e.ack
        {
            let back_traced = ack.reverse_path.as_ref().and_then(|p| {
                let ok = router.known(p).ok().filter(|_| {
                    p.first().map(String::as_str) == Some(topo.name(dst))
                        && p.last().map(String::as_str) == Some(topo.name(src))
                });
                if ok.is_none() {
                    bad_traces += 1;
                }
                ok
            });
            let back_fields = ack.reverse.map(|(port, qp)| FlowFields {
                src_ip: e.dst,
                dst_ip: e.src,
                src_port: port,
                dst_port: 4791,
                protocol: 17,
                dest_qp: qp,
            });
            let Some(back) = back_traced.or_else(|| router.paths(dst, src, back_fields.as_ref()))
            else {
                unplaced += 1;
                continue;
            };
            paths = paths.round_trip(&back);
        }
        by_source[paths.source as usize] += 1;
        placed.push(Placed {
            src,
            dst,
            paths,
            bad: signal.count(e, opts),
            qp: crate::model::FlowRef {
                src_ip: e.src,
                dst_ip: e.dst,
                udp_src_port: e.src_port,
                dest_qp: e.dest_qp,
                direction: Default::default(),
            },
        });
    }
    let mut out = Localization {
        signal,
        qps: placed.len(),
        bad_qps: placed.iter().filter(|q| q.bad > 0).count(),
        too_small,
        unplaced,
        bad_traces,
        by_source,
        suspects: Vec::new(),
        verdict: Verdict::Found,
        link_load: {
            let mut load = vec![(0.0, 0.0); topo.links.len()];
            for q in &placed {
                for (l, w) in &q.paths.links {
                    let e = &mut load[*l as usize];
                    e.0 += f64::from(*w);
                    if q.bad > 0 {
                        e.1 += f64::from(*w);
                    }
                }
            }
            load
        },
    };
    if (placed.len() as f64) < opts.min_qps {
        out.verdict = Verdict::NotEnoughEvidence(format!(
            "{} QPs of {} on the topology's hosts: too few to weigh",
            placed.len(),
            match signal {
                Signal::Latency => format!(
                    "{} ACK samples or more in the window and a baseline (their other windows')",
                    opts.min_acks
                ),
                Signal::Loss | Signal::Ce | Signal::Pfc => {
                    format!("at least {} packets", opts.min_packets)
                }
            }
        ));
        return out;
    }
    let baseline = out.bad_qps as f64 / placed.len() as f64;
    if out.bad_qps == 0 {
        out.verdict = Verdict::Clean(format!(
            "none of {} QPs shows {}",
            placed.len(),
            signal.name()
        ));
        return out;
    }

    let alpha = opts.significance / topo.links.len().max(1) as f64;
    if signal == Signal::Pfc {
        localize_pauses(topo, &mut router, &placed, opts, alpha / 3.0, &mut out);
        return out;
    }
    // Per host, its QPs and the bad ones (a QP counts for both its ends), its bad packets and
    // the peers of its bad QPs.
    let mut per_host: HashMap<NodeId, (f64, f64, u64, Vec<NodeId>)> = HashMap::new();
    // Per pair of hosts (the lower first), their QPs and the bad ones.
    let mut per_pair: HashMap<(NodeId, NodeId), (f64, f64)> = HashMap::new();
    for q in &placed {
        let pair = per_pair
            .entry((q.src.min(q.dst), q.src.max(q.dst)))
            .or_default();
        pair.0 += 1.0;
        if q.bad > 0 {
            pair.1 += 1.0;
        }
        // (A paused source is the pause's victim, not its cause: for PFC a host is judged by
        // the QPs towards it only.)
        let ends = [(q.dst, q.src), (q.src, q.dst)];
        let ends = if signal == Signal::Pfc {
            &ends[..1]
        } else {
            &ends[..]
        };
        for &(me, peer) in ends {
            let h = per_host.entry(me).or_default();
            h.0 += 1.0;
            if q.bad > 0 {
                h.1 += 1.0;
                h.2 += q.bad;
                if !h.3.contains(&peer) {
                    h.3.push(peer);
                }
            }
        }
    }
    // Whether host `h`'s QPs are bad far more often than its neighbours' on the switch its
    // link `link` goes to (their QPs with `h` left out: those are `h`'s; a host with no
    // neighbour: than the fabric's), beyond chance. When the neighbours' are bad alike, the
    // fault is upstream, on what they share.
    let host_stands_out = |h: NodeId, link: LinkId| {
        let l = &topo.links[link as usize];
        let switch = if l.a.node == h { l.b.node } else { l.a.node };
        let (n, b) = per_host.get(&h).map_or((0.0, 0.0), |e| (e.0, e.1));
        let (mut sn, mut sb) = (0.0, 0.0);
        for (v, _) in &topo.adjacent[switch as usize] {
            if *v != h
                && let Some(e) = per_host.get(v)
            {
                let with_h = per_pair
                    .get(&(h.min(*v), h.max(*v)))
                    .copied()
                    .unwrap_or_default();
                sn += e.0 - with_h.0;
                sb += e.1 - with_h.1;
            }
        }
        let beside = if sn >= 1.0 { sb / sn } else { baseline };
        n >= 1.0 && b / n >= opts.rate_ratio * beside && poisson_tail(n * beside, b as u64) <= alpha
    };

    // 1. Hosts whose QPs degrade on nearly all of them, towards several peers, far more often
    //    than their neighbours' do.
    let mut hosts: Vec<(NodeId, f64, f64, u64)> = per_host
        .iter()
        .filter(|(h, (n, b, _, peers))| {
            *n >= opts.min_qps
                && *b >= opts.host_share * *n
                && peers.len() >= 2
                && topo.adjacent[**h as usize]
                    .iter()
                    .all(|(_, link)| host_stands_out(**h, *link))
        })
        .map(|(h, (n, b, packets, _))| (*h, *n, *b, *packets))
        .collect();
    hosts.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut blamed_hosts = Vec::new();
    for (h, n, b, packets) in hosts.into_iter().take(opts.max_suspects) {
        out.suspects.push(Suspect {
            kind: SuspectKind::Host,
            name: topo.name(h).to_string(),
            link: None,
            node: Some(h),
            votes: b,
            bad_qps: b,
            qps: n,
            bad_packets: packets,
            rate: b / n,
            baseline,
            qps_named: name_qps(placed.iter().filter(|q| q.src == h || q.dst == h)),
            placed: 1.0,
        });
        blamed_hosts.push(h);
    }

    // 2. Links, by votes, each taking the bad QPs it explains out of the next count.
    let rest: Vec<&Placed> = placed
        .iter()
        .filter(|q| !blamed_hosts.contains(&q.src) && !blamed_hosts.contains(&q.dst))
        .collect();
    // Per link, the QPs crossing it and the bad ones among them (each by its probability).
    let mut through = vec![0.0f64; topo.links.len()];
    let mut bad_through = vec![0.0f64; topo.links.len()];
    for q in &rest {
        for (l, w) in &q.paths.links {
            through[*l as usize] += f64::from(*w);
            if q.bad > 0 {
                bad_through[*l as usize] += f64::from(*w);
            }
        }
    }
    // The QPs weighed, and the bad ones; a bad QP a named link explains leaves them (and
    // `through`, `bad_through`): the next link is judged on what is left.
    let (mut rest_qps, mut rest_bad) = (
        rest.len() as f64,
        rest.iter().filter(|q| q.bad > 0).count() as f64,
    );
    // The share of bad QPs among those not crossing link `l` (all of them, when nearly every
    // QP crosses it).
    let outside = |l: usize, through: &[f64], bad_through: &[f64], qps: f64, bad: f64| {
        let n = qps - through[l];
        if n >= 1.0 {
            ((bad - bad_through[l]) / n).max(0.0)
        } else {
            bad / qps.max(1.0)
        }
    };
    // The links QPs crossed before any was explained: those a switch's fault would show on.
    let loaded_at_first: Vec<bool> = through.iter().map(|t| *t > 0.0).collect();
    // The bad QPs not explained yet (indices into `rest`), and those explained.
    let mut active: Vec<usize> = (0..rest.len()).filter(|i| rest[*i].bad > 0).collect();
    let mut gone = vec![false; rest.len()];
    let mut named_links: Vec<usize> = Vec::new();
    // Links named (the cap applies after the switches are folded: a switch's links may be
    // more than it).
    let widest = topo.adjacent.iter().map(Vec::len).max().unwrap_or(0);
    let most_links = opts
        .max_suspects
        .saturating_add(widest.saturating_mul(2))
        .min(topo.links.len());
    // Whether link `l` is named at the share `elsewhere` of bad QPs among those not crossing
    // it, chance judged at `null`: it explains enough bad QPs not yet explained, and the QPs
    // crossing it are bad far more often than those that do not, by more than chance would
    // make them; a host's own link only when the host stands out among its neighbours.
    let passes = |l: usize, bad: f64, crossing: f64, elsewhere: f64, null: f64, alpha: f64| {
        bad >= opts.min_qps
            && crossing > 0.0
            && bad / crossing >= opts.rate_ratio * elsewhere
            && poisson_tail(crossing * null, bad.floor() as u64) <= alpha
            && topo
                .host_end(l as LinkId)
                .is_none_or(|h| host_stands_out(h, l as LinkId))
    };
    while named_links.len() < most_links && !active.is_empty() {
        // (The bad QPs not yet explained crossing each link are `bad_through`: explained
        // ones leave it as they leave `active`.)
        let mut votes = vec![0.0f64; topo.links.len()];
        for q in active.iter().map(|i| rest[*i]) {
            // Every path has `hops` links: a path's 1/h of a vote per link, summed over the
            // paths, is the link's probability over h.
            let h = f64::from(q.paths.hops.max(1));
            for (l, w) in &q.paths.links {
                votes[*l as usize] += f64::from(*w) / h;
            }
        }
        let mut order: Vec<usize> = (0..votes.len()).filter(|l| votes[*l] > 0.0).collect();
        order.sort_by(|a, b| votes[*b].total_cmp(&votes[*a]).then(a.cmp(b)));
        // Chance is judged at the larger of the share elsewhere and the share among all the
        // QPs left (with none bad elsewhere, a few background losses would pass anything).
        let single = order.iter().copied().find(|&l| {
            let elsewhere = outside(l, &through, &bad_through, rest_qps, rest_bad);
            let null = elsewhere.max(rest_bad / rest_qps.max(1.0));
            passes(l, bad_through[l], through[l], elsewhere, null, alpha)
        });
        // Two faulty links each raise the share of bad QPs outside the other: when no link
        // stands out alone, a pair of the most voted links is named together when each would
        // be named once the other's QPs were explained (judged against the QPs crossing
        // neither, chance at the share among those not crossing the other).
        // Each link named with the figures it was judged on: (link, bad QPs, QPs crossing
        // it, the share of bad QPs elsewhere).
        let named: Vec<(usize, f64, f64, f64)> = match single {
            Some(l) => vec![(
                l,
                bad_through[l],
                through[l],
                outside(l, &through, &bad_through, rest_qps, rest_bad),
            )],
            None if named_links.len() + 2 > most_links => break,
            None => {
                let candidates: Vec<usize> = order
                    .iter()
                    .copied()
                    .filter(|&l| {
                        bad_through[l] >= opts.min_qps
                            && topo
                                .host_end(l as LinkId)
                                .is_none_or(|h| host_stands_out(h, l as LinkId))
                    })
                    .take(PAIR_CANDIDATES)
                    .collect();
                // Chance over every pair that may be tried, not one test.
                let pairs = (PAIR_CANDIDATES * (PAIR_CANDIDATES - 1) / 2).max(1);
                let alpha_pair = alpha / pairs as f64;
                let mut pair = None;
                'pairs: for (i, &a) in candidates.iter().enumerate() {
                    for &b in &candidates[i + 1..] {
                        // Each link's QPs that do not cross the other, the QPs crossing neither,
                        // and the bad ones among each: [QPs, bad] for a alone, b alone, neither.
                        // Exact only where the QPs' paths are (known or hashed): a path split
                        // among candidates gives each link a probability, not their joint one.
                        let mut sums = [[0.0f64; 2]; 3];
                        let mut exact = true;
                        for (k, q) in rest.iter().enumerate() {
                            if gone[k] {
                                continue;
                            }
                            let (pa, pb) =
                                (q.paths.through(a as LinkId), q.paths.through(b as LinkId));
                            if (pa > 0.0 && pa < 1.0) || (pb > 0.0 && pb < 1.0) {
                                exact = false;
                                break;
                            }
                            let bad = if q.bad > 0 { 1.0 } else { 0.0 };
                            for (slot, w) in
                                [pa * (1.0 - pb), pb * (1.0 - pa), (1.0 - pa) * (1.0 - pb)]
                                    .into_iter()
                                    .enumerate()
                            {
                                sums[slot][0] += w;
                                sums[slot][1] += w * bad;
                            }
                        }
                        if !exact {
                            continue;
                        }
                        let [only_a, only_b, neither] = sums;
                        let neither = if neither[0] >= 1.0 {
                            neither[1] / neither[0]
                        } else {
                            1.0
                        };
                        // Chance at the share among the QPs not crossing the other link.
                        let left = |other: usize| {
                            (rest_bad - bad_through[other]).max(0.0)
                                / (rest_qps - through[other]).max(1.0)
                        };
                        if passes(
                            a,
                            only_a[1],
                            only_a[0],
                            neither,
                            neither.max(left(b)),
                            alpha_pair,
                        ) && passes(
                            b,
                            only_b[1],
                            only_b[0],
                            neither,
                            neither.max(left(a)),
                            alpha_pair,
                        ) {
                            pair = Some([
                                (a, only_a[1], only_a[0], neither),
                                (b, only_b[1], only_b[0], neither),
                            ]);
                            break 'pairs;
                        }
                    }
                }
                match pair {
                    Some(p) => p.to_vec(),
                    None => break,
                }
            }
        };
        // Each named with the figures it was judged on (a pair's both before either's QPs
        // leave), then their bad QPs explained.
        for (k, &(l, bad_l, through_l, baseline)) in named.iter().enumerate() {
            let link = l as LinkId;
            // A QP crossing both links of a pair is the first's to show (counted once).
            let mine = |q: &Placed| {
                q.paths.through(link) > 0.0
                    && named[..k]
                        .iter()
                        .all(|o| q.paths.through(o.0 as LinkId) == 0.0)
            };
            let explained: Vec<(f64, u64)> = active
                .iter()
                .map(|i| rest[*i])
                .filter(|q| mine(q))
                .map(|q| (q.paths.through(link), q.bad))
                .collect();
            let n = explained.len().max(1) as f64;
            let host = topo.host_end(link);
            out.suspects.push(Suspect {
                kind: if host.is_some() {
                    SuspectKind::Host
                } else {
                    SuspectKind::Link
                },
                name: match host {
                    Some(h) => format!("{} (its link {})", topo.name(h), topo.link_name(link)),
                    None => topo.link_name(link),
                },
                link: Some(link),
                node: host,
                votes: votes[l],
                bad_qps: bad_l,
                qps: through_l,
                bad_packets: explained.iter().map(|(_, b)| b).sum(),
                rate: bad_l / through_l,
                baseline,
                qps_named: name_qps(active.iter().map(|i| rest[*i]).filter(|q| mine(q))),
                placed: explained.iter().map(|(p, _)| p).sum::<f64>() / n,
            });
            named_links.push(out.suspects.len() - 1);
        }
        active.retain(|&i| {
            let q = rest[i];
            if named.iter().all(|n| q.paths.through(n.0 as LinkId) == 0.0) {
                return true;
            }
            for (m, w) in &q.paths.links {
                through[*m as usize] -= f64::from(*w);
                bad_through[*m as usize] -= f64::from(*w);
            }
            rest_qps -= 1.0;
            rest_bad -= 1.0;
            gone[i] = true;
            false
        });
    }

    // 3. A switch most of whose loaded links were named (three at least).
    for s in 0..topo.nodes.len() as NodeId {
        if topo.nodes[s as usize].role == Role::Host {
            continue;
        }
        // Its links to other switches that carried QPs (a leaf's host links are its hosts'
        // to explain; one of them named counts for the leaf).
        let loaded = topo.adjacent[s as usize]
            .iter()
            .filter(|(_, l)| loaded_at_first[*l as usize] && topo.host_end(*l).is_none())
            .count();
        let mine: Vec<usize> = named_links
            .iter()
            .copied()
            .filter(|i| {
                matches!(out.suspects[*i].kind, SuspectKind::Link | SuspectKind::Host)
                    && out.suspects[*i]
                        .link
                        .is_some_and(|l| topo.adjacent[s as usize].iter().any(|(_, m)| *m == l))
            })
            .collect();
        if mine.len() >= 3 && mine.len() * 2 > loaded {
            let parts: Vec<Suspect> = mine.iter().map(|i| out.suspects[*i].clone()).collect();
            let sum = |f: fn(&Suspect) -> f64| parts.iter().map(f).sum::<f64>();
            let switch = Suspect {
                kind: SuspectKind::Switch,
                name: topo.name(s).to_string(),
                link: None,
                node: Some(s),
                votes: sum(|p| p.votes),
                bad_qps: sum(|p| p.bad_qps),
                qps: sum(|p| p.qps),
                bad_packets: parts.iter().map(|p| p.bad_packets).sum(),
                rate: sum(|p| p.bad_qps) / sum(|p| p.qps).max(f64::MIN_POSITIVE),
                baseline,
                qps_named: {
                    let mut v: Vec<(crate::model::FlowRef, u64)> = Vec::new();
                    for q in parts.iter().flat_map(|p| p.qps_named.iter()) {
                        if !v.iter().any(|(r, _)| *r == q.0) {
                            v.push(q.clone());
                        }
                    }
                    v.sort_by_key(|q| std::cmp::Reverse(q.1));
                    v.truncate(QPS_NAMED);
                    v
                },
                placed: sum(|p| p.placed) / parts.len() as f64,
            };
            let first = mine[0];
            out.suspects[first] = switch;
            for i in mine[1..].iter().rev() {
                out.suspects[*i].kind = SuspectKind::Switch;
                out.suspects[*i].name.clear();
            }
        }
    }
    out.suspects.retain(|s| !s.name.is_empty());
    let all_placed = out.suspects.iter().all(|s| s.placed >= opts.placed);
    out.suspects.truncate(opts.max_suspects);

    let unknown = out.by_source[PathSource::Candidates as usize];
    out.verdict = match out.suspects.first() {
        // Bad QPs that no link explains where the paths are not known: they may still be
        // one link's.
        None if unknown * 2 > out.qps && out.bad_qps as f64 >= opts.min_qps => {
            Verdict::NotEnoughEvidence(format!(
                "{} of {} QPs show {}, and no link stands out: the paths are not known ({} \
                 QPs' paths split among their candidates); give the switches' hashes \
                 in the topology file{}",
                out.bad_qps,
                out.qps,
                signal.name(),
                unknown,
                latency_hint(signal)
            ))
        }
        None => Verdict::Clean(format!(
            "{} of {} QPs show {}, spread: no link, switch or host stands out",
            out.bad_qps,
            out.qps,
            signal.name()
        )),
        Some(_) if !all_placed => Verdict::NotEnoughEvidence(format!(
            "the paths are not known ({unknown} of {} QPs' paths split among their \
             candidates): the suspects are where the evidence could be, not where it is; give \
             the switches' hashes in the topology file{}",
            out.qps,
            latency_hint(signal)
        )),
        Some(_) => Verdict::Found,
    };
    out
}

/// PFC: a host's pauses hold all of its traffic of the priority, so the units of evidence are
/// the hosts, not their QPs. A link direction whose egress congests pauses every host sending
/// through it that way (sustained congestion backs up hop by hop to every source); a host
/// that was not paused sent through no congested link direction. So, like 007's votes with
/// hosts for flows, over link directions (each QP crosses a link of its shortest path from
/// the end farther from its destination): the direction crossed by the most paused hosts not
/// yet explained is named when nearly all the hosts crossing it were paused (`pause_share`),
/// far more than those not crossing it (`rate_ratio`), beyond chance; the paused hosts it
/// explains leave the count. Where every host crosses every candidate (dense traffic),
/// nothing stands out, and the verdict says so.
fn localize_pauses(
    topo: &Topology,
    router: &mut Router,
    placed: &[Placed],
    opts: &Options,
    alpha: f64,
    out: &mut Localization,
) {
    // A link direction: the link's index twice, plus one when crossed from its `b` end; after
    // them, the links whole (either way: congested both ways, each way's paused hosts count
    // against the other's).
    let arcs = topo.links.len() * 2;
    let units = arcs + topo.links.len();
    // Per source host: its pause frames, and per link direction the most likely any of its
    // QPs crosses it.
    let mut hosts: HashMap<NodeId, (u64, HashMap<usize, f64>)> = HashMap::new();
    // The QPs whose paths are not known: a host's every link is what it weighs.
    let mut inexact = 0;
    for q in placed {
        let h = hosts.entry(q.src).or_default();
        h.0 = h.0.max(q.bad);
        if q.paths.source == PathSource::Candidates {
            inexact += 1;
        }
        // A traced path's links walked in its order (it need not be a shortest one), each
        // crossed from the node the walk is at; another path's from its end farther from the
        // destination.
        let mut walked: HashMap<LinkId, NodeId> = HashMap::new();
        if q.paths.source == PathSource::Known {
            let mut at = q.src;
            let mut left: Vec<LinkId> = q.paths.links.iter().map(|(l, _)| *l).collect();
            while let Some(i) = left.iter().position(|l| {
                let e = &topo.links[*l as usize];
                e.a.node == at || e.b.node == at
            }) {
                let l = left.swap_remove(i);
                let e = &topo.links[l as usize];
                walked.insert(l, at);
                at = if e.a.node == at { e.b.node } else { e.a.node };
            }
        }
        for (l, w) in &q.paths.links {
            let from = match walked.get(l) {
                Some(n) => *n,
                None => router.from_end(q.dst, *l),
            };
            let from_b = from == topo.links[*l as usize].b.node;
            for unit in [*l as usize * 2 + usize::from(from_b), arcs + *l as usize] {
                let e = h.1.entry(unit).or_default();
                *e = e.max(f64::from(*w));
            }
        }
    }
    let mut order: Vec<NodeId> = hosts.keys().copied().collect();
    order.sort_unstable();
    let total = order.len() as f64;
    let paused_total = order.iter().filter(|h| hosts[h].0 > 0).count() as f64;
    out.bad_qps = placed.iter().filter(|q| q.bad > 0).count();
    if paused_total == 0.0 {
        out.verdict = Verdict::Clean(format!(
            "none of {} sending hosts received pauses",
            order.len()
        ));
        return;
    }
    let mut explained: Vec<NodeId> = Vec::new();
    let baseline = paused_total / total;
    while out.suspects.len() < opts.max_suspects {
        // Per link direction: the hosts crossing it, the paused ones, those not yet explained.
        let mut crossing = vec![0.0f64; units];
        let mut paused = vec![0.0f64; units];
        let mut open = vec![0.0f64; units];
        for h in &order {
            let (frames, links) = &hosts[h];
            for (l, w) in links {
                crossing[*l] += w;
                if *frames > 0 {
                    paused[*l] += w;
                    if !explained.contains(h) {
                        open[*l] += w;
                    }
                }
            }
        }
        let mut links: Vec<usize> = (0..units).filter(|l| open[*l] > 0.0).collect();
        links.sort_by(|a, b| open[*b].total_cmp(&open[*a]).then(a.cmp(b)));
        let stands_out = |l: usize| {
            let rest = total - crossing[l];
            // The share paused among the hosts not crossing it; chance judged at least at one
            // such host in the count (none paused among few says little).
            let elsewhere = if rest >= 1.0 {
                (paused_total - paused[l]).max(0.0) / rest
            } else {
                1.0
            };
            let null = elsewhere.max(1.0 / (rest + 1.0));
            open[l] >= 2.0
                && paused[l] >= opts.pause_share * crossing[l]
                && paused[l] / crossing[l] >= opts.rate_ratio * elsewhere
                && poisson_tail(crossing[l] * null, paused[l].floor() as u64) <= alpha
        };
        let Some(l) = links.into_iter().find(|l| stands_out(*l)) else {
            break;
        };
        let link = if l < arcs { l / 2 } else { l - arcs } as LinkId;
        let mine: Vec<NodeId> = order
            .iter()
            .copied()
            .filter(|h| hosts[h].0 > 0 && !explained.contains(h) && hosts[h].1.contains_key(&l))
            .collect();
        let rest = total - crossing[l];
        let host = topo.host_end(link);
        let ends = &topo.links[link as usize];
        let (from, to) = if l % 2 == 1 {
            (ends.b.node, ends.a.node)
        } else {
            (ends.a.node, ends.b.node)
        };
        let way = if l < arcs {
            format!(", {} to {}", topo.name(from), topo.name(to))
        } else {
            String::new()
        };
        out.suspects.push(Suspect {
            kind: if host.is_some() {
                SuspectKind::Host
            } else {
                SuspectKind::Link
            },
            name: match host {
                Some(h) => format!("{} (its link {}{way})", topo.name(h), topo.link_name(link)),
                None if l < arcs => format!("{} ({})", topo.link_name(link), &way[2..]),
                None => topo.link_name(link),
            },
            link: Some(link),
            node: host,
            votes: open[l],
            bad_qps: paused[l],
            qps: crossing[l],
            bad_packets: mine.iter().map(|h| hosts[h].0).sum(),
            rate: paused[l] / crossing[l],
            baseline: if rest >= 1.0 {
                (paused_total - paused[l]).max(0.0) / rest
            } else {
                baseline
            },
            qps_named: name_qps(
                placed
                    .iter()
                    .filter(|q| mine.contains(&q.src) && q.paths.through(link) > 0.0),
            ),
            placed: mine.iter().map(|h| hosts[h].1[&l]).sum::<f64>() / mine.len().max(1) as f64,
        });
        explained.extend(mine);
    }
    let unexplained = paused_total as usize - explained.len();
    out.verdict = if out.suspects.is_empty() {
        Verdict::NotEnoughEvidence(format!(
            "{paused_total:.0} of {total:.0} sending hosts received pauses, and no link \
             direction stands out: too few paused hosts cross any one to be beyond chance, or \
             their traffic shares too many links to tell where the backpressure starts"
        ))
    } else if inexact > 0 || out.suspects.iter().any(|s| s.placed < opts.placed) {
        // A host with one QP on unknown paths may have sent over any of its candidates: the
        // hosts that were not paused clear nothing for sure.
        Verdict::NotEnoughEvidence(format!(
            "the paths of {inexact} of {} QPs are not known: the suspects are where the pauses \
             could start, not where they do ({unexplained} paused hosts left unexplained); \
             give the switches' hashes in the topology file",
            placed.len()
        ))
    } else {
        Verdict::Found
    };
}

/// What latency's paths also need: the answers' ports.
fn latency_hint(signal: Signal) -> &'static str {
    match signal {
        Signal::Latency => {
            " (and, for latency, the records of the answering side: the port its answers come \
             from)"
        }
        Signal::Loss | Signal::Ce | Signal::Pfc => "",
    }
}

/// P(X >= k) for X Poisson of mean `mean`: how likely `k` bad QPs or more are by chance.
fn poisson_tail(mean: f64, k: u64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if mean <= 0.0 {
        return 0.0;
    }
    // 1 - P(X < k), the terms summed in order (each from the last); far beyond the mean
    // the tail is below any threshold this is compared with.
    if k as f64 > mean + 12.0 * mean.sqrt() + 40.0 {
        return 0.0;
    }
    // Where exp(-mean) underflows (a mean above ~700), the tail is summed upwards from k in
    // log space (ln k! by Stirling's series, exact to ~1e-12 there). At or below the mean the
    // tail is about one half or more: 1, no more than chance.
    if mean > 700.0 {
        if k as f64 <= mean {
            return 1.0;
        }
        let kf = k as f64;
        let ln_fact =
            kf * kf.ln() - kf + 0.5 * (2.0 * std::f64::consts::PI * kf).ln() + 1.0 / (12.0 * kf)
                - 1.0 / (360.0 * kf.powi(3));
        let mut term = (-mean + kf * mean.ln() - ln_fact).exp();
        let mut sum = 0.0;
        let mut i = kf;
        while term > sum * 1e-17 && term > 0.0 {
            sum += term;
            i += 1.0;
            term *= mean / i;
        }
        return sum.min(1.0);
    }
    let (mut term, mut below) = ((-mean).exp(), 0.0);
    for i in 0..k {
        below += term;
        term *= mean / (i + 1) as f64;
    }
    (1.0 - below).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::super::sim::{self, Fault, Workload};
    use super::*;
    use crate::analysis::ecmp::predict::SplitMix64;

    /// The evidence as a localization gets it: with the true paths (traced), or without.
    fn given(ev: &[(QpEvidence, Vec<String>)], traced: bool) -> Vec<QpEvidence> {
        ev.iter()
            .map(|(e, p)| QpEvidence {
                path: traced.then(|| p.clone()),
                ..e.clone()
            })
            .collect()
    }

    /// A fault losing `loss` of the packets crossing `link`.
    fn lossy(link: LinkId, loss: f64) -> Fault {
        Fault {
            link,
            loss,
            ce: 0.0,
        }
    }

    /// The localization of untraced evidence with the default options.
    fn loc(topo: &Topology, ev: &[(QpEvidence, Vec<String>)], signal: Signal) -> Localization {
        localize(topo, &given(ev, false), signal, &Options::default())
    }

    /// A link between two switches, at random.
    fn fabric_link(t: &Topology, rng: &mut SplitMix64) -> LinkId {
        loop {
            let l = rng.below(t.links.len() as u32);
            if t.host_end(l).is_none() {
                return l;
            }
        }
    }

    fn work(seed: u64) -> Workload {
        Workload {
            qps: 3000,
            packets: 2000,
            background: 2e-6,
            seed,
        }
    }

    #[test]
    fn one_faulty_link_is_named_first_with_known_and_hashed_paths() {
        let truth = sim::fat_tree(4, Some(7));
        let mut rng = SplitMix64::new(1);
        let (mut known_hits, mut hashed_hits, runs) = (0, 0, 20);
        for run in 0..runs {
            let link = fabric_link(&truth, &mut rng);
            let loss = [0.001, 0.01][run % 2];
            let ev = sim::evidence(
                &truth,
                &work(run as u64 + 100),
                &[Fault {
                    link,
                    loss,
                    ce: 0.0,
                }],
            );
            for (traced, hits) in [(true, &mut known_hits), (false, &mut hashed_hits)] {
                let l = localize(
                    &truth,
                    &given(&ev, traced),
                    Signal::Loss,
                    &Options::default(),
                );
                assert_eq!(l.verdict, Verdict::Found, "run {run}: {l:?}");
                if l.suspects[0].link == Some(link) {
                    *hits += 1;
                }
            }
        }
        assert!(
            known_hits * 10 >= runs * 9,
            "traced paths: {known_hits} of {runs}"
        );
        assert!(
            hashed_hits * 10 >= runs * 9,
            "hashed paths: {hashed_hits} of {runs}"
        );
    }

    #[test]
    fn two_faulty_links_are_both_named() {
        let truth = sim::leaf_spine(4, 6, 4, Some(9));
        let mut rng = SplitMix64::new(2);
        let (mut both, runs) = (0, 20);
        for run in 0..runs {
            let a = fabric_link(&truth, &mut rng);
            let b = loop {
                let b = fabric_link(&truth, &mut rng);
                if b != a {
                    break b;
                }
            };
            let faults = [a, b].map(|link| lossy(link, 0.005));
            let ev = sim::evidence(&truth, &work(run as u64 + 200), &faults);
            let l = loc(&truth, &ev, Signal::Loss);
            let named: Vec<Option<LinkId>> = l.suspects.iter().take(2).map(|s| s.link).collect();
            if named.contains(&Some(a)) && named.contains(&Some(b)) {
                both += 1;
            }
        }
        assert!(
            both * 10 >= runs * 8,
            "both links named in {both} of {runs}"
        );
    }

    #[test]
    fn two_faulty_links_that_raise_each_others_share_elsewhere_are_named_together() {
        // A small fabric (the netns lab's shape): every QP of a leaf's hosts crosses one of
        // its two uplinks, so each faulty uplink makes the QPs outside the other look bad.
        let truth = sim::leaf_spine(2, 4, 2, Some(5));
        let link = |a: &str, b: &str| {
            truth
                .link_between(truth.node(a).unwrap(), truth.node(b).unwrap())
                .unwrap()
        };
        let small = Workload {
            qps: 170,
            packets: 150,
            background: 0.0,
            seed: 7,
        };
        for (a, b) in [(("l0", "s0"), ("l0", "s1")), (("l0", "s0"), ("l2", "s0"))] {
            let (a, b) = (link(a.0, a.1), link(b.0, b.1));
            let ev = sim::evidence(&truth, &small, &[lossy(a, 0.03), lossy(b, 0.03)]);
            let l = localize(&truth, &given(&ev, true), Signal::Loss, &Options::default());
            let named: Vec<Option<LinkId>> = l.suspects.iter().map(|s| s.link).collect();
            assert_eq!(l.verdict, Verdict::Found, "{l:?}");
            assert_eq!(named.len(), 2, "{l:?}");
            assert!(
                named.contains(&Some(a)) && named.contains(&Some(b)),
                "{l:?}"
            );
        }
    }

    #[test]
    fn a_host_link_fault_names_the_host_and_a_clean_run_names_nothing() {
        let truth = sim::leaf_spine(2, 4, 4, Some(3));
        let h = truth.node("h5").unwrap();
        let own = truth.adjacent[h as usize][0].1;
        // Its own link losing a little: every one of its QPs crosses it.
        let ev = sim::evidence(&truth, &work(300), &[lossy(own, 0.002)]);
        let l = loc(&truth, &ev, Signal::Loss);
        assert_eq!(l.suspects[0].kind, SuspectKind::Host, "{l:?}");
        assert_eq!(l.suspects[0].node, Some(h));
        assert_eq!(l.suspects.len(), 1, "{:?}", l.suspects);

        let ev = sim::evidence(&truth, &work(301), &[]);
        let l = loc(&truth, &ev, Signal::Loss);
        assert!(l.bad_qps > 0, "the background gives some QPs a loss");
        assert!(matches!(l.verdict, Verdict::Clean(_)), "{l:?}");
        assert!(l.suspects.is_empty());
    }

    #[test]
    fn a_faulty_nic_on_a_small_leaf_is_named() {
        // Four hosts: a faulty host's neighbour sees it in its own QPs, which are left out of
        // the neighbour's share.
        let truth = sim::leaf_spine(2, 2, 2, Some(14));
        let h = truth.node("h1").unwrap();
        let own = truth.adjacent[h as usize][0].1;
        let ev = sim::evidence(&truth, &work(540), &[lossy(own, 0.01)]);
        let l = loc(&truth, &ev, Signal::Loss);
        assert_eq!(l.verdict, Verdict::Found, "{l:?}");
        assert_eq!(l.suspects.len(), 1, "{:?}", l.suspects);
        assert_eq!(
            (l.suspects[0].kind, l.suspects[0].node),
            (SuspectKind::Host, Some(h))
        );
    }

    #[test]
    fn ce_marks_are_localized_like_loss() {
        let truth = sim::leaf_spine(2, 4, 4, Some(4));
        let link = truth
            .link_between(truth.node("l1").unwrap(), truth.node("s0").unwrap())
            .unwrap();
        let ev = sim::evidence(
            &truth,
            &work(400),
            &[Fault {
                link,
                loss: 0.0,
                ce: 0.01,
            }],
        );
        let l = loc(&truth, &ev, Signal::Ce);
        assert_eq!(l.suspects[0].link, Some(link), "{l:?}");
        assert_eq!(l.suspects[0].name, "l1:up0 - s0:down1");
        // The loss is clean.
        let l = loc(&truth, &ev, Signal::Loss);
        assert!(matches!(l.verdict, Verdict::Clean(_)), "{l:?}");
    }

    #[test]
    fn unknown_paths_say_so() {
        let truth = sim::fat_tree(4, Some(5));
        // Nobody knows the switches' hashes.
        let blind = sim::fat_tree(4, None);
        let link = truth
            .link_between(truth.node("a1-0").unwrap(), truth.node("c0-1").unwrap())
            .unwrap();
        let ev = sim::evidence(&truth, &work(500), &[lossy(link, 0.01)]);
        let l = loc(&blind, &ev, Signal::Loss);
        assert_eq!(
            l.by_source[PathSource::Candidates as usize] + l.by_source[PathSource::Hashed as usize],
            l.qps
        );
        let Verdict::NotEnoughEvidence(why) = &l.verdict else {
            panic!("{l:?}");
        };
        assert!(why.contains("paths are not known"), "{why}");
    }

    #[test]
    fn two_way_ecmp_with_unknown_hashes_is_not_a_coin_flip() {
        let truth = sim::leaf_spine(2, 8, 4, Some(8));
        let blind = sim::leaf_spine(2, 8, 4, None);
        let link = truth
            .link_between(truth.node("l1").unwrap(), truth.node("s1").unwrap())
            .unwrap();
        let ev = sim::evidence(&truth, &work(510), &[lossy(link, 0.01)]);
        let l = loc(&blind, &ev, Signal::Loss);
        assert!(matches!(l.verdict, Verdict::NotEnoughEvidence(_)), "{l:?}");
        // With the hashes, the link.
        let l = loc(&truth, &ev, Signal::Loss);
        assert_eq!(l.verdict, Verdict::Found, "{l:?}");
        assert_eq!(l.suspects.len(), 1, "{:?}", l.suspects);
        assert_eq!(l.suspects[0].link, Some(link));
    }

    #[test]
    fn a_noisy_fabric_names_the_faulty_link_alone() {
        // One packet in 100,000 lost anywhere: a sixth of the QPs lose one.
        let truth = sim::fat_tree(4, Some(12));
        let link = truth
            .link_between(truth.node("a2-1").unwrap(), truth.node("c1-0").unwrap())
            .unwrap();
        let w = Workload {
            background: 1e-5,
            ..work(520)
        };
        let ev = sim::evidence(&truth, &w, &[lossy(link, 0.01)]);
        let l = loc(&truth, &ev, Signal::Loss);
        assert_eq!(l.verdict, Verdict::Found, "{l:?}");
        assert_eq!(l.suspects.len(), 1, "{:?}", l.suspects);
        assert_eq!(l.suspects[0].link, Some(link));
    }

    #[test]
    fn a_leaf_losing_on_every_uplink_is_not_its_hosts() {
        let truth = sim::leaf_spine(4, 6, 4, Some(13));
        let leaf = truth.node("l2").unwrap();
        let faults: Vec<Fault> = truth.adjacent[leaf as usize]
            .iter()
            .filter(|(_, link)| truth.host_end(*link).is_none())
            .map(|(_, link)| lossy(*link, 0.01))
            .collect();
        let ev = sim::evidence(&truth, &work(530), &faults);
        let l = loc(&truth, &ev, Signal::Loss);
        assert!(
            l.suspects.iter().all(|s| s.kind != SuspectKind::Host),
            "{:?}",
            l.suspects
        );
        assert_eq!(l.suspects[0].kind, SuspectKind::Switch, "{:?}", l.suspects);
        assert_eq!(l.suspects[0].name, "l2");
    }

    #[test]
    fn a_faulty_switch_is_named_as_one() {
        let truth = sim::leaf_spine(4, 8, 3, Some(6));
        let s = truth.node("s2").unwrap();
        let faults: Vec<Fault> = truth.adjacent[s as usize]
            .iter()
            .map(|(_, link)| lossy(*link, 0.005))
            .collect();
        let ev = sim::evidence(&truth, &work(600), &faults);
        let l = loc(&truth, &ev, Signal::Loss);
        assert_eq!(l.suspects[0].kind, SuspectKind::Switch, "{:?}", l.suspects);
        assert_eq!(l.suspects[0].name, "s2");
    }

    #[test]
    fn a_delaying_link_is_named_from_ack_latency_on_either_way() {
        let truth = sim::fat_tree(4, Some(7));
        let mut rng = SplitMix64::new(41);
        let (mut hits, mut back_only, runs) = (0, 0, 20);
        for run in 0..runs {
            let link = fabric_link(&truth, &mut rng);
            let delays = [sim::Delay { link, ns: 40_000 }];
            let ev = sim::evidence_delayed(&truth, &work(run as u64 + 700), &[], &delays);
            // Some QPs cross it only on their answers' way back: the round trip counts them.
            let mut router = Router::new(&truth);
            back_only += ev
                .iter()
                .filter(|(e, _)| {
                    let ack = e.ack.as_ref().unwrap();
                    let mut out = |s, d, port, qp| {
                        let f = FlowFields {
                            src_ip: s,
                            dst_ip: d,
                            src_port: port,
                            dst_port: 4791,
                            protocol: 17,
                            dest_qp: qp,
                        };
                        router
                            .paths(
                                truth.host_of(&s).unwrap(),
                                truth.host_of(&d).unwrap(),
                                Some(&f),
                            )
                            .unwrap()
                            .through(link)
                    };
                    let (port, qp) = ack.reverse.unwrap();
                    ack.p50_ns >= ack.baseline_ns * 2
                        && out(e.src, e.dst, e.src_port, e.dest_qp) == 0.0
                        && out(e.dst, e.src, port, qp) == 1.0
                })
                .count();
            let l = loc(&truth, &ev, Signal::Latency);
            assert_eq!(l.verdict, Verdict::Found, "run {run}: {l:?}");
            if l.suspects[0].link == Some(link) {
                hits += 1;
                // The QPs it explains are more than those crossing it on the way out: the
                // ways back count.
                let out_bad = given(&ev, false)
                    .iter()
                    .filter(|e| {
                        Signal::Latency.count(e, &Options::default()) > 0
                            && router
                                .paths(
                                    truth.host_of(&e.src).unwrap(),
                                    truth.host_of(&e.dst).unwrap(),
                                    Some(&FlowFields {
                                        src_ip: e.src,
                                        dst_ip: e.dst,
                                        src_port: e.src_port,
                                        dst_port: 4791,
                                        protocol: 17,
                                        dest_qp: e.dest_qp,
                                    }),
                                )
                                .unwrap()
                                .through(link)
                                > 0.0
                    })
                    .count();
                assert!(
                    l.suspects[0].bad_qps > out_bad as f64 + 5.0,
                    "run {run}: {} bad QPs named, {out_bad} crossing it out",
                    l.suspects[0].bad_qps
                );
            }
            // Latency says nothing of loss.
            assert!(matches!(
                loc(&truth, &ev, Signal::Loss).verdict,
                Verdict::Clean(_)
            ));
        }
        assert!(hits * 10 >= runs * 9, "{hits} of {runs}");
        assert!(
            back_only > 100,
            "{back_only} QPs slowed on their way back only"
        );
        // Undelayed, nothing: a window's wander is no shift.
        let ev = sim::evidence_delayed(&truth, &work(790), &[], &[]);
        let l = loc(&truth, &ev, Signal::Latency);
        assert!(matches!(l.verdict, Verdict::Clean(_)), "{l:?}");
    }

    #[test]
    fn latency_without_a_baseline_or_the_way_back_says_what_it_lacks() {
        let truth = sim::leaf_spine(2, 4, 4, Some(3));
        let link = truth
            .link_between(truth.node("l1").unwrap(), truth.node("s0").unwrap())
            .unwrap();
        let delays = [sim::Delay { link, ns: 40_000 }];
        let ev = sim::evidence_delayed(&truth, &work(800), &[], &delays);
        // No baseline (one window): not weighed.
        let none: Vec<QpEvidence> = ev
            .iter()
            .map(|(e, _)| QpEvidence {
                ack: None,
                ..e.clone()
            })
            .collect();
        let l = localize(&truth, &none, Signal::Latency, &Options::default());
        assert_eq!((l.qps, l.too_small), (0, ev.len()));
        assert!(matches!(l.verdict, Verdict::NotEnoughEvidence(_)), "{l:?}");
        // The answers' port not known: their path is every candidate, and a suspect is
        // where the evidence could be.
        let blind_back: Vec<QpEvidence> = ev
            .iter()
            .map(|(e, _)| {
                let mut e = e.clone();
                e.ack.as_mut().unwrap().reverse = None;
                e
            })
            .collect();
        let l = localize(&truth, &blind_back, Signal::Latency, &Options::default());
        // (Every QP but those between two hosts of one leaf, which have one path.)
        assert!(
            l.by_source[PathSource::Candidates as usize] * 4 > l.qps * 3,
            "{l:?}"
        );
        let Verdict::NotEnoughEvidence(why) = &l.verdict else {
            panic!("{l:?}");
        };
        assert!(why.contains("the port its answers come from"), "{why}");
    }

    #[test]
    fn pfc_pauses_name_the_congested_link_direction_where_traffic_is_sparse() {
        let truth = sim::leaf_spine(4, 6, 4, Some(9));
        let blind = sim::leaf_spine(4, 6, 4, None);
        let mut rng = SplitMix64::new(61);
        let sparse = |seed| Workload {
            qps: 250,
            ..work(seed)
        };
        let (mut both_ways, mut one_way, runs) = (0, 0, 20);
        for run in 0..runs {
            let link = fabric_link(&truth, &mut rng);
            let ev = sim::evidence(&truth, &sparse(run as u64 + 900), &[]);
            // Congested both ways, and one way only (from the spine down, say): the hosts
            // crossing it the other way were not paused, and count against it.
            let down = truth.links[link as usize].b.node;
            for (way, hits) in [(None, &mut both_ways), (Some(down), &mut one_way)] {
                let mut ev = ev.clone();
                sim::pause(&truth, &mut ev, &[(link, way)]);
                let l = loc(&truth, &ev, Signal::Pfc);
                match &l.verdict {
                    Verdict::Found => {
                        assert_eq!(l.suspects[0].link, Some(link), "run {run}: {l:?}");
                        *hits += 1;
                    }
                    Verdict::NotEnoughEvidence(_) => {}
                    Verdict::Clean(_) => panic!("run {run}: pauses called clean: {l:?}"),
                }
                // Traced paths: the same (each crossed in the trace's order).
                let l = localize(&truth, &given(&ev, true), Signal::Pfc, &Options::default());
                if l.verdict == Verdict::Found {
                    assert_eq!(l.suspects[0].link, Some(link), "run {run}: {l:?}");
                }
                // Unknown paths: never placed.
                let l = loc(&blind, &ev, Signal::Pfc);
                assert_ne!(l.verdict, Verdict::Found, "run {run}: {l:?}");
            }
        }
        assert!(both_ways * 10 >= runs * 9, "{both_ways} of {runs}");
        assert!(one_way * 10 >= runs * 9, "one way: {one_way} of {runs}");
        // Dense traffic: every host crosses every uplink, every host paused: cannot tell.
        let link = fabric_link(&truth, &mut rng);
        let mut ev = sim::evidence(&truth, &work(950), &[]);
        sim::pause(&truth, &mut ev, &[(link, None)]);
        let l = loc(&truth, &ev, Signal::Pfc);
        let Verdict::NotEnoughEvidence(why) = &l.verdict else {
            panic!("{l:?}");
        };
        assert!(why.contains("shares too many links"), "{why}");
        // No pauses: clean.
        let ev = sim::evidence(&truth, &sparse(951), &[]);
        assert!(matches!(
            loc(&truth, &ev, Signal::Pfc).verdict,
            Verdict::Clean(_)
        ));
        // A slow receiver (its NIC pausing its leaf): every host sending to it paused, and the
        // receiver named by its own link.
        let receiver = truth.node("h9").unwrap();
        let own = truth.adjacent[receiver as usize][0].1;
        let mut ev = sim::evidence(&truth, &sparse(952), &[]);
        sim::pause(
            &truth,
            &mut ev,
            &[(own, Some(truth.links[own as usize].b.node))],
        );
        let l = loc(&truth, &ev, Signal::Pfc);
        assert_eq!(l.verdict, Verdict::Found, "{l:?}");
        assert_eq!(
            (l.suspects[0].kind, l.suspects[0].node),
            (SuspectKind::Host, Some(receiver)),
            "{l:?}"
        );
        // Its own link is on every candidate path too: with the paths unknown, still not
        // placed.
        let l = loc(&blind, &ev, Signal::Pfc);
        assert!(matches!(l.verdict, Verdict::NotEnoughEvidence(_)), "{l:?}");
    }

    #[test]
    fn cnps_stand_for_the_marks_not_seen() {
        let truth = sim::leaf_spine(4, 6, 4, Some(9));
        let link = truth
            .link_between(truth.node("l3").unwrap(), truth.node("s1").unwrap())
            .unwrap();
        let ev = sim::evidence(
            &truth,
            &work(810),
            &[Fault {
                link,
                loss: 0.0,
                ce: 0.005,
            }],
        );
        // The senders' hosts saw no marks, only the receivers' CNPs (fewer: one per burst).
        let cnps: Vec<(QpEvidence, Vec<String>)> = ev
            .into_iter()
            .map(|(e, p)| {
                (
                    QpEvidence {
                        ce: 0,
                        cnp: e.ce.div_ceil(3),
                        ..e
                    },
                    p,
                )
            })
            .collect();
        let l = loc(&truth, &cnps, Signal::Ce);
        assert_eq!(l.verdict, Verdict::Found, "{l:?}");
        assert_eq!(l.suspects[0].link, Some(link));
    }

    #[test]
    fn poisson_tail_is_the_upper_tail() {
        assert_eq!(poisson_tail(1.0, 0), 1.0);
        assert!((poisson_tail(1.0, 1) - (1.0 - (-1.0f64).exp())).abs() < 1e-12);
        // P(X >= 4) at mean 0.97, as Python's math gives it:
        // 1 - sum(exp(-m) * m**i / factorial(i) for i in range(4)).
        assert!((poisson_tail(0.97, 4) - 0.017_203_657).abs() < 1e-8);
        assert_eq!(poisson_tail(0.0, 3), 0.0);
        assert_eq!(poisson_tail(2.0, 500), 0.0);
        // Large means (exp(-mean) underflows), against Python's
        // sum(exp(-m + i*log(m) - lgamma(i+1)) for i in range(k, k + 5000)).
        for (m, k, want) in [
            (1000.0, 1100, 0.000_962_630_405_866_280_4),
            (800.0, 900, 0.000_275_913_440_907_361_97),
            (5000.0, 5300, 1.354_518_182_882_969e-5),
        ] {
            let got = poisson_tail(m, k);
            assert!(
                (got / want - 1.0).abs() < 1e-8,
                "P(X >= {k} | {m}) = {got}, not {want}"
            );
        }
        assert_eq!(poisson_tail(1000.0, 990), 1.0);
    }

    #[test]
    fn too_little_evidence_says_so() {
        let truth = sim::leaf_spine(2, 2, 2, None);
        let ev = sim::evidence(
            &truth,
            &Workload {
                qps: 2,
                packets: 2000,
                background: 0.0,
                seed: 1,
            },
            &[],
        );
        let l = loc(&truth, &ev, Signal::Loss);
        assert!(matches!(l.verdict, Verdict::NotEnoughEvidence(_)), "{l:?}");
        // A QP whose ends are on no host of the topology, or too small, is counted out.
        let mut odd = given(&ev, false);
        odd[0].src = "2001:db8::99".parse().unwrap();
        odd[1].packets = 10;
        let l = localize(&truth, &odd, Signal::Loss, &Options::default());
        assert_eq!((l.unplaced, l.too_small, l.qps), (1, 1, 0));
    }
}
