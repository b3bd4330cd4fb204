//! A job's processes on the observed host: the NIC side's QP table (each QP with its creating
//! process and what that process's environment tells) joined to the job's QP directions.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::model::FlowRef;
use crate::model::jobs::{JobRank, Jobs};
use crate::model::nic::{Nic, ProcessJob, Qp};

/// The addresses of each RDMA device of `nic`: its GIDs' (an IPv4-mapped one as IPv4) and its
/// ports' netdevs'.
pub fn device_addresses(nic: &Nic) -> BTreeMap<&str, BTreeSet<IpAddr>> {
    let mut out: BTreeMap<&str, BTreeSet<IpAddr>> = BTreeMap::new();
    for d in &nic.devices {
        let addrs = out.entry(d.name.as_str()).or_default();
        for p in &d.ports {
            for g in &p.gids {
                if let Ok(a) = g.gid.parse::<std::net::Ipv6Addr>()
                    && !a.is_unspecified()
                {
                    addrs.insert(a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4));
                }
            }
            for i in nic
                .interfaces
                .iter()
                .filter(|i| p.netdevs.contains(&i.name))
            {
                addrs.extend(i.addresses.iter().copied());
            }
        }
    }
    out
}

/// Fills each job's `ranks` and `name` from `nic`'s QP table, this host's. A QP joins a job only
/// on both directions of its connection to an address of its own device: the job carries
/// traffic to its number at that address and, back the other way, to its peer's. Anything
/// less proves nothing (QP numbers are per device: another host's, or another NIC's, may be
/// the same); a device whose addresses were not read joins nothing.
pub fn join_processes(jobs: &mut Jobs, nic: &Nic) {
    let addresses = device_addresses(nic);
    let none = BTreeSet::new();
    for job in &mut jobs.jobs {
        let mut by: BTreeMap<(IpAddr, u32), JobRank> = BTreeMap::new();
        for q in nic.qps.iter().map(|r| &r.qp) {
            let (Some(pid), Some(rqpn)) = (q.pid, q.rqpn) else {
                continue;
            };
            let mine = addresses.get(q.device.as_str()).unwrap_or(&none);
            let Some(host) = local_host(&job.qps, mine, q.lqpn, rqpn) else {
                continue;
            };
            by.entry((host, pid))
                .or_insert_with(|| JobRank {
                    host,
                    pid,
                    comm: q.comm.clone(),
                    qps: 0,
                    seen_by: None,
                    process: q.job.clone().unwrap_or_default(),
                })
                .qps += 1;
        }
        job.ranks = by.into_values().collect();
        job.name = launcher_name(&job.ranks);
    }
}

/// A QP of another host as its fleet records name it (`connection_sides` rows with its
/// process): the QP `qp` at `addr`, connected to `peer_qp` at `peer_addr`, of the process
/// `pid`, over the records' intervals from `first_ns` to `last_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerProcess {
    /// The records' exporter host.
    pub seen_by: String,
    pub addr: IpAddr,
    pub qp: u32,
    pub peer_addr: IpAddr,
    pub peer_qp: u32,
    pub pid: u32,
    pub process: ProcessJob,
    /// Unix-epoch ns.
    pub first_ns: u64,
    pub last_ns: u64,
}

/// Adds to each job's `ranks` the processes of other hosts that `peers` (their fleet records)
/// name, on the same evidence as this host's own and more: the job carries traffic to `qp`
/// at `addr` from `peer_addr`, and back from `addr` to `peer_qp` at `peer_addr`, and the
/// records' intervals overlap the observation (QP numbers and PIDs are reused). An address
/// the report's own QP table names processes on is left to that table; the job's name is
/// told again from every rank.
pub fn join_peer_processes(jobs: &mut Jobs, peers: &[PeerProcess]) {
    let (start, end) = (jobs.start_ns, jobs.end_ns);
    for job in &mut jobs.jobs {
        let directions: BTreeSet<(IpAddr, IpAddr, u32)> = job
            .qps
            .iter()
            .map(|f| (f.src_ip, f.dst_ip, f.dest_qp))
            .collect();
        let local: BTreeSet<IpAddr> = job
            .ranks
            .iter()
            .filter(|r| r.seen_by.is_none())
            .map(|r| r.host)
            .collect();
        let mut qps: BTreeMap<(IpAddr, u32), BTreeSet<u32>> = BTreeMap::new();
        let mut added: BTreeMap<(IpAddr, u32), JobRank> = BTreeMap::new();
        for p in peers {
            if local.contains(&p.addr)
                || p.last_ns < start
                || p.first_ns > end
                || !directions.contains(&(p.peer_addr, p.addr, p.qp))
                || !directions.contains(&(p.addr, p.peer_addr, p.peer_qp))
            {
                continue;
            }
            let key = (p.addr, p.pid);
            qps.entry(key).or_default().insert(p.qp);
            added.entry(key).or_insert_with(|| JobRank {
                host: p.addr,
                pid: p.pid,
                comm: None,
                qps: 0,
                seen_by: Some(p.seen_by.clone()),
                process: p.process.clone(),
            });
        }
        for (key, mut rank) in added {
            rank.qps = u32::try_from(qps[&key].len()).unwrap_or(u32::MAX);
            job.ranks.push(rank);
        }
        job.ranks.sort_by_key(|r| (r.host, r.pid));
        job.name = launcher_name(&job.ranks);
    }
}

/// The job's name when every rank that names a launcher's job names the same one.
fn launcher_name(ranks: &[JobRank]) -> Option<String> {
    let names: BTreeSet<&String> = ranks
        .iter()
        .filter_map(|r| r.process.job.as_ref())
        .collect();
    match names.len() {
        1 => names.into_iter().next().cloned(),
        _ => None,
    }
}

/// Whether `flows` hold both directions of a connection of the QP `lqpn` at `addr` to `rqpn`:
/// a direction to `lqpn` at `addr` whose reverse goes to `rqpn`.
fn connected(flows: &[FlowRef], addr: IpAddr, lqpn: u32, rqpn: u32) -> bool {
    flows.iter().any(|f| {
        f.dest_qp == lqpn
            && f.dst_ip == addr
            && flows
                .iter()
                .any(|r| r.dest_qp == rqpn && r.src_ip == addr && r.dst_ip == f.src_ip)
    })
}

/// The address of `mine` the local QP `lqpn`, connected to `rqpn`, receives on: the
/// destination of a direction to `lqpn` whose reverse goes to `rqpn`. None without such a pair,
/// or with pairs to several addresses.
fn local_host(flows: &[FlowRef], mine: &BTreeSet<IpAddr>, lqpn: u32, rqpn: u32) -> Option<IpAddr> {
    let mut hosts = mine.iter().filter(|a| connected(flows, **a, lqpn, rqpn));
    match (hosts.next(), hosts.next()) {
        (Some(h), None) => Some(*h),
        _ => None,
    }
}

/// The QPs of a host's QP table by the address and number they receive on (every address of
/// their device): who owns a connection's side, for its records.
pub struct QpOwners<'a> {
    by: BTreeMap<(IpAddr, u32), Vec<&'a Qp>>,
}

impl<'a> QpOwners<'a> {
    pub fn of(nic: &'a Nic) -> Self {
        let addresses = device_addresses(nic);
        let mut by: BTreeMap<(IpAddr, u32), Vec<&'a Qp>> = BTreeMap::new();
        for q in nic.qps.iter().map(|r| &r.qp) {
            for a in addresses.get(q.device.as_str()).into_iter().flatten() {
                by.entry((*a, q.lqpn)).or_default().push(q);
            }
        }
        Self { by }
    }

    /// The process's QP that is `lqpn` at `addr` connected to `rqpn`: the one such QP with a
    /// process (two devices with the address and the number tell nothing).
    pub fn owner(&self, addr: IpAddr, lqpn: u32, rqpn: u32) -> Option<&'a Qp> {
        let mut found = self
            .by
            .get(&(addr, lqpn))?
            .iter()
            .filter(|q| q.rqpn == Some(rqpn) && q.pid.is_some());
        match (found.next(), found.next()) {
            (Some(q), None) => Some(*q),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::jobs::Job;
    use crate::model::nic::{Device, Gid, Port, ProcessJob, Qp, QpRow};

    /// This host: mlx5_0 with the RoCE v2 GID of `addr`, and the QP table `qps`.
    fn nic(addr: &str, qps: Vec<Qp>) -> Nic {
        let v4: std::net::Ipv4Addr = addr.parse().unwrap();
        Nic {
            devices: vec![Device {
                name: "mlx5_0".into(),
                ports: vec![Port {
                    port: 1,
                    gids: vec![Gid {
                        index: 3,
                        gid: v4.to_ipv6_mapped().to_string(),
                        kind: "RoCE v2".into(),
                        netdev: String::new(),
                    }],
                    ..Port::default()
                }],
                ..Device::default()
            }],
            qps: qps
                .into_iter()
                .map(|qp| QpRow {
                    qp,
                    wire_packets: None,
                    wire_bytes: None,
                })
                .collect(),
            ..Nic::default()
        }
    }

    fn flow(src: &str, dst: &str, qp: u32) -> FlowRef {
        FlowRef {
            src_ip: src.parse().unwrap(),
            dst_ip: dst.parse().unwrap(),
            udp_src_port: 49152,
            dest_qp: qp,
            direction: Default::default(),
        }
    }

    fn qp(lqpn: u32, rqpn: u32, pid: u32, rank: u32, job: &str) -> Qp {
        Qp {
            device: "mlx5_0".into(),
            port: Some(1),
            lqpn,
            rqpn: Some(rqpn),
            qp_type: "RC".into(),
            state: "RTS".into(),
            pid: Some(pid),
            comm: Some("python".into()),
            job: Some(ProcessJob {
                job: Some(job.into()),
                rank: Some(rank),
                ..Default::default()
            }),
        }
    }

    fn jobs(qps: Vec<FlowRef>) -> Jobs {
        Jobs {
            bin_ns: 1,
            start_ns: 0,
            end_ns: 0,
            jobs: vec![Job {
                id: "job-1".into(),
                hosts: Vec::new(),
                qps,
                bytes: 0,
                first_ns: 0,
                last_ns: 0,
                last_packet_ns: 0,
                period: None,
                no_period: None,
                iteration_p50_ns: None,
                iteration_p99_ns: None,
                phases: Vec::new(),
                data_peers: None,
                ranks: Vec::new(),
                name: None,
            }],
        }
    }

    #[test]
    fn a_connection_seen_both_ways_names_its_local_process() {
        // .2's QP 0x11 is connected to .1's 0x10 (data .1 -> .2, ACKs back), and .2's 0x12
        // sends to .3's 0x13.
        let mut j = jobs(vec![
            flow("198.18.0.1", "198.18.0.2", 0x11),
            flow("198.18.0.2", "198.18.0.1", 0x10),
            flow("198.18.0.2", "198.18.0.3", 0x13),
            flow("198.18.0.3", "198.18.0.2", 0x12),
        ]);
        let table = [
            qp(0x11, 0x10, 7, 1, "slurm:42"),
            qp(0x12, 0x13, 7, 1, "slurm:42"),
            // Not the job's: no traffic to it.
            qp(0x40, 0x41, 8, 5, "slurm:43"),
        ];
        join_processes(&mut j, &nic("198.18.0.2", table.to_vec()));
        let job = &j.jobs[0];
        assert_eq!(job.ranks.len(), 1, "{:?}", job.ranks);
        let r = &job.ranks[0];
        assert_eq!(r.host, "198.18.0.2".parse::<IpAddr>().unwrap());
        assert_eq!((r.pid, r.qps, r.process.rank), (7, 2, Some(1)));
        assert_eq!(job.name.as_deref(), Some("slurm:42"));
    }

    /// On a mirror port, two other hosts' connection with the same QP numbers: only this
    /// host's device's address joins; a device whose addresses were not read joins nothing.
    #[test]
    fn the_same_qp_numbers_elsewhere_are_not_this_hosts() {
        let flows = vec![
            flow("198.18.0.1", "198.18.0.2", 0x11),
            flow("198.18.0.2", "198.18.0.1", 0x10),
            flow("198.18.0.5", "198.18.0.6", 0x11),
            flow("198.18.0.6", "198.18.0.5", 0x10),
        ];
        let mut j = jobs(flows.clone());
        // This host is neither: nothing of it is on the wire.
        join_processes(
            &mut j,
            &nic("198.18.0.9", vec![qp(0x11, 0x10, 7, 1, "slurm:42")]),
        );
        assert!(j.jobs[0].ranks.is_empty(), "{:?}", j.jobs[0].ranks);
        let mut j = jobs(flows.clone());
        join_processes(
            &mut j,
            &nic("198.18.0.2", vec![qp(0x11, 0x10, 7, 1, "slurm:42")]),
        );
        assert_eq!(j.jobs[0].ranks.len(), 1);
        assert_eq!(j.jobs[0].ranks[0].host.to_string(), "198.18.0.2");
        let mut bare = nic("198.18.0.2", vec![qp(0x11, 0x10, 7, 1, "slurm:42")]);
        bare.devices.clear();
        let mut j = jobs(flows);
        join_processes(&mut j, &bare);
        assert!(j.jobs[0].ranks.is_empty());
    }

    #[test]
    fn one_direction_or_disagreeing_names_tell_nothing() {
        // Only the direction to 0x11: a QP of that number elsewhere could be the one.
        let mut j = jobs(vec![flow("198.18.0.1", "198.18.0.2", 0x11)]);
        join_processes(
            &mut j,
            &nic("198.18.0.2", vec![qp(0x11, 0x10, 7, 1, "slurm:42")]),
        );
        assert!(j.jobs[0].ranks.is_empty());
        assert_eq!(j.jobs[0].name, None);
        // Two processes naming two jobs: the job's name is not known.
        let mut j = jobs(vec![
            flow("198.18.0.2", "198.18.0.1", 0x10),
            flow("198.18.0.1", "198.18.0.2", 0x11),
            flow("198.18.0.3", "198.18.0.1", 0x20),
            flow("198.18.0.1", "198.18.0.3", 0x21),
        ]);
        join_processes(
            &mut j,
            &nic(
                "198.18.0.1",
                vec![
                    qp(0x10, 0x11, 7, 1, "slurm:42"),
                    qp(0x20, 0x21, 9, 2, "slurm:43"),
                ],
            ),
        );
        assert_eq!(j.jobs[0].ranks.len(), 2);
        assert_eq!(j.jobs[0].name, None);
        assert_eq!(j.jobs[0].name, None);
    }

    fn peer(
        seen_by: &str,
        (addr, qp): (&str, u32),
        (peer_addr, peer_qp): (&str, u32),
        pid: u32,
        rank: u32,
    ) -> PeerProcess {
        PeerProcess {
            seen_by: seen_by.into(),
            addr: addr.parse().unwrap(),
            qp,
            peer_addr: peer_addr.parse().unwrap(),
            peer_qp,
            pid,
            process: ProcessJob {
                job: Some("slurm:42".into()),
                rank: Some(rank),
                ..Default::default()
            },
            first_ns: 100,
            last_ns: 150,
        }
    }

    /// The remote side's rank by (peer address, QPN) from the other host's records: on the
    /// same evidence as a local QP (both directions of its connection), once per process
    /// however many of its QPs or rows name it, never over this host's own table.
    #[test]
    fn peers_records_name_the_remote_sides_processes() {
        let flows = vec![
            flow("198.18.0.1", "198.18.0.2", 0x11),
            flow("198.18.0.2", "198.18.0.1", 0x10),
            flow("198.18.0.2", "198.18.0.3", 0x13),
            flow("198.18.0.3", "198.18.0.2", 0x12),
        ];
        let mut j = jobs(flows.clone());
        // This host is .2 (rank 1); .1 and .3 tell their processes in their records.
        join_processes(
            &mut j,
            &nic("198.18.0.2", vec![qp(0x11, 0x10, 7, 1, "slurm:42")]),
        );
        let (one, two, three) = ("198.18.0.1", "198.18.0.2", "198.18.0.3");
        // The observation: 100 to 200 ns.
        (j.start_ns, j.end_ns) = (100, 200);
        let mut before = peer("node-1", (one, 0x10), (two, 0x11), 73, 7);
        (before.first_ns, before.last_ns) = (20, 99);
        let mut after = peer("node-1", (one, 0x10), (two, 0x11), 75, 7);
        (after.first_ns, after.last_ns) = (201, 300);
        let peers = [
            peer("node-1", (one, 0x10), (two, 0x11), 70, 0),
            peer("node-1", (one, 0x10), (two, 0x11), 70, 0),
            peer("node-3", (three, 0x13), (two, 0x12), 90, 2),
            // .2's processes as a peer's records would name them: this host's table names
            // .2's, whatever the PID.
            peer("node-2", (two, 0x11), (one, 0x10), 7, 9),
            peer("node-2", (two, 0x12), (three, 0x13), 8, 9),
            // A QP number the job never sends to, whose reverse is another QP's, whose peer is
            // another address, or records of another time.
            peer("node-4", ("198.18.0.4", 0x10), (two, 0x11), 71, 5),
            peer("node-1", (one, 0x10), (two, 0x99), 72, 6),
            peer("node-1", (one, 0x10), (three, 0x11), 74, 6),
            before,
            after,
        ];
        join_peer_processes(&mut j, &peers);
        type Row<'a> = (String, u32, u32, Option<u32>, Option<&'a str>);
        let got: Vec<Row> = j.jobs[0]
            .ranks
            .iter()
            .map(|r| {
                (
                    r.host.to_string(),
                    r.pid,
                    r.qps,
                    r.process.rank,
                    r.seen_by.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("198.18.0.1".to_string(), 70, 1, Some(0), Some("node-1")),
                ("198.18.0.2".to_string(), 7, 1, Some(1), None),
                ("198.18.0.3".to_string(), 90, 1, Some(2), Some("node-3")),
            ]
        );
        assert_eq!(j.jobs[0].name.as_deref(), Some("slurm:42"));
        // Peers alone (no QP table here) name them too; a peer of another job unnames it.
        let mut j = jobs(flows);
        (j.start_ns, j.end_ns) = (100, 200);
        let mut other = peer("node-3", (three, 0x13), (two, 0x12), 90, 2);
        other.process.job = Some("slurm:43".into());
        join_peer_processes(&mut j, &[peers[0].clone(), other]);
        assert_eq!(j.jobs[0].ranks.len(), 2);
        assert_eq!(j.jobs[0].name, None);
    }
}
