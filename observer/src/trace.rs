//! `roce-observer trace`: Paris traceroute for RoCE. Each probe is a UDP datagram to port 4791
//! with a QP's exact addresses, UDP source port and DSCP (ECT(0) set, as RoCE's), so every
//! switch hashes it onto the QP's own equal-cost path; only the TTL grows, probe by probe.
//! Routers answer with ICMP time-exceeded, which the kernel hands to the probe's own socket
//! (`IP_RECVERR`): no raw socket, and no answer that is not about one of our probes.
//!
//! The probe carries a BTH naming a QP (by default one that does not exist) and a wrong ICRC,
//! so a RoCE NIC at the far end drops it; a host without RoCE answers port-unreachable. Probes
//! go only to the addresses given (never multicast, broadcast, loopback or unspecified), one at
//! a time per QP and at most `rate` per second in all.
//!
//! Written here rather than taken from a traceroute library: the probe must carry a BTH and
//! keep the QP's source port, DSCP and ECN, which none of them lets a caller set together.

use std::{
    io::IoSliceMut,
    net::{IpAddr, SocketAddr},
    os::fd::{AsRawFd, OwnedFd},
    time::{Duration, Instant},
};

use nix::sys::socket::{
    self, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType, SockaddrStorage,
    sockopt,
};
use serde::{Deserialize, Serialize};

pub use crate::model::trace::{Answer, End, Hop, TRACE_SCHEMA, Trace, TraceFile};

/// The RoCEv2 UDP port every probe goes to.
pub const ROCE_PORT: u16 = 4791;

/// The destination QP a probe names by default: a QP number no NIC hands out early (QP numbers
/// are allocated upwards; 0xffffff is multicast's).
pub const DEFAULT_DEST_QP: u32 = 0x00ff_fffe;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("trace to {to}: refused: {why}")]
    Refused { to: IpAddr, why: String },
    #[error("trace {flow}: {what}: {source}")]
    Socket {
        flow: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// One QP direction to trace: its addresses, UDP source port and DSCP.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    /// The local address to send from (the QP's source); any, when not given.
    pub src: Option<IpAddr>,
    pub dst: IpAddr,
    pub sport: u16,
    pub dscp: u8,
    /// The QP the probe's BTH names (switches that hash on BTH fields need the QP's own).
    pub dest_qp: u32,
}

impl Flow {
    fn name(&self) -> String {
        match self.src {
            Some(s) => format!("{}:{} -> {}", s, self.sport, self.dst),
            None => format!(":{} -> {}", self.sport, self.dst),
        }
    }

    /// Why a probe may not go to this flow's destination, if it may not.
    pub fn refusal(&self) -> Option<String> {
        let to = self.dst;
        if let IpAddr::V6(a) = to
            && a.to_ipv4_mapped().is_some()
        {
            return Some("an IPv4-mapped IPv6 address: give the IPv4 address".into());
        }
        let bad = match to {
            IpAddr::V4(a) => {
                (a.is_unspecified() || a.is_multicast() || a.is_broadcast() || a.is_loopback())
                    .then_some("not a unicast address of another host")
            }
            IpAddr::V6(a) => (a.is_unspecified() || a.is_multicast() || a.is_loopback())
                .then_some("not a unicast address of another host"),
        };
        if let Some(b) = bad {
            return Some(b.into());
        }
        if self.src.is_some_and(|s| s.is_ipv4() != to.is_ipv4()) {
            return Some("the source and destination are of different IP versions".into());
        }
        if self.sport == 0 {
            return Some("source port 0: the QP's source port fixes its path".into());
        }
        if self.dscp > 63 {
            return Some(format!("DSCP {} is above 63", self.dscp));
        }
        if self.dest_qp > 0x00ff_ffff {
            return Some(format!("QP {:#x} does not fit in 24 bits", self.dest_qp));
        }
        None
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    /// The largest TTL (hop limit) tried.
    pub max_ttl: u8,
    /// How long a probe's answer is awaited.
    pub wait: Duration,
    /// Probes a TTL gets before it is left unanswered.
    pub attempts: u8,
    /// Unanswered TTLs in a row that end a trace (the far NIC of a RoCE host says nothing).
    pub gaps: u8,
    /// Probes per second, over all flows.
    pub rate: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_ttl: 16,
            wait: Duration::from_millis(500),
            attempts: 2,
            gaps: 2,
            rate: 20,
        }
    }
}

/// A probe's payload: a BTH (RC SEND only, the QP named, PSN = TTL and attempt, so a late
/// answer finds its probe) and an ICRC of zeros, which no NIC accepts.
fn payload(dest_qp: u32, ttl: u8, attempt: u8) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[0] = 0x04;
    p[2] = 0xff;
    p[3] = 0xff;
    p[5..8].copy_from_slice(&dest_qp.to_be_bytes()[1..]);
    p[10] = ttl;
    p[11] = attempt;
    p
}

struct State {
    flow: Flow,
    fd: OwnedFd,
    src: IpAddr,
    ttl: u8,
    attempt: u8,
    /// When the outstanding probe went out; none when none is.
    sent: Option<Instant>,
    silent_run: u8,
    max_ttl: u8,
    hops: Vec<Hop>,
    end: Option<End>,
}

fn io_err(e: nix::Error) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

fn open(flow: &Flow) -> Result<(OwnedFd, IpAddr), TraceError> {
    let fail = |what, e: nix::Error| TraceError::Socket {
        flow: flow.name(),
        what,
        source: io_err(e),
    };
    let v4 = flow.dst.is_ipv4();
    let family = if v4 {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket::socket(
        family,
        SockType::Datagram,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| fail("open a UDP socket", e))?;
    // The QP's own source port may be held by a RoCE stack's socket (Soft-RoCE) or a generator
    // that allows sharing it.
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true).map_err(|e| fail("SO_REUSEADDR", e))?;
    let tos = i32::from(flow.dscp) << 2 | 0b10;
    if v4 {
        socket::setsockopt(&fd, sockopt::Ipv4RecvErr, &true).map_err(|e| fail("IP_RECVERR", e))?;
        socket::setsockopt(&fd, sockopt::IpTos, &tos).map_err(|e| fail("IP_TOS", e))?;
    } else {
        socket::setsockopt(&fd, sockopt::Ipv6RecvErr, &true)
            .map_err(|e| fail("IPV6_RECVERR", e))?;
        socket::setsockopt(&fd, sockopt::Ipv6TClass, &tos).map_err(|e| fail("IPV6_TCLASS", e))?;
        // A constant flow label (0) rather than one drawn per socket: routers that hash it
        // must see the same one on every probe.
        let off: libc::c_int = 0;
        // SAFETY: a valid socket and an int option.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_IPV6,
                libc::IPV6_AUTOFLOWLABEL,
                (&raw const off).cast(),
                size_of::<libc::c_int>() as u32,
            )
        };
        if rc != 0 {
            return Err(TraceError::Socket {
                flow: flow.name(),
                what: "IPV6_AUTOFLOWLABEL",
                source: std::io::Error::last_os_error(),
            });
        }
    }
    let any: IpAddr = if v4 {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let local = SockaddrStorage::from(SocketAddr::new(flow.src.unwrap_or(any), flow.sport));
    socket::bind(fd.as_raw_fd(), &local)
        .map_err(|e| fail("bind the source address and port", e))?;
    let remote = SockaddrStorage::from(SocketAddr::new(flow.dst, ROCE_PORT));
    socket::connect(fd.as_raw_fd(), &remote).map_err(|e| fail("connect", e))?;
    let me: SockaddrStorage =
        socket::getsockname(fd.as_raw_fd()).map_err(|e| fail("getsockname", e))?;
    let src = me
        .as_sockaddr_in()
        .map(|a| IpAddr::from(a.ip()))
        .or_else(|| me.as_sockaddr_in6().map(|a| IpAddr::from(a.ip())))
        .unwrap_or(any);
    Ok((fd, src))
}

impl State {
    fn send(&mut self, now: Instant) -> Result<(), TraceError> {
        let name = self.flow.name();
        let fail = |what, e: nix::Error| TraceError::Socket {
            flow: name.clone(),
            what,
            source: io_err(e),
        };
        let ttl = i32::from(self.ttl);
        if self.flow.dst.is_ipv4() {
            socket::setsockopt(&self.fd, sockopt::Ipv4Ttl, &ttl).map_err(|e| fail("IP_TTL", e))?;
        } else {
            socket::setsockopt(&self.fd, sockopt::Ipv6Ttl, &ttl)
                .map_err(|e| fail("IPV6_UNICAST_HOPS", e))?;
        }
        let p = payload(self.flow.dest_qp, self.ttl, self.attempt);
        // An ICMP answer that came in since the last read fails the next send (which sends
        // nothing, and clears the error): read what is queued (no probe is outstanding, so a
        // short quote is dropped), then send again.
        for _ in 0..2 {
            match socket::send(self.fd.as_raw_fd(), &p, MsgFlags::empty()) {
                Ok(_) => break,
                Err(
                    nix::Error::EHOSTUNREACH | nix::Error::ENETUNREACH | nix::Error::ECONNREFUSED,
                ) => {
                    self.read(now);
                    if self.end.is_some() {
                        return Ok(());
                    }
                }
                Err(e) => return Err(fail("send a probe", e)),
            }
        }
        self.sent = Some(now);
        Ok(())
    }

    /// Reads the answers queued on the socket.
    fn read(&mut self, now: Instant) {
        loop {
            let mut data = [0u8; 64];
            let mut iov = [IoSliceMut::new(&mut data)];
            let mut cmsg = nix::cmsg_space!(libc::sock_extended_err, libc::sockaddr_in6);
            let Ok(msg) = socket::recvmsg::<SockaddrStorage>(
                self.fd.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
            ) else {
                // The queue is empty; an error the kernel set after queueing its answer (read
                // already) would keep poll reporting POLLERR: clear it.
                let _ = socket::getsockopt(&self.fd, sockopt::SocketError);
                return;
            };
            let len = msg.bytes;
            let mut answer = None;
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    match c {
                        ControlMessageOwned::Ipv4RecvErr(e, from)
                            if e.ee_origin == libc::SO_EE_ORIGIN_ICMP =>
                        {
                            let who = from.map(|a| {
                                IpAddr::from(std::net::Ipv4Addr::from(u32::from_be(
                                    a.sin_addr.s_addr,
                                )))
                            });
                            answer = Some((e.ee_type, e.ee_code, who, false));
                        }
                        ControlMessageOwned::Ipv6RecvErr(e, from)
                            if e.ee_origin == libc::SO_EE_ORIGIN_ICMP6 =>
                        {
                            let who = from.map(|a| {
                                IpAddr::from(std::net::Ipv6Addr::from(a.sin6_addr.s6_addr))
                            });
                            answer = Some((e.ee_type, e.ee_code, who, true));
                        }
                        _ => {}
                    }
                }
            }
            let Some((icmp_type, code, who, v6)) = answer else {
                continue;
            };
            // The probe answered: its PSN when the ICMP quoted it, else the outstanding one (a
            // router quoting only the UDP header): with none outstanding it cannot be placed.
            let (ttl, attempt) = if len >= 12 {
                (data[10], data[11])
            } else if self.sent.is_some() {
                (self.ttl, self.attempt)
            } else {
                continue;
            };
            self.answered(ttl, attempt, icmp_type, code, who, v6, now);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn answered(
        &mut self,
        ttl: u8,
        attempt: u8,
        icmp_type: u8,
        code: u8,
        who: Option<IpAddr>,
        v6: bool,
        now: Instant,
    ) {
        if self.end.is_some() || ttl == 0 || ttl > self.ttl {
            return;
        }
        let (time_exceeded, port_unreachable) = if v6 {
            (icmp_type == 3, icmp_type == 1 && code == 4)
        } else {
            (icmp_type == 11, icmp_type == 3 && code == 3)
        };
        let kind = if time_exceeded {
            Answer::TimeExceeded
        } else if port_unreachable && who == Some(self.flow.dst) {
            Answer::Reached
        } else {
            Answer::Unreachable { icmp_type, code }
        };
        let current = ttl == self.ttl && attempt == self.attempt;
        let rtt = current
            .then(|| self.sent.map(|s| now.duration_since(s).as_micros() as u64))
            .flatten();
        let hop = self.hop(ttl);
        if hop.answer.is_some() {
            return;
        }
        *hop = Hop {
            ttl,
            address: who,
            rtt_us: rtt,
            answer: Some(kind),
        };
        if ttl != self.ttl {
            // A late answer to an earlier TTL: filled in. The destination's, or an unreachable,
            // ends the trace; a router's shortens the silent run to the TTLs after it.
            match kind {
                Answer::TimeExceeded => {
                    self.silent_run = self.silent_run.min(self.ttl - 1 - ttl);
                }
                Answer::Reached => {
                    self.sent = None;
                    self.end = Some(End::Reached);
                    // The TTLs after it that went unanswered were past the destination.
                    self.hops.truncate(usize::from(ttl));
                }
                Answer::Unreachable { .. } => {
                    self.sent = None;
                    self.end = Some(End::Unreachable);
                }
            }
            return;
        }
        self.sent = None;
        self.attempt = 0;
        self.silent_run = 0;
        match kind {
            Answer::TimeExceeded if self.ttl >= self.max_ttl => self.end = Some(End::MaxTtl),
            Answer::TimeExceeded => self.ttl += 1,
            Answer::Reached => self.end = Some(End::Reached),
            Answer::Unreachable { .. } => self.end = Some(End::Unreachable),
        }
    }

    /// TTL `ttl`'s hop (those before it made, unanswered, where missing).
    fn hop(&mut self, ttl: u8) -> &mut Hop {
        let slot = usize::from(ttl.max(1) - 1);
        if self.hops.len() <= slot {
            self.hops.resize_with(slot + 1, || Hop {
                ttl: 0,
                address: None,
                rtt_us: None,
                answer: None,
            });
        }
        &mut self.hops[slot]
    }

    /// The outstanding probe went unanswered for `wait`.
    fn timed_out(&mut self, attempts: u8, gaps: u8) {
        self.sent = None;
        self.attempt += 1;
        if self.attempt < attempts {
            return;
        }
        let ttl = self.ttl;
        self.hop(ttl).ttl = ttl;
        self.attempt = 0;
        self.silent_run += 1;
        if self.silent_run >= gaps || self.ttl >= self.max_ttl {
            self.end = Some(End::Silent);
        } else {
            self.ttl += 1;
        }
    }
}

/// The addresses of this host's interfaces (those a QP direction may leave from).
pub fn local_addresses() -> Result<Vec<IpAddr>, TraceError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(|e| TraceError::Socket {
        flow: "this host".into(),
        what: "list its addresses",
        source: io_err(e),
    })?;
    Ok(addrs
        .filter_map(|a| {
            let s = a.address?;
            s.as_sockaddr_in()
                .map(|v| IpAddr::from(v.ip()))
                .or_else(|| s.as_sockaddr_in6().map(|v| IpAddr::from(v.ip())))
        })
        .collect())
}

/// Traces every flow (side by side, one probe outstanding per flow, at most `opts.rate` probes
/// a second in all). Refuses the whole request, before sending anything, when one flow may not
/// be probed.
pub fn trace(flows: &[Flow], opts: &Options) -> Result<Vec<Trace>, TraceError> {
    for f in flows {
        if let Some(why) = f.refusal() {
            return Err(TraceError::Refused { to: f.dst, why });
        }
    }
    let max_ttl = opts.max_ttl.max(1);
    let mut states = Vec::with_capacity(flows.len());
    for f in flows {
        let (fd, src) = open(f)?;
        states.push(State {
            flow: f.clone(),
            fd,
            src,
            ttl: 1,
            attempt: 0,
            sent: None,
            silent_run: 0,
            max_ttl,
            hops: Vec::with_capacity(usize::from(max_ttl)),
            end: None,
        });
    }
    let spacing = Duration::from_secs_f64(1.0 / f64::from(opts.rate.max(1)));
    let mut next_send = Instant::now();
    let mut turn = 0usize;
    let attempts = opts.attempts.max(1);
    let gaps = opts.gaps.max(1);
    loop {
        let now = Instant::now();
        for s in states.iter_mut().filter(|s| s.end.is_none()) {
            if s.sent.is_some_and(|t| now.duration_since(t) >= opts.wait) {
                s.timed_out(attempts, gaps);
            }
        }
        if states.iter().all(|s| s.end.is_some()) {
            break;
        }
        // Send the next idle flow's probe when the rate allows (round robin).
        if now >= next_send {
            let n = states.len();
            if let Some(i) = (0..n)
                .map(|k| (turn + k) % n)
                .find(|&i| states[i].end.is_none() && states[i].sent.is_none())
            {
                states[i].send(now)?;
                turn = i + 1;
                next_send = next_send.max(now) + spacing;
            }
        }
        // Wait for answers until the next send or the next deadline.
        let mut deadline = states
            .iter()
            .filter_map(|s| s.sent.map(|t| t + opts.wait))
            .min()
            .unwrap_or(now + opts.wait);
        if states.iter().any(|s| s.end.is_none() && s.sent.is_none()) {
            deadline = deadline.min(next_send);
        }
        let timeout = deadline.saturating_duration_since(Instant::now());
        let mut fds: Vec<libc::pollfd> = states
            .iter()
            .map(|s| libc::pollfd {
                fd: if s.end.is_none() {
                    s.fd.as_raw_fd()
                } else {
                    -1
                },
                events: 0,
                revents: 0,
            })
            .collect();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: a valid array of pollfd of its length.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms.max(1)) };
        if ready > 0 {
            let now = Instant::now();
            for (s, p) in states.iter_mut().zip(&fds) {
                if p.revents & libc::POLLERR != 0 {
                    s.read(now);
                }
            }
        }
    }
    Ok(states
        .into_iter()
        .map(|s| {
            let mut hops = s.hops;
            hops.retain(|h| h.ttl != 0);
            Trace {
                src: s.src,
                dst: s.flow.dst,
                sport: s.flow.sport,
                dscp: s.flow.dscp,
                dest_qp: s.flow.dest_qp,
                hops,
                end: s.end.unwrap_or(End::Silent),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(dst: &str) -> Flow {
        Flow {
            src: None,
            dst: dst.parse().unwrap(),
            sport: 49152,
            dscp: 26,
            dest_qp: DEFAULT_DEST_QP,
        }
    }

    #[test]
    fn only_unicast_destinations_of_other_hosts() {
        for bad in [
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "127.0.0.1",
            "::",
            "::1",
            "ff02::1",
        ] {
            assert!(flow(bad).refusal().is_some(), "{bad}");
        }
        assert_eq!(flow("198.18.1.2").refusal(), None);
        assert!(
            Flow {
                sport: 0,
                ..flow("198.18.1.2")
            }
            .refusal()
            .is_some()
        );
        assert!(
            Flow {
                src: Some("2001:db8::1".parse().unwrap()),
                ..flow("198.18.1.2")
            }
            .refusal()
            .is_some()
        );
    }

    /// The state machine alone (a real socket, to the loopback, that sends nothing here).
    fn state(max_ttl: u8) -> State {
        let f = Flow {
            src: None,
            dst: "127.0.0.1".parse().unwrap(),
            sport: 0x7000 + max_ttl as u16,
            dscp: 26,
            dest_qp: DEFAULT_DEST_QP,
        };
        let (fd, src) = open(&f).unwrap();
        State {
            flow: f,
            fd,
            src,
            ttl: 1,
            attempt: 0,
            sent: Some(Instant::now()),
            silent_run: 0,
            max_ttl,
            hops: Vec::new(),
            end: None,
        }
    }

    #[test]
    fn answers_late_and_on_time_and_silence() {
        let now = Instant::now();
        let router: Option<IpAddr> = Some("198.19.0.1".parse().unwrap());
        let dst = Some("127.0.0.1".parse().unwrap());
        let mut s = state(8);
        // TTL 1 answered: on to 2.
        s.answered(1, 0, 11, 0, router, false, now);
        assert_eq!((s.ttl, s.silent_run, s.sent), (2, 0, None));
        // TTL 2 unanswered twice (two attempts): a silent hop, on to 3.
        s.sent = Some(now);
        s.timed_out(2, 3);
        assert_eq!((s.ttl, s.attempt), (2, 1));
        s.sent = Some(now);
        s.timed_out(2, 3);
        assert_eq!((s.ttl, s.silent_run), (3, 1));
        // TTL 2's answer, late: filled in, the silent run shortened, still at 3.
        s.sent = Some(now);
        s.answered(2, 1, 11, 0, router, false, now);
        assert_eq!((s.ttl, s.silent_run), (3, 0));
        assert_eq!(s.hops[1].address, router);
        assert!(s.sent.is_some(), "the current probe still waits");
        // An answer from a later TTL than any sent is nobody's.
        s.answered(9, 0, 11, 0, router, false, now);
        assert_eq!(s.ttl, 3);
        // 3 and 4 unanswered, then the destination answers 3 late: reached, nothing after.
        s.timed_out(1, 3);
        s.sent = Some(now);
        s.timed_out(1, 3);
        assert_eq!(s.ttl, 5);
        s.answered(3, 0, 3, 3, dst, false, now);
        assert_eq!(s.end, Some(End::Reached));
        assert_eq!(s.hops.len(), 3);
        // Silence: gaps unanswered TTLs in a row end it.
        let mut s = state(9);
        s.timed_out(1, 2);
        s.sent = Some(now);
        s.timed_out(1, 2);
        assert_eq!(s.end, Some(End::Silent));
        // The largest TTL answered by a router.
        let mut s = state(1);
        s.answered(1, 0, 11, 0, router, false, now);
        assert_eq!(s.end, Some(End::MaxTtl));
        // IPv6: time exceeded is type 3, port unreachable 1/4.
        let mut s = state(10);
        s.answered(1, 0, 3, 0, router, true, now);
        assert_eq!(s.ttl, 2);
        s.sent = Some(now);
        s.answered(2, 0, 1, 4, dst, true, now);
        assert_eq!(s.end, Some(End::Reached));
    }

    #[test]
    fn the_probe_names_its_qp_and_ttl() {
        let p = payload(0x12_3456, 3, 1);
        assert_eq!(p[0], 0x04);
        assert_eq!(&p[5..8], &[0x12, 0x34, 0x56]);
        assert_eq!((p[10], p[11]), (3, 1));
        assert_eq!(&p[12..], &[0; 4]);
    }
}
