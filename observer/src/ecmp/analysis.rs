//! The `ecmp` object of the report: a flow set (live or replayed) run through a switch hash
//! model, per-uplink load against the random ideal, connection pairing and source ports, two
//! tiers, and what would bring the busiest uplink under a target.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{
    hash::{Bucket, Fields, FlowFields, HashFn, HashModel},
    pairing::{SourcePort, pair, rdma_udp_sport},
    predict::{Balance, FlowLoad, balance, random_ideal, spread, two_tiers},
};
use crate::report::Flow;

/// What to model.
#[derive(Clone, Debug, PartialEq)]
pub struct EcmpOptions {
    pub uplinks: u32,
    pub hash: HashFn,
    pub fields: Fields,
    pub seed: u32,
    pub bucket: Bucket,
    /// Second tier: uplinks per spine and the spine's model (its own seed).
    pub tier2: Option<(u32, HashFn, u32)>,
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
            trials: 1000,
            mc_seed: 1,
            target: 1.1,
            top_k: 8,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EcmpReport {
    pub model: Model,
    /// Flows modelled (mirror copies and host egress included as seen).
    pub flows: u64,
    /// Per uplink, by bytes (the measured rates of one window) and by flows.
    pub uplinks: Vec<Uplink>,
    pub balance_bytes: Balance,
    pub balance_flows: Balance,
    /// The same flows under an ideal random hash (mean of the trials).
    pub random_bytes: Balance,
    /// "as good as random", "1.8x worse than random would be", or "better than random".
    pub verdict: String,
    /// Of the `top_k` largest flows, how many share an uplink with another of them.
    pub top_k: usize,
    pub top_k_colliding: usize,
    pub connections: Connections,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier2: Option<Tier2>,
    pub what_if: WhatIf,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub uplinks: u32,
    pub hash: String,
    pub fields: String,
    pub seed: u32,
    pub bucket: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Uplink {
    pub uplink: u32,
    pub bytes: u64,
    pub flows: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Connections {
    pub paired: usize,
    pub unpaired_flows: usize,
    pub conforming: usize,
    pub overridden: usize,
    pub shared_tuple: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tier2 {
    pub uplinks: u32,
    pub hash: String,
    pub seed: u32,
    /// Per spine (leaf uplink), the balance of its flows over its own uplinks by bytes.
    pub spines: Vec<Balance>,
    /// Spines that received several flows but send them all over one uplink: polarization.
    pub polarized: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    pub target: f64,
    /// max/mean by bytes with the destination QP added to the hash.
    pub with_dest_qp: f64,
    /// The fewest QPs per connection (NCCL_IB_QPS_PER_CONNECTION, 1 to 16) that bring max/mean
    /// under the target, each QP taking an equal share on the drivers' source port for its QP
    /// numbers (1: as measured); none if 16 do not.
    pub qps_per_connection: Option<u32>,
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

/// The flows split into `k` QPs each (k = 1: as they are): an equal share apiece, each QP on
/// the port the drivers give its (consecutive) QP numbers. A fixed source port would stay
/// fixed for every QP and gain nothing: the what-if assumes the drivers' ports.
fn split(flows: &[FlowLoad], k: u32) -> Vec<FlowLoad> {
    if k <= 1 {
        return flows.to_vec();
    }
    let mut out = Vec::with_capacity(flows.len() * k as usize);
    for f in flows {
        for j in 0..k {
            let mut g = *f;
            g.weight = f.weight / f64::from(k);
            let q = f.fields.dest_qp.wrapping_add(j) & 0x00FF_FFFF;
            g.fields.dest_qp = q;
            g.fields.src_port = rdma_udp_sport(q, u32::from(f.fields.src_port).wrapping_add(j));
            out.push(g);
        }
    }
    out
}

fn verdict(model: f64, random: f64) -> String {
    let ratio = model / random;
    if (0.9..=1.1).contains(&ratio) {
        "as good as random".to_string()
    } else if ratio < 0.9 {
        format!("better than random ({ratio:.2}x its max/mean)")
    } else {
        format!("{ratio:.1}x worse than random would be")
    }
}

/// The analysis of `flows` under `o`.
pub fn analyse(flows: &[Flow], o: &EcmpOptions) -> EcmpReport {
    let model = HashModel::new(o.fields, o.hash, o.seed, o.bucket);
    let n = o.uplinks.max(1);
    let fl = loads(flows);
    let s = spread(&fl, &model, n);
    let weights: Vec<f64> = fl.iter().map(|f| f.weight).collect();
    let balance_bytes = balance(&s.weight);
    let flow_counts: Vec<f64> = s.flows.iter().map(|x| *x as f64).collect();
    let random_bytes = random_ideal(&weights, n, o.trials, o.mc_seed);

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

    let p = pair(flows);
    let mut connections = Connections {
        paired: p.connections.len(),
        unpaired_flows: p.unpaired.len(),
        ..Connections::default()
    };
    for c in &p.connections {
        match c.source_port {
            SourcePort::Conforming => connections.conforming += 1,
            SourcePort::Overridden { .. } => connections.overridden += 1,
            SourcePort::SharedTuple => connections.shared_tuple += 1,
        }
    }

    let tier2 = o.tier2.map(|(n2, hash2, seed2)| {
        let spine_model = HashModel::new(o.fields, hash2, seed2, o.bucket);
        let spines = two_tiers(&fl, &model, n, &spine_model, n2);
        // Several flows, all sent one way.
        let polarized = spines
            .iter()
            .filter(|sp| {
                n2 > 1
                    && sp.flows.iter().sum::<u64>() > 1
                    && sp.flows.iter().filter(|x| **x > 0).count() == 1
            })
            .count();
        Tier2 {
            uplinks: n2,
            hash: hash_name(hash2),
            seed: seed2,
            spines: spines.iter().map(|sp| balance(&sp.weight)).collect(),
            polarized,
        }
    });

    let with_qp = HashModel::new(Fields::FiveTupleQp, o.hash, o.seed, o.bucket);
    let with_dest_qp = balance(&spread(&fl, &with_qp, n).weight).max_over_mean;
    let qps_per_connection = (1..=16)
        .find(|k| balance(&spread(&split(&fl, *k), &model, n).weight).max_over_mean < o.target);

    EcmpReport {
        model: Model {
            uplinks: n,
            hash: hash_name(o.hash),
            fields: fields_name(o.fields),
            seed: o.seed,
            bucket: match o.bucket {
                Bucket::Modulo => "modulo".into(),
                Bucket::UpperBits => "upper-bits".into(),
            },
        },
        flows: fl.len() as u64,
        uplinks: (0..n as usize)
            .map(|u| Uplink {
                uplink: u as u32,
                bytes: s.weight[u] as u64,
                flows: s.flows[u],
            })
            .collect(),
        verdict: verdict(balance_bytes.max_over_mean, random_bytes.max_over_mean),
        balance_bytes,
        balance_flows: balance(&flow_counts),
        random_bytes,
        top_k: top.len(),
        top_k_colliding,
        connections,
        tier2,
        what_if: WhatIf {
            target: o.target,
            with_dest_qp,
            qps_per_connection,
        },
    }
}

fn hash_name(h: HashFn) -> String {
    use clap::ValueEnum;
    h.to_possible_value()
        .map_or_else(|| format!("{h:?}"), |v| v.get_name().to_string())
}

fn fields_name(f: Fields) -> String {
    use clap::ValueEnum;
    f.to_possible_value()
        .map_or_else(|| format!("{f:?}"), |v| v.get_name().to_string())
}

impl EcmpReport {
    /// The terminal view: the model, a bar per uplink, the verdict, pairing, tier 2, what-if.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let m = &self.model;
        let _ = writeln!(
            out,
            "ECMP model: {} uplinks, {} of {}, seed {:#x}, {}; {} flows",
            m.uplinks, m.hash, m.fields, m.seed, m.bucket, self.flows
        );
        let total: u64 = self.uplinks.iter().map(|u| u.bytes).sum();
        let max = self
            .uplinks
            .iter()
            .map(|u| u.bytes)
            .max()
            .unwrap_or(0)
            .max(1);
        for u in &self.uplinks {
            let bar = "#".repeat((u.bytes * 40 / max) as usize);
            let share = if total > 0 {
                u.bytes as f64 * 100.0 / total as f64
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                "  uplink {:>3} {:<40} {:>5.1}% {:>6} flows",
                u.uplink, bar, share, u.flows
            );
        }
        let b = &self.balance_bytes;
        let r = &self.random_bytes;
        let _ = writeln!(
            out,
            "max/mean {:.2} (random hash: {:.2}), CV {:.2}, Jain {:.3}, idle uplinks {}: {}",
            b.max_over_mean, r.max_over_mean, b.cv, b.jain, b.idle, self.verdict
        );
        let _ = writeln!(
            out,
            "top {} flows: {} share an uplink with another of them",
            self.top_k, self.top_k_colliding
        );
        let c = &self.connections;
        let _ = writeln!(
            out,
            "connections: {} paired ({} drivers' source port, {} overridden, {} sharing a 5-tuple), {} flows unpaired",
            c.paired, c.conforming, c.overridden, c.shared_tuple, c.unpaired_flows
        );
        if let Some(t) = &self.tier2 {
            let _ = writeln!(
                out,
                "tier 2: {} uplinks per spine, {} seed {:#x}: {} of {} spines polarized (all flows on one uplink)",
                t.uplinks,
                t.hash,
                t.seed,
                t.polarized,
                t.spines.len()
            );
        }
        let w = &self.what_if;
        let qps = match w.qps_per_connection {
            Some(1) => "the flows as they are already do".to_string(),
            Some(k) => format!("{k} QPs per connection would"),
            None => "16 QPs per connection would not".to_string(),
        };
        let _ = writeln!(
            out,
            "what-if (target max/mean {:.2}): destination QP in the hash gives {:.2}; {qps}",
            w.target, w.with_dest_qp
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Direction, Ecn, Ops, Psn};

    fn flow(sport: u16, qp: u32, bytes: u64) -> Flow {
        Flow {
            src_ip: "198.18.1.1".parse().unwrap(),
            dst_ip: "198.18.2.1".parse().unwrap(),
            udp_src_port: sport,
            dest_qp: qp,
            mirror: None,
            direction: Direction::Ingress,
            packets: 1,
            bytes,
            ecn: Ecn::default(),
            ops: Ops::default(),
            psn: Psn::default(),
            dscp: vec![],
            first_seen_ns: 0,
            last_seen_ns: 0,
            rate_bps: 0.0,
        }
    }

    #[test]
    fn one_port_for_all_is_worse_than_random_and_the_what_if_finds_the_way_out() {
        let flows: Vec<Flow> = (0..32).map(|i| flow(4791, 0x100 + i, 1000)).collect();
        let r = analyse(&flows, &EcmpOptions::default());
        assert_eq!(r.balance_bytes.max_over_mean, 4.0);
        assert_eq!(r.balance_bytes.idle, 3);
        assert!(
            r.verdict.ends_with("worse than random would be"),
            "{}",
            r.verdict
        );
        assert_eq!(r.top_k_colliding, 8);
        assert!(r.what_if.with_dest_qp < 2.0, "{:?}", r.what_if);
        assert!(
            r.what_if.qps_per_connection.is_some_and(|k| k > 1),
            "{:?}",
            r.what_if
        );
        let text = r.render();
        assert!(
            text.contains("uplink   0") && text.contains("worse than random"),
            "{text}"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["model"]["hash"], "crc32");
        assert_eq!(json["model"]["fields"], "5tuple");
    }

    #[test]
    fn driver_ports_spread_about_as_random() {
        let flows: Vec<Flow> = (0..256u32)
            .map(|q| flow(rdma_udp_sport(0x100 + q, 0x900 + q), 0x900 + q, 1000))
            .collect();
        let r = analyse(&flows, &EcmpOptions::default());
        assert_eq!(r.verdict, "as good as random", "{r:?}");
        let two = analyse(
            &flows,
            &EcmpOptions {
                tier2: Some((4, HashFn::Crc32, 0)),
                ..EcmpOptions::default()
            },
        );
        assert_eq!(two.tier2.unwrap().polarized, 4);
    }
}
