//! Fleet records on disk: a directory with one JSONEachRow file per record table
//! (`<table>.jsonl`), which ClickHouse loads into the tables of `deploy/clickhouse/schema.sql`
//! (docs/export.md).

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use observer_core::{
    export::{IntervalRows, Resource, Sequencer, TABLES, json_row},
    model::Report,
};

/// Why records could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error("records directory {}: {what}", path.display())]
    Directory { path: PathBuf, what: String },
    #[error("records directory {}: cannot create it", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A records directory being written: one file per table, the exporter's sequence numbers.
pub struct RecordDir {
    files: Vec<(PathBuf, BufWriter<File>)>,
    sequencer: Sequencer,
    resource: Resource,
}

/// Refuses a records directory that exists and is not empty (its files would be mixed with
/// this run's), or that is not a directory.
pub fn check_dir(dir: &Path) -> Result<(), RecordsError> {
    let refuse = |what: &str| RecordsError::Directory {
        path: dir.to_path_buf(),
        what: what.to_string(),
    };
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(refuse(
                "exists and is not empty: give a new or empty directory",
            )),
        },
        // New: it must be creatable (tried, and taken away again).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir(dir)
            .and_then(|()| std::fs::remove_dir(dir))
            .map_err(|e| refuse(&format!("cannot create it: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(refuse("is a file, not a directory"))
        }
        Err(e) => Err(refuse(&e.to_string())),
    }
}

impl RecordDir {
    /// Creates `dir` (new, or existing and empty) and its table files.
    pub fn create(dir: &Path, resource: Resource) -> Result<Self, RecordsError> {
        check_dir(dir)?;
        std::fs::create_dir_all(dir).map_err(|source| RecordsError::Create {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut files = Vec::with_capacity(TABLES.len());
        for table in TABLES {
            let path = dir.join(format!("{table}.jsonl"));
            let file = File::create_new(&path).map_err(|source| RecordsError::Write {
                path: path.clone(),
                source,
            })?;
            files.push((path, BufWriter::new(file)));
        }
        Ok(Self {
            files,
            sequencer: Sequencer::default(),
            resource,
        })
    }

    /// Writes the rows of one interval; the rows written per table.
    pub fn interval(
        &mut self,
        start_ns: u64,
        end_ns: u64,
        rows: &IntervalRows<'_>,
    ) -> Result<[u64; TABLES.len()], RecordsError> {
        let mut written = [0; TABLES.len()];
        for row in self
            .sequencer
            .interval(&self.resource, start_ns, end_ns, rows)
        {
            let (path, file) = &mut self.files[row.table];
            writeln!(file, "{}", json_row(&row)).map_err(|source| RecordsError::Write {
                path: path.clone(),
                source,
            })?;
            written[row.table] += 1;
        }
        Ok(written)
    }

    /// Flushes every file.
    pub fn finish(mut self) -> Result<(), RecordsError> {
        for (path, file) in &mut self.files {
            file.flush().map_err(|source| RecordsError::Write {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

/// This host's exporter for a report: the host name, and a stream named after the host, this
/// process and its start.
pub fn resource(report: &Report) -> Resource {
    let observed = if report.source.interfaces.is_empty() {
        &report.source.files
    } else {
        &report.source.interfaces
    };
    let devices: Vec<String> = report
        .nic
        .iter()
        .flat_map(|n| &n.devices)
        .map(|d| d.name.clone())
        .collect();
    let mut r = exporter(observed, &report.source.kind, &devices);
    (r.job, r.rank) =
        observer_core::export::job_and_rank(report.nic.iter().flat_map(|n| &n.qps).map(|q| &q.qp));
    r
}

/// This host's exporter, from now on: its stream is named after the host, this process and
/// the time now (a restart starts a new stream); `observed`, the interfaces or files; `source`,
/// the report's `source.kind`; `devices`, the RDMA devices.
pub fn exporter(observed: &[String], source: &str, devices: &[String]) -> Resource {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    Resource {
        exporter: format!("{host}/{}/{started}", std::process::id()),
        host,
        rdma_device: devices.join(","),
        observed: observed.join(","),
        source: source.to_string(),
        job: String::new(),
        rank: String::new(),
    }
}

/// The interval a report covers, Unix-epoch ns: its frames' (a replay), its session's (a live
/// one), or, without either (the NIC side alone), its window up to now.
pub fn interval(report: &Report) -> (u64, u64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    observer_core::export::report_interval(report, now)
}

/// Writes a report as the records of one interval (a replay, a diagnose) into `dir`.
pub fn write_report(
    report: &Report,
    resource: &Resource,
    dir: &Path,
) -> Result<[u64; TABLES.len()], RecordsError> {
    let mut records = RecordDir::create(dir, resource.clone())?;
    let (start, end) = interval(report);
    let written = records.interval(start, end, &IntervalRows::of(report))?;
    records.finish()?;
    Ok(written)
}
