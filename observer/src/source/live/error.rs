//! The live source's errors.

use std::io;

use aya::programs::{ProgramError, tc::TcError};
use observer_common::BURST_IFACE_SLOTS;

use super::bpfsys::BpfSysError;

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("interface '{0}' not found")]
    UnknownInterface(String),
    #[error(
        "this build has no kernel programs (roce-observer built without its `live` feature): rebuild with the default features to observe an interface"
    )]
    NoKernelPrograms,
    #[error(
        "live capture needs root or the capabilities {missing} (this process runs as uid {uid} without them)"
    )]
    NotPrivileged { missing: String, uid: u32 },
    #[error("interface '{0}' already has an XDP program attached ({1}); refusing to replace it")]
    XdpBusy(String, String),
    #[error(
        "interface '{0}' has roce-observer's mirror-mode program attached ({1}: a sidecar spreading or consuming the copies): beside it only its metrics see them (its /metrics endpoint)"
    )]
    SidecarMirror(String, String),
    #[error("XDP mode '{mode}' is not supported on interface '{iface}' (try --xdp-mode skb)")]
    ModeUnsupported { iface: String, mode: &'static str },
    /// The loader's (or verifier's) message made one line by [`load_error`]: it is the source's
    /// text, so the source is not kept (it would repeat it, log and all).
    #[error("cannot load the kernel object: {0}")]
    Load(String),
    #[error("cannot load the kernel object: no program {0}")]
    MissingProgram(&'static str),
    /// Setting up the interface array of the loaded object.
    #[error("cannot load the kernel object")]
    InterfaceMap(#[source] aya::maps::MapError),
    #[error("cannot attach XDP to '{iface}'")]
    Attach {
        iface: String,
        #[source]
        source: ProgramError,
    },
    #[error("cannot attach the TC egress observer to '{iface}'")]
    TcAttach {
        iface: String,
        #[source]
        source: ProgramError,
    },
    /// Adding the clsact qdisc the TC egress observer attaches to.
    #[error("cannot attach the TC egress observer to '{iface}'")]
    Clsact {
        iface: String,
        #[source]
        source: TcError,
    },
    #[error("cannot put '{iface}' in promiscuous mode")]
    Promiscuous {
        iface: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot detach XDP from '{iface}'")]
    Detach {
        iface: String,
        #[source]
        source: ProgramError,
    },
    #[error("cannot detach XDP from '{iface}': TC egress")]
    DetachEgress {
        iface: String,
        #[source]
        source: ProgramError,
    },
    #[error("cannot detach the TC ingress program from interface '{iface}'")]
    DetachIngress {
        iface: String,
        #[source]
        source: ProgramError,
    },
    #[error("interface '{0}' is given twice")]
    DuplicateInterface(String),
    #[error("cannot read the kernel map {map}")]
    ReadMap {
        map: &'static str,
        #[source]
        source: BpfSysError,
    },
    /// Zeroing an interface slot's counters.
    #[error("cannot read the kernel map {map}")]
    MapAccess {
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("cannot read the kernel map {map}: {problem}")]
    BadMap {
        map: &'static str,
        problem: &'static str,
    },
    #[error("--max-flows must be between 1 and {max}, not {got}")]
    MaxFlows { got: u32, max: u32 },
    #[error("at most {max} interfaces per observer, not {got}")]
    TooManyInterfaces { got: usize, max: u32 },
    #[error("cannot map the microburst slots into memory")]
    BurstMap(#[source] io::Error),
    #[error("cannot spread the mirror copies over CPUs: {0}")]
    Spread(String),
    #[error("cannot start the kernel programs' clock: {0}")]
    Clock(String),
    #[error(
        "the kernel's microburst rings hold {have} rings per CPU, not the {want} asked for (size them when loading the object)"
    )]
    BurstRings { have: u32, want: u32 },
    #[error(
        "cannot map the microburst slots into memory: no microburst ring left for '{iface}' (the rings were sized for {rings} interfaces at start)"
    )]
    NoBurstRing { iface: String, rings: usize },
    #[error(
        "interfaces '{first}' and '{second}' share the kernel's interface entry {entry} (ifindex modulo {BURST_IFACE_SLOTS}); observe them in two processes"
    )]
    EntryClash {
        first: String,
        second: String,
        entry: u32,
    },
}

/// An error and its sources on one line, joined by ": " as the CLI shows them (anyhow's `{:#}`):
/// for logs and events, which carry a message, not the error.
pub struct OneLine<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for OneLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

/// A load error on one line: a rejected program's verifier log is long and multi-line, so keep
/// the first line and the log's last lines that say why (the rejected instruction, the reason).
pub(super) fn load_error(e: &dyn std::error::Error) -> LiveError {
    // The message itself, not the source chain: aya's load error already names the errno,
    // and a source appended after the log's last newline would push the reason out.
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default().to_string();
    let rest: Vec<&str> = lines
        .filter(|l| !l.starts_with("verification time") && !l.starts_with("stack depth"))
        .filter(|l| !l.starts_with("processed "))
        .collect();
    LiveError::Load(match rest.len() {
        0 => first,
        n => format!("{first} ... {}", rest[n.saturating_sub(2)..].join("; ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Verifier(&'static str);
    impl std::fmt::Display for Verifier {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Verifier {
        // As aya's load error: the errno is in the message and is the source too.
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&ERRNO)
        }
    }
    static ERRNO: Errno = Errno;
    #[derive(Debug)]
    struct Errno;
    impl std::fmt::Display for Errno {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Permission denied (os error 13)")
        }
    }
    impl std::error::Error for Errno {}

    #[test]
    fn verifier_logs_become_one_line() {
        let e = Verifier(
            "the BPF_PROG_LOAD syscall returned Permission denied (os error 13). Verifier output: 0: R1=ctx() R10=fp0\n; #[xdp]\n1446: (71) r0 = *(u8 *)(r5 +0)\ninvalid access to packet, off=0 size=1\nR5 offset is outside of the packet\nverification time 46957 usec\nstack depth 296\nprocessed 7124 insns (limit 1000000)\n",
        );
        let LiveError::Load(msg) = load_error(&e) else {
            panic!("not a load error")
        };
        assert!(!msg.contains('\n'), "{msg}");
        assert_eq!(
            msg,
            "the BPF_PROG_LOAD syscall returned Permission denied (os error 13). Verifier output: 0: R1=ctx() R10=fp0 ... invalid access to packet, off=0 size=1; R5 offset is outside of the packet"
        );
    }

    #[test]
    fn one_line_joins_each_cause_once() {
        let e = LiveError::Promiscuous {
            iface: "rx0".into(),
            source: io::Error::from_raw_os_error(libc::EPERM),
        };
        assert_eq!(
            OneLine(&e).to_string(),
            "cannot put 'rx0' in promiscuous mode: Operation not permitted (os error 1)"
        );
        // A bpf(2) error's text has its errno, which it does not return as a source too.
        let e = LiveError::ReadMap {
            map: "FLOWS",
            source: BpfSysError {
                op: "BPF_MAP_LOOKUP_BATCH",
                fd: Some(7),
                error: io::Error::from_raw_os_error(libc::EINVAL),
            },
        };
        assert_eq!(
            OneLine(&e).to_string(),
            "cannot read the kernel map FLOWS: BPF_MAP_LOOKUP_BATCH on map fd 7: Invalid argument (os error 22)"
        );
    }
}
