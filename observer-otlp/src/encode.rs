//! Records as OTLP: each row a log record whose attributes are its columns (by their
//! OpenTelemetry names), and each interval's bounded aggregates as delta sums.

use observer_core::export::{EncodedRow, Resource, TABLES, Value};
use opentelemetry_proto::tonic::{
    collector::{logs::v1::ExportLogsServiceRequest, metrics::v1::ExportMetricsServiceRequest},
    common::v1::{AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value},
    logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber},
    metrics::v1::{
        AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
        metric::Data, number_data_point,
    },
    resource::v1::Resource as OtlpResource,
};

/// The instrumentation scope of every record.
const SCOPE: &str = "roce-observer";

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn any(v: &Value) -> any_value::Value {
    use any_value::Value as A;
    // OTLP integers are signed 64-bit: a count beyond i64::MAX saturates.
    let int = |n: u64| A::IntValue(i64::try_from(n).unwrap_or(i64::MAX));
    match v {
        Value::U64(n) => int(*n),
        Value::F64(x) => A::DoubleValue(*x),
        Value::Str(s) => A::StringValue(s.clone()),
        Value::Strs(s) => A::ArrayValue(ArrayValue {
            values: s
                .iter()
                .map(|s| AnyValue {
                    value: Some(A::StringValue(s.clone())),
                })
                .collect(),
        }),
        Value::U64s(n) => A::ArrayValue(ArrayValue {
            values: n
                .iter()
                .map(|&n| AnyValue {
                    value: Some(int(n)),
                })
                .collect(),
        }),
    }
}

fn resource(r: &Resource) -> OtlpResource {
    use any_value::Value as A;
    OtlpResource {
        attributes: vec![
            kv("service.name", A::StringValue("roce-observer".into())),
            kv(
                "service.version",
                A::StringValue(env!("CARGO_PKG_VERSION").into()),
            ),
            kv("service.instance.id", A::StringValue(r.exporter.clone())),
            kv("host.name", A::StringValue(r.host.clone())),
        ],
        ..Default::default()
    }
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

/// A row as a log record: its table as the event name (`roce.<table>`), the interval's end as
/// its time, a finding's severity as its own (every other row is INFO), and every column as
/// an attribute.
pub fn log_record(row: &EncodedRow, observed_ns: u64) -> LogRecord {
    let table = TABLES[row.table];
    let (severity, severity_text) = match text(row, "severity") {
        Some("critical") => (SeverityNumber::Error, "ERROR"),
        Some("warning") => (SeverityNumber::Warn, "WARN"),
        _ => (SeverityNumber::Info, "INFO"),
    };
    LogRecord {
        time_unix_nano: number(row, "interval_end_ns").unwrap_or(0),
        observed_time_unix_nano: observed_ns,
        severity_number: severity as i32,
        severity_text: severity_text.into(),
        event_name: format!("roce.{table}"),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(table.into())),
        }),
        // An empty string is a value not known (OpenTelemetry: leave the attribute out).
        attributes: row
            .values
            .iter()
            .filter(|(_, v)| !matches!(v, Value::Str(s) if s.is_empty()))
            .map(|(c, v)| kv(c.attribute, any(v)))
            .collect(),
        ..Default::default()
    }
}

/// Log records as one logs request.
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
