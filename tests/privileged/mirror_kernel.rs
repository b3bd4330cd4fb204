//! Mirror copies in the kernel program under BPF_PROG_TEST_RUN: encapsulated RoCE and several
//! sessions of one traffic count and analyse as in userspace, and the real ERSPAN captures decode
//! as tshark says, in replay and in the kernel. In userspace alone: mirror.rs.

use std::{collections::BTreeMap, process::Command};

use aya::programs::{TestRun, TestRunOptions};
use integration_tests::{
    ENCAPS, clean_frames as clean, lagging_taps, load_program, output, require_root,
    through_sessions, xdp_mut,
};
use observer_common::programs;
use roce_observer::{
    aggregate::Aggregate, model::Source, source::live::read_maps, source::replay::Replay,
    source::synth,
};

#[test]
fn the_kernel_decapsulates_like_userspace() {
    if !require_root("the_kernel_decapsulates_like_userspace") {
        return;
    }
    let mut ebpf = load_program(programs::OBSERVE);
    let mut user = Aggregate::new();
    let mut wrapped: Vec<Vec<u8>> = Vec::new();
    for encap in ENCAPS {
        wrapped.extend(clean().iter().map(|f| synth::encapsulate(f, encap)));
    }
    wrapped.extend(synth::mirror_noise().into_iter().map(|(b, _, _)| b));
    let prog = xdp_mut(&mut ebpf, programs::OBSERVE);
    for f in &wrapped {
        let mut out = vec![0u8; f.len()];
        let r = prog
            .test_run(TestRunOptions {
                data_in: Some(f),
                data_out: Some(&mut out),
                ..Default::default()
            })
            .unwrap();
        assert_eq!((r.return_value, &out), (2, f), "XDP_PASS, bytes unchanged");
        let _ = user.push(f, 0);
    }
    let kernel = read_maps(&ebpf, 0).unwrap();
    assert_eq!(kernel.counters, user.counters);
    assert_eq!(kernel.comparable(), user.comparable());
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

        // The kernel program under BPF_PROG_TEST_RUN on the same frames: every verdict
        // XDP_PASS, bytes unchanged, and the maps equal to the replay's aggregate.
        if require_root(&format!(
            "real_erspan_captures_decode_as_tshark_says ({name}, kernel)"
        )) {
            let frames = integration_tests::pcap_frames(&file);
            assert_eq!(frames.len() as u64, c.frames, "{name}: frames");
            let mut ebpf = load_program(programs::OBSERVE);
            let prog = xdp_mut(&mut ebpf, programs::OBSERVE);
            for f in &frames {
                let mut out = vec![0u8; f.len()];
                let run = prog
                    .test_run(TestRunOptions {
                        data_in: Some(f),
                        data_out: Some(&mut out),
                        ..Default::default()
                    })
                    .unwrap();
                assert_eq!(
                    (run.return_value, &out),
                    (2, f),
                    "{name}: XDP_PASS, unchanged"
                );
            }
            let kernel = read_maps(&ebpf, 0).unwrap();
            assert_eq!(kernel.counters, r.agg.counters, "{name}: kernel counters");
            assert_eq!(
                kernel.comparable(),
                r.agg.comparable(),
                "{name}: kernel flows"
            );
        }
        eprintln!(
            "{name}: {} frames, sessions {:?}, reasons {reasons:?}",
            c.frames, mirror.sessions
        );
    }
}

#[test]
fn the_kernel_analyses_mirror_sessions_together_like_userspace() {
    if !require_root("the_kernel_analyses_mirror_sessions_together_like_userspace") {
        return;
    }
    for frames in [
        through_sessions("loss", |i| vec![1 + (i % 3) as u16]),
        through_sessions("rule-reorder", |i| vec![7 + (i % 2) as u16]),
        through_sessions("clean", |_| vec![1, 2]),
        lagging_taps("clean", 5_000),
    ] {
        let mut ebpf = load_program(programs::OBSERVE);
        let mut user = Aggregate::new();
        let prog = xdp_mut(&mut ebpf, programs::OBSERVE);
        for (f, _) in &frames {
            let r = prog
                .test_run(TestRunOptions {
                    data_in: Some(f),
                    ..Default::default()
                })
                .unwrap();
            assert_eq!(r.return_value, 2, "XDP_PASS");
            let _ = user.push(f, 0);
        }
        let kernel = read_maps(&ebpf, 0).unwrap();
        assert!(!user.unions.is_empty());
        assert_eq!(kernel.comparable(), user.comparable());
    }
}
