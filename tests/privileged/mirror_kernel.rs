//! Mirror copies in the kernel program under BPF_PROG_TEST_RUN: encapsulated RoCE and several
//! sessions of one traffic count and analyse as in userspace, and the real ERSPAN captures read
//! as in replay. In userspace alone, and the captures against tshark: mirror.rs.

use aya::programs::{TestRun, TestRunOptions};
use integration_tests::{
    ENCAPS, clean_frames as clean, lagging_taps, load_program, require_root, through_sessions,
    xdp_mut,
};
use observer_common::programs;
use roce_observer::{
    aggregate::Aggregate, source::live::read_maps, source::replay::Replay, source::synth,
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

/// The real ERSPAN captures through the kernel program under BPF_PROG_TEST_RUN: every verdict
/// XDP_PASS, bytes unchanged, and the maps equal to the replay's aggregate (which mirror.rs
/// checks against tshark).
#[test]
fn the_kernel_reads_real_erspan_captures_as_replay() {
    if !require_root("the_kernel_reads_real_erspan_captures_as_replay") {
        return;
    }
    let Some(files) = integration_tests::shared_capture_files(
        "the_kernel_reads_real_erspan_captures_as_replay",
        "erspan",
    ) else {
        return;
    };
    assert_eq!(files.len(), 8);
    for file in files {
        let mut r = Replay::new();
        r.file(file.to_str().unwrap(), false)
            .unwrap_or_else(|e| panic!("{e}"));
        let c = &r.agg.counters;
        let name = file.file_name().unwrap().to_string_lossy().to_string();
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
