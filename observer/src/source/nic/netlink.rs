//! The little netlink that [`super::dcb`] and [`super::rdma_netlink`] share: a request over a
//! fresh socket, the replies read until the kernel says it is done, and a bounds-checked walk
//! of their attributes.
//!
//! The socket is netlink-sys's and the message header and attribute framing are
//! netlink-packet-core's (`NetlinkBuffer`, `NlasIterator`, which check every length against
//! the buffer). The messages themselves are laid out and read here by hand: no crate models
//! dcbnl (`RTM_GETDCB`, `struct dcbmsg`, the IEEE 802.1Qaz structs) or the RDMA_NLDEV family,
//! and netlink-packet-core's typed `NetlinkMessage` would need a payload type implementing its
//! traits for each, for four fixed requests.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use netlink_packet_core::{
    NLA_HEADER_SIZE, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP,
    NetlinkBuffer, NlasIterator,
};
use netlink_sys::{Socket, SocketAddr};

use super::NicError;

/// The netlink message header's size (`struct nlmsghdr`).
const HEADER: usize = 16;
/// How long a reply may take before the exchange is given up.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Rounds up to the 4-byte alignment of netlink messages and attributes (NLMSG_ALIGN,
/// NLA_ALIGN).
pub(super) fn align(len: usize) -> usize {
    len.div_ceil(4) * 4
}

/// One attribute: its type with the NLA_F_NESTED and NLA_F_NET_BYTEORDER flags masked off, and
/// its value (the header and padding excluded).
#[derive(Clone, Copy, Debug)]
pub(super) struct Attr<'a> {
    pub kind: u16,
    pub value: &'a [u8],
}

impl<'a> Attr<'a> {
    /// The value as a u8, u16, u32 or u64 in host order (netlink's): none when it is shorter.
    pub fn u8(&self) -> Option<u8> {
        self.value.first().copied()
    }

    pub fn u32(&self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.value.get(..4)?.try_into().ok()?))
    }

    pub fn u64(&self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.value.get(..8)?.try_into().ok()?))
    }

    /// A NUL-terminated string (NLA_NUL_STRING), up to its first NUL.
    pub fn string(&self) -> String {
        let end = self
            .value
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.value.len());
        String::from_utf8_lossy(&self.value[..end]).into_owned()
    }

    /// The attributes nested in this one.
    pub fn nested(&self, what: &str) -> Result<Vec<Attr<'a>>, NicError> {
        attrs(self.value, what)
    }
}

/// The attributes laid out in `buf`, each length checked against the buffer: an attribute that
/// claims more than is left, or less than its own header, is an error naming `what`.
pub(super) fn attrs<'a>(buf: &'a [u8], what: &str) -> Result<Vec<Attr<'a>>, NicError> {
    let mut out = Vec::new();
    for nla in NlasIterator::new(buf) {
        let nla = nla.map_err(|e| malformed(what, e.to_string()))?;
        let kind = nla.kind();
        let len = usize::from(nla.length());
        let whole: &'a [u8] = nla.into_inner();
        let value = whole
            .get(NLA_HEADER_SIZE..len)
            .ok_or_else(|| malformed(what, format!("attribute {kind} of length {len}")))?;
        out.push(Attr { kind, value });
    }
    Ok(out)
}

/// Appends one attribute (header, value, padding) to `buf`: a request's, or one nested in
/// another's value.
pub(super) fn put_attr(buf: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = NLA_HEADER_SIZE + value.len();
    buf.extend_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(value);
    buf.resize(align(buf.len()), 0);
}

/// The first attribute of a type.
pub(super) fn find<'a, 'b>(attrs: &'b [Attr<'a>], kind: u16) -> Option<&'b Attr<'a>> {
    attrs.iter().find(|a| a.kind == kind)
}

pub(super) fn malformed(what: &str, detail: impl Into<String>) -> NicError {
    NicError::Malformed {
        what: what.to_string(),
        detail: detail.into(),
    }
}

/// One message of a reply: its type, flags and payload (the bytes after the header).
#[derive(Clone, Debug)]
pub(super) struct Message {
    pub kind: u16,
    pub payload: Vec<u8>,
}

/// How a reply ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    /// NLMSG_DONE of a dump, or the acknowledgement (NLMSG_ERROR with code 0) of a request.
    Done,
    /// The kernel refused the request with this errno (NLMSG_ERROR, or NLMSG_DONE carrying a
    /// negative code).
    Refused(i32),
}

/// Reads the messages in `bytes` (one datagram, or several concatenated) into `into`, up to the
/// end of the reply if it is among them (what follows the end is ignored). With `expect`, every
/// message must carry that sequence number and port id.
pub(super) fn read_messages(
    bytes: &[u8],
    what: &str,
    expect: Option<(u32, u32)>,
    into: &mut Vec<Message>,
) -> Result<Option<End>, NicError> {
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let msg = NetlinkBuffer::new_checked(rest).map_err(|e| malformed(what, e.to_string()))?;
        if let Some((seq, port)) = expect
            && (msg.sequence_number() != seq || msg.port_number() != port)
        {
            return Err(malformed(
                what,
                format!(
                    "a message for sequence {} port {} while waiting for sequence {seq} port {port}",
                    msg.sequence_number(),
                    msg.port_number()
                ),
            ));
        }
        let payload = msg.payload();
        match msg.message_type() {
            NLMSG_ERROR => {
                let code = first_i32(payload)
                    .ok_or_else(|| malformed(what, "an error message without its code"))?;
                return Ok(Some(if code == 0 {
                    End::Done
                } else {
                    End::Refused(code.saturating_neg())
                }));
            }
            NLMSG_DONE => {
                // A dump that failed after it started says so in its NLMSG_DONE.
                return Ok(Some(match first_i32(payload) {
                    Some(code) if code < 0 => End::Refused(code.saturating_neg()),
                    _ => End::Done,
                }));
            }
            NLMSG_NOOP => {}
            kind => into.push(Message {
                kind,
                payload: payload.to_vec(),
            }),
        }
        // new_checked guarantees length >= the header and <= what is left.
        at += align(msg.length() as usize).max(HEADER);
    }
    Ok(None)
}

fn first_i32(payload: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(payload.get(..4)?.try_into().ok()?))
}

/// A request: its type and flags (NLM_F_REQUEST is added, and NLM_F_ACK unless it is a dump),
/// the family's fixed header, and attributes.
pub(super) struct Request<'a> {
    pub kind: u16,
    pub dump: bool,
    pub family_header: &'a [u8],
    pub attrs: &'a [(u16, &'a [u8])],
}

impl Request<'_> {
    fn encode(&self, seq: u32) -> Vec<u8> {
        let mut body = self.family_header.to_vec();
        body.resize(align(body.len()), 0);
        for (kind, value) in self.attrs {
            put_attr(&mut body, *kind, value);
        }
        let flags = NLM_F_REQUEST | if self.dump { NLM_F_DUMP } else { NLM_F_ACK };
        let mut out = vec![0u8; HEADER];
        out.extend_from_slice(&body);
        let len = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let mut header = NetlinkBuffer::new(&mut out[..]);
        header.set_length(len);
        header.set_message_type(self.kind);
        header.set_flags(flags);
        header.set_sequence_number(seq);
        // Port 0: the kernel fills in the sender's.
        header.set_port_number(0);
        out
    }
}

static SEQUENCE: AtomicU32 = AtomicU32::new(1);

/// A netlink socket of one protocol, bound to a port the kernel chose.
pub(super) struct Conn {
    socket: Socket,
    port: u32,
}

impl Conn {
    /// Opens and binds the socket; the raw error when the kernel refuses (EPROTONOSUPPORT: no
    /// such netlink family, e.g. NETLINK_RDMA without ib_core).
    pub fn open(protocol: isize) -> io::Result<Self> {
        let mut socket = Socket::new(protocol)?;
        let addr = socket.bind_auto()?;
        set_timeout(&socket, TIMEOUT)?;
        Ok(Self {
            socket,
            port: addr.port_number(),
        })
    }

    /// Sends the request and reads the replies up to their end: the messages and how it ended.
    pub fn exchange(&self, req: &Request<'_>, what: &str) -> Result<(Vec<Message>, End), NicError> {
        let io = |source| NicError::Netlink {
            what: what.to_string(),
            source,
        };
        let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let bytes = req.encode(seq);
        self.socket
            .send_to(&bytes, &SocketAddr::new(0, 0), 0)
            .map_err(io)?;
        let mut messages = Vec::new();
        loop {
            // The datagram's size first (MSG_PEEK | MSG_TRUNC), then the datagram whole.
            let mut probe: Vec<u8> = Vec::new();
            let size = self
                .socket
                .recv(&mut probe, libc::MSG_PEEK | libc::MSG_TRUNC)
                .map_err(io)?;
            let mut buf: Vec<u8> = Vec::with_capacity(size.max(HEADER));
            let got = self.socket.recv(&mut buf, 0).map_err(io)?;
            if got != buf.len() || got != size {
                return Err(malformed(
                    what,
                    format!("a datagram of {got} bytes where {size} were announced"),
                ));
            }
            if let Some(end) = read_messages(&buf, what, Some((seq, self.port)), &mut messages)? {
                return Ok((messages, end));
            }
        }
    }
}

/// SO_RCVTIMEO: a kernel that never answers ends the exchange with EAGAIN instead of a hang.
fn set_timeout(socket: &Socket, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
    };
    // SAFETY: a valid socket and a timeval of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The errno's text, as strerror gives it ("Operation not supported").
pub(super) fn errno_text(errno: i32) -> String {
    let s = io::Error::from_raw_os_error(errno).to_string();
    // std appends " (os error N)".
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
