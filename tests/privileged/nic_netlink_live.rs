//! The NIC side over netlink on this host's kernel: DCB of a veth, in a namespace the test
//! creates (and removes), reads as iproute2's `dcb` reads it. Replies laid out by hand, RDMA
//! netlink and the recorded fixtures: nic_netlink.rs.

use integration_tests::{absent as reason, output, require_root};
use roce_observer::lab::Netns;
use roce_observer::source::nic::dcb::dcb;

/// A veth pair in a namespace the test creates (removed on drop): veth has no DCB, and the
/// kernel's refusal reads as iproute2's `dcb` reads it; a name that is no interface there is
/// absent, named.
#[test]
fn dcb_of_a_veth_is_absent_as_iproute2_says() {
    if !require_root("dcb_of_a_veth_is_absent_as_iproute2_says") {
        return;
    }
    let ns = Netns::create("nicnl").expect("namespace");
    let (st, _, err) = output(
        ns.command("ip")
            .args(["link", "add", "nl0", "type", "veth", "peer", "name", "nl1"]),
    );
    assert!(st.success(), "{err}");

    let got = ns
        .run_in(|| dcb("nl0"))
        .expect("thread")
        .expect("an answer");
    let (st, out, err) = output(ns.command("dcb").args(["pfc", "show", "dev", "nl0"]));
    assert!(!st.success(), "dcb pfc show succeeded on a veth: {out}");
    assert!(err.contains("Operation not supported"), "dcb: {err}");
    let r = reason(got);
    assert!(
        r.contains("nl0") && r.contains("Operation not supported"),
        "{r}"
    );

    let got = ns
        .run_in(|| dcb("nl9"))
        .expect("thread")
        .expect("an answer");
    let (st, _, err) = output(ns.command("dcb").args(["pfc", "show", "dev", "nl9"]));
    assert!(
        !st.success() && err.contains("No such device"),
        "dcb: {err}"
    );
    let r = reason(got);
    assert!(r.contains("no interface nl9"), "{r}");
}
