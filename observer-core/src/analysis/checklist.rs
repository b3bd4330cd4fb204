//! The RoCE pre-production checklist of a host, from its `nic` section: PFC on exactly the RoCE
//! priority, the RoCE and CNP DSCPs trusted and mapped to the intended priorities, DCQCN enabled
//! on the RoCE priority, the CNP's marking, one MTU, firmware and driver reported, and the
//! counters that show trouble over the window (pause storms, discards on a lossless priority,
//! transport errors).
//!
//! Every item says what it rests on. An item whose evidence the host does not give is
//! `unknown`, never `pass`.

use std::collections::BTreeMap;

mod optics;

use crate::model::nic::{
    Checklist, ChecklistItem, Device, Interface, ItemStatus, Nic, Port, TRANSPORT_ERRORS,
    is_link_error, priority_list,
};

/// What the fabric is meant to be: the defaults are the common practice (RoCE in DSCP 26 on
/// priority 3, CNPs in DSCP 48 on priority 6, lossless RoCE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub roce_priority: u8,
    pub roce_dscp: u8,
    pub cnp_priority: u8,
    pub cnp_dscp: u8,
    /// RoCE runs lossy (ECN only): PFC must be off on every priority.
    pub lossy: bool,
    /// Priorities come from the VLAN tag's PCP, not DSCP: the DSCP items do not apply.
    pub trust_pcp: bool,
    /// The MTU every RoCE netdev of the fleet has.
    pub mtu: Option<u32>,
    /// The firmware every RoCE device of the fleet runs.
    pub firmware: Option<String>,
    /// The IP ToS rdma_cm connections are made with (`default_roce_tos`); none: its DSCP
    /// must be `roce_dscp`.
    pub tos: Option<u8>,
    /// The fleet's DCQCN parameters (`roce_np/<file>`, `roce_rp/<file>` → value); empty: not
    /// compared.
    pub dcqcn: BTreeMap<String, u64>,
}

impl Default for Intent {
    fn default() -> Self {
        Self {
            roce_priority: 3,
            roce_dscp: 26,
            cnp_priority: 6,
            cnp_dscp: 48,
            lossy: false,
            trust_pcp: false,
            mtu: None,
            firmware: None,
            tos: None,
            dcqcn: BTreeMap::new(),
        }
    }
}

/// A fleet's definition of "approved" (`check --expect FILE`): the intent's values, and the
/// DCQCN parameters (`[roce_np]`, `[roce_rp]`: file name → value). Every key optional; unknown
/// keys are errors.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub roce_priority: Option<u8>,
    pub roce_dscp: Option<u8>,
    pub cnp_priority: Option<u8>,
    pub cnp_dscp: Option<u8>,
    pub lossy: Option<bool>,
    /// "dscp" or "pcp".
    pub trust: Option<String>,
    pub mtu: Option<u32>,
    pub firmware: Option<String>,
    pub tos: Option<u8>,
    #[serde(default)]
    pub roce_np: BTreeMap<String, u64>,
    #[serde(default)]
    pub roce_rp: BTreeMap<String, u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExpectError {
    #[error("{0}")]
    Toml(String),
    #[error("{key} = {value}: {why}")]
    Invalid {
        key: &'static str,
        value: String,
        why: &'static str,
    },
}

impl Expect {
    /// Parses and validates an `--expect` file's text.
    pub fn parse(text: &str) -> Result<Self, ExpectError> {
        let e: Self =
            toml::from_str(text).map_err(|e| ExpectError::Toml(e.message().to_string()))?;
        let bad = |key, value: u8, max: u8, why| {
            (value > max).then(|| ExpectError::Invalid {
                key,
                value: value.to_string(),
                why,
            })
        };
        if let Some(err) = [
            e.roce_priority
                .and_then(|v| bad("roce_priority", v, 7, "a priority is 0 to 7")),
            e.cnp_priority
                .and_then(|v| bad("cnp_priority", v, 7, "a priority is 0 to 7")),
            e.roce_dscp
                .and_then(|v| bad("roce_dscp", v, 63, "a DSCP is 0 to 63")),
            e.cnp_dscp
                .and_then(|v| bad("cnp_dscp", v, 63, "a DSCP is 0 to 63")),
        ]
        .into_iter()
        .flatten()
        .next()
        {
            return Err(err);
        }
        if let Some(t) = &e.trust
            && t != "dscp"
            && t != "pcp"
        {
            return Err(ExpectError::Invalid {
                key: "trust",
                value: format!("{t:?}"),
                why: "expected \"dscp\" or \"pcp\"",
            });
        }
        Ok(e)
    }

    /// The file's values over `intent` (the defaults); the flags given go over the result.
    pub fn apply(&self, intent: &mut Intent) {
        let i = intent;
        i.roce_priority = self.roce_priority.unwrap_or(i.roce_priority);
        i.roce_dscp = self.roce_dscp.unwrap_or(i.roce_dscp);
        i.cnp_priority = self.cnp_priority.unwrap_or(i.cnp_priority);
        i.cnp_dscp = self.cnp_dscp.unwrap_or(i.cnp_dscp);
        i.lossy = self.lossy.unwrap_or(i.lossy);
        if let Some(t) = &self.trust {
            i.trust_pcp = t == "pcp";
        }
        i.mtu = self.mtu.or(i.mtu);
        i.firmware = self.firmware.clone().or(i.firmware.take());
        i.tos = self.tos.or(i.tos);
        for (side, params) in [("roce_np", &self.roce_np), ("roce_rp", &self.roce_rp)] {
            for (k, v) in params {
                i.dcqcn.insert(format!("{side}/{k}"), *v);
            }
        }
    }
}

pub const SCHEMA: &str = "roce-observer/check/v1";

/// The checklist of the host whose two readings make `nic`.
pub fn checklist(nic: Nic, intent: &Intent) -> Checklist {
    let mut items = Vec::new();
    let mut push = |item: &str, subject: &str, status: ItemStatus, evidence: String| {
        items.push(ChecklistItem {
            item: item.into(),
            subject: subject.into(),
            status,
            evidence,
        })
    };
    if nic.devices.is_empty() {
        // RoCE needs an RDMA device: a host without one fails, whatever its netdevs say.
        let why = nic
            .absent
            .iter()
            .find(|a| a.source == "rdma")
            .map_or_else(|| "none selected".to_string(), |a| a.reason.clone());
        push(
            "rdma-device",
            "",
            ItemStatus::Fail,
            format!("no RDMA device: {why}"),
        );
    }
    // An Ethernet port whose netdev was not read (another network namespace, a name the tree
    // lacks): its configuration items cannot be judged, and say so.
    for d in &nic.devices {
        for p in &d.ports {
            let ethernet = p.link_layer.as_deref().is_none_or(|l| l == "Ethernet");
            let read = p
                .netdevs
                .iter()
                .any(|n| nic.interfaces.iter().any(|i| &i.name == n));
            if ethernet && !read {
                push(
                    "netdev",
                    &format!("{}/{}", d.name, p.port),
                    ItemStatus::Unknown,
                    if p.netdevs.is_empty() {
                        "no netdev behind the port: its PFC, trust, DCQCN and counters are not checked".into()
                    } else {
                        format!(
                            "its netdev {} was not read (another network namespace?): its PFC, trust, DCQCN and counters are not checked",
                            p.netdevs.join(", ")
                        )
                    },
                );
            }
        }
    }
    for i in &nic.interfaces {
        let absent = |source: &str| {
            nic.absent
                .iter()
                .find(|a| a.source == source && a.subject == i.name)
                .map(|a| a.reason.clone())
        };
        let stats_absent = absent("stats");
        let absent = |source: &str| absent(source).unwrap_or_else(|| "not read".into());
        let (s, e) = pfc(i, intent, &absent("dcb"));
        push("pfc", &i.name, s, e);
        let (s, e) = trust(
            i,
            intent,
            intent.roce_dscp,
            intent.roce_priority,
            "RoCE",
            &absent("dcb"),
        );
        push("trust-dscp", &i.name, s, e);
        let (s, e) = trust(
            i,
            intent,
            intent.cnp_dscp,
            intent.cnp_priority,
            "CNP",
            &absent("dcb"),
        );
        push("cnp-trust", &i.name, s, e);
        let (s, e) = ecn(i, intent, &absent("dcqcn"));
        push("ecn", &i.name, s, e);
        let (s, e) = cnp_marking(i, intent, &absent("dcqcn"));
        push("cnp-marking", &i.name, s, e);
        let (s, e) = pause_storms(i, nic.seconds, stats_absent.as_deref());
        push("pause-storms", &i.name, s, e);
        let (s, e) = lossless_discards(i, nic.seconds, intent, stats_absent.as_deref());
        push("lossless-discards", &i.name, s, e);
        let (s, e) = ets(i, intent, &absent("dcb"));
        push("ets", &i.name, s, e);
        let (s, e) = pfc_watchdog(i, intent, &absent("pfc-watchdog"));
        push("pfc-watchdog", &i.name, s, e);
        let (s, e) = buffer(i, intent, &absent("dcb"));
        push("buffer", &i.name, s, e);
        let (s, e) = dcqcn_params(i, intent, &absent("dcqcn"));
        push("dcqcn-params", &i.name, s, e);
        let (s, e) = arp_sysctls(i, nic.interfaces.len());
        push("arp-sysctls", &i.name, s, e);
        let (s, e) = link_errors(i, nic.seconds, stats_absent.as_deref());
        push("link-errors", &i.name, s, e);
        let (s, e) = optics::optics(i, nic.seconds, &absent("module"));
        push("optics", &i.name, s, e);
    }
    if !nic.interfaces.is_empty() {
        let (s, e) = mtu(&nic.interfaces, intent);
        push("mtu", "", s, e);
    }
    for (s, subject, e) in firmware(&nic, intent) {
        push("firmware", &subject, s, e);
    }
    for d in &nic.devices {
        let (s, e) = transport_errors(d, nic.seconds);
        push("transport-errors", &d.name, s, e);
        let (s, e) = cnp_sent(d, nic.seconds);
        push("cnp-sent", &d.name, s, e);
        let (s, e) = pcie(d);
        push("pcie", &d.name, s, e);
        let (s, e) = gpu_affinity(d, &nic.gpus);
        push("gpu-affinity", &d.name, s, e);
        for p in d
            .ports
            .iter()
            .filter(|p| p.link_layer.as_deref().is_none_or(|l| l == "Ethernet"))
        {
            let (s, e) = roce_mode(p, intent);
            push("roce-mode", &format!("{}/{}", d.name, p.port), s, e);
        }
    }
    Checklist {
        schema: SCHEMA.into(),
        nic,
        items,
    }
}

fn pfc(i: &Interface, intent: &Intent, absent: &str) -> (ItemStatus, String) {
    let Some(dcb) = &i.dcb else {
        return (ItemStatus::Unknown, format!("no DCB settings: {absent}"));
    };
    let Some(on) = dcb.pfc_enabled else {
        return (
            ItemStatus::Unknown,
            "the driver reports no PFC settings".into(),
        );
    };
    let want = 1u8 << intent.roce_priority;
    if intent.lossy {
        return if on == 0 {
            (
                ItemStatus::Pass,
                "PFC off on every priority (lossy RoCE)".into(),
            )
        } else {
            (
                ItemStatus::Fail,
                format!(
                    "PFC on priorities {} though RoCE is meant to run lossy",
                    priority_list(on)
                ),
            )
        };
    }
    if on == want {
        (
            ItemStatus::Pass,
            format!("PFC on priority {} only", intent.roce_priority),
        )
    } else if on & want == 0 {
        (
            ItemStatus::Fail,
            format!(
                "PFC on priorities {}, not on the RoCE priority {}: RoCE runs lossy",
                priority_list(on),
                intent.roce_priority
            ),
        )
    } else {
        (
            ItemStatus::Fail,
            format!(
                "PFC on priorities {}: more lossless priorities than RoCE's ({}) share the buffer headroom and spread pauses to traffic that needs none",
                priority_list(on),
                intent.roce_priority
            ),
        )
    }
}

fn trust(
    i: &Interface,
    intent: &Intent,
    dscp: u8,
    prio: u8,
    what: &str,
    absent: &str,
) -> (ItemStatus, String) {
    if intent.trust_pcp {
        return (
            ItemStatus::NotApplicable,
            "priorities come from the VLAN PCP (--trust pcp)".into(),
        );
    }
    let Some(dcb) = &i.dcb else {
        return (ItemStatus::Unknown, format!("no DCB settings: {absent}"));
    };
    if dcb.dscp_prio.is_empty() {
        // mlx5 reflects DSCP trust into the APP table (every DSCP); other drivers may keep it
        // in firmware, where the kernel does not see it.
        let mlx5 = i.driver.as_ref().is_some_and(|d| d.driver == "mlx5_core");
        return if mlx5 {
            (
                ItemStatus::Fail,
                "no DSCP entry in the APP table: the port trusts PCP, so untagged RoCE gets priority 0 (mlnx_qos --trust dscp)".into(),
            )
        } else {
            (
                ItemStatus::Unknown,
                "no DSCP entry in the APP table, and this driver may keep DSCP trust in firmware"
                    .into(),
            )
        };
    }
    match dcb.priority_of_dscp(dscp) {
        Some(p) if p == prio => (
            ItemStatus::Pass,
            format!("{what} DSCP {dscp} → priority {p}"),
        ),
        Some(p) => (
            ItemStatus::Fail,
            format!("{what} DSCP {dscp} → priority {p}, not {prio}"),
        ),
        None => (
            ItemStatus::Fail,
            format!("{what} DSCP {dscp} has no APP table entry (priority 0), not priority {prio}"),
        ),
    }
}

fn ecn(i: &Interface, intent: &Intent, absent: &str) -> (ItemStatus, String) {
    let Some(d) = &i.dcqcn else {
        return (ItemStatus::Unknown, format!("no DCQCN settings: {absent}"));
    };
    let p = intent.roce_priority;
    let (Some(np), Some(rp)) = d.enabled(p) else {
        return (
            ItemStatus::Unknown,
            format!("unreadable DCQCN settings: {}", d.unread.join(", ")),
        );
    };
    let evidence = format!(
        "notification point on priorities {}, reaction point on {}",
        priority_list(d.np_enabled),
        priority_list(d.rp_enabled)
    );
    match (np, rp) {
        (true, true) => (ItemStatus::Pass, evidence),
        (false, true) => (
            ItemStatus::Fail,
            format!("{evidence}: no CNP is sent for ECN marks on priority {p}"),
        ),
        (true, false) => (
            ItemStatus::Fail,
            format!("{evidence}: CNPs on priority {p} slow nothing down"),
        ),
        (false, false) => (
            ItemStatus::Fail,
            format!("{evidence}: DCQCN is off on the RoCE priority {p}"),
        ),
    }
}

fn cnp_marking(i: &Interface, intent: &Intent, absent: &str) -> (ItemStatus, String) {
    let Some(d) = &i.dcqcn else {
        return (ItemStatus::Unknown, format!("no DCQCN settings: {absent}"));
    };
    let (Some(dscp), Some(prio)) = (d.np.get("cnp_dscp"), d.np.get("cnp_802p_prio")) else {
        return (
            ItemStatus::Unknown,
            "the driver shows no cnp_dscp / cnp_802p_prio".into(),
        );
    };
    let evidence = format!("CNPs sent with DSCP {dscp}, 802.1p priority {prio}");
    let ok = *dscp == u64::from(intent.cnp_dscp) && *prio == u64::from(intent.cnp_priority);
    if ok {
        (ItemStatus::Pass, evidence)
    } else {
        (
            ItemStatus::Fail,
            format!(
                "{evidence}, not DSCP {} priority {}",
                intent.cnp_dscp, intent.cnp_priority
            ),
        )
    }
}

/// The largest RoCE path MTU a netdev MTU carries, as the kernel picks it (`iboe_get_mtu`):
/// the IB MTUs (256..4096) that fit with 96 bytes of headers (GRH 40, UDP 8, BTH 12, XRC 4,
/// AtomicETH 28, ICRC 4).
pub fn roce_path_mtu(mtu: u32) -> Option<u32> {
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|p| p + 96 <= mtu)
}

fn mtu(ifaces: &[Interface], intent: &Intent) -> (ItemStatus, String) {
    let known: Vec<(&str, u32)> = ifaces
        .iter()
        .filter_map(|i| i.mtu.map(|m| (i.name.as_str(), m)))
        .collect();
    if known.is_empty() {
        return (ItemStatus::Unknown, "no MTU read".into());
    }
    let list = known
        .iter()
        .map(|(n, m)| {
            format!(
                "{n} {m} (RoCE path MTU up to {})",
                roce_path_mtu(*m).map_or("none".into(), |p| p.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let first = known[0].1;
    if known.iter().any(|(_, m)| *m != first) {
        return (ItemStatus::Fail, format!("MTUs differ: {list}"));
    }
    match intent.mtu {
        Some(want) if want != first => {
            (ItemStatus::Fail, format!("{list}, not the fleet's {want}"))
        }
        Some(_) => (ItemStatus::Pass, list),
        // Judged on its own: RoCE's largest path MTU, 4096, needs an MTU of 4192 or more.
        None if roce_path_mtu(first).is_none_or(|p| p < 4096) => (
            ItemStatus::Warn,
            format!(
                "{list}: RoCE messages go in packets below 4096 bytes, more headers per byte (an MTU of 4192 or more carries 4096; give --mtu to judge against the fleet's)"
            ),
        ),
        None if known.len() > 1 => (ItemStatus::Pass, format!("one MTU: {list}")),
        None => (
            ItemStatus::Pass,
            format!("{list} (give --mtu to compare with the fleet's)"),
        ),
    }
}

fn firmware(nic: &Nic, intent: &Intent) -> Vec<(ItemStatus, String, String)> {
    // (subject, model, firmware, driver) of each device (or netdev without a device).
    type Seen = (String, Option<String>, Option<String>, Option<String>);
    let mut seen: Vec<Seen> = Vec::new();
    let driver_of = |i: &Interface| {
        i.driver
            .as_ref()
            .map(|d| format!("{} {}", d.driver, d.version).trim().to_string())
    };
    for d in &nic.devices {
        // The driver of the device's first netdev, where read.
        let driver = d
            .ports
            .iter()
            .flat_map(|p| &p.netdevs)
            .find_map(|n| nic.interfaces.iter().find(|i| &i.name == n))
            .and_then(driver_of);
        seen.push((
            d.name.clone(),
            d.hca_type.clone(),
            d.firmware.clone(),
            driver,
        ));
    }
    if nic.devices.is_empty() {
        for i in &nic.interfaces {
            let fw = i.driver.as_ref().map(|d| d.firmware.clone());
            seen.push((i.name.clone(), None, fw, driver_of(i)));
        }
    }
    let mut out = Vec::new();
    for (subject, model, fw, driver) in &seen {
        let Some(fw) = fw.as_deref().filter(|f| !f.is_empty()) else {
            out.push((
                ItemStatus::Unknown,
                subject.clone(),
                "no firmware version reported".to_string(),
            ));
            continue;
        };
        let evidence = match driver {
            Some(d) => format!("firmware {fw}, driver {d}"),
            None => format!("firmware {fw}"),
        };
        // Devices of one model on one host run one firmware; the fleet's is --firmware.
        let other = seen
            .iter()
            .filter(|(s, m, f, _)| {
                s != subject && model.is_some() && m == model && f.as_deref() != Some(fw)
            })
            .find_map(|(s, _, f, _)| f.as_ref().map(|f| format!("{s} runs {f}")));
        let same_model = seen
            .iter()
            .filter(|(s, m, _, _)| s != subject && model.is_some() && m == model)
            .count();
        let (status, evidence) = match (&intent.firmware, other) {
            (Some(want), _) if want != fw => (
                ItemStatus::Fail,
                format!("{evidence}, not the fleet's {want}"),
            ),
            // The fleet's: a sibling that differs fails on its own line.
            (Some(_), _) => (ItemStatus::Pass, evidence),
            (None, Some(other)) => (
                ItemStatus::Fail,
                format!("{evidence}, but {other} (same model): one host, two firmwares"),
            ),
            (None, None) if same_model > 0 => (
                ItemStatus::Pass,
                format!("{evidence}, as the host's other devices of its model"),
            ),
            (None, None) => (
                ItemStatus::NotApplicable,
                format!("{evidence} (give --firmware to compare with the fleet's)"),
            ),
        };
        out.push((status, subject.clone(), evidence));
    }
    out
}

/// One reading only: counters cannot show what happens now.
fn one_reading(seconds: f64) -> Option<(ItemStatus, String)> {
    (seconds <= 0.0).then(|| {
        (
            ItemStatus::Unknown,
            "one reading: no window to count over".into(),
        )
    })
}

fn pause_storms(i: &Interface, seconds: f64, absent: Option<&str>) -> (ItemStatus, String) {
    if let Some(absent) = absent {
        return (
            ItemStatus::Unknown,
            format!("no driver statistics: {absent}"),
        );
    }
    let storms: Vec<(&String, u64)> = i
        .counters
        .iter()
        .filter(|(n, _)| n.contains("pause_storm"))
        .map(|(n, c)| (n, c.delta))
        .collect();
    if storms.is_empty() {
        return (
            ItemStatus::Unknown,
            "the driver counts no pause storm events".into(),
        );
    }
    if let Some(u) = one_reading(seconds) {
        return u;
    }
    let grew: Vec<String> = storms
        .iter()
        .filter(|(_, d)| *d > 0)
        .map(|(n, d)| format!("{n} +{d}"))
        .collect();
    if grew.is_empty() {
        (
            ItemStatus::Pass,
            format!("no pause storm event in {seconds:.1} s"),
        )
    } else {
        (
            ItemStatus::Fail,
            format!(
                "in {seconds:.1} s: {}: a port kept pausing its peer (the NIC's watchdog acted)",
                grew.join(", ")
            ),
        )
    }
}

fn lossless_discards(
    i: &Interface,
    seconds: f64,
    intent: &Intent,
    absent: Option<&str>,
) -> (ItemStatus, String) {
    if intent.lossy {
        return (ItemStatus::NotApplicable, "RoCE runs lossy".into());
    }
    if let Some(absent) = absent {
        return (
            ItemStatus::Unknown,
            format!("no driver statistics: {absent}"),
        );
    }
    // Without the PFC settings, the RoCE priority is taken as the lossless one.
    let lossless = i
        .dcb
        .as_ref()
        .and_then(|d| d.pfc_enabled)
        .unwrap_or(1 << intent.roce_priority);
    if lossless == 0 {
        return (ItemStatus::NotApplicable, "no priority is lossless".into());
    }
    let Some(counts) = i.lossless_discards(lossless) else {
        return (
            ItemStatus::Unknown,
            format!(
                "the driver counts no discards of the lossless priorities {} (per priority, or per traffic class with ETS's map)",
                priority_list(lossless)
            ),
        );
    };
    if let Some(u) = one_reading(seconds) {
        return u;
    }
    let dropped: Vec<String> = counts
        .iter()
        .filter(|(_, d)| *d > 0)
        .map(|(what, d)| format!("{what}: {d} discarded"))
        .collect();
    if dropped.is_empty() {
        (
            ItemStatus::Pass,
            format!(
                "no discard on lossless priorities {} in {seconds:.1} s",
                priority_list(lossless)
            ),
        )
    } else {
        (
            ItemStatus::Fail,
            format!(
                "in {seconds:.1} s, {}: a lossless priority drops (headroom or PFC thresholds too small)",
                dropped.join(", ")
            ),
        )
    }
}

fn transport_errors(d: &crate::model::nic::Device, seconds: f64) -> (ItemStatus, String) {
    let mut have = false;
    let mut grew = Vec::new();
    for p in &d.ports {
        for name in TRANSPORT_ERRORS {
            if let Some(delta) = p.hw(name) {
                have = true;
                if delta > 0 {
                    grew.push(format!("port {} {name} +{delta}", p.port));
                }
            }
        }
    }
    if !have {
        return (
            ItemStatus::Unknown,
            "the device counts no out-of-sequence or timeout errors".into(),
        );
    }
    if let Some(u) = one_reading(seconds) {
        return u;
    }
    if grew.is_empty() {
        (
            ItemStatus::Pass,
            format!("no out-of-sequence, sequence error or ACK timeout in {seconds:.1} s"),
        )
    } else {
        (
            ItemStatus::Fail,
            format!(
                "in {seconds:.1} s: {}: packets are lost or reordered on the way",
                grew.join(", ")
            ),
        )
    }
}

/// DCQCN working both ways over the window: ECN-marked arrivals answered by CNPs (the
/// notification point, `np_ecn_marked_roce_packets` against `np_cnp_sent`), and CNPs received
/// not ignored (the reaction point, `rp_cnp_ignored`, where the device counts it).
fn cnp_sent(d: &crate::model::nic::Device, seconds: f64) -> (ItemStatus, String) {
    let mut have = false;
    let mut bad = Vec::new();
    let mut seen = Vec::new();
    for p in &d.ports {
        if let (Some(marked), Some(sent)) =
            (p.hw("np_ecn_marked_roce_packets"), p.hw("np_cnp_sent"))
        {
            have = true;
            if marked > 0 && sent == 0 {
                bad.push(format!(
                    "port {}: {marked} ECN-marked RoCE packets arrived and no CNP was sent (the notification point is off on their priority: ecn/roce_np)",
                    p.port
                ));
            } else {
                seen.push(format!(
                    "port {}: {marked} marked, {sent} CNPs sent",
                    p.port
                ));
            }
        }
        if let Some(ignored) = p.hw("rp_cnp_ignored") {
            have = true;
            if ignored > 0 {
                bad.push(format!(
                    "port {}: {ignored} CNPs received and ignored (rp_cnp_ignored: the reaction point is off on their priority: ecn/roce_rp)",
                    p.port
                ));
            }
        }
    }
    if !have {
        return (
            ItemStatus::Unknown,
            "the device counts no ECN-marked arrivals, CNPs sent or CNPs ignored".into(),
        );
    }
    if let Some(u) = one_reading(seconds) {
        return u;
    }
    if bad.is_empty() {
        (
            ItemStatus::Pass,
            format!("in {seconds:.1} s: {}; no CNP ignored", seen.join(", ")),
        )
    } else {
        (
            ItemStatus::Fail,
            format!("in {seconds:.1} s: {}", bad.join("; ")),
        )
    }
}

/// The number at the start of a PCI link file ("32.0 GT/s PCIe", "16"); none for "Unknown".
fn leading_number(v: &str) -> Option<f64> {
    v.split_whitespace().next()?.parse().ok()
}

/// The device's PCIe link against what the card can do: a card trained below its speed or width
/// (a slot, riser or BIOS setting) cannot feed its ports at line rate.
fn pcie(d: &Device) -> (ItemStatus, String) {
    let get = |k: &str| d.pci.get(k).and_then(|v| leading_number(v));
    let numa = d
        .pci
        .get("numa_node")
        .filter(|n| n.as_str() != "-1")
        .map_or_else(String::new, |n| format!("; NUMA node {n}"));
    let (Some(speed), Some(max_speed), Some(width), Some(max_width)) = (
        get("current_link_speed"),
        get("max_link_speed"),
        get("current_link_width"),
        get("max_link_width"),
    ) else {
        return (
            ItemStatus::Unknown,
            "the PCIe link is not readable (device/current_link_speed, max_link_speed, current_link_width, max_link_width: a virtual function reports none)".into(),
        );
    };
    let now = format!("{speed:.1} GT/s x{width}");
    let max = format!("{max_speed:.1} GT/s x{max_width}");
    // What the platform allows: the port above the card, where readable.
    let (up_speed, up_width) = (
        get("upstream_max_link_speed"),
        get("upstream_max_link_width"),
    );
    let limit_speed = up_speed.map_or(max_speed, |u| u.min(max_speed));
    let limit_width = up_width.map_or(max_width, |u| u.min(max_width));
    if speed < limit_speed || width < limit_width {
        (
            ItemStatus::Fail,
            format!(
                "PCIe link at {now}, the card can {max}{}: a riser, a bad seating or a BIOS setting holds it back, and the host cannot feed the ports at line rate{numa}",
                if (limit_speed, limit_width) != (max_speed, max_width) {
                    format!(" and its slot {limit_speed:.1} GT/s x{limit_width}")
                } else {
                    String::new()
                }
            ),
        )
    } else if speed < max_speed || width < max_width {
        (
            ItemStatus::Warn,
            format!(
                "PCIe link at {now}, the slot's maximum; the card can {max}: the platform is the limit{numa}"
            ),
        )
    } else {
        (
            ItemStatus::Pass,
            format!("PCIe link at {now}, the card's maximum{numa}"),
        )
    }
}

/// RoCE v2 on the port: a RoCE v2 GID on each of its netdevs (an address without one cannot be
/// reached over RoCE v2), rdma_cm's default mode RoCE v2, and its default ToS the fleet's
/// (`--tos`), or carrying the RoCE DSCP, where configfs has them.
fn roce_mode(p: &Port, intent: &Intent) -> (ItemStatus, String) {
    if p.gids.is_empty() {
        return (
            ItemStatus::Unknown,
            "no GID read (no address on the netdev yet, or no gid_attrs/types)".into(),
        );
    }
    let mut bad = Vec::new();
    let mut good = Vec::new();
    let mut netdevs: Vec<&str> = p.gids.iter().map(|g| g.netdev.as_str()).collect();
    netdevs.extend(p.netdevs.iter().map(String::as_str));
    netdevs.sort_unstable();
    netdevs.dedup();
    for n in netdevs.iter().filter(|n| !n.is_empty()) {
        let v2: Vec<String> = p
            .gids
            .iter()
            .filter(|g| g.netdev == *n && g.kind == "RoCE v2")
            .map(|g| g.index.to_string())
            .collect();
        if v2.is_empty() {
            bad.push(format!(
                "{n} has no RoCE v2 GID (only RoCE v1: not routable, no UDP source port for ECMP)"
            ));
        } else {
            good.push(format!("RoCE v2 GIDs on {n} (index {})", v2.join(", ")));
        }
    }
    let mut unknown = None;
    let mut warn = None;
    match p.rdma_cm.get("default_roce_mode") {
        Some(m) if m != "RoCE v2" => bad.push(format!(
            "rdma_cm connects in {m} by default (default_roce_mode)"
        )),
        Some(m) => good.push(format!("rdma_cm default {m}")),
        None => {}
    }
    match (p.rdma_cm.get("default_roce_tos"), intent.tos) {
        (Some(t), want) => match t.parse::<u8>() {
            Ok(tos) => {
                let dscp = tos >> 2;
                match want {
                    Some(w) if w != tos => bad.push(format!(
                        "rdma_cm's default ToS is {tos} (DSCP {dscp}), not the fleet's {w}"
                    )),
                    // Applications often set the traffic class per QP (NCCL_IB_TC): without the
                    // fleet's --tos, a default that differs is said, not failed.
                    None if dscp != intent.roce_dscp => {
                        warn = Some(format!(
                            "rdma_cm's default ToS is {tos}: DSCP {dscp}, not the RoCE DSCP {} (connections that set no traffic class of their own use it; give --tos to judge)",
                            intent.roce_dscp
                        ))
                    }
                    _ => good.push(format!("ToS {tos} (DSCP {dscp})")),
                }
            }
            Err(_) => bad.push(format!("default_roce_tos {t:?} is not a number")),
        },
        (None, Some(w)) => {
            unknown = Some(format!(
                "default_roce_tos not readable (configfs rdma_cm/<device> not created) to compare with the fleet's ToS {w}"
            ))
        }
        (None, None) => {}
    }
    if !bad.is_empty() {
        (ItemStatus::Fail, bad.join("; "))
    } else if let Some(w) = warn {
        (ItemStatus::Warn, format!("{}; {w}", good.join("; ")))
    } else if let Some(u) = unknown {
        (ItemStatus::Unknown, format!("{}; {u}", good.join("; ")))
    } else if good.is_empty() {
        (
            ItemStatus::Unknown,
            "no GID names a netdev, and rdma_cm's defaults are not readable".into(),
        )
    } else {
        (ItemStatus::Pass, good.join("; "))
    }
}

/// The fleet's DCQCN parameters (`--expect`'s `[roce_np]`, `[roce_rp]`) against the netdev's.
fn dcqcn_params(i: &Interface, intent: &Intent, absent: &str) -> (ItemStatus, String) {
    if intent.dcqcn.is_empty() {
        return (
            ItemStatus::NotApplicable,
            "no parameters to compare with (give the fleet's in --expect FILE: [roce_np], [roce_rp])".into(),
        );
    }
    let Some(d) = &i.dcqcn else {
        return (ItemStatus::Unknown, format!("no DCQCN settings: {absent}"));
    };
    let mut wrong = Vec::new();
    let mut missing = Vec::new();
    for (key, want) in &intent.dcqcn {
        let have = match key.split_once('/') {
            Some(("roce_np", f)) => d.np.get(f),
            Some(("roce_rp", f)) => d.rp.get(f),
            _ => None,
        };
        match have {
            Some(v) if v == want => {}
            Some(v) => wrong.push(format!("{key} {v}, not {want}")),
            None => missing.push(key.clone()),
        }
    }
    if !wrong.is_empty() {
        (
            ItemStatus::Fail,
            format!("not the fleet's: {}", wrong.join(", ")),
        )
    } else if !missing.is_empty() {
        (
            ItemStatus::Unknown,
            format!("the driver shows no {}", missing.join(", ")),
        )
    } else {
        (
            ItemStatus::Pass,
            format!(
                "{} as the fleet's",
                crate::units::count(intent.dcqcn.len() as u64, "parameter")
            ),
        )
    }
}

/// The ARP and reverse-path sysctls of a netdev on a host with several RoCE netdevs (the
/// effective value: the larger of `all` and the netdev's): each port must answer ARP only for
/// its own address (`arp_ignore` 1 or 2), announce only its own (`arp_announce` 2), and keep
/// replies that come back on another port (`rp_filter` not 1, strict).
fn arp_sysctls(i: &Interface, roce_netdevs: usize) -> (ItemStatus, String) {
    let value = |k: &str| -> Option<u32> {
        let own: u32 = i.sysctls.get(k)?.parse().ok()?;
        let all: u32 = i.sysctls.get(&format!("all/{k}"))?.parse().ok()?;
        Some(own.max(all))
    };
    let (Some(ignore), Some(announce), Some(rp)) = (
        value("arp_ignore"),
        value("arp_announce"),
        value("rp_filter"),
    ) else {
        return (
            ItemStatus::Unknown,
            "arp_ignore, arp_announce or rp_filter not readable (proc/sys/net/ipv4/conf)".into(),
        );
    };
    let values = format!("arp_ignore {ignore}, arp_announce {announce}, rp_filter {rp}");
    if roce_netdevs < 2 {
        return (
            ItemStatus::NotApplicable,
            format!("{values}: one RoCE netdev (they matter with several on one host)"),
        );
    }
    let mut bad = Vec::new();
    match ignore {
        1 | 2 => {}
        0 => bad.push("arp_ignore 0 answers ARP for the other ports' addresses (set 1)"),
        _ => bad.push("arp_ignore above 2 limits or stops ARP replies (set 1)"),
    }
    if announce < 2 {
        bad.push("arp_announce below 2 may announce another port's address (set 2)");
    }
    if rp == 1 {
        bad.push("rp_filter 1 (strict) drops replies that come back on another port (set 0 or 2)");
    }
    if bad.is_empty() {
        (
            ItemStatus::Pass,
            format!("{values}: each of the {roce_netdevs} RoCE netdevs answers for itself"),
        )
    } else {
        (
            ItemStatus::Fail,
            format!(
                "{values} with {roce_netdevs} RoCE netdevs: {}",
                bad.join("; ")
            ),
        )
    }
}

/// Link flaps (`carrier_changes`) and frames the link corrupted (CRC / FCS and symbol errors of
/// the driver statistics) over the window.
fn link_errors(i: &Interface, seconds: f64, absent: Option<&str>) -> (ItemStatus, String) {
    let counted: Vec<(&String, u64)> = i
        .counters
        .iter()
        .filter(|(n, _)| *n == "carrier_changes" || is_link_error(n))
        .map(|(n, c)| (n, c.delta))
        .collect();
    if counted.is_empty() {
        return (
            ItemStatus::Unknown,
            match absent {
                Some(a) => format!("no carrier_changes, and no driver statistics: {a}"),
                None => "neither carrier_changes nor a CRC or symbol error counter".into(),
            },
        );
    }
    if let Some(u) = one_reading(seconds) {
        return u;
    }
    let grew: Vec<String> = counted
        .iter()
        .filter(|(_, d)| *d > 0)
        .map(|(n, d)| format!("{n} +{d}"))
        .collect();
    let names: Vec<&str> = counted.iter().map(|(n, _)| n.as_str()).collect();
    if grew.is_empty() {
        (
            ItemStatus::Pass,
            format!(
                "no link flap or corrupted frame in {seconds:.1} s ({})",
                names.join(", ")
            ),
        )
    } else {
        (
            ItemStatus::Fail,
            format!(
                "in {seconds:.1} s: {}: the link flapped or corrupts frames (a cable, optic or port going bad): RoCE sees it as loss",
                grew.join(", ")
            ),
        )
    }
}

/// ETS for RoCE and CNPs: the RoCE priority's traffic class gets bandwidth (a class at 0% under
/// ETS is starved whenever the others are busy), and CNPs have a class of their own (in RoCE's,
/// they wait behind the data they should slow down), with bandwidth or strict priority.
fn ets(i: &Interface, intent: &Intent, absent: &str) -> (ItemStatus, String) {
    let Some(dcb) = &i.dcb else {
        return (ItemStatus::Unknown, format!("no DCB settings: {absent}"));
    };
    let (Some(prio_tc), Some(tsa), Some(bw)) = (dcb.prio_tc, dcb.tc_tsa, dcb.tc_bw) else {
        return (
            ItemStatus::Unknown,
            "the driver reports no ETS settings".into(),
        );
    };
    let class = |what: &str, prio: u8| {
        let tc = prio_tc[usize::from(prio) & 7];
        let t = usize::from(tc) & 7;
        let how = match tsa[t] {
            0 => "strict".to_string(),
            1 => "credit-based shaper".to_string(),
            2 => format!("ETS {}%", bw[t]),
            255 => "vendor".to_string(),
            n => format!("TSA {n}"),
        };
        let starved = tsa[t] == 2 && bw[t] == 0;
        (
            tc,
            format!("{what} priority {prio} → class {tc} ({how})"),
            starved,
        )
    };
    let (roce_tc, roce, roce_starved) = class("RoCE", intent.roce_priority);
    let (cnp_tc, cnp, cnp_starved) = class("CNP", intent.cnp_priority);
    let mut bad = Vec::new();
    if roce_starved {
        bad.push(format!(
            "class {roce_tc} has 0% under ETS: RoCE starves whenever other classes are busy"
        ));
    }
    if intent.roce_priority != intent.cnp_priority && roce_tc == cnp_tc {
        bad.push(format!(
            "CNPs share class {cnp_tc} with RoCE data: they wait behind the data they should slow down"
        ));
    } else if cnp_starved {
        bad.push(format!(
            "class {cnp_tc} has 0% under ETS: CNPs starve whenever other classes are busy"
        ));
    }
    let evidence = format!("{roce}, {cnp}");
    if bad.is_empty() {
        (ItemStatus::Pass, evidence)
    } else {
        (ItemStatus::Fail, format!("{evidence}: {}", bad.join("; ")))
    }
}

/// PFC storm prevention with lossless RoCE: a port that keeps pausing its peer without draining
/// (a hung host) stops after the timeout instead of pausing the fabric behind it for ever.
fn pfc_watchdog(i: &Interface, intent: &Intent, absent: &str) -> (ItemStatus, String) {
    if intent.lossy {
        return (ItemStatus::NotApplicable, "RoCE runs lossy".into());
    }
    if i.dcb.as_ref().and_then(|d| d.pfc_enabled) == Some(0) {
        return (
            ItemStatus::NotApplicable,
            "PFC is off on every priority".into(),
        );
    }
    let Some(ms) = i.pfc_watchdog_ms else {
        return (
            ItemStatus::Unknown,
            format!("no PFC storm prevention setting: {absent}"),
        );
    };
    match ms {
        0 => (
            ItemStatus::Fail,
            format!(
                "PFC storm prevention is off: a receiver that stops draining pauses its link, and the fabric behind it, for ever (ethtool --set-tunable {} pfc-prevention-tout auto)",
                i.name
            ),
        ),
        crate::model::nic::PFC_PREVENTION_AUTO => (
            ItemStatus::Pass,
            "PFC storm prevention on, the driver's default timeout".into(),
        ),
        ms => (
            ItemStatus::Pass,
            format!(
                "PFC storm prevention on: a port pausing {ms} ms without draining stops pausing"
            ),
        ),
    }
}

/// A GPU on the NIC's NUMA node: GPUDirect RDMA between a GPU and a NIC on different sockets
/// crosses the inter-socket link (and many platforms throttle peer-to-peer across it). Said,
/// not failed: a NIC may serve storage or another socket's GPUs by design.
fn gpu_affinity(d: &Device, gpus: &[crate::model::nic::Gpu]) -> (ItemStatus, String) {
    if gpus.is_empty() {
        return (
            ItemStatus::NotApplicable,
            "no GPU found on the PCI bus (bus/pci/devices: NVIDIA or AMD display controllers)"
                .into(),
        );
    }
    let Some(node) = d
        .pci
        .get("numa_node")
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|n| *n >= 0)
    else {
        return (
            ItemStatus::Unknown,
            "the NIC's NUMA node is not readable (device/numa_node; -1: the platform has one node or does not say)".into(),
        );
    };
    let local: Vec<&str> = gpus
        .iter()
        .filter(|g| g.numa_node.map(i64::from) == Some(node))
        .map(|g| g.bus.as_str())
        .collect();
    if local.is_empty() {
        let nodes: Vec<String> = gpus
            .iter()
            .map(|g| {
                format!(
                    "{} on {}",
                    g.bus,
                    g.numa_node
                        .map_or("no node".into(), |n| format!("node {n}"))
                )
            })
            .collect();
        (
            ItemStatus::Warn,
            format!(
                "no GPU on the NIC's NUMA node {node} ({}): GPUDirect RDMA through it crosses the inter-socket link",
                nodes.join(", ")
            ),
        )
    } else {
        (
            ItemStatus::Pass,
            format!("NUMA node {node}, with GPU {}", local.join(", ")),
        )
    }
}

/// The receive buffers with lossless RoCE (`dcb buffer`, where the driver reports them): the
/// RoCE priority's buffer has a size (its headroom absorbs what arrives while a pause
/// travels), and no lossy priority shares it (lossy frames would take that headroom).
fn buffer(i: &Interface, intent: &Intent, absent: &str) -> (ItemStatus, String) {
    if intent.lossy {
        return (ItemStatus::NotApplicable, "RoCE runs lossy".into());
    }
    let Some(dcb) = &i.dcb else {
        return (ItemStatus::Unknown, format!("no DCB settings: {absent}"));
    };
    let (Some(map), Some(sizes)) = (dcb.prio_buffer, dcb.buffer_size) else {
        return (
            ItemStatus::Unknown,
            "the driver reports no receive buffer configuration (dcb buffer)".into(),
        );
    };
    let lossless = dcb.pfc_enabled.unwrap_or(1 << intent.roce_priority);
    if lossless == 0 {
        return (ItemStatus::NotApplicable, "no priority is lossless".into());
    }
    let mut bad = Vec::new();
    let mut good = Vec::new();
    // RoCE's priority (other lossless priorities are the pfc item's mistake).
    for p in [intent.roce_priority]
        .into_iter()
        .filter(|p| lossless & (1 << p) != 0)
    {
        let b = map[usize::from(p)];
        let size = sizes[usize::from(b) & 7];
        let lossy: Vec<String> = (0..8u8)
            .filter(|q| lossless & (1 << q) == 0 && map[usize::from(*q)] == b)
            .map(|q| q.to_string())
            .collect();
        if size == 0 {
            bad.push(format!(
                "priority {p}'s buffer {b} has no size: no headroom for what arrives while a pause travels"
            ));
        } else if !lossy.is_empty() {
            bad.push(format!(
                "lossy priorities {} share buffer {b} with lossless priority {p}: their frames take the headroom PFC needs",
                lossy.join(", ")
            ));
        } else {
            good.push(format!(
                "priority {p} → buffer {b} ({size} bytes), lossless alone"
            ));
        }
    }
    let total = dcb
        .buffer_total
        .map_or_else(String::new, |t| format!("; {t} bytes in all"));
    if !bad.is_empty() {
        (ItemStatus::Fail, bad.join("; "))
    } else if good.is_empty() {
        (
            ItemStatus::NotApplicable,
            format!("the RoCE priority {} is not lossless", intent.roce_priority),
        )
    } else {
        (ItemStatus::Pass, format!("{}{total}", good.join(", ")))
    }
}
