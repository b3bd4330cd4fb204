//! Link events: a netlink socket that wakes the collector when an interface changes, and the
//! wait on it (and on the signal handlers' wake-up socket).

use std::{
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    time::Duration,
};

/// A netlink socket subscribed to link events (RTMGRP_LINK), non-blocking; None if the kernel
/// refuses (the interval's check then finds changes).
pub(super) fn link_events() -> Option<OwnedFd> {
    // SAFETY: plain socket/bind calls on a zeroed sockaddr_nl.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::NETLINK_ROUTE,
        );
        if fd < 0 {
            return None;
        }
        let fd = OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_nl = std::mem::zeroed();
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = libc::RTMGRP_LINK as u32;
        let rc = libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        );
        (rc == 0).then_some(fd)
    }
}

/// Reads everything waiting on a non-blocking socket (the events only wake us).
pub(super) fn drain_socket(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 8192];
    loop {
        // SAFETY: reading into a local buffer.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            break;
        }
    }
}

/// Waits up to `timeout` for a link event or a wake-up: (link event, woken).
pub(super) fn wait(
    netlink: Option<BorrowedFd<'_>>,
    wake: BorrowedFd<'_>,
    timeout: Duration,
) -> (bool, bool) {
    let mut fds = vec![libc::pollfd {
        fd: wake.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if let Some(n) = netlink {
        fds.push(libc::pollfd {
            fd: n.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
    }
    // Rounded up: rounding down would spin for the last fraction of a millisecond.
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: a valid array of pollfd.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc <= 0 {
        return (false, false);
    }
    let woken = fds[0].revents != 0;
    let link = fds.get(1).is_some_and(|f| f.revents != 0);
    (link, woken)
}
