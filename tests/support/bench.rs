//! What the benchmark binaries share: their environment line, their `main`, the median.

/// What a benchmark's figures depend on besides the code: the kernel and the CPUs.
pub fn bench_environment() -> [(&'static str, String); 2] {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    [("kernel", kernel), ("cpus", cpus.to_string())]
}

/// A benchmark's environment as a JSON object.
pub fn environment_json(env: &[(&str, String)]) -> serde_json::Map<String, serde_json::Value> {
    env.iter()
        .map(|(k, v)| (k.to_string(), v.clone().into()))
        .collect()
}

/// A benchmark's environment as one line: `kernel 6.18, cpus 2`.
pub fn environment_line(env: &[(&str, String)]) -> String {
    env.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `main` of a privileged benchmark `name`: refuses to run without root (saying it needs
/// it for `needs`), runs `run`, and prints its error as `name: error` with a failing exit.
pub fn bench_main(
    name: &str,
    needs: &str,
    run: impl FnOnce() -> Result<(), String>,
) -> std::process::ExitCode {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("{name}: needs root ({needs}); run as root: cargo xtask bench");
        return std::process::ExitCode::FAILURE;
    }
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The median of the samples (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}
