//! DCQCN settings of a netdev (`/sys/class/net/<if>/ecn/roce_np` and `roce_rp`, mlx5): on which
//! priorities the notification point (the receiver, which sends CNPs) and the reaction point
//! (the sender, which slows down on CNPs) are enabled, the CNP's DSCP and 802.1p priority, and
//! the other parameters as the driver names them.
//!
//! Written by hand for the same reason as [`super::rdma`]: one number per file.

use std::path::Path;

use super::{Availability, NicError, check_interface};

pub use crate::model::nic::Dcqcn;

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
            d.unread.push(side.to_string());
            continue;
        }
        for name in super::entries(&dir)? {
            let path = dir.join(&name);
            if name == "enable" && path.is_dir() {
                for prio in 0..8u8 {
                    match super::number(&path.join(prio.to_string())) {
                        Some(1) => *enabled |= 1 << prio,
                        Some(_) => {}
                        None => d.unread.push(format!("{side}/enable/{prio}")),
                    }
                }
            } else if let Some(v) = super::number(&path) {
                params.insert(name, v);
            }
        }
        if !dir.join("enable").is_dir() {
            d.unread.push(format!("{side}/enable"));
        }
    }
    Ok(Availability::Present(d))
}
