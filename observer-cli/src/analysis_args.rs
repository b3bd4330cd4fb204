//! The analysis flags `diagnose` and `replay` share: time series, microbursts, findings, the
//! HTML report and the ECMP model of the ecmp-imbalance rule.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, Result, bail};
use clap::Args;
use roce_observer::{
    analysis::{
        ecmp::{EcmpOptions, Fields, HashFn},
        findings::Thresholds,
    },
    pipeline::AnalysisOptions,
    units::{duration, parse_duration, parse_slot},
};

use crate::value_enums::{FieldsArg, HashArg};

#[derive(Args, Debug, Clone, Default)]
pub struct AnalysisArgs {
    /// Interval of the time series: live 1s by default, down to 100ms; replay fits it to the
    /// capture by default (about 100 intervals), down to the microburst slot (or 10us).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Option<Duration>,
    /// Microburst slot width (10us to 100ms; default 100us), or `off`.
    #[arg(long, value_parser = parse_slot, value_name = "DURATION")]
    pub burst_slot: Option<u64>,
    /// Rule thresholds (TOML; every key optional, see rules.example.toml).
    #[arg(long, value_name = "FILE")]
    pub rules: Option<String>,
    /// Also write a self-contained HTML report with charts to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write the fleet records (every QP, connection side, latency bucket, PAUSE source
    /// and finding; docs/export.md) to DIR, one JSONEachRow file per ClickHouse table. DIR
    /// must be new or empty.
    #[arg(long, value_name = "DIR")]
    pub records: Option<PathBuf>,
    #[command(flatten)]
    pub otlp: crate::otlp_args::OtlpArgs,
    /// Model the switch's ECMP over N uplinks for the ecmp-imbalance check (see `ecmp` for
    /// the full analysis).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub uplinks: Option<u32>,
    /// The switch's ECMP hash (with --uplinks).
    #[arg(long, value_enum, value_name = "HASH")]
    pub ecmp_hash: Option<HashArg>,
    /// The fields the switch hashes (with --uplinks).
    #[arg(long, value_enum, value_name = "FIELDS")]
    pub ecmp_fields: Option<FieldsArg>,
    /// The switch's hash seed (with --uplinks).
    #[arg(long, value_parser = crate::ecmp::parse_u32, value_name = "SEED")]
    pub ecmp_seed: Option<u32>,
    /// No colours in the terminal report (also when NO_COLOR is set or stdout is no terminal).
    #[arg(long)]
    pub no_color: bool,
    /// Training jobs: the hosts talking RC grouped into jobs, their communication phases and
    /// iteration period, each host's part of each phase (docs/jobs.md).
    #[arg(long)]
    pub jobs: bool,
    /// With --jobs: the bins the phases are measured on (10us to 1s; at most 100,000 of them
    /// over the observation).
    #[arg(long, default_value = "1ms", value_parser = parse_jobs_bin, value_name = "DURATION", requires = "jobs")]
    pub jobs_bin: Duration,
    /// With --jobs: other hosts' fleet records (a `--records` directory, or a
    /// `connection_sides` JSONEachRow file such as ClickHouse exports; repeat for several): the
    /// processes and ranks their QP tables name join the job's remote sides.
    #[arg(long, value_name = "PATH", requires = "jobs")]
    pub peer_records: Vec<PathBuf>,
}

/// `--jobs-bin`: a duration from 10us to 1s.
fn parse_jobs_bin(s: &str) -> Result<Duration, String> {
    let d = roce_observer::units::parse_duration(s)?;
    if d < Duration::from_micros(10) || d > Duration::from_secs(1) {
        return Err(format!("{s} is not between 10us and 1s"));
    }
    Ok(d)
}

impl AnalysisArgs {
    /// The files the report is also written to.
    pub fn files(&self) -> crate::output::Files<'_> {
        crate::output::Files {
            html: self.html.as_deref(),
            records: self.records.as_deref(),
            otlp: Some(&self.otlp),
        }
    }

    /// Checks the flags that depend on each other; `min_interval` of this source.
    pub fn validate(&self, min_interval: Duration, source: &str) -> Result<()> {
        if let Some(i) = self.interval
            && i < min_interval
        {
            bail!(
                "--interval {} is below {}'s shortest, {}",
                duration(i.as_nanos() as u64),
                source,
                duration(min_interval.as_nanos() as u64)
            );
        }
        if self.uplinks.is_none()
            && (self.ecmp_hash.is_some() || self.ecmp_fields.is_some() || self.ecmp_seed.is_some())
        {
            bail!("--ecmp-hash, --ecmp-fields and --ecmp-seed need --uplinks");
        }
        if let (Some(hash), Some(seed)) = (self.ecmp_hash, self.ecmp_seed) {
            hash.check_seed(seed, "--ecmp-seed")?;
        }
        Ok(())
    }

    /// The library's options: the rules file read, the ECMP model set up.
    pub fn options(&self) -> Result<AnalysisOptions> {
        let thresholds = match &self.rules {
            Some(path) => Thresholds::load(path)?,
            None => Thresholds::default(),
        };
        let ecmp = self.uplinks.map(|uplinks| EcmpOptions {
            uplinks,
            hash: self.ecmp_hash.map_or(HashFn::Crc32, Into::into),
            fields: self.ecmp_fields.map_or(Fields::FiveTuple, Into::into),
            seed: self.ecmp_seed.unwrap_or(0),
            ..EcmpOptions::default()
        });
        Ok(AnalysisOptions {
            interval_ns: self.interval.map(|d| d.as_nanos() as u64),
            slot_ns: self.burst_slot,
            thresholds,
            ecmp,
            nic: None,
            local_hosts: Vec::new(),
            jobs_bin_ns: self.jobs.then_some(self.jobs_bin.as_nanos() as u64),
            peer_processes: self.peer_processes()?,
        })
    }

    /// The files the analysis reads besides the traffic: the rules, the peers' records.
    pub fn inputs(&self) -> Vec<PathBuf> {
        self.rules
            .iter()
            .map(PathBuf::from)
            .chain(self.peer_records.iter().cloned())
            .collect()
    }

    /// The processes `--peer-records` name: a records directory's `connection_sides.jsonl`, or
    /// the file given.
    fn peer_processes(&self) -> Result<Vec<roce_observer::analysis::jobs::PeerProcess>> {
        let mut out = Vec::new();
        for path in &self.peer_records {
            let file = if path.is_dir() {
                let file = path.join("connection_sides.jsonl");
                if !file.is_file() {
                    bail!(crate::output::UsageError(format!(
                        "--peer-records: {} is a directory without connection_sides.jsonl: not a --records directory",
                        path.display()
                    )));
                }
                file
            } else {
                path.clone()
            };
            let reader = std::fs::File::open(&file)
                .with_context(|| format!("--peer-records: cannot read {}", file.display()))?;
            out.extend(roce_observer::analysis::fabric::records_processes(
                std::io::BufReader::new(reader),
                &file.display().to_string(),
            )?);
        }
        Ok(out)
    }

    pub fn color(&self) -> bool {
        use std::io::IsTerminal;
        !self.no_color && std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
    }
}
