//! `cargo xtask bench` (after bench): the sustained packet rate of the observer, beside a
//! baseline that only counts, measured in the same run.
//!
//! BPF_PROG_TEST_RUN's live-frames mode runs a program on real XDP frames at the highest rate
//! the CPU can make them, the frames going where the verdict sends them: here both programs
//! drop (the observer as mirror mode with `--consume` runs it, `roce_observe_consume`, with the
//! interface counters `run` keeps; the baseline `count_frames_drop`), so neither pays the stack.
//! Cases: a RoCE WRITE on an existing flow, the same as an ERSPAN III copy, and a frame that is
//! not RoCE (UDP to port 53), each on one CPU and on two at once (one thread pinned per CPU,
//! each its own flow, timed together). Every figure is the median of `--runs` runs, and each run
//! checks that the observer counted every frame (nothing lost from its counts).
//!
//! Then mirror mode's spreading (`--cpus`): the copies of one mirror source all arrive on one
//! CPU, as RSS delivers them, where `roce_spread` sends each on through the cpumap to the CPU its
//! hosts hash to; there the consuming observer accounts it. Spread over one other CPU, then over
//! every CPU allowed (one host pair hashing to each): the rate is the copies accounted per
//! second until the last is, and a copy the cpumap dropped (its CPU's queue full) is counted as
//! dropped, never lost. The cpumap's threads as the kernel makes them (mirror mode leaves them
//! so), then at nice -20, then at SCHED_FIFO.
//!
//! The targets, each printed PASS or MISS beside its figure (`----`: not measurable here): on
//! one CPU, the observer sustains at least 50% of count-and-drop's rate on a RoCE packet, 45% on
//! an ERSPAN III copy and 80% on a frame that is not RoCE; spread over N CPUs (N >= 4), one
//! source's copies are accounted at least 0.9·N times as fast as on one.

use std::{
    process::ExitCode,
    sync::Barrier,
    time::{Duration, Instant},
};

use aya::{
    Ebpf,
    maps::PerCpuArray,
    programs::{TestRun, TestRunAttrs, TestRunOptions, Xdp},
};
use integration_tests::median;
use observer_common::{Counters, maps, programs, wire};
use roce_observer::source::{
    live::{RUN_TICK_NS, Vantage, if_index, load_object, observe_bursts, set_up_spread},
    synth::{self, Encap, Ip, RoceFrame},
};

/// Sustained packet rate through XDP live frames (needs root).
#[derive(clap::Parser)]
#[command(name = "bench-rate")]
struct Args {
    /// Frames per CPU per measurement.
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u32).range(100_000..))]
    frames: u32,
    /// Measurements per figure; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Print the figures as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Load the kernel object from this file instead of the one built in (e.g. another
    /// revision's, to compare two objects back to back on the same machine).
    #[arg(long, value_name = "PATH")]
    object: Option<std::path::PathBuf>,
}

/// Frames the kernel builds per batch (its default is 64).
const BATCH: u32 = 64;

/// An RC WRITE middle of 1024 B to `dest_qp` from host `host` (its own pair of addresses).
fn write_middle(host: u8, dest_qp: u32) -> Vec<u8> {
    write_middle_between(
        Ip::v4(
            std::net::Ipv4Addr::new(198, 18, host, 1),
            std::net::Ipv4Addr::new(198, 18, host, 2),
        ),
        dest_qp,
    )
}

/// An RC WRITE middle of 1024 B to `dest_qp` between the hosts of `ip`.
fn write_middle_between(ip: Ip, dest_qp: u32) -> Vec<u8> {
    let mut f = RoceFrame::new(ip, wire::TRANSPORT_RC | wire::op::WRITE_MIDDLE, dest_qp);
    f.bth.psn = 1000;
    f.payload_len = 1024;
    f.to_bytes()
}

fn erspan3(inner: &[u8]) -> Vec<u8> {
    synth::encapsulate(
        inner,
        Encap::ErspanIII {
            session: 7,
            truncated: false,
            platform: true,
        },
    )
}

/// The object with the observer and the baseline loaded, the loopback device (where
/// BPF_PROG_TEST_RUN runs XDP) observed as `run` observes: interface counters, no slots.
fn load(object: &[u8]) -> Result<Ebpf, String> {
    let mut ebpf = load_object(object, &[], 1, RUN_TICK_NS)
        .map_err(|e| format!("loading the kernel object: {e}"))?;
    for name in [programs::OBSERVE_CONSUME, programs::BASELINE_DROP] {
        let prog: &mut Xdp = ebpf
            .program_mut(name)
            .ok_or_else(|| format!("no program {name}"))?
            .try_into()
            .map_err(|e| format!("{name}: {e}"))?;
        prog.load().map_err(|e| format!("loading {name}: {e}"))?;
    }
    let lo = if_index("lo").map_err(|e| e.to_string())?;
    observe_bursts(&mut ebpf, &[("lo", lo)], 0).map_err(|e| e.to_string())?;
    Ok(ebpf)
}

/// Frames the program `name` counted (all CPUs).
fn counted(ebpf: &Ebpf, name: &str) -> Result<u64, String> {
    let fail = |e: &dyn std::fmt::Display| format!("reading the counts: {e}");
    if name == programs::BASELINE_DROP {
        let m: PerCpuArray<_, u64> =
            PerCpuArray::try_from(ebpf.map(maps::BASELINE).ok_or("no BASELINE map")?)
                .map_err(|e| fail(&e))?;
        return Ok(m.get(&0, 0).map_err(|e| fail(&e))?.iter().sum());
    }
    Ok(observer_counts(ebpf)?.0)
}

/// Runs `frames[i]` `count` times through `name` on CPU `cpus[i]`, all at once; the frames per
/// second of them all together, checked against the program's counts.
fn rate(
    ebpf: &Ebpf,
    name: &str,
    frames: &[Vec<u8>],
    cpus: &[usize],
    count: u32,
) -> Result<f64, String> {
    let prog: &Xdp = ebpf
        .program(name)
        .ok_or_else(|| format!("no program {name}"))?
        .try_into()
        .map_err(|e| format!("{name}: {e}"))?;
    let before = counted(ebpf, name)?;
    let t0 = Instant::now();
    send_live(prog, name, frames, cpus, count)?;
    let secs = t0.elapsed().as_secs_f64();
    let want = u64::from(count) * frames.len() as u64;
    let got = counted(ebpf, name)? - before;
    if got != want {
        return Err(format!("{name}: counted {got} of {want} frames"));
    }
    Ok(want as f64 / secs)
}

/// Runs `frames[i]` `count` times through `prog` on CPU `cpus[i]`, all at once.
fn send_live(
    prog: &Xdp,
    name: &str,
    frames: &[Vec<u8>],
    cpus: &[usize],
    count: u32,
) -> Result<(), String> {
    let start = Barrier::new(frames.len());
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = frames
            .iter()
            .zip(cpus)
            .map(|(frame, &cpu)| {
                let start = &start;
                s.spawn(move || {
                    roce_observer::lab::pin_current_thread_to(cpu)
                        .map_err(|e| format!("pinning to CPU {cpu}: {e}"))?;
                    start.wait();
                    let r = prog
                        .test_run(TestRunOptions {
                            data_in: Some(frame),
                            repeat: count,
                            attrs: TestRunAttrs::new().xdp_live_frames(BATCH),
                            ..Default::default()
                        })
                        .map_err(|e| format!("{name}: BPF_PROG_TEST_RUN (live frames): {e}"))?;
                    if r.return_value != 0 {
                        return Err(format!("{name}: live frames returned {}", r.return_value));
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a sender panicked".into())))
            .collect()
    });
    results.into_iter().collect()
}

/// Frames the observer accounted (in place or as the cpumap programs), and copies the spread's
/// cpumap dropped (all CPUs).
fn observer_counts(ebpf: &Ebpf) -> Result<(u64, u64), String> {
    let fail = |e: &dyn std::fmt::Display| format!("reading the counts: {e}");
    let m: PerCpuArray<_, Counters> =
        PerCpuArray::try_from(ebpf.map(maps::COUNTERS).ok_or("no COUNTERS map")?)
            .map_err(|e| fail(&e))?;
    let values = m.get(&0, 0).map_err(|e| fail(&e))?;
    Ok((
        values.iter().map(|c| c.frames).sum(),
        values.iter().map(|c| c.spread_dropped).sum(),
    ))
}

/// The object loaded as mirror mode with `--consume --cpus CPUS` loads it, its spreading
/// program ready to run (`roce_spread`, or `roce_spread_bare` on a kernel refusing XDP
/// metadata), and that program's name.
fn load_spread(object: &[u8], cpus: &[usize]) -> Result<(Ebpf, &'static str), String> {
    let mut ebpf = load(object)?;
    let cpus: Vec<u32> = cpus.iter().map(|&c| c as u32).collect();
    set_up_spread(&mut ebpf, Vantage::Mirror { consume: true }, &cpus)
        .map_err(|e| format!("spreading over CPUs {cpus:?}: {e}"))?;
    let name = roce_observer::source::live::load_spread(&mut ebpf)
        .map_err(|e| format!("loading {}: {e}", programs::SPREAD))?;
    Ok((ebpf, name))
}

/// Sends `frames` (copies of one mirror source) `count` times each through `roce_spread` on CPU
/// `rx`, and waits until every copy is accounted or dropped: the copies accounted per second
/// from the start until then, and the number dropped.
/// The senders stand for the receive queue RSS puts every copy on.
fn spread_rate(
    (ebpf, name): (&Ebpf, &'static str),
    frames: &[Vec<u8>],
    rx: usize,
    count: u32,
) -> Result<(f64, u64), String> {
    let prog: &Xdp = ebpf
        .program(name)
        .ok_or_else(|| format!("no program {name}"))?
        .try_into()
        .map_err(|e| format!("{name}: {e}"))?;
    let (frames0, dropped0) = observer_counts(ebpf)?;
    let want = u64::from(count) * frames.len() as u64;
    let t0 = Instant::now();
    send_live(prog, name, frames, &vec![rx; frames.len()], count)?;
    // The cpumap threads account what is still queued.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (f, d) = observer_counts(ebpf)?;
        let (accounted, dropped) = (f - frames0, d - dropped0);
        if accounted + dropped >= want {
            let secs = t0.elapsed().as_secs_f64();
            if accounted + dropped > want {
                return Err(format!(
                    "{name}: accounted {accounted} and dropped {dropped} of {want} copies"
                ));
            }
            return Ok((accounted as f64 / secs, dropped));
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name}: after 5 s, {accounted} accounted and {dropped} dropped of {want} copies: {} lost",
                want - accounted - dropped
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The priority the spread's cpumap threads run at.
#[derive(Clone, Copy)]
enum Threads {
    /// As the kernel makes them, and mirror mode leaves them (nice 0).
    AsMirrorMode,
    /// Nice -20.
    Nice,
    /// SCHED_FIFO priority 1.
    Fifo,
}

/// Sets the threads of the spread's cpumap (`cpumap/CPU/map:ID`, by their full names, as
/// kernels since 5.17 show them) on `cpus` to `threads`.
fn set_threads(ebpf: &Ebpf, cpus: &[usize], threads: Threads) -> Result<(), String> {
    if matches!(threads, Threads::AsMirrorMode) {
        return Ok(());
    }
    let id = match ebpf.map(maps::SPREAD_CPUS) {
        Some(aya::maps::Map::CpuMap(data)) => data
            .info()
            .map_err(|e| format!("{}: {e}", maps::SPREAD_CPUS))?
            .id(),
        _ => return Err(format!("no cpumap {}", maps::SPREAD_CPUS)),
    };
    let names: Vec<String> = cpus
        .iter()
        .map(|c| format!("cpumap/{c}/map:{id}"))
        .collect();
    let mut set = 0;
    let proc = std::fs::read_dir("/proc").map_err(|e| format!("/proc: {e}"))?;
    for entry in proc.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        if !names.iter().any(|n| n == comm.trim_end()) {
            continue;
        }
        // SAFETY: plain integers, and a valid sched_param.
        let rc = unsafe {
            match threads {
                Threads::Nice => libc::setpriority(libc::PRIO_PROCESS, pid as libc::id_t, -20),
                _ => libc::sched_setscheduler(
                    pid,
                    libc::SCHED_FIFO,
                    &libc::sched_param { sched_priority: 1 },
                ),
            }
        };
        if rc != 0 {
            return Err(format!(
                "setting the priority of {} (pid {pid}): {}",
                comm.trim_end(),
                std::io::Error::last_os_error()
            ));
        }
        set += 1;
    }
    if set != names.len() {
        return Err(format!("found {set} of the threads {names:?} in /proc"));
    }
    Ok(())
}

/// An ERSPAN III copy of a WRITE middle between the pair of hosts numbered `pair` (of 65536:
/// 198.18.x.y to 198.19.x.y).
fn pair_copy(pair: u16) -> Vec<u8> {
    let [a, b] = pair.to_be_bytes();
    let ip = Ip::v4(
        std::net::Ipv4Addr::new(198, 18, a, b),
        std::net::Ipv4Addr::new(198, 19, a, b),
    );
    erspan3(&write_middle_between(ip, 0x11))
}

/// `n` copies from host pairs that the spread over `n` CPUs sends one to each.
fn spread_copies(n: usize) -> Result<Vec<Vec<u8>>, String> {
    let mut by_slot: Vec<Option<Vec<u8>>> = vec![None; n];
    for pair in 0..=u16::MAX {
        let copy = pair_copy(pair);
        let p = observer_common::parse::parse_frame(&copy[..])
            .result
            .map_err(|e| format!("the copy of host pair {pair} does not parse: {e:?}"))?;
        let slot = (observer_common::spread_hash(&p.src_ip, &p.dst_ip) % n as u32) as usize;
        by_slot[slot].get_or_insert(copy);
        if by_slot.iter().all(Option::is_some) {
            return Ok(by_slot.into_iter().flatten().collect());
        }
    }
    Err(format!("no {n} host pairs that spread to {n} CPUs"))
}

struct Row {
    case: &'static str,
    cpus: usize,
    observer_pps: f64,
    baseline_pps: f64,
    /// Copies the spread's cpumap dropped (a CPU's queue full); counted, not lost.
    dropped: u64,
}

fn run(args: &Args) -> Result<Vec<Row>, String> {
    let object = match &args.object {
        Some(path) => std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?,
        None => roce_observer::EBPF_OBJECT.to_vec(),
    };
    let allowed =
        roce_observer::lab::allowed_cpus().map_err(|e| format!("sched_getaffinity: {e}"))?;
    let direct: Vec<Vec<u8>> = (0..2)
        .map(|i| write_middle(10 + i, 0x11 + u32::from(i)))
        .collect();
    let copies: Vec<Vec<u8>> = direct.iter().map(|f| erspan3(f)).collect();
    // A frame that is not RoCE (UDP to port 53): counted on the interface, nothing more.
    let other = synth::basic_noise()
        .into_iter()
        .find(|(_, r)| *r == observer_common::SkipReason::OtherPort)
        .map(|(bytes, _)| bytes)
        .ok_or("synth::basic_noise has no UDP frame to another port")?;
    let others = vec![other.clone(), other];
    let mut rows = Vec::new();
    for (case, frames) in [
        ("roce_existing_flow", &direct),
        ("erspan3_roce_existing_flow", &copies),
        ("udp_port_53", &others),
    ] {
        for n in [1usize, 2] {
            if n > allowed.len() {
                continue;
            }
            let (mut obs, mut base) = (Vec::new(), Vec::new());
            for _ in 0..args.runs {
                let ebpf = load(&object)?;
                // A first frame each creates the flows: the measured ones hit existing flows.
                rate(
                    &ebpf,
                    programs::OBSERVE_CONSUME,
                    &frames[..n],
                    &allowed[..n],
                    1,
                )?;
                base.push(rate(
                    &ebpf,
                    programs::BASELINE_DROP,
                    &frames[..n],
                    &allowed[..n],
                    args.frames,
                )?);
                obs.push(rate(
                    &ebpf,
                    programs::OBSERVE_CONSUME,
                    &frames[..n],
                    &allowed[..n],
                    args.frames,
                )?);
            }
            rows.push(Row {
                case,
                cpus: n,
                observer_pps: median(&obs),
                baseline_pps: median(&base),
                dropped: 0,
            });
        }
    }
    // Mirror copies of one source, all arriving on the first CPU (as RSS puts them), accounted
    // on the second alone (`--cpus` naming one other CPU) and then on both; the cpumap threads
    // as mirror mode leaves them, at nice -20, at real-time priority. The baseline: the same
    // copies counted and dropped where they arrive, on that one CPU.
    if allowed.len() < 2 {
        return Ok(rows);
    }
    let rx = allowed[0];
    for (case, threads) in [
        ("erspan3_spread", Threads::AsMirrorMode),
        ("erspan3_spread_nice", Threads::Nice),
        ("erspan3_spread_fifo", Threads::Fifo),
    ] {
        // One CPU, then every CPU allowed (the fan-out: on hosts of 4 CPUs or more its target
        // applies).
        'case: for cpus in [&allowed[1..2], &allowed[..]] {
            // A host with more CPUs than host pairs found: that row is left out, said.
            let copies = match spread_copies(cpus.len().max(2)) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("bench-rate: skipping {case} on {} CPUs: {e}", cpus.len());
                    continue;
                }
            };
            // `--frames` copies in all, whatever the number of host pairs.
            let per_copy = (args.frames / copies.len() as u32).max(1);
            let (mut obs, mut base, mut dropped) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..args.runs {
                let (ebpf, spreading) = load_spread(&object, cpus)?;
                if spreading != programs::SPREAD {
                    eprintln!(
                        "bench-rate: {case}: {spreading} (this kernel refuses {} the metadata helper): no arrival stamps, no latency samples",
                        programs::SPREAD
                    );
                }
                // Without the privilege or the kernel threads in sight, this case only: the
                // rows measured stand.
                if let Err(e) = set_threads(&ebpf, cpus, threads) {
                    eprintln!("bench-rate: skipping {case}: {e}");
                    break 'case;
                }
                // A first copy each creates the flows.
                spread_rate((&ebpf, spreading), &copies, rx, 1)?;
                base.push(rate(
                    &ebpf,
                    programs::BASELINE_DROP,
                    &copies,
                    &vec![rx; copies.len()],
                    per_copy,
                )?);
                let (pps, d) = spread_rate((&ebpf, spreading), &copies, rx, per_copy)?;
                obs.push(pps);
                dropped.push(d);
            }
            rows.push(Row {
                case,
                cpus: cpus.len(),
                observer_pps: median(&obs),
                baseline_pps: median(&base),
                // The drops of the run whose rate is nearest the median, not a median of
                // their own from another run.
                dropped: {
                    let m = median(&obs);
                    let nearest = (0..obs.len())
                        .min_by(|&a, &b| (obs[a] - m).abs().total_cmp(&(obs[b] - m).abs()))
                        .unwrap_or(0);
                    dropped.get(nearest).copied().unwrap_or(0)
                },
            });
        }
    }
    Ok(rows)
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    integration_tests::bench_main("bench-rate", "BPF_PROG_TEST_RUN loads BPF programs", || {
        report(&args, &run(&args)?);
        Ok(())
    })
}

/// The share of the count-and-drop baseline each case sustains on one CPU, at least.
const SHARE_TARGETS: [(&str, f64); 3] = [
    ("roce_existing_flow", 0.50),
    ("erspan3_roce_existing_flow", 0.45),
    ("udp_port_53", 0.80),
];
/// Mirror fan-out: the copies accounted over N CPUs, at least this times N times one CPU's
/// rate, where the host has `FAN_OUT_MIN_CPUS` or more.
const FAN_OUT_TARGET: f64 = 0.9;
const FAN_OUT_MIN_CPUS: usize = 4;

/// One target's verdict: what it judges, the figure, the target, met (none: not measurable).
struct Verdict {
    what: String,
    figure: String,
    target: String,
    met: Option<bool>,
}

/// A case's rate on the most CPUs measured over its rate on one: (those CPUs, the ratio).
fn scaling(rows: &[Row], case: &str) -> Option<(usize, f64)> {
    let one = rows.iter().find(|r| r.case == case && r.cpus == 1)?;
    let most = rows
        .iter()
        .filter(|r| r.case == case && r.cpus > 1)
        .max_by_key(|r| r.cpus)?;
    Some((most.cpus, most.observer_pps / one.observer_pps))
}

fn verdicts(rows: &[Row], cpus: usize) -> Vec<Verdict> {
    let mut out = Vec::new();
    for (case, min) in SHARE_TARGETS {
        let r = rows.iter().find(|r| r.case == case && r.cpus == 1);
        let share = r.map(|r| r.observer_pps / r.baseline_pps);
        out.push(Verdict {
            what: format!("{case}: the observer as `run` runs it, beside count-and-drop, 1 CPU"),
            figure: share.map_or("not measured".into(), |s| format!("{:.1}%", 100.0 * s)),
            target: format!("at least {:.0}%", 100.0 * min),
            met: share.map(|s| s >= min),
        });
    }
    let (figure, met) = match scaling(rows, "erspan3_spread") {
        Some((_, x)) if !x.is_finite() => ("one CPU accounted nothing".into(), Some(false)),
        Some((n, x)) if cpus >= FAN_OUT_MIN_CPUS => (
            format!("{x:.2}x over {n} CPUs"),
            Some(x >= FAN_OUT_TARGET * n as f64),
        ),
        Some((n, x)) => (
            format!("{x:.2}x over {n} CPUs: not measurable on fewer than {FAN_OUT_MIN_CPUS} CPUs"),
            None,
        ),
        None => (format!("not measurable ({cpus} CPUs)"), None),
    };
    out.push(Verdict {
        what: "erspan3_spread: mirror copies fanned out over every CPU, beside one CPU".into(),
        figure,
        target: format!("at least {FAN_OUT_TARGET} x N times one CPU (N >= {FAN_OUT_MIN_CPUS})"),
        met,
    });
    out
}

/// The cases, in the order they are measured.
const CASES: [&str; 6] = [
    "roce_existing_flow",
    "erspan3_roce_existing_flow",
    "udp_port_53",
    "erspan3_spread",
    "erspan3_spread_nice",
    "erspan3_spread_fifo",
];

/// Prints the rows (and the scaling from one CPU to all), and the targets.
fn report(args: &Args, rows: &[Row]) {
    // Scaling: the rate on the most CPUs over the rate on one, per case.
    let scaling = |case: &str| scaling(rows, case);
    let cpus = roce_observer::lab::allowed_cpus().map_or(1, |c| c.len());
    let verdicts = verdicts(rows, cpus);
    if args.json {
        let env = integration_tests::environment_json(&integration_tests::bench_environment());
        let json = serde_json::json!({
            "environment": env,
            "frames_per_cpu": args.frames,
            "runs": args.runs,
            "statistic": "median",
            "results": rows.iter().map(|r| serde_json::json!({
                "case": r.case,
                "cpus": r.cpus,
                "observer_mpps": r.observer_pps / 1e6,
                "baseline_mpps": r.baseline_pps / 1e6,
                "observer_mpps_per_cpu": r.observer_pps / 1e6 / r.cpus as f64,
                "share_of_baseline": r.observer_pps / r.baseline_pps,
                // `rate` and `spread_rate` fail the run unless the observer counted every
                // frame, or the cpumap counted it dropped.
                "lost": 0,
                "dropped": r.dropped,
            })).collect::<Vec<_>>(),
            "scaling_1_to_most_cpus": CASES
                .iter()
                .map(|c| {
                    let v = scaling(c).map(|(n, x)| serde_json::json!({"cpus": n, "ratio": x}));
                    (c.to_string(), v.unwrap_or(serde_json::Value::Null))
                })
                .collect::<serde_json::Map<_, _>>(),
            "targets": verdicts.iter().map(|v| serde_json::json!({
                "what": v.what,
                "figure": v.figure,
                "target": v.target,
                "pass": v.met,
            })).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json).expect("serializable")
        );
    } else {
        println!(
            "XDP live frames (BPF_PROG_TEST_RUN), {} frames per CPU, median of {} runs; {} (consuming, interface counters) beside {}",
            args.frames,
            args.runs,
            programs::OBSERVE_CONSUME,
            programs::BASELINE_DROP
        );
        println!(
            "{}",
            integration_tests::environment_line(&integration_tests::bench_environment())
        );
        println!(
            "{:<28} {:>4} {:>13} {:>13} {:>13} {:>9} {:>5} {:>8}",
            "case", "cpus", "observer Mpps", "per CPU", "baseline Mpps", "share", "lost", "dropped"
        );
        for r in rows {
            println!(
                "{:<28} {:>4} {:>13.2} {:>13.2} {:>13.2} {:>8.1}% {:>5} {:>8}",
                r.case,
                r.cpus,
                r.observer_pps / 1e6,
                r.observer_pps / 1e6 / r.cpus as f64,
                r.baseline_pps / 1e6,
                100.0 * r.observer_pps / r.baseline_pps,
                0,
                r.dropped
            );
        }
        for case in CASES {
            if let Some((n, s)) = scaling(case) {
                println!("{case}: {n} CPUs sustain {s:.2}x the rate of 1");
            }
        }
        for v in &verdicts {
            let mark = match v.met {
                Some(true) => "PASS",
                Some(false) => "MISS",
                None => "----",
            };
            println!("{mark}: {}: {} (target: {})", v.what, v.figure, v.target);
        }
    }
}
