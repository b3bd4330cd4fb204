//! ECMP analysis on the real captures: every RC connection in `../shared/captures/real/` seen
//! both ways pairs (both directions, both QP numbers), and its source port is reported as it is;
//! `roce-observer ecmp` on a capture. Live on veth: privileged/ecmp_live.rs.

use std::{collections::BTreeSet, path::PathBuf};

use integration_tests::pcap_frames;
use observer_common::{FlowKey, Transport, parse};
use roce_observer::{
    analysis::ecmp::{SourcePort, pair, rdma_udp_sport},
    model::{Report, Source},
    source::replay::Replay,
};

#[test]
fn every_rc_connection_of_the_real_captures_pairs() {
    let Some(files) = integration_tests::shared_capture_files(
        "every_rc_connection_of_the_real_captures_pairs",
        "real",
    ) else {
        return;
    };
    assert_eq!(files.len(), 21);
    let (mut rc_flows, mut connections, mut conforming, mut one_way) = (0, 0, 0, 0);
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        // Which flows are RC, from the frames themselves.
        let rc: BTreeSet<FlowKey> = pcap_frames(&file)
            .iter()
            .filter_map(|f| parse(f.as_slice()).ok())
            .filter(|p| p.bth.transport() == Transport::Rc)
            .map(|p| FlowKey::of(&p))
            .collect();
        let mut r = Replay::new();
        r.file(file.to_str().unwrap(), false).unwrap();
        let report = r
            .agg
            .report(Source::pcap(vec![], vec![]), r.window_seconds());
        let p = pair(&report.flows);
        let paired: BTreeSet<usize> = p.connections.iter().flat_map(|c| c.flows).collect();
        for (i, f) in report.flows.iter().enumerate() {
            let key = rc.iter().any(|k| {
                roce_observer::model::ip_of(k.src_ip) == f.src_ip
                    && roce_observer::model::ip_of(k.dst_ip) == f.dst_ip
                    && k.udp_src_port == f.udp_src_port
                    && k.dest_qp == f.dest_qp
            });
            if !key {
                continue;
            }
            rc_flows += 1;
            // A connection seen both ways pairs; one seen one way (a one-packet capture) is
            // reported unpaired.
            let reverse = report.flows.iter().any(|g| {
                g.src_ip == f.dst_ip && g.dst_ip == f.src_ip && g.udp_src_port == f.udp_src_port
            });
            assert_eq!(
                paired.contains(&i),
                reverse,
                "{name}: RC flow {} -> {} port {} QP {:#x}",
                f.src_ip,
                f.dst_ip,
                f.udp_src_port,
                f.dest_qp
            );
            assert_eq!(p.unpaired.contains(&i), !reverse, "{name}");
            one_way += usize::from(!reverse);
        }
        for c in &p.connections {
            connections += 1;
            // Reported as it is: conforming exactly when the rule gives the port seen.
            let rule = rdma_udp_sport(c.qpn_a, c.qpn_b);
            match c.source_port {
                SourcePort::Conforming => {
                    assert_eq!(rule, c.udp_src_port, "{name}");
                    conforming += 1;
                }
                SourcePort::Overridden { expected } => {
                    assert_eq!(expected, rule, "{name}");
                    assert_ne!(rule, c.udp_src_port, "{name}");
                }
                SourcePort::SharedTuple => {}
                SourcePort::PerDirection { .. } => {
                    panic!("{name}: the real captures use one port both ways")
                }
            }
        }
    }
    eprintln!(
        "real captures: {rc_flows} RC flows ({one_way} seen one way only), {connections} connections, {conforming} with the drivers' source port"
    );
    assert!(rc_flows > 0 && connections > 0);
}

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// `roce-observer ecmp --pcap`: the JSON report carries the `ecmp` object for the flows it
/// reports, and the uplinks account for every flow and byte.
#[test]
fn ecmp_command_on_a_capture() {
    use integration_tests::output;
    use std::process::Command;
    let dir = std::env::temp_dir().join(format!("roce-ecmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("many-qps.pcap");
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["synth", "--scenario", "many-qps", "-o"])
            .arg(&file),
    );
    assert!(status.success(), "{err}");
    // The capture after --pcap, or as an argument as `replay` takes it: the same report.
    let two_tiers = |pcap_flag: bool| {
        let mut cmd = Command::new(CLI);
        cmd.args([
            "ecmp",
            "--uplinks",
            "8",
            "--tiers",
            "2",
            "--uplinks2",
            "4",
            "--json",
        ]);
        if pcap_flag {
            cmd.arg("--pcap");
        }
        let (status, out, err) = output(cmd.arg(&file));
        assert!(status.success(), "{err}");
        out
    };
    let out = two_tiers(true);
    assert_eq!(two_tiers(false), out);
    // The same capture twice would count every packet as a copy: refused in one line.
    let (status, again, err) = output(
        Command::new(CLI)
            .args(["ecmp", "--uplinks", "8", "--pcap"])
            .arg(&file)
            .arg(&file),
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(again.is_empty());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("is given twice"), "{err}");
    // Standard input twice cannot be read twice: refused, not waited on; nor a file again as
    // standard input.
    for args in [&["-", "-"][..], &[file.to_str().unwrap(), "-"]] {
        let out = Command::new(CLI)
            .arg("replay")
            .args(args)
            .stdin(std::fs::File::open(&file).unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("standard input (-)"), "{err}");
        assert!(err.contains("is given twice"), "{err}");
    }
    let r: Report = serde_json::from_str(&out).unwrap();
    let e = r.ecmp.as_ref().expect("an ecmp object");
    // The data flows (SEND, WRITE, READ responses): the ACK-only directions are no load.
    let data: Vec<_> = r
        .flows
        .iter()
        .filter(|f| f.ops.send + f.ops.write + f.ops.read_response > 0)
        .collect();
    assert!(data.len() < r.flows.len());
    assert_eq!(e.flows as usize, data.len());
    assert_eq!(e.uplinks.len(), 8);
    assert_eq!(
        e.uplinks.iter().map(|u| u.flows).sum::<u64>(),
        data.len() as u64
    );
    assert_eq!(
        e.uplinks.iter().map(|u| u.bytes).sum::<u64>(),
        data.iter().map(|f| f.bytes).sum::<u64>()
    );
    // many-qps: 1000 RC connections, both directions, driver ports.
    assert_eq!(e.connections.paired, 1000);
    assert_eq!(e.connections.unpaired_flows, 0);
    assert!(e.connections.conforming > 990, "{:?}", e.connections);
    assert_eq!(e.tier2.as_ref().unwrap().spines.len(), 8);
    // The table.
    let (status, out, err) = output(
        Command::new(CLI)
            .args(["ecmp", "--uplinks", "4", "--hash", "toeplitz", "--pcap"])
            .arg(&file),
    );
    assert!(status.success(), "{err}");
    assert!(
        out.contains("toeplitz of 5tuple") && out.contains("uplink   3"),
        "{out}"
    );
    // Flag errors are one line.
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["ecmp", "--uplinks", "4", "--tiers", "2", "--pcap"])
            .arg(&file),
    );
    assert_eq!(status.code(), Some(1));
    assert_eq!(
        err.trim_end(),
        "roce-observer: error: --tiers 2 needs --uplinks2 (uplinks per spine)"
    );
    for (args, line) in [
        (
            &["--hash2", "crc32c"][..],
            "roce-observer: error: --hash2, --seed2 and --bucket2 need --tiers 2",
        ),
        (
            &["--hash", "crc16-ccitt", "--seed", "0x10000"][..],
            "roce-observer: error: --seed 0x10000 does not fit CRC-16 (at most 0xffff)",
        ),
        (
            &["--duration", "5s"][..],
            "roce-observer: error: --duration and --mode apply to --iface, not to capture files",
        ),
    ] {
        let (status, _, err) = output(
            Command::new(CLI)
                .args(["ecmp", "--uplinks", "4"])
                .args(args)
                .arg("--pcap")
                .arg(&file),
        );
        assert_eq!(status.code(), Some(1), "{args:?}");
        assert_eq!(err.trim_end(), line);
    }
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["ecmp", "--uplinks", "4", "--toeplitz-key", "6d5a"])
            .arg("--pcap")
            .arg(&file),
    );
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("at least 4 bytes"), "{err}");
    // A capture without RoCE (a real ERSPAN capture of other traffic) says so.
    let no_roce = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/captures/erspan/zeek_erspanII.pcap");
    if no_roce.is_file() {
        let (status, out, err) = output(
            Command::new(CLI)
                .args(["ecmp", "--uplinks", "4", "--pcap"])
                .arg(&no_roce),
        );
        assert!(status.success(), "{err}");
        assert!(out.contains("no RoCEv2 data flows to model"), "{out}");
        assert!(!out.contains("what-if"), "{out}");
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} missing",
            no_roce.display()
        );
        eprintln!(
            "\n*** SKIPPED the no-RoCE part: {} missing ***\n",
            no_roce.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
