//! `cargo xtask bench` (last part): the cost of `roce-observer run`, the continuous sidecar, by
//! the number of flows it tracks.
//!
//! Each case starts the real daemon (the release `roce-observer` binary) in a lab namespace,
//! observing `rx0` with a 10 s interval and a flow table of 1<<20 entries, fills the table with N
//! distinct flows (one RC SEND-only frame per flow, from 198.18.0.0/16 to 198.19.255.254, dest
//! QPs 1..=N, sent on `tx0` through one AF_PACKET socket), waits until a drain has read the full
//! table, then measures over a window of 3 intervals (exactly 3 drains):
//! - CPU: the daemon process's utime + stime (/proc/PID/stat, every thread) over the window's
//!   wall time, as a percentage of one core, and as a multiple of the same daemon with no flows
//!   (the `idle` case, measured the same way in the same run);
//! - drain time: `roce_observer_drain_seconds` scraped after each of the window's drains
//!   (median and max);
//! - memory: VmRSS and VmHWM (/proc/PID/status) at the end of the window, and the kernel memory
//!   of the daemon's BPF maps (`memlock` of their fdinfo).
//!
//! Drains are found by scraping `/metrics` (a few scrapes around each expected drain, counted in
//! the figures: a Prometheus server would scrape about as often). The targets, at the default
//! 10 s interval: below 1% of one core at 10k flows; at 1M flows below 10% of one core, and a
//! median drain under 1 s. Each is printed beside its figure as PASS or MISS, never a failure
//! (timing on a shared machine is noisy), with the userspace memory per flow (RSS over the idle
//! daemon's) at the largest size. The bench fails on errors: the daemon dying or not exiting 0
//! on SIGTERM, the table not filling (fewer than 95% of the flows tracked), a scrape failing.
//!
//! With `--traffic`, each size is measured a second time with a sender thread refreshing all
//! flows round robin at `--traffic-rate` frames per second during the window (rows labelled
//! `+traffic`).
//!
//! Then the fleet records' export: `--export-flows` QPs (10k) at a 1 s interval, every QP
//! refreshed twice a second, measured without and then with `--otlp-endpoint` (OTLP/HTTP, gzip)
//! to a sink in the namespace that takes every request (and decodes it with the official
//! protobufs, to count the records). The export's cost is the difference of the two CPU figures,
//! beside its target (2% of one core); with it the bytes on the wire per QP-interval (every row
//! of the interval over its QP rows), per record, and the userspace memory per QP (the RSS
//! difference).

// The JSON report is one `json!` deeper than the default limit allows.
#![recursion_limit = "256"]

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, ExitCode, ExitStatus, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use observer_common::wire::op;
use roce_observer::{
    lab::{Lab, pin_current_thread},
    source::{
        live::{bpfsys, memory},
        synth::{Ip, PacketSocket, RoceFrame},
    },
};

/// CPU and memory of `roce-observer run` at 10k, 100k and 1M flows (needs root).
#[derive(clap::Parser)]
#[command(name = "bench-daemon")]
struct Args {
    /// Flow counts to measure (comma-separated); an idle case (0 flows) always comes first.
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = [10_000u32, 100_000, 1_000_000],
        value_parser = clap::value_parser!(u32).range(1..=MAX_FLOWS as i64 - 1),
    )]
    flows: Vec<u32>,
    /// The daemon's drain interval.
    #[arg(long, default_value = "10s", value_parser = roce_observer::units::parse_duration)]
    interval: Duration,
    /// Drains (intervals) per measurement window.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=30))]
    window: u32,
    /// Also measure every size with traffic refreshing the flows during the window.
    #[arg(long)]
    traffic: bool,
    /// Frames per second of the `--traffic` sender.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    traffic_rate: u32,
    /// The daemon binary (default: the release `roce-observer` next to this executable, built
    /// first when missing or older than this executable).
    #[arg(long, value_name = "PATH")]
    daemon: Option<PathBuf>,
    /// QPs of the export comparison (0: none).
    #[arg(long, default_value_t = 10_000)]
    export_flows: u32,
    /// Drains per window of the export comparison (at a 1 s interval).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=60))]
    export_window: u32,
    /// Print the figures as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

/// The export comparison's interval and its target (its cost over `run` without export, % of
/// one core).
const EXPORT_INTERVAL: Duration = Duration::from_secs(1);
const EXPORT_TARGET: f64 = 2.0;

/// The daemon's flow table capacity (`--max-flows`).
const MAX_FLOWS: u32 = 1 << 20;
/// The metrics endpoint inside the lab namespace (a fresh namespace: the port is free).
const PORT: u16 = 19477;
/// The interval the targets are set for.
const TARGET_INTERVAL: Duration = Duration::from_secs(10);

/// What a target judges of a case.
#[derive(Clone, Copy)]
enum Figure {
    /// CPU time over the window, % of one core.
    Cpu,
    /// The median drain time, ms.
    DrainMedian,
}

/// A figure at a number of flows (without traffic) and the value it must stay below.
struct Target {
    figure: Figure,
    flows: u32,
    below: f64,
}

const TARGETS: [Target; 3] = [
    Target {
        figure: Figure::Cpu,
        flows: 10_000,
        below: 1.0,
    },
    Target {
        figure: Figure::Cpu,
        flows: 1_000_000,
        below: 10.0,
    },
    Target {
        figure: Figure::DrainMedian,
        flows: 1_000_000,
        below: 1000.0,
    },
];

impl Figure {
    fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu_percent_of_core",
            Self::DrainMedian => "drain_ms_median",
        }
    }

    fn of(self, o: &Outcome) -> f64 {
        match self {
            Self::Cpu => o.cpu_percent(),
            Self::DrainMedian => o.drain_ms().0,
        }
    }

    fn show(self, v: f64) -> String {
        match self {
            Self::Cpu => format!("{v:.3}% of one core"),
            Self::DrainMedian => format!("{v:.0} ms"),
        }
    }
}

impl Target {
    fn describe(&self) -> String {
        match self.figure {
            Figure::Cpu => format!("CPU below {}% of one core", self.below),
            Figure::DrainMedian => format!("median drain below {} ms", self.below),
        }
    }
}

/// A target's figure in this run, and whether it is met; none when its case was not measured
/// (or the interval is not the targets' one).
fn judge(t: &Target, outcomes: &[Outcome], interval: Duration) -> Option<(f64, bool)> {
    if interval != TARGET_INTERVAL {
        return None;
    }
    let o = outcomes.iter().find(|o| o.flows == t.flows && !o.traffic)?;
    let v = t.figure.of(o);
    Some((v, v < t.below))
}

/// The largest case without traffic, where the userspace memory per flow is taken.
fn memory_case(outcomes: &[Outcome]) -> Option<&Outcome> {
    outcomes
        .iter()
        .filter(|o| o.flows > 0 && !o.traffic)
        .max_by_key(|o| o.flows)
}
/// A table holding fewer than this share of the flows sent is an error.
const MIN_FILL: f64 = 0.95;
/// Destination of every flow; sources are 198.18.0.0/16.
const DST: Ipv4Addr = Ipv4Addr::new(198, 19, 255, 254);

// ---------------------------------------------------------------------------------------------
// The flows and their sender.
// ---------------------------------------------------------------------------------------------

/// Flow `i` (0-based): an RC SEND-only frame to dest QP i + 1 from 198.18.(i>>8).(i&255) (the
/// QP alone makes the flows distinct), with PSN `psn`.
fn flow_frame(i: u32, psn: u32) -> Vec<u8> {
    let src = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + (i & 0xFFFF));
    let mut f = RoceFrame::new(Ip::v4(src, DST), op::SEND_ONLY, i + 1);
    f.bth.psn = psn & 0x00FF_FFFF;
    f.payload_len = 64;
    f.to_bytes()
}

/// Frames after which a fill sender yields for [`FILL_PAUSE`]: the kernel handles each frame as
/// it is sent (the softirq runs when the send returns), and a short breather now and then keeps
/// the veth's 256-entry XDP ring from overflowing when a noisy neighbour delays that.
const FILL_BATCH: u32 = 256;
const FILL_PAUSE: Duration = Duration::from_micros(50);
/// Fill senders (each on its own CPU, when allowed).
const FILL_THREADS: usize = 2;

/// Sends flows `0..n` once (PSN `psn`) from up to [`FILL_THREADS`] threads, each pinned to its
/// own CPU and sending its own contiguous share of the flows (every flow's frames on one CPU, as
/// a NIC's RSS keeps a flow on one queue). Must be called inside the lab namespace.
fn fill(n: u32, psn: u32) -> Result<(), String> {
    let cpus = roce_observer::lab::allowed_cpus().map_err(|e| format!("sched_getaffinity: {e}"))?;
    let threads = FILL_THREADS.min(cpus.len()).max(1) as u32;
    let share = n.div_ceil(threads);
    std::thread::scope(|s| {
        let senders: Vec<_> = (0..threads)
            .map(|t| {
                let cpu = cpus[t as usize % cpus.len()];
                s.spawn(move || {
                    roce_observer::lab::pin_current_thread_to(cpu)
                        .map_err(|e| format!("pinning a sender to CPU {cpu}: {e}"))?;
                    let sock = PacketSocket::open(Lab::TX).map_err(|e| e.to_string())?;
                    let flows = t * share..((t + 1) * share).min(n);
                    for (k, i) in flows.enumerate() {
                        sock.send(&flow_frame(i, psn), k)
                            .map_err(|e| e.to_string())?;
                        if (k as u32 + 1).is_multiple_of(FILL_BATCH) {
                            std::thread::sleep(FILL_PAUSE);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        senders.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| "a sender thread panicked".to_string())?
        })
    })
}

/// A background sender refreshing flows `0..n` round robin at `rate` frames/s (PSNs rising by
/// one per round), until stopped.
struct Traffic {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<Result<(), String>>,
}

impl Traffic {
    /// Must be called inside the lab namespace (the thread inherits it).
    fn start(n: u32, rate: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (stop_t, sent_t) = (stop.clone(), sent.clone());
        let thread = std::thread::spawn(move || {
            pin_current_thread().map_err(|e| format!("pinning the traffic sender: {e}"))?;
            let sock = PacketSocket::open(Lab::TX).map_err(|e| e.to_string())?;
            let started = Instant::now();
            // Rounds start at PSN 1 (the fill sent PSN 0).
            let (mut i, mut round, mut total) = (0u32, 1u32, 0u64);
            while !stop_t.load(Ordering::Relaxed) {
                // Frames due by now; sent in bursts every ~2 ms.
                let due = (started.elapsed().as_secs_f64() * f64::from(rate)) as u64;
                while total < due {
                    sock.send(&flow_frame(i, round), total as usize)
                        .map_err(|e| e.to_string())?;
                    total += 1;
                    i += 1;
                    if i == n {
                        i = 0;
                        round += 1;
                    }
                }
                sent_t.store(total, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(())
        });
        Self { stop, sent, thread }
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    fn stop(self) -> Result<u64, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| "the traffic thread panicked".to_string())??;
        Ok(self.sent.load(Ordering::Relaxed))
    }
}

// ---------------------------------------------------------------------------------------------
// The daemon.
// ---------------------------------------------------------------------------------------------

/// `roce-observer run` in the lab namespace; killed on drop if still running.
struct Daemon {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// `ip netns exec NS BIN run ...` (it execs the daemon: the child's pid is the daemon's).
    /// `max_flows`: the flow table's capacity (none: the default's).
    fn start(
        ns: &str,
        bin: &Path,
        interval: Duration,
        max_flows: Option<u32>,
        extra: &[String],
    ) -> Result<Self, String> {
        let interval = format!("{}ms", interval.as_millis());
        let max_flows: Vec<String> = max_flows
            .map(|n| vec!["--max-flows".to_string(), n.to_string()])
            .unwrap_or_default();
        let listen = format!("127.0.0.1:{PORT}");
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(bin)
            .args(["run", "-i", Lab::RX, "--interval", &interval])
            .args(&max_flows)
            .args(["--idle-timeout", "1h"])
            .args(["--listen", &listen, "--max-series", "100"])
            .args(extra)
            .env_remove("ROCE_OBSERVER_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        if let Some(stderr) = child.stderr.take() {
            let sink = log.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                {
                    sink.lock().expect("log lock").push(line);
                }
            });
        }
        Ok(Self { child, log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of its log.
    fn log_tail(&self) -> String {
        let log = self.log.lock().expect("log lock");
        if log.is_empty() {
            return "(nothing on its stderr)".into();
        }
        let from = log.len().saturating_sub(15);
        log[from..].join("\n")
    }

    /// An error if the daemon has exited.
    fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                // Let the log reader catch up.
                std::thread::sleep(Duration::from_millis(100));
                Err(format!(
                    "the daemon exited ({status}):\n{}",
                    self.log_tail()
                ))
            }
            Err(e) => Err(format!("waiting for the daemon: {e}")),
        }
    }

    /// Scrapes /metrics (must be called inside the lab namespace); an error if the daemon died.
    fn scrape(&mut self) -> Result<Metrics, String> {
        self.check_alive()?;
        scrape().map_err(|e| {
            let alive = self.check_alive().err().unwrap_or_default();
            format!("scraping /metrics: {e} {alive}")
        })
    }

    /// Waits (up to `timeout`) until it serves /metrics; the first scrape.
    fn wait_serving(&mut self, timeout: Duration) -> Result<Metrics, String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            match scrape() {
                Ok(m) => return Ok(m),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!(
                        "the daemon did not serve /metrics within {timeout:?}: {e}\n{}",
                        self.log_tail()
                    ));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Scrapes every `poll` from `not_before` on until `roce_observer_drains_total` exceeds
    /// `drains` (a drain ended); that scrape, and the number of scrapes taken.
    fn wait_drain(
        &mut self,
        drains: u64,
        not_before: Instant,
        poll: Duration,
        timeout: Duration,
    ) -> Result<(Metrics, u32), String> {
        let deadline = Instant::now() + timeout;
        if let Some(d) = not_before.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        let mut scrapes = 0;
        loop {
            let m = self.scrape()?;
            scrapes += 1;
            if m.value("roce_observer_drains_total")? as u64 > drains {
                return Ok((m, scrapes));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no drain after drain {drains} within {timeout:?}:\n{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(poll);
        }
    }

    /// SIGTERM, then waits for the exit: the time it took; an error unless it exits 0.
    fn stop(mut self) -> Result<Duration, String> {
        let started = Instant::now();
        // SAFETY: signalling our own child.
        if unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) } != 0 {
            return Err(format!(
                "SIGTERM to the daemon: {}",
                std::io::Error::last_os_error()
            ));
        }
        let deadline = started + Duration::from_secs(60);
        let status: ExitStatus = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() > deadline => {
                    return Err(format!(
                        "the daemon did not exit within 60 s of SIGTERM:\n{}",
                        self.log_tail()
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("waiting for the daemon: {e}")),
            }
        };
        let took = started.elapsed();
        if !status.success() {
            std::thread::sleep(Duration::from_millis(100));
            return Err(format!(
                "the daemon exited with {status} on SIGTERM:\n{}",
                self.log_tail()
            ));
        }
        Ok(took)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One scrape: samples as (name, labels, value).
struct Metrics(Vec<(String, String, f64)>);

impl Metrics {
    /// Parses the Prometheus text format (the default without an Accept header).
    fn parse(text: &str) -> Result<Self, String> {
        let mut samples = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (series, value) = line
                .rsplit_once(' ')
                .ok_or_else(|| format!("bad sample line {line:?}"))?;
            let value: f64 = value
                .parse()
                .map_err(|_| format!("bad sample value in {line:?}"))?;
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            samples.push((name.to_string(), labels.to_string(), value));
        }
        Ok(Self(samples))
    }

    /// The value of the sample `name` whose labels contain every `with` (`key="value"`).
    fn labelled(&self, name: &str, with: &[&str]) -> Result<f64, String> {
        self.0
            .iter()
            .find(|(n, l, _)| n == name && with.iter().all(|w| l.contains(w)))
            .map(|s| s.2)
            .ok_or_else(|| format!("no sample {name} {with:?} in the scrape"))
    }

    fn value(&self, name: &str) -> Result<f64, String> {
        self.labelled(name, &[])
    }

    /// The sum of every sample `name` (none: an error).
    fn sum(&self, name: &str) -> Result<f64, String> {
        let v: Vec<f64> = self
            .0
            .iter()
            .filter(|(n, ..)| n == name)
            .map(|s| s.2)
            .collect();
        if v.is_empty() {
            return Err(format!("no sample {name} in the scrape"));
        }
        Ok(v.iter().sum())
    }

    /// RoCE packets the observer counted on rx0.
    fn rx_packets(&self) -> Result<u64, String> {
        self.labelled("roce_packets_total", &["iface=\"rx0\"", "dir=\"rx\""])
            .map(|v| v as u64)
    }
}

/// GET /metrics from 127.0.0.1:PORT of the calling thread's namespace.
fn scrape() -> Result<Metrics, String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], PORT));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("reading the response: {e}"))?;
    let text = String::from_utf8(raw).map_err(|_| "the response is not UTF-8".to_string())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or("not an HTTP response")?;
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        return Err(format!("HTTP status {status}"));
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err("a chunked response (not handled here)".into());
    }
    Metrics::parse(body)
}

// ---------------------------------------------------------------------------------------------
// /proc.
// ---------------------------------------------------------------------------------------------

/// CPU time of a process (all its threads), in seconds.
#[derive(Clone, Copy, Default)]
struct Cpu {
    user: f64,
    system: f64,
}

impl Cpu {
    fn total(&self) -> f64 {
        self.user + self.system
    }

    fn since(&self, earlier: &Cpu) -> Cpu {
        Cpu {
            user: self.user - earlier.user,
            system: self.system - earlier.system,
        }
    }
}

/// utime and stime of a process (/proc/PID/stat, in clock ticks).
fn cpu_time(pid: u32) -> Result<Cpu, String> {
    stat_cpu(Path::new(&format!("/proc/{pid}/stat")))
}

/// The CPU seconds of each of a process's threads, by thread ID, with its name
/// (/proc/PID/task/TID): where a case's time goes.
fn thread_times(pid: u32) -> Result<BTreeMap<u32, (String, f64)>, String> {
    let dir = format!("/proc/{pid}/task");
    let tasks = std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))?;
    let mut threads = BTreeMap::new();
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let path = task.path();
        // A thread may end between the listing and the reads: it is left out.
        let (Ok(name), Ok(cpu)) = (
            std::fs::read_to_string(path.join("comm")),
            stat_cpu(&path.join("stat")),
        ) else {
            continue;
        };
        threads.insert(tid, (name.trim().to_string(), cpu.total()));
    }
    Ok(threads)
}

/// The CPU seconds of the threads alive at the end of a window (`end`), each less what it had
/// at its start (`start`; a thread started since has all its time in it), summed by name.
/// Threads that ended within the window are the process's time less these.
fn threads_over(
    start: &BTreeMap<u32, (String, f64)>,
    end: BTreeMap<u32, (String, f64)>,
) -> BTreeMap<String, f64> {
    let mut by_name = BTreeMap::new();
    for (tid, (name, seconds)) in end {
        let before = start.get(&tid).map_or(0.0, |(_, s)| *s);
        *by_name.entry(name).or_default() += (seconds - before).max(0.0);
    }
    by_name
}

/// utime and stime of a stat file (a process's or a thread's).
fn stat_cpu(path: &Path) -> Result<Cpu, String> {
    let stat = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let path = path.display();
    // Fields after the command name (which may hold spaces and parentheses): state is field 3,
    // utime field 14, stime field 15.
    let rest = &stat[stat.rfind(')').ok_or_else(|| format!("bad {path}"))? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<u64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("bad {path} field {}", i + 3))
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return Err("sysconf(_SC_CLK_TCK) failed".into());
    }
    Ok(Cpu {
        user: ticks(11)? as f64 / hz as f64,
        system: ticks(12)? as f64 / hz as f64,
    })
}

/// VmRSS and VmHWM of a process, in KiB.
fn memory_kib(pid: u32) -> Result<(u64, u64), String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let field = |name: &str| -> Result<u64, String> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Kernel memory of the BPF maps a process holds open (sum of `memlock` over the fdinfo of its
/// map descriptors), in bytes, and that of the largest map.
fn bpf_map_memory(pid: u32) -> (u64, u64) {
    let maps = memory::open_maps(Some(pid)).unwrap_or_default();
    (
        maps.iter().map(|m| m.bytes).sum(),
        maps.iter().map(|m| m.bytes).max().unwrap_or(0),
    )
}

/// The kernel memory of the daemon's maps at the default settings, on this host and as the
/// model gives it on bigger ones.
struct DefaultMemory {
    /// The kernel's accounting (fdinfo), bytes; and the daemon's metric's sum.
    kernel: u64,
    metric: u64,
    /// The model at this host's possible CPUs.
    model_here: u64,
    cpus_here: u64,
    /// (possible CPUs, bytes) by the model.
    at: Vec<(u64, u64)>,
    /// The largest maps: (name, bytes here, bytes per possible CPU).
    top: Vec<(String, u64, u64)>,
}

/// The possible-CPU counts the memory is given for.
const CPU_COUNTS: [u64; 3] = [64, 192, 256];
/// The target: all maps at the default settings on a host of 192 possible CPUs, MiB.
const DEFAULT_MEMORY_TARGET_MIB: f64 = 64.0;

/// Starts the daemon at the default settings, reads its maps' kernel memory (fdinfo) and its
/// metric, and stops it.
fn default_memory(ns: &str, bin: &Path) -> Result<DefaultMemory, String> {
    let mut daemon = Daemon::start(ns, bin, Duration::from_secs(1), None, &[])?;
    let m = daemon.wait_serving(Duration::from_secs(60))?;
    let maps = memory::open_maps(Some(daemon.pid())).map_err(|e| format!("fdinfo: {e}"))?;
    let metric = m.sum("roce_observer_kernel_map_memory_bytes")? as u64;
    daemon.stop()?;
    let kernel: u64 = maps.iter().map(|m| m.bytes).sum();
    if metric != kernel {
        return Err(format!(
            "the daemon's roce_observer_kernel_map_memory_bytes sum to {metric} B, its maps' memlock to {kernel} B"
        ));
    }
    let cpus_here = bpfsys::possible_cpus().map_err(|e| e.to_string())? as u64;
    let mut top: Vec<(String, u64, u64)> = maps
        .iter()
        .map(|m| {
            (
                m.name.clone(),
                m.bytes,
                m.model(cpus_here + 1) - m.model(cpus_here),
            )
        })
        .collect();
    top.sort_by_key(|t| std::cmp::Reverse(t.1));
    top.truncate(5);
    Ok(DefaultMemory {
        kernel,
        metric,
        model_here: maps.iter().map(|m| m.model(cpus_here)).sum(),
        cpus_here,
        at: CPU_COUNTS
            .iter()
            .map(|&n| (n, memory::at_cpus(&maps, cpus_here, n)))
            .collect(),
        top,
    })
}

impl DefaultMemory {
    fn print(&self, max_flows_bytes: u64) {
        println!(
            "Kernel memory of the BPF maps at the default settings, {} possible CPUs: {:.1} MiB \
             by the kernel's accounting (fdinfo memlock; the daemon's \
             roce_observer_kernel_map_memory_bytes says {:.1} MiB); the model {:.1} MiB ({:.3}x)",
            self.cpus_here,
            self.kernel as f64 / MIB,
            self.metric as f64 / MIB,
            self.model_here as f64 / MIB,
            self.model_here as f64 / self.kernel.max(1) as f64
        );
        for (name, bytes, per_cpu) in &self.top {
            println!(
                "  {name:<16} {:>8.2} MiB here, {:>8.3} MiB per possible CPU",
                *bytes as f64 / MIB,
                *per_cpu as f64 / MIB
            );
        }
        let at: Vec<String> = self
            .at
            .iter()
            .map(|(n, b)| format!("{:.0} MiB at {n}", *b as f64 / MIB))
            .collect();
        println!("  by the model: {}", at.join(", "));
        let at192 = self.at.iter().find(|(n, _)| *n == 192).map_or(0, |x| x.1) as f64 / MIB;
        println!(
            "  target: at most {DEFAULT_MEMORY_TARGET_MIB:.0} MiB at 192 possible CPUs: {} ({at192:.0} MiB)",
            if at192 <= DEFAULT_MEMORY_TARGET_MIB {
                "met"
            } else {
                "MISS"
            }
        );
        println!(
            "  at --max-flows {MAX_FLOWS} here: {:.0} MiB; target at most a third of 1,013 MiB \
             (338 MiB): {}",
            max_flows_bytes as f64 / MIB,
            if max_flows_bytes as f64 / MIB <= 1013.0 / 3.0 {
                "met"
            } else {
                "MISS"
            }
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The cases.
// ---------------------------------------------------------------------------------------------

struct Outcome {
    label: String,
    flows: u32,
    traffic: bool,
    /// `roce_observer_flows_tracked` and `..._flow_table_entries` at the end of the window.
    tracked: u64,
    table_entries: u64,
    evictions: u64,
    /// Frames sent to fill the table, and those of them the observer did not count.
    fill_frames: u64,
    fill_lost: u64,
    fill_seconds: f64,
    /// Spawn to the first answered scrape, and the CPU time used by then.
    startup_seconds: f64,
    startup_cpu_seconds: f64,
    /// The daemon's CPU time over the window, and its threads' by name.
    cpu: Cpu,
    threads: BTreeMap<String, f64>,
    wall_seconds: f64,
    /// The daemon's own `roce_observer_cpu_seconds_total` over the window (a cross-check).
    self_cpu_seconds: f64,
    drain_seconds: Vec<f64>,
    scrapes: u32,
    /// VmRSS and VmHWM at the start and the end of the window.
    rss_start_kib: u64,
    hwm_start_kib: u64,
    rss_kib: u64,
    hwm_kib: u64,
    maps_bytes: u64,
    flow_map_bytes: u64,
    traffic_frames: u64,
    stop_seconds: f64,
}

impl Outcome {
    fn cpu_percent(&self) -> f64 {
        self.cpu.total() / self.wall_seconds * 100.0
    }

    /// The CPU of threads that ended within the window, % of one core: the process's less its
    /// live threads'. Each figure is read in clock ticks (a tenth of a point over a 10 s
    /// window), so this one is a few tenths at best.
    fn ended_threads_percent(&self) -> f64 {
        let live: f64 = self.threads.values().sum();
        ((self.cpu.total() - live) / self.wall_seconds * 100.0).max(0.0)
    }

    /// A thread's CPU over the window (its name's), % of one core.
    fn thread_percent(&self, name: &str) -> f64 {
        self.threads.get(name).copied().unwrap_or(0.0) / self.wall_seconds * 100.0
    }

    fn drain_ms(&self) -> (f64, f64) {
        let mut d = self.drain_seconds.clone();
        d.sort_by(f64::total_cmp);
        let median = match d.len() {
            0 => 0.0,
            n if n % 2 == 1 => d[n / 2],
            n => (d[n / 2 - 1] + d[n / 2]) / 2.0,
        };
        (median * 1e3, d.last().copied().unwrap_or(0.0) * 1e3)
    }
}

/// The tracked flows a full table must show.
fn fill_target(n: u32) -> u64 {
    (f64::from(n) * MIN_FILL).ceil() as u64
}

/// One case, inside the lab namespace: start, fill, wait for a drain of the full table, measure
/// a window of `window` drains, stop.
fn measure(
    ns: &str,
    bin: &Path,
    flows: u32,
    traffic: Option<u32>,
    interval: Duration,
    window: u32,
    extra: &[String],
) -> Result<Outcome, String> {
    let spawned = Instant::now();
    let mut daemon = Daemon::start(ns, bin, interval, Some(MAX_FLOWS), extra)?;
    let pid = daemon.pid();
    let mut m = daemon.wait_serving(Duration::from_secs(60))?;
    let startup_seconds = spawned.elapsed().as_secs_f64();
    let startup_cpu_seconds = cpu_time(pid)?.total();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    if exe.file_name() != bin.file_name() {
        return Err(format!(
            "pid {pid} runs {} (expected {}): `ip netns exec` did not exec the daemon",
            exe.display(),
            bin.display()
        ));
    }
    let poll = Duration::from_millis(50);
    let patience = interval * 3 + Duration::from_secs(30);
    let (mut fill_seconds, mut fill_lost) = (0.0, 0);
    if flows > 0 {
        let before = m.rx_packets()?;
        let started = Instant::now();
        fill(flows, 0)?;
        fill_seconds = started.elapsed().as_secs_f64();
        // A drain that started before the fill ended may have missed some flows: wait for
        // drains until the table shows them (at most three).
        let mut drains = daemon.scrape()?.value("roce_observer_drains_total")? as u64;
        for _ in 0..3 {
            (m, _) = daemon.wait_drain(drains, Instant::now(), poll, patience)?;
            drains = m.value("roce_observer_drains_total")? as u64;
            if m.value("roce_observer_flows_tracked")? as u64 >= u64::from(flows) {
                break;
            }
        }
        fill_lost = u64::from(flows).saturating_sub(m.rx_packets()? - before);
        let tracked = m.value("roce_observer_flows_tracked")? as u64;
        if tracked < fill_target(flows) {
            return Err(format!(
                "the flow table did not fill: {tracked} of {flows} flows tracked \
                 ({} table entries, {} evictions, {fill_lost} frames not counted)",
                m.value("roce_observer_flow_table_entries")?,
                m.value("roce_observer_flow_evictions_total")?
            ));
        }
    }
    // `m` is the scrape right after a drain: the window starts here.
    let sender = traffic.map(|rate| Traffic::start(flows, rate));
    let (rss_start_kib, hwm_start_kib) = memory_kib(pid)?;
    let cpu0 = cpu_time(pid)?;
    let threads0 = thread_times(pid)?;
    let t0 = Instant::now();
    let self_cpu0 = m.value("roce_observer_cpu_seconds_total")?;
    let mut drains = m.value("roce_observer_drains_total")? as u64;
    let mut drain_seconds = Vec::new();
    let mut scrapes = 0;
    let mut seen = t0;
    for _ in 0..window {
        // The next drain ends about one interval after this one did: scrape from shortly
        // before.
        let not_before = seen + interval.saturating_sub(Duration::from_millis(100));
        let (next, n) = daemon.wait_drain(drains, not_before, poll, patience)?;
        seen = Instant::now();
        scrapes += n;
        let now = next.value("roce_observer_drains_total")? as u64;
        if now != drains + 1 {
            eprintln!(
                "bench-daemon: {} flows: drains went from {drains} to {now} within one interval",
                flows
            );
        }
        drains = now;
        drain_seconds.push(next.value("roce_observer_drain_seconds")?);
        m = next;
    }
    let cpu1 = cpu_time(pid)?;
    let threads = threads_over(&threads0, thread_times(pid)?);
    let wall_seconds = t0.elapsed().as_secs_f64();
    let traffic_frames = match sender {
        Some(s) => {
            let sent = s.sent();
            s.stop()?;
            sent
        }
        None => 0,
    };
    let (rss_kib, hwm_kib) = memory_kib(pid)?;
    let (maps_bytes, flow_map_bytes) = bpf_map_memory(pid);
    let outcome = Outcome {
        label: match (flows, traffic.is_some()) {
            (0, _) => "idle".into(),
            (n, false) => n.to_string(),
            (n, true) => format!("{n}+traffic"),
        },
        flows,
        traffic: traffic.is_some(),
        tracked: m.value("roce_observer_flows_tracked")? as u64,
        table_entries: m.value("roce_observer_flow_table_entries")? as u64,
        evictions: m.value("roce_observer_flow_evictions_total")? as u64,
        fill_frames: u64::from(flows),
        fill_lost,
        fill_seconds,
        startup_seconds,
        startup_cpu_seconds,
        cpu: cpu1.since(&cpu0),
        threads,
        wall_seconds,
        self_cpu_seconds: m.value("roce_observer_cpu_seconds_total")? - self_cpu0,
        drain_seconds,
        scrapes,
        rss_start_kib,
        hwm_start_kib,
        rss_kib,
        hwm_kib,
        maps_bytes,
        flow_map_bytes,
        traffic_frames,
        stop_seconds: 0.0,
    };
    let stop_seconds = daemon.stop()?.as_secs_f64();
    Ok(Outcome {
        stop_seconds,
        ..outcome
    })
}

// ---------------------------------------------------------------------------------------------
// The daemon binary.
// ---------------------------------------------------------------------------------------------

fn modified(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The release `roce-observer` next to this executable (target/release), built with cargo first
/// when it is missing or older than this executable (which links the same library: a newer
/// bench means the daemon may be stale; the build is a no-op when it is not).
fn daemon_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let dir = exe.parent().ok_or("current_exe has no directory")?;
    let release = if dir.file_name().is_some_and(|n| n == "release") {
        dir.to_path_buf()
    } else {
        dir.parent().unwrap_or(dir).join("release")
    };
    let bin = release.join("roce-observer");
    let stale = match (modified(&bin), modified(&exe)) {
        (Some(b), Some(e)) => b < e,
        _ => true,
    };
    if stale {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .ok_or("no workspace root")?;
        eprintln!("bench-daemon: building the release roce-observer");
        let status = Command::new(cargo)
            .current_dir(root)
            .args([
                "build",
                "--quiet",
                "--release",
                "--package",
                "roce-observer-cli",
            ])
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() {
            return Err(format!(
                "cargo build --release --package roce-observer-cli failed ({status}); \
                 build it yourself or pass --daemon PATH"
            ));
        }
    }
    if !bin.is_file() {
        return Err(format!("no daemon binary at {}", bin.display()));
    }
    Ok(bin)
}

// ---------------------------------------------------------------------------------------------
// Output.
// ---------------------------------------------------------------------------------------------

const MIB: f64 = 1024.0 * 1024.0;

/// Bytes of userspace resident memory per flow above the idle daemon.
fn rss_per_flow(o: &Outcome, idle: &Outcome) -> Option<f64> {
    (o.flows > 0)
        .then(|| (o.rss_kib as f64 - idle.rss_kib as f64) * 1024.0 / f64::from(o.flows.max(1)))
}

/// Bytes of kernel map memory per flow-table entry (the table is preallocated: by capacity).
fn map_bytes_per_entry(o: &Outcome) -> f64 {
    o.flow_map_bytes as f64 / f64::from(MAX_FLOWS)
}

fn print_json(
    args: &Args,
    bin: &Path,
    outcomes: &[Outcome],
    took: Duration,
    export: Option<&ExportComparison>,
    defaults: &DefaultMemory,
) {
    let idle = &outcomes[0];
    let env = integration_tests::environment_json(&integration_tests::bench_environment());
    let default_memory = serde_json::json!({
        "possible_cpus": defaults.cpus_here,
        "kernel_bytes": defaults.kernel,
        "metric_bytes": defaults.metric,
        "model_bytes": defaults.model_here,
        "model_bytes_at": defaults.at.iter().map(|(n, b)| (n.to_string(), *b)).collect::<BTreeMap<_, _>>(),
        "target_mib_at_192": DEFAULT_MEMORY_TARGET_MIB,
    });
    let memory = memory_case(outcomes);
    let json = serde_json::json!({
        "environment": env,
        "daemon": bin.display().to_string(),
        "interval_seconds": args.interval.as_secs_f64(),
        "window_intervals": args.window,
        "max_flows": MAX_FLOWS,
        "targets": TARGETS.iter().map(|t| {
            let judged = judge(t, outcomes, args.interval);
            serde_json::json!({
                "figure": t.figure.name(),
                "flows": t.flows,
                "interval_seconds": TARGET_INTERVAL.as_secs_f64(),
                "below": t.below,
                "value": judged.map(|j| j.0),
                "pass": judged.map(|j| j.1),
            })
        }).collect::<Vec<_>>(),
        "memory_per_flow": memory.map(|o| serde_json::json!({
            "flows": o.flows,
            "rss_bytes_per_flow_over_idle": rss_per_flow(o, idle),
        })),
        "bench_seconds": took.as_secs_f64(),
        "export": export.map(ExportComparison::json),
        "default_kernel_memory": default_memory,
        "results": outcomes.iter().map(|o| {
            let (median, max) = o.drain_ms();
            serde_json::json!({
                "case": o.label,
                "flows": o.flows,
                "traffic": o.traffic,
                "traffic_rate": o.traffic.then_some(args.traffic_rate),
                "traffic_frames": o.traffic_frames,
                "tracked": o.tracked,
                "table_entries": o.table_entries,
                "evictions": o.evictions,
                "fill_frames": o.fill_frames,
                "fill_lost": o.fill_lost,
                "fill_seconds": o.fill_seconds,
                "startup_seconds": o.startup_seconds,
                "startup_cpu_seconds": o.startup_cpu_seconds,
                "window_seconds": o.wall_seconds,
                "cpu_seconds": o.cpu.total(),
                "cpu_user_seconds": o.cpu.user,
                "cpu_system_seconds": o.cpu.system,
                "cpu_percent_of_core": o.cpu_percent(),
                "self_reported_cpu_seconds": o.self_cpu_seconds,
                "x_idle": (idle.cpu.total() > 0.0).then(|| o.cpu_percent() / idle.cpu_percent()),
                "drain_ms": {"median": median, "max": max,
                    "all": o.drain_seconds.iter().map(|d| d * 1e3).collect::<Vec<_>>()},
                "scrapes_in_window": o.scrapes,
                "rss_bytes": o.rss_kib * 1024,
                "hwm_bytes": o.hwm_kib * 1024,
                "rss_bytes_at_window_start": o.rss_start_kib * 1024,
                "hwm_bytes_at_window_start": o.hwm_start_kib * 1024,
                "rss_bytes_per_flow_over_idle": rss_per_flow(o, idle),
                "bpf_maps_bytes": o.maps_bytes,
                "flow_map_bytes": o.flow_map_bytes,
                "stop_seconds": o.stop_seconds,
            })
        }).collect::<Vec<_>>(),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&json).expect("serializable")
    );
}

fn print_table(args: &Args, bin: &Path, outcomes: &[Outcome], took: Duration) {
    let idle = &outcomes[0];
    println!(
        "roce-observer run: CPU and memory by tracked flows ({}, interval {:?}, window {} \
         intervals, --max-flows {MAX_FLOWS}, --max-series 100)",
        bin.display(),
        args.interval,
        args.window
    );
    println!(
        "{}",
        integration_tests::environment_line(&integration_tests::bench_environment())
    );
    println!(
        "{:<16} {:>8} {:>8} {:>8} {:>7} {:>9} {:>9} {:>8} {:>8} {:>9} {:>7}",
        "case",
        "flows",
        "tracked",
        "cpu%",
        "x idle",
        "drain ms",
        "drain max",
        "RSS MiB",
        "HWM MiB",
        "B/flow",
        "target"
    );
    for o in outcomes {
        let (median, max) = o.drain_ms();
        let x_idle = if idle.cpu.total() > 0.0 {
            format!("{:.1}", o.cpu_percent() / idle.cpu_percent())
        } else {
            "-".into()
        };
        let per_flow = rss_per_flow(o, idle).map_or("-".into(), |b| format!("{b:.0}"));
        let verdicts: Vec<bool> = TARGETS
            .iter()
            .filter(|t| t.flows == o.flows && !o.traffic)
            .filter_map(|t| judge(t, outcomes, args.interval).map(|j| j.1))
            .collect();
        let target = match verdicts.as_slice() {
            [] => "",
            v if v.iter().all(|p| *p) => "PASS",
            _ => "MISS",
        };
        println!(
            "{:<16} {:>8} {:>8} {:>7.3}% {:>7} {:>9.2} {:>9.2} {:>8.1} {:>8.1} {:>9} {:>7}",
            o.label,
            o.flows,
            o.tracked,
            o.cpu_percent(),
            x_idle,
            median,
            max,
            o.rss_kib as f64 / 1024.0,
            o.hwm_kib as f64 / 1024.0,
            per_flow,
            target
        );
    }
    println!();
    println!(
        "{:<16} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9} {:>9} {:>9} {:>8}",
        "case",
        "user s",
        "sys s",
        "entries",
        "evicted",
        "lost",
        "fill s",
        "startup s",
        "start cpu",
        "window s",
        "scrapes",
        "stop s"
    );
    for o in outcomes {
        println!(
            "{:<16} {:>8.2} {:>8.2} {:>9} {:>9} {:>9} {:>10.2} {:>10.2} {:>9.2} {:>9.1} {:>9} {:>8.2}",
            o.label,
            o.cpu.user,
            o.cpu.system,
            o.table_entries,
            o.evictions,
            o.fill_lost,
            o.fill_seconds,
            o.startup_seconds,
            o.startup_cpu_seconds,
            o.wall_seconds,
            o.scrapes,
            o.stop_seconds
        );
    }
    println!(
        "BPF maps (kernel, preallocated): {:.1} MiB, of which the flow table {:.1} MiB ({:.0} B \
         per entry of capacity)",
        idle.maps_bytes as f64 / MIB,
        idle.flow_map_bytes as f64 / MIB,
        map_bytes_per_entry(idle)
    );
    for o in outcomes.iter().filter(|o| o.traffic) {
        println!(
            "{}: {} frames sent during the window ({:.0}/s)",
            o.label,
            o.traffic_frames,
            o.traffic_frames as f64 / o.wall_seconds
        );
    }
    // SAFETY: sysconf has no preconditions.
    let tick = 1.0 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    println!(
        "cpu% = utime+stime of the daemon (/proc/PID/stat, {:.0} ms ticks: +-{:.3}% over the \
         window) over the window's wall time; the daemon's own \
         roce_observer_cpu_seconds_total agrees within {:.2} s",
        tick * 1e3,
        tick / idle.wall_seconds * 100.0,
        outcomes
            .iter()
            .map(|o| (o.self_cpu_seconds - o.cpu.total()).abs())
            .fold(0.0, f64::max)
    );
    for t in &TARGETS {
        let what = format!(
            "{} at {} flows ({:?} interval)",
            t.describe(),
            t.flows,
            TARGET_INTERVAL
        );
        match judge(t, outcomes, args.interval) {
            Some((v, met)) => println!(
                "target: {what}: {} {}",
                t.figure.show(v),
                if met { "PASS" } else { "MISS" }
            ),
            None if args.interval != TARGET_INTERVAL => {
                println!("target: {what}: not judged (interval {:?})", args.interval)
            }
            None => println!("target: {what}: not measured"),
        }
    }
    match memory_case(outcomes).and_then(|o| Some((o.flows, rss_per_flow(o, idle)?))) {
        Some((flows, bytes)) => println!(
            "memory: {bytes:.0} B of userspace memory per flow at {flows} flows (RSS over the idle \
             daemon's)"
        ),
        None => println!("memory: no flows measured"),
    }
    println!("bench took {:.0} s", took.as_secs_f64());
}

fn run(args: &Args) -> Result<(), String> {
    let started = Instant::now();
    let bin = match &args.daemon {
        Some(p) => p.clone(),
        None => daemon_binary()?,
    };
    let bin = std::fs::canonicalize(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    let lab = Lab::create("ro-dmn").map_err(|e| format!("creating the lab namespace: {e}"))?;
    // The metrics endpoint listens on the namespace's loopback, down in a fresh namespace.
    let up = lab
        .ns
        .command("ip")
        .args(["link", "set", "lo", "up"])
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if !up.status.success() {
        return Err(format!(
            "ip link set lo up: {}",
            String::from_utf8_lossy(&up.stderr).trim()
        ));
    }
    let mut cases: Vec<(u32, Option<u32>)> = vec![(0, None)];
    for &n in &args.flows {
        cases.push((n, None));
        if args.traffic {
            cases.push((n, Some(args.traffic_rate)));
        }
    }
    let (interval, window) = (args.interval, args.window);
    let mut outcomes = Vec::new();
    for (flows, traffic) in cases {
        let label = if flows == 0 {
            "idle".to_string()
        } else {
            flows.to_string()
        };
        eprintln!(
            "bench-daemon: [{:>5.1} s] {label}{}",
            started.elapsed().as_secs_f64(),
            if traffic.is_some() {
                " with traffic"
            } else {
                ""
            }
        );
        // The whole case runs on a thread inside the namespace (the scrapes, the sockets).
        let (ns, b) = (lab.ns.name().to_string(), bin.clone());
        let outcome = lab
            .ns
            .run_in(move || measure(&ns, &b, flows, traffic, interval, window, &[]))
            .map_err(|e| e.to_string())??;
        outcomes.push(outcome);
    }
    let defaults = {
        let (ns, b) = (lab.ns.name().to_string(), bin.clone());
        lab.ns
            .run_in(move || default_memory(&ns, &b))
            .map_err(|e| e.to_string())??
    };
    let export = match args.export_flows {
        0 => None,
        n => Some(export_comparison(
            &lab,
            &bin,
            n,
            args.export_window,
            &started,
        )?),
    };
    drop(lab);
    let took = started.elapsed();
    if args.json {
        print_json(args, &bin, &outcomes, took, export.as_ref(), &defaults);
    } else {
        print_table(args, &bin, &outcomes, took);
        defaults.print(outcomes[0].maps_bytes);
        if let Some(e) = &export {
            e.print();
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The fleet records' export.
// ---------------------------------------------------------------------------------------------

/// What the sink took: request bodies (as sent), records, QP records.
#[derive(Default)]
struct SinkCounts {
    requests: AtomicU64,
    wire_bytes: AtomicU64,
    records: AtomicU64,
    qp_records: AtomicU64,
}

/// An OTLP/HTTP receiver that takes every request (200, an empty ExportLogsServiceResponse),
/// on the calling thread's namespace's loopback: where it listens.
fn start_sink(counts: Arc<SinkCounts>) -> Result<u16, String> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("the sink: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    std::thread::spawn(move || {
        for conn in listener.incoming().map_while(Result::ok) {
            let counts = counts.clone();
            std::thread::spawn(move || {
                let _ = serve_sink(conn, &counts);
            });
        }
    });
    Ok(port)
}

/// One keep-alive connection of the sink: requests until the client closes it.
fn serve_sink(conn: TcpStream, counts: &SinkCounts) -> std::io::Result<()> {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(conn.try_clone()?);
    let mut conn = conn;
    loop {
        let (mut length, mut gzip, mut path) = (0usize, false, String::new());
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if let Some(p) = line.split_whitespace().nth(1) {
            path = p.to_string();
        }
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap_or(0),
                    "content-encoding" => gzip = v.trim() == "gzip",
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        counts.requests.fetch_add(1, Ordering::Relaxed);
        counts
            .wire_bytes
            .fetch_add(length as u64, Ordering::Relaxed);
        if path == "/v1/logs" {
            let plain = if gzip {
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut out)?;
                out
            } else {
                body
            };
            use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
            let req = <ExportLogsServiceRequest as prost::Message>::decode(&plain[..])
                .map_err(std::io::Error::other)?;
            for r in req
                .resource_logs
                .iter()
                .flat_map(|r| &r.scope_logs)
                .flat_map(|s| &s.log_records)
            {
                counts.records.fetch_add(1, Ordering::Relaxed);
                if r.event_name == "roce.qp_intervals" {
                    counts.qp_records.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        conn.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        )?;
    }
}

/// The export comparison: the same QPs and traffic, without and with the export.
struct ExportComparison {
    flows: u32,
    window: u32,
    without: Outcome,
    with: Outcome,
    requests: u64,
    wire_bytes: u64,
    records: u64,
    qp_records: u64,
}

impl ExportComparison {
    /// The export's CPU, % of one core over `run` without it.
    fn cost(&self) -> f64 {
        self.with.cpu_percent() - self.without.cpu_percent()
    }

    fn wire_per_qp_interval(&self) -> f64 {
        self.wire_bytes as f64 / self.qp_records.max(1) as f64
    }

    fn wire_per_record(&self) -> f64 {
        self.wire_bytes as f64 / self.records.max(1) as f64
    }

    fn memory_per_qp(&self) -> f64 {
        (self.with.rss_kib as f64 - self.without.rss_kib as f64) * 1024.0 / f64::from(self.flows)
    }

    fn print(&self) {
        println!();
        println!(
            "fleet records' export: {} QPs, every one refreshed twice a second, interval {:?}, window {} intervals, OTLP/HTTP with gzip to a sink in the namespace",
            self.flows, EXPORT_INTERVAL, self.window
        );
        for o in [&self.without, &self.with] {
            println!(
                "  {:<28} {:>7.3}% of one core, RSS {:>6.1} MiB, drain median {:.1} ms",
                o.label,
                o.cpu_percent(),
                o.rss_kib as f64 / 1024.0,
                o.drain_ms().0
            );
        }
        // Where the cost goes: the collector drains wider and reads the messages, the builder
        // makes and encodes the records, the exporter's thread sends them.
        let names: std::collections::BTreeSet<&String> = self
            .without
            .threads
            .keys()
            .chain(self.with.threads.keys())
            .collect();
        let mut by_thread: Vec<String> = names
            .into_iter()
            .map(|n| {
                (
                    n,
                    self.without.thread_percent(n),
                    self.with.thread_percent(n),
                )
            })
            .filter(|(_, a, b)| a.max(*b) >= 0.05)
            .map(|(n, a, b)| format!("{n} {a:.2}% -> {b:.2}%"))
            .collect();
        // Threads that ended within the window (a drain's per-CPU readers): the process's
        // time less its live threads'.
        let [a, b] = [&self.without, &self.with].map(Outcome::ended_threads_percent);
        by_thread.push(format!("threads ended in the window {a:.2}% -> {b:.2}%"));
        println!(
            "  by thread (at least 0.05% in either), without -> with the export: {}",
            by_thread.join(", ")
        );
        let cost = self.cost();
        println!(
            "  export cost: {cost:.3}% of one core over run without it (target {EXPORT_TARGET}%: {})",
            if cost <= EXPORT_TARGET {
                "PASS"
            } else {
                "MISS"
            }
        );
        println!(
            "  on the wire: {:.1} B per QP-interval (all of an interval's rows over its QP rows), {:.1} B per record; {} records ({} QP rows) in {} requests",
            self.wire_per_qp_interval(),
            self.wire_per_record(),
            self.records,
            self.qp_records,
            self.requests
        );
        println!(
            "  userspace memory: {:.0} B per QP more with the export (RSS difference)",
            self.memory_per_qp()
        );
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "flows": self.flows,
            "interval_seconds": EXPORT_INTERVAL.as_secs_f64(),
            "window_intervals": self.window,
            "cpu_percent_without": self.without.cpu_percent(),
            "cpu_percent_with": self.with.cpu_percent(),
            "cost_percent_of_core": self.cost(),
            "ended_threads_percent_of_core": {
                "without": self.without.ended_threads_percent(),
                "with": self.with.ended_threads_percent(),
            },
            "threads_percent_of_core": {
                "without": self.without.threads.keys().map(|n| (n.clone(), self.without.thread_percent(n))).collect::<BTreeMap<_, _>>(),
                "with": self.with.threads.keys().map(|n| (n.clone(), self.with.thread_percent(n))).collect::<BTreeMap<_, _>>(),
            },
            "target_percent_of_core": EXPORT_TARGET,
            "pass": self.cost() <= EXPORT_TARGET,
            "wire_bytes_per_qp_interval": self.wire_per_qp_interval(),
            "wire_bytes_per_record": self.wire_per_record(),
            "records": self.records,
            "qp_records": self.qp_records,
            "requests": self.requests,
            "rss_bytes_per_qp": self.memory_per_qp(),
        })
    }
}

fn export_comparison(
    lab: &Lab,
    bin: &Path,
    flows: u32,
    window: u32,
    started: &Instant,
) -> Result<ExportComparison, String> {
    // Two frames per QP and interval: every QP grows in every interval.
    let rate = flows * 2;
    let run = |export: bool| -> Result<(Outcome, Arc<SinkCounts>), String> {
        eprintln!(
            "bench-daemon: [{:>5.1} s] {flows} QPs at a 1 s interval, {}",
            started.elapsed().as_secs_f64(),
            if export {
                "with the export"
            } else {
                "without the export"
            }
        );
        let (ns, b) = (lab.ns.name().to_string(), bin.to_path_buf());
        let counts = Arc::new(SinkCounts::default());
        let sink = counts.clone();
        let outcome = lab
            .ns
            .run_in(move || {
                let extra = if export {
                    let port = start_sink(sink)?;
                    vec![
                        "--otlp-endpoint".to_string(),
                        format!("http://127.0.0.1:{port}"),
                        "--otlp-protocol".to_string(),
                        "http-protobuf".to_string(),
                    ]
                } else {
                    Vec::new()
                };
                measure(&ns, &b, flows, Some(rate), EXPORT_INTERVAL, window, &extra)
            })
            .map_err(|e| e.to_string())??;
        Ok((outcome, counts))
    };
    let (mut without, _) = run(false)?;
    let (mut with, counts) = run(true)?;
    without.label = format!("{flows}+traffic");
    with.label = format!("{flows}+traffic+export");
    Ok(ExportComparison {
        flows,
        window,
        without,
        with,
        requests: counts.requests.load(Ordering::Relaxed),
        wire_bytes: counts.wire_bytes.load(Ordering::Relaxed),
        records: counts.records.load(Ordering::Relaxed),
        qp_records: counts.qp_records.load(Ordering::Relaxed),
    })
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    integration_tests::bench_main("bench-daemon", "network namespace, XDP, AF_PACKET", || {
        run(&args)
    })
}
