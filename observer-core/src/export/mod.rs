//! Fleet records: what leaves the host for a fleet's stores, per interval. Every QP's counts
//! and PSN analysis, every connection side (a QP as both directions show it: messages,
//! latency), the latency histograms, PAUSE / PFC and the findings, each row carrying the
//! exporter, its sequence numbers, the interval's bounds and the host's attributes.
//!
//! One definition per column ([`Column`]): its ClickHouse name and type, its OpenTelemetry
//! attribute name and its meaning. The JSONEachRow encoder, the ClickHouse schema
//! (`deploy/clickhouse/schema.sql`), the OTLP encoder and the field tables of docs/export.md
//! all read the table definitions in [`tables`]; nothing else spells a column.

pub mod otlp_json;
mod schema;
pub mod tables;

use std::{borrow::Cow, net::IpAddr};

pub use schema::{json_row, markdown_tables, schema_sql};
pub use tables::{TABLES, TableInfo, tables};

use crate::model::{
    Direction, Flow, PauseCounts, PauseSource, Report,
    connections::{ConnSide, Connection, LatencyBucket, LatencyScope},
    findings::Finding,
};

/// The version of the record schema: a row's `schema_version`. A change that renames, removes
/// or retypes a column raises it; a new column does not.
pub const SCHEMA_VERSION: u16 = 1;

/// A column's ClickHouse type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChType {
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    /// A count, a sum, or a statistic of them (a maximum, a quantile) (UInt64): over OTLP left
    /// out when 0, which a receiver reads as 0.
    Count,
    Float64,
    String,
    /// A string of few distinct values (names, kinds, hosts).
    Label,
    Strings,
    UInt64s,
}

impl ChType {
    /// The type as ClickHouse spells it.
    pub const fn sql(self) -> &'static str {
        match self {
            Self::UInt8 => "UInt8",
            Self::UInt16 => "UInt16",
            Self::UInt32 => "UInt32",
            Self::UInt64 | Self::Count => "UInt64",
            Self::Float64 => "Float64",
            Self::String => "String",
            Self::Label => "LowCardinality(String)",
            Self::Strings => "Array(String)",
            Self::UInt64s => "Array(UInt64)",
        }
    }
}

/// One value of a row, borrowed from the report where it can be (a row's values are made for
/// every row of every interval: the sidecar's export makes tens of thousands a second).
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    U64(u64),
    F64(f64),
    Str(Cow<'a, str>),
    /// An IP address, written as its text.
    Ip(IpAddr),
    Strs(Cow<'a, [String]>),
    U64s(Nums<'a>),
}

impl<'a> Value<'a> {
    fn str(s: impl Into<Cow<'a, str>>) -> Self {
        Self::Str(s.into())
    }
}

/// A list of numbers, as the report keeps it.
#[derive(Clone, Debug)]
pub enum Nums<'a> {
    U8(&'a [u8]),
    U16(&'a [u16]),
    U64(Vec<u64>),
}

impl Nums<'_> {
    pub fn len(&self) -> usize {
        match self {
            Self::U8(n) => n.len(),
            Self::U16(n) => n.len(),
            Self::U64(n) => n.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).map(move |i| match self {
            Self::U8(n) => n[i].into(),
            Self::U16(n) => n[i].into(),
            Self::U64(n) => n[i],
        })
    }
}

impl PartialEq for Nums<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl From<Vec<u64>> for Nums<'_> {
    fn from(n: Vec<u64>) -> Self {
        Self::U64(n)
    }
}

/// An IP address's text, written into a buffer (no allocation).
pub struct IpText {
    buf: [u8; 45],
    len: usize,
}

impl IpText {
    pub fn new(ip: &IpAddr) -> Self {
        use std::io::Write as _;
        let mut buf = [0u8; 45];
        if let IpAddr::V4(v4) = ip {
            // Four numbers and dots, written here: `Display` takes most of a row's encoding.
            let mut len = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[len] = b'.';
                    len += 1;
                }
                if octet >= 100 {
                    buf[len] = b'0' + octet / 100;
                    len += 1;
                }
                if octet >= 10 {
                    buf[len] = b'0' + octet / 10 % 10;
                    len += 1;
                }
                buf[len] = b'0' + octet % 10;
                len += 1;
            }
            return Self { buf, len };
        }
        let mut w = &mut buf[..];
        // `Display` writes an IPv6 address in at most 39 bytes (an IPv4-mapped one in 22);
        // 45 is the longest text that parses.
        let written = write!(w, "{ip}");
        debug_assert!(written.is_ok(), "{ip} longer than 45 bytes");
        let len = 45 - w.len();
        Self { buf, len }
    }

    pub fn as_str(&self) -> &str {
        // Display writes ASCII.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

/// Whether a column's value is left out of a record's attributes: an empty string (a value
/// not known), an empty list or a count of 0 (OpenTelemetry leaves out what is not there; a
/// receiver reads an absent count as 0, an absent list as empty). Keys, bounds, times and
/// sequence numbers are always there.
pub fn left_out(c: &ColumnInfo, v: &Value<'_>) -> bool {
    match v {
        Value::Str(s) => s.is_empty(),
        Value::Strs(s) => s.is_empty(),
        Value::U64s(n) => n.is_empty(),
        Value::U64(0) => c.ty == ChType::Count,
        _ => false,
    }
}

/// Whether a column of the head is the exporter's, the same in every row it writes (its
/// stream, host, devices, what it observes, job, the schema's version): over OTLP it is an
/// attribute of the resource, not of each record.
pub fn per_exporter(c: &ColumnInfo) -> bool {
    tables::EXPORTER_COLUMNS.contains(&c.name)
}

/// The exporter's columns as (attribute, value): the same in every row.
pub fn exporter_values(resource: &Resource) -> Vec<(&'static str, Value<'_>)> {
    let head = Head {
        resource,
        interval: Interval::default(),
        seq: 0,
    };
    tables::HEAD
        .iter()
        .filter(|c| per_exporter(&c.info))
        .map(|c| (c.info.attribute, (c.get)(&head)))
        .collect()
}

/// What a column is, apart from how its value is read.
#[derive(Clone, Copy, Debug)]
pub struct ColumnInfo {
    /// The ClickHouse column and JSON key.
    pub name: &'static str,
    /// The OpenTelemetry attribute: semantic conventions' names where they exist (`host.name`,
    /// `source.address`, `network.io.direction`...), `roce.*` / `rdma.*` where not.
    pub attribute: &'static str,
    pub ty: ChType,
    pub help: &'static str,
}

/// A column: what it is, and how a row gives its value (`get`: a function of the row's item,
/// e.g. `fn(&QpItem<'_>) -> Value`).
#[derive(Clone, Copy)]
pub struct Column<G> {
    pub info: ColumnInfo,
    pub get: G,
}

/// The exporter and the host, the same in every row an exporter writes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resource {
    /// Names the exporter's stream: host, process and start time (a restart starts a new
    /// stream, whose sequence numbers start at 0 again).
    pub exporter: String,
    pub host: String,
    /// The RDMA device observed, if one is named (`--rdma-dev`).
    pub rdma_device: String,
    /// The interfaces (XDP, capture) or files the records come from, comma separated.
    pub observed: String,
    /// `xdp`, `capture`, `pcap`, `nic`: the report's `source.kind`.
    pub source: String,
    /// The training jobs and ranks of the host's processes that own RC QPs, where their
    /// environments tell them ([`job_and_rank`]).
    pub job: String,
    pub rank: String,
}

/// The interval a row covers, in the exporter's sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    /// The exporter's interval number: 0, 1, 2... (a gap is an interval lost).
    pub seq: u64,
    /// Unix-epoch ns.
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Every row's head: the resource, the interval, and the row's number among the exporter's
/// rows of its table (0, 1, 2... over the exporter's life: a gap is a row lost).
pub struct Head<'a> {
    pub resource: &'a Resource,
    pub interval: Interval,
    pub seq: u64,
}

/// A row of a table: its head and what it describes.
pub struct Row<'a, T> {
    pub head: Head<'a>,
    pub item: T,
}

/// A QP's packets in one direction (a flow of the report).
pub struct QpItem<'a> {
    pub flow: &'a Flow,
}

/// One side of a connection: a QP with what both directions show (messages, latency).
pub struct SideItem<'a> {
    pub connection: &'a Connection,
    /// `a` or `b`.
    pub side: &'static str,
    pub this: &'a ConnSide,
    pub peer: &'a ConnSide,
    /// This side's QP in the exporter's QP table, when it is the exporter's (its number at
    /// this side's address, connected to the peer's): its process.
    pub process: Option<&'a crate::model::nic::Qp>,
}

/// One bucket of a latency histogram: of a connection side's requests, or of an interface's.
pub struct BucketItem<'a> {
    /// `connection` or `interface`.
    pub scope: &'static str,
    /// The interface (interface scope), or empty.
    pub interface: &'a str,
    /// `ack` or `read`.
    pub kind: &'a str,
    /// The connection side whose requests were answered (connection scope), or the
    /// interface's side (`requester`, `responder`).
    pub side: &'a str,
    pub connection: Option<(&'a Connection, &'a ConnSide, &'a ConnSide)>,
    pub bucket: &'a LatencyBucket,
}

/// PAUSE / PFC frames of one source and priority (255: 802.3x PAUSE of the whole link).
pub struct PauseItem<'a> {
    pub source: &'a PauseSource,
    pub priority: u8,
    pub counts: &'a PauseCounts,
}

pub struct FindingItem<'a> {
    pub finding: &'a Finding,
}

/// An interval's own row: its rows in each of the other tables.
pub struct IntervalItem {
    pub rows: [u64; 5],
}

/// The rows of one interval, table by table, borrowed from its report.
#[derive(Default)]
pub struct IntervalRows<'a> {
    pub qps: Vec<QpItem<'a>>,
    pub sides: Vec<SideItem<'a>>,
    pub buckets: Vec<BucketItem<'a>>,
    pub pauses: Vec<PauseItem<'a>>,
    pub findings: Vec<FindingItem<'a>>,
}

impl<'a> IntervalRows<'a> {
    /// The rows of a report covering one interval: every flow, every side of a connection
    /// seen ([`ConnSide::seen`](crate::model::connections::ConnSide::seen): the far end of a
    /// direction seen alone has no row, its peer's row names it), every latency bucket with a
    /// count, every PAUSE / PFC source and priority, every finding.
    pub fn of(report: &'a Report) -> Self {
        let mut rows = Self {
            qps: report.flows.iter().map(|flow| QpItem { flow }).collect(),
            ..Self::default()
        };
        let owners = report.nic.as_ref().map(crate::analysis::jobs::QpOwners::of);
        for c in &report.connections {
            for (side, this, peer) in [("a", &c.a, &c.b), ("b", &c.b, &c.a)] {
                if !this.seen() {
                    continue;
                }
                let process = match (&owners, this.qp, peer.qp) {
                    (Some(o), Some(qp), Some(peer_qp)) => o.owner(this.ip, qp, peer_qp),
                    _ => None,
                };
                rows.sides.push(SideItem {
                    connection: c,
                    side,
                    this,
                    peer,
                    process,
                });
                for (kind, summary) in [("ack", &this.latency.ack), ("read", &this.latency.read)] {
                    for bucket in summary.iter().flat_map(|s| &s.buckets) {
                        rows.buckets.push(BucketItem {
                            scope: "connection",
                            interface: "",
                            kind,
                            side,
                            connection: Some((c, this, peer)),
                            bucket,
                        });
                    }
                }
            }
        }
        for s in &report.latency {
            rows.buckets.extend(scope_buckets(s));
        }
        for source in report.pfc.iter().flat_map(|p| &p.sources) {
            for p in &source.priorities {
                rows.pauses.push(PauseItem {
                    source,
                    priority: p.priority,
                    counts: &p.counts,
                });
            }
            if let Some(counts) = &source.link_pause {
                rows.pauses.push(PauseItem {
                    source,
                    priority: LINK_PAUSE_PRIORITY,
                    counts,
                });
            }
        }
        rows.findings = report
            .findings
            .iter()
            .map(|finding| FindingItem { finding })
            .collect();
        rows
    }
}

/// The `priority` of an 802.3x PAUSE row (it pauses every priority).
pub const LINK_PAUSE_PRIORITY: u8 = 255;

fn scope_buckets(s: &LatencyScope) -> impl Iterator<Item = BucketItem<'_>> {
    s.summary.buckets.iter().map(move |bucket| BucketItem {
        scope: "interface",
        interface: s.interface.as_deref().unwrap_or(""),
        kind: &s.kind,
        side: &s.side,
        connection: None,
        bucket,
    })
}

/// The interval a report covers: from its series' start (its first frame, or the attach) for
/// the report's window; a report without either (the NIC side alone) ends at `now_ns`.
pub fn report_interval(report: &Report, now_ns: u64) -> (u64, u64) {
    let window = (report.window.seconds * 1e9).round() as u64;
    let start = report
        .series
        .as_ref()
        .map(|s| s.start_ns)
        .or_else(|| report.flows.iter().map(|f| f.first_seen_ns).min());
    match start {
        Some(start) => (start, start + window),
        None => (now_ns.saturating_sub(window), now_ns),
    }
}

/// An exporter's `job` and `rank` from its host's QP table: the launchers' job names and the
/// ranks of the processes that own RC QPs (sorted, comma separated; consecutive ranks as a
/// range, `0-3,8`), each empty when no process tells one.
pub fn job_and_rank<'a>(qps: impl Iterator<Item = &'a crate::model::nic::Qp>) -> (String, String) {
    let mut jobs = std::collections::BTreeSet::new();
    let mut ranks = std::collections::BTreeSet::new();
    for q in qps.filter(|q| q.qp_type == "RC") {
        let Some(p) = &q.job else { continue };
        jobs.extend(p.job.iter().cloned());
        ranks.extend(p.rank);
    }
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for r in ranks {
        match runs.last_mut() {
            Some((_, hi)) if *hi + 1 == r => *hi = r,
            _ => runs.push((r, r)),
        }
    }
    let rank = runs
        .iter()
        .map(|(lo, hi)| {
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    (jobs.into_iter().collect::<Vec<_>>().join(","), rank)
}

fn ip(a: &IpAddr) -> Value<'static> {
    Value::Ip(*a)
}

fn direction(d: Direction) -> Value<'static> {
    // OpenTelemetry's network.io.direction values.
    Value::str(match d {
        Direction::Ingress => "receive",
        Direction::Egress => "transmit",
    })
}

/// The exporter's counters: its next interval number and, per table, its next row number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sequencer {
    pub next_interval: u64,
    pub next_row: [u64; TABLES.len()],
}

/// One encoded row: its table (an index into [`TABLES`]) and its columns' values, the head's
/// first.
pub struct EncodedRow<'a> {
    pub table: usize,
    pub values: Vec<(&'static ColumnInfo, Value<'a>)>,
}

/// What a [`Sequencer`] hands its rows to, one value at a time: nothing is kept in between.
pub trait RowSink<'r> {
    /// A row of `table` (an index into [`TABLES`]) starts.
    fn begin(&mut self, table: usize);
    /// Its next column's value.
    fn value(&mut self, column: &'static ColumnInfo, value: Value<'r>);
    /// It ends.
    fn end(&mut self);
}

/// The rows, kept ([`Sequencer::interval`]).
impl<'r> RowSink<'r> for Vec<EncodedRow<'r>> {
    fn begin(&mut self, table: usize) {
        self.push(EncodedRow {
            table,
            values: Vec::with_capacity(64),
        });
    }

    fn value(&mut self, column: &'static ColumnInfo, value: Value<'r>) {
        if let Some(row) = self.last_mut() {
            row.values.push((column, value));
        }
    }

    fn end(&mut self) {}
}

impl Sequencer {
    /// The rows of one interval, numbered: the interval takes the next interval number (its
    /// bounds are `start_ns`..`end_ns`) and each row the next row number of its table.
    pub fn interval<'r>(
        &mut self,
        resource: &'r Resource,
        start_ns: u64,
        end_ns: u64,
        rows: &IntervalRows<'r>,
    ) -> Vec<EncodedRow<'r>> {
        let mut out = Vec::new();
        self.each_row(resource, start_ns, end_ns, rows, true, &mut out);
        out
    }

    /// The rows of one interval as [`Sequencer::interval`] numbers them, handed to `sink` one
    /// value at a time. Without `exporter_columns`, the head's columns that are the exporter's
    /// ([`per_exporter`]) are left out.
    pub fn each_row<'r>(
        &mut self,
        resource: &'r Resource,
        start_ns: u64,
        end_ns: u64,
        rows: &IntervalRows<'r>,
        exporter_columns: bool,
        sink: &mut impl RowSink<'r>,
    ) {
        let interval = Interval {
            seq: self.next_interval,
            start_ns,
            end_ns,
        };
        self.next_interval += 1;
        let head_columns: Vec<&'static Column<tables::HeadGet>> = tables::HEAD
            .iter()
            .filter(|c| exporter_columns || !per_exporter(&c.info))
            .collect();
        // One table's rows: each its head (numbered), then its columns.
        macro_rules! rows_of {
            ($table:expr, $def:expr, $items:expr) => {
                for item in $items {
                    let head = Head {
                        resource,
                        interval,
                        seq: self.next_row[$table],
                    };
                    self.next_row[$table] += 1;
                    sink.begin($table);
                    for c in &head_columns {
                        sink.value(&c.info, (c.get)(&head));
                    }
                    for c in $def.columns {
                        sink.value(&c.info, (c.get)(item));
                    }
                    sink.end();
                }
            };
        }
        rows_of!(0, tables::QP_INTERVALS, &rows.qps);
        rows_of!(1, tables::CONNECTION_SIDES, &rows.sides);
        rows_of!(2, tables::LATENCY_BUCKETS, &rows.buckets);
        rows_of!(3, tables::PAUSES, &rows.pauses);
        rows_of!(4, tables::FINDINGS, &rows.findings);
        let counts = IntervalItem {
            rows: [
                rows.qps.len(),
                rows.sides.len(),
                rows.buckets.len(),
                rows.pauses.len(),
                rows.findings.len(),
            ]
            .map(|n| n as u64),
        };
        rows_of!(5, tables::INTERVALS, [&counts]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_and_rank_name_the_rc_qps_processes() {
        use crate::model::nic::{ProcessJob, Qp};
        let qp = |t: &str, job: Option<(&str, u32)>| Qp {
            device: "mlx5_0".into(),
            port: Some(1),
            lqpn: 1,
            rqpn: Some(2),
            qp_type: t.into(),
            state: "RTS".into(),
            pid: Some(1),
            comm: None,
            job: job.map(|(j, r)| ProcessJob {
                job: Some(j.into()),
                rank: Some(r),
                ..ProcessJob::default()
            }),
        };
        let table = [
            qp("RC", Some(("slurm:7", 3))),
            qp("RC", Some(("slurm:7", 0))),
            qp("RC", Some(("slurm:7", 1))),
            qp("RC", Some(("slurm:7", 1))),
            qp("RC", Some(("slurm:7", 8))),
            qp("RC", None),
            // A UD QP's process (a connection manager, say) is no rank of a job's.
            qp("UD", Some(("slurm:9", 12))),
        ];
        assert_eq!(
            job_and_rank(table.iter()),
            ("slurm:7".to_string(), "0-1,3,8".to_string())
        );
        assert_eq!(job_and_rank([].iter()), (String::new(), String::new()));
    }

    #[test]
    fn an_address_is_written_as_display_writes_it() {
        for a in [
            "0.0.0.0",
            "255.255.255.255",
            "198.18.0.9",
            "10.100.1.200",
            "2001:db8::1",
            "::ffff:255.255.255.255",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "1111:2222:3333:4444:5555:6666:7777:8888",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(IpText::new(&ip).as_str(), ip.to_string(), "{a}");
        }
    }

    #[test]
    fn numbers_of_any_width_are_one_list() {
        assert_eq!(Nums::U8(&[0, 26]), Nums::from(vec![0, 26]));
        assert_ne!(Nums::U16(&[100]), Nums::from(vec![100, 1]));
        assert_eq!(Nums::U16(&[4095]).iter().collect::<Vec<_>>(), [4095]);
    }
}
