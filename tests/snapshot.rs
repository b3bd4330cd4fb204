//! `roce-observer snapshot` round trips: a host tree written by `snapshot` (a directory or a
//! tar.gz, one reading or two) reads back exactly as the tree it was taken from, through
//! `check --root` (its whole JSON) and `replay --nic-root` (the report's `nic` section and
//! findings). Bad outputs and inputs are one-line errors. A snapshot of this host's veth (which
//! needs root): privileged/snapshot_live.rs.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::{Scratch, os, output, workspace_root};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

fn good() -> (PathBuf, PathBuf) {
    let g = workspace_root().join("tests/fixtures/hosts/good");
    (g.join("before"), g.join("after"))
}

/// Runs the CLI; (exit code, stdout, stderr).
fn cli(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let (status, out, err) = output(Command::new(CLI).args(args));
    (status.code().expect("exit code"), out, err)
}

/// `snapshot --root R... OUT`, which must succeed.
fn snapshot(roots: &[&Path], out: &Path) {
    let mut args = vec![os("snapshot")];
    for r in roots {
        args.extend([os("--root"), r.as_os_str()]);
    }
    args.push(out.as_os_str());
    let (code, _, err) = cli(&args);
    assert_eq!(code, 0, "snapshot {roots:?}: {err}");
    assert!(err.contains("wrote"), "{err}");
}

/// `check --json --root R...`: (exit code, the JSON text).
fn check(roots: &[&Path]) -> (i32, String) {
    let mut args = vec![os("check"), os("--json")];
    for r in roots {
        args.extend([os("--root"), r.as_os_str()]);
    }
    let (code, out, err) = cli(&args);
    assert!(code == 0 || code == 1, "check {roots:?}: {err}");
    (code, out)
}

/// Every fixture tree, one reading and two, through a directory and a tar.gz: `check` of the
/// snapshot is `check` of the tree, byte for byte; a tree copy with a changed setting too.
#[test]
fn snapshot_then_check_equals_check_of_every_fixture_tree() {
    let scratch = Scratch::new("snapshot-fixtures");
    let (before, after) = good();
    let sysfs = workspace_root().join("tests/fixtures/sysfs");
    // A copy that fails an item (PFC off on the RoCE priority).
    let bad = scratch.path("bad");
    std::fs::create_dir_all(&bad).unwrap();
    for (from, to) in [(&before, "before"), (&after, "after")] {
        let status = Command::new("cp")
            .arg("-r")
            .arg(from)
            .arg(bad.join(to))
            .status()
            .unwrap();
        assert!(status.success());
    }
    for side in ["before", "after"] {
        let dcb = bad.join(side).join("dcb/ens1f0np0.json");
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&dcb).unwrap()).unwrap();
        v["pfc_enabled"] = 0.into();
        std::fs::write(&dcb, v.to_string()).unwrap();
    }
    let (bad_before, bad_after) = (bad.join("before"), bad.join("after"));
    let cases: Vec<(&str, Vec<&Path>)> = vec![
        ("good, two readings", vec![&before, &after]),
        ("good, one reading", vec![&before]),
        ("sysfs, one reading", vec![&sysfs]),
        ("pfc off, two readings", vec![&bad_before, &bad_after]),
    ];
    for (i, (what, roots)) in cases.iter().enumerate() {
        let want = check(roots);
        for out in [
            scratch.path(&format!("snap{i}")),
            scratch.path(&format!("snap{i}.tar.gz")),
        ] {
            snapshot(roots, &out);
            let got = check(&[&out]);
            assert_eq!(got, want, "{what} through {}", out.display());
        }
    }
    let (code, _) = check(&[&bad_before, &bad_after]);
    assert_eq!(code, 1, "the changed copy fails");
}

/// `replay --nic-root` of a snapshot of two readings equals it of the two trees.
#[test]
fn replay_of_a_snapshot_equals_replay_of_the_trees() {
    let scratch = Scratch::new("snapshot-replay");
    let (before, after) = good();
    let pcap = scratch.path("c.pcap");
    let (code, _, err) = cli(&[
        os("synth"),
        os("--scenario"),
        os("rule-nic-ecn-without-cnp"),
        os("-o"),
        pcap.as_os_str(),
    ]);
    assert_eq!(code, 0, "{err}");
    let snap = scratch.path("host.tgz");
    snapshot(&[&before, &after], &snap);
    let replay = |roots: &[&Path]| {
        let mut args = vec![os("replay"), pcap.as_os_str(), os("--json")];
        for r in roots {
            args.extend([os("--nic-root"), r.as_os_str()]);
        }
        let (code, out, err) = cli(&args);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        (v["nic"].clone(), v["findings"].clone(), v["checks"].clone())
    };
    let want = replay(&[&before, &after]);
    assert!(want.0.is_object(), "a nic section");
    assert_eq!(replay(&[&snap]), want);
}

/// An output that exists, one inside the input, a broken tar.gz, a path that is no tree and
/// three trees are one-line errors; nothing is written.
#[test]
fn bad_outputs_and_inputs_are_one_line_errors() {
    let scratch = Scratch::new("snapshot-errors");
    let (before, after) = good();
    let exists = scratch.file("exists.tar.gz", "x");
    let broken = scratch.file("broken.tar.gz", "not gzip at all");
    let inside = before.join("new-snapshot");
    for (args, want) in [
        (
            vec![
                os("snapshot"),
                os("--root"),
                before.as_os_str(),
                exists.as_os_str(),
            ],
            format!("{} exists: refusing to write over it", exists.display()),
        ),
        (
            vec![
                os("snapshot"),
                os("--root"),
                before.as_os_str(),
                inside.as_os_str(),
            ],
            format!(
                "{} is an input of this run (--root {}): refusing to write there",
                inside.display(),
                before.display()
            ),
        ),
        (
            vec![os("check"), os("--root"), broken.as_os_str()],
            format!("{}: cannot unpack", broken.display()),
        ),
        (
            vec![os("check"), os("--root"), exists.as_os_str()],
            format!("{}: cannot unpack", exists.display()),
        ),
        (
            vec![
                os("snapshot"),
                os("--root"),
                before.as_os_str(),
                os("--root"),
                after.as_os_str(),
                os("--root"),
                before.as_os_str(),
                scratch.path("three").into_os_string().leak(),
            ],
            "--root: give one tree, or two readings (before and after)".to_string(),
        ),
    ] {
        let (code, out, err) = cli(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(out.is_empty(), "{out}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].starts_with("roce-observer: error: "), "{err}");
        assert!(lines[0].contains(&want), "{err} / {want}");
    }
    assert!(!inside.exists());
    assert!(!scratch.path("three").exists());
}
