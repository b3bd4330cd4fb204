//! Shared helpers of the integration tests and the benchmark binaries, by theme; everything is
//! re-exported at the root (`integration_tests::Scratch`).

mod bench;
mod bpf;
mod cli;
mod metrics;
mod netns;
mod paths;
mod pcap;
mod scratch;

pub use bench::*;
pub use bpf::*;
pub use cli::*;
pub use metrics::*;
pub use netns::*;
pub use paths::*;
pub use pcap::*;
pub use scratch::*;
