//! rtnetlink's view of a netdev's XDP attachment (`RTM_GETLINK`, the `IFLA_XDP` nest, as
//! `ip link show` reads it): the id of the program attached, which tells `diagnose` that the
//! program on an interface is a running sidecar's.
//!
//! Numbers from include/uapi/linux/rtnetlink.h and if_link.h; `struct ifinfomsg` is family (u8),
//! pad, type (u16), index (i32), flags (u32), change (u32): 16 bytes. No crate here models
//! rtnetlink's link messages; the shared little netlink ([`super::netlink`]) frames the request.

use netlink_sys::protocols::NETLINK_ROUTE;

use super::NicError;
use super::netlink::{Conn, End, Request, attrs, find, malformed};

const RTM_GETLINK: u16 = 18;
const RTM_NEWLINK: u16 = 16;
const IFINFOMSG_LEN: usize = 16;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_PROG_ID: u16 = 4;

/// The id of the XDP program attached to the netdev of `ifindex` (in this network namespace);
/// none when there is none.
pub fn xdp_program_id(ifindex: u32) -> Result<Option<u32>, NicError> {
    let what = format!("RTM_GETLINK for ifindex {ifindex}");
    let conn = Conn::open(NETLINK_ROUTE).map_err(|source| NicError::Netlink {
        what: what.clone(),
        source,
    })?;
    let mut ifinfo = [0u8; IFINFOMSG_LEN];
    ifinfo[0] = libc::AF_UNSPEC as u8;
    ifinfo[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    let request = Request {
        kind: RTM_GETLINK,
        dump: false,
        family_header: &ifinfo,
        attrs: &[],
    };
    let (messages, end) = conn.exchange(&request, &what)?;
    if let End::Refused(errno) = end {
        return Err(NicError::Netlink {
            what,
            source: std::io::Error::from_raw_os_error(errno),
        });
    }
    let link = messages
        .iter()
        .find(|m| m.kind == RTM_NEWLINK)
        .ok_or_else(|| malformed(&what, "no RTM_NEWLINK in the reply"))?;
    let body = link
        .payload
        .get(IFINFOMSG_LEN..)
        .ok_or_else(|| malformed(&what, "a reply shorter than struct ifinfomsg"))?;
    let top = attrs(body, &what)?;
    let Some(xdp) = find(&top, IFLA_XDP) else {
        return Ok(None);
    };
    let nested = xdp.nested(&what)?;
    Ok(find(&nested, IFLA_XDP_PROG_ID)
        .and_then(|a| a.u32())
        .filter(|id| *id != 0))
}
