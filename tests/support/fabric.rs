//! A leaf-spine fabric in network namespaces: Linux routers (spines and leaves, IPv4
//! forwarding, multipath routes hashed on the L4 5-tuple), hosts behind the leaves, the lab
//! link program on both ends of every link (each direction's RoCEv2 frames counted where they
//! leave, and a fault set there at will), generated RoCE traffic between the hosts from real
//! UDP sockets, and the topology file `fabric` reads. Every address is in 198.18.0.0/15.

use std::{
    collections::BTreeMap,
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use observer_common::{LabCounts, LabFault, wire};
use roce_observer::{
    lab::{LinkTap, Netns},
    source::synth::{Ip, QpStream, Workload, host_mac},
};

/// One direction of a link: frames leave `from`'s `port` towards `to`.
pub struct Direction {
    pub from: String,
    pub to: String,
    pub tap: LinkTap,
}

pub struct Host {
    pub name: String,
    pub ns: Netns,
    pub addr: Ipv4Addr,
    pub leaf: usize,
}

/// A QP between two hosts: the requester's data one way, the responder's ACKs the other, each
/// from a UDP source port of its own.
#[derive(Clone, Debug)]
pub struct LabQp {
    pub requester: usize,
    pub responder: usize,
    pub req_port: u16,
    pub resp_port: u16,
    pub req_qpn: u32,
    pub resp_qpn: u32,
}

pub struct LeafSpine {
    pub spines: Vec<Netns>,
    pub leaves: Vec<Netns>,
    pub hosts: Vec<Host>,
    /// Every link's two directions, (a to b) then (b to a).
    pub directions: Vec<Direction>,
    pub topology: String,
}

fn ip(ns: &Netns, args: &[&str]) {
    let out = ns.command("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {} in {}: {}",
        args.join(" "),
        ns.name(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sysctl(ns: &Netns, key: &str, value: &str) {
    let out = ns
        .command("sysctl")
        .args(["-qw", &format!("{key}={value}")])
        .output()
        .expect("run sysctl");
    assert!(
        out.status.success(),
        "sysctl {key}={value} in {}: {}",
        ns.name(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A veth pair from `a`'s `a_if` to `b`'s `b_if`, both up, with their addresses.
fn wire_up(a: (&Netns, &str, &str), b: (&Netns, &str, &str)) {
    let out = std::process::Command::new("ip")
        .args([
            "link",
            "add",
            a.1,
            "netns",
            a.0.name(),
            "type",
            "veth",
            "peer",
            "name",
            b.1,
            "netns",
            b.0.name(),
        ])
        .output()
        .expect("run ip");
    assert!(
        out.status.success(),
        "veth {}:{} - {}:{}: {}",
        a.0.name(),
        a.1,
        b.0.name(),
        b.1,
        String::from_utf8_lossy(&out.stderr)
    );
    for (ns, dev, addr) in [a, b] {
        ip(ns, &["addr", "add", addr, "dev", dev]);
        ip(ns, &["link", "set", dev, "up"]);
    }
}

/// Leaf `l`'s address on the link to its host `h` (a /30 per host link).
fn host_link(l: usize, h: usize) -> (Ipv4Addr, Ipv4Addr) {
    let base = 4 * h as u8;
    (
        Ipv4Addr::new(198, 18, 10 + l as u8, base + 1),
        Ipv4Addr::new(198, 18, 10 + l as u8, base + 2),
    )
}

/// Spine `s`'s and leaf `l`'s addresses on their link (a /30 per link).
fn fabric_link(s: usize, l: usize) -> (Ipv4Addr, Ipv4Addr) {
    let base = 4 * l as u8;
    (
        Ipv4Addr::new(198, 19, s as u8, base + 1),
        Ipv4Addr::new(198, 19, s as u8, base + 2),
    )
}

impl LeafSpine {
    /// `spines` spines, `leaves` leaves, `per_leaf` hosts on each leaf.
    pub fn create(spines: usize, leaves: usize, per_leaf: usize) -> Self {
        let spine_ns: Vec<Netns> = (0..spines)
            .map(|_| Netns::create("rf-spine").unwrap())
            .collect();
        let leaf_ns: Vec<Netns> = (0..leaves)
            .map(|_| Netns::create("rf-leaf").unwrap())
            .collect();
        let mut hosts = Vec::new();
        for l in 0..leaves {
            for h in 0..per_leaf {
                hosts.push(Host {
                    name: format!("h{}", hosts.len()),
                    ns: Netns::create("rf-host").unwrap(),
                    addr: host_link(l, h).1,
                    leaf: l,
                });
            }
        }
        for ns in spine_ns.iter().chain(&leaf_ns) {
            sysctl(ns, "net.ipv4.ip_forward", "1");
            // L4 hashing: a QP's UDP source port picks its path.
            sysctl(ns, "net.ipv4.fib_multipath_hash_policy", "1");
        }
        for ns in spine_ns
            .iter()
            .chain(&leaf_ns)
            .chain(hosts.iter().map(|h| &h.ns))
        {
            // Every probe answered (the default is one ICMP error a second per peer).
            sysctl(ns, "net.ipv4.icmp_ratelimit", "0");
            sysctl(ns, "net.ipv4.icmp_msgs_per_sec", "100000");
            sysctl(ns, "net.ipv4.conf.all.rp_filter", "0");
            sysctl(ns, "net.ipv4.conf.default.rp_filter", "0");
            ip(ns, &["link", "set", "lo", "up"]);
        }
        let mut toml = String::from("schema = \"roce-observer.topology/1\"\n");
        let mut links = Vec::new();
        let mut node = |name: &str, role: &str, addrs: &[Ipv4Addr]| {
            let list: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
            toml += &format!(
                "\n[[node]]\nname = \"{name}\"\nrole = \"{role}\"\naddresses = [{}]\n",
                list.join(", ")
            );
        };
        for (s, _) in spine_ns.iter().enumerate() {
            let addrs: Vec<Ipv4Addr> = (0..leaves).map(|l| fabric_link(s, l).0).collect();
            node(&format!("s{s}"), "spine", &addrs);
        }
        for l in 0..leaves {
            let mut addrs: Vec<Ipv4Addr> = (0..per_leaf).map(|h| host_link(l, h).0).collect();
            addrs.extend((0..spines).map(|s| fabric_link(s, l).1));
            node(&format!("l{l}"), "leaf", &addrs);
        }
        for h in &hosts {
            node(&h.name, "host", &[h.addr]);
        }
        // Host links.
        for (i, host) in hosts.iter().enumerate() {
            let l = host.leaf;
            let h = i % per_leaf;
            let (leaf_addr, host_addr) = host_link(l, h);
            let leaf_if = format!("h{h}");
            wire_up(
                (&leaf_ns[l], &leaf_if, &format!("{leaf_addr}/30")),
                (&host.ns, "eth0", &format!("{host_addr}/30")),
            );
            ip(
                &host.ns,
                &["route", "add", "default", "via", &leaf_addr.to_string()],
            );
            links.push((
                (format!("l{l}"), leaf_if, &leaf_ns[l]),
                (host.name.clone(), "eth0".to_string(), &host.ns),
            ));
        }
        // Fabric links.
        for (s, sns) in spine_ns.iter().enumerate() {
            for (l, lns) in leaf_ns.iter().enumerate() {
                let (spine_addr, leaf_addr) = fabric_link(s, l);
                let (spine_if, leaf_if) = (format!("l{l}"), format!("s{s}"));
                wire_up(
                    (sns, &spine_if, &format!("{spine_addr}/30")),
                    (lns, &leaf_if, &format!("{leaf_addr}/30")),
                );
                links.push((
                    (format!("s{s}"), spine_if, sns),
                    (format!("l{l}"), leaf_if, lns),
                ));
            }
        }
        // Routes: each leaf reaches the other leaves' hosts over every spine; each spine
        // reaches a leaf's hosts through it.
        for (l, lns) in leaf_ns.iter().enumerate() {
            for m in (0..leaves).filter(|&m| m != l) {
                let mut args = vec![
                    "route".to_string(),
                    "add".into(),
                    format!("198.18.{}.0/24", 10 + m),
                ];
                for s in 0..spines {
                    args.extend([
                        "nexthop".into(),
                        "via".into(),
                        fabric_link(s, l).0.to_string(),
                        "dev".into(),
                        format!("s{s}"),
                    ]);
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                ip(lns, &args);
            }
        }
        for (s, sns) in spine_ns.iter().enumerate() {
            for l in 0..leaves {
                ip(
                    sns,
                    &[
                        "route",
                        "add",
                        &format!("198.18.{}.0/24", 10 + l),
                        "via",
                        &fabric_link(s, l).1.to_string(),
                    ],
                );
            }
        }
        let mut directions = Vec::new();
        for ((a, a_if, a_ns), (b, b_if, b_ns)) in links {
            toml += &format!("\n[[link]]\na = \"{a}:{a_if}\"\nb = \"{b}:{b_if}\"\n");
            directions.push(Direction {
                from: a.clone(),
                to: b.clone(),
                tap: LinkTap::attach(a_ns, &a_if).expect("the lab link program"),
            });
            directions.push(Direction {
                from: b,
                to: a,
                tap: LinkTap::attach(b_ns, &b_if).expect("the lab link program"),
            });
        }
        Self {
            spines: spine_ns,
            leaves: leaf_ns,
            hosts,
            directions,
            topology: toml,
        }
    }

    /// `per_pair` QPs from every host to every other, numbered in order: source ports and QP
    /// numbers unique in the lab.
    pub fn qps(&self, per_pair: usize) -> Vec<LabQp> {
        let n = self.hosts.len();
        let mut qps = Vec::new();
        for a in 0..n {
            for b in (0..n).filter(|&b| b != a) {
                for _ in 0..per_pair {
                    let q = qps.len() as u32;
                    qps.push(LabQp {
                        requester: a,
                        responder: b,
                        req_port: 20000 + q as u16,
                        resp_port: 40000 + q as u16,
                        req_qpn: 0x100 + q,
                        resp_qpn: 0x4000 + q,
                    });
                }
            }
        }
        qps
    }

    /// The RoCEv2 frames that left each direction so far, by (from, to).
    pub fn counts(&self) -> BTreeMap<(String, String), LabCounts> {
        self.directions
            .iter()
            .map(|d| {
                (
                    (d.from.clone(), d.to.clone()),
                    d.tap.counts().expect("read the lab counts"),
                )
            })
            .collect()
    }

    /// Sets `fault` on the direction from `from` to `to`.
    pub fn set_fault(&mut self, from: &str, to: &str, fault: LabFault) {
        let d = self
            .directions
            .iter_mut()
            .find(|d| d.from == from && d.to == to)
            .unwrap_or_else(|| panic!("no link direction {from} -> {to}"));
        d.tap.set_fault(fault).expect("set the fault");
    }

    /// Clears every fault.
    pub fn clear_faults(&mut self) {
        for d in &mut self.directions {
            d.tap
                .set_fault(LabFault::default())
                .expect("clear the fault");
        }
    }

    /// A UDP socket of `host`'s namespace bound to its address and `port`, connected to `to`'s
    /// port 4791, sending with DSCP 26 and ECT(0) as RoCE does.
    fn socket(&self, host: usize, port: u16, to: usize) -> UdpSocket {
        let from = SocketAddrV4::new(self.hosts[host].addr, port);
        let to = SocketAddr::V4(SocketAddrV4::new(self.hosts[to].addr, 4791));
        let fd: OwnedFd = self.hosts[host]
            .ns
            .run_in(move || {
                let s = UdpSocket::bind(from).expect("bind a lab QP's port");
                s.connect(to).expect("connect");
                let tos: libc::c_int = 26 << 2 | 0b10;
                // SAFETY: a valid socket and an int option.
                let rc = unsafe {
                    libc::setsockopt(
                        s.as_raw_fd(),
                        libc::IPPROTO_IP,
                        libc::IP_TOS,
                        (&raw const tos).cast(),
                        4,
                    )
                };
                assert_eq!(rc, 0, "IP_TOS: {}", std::io::Error::last_os_error());
                OwnedFd::from(s)
            })
            .unwrap();
        // SAFETY: the descriptor just made, owned from here on.
        unsafe { UdpSocket::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(fd)) }
    }

    /// Sends `packets` WRITEs (1 KiB each) on every QP, an ACK after every fourth and the last,
    /// from the hosts' own sockets, round robin over the QPs from one thread on one CPU (so
    /// that every frame of a QP is seen on one CPU). Returns the UDP datagrams sent per QP
    /// direction as (src host, dst host, src port) -> count.
    pub fn send(&self, qps: &[LabQp], packets: usize) -> BTreeMap<(usize, usize, u16), u64> {
        let mut queues = Vec::new();
        let mut sent = BTreeMap::new();
        for q in qps {
            let (a, b) = (&self.hosts[q.requester], &self.hosts[q.responder]);
            let mut stream = QpStream::new(
                wire::TRANSPORT_RC,
                Ip::v4(a.addr, b.addr),
                [host_mac(1), host_mac(2)],
                [q.req_qpn, q.resp_qpn],
                (q.req_qpn * 7919) & 0xff_ffff,
            );
            let mut w = Workload::default();
            for i in 0..packets {
                stream.write(&mut w, 1024);
                if i % 4 == 3 || i + 1 == packets {
                    let last = stream.last_psn();
                    stream.ack(&mut w, last);
                }
            }
            let req = self.socket(q.requester, q.req_port, q.responder);
            let resp = self.socket(q.responder, q.resp_port, q.requester);
            let mut datagrams = Vec::new();
            for f in &w.frames {
                let b = &f.bytes;
                let ihl = usize::from(b[14] & 0x0f) * 4;
                let src = Ipv4Addr::new(b[26], b[27], b[28], b[29]);
                let from_requester = src == a.addr;
                datagrams.push((from_requester, b[14 + ihl + 8..].to_vec()));
                let key = if from_requester {
                    (q.requester, q.responder, q.req_port)
                } else {
                    (q.responder, q.requester, q.resp_port)
                };
                *sent.entry(key).or_insert(0) += 1;
            }
            queues.push((req, resp, datagrams));
        }
        // A socket on 4791 at every host takes the frames in (the observer has seen them by
        // then): no port-unreachable comes back to fail the senders.
        let _sinks: Vec<UdpSocket> = self
            .hosts
            .iter()
            .map(|h| {
                h.ns.run_in(|| UdpSocket::bind("0.0.0.0:4791").expect("bind 4791"))
                    .unwrap()
            })
            .collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                roce_observer::lab::pin_current_thread().expect("pin");
                let longest = queues.iter().map(|q| q.2.len()).max().unwrap_or(0);
                for i in 0..longest {
                    for (req, resp, datagrams) in &queues {
                        if let Some((from_requester, d)) = datagrams.get(i) {
                            let sock = if *from_requester { req } else { resp };
                            sock.send(d).expect("send a lab frame");
                        }
                    }
                }
            });
        });
        sent
    }
}
