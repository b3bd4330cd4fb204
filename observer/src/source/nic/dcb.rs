//! DCB configuration of a netdev (IEEE 802.1Qaz/Qbb), asked of the kernel's dcbnl over
//! rtnetlink as iproute2's `dcb` does (dcb/dcb.c: an `RTM_GETDCB` request with
//! `DCB_CMD_IEEE_GET` and the interface's name): PFC per priority with the driver's pause frame
//! counts, ETS (priority to traffic class, each class's algorithm and bandwidth), the receive
//! buffers (each priority's, each one's size), the APP table (DSCP to priority above all, what
//! RoCE traffic is classified by) and the DCBX mode.
//!
//! Numbers and layouts from include/uapi/linux/dcbnl.h and net/dcb/dcbnl.c (`dcbnl_ieee_fill`):
//! the reply carries `DCB_ATTR_IFNAME`, a `DCB_ATTR_IEEE` nest (ETS, PFC and the receive
//! buffers only when the driver implements their getters; the APP table always) and
//! `DCB_ATTR_DCBX` when the driver reports it. A netdev whose driver has no dcbnl ops is refused with EOPNOTSUPP, an unknown name with
//! ENODEV.

use std::path::Path;

use netlink_sys::protocols::NETLINK_ROUTE;

use super::netlink::{
    Attr, Conn, End, Message, Request, errno_text, find, malformed, read_messages,
};
use super::{Availability, NicError, check_interface};

/// include/uapi/linux/rtnetlink.h.
const RTM_GETDCB: u16 = 78;
/// enum dcbnl_commands.
const DCB_CMD_IEEE_GET: u8 = 21;
/// enum dcbnl_attrs.
const DCB_ATTR_IFNAME: u16 = 1;
const DCB_ATTR_IEEE: u16 = 13;
const DCB_ATTR_DCBX: u16 = 14;
/// enum ieee_attrs.
const DCB_ATTR_IEEE_ETS: u16 = 1;
const DCB_ATTR_IEEE_PFC: u16 = 2;
const DCB_ATTR_IEEE_APP_TABLE: u16 = 3;
const DCB_ATTR_DCB_BUFFER: u16 = 10;
/// struct dcbnl_buffer: prio2buffer (8 bytes), buffer_size (8 u32 at 8), total_size (u32 at 40).
const BUFFER_LEN: usize = 44;
/// enum ieee_attrs_app: standard selectors in DCB_ATTR_IEEE_APP, the non-standard ones (PCP,
/// selector 255, kernel 6.3 and later) in DCB_ATTR_DCB_APP.
const DCB_ATTR_IEEE_APP: u16 = 1;
const DCB_ATTR_DCB_APP: u16 = 2;
const IEEE_8021QAZ_APP_SEL_DSCP: u8 = 5;

/// sizeof(struct dcbmsg): dcb_family, cmd, dcb_pad.
const DCBMSG_LEN: usize = 4;
/// struct ieee_ets: willing, ets_cap, cbs, then eight-byte arrays tc_tx_bw (offset 3),
/// tc_rx_bw (11), tc_tsa (19), prio_tc (27), tc_reco_bw, tc_reco_tsa, reco_prio_tc: 59 bytes.
const ETS_LEN: usize = 59;
const ETS_TC_TX_BW: usize = 3;
const ETS_TC_TSA: usize = 19;
const ETS_PRIO_TC: usize = 27;
/// struct ieee_pfc: pfc_cap (0), pfc_en (1), mbc (2), delay (u16 at 4), requests (8 u64 at 8),
/// indications (8 u64 at 72): 136 bytes.
const PFC_LEN: usize = 136;
const PFC_REQUESTS: usize = 8;
const PFC_INDICATIONS: usize = 72;
/// struct dcb_app: selector, priority, protocol (u16 at 2).
const APP_LEN: usize = 4;

const WHAT: &str = "RTM_GETDCB (DCB_CMD_IEEE_GET)";

pub use crate::model::nic::Dcb;

/// The DCB configuration of `iface` (in the caller's network namespace): absent, with the
/// reason, when the interface does not exist or its driver has no DCB (dcbnl answers EOPNOTSUPP,
/// or its reply has no IEEE part); an error on a name that is no interface name.
pub fn dcb(iface: &str) -> Result<Availability<Dcb>, NicError> {
    check_interface(iface)?;
    let what = format!("{WHAT} for {iface}");
    let conn = Conn::open(NETLINK_ROUTE).map_err(|source| NicError::Netlink {
        what: what.clone(),
        source,
    })?;
    let mut name = iface.as_bytes().to_vec();
    name.push(0);
    let dcbmsg = [libc::AF_UNSPEC as u8, DCB_CMD_IEEE_GET, 0, 0];
    let request = Request {
        kind: RTM_GETDCB,
        dump: false,
        family_header: &dcbmsg,
        attrs: &[(DCB_ATTR_IFNAME, &name)],
    };
    let (messages, end) = conn.exchange(&request, &what)?;
    outcome(iface, &messages, Some(end), &what)
}

/// The reply to an `RTM_GETDCB` request as the kernel sends it (netlink messages, header
/// included; sequence numbers are not checked here): the configuration, absent when the kernel
/// refuses for want of DCB or of the interface, an error on a malformed reply.
#[doc(hidden)]
pub fn parse_dcb_reply(bytes: &[u8]) -> Result<Availability<Dcb>, NicError> {
    let mut messages = Vec::new();
    let end = read_messages(bytes, WHAT, None, &mut messages)?;
    outcome("the interface", &messages, end, WHAT)
}

fn outcome(
    iface: &str,
    messages: &[Message],
    end: Option<End>,
    what: &str,
) -> Result<Availability<Dcb>, NicError> {
    if let Some(End::Refused(errno)) = end {
        return match errno {
            libc::EOPNOTSUPP => Ok(Availability::Absent {
                reason: format!(
                    "{iface}: no DCB (dcbnl answers {}: the driver, or the kernel, has no DCB support)",
                    errno_text(errno)
                ),
            }),
            libc::ENODEV => Ok(Availability::Absent {
                reason: format!("no interface {iface} (dcbnl: {})", errno_text(errno)),
            }),
            _ => Err(NicError::Netlink {
                what: what.to_string(),
                source: std::io::Error::from_raw_os_error(errno),
            }),
        };
    }
    let reply = messages
        .iter()
        .find(|m| m.kind == RTM_GETDCB)
        .ok_or_else(|| malformed(what, "no RTM_GETDCB message in the reply"))?;
    Ok(match parse_payload(&reply.payload, what)? {
        Some(d) => Availability::Present(d),
        None => Availability::Absent {
            reason: format!("{iface}: dcbnl reports no IEEE 802.1Qaz configuration"),
        },
    })
}

/// struct dcbmsg, then the attributes; none without a DCB_ATTR_IEEE nest.
fn parse_payload(payload: &[u8], what: &str) -> Result<Option<Dcb>, NicError> {
    let body = payload
        .get(DCBMSG_LEN..)
        .ok_or_else(|| malformed(what, "shorter than struct dcbmsg"))?;
    let top = super::netlink::attrs(body, what)?;
    let Some(ieee) = find(&top, DCB_ATTR_IEEE) else {
        return Ok(None);
    };
    let mut d = Dcb {
        dcbx: find(&top, DCB_ATTR_DCBX)
            .map(|a| {
                a.u8()
                    .ok_or_else(|| malformed(what, "an empty DCB_ATTR_DCBX"))
            })
            .transpose()?,
        ..Dcb::default()
    };
    for a in ieee.nested(what)? {
        match a.kind {
            DCB_ATTR_IEEE_ETS => ets(&a, &mut d, what)?,
            DCB_ATTR_IEEE_PFC => pfc(&a, &mut d, what)?,
            DCB_ATTR_IEEE_APP_TABLE => apps(&a, &mut d, what)?,
            DCB_ATTR_DCB_BUFFER => buffer(&a, &mut d, what)?,
            _ => {}
        }
    }
    d.dscp_prio.sort_unstable();
    d.other_apps.sort_unstable();
    Ok(Some(d))
}

fn short(what: &str, name: &str, len: usize, need: usize) -> NicError {
    malformed(what, format!("{name} of {len} bytes, struct needs {need}"))
}

fn ets(a: &Attr<'_>, d: &mut Dcb, what: &str) -> Result<(), NicError> {
    let v = a.value;
    if v.len() < ETS_LEN {
        return Err(short(what, "DCB_ATTR_IEEE_ETS", v.len(), ETS_LEN));
    }
    let bad = || short(what, "DCB_ATTR_IEEE_ETS", v.len(), ETS_LEN);
    d.prio_tc = Some(bytes8(v, ETS_PRIO_TC).ok_or_else(bad)?);
    d.tc_tsa = Some(bytes8(v, ETS_TC_TSA).ok_or_else(bad)?);
    d.tc_bw = Some(bytes8(v, ETS_TC_TX_BW).ok_or_else(bad)?);
    Ok(())
}

fn pfc(a: &Attr<'_>, d: &mut Dcb, what: &str) -> Result<(), NicError> {
    let v = a.value;
    let bad = || short(what, "DCB_ATTR_IEEE_PFC", v.len(), PFC_LEN);
    if v.len() < PFC_LEN {
        return Err(bad());
    }
    d.pfc_cap = Some(*v.first().ok_or_else(bad)?);
    d.pfc_enabled = Some(*v.get(1).ok_or_else(bad)?);
    d.pfc_requests = Some(u64s8(v, PFC_REQUESTS).ok_or_else(bad)?);
    d.pfc_indications = Some(u64s8(v, PFC_INDICATIONS).ok_or_else(bad)?);
    Ok(())
}

fn buffer(a: &Attr<'_>, d: &mut Dcb, what: &str) -> Result<(), NicError> {
    let v = a.value;
    let bad = || short(what, "DCB_ATTR_DCB_BUFFER", v.len(), BUFFER_LEN);
    if v.len() < BUFFER_LEN {
        return Err(bad());
    }
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(v.get(at..at + 4)?.try_into().ok()?))
    };
    let mut sizes = [0u32; 8];
    for (i, s) in sizes.iter_mut().enumerate() {
        *s = u32_at(8 + 4 * i).ok_or_else(bad)?;
    }
    d.prio_buffer = Some(bytes8(v, 0).ok_or_else(bad)?);
    d.buffer_size = Some(sizes);
    d.buffer_total = Some(u32_at(40).ok_or_else(bad)?);
    Ok(())
}

fn apps(a: &Attr<'_>, d: &mut Dcb, what: &str) -> Result<(), NicError> {
    for e in a.nested(what)? {
        if e.kind != DCB_ATTR_IEEE_APP && e.kind != DCB_ATTR_DCB_APP {
            continue;
        }
        let Some(&[selector, priority, p0, p1]) = e.value.get(..APP_LEN) else {
            return Err(short(what, "an APP table entry", e.value.len(), APP_LEN));
        };
        let protocol = u16::from_ne_bytes([p0, p1]);
        match u8::try_from(protocol) {
            Ok(dscp) if selector == IEEE_8021QAZ_APP_SEL_DSCP => d.dscp_prio.push((dscp, priority)),
            _ => d.other_apps.push((selector, protocol, priority)),
        }
    }
    Ok(())
}

fn bytes8(v: &[u8], at: usize) -> Option<[u8; 8]> {
    v.get(at..at.checked_add(8)?)?.try_into().ok()
}

fn u64s8(v: &[u8], at: usize) -> Option<[u64; 8]> {
    let mut out = [0u64; 8];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = u64::from_ne_bytes(bytes8(v, at.checked_add(i * 8)?)?);
    }
    Some(out)
}

/// A recorded configuration: `<root>/dcb/<iface>.json`, the JSON of [`Dcb`] (so that checks can
/// be tested on configurations no host here has). Absent, naming the path, when the file does
/// not exist; an error naming it when it cannot be read or is no such JSON.
pub fn dcb_at(root: &Path, iface: &str) -> Result<Availability<Dcb>, NicError> {
    check_interface(iface)?;
    let path = root.join("dcb").join(format!("{iface}.json"));
    let text = match super::recorded(&path)? {
        Availability::Present(t) => t,
        Availability::Absent { reason } => return Ok(Availability::Absent { reason }),
    };
    serde_json::from_str(&text)
        .map(Availability::Present)
        .map_err(|source| NicError::Fixture { path, source })
}
