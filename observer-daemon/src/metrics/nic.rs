//! The NIC side of the host: RDMA counters, driver statistics and settings, the QP table, the pluggable modules.

use std::borrow::Cow;

use super::{Family, Kind, Unit};

pub static RDMA_STAT: Family = Family::new(
    "roce_nic_rdma_stat",
    Kind::Counter,
    None,
    "An RDMA device port's driver counter (sysfs hw_counters/: np_cnp_sent, rp_cnp_handled, np_ecn_marked_roce_packets, out_of_sequence, packet_seq_err, local_ack_timeout_err, ...), summed from the daemon's start: 32-bit wraps of mlx5's Q counters are carried over and a reset adds what was counted since, so the counter never goes back",
    &["device", "port", "counter"],
);

pub static RDMA_PORT_STAT: Family = Family::new(
    "roce_nic_rdma_port_stat",
    Kind::Counter,
    None,
    "An RDMA device port's other IBTA counters (sysfs counters/: symbol_error, port_rcv_remote_physical_errors, VL15_dropped, ...; the ones node_exporter names are roce_nic_infiniband_*), summed from the daemon's start as roce_nic_rdma_stat_total",
    &["device", "port", "counter"],
);

pub static PFC_PAUSE_FRAMES: Family = Family::new(
    "roce_nic_pfc_pause_frames",
    Kind::Counter,
    None,
    "PFC pause frames the NIC received (dir=\"rx\": its peer paused it) or sent (dir=\"tx\": it paused its peer) on a priority (driver statistics rx_prio<p>_pause, tx_prio<p>_pause)",
    &["iface", "dir", "priority"],
);

pub static PFC_PAUSE: Family = Family::new(
    "roce_nic_pfc_pause",
    Kind::Counter,
    Some(Unit::Seconds),
    "Time the NIC was paused (dir=\"rx\") or kept its peer paused (dir=\"tx\") on a priority (driver statistics rx_prio<p>_pause_duration, tx_prio<p>_pause_duration, microseconds in mlx5)",
    &["iface", "dir", "priority"],
);

pub static PRIORITY_DISCARDS: Family = Family::new(
    "roce_nic_priority_discards",
    Kind::Counter,
    None,
    "Frames of a priority the NIC dropped on arrival (rx_prio<p>_discards); any on a lossless priority is a PFC failure",
    &["iface", "priority"],
);

pub static CLASS_DISCARDS: Family = Family::new(
    "roce_nic_class_discards",
    Kind::Counter,
    None,
    "Packets the NIC dropped on arrival per traffic class (mlx5's rx_prio<n>_buf_discard and _cong_discard count per traffic class, which ETS maps priorities to: roce-observer check shows the map): kind=\"buf_discard\" (no receive buffer), \"cong_discard\" (congestion)",
    &["iface", "class", "kind"],
);

pub static PAUSE_STORM_EVENTS: Family = Family::new(
    "roce_nic_pause_storm_events",
    Kind::Counter,
    None,
    "Pause storms the NIC's watchdog detected: level=\"warning\" (it has sent pauses for long), \"error\" (it stopped sending them: tx_pause_storm_error_events)",
    &["iface", "level"],
);

pub static DRIVER_STAT: Family = Family::new(
    "roce_nic_driver_stat",
    Kind::Counter,
    None,
    "Other RoCE-health driver statistics of a netdev, as named by the driver: rx_discards_phy, tx_discards_phy, rx/tx_vport_rdma_unicast_packets and _bytes, 802.3x link pauses rx/tx_pause_ctrl_phy, rx/tx_global_pause and _duration (microseconds)",
    &["iface", "counter"],
);

pub static INFO: Family = Family::new(
    "roce_nic",
    Kind::Info,
    None,
    "A RoCE netdev: the RDMA device behind it, its driver and version, the firmware (the RDMA device's fw_ver), the device's model (hca_type) and the PCI bus",
    &[
        "iface", "device", "driver", "version", "firmware", "model", "bus",
    ],
);

pub static ETHTOOL_INFO: Family = Family::new(
    "roce_nic_ethtool",
    Kind::Info,
    None,
    "A netdev's driver information (ethtool -i), labelled as node_exporter's node_ethtool_info: bus_info, device (the netdev), driver, expansion_rom_version, firmware_version, version",
    &[
        "bus_info",
        "device",
        "driver",
        "expansion_rom_version",
        "firmware_version",
        "version",
    ],
);

pub static PFC_ENABLED: Family = Family::new(
    "roce_nic_pfc_enabled",
    Kind::Gauge,
    None,
    "1 when PFC (lossless) is enabled on the priority (DCB), 0 when not",
    &["iface", "priority"],
);

pub static MTU: Family = Family::new(
    "roce_nic_mtu",
    Kind::Gauge,
    Some(Unit::Bytes),
    "The netdev's MTU",
    &["iface"],
);

pub static DCQCN_ENABLED: Family = Family::new(
    "roce_nic_dcqcn_enabled",
    Kind::Gauge,
    None,
    "1 when DCQCN is enabled on the priority: point=\"np\", the notification point (CNPs sent on ECN-marked arrivals), \"rp\", the reaction point (rate cut on CNPs)",
    &["iface", "priority", "point"],
);

pub static QUEUE_PAIRS: Family = Family::new(
    "roce_nic_queue_pairs",
    Kind::Gauge,
    None,
    "Queue pairs of an RDMA device port by type, state and the process that created them (pid empty for a kernel QP, comm its owner's name; job and rank as its environment's launcher variables tell them, empty when not known): the QP table (rdma res show qp) counted, not one series per QP",
    &[
        "device",
        "port",
        "type",
        "state",
        "pid",
        "comm",
        "training_job",
        "rank",
    ],
);

pub static MODULE_FLAGS: Family = Family::new(
    "roce_nic_module_flags",
    Kind::Counter,
    None,
    "Readings (one every 30 s) in which the module raised an alarm, warning, loss-of-signal or transmitter-fault flag: flag=\"rx_power low alarm lane 2\", \"rx_los lane 1\"… (SFF-8636 and CMIS latch their flags until read: each reading counts what was raised since the one before)",
    &["iface", "flag"],
);

pub static SOURCE_UP: Family = Family::new(
    "roce_nic_source_up",
    Kind::Gauge,
    None,
    "1 when the NIC source was read at the last drain, 0 when the host lacks it or it failed (the reason is logged once): source=\"rdma\" (the RDMA devices, subject empty), \"driver\", \"stats\", \"dcb\", \"dcqcn\" (subject: the netdev), \"module\" (its pluggable module's EEPROM, read with the QP table: CAP_NET_ADMIN), \"qps\" (the QP table, subject empty)",
    &["source", "subject"],
);

pub static MODULE_INFO: Family = Family::new(
    "roce_nic_module",
    Kind::Info,
    None,
    "A netdev's pluggable module: its type and memory map (module), vendor, part number and serial number",
    &["iface", "module", "vendor", "part", "serial"],
);

/// The IBTA port counters (`counters/<file>`) node_exporter's infiniband collector exports, and
/// the name it gives each (`node_infiniband_<name>_total`, labels `device` and `port`): exported
/// here as `roce_nic_infiniband_<name>_total`, the same suffix, labels and units, so a dashboard
/// built on one reads the other with the prefix swapped (and beside node_exporter nothing is
/// counted twice). `port_rcv_data` and `port_xmit_data` count 4-byte words: exported in bytes,
/// as node_exporter does.
pub const INFINIBAND_COUNTERS: &[(&str, &str)] = &[
    ("port_rcv_data", "port_data_received"),
    ("port_xmit_data", "port_data_transmitted"),
    ("port_rcv_packets", "port_packets_received"),
    ("port_xmit_packets", "port_packets_transmitted"),
    ("unicast_rcv_packets", "unicast_packets_received"),
    ("unicast_xmit_packets", "unicast_packets_transmitted"),
    ("multicast_rcv_packets", "multicast_packets_received"),
    ("multicast_xmit_packets", "multicast_packets_transmitted"),
    ("port_rcv_errors", "port_errors_received"),
    ("port_rcv_discards", "port_discards_received"),
    ("port_xmit_discards", "port_discards_transmitted"),
    (
        "port_rcv_constraint_errors",
        "port_constraint_errors_received",
    ),
    (
        "port_xmit_constraint_errors",
        "port_constraint_errors_transmitted",
    ),
    ("port_xmit_wait", "port_transmit_wait"),
    ("link_downed", "link_downed"),
    ("link_error_recovery", "link_error_recovery"),
];

/// The IBTA port counter `file` under node_exporter's `name` (see [`INFINIBAND_COUNTERS`]):
/// `roce_nic_infiniband_<name>_total`, in bytes for the data counters (4-byte words read).
pub fn infiniband(file: &str, name: &str) -> Family {
    let data = file.ends_with("_data");
    Family {
        name: Cow::Owned(format!("roce_nic_infiniband_{name}")),
        kind: Kind::Counter,
        unit: data.then_some(Unit::Bytes),
        help: Cow::Owned(format!(
            "The port's IBTA counter {file} (sysfs counters/{file}{}), summed from the daemon's start as roce_nic_rdma_stat_total; node_exporter's node_infiniband_{name}{}_total",
            if data {
                ", 4-byte words, here in bytes"
            } else {
                ""
            },
            if data { "_bytes" } else { "" }
        )),
        labels: &["device", "port"],
    }
}

pub static MODULE_TEMPERATURE: Family = Family::new(
    "roce_nic_module_temperature",
    Kind::Gauge,
    Some(Unit::Celsius),
    "The module's temperature",
    &["iface"],
);

pub static MODULE_VOLTAGE: Family = Family::new(
    "roce_nic_module_voltage",
    Kind::Gauge,
    Some(Unit::Volts),
    "The module's supply voltage",
    &["iface"],
);

pub static MODULE_TX_BIAS: Family = Family::new(
    "roce_nic_module_tx_bias",
    Kind::Gauge,
    Some(Unit::Amperes),
    "A lane's laser bias current",
    &["iface", "lane"],
);

pub static MODULE_TX_POWER: Family = Family::new(
    "roce_nic_module_tx_power",
    Kind::Gauge,
    Some(Unit::Watts),
    "A lane's transmitted optical power",
    &["iface", "lane"],
);

pub static MODULE_RX_POWER: Family = Family::new(
    "roce_nic_module_rx_power",
    Kind::Gauge,
    Some(Unit::Watts),
    "A lane's received optical power (average or OMA, as the module measures it)",
    &["iface", "lane"],
);

/// Every family of this subject.
pub fn all() -> Vec<Family> {
    let mut out: Vec<Family> = vec![
        RDMA_STAT.clone(),
        RDMA_PORT_STAT.clone(),
        PFC_PAUSE_FRAMES.clone(),
        PFC_PAUSE.clone(),
        PRIORITY_DISCARDS.clone(),
        CLASS_DISCARDS.clone(),
        PAUSE_STORM_EVENTS.clone(),
        DRIVER_STAT.clone(),
        INFO.clone(),
        ETHTOOL_INFO.clone(),
        PFC_ENABLED.clone(),
        MTU.clone(),
        DCQCN_ENABLED.clone(),
        QUEUE_PAIRS.clone(),
        MODULE_FLAGS.clone(),
        SOURCE_UP.clone(),
        MODULE_INFO.clone(),
        MODULE_TEMPERATURE.clone(),
        MODULE_VOLTAGE.clone(),
        MODULE_TX_BIAS.clone(),
        MODULE_TX_POWER.clone(),
        MODULE_RX_POWER.clone(),
    ];
    out.extend(
        INFINIBAND_COUNTERS
            .iter()
            .map(|(file, name)| infiniband(file, name)),
    );
    out
}
