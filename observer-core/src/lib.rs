//! observer-core: what roce-observer concludes from frames, with no kernel, socket or build
//! script: a fleet collector, a notebook or a laptop links it. Frames are given to it (the
//! `roce-observer` crate reads them from the kernel's maps, a capture or a pcap); it returns the
//! report. Layered, each layer using only those before it (`tests/layers.rs` checks it):
//!
//! - [`units`] (durations, link speeds, slot widths, plurals) and [`model`] (the report and
//!   every section's type: serde and observer-common only);
//! - [`aggregate`]: the one aggregation path, to a flow table and counters, and the sightings
//!   of one traffic at several observation points;
//! - [`analysis`]: time series and microbursts, ECMP models, the findings rules, the checklist;
//! - [`render`]: the terminal table, findings, ECMP view, JSON and the HTML page.

pub mod aggregate;
pub mod analysis;
pub mod export;
pub mod model;
pub mod render;
pub mod units;
