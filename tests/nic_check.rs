//! `roce-observer check` through the real binary, on copied trees of a host (see docs/nic.md):
//! `tests/fixtures/hosts/good` is a well-configured mlx5 host read twice a second apart, on which
//! every item passes or says why it cannot; each test changes one file of a copy, as a wrong
//! setting or a moving counter would, and the item that judges it fails (exit status 1), with
//! the evidence naming what changed. No privileges needed.

use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::{Scratch, output, workspace_root};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");
const IF: &str = "ens1f0np0";

/// A copy of the good host's two readings in a scratch directory: (before, after).
fn copy(dir: &Scratch) -> (PathBuf, PathBuf) {
    let src = workspace_root().join("tests/fixtures/hosts/good");
    let dst = dir.path("host");
    copy_dir(&src, &dst);
    (dst.join("before"), dst.join("after"))
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// `check --json --root BEFORE --root AFTER ARGS`: (exit code, the items as (item, status,
/// evidence)).
fn check(before: &Path, after: &Path, args: &[&str]) -> (i32, Vec<(String, String, String)>) {
    let (status, out, err) = output(
        Command::new(CLI)
            .args(["check", "--json", "--root"])
            .arg(before)
            .arg("--root")
            .arg(after)
            .args(args),
    );
    let code = status.code().expect("exit code");
    assert!(code == 0 || code == 1, "check {args:?}: {code}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    assert_eq!(v["schema"], "roce-observer/check/v1");
    let items = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["item"].as_str().unwrap().to_string(),
                i["status"].as_str().unwrap().to_string(),
                i["evidence"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (code, items)
}

fn item<'a>(items: &'a [(String, String, String)], name: &str) -> (&'a str, &'a str) {
    let i = items
        .iter()
        .find(|i| i.0 == name)
        .unwrap_or_else(|| panic!("no item {name}: {items:?}"));
    (&i.1, &i.2)
}

/// Runs check on the changed copy and asserts that exactly `name` failed, with `evidence` in
/// its evidence.
fn fails_alone(before: &Path, after: &Path, args: &[&str], name: &str, evidence: &str) {
    let (code, items) = check(before, after, args);
    let failed: Vec<&str> = items
        .iter()
        .filter(|i| i.1 == "fail")
        .map(|i| i.0.as_str())
        .collect();
    assert_eq!(failed, [name], "{args:?}: {items:?}");
    assert_eq!(code, 1, "a failed item is exit status 1");
    let (_, e) = item(&items, name);
    assert!(e.contains(evidence), "{name}: {e:?} lacks {evidence:?}");
}

fn edit(path: &Path, f: impl FnOnce(String) -> String) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::write(path, f(text)).unwrap();
}

/// Adds `by` to the counter `name` of an `ethtool -S` text.
fn bump_stat(after: &Path, name: &str, by: u64) {
    edit(&after.join("ethtool").join(IF).join("statistics"), |t| {
        t.lines()
            .map(|l| match l.trim().split_once(": ") {
                Some((n, v)) if n == name => {
                    format!("     {n}: {}", v.parse::<u64>().unwrap() + by)
                }
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    });
}

/// Changes the DCB settings of both readings.
fn dcb(before: &Path, after: &Path, f: impl Fn(&mut Value)) {
    for root in [before, after] {
        edit(&root.join("dcb").join(format!("{IF}.json")), |t| {
            let mut v: Value = serde_json::from_str(&t).unwrap();
            f(&mut v);
            v.to_string()
        });
    }
}

fn hw_counter(root: &Path, name: &str) -> PathBuf {
    root.join("sys/class/infiniband/mlx5_0/ports/1/hw_counters")
        .join(name)
}

#[test]
fn a_well_configured_host_passes_every_item_it_can_judge() {
    let dir = Scratch::new("check-good");
    let (before, after) = copy(&dir);
    let (code, items) = check(&before, &after, &[]);
    assert_eq!(code, 0, "{items:?}");
    let names: Vec<&str> = items.iter().map(|i| i.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "pfc",
            "trust-dscp",
            "cnp-trust",
            "ecn",
            "cnp-marking",
            "pause-storms",
            "lossless-discards",
            "ets",
            "pfc-watchdog",
            "buffer",
            "dcqcn-params",
            "arp-sysctls",
            "link-errors",
            "optics",
            "mtu",
            "firmware",
            "transport-errors",
            "cnp-sent",
            "pcie",
            "gpu-affinity",
            "roce-mode",
        ]
    );
    for (name, status, evidence) in &items {
        // No --firmware: nothing to compare the firmware with (one device of its model); no
        // --expect: no DCQCN parameters to compare with; one RoCE netdev: the ARP sysctls do
        // not matter.
        let want = match name.as_str() {
            "firmware" | "dcqcn-params" | "arp-sysctls" => "not-applicable",
            _ => "pass",
        };
        assert_eq!(status, want, "{name}: {evidence}");
    }
    assert_eq!(item(&items, "pfc").1, "PFC on priority 3 only");
    assert_eq!(
        item(&items, "firmware").1,
        "firmware 28.39.1002, driver mlx5_core 6.18.0 (give --firmware to compare with the fleet's)"
    );
    // With the fleet's MTU and firmware they pass; the terminal lines say the same.
    let (code, items) = check(
        &before,
        &after,
        &["--mtu", "9000", "--firmware", "28.39.1002"],
    );
    assert_eq!(code, 0);
    assert_eq!(item(&items, "mtu").0, "pass");
    assert_eq!(item(&items, "firmware").0, "pass");
    let (status, out, _) = output(
        Command::new(CLI)
            .args(["check", "--root"])
            .arg(&before)
            .arg("--root")
            .arg(&after),
    );
    assert!(status.success());
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")
                == "PASS pfc ens1f0np0 PFC on priority 3 only"),
        "{out}"
    );
    assert!(out.ends_with("check: nothing failed (21 items)\n"), "{out}");
    assert_eq!(
        item(&items, "cnp-sent").1,
        "in 1.0 s: port 1: 400 marked, 380 CNPs sent; no CNP ignored"
    );
}

#[test]
fn each_configuration_item_fails_on_its_own_mistake() {
    let dir = Scratch::new("check-config");
    // PFC on priorities 0, 3 and 4.
    let (b, a) = copy(&dir);
    dcb(&b, &a, |v| v["pfc_enabled"] = 0b0001_1001.into());
    fails_alone(&b, &a, &[], "pfc", "PFC on priorities 0, 3, 4");
    // PFC on another priority than RoCE's.
    dcb(&b, &a, |v| v["pfc_enabled"] = 0b0001_0000.into());
    fails_alone(&b, &a, &[], "pfc", "not on the RoCE priority 3");
    // Lossy RoCE meant, PFC on.
    let (b, a) = copy(&dir);
    fails_alone(&b, &a, &["--lossy"], "pfc", "meant to run lossy");
    // RoCE's DSCP to priority 0; the CNP's missing from the APP table.
    dcb(&b, &a, |v| {
        v["dscp_prio"] = serde_json::json!([[26, 0], [48, 6]])
    });
    fails_alone(
        &b,
        &a,
        &[],
        "trust-dscp",
        "RoCE DSCP 26 → priority 0, not 3",
    );
    dcb(&b, &a, |v| v["dscp_prio"] = serde_json::json!([[26, 3]]));
    fails_alone(
        &b,
        &a,
        &[],
        "cnp-trust",
        "CNP DSCP 48 has no APP table entry",
    );
    // Classified by PCP: the DSCP items do not apply.
    let (code, items) = check(&b, &a, &["--trust", "pcp"]);
    assert_eq!(code, 0);
    assert_eq!(item(&items, "cnp-trust").0, "not-applicable");
    // The notification point off on priority 3.
    let (b, a) = copy(&dir);
    for root in [&b, &a] {
        std::fs::write(
            root.join("sys/class/net")
                .join(IF)
                .join("ecn/roce_np/enable/3"),
            "0\n",
        )
        .unwrap();
    }
    fails_alone(
        &b,
        &a,
        &[],
        "ecn",
        "no CNP is sent for ECN marks on priority 3",
    );
    // CNPs marked with DSCP 46.
    let (b, a) = copy(&dir);
    std::fs::write(
        a.join("sys/class/net")
            .join(IF)
            .join("ecn/roce_np/cnp_dscp"),
        "46\n",
    )
    .unwrap();
    fails_alone(
        &b,
        &a,
        &[],
        "cnp-marking",
        "CNPs sent with DSCP 46, 802.1p priority 6, not DSCP 48",
    );
    // The fleet's MTU and firmware.
    let (b, a) = copy(&dir);
    fails_alone(
        &b,
        &a,
        &["--mtu", "4200"],
        "mtu",
        "ens1f0np0 9000 (RoCE path MTU up to 4096), not the fleet's 4200",
    );
    fails_alone(
        &b,
        &a,
        &["--firmware", "28.40.1000"],
        "firmware",
        "not the fleet's 28.40.1000",
    );
    // No DCB settings at all: unknown, with the reason, and not a failure.
    std::fs::remove_file(a.join("dcb").join(format!("{IF}.json"))).unwrap();
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0);
    let (s, e) = item(&items, "pfc");
    assert_eq!(s, "unknown");
    assert!(e.contains("dcb/ens1f0np0.json missing"), "{e}");
}

#[test]
fn each_counter_item_fails_when_its_counters_move_in_the_window() {
    let dir = Scratch::new("check-counters");
    let (b, a) = copy(&dir);
    bump_stat(&a, "tx_pause_storm_error_events", 1);
    fails_alone(
        &b,
        &a,
        &[],
        "pause-storms",
        "tx_pause_storm_error_events +1",
    );
    // Discards on the lossy priority 0 are no failure; on the lossless 3 they are.
    let (b, a) = copy(&dir);
    bump_stat(&a, "rx_prio0_buf_discard", 5000);
    let (code, items) = check(&b, &a, &[]);
    assert_eq!((code, item(&items, "lossless-discards").0), (0, "pass"));
    // mlx5 counts congestion discards per traffic class; ETS maps priority 3 to class 3.
    bump_stat(&a, "rx_prio3_cong_discard", 7);
    fails_alone(
        &b,
        &a,
        &[],
        "lossless-discards",
        "traffic class 3 congestion: 7 discarded",
    );
    // out_of_sequence wraps its 32 bits: 0xFFFFFFFA to 5 is 11 more.
    let (b, a) = copy(&dir);
    std::fs::write(hw_counter(&b, "out_of_sequence"), "4294967290\n").unwrap();
    std::fs::write(hw_counter(&a, "out_of_sequence"), "5\n").unwrap();
    fails_alone(
        &b,
        &a,
        &[],
        "transport-errors",
        "port 1 out_of_sequence +11",
    );
    // A 32-bit counter going back from the lower half of its range is a reset, not a wrap:
    // counted since the reset.
    let (b, a) = copy(&dir);
    std::fs::write(hw_counter(&a, "local_ack_timeout_err"), "3\n").unwrap();
    fails_alone(&b, &a, &[], "transport-errors", "local_ack_timeout_err +3");
    // ECN-marked arrivals and no CNP sent over the window: the notification point is off.
    let (b, a) = copy(&dir);
    let sent = std::fs::read_to_string(hw_counter(&b, "np_cnp_sent")).unwrap();
    std::fs::write(hw_counter(&a, "np_cnp_sent"), sent).unwrap();
    fails_alone(
        &b,
        &a,
        &[],
        "cnp-sent",
        "port 1: 400 ECN-marked RoCE packets arrived and no CNP was sent",
    );
    // CNPs received and ignored: the reaction point is off.
    let (b, a) = copy(&dir);
    let ignored = hw_counter(&a, "rp_cnp_ignored");
    let n: u64 = std::fs::read_to_string(&ignored)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::write(&ignored, format!("{}\n", n + 9)).unwrap();
    fails_alone(
        &b,
        &a,
        &[],
        "cnp-sent",
        "port 1: 9 CNPs received and ignored",
    );
    // One reading: the counter items cannot judge.
    let (b, _) = copy(&dir);
    let (status, out, _) = output(
        Command::new(CLI)
            .args(["check", "--json", "--root"])
            .arg(&b),
    );
    assert!(status.success());
    let v: Value = serde_json::from_str(&out).unwrap();
    let unknown: Vec<&str> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["evidence"] == "one reading: no window to count over")
        .map(|i| i["item"].as_str().unwrap())
        .collect();
    assert_eq!(
        unknown,
        [
            "pause-storms",
            "lossless-discards",
            "link-errors",
            "transport-errors",
            "cnp-sent"
        ]
    );
}

/// A host without an RDMA device fails: RoCE needs one, whatever its netdevs say. A port
/// whose netdev was not read says its items are not checked.
#[test]
fn no_rdma_device_fails_and_an_unread_netdev_is_said() {
    let dir = Scratch::new("check-no-rdma");
    let (b, a) = copy(&dir);
    for root in [&b, &a] {
        std::fs::remove_dir_all(root.join("sys/class/infiniband")).unwrap();
    }
    let (code, items) = check(&b, &a, &["-i", IF]);
    assert_eq!(code, 1);
    let (s, e) = item(&items, "rdma-device");
    assert_eq!(s, "fail");
    assert!(e.contains("sys/class/infiniband missing"), "{e}");
    // The device's netdev moved away (another namespace): its items are not checked, and say so.
    let (b, a) = copy(&dir);
    for root in [&b, &a] {
        std::fs::remove_dir_all(root.join("sys/class/net").join(IF)).unwrap();
    }
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    let (s, e) = item(&items, "netdev");
    assert_eq!(s, "unknown");
    assert!(e.contains("its netdev ens1f0np0 was not read"), "{e}");
    assert!(!items.iter().any(|i| i.0 == "pfc"), "{items:?}");
}

#[test]
fn wrong_names_and_paths_are_one_line_errors() {
    let dir = Scratch::new("check-errors");
    let (b, a) = copy(&dir);
    for (args, code, want) in [
        (
            vec!["--root", "/nonexistent/tree"],
            1,
            "--root /nonexistent/tree: no such file or directory",
        ),
        (vec!["-i", "nosuch0"], 1, "no interface nosuch0"),
        (vec!["-i", "a/b"], 1, "\"a/b\" is no interface name"),
        (
            vec!["--rdma-dev", "mlx9_9", "--root", b.to_str().unwrap()],
            1,
            "no RDMA device mlx9_9",
        ),
        (
            vec![
                "--root",
                b.to_str().unwrap(),
                "--root",
                a.to_str().unwrap(),
                "--root",
                a.to_str().unwrap(),
            ],
            2,
            "--root: give one copied tree (or a snapshot of two readings), or two taken --interval apart",
        ),
        (vec!["--roce-priority", "8"], 2, "8 is not in 0..8"),
    ] {
        let (status, out, err) = output(Command::new(CLI).arg("check").args(&args));
        assert_eq!(status.code(), Some(code), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
        if code == 1 {
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        }
    }
}

/// A second RoCE port on `root`: the device and netdev copied (mlx5_1 behind ens2f0np0), every
/// setting as the first's.
fn second_port(root: &Path) {
    let copy = |from: &str, to: &str| {
        let (from, to) = (root.join(from), root.join(to));
        if from.is_dir() {
            copy_dir(&from, &to);
        } else {
            std::fs::copy(&from, &to).unwrap();
        }
    };
    copy("sys/class/infiniband/mlx5_0", "sys/class/infiniband/mlx5_1");
    copy(
        "sys/kernel/config/rdma_cm/mlx5_0",
        "sys/kernel/config/rdma_cm/mlx5_1",
    );
    copy("sys/class/net/ens1f0np0", "sys/class/net/ens2f0np0");
    copy("ethtool/ens1f0np0", "ethtool/ens2f0np0");
    copy("dcb/ens1f0np0.json", "dcb/ens2f0np0.json");
    copy(
        "proc/sys/net/ipv4/conf/ens1f0np0",
        "proc/sys/net/ipv4/conf/ens2f0np0",
    );
    let ndevs = root.join("sys/class/infiniband/mlx5_1/ports/1/gid_attrs/ndevs");
    for e in std::fs::read_dir(&ndevs).unwrap() {
        std::fs::write(e.unwrap().path(), "ens2f0np0\n").unwrap();
    }
}

/// Sets the sysctl `key` of `iface` (or `all`) in both readings.
fn sysctl(b: &Path, a: &Path, iface: &str, key: &str, v: &str) {
    for root in [b, a] {
        std::fs::write(
            root.join("proc/sys/net/ipv4/conf").join(iface).join(key),
            format!("{v}\n"),
        )
        .unwrap();
    }
}

/// Sets bytes of the module EEPROM in an `ethtool -m IF hex on` dump (its flat offsets: CMIS
/// page N's byte B at B + 128·N).
fn module_bytes(root: &Path, at: usize, bytes: &[u8]) {
    edit(&root.join("ethtool").join(IF).join("module"), |t| {
        let mut lines: Vec<String> = t.lines().map(str::to_string).collect();
        for (k, b) in bytes.iter().enumerate() {
            let o = at + k;
            let head = format!("0x{:04x}:", o & !0xf);
            let line = lines
                .iter_mut()
                .find(|l| l.starts_with(&head))
                .unwrap_or_else(|| panic!("no line {head}"));
            let (h, rest) = line.split_once(':').unwrap();
            let mut v: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
            v[o & 0xf] = format!("{b:02x}");
            *line = format!("{h}:\t\t{} ", v.join(" "));
        }
        lines.join("\n") + "\n"
    });
}

/// The module's diagnostics against its own thresholds (the fixture's module is a CMIS
/// QSFP112 whose thresholds are a multimode SR module's): a dim receiver lane fails; a
/// temperature over the warning threshold and a latched warning flag are said; a copper cable's
/// light is not judged; no module read is unknown, never a pass.
#[test]
fn the_optics_item_judges_the_module_by_its_thresholds() {
    let dir = Scratch::new("check-optics");
    const P11: usize = 128 * 0x11;
    // Lane 2's received power down to 0.01 mW (raw 100 in 0.1 µW).
    let (b, a) = copy(&dir);
    module_bytes(&a, P11 + 188, &[0x00, 0x64]);
    fails_alone(
        &b,
        &a,
        &[],
        "optics",
        "rx power lane 2 0.0100 mW (-20.0 dBm) below the low alarm 0.0447 mW (-13.5 dBm) (a dirty or damaged fibre or connector, or the far end's laser)",
    );
    let (_, items) = check(&b, &a, &[]);
    assert!(
        item(&items, "optics")
            .1
            .starts_with("QSFP+ or later (CMIS 5.0) NVIDIA MMA1T00-VS SN MT2330FT01234: "),
        "{items:?}"
    );
    // 77 °C: over the 75 °C warning, under the 80 °C alarm.
    let (b, a) = copy(&dir);
    module_bytes(&a, 14, &[0x4d, 0x00]);
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    assert_eq!(item(&items, "optics").0, "warn");
    assert!(
        item(&items, "optics").1.contains(
            "temperature 77.0 °C above the high warning 75.0 °C (airflow, or the module failing)"
        ),
        "{items:?}"
    );
    // The rx power low warning latched for lane 2 (page 11h byte 152, bit 1) during the
    // window, the value fine now.
    let (b, a) = copy(&dir);
    module_bytes(&a, P11 + 152, &[0x02]);
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    assert_eq!(
        item(&items, "optics"),
        (
            "warn",
            "QSFP+ or later (CMIS 5.0) NVIDIA MMA1T00-VS SN MT2330FT01234: the module raised \"rx_power low warning lane 2\" during the 1.0 s window"
        )
    );
    // The same dark lane with the module's data path deactivated (state 1 on both host
    // lanes): not in use, not judged.
    let (b, a) = copy(&dir);
    module_bytes(&a, P11 + 188, &[0x00, 0x00]);
    module_bytes(&a, P11 + 128, &[0x11]);
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    assert_eq!(
        item(&items, "optics"),
        (
            "pass",
            "QSFP+ or later (CMIS 5.0) NVIDIA MMA1T00-VS SN MT2330FT01234: 45.5 °C, 3.300 V, no lane in use (data path not activated, or transmitters disabled): within the module's warning thresholds"
        )
    );
    // Unprogrammed temperature thresholds (0xffff: -1/256 °C each) judge nothing, and do not
    // fail 45.5 °C.
    let (b, a) = copy(&dir);
    module_bytes(&a, 256 + 128, &[0xff; 8]);
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    assert_eq!(item(&items, "optics").0, "pass", "{items:?}");
    // The lane page missing (a tree without it): the light is not judged, and temperature
    // alone does not pass.
    let (b, a) = copy(&dir);
    edit(&a.join("ethtool").join(IF).join("module"), |t| {
        t.lines()
            .filter(|l| {
                l.strip_prefix("0x")
                    .and_then(|l| l.get(..4))
                    .and_then(|o| usize::from_str_radix(o, 16).ok())
                    .is_none_or(|o| o < P11 + 128)
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    let (status, evidence) = item(&items, "optics");
    assert_eq!(status, "unknown");
    assert!(
        evidence.ends_with("no lane readings (the module's lane page was not read)"),
        "{evidence}"
    );
    // A passive copper cable (module type 3): no light on lane 2 is no fault.
    let (b, a) = copy(&dir);
    module_bytes(&a, 85, &[0x03]);
    module_bytes(&a, P11 + 188, &[0x00, 0x00]);
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    assert_eq!(
        item(&items, "optics"),
        (
            "pass",
            "QSFP+ or later (CMIS 5.0) NVIDIA MMA1T00-VS SN MT2330FT01234: 45.5 °C, 3.300 V: within the module's warning thresholds"
        )
    );
    // No module read: unknown, with the reason.
    let (b, a) = copy(&dir);
    std::fs::remove_file(a.join("ethtool").join(IF).join("module")).unwrap();
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    let (status, evidence) = item(&items, "optics");
    assert_eq!(status, "unknown");
    assert!(
        evidence.starts_with("no module diagnostics: "),
        "{evidence}"
    );
    // A broken dump is a one-line error naming the file and the line.
    let (b, a) = copy(&dir);
    edit(&a.join("ethtool").join(IF).join("module"), |t| {
        t.replacen("0x0010:", "0x0010: zz", 1)
    });
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["check", "--root"])
            .arg(&b)
            .arg("--root")
            .arg(&a),
    );
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("ethtool/ens1f0np0/module: cannot parse: line 4: a value is no hex byte"),
        "{err}"
    );
}

/// The host items beyond PFC and DCQCN, each failing alone on one changed file (or setting):
/// RoCE mode and GIDs, rdma_cm's ToS, the PCIe link, the ARP sysctls of a host with two RoCE
/// ports, link flaps and CRC errors, the DCQCN parameters of `--expect`; the MTU judged alone
/// warns without failing.
#[test]
fn each_host_item_fails_alone_on_one_changed_file() {
    let dir = Scratch::new("check-host");
    let port = |root: &Path| root.join("sys/class/infiniband/mlx5_0/ports/1");
    let cm = |root: &Path| root.join("sys/kernel/config/rdma_cm/mlx5_0/ports/1");
    // rdma_cm connects in RoCE v1 by default.
    let (b, a) = copy(&dir);
    std::fs::write(cm(&a).join("default_roce_mode"), "IB/RoCE v1\n").unwrap();
    fails_alone(
        &b,
        &a,
        &[],
        "roce-mode",
        "rdma_cm connects in IB/RoCE v1 by default (default_roce_mode)",
    );
    // Its ToS carries DSCP 0: said (applications may set their own), failed against the
    // fleet's --tos.
    let (b, a) = copy(&dir);
    std::fs::write(cm(&a).join("default_roce_tos"), "0\n").unwrap();
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    let (status, evidence) = item(&items, "roce-mode");
    assert_eq!(status, "warn");
    assert!(
        evidence.contains("DSCP 0, not the RoCE DSCP 26"),
        "{evidence}"
    );
    fails_alone(
        &b,
        &a,
        &["--tos", "106"],
        "roce-mode",
        "default ToS is 0 (DSCP 0), not the fleet's 106",
    );
    let (b, a) = copy(&dir);
    fails_alone(
        &b,
        &a,
        &["--tos", "104"],
        "roce-mode",
        "default ToS is 106 (DSCP 26), not the fleet's 104",
    );
    // No RoCE v2 GID on the netdev (its v2 entries gone: one setting, two files).
    let (b, a) = copy(&dir);
    for i in ["1", "3"] {
        std::fs::write(port(&a).join("gid_attrs/types").join(i), "IB/RoCE v1\n").unwrap();
    }
    fails_alone(&b, &a, &[], "roce-mode", "ens1f0np0 has no RoCE v2 GID");
    // A x16 card trained at x8.
    let (b, a) = copy(&dir);
    std::fs::write(
        a.join("sys/class/infiniband/mlx5_0/device/current_link_width"),
        "8\n",
    )
    .unwrap();
    fails_alone(
        &b,
        &a,
        &[],
        "pcie",
        "PCIe link at 32.0 GT/s x8, the card can 32.0 GT/s x16",
    );
    // The slot above it is x8 (`device/..`): the platform is the limit, said, not failed.
    std::fs::write(a.join("sys/class/infiniband/mlx5_0/max_link_width"), "8\n").unwrap();
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    assert_eq!(
        item(&items, "pcie"),
        (
            "warn",
            "PCIe link at 32.0 GT/s x8, the slot's maximum; the card can 32.0 GT/s x16: the platform is the limit; NUMA node 0"
        )
    );
    // ETS: RoCE's class at 0%; CNPs in RoCE's class.
    let (b, a) = copy(&dir);
    dcb(&b, &a, |v| v["tc_bw"][3] = 0.into());
    fails_alone(
        &b,
        &a,
        &[],
        "ets",
        "class 3 has 0% under ETS: RoCE starves whenever other classes are busy",
    );
    let (b, a) = copy(&dir);
    dcb(&b, &a, |v| v["prio_tc"][6] = 3.into());
    fails_alone(&b, &a, &[], "ets", "CNPs share class 3 with RoCE data");
    // Receive buffers: a lossy priority in the lossless one's; the lossless one without size.
    let (b, a) = copy(&dir);
    dcb(&b, &a, |v| v["prio_buffer"][2] = 1.into());
    fails_alone(
        &b,
        &a,
        &[],
        "buffer",
        "lossy priorities 2 share buffer 1 with lossless priority 3",
    );
    let (b, a) = copy(&dir);
    dcb(&b, &a, |v| v["buffer_size"][1] = 0.into());
    fails_alone(&b, &a, &[], "buffer", "priority 3's buffer 1 has no size");
    // PFC storm prevention off (ethtool --get-tunable's output).
    let (b, a) = copy(&dir);
    std::fs::write(
        a.join("ethtool").join(IF).join("tunables"),
        "pfc-prevention-tout: 0\n",
    )
    .unwrap();
    fails_alone(&b, &a, &[], "pfc-watchdog", "PFC storm prevention is off");
    let (code, items) = check(&b, &a, &["--lossy"]);
    assert_eq!(item(&items, "pfc-watchdog").0, "not-applicable", "{code}");
    // No GPU on the NIC's NUMA node (the local one moved to node 1): said, not failed.
    let (b, a) = copy(&dir);
    std::fs::write(a.join("sys/bus/pci/devices/0000:18:00.0/numa_node"), "1\n").unwrap();
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    let warned: Vec<&str> = items
        .iter()
        .filter(|i| i.1 != "pass" && i.1 != "not-applicable")
        .map(|i| i.0.as_str())
        .collect();
    assert_eq!(warned, ["gpu-affinity"], "{items:?}");
    assert_eq!(
        item(&items, "gpu-affinity"),
        (
            "warn",
            "no GPU on the NIC's NUMA node 0 (0000:18:00.0 on node 1, 0000:9a:00.0 on node 1): GPUDirect RDMA through it crosses the inter-socket link"
        )
    );
    // The link flapped; then CRC errors.
    let (b, a) = copy(&dir);
    edit(
        &a.join("sys/class/net").join(IF).join("carrier_changes"),
        |t| format!("{}\n", t.trim().parse::<u64>().unwrap() + 2),
    );
    fails_alone(&b, &a, &[], "link-errors", "carrier_changes +2");
    let (b, a) = copy(&dir);
    bump_stat(&a, "rx_crc_errors_phy", 17);
    fails_alone(&b, &a, &[], "link-errors", "rx_crc_errors_phy +17");
    // Two RoCE ports, each answering ARP for itself: pass; one sysctl back to the default
    // fails alone.
    let two = Scratch::new("check-two-ports");
    let (b, a) = copy(&two);
    for root in [&b, &a] {
        second_port(root);
    }
    for (key, v) in [("arp_ignore", "1"), ("arp_announce", "2")] {
        sysctl(&b, &a, "all", key, v);
    }
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    let arp: Vec<&(String, String, String)> =
        items.iter().filter(|i| i.0 == "arp-sysctls").collect();
    assert_eq!(arp.len(), 2);
    assert!(arp.iter().all(|i| i.1 == "pass"), "{arp:?}");
    assert_eq!(item(&items, "mtu").0, "pass");
    assert_eq!(item(&items, "firmware").0, "pass");
    sysctl(&b, &a, "all", "arp_announce", "0");
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 1);
    let failed: Vec<&str> = items
        .iter()
        .filter(|i| i.1 == "fail")
        .map(|i| i.0.as_str())
        .collect();
    assert_eq!(failed, ["arp-sysctls", "arp-sysctls"], "{items:?}");
    assert!(
        item(&items, "arp-sysctls")
            .1
            .contains("arp_announce below 2 may announce another port's address")
    );
    sysctl(&b, &a, "all", "arp_announce", "2");
    // arp_ignore 8: no reply at all.
    sysctl(&b, &a, "all", "arp_ignore", "8");
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 1);
    assert!(
        item(&items, "arp-sysctls")
            .1
            .contains("arp_ignore above 2 limits or stops ARP replies")
    );
    sysctl(&b, &a, "all", "arp_ignore", "1");
    // The effective rp_filter is the larger of `all` and the netdev's: strict on one port.
    sysctl(&b, &a, "all", "rp_filter", "0");
    let (code, _) = check(&b, &a, &[]);
    assert_eq!(code, 0);
    sysctl(&b, &a, "ens2f0np0", "rp_filter", "1");
    let (_, items) = check(&b, &a, &[]);
    let failed: Vec<&(String, String, String)> = items.iter().filter(|i| i.1 == "fail").collect();
    assert_eq!(failed.len(), 1, "{items:?}");
    assert!(failed[0].2.contains("rp_filter 1 (strict)"), "{failed:?}");
    // The fleet's DCQCN parameters (--expect): equal, then one file changed.
    let (b, a) = copy(&dir);
    let expect = dir.file(
        "fleet.toml",
        "mtu = 9000\n[roce_np]\nmin_time_between_cnps = 4\ncnp_dscp = 48\n[roce_rp]\nrpg_min_rate = 1\n",
    );
    let e = expect.to_str().unwrap();
    let (code, items) = check(&b, &a, &["--expect", e]);
    assert_eq!(code, 0, "{items:?}");
    assert_eq!(
        item(&items, "dcqcn-params"),
        ("pass", "3 parameters as the fleet's")
    );
    std::fs::write(
        a.join("sys/class/net")
            .join(IF)
            .join("ecn/roce_rp/rpg_min_rate"),
        "10\n",
    )
    .unwrap();
    fails_alone(
        &b,
        &a,
        &["--expect", e],
        "dcqcn-params",
        "roce_rp/rpg_min_rate 10, not 1",
    );
    // The file's values are the intent; a flag goes over them.
    let (b, a) = copy(&dir);
    let strict = dir.file("mtu.toml", "mtu = 4200\n");
    let s = strict.to_str().unwrap();
    fails_alone(&b, &a, &["--expect", s], "mtu", "not the fleet's 4200");
    let (code, _) = check(&b, &a, &["--expect", s, "--mtu", "9000"]);
    assert_eq!(code, 0);
    // An MTU whose RoCE path MTU is below 4096, judged on its own: a warning, not a failure.
    std::fs::write(a.join("sys/class/net").join(IF).join("mtu"), "4000\n").unwrap();
    let (code, items) = check(&b, &a, &[]);
    assert_eq!(code, 0, "{items:?}");
    let (status, evidence) = item(&items, "mtu");
    assert_eq!(status, "warn");
    assert!(evidence.contains("RoCE path MTU up to 2048"), "{evidence}");
    // Bad --expect files are one-line errors naming the file.
    for (text, want) in [
        ("mtu = \"big\"\n", "invalid type"),
        ("roce_priorty = 3\n", "unknown field `roce_priorty`"),
        (
            "roce_priority = 9\n",
            "roce_priority = 9: a priority is 0 to 7",
        ),
        (
            "trust = \"vlan\"\n",
            "trust = \"vlan\": expected \"dscp\" or \"pcp\"",
        ),
    ] {
        let f = dir.file("bad.toml", text);
        let (status, out, err) = output(
            Command::new(CLI)
                .args(["check", "--root"])
                .arg(&b)
                .arg("--expect")
                .arg(&f),
        );
        assert_eq!(status.code(), Some(1), "{text}: {err}");
        assert!(out.is_empty());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&format!("--expect {}", f.display())), "{err}");
        assert!(err.contains(want), "{text}: {err}");
    }
}
