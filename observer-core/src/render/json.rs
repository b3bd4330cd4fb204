//! The report as `roce-observer/report/v1` JSON: the report itself, serialised (pretty, one
//! trailing newline). Later versions add fields, never rename them.

use std::io::Write;

use crate::model::Report;

/// Writes the report's JSON and a newline.
pub fn write(report: &Report, mut out: impl Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut out, report)?;
    writeln!(out)
}
