//! roce-observer: an eBPF/XDP observer for RoCEv2 traffic: where frames come from and the
//! report of a session.
//!
//! The kernel program (observer-ebpf) and this library share one parser and one per-flow update
//! (observer-common). What is concluded from frames (the report model, aggregation, analyses,
//! renderers) is `observer-core`, re-exported here under the same paths; this crate adds
//! (`tests/layers.rs` checks the layers):
//!
//! - [`source`]: where frames come from: [`source::live`] (the kernel programs and their maps),
//!   [`source::replay`] (pcap, pcapng), [`source::synth`] (generated traffic) and
//!   [`source::nic`] (the host's NIC side); and [`lab`] (network-namespace labs for the demo
//!   and the tests);
//! - [`pipeline`]: a report from a source and the analysis options (replay, a live session);
//! - [`records`]: fleet records ([`export`]) written to a directory for ClickHouse.
//!
//! The continuous sidecar (`run`) is the `observer-daemon` crate.

pub use observer_core::{aggregate, analysis, export, model, render, units};

pub mod lab;
pub mod pipeline;
pub mod records;
pub mod source;
pub mod trace;

/// The kernel object built by build.rs (aya-build, bpfel-unknown-none).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/observer"));

/// The test labs' link program (a netns fabric's counters and fault injection; never loaded
/// by the observer), built beside it.
pub static LAB_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lab"));
