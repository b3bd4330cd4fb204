//! Shared helpers of the integration tests and the benchmark binaries, by theme; everything is
//! re-exported at the root (`integration_tests::Scratch`).

mod bench;
mod bpf;
mod chdb;
mod child;
mod cli;
mod clickhouse;
pub mod fabric;
mod maps;
mod metrics;
mod mirror;
mod netns;
mod nic;
mod otlp;
mod paths;
mod pcap;
mod scratch;
mod tools;

pub use bench::*;
pub use bpf::*;
pub use chdb::*;
pub use child::*;
pub use cli::*;
pub use clickhouse::*;
pub use maps::*;
pub use metrics::*;
pub use mirror::*;
pub use netns::*;
pub use nic::*;
pub use otlp::*;
pub use paths::*;
pub use pcap::*;
pub use scratch::*;
pub use tools::*;
