//! Logging: tracing to stderr, its filter reloadable (SIGHUP with a new log level).

use tracing_subscriber::{EnvFilter, Registry as TracingRegistry, layer::SubscriberExt, reload};

use super::DaemonError;

/// Environment variable with a tracing filter (used when no log level is configured).
pub const LOG_ENV: &str = "ROCE_OBSERVER_LOG";

pub(super) type LogHandle = reload::Handle<EnvFilter, TracingRegistry>;

pub(super) fn log_filter(level: Option<&str>) -> EnvFilter {
    match level {
        Some(l) => EnvFilter::try_new(l).unwrap_or_else(|_| EnvFilter::new("info")),
        None => EnvFilter::try_from_env(LOG_ENV).unwrap_or_else(|_| EnvFilter::new("info")),
    }
}

pub(super) fn init_logging(level: Option<&str>) -> Result<LogHandle, DaemonError> {
    use std::io::IsTerminal;
    let (layer, handle) = reload::Layer::new(log_filter(level));
    let subscriber = tracing_subscriber::registry().with(layer).with(
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .with_target(false),
    );
    tracing::subscriber::set_global_default(subscriber).map_err(DaemonError::Logging)?;
    Ok(handle)
}
