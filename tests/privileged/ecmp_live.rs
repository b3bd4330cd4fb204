//! `roce-observer ecmp --iface`: the ECMP analysis on live traffic in a veth lab, in a namespace
//! the test creates (and removes). On captures: ecmp.rs.

use roce_observer::model::Report;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// `roce-observer ecmp --iface`: the same analysis on live traffic in a veth lab.
#[test]
fn ecmp_command_live() {
    use integration_tests::Diagnose;
    use roce_observer::{lab::Lab, source::synth};
    if !integration_tests::require_root("ecmp_command_live") {
        return;
    }
    let w = synth::scenario("many-qps").unwrap();
    let lab = Lab::create("ro-ecmp").unwrap();
    let d = Diagnose::start_command(
        &lab.ns,
        CLI.as_ref(),
        "ecmp",
        &[
            "--uplinks",
            "4",
            "--iface",
            "rx0",
            "--duration",
            "1500ms",
            "--json",
        ],
    );
    integration_tests::send_frames(&lab.ns, w.frames.clone());
    let (status, out, err) = d.finish();
    assert!(status.success(), "{err}");
    let r: Report = serde_json::from_str(&out).unwrap();
    let e = r.ecmp.expect("an ecmp object");
    // One data direction per QP: the WRITEs (their ACKs carry no load).
    assert_eq!(e.flows, 1000);
    assert_eq!(e.connections.paired, 1000);
}
