//! Builds the kernel programs (observer-ebpf) for bpfel-unknown-none with the nightly toolchain
//! and bpf-linker; `cargo xtask setup` provides both.
fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-changed=../observer-common/src");
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "observer-ebpf",
            root_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/../observer-ebpf"),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
