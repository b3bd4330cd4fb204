//! Bad input: one clear line on stderr, a non-zero exit, never a panic. Missing privileges and a
//! program already on an interface (which need root to set up): privileged/cli_errors_live.rs.

use std::process::Command;

use integration_tests::{error_line, output};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

#[test]
fn unknown_interface_is_named() {
    let (status, out, err) =
        output(Command::new(CLI).args(["diagnose", "--iface", "nosuch0", "--duration", "1s"]));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(out.is_empty());
    assert_eq!(
        error_line(&err),
        "roce-observer: error: interface 'nosuch0' not found"
    );
}

/// An RDMA device the host lacks, for diagnose's NIC side: named, before anything attaches.
#[test]
fn unknown_rdma_device_is_named() {
    let (status, out, err) = output(Command::new(CLI).args([
        "diagnose",
        "--iface",
        "lo",
        "--rdma-dev",
        "mlx9_9",
        "--duration",
        "1s",
    ]));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(out.is_empty());
    let line = error_line(&err);
    assert!(
        line.starts_with("roce-observer: error: no RDMA device mlx9_9"),
        "{line}"
    );
}

#[test]
fn bad_flags_are_usage_errors() {
    for args in [
        &["diagnose", "--iface", "lo", "--duration", "ten"][..],
        &["diagnose", "--iface", "lo", "--xdp-mode", "turbo"][..],
        &["diagnose", "--iface", "lo", "--link-speed", "fast"][..],
        &["diagnose", "--iface", "lo", "--link-speed", "100"][..],
        &["diagnose", "--iface", "lo", "--tc-hook", "ingress"][..],
        &["replay", "x.pcap", "--link-speed", "0G"][..],
        &["diagnose"][..],
        &["frobnicate"][..],
    ] {
        let (status, _, err) = output(Command::new(CLI).args(args));
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let (status, _, err) =
        output(Command::new(CLI).args(["generate", "--iface", "lo", "--scenario", "nope"]));
    assert_eq!(status.code(), Some(1));
    assert!(
        error_line(&err).starts_with("roce-observer: error: unknown scenario 'nope' (known: "),
        "{err}"
    );
    let (status, _, err) = output(Command::new(CLI).args([
        "diagnose",
        "--iface",
        "lo",
        "--mode",
        "mirror",
        "--tc-hook",
        "tcx",
    ]));
    assert_eq!(status.code(), Some(1));
    assert_eq!(
        error_line(&err),
        "roce-observer: error: --tc-hook needs --mode host (mirror mode attaches no TC egress program)"
    );
    // Non-ASCII speeds are refused, not a panic on a character boundary.
    let (status, _, err) =
        output(Command::new(CLI).args(["replay", "x.pcap", "--link-speed", "100€"]));
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("'100€' is not a link speed"), "{err}");
    let (status, _, err) =
        output(Command::new(CLI).args(["diagnose", "--iface", "lo", "--max-flows", "0"]));
    assert_eq!(status.code(), Some(1));
    assert!(
        error_line(&err).contains("--max-flows must be between 1 and"),
        "{err}"
    );
}

#[test]
fn an_unknown_capture_device_is_named_alone() {
    for args in [
        &["diagnose", "--capture", "nosuchdev0", "--duration", "1s"][..],
        &["run", "--capture", "nosuchdev0", "--listen", "127.0.0.1:0"][..],
    ] {
        let (status, out, err) = output(Command::new(CLI).args(args));
        assert_eq!(status.code(), Some(1), "{args:?}: {err}");
        assert!(out.is_empty());
        assert_eq!(
            error_line(&err),
            "roce-observer: error: capture device 'nosuchdev0' not found",
            "{args:?}"
        );
    }
}

#[test]
fn capture_and_xdp_flags_exclude_each_other() {
    for args in [
        &["diagnose", "--capture", "lo", "--iface", "lo"][..],
        &["diagnose", "--capture", "lo", "--mode", "mirror"][..],
        &["diagnose", "--capture", "lo", "--xdp-mode", "skb"][..],
        &["diagnose", "--capture", "lo", "--max-flows", "10"][..],
        &["diagnose", "--iface", "lo", "--capture-filter", "udp"][..],
        &["diagnose", "--iface", "lo", "--no-promiscuous"][..],
        &["run", "--capture", "lo", "--iface", "lo"][..],
        &["run", "--capture", "lo", "--consume"][..],
        &["run", "--iface", "lo", "--capture-filter", "udp"][..],
    ] {
        let (status, _, err) = output(Command::new(CLI).args(args));
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(
            err.contains("cannot be used with") || err.contains("required"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
