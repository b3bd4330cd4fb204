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
pub(super) fn attach_tc(
    tc: &mut SchedClassifier,
    iface: &str,
    hook: TcHook,
    at: TcAttachType,
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
    tc.attach_with_options(iface, at, options)
        .map_err(|e| match e {
            ProgramError::UnknownInterface { name } => LiveError::UnknownInterface(name),
            source => LiveError::TcAttach {
                iface: iface.to_string(),
                source,
            },
        })
}

/// Whose XDP program holds an interface's hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum XdpOwner {
    /// roce-observer's observer in host mode (or plain mirror mode): a sidecar, whose every
    /// frame passes on to TC ingress.
    Observer(u32),
    /// roce-observer's mirror-mode spreading or consuming program.
    OurMirror(u32, String),
    /// Another program.
    Other(u32, String),
    /// A program whose name cannot be read (BPF_PROG_GET_FD_BY_ID needs CAP_SYS_ADMIN).
    Unnamed(u32),
    /// None found (or the hook could not be read).
    Unknown,
}

impl XdpOwner {
    pub(super) fn describe(&self, iface: &str) -> String {
        match self {
            Self::Observer(id) => format!("program {id}, roce-observer's"),
            Self::OurMirror(id, name) => format!("program {id}, roce-observer's {name}"),
            Self::Other(id, name) => format!(
                "program {id}, {name}, not roce-observer's; if it is not needed, `ip link set dev {iface} xdp off` frees the hook"
            ),
            Self::Unnamed(id) => format!(
                "program {id}, whose name only CAP_SYS_ADMIN can read: if it is `roce-observer run`, diagnose as root observes beside it"
            ),
            Self::Unknown => "by another process".into(),
        }
    }
}

/// Whose XDP program is attached to `iface` (rtnetlink gives its id; its name says whether it
/// is roce-observer's: the kernel keeps 15 bytes of it).
pub(super) fn xdp_owner(iface: &str) -> XdpOwner {
    use observer_common::programs;
    let Ok(ifindex) = super::if_index(iface) else {
        return XdpOwner::Unknown;
    };
    let Ok(Some(id)) = crate::source::nic::link::xdp_program_id(ifindex) else {
        return XdpOwner::Unknown;
    };
    let name = aya::programs::loaded_programs()
        .flatten()
        .find(|p| p.id() == id)
        .and_then(|p| p.name_as_str().map(str::to_string));
    match name {
        None => XdpOwner::Unnamed(id),
        Some(n) if n == programs::OBSERVE => XdpOwner::Observer(id),
        // The kernel keeps 15 bytes of a name (BPF_OBJ_NAME_LEN - 1).
        Some(n)
            if n == programs::SPREAD
                || n == programs::SPREAD_BARE[..programs::SPREAD_BARE.len().min(15)]
                || n == programs::OBSERVE_CONSUME[..programs::OBSERVE_CONSUME.len().min(15)] =>
        {
            XdpOwner::OurMirror(id, n)
        }
        Some(n) => XdpOwner::Other(id, n),
    }
}

pub(super) fn attach_error(iface: &str, mode: AttachMode, e: ProgramError) -> LiveError {
    match e {
        ProgramError::UnknownInterface { name } => LiveError::UnknownInterface(name),
        source => match os_error(&source) {
            Some(libc::EBUSY) | Some(libc::EEXIST) => {
                LiveError::XdpBusy(iface.to_string(), xdp_owner(iface).describe(iface))
            }
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
