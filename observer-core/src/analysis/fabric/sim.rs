//! Fabrics and evidence made up for tests and benches: a k-ary fat-tree or a leaf-spine, QPs
//! between random hosts taking the paths the switches' hashes give them, and loss or CE marks
//! on chosen links. The truth is the generator's: which links are faulty, and each QP's path.

use std::net::{IpAddr, Ipv4Addr};

use crate::analysis::ecmp::{hash::FlowFields, predict::SplitMix64};

use super::{
    localize::{AckShift, QpEvidence},
    paths::Router,
    topology::{HashSpec, LinkId, LinkSpec, NodeSpec, Role, Topology},
};

fn node(name: String, role: Role, addresses: Vec<IpAddr>, seed: Option<u32>) -> NodeSpec {
    NodeSpec {
        name,
        hash: match (role, seed) {
            (Role::Host, _) | (_, None) => None,
            // One hash function per tier: a function with another seed is no other choice
            // for a CRC (the seed changes every result by one constant of the input's
            // length), so tiers hashing alike would take correlated choices (polarization).
            (_, Some(seed)) => Some(HashSpec {
                fields: "5tuple".into(),
                function: match role {
                    Role::Leaf => "crc32",
                    Role::Switch => "crc32c",
                    _ => "crc16-ccitt",
                }
                .into(),
                // (A CRC-16's seed is 16 bits.)
                seed: if role == Role::Spine {
                    seed & 0xffff
                } else {
                    seed
                },
                bucket: "modulo".into(),
            }),
        },
        role,
        addresses,
    }
}

/// The switches' hash seeds, one per call, derived from `seed` (none without).
fn seeds(seed: Option<u64>) -> impl FnMut() -> Option<u32> {
    let mut rng = seed.map(SplitMix64::new);
    move || rng.as_mut().map(|r| r.next_u64() as u32)
}

/// Host `n`'s address: 198.18.0.0/15, one per host.
pub fn host_address(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 1)) + n))
}

/// A k-ary fat-tree (k even): k pods of k/2 edge switches `e{pod}-{i}` and k/2 aggregation
/// switches `a{pod}-{j}`, (k/2)² cores `c{j}-{m}` (aggregation switch j of every pod reaches
/// cores c{j}-*), k/2 hosts `h{n}` per edge switch. With `seed`, every switch has a hash with
/// its own seed (derived from `seed`), a function per tier; without, no switch's hash is
/// known.
pub fn fat_tree(k: u32, seed: Option<u64>) -> Topology {
    assert!(k >= 2 && k.is_multiple_of(2), "a fat-tree's k is even");
    let half = k / 2;
    let mut next_seed = seeds(seed);
    let (mut nodes, mut links) = (Vec::new(), Vec::new());
    let link = |a: String, b: String| LinkSpec { a, b };
    for j in 0..half {
        for m in 0..half {
            nodes.push(node(format!("c{j}-{m}"), Role::Spine, vec![], next_seed()));
        }
    }
    let mut host = 0;
    for p in 0..k {
        for j in 0..half {
            nodes.push(node(format!("a{p}-{j}"), Role::Switch, vec![], next_seed()));
            for m in 0..half {
                links.push(link(format!("a{p}-{j}:up{m}"), format!("c{j}-{m}:p{p}")));
            }
        }
        for i in 0..half {
            nodes.push(node(format!("e{p}-{i}"), Role::Leaf, vec![], next_seed()));
            for j in 0..half {
                links.push(link(format!("e{p}-{i}:up{j}"), format!("a{p}-{j}:down{i}")));
            }
            for h in 0..half {
                nodes.push(node(
                    format!("h{host}"),
                    Role::Host,
                    vec![host_address(host)],
                    None,
                ));
                links.push(link(format!("h{host}:eth0"), format!("e{p}-{i}:down{h}")));
                host += 1;
            }
        }
    }
    Topology::new(nodes, links).expect("a fat-tree holds together")
}

/// A leaf-spine: `spines` spines `s{i}`, `leaves` leaves `l{j}` each linked to every spine,
/// `hosts_per_leaf` hosts `h{n}` per leaf.
pub fn leaf_spine(spines: u32, leaves: u32, hosts_per_leaf: u32, seed: Option<u64>) -> Topology {
    let mut next_seed = seeds(seed);
    let (mut nodes, mut links) = (Vec::new(), Vec::new());
    for i in 0..spines {
        nodes.push(node(format!("s{i}"), Role::Spine, vec![], next_seed()));
    }
    let mut host = 0;
    for j in 0..leaves {
        nodes.push(node(format!("l{j}"), Role::Leaf, vec![], next_seed()));
        for i in 0..spines {
            links.push(LinkSpec {
                a: format!("l{j}:up{i}"),
                b: format!("s{i}:down{j}"),
            });
        }
        for _ in 0..hosts_per_leaf {
            nodes.push(node(
                format!("h{host}"),
                Role::Host,
                vec![host_address(host)],
                None,
            ));
            links.push(LinkSpec {
                a: format!("h{host}:eth0"),
                b: format!("l{j}:down{host}"),
            });
            host += 1;
        }
    }
    Topology::new(nodes, links).expect("a leaf-spine holds together")
}

/// What goes wrong on a link: a share of the packets that cross it lost, or CE-marked.
#[derive(Clone, Copy, Debug)]
pub struct Fault {
    pub link: LinkId,
    pub loss: f64,
    pub ce: f64,
}

/// A workload: QPs between random hosts (never a host to itself), with random UDP source
/// ports.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    pub qps: usize,
    pub packets: u64,
    /// A share of every QP's packets lost and CE-marked anywhere (the fabric's background).
    pub background: f64,
    pub seed: u64,
}

/// A Poisson draw of mean `mean` (Knuth's: fine for the small means of loss counts; a large
/// one is drawn as its mean).
fn poisson(rng: &mut SplitMix64, mean: f64) -> u64 {
    if mean <= 0.0 {
        return 0;
    }
    if mean > 50.0 {
        return mean.round() as u64;
    }
    let limit = (-mean).exp();
    let (mut k, mut p) = (0u64, 1.0f64);
    loop {
        p *= (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        if p <= limit {
            return k;
        }
        k += 1;
    }
}

/// PFC's backpressure from `congested` link directions (from one node's end towards the
/// other's; `None`: either way) over `ev` (evidence with its true paths): a host one of whose
/// QPs crosses a congested link that way is paused by its leaf, 100 frames per such QP, and
/// every QP it sends carries its pauses (the leaf holds all of the host's traffic of the
/// priority, not only the QPs that cross the link).
pub fn pause(
    truth: &Topology,
    ev: &mut [(QpEvidence, Vec<String>)],
    congested: &[(LinkId, Option<u32>)],
) {
    let mut frames: std::collections::HashMap<IpAddr, u64> = Default::default();
    for (e, nodes) in ev.iter() {
        let crosses = nodes.windows(2).any(|w| {
            let from = truth.node(&w[0]).expect("a node of the truth");
            let to = truth.node(&w[1]).expect("a node of the truth");
            truth.link_between(from, to).is_some_and(|l| {
                congested
                    .iter()
                    .any(|(c, way)| *c == l && way.is_none_or(|f| f == from))
            })
        });
        if crosses {
            *frames.entry(e.src).or_default() += 100;
        }
    }
    for (e, _) in ev.iter_mut() {
        e.paused = frames.get(&e.src).copied().unwrap_or(0);
    }
}

/// A link that delays the packets crossing it (a queue building without loss or marks).
#[derive(Clone, Copy, Debug)]
pub struct Delay {
    pub link: LinkId,
    pub ns: u64,
}

/// The evidence of `work` on `truth` (whose switches' hash models route the QPs) with
/// `faults`: each QP's packets, losses and CE marks, and its true path (node names), which
/// the caller may hand on or leave out.
pub fn evidence(
    truth: &Topology,
    work: &Workload,
    faults: &[Fault],
) -> Vec<(QpEvidence, Vec<String>)> {
    evidence_delayed(truth, work, faults, &[])
}

/// [`evidence`] with ACK latency too: each QP's answers come back from a UDP source port of
/// their own half the time (NICs differ), over the path the switches' hashes give it; a
/// QP's baseline is 8 to 12 µs, and its window's median that plus every `delays` link its
/// round trip crosses (once per crossing). Drawn apart from the rest: the same seed gives
/// the same packets, losses and marks with or without delays.
pub fn evidence_delayed(
    truth: &Topology,
    work: &Workload,
    faults: &[Fault],
    delays: &[Delay],
) -> Vec<(QpEvidence, Vec<String>)> {
    let mut rtt_rng = SplitMix64::new(work.seed ^ 0x5eed_ac4b);
    let hosts: Vec<u32> = (0..truth.nodes.len() as u32)
        .filter(|n| truth.nodes[*n as usize].role == Role::Host)
        .collect();
    let mut rng = SplitMix64::new(work.seed);
    let mut router = Router::new(truth);
    let mut out = Vec::with_capacity(work.qps);
    while out.len() < work.qps {
        let a = hosts[rng.below(hosts.len() as u32) as usize];
        let b = hosts[rng.below(hosts.len() as u32) as usize];
        if a == b {
            continue;
        }
        let (src, dst) = (
            truth.nodes[a as usize].addresses[0],
            truth.nodes[b as usize].addresses[0],
        );
        let src_port = 49152 + rng.below(16384) as u16;
        let dest_qp = 0x100 + rng.below(0xFFFF);
        let fields = FlowFields {
            src_ip: src,
            dst_ip: dst,
            src_port,
            dst_port: 4791,
            protocol: 17,
            dest_qp,
        };
        // The truth: the switches' hashes' path, a random next hop where a switch has none.
        let Some(links) = router.walk(a, b, &fields, |n| rng.below(n)) else {
            continue;
        };
        let links = &links;
        let (mut pass_loss, mut pass_ce) = (1.0 - work.background, 1.0 - work.background);
        for f in faults.iter().filter(|f| links.contains(&f.link)) {
            pass_loss *= 1.0 - f.loss;
            pass_ce *= 1.0 - f.ce;
        }
        let n = work.packets as f64;
        let lost = poisson(&mut rng, n * (1.0 - pass_loss)).min(work.packets);
        let ce = poisson(&mut rng, n * (1.0 - pass_ce)).min(work.packets);
        let mut nodes = vec![truth.name(a).to_string()];
        let mut at = a;
        for l in links {
            let link = &truth.links[*l as usize];
            at = if link.a.node == at {
                link.b.node
            } else {
                link.a.node
            };
            nodes.push(truth.name(at).to_string());
        }
        let back_port = if rtt_rng.below(2) == 0 {
            src_port
        } else {
            49152 + rtt_rng.below(16384) as u16
        };
        let back_qp = 0x100 + rtt_rng.below(0xFFFF);
        let back = FlowFields {
            src_ip: dst,
            dst_ip: src,
            src_port: back_port,
            dst_port: 4791,
            protocol: 17,
            dest_qp: back_qp,
        };
        let baseline_ns = 8_000 + u64::from(rtt_rng.below(4_000));
        let ack = router
            .walk(b, a, &back, |n| rtt_rng.below(n))
            .map(|back_links| {
                let delayed: u64 = delays
                    .iter()
                    .map(|d| {
                        d.ns * (links
                            .iter()
                            .chain(&back_links)
                            .filter(|l| **l == d.link)
                            .count() as u64)
                    })
                    .sum();
                AckShift {
                    samples: (work.packets / 16).max(1),
                    // A window's median wanders up to a fifth above the baseline.
                    p50_ns: baseline_ns + rtt_rng.below(baseline_ns as u32 / 5) as u64 + delayed,
                    baseline_ns,
                    reverse: Some((back_port, back_qp)),
                    reverse_path: None,
                }
            });
        out.push((
            QpEvidence {
                packets: work.packets,
                lost,
                ce,
                ack,
                ..QpEvidence::new(src, dst, src_port, dest_qp)
            },
            nodes,
        ));
    }
    out
}
