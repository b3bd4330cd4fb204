//! Passive latency live: in a namespace, the generator sends requests and, after a delay it
//! chose and timed itself, their ACKs, over a veth pair into the observer (`diagnose`). The
//! truth is the generator's: the monotonic time between its two sends, read around each one.
//! What the observer measures is that plus the difference of two send paths (microseconds).
//!
//! The shaper tests take the truth from the kernel instead: a token bucket (`tc qdisc tbf`) on
//! the answers' link delays each ACK behind frames sent ahead of it, by an amount the shaper's
//! rate and the frames' lengths fix. (netem, the usual way, is not in this kernel: it is built
//! without CONFIG_NET_SCH_NETEM; a test that would always skip could not fail.)

use std::{
    net::Ipv4Addr,
    time::{Duration, Instant},
};

use integration_tests::{Diagnose, has_xdp, require_root};
use observer_common::{LatHist, wire::TRANSPORT_RC};
use roce_observer::{
    lab::Lab,
    model::{Report, connections::LatencyScope},
    source::synth::{Frame, Ip, PacketSocket, QpStream, Workload, host_mac},
};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// One test of this file at a time: they time delays to tens of microseconds, and the
/// generator's spinning sender of one would hold up the softirqs of another on a 2-CPU machine.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `n` WRITEs with AckReq from 198.18.0.1 to 198.18.0.2 and the ACK of each, alternating.
fn pairs(n: usize) -> Vec<Frame> {
    let ip = Ip::v4(Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
    let mut qp = QpStream::new(
        TRANSPORT_RC,
        ip,
        [host_mac(1), host_mac(2)],
        [0x11, 0x22],
        1000,
    );
    let mut w = Workload::default();
    for _ in 0..n {
        let psn = qp.write(&mut w, 256);
        qp.ack(&mut w, psn);
    }
    assert_eq!(w.frames.len(), 2 * n);
    w.frames
}

/// Sends each request, then its ACK `delays[i]` later, on tx0; the next request after the
/// ACK. The truth: per pair, the monotonic time from just after the request's send returned to
/// just before the ACK's send began, and from just before the request's to just after the
/// ACK's (the measured sample lies between, give or take the send paths' difference).
fn send_pairs(lab: &Lab, frames: Vec<Frame>, delays: Vec<Duration>) -> Vec<(u64, u64)> {
    send_pairs_on(lab, frames, delays, None)
}

/// [`send_pairs`] from CPU `cpu` (none: the first this process may use).
fn send_pairs_on(
    lab: &Lab,
    frames: Vec<Frame>,
    delays: Vec<Duration>,
    cpu: Option<usize>,
) -> Vec<(u64, u64)> {
    lab.ns
        .run_in(move || {
            match cpu {
                Some(cpu) => roce_observer::lab::pin_current_thread_to(cpu).unwrap(),
                None => roce_observer::lab::pin_current_thread().unwrap(),
            }
            let sock = PacketSocket::open("tx0").unwrap();
            let mut truth = Vec::new();
            for (i, (pair, delay)) in frames.chunks(2).zip(delays).enumerate() {
                let t0 = Instant::now();
                sock.send(&pair[0].bytes, 2 * i).unwrap();
                let t1 = Instant::now();
                let due = t1 + delay;
                // A sleep, then a spin for the last stretch: the delay lands within
                // microseconds of the one asked for.
                if delay > Duration::from_micros(300) {
                    std::thread::sleep(delay - Duration::from_micros(200));
                }
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
                let t2 = Instant::now();
                sock.send(&pair[1].bytes, 2 * i + 1).unwrap();
                let t3 = Instant::now();
                truth.push(((t2 - t1).as_nanos() as u64, (t3 - t0).as_nanos() as u64));
                std::thread::sleep(Duration::from_micros(200));
            }
            truth
        })
        .unwrap()
}

/// Runs `diagnose` on rx0 while the pairs cross with `delays`; the report, its one ACK
/// latency histogram and the generator's truth per pair.
fn measure(delays: Vec<Duration>) -> (Report, LatencyScope, Vec<(u64, u64)>) {
    let lab = Lab::create("ro-lat").unwrap();
    let total: Duration = delays.iter().sum();
    let duration = total.as_secs() + 3;
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &[
            "--iface",
            "rx0",
            "--duration",
            &format!("{duration}s"),
            "--json",
        ],
    );
    assert!(has_xdp(&lab.ns, "rx0"));
    let truth = send_pairs(&lab, pairs(delays.len()), delays);
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let acks: Vec<&LatencyScope> = report.latency.iter().filter(|l| l.kind == "ack").collect();
    assert_eq!(acks.len(), 1, "one ACK histogram: {:?}", report.latency);
    let l = acks[0].clone();
    assert_eq!(l.interface.as_deref(), Some("rx0"));
    assert_eq!(l.side, "requests_in");
    (report, l, truth)
}

/// How far a measured sample may stray from the generator's window: the two sends' paths to
/// the observer differ by microseconds; a busy machine may delay one by more.
const SLACK_NS: u64 = 300_000;

/// Each delay, constant: every pair sampled; the minimum, median and maximum within the
/// generator's window (plus the slack).
#[test]
fn ack_latency_equals_the_delay_the_generator_kept() {
    if !require_root("ack_latency_equals_the_delay_the_generator_kept") {
        return;
    }
    let _one = one_at_a_time();
    for d_ms in [1u64, 5, 20] {
        let n = 40;
        let (report, l, truth) = measure(vec![Duration::from_millis(d_ms); n]);
        let s = &l.summary;
        assert_eq!(
            s.samples, n as u64,
            "delay {d_ms} ms: every ACK timed: {s:?}"
        );
        let lo = truth.iter().map(|t| t.0).min().unwrap();
        let hi = truth.iter().map(|t| t.1).max().unwrap();
        eprintln!(
            "delay {d_ms} ms: measured min {} p50 {} max {}; generator {lo}..{hi}",
            s.min_ns, s.p50_ns, s.max_ns
        );
        for (what, v) in [("min", s.min_ns), ("p50", s.p50_ns), ("max", s.max_ns)] {
            assert!(
                v + SLACK_NS >= lo && v <= hi + SLACK_NS,
                "delay {d_ms} ms: {what} {v} outside the truth {lo}..{hi}: {s:?}"
            );
        }
        // The median: the generator's (its sleeps may overshoot on a busy machine), within a
        // bucket.
        let mut mids: Vec<u64> = truth.iter().map(|(lo, hi)| (lo + hi) / 2).collect();
        mids.sort();
        let median = mids[mids.len() / 2];
        assert!(
            s.p50_ns.abs_diff(median) <= median / 8 + SLACK_NS,
            "p50 {} vs the generator's {median}",
            s.p50_ns
        );
        // The connection holds the same samples, on the requester's side.
        assert_eq!(report.connections.len(), 1);
        let c = &report.connections[0];
        assert_eq!(c.a.ip.to_string(), "198.18.0.1", "A sent the requests");
        let mut qps = [c.a.qp, c.b.qp];
        qps.sort();
        assert_eq!(qps, [Some(0x11), Some(0x22)], "both QP numbers");
        assert_eq!(c.a.latency.ack.as_ref().map(|a| a.samples), Some(n as u64));
        assert!(c.b.latency.ack.is_none());
    }
}

/// Mirror mode spread over CPUs, the CPU the pairs' hosts hash to held by a real-time thread
/// while they cross: requests and ACKs all wait in its queue and are accounted together once it
/// is free. The ACK latency is still the delay the generator kept, because the receiving CPU
/// stamps each frame's arrival before the queue (without the stamp, every sample would be the
/// few microseconds between two frames of the drained queue).
#[test]
fn spread_ack_latency_is_timed_before_the_cpu_queue() {
    if !require_root("spread_ack_latency_is_timed_before_the_cpu_queue") {
        return;
    }
    let _one = one_at_a_time();
    let online = roce_observer::source::live::online_cpus().unwrap();
    if online.len() < 2 {
        eprintln!(
            "SKIPPED spread_ack_latency_is_timed_before_the_cpu_queue: needs two online CPUs"
        );
        return;
    }
    let cpus = &online[..2];
    let v4 = |last: u8| {
        let mut a = [0u8; 16];
        a[10..12].copy_from_slice(&[0xFF, 0xFF]);
        a[12..].copy_from_slice(&[198, 18, 0, last]);
        a
    };
    // The CPU the spreading sends the pairs to, and the other one to send them from.
    let to = (observer_common::spread_hash(&v4(1), &v4(2)) % 2) as usize;
    let (held, sender) = (cpus[to] as usize, cpus[1 - to] as usize);
    let lab = Lab::create("ro-latsp").unwrap();
    let list = roce_observer::source::live::cpu_list(cpus);
    let d = Diagnose::start(
        &lab.ns,
        CLI.as_ref(),
        &[
            "--iface",
            "rx0",
            "--mode",
            "mirror",
            "--cpus",
            &list,
            "--duration",
            "3s",
            "--json",
        ],
    );
    let n = 20;
    let hold = integration_tests::hold_cpu(held, 500);
    std::thread::sleep(Duration::from_millis(30));
    let truth = send_pairs_on(
        &lab,
        pairs(n),
        vec![Duration::from_millis(5); n],
        Some(sender),
    );
    hold.join().unwrap();
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let acks: Vec<&LatencyScope> = report.latency.iter().filter(|l| l.kind == "ack").collect();
    // A kernel that refuses XDP metadata to XDP programs: no arrival stamps, as the report
    // says, and no sample (timed after the held queue, each would be off by its wait).
    if report
        .source
        .warnings
        .iter()
        .any(|w| w == roce_observer::source::live::SPREAD_UNSTAMPED)
    {
        eprintln!(
            "NOTE: this kernel refuses bpf_xdp_adjust_meta to XDP programs: the report says so, \
             and spread copies are not timed"
        );
        assert!(acks.is_empty(), "no ACK sample: {:?}", report.latency);
        return;
    }
    assert_eq!(acks.len(), 1, "one ACK histogram: {:?}", report.latency);
    let s = &acks[0].summary;
    assert_eq!(s.samples, n as u64, "every ACK timed: {s:?}");
    let lo = truth.iter().map(|t| t.0).min().unwrap();
    let hi = truth.iter().map(|t| t.1).max().unwrap();
    eprintln!(
        "spread, queue held: measured min {} p50 {} max {}; generator {lo}..{hi}",
        s.min_ns, s.p50_ns, s.max_ns
    );
    for (what, v) in [("min", s.min_ns), ("p50", s.p50_ns), ("max", s.max_ns)] {
        assert!(
            v + SLACK_NS >= lo && v <= hi + SLACK_NS,
            "{what} {v} outside the truth {lo}..{hi}: {s:?}"
        );
    }
}

/// Delays spread over 2..10 ms (a known sequence): the measured p50, p90 and p99 are those of
/// the generator's own histogram of what it kept, within a bucket (12.5%) and the slack.
#[test]
fn ack_latency_quantiles_follow_a_spread_of_delays() {
    if !require_root("ack_latency_quantiles_follow_a_spread_of_delays") {
        return;
    }
    let _one = one_at_a_time();
    let n = 200u64;
    let delays: Vec<Duration> = (0..n)
        .map(|i| Duration::from_micros(2_000 + (i * 7919) % 8_000))
        .collect();
    let (_, l, truth) = measure(delays);
    let s = &l.summary;
    assert_eq!(s.samples, n, "{s:?}");
    let mut want = LatHist::default();
    for (lo, hi) in &truth {
        want.record((lo + hi) / 2);
    }
    for (q, got) in [(0.5, s.p50_ns), (0.9, s.p90_ns), (0.99, s.p99_ns)] {
        let w = want.quantile(q).unwrap();
        eprintln!("q{q}: measured {got}, generator {w}");
        assert!(
            got.abs_diff(w) <= w / 8 + SLACK_NS,
            "q{q}: measured {got}, generator {w}: {s:?}"
        );
    }
}

/// Two veth pairs in one namespace: requests tx0 -> rx0, answers tx1 -> rx1.
fn two_links(ns: &roce_observer::lab::Netns) {
    for (rx, tx) in [("rx0", "tx0"), ("rx1", "tx1")] {
        sh(
            ns,
            &["ip", "link", "add", rx, "type", "veth", "peer", "name", tx],
        );
        for dev in [rx, tx] {
            sh(ns, &["ip", "link", "set", dev, "up"]);
        }
    }
}

fn sh(ns: &roce_observer::lab::Netns, args: &[&str]) {
    let out = ns
        .command(args[0])
        .args(&args[1..])
        .output()
        .expect("run in the namespace");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A full-size frame that is not IP (a local experimental EtherType): the observer skips it.
fn filler() -> Vec<u8> {
    let mut f = vec![0u8; 1514];
    f[..6].copy_from_slice(&host_mac(2));
    f[6..12].copy_from_slice(&host_mac(1));
    f[12..14].copy_from_slice(&0x88B5u16.to_be_bytes());
    f
}

/// The shaper's bucket (bytes).
const BURST: u64 = 1600;
/// The full-size frame ahead of each ACK.
const FULL: u64 = 1514;

/// The delay a token bucket of `rate` bits/s, full (`BURST`), gives an ACK of `ack_len` bytes
/// sent right behind a full frame and one of `second` bytes: its tokens come once the bucket
/// has paid for all three.
fn shaper_delay_ns(second: u64, ack_len: u64, rate: u64) -> u64 {
    (FULL + second + ack_len - BURST) * 8 * 1_000_000_000 / rate
}

/// Runs `diagnose` on rx0 and rx1 while `seconds.len()` WRITEs go on tx0 and their ACKs on
/// tx1, shaped by `tc qdisc tbf rate RATE burst BURST`, each ACK behind a full frame and one of
/// `seconds[i]` bytes, pairs `gap` apart; its one ACK histogram and the ACK frame's length.
fn shaped(rate_mbit: u64, seconds: Vec<usize>, gap: Duration) -> (LatencyScope, u64) {
    let n = seconds.len();
    let ns = roce_observer::lab::Netns::create("ro-tbf").unwrap();
    two_links(&ns);
    let (rate, burst) = (format!("{rate_mbit}mbit"), BURST.to_string());
    sh(
        &ns,
        &[
            "tc", "qdisc", "add", "dev", "tx1", "root", "tbf", "rate", &rate, "burst", &burst,
            "latency", "1s",
        ],
    );
    let frames = pairs(n);
    let ack_len = frames[1].bytes.len() as u64;
    let d = Diagnose::start(
        &ns,
        CLI.as_ref(),
        &[
            "--iface",
            "rx0",
            "--iface",
            "rx1",
            "--duration",
            &format!("{}s", (gap * n as u32).as_secs() + 2),
            "--json",
        ],
    );
    assert!(has_xdp(&ns, "rx0") && has_xdp(&ns, "rx1"));
    ns.run_in(move || {
        roce_observer::lab::pin_current_thread().unwrap();
        let req = PacketSocket::open("tx0").unwrap();
        let ans = PacketSocket::open("tx1").unwrap();
        let fill = filler();
        for (i, (pair, second)) in frames.chunks(2).zip(seconds).enumerate() {
            req.send(&pair[0].bytes, 4 * i).unwrap();
            ans.send(&fill, 4 * i + 1).unwrap();
            ans.send(&fill[..second], 4 * i + 2).unwrap();
            ans.send(&pair[1].bytes, 4 * i + 3).unwrap();
            std::thread::sleep(gap);
        }
    })
    .unwrap();
    let (status, out, err) = d.finish();
    assert!(status.success(), "diagnose failed: {err}");
    let report: Report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let l = report
        .latency
        .iter()
        .find(|l| l.kind == "ack")
        .unwrap_or_else(|| panic!("no ACK latency: {:?}", report.latency))
        .clone();
    (l, ack_len)
}

/// The kernel's own delay: the answers' link is shaped by a token bucket (`tc qdisc tbf rate
/// R burst B`), and before each ACK two full-size frames go that way. With the bucket full
/// (B bytes), the first passes at once, the second waits for 2 x 1514 - B bytes of tokens and
/// the ACK for its own length more: its delay is (2 x 1514 + ACK - B) x 8 / R, computed and
/// kept by the kernel's shaper. For three rates the observer's ACK latency is that delay, from
/// just above to the slack above (the sends and the veth hops take microseconds). (netem, the
/// usual way, is not in this kernel: it is built without CONFIG_NET_SCH_NETEM.)
#[test]
fn ack_latency_equals_the_kernel_shapers_delay() {
    if !require_root("ack_latency_equals_the_kernel_shapers_delay") {
        return;
    }
    let _one = one_at_a_time();
    let n = 20;
    for rate_mbit in [1u64, 10, 100] {
        let rate = rate_mbit * 1_000_000;
        // The ACK frame's length, as `pairs` builds it (checked below).
        let ack_len = pairs(1)[1].bytes.len() as u64;
        let delay_ns = shaper_delay_ns(FULL, ack_len, rate);
        // The bucket refills (and the queue drains) between pairs.
        let gap = Duration::from_nanos(delay_ns + 3 * BURST * 8 * 1_000_000_000 / rate);
        let (l, shaped_ack_len) = shaped(rate_mbit, vec![FULL as usize; n], gap);
        assert_eq!(shaped_ack_len, ack_len);
        let s = &l.summary;
        eprintln!(
            "tbf {rate_mbit} Mbit/s: shaper delay {delay_ns} ns; measured min {} p50 {} max {} ({} samples)",
            s.min_ns, s.p50_ns, s.max_ns, s.samples
        );
        assert_eq!(l.interface.as_deref(), Some("rx1"));
        assert_eq!(s.samples, n as u64, "{s:?}");
        // The minimum (exact) is the shaper's delay. The median too, to the
        // histogram's resolution: a quantile is interpolated inside its bucket (12.5% wide,
        // 1 ms at 12 ms), whose top an odd pair one frame's time late (a bucket not yet full
        // again) can raise.
        assert!(
            s.min_ns + 20_000 >= delay_ns && s.min_ns <= delay_ns + SLACK_NS,
            "tbf {rate_mbit} Mbit/s: min {} ns, the shaper's {delay_ns} ns: {s:?}",
            s.min_ns
        );
        // (Not p90: under CI's load a few pairs in 20 arrive a millisecond late, the shaper's
        // timer run late; the spread test judges p90 over 60.)
        assert!(
            s.p50_ns + 20_000 >= delay_ns && s.p50_ns <= delay_ns + delay_ns / 8 + SLACK_NS,
            "tbf {rate_mbit} Mbit/s: p50 {} ns, the shaper's {delay_ns} ns: {s:?}",
            s.p50_ns
        );
    }
}

/// Spread delays from the kernel's shaper: at 10 Mbit/s, the second frame ahead of each ACK
/// varies in size (200 to 1514 bytes, a known sequence), so the shaper delays the ACKs from
/// 0.14 to 1.19 ms. The measured p50, p90 and p99 are those of the delays the shaper's
/// arithmetic gives, within a bucket (12.5%) and the slack.
#[test]
fn ack_latency_quantiles_follow_the_shapers_spread() {
    if !require_root("ack_latency_quantiles_follow_the_shapers_spread") {
        return;
    }
    let _one = one_at_a_time();
    const RATE: u64 = 10_000_000;
    let n = 60usize;
    let sizes: Vec<usize> = (0..n).map(|i| 200 + (i * 263) % 1315).collect();
    let (l, ack_len) = shaped(10, sizes.clone(), Duration::from_millis(6));
    let mut want = LatHist::default();
    for sz in &sizes {
        want.record(shaper_delay_ns(*sz as u64, ack_len, RATE));
    }
    let s = &l.summary;
    assert_eq!(s.samples, n as u64, "{s:?}");
    for (q, got) in [(0.5, s.p50_ns), (0.9, s.p90_ns)] {
        let w = want.quantile(q).unwrap();
        eprintln!("tbf spread q{q}: measured {got}, the shaper's {w}");
        assert!(
            got.abs_diff(w) <= w / 8 + SLACK_NS,
            "q{q}: measured {got}, the shaper's {w}: {s:?}"
        );
    }
    // The p99 of 60 samples is their largest: never below the shaper's. Above it, at most one
    // sample of the 60 may be late by more than one full frame's time (a pair that meets the
    // bucket not yet full) and the slack: the host's scheduler delays a veth's softirq now and
    // then on this loaded 2-CPU machine (a 3.4 ms sample seen once in CI), and the wire time
    // the observer measures then includes it.
    let (w99, frame_ns) = (
        want.quantile(0.99).unwrap(),
        FULL * 8 * 1_000_000_000 / RATE,
    );
    eprintln!(
        "tbf spread q0.99: measured {}, the shaper's {w99}",
        s.p99_ns
    );
    assert!(
        s.p99_ns + w99 / 8 >= w99,
        "q0.99: measured {}, the shaper's {w99}: {s:?}",
        s.p99_ns
    );
    let late: u64 = s
        .buckets
        .iter()
        .filter(|b| b.lo_ns > w99 + frame_ns + SLACK_NS)
        .map(|b| b.count)
        .sum();
    assert!(
        late <= 1,
        "{late} samples above the shaper's p99 {w99} by more than a frame and the slack: {s:?}"
    );
}
