//! DCQCN settings of a netdev (`/sys/class/net/<if>/ecn/roce_np` and `roce_rp`, mlx5): on which
//! priorities the notification point (the receiver, which sends CNPs) and the reaction point
//! (the sender, which slows down on CNPs) are enabled, the CNP's DSCP and 802.1p priority, and
//! the other parameters as the driver names them.
//!
//! Written by hand for the same reason as [`super::rdma`]: one number per file.

use std::collections::BTreeMap;
use std::path::Path;

use super::{Availability, NicError, check_interface};

/// The DCQCN settings of one netdev.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dcqcn {
    /// Bit p: the notification point (CNPs sent on ECN-marked arrivals) is enabled on
    /// priority p.
    pub np_enabled: u8,
    /// Bit p: the reaction point (rate cut on CNPs) is enabled on priority p.
    pub rp_enabled: u8,
    /// `roce_np`'s other files: `cnp_dscp`, `cnp_802p_prio`, `min_time_between_cnps`, …
    pub np: BTreeMap<String, u64>,
    /// `roce_rp`'s other files: `rpg_min_rate`, `rpg_ai_rate`, `initial_alpha_value`, …
    pub rp: BTreeMap<String, u64>,
}

/// The DCQCN settings of `iface` under `root`: absent, with the reason, where its driver has
/// none.
pub fn dcqcn(root: &Path, iface: &str) -> Result<Availability<Dcqcn>, NicError> {
    check_interface(iface)?;
    let net = root.join("sys/class/net").join(iface);
    if !net.is_dir() {
        return Ok(Availability::Absent {
            reason: format!("no interface {iface} ({} missing)", net.display()),
        });
    }
    let ecn = net.join("ecn");
    if !ecn.is_dir() {
        return Ok(Availability::Absent {
            reason: format!(
                "{iface}: no DCQCN settings ({} missing: the driver has none)",
                ecn.display()
            ),
        });
    }
    let mut d = Dcqcn::default();
    for (side, enabled, params) in [
        ("roce_np", &mut d.np_enabled, &mut d.np),
        ("roce_rp", &mut d.rp_enabled, &mut d.rp),
    ] {
        let dir = ecn.join(side);
        if !dir.is_dir() {
            continue;
        }
        for name in super::entries(&dir)? {
            let path = dir.join(&name);
            if name == "enable" && path.is_dir() {
                for prio in 0..8u8 {
                    if super::number(&path.join(prio.to_string())) == Some(1) {
                        *enabled |= 1 << prio;
                    }
                }
            } else if let Some(v) = super::number(&path) {
                params.insert(name, v);
            }
        }
    }
    Ok(Availability::Present(d))
}
