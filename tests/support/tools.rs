//! Tools the tests run from PATH: found, or missing, said loudly (a failure under CI).

use std::path::PathBuf;

/// Skips loudly, or fails under CI, when something a test needs is missing.
pub fn missing(test: &str, what: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test}: would be SKIPPED ({what}) but CI is set: failing");
    }
    eprintln!("\n*** SKIPPED {test}: {what}. Run `cargo xtask setup` ***\n");
}

/// A command from PATH, or None (see [`missing`]).
pub fn tool(test: &str, name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        missing(test, &format!("`{name}` is not in PATH"));
    }
    found
}

/// The tools virtualenv's Python (`cargo xtask setup` installs the tests' Python packages there:
/// prometheus-client, opentelemetry-proto and grpcio, chdb, numpy and scipy...).
pub fn venv_python() -> PathBuf {
    let python = crate::workspace_root().join("target/tools/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `cargo xtask setup`",
        python.display()
    );
    python
}
