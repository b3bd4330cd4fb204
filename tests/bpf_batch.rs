//! roce_observer::source::live::bpfsys without privileges: the possible CPUs as the kernel lists
//! them, and a descriptor that is no map refused in one line. Against real kernel maps (made with
//! raw BPF_MAP_CREATE, which needs root): privileged/bpf_batch_kernel.rs.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use integration_tests::{assert_one_line, cpus, flow_key as key};
use observer_common::{FlowKey, FlowSlot, FlowStats};
use roce_observer::source::live::bpfsys::{
    percpu_array_for_each, percpu_array_get, percpu_hash_for_each, percpu_hash_take,
};

#[test]
fn possible_cpus_matches_the_kernel_list() {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    let n = cpus();
    eprintln!("possible CPUs {:?}: {n}", text.trim());
    assert!(n >= 1);
}

/// Not a map: the first operation (the map-info query) fails, and says so in one line. Runs
/// unprivileged too (then the kernel refuses with EPERM instead of EINVAL).
#[test]
fn a_pipe_is_not_a_map() {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: new descriptors owned here.
    let (r, _w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let fd = r.as_fd();
    let raw = fd.as_raw_fd();
    let errors = [
        percpu_hash_for_each::<FlowKey, FlowStats>(fd, 64, |_, _| panic!("no entries"))
            .unwrap_err(),
        percpu_hash_for_each::<FlowKey, FlowStats>(fd, 0, |_, _| panic!("no entries")).unwrap_err(),
        percpu_array_for_each::<FlowSlot>(fd, 64, |_, _| panic!("no entries")).unwrap_err(),
        percpu_hash_take::<FlowKey, FlowStats>(fd, &key(1)).unwrap_err(),
        percpu_array_get::<FlowSlot>(fd, 0).unwrap_err(),
    ];
    for e in errors {
        let msg = e.to_string();
        eprintln!("{msg}");
        assert_one_line(&msg, "BPF_OBJ_GET_INFO_BY_FD", raw);
        assert_eq!(e.op, "BPF_OBJ_GET_INFO_BY_FD");
        assert!(e.errno().is_some(), "{msg}");
    }
}
