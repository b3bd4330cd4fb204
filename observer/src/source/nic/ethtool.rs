//! A netdev's driver statistics and driver information, as `ethtool -S IF` and `ethtool -i IF`
//! show them: on an RDMA-offload NIC (mlx5, ...) the driver's statistics are where the RoCE
//! traffic the kernel never sees still shows (`rx_vport_rdma_unicast_packets`), with the PFC
//! pauses per priority (`rx_prio3_pause`, `rx_prio3_pause_duration`), the pause storms
//! (`tx_pause_storm_warning_events`) and the drops for want of a buffer (`rx_discards_phy`).
//!
//! Read through the `SIOCETHTOOL` ioctl, written by hand: the `ethtool` crate (rust-netlink)
//! has no string-set or statistics message, and `below-ethtool` 0.9 returned garbage values on
//! veth (a comparison of veth's `peer_ifindex` with `ip -o link` caught it). The ioctl needs no
//! privilege for these four commands. Also the parsers of the two commands' text output, for
//! captures of hosts the tool does not run on.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::{Availability, NicError, check_interface};

/// `include/uapi/linux/ethtool.h`.
const ETHTOOL_GDRVINFO: u32 = 0x03;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GTUNABLE: u32 = 0x48;
/// `enum tunable_id`, `enum tunable_type_id`.
const ETHTOOL_PFC_PREVENTION_TOUT: u32 = 3;
const ETHTOOL_TUNABLE_U16: u32 = 2;
/// `struct ethtool_tunable`: cmd, id, type_id, len, then the value.
const TUNABLE_HEADER: usize = 16;
/// `enum ethtool_stringset`: the names of the `ETHTOOL_GSTATS` values.
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;

/// `struct ethtool_drvinfo`: 196 bytes, the strings 32 bytes each, NUL-padded.
const DRVINFO_LEN: usize = 196;
const DRVINFO_DRIVER: usize = 4;
const DRVINFO_VERSION: usize = 36;
const DRVINFO_FW_VERSION: usize = 68;
const DRVINFO_BUS_INFO: usize = 100;
/// `struct ethtool_gstrings`: cmd, string_set, len, then the names.
const GSTRINGS_HEADER: usize = 12;
/// `struct ethtool_sset_info`: cmd, reserved, sset_mask (u64 at 8), then one u32 per set.
const SSET_INFO_LEN: usize = 20;

/// More names than any driver has (mlx5 with hundreds of channels has a few thousand): a count
/// above it is refused rather than allocated.
const MAX_STATS: usize = 1 << 20;

/// ETHTOOL_GDRVINFO.
pub use crate::model::nic::DriverInfo;

/// Driver statistics of `iface` (ETH_SS_STATS names and values in the driver's order collapsed
/// into a map; a name the driver lists twice keeps its first value); absent, with the reason,
/// when the interface does not exist or its driver exposes no statistics.
pub fn driver_stats(iface: &str) -> Result<Availability<BTreeMap<String, u64>>, NicError> {
    check_interface(iface)?;
    let socket = Socket::open()?;
    // The names and the values are two calls: a driver whose count changes in between (mlx5
    // when its channels change) is read once more.
    let mut changed = ("", 0, 0);
    for _ in 0..2 {
        match read_stats(&socket, iface)? {
            Stats::Read(stats) => return Ok(Availability::Present(stats)),
            Stats::Absent(reason) => return Ok(Availability::Absent { reason }),
            Stats::Changed {
                command,
                expected,
                got,
            } => changed = (command, expected, got),
        }
    }
    let (command, expected, got) = changed;
    Err(NicError::StatsChanged {
        iface: iface.to_string(),
        command,
        expected,
        got,
    })
}

/// Driver information of `iface`; absent, with the reason, when the interface does not exist or
/// has no driver information (a virtual device without `get_drvinfo` and without a parent
/// device, like `lo`).
pub fn driver_info(iface: &str) -> Result<Availability<DriverInfo>, NicError> {
    check_interface(iface)?;
    let socket = Socket::open()?;
    let mut buf = words(DRVINFO_LEN);
    put_u32(&mut buf, 0, ETHTOOL_GDRVINFO);
    if let Err(e) = socket.ethtool(iface, &mut buf) {
        return absent_or_error(iface, "ETHTOOL_GDRVINFO", "driver information", e)
            .map(|reason| Availability::Absent { reason });
    }
    let bytes = bytes(&buf);
    let field = |offset: usize| {
        bytes
            .get(offset..offset + ETH_GSTRING_LEN)
            .map(c_string)
            .unwrap_or_default()
    };
    Ok(Availability::Present(DriverInfo {
        driver: field(DRVINFO_DRIVER),
        version: field(DRVINFO_VERSION),
        firmware: field(DRVINFO_FW_VERSION),
        bus: field(DRVINFO_BUS_INFO),
    }))
}

/// The PFC storm prevention timeout of `iface` in ms (`ethtool --get-tunable IF
/// pfc-prevention-tout`: a port pausing its peer that long without draining stops pausing; 0:
/// off, [`PFC_PREVENTION_AUTO`]: the driver's default); absent, with the reason, when the driver
/// has no such tunable.
pub fn pfc_prevention_timeout(iface: &str) -> Result<Availability<u16>, NicError> {
    check_interface(iface)?;
    let socket = Socket::open()?;
    let mut buf = words(TUNABLE_HEADER + 2);
    put_u32(&mut buf, 0, ETHTOOL_GTUNABLE);
    put_u32(&mut buf, 4, ETHTOOL_PFC_PREVENTION_TOUT);
    put_u32(&mut buf, 8, ETHTOOL_TUNABLE_U16);
    put_u32(&mut buf, 12, 2);
    if let Err(e) = socket.ethtool(iface, &mut buf) {
        let reason = match e.raw_os_error() {
            // The core refuses a tunable the driver has no getter for with EOPNOTSUPP.
            Some(libc::EINVAL) => Ok(format!(
                "{iface}: the driver has no PFC storm prevention tunable (ETHTOOL_GTUNABLE: {e})"
            )),
            _ => absent_or_error(iface, "ETHTOOL_GTUNABLE", "PFC storm prevention tunable", e),
        }?;
        return Ok(Availability::Absent { reason });
    }
    let b = bytes(&buf);
    let v = b
        .get(TUNABLE_HEADER..TUNABLE_HEADER + 2)
        .map(|x| u16::from_ne_bytes([x[0], x[1]]))
        .unwrap_or(0);
    Ok(Availability::Present(v))
}

pub use crate::model::nic::PFC_PREVENTION_AUTO;

/// `ethtool --get-tunable IF pfc-prevention-tout` text output: "pfc-prevention-tout: 100"
/// (`auto` and `off` read as the driver reports them, 0xffff and 0).
pub fn parse_pfc_prevention(text: &str) -> Result<u16, NicError> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("");
    let bad = |reason| NicError::BadLine {
        line: 1,
        text: line.to_string(),
        reason,
    };
    let (_, v) = line
        .split_once(':')
        .ok_or_else(|| bad("no \"pfc-prevention-tout: VALUE\" line"))?;
    match v.trim() {
        "auto" => Ok(PFC_PREVENTION_AUTO),
        "off" => Ok(0),
        n => n
            .parse()
            .map_err(|_| bad("not a number of ms, auto or off")),
    }
}

/// `ethtool -S IF` text output ("NIC statistics:", then one "     name: value" line per value)
/// -> map. Empty lines, the header and `#` comment lines (fixtures record the command so) are
/// skipped; a name is everything before the line's last ':' (names may hold spaces); a name
/// listed twice keeps its first value. Any other line is an error naming its number and text.
pub fn parse_stats(text: &str) -> Result<BTreeMap<String, u64>, NicError> {
    let mut out = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line == "NIC statistics:" {
            continue;
        }
        let bad = |reason| NicError::BadLine {
            line: i + 1,
            text: raw.to_string(),
            reason,
        };
        let (name, value) = line.rsplit_once(':').ok_or_else(|| bad("no ':'"))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(bad("no name"));
        }
        let value = value
            .trim()
            .parse::<u64>()
            .map_err(|_| bad("the value is no unsigned 64-bit number"))?;
        out.entry(name.to_string()).or_insert(value);
    }
    Ok(out)
}

/// `ethtool -i IF` text output ("driver: mlx5_core", "version: ...", "firmware-version: ...",
/// "bus-info: ...", and lines this ignores: "expansion-rom-version", "supports-...") ->
/// DriverInfo. Empty and `#` comment lines are skipped; a line without ':' is an error naming
/// its number and text; so is output without a driver.
pub fn parse_info(text: &str) -> Result<DriverInfo, NicError> {
    let mut info = DriverInfo::default();
    let mut driver = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // The first ':' ends the key: values hold colons (bus-info "0000:00:1f.6").
        let (key, value) = line.split_once(':').ok_or_else(|| NicError::BadLine {
            line: i + 1,
            text: raw.to_string(),
            reason: "no ':'",
        })?;
        let value = value.trim().to_string();
        match key.trim() {
            "driver" if !driver => {
                driver = true;
                info.driver = value;
            }
            "version" => info.version = value,
            "firmware-version" => info.firmware = value,
            "bus-info" => info.bus = value,
            _ => {}
        }
    }
    if !driver || info.driver.is_empty() {
        return Err(NicError::NoDriver);
    }
    Ok(info)
}

/// One reading of the statistics.
enum Stats {
    Read(BTreeMap<String, u64>),
    Absent(String),
    /// The driver's count changed between the calls: `command` gave `got` entries, not the
    /// `expected` count.
    Changed {
        command: &'static str,
        expected: usize,
        got: usize,
    },
}

fn read_stats(socket: &Socket, iface: &str) -> Result<Stats, NicError> {
    // How many: ETHTOOL_GSSET_INFO for the ETH_SS_STATS set alone.
    let mut info = words(SSET_INFO_LEN);
    put_u32(&mut info, 0, ETHTOOL_GSSET_INFO);
    if let Some(mask) = info.get_mut(1) {
        *mask = 1 << ETH_SS_STATS;
    }
    if let Err(e) = socket.ethtool(iface, &mut info) {
        return absent_or_error(iface, "ETHTOOL_GSSET_INFO", "statistics", e).map(Stats::Absent);
    }
    let info_bytes = bytes(&info);
    // The kernel clears the set's bit when the driver has no such set.
    let supported = info
        .get(1)
        .is_some_and(|mask| mask & (1 << ETH_SS_STATS) != 0);
    let count = if supported {
        u32_at(&info_bytes, 16).unwrap_or(0) as usize
    } else {
        0
    };
    if count == 0 {
        return Ok(Stats::Absent(format!(
            "{iface}: the driver exposes no statistics"
        )));
    }
    if count > MAX_STATS {
        return Err(NicError::TooManyStats {
            iface: iface.to_string(),
            count,
            max: MAX_STATS,
        });
    }
    // The kernel writes as many entries as the driver counts at the time of the call, whatever
    // the buffer: room for twice the count and more, so that a count grown in between (found
    // below) stays inside the buffer.
    let room = count * 2 + 256;

    let mut strings = words(GSTRINGS_HEADER + room * ETH_GSTRING_LEN);
    put_u32(&mut strings, 0, ETHTOOL_GSTRINGS);
    put_u32(&mut strings, 4, ETH_SS_STATS);
    put_u32(&mut strings, 8, count as u32);
    if let Err(e) = socket.ethtool(iface, &mut strings) {
        return absent_or_error(iface, "ETHTOOL_GSTRINGS", "statistics", e).map(Stats::Absent);
    }
    let strings = bytes(&strings);
    let names_len = u32_at(&strings, 8).unwrap_or(0) as usize;
    if names_len != count {
        return Ok(Stats::Changed {
            command: "ETHTOOL_GSTRINGS",
            expected: count,
            got: names_len,
        });
    }

    // One u64 of header (cmd, n_stats), then the values: a u64 array, so aligned.
    let mut values = vec![0u64; 1 + room];
    put_u32(&mut values, 0, ETHTOOL_GSTATS);
    put_u32(&mut values, 4, count as u32);
    if let Err(e) = socket.ethtool(iface, &mut values) {
        return absent_or_error(iface, "ETHTOOL_GSTATS", "statistics", e).map(Stats::Absent);
    }
    let header = values.first().map(|w| w.to_ne_bytes()).unwrap_or_default();
    let values_len = u32_at(&header, 4).unwrap_or(0) as usize;
    if values_len != count {
        return Ok(Stats::Changed {
            command: "ETHTOOL_GSTATS",
            expected: count,
            got: values_len,
        });
    }

    let mut out = BTreeMap::new();
    let names = strings
        .get(GSTRINGS_HEADER..)
        .unwrap_or_default()
        .chunks_exact(ETH_GSTRING_LEN)
        .map(c_string);
    for (name, value) in names.zip(values.iter().skip(1)).take(count) {
        out.entry(name).or_insert(*value);
    }
    Ok(Stats::Read(out))
}

/// An ioctl's failure: absent (with the reason) when the interface does not exist or the driver
/// does not support the command, an error otherwise.
fn absent_or_error(
    iface: &str,
    command: &'static str,
    what: &str,
    e: io::Error,
) -> Result<String, NicError> {
    match e.raw_os_error() {
        Some(libc::ENODEV) => Ok(format!("no interface {iface}")),
        Some(libc::EOPNOTSUPP) => Ok(format!(
            "{iface}: the driver gives no {what} ({command}: {e})"
        )),
        _ => Err(NicError::Ethtool {
            iface: iface.to_string(),
            command,
            source: e,
        }),
    }
}

/// The socket the ioctl goes through (any socket of the network namespace does).
struct Socket(OwnedFd);

impl Socket {
    fn open() -> Result<Self, NicError> {
        // SAFETY: no pointer involved; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(NicError::Socket(io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor owned by nothing else.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// SIOCETHTOOL on `iface` (checked: shorter than IFNAMSIZ, so NUL-terminated) with `buf`
    /// as the command buffer; the kernel writes the answer into it.
    fn ethtool(&self, iface: &str, buf: &mut [u64]) -> io::Result<()> {
        let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
        for (d, s) in name.iter_mut().zip(iface.bytes().take(libc::IFNAMSIZ - 1)) {
            *d = s as libc::c_char;
        }
        let mut ifr = libc::ifreq {
            ifr_name: name,
            ifr_ifru: libc::__c_anonymous_ifr_ifru {
                ifru_data: buf.as_mut_ptr().cast(),
            },
        };
        // SAFETY: `ifr` names the interface and points at `buf`, which lives through the call
        // and is as large as the command's answer (the callers size it; see read_stats).
        let rc = unsafe {
            libc::ioctl(
                self.0.as_raw_fd(),
                libc::SIOCETHTOOL as _,
                &mut ifr as *mut libc::ifreq,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

/// A zeroed, u64-aligned buffer of at least `len` bytes.
fn words(len: usize) -> Vec<u64> {
    vec![0; len.div_ceil(8)]
}

/// Writes `value` at byte `offset` (a multiple of 4 inside `buf`) in native byte order.
fn put_u32(buf: &mut [u64], offset: usize, value: u32) {
    if let Some(word) = buf.get_mut(offset / 8) {
        let mut b = word.to_ne_bytes();
        let at = offset % 8;
        if let Some(dst) = b.get_mut(at..at + 4) {
            dst.copy_from_slice(&value.to_ne_bytes());
        }
        *word = u64::from_ne_bytes(b);
    }
}

/// The buffer's bytes, as the kernel wrote them.
fn bytes(buf: &[u64]) -> Vec<u8> {
    buf.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn u32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    let b: [u8; 4] = bytes.get(offset..offset + 4)?.try_into().ok()?;
    Some(u32::from_ne_bytes(b))
}

/// A NUL-padded C string field (not NUL-terminated when full).
fn c_string(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(field.get(..end).unwrap_or_default()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_text_with_spaces_colons_and_bad_lines() {
        let m = parse_stats("NIC statistics:\n     a b: 1\n     c:d: 2\n\n     e: 3\n").unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m["a b"], 1);
        assert_eq!(m["c:d"], 2);
        for (text, line) in [
            ("NIC statistics:\n     x: 1\n     y: -1\n", 3),
            ("     x 1\n", 1),
            ("NIC statistics:\n     : 5\n", 2),
            ("     x: 18446744073709551616\n", 1),
        ] {
            let e = parse_stats(text).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("line {line}:")),
                "{text:?}: {e}"
            );
        }
    }

    #[test]
    fn buffer_helpers_are_native_order_and_bounded() {
        let mut b = words(12);
        assert_eq!(b.len(), 2);
        put_u32(&mut b, 4, 0x0102_0304);
        put_u32(&mut b, 8, 7);
        put_u32(&mut b, 64, 9);
        let bytes = bytes(&b);
        assert_eq!(u32_at(&bytes, 4), Some(0x0102_0304));
        assert_eq!(u32_at(&bytes, 8), Some(7));
        assert_eq!(u32_at(&bytes, 14), None);
        assert_eq!(c_string(b"veth\0\0"), "veth");
        assert_eq!(c_string(b"full"), "full");
    }
}
