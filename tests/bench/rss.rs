//! `cargo xtask bench` (fourth part): how receive steering spreads mirror copies over CPUs.
//!
//! A NIC's RSS hashes the outer 5-tuple of a frame to pick a receive queue, and so a CPU. Direct
//! RoCEv2 spreads by its UDP source port (one per QP). Mirror copies from one switch to one
//! collector all share one outer tuple (same outer IPs; GRE has no ports), so the hash sends
//! them all to one CPU, which then does all of the observer's work.
//!
//! This measures that on a veth pair in a lab namespace, with RPS (the kernel's software RSS: a
//! flow hash like a NIC's, computed by the kernel's flow dissector) on `rx0` over every CPU this
//! process may use, and the observer (`roce_observe`) attached in generic (skb) XDP mode, which
//! runs after RPS steering. Frames per CPU are the per-CPU values of the observer's `COUNTERS`
//! map.
//!
//! Cases (each sent from one sender thread pinned to the first allowed CPU):
//! - `direct_rps_off`: the `many-qps` scenario (1000 RC QPs) with RPS off: the control; every
//!   frame must be handled on the sender's CPU.
//! - `direct`: the same frames with RPS on: they must spread, which shows that generic XDP runs
//!   on the CPU RPS picked.
//! - `erspan3`: the same frames, each an ERSPAN III copy (session 7, platform subheader) from
//!   one mirror source to one collector.
//! - `erspan3_4_sessions`: ERSPAN III copies from the same source in 4 sessions (the hosts'
//!   subnets split over sessions 1-4, both directions of a QP in one session).
//! - `erspan3_4_sources`: ERSPAN III copies from 4 mirror sources (outer source addresses
//!   198.19.255.1-4, split the same way), as from several switches or several sessions with
//!   their own source addresses.
//! - `gre_teb`: the same frames as GRE transparent Ethernet bridging copies (the kernel's flow
//!   dissector looks inside TEB, so RPS hashes on the inner headers; a NIC's RSS does not).
//! - `erspan3_spread`: the `erspan3` copies with the observer as mirror mode attaches it spread
//!   over every allowed CPU (`--cpus`): `roce_spread` sends each copy through a cpumap to the CPU
//!   its hosts hash to, where the observer accounts it (and consumes it). The scenario's 10 host
//!   pairs are what it spreads.
//!
//! Frames lost = sent - counted; `backlog_drops` is the rise of the kernel's per-CPU backlog
//! drop counter (/proc/net/softnet_stat, all interfaces) during the case.

use std::{
    process::{Command, ExitCode},
    time::{Duration, Instant},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::PerCpuArray,
    programs::{Xdp, XdpMode},
};
use observer_common::{Counters, maps, programs};
use roce_observer::{
    EBPF_OBJECT,
    lab::{Lab, pin_current_thread},
    source::synth::{self, Encap, Frame},
};

/// Spread of mirror copies over CPUs under receive steering (needs root).
#[derive(clap::Parser)]
#[command(name = "bench-rss")]
struct Args {
    /// Times the scenario's frames are sent per case.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Print the figures as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

const SCENARIO: &str = "many-qps";
const ERSPAN_SESSION: u16 = 7;

/// How the scenario's frames go on the wire.
#[derive(Clone, Copy)]
enum Wrap {
    Direct,
    /// One source, one session.
    ErspanIII,
    /// One source, [`GROUPS`] sessions.
    ErspanSessions,
    /// [`GROUPS`] sources (outer source addresses), one session.
    ErspanSources,
    Teb,
}

/// Sessions or sources of the split cases.
const GROUPS: u8 = 4;

struct Case {
    name: &'static str,
    wrap: Wrap,
    rps: bool,
    what: &'static str,
}

const CASES: [Case; 6] = [
    Case {
        name: "direct_rps_off",
        wrap: Wrap::Direct,
        rps: false,
        what: "direct RoCE, RPS off (control)",
    },
    Case {
        name: "direct",
        wrap: Wrap::Direct,
        rps: true,
        what: "direct RoCE",
    },
    Case {
        name: "erspan3",
        wrap: Wrap::ErspanIII,
        rps: true,
        what: "ERSPAN III copies, one source",
    },
    Case {
        name: "erspan3_4_sessions",
        wrap: Wrap::ErspanSessions,
        rps: true,
        what: "ERSPAN III copies, one source, 4 sessions",
    },
    Case {
        name: "erspan3_4_sources",
        wrap: Wrap::ErspanSources,
        rps: true,
        what: "ERSPAN III copies, 4 sources",
    },
    Case {
        name: "gre_teb",
        wrap: Wrap::Teb,
        rps: true,
        what: "GRE TEB copies, one source",
    },
];

struct Outcome {
    name: &'static str,
    what: &'static str,
    rps: bool,
    sent: u64,
    /// Frames the observer counted, per possible CPU.
    per_cpu: Vec<u64>,
    /// Of those, RoCE packets (direct or decapsulated): all of them, in this scenario.
    roce_packets: u64,
    backlog_drops: u64,
}

impl Outcome {
    fn counted(&self) -> u64 {
        self.per_cpu.iter().sum()
    }

    fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.counted())
    }

    fn share(&self, cpu: usize) -> f64 {
        match self.counted() {
            0 => 0.0,
            n => self.per_cpu[cpu] as f64 / n as f64,
        }
    }

    /// CPUs that handled at least 1% of the frames.
    fn busy_cpus(&self) -> Vec<usize> {
        (0..self.per_cpu.len())
            .filter(|&c| self.share(c) >= 0.01)
            .collect()
    }

    fn conclusion(&self) -> String {
        let busy = self.busy_cpus();
        let largest = (0..self.per_cpu.len())
            .map(|c| self.share(c))
            .fold(0.0, f64::max);
        match busy.as_slice() {
            [] => "no frames counted".into(),
            [cpu] => format!(
                "one CPU: CPU {cpu} handled {:.1}% of the frames",
                largest * 100.0
            ),
            _ => format!(
                "spread over {} CPUs (largest share {:.1}%)",
                busy.len(),
                largest * 100.0
            ),
        }
    }
}

/// A CPU set in the kernel's cpumask format: hex, in comma-separated 32-bit groups, highest
/// first (what rps_cpus reads and writes).
fn cpumask(cpus: &[usize]) -> String {
    let groups = cpus.iter().max().map_or(1, |m| m / 32 + 1);
    let mut words = vec![0u32; groups];
    for &c in cpus {
        words[c / 32] |= 1 << (c % 32);
    }
    words
        .iter()
        .rev()
        .map(|w| format!("{w:08x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The value of a cpumask as written by [`cpumask`] or read from sysfs.
fn parse_cpumask(s: &str) -> Option<u128> {
    u128::from_str_radix(&s.trim().replace(',', ""), 16).ok()
}

/// Sets (and reads back) rps_cpus of every receive queue of `rx0` in the namespace. sysfs shows
/// the devices of the network namespace it was mounted in, and `ip netns exec` mounts it anew
/// inside the namespace, so the write goes through it.
fn set_rps(ns: &str, mask: &str) -> Result<(), String> {
    let script = format!(
        "set -e; for q in /sys/class/net/{rx}/queues/rx-*/rps_cpus; do echo {mask} > $q; done; \
         cat /sys/class/net/{rx}/queues/rx-*/rps_cpus",
        rx = Lab::RX
    );
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", &script])
        .output()
        .map_err(|e| format!("cannot run ip netns exec: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "setting rps_cpus of {} to {mask}: {}",
            Lab::RX,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let want = parse_cpumask(mask);
    if text.lines().count() == 0 || text.lines().any(|l| parse_cpumask(l) != want) {
        return Err(format!(
            "rps_cpus of {} reads back as {:?} after writing {mask}",
            Lab::RX,
            text.trim()
        ));
    }
    Ok(())
}

/// Backlog drops per CPU so far (second column of /proc/net/softnet_stat, all CPUs summed).
fn backlog_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .filter_map(|d| u64::from_str_radix(d, 16).ok())
                .sum()
        })
        .unwrap_or(0)
}

/// Frames the observer counted so far, per possible CPU, and RoCE packets (all CPUs).
fn frames_per_cpu(ebpf: &Ebpf) -> Result<(Vec<u64>, u64), String> {
    let map = ebpf
        .map(maps::COUNTERS)
        .ok_or_else(|| format!("no map {}", maps::COUNTERS))?;
    let counters: PerCpuArray<_, Counters> =
        PerCpuArray::try_from(map).map_err(|e| format!("{}: {e}", maps::COUNTERS))?;
    let values = counters
        .get(&0, 0)
        .map_err(|e| format!("reading {}: {e}", maps::COUNTERS))?;
    Ok((
        values.iter().map(|c| c.frames).collect(),
        values.iter().map(|c| c.roce_packets).sum(),
    ))
}

/// Waits until the counted frames reach `want` or stop rising (the backlog drained).
fn settle(ebpf: &Ebpf, want: u64) -> Result<(Vec<u64>, u64), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = frames_per_cpu(ebpf)?;
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = frames_per_cpu(ebpf)?;
        let total: u64 = now.0.iter().sum();
        if total >= want || now == last || Instant::now() > deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// The group (session or source, 0..GROUPS) of an untagged IPv4 frame of `many-qps`: the third
/// octet of its source address (one per host pair, so both directions of a QP share a group),
/// as a mirror of a few ports each would split them.
fn group(inner: &[u8]) -> u8 {
    const SRC_IP_THIRD_OCTET: usize = 14 + 12 + 2;
    inner[SRC_IP_THIRD_OCTET] % GROUPS
}

/// Sets the outer IPv4 source address's last octet of an [`synth::encapsulate`]d copy (outer
/// header untagged, without options) and recomputes the header checksum.
fn set_outer_source(copy: &mut [u8], last_octet: u8) {
    let ip = &mut copy[14..14 + 20];
    ip[15] = last_octet;
    ip[10..12].fill(0);
    let sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let folded = (sum & 0xFFFF) + (sum >> 16);
    let folded = (folded & 0xFFFF) + (folded >> 16);
    ip[10..12].copy_from_slice(&(!(folded as u16)).to_be_bytes());
}

fn erspan3(session: u16) -> Encap {
    Encap::ErspanIII {
        session,
        truncated: false,
        platform: true,
    }
}

fn wrap(frames: &[Frame], how: Wrap) -> Vec<Frame> {
    frames
        .iter()
        .map(|f| {
            let g = group(&f.bytes);
            let bytes = match how {
                Wrap::Direct => f.bytes.clone(),
                Wrap::ErspanIII => synth::encapsulate(&f.bytes, erspan3(ERSPAN_SESSION)),
                Wrap::ErspanSessions => synth::encapsulate(&f.bytes, erspan3(1 + u16::from(g))),
                Wrap::ErspanSources => {
                    let mut b = synth::encapsulate(&f.bytes, erspan3(ERSPAN_SESSION));
                    set_outer_source(&mut b, 1 + g);
                    b
                }
                Wrap::Teb => synth::encapsulate(&f.bytes, Encap::Teb),
            };
            Frame {
                bytes,
                ts_ns: f.ts_ns,
            }
        })
        .collect()
}

/// An error on one line: a verifier log is long, so keep its first line and its last
/// meaningful line (the reason).
fn one_line(e: &dyn std::error::Error) -> String {
    let text = e.to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| !l.starts_with("verification time") && !l.starts_with("stack depth"))
        .filter(|l| !l.starts_with("processed "))
        .collect();
    match lines.as_slice() {
        [] => text,
        [one] => one.to_string(),
        [first, .., last] => format!("{first} ... {last}"),
    }
}

/// Inside the namespace: attach the observer to rx0 in generic mode, then send every case from
/// a sender pinned to one CPU and count where the observer ran.
fn measure(
    ns: String,
    mask: String,
    cpus: Vec<u32>,
    rounds: u32,
) -> Result<(usize, Vec<Outcome>), String> {
    pin_current_thread().map_err(|e| format!("pinning the sender: {e}"))?;
    // SAFETY: sched_getcpu has no preconditions.
    let sender_cpu = unsafe { libc::sched_getcpu() };
    let sender_cpu = usize::try_from(sender_cpu).map_err(|_| "sched_getcpu failed".to_string())?;
    let mut ebpf = EbpfLoader::new()
        .load(EBPF_OBJECT)
        .map_err(|e| format!("loading the kernel object: {}", one_line(&e)))?;
    let prog: &mut Xdp = ebpf
        .program_mut(programs::OBSERVE)
        .ok_or_else(|| format!("program {} missing from the object", programs::OBSERVE))?
        .try_into()
        .map_err(|e| format!("program {}: {e}", programs::OBSERVE))?;
    prog.load()
        .map_err(|e| format!("loading {}: {}", programs::OBSERVE, one_line(&e)))?;
    prog.attach(Lab::RX, XdpMode::Skb).map_err(|e| {
        format!(
            "attaching {} to {} (skb mode): {e}",
            programs::OBSERVE,
            Lab::RX
        )
    })?;

    let workload = synth::scenario(SCENARIO).ok_or("no many-qps scenario")?;
    // `group` and `set_outer_source` read fixed offsets of untagged IPv4.
    if let Some(i) = workload
        .frames
        .iter()
        .position(|f| f.bytes.get(12..14) != Some(&[0x08, 0x00][..]))
    {
        return Err(format!("{SCENARIO}: frame {i} is not untagged IPv4"));
    }
    let mut outcomes = Vec::new();
    for case in &CASES {
        set_rps(&ns, if case.rps { &mask } else { "0" })?;
        let frames = wrap(&workload.frames, case.wrap);
        let (before, roce_before) = frames_per_cpu(&ebpf)?;
        let drops_before = backlog_drops();
        let mut sent = 0u64;
        for _ in 0..rounds {
            sent +=
                synth::send(Lab::TX, &frames).map_err(|e| format!("{}: {e}", case.name))? as u64;
        }
        let want = before.iter().sum::<u64>() + sent;
        let (after, roce_after) = settle(&ebpf, want)?;
        outcomes.push(Outcome {
            name: case.name,
            what: case.what,
            rps: case.rps,
            sent,
            per_cpu: after.iter().zip(&before).map(|(a, b)| a - b).collect(),
            roce_packets: roce_after - roce_before,
            backlog_drops: backlog_drops().saturating_sub(drops_before),
        });
    }
    for o in &outcomes {
        if o.roce_packets != o.counted() {
            return Err(format!(
                "{}: the observer parsed {} of {} counted frames as RoCE (expected all)",
                o.name,
                o.roce_packets,
                o.counted()
            ));
        }
    }
    // Dropping `ebpf` detaches the program; deleting the namespace would as well.
    drop(ebpf);
    outcomes.push(measure_spread(&ns, &mask, cpus, &workload.frames, rounds)?);
    Ok((sender_cpu, outcomes))
}

/// The `erspan3` copies through the observer spread over the allowed CPUs, as `diagnose --mode
/// mirror --consume --cpus LIST` attaches it (generic XDP mode, no microburst slots).
fn measure_spread(
    ns: &str,
    mask: &str,
    cpus: Vec<u32>,
    inner: &[Frame],
    rounds: u32,
) -> Result<Outcome, String> {
    use roce_observer::source::live::{AttachMode, LiveConfig, Observer, Spread, Vantage};
    set_rps(ns, mask)?;
    let mut config = LiveConfig::new(vec![Lab::RX.to_string()]);
    config.xdp_mode = AttachMode::Skb;
    config.vantage = Vantage::Mirror { consume: true };
    config.burst_slot_ns = 0;
    config.spread = Spread::Cpus(cpus);
    let observer =
        Observer::attach(config).map_err(|e| format!("erspan3_spread: {}", one_line(&e)))?;
    let frames = wrap(inner, Wrap::ErspanIII);
    let drops_before = backlog_drops();
    let mut sent = 0u64;
    for _ in 0..rounds {
        sent += synth::send(Lab::TX, &frames).map_err(|e| format!("erspan3_spread: {e}"))? as u64;
    }
    let (per_cpu, roce_packets) = settle(observer.ebpf(), sent)?;
    Ok(Outcome {
        name: "erspan3_spread",
        what: "ERSPAN III copies, one source, spread (--cpus)",
        rps: true,
        sent,
        per_cpu,
        roce_packets,
        backlog_drops: backlog_drops().saturating_sub(drops_before),
    })
}

fn run(args: &Args) -> Result<(), String> {
    // The RPS mask, and where the sender is pinned.
    let allowed =
        roce_observer::lab::allowed_cpus().map_err(|e| format!("sched_getaffinity: {e}"))?;
    if allowed.len() < 2 {
        return Err(format!(
            "needs at least 2 CPUs to measure spreading (this process may use {})",
            allowed.len()
        ));
    }
    let mask = cpumask(&allowed);
    let lab = Lab::create("ro-rss").map_err(|e| format!("creating the lab namespace: {e}"))?;
    let ns = lab.ns.name().to_string();
    let rounds = args.rounds;
    let mask_in = mask.clone();
    // The CPUs to spread over: every one this process may use (the sender pins itself later).
    let cpus = allowed.iter().map(|&c| c as u32).collect();
    let (sender_cpu, outcomes) = lab
        .ns
        .run_in(move || measure(ns, mask_in, cpus, rounds))
        .map_err(|e| e.to_string())??;
    drop(lab);

    let control = &outcomes[0];
    let direct = &outcomes[1];
    // Generic XDP runs on the CPU RPS picked: without RPS everything stays on the sender's CPU,
    // with RPS the same frames spread.
    let after_rps = control.busy_cpus() == [sender_cpu] && direct.busy_cpus().len() > 1;
    let verdict = if after_rps {
        "generic XDP ran on the CPU RPS chose (RPS off: all frames on the sender's CPU; RPS on: spread)"
    } else {
        "could not show that generic XDP runs after RPS steering (see the control rows)"
    };
    let frames_per_round = outcomes[0].sent / u64::from(rounds);
    if args.json {
        let env = integration_tests::environment_json(&integration_tests::bench_environment());
        let json = serde_json::json!({
            "environment": env,
            "scenario": SCENARIO,
            "frames_per_round": frames_per_round,
            "rounds": rounds,
            "xdp_mode": "skb",
            "rps_cpus": mask,
            "sender_cpu": sender_cpu,
            "generic_xdp_after_rps": after_rps,
            "results": outcomes.iter().map(|o| serde_json::json!({
                "case": o.name,
                "description": o.what,
                "rps": o.rps,
                "sent": o.sent,
                "counted": o.counted(),
                "roce_packets": o.roce_packets,
                "lost": o.lost(),
                "backlog_drops": o.backlog_drops,
                "per_cpu": allowed.iter().map(|&c| serde_json::json!({
                    "cpu": c,
                    "frames": o.per_cpu.get(c).copied().unwrap_or(0),
                    "share": o.share(c),
                })).collect::<Vec<_>>(),
                "conclusion": o.conclusion(),
            })).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json).expect("serializable")
        );
    } else {
        println!(
            "RSS spreading on veth: {SCENARIO} ({frames_per_round} frames) x {rounds}, RPS on rx0 over CPUs {mask}, \
             observer in generic (skb) XDP mode, sender pinned to CPU {sender_cpu}"
        );
        println!(
            "{}",
            integration_tests::environment_line(&integration_tests::bench_environment())
        );
        let cpu_cols: Vec<String> = allowed.iter().map(|c| format!("CPU {c}")).collect();
        println!(
            "{:<18} {:<4} {:>7} {:>7} {:>5} {}  conclusion",
            "case",
            "rps",
            "sent",
            "counted",
            "lost",
            cpu_cols
                .iter()
                .map(|c| format!("{c:>7}"))
                .collect::<String>()
        );
        for o in &outcomes {
            let shares: String = allowed
                .iter()
                .map(|&c| format!("{:>6.1}%", o.share(c) * 100.0))
                .collect();
            println!(
                "{:<18} {:<4} {:>7} {:>7} {:>5} {}  {}",
                o.name,
                if o.rps { "on" } else { "off" },
                o.sent,
                o.counted(),
                o.lost(),
                shares,
                o.conclusion()
            );
        }
        let drops: u64 = outcomes.iter().map(|o| o.backlog_drops).sum();
        if drops > 0 {
            println!("backlog drops during the run (all interfaces): {drops}");
        }
        println!("{verdict}");
    }
    if !after_rps {
        return Err(verdict.to_string());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    integration_tests::bench_main("bench-rss", "network namespace, XDP, sysfs", || run(&args))
}
