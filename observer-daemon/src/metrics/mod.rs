//! The metric registry: every family the sidecar exports, declared once (name, type, unit, help,
//! labels), grouped by subject, one file each. The OpenMetrics encoder (`openmetrics`) takes its
//! families from here, and the tests check what it encodes, docs/sidecar.md's reference table
//! and their own lists against it: adding a field to the export is its family here and the rows
//! the encoder gives it.

use std::borrow::Cow;

pub mod export;
pub mod interfaces;
pub mod jobs;
pub mod latency;
pub mod nic;
pub mod observer;
pub mod pfc;
pub mod queue_pairs;

/// What a family is, as OpenMetrics types it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Info,
    Histogram,
}

impl Kind {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Info => "info",
            Self::Histogram => "histogram",
        }
    }

    pub(crate) fn metric_type(self) -> prometheus_client::metrics::MetricType {
        use prometheus_client::metrics::MetricType;
        match self {
            Self::Counter => MetricType::Counter,
            Self::Gauge => MetricType::Gauge,
            Self::Info => MetricType::Info,
            Self::Histogram => MetricType::Histogram,
        }
    }
}

/// A family's unit: its name is the suffix of the family's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Seconds,
    Celsius,
    Volts,
    Amperes,
    Watts,
}

impl Unit {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Bytes => "bytes",
            Self::Seconds => "seconds",
            Self::Celsius => "celsius",
            Self::Volts => "volts",
            Self::Amperes => "amperes",
            Self::Watts => "watts",
        }
    }

    /// The encoder's unit (it keeps a reference while it encodes the family).
    pub(crate) fn encoder_unit(self) -> &'static prometheus_client::registry::Unit {
        use prometheus_client::registry::Unit as U;
        use std::sync::LazyLock;
        static WATTS: LazyLock<U> = LazyLock::new(|| U::Other("watts".into()));
        match self {
            Self::Bytes => &U::Bytes,
            Self::Seconds => &U::Seconds,
            Self::Celsius => &U::Celsius,
            Self::Volts => &U::Volts,
            Self::Amperes => &U::Amperes,
            Self::Watts => &WATTS,
        }
    }
}

/// One metric family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Family {
    /// The name given to the encoder: without the unit's suffix, `_total` or `_info`.
    pub name: Cow<'static, str>,
    pub kind: Kind,
    pub unit: Option<Unit>,
    pub help: Cow<'static, str>,
    /// Its series' label names, in order.
    pub labels: &'static [&'static str],
}

impl Family {
    pub const fn new(
        name: &'static str,
        kind: Kind,
        unit: Option<Unit>,
        help: &'static str,
        labels: &'static [&'static str],
    ) -> Self {
        Self {
            name: Cow::Borrowed(name),
            kind,
            unit,
            help: Cow::Borrowed(help),
            labels,
        }
    }

    /// The name a scrape shows (OpenMetrics): with the unit's suffix, then `_total` for a
    /// counter and `_info` for an info family.
    pub fn exposed(&self) -> String {
        let mut n = self.name.to_string();
        if let Some(u) = self.unit {
            n.push('_');
            n.push_str(u.name());
        }
        match self.kind {
            Kind::Counter => n.push_str("_total"),
            Kind::Info => n.push_str("_info"),
            Kind::Gauge | Kind::Histogram => {}
        }
        n
    }
}

/// Every family, by subject: the interfaces, the queue pairs, latency, PFC on the wire, the NIC
/// side, the observer itself.
pub fn all() -> Vec<(&'static str, Vec<Family>)> {
    vec![
        ("interfaces", interfaces::all()),
        ("queue pairs", queue_pairs::all()),
        ("latency", latency::all()),
        ("PFC on the wire", pfc::all()),
        ("the NIC side", nic::all()),
        ("the observer", observer::all()),
        ("the fleet records' export", export::all()),
        ("training jobs", jobs::all()),
    ]
}

/// docs/sidecar.md's reference table: a row per family, by subject.
pub fn reference_table() -> String {
    let mut out = String::from("| family | type | labels | help |\n|---|---|---|---|\n");
    for (subject, families) in all() {
        out.push_str(&format!("| **{subject}** | | | |\n"));
        for f in families {
            let labels: Vec<String> = f.labels.iter().map(|l| format!("`{l}`")).collect();
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                f.exposed(),
                f.kind.name(),
                labels.join(", "),
                f.help
                    .replace('|', "\\|")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;")
            ));
        }
    }
    out
}
