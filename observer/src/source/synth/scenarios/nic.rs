//! The NIC side of a host, for the rules on NIC counters and configuration: a well-configured
//! mlx5 host (`nic_host`), read twice a second apart, and one `rule-nic-*` scenario per rule
//! that changes exactly what its rule judges. The wire beside it is `rules-clean`'s traffic,
//! which fires no wire rule.

use std::collections::BTreeMap;
use std::net::IpAddr;

use observer_common::{FlowKey, OpClass};

use super::rules::rules_clean;
use crate::model::nic::{Dcb, Dcqcn, DriverInfo, Qp};
use crate::source::nic::Availability;
use crate::source::nic::host::{Interface, Snapshot};
use crate::source::nic::optics::Eeprom;
use crate::source::nic::rdma::{RdmaDevice, RdmaPort};
use crate::source::synth::workload::{NicReadings, Workload};

/// The netdev of the synthetic host (mlx5's naming of a PCIe function's port).
pub const NIC_NETDEV: &str = "ens1f0np0";
/// Its RDMA device.
pub const NIC_DEVICE: &str = "mlx5_0";

/// The first reading's time (ns since the epoch); the second is a second later.
const TAKEN_NS: u64 = 1_800_000_000_000_000_000;

/// A driver counter of `port`, set.
fn hw(p: &mut RdmaPort, name: &str, v: u64) {
    p.hw_counters.insert(name.into(), v);
}

/// The host: RoCE on priority 3 (DSCP 26, PFC on 3 only), CNPs in DSCP 48 priority 6, DCQCN
/// on priority 3, MTU 9000, firmware 28.39.1002; its counters at `base` (each counter its own
/// value) plus, in the second reading, what the window adds.
fn reading(base: u64, taken_ns: u64) -> Snapshot {
    let mut port = RdmaPort {
        port: 1,
        state: Some("4: ACTIVE".into()),
        link_layer: Some("Ethernet".into()),
        rate: Some("100 Gb/sec (2X HDR)".into()),
        netdevs: vec![NIC_NETDEV.into()],
        // mlx5's default GIDs of an address: RoCE v1 and v2 of its link-local and of its IPv4
        // address (the mapped form).
        gids: [
            (0, "fe80:0000:0000:0000:0e42:a1ff:fe2b:3c4d", "IB/RoCE v1"),
            (1, "fe80:0000:0000:0000:0e42:a1ff:fe2b:3c4d", "RoCE v2"),
            (2, "0000:0000:0000:0000:0000:ffff:c612:0a01", "IB/RoCE v1"),
            (3, "0000:0000:0000:0000:0000:ffff:c612:0a01", "RoCE v2"),
        ]
        .into_iter()
        .map(|(index, gid, kind)| crate::model::nic::Gid {
            index,
            gid: gid.into(),
            kind: kind.into(),
            netdev: NIC_NETDEV.into(),
        })
        .collect(),
        rdma_cm: [
            ("default_roce_mode", "RoCE v2"),
            ("default_roce_tos", "106"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        ..RdmaPort::default()
    };
    for (i, name) in [
        "np_ecn_marked_roce_packets",
        "np_cnp_sent",
        "rp_cnp_handled",
        "rp_cnp_ignored",
        "out_of_sequence",
        "packet_seq_err",
        "local_ack_timeout_err",
        "implied_nak_seq_err",
        "duplicate_request",
        "out_of_buffer",
    ]
    .iter()
    .enumerate()
    {
        hw(&mut port, name, base + 1000 * i as u64);
    }
    for (i, name) in [
        "port_rcv_data",
        "port_xmit_data",
        "port_rcv_packets",
        "port_xmit_packets",
    ]
    .iter()
    .enumerate()
    {
        port.counters.insert((*name).into(), base * 100 + i as u64);
    }
    let mut stats = BTreeMap::new();
    for p in 0..8 {
        for what in ["pause", "pause_duration", "pause_transition"] {
            stats.insert(format!("rx_prio{p}_{what}"), base);
            stats.insert(format!("tx_prio{p}_{what}"), base);
        }
        stats.insert(format!("rx_prio{p}_buf_discard"), base);
        stats.insert(format!("rx_prio{p}_cong_discard"), base);
        stats.insert(format!("rx_prio{p}_bytes"), base * 4096);
    }
    for name in [
        "tx_pause_storm_warning_events",
        "tx_pause_storm_error_events",
        "rx_discards_phy",
        "rx_vport_rdma_unicast_packets",
        "tx_vport_rdma_unicast_packets",
        "rx_crc_errors_phy",
        "rx_symbol_err_phy",
    ] {
        stats.insert(name.into(), base);
    }
    let mut np = BTreeMap::new();
    np.insert("cnp_dscp".into(), 48);
    np.insert("cnp_802p_prio".into(), 6);
    np.insert("min_time_between_cnps".into(), 4);
    let mut rp = BTreeMap::new();
    rp.insert("rpg_min_rate".into(), 1);
    rp.insert("initial_alpha_value".into(), 1023);
    Snapshot {
        taken_ns,
        rdma: Availability::Present(vec![RdmaDevice {
            name: NIC_DEVICE.into(),
            fw_ver: Some("28.39.1002".into()),
            hca_type: Some("MT4129".into()),
            board_id: Some("MT_0000000838".into()),
            // A ConnectX-7 in a Gen5 x16 slot, on NUMA node 0.
            pci: [
                ("current_link_speed", "32.0 GT/s PCIe"),
                ("max_link_speed", "32.0 GT/s PCIe"),
                ("current_link_width", "16"),
                ("max_link_width", "16"),
                ("numa_node", "0"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            ports: vec![port],
        }]),
        interfaces: vec![Interface {
            name: NIC_NETDEV.into(),
            mtu: Some(9000),
            addresses: Vec::new(),
            driver: Availability::Present(DriverInfo {
                driver: "mlx5_core".into(),
                version: "6.18.0".into(),
                firmware: "28.39.1002 (MT_0000000838)".into(),
                bus: "0000:17:00.0".into(),
            }),
            stats: Availability::Present(stats),
            dcb: Availability::Present(Dcb {
                pfc_enabled: Some(0x08),
                pfc_cap: Some(8),
                pfc_requests: Some([0; 8]),
                pfc_indications: Some([0; 8]),
                prio_tc: Some([0, 1, 2, 3, 4, 5, 6, 7]),
                tc_tsa: Some([2; 8]),
                tc_bw: Some([12, 12, 12, 16, 12, 12, 12, 12]),
                dcbx: Some(0x0C),
                dscp_prio: vec![(26, 3), (48, 6)],
                // mlx5's buffers: the lossless priority in a buffer of its own.
                prio_buffer: Some([0, 0, 0, 1, 0, 0, 0, 0]),
                buffer_size: Some([262_016, 130_944, 0, 0, 0, 0, 0, 0]),
                buffer_total: Some(524_160),
                ..Dcb::default()
            }),
            dcqcn: Availability::Present(Dcqcn {
                np_enabled: 0x08,
                rp_enabled: 0x08,
                np,
                rp,
                unread: Vec::new(),
            }),
            carrier_changes: Some(2),
            // mlx5's default PFC storm prevention.
            pfc_watchdog: Availability::Present(100),
            module: Availability::Present(module()),
            // One RoCE netdev: the ARP sysctls as a distribution leaves them.
            sysctls: [
                ("arp_ignore", "0"),
                ("arp_announce", "0"),
                ("rp_filter", "2"),
                ("all/arp_ignore", "0"),
                ("all/arp_announce", "0"),
                ("all/rp_filter", "2"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        }],
        qps: Availability::Present(vec![Qp {
            device: NIC_DEVICE.into(),
            port: Some(1),
            lqpn: 0x401E,
            rqpn: Some(0x411E),
            qp_type: "RC".into(),
            state: "RTS".into(),
            pid: Some(4242),
            comm: Some("python3".into()),
            job: None,
        }]),
        // Two GPUs, one on the NIC's NUMA node.
        gpus: [("0000:18:00.0", 0), ("0000:9a:00.0", 1)]
            .into_iter()
            .map(|(bus, node)| crate::model::nic::Gpu {
                bus: bus.into(),
                vendor: "0x10de".into(),
                numa_node: Some(node),
            })
            .collect(),
    }
}

/// The port's module: a QSFP112 of two 50G lanes, CMIS 5.0 (identifier 0x1E), healthy: 45.5 °C,
/// 3.30 V, lanes at 7.5 / 7.8 mA, 1.2 / 1.1 mW out, 0.95 / 0.90 mW in; its thresholds a
/// multimode SR module's. Encoded as CMIS lays it out: what the decoder must read back.
pub fn module() -> Eeprom {
    let mut e = Eeprom::default();
    // The half pages read (flat offsets): lower, upper 00h, pages 01h, 02h, 11h.
    for at in [0, 128, 256, 384, 128 * 18] {
        e.put(at, &[0; 128]);
    }
    let w = |e: &mut Eeprom, at: u32, v: f64, scale: f64| {
        e.put(at, &((v * scale).round() as i64 as u16).to_be_bytes());
    };
    // Identifier, revision 5.0, paged memory, module state ready (3 in bits 3-1).
    e.put(0, &[0x1e, 0x50, 0x00, 0x06]);
    w(&mut e, 14, 45.5, 256.0);
    w(&mut e, 16, 3.30, 10_000.0);
    // Module type multimode fibre; application 1: 100GAUI-2 host, 100GBASE-SR2 media, 2 host
    // and 2 media lanes.
    e.put(85, &[0x01, 0x4c, 0x09, 0x22, 0x01]);
    for (at, text) in [(129, "NVIDIA"), (148, "MMA1T00-VS"), (166, "MT2330FT01234")] {
        e.put(at, format!("{text:<16}").as_bytes());
    }
    // Page 01h byte 159: temperature and voltage monitored; byte 160: tx bias, tx power and
    // rx power monitored, bias multiplier 1.
    e.put(128 + 159, &[0x03, 0x07]);
    // Page 02h's thresholds (high alarm, low alarm, high warning, low warning).
    let p2 = 256;
    for (i, v) in [80.0, -10.0, 75.0, -5.0].into_iter().enumerate() {
        w(&mut e, p2 + 128 + 2 * i as u32, v, 256.0);
    }
    for (i, v) in [3.63, 2.97, 3.465, 3.135].into_iter().enumerate() {
        w(&mut e, p2 + 136 + 2 * i as u32, v, 10_000.0);
    }
    for (at, vals, scale) in [
        (176, [3.98, 0.0708, 3.16, 0.1122], 10_000.0),
        (184, [13.0, 2.0, 12.0, 3.0], 500.0),
        (192, [3.98, 0.0447, 3.16, 0.0708], 10_000.0),
    ] {
        for (i, v) in vals.into_iter().enumerate() {
            w(&mut e, p2 + at + 2 * i as u32, v, scale);
        }
    }
    // Page 11h (bank 0): host lanes 1 and 2's data paths activated (state 4); per lane tx
    // power, tx bias, rx power.
    let p11 = 128 * 17;
    e.put(p11 + 128, &[0x44]);
    for (lane, (bias, tx, rx)) in [(7.5, 1.2, 0.95), (7.8, 1.1, 0.90)].into_iter().enumerate() {
        let l = 2 * lane as u32;
        w(&mut e, p11 + 154 + l, tx, 10_000.0);
        w(&mut e, p11 + 170 + l, bias, 500.0);
        w(&mut e, p11 + 186 + l, rx, 10_000.0);
    }
    e
}

/// A second's window on the clean host: every counter grows a little (traffic, and the CNPs
/// for the ECN marks it receives), nothing that tells of trouble.
fn clean_window() -> (Snapshot, Snapshot) {
    let before = reading(5_000, TAKEN_NS);
    let mut after = reading(5_000, TAKEN_NS + 1_000_000_000);
    let port = &mut rdma_port(&mut after);
    for (name, grow) in [
        ("np_ecn_marked_roce_packets", 400),
        ("np_cnp_sent", 380),
        ("rp_cnp_handled", 120),
        ("duplicate_request", 0),
    ] {
        *port.hw_counters.get_mut(name).expect("set") += grow;
    }
    for name in ["port_rcv_data", "port_xmit_data"] {
        *port.counters.get_mut(name).expect("set") += 2_500_000_000;
    }
    for (name, grow) in [
        ("rx_prio3_pause", 40),
        ("tx_prio3_pause", 12),
        // 2 ms and 0.5 ms of the second paused.
        ("rx_prio3_pause_duration", 2_000),
        ("tx_prio3_pause_duration", 500),
        ("rx_prio3_bytes", 10_000_000_000),
    ] {
        *stats(&mut after).get_mut(name).expect("set") += grow;
    }
    (before, after)
}

fn rdma_port(s: &mut Snapshot) -> &mut RdmaPort {
    match &mut s.rdma {
        Availability::Present(d) => &mut d[0].ports[0],
        Availability::Absent { .. } => unreachable!("the synthetic host has its device"),
    }
}

fn stats(s: &mut Snapshot) -> &mut BTreeMap<String, u64> {
    match &mut s.interfaces[0].stats {
        Availability::Present(m) => m,
        Availability::Absent { .. } => unreachable!("the synthetic host has its statistics"),
    }
}

fn with_nic(w: &mut Workload, change: impl FnOnce(&mut Snapshot, &mut Snapshot)) {
    rules_clean(w);
    let (mut before, mut after) = clean_window();
    change(&mut before, &mut after);
    w.nic = Some(NicReadings { before, after });
}

pub(super) fn rules_clean_nic(w: &mut Workload) {
    with_nic(w, |_, _| {});
}

pub(super) fn rule_nic_pfc_priorities(w: &mut Workload) {
    // PFC on priorities 0, 3 and 4 (the seed's first listed mistake).
    with_nic(w, |b, a| {
        for s in [b, a] {
            if let Availability::Present(d) = &mut s.interfaces[0].dcb {
                d.pfc_enabled = Some(0b0001_1001);
            }
        }
    });
}

pub(super) fn rule_nic_ecn_without_cnp(w: &mut Workload) {
    // 400 ECN-marked arrivals, no CNP sent: the notification point counts nothing.
    with_nic(w, |b, a| {
        let sent = rdma_port(b).hw_counters["np_cnp_sent"];
        rdma_port(a).hw_counters.insert("np_cnp_sent".into(), sent);
    });
}

pub(super) fn rule_nic_transport_errors(w: &mut Workload) {
    // 7 out-of-sequence arrivals and 2 sequence errors; out_of_sequence wraps its 32 bits.
    with_nic(w, |b, a| {
        hw(rdma_port(b), "out_of_sequence", 0xFFFF_FFFD);
        hw(rdma_port(a), "out_of_sequence", 4);
        let e = rdma_port(b).hw_counters["packet_seq_err"];
        hw(rdma_port(a), "packet_seq_err", e + 2);
    });
}

pub(super) fn rule_nic_pause_share(w: &mut Workload) {
    // Priority 3's transmitter held by received pauses 350 ms of the second.
    with_nic(w, |_, a| {
        *stats(a).get_mut("rx_prio3_pause_duration").expect("set") += 348_000;
    });
}

pub(super) fn rule_nic_pause_storm(w: &mut Workload) {
    // The watchdog's warning and error events.
    with_nic(w, |_, a| {
        *stats(a)
            .get_mut("tx_pause_storm_warning_events")
            .expect("set") += 3;
        *stats(a)
            .get_mut("tx_pause_storm_error_events")
            .expect("set") += 1;
    });
}

pub(super) fn rule_nic_lossless_discards(w: &mut Workload) {
    // The lossless priority 3 drops 120 frames for want of buffer; priority 0 (lossy) 5000.
    with_nic(w, |_, a| {
        *stats(a).get_mut("rx_prio3_buf_discard").expect("set") += 120;
        *stats(a).get_mut("rx_prio0_buf_discard").expect("set") += 5_000;
    });
}

pub(super) fn rule_nic_wire_mismatch(w: &mut Workload) {
    // The host is 198.18.40.101, a receiver of rules-clean: its NIC counts the CNPs the wire
    // shows it send and receive, but none of the CE-marked packets the wire shows arrive (a
    // counter that stopped, as after a firmware change).
    rules_clean(w);
    let host: IpAddr = [198, 18, 40, 101].into();
    let ip = |a: &[u8; 16]| -> IpAddr {
        let v6 = std::net::Ipv6Addr::from(*a);
        v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
    };
    let (mut ce_in, mut cnp_out, mut cnp_in) = (0, 0, 0);
    for (k, s) in &w.truth.flows {
        let k: &FlowKey = k;
        if ip(&k.dst_ip) == host {
            ce_in += s.ecn[3];
            cnp_in += s.ops[OpClass::Cnp as usize];
        }
        if ip(&k.src_ip) == host {
            cnp_out += s.ops[OpClass::Cnp as usize];
        }
    }
    let (before, mut after) = {
        let b = reading(5_000, TAKEN_NS);
        let a = reading(5_000, TAKEN_NS + 1_000_000_000);
        (b, a)
    };
    let p = rdma_port(&mut after);
    debug_assert!(ce_in >= 10, "enough CE marks to compare: {ce_in}");
    *p.hw_counters.get_mut("np_cnp_sent").expect("set") += cnp_out;
    *p.hw_counters.get_mut("rp_cnp_handled").expect("set") += cnp_in;
    after.interfaces[0].addresses = vec![host];
    let mut before = before;
    before.interfaces[0].addresses = vec![host];
    w.nic = Some(NicReadings { before, after });
}

#[cfg(test)]
mod synth_module {
    use crate::source::nic::optics::decode;

    /// The synthetic host's module reads back as the generator meant it, to the resolution of
    /// its units.
    #[test]
    fn the_synthetic_cmis_module_decodes_to_its_intent() {
        let o = decode(&super::module()).unwrap();
        assert_eq!(o.module, "QSFP+ or later (CMIS 5.0)");
        assert_eq!(o.vendor.as_deref(), Some("NVIDIA"));
        assert_eq!(o.part.as_deref(), Some("MMA1T00-VS"));
        assert_eq!(o.serial.as_deref(), Some("MT2330FT01234"));
        assert!(!o.copper);
        let near = |a: Option<f64>, b: f64| {
            let a = a.expect("read");
            assert!((a - b).abs() < 1e-3, "{a} vs {b}");
        };
        near(o.temperature_c, 45.5);
        near(o.voltage_v, 3.30);
        assert_eq!(o.lanes.len(), 2);
        for (l, (bias, tx, rx)) in o.lanes.iter().zip([(7.5, 1.2, 0.95), (7.8, 1.1, 0.90)]) {
            near(l.tx_bias_ma, bias);
            near(l.tx_power_mw, tx);
            near(l.rx_power_mw, rx);
        }
        let l = o.limits["rx_power"];
        assert!((l.low_alarm - 0.0447).abs() < 1e-4, "{l:?}");
        assert!((o.limits["tx_bias"].high_alarm - 13.0).abs() < 1e-3);
        assert!((o.limits["temperature"].low_alarm + 10.0).abs() < 1e-3);
        assert!(o.flags.is_empty(), "{:?}", o.flags);
    }
}
