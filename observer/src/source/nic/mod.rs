//! The NIC side of a host whose NIC offloads RDMA (its RoCE never crosses the kernel stack, so
//! the wire view is empty there): what the host itself can tell. Every source is optional: what
//! a host lacks is reported absent with the reason, never an error that stops the rest.

use std::path::{Path, PathBuf};

pub mod dcqcn;
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
    #[error("{0:?} is no interface name (1 to 15 bytes, no '/', not '.' or '..')")]
    BadInterface(String),
}

/// An interface name as the kernel allows it (IFNAMSIZ - 1 bytes, no '/', not a dot entry): it
/// becomes a path component.
pub fn check_interface(name: &str) -> Result<(), NicError> {
    let ok = !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && !name.contains('/')
        && !name.contains('\0')
        && name != "."
        && name != "..";
    if ok {
        Ok(())
    } else {
        Err(NicError::BadInterface(name.to_string()))
    }
}

/// The names in a directory, sorted.
fn entries(dir: &Path) -> Result<Vec<String>, NicError> {
    let read = |source| NicError::Read {
        path: PathBuf::from(dir),
        source,
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(read)? {
        let e = e.map_err(read)?;
        out.push(e.file_name().to_string_lossy().into_owned());
    }
    out.sort();
    Ok(out)
}

/// A one-line file, trimmed; none when it cannot be read.
fn line(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// A file holding one number; none when it cannot be read or is none.
fn number(path: &Path) -> Option<u64> {
    line(path).and_then(|v| v.parse().ok())
}
