//! Attaching the programs: XDP (refusing a busy interface) and TC egress (ahead of the programs
//! already there), and what their errors mean.

use std::io;

use aya::programs::{ProgramError, SchedClassifier, TcAttachType, tc::SchedClassifierLinkId};

use super::{AttachMode, LiveError, TcHook};
use crate::units::Named;

fn os_error(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            return io.raw_os_error();
        }
        cur = err.source();
    }
    None
}

/// Attaches the TC egress observer to `iface`: tcx as the first program, or a new filter on the
/// clsact qdisc (added when missing, and left in place afterwards: other filters may use it by
/// then) that the kernel places ahead of the existing ones. First, so that it sees every frame
/// before another program may drop or redirect it; it passes every packet on, so the others see
/// what they saw before. Neither replaces anything.
pub(super) fn attach_egress(
    tc: &mut SchedClassifier,
    iface: &str,
    hook: TcHook,
) -> Result<SchedClassifierLinkId, LiveError> {
    use aya::{
        programs::{
            LinkOrder,
            tc::{NlOptions, TcAttachOptions},
        },
        util::KernelVersion,
    };
    let tcx = match hook {
        TcHook::Auto => KernelVersion::current().is_ok_and(|v| v >= KernelVersion::new(6, 6, 0)),
        TcHook::Tcx => true,
        TcHook::Clsact => false,
    };
    let options = if tcx {
        TcAttachOptions::TcxOrder(LinkOrder::first())
    } else {
        if let Err(e) = aya::programs::tc::qdisc_add_clsact(iface) {
            // EEXIST: the qdisc is there already, which is what we need.
            if os_error(&e) != Some(libc::EEXIST) {
                return Err(LiveError::Clsact {
                    iface: iface.to_string(),
                    source: e,
                });
            }
        }
        TcAttachOptions::Netlink(NlOptions::default())
    };
    tc.attach_with_options(iface, TcAttachType::Egress, options)
        .map_err(|e| match e {
            ProgramError::UnknownInterface { name } => LiveError::UnknownInterface(name),
            source => LiveError::TcAttach {
                iface: iface.to_string(),
                source,
            },
        })
}

pub(super) fn attach_error(iface: &str, mode: AttachMode, e: ProgramError) -> LiveError {
    match e {
        ProgramError::UnknownInterface { name } => LiveError::UnknownInterface(name),
        source => match os_error(&source) {
            Some(libc::EBUSY) | Some(libc::EEXIST) => LiveError::XdpBusy(iface.to_string()),
            Some(libc::EOPNOTSUPP) if mode == AttachMode::Native => LiveError::ModeUnsupported {
                iface: iface.to_string(),
                mode: mode.name(),
            },
            _ => LiveError::Attach {
                iface: iface.to_string(),
                source,
            },
        },
    }
}
