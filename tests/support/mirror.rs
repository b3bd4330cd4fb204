//! Mirror copies of the generator's scenarios: every encapsulation a mirror session may use,
//! copies sprayed over sessions, and taps whose copies lag behind.

use roce_observer::source::synth::{self, Encap};

/// One of each encapsulation: ERSPAN I, II and III (whole and truncated), and GRE transparent
/// Ethernet bridging.
pub const ENCAPS: [Encap; 5] = [
    Encap::ErspanI,
    Encap::ErspanII {
        session: 101,
        truncated: false,
    },
    Encap::ErspanII {
        session: 1023,
        truncated: true,
    },
    Encap::ErspanIII {
        session: 202,
        truncated: true,
        platform: true,
    },
    Encap::Teb,
];

/// The frames of the `clean` scenario.
pub fn clean_frames() -> Vec<Vec<u8>> {
    synth::scenario("clean")
        .unwrap()
        .frames
        .into_iter()
        .map(|f| f.bytes)
        .collect()
}

/// Each frame of scenario `name`, as a copy through ERSPAN session `session(i)` (frame i),
/// with its time.
pub fn through_sessions(name: &str, session: impl Fn(usize) -> Vec<u16>) -> Vec<(Vec<u8>, u64)> {
    let w = synth::scenario(name).unwrap();
    let mut out = Vec::new();
    for (i, f) in w.frames.iter().enumerate() {
        for id in session(i) {
            let encap = Encap::ErspanII {
                session: id,
                truncated: false,
            };
            out.push((synth::encapsulate(&f.bytes, encap), f.ts_ns));
        }
    }
    out
}

/// Scenario `name` through two taps: session 1 copies each frame at once, session 2 `lag_ns`
/// later (its copies lag behind whole bursts of a flow), in the order of time.
pub fn lagging_taps(name: &str, lag_ns: u64) -> Vec<(Vec<u8>, u64)> {
    lagging_copies(name, lag_ns, [1, 2])
}

/// Scenario `name` copied twice, by sessions `sessions` (the same one twice: a switch
/// mirroring each packet on the way in and out), the second copy `lag_ns` later.
pub fn lagging_copies(name: &str, lag_ns: u64, sessions: [u16; 2]) -> Vec<(Vec<u8>, u64)> {
    let w = synth::scenario(name).unwrap();
    let mut out: Vec<(Vec<u8>, u64)> = Vec::new();
    for (session, lag) in [(sessions[0], 0), (sessions[1], lag_ns)] {
        let encap = Encap::ErspanII {
            session,
            truncated: false,
        };
        out.extend(
            w.frames
                .iter()
                .map(|f| (synth::encapsulate(&f.bytes, encap), f.ts_ns + lag)),
        );
    }
    // Stable: at one time, the first tap's copy first.
    out.sort_by_key(|(_, ts)| *ts);
    out
}
