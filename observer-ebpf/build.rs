fn main() {
    // Rebuild when the shared parser changes (a path dependency of this crate).
    println!("cargo:rerun-if-changed=../observer-common/src");
}
