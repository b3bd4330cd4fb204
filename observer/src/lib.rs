//! roce-observer: an eBPF/XDP observer for RoCEv2 traffic.
//!
//! The kernel program (observer-ebpf) and this library share one parser and one per-flow update
//! (observer-common). Live capture ([`live`]), synthetic traffic ([`synth`]) and tests all end in
//! the same [`aggregate::Aggregate`], from which [`report`] builds the JSON and terminal reports.

pub mod aggregate;
pub mod bpfsys;
pub mod cli;
pub mod daemon;
pub mod ecmp;
pub mod findings;
pub mod html;
pub mod lab;
pub mod live;
pub mod replay;
pub mod report;
pub mod series;
pub mod synth;

/// The kernel object built by build.rs (aya-build, bpfel-unknown-none).
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/observer"));
