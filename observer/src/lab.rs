//! A network-namespace lab: a namespace holding a veth pair, removed on drop. Used by the demo
//! and the privileged tests. Nothing in it has an address outside 198.18.0.0/15 (in fact the
//! interfaces get no address at all, and IPv6 is off, so the kernel itself sends nothing: every
//! frame the observer sees is one the lab's user sent).

use std::{
    fs::File,
    os::fd::AsRawFd,
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("`{cmd}` failed: {stderr}")]
    Command { cmd: String, stderr: String },
    #[error("cannot run `{cmd}`: {error}")]
    Spawn { cmd: String, error: std::io::Error },
    #[error("cannot enter network namespace {ns}: {error}")]
    Setns { ns: String, error: std::io::Error },
    #[error("the lab thread panicked")]
    Panicked,
}

fn run(args: &[&str]) -> Result<(), LabError> {
    let cmd = args.join(" ");
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|error| LabError::Spawn {
            cmd: cmd.clone(),
            error,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(LabError::Command {
            cmd,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

static SERIAL: AtomicU32 = AtomicU32::new(0);

/// A network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `<prefix>-<pid>-<n>`.
    pub fn create(prefix: &str) -> Result<Self, LabError> {
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        run(&["ip", "netns", "add", &name])?;
        let ns = Self { name };
        // No IPv6 (no router solicitations, no MLD): the kernel sends nothing on its own.
        for key in ["all", "default"] {
            ns.exec_checked(&[
                "sysctl",
                "-qw",
                &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
            ])?;
        }
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip netns exec <ns> program`.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    fn exec_checked(&self, args: &[&str]) -> Result<(), LabError> {
        let mut full = vec!["ip", "netns", "exec", &self.name];
        full.extend_from_slice(args);
        run(&full)
    }

    /// Runs `f` on a thread inside the namespace (sockets it opens belong to the namespace).
    pub fn run_in<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, LabError> {
        let path = format!("/run/netns/{}", self.name);
        let ns = self.name.clone();
        let file = File::open(&path).map_err(|error| LabError::Setns {
            ns: ns.clone(),
            error,
        })?;
        std::thread::spawn(move || {
            // SAFETY: a valid namespace fd; affects this thread only.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(LabError::Setns {
                    ns,
                    error: std::io::Error::last_os_error(),
                });
            }
            Ok(f())
        })
        .join()
        .map_err(|_| LabError::Panicked)?
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace removes its veth pair too.
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

/// A namespace with a veth pair: frames sent on `tx` arrive on `rx`, where the observer sits.
#[derive(Debug)]
pub struct Lab {
    pub ns: Netns,
    pub rx: String,
    pub tx: String,
}

impl Lab {
    pub const RX: &str = "rx0";
    pub const TX: &str = "tx0";

    pub fn create(prefix: &str) -> Result<Self, LabError> {
        let ns = Netns::create(prefix)?;
        ns.exec_checked(&[
            "ip",
            "link",
            "add",
            Self::RX,
            "type",
            "veth",
            "peer",
            "name",
            Self::TX,
        ])?;
        for dev in [Self::RX, Self::TX] {
            ns.exec_checked(&["ip", "link", "set", dev, "up"])?;
        }
        Ok(Self {
            ns,
            rx: Self::RX.to_string(),
            tx: Self::TX.to_string(),
        })
    }
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Result<Vec<usize>, std::io::Error> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_ISSET stays inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|c| libc::CPU_ISSET(*c, &set))
            .collect())
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread_to(cpu: usize) -> Result<(), std::io::Error> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Pins the calling thread to the first CPU it may run on. On veth, XDP runs on the sending
/// CPU: a sender that migrates would spread one flow over several per-CPU values, which a NIC's
/// RSS never does.
pub fn pin_current_thread() -> Result<(), std::io::Error> {
    let first = *allowed_cpus()?
        .first()
        .ok_or_else(|| std::io::Error::other("no CPU allowed"))?;
    pin_current_thread_to(first)
}

/// The lab link program on one interface's egress in a namespace: the RoCEv2 frames that left
/// there, and a fault (drop or CE-mark a share) set and cleared at will. Detached when dropped
/// (and with its namespace).
pub struct LinkTap {
    ebpf: aya::Ebpf,
    pub ns: String,
    pub iface: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LinkTapError {
    #[error("this build has no kernel programs (built without the `live` feature)")]
    NoKernelPrograms,
    #[error("the lab link program on {iface}: {what}: {detail}")]
    Bpf {
        iface: String,
        what: &'static str,
        detail: String,
    },
    #[error(transparent)]
    Lab(#[from] LabError),
}

impl LinkTap {
    /// Loads the program and attaches it to `iface`'s egress inside `ns`.
    pub fn attach(ns: &Netns, iface: &str) -> Result<Self, LinkTapError> {
        if crate::LAB_OBJECT.is_empty() {
            return Err(LinkTapError::NoKernelPrograms);
        }
        let name = iface.to_string();
        let ebpf = ns.run_in(move || {
            let fail = |what, detail: String| LinkTapError::Bpf {
                iface: name.clone(),
                what,
                detail,
            };
            let mut ebpf =
                aya::Ebpf::load(crate::LAB_OBJECT).map_err(|e| fail("load", e.to_string()))?;
            let prog: &mut aya::programs::SchedClassifier = ebpf
                .program_mut("lab_link")
                .ok_or_else(|| fail("find", "no lab_link program".into()))?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| fail("find", e.to_string()))?;
            prog.load().map_err(|e| fail("verify", e.to_string()))?;
            // tcx where the kernel has it (from 6.6); a clsact qdisc before.
            let _ = aya::programs::tc::qdisc_add_clsact(&name);
            prog.attach(&name, aya::programs::TcAttachType::Egress)
                .map_err(|e| fail("attach", e.to_string()))?;
            Ok::<_, LinkTapError>(ebpf)
        })??;
        Ok(Self {
            ebpf,
            ns: ns.name().to_string(),
            iface: iface.to_string(),
        })
    }

    fn error(&self, what: &'static str, detail: impl ToString) -> LinkTapError {
        LinkTapError::Bpf {
            iface: self.iface.clone(),
            what,
            detail: detail.to_string(),
        }
    }

    /// Sets the fault (zero for none).
    pub fn set_fault(&mut self, fault: observer_common::LabFault) -> Result<(), LinkTapError> {
        let iface = self.iface.clone();
        let fail = |detail: String| LinkTapError::Bpf {
            iface: iface.clone(),
            what: "set the fault",
            detail,
        };
        let map = self
            .ebpf
            .map_mut(observer_common::lab::LAB_FAULT)
            .ok_or_else(|| fail("no map".into()))?;
        let mut a: aya::maps::Array<_, observer_common::LabFault> =
            aya::maps::Array::try_from(map).map_err(|e| fail(e.to_string()))?;
        a.set(0, fault, 0).map_err(|e| fail(e.to_string()))
    }

    /// The counts so far, summed over CPUs.
    pub fn counts(&self) -> Result<observer_common::LabCounts, LinkTapError> {
        let map = self
            .ebpf
            .map(observer_common::lab::LAB_COUNTS)
            .ok_or_else(|| self.error("read the counts", "no map"))?;
        let a: aya::maps::PerCpuArray<_, observer_common::LabCounts> =
            aya::maps::PerCpuArray::try_from(map).map_err(|e| self.error("read the counts", e))?;
        let per_cpu = a.get(&0, 0).map_err(|e| self.error("read the counts", e))?;
        Ok(per_cpu
            .iter()
            .fold(observer_common::LabCounts::default(), |mut s, c| {
                s.frames += c.frames;
                s.dropped += c.dropped;
                s.marked += c.marked;
                s
            }))
    }
}
