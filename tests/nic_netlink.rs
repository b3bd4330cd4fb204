//! The NIC side over netlink: DCB configuration (dcbnl, rtnetlink) and RDMA devices and QPs
//! (RDMA netlink). Real kernel calls against iproute2's `rdma` as ground truth;
//! replies laid out here byte by byte from the uapi headers (include/uapi/linux/dcbnl.h,
//! include/uapi/rdma/rdma_netlink.h), independently of the parser; the recorded fixtures. DCB of
//! a veth against iproute2's `dcb` (which needs root): privileged/nic_netlink_live.rs.

use std::path::PathBuf;
use std::process::Command;

use integration_tests::{Scratch, absent as reason, output, present, workspace_root};
use roce_observer::source::nic::dcb::{Dcb, dcb, dcb_at, parse_dcb_reply};
use roce_observer::source::nic::rdma_netlink::{Qp, devices, parse_qp_dump, qps, qps_at};
use roce_observer::source::nic::{Availability, NicError};

// ---- Netlink framing, by hand (include/uapi/linux/netlink.h) ----

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_MULTI: u16 = 2;
const NLA_F_NESTED: u16 = 0x8000;

/// struct nlattr { u16 nla_len; u16 nla_type; } then the value, padded to 4 bytes.
fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    v.extend_from_slice(&kind.to_ne_bytes());
    v.extend_from_slice(value);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

fn nest(kind: u16, children: &[Vec<u8>]) -> Vec<u8> {
    nla(kind, &children.concat())
}

fn string(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// struct nlmsghdr { u32 len; u16 type; u16 flags; u32 seq; u32 pid; } then the payload.
fn nlmsg(kind: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
    v.extend_from_slice(&kind.to_ne_bytes());
    v.extend_from_slice(&flags.to_ne_bytes());
    v.extend_from_slice(&7u32.to_ne_bytes());
    v.extend_from_slice(&4242u32.to_ne_bytes());
    v.extend_from_slice(payload);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

/// NLMSG_ERROR: the negative errno (0: an acknowledgement), then the request's header.
fn nlmsg_error(errno: i32) -> Vec<u8> {
    let mut p = (-errno).to_ne_bytes().to_vec();
    p.extend_from_slice(&[0u8; 16]);
    nlmsg(NLMSG_ERROR, 0, &p)
}

fn done(code: i32) -> Vec<u8> {
    nlmsg(NLMSG_DONE, NLM_F_MULTI, &code.to_ne_bytes())
}

// ---- dcbnl replies (include/uapi/linux/dcbnl.h, net/dcb/dcbnl.c dcbnl_ieee_fill) ----

const RTM_GETDCB: u16 = 78;
const DCB_CMD_IEEE_GET: u8 = 21;

/// struct ieee_pfc { u8 pfc_cap; u8 pfc_en; u8 mbc; u16 delay; u64 requests[8];
/// u64 indications[8]; }: delay at 4 (u16 alignment), requests at 8, indications at 72, 136
/// bytes (gcc's offsetof and sizeof agree on this host's linux-libc-dev).
fn ieee_pfc(cap: u8, en: u8, requests: [u64; 8], indications: [u64; 8]) -> Vec<u8> {
    let mut v = vec![0u8; 136];
    v[0] = cap;
    v[1] = en;
    v[4..6].copy_from_slice(&0x1234u16.to_ne_bytes());
    for i in 0..8 {
        v[8 + 8 * i..16 + 8 * i].copy_from_slice(&requests[i].to_ne_bytes());
        v[72 + 8 * i..80 + 8 * i].copy_from_slice(&indications[i].to_ne_bytes());
    }
    v
}

/// struct ieee_ets { u8 willing, ets_cap, cbs; u8 tc_tx_bw[8], tc_rx_bw[8], tc_tsa[8],
/// prio_tc[8], tc_reco_bw[8], tc_reco_tsa[8], reco_prio_tc[8]; }: 59 bytes.
fn ieee_ets(tx_bw: [u8; 8], tsa: [u8; 8], prio_tc: [u8; 8]) -> Vec<u8> {
    let mut v = vec![0u8; 59];
    v[1] = 8;
    v[3..11].copy_from_slice(&tx_bw);
    v[11..19].copy_from_slice(&[99; 8]); // tc_rx_bw: not what `dcb ets` shows as tc-bw
    v[19..27].copy_from_slice(&tsa);
    v[27..35].copy_from_slice(&prio_tc);
    v
}

/// struct dcbnl_buffer { u8 prio2buffer[8]; u32 buffer_size[8]; u32 total_size; }: 44 bytes.
fn dcbnl_buffer(prio2buffer: [u8; 8], sizes: [u32; 8], total: u32) -> Vec<u8> {
    let mut v = prio2buffer.to_vec();
    for s in sizes {
        v.extend_from_slice(&s.to_ne_bytes());
    }
    v.extend_from_slice(&total.to_ne_bytes());
    assert_eq!(v.len(), 44);
    v
}

/// struct dcb_app { u8 selector; u8 priority; u16 protocol; }.
fn dcb_app(selector: u8, priority: u8, protocol: u16) -> Vec<u8> {
    let mut v = vec![selector, priority];
    v.extend_from_slice(&protocol.to_ne_bytes());
    v
}

/// An RTM_GETDCB reply: struct dcbmsg, DCB_ATTR_IFNAME (1), the DCB_ATTR_IEEE (13) nest and,
/// when given, DCB_ATTR_DCBX (14); then the acknowledgement.
fn dcb_reply(ieee: Option<&[Vec<u8>]>, dcbx: Option<u8>) -> Vec<u8> {
    let mut p = vec![0, DCB_CMD_IEEE_GET, 0, 0];
    p.extend(nla(1, &string("eth2")));
    if let Some(children) = ieee {
        p.extend(nest(13, children));
    }
    if let Some(x) = dcbx {
        p.extend(nla(14, &[x]));
    }
    let mut out = nlmsg(RTM_GETDCB, 0, &p);
    out.extend(nlmsg_error(0));
    out
}

/// A RoCE host's DCB: PFC on priority 3 only (7 pause frames sent, 5 received there), priority
/// 3 alone in traffic class 3 with 40% under ETS, DSCP 26 to priority 3 and 48 (CNPs) to 6.
fn roce_ieee() -> Vec<Vec<u8>> {
    let mut requests = [0u64; 8];
    requests[3] = 7;
    let mut indications = [0u64; 8];
    indications[3] = 5;
    vec![
        nla(
            1,
            &ieee_ets(
                [12, 12, 12, 40, 12, 12, 0, 0],
                [2, 2, 2, 2, 2, 2, 0, 0],
                [0, 0, 0, 3, 0, 0, 0, 0],
            ),
        ),
        nla(2, &ieee_pfc(8, 0b0000_1000, requests, indications)),
        // DCB_ATTR_DCB_BUFFER (10): priority 3 in buffer 1 of its own.
        nla(
            10,
            &dcbnl_buffer(
                [0, 0, 0, 1, 0, 0, 0, 0],
                [262_016, 130_944, 0, 0, 0, 0, 0, 0],
                524_160,
            ),
        ),
        nest(
            3,
            &[
                nla(1, &dcb_app(5, 6, 48)),
                nla(1, &dcb_app(5, 3, 26)),
                nla(1, &dcb_app(1, 3, 0x8915)),
                // DCB_ATTR_DCB_APP (2): the non-standard PCP selector (255).
                nla(2, &dcb_app(255, 3, 3)),
            ],
        ),
    ]
}

#[test]
fn a_dcb_reply_is_read_field_by_field() {
    let d = present(parse_dcb_reply(&dcb_reply(Some(&roce_ieee()), Some(0x0d))).unwrap());
    let mut requests = [0u64; 8];
    requests[3] = 7;
    let mut indications = [0u64; 8];
    indications[3] = 5;
    assert_eq!(
        d,
        Dcb {
            pfc_enabled: Some(0b0000_1000),
            pfc_cap: Some(8),
            pfc_requests: Some(requests),
            pfc_indications: Some(indications),
            prio_tc: Some([0, 0, 0, 3, 0, 0, 0, 0]),
            tc_tsa: Some([2, 2, 2, 2, 2, 2, 0, 0]),
            tc_bw: Some([12, 12, 12, 40, 12, 12, 0, 0]),
            dscp_prio: vec![(26, 3), (48, 6)],
            other_apps: vec![(1, 0x8915, 3), (255, 3, 3)],
            dcbx: Some(0x0d),
            prio_buffer: Some([0, 0, 0, 1, 0, 0, 0, 0]),
            buffer_size: Some([262_016, 130_944, 0, 0, 0, 0, 0, 0]),
            buffer_total: Some(524_160),
        }
    );
}

#[test]
fn what_the_driver_does_not_report_stays_unknown() {
    // A driver with PFC but no ETS getter, no APP entries, no DCBX: ETS is unknown, not "all
    // priorities in class 0".
    let pfc_only = vec![nla(2, &ieee_pfc(4, 0xff, [1; 8], [2; 8])), nest(3, &[])];
    let d = present(parse_dcb_reply(&dcb_reply(Some(&pfc_only), None)).unwrap());
    assert_eq!(d.pfc_enabled, Some(0xff));
    assert_eq!(d.pfc_requests, Some([1; 8]));
    assert_eq!(
        (d.prio_tc, d.tc_tsa, d.tc_bw, d.dcbx),
        (None, None, None, None)
    );
    assert!(d.dscp_prio.is_empty() && d.other_apps.is_empty());
    // The nest flag on the IEEE attribute is masked off.
    let mut p = vec![0, DCB_CMD_IEEE_GET, 0, 0];
    p.extend(nest(13 | NLA_F_NESTED, &pfc_only));
    let d = present(parse_dcb_reply(&nlmsg(RTM_GETDCB, 0, &p)).unwrap());
    assert_eq!(d.pfc_cap, Some(4));
}

#[test]
fn no_dcb_is_absent_with_the_reason_and_other_refusals_are_errors() {
    let r = reason(parse_dcb_reply(&dcb_reply(None, Some(0x0d))).unwrap());
    assert!(r.contains("no IEEE 802.1Qaz"), "{r}");
    let r = reason(parse_dcb_reply(&nlmsg_error(libc::EOPNOTSUPP)).unwrap());
    assert!(r.contains("Operation not supported"), "{r}");
    let r = reason(parse_dcb_reply(&nlmsg_error(libc::ENODEV)).unwrap());
    assert!(r.contains("no interface"), "{r}");
    let e = parse_dcb_reply(&nlmsg_error(libc::EPERM)).unwrap_err();
    assert!(
        matches!(&e, NicError::Netlink { source, .. } if source.raw_os_error() == Some(libc::EPERM)),
        "{e}"
    );
}

#[test]
fn malformed_dcb_replies_are_errors_never_panics() {
    let malformed = |bytes: &[u8], why: &str| {
        let e = parse_dcb_reply(bytes).expect_err(why);
        assert!(matches!(e, NicError::Malformed { .. }), "{why}: {e}");
    };
    // An ieee_pfc cut short.
    let short_pfc = vec![nla(2, &ieee_pfc(8, 8, [0; 8], [0; 8])[..100])];
    malformed(&dcb_reply(Some(&short_pfc), None), "short ieee_pfc");
    let short_ets = vec![nla(1, &ieee_ets([0; 8], [0; 8], [0; 8])[..30])];
    malformed(&dcb_reply(Some(&short_ets), None), "short ieee_ets");
    // An APP entry of two bytes.
    let short_app = vec![nest(3, &[nla(1, &[5, 3])])];
    malformed(&dcb_reply(Some(&short_app), None), "short dcb_app");
    // An attribute longer than what is left, or shorter than its own header.
    let mut p = vec![0, DCB_CMD_IEEE_GET, 0, 0];
    p.extend_from_slice(&200u16.to_ne_bytes());
    p.extend_from_slice(&13u16.to_ne_bytes());
    p.extend_from_slice(&[0; 8]);
    malformed(&nlmsg(RTM_GETDCB, 0, &p), "attribute past the end");
    let mut p = vec![0, DCB_CMD_IEEE_GET, 0, 0];
    p.extend_from_slice(&2u16.to_ne_bytes());
    p.extend_from_slice(&13u16.to_ne_bytes());
    malformed(
        &nlmsg(RTM_GETDCB, 0, &p),
        "attribute shorter than its header",
    );
    // A payload shorter than struct dcbmsg; a message longer than the bytes.
    malformed(&nlmsg(RTM_GETDCB, 0, &[0, 21]), "no dcbmsg");
    let mut m = dcb_reply(Some(&roce_ieee()), None);
    m[0..4].copy_from_slice(&10_000u32.to_ne_bytes());
    malformed(&m, "message past the end");
    malformed(&[0u8; 7], "less than a header");
    // Every cut and every byte set to 0xff: an answer, never a panic.
    let good = dcb_reply(Some(&roce_ieee()), Some(1));
    for cut in 0..good.len() {
        let _ = parse_dcb_reply(&good[..cut]);
    }
    for i in 0..good.len() {
        let mut b = good.clone();
        b[i] = 0xff;
        let _ = parse_dcb_reply(&b);
    }
}

// ---- RDMA netlink dumps (include/uapi/rdma/rdma_netlink.h, drivers/infiniband/core/nldev.c) ----

/// RDMA_NL_GET_TYPE(RDMA_NL_NLDEV = 5, RDMA_NLDEV_CMD_RES_QP_GET = 10).
const RES_QP_GET: u16 = (5 << 10) | 10;
const DEV_INDEX: u16 = 1;
const DEV_NAME: u16 = 2;
const PORT_INDEX: u16 = 3;
const RES_QP: u16 = 19;
const RES_QP_ENTRY: u16 = 20;
const RES_LQPN: u16 = 21;
const RES_RQPN: u16 = 22;
const RES_RQ_PSN: u16 = 23;
const RES_SQ_PSN: u16 = 24;
const RES_PATH_MIG_STATE: u16 = 25;
const RES_TYPE: u16 = 26;
const RES_STATE: u16 = 27;
const RES_PID: u16 = 28;
const RES_KERN_NAME: u16 = 29;
const RES_PDN: u16 = 60;

fn u32a(kind: u16, v: u32) -> Vec<u8> {
    nla(kind, &v.to_ne_bytes())
}

/// One message of the dump: the device's handle and a RES_QP nest of entries.
fn qp_message(index: u32, name: &str, entries: &[Vec<u8>]) -> Vec<u8> {
    let p = [
        u32a(DEV_INDEX, index),
        nla(DEV_NAME, &string(name)),
        nest(RES_QP, entries),
    ]
    .concat();
    nlmsg(RES_QP_GET, NLM_F_MULTI, &p)
}

/// A dump of two devices: mlx5_0 with its GSI QP (a kernel QP: RES_KERN_NAME, no pid) and an
/// RC QP of a process; mlx5_1 with a QP not yet bound to a port.
fn qp_dump() -> Vec<u8> {
    let gsi = nest(
        RES_QP_ENTRY | NLA_F_NESTED,
        &[
            u32a(PORT_INDEX, 1),
            u32a(RES_LQPN, 1),
            u32a(RES_SQ_PSN, 0),
            nla(RES_TYPE, &[1]),
            nla(RES_STATE, &[3]),
            nla(RES_KERN_NAME, &string("ib_core")),
        ],
    );
    let rc = nest(
        RES_QP_ENTRY,
        &[
            u32a(PORT_INDEX, 1),
            u32a(RES_LQPN, 0x1c5),
            u32a(RES_PDN, 3),
            u32a(RES_PID, 31337),
            u32a(RES_RQPN, 0x2a7),
            u32a(RES_RQ_PSN, 0xabcdef),
            u32a(RES_SQ_PSN, 0x123456),
            nla(RES_PATH_MIG_STATE, &[2]),
            nla(RES_TYPE, &[2]),
            nla(RES_STATE, &[3]),
        ],
    );
    let fresh = nest(
        RES_QP_ENTRY,
        &[
            u32a(RES_LQPN, 0x300),
            u32a(RES_PID, 1),
            nla(RES_TYPE, &[9]),
            nla(RES_STATE, &[0]),
        ],
    );
    [
        qp_message(0, "mlx5_0", &[gsi, rc]),
        qp_message(1, "mlx5_1", &[fresh]),
        done(0),
    ]
    .concat()
}

#[allow(clippy::too_many_arguments)] // One QP's fields, as the dump lists them.
fn qp(
    device: &str,
    port: Option<u32>,
    lqpn: u32,
    rqpn: Option<u32>,
    t: &str,
    s: &str,
    pid: Option<u32>,
    comm: Option<&str>,
) -> Qp {
    Qp {
        device: device.to_string(),
        port,
        lqpn,
        rqpn,
        qp_type: t.to_string(),
        state: s.to_string(),
        pid,
        comm: comm.map(str::to_string),
        job: None,
    }
}

#[test]
fn a_qp_dump_is_read_entry_by_entry() {
    assert_eq!(
        parse_qp_dump(&qp_dump()).unwrap(),
        [
            qp(
                "mlx5_0",
                Some(1),
                1,
                None,
                "GSI",
                "RTS",
                None,
                Some("ib_core")
            ),
            qp(
                "mlx5_0",
                Some(1),
                0x1c5,
                Some(0x2a7),
                "RC",
                "RTS",
                Some(31337),
                None
            ),
            qp(
                "mlx5_1",
                None,
                0x300,
                None,
                "XRC_INI",
                "RESET",
                Some(1),
                None
            ),
        ]
    );
    // An empty dump is no QP.
    assert!(parse_qp_dump(&done(0)).unwrap().is_empty());
}

#[test]
fn malformed_qp_dumps_are_errors_never_panics() {
    let good = qp_dump();
    // Every strict prefix lacks the NLMSG_DONE at least: an error, never a panic.
    for cut in 0..good.len() {
        assert!(parse_qp_dump(&good[..cut]).is_err(), "cut at {cut}");
    }
    for i in 0..good.len() {
        let mut b = good.clone();
        b[i] = 0xff;
        let _ = parse_qp_dump(&b);
    }
    // A dump the kernel ended with an error (NLMSG_DONE carrying -EINVAL).
    let e =
        parse_qp_dump(&[qp_message(0, "mlx5_0", &[]), done(-libc::EINVAL)].concat()).unwrap_err();
    assert!(
        matches!(&e, NicError::Netlink { source, .. } if source.raw_os_error() == Some(libc::EINVAL)),
        "{e}"
    );
    // An entry without its QP number; a QP number of two bytes; a message without RES_QP.
    let no_lqpn = nest(RES_QP_ENTRY, &[nla(RES_TYPE, &[2]), nla(RES_STATE, &[3])]);
    let short_lqpn = nest(
        RES_QP_ENTRY,
        &[
            nla(RES_LQPN, &[1, 2]),
            nla(RES_TYPE, &[2]),
            nla(RES_STATE, &[3]),
        ],
    );
    for entry in [no_lqpn, short_lqpn] {
        let e = parse_qp_dump(&[qp_message(0, "mlx5_0", &[entry]), done(0)].concat()).unwrap_err();
        assert!(matches!(e, NicError::Malformed { .. }), "{e}");
    }
    let bare = nlmsg(
        RES_QP_GET,
        NLM_F_MULTI,
        &[u32a(DEV_INDEX, 0), nla(DEV_NAME, &string("x"))].concat(),
    );
    assert!(matches!(
        parse_qp_dump(&[bare, done(0)].concat()),
        Err(NicError::Malformed { .. })
    ));
}

// ---- The kernel of this host ----

#[test]
fn a_name_that_is_no_interface_name_is_an_error() {
    for bad in ["", "..", "a/b", "sixteen-bytes-xx", "nul\0"] {
        let e = dcb(bad).unwrap_err();
        assert!(matches!(e, NicError::BadInterface(_)), "{bad:?}: {e}");
        let e = dcb_at(&PathBuf::from("/nonexistent"), bad).unwrap_err();
        assert!(matches!(e, NicError::BadInterface(_)), "{bad:?}: {e}");
    }
}

/// `rdma -j ...`'s JSON array, or none when the tool fails (no NETLINK_RDMA: no ib_core).
fn rdma_json(args: &[&str]) -> Option<Vec<serde_json::Value>> {
    let (st, out, err) = output(Command::new("rdma").args(args));
    if !st.success() {
        eprintln!("rdma {args:?} failed: {err}");
        return None;
    }
    Some(serde_json::from_str(&out).unwrap_or_else(|e| panic!("rdma {args:?}: {e}: {out}")))
}

/// This host's RDMA netlink against iproute2's `rdma`: the same devices and QPs (on a host
/// without RDMA: absent, with the reason, where `rdma` fails or lists nothing).
#[test]
fn rdma_netlink_agrees_with_iproute2() {
    let truth = rdma_json(&["-j", "dev", "show"]).unwrap_or_default();
    let truth: Vec<&str> = truth.iter().filter_map(|d| d["ifname"].as_str()).collect();
    match devices().unwrap() {
        Availability::Present(d) => {
            let names: Vec<&str> = d.iter().map(|d| d.name.as_str()).collect();
            assert_eq!(names, truth);
        }
        Availability::Absent { reason } => {
            assert!(truth.is_empty(), "rdma lists {truth:?}, we: {reason}");
            assert!(
                reason.contains("NETLINK_RDMA") || reason.contains("no RDMA device"),
                "{reason}"
            );
        }
    }
    let truth = rdma_json(&["-j", "res", "show", "qp"]).unwrap_or_default();
    match qps().unwrap() {
        Availability::Present(q) => assert_eq!(q.len(), truth.len(), "{q:?} vs {truth:?}"),
        Availability::Absent { reason } => {
            assert!(truth.is_empty(), "rdma shows QPs {truth:?}, we: {reason}");
            assert!(
                reason.contains("NETLINK_RDMA") || reason.contains("no RDMA device"),
                "{reason}"
            );
        }
    }
}

// ---- Recorded configurations ----

/// The real `rdma -j res show qp` output of the fixtures (see tests/fixtures/README.md).
#[test]
fn qps_are_read_from_recorded_rdma_output() {
    let root = workspace_root().join("tests/fixtures/sysfs");
    assert_eq!(
        present(qps_at(&root).unwrap()),
        [
            qp(
                "hns_0",
                Some(1),
                41,
                Some(40),
                "RC",
                "RTR",
                Some(1523),
                Some("ib_send_bw")
            ),
            qp(
                "hns_2",
                Some(1),
                1,
                None,
                "GSI",
                "RTS",
                None,
                Some("ib_core")
            ),
        ]
    );
    let s = Scratch::new("nic-netlink-qps");
    let r = reason(qps_at(&s.path("")).unwrap());
    assert!(r.contains("rdma/qps.json missing"), "{r}");
    std::fs::create_dir_all(s.path("rdma")).unwrap();
    s.file("rdma/qps.json", r#"[{"ifname": "mlx5_0", "type": "RC"}]"#);
    let e = qps_at(&s.path("")).unwrap_err();
    assert!(e.to_string().contains("rdma/qps.json"), "{e}");
    // Older iproute2 printed pid 0 for kernel QPs: no pid.
    s.file(
        "rdma/qps.json",
        r#"[{"ifname":"m","lqpn":1,"type":"GSI","state":"RTS","pid":0,"comm":"ib_core"}]"#,
    );
    assert_eq!(present(qps_at(&s.path("")).unwrap())[0].pid, None);
}

#[test]
fn dcb_is_read_from_a_recorded_configuration() {
    let s = Scratch::new("nic-netlink-dcb");
    let r = reason(dcb_at(&s.path(""), "eth2").unwrap());
    assert!(r.contains("dcb/eth2.json missing"), "{r}");
    let d = present(parse_dcb_reply(&dcb_reply(Some(&roce_ieee()), Some(0x0d))).unwrap());
    std::fs::create_dir_all(s.path("dcb")).unwrap();
    s.file("dcb/eth2.json", &serde_json::to_string(&d).unwrap());
    assert_eq!(present(dcb_at(&s.path(""), "eth2").unwrap()), d);
    s.file("dcb/eth2.json", r#"{"pfc_enabled": "all"}"#);
    let e = dcb_at(&s.path(""), "eth2").unwrap_err();
    assert!(
        matches!(e, NicError::Fixture { .. }) && e.to_string().contains("dcb/eth2.json"),
        "{e}"
    );
}
