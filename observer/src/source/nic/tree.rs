//! Host trees on disk: readings of a host written as the copied tree `check --root` and
//! `replay --nic-root` read ([`host::write_tree`]), to a directory or a tar.gz of it
//! (`roce-observer snapshot`), and such a tree opened again (a tar.gz unpacked into a temporary
//! directory that goes with the [`Opened`] value).
//!
//! Two readings (`snapshot --interval`) are `before/` and `after/` of one tree. What a reading
//! could not read, and why, is in `absent.json` of its tree, so the copy says what the host said.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::NicError;
use super::host::{self, Snapshot};

/// The subfolders of a tree of two readings.
pub const BEFORE: &str = "before";
pub const AFTER: &str = "after";

/// Whether `path` names a tar.gz (by its name: `.tar.gz` or `.tgz`).
pub fn is_archive(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase());
    name.is_some_and(|n| n.ends_with(".tar.gz") || n.ends_with(".tgz"))
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> NicError + '_ {
    move |source| NicError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes the readings (one, or two: `before/` and `after/`) to `out`: a new directory, or a
/// tar.gz when its name says so (written beside it and renamed into place, so a failure leaves
/// nothing half written). An `out` that exists is refused: a snapshot never overwrites.
pub fn save(out: &Path, readings: &[Snapshot]) -> Result<(), NicError> {
    if out.exists() {
        return Err(NicError::Exists(out.to_path_buf()));
    }
    let write = |dir: &Path| -> std::io::Result<()> {
        match readings {
            [one] => host::write_tree(dir, one),
            many => {
                for (name, s) in [BEFORE, AFTER].iter().zip(many) {
                    host::write_tree(&dir.join(name), s)?;
                }
                Ok(())
            }
        }
    };
    if !is_archive(out) {
        return write(out).map_err(write_err(out));
    }
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let staging = tempfile::Builder::new()
        .prefix(".roce-snapshot-")
        .tempdir_in(parent)
        .map_err(write_err(parent))?;
    let tree = staging.path().join("tree");
    write(&tree).map_err(write_err(&tree))?;
    let partial = staging.path().join("archive.tar.gz");
    let archive = || -> std::io::Result<()> {
        let file = File::create(&partial)?;
        let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        let mut tar = tar::Builder::new(gz);
        tar.follow_symlinks(false);
        tar.append_dir_all(".", &tree)?;
        tar.into_inner()?.finish()?.sync_all()
    };
    archive().map_err(write_err(out))?;
    std::fs::rename(&partial, out).map_err(write_err(out))
}

/// A tree opened for reading: its readings (one, or `before/` and `after/`), and the temporary
/// directory a tar.gz was unpacked into (removed when this is dropped).
#[derive(Debug)]
pub struct Opened {
    pub readings: Vec<PathBuf>,
    _unpacked: Option<tempfile::TempDir>,
}

/// Opens the tree at `path`: a directory, or a tar.gz `snapshot` wrote.
pub fn open(path: &Path) -> Result<Opened, NicError> {
    let (root, unpacked) = if path.is_file() && is_archive(path) {
        let dir = tempfile::Builder::new()
            .prefix("roce-snapshot-")
            .tempdir()
            .map_err(write_err(Path::new("a temporary directory")))?;
        let file = File::open(path).map_err(|source| NicError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
        tar.set_preserve_permissions(false);
        // `unpack` keeps every entry inside the directory (no `..`, no absolute path).
        tar.unpack(dir.path()).map_err(|source| NicError::Archive {
            path: path.to_path_buf(),
            source,
        })?;
        (dir.path().to_path_buf(), Some(dir))
    } else if path.is_dir() {
        (path.to_path_buf(), None)
    } else {
        return Err(NicError::NoTree(path.to_path_buf()));
    };
    let (before, after) = (root.join(BEFORE), root.join(AFTER));
    let readings = if !root.join("sys").exists() && before.is_dir() && after.is_dir() {
        vec![before, after]
    } else {
        vec![root]
    };
    Ok(Opened {
        readings,
        _unpacked: unpacked,
    })
}
