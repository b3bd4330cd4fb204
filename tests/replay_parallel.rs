//! `roce-observer replay --threads N`: one capture read on one thread and accounted on N more
//! gives, byte for byte, the report (JSON and table) and the warnings of one thread: on the
//! shipped example, every synth scenario, the shared real and ERSPAN captures, captures long
//! enough to span many buffers and intervals (pcap and pcapng), standard input, and captures
//! that break part-way.

use std::{path::Path, process::Command};

use integration_tests::{Scratch, output, run_with_input, shared_capture_files, workspace_root};
use roce_observer::source::synth::{self, Frame};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// Exit status, stdout and stderr of `replay FILE --threads N` with `args`.
fn replay(file: &Path, threads: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let (status, out, err) = output(
        Command::new(CLI)
            .arg("replay")
            .arg(file)
            .args(["--no-progress", "--threads", threads])
            .args(args),
    );
    (status.code(), out, err)
}

/// The JSON report and the table of `file` are the same on 1, 2 and 3 threads.
fn same_on_any_threads(file: &Path, args: &[&str]) {
    for format in [&["--json"][..], &[]] {
        let args = [format, args].concat();
        let one = replay(file, "1", &args);
        assert_eq!(one.0, Some(0), "{}: {}", file.display(), one.2);
        for threads in ["2", "3"] {
            let many = replay(file, threads, &args);
            assert!(
                one == many,
                "{} {args:?}: {threads} threads differ from 1\n--- 1 thread:\n{}\n{}\n--- {threads} threads:\n{}\n{}",
                file.display(),
                one.1,
                one.2,
                many.1,
                many.2
            );
        }
    }
}

fn pcap_bytes(frames: &[Frame]) -> Vec<u8> {
    synth::pcap_bytes(frames).unwrap()
}

/// A capture some 14 MB long: the `demo` and `latency` scenarios over and over for about two
/// seconds (the fitted series' bins grow tenfold twice), many buffers of the reading thread.
fn long_capture() -> Vec<Frame> {
    let demo = synth::scenario("demo").unwrap().frames;
    let latency = synth::scenario("latency").unwrap().frames;
    let mut frames = synth::played_again(&demo, 12, 20_000_000);
    let after = frames.last().unwrap().ts_ns + 1_000_000;
    frames.extend(
        synth::played_again(&latency, 20, 30_000_000)
            .into_iter()
            .map(|f| Frame {
                ts_ns: f.ts_ns - latency[0].ts_ns + after,
                ..f
            }),
    );
    frames
}

#[test]
fn the_example_and_every_scenario_give_the_same_report_on_any_number_of_threads() {
    same_on_any_threads(&workspace_root().join("examples/demo.pcap"), &[]);
    let dir = Scratch::new("parallel-scenarios");
    for (name, _) in synth::SCENARIOS {
        let path = dir.path(&format!("{name}.pcap"));
        let w = synth::scenario(name).unwrap();
        std::fs::write(&path, pcap_bytes(&w.frames)).unwrap();
        same_on_any_threads(&path, &["--link-speed", "100G"]);
    }
}

#[test]
fn shared_captures_give_the_same_report_on_any_number_of_threads() {
    for sub in ["real", "erspan"] {
        let Some(files) = shared_capture_files("parallel-shared", sub) else {
            return;
        };
        for f in files {
            same_on_any_threads(&f, &[]);
        }
    }
}

#[test]
fn long_captures_pcapng_and_standard_input_give_the_same_report() {
    let dir = Scratch::new("parallel-long");
    let bytes = pcap_bytes(&long_capture());
    assert!(bytes.len() > 8 << 20, "{} bytes", bytes.len());
    let pcap = dir.path("long.pcap");
    std::fs::write(&pcap, &bytes).unwrap();
    same_on_any_threads(&pcap, &[]);
    same_on_any_threads(&pcap, &["--interval", "100us", "--link-speed", "25G"]);
    // The same frames as pcapng (tshark's editcap writes it).
    let pcapng = dir.path("long.pcapng");
    let (status, _, err) = output(
        Command::new("editcap")
            .args(["-F", "pcapng"])
            .arg(&pcap)
            .arg(&pcapng),
    );
    assert!(status.success(), "editcap: {err}");
    same_on_any_threads(&pcapng, &[]);
    // Standard input, read through the same threads.
    let stdin = |threads: &str| {
        let out = run_with_input(
            Command::new(CLI).args(["replay", "-", "--json", "--threads", threads]),
            &bytes,
        )
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (out.stdout, out.stderr)
    };
    assert!(stdin("1") == stdin("2"), "standard input: 2 threads differ");
}

#[test]
fn a_capture_breaking_part_way_breaks_at_the_same_frame_on_any_number_of_threads() {
    let dir = Scratch::new("parallel-broken");
    let frames = long_capture();
    let bytes = pcap_bytes(&frames);
    // Cut inside a record half-way through the file, and inside the last record.
    let half = dir.path("cut-half.pcap");
    std::fs::write(&half, &bytes[..bytes.len() / 2 + 5]).unwrap();
    let end = dir.path("cut-end.pcap");
    std::fs::write(&end, &bytes[..bytes.len() - 3]).unwrap();
    // A record length no frame has, a third of the way through (the rest of the file is
    // shorter than it claims).
    let mut corrupt = bytes.clone();
    let mut at = 24;
    for f in &frames[..frames.len() / 3] {
        at += 16 + f.bytes.len();
    }
    let claim = 100_000_000u32;
    let big_endian =
        bytes[..4] == [0xA1, 0xB2, 0xC3, 0xD4] || bytes[..4] == [0xA1, 0xB2, 0x3C, 0x4D];
    corrupt[at + 8..at + 12].copy_from_slice(&if big_endian {
        claim.to_be_bytes()
    } else {
        claim.to_le_bytes()
    });
    let corrupt_path = dir.path("corrupt.pcap");
    std::fs::write(&corrupt_path, &corrupt).unwrap();
    for (path, frame) in [
        (&half, None),
        (&end, Some(frames.len())),
        (&corrupt_path, Some(frames.len() / 3 + 1)),
    ] {
        same_on_any_threads(path, &[]);
        let (_, out, err) = replay(path, "2", &["--json"]);
        assert!(err.contains("cut short by the end of the file"), "{err}");
        if let Some(n) = frame {
            assert!(err.contains(&format!("frame {n} at byte ")), "{err}");
        }
        let r: roce_observer::model::Report = serde_json::from_str(&out).unwrap();
        assert_eq!(r.source.warnings.len(), 1, "{:?}", r.source.warnings);
    }
}
