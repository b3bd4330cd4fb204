//! Per queue pair (the top K by recent bytes, and `qp="rest"`), and the connections among them.

use std::borrow::Cow;

use super::{Family, Kind, Unit};
use crate::flowbook::METRIC_NAMES;

pub static CONNECTIONS: Family = Family::new(
    "roce_observer_connections",
    Kind::Gauge,
    None,
    "RC, UC and XRC connections (both directions of a queue pair joined) among the flows of the last drain",
    &[],
);

/// The per-queue-pair counters, one family per flow book count ([`METRIC_NAMES`]: its name and
/// help), labelled with the flow.
pub fn counts() -> Vec<Family> {
    METRIC_NAMES
        .iter()
        .map(|(name, help)| {
            let (family, unit) = match *name {
                "bytes" => ("roce_qp".to_string(), Some(Unit::Bytes)),
                _ => (format!("roce_qp_{name}"), None),
            };
            Family {
                name: Cow::Owned(family),
                kind: Kind::Counter,
                unit,
                help: Cow::Owned(format!(
                    "{help}, per queue pair (top K by recent bytes, and qp=\"rest\")"
                )),
                labels: &FLOW_LABELS,
            }
        })
        .collect()
}

/// The labels of a queue pair's series.
pub const FLOW_LABELS: [&str; 6] = ["src", "dst", "qp", "sport", "dir", "mirror"];

/// Every family of this subject.
pub fn all() -> Vec<Family> {
    let mut out: Vec<Family> = vec![CONNECTIONS.clone()];
    out.extend(counts());
    out
}
