//! Driver statistics and driver information of a netdev (`ethtool -S` / `ethtool -i`): the
//! ioctl reader against iproute2 on a veth pair in namespaces the test creates (and removes).
//! The text parsers and this host's own interfaces: nic_ethtool.rs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use integration_tests::{output, present, require_root};
use roce_observer::lab::Netns;
use roce_observer::source::nic::ethtool::{DriverInfo, driver_info, driver_stats};

/// `ip ARGS` in the namespace; its standard output.
fn ip(ns: &Netns, args: &[&str]) -> String {
    let (status, out, err) = output(ns.command("ip").args(args));
    assert!(status.success(), "ip {}: {err}", args.join(" "));
    out
}

/// `ip -j -s -d link show DEV`, the one object.
fn link(ns: &Netns, dev: &str) -> serde_json::Value {
    let out = ip(ns, &["-j", "-s", "-d", "link", "show", "dev", dev]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0].clone()
}

/// The ifindex of DEV as `ip -o link show` prints it ("4343: veth-b@if4242: <...").
fn ifindex(ns: &Netns, dev: &str) -> u64 {
    let out = ip(ns, &["-o", "link", "show"]);
    let line = out
        .lines()
        .find(|l| {
            l.split(": ")
                .nth(1)
                .is_some_and(|n| n == dev || n.starts_with(&format!("{dev}@")))
        })
        .unwrap_or_else(|| panic!("{dev} not in:\n{out}"));
    line.split(':').next().unwrap().parse().unwrap()
}

/// (packets, bytes) of `ip -s`'s rx or tx of DEV.
fn ip_counters(ns: &Netns, dev: &str, dir: &str) -> (u64, u64) {
    let l = link(ns, dev);
    let s = &l["stats64"][dir];
    (s["packets"].as_u64().unwrap(), s["bytes"].as_u64().unwrap())
}

fn stats_in(ns: &Netns, dev: &'static str) -> BTreeMap<String, u64> {
    present(ns.run_in(move || driver_stats(dev)).unwrap().unwrap())
}

/// Sets one of the legacy ethtool feature flags of DEV (`struct ethtool_value {cmd, data}`) from
/// inside the namespace (there is no ethtool binary to do it).
fn set_feature(ns: &Netns, dev: &'static str, cmd: u32, on: bool) {
    ns.run_in(move || {
        // SAFETY: a zeroed ifreq is valid; it names DEV (shorter than IFNAMSIZ) and points at
        // `value`, which lives through the call; the descriptor is closed once.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let mut value = [cmd, on as u32];
            let mut ifr: libc::ifreq = std::mem::zeroed();
            for (d, s) in ifr.ifr_name.iter_mut().zip(dev.bytes()) {
                *d = s as libc::c_char;
            }
            ifr.ifr_ifru.ifru_data = value.as_mut_ptr().cast();
            let rc = libc::ioctl(fd, libc::SIOCETHTOOL as _, &mut ifr as *mut libc::ifreq);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            assert_eq!(rc, 0, "{dev}: ethtool command {cmd:#x}: {err}");
        }
    })
    .unwrap();
}

const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGRO: u32 = 0x2c;

/// A veth pair across two namespaces, its ends given unusual ifindexes. What the ioctl reads is
/// checked against iproute2: each end's `peer_ifindex` is the other end's ifindex as
/// `ip -o link show` prints it in the other namespace; the driver is veth (`ip -d`'s link kind);
/// the receive queue's counters of datagrams sent across equal both `ip -s`'s and what was sent.
#[test]
fn veth_statistics_and_driver_agree_with_iproute2() {
    if !require_root("veth_statistics_and_driver_agree_with_iproute2") {
        return;
    }
    let a = Netns::create("ro-etha").unwrap();
    let b = Netns::create("ro-ethb").unwrap();
    ip(
        &a,
        &[
            "link", "add", "veth-a", "index", "4242", "type", "veth", "peer", "name", "veth-b",
            "index", "4343",
        ],
    );
    ip(&a, &["link", "set", "veth-b", "netns", b.name()]);
    ip(&a, &["addr", "add", "198.18.0.1/30", "dev", "veth-a"]);
    ip(&b, &["addr", "add", "198.18.0.2/30", "dev", "veth-b"]);
    ip(&a, &["link", "set", "veth-a", "up"]);
    ip(&b, &["link", "set", "veth-b", "up"]);

    // Driver information: veth's get_drvinfo says "veth", "1.0", no firmware, no bus.
    for (ns, dev) in [(&a, "veth-a"), (&b, "veth-b")] {
        let info = present(ns.run_in(move || driver_info(dev)).unwrap().unwrap());
        let kind = link(ns, dev)["linkinfo"]["info_kind"].clone();
        assert_eq!(kind, "veth", "ip -d link show {dev}");
        assert_eq!(info.driver, kind);
        assert_eq!(
            info,
            DriverInfo {
                driver: "veth".into(),
                version: "1.0".into(),
                firmware: String::new(),
                bus: String::new(),
            }
        );
    }

    // peer_ifindex: the other end's ifindex in its own namespace.
    let (index_a, index_b) = (ifindex(&a, "veth-a"), ifindex(&b, "veth-b"));
    assert_eq!((index_a, index_b), (4242, 4343), "the indexes asked for");
    let before = stats_in(&b, "veth-b");
    assert_eq!(stats_in(&a, "veth-a").get("peer_ifindex"), Some(&index_b));
    assert_eq!(before.get("peer_ifindex"), Some(&index_a));
    for name in [
        "rx_queue_0_xdp_packets",
        "rx_queue_0_xdp_bytes",
        "rx_queue_0_drops",
        "tx_queue_0_xdp_xmit",
    ] {
        assert!(before.contains_key(name), "{name} missing: {before:?}");
    }

    // veth counts per receive queue what goes through its NAPI path only: with GRO on on the
    // receiving end and TSO off on the sending end, every datagram does.
    set_feature(&b, "veth-b", ETHTOOL_SGRO, true);
    set_feature(&a, "veth-a", ETHTOOL_STSO, false);
    // No ARP in the counts: permanent neighbours both ways (and IPv6 is off in the lab).
    let mac = |ns: &Netns, dev: &str| link(ns, dev)["address"].as_str().unwrap().to_string();
    let (mac_a, mac_b) = (mac(&a, "veth-a"), mac(&b, "veth-b"));
    ip(
        &a,
        &[
            "neigh",
            "replace",
            "198.18.0.2",
            "lladdr",
            &mac_b,
            "dev",
            "veth-a",
            "nud",
            "permanent",
        ],
    );
    ip(
        &b,
        &[
            "neigh",
            "replace",
            "198.18.0.1",
            "lladdr",
            &mac_a,
            "dev",
            "veth-b",
            "nud",
            "permanent",
        ],
    );

    let before = stats_in(&b, "veth-b");
    let rx_before = ip_counters(&b, "veth-b", "rx");
    let tx_before = ip_counters(&a, "veth-a", "tx");
    const N: u64 = 50;
    const PAYLOAD: usize = 100;
    a.run_in(|| {
        let s = std::net::UdpSocket::bind("198.18.0.1:0").unwrap();
        for _ in 0..N {
            assert_eq!(
                s.send_to(&[0x5a; PAYLOAD], "198.18.0.2:9").unwrap(),
                PAYLOAD
            );
        }
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while ip_counters(&b, "veth-b", "rx").0 < rx_before.0 + N && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    let after = stats_in(&b, "veth-b");
    let rx_after = ip_counters(&b, "veth-b", "rx");
    let tx_after = ip_counters(&a, "veth-a", "tx");

    let delta = |name: &str| after[name] - before[name];
    let ip_rx = (rx_after.0 - rx_before.0, rx_after.1 - rx_before.1);
    let ip_tx = (tx_after.0 - tx_before.0, tx_after.1 - tx_before.1);
    assert_eq!(
        delta("rx_queue_0_xdp_packets"),
        N,
        "sent; {before:?} -> {after:?}"
    );
    assert_eq!(
        delta("rx_queue_0_xdp_packets"),
        ip_rx.0,
        "ip -s rx packets of veth-b"
    );
    assert_eq!(
        delta("rx_queue_0_xdp_packets"),
        ip_tx.0,
        "ip -s tx packets of veth-a"
    );
    // Counted from the IP header on: 20 + 8 + the payload.
    assert_eq!(delta("rx_queue_0_xdp_bytes"), N * (20 + 8 + PAYLOAD as u64));
    assert_eq!(
        delta("rx_queue_0_xdp_bytes"),
        ip_rx.1,
        "ip -s rx bytes of veth-b"
    );
    assert_eq!(
        delta("rx_queue_0_xdp_bytes"),
        ip_tx.1,
        "ip -s tx bytes of veth-a"
    );
    assert_eq!(delta("rx_queue_0_drops"), 0);
    assert_eq!(delta("tx_queue_0_xdp_xmit"), 0, "nothing redirected");
    assert_eq!(after["peer_ifindex"], index_a);
}
