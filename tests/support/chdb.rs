//! The in-process ClickHouse engine (chdb, from the tools virtualenv) and the queries
//! docs/export.md documents.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::workspace_root;

/// The documented queries, by name (`-- query: NAME` opens each SQL block of docs/export.md).
pub fn documented_queries() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(workspace_root().join("docs/export.md")).unwrap();
    let mut queries = BTreeMap::new();
    for block in doc.split("```sql\n").skip(1) {
        let sql = block.split("```").next().unwrap();
        let name = sql
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("-- query: "))
            .expect("each SQL block starts with -- query: NAME");
        queries.insert(name.to_string(), sql.to_string());
    }
    queries
}

/// Loads each named set of records directories into a fresh `roce` database of one chdb
/// session (the shipped schema, strict JSON: an unknown column is an error; a set's
/// directories into one database, as a fleet's exporters fill one server) and runs every query
/// on them: per set, the row counts per table and each query's rows.
pub fn chdb_answers(
    loads: &BTreeMap<String, Vec<PathBuf>>,
    queries: &BTreeMap<String, String>,
) -> Value {
    let python = crate::venv_python();
    let input = serde_json::json!({
        "schema": std::fs::read_to_string(workspace_root().join("deploy/clickhouse/schema.sql")).unwrap(),
        "tables": roce_observer::export::TABLES,
        "queries": queries,
        "loads": loads,
    });
    let script = r#"
import json, os, sys
from chdb import session
job = json.load(sys.stdin)
s = session.Session()
statements = [q for q in job["schema"].split(";\n") if q.strip() and not all(
    l.startswith("--") or not l.strip() for l in q.splitlines())]
out = {}
for name, dirs in job["loads"].items():
    s.query("DROP DATABASE IF EXISTS roce")
    for q in statements:
        s.query(q)
    counts = {}
    for t in job["tables"]:
        for d in dirs:
            data = open(f"{d}/{t}.jsonl").read()
            if data:
                s.query(f"INSERT INTO roce.{t} SETTINGS input_format_skip_unknown_fields = 0 FORMAT JSONEachRow\n" + data)
        counts[t] = int(s.query(f"SELECT count() FROM roce.{t}", "CSV").bytes().decode().strip())
    answers = {}
    for qname, sql in job["queries"].items():
        text = s.query(sql, "JSONEachRow").bytes().decode()
        answers[qname] = [json.loads(l) for l in text.splitlines() if l.strip()]
    out[name] = {"counts": counts, "answers": answers}
s.close()
print(json.dumps(out))
"#;
    let out = crate::run_with_input(
        Command::new(python).args(["-c", script]),
        input.to_string().as_bytes(),
    )
    .expect("run chdb");
    assert!(
        out.status.success(),
        "chdb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("chdb's answers")
}
