//! Builds the kernel programs (observer-ebpf) for bpfel-unknown-none with the nightly toolchain
//! and bpf-linker; `cargo xtask setup` provides both. Only with the `live` feature (default on).
//!
//! Two things aya-build does not do, done here:
//! - It finds bpf-linker only on PATH. `cargo xtask setup` builds it into the project's own
//!   `target/tools/bin`, so a plain `cargo build` (or `cargo install --path observer-cli`) adds
//!   that folder to the PATH of the sub-build, and says in one line to run the setup when there
//!   is no bpf-linker at all.
//! - It forwards every line of the sub-build as a `cargo:warning`, which cargo prints on every
//!   build of this crate (some sixty "Compiling ..." lines). It has no quiet mode, so its
//!   standard output is caught in a file while it runs: the lines cargo acts on
//!   (`rerun-if-...`) are passed on, and the warnings are shown only when the sub-build fails.

use std::{
    env,
    ffi::OsString,
    fs::File,
    io::{Read, Seek, Write},
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    process::ExitCode,
};

const LINKER: &str = "bpf-linker";

fn on_path(path: &OsString) -> bool {
    env::split_paths(path).any(|dir| dir.join(LINKER).is_file())
}

/// The PATH the sub-build runs with: the project's tools folder first when bpf-linker is not
/// on PATH already.
fn path_with_tools(manifest_dir: &Path) -> Result<Option<OsString>, String> {
    let path = env::var_os("PATH").unwrap_or_default();
    if on_path(&path) {
        return Ok(None);
    }
    let tools: PathBuf = manifest_dir.join("../target/tools/bin");
    if tools.join(LINKER).is_file() {
        let dirs = std::iter::once(tools).chain(env::split_paths(&path));
        return env::join_paths(dirs)
            .map(Some)
            .map_err(|e| format!("cannot add the tools folder to PATH: {e}"));
    }
    Err(format!(
        "{LINKER} not found (neither on PATH nor in target/tools/bin): run `cargo xtask setup` once, which builds it there"
    ))
}

/// Runs `f` with this process's standard output going to a temporary file; what it wrote.
fn capture_stdout<T>(out_dir: &Path, f: impl FnOnce() -> T) -> std::io::Result<(T, String)> {
    let mut file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(out_dir.join("ebpf-build.log"))?;
    std::io::stdout().flush()?;
    // SAFETY: dup/dup2 on the process's own standard output and a file it opened; the build
    // script is single-threaded here, and the saved descriptor is restored before returning.
    let saved = unsafe { libc::dup(1) };
    if saved < 0 || unsafe { libc::dup2(file.as_raw_fd(), 1) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let result = f();
    std::io::stdout().flush()?;
    // SAFETY: as above; `saved` is a descriptor this function owns.
    unsafe {
        libc::dup2(saved, 1);
        libc::close(saved);
    }
    let mut text = String::new();
    file.rewind()?;
    file.read_to_string(&mut text)?;
    Ok((result, text))
}

fn main() -> ExitCode {
    println!("cargo:rerun-if-changed=../observer-common/src");
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // Without the `live` feature (replay, synth, the NIC side: no nightly, no bpf-linker) the
    // kernel object is empty, and attaching says the build has no kernel programs.
    if env::var_os("CARGO_FEATURE_LIVE").is_none() {
        let empty = ["observer", "lab"].map(|name| std::fs::write(out_dir.join(name), []));
        return match empty.into_iter().collect::<Result<(), _>>() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: cannot write the empty kernel object: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // aya-build's own switch to build without the kernel programs needs no bpf-linker.
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    match path_with_tools(&manifest_dir).or_else(|e| if skip { Ok(None) } else { Err(e) }) {
        // SAFETY: the build script has no other threads yet.
        Ok(Some(path)) => unsafe { env::set_var("PATH", path) },
        Ok(None) => {}
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let build = || {
        aya_build::build_ebpf(
            [aya_build::Package {
                name: "observer-ebpf",
                root_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../observer-ebpf"),
                ..Default::default()
            }],
            aya_build::Toolchain::default(),
        )
    };
    let (result, printed) = match capture_stdout(&out_dir, build) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot capture the eBPF build's output: {e}");
            return ExitCode::FAILURE;
        }
    };
    let failed = result.is_err();
    for line in printed.lines() {
        if !line.starts_with("cargo:warning=") || failed {
            println!("{line}");
        }
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: building the kernel programs (observer-ebpf) failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}
