//! The tables as others read them: a row as a JSONEachRow line, the ClickHouse schema, and the
//! docs' field tables.

use std::fmt::Write as _;

use super::{ColumnInfo, EncodedRow, Value, tables};

/// A row as one JSON object (one line of JSONEachRow), its columns in the table's order.
pub fn json_row(row: &EncodedRow<'_>) -> String {
    let mut out = String::with_capacity(64 * row.values.len());
    write_json_row(row, &mut out);
    out
}

/// Appends a row as one JSON object to `out`: written directly (a row is a flat object of
/// numbers, strings and arrays of them; building serde_json's map first costs three times the
/// writing).
pub fn write_json_row(row: &EncodedRow<'_>, out: &mut String) {
    out.push('{');
    for (i, (c, v)) in row.values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Column names are plain identifiers ([a-z0-9_]: the tables' test says so).
        out.push('"');
        out.push_str(c.name);
        out.push_str("\":");
        write_json_value(v, out);
    }
    out.push('}');
}

fn write_json_value(v: &Value<'_>, out: &mut String) {
    match v {
        Value::U64(n) => {
            let _ = write!(out, "{n}");
        }
        Value::F64(x) if x.is_finite() => {
            let _ = write!(out, "{x}");
        }
        Value::F64(_) => out.push_str("null"),
        Value::Str(s) => json_string(s, out),
        Value::Ip(a) => {
            // An address's text needs no escaping.
            out.push('"');
            out.push_str(super::IpText::new(a).as_str());
            out.push('"');
        }
        Value::Strs(s) => {
            out.push('[');
            for (i, s) in s.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(s, out);
            }
            out.push(']');
        }
        Value::U64s(n) => {
            out.push('[');
            for (i, n) in n.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{n}");
            }
            out.push(']');
        }
    }
}

fn json_string(s: &str, out: &mut String) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        // serde_json's escaping, for the rare string that needs it.
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
}

/// The ClickHouse schema of every table in database `db`: the columns, the interval's start
/// as a time (`interval_start`: the partitions read it), the time a row was inserted
/// (`inserted_at`: the retention reads it, so rows of an old capture are kept as long as new
/// ones), ORDER BY, a partition per day, and `ttl_days` of retention.
/// `deploy/clickhouse/schema.sql` is this, for database `roce` and 30 days.
pub fn schema_sql(db: &str, ttl_days: u32) -> String {
    let mut sql = String::new();
    let _ = writeln!(
        sql,
        "-- roce-observer fleet records, schema version {} (docs/export.md).\n\
         -- Generated from the record tables (tests/export.rs checks this file against them).\n\
         CREATE DATABASE IF NOT EXISTS {db};",
        super::SCHEMA_VERSION
    );
    for t in tables::tables() {
        let _ = writeln!(sql, "\n-- One row: {}.", t.row);
        let _ = writeln!(sql, "CREATE TABLE IF NOT EXISTS {db}.{}\n(", t.name);
        for c in &t.columns {
            let _ = writeln!(sql, "    {},", column_sql(c));
        }
        let _ = writeln!(
            sql,
            "    interval_start DateTime64(9, 'UTC') MATERIALIZED \
             fromUnixTimestamp64Nano(toInt64(interval_start_ns)),\n    \
             inserted_at DateTime('UTC') DEFAULT now()\n)\n\
             ENGINE = MergeTree\n\
             PARTITION BY toYYYYMMDD(interval_start)\n\
             ORDER BY {}\n\
             TTL inserted_at + INTERVAL {ttl_days} DAY DELETE;",
            t.order_by
        );
    }
    sql
}

fn column_sql(c: &ColumnInfo) -> String {
    // A ClickHouse string literal: backslash escapes, a quote doubled.
    let help = c.help.replace('\\', "\\\\").replace('\'', "''");
    format!("{} {} COMMENT '{help}'", c.name, c.ty.sql())
}

/// The field tables of docs/export.md: per table, what a row is, its ClickHouse sorting and,
/// per column, its type, OpenTelemetry attribute and meaning.
pub fn markdown_tables() -> String {
    let mut md = String::new();
    for t in tables::tables() {
        let _ = writeln!(
            md,
            "### `{}`
",
            t.name
        );
        let _ = writeln!(
            md,
            "One row: {}. Sorted by `{}`.
",
            t.row, t.order_by
        );
        let _ = writeln!(md, "| column | type | OTLP attribute | meaning |");
        let _ = writeln!(md, "|---|---|---|---|");
        for c in &t.columns {
            let _ = writeln!(
                md,
                "| `{}` | {} | `{}` | {} |",
                c.name,
                c.ty.sql(),
                c.attribute,
                c.help.replace('|', "\\|")
            );
        }
        md.push('\n');
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::ChType;

    #[test]
    fn rows_are_json_objects_serde_reads_back() {
        const fn info(name: &'static str) -> ColumnInfo {
            ColumnInfo {
                name,
                attribute: "",
                ty: ChType::String,
                help: "",
            }
        }
        static C: [ColumnInfo; 6] = [
            info("n"),
            info("s"),
            info("odd"),
            info("strs"),
            info("ints"),
            info("x"),
        ];
        let row = EncodedRow {
            table: 0,
            values: vec![
                (&C[0], Value::U64(u64::MAX)),
                (&C[1], Value::Str("198.18.0.1".into())),
                (&C[2], Value::Str("a \"quoted\" \\ line\n\u{1}é".into())),
                (&C[3], Value::Strs(vec!["RC".into(), String::new()].into())),
                (&C[4], Value::U64s(vec![0, 26].into())),
                (&C[5], Value::F64(0.5)),
            ],
        };
        let line = json_row(&row);
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            back,
            serde_json::json!({
                "n": u64::MAX,
                "s": "198.18.0.1",
                "odd": "a \"quoted\" \\ line\n\u{1}é",
                "strs": ["RC", ""],
                "ints": [0, 26],
                "x": 0.5,
            })
        );
        assert!(
            line.starts_with("{\"n\":18446744073709551615,\"s\""),
            "in order: {line}"
        );
    }
}
