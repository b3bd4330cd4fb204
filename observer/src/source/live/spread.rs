//! Mirror mode spread over CPUs: RSS hashes a mirror copy's outer header, so every copy of one
//! mirror source lands on one CPU. `roce_spread` sends each frame on through a cpumap to the CPU
//! its copied packet's hosts hash to, where the observer (a cpumap program) accounts it.

use std::{fs, path::Path};

use aya::{
    Ebpf,
    maps::{Array, CpuMap, Map, PerCpuArray},
    programs::{RawTracePoint, Xdp},
};
use observer_common::{Counters, MAX_SPREAD_CPUS, SPREAD_MAP_ID, SPREAD_UNTIMED, maps, programs};

use super::{LiveError, Vantage, error::load_error};

/// Which CPUs account a mirror port's copies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Spread {
    /// The CPUs that serve the interfaces' receive queues (their devices' interrupts; every
    /// online CPU for a device without any, as veth); none when that is one CPU.
    #[default]
    QueueCpus,
    /// These CPUs (one alone moves the accounting off the receiving CPU).
    Cpus(Vec<u32>),
    /// None: the observer runs where frames arrive.
    Off,
}

impl Spread {
    /// `--cpus` and the `cpus` key: a CPU list (`0-3,8`), `queues` or `off`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "queues" => Ok(Self::QueueCpus),
            "off" => Ok(Self::Off),
            list => parse_cpu_list(list).map(Self::Cpus),
        }
    }
}

/// The tracepoint of a cpumap's bulk flush, which says how many frames found their CPU's queue
/// full.
const DROP_TRACEPOINT: &str = "xdp_cpumap_enqueue";

/// Frames a CPU's queue holds before the cpumap drops (the kernel samples' default).
const QUEUE_FRAMES: u32 = 2048;

/// A CPU list as the kernel writes them (`0-3,8,10-11`); sorted, without repeats.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let part = part.trim();
        let number = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{s}' in the CPU list '{text}' is not a CPU number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (number(a)?, number(b)?);
                if a > b {
                    return Err(format!("CPU range '{part}' runs backwards"));
                }
                if b >= MAX_SPREAD_CPUS {
                    return Err(format!(
                        "CPU {b} in '{part}': at most {MAX_SPREAD_CPUS} CPUs"
                    ));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(number(part)?),
        }
        if cpus.len() > MAX_SPREAD_CPUS as usize {
            return Err(format!(
                "the CPU list '{text}' names more than {MAX_SPREAD_CPUS} CPUs"
            ));
        }
    }
    if cpus.is_empty() {
        return Err(format!("the CPU list '{text}' names no CPU"));
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The online CPUs.
pub fn online_cpus() -> Result<Vec<u32>, LiveError> {
    let path = "/sys/devices/system/cpu/online";
    let text = fs::read_to_string(path)
        .map_err(|e| LiveError::Spread(format!("cannot read {path}: {e}")))?;
    parse_cpu_list(&text).map_err(|e| LiveError::Spread(format!("{path}: {e}")))
}

/// The CPUs the interrupts of `iface`'s device are delivered to (its queues'); none for a
/// device without interrupts of its own.
fn queue_cpus(iface: &str) -> Vec<u32> {
    let irqs = Path::new("/sys/class/net")
        .join(iface)
        .join("device/msi_irqs");
    let Ok(entries) = fs::read_dir(irqs) else {
        return Vec::new();
    };
    let mut cpus = Vec::new();
    for irq in entries.flatten() {
        let dir = Path::new("/proc/irq").join(irq.file_name());
        let list = fs::read_to_string(dir.join("effective_affinity_list"))
            .or_else(|_| fs::read_to_string(dir.join("smp_affinity_list")));
        if let Ok(list) = list
            && let Ok(mut c) = parse_cpu_list(&list)
        {
            cpus.append(&mut c);
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// The CPUs to spread `interfaces`' copies over (none: no spreading): online, checked.
pub(super) fn resolve(spread: &Spread, interfaces: &[String]) -> Result<Vec<u32>, LiveError> {
    if *spread == Spread::Off {
        return Ok(Vec::new());
    }
    let online = online_cpus()?;
    match spread {
        Spread::Off => Ok(Vec::new()),
        Spread::Cpus(cpus) => {
            for cpu in cpus {
                if !online.contains(cpu) {
                    return Err(LiveError::Spread(format!(
                        "CPU {cpu} is not online (online: {})",
                        cpu_list(&online)
                    )));
                }
            }
            if cpus.len() > MAX_SPREAD_CPUS as usize {
                return Err(LiveError::Spread(format!(
                    "at most {MAX_SPREAD_CPUS} CPUs, not {}",
                    cpus.len()
                )));
            }
            Ok(cpus.clone())
        }
        Spread::QueueCpus => {
            let mut cpus: Vec<u32> = interfaces.iter().flat_map(|i| queue_cpus(i)).collect();
            cpus.retain(|c| online.contains(c));
            cpus.sort_unstable();
            cpus.dedup();
            if cpus.is_empty() {
                cpus = online;
            }
            cpus.truncate(MAX_SPREAD_CPUS as usize);
            Ok(if cpus.len() > 1 { cpus } else { Vec::new() })
        }
    }
}

/// A CPU list in the kernel's form (`0-3,8`).
pub fn cpu_list(cpus: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Loads the observer as the cpumap program `vantage` asks for (the loader attaches
/// `roce_spread` to the interfaces), and points
/// the cpumap entry of each of `cpus` at that program and `SPREAD` at the CPUs. (Public for
/// the benchmarks, which run `roce_spread` on frames they make.)
pub fn set_up(ebpf: &mut Ebpf, vantage: Vantage, cpus: &[u32]) -> Result<(), LiveError> {
    let observer = match vantage {
        Vantage::Mirror { consume: true } => programs::OBSERVE_CONSUME_CPUMAP,
        _ => programs::OBSERVE_CPUMAP,
    };
    let prog: &mut Xdp = ebpf
        .program_mut(observer)
        .ok_or(LiveError::MissingProgram(observer))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| load_error(&e))?;
    prog.load().map_err(|e| load_error(&e))?;
    let fail = |what: &str, e: &dyn std::fmt::Display| LiveError::Spread(format!("{what}: {e}"));
    let fd = {
        let prog: &Xdp = ebpf
            .program(observer)
            .ok_or(LiveError::MissingProgram(observer))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| load_error(&e))?;
        prog.fd()
            .map_err(|e| fail(observer, &e))?
            .try_clone()
            .map_err(|e| fail(observer, &e))?
    };
    let cpumap_id = {
        let map = ebpf
            .map_mut(maps::SPREAD_CPUS)
            .ok_or_else(|| LiveError::Spread(format!("no map {}", maps::SPREAD_CPUS)))?;
        let id = match &*map {
            Map::CpuMap(data) => data.info().map_err(|e| fail(maps::SPREAD_CPUS, &e))?.id(),
            _ => {
                return Err(LiveError::Spread(format!(
                    "{} is not a cpumap",
                    maps::SPREAD_CPUS
                )));
            }
        };
        let mut cpumap = CpuMap::try_from(map).map_err(|e| fail(maps::SPREAD_CPUS, &e))?;
        for cpu in cpus {
            cpumap
                .set(*cpu, QUEUE_FRAMES, Some(&fd), 0)
                .map_err(|e| fail(&format!("the queue of CPU {cpu}"), &e))?;
        }
        id
    };
    // Attached before it knows the cpumap's id (it counts nothing until then), and before any
    // frame is sent on.
    count_drops(ebpf)?;
    let map = ebpf
        .map_mut(maps::SPREAD)
        .ok_or_else(|| LiveError::Spread(format!("no map {}", maps::SPREAD)))?;
    let mut spread: Array<_, u32> = Array::try_from(map).map_err(|e| fail(maps::SPREAD, &e))?;
    for (i, cpu) in cpus.iter().enumerate() {
        spread
            .set(1 + i as u32, cpu, 0)
            .map_err(|e| fail(maps::SPREAD, &e))?;
    }
    // The cpumap's drops are counted from here on: its id names it to `spread_drops`.
    spread
        .set(SPREAD_MAP_ID, cpumap_id, 0)
        .map_err(|e| fail(maps::SPREAD, &e))?;
    // The number last: until then no frame is sent on.
    spread
        .set(0, cpus.len() as u32, 0)
        .map_err(|e| fail(maps::SPREAD, &e))
}

/// Tells the CPUs copies are spread to that the spreading program stamps no arrival times
/// (`roce_spread_bare`): they take no latency sample.
pub(super) fn set_untimed(ebpf: &mut Ebpf) -> Result<(), LiveError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| LiveError::Spread(format!("{what}: {e}"));
    let map = ebpf
        .map_mut(maps::SPREAD)
        .ok_or_else(|| LiveError::Spread(format!("no map {}", maps::SPREAD)))?;
    let mut spread: Array<_, u32> = Array::try_from(map).map_err(|e| fail(maps::SPREAD, &e))?;
    spread
        .set(SPREAD_UNTIMED, 1, 0)
        .map_err(|e| fail(maps::SPREAD, &e))
}

/// Loads and attaches `spread_drops`, which counts the frames the cpumap drops when a CPU's
/// queue is full (in `Counters::spread_dropped`): without it they would be PSNs missing on the
/// wire.
fn count_drops(ebpf: &mut Ebpf) -> Result<(), LiveError> {
    let fail = |e: &dyn std::fmt::Display| {
        LiveError::Spread(format!(
            "counting its drops ({}): {e}",
            programs::SPREAD_DROPS
        ))
    };
    let prog: &mut RawTracePoint = ebpf
        .program_mut(programs::SPREAD_DROPS)
        .ok_or(LiveError::MissingProgram(programs::SPREAD_DROPS))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| fail(&e))?;
    prog.load().map_err(|e| fail(&e))?;
    prog.attach(DROP_TRACEPOINT).map_err(|e| fail(&e))?;
    Ok(())
}

/// Waits (at most half a second) until the frames still queued for the spread CPUs are
/// accounted: until the counted frames stop rising. After detaching, so that the final reading
/// holds them.
pub(super) fn settle(ebpf: &Ebpf) {
    let counted = || -> Option<u64> {
        let counters: PerCpuArray<_, Counters> =
            PerCpuArray::try_from(ebpf.map(maps::COUNTERS)?).ok()?;
        Some(counters.get(&0, 0).ok()?.iter().map(|c| c.frames).sum())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
    let mut last = counted();
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        let now = counted();
        if now == last {
            return;
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-3,8\n").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list("5").unwrap(), vec![5]);
        assert_eq!(parse_cpu_list("3,1,1-2").unwrap(), vec![1, 2, 3]);
        assert_eq!(
            parse_cpu_list("2-1").unwrap_err(),
            "CPU range '2-1' runs backwards"
        );
        assert_eq!(
            parse_cpu_list("0,x").unwrap_err(),
            "'x' in the CPU list '0,x' is not a CPU number"
        );
        assert!(parse_cpu_list(" ").is_err());
        assert_eq!(
            parse_cpu_list("0-4294967295").unwrap_err(),
            "CPU 4294967295 in '0-4294967295': at most 1024 CPUs"
        );
        assert_eq!(cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_list(&[4]), "4");
    }
}
