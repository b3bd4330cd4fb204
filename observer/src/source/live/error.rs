//! The live source's errors.

use observer_common::BURST_IFACE_SLOTS;

#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("interface '{0}' not found")]
    UnknownInterface(String),
    #[error(
        "live capture needs root or the capabilities {missing} (this process runs as uid {uid} without them)"
    )]
    NotPrivileged { missing: String, uid: u32 },
    #[error(
        "interface '{0}' already has an XDP program attached by someone else; refusing to replace it (detach it first, e.g. `ip link set dev {0} xdp off`, if it is not needed)"
    )]
    XdpBusy(String),
    #[error("XDP mode '{mode}' is not supported on interface '{iface}' (try --xdp-mode skb)")]
    ModeUnsupported { iface: String, mode: &'static str },
    #[error("cannot load the kernel object: {0}")]
    Load(String),
    #[error("cannot attach XDP to '{iface}': {detail}")]
    Attach { iface: String, detail: String },
    #[error("cannot attach the TC egress observer to '{iface}': {detail}")]
    TcAttach { iface: String, detail: String },
    #[error("cannot put '{iface}' in promiscuous mode: {detail}")]
    Promiscuous { iface: String, detail: String },
    #[error("cannot detach XDP from '{iface}': {detail}")]
    Detach { iface: String, detail: String },
    #[error("interface '{0}' is given twice")]
    DuplicateInterface(String),
    #[error("cannot read the kernel map {map}: {detail}")]
    ReadMap { map: &'static str, detail: String },
    #[error("--max-flows must be between 1 and {max}, not {got}")]
    MaxFlows { got: u32, max: u32 },
    #[error("at most {max} interfaces per observer, not {got}")]
    TooManyInterfaces { got: usize, max: u32 },
    #[error("cannot map the microburst slots into memory: {0}")]
    BurstMap(String),
    #[error(
        "interfaces '{first}' and '{second}' share the kernel's interface entry {entry} (ifindex modulo {BURST_IFACE_SLOTS}); observe them in two processes"
    )]
    EntryClash {
        first: String,
        second: String,
        entry: u32,
    },
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

/// The error and its sources on one line.
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
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
}
