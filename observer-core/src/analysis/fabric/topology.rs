//! The fabric's topology file: nodes with roles (hosts with their addresses, switches with an
//! optional ECMP hash model) and links with both ends and ports. A TOML file, versioned by its
//! `schema` line; docs/fabric.md documents it.
//!
//! ```toml
//! schema = "roce-observer.topology/1"
//!
//! [[node]]
//! name = "leaf1"
//! role = "leaf"
//! hash = { fields = "5tuple", function = "crc32", seed = 0, bucket = "modulo" }
//!
//! [[node]]
//! name = "h1"
//! role = "host"
//! addresses = ["198.18.1.2"]
//!
//! [[link]]
//! a = "h1:eth0"
//! b = "leaf1:swp1"
//! ```

use std::{collections::HashMap, net::IpAddr};

use serde::{Deserialize, Serialize};

use crate::analysis::ecmp::hash::{Bucket, Fields, HashFn, HashModel};
use crate::units::Named;

use super::FabricError;

/// The `schema` a topology file names.
pub const TOPOLOGY_SCHEMA: &str = "roce-observer.topology/1";

/// A node's place in the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Host,
    Leaf,
    Spine,
    /// A switch of any other tier (a fat-tree's aggregation or core switch, a super-spine).
    Switch,
}

impl Role {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Leaf => "leaf",
            Self::Spine => "spine",
            Self::Switch => "switch",
        }
    }
}

/// A node's index in [`Topology::nodes`].
pub type NodeId = u32;
/// A link's index in [`Topology::links`].
pub type LinkId = u32;

/// A node as the file gives it.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub name: String,
    pub role: Role,
    /// A host's addresses (those its QPs are seen with); a switch's, those it answers traces
    /// from (its interfaces', its loopback's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<IpAddr>,
    /// A switch's ECMP hash, when known: which of its equal-cost next hops a flow takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<HashSpec>,
}

/// A switch's ECMP hash settings (the names of `roce-observer ecmp`'s options).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HashSpec {
    #[serde(default = "default_fields")]
    pub fields: String,
    pub function: String,
    #[serde(default)]
    pub seed: u32,
    #[serde(default = "default_bucket")]
    pub bucket: String,
}

fn default_fields() -> String {
    Fields::FiveTuple.name().into()
}

fn default_bucket() -> String {
    Bucket::Modulo.name().into()
}

/// A link as the file gives it: each end `node` or `node:port`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub a: String,
    pub b: String,
}

/// A topology file as written, before it is checked.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    pub schema: String,
    #[serde(default, rename = "node")]
    pub nodes: Vec<NodeSpec>,
    #[serde(default, rename = "link")]
    pub links: Vec<LinkSpec>,
}

impl TopologyFile {
    /// An empty file of this version.
    pub fn new() -> Self {
        Self {
            schema: TOPOLOGY_SCHEMA.into(),
            nodes: Vec::new(),
            links: Vec::new(),
        }
    }

    /// The file as TOML text.
    pub fn to_toml(&self) -> Result<String, String> {
        toml::to_string(self).map_err(|e| e.to_string())
    }
}

impl Default for TopologyFile {
    fn default() -> Self {
        Self::new()
    }
}

/// A node of a checked topology.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    pub role: Role,
    pub addresses: Vec<IpAddr>,
    pub hash: Option<HashModel>,
}

/// One end of a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct End {
    pub node: NodeId,
    /// Empty when the file named none.
    pub port: String,
}

#[derive(Clone, Debug)]
pub struct Link {
    pub a: End,
    pub b: End,
}

/// A checked topology: names unique, every link between two known nodes, every address one
/// host's.
#[derive(Clone, Debug)]
pub struct Topology {
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
    /// Per node, its neighbours and the links to them, by the neighbour's name (the order a
    /// switch's equal-cost next hops are numbered in).
    pub adjacent: Vec<Vec<(NodeId, LinkId)>>,
    by_name: HashMap<String, NodeId>,
    by_address: HashMap<IpAddr, NodeId>,
}

impl Topology {
    /// Reads a topology file's text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<Self, FabricError> {
        let file = Self::read_file(text, origin)?;
        Self::new(file.nodes, file.links).map_err(|problem| FabricError::Topology {
            origin: origin.into(),
            problem,
        })
    }

    /// A topology file's text read as written (its schema checked, not its nodes and links).
    pub fn read_file(text: &str, origin: &str) -> Result<TopologyFile, FabricError> {
        let file: TopologyFile = toml::from_str(text).map_err(|e| FabricError::Topology {
            origin: origin.into(),
            problem: e.message().to_string(),
        })?;
        if file.schema != TOPOLOGY_SCHEMA {
            return Err(FabricError::Topology {
                origin: origin.into(),
                problem: format!(
                    "schema {:?} is not one this version reads ({TOPOLOGY_SCHEMA:?})",
                    file.schema
                ),
            });
        }
        Ok(file)
    }

    /// A topology of these nodes and links, checked.
    pub fn new(nodes: Vec<NodeSpec>, links: Vec<LinkSpec>) -> Result<Self, String> {
        let mut by_name = HashMap::with_capacity(nodes.len());
        let mut by_address = HashMap::new();
        let mut checked: Vec<Node> = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.into_iter().enumerate() {
            let id = i as NodeId;
            if n.name.is_empty() || n.name.contains(':') {
                return Err(format!(
                    "node {:?}: a name is not empty and has no ':'",
                    n.name
                ));
            }
            if by_name.insert(n.name.clone(), id).is_some() {
                return Err(format!("node {:?} is named twice", n.name));
            }
            for a in &n.addresses {
                match by_address.insert(*a, id) {
                    Some(other) if other == id => {
                        return Err(format!("node {:?} lists address {a} twice", n.name));
                    }
                    Some(other) => {
                        return Err(format!(
                            "address {a} is both {:?}'s and {:?}'s",
                            checked[other as usize].name, n.name
                        ));
                    }
                    None => {}
                }
            }
            let hash = match &n.hash {
                None => None,
                Some(_) if n.role == Role::Host => {
                    return Err(format!("node {:?}: a host has no ECMP hash", n.name));
                }
                Some(h) => Some(hash_model(h).map_err(|e| format!("node {:?}: {e}", n.name))?),
            };
            checked.push(Node {
                name: n.name,
                role: n.role,
                addresses: n.addresses,
                hash,
            });
        }
        let mut adjacent = vec![Vec::new(); checked.len()];
        let mut ports: HashMap<(NodeId, String), usize> = HashMap::new();
        let mut checked_links = Vec::with_capacity(links.len());
        for (i, l) in links.into_iter().enumerate() {
            let end = |s: &str| -> Result<End, String> {
                let (node, port) = s.split_once(':').unwrap_or((s, ""));
                let node = *by_name.get(node).ok_or_else(|| {
                    format!("link {} ({} - {}): no node {node:?}", i + 1, l.a, l.b)
                })?;
                Ok(End {
                    node,
                    port: port.into(),
                })
            };
            let (a, b) = (end(&l.a)?, end(&l.b)?);
            if a.node == b.node {
                return Err(format!(
                    "link {} ({} - {}) joins a node to itself",
                    i + 1,
                    l.a,
                    l.b
                ));
            }
            for e in [&a, &b] {
                if !e.port.is_empty()
                    && let Some(other) = ports.insert((e.node, e.port.clone()), i)
                {
                    return Err(format!(
                        "port {}:{} is on links {} and {}",
                        checked[e.node as usize].name,
                        e.port,
                        other + 1,
                        i + 1
                    ));
                }
            }
            if let Some((_, other)) = adjacent[a.node as usize].iter().find(|(n, _)| *n == b.node) {
                return Err(format!(
                    "links {} and {} both join {} and {}: give a LAG's members as one link",
                    other + 1,
                    i + 1,
                    checked[a.node as usize].name,
                    checked[b.node as usize].name
                ));
            }
            let id = i as LinkId;
            adjacent[a.node as usize].push((b.node, id));
            adjacent[b.node as usize].push((a.node, id));
            checked_links.push(Link { a, b });
        }
        for list in &mut adjacent {
            list.sort_by(|x, y| {
                checked[x.0 as usize]
                    .name
                    .cmp(&checked[y.0 as usize].name)
                    .then(x.1.cmp(&y.1))
            });
        }
        Ok(Self {
            nodes: checked,
            links: checked_links,
            adjacent,
            by_name,
            by_address,
        })
    }

    pub fn node(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// The host an address is (none for a switch's address).
    pub fn host_of(&self, address: &IpAddr) -> Option<NodeId> {
        self.node_of(address)
            .filter(|n| self.nodes[*n as usize].role == Role::Host)
    }

    /// The node, host or switch, an address is.
    pub fn node_of(&self, address: &IpAddr) -> Option<NodeId> {
        self.by_address.get(address).copied()
    }

    pub fn name(&self, node: NodeId) -> &str {
        &self.nodes[node as usize].name
    }

    /// A link as "a:port - b:port".
    pub fn link_name(&self, link: LinkId) -> String {
        let l = &self.links[link as usize];
        let end = |e: &End| {
            if e.port.is_empty() {
                self.name(e.node).to_string()
            } else {
                format!("{}:{}", self.name(e.node), e.port)
            }
        };
        format!("{} - {}", end(&l.a), end(&l.b))
    }

    /// The link between two neighbours (the first, if several).
    pub fn link_between(&self, a: NodeId, b: NodeId) -> Option<LinkId> {
        self.adjacent[a as usize]
            .iter()
            .find(|(n, _)| *n == b)
            .map(|(_, l)| *l)
    }

    /// A link's host, when one of its ends is a host: its own link.
    pub fn host_end(&self, link: LinkId) -> Option<NodeId> {
        let l = &self.links[link as usize];
        [l.a.node, l.b.node]
            .into_iter()
            .find(|n| self.nodes[*n as usize].role == Role::Host)
    }
}

fn hash_model(h: &HashSpec) -> Result<HashModel, String> {
    let fields = Fields::parse(&h.fields)
        .ok_or_else(|| format!("hash fields {:?}: one of {}", h.fields, Fields::names()))?;
    let func = HashFn::parse(&h.function)
        .ok_or_else(|| format!("hash function {:?}: one of {}", h.function, HashFn::names()))?;
    let bucket = Bucket::parse(&h.bucket)
        .ok_or_else(|| format!("hash bucket {:?}: one of {}", h.bucket, Bucket::names()))?;
    if func == HashFn::Crc16Ccitt && h.seed > 0xffff {
        return Err(format!(
            "hash seed {:#x}: a CRC-16's is at most 0xffff",
            h.seed
        ));
    }
    Ok(HashModel::new(fields, func, h.seed, bucket))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
schema = "roce-observer.topology/1"

[[node]]
name = "spine1"
role = "spine"

[[node]]
name = "leaf1"
role = "leaf"
hash = { function = "crc32", seed = 7 }

[[node]]
name = "h1"
role = "host"
addresses = ["198.18.1.2", "2001:db8::1"]

[[link]]
a = "h1:eth0"
b = "leaf1:swp1"

[[link]]
a = "leaf1:swp9"
b = "spine1"
"#;

    #[test]
    fn reads_nodes_links_and_hashes() {
        let t = Topology::parse(SMALL, "small.toml").unwrap();
        assert_eq!(t.nodes.len(), 3);
        let h1 = t.node("h1").unwrap();
        assert_eq!(t.host_of(&"2001:db8::1".parse().unwrap()), Some(h1));
        assert_eq!(t.link_name(0), "h1:eth0 - leaf1:swp1");
        assert_eq!(t.link_name(1), "leaf1:swp9 - spine1");
        let leaf = t.node("leaf1").unwrap();
        assert_eq!(t.nodes[leaf as usize].hash.as_ref().unwrap().seed, 7);
        // Neighbours by name.
        let names: Vec<&str> = t.adjacent[leaf as usize]
            .iter()
            .map(|(n, _)| t.name(*n))
            .collect();
        assert_eq!(names, ["h1", "spine1"]);
        assert_eq!(t.host_end(0), Some(h1));
        assert_eq!(t.host_end(1), None);
        // A switch's address (the one it answers traces from) is its node's, and no host's.
        let t = Topology::parse(
            &SMALL.replace(
                "role = \"leaf\"\n",
                "role = \"leaf\"\naddresses = [\"198.19.0.1\"]\n",
            ),
            "small.toml",
        )
        .unwrap();
        let switch: IpAddr = "198.19.0.1".parse().unwrap();
        assert_eq!(t.node_of(&switch), Some(leaf));
        assert_eq!(t.host_of(&switch), None);
    }

    #[test]
    fn refuses_what_does_not_hold_together() {
        let cases = [
            (SMALL.replace("topology/1", "topology/9"), "schema"),
            (
                SMALL.replace("b = \"spine1\"", "b = \"spine2\""),
                "no node \"spine2\"",
            ),
            (
                SMALL.replace("b = \"spine1\"", "b = \"leaf1\""),
                "to itself",
            ),
            (
                SMALL.replace("swp9", "swp1"),
                "port leaf1:swp1 is on links 1 and 2",
            ),
            (
                SMALL.replace("name = \"spine1\"", "name = \"leaf1\""),
                "named twice",
            ),
            (SMALL.replace("crc32", "md5"), "hash function \"md5\""),
            (
                SMALL.replace("role = \"spine\"", "role = \"router\""),
                "unknown variant",
            ),
            (
                SMALL.replace(
                    "name = \"spine1\"\nrole = \"spine\"",
                    "name = \"spine1\"\nrole = \"spine\"\naddresses = [\"198.18.1.2\"]",
                ),
                "address 198.18.1.2 is both",
            ),
            (
                SMALL.replace("\"2001:db8::1\"", "\"198.18.1.2\""),
                "node \"h1\" lists address 198.18.1.2 twice",
            ),
            (
                SMALL.replace("crc32\", seed = 7", "crc16-ccitt\", seed = 0x10000"),
                "a CRC-16's is at most 0xffff",
            ),
            (
                format!("{SMALL}\n[[link]]\na = \"spine1:x\"\nb = \"leaf1:y\"\n"),
                "links 2 and 3 both join spine1 and leaf1",
            ),
        ];
        for (text, want) in cases {
            let e = Topology::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} should say {want:?}");
            assert!(e.starts_with("topology t.toml: "), "{e:?}");
        }
    }
}
