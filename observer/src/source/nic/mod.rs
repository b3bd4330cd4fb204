//! The NIC side of a host whose NIC offloads RDMA (its RoCE never crosses the kernel stack, so
//! the wire view is empty there): what the host itself can tell. Every source is optional: what
//! a host lacks is reported absent with the reason, never an error that stops the rest.

use std::path::{Path, PathBuf};

pub mod dcb;
pub mod dcqcn;
pub mod ethtool;
pub mod host;
pub mod link;
pub mod optics;
pub mod process;
pub mod rdma;
pub mod rdma_netlink;
pub mod tree;
pub mod window;

mod netlink;

/// What a host can tell of one source: present, or absent and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Availability<T> {
    Present(T),
    Absent { reason: String },
}

impl<T> Availability<T> {
    /// What is present, if it is.
    pub fn present(&self) -> Option<&T> {
        match self {
            Self::Present(v) => Some(v),
            Self::Absent { .. } => None,
        }
    }

    /// Present, or why not.
    pub fn reason(&self) -> Result<(), String> {
        match self {
            Self::Present(_) => Ok(()),
            Self::Absent { reason } => Err(reason.clone()),
        }
    }
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
    #[error("cannot open a socket for the ethtool ioctl")]
    Socket(#[source] std::io::Error),
    #[error("{iface}: {command} failed")]
    Ethtool {
        iface: String,
        command: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{iface}: the driver's statistics changed while read, twice ({command} gave {got} entries, the count was {expected})"
    )]
    StatsChanged {
        iface: String,
        command: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{iface}: the driver reports {count} statistics, more than {max}: refused")]
    TooManyStats {
        iface: String,
        count: usize,
        max: usize,
    },
    #[error("line {line}: {reason}: {text:?}")]
    BadLine {
        line: usize,
        text: String,
        reason: &'static str,
    },
    #[error("no \"driver:\" line with a driver name")]
    NoDriver,
    #[error("no interface {0}")]
    NoInterface(String),
    #[error("no RDMA device {0}")]
    NoRdmaDevice(String),
    #[error("netlink: {what}")]
    Netlink {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed netlink reply to {what}: {detail}")]
    Malformed { what: String, detail: String },
    #[error("{} is not the expected JSON", path.display())]
    Fixture {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} exists: refusing to write over it", .0.display())]
    Exists(PathBuf),
    #[error("{}: not a host tree (a directory, or a .tar.gz of one)", .0.display())]
    NoTree(PathBuf),
    #[error("{}: cannot unpack", path.display())]
    Archive {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: cannot parse", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: Box<NicError>,
    },
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

/// A file of a copied tree: its text, or absent (naming it) when it does not exist.
fn recorded(path: &Path) -> Result<Availability<String>, NicError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Availability::Present(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Availability::Absent {
            reason: format!("{} missing", path.display()),
        }),
        Err(source) => Err(NicError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A one-line file, trimmed; none when it cannot be read.
fn line(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// A file holding one number; none when it cannot be read or is none (also live mode's reader
/// of a netdev's sysfs counters).
pub(crate) fn number(path: &Path) -> Option<u64> {
    line(path).and_then(|v| v.parse().ok())
}
