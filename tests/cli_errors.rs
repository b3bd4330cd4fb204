//! Bad input and missing privileges: one clear line on stderr, a non-zero exit, never a panic,
//! and never a program replaced on an interface.

use std::process::Command;

use aya::programs::XdpMode;
use integration_tests::{has_xdp, load_program, output, require_root, xdp_mut};
use observer_common::programs;
use roce_observer::lab::Lab;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// The last non-empty stderr line, which must be the one error line.
fn error_line(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one error line, got: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    lines[0].to_string()
}

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
fn missing_capabilities_are_named() {
    if !require_root("missing_capabilities_are_named") {
        return;
    }
    // Root with every capability dropped, and an unprivileged user.
    let drop_all = [
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
    ];
    for (who, ids) in [
        ("root without capabilities", &[][..]),
        (
            "nobody",
            &["--reuid=65534", "--regid=65534", "--clear-groups"][..],
        ),
    ] {
        let (status, _, err) = output(
            Command::new("setpriv")
                .args(ids)
                .args(drop_all)
                .arg(CLI)
                .args(["diagnose", "--iface", "lo", "--duration", "1s"]),
        );
        assert_eq!(status.code(), Some(1), "{who}: {err}");
        let line = error_line(&err);
        assert!(
            line.starts_with("roce-observer: error: live capture needs root or the capabilities CAP_BPF+CAP_NET_ADMIN"),
            "{who}: {line}"
        );
    }
}

#[test]
fn foreign_xdp_program_is_never_replaced() {
    if !require_root("foreign_xdp_program_is_never_replaced") {
        return;
    }
    let lab = Lab::create("ro-busy").unwrap();
    // "Someone else": this test process attaches the baseline program to rx0.
    for mode in [XdpMode::Skb, XdpMode::Default] {
        let foreign = lab
            .ns
            .run_in(move || {
                let mut ebpf = load_program(programs::BASELINE);
                xdp_mut(&mut ebpf, programs::BASELINE)
                    .attach(Lab::RX, mode)
                    .unwrap();
                ebpf
            })
            .unwrap();
        let before = integration_tests::link_details(&lab.ns, "rx0");
        assert!(before.contains("prog/xdp"), "{before}");
        let (status, _, err) =
            output(
                lab.ns
                    .command(CLI)
                    .args(["diagnose", "--iface", "rx0", "--duration", "1s"]),
            );
        assert_eq!(status.code(), Some(1), "{err}");
        // Named, and said not to be roce-observer's (so not a sidecar to observe beside).
        let line = error_line(&err);
        assert!(
            line.starts_with(
                "roce-observer: error: interface 'rx0' already has an XDP program attached (program "
            ) && line.ends_with(
                ", count_frames, not roce-observer's; if it is not needed, `ip link set dev rx0 xdp off` frees the hook); refusing to replace it"
            ),
            "{line}"
        );
        // Still the same foreign program.
        assert_eq!(integration_tests::link_details(&lab.ns, "rx0"), before);
        drop(foreign);
        assert!(!has_xdp(&lab.ns, "rx0"));
    }
    // roce-observer's own mirror-mode program (a sidecar consuming copies): recognized, and
    // neither replaced nor observed beside (TC would see none of the copies).
    let ours = lab
        .ns
        .run_in(move || {
            let mut ebpf = load_program(programs::OBSERVE_CONSUME);
            xdp_mut(&mut ebpf, programs::OBSERVE_CONSUME)
                .attach(Lab::RX, XdpMode::Skb)
                .unwrap();
            ebpf
        })
        .unwrap();
    let (status, _, err) =
        output(
            lab.ns
                .command(CLI)
                .args(["diagnose", "--iface", "rx0", "--duration", "1s"]),
        );
    assert_eq!(status.code(), Some(1), "{err}");
    let line = error_line(&err);
    assert!(
        line.contains("has roce-observer's mirror-mode program attached")
            && line.contains("roce_observe_co")
            && !line.contains("xdp off"),
        "{line}"
    );
    drop(ours);
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

#[test]
fn capture_errors_are_one_line() {
    if !require_root("capture_errors_are_one_line") {
        return;
    }
    // A filter libpcap cannot compile.
    let (status, _, err) = output(Command::new(CLI).args([
        "diagnose",
        "--capture",
        "lo",
        "--capture-filter",
        "udp port ((",
        "--duration",
        "1s",
    ]));
    assert_eq!(status.code(), Some(1), "{err}");
    let line = error_line(&err);
    assert!(
        line.starts_with("roce-observer: error: capture filter 'udp port ((' does not compile on 'lo': libpcap error: "),
        "{line}"
    );
    // An unprivileged user: the device and what is missing, then libpcap's own words.
    let (status, _, err) = output(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
                "--ambient-caps=-all",
                "--bounding-set=-all",
            ])
            .arg(CLI)
            .args(["diagnose", "--capture", "lo", "--duration", "1s"]),
    );
    assert_eq!(status.code(), Some(1), "{err}");
    let line = error_line(&err);
    assert!(
        line.starts_with("roce-observer: error: capturing on 'lo' needs root or CAP_NET_RAW (this process runs as uid 65534 without it): "),
        "{line}"
    );
}
