//! The OTLP flags of `replay` and `diagnose`: send the report's fleet records to a collector.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use roce_observer::{
    export::{IntervalRows, Sequencer, report_interval},
    model::Report,
    units::parse_duration,
};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ProtocolArg {
    /// OTLP/gRPC (usually port 4317).
    #[default]
    Grpc,
    /// OTLP/HTTP with protobuf bodies, to ENDPOINT/v1/logs and /v1/metrics (usually 4318).
    HttpProtobuf,
}

impl From<ProtocolArg> for observer_otlp::Protocol {
    fn from(p: ProtocolArg) -> Self {
        match p {
            ProtocolArg::Grpc => Self::Grpc,
            ProtocolArg::HttpProtobuf => Self::HttpProtobuf,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum CompressionArg {
    #[default]
    Gzip,
    None,
}

#[derive(Args, Clone, Debug, Default)]
pub struct OtlpArgs {
    /// Also send the fleet records (docs/export.md) over OTLP to URL (http:// or https://):
    /// each row a log record, the interval's totals as metrics.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The OTLP transport.
    #[arg(
        long,
        value_enum,
        default_value_t,
        value_name = "PROTOCOL",
        requires = "otlp_endpoint"
    )]
    pub otlp_protocol: ProtocolArg,
    /// Compression of the requests.
    #[arg(
        long,
        value_enum,
        default_value_t,
        value_name = "C",
        requires = "otlp_endpoint"
    )]
    pub otlp_compression: CompressionArg,
    /// A header sent with every request, NAME=VALUE (repeat; e.g. authorization=Bearer ...).
    #[arg(long = "otlp-header", value_name = "NAME=VALUE", value_parser = parse_header, requires = "otlp_endpoint")]
    pub otlp_headers: Vec<(String, String)>,
    /// PEM certificates to trust for an https:// endpoint (default: the system's roots).
    #[arg(long, value_name = "FILE", requires = "otlp_endpoint")]
    pub otlp_ca: Option<PathBuf>,
    /// How long the upload may take, retries included; what is not delivered by then is an
    /// error (after the report is printed).
    #[arg(long, value_parser = parse_duration, default_value = "30s", value_name = "DURATION", requires = "otlp_endpoint")]
    pub otlp_timeout: Duration,
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{s:?}: give NAME=VALUE")),
    }
}

impl OtlpArgs {
    /// The exporter's settings, or `None` without `--otlp-endpoint`. Reads the CA file now,
    /// so a missing one is refused before anything runs.
    pub fn config(&self) -> Result<Option<observer_otlp::Config>> {
        let Some(endpoint) = &self.otlp_endpoint else {
            return Ok(None);
        };
        let mut c = observer_otlp::Config::new(endpoint.clone(), self.otlp_protocol.into());
        c.gzip = self.otlp_compression == CompressionArg::Gzip;
        c.headers = self.otlp_headers.clone();
        c.timeout = self.otlp_timeout.min(Duration::from_secs(10));
        c.ca_pem = match &self.otlp_ca {
            None => None,
            Some(p) => {
                Some(std::fs::read(p).with_context(|| format!("--otlp-ca {}", p.display()))?)
            }
        };
        Ok(Some(c))
    }
}

/// Sends a report's records (one interval) when `config` is given.
pub fn send(
    report: &Report,
    config: Option<observer_otlp::Config>,
    deadline: Duration,
) -> Result<()> {
    let Some(config) = config else {
        return Ok(());
    };
    let endpoint = config.endpoint.clone();
    let resource = roce_observer::records::resource(report);
    let interval = report_interval(report, 0);
    let rows = Sequencer::default().interval(
        &resource,
        interval.start_ns,
        interval.end_ns,
        &IntervalRows::of(report),
    );
    let stats = observer_otlp::upload(
        config,
        &resource,
        interval.start_ns,
        interval.end_ns,
        &rows,
        deadline,
    )?;
    eprintln!(
        "roce-observer: sent {} records to {endpoint}{}",
        stats.sent,
        if stats.retries > 0 {
            format!(" ({} retries)", stats.retries)
        } else {
            String::new()
        }
    );
    Ok(())
}
