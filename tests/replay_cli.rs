//! `roce-observer synth` and `roce-observer replay` as a user runs them: no privileges needed.

use std::{path::PathBuf, process::Command};

use integration_tests::{Scratch, output, run_with_input, synth_pcap, truth_aggregate};
use roce_observer::{
    model::{Flow, Report},
    source::synth,
};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

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
    let path = synth_pcap(CLI, &dir, "e2e");
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
                f.active_rate_bps = None;
                f.peak_rate_bps = None;
                // What depends on the capture's times (the generator records none).
                f.psn.unanswered = None;
                f.psn.longest_resend_wait = None;
                f.psn.first_violation = None;
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

/// A capture of `frames` (the generator's frames at the given capture times) in `dir`.
fn capture_of(dir: &Scratch, name: &str, frames: &[(synth::RoceFrame, u64)]) -> PathBuf {
    let path = dir.path(name);
    let frames: Vec<synth::Frame> = frames
        .iter()
        .map(|(f, ts_ns)| synth::Frame {
            bytes: f.to_bytes(),
            ts_ns: *ts_ns,
        })
        .collect();
    synth::write_pcap(std::fs::File::create(&path).unwrap(), &frames).unwrap();
    path
}

#[test]
fn a_short_capture_reports_rates_over_the_time_it_covers() {
    // A 720 us capture: one flow of 9 WRITEs 90 us apart, a second flow of 4 CNPs in the
    // middle (5 us apart), and a third of one packet. Ground truth from what is built: the IP
    // lengths the generator lays out and the times it stamps.
    let dir = Scratch::new("replay-short");
    let t0 = synth::BASE_TS_NS;
    let ip = synth::Ip::v4("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
    let mut write = synth::RoceFrame::new(ip, 0x0A, 0x11); // RDMA WRITE Only
    write.payload_len = 1000;
    let mut cnp = synth::RoceFrame::new(ip.reversed(), 0x81, 0x12);
    cnp.dscp = synth::CNP_DSCP;
    let mut lone = synth::RoceFrame::new(ip, 0x0A, 0x13);
    lone.udp_src_port = 0xC0DE;
    let mut frames: Vec<(synth::RoceFrame, u64)> =
        (0..9).map(|k| (write.clone(), t0 + k * 90_000)).collect();
    frames.extend((0..4).map(|k| (cnp.clone(), t0 + 300_000 + k * 5_000)));
    frames.push((lone.clone(), t0 + 400_000));
    frames.sort_by_key(|(_, ts)| *ts);
    let path = capture_of(&dir, "short.pcap", &frames);
    let (status, out, err) = output(Command::new(CLI).arg("replay").arg(&path).arg("--json"));
    assert!(status.success(), "{err}");
    let r = report(&out);
    let write_bytes = 9.0 * f64::from(write.ip_len());
    assert_eq!(r.window.seconds, 720e-6);
    let flow = |qp: u32| r.flows.iter().find(|f| f.dest_qp == qp).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs().max(1.0);
    // Over the window, and while active (the same for the flow that spans it).
    assert!(close(flow(0x11).rate_bps, write_bytes * 8.0 / 720e-6));
    assert!(close(
        flow(0x11).active_rate_bps.unwrap(),
        write_bytes * 8.0 / 720e-6
    ));
    // The CNPs: 4 over 15 us while active, not over the window.
    let cnp_bytes = 4.0 * f64::from(cnp.ip_len());
    assert!(close(
        flow(0x12).active_rate_bps.unwrap(),
        cnp_bytes * 8.0 / 15e-6
    ));
    assert!(close(flow(0x12).rate_bps, cnp_bytes * 8.0 / 720e-6));
    // One packet: no rate while active.
    assert_eq!(flow(0x13).active_rate_bps, None);
    // The series: fitted 100 us intervals (the slot), 8 of them, the last covering 20 us.
    let s = r.series.as_ref().unwrap();
    assert!(s.interval_fitted);
    assert_eq!((s.interval_s, s.t.len()), (100e-6, 8));
    assert!(close(s.span_s, 720e-6));
    // The 4 CNPs (300 to 315 us) fall in interval 3: 40,000 CNPs/s, not 4/s.
    assert!(
        close(s.total.cnp_per_s[3], 4.0 / 100e-6),
        "{:?}",
        s.total.cnp_per_s
    );
    assert_eq!(s.total.cnp_per_s.iter().filter(|c| **c > 0.0).count(), 1);
    // The last interval (700 to 720 us) holds the WRITE at 720 us, over 20 us.
    let one_write = f64::from(write.ip_len()) * 8.0;
    assert!(
        close(s.total.bps[7], one_write / 20e-6),
        "{:?}",
        s.total.bps
    );
    assert!(close(flow(0x11).peak_rate_bps.unwrap(), one_write / 20e-6));
    // The table says it in units that fit.
    let (status, out, err) = output(Command::new(CLI).arg("replay").arg(&path));
    assert!(status.success(), "{err}");
    assert!(out.contains("short.pcap, 720 µs: 14 frames"), "{out}");
    assert!(
        out.contains("time series: 8 intervals of 100 µs (fitted to the 720 µs span)"),
        "{out}"
    );
    assert!(out.contains("CNPs peak 40000/s at +300 µs"), "{out}");
}

#[test]
fn a_long_capture_gets_about_a_hundred_intervals_and_an_explicit_one_wins() {
    // 201 packets 50 ms apart: 10 s. Fitted: 100 intervals of 100 ms, two packets each (the
    // packet at exactly 10 s closes the last).
    let dir = Scratch::new("replay-long");
    let ip = synth::Ip::v4("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
    let f = synth::RoceFrame::new(ip, 0x0A, 0x11);
    let frames: Vec<(synth::RoceFrame, u64)> = (0..=200)
        .map(|k| (f.clone(), synth::BASE_TS_NS + k * 50_000_000))
        .collect();
    let path = capture_of(&dir, "long.pcap", &frames);
    let run = |extra: &[&str]| {
        let (status, out, err) = output(
            Command::new(CLI)
                .arg("replay")
                .arg(&path)
                .arg("--json")
                .args(extra),
        );
        assert!(status.success(), "{err}");
        report(&out).series.unwrap()
    };
    let s = run(&[]);
    assert_eq!(
        (s.interval_s, s.t.len(), s.interval_fitted),
        (0.1, 100, true)
    );
    assert_eq!(s.total.packets[..99], [2; 99]);
    assert_eq!(s.total.packets[99], 3);
    // The same from a pipe, which can be read once only.
    let piped = run_with_input(
        Command::new(CLI).args(["replay", "-", "--json"]),
        &std::fs::read(&path).unwrap(),
    )
    .unwrap();
    assert!(piped.status.success());
    let mut piped = report(&String::from_utf8(piped.stdout).unwrap())
        .series
        .unwrap();
    assert_eq!(piped.interfaces[0].name, "-");
    piped.interfaces[0].name.clone_from(&s.interfaces[0].name);
    assert_eq!(piped, s);
    let s = run(&["--interval", "1s"]);
    assert_eq!(
        (s.interval_s, s.t.len(), s.interval_fitted),
        (1.0, 10, false)
    );
    assert_eq!(s.total.packets[0], 20);
}

#[test]
fn standard_input_gives_the_same_report() {
    let dir = Scratch::new("replay-stdin");
    let path = synth_pcap(CLI, &dir, "demo");
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
    let path = synth_pcap(CLI, &dir, "demo");
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

/// An `--html` path that cannot be written is refused before the capture is read (a usage
/// error naming it), never after the analysis, and nothing is left behind.
#[test]
fn an_unwritable_html_path_is_refused_before_the_run() {
    let dir = Scratch::new("replay-html");
    let pcap = synth_pcap(CLI, &dir, "demo");
    let missing = dir.path("no-such-folder/report.html");
    let folder = dir.path("a-folder");
    std::fs::create_dir(&folder).unwrap();
    for (html, why) in [
        (&missing, "No such file or directory (os error 2)"),
        (&folder, "Is a directory (os error 21)"),
    ] {
        let (status, out, err) = output(
            Command::new(CLI)
                .arg("replay")
                .arg(&pcap)
                .arg("--html")
                .arg(html),
        );
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(
            err.trim_end(),
            format!(
                "roce-observer: error: --html {}: cannot write there: {why}",
                html.display()
            )
        );
    }
    // A writable path: checked, written once the report is printed.
    let ok = dir.path("report.html");
    let (status, out, err) = output(
        Command::new(CLI)
            .arg("replay")
            .arg(&pcap)
            .arg("--no-progress")
            .arg("--html")
            .arg(&ok),
    );
    assert!(status.success(), "{err}");
    assert!(out.contains("findings"), "{out}");
    assert!(std::fs::read_to_string(&ok).unwrap().contains("<html"));
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

/// The same capture given twice (by its path again, or through a link) is refused in one line:
/// its packets would all come twice. Two captures of one time span holding the same flows are
/// two observation points of the same traffic, merged by time, and replay says so.
#[test]
fn the_same_file_twice_is_refused_and_overlapping_files_are_named() {
    let dir = Scratch::new("replay-twice");
    let w = synth::scenario("rule-reorder").unwrap();
    let a = synth_pcap(CLI, &dir, "rule-reorder");
    let link = dir.path("again.pcap");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    for second in [&a, &link] {
        let (status, out, err) = output(Command::new(CLI).arg("replay").arg(&a).arg(second));
        assert_eq!(status.code(), Some(2), "{err}");
        assert!(out.is_empty());
        let lines: Vec<&str> = err.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains("is given twice"), "{err}");
        assert!(lines[0].contains(&a.display().to_string()), "{err}");
    }
    // Another capture of the same span with other flows: nothing to say.
    let other = synth_pcap(CLI, &dir, "rule-duplicate-copies");
    let (status, _, err) = output(Command::new(CLI).arg("replay").arg(&a).arg(&other));
    assert!(status.success(), "{err}");
    assert!(err.is_empty(), "{err}");
    // The same traffic from a second tap (a copy of the file, the same times): named, and
    // each packet counted once, seen at two points. The reordering the generator made is
    // counted once.
    let b = dir.path("tap2.pcap");
    std::fs::copy(&a, &b).unwrap();
    let (status, out, err) = output(
        Command::new(CLI)
            .arg("replay")
            .arg(&a)
            .arg(&b)
            .arg("--json"),
    );
    assert!(status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "{} overlaps the files before it in time and holds some of their flows",
            b.display()
        )),
        "{err}"
    );
    let r = report(&out);
    assert_eq!(r.source.warnings.len(), 1, "{:?}", r.source.warnings);
    let truth = truth_aggregate(&w.truth).report(r.source.clone(), r.window.seconds);
    let p = &r.totals.psn;
    assert_eq!(r.totals.roce_packets, truth.totals.roce_packets);
    assert_eq!(
        (p.out_of_order, p.duplicates, p.retransmissions, p.missing),
        (truth.totals.psn.out_of_order, 0, 0, 0),
        "{p:?}"
    );
    let points = r.points.expect("two points");
    assert_eq!(points.seen_at, vec![0, truth.totals.roce_packets]);
}

/// VLAN IDs per flow: the outer tag's, and the inner one of QinQ frames, as the generator
/// tagged them.
#[test]
fn flows_list_their_vlan_ids() {
    let dir = Scratch::new("replay-vlans");
    let w = synth::scenario("ipv6-vlan").unwrap();
    let path = synth_pcap(CLI, &dir, "ipv6-vlan");
    let (status, out, err) = output(Command::new(CLI).arg("replay").arg(&path).arg("--json"));
    assert!(status.success(), "{err}");
    let r = report(&out);
    let want = truth_aggregate(&w.truth).report(r.source.clone(), r.window.seconds);
    let vlans = |r: &roce_observer::model::Report| {
        let mut v: Vec<_> = r
            .flows
            .iter()
            .map(|f| {
                (
                    f.src_ip,
                    f.dst_ip,
                    f.dest_qp,
                    f.vlans.clone(),
                    f.inner_vlans.clone(),
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(vlans(&r), vlans(&want));
    assert!(
        r.flows
            .iter()
            .any(|f| !f.vlans.is_empty() && f.inner_vlans.is_empty()),
        "802.1Q"
    );
    assert!(r.flows.iter().any(|f| !f.inner_vlans.is_empty()), "QinQ");
    assert!(
        r.flows.iter().any(|f| f.vlans.is_empty() && f.untagged),
        "untagged"
    );
}

/// `replay ARGS --json`: the report and stderr (a success expected).
fn replay_json<P: AsRef<std::ffi::OsStr>>(args: &[P]) -> (Report, String) {
    let (status, out, err) = output(Command::new(CLI).arg("replay").args(args).arg("--json"));
    assert!(status.success(), "{err}");
    (report(&out), err)
}

/// The rules that fired.
fn fired(r: &Report) -> Vec<&str> {
    let mut v: Vec<&str> = r.findings.iter().map(|f| f.rule.as_str()).collect();
    v.sort();
    v
}

/// `n` RDMA WRITE Only requests of one RC flow (destination QP `qp`), PSNs from 0x100 on,
/// `gap_ns` apart from `t0`.
fn writes(qp: u32, n: u32, t0: u64, gap_ns: u64) -> Vec<(synth::RoceFrame, u64)> {
    let ip = synth::Ip::v4("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap());
    (0..n)
        .map(|k| {
            let mut f = synth::RoceFrame::new(ip, 0x0A, qp);
            f.udp_src_port = 0xC000 + qp as u16;
            f.payload_len = 1024;
            f.bth.psn = 0x100 + k;
            (f, t0 + u64::from(k) * gap_ns)
        })
        .collect()
}

/// The same traffic captured by two taps (the second file: the same frames 3 us later) is two
/// observation points: every packet counts once, seen at two points 3 us apart, none a
/// duplicate or a resend, and no finding beyond the one capture's. A flow whose packets are
/// 1 us apart has its copies 3 packets behind (a run of PSNs seen before, like a go-back-N),
/// one 10 us apart right after each.
#[test]
fn the_same_traffic_from_two_taps_is_counted_once_at_two_points() {
    let dir = Scratch::new("replay-two-taps");
    let t0 = synth::BASE_TS_NS;
    let mut frames = writes(0x21, 200, t0, 1_000);
    frames.extend(writes(0x22, 20, t0 + 500, 10_000));
    frames.sort_by_key(|(_, ts)| *ts);
    let requests = frames.len() as u64;
    let lagged: Vec<_> = frames
        .iter()
        .map(|(f, ts)| (f.clone(), ts + 3_000))
        .collect();
    let a = capture_of(&dir, "tap1.pcap", &frames);
    let b = capture_of(&dir, "tap2.pcap", &lagged);
    let (one, err) = replay_json(&[&a]);
    assert!(err.is_empty(), "{err}");
    assert_eq!(one.totals.psn.duplicates, 0);
    let (r, err) = replay_json(&[&a, &b]);
    let warnings: Vec<&str> = err.lines().collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].starts_with(&format!(
            "roce-observer: warning: {} overlaps the files before it in time and holds some of their flows: ",
            b.display()
        )) && warnings[0].contains("counts once"),
        "{err}"
    );
    assert_eq!(r.source.warnings.len(), 1);
    assert_eq!(r.totals.frames, requests);
    let p = &r.totals.psn;
    assert_eq!(
        (
            p.duplicates,
            p.retransmissions,
            p.missing,
            p.gaps,
            p.out_of_order
        ),
        (0, 0, 0, 0, 0),
        "{p:?}"
    );
    assert_eq!(
        integration_tests::timeless(&r.flows),
        integration_tests::timeless(&one.flows)
    );
    let points = r.points.as_ref().expect("two points");
    assert_eq!(points.seen_at, vec![0, requests]);
    // One direction only: the 3 us are the clocks' and the path's together, said so.
    assert_eq!(points.one_way.len(), 1, "{points:?}");
    let w = &points.one_way[0];
    assert_eq!((w.min_ns, w.max_ns, w.packets), (3_000, 3_000, requests));
    assert!(!w.clock_corrected);
    assert!(points.missing.is_empty());
    assert_eq!(fired(&r), fired(&one));
    // Standard input can be one of the merged files.
    let piped = run_with_input(
        Command::new(CLI)
            .args(["replay", "-"])
            .arg(&b)
            .arg("--json"),
        &std::fs::read(&a).unwrap(),
    )
    .unwrap();
    assert!(piped.status.success());
    let piped = report(&String::from_utf8(piped.stdout).unwrap());
    assert_eq!(
        piped.source.files,
        vec!["-".to_string(), b.display().to_string()]
    );
    assert_eq!((piped.totals, piped.flows), (r.totals, r.flows));
}

/// Two captures holding alternate packets of one flow (two halves of a sprayed flow, each seen
/// on its own link) make one sequence merged by time: no gap, no loss, nothing out of order.
#[test]
fn halves_of_a_sprayed_flow_merge_into_one_sequence() {
    let dir = Scratch::new("replay-halves");
    let frames = writes(0x31, 200, synth::BASE_TS_NS, 2_000);
    let (even, odd): (Vec<_>, Vec<_>) = frames
        .iter()
        .cloned()
        .enumerate()
        .partition(|(k, _)| k % 2 == 0);
    let strip = |v: Vec<(usize, (synth::RoceFrame, u64))>| {
        v.into_iter().map(|(_, f)| f).collect::<Vec<_>>()
    };
    let all = capture_of(&dir, "all.pcap", &frames);
    let a = capture_of(&dir, "even.pcap", &strip(even));
    let b = capture_of(&dir, "odd.pcap", &strip(odd));
    let (one, _) = replay_json(&[&all]);
    for args in [[&a, &b], [&b, &a]] {
        let (r, _) = replay_json(&args);
        let p = &r.totals.psn;
        assert_eq!(
            (
                p.gaps,
                p.missing,
                p.out_of_order,
                p.duplicates,
                p.retransmissions
            ),
            (0, 0, 0, 0, 0),
            "{p:?}"
        );
        assert_eq!(r.flows.len(), 1);
        assert_eq!(r.flows[0].packets, 200);
        assert_eq!((&r.totals, &r.flows), (&one.totals, &one.flows));
        assert!(!fired(&r).contains(&"loss") && !fired(&r).contains(&"reorder"));
    }
}

/// Rotated captures (one after the other in time) read in either order give the report of the
/// one capture they were cut from: the merge reads them in time order, with no warning.
#[test]
fn rotated_files_in_either_order_give_the_report_of_one_file() {
    let dir = Scratch::new("replay-rotated");
    let w = synth::scenario("loss").unwrap();
    let whole = synth_pcap(CLI, &dir, "loss");
    let (first, second) = w.frames.split_at(w.frames.len() / 2);
    let part = |name: &str, frames: &[synth::Frame]| {
        let path = dir.path(name);
        synth::write_pcap(std::fs::File::create(&path).unwrap(), frames).unwrap();
        path
    };
    let a = part("loss.0.pcap", first);
    let b = part("loss.1.pcap", second);
    let (one, err) = replay_json(&[&whole]);
    assert!(err.is_empty(), "{err}");
    assert!(one.totals.psn.retransmissions > 0 && one.totals.psn.gaps > 0);
    for args in [[&a, &b], [&b, &a]] {
        let (r, err) = replay_json(&args);
        assert!(err.is_empty(), "{err}");
        assert_eq!(r.totals, one.totals);
        assert_eq!(r.flows, one.flows);
        assert_eq!(r.pfc, one.pfc);
        assert_eq!(r.window, one.window);
        assert_eq!(fired(&r), fired(&one));
        // One microburst interface per file, in the order given.
        let names: Vec<String> = r
            .series
            .as_ref()
            .unwrap()
            .interfaces
            .iter()
            .map(|i| i.name.clone())
            .collect();
        let want: Vec<String> = args.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(names, want);
    }
}

/// A second file cut short keeps its frames before the cut and those of the first file, with
/// the same one warning as alone; an unusable second file is the same one-line error.
#[test]
fn a_broken_second_file_keeps_the_first_files_frames() {
    let dir = Scratch::new("replay-broken-second");
    let w = synth::scenario("demo").unwrap();
    let (first, second) = w.frames.split_at(w.frames.len() / 2);
    let a = dir.path("demo.0.pcap");
    synth::write_pcap(std::fs::File::create(&a).unwrap(), first).unwrap();
    let mut bytes = Vec::new();
    synth::write_pcap(&mut bytes, second).unwrap();
    let last = 16 + second.last().unwrap().bytes.len();
    let offset = bytes.len() - last;
    bytes.truncate(bytes.len() - 7);
    let b = dir.path("demo.1.pcap");
    std::fs::write(&b, &bytes).unwrap();
    let (r, err) = replay_json(&[&a, &b]);
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        vec![format!(
            "roce-observer: warning: {}: frame {} at byte {offset}: cut short by the end of the file; the {} frames before it are reported",
            b.display(),
            second.len(),
            second.len() - 1
        )]
    );
    assert_eq!(r.totals.frames, w.frames.len() as u64 - 1);
    assert_eq!(r.source.warnings.len(), 1);
    let junk = dir.path("junk.pcap");
    std::fs::write(&junk, b"this is not a capture").unwrap();
    let (status, out, err) = output(Command::new(CLI).arg("replay").arg(&a).arg(&junk));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(out.is_empty());
    assert_eq!(
        err.trim_end(),
        format!(
            "roce-observer: error: {}: not a pcap or pcapng file (magic 74 68 69 73 at byte 0)",
            junk.display()
        )
    );
}
