//! The module EEPROM decoder against real modules: dumps published with another decoder's
//! reading of the same bytes (ethtool's output in a netdev mail, go-ethtool's and the Vyatta
//! dataplane's test assertions), in `tests/fixtures/optics/` with their sources. Each value a
//! source states is compared, to the digits it gives.

use roce_observer::model::nic::{Limits, Optics};
use roce_observer::source::nic::optics::{Eeprom, decode};

use integration_tests::workspace_root;

fn module(name: &str) -> Optics {
    let path = workspace_root().join(format!("tests/fixtures/optics/{name}.hex"));
    let text = std::fs::read_to_string(&path).unwrap();
    let e = Eeprom::parse_hex(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    decode(&e).unwrap_or_else(|| panic!("{name}: no module"))
}

/// `got` rounded to `digits` decimals is `want` (the source's own rounding).
fn to(got: Option<f64>, digits: i32, want: f64) {
    let got = got.expect("a value");
    let scale = 10f64.powi(digits);
    assert_eq!(
        (got * scale).round() / scale,
        want,
        "{got} to {digits} digits"
    );
}

fn limits(o: &Optics, q: &str) -> Limits {
    *o.limits
        .get(q)
        .unwrap_or_else(|| panic!("no {q} limits: {o:?}"))
}

/// A Mellanox QSFP28 on a Spectrum switch port: ethtool's thresholds from page 03h.
#[test]
fn sff8636_mellanox_qsfp28_thresholds_as_ethtool_reads_them() {
    let o = module("sff8636-netdev-mlxsw-sfp42-mellanox-qsfp28");
    assert_eq!(o.module, "QSFP28 (SFF-8636)");
    assert_eq!(o.part.as_deref(), Some("MMA1B00-SS1"));
    assert_eq!(o.serial.as_deref(), Some("MT1834FT03846"));
    let b = limits(&o, "tx_bias");
    for (got, want) in [
        (b.high_alarm, 8.5),
        (b.low_alarm, 5.492),
        (b.high_warning, 8.0),
        (b.low_warning, 6.0),
    ] {
        to(Some(got), 3, want);
    }
    let p = limits(&o, "tx_power");
    for (got, want) in [
        (p.high_alarm, 3.4673),
        (p.low_alarm, 0.0724),
        (p.high_warning, 1.7378),
        (p.low_warning, 0.1445),
    ] {
        to(Some(got), 4, want);
    }
    let t = limits(&o, "temperature");
    for (got, want) in [
        (t.high_alarm, 80.0),
        (t.low_alarm, -10.0),
        (t.high_warning, 70.0),
        (t.low_warning, 0.0),
    ] {
        to(Some(got), 2, want);
    }
    let v = limits(&o, "voltage");
    to(Some(v.high_alarm), 4, 3.5);
    to(Some(v.low_alarm), 4, 3.1);
    assert_eq!(o.lanes.len(), 4);
    assert!(o.temperature_c.is_some() && o.voltage_v.is_some());
    assert!(!o.copper);
}

/// An FS QSFP28 IR4: go-ethtool's lane 1 bias and bias thresholds.
#[test]
fn sff8636_fs_qsfp28_bias_as_go_ethtool_reads_it() {
    let o = module("sff8636-wobcom-fs-qsfp28-ir4");
    assert_eq!(o.vendor.as_deref(), Some("FS"));
    assert_eq!(o.part.as_deref(), Some("QSFP28-IR4-100G"));
    assert_eq!(o.serial.as_deref(), Some("C1812155461"));
    assert_eq!(o.lanes.len(), 4);
    to(o.lanes[0].tx_bias_ma, 3, 34.432);
    let b = limits(&o, "tx_bias");
    assert_eq!(
        (b.high_alarm, b.low_alarm, b.high_warning, b.low_warning),
        (75.0, 10.0, 70.0, 15.0)
    );
}

/// An SFP+ LR: go-ethtool's temperature, voltage, bias, received power and its thresholds.
#[test]
fn sff8472_sfp_lr_as_go_ethtool_reads_it() {
    let o = module("sff8472-wobcom-oem-sfp-10gb-lr");
    assert_eq!(o.module, "SFP (SFF-8472)");
    to(o.temperature_c, 2, 34.54);
    to(o.voltage_v, 2, 3.29);
    assert_eq!(o.lanes.len(), 1);
    to(o.lanes[0].tx_bias_ma, 3, 35.994);
    to(o.lanes[0].rx_power_mw, 4, 0.0);
    let r = limits(&o, "rx_power");
    to(Some(r.high_warning), 4, 1.0);
    to(Some(r.low_alarm), 4, 0.0158);
    to(Some(r.low_warning), 4, 0.0316);
}

/// A FLEXOPTIX SFP+: go-ethtool's transmit power high alarm threshold and names.
#[test]
fn sff8472_flexoptix_as_go_ethtool_reads_it() {
    let o = module("sff8472-wobcom-flexoptix-p.b1696.10.da");
    assert_eq!(o.vendor.as_deref(), Some("FLEXOPTIX"));
    assert_eq!(o.part.as_deref(), Some("P.B1696.10.DA"));
    assert_eq!(o.serial.as_deref(), Some("F79B5KH"));
    to(Some(limits(&o, "tx_power").high_alarm), 4, 1.7783);
}

/// An SFP+ SR: the Vyatta dataplane's (FreeBSD's decoder's) readings.
#[test]
fn sff8472_sfp_sr_as_the_freebsd_decoder_reads_it() {
    let o = module("sff8472-vyatta-sfp10gsr");
    assert_eq!(o.vendor.as_deref(), Some("OEMOEMOEMOEMOEMO"));
    assert_eq!(o.part.as_deref(), Some("SFP-10G-SR-IT"));
    assert_eq!(o.serial.as_deref(), Some("WQ160412A115"));
    to(o.temperature_c, 4, 44.3477);
    to(o.voltage_v, 4, 3.3034);
    to(o.lanes[0].rx_power_mw, 4, 0.0001);
    to(o.lanes[0].tx_power_mw, 4, 0.597);
    to(Some(limits(&o, "rx_power").high_alarm), 4, 1.0);
}

/// A MikroTik active optical cable without diagnostics (A0h byte 92 is 0): ethtool prints no
/// reading, and neither does the decoder, though A2h holds bytes.
#[test]
fn sff8472_without_diagnostics_gives_no_readings() {
    let o = module("sff8472-netdev-mikrotik-s-ao0005-noddm");
    assert_eq!(o.vendor.as_deref(), Some("MikroTik"));
    assert_eq!(o.part.as_deref(), Some("S+AO0005"));
    assert_eq!(o.serial.as_deref(), Some("STST050B1900001"));
    assert_eq!(o.temperature_c, None);
    assert!(
        o.lanes.is_empty() && o.limits.is_empty() && o.flags.is_empty(),
        "{o:?}"
    );
}

/// The modules' own flags agree with their readings: a receiver without light raises its low
/// power alarm and warning and its loss of signal (SFF-8472 in real time; SFF-8636 latched,
/// per lane), and the decoder's readings are below the same modules' thresholds.
#[test]
fn the_modules_flags_agree_with_their_readings() {
    let o = module("sff8472-wobcom-oem-sfp-10gb-lr");
    assert_eq!(
        o.flags,
        [
            "rx_los lane 1",
            "rx_power low alarm lane 1",
            "rx_power low warning lane 1"
        ]
    );
    assert!(o.lanes[0].rx_power_mw.unwrap() < limits(&o, "rx_power").low_alarm);
    let o = module("sff8636-netdev-mlxsw-sfp42-mellanox-qsfp28");
    let mut want = Vec::new();
    for lane in 1..=4 {
        want.push(format!("rx_power low alarm lane {lane}"));
        want.push(format!("rx_power low warning lane {lane}"));
    }
    want.extend((1..=4).map(|lane| format!("rx_los lane {lane}")));
    assert_eq!(o.flags, want);
    for l in &o.lanes {
        assert!(l.rx_power_mw.unwrap() < limits(&o, "rx_power").low_alarm);
    }
    // A module in service raises nothing.
    assert!(module("sff8636-wobcom-fs-qsfp28-ir4").flags.is_empty());
    assert!(
        module("sff8472-wobcom-flexoptix-p.b1696.10.da")
            .flags
            .is_empty()
    );
}
