//! What a newcomer meets first, tried as they would: a plain `cargo build` after the setup, the
//! README's first look, outputs that never overwrite inputs, `| head`.

use std::{
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use integration_tests::{Scratch, output, workspace_root};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// PATH with no bpf-linker on it: a folder that holds one (the project's tools folder, or
/// `~/.cargo/bin` beside cargo and rustup) is replaced by a copy of its links without it.
fn path_without_bpf_linker(scratch: &Path) -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .enumerate()
        .map(|(i, d)| {
            if !d.join("bpf-linker").exists() {
                return d;
            }
            let shadow = scratch.join(format!("path-{i}"));
            let _ = std::fs::create_dir_all(&shadow);
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.file_name() != "bpf-linker" {
                    let _ = std::os::unix::fs::symlink(e.path(), shadow.join(e.file_name()));
                }
            }
            shadow
        })
        .collect();
    std::env::join_paths(dirs).unwrap().into_string().unwrap()
}

/// The tracked sources of the workspace copied to `dir` (a fresh clone's files).
fn copy_sources(dir: &Path) {
    let root = workspace_root();
    let (status, files, err) = output(Command::new("git").current_dir(&root).args([
        "ls-files",
        "-z",
        "--",
        ".",
        ":!tests/golden",
    ]));
    assert!(status.success(), "git ls-files: {err}");
    for f in files.split('\0').filter(|f| !f.is_empty()) {
        let to = dir.join(f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let from = root.join(f);
        if from.is_file() {
            std::fs::copy(&from, &to).unwrap();
        }
    }
}

/// Runs `cmd` (cargo, or a wrapper of it) in the copy `dir` as a newcomer would: no bpf-linker
/// on PATH, the target directory `target/TARGET` of the workspace; success and what it printed.
fn run_cargo(mut cmd: Command, dir: &Path, target: &str) -> (bool, String) {
    let out = cmd
        .current_dir(dir)
        .env("PATH", path_without_bpf_linker(dir.parent().unwrap()))
        .env_remove("AYA_BUILD_SKIP")
        .env(
            "CARGO_TARGET_DIR",
            workspace_root().join("target").join(target),
        )
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .output()
        .expect("running cargo (through setpriv, from util-linux, as root)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `cargo check -p roce-observer` in the copy, with the build script (and so the kernel
/// programs' build) run, and no bpf-linker on PATH.
fn cargo_check(dir: &Path) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["check", "--package", "roce-observer"]);
    run_cargo(cmd, dir, "newcomer-check")
}

#[test]
fn a_plain_cargo_build_finds_the_setup_bpf_linker_or_says_to_run_the_setup() {
    let tools = workspace_root().join("target/tools");
    if !tools.join("bin/bpf-linker").is_file() {
        panic!("no target/tools/bin/bpf-linker: cargo xtask test runs the setup first");
    }
    let scratch = Scratch::new("newcomer-build");
    let dir = scratch.path("ws");
    copy_sources(&dir);

    // Before the setup: one line saying what to do, no backtrace.
    let (ok, text) = cargo_check(&dir);
    assert!(!ok, "{text}");
    assert!(
        text.contains(
            "bpf-linker not found (neither on PATH nor in target/tools/bin): run `cargo xtask setup` once"
        ),
        "{text}"
    );
    assert!(!text.contains("stack backtrace"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains("bpf-linker")).count(),
        1,
        "{text}"
    );

    // After it (its tools folder in place): the build works without PATH changes, and the
    // kernel programs' sub-build says nothing.
    std::fs::create_dir_all(dir.join("target")).unwrap();
    std::os::unix::fs::symlink(&tools, dir.join("target/tools")).unwrap();
    let (ok, text) = cargo_check(&dir);
    assert!(ok, "{text}");
    assert!(
        !text.contains("warning: roce-observer@"),
        "the eBPF sub-build's lines leak into the build output:\n{text}"
    );

    // When the kernel programs do not build, their compiler's messages are shown.
    let main = dir.join("observer-ebpf/src/main.rs");
    let mut source = std::fs::read_to_string(&main).unwrap();
    source.push_str("\ncompile_error!(\"newcomer test: broken on purpose\");\n");
    std::fs::write(&main, source).unwrap();
    let (ok, text) = cargo_check(&dir);
    assert!(!ok, "{text}");
    assert!(text.contains("newcomer test: broken on purpose"), "{text}");
    assert!(
        text.contains("building the kernel programs (observer-ebpf) failed"),
        "{text}"
    );
}

/// `cargo ARGS` in the copy `dir` as a newcomer without the kernel toolchain runs it: no
/// bpf-linker on PATH, the stable toolchain, and (as root) every capability dropped.
fn cargo_plain(dir: &Path, target: &str, args: &[&str]) -> (bool, String) {
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--inh-caps=-all", "--bounding-set=-all", "--"])
            .arg(env!("CARGO"));
        c
    } else {
        Command::new(env!("CARGO"))
    };
    cmd.args(args)
        .args(["--offline", "--locked"])
        .env("RUSTUP_TOOLCHAIN", "stable");
    run_cargo(cmd, dir, target)
}

/// A fresh copy without the kernel toolchain (no bpf-linker on PATH, stable only, no
/// capability): the core's tests pass, and `roce-observer` builds without its `live` feature,
/// its kernel object empty.
#[test]
fn the_core_and_the_sources_build_without_the_kernel_toolchain() {
    let scratch = Scratch::new("newcomer-core");
    let dir = scratch.path("ws");
    copy_sources(&dir);
    let (ok, text) = cargo_plain(&dir, "newcomer-core", &["test", "-p", "observer-core"]);
    assert!(ok, "{text}");
    assert!(text.contains("test result: ok"), "{text}");
    assert!(!text.contains("observer-ebpf"), "{text}");
    let (ok, text) = cargo_plain(
        &dir,
        "newcomer-nolive",
        &["build", "-p", "roce-observer", "--no-default-features"],
    );
    assert!(ok, "{text}");
    // The object of this build: the newest (a reused target directory keeps older ones).
    let build = workspace_root().join("target/newcomer-nolive/debug/build");
    let newest = std::fs::read_dir(&build)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("roce-observer-")
        })
        .filter_map(|e| std::fs::metadata(e.path().join("out/observer")).ok())
        .max_by_key(|m| m.modified().ok())
        .expect("a kernel object written by the build script");
    assert_eq!(
        newest.len(),
        0,
        "the kernel object of a build without `live`"
    );
}

/// The README's first look: the capture it names is the demo scenario, and the output it shows
/// is what the command prints.
#[test]
fn the_readme_first_look_shows_what_replay_prints() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        (150..=250).contains(&lines),
        "README.md is a front page of 150-250 lines, not {lines}"
    );
    let first_block = readme.split("```").nth(1).unwrap_or_default();
    assert!(
        first_block.contains("cargo xtask demo") && first_block.contains("cargo xtask test"),
        "the README's first commands are the demo and the tests:\n{first_block}"
    );

    let scratch = Scratch::new("newcomer-readme");
    let synth = scratch.path("demo.pcap");
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["synth", "--scenario", "demo", "-o"])
            .arg(&synth),
    );
    assert!(status.success(), "{err}");
    assert!(
        std::fs::read(&synth).unwrap() == std::fs::read(root.join("examples/demo.pcap")).unwrap(),
        "examples/demo.pcap is not `synth --scenario demo` any more: write it again"
    );

    let (status, printed, err) = output(
        Command::new(CLI)
            .current_dir(&root)
            .args(["replay", "examples/demo.pcap"]),
    );
    assert!(status.success(), "{err}");
    let marker = "<!-- OUTPUT: replay examples/demo.pcap -->\n```\n";
    let at = readme
        .find(marker)
        .expect("the README marks the output block")
        + marker.len();
    let shown = &readme[at..at + readme[at..].find("```").unwrap()];
    assert_eq!(
        shown, printed,
        "README.md's output block differs from `roce-observer replay examples/demo.pcap`"
    );
}

#[test]
fn no_output_flag_overwrites_an_input() {
    let scratch = Scratch::new("newcomer-overwrite");
    let cap = scratch.path("cap.pcap");
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["synth", "--scenario", "rule-loss", "-o"])
            .arg(&cap),
    );
    assert!(status.success(), "{err}");
    let before = std::fs::read(&cap).unwrap();
    let rules = scratch.file("rules.toml", "[loss]\n");
    let link = scratch.path("link.pcap");
    std::os::unix::fs::symlink(&cap, &link).unwrap();
    let config = scratch.file("run.toml", "iface = [\"lo\"]\n");

    // (arguments, the input the output would overwrite); the scratch paths have no blanks.
    let (cap_s, link_s) = (cap.display(), link.display());
    let (rules_s, config_s) = (rules.display(), config.display());
    assert!(
        !scratch
            .path("")
            .to_string_lossy()
            .contains(char::is_whitespace)
    );
    let cases: Vec<(String, &Path)> = vec![
        (format!("replay {cap_s} --html {cap_s}"), &cap),
        // Another path to the same file.
        (format!("replay {cap_s} --html {link_s}"), &cap),
        (
            format!("replay {cap_s} --rules {rules_s} --html {rules_s}"),
            &rules,
        ),
        (
            format!("diagnose --iface lo --rules {rules_s} --html {rules_s}"),
            &rules,
        ),
        (
            format!("run --config {config_s} --jsonl {config_s}"),
            &config,
        ),
    ];
    for (args, input) in cases {
        let kept = std::fs::read(input).unwrap();
        let (status, out, err) = output(Command::new(CLI).args(args.split_whitespace()));
        assert_eq!(status.code(), Some(2), "{args:?}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(
            err.starts_with("roce-observer: error: ") && err.contains("refusing to overwrite it"),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "{args:?}: {out}");
        assert_eq!(
            std::fs::read(input).unwrap(),
            kept,
            "{args:?}: input changed"
        );
    }
    assert_eq!(std::fs::read(&cap).unwrap(), before);

    // Standard input redirected from the capture is the capture.
    let out = Command::new(CLI)
        .args(["replay", "-", "--html"])
        .arg(&cap)
        .stdin(std::fs::File::open(&cap).unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("refusing to overwrite it"), "{err}");
    assert_eq!(std::fs::read(&cap).unwrap(), before);

    // A new file, or a device, is written as before.
    let html = scratch.path("report.html");
    let (status, _, err) = output(
        Command::new(CLI)
            .arg("replay")
            .arg(&cap)
            .arg("--html")
            .arg(&html),
    );
    assert!(status.success(), "{err}");
    assert!(
        std::fs::read_to_string(&html)
            .unwrap()
            .starts_with("<!DOCTYPE html>")
    );
    let (status, _, err) = output(
        Command::new(CLI)
            .arg("replay")
            .arg(&cap)
            .args(["--html", "/dev/null"]),
    );
    assert!(status.success(), "{err}");
}

/// Reads `keep` bytes of `args`' standard output, closes the pipe, and returns the exit
/// status and standard error.
fn read_then_close(args: &[&str], dir: &Path, keep: usize) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(CLI)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = vec![0u8; keep];
    stdout.read_exact(&mut buf).unwrap();
    drop(stdout);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (child.wait().unwrap(), err)
}

#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    let scratch = Scratch::new("newcomer-pipe");
    let (status, _, err) = output(Command::new(CLI).current_dir(scratch.path("")).args([
        "synth",
        "--scenario",
        "many-qps",
        "-o",
        "many.pcap",
    ]));
    assert!(status.success(), "{err}");
    // Each writes far more than a pipe holds (64 KiB), so the writer meets the closed pipe.
    for args in [
        &["replay", "many.pcap", "--json", "--no-progress"][..],
        &["replay", "many.pcap", "--top", "100000", "--no-color"],
        &["synth", "--scenario", "many-qps", "-o", "-"],
        &["ecmp", "--uplinks", "4", "--pcap", "many.pcap", "--json"],
        &[
            "replay",
            "many.pcap",
            "--html",
            "/dev/stdout",
            "--no-progress",
        ],
        &["synth", "--scenario", "many-qps", "-o", "/dev/stdout"],
    ] {
        let (status, err) = read_then_close(args, &scratch.path(""), 100);
        assert!(status.success(), "{args:?}: {status}: {err}");
        assert!(err.is_empty(), "{args:?}: nothing on stderr, not: {err}");
    }
}
