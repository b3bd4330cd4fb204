//! Driver statistics and driver information of a netdev (`ethtool -S` / `ethtool -i`): the text
//! parsers against real `ethtool` output, the fixtures under `tests/fixtures/sysfs/ethtool` (see
//! their README), and the ioctl reader on this host's own interfaces. The ioctl reader against
//! iproute2 on a veth pair (which needs root): privileged/nic_ethtool_live.rs.

use integration_tests::{absent, workspace_root};
use roce_observer::source::nic::ethtool::{
    DriverInfo, driver_info, driver_stats, parse_info, parse_stats,
};

fn fixture(path: &str) -> String {
    let p = workspace_root()
        .join("tests/fixtures/sysfs/ethtool")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The `ethtool -S` text of a real NIC: every "name: value" line, with the values the file holds.
#[test]
fn statistics_text_of_a_real_nic_gives_the_values_the_file_holds() {
    let text = fixture("eth0/statistics");
    let stats = parse_stats(&text).unwrap();
    // Read off the file by eye.
    for (name, value) in [
        ("tx_packets", 961_500),
        ("rx_packets", 1_260_062),
        ("port.rx_dropped", 12_028),
        ("rx_missed", 401),
        ("rx_unicast", 1_230_297),
        ("rx_broadcast", 5_792),
        ("rx_multicast", 23_973),
        ("tx_underrun", 0),
        ("duplicate metric", 1),
        ("duplicate_metric", 2),
    ] {
        assert_eq!(stats.get(name), Some(&value), "{name}");
    }
    // Counted independently: the indented lines holding ": " (16 in the file).
    let lines = text
        .lines()
        .filter(|l| l.starts_with("     ") && l.contains(": "))
        .count();
    assert_eq!(lines, 16);
    assert_eq!(stats.len(), lines, "{stats:?}");
    // The same text cut by `grep` (no header), with empty lines, reads the same.
    let grepped: String = text
        .lines()
        .filter(|l| l.starts_with("     "))
        .flat_map(|l| [l, "\n", "\n"])
        .collect();
    assert_eq!(parse_stats(&grepped).unwrap(), stats);
}

/// The `ethtool -i` text of a real NIC.
#[test]
fn driver_text_of_a_real_nic_gives_the_values_the_file_holds() {
    let info = parse_info(&fixture("eth0/driver")).unwrap();
    assert_eq!(
        info,
        DriverInfo {
            driver: "e1000e".into(),
            version: "5.11.0-22-generic".into(),
            firmware: "0.5-4".into(),
            bus: "0000:00:1f.6".into(),
        }
    );
}

/// A malformed line is an error naming its number (1-based, in the whole text) and its text.
#[test]
fn malformed_text_is_an_error_naming_the_line() {
    let text = fixture("eth0/statistics");
    for (broken, why) in [
        ("     rx_missed: n/a", "no number"),
        ("     rx_missed 401", "no colon"),
        ("     rx_missed: -401", "negative"),
        ("     rx_missed: 18446744073709551616", "2^64"),
        ("     : 401", "no name"),
    ] {
        let mut lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[7], "     rx_missed: 401");
        lines[7] = broken;
        let e = parse_stats(&lines.join("\n")).unwrap_err().to_string();
        assert!(e.starts_with("line 8:"), "{why}: {e}");
        assert!(e.contains(broken), "{why}: {e}");
    }

    let text = fixture("eth0/driver");
    let mut lines: Vec<&str> = text.lines().collect();
    lines[3] = "firmware-version 0.5-4";
    let e = parse_info(&lines.join("\n")).unwrap_err().to_string();
    assert!(
        e.starts_with("line 4:") && e.contains("firmware-version 0.5-4"),
        "{e}"
    );
    let e = parse_info(&text.replace("driver: e1000e\n", ""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("driver"), "{e}");
}

/// This host's own interfaces, no privilege needed: one that does not exist is absent with its
/// name, the loopback device has neither statistics nor driver information, names that are no
/// interface names are errors.
#[test]
fn missing_interfaces_loopback_and_bad_names() {
    let reason = absent(driver_stats("ro-none0").unwrap());
    assert!(reason.contains("no interface ro-none0"), "{reason}");
    let reason = absent(driver_info("ro-none0").unwrap());
    assert!(reason.contains("no interface ro-none0"), "{reason}");
    let reason = absent(driver_stats("lo").unwrap());
    assert!(
        reason.contains("lo: the driver exposes no statistics"),
        "{reason}"
    );
    let reason = absent(driver_info("lo").unwrap());
    assert!(
        reason.contains("lo: the driver gives no driver information"),
        "{reason}"
    );
    for bad in ["", "a/b", "sixteen-bytes-xx", "..", "a\0b"] {
        for e in [
            driver_stats(bad).unwrap_err(),
            driver_info(bad).map(|_| ()).unwrap_err(),
        ] {
            assert!(
                e.to_string().contains("is no interface name"),
                "{bad:?}: {e}"
            );
        }
    }
}
