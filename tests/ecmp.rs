//! ECMP analysis on the real captures: every RC connection in `../shared/captures/real/` seen
//! both ways pairs (both directions, both QP numbers), and its source port is reported as it is.

use std::{collections::BTreeSet, path::PathBuf};

use integration_tests::pcap_frames;
use observer_common::{FlowKey, Transport, parse};
use roce_observer::{
    ecmp::{SourcePort, pair, rdma_udp_sport},
    replay::Replay,
    report::{Report, Source},
};

#[test]
fn every_rc_connection_of_the_real_captures_pairs() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/captures/real");
    if !dir.is_dir() {
        if std::env::var_os("CI").is_some() {
            panic!("{} missing under CI", dir.display());
        }
        eprintln!(
            "\n*** SKIPPED every_rc_connection_of_the_real_captures_pairs: {} missing ***\n",
            dir.display()
        );
        return;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
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
        let report = Report::new(&r.agg, Source::pcap(vec![], vec![]), r.window_seconds());
        let p = pair(&report.flows);
        let paired: BTreeSet<usize> = p.connections.iter().flat_map(|c| c.flows).collect();
        for (i, f) in report.flows.iter().enumerate() {
            let key = rc.iter().any(|k| {
                roce_observer::report::ip_of(k.src_ip) == f.src_ip
                    && roce_observer::report::ip_of(k.dst_ip) == f.dst_ip
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
            }
        }
    }
    eprintln!(
        "real captures: {rc_flows} RC flows ({one_way} seen one way only), {connections} connections, {conforming} with the drivers' source port"
    );
    assert!(rc_flows > 0 && connections > 0);
}
