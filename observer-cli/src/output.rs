//! What the commands write: the report on standard output (table or JSON), the HTML page and
//! other files, never over a file the same run reads, and a quiet exit when the reader of
//! standard output has gone (`| head`).

use std::{
    io::Write,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use roce_observer::{model::Report, render, units::same_file};

/// The host trees `flag` names (directories, or tar.gz files `snapshot` wrote), opened: the
/// trees, which must be kept while they are read (a tar.gz is unpacked into a temporary
/// directory that goes with it), and their readings in order (a tree of two gives both).
pub fn open_trees(
    flag: &str,
    paths: &[PathBuf],
) -> Result<(Vec<roce_observer::source::nic::tree::Opened>, Vec<PathBuf>)> {
    let mut opened = Vec::new();
    for p in paths {
        if !p.exists() {
            anyhow::bail!("{flag} {}: no such file or directory", p.display());
        }
        opened.push(roce_observer::source::nic::tree::open(p)?);
    }
    let readings = opened.iter().flat_map(|o| o.readings.clone()).collect();
    Ok((opened, readings))
}

/// A flag combination refused before anything runs (exit status 2, as clap's own).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The command ran and said so on standard output, and what it said is a failure (exit status
/// 1, no error line).
#[derive(Debug, thiserror::Error)]
#[error("failed")]
pub struct Failed;

/// Standard output's reader went away.
#[derive(Debug, thiserror::Error)]
#[error("standard output closed")]
pub struct ClosedStdout;

/// True when `e` is (or was caused by) standard output's reader going away.
pub fn is_closed_stdout(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<ClosedStdout>())
}

/// True when `e` or one of its sources is an I/O error of a closed pipe.
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// `e`, or [`ClosedStdout`] when it comes from a closed pipe (`-o /dev/stdout | head` too).
pub fn closed_pipe<E: std::error::Error + Send + Sync + 'static>(e: E) -> anyhow::Error {
    if is_broken_pipe(&e) {
        ClosedStdout.into()
    } else {
        e.into()
    }
}

/// Writes to standard output; a closed pipe becomes [`ClosedStdout`].
pub fn stdout(write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    write(&mut out)
        .and_then(|()| out.flush())
        .map_err(closed_pipe)
        .context("cannot write to standard output")
}

/// Refuses a capture file given twice (by any path or link): its packets would all come again,
/// and the analysis would count every one as a copy.
pub fn refuse_twice(files: &[String]) -> Result<()> {
    for (i, a) in files.iter().enumerate() {
        for b in &files[..i] {
            if a == "-" && b == "-" {
                return Err(UsageError(
                    "standard input (-) is given twice: it can be read once".to_string(),
                )
                .into());
            }
            // Standard input redirected from a file is that file.
            let path = |f: &str| Path::new(if f == "-" { "/dev/stdin" } else { f }).to_path_buf();
            if a == b || same_file(&path(a), &path(b)) {
                let name = |f: &str| {
                    if f == "-" {
                        "standard input (-)".to_string()
                    } else {
                        f.to_string()
                    }
                };
                return Err(UsageError(format!(
                    "capture file {} is given twice (also as {}): give each file once",
                    name(a),
                    name(b)
                ))
                .into());
            }
        }
    }
    Ok(())
}

/// Refuses an output file that is one of the inputs (the same file, by any path or link):
/// writing it would destroy what the run reads.
pub fn refuse_overwrite(flag: &str, output: &Path, inputs: &[PathBuf]) -> Result<()> {
    if !output.is_file() {
        // Not there yet, or a device (/dev/stdout, /dev/null) or a pipe: nothing is overwritten.
        return Ok(());
    }
    for input in inputs {
        if same_file(output, input) {
            return Err(UsageError(format!(
                "{flag} {} is an input of this run ({}): refusing to overwrite it",
                output.display(),
                input.display()
            ))
            .into());
        }
    }
    Ok(())
}

/// Prints the report: JSON, or the findings, table and time-series summary.
pub fn print_report(report: &Report, json: bool, top: usize, color: bool) -> Result<()> {
    stdout(|out| {
        if json {
            render::json::write(report, out)
        } else {
            // A source without RoCE says so before anything else; then the findings (what the
            // run concluded), then the numbers behind them.
            if let Some(notice) = &report.notice {
                writeln!(out, "{notice}")?;
            }
            writeln!(
                out,
                "{}",
                render::findings::render(&report.findings, &report.checks, color)
            )?;
            write!(out, "{}", render::table::render_table(report, top))?;
            write!(out, "{}", render::table::render_timeline(report))?;
            if let Some(nic) = &report.nic {
                write!(out, "\n{}", render::nic::render_nic(nic))?;
            }
            Ok(())
        }
    })
}

/// Prints the warnings that did not stop the run (they are in `source.warnings` too).
pub fn print_warnings(report: &Report) {
    for w in &report.source.warnings {
        eprintln!("roce-observer: warning: {w}");
    }
}

/// Refuses an output file that cannot be written (no such folder, no permission, a read-only
/// file system), before the run: a run of minutes must not end in losing its report. An
/// existing file is opened for writing without truncating it; a new one is created and
/// removed again.
pub fn check_writable(flag: &str, output: &Path) -> Result<()> {
    let tried = if output.exists() {
        std::fs::OpenOptions::new()
            .write(true)
            .open(output)
            .map(drop)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(output)
            .and_then(|f| {
                drop(f);
                std::fs::remove_file(output)
            })
    };
    tried.map_err(|e| {
        UsageError(format!(
            "{flag} {}: cannot write there: {e}",
            output.display()
        ))
        .into()
    })
}

/// Prints the report, then writes the HTML report when `--html` asked for it: should writing
/// it fail after all, the printed report is not lost.
pub fn finish(
    report: &Report,
    files: Files<'_>,
    json: bool,
    top: usize,
    color: bool,
) -> Result<()> {
    print_warnings(report);
    // One exporter for the run: the records on disk and over OTLP are one stream. The records
    // first: an HTML file inside their directory would make it not empty.
    let resource = roce_observer::records::resource(report);
    let records = write_records(report, &resource, files.records);
    let html = write_html(report, files.html);
    print_report(report, json, top, color)?;
    // After the report is printed: an upload that fails loses nothing of it.
    let otlp = match files.otlp {
        Some(o) => o
            .config()
            .and_then(|c| crate::otlp_args::send(report, &resource, c, o.otlp_timeout)),
        None => Ok(()),
    };
    records.and(html).and(otlp)
}

/// The files a report is also written to.
#[derive(Clone, Copy, Debug, Default)]
pub struct Files<'a> {
    pub html: Option<&'a Path>,
    pub records: Option<&'a Path>,
    pub otlp: Option<&'a crate::otlp_args::OtlpArgs>,
}

impl Files<'_> {
    /// Refuses, before anything runs, an output that is one of `inputs` or cannot be written,
    /// and a records directory that is not new or empty.
    pub fn check(&self, inputs: &[PathBuf]) -> Result<()> {
        if let Some(html) = self.html {
            refuse_overwrite("--html", html, inputs)?;
            check_writable("--html", html)?;
        }
        if let Some(dir) = self.records {
            roce_observer::records::check_dir(dir)
                .map_err(|e| UsageError(format!("--records: {e}")))?;
        }
        if let Some(otlp) = self.otlp {
            otlp.config()?;
        }
        Ok(())
    }
}

/// Writes the fleet records when `--records` asked for them.
pub fn write_records(
    report: &Report,
    resource: &roce_observer::export::Resource,
    dir: Option<&Path>,
) -> Result<()> {
    if let Some(dir) = dir {
        let rows = roce_observer::records::write_report(report, resource, dir)?;
        eprintln!(
            "roce-observer: wrote {} records to {}",
            rows.iter().sum::<u64>(),
            dir.display()
        );
    }
    Ok(())
}

/// Writes the HTML report when `--html` asked for it.
pub fn write_html(report: &Report, path: Option<&Path>) -> Result<()> {
    if let Some(path) = path {
        std::fs::write(path, render::html::render(report))
            .map_err(closed_pipe)
            .with_context(|| format!("cannot write the HTML report {}", path.display()))?;
        eprintln!("roce-observer: wrote the HTML report to {}", path.display());
    }
    Ok(())
}
