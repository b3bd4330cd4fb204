//! Missing privileges, a program already on an interface and capture errors met as root: one
//! clear line on stderr, a non-zero exit, never a panic, and never a program replaced on an
//! interface. Bad input that needs no privilege: cli_errors.rs.

use std::process::Command;

use aya::programs::XdpMode;
use integration_tests::{error_line, has_xdp, load_program, output, require_root, xdp_mut};
use observer_common::programs;
use roce_observer::lab::Lab;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

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
        assert!(integration_tests::detached_soon(|| !has_xdp(
            &lab.ns, "rx0"
        )));
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
