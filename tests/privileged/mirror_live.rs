//! Mirror mode live on veth: promiscuous mode while observed (and restored), ERSPAN copies
//! counted exactly, and `--consume` dropping copies only in mirror mode.

use std::os::fd::OwnedFd;

use integration_tests::{
    Diagnose, has_xdp, link_details, mirrored, output, require_root, timeless, truth_aggregate,
};
use observer_common::{mirror_key, parse::Mirror, parse::MirrorKind};
use roce_observer::{
    aggregate::Aggregate,
    lab::Lab,
    model::Report,
    source::synth::{self, Encap, Frame},
};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

fn send(lab: &Lab, frames: Vec<Frame>) {
    integration_tests::send_frames(&lab.ns, frames);
}

/// A packet socket on rx0: what reaches the stack after XDP.
fn tap(lab: &Lab) -> OwnedFd {
    integration_tests::tap(lab, "rx0")
}

/// Frames queued on the tap, once the last sent ones had time to arrive.
fn drain(fd: &OwnedFd) -> usize {
    std::thread::sleep(std::time::Duration::from_millis(300));
    integration_tests::received(fd).len()
}

fn promiscuous(lab: &Lab) -> bool {
    link_details(&lab.ns, "rx0").contains("promiscuity 1")
}

/// `diagnose --json` on rx0 in mirror mode, consuming the copies spread over `cpus`.
fn consume_spread(lab: &Lab, cpus: &str, duration: &str) -> Diagnose {
    Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &[
            "--iface",
            "rx0",
            "--mode",
            "mirror",
            "--consume",
            "--cpus",
            cpus,
            "--duration",
            duration,
            "--json",
        ],
    )
}

/// `w`'s frames as ERSPAN II copies of session `session`.
fn erspan2_copies(w: &synth::Workload, session: u16) -> Vec<Frame> {
    w.frames
        .iter()
        .map(|f| Frame {
            bytes: synth::encapsulate(
                &f.bytes,
                Encap::ErspanII {
                    session,
                    truncated: false,
                },
            ),
            ts_ns: f.ts_ns,
        })
        .collect()
}

/// The truth of `w` as seen through ERSPAN II session `session`.
fn mirrored_truth(w: &synth::Workload, session: u16) -> Aggregate {
    let m = mirror_key(&Mirror {
        kind: MirrorKind::ErspanII,
        session: Some(session),
        truncated: false,
    });
    let mut t = mirrored(
        integration_tests::with_tracks(truth_aggregate(&w.truth), w),
        m,
    );
    t.counters.mirror_sessions[usize::from(session)] = t.counters.frames;
    t
}

#[test]
fn mirror_mode_counts_erspan_copies_exactly_and_restores_promiscuous_mode() {
    if !require_root("mirror_mode_counts_erspan_copies_exactly_and_restores_promiscuous_mode") {
        return;
    }
    let w = synth::scenario("loss").unwrap();
    let copies = erspan2_copies(&w, 42);
    let lab = Lab::create("ro-mirror").unwrap();
    assert!(!promiscuous(&lab));
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &[
            "--iface",
            "rx0",
            "--mode",
            "mirror",
            "--duration",
            "2s",
            "--json",
        ],
    );
    assert!(promiscuous(&lab), "promiscuous while observed");
    let fd = tap(&lab);
    send(&lab, copies);
    let (status, out, err) = d.finish();
    assert!(status.success(), "{err}");
    assert!(
        drain(&fd) > 0,
        "mirror mode without --consume passes the copies on"
    );
    assert!(!promiscuous(&lab), "promiscuous mode restored");
    assert!(!has_xdp(&lab.ns, "rx0"));
    let r: Report = serde_json::from_str(&out).unwrap();
    assert_eq!(r.source.mode.as_deref(), Some("mirror"));
    let want = mirrored_truth(&w, 42).report(r.source.clone(), r.window.seconds);
    assert_eq!(r.totals, want.totals);
    assert_eq!(timeless(&r.flows), timeless(&want.flows));
    assert!(
        r.flows
            .iter()
            .all(|f| f.mirror.as_ref().and_then(|m| m.session) == Some(42))
    );
    assert!(
        r.flows
            .iter()
            .any(|f| f.psn.gaps > 0 && f.psn.regressions > 0),
        "loss seen through the mirror"
    );
}

#[test]
fn consume_drops_only_in_mirror_mode() {
    if !require_root("consume_drops_only_in_mirror_mode") {
        return;
    }
    // RoCE frames (copies) and the host's own traffic, which --consume must pass on.
    let mut w = synth::scenario("clean").unwrap();
    let own: Vec<Frame> = synth::basic_noise()
        .into_iter()
        .filter(|(_, r)| *r == observer_common::SkipReason::NotIp)
        .map(|(bytes, _)| Frame { bytes, ts_ns: 0 })
        .collect();
    assert!(!own.is_empty());
    let copies = w.frames.len();
    w.frames.extend(own.iter().cloned());
    for (args, reaches_stack) in [
        (&["--mode", "mirror", "--consume"][..], false),
        (&["--mode", "host"][..], true),
    ] {
        let lab = Lab::create("ro-consume").unwrap();
        let mut all = vec!["--iface", "rx0", "--duration", "1500ms", "--json"];
        all.extend_from_slice(args);
        let d = Diagnose::start(&lab.ns, CLI.as_ref(), &all);
        let fd = tap(&lab);
        send(&lab, w.frames.clone());
        let (status, out, err) = d.finish();
        assert!(status.success(), "{args:?}: {err}");
        let seen = drain(&fd);
        if reaches_stack {
            assert_eq!(
                seen,
                w.frames.len(),
                "{args:?}: host mode passes every frame"
            );
        } else {
            assert_eq!(
                seen,
                own.len(),
                "{args:?}: the {copies} copies consumed, the host's own frames passed"
            );
        }
        let r: Report = serde_json::from_str(&out).unwrap();
        assert_eq!(
            r.totals.frames,
            w.frames.len() as u64,
            "{args:?}: counted either way"
        );
    }
    // Host mode never drops: --consume alone is refused.
    let (status, _, err) =
        output(std::process::Command::new(CLI).args(["diagnose", "--iface", "lo", "--consume"]));
    assert_eq!(status.code(), Some(1));
    assert_eq!(
        err.trim_end(),
        "roce-observer: error: --consume needs --mode mirror (host mode never drops a packet)"
    );
}

/// The `pfc` section without times (first/last seen).
fn timeless_pfc(r: &Report) -> Option<roce_observer::model::PfcReport> {
    r.pfc.clone().map(|mut p| {
        for s in &mut p.sources {
            s.first_seen_ns = 0;
            s.last_seen_ns = 0;
        }
        p
    })
}

/// PFC and 802.3x PAUSE frames on veth, exact per sender and priority: sent directly (host
/// mode: pause times at the interface's own speed, 10 Gb/s for veth) and as ERSPAN III copies
/// (mirror mode: the mirror port's speed is not the mirrored links', so times need
/// --link-speed, and a warning says so without it).
#[test]
fn pfc_per_priority_exact_direct_and_through_erspan() {
    if !require_root("pfc_per_priority_exact_direct_and_through_erspan") {
        return;
    }
    let w = synth::scenario("pfc").unwrap();
    let encap = Encap::ErspanIII {
        session: 77,
        truncated: false,
        platform: true,
    };
    let mut mirrored = synth::Workload::default();
    // The same frames as ERSPAN III copies, with their truth rebuilt by the generator.
    for f in &w.frames {
        mirrored.frames.push(Frame {
            bytes: synth::encapsulate(&f.bytes, encap),
            ts_ns: f.ts_ns,
        });
    }
    let session_key = mirror_key(&encap.mirror());
    let mut mirrored_truth = integration_tests::mirrored(truth_aggregate(&w.truth), session_key);
    mirrored_truth.pauses = mirrored_truth
        .pauses
        .into_iter()
        .map(|(k, v)| {
            (
                observer_common::PauseKey {
                    mirror: session_key,
                    ..k
                },
                v,
            )
        })
        .collect();
    mirrored_truth.counters.mirror_sessions[77] = mirrored_truth.counters.frames;

    // (diagnose arguments, frames, truth, link speed expected, warning expected)
    type Case<'a> = (
        &'a [&'a str],
        &'a Vec<Frame>,
        &'a Aggregate,
        Option<u64>,
        bool,
    );
    let cases: [Case; 3] = [
        (
            &["--mode", "host"],
            &w.frames,
            &truth_aggregate(&w.truth),
            Some(10_000_000_000),
            false,
        ),
        (
            &["--mode", "mirror"],
            &mirrored.frames,
            &mirrored_truth,
            None,
            true,
        ),
        (
            &["--mode", "mirror", "--link-speed", "100G"],
            &mirrored.frames,
            &mirrored_truth,
            Some(100_000_000_000),
            false,
        ),
    ];
    for (args, frames, truth, speed, warned) in cases {
        let lab = Lab::create("ro-pfc").unwrap();
        let mut all = vec!["--iface", "rx0", "--duration", "1500ms", "--json"];
        all.extend_from_slice(args);
        let d = Diagnose::start(&lab.ns, CLI.as_ref(), &all);
        send(&lab, frames.clone());
        let (status, out, err) = d.finish();
        assert!(status.success(), "{args:?}: {err}");
        let r: Report = serde_json::from_str(&out).unwrap();
        let mut want = truth.report(r.source.clone(), r.window.seconds);
        want.set_link_speed(speed);
        assert_eq!(r.totals, want.totals, "{args:?}");
        assert_eq!(timeless(&r.flows), timeless(&want.flows), "{args:?}");
        let pfc = timeless_pfc(&r).expect("a pfc section");
        assert_eq!(Some(pfc.clone()), timeless_pfc(&want), "{args:?}");
        assert_eq!(pfc.link_speed_bps, speed, "{args:?}");
        // Priority 3 of the storm sender: 39 pauses of 65535 quanta and one XON.
        let storm = &pfc.sources[0];
        assert_eq!(storm.src_mac, "02:00:00:00:0f:01");
        let p3 = &storm.priorities[0];
        assert_eq!((p3.priority, p3.counts.frames, p3.counts.xon), (3, 40, 1));
        assert_eq!(p3.counts.quanta, 39 * 65535);
        assert_eq!(
            p3.counts.pause_ns,
            speed.map(|bps| (39u128 * 65535 * 512 * 1_000_000_000 / u128::from(bps)) as u64)
        );
        let warning = "PAUSE / PFC frames seen but no pause times";
        assert_eq!(
            r.source.warnings.iter().any(|w| w.contains(warning)),
            warned,
            "{args:?}: {:?}",
            r.source.warnings
        );
        assert_eq!(err.contains(warning), warned, "{args:?}: {err}");
    }
}

/// Mirror copies of one ERSPAN source spread over every CPU (`--cpus 0-1` here): every copy is
/// accounted exactly as the generator sent it (each QP's hosts on one CPU keep its PSN analysis
/// whole) and consumed; the attach line names the CPUs. `--cpus` is refused in host mode and
/// for a CPU that is not online, in one line.
#[test]
fn copies_spread_over_cpus_are_accounted_exactly() {
    if !require_root("copies_spread_over_cpus_are_accounted_exactly") {
        return;
    }
    // Every online CPU (on a one-CPU machine the copies move to it through the cpumap alike).
    let online = roce_observer::source::live::online_cpus().unwrap();
    let w = synth::scenario("many-qps").unwrap();
    let copies = erspan2_copies(&w, 42);
    let lab = Lab::create("ro-spread").unwrap();
    let cpus = roce_observer::source::live::cpu_list(&online);
    let d = consume_spread(&lab, &cpus, "2s");
    assert!(
        d.stderr_text
            .contains(&format!("copies accounted on CPUs {cpus}")),
        "{}",
        d.stderr_text
    );
    let fd = tap(&lab);
    send(&lab, copies);
    let (status, out, err) = d.finish();
    assert!(status.success(), "{err}");
    assert_eq!(drain(&fd), 0, "the copies consumed");
    let r: Report = serde_json::from_str(&out).unwrap();
    let want = mirrored_truth(&w, 42).report(r.source.clone(), r.window.seconds);
    assert_eq!(r.totals, want.totals);
    assert_eq!(timeless(&r.flows), timeless(&want.flows));

    for (args, message) in [
        (
            &["--iface", "lo", "--cpus", "0"][..],
            "roce-observer: error: --cpus needs --mode mirror (host mode accounts every frame where it is received)",
        ),
        (
            &["--iface", "lo", "--mode", "mirror", "--cpus", "4000"][..],
            "roce-observer: error: cannot spread the mirror copies over CPUs: CPU 4000 is not online",
        ),
    ] {
        let (status, _, err) = output(std::process::Command::new(CLI).arg("diagnose").args(args));
        assert_eq!(status.code(), Some(1), "{args:?}");
        assert!(err.trim_end().starts_with(message), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

/// Copies spread to a CPU whose queue fills (the CPU held by a real-time thread while they are
/// sent) are dropped by the cpumap: the observer counts each drop (`spread_dropped`), so that
/// what it accounted plus what it dropped is exactly what was sent; the `observer-drops` finding
/// fires and the loss rule does not call the missing PSNs loss.
#[test]
fn copies_dropped_by_a_full_cpu_queue_are_counted_and_not_called_loss() {
    if !require_root("copies_dropped_by_a_full_cpu_queue_are_counted_and_not_called_loss") {
        return;
    }
    let online = roce_observer::source::live::online_cpus().unwrap();
    if online.len() < 2 {
        // A loud skip, not a pass: one CPU cannot be spread to another.
        eprintln!("SKIPPED copies_dropped_by_a_full_cpu_queue...: needs two online CPUs");
        return;
    }
    let (sender, held) = (online[0] as usize, online[1] as usize);
    let w = synth::scenario("many-qps").unwrap();
    let copies = erspan2_copies(&w, 42);
    let sent = copies.len() as u64;
    let lab = Lab::create("ro-sdrop").unwrap();
    let cpus = roce_observer::source::live::cpu_list(&online[..2]);
    let d = consume_spread(&lab, &cpus, "3s");
    let hold = integration_tests::hold_cpu(held, 700);
    std::thread::sleep(std::time::Duration::from_millis(50));
    lab.ns
        .run_in(move || {
            roce_observer::lab::pin_current_thread_to(sender).unwrap();
            synth::send(Lab::TX, &copies)
        })
        .unwrap()
        .unwrap();
    hold.join().unwrap();
    let (status, out, err) = d.finish();
    assert!(status.success(), "{err}");
    let r: Report = serde_json::from_str(&out).unwrap();
    let dropped = r.totals.spread_dropped;
    eprintln!(
        "{sent} copies sent: {} accounted, {dropped} dropped",
        r.totals.frames
    );
    assert!(
        dropped > 0,
        "the held CPU's queue never filled: nothing shows the drops are counted"
    );
    assert_eq!(
        r.totals.frames + dropped,
        sent,
        "accounted + dropped = sent"
    );
    let finding = r
        .findings
        .iter()
        .find(|f| f.rule == "observer-drops")
        .expect("the observer-drops finding");
    assert_eq!(finding.evidence["spread_dropped"], dropped);
    assert!(
        !r.findings.iter().any(|f| f.rule == "loss"),
        "PSNs the observer dropped called loss"
    );
}
