//! Records as OTLP: each row a log record whose attributes are its columns (by their
//! OpenTelemetry names), and each interval's bounded aggregates as delta sums.

#[cfg(test)]
use observer_core::export::EncodedRow;
use observer_core::export::{
    ColumnInfo, IntervalRows, IpText, Resource, RowSink, TABLES, Value, exporter_values, left_out,
    per_exporter, tables::QP_INTERVALS,
};
use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value},
    logs::v1::SeverityNumber,
    metrics::v1::{
        AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
        metric::Data, number_data_point,
    },
    resource::v1::Resource as OtlpResource,
};
use prost::Message;

/// The instrumentation scope of every record.
const SCOPE: &str = "roce-observer";

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn resource(r: &Resource) -> OtlpResource {
    use any_value::Value as A;
    let mut attributes = vec![
        kv("service.name", A::StringValue("roce-observer".into())),
        kv(
            "service.version",
            A::StringValue(env!("CARGO_PKG_VERSION").into()),
        ),
        kv("service.instance.id", A::StringValue(r.exporter.clone())),
    ];
    // The exporter's columns: the same in every row, so the resource's rather than each
    // record's (an empty one, not known, left out).
    for (attribute, v) in exporter_values(r) {
        if !matches!(&v, Value::Str(s) if s.is_empty()) {
            attributes.push(kv(attribute, any(&v)));
        }
    }
    OtlpResource {
        attributes,
        ..Default::default()
    }
}

/// A value as an AnyValue's value (the resource's; the records are written by hand).
fn any(v: &Value<'_>) -> any_value::Value {
    use any_value::Value as A;
    // OTLP integers are signed 64-bit: a count beyond i64::MAX saturates.
    let int = |n: u64| A::IntValue(i64::try_from(n).unwrap_or(i64::MAX));
    match v {
        Value::U64(n) => int(*n),
        Value::F64(x) => A::DoubleValue(*x),
        Value::Str(s) => A::StringValue(s.to_string()),
        Value::Ip(a) => A::StringValue(a.to_string()),
        Value::Strs(s) => A::ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
            values: s
                .iter()
                .map(|s| AnyValue {
                    value: Some(A::StringValue(s.clone())),
                })
                .collect(),
        }),
        Value::U64s(n) => A::ArrayValue(opentelemetry_proto::tonic::common::v1::ArrayValue {
            values: n
                .iter()
                .map(|n| AnyValue {
                    value: Some(int(n)),
                })
                .collect(),
        }),
    }
}

/// Whether a row's column is one of its record's attributes: not the exporter's (the
/// resource has them) and not left out ([`left_out`]).
#[cfg(test)]
fn in_record(c: &ColumnInfo, v: &Value<'_>) -> bool {
    !per_exporter(c) && !left_out(c, v)
}

fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: SCOPE.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    }
}

#[cfg(test)]
type Values<'v, 'r> = &'v [(&'static ColumnInfo, Value<'r>)];

/// The value of column `name` in a row, if it is a number.
#[cfg(test)]
fn number(values: Values<'_, '_>, name: &str) -> Option<u64> {
    values.iter().find_map(|(c, v)| match v {
        Value::U64(n) if c.name == name => Some(*n),
        _ => None,
    })
}

#[cfg(test)]
fn text<'v>(values: Values<'v, '_>, name: &str) -> Option<&'v str> {
    values.iter().find_map(|(c, v)| match v {
        Value::Str(s) if c.name == name => Some(&**s),
        _ => None,
    })
}

/// The findings' table (its rows' severity is their record's).
const FINDINGS: usize = 4;

/// A finding's severity as a record's.
fn severity_of(finding: &str) -> (SeverityNumber, &'static str) {
    match finding {
        "critical" => (SeverityNumber::Error, "ERROR"),
        "warning" => (SeverityNumber::Warn, "WARN"),
        _ => INFO,
    }
}

/// A row's severity: a finding's own, every other row INFO.
#[cfg(test)]
fn severity(table: usize, values: Values<'_, '_>) -> (SeverityNumber, &'static str) {
    match text(values, "severity") {
        Some(s) if table == FINDINGS => severity_of(s),
        _ => INFO,
    }
}

/// The bounded aggregates of one interval: the QP rows' counts summed, as delta sums over the
/// interval (no QP attribute: one point per metric and exporter), with their OTLP names and
/// units.
pub const INTERVAL_SUMS: [(&str, &str, &str); 7] = [
    ("packets", "roce.packets", "{packet}"),
    ("bytes", "roce.bytes", "By"),
    ("ce", "roce.ecn.ce", "{packet}"),
    ("ops_cnp", "roce.cnp", "{packet}"),
    ("ops_nak", "roce.nak", "{packet}"),
    ("psn_missing", "roce.psn.missing", "{packet}"),
    (
        "psn_retransmissions",
        "roce.psn.retransmissions",
        "{packet}",
    ),
];

/// The [`INTERVAL_SUMS`] of an interval's QP rows.
pub fn interval_sums(rows: &IntervalRows<'_>) -> [u64; INTERVAL_SUMS.len()] {
    INTERVAL_SUMS.map(|(column, _, _)| {
        let Some(c) = QP_INTERVALS.columns.iter().find(|c| c.info.name == column) else {
            return 0;
        };
        rows.qps
            .iter()
            .map(|q| match (c.get)(q) {
                Value::U64(n) => n,
                _ => 0,
            })
            .fold(0u64, u64::saturating_add)
    })
}

/// The [`INTERVAL_SUMS`] of QP rows already made (the tests' reference of
/// [`interval_sums`]).
#[cfg(test)]
pub fn row_sums(qp_rows: &[&EncodedRow<'_>]) -> [u64; INTERVAL_SUMS.len()] {
    INTERVAL_SUMS.map(|(column, _, _)| {
        qp_rows
            .iter()
            .filter_map(|r| number(&r.values, column))
            .fold(0u64, u64::saturating_add)
    })
}

/// An interval's aggregates (`sums`: of its QP rows, [`interval_sums`]) as one metrics
/// request.
pub fn metrics(
    resource_: &Resource,
    start_ns: u64,
    end_ns: u64,
    sums: &[u64; INTERVAL_SUMS.len()],
) -> ExportMetricsServiceRequest {
    let metrics = INTERVAL_SUMS
        .iter()
        .zip(sums)
        .map(|((_, name, unit), &total)| Metric {
            name: (*name).into(),
            unit: (*unit).into(),
            data: Some(Data::Sum(Sum {
                data_points: vec![NumberDataPoint {
                    start_time_unix_nano: start_ns,
                    time_unix_nano: end_ns,
                    value: Some(number_data_point::Value::AsInt(
                        i64::try_from(total).unwrap_or(i64::MAX),
                    )),
                    ..Default::default()
                }],
                aggregation_temporality: AggregationTemporality::Delta as i32,
                is_monotonic: true,
            })),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource(resource_)),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope()),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

// The records' hot path, written out by hand: a row's log record straight into protobuf
// bytes. Building prost's structs first costs an allocation per attribute name and value
// (~50 per row), ten times the encoding itself. A row is written as it is made, one value at
// a time, so its severity and event name follow its attributes (protobuf takes fields in any
// order; prost writes them in declaration order): the tests decode them with prost and
// compare with `reference::log_record`.

use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};

fn len_key(tag: u32, len: usize, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

fn field_len(tag: u32, len: usize) -> usize {
    prost::encoding::key_len(tag) + encoded_len_varint(len as u64) + len
}

fn int_of(n: u64) -> u64 {
    // int64 on the wire: as prost writes `i64` (a count beyond i64::MAX saturates).
    i64::try_from(n).unwrap_or(i64::MAX) as u64
}

/// The bytes of an AnyValue holding `v` (without its own key).
fn any_len(v: &Value<'_>) -> usize {
    match v {
        Value::U64(n) => 1 + encoded_len_varint(int_of(*n)),
        Value::F64(_) => 1 + 8,
        Value::Str(s) => field_len(1, s.len()),
        Value::Ip(a) => field_len(1, IpText::new(a).as_str().len()),
        Value::Strs(s) => field_len(
            5,
            s.iter().map(|s| field_len(1, field_len(1, s.len()))).sum(),
        ),
        Value::U64s(n) => field_len(
            5,
            n.iter()
                .map(|n| field_len(1, 1 + encoded_len_varint(int_of(n))))
                .sum(),
        ),
    }
}

fn write_any(v: &Value<'_>, out: &mut Vec<u8>) {
    match v {
        Value::U64(n) => {
            encode_key(3, WireType::Varint, out);
            encode_varint(int_of(*n), out);
        }
        Value::F64(x) => {
            encode_key(4, WireType::SixtyFourBit, out);
            out.extend_from_slice(&x.to_le_bytes());
        }
        Value::Str(s) => {
            len_key(1, s.len(), out);
            out.extend_from_slice(s.as_bytes());
        }
        Value::Ip(a) => {
            let text = IpText::new(a);
            len_key(1, text.as_str().len(), out);
            out.extend_from_slice(text.as_str().as_bytes());
        }
        Value::Strs(s) => {
            let values: usize = s.iter().map(|s| field_len(1, field_len(1, s.len()))).sum();
            len_key(5, values, out);
            for s in s.iter() {
                len_key(1, field_len(1, s.len()), out);
                len_key(1, s.len(), out);
                out.extend_from_slice(s.as_bytes());
            }
        }
        Value::U64s(n) => {
            let values: usize = n
                .iter()
                .map(|n| field_len(1, 1 + encoded_len_varint(int_of(n))))
                .sum();
            len_key(5, values, out);
            for n in n.iter() {
                len_key(1, 1 + encoded_len_varint(int_of(n)), out);
                encode_key(3, WireType::Varint, out);
                encode_varint(int_of(n), out);
            }
        }
    }
}

/// Writes an attribute straight into a vector's spare room: appended piece by piece (tags,
/// varints, the key, the value), each piece costs a call to copy, most of the records'
/// encoding when measured.
struct Spare<'a> {
    room: &'a mut [std::mem::MaybeUninit<u8>],
    at: usize,
}

impl Spare<'_> {
    fn byte(&mut self, b: u8) {
        self.room[self.at].write(b);
        self.at += 1;
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    fn bytes(&mut self, b: &[u8]) {
        for (to, from) in self.room[self.at..self.at + b.len()].iter_mut().zip(b) {
            to.write(*from);
        }
        self.at += b.len();
    }
}

/// An attribute whose value is a string or an integer, the records' every attribute but the
/// lists: a KeyValue as a LogRecord's field 6 (tag 6, length-delimited), its key (tag 1) and
/// its AnyValue (tag 2) holding `string_value` (tag 1) or `int_value` (tag 3, varint).
fn write_scalar_attribute(key: &str, text: Option<&str>, int: u64, out: &mut Vec<u8>) {
    let any = match text {
        Some(t) => field_len(1, t.len()),
        None => 1 + encoded_len_varint(int),
    };
    let kv = field_len(1, key.len()) + field_len(2, any);
    let total = field_len(6, kv);
    out.reserve(total);
    let start = out.len();
    let mut w = Spare {
        room: &mut out.spare_capacity_mut()[..total],
        at: 0,
    };
    w.byte(0x32);
    w.varint(kv as u64);
    w.byte(0x0a);
    w.varint(key.len() as u64);
    w.bytes(key.as_bytes());
    w.byte(0x12);
    w.varint(any as u64);
    match text {
        Some(t) => {
            w.byte(0x0a);
            w.varint(t.len() as u64);
            w.bytes(t.as_bytes());
        }
        None => {
            w.byte(0x18);
            w.varint(int);
        }
    }
    let written = w.at;
    debug_assert_eq!(written, total);
    // SAFETY: the `written` bytes after the vector's length were each written above, in
    // order (the room is the vector's spare capacity, `written` at most its `total`).
    unsafe { out.set_len(start + written) };
}

/// An attribute: a KeyValue, as a LogRecord's field 6.
fn write_attribute(key: &str, v: &Value<'_>, out: &mut Vec<u8>) {
    match v {
        Value::U64(n) => return write_scalar_attribute(key, None, int_of(*n), out),
        Value::Str(s) => return write_scalar_attribute(key, Some(s), 0, out),
        // Its text made once (not for its length and again for its bytes).
        Value::Ip(a) => return write_scalar_attribute(key, Some(IpText::new(a).as_str()), 0, out),
        _ => {}
    }
    let value = any_len(v);
    len_key(6, field_len(1, key.len()) + field_len(2, value), out);
    len_key(1, key.len(), out);
    out.extend_from_slice(key.as_bytes());
    len_key(2, value, out);
    write_any(v, out);
}

/// Appends a row's log record (as [`reference::log_record`] makes it) to `out` as a ScopeLogs'
/// `log_records` field (tag 2, length-delimited).
#[cfg(test)]
pub fn write_log_record(row: &EncodedRow<'_>, observed_ns: u64, out: &mut Vec<u8>) {
    let mut w = RecordWriter::new(std::mem::take(out), 0, observed_ns);
    w.row(row);
    *out = w.records;
}

/// Log records (as `reference::log_record` makes them: ScopeLogs' `log_records` fields) of
/// rows handed over one value at a time ([`RowSink`]), written straight into protobuf bytes.
/// The exporter's columns are the resource's: a row handed over has none of them
/// ([`Sequencer::each_row`](observer_core::export::Sequencer::each_row) without them).
pub struct RecordWriter {
    pub records: Vec<u8>,
    /// Every record's time (the interval's end) and observed time.
    time: u64,
    observed_ns: u64,
    table: usize,
    /// Where the record being written starts (after its key): its length's room.
    at: usize,
    severity: (SeverityNumber, &'static str),
}

impl RecordWriter {
    pub fn new(records: Vec<u8>, time: u64, observed_ns: u64) -> Self {
        Self {
            records,
            time,
            observed_ns,
            table: 0,
            at: 0,
            severity: INFO,
        }
    }

    /// Writes a row made first (its exporter's columns left out), its time its own interval's
    /// end (none without one).
    #[cfg(test)]
    pub fn row(&mut self, row: &EncodedRow<'_>) {
        self.time = number(&row.values, "interval_end_ns").unwrap_or(0);
        self.begin(row.table);
        for (c, v) in &row.values {
            if !per_exporter(c) {
                self.value(c, v.clone());
            }
        }
        self.end();
    }
}

const INFO: (SeverityNumber, &str) = (SeverityNumber::Info, "INFO");

impl<'r> RowSink<'r> for RecordWriter {
    fn begin(&mut self, table: usize) {
        let out = &mut self.records;
        self.table = table;
        self.severity = INFO;
        encode_key(2, WireType::LengthDelimited, out);
        // The record's length is known once it is written: room for a 2-byte varint (a row of
        // 128 bytes to 16 KiB, as nearly all are), the record moved when it takes another.
        self.at = out.len();
        out.extend_from_slice(&[0; 2]);
        if self.time != 0 {
            encode_key(1, WireType::SixtyFourBit, out);
            out.extend_from_slice(&self.time.to_le_bytes());
        }
        // The body: the table's name, a string AnyValue.
        let name = TABLES[table];
        len_key(5, field_len(1, name.len()), out);
        len_key(1, name.len(), out);
        out.extend_from_slice(name.as_bytes());
    }

    fn value(&mut self, c: &'static ColumnInfo, v: Value<'r>) {
        debug_assert!(!per_exporter(c), "{}: the resource's", c.name);
        if self.table == FINDINGS
            && c.name == "severity"
            && let Value::Str(s) = &v
        {
            self.severity = severity_of(s);
        }
        if !left_out(c, &v) {
            write_attribute(c.attribute, &v, &mut self.records);
        }
    }

    fn end(&mut self) {
        let out = &mut self.records;
        let (severity, severity_text) = self.severity;
        encode_key(2, WireType::Varint, out);
        encode_varint(severity as u64, out);
        len_key(3, severity_text.len(), out);
        out.extend_from_slice(severity_text.as_bytes());
        if self.observed_ns != 0 {
            encode_key(11, WireType::SixtyFourBit, out);
            out.extend_from_slice(&self.observed_ns.to_le_bytes());
        }
        let name = TABLES[self.table];
        len_key(12, EVENT_PREFIX.len() + name.len(), out);
        out.extend_from_slice(EVENT_PREFIX.as_bytes());
        out.extend_from_slice(name.as_bytes());
        let at = self.at;
        let len = out.len() - at - 2;
        let mut varint = [0u8; 10];
        let n = {
            let mut rest = &mut varint[..];
            encode_varint(len as u64, &mut rest);
            10 - rest.len()
        };
        match n {
            2 => out[at..at + 2].copy_from_slice(&varint[..2]),
            1 => {
                out[at] = varint[0];
                out.copy_within(at + 2.., at + 1);
                out.truncate(out.len() - 1);
            }
            _ => {
                out.splice(at..at + 2, varint[..n].iter().copied());
            }
        }
    }
}

/// A record's event name is its table's, prefixed.
const EVENT_PREFIX: &str = "roce.";

/// A logs request around `records` (log record fields as [`RecordWriter`] writes them):
/// the bytes the tests' `reference::logs` would encode.
pub fn logs_bytes(resource_: &Resource, records: &[u8]) -> Vec<u8> {
    let mut out = logs_head(resource_, records.len(), records.len());
    out.extend_from_slice(records);
    out
}

/// What [`logs_bytes`] puts before `records_len` bytes of records (with room for `more`
/// bytes after it): the request's envelope, which a compressor can take before the records
/// themselves, not copied behind it.
pub fn logs_head(resource_: &Resource, records_len: usize, more: usize) -> Vec<u8> {
    let resource = resource(resource_).encode_to_vec();
    let scope = scope().encode_to_vec();
    let scope_logs = field_len(1, scope.len()) + records_len;
    let resource_logs = field_len(1, resource.len()) + field_len(2, scope_logs);
    let mut out = Vec::with_capacity(field_len(1, resource_logs) - records_len + more);
    len_key(1, resource_logs, &mut out);
    len_key(1, resource.len(), &mut out);
    out.extend_from_slice(&resource);
    len_key(2, scope_logs, &mut out);
    len_key(1, scope.len(), &mut out);
    out.extend_from_slice(&scope);
    out
}

/// The records in prost's structs: what [`write_log_record`] and [`logs_bytes`] (which are sent)
/// are tested against.
#[cfg(test)]
pub(crate) mod reference {
    use opentelemetry_proto::tonic::{
        collector::logs::v1::ExportLogsServiceRequest,
        logs::v1::{LogRecord, ResourceLogs, ScopeLogs},
    };

    use super::*;

    /// A row as a log record: its table as the event name (`roce.<table>`), the interval's end as
    /// its time, a finding's severity as its own (every other row is INFO), and every column as
    /// an attribute but those left out (the exporter's; empty strings and lists, zero counts).
    pub fn log_record(row: &EncodedRow<'_>, observed_ns: u64) -> LogRecord {
        let table = TABLES[row.table];
        let (severity, severity_text) = severity(row.table, &row.values);
        LogRecord {
            time_unix_nano: number(&row.values, "interval_end_ns").unwrap_or(0),
            observed_time_unix_nano: observed_ns,
            severity_number: severity as i32,
            severity_text: severity_text.into(),
            event_name: format!("roce.{table}"),
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(table.into())),
            }),
            // An empty string (a value not known) and a count of 0 are left out, and the
            // exporter's columns are the resource's.
            attributes: row
                .values
                .iter()
                .filter(|(c, v)| in_record(c, v))
                .map(|(c, v)| kv(c.attribute, any(v)))
                .collect(),
            ..Default::default()
        }
    }

    /// Log records as one logs request (the reference of [`logs_bytes`]).
    pub fn logs(resource_: &Resource, log_records: Vec<LogRecord>) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(resource(resource_)),
                scope_logs: vec![ScopeLogs {
                    scope: Some(scope()),
                    log_records,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
    }
}
