//! The fleet records' export (`--otlp-endpoint`): where every record went.

#[allow(unused_imports)]
use super::{Family, Kind, Unit};

pub static RECORDS: Family = Family::new(
    "roce_observer_export_records",
    Kind::Counter,
    None,
    "Fleet records by outcome: sent (the receiver took them), rejected (refused for good, or in part by a partial success), dropped (the send buffer was full: the oldest go first). Records queued or being sent are in roce_observer_export_pending_records",
    &["outcome"],
);

pub static PENDING: Family = Family::new(
    "roce_observer_export_pending_records",
    Kind::Gauge,
    None,
    "Fleet records queued or being sent",
    &[],
);

pub static BUFFER: Family = Family::new(
    "roce_observer_export_buffer",
    Kind::Gauge,
    Some(Unit::Bytes),
    "Encoded records in the send buffer",
    &[],
);

pub static BUFFER_CAPACITY: Family = Family::new(
    "roce_observer_export_buffer_capacity",
    Kind::Gauge,
    Some(Unit::Bytes),
    "The send buffer's cap: beyond it the oldest records are dropped",
    &[],
);

pub static RETRIES: Family = Family::new(
    "roce_observer_export_retries",
    Kind::Counter,
    None,
    "Export requests sent again (the receiver unavailable, overloaded or unreachable)",
    &[],
);

pub static INTERVALS: Family = Family::new(
    "roce_observer_export_intervals",
    Kind::Counter,
    None,
    "Intervals whose records were queued for export",
    &[],
);

pub static UP: Family = Family::new(
    "roce_observer_export_up",
    Kind::Gauge,
    None,
    "1 when the last export request was taken by the receiver, 0 after a failure (the last error is logged)",
    &[],
);

/// Every family of this subject.
pub fn all() -> Vec<Family> {
    vec![
        RECORDS.clone(),
        PENDING.clone(),
        BUFFER.clone(),
        BUFFER_CAPACITY.clone(),
        RETRIES.clone(),
        INTERVALS.clone(),
        UP.clone(),
    ]
}
