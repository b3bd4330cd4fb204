//! The kernel object under test: its programs loaded and verified.

/// The kernel object with one of its XDP programs loaded (verified).
pub fn load_program(name: &str) -> aya::Ebpf {
    let mut ebpf = aya::EbpfLoader::new()
        .load(roce_observer::EBPF_OBJECT)
        .expect("load object");
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
