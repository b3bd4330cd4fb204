//! Mirror copies (GRE / ERSPAN I, II, III, transparent Ethernet bridging), decapsulated by the
//! shared parser: encapsulated RoCE counts exactly as the same traffic seen directly, in
//! userspace, and several sessions and taps of one traffic analysed together; the real ERSPAN
//! captures decode as tshark says. In the kernel: privileged/mirror_kernel.rs.

use std::{collections::BTreeMap, process::Command};

use integration_tests::{
    ENCAPS, clean_frames as clean, lagging_copies, lagging_taps, output, through_sessions, timeless,
};
use observer_common::{FlowKey, MirrorOf};
use roce_observer::{
    aggregate::Aggregate,
    model::{PsnScope, Source},
    source::replay::Replay,
    source::synth::{self, Encap},
};

fn direct(frames: &[Vec<u8>]) -> Aggregate {
    let mut agg = Aggregate::new();
    for f in frames {
        let _ = agg.push(f, 0);
    }
    agg
}

#[test]
fn encapsulated_roce_counts_as_the_same_traffic_seen_directly() {
    let frames = clean();
    let plain = direct(&frames);
    for encap in ENCAPS {
        let wrapped: Vec<Vec<u8>> = frames
            .iter()
            .map(|f| synth::encapsulate(f, encap))
            .collect();
        let got = direct(&wrapped);
        let c = &got.counters;
        // RoCE totals and every skip count are those of the inner traffic.
        assert_eq!(
            (
                c.frames,
                c.roce_packets,
                c.roce_bytes,
                c.ce_packets,
                c.cnp_packets,
                c.skipped
            ),
            (
                plain.counters.frames,
                plain.counters.roce_packets,
                plain.counters.roce_bytes,
                plain.counters.ce_packets,
                plain.counters.cnp_packets,
                plain.counters.skipped
            ),
            "{encap:?}"
        );
        let n = frames.len() as u64;
        let (session, truncated) = match encap {
            Encap::ErspanII { session, truncated }
            | Encap::ErspanIII {
                session, truncated, ..
            } => (Some(session), truncated),
            _ => (None, false),
        };
        match session {
            Some(id) => {
                assert_eq!(c.mirror_sessions[usize::from(id)], n, "{encap:?}");
                assert_eq!(c.mirror_sessions.iter().sum::<u64>(), n, "{encap:?}");
                assert_eq!(c.mirror_sessionless, 0);
            }
            None => assert_eq!(
                (c.mirror_sessionless, c.mirror_sessions.iter().sum::<u64>()),
                (n, 0)
            ),
        }
        assert_eq!(
            c.mirror_truncated,
            if truncated { n } else { 0 },
            "{encap:?}"
        );
        // Flow by flow: the same stats, under a key that names the mirror.
        assert_eq!(got.flows.len(), plain.flows.len(), "{encap:?}");
        for (key, stats) in &plain.flows {
            let mut want = *stats;
            let m = got
                .flows
                .iter()
                .find(|(k, _)| FlowKey { mirror: 0, ..**k } == *key)
                .unwrap_or_else(|| panic!("{encap:?}: flow {key:?} missing"));
            match (MirrorOf::of(m.0.mirror), session) {
                (MirrorOf::Session(id), Some(want_id)) => assert_eq!(id, want_id),
                (MirrorOf::Kind(_), None) => {}
                (other, _) => panic!("{encap:?}: mirror key {other:?}"),
            }
            want.mirror_truncated = if truncated { want.packets } else { 0 };
            // The session's flow has the counts; the analysis is with every session's.
            assert_eq!(*m.1, want.counts_only(), "{encap:?}: flow {key:?}");
            let union = m.0.union().expect("a mirror copy");
            assert_eq!(
                got.unions.get(&union),
                Some(&want.analysis_only()),
                "{encap:?}: flow {key:?}"
            );
        }
    }
}

#[test]
fn gre_inside_a_mirror_copy_is_not_decapsulated_again() {
    let inner = synth::encapsulate(&clean()[0], Encap::Teb);
    let copy = synth::encapsulate(
        &inner,
        Encap::ErspanII {
            session: 9,
            truncated: false,
        },
    );
    let mut agg = Aggregate::new();
    let r = agg.push(&copy, 0);
    assert_eq!(r, Err(observer_common::SkipReason::GreUnsupported));
    assert_eq!(
        agg.counters.mirror_sessions[9], 1,
        "the copy still counts for its session"
    );
}

#[test]
fn two_sessions_of_the_same_traffic_never_merge() {
    let frames = clean();
    let mut agg = Aggregate::new();
    for f in &frames {
        for session in [7, 8] {
            let _ = agg.push(
                &synth::encapsulate(
                    f,
                    Encap::ErspanII {
                        session,
                        truncated: false,
                    },
                ),
                0,
            );
        }
    }
    let plain = direct(&frames);
    assert_eq!(agg.flows.len(), 2 * plain.flows.len());
    assert_eq!(
        agg.flows
            .values()
            .map(|s| s.psn_gaps + s.psn_regressions)
            .sum::<u64>(),
        0
    );
}

/// The frames of scenario `name` as seen directly, with their times.
fn seen_directly(name: &str) -> Vec<(Vec<u8>, u64)> {
    let w = synth::scenario(name).unwrap();
    w.frames.into_iter().map(|f| (f.bytes, f.ts_ns)).collect()
}

fn report_of(frames: &[(Vec<u8>, u64)]) -> roce_observer::model::Report {
    let mut agg = Aggregate::new();
    for (f, ts) in frames {
        let _ = agg.push(f, *ts);
    }
    agg.report(Source::pcap(Vec::new(), Vec::new()), 1.0)
}

/// Request packets whose PSNs the analysis follows.
fn requests_of(r: &roce_observer::model::Report) -> u64 {
    r.flows
        .iter()
        .filter(|f| f.psn_followed())
        .map(|f| f.ops.send + f.ops.write + f.ops.read_request + f.ops.atomic)
        .sum()
}

/// The report's rows of the flow `f` (any mirror).
fn rows_of<'a>(
    r: &'a roce_observer::model::Report,
    f: &roce_observer::model::Flow,
) -> Vec<&'a roce_observer::model::Flow> {
    r.flows
        .iter()
        .filter(|g| {
            (g.src_ip, g.dst_ip, g.udp_src_port, g.dest_qp)
                == (f.src_ip, f.dst_ip, f.udp_src_port, f.dest_qp)
        })
        .collect()
}

#[test]
fn a_qp_sprayed_over_three_mirror_sessions_is_analysed_whole() {
    // Packet i of each scenario is copied by session 1 + i % 3 alone: each session sees a third
    // of every QP, together they see it all. Ground truth: the same frames seen directly.
    for name in ["clean", "loss", "rule-reorder", "rule-psn-violation"] {
        let direct = report_of(&seen_directly(name));
        let sprayed = report_of(&through_sessions(name, |i| vec![1 + (i % 3) as u16]));
        assert_eq!(sprayed.totals.psn, direct.totals.psn, "{name}: totals");
        let mut spread = 0;
        for f in &direct.flows {
            let rows = rows_of(&sprayed, f);
            // Counts stay per session.
            assert_eq!(rows.iter().map(|g| g.packets).sum::<u64>(), f.packets);
            assert_eq!(rows.iter().map(|g| g.bytes).sum::<u64>(), f.bytes);
            // The analysis is the whole flow's, once, on the first row.
            let whole = timeless(std::slice::from_ref(f))[0].psn;
            assert_eq!(timeless(&[rows[0].clone()])[0].psn, whole, "{name}");
            if rows.len() == 1 {
                assert_eq!(rows[0].psn_scope, None);
                continue;
            }
            spread += 1;
            let views = rows.len() as u32;
            assert_eq!(
                rows.iter().map(|g| g.psn_scope).collect::<Vec<_>>(),
                (0..views)
                    .map(|i| Some(PsnScope {
                        mirror_views: views,
                        here: i == 0
                    }))
                    .collect::<Vec<_>>(),
                "{name}"
            );
            assert!(rows[1..].iter().all(|g| g.psn == Default::default()));
        }
        assert!(spread > 0, "{name}: some flow in several sessions");
    }
}

#[test]
fn two_taps_on_one_path_show_duplicates_not_resends() {
    // Every frame copied by session 1 and again by session 2: each request is a duplicate.
    let direct = report_of(&seen_directly("clean"));
    let requests = requests_of(&direct);
    assert!(requests > 0);
    let twice = report_of(&through_sessions("clean", |_| vec![1, 2]));
    let p = twice.totals.psn;
    assert_eq!(
        (
            p.duplicates,
            p.retransmissions,
            p.missing,
            p.out_of_order,
            p.gaps
        ),
        (requests, 0, 0, 0, 0)
    );
    assert_eq!(twice.totals.roce_packets, 2 * direct.totals.roce_packets);
}

#[test]
fn copies_lagging_behind_bursts_are_duplicates_while_no_nak_says_otherwise() {
    let direct = report_of(&seen_directly("clean"));
    let requests = requests_of(&direct);
    for lag in [1_000, 5_000, 50_000, 500_000] {
        let r = report_of(&lagging_taps("clean", lag));
        let p = r.totals.psn;
        assert_eq!(
            (
                p.duplicates,
                p.retransmissions,
                p.retransmission_episodes,
                p.missing
            ),
            (requests, 0, 0, 0),
            "lag {lag}"
        );
    }
    // One session mirroring each packet twice: the copies right behind their originals show
    // the copying.
    for lag in [1_000, 5_000] {
        let p = report_of(&lagging_copies("clean", lag, [1, 1])).totals.psn;
        assert_eq!(
            (p.duplicates, p.retransmissions, p.missing),
            (requests, 0, 0),
            "lag {lag}"
        );
    }
    // The time series follows the report's resends.
    let dir = integration_tests::Scratch::new("mirror-lagging-series");
    let path = dir.path("taps.pcap");
    let frames: Vec<synth::Frame> = lagging_taps("clean", 50_000)
        .into_iter()
        .map(|(bytes, ts_ns)| synth::Frame { bytes, ts_ns })
        .collect();
    synth::write_pcap(std::fs::File::create(&path).unwrap(), &frames).unwrap();
    let r = roce_observer::pipeline::replay_report(
        &[path.to_str().unwrap().to_string()],
        false,
        None,
        Some(&Default::default()),
        1,
    )
    .unwrap();
    let s = r.series.as_ref().expect("a series");
    assert_eq!(r.totals.psn.retransmissions, 0);
    assert_eq!(s.total.retransmissions.iter().sum::<u64>(), 0);
    // With NAKs coming back, the go-back-N of a real loss stays a resend, and the loss stays.
    let direct = report_of(&seen_directly("loss"));
    assert!(direct.totals.psn.retransmission_episodes > 0);
    for lag in [1_000, 50_000] {
        let r = report_of(&lagging_taps("loss", lag));
        assert_eq!(r.totals.psn.missing, direct.totals.psn.missing, "lag {lag}");
        assert!(
            r.totals.psn.retransmission_episodes >= direct.totals.psn.retransmission_episodes,
            "lag {lag}"
        );
    }
}

/// The skip reason of a frame from tshark's protocol path: the inner frame's after "erspan",
/// GRE that is not ERSPAN, or the plain frame's.
fn reason_of(protocols: &str) -> &'static str {
    let plain = |p: &str| {
        if !p.contains(":ip") {
            "not_ip"
        } else if !p.contains(":udp") {
            "not_udp"
        } else {
            "other"
        }
    };
    match protocols.split_once(":erspan") {
        Some((_, "" | ":data")) => "mirror_not_ethernet",
        Some((_, inner)) => plain(inner),
        None if protocols.contains(":gre") => "gre_unsupported",
        None => plain(protocols),
    }
}

#[test]
fn real_erspan_captures_decode_as_tshark_says() {
    let Some(files) = integration_tests::shared_capture_files(
        "real_erspan_captures_decode_as_tshark_says",
        "erspan",
    ) else {
        return;
    };
    assert_eq!(files.len(), 8);
    for file in files {
        let (status, out, err) =
            output(Command::new("tshark").arg("-n").arg("-r").arg(&file).args([
                "-T",
                "fields",
                "-E",
                "separator=/t",
                "-e",
                "erspan.spanid",
                "-e",
                "frame.protocols",
            ]));
        assert!(status.success(), "tshark {}: {err}", file.display());
        let mut sessions: BTreeMap<u16, u64> = BTreeMap::new();
        let mut sessionless = 0u64;
        let mut reasons: BTreeMap<&str, u64> = BTreeMap::new();
        for line in out.lines() {
            let (span, protocols) = line.split_once('\t').unwrap();
            // tshark prints the session of every ERSPAN II/III header; type I has none.
            if protocols.contains(":erspan") {
                match span.split(',').next().filter(|s| !s.is_empty()) {
                    Some(id) => *sessions.entry(id.parse().unwrap()).or_default() += 1,
                    None => sessionless += 1,
                }
            }
            *reasons.entry(reason_of(protocols)).or_default() += 1;
        }
        let mut r = Replay::new();
        r.file(file.to_str().unwrap(), false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        let c = &r.agg.counters;
        // Through the report, as a user reads them.
        let report = r
            .agg
            .report(Source::pcap(r.files.clone(), vec![]), r.window_seconds());
        let mirror = report.totals.mirror.clone().expect("mirror totals");
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        assert_eq!(
            (mirror.sessions.clone(), mirror.sessionless),
            (sessions, sessionless),
            "{name}: sessions"
        );
        let mut got_reasons: BTreeMap<&str, u64> = BTreeMap::new();
        for reason in observer_common::SkipReason::ALL {
            let n = c.skipped[reason as usize];
            if n > 0 {
                got_reasons.insert(reason.name(), n);
            }
        }
        assert_eq!(got_reasons, reasons, "{name}: inner frames by skip reason");
        assert_eq!(c.roce_packets, 0, "{name}: no RoCE inside");

        eprintln!(
            "{name}: {} frames, sessions {:?}, reasons {reasons:?}",
            c.frames, mirror.sessions
        );
    }
}
