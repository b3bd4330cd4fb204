//! Training jobs from the wire: the hosts that talk RC to each other are a job; its traffic on
//! a fine grid of bins comes in communication phases between compute gaps, and the phases'
//! starts repeat at the iteration period.
//!
//! * **Jobs.** Hosts joined by connected (RC, XRC) QPs with traffic: the connected components;
//!   within one, jobs whose QPs send in different bursts are kept apart when each keeps a
//!   period of its own (two trainings on the same hosts, or one after another on new QPs).
//! * **Phases.** The job's busy bins, split at idle runs. Which idle runs end a phase is told by
//!   the runs themselves: their lengths fall in clusters (pauses inside a collective, compute
//!   gaps, a stall), and the compute gaps are the longest cluster whose phases start at a
//!   regular period. A ring's steps are regular too, but shorter: the longest regular level is
//!   the iteration, never a step.
//! * **Period.** The mean of the iteration times within a quarter of their median (a stall or a
//!   slow iteration is not the period), with its standard error; fewer than three iterations,
//!   or most of them off the median, give no period and say why.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use crate::analysis::series::Delta;
use crate::model::{
    FlowRef,
    jobs::{HostPhase, Job, Jobs, Period, Phase},
};

/// One QP direction's traffic on the grid: what each busy bin added.
#[derive(Clone, Debug)]
pub struct QpBins {
    pub flow: FlowRef,
    /// Traffic of a connection (RC, XRC): what joins hosts into a job.
    pub connected: bool,
    /// It carries data (requests, READ responses), not only ACKs, NAKs or CNPs: a host's part
    /// of a phase is its data (its NIC answers on its own, whatever the host is doing), and so
    /// are the phases; what the network showed counts from every direction.
    pub data: bool,
    /// (bin, what it added), bins increasing.
    pub bins: Vec<(u32, Delta)>,
}

/// What the analysis weighs.
#[derive(Clone, Debug)]
pub struct Options {
    /// A QP direction with fewer bytes joins no hosts (a handshake, a probe).
    pub min_bytes: u64,
    /// Idle runs shorter than this many bins never end a phase (a bin boundary inside a busy
    /// stretch).
    pub min_gap_bins: u32,
    /// Iteration times needed for a period.
    pub min_iterations: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            min_bytes: 4096,
            min_gap_bins: 2,
            min_iterations: 3,
        }
    }
}

/// Idle runs whose lengths differ by more than this ratio are of different kinds.
const CLUSTER_RATIO: f64 = 1.5;
/// An iteration time within this share of the median counts towards the period.
const NEAR_MEDIAN: f64 = 0.25;
/// The share of iteration times that must be near the median for a period.
const REGULAR_SHARE: f64 = 2.0 / 3.0;

/// Per flow direction: whether it is a connection's (its opcodes RC or XRC) and whether it
/// carries data (requests, READ responses).
pub type Kinds = BTreeMap<FlowRef, (bool, bool)>;

/// Whether ops `o` carry data.
fn carries_data(o: &crate::model::Ops) -> bool {
    o.send + o.write + o.read_request + o.read_response + o.atomic > 0
}

/// The kinds of a report's flows.
pub fn kinds_of_report(report: &crate::model::Report) -> Kinds {
    report
        .flows
        .iter()
        .map(|f| {
            let rc = f.transports.iter().any(|t| t == "RC" || t == "XRC");
            (FlowRef::of_flow(f), (rc, carries_data(&f.ops)))
        })
        .collect()
}

/// The kinds of a flow table's flows (as [`kinds_of_report`] has them, without the report).
pub fn kinds_of_aggregate(agg: &crate::aggregate::Aggregate) -> Kinds {
    // Bits of `transport_mask` by the opcode's top three bits: RC is 0, XRC 5.
    const CONNECTED: u32 = 1 | 1 << 5;
    agg.flows
        .iter()
        .map(|(k, s)| {
            let ops = crate::model::Ops::from_counts(&s.ops);
            (
                FlowRef::of_key(k),
                (s.transport_mask & CONNECTED != 0, carries_data(&ops)),
            )
        })
        .collect()
}

/// The jobs of a report's flows, from their fixed bins (`bins`).
pub fn of_report(
    report: &crate::model::Report,
    bins: crate::analysis::series::FlowBins,
    opts: &Options,
) -> Jobs {
    of_kinds(&kinds_of_report(report), bins, opts)
}

/// The jobs of flows of `kinds`, from their fixed bins (`bins`).
pub fn of_kinds(kinds: &Kinds, bins: crate::analysis::series::FlowBins, opts: &Options) -> Jobs {
    // A QP direction seen in several mirror sessions: per bin, the session that saw the most
    // of it (two taps see the same packets, which count once; a direction sprayed over
    // mirrored links is undercounted, never double counted).
    let mut by_flow: BTreeMap<FlowRef, BTreeMap<u32, Delta>> = BTreeMap::new();
    for (key, bins) in bins.flows {
        let into = by_flow.entry(FlowRef::of_key(&key)).or_default();
        for (b, d) in bins {
            let had = into.entry(b).or_default();
            if (d.bytes, d.packets) > (had.bytes, had.packets) {
                *had = d;
            }
        }
    }
    let qps: Vec<QpBins> = by_flow
        .into_iter()
        .map(|(flow, bins)| {
            let (connected, data) = kinds.get(&flow).copied().unwrap_or((false, true));
            QpBins {
                connected,
                data,
                flow,
                bins: bins.into_iter().collect(),
            }
        })
        .collect();
    jobs(bins.bin_ns, bins.start_ns, &qps, opts)
}

/// Union-find over indices: the root of `i`'s set (halving the path on the way).
fn root(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// Union-find: `a`'s and `b`'s sets joined, under the lower root.
fn join(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (root(parent, a), root(parent, b));
    parent[ra.max(rb)] = ra.min(rb);
}

/// The jobs of `qps`, on bins of `bin_ns` from `start_ns` (unix ns).
pub fn jobs(bin_ns: u64, start_ns: u64, qps: &[QpBins], opts: &Options) -> Jobs {
    let bin_ns = bin_ns.max(1);
    let bytes = |q: &QpBins| q.bins.iter().map(|(_, d)| d.bytes).sum::<u64>();
    // Hosts joined by connected QPs with traffic (union-find over the hosts' indices).
    let mut index: BTreeMap<IpAddr, usize> = BTreeMap::new();
    let joins: Vec<bool> = qps
        .iter()
        .map(|q| q.connected && bytes(q) >= opts.min_bytes && !q.bins.is_empty())
        .collect();
    let joining: Vec<&QpBins> = qps
        .iter()
        .zip(&joins)
        .filter(|(_, j)| **j)
        .map(|(q, _)| q)
        .collect();
    for q in &joining {
        for ip in [q.flow.src_ip, q.flow.dst_ip] {
            let n = index.len();
            index.entry(ip).or_insert(n);
        }
    }
    let mut parent: Vec<usize> = (0..index.len()).collect();
    for q in &joining {
        let (a, b) = (index[&q.flow.src_ip], index[&q.flow.dst_ip]);
        join(&mut parent, a, b);
    }
    let mut groups: BTreeMap<usize, Vec<&QpBins>> = BTreeMap::new();
    for q in &joining {
        let r = root(&mut parent, index[&q.flow.src_ip]);
        groups.entry(r).or_default().push(q);
    }
    // Every QP between a job's hosts is the job's (CNPs, small ones), whatever its size.
    let host_root: HashMap<IpAddr, usize> = index
        .iter()
        .map(|(ip, i)| (*ip, root(&mut parent, *i)))
        .collect();
    for (q, _) in qps.iter().zip(&joins).filter(|(_, j)| !**j) {
        if q.bins.is_empty() {
            continue;
        }
        if let (Some(a), Some(b)) = (host_root.get(&q.flow.src_ip), host_root.get(&q.flow.dst_ip))
            && a == b
        {
            groups.entry(*a).or_default().push(q);
        }
    }
    let mut jobs: Vec<Job> = groups
        .into_values()
        .flat_map(|members| apart(bin_ns, start_ns, &members, opts))
        .collect();
    jobs.sort_by_key(|j| (j.first_ns, j.hosts.clone()));
    for (i, j) in jobs.iter_mut().enumerate() {
        j.id = format!("job-{}", i + 1);
    }
    let last_bin = qps
        .iter()
        .filter_map(|q| q.bins.last().map(|(b, _)| *b))
        .max();
    Jobs {
        bin_ns,
        start_ns,
        end_ns: last_bin.map_or(start_ns, |b| {
            start_ns.saturating_add(u64::from(b + 1).saturating_mul(bin_ns))
        }),
        jobs,
    }
}

/// Distinct activity patterns weighed for keeping jobs apart, at most (pairs are compared).
const MAX_PATTERNS: usize = 128;
/// QPs busy in this share of the bins either is busy in, or more, are of one job.
const SAME_JOB: f64 = 0.5;

/// A QP's busy bins (data or not) from `first`, each widened by a bin after it (a step across
/// a bin boundary), as a bitset.
fn activity(q: &QpBins, first: u32, words: usize) -> Vec<u64> {
    let mut bits = vec![0u64; words];
    for (b, d) in &q.bins {
        if d.bytes == 0 && d.packets == 0 {
            continue;
        }
        for x in [*b, b.saturating_add(1)] {
            let i = (x.saturating_sub(first)) as usize;
            if let Some(w) = bits.get_mut(i / 64) {
                *w |= 1 << (i % 64);
            }
        }
    }
    bits
}

/// Shared bits over bits in either.
fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    let (mut both, mut either) = (0u32, 0u32);
    for (x, y) in a.iter().zip(b) {
        both += (x & y).count_ones();
        either += (x | y).count_ones();
    }
    if either == 0 {
        0.0
    } else {
        f64::from(both) / f64::from(either)
    }
}

/// Whether two jobs keep the same pace in step, so the wire cannot tell them apart: periods
/// within a tenth, and each phase of one at a steady offset after the last phase of the other
/// before it (two thirds of the offsets within a tenth of the period, or 2 bins, of their
/// median). Traffic whose parts take turns inside each iteration (a tree's reduce then
/// broadcast, pairwise rounds, pipeline stages beside an all-reduce) keeps one offset; two
/// jobs at the same period on their own clocks drift apart.
fn in_step(a: &Job, b: &Job, bin_ns: u64) -> bool {
    let (Some(pa), Some(pb)) = (&a.period, &b.period) else {
        return false;
    };
    let period = pa.ns.max(pb.ns);
    if pa.ns.abs_diff(pb.ns) as f64 > 0.1 * period as f64 {
        return false;
    }
    // Each phase of `a` while `b` runs, after `b`'s last phase start before it (both in time
    // order): most of `a`'s phases must be there (one job after another is not in step).
    let (Some(b_first), Some(b_last)) = (b.phases.first(), b.phases.last()) else {
        return false;
    };
    let b_end = b_last.end_ns.saturating_add(period);
    let mut offsets = Vec::with_capacity(a.phases.len());
    let mut j = 0;
    for p in &a.phases {
        if p.start_ns < b_first.start_ns || p.start_ns > b_end {
            continue;
        }
        while j + 1 < b.phases.len() && b.phases[j + 1].start_ns <= p.start_ns {
            j += 1;
        }
        offsets.push(p.start_ns - b.phases[j].start_ns);
    }
    if offsets.len() < 3 || 3 * offsets.len() < 2 * a.phases.len() {
        return false;
    }
    // Offsets on the circle of the period: parts starting together give offsets near 0 and
    // near a period, which are close.
    let p = pb.ns.max(1);
    let offsets: Vec<u64> = offsets.iter().map(|o| o % p).collect();
    let m = median(&offsets);
    let slack = (period / 10).max(2 * bin_ns);
    let near = offsets
        .iter()
        .filter(|o| {
            let d = o.abs_diff(m);
            d.min(p - d) <= slack
        })
        .count();
    3 * near >= 2 * offsets.len()
}

/// The jobs among hosts joined by `members`: one, or several kept apart when their QPs'
/// activity tells them apart. Two jobs on the same hosts (two trainings sharing the hosts'
/// NICs, or one job after another on new QPs) share hosts but not their busy bins: QPs busy in
/// mostly the same bins are one job's. Parts that keep no period of their own go with the part
/// they share most bins with, and parts that keep the same period in step are one job (a job
/// whose QPs take turns within its iterations); the split stands only when two or more parts
/// remain, each keeping a period. Otherwise the evidence cannot tell them apart and they stay
/// one job. ACK-only and small QPs go with the part whose bins they share most.
fn apart(bin_ns: u64, start_ns: u64, members: &[&QpBins], opts: &Options) -> Vec<Job> {
    let one = || vec![job(bin_ns, start_ns, members, opts)];
    let total = |q: &QpBins| q.bins.iter().map(|(_, d)| d.bytes).sum::<u64>();
    let data: Vec<usize> = (0..members.len())
        .filter(|&i| members[i].data && members[i].connected && total(members[i]) >= opts.min_bytes)
        .collect();
    if data.len() < 2 {
        return one();
    }
    let first = members
        .iter()
        .filter_map(|q| q.bins.first().map(|(b, _)| *b))
        .min()
        .unwrap_or(0);
    let last = members
        .iter()
        .filter_map(|q| q.bins.last().map(|(b, _)| *b))
        .max()
        .unwrap_or(0);
    let words = (last - first) as usize / 64 + 2;
    // Distinct patterns (a job's QPs often share theirs exactly), joined pairwise.
    let mut patterns: Vec<Vec<u64>> = Vec::new();
    let mut index: HashMap<Vec<u64>, usize> = HashMap::new();
    let mut of_qp: Vec<usize> = Vec::with_capacity(data.len());
    for &i in &data {
        let m = activity(members[i], first, words);
        let k = *index.entry(m.clone()).or_insert_with(|| {
            patterns.push(m);
            patterns.len() - 1
        });
        of_qp.push(k);
        if patterns.len() > MAX_PATTERNS {
            return one();
        }
    }
    let mut parent: Vec<usize> = (0..patterns.len()).collect();
    for a in 0..patterns.len() {
        for b in a + 1..patterns.len() {
            if jaccard(&patterns[a], &patterns[b]) >= SAME_JOB {
                join(&mut parent, a, b);
            }
        }
    }
    let mut by_root: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (n, &i) in data.iter().enumerate() {
        let r = root(&mut parent, of_qp[n]);
        by_root.entry(r).or_default().push(i);
    }
    if by_root.len() < 2 {
        return one();
    }
    let build = |p: &[usize]| {
        let qps: Vec<&QpBins> = p.iter().map(|&i| members[i]).collect();
        job(bin_ns, start_ns, &qps, opts)
    };
    let bits_of = |p: &[usize]| {
        let mut bits = vec![0u64; words];
        for &i in p {
            for (w, x) in bits.iter_mut().zip(activity(members[i], first, words)) {
                *w |= x;
            }
        }
        bits
    };
    let shared =
        |a: &[u64], b: &[u64]| -> u32 { a.iter().zip(b).map(|(x, y)| (x & y).count_ones()).sum() };
    // The parts that keep a period of their own, and the others.
    let (mut parts, mut jobs, mut loose) = (Vec::new(), Vec::new(), Vec::new());
    for p in by_root.into_values() {
        let j = build(&p);
        if j.period.is_some() {
            parts.push(p);
            jobs.push(j);
        } else {
            loose.push(p);
        }
    }
    // Parts in step are one job.
    while let Some((a, b)) = (0..jobs.len())
        .flat_map(|a| (a + 1..jobs.len()).map(move |b| (a, b)))
        .find(|&(a, b)| in_step(&jobs[a], &jobs[b], bin_ns) || in_step(&jobs[b], &jobs[a], bin_ns))
    {
        let moved = parts.remove(b);
        jobs.remove(b);
        parts[a].extend(moved);
        jobs[a] = build(&parts[a]);
    }
    if parts.len() < 2 {
        return one();
    }
    let mut marks: Vec<Vec<u64>> = parts.iter().map(|p| bits_of(p)).collect();
    for l in loose {
        let m = bits_of(&l);
        let best = (0..parts.len())
            .max_by_key(|&k| (shared(&marks[k], &m), std::cmp::Reverse(k)))
            .unwrap_or(0);
        for (w, x) in marks[best].iter_mut().zip(&m) {
            *w |= x;
        }
        parts[best].extend(l);
    }
    // The other QPs: with the part whose bins they share most.
    let mut groups: Vec<Vec<&QpBins>> = parts
        .iter()
        .map(|p| p.iter().map(|&i| members[i]).collect())
        .collect();
    let mut is_data = vec![false; members.len()];
    for &i in &data {
        is_data[i] = true;
    }
    for (i, q) in members.iter().enumerate() {
        if is_data[i] {
            continue;
        }
        let m = activity(q, first, words);
        let best = (0..marks.len())
            .max_by_key(|&k| (shared(&marks[k], &m), std::cmp::Reverse(k)))
            .unwrap_or(0);
        groups[best].push(q);
    }
    let jobs: Vec<Job> = groups
        .iter()
        .map(|qps| job(bin_ns, start_ns, qps, opts))
        .collect();
    if jobs.iter().all(|j| j.period.is_some()) {
        jobs
    } else {
        one()
    }
}

/// One job from its QPs.
fn job(bin_ns: u64, start_ns: u64, members: &[&QpBins], opts: &Options) -> Job {
    let at = |bin: u32| start_ns.saturating_add(u64::from(bin).saturating_mul(bin_ns));
    // The job's data bytes per busy bin.
    let mut total: BTreeMap<u32, u64> = BTreeMap::new();
    for q in members.iter().filter(|q| q.data) {
        for (b, d) in &q.bins {
            if d.bytes > 0 {
                *total.entry(*b).or_default() += d.bytes;
            }
        }
    }
    let busy: Vec<u32> = total.keys().copied().collect();
    let (spans, period, no_period, iteration_times) = phases_of(&busy, bin_ns, opts);
    let hosts: BTreeSet<IpAddr> = members
        .iter()
        .flat_map(|q| [q.flow.src_ip, q.flow.dst_ip])
        .collect();
    // Each host's last data received in the phase before (the data its compute started from).
    let mut fed_before: BTreeMap<IpAddr, u64> = BTreeMap::new();
    let mut phases = Vec::with_capacity(spans.len());
    for &(first, last) in &spans {
        let mut per_host: BTreeMap<IpAddr, HostPhase> = BTreeMap::new();
        // The bins in which each host received data.
        let mut received: BTreeMap<IpAddr, Vec<u32>> = BTreeMap::new();
        for q in members {
            let inside = q.bins.iter().filter(|(b, _)| (first..=last).contains(b));
            for (b, d) in inside {
                // What the network showed counts for both ends; the bytes for the sender.
                for (ip, sender) in [(q.flow.src_ip, true), (q.flow.dst_ip, false)] {
                    let h = per_host
                        .entry(ip)
                        .or_insert_with(|| HostPhase::quiet(ip, u64::MAX, 0, 0));
                    h.ce += d.ce;
                    h.cnp += d.cnp;
                    h.naks += d.naks;
                    h.retransmissions += d.retransmissions;
                    if q.data && d.bytes > 0 {
                        if sender {
                            h.bytes += d.bytes;
                            h.start_ns = h.start_ns.min(at(*b));
                            h.end_ns = h.end_ns.max(at(*b + 1));
                        } else {
                            received.entry(ip).or_default().push(*b);
                        }
                    }
                }
            }
        }
        // What each host's first send followed: the last data it received up to it in the
        // phase (a tree's inner host waits for its children's; a pipelined one forwards in the
        // bin it received), else in the phase before.
        for h in per_host.values_mut() {
            let bins = received.get(&h.host).map_or(&[][..], Vec::as_slice);
            let inside = bins.iter().filter(|b| at(**b) <= h.start_ns).max();
            (h.fed_ns, h.fed_in_phase) = match inside {
                Some(b) => (Some(at(*b + 1)), true),
                None => (fed_before.get(&h.host).copied(), false),
            };
        }
        fed_before = received
            .into_iter()
            .filter_map(|(ip, bins)| Some((ip, at(*bins.iter().max()? + 1))))
            .collect();
        phases.push(Phase {
            start_ns: at(first),
            end_ns: at(last + 1),
            bytes: total.range(first..=last).map(|(_, b)| b).sum(),
            // A host that only received in the phase has no sending of its own there.
            hosts: per_host.into_values().filter(|h| h.bytes > 0).collect(),
        });
    }
    let mut qps: Vec<FlowRef> = members.iter().map(|q| q.flow.clone()).collect();
    qps.sort();
    let mut sorted = iteration_times;
    sorted.sort_unstable();
    let quantile = |q: f64| -> Option<u64> {
        (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * q).round() as usize])
    };
    Job {
        id: String::new(),
        hosts: hosts.into_iter().collect(),
        qps,
        bytes: total.values().sum(),
        first_ns: busy.first().map_or(start_ns, |b| at(*b)),
        last_ns: busy.last().map_or(start_ns, |b| at(*b + 1)),
        last_packet_ns: members
            .iter()
            .filter_map(|q| q.bins.last().map(|(b, _)| at(*b + 1)))
            .max()
            .unwrap_or(start_ns),
        period,
        no_period,
        iteration_p50_ns: quantile(0.5),
        iteration_p99_ns: quantile(0.99),
        phases,
        data_peers: data_peers(members, opts.min_bytes),
        ranks: Vec::new(),
        name: None,
    }
}

/// The fewest and most hosts a host of `members` sends data to, over its data directions of
/// `min_bytes` or more, among the hosts that send any.
fn data_peers(members: &[&QpBins], min_bytes: u64) -> Option<(u32, u32)> {
    let mut to: BTreeMap<IpAddr, BTreeSet<IpAddr>> = BTreeMap::new();
    for q in members.iter().filter(|q| q.data) {
        if q.bins.iter().map(|(_, d)| d.bytes).sum::<u64>() >= min_bytes {
            to.entry(q.flow.src_ip).or_default().insert(q.flow.dst_ip);
        }
    }
    let counts = to.values().map(|p| p.len() as u32);
    Some((counts.clone().min()?, counts.max()?))
}

/// The idle runs between busy bins: (length in bins, the busy bin before it).
fn gaps(busy: &[u32]) -> Vec<(u32, u32)> {
    busy.windows(2)
        .map(|w| (w[1] - w[0] - 1, w[0]))
        .filter(|(len, _)| *len > 0)
        .collect()
}

/// The busy bins split at idle runs of at least `threshold` bins: each phase's first and last
/// bin.
fn split(busy: &[u32], threshold: u32) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    for &b in busy {
        match out.last_mut() {
            Some((_, last)) if b - *last - 1 < threshold => *last = b,
            _ => out.push((b, b)),
        }
    }
    out
}

/// Phases' lengths in bins.
fn span_lengths(spans: &[(u32, u32)]) -> Vec<u64> {
    spans.iter().map(|(a, b)| u64::from(b - a + 1)).collect()
}

/// The idle runs from `t` up to (not including) `above` bins.
fn own_gaps(all: &[u32], t: u32, above: u32) -> Vec<u64> {
    all.iter()
        .filter(|l| (t..above).contains(*l))
        .map(|l| u64::from(*l))
        .collect()
}

/// Whether each of `phases` holds the same number (two or more) of `pieces`.
fn evenly_cut(phases: &[(u32, u32)], pieces: &[(u32, u32)]) -> bool {
    let counts: Vec<usize> = phases
        .iter()
        .map(|(a, b)| pieces.iter().filter(|(s, _)| a <= s && s <= b).count())
        .collect();
    counts.first().is_some_and(|c| *c >= 2) && counts.iter().all(|c| *c == counts[0])
}

/// Iteration times (ns) of phases: one's start to the next's.
fn iteration_times(spans: &[(u32, u32)], bin_ns: u64) -> Vec<u64> {
    spans
        .windows(2)
        .map(|w| u64::from(w[1].0 - w[0].0) * bin_ns)
        .collect()
}

/// The median of `v` (sorted here; empty: 0).
pub(crate) fn median(v: &[u64]) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

/// The period of iteration times `times`, when regular enough: those within a quarter of the
/// median, at least `REGULAR_SHARE` of them and at least `min` in all.
fn period_of(times: &[u64], min: usize) -> Result<Period, String> {
    if times.len() < min {
        return Err(format!(
            "{}: a period needs {} at least",
            crate::units::count(times.len() as u64 + 1, "phase"),
            crate::units::count(min as u64, "iteration")
        ));
    }
    let m = median(times) as f64;
    let near: Vec<f64> = times
        .iter()
        .map(|t| *t as f64)
        .filter(|t| (t - m).abs() <= NEAR_MEDIAN * m)
        .collect();
    if (near.len() as f64) < REGULAR_SHARE * times.len() as f64 || near.len() < min {
        return Err(format!(
            "irregular: {} of {} iteration times within {:.0}% of their median",
            near.len(),
            times.len(),
            NEAR_MEDIAN * 100.0
        ));
    }
    let n = near.len() as f64;
    let mean = near.iter().sum::<f64>() / n;
    let var = near.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    let sd = var.sqrt();
    Ok(Period {
        ns: mean.round() as u64,
        iterations: near.len() as u32,
        cv: if mean > 0.0 { sd / mean } else { 0.0 },
        stderr_ns: (sd / n.sqrt()).round() as u64,
    })
}

/// The phases of the busy bins `busy`, the period they keep (or why none), and the iteration
/// times.
#[allow(clippy::type_complexity)]
fn phases_of(
    busy: &[u32],
    bin_ns: u64,
    opts: &Options,
) -> (Vec<(u32, u32)>, Option<Period>, Option<String>, Vec<u64>) {
    // The idle runs' lengths, in clusters (sorted lengths apart by more than CLUSTER_RATIO
    // start a new one): each cluster's shortest length is a candidate threshold.
    let mut lengths: Vec<u32> = gaps(busy)
        .into_iter()
        .map(|(l, _)| l)
        .filter(|l| *l >= opts.min_gap_bins)
        .collect();
    lengths.sort_unstable();
    lengths.dedup();
    let mut edges: Vec<u32> = Vec::new();
    for (i, &l) in lengths.iter().enumerate() {
        if i == 0 || f64::from(l) > CLUSTER_RATIO * f64::from(lengths[i - 1]) {
            edges.push(l);
        }
    }
    // The longest kind of idle run whose phases keep a period: the compute gaps. A kind that
    // splits the traffic twice or more but into too few phases for a period is the
    // iteration's all the same (a short capture): the shorter kinds below it are steps, never
    // iterations. Only a single long gap (a stall) or an irregular kind is passed over.
    let mut first_reason = None;
    let all_gaps: Vec<u32> = gaps(busy).into_iter().map(|(l, _)| l).collect();
    for (k, &t) in edges.iter().enumerate().rev() {
        let spans = split(busy, t);
        let times = iteration_times(&spans, bin_ns);
        // The idle runs of this kind (not of the longer kinds above it).
        let above = edges.get(k + 1).copied().unwrap_or(u32::MAX);
        let own = all_gaps.iter().filter(|l| (t..above).contains(*l)).count();
        match period_of(&times, opts.min_iterations) {
            Ok(p) => return (spans, Some(p), None, times),
            // (A kind of two or more gaps, longer than the phases between them, whose phases
            // the next shorter kind cuts into as many pieces each, as steps cut iterations:
            // stalls and checkpoints come after long stretches of iterations.)
            Err(why)
                if own >= 2
                    && times.len() < opts.min_iterations
                    && k > 0
                    && median(&span_lengths(&spans)) < median(&own_gaps(&all_gaps, t, above))
                    && evenly_cut(&spans, &split(busy, edges[k - 1])) =>
            {
                return (spans, None, Some(why), times);
            }
            Err(why) => {
                first_reason.get_or_insert(why);
            }
        }
    }
    // None: the phases at the widest separation between kinds of idle run (the largest jump
    // between clusters), or one phase.
    let t = edges
        .windows(2)
        .max_by(|a, b| {
            (f64::from(a[1]) / f64::from(a[0])).total_cmp(&(f64::from(b[1]) / f64::from(b[0])))
        })
        .map(|w| w[1])
        .or(edges.first().copied())
        .unwrap_or(u32::MAX);
    let spans = split(busy, t);
    let times = iteration_times(&spans, bin_ns);
    let why = if spans.len() < 2 {
        format!(
            "one phase: no idle run of {} or more between its traffic",
            crate::units::count(u64::from(opts.min_gap_bins), "bin")
        )
    } else {
        period_of(&times, opts.min_iterations)
            .err()
            .or(first_reason)
            .unwrap_or_default()
    };
    (spans, None, Some(why), times)
}

mod ranks;
pub mod sim;

pub use ranks::{PeerProcess, QpOwners, join_peer_processes, join_processes};

#[cfg(test)]
mod tests;
