//! The metrics endpoint's content: one [`MetricsView`] per drain, encoded on each scrape by the
//! `prometheus-client` crate (OpenMetrics text, or the Prometheus text format for scrapers
//! that do not ask for OpenMetrics).
//!
//! Per-QP series (`roce_qp_*`) are labelled src, dst, qp, sport, dir and mirror; `qp` is the
//! destination QP in the table's hex notation (`qp="0x0000ab"`, as tshark prints it), or `rest`
//! for the aggregate of the flows that are not series of their own.

use std::sync::{Arc, Mutex};

use observer_common::{
    DIRECTION_EGRESS, FlowKey, IfaceCounters, LatHist, LatKind, MirrorOf, OpClass, SkipReason,
    latency::{LAT_MIN_SHIFT, LAT_OCTAVES, LAT_SUB_BITS},
};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
    registry::Registry,
};

use super::flowbook::{Counts, SeriesRow};
use crate::metrics::{self, Family, export, interfaces, latency, nic, observer, pfc, queue_pairs};
use roce_observer::model::ip_of;

/// One observed interface.
#[derive(Clone, Debug, Default)]
pub struct IfaceRow {
    pub name: String,
    pub attached: bool,
    pub up: bool,
    pub reattachments: u64,
    /// Cumulative: [rx, tx].
    pub counters: [IfaceCounters; 2],
}

/// One latency histogram of one interface: the kind and side of the samples.
#[derive(Clone, Debug)]
pub struct LatRow {
    pub iface: String,
    /// `requests_in`, `requests_out` or `mirror`.
    pub side: &'static str,
    /// `LatKind` as u8.
    pub kind: u8,
    pub hist: LatHist,
}

/// The classic buckets of a latency histogram: one per octave, `le` its upper edge in seconds
/// (2^10 ns = 1.024 us up to 2^34 ns = 17.2 s), then +Inf. Samples are whole nanoseconds and a
/// bucket holds [lo, hi): one exactly on an edge counts above it.
pub fn octave_buckets(h: &LatHist) -> Vec<(f64, u64)> {
    let per = 1usize << LAT_SUB_BITS;
    let mut out = Vec::with_capacity(LAT_OCTAVES as usize + 2);
    out.push(((1u64 << LAT_MIN_SHIFT) as f64 / 1e9, h.buckets[0]));
    for k in 0..LAT_OCTAVES as usize {
        let n: u64 = h.buckets[1 + k * per..1 + (k + 1) * per].iter().sum();
        let le = (1u64 << (LAT_MIN_SHIFT as usize + k + 1)) as f64 / 1e9;
        out.push((le, n));
    }
    out.push((f64::INFINITY, h.buckets[h.buckets.len() - 1]));
    out
}

/// A family's descriptor, from the registry.
trait Describe {
    fn describe<'s>(&'s mut self, f: &'s Family) -> Result<MetricEncoder<'s>, std::fmt::Error>;
}

impl Describe for DescriptorEncoder<'_> {
    fn describe<'s>(&'s mut self, f: &'s Family) -> Result<MetricEncoder<'s>, std::fmt::Error> {
        let unit = f.unit.map(metrics::Unit::encoder_unit);
        self.encode_descriptor(&f.name, &f.help, unit, f.kind.metric_type())
    }
}

fn histogram_family<L: prometheus_client::encoding::EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    f: &Family,
    rows: impl IntoIterator<Item = (L, LatHist)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.describe(f)?;
    for (labels, h) in rows {
        // The count is the buckets' sum (OpenMetrics wants it equal to +Inf; the kernel's
        // shared histograms may be read between a sample's count and its bucket).
        let buckets = octave_buckets(&h);
        let count = buckets.iter().map(|(_, n)| n).sum();
        m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
            h.sum_ns as f64 / 1e9,
            count,
            &buckets,
            None,
        )?;
    }
    Ok(())
}

/// libpcap's counters of a capture (`run --capture`), cumulative.
#[derive(Clone, Debug, Default)]
pub struct CaptureRow {
    pub device: String,
    pub received: u64,
    pub dropped: u64,
    pub if_dropped: u64,
}

/// What a driver statistic the sidecar exports is (the others are not read into the metrics:
/// mlx5 has hundreds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatFamily {
    /// `rx_prio<p>_pause` (received PFC frames), `tx_prio<p>_pause` (sent).
    PfcFrames { rx: bool, priority: u8 },
    /// `rx_prio<p>_pause_duration`, `tx_…`: µs paused (mlx5).
    PfcPauseMicros { rx: bool, priority: u8 },
    /// `rx_prio<p>_discards`: frames of priority p dropped on arrival.
    Discards { priority: u8 },
    /// mlx5's `rx_prio<n>_buf_discard` and `_cong_discard`: indexed by traffic class, not
    /// priority (the per-traffic-class congestion group of the PPCNT register).
    ClassDiscards { class: u8, kind: &'static str },
    /// `tx_pause_storm_warning_events`, `tx_pause_storm_error_events`.
    StormEvents { level: &'static str },
    /// One of [`DRIVER_COUNTERS`].
    Driver,
}

/// The other RoCE-health driver statistics exported as they are (`roce_nic_driver_stat_total`):
/// PHY discards, the RDMA traffic of the vport, 802.3x (link) PAUSE frames and time, and the
/// PHY's CRC and symbol errors.
pub const DRIVER_COUNTERS: &[&str] = &[
    "rx_discards_phy",
    "tx_discards_phy",
    "rx_vport_rdma_unicast_packets",
    "rx_vport_rdma_unicast_bytes",
    "tx_vport_rdma_unicast_packets",
    "tx_vport_rdma_unicast_bytes",
    "rx_pause_ctrl_phy",
    "tx_pause_ctrl_phy",
    "rx_global_pause",
    "tx_global_pause",
    "rx_global_pause_duration",
    "tx_global_pause_duration",
    // Frames the link corrupted: a cable, optic or port going bad.
    "rx_crc_errors_phy",
    "rx_symbol_err_phy",
    "rx_pcs_symbol_err_phy",
];

impl StatFamily {
    /// The family of the driver statistic `name`; none for the statistics not exported.
    pub fn of(name: &str) -> Option<Self> {
        if let Some((rx, priority, what)) = roce_observer::model::nic::per_priority(name) {
            return match (rx, what) {
                (_, "pause") => Some(Self::PfcFrames { rx, priority }),
                (_, "pause_duration") => Some(Self::PfcPauseMicros { rx, priority }),
                (true, "discards") => Some(Self::Discards { priority }),
                (true, "buf_discard") => Some(Self::ClassDiscards {
                    class: priority,
                    kind: "buf_discard",
                }),
                (true, "cong_discard") => Some(Self::ClassDiscards {
                    class: priority,
                    kind: "cong_discard",
                }),
                _ => None,
            };
        }
        match name {
            "tx_pause_storm_warning_events" => Some(Self::StormEvents { level: "warning" }),
            "tx_pause_storm_error_events" => Some(Self::StormEvents { level: "error" }),
            n if DRIVER_COUNTERS.contains(&n) => Some(Self::Driver),
            _ => None,
        }
    }
}

/// One counter of an RDMA device's port, cumulative since the daemon first read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaCounterRow {
    pub device: String,
    pub port: u32,
    pub counter: String,
    pub value: u64,
}

/// One exported driver statistic of a netdev, cumulative since the daemon first read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatRow {
    pub iface: String,
    pub stat: String,
    pub family: StatFamily,
    pub value: u64,
}

/// A netdev's driver and firmware (`roce_nic_info`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NicInfoRow {
    pub iface: String,
    /// The RDMA device behind it.
    pub device: String,
    pub driver: String,
    pub version: String,
    pub firmware: String,
    /// The RDMA device's model (`hca_type`, e.g. MT4129), to compare firmware among cards of
    /// one model: one driver serves several generations.
    pub model: String,
    pub bus: String,
    /// The driver's firmware string as `ethtool -i` gives it (with the PSID), for
    /// `roce_nic_ethtool_info`'s `firmware_version` (node_exporter's).
    pub driver_firmware: String,
}

/// The IBTA counters named as node_exporter names them (the registry's).
pub use crate::metrics::nic::INFINIBAND_COUNTERS;

/// A netdev's RoCE configuration, as last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NicConfigRow {
    pub iface: String,
    pub mtu: Option<u32>,
    /// Bit p: PFC enabled on priority p (none: DCB not reported).
    pub pfc_enabled: Option<u8>,
    /// DCQCN per priority and point (`np`, `rp`): enabled or not, where it could be read.
    pub dcqcn: Vec<(u8, &'static str, bool)>,
}

/// Whether a NIC source could be read at the last reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceRow {
    /// `rdma`, `driver`, `stats`, `dcb` or `dcqcn`.
    pub source: String,
    /// The netdev (empty for `rdma`).
    pub subject: String,
    pub up: bool,
}

/// The NIC side of the host (`roce_nic_*`).
#[derive(Clone, Debug, Default)]
pub struct NicMetrics {
    /// `hw_counters/` of each port.
    pub hw_counters: Vec<RdmaCounterRow>,
    /// `counters/` (IBTA) of each port.
    pub port_counters: Vec<RdmaCounterRow>,
    pub stats: Vec<StatRow>,
    pub info: Vec<NicInfoRow>,
    pub config: Vec<NicConfigRow>,
    /// The QP table counted per device, port, type, state and process.
    pub qps: Vec<(QpGroup, u64)>,
    /// Each netdev's pluggable module, as last read.
    pub optics: Vec<(String, roce_observer::model::nic::Optics)>,
    /// Per netdev and module flag: the readings in which the module raised it.
    pub module_flags: Vec<(String, String, u64)>,
    pub sources: Vec<SourceRow>,
}

/// QPs of one device port, type and state held by one process (`rdma res show qp`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QpGroup {
    pub device: String,
    /// Empty until the QP is bound to a port.
    pub port: String,
    pub qp_type: String,
    pub state: String,
    /// Empty for kernel QPs.
    pub pid: String,
    pub comm: String,
    /// The process's launcher job and rank, empty when not known.
    pub job: String,
    pub rank: String,
}

/// One sender's PAUSE / PFC frames of one class seen on the wire (the kernel's pause table),
/// cumulative.
#[derive(Clone, Debug, PartialEq)]
pub struct PfcRow {
    /// `aa:bb:cc:dd:ee:ff`, or `other` for the senders beyond the cap.
    pub src_mac: String,
    /// `0` to `7`, or `link` for 802.3x PAUSE.
    pub priority: String,
    pub dir: &'static str,
    pub mirror: String,
    pub frames: u64,
    pub xon: u64,
    pub quanta: u64,
    /// The quanta as time at the link speed (none while it is unknown).
    pub seconds: Option<f64>,
}

/// Everything the endpoint shows, as of the last drain.
#[derive(Clone, Debug, Default)]
pub struct MetricsView {
    pub mode: &'static str,
    /// Host mode has a tx direction (TC egress).
    pub egress: bool,
    pub interfaces: Vec<IfaceRow>,
    pub series: Vec<SeriesRow>,
    pub rest: Counts,
    pub interval_seconds: f64,
    pub max_series: usize,
    pub drain_seconds: f64,
    pub drains: u64,
    pub table_entries: usize,
    pub table_capacity: u32,
    pub flows: usize,
    pub evictions: u64,
    pub unattributed_packets: u64,
    pub aged: u64,
    pub demotions: u64,
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    /// The kernel memory of each BPF map the observer holds (name, bytes; none: no kernel
    /// programs).
    pub kernel_maps: Vec<(String, u64)>,
    pub skipped: [u64; SkipReason::COUNT],
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    /// Latency per interface, side and kind (cumulative).
    pub latency: Vec<LatRow>,
    /// The latency of the requests each series' flow sent: [ack, read] (cumulative).
    pub qp_latency: Vec<(FlowKey, [LatHist; 2])>,
    /// RC, UC and XRC connections among the flows of the last drain.
    pub connections: usize,
    /// A libpcap capture's own counters (none: XDP).
    pub capture: Option<CaptureRow>,
    /// Mirror copies spread over CPUs that found their CPU's queue full (cumulative).
    pub spread_dropped: u64,
    /// The NIC side: RDMA device counters, driver statistics and configuration.
    pub nic: NicMetrics,
    /// PAUSE / PFC frames on the wire per sender and class.
    pub pfc: Vec<PfcRow>,
    /// The fleet records' export, when on.
    pub export: Option<crate::records::ExportRow>,
    /// Training jobs, when on (`run --capture DEV --jobs`).
    pub jobs: Option<crate::jobs::JobsView>,
}

/// Labels of a flow's series: `qp` in the table's hex notation, as tshark prints it
/// (`qp="0x0000ab"`).
pub fn flow_labels(key: &FlowKey) -> [(&'static str, String); 6] {
    flow_fields(key, roce_observer::model::qp_hex(key.dest_qp))
}

/// A flow's fields with `qp` as given (the JSON lines keep the decimal number).
pub fn flow_fields(key: &FlowKey, qp: String) -> [(&'static str, String); 6] {
    [
        ("src", ip_of(key.src_ip).to_string()),
        ("dst", ip_of(key.dst_ip).to_string()),
        ("qp", qp),
        ("sport", key.udp_src_port.to_string()),
        ("dir", direction_label(key.mirror).to_string()),
        ("mirror", mirror_label(key.mirror)),
    ]
}

/// The `mirror` label of a key's mirror field (a flow's or a pause sender's): empty when seen
/// directly, `erspan-<session>`, the mirror's kind, or `all-sessions`.
pub fn mirror_label(mirror: u16) -> String {
    match MirrorOf::of(mirror) {
        MirrorOf::Direct => String::new(),
        MirrorOf::Session(id) => format!("erspan-{id}"),
        MirrorOf::Kind(k) => k.name().to_string(),
        // The PSN analysis of every session of a mirrored flow together.
        MirrorOf::Union => "all-sessions".to_string(),
    }
}

/// The `dir` label of a key's mirror field: `tx` for TC egress, else `rx`.
pub fn direction_label(mirror: u16) -> &'static str {
    if mirror & DIRECTION_EGRESS != 0 {
        "tx"
    } else {
        "rx"
    }
}

/// Labels of the rest series (`qp="rest"`).
pub fn rest_labels() -> [(&'static str, String); 6] {
    [
        ("src", String::new()),
        ("dst", String::new()),
        ("qp", "rest".to_string()),
        ("sport", String::new()),
        ("dir", String::new()),
        ("mirror", String::new()),
    ]
}

/// ECN codepoint names, indexed by the codepoint.
pub const ECN_NAMES: [&str; 4] = ["not_ect", "ect1", "ect0", "ce"];

/// Encodes the shared snapshot on every scrape.
#[derive(Debug)]
pub struct ViewCollector(pub Arc<Mutex<MetricsView>>);

fn counter_family<L: prometheus_client::encoding::EncodeLabelSet, N>(
    enc: &mut DescriptorEncoder,
    f: &Family,
    rows: impl IntoIterator<Item = (L, N)>,
) -> Result<(), std::fmt::Error>
where
    ConstCounter<N>: EncodeMetric,
{
    let mut m = enc.describe(f)?;
    for (labels, v) in rows {
        ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauge<N: prometheus_client::encoding::EncodeGaugeValue + std::fmt::Debug>(
    enc: &mut DescriptorEncoder,
    f: &Family,
    v: N,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<N>: EncodeMetric,
{
    ConstGauge::new(v).encode(enc.describe(f)?)
}

fn counter(enc: &mut DescriptorEncoder, f: &Family, v: u64) -> Result<(), std::fmt::Error> {
    ConstCounter::new(v).encode(enc.describe(f)?)
}

impl Collector for ViewCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.lock().map_err(|_| std::fmt::Error)?;
        // The NIC side alone (nothing attached) observes no wire: no wire family says 0.
        let wire = s.mode != "nic";
        let dirs: &[(usize, &str)] = if s.egress {
            &[(0, "rx"), (1, "tx")]
        } else {
            &[(0, "rx")]
        };
        let per_iface = |f: &dyn Fn(&IfaceCounters) -> u64| {
            let mut rows = Vec::new();
            for i in &s.interfaces {
                for (d, dir) in dirs {
                    rows.push((
                        [("iface", i.name.clone()), ("dir", dir.to_string())],
                        f(&i.counters[*d]),
                    ));
                }
            }
            rows
        };
        counter_family(&mut enc, &interfaces::FRAMES, per_iface(&|c| c.frames))?;
        counter_family(
            &mut enc,
            &interfaces::FRAME_BYTES,
            per_iface(&|c| c.frame_bytes),
        )?;
        counter_family(
            &mut enc,
            &interfaces::ROCE_PACKETS,
            per_iface(&|c| c.roce_packets),
        )?;
        counter_family(
            &mut enc,
            &interfaces::ROCE_BYTES,
            per_iface(&|c| c.roce_bytes),
        )?;
        {
            let mut rows = Vec::new();
            for i in &s.interfaces {
                for (d, dir) in dirs {
                    for (cp, name) in ECN_NAMES.iter().enumerate() {
                        rows.push((
                            [
                                ("iface", i.name.clone()),
                                ("dir", dir.to_string()),
                                ("ecn", name.to_string()),
                            ],
                            i.counters[*d].ecn[cp],
                        ));
                    }
                }
            }
            counter_family(&mut enc, &interfaces::ECN_PACKETS, rows)?;
        }
        {
            let mut rows = Vec::new();
            for i in &s.interfaces {
                for (d, dir) in dirs {
                    for op in OpClass::ALL {
                        rows.push((
                            [
                                ("iface", i.name.clone()),
                                ("dir", dir.to_string()),
                                ("op", op.name().to_string()),
                            ],
                            i.counters[*d].ops[op as usize],
                        ));
                    }
                }
            }
            counter_family(&mut enc, &interfaces::OP_PACKETS, rows)?;
        }
        if wire {
            for (m, family) in queue_pairs::counts().iter().enumerate() {
                let rows = s
                    .series
                    .iter()
                    .map(|r| (flow_labels(&r.key), r.counts.0[m]))
                    .chain(std::iter::once((rest_labels(), s.rest.0[m])));
                counter_family(&mut enc, family, rows)?;
            }
            for kind in LatKind::ALL {
                let (iface, qp) = match kind {
                    LatKind::Ack => (&latency::ACK, &latency::QP_ACK),
                    LatKind::Read => (&latency::READ, &latency::QP_READ),
                };
                histogram_family(
                    &mut enc,
                    iface,
                    s.latency.iter().filter(|r| r.kind == kind as u8).map(|r| {
                        (
                            [("iface", r.iface.clone()), ("side", r.side.to_string())],
                            r.hist,
                        )
                    }),
                )?;
                histogram_family(
                    &mut enc,
                    qp,
                    s.qp_latency
                        .iter()
                        .filter(|(_, h)| h[kind as usize].count > 0)
                        .map(|(k, h)| (flow_labels(k), h[kind as usize])),
                )?;
            }
            gauge(&mut enc, &queue_pairs::CONNECTIONS, s.connections as i64)?;
        }

        // Self metrics.
        {
            let mut m = enc.describe(&observer::INFO)?;
            m.encode_info(&[
                ("version", env!("CARGO_PKG_VERSION").to_string()),
                ("mode", s.mode.to_string()),
            ])?;
        }
        for (family, f) in [
            (
                &observer::INTERFACE_ATTACHED,
                (|i: &IfaceRow| i.attached as i64) as fn(&IfaceRow) -> i64,
            ),
            (&observer::INTERFACE_UP, |i: &IfaceRow| i.up as i64),
        ] {
            let mut m = enc.describe(family)?;
            for i in &s.interfaces {
                ConstGauge::new(f(i)).encode(m.encode_family(&[("iface", i.name.clone())])?)?;
            }
        }
        counter_family(
            &mut enc,
            &observer::REATTACHMENTS,
            s.interfaces
                .iter()
                .map(|i| ([("iface", i.name.clone())], i.reattachments)),
        )?;
        gauge(&mut enc, &observer::DRAIN, s.drain_seconds)?;
        counter(&mut enc, &observer::DRAINS, s.drains)?;
        gauge(&mut enc, &observer::INTERVAL, s.interval_seconds)?;
        if wire {
            gauge(&mut enc, &observer::FLOWS_TRACKED, s.flows as i64)?;
            // A libpcap capture fills no kernel table: no table metric says it is empty.
            if s.mode != "capture" {
                gauge(
                    &mut enc,
                    &observer::FLOW_TABLE_ENTRIES,
                    s.table_entries as i64,
                )?;
                gauge(
                    &mut enc,
                    &observer::FLOW_TABLE_CAPACITY,
                    i64::from(s.table_capacity),
                )?;
                gauge(
                    &mut enc,
                    &observer::FLOW_TABLE_FILL_RATIO,
                    s.table_entries as f64 / f64::from(s.table_capacity.max(1)),
                )?;
                counter(&mut enc, &observer::FLOW_EVICTIONS, s.evictions)?;
            }
            counter(
                &mut enc,
                &observer::UNATTRIBUTED_PACKETS,
                s.unattributed_packets,
            )?;
            if let Some(c) = &s.capture {
                counter_family(
                    &mut enc,
                    &observer::CAPTURE_RECEIVED,
                    [([("iface", c.device.clone())], c.received)],
                )?;
                counter_family(
                    &mut enc,
                    &observer::CAPTURE_DROPPED,
                    [
                        (
                            [("iface", c.device.clone()), ("where", "buffer".to_string())],
                            c.dropped,
                        ),
                        (
                            [
                                ("iface", c.device.clone()),
                                ("where", "interface".to_string()),
                            ],
                            c.if_dropped,
                        ),
                    ],
                )?;
            }
            counter(&mut enc, &observer::SPREAD_DROPPED, s.spread_dropped)?;
            counter(&mut enc, &observer::FLOWS_AGED, s.aged)?;
            counter(&mut enc, &observer::SERIES_DEMOTIONS, s.demotions)?;
            gauge(&mut enc, &observer::SERIES, s.series.len() as i64)?;
            gauge(&mut enc, &observer::MAX_SERIES, s.max_series as i64)?;
        }

        {
            let c = ConstCounter::new(s.cpu_seconds);
            c.encode(enc.describe(&observer::CPU)?)?;
        }
        gauge(
            &mut enc,
            &observer::RESIDENT_MEMORY,
            s.resident_bytes as i64,
        )?;
        if !s.kernel_maps.is_empty() {
            let mut m = enc.describe(&observer::KERNEL_MAP_MEMORY)?;
            for (name, bytes) in &s.kernel_maps {
                ConstGauge::new(*bytes as i64)
                    .encode(m.encode_family(&[("map", name.clone())])?)?;
            }
        }
        if let Some(e) = &s.export {
            let st = &e.stats;
            counter_family(
                &mut enc,
                &export::RECORDS,
                [
                    ([("outcome", "sent")], st.sent),
                    ([("outcome", "rejected")], st.rejected),
                    ([("outcome", "dropped")], st.dropped),
                ],
            )?;
            gauge(&mut enc, &export::PENDING, st.pending as i64)?;
            gauge(&mut enc, &export::BUFFER, st.queued_bytes as i64)?;
            gauge(&mut enc, &export::BUFFER_CAPACITY, e.buffer_capacity as i64)?;
            counter(&mut enc, &export::RETRIES, st.retries)?;
            counter(&mut enc, &export::INTERVALS, e.intervals)?;
            gauge(&mut enc, &export::UP, i64::from(!st.failing))?;
        }
        if wire {
            counter_family(
                &mut enc,
                &observer::SKIPPED_FRAMES,
                SkipReason::ALL
                    .iter()
                    .map(|r| ([("reason", r.name().to_string())], s.skipped[*r as usize])),
            )?;
        }

        counter_family(
            &mut enc,
            &observer::CONFIG_RELOADS,
            [
                ([("result", "ok".to_string())], s.reloads_ok),
                ([("result", "error".to_string())], s.reloads_failed),
            ],
        )?;
        encode_nic(&mut enc, &s.nic)?;
        if wire {
            encode_pfc(&mut enc, &s.pfc)?;
        }
        if let Some(j) = &s.jobs {
            encode_jobs(&mut enc, j)?;
        }
        Ok(())
    }
}

/// The training jobs' families.
fn encode_jobs(
    enc: &mut DescriptorEncoder,
    j: &crate::jobs::JobsView,
) -> Result<(), std::fmt::Error> {
    use crate::metrics::jobs as m;
    gauge(enc, &m::JOBS, j.jobs as i64)?;
    gauge(enc, &m::UNEXPORTED, j.unexported as i64)?;
    counter(enc, &m::WINDOWS, j.windows)?;
    {
        let mut f = enc.describe(&m::HOSTS)?;
        for r in &j.rows {
            ConstGauge::new(r.hosts as i64)
                .encode(f.encode_family(&[("training_job", r.label.clone())])?)?;
        }
    }
    {
        let mut f = enc.describe(&m::PERIOD)?;
        for r in &j.rows {
            if let Some(p) = r.period_seconds {
                ConstGauge::new(p)
                    .encode(f.encode_family(&[("training_job", r.label.clone())])?)?;
            }
        }
    }
    {
        let bounds = crate::jobs::iteration_buckets();
        let mut f = enc.describe(&m::ITERATION)?;
        for r in &j.rows {
            let buckets: Vec<(f64, u64)> = bounds
                .iter()
                .copied()
                .chain([f64::INFINITY])
                .zip(r.buckets.iter().copied())
                .collect();
            f.encode_family(&[("training_job", r.label.clone())])?
                .encode_histogram::<NoLabelSet>(r.sum_seconds, r.count, &buckets, None)?;
        }
    }
    {
        let mut f = enc.describe(&m::STRAGGLER)?;
        for r in &j.rows {
            if let Some((host, cause)) = &r.straggler {
                ConstGauge::new(1i64).encode(f.encode_family(&[
                    ("training_job", r.label.clone()),
                    ("host", host.clone()),
                    ("cause", cause.clone()),
                ])?)?;
            }
        }
    }
    {
        let mut f = enc.describe(&m::HUNG)?;
        for r in &j.rows {
            ConstGauge::new(i64::from(r.hung))
                .encode(f.encode_family(&[("training_job", r.label.clone())])?)?;
        }
    }
    {
        let mut f = enc.describe(&m::SILENT)?;
        for r in &j.rows {
            if let Some(p) = r.silent_periods {
                ConstGauge::new(p)
                    .encode(f.encode_family(&[("training_job", r.label.clone())])?)?;
            }
        }
    }
    {
        let mut f = enc.describe(&m::IRREGULAR)?;
        for r in &j.rows {
            ConstGauge::new(r.irregular as i64)
                .encode(f.encode_family(&[("training_job", r.label.clone())])?)?;
        }
    }
    Ok(())
}

/// Per-priority labels of a netdev's statistic: iface, dir, priority.
fn prio_labels(r: &StatRow, rx: bool, priority: u8) -> [(&'static str, String); 3] {
    [
        ("iface", r.iface.clone()),
        ("dir", if rx { "rx" } else { "tx" }.to_string()),
        ("priority", priority.to_string()),
    ]
}

/// The `roce_nic_*` families.
fn encode_nic(enc: &mut DescriptorEncoder, n: &NicMetrics) -> Result<(), std::fmt::Error> {
    let port_labels = |r: &RdmaCounterRow| {
        (
            [
                ("device", r.device.clone()),
                ("port", r.port.to_string()),
                ("counter", r.counter.clone()),
            ],
            r.value,
        )
    };
    counter_family(enc, &nic::RDMA_STAT, n.hw_counters.iter().map(port_labels))?;
    // The IBTA counters node_exporter names get its names; the others stay in one family.
    let node_name = |c: &str| INFINIBAND_COUNTERS.iter().find(|(f, _)| *f == c);
    for (file, name) in INFINIBAND_COUNTERS {
        let data = file.ends_with("_data");
        let rows = n
            .port_counters
            .iter()
            .filter(|r| r.counter == *file)
            .map(|r| {
                (
                    [("device", r.device.clone()), ("port", r.port.to_string())],
                    // 4-byte words to bytes, as node_exporter does.
                    if data {
                        r.value.saturating_mul(4)
                    } else {
                        r.value
                    },
                )
            });
        counter_family(enc, &nic::infiniband(file, name), rows)?;
    }
    counter_family(
        enc,
        &nic::RDMA_PORT_STAT,
        n.port_counters
            .iter()
            .filter(|r| node_name(&r.counter).is_none())
            .map(port_labels),
    )?;
    counter_family(
        enc,
        &nic::PFC_PAUSE_FRAMES,
        n.stats.iter().filter_map(|r| match r.family {
            StatFamily::PfcFrames { rx, priority } => Some((prio_labels(r, rx, priority), r.value)),
            _ => None,
        }),
    )?;
    counter_family(
        enc,
        &nic::PFC_PAUSE,
        n.stats.iter().filter_map(|r| match r.family {
            StatFamily::PfcPauseMicros { rx, priority } => {
                Some((prio_labels(r, rx, priority), r.value as f64 / 1e6))
            }
            _ => None,
        }),
    )?;
    counter_family(
        enc,
        &nic::PRIORITY_DISCARDS,
        n.stats.iter().filter_map(|r| match r.family {
            StatFamily::Discards { priority } => Some((
                [
                    ("iface", r.iface.clone()),
                    ("priority", priority.to_string()),
                ],
                r.value,
            )),
            _ => None,
        }),
    )?;
    counter_family(
        enc,
        &nic::CLASS_DISCARDS,
        n.stats.iter().filter_map(|r| match r.family {
            StatFamily::ClassDiscards { class, kind } => Some((
                [
                    ("iface", r.iface.clone()),
                    ("class", class.to_string()),
                    ("kind", kind.to_string()),
                ],
                r.value,
            )),
            _ => None,
        }),
    )?;
    counter_family(
        enc,
        &nic::PAUSE_STORM_EVENTS,
        n.stats.iter().filter_map(|r| match r.family {
            StatFamily::StormEvents { level } => Some((
                [("iface", r.iface.clone()), ("level", level.to_string())],
                r.value,
            )),
            _ => None,
        }),
    )?;
    counter_family(
        enc,
        &nic::DRIVER_STAT,
        n.stats.iter().filter_map(|r| match r.family {
            StatFamily::Driver => Some((
                [("iface", r.iface.clone()), ("counter", r.stat.clone())],
                r.value,
            )),
            _ => None,
        }),
    )?;
    {
        let mut m = enc.describe(&nic::INFO)?;
        for i in &n.info {
            m.encode_info(&[
                ("iface", i.iface.clone()),
                ("device", i.device.clone()),
                ("driver", i.driver.clone()),
                ("version", i.version.clone()),
                ("firmware", i.firmware.clone()),
                ("model", i.model.clone()),
                ("bus", i.bus.clone()),
            ])?;
        }
    }
    {
        // node_exporter's node_ethtool_info, its labels.
        let mut m = enc.describe(&nic::ETHTOOL_INFO)?;
        for i in &n.info {
            m.encode_info(&[
                ("bus_info", i.bus.clone()),
                ("device", i.iface.clone()),
                ("driver", i.driver.clone()),
                ("expansion_rom_version", String::new()),
                ("firmware_version", i.driver_firmware.clone()),
                ("version", i.version.clone()),
            ])?;
        }
    }
    {
        let mut m = enc.describe(&nic::PFC_ENABLED)?;
        for c in &n.config {
            let Some(bits) = c.pfc_enabled else { continue };
            for p in 0..8u8 {
                let labels = [("iface", c.iface.clone()), ("priority", p.to_string())];
                ConstGauge::new(i64::from((bits >> p) & 1)).encode(m.encode_family(&labels)?)?;
            }
        }
    }
    {
        let mut m = enc.describe(&nic::MTU)?;
        for c in &n.config {
            let Some(mtu) = c.mtu else { continue };
            ConstGauge::new(i64::from(mtu))
                .encode(m.encode_family(&[("iface", c.iface.clone())])?)?;
        }
    }
    {
        let mut m = enc.describe(&nic::DCQCN_ENABLED)?;
        for c in &n.config {
            for (p, point, enabled) in &c.dcqcn {
                let labels = [
                    ("iface", c.iface.clone()),
                    ("priority", p.to_string()),
                    ("point", point.to_string()),
                ];
                ConstGauge::new(i64::from(*enabled)).encode(m.encode_family(&labels)?)?;
            }
        }
    }
    {
        let mut m = enc.describe(&nic::QUEUE_PAIRS)?;
        for (g, n) in &n.qps {
            let labels = [
                ("device", g.device.clone()),
                ("port", g.port.clone()),
                ("type", g.qp_type.clone()),
                ("state", g.state.clone()),
                ("pid", g.pid.clone()),
                ("comm", g.comm.clone()),
                ("training_job", g.job.clone()),
                ("rank", g.rank.clone()),
            ];
            ConstGauge::new(*n as i64).encode(m.encode_family(&labels)?)?;
        }
    }
    encode_optics(enc, &n.optics)?;
    counter_family(
        enc,
        &nic::MODULE_FLAGS,
        n.module_flags
            .iter()
            .map(|(i, f, v)| ([("iface", i.clone()), ("flag", f.clone())], *v)),
    )?;
    let mut m = enc.describe(&nic::SOURCE_UP)?;
    for r in &n.sources {
        let labels = [("source", r.source.clone()), ("subject", r.subject.clone())];
        ConstGauge::new(i64::from(r.up)).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The `roce_nic_module*` families: each netdev's pluggable module and its diagnostics, in base
/// units (the check's `optics` item judges them against the module's thresholds).
fn encode_optics(
    enc: &mut DescriptorEncoder,
    optics: &[(String, roce_observer::model::nic::Optics)],
) -> Result<(), std::fmt::Error> {
    {
        let mut m = enc.describe(&nic::MODULE_INFO)?;
        for (iface, o) in optics {
            m.encode_info(&[
                ("iface", iface.clone()),
                ("module", o.module.clone()),
                ("vendor", o.vendor.clone().unwrap_or_default()),
                ("part", o.part.clone().unwrap_or_default()),
                ("serial", o.serial.clone().unwrap_or_default()),
            ])?;
        }
    }
    for (family, get) in [
        (
            &nic::MODULE_TEMPERATURE,
            (|o: &roce_observer::model::nic::Optics| o.temperature_c) as fn(&_) -> Option<f64>,
        ),
        (&nic::MODULE_VOLTAGE, |o| o.voltage_v),
    ] {
        let mut m = enc.describe(family)?;
        for (iface, o) in optics {
            if let Some(v) = get(o) {
                ConstGauge::new(v).encode(m.encode_family(&[("iface", iface.clone())])?)?;
            }
        }
    }
    // In base units: mA and mW read, A and W exported.
    for (family, get) in [
        (
            &nic::MODULE_TX_BIAS,
            (|l: &roce_observer::model::nic::Lane| l.tx_bias_ma) as fn(&_) -> Option<f64>,
        ),
        (&nic::MODULE_TX_POWER, |l| l.tx_power_mw),
        (&nic::MODULE_RX_POWER, |l| l.rx_power_mw),
    ] {
        let mut m = enc.describe(family)?;
        for (iface, o) in optics.iter().filter(|(_, o)| !o.copper) {
            for l in &o.lanes {
                if let Some(v) = get(l) {
                    let labels = [("iface", iface.clone()), ("lane", l.lane.to_string())];
                    ConstGauge::new(v * 1e-3).encode(m.encode_family(&labels)?)?;
                }
            }
        }
    }
    Ok(())
}

/// The `roce_pfc_*` families: PAUSE / PFC frames on the wire.
fn encode_pfc(enc: &mut DescriptorEncoder, rows: &[PfcRow]) -> Result<(), std::fmt::Error> {
    let labels = |r: &PfcRow| {
        [
            ("src_mac", r.src_mac.clone()),
            ("priority", r.priority.clone()),
            ("dir", r.dir.to_string()),
            ("mirror", r.mirror.clone()),
        ]
    };
    counter_family(
        enc,
        &pfc::FRAMES,
        rows.iter().map(|r| (labels(r), r.frames)),
    )?;
    counter_family(
        enc,
        &pfc::XON_FRAMES,
        rows.iter().map(|r| (labels(r), r.xon)),
    )?;
    counter_family(
        enc,
        &pfc::PAUSE_QUANTA,
        rows.iter().map(|r| (labels(r), r.quanta)),
    )?;
    counter_family(
        enc,
        &pfc::PAUSE,
        rows.iter()
            .filter_map(|r| r.seconds.map(|sec| (labels(r), sec))),
    )?;
    Ok(())
}

/// One snapshot encoded both ways.
#[derive(Debug, Default)]
pub struct Exposition {
    pub openmetrics: axum::body::Bytes,
    pub prometheus_text: axum::body::Bytes,
}

/// Encodes each snapshot once, when it is published (by the collector thread); a scrape only
/// takes the last encoding, so scrapes neither wait for an encoding nor hold up a drain.
pub struct Publisher {
    registry: Registry,
    snapshot: Arc<Mutex<MetricsView>>,
    current: Arc<Mutex<Arc<Exposition>>>,
}

impl Default for Publisher {
    fn default() -> Self {
        let snapshot = Arc::new(Mutex::new(MetricsView::default()));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ViewCollector(snapshot.clone())));
        Self {
            registry,
            snapshot,
            current: Arc::new(Mutex::new(Arc::new(Exposition::default()))),
        }
    }
}

impl Publisher {
    /// What scrapes read.
    pub fn exposition(&self) -> Arc<Mutex<Arc<Exposition>>> {
        self.current.clone()
    }

    /// Publishes `s`.
    pub fn publish(&self, s: MetricsView) -> Result<(), std::fmt::Error> {
        self.update(|old| *old = s)
    }

    /// Changes the published snapshot and publishes it again.
    pub fn update(&self, f: impl FnOnce(&mut MetricsView)) -> Result<(), std::fmt::Error> {
        f(&mut *self.snapshot.lock().map_err(|_| std::fmt::Error)?);
        let mut openmetrics = String::new();
        prometheus_client::encoding::text::encode(&mut openmetrics, &self.registry)?;
        let mut prometheus_text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut prometheus_text, &self.registry)?;
        let e = Arc::new(Exposition {
            openmetrics: openmetrics.into(),
            prometheus_text: prometheus_text.into(),
        });
        *self.current.lock().map_err(|_| std::fmt::Error)? = e;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_labels_are_hex_and_json_fields_decimal() {
        let key = FlowKey {
            dest_qp: 0xab,
            ..FlowKey::default()
        };
        let qp = |fields: [(&'static str, String); 6]| {
            fields.into_iter().find(|(k, _)| *k == "qp").unwrap().1
        };
        assert_eq!(qp(flow_labels(&key)), "0x0000ab");
        assert_eq!(
            qp(flow_labels(&FlowKey {
                dest_qp: 0xff_ffff,
                ..key
            })),
            "0xffffff"
        );
        assert_eq!(qp(flow_fields(&key, key.dest_qp.to_string())), "171");
        assert_eq!(qp(rest_labels()), "rest");
    }
}
