//! `roce-observer run`: the continuous sidecar. The flags override the config file's keys of
//! the same name; the library merges and validates them (and again on SIGHUP).

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Result;
use clap::Args;
use observer_daemon as daemon;
use observer_daemon::config::RunOverrides;
use roce_observer::units::parse_duration;

use crate::{
    output,
    value_enums::{ModeArg, TcHookArg, XdpModeArg},
};

/// `roce-observer run` flags; each overrides the config file's key of the same name.
#[derive(Args, Debug, Clone, Default)]
pub struct RunArgs {
    /// Interface to observe (repeat for several; replaces the config file's list).
    #[arg(long = "iface", short = 'i', value_name = "IF")]
    pub iface: Vec<String>,
    /// Capture DEV through libpcap instead of attaching XDP: an RDMA device's offloaded-traffic
    /// sniffer (mlx5_0, when libpcap has rdmasniff; it slows offloaded RDMA traffic) or a
    /// network interface, in promiscuous mode (replaces the config file's iface or capture).
    #[arg(
        long,
        value_name = "DEV",
        conflicts_with_all = ["iface", "mode", "consume", "cpus", "max_flows", "xdp_mode", "tc_hook"]
    )]
    pub capture: Option<String>,
    /// With --capture: the capture filter, a libpcap expression ('' for every frame; the
    /// default passes RoCEv2, GRE mirror copies and PAUSE / PFC, tagged or not).
    #[arg(
        long,
        value_name = "EXPR",
        requires = "capture",
        conflicts_with = "iface"
    )]
    pub capture_filter: Option<String>,
    /// With --capture: leave the device out of promiscuous mode (as tcpdump -p).
    #[arg(long, requires = "capture", conflicts_with = "iface")]
    pub no_promiscuous: bool,
    /// TOML file with the same keys as these flags (snake_case); read again on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// host or mirror (a SPAN/ERSPAN destination port) [default: host]
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Mirror mode only: drop the copies after accounting.
    #[arg(long)]
    pub consume: bool,
    /// Mirror mode only: the CPUs that account the copies, each pair of hosts on one of them: a
    /// list (0-3,8), `queues` (the CPUs of the interfaces' receive queues) or `off`
    /// [default: queues]
    #[arg(long, value_parser = roce_observer::source::live::Spread::parse, value_name = "LIST")]
    pub cpus: Option<roce_observer::source::live::Spread>,
    /// How often the kernel maps are drained into the metrics, at least 100ms [default: 10s]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Option<Duration>,
    /// Address of the metrics endpoint: loopback only by default; any other address exposes
    /// unauthenticated metrics to the network [default: 127.0.0.1:9477]
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Queue pairs exported as their own series (the top K by recent bytes); all others are
    /// summed in one `qp="rest"` series (0: only the rest) [default: 100]
    #[arg(long, value_name = "K")]
    pub max_series: Option<usize>,
    /// Append one JSON line per interval (deltas) to FILE (re-opened on SIGHUP).
    #[arg(long, value_name = "FILE")]
    pub jsonl: Option<PathBuf>,
    /// error, warn, info, debug or trace; or a tracing filter. Without it the
    /// ROCE_OBSERVER_LOG environment variable is used [default: info]
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Flows unchanged this long are deleted from the kernel table [default: 5m]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub idle_timeout: Option<Duration>,
    /// Capacity of the kernel flow table (LRU). The kernel allocates it in full, per possible
    /// CPU: max_flows x (112 + 216 x CPUs) bytes [default: 16384]
    #[arg(long, value_name = "N")]
    pub max_flows: Option<u32>,
    /// How XDP attaches: native when the driver supports it, generic (skb) otherwise, or the
    /// one asked for [default: auto]
    #[arg(long, value_enum)]
    pub xdp_mode: Option<XdpModeArg>,
    /// Host mode: the TC egress hook [default: auto]
    #[arg(long, value_enum, value_name = "HOOK")]
    pub tc_hook: Option<TcHookArg>,
    /// An RDMA device whose NIC side (its counters, and the driver statistics and settings of
    /// the netdevs behind it) is exported (repeat for several; replaces the config file's
    /// rdma_devices). The ones behind the observed interfaces, or the captured device, are
    /// exported without it.
    /// With neither --iface nor --capture, the NIC side alone is exported and nothing is
    /// attached (an offload host: XDP on its RDMA netdev sees no RoCE).
    #[arg(long = "rdma-dev", value_name = "DEV")]
    pub rdma_devs: Vec<String>,
    /// Every RDMA device the host has, as they come and go (replaces the config file's
    /// all_rdma_devices when set).
    #[arg(long)]
    pub all_rdma_devs: bool,
    /// A netdev whose driver statistics and settings (PFC, DCB, DCQCN, MTU) are exported,
    /// nothing attached to it (repeat for several; replaces the config file's netdevs).
    #[arg(long = "netdev", value_name = "IF")]
    pub netdevs: Vec<String>,
    #[command(flatten)]
    pub otlp: crate::otlp_args::RunOtlpArgs,
    /// With a capture: training jobs per window, exported as metrics (an iteration-time
    /// histogram, the period, a straggler and a hang per job; docs/jobs.md).
    #[arg(long)]
    pub jobs: bool,
    /// The jobs' bins, 10us to 1s [default: 1ms]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub jobs_bin: Option<Duration>,
    /// The span each jobs analysis covers: at least 1s and the interval, at most 100,000 bins
    /// [default: 60s]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub jobs_window: Option<Duration>,
}

impl From<RunArgs> for RunOverrides {
    fn from(a: RunArgs) -> Self {
        Self {
            iface: a.iface,
            config: a.config,
            mode: a.mode.map(Into::into),
            consume: a.consume,
            cpus: a.cpus,
            interval: a.interval,
            listen: a.listen,
            max_series: a.max_series,
            jsonl: a.jsonl,
            log_level: a.log_level,
            idle_timeout: a.idle_timeout,
            max_flows: a.max_flows,
            xdp_mode: a.xdp_mode.map(Into::into),
            tc_hook: a.tc_hook.map(Into::into),
            capture: a.capture,
            capture_filter: a.capture_filter,
            no_promiscuous: a.no_promiscuous,
            rdma_devices: a.rdma_devs,
            netdevs: a.netdevs,
            all_rdma_devices: a.all_rdma_devs,
            otlp: a.otlp.into(),
            jobs: a.jobs,
            jobs_bin: a.jobs_bin,
            jobs_window: a.jobs_window,
        }
    }
}

pub fn run(a: RunArgs) -> Result<()> {
    if let (Some(jsonl), Some(config)) = (&a.jsonl, &a.config) {
        output::refuse_overwrite("--jsonl", jsonl, std::slice::from_ref(config))?;
    }
    Ok(daemon::run(a.into())?)
}
