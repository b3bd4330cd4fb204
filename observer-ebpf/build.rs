use std::env;

/// The hosts whose kernels take a BPF program's misaligned packet and map-value reads: they are
/// built with `CONFIG_HAVE_EFFICIENT_UNALIGNED_ACCESS`, so the verifier checks the alignment of
/// those reads only when a loader asks (`BPF_F_STRICT_ALIGNMENT`, which aya does not). Other
/// kernels may refuse them (s390x and ppc64 likely would not, but are untested here), so the
/// objects for other hosts keep a load per byte.
const MISALIGNED_OK: [&str; 2] = ["x86_64", "aarch64"];

fn main() {
    // Rebuild when the shared parser changes (a path dependency of this crate).
    println!("cargo:rerun-if-changed=../observer-common/src");
    // aya-build passes the architecture the object is built for (the `observer` crate's
    // target: the machine that loads it) as the `bpf_target_arch` cfg.
    let bpf = env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "bpf");
    let host = env::var("CARGO_CFG_BPF_TARGET_ARCH").unwrap_or_default();
    if bpf && MISALIGNED_OK.contains(&host.as_str()) {
        // A header field at any offset read with one load of its width, not a load per byte:
        // 3-5 ns less on a RoCE packet, 10-12 ns on an ERSPAN copy (docs/benchmarks.md). The
        // code is made by bpf-linker, and aya-build fixes rustc's flags (no
        // `-C target-feature`), so the feature goes to the linker. A misaligned stack access is
        // refused on every host: a "misaligned stack access" from the verifier points here.
        // The BPF CPU stays v1 (rustc passes `--cpu generic`, which bpf-linker takes once): v3's
        // 32-bit registers gave code the verifier refuses (docs/architecture.md).
        println!("cargo:rustc-link-arg-bins=--cpu-features=+allows-misaligned-mem-access");
    }
}
