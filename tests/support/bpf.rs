//! The kernel object under test: its programs loaded and verified.

/// The kernel object with one of its XDP programs loaded (verified), its clock stopped at 0.
///
/// Pins the calling thread to one CPU first: BPF_PROG_TEST_RUN runs the program on the caller's
/// CPU, and the observer's per-flow state (the PSN analysis, hence which packets are new) is per
/// CPU, as a NIC's RSS keeps a flow on one. A test thread moved to another CPU halfway (the
/// scheduler does under load) would meet its flows afresh there.
pub fn load_program(name: &str) -> aya::Ebpf {
    roce_observer::lab::pin_current_thread().expect("pin the test thread to one CPU");
    // Rings for one interface (none kept until a test registers one), and the clock stopped:
    // the tests compare the kernel with replays whose frames carry no time (or microseconds
    // apart), and a test thread descheduled for 5 ms between two frames would otherwise turn a
    // copy into a resend after a wait. Tests of the clock or of microburst slots start it.
    let mut ebpf = roce_observer::source::live::load_object(
        roce_observer::EBPF_OBJECT,
        &[],
        1,
        roce_observer::source::live::RUN_TICK_NS,
    )
    .expect("load object");
    roce_observer::source::live::freeze_clock(&mut ebpf).expect("stop the clock");
    xdp_mut(&mut ebpf, name)
        .load()
        .unwrap_or_else(|e| panic!("verifier rejects {name}: {e}"));
    ebpf
}

/// An XDP program of the object.
pub fn xdp_mut<'a>(ebpf: &'a mut aya::Ebpf, name: &str) -> &'a mut aya::programs::Xdp {
    ebpf.program_mut(name)
        .unwrap_or_else(|| panic!("no program {name}"))
        .try_into()
        .expect("an XDP program")
}
