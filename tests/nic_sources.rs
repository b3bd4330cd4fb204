//! The NIC side of an offload host, read from real counter files: the fixture tree under
//! `tests/fixtures/sysfs` (see its README) through the root-directory option.

use std::path::{Path, PathBuf};

use integration_tests::{Scratch, workspace_root};
use roce_observer::source::nic::Availability;
use roce_observer::source::nic::dcqcn::dcqcn;
use roce_observer::source::nic::rdma::{RdmaDevice, rdma_devices};

fn fixtures() -> PathBuf {
    workspace_root().join("tests/fixtures/sysfs")
}

fn devices(root: &Path) -> Vec<RdmaDevice> {
    match rdma_devices(root).expect("readable") {
        Availability::Present(d) => d,
        Availability::Absent { reason } => panic!("absent: {reason}"),
    }
}

/// Every device, port and counter file of the fixtures, with the values the files hold.
#[test]
fn rdma_devices_ports_and_counters_are_read_from_sysfs() {
    let d = devices(&fixtures());
    let names: Vec<&str> = d.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["hfi1_0", "mlx4_0", "mlx5_0"]);
    let mlx5 = &d[2];
    assert_eq!(mlx5.fw_ver.as_deref(), Some("14.28.2006"));
    assert_eq!(mlx5.hca_type.as_deref(), Some("MT4118"));
    assert_eq!(mlx5.board_id.as_deref(), Some("SM_2001000001034"));
    let [p] = mlx5.ports.as_slice() else {
        panic!("mlx5_0 ports: {:?}", mlx5.ports);
    };
    assert_eq!(p.port, 1);
    assert_eq!(p.state.as_deref(), Some("4: ACTIVE"));
    assert_eq!(p.link_layer.as_deref(), Some("InfiniBand"));
    assert_eq!(p.rate.as_deref(), Some("25 Gb/sec (1X EDR)"));
    assert_eq!(p.counters.get("port_rcv_data"), Some(&18_126_345_378));
    assert_eq!(p.hw_counters.get("out_of_sequence"), Some(&1));
    assert!(
        !p.hw_counters.contains_key("lifespan"),
        "a setting, not a counter"
    );
    // Every file of the fixture's counter folders is one counter.
    let files = |sub: &str| {
        std::fs::read_dir(
            fixtures()
                .join("sys/class/infiniband/mlx5_0/ports/1")
                .join(sub),
        )
        .unwrap()
        .count()
    };
    assert_eq!(p.counters.len(), files("counters"));
    assert_eq!(p.hw_counters.len() + 1, files("hw_counters"));
    assert!(p.unreadable.is_empty(), "{:?}", p.unreadable);
    // The Omni-Path device has no driver counters; mlx4_0 two ports.
    assert!(d[0].ports[0].hw_counters.is_empty());
    assert_eq!(d[0].fw_ver.as_deref(), Some("1.27.0"));
    assert_eq!(
        d[1].ports.iter().map(|p| p.port).collect::<Vec<_>>(),
        [1, 2]
    );
}

/// A host without RDMA devices says so and why; a counter file that is no number is named,
/// the others still read.
#[test]
fn a_host_without_rdma_is_absent_with_the_reason_and_bad_files_are_named() {
    let s = Scratch::new("nic-sources");
    match rdma_devices(&s.path("")).unwrap() {
        Availability::Absent { reason } => {
            assert!(reason.contains("sys/class/infiniband missing"), "{reason}")
        }
        Availability::Present(d) => panic!("present: {d:?}"),
    }
    std::fs::create_dir_all(s.path("sys/class/infiniband")).unwrap();
    assert!(matches!(
        rdma_devices(&s.path("")).unwrap(),
        Availability::Absent { reason } if reason.contains("no RDMA device")
    ));
    let port = s.path("sys/class/infiniband/rxe0/ports/1");
    std::fs::create_dir_all(port.join("hw_counters")).unwrap();
    std::fs::write(port.join("hw_counters/out_of_sequence"), "7\n").unwrap();
    std::fs::write(port.join("hw_counters/broken"), "n/a\n").unwrap();
    std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
    std::fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
    std::fs::write(port.join("gid_attrs/ndevs/0"), "eth1\n").unwrap();
    std::fs::write(port.join("gid_attrs/ndevs/1"), "eth1\n").unwrap();
    std::fs::write(port.join("gid_attrs/ndevs/2"), "").unwrap();
    let d = devices(&s.path(""));
    let p = &d[0].ports[0];
    assert_eq!(p.hw_counters.get("out_of_sequence"), Some(&7));
    assert_eq!(p.unreadable, ["broken"]);
    assert_eq!(p.netdevs, ["eth1"]);
    assert_eq!(p.link_layer.as_deref(), Some("Ethernet"));
}

/// DCQCN settings of a real mlx5 netdev's files: the priorities each side is enabled on and
/// the CNP's DSCP and priority.
#[test]
fn dcqcn_settings_are_read_per_priority() {
    let d = match dcqcn(&fixtures(), "eth0").expect("readable") {
        Availability::Present(d) => d,
        Availability::Absent { reason } => panic!("absent: {reason}"),
    };
    // roce_np/enable: 1 1 0 1 1 0 1 1; roce_rp/enable: 1 1 0 1 1 0 1 0.
    assert_eq!(d.np_enabled, 0b1101_1011);
    assert_eq!(d.rp_enabled, 0b0101_1011);
    assert_eq!(d.np.get("cnp_dscp"), Some(&48));
    assert_eq!(d.np.get("cnp_802p_prio"), Some(&6));
    assert_eq!(d.np.get("min_time_between_cnps"), Some(&4));
    assert_eq!(d.rp.get("rpg_min_rate"), Some(&1));
    assert!(!d.np.contains_key("enable"));
}

/// This host's own sysfs: the loopback device has no DCQCN settings (absent, with the reason),
/// an interface that does not exist is absent, a name that is no interface name is an error.
#[test]
fn dcqcn_on_this_host_is_absent_with_the_reason() {
    match dcqcn(Path::new("/"), "lo").unwrap() {
        Availability::Absent { reason } => {
            assert!(reason.contains("lo: no DCQCN settings"), "{reason}")
        }
        Availability::Present(d) => panic!("lo has DCQCN settings? {d:?}"),
    }
    assert!(matches!(
        dcqcn(Path::new("/"), "roce-none0").unwrap(),
        Availability::Absent { reason } if reason.contains("no interface roce-none0")
    ));
    for bad in ["", "..", "a/b", "sixteen-bytes-xx"] {
        let e = dcqcn(Path::new("/"), bad).unwrap_err();
        assert!(
            e.to_string().contains("is no interface name"),
            "{bad:?}: {e}"
        );
    }
}
