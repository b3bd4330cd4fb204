//! RDMA devices, their ports' counters and the queue pairs the kernel tracks, asked of the RDMA
//! netlink family (NETLINK_RDMA, client RDMA_NL_NLDEV) as iproute2's `rdma` does: a device dump
//! (`rdma dev`), a port dump per device (`rdma link`), the driver's hardware counters per port
//! (`rdma stat show link`, the default counter: every enabled counter, the optional `cc_*`
//! congestion counters of mlx5 among them when enabled) and the resource-tracked QPs per device
//! (`rdma res show qp`, rdma/res-qp.c).
//!
//! Numbers from include/uapi/rdma/rdma_netlink.h, the kernel side in
//! drivers/infiniband/core/nldev.c: the QP dump needs the device's index (the kernel answers
//! EINVAL without it) and returns, per message, DEV_INDEX, DEV_NAME and a RES_QP nest of
//! RES_QP_ENTRY nests; the counter request is a plain get with DEV_INDEX and PORT_INDEX.

use std::collections::BTreeMap;
use std::path::Path;

use netlink_sys::protocols::NETLINK_RDMA;

use super::netlink::{
    Attr, Conn, End, Message, Request, attrs, errno_text, find, malformed, read_messages,
};
use super::{Availability, NicError};

/// enum rdma_nl_clients.
const RDMA_NL_NLDEV: u16 = 5;
/// enum rdma_nldev_command.
const RDMA_NLDEV_CMD_GET: u16 = 1;
const RDMA_NLDEV_CMD_PORT_GET: u16 = 5;
const RDMA_NLDEV_CMD_RES_QP_GET: u16 = 10;
const RDMA_NLDEV_CMD_STAT_GET: u16 = 17;
/// enum rdma_nldev_attr.
const ATTR_DEV_INDEX: u16 = 1;
const ATTR_DEV_NAME: u16 = 2;
const ATTR_PORT_INDEX: u16 = 3;
const ATTR_FW_VERSION: u16 = 5;
const ATTR_PORT_STATE: u16 = 12;
const ATTR_RES_QP: u16 = 19;
const ATTR_RES_QP_ENTRY: u16 = 20;
const ATTR_RES_LQPN: u16 = 21;
const ATTR_RES_RQPN: u16 = 22;
const ATTR_RES_TYPE: u16 = 26;
const ATTR_RES_STATE: u16 = 27;
const ATTR_RES_PID: u16 = 28;
const ATTR_RES_KERN_NAME: u16 = 29;
const ATTR_NDEV_NAME: u16 = 51;
const ATTR_STAT_HWCOUNTERS: u16 = 80;
const ATTR_STAT_HWCOUNTER_ENTRY: u16 = 81;
const ATTR_STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
const ATTR_STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;

/// RDMA_NL_GET_TYPE(client, op).
const fn nldev(op: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) | op
}

/// enum ib_qp_type, named as iproute2 names them (rdma/res.c qp_types_to_str).
const QP_TYPES: [&str; 11] = [
    "SMI",
    "GSI",
    "RC",
    "UC",
    "UD",
    "RAW_IPV6",
    "RAW_ETHERTYPE",
    "UNKNOWN",
    "RAW_PACKET",
    "XRC_INI",
    "XRC_TGT",
];
/// enum ib_qp_state, as rdma/res-qp.c qp_states_to_str names them.
const QP_STATES: [&str; 7] = ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"];

fn qp_type_name(t: u8) -> &'static str {
    match QP_TYPES.get(usize::from(t)) {
        Some(name) => name,
        None if t == 0xFF => "DRIVER",
        None => "UNKNOWN",
    }
}

fn qp_state_name(s: u8) -> &'static str {
    QP_STATES.get(usize::from(s)).copied().unwrap_or("UNKNOWN")
}

pub use crate::model::nic::Qp;

/// One RDMA device.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NlDevice {
    pub index: u32,
    pub name: String,
    pub fw_version: Option<String>,
    pub ports: Vec<NlPort>,
}

/// One port of an RDMA device.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NlPort {
    pub index: u32,
    /// enum ib_port_state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER.
    pub state: Option<u8>,
    /// The netdev behind the port (RoCE), when it is in this network namespace.
    pub netdev: Option<String>,
    /// The driver's hardware counters of the port (empty when the driver has none).
    pub hw_counters: BTreeMap<String, u64>,
}

/// The socket; none when the kernel has no RDMA netlink family.
fn open() -> Result<Option<Conn>, NicError> {
    match Conn::open(NETLINK_RDMA) {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) => Ok(None),
        Err(source) => Err(NicError::Netlink {
            what: "RDMA netlink socket".to_string(),
            source,
        }),
    }
}

fn no_netlink<T>() -> Availability<T> {
    Availability::Absent {
        reason: format!(
            "the kernel has no RDMA netlink (NETLINK_RDMA: {}): ib_core is not loaded",
            errno_text(libc::EPROTONOSUPPORT)
        ),
    }
}

const NO_DEVICE: &str = "no RDMA device (the RDMA netlink device dump is empty)";

/// The RDMA devices, each port's state, netdev and hardware counters: absent, with the reason,
/// when the kernel has no RDMA netlink (no ib_core) or no RDMA device.
pub fn devices() -> Result<Availability<Vec<NlDevice>>, NicError> {
    let Some(conn) = open()? else {
        return Ok(no_netlink());
    };
    let mut devices = device_list(&conn)?;
    if devices.is_empty() {
        return Ok(Availability::Absent {
            reason: NO_DEVICE.to_string(),
        });
    }
    for d in &mut devices {
        d.ports = ports(&conn, d)?;
        for p in &mut d.ports {
            p.hw_counters = hw_counters(&conn, d.index, &d.name, p.index)?;
        }
    }
    Ok(Availability::Present(devices))
}

/// The QPs of every RDMA device, with their owner's name: absent, with the reason, when the
/// kernel has no RDMA netlink or no RDMA device (a device without QPs is present and empty).
pub fn qps() -> Result<Availability<Vec<Qp>>, NicError> {
    let Some(conn) = open()? else {
        return Ok(no_netlink());
    };
    let devices = device_list(&conn)?;
    if devices.is_empty() {
        return Ok(Availability::Absent {
            reason: NO_DEVICE.to_string(),
        });
    }
    let mut out = Vec::new();
    for d in &devices {
        let what = format!("RDMA_NLDEV_CMD_RES_QP_GET dump of {}", d.name);
        let index = d.index.to_ne_bytes();
        let request = Request {
            kind: nldev(RDMA_NLDEV_CMD_RES_QP_GET),
            dump: true,
            family_header: &[],
            attrs: &[(ATTR_DEV_INDEX, &index)],
        };
        let (messages, end) = conn.exchange(&request, &what)?;
        out.extend(qp_messages(&messages, Some(end), &what)?);
    }
    // Each user QP's process, and what it tells of its job (the kernel names the creating
    // thread: its process's id stands instead).
    super::process::fill(Path::new("/"), &mut out);
    // A process's many QPs (one per peer and channel): its name read once.
    let mut names: std::collections::HashMap<u32, Option<String>> = Default::default();
    for q in &mut out {
        if q.comm.is_none()
            && let Some(pid) = q.pid
        {
            q.comm = names
                .entry(pid)
                .or_insert_with(|| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .ok()
                        .map(|s| s.trim_end().to_string())
                })
                .clone();
        }
    }
    Ok(Availability::Present(out))
}

/// The reply to an RDMA_NLDEV_CMD_RES_QP_GET dump as the kernel sends it (netlink messages,
/// header included, up to its NLMSG_DONE; sequence numbers are not checked here): the QPs,
/// without `/proc` lookups (a user QP's `comm` stays none). An error when the kernel refused,
/// the dump has no end or a message is malformed.
#[doc(hidden)]
pub fn parse_qp_dump(bytes: &[u8]) -> Result<Vec<Qp>, NicError> {
    const WHAT: &str = "RDMA_NLDEV_CMD_RES_QP_GET dump";
    let mut messages = Vec::new();
    let end = read_messages(bytes, WHAT, None, &mut messages)?;
    qp_messages(&messages, end, WHAT)
}

fn refused(what: &str, errno: i32) -> NicError {
    NicError::Netlink {
        what: what.to_string(),
        source: std::io::Error::from_raw_os_error(errno),
    }
}

fn qp_messages(messages: &[Message], end: Option<End>, what: &str) -> Result<Vec<Qp>, NicError> {
    match end {
        Some(End::Done) => {}
        Some(End::Refused(errno)) => return Err(refused(what, errno)),
        None => return Err(malformed(what, "the dump has no NLMSG_DONE")),
    }
    let mut out = Vec::new();
    for m in messages {
        if m.kind != nldev(RDMA_NLDEV_CMD_RES_QP_GET) {
            continue;
        }
        let top = attrs(&m.payload, what)?;
        let device = required_string(&top, ATTR_DEV_NAME, "DEV_NAME", what)?;
        let Some(table) = find(&top, ATTR_RES_QP) else {
            return Err(malformed(
                what,
                format!("{device}: a message without RES_QP"),
            ));
        };
        for entry in table.nested(what)? {
            if entry.kind == ATTR_RES_QP_ENTRY {
                out.push(qp_entry(&device, &entry.nested(what)?, what)?);
            }
        }
    }
    Ok(out)
}

fn qp_entry(device: &str, e: &[Attr<'_>], what: &str) -> Result<Qp, NicError> {
    let lqpn = optional_u32(e, ATTR_RES_LQPN, "RES_LQPN", what)?
        .ok_or_else(|| malformed(what, format!("{device}: a QP without RES_LQPN")))?;
    let required_u8 = |kind, name: &str| {
        find(e, kind)
            .and_then(|a| a.u8())
            .ok_or_else(|| malformed(what, format!("{device}: QP {lqpn} without {name}")))
    };
    let qp_type = required_u8(ATTR_RES_TYPE, "RES_TYPE")?;
    let state = required_u8(ATTR_RES_STATE, "RES_STATE")?;
    Ok(Qp {
        device: device.to_string(),
        port: optional_u32(e, ATTR_PORT_INDEX, "PORT_INDEX", what)?,
        lqpn,
        rqpn: optional_u32(e, ATTR_RES_RQPN, "RES_RQPN", what)?,
        qp_type: qp_type_name(qp_type).to_string(),
        state: qp_state_name(state).to_string(),
        pid: optional_u32(e, ATTR_RES_PID, "RES_PID", what)?,
        comm: find(e, ATTR_RES_KERN_NAME).map(Attr::string),
        job: None,
    })
}

/// A u32 attribute: none when absent, an error when present but shorter.
fn optional_u32(
    a: &[Attr<'_>],
    kind: u16,
    name: &str,
    what: &str,
) -> Result<Option<u32>, NicError> {
    find(a, kind)
        .map(|x| {
            x.u32()
                .ok_or_else(|| malformed(what, format!("{name} of {} bytes", x.value.len())))
        })
        .transpose()
}

fn required_string(a: &[Attr<'_>], kind: u16, name: &str, what: &str) -> Result<String, NicError> {
    find(a, kind)
        .map(Attr::string)
        .ok_or_else(|| malformed(what, format!("a message without {name}")))
}

/// Every device: index, name, firmware (ports not yet read).
fn device_list(conn: &Conn) -> Result<Vec<NlDevice>, NicError> {
    let what = "RDMA_NLDEV_CMD_GET dump";
    let request = Request {
        kind: nldev(RDMA_NLDEV_CMD_GET),
        dump: true,
        family_header: &[],
        attrs: &[],
    };
    let (messages, end) = conn.exchange(&request, what)?;
    if let End::Refused(errno) = end {
        return Err(refused(what, errno));
    }
    let mut out = Vec::new();
    for m in messages
        .iter()
        .filter(|m| m.kind == nldev(RDMA_NLDEV_CMD_GET))
    {
        let a = attrs(&m.payload, what)?;
        out.push(NlDevice {
            index: optional_u32(&a, ATTR_DEV_INDEX, "DEV_INDEX", what)?
                .ok_or_else(|| malformed(what, "a device without DEV_INDEX"))?,
            name: required_string(&a, ATTR_DEV_NAME, "DEV_NAME", what)?,
            fw_version: find(&a, ATTR_FW_VERSION).map(Attr::string),
            ports: Vec::new(),
        });
    }
    out.sort_by_key(|d| d.index);
    Ok(out)
}

/// The device's ports: index, state, netdev (counters not yet read).
fn ports(conn: &Conn, d: &NlDevice) -> Result<Vec<NlPort>, NicError> {
    let what = format!("RDMA_NLDEV_CMD_PORT_GET dump of {}", d.name);
    let index = d.index.to_ne_bytes();
    let request = Request {
        kind: nldev(RDMA_NLDEV_CMD_PORT_GET),
        dump: true,
        family_header: &[],
        attrs: &[(ATTR_DEV_INDEX, &index)],
    };
    let (messages, end) = conn.exchange(&request, &what)?;
    if let End::Refused(errno) = end {
        return Err(refused(&what, errno));
    }
    let mut out = Vec::new();
    for m in messages
        .iter()
        .filter(|m| m.kind == nldev(RDMA_NLDEV_CMD_PORT_GET))
    {
        let a = attrs(&m.payload, &what)?;
        out.push(NlPort {
            index: optional_u32(&a, ATTR_PORT_INDEX, "PORT_INDEX", &what)?
                .ok_or_else(|| malformed(&what, "a port without PORT_INDEX"))?,
            state: find(&a, ATTR_PORT_STATE).and_then(Attr::u8),
            netdev: find(&a, ATTR_NDEV_NAME).map(Attr::string),
            hw_counters: BTreeMap::new(),
        });
    }
    out.sort_by_key(|p| p.index);
    Ok(out)
}

/// The port's hardware counters (the default counter of `rdma stat show link DEV/PORT`); empty
/// when the driver has none (the kernel answers EINVAL then, or EOPNOTSUPP on old kernels).
fn hw_counters(
    conn: &Conn,
    dev_index: u32,
    dev_name: &str,
    port: u32,
) -> Result<BTreeMap<String, u64>, NicError> {
    let what = format!("RDMA_NLDEV_CMD_STAT_GET of {dev_name}/{port}");
    let index = dev_index.to_ne_bytes();
    let port_bytes = port.to_ne_bytes();
    let request = Request {
        kind: nldev(RDMA_NLDEV_CMD_STAT_GET),
        dump: false,
        family_header: &[],
        attrs: &[(ATTR_DEV_INDEX, &index), (ATTR_PORT_INDEX, &port_bytes)],
    };
    let (messages, end) = conn.exchange(&request, &what)?;
    match end {
        End::Refused(libc::EINVAL | libc::EOPNOTSUPP | libc::ENOENT) => return Ok(BTreeMap::new()),
        End::Refused(errno) => return Err(refused(&what, errno)),
        End::Done => {}
    }
    let mut out = BTreeMap::new();
    for m in messages
        .iter()
        .filter(|m| m.kind == nldev(RDMA_NLDEV_CMD_STAT_GET))
    {
        let top = attrs(&m.payload, &what)?;
        let Some(table) = find(&top, ATTR_STAT_HWCOUNTERS) else {
            continue;
        };
        for entry in table.nested(&what)? {
            if entry.kind != ATTR_STAT_HWCOUNTER_ENTRY {
                continue;
            }
            let e = entry.nested(&what)?;
            let name = required_string(
                &e,
                ATTR_STAT_HWCOUNTER_ENTRY_NAME,
                "HWCOUNTER_ENTRY_NAME",
                &what,
            )?;
            let value = find(&e, ATTR_STAT_HWCOUNTER_ENTRY_VALUE)
                .and_then(Attr::u64)
                .ok_or_else(|| malformed(&what, format!("counter {name} without its u64 value")))?;
            out.insert(name, value);
        }
    }
    Ok(out)
}

/// A recorded QP table: `<root>/rdma/qps.json`, the output of `rdma -j res show qp` (iproute2's
/// keys: ifname, port, lqpn, rqpn, type, state, pid, comm; the others ignored). Absent, naming
/// the path, when the file does not exist; an error naming it when it cannot be read or is no
/// such JSON.
pub fn qps_at(root: &Path) -> Result<Availability<Vec<Qp>>, NicError> {
    #[derive(serde::Deserialize)]
    struct Iproute2Qp {
        ifname: String,
        port: Option<u32>,
        lqpn: u32,
        rqpn: Option<u32>,
        #[serde(rename = "type")]
        qp_type: String,
        state: String,
        pid: Option<u32>,
        comm: Option<String>,
    }
    let path = root.join("rdma/qps.json");
    let text = match super::recorded(&path)? {
        Availability::Present(t) => t,
        Availability::Absent { reason } => return Ok(Availability::Absent { reason }),
    };
    let rows: Vec<Iproute2Qp> =
        serde_json::from_str(&text).map_err(|source| NicError::Fixture {
            path: path.clone(),
            source,
        })?;
    let mut qps: Vec<Qp> = rows
        .into_iter()
        .map(|r| Qp {
            device: r.ifname,
            port: r.port,
            lqpn: r.lqpn,
            rqpn: r.rqpn,
            qp_type: r.qp_type,
            state: r.state,
            // Older iproute2 printed "pid": 0 for kernel QPs; the kernel sends no pid then.
            pid: r.pid.filter(|&p| p != 0),
            comm: r.comm,
            job: None,
        })
        .collect();
    // The processes' files the copy holds (`proc/<pid>/environ` and `cgroup`).
    super::process::fill(root, &mut qps);
    Ok(Availability::Present(qps))
}
