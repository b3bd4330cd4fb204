//! Records as OTLP: each row a log record whose attributes are its columns (by their
//! OpenTelemetry names), and each interval's bounded aggregates as delta sums.

use observer_core::export::{
    ColumnInfo, EncodedRow, Resource, TABLES, Value, exporter_values, left_out, per_exporter,
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
fn any(v: &Value) -> any_value::Value {
    use any_value::Value as A;
    // OTLP integers are signed 64-bit: a count beyond i64::MAX saturates.
    let int = |n: u64| A::IntValue(i64::try_from(n).unwrap_or(i64::MAX));
    match v {
        Value::U64(n) => int(*n),
        Value::F64(x) => A::DoubleValue(*x),
        Value::Str(s) => A::StringValue(s.clone()),
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
                .map(|&n| AnyValue {
                    value: Some(int(n)),
                })
                .collect(),
        }),
    }
}

/// Whether a row's column is one of its record's attributes: not the exporter's (the
/// resource has them) and not left out ([`left_out`]).
fn in_record(c: &ColumnInfo, v: &Value) -> bool {
    !per_exporter(c) && !left_out(c, v)
}

fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: SCOPE.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    }
}

/// The value of column `name` in a row, if it is a number.
fn number(row: &EncodedRow, name: &str) -> Option<u64> {
    row.values.iter().find_map(|(c, v)| match v {
        Value::U64(n) if c.name == name => Some(*n),
        _ => None,
    })
}

fn text<'r>(row: &'r EncodedRow, name: &str) -> Option<&'r str> {
    row.values.iter().find_map(|(c, v)| match v {
        Value::Str(s) if c.name == name => Some(s.as_str()),
        _ => None,
    })
}

/// A finding's severity (every other row is INFO).
fn severity(row: &EncodedRow) -> (SeverityNumber, &'static str) {
    match text(row, "severity") {
        Some("critical") => (SeverityNumber::Error, "ERROR"),
        Some("warning") => (SeverityNumber::Warn, "WARN"),
        _ => (SeverityNumber::Info, "INFO"),
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

/// An interval's aggregates (`qp_rows`: its QP rows) as one metrics request.
pub fn metrics(
    resource_: &Resource,
    start_ns: u64,
    end_ns: u64,
    qp_rows: &[&EncodedRow],
) -> ExportMetricsServiceRequest {
    let metrics = INTERVAL_SUMS
        .iter()
        .map(|(column, name, unit)| {
            let total: u64 = qp_rows.iter().filter_map(|r| number(r, column)).sum();
            Metric {
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
            }
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
// (~50 per row), ten times the encoding itself. These writers produce the same message (its
// fields in tag order, where prost writes them in declaration order): the tests decode them
// with prost and compare with `reference::log_record`.

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
fn any_len(v: &Value) -> usize {
    match v {
        Value::U64(n) => 1 + encoded_len_varint(int_of(*n)),
        Value::F64(_) => 1 + 8,
        Value::Str(s) => field_len(1, s.len()),
        Value::Strs(s) => field_len(
            5,
            s.iter().map(|s| field_len(1, field_len(1, s.len()))).sum(),
        ),
        Value::U64s(n) => field_len(
            5,
            n.iter()
                .map(|&n| field_len(1, 1 + encoded_len_varint(int_of(n))))
                .sum(),
        ),
    }
}

fn write_any(v: &Value, out: &mut Vec<u8>) {
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
        Value::Strs(s) => {
            let values: usize = s.iter().map(|s| field_len(1, field_len(1, s.len()))).sum();
            len_key(5, values, out);
            for s in s {
                len_key(1, field_len(1, s.len()), out);
                len_key(1, s.len(), out);
                out.extend_from_slice(s.as_bytes());
            }
        }
        Value::U64s(n) => {
            let values: usize = n
                .iter()
                .map(|&n| field_len(1, 1 + encoded_len_varint(int_of(n))))
                .sum();
            len_key(5, values, out);
            for &n in n {
                len_key(1, 1 + encoded_len_varint(int_of(n)), out);
                encode_key(3, WireType::Varint, out);
                encode_varint(int_of(n), out);
            }
        }
    }
}

/// Appends a row's log record (as [`reference::log_record`] makes it) to `out` as a ScopeLogs'
/// `log_records` field (tag 2, length-delimited).
pub fn write_log_record(row: &EncodedRow, observed_ns: u64, out: &mut Vec<u8>) {
    let table = TABLES[row.table];
    let (severity, severity_text) = severity(row);
    let event = ["roce.", table].concat();
    let kept = || row.values.iter().filter(|(c, v)| in_record(c, v));
    let kv_len = |key: &str, v: &Value| field_len(1, key.len()) + field_len(2, any_len(v));
    let time = number(row, "interval_end_ns").unwrap_or(0);
    let body = Value::Str(table.to_string());
    let mut len = 0;
    if time != 0 {
        len += 1 + 8;
    }
    len += 1 + encoded_len_varint(severity as u64);
    len += field_len(3, severity_text.len());
    len += field_len(5, any_len(&body));
    len += kept()
        .map(|(c, v)| field_len(6, kv_len(c.attribute, v)))
        .sum::<usize>();
    if observed_ns != 0 {
        len += 1 + 8;
    }
    len += field_len(12, event.len());
    len_key(2, len, out);
    if time != 0 {
        encode_key(1, WireType::SixtyFourBit, out);
        out.extend_from_slice(&time.to_le_bytes());
    }
    encode_key(2, WireType::Varint, out);
    encode_varint(severity as u64, out);
    len_key(3, severity_text.len(), out);
    out.extend_from_slice(severity_text.as_bytes());
    len_key(5, any_len(&body), out);
    write_any(&body, out);
    for (c, v) in kept() {
        len_key(6, kv_len(c.attribute, v), out);
        len_key(1, c.attribute.len(), out);
        out.extend_from_slice(c.attribute.as_bytes());
        len_key(2, any_len(v), out);
        write_any(v, out);
    }
    if observed_ns != 0 {
        encode_key(11, WireType::SixtyFourBit, out);
        out.extend_from_slice(&observed_ns.to_le_bytes());
    }
    len_key(12, event.len(), out);
    out.extend_from_slice(event.as_bytes());
}

/// A logs request around `records` (log record fields as [`write_log_record`] appends them):
/// the bytes [`logs`] would encode.
pub fn logs_bytes(resource_: &Resource, records: &[u8]) -> Vec<u8> {
    let resource = resource(resource_).encode_to_vec();
    let scope = scope().encode_to_vec();
    let scope_logs = field_len(1, scope.len()) + records.len();
    let resource_logs = field_len(1, resource.len()) + field_len(2, scope_logs);
    let mut out = Vec::with_capacity(field_len(1, resource_logs));
    len_key(1, resource_logs, &mut out);
    len_key(1, resource.len(), &mut out);
    out.extend_from_slice(&resource);
    len_key(2, scope_logs, &mut out);
    len_key(1, scope.len(), &mut out);
    out.extend_from_slice(&scope);
    out.extend_from_slice(records);
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
    /// an attribute.
    pub fn log_record(row: &EncodedRow, observed_ns: u64) -> LogRecord {
        let table = TABLES[row.table];
        let (severity, severity_text) = severity(row);
        LogRecord {
            time_unix_nano: number(row, "interval_end_ns").unwrap_or(0),
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
