//! The `nic` section: what a host's NIC side said over the window (counter deltas per device,
//! port, netdev and priority), its RoCE configuration, the QP table with the processes owning
//! the QPs, and which sources the host lacks and why. Also the configuration types the NIC
//! sources read (`source::nic`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// ETHTOOL_GDRVINFO: the driver and firmware of a netdev.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverInfo {
    pub driver: String,
    pub version: String,
    pub firmware: String,
    pub bus: String,
}

/// A netdev's IEEE DCB configuration. The PFC and ETS parts are none when the driver does not
/// report them (dcbnl leaves an attribute out when the driver has no getter for it or its
/// getter fails), so that "not reported" is never read as "all off" or "all in class 0".
/// In JSON (recorded configurations) a field left out is none or empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Dcb {
    /// Bit p set: PFC enabled on priority p.
    pub pfc_enabled: Option<u8>,
    /// How many traffic classes may have PFC enabled at once.
    pub pfc_cap: Option<u8>,
    /// PFC frames per priority, as the driver counts them (ieee_pfc requests = sent,
    /// indications = received).
    pub pfc_requests: Option<[u64; 8]>,
    pub pfc_indications: Option<[u64; 8]>,
    /// ETS: traffic class of each priority, and each class's TSA (0 strict, 1 credit-based
    /// shaper, 2 ETS, 255 vendor) and bandwidth % (the transmit one, as `dcb ets` shows it).
    pub prio_tc: Option<[u8; 8]>,
    pub tc_tsa: Option<[u8; 8]>,
    pub tc_bw: Option<[u8; 8]>,
    /// APP table entries with selector DSCP: (dscp, priority), sorted.
    pub dscp_prio: Vec<(u8, u8)>,
    /// Other APP entries: (selector, protocol, priority), sorted.
    pub other_apps: Vec<(u8, u16, u8)>,
    /// DCBX mode bits (DCB_CAP_DCBX_*), if reported.
    pub dcbx: Option<u8>,
    /// The receive buffers (`dcb buffer`, mlx5): the buffer of each priority, each buffer's size
    /// in bytes, and the total; none when the driver reports none.
    pub prio_buffer: Option<[u8; 8]>,
    pub buffer_size: Option<[u32; 8]>,
    pub buffer_total: Option<u32>,
}

impl Dcb {
    /// The priority DSCP `dscp` maps to in the APP table, if any.
    pub fn priority_of_dscp(&self, dscp: u8) -> Option<u8> {
        self.dscp_prio
            .iter()
            .find(|(d, _)| *d == dscp)
            .map(|(_, p)| *p)
    }
}

/// The DCQCN settings of a netdev (mlx5's `ecn/roce_np`, `ecn/roce_rp`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dcqcn {
    /// Bit p: the notification point (CNPs sent on ECN-marked arrivals) is enabled on
    /// priority p.
    pub np_enabled: u8,
    /// Bit p: the reaction point (rate cut on CNPs) is enabled on priority p.
    pub rp_enabled: u8,
    /// `roce_np`'s other files: `cnp_dscp`, `cnp_802p_prio`, `min_time_between_cnps`, …
    pub np: BTreeMap<String, u64>,
    /// `roce_rp`'s other files: `rpg_min_rate`, `rpg_ai_rate`, `initial_alpha_value`, …
    pub rp: BTreeMap<String, u64>,
    /// What could not be read (`roce_np`, `roce_rp/enable/3`, …): those bits are unknown, not
    /// off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
}

impl Dcqcn {
    /// Whether the notification (`np`) and reaction (`rp`) point are enabled on `priority`;
    /// none where the file could not be read.
    pub fn enabled(&self, priority: u8) -> (Option<bool>, Option<bool>) {
        let bit = |side: &str, mask: u8| {
            let unread = self.unread.iter().any(|u| {
                u == side
                    || *u == format!("{side}/enable")
                    || *u == format!("{side}/enable/{priority}")
            });
            (!unread).then_some(mask & (1 << priority) != 0)
        };
        (
            bit("roce_np", self.np_enabled),
            bit("roce_rp", self.rp_enabled),
        )
    }
}

/// One queue pair the kernel tracks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Qp {
    pub device: String,
    /// None until the QP is bound to a port (modified to INIT).
    pub port: Option<u32>,
    pub lqpn: u32,
    /// The remote QP number (RC and UC QPs).
    pub rqpn: Option<u32>,
    /// "RC", "UC", "UD", "XRC_INI"... as iproute2 names them.
    pub qp_type: String,
    /// "RESET", "INIT", "RTR", "RTS"...
    pub state: String,
    /// The creating process (user QPs).
    pub pid: Option<u32>,
    /// The kernel owner's name (RES_KERN_NAME) for kernel QPs, else `/proc/<pid>/comm`.
    pub comm: Option<String>,
    /// What the creating process tells of its training job (user QPs whose process could be
    /// read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<ProcessJob>,
}

/// A process's place in a training job, as its environment and cgroup tell it: launchers
/// (torchrun, Slurm, Open MPI, MPICH/Intel MPI) set the variables each rank starts with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessJob {
    /// The job, named by its launcher: `torchelastic:<TORCHELASTIC_RUN_ID>`,
    /// `slurm:<SLURM_JOB_ID>`, else `torch:<MASTER_ADDR>:<MASTER_PORT>` (the rendezvous every
    /// rank of one job shares).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// `RANK`, else `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `SLURM_PROCID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// `LOCAL_RANK`, else `OMPI_COMM_WORLD_LOCAL_RANK`, `MPI_LOCALRANKID`, `SLURM_LOCALID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    /// `WORLD_SIZE`, else `OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`, `SLURM_NTASKS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// The Kubernetes pod's UID and the container's ID, from the process's cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Why the environment could not be read (the process is gone, or the observer may not
    /// read it: another user's process needs CAP_SYS_PTRACE), when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unread: Option<String>,
}

impl ProcessJob {
    /// Nothing known.
    pub fn is_empty(&self) -> bool {
        self.job.is_none()
            && self.rank.is_none()
            && self.local_rank.is_none()
            && self.world_size.is_none()
            && self.pod.is_none()
            && self.container.is_none()
    }
}

/// The `nic` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Nic {
    /// Seconds between the two readings the deltas are taken over.
    pub seconds: f64,
    /// Sources the host lacks, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<AbsentSource>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    /// The QP table, each QP joined to the wire's flows to it where the wire shows them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub qps: Vec<QpRow>,
    /// The host's GPUs (PCI display and 3D controllers of NVIDIA and AMD), where read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<Gpu>,
}

/// A GPU on the host's PCI bus.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Its PCI address (`0000:18:00.0`).
    pub bus: String,
    /// The PCI vendor id (`0x10de`: NVIDIA, `0x1002`: AMD).
    pub vendor: String,
    /// Its NUMA node (none: the platform says none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
}

/// A source the host lacks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbsentSource {
    /// "rdma" (sysfs devices), "qps" (RDMA netlink), "driver", "stats" (ethtool), "dcb",
    /// "dcqcn".
    pub source: String,
    /// The netdev it was asked of; empty for host-wide sources.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject: String,
    pub reason: String,
}

/// One counter over the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// Its value at the end.
    pub value: u64,
    /// What it grew by over the window (across a 32-bit wrap where there was one); since the
    /// reset when it was reset.
    pub delta: u64,
    /// It went back without a wrap explaining it: a driver reload or a device reset.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
}

/// One entry of a port's GID table in use (`gids/<index>`, `gid_attrs/types/<index>`,
/// `gid_attrs/ndevs/<index>`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gid {
    pub index: u32,
    pub gid: String,
    /// "RoCE v2", "IB/RoCE v1".
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub netdev: String,
}

/// One RDMA device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Device {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hca_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_id: Option<String>,
    /// Its PCI function's files (`device/current_link_speed`, `max_link_speed`,
    /// `current_link_width`, `max_link_width`, `numa_node`), as read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pci: BTreeMap<String, String>,
    pub ports: Vec<Port>,
}

/// One port of an RDMA device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Port {
    pub port: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_layer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    pub netdevs: Vec<String>,
    /// The IBTA port counters (`counters/`; `port_*_data` in 4-byte words).
    pub counters: BTreeMap<String, Counter>,
    /// The driver's counters (`hw_counters/`).
    pub hw_counters: BTreeMap<String, Counter>,
    /// The GID table's entries in use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gids: Vec<Gid>,
    /// rdma_cm's defaults for the port (configfs `rdma_cm/<dev>/ports/<n>/`:
    /// `default_roce_mode`, `default_roce_tos`), where the directory exists.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rdma_cm: BTreeMap<String, String>,
}

impl Port {
    /// The delta of a driver counter over the window, if the port has it.
    pub fn hw(&self, name: &str) -> Option<u64> {
        self.hw_counters.get(name).map(|c| c.delta)
    }
}

/// One netdev.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Its IP addresses: which wire traffic is the host's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<std::net::IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<DriverInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcb: Option<Dcb>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcqcn: Option<Dcqcn>,
    /// The PFC storm prevention timeout in ms (0: off, 65535: the driver's default), where the
    /// driver has the tunable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pfc_watchdog_ms: Option<u16>,
    /// The netdev's IPv4 sysctls that matter with several RoCE netdevs (`arp_ignore`,
    /// `arp_announce`, `rp_filter`; `all/…`: the host-wide ones), as read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
    /// Its pluggable module's diagnostics, where the module has them and they could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optics: Option<Optics>,
    /// Per priority: PFC pauses, their duration and transitions, and discards (from the
    /// driver statistics); priorities with none of these counters are left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priorities: Vec<Priority>,
    /// The driver statistics that tell of RoCE's health (pauses, pause storms, discards, the
    /// RDMA traffic of the vport, link pause); the others are left out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counters: BTreeMap<String, Counter>,
}

impl Interface {
    /// The delta of a driver statistic over the window, if the driver has it.
    pub fn stat(&self, name: &str) -> Option<u64> {
        self.counters.get(name).map(|c| c.delta)
    }

    /// The discards that count frames of the `lossless` priorities (a bit mask), each named
    /// with its delta: `rx_prio<p>_discards` per priority, and mlx5's per traffic class
    /// `rx_prio<tc>_buf_discard` / `_cong_discard` of the classes ETS maps those priorities to
    /// (only when the DCB settings give the map). None when no such counter exists.
    pub fn lossless_discards(&self, lossless: u8) -> Option<Vec<(String, u64)>> {
        let mut out = Vec::new();
        let mut classes: Vec<u8> = Vec::new();
        for p in (0..8u8).filter(|p| lossless & (1 << p) != 0) {
            if let Some(d) = self.stat(&format!("rx_prio{p}_discards")) {
                out.push((format!("priority {p}"), d));
            }
            // A class is judged only when every priority in it is lossless: a lossy priority's
            // drops in a shared class are no PFC failure.
            if let Some(map) = self.dcb.as_ref().and_then(|d| d.prio_tc) {
                let tc = map[usize::from(p)];
                let all_lossless = (0..8usize).all(|q| map[q] != tc || lossless & (1 << q) != 0);
                if all_lossless && !classes.contains(&tc) {
                    classes.push(tc);
                }
            }
        }
        classes.sort_unstable();
        for tc in classes {
            for (kind, what) in [("buf_discard", "buffer"), ("cong_discard", "congestion")] {
                if let Some(d) = self.stat(&format!("rx_prio{tc}_{kind}")) {
                    out.push((format!("traffic class {tc} {what}"), d));
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }
}

/// A pluggable module's digital diagnostics (SFF-8472 for SFP, SFF-8636 for QSFP, CMIS for
/// QSFP-DD and OSFP), as its EEPROM gave them at the window's end.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Optics {
    /// What the module is, and by which specification its memory reads: "QSFP28 (SFF-8636)".
    pub module: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// A copper cable: no light to measure (its power and bias readings are not judged).
    #[serde(default)]
    pub copper: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voltage_v: Option<f64>,
    /// Per lane (from 1): what the module measures of it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lanes: Vec<Lane>,
    /// The module's own alarm and warning thresholds, by quantity: "temperature" (°C),
    /// "voltage" (V), "tx_bias" (mA), "tx_power" and "rx_power" (mW); those it gives.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Limits>,
    /// The alarm and warning flags the module raised: "rx_power low alarm lane 2" (SFF-8636 and
    /// CMIS latch them until read: they tell of any moment since the last read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

/// One lane of a module: laser bias (mA), transmitted and received optical power (mW; received
/// as average power or OMA, as the module measures it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Lane {
    pub lane: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bias_ma: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_power_mw: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_power_mw: Option<f64>,
    /// The module says the lane is not in use (its transmitter disabled, its data path not
    /// activated): its readings are not judged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inactive: bool,
}

/// A module's alarm and warning thresholds for one quantity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub high_alarm: f64,
    pub low_alarm: f64,
    pub high_warning: f64,
    pub low_warning: f64,
}

/// One priority's counters of a netdev, as deltas over the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Priority {
    pub priority: u8,
    /// PFC frames received (the peer asked us to pause) and sent.
    pub rx_pause: u64,
    pub tx_pause: u64,
    /// Time paused (µs), where the driver counts it: received pauses held our transmitter,
    /// sent ones held the peer's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_pause_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_pause_us: Option<u64>,
    /// Frames of this priority dropped on arrival (`rx_prio<p>_discards`).
    pub discards: u64,
}

/// One QP of the resource table, and what the wire shows of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpRow {
    #[serde(flatten)]
    pub qp: Qp,
    /// Packets and bytes the wire shows to this QP (flows whose destination QP is its number),
    /// when the report has a wire view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_packets: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_bytes: Option<u64>,
}

/// `roce-observer check`: the RoCE configuration checklist of a host.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Checklist {
    pub schema: String,
    /// What the host said (the `nic` section of its two readings).
    pub nic: Nic,
    pub items: Vec<ChecklistItem>,
}

impl Checklist {
    /// Some item failed.
    pub fn failed(&self) -> bool {
        self.items.iter().any(|i| i.status == ItemStatus::Fail)
    }
}

/// One line of the checklist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChecklistItem {
    /// "pfc", "trust-dscp", "cnp-trust", "ecn", "cnp-marking", "mtu", "firmware",
    /// "pause-storms", "lossless-discards", "transport-errors", "cnp-sent", "roce-device".
    pub item: String,
    /// The netdev or RDMA device judged; empty for the host as a whole.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub subject: String,
    pub status: ItemStatus,
    /// The settings or counts the status rests on, or what was missing.
    pub evidence: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ItemStatus {
    Pass,
    Fail,
    /// The item does not apply to this host's configuration (e.g. DSCP trust when RoCE is
    /// told apart by VLAN priority).
    NotApplicable,
    /// The host does not say what the item needs (a source absent, one reading only).
    Unknown,
    /// Works, but not as it should for RoCE (a path MTU below 4096): said, never failed.
    Warn,
}

impl ItemStatus {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Fail => "fail",
            Self::NotApplicable => "n/a",
            Self::Unknown => "unknown",
            Self::Warn => "warn",
        }
    }
}

/// `PFC_STORM_PREVENTION_AUTO` of the PFC storm prevention tunable: the driver picks the
/// timeout.
pub const PFC_PREVENTION_AUTO: u16 = 0xffff;

/// Whether the driver statistic `name` counts frames the link corrupted (CRC / FCS and symbol
/// errors: mlx5's `rx_crc_errors_phy`, `rx_symbol_err_phy`, `rx_pcs_symbol_err_phy`; `crc_err`,
/// `fcs_err` of other drivers). FEC's corrected bits are not: correcting is its job.
pub fn is_link_error(name: &str) -> bool {
    ["crc_err", "fcs_err", "symbol_err"]
        .iter()
        .any(|k| name.contains(k))
}

/// The driver's transport error counters (mlx5's Q counters): loss or reordering the wire may
/// not show.
pub const TRANSPORT_ERRORS: &[&str] = &[
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "implied_nak_seq_err",
];

/// A per-priority driver statistic: `rx_prio3_pause_duration` → (received, 3,
/// "pause_duration").
pub fn per_priority(name: &str) -> Option<(bool, u8, &str)> {
    let (rx, rest) = if let Some(r) = name.strip_prefix("rx_prio") {
        (true, r)
    } else {
        (false, name.strip_prefix("tx_prio")?)
    };
    let (digit, what) = rest.split_once('_')?;
    let prio: u8 = digit.parse().ok().filter(|p| *p < 8)?;
    Some((rx, prio, what))
}

/// The priorities of a bit mask, e.g. "0, 3"; "none" for none.
pub fn priority_list(mask: u8) -> String {
    let v: Vec<String> = (0..8)
        .filter(|p| mask & (1 << p) != 0)
        .map(|p: u8| p.to_string())
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
