//! `cargo xtask bench`: ns/packet of the observer under BPF_PROG_TEST_RUN, beside a baseline
//! program that only counts frames, measured in the same run.
//!
//! Programs: `roce_observe` as `run` attaches it (interface counters, no microburst slots) and
//! as `diagnose` does (slots on), and the benchmark-only flow-table variants
//! (`roce_observe_uncached`, `roce_observe_shared`). Each figure is also a ratio to the
//! baseline; none is a target (the baseline's few ns are mostly the test harness's, and differ
//! several times between machines of one class: the targets are `bench-rate`'s). Cases: a RoCE RC WRITE middle (1024 B payload) on an existing flow; a WRITE
//! only with AckReq and an ACK back (the passive latency's request and answer paths: a lookup
//! in its table each); the first packet of a new flow; one flow's WRITE middles in PSN order and
//! its WRITE onlys in PSN order (each a new message: the message table's path), once each; a CNP; non-RoCE UDP (port 53); a non-IP frame (ARP); the existing-flow
//! WRITE middle as an ERSPAN III mirror copy (platform subheader); an 802.1Qbb PFC frame.
//!
//! Repeated cases run one frame `--repeat` times per test run, timed by the thread's CPU clock
//! over the run (the kernel's own average is in whole nanoseconds);
//! the new-flow case runs `--new-flows` distinct-flow frames once each (a repeated frame is new
//! only once) and averages the reported durations, its baseline measured the same way. Every
//! figure is the median of `--runs` runs; each run loads the object afresh (empty flow tables).

use integration_tests::median;
use std::{process::ExitCode, time::Duration};

use aya::{
    Ebpf,
    maps::{HashMap, PerCpuHashMap},
    programs::{TestRun, TestRunOptions, Xdp},
};
use observer_common::{
    DEFAULT_MAX_FLOWS, FlowKey, FlowStats, OpClass, SkipReason, maps, parse,
    parse::{MirrorKind, parse_frame},
    programs, wire,
};
use roce_observer::EBPF_OBJECT;

const XDP_PASS: u32 = 2;
/// RC RDMA WRITE middle.
const WRITE_MIDDLE: u8 = wire::TRANSPORT_RC | wire::op::WRITE_MIDDLE;
const WRITE_ONLY: u8 = wire::TRANSPORT_RC | wire::op::WRITE_ONLY;
/// ns/packet through BPF_PROG_TEST_RUN, beside the frame-counting baseline (needs root).
#[derive(clap::Parser)]
#[command(name = "bench")]
struct Args {
    /// Test-run repeat count of the repeated cases (at least 1000000).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u32).range(1_000_000..))]
    repeat: u32,
    /// Measurements per figure; the median is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Distinct-flow frames of the new-flow case, one run each (they must fit the 24-bit QP).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..0x00FF_FFEF))]
    new_flows: u32,
    /// Print the figures as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Load the kernel object from this file instead of the one built in (e.g. another
    /// revision's, to compare two objects back to back on the same machine).
    #[arg(long, value_name = "PATH")]
    object: Option<std::path::PathBuf>,
    /// Measure only these cases (comma-separated names; default: all).
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
}

/// Frames of the cases, from the shared generator (`roce_observer::source::synth`).
mod frames {
    use std::net::Ipv4Addr;

    use observer_common::{SkipReason, wire};
    use roce_observer::source::synth::{self, Encap, Ip, RoceFrame};

    fn ip() -> Ip {
        Ip::v4(Ipv4Addr::new(198, 18, 10, 1), Ipv4Addr::new(198, 18, 10, 2))
    }

    /// An RC WRITE middle of one PMTU-sized (1024 B) payload to `dest_qp`.
    pub fn write_middle(dest_qp: u32, psn: u32) -> Vec<u8> {
        let mut f = RoceFrame::new(ip(), super::WRITE_MIDDLE, dest_qp);
        f.bth.psn = psn;
        f.payload_len = 1024;
        f.to_bytes()
    }

    /// An RC WRITE only of 1024 B with AckReq to `dest_qp`: a request the latency analysis
    /// times (repeated, a copy of itself: the Karn path, a lookup in the latency table).
    pub fn write_only_ackreq(dest_qp: u32, psn: u32) -> Vec<u8> {
        let mut f = RoceFrame::new(ip(), super::WRITE_ONLY, dest_qp);
        f.bth.psn = psn;
        f.bth.ack_req = true;
        f.ext.dma_len = 1024;
        f.payload_len = 1024;
        f.to_bytes()
    }

    /// An RC WRITE only of 1024 B without AckReq to `dest_qp`: a message, counted when its PSN
    /// is new (a lookup in the message table).
    pub fn write_only(dest_qp: u32, psn: u32) -> Vec<u8> {
        let mut f = RoceFrame::new(ip(), super::WRITE_ONLY, dest_qp);
        f.bth.psn = psn;
        f.ext.dma_len = 1024;
        f.payload_len = 1024;
        f.to_bytes()
    }

    /// The ACK of that request, back to the requester's QP `dest_qp`: an answer the latency
    /// analysis looks up (the sampling path).
    pub fn ack(dest_qp: u32, psn: u32) -> Vec<u8> {
        let mut f = RoceFrame::new(
            ip().reversed(),
            wire::TRANSPORT_RC | wire::op::ACKNOWLEDGE,
            dest_qp,
        );
        f.bth.psn = psn;
        f.ext.syndrome = synth::SYNDROME_ACK;
        f.to_bytes()
    }

    /// A CNP to `dest_qp` as a notification point sends it (BECN, DSCP 48, Not-ECT).
    pub fn cnp(dest_qp: u32) -> Vec<u8> {
        let mut f = RoceFrame::new(ip().reversed(), wire::OPCODE_CNP, dest_qp);
        f.bth.becn = true;
        f.dscp = synth::CNP_DSCP;
        f.ecn = synth::NOT_ECT;
        f.to_bytes()
    }

    /// `inner` as a switch's ERSPAN III copy (session 7, not truncated, platform subheader).
    pub fn erspan3(inner: &[u8]) -> Vec<u8> {
        synth::encapsulate(
            inner,
            Encap::ErspanIII {
                session: 7,
                truncated: false,
                platform: true,
            },
        )
    }

    /// An 802.1Qbb PFC frame pausing priority 3 for the longest time (quanta 0xFFFF), as a
    /// congested switch port sends it: to 01:80:C2:00:00:01, MAC control EtherType 0x8808,
    /// opcode 0x0101, class-enable vector 0x0008, eight 16-bit quanta, zero-padded to 60 bytes.
    pub fn pfc_priority3() -> Vec<u8> {
        let mut f = Vec::with_capacity(PFC_FRAME_LEN);
        f.extend_from_slice(&PFC_DST_MAC);
        f.extend_from_slice(&synth::host_mac(0x0A01));
        f.extend_from_slice(&wire::ETHERTYPE_MAC_CONTROL.to_be_bytes());
        f.extend_from_slice(&wire::MAC_CONTROL_PFC.to_be_bytes());
        f.extend_from_slice(&(1u16 << PFC_PRIORITY).to_be_bytes());
        for priority in 0..wire::PFC_PRIORITIES {
            let quanta: u16 = if priority == PFC_PRIORITY { 0xFFFF } else { 0 };
            f.extend_from_slice(&quanta.to_be_bytes());
        }
        f.resize(PFC_FRAME_LEN, 0);
        f
    }

    pub const PFC_DST_MAC: [u8; 6] = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x01];
    /// The paused priority.
    pub const PFC_PRIORITY: usize = 3;
    /// The minimum Ethernet frame without its FCS.
    pub const PFC_FRAME_LEN: usize = 60;

    /// The generator's skip frame for `reason` (ARP for NotIp, IPv4 UDP to port 53 for
    /// OtherPort).
    pub fn noise(reason: SkipReason) -> Vec<u8> {
        synth::basic_noise()
            .into_iter()
            .find(|(_, r)| *r == reason)
            .map(|(bytes, _)| bytes)
            .unwrap_or_else(|| panic!("synth::basic_noise has no {reason:?} frame"))
    }
}

/// One case's frame(s).
struct Case {
    name: &'static str,
    /// Repeated cases: one frame, `repeat` times. New-flow case: many frames, once each.
    frames: Vec<Vec<u8>>,
    repeated: bool,
}

fn cases(new_flows: u32) -> Vec<Case> {
    let data = frames::write_middle(0x000011, 1000);
    let new: Vec<Vec<u8>> = (0..new_flows)
        .map(|i| frames::write_middle(0x000100 + i, 0))
        .collect();
    let cnp = frames::cnp(0x000022);
    let erspan3 = frames::erspan3(&data);
    vec![
        Case {
            name: "roce_existing_flow",
            frames: vec![data],
            repeated: true,
        },
        // The latency analysis's paths: a request with AckReq, and an ACK in the reverse
        // direction (both look up the latency table).
        Case {
            name: "roce_ackreq_request",
            frames: vec![frames::write_only_ackreq(0x000011, 2000)],
            repeated: true,
        },
        Case {
            name: "roce_ack",
            frames: vec![frames::ack(0x000033, 2000)],
            repeated: true,
        },
        Case {
            name: "roce_new_flow",
            frames: new,
            repeated: false,
        },
        // One flow's packets in PSN order, each once (a repeated frame is a copy): WRITE middles
        // (no message boundary), then WRITE onlys (each a new message: the message table's
        // lookup and atomic adds). Their difference is the messages' cost.
        Case {
            name: "roce_in_order",
            frames: (0..new_flows)
                .map(|i| frames::write_middle(0x000044, i))
                .collect(),
            repeated: false,
        },
        Case {
            name: "roce_message",
            frames: (0..new_flows)
                .map(|i| frames::write_only(0x000055, i))
                .collect(),
            repeated: false,
        },
        Case {
            name: "cnp",
            frames: vec![cnp],
            repeated: true,
        },
        Case {
            name: "udp_port_53",
            frames: vec![frames::noise(SkipReason::OtherPort)],
            repeated: true,
        },
        Case {
            name: "arp",
            frames: vec![frames::noise(SkipReason::NotIp)],
            repeated: true,
        },
        // The existing-flow frame as a mirror copy: outer Ethernet + IPv4 + GRE + ERSPAN III
        // (12 bytes) + platform subheader (8 bytes) in front of the same inner frame.
        Case {
            name: "erspan3_roce_existing_flow",
            frames: vec![erspan3],
            repeated: true,
        },
        // Measures the MAC-control path: the cost of a PFC frame, which a switch sends
        // hop by hop and only a mirror that copies MAC control frames delivers.
        Case {
            name: "pfc_frame",
            frames: vec![frames::pfc_priority3()],
            repeated: true,
        },
    ]
}

/// Each case's frames parse as the case says (with the same parser the kernel runs).
fn check_frames(cases: &[Case]) -> Result<(), String> {
    for c in cases {
        for f in &c.frames {
            let r = parse(f.as_slice());
            let ok = match c.name {
                "roce_existing_flow" | "roce_new_flow" | "roce_in_order" => r
                    .as_ref()
                    .is_ok_and(|p| p.bth.opcode == WRITE_MIDDLE && p.op_class() == OpClass::Write),
                "roce_ackreq_request" => r
                    .as_ref()
                    .is_ok_and(|p| p.bth.opcode == WRITE_ONLY && p.bth.ack_req && p.has_reth),
                "roce_ack" => r.as_ref().is_ok_and(|p| p.op_class() == OpClass::Ack),
                "roce_message" => r
                    .as_ref()
                    .is_ok_and(|p| p.bth.opcode == WRITE_ONLY && !p.bth.ack_req && p.has_reth),
                "cnp" => r.as_ref().is_ok_and(|p| p.bth.opcode == wire::OPCODE_CNP),
                "udp_port_53" => {
                    r.as_ref().err() == Some(&SkipReason::OtherPort) && udp_dst_port(f) == Some(53)
                }
                "arp" => {
                    r.as_ref().err() == Some(&SkipReason::NotIp)
                        && f[12..14] == wire::ETHERTYPE_ARP.to_be_bytes()
                }
                "erspan3_roce_existing_flow" => r.as_ref().is_ok_and(|p| {
                    p.bth.opcode == WRITE_MIDDLE
                        && p.mirror.is_some_and(|m| {
                            m.kind == MirrorKind::ErspanIII && m.session == Some(7) && !m.truncated
                        })
                }),
                // The hand-built frame reads back as the PFC frame it means to be.
                "pfc_frame" => {
                    let pause = parse_frame(f.as_slice()).pause(f.as_slice());
                    let mut quanta = [0u16; wire::PFC_PRIORITIES];
                    quanta[frames::PFC_PRIORITY] = 0xFFFF;
                    r.as_ref().err() == Some(&SkipReason::MacControl)
                        && f.len() == frames::PFC_FRAME_LEN
                        && f[..6] == frames::PFC_DST_MAC
                        && pause.is_some_and(|p| {
                            p.is_pfc()
                                && p.class_enable == 1 << frames::PFC_PRIORITY
                                && p.quanta == quanta
                        })
                }
                _ => false,
            };
            if !ok {
                return Err(format!("frame of case {} parses as {r:?}", c.name));
            }
        }
    }
    Ok(())
}

/// The UDP destination port of an untagged IPv4 frame.
fn udp_dst_port(f: &[u8]) -> Option<u16> {
    if f.get(12..14)? != wire::ETHERTYPE_IPV4.to_be_bytes() || f.get(23)? != &wire::IPPROTO_UDP {
        return None;
    }
    let udp = wire::ETH_HEADER_LEN + usize::from(f[14] & 0x0F) * 4;
    Some(u16::from_be_bytes(
        f.get(udp + 2..udp + 4)?.try_into().ok()?,
    ))
}

fn load(object: &[u8], cap: u32, slots: bool) -> Result<Ebpf, String> {
    let mut ebpf = roce_observer::source::live::load_object(
        object,
        &[(maps::FLOWS, cap), (maps::FLOWS_SHARED, cap)],
        1,
        roce_observer::source::live::RUN_TICK_NS,
    )
    .map_err(|e| format!("loading the kernel object: {e}"))?;
    for name in [
        programs::OBSERVE,
        programs::OBSERVE_UNCACHED,
        programs::OBSERVE_SHARED,
        programs::BASELINE,
    ] {
        let prog: &mut Xdp = ebpf
            .program_mut(name)
            .ok_or_else(|| format!("program {name} missing from the object"))?
            .try_into()
            .map_err(|e| format!("program {name}: {e}"))?;
        prog.load().map_err(|e| format!("loading {name}: {e}"))?;
    }
    // The loopback device is observed (BPF_PROG_TEST_RUN runs XDP there), so each measured
    // frame pays its interface counters and, with slots on as `diagnose` runs, its slot's add
    // (the clock then ticks at the slot width).
    let lo = roce_observer::source::live::if_index("lo").map_err(|e| e.to_string())?;
    roce_observer::source::live::observe_bursts(
        &mut ebpf,
        &[("lo", lo)],
        if slots {
            roce_observer::analysis::series::DEFAULT_SLOT_NS
        } else {
            0
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(ebpf)
}

fn prog<'a>(ebpf: &'a Ebpf, name: &str) -> &'a Xdp {
    ebpf.program(name)
        .expect("loaded above")
        .try_into()
        .expect("an XDP program")
}

/// This thread's CPU time (CLOCK_THREAD_CPUTIME_ID): what a test run spent on this CPU, in
/// fractions of a nanosecond per packet over a repeat (the kernel reports whole nanoseconds, a
/// seventh of a baseline of 6-7 ns), and none of the time the thread was off the CPU.
fn thread_cpu_time() -> Result<Duration, String> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Err(format!(
            "clock_gettime(CLOCK_THREAD_CPUTIME_ID): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// One test run; checks the verdict and that the frame comes back unchanged. The run's time:
/// the kernel's whole-nanosecond average per repeat for a single run, the thread's CPU time
/// over the call divided by the repeat otherwise (its own cost, a few microseconds, is lost in
/// a million repeats).
fn test_run(p: &Xdp, name: &str, frame: &[u8], out: &mut [u8], repeat: u32) -> Result<f64, String> {
    out.fill(0);
    let started = thread_cpu_time()?;
    let r = p
        .test_run(TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out[..]),
            repeat,
            ..Default::default()
        })
        .map_err(|e| format!("{name}: BPF_PROG_TEST_RUN: {e}"))?;
    if r.return_value != XDP_PASS {
        return Err(format!(
            "{name}: verdict {} (expected XDP_PASS)",
            r.return_value
        ));
    }
    if r.data_size_out as usize != frame.len() || &out[..frame.len()] != frame {
        return Err(format!("{name}: the frame came back changed"));
    }
    if repeat == 1 {
        return Ok(r.duration.as_nanos() as f64);
    }
    Ok((thread_cpu_time()? - started).as_nanos() as f64 / f64::from(repeat))
}

/// ns/packet of one case under one program.
fn measure(p: &Xdp, name: &str, case: &Case, repeat: u32) -> Result<f64, String> {
    let mut out = vec![0u8; case.frames.iter().map(Vec::len).max().unwrap_or(0)];
    if case.repeated {
        let frame = &case.frames[0];
        // The first packet creates the flow: the measured ones hit an existing flow.
        test_run(p, name, frame, &mut out, 1)?;
        test_run(p, name, frame, &mut out, repeat)
    } else {
        let mut total = 0.0;
        for frame in &case.frames {
            total += test_run(p, name, frame, &mut out, 1)?;
        }
        Ok(total / case.frames.len() as f64)
    }
}

/// Flows a program holds (the new-flow case must add exactly one per frame). The cached
/// observer's flows are in its table and its cache: count them as the loader reads them.
fn flow_count(ebpf: &Ebpf, program: &str) -> Result<usize, String> {
    let err = |e: aya::maps::MapError| format!("reading flow table: {e}");
    Ok(match program {
        programs::OBSERVE => roce_observer::source::live::read_maps(ebpf, 0)
            .map_err(|e| e.to_string())?
            .flows
            .len(),
        programs::OBSERVE_UNCACHED => {
            let m: PerCpuHashMap<_, FlowKey, FlowStats> =
                PerCpuHashMap::try_from(ebpf.map(maps::FLOWS).ok_or("no FLOWS map")?)
                    .map_err(err)?;
            m.keys().filter(Result::is_ok).count()
        }
        _ => {
            let m: HashMap<_, FlowKey, FlowStats> =
                HashMap::try_from(ebpf.map(maps::FLOWS_SHARED).ok_or("no FLOWS_SHARED map")?)
                    .map_err(err)?;
            m.keys().filter(Result::is_ok).count()
        }
    })
}

/// The measured programs: `roce_observe` as `run` attaches it (interface counters, no
/// microburst slots) and as `diagnose` does (slots on), and the flow-table variants (no slots).
const MEASURED: [(&str, &str, bool); 4] = [
    ("run", programs::OBSERVE, false),
    ("diagnose", programs::OBSERVE, true),
    ("run", programs::OBSERVE_UNCACHED, false),
    ("run", programs::OBSERVE_SHARED, false),
];

/// samples[case][0] = baseline, samples[case][1 + i] = MEASURED[i]; one value per run.
fn run_all(args: &Args, object: &[u8], cases: &[Case]) -> Result<Vec<[Vec<f64>; 5]>, String> {
    let cap = DEFAULT_MAX_FLOWS.max(args.new_flows + args.new_flows / 2 + 1024);
    let mut samples: Vec<[Vec<f64>; 5]> = cases.iter().map(|_| Default::default()).collect();
    for run in 0..args.runs {
        eprintln!("bench: run {}/{}", run + 1, args.runs);
        let base_obj = load(object, cap, false)?;
        for (ci, case) in cases.iter().enumerate() {
            let base = measure(
                prog(&base_obj, programs::BASELINE),
                programs::BASELINE,
                case,
                args.repeat,
            )?;
            samples[ci][0].push(base);
        }
        // A fresh object per program and settings: FLOWS is shared by the cached and the
        // uncached program, and the new-flow frames must be new to each.
        for (mi, (_, name, slots)) in MEASURED.iter().enumerate() {
            let ebpf = load(object, cap, *slots)?;
            for (ci, case) in cases.iter().enumerate() {
                let before = if case.repeated {
                    0
                } else {
                    flow_count(&ebpf, name)?
                };
                samples[ci][1 + mi].push(measure(prog(&ebpf, name), name, case, args.repeat)?);
                if !case.repeated {
                    // The new-flow frames add one flow each; the in-order cases one in all.
                    let added = flow_count(&ebpf, name)? - before;
                    let want = if case.name == "roce_new_flow" {
                        case.frames.len()
                    } else {
                        1
                    };
                    if added != want {
                        return Err(format!(
                            "{name}: {added} flows added by the {} frames of {} (expected {want})",
                            case.frames.len(),
                            case.name
                        ));
                    }
                }
            }
        }
    }
    Ok(samples)
}

/// What the figures depend on besides the code: kernel, BPF JIT, BPF run-time statistics.
fn environment() -> [(&'static str, String); 4] {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    };
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    [
        ("kernel", read("/proc/sys/kernel/osrelease")),
        ("bpf_jit_enable", read("/proc/sys/net/core/bpf_jit_enable")),
        (
            "bpf_stats_enabled",
            read("/proc/sys/kernel/bpf_stats_enabled"),
        ),
        ("cpus", cpus.to_string()),
    ]
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "bench: needs root (BPF_PROG_TEST_RUN loads BPF programs); run as root: cargo xtask bench"
        );
        return ExitCode::FAILURE;
    }
    let mut cases = cases(args.new_flows);
    if !args.cases.is_empty() {
        cases.retain(|c| args.cases.iter().any(|n| n == c.name));
        if !cases.iter().any(|c| c.name == "roce_existing_flow") {
            eprintln!("bench: --cases must include roce_existing_flow (the target's case)");
            return ExitCode::FAILURE;
        }
    }
    let object = match &args.object {
        Some(path) => match std::fs::read(path) {
            Ok(o) => o,
            Err(e) => {
                eprintln!("bench: {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => EBPF_OBJECT.to_vec(),
    };
    if let Err(e) = check_frames(&cases) {
        eprintln!("bench: {e}");
        return ExitCode::FAILURE;
    }
    let samples = match run_all(&args, &object, &cases) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::FAILURE;
        }
    };

    struct Row {
        case: &'static str,
        settings: &'static str,
        program: &'static str,
        repeat: u32,
        ns: f64,
        baseline_ns: f64,
        ratio: f64,
        runs_ns: Vec<f64>,
        runs_baseline_ns: Vec<f64>,
    }
    let mut rows = Vec::new();
    for (case, s) in cases.iter().zip(&samples) {
        let baseline_ns = median(&s[0]);
        for (mi, (settings, program, _)) in MEASURED.iter().enumerate() {
            let ns = median(&s[1 + mi]);
            rows.push(Row {
                case: case.name,
                settings,
                program,
                repeat: if case.repeated { args.repeat } else { 1 },
                ns,
                baseline_ns,
                ratio: ns / baseline_ns,
                runs_ns: s[1 + mi].clone(),
                runs_baseline_ns: s[0].clone(),
            });
        }
    }
    if args.json {
        let env = integration_tests::environment_json(&environment());
        let json = serde_json::json!({
            "environment": env,
            "repeat": args.repeat,
            "runs": args.runs,
            "new_flows": args.new_flows,
            "statistic": "median",
            "results": rows.iter().map(|r| serde_json::json!({
                "case": r.case,
                "settings": r.settings,
                "program": r.program,
                "repeat": r.repeat,
                "ns_per_packet": r.ns,
                "baseline_ns": r.baseline_ns,
                "ratio": r.ratio,
                "runs_ns": r.runs_ns,
                "runs_baseline_ns": r.runs_baseline_ns,
            })).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&json).expect("serializable")
        );
    } else {
        println!(
            "BPF_PROG_TEST_RUN, median of {} runs; repeated cases: repeat {}; new flow: {} flows x repeat 1",
            args.runs, args.repeat, args.new_flows
        );
        println!("{}", integration_tests::environment_line(&environment()));
        println!(
            "{:<26} {:<9} {:<21} {:>10} {:>12} {:>7}",
            "case", "settings", "program", "ns/packet", "baseline ns", "ratio"
        );
        for r in &rows {
            println!(
                "{:<26} {:<9} {:<21} {:>10.2} {:>12.2} {:>6.2}x",
                r.case, r.settings, r.program, r.ns, r.baseline_ns, r.ratio
            );
        }
    }
    ExitCode::SUCCESS
}
