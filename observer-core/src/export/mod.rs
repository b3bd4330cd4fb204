//! Fleet records: what leaves the host for a fleet's stores, per interval. Every QP's counts
//! and PSN analysis, every connection side (a QP as both directions show it: messages,
//! latency), the latency histograms, PAUSE / PFC and the findings, each row carrying the
//! exporter, its sequence numbers, the interval's bounds and the host's attributes.
//!
//! One definition per column ([`Column`]): its ClickHouse name and type, its OpenTelemetry
//! attribute name and its meaning. The JSONEachRow encoder, the ClickHouse schema
//! (`deploy/clickhouse/schema.sql`), the OTLP encoder and the field tables of docs/export.md
//! all read the table definitions in [`tables`]; nothing else spells a column.

mod schema;
pub mod tables;

use std::net::IpAddr;

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

/// One value of a row.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U64(u64),
    F64(f64),
    Str(String),
    Strs(Vec<String>),
    U64s(Vec<u64>),
}

impl Value {
    fn str(s: impl Into<String>) -> Self {
        Self::Str(s.into())
    }
}

/// Whether a column's value is left out of a record's attributes: an empty string (a value
/// not known) or a count of 0 (OpenTelemetry leaves out what is not there; a receiver reads
/// an absent count as 0). Keys, bounds, times and sequence numbers are always there.
pub fn left_out(c: &ColumnInfo, v: &Value) -> bool {
    match v {
        Value::Str(s) => s.is_empty(),
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
pub fn exporter_values(resource: &Resource) -> Vec<(&'static str, Value)> {
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
    /// Training job and rank, where known (kept empty for now).
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
    /// The rows of a report covering one interval: every flow, both sides of every
    /// connection, every latency bucket with a count, every PAUSE / PFC source and priority,
    /// every finding.
    pub fn of(report: &'a Report) -> Self {
        let mut rows = Self {
            qps: report.flows.iter().map(|flow| QpItem { flow }).collect(),
            ..Self::default()
        };
        for c in &report.connections {
            for (side, this, peer) in [("a", &c.a, &c.b), ("b", &c.b, &c.a)] {
                rows.sides.push(SideItem {
                    connection: c,
                    side,
                    this,
                    peer,
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

fn ip(a: &IpAddr) -> Value {
    Value::str(a.to_string())
}

fn direction(d: Direction) -> Value {
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
pub struct EncodedRow {
    pub table: usize,
    pub values: Vec<(&'static ColumnInfo, Value)>,
}

impl Sequencer {
    /// The rows of one interval, numbered: the interval takes the next interval number (its
    /// bounds are `start_ns`..`end_ns`) and each row the next row number of its table.
    pub fn interval(
        &mut self,
        resource: &Resource,
        start_ns: u64,
        end_ns: u64,
        rows: &IntervalRows<'_>,
    ) -> Vec<EncodedRow> {
        let interval = Interval {
            seq: self.next_interval,
            start_ns,
            end_ns,
        };
        self.next_interval += 1;
        let mut out = Vec::new();
        let mut emit =
            |table: usize, values: &mut dyn Iterator<Item = (&'static ColumnInfo, Value)>| {
                let head = Head {
                    resource,
                    interval,
                    seq: self.next_row[table],
                };
                self.next_row[table] += 1;
                let mut all: Vec<(&'static ColumnInfo, Value)> = tables::HEAD
                    .iter()
                    .map(|c| (&c.info, (c.get)(&head)))
                    .collect();
                all.extend(values);
                out.push(EncodedRow { table, values: all });
            };
        for item in &rows.qps {
            emit(0, &mut values(tables::QP_INTERVALS.columns, item));
        }
        for item in &rows.sides {
            emit(1, &mut values(tables::CONNECTION_SIDES.columns, item));
        }
        for item in &rows.buckets {
            emit(2, &mut values(tables::LATENCY_BUCKETS.columns, item));
        }
        for item in &rows.pauses {
            emit(3, &mut values(tables::PAUSES.columns, item));
        }
        for item in &rows.findings {
            emit(4, &mut values(tables::FINDINGS.columns, item));
        }
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
        emit(5, &mut values(tables::INTERVALS.columns, &counts));
        out
    }
}

fn values<'c, I, G: Fn(&I) -> Value + 'static>(
    columns: &'static [Column<G>],
    item: &'c I,
) -> impl Iterator<Item = (&'static ColumnInfo, Value)> + 'c {
    columns.iter().map(move |c| (&c.info, (c.get)(item)))
}
