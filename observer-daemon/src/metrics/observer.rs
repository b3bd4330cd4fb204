//! The observer itself: attachment, drains, the flow table, the time series, its own cost.

#[allow(unused_imports)]
use super::{Family, Kind, Unit};

pub static INFO: Family = Family::new(
    "roce_observer",
    Kind::Info,
    None,
    "The observer: version and mode",
    &["version", "mode"],
);

pub static REATTACHMENTS: Family = Family::new(
    "roce_observer_reattachments",
    Kind::Counter,
    None,
    "Times the observer attached again to an interface re-created under its name",
    &["iface"],
);

pub static DRAIN: Family = Family::new(
    "roce_observer_drain",
    Kind::Gauge,
    Some(Unit::Seconds),
    "Time the last interval's drain of the kernel maps took",
    &[],
);

pub static DRAINS: Family = Family::new(
    "roce_observer_drains",
    Kind::Counter,
    None,
    "Drains of the kernel maps",
    &[],
);

pub static INTERVAL: Family = Family::new(
    "roce_observer_interval",
    Kind::Gauge,
    Some(Unit::Seconds),
    "The drain interval",
    &[],
);

pub static FLOWS_TRACKED: Family = Family::new(
    "roce_observer_flows_tracked",
    Kind::Gauge,
    None,
    "Flows the daemon tracks (in the kernel flow table or its per-CPU cache, or gone but not yet aged out)",
    &[],
);

pub static FLOW_TABLE_ENTRIES: Family = Family::new(
    "roce_observer_flow_table_entries",
    Kind::Gauge,
    None,
    "Entries in the kernel flow table at the last drain (flows held only in the per-CPU cache in front of it are not entries yet)",
    &[],
);

pub static FLOW_TABLE_CAPACITY: Family = Family::new(
    "roce_observer_flow_table_capacity",
    Kind::Gauge,
    None,
    "Capacity of the kernel flow table",
    &[],
);

pub static FLOW_TABLE_FILL_RATIO: Family = Family::new(
    "roce_observer_flow_table_fill_ratio",
    Kind::Gauge,
    None,
    "Entries over capacity of the kernel flow table at the last drain (the flows it held, before that drain aged idle ones out; the LRU table evicts from about capacity minus 256 entries per CPU)",
    &[],
);

pub static FLOW_EVICTIONS: Family = Family::new(
    "roce_observer_flow_evictions",
    Kind::Counter,
    None,
    "Flows a drain saw in the kernel table that the table then evicted (LRU) before the daemon aged them out (flows inserted and evicted between two drains are not seen: their packets are in roce_observer_unattributed_packets_total)",
    &[],
);

pub static UNATTRIBUTED_PACKETS: Family = Family::new(
    "roce_observer_unattributed_packets",
    Kind::Counter,
    None,
    "RoCEv2 packets in the totals that no flow holds (evicted before a drain read them, or refused by a full table); they are in the qp=\"rest\" series",
    &[],
);

pub static CAPTURE_RECEIVED: Family = Family::new(
    "roce_observer_capture_received_frames",
    Kind::Counter,
    None,
    "Frames the libpcap capture received: those that passed its filter (libpcap's ps_recv; on Linux dropped ones included)",
    &["iface"],
);

pub static CAPTURE_DROPPED: Family = Family::new(
    "roce_observer_capture_dropped_frames",
    Kind::Counter,
    None,
    "Frames the libpcap capture never saw: where=\"buffer\", no room in libpcap's buffer (ps_drop); where=\"interface\", dropped by the interface on receive (ps_ifdrop). Their PSNs count as lost; the RDMA sniffer counts no drops",
    &["iface", "where"],
);

pub static SPREAD_DROPPED: Family = Family::new(
    "roce_observer_spread_dropped_frames",
    Kind::Counter,
    None,
    "Mirror copies the observer dropped before accounting them: spread over CPUs (cpus), the queue of the CPU a copy was sent to was full. Their PSNs look lost; the observer-drops finding says so",
    &[],
);

pub static FLOWS_AGED: Family = Family::new(
    "roce_observer_flows_aged",
    Kind::Counter,
    None,
    "Idle flows the daemon forgot (and deleted from the kernel table when there)",
    &[],
);

pub static SERIES_DEMOTIONS: Family = Family::new(
    "roce_observer_series_demotions",
    Kind::Counter,
    None,
    "Per-QP series that stopped (displaced from the top K, or aged out); their counts stay with them, so afterwards the series plus qp=\"rest\" sum to less than the totals (their rates always add up)",
    &[],
);

pub static SERIES: Family = Family::new(
    "roce_observer_series",
    Kind::Gauge,
    None,
    "Queue pairs exported as their own series now",
    &[],
);

pub static MAX_SERIES: Family = Family::new(
    "roce_observer_max_series",
    Kind::Gauge,
    None,
    "The most queue pairs exported as their own series",
    &[],
);

pub static CPU: Family = Family::new(
    "roce_observer_cpu",
    Kind::Counter,
    Some(Unit::Seconds),
    "CPU time the daemon used (user and system)",
    &[],
);

pub static RESIDENT_MEMORY: Family = Family::new(
    "roce_observer_resident_memory",
    Kind::Gauge,
    Some(Unit::Bytes),
    "Resident memory of the daemon",
    &[],
);

pub static KERNEL_MAP_MEMORY: Family = Family::new(
    "roce_observer_kernel_map_memory",
    Kind::Gauge,
    Some(Unit::Bytes),
    "Kernel memory of each of the observer's BPF maps, as the kernel accounts it (its memlock: preallocated, so it stays as attached; per-CPU maps grow with the possible CPUs)",
    &["map"],
);

pub static SKIPPED_FRAMES: Family = Family::new(
    "roce_observer_skipped_frames",
    Kind::Counter,
    None,
    "Frames that are not RoCEv2, by reason (not_ip, not_udp and other_port are ordinary traffic; the others are malformed or unsupported)",
    &["reason"],
);

pub static CONFIG_RELOADS: Family = Family::new(
    "roce_observer_config_reloads",
    Kind::Counter,
    None,
    "Config reloads (SIGHUP) by result",
    &["result"],
);

pub static INTERFACE_ATTACHED: Family = Family::new(
    "roce_observer_interface_attached",
    Kind::Gauge,
    None,
    "1 while the observer is attached to the interface",
    &["iface"],
);

pub static INTERFACE_UP: Family = Family::new(
    "roce_observer_interface_up",
    Kind::Gauge,
    None,
    "1 while the interface is up and running",
    &["iface"],
);

/// Every family of this subject.
pub fn all() -> Vec<Family> {
    vec![
        INFO.clone(),
        REATTACHMENTS.clone(),
        DRAIN.clone(),
        DRAINS.clone(),
        INTERVAL.clone(),
        FLOWS_TRACKED.clone(),
        FLOW_TABLE_ENTRIES.clone(),
        FLOW_TABLE_CAPACITY.clone(),
        FLOW_TABLE_FILL_RATIO.clone(),
        FLOW_EVICTIONS.clone(),
        UNATTRIBUTED_PACKETS.clone(),
        CAPTURE_RECEIVED.clone(),
        CAPTURE_DROPPED.clone(),
        SPREAD_DROPPED.clone(),
        FLOWS_AGED.clone(),
        SERIES_DEMOTIONS.clone(),
        SERIES.clone(),
        MAX_SERIES.clone(),
        CPU.clone(),
        RESIDENT_MEMORY.clone(),
        KERNEL_MAP_MEMORY.clone(),
        SKIPPED_FRAMES.clone(),
        CONFIG_RELOADS.clone(),
        INTERFACE_ATTACHED.clone(),
        INTERFACE_UP.clone(),
    ]
}
