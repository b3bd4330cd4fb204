//! The kernel program under BPF_PROG_TEST_RUN on the generated corpus: every verdict XDP_PASS,
//! every output byte identical to the input, and the kernel maps equal to the userspace
//! aggregation of the same frames (same parser, two memories, one answer) and to the ground truth.

use aya::{
    EbpfLoader,
    programs::{TestRun, TestRunOptions, Xdp},
};
use integration_tests::{require_root, truth_aggregate};
use observer_common::{programs, wire::ETH_HEADER_LEN};
use roce_observer::{EBPF_OBJECT, aggregate::Aggregate, live::read_maps, synth};

const XDP_PASS: u32 = 2;

#[test]
fn kernel_maps_equal_userspace_aggregation_on_the_corpus() {
    if !require_root("kernel_maps_equal_userspace_aggregation_on_the_corpus") {
        return;
    }
    let corpus = synth::scenario("corpus").expect("corpus scenario");
    // BPF_PROG_TEST_RUN refuses XDP input shorter than an Ethernet header; no NIC delivers one.
    let frames: Vec<&[u8]> = corpus
        .frames
        .iter()
        .map(|f| f.bytes.as_slice())
        .filter(|b| b.len() >= ETH_HEADER_LEN)
        .collect();
    assert!(frames.len() > 1000, "corpus too small: {}", frames.len());

    let mut ebpf = EbpfLoader::new().load(EBPF_OBJECT).expect("load object");
    let prog: &mut Xdp = ebpf
        .program_mut(programs::OBSERVE)
        .unwrap()
        .try_into()
        .unwrap();
    prog.load().expect("verifier accepts the observer");

    let mut user = Aggregate::new();
    let before_ns = monotonic_ns();
    for (i, frame) in frames.iter().enumerate() {
        let mut out = vec![0u8; frame.len()];
        let r = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ..Default::default()
            })
            .unwrap_or_else(|e| panic!("test_run of frame {i}: {e}"));
        assert_eq!(r.return_value, XDP_PASS, "frame {i}: verdict");
        assert_eq!(r.data_size_out as usize, frame.len(), "frame {i}: size");
        assert_eq!(&out, frame, "frame {i}: bytes changed");
        let _ = user.push(frame, 0);
    }
    let after_ns = monotonic_ns();

    let kernel = read_maps(&ebpf, 0).expect("read maps");
    assert_eq!(kernel.counters, user.counters, "global counters");
    assert_eq!(
        kernel.flows.keys().collect::<Vec<_>>(),
        user.flows.keys().collect::<Vec<_>>(),
        "flow keys"
    );
    assert_eq!(kernel.comparable(), user.comparable(), "per-flow stats");
    for (key, s) in &kernel.flows {
        assert!(
            before_ns <= s.first_seen_ns
                && s.first_seen_ns <= s.last_seen_ns
                && s.last_seen_ns <= after_ns,
            "{key:?}: times {}..{} outside {before_ns}..{after_ns}",
            s.first_seen_ns,
            s.last_seen_ns
        );
    }

    // And the userspace aggregation of the whole corpus equals the generator's ground truth.
    let mut all = Aggregate::new();
    for f in &corpus.frames {
        let _ = all.push(&f.bytes, f.ts_ns);
    }
    assert_eq!(all.comparable(), truth_aggregate(&corpus.truth), "truth");
}

#[test]
fn baseline_program_counts_frames_and_passes() {
    if !require_root("baseline_program_counts_frames_and_passes") {
        return;
    }
    let mut ebpf = EbpfLoader::new().load(EBPF_OBJECT).expect("load object");
    let prog: &mut Xdp = ebpf
        .program_mut(programs::BASELINE)
        .unwrap()
        .try_into()
        .unwrap();
    prog.load().unwrap();
    let frame = synth::scenario("demo").unwrap().frames[0].bytes.clone();
    let r = prog
        .test_run(TestRunOptions {
            data_in: Some(&frame),
            repeat: 1000,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(r.return_value, XDP_PASS);
    let map = ebpf.map(observer_common::maps::BASELINE).unwrap();
    let counts: aya::maps::PerCpuArray<_, u64> = aya::maps::PerCpuArray::try_from(map).unwrap();
    let total: u64 = counts.get(&0, 0).unwrap().iter().sum();
    assert_eq!(total, 1000);
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
