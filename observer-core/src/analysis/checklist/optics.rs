//! The `optics` item: a netdev's pluggable module against its own alarm and warning thresholds
//! (temperature, supply voltage, and per lane laser bias, transmitted and received power), and
//! the alarm and warning flags it raised. A dim receiver is the classic cause of a RoCE link
//! that loses frames (CRC errors, then retransmissions) while everything else looks right.

use crate::model::nic::{Interface, ItemStatus, Limits, Optics};

/// An optical power in mW, with its dBm.
pub fn power(mw: f64) -> String {
    if mw <= 0.0 {
        "0 mW (no light)".into()
    } else {
        format!("{mw:.4} mW ({:.1} dBm)", 10.0 * mw.log10())
    }
}

/// A value of a quantity, in its unit.
fn value(quantity: &str, v: f64) -> String {
    match quantity {
        "temperature" => format!("{v:.1} °C"),
        "voltage" => format!("{v:.3} V"),
        "tx_bias" => format!("{v:.3} mA"),
        _ => power(v),
    }
}

/// What a quantity out of its range usually means.
fn cause(quantity: &str, high: bool) -> &'static str {
    match (quantity, high) {
        ("rx_power", false) => "a dirty or damaged fibre or connector, or the far end's laser",
        ("rx_power", true) => "too much light: a short link without attenuation",
        ("tx_power", false) | ("tx_bias", true) => "the laser ageing or failing",
        ("temperature", true) => "airflow, or the module failing",
        ("voltage", _) => "the port's supply",
        _ => "the module out of its range",
    }
}

/// The module named: "QSFP28 (SFF-8636) FINISAR FTL410QE2C SN X123".
fn who(o: &Optics) -> String {
    let mut s = o.module.clone();
    for v in [&o.vendor, &o.part].into_iter().flatten() {
        s.push(' ');
        s.push_str(v);
    }
    if let Some(sn) = &o.serial {
        s.push_str(&format!(" SN {sn}"));
    }
    s
}

/// The module's readings: (quantity, lane, value); a copper cable's light readings left out.
fn readings(o: &Optics) -> Vec<(&'static str, Option<u8>, f64)> {
    let mut out = Vec::new();
    if let Some(t) = o.temperature_c {
        out.push(("temperature", None, t));
    }
    if let Some(v) = o.voltage_v {
        out.push(("voltage", None, v));
    }
    if !o.copper {
        for l in o.lanes.iter().filter(|l| !l.inactive) {
            for (q, v) in [
                ("tx_bias", l.tx_bias_ma),
                ("tx_power", l.tx_power_mw),
                ("rx_power", l.rx_power_mw),
            ] {
                if let Some(v) = v {
                    out.push((q, Some(l.lane), v));
                }
            }
        }
    }
    out
}

/// The range of one quantity over the lanes, in its unit (powers in dBm alone): "rx -0.5 to
/// -0.2 dBm".
fn span(rs: &[(&str, Option<u8>, f64)], quantity: &str) -> Option<String> {
    let vs: Vec<f64> = rs.iter().filter(|r| r.0 == quantity).map(|r| r.2).collect();
    let lo = vs.iter().copied().reduce(f64::min)?;
    let hi = vs.iter().copied().reduce(f64::max)?;
    let (label, unit, show): (&str, &str, fn(f64) -> String) = match quantity {
        "temperature" => ("", " °C", |v| format!("{v:.1}")),
        "voltage" => ("", " V", |v| format!("{v:.3}")),
        "tx_bias" => ("bias ", " mA", |v| format!("{v:.1}")),
        "tx_power" => ("tx ", " dBm", dbm),
        _ => ("rx ", " dBm", dbm),
    };
    Some(if show(lo) == show(hi) {
        format!("{label}{}{unit}", show(lo))
    } else {
        format!("{label}{} to {}{unit}", show(lo), show(hi))
    })
}

fn dbm(mw: f64) -> String {
    if mw <= 0.0 {
        "-inf".into()
    } else {
        format!("{:.1}", 10.0 * mw.log10())
    }
}

/// `seconds`: the window between the two readings (0: one reading), over which the module's
/// latched flags were raised (the first reading cleared them).
pub(super) fn optics(i: &Interface, seconds: f64, absent: &str) -> (ItemStatus, String) {
    let Some(o) = &i.optics else {
        return (
            ItemStatus::Unknown,
            format!("no module diagnostics: {absent}"),
        );
    };
    let who = who(o);
    let rs = readings(o);
    let mut alarms = Vec::new();
    let mut warnings = Vec::new();
    // Crossings by the flag name the module would raise for them.
    let mut crossed = Vec::new();
    let mut judged = 0;
    for &(q, lane, v) in &rs {
        let Some(l) = o.limits.get(q) else { continue };
        judged += 1;
        let Limits {
            high_alarm,
            low_alarm,
            high_warning,
            low_warning,
        } = *l;
        let (level, high, limit) = if v > high_alarm {
            ("alarm", true, high_alarm)
        } else if v < low_alarm {
            ("alarm", false, low_alarm)
        } else if v > high_warning {
            ("warning", true, high_warning)
        } else if v < low_warning {
            ("warning", false, low_warning)
        } else {
            continue;
        };
        let side = if high { "high" } else { "low" };
        let lane_s = lane.map_or_else(String::new, |l| format!(" lane {l}"));
        // Past an alarm is past the warning too: the module raises both.
        crossed.push(format!("{q} {side} warning{lane_s}"));
        crossed.push(format!("{q} {side} alarm{lane_s}"));
        let text = format!(
            "{}{lane_s} {} {} the {side} {level} {} ({})",
            q.replace('_', " "),
            value(q, v),
            if high { "above" } else { "below" },
            value(q, limit),
            cause(q, high)
        );
        if level == "alarm" {
            alarms.push(text);
        } else {
            warnings.push(text);
        }
    }
    // The module's own flags beyond what the values show. SFF-8472's are real time; SFF-8636
    // and CMIS latch theirs until read: raised at some moment of the window, or, on one
    // reading, since the last read (or the module's insertion: a link coming up raises loss
    // of signal).
    let when = if o.module.contains("SFF-8472") {
        "now".to_string()
    } else if seconds > 0.0 {
        format!("during the {seconds:.1} s window")
    } else {
        "since its last read or insertion".to_string()
    };
    let idle: Vec<String> = o
        .lanes
        .iter()
        .filter(|l| l.inactive)
        .map(|l| format!(" lane {}", l.lane))
        .collect();
    for f in &o.flags {
        // A copper cable's light flags are no more judged than its light readings, nor are a
        // lane's not in use.
        let weighed = !o.copper || f.starts_with("temperature") || f.starts_with("voltage");
        let in_use = !idle.iter().any(|l| f.ends_with(l.as_str()));
        if weighed && in_use && !crossed.contains(f) {
            warnings.push(format!("the module raised \"{f}\" {when}"));
        }
    }
    if !alarms.is_empty() {
        alarms.extend(warnings);
        return (ItemStatus::Fail, format!("{who}: {}", alarms.join("; ")));
    }
    if !warnings.is_empty() {
        return (ItemStatus::Warn, format!("{who}: {}", warnings.join("; ")));
    }
    let active = o.lanes.iter().filter(|l| !l.inactive).count();
    let mut seen: Vec<String> = ["temperature", "voltage", "rx_power", "tx_power", "tx_bias"]
        .iter()
        .filter_map(|q| span(&rs, q))
        .collect();
    if !o.copper && active > 1 {
        seen.push(format!("over {active} lanes"));
    }
    if !o.copper && active == 0 && !o.lanes.is_empty() {
        seen.push("no lane in use (data path not activated, or transmitters disabled)".into());
    }
    let seen = seen.join(", ");
    if judged == 0 {
        if o.copper {
            return (
                ItemStatus::NotApplicable,
                format!("{who}: a copper cable, no light to judge"),
            );
        }
        return (
            ItemStatus::Unknown,
            if rs.is_empty() {
                format!("{who}: the module gives no diagnostics")
            } else {
                format!("{who}: {seen}; the module gives no thresholds to judge them by")
            },
        );
    }
    // An optical module whose lanes were not read (a page refused, a tree without it): its
    // light is not judged, and the item cannot pass on temperature alone.
    let lane_read = rs.iter().any(|r| r.1.is_some());
    if !o.copper && active > 0 && !lane_read {
        return (
            ItemStatus::Unknown,
            format!("{who}: {seen}; no lane readings (the module's lane page was not read)"),
        );
    }
    (
        ItemStatus::Pass,
        format!("{who}: {seen}: within the module's warning thresholds"),
    )
}
