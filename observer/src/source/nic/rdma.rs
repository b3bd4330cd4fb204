//! RDMA devices as sysfs shows them (`/sys/class/infiniband/<dev>/…`): firmware, ports, their
//! state and link layer, the netdevs behind them, and every counter file of `counters/` (the
//! IBTA port counters) and `hw_counters/` (the driver's: mlx5's Q counters such as
//! `out_of_sequence`, `duplicate_request`, `local_ack_timeout_err`; congestion counters where the
//! driver has them).
//!
//! Written by hand: the one crate that reads this class (`procsys`) reads a fixed fixture path
//! into a fixed struct, dropping the driver-specific counters this tool needs; the files are one
//! number or one line each.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Availability, NicError, entries, line};

/// One RDMA device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaDevice {
    pub name: String,
    pub fw_ver: Option<String>,
    pub hca_type: Option<String>,
    pub board_id: Option<String>,
    /// The PCI function's link and NUMA files ([`PCI_FILES`], those readable).
    pub pci: BTreeMap<String, String>,
    pub ports: Vec<RdmaPort>,
}

/// The files of an RDMA device's PCI function (`device/`) the checklist reads.
pub const PCI_FILES: &[&str] = &[
    "current_link_speed",
    "max_link_speed",
    "current_link_width",
    "max_link_width",
    "numa_node",
];

/// The files of the PCIe port above the card (`device/..`), kept as `upstream_<file>`.
pub const UPSTREAM_FILES: &[&str] = &["max_link_speed", "max_link_width"];

/// rdma_cm's per-port defaults (configfs, `sys/kernel/config/rdma_cm/<dev>/ports/<n>/`).
pub const RDMA_CM_FILES: &[&str] = &["default_roce_mode", "default_roce_tos"];

/// One port of an RDMA device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RdmaPort {
    pub port: u32,
    /// As sysfs says it, e.g. "4: ACTIVE".
    pub state: Option<String>,
    /// "Ethernet" for RoCE, "InfiniBand" otherwise.
    pub link_layer: Option<String>,
    pub rate: Option<String>,
    /// The netdevs the port's GIDs belong to (RoCE), or the device's own netdevs.
    pub netdevs: Vec<String>,
    /// `counters/`: the IBTA port counters.
    pub counters: BTreeMap<String, u64>,
    /// `hw_counters/`: the driver's counters (`lifespan`, a setting, left out).
    pub hw_counters: BTreeMap<String, u64>,
    /// Counter files that could not be read or parsed (some drivers refuse a read of a counter
    /// they do not support).
    pub unreadable: Vec<String>,
    /// The GID table's entries in use (an unused entry's type cannot be read).
    pub gids: Vec<crate::model::nic::Gid>,
    /// rdma_cm's defaults for the port ([`RDMA_CM_FILES`]), where configfs has them.
    pub rdma_cm: BTreeMap<String, String>,
}

/// The RDMA devices under `root` (`/` on a live host; a fixture tree in tests): absent, with
/// the reason, when the host has none.
pub fn rdma_devices(root: &Path) -> Result<Availability<Vec<RdmaDevice>>, NicError> {
    rdma_devices_among(root, None)
}

/// The same, reading only the devices `only` names when given (the others' files are not
/// touched: a driver's counter reads can be firmware commands).
pub fn rdma_devices_among(
    root: &Path,
    only: Option<&[String]>,
) -> Result<Availability<Vec<RdmaDevice>>, NicError> {
    let class = root.join("sys/class/infiniband");
    if !class.is_dir() {
        return Ok(Availability::Absent {
            reason: format!("{} missing: no RDMA driver loaded", class.display()),
        });
    }
    let mut devices = Vec::new();
    for name in entries(&class)? {
        if only.is_some_and(|o| !o.contains(&name)) {
            continue;
        }
        let dir = class.join(&name);
        let mut ports = Vec::new();
        let ports_dir = dir.join("ports");
        if ports_dir.is_dir() {
            for p in entries(&ports_dir)? {
                // Port directories are numbers; anything else is not a port.
                let Ok(port) = p.parse::<u32>() else {
                    continue;
                };
                let mut rp = read_port(&dir, &ports_dir.join(&p), port)?;
                let cm = root
                    .join("sys/kernel/config/rdma_cm")
                    .join(&name)
                    .join("ports")
                    .join(&p);
                for f in RDMA_CM_FILES {
                    if let Some(v) = line(&cm.join(f)) {
                        rp.rdma_cm.insert(f.to_string(), v);
                    }
                }
                ports.push(rp);
            }
        }
        ports.sort_by_key(|p| p.port);
        let mut pci: BTreeMap<String, String> = PCI_FILES
            .iter()
            .filter_map(|f| Some((f.to_string(), line(&dir.join("device").join(f))?)))
            .collect();
        // The port above the card (a switch or root port): what the platform allows.
        for f in UPSTREAM_FILES {
            if let Some(v) = line(&dir.join("device/..").join(f)) {
                pci.insert(format!("upstream_{f}"), v);
            }
        }
        devices.push(RdmaDevice {
            pci,
            fw_ver: line(&dir.join("fw_ver")),
            hca_type: line(&dir.join("hca_type")),
            board_id: line(&dir.join("board_id")),
            name,
            ports,
        });
    }
    if devices.is_empty() {
        return Ok(Availability::Absent {
            reason: format!("no RDMA device under {}", class.display()),
        });
    }
    Ok(Availability::Present(devices))
}

fn read_port(dev: &Path, dir: &Path, port: u32) -> Result<RdmaPort, NicError> {
    let mut p = RdmaPort {
        port,
        state: line(&dir.join("state")),
        link_layer: line(&dir.join("link_layer")),
        rate: line(&dir.join("rate")),
        ..RdmaPort::default()
    };
    read_counters(&dir.join("counters"), &mut p.counters, &mut p.unreadable)?;
    read_counters(
        &dir.join("hw_counters"),
        &mut p.hw_counters,
        &mut p.unreadable,
    )?;
    // A setting (the counters' cache lifetime, ms), not a counter.
    p.hw_counters.remove("lifespan");
    p.netdevs = netdevs(dev, dir)?;
    p.gids = gids(dir)?;
    Ok(p)
}

/// The GID table's entries in use: those whose type can be read (the kernel refuses the read
/// of an unused entry's type) and whose GID is not all zeros.
fn gids(port: &Path) -> Result<Vec<crate::model::nic::Gid>, NicError> {
    let types = port.join("gid_attrs/types");
    if !types.is_dir() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for i in entries(&types)? {
        let Ok(index) = i.parse::<u32>() else {
            continue;
        };
        let Some(kind) = line(&types.join(&i)).filter(|k| !k.is_empty()) else {
            continue;
        };
        let Some(gid) = line(&port.join("gids").join(&i)) else {
            continue;
        };
        if gid.chars().all(|c| c == '0' || c == ':') {
            continue;
        }
        out.push(crate::model::nic::Gid {
            index,
            gid,
            kind,
            netdev: line(&port.join("gid_attrs/ndevs").join(&i)).unwrap_or_default(),
        });
    }
    out.sort_by_key(|g| g.index);
    Ok(out)
}

/// The netdevs of a port: the names its GID table refers to (RoCE; entries of unused GIDs
/// read as errors or empty), else the device's `device/net/` entries.
fn netdevs(dev: &Path, port: &Path) -> Result<Vec<String>, NicError> {
    let mut out: Vec<String> = Vec::new();
    let ndevs = port.join("gid_attrs/ndevs");
    if ndevs.is_dir() {
        for gid in entries(&ndevs)? {
            if let Some(n) = line(&ndevs.join(gid))
                && !n.is_empty()
                && !out.contains(&n)
            {
                out.push(n);
            }
        }
    }
    let net = dev.join("device/net");
    if out.is_empty() && net.is_dir() {
        out = entries(&net)?;
    }
    out.sort();
    Ok(out)
}

/// Every counter file of `dir` (none when it is missing) into `out`; the ones that cannot be
/// read or are not a number into `unreadable`.
fn read_counters(
    dir: &Path,
    out: &mut BTreeMap<String, u64>,
    unreadable: &mut Vec<String>,
) -> Result<(), NicError> {
    if !dir.is_dir() {
        return Ok(());
    }
    for name in entries(dir)? {
        match super::number(&dir.join(&name)) {
            Some(v) => {
                out.insert(name, v);
            }
            None => unreadable.push(name),
        }
    }
    Ok(())
}

/// The RDMA device of a libpcap device name: libpcap's RDMA sniffer names a port `mlx5_0:1`,
/// whose device is `mlx5_0`; any other name is returned as it is.
pub fn device_of_capture(name: &str) -> &str {
    name.split_once(':').map_or(name, |(d, _)| d)
}

/// How wide a driver counter is: mlx5's Q counters are read as 32 bits and wrap; the others
/// (port counters through the extended PMA attributes, congestion counters) are 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    Bits32,
    Bits64,
}

/// mlx5's Q counters (the kernel's `basic_q_cnts`, `out_of_seq_q_cnts`, `retrans_q_cnts`,
/// `extended_err_cnts`, `roce_accl_cnts`): 32-bit values.
const Q_COUNTERS: &[&str] = &[
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rx_dct_connect",
    "out_of_buffer",
    "out_of_sequence",
    "duplicate_request",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "resp_local_length_error",
    "resp_cqe_error",
    "req_cqe_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_cqe_flush_error",
    "req_cqe_flush_error",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    "req_rnr_retries_exceeded",
    "req_transport_retries_exceeded",
];

/// The width of the driver counter `name`.
pub fn counter_width(name: &str) -> Width {
    if Q_COUNTERS.contains(&name) {
        Width::Bits32
    } else {
        Width::Bits64
    }
}

/// What a counter did between two readings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delta {
    /// It grew by this much (across a 32-bit wrap where there was one).
    Grew(u64),
    /// It went back without a wrap explaining it: the counters were reset (a driver reload, a
    /// device reset); it counts `since` from the reset.
    Reset { since: u64 },
}

/// The delta of a counter of `width` from `prev` to `now`. A 32-bit counter that went back
/// from the upper half of its range to the lower half wrapped; any other step back is a reset.
pub fn delta(width: Width, prev: u64, now: u64) -> Delta {
    if now >= prev {
        return Delta::Grew(now - prev);
    }
    const HALF: u64 = 1 << 31;
    let wraps = width == Width::Bits32 && (HALF..1 << 32).contains(&prev) && now < HALF;
    if wraps {
        Delta::Grew((1 << 32) - prev + now)
    } else {
        Delta::Reset { since: now }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_32_bit_counter_wraps_and_a_step_back_elsewhere_is_a_reset() {
        let w = counter_width("out_of_sequence");
        assert_eq!(w, Width::Bits32);
        assert_eq!(delta(w, 10, 15), Delta::Grew(5));
        assert_eq!(delta(w, 0xFFFF_FFF0, 0x10), Delta::Grew(0x20));
        // From the lower half back: no wrap makes that, a reset does.
        assert_eq!(delta(w, 5000, 100), Delta::Reset { since: 100 });
        // A 64-bit counter never wraps in practice: any step back is a reset.
        let w = counter_width("port_rcv_data");
        assert_eq!(w, Width::Bits64);
        assert_eq!(delta(w, 0xFFFF_FFF0, 0x10), Delta::Reset { since: 0x10 });
        assert_eq!(delta(w, 1 << 40, (1 << 40) + 7), Delta::Grew(7));
    }
}
