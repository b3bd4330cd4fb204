//! The NIC side of a host whose NIC offloads RDMA (its RoCE never crosses the kernel stack, so
//! the wire view is empty there): what the host itself can tell. Every source is optional: what
//! a host lacks is reported absent with the reason, never an error that stops the rest.

use std::path::PathBuf;

pub mod rdma;

/// What a host can tell of one source: present, or absent and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability<T> {
    Present(T),
    Absent { reason: String },
}

/// A source that exists but could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NicError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
