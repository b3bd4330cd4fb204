//! Shared helpers of the privileged integration tests.

use std::{
    io::{BufRead, BufReader, Read},
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
};

use roce_observer::{aggregate::Aggregate, lab::Netns, source::synth::Truth};
use roce_observer_cli::ATTACHED;

/// True when the test may run privileged code. Not root: skip loudly, except under CI
/// (CI runs as root, so a skip there is a failure).
pub fn require_root(test: &str) -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test}: privileged test would be SKIPPED (not root) but CI is set: failing");
    }
    eprintln!(
        "\n*** SKIPPED {test}: needs root (BPF, netns, veth). Run as root: cargo xtask test ***\n"
    );
    false
}

/// The ground truth of a synthetic workload as an [`Aggregate`].
pub fn truth_aggregate(t: &Truth) -> Aggregate {
    Aggregate {
        flows: t.flows.iter().map(|(k, v)| (*k, *v)).collect(),
        pauses: t.pauses.clone(),
        counters: t.counters,
    }
}

/// A `roce-observer diagnose` running in a namespace, attached (its "attached" line read).
pub struct Diagnose {
    pub child: Child,
    stderr: BufReader<std::process::ChildStderr>,
    pub stderr_text: String,
}

impl Diagnose {
    /// Starts `cli diagnose ARGS` in `ns` and waits until it has attached.
    pub fn start(ns: &Netns, cli: &Path, args: &[&str]) -> Self {
        Self::start_command(ns, cli, "diagnose", args)
    }

    /// Starts `cli COMMAND ARGS` (a command that observes live) in `ns` and waits until it has
    /// attached.
    pub fn start_command(ns: &Netns, cli: &Path, command: &str, args: &[&str]) -> Self {
        let mut child = ns
            .command(cli)
            .arg(command)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn diagnose");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut text = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                let status = child.wait().unwrap();
                panic!("diagnose exited ({status}) before attaching: {text}");
            }
            text.push_str(&line);
            if line.starts_with(ATTACHED) {
                break;
            }
        }
        Self {
            child,
            stderr,
            stderr_text: text,
        }
    }

    /// Waits for the end; returns status, stdout, and all of stderr.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.stderr.read_to_string(&mut self.stderr_text).unwrap();
        let status = self.child.wait().unwrap();
        (status, out, self.stderr_text)
    }
}

/// Runs a command to completion: (status, stdout, stderr).
pub fn output(cmd: &mut Command) -> (ExitStatus, String, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("run command");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `cmd` with `input` on its standard input (written whole, then closed) and its output
/// captured.
pub fn run_with_input(cmd: &mut Command, input: &[u8]) -> std::io::Result<std::process::Output> {
    use std::io::Write;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input)?;
    child.wait_with_output()
}

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

/// `ip -d link show DEV` inside the namespace.
pub fn link_details(ns: &Netns, dev: &str) -> String {
    let (status, out, err) = output(ns.command("ip").args(["-d", "link", "show", dev]));
    assert!(status.success(), "ip link show {dev}: {err}");
    out
}

/// Whether an XDP program is attached to DEV (iproute2 prints "prog/xdp" for it).
pub fn has_xdp(ns: &Netns, dev: &str) -> bool {
    link_details(ns, dev).contains("prog/xdp")
}

/// The kernel object with one of its XDP programs loaded (verified).
pub fn load_program(name: &str) -> aya::Ebpf {
    let mut ebpf = aya::EbpfLoader::new()
        .load(roce_observer::EBPF_OBJECT)
        .expect("load object");
    xdp_mut(&mut ebpf, name)
        .load()
        .unwrap_or_else(|e| panic!("verifier rejects {name}: {e}"));
    ebpf
}

/// An XDP program of the object.
pub fn xdp_mut<'a>(ebpf: &'a mut aya::Ebpf, name: &str) -> &'a mut aya::programs::Xdp {
    ebpf.program_mut(name)
        .unwrap_or_else(|| panic!("no program {name}"))
        .try_into()
        .expect("an XDP program")
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

/// Report flows without what depends on timing (times, rate), in a fixed order.
pub fn timeless(flows: &[roce_observer::model::Flow]) -> Vec<roce_observer::model::Flow> {
    let mut v: Vec<roce_observer::model::Flow> = flows
        .iter()
        .cloned()
        .map(|mut f| {
            f.first_seen_ns = 0;
            f.last_seen_ns = 0;
            f.rate_bps = 0.0;
            f
        })
        .collect();
    v.sort_by_key(|f| {
        (
            f.src_ip,
            f.dst_ip,
            f.dest_qp,
            f.udp_src_port,
            f.mirror.as_ref().and_then(|m| m.session),
            f.direction,
        )
    });
    v
}

/// A packet socket on `dev` in the lab: every frame that reaches the stack there.
pub fn tap(lab: &roce_observer::lab::Lab, dev: &'static str) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    lab.ns
        .run_in(move || unsafe {
            let fd = libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK,
                (libc::ETH_P_ALL as u16).to_be() as i32,
            );
            assert!(
                fd >= 0,
                "packet socket: {}",
                std::io::Error::last_os_error()
            );
            let mut addr: libc::sockaddr_ll = std::mem::zeroed();
            addr.sll_family = libc::AF_PACKET as u16;
            addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
            let name = std::ffi::CString::new(dev).unwrap();
            addr.sll_ifindex = libc::if_nametoindex(name.as_ptr()) as i32;
            let rc = libc::bind(
                fd,
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
            let size: libc::c_int = 64 << 20;
            let rc = libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&raw const size).cast(),
                4,
            );
            assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
            std::os::fd::OwnedFd::from_raw_fd(fd)
        })
        .unwrap()
}

/// Every frame queued on a tap, in order.
pub fn received(fd: &std::os::fd::OwnedFd) -> Vec<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return frames;
        }
        frames.push(buf[..n as usize].to_vec());
    }
}

/// The frames of a classic little-endian pcap file (what the shared captures are).
pub fn pcap_frames(path: &std::path::Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(
        b[..4],
        [0xD4, 0xC3, 0xB2, 0xA1],
        "{}: a little-endian pcap",
        path.display()
    );
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let caplen = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        frames.push(b[at + 16..at + 16 + caplen].to_vec());
        at += 16 + caplen;
    }
    assert_eq!(at, b.len(), "{}: whole records", path.display());
    frames
}

/// The files of `../shared/captures/SUB`, sorted; `None` (loudly) when the folder is missing
/// outside CI, a failure under CI.
pub fn shared_capture_files(test: &str, sub: &str) -> Option<Vec<std::path::PathBuf>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/captures")
        .join(sub);
    if !dir.is_dir() {
        if std::env::var_os("CI").is_some() {
            panic!("{test}: {} missing under CI", dir.display());
        }
        eprintln!("\n*** SKIPPED {test}: {} missing ***\n", dir.display());
        return None;
    }
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    Some(files)
}

/// A scratch folder under the temporary directory, new (a stale one of the same name is
/// removed first) and removed on drop.
pub struct Scratch(std::path::PathBuf);

impl Scratch {
    /// `roce-{tag}-{pid}`: unique per test binary run and tag.
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("roce-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }

    /// Writes `content` to the file `name`; its path.
    pub fn file(&self, name: &str, content: &str) -> std::path::PathBuf {
        let p = self.path(name);
        std::fs::write(&p, content).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every sample name `roce-observer run` exports (counters with their `_total`): the sidecar
/// test checks a scrape has exactly these, the deploy test that the rules and dashboard use
/// only these.
pub const EXPORTED_METRICS: &[&str] = &[
    // Per interface.
    "roce_iface_frames_total",
    "roce_iface_frame_bytes_total",
    "roce_packets_total",
    "roce_bytes_total",
    "roce_ecn_packets_total",
    "roce_op_packets_total",
    // Per queue pair (top K plus qp="rest").
    "roce_qp_packets_total",
    "roce_qp_bytes_total",
    "roce_qp_ce_packets_total",
    "roce_qp_cnp_packets_total",
    "roce_qp_nak_packets_total",
    "roce_qp_rnr_nak_packets_total",
    "roce_qp_psn_gaps_total",
    "roce_qp_psn_missing_total",
    "roce_qp_retransmissions_total",
    // The daemon itself.
    "roce_observer_info",
    "roce_observer_interface_attached",
    "roce_observer_interface_up",
    "roce_observer_reattachments_total",
    "roce_observer_drain_seconds",
    "roce_observer_drains_total",
    "roce_observer_flows_tracked",
    "roce_observer_flow_table_entries",
    "roce_observer_flow_table_capacity",
    "roce_observer_flow_table_fill_ratio",
    "roce_observer_flow_evictions_total",
    "roce_observer_unattributed_packets_total",
    "roce_observer_flows_aged_total",
    "roce_observer_series",
    "roce_observer_max_series",
    "roce_observer_series_demotions_total",
    "roce_observer_cpu_seconds_total",
    "roce_observer_resident_memory_bytes",
    "roce_observer_skipped_frames_total",
    "roce_observer_config_reloads_total",
    "roce_observer_interval_seconds",
];
