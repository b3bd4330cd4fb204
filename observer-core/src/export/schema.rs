//! The tables as others read them: a row as a JSONEachRow line, the ClickHouse schema, and the
//! docs' field tables.

use std::fmt::Write as _;

use super::{ColumnInfo, EncodedRow, Value, tables};

/// A row as one JSON object (one line of JSONEachRow, its keys in name order).
pub fn json_row(row: &EncodedRow) -> String {
    let mut map = serde_json::Map::with_capacity(row.values.len());
    for (c, v) in &row.values {
        map.insert(c.name.to_string(), json_value(v));
    }
    serde_json::Value::Object(map).to_string()
}

fn json_value(v: &Value) -> serde_json::Value {
    match v {
        Value::U64(n) => (*n).into(),
        Value::F64(x) => {
            serde_json::Number::from_f64(*x).map_or(serde_json::Value::Null, Into::into)
        }
        Value::Str(s) => s.as_str().into(),
        Value::Strs(s) => s.iter().map(String::as_str).collect::<Vec<_>>().into(),
        Value::U64s(n) => n.clone().into(),
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
