//! A QP's path through the fabric, with where it comes from: known (a trace named its hops),
//! hashed (every switch on the way that has equal-cost next hops has a known hash model, so
//! the QP's UDP source port fixes its path), or candidates (where a switch's choice is not
//! known, the path splits equally among its equal-cost next hops, and a vote with it). A path
//! is kept as the links the QP may cross with their probabilities, not as a list of paths.

use std::collections::HashMap;

use crate::analysis::ecmp::hash::FlowFields;

use super::topology::{LinkId, NodeId, Role, Topology};

/// The links a QP may cross, each with the probability that it does: 1 on a known or hashed
/// path; where a node's choice among equal-cost next hops is not known, the probability
/// splits equally among them. Every path is a shortest one, of `hops` links.
#[derive(Clone, Debug, PartialEq)]
pub struct Paths {
    pub source: PathSource,
    /// By link.
    pub links: Vec<(LinkId, f32)>,
    pub hops: u32,
}

impl Paths {
    /// The probability that the QP crosses `link`.
    pub fn through(&self, link: LinkId) -> f64 {
        self.links
            .binary_search_by_key(&link, |(l, _)| *l)
            .map_or(0.0, |i| f64::from(self.links[i].1))
    }

    /// A round trip: this path out and `back` (each link crossed either way, or both, with
    /// the probability that it is crossed at all, the two ways' choices taken as
    /// independent), its hops the links it crosses (expected: the probabilities' sum, so
    /// that its 1/h votes sum to one as a path's do), known only as well as the lesser known
    /// of the two.
    pub fn round_trip(&self, back: &Paths) -> Paths {
        let mut links: Vec<(LinkId, f32)> = Vec::with_capacity(self.links.len() + back.links.len());
        let (mut i, mut j) = (0, 0);
        while i < self.links.len() || j < back.links.len() {
            let a = self.links.get(i).copied();
            let b = back.links.get(j).copied();
            match (a, b) {
                (Some(a), Some(b)) if a.0 == b.0 => {
                    links.push((a.0, 1.0 - (1.0 - a.1) * (1.0 - b.1)));
                    i += 1;
                    j += 1;
                }
                (Some(a), b) if b.is_none_or(|b| a.0 < b.0) => {
                    links.push(a);
                    i += 1;
                }
                (_, Some(b)) => {
                    links.push(b);
                    j += 1;
                }
                (_, None) => unreachable!("one of the two has a link left"),
            }
        }
        let hops = links
            .iter()
            .map(|(_, w)| f64::from(*w))
            .sum::<f64>()
            .round()
            .max(1.0) as u32;
        Paths {
            source: self.source.max(back.source),
            links,
            hops,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathSource {
    Known,
    Hashed,
    Candidates,
}

impl PathSource {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Known => "known",
            Self::Hashed => "hashed",
            Self::Candidates => "candidates",
        }
    }
}

/// Finds QPs' paths over one topology: shortest paths (hop count), hosts never transit. The
/// hop counts to each destination are worked out once.
pub struct Router<'t> {
    topo: &'t Topology,
    hops_to: HashMap<NodeId, Vec<u32>>,
    /// A node's next hops, reused.
    next: Vec<(NodeId, LinkId)>,
}

impl<'t> Router<'t> {
    pub fn new(topo: &'t Topology) -> Self {
        Self {
            topo,
            hops_to: HashMap::new(),
            next: Vec::new(),
        }
    }

    /// Hop counts to `dst` from every node (u32::MAX: unreachable), by breadth-first search
    /// that passes through no host.
    fn hops<'h>(
        hops_to: &'h mut HashMap<NodeId, Vec<u32>>,
        topo: &Topology,
        dst: NodeId,
    ) -> &'h [u32] {
        hops_to.entry(dst).or_insert_with(|| {
            let mut hops = vec![u32::MAX; topo.nodes.len()];
            hops[dst as usize] = 0;
            let mut queue = std::collections::VecDeque::from([dst]);
            while let Some(u) = queue.pop_front() {
                if u != dst && topo.nodes[u as usize].role == Role::Host {
                    continue;
                }
                for &(v, _) in &topo.adjacent[u as usize] {
                    if hops[v as usize] == u32::MAX {
                        hops[v as usize] = hops[u as usize] + 1;
                        queue.push_back(v);
                    }
                }
            }
            hops
        })
    }

    /// The end of `link` a shortest path to `dst` crosses it from: the one farther from `dst`
    /// (the `a` end when neither is).
    pub fn from_end(&mut self, dst: NodeId, link: LinkId) -> NodeId {
        let hops = Self::hops(&mut self.hops_to, self.topo, dst);
        let l = &self.topo.links[link as usize];
        if hops[l.b.node as usize] > hops[l.a.node as usize] && hops[l.b.node as usize] != u32::MAX
        {
            l.b.node
        } else {
            l.a.node
        }
    }

    /// Node `u`'s next hops towards the destination whose hop counts are `hops` (in its
    /// neighbours' order), into `out`.
    fn next_hops(
        topo: &Topology,
        hops: &[u32],
        dst: NodeId,
        u: NodeId,
        out: &mut Vec<(NodeId, LinkId)>,
    ) {
        out.clear();
        out.extend(topo.adjacent[u as usize].iter().copied().filter(|(v, _)| {
            hops[*v as usize] != u32::MAX
                && hops[*v as usize] + 1 == hops[u as usize]
                && (*v == dst || topo.nodes[*v as usize].role != Role::Host)
        }));
    }

    /// The links from host `src` to host `dst` a QP with these fields may cross: at each node
    /// with several equal-cost next hops (ordered by name), its hash model's choice, or each
    /// of them equally. The probabilities flow hop by hop, not path by path (a k=16 fat-tree
    /// has 64 paths between pods, over 146 links). Without the QP's fields, every node's next
    /// hops are its candidates. None when `dst` cannot be reached.
    pub fn paths(&mut self, src: NodeId, dst: NodeId, flow: Option<&FlowFields>) -> Option<Paths> {
        let topo = self.topo;
        let hops = Self::hops(&mut self.hops_to, topo, dst);
        let h = hops[src as usize];
        if h == u32::MAX || src == dst {
            return None;
        }
        let mut links: Vec<(LinkId, f32)> = Vec::new();
        let mut split = false;
        let mut frontier: Vec<(NodeId, f64)> = vec![(src, 1.0)];
        let mut after: Vec<(NodeId, f64)> = Vec::new();
        for _ in 0..h {
            after.clear();
            for &(u, w) in &frontier {
                Self::next_hops(topo, hops, dst, u, &mut self.next);
                let chosen: &[(NodeId, LinkId)] = match (
                    topo.nodes[u as usize].hash.as_ref().zip(flow),
                    self.next.len(),
                ) {
                    (_, 0 | 1) => &self.next,
                    (Some((model, flow)), n) => {
                        let i = model.member(flow, n as u32) as usize;
                        &self.next[i..=i]
                    }
                    (None, _) => {
                        split = true;
                        &self.next
                    }
                };
                let share = w / chosen.len().max(1) as f64;
                for &(v, l) in chosen {
                    links.push((l, share as f32));
                    match after.iter_mut().find(|(n, _)| *n == v) {
                        Some(e) => e.1 += share,
                        None => after.push((v, share)),
                    }
                }
            }
            std::mem::swap(&mut frontier, &mut after);
        }
        links.sort_unstable_by_key(|(l, _)| *l);
        Some(Paths {
            source: if split {
                PathSource::Candidates
            } else {
                PathSource::Hashed
            },
            links,
            hops: h,
        })
    }

    /// One path from `src` to `dst` a QP with these fields takes: a node's hash model's
    /// choice, or `pick(n)` of its n next hops where none is known (the generator's).
    pub fn walk(
        &mut self,
        src: NodeId,
        dst: NodeId,
        flow: &FlowFields,
        mut pick: impl FnMut(u32) -> u32,
    ) -> Option<Vec<LinkId>> {
        let topo = self.topo;
        let hops = Self::hops(&mut self.hops_to, topo, dst);
        if hops[src as usize] == u32::MAX || src == dst {
            return None;
        }
        let mut path = Vec::new();
        let mut u = src;
        while u != dst {
            Self::next_hops(topo, hops, dst, u, &mut self.next);
            let n = self.next.len() as u32;
            let i = match &topo.nodes[u as usize].hash {
                _ if n == 1 => 0,
                Some(model) => model.member(flow, n),
                None => pick(n) % n,
            };
            let (v, l) = self.next[i as usize];
            path.push(l);
            u = v;
        }
        Some(path)
    }

    /// A path a trace named, node by node (host to host): its links, or what is wrong with it.
    pub fn known(&self, nodes: &[String]) -> Result<Paths, String> {
        let ids = nodes
            .iter()
            .map(|n| self.topo.node(n).ok_or_else(|| format!("no node {n:?}")))
            .collect::<Result<Vec<_>, _>>()?;
        if ids.len() < 2 {
            return Err("a path has at least two nodes".into());
        }
        for (i, n) in ids.iter().enumerate() {
            if ids[..i].contains(n) {
                return Err(format!("{} is on the path twice", self.topo.name(*n)));
            }
            if i > 0 && i + 1 < ids.len() && self.topo.nodes[*n as usize].role == Role::Host {
                return Err(format!(
                    "{} is a host: hosts do not forward",
                    self.topo.name(*n)
                ));
            }
        }
        let mut links = ids
            .windows(2)
            .map(|w| {
                self.topo
                    .link_between(w[0], w[1])
                    .map(|l| (l, 1.0f32))
                    .ok_or_else(|| {
                        format!(
                            "no link between {} and {}",
                            self.topo.name(w[0]),
                            self.topo.name(w[1])
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let hops = links.len() as u32;
        links.sort_unstable_by_key(|(l, _)| *l);
        Ok(Paths {
            source: PathSource::Known,
            links,
            hops,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::sim;
    use super::*;

    fn flow(port: u16) -> FlowFields {
        FlowFields {
            src_ip: "198.18.0.1".parse().unwrap(),
            dst_ip: "198.18.0.2".parse().unwrap(),
            src_port: port,
            dst_port: 4791,
            protocol: 17,
            dest_qp: 0x11,
        }
    }

    #[test]
    fn fat_tree_candidates_split_evenly_and_hashes_pick_one() {
        let t = sim::fat_tree(4, None);
        let mut r = Router::new(&t);
        let (a, b) = (t.node("h0").unwrap(), t.node("h15").unwrap());
        let p = r.paths(a, b, Some(&flow(1000))).unwrap();
        // k=4, between pods: 6 hops over 2 aggregation switches and 4 cores each way: the
        // host links always, each side's 2 edge-aggregation links half the time, the 4
        // aggregation-core links of each side a quarter.
        assert_eq!(p.source, PathSource::Candidates);
        assert_eq!(p.hops, 6);
        let mut shares: Vec<f32> = p.links.iter().map(|(_, w)| *w).collect();
        shares.sort_by(f32::total_cmp);
        assert_eq!(
            shares,
            [[0.25f32; 8].as_slice(), &[0.5; 4], &[1.0; 2]].concat()
        );
        let own = t.link_between(a, t.adjacent[a as usize][0].0).unwrap();
        assert_eq!(p.through(own), 1.0);
        // The shares are those of the enumerated paths: every walk's links are among them,
        // and the walks over every choice cross each link as often as its share says.
        let mut counts = std::collections::HashMap::new();
        for choice in 0..4u32 {
            let mut picks = [choice & 1, choice >> 1].into_iter();
            let path = r
                .walk(a, b, &flow(1000), |_| picks.next().unwrap_or(0))
                .unwrap();
            for l in path {
                *counts.entry(l).or_insert(0.0) += 0.25;
            }
        }
        for (l, w) in &p.links {
            assert_eq!(
                counts.get(l).copied().unwrap_or(0.0),
                f64::from(*w),
                "link {l}"
            );
        }
        // Within an edge switch: one path of two links.
        let c = t.node("h1").unwrap();
        assert_eq!(r.paths(a, c, Some(&flow(1))).unwrap().links.len(), 2);

        let hashed = sim::fat_tree(4, Some(42));
        let mut r = Router::new(&hashed);
        let mut seen = std::collections::HashSet::new();
        for port in 0..64 {
            let p = r.paths(a, b, Some(&flow(port))).unwrap();
            assert_eq!(p.source, PathSource::Hashed);
            assert!(p.links.len() == 6 && p.links.iter().all(|(_, w)| *w == 1.0));
            // The walk takes the hashes' path.
            let mut walked = r.walk(a, b, &flow(port), |_| unreachable!()).unwrap();
            walked.sort_unstable();
            assert_eq!(walked, p.links.iter().map(|(l, _)| *l).collect::<Vec<_>>());
            seen.insert(walked);
        }
        // The ports spread over every path.
        assert_eq!(seen.len(), 4);
    }

    #[test]
    fn known_paths_name_their_links() {
        let t = sim::fat_tree(4, None);
        let r = Router::new(&t);
        let p = r
            .known(&["h0", "e0-0", "a0-1", "c1-0", "a3-1", "e3-1", "h15"].map(String::from))
            .unwrap();
        assert_eq!((p.hops, p.links.len()), (6, 6));
        let e = r.known(&["h0", "a0-1"].map(String::from)).unwrap_err();
        assert_eq!(e, "no link between h0 and a0-1");
        let e = r
            .known(&["h0", "e0-0", "h1", "e0-0", "h0"].map(String::from))
            .unwrap_err();
        assert_eq!(e, "h1 is a host: hosts do not forward");
        let e = r
            .known(&["h0", "e0-0", "a0-0", "e0-0", "h1"].map(String::from))
            .unwrap_err();
        assert_eq!(e, "e0-0 is on the path twice");
    }
}
