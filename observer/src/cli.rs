//! The `roce-observer` command line. `main.rs` is one line calling [`main`]; errors become one
//! line on stderr and a non-zero exit, never a panic.

use std::{
    io::{BufRead, BufReader, Read, Write},
    path::PathBuf,
    process::{ExitCode, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};

use crate::{
    lab::Lab,
    live::{AttachMode, LiveConfig, Observer, TcHook, Vantage},
    report::{Report, Source},
    synth,
};

#[derive(Parser, Debug)]
#[command(
    name = "roce-observer",
    version,
    about = "Observe RoCEv2 traffic per queue pair with eBPF/XDP: throughput, ECN/CE marks, CNPs, ACK/NAK/RNR, PSN gaps and retransmissions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Attach to interfaces for a while and report the top queue pairs.
    Diagnose(DiagnoseArgs),
    /// Send a synthetic RoCEv2 scenario as raw Ethernet frames on an interface.
    Generate(GenerateArgs),
    /// Analyse capture files (pcap or pcapng; `-` reads standard input) without privileges.
    Replay(ReplayArgs),
    /// Write a synthetic scenario as a pcap file.
    Synth(SynthArgs),
    /// Run the built-in lab: a network namespace with a veth pair, synthetic RoCEv2 traffic
    /// (one congested QP, one lossy QP), observed live.
    Demo(DemoArgs),
    /// Model how a switch's ECMP hash spreads the observed flows (live or from captures) over
    /// its uplinks, against an ideal random hash; pair connections and check source ports.
    Ecmp(EcmpArgs),
    /// Run continuously as a sidecar: export per-interface and per-QP counters as OpenMetrics
    /// on /metrics (loopback by default), /healthz, optionally JSON lines; re-attach to
    /// interfaces that come back; SIGHUP reloads --config, SIGTERM/SIGINT detach and exit.
    Run(crate::daemon::RunArgs),
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["pcap", "ifaces"])))]
struct EcmpArgs {
    /// Uplinks (ECMP members) of the first tier.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    uplinks: u32,
    #[arg(long, value_enum, default_value = "crc32")]
    hash: crate::ecmp::HashFn,
    #[arg(long, value_enum, default_value = "5tuple")]
    fields: crate::ecmp::Fields,
    /// Hash seed (decimal or 0x hex).
    #[arg(long, default_value = "0", value_parser = parse_u32)]
    seed: u32,
    /// How the hash picks a member: modulo N, or the upper bits.
    #[arg(long, value_enum, default_value = "modulo")]
    bucket: crate::ecmp::Bucket,
    /// 2: each first-tier uplink leads to a spine that hashes again over --uplinks2.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    tiers: u8,
    /// Uplinks per spine (with --tiers 2).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    uplinks2: Option<u32>,
    /// The spine's hash function (default: --hash).
    #[arg(long, value_enum)]
    hash2: Option<crate::ecmp::HashFn>,
    /// The spine's seed (default: --seed).
    #[arg(long, value_parser = parse_u32)]
    seed2: Option<u32>,
    /// The spine's bucket selection (default: --bucket).
    #[arg(long, value_enum)]
    bucket2: Option<crate::ecmp::Bucket>,
    /// Toeplitz key in hex (at least 4 bytes; default: the RSS specification's 40-byte key).
    #[arg(long, value_parser = parse_hex_key, value_name = "HEX")]
    toeplitz_key: Option<Vec<u8>>,
    /// The max/mean the what-if aims under.
    #[arg(long, default_value_t = 1.1)]
    target: f64,
    /// Capture files to analyse (instead of --iface).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pcap: Vec<String>,
    /// Interfaces to observe live (instead of --pcap).
    #[arg(long = "iface", short = 'i', value_name = "IF")]
    ifaces: Vec<String>,
    /// Live: how long to observe (default 10s).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Live: host (default) or mirror.
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Print the JSON report (flows and the `ecmp` object) instead of the table.
    #[arg(long)]
    json: bool,
}

/// A key in hex (spaces and colons allowed), at least 4 bytes.
fn parse_hex_key(s: &str) -> Result<Vec<u8>, String> {
    let hex: String = s
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ':')
        .collect();
    let hex = hex.strip_prefix("0x").unwrap_or(&hex);
    if !hex.is_ascii() || !hex.len().is_multiple_of(2) {
        return Err("a key is an even number of hex digits".to_string());
    }
    let key = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| format!("'{s}' is not hex"))?;
    if key.len() < 4 {
        return Err(format!(
            "a Toeplitz key needs at least 4 bytes, not {}",
            key.len()
        ));
    }
    Ok(key)
}

/// A u32 in decimal or 0x hex.
fn parse_u32(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => t.parse(),
    };
    v.map_err(|_| format!("'{t}' is not a 32-bit number (decimal or 0x hex)"))
}

#[derive(Args, Debug)]
struct DiagnoseArgs {
    /// Interface to observe (repeat for several).
    #[arg(long = "iface", short = 'i', required = true, value_name = "IF")]
    ifaces: Vec<String>,
    /// How long to observe: 10s, 500ms, 2m, or seconds.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Rows in the table.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Print the roce-observer/report/v1 JSON (every flow) instead of the table.
    #[arg(long)]
    json: bool,
    #[arg(long, value_enum, default_value_t = AttachMode::Auto)]
    xdp_mode: AttachMode,
    /// host: a host's own interface, every frame passes on unchanged. mirror: a SPAN/ERSPAN
    /// destination port, put in promiscuous mode while observed (restored afterwards).
    #[arg(long, value_enum, default_value_t = ModeArg::Host)]
    mode: ModeArg,
    /// Mirror mode only: drop the copies after accounting (they need not climb the stack).
    #[arg(long)]
    consume: bool,
    /// Capacity of the kernel flow table (LRU: the least recent flows are evicted when full).
    #[arg(long, default_value_t = observer_common::DEFAULT_MAX_FLOWS)]
    max_flows: u32,
    /// Speed of the links PAUSE / PFC frames were sent on (100G, 25G, 400G, 10000M), to turn
    /// pause quanta into time. Host mode reads the interfaces' speed when not given; a mirror
    /// port's own speed is not the mirrored links', so mirror mode needs it.
    #[arg(long, value_parser = parse_link_speed, value_name = "SPEED")]
    link_speed: Option<u64>,
    /// Host mode: the TC egress hook that sees transmitted frames: auto (tcx from kernel 6.6,
    /// clsact before), tcx or clsact.
    #[arg(long, value_enum, value_name = "HOOK")]
    tc_hook: Option<TcHook>,
    #[command(flatten)]
    analysis: AnalysisArgs,
}

/// Time series, microbursts, findings and the HTML report: `diagnose` and `replay` alike.
#[derive(Args, Debug, Clone, Default)]
struct AnalysisArgs {
    /// Interval of the time series: 1s by default; down to 100ms live, 10ms in replay.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    interval: Option<Duration>,
    /// Microburst slot width (10us to 100ms; default 100us), or `off`.
    #[arg(long, value_parser = parse_slot, value_name = "DURATION")]
    burst_slot: Option<u64>,
    /// Rule thresholds (TOML; every key optional, see rules.example.toml).
    #[arg(long, value_name = "FILE")]
    rules: Option<String>,
    /// Also write a self-contained HTML report with charts to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Model the switch's ECMP over N uplinks for the ecmp-imbalance check (see `ecmp` for
    /// the full analysis).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    uplinks: Option<u32>,
    /// The switch's ECMP hash (with --uplinks).
    #[arg(long, value_enum, value_name = "HASH")]
    ecmp_hash: Option<crate::ecmp::HashFn>,
    /// The fields the switch hashes (with --uplinks).
    #[arg(long, value_enum, value_name = "FIELDS")]
    ecmp_fields: Option<crate::ecmp::Fields>,
    /// The switch's hash seed (with --uplinks).
    #[arg(long, value_parser = parse_u32, value_name = "SEED")]
    ecmp_seed: Option<u32>,
    /// No colours in the terminal report (also when NO_COLOR is set or stdout is no terminal).
    #[arg(long)]
    no_color: bool,
}

/// A microburst slot width in ns: `off`, or 10us to 100ms.
fn parse_slot(s: &str) -> Result<u64, String> {
    if s.trim() == "off" {
        return Ok(0);
    }
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else {
        return Err(format!(
            "'{t}' is not a slot width (use 100us, 1ms, or off)"
        ));
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{t}' is not a slot width (use 100us, 1ms, or off)"))?;
    let ns = (v * scale).round();
    if !(10_000.0..=100_000_000.0).contains(&ns) {
        return Err(format!("'{t}': a slot width between 10us and 100ms"));
    }
    Ok(ns as u64)
}

impl AnalysisArgs {
    /// Checks the flags that depend on each other; `min_interval` of this source.
    fn validate(&self, min_interval: Duration, source: &str) -> Result<()> {
        if let Some(i) = self.interval
            && i < min_interval
        {
            bail!(
                "--interval {}ms is below {}'s shortest, {}ms",
                i.as_millis(),
                source,
                min_interval.as_millis()
            );
        }
        if self.uplinks.is_none()
            && (self.ecmp_hash.is_some() || self.ecmp_fields.is_some() || self.ecmp_seed.is_some())
        {
            bail!("--ecmp-hash, --ecmp-fields and --ecmp-seed need --uplinks");
        }
        if let (Some(crate::ecmp::HashFn::Crc16Ccitt), Some(seed)) =
            (self.ecmp_hash, self.ecmp_seed)
            && seed > 0xFFFF
        {
            bail!("--ecmp-seed {seed:#x} does not fit CRC-16 (at most 0xffff)");
        }
        Ok(())
    }

    fn thresholds(&self) -> Result<crate::findings::Thresholds> {
        Ok(match &self.rules {
            Some(path) => crate::findings::Thresholds::load(path)?,
            None => crate::findings::Thresholds::default(),
        })
    }

    fn timeline(
        &self,
        link_speed_bps: Option<u64>,
        thresholds: &crate::findings::Thresholds,
    ) -> crate::series::TimelineConfig {
        crate::series::TimelineConfig {
            interval_ns: self
                .interval
                .map_or(crate::series::DEFAULT_INTERVAL_NS, |d| d.as_nanos() as u64),
            slot_ns: self.burst_slot.unwrap_or(crate::series::DEFAULT_SLOT_NS),
            link_speed_bps,
            threshold_percent: thresholds.microburst.share_percent,
            series_flows: crate::series::SERIES_FLOWS,
        }
    }

    /// Adds the ECMP model (with --uplinks), the findings, and writes the HTML page.
    fn finish(&self, report: &mut Report, thresholds: &crate::findings::Thresholds) -> Result<()> {
        if let Some(uplinks) = self.uplinks {
            let options = crate::ecmp::EcmpOptions {
                uplinks,
                hash: self.ecmp_hash.unwrap_or(crate::ecmp::HashFn::Crc32),
                fields: self.ecmp_fields.unwrap_or(crate::ecmp::Fields::FiveTuple),
                seed: self.ecmp_seed.unwrap_or(0),
                ..crate::ecmp::EcmpOptions::default()
            };
            report.ecmp = Some(crate::ecmp::analyse(&report.flows, &options));
        }
        let (findings, checks) = crate::findings::evaluate(report, thresholds);
        report.findings = findings;
        report.checks = checks;
        if let Some(path) = &self.html {
            std::fs::write(path, crate::html::render(report))
                .with_context(|| format!("cannot write the HTML report {}", path.display()))?;
            eprintln!("roce-observer: wrote the HTML report to {}", path.display());
        }
        Ok(())
    }

    fn color(&self) -> bool {
        use std::io::IsTerminal;
        !self.no_color && std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ModeArg {
    Host,
    Mirror,
}

#[derive(Args, Debug)]
struct GenerateArgs {
    /// Interface to send on.
    #[arg(
        long = "iface",
        short = 'i',
        value_name = "IF",
        required_unless_present = "list"
    )]
    iface: Option<String>,
    /// Scenario name (see --list).
    #[arg(long, default_value = "demo")]
    scenario: String,
    /// List the scenarios.
    #[arg(long)]
    list: bool,
}

#[derive(Args, Debug)]
struct ReplayArgs {
    /// Capture files (pcap or pcapng; Ethernet, Linux cooked SLL/SLL2, raw IP), `-` for stdin.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
    /// Rows in the table.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Print the roce-observer/report/v1 JSON (every flow) instead of the table.
    #[arg(long)]
    json: bool,
    /// No progress line on stderr (it is only shown for large files on a terminal).
    #[arg(long)]
    no_progress: bool,
    /// Speed of the links (100G, 25G, 400G, 10000M): turns pause quanta into time, and
    /// microburst slots into shares of the link.
    #[arg(long, value_parser = parse_link_speed, value_name = "SPEED")]
    link_speed: Option<u64>,
    #[command(flatten)]
    analysis: AnalysisArgs,
}

#[derive(Args, Debug)]
struct SynthArgs {
    /// Scenario name (see --list).
    #[arg(long, required_unless_present = "list")]
    scenario: Option<String>,
    /// Output pcap file (`-` for standard output).
    #[arg(short, long, value_name = "FILE", required_unless_present = "list")]
    output: Option<PathBuf>,
    /// List the scenarios.
    #[arg(long)]
    list: bool,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// How long the observer watches the lab.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    duration: Duration,
    /// Print the JSON report instead of the table.
    #[arg(long)]
    json: bool,
}

/// Parses `10s`, `500ms`, `2m`, `1h` or a number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (use 10s, 500ms, 2m)"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("'{s}': unknown unit '{unit}' (use ms, s, m, h)")),
    };
    if secs.is_nan() || secs <= 0.0 {
        return Err(format!("'{s}': the duration must be positive"));
    }
    if secs > 365.0 * 86400.0 {
        return Err(format!("'{s}': at most a year"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a link speed in bits/s: a number with a unit K, M, G or T (bits per second), optionally
/// followed by `b/s` or `bps`: `100G`, `25G`, `400Gb/s`, `10000M`.
pub fn parse_link_speed(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower
        .strip_suffix("b/s")
        .or_else(|| lower.strip_suffix("bps"))
        .unwrap_or(&lower);
    let bad = || format!("'{t}' is not a link speed (use 100G, 25G, 400G or 10000M)");
    if !body.is_ascii() {
        return Err(bad());
    }
    let (num, unit) = body.split_at(body.len().saturating_sub(1));
    let scale: f64 = match unit {
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        _ => return Err(bad()),
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let bps = v * scale;
    if !(1e6..=1e13).contains(&bps) {
        return Err(format!("'{t}': a link speed between 1M and 10T"));
    }
    Ok(bps.round() as u64)
}

/// The speed the interfaces report (sysfs, Mb/s), in bits/s, when they all report the same.
fn interfaces_speed(ifaces: &[String]) -> Option<u64> {
    let speeds: Vec<Option<u64>> = ifaces
        .iter()
        .map(|i| {
            std::fs::read_to_string(format!("/sys/class/net/{i}/speed"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .filter(|mbps| *mbps > 0)
                .map(|mbps| mbps as u64 * 1_000_000)
        })
        .collect();
    match speeds.first() {
        Some(Some(first)) if speeds.iter().all(|s| *s == Some(*first)) => Some(*first),
        _ => None,
    }
}

/// Sets the report's link speed; when pause frames were seen but no speed is known, says why in
/// a warning (stderr and `source.warnings`).
fn apply_link_speed(report: &mut Report, speed: Option<u64>, why_unknown: &str) {
    report.set_link_speed(speed);
    if report.pfc.is_some() && speed.is_none() {
        let w = format!("PAUSE / PFC frames seen but no pause times: {why_unknown}");
        eprintln!("roce-observer: warning: {w}");
        report.source.warnings.push(w);
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Diagnose(a) => diagnose(a),
        Command::Generate(a) => generate(a),
        Command::Replay(a) => replay(a),
        Command::Synth(a) => synth_file(a),
        Command::Demo(a) => demo(a),
        Command::Ecmp(a) => ecmp(a),
        Command::Run(a) => crate::daemon::run(a).map_err(Into::into),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roce-observer: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The line `diagnose` prints on stderr once every interface is attached.
pub const ATTACHED: &str = "roce-observer: attached";

fn diagnose(a: DiagnoseArgs) -> Result<()> {
    let report = diagnose_report(&a)?;
    print_report(&report, a.json, a.top, a.analysis.color())
}

/// Observes live as `a` says and builds the report: totals, flows, PFC, the time series and
/// microbursts, the findings (and the HTML page when asked for).
fn diagnose_report(a: &DiagnoseArgs) -> Result<Report> {
    let vantage = match (a.mode, a.consume) {
        (ModeArg::Host, true) => {
            bail!("--consume needs --mode mirror (host mode never drops a packet)")
        }
        (ModeArg::Host, false) => Vantage::Host,
        (ModeArg::Mirror, consume) => Vantage::Mirror { consume },
    };
    if a.tc_hook.is_some() && vantage != Vantage::Host {
        bail!("--tc-hook needs --mode host (mirror mode attaches no TC egress program)");
    }
    a.analysis.validate(
        Duration::from_nanos(crate::series::MIN_LIVE_INTERVAL_NS),
        "live capture",
    )?;
    let thresholds = a.analysis.thresholds()?;
    let (speed, why_unknown) = match (a.link_speed, vantage) {
        (Some(s), _) => (Some(s), ""),
        (None, Vantage::Host) => (
            interfaces_speed(&a.ifaces),
            "the interfaces report no common speed; give --link-speed",
        ),
        (None, Vantage::Mirror { .. }) => (
            None,
            "a mirror port's speed is not the mirrored links'; give --link-speed",
        ),
    };
    let timeline_config = a.analysis.timeline(speed, &thresholds);
    let config = LiveConfig {
        interfaces: a.ifaces.clone(),
        mode: a.xdp_mode,
        vantage,
        max_flows: a.max_flows,
        tc_hook: a.tc_hook.unwrap_or_default(),
        burst_slot_ns: timeline_config.slot_ns,
    };
    let mut observer = Observer::attach(config)?;
    let mut timeline = crate::series::Timeline::starting(
        timeline_config,
        crate::live::unix_ns(),
        &Default::default(),
    );
    let offset = crate::live::monotonic_to_unix_offset();
    // Ring 2i: interface i ingress; 2i + 1: its egress (host mode only).
    let mut rings = Vec::new();
    for iface in &a.ifaces {
        rings.push(Some(timeline.add_tracker(
            iface.clone(),
            crate::report::Direction::Ingress,
            offset,
        )));
        rings.push((vantage == Vantage::Host).then(|| {
            timeline.add_tracker(iface.clone(), crate::report::Direction::Egress, offset)
        }));
    }
    let mut reader = observer.burst_reader()?;
    eprintln!(
        "{ATTACHED} to {} ({} mode, xdp {}), observing for {:.1}s; Ctrl-C to stop early",
        a.ifaces.join(", "),
        vantage.name(),
        a.xdp_mode.name(),
        a.duration.as_secs_f64()
    );
    let started = Instant::now();
    let feed = |reader: &mut crate::live::BurstReader,
                timeline: &mut crate::series::Timeline,
                upto: Option<u64>| {
        let mut take = |ring: usize, read: crate::live::SlotRead| {
            if let Some(Some(t)) = rings.get(ring) {
                match read {
                    crate::live::SlotRead::Bytes(slot, bytes) => {
                        timeline.trackers[*t].slot(slot, bytes)
                    }
                    crate::live::SlotRead::Lost(n) => timeline.trackers[*t].lost(n),
                }
            }
        };
        match upto {
            Some(u) => reader.drain_until(u, &mut take),
            None => reader.drain(&mut take),
        }
    };
    let period = reader
        .as_ref()
        .map_or(Duration::from_millis(100), |r| r.period())
        .min(Duration::from_millis(100));
    watch(a.duration, period, || {
        if let Some(r) = reader.as_mut() {
            feed(r, &mut timeline, None);
        }
        let now = crate::live::unix_ns();
        if timeline.due(now) {
            let agg = observer.snapshot()?;
            timeline.advance(now, &agg.flows);
        }
        Ok(())
    })?;
    observer.detach()?;
    let window = started.elapsed().as_secs_f64();
    if let Some(r) = reader.as_mut() {
        // Detached: every slot is complete.
        let upto = crate::live::monotonic_ns() / r.slot_ns() + 2;
        feed(r, &mut timeline, Some(upto));
    }
    drop(reader);
    let agg = observer.snapshot()?;
    drop(observer);
    let mut source = Source::live(a.ifaces.clone(), a.xdp_mode.name());
    source.mode = Some(vantage.name().to_string());
    let mut report = Report::new(&agg, source, window);
    let (series, bursts) = timeline.finish(&agg.flows);
    report.series = series;
    report.microbursts = bursts;
    // Host mode's own speed says nothing of a link whose PFC came inside mirror copies.
    let mirrored = report
        .pfc
        .iter()
        .flat_map(|p| &p.sources)
        .any(|s| s.mirror.is_some());
    let (speed, why_unknown) = if a.link_speed.is_none() && mirrored {
        (
            None,
            "some came inside mirror copies, whose links' speed is unknown; give --link-speed",
        )
    } else {
        (speed, why_unknown)
    };
    apply_link_speed(&mut report, speed, why_unknown);
    a.analysis.finish(&mut report, &thresholds)?;
    Ok(report)
}

fn ecmp(a: EcmpArgs) -> Result<()> {
    use crate::ecmp::{EcmpOptions, analyse};
    let tier2 = match (a.tiers, a.uplinks2) {
        (2, Some(n2)) => Some((
            n2,
            a.hash2.unwrap_or(a.hash),
            a.seed2.unwrap_or(a.seed),
            a.bucket2.unwrap_or(a.bucket),
        )),
        (2, None) => bail!("--tiers 2 needs --uplinks2 (uplinks per spine)"),
        (_, Some(_)) => bail!("--uplinks2 needs --tiers 2"),
        _ => {
            if a.hash2.is_some() || a.seed2.is_some() || a.bucket2.is_some() {
                bail!("--hash2, --seed2 and --bucket2 need --tiers 2");
            }
            None
        }
    };
    for (func, seed, flag) in [
        (Some(a.hash), Some(a.seed), "--seed"),
        (tier2.map(|t| t.1), tier2.map(|t| t.2), "--seed2"),
    ] {
        if let (Some(crate::ecmp::HashFn::Crc16Ccitt), Some(seed)) = (func, seed)
            && seed > 0xFFFF
        {
            bail!("{flag} {seed:#x} does not fit CRC-16 (at most 0xffff)");
        }
    }
    if !a.pcap.is_empty() && (a.duration.is_some() || a.mode.is_some()) {
        bail!("--duration and --mode apply to --iface, not --pcap");
    }
    if !(a.target > 1.0 && a.target.is_finite()) {
        bail!("--target must be above 1 (a max/mean), not {}", a.target);
    }
    let mut report = if a.pcap.is_empty() {
        diagnose_report(&DiagnoseArgs {
            ifaces: a.ifaces.clone(),
            duration: a.duration.unwrap_or(Duration::from_secs(10)),
            top: 20,
            json: a.json,
            xdp_mode: AttachMode::Auto,
            mode: a.mode.unwrap_or(ModeArg::Host),
            consume: false,
            max_flows: observer_common::DEFAULT_MAX_FLOWS,
            link_speed: None,
            tc_hook: None,
            analysis: AnalysisArgs::default(),
        })?
    } else {
        replay_report(&a.pcap, true, None)?
    };
    let options = EcmpOptions {
        uplinks: a.uplinks,
        hash: a.hash,
        fields: a.fields,
        seed: a.seed,
        bucket: a.bucket,
        tier2,
        toeplitz_key: a.toeplitz_key.clone(),
        target: a.target,
        ..EcmpOptions::default()
    };
    let analysis = analyse(&report.flows, &options);
    let mut out = std::io::stdout().lock();
    if a.json {
        report.ecmp = Some(analysis);
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", analysis.render())?;
    }
    Ok(())
}

/// Replays capture files into a report (warnings on stderr and in the report; frames of
/// unsupported pcapng interfaces under `skipped.unsupported_link_type`).
fn replay_report(
    files: &[String],
    no_progress: bool,
    timeline: Option<crate::series::TimelineConfig>,
) -> Result<Report> {
    let mut replay = match timeline {
        Some(t) => crate::replay::Replay::with_timeline(t),
        None => crate::replay::Replay::new(),
    };
    for file in files {
        replay.file(file, !no_progress)?;
    }
    if replay.timeline.as_ref().is_some_and(|t| t.overflowed()) {
        replay.warnings.push(format!(
            "the capture spans more than {} intervals: the time series stops there (give a longer --interval)",
            crate::series::MAX_INTERVALS
        ));
    }
    for w in &replay.warnings {
        eprintln!("roce-observer: warning: {w}");
    }
    let window = replay.window_seconds();
    let mut report = Report::new(
        &replay.agg,
        Source::pcap(replay.files.clone(), replay.warnings.clone()),
        window,
    );
    if replay.unsupported_link_frames > 0 {
        report.totals.skipped.insert(
            crate::replay::UNSUPPORTED_LINK_TYPE.to_string(),
            replay.unsupported_link_frames,
        );
    }
    if let Some(t) = replay.timeline.take() {
        let (series, bursts) = t.finish(&replay.agg.flows);
        report.series = series;
        report.microbursts = bursts;
    }
    Ok(report)
}

fn replay(a: ReplayArgs) -> Result<()> {
    a.analysis.validate(
        Duration::from_nanos(crate::series::MIN_REPLAY_INTERVAL_NS),
        "replay",
    )?;
    let thresholds = a.analysis.thresholds()?;
    let timeline = a.analysis.timeline(a.link_speed, &thresholds);
    let mut report = replay_report(&a.files, a.no_progress, Some(timeline))?;
    apply_link_speed(&mut report, a.link_speed, "give --link-speed");
    a.analysis.finish(&mut report, &thresholds)?;
    print_report(&report, a.json, a.top, a.analysis.color())
}

fn list_scenarios() {
    for (name, what) in synth::SCENARIOS {
        println!("{name:<12} {what}");
    }
}

fn synth_file(a: SynthArgs) -> Result<()> {
    let (Some(name), Some(out)) = (a.scenario, a.output) else {
        list_scenarios();
        return Ok(());
    };
    let w = scenario(&name)?;
    if out.as_os_str() == "-" {
        synth::write_pcap(std::io::stdout().lock(), &w.frames)?;
    } else {
        let f = std::fs::File::create(&out)
            .with_context(|| format!("cannot create {}", out.display()))?;
        synth::write_pcap(std::io::BufWriter::new(f), &w.frames)
            .with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!(
            "roce-observer: wrote {} frames of scenario '{name}' to {}",
            w.frames.len(),
            out.display()
        );
    }
    Ok(())
}

fn print_report(report: &Report, json: bool, top: usize, color: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
    } else {
        // Findings first: what the run concluded, then the numbers behind it.
        writeln!(
            out,
            "{}",
            crate::findings::render(&report.findings, &report.checks, color)
        )?;
        write!(out, "{}", report.render_table(top))?;
        write!(out, "{}", report.render_timeline())?;
    }
    Ok(())
}

/// Runs `tick` every `period` for `d` or until SIGINT/SIGTERM, whichever comes first.
fn watch(d: Duration, period: Duration, mut tick: impl FnMut() -> Result<()>) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("cannot watch SIGTERM")?;
        let deadline = tokio::time::sleep(d);
        tokio::pin!(deadline);
        let mut every = tokio::time::interval(period);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                _ = tokio::signal::ctrl_c() => {
                    eprintln!("roce-observer: interrupted, reporting what was seen");
                    break;
                }
                _ = term.recv() => {
                    eprintln!("roce-observer: terminated, reporting what was seen");
                    break;
                }
                _ = every.tick() => tick()?,
            }
        }
        Ok(())
    })
}

fn scenario(name: &str) -> Result<synth::Workload> {
    synth::scenario(name).ok_or_else(|| {
        let names: Vec<&str> = synth::SCENARIOS.iter().map(|(n, _)| *n).collect();
        anyhow!("unknown scenario '{name}' (known: {})", names.join(", "))
    })
}

fn generate(a: GenerateArgs) -> Result<()> {
    if a.list {
        list_scenarios();
        return Ok(());
    }
    let iface = a.iface.expect("clap requires --iface without --list");
    let w = scenario(&a.scenario)?;
    let sent = synth::send(&iface, &w.frames)?;
    eprintln!(
        "roce-observer: sent {sent} frames of scenario '{}' on {iface}",
        a.scenario
    );
    Ok(())
}

fn demo(a: DemoArgs) -> Result<()> {
    crate::live::check_privileges()
        .context("the demo creates a network namespace and attaches XDP")?;
    let workload = scenario("demo")?;
    let lab = Lab::create("roce-demo")?;
    eprintln!(
        "demo: lab namespace {} with veth pair {} <-> {}; observer on {}",
        lab.ns.name(),
        lab.tx,
        lab.rx,
        lab.rx
    );
    let exe: PathBuf = std::env::current_exe().context("cannot find this executable")?;
    let mut observer = KillOnDrop(
        lab.ns
            .command(&exe)
            .args(["diagnose", "--iface", &lab.rx, "--top", "10"])
            .arg("--duration")
            .arg(format!("{}ms", a.duration.as_millis()))
            .args(a.json.then_some("--json"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start the observer in the lab")?,
    );
    let mut stderr = BufReader::new(observer.0.stderr.take().expect("piped"));
    let mut line = String::new();
    loop {
        line.clear();
        if stderr.read_line(&mut line)? == 0 {
            let status = observer.0.wait()?;
            bail!("the observer exited ({status}) before attaching");
        }
        eprint!("{line}");
        if line.starts_with(ATTACHED) {
            break;
        }
    }
    let tx = lab.tx.clone();
    let frames = workload.frames.clone();
    let sent = lab.ns.run_in(move || {
        crate::lab::pin_current_thread()?;
        synth::send(&tx, &frames).map_err(anyhow::Error::from)
    })??;
    eprintln!(
        "demo: sent {sent} synthetic frames on {} (several QPs, one congested with CE marks and CNPs, one with loss and go-back-N)",
        lab.tx
    );
    let mut report = String::new();
    observer
        .0
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut report)?;
    let mut rest = String::new();
    stderr.read_to_string(&mut rest)?;
    eprint!("{rest}");
    let status = observer.0.wait()?;
    print!("{report}");
    if !status.success() {
        bail!("the observer failed ({status})");
    }
    drop(lab);
    eprintln!("demo: lab removed");
    Ok(())
}

/// A child process killed (and reaped) if the demo ends early on an error.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert_eq!(
            parse_duration("9999h"),
            Err("'9999h': at most a year".to_string())
        );
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn link_speeds() {
        assert_eq!(parse_link_speed("100G"), Ok(100_000_000_000));
        assert_eq!(parse_link_speed("25g"), Ok(25_000_000_000));
        assert_eq!(parse_link_speed("400Gb/s"), Ok(400_000_000_000));
        assert_eq!(parse_link_speed("10000M"), Ok(10_000_000_000));
        assert_eq!(parse_link_speed("2.5Gbps"), Ok(2_500_000_000));
        assert_eq!(parse_link_speed("1T"), Ok(1_000_000_000_000));
        for bad in [
            "100", "fast", "G", "-1G", "100X", "0G", "100T", "100€", "1µ", "€", "",
        ] {
            assert!(parse_link_speed(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_link_speed("100"),
            Err("'100' is not a link speed (use 100G, 25G, 400G or 10000M)".to_string())
        );
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
