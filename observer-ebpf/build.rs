use std::env;

/// The hosts whose kernels load a BPF program's misaligned packet reads: those built with
/// `CONFIG_HAVE_EFFICIENT_UNALIGNED_ACCESS`, on which the verifier checks packet alignment only
/// when a loader asks for it (`BPF_F_STRICT_ALIGNMENT`, which aya does not). On others it
/// rejects them, so their objects keep a load per byte.
const MISALIGNED_OK: [&str; 2] = ["x86_64", "aarch64"];

fn main() {
    // Rebuild when the shared parser changes (a path dependency of this crate).
    println!("cargo:rerun-if-changed=../observer-common/src");
    // aya-build sets the host's architecture as the `bpf_target_arch` cfg of the BPF build.
    let bpf = env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "bpf");
    let host = env::var("CARGO_CFG_BPF_TARGET_ARCH").unwrap_or_default();
    if bpf && MISALIGNED_OK.contains(&host.as_str()) {
        // A header field at any offset read with one load of its width, not a load per byte:
        // 4-5 ns less on a RoCE packet, 11-12 ns on an ERSPAN copy (docs/benchmarks.md). The
        // code is made by bpf-linker, and aya-build fixes rustc's flags (no
        // `-C target-feature`), so the feature goes to the linker.
        println!("cargo:rustc-link-arg-bins=--cpu-features=+allows-misaligned-mem-access");
    }
}
