//! The hosts' links to their switches from LLDP: each host's `lldpctl -f json` (lldpd's
//! neighbour table) names, per local interface, the switch on the other end (its system name)
//! and its port. Merged into a topology file, they give the host–leaf links that are the
//! hardest part of a fabric to keep written down.
//!
//! lldpd's JSON has two shapes, both read: `interface` is an object keyed by interface name
//! when the host has one neighbour, and an array of such one-key objects when it has several;
//! `lldp` is empty when it has none. A switch that sends its port ID as an interface name
//! (`ifname`, most switch OSes) is read by it; one that sends a MAC address (lldpd on a Linux
//! box, by default) by its port description.

use serde_json::Value;

use super::{
    FabricError,
    topology::{LinkSpec, NodeSpec, Role, TopologyFile},
};

/// One neighbour of a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbour {
    /// The host's interface.
    pub local_port: String,
    /// The switch's system name (its chassis ID where it sends none).
    pub system: String,
    /// The switch's port.
    pub port: String,
}

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_string)
}

/// The neighbours in one `lldpctl -f json` output (`origin` names it in errors).
pub fn neighbours(json: &str, origin: &str) -> Result<Vec<Neighbour>, FabricError> {
    let bad = |problem: String| FabricError::Lldp {
        origin: origin.into(),
        problem,
    };
    let v: Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
    let lldp = v
        .get("lldp")
        .ok_or_else(|| bad("no \"lldp\" object: not lldpctl -f json's output".into()))?;
    // One neighbour: an object; several: an array of one-key objects; none: absent.
    let entries: Vec<(&String, &Value)> = match lldp.get("interface") {
        None => Vec::new(),
        Some(Value::Object(m)) => m.iter().collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_object)
            .flat_map(|m| m.iter())
            .collect(),
        Some(_) => return Err(bad("\"interface\" is neither an object nor an array".into())),
    };
    let mut out = Vec::new();
    for (local_port, e) in entries {
        let chassis = e
            .get("chassis")
            .and_then(Value::as_object)
            .ok_or_else(|| bad(format!("{local_port}: no chassis")))?;
        // Keyed by the system name (one key, an object); without one, the chassis itself,
        // named by its ID. A node name has no ':' (it separates the port): a MAC's become '-'.
        let system = if chassis.contains_key("id") {
            text(chassis.get("id").and_then(|i| i.get("value")))
        } else if chassis.len() == 1 {
            chassis
                .iter()
                .next()
                .filter(|(_, inner)| inner.is_object())
                .map(|(k, _)| k.clone())
        } else {
            None
        }
        .ok_or_else(|| bad(format!("{local_port}: a chassis without name or ID")))?
        .replace(':', "-");
        let port = e
            .get("port")
            .ok_or_else(|| bad(format!("{local_port}: no port")))?;
        let id = port.get("id");
        let id_type = text(id.and_then(|i| i.get("type"))).unwrap_or_default();
        let id_value = text(id.and_then(|i| i.get("value")));
        let descr = text(port.get("descr"));
        let port = match id_type.as_str() {
            "ifname" | "local" => id_value.or(descr),
            _ => descr.or(id_value),
        }
        .ok_or_else(|| bad(format!("{local_port}: a port without ID or description")))?;
        out.push(Neighbour {
            local_port: local_port.clone(),
            system,
            port,
        });
    }
    Ok(out)
}

/// `base` with each host's links to its neighbours: a host or switch it does not have is added
/// (a host without addresses, a switch as a leaf), a link it has already is kept once, and a
/// host port the base links elsewhere is refused. Checked as a topology before it is returned.
pub fn merge(
    mut base: TopologyFile,
    hosts: &[(String, Vec<Neighbour>)],
) -> Result<TopologyFile, String> {
    let end = |node: &str, port: &str| format!("{node}:{port}");
    for (host, neighbours) in hosts {
        if !base.nodes.iter().any(|n| n.name == *host) {
            base.nodes.push(NodeSpec {
                name: host.clone(),
                role: Role::Host,
                addresses: Vec::new(),
                hash: None,
            });
        }
        for n in neighbours {
            if !base.nodes.iter().any(|x| x.name == n.system) {
                base.nodes.push(NodeSpec {
                    name: n.system.clone(),
                    role: Role::Leaf,
                    addresses: Vec::new(),
                    hash: None,
                });
            }
            let (mine, theirs) = (end(host, &n.local_port), end(&n.system, &n.port));
            let existing = base
                .links
                .iter()
                .find(|l| l.a == mine || l.b == mine || l.a == theirs || l.b == theirs);
            match existing {
                Some(l) if (l.a == mine && l.b == theirs) || (l.b == mine && l.a == theirs) => {}
                Some(l) => {
                    return Err(format!(
                        "LLDP says {mine} goes to {theirs}, the topology file {} - {}",
                        l.a, l.b
                    ));
                }
                None => base.links.push(LinkSpec { a: mine, b: theirs }),
            }
        }
    }
    super::Topology::new(base.nodes.clone(), base.links.clone())?;
    Ok(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real lldpd 1.0.16 output (`lldpctl -f json`), recorded in a netns lab: a host with one
    /// neighbour, a host with two (one switch sends port IDs as MACs, the other as interface
    /// names), a host with none.
    const ONE: &str = include_str!("../../../../tests/fixtures/lldp/h0-one-nic.json");
    const TWO: &str = include_str!("../../../../tests/fixtures/lldp/h1-two-nics.json");
    const NONE: &str = include_str!("../../../../tests/fixtures/lldp/h3-no-neighbour.json");

    fn n(local: &str, system: &str, port: &str) -> Neighbour {
        Neighbour {
            local_port: local.into(),
            system: system.into(),
            port: port.into(),
        }
    }

    #[test]
    fn both_shapes_of_lldpds_json_and_both_kinds_of_port_id() {
        assert_eq!(neighbours(ONE, "h0").unwrap(), [n("eth0", "leaf0", "swp3")]);
        assert_eq!(
            neighbours(TWO, "h1").unwrap(),
            [n("eth0", "leaf0", "swp4"), n("eth1", "leaf1", "swp4")]
        );
        assert_eq!(neighbours(NONE, "h3").unwrap(), []);
        // A chassis that sends no system name: named by its ID.
        let unnamed = r#"{"lldp": {"interface": {"eth0": {"chassis": {"id": {"type": "mac",
            "value": "4a:5c:6a:da:09:04"}, "capability": {"type": "Bridge", "enabled": true}},
            "port": {"id": {"type": "ifname", "value": "Ethernet8"}}}}}}"#;
        assert_eq!(
            neighbours(unnamed, "h4").unwrap(),
            [n("eth0", "4a-5c-6a-da-09-04", "Ethernet8")]
        );
        let e = neighbours("{\"hello\": 1}", "x.json")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "x.json: no \"lldp\" object: not lldpctl -f json's output"
        );
    }

    #[test]
    fn merged_into_a_topology_once_and_a_contradiction_refused() {
        let hosts = vec![
            ("h0".to_string(), neighbours(ONE, "h0").unwrap()),
            ("h1".to_string(), neighbours(TWO, "h1").unwrap()),
        ];
        let mut base = TopologyFile::new();
        base.nodes.push(NodeSpec {
            name: "h0".into(),
            role: Role::Host,
            addresses: vec!["198.18.0.1".parse().unwrap()],
            hash: None,
        });
        base.links.push(LinkSpec {
            a: "leaf0:swp3".into(),
            b: "h0:eth0".into(),
        });
        let t = merge(base.clone(), &hosts).unwrap();
        let names: Vec<&str> = t.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["h0", "leaf0", "h1", "leaf1"]);
        assert_eq!(t.links.len(), 3);
        let text = t.to_toml().unwrap();
        let back = super::super::Topology::parse(&text, "merged").unwrap();
        assert_eq!(back.links.len(), 3);
        assert_eq!(back.nodes[0].addresses.len(), 1);
        // The base says h0's eth0 goes elsewhere.
        base.links[0].a = "leaf9:swp1".into();
        base.nodes.push(NodeSpec {
            name: "leaf9".into(),
            role: Role::Leaf,
            addresses: Vec::new(),
            hash: None,
        });
        assert_eq!(
            merge(base, &hosts).unwrap_err(),
            "LLDP says h0:eth0 goes to leaf0:swp3, the topology file leaf9:swp1 - h0:eth0"
        );
    }
}
