//! `roce-observer diagnose`: attach to interfaces for a while (or capture a device through
//! libpcap) and report.

use std::{path::Path, time::Duration};

use anyhow::{Result, bail};
use clap::Args;
use roce_observer::{
    analysis::series::MIN_LIVE_INTERVAL_NS,
    model::Report,
    pipeline::{
        AnalysisOptions, CaptureOptions, CaptureSession, Ended, LiveOptions, LiveSession, NicPlan,
        NicSession,
    },
    source::{
        capture::{COOKED_FILTER, CaptureConfig, DEFAULT_FILTER, IP_FILTER},
        live::{Spread, Vantage, cpu_list},
        nic::{
            NicError,
            host::{Host, Selection},
            rdma::device_of_capture,
        },
    },
    units::{Named as _, parse_duration, parse_link_speed},
};

use crate::{
    analysis_args::AnalysisArgs,
    output,
    value_enums::{ModeArg, TcHookArg, XdpModeArg},
};

/// The line `diagnose` prints on stderr once every interface is attached.
pub const ATTACHED: &str = "roce-observer: attached";

#[derive(Args, Debug)]
pub struct DiagnoseArgs {
    /// Interface to observe (repeat for several).
    #[arg(
        long = "iface",
        short = 'i',
        required_unless_present_any = ["capture", "rdma_devs", "netdevs"],
        value_name = "IF"
    )]
    pub ifaces: Vec<String>,
    /// Capture DEV through libpcap instead of attaching XDP: an RDMA device's offloaded-traffic
    /// sniffer (mlx5_0, when libpcap has rdmasniff; it slows offloaded RDMA traffic) or a
    /// network interface, in promiscuous mode.
    #[arg(
        long,
        value_name = "DEV",
        conflicts_with_all = ["ifaces", "xdp_mode", "mode", "consume", "max_flows", "tc_hook", "cpus"]
    )]
    pub capture: Option<String>,
    /// With --capture: the capture filter, a libpcap expression ('' for every frame; the
    /// default passes RoCEv2, GRE mirror copies and PAUSE / PFC, tagged or not).
    #[arg(
        long,
        value_name = "EXPR",
        requires = "capture",
        conflicts_with = "ifaces"
    )]
    pub capture_filter: Option<String>,
    /// With --capture: leave the device out of promiscuous mode (as tcpdump -p).
    #[arg(long, requires = "capture", conflicts_with = "ifaces")]
    pub no_promiscuous: bool,
    /// How long to observe: 10s, 500ms, 2m, or seconds.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Rows in the table.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Print the roce-observer/report/v1 JSON (every flow) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// How XDP attaches: native when the driver supports it, generic (skb) otherwise, or the
    /// one asked for.
    #[arg(long, value_enum, default_value_t = XdpModeArg::Auto)]
    pub xdp_mode: XdpModeArg,
    /// host: a host's own interface, every frame passes on unchanged. mirror: a SPAN/ERSPAN
    /// destination port, put in promiscuous mode while observed (restored afterwards).
    #[arg(long, value_enum, default_value_t = ModeArg::Host)]
    pub mode: ModeArg,
    /// Mirror mode only: drop the copies after accounting (they need not climb the stack).
    #[arg(long)]
    pub consume: bool,
    /// Mirror mode only: the CPUs that account the copies, each pair of hosts on one of them
    /// (RSS puts every copy of a mirror source on one CPU): a list (0-3,8), `queues` (default:
    /// the CPUs of the interfaces' receive queues, every online CPU for a veth; one such CPU
    /// spreads nothing) or `off` (accounted where they arrive).
    #[arg(long, value_parser = roce_observer::source::live::Spread::parse, value_name = "LIST")]
    pub cpus: Option<Spread>,
    /// Capacity of the kernel flow table (LRU: the least recent flows are evicted when full).
    #[arg(long, default_value_t = observer_common::DEFAULT_MAX_FLOWS)]
    pub max_flows: u32,
    /// Speed of the links PAUSE / PFC frames were sent on (100G, 25G, 400G, 10000M), to turn
    /// pause quanta into time. Host mode reads the interfaces' speed when not given; a mirror
    /// port's own speed is not the mirrored links', so mirror mode needs it.
    #[arg(long, value_parser = parse_link_speed, value_name = "SPEED")]
    pub link_speed: Option<u64>,
    /// Host mode: the TC egress hook that sees transmitted frames: auto (tcx from kernel 6.6,
    /// clsact before), tcx or clsact.
    #[arg(long, value_enum, value_name = "HOOK")]
    pub tc_hook: Option<TcHookArg>,
    /// An RDMA device whose NIC side (counters, configuration, QPs) the report adds (repeat for
    /// several); the ones behind the observed interfaces, or the captured device, are found
    /// without it.
    /// With neither --iface nor --capture: the NIC side alone over --duration, nothing
    /// attached (an offload host, whose RDMA netdev XDP sees no RoCE on).
    #[arg(long = "rdma-dev", value_name = "DEV")]
    pub rdma_devs: Vec<String>,
    /// A netdev whose driver statistics and settings the report adds (repeat for several);
    /// with neither --iface nor --capture, read alone as --rdma-dev.
    #[arg(long = "netdev", value_name = "IF")]
    pub netdevs: Vec<String>,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

/// The NIC side to read beside the wire: the named RDMA devices and those behind `observed`
/// (interfaces, or a captured RDMA device); none when there is none. A mirror port's host is
/// the collector, not the mirrored hosts: only named devices are read there. A wrong name is an
/// error; any other failure to read a warning (the wire view stands).
fn nic_plan(
    observed: &[String],
    rdma_devs: &[String],
    netdevs: &[String],
    mirror: bool,
) -> Result<Option<NicPlan>> {
    let mut devs = rdma_devs.to_vec();
    let mut ifaces = netdevs.to_vec();
    for o in observed.iter().filter(|_| !mirror) {
        // A captured RDMA device (`mlx5_0`, or `mlx5_0:1` for a port) is a device; anything
        // else a netdev.
        let dev = device_of_capture(o);
        if Path::new("/sys/class/infiniband").join(dev).is_dir() {
            devs.push(dev.to_string());
        } else if Path::new("/sys/class/net").join(o).is_dir() {
            // An interface the host lacks is the attach's error to tell.
            ifaces.push(o.clone());
        }
    }
    match NicPlan::live(&ifaces, &devs) {
        Ok(plan) => Ok(plan),
        Err(
            e @ (NicError::NoRdmaDevice(_) | NicError::NoInterface(_) | NicError::BadInterface(_)),
        ) => Err(e.into()),
        Err(e) => {
            eprintln!("roce-observer: warning: the NIC side is not read: {e}");
            Ok(None)
        }
    }
}

pub fn diagnose(a: DiagnoseArgs) -> Result<()> {
    let vantage = a.mode.vantage(a.consume)?;
    if a.cpus.is_some() && vantage == Vantage::Host {
        bail!("--cpus needs --mode mirror (host mode accounts every frame where it is received)");
    }
    if a.tc_hook.is_some() && vantage != Vantage::Host {
        bail!("--tc-hook needs --mode host (mirror mode attaches no TC egress program)");
    }
    a.analysis
        .validate(Duration::from_nanos(MIN_LIVE_INTERVAL_NS), "live capture")?;
    if a.analysis.jobs && a.capture.is_none() {
        // The kernel program counts per flow, not per frame: the jobs' fine bins need each
        // frame's time, which a capture has.
        bail!(
            "--jobs needs every frame's time: give --capture DEV (an interface, or an RDMA device's sniffer such as mlx5_0); the XDP observer counts per flow, not per frame"
        );
    }
    let inputs = a.analysis.inputs();
    a.analysis.files().check(&inputs)?;
    let observed = a
        .capture
        .iter()
        .chain(&a.ifaces)
        .cloned()
        .collect::<Vec<_>>();
    let mut analysis = a.analysis.options()?;
    if observed.is_empty() {
        return diagnose_nic_alone(a, analysis);
    }
    let mirror = a.capture.is_none() && vantage != Vantage::Host;
    analysis.nic = nic_plan(&observed, &a.rdma_devs, &a.netdevs, mirror)?;
    if let Some(device) = a.capture {
        let mut capture = CaptureConfig::new(device);
        capture.promiscuous = !a.no_promiscuous;
        if let Some(filter) = a.capture_filter {
            capture.filter = (!filter.trim().is_empty()).then_some(filter);
        }
        let options = CaptureOptions {
            capture,
            link_speed: a.link_speed,
        };
        let report = observe_capture(options, analysis, a.duration)?;
        return output::finish(
            &report,
            a.analysis.files(),
            a.json,
            a.top,
            a.analysis.color(),
        );
    }
    let options = LiveOptions {
        interfaces: a.ifaces.clone(),
        xdp_mode: a.xdp_mode.into(),
        vantage,
        max_flows: a.max_flows,
        tc_hook: a.tc_hook.unwrap_or_default().into(),
        link_speed: a.link_speed,
        spread: a.cpus.unwrap_or_default(),
    };
    let report = observe(options, analysis, a.duration)?;
    output::finish(
        &report,
        a.analysis.files(),
        a.json,
        a.top,
        a.analysis.color(),
    )
}

/// The NIC side alone: two readings `--duration` apart, nothing attached; the settings of the
/// kernel programs are refused (they would be silently ignored).
fn diagnose_nic_alone(a: DiagnoseArgs, mut analysis: AnalysisOptions) -> Result<()> {
    let xdp_only = [
        ("--xdp-mode", a.xdp_mode != XdpModeArg::Auto),
        ("--mode", a.mode != ModeArg::Host),
        ("--consume", a.consume),
        ("--cpus", a.cpus.is_some()),
        ("--tc-hook", a.tc_hook.is_some()),
        (
            "--max-flows",
            a.max_flows != observer_common::DEFAULT_MAX_FLOWS,
        ),
        ("--link-speed", a.link_speed.is_some()),
    ];
    if let Some((flag, _)) = xdp_only.iter().find(|(_, set)| *set) {
        bail!(output::UsageError(format!(
            "{flag} needs --iface: the NIC side alone (--rdma-dev, --netdev) attaches nothing"
        )));
    }
    let selection = Selection {
        interfaces: a.netdevs.clone(),
        rdma_devices: a.rdma_devs.clone(),
        no_qps: false,
        no_modules: false,
        gpus: false,
    };
    analysis.nic = Some(NicPlan::start(Host::Live, selection)?);
    let mut session = NicSession::start(analysis);
    eprintln!(
        "{ATTACHED} to nothing: reading the NIC side of {} for {:.1}s; Ctrl-C to stop early",
        a.rdma_devs
            .iter()
            .chain(&a.netdevs)
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
        a.duration.as_secs_f64()
    );
    match session.observe(a.duration)? {
        Ended::Elapsed | Ended::Failed => {}
        Ended::Interrupted => eprintln!("roce-observer: interrupted, reporting what was read"),
        Ended::Terminated => eprintln!("roce-observer: terminated, reporting what was read"),
    }
    let report = session.finish();
    output::finish(
        &report,
        a.analysis.files(),
        a.json,
        a.top,
        a.analysis.color(),
    )
}

/// Attaches, says so on stderr (the [`ATTACHED`] line), observes for `duration` or until
/// interrupted, and reports.
pub fn observe(
    options: LiveOptions,
    analysis: AnalysisOptions,
    duration: Duration,
) -> Result<Report> {
    let (ifaces, vantage, xdp_mode) = (
        options.interfaces.join(", "),
        options.vantage,
        options.xdp_mode,
    );
    let mut session = LiveSession::attach(options, analysis)?;
    let mut spread = match session.spread_cpus() {
        [] => String::new(),
        cpus => format!(", copies accounted on CPUs {}", cpu_list(cpus)),
    };
    if !session.beside().is_empty() {
        spread.push_str(&format!(
            "; at TC ingress on {}, beside the running sidecar's XDP program",
            session.beside().join(", ")
        ));
    }
    eprintln!(
        "{ATTACHED} to {ifaces} ({} mode, xdp {}{spread}), observing for {:.1}s; Ctrl-C to stop early",
        vantage.name(),
        xdp_mode.name(),
        duration.as_secs_f64()
    );
    match session.observe(duration)? {
        Ended::Elapsed => {}
        Ended::Interrupted => eprintln!("roce-observer: interrupted, reporting what was seen"),
        Ended::Terminated => eprintln!("roce-observer: terminated, reporting what was seen"),
        Ended::Failed => eprintln!("roce-observer: the source failed, reporting what was seen"),
    }
    Ok(session.finish()?)
}

/// Opens the capture, says so on stderr (the [`ATTACHED`] line), captures for `duration` or
/// until interrupted or the capture fails, and reports.
pub fn observe_capture(
    options: CaptureOptions,
    analysis: AnalysisOptions,
    duration: Duration,
) -> Result<Report> {
    let mut session = CaptureSession::open(options, analysis)?;
    let info = session.info();
    eprintln!(
        "{ATTACHED} to {} through libpcap (link type {}, {}, filter {}), observing for {:.1}s; Ctrl-C to stop early",
        info.device,
        info.link_type,
        if info.promiscuous {
            "promiscuous"
        } else {
            "not promiscuous"
        },
        match info.filter.as_deref() {
            Some(DEFAULT_FILTER | COOKED_FILTER | IP_FILTER) => "RoCEv2, GRE, PAUSE/PFC",
            Some(f) => f,
            None => "none: every frame",
        },
        duration.as_secs_f64()
    );
    match session.observe(duration)? {
        Ended::Elapsed => {}
        Ended::Interrupted => eprintln!("roce-observer: interrupted, reporting what was seen"),
        Ended::Terminated => eprintln!("roce-observer: terminated, reporting what was seen"),
        Ended::Failed => eprintln!("roce-observer: the capture failed, reporting what was seen"),
    }
    Ok(session.finish()?)
}
