//! Where frames come from: the kernel programs on live interfaces, capture files, or the
//! generator. Each ends in the same [`crate::aggregate::Aggregate`]. And what a host with an
//! RDMA-offload NIC can tell of its NIC ([`nic`]).

pub mod capture;
pub mod clickhouse;
pub mod live;
pub mod nic;
pub mod prometheus;
pub mod replay;
pub mod synth;
