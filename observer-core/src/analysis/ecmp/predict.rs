//! Per-uplink load predicted by a hash model, balance metrics, the same metrics under an ideal
//! random hash (seeded Monte Carlo), and two tiers (leaf then spine) to expose polarization.

use super::hash::{FlowFields, HashModel};
pub use crate::model::ecmp::Balance;

/// A flow and its weight (bytes, or a measured rate).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlowLoad {
    pub fields: FlowFields,
    pub weight: f64,
}

/// Load per member (uplink): by weight and by flow count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spread {
    pub weight: Vec<f64>,
    pub flows: Vec<u64>,
}

impl Spread {
    fn new(n: usize) -> Self {
        Self {
            weight: vec![0.0; n],
            flows: vec![0; n],
        }
    }

    fn add(&mut self, member: usize, weight: f64) {
        self.weight[member] += weight;
        self.flows[member] += 1;
    }
}

/// Where `model` sends each flow among `n` uplinks.
pub fn spread(flows: &[FlowLoad], model: &HashModel, n: u32) -> Spread {
    let mut s = Spread::new(n.max(1) as usize);
    for f in flows {
        s.add(model.member(&f.fields, n) as usize, f.weight);
    }
    s
}

/// The balance of `loads` (all zero: perfectly balanced, nothing to balance).
pub fn balance(loads: &[f64]) -> Balance {
    let n = loads.len() as f64;
    let sum: f64 = loads.iter().sum();
    let idle = loads.iter().filter(|x| **x == 0.0).count() as u32;
    if loads.is_empty() || sum <= 0.0 {
        return Balance {
            max_over_mean: 1.0,
            cv: 0.0,
            jain: 1.0,
            idle,
        };
    }
    let mean = sum / n;
    let max = loads.iter().cloned().fold(f64::MIN, f64::max);
    let var = loads.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let sq: f64 = loads.iter().map(|x| x * x).sum();
    Balance {
        max_over_mean: max / mean,
        cv: var.sqrt() / mean,
        jain: sum * sum / (n * sq),
        idle,
    }
}

/// splitmix64: a small, seeded, reproducible generator (no dependency, same on every machine).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (multiply-shift; n at most 2^32).
    pub fn below(&mut self, n: u32) -> u32 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u32
    }
}

/// The balance (by weight) of the same flow weights placed by an ideal random hash over `n`
/// members, once per seeded trial.
pub fn random_trials(weights: &[f64], n: u32, trials: u32, seed: u64) -> Vec<Balance> {
    let mut rng = SplitMix64::new(seed);
    (0..trials.max(1))
        .map(|_| {
            let mut loads = vec![0.0; n.max(1) as usize];
            for w in weights {
                loads[rng.below(n.max(1)) as usize] += w;
            }
            balance(&loads)
        })
        .collect()
}

/// The mean balance (by weight) of the same flow weights placed by an ideal random hash over
/// `n` members, over `trials` seeded trials: what "as good as random" means for this flow set.
pub fn random_ideal(weights: &[f64], n: u32, trials: u32, seed: u64) -> Balance {
    mean_balance(&random_trials(weights, n, trials, seed))
}

/// The mean of several balances.
pub fn mean_balance(trials: &[Balance]) -> Balance {
    let mut acc = Balance::default();
    for b in trials {
        acc.max_over_mean += b.max_over_mean;
        acc.cv += b.cv;
        acc.jain += b.jain;
        acc.idle += b.idle;
    }
    let t = trials.len().max(1) as f64;
    Balance {
        max_over_mean: acc.max_over_mean / t,
        cv: acc.cv / t,
        jain: acc.jain / t,
        idle: (f64::from(acc.idle) / t).round() as u32,
    }
}

/// Two tiers: the leaf spreads flows over `leaf_n` spines with its model; each spine spreads
/// the flows it received over `spine_n` uplinks with its own. Returns, per spine, the load per
/// uplink: with the same function and seed in both tiers a spine receives only flows of one
/// leaf hash value and sends them all one way (polarization).
pub fn two_tiers(
    flows: &[FlowLoad],
    leaf: &HashModel,
    leaf_n: u32,
    spine: &HashModel,
    spine_n: u32,
) -> Vec<Spread> {
    let mut out: Vec<Spread> = (0..leaf_n.max(1))
        .map(|_| Spread::new(spine_n.max(1) as usize))
        .collect();
    for f in flows {
        let s = leaf.member(&f.fields, leaf_n) as usize;
        out[s].add(spine.member(&f.fields, spine_n) as usize, f.weight);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::ecmp::{Bucket, Fields, HashFn, rdma_udp_sport};
    use std::net::Ipv4Addr;

    fn flows(ports: impl IntoIterator<Item = u16>) -> Vec<FlowLoad> {
        ports
            .into_iter()
            .enumerate()
            .map(|(i, p)| FlowLoad {
                fields: FlowFields {
                    src_ip: Ipv4Addr::new(198, 18, 1, 1).into(),
                    dst_ip: Ipv4Addr::new(198, 18, 2, 1).into(),
                    src_port: p,
                    dst_port: 4791,
                    protocol: 17,
                    dest_qp: 0x100 + i as u32,
                },
                weight: 1.0,
            })
            .collect()
    }

    fn crc32(fields: Fields, seed: u32) -> HashModel {
        HashModel::new(fields, HashFn::Crc32, seed, Bucket::Modulo)
    }

    #[test]
    fn all_flows_on_one_port_use_one_uplink() {
        let f = flows(std::iter::repeat_n(4791, 64));
        let s = spread(&f, &crc32(Fields::FiveTuple, 0), 8);
        let b = balance(&s.weight);
        assert_eq!((b.max_over_mean, b.idle), (8.0, 7));
        assert!((b.jain - 1.0 / 8.0).abs() < 1e-12);
        // Adding the destination QP to the hash brings the spread back.
        let qp = balance(&spread(&f, &crc32(Fields::FiveTupleQp, 0), 8).weight);
        assert!(qp.max_over_mean < 2.5 && qp.idle == 0, "{qp:?}");
    }

    #[test]
    fn a_perfect_spread_is_balanced() {
        assert_eq!(
            balance(&[5.0; 4]),
            Balance {
                max_over_mean: 1.0,
                cv: 0.0,
                jain: 1.0,
                idle: 0
            }
        );
        // Ports chosen so that CRC32 mod 4 hits every uplink 16 times.
        let m = crc32(Fields::FiveTuple, 0);
        let mut per = [0; 4];
        let mut ports = Vec::new();
        for p in 0xC000..0xFFFF {
            let f = flows([p]);
            let u = m.member(&f[0].fields, 4) as usize;
            if per[u] < 16 {
                per[u] += 1;
                ports.push(p);
            }
        }
        let b = balance(&spread(&flows(ports), &m, 4).weight);
        assert_eq!((b.max_over_mean, b.jain, b.idle), (1.0, 1.0, 0));
    }

    #[test]
    fn the_random_ideal_is_reproducible_and_sensible() {
        let w = vec![1.0; 64];
        let a = random_ideal(&w, 8, 200, 42);
        assert_eq!(a, random_ideal(&w, 8, 200, 42), "seeded");
        // 64 equal flows over 8 uplinks: a random hash's busiest uplink carries ~1.6x the mean.
        assert!(a.max_over_mean > 1.2 && a.max_over_mean < 2.2, "{a:?}");
        assert!(a.jain > 0.8 && a.jain < 1.0, "{a:?}");
        // One flow: always max/mean = n.
        assert_eq!(random_ideal(&[3.0], 4, 10, 1).max_over_mean, 4.0);
    }

    #[test]
    fn equal_seeds_in_two_tiers_polarize() {
        // Connections with the drivers' source ports, as RDMA NICs send them.
        let f = flows((0..256u32).map(|q| rdma_udp_sport(0x100 + q, 0x900 + q)));
        let same = two_tiers(
            &f,
            &crc32(Fields::FiveTuple, 0),
            4,
            &crc32(Fields::FiveTuple, 0),
            4,
        );
        for s in &same {
            let used = s.flows.iter().filter(|n| **n > 0).count();
            assert_eq!(used, 1, "one uplink per spine: {s:?}");
        }
        // A CRC is linear: another seed XORs every value of equal-length inputs with one
        // constant, which only permutes 2^k uplinks. Polarization stays.
        let seeded = two_tiers(
            &f,
            &crc32(Fields::FiveTuple, 0),
            4,
            &crc32(Fields::FiveTuple, 0xA5A5),
            4,
        );
        for s in &seeded {
            assert_eq!(s.flows.iter().filter(|n| **n > 0).count(), 1, "{s:?}");
        }
        // Another function (or the other bits) at the spine breaks it.
        let crc32c = HashModel::new(Fields::FiveTuple, HashFn::Crc32c, 0, Bucket::Modulo);
        let upper = HashModel::new(Fields::FiveTuple, HashFn::Crc32, 0, Bucket::UpperBits);
        for spine in [crc32c, upper] {
            for s in two_tiers(&f, &crc32(Fields::FiveTuple, 0), 4, &spine, 4) {
                let b = balance(&s.weight);
                assert_eq!(b.idle, 0, "{spine:?}: every uplink used: {s:?}");
                assert!(b.max_over_mean < 1.6, "{spine:?}: {b:?}");
            }
        }
    }
}
