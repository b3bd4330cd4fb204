//! roce-observer: an eBPF/XDP observer for RoCEv2 traffic.
//!
//! The kernel program (observer-ebpf) and this library share one parser and one per-flow update
//! (observer-common). The library is layered, each layer using only those before it
//! (`tests/layers.rs` checks it):
//!
//! - [`units`] (durations, link speeds, slot widths, plurals) and [`model`] (the report and
//!   every section's type: serde and observer-common only);
//! - [`aggregate`]: the one aggregation path, to a flow table and counters;
//! - [`source`]: where frames come from: [`source::live`] (the kernel programs and their maps),
//!   [`source::replay`] (pcap, pcapng) and [`source::synth`] (generated traffic); and [`lab`]
//!   (network-namespace labs for the demo and the tests);
//! - [`analysis`]: time series and microbursts, ECMP models, the findings rules;
//! - [`render`]: the terminal table, findings, ECMP view, JSON and the HTML page;
//! - [`pipeline`]: a report from a source and the analysis options (replay, a live session),
//!   and [`daemon`]: the continuous sidecar (`run`): flow book, OpenMetrics, HTTP, signals.

pub mod aggregate;
pub mod analysis;
pub mod daemon;
pub mod lab;
pub mod model;
pub mod pipeline;
pub mod render;
pub mod source;
pub mod units;

/// The kernel object built by build.rs (aya-build, bpfel-unknown-none).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/observer"));
