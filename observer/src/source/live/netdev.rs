//! Network devices: interface indexes and states, link speeds, promiscuous mode, and the
//! capabilities live capture needs.

use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd, FromRawFd},
    path::Path,
};

use super::LiveError;
use crate::source::nic::number;

/// Promiscuous mode on an interface for as long as this lives: a packet-socket membership
/// (PACKET_MR_PROMISC), which the kernel counts and releases when the socket closes, also when
/// the process is killed; it does not undo promiscuous mode somebody else asked for.
pub struct Promiscuous {
    _socket: std::os::fd::OwnedFd,
}

impl Promiscuous {
    pub fn enable(iface: &str) -> Result<Self, LiveError> {
        let fail = |source| LiveError::Promiscuous {
            iface: iface.to_string(),
            source,
        };
        let index = if_index(iface)?;
        // SAFETY: plain socket/setsockopt calls; protocol 0: the socket receives nothing.
        unsafe {
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(fail(io::Error::last_os_error()));
            }
            let socket = std::os::fd::OwnedFd::from_raw_fd(fd);
            let mut mreq: libc::packet_mreq = std::mem::zeroed();
            mreq.mr_ifindex = index as libc::c_int;
            mreq.mr_type = libc::PACKET_MR_PROMISC as libc::c_ushort;
            let rc = libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                (&raw const mreq).cast(),
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            );
            if rc != 0 {
                return Err(fail(io::Error::last_os_error()));
            }
            Ok(Self { _socket: socket })
        }
    }
}

/// The ifindex of `name`, or `UnknownInterface`.
pub fn if_index(name: &str) -> Result<u32, LiveError> {
    let c = CString::new(name).map_err(|_| LiveError::UnknownInterface(name.to_string()))?;
    // SAFETY: a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(LiveError::UnknownInterface(name.to_string())),
        i => Ok(i),
    }
}

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Checks the effective capabilities live capture needs: CAP_BPF and CAP_PERFMON (or
/// CAP_SYS_ADMIN for both) and CAP_NET_ADMIN.
pub fn check_privileges() -> Result<(), LiveError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u32| eff & (1u64 << cap) != 0;
    let mut missing = Vec::new();
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_NET_ADMIN) {
        missing.push("CAP_NET_ADMIN");
    }
    // Without it the verifier refuses the program's pointer arithmetic on packet data.
    if !has(CAP_PERFMON) && !has(CAP_SYS_ADMIN) {
        missing.push("CAP_PERFMON");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(LiveError::NotPrivileged {
            missing: missing.join("+"),
            // SAFETY: getuid cannot fail.
            uid: unsafe { libc::getuid() },
        })
    }
}

/// The speed the interfaces report (sysfs, Mb/s), in bits/s, when they all report the same.
pub fn interfaces_speed(ifaces: &[String]) -> Option<u64> {
    let speeds: Vec<Option<u64>> = ifaces
        .iter()
        .map(|i| {
            std::fs::read_to_string(format!("/sys/class/net/{i}/speed"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .filter(|mbps| *mbps > 0)
                .map(|mbps| mbps as u64 * 1_000_000)
        })
        .collect();
    match speeds.first() {
        Some(Some(first)) if speeds.iter().all(|s| *s == Some(*first)) => Some(*first),
        _ => None,
    }
}

/// Frames `iface`'s device dropped so far for lack of buffer space, before any XDP program
/// ran: its `rx_missed_errors`, RoCE or not, with the device's index (which tells a device made
/// again under the same name). None when it cannot be read, or when sysfs shows another
/// network namespace's `iface` (it shows the namespace it was mounted in, not this process's).
///
/// What a driver counts there varies: mlx5 its receive queues' `rx_out_of_buffer` (in
/// `rx_dropped` before Linux 6.10), ixgbe its packet buffer's overflows (a full ring of one
/// queue is `rx_no_dma_resources`, in `ethtool -S` only), ice its port buffer's drops (a full
/// ring in `rx_dropped`). `rx_dropped` is not used: it also counts frames the stack dropped
/// after the observer, such as an unknown ethertype's.
pub fn receive_missed(iface: &str) -> Option<(u32, u64)> {
    let dev = Path::new("/sys/class/net").join(iface);
    let index = if_index(iface).ok()?;
    if number(&dev.join("ifindex"))? != u64::from(index) {
        return None;
    }
    Some((index, number(&dev.join("statistics/rx_missed_errors"))?))
}

/// Whether `iface` is up and running (IFF_UP and IFF_RUNNING), None when it does not exist.
pub fn link_up(iface: &str) -> Option<bool> {
    let name = CString::new(iface).ok()?;
    if name.as_bytes().len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: a datagram socket for the ioctl, closed by OwnedFd; ifreq zeroed then named.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let socket = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut req: libc::ifreq = std::mem::zeroed();
        for (d, s) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
            *d = *s as libc::c_char;
        }
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return None;
        }
        let flags = req.ifr_ifru.ifru_flags as libc::c_int;
        Some(flags & libc::IFF_UP != 0 && flags & libc::IFF_RUNNING != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_are_read_as_sysfs_writes_them() {
        let net = std::env::temp_dir().join(format!("roce-netdev-stats-{}", std::process::id()));
        let stats = net.join("rx0").join("statistics");
        std::fs::create_dir_all(&stats).unwrap();
        std::fs::write(stats.join("rx_missed_errors"), "18446744073709551615\n").unwrap();
        std::fs::write(stats.join("rx_dropped"), "garbage\n").unwrap();
        assert_eq!(number(&stats.join("rx_missed_errors")), Some(u64::MAX));
        assert_eq!(number(&stats.join("rx_dropped")), None);
        assert_eq!(number(&stats.join("rx_fifo_errors")), None);
        let other = net.join("rx1").join("statistics").join("rx_missed_errors");
        assert_eq!(number(&other), None);
        std::fs::remove_dir_all(&net).unwrap();
        // A live device: its counter is the kernel's, whatever it is, with its index.
        assert_eq!(
            receive_missed("lo").map(|(index, _)| index),
            Some(if_index("lo").unwrap())
        );
        assert_eq!(receive_missed("no-such-interface"), None);
    }
}
