//! `roce-observer ecmp`: how a switch's ECMP hash spreads the observed flows over its uplinks.

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use roce_observer::{
    analysis::ecmp::{EcmpOptions, analyse},
    pipeline::{AnalysisOptions, LiveOptions, default_replay_threads, replay_report},
    source::live::{AttachMode, TcHook},
    units::parse_duration,
};

use crate::{
    output,
    value_enums::{BucketArg, FieldsArg, HashArg, ModeArg},
};

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["files", "pcap", "ifaces"])))]
pub struct EcmpArgs {
    /// Capture files to analyse, as `replay` takes them (or --pcap, or --iface).
    #[arg(value_name = "FILE")]
    pub files: Vec<String>,
    /// Uplinks (ECMP members) of the first tier.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub uplinks: u32,
    /// The switch's hash function.
    #[arg(long, value_enum, default_value = "crc32")]
    pub hash: HashArg,
    /// The header fields the switch hashes.
    #[arg(long, value_enum, default_value = "5tuple")]
    pub fields: FieldsArg,
    /// Hash seed (decimal or 0x hex).
    #[arg(long, default_value = "0", value_parser = parse_u32)]
    pub seed: u32,
    /// How the hash picks a member: modulo N, or the upper bits.
    #[arg(long, value_enum, default_value = "modulo")]
    pub bucket: BucketArg,
    /// 2: each first-tier uplink leads to a spine that hashes again over --uplinks2.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub tiers: u8,
    /// Uplinks per spine (with --tiers 2).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub uplinks2: Option<u32>,
    /// The spine's hash function (default: --hash).
    #[arg(long, value_enum)]
    pub hash2: Option<HashArg>,
    /// The spine's seed (default: --seed).
    #[arg(long, value_parser = parse_u32)]
    pub seed2: Option<u32>,
    /// The spine's bucket selection (default: --bucket).
    #[arg(long, value_enum)]
    pub bucket2: Option<BucketArg>,
    /// Toeplitz key in hex (at least 4 bytes; default: the RSS specification's 40-byte key).
    #[arg(long, value_parser = parse_hex_key, value_name = "HEX")]
    pub toeplitz_key: Option<Vec<u8>>,
    /// The max/mean the what-if aims under.
    #[arg(long, default_value_t = 1.1)]
    pub target: f64,
    /// Capture files to analyse (the same as giving them as arguments).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub pcap: Vec<String>,
    /// Interfaces to observe live (instead of --pcap).
    #[arg(long = "iface", short = 'i', value_name = "IF")]
    pub ifaces: Vec<String>,
    /// Live: how long to observe (default 10s).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Live: host (default) or mirror.
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Print the JSON report (flows and the `ecmp` object) instead of the table.
    #[arg(long)]
    pub json: bool,
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
pub fn parse_u32(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => t.parse(),
    };
    v.map_err(|_| format!("'{t}' is not a 32-bit number (decimal or 0x hex)"))
}

pub fn ecmp(a: EcmpArgs) -> Result<()> {
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
    a.hash.check_seed(a.seed, "--seed")?;
    if let Some((_, hash2, seed2, _)) = tier2 {
        hash2.check_seed(seed2, "--seed2")?;
    }
    let files: Vec<String> = a.files.iter().chain(&a.pcap).cloned().collect();
    if !files.is_empty() && (a.duration.is_some() || a.mode.is_some()) {
        bail!("--duration and --mode apply to --iface, not to capture files");
    }
    output::refuse_twice(&files)?;
    if !(a.target > 1.0 && a.target.is_finite()) {
        bail!("--target must be above 1 (a max/mean), not {}", a.target);
    }
    let mut report = if files.is_empty() {
        let live = LiveOptions {
            interfaces: a.ifaces.clone(),
            xdp_mode: AttachMode::Auto,
            vantage: a.mode.unwrap_or_default().vantage(false)?,
            max_flows: observer_common::DEFAULT_MAX_FLOWS,
            tc_hook: TcHook::Auto,
            link_speed: None,
            // The hash distribution alone: no CPU queues in between.
            spread: roce_observer::source::live::Spread::Off,
        };
        crate::diagnose::observe(
            live,
            AnalysisOptions::default(),
            a.duration.unwrap_or(Duration::from_secs(10)),
        )?
    } else {
        replay_report(&files, false, None, None, default_replay_threads())?
    };
    output::print_warnings(&report);
    let options = EcmpOptions {
        uplinks: a.uplinks,
        hash: a.hash.into(),
        fields: a.fields.into(),
        seed: a.seed,
        bucket: a.bucket.into(),
        tier2: tier2.map(|(n, h, s, b)| (n, h.into(), s, b.into())),
        toeplitz_key: a.toeplitz_key.clone(),
        target: a.target,
        ..EcmpOptions::default()
    };
    let analysis = analyse(&report.flows, &report.connections, &options);
    if a.json {
        report.ecmp = Some(analysis);
        output::stdout(|out| roce_observer::render::json::write(&report, out))
    } else {
        output::stdout(|out| write!(out, "{}", roce_observer::render::ecmp::render(&analysis)))
    }
}
