//! Clocks: the kernel programs' (CLOCK_MONOTONIC, ticked by a BPF timer) and the Unix epoch.

use std::time::SystemTime;

use aya::{
    Ebpf,
    programs::{TestRun, TestRunOptions, Xdp},
};
use observer_common::{ClockValue, maps, programs};

use super::LiveError;

/// The kernel clock's period when no microburst slots are kept: packet times (first and last
/// seen, the PSN analysis's waits) to a millisecond, for a thousand timer runs a second. With
/// slots, the period is the slot width.
pub const RUN_TICK_NS: u64 = 1_000_000;

/// Starts the kernel programs' clock ticking every `period_ns` (or restarts it at that period):
/// writes the period into `CLOCK`, then runs `start_clock` once with BPF_PROG_TEST_RUN (loading
/// it first). The timer lives as long as the object's maps.
pub fn start_clock(ebpf: &mut Ebpf, period_ns: u64) -> Result<(), LiveError> {
    if period_ns == 0 {
        return Err(LiveError::Clock("a period of 0 ns".into()));
    }
    let fail = |what: &str, e: &dyn std::fmt::Display| LiveError::Clock(format!("{what}: {e}"));
    {
        let map = ebpf
            .map_mut(maps::CLOCK)
            .ok_or_else(|| LiveError::Clock(format!("no map {}", maps::CLOCK)))?;
        let mut clock: aya::maps::Array<_, ClockValue> =
            aya::maps::Array::try_from(map).map_err(|e| fail(maps::CLOCK, &e))?;
        // The time so far stays (frames read it meanwhile); only the period changes. (Updating
        // the value cancels a running timer: the program arms it afresh.)
        let mut value = clock.get(&0, 0).unwrap_or_default();
        value.clock.period_ns = period_ns;
        clock
            .set(0, value, 0)
            .map_err(|e| fail("writing its period", &e))?;
    }
    let prog: &mut Xdp = ebpf
        .program_mut(programs::START_CLOCK)
        .ok_or(LiveError::MissingProgram(programs::START_CLOCK))?
        .try_into()
        .map_err(|e| fail(programs::START_CLOCK, &e))?;
    if prog.fd().is_err() {
        prog.load().map_err(|e| super::error::load_error(&e))?;
    }
    // The frame is not looked at; BPF_PROG_TEST_RUN wants at least an Ethernet header.
    let frame = [0u8; 64];
    const XDP_PASS: u32 = 2;
    // The program's result when bpf_timer_init fails: this plus its errno.
    const INIT_FAILED: u32 = 1000;
    // A failed bpf_timer_init is tried again, a few times: it failed once in a CI run here, at
    // the restart that stops the clock just after loading, and not in 6,000 restarts since
    // (it allocates the timer without waiting; its error number is reported now).
    let mut tries = 0;
    loop {
        let run = prog
            .test_run(TestRunOptions {
                data_in: Some(&frame),
                repeat: 1,
                ..Default::default()
            })
            .map_err(|e| fail("running start_clock", &e))?;
        tries += 1;
        return match run.return_value {
            XDP_PASS => Ok(()),
            INIT_FAILED.. if tries < 5 => {
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
            step => Err(LiveError::Clock(match step {
                10 => "the period did not reach the kernel".to_string(),
                12 => "bpf_timer_set_callback failed".to_string(),
                13 => "bpf_timer_start failed".to_string(),
                INIT_FAILED.. => format!(
                    "bpf_timer_init failed {tries} times: {}",
                    std::io::Error::from_raw_os_error((step - INIT_FAILED) as i32)
                ),
                other => format!("start_clock returned {other}"),
            })),
        };
    }
}

/// A period no clock reaches: ticked at it, the kernel programs' time stands still at 0.
const FROZEN_PERIOD_NS: u64 = 1 << 62;

/// Stops the kernel programs' clock at time 0 (passive latency, which reads the clock itself,
/// goes on): the kernel then judges waits as a replay whose frames carry no time does, whatever
/// the scheduler does between frames (for comparing the two memories frame for frame).
pub fn freeze_clock(ebpf: &mut Ebpf) -> Result<(), LiveError> {
    start_clock(ebpf, FROZEN_PERIOD_NS)
}

/// The kernel programs' clock as it stands (its ticks and their lateness).
pub fn read_clock(ebpf: &Ebpf) -> Result<ClockValue, LiveError> {
    let map = ebpf
        .map(maps::CLOCK)
        .ok_or_else(|| LiveError::Clock(format!("no map {}", maps::CLOCK)))?;
    let clock: aya::maps::Array<_, ClockValue> = aya::maps::Array::try_from(map)
        .map_err(|e| LiveError::Clock(format!("{}: {e}", maps::CLOCK)))?;
    clock
        .get(&0, 0)
        .map_err(|e| LiveError::Clock(format!("reading {}: {e}", maps::CLOCK)))
}

/// CLOCK_MONOTONIC in ns (the kernel program's clock).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Unix-epoch ns, now.
pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Unix-epoch ns minus CLOCK_MONOTONIC ns, now.
pub fn monotonic_to_unix_offset() -> i128 {
    let mono = monotonic_ns() as i128;
    let unix = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    unix - mono
}
