//! A netdev's pluggable module (SFP, QSFP, QSFP-DD, OSFP): its EEPROM, read live through
//! ethtool netlink (`ETHTOOL_MSG_MODULE_EEPROM_GET`, what `ethtool -m` uses) or from a copied
//! tree, and its digital diagnostics decoded: temperature, supply voltage, and per lane the
//! laser bias and the transmitted and received optical power, with the module's own alarm and
//! warning thresholds and flags.
//!
//! Three memory maps: SFF-8472 (SFP: diagnostics at I2C address 0x51), SFF-8636 (QSFP+ and
//! QSFP28: thresholds on page 03h) and CMIS (QSFP-DD, OSFP and later QSFP: thresholds on page
//! 02h, lane monitors on page 11h). Decoded by hand: no crate decodes module EEPROMs.
//!
//! The image keeps ethtool's flat layout, so that `ethtool -m IF hex on` output of a host
//! where the tool does not run reads as a copied tree: for SFF-8472, address 0x50's 256 bytes
//! then 0x51's; otherwise the lower page at 0, and page N's upper half at 128 + 128·N (what
//! ethtool's ioctl dump of an SFF-8636 module gives: pages 00h to 03h in 640 bytes). Only bank
//! 0 of the banked CMIS pages is read: lanes 1 to 8.

use std::collections::BTreeMap;

use super::netlink::{Conn, End, Request, attrs, errno_text, find, put_attr};
use super::{Availability, NicError, check_interface};
use crate::model::nic::{Lane, Limits, Optics};

/// A module's EEPROM as read: bytes by their offset in the flat layout (see the module's
/// documentation). Sparse: pages not read are missing, and so are the values they hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Eeprom {
    bytes: BTreeMap<u32, u8>,
}

/// Half a page: the unit of every read.
const HALF: u32 = 128;
/// Flat offsets beyond this are refused when parsing (page 0xff's upper half ends below it).
const MAX_OFFSET: u32 = 128 + 256 * 128;

impl Eeprom {
    /// The byte at a flat offset, if read.
    pub fn get(&self, offset: u32) -> Option<u8> {
        self.bytes.get(&offset).copied()
    }

    /// Sets `data` from a flat offset on.
    pub fn put(&mut self, offset: u32, data: &[u8]) {
        for (i, b) in data.iter().enumerate() {
            self.bytes.insert(offset + i as u32, *b);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn u16(&self, offset: u32) -> Option<u16> {
        Some(u16::from_be_bytes([
            self.get(offset)?,
            self.get(offset + 1)?,
        ]))
    }

    fn i16(&self, offset: u32) -> Option<i16> {
        self.u16(offset).map(|v| v as i16)
    }

    fn f32(&self, offset: u32) -> Option<f32> {
        let b: Option<Vec<u8>> = (0..4).map(|i| self.get(offset + i)).collect();
        Some(f32::from_be_bytes(b?.try_into().ok()?))
    }

    fn text(&self, offset: u32, len: u32) -> Option<String> {
        let b: Option<Vec<u8>> = (0..len).map(|i| self.get(offset + i)).collect();
        let s: String = b?
            .into_iter()
            .map(|c| {
                if c.is_ascii_graphic() || c == b' ' {
                    c as char
                } else {
                    ' '
                }
            })
            .collect();
        let s = s.trim().to_string();
        (!s.is_empty()).then_some(s)
    }

    /// `ethtool -m IF hex on` text: "Offset\t\tValues" and "------" header lines, then lines
    /// of "0x0000:\t\t" and up to 16 hex bytes. Empty and `#` lines are skipped; any other line
    /// is an error naming its number and text.
    pub fn parse_hex(text: &str) -> Result<Self, NicError> {
        let mut out = Self::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty()
                || line.starts_with('#')
                || line.starts_with("Offset")
                || line.starts_with("------")
            {
                continue;
            }
            let bad = |reason| NicError::BadLine {
                line: i + 1,
                text: raw.to_string(),
                reason,
            };
            let (offset, values) = line
                .split_once(':')
                .ok_or_else(|| bad("no \"0xOFFSET:\" before the bytes"))?;
            let offset = offset
                .trim()
                .strip_prefix("0x")
                .and_then(|o| u32::from_str_radix(o, 16).ok())
                .ok_or_else(|| bad("the offset is no hex number 0x..."))?;
            for (k, v) in values.split_whitespace().enumerate() {
                let b = u8::from_str_radix(v, 16)
                    .ok()
                    .filter(|_| v.len() == 2)
                    .ok_or_else(|| bad("a value is no hex byte"))?;
                let at = offset + k as u32;
                if at >= MAX_OFFSET {
                    return Err(bad("an offset beyond any module page"));
                }
                out.bytes.insert(at, b);
            }
        }
        Ok(out)
    }

    /// The image as `ethtool -m IF hex on` prints it (16 bytes a line; only what was read).
    pub fn to_hex(&self) -> String {
        let mut out = String::from("Offset\t\tValues\n------\t\t------");
        let mut next = None;
        for (&at, &b) in &self.bytes {
            if at % 16 == 0 || next != Some(at) {
                out.push_str(&format!("\n0x{at:04x}:\t\t"));
            }
            out.push_str(&format!("{b:02x} "));
            next = Some(at + 1);
        }
        out.push('\n');
        out
    }
}

/// The memory map a module's SFF-8024 identifier (byte 0) names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Map {
    Sff8472,
    Sff8636,
    Cmis,
}

/// SFF-8024's identifiers: the name and the memory map.
fn identify(id: u8) -> Option<(&'static str, Map)> {
    Some(match id {
        0x03 => ("SFP", Map::Sff8472),
        0x0c => ("QSFP", Map::Sff8636),
        0x0d => ("QSFP+", Map::Sff8636),
        0x11 => ("QSFP28", Map::Sff8636),
        0x18 => ("QSFP-DD", Map::Cmis),
        0x19 => ("OSFP", Map::Cmis),
        0x1b => ("DSFP", Map::Cmis),
        0x1e => ("QSFP+ or later", Map::Cmis),
        0x1f => ("SFP-DD", Map::Cmis),
        0x20 => ("SFP+", Map::Cmis),
        0x21 => ("OSFP-XD", Map::Cmis),
        _ => return None,
    })
}

/// Where a half page sits in the flat layout: `i2c` 0x50 or 0x51 (SFF-8472's diagnostics),
/// the page, and the half (offset 0 or 128).
fn flat(map: Map, i2c: u8, page: u8, offset: u32) -> u32 {
    match (map, i2c) {
        (Map::Sff8472, 0x51) => 256 + offset,
        _ if offset < HALF => offset,
        _ => offset + HALF * u32::from(page),
    }
}

/// The half pages a module of `map` has its diagnostics on, beyond the lower page: (I2C
/// address, page, offset), given the lower page (for the flat-memory bit) and, for SFF-8472,
/// whether diagnostics are implemented (upper page 0 read first).
fn pages(map: Map, e: &Eeprom) -> Vec<(u8, u8, u32)> {
    match map {
        Map::Sff8472 => {
            // A0h byte 92 bit 6: digital diagnostics implemented; bit 2: an address change is
            // required to reach A2h, which the kernel cannot do (its fallback through the
            // driver's old call would return A0h's bytes); byte 94: SFF-8472 compliance, 0
            // for a module without A2h (the kernel then reads A0h again).
            let diag = e.get(92).is_some_and(|b| b & 0x40 != 0 && b & 0x04 == 0);
            if diag && e.get(94).is_some_and(|c| c != 0) {
                vec![(0x51, 0, 0)]
            } else {
                Vec::new()
            }
        }
        // Byte 2 bit 2: flat memory (upper page 00h only).
        Map::Sff8636 if e.get(2).is_some_and(|b| b & 0x04 == 0) => vec![(0x50, 3, HALF)],
        // Byte 2 bit 7: flat memory.
        Map::Cmis if e.get(2).is_some_and(|b| b & 0x80 == 0) => {
            vec![(0x50, 1, HALF), (0x50, 2, HALF), (0x50, 0x11, HALF)]
        }
        _ => Vec::new(),
    }
}

/// The optical diagnostics of the module `e` holds; none when byte 0 names no module this
/// knows (or was not read).
pub fn decode(e: &Eeprom) -> Option<Optics> {
    let (name, map) = identify(e.get(0)?)?;
    Some(match map {
        Map::Sff8472 => sff8472(e, name),
        Map::Sff8636 => sff8636(e, name),
        Map::Cmis => cmis(e, name),
    })
}

/// The units of the monitors, common to the three maps: temperature 1/256 °C (signed), supply
/// voltage 100 µV, bias 2 µA, optical power 0.1 µW.
fn celsius(raw: i16) -> f64 {
    f64::from(raw) / 256.0
}
fn volts(raw: u16) -> f64 {
    f64::from(raw) / 10_000.0
}
fn milliamps(raw: u16) -> f64 {
    f64::from(raw) * 0.002
}
fn milliwatts(raw: u16) -> f64 {
    f64::from(raw) / 10_000.0
}

/// The SFF-8636 and CMIS thresholds' readings (SFF-8472's may be calibrated).
fn celsius_at(e: &Eeprom, at: u32) -> Option<f64> {
    e.i16(at).map(celsius)
}
fn volts_at(e: &Eeprom, at: u32) -> Option<f64> {
    e.u16(at).map(volts)
}
fn milliwatts_at(e: &Eeprom, at: u32) -> Option<f64> {
    e.u16(at).map(milliwatts)
}

/// Four thresholds at `at` in the order the three maps share (high alarm, low alarm, high
/// warning, low warning), each converted; none when unread or all zero (a module without
/// thresholds).
fn limits(e: &Eeprom, at: u32, conv: impl Fn(&Eeprom, u32) -> Option<f64>) -> Option<Limits> {
    let l = Limits {
        high_alarm: conv(e, at)?,
        low_alarm: conv(e, at + 2)?,
        high_warning: conv(e, at + 4)?,
        low_warning: conv(e, at + 6)?,
    };
    // Unprogrammed (all zero, or 0xffff: a negative temperature) or inconsistent thresholds
    // judge nothing: each set must run high alarm >= high warning >= low warning >= low alarm,
    // with room between the alarms.
    let ordered = l.high_alarm >= l.high_warning
        && l.high_warning >= l.low_warning
        && l.low_warning >= l.low_alarm
        && l.high_alarm > l.low_alarm
        && l.high_alarm > 0.0;
    ordered.then_some(l)
}

/// A threshold's reading: the image and the offset to the raw value, to the value in its unit.
type Conv<'a> = &'a dyn Fn(&Eeprom, u32) -> Option<f64>;

/// The thresholds of each quantity, at `base` plus its offset, into `o.limits`.
fn thresholds(o: &mut Optics, e: &Eeprom, base: u32, list: [(&str, u32, Conv<'_>); 5]) {
    for (q, at, f) in list {
        if let Some(l) = limits(e, base + at, f) {
            o.limits.insert(q.into(), l);
        }
    }
}

/// The flags set among `(byte, bit, name)`.
fn raised(e: &Eeprom, flags: &[(u32, u8, String)]) -> Vec<String> {
    flags
        .iter()
        .filter(|(at, bit, _)| e.get(*at).is_some_and(|b| b & (1 << bit) != 0))
        .map(|(_, _, n)| n.clone())
        .collect()
}

const KINDS: [&str; 4] = ["high alarm", "low alarm", "high warning", "low warning"];

/// SFF-8472: A0h (flat 0..256) identifies, A2h (flat 256..512) measures. Internally calibrated
/// values read as they are; externally calibrated ones through A2h's slopes, offsets and the
/// received power's polynomial (thresholds included, as ethtool does).
fn sff8472(e: &Eeprom, name: &str) -> Optics {
    let mut o = Optics {
        module: format!("{name} (SFF-8472)"),
        vendor: e.text(20, 16),
        part: e.text(40, 16),
        serial: e.text(68, 16),
        // Byte 8, SFP+ cable technology: bit 2 a passive cable (copper). Bit 3, an active
        // cable, may be optical inside: its readings are judged where it gives them.
        copper: e.get(8).is_some_and(|b| b & 0x04 != 0),
        ..Optics::default()
    };
    let Some(diag) = e.get(92).filter(|b| b & 0x40 != 0) else {
        return o;
    };
    const A2: u32 = 256;
    // A2h that is A0h again (a driver's old call answering an A2h read with A0h) is no
    // diagnostics.
    if (0..HALF).all(|i| e.get(A2 + i) == e.get(i)) {
        return o;
    }
    let external = diag & 0x10 != 0 && diag & 0x20 == 0;
    // (slope, offset) at A2h 76.. for bias, tx power, temperature, voltage.
    let cal = |at: u32| -> Option<(f64, f64)> {
        if !external {
            return Some((1.0, 0.0));
        }
        Some((
            f64::from(e.u16(A2 + at)?) / 256.0,
            f64::from(e.i16(A2 + at + 2)?),
        ))
    };
    let linear = |c: Option<(f64, f64)>, raw: f64| c.map(|(s, off)| s * raw + off);
    let temp = move |e: &Eeprom, at: u32| {
        let raw = f64::from(e.i16(at)?);
        linear(cal(84), raw).map(|v| v / 256.0)
    };
    let vcc =
        move |e: &Eeprom, at: u32| linear(cal(88), f64::from(e.u16(at)?)).map(|v| v / 10_000.0);
    let bias = move |e: &Eeprom, at: u32| linear(cal(76), f64::from(e.u16(at)?)).map(|v| v * 0.002);
    let txp =
        move |e: &Eeprom, at: u32| linear(cal(80), f64::from(e.u16(at)?)).map(|v| v / 10_000.0);
    let rxp = move |e: &Eeprom, at: u32| {
        let raw = f64::from(e.u16(at)?);
        if !external {
            return Some(raw / 10_000.0);
        }
        // Rx_PWR(4) at 56 down to Rx_PWR(0) at 72.
        let mut v = 0.0;
        for k in 0..5u32 {
            v = v * raw + f64::from(e.f32(A2 + 56 + 4 * k)?);
        }
        Some(v / 10_000.0)
    };
    o.temperature_c = temp(e, A2 + 96);
    o.voltage_v = vcc(e, A2 + 98);
    o.lanes = vec![Lane {
        lane: 1,
        tx_bias_ma: bias(e, A2 + 100),
        tx_power_mw: txp(e, A2 + 102),
        rx_power_mw: rxp(e, A2 + 104),
        inactive: false,
    }];
    thresholds(
        &mut o,
        e,
        A2,
        [
            ("temperature", 0, &temp),
            ("voltage", 8, &vcc),
            ("tx_bias", 16, &bias),
            ("tx_power", 24, &txp),
            ("rx_power", 32, &rxp),
        ],
    );
    // A0h byte 93, enhanced options: bit 7 alarm and warning flags implemented (A2h 112-113
    // alarms, 116-117 warnings, real time, not latched); bits 4 and 5 the receiver's loss of
    // signal and the transmitter fault in A2h byte 110 (bits 1 and 2).
    let options = e.get(93).unwrap_or(0);
    let mut flags = Vec::new();
    if options & 0x10 != 0 {
        flags.push((A2 + 110, 1, "rx_los lane 1".to_string()));
    }
    if options & 0x20 != 0 {
        flags.push((A2 + 110, 2, "tx_fault lane 1".to_string()));
    }
    if options & 0x80 != 0 {
        for (base, level) in [(112, "alarm"), (116, "warning")] {
            for (bit, q, side) in [
                (7, "temperature", "high"),
                (6, "temperature", "low"),
                (5, "voltage", "high"),
                (4, "voltage", "low"),
                (3, "tx_bias", "high"),
                (2, "tx_bias", "low"),
                (1, "tx_power", "high"),
                (0, "tx_power", "low"),
            ] {
                // The lane's quantities named by their lane, as the multi-lane maps do.
                let lane = if matches!(q, "tx_bias" | "tx_power") {
                    " lane 1"
                } else {
                    ""
                };
                flags.push((A2 + base, bit, format!("{q} {side} {level}{lane}")));
            }
            flags.push((A2 + base + 1, 7, format!("rx_power high {level} lane 1")));
            flags.push((A2 + base + 1, 6, format!("rx_power low {level} lane 1")));
        }
    }
    o.flags = raised(e, &flags);
    o
}

/// SFF-8636: the lower page measures (four lanes) and latches flags; page 03h holds the
/// thresholds; upper page 00h names the module and says whether it is copper.
fn sff8636(e: &Eeprom, name: &str) -> Optics {
    let mut o = Optics {
        module: format!("{name} (SFF-8636)"),
        vendor: e.text(148, 16),
        part: e.text(168, 16),
        serial: e.text(196, 16),
        // Byte 147 bits 7-4, transmitter technology: 1010b and above are copper.
        copper: e.get(147).is_some_and(|b| b >> 4 >= 0x0a),
        ..Optics::default()
    };
    // Byte 220, the monitoring type: bits 5 and 4, temperature and voltage monitored, came
    // late to the specification, and modules built before leave them 0 while measuring both
    // (ethtool reads them always): a reading is taken when its bit is set or it is not 0 (a
    // passive cable's are 0). Bit 2: transmitted power measured; upper page 00h unread:
    // tried.
    let diag = e.get(220);
    let bit = |b: u8| diag.is_some_and(|d| d & b != 0);
    o.temperature_c = e.i16(22).filter(|&t| t != 0 || bit(0x20)).map(celsius);
    o.voltage_v = e.u16(26).filter(|&v| v != 0 || bit(0x10)).map(volts);
    let tx_power = diag.is_none_or(|d| d & 0x04 != 0);
    // Byte 86: a lane's transmitter disabled (bits 0-3): the lane is not in use.
    let disabled = e.get(86).unwrap_or(0);
    o.lanes = (0..4u32)
        .map(|l| Lane {
            lane: l as u8 + 1,
            rx_power_mw: e.u16(34 + 2 * l).map(milliwatts),
            tx_bias_ma: e.u16(42 + 2 * l).map(milliamps),
            tx_power_mw: e.u16(50 + 2 * l).map(milliwatts).filter(|_| tx_power),
            inactive: disabled & (1 << l) != 0,
        })
        .collect();
    // Page 03h's byte B at B + 128·3 flat.
    const P3: u32 = 384;
    thresholds(
        &mut o,
        e,
        P3,
        [
            ("temperature", 128, &celsius_at),
            ("voltage", 144, &volts_at),
            ("rx_power", 176, &milliwatts_at),
            ("tx_bias", 184, &|e: &Eeprom, at| e.u16(at).map(milliamps)),
            ("tx_power", 192, &milliwatts_at),
        ],
    );
    // Latched flags: byte 6 temperature, 7 voltage (bits 7-4: the four kinds); 9-10 rx power,
    // 11-12 tx bias, 13-14 tx power (a nibble per lane, lane 1 in the high one).
    let mut flags = Vec::new();
    for (at, q) in [(6, "temperature"), (7, "voltage")] {
        for (k, kind) in KINDS.iter().enumerate() {
            flags.push((at, 7 - k as u8, format!("{q} {kind}")));
        }
    }
    for (at, q) in [(9, "rx_power"), (11, "tx_bias"), (13, "tx_power")] {
        for lane in 0..4u32 {
            let byte = at + lane / 2;
            let high = if lane % 2 == 0 { 7 } else { 3 };
            for (k, kind) in KINDS.iter().enumerate() {
                flags.push((
                    byte,
                    high - k as u8,
                    format!("{q} {kind} lane {}", lane + 1),
                ));
            }
        }
    }
    // Byte 3: receiver loss of signal, bits 0-3 for lanes 1-4; byte 4: transmitter
    // fault, bits 0-3.
    for lane in 0..4u8 {
        flags.push((3, lane, format!("rx_los lane {}", lane + 1)));
        flags.push((4, lane, format!("tx_fault lane {}", lane + 1)));
    }
    o.flags = raised(e, &flags);
    o
}

/// CMIS: the lower page measures the module; page 01h says what is monitored; page 02h holds
/// the thresholds; page 11h (bank 0) measures and flags the lanes.
fn cmis(e: &Eeprom, name: &str) -> Optics {
    let rev = e
        .get(1)
        .map_or_else(String::new, |r| format!(" {}.{}", r >> 4, r & 0x0f));
    let mut o = Optics {
        module: format!("{name} (CMIS{rev})"),
        vendor: e.text(129, 16),
        part: e.text(148, 16),
        serial: e.text(166, 16),
        // Byte 85, module type: 3 passive copper, 4 active cable (copper or optical: its
        // power readings, where it gives them, stand).
        copper: e.get(85) == Some(0x03),
        ..Optics::default()
    };
    // Page 01h byte 159 (flat 287): bit 0 temperature, bit 1 voltage monitored. A flat-memory
    // module (no page 01h: a passive cable) monitors what reads non-zero.
    let module_adv = e.get(287);
    let monitored = |bit: u8, raw: u16| module_adv.map_or(raw != 0, |a| a & (1 << bit) != 0);
    o.temperature_c = e
        .u16(14)
        .filter(|&t| monitored(0, t))
        .map(|t| celsius(t as i16));
    o.voltage_v = e.u16(16).filter(|&v| monitored(1, v)).map(volts);
    // Page 01h byte 160 (flat 288): bit 0 tx bias, 1 tx power, 2 rx power monitored; bits 4-3
    // the bias multiplier. Unread: every monitor tried, bias as it reads.
    let adv = e.get(288);
    let has = |bit: u8| adv.is_none_or(|a| a & (1 << bit) != 0);
    let mult = match adv.map_or(0, |a| (a >> 3) & 0x03) {
        1 => 2.0,
        2 => 4.0,
        _ => 1.0,
    };
    // Application 1's media lane count (byte 88, bits 3-0); 8 when it does not say.
    let lanes = e
        .get(88)
        .map(|b| u32::from(b & 0x0f))
        .filter(|n| (1..=8).contains(n))
        .unwrap_or(8);
    // Page 11h's byte B at B + 128·17 flat.
    const P11: u32 = 128 * 17;
    // Page 11h bytes 128-131: each host lane's data path state (a nibble, lane 1 low in byte
    // 128; 4 DPActivated). No host lane activated: the module carries nothing and its lanes
    // are not in use. (Media lanes may be fewer than host lanes: judged as a whole.)
    let states: Vec<u8> = (0..8u32)
        .filter_map(|l| {
            e.get(P11 + 128 + l / 2)
                .map(|b| (b >> (4 * (l % 2))) & 0x0f)
        })
        .collect();
    // (State 0 is unused: a host lane the application does not use, or a module that does not
    // report.)
    let idle = !states.contains(&4) && states.iter().any(|s| *s != 0);
    let bias = move |e: &Eeprom, at: u32| e.u16(at).map(|v| milliamps(v) * mult);
    o.lanes = (0..lanes)
        .map(|l| Lane {
            lane: l as u8 + 1,
            tx_power_mw: e.u16(P11 + 154 + 2 * l).map(milliwatts).filter(|_| has(1)),
            tx_bias_ma: bias(e, P11 + 170 + 2 * l).filter(|_| has(0)),
            rx_power_mw: e.u16(P11 + 186 + 2 * l).map(milliwatts).filter(|_| has(2)),
            inactive: idle,
        })
        .collect();
    // Page 02h's byte B at B + 128·2 flat.
    const P2: u32 = 256;
    thresholds(
        &mut o,
        e,
        P2,
        [
            ("temperature", 128, &celsius_at),
            ("voltage", 136, &volts_at),
            ("tx_power", 176, &milliwatts_at),
            ("tx_bias", 184, &bias),
            ("rx_power", 192, &milliwatts_at),
        ],
    );
    // Latched flags: lower byte 9 (bits 0-3 temperature, 4-7 voltage, in the four kinds'
    // order); page 11h, a byte per kind and a bit per lane: tx power 139-142, tx bias 143-146,
    // rx power 149-152 (147 and 148 are the receivers' loss of signal and of lock).
    let mut flags = Vec::new();
    for (first, q) in [(0u8, "temperature"), (4, "voltage")] {
        for (k, kind) in KINDS.iter().enumerate() {
            flags.push((9, first + k as u8, format!("{q} {kind}")));
        }
    }
    for (at, q) in [(139, "tx_power"), (143, "tx_bias"), (149, "rx_power")] {
        for (k, kind) in KINDS.iter().enumerate() {
            for lane in 0..lanes {
                flags.push((
                    P11 + at + k as u32,
                    lane as u8,
                    format!("{q} {kind} lane {}", lane + 1),
                ));
            }
        }
    }
    // Page 11h byte 135: transmitter fault, 147: receiver loss of signal, a bit per lane.
    for lane in 0..lanes {
        flags.push((P11 + 147, lane as u8, format!("rx_los lane {}", lane + 1)));
        flags.push((P11 + 135, lane as u8, format!("tx_fault lane {}", lane + 1)));
    }
    o.flags = raised(e, &flags);
    o
}

/// `genetlink.h`, `ethtool_netlink.h`.
const NETLINK_GENERIC: isize = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const ETHTOOL_GENL_VERSION: u8 = 1;
const ETHTOOL_MSG_MODULE_EEPROM_GET: u8 = 31;
const ETHTOOL_A_MODULE_EEPROM_HEADER: u16 = 1;
const ETHTOOL_A_MODULE_EEPROM_OFFSET: u16 = 2;
const ETHTOOL_A_MODULE_EEPROM_LENGTH: u16 = 3;
const ETHTOOL_A_MODULE_EEPROM_PAGE: u16 = 4;
const ETHTOOL_A_MODULE_EEPROM_BANK: u16 = 5;
const ETHTOOL_A_MODULE_EEPROM_I2C_ADDRESS: u16 = 6;
const ETHTOOL_A_MODULE_EEPROM_DATA: u16 = 7;
const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
const NLA_F_NESTED: u16 = 0x8000;

/// The ethtool generic netlink family's id on this kernel.
fn ethtool_family(conn: &Conn) -> Result<Result<u16, i32>, NicError> {
    let what = "the ethtool netlink family";
    let (messages, end) = conn.exchange(
        &Request {
            kind: GENL_ID_CTRL,
            dump: false,
            family_header: &[CTRL_CMD_GETFAMILY, 2, 0, 0],
            attrs: &[(CTRL_ATTR_FAMILY_NAME, b"ethtool\0")],
        },
        what,
    )?;
    if let End::Refused(errno) = end {
        return Ok(Err(errno));
    }
    for m in &messages {
        let list = attrs(m.payload.get(4..).unwrap_or_default(), what)?;
        if let Some(id) = find(&list, CTRL_ATTR_FAMILY_ID).and_then(|a| a.value.get(..2)) {
            return Ok(Ok(u16::from_ne_bytes([id[0], id[1]])));
        }
    }
    Err(super::netlink::malformed(
        what,
        "a reply without the family id",
    ))
}

/// One half page of `iface`'s module: its bytes, or the errno the kernel refused with.
fn half_page(
    conn: &Conn,
    family: u16,
    iface: &str,
    (i2c, page, offset): (u8, u8, u32),
) -> Result<Result<Vec<u8>, i32>, NicError> {
    let what = format!("{iface}'s module EEPROM");
    let mut name = iface.as_bytes().to_vec();
    name.push(0);
    let mut header = Vec::new();
    put_attr(&mut header, ETHTOOL_A_HEADER_DEV_NAME, &name);
    let (messages, end) = conn.exchange(
        &Request {
            kind: family,
            dump: false,
            family_header: &[ETHTOOL_MSG_MODULE_EEPROM_GET, ETHTOOL_GENL_VERSION, 0, 0],
            attrs: &[
                (ETHTOOL_A_MODULE_EEPROM_HEADER | NLA_F_NESTED, &header),
                (ETHTOOL_A_MODULE_EEPROM_OFFSET, &offset.to_ne_bytes()),
                (ETHTOOL_A_MODULE_EEPROM_LENGTH, &HALF.to_ne_bytes()),
                (ETHTOOL_A_MODULE_EEPROM_PAGE, &[page]),
                (ETHTOOL_A_MODULE_EEPROM_BANK, &[0]),
                (ETHTOOL_A_MODULE_EEPROM_I2C_ADDRESS, &[i2c]),
            ],
        },
        &what,
    )?;
    if let End::Refused(errno) = end {
        return Ok(Err(errno));
    }
    for m in &messages {
        let list = attrs(m.payload.get(4..).unwrap_or_default(), &what)?;
        if let Some(d) = find(&list, ETHTOOL_A_MODULE_EEPROM_DATA) {
            return Ok(Ok(d.value.to_vec()));
        }
    }
    Err(super::netlink::malformed(&what, "a reply without the data"))
}

/// The EEPROM of `iface`'s module, the pages its diagnostics need (see [`pages`]); absent, with
/// the reason, when the driver reads no module (a virtual device), no module is plugged, or the
/// caller may not read it (CAP_NET_ADMIN: a read is I2C traffic to the module). A page the
/// module refuses beyond the lower one is left out (its values are then missing).
pub fn module_eeprom(iface: &str) -> Result<Availability<Eeprom>, NicError> {
    check_interface(iface)?;
    let absent = |reason: String| Ok(Availability::Absent { reason });
    let conn = Conn::open(NETLINK_GENERIC).map_err(|source| NicError::Netlink {
        what: "a generic netlink socket".into(),
        source,
    })?;
    let family = match ethtool_family(&conn)? {
        Ok(f) => f,
        Err(errno) => {
            return absent(format!(
                "the kernel has no ethtool netlink family ({})",
                errno_text(errno)
            ));
        }
    };
    let mut e = Eeprom::default();
    let lower = match half_page(&conn, family, iface, (0x50, 0, 0))? {
        Ok(b) => b,
        Err(errno) => {
            let why = match errno {
                libc::EOPNOTSUPP => "the driver reads no module EEPROM",
                libc::EPERM => "reading a module's EEPROM needs CAP_NET_ADMIN",
                libc::ENODEV => "no such interface",
                libc::EIO | libc::ENXIO | libc::EREMOTEIO | libc::ETIMEDOUT => {
                    "no module answers (none plugged?)"
                }
                _ => "the kernel refused the read",
            };
            return absent(format!(
                "{iface}: {why} (ETHTOOL_MSG_MODULE_EEPROM_GET: {})",
                errno_text(errno)
            ));
        }
    };
    e.put(0, &lower);
    let Some((_, map)) = e.get(0).and_then(identify) else {
        return absent(format!(
            "{iface}: module identifier {:#04x} is none of SFP, QSFP, QSFP-DD, OSFP",
            e.get(0).unwrap_or(0)
        ));
    };
    // The lower page says which pages hold the diagnostics. A page the module refuses, or a
    // read that fails, leaves its values missing, not the module.
    let mut want = vec![(0x50, 0, HALF)];
    want.extend(pages(map, &e));
    for (i2c, page, offset) in want {
        if let Ok(Ok(b)) = half_page(&conn, family, iface, (i2c, page, offset)) {
            e.put(flat(map, i2c, page, offset), &b);
        }
    }
    Ok(Availability::Present(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hex_dump_reads_back_what_it_writes_even_sparse() {
        let mut e = Eeprom::default();
        e.put(0, &[0x11, 0x07, 0x00]);
        e.put(512, &(0..=255u8).take(128).collect::<Vec<_>>());
        let text = e.to_hex();
        assert!(text.starts_with(
            "Offset\t\tValues\n------\t\t------\n0x0000:\t\t11 07 00 \n0x0200:\t\t00 01"
        ));
        assert_eq!(Eeprom::parse_hex(&text).unwrap(), e);
    }

    #[test]
    fn a_bad_hex_line_is_named() {
        for (text, want) in [
            ("0x0000: 11 zz", "line 1"),
            ("Offset\nfoo", "line 2"),
            ("0xfffff: 00", "beyond"),
            ("0x0000: 123", "hex byte"),
        ] {
            let e = Eeprom::parse_hex(text).unwrap_err();
            let s = format!("{e}");
            assert!(s.contains(want), "{text}: {s}");
        }
    }

    /// SFF-8472's external calibration (A0h byte 92 bit 4): the spec's formulas worked by
    /// hand. Temperature: slope 2.0, offset -256 (-1 °C), raw 4096 → (2·4096 - 256)/256 =
    /// 31 °C; bias: slope 0.5, offset 10, raw 1000 → 510 · 2 µA = 1.02 mA; received power:
    /// Rx_PWR(1) = 1.5, the others 0, raw 1000 → 1500 · 0.1 µW = 0.15 mW; voltage: slope 1.
    #[test]
    fn sff8472_external_calibration_follows_the_spec() {
        let mut e = Eeprom::default();
        e.put(0, &[0u8; 256]);
        e.put(256, &[0u8; 128]);
        e.put(0, &[0x03]);
        e.put(92, &[0x50, 0x00, 0x08]);
        let a2 = 256;
        e.put(a2 + 68, &1.5f32.to_be_bytes());
        e.put(a2 + 76, &[0x00, 0x80, 0x00, 0x0a]);
        e.put(a2 + 80, &[0x01, 0x00, 0x00, 0x00]);
        e.put(a2 + 84, &[0x02, 0x00, 0xff, 0x00]);
        e.put(a2 + 88, &[0x01, 0x00, 0x00, 0x00]);
        e.put(
            a2 + 96,
            &[0x10, 0x00, 0x80, 0xe8, 0x03, 0xe8, 0x00, 0x00, 0x03, 0xe8],
        );
        let o = decode(&e).unwrap();
        assert_eq!(o.temperature_c, Some(31.0));
        assert_eq!(o.voltage_v, Some(3.3));
        let l = o.lanes[0];
        assert!((l.tx_bias_ma.unwrap() - 1.02).abs() < 1e-9, "{l:?}");
        assert!((l.rx_power_mw.unwrap() - 0.15).abs() < 1e-9, "{l:?}");
        assert_eq!(l.tx_power_mw, Some(0.0));
        // The same bytes internally calibrated read raw.
        e.put(92, &[0x60]);
        let o = decode(&e).unwrap();
        assert_eq!(o.temperature_c, Some(16.0));
        // A2h that is A0h again (a driver's old call answering with A0h): no diagnostics.
        let a0: Vec<u8> = (0..128).map(|i| e.get(i).unwrap()).collect();
        e.put(a2, &a0);
        assert_eq!(decode(&e).unwrap().temperature_c, None);
    }

    #[test]
    fn an_unknown_identifier_or_nothing_read_decodes_to_none() {
        assert_eq!(decode(&Eeprom::default()), None);
        let mut e = Eeprom::default();
        e.put(0, &[0x42]);
        assert_eq!(decode(&e), None);
    }
}
