//! Privileges and network namespaces: the root check, link state, and taps on lab interfaces.

use roce_observer::lab::Netns;

use crate::cli::output;

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

/// `ip -d link show DEV` inside the namespace.
pub fn link_details(ns: &Netns, dev: &str) -> String {
    let (status, out, err) = output(ns.command("ip").args(["-d", "link", "show", dev]));
    assert!(status.success(), "ip link show {dev}: {err}");
    out
}

/// Whether `detached` holds within two seconds, polled every 10 ms: after the test drops the last
/// handle of a BPF link, a child that a concurrent test forked in the same process may still hold
/// a copy of the link's descriptor until its exec closes it, and the kernel detaches only then.
pub fn detached_soon(mut detached: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        if detached() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Whether an XDP program is attached to DEV (iproute2 prints "prog/xdp" for it).
pub fn has_xdp(ns: &Netns, dev: &str) -> bool {
    link_details(ns, dev).contains("prog/xdp")
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

/// Holds CPU `cpu` with a real-time thread for `for_ms`: the cpumap queue of that CPU then fills
/// (its kernel thread is an ordinary task; the kernel's real-time throttling still leaves it 5%
/// of each second, so the hold ends by itself whatever happens).
pub fn hold_cpu(cpu: usize, for_ms: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        roce_observer::lab::pin_current_thread_to(cpu).unwrap();
        let param = libc::sched_param { sched_priority: 10 };
        // SAFETY: this thread's own scheduling policy.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
        assert_eq!(rc, 0, "SCHED_FIFO: {}", std::io::Error::last_os_error());
        let until = std::time::Instant::now() + std::time::Duration::from_millis(for_ms);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
    })
}
