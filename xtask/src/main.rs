//! Developer and CI tasks: `cargo xtask setup | test | demo | bench`.
//!
//! `setup` provisions everything the build and the tests need (the nightly toolchain with
//! rust-src, a project-local bpf-linker built against the nightly's own LLVM, the Debian
//! packages the privileged tests call, and a Python virtualenv with the packages the tests
//! import); every other subcommand runs it first and then runs cargo with `target/tools/bin` at
//! the front of PATH, so that aya-build finds that bpf-linker.
//!
//! This crate must not depend on the observer crates: it has to build before bpf-linker exists.

use std::{
    ffi::OsString,
    fs,
    os::unix::fs::{MetadataExt, symlink},
    path::{Path, PathBuf},
    process::{Command, ExitCode, Stdio},
    time::Instant,
};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

const BPF_LINKER_VERSION: &str = "0.13.0";

/// Commands the build and the privileged tests need, and the Debian package that provides each.
const DEBIAN_TOOLS: &[(&str, &str)] = &[
    ("ip", "iproute2"),
    ("tshark", "tshark"),
    ("setpriv", "util-linux"),
    // tests/html_report.rs renders the HTML report in headless Chromium (/usr/bin/chromium).
    ("chromium", "chromium"),
    // tests/deploy.rs: `promtool check rules` and `promtool test rules` on deploy/prometheus.
    // Debian ships promtool only inside the server package; its postinst asks to start
    // prometheus.service, which policy-rc.d (or a container without systemd) declines.
    ("promtool", "prometheus"),
    // Building needs libpcap's headers and library (the `pcap` crate, `--capture DEV`):
    // libpcap-dev ships /usr/bin/pcap-config.
    ("pcap-config", "libpcap-dev"),
    // tests/privileged/deploy_live.rs builds deploy/Containerfile's image (or, without a
    // registry, its runtime stage's equivalent) and runs the sidecar in it.
    ("podman", "podman"),
    // tests/fabric.rs: `fabric --clickhouse` against a real ClickHouse server, loaded by its
    // client as docs/export.md loads the records (Debian's packages start no service here).
    ("clickhouse-server", "clickhouse-server"),
    ("clickhouse-client", "clickhouse-client"),
];

/// Python packages of the tools virtualenv (`target/tools/venv`), each with the module the
/// check imports: tests/deploy.rs parses the Kubernetes manifests with PyYAML;
/// prometheus-client parses the exported OpenMetrics text; chdb is an in-process ClickHouse
/// the fleet records load into; opentelemetry-proto and grpcio make the OTLP receiver of the
/// export tests, on the official protobufs; numpy and scipy are the jobs tests' independent
/// period estimator.
const PYTHON_PACKAGES: &[(&str, &str)] = &[
    ("prometheus-client==0.26.0", "prometheus_client"),
    ("PyYAML==6.0.4", "yaml"),
    ("chdb==4.4.0", "chdb"),
    ("chdb-core==26.9.0", "chdb"),
    ("opentelemetry-proto==1.45.2", "opentelemetry.proto"),
    ("protobuf==7.36.2", "google.protobuf"),
    ("grpcio==1.85.4", "grpc"),
    ("numpy==2.4.6", "numpy"),
    ("scipy==1.17.1", "scipy"),
];

#[derive(Parser)]
#[command(name = "cargo xtask", about = "roce-observer developer and CI tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install/verify the nightly toolchain, rust-src, bpf-linker and the test tools (idempotent).
    Setup,
    /// The build half of setup (nightly, rust-src, bpf-linker; no test tools), then the release
    /// binary: what deploy/Containerfile runs.
    Release,
    /// Setup, then run the workspace tests (extra arguments go to `cargo test`).
    Test {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Setup, build the release binary, and run `roce-observer demo <args>`.
    Demo {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Setup, then run the BPF_PROG_TEST_RUN benchmark (extra arguments go to the bench binary),
    /// then the sustained rate through XDP live frames on one and two CPUs, in place and spread
    /// over CPUs as mirror mode does (bench-rate), then
    /// the replay throughput benchmark on whole and on 160-byte frames (bench-replay), then
    /// the fleet records' cost (bench-export), then `fabric` on a generated k=16 fat-tree
    /// (bench-fabric), then
    /// the spread of direct RoCE and mirror copies over CPUs under RPS (bench-rss), then the
    /// CPU, drain time and memory of `roce-observer run` at 10k, 100k and 1M flows beside the
    /// idle daemon (bench-daemon, about 3 minutes); only --json is passed on to those.
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.cmd) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Cmd) -> Result<ExitCode> {
    let ws = Workspace::locate();
    match cmd {
        Cmd::Setup => {
            setup(&ws)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Release => {
            let vv = nightly_toolchain()?;
            let sysroot = rust_src()?;
            bpf_linker(&ws, &vv, &sysroot)?;
            status(ws.cargo().args([
                "build",
                "--release",
                "--locked",
                "--package",
                "roce-observer-cli",
            ]))
        }
        Cmd::Test { args } => {
            setup(&ws)?;
            // --no-fail-fast: CI sees every failing test binary in one run.
            let workspace = status(
                ws.cargo()
                    .args(["test", "--no-fail-fast", "--workspace"])
                    .args(["--exclude", "observer-ebpf", "--exclude", "xtask"])
                    .args(&args),
            )?;
            let xtask = status(ws.cargo().args(["test", "--package", "xtask"]))?;
            Ok(if workspace != ExitCode::SUCCESS {
                workspace
            } else {
                xtask
            })
        }
        Cmd::Demo { args } => {
            setup(&ws)?;
            let code =
                status(
                    ws.cargo()
                        .args(["build", "--release", "--package", "roce-observer-cli"]),
                )?;
            if code != ExitCode::SUCCESS {
                return Ok(code);
            }
            let bin = ws.target_dir().join("release").join("roce-observer");
            status(
                ws.with_tools_path(&mut Command::new(bin))
                    .arg("demo")
                    .args(&args),
            )
        }
        Cmd::Bench { args } => {
            setup(&ws)?;
            let json: Vec<OsString> = args.iter().filter(|a| *a == "--json").cloned().collect();
            // The kernel benchmark, then the sustained rate through XDP live frames, then
            // offline replay throughput on whole frames and on a
            // header-only (160-byte snaplen) capture as mirrors and sniffers take, then the
            // fleet records' encoding, then `fabric`'s localization at scale, then how
            // receive steering spreads direct RoCE and mirror copies over CPUs, then the
            // daemon's cost by tracked flows; of the extra arguments only --json applies to the
            // runs after the first.
            let runs: [(&str, Vec<OsString>); 8] = [
                ("bench", args),
                ("bench-rate", json.clone()),
                (
                    "bench-replay",
                    [&["--snaplen".into(), "65535".into()][..], &json].concat(),
                ),
                (
                    "bench-replay",
                    [&["--snaplen".into(), "160".into()][..], &json].concat(),
                ),
                ("bench-export", json.clone()),
                ("bench-fabric", json.clone()),
                ("bench-rss", json.clone()),
                ("bench-daemon", json),
            ];
            for (bin, bin_args) in runs {
                let code = status(
                    ws.cargo()
                        .args([
                            "run",
                            "--release",
                            "--package",
                            "integration-tests",
                            "--bin",
                            bin,
                            "--",
                        ])
                        .args(&bin_args),
                )?;
                if code != ExitCode::SUCCESS {
                    return Ok(code);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Paths of the workspace this xtask belongs to (never derived from the cwd).
struct Workspace {
    root: PathBuf,
    tools: PathBuf,
}

impl Workspace {
    fn locate() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lives one level below the workspace root")
            .to_path_buf();
        let tools = root.join("target").join("tools");
        Self { root, tools }
    }

    fn target_dir(&self) -> PathBuf {
        match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => self.root.join(dir),
            None => self.root.join("target"),
        }
    }

    fn tools_bin(&self) -> PathBuf {
        self.tools.join("bin")
    }

    /// PATH with the project tools first, and the sbin directories (where `ip` lives) last if
    /// they are missing.
    fn tools_path(&self) -> OsString {
        let mut dirs = vec![self.tools_bin()];
        let inherited: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        dirs.extend(inherited.iter().cloned());
        for sbin in ["/usr/local/sbin", "/usr/sbin", "/sbin"] {
            if !inherited.iter().any(|d| d == Path::new(sbin)) {
                dirs.push(PathBuf::from(sbin));
            }
        }
        std::env::join_paths(dirs).expect("PATH entries contain no ':'")
    }

    /// The environment every cargo invocation gets: PATH with target/tools/bin first.
    fn with_tools_path<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("PATH", self.tools_path()).current_dir(&self.root)
    }

    /// `cargo` (the one running this xtask), with the tools PATH, in the workspace root.
    fn cargo(&self) -> Command {
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        self.with_tools_path(&mut cmd);
        cmd
    }
}

/// Run with inherited stdio; the child's exit code (1 if it died by a signal).
fn status(cmd: &mut Command) -> Result<ExitCode> {
    let st = cmd
        .status()
        .with_context(|| format!("failed to run {cmd:?}"))?;
    Ok(match st.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}

/// Run, require success, return stdout (stderr is shown only on failure).
fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("failed to run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run with inherited stdout/stderr and require success.
fn checked(cmd: &mut Command) -> Result<()> {
    let st = cmd
        .status()
        .with_context(|| format!("failed to run {cmd:?}"))?;
    if !st.success() {
        bail!("{cmd:?} failed ({st})");
    }
    Ok(())
}

fn setup(ws: &Workspace) -> Result<()> {
    let started = Instant::now();
    let vv = nightly_toolchain()?;
    let sysroot = rust_src()?;
    bpf_linker(ws, &vv, &sysroot)?;
    debian_packages(ws)?;
    python_venv(ws)?;
    println!("setup: done in {:.1}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Step 1: a `nightly` toolchain; returns `rustc +nightly -vV`.
fn nightly_toolchain() -> Result<String> {
    let list = output(Command::new("rustup").args(["toolchain", "list"]))?;
    if !has_nightly(&list) {
        println!("setup: nightly toolchain missing, installing");
        checked(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let vv = output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let release = vv_field(&vv, "release").unwrap_or("unknown");
    let llvm = vv_field(&vv, "LLVM version").unwrap_or("unknown");
    println!("setup: nightly toolchain ok (rustc {release}, LLVM {llvm})");
    Ok(vv)
}

/// Step 2: rust-src for the nightly (build-std=core needs it); returns the nightly sysroot.
fn rust_src() -> Result<PathBuf> {
    let sysroot = PathBuf::from(
        output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?.trim(),
    );
    let core = sysroot.join("lib/rustlib/src/rust/library/core");
    if !core.is_dir() {
        println!("setup: rust-src for nightly missing, installing");
        checked(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
        if !core.is_dir() {
            bail!("rust-src installed but {} does not exist", core.display());
        }
    }
    println!("setup: nightly rust-src ok ({})", core.display());
    Ok(sysroot)
}

/// Step 3: bpf-linker built against the nightly's own libLLVM, in target/tools.
fn bpf_linker(ws: &Workspace, vv: &str, sysroot: &Path) -> Result<()> {
    let llvm_version =
        vv_field(vv, "LLVM version").context("`rustc +nightly -vV` prints no LLVM version")?;
    let major = llvm_major(vv)?;
    let feature = llvm_feature(major);
    let bin = ws.tools_bin().join("bpf-linker");
    let stamp_path = ws.tools.join("bpf-linker.stamp");
    let stamp = stamp_text(vv, &feature);

    if bin.is_file()
        && fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp)
        && Command::new(&bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    {
        println!(
            "setup: bpf-linker {BPF_LINKER_VERSION} ok ({}, LLVM {llvm_version})",
            bin.display()
        );
        return Ok(());
    }

    // The nightly ships one libLLVM.so.<version>; llvm-sys wants <prefix>/lib/libLLVM.so.
    let lib_dir = sysroot.join("lib");
    let mut libs: Vec<String> = fs::read_dir(&lib_dir)
        .with_context(|| format!("listing {}", lib_dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("libLLVM.so."))
        .collect();
    libs.sort();
    let lib_name = match libs.as_slice() {
        [one] => one.clone(),
        [] => bail!(
            "no libLLVM.so.* in {} (LLVM {llvm_version})",
            lib_dir.display()
        ),
        many => bail!("several libLLVM.so.* in {}: {many:?}", lib_dir.display()),
    };

    if let Some(features) = published_features()
        && !features.contains(&feature)
    {
        bail!(
            "bpf-linker {BPF_LINKER_VERSION} has no `{feature}` feature for the nightly's \
             LLVM {llvm_version} (it has: {})",
            features.join(", ")
        );
    }

    let prefix = ws.tools.join(format!("llvm-{major}"));
    let prefix_lib = prefix.join("lib");
    fs::create_dir_all(&prefix_lib)
        .with_context(|| format!("creating {}", prefix_lib.display()))?;
    let target = lib_dir.join(&lib_name);
    for link in ["libLLVM.so", lib_name.as_str()] {
        let link = prefix_lib.join(link);
        if fs::symlink_metadata(&link).is_ok() {
            fs::remove_file(&link).with_context(|| format!("removing {}", link.display()))?;
        }
        symlink(&target, &link).with_context(|| format!("linking {}", link.display()))?;
    }

    println!(
        "setup: building bpf-linker {BPF_LINKER_VERSION} against LLVM {llvm_version} ({lib_name}), about a minute"
    );
    let started = Instant::now();
    let st = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "install",
            "bpf-linker",
            "--force",
            "--version",
            BPF_LINKER_VERSION,
        ])
        .args(["--no-default-features", "--features", &feature, "--root"])
        .arg(&ws.tools)
        .env("LLVM_PREFIX", &prefix)
        .current_dir(&ws.root)
        .stdin(Stdio::null())
        .status()
        .context("failed to run cargo install bpf-linker")?;
    if !st.success() {
        bail!(
            "building bpf-linker {BPF_LINKER_VERSION} with `{feature}` for the nightly's LLVM {llvm_version} failed ({st})"
        );
    }
    fs::write(&stamp_path, &stamp).with_context(|| format!("writing {}", stamp_path.display()))?;
    println!(
        "setup: bpf-linker {BPF_LINKER_VERSION} built in {:.0}s ({})",
        started.elapsed().as_secs_f64(),
        bin.display()
    );
    Ok(())
}

/// The features bpf-linker publishes (`cargo info`), or None when that cannot be asked (offline):
/// then the install itself is the check.
fn published_features() -> Option<Vec<String>> {
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["info", &format!("bpf-linker@{BPF_LINKER_VERSION}")])
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        println!(
            "setup: `cargo info bpf-linker@{BPF_LINKER_VERSION}` failed, trying the build anyway"
        );
        return None;
    }
    let features = parse_cargo_info_features(&String::from_utf8_lossy(&out.stdout));
    (!features.is_empty()).then_some(features)
}

/// Step 4: the commands the privileged tests use.
fn debian_packages(ws: &Workspace) -> Result<()> {
    let path = ws.tools_path();
    let missing: Vec<(&str, &str)> = DEBIAN_TOOLS
        .iter()
        .copied()
        .filter(|(cmd, _)| find_in_path(&path, cmd).is_none())
        .collect();
    if missing.is_empty() {
        let names: Vec<&str> = DEBIAN_TOOLS.iter().map(|(c, _)| *c).collect();
        println!("setup: test tools ok ({})", names.join(", "));
        return Ok(());
    }
    let pkgs: Vec<&str> = missing.iter().map(|(_, p)| *p).collect();
    let cmds: Vec<&str> = missing.iter().map(|(c, _)| *c).collect();
    if !is_root() {
        bail!(
            "missing {} and not root: run `apt-get install {}` as root, or `cargo xtask setup` as root",
            cmds.join(", "),
            pkgs.join(" ")
        );
    }
    println!(
        "setup: installing {} (for {})",
        pkgs.join(" "),
        cmds.join(", ")
    );
    checked(Command::new("apt-get").arg("update").stdin(Stdio::null()))?;
    checked(
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(&pkgs)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null()),
    )?;
    let still: Vec<&str> = cmds
        .iter()
        .copied()
        .filter(|c| find_in_path(&path, c).is_none())
        .collect();
    if !still.is_empty() {
        bail!(
            "installed {} but still cannot find {}",
            pkgs.join(" "),
            still.join(", ")
        );
    }
    println!("setup: test tools ok ({})", cmds.join(", "));
    Ok(())
}

/// Step 5: `target/tools/venv` with PYTHON_PACKAGES, left alone when it already imports them at
/// the pinned versions.
fn python_venv(ws: &Workspace) -> Result<()> {
    let venv = ws.tools.join("venv");
    let python = venv.join("bin").join("python");
    let pins = PYTHON_PACKAGES
        .iter()
        .map(|(pin, _)| *pin)
        .collect::<Vec<_>>()
        .join(", ");
    let check = venv_check_script(PYTHON_PACKAGES);
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", &check])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if ready(&python) {
        println!("setup: python venv ok ({pins})");
        return Ok(());
    }
    if !python.is_file() {
        println!("setup: creating {}", venv.display());
        checked(
            Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .stdin(Stdio::null()),
        )
        .context("creating the tools virtualenv (Debian: apt-get install python3-venv)")?;
    }
    println!("setup: installing {pins} into {}", venv.display());
    checked(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(PYTHON_PACKAGES.iter().map(|(pin, _)| pin))
            .stdin(Stdio::null()),
    )?;
    if !ready(&python) {
        bail!(
            "installed {pins} but `{} -c {check:?}` still fails",
            python.display()
        );
    }
    println!("setup: python venv ok ({pins})");
    Ok(())
}

/// A Python snippet that succeeds when every `name==version` pin is installed at that version
/// and the modules the tests use import.
fn venv_check_script(pins: &[(&str, &str)]) -> String {
    let mut modules: Vec<&str> = pins.iter().map(|(_, module)| *module).collect();
    modules.dedup();
    let mut script = format!("import importlib.metadata as m, {}\n", modules.join(", "));
    for (pin, _) in pins {
        let (name, version) = pin.split_once("==").expect("pins are name==version");
        script.push_str(&format!(
            "assert m.version({name:?}) == {version:?}, {pin:?}\n"
        ));
    }
    script
}

fn find_in_path(path: &OsString, cmd: &str) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|d| d.join(cmd))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
}

/// /proc/self is owned by the effective uid.
fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The stamp next to the bpf-linker binary: what it was built from.
fn stamp_text(vv: &str, feature: &str) -> String {
    format!("bpf-linker {BPF_LINKER_VERSION} --features {feature}\n{vv}")
}

/// A `key: value` line of `rustc -vV`.
fn vv_field<'a>(vv: &'a str, key: &str) -> Option<&'a str> {
    vv.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim())
}

/// The LLVM major version from `rustc -vV` ("LLVM version: 22.1.4" -> 22).
fn llvm_major(vv: &str) -> Result<u32> {
    let version = vv_field(vv, "LLVM version").context("no `LLVM version:` line in `rustc -vV`")?;
    let major = version.split('.').next().unwrap_or_default();
    major
        .parse()
        .with_context(|| format!("cannot parse the LLVM major from `{version}`"))
}

/// The bpf-linker cargo feature for an LLVM major.
fn llvm_feature(major: u32) -> String {
    format!("llvm-{major}")
}

/// Whether `rustup toolchain list` has a toolchain that `+nightly` selects (not a dated one).
fn has_nightly(list: &str) -> bool {
    list.lines()
        .filter_map(|l| l.split_whitespace().next())
        .any(|name| {
            name == "nightly"
                || name
                    .strip_prefix("nightly-")
                    .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
        })
}

/// Feature names from the `features:` block of `cargo info`.
fn parse_cargo_info_features(info: &str) -> Vec<String> {
    info.lines()
        .skip_while(|l| l.trim_end() != "features:")
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .filter_map(|l| {
            let name = l.split('=').next()?.trim().trim_start_matches('+').trim();
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const VV: &str = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)
binary: rustc
commit-hash: e50aa6fba4e63ab34c72bf9acfd2c307c1155d1a
commit-date: 2026-05-19
host: x86_64-unknown-linux-gnu
release: 1.97.0-nightly
LLVM version: 22.1.4
";

    #[test]
    fn llvm_major_and_feature_from_rustc_vv() {
        assert_eq!(llvm_major(VV).unwrap(), 22);
        assert_eq!(llvm_feature(llvm_major(VV).unwrap()), "llvm-22");
        assert_eq!(vv_field(VV, "release"), Some("1.97.0-nightly"));
        assert_eq!(vv_field(VV, "LLVM version"), Some("22.1.4"));
        assert!(llvm_major("rustc 1.0.0\nbinary: rustc\n").is_err());
        assert!(llvm_major("LLVM version: x.1\n").is_err());
    }

    #[test]
    fn nightly_in_toolchain_list() {
        let list =
            "stable-x86_64-unknown-linux-gnu (active, default)\nnightly-x86_64-unknown-linux-gnu\n";
        assert!(has_nightly(list));
        assert!(has_nightly("nightly\n"));
        assert!(!has_nightly(
            "stable-x86_64-unknown-linux-gnu (default)\nnightly-2026-01-01-x86_64-unknown-linux-gnu\n"
        ));
        assert!(!has_nightly("no installed toolchains\n"));
    }

    #[test]
    fn features_from_cargo_info() {
        let info = "bpf-linker #BPF #eBPF #linker #llvm
BPF static linker
version: 0.13.0
features:
 +default          = [llvm-23]
  llvm-23          = [dep:llvm-sys-23]
  llvm-21          = [dep:llvm-sys-21]
  llvm-22          = [dep:llvm-sys-22]
  llvm-link-static = []
  no-llvm-linking  = []
dependencies:
  anyhow@1
";
        let f = parse_cargo_info_features(info);
        assert_eq!(
            f,
            [
                "default",
                "llvm-23",
                "llvm-21",
                "llvm-22",
                "llvm-link-static",
                "no-llvm-linking"
            ]
        );
        assert!(f.contains(&llvm_feature(22)));
        assert!(!f.contains(&llvm_feature(24)));
    }

    #[test]
    fn extra_arguments_are_forwarded_verbatim() {
        let args = |argv: &[&str]| match Cli::try_parse_from(argv).unwrap().cmd {
            Cmd::Test { args } | Cmd::Demo { args } | Cmd::Bench { args } => args,
            Cmd::Setup | Cmd::Release => panic!("not a forwarding subcommand"),
        };
        let cargo_run = ["xtask", "test", "--", "-p", "x", "--", "--nocapture"];
        assert_eq!(args(&cargo_run), ["-p", "x", "--", "--nocapture"]);
        assert_eq!(
            args(&["xtask", "bench", "--", "--repeat", "5"]),
            ["--repeat", "5"]
        );
        assert_eq!(args(&["xtask", "demo", "--json"]), ["--json"]);
        assert!(args(&["xtask", "test"]).is_empty());
    }

    #[test]
    fn venv_check_asserts_every_pin() {
        let script = venv_check_script(&[
            ("prometheus-client==0.26.0", "prometheus_client"),
            ("PyYAML==6.0.4", "yaml"),
        ]);
        assert_eq!(
            script,
            "import importlib.metadata as m, prometheus_client, yaml\n\
             assert m.version(\"prometheus-client\") == \"0.26.0\", \"prometheus-client==0.26.0\"\n\
             assert m.version(\"PyYAML\") == \"6.0.4\", \"PyYAML==6.0.4\"\n"
        );
        assert!(
            PYTHON_PACKAGES
                .iter()
                .all(|(p, _)| p.split_once("==").is_some())
        );
    }

    #[test]
    fn stamp_changes_with_the_toolchain() {
        assert_ne!(
            stamp_text(VV, "llvm-22"),
            stamp_text(&VV.replace("22.1.4", "22.1.5"), "llvm-22")
        );
    }
}
