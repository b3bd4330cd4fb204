//! The OTLP flags of `replay` and `diagnose`: send the report's fleet records to a collector.

use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use clap::{Args, ValueEnum};
use roce_observer::{
    export::{IntervalRows, Resource},
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

/// `run`'s OTLP flags: every interval's records, sent as they come. Each overrides the config
/// file's key of the same name in its `[otlp]` table.
#[derive(Args, Clone, Debug, Default)]
pub struct RunOtlpArgs {
    /// Send every interval's fleet records (docs/export.md) over OTLP to URL (http:// or
    /// https://): each row a log record, the interval's totals as metrics.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The OTLP transport (default grpc).
    #[arg(long, value_enum, value_name = "PROTOCOL")]
    pub otlp_protocol: Option<ProtocolArg>,
    /// Compression of the requests (default gzip).
    #[arg(long, value_enum, value_name = "C")]
    pub otlp_compression: Option<CompressionArg>,
    /// A header sent with every request, NAME=VALUE (repeat; replaces the config file's).
    #[arg(long = "otlp-header", value_name = "NAME=VALUE", value_parser = parse_header)]
    pub otlp_headers: Vec<(String, String)>,
    /// PEM certificates to trust for an https:// endpoint (default: the system's roots).
    #[arg(long, value_name = "FILE")]
    pub otlp_ca: Option<PathBuf>,
    /// A request's time limit (default 10s); at exit, how long the last records may take.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub otlp_timeout: Option<Duration>,
    /// The send buffer's cap in MiB of encoded records (default 64): while the receiver is
    /// away the records wait there, and beyond it the oldest are dropped (counted).
    #[arg(long, value_name = "MIB")]
    pub otlp_buffer_mib: Option<u64>,
}

impl From<RunOtlpArgs> for observer_daemon::config::OtlpOverrides {
    fn from(a: RunOtlpArgs) -> Self {
        Self {
            endpoint: a.otlp_endpoint,
            protocol: a.otlp_protocol.map(Into::into),
            gzip: a.otlp_compression.map(|c| c == CompressionArg::Gzip),
            headers: a.otlp_headers,
            ca: a.otlp_ca,
            timeout: a.otlp_timeout,
            buffer_mib: a.otlp_buffer_mib,
        }
    }
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{s:?}: give NAME=VALUE")),
    }
}

impl OtlpArgs {
    /// The exporter's settings, or `None` without `--otlp-endpoint`: checked whole (the URL,
    /// the headers, the CA file read and parsed), so a bad one is refused before anything runs.
    pub fn config(&self) -> Result<Option<observer_otlp::Config>> {
        let Some(endpoint) = &self.otlp_endpoint else {
            return Ok(None);
        };
        let mut c = observer_otlp::Config::new(endpoint.clone(), self.otlp_protocol.into());
        c.gzip = self.otlp_compression == CompressionArg::Gzip;
        c.headers = self.otlp_headers.clone();
        c.timeout = self.otlp_timeout.min(Duration::from_secs(10));
        if let Some(p) = &self.otlp_ca {
            c.ca_pem = Some(std::fs::read(p).map_err(|e| {
                crate::output::UsageError(format!("--otlp-ca {}: {e}", p.display()))
            })?);
        }
        c.validate()
            .map_err(|e| crate::output::UsageError(e.to_string()))?;
        Ok(Some(c))
    }
}

/// Sends a report's records (one interval, as `resource`) when `config` is given.
pub fn send(
    report: &Report,
    resource: &Resource,
    config: Option<observer_otlp::Config>,
    deadline: Duration,
) -> Result<()> {
    let Some(config) = config else {
        return Ok(());
    };
    let endpoint = config.endpoint.clone();
    let (start, end) = roce_observer::records::interval(report);
    let rows = IntervalRows::of(report);
    let stats = observer_otlp::upload(config, resource, start, end, &rows, deadline)?;
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
