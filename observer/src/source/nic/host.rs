//! One reading of everything a host tells of its NIC side: the RDMA devices and their counters,
//! and per netdev its MTU, addresses, driver, driver statistics, DCB and DCQCN settings; the QP
//! table. Read live (sysfs, ioctl, netlink) or from a copied tree under a root directory.
//!
//! A copied tree holds the sysfs files under `sys/` as the host has them, and what the host
//! tells through calls as the usual tools print it: `ethtool/<if>/statistics` (`ethtool -S`),
//! `ethtool/<if>/driver` (`ethtool -i`), `ethtool/<if>/tunables` (`ethtool --get-tunable IF
//! pfc-prevention-tout`), `ethtool/<if>/module` (`ethtool -m IF hex on`), `dcb/<if>.json` (the DCB settings, in this tool's JSON)
//! `rdma/qps.json` (`rdma -j res show qp`) and `ip/<if>` (`ip -br addr show dev <if>`);
//! `proc/<pid>/environ` and `proc/<pid>/cgroup` of the QPs' processes (a copy keeps only the
//! training job's variables of an environment: see `process`); and
//! `taken`, when the copy was taken (ns since the Unix epoch; 0 when missing); and
//! `absent.json`, the sources the host lacked and why (`[{"source", "subject", "reason"}]`).
//! [`write_tree`] writes one.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::rdma::RdmaDevice;
use super::{Availability, NicError, check_interface, line, number};
use crate::model::nic::{Dcb, Dcqcn, DriverInfo, Gpu, Qp};

/// Where a host's NIC side is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// This host: sysfs under `/`, ioctl and netlink calls.
    Live,
    /// A copied tree (see the module's documentation).
    Root(PathBuf),
}

impl Host {
    fn root(&self) -> &Path {
        match self {
            Self::Live => Path::new("/"),
            Self::Root(p) => p,
        }
    }
}

/// What to read: netdevs and RDMA devices by name. With neither, every RDMA device and the
/// netdevs behind its ports; the netdevs behind the named RDMA devices are always read too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    pub interfaces: Vec<String>,
    pub rdma_devices: Vec<String>,
    /// Leave the QP table out (the sidecar exports none: a dump of every QP, each with its
    /// process's name, at every drain would be work for nothing).
    pub no_qps: bool,
    /// Leave the pluggable modules' EEPROMs out (I2C reads: the sidecar reads them with the QP
    /// table).
    pub no_modules: bool,
    /// Read the host's GPUs too (`check`, `snapshot`: their NUMA nodes against the NICs').
    pub gpus: bool,
}

/// One netdev's side.
#[derive(Clone, Debug, PartialEq)]
pub struct Interface {
    pub name: String,
    pub mtu: Option<u32>,
    /// Its IP addresses (live only: a copied tree has none), to tell which wire traffic is the
    /// host's own.
    pub addresses: Vec<IpAddr>,
    pub driver: Availability<DriverInfo>,
    pub stats: Availability<BTreeMap<String, u64>>,
    pub dcb: Availability<Dcb>,
    pub dcqcn: Availability<Dcqcn>,
    /// `carrier_changes`: how often the link went down or up since the netdev was made.
    pub carrier_changes: Option<u64>,
    /// The PFC storm prevention timeout (ms; 0 off, 0xffff the driver's default).
    pub pfc_watchdog: Availability<u16>,
    /// Its IPv4 sysctls [`SYSCTLS`] (`all/…`: the host-wide ones), those readable.
    pub sysctls: BTreeMap<String, String>,
    /// Its pluggable module's EEPROM (the pages the diagnostics need).
    pub module: Availability<super::optics::Eeprom>,
}

/// The IPv4 sysctls of a netdev that decide which port answers ARP for which address and
/// whether a reply arriving on another port is dropped: with several RoCE netdevs on one
/// subnet, RoCE's ARP and return traffic depend on them.
pub const SYSCTLS: &[&str] = &["arp_ignore", "arp_announce", "rp_filter"];

/// The reason of a QP table or a module left out on purpose ([`Selection::no_qps`],
/// [`Selection::no_modules`]).
pub const NOT_READ: &str = "not read";

/// One reading of a host's NIC side.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// When it was taken (ns since the Unix epoch).
    pub taken_ns: u64,
    pub rdma: Availability<Vec<RdmaDevice>>,
    pub interfaces: Vec<Interface>,
    pub qps: Availability<Vec<Qp>>,
    /// The GPUs, when asked for ([`Selection::gpus`]).
    pub gpus: Vec<Gpu>,
}

impl Snapshot {
    /// The netdev `name`, if read.
    pub fn interface(&self, name: &str) -> Option<&Interface> {
        self.interfaces.iter().find(|i| i.name == name)
    }

    /// The RDMA devices read (none when absent).
    pub fn devices(&self) -> &[RdmaDevice] {
        self.rdma.present().map_or(&[], Vec::as_slice)
    }
}

/// Reads the host's NIC side. Named RDMA devices the host lacks, and named netdevs it lacks,
/// are errors (a wrong name on the command line); every source the host lacks is absent.
pub fn snapshot(host: &Host, sel: &Selection) -> Result<Snapshot, NicError> {
    for i in &sel.interfaces {
        check_interface(i)?;
    }
    let root = host.root();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos() as u64;
    let taken_ns = match host {
        Host::Live => now,
        // A copy without its time: 0, and the caller says how far apart two copies are.
        Host::Root(r) => number(&r.join("taken")).unwrap_or(0),
    };
    // Named devices alone: only theirs are read (a host with SR-IOV functions has many).
    let only = (sel.interfaces.is_empty() && !sel.rdma_devices.is_empty())
        .then_some(sel.rdma_devices.as_slice());
    let rdma = match super::rdma::rdma_devices_among(root, only)? {
        Availability::Present(all) => {
            let chosen: Vec<RdmaDevice> = all
                .into_iter()
                .filter(|d| {
                    // The devices named, and those behind the interfaces named; every one when
                    // neither is.
                    let named = sel.rdma_devices.contains(&d.name);
                    let behind = d
                        .ports
                        .iter()
                        .any(|p| p.netdevs.iter().any(|n| sel.interfaces.contains(n)));
                    named || behind || (sel.rdma_devices.is_empty() && sel.interfaces.is_empty())
                })
                .collect();
            if let Some(missing) = sel
                .rdma_devices
                .iter()
                .find(|n| !chosen.iter().any(|d| &d.name == *n))
            {
                return Err(NicError::NoRdmaDevice(missing.clone()));
            }
            if chosen.is_empty() {
                Availability::Absent {
                    reason: format!("no RDMA device behind {}", sel.interfaces.join(", ")),
                }
            } else {
                Availability::Present(chosen)
            }
        }
        Availability::Absent { reason } => {
            if let Some(missing) = sel.rdma_devices.first() {
                return Err(NicError::NoRdmaDevice(format!("{missing} ({reason})")));
            }
            Availability::Absent { reason }
        }
    };
    let mut names: Vec<String> = sel.interfaces.clone();
    if let Availability::Present(devices) = &rdma {
        for d in devices {
            for p in &d.ports {
                for n in &p.netdevs {
                    if !names.contains(n) {
                        names.push(n.clone());
                    }
                }
            }
        }
    }
    let mut interfaces = Vec::new();
    for name in names {
        let net = root.join("sys/class/net").join(&name);
        if !net.is_dir() {
            if sel.interfaces.contains(&name) {
                return Err(NicError::NoInterface(name));
            }
            // A netdev an RDMA port names but the tree lacks: skip it.
            continue;
        }
        interfaces.push(interface(host, root, &name, &net)?);
    }
    // The modules last: their I2C reads (milliseconds each) do not stretch the time between
    // the counters of the first netdev and the last.
    for i in &mut interfaces {
        i.module = match host {
            _ if sel.no_modules => Availability::Absent {
                reason: NOT_READ.into(),
            },
            Host::Live => or_absent(super::optics::module_eeprom(&i.name)),
            Host::Root(r) => from_text(
                &r.join("ethtool").join(&i.name).join("module"),
                super::optics::Eeprom::parse_hex,
            )?,
        };
    }
    let qps = match host {
        _ if sel.no_qps => Availability::Absent {
            reason: NOT_READ.into(),
        },
        Host::Live => super::rdma_netlink::qps()?,
        Host::Root(r) => super::rdma_netlink::qps_at(r)?,
    };
    let mut rdma = rdma;
    if let (Host::Live, Availability::Present(devices)) = (host, &mut rdma) {
        add_netlink_counters(devices);
    }
    let gpus = if sel.gpus { gpus(root) } else { Vec::new() };
    let mut s = Snapshot {
        taken_ns,
        rdma,
        interfaces,
        qps,
        gpus,
    };
    if let Host::Root(r) = host {
        recall_reasons(r, &mut s)?;
    }
    Ok(s)
}

/// The PCI vendors whose display and 3D controllers are GPUs here: NVIDIA, AMD.
const GPU_VENDORS: &[&str] = &["0x10de", "0x1002"];

/// The host's GPUs: PCI devices of class display (0x03xxxx) from [`GPU_VENDORS`] (sysfs
/// `bus/pci/devices/<addr>/{class,vendor,numa_node}`); none when the bus is not readable.
fn gpus(root: &Path) -> Vec<Gpu> {
    let dir = root.join("sys/bus/pci/devices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<Gpu> = entries
        .flatten()
        .filter_map(|e| {
            let bus = e.file_name().to_string_lossy().into_owned();
            let d = dir.join(&bus);
            let class = line(&d.join("class"))?;
            let vendor = line(&d.join("vendor"))?;
            (class.starts_with("0x03") && GPU_VENDORS.contains(&vendor.as_str())).then(|| Gpu {
                numa_node: line(&d.join("numa_node")).and_then(|n| n.parse().ok()),
                bus,
                vendor,
            })
        })
        .collect();
    out.sort_by(|a, b| a.bus.cmp(&b.bus));
    out
}

/// One source the reading lacked, and why (`absent.json` of a copied tree).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Absence {
    pub source: String,
    pub subject: String,
    pub reason: String,
}

/// Every source the reading lacks, with its reason, in a stable order.
pub fn absences(s: &Snapshot) -> Vec<Absence> {
    let mut out = Vec::new();
    let mut add = |source: &str, subject: &str, r: Result<(), String>| {
        if let Err(reason) = r {
            out.push(Absence {
                source: source.into(),
                subject: subject.into(),
                reason,
            });
        }
    };
    add("rdma", "", s.rdma.reason());
    add("qps", "", s.qps.reason());
    for i in &s.interfaces {
        add("driver", &i.name, i.driver.reason());
        add("stats", &i.name, i.stats.reason());
        add("dcb", &i.name, i.dcb.reason());
        add("dcqcn", &i.name, i.dcqcn.reason());
        add("pfc-watchdog", &i.name, i.pfc_watchdog.reason());
        add("module", &i.name, i.module.reason());
    }
    out
}

/// A copy says why the host lacked what it lacks (`absent.json`, written by [`write_tree`]):
/// those reasons replace "missing file" ones, so the copy reads as the host did.
fn recall_reasons(root: &Path, s: &mut Snapshot) -> Result<(), NicError> {
    let path = root.join("absent.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(NicError::Read { path, source }),
    };
    let recorded: Vec<Absence> =
        serde_json::from_str(&text).map_err(|source| NicError::Fixture { path, source })?;
    let reason = |source: &str, subject: &str| {
        recorded
            .iter()
            .find(|a| a.source == source && a.subject == subject)
            .map(|a| a.reason.clone())
    };
    fn recall<T>(a: &mut Availability<T>, recorded: Option<String>) {
        if let (Availability::Absent { reason }, Some(r)) = (a, recorded) {
            *reason = r;
        }
    }
    recall(&mut s.rdma, reason("rdma", ""));
    recall(&mut s.qps, reason("qps", ""));
    for i in &mut s.interfaces {
        recall(&mut i.driver, reason("driver", &i.name));
        recall(&mut i.stats, reason("stats", &i.name));
        recall(&mut i.dcb, reason("dcb", &i.name));
        recall(&mut i.dcqcn, reason("dcqcn", &i.name));
        recall(&mut i.pfc_watchdog, reason("pfc-watchdog", &i.name));
        recall(&mut i.module, reason("module", &i.name));
    }
    Ok(())
}

/// The port counters RDMA netlink has and sysfs does not (the optional counters, mlx5's
/// `cc_*` congestion counters among them, once enabled with `rdma statistic set`); nothing
/// when RDMA netlink cannot be read (sysfs has the rest).
fn add_netlink_counters(devices: &mut [RdmaDevice]) {
    let Ok(Availability::Present(nl)) = super::rdma_netlink::devices() else {
        return;
    };
    for d in devices {
        let Some(n) = nl.iter().find(|n| n.name == d.name) else {
            continue;
        };
        for p in &mut d.ports {
            if let Some(np) = n.ports.iter().find(|q| q.index == p.port) {
                for (name, v) in &np.hw_counters {
                    p.hw_counters.entry(name.clone()).or_insert(*v);
                }
            }
        }
    }
}

fn interface(host: &Host, root: &Path, name: &str, net: &Path) -> Result<Interface, NicError> {
    let mtu = number(&net.join("mtu")).and_then(|m| u32::try_from(m).ok());
    let (driver, stats, dcb, addresses) = match host {
        // A call the kernel refuses for one netdev (a reset in progress, an errno the driver
        // gives) is that source absent, not the whole reading lost.
        Host::Live => (
            or_absent(super::ethtool::driver_info(name)),
            or_absent(super::ethtool::driver_stats(name)),
            or_absent(super::dcb::dcb(name)),
            addresses(name),
        ),
        Host::Root(r) => {
            let dir = r.join("ethtool").join(name);
            (
                from_text(&dir.join("driver"), super::ethtool::parse_info)?,
                from_text(&dir.join("statistics"), super::ethtool::parse_stats)?,
                super::dcb::dcb_at(r, name)?,
                line(&r.join("ip").join(name)).map_or_else(Vec::new, |l| brief_addresses(&l)),
            )
        }
    };
    let pfc_watchdog = match host {
        Host::Live => or_absent(super::ethtool::pfc_prevention_timeout(name)),
        Host::Root(r) => from_text(
            &r.join("ethtool").join(name).join("tunables"),
            super::ethtool::parse_pfc_prevention,
        )?,
    };
    let conf = root.join("proc/sys/net/ipv4/conf");
    let mut sysctls = BTreeMap::new();
    for key in SYSCTLS {
        if let Some(v) = line(&conf.join(name).join(key)) {
            sysctls.insert(key.to_string(), v);
        }
        if let Some(v) = line(&conf.join("all").join(key)) {
            sysctls.insert(format!("all/{key}"), v);
        }
    }
    Ok(Interface {
        // Read after every netdev's counters (see `snapshot`).
        module: Availability::Absent {
            reason: NOT_READ.into(),
        },
        pfc_watchdog,
        carrier_changes: number(&net.join("carrier_changes")),
        sysctls,
        name: name.to_string(),
        mtu,
        addresses,
        driver,
        stats,
        dcb,
        dcqcn: super::dcqcn::dcqcn(root, name)?,
    })
}

/// A source's reading, an error becoming the source absent with the error as its reason.
fn or_absent<T>(r: Result<Availability<T>, NicError>) -> Availability<T> {
    r.unwrap_or_else(|e| {
        let mut reason = e.to_string();
        let mut cur = std::error::Error::source(&e);
        while let Some(s) = cur {
            reason.push_str(&format!(": {s}"));
            cur = s.source();
        }
        Availability::Absent { reason }
    })
}

/// A tool's text output in a copied tree, parsed; absent when the file is missing.
fn from_text<T>(
    path: &Path,
    parse: impl Fn(&str) -> Result<T, NicError>,
) -> Result<Availability<T>, NicError> {
    Ok(match super::recorded(path)? {
        Availability::Present(text) => {
            Availability::Present(parse(&text).map_err(|e| NicError::Parse {
                path: path.to_path_buf(),
                source: Box::new(e),
            })?)
        }
        Availability::Absent { reason } => Availability::Absent { reason },
    })
}

/// The addresses of an `ip -br addr` line: "eth0  UP  198.18.0.1/24 2001:db8::1/64".
fn brief_addresses(line: &str) -> Vec<IpAddr> {
    line.split_whitespace()
        .skip(2)
        .filter_map(|a| a.split('/').next()?.parse().ok())
        .collect()
}

/// The IP addresses of the netdev `name` on this host (none when they cannot be read).
fn addresses(name: &str) -> Vec<IpAddr> {
    let Ok(all) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in all.filter(|a| a.interface_name == name) {
        let Some(addr) = a.address else { continue };
        if let Some(v4) = addr.as_sockaddr_in() {
            out.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            out.push(IpAddr::V6(v6.ip()));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A one-line sysfs attribute of a netdev (e.g. its MAC `address`), if readable.
pub fn attribute(host: &Host, iface: &str, name: &str) -> Option<String> {
    check_interface(iface).ok()?;
    line(&host.root().join("sys/class/net").join(iface).join(name))
}

/// Writes a snapshot as a copied tree under `dir` (what [`snapshot`] reads back with
/// [`Host::Root`]): the synthetic scenarios' NIC readings, for `replay --nic-root`.
pub fn write_tree(dir: &Path, s: &Snapshot) -> std::io::Result<()> {
    use std::fs::{create_dir_all, write};
    create_dir_all(dir)?;
    write(dir.join("taken"), format!("{}\n", s.taken_ns))?;
    let absent = absences(s);
    if !absent.is_empty() {
        let json = serde_json::to_string_pretty(&absent).map_err(std::io::Error::other)?;
        write(dir.join("absent.json"), json)?;
    }
    for d in s.devices() {
        let dev = dir.join("sys/class/infiniband").join(&d.name);
        create_dir_all(&dev)?;
        for (file, v) in [
            ("fw_ver", &d.fw_ver),
            ("hca_type", &d.hca_type),
            ("board_id", &d.board_id),
        ] {
            if let Some(v) = v {
                write(dev.join(file), format!("{v}\n"))?;
            }
        }
        if !d.pci.is_empty() {
            create_dir_all(dev.join("device"))?;
            for (k, v) in &d.pci {
                // The upstream port's files are read at `device/..`: here, the device's own.
                let path = match k.strip_prefix("upstream_") {
                    Some(f) => dev.join(f),
                    None => dev.join("device").join(k),
                };
                write(path, format!("{v}\n"))?;
            }
        }
        for p in &d.ports {
            let port = dev.join("ports").join(p.port.to_string());
            create_dir_all(&port)?;
            for (file, v) in [
                ("state", &p.state),
                ("link_layer", &p.link_layer),
                ("rate", &p.rate),
            ] {
                if let Some(v) = v {
                    write(port.join(file), format!("{v}\n"))?;
                }
            }
            if !p.rdma_cm.is_empty() {
                let cm = dir
                    .join("sys/kernel/config/rdma_cm")
                    .join(&d.name)
                    .join("ports")
                    .join(p.port.to_string());
                create_dir_all(&cm)?;
                for (k, v) in &p.rdma_cm {
                    write(cm.join(k), format!("{v}\n"))?;
                }
            }
            for g in &p.gids {
                for (sub, v) in [
                    ("gids", &g.gid),
                    ("gid_attrs/types", &g.kind),
                    ("gid_attrs/ndevs", &g.netdev),
                ] {
                    create_dir_all(port.join(sub))?;
                    write(port.join(sub).join(g.index.to_string()), format!("{v}\n"))?;
                }
            }
            for (sub, counters) in [("counters", &p.counters), ("hw_counters", &p.hw_counters)] {
                let c = port.join(sub);
                create_dir_all(&c)?;
                for (name, v) in counters {
                    write(c.join(name), format!("{v}\n"))?;
                }
            }
            // The netdevs are the GIDs' (written above); a port without GIDs names them alone.
            let ndevs = port.join("gid_attrs/ndevs");
            create_dir_all(&ndevs)?;
            if p.gids.is_empty() {
                for (i, n) in p.netdevs.iter().enumerate() {
                    write(ndevs.join(i.to_string()), format!("{n}\n"))?;
                }
            }
        }
    }
    for i in &s.interfaces {
        let net = dir.join("sys/class/net").join(&i.name);
        create_dir_all(&net)?;
        if let Some(m) = i.mtu {
            write(net.join("mtu"), format!("{m}\n"))?;
        }
        if let Some(c) = i.carrier_changes {
            write(net.join("carrier_changes"), format!("{c}\n"))?;
        }
        for (k, v) in &i.sysctls {
            let (iface, key) = match k.strip_prefix("all/") {
                Some(key) => ("all", key),
                None => (i.name.as_str(), k.as_str()),
            };
            let conf = dir.join("proc/sys/net/ipv4/conf").join(iface);
            create_dir_all(&conf)?;
            write(conf.join(key), format!("{v}\n"))?;
        }
        if !i.addresses.is_empty() {
            create_dir_all(dir.join("ip"))?;
            let list: Vec<String> = i
                .addresses
                .iter()
                .map(|a| match a {
                    IpAddr::V4(_) => format!("{a}/32"),
                    IpAddr::V6(_) => format!("{a}/128"),
                })
                .collect();
            write(
                dir.join("ip").join(&i.name),
                format!("{:<16} UP             {} \n", i.name, list.join(" ")),
            )?;
        }
        let tool = dir.join("ethtool").join(&i.name);
        if let Availability::Present(d) = &i.driver {
            create_dir_all(&tool)?;
            write(
                tool.join("driver"),
                format!(
                    "driver: {}\nversion: {}\nfirmware-version: {}\nexpansion-rom-version: \nbus-info: {}\nsupports-statistics: yes\n",
                    d.driver, d.version, d.firmware, d.bus
                ),
            )?;
        }
        if let Availability::Present(t) = &i.pfc_watchdog {
            create_dir_all(&tool)?;
            write(tool.join("tunables"), format!("pfc-prevention-tout: {t}\n"))?;
        }
        if let Availability::Present(m) = &i.module {
            create_dir_all(&tool)?;
            write(tool.join("module"), m.to_hex())?;
        }
        if let Availability::Present(st) = &i.stats {
            create_dir_all(&tool)?;
            let mut text = String::from("NIC statistics:\n");
            for (k, v) in st {
                text.push_str(&format!("     {k}: {v}\n"));
            }
            write(tool.join("statistics"), text)?;
        }
        if let Availability::Present(d) = &i.dcb {
            create_dir_all(dir.join("dcb"))?;
            let json = serde_json::to_string_pretty(d).map_err(std::io::Error::other)?;
            write(dir.join("dcb").join(format!("{}.json", i.name)), json)?;
        }
        if let Availability::Present(d) = &i.dcqcn {
            for (side, enabled, params) in [
                ("roce_np", d.np_enabled, &d.np),
                ("roce_rp", d.rp_enabled, &d.rp),
            ] {
                // What the host could not read stays out: read back, it is unread again, not
                // off.
                let unread = |what: &str| d.unread.iter().any(|u| u == what);
                if unread(side) {
                    continue;
                }
                let sd = net.join("ecn").join(side);
                create_dir_all(&sd)?;
                if !unread(&format!("{side}/enable")) {
                    create_dir_all(sd.join("enable"))?;
                    for p in 0..8 {
                        if unread(&format!("{side}/enable/{p}")) {
                            continue;
                        }
                        write(
                            sd.join("enable").join(p.to_string()),
                            format!("{}\n", (enabled >> p) & 1),
                        )?;
                    }
                }
                for (k, v) in params {
                    write(sd.join(k), format!("{v}\n"))?;
                }
            }
        }
    }
    for g in &s.gpus {
        let d = dir.join("sys/bus/pci/devices").join(&g.bus);
        create_dir_all(&d)?;
        // A display controller's class; the checklist reads its first byte.
        write(d.join("class"), "0x030200\n")?;
        write(d.join("vendor"), format!("{}\n", g.vendor))?;
        if let Some(n) = g.numa_node {
            write(d.join("numa_node"), format!("{n}\n"))?;
        }
    }
    if let Availability::Present(qps) = &s.qps {
        create_dir_all(dir.join("rdma"))?;
        // `rdma -j res show qp`'s keys.
        let rows: Vec<serde_json::Value> = qps
            .iter()
            .map(|q| {
                let mut o = serde_json::json!({
                    "ifname": q.device,
                    "lqpn": q.lqpn,
                    "type": q.qp_type,
                    "state": q.state,
                });
                if let Some(p) = q.port {
                    o["port"] = p.into();
                }
                if let Some(r) = q.rqpn {
                    o["rqpn"] = r.into();
                }
                if let Some(p) = q.pid {
                    o["pid"] = p.into();
                }
                if let Some(c) = &q.comm {
                    o["comm"] = c.clone().into();
                }
                o
            })
            .collect();
        let json = serde_json::to_string(&rows).map_err(std::io::Error::other)?;
        write(dir.join("rdma/qps.json"), json)?;
        // Each process's job variables alone, never the rest of its environment.
        for q in qps {
            if let (Some(pid), Some(job)) = (q.pid, &q.job) {
                let d = dir.join("proc").join(pid.to_string());
                create_dir_all(&d)?;
                let (environ, cgroup) = super::process::tree_files(job);
                // An environment not read is left out (it reads back as not read).
                if job.unread.is_none() {
                    write(d.join("environ"), environ)?;
                }
                if let Some(c) = cgroup {
                    write(d.join("cgroup"), c)?;
                }
            }
        }
    }
    Ok(())
}
