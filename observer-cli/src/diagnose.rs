//! `roce-observer diagnose`: attach to interfaces for a while and report.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use roce_observer::{
    analysis::series::MIN_LIVE_INTERVAL_NS,
    model::Report,
    pipeline::{AnalysisOptions, Ended, LiveOptions, LiveSession},
    source::live::Vantage,
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
    #[arg(long = "iface", short = 'i', required = true, value_name = "IF")]
    pub ifaces: Vec<String>,
    /// How long to observe: 10s, 500ms, 2m, or seconds.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Rows in the table.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Print the roce-observer/report/v1 JSON (every flow) instead of the table.
    #[arg(long)]
    pub json: bool,
    #[arg(long, value_enum, default_value_t = XdpModeArg::Auto)]
    pub xdp_mode: XdpModeArg,
    /// host: a host's own interface, every frame passes on unchanged. mirror: a SPAN/ERSPAN
    /// destination port, put in promiscuous mode while observed (restored afterwards).
    #[arg(long, value_enum, default_value_t = ModeArg::Host)]
    pub mode: ModeArg,
    /// Mirror mode only: drop the copies after accounting (they need not climb the stack).
    #[arg(long)]
    pub consume: bool,
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
    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

pub fn diagnose(a: DiagnoseArgs) -> Result<()> {
    let vantage = a.mode.vantage(a.consume)?;
    if a.tc_hook.is_some() && vantage != Vantage::Host {
        bail!("--tc-hook needs --mode host (mirror mode attaches no TC egress program)");
    }
    a.analysis
        .validate(Duration::from_nanos(MIN_LIVE_INTERVAL_NS), "live capture")?;
    if let Some(html) = &a.analysis.html {
        let inputs: Vec<_> = a.analysis.rules.iter().map(Into::into).collect();
        output::refuse_overwrite("--html", html, &inputs)?;
    }
    let options = LiveOptions {
        interfaces: a.ifaces.clone(),
        xdp_mode: a.xdp_mode.into(),
        vantage,
        max_flows: a.max_flows,
        tc_hook: a.tc_hook.unwrap_or_default().into(),
        link_speed: a.link_speed,
    };
    let report = observe(options, a.analysis.options()?, a.duration)?;
    output::print_warnings(&report);
    output::write_html(&report, a.analysis.html.as_deref())?;
    output::print_report(&report, a.json, a.top, a.analysis.color())
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
    eprintln!(
        "{ATTACHED} to {ifaces} ({} mode, xdp {}), observing for {:.1}s; Ctrl-C to stop early",
        vantage.name(),
        xdp_mode.name(),
        duration.as_secs_f64()
    );
    match session.observe(duration)? {
        Ended::Elapsed => {}
        Ended::Interrupted => eprintln!("roce-observer: interrupted, reporting what was seen"),
        Ended::Terminated => eprintln!("roce-observer: terminated, reporting what was seen"),
    }
    Ok(session.finish()?)
}
