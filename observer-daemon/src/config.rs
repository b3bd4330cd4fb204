//! `roce-observer run` settings: command-line flags over an optional TOML file (`--config`,
//! read again on SIGHUP), validated into a [`RunConfig`].

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::Deserialize;

use roce_observer::{
    source::{
        capture::CaptureConfig,
        live::{AttachMode, Mode, Spread, TcHook, Vantage},
    },
    units::Named,
};

/// Default address of the metrics endpoint: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9477";
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);
pub const DEFAULT_MAX_SERIES: usize = 100;
pub const MAX_MAX_SERIES: usize = 10_000;
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The daemon's default flow table (as `diagnose`'s). The kernel allocates it in full at start,
/// per possible CPU: max_flows x (112 + 216 x CPUs) bytes, 454 MB at 16384 on 128 CPUs.
pub const DEFAULT_RUN_MAX_FLOWS: u32 = observer_common::DEFAULT_MAX_FLOWS;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("config file {path}: {detail}")]
    Parse { path: PathBuf, detail: String },
    #[error("{what}: {detail}")]
    Invalid { what: String, detail: String },
}

/// What the command line says for `roce-observer run`; each set field overrides the config file's
/// key of the same name.
#[derive(Debug, Clone, Default)]
pub struct RunOverrides {
    /// Interface to observe (repeat for several; replaces the config file's list).
    pub iface: Vec<String>,
    /// TOML file with the same keys as these flags (snake_case); read again on SIGHUP.
    pub config: Option<PathBuf>,
    /// host (default) or mirror (a SPAN/ERSPAN destination port).
    pub mode: Option<Mode>,
    /// Mirror mode only: drop the copies after accounting.
    pub consume: bool,
    /// Mirror mode only: the CPUs that account the copies (default: the interfaces' queues').
    pub cpus: Option<Spread>,
    /// How often the kernel maps are drained into the metrics (default 10s, at least 100ms).
    pub interval: Option<Duration>,
    /// Address of the metrics endpoint (default 127.0.0.1:9477: loopback only; any other
    /// address exposes unauthenticated metrics to the network).
    pub listen: Option<SocketAddr>,
    /// Queue pairs exported as their own series (the top K by recent bytes); all others are
    /// summed in one `qp="rest"` series (default 100; 0: only the rest).
    pub max_series: Option<usize>,
    /// Append one JSON line per interval (deltas) to FILE (re-opened on SIGHUP).
    pub jsonl: Option<PathBuf>,
    /// error, warn, info (default), debug or trace; or a tracing filter. Without it the
    /// ROCE_OBSERVER_LOG environment variable is used.
    pub log_level: Option<String>,
    /// Flows unchanged this long are deleted from the kernel table (default 5m).
    pub idle_timeout: Option<Duration>,
    /// Capacity of the kernel flow table (LRU; default 16384). The kernel allocates it in full,
    /// per possible CPU: max_flows x (112 + 216 x CPUs) bytes.
    pub max_flows: Option<u32>,
    pub xdp_mode: Option<AttachMode>,
    /// Host mode: the TC egress hook (auto, tcx, clsact).
    pub tc_hook: Option<TcHook>,
    /// Capture this device through libpcap instead of attaching XDP to interfaces (an RDMA
    /// device's offloaded-traffic sniffer, or a network interface); replaces the config file's
    /// `iface`, as `iface` replaces its `capture`.
    pub capture: Option<String>,
    /// With `capture`: the capture filter (a libpcap expression; empty: every frame).
    pub capture_filter: Option<String>,
    /// With `capture`: leave the device out of promiscuous mode.
    pub no_promiscuous: bool,
    /// RDMA devices whose NIC side is exported besides those behind the observed interfaces
    /// or the captured device (replaces the config file's `rdma_devices` when not empty).
    pub rdma_devices: Vec<String>,
    /// Netdevs whose driver statistics and settings are exported (nothing is attached to
    /// them); replaces the config file's `netdevs` when not empty.
    pub netdevs: Vec<String>,
    /// Every RDMA device the host has (now and later) is exported.
    pub all_rdma_devices: bool,
    /// The fleet records' OTLP export.
    pub otlp: OtlpOverrides,
    /// With `capture`: training jobs per window, exported as metrics (docs/jobs.md).
    pub jobs: bool,
    /// The jobs' bins (default 1ms, 10us to 1s).
    pub jobs_bin: Option<Duration>,
    /// The span each jobs analysis covers (default 60s; at least 1s and the interval, at most
    /// 100,000 bins).
    pub jobs_window: Option<Duration>,
}

/// The command line's OTLP settings; each set one overrides the config file's `[otlp]` key.
#[derive(Debug, Clone, Default)]
pub struct OtlpOverrides {
    /// Send every interval's fleet records (docs/export.md) over OTLP to this URL.
    pub endpoint: Option<String>,
    pub protocol: Option<observer_otlp::Protocol>,
    pub gzip: Option<bool>,
    /// Replaces the config file's `headers` when not empty.
    pub headers: Vec<(String, String)>,
    /// PEM certificates to trust for an https:// endpoint.
    pub ca: Option<PathBuf>,
    /// A request's time limit; also how long the last records may take at shutdown.
    pub timeout: Option<Duration>,
    /// The send buffer's cap, MiB of encoded records (the oldest dropped beyond it).
    pub buffer_mib: Option<u64>,
}

/// The config file's `[otlp]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileOtlp {
    endpoint: Option<String>,
    /// `grpc` or `http-protobuf`.
    protocol: Option<String>,
    /// `gzip` or `none`.
    compression: Option<String>,
    headers: Option<std::collections::BTreeMap<String, String>>,
    ca: Option<PathBuf>,
    timeout: Option<String>,
    buffer_mib: Option<u64>,
}

/// The OTLP export's settings, validated (the URL, the headers, the CA file's certificates).
#[derive(Clone, Debug, PartialEq)]
pub struct OtlpSettings {
    pub endpoint: String,
    pub protocol: observer_otlp::Protocol,
    pub gzip: bool,
    pub headers: Vec<(String, String)>,
    pub ca: Option<PathBuf>,
    pub timeout: Duration,
    pub buffer_bytes: usize,
}

/// The send buffer's default cap.
pub const DEFAULT_OTLP_BUFFER_MIB: u64 = 64;
pub const DEFAULT_OTLP_TIMEOUT: Duration = Duration::from_secs(10);

impl OtlpSettings {
    /// The exporter's settings but the CA file.
    fn config(&self) -> observer_otlp::Config {
        let mut c = observer_otlp::Config::new(self.endpoint.clone(), self.protocol);
        c.gzip = self.gzip;
        c.headers = self.headers.clone();
        c.timeout = self.timeout;
        c.buffer_bytes = self.buffer_bytes;
        c
    }

    /// The exporter's settings, the CA file read and checked.
    pub fn exporter(&self) -> Result<observer_otlp::Config, ConfigError> {
        let mut c = self.config();
        if let Some(p) = &self.ca {
            c.ca_pem = Some(std::fs::read(p).map_err(|error| ConfigError::Read {
                path: p.clone(),
                error,
            })?);
        }
        c.validate()
            .map_err(|e| invalid("OTLP export", e.to_string()))?;
        Ok(c)
    }
}

/// The config file: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    iface: Option<Vec<String>>,
    mode: Option<Mode>,
    consume: Option<bool>,
    /// A CPU list (`0-3,8`) or `queues`.
    cpus: Option<String>,
    interval: Option<String>,
    listen: Option<String>,
    max_series: Option<usize>,
    jsonl: Option<PathBuf>,
    log_level: Option<String>,
    idle_timeout: Option<String>,
    max_flows: Option<u32>,
    xdp_mode: Option<String>,
    tc_hook: Option<String>,
    capture: Option<String>,
    capture_filter: Option<String>,
    promiscuous: Option<bool>,
    rdma_devices: Option<Vec<String>>,
    netdevs: Option<Vec<String>>,
    all_rdma_devices: Option<bool>,
    /// For tests and replays: read the NIC side from a copied tree (docs/nic.md) instead of
    /// this host. No flag: not for production.
    nic_root: Option<PathBuf>,
    otlp: Option<FileOtlp>,
    jobs: Option<bool>,
    jobs_bin: Option<String>,
    jobs_window: Option<String>,
}

/// Validated settings.
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    pub ifaces: Vec<String>,
    pub vantage: Vantage,
    pub interval: Duration,
    pub listen: SocketAddr,
    pub max_series: usize,
    pub jsonl: Option<PathBuf>,
    pub log_level: Option<String>,
    pub idle_timeout: Duration,
    pub max_flows: u32,
    pub xdp_mode: AttachMode,
    pub tc_hook: TcHook,
    /// Mirror mode: the CPUs that account the copies.
    pub spread: Spread,
    /// A device captured through libpcap instead of interfaces (`ifaces` is then empty, and
    /// the XDP settings unused).
    pub capture: Option<CaptureConfig>,
    /// RDMA devices named (`--rdma-dev`, `rdma_devices`): their NIC side is exported besides
    /// that of the devices behind the observed interfaces or the captured device.
    pub rdma_devices: Vec<String>,
    /// Netdevs named (`--netdev`, `netdevs`): their driver statistics and settings are
    /// exported, nothing is attached to them.
    pub netdevs: Vec<String>,
    /// Every RDMA device the host has (`--all-rdma-devs`, `all_rdma_devices`), as it comes
    /// and goes: one DaemonSet for hosts whose devices are named differently.
    pub all_rdma_devices: bool,
    /// A copied tree to read the NIC side from instead of this host (tests and replays).
    pub nic_root: Option<PathBuf>,
    /// The fleet records' OTLP export, if on.
    pub otlp: Option<OtlpSettings>,
    /// Training jobs per window (with a capture), if on.
    pub jobs: Option<JobsSettings>,
}

/// The sidecar's jobs analysis: bins of `bin`, over windows of `window` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobsSettings {
    pub bin: Duration,
    pub window: Duration,
}

pub const DEFAULT_JOBS_BIN: Duration = Duration::from_millis(1);
pub const DEFAULT_JOBS_WINDOW: Duration = Duration::from_secs(60);

fn invalid(what: impl Into<String>, detail: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        what: what.into(),
        detail: detail.into(),
    }
}

/// An RDMA device name as the kernel allows it (IB_DEVICE_NAME_MAX - 1 bytes): it becomes a
/// path component under `/sys/class/infiniband`.
pub fn is_device_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 64
        && !name.contains(['/', '\0'])
        && name != "."
        && name != ".."
}

fn value_enum<T: Named>(path: &Path, key: &str, v: &str) -> Result<T, ConfigError> {
    T::parse(v).ok_or_else(|| ConfigError::Parse {
        path: path.to_path_buf(),
        detail: format!("{key} = '{v}': expected one of {}", T::names()),
    })
}

impl RunConfig {
    /// The flags over the config file (read now).
    pub fn load(args: &RunOverrides) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
                    path: path.clone(),
                    error,
                })?;
                let file: FileConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
                    path: path.clone(),
                    // The message only: the source snippet would span lines.
                    detail: e.message().to_string(),
                })?;
                Some((path.as_path(), file))
            }
            None => None,
        };
        Self::merge(args, file)
    }

    fn merge(args: &RunOverrides, file: Option<(&Path, FileConfig)>) -> Result<Self, ConfigError> {
        let (path, f) = match file {
            Some((p, f)) => (p.to_path_buf(), f),
            None => (PathBuf::from("(none)"), FileConfig::default()),
        };
        let parse_err = |detail: String| ConfigError::Parse {
            path: path.clone(),
            detail,
        };
        // Where to observe: the command line's choice over the file's; in the file, one of
        // the two.
        let (ifaces, capture) = match (args.iface.is_empty(), &args.capture) {
            (false, _) => (args.iface.clone(), None),
            (true, Some(dev)) => (Vec::new(), Some(dev.clone())),
            (true, None) => match (f.iface.clone().unwrap_or_default(), f.capture.clone()) {
                (i, Some(_)) if !i.is_empty() => {
                    return Err(parse_err(
                        "iface and capture: give one of them (XDP on interfaces, or a libpcap capture)"
                            .to_string(),
                    ));
                }
                (i, c) => (i, c),
            },
        };
        // The NIC side alone (an offload host, whose RDMA netdev XDP sees no RoCE on): named
        // devices or netdevs, nothing attached.
        let rdma_devices = if args.rdma_devices.is_empty() {
            f.rdma_devices.clone().unwrap_or_default()
        } else {
            args.rdma_devices.clone()
        };
        let netdevs = if args.netdevs.is_empty() {
            f.netdevs.clone().unwrap_or_default()
        } else {
            args.netdevs.clone()
        };
        let all_rdma_devices = args.all_rdma_devices || f.all_rdma_devices.unwrap_or(false);
        let nic_only = ifaces.is_empty() && capture.is_none();
        if nic_only && rdma_devices.is_empty() && netdevs.is_empty() && !all_rdma_devices {
            return Err(invalid(
                "nothing to observe",
                "give --iface IF (repeatable) or iface = [\"IF\"] in the config file, --capture DEV, or for the NIC side alone (nothing attached) --rdma-dev DEV, --all-rdma-devs or --netdev IF",
            ));
        }
        let capture_filter = args.capture_filter.clone().or(f.capture_filter);
        let promiscuous = !args.no_promiscuous && f.promiscuous.unwrap_or(true);
        // Settings of the kernel programs, meaningless for a capture or the NIC side alone.
        if capture.is_some() || nic_only {
            let xdp_only = [
                ("mode", args.mode.is_some() || f.mode.is_some()),
                ("consume", args.consume || f.consume.is_some()),
                ("cpus", args.cpus.is_some() || f.cpus.is_some()),
                ("xdp_mode", args.xdp_mode.is_some() || f.xdp_mode.is_some()),
                ("tc_hook", args.tc_hook.is_some() || f.tc_hook.is_some()),
                (
                    "max_flows",
                    args.max_flows.is_some() || f.max_flows.is_some(),
                ),
            ];
            if let Some((key, _)) = xdp_only.iter().find(|(_, set)| *set) {
                let (with, why) = if nic_only {
                    (
                        "without iface",
                        "it sets up XDP on interfaces; the NIC side alone attaches nothing",
                    )
                } else {
                    (
                        "with capture",
                        "it sets up XDP on interfaces; a libpcap capture has no such setting",
                    )
                };
                return Err(invalid(format!("{key} {with}"), why));
            }
        }
        let capture = match capture {
            Some(dev) => {
                let mut c = CaptureConfig::new(dev);
                c.promiscuous = promiscuous;
                if let Some(filter) = capture_filter {
                    c.filter = (!filter.trim().is_empty()).then_some(filter);
                }
                Some(c)
            }
            None => {
                if capture_filter.is_some() || !promiscuous {
                    return Err(invalid(
                        "capture_filter and promiscuous",
                        "only with capture (a libpcap capture; XDP interfaces take --mode)",
                    ));
                }
                None
            }
        };
        for (i, iface) in ifaces.iter().enumerate() {
            if ifaces[..i].contains(iface) {
                return Err(invalid(
                    format!("interface '{iface}'"),
                    "given twice".to_string(),
                ));
            }
        }
        let mode = args.mode.or(f.mode).unwrap_or_default();
        let consume = args.consume || f.consume.unwrap_or(false);
        let vantage =
            Vantage::of(mode, consume).ok_or_else(|| invalid("consume", "only in mirror mode"))?;
        let spread = match (&args.cpus, &f.cpus) {
            (Some(s), _) => Some(s.clone()),
            (None, Some(s)) => Some(Spread::parse(s).map_err(|e| parse_err(format!("cpus: {e}")))?),
            (None, None) => None,
        };
        if spread.is_some() && vantage == Vantage::Host {
            return Err(invalid(
                "cpus",
                "only in mirror mode (host mode accounts every frame where it is received)",
            ));
        }
        let spread = spread.unwrap_or_default();
        let duration = |key: &str, v: &Option<String>| -> Result<Option<Duration>, ConfigError> {
            v.as_deref()
                .map(|s| {
                    roce_observer::units::parse_duration(s)
                        .map_err(|e| parse_err(format!("{key}: {e}")))
                })
                .transpose()
        };
        let interval = match args.interval {
            Some(d) => d,
            None => duration("interval", &f.interval)?.unwrap_or(DEFAULT_INTERVAL),
        };
        if interval < MIN_INTERVAL {
            return Err(invalid(
                "interval",
                format!("{interval:?} is below the minimum of 100ms"),
            ));
        }
        let idle_timeout = match args.idle_timeout {
            Some(d) => d,
            None => duration("idle_timeout", &f.idle_timeout)?.unwrap_or(DEFAULT_IDLE_TIMEOUT),
        };
        if idle_timeout < interval {
            return Err(invalid(
                "idle timeout",
                format!("{idle_timeout:?} is shorter than the interval ({interval:?})"),
            ));
        }
        let listen = match (args.listen, &f.listen) {
            (Some(a), _) => a,
            (None, Some(s)) => s
                .parse()
                .map_err(|_| parse_err(format!("listen = '{s}' is not ADDR:PORT")))?,
            (None, None) => DEFAULT_LISTEN.parse().expect("a valid address"),
        };
        let max_series = args
            .max_series
            .or(f.max_series)
            .unwrap_or(DEFAULT_MAX_SERIES);
        if max_series > MAX_MAX_SERIES {
            return Err(invalid(
                "max series",
                format!("{max_series} is above {MAX_MAX_SERIES}"),
            ));
        }
        let max_flows = args
            .max_flows
            .or(f.max_flows)
            .unwrap_or(DEFAULT_RUN_MAX_FLOWS);
        let xdp_mode = match (args.xdp_mode, &f.xdp_mode) {
            (Some(m), _) => m,
            (None, Some(s)) => value_enum(&path, "xdp_mode", s)?,
            (None, None) => AttachMode::Auto,
        };
        let tc_hook = match (args.tc_hook, &f.tc_hook) {
            (Some(h), _) => h,
            (None, Some(s)) => value_enum(&path, "tc_hook", s)?,
            (None, None) => TcHook::Auto,
        };
        let log_level = args.log_level.clone().or(f.log_level);
        if let Some(level) = &log_level {
            tracing_subscriber::EnvFilter::try_new(level)
                .map_err(|e| invalid(format!("log level '{level}'"), e.to_string()))?;
        }
        for (i, dev) in rdma_devices.iter().enumerate() {
            if !is_device_name(dev) {
                return Err(invalid(
                    format!("RDMA device '{dev}'"),
                    "not a device name (1 to 63 bytes, no '/', not '.' or '..')",
                ));
            }
            if rdma_devices[..i].contains(dev) {
                return Err(invalid(format!("RDMA device '{dev}'"), "given twice"));
            }
        }
        for (i, dev) in netdevs.iter().enumerate() {
            if roce_observer::source::nic::check_interface(dev).is_err() {
                return Err(invalid(
                    format!("netdev '{dev}'"),
                    "not an interface name (1 to 15 bytes, no '/', not '.' or '..')",
                ));
            }
            if netdevs[..i].contains(dev) {
                return Err(invalid(format!("netdev '{dev}'"), "given twice"));
            }
        }
        let nic_root = f.nic_root;
        if let Some(root) = &nic_root
            && !root.is_dir()
        {
            return Err(parse_err(format!(
                "nic_root = '{}': not a directory",
                root.display()
            )));
        }
        let otlp = Self::otlp(&args.otlp, f.otlp, &path)?;
        let jobs = if args.jobs || f.jobs.unwrap_or(false) {
            if capture.is_none() {
                return Err(invalid(
                    "jobs",
                    "needs capture (a libpcap capture times every frame; the XDP observer counts per flow, not per frame)",
                ));
            }
            let bin = match args.jobs_bin {
                Some(d) => d,
                None => duration("jobs_bin", &f.jobs_bin)?.unwrap_or(DEFAULT_JOBS_BIN),
            };
            if bin < Duration::from_micros(10) || bin > Duration::from_secs(1) {
                return Err(invalid(
                    "jobs bin",
                    format!("{bin:?} is not between 10us and 1s"),
                ));
            }
            let window = match args.jobs_window {
                Some(d) => d,
                None => duration("jobs_window", &f.jobs_window)?.unwrap_or(DEFAULT_JOBS_WINDOW),
            };
            // A window ends at the first drain after it: up to an interval more.
            let bins = (window + interval).as_nanos() / bin.as_nanos();
            if window < Duration::from_secs(1).max(interval) || bins > 100_000 {
                return Err(invalid(
                    "jobs window",
                    format!(
                        "{window:?} is not between 1s (and the interval, {interval:?}) and 100,000 bins of {bin:?} less an interval"
                    ),
                ));
            }
            Some(JobsSettings { bin, window })
        } else {
            if args.jobs_bin.is_some()
                || args.jobs_window.is_some()
                || f.jobs_bin.is_some()
                || f.jobs_window.is_some()
            {
                return Err(invalid("jobs_bin and jobs_window", "only with jobs"));
            }
            None
        };
        let jsonl = args.jsonl.clone().or(f.jsonl);
        if let (Some(j), Some(config)) = (&jsonl, &args.config)
            && roce_observer::units::same_file(j, config)
        {
            return Err(invalid(
                format!("jsonl {}", j.display()),
                "is the config file: refusing to write over it",
            ));
        }
        Ok(Self {
            ifaces,
            vantage,
            interval,
            listen,
            max_series,
            jsonl,
            log_level,
            idle_timeout,
            max_flows,
            xdp_mode,
            tc_hook,
            spread,
            capture,
            rdma_devices,
            netdevs,
            all_rdma_devices,
            nic_root,
            otlp,
            jobs,
        })
    }

    /// The OTLP settings: the flags over the file's `[otlp]`; none without an endpoint.
    fn otlp(
        args: &OtlpOverrides,
        f: Option<FileOtlp>,
        path: &Path,
    ) -> Result<Option<OtlpSettings>, ConfigError> {
        let f = f.unwrap_or_default();
        let parse_err = |detail: String| ConfigError::Parse {
            path: path.to_path_buf(),
            detail,
        };
        let Some(endpoint) = args.endpoint.clone().or(f.endpoint) else {
            let set = args.protocol.is_some()
                || args.gzip.is_some()
                || !args.headers.is_empty()
                || args.ca.is_some()
                || args.timeout.is_some()
                || args.buffer_mib.is_some()
                || f.protocol.is_some()
                || f.compression.is_some()
                || f.headers.is_some()
                || f.ca.is_some()
                || f.timeout.is_some()
                || f.buffer_mib.is_some();
            if set {
                return Err(invalid(
                    "OTLP settings",
                    "given without an endpoint (--otlp-endpoint URL, or endpoint in [otlp])",
                ));
            }
            return Ok(None);
        };
        let protocol = match (args.protocol, f.protocol.as_deref()) {
            (Some(p), _) => p,
            (None, None | Some("grpc")) => observer_otlp::Protocol::Grpc,
            (None, Some("http-protobuf")) => observer_otlp::Protocol::HttpProtobuf,
            (None, Some(p)) => {
                return Err(parse_err(format!(
                    "otlp.protocol = '{p}': expected grpc or http-protobuf"
                )));
            }
        };
        let gzip = match (args.gzip, f.compression.as_deref()) {
            (Some(g), _) => g,
            (None, None | Some("gzip")) => true,
            (None, Some("none")) => false,
            (None, Some(c)) => {
                return Err(parse_err(format!(
                    "otlp.compression = '{c}': expected gzip or none"
                )));
            }
        };
        let headers = if args.headers.is_empty() {
            f.headers.unwrap_or_default().into_iter().collect()
        } else {
            args.headers.clone()
        };
        let timeout = match (args.timeout, &f.timeout) {
            (Some(t), _) => t,
            (None, Some(s)) => roce_observer::units::parse_duration(s)
                .map_err(|e| parse_err(format!("otlp.timeout: {e}")))?,
            (None, None) => DEFAULT_OTLP_TIMEOUT,
        };
        if timeout.is_zero() {
            return Err(invalid("OTLP timeout", "must be above 0"));
        }
        let buffer_mib = args
            .buffer_mib
            .or(f.buffer_mib)
            .unwrap_or(DEFAULT_OTLP_BUFFER_MIB);
        if !(1..=65536).contains(&buffer_mib) {
            return Err(invalid(
                "OTLP buffer",
                format!("{buffer_mib} MiB: give 1 to 65536"),
            ));
        }
        let settings = OtlpSettings {
            endpoint,
            protocol,
            gzip,
            headers,
            ca: args.ca.clone().or(f.ca),
            timeout,
            buffer_bytes: (buffer_mib << 20) as usize,
        };
        // The URL and the headers checked now; the CA file is read (and checked) when the
        // export starts, at start only: a reload neither changes the export nor needs the file.
        observer_otlp::Config {
            ca_pem: None,
            ..settings.config()
        }
        .validate()
        .map_err(|e| invalid("OTLP export", e.to_string()))?;
        Ok(Some(settings))
    }

    /// Nothing attached and nothing captured: the NIC side alone.
    pub fn nic_only(&self) -> bool {
        self.ifaces.is_empty() && self.capture.is_none()
    }

    /// Drains a flow may stay unchanged before it is deleted.
    pub fn idle_drains(&self) -> u32 {
        (self.idle_timeout.as_secs_f64() / self.interval.as_secs_f64()).ceil() as u32
    }

    /// Settings a reload cannot change (they are fixed when the kernel object is loaded or
    /// the listener bound): the names of those that differ.
    pub fn fixed_changes(&self, new: &RunConfig) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.listen != new.listen {
            v.push("listen");
        }
        if self.vantage != new.vantage {
            v.push("mode/consume");
        }
        if self.spread != new.spread {
            v.push("cpus");
        }
        if self.max_flows != new.max_flows {
            v.push("max_flows");
        }
        if self.xdp_mode != new.xdp_mode {
            v.push("xdp_mode");
        }
        if self.tc_hook != new.tc_hook {
            v.push("tc_hook");
        }
        if self.capture != new.capture {
            v.push("capture");
        }
        if self.nic_only() != new.nic_only() {
            v.push("iface (the NIC side alone, or interfaces attached)");
        }
        if self.otlp != new.otlp {
            v.push("otlp");
        }
        if self.jobs != new.jobs {
            v.push("jobs");
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> FileConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn flags_override_the_file() {
        let args = RunOverrides {
            interval: Some(Duration::from_secs(2)),
            ..RunOverrides::default()
        };
        let f = file(
            "iface = [\"eth0\", \"eth1\"]\ninterval = \"30s\"\nmax_series = 7\nlisten = \"0.0.0.0:9000\"\nmode = \"mirror\"\nconsume = true\ncpus = \"0-1,3\"\n",
        );
        let c = RunConfig::merge(&args, Some((Path::new("c.toml"), f))).unwrap();
        assert_eq!(c.spread, Spread::Cpus(vec![0, 1, 3]));
        assert_eq!(c.ifaces, ["eth0", "eth1"]);
        assert_eq!(c.interval, Duration::from_secs(2));
        assert_eq!(c.max_series, 7);
        assert_eq!(c.listen.to_string(), "0.0.0.0:9000");
        assert_eq!(c.vantage, Vantage::Mirror { consume: true });
        assert_eq!(c.idle_drains(), 150);
    }

    #[test]
    fn the_json_lines_never_go_into_the_config_file() {
        let dir = std::env::temp_dir().join(format!("roce-config-jsonl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("run.toml");
        std::fs::write(&config, format!("iface = [\"lo\"]\njsonl = {:?}\n", config)).unwrap();
        let e = RunConfig::load(&RunOverrides {
            config: Some(config.clone()),
            ..RunOverrides::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("is the config file"), "{e}");
        let other = RunConfig::load(&RunOverrides {
            config: Some(config.clone()),
            jsonl: Some(dir.join("lines.jsonl")),
            ..RunOverrides::default()
        });
        assert!(other.is_ok(), "{other:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_otlp_table_and_its_flags() {
        let f = || {
            file(
                "iface = [\"eth0\"]\n[otlp]\nendpoint = \"https://collector:4318\"\nprotocol = \"http-protobuf\"\ncompression = \"none\"\nheaders = { authorization = \"Bearer t\", x-tenant = \"a\" }\ntimeout = \"3s\"\nbuffer_mib = 8\n",
            )
        };
        let c = RunConfig::merge(&RunOverrides::default(), Some((Path::new("c.toml"), f())))
            .unwrap()
            .otlp
            .unwrap();
        assert_eq!(c.endpoint, "https://collector:4318");
        assert_eq!(c.protocol, observer_otlp::Protocol::HttpProtobuf);
        assert!(!c.gzip);
        assert_eq!(
            c.headers,
            [
                ("authorization".to_string(), "Bearer t".to_string()),
                ("x-tenant".to_string(), "a".to_string())
            ]
        );
        assert_eq!(
            (c.timeout, c.buffer_bytes),
            (Duration::from_secs(3), 8 << 20)
        );
        // Flags over the file's keys.
        let args = RunOverrides {
            otlp: OtlpOverrides {
                endpoint: Some("http://other:4317".into()),
                protocol: Some(observer_otlp::Protocol::Grpc),
                gzip: Some(true),
                headers: vec![("k".into(), "v".into())],
                buffer_mib: Some(2),
                ..OtlpOverrides::default()
            },
            ..RunOverrides::default()
        };
        let c = RunConfig::merge(&args, Some((Path::new("c.toml"), f())))
            .unwrap()
            .otlp
            .unwrap();
        assert_eq!(c.endpoint, "http://other:4317");
        assert_eq!(c.protocol, observer_otlp::Protocol::Grpc);
        assert!(c.gzip);
        assert_eq!(c.headers, [("k".to_string(), "v".to_string())]);
        assert_eq!(
            (c.timeout, c.buffer_bytes),
            (Duration::from_secs(3), 2 << 20)
        );
        // Off without an endpoint.
        let plain = file("iface = [\"eth0\"]\n");
        let c = RunConfig::merge(&RunOverrides::default(), Some((Path::new("c.toml"), plain)));
        assert_eq!(c.unwrap().otlp, None);
    }

    #[test]
    fn bad_otlp_settings_are_refused_naming_them() {
        let bad = [
            ("[otlp]\nprotocol = \"grpc\"\n", "without an endpoint"),
            ("[otlp]\nendpoint = \"ftp://x\"\n", "OTLP"),
            (
                "[otlp]\nendpoint = \"http://x:1\"\nprotocol = \"udp\"\n",
                "otlp.protocol",
            ),
            (
                "[otlp]\nendpoint = \"http://x:1\"\ncompression = \"zstd\"\n",
                "otlp.compression",
            ),
            (
                "[otlp]\nendpoint = \"http://x:1\"\nbuffer_mib = 0\n",
                "OTLP buffer",
            ),
            (
                "[otlp]\nendpoint = \"http://x:1\"\ntimeout = \"0s\"\n",
                "otlp.timeout",
            ),
        ];
        for (text, said) in bad {
            let f = file(&format!("iface = [\"eth0\"]\n{text}"));
            let e = RunConfig::merge(&RunOverrides::default(), Some((Path::new("c.toml"), f)))
                .unwrap_err()
                .to_string();
            assert!(e.contains(said), "{text}: {e}");
        }
        assert!(toml::from_str::<FileConfig>("[otlp]\nendpont = \"x\"\n").is_err());
        // The CA file is read when the export starts (not at a reload): a missing one is an
        // error then, naming it.
        let f = file(
            "iface = [\"eth0\"]\n[otlp]\nendpoint = \"https://x:1\"\nca = \"/nonexistent/ca.pem\"\n",
        );
        let c = RunConfig::merge(&RunOverrides::default(), Some((Path::new("c.toml"), f)));
        let e = c.unwrap().otlp.unwrap().exporter().unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }

    #[test]
    fn defaults_listen_on_loopback() {
        let args = RunOverrides {
            iface: vec!["eth0".into()],
            ..RunOverrides::default()
        };
        let c = RunConfig::merge(&args, None).unwrap();
        assert!(c.listen.ip().is_loopback());
        assert_eq!(c.interval, DEFAULT_INTERVAL);
        assert_eq!(c.max_series, DEFAULT_MAX_SERIES);
    }

    #[test]
    fn bad_values_are_one_line_errors() {
        let args = RunOverrides::default();
        for (text, want) in [
            ("", "nothing to observe"),
            ("iface = [\"a\"]\ninterval = \"5\u{3bc}s\"", "interval"),
            ("iface = [\"a\"]\ninterval = \"10ms\"", "below the minimum"),
            ("iface = [\"a\"]\nlisten = \"localhost\"", "ADDR:PORT"),
            ("iface = [\"a\"]\nxdp_mode = \"fast\"", "expected one of"),
            ("iface = [\"a\", \"a\"]", "given twice"),
            (
                "iface = [\"a\"]\nidle_timeout = \"1s\"",
                "shorter than the interval",
            ),
            ("iface = [\"a\"]\nconsume = true", "only in mirror mode"),
            ("iface = [\"a\"]\ncpus = \"0\"", "only in mirror mode"),
            (
                "iface = [\"a\"]\nmode = \"mirror\"\ncpus = \"1-0\"",
                "runs backwards",
            ),
            ("iface = [\"a\"]\nmax_series = 100000", "above"),
            ("iface = [\"a\"]\nlog_level = \"[[\"", "log level"),
        ] {
            let e = RunConfig::merge(&args, Some((Path::new("c.toml"), file(text))))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert!(toml::from_str::<FileConfig>("ifaces = []").is_err());
    }

    #[test]
    fn the_nic_side_alone_needs_a_device_or_netdev_and_no_xdp_setting() {
        let merge = |args: &RunOverrides, text: &str| {
            RunConfig::merge(args, Some((Path::new("c.toml"), file(text))))
        };
        let none = RunOverrides::default();
        for text in [
            "rdma_devices = [\"mlx5_0\"]",
            "netdevs = [\"ens1f0np0\"]",
            "all_rdma_devices = true",
        ] {
            let c = merge(&none, text).unwrap();
            assert!(c.nic_only(), "{text}");
            assert!(c.fixed_changes(&c).is_empty());
        }
        let c = merge(&none, "iface = [\"eth0\"]\nnetdevs = [\"eth1\"]").unwrap();
        assert!(!c.nic_only());
        assert_eq!(c.netdevs, ["eth1"]);
        let flag = RunOverrides {
            netdevs: vec!["eth2".into()],
            ..RunOverrides::default()
        };
        assert_eq!(
            merge(&flag, "netdevs = [\"eth1\"]").unwrap().netdevs,
            ["eth2"]
        );
        let attached = merge(&none, "iface = [\"eth0\"]").unwrap();
        let alone = merge(&none, "all_rdma_devices = true").unwrap();
        assert_eq!(
            attached.fixed_changes(&alone),
            ["iface (the NIC side alone, or interfaces attached)"]
        );
        for (text, want) in [
            ("", "nothing to observe"),
            ("all_rdma_devices = false", "nothing to observe"),
            (
                "rdma_devices = [\"m\"]\nmax_flows = 10",
                "max_flows without iface",
            ),
            ("netdevs = [\"e\"]\nmode = \"mirror\"", "mode without iface"),
            ("netdevs = [\"e\", \"e\"]", "given twice"),
            ("netdevs = [\"a/b\"]", "not an interface name"),
            ("netdevs = [\"abcdefghijklmnopq\"]", "not an interface name"),
        ] {
            let e = merge(&none, text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn rdma_devices_from_the_flags_over_the_file_and_a_nic_root() {
        let merge = |args: &RunOverrides, text: &str| {
            RunConfig::merge(args, Some((Path::new("c.toml"), file(text))))
        };
        let none = RunOverrides::default();
        let c = merge(&none, "iface = [\"eth0\"]").unwrap();
        assert!(c.rdma_devices.is_empty());
        assert_eq!(c.nic_root, None);
        let text = "iface = [\"eth0\"]\nrdma_devices = [\"mlx5_0\", \"mlx5_1\"]";
        assert_eq!(
            merge(&none, text).unwrap().rdma_devices,
            ["mlx5_0", "mlx5_1"]
        );
        let flag = RunOverrides {
            rdma_devices: vec!["mlx5_3".into()],
            ..RunOverrides::default()
        };
        assert_eq!(merge(&flag, text).unwrap().rdma_devices, ["mlx5_3"]);
        let dir = std::env::temp_dir();
        let c = merge(
            &none,
            &format!(
                "iface = [\"eth0\"]\nnic_root = {:?}",
                dir.display().to_string()
            ),
        )
        .unwrap();
        assert_eq!(c.nic_root.as_deref(), Some(dir.as_path()));
        for (text, want) in [
            (
                "iface = [\"a\"]\nrdma_devices = [\"../x\"]",
                "not a device name",
            ),
            (
                "iface = [\"a\"]\nrdma_devices = [\"\"]",
                "not a device name",
            ),
            (
                "iface = [\"a\"]\nrdma_devices = [\"m\", \"m\"]",
                "given twice",
            ),
            (
                "iface = [\"a\"]\nnic_root = \"/nonexistent/tree\"",
                "not a directory",
            ),
        ] {
            let e = merge(&none, text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn jobs_need_a_capture_and_a_window_of_bins_enough() {
        let merge = |args: &RunOverrides, text: &str| {
            RunConfig::merge(args, Some((Path::new("c.toml"), file(text))))
        };
        let none = RunOverrides::default();
        let c = merge(&none, "capture = \"eth1\"\njobs = true").unwrap();
        assert_eq!(
            c.jobs,
            Some(JobsSettings {
                bin: DEFAULT_JOBS_BIN,
                window: DEFAULT_JOBS_WINDOW
            })
        );
        let flag = RunOverrides {
            jobs: true,
            jobs_bin: Some(Duration::from_micros(500)),
            jobs_window: Some(Duration::from_secs(30)),
            ..RunOverrides::default()
        };
        let c = merge(&flag, "capture = \"eth1\"").unwrap();
        assert_eq!(
            c.jobs,
            Some(JobsSettings {
                bin: Duration::from_micros(500),
                window: Duration::from_secs(30)
            })
        );
        assert_eq!(merge(&none, "capture = \"eth1\"").unwrap().jobs, None);
        for (text, want) in [
            ("iface = [\"eth0\"]\njobs = true", "jobs: needs capture"),
            (
                "capture = \"eth1\"\njobs = true\njobs_bin = \"5us\"",
                "not between 10us and 1s",
            ),
            (
                "capture = \"eth1\"\njobs = true\njobs_window = \"500ms\"",
                "jobs window",
            ),
            (
                "capture = \"eth1\"\njobs = true\njobs_window = \"200s\"",
                "100,000 bins",
            ),
            (
                "capture = \"eth1\"\njobs = true\ninterval = \"30s\"\njobs_window = \"10s\"",
                "and the interval",
            ),
            (
                "capture = \"eth1\"\njobs_window = \"10s\"",
                "only with jobs",
            ),
        ] {
            let e = merge(&none, text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_capture_replaces_interfaces_and_takes_no_xdp_settings() {
        let merge = |args: &RunOverrides, text: &str| {
            RunConfig::merge(args, Some((Path::new("c.toml"), file(text))))
        };
        let none = RunOverrides::default();
        let c = merge(&none, "capture = \"mlx5_0\"").unwrap();
        assert!(c.ifaces.is_empty());
        assert_eq!(c.capture, Some(CaptureConfig::new("mlx5_0")));
        let c = merge(
            &none,
            "capture = \"eth1\"\npromiscuous = false\ncapture_filter = \"\"",
        )
        .unwrap();
        let want = CaptureConfig {
            promiscuous: false,
            filter: None,
            ..CaptureConfig::new("eth1")
        };
        assert_eq!(c.capture, Some(want));
        // The command line's source replaces the file's.
        let flag = RunOverrides {
            capture: Some("mlx5_1".into()),
            capture_filter: Some("udp".into()),
            ..RunOverrides::default()
        };
        let c = merge(&flag, "iface = [\"eth0\"]").unwrap();
        assert!(c.ifaces.is_empty());
        assert_eq!(c.capture.as_ref().unwrap().device, "mlx5_1");
        assert_eq!(c.capture.as_ref().unwrap().filter.as_deref(), Some("udp"));
        let iface = RunOverrides {
            iface: vec!["eth0".into()],
            ..RunOverrides::default()
        };
        let c = merge(&iface, "capture = \"mlx5_0\"").unwrap();
        assert_eq!((c.ifaces, c.capture), (vec!["eth0".to_string()], None));
        for (args, text, want) in [
            (
                &none,
                "iface = [\"eth0\"]\ncapture = \"mlx5_0\"",
                "give one of them",
            ),
            (
                &none,
                "capture = \"mlx5_0\"\nmode = \"mirror\"",
                "mode with capture",
            ),
            (
                &none,
                "capture = \"mlx5_0\"\nmax_flows = 10",
                "max_flows with capture",
            ),
            (&flag, "xdp_mode = \"skb\"", "xdp_mode with capture"),
            (&iface, "promiscuous = false", "only with capture"),
            (&iface, "capture_filter = \"udp\"", "only with capture"),
        ] {
            let e = merge(args, text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let old = merge(&none, "capture = \"mlx5_0\"").unwrap();
        let new = merge(&none, "capture = \"mlx5_1\"").unwrap();
        assert_eq!(old.fixed_changes(&new), ["capture"]);
    }
}
