//! `roce-observer snapshot` of this host: a snapshot of a veth, in a namespace the test creates
//! (and removes), reads through `check --root` as `check` reads the veth live. Round trips of
//! recorded trees: snapshot.rs.

use integration_tests::{Scratch, os, output, require_root};
use roce_observer::lab::Lab;
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// This host: a snapshot of a veth taken a second apart reads, through `check --root`, as the
/// live `check` of the veth: the same items and evidence (the window's length aside, which
/// each measures), the same sources absent for the same reasons.
#[test]
fn snapshot_of_this_host_reads_as_live_check() {
    if !require_root("snapshot_of_this_host_reads_as_live_check") {
        return;
    }
    let lab = Lab::create("ro-snap").unwrap();
    let scratch = Scratch::new("snapshot-live");
    let snap = scratch.path("veth.tar.gz");
    let (status, _, err) = output(
        lab.ns
            .command(CLI)
            .args(["snapshot", "--iface", "rx0", "--interval", "1s"])
            .arg(&snap),
    );
    assert!(status.success(), "{err}");
    let run = |extra: &[&std::ffi::OsStr]| {
        let (status, out, err) = output(
            lab.ns
                .command(CLI)
                .args(["check", "--json", "--iface", "rx0"])
                .args(extra),
        );
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
        // The window is what each measured: "in 1.0 s" may read "in 1.1 s".
        let seconds = regex_free_seconds(&v["items"].to_string());
        (status.code(), seconds, v["nic"]["absent"].clone())
    };
    let live = run(&[]);
    let copied = run(&[os("--root"), snap.as_os_str()]);
    assert_eq!(copied, live);
    assert_eq!(live.0, Some(1), "no RDMA device: rdma-device fails");
    assert!(live.1.contains("rdma-device"), "{}", live.1);
}

/// `text` with every "N.N s" made "_ s".
fn regex_free_seconds(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(" s") {
        let (head, tail) = rest.split_at(i);
        let digits = head
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_digit() || *c == '.')
            .last()
            .map_or(head.len(), |(j, _)| j);
        out.push_str(&head[..digits]);
        if digits < head.len() {
            out.push('_');
        }
        out.push_str(" s");
        rest = &tail[2..];
    }
    out.push_str(rest);
    out
}
