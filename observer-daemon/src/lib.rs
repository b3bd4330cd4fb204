//! `roce-observer run`: the continuous sidecar. A collector thread owns the attached observer:
//! every interval it drains the kernel maps (batched reads), turns them into cumulative
//! per-interface and per-QP counters (top K plus the rest), ages idle flows out of the kernel
//! table, folds in the pause table (PAUSE / PFC frames per sender) and the host's NIC side (the
//! RDMA devices' counters, the driver statistics and settings of the netdevs behind them), and
//! publishes a [`openmetrics::MetricsView`]; a tokio runtime serves `/metrics` and
//! `/healthz` and turns signals into commands (SIGTERM/SIGINT: detach and exit, SIGHUP: reload
//! the config file). Interfaces that go away and come back are attached again by themselves
//! (netlink link events, and a check every interval). With only RDMA devices or netdevs named
//! (an offload host: XDP on its RDMA netdev sees no RoCE), nothing is attached and the NIC side
//! alone is exported.

mod collector;
pub mod config;
pub mod flowbook;
mod http;
pub mod jobs;
mod logging;
pub mod metrics;
mod netlink;
mod nic;
pub mod openmetrics;
mod pauses;
mod procfs;
mod records;
mod signals;
mod tap;

use std::{
    os::unix::net::UnixStream,
    path::PathBuf,
    sync::{Arc, Mutex, atomic::AtomicU64, mpsc},
};

use tracing::{info, warn};

use collector::{Collector, open_jsonl};
pub use config::{RunConfig, RunOverrides};
use http::Health;
pub use logging::LOG_ENV;
use logging::init_logging;
pub use procfs::{cpu_seconds, resident_bytes};
pub use records::hold_memory;
use signals::{Command, Signals};

use roce_observer::source::{
    capture::CaptureError,
    live::{self, LiveConfig, LiveError, Observer},
};
use tap::{CaptureTap, Tap};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Live(#[from] LiveError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Nic(#[from] roce_observer::source::nic::NicError),
    #[error("cannot listen on {addr}")]
    Bind {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the JSON-lines file {path}")]
    Jsonl {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set up logging")]
    Logging(#[source] tracing::subscriber::SetGlobalDefaultError),
    /// The runtime, the signal handlers, the listener, the collector thread and its wake-up
    /// socket.
    #[error("cannot start the daemon")]
    Runtime(#[source] std::io::Error),
    #[error("cannot start the daemon: the collector thread panicked: {0}")]
    CollectorPanicked(String),
    #[error("cannot start the daemon: the collector thread vanished")]
    CollectorVanished,
    #[error("cannot start the fleet records' export: {0}")]
    Export(String),
}

/// Runs until SIGTERM or SIGINT.
pub fn run(args: RunOverrides) -> Result<(), DaemonError> {
    let config = RunConfig::load(&args)?;
    let log = init_logging(config.log_level.as_deref())?;
    // Signal handlers first: a SIGTERM during start-up must detach, not kill.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(DaemonError::Runtime)?;
    let signals = {
        let _in_runtime = runtime.enter();
        Signals::register()?
    };
    let mut live = LiveConfig::new(config.ifaces.clone());
    live.xdp_mode = config.xdp_mode;
    live.vantage = config.vantage;
    live.max_flows = config.max_flows;
    live.tc_hook = config.tc_hook;
    live.spread = config.spread.clone();
    // No microburst slots: an add per frame and a clock ticking at the slot width, too much to
    // leave running.
    live.burst_slot_ns = 0;
    let listener =
        std::net::TcpListener::bind(config.listen).map_err(|source| DaemonError::Bind {
            addr: config.listen,
            source,
        })?;
    listener
        .set_nonblocking(true)
        .map_err(DaemonError::Runtime)?;
    let jsonl = config.jsonl.as_deref().map(open_jsonl).transpose()?;
    // Before attaching: a named RDMA device the host lacks is a wrong name; the export's CA
    // file must read.
    nic::check_named(&config)?;
    let otlp = config.otlp.as_ref().map(|o| o.exporter()).transpose()?;
    // Counting starts with the attach: the first interval runs from here.
    let attached = (std::time::Instant::now(), live::unix_ns());
    let tap = match &config.capture {
        Some(c) => Tap::Capture(CaptureTap::open(c.clone(), config.jobs)?),
        None if config.nic_only() => Tap::Nothing,
        None => Tap::Kernel(Observer::attach(live)?),
    };
    if let Tap::Kernel(o) = &tap {
        for w in o.warnings() {
            tracing::warn!("{w}");
        }
    }
    let records = match otlp {
        Some(otlp) => Some(records::Records::start(
            otlp,
            tap.resource(&config),
            tap.source(&config),
            matches!(tap, Tap::Kernel(_)),
        )?),
        None => None,
    };
    let publisher = openmetrics::Publisher::default();
    let exposition = publisher.exposition();
    let health = Arc::new(Health {
        last_drain_ns: AtomicU64::new(live::monotonic_ns()),
        interval_ns: AtomicU64::new(config.interval.as_nanos() as u64),
    });
    if !config.listen.ip().is_loopback() {
        warn!(
            listen = %config.listen,
            "the metrics endpoint is reachable from the network and unauthenticated"
        );
    }
    match (&config.capture, tap.capture()) {
        _ if tap.is_nothing() => info!(
            rdma_devices = ?config.rdma_devices,
            all_rdma_devices = config.all_rdma_devices,
            netdevs = ?config.netdevs,
            interval = ?config.interval,
            listen = %config.listen,
            "the NIC side alone, nothing attached; serving /metrics and /healthz"
        ),
        (Some(c), Some(t)) => info!(
            capture = %c.device,
            promiscuous = c.promiscuous,
            filter = t.filter().unwrap_or("(none: every frame)"),
            interval = ?config.interval,
            listen = %config.listen,
            max_series = config.max_series,
            "capturing; serving /metrics and /healthz"
        ),
        _ => info!(
            interfaces = ?config.ifaces,
            mode = tap.mode(),
            interval = ?config.interval,
            listen = %config.listen,
            max_series = config.max_series,
            max_flows = config.max_flows,
            "attached; serving /metrics and /healthz"
        ),
    }
    let (tx, rx) = mpsc::channel();
    let (wake_tx, wake_rx) = UnixStream::pair().map_err(DaemonError::Runtime)?;
    wake_rx
        .set_nonblocking(true)
        .map_err(DaemonError::Runtime)?;
    let mut collector = Collector::new(
        tap,
        attached,
        config,
        args,
        jsonl,
        records,
        publisher,
        health.clone(),
        log,
    );
    collector.drain()?;
    let worker = std::thread::Builder::new()
        .name("collector".into())
        .spawn(move || collector.run(rx, wake_rx))
        .map_err(DaemonError::Runtime)?;
    runtime.block_on(serve(
        listener, exposition, health, signals, tx, wake_tx, worker,
    ))
}

/// Serves HTTP and forwards signals until the collector ends; its result.
async fn serve(
    listener: std::net::TcpListener,
    exposition: Arc<Mutex<Arc<openmetrics::Exposition>>>,
    health: Arc<Health>,
    signals: Signals,
    tx: mpsc::Sender<Command>,
    wake: UnixStream,
    worker: std::thread::JoinHandle<Result<(), DaemonError>>,
) -> Result<(), DaemonError> {
    let server = http::Server::start(listener, exposition, health)?;
    let result = signals.forward(tx, wake, worker).await;
    server.stop().await;
    result
}
