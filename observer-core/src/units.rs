//! Units people type: durations (`10s`, `500ms`), link speeds (`100G`, `400Gb/s`) and microburst
//! slot widths (`100us`, `off`); whether two file paths they typed are one file. Errors are one
//! sentence naming what was typed. And durations as reports print them (`720 µs`, `3.2 ms`).

use std::{path::Path, time::Duration};

/// Whether two paths name one existing file (by any path, link or hard link).
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// `n` and the noun, plural unless `n` is 1: "1 flow", "2 flows", "0 flows".
pub fn count(n: u64, word: &str) -> String {
    format!("{n} {}", noun(n, word))
}

/// The noun for `n` of it: plural (with an s) unless `n` is 1.
pub fn noun(n: u64, word: &str) -> String {
    if n == 1 {
        word.to_string()
    } else {
        format!("{word}s")
    }
}

/// A choice spelled by a name in flags and config files (`--xdp-mode skb`, `tc_hook = "tcx"`).
/// The CLI's argument enums convert to these; config files parse them with [`Named::parse`].
pub trait Named: Copy + 'static {
    /// Every choice, in the order help texts list them.
    const ALL: &'static [Self];

    fn name(self) -> &'static str;

    /// The choice named `s` (ASCII case ignored).
    fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|v| v.name().eq_ignore_ascii_case(s.trim()))
    }

    /// "a, b, c": the names, for messages.
    fn names() -> String {
        Self::ALL
            .iter()
            .map(|v| v.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Parses `10s`, `500ms`, `100us`, `2m`, `1h` or a number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (use 10s, 500ms, 2m)"))?;
    let secs = match unit {
        "us" | "µs" => v / 1e6,
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(format!(
                "'{s}': unknown unit '{unit}' (use us, ms, s, m, h)"
            ));
        }
    };
    if secs.is_nan() || secs <= 0.0 {
        return Err(format!("'{s}': the duration must be positive"));
    }
    if secs > 365.0 * 86400.0 {
        return Err(format!("'{s}': at most a year"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration of `ns` nanoseconds as reports print it: three significant digits or so, in the
/// unit that keeps the number between 1 and 1000 (ns, µs, ms, s), minutes and hours past a
/// minute: "850 ns", "720 µs", "3.2 ms", "12.4 s", "2.5 min", "1.3 h". Never "0.0 s": zero
/// is "0 s".
pub fn duration(ns: u64) -> String {
    if ns == 0 {
        return "0 s".to_string();
    }
    let v = ns as f64;
    let (value, unit) = if v < 1e3 {
        (v, "ns")
    } else if v < 1e6 {
        (v / 1e3, "µs")
    } else if v < 1e9 {
        (v / 1e6, "ms")
    } else if v < 60e9 {
        (v / 1e9, "s")
    } else if v < 3600e9 {
        (v / 60e9, "min")
    } else {
        (v / 3600e9, "h")
    };
    // Rounding may carry into the next unit ("999.6 µs" is "1000 µs"): say it in that unit.
    let digits = if value >= 99.95 || unit == "ns" { 0 } else { 1 };
    let text = format!("{value:.digits$}");
    match (text.as_str(), unit) {
        ("1000", "ns") => "1.0 µs".to_string(),
        ("1000", "µs") => "1.0 ms".to_string(),
        ("1000", "ms") => "1.0 s".to_string(),
        (t, _) => format!("{t} {unit}"),
    }
}

/// [`duration`] of a number of seconds (negative and NaN print as 0).
pub fn duration_s(seconds: f64) -> String {
    duration((seconds.max(0.0) * 1e9).round() as u64)
}

/// Parses a link speed in bits/s: a number with a unit K, M, G or T (bits per second), optionally
/// followed by `b/s` or `bps`: `100G`, `25G`, `400Gb/s`, `10000M`.
pub fn parse_link_speed(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower
        .strip_suffix("b/s")
        .or_else(|| lower.strip_suffix("bps"))
        .unwrap_or(&lower);
    let bad = || format!("'{t}' is not a link speed (use 100G, 25G, 400G or 10000M)");
    if !body.is_ascii() {
        return Err(bad());
    }
    let (num, unit) = body.split_at(body.len().saturating_sub(1));
    let scale: f64 = match unit {
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        _ => return Err(bad()),
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let bps = v * scale;
    if !(1e6..=1e13).contains(&bps) {
        return Err(format!("'{t}': a link speed between 1M and 10T"));
    }
    Ok(bps.round() as u64)
}

/// The microburst slot width unless one is given: 100 us.
pub const DEFAULT_SLOT_NS: u64 = 100_000;
/// The narrowest slot (10 us) and the widest (100 ms).
pub const MIN_SLOT_NS: u64 = 10_000;
pub const MAX_SLOT_NS: u64 = 100_000_000;

/// A microburst slot width in ns: `off`, or 10us to 100ms.
pub fn parse_slot(s: &str) -> Result<u64, String> {
    if s.trim() == "off" {
        return Ok(0);
    }
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else {
        return Err(format!(
            "'{t}' is not a slot width (use 100us, 1ms, or off)"
        ));
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{t}' is not a slot width (use 100us, 1ms, or off)"))?;
    let ns = (v * scale).round();
    if !(MIN_SLOT_NS as f64..=MAX_SLOT_NS as f64).contains(&ns) {
        return Err(format!("'{t}': a slot width between 10us and 100ms"));
    }
    Ok(ns as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        assert_eq!(
            parse_duration("9999h"),
            Err("'9999h': at most a year".to_string())
        );
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn durations_print_in_the_unit_that_fits() {
        for (ns, want) in [
            (0, "0 s"),
            (850, "850 ns"),
            (1_000, "1.0 µs"),
            (10_000, "10.0 µs"),
            (100_000, "100 µs"),
            (720_000, "720 µs"),
            (999_960, "1.0 ms"),
            (3_200_000, "3.2 ms"),
            (3_249_000, "3.2 ms"),
            (12_400_000_000, "12.4 s"),
            (59_000_000_000, "59.0 s"),
            (150_000_000_000, "2.5 min"),
            (4_680_000_000_000, "1.3 h"),
        ] {
            assert_eq!(duration(ns), want, "{ns} ns");
        }
        assert_eq!(duration_s(0.00072), "720 µs");
        assert_eq!(duration_s(-1.0), "0 s");
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_duration("50µs"), Ok(Duration::from_micros(50)));
    }

    #[test]
    fn link_speeds() {
        assert_eq!(parse_link_speed("100G"), Ok(100_000_000_000));
        assert_eq!(parse_link_speed("25g"), Ok(25_000_000_000));
        assert_eq!(parse_link_speed("400Gb/s"), Ok(400_000_000_000));
        assert_eq!(parse_link_speed("10000M"), Ok(10_000_000_000));
        assert_eq!(parse_link_speed("2.5Gbps"), Ok(2_500_000_000));
        assert_eq!(parse_link_speed("1T"), Ok(1_000_000_000_000));
        for bad in [
            "100", "fast", "G", "-1G", "100X", "0G", "100T", "100€", "1µ", "€", "",
        ] {
            assert!(parse_link_speed(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_link_speed("100"),
            Err("'100' is not a link speed (use 100G, 25G, 400G or 10000M)".to_string())
        );
    }
}
