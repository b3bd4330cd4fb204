//! The `ecmp` object of the report: a flow set (live or replayed) run through a switch hash
//! model, per-uplink load against the random ideal, connection pairing and source ports, two
//! tiers, and what would bring the busiest uplink under a target.

use super::{
    hash::{Bucket, Fields, FlowFields, HashFn, HashModel},
    pairing::{SourcePort, pair_with, rdma_udp_sport},
    predict::{FlowLoad, balance, mean_balance, random_trials, spread, two_tiers},
};
use crate::model::{
    Flow,
    ecmp::{Connections, EcmpReport, Model, Tier2, Uplink, WhatIf},
};

/// What to model.
#[derive(Clone, Debug, PartialEq)]
pub struct EcmpOptions {
    pub uplinks: u32,
    pub hash: HashFn,
    pub fields: Fields,
    pub seed: u32,
    pub bucket: Bucket,
    /// Second tier: uplinks per spine and the spine's function, seed and bucket selection.
    pub tier2: Option<(u32, HashFn, u32, Bucket)>,
    /// Toeplitz key (both tiers); the RSS example key when `None`.
    pub toeplitz_key: Option<Vec<u8>>,
    /// Monte Carlo trials of the random ideal, and its seed.
    pub trials: u32,
    pub mc_seed: u64,
    /// The max/mean the what-if aims under.
    pub target: f64,
    /// The flows whose collisions are counted (largest first).
    pub top_k: usize,
}

impl Default for EcmpOptions {
    fn default() -> Self {
        Self {
            uplinks: 4,
            hash: HashFn::Crc32,
            fields: Fields::FiveTuple,
            seed: 0,
            bucket: Bucket::Modulo,
            tier2: None,
            toeplitz_key: None,
            trials: 1000,
            mc_seed: 1,
            target: 1.1,
            top_k: 8,
        }
    }
}

fn fields_of(f: &Flow) -> FlowFields {
    FlowFields {
        src_ip: f.src_ip,
        dst_ip: f.dst_ip,
        src_port: f.udp_src_port,
        dst_port: observer_common::wire::ROCEV2_UDP_PORT,
        protocol: observer_common::wire::IPPROTO_UDP,
        dest_qp: f.dest_qp,
    }
}

fn loads(flows: &[Flow]) -> Vec<FlowLoad> {
    flows
        .iter()
        .map(|f| FlowLoad {
            fields: fields_of(f),
            weight: f.bytes as f64,
        })
        .collect()
}

/// The flows with each paired connection split into `k` QPs (k = 1: as they are): an equal
/// share apiece, both directions of QP j on the drivers' port for QPNs (a + j, b + j).
fn split(
    fl: &[FlowLoad],
    data: &[bool],
    connections: &[super::pairing::Connection],
    k: u32,
) -> Vec<FlowLoad> {
    let data_only = |v: Vec<(usize, FlowLoad)>| -> Vec<FlowLoad> {
        v.into_iter()
            .filter(|(i, _)| data[*i])
            .map(|(_, f)| f)
            .collect()
    };
    if k <= 1 {
        return data_only(fl.iter().copied().enumerate().collect());
    }
    let mut in_connection = vec![false; fl.len()];
    let mut out = Vec::with_capacity(fl.len() * k as usize);
    for c in connections {
        for j in 0..k {
            let qa = c.qpn_a.wrapping_add(j) & 0x00FF_FFFF;
            let qb = c.qpn_b.wrapping_add(j) & 0x00FF_FFFF;
            let port = rdma_udp_sport(qa, qb);
            // flows[0] is a -> b (to b's QP), flows[1] b -> a.
            for (idx, dest_qp) in [(c.flows[0], qb), (c.flows[1], qa)] {
                let mut g = fl[idx];
                g.weight /= f64::from(k);
                g.fields.dest_qp = dest_qp;
                g.fields.src_port = port;
                out.push((idx, g));
            }
        }
        in_connection[c.flows[0]] = true;
        in_connection[c.flows[1]] = true;
    }
    out.extend(
        fl.iter()
            .copied()
            .enumerate()
            .filter(|(i, _)| !in_connection[*i]),
    );
    data_only(out)
}

/// A flow that carries data: SEND, WRITE or READ response packets. The others (ACKs, NAKs,
/// CNPs, READ requests alone) weigh next to nothing on an uplink; counted as flows they would
/// make a few data flows look like many.
fn carries_data(f: &Flow) -> bool {
    f.ops.send + f.ops.write + f.ops.read_response > 0
}

/// The share of random placements the model's busiest uplink must be busier than to be worse
/// than random (and, mirrored, less busy than to be better).
pub const WORSE_PERCENTILE: f64 = 0.95;

/// The verdict on a model for `flows` data flows over `n` uplinks, from where its max/mean
/// falls among random placements of the same flows: `percentile`, the share of them it is
/// busier than. One measure, so the verdict and the percentile shown beside it agree.
fn verdict(flows: usize, n: u32, percentile: f64) -> String {
    if flows == 0 {
        return "no RoCEv2 data flows to model".to_string();
    }
    if flows < 2 * n as usize {
        return format!("too few flows to judge ({flows} data flows over {n} uplinks)");
    }
    if percentile >= WORSE_PERCENTILE {
        format!(
            "worse than random: busier than {:.0}% of random placements",
            percentile * 100.0
        )
    } else if percentile <= 1.0 - WORSE_PERCENTILE {
        format!(
            "better than random: busier than {:.0}% of random placements",
            percentile * 100.0
        )
    } else {
        format!(
            "as good as random: busier than {:.0}% of random placements",
            percentile * 100.0
        )
    }
}

/// What would bring the busiest uplink under the target, from the cause: QPs sharing one
/// 5-tuple (most bytes) need the destination QP in the hash or ports per QP, not more QPs.
/// `with_dest_qp`: max/mean with the destination QP in the hash (absent when the model hashes
/// it already). `as_random`: the hash spreads as well as random placement does, and only more
/// flows would even it out.
fn what_helps(
    shared_tuple: bool,
    qps: Option<u32>,
    with_dest_qp: Option<f64>,
    target: f64,
    as_random: bool,
) -> String {
    let dest_qp = with_dest_qp.map(|m| {
        format!(
            "hash on the destination QP where the switch supports it (5tuple+qp gives max/mean {m:.2})"
        )
    });
    let dest_qp_meets = with_dest_qp.is_some_and(|m| m < target);
    let helps = if shared_tuple {
        let ports = "let the NICs give each QP its own source port (the drivers' rule, not a fixed port or flow label)";
        match &dest_qp {
            Some(d) => format!(
                "most bytes travel on QPs that share one 5-tuple (one UDP source port), and more QPs on it would share it too: {d}, or {ports}"
            ),
            None => format!(
                "most bytes travel on QPs that share one 5-tuple (one UDP source port) and the destination QP in the hash does not even them out: {ports}"
            ),
        }
    } else {
        match (qps, dest_qp_meets, &dest_qp) {
            (Some(k), true, Some(d)) => {
                format!("use {k} QPs per connection (NCCL_IB_QPS_PER_CONNECTION={k}), or {d}")
            }
            (Some(k), _, _) => {
                format!("use {k} QPs per connection (NCCL_IB_QPS_PER_CONNECTION={k})")
            }
            (None, true, Some(d)) => d.clone(),
            (None, _, _) => format!(
                "neither up to 16 QPs per connection nor {} reaches the target: the flows are too few or too unequal for a hash to even them out; spread the traffic over more connections, or use adaptive routing or packet spraying where the fabric has it",
                match with_dest_qp {
                    Some(m) => format!("the destination QP in the hash ({m:.2} with it)"),
                    None => "the destination QP, already hashed,".to_string(),
                }
            ),
        }
    };
    if as_random {
        format!(
            "the hash does as well as random placement with these flows; to bring the busiest uplink under {target:.2}: {helps}"
        )
    } else {
        helps
    }
}

/// The analysis of `flows` under `o`.
pub fn analyse(
    flows: &[Flow],
    joined: &[crate::model::connections::Connection],
    o: &EcmpOptions,
) -> EcmpReport {
    let with_key = |mut m: HashModel| {
        if let Some(key) = &o.toeplitz_key {
            m.toeplitz_key = key.clone();
        }
        m
    };
    let model = with_key(HashModel::new(o.fields, o.hash, o.seed, o.bucket));
    let n = o.uplinks.max(1);
    // Every flow, for the pairing's indices; the data flows are what the uplinks carry.
    let all = loads(flows);
    let data: Vec<bool> = flows.iter().map(carries_data).collect();
    let fl: Vec<FlowLoad> = all
        .iter()
        .zip(&data)
        .filter(|(_, d)| **d)
        .map(|(f, _)| *f)
        .collect();
    let s = spread(&fl, &model, n);
    let weights: Vec<f64> = fl.iter().map(|f| f.weight).collect();
    let balance_bytes = balance(&s.weight);
    let flow_counts: Vec<f64> = s.flows.iter().map(|x| *x as f64).collect();
    let trials = random_trials(&weights, n, o.trials, o.mc_seed);
    let random_bytes = mean_balance(&trials);
    let random_percentile = trials
        .iter()
        .filter(|t| t.max_over_mean < balance_bytes.max_over_mean - 1e-12)
        .count() as f64
        / trials.len().max(1) as f64;

    // Collisions among the largest flows.
    let mut order: Vec<usize> = (0..fl.len()).collect();
    order.sort_by(|a, b| fl[*b].weight.total_cmp(&fl[*a].weight));
    let top: Vec<u32> = order
        .iter()
        .take(o.top_k)
        .map(|i| model.member(&fl[*i].fields, n))
        .collect();
    let top_k_colliding = top
        .iter()
        .filter(|u| top.iter().filter(|v| v == u).count() > 1)
        .count();

    let p = pair_with(flows, joined);
    let mut connections = Connections {
        paired: p.connections.len(),
        unpaired_flows: p.unpaired.len(),
        shared_tuple_flows: p.shared_tuple_flows.len(),
        qp1_flows: p.qp1.len(),
        unpaired_why: p.why,
        ..Connections::default()
    };
    for c in &p.connections {
        match c.source_port {
            SourcePort::Conforming => connections.conforming += 1,
            SourcePort::Overridden { .. } => connections.overridden += 1,
            SourcePort::SharedTuple => connections.shared_tuple += 1,
            SourcePort::PerDirection { .. } => connections.per_direction += 1,
        }
    }

    let tier2 = o.tier2.map(|(n2, hash2, seed2, bucket2)| {
        let spine_model = with_key(HashModel::new(o.fields, hash2, seed2, bucket2));
        let spines = two_tiers(&fl, &model, n, &spine_model, n2);
        // Fewer than half the uplinks a random hash would use for the spine's flows.
        let polarized = spines
            .iter()
            .filter(|sp| {
                let k: u64 = sp.flows.iter().sum();
                let used = sp.flows.iter().filter(|x| **x > 0).count() as f64;
                let m = f64::from(n2);
                let expected = m * (1.0 - (1.0 - 1.0 / m).powf(k as f64));
                n2 > 1 && k > 1 && used < expected / 2.0
            })
            .count();
        Tier2 {
            uplinks: n2,
            hash: crate::units::Named::name(hash2).to_string(),
            seed: seed2,
            bucket: crate::units::Named::name(bucket2).to_string(),
            spines: spines.iter().map(|sp| balance(&sp.weight)).collect(),
            polarized,
        }
    });

    let with_qp = with_key(HashModel::new(
        Fields::FiveTupleQp,
        o.hash,
        o.seed,
        o.bucket,
    ));
    // The destination QP added to the hash: nothing to add when the model hashes it.
    let with_dest_qp = (o.fields != Fields::FiveTupleQp)
        .then(|| balance(&spread(&fl, &with_qp, n).weight).max_over_mean);
    let curve: Vec<f64> = (1..=16u32)
        .map(|k| {
            balance(&spread(&split(&all, &data, &p.connections, k), &model, n).weight).max_over_mean
        })
        .collect();
    // Met as measured: nothing to change (whatever more QPs would give). Else the smallest k
    // from which on every count up to 16 stays under the target.
    let meets_target = !fl.is_empty() && balance_bytes.max_over_mean < o.target;
    let qps_per_connection = if fl.is_empty() {
        None
    } else if meets_target {
        Some(1)
    } else {
        (1..=16u32).find(|k| curve[*k as usize - 1..].iter().all(|m| *m < o.target))
    };
    // Flows whose QPs share one 5-tuple: more QPs on it would share it too.
    let shared_bytes: f64 = p
        .shared_tuple_flows
        .iter()
        .filter(|i| data[**i])
        .map(|i| all[*i].weight)
        .sum();
    let total_bytes: f64 = fl.iter().map(|f| f.weight).sum();
    let shared_cause = total_bytes > 0.0 && shared_bytes * 2.0 >= total_bytes;
    // Enough flows to judge, and no worse than random: only more flows would even them out.
    let as_random = fl.len() >= 2 * n as usize && random_percentile < WORSE_PERCENTILE;
    let hint = (!fl.is_empty() && !meets_target).then(|| {
        what_helps(
            shared_cause,
            qps_per_connection,
            with_dest_qp,
            o.target,
            as_random,
        )
    });

    EcmpReport {
        model: Model {
            uplinks: n,
            hash: crate::units::Named::name(o.hash).to_string(),
            fields: crate::units::Named::name(o.fields).to_string(),
            seed: o.seed,
            bucket: crate::units::Named::name(o.bucket).to_string(),
        },
        flows: fl.len() as u64,
        uplinks: (0..n as usize)
            .map(|u| Uplink {
                uplink: u as u32,
                bytes: s.weight[u] as u64,
                flows: s.flows[u],
            })
            .collect(),
        verdict: verdict(fl.len(), n, random_percentile),
        balance_bytes,
        balance_flows: balance(&flow_counts),
        random_bytes,
        random_percentile,
        top_k: top.len(),
        top_k_colliding,
        connections,
        tier2,
        what_if: WhatIf {
            target: o.target,
            with_dest_qp,
            qps_per_connection,
            meets_target,
            hint,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Direction, Ops};

    fn flow(sport: u16, qp: u32, bytes: u64) -> Flow {
        let (src, dst) = ("198.18.1.1".parse().unwrap(), "198.18.2.1".parse().unwrap());
        Flow {
            direction: Direction::Ingress,
            packets: 1,
            bytes,
            ops: Ops {
                write: 1,
                ..Ops::default()
            },
            untagged: true,
            ..Flow::empty(src, dst, sport, qp)
        }
    }

    #[test]
    fn one_port_for_all_is_worse_than_random_and_only_the_dest_qp_helps() {
        let flows: Vec<Flow> = (0..32).map(|i| flow(4791, 0x100 + i, 1000)).collect();
        let r = analyse(&flows, &[], &EcmpOptions::default());
        assert_eq!(r.balance_bytes.max_over_mean, 4.0);
        assert_eq!(r.balance_bytes.idle, 3);
        assert_eq!(
            r.verdict, "worse than random: busier than 100% of random placements",
            "{}",
            r.verdict
        );
        assert_eq!(r.top_k_colliding, 8);
        assert!(r.what_if.with_dest_qp.unwrap() < 2.0, "{:?}", r.what_if);
        // QPs sharing one fixed port cannot be told apart into connections, and more QPs on
        // that port would share it too: only the destination QP in the hash helps, and the
        // hint says so.
        assert_eq!(r.what_if.qps_per_connection, None, "{:?}", r.what_if);
        assert_eq!(r.connections.shared_tuple_flows, 32);
        assert_eq!(
            r.connections.unpaired_why.shared_tuple, 32,
            "{:?}",
            r.connections
        );
        let hint = r.what_if.hint.as_deref().unwrap();
        assert!(
            hint.contains("share one 5-tuple") && hint.contains("destination QP"),
            "{hint}"
        );
        assert!(!hint.contains("QPS_PER_CONNECTION"), "{hint}");
        let text = crate::render::ecmp::render(&r);
        assert!(
            text.contains("uplink   0") && text.contains("worse than random"),
            "{text}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["model"]["hash"], "crc32");
        assert_eq!(json["model"]["fields"], "5tuple");
    }

    #[test]
    fn more_qps_per_connection_spread_a_few_elephants() {
        // 4 connections (both directions, the drivers' ports): over 8 uplinks too few to
        // judge; over 4, splitting each into k QPs brings max/mean under a target.
        let mut flows = Vec::new();
        for i in 0..4u32 {
            let (qa, qb) = (0x300 + i, 0x700 + i);
            let port = rdma_udp_sport(qa, qb);
            let mut fwd = flow(port, qb, 1_000_000);
            let mut rev = flow(port, qa, 1_000_000);
            fwd.dst_ip = format!("198.18.3.{}", i + 1).parse().unwrap();
            rev.src_ip = fwd.dst_ip;
            rev.dst_ip = fwd.src_ip;
            flows.push(fwd);
            flows.push(rev);
        }
        let r = analyse(
            &flows,
            &[],
            &EcmpOptions {
                uplinks: 8,
                ..EcmpOptions::default()
            },
        );
        assert_eq!(r.connections.paired, 4);
        assert_eq!(
            r.verdict,
            "too few flows to judge (8 data flows over 8 uplinks)"
        );
        let four = analyse(
            &flows,
            &[],
            &EcmpOptions {
                uplinks: 4,
                target: 1.4,
                ..EcmpOptions::default()
            },
        );
        let k = four
            .what_if
            .qps_per_connection
            .expect("some QP count reaches 1.4");
        assert!(k > 1, "{:?} {:?}", four.what_if, four.balance_bytes);
        assert!(!four.what_if.meets_target);
        let hint = four.what_if.hint.as_deref().unwrap();
        assert!(
            hint.ends_with(&format!(
                "use {k} QPs per connection (NCCL_IB_QPS_PER_CONNECTION={k})"
            )),
            "{hint}"
        );
        // No flows: nothing to judge, nothing to propose, one line.
        let empty = analyse(&[], &[], &EcmpOptions::default());
        assert_eq!(empty.verdict, "no RoCEv2 data flows to model");
        assert_eq!(empty.what_if.qps_per_connection, None);
        assert_eq!(empty.what_if.hint, None);
        let text = crate::render::ecmp::render(&empty);
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("no RoCEv2 data flows to model"), "{text}");
    }

    /// A model that hashes the destination QP already proposes no destination QP in the hash.
    #[test]
    fn no_dest_qp_what_if_when_the_qp_is_hashed() {
        let flows: Vec<Flow> = (0..4).map(|i| flow(4791, 0x100 + i, 1000)).collect();
        let o = EcmpOptions {
            fields: Fields::FiveTupleQp,
            ..EcmpOptions::default()
        };
        let r = analyse(&flows, &[], &o);
        assert_eq!(r.what_if.with_dest_qp, None);
        let hint = r.what_if.hint.as_deref().unwrap();
        assert!(!hint.contains("hash on the destination QP"), "{hint}");
        let text = crate::render::ecmp::render(&r);
        assert!(
            text.contains("the destination QP is hashed already"),
            "{text}"
        );
        let json = serde_json::to_value(&r.what_if).unwrap();
        assert!(json.get("with_dest_qp").is_none());
    }

    #[test]
    fn a_balance_that_meets_the_target_is_never_contradicted() {
        // 4 equal flows on ports that CRC32 mod 4 sends one per uplink: max/mean 1.0 meets
        // any target; more QPs per connection might not, but the what-if says it is met.
        let m = super::super::HashModel::new(Fields::FiveTuple, HashFn::Crc32, 0, Bucket::Modulo);
        let mut used = [false; 4];
        let mut flows = Vec::new();
        for port in 0xC000..0xFFFFu16 {
            let f = flow(port, 0x100 + u32::from(port), 1000);
            let u = m.member(&fields_of(&f), 4) as usize;
            if !used[u] {
                used[u] = true;
                flows.push(f);
            }
        }
        let r = analyse(&flows, &[], &EcmpOptions::default());
        assert_eq!(r.balance_bytes.max_over_mean, 1.0);
        assert!(r.what_if.meets_target);
        assert_eq!(r.what_if.qps_per_connection, Some(1));
        assert_eq!(r.what_if.hint, None);
        let text = crate::render::ecmp::render(&r);
        assert!(
            text.contains("the flows as they are already meet the target"),
            "{text}"
        );
        assert!(!text.contains("would not"), "{text}");
    }

    #[test]
    fn driver_ports_spread_about_as_random() {
        let flows: Vec<Flow> = (0..256u32)
            .map(|q| flow(rdma_udp_sport(0x100 + q, 0x900 + q), 0x900 + q, 1000))
            .collect();
        let r = analyse(&flows, &[], &EcmpOptions::default());
        assert!(
            r.verdict.starts_with("as good as random: busier than "),
            "{r:?}"
        );
        let two = analyse(
            &flows,
            &[],
            &EcmpOptions {
                tier2: Some((4, HashFn::Crc32, 0, Bucket::Modulo)),
                ..EcmpOptions::default()
            },
        );
        assert_eq!(two.tier2.unwrap().polarized, 4);
    }
}
