//! Capture reading and parsing must never panic: any bytes are fed to the replay reader (pcap,
//! pcapng, every link type it accepts) and, as one Ethernet frame, to the shared parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_observer::replay::Replay;

fuzz_target!(|data: &[u8]| {
    let mut replay = Replay::new();
    let _ = replay.reader("fuzz", data, Some(data.len() as u64), false);
    // Touch what a report would read.
    let _ = replay.window_seconds();
    let _ = replay.agg.comparable();
    let _ = observer_common::parse(data);
});
