//! Fleet records back from OTLP: the inverse of the OTLP exporter's records, for readers of
//! records that went over OTLP and were written out as OTLP/JSON (an OpenTelemetry Collector's
//! file exporter), by the one column definition ([`super::tables`]).

use std::collections::HashMap;

/// A line that is not an OTLP/JSON logs request.
#[derive(Debug, thiserror::Error)]
#[error("{origin} line {line}: {problem}")]
pub struct OtlpJsonError {
    pub origin: String,
    pub line: usize,
    pub problem: String,
}

/// Fleet records sent over OTLP, as OTLP/JSON lines (each line an `ExportLogsServiceRequest`
/// in the protobuf JSON mapping, as an OpenTelemetry Collector's file exporter writes them),
/// read from `reader` (`origin` names it in errors) back into their tables' JSONEachRow lines:
/// each log record is a row of the table its body names, its attributes and its resource's
/// the row's columns by their OpenTelemetry names; a column the record leaves out (OTLP leaves
/// out zero counts, empty strings and lists) is back as that. Records of other tables, or not
/// the observer's, are left out. Keyed by table name.
pub fn tables_of(
    reader: impl std::io::BufRead,
    origin: &str,
) -> Result<std::collections::BTreeMap<&'static str, Vec<u8>>, OtlpJsonError> {
    let tables = super::tables();
    // Per table, its columns by attribute name.
    let columns: HashMap<&str, HashMap<&str, &str>> = tables
        .iter()
        .map(|t| {
            (
                t.name,
                t.columns.iter().map(|c| (c.attribute, c.name)).collect(),
            )
        })
        .collect();
    let mut out: std::collections::BTreeMap<&'static str, Vec<u8>> = Default::default();
    for (i, line) in reader.lines().enumerate() {
        let bad = |problem: String| OtlpJsonError {
            origin: origin.into(),
            line: i + 1,
            problem,
        };
        let line = line.map_err(|e| bad(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let request: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
        let resource_logs = request
            .get("resourceLogs")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad("no resourceLogs: not an OTLP/JSON logs request".into()))?;
        for rl in resource_logs {
            let resource = rl
                .get("resource")
                .and_then(|r| r.get("attributes"))
                .map(|a| attributes(a, &bad))
                .transpose()?
                .unwrap_or_default();
            let scopes = rl.get("scopeLogs").and_then(serde_json::Value::as_array);
            for record in scopes.into_iter().flatten().flat_map(|s| {
                s.get("logRecords")
                    .and_then(serde_json::Value::as_array)
                    .into_iter()
                    .flatten()
            }) {
                let name = record
                    .get("body")
                    .and_then(|b| b.get("stringValue"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default();
                let Some(table) = tables.iter().find(|t| t.name == name) else {
                    continue;
                };
                let by_attribute = &columns[table.name];
                let mut row = serde_json::Map::new();
                let attributes = match record.get("attributes") {
                    Some(a) => attributes(a, &bad)?,
                    None => Vec::new(),
                };
                for (key, value) in resource.iter().chain(&attributes) {
                    if let Some(column) = by_attribute.get(key.as_str()) {
                        row.insert((*column).to_string(), value.clone());
                    }
                }
                for c in &table.columns {
                    use super::ChType as T;
                    row.entry(c.name).or_insert_with(|| match c.ty {
                        T::String | T::Label => "".into(),
                        T::Strings | T::UInt64s => serde_json::Value::Array(Vec::new()),
                        T::Float64 => 0.0.into(),
                        T::UInt8 | T::UInt16 | T::UInt32 | T::UInt64 | T::Count => 0.into(),
                    });
                }
                let rows = out.entry(table.name).or_default();
                serde_json::to_writer(&mut *rows, &row).map_err(|e| bad(e.to_string()))?;
                rows.push(b'\n');
            }
        }
    }
    Ok(out)
}

/// Whether a JSON line is an OTLP/JSON logs request rather than a record or a sidecar's line.
pub fn is_request_line(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| {
        v.get("resourceLogs")
            .is_some_and(serde_json::Value::is_array)
    })
}

/// OTLP/JSON key-values as (key, value) pairs: strings, integers (64-bit ones are quoted in
/// the JSON mapping), doubles, booleans and arrays of them.
fn attributes(
    kvs: &serde_json::Value,
    bad: &dyn Fn(String) -> OtlpJsonError,
) -> Result<Vec<(String, serde_json::Value)>, OtlpJsonError> {
    fn any(v: &serde_json::Value) -> Option<serde_json::Value> {
        let (kind, inner) = v.as_object()?.iter().next()?;
        Some(match kind.as_str() {
            "stringValue" | "boolValue" | "doubleValue" => inner.clone(),
            "intValue" => match inner {
                serde_json::Value::String(s) => s.parse::<i64>().ok()?.into(),
                n => n.clone(),
            },
            "arrayValue" => serde_json::Value::Array(
                inner
                    .get("values")
                    .and_then(serde_json::Value::as_array)
                    .map(|vs| vs.iter().filter_map(any).collect())
                    .unwrap_or_default(),
            ),
            _ => return None,
        })
    }
    kvs.as_array()
        .ok_or_else(|| bad("attributes that are not a list".into()))?
        .iter()
        .map(|kv| {
            let key = kv
                .get("key")
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| bad("an attribute without its key".into()))?;
            // An empty value (no kind) is no column's.
            Ok(kv.get("value").and_then(any).map(|v| (key.to_string(), v)))
        })
        .filter_map(Result::transpose)
        .collect()
}
