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
    let mut seen = std::collections::HashSet::new();
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
        // A collector's file exporter in several pipelines writes their requests alike.
        if OTHER_SIGNALS.iter().any(|k| request.get(*k).is_some()) {
            continue;
        }
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
                // (The observer's records name their table in the body and, as the event,
                // `roce.<table>`: another application's log is no row.)
                let event = record.get("eventName").and_then(serde_json::Value::as_str);
                let Some(table) = tables.iter().find(|t| {
                    t.name == name && event.is_none_or(|e| e.strip_prefix("roce.") == Some(t.name))
                }) else {
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
                // What the encoder leaves out (zero counts, empty strings and lists) is back;
                // a key, a bound or a number it always writes stays missing, for the reader to
                // refuse.
                for c in &table.columns {
                    use super::ChType as T;
                    let default = match c.ty {
                        T::String | T::Label => "".into(),
                        T::Strings | T::UInt64s => serde_json::Value::Array(Vec::new()),
                        T::Count => 0.into(),
                        _ => continue,
                    };
                    row.entry(c.name).or_insert(default);
                }
                // Sent again (the exporter retries what it was not told arrived): once.
                let seq = (
                    table.name,
                    row.get("exporter").cloned(),
                    row.get("seq").cloned(),
                );
                if seq.2.is_some() && !seen.insert(format!("{seq:?}")) {
                    continue;
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
        std::iter::once("resourceLogs")
            .chain(OTHER_SIGNALS)
            .any(|k| v.get(k).is_some_and(serde_json::Value::is_array))
    })
}

/// The other signals' requests a collector's file exporter may write beside the logs.
const OTHER_SIGNALS: [&str; 3] = ["resourceMetrics", "resourceSpans", "resourceProfiles"];

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
            // (Not a number: kept as the text, for the reader to refuse.)
            "intValue" => match inner {
                serde_json::Value::String(s) => {
                    s.parse::<i64>().map_or_else(|_| inner.clone(), Into::into)
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(records: &[serde_json::Value]) -> String {
        serde_json::json!({"resourceLogs": [{
            "resource": {"attributes": [
                {"key": "roce.exporter.id", "value": {"stringValue": "h1/1/1"}},
                {"key": "host.name", "value": {"stringValue": "h1"}},
            ]},
            "scopeLogs": [{"logRecords": records}],
        }]})
        .to_string()
    }

    fn pause(seq: u64, event: &str) -> serde_json::Value {
        serde_json::json!({
            "eventName": event,
            "body": {"stringValue": "pauses"},
            "attributes": [
                {"key": "roce.record.seq", "value": {"intValue": seq.to_string()}},
                {"key": "roce.interval.start", "value": {"intValue": "60"}},
                {"key": "roce.pause.priority", "value": {"intValue": "3"}},
                {"key": "roce.pause.frames", "value": {"intValue": "7"}},
                {"key": "network.io.direction", "value": {"stringValue": "receive"}},
                {"key": "roce.vantage", "value": {}},
            ],
        })
    }

    #[test]
    fn records_come_back_as_their_rows_once() {
        let text = [
            request(&[pause(0, "roce.pauses"), pause(1, "roce.pauses")]),
            // Sent again: once.
            request(&[pause(1, "roce.pauses")]),
            // Another application's, and another signal's.
            request(&[pause(2, "app.pauses")]),
            r#"{"resourceMetrics": []}"#.to_string(),
        ]
        .join("\n");
        let tables = tables_of(text.as_bytes(), "c.json").unwrap();
        let rows: Vec<serde_json::Value> = std::str::from_utf8(&tables["pauses"])
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 2, "{rows:?}");
        let r = &rows[1];
        assert_eq!(
            (&r["exporter"], &r["host"], &r["seq"], &r["frames"]),
            (&"h1/1/1".into(), &"h1".into(), &1.into(), &7.into())
        );
        // Left out by the encoder: back as such (an empty value, zero xon, no MAC).
        assert_eq!(
            (&r["vantage"], &r["xon"], &r["src_mac"]),
            (&"".into(), &0.into(), &"".into())
        );
        assert_eq!(r["interval_start_ns"], 60);
        assert!(!tables.contains_key("qp_intervals"));
        assert!(is_request_line(r#"{"resourceMetrics": []}"#));
        assert!(!is_request_line("{"));
    }

    #[test]
    fn a_key_the_encoder_always_writes_stays_missing() {
        let mut p = pause(0, "roce.pauses");
        p["attributes"].as_array_mut().unwrap().remove(1);
        let tables = tables_of(request(&[p]).as_bytes(), "c.json").unwrap();
        let row: serde_json::Value =
            serde_json::from_slice(tables["pauses"].split(|b| *b == b'\n').next().unwrap())
                .unwrap();
        assert!(row.get("interval_start_ns").is_none(), "{row}");
    }
}
