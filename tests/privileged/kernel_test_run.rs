//! The kernel program under BPF_PROG_TEST_RUN on the generated corpus: every verdict XDP_PASS,
//! every output byte identical to the input, and the kernel maps equal to the userspace
//! aggregation of the same frames (same parser, two memories, one answer) and to the ground truth.

use aya::programs::{TestRun, TestRunOptions, Xdp};
use integration_tests::{load_program, require_root, truth_aggregate, xdp_mut};
use observer_common::{programs, wire::ETH_HEADER_LEN};
use roce_observer::{
    aggregate::Aggregate,
    source::live::{monotonic_ns, read_maps},
    source::synth::{self, Ip, RoceFrame},
};

const XDP_PASS: u32 = 2;

fn load_observer() -> aya::Ebpf {
    load_program(programs::OBSERVE)
}

/// Runs one frame through the observer: XDP_PASS and the bytes unchanged.
fn run(ebpf: &aya::Ebpf, frame: &[u8]) {
    let prog: &Xdp = ebpf.program(programs::OBSERVE).unwrap().try_into().unwrap();
    let mut out = vec![0u8; frame.len()];
    let r = prog
        .test_run(TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ..Default::default()
        })
        .expect("test_run");
    assert_eq!(r.return_value, XDP_PASS, "verdict");
    assert_eq!(r.data_size_out as usize, frame.len(), "size");
    assert_eq!(out, frame, "bytes changed");
}

/// Tests that time the kernel's clock run alone: the corpus tests beside them load every CPU
/// and make a 10 us timer late by milliseconds.
static KERNEL: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    KERNEL
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    KERNEL
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn kernel_maps_equal_userspace_aggregation_on_the_corpus() {
    if !require_root("kernel_maps_equal_userspace_aggregation_on_the_corpus") {
        return;
    }
    let _shared = shared();
    kernel_equals_userspace("corpus", 1000);
}

/// PAUSE / PFC frames per sender and priority, beside RoCE on the paused priority.
#[test]
fn kernel_pause_table_equals_userspace_and_truth() {
    if !require_root("kernel_pause_table_equals_userspace_and_truth") {
        return;
    }
    let _shared = shared();
    kernel_equals_userspace("pfc", 300);
}

/// 2000 flows in a 4096-slot cache: many slot collisions, so write-backs to the table.
#[test]
fn kernel_maps_equal_userspace_aggregation_with_many_flows() {
    if !require_root("kernel_maps_equal_userspace_aggregation_with_many_flows") {
        return;
    }
    let _shared = shared();
    kernel_equals_userspace("many-qps", 5000);
}

fn kernel_equals_userspace(scenario: &str, min_frames: usize) {
    let corpus = synth::scenario(scenario).expect("scenario");
    // BPF_PROG_TEST_RUN refuses XDP input shorter than an Ethernet header; no NIC delivers one.
    let frames: Vec<&[u8]> = corpus
        .frames
        .iter()
        .map(|f| f.bytes.as_slice())
        .filter(|b| b.len() >= ETH_HEADER_LEN)
        .collect();
    assert!(
        frames.len() > min_frames,
        "{scenario} too small: {}",
        frames.len()
    );

    // The clock running (the times are checked against the run's).
    let mut ebpf = load_observer();
    roce_observer::source::live::start_clock(&mut ebpf, roce_observer::source::live::RUN_TICK_NS)
        .unwrap();
    let mut user = Aggregate::new();
    // The kernel clock has one tick's resolution: allow 10 ms either side.
    let before_ns = monotonic_ns() - 10_000_000;
    for frame in &frames {
        run(&ebpf, frame);
        let _ = user.push(frame, 0);
    }
    let after_ns = monotonic_ns() + 10_000_000;

    let kernel = read_maps(&ebpf, 0).expect("read maps");
    assert_eq!(kernel.counters, user.counters, "global counters");
    let keys = |a: &Aggregate| {
        a.flows
            .keys()
            .copied()
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(keys(&kernel), keys(&user), "flow keys");
    assert_eq!(kernel.comparable(), user.comparable(), "per-flow stats");
    if !corpus.truth.pauses.is_empty() {
        assert_eq!(
            kernel.pauses.keys().collect::<Vec<_>>(),
            corpus.truth.pauses.keys().collect::<Vec<_>>(),
            "pause senders"
        );
        for (key, s) in &kernel.pauses {
            assert!(
                before_ns <= s.first_seen_ns && s.last_seen_ns <= after_ns,
                "{key:?}: pause times outside the run"
            );
        }
    }
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

    // And the userspace aggregation of the whole scenario equals the generator's ground truth.
    let mut all = Aggregate::new();
    for f in &corpus.frames {
        let _ = all.push(&f.bytes, f.ts_ns);
    }
    assert_eq!(all.comparable(), truth_aggregate(&corpus.truth), "truth");
}

/// A flow evicted from its cache slot by a colliding flow keeps its PSN tracking: a gap that
/// straddles the write-back is still seen, and nothing is counted twice or lost.
#[test]
fn psn_continuity_survives_cache_write_back() {
    if !require_root("psn_continuity_survives_cache_write_back") {
        return;
    }
    let _shared = shared();
    let ip = Ip::v4("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
    let write = |qp: u32, psn: u32| {
        let mut f = RoceFrame::new(ip, observer_common::wire::op::WRITE_MIDDLE, qp);
        f.bth.psn = psn;
        f.payload_len = 256;
        f
    };
    let a = write(0x11, 0);
    let slot = a.flow_key().slot();
    let b_qp = (0x12..0xFF_FFFF)
        .find(|qp| write(*qp, 0).flow_key().slot() == slot)
        .expect("a colliding queue pair");
    let ebpf = load_observer();
    let mut frames = Vec::new();
    // A: PSNs 0..4; B takes A's slot; A again at 8 (3 missing); B takes it back; A 9, then 2 (a
    // duplicate).
    frames.extend((0..5).map(|psn| write(0x11, psn)));
    frames.push(write(b_qp, 100));
    frames.push(write(0x11, 8));
    frames.push(write(b_qp, 101));
    frames.push(write(0x11, 9));
    frames.push(write(0x11, 2));
    for f in &frames {
        run(&ebpf, &f.to_bytes());
    }
    let kernel = read_maps(&ebpf, 0).expect("read maps");
    let sa = kernel.flows[&a.flow_key()];
    let sb = kernel.flows[&write(b_qp, 0).flow_key()];
    assert_eq!(sa.packets, 8);
    assert_eq!(sa.bytes, 8 * u64::from(a.ip_len()));
    // 8 opened a hole of three (still open: lost at the end); 2 was seen before.
    assert_eq!(
        (sa.psn_gaps, sa.psn_regressions, sa.seq.duplicates),
        (1, 1, 1)
    );
    assert_eq!(sa.timeless().seq.lost, 3);
    assert_eq!(sb.packets, 2);
    assert_eq!((sb.psn_gaps, sb.psn_regressions), (0, 0));
    let c = sb.seq;
    assert_eq!((c.duplicates, c.out_of_order, c.retransmissions), (0, 0, 0));
    // MIDDLE packets of 256 bytes: the path MTU.
    assert_eq!((sa.seq.pmtu_mask, c.pmtu_mask), (1, 1));
    assert_eq!(kernel.counters.roce_packets, 10);
    assert_eq!(kernel.counters.flow_insert_failures, 0);
}

/// The first `n` frames of the demo scenario.
fn demo_frames(n: usize) -> Vec<Vec<u8>> {
    synth::scenario("demo")
        .unwrap()
        .frames
        .into_iter()
        .map(|f| f.bytes)
        .take(n)
        .collect()
}

/// Microburst slots in the kernel: every frame of an observed interface adds its bytes on the
/// wire (frame + 24) to the slot of its time in its ring; frames of other interfaces add
/// nothing.
#[test]
fn kernel_burst_slots_count_every_frame_on_the_wire() {
    if !require_root("kernel_burst_slots_count_every_frame_on_the_wire") {
        return;
    }
    let _alone = alone();
    use observer_common::{BURST_RING_SLOTS, BurstSlot, maps};
    let frames = demo_frames(200);
    let mut ebpf = load_observer();
    // Not observed: nothing counted.
    for f in &frames[..10] {
        run(&ebpf, f);
    }
    // Every CPU's ring (two rings per CPU: one interface), summed.
    let ring_bytes = |ebpf: &aya::Ebpf, ring: u32| -> (u64, Vec<u64>) {
        let slots: aya::maps::Array<_, BurstSlot> =
            aya::maps::Array::try_from(ebpf.map(maps::BURSTS).unwrap()).unwrap();
        let cpus = aya::util::nr_cpus().unwrap() as u32;
        let mut total = 0;
        let mut tags = Vec::new();
        for cpu in 0..cpus {
            let first = (cpu * 2 + ring) * BURST_RING_SLOTS;
            for i in first..first + BURST_RING_SLOTS {
                let s = slots.get(&i, 0).unwrap();
                if s.bytes > 0 {
                    total += s.bytes;
                    tags.push(s.slot);
                }
            }
        }
        (total, tags)
    };
    assert_eq!(ring_bytes(&ebpf, 0).0, 0, "an interface not observed");
    // BPF_PROG_TEST_RUN runs XDP on the loopback device's first queue.
    let lo = roce_observer::source::live::if_index("lo").unwrap();
    let slot_ns = 1_000_000;
    let before = monotonic_ns() / slot_ns;
    roce_observer::source::live::observe_bursts(&mut ebpf, &[("lo", lo)], slot_ns).unwrap();
    for f in &frames {
        run(&ebpf, f);
    }
    let after = monotonic_ns() / slot_ns;
    let (bytes, tags) = ring_bytes(&ebpf, 0);
    let wire: u64 = frames.iter().map(|f| f.len() as u64 + 24).sum();
    assert_eq!(bytes, wire, "bytes on the wire");
    assert!(!tags.is_empty());
    for t in &tags {
        assert!(
            before <= *t && *t <= after,
            "slot {t} outside {before}..{after}"
        );
    }
    assert_eq!(ring_bytes(&ebpf, 1).0, 0, "the egress ring");
}

/// Microburst slots read while the kernel's clock runs late: the reader goes by the kernel's
/// tick, not its own clock, so frames that take a slot CLOCK_MONOTONIC has left behind are read
/// all the same, none lost and none reported lost, with the time the tick stood at that slot,
/// even when that is longer than the ring. Once detached, the last slot spans until then. (The
/// timer is stopped, as a late one stands still, then started again.)
#[test]
fn kernel_burst_slots_are_read_whole_when_the_clock_runs_late() {
    if !require_root("kernel_burst_slots_are_read_whole_when_the_clock_runs_late") {
        return;
    }
    let _alone = alone();
    use observer_common::{BURST_RING_SLOTS, ClockValue, maps};
    use roce_observer::source::live::{BurstReader, SlotRead, read_clock, start_clock};
    let frames = demo_frames(100);
    let wire: u64 = frames.iter().map(|f| f.len() as u64 + 24).sum();
    let mut ebpf = load_observer();
    let lo = roce_observer::source::live::if_index("lo").unwrap();
    // 10 us slots: a ring is 20 ms.
    let slot_ns = 10_000;
    let stall = std::time::Duration::from_millis(30);
    let ring_ns = slot_ns * u64::from(BURST_RING_SLOTS);
    assert!(stall.as_nanos() as u64 > ring_ns + 5_000_000);
    roce_observer::source::live::observe_bursts(&mut ebpf, &[("lo", lo)], slot_ns).unwrap();
    let mut reader = BurstReader::of_object(&ebpf, slot_ns).unwrap();
    let mut read = Vec::new();
    let mut drain = |reader: &mut BurstReader, ebpf: &aya::Ebpf| {
        reader.drain(&read_clock(ebpf).unwrap().clock, |ring, r| {
            read.push((ring, r))
        });
    };
    // The timer stops (writing the value cancels it; a run under way ends), then the tick is
    // set to the slot of now, one the timer never left (so the kernel logged no span of it),
    // with its time.
    let stop = |ebpf: &mut aya::Ebpf| -> u64 {
        let mut clock: aya::maps::Array<_, ClockValue> =
            aya::maps::Array::try_from(ebpf.map_mut(maps::CLOCK).unwrap()).unwrap();
        let mut value = clock.get(&0, 0).unwrap();
        clock.set(0, value, 0).unwrap();
        loop {
            let ticks = clock.get(&0, 0).unwrap().clock.ticks;
            std::thread::sleep(std::time::Duration::from_millis(1));
            value = clock.get(&0, 0).unwrap();
            if value.clock.ticks == ticks {
                break;
            }
        }
        value.clock.tick = monotonic_ns() / slot_ns;
        value.clock.now_ns = value.clock.tick * slot_ns;
        clock.set(0, value, 0).unwrap();
        value.clock.tick
    };
    let stale = stop(&mut ebpf);
    std::thread::sleep(stall);
    assert!(
        monotonic_ns() / slot_ns > stale + u64::from(BURST_RING_SLOTS),
        "CLOCK_MONOTONIC moved on by more than a ring"
    );
    assert_eq!(
        read_clock(&ebpf).unwrap().clock.tick,
        stale,
        "the timer stopped"
    );
    // Drained meanwhile, then the frames come, in the slot of the tick they read.
    drain(&mut reader, &ebpf);
    for f in &frames {
        run(&ebpf, f);
    }
    drain(&mut reader, &ebpf);
    // The timer runs again and catches up; the next drains find the slot complete, and how
    // long the tick stood at it.
    let restart = monotonic_ns() / slot_ns;
    start_clock(&mut ebpf, slot_ns).unwrap();
    let restarted = monotonic_ns() / slot_ns;
    // The span is taken at once (the log's half holds 512 records, some 10 ms of a late
    // 10 us timer); the slot waits until the tick moves on again.
    drain(&mut reader, &ebpf);
    let ticks = read_clock(&ebpf).unwrap().clock.ticks;
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert!(
        read_clock(&ebpf).unwrap().clock.ticks > ticks,
        "the timer ticks again"
    );
    drain(&mut reader, &ebpf);
    drain(&mut reader, &ebpf);
    let [(0, SlotRead::Bytes { slot, bytes, slots })] = read[..] else {
        panic!("one read of ring 0, nothing lost: {read:?}");
    };
    assert_eq!(
        (slot, bytes),
        (stale, wire),
        "every frame's bytes, in the stale tick's slot, read once"
    );
    assert!(
        (restart - stale..=restarted - stale).contains(&slots),
        "the slot stood for {slots} slots' time: until the restart, {} to {}",
        restart - stale,
        restarted - stale
    );
    // Stopped again, the reader caught up (nothing to read), frames, then read as once
    // detached: the last slot spans until now.
    let nothing = |_, r| panic!("nothing more to read: {r:?}");
    let stale = stop(&mut ebpf);
    reader.drain(&read_clock(&ebpf).unwrap().clock, nothing);
    for f in &frames {
        run(&ebpf, f);
    }
    std::thread::sleep(std::time::Duration::from_millis(5));
    let (before, mut last) = (monotonic_ns() / slot_ns, Vec::new());
    reader.drain_all(&read_clock(&ebpf).unwrap().clock, before, |ring, r| {
        last.push((ring, r))
    });
    assert_eq!(
        last,
        vec![(
            0,
            SlotRead::Bytes {
                slot: stale,
                bytes: wire,
                slots: before - stale
            }
        )]
    );
    assert!(before - stale >= 500, "5 ms of 10 us slots");

    // A reader a whole ring behind: the slot whose entry frames of a later turn took is lost
    // (the frames run on one CPU: each CPU has its own ring), and said so; the later one read.
    // SAFETY: a zeroed set with the CPU this thread runs on added, for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(libc::sched_getcpu() as usize, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
    let first = stop(&mut ebpf);
    reader.drain(&read_clock(&ebpf).unwrap().clock, nothing);
    for f in &frames {
        run(&ebpf, f);
    }
    let later = first + u64::from(BURST_RING_SLOTS);
    {
        let mut clock: aya::maps::Array<_, ClockValue> =
            aya::maps::Array::try_from(ebpf.map_mut(maps::CLOCK).unwrap()).unwrap();
        let mut value = clock.get(&0, 0).unwrap();
        (value.clock.tick, value.clock.now_ns) = (later, later * slot_ns);
        clock.set(0, value, 0).unwrap();
    }
    for f in &frames[..10] {
        run(&ebpf, f);
    }
    let mut behind = Vec::new();
    let later_wire: u64 = frames[..10].iter().map(|f| f.len() as u64 + 24).sum();
    reader.drain_all(&read_clock(&ebpf).unwrap().clock, later, |ring, r| {
        behind.push((ring, r))
    });
    assert_eq!(
        behind,
        vec![
            (0, SlotRead::Lost(1)),
            (
                0,
                SlotRead::Bytes {
                    slot: later,
                    bytes: later_wire,
                    slots: 1
                }
            )
        ]
    );
}

/// The programs' clock: a BPF timer ticks it at its period, on the period's multiples of
/// CLOCK_MONOTONIC, and says how late it ran.
#[test]
fn kernel_clock_ticks_at_its_period() {
    if !require_root("kernel_clock_ticks_at_its_period") {
        return;
    }
    let _alone = alone();
    use roce_observer::source::live::{read_clock, start_clock};
    let mut ebpf = load_observer();
    let period = 2_000_000;
    let t0 = monotonic_ns();
    start_clock(&mut ebpf, period).unwrap();
    let start = read_clock(&ebpf).unwrap().clock;
    assert_eq!(start.period_ns, period);
    assert!(start.now_ns <= t0 + period && t0 < start.now_ns + 2 * period);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let c = read_clock(&ebpf).unwrap().clock;
    let t1 = monotonic_ns();
    // 50 ticks in 100 ms; on a loaded machine a run later than a period skips the ticks it
    // missed (it arms the next tick after its own time), and an oversleep counts the ticks of
    // the time that passed.
    let ticks = c.ticks - start.ticks;
    let most = (t1 - t0) / period + 3;
    assert!(
        (25..=most).contains(&ticks),
        "{ticks} ticks in {:.1} ms",
        (t1 - t0) as f64 / 1e6
    );
    assert_eq!(c.absolute, 1, "absolute BPF timers (kernel 6.7 and later)");
    assert_eq!(c.now_ns % period, 0, "a tick is a multiple of the period");
    assert_eq!(c.tick, c.now_ns / period);
    assert!(
        c.now_ns <= t1 && t1 - c.now_ns < 3 * period,
        "{} vs {t1}",
        c.now_ns
    );
    // At another period from then on, its time going on from where it was.
    start_clock(&mut ebpf, period / 2).unwrap();
    let restarted = read_clock(&ebpf).unwrap().clock;
    assert!(
        restarted.now_ns >= c.now_ns,
        "the time went back at the restart"
    );
    let slept_from = monotonic_ns();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let c = read_clock(&ebpf).unwrap().clock;
    let slept = monotonic_ns() - slept_from;
    assert_eq!(c.now_ns % (period / 2), 0);
    let ticks = c.ticks - restarted.ticks;
    // 20 ticks in 20 ms; a loaded machine oversleeps (the ticks follow the time that passed,
    // at most one period's worth more) or runs the timer late (skipping ticks).
    let most = slept / (period / 2) + 3;
    assert!(
        (8..=most).contains(&ticks),
        "{ticks} ticks in {:.1} ms",
        slept as f64 / 1e6
    );
}

/// Per-interface counters in the kernel: every frame of an observed interface, and its RoCEv2
/// packets by ECN codepoint and operation class, with or without microburst slots; frames of
/// other interfaces count nothing.
#[test]
fn kernel_interface_counters_count_every_frame() {
    if !require_root("kernel_interface_counters_count_every_frame") {
        return;
    }
    let _shared = shared();
    use observer_common::{IfaceCounters, maps};
    let w = synth::scenario("e2e").unwrap();
    let mut ebpf = load_observer();
    let read = |ebpf: &aya::Ebpf, i: u32| -> IfaceCounters {
        let m: aya::maps::PerCpuArray<_, IfaceCounters> =
            aya::maps::PerCpuArray::try_from(ebpf.map(maps::IFACE_COUNTERS).unwrap()).unwrap();
        let mut total = IfaceCounters::default();
        for c in m.get(&i, 0).unwrap().iter() {
            total.merge(c);
        }
        total
    };
    for f in w.frames.iter().take(10) {
        run(&ebpf, &f.bytes);
    }
    assert_eq!(read(&ebpf, 0), IfaceCounters::default(), "not observed");
    let lo = roce_observer::source::live::if_index("lo").unwrap();
    // Slot width 0: counters without microburst slots.
    roce_observer::source::live::observe_bursts(&mut ebpf, &[("lo", lo)], 0).unwrap();
    for f in &w.frames {
        run(&ebpf, &f.bytes);
    }
    let got = read(&ebpf, 0);
    let mut want = IfaceCounters {
        frames: w.frames.len() as u64,
        frame_bytes: w.frames.iter().map(|f| f.bytes.len() as u64).sum(),
        roce_packets: w.truth.counters.roce_packets,
        roce_bytes: w.truth.counters.roce_bytes,
        ..IfaceCounters::default()
    };
    for s in w.truth.flows.values() {
        for (a, b) in want.ecn.iter_mut().zip(s.ecn) {
            *a += b;
        }
        for (a, b) in want.ops.iter_mut().zip(s.ops) {
            *a += b;
        }
    }
    assert_eq!(got, want);
    assert_eq!(read(&ebpf, 1), IfaceCounters::default(), "egress");
}

#[test]
fn baseline_program_counts_frames_and_passes() {
    if !require_root("baseline_program_counts_frames_and_passes") {
        return;
    }
    let _shared = shared();
    let mut ebpf = load_program(programs::BASELINE);
    let frame = synth::scenario("demo").unwrap().frames[0].bytes.clone();
    let r = xdp_mut(&mut ebpf, programs::BASELINE)
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

/// Every program of the object passes the verifier: the ones `diagnose` attaches and the
/// benchmark's variants (a change in the shared parser can break one program and not another).
#[test]
fn every_program_in_the_object_passes_the_verifier() {
    if !require_root("every_program_in_the_object_passes_the_verifier") {
        return;
    }
    let _shared = shared();
    let mut ebpf = aya::EbpfLoader::new()
        .load(roce_observer::EBPF_OBJECT)
        .expect("load object");
    let mut names: Vec<String> = ebpf.programs().map(|(n, _)| n.to_string()).collect();
    names.sort();
    let mut want = vec![
        programs::OBSERVE,
        programs::OBSERVE_CONSUME,
        programs::OBSERVE_EGRESS,
        programs::OBSERVE_INGRESS,
        programs::BASELINE,
        programs::OBSERVE_UNCACHED,
        programs::OBSERVE_SHARED,
        programs::START_CLOCK,
        programs::BASELINE_DROP,
        programs::SPREAD,
        programs::SPREAD_BARE,
        programs::OBSERVE_CPUMAP,
        programs::OBSERVE_CONSUME_CPUMAP,
        programs::SPREAD_DROPS,
    ];
    want.sort();
    assert_eq!(names, want);
    let mut rejected = Vec::new();
    let mut refused_stamping = false;
    for name in &names {
        let result = match ebpf.program_mut(name).unwrap() {
            aya::programs::Program::Xdp(p) => p.load(),
            aya::programs::Program::SchedClassifier(p) => p.load(),
            aya::programs::Program::RawTracePoint(p) => p.load(),
            _ => panic!("{name}: unexpected program type"),
        };
        if let Err(e) = result {
            let why = format!("verifier rejects {name}: {e}");
            // The one program a kernel may refuse: the spreading one that stamps arrival
            // times in XDP metadata, on a kernel that refuses XDP programs the helper (the
            // observer then loads `roce_spread_bare`, which must load).
            if name == programs::SPREAD && why.contains("cannot use helper bpf_xdp_adjust_meta") {
                eprintln!(
                    "NOTE: this kernel refuses bpf_xdp_adjust_meta to XDP programs: {name} does not load, {} stands in",
                    programs::SPREAD_BARE
                );
                refused_stamping = true;
                continue;
            }
            rejected.push(why);
            continue;
        }
        // How close each program is to the verifier's limit of a million instructions.
        let info = ebpf.program(name).unwrap().info().expect("program info");
        if let Some(n) = info.verified_instruction_count() {
            eprintln!("{name}: {n} instructions verified");
        }
    }
    assert!(rejected.is_empty(), "{}", rejected.join("\n"));
    // Which of the two the observer loads: the stamping one wherever the kernel takes it.
    let mut fresh = roce_observer::source::live::load_object(
        roce_observer::EBPF_OBJECT,
        &[],
        1,
        roce_observer::source::live::RUN_TICK_NS,
    )
    .expect("load object");
    let loaded =
        roce_observer::source::live::load_spread(&mut fresh).expect("a spreading program loads");
    assert_eq!(
        loaded,
        if refused_stamping {
            programs::SPREAD_BARE
        } else {
            programs::SPREAD
        }
    );
}

/// One flow's stats in the kernel: its table entry and its cache slots, summed over the CPUs
/// (two map lookups, fast enough that the time between frames stays far below the analysis's
/// 5 ms resend threshold; reading every map would not).
fn kernel_flow(ebpf: &aya::Ebpf, key: &observer_common::FlowKey) -> observer_common::FlowStats {
    use observer_common::{FlowSlot, FlowStats, maps};
    let mut sum = FlowStats::default();
    let table: aya::maps::PerCpuHashMap<_, observer_common::FlowKey, FlowStats> =
        aya::maps::PerCpuHashMap::try_from(ebpf.map(maps::FLOWS).unwrap()).unwrap();
    if let Ok(per_cpu) = table.get(key, 0) {
        for s in per_cpu.iter() {
            sum.merge(s);
        }
    }
    let cache: aya::maps::PerCpuArray<_, FlowSlot> =
        aya::maps::PerCpuArray::try_from(ebpf.map(maps::FLOW_CACHE).unwrap()).unwrap();
    for slot in cache.get(&key.slot(), 0).unwrap().iter() {
        if slot.key == *key {
            sum.merge(&slot.stats);
        }
    }
    sum
}

/// The PSN analysis in the kernel classifies packet for packet as userspace does: after every
/// frame of each scenario of reordering, duplicate copies, go-back-N, a READ overlapped and a
/// PSN wrap, the frame's flow holds the same counts in both memories (frames back to back in
/// both: the two clocks agree there is no wait), and at the end they equal the generator's
/// truth.
#[test]
fn kernel_classifies_psns_packet_for_packet_as_userspace() {
    if !require_root("kernel_classifies_psns_packet_for_packet_as_userspace") {
        return;
    }
    let _shared = shared();
    for scenario in [
        "rule-reorder",
        "rule-duplicate-copies",
        "rule-loss",
        "rule-psn-violation",
        "rule-qp-reuse",
        "loss",
    ] {
        let w = synth::scenario(scenario).expect("scenario");
        // One CPU: the kernel's PSN state is per CPU, as a NIC's RSS keeps a flow on one.
        roce_observer::lab::pin_current_thread().expect("pin");
        let ebpf = load_observer();
        let mut user = Aggregate::new();
        let mut checked = 0;
        for (i, f) in w.frames.iter().enumerate() {
            if f.bytes.len() < ETH_HEADER_LEN {
                continue;
            }
            run(&ebpf, &f.bytes);
            // Microseconds apart, as the test runs are (connection-manager traffic is told
            // after a flow's last request by its later time).
            let Ok(p) = user.push(&f.bytes, i as u64 * 1_000) else {
                continue;
            };
            let key = observer_common::FlowKey::of(&p);
            let k = Some(kernel_flow(&ebpf, &key).timeless());
            let u = user.flows.get(&key).map(|s| s.timeless());
            assert_eq!(k, u, "{scenario}: frame {i}, flow {key:?}");
            checked += 1;
        }
        assert!(checked > 100, "{scenario}: {checked} RoCE frames");
        // The truth assumes the scenario's waits; `loss` has an RNR retry after its timer, which
        // back-to-back test runs do not wait (both memories call it a copy alike).
        if scenario != "loss" {
            let kernel = read_maps(&ebpf, 0).expect("read maps");
            assert_eq!(
                kernel.comparable().flows,
                truth_aggregate(&w.truth).flows,
                "{scenario}: truth"
            );
        }
    }
}

/// Passive latency in the kernel takes the samples replay takes, request for request, and
/// counts the messages replay counts: on every real capture, per requester direction, as many ACK and READ samples and skipped ACKs, and
/// the per-interface histograms as many samples per kind and side. (Their values follow each
/// memory's clock: the capture's in replay, the test run's in the kernel.)
#[test]
fn kernel_latency_samples_equal_userspace_on_the_real_captures() {
    if !require_root("kernel_latency_samples_equal_userspace_on_the_real_captures") {
        return;
    }
    let _shared = shared();
    let Some(files) = integration_tests::shared_capture_files(
        "kernel_latency_samples_equal_userspace_on_the_real_captures",
        "real",
    ) else {
        return;
    };
    let mut samples = [0u64; 2];
    let mut messages = 0;
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "pcap"))
    {
        let frames = integration_tests::pcap_frames(file);
        let ebpf = load_observer();
        let mut user = Aggregate::new();
        for frame in frames.iter().filter(|b| b.len() >= ETH_HEADER_LEN) {
            run(&ebpf, frame);
            let _ = user.push(frame, 0);
        }
        let kernel = read_maps(&ebpf, 0).expect("read maps");
        assert_eq!(
            kernel.latency_counts(),
            user.latency_counts(),
            "{}: samples per requester direction",
            file.display()
        );
        assert_eq!(
            kernel.comparable().messages,
            user.comparable().messages,
            "{}: messages per flow",
            file.display()
        );
        messages += user.messages.values().map(|m| m.messages()).sum::<u64>();
        let per_side = |a: &Aggregate| {
            let mut m = std::collections::BTreeMap::new();
            for (k, h) in &a.latency_scopes {
                *m.entry((k.kind, k.side)).or_insert(0u64) += h.count;
            }
            m
        };
        assert_eq!(
            per_side(&kernel),
            per_side(&user),
            "{}: per side",
            file.display()
        );
        for c in user.latency_counts().values() {
            samples[0] += c[0];
            samples[1] += c[1];
        }
    }
    // The captures hold ping-pong WRITEs, SENDs and READs: both kinds must have been timed.
    assert!(samples[0] > 0 && samples[1] > 0, "samples {samples:?}");
    assert!(messages > 100, "{messages} messages");
}

/// The same on the generator's latency scenario (coalesced ACKs, more requests in flight than
/// are timed, go-back-N, an RNR NAK, pipelined READs), whose truth also says how many samples
/// each requester direction gives.
#[test]
fn kernel_latency_samples_equal_userspace_and_truth_on_the_latency_scenario() {
    if !require_root("kernel_latency_samples_equal_userspace_and_truth_on_the_latency_scenario") {
        return;
    }
    let _shared = shared();
    latency_equals_truth("latency");
}

/// The same with ports per direction (each side's from its own QPN, flow labels per side,
/// fixed per QP; two connections between the same hosts): the kernel's answers find their
/// requests by PSN as replay's do.
#[test]
fn kernel_latency_with_ports_per_direction_equals_userspace_and_truth() {
    if !require_root("kernel_latency_with_ports_per_direction_equals_userspace_and_truth") {
        return;
    }
    let _shared = shared();
    latency_equals_truth("latency-ports");
}

fn latency_equals_truth(scenario: &str) {
    let w = synth::scenario(scenario).expect("scenario");
    let ebpf = load_observer();
    let mut user = Aggregate::new();
    for f in w.frames.iter().filter(|f| f.bytes.len() >= ETH_HEADER_LEN) {
        run(&ebpf, &f.bytes);
        let _ = user.push(&f.bytes, f.ts_ns);
    }
    let kernel = read_maps(&ebpf, 0).expect("read maps");
    let counts = |a: &Aggregate| -> std::collections::BTreeMap<_, [u64; 2]> {
        a.latency_counts()
            .into_iter()
            .map(|(k, c)| (k, [c[0], c[1]]))
            .collect()
    };
    let mut truth: std::collections::BTreeMap<_, [u64; 2]> = Default::default();
    for ((key, kind), samples) in &w.truth.latency {
        truth.entry(*key).or_default()[*kind as usize] += samples.len() as u64;
    }
    assert_eq!(
        counts(&user),
        truth,
        "{scenario}: replay against the generator"
    );
    assert_eq!(
        counts(&kernel),
        truth,
        "{scenario}: kernel against the generator"
    );
}

/// Connections whose directions use different UDP source ports (each side's from its own QPN,
/// fixed per QP, flow labels per side, several QPs from PSN 0, flowlets) pair from the
/// kernel's maps exactly as from the userspace aggregation of the same frames: the pairing
/// reads only what both memories keep. Lockstep QPs stay one-sided in both.
#[test]
fn kernel_pairs_connections_as_userspace() {
    if !require_root("kernel_pairs_connections_as_userspace") {
        return;
    }
    let _shared = shared();
    use roce_observer::model::Source;
    let conns = |a: &Aggregate| {
        let r = a.report(Source::pcap(vec![], vec![]), 1.0);
        r.connections
            .iter()
            .map(|c| {
                (
                    c.a.ip,
                    c.a.qp,
                    c.b.ip,
                    c.b.qp,
                    c.paired_by.clone(),
                    c.ambiguous,
                    c.pmtu,
                    c.a.ports.clone(),
                    c.b.ports.clone(),
                )
            })
            .collect::<std::collections::BTreeSet<_>>()
    };
    for scenario in [
        "pairing-local-port",
        "pairing-fixed-port",
        "pairing-flow-labels",
        "pairing-many-qps",
        "pairing-respray",
        "pairing-ambiguous",
        "pairing-cm",
        "pairing-spray",
        "pairing-port-collision",
        "pairing-qp-reuse",
        "rule-psn-violation-split",
        "rule-ecmp-imbalance",
    ] {
        let w = synth::scenario(scenario).expect("scenario");
        let ebpf = load_observer();
        let mut user = Aggregate::new();
        for f in &w.frames {
            run(&ebpf, &f.bytes);
            // At the capture's times: the kernel stamps frames on its own clock, in the same
            // order.
            let _ = user.push(&f.bytes, f.ts_ns);
        }
        let kernel = read_maps(&ebpf, 0).expect("read maps");
        let (k, u) = (conns(&kernel), conns(&user));
        assert_eq!(k, u, "{scenario}: connections");
        let both = u.iter().filter(|c| c.4.is_some()).count();
        let truth = w
            .truth
            .connections
            .values()
            .filter(|w| w[0] && w[1])
            .count();
        if scenario == "pairing-ambiguous" {
            assert_eq!(both, 0, "{scenario}");
        } else {
            assert_eq!(both, truth, "{scenario}: paired");
        }
    }
}
