//! Output: [`send`] transmits frames as raw Ethernet on an interface through a
//! [`PacketSocket`]; [`write_pcap`] writes them to a capture file.

use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::workload::Frame;
use super::{SEND_BATCH, SEND_PAUSE, SynthError};

/// Sends frames as raw Ethernet on `iface` (AF_PACKET SOCK_RAW bound to its ifindex), pausing
/// [`SEND_PAUSE`] every [`SEND_BATCH`] frames and retrying when the device queue is full, so that a
/// receiving veth ring never overflows. The waits a scenario makes (a gap of [`WAIT_AT_LEAST`] or
/// more between two frames: an RNR timer, a stall) are waited on the wire too, up to
/// [`MAX_WAIT`] each. Returns the number of frames sent. Frames shorter than an Ethernet header
/// are refused by the kernel (use BPF_PROG_TEST_RUN for those).
pub fn send(iface: &str, frames: &[Frame]) -> Result<usize, SynthError> {
    let socket = PacketSocket::open(iface)?;
    for (index, frame) in frames.iter().enumerate() {
        if index > 0 {
            let gap = frame.ts_ns.saturating_sub(frames[index - 1].ts_ns);
            if gap >= WAIT_AT_LEAST.as_nanos() as u64 {
                std::thread::sleep(Duration::from_nanos(gap).min(MAX_WAIT));
            }
        }
        socket.send(&frame.bytes, index)?;
        if (index + 1) % SEND_BATCH == 0 {
            std::thread::sleep(SEND_PAUSE);
        }
    }
    Ok(frames.len())
}

/// Gaps between frames from which [`send`] waits them out.
pub const WAIT_AT_LEAST: Duration = Duration::from_millis(1);
/// The longest wait [`send`] makes.
pub const MAX_WAIT: Duration = Duration::from_secs(2);

/// An AF_PACKET raw socket bound to one interface, that only sends (open it in the namespace of
/// the interface).
pub struct PacketSocket {
    fd: OwnedFd,
    iface: String,
}

impl PacketSocket {
    pub fn open(iface: &str) -> Result<Self, SynthError> {
        let unknown = || SynthError::UnknownInterface(iface.to_string());
        let name = CString::new(iface).map_err(|_| unknown())?;
        // SAFETY: `name` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(unknown());
        }
        let socket_err = |what, source: io::Error| match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => SynthError::NeedsCapNetRaw(iface.to_string()),
            _ => SynthError::Socket {
                iface: iface.to_string(),
                what,
                source,
            },
        };
        // SAFETY: plain socket(2) call; protocol 0: this socket only sends.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(socket_err("socket(AF_PACKET)", io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: `addr` is a valid sockaddr_ll of the given size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast::<libc::sockaddr>(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(socket_err("bind", io::Error::last_os_error()));
        }
        Ok(Self {
            fd,
            iface: iface.to_string(),
        })
    }

    /// Sends one frame (`index`: its position, for errors), retrying while the device queue
    /// is full.
    pub fn send(&self, bytes: &[u8], index: usize) -> Result<(), SynthError> {
        let len = bytes.len();
        let mut busy = 0;
        loop {
            // SAFETY: the pointer and length describe `bytes`.
            let n = unsafe { libc::send(self.fd.as_raw_fd(), bytes.as_ptr().cast(), len, 0) };
            if n >= 0 {
                let sent = n as usize;
                if sent != len {
                    return Err(SynthError::ShortSend {
                        iface: self.iface.clone(),
                        index,
                        len,
                        sent,
                    });
                }
                return Ok(());
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) if busy < 10_000 => {
                    busy += 1;
                    std::thread::sleep(Duration::from_micros(100));
                }
                _ => {
                    return Err(SynthError::Send {
                        iface: self.iface.clone(),
                        index,
                        len,
                        source: err,
                    });
                }
            }
        }
    }
}

/// `frames` as a classic pcap in memory ([`write_pcap`]).
pub fn pcap_bytes(frames: &[Frame]) -> Result<Vec<u8>, SynthError> {
    let mut out = Vec::new();
    write_pcap(&mut out, frames)?;
    Ok(out)
}

/// Writes a classic pcap (Ethernet link type, nanosecond timestamps).
pub fn write_pcap<W: Write>(w: W, frames: &[Frame]) -> Result<(), SynthError> {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let header = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        snaplen: 65535,
        ..PcapHeader::default()
    };
    let mut writer = PcapWriter::with_header(w, header)?;
    for (index, f) in frames.iter().enumerate() {
        let len = f.bytes.len();
        let orig_len = u32::try_from(len).map_err(|_| SynthError::FrameTooLong { index, len })?;
        let packet = PcapPacket::new(Duration::from_nanos(f.ts_ns), orig_len, &f.bytes);
        writer.write_packet(&packet)?;
    }
    writer.into_writer().flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::synth::scenario;

    #[test]
    fn pcap_round_trip_keeps_bytes_and_timestamps() {
        let w = scenario("e2e").unwrap();
        let mut buf = Vec::new();
        write_pcap(&mut buf, &w.frames).unwrap();
        let mut r = pcap_file::pcap::PcapReader::new(buf.as_slice()).unwrap();
        assert_eq!(r.header().datalink, pcap_file::DataLink::ETHERNET);
        let mut n = 0;
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            let f = &w.frames[n];
            assert_eq!(p.data.as_ref(), f.bytes.as_slice());
            assert_eq!(p.timestamp.as_nanos(), u128::from(f.ts_ns));
            n += 1;
        }
        assert_eq!(n, w.len());
    }

    #[test]
    fn send_names_an_unknown_interface() {
        let err = send("synth-nonexistent0", &[]).unwrap_err();
        assert!(matches!(&err, SynthError::UnknownInterface(n) if n == "synth-nonexistent0"));
        assert!(err.to_string().contains("synth-nonexistent0"));
        assert!(matches!(
            send("bad\0name", &[]),
            Err(SynthError::UnknownInterface(_))
        ));
    }
}
