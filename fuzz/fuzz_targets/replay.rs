//! Capture reading and parsing must never panic: any bytes are fed to the replay reader (pcap,
//! pcapng, every link type it accepts) and, as one Ethernet frame, to the shared parser; the
//! report (flows, mirror sessions, PAUSE / PFC senders and their pause times) is built and
//! rendered from whatever was read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_observer::{model::Source, render::table::render_table, source::replay::Replay};

fuzz_target!(|data: &[u8]| {
    let mut replay = Replay::new();
    let _ = replay.reader("fuzz", data, Some(data.len() as u64), false);
    // Touch what a report would read.
    let _ = replay.window_seconds();
    let _ = replay.agg.comparable();
    let mut report = replay.agg.report(
        Source::pcap(replay.files.clone(), replay.warnings.clone()),
        replay.window_seconds(),
    );
    report.set_link_speed(Some(400_000_000_000));
    let _ = render_table(&report, 5);
    let _ = observer_common::parse(data);
    let parsed = observer_common::parse_frame(data);
    let _ = parsed.pause(data);
});
