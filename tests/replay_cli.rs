//! `roce-observer synth` and `roce-observer replay` as a user runs them: no privileges needed.

use std::{path::PathBuf, process::Command};

use integration_tests::{Scratch, output, run_with_input, truth_aggregate};
use roce_observer::{
    model::{Flow, Report},
    source::synth,
};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

fn synth_to(dir: &Scratch, scenario: &str) -> PathBuf {
    let path = dir.path(&format!("{scenario}.pcap"));
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["synth", "--scenario", scenario, "-o"])
            .arg(&path),
    );
    assert!(status.success(), "synth {scenario}: {err}");
    path
}

fn report(stdout: &str) -> Report {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn sorted(flows: &[Flow]) -> Vec<Flow> {
    let mut v = flows.to_vec();
    v.sort_by_key(|f| (f.src_ip, f.dst_ip, f.dest_qp, f.udp_src_port));
    v
}

#[test]
fn replay_of_a_synth_capture_equals_its_ground_truth() {
    let dir = Scratch::new("replay-truth");
    let w = synth::scenario("e2e").unwrap();
    let path = synth_to(&dir, "e2e");
    let (status, out, err) =
        output(
            Command::new(CLI)
                .arg("replay")
                .arg(&path)
                .args(["--json", "--link-speed", "400G"]),
        );
    assert!(status.success(), "{err}");
    assert!(err.is_empty(), "no warnings expected: {err}");
    let r = report(&out);
    assert_eq!(r.source.kind, "pcap");
    assert_eq!(r.source.files, vec![path.display().to_string()]);
    // Capture time, not wall time: the window spans the first to the last frame.
    let span = w.frames.last().unwrap().ts_ns - w.frames[0].ts_ns;
    assert_eq!(r.window.seconds, span as f64 / 1e9);
    let mut want = truth_aggregate(&w.truth).report(r.source.clone(), r.window.seconds);
    want.set_link_speed(Some(400_000_000_000));
    assert_eq!(r.totals, want.totals);
    // PAUSE / PFC senders, with the capture's times (the generator records none).
    let mut pfc = r.pfc.clone().expect("e2e has PAUSE / PFC frames");
    for src in &mut pfc.sources {
        assert!(w.frames[0].ts_ns <= src.first_seen_ns && src.first_seen_ns <= src.last_seen_ns);
        src.first_seen_ns = 0;
        src.last_seen_ns = 0;
    }
    assert_eq!(Some(pfc), want.pfc);
    // 1 quantum at 400 Gb/s is 1.28 ns: 0x200 quanta of 802.3x PAUSE are 655 ns.
    let nic = r
        .pfc
        .as_ref()
        .unwrap()
        .sources
        .iter()
        .find(|s| s.link_pause.is_some());
    assert_eq!(
        nic.unwrap().link_pause.as_ref().unwrap().pause_ns,
        Some(655)
    );
    // Times are the capture's own: compare everything, timestamps included, after dropping the
    // generator's (it records none).
    let strip = |fl: &[Flow]| {
        sorted(fl)
            .into_iter()
            .map(|mut f| {
                f.first_seen_ns = 0;
                f.last_seen_ns = 0;
                f
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&r.flows), strip(&want.flows));
    for f in &r.flows {
        assert!(
            w.frames[0].ts_ns <= f.first_seen_ns
                && f.last_seen_ns <= w.frames.last().unwrap().ts_ns
        );
    }
}

#[test]
fn standard_input_gives_the_same_report() {
    let dir = Scratch::new("replay-stdin");
    let path = synth_to(&dir, "demo");
    let (_, from_file, _) = output(Command::new(CLI).arg("replay").arg(&path).arg("--json"));
    let out = run_with_input(
        Command::new(CLI).args(["replay", "-", "--json"]),
        &std::fs::read(&path).unwrap(),
    )
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (a, b) = (
        report(&from_file),
        report(&String::from_utf8(out.stdout).unwrap()),
    );
    assert_eq!(b.source.files, vec!["-".to_string()]);
    assert_eq!((a.totals, a.flows), (b.totals, b.flows));
}

#[test]
fn a_cut_capture_reports_what_it_holds_with_one_warning() {
    let dir = Scratch::new("replay-cut");
    let path = synth_to(&dir, "demo");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 7);
    let cut = dir.path("cut.pcap");
    std::fs::write(&cut, &bytes).unwrap();
    let (status, out, err) = output(Command::new(CLI).arg("replay").arg(&cut).arg("--json"));
    assert!(status.success(), "a partly usable file exits 0: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    let frames = synth::scenario("demo").unwrap().frames.len();
    assert!(
        lines[0].starts_with(&format!(
            "roce-observer: warning: {}: frame {frames} at byte ",
            cut.display()
        )) && lines[0].ends_with(&format!(
            "cut short by the end of the file; the {} frames before it are reported",
            frames - 1
        )),
        "{err}"
    );
    let r = report(&out);
    assert_eq!(r.totals.frames, frames as u64 - 1);
    assert_eq!(r.source.warnings.len(), 1);
}

#[test]
fn unusable_inputs_are_one_line_errors() {
    let dir = Scratch::new("replay-bad");
    let junk = dir.path("junk.pcap");
    std::fs::write(&junk, b"this is not a capture").unwrap();
    for (args, want) in [
        (vec![junk.display().to_string()], format!("roce-observer: error: {}: not a pcap or pcapng file (magic 74 68 69 73 at byte 0)", junk.display())),
        (vec!["/nonexistent.pcap".to_string()], "roce-observer: error: /nonexistent.pcap: cannot read: No such file or directory (os error 2)".to_string()),
    ] {
        let (status, out, err) = output(Command::new(CLI).arg("replay").args(&args));
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(out.is_empty());
        assert_eq!(err.trim_end(), want);
    }
    let (status, _, err) = output(
        Command::new(CLI)
            .args(["synth", "--scenario", "nope", "-o"])
            .arg(dir.path("x.pcap")),
    );
    assert_eq!(status.code(), Some(1));
    assert!(
        err.starts_with("roce-observer: error: unknown scenario 'nope' (known: "),
        "{err}"
    );
}

#[test]
fn synth_lists_its_scenarios() {
    let (status, out, _) = output(Command::new(CLI).args(["synth", "--list"]));
    assert!(status.success());
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let want: Vec<&str> = synth::SCENARIOS.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, want);
}
