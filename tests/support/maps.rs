//! BPF maps of the bpfsys tests: the possible CPUs, the flow key numbered `id`, and the one-line
//! errors of map operations.

use observer_common::FlowKey;
use roce_observer::source::live::bpfsys::possible_cpus;

/// The possible CPUs, as many as per-CPU maps hold values for (at least the usable ones).
pub fn cpus() -> usize {
    let n = possible_cpus().expect("possible CPUs");
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert!(n >= online, "{n} possible CPUs < {online} usable");
    n
}

/// Flow `id`'s key: every field derived from it.
pub fn flow_key(id: u32) -> FlowKey {
    let mut src_ip = [0u8; 16];
    src_ip[10] = 0xff;
    src_ip[11] = 0xff;
    src_ip[12..].copy_from_slice(&id.to_be_bytes());
    let mut dst_ip = src_ip;
    dst_ip[15] ^= 0x5a;
    FlowKey {
        src_ip,
        dst_ip,
        dest_qp: id & 0x00ff_ffff,
        udp_src_port: (id >> 8) as u16 ^ 0xc000,
        mirror: (id >> 24) as u16,
    }
}

/// A map operation's error: one line, naming the operation `op` and the map's descriptor `fd`.
pub fn assert_one_line(msg: &str, op: &str, fd: i32) {
    assert!(!msg.contains('\n'), "one line: {msg:?}");
    assert!(msg.starts_with(op), "names {op}: {msg:?}");
    assert!(
        msg.contains(&format!("map fd {fd}")),
        "names fd {fd}: {msg:?}"
    );
}
