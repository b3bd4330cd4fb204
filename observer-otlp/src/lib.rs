//! observer-otlp: the fleet records (observer-core's `export` tables) over OTLP. Each row is
//! a log record; each interval's QP counts, summed, are delta sums (bounded: no per-QP
//! attribute). gRPC or HTTP/protobuf, gzip, TLS with a CA file, headers (tokens).
//!
//! Whoever produces records ([`Exporter::push_interval`]) never waits for the network: the rows are
//! encoded into requests and queued, up to a cap in bytes. Beyond it the oldest requests are
//! dropped and their rows counted. One task sends the queue in order, retrying what the OTLP
//! specification says is retryable with exponential backoff (or the server's Retry-After).
//! Every row pushed ends counted once: sent, rejected by the receiver, dropped at the cap,
//! or (at [`Exporter::flush`]'s deadline) not delivered.

mod encode;
mod transport;

use std::{
    collections::VecDeque,
    io::Write,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

#[cfg(test)]
use encode::reference::{log_record, logs};
pub use encode::{INTERVAL_SUMS, RecordWriter, interval_sums, logs_bytes, logs_head, metrics};
#[cfg(test)]
use encode::{row_sums, write_log_record};
#[cfg(test)]
use observer_core::export::EncodedRow;
use observer_core::export::{ColumnInfo, IntervalRows, Resource, RowSink, Sequencer, Value};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;
use tokio::sync::Notify;
use transport::{Client, Outcome};

/// About the most a request carries (encoded rows), under collectors' 4 MiB gRPC default.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// The rows a request carries at most, unless configured otherwise.
pub const MAX_ROWS_PER_REQUEST: usize = 2000;

/// The OTLP transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (port 4317 by convention).
    #[default]
    Grpc,
    /// OTLP/HTTP with protobuf bodies: `POST {endpoint}/v1/logs` and `/v1/metrics` (port 4318).
    HttpProtobuf,
}

/// Where and how records are sent.
#[derive(Clone, Debug)]
pub struct Config {
    /// `http://host:port` or `https://host:port`; for HTTP/protobuf, the base the `/v1/...`
    /// paths are added to.
    pub endpoint: String,
    pub protocol: Protocol,
    pub gzip: bool,
    /// Sent with every request (e.g. `authorization`, a tenant).
    pub headers: Vec<(String, String)>,
    /// PEM certificates to trust for `https://` (else the system's roots).
    pub ca_pem: Option<Vec<u8>>,
    /// A request's time limit (and a connection's).
    pub timeout: Duration,
    /// The queue's cap, in encoded bytes.
    pub buffer_bytes: usize,
    /// Rows per request at most (a large interval is several requests).
    pub max_rows_per_request: usize,
}

impl Config {
    pub fn new(endpoint: impl Into<String>, protocol: Protocol) -> Self {
        Self {
            endpoint: endpoint.into(),
            protocol,
            gzip: true,
            headers: Vec::new(),
            ca_pem: None,
            timeout: Duration::from_secs(10),
            buffer_bytes: 64 << 20,
            max_rows_per_request: MAX_ROWS_PER_REQUEST,
        }
    }
}

impl Config {
    /// Checks what can be checked before anything is sent: the URL (http:// or https://,
    /// a host), the headers, and the CA file's certificates.
    pub fn validate(&self) -> Result<(), OtlpError> {
        transport::validate(self)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("OTLP endpoint {endpoint}: {what}")]
    Config { endpoint: String, what: String },
}

/// Where every pushed row went, so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Rows handed to [`Exporter::push_interval`].
    pub pushed: u64,
    /// Rows the receiver accepted.
    pub sent: u64,
    /// Rows the receiver refused: for good (a non-retryable answer), or partly (its partial
    /// success count).
    pub rejected: u64,
    /// Rows dropped because the queue was full (the oldest go first).
    pub dropped: u64,
    /// Rows queued or being sent.
    pub pending: u64,
    /// The queue's encoded bytes.
    pub queued_bytes: u64,
    /// Requests tried again.
    pub retries: u64,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// The last request of records failed (it is being tried again, or was refused); a
    /// partial success is no failure (its refused rows are counted `rejected`).
    pub failing: bool,
}

/// One request of rows, encoded (and, for an interval's first, its aggregates).
struct Batch {
    /// gzip'd with the settings' `gzip`.
    logs: Vec<u8>,
    metrics: Option<ExportMetricsServiceRequest>,
    rows: u64,
    bytes: usize,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<VecDeque<Batch>>,
    wake: Notify,
    idle: Notify,
    pushed: AtomicU64,
    sent: AtomicU64,
    rejected: AtomicU64,
    dropped: AtomicU64,
    queued_rows: AtomicU64,
    queued_bytes: AtomicU64,
    in_flight: AtomicU64,
    retries: AtomicU64,
    closed: AtomicBool,
    failing: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl Shared {
    fn error(&self, why: String) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }
}

/// The exporter: a queue and the task that sends it.
pub struct Exporter {
    shared: Arc<Shared>,
    config: Config,
    task: tokio::task::JoinHandle<()>,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Exporter {
    /// Starts the sending task on the current tokio runtime.
    pub fn start(config: Config) -> Result<Self, OtlpError> {
        let client = Client::new(&config)?;
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(send_loop(
            client,
            shared.clone(),
            config.timeout,
            config.gzip,
        ));
        Ok(Self {
            shared,
            config,
            task,
        })
    }

    /// Queues rows already made, as [`Exporter::push_interval`] queues an interval's: the
    /// tests' reference of it, and their way to push rows of their own.
    #[cfg(test)]
    fn push(&self, resource: &Resource, start_ns: u64, end_ns: u64, rows: &[EncodedRow<'_>]) {
        let qp_rows: Vec<&EncodedRow<'_>> = rows.iter().filter(|r| r.table == 0).collect();
        let mut requests = self.requests(resource, start_ns, end_ns, &row_sums(&qp_rows));
        for row in rows {
            requests.writer.row(row);
            requests.row_written();
        }
        requests.finish();
    }

    /// Numbers (`sequencer`) and queues the rows of one interval (`start_ns`..`end_ns`), each
    /// written as it is made (no row is kept), in requests of at most `max_rows_per_request`
    /// rows, the interval's aggregates with the first. Never waits: a full queue drops its
    /// oldest requests.
    pub fn push_interval(
        &self,
        resource: &Resource,
        sequencer: &mut Sequencer,
        start_ns: u64,
        end_ns: u64,
        rows: &IntervalRows<'_>,
    ) {
        let mut requests = self.requests(resource, start_ns, end_ns, &interval_sums(rows));
        sequencer.each_row(resource, start_ns, end_ns, rows, false, &mut requests);
        requests.finish();
    }

    /// The requests of one interval, each queued as it is cut, the interval's aggregates with
    /// the first.
    fn requests<'a>(
        &'a self,
        resource: &'a Resource,
        start_ns: u64,
        end_ns: u64,
        sums: &[u64; INTERVAL_SUMS.len()],
    ) -> Requests<impl FnMut(&[u8], u64) + 'a> {
        let mut aggregates = Some(metrics(resource, start_ns, end_ns, sums));
        let writer = RecordWriter::new(
            Vec::with_capacity(MAX_REQUEST_BYTES + (64 << 10)),
            end_ns,
            now_ns(),
        );
        Requests::new(
            writer,
            self.config.max_rows_per_request,
            move |records, rows| {
                let metrics = aggregates.take();
                let logs = if self.config.gzip {
                    // The envelope, then the records: compressed without being copied behind it.
                    gzip(&[&logs_head(resource, records.len(), 0), records])
                } else {
                    logs_bytes(resource, records)
                };
                let bytes = logs.len() + metrics.as_ref().map_or(0, Message::encoded_len);
                self.enqueue(Batch {
                    logs,
                    metrics,
                    rows,
                    bytes,
                });
            },
        )
    }

    fn enqueue(&self, batch: Batch) {
        let s = &self.shared;
        s.pushed.fetch_add(batch.rows, Ordering::Relaxed);
        let mut queue = s.queue.lock().unwrap_or_else(|e| e.into_inner());
        let cap = self.config.buffer_bytes as u64;
        let discard = |b: Batch| {
            s.dropped.fetch_add(b.rows, Ordering::Relaxed);
            s.queued_rows.fetch_sub(b.rows, Ordering::Relaxed);
            s.queued_bytes.fetch_sub(b.bytes as u64, Ordering::Relaxed);
        };
        s.queued_rows.fetch_add(batch.rows, Ordering::Relaxed);
        s.queued_bytes
            .fetch_add(batch.bytes as u64, Ordering::Relaxed);
        queue.push_back(batch);
        while s.queued_bytes.load(Ordering::Relaxed) > cap {
            match queue.pop_front() {
                Some(oldest) => discard(oldest),
                None => break,
            }
        }
        drop(queue);
        s.wake.notify_one();
    }

    /// Where the rows went, so far.
    pub fn stats(&self) -> Stats {
        stats_of(&self.shared)
    }

    /// Waits until every queued row was sent (or refused), or `deadline` passes; then stops
    /// the task. The rows still pending at the deadline are not delivered: `pending` says how
    /// many.
    pub async fn flush(self, deadline: Duration) -> Stats {
        let wait = async {
            loop {
                let idle = self.shared.idle.notified();
                if self.stats().pending == 0 {
                    break;
                }
                idle.await;
            }
        };
        let _ = tokio::time::timeout(deadline, wait).await;
        self.shared.closed.store(true, Ordering::Relaxed);
        self.task.abort();
        // Stopped for good before the counts are read (a request in flight at the deadline
        // stays pending: not delivered, as far as this exporter knows; the task is aborted at
        // an await, never between counting a request and clearing it).
        let Self { shared, task, .. } = self;
        let _ = task.await;
        stats_of(&shared)
    }
}

/// An interval's log records ([`RecordWriter`]'s) cut into requests of at most `max_rows`
/// rows and about [`MAX_REQUEST_BYTES`] (a collector's default gRPC message limit is 4 MiB)
/// each: `emit` takes each request's records and rows as it is cut, and an interval without
/// rows is one request of none.
pub struct Requests<F: FnMut(&[u8], u64)> {
    /// The records of the request being filled.
    pub writer: RecordWriter,
    max_rows: u64,
    emit: F,
    /// Where the row being written starts.
    before: usize,
    rows: u64,
    emitted: bool,
}

impl<F: FnMut(&[u8], u64)> Requests<F> {
    pub fn new(writer: RecordWriter, max_rows: usize, emit: F) -> Self {
        Self {
            writer,
            max_rows: max_rows.max(1) as u64,
            emit,
            before: 0,
            rows: 0,
            emitted: false,
        }
    }

    /// A row was written (by [`Requests::writer`]): it opens the next request when this one
    /// is full.
    pub fn row_written(&mut self) {
        let len = self.writer.records.len();
        if self.rows > 0 && (len > MAX_REQUEST_BYTES || self.rows >= self.max_rows) {
            (self.emit)(&self.writer.records[..self.before], self.rows);
            self.emitted = true;
            self.writer.records.drain(..self.before);
            self.rows = 0;
        }
        self.rows += 1;
        self.before = self.writer.records.len();
    }

    /// Emits the last rows, or a request of none (an interval without rows).
    pub fn finish(mut self) {
        if self.rows > 0 || !self.emitted {
            (self.emit)(&self.writer.records, self.rows);
        }
    }
}

impl<'r, F: FnMut(&[u8], u64)> RowSink<'r> for Requests<F> {
    fn begin(&mut self, table: usize) {
        self.writer.begin(table);
    }

    fn value(&mut self, column: &'static ColumnInfo, value: Value<'r>) {
        self.writer.value(column, value);
    }

    fn end(&mut self) {
        self.writer.end();
        self.row_written();
    }
}

/// `bytes` gzip'd at the fast level, as the HTTP transport compresses (the records' attribute
/// names repeat: even the fast level takes them down to a few percent).
fn gzip(parts: &[&[u8]]) -> Vec<u8> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut gz =
        flate2::write::GzEncoder::new(Vec::with_capacity(len / 8), flate2::Compression::fast());
    for p in parts {
        // Writing to a Vec cannot fail.
        let _ = gz.write_all(p);
    }
    gz.finish().unwrap_or_default()
}

fn stats_of(s: &Shared) -> Stats {
    Stats {
        pushed: s.pushed.load(Ordering::Relaxed),
        sent: s.sent.load(Ordering::Relaxed),
        rejected: s.rejected.load(Ordering::Relaxed),
        dropped: s.dropped.load(Ordering::Relaxed),
        pending: s.queued_rows.load(Ordering::Relaxed) + s.in_flight.load(Ordering::Relaxed),
        queued_bytes: s.queued_bytes.load(Ordering::Relaxed),
        retries: s.retries.load(Ordering::Relaxed),
        last_error: s
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone(),
        failing: s.failing.load(Ordering::Relaxed),
    }
}

async fn send_loop(mut client: Client, shared: Arc<Shared>, timeout: Duration, gzip: bool) {
    loop {
        let wake = shared.wake.notified();
        let batch = {
            let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            let b = queue.pop_front();
            if let Some(b) = &b {
                shared.in_flight.store(b.rows, Ordering::Relaxed);
                shared.queued_rows.fetch_sub(b.rows, Ordering::Relaxed);
                shared
                    .queued_bytes
                    .fetch_sub(b.bytes as u64, Ordering::Relaxed);
            }
            b
        };
        let Some(batch) = batch else {
            shared.idle.notify_waiters();
            if shared.closed.load(Ordering::Relaxed) {
                return;
            }
            wake.await;
            continue;
        };
        let rows = batch.rows;
        if rows > 0 || batch.metrics.is_none() {
            match send(
                &shared,
                &mut client,
                Request::Logs(&batch.logs, gzip),
                timeout,
            )
            .await
            {
                Sent::Delivered(rejected) => {
                    let rejected = rejected.min(rows);
                    shared.sent.fetch_add(rows - rejected, Ordering::Relaxed);
                    shared.rejected.fetch_add(rejected, Ordering::Relaxed);
                }
                Sent::Refused => {
                    shared.rejected.fetch_add(rows, Ordering::Relaxed);
                }
            }
        }
        shared.in_flight.store(0, Ordering::Relaxed);
        if let Some(m) = &batch.metrics {
            // The aggregates are not rows: their loss is only logged as the last error.
            let _ = send(&shared, &mut client, Request::Metrics(m), timeout).await;
        }
    }
}

enum Request<'a> {
    /// An encoded ExportLogsServiceRequest, and whether it is gzip'd.
    Logs(&'a [u8], bool),
    Metrics(&'a ExportMetricsServiceRequest),
}

enum Sent {
    Delivered(u64),
    Refused,
}

/// Tries a request until it is delivered or refused for good: exponential backoff from
/// 100 ms to 5 s between tries, or the server's Retry-After (at most a minute).
async fn send(shared: &Shared, client: &mut Client, req: Request<'_>, timeout: Duration) -> Sent {
    let mut backoff = Duration::from_millis(100);
    // Whether the receiver takes records is said by the requests of records alone (the
    // aggregates may go elsewhere, or nowhere).
    let records = matches!(req, Request::Logs(..));
    let failing = |f: bool| {
        if records {
            shared.failing.store(f, Ordering::Relaxed);
        }
    };
    loop {
        let outcome = match req {
            Request::Logs(r, gzipped) => client.logs(r, gzipped, timeout).await,
            Request::Metrics(r) => client.metrics(r, timeout).await,
        };
        match outcome {
            Outcome::Delivered { rejected, why } => {
                failing(false);
                if let Some(why) = why {
                    shared.error(why);
                }
                return Sent::Delivered(rejected);
            }
            Outcome::Refused { why } => {
                failing(true);
                shared.error(why);
                return Sent::Refused;
            }
            Outcome::Retry { after, why } => {
                // Retried, an aggregates request holds the records behind it up as well.
                shared.failing.store(true, Ordering::Relaxed);
                shared.error(why);
                shared.retries.fetch_add(1, Ordering::Relaxed);
                let wait = after.map_or(backoff, |a| a.min(Duration::from_secs(60)));
                tokio::time::sleep(wait).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Sends the rows of one interval and waits, at most `deadline`, until every one was sent or
/// refused (a one-off upload: `replay`, `diagnose`). Runs its own single-threaded runtime:
/// call it outside one.
pub fn upload(
    config: Config,
    resource: &Resource,
    start_ns: u64,
    end_ns: u64,
    rows: &IntervalRows<'_>,
    deadline: Duration,
) -> Result<Stats, UploadError> {
    let endpoint = config.endpoint.clone();
    // The whole report is in memory already: queue all of it (the cap is for a sidecar's
    // stream, where new intervals keep coming).
    let config = Config {
        buffer_bytes: usize::MAX,
        ..config
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| UploadError::Runtime { source })?;
    let stats = runtime.block_on(async {
        let exporter = Exporter::start(config)?;
        exporter.push_interval(resource, &mut Sequencer::default(), start_ns, end_ns, rows);
        Ok::<_, OtlpError>(exporter.flush(deadline).await)
    })?;
    let lost = stats.rejected + stats.dropped + stats.pending;
    if lost > 0 {
        return Err(UploadError::Lost {
            endpoint,
            lost,
            pushed: stats.pushed,
            why: stats.last_error.clone().unwrap_or_default(),
        });
    }
    Ok(stats)
}

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error(transparent)]
    Config(#[from] OtlpError),
    #[error("cannot start the upload's runtime")]
    Runtime {
        #[source]
        source: std::io::Error,
    },
    #[error("OTLP endpoint {endpoint}: {lost} of {pushed} records not delivered ({why})")]
    Lost {
        endpoint: String,
        lost: u64,
        pushed: u64,
        why: String,
    },
}

#[cfg(test)]
mod tests {
    use observer_core::export::{Value, tables::HEAD};

    use super::*;

    /// `n` rows of the QP table, each with one column.
    fn rows(n: usize) -> Vec<EncodedRow<'static>> {
        (0..n)
            .map(|i| EncodedRow {
                table: 0,
                values: vec![(&HEAD[0].info, Value::U64(i as u64))],
            })
            .collect()
    }

    fn queued(e: &Exporter) -> Vec<(u64, bool)> {
        e.shared
            .queue
            .lock()
            .unwrap()
            .iter()
            .map(|b| (b.rows, b.metrics.is_some()))
            .collect()
    }

    /// Nothing listens on the discard port: every request is retried, none delivered.
    fn unreachable() -> Config {
        Config::new("http://127.0.0.1:9", Protocol::HttpProtobuf)
    }

    #[tokio::test]
    async fn an_interval_is_cut_into_requests_its_aggregates_with_the_first() {
        let e = Exporter::start(unreachable()).unwrap();
        e.push(&Resource::default(), 1, 2, &rows(4500));
        assert_eq!(queued(&e), [(2000, true), (2000, false), (500, false)]);
        e.push(&Resource::default(), 2, 3, &[]);
        assert_eq!(queued(&e).last(), Some(&(0, true)), "the aggregates alone");
        let s = e.stats();
        assert_eq!((s.pushed, s.pending), (4500, 4500));
    }

    #[tokio::test]
    async fn a_full_queue_drops_the_oldest_and_counts_every_row() {
        let one = {
            let e = Exporter::start(unreachable()).unwrap();
            e.push(&Resource::default(), 1, 2, &rows(100));
            e.stats().queued_bytes
        };
        let e = Exporter::start(Config {
            buffer_bytes: (3 * one + one / 2) as usize,
            ..unreachable()
        })
        .unwrap();
        for i in 0..10 {
            e.push(&Resource::default(), i, i + 1, &rows(100));
        }
        // Three intervals fit; the seven oldest went.
        let s = e.stats();
        assert_eq!((s.pushed, s.dropped, s.pending), (1000, 700, 300));
        assert!(s.queued_bytes <= 3 * one + one / 2);
        // The sender takes the oldest left and keeps retrying it; at the deadline every row is
        // sent, rejected, dropped or pending, once.
        let s = e.flush(Duration::from_millis(300)).await;
        assert_eq!(s.sent + s.rejected + s.dropped + s.pending, s.pushed);
        assert_eq!((s.sent, s.dropped, s.pending), (0, 700, 300));
        assert!(s.retries > 0 && s.last_error.is_some(), "{s:?}");
    }

    #[test]
    fn records_written_by_hand_decode_as_prost_encodes_them() {
        use observer_core::export::{ChType, ColumnInfo};
        use opentelemetry_proto::tonic::{
            collector::logs::v1::ExportLogsServiceRequest, logs::v1::LogRecord,
        };
        const fn info(name: &'static str, attribute: &'static str) -> ColumnInfo {
            ColumnInfo {
                name,
                attribute,
                ty: ChType::String,
                help: "",
            }
        }
        static COLUMNS: [ColumnInfo; 8] = [
            info("interval_end_ns", "roce.interval.end"),
            info("n", "roce.n"),
            info("big", "roce.big"),
            info("s", "roce.s"),
            info("empty", "roce.empty"),
            info("strs", "roce.strs"),
            info("ints", "roce.ints"),
            info("severity", "roce.finding.severity"),
        ];
        let row = |table: usize, severity: &str| EncodedRow {
            table,
            values: vec![
                (&COLUMNS[0], Value::U64(1_750_000_000_000_000_000)),
                (&COLUMNS[1], Value::U64(0)),
                (&COLUMNS[2], Value::U64(u64::MAX)),
                (&COLUMNS[3], Value::Ip("2001:db8::1".parse().unwrap())),
                (&COLUMNS[4], Value::Str("".into())),
                (
                    &COLUMNS[5],
                    Value::Strs(vec!["RC".into(), String::new(), "UD".into()].into()),
                ),
                (&COLUMNS[6], Value::U64s(vec![0, 26, 1 << 40].into())),
                (&COLUMNS[7], Value::Str(severity.to_string().into())),
            ],
        };
        let resource = Resource {
            exporter: "h/1/2".into(),
            host: "h".into(),
            ..Resource::default()
        };
        let rows = [
            row(0, ""),
            row(4, "warning"),
            row(4, "critical"),
            row(5, "info"),
        ];
        let mut records = Vec::new();
        for r in &rows {
            let mut one = Vec::new();
            write_log_record(r, 42, &mut one);
            // A ScopeLogs field (tag 2): its key and length, then the record.
            let mut body = &one[1..];
            let len = prost::encoding::decode_varint(&mut body).unwrap() as usize;
            assert_eq!(len, body.len());
            assert_eq!(LogRecord::decode(body).unwrap(), log_record(r, 42));
            records.extend_from_slice(&one);
        }
        let request =
            ExportLogsServiceRequest::decode(&logs_bytes(&resource, &records)[..]).unwrap();
        let want = logs(&resource, rows.iter().map(|r| log_record(r, 42)).collect());
        assert_eq!(request, want);
        assert_eq!(
            logs_bytes(&resource, &[]).len(),
            logs(&resource, vec![]).encoded_len()
        );
    }

    /// What a record of a real table carries, read back from its bytes (not from the reference,
    /// which shares the rule): no count of 0, no empty value, none of the exporter's columns;
    /// and the resource has those.
    #[test]
    fn a_record_leaves_out_zero_counts_and_the_exporters_columns() {
        use observer_core::{
            aggregate::Aggregate,
            export::{IntervalRows, Sequencer},
            model::{Flow, Source},
        };
        use opentelemetry_proto::tonic::{
            collector::logs::v1::ExportLogsServiceRequest, common::v1::any_value::Value as A,
        };
        let mut report = Aggregate::new().report(Source::live(vec!["eth1".into()], "auto"), 1.0);
        report.flows.push(Flow {
            packets: 7,
            bytes: 7000,
            ..Flow::empty(
                "198.18.0.1".parse().unwrap(),
                "198.18.0.2".parse().unwrap(),
                49152,
                0x11,
            )
        });
        let resource = Resource {
            exporter: "h/1/2".into(),
            host: "h".into(),
            observed: "eth1".into(),
            source: "live".into(),
            ..Resource::default()
        };
        let rows = Sequencer::default().interval(&resource, 10, 20, &IntervalRows::of(&report));
        let mut records = Vec::new();
        write_log_record(&rows[0], 0, &mut records);
        let req = ExportLogsServiceRequest::decode(&logs_bytes(&resource, &records)[..]).unwrap();
        let rl = &req.resource_logs[0];
        let attrs = |kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]| {
            kvs.iter()
                .map(|kv| {
                    let v = kv.value.as_ref().and_then(|v| v.value.clone());
                    (kv.key.clone(), v)
                })
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let record = attrs(&rl.scope_logs[0].log_records[0].attributes);
        let res = attrs(&rl.resource.as_ref().unwrap().attributes);
        assert_eq!(record["roce.packets"], Some(A::IntValue(7)));
        assert_eq!(record["roce.bytes"], Some(A::IntValue(7000)));
        assert_eq!(record["rdma.qp.destination"], Some(A::IntValue(0x11)));
        // Kept at 0: the row's number.
        assert_eq!(record["roce.record.seq"], Some(A::IntValue(0)));
        for absent in [
            "roce.ecn.ce",
            "roce.ops.cnp",
            "roce.psn.missing",
            // Empty lists.
            "roce.transports",
            "roce.dscp",
            "roce.vlan.ids",
            "host.name",
            "roce.exporter.id",
            "roce.observed",
            "roce.job.id",
        ] {
            assert!(!record.contains_key(absent), "{absent} in the record");
        }
        assert_eq!(res["host.name"], Some(A::StringValue("h".into())));
        assert_eq!(
            res["roce.exporter.id"],
            Some(A::StringValue("h/1/2".into()))
        );
        assert_eq!(res["roce.observed"], Some(A::StringValue("eth1".into())));
        assert_eq!(res["roce.schema.version"], Some(A::IntValue(1)));
        assert!(
            !res.contains_key("roce.job.id"),
            "an empty value is left out"
        );
    }

    /// The sidecar's rows, written as they are made (`push_interval`), are the requests of the
    /// rows made first and then pushed (`push`): the same records (but their observed time),
    /// cut into the same requests, with the same aggregates.
    #[tokio::test]
    async fn rows_written_as_made_are_the_rows_made_first() {
        use observer_core::{
            aggregate::Aggregate,
            export::{IntervalRows, Sequencer},
            model::{Flow, FlowMirror, Source},
        };
        use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
        let mut report = Aggregate::new().report(Source::live(vec!["eth1".into()], "auto"), 1.0);
        let mut v6 = Flow::empty(
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
            49153,
            0x12,
        );
        v6.packets = 3;
        v6.dscp = vec![26, 46];
        v6.vlans = vec![100];
        v6.transports = vec!["RC".into()];
        v6.mirror = Some(FlowMirror {
            session: Some(7),
            kind: Some("erspan3".into()),
            truncated: 0,
        });
        report.flows.push(v6);
        for i in 0..4u32 {
            report.flows.push(Flow {
                packets: 7 + u64::from(i),
                bytes: 7000,
                ..Flow::empty(
                    "198.18.0.1".parse().unwrap(),
                    "198.18.0.2".parse().unwrap(),
                    49152,
                    0x11 + i,
                )
            });
        }
        let resource = Resource {
            exporter: "h/1/2".into(),
            host: "h".into(),
            ..Resource::default()
        };
        let rows = IntervalRows::of(&report);
        // Requests of at most two rows: five QP rows and the interval's are three requests.
        let config = Config {
            gzip: false,
            max_rows_per_request: 2,
            ..unreachable()
        };
        let start = Sequencer {
            next_interval: 3,
            ..Sequencer::default()
        };
        let (made, streamed) = (
            Exporter::start(config.clone()).unwrap(),
            Exporter::start(config).unwrap(),
        );
        let (mut seq_made, mut seq_streamed) = (start.clone(), start);
        made.push(
            &resource,
            10,
            20,
            &seq_made.interval(&resource, 10, 20, &rows),
        );
        streamed.push_interval(&resource, &mut seq_streamed, 10, 20, &rows);
        assert_eq!(seq_streamed, seq_made);
        let requests = |e: &Exporter| -> Vec<_> {
            e.shared
                .queue
                .lock()
                .unwrap()
                .iter()
                .map(|b| {
                    let mut logs = ExportLogsServiceRequest::decode(&b.logs[..]).unwrap();
                    for r in &mut logs.resource_logs[0].scope_logs[0].log_records {
                        assert!(r.observed_time_unix_nano > 0);
                        r.observed_time_unix_nano = 0;
                    }
                    (b.rows, logs, b.metrics.clone())
                })
                .collect()
        };
        let want = requests(&made);
        assert_eq!(want.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 2, 2]);
        assert_eq!(requests(&streamed), want);
        // The interval's packets, summed for the aggregates.
        assert_eq!(interval_sums(&rows)[0], 3 + 7 + 8 + 9 + 10);
    }

    /// A record's length takes one, two, three or more bytes: each is written where the
    /// record's room was, and the record decodes as its reference.
    #[test]
    fn a_record_of_any_length_decodes() {
        use observer_core::export::{ChType, ColumnInfo};
        use opentelemetry_proto::tonic::logs::v1::LogRecord;
        static TEXT: ColumnInfo = ColumnInfo {
            name: "text",
            attribute: "roce.text",
            ty: ChType::String,
            help: "",
        };
        for len in [0, 200, 20_000, 3 << 20] {
            let row = EncodedRow {
                table: 5,
                values: vec![(&TEXT, Value::Str("x".repeat(len).into()))],
            };
            let mut out = vec![0xAA];
            write_log_record(&row, 0, &mut out);
            let mut body = &out[2..];
            let n = prost::encoding::decode_varint(&mut body).unwrap() as usize;
            assert_eq!((out[0], out[1], n), (0xAA, 0x12, body.len()), "{len}");
            assert_eq!(LogRecord::decode(body).unwrap(), log_record(&row, 0));
        }
    }

    #[test]
    fn bad_settings_are_refused_before_anything_runs() {
        for (endpoint, headers, ca, what) in [
            ("collector:4317", vec![], None, "http://HOST:PORT"),
            ("ftp://collector", vec![], None, "http://HOST:PORT"),
            (
                "http://collector:4318",
                vec![("bad name".to_string(), "x".to_string())],
                None,
                "header bad name",
            ),
            (
                "https://collector:4318",
                vec![],
                Some(b"not a certificate".to_vec()),
                "no PEM certificate",
            ),
        ] {
            let mut c = Config::new(endpoint, Protocol::Grpc);
            c.headers = headers;
            c.ca_pem = ca;
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(what) && e.contains(endpoint), "{e}");
        }
        assert!(
            Config::new("https://collector:4317", Protocol::Grpc)
                .validate()
                .is_ok()
        );
    }
}
