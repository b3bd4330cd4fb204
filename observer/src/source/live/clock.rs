//! Clocks: the kernel programs' (CLOCK_MONOTONIC) and the Unix epoch.

use std::time::SystemTime;

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
