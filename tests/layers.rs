//! The workspace's layout holds. Crates: `observer-core` (what is concluded from frames) depends
//! on no kernel, socket, capture or HTTP crate; `roce-observer` (the sources and the pipeline)
//! does not depend on the daemon; only the CLI has clap, and no library has anyhow (the
//! binaries' edge). Inside each library crate, each layer uses only the layers below it, no two
//! modules use each other (directly or round a circle), and `model/` stands on its own.
//!
//! Modules are files (`a/b.rs` or `a/b/mod.rs` is `a::b`); a use is any `crate::a::b` or
//! `super::` path outside the unit tests. A module and its own parent or children may use each
//! other (a `mod.rs` re-exports its children, which use its shared items). A path into another
//! crate (`roce_observer::model`, the core's modules re-exported) is the crate graph's business.
//!
//! The integration tests: a test that needs root (the root check, a network namespace, a BPF
//! program or map) lives in `tests/privileged/`, never in a top-level file of `tests/`.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// A library crate's source directory and its layers, lowest first: a module may use its own
/// layer's modules and those listed before.
struct Crate {
    src: &'static str,
    layers: &'static [&'static [&'static str]],
}

const CRATES: &[Crate] = &[
    Crate {
        src: "observer-core/src",
        layers: &[
            &["units", "model"],
            &["aggregate"],
            &["analysis"],
            &["render", "export"],
        ],
    },
    // The core's modules, re-exported under the same names, keep their place: the sources
    // stand on units, model and aggregate, below the analyses and renderers.
    Crate {
        src: "observer/src",
        layers: &[
            &["units", "model", "aggregate"],
            &["source", "lab", "trace"],
            &["analysis", "render", "export"],
            &["pipeline", "records"],
        ],
    },
    Crate {
        src: "observer-daemon/src",
        layers: &[
            &[
                "config", "logging", "procfs", "netlink", "signals", "flowbook", "records", "jobs",
            ],
            // The metric registry: below the encoder and everything that fills it.
            &["metrics"],
            &["openmetrics", "pauses", "nic", "tap", "http", "collector"],
        ],
    },
];

/// `analysis/findings/mod.rs` → ["analysis", "findings"].
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// The code without comments, string literals and the unit tests.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    let text = text.replace("'\"'", "' '");
    text.lines()
        .map(|l| {
            // Drop string literals, then a line comment (crude, enough for paths in messages
            // and `//` inside a string).
            let chars: Vec<char> = l.chars().collect();
            let mut out = String::new();
            let mut in_str = false;
            let mut i = 0;
            while i < chars.len() {
                let c = chars[i];
                if in_str {
                    if c == '\\' {
                        i += 1;
                    } else if c == '"' {
                        in_str = false;
                    }
                } else if c == '"' {
                    in_str = true;
                } else if c == '/' && chars.get(i + 1) == Some(&'/') {
                    break;
                } else {
                    out.push(c);
                }
                i += 1;
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Paths the code names: `crate::a::b::c` and `super::x`, and the items of grouped imports
/// (`use crate::{a::b, c::{d, e}}`), each as a list of segments from the crate root.
fn used_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    // Expands a path starting at `i` (after a prefix) into out, handling `{...}` groups.
    fn expand(
        chars: &[char],
        mut i: usize,
        prefix: Vec<String>,
        out: &mut Vec<Vec<String>>,
    ) -> usize {
        let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let mut path = prefix;
        loop {
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
            if i < chars.len() && chars[i] == '{' {
                i += 1;
                loop {
                    while i < chars.len() && (chars[i].is_whitespace() || chars[i] == ',') {
                        i += 1;
                    }
                    if i >= chars.len() || chars[i] == '}' {
                        return i + 1;
                    }
                    i = expand(chars, i, path.clone(), out);
                }
            }
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            if start == i {
                out.push(path);
                return i;
            }
            path.push(chars[start..i].iter().collect());
            if i + 1 < chars.len() && chars[i] == ':' && chars[i + 1] == ':' {
                i += 2;
                continue;
            }
            out.push(path);
            return i;
        }
    }
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let prev_ident = i > 0 && is_ident(bytes[i - 1]);
        if !prev_ident && rest.starts_with("crate::") {
            i = expand(&bytes, i + 7, Vec::new(), &mut out);
        } else if !prev_ident && rest.starts_with("super::") {
            let mut base = module.to_vec();
            let mut j = i;
            while bytes[j..].iter().collect::<String>().starts_with("super::") {
                base.pop();
                j += 7;
            }
            i = expand(&bytes, j, base, &mut out);
        } else {
            i += 1;
        }
    }
    out
}

/// The longest module that is a prefix of `path`; for a path into a module the crate
/// re-exports from another (named in its layers, no file of its own), that top-level name.
fn resolve(
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
    layers: &[&[&str]],
) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
        .or_else(|| {
            let top = path.first()?;
            layers
                .iter()
                .any(|l| l.contains(&top.as_str()))
                .then(|| vec![top.clone()])
        })
}

fn layer(layers: &[&[&str]], m: &[String]) -> usize {
    layers
        .iter()
        .position(|l| l.contains(&m[0].as_str()))
        .unwrap_or_else(|| {
            panic!(
                "top-level module {} is in no layer of tests/layers.rs",
                m[0]
            )
        })
}

fn related(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

#[test]
fn each_library_crate_is_layered_without_cycles() {
    for c in CRATES {
        let found = layered(c);
        assert!(
            found > 10,
            "{}: the scan found almost no uses: {found}",
            c.src
        );
    }
    // The core builds with no build script (the kernel object is the sources' business).
    assert!(
        !integration_tests::workspace_root()
            .join("observer-core/build.rs")
            .exists(),
        "observer-core has a build script"
    );
}

/// Checks one crate; the number of uses found.
fn layered(c: &Crate) -> usize {
    let root = integration_tests::workspace_root().join(c.src);
    let src = || root.clone();
    let files: Vec<PathBuf> = integration_tests::files_under(&src())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .map(|f| module_of(&src(), f))
        .filter(|m| !m.is_empty())
        .collect();
    let mut uses: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    let mut problems = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let m = module_of(&src(), f);
        let rel = f.strip_prefix(src()).unwrap().display().to_string();
        let code = code(&text);
        for word in ["clap", "anyhow"] {
            if code.contains(word) {
                problems.push(format!("{rel} mentions {word}: the library has neither"));
            }
        }
        if m.is_empty() {
            continue;
        }
        if m[0] == "model" && code.contains("crate::") {
            problems.push(format!("{rel} names crate::: model/ stands on its own"));
        }
        for p in used_paths(&code, &m) {
            let Some(target) = resolve(&p, &modules, c.layers) else {
                continue;
            };
            if related(&m, &target) {
                continue;
            }
            if layer(c.layers, &target) > layer(c.layers, &m) {
                problems.push(format!(
                    "{rel} ({}) uses {} of a higher layer",
                    m[0],
                    target.join("::")
                ));
            }
            uses.entry(m.clone()).or_default().insert(target);
        }
    }
    // Cycles: a depth-first search over the use graph.
    fn visit(
        n: &Vec<String>,
        uses: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        stack: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(at) = stack.iter().position(|s| s == n) {
            let names: Vec<String> = stack[at..]
                .iter()
                .chain(std::iter::once(n))
                .map(|m| m.join("::"))
                .collect();
            cycles.push(names.join(" -> "));
            return;
        }
        if !done.insert(n.clone()) {
            return;
        }
        stack.push(n.clone());
        for m in uses.get(n).into_iter().flatten() {
            visit(m, uses, stack, done, cycles);
        }
        stack.pop();
    }
    let mut cycles = Vec::new();
    let mut done = BTreeSet::new();
    for m in &modules {
        visit(m, &uses, &mut Vec::new(), &mut done, &mut cycles);
    }
    for c in cycles {
        problems.push(format!("import cycle: {c}"));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    uses.values().map(BTreeSet::len).sum::<usize>()
}

/// The crates `package` links (normal dependencies, transitively, its own features alone; not
/// the compile-time macros' own): `cargo tree -p PACKAGE -e normal,no-proc-macro`, by name.
fn dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal,no-proc-macro",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "-p", package])
        .current_dir(integration_tests::workspace_root())
        .output()
        .expect("cargo tree");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != package)
        .map(str::to_string)
        .collect()
}

/// The crate graph: the core links no kernel, socket, capture or HTTP crate (a fleet collector
/// or a notebook links it); the sources do not depend on the daemon; clap is the CLI's alone
/// and anyhow no library's.
#[test]
fn the_crates_depend_only_downwards() {
    let deps: BTreeMap<&str, BTreeSet<String>> = [
        "observer-core",
        "roce-observer",
        "observer-daemon",
        "observer-common",
        "observer-otlp",
    ]
    .into_iter()
    .map(|p| (p, dependencies(p)))
    .collect();
    let has = |krate: &str, dep: &str| {
        deps[krate]
            .iter()
            .any(|d| d == dep || d.starts_with(&format!("{dep}-")))
    };
    let mut problems = Vec::new();
    for forbidden in [
        "aya",
        "tokio",
        "pcap",
        "pcap-file",
        "axum",
        "hyper",
        "nix",
        "netlink",
        "libc",
        "observer-daemon",
        "roce-observer",
    ] {
        if has("observer-core", forbidden) {
            problems.push(format!("observer-core depends on {forbidden}"));
        }
    }
    if has("roce-observer", "observer-daemon") {
        problems.push("roce-observer depends on observer-daemon".into());
    }
    // The OTLP exporter stands on the core alone: a collector sends records without eBPF.
    for forbidden in ["roce-observer", "observer-daemon", "aya", "pcap", "nix"] {
        if has("observer-otlp", forbidden) {
            problems.push(format!("observer-otlp depends on {forbidden}"));
        }
    }
    for lib in [
        "observer-core",
        "roce-observer",
        "observer-daemon",
        "observer-common",
        "observer-otlp",
    ] {
        for word in ["clap", "anyhow"] {
            if has(lib, word) {
                problems.push(format!("{lib} depends on {word}"));
            }
        }
    }
    assert!(
        has("observer-core", "observer-common"),
        "{:?}",
        deps["observer-core"]
    );
    assert!(has("roce-observer", "observer-core"));
    assert!(has("observer-daemon", "roce-observer"));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_scan_sees_grouped_imports_and_super() {
    let m = vec!["analysis".to_string(), "series".to_string()];
    let code =
        "use crate::{aggregate::FlowMap, model::{Direction, series::X}};\nuse super::findings::Y;";
    let got = used_paths(code, &m);
    let want: Vec<Vec<String>> = [
        &["aggregate", "FlowMap"][..],
        &["model", "Direction"],
        &["model", "series", "X"],
        &["analysis", "findings", "Y"],
    ]
    .iter()
    .map(|p| p.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(got, want);
}

/// Names only code that needs root uses: the root check, network namespaces (a lab is one), and
/// BPF programs and maps (aya, the object loader, a map made by hand).
const PRIVILEGED: &[&str] = &[
    "require_root",
    "Netns",
    "Lab",
    "aya",
    "load_program",
    "xdp_mut",
    "load_object",
    "sys_bpf",
    "BPF_MAP_CREATE",
];

/// The names of [`PRIVILEGED`] that `code` uses, as whole identifiers.
fn privileged_names(code: &str) -> BTreeSet<&'static str> {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter_map(|w| PRIVILEGED.iter().find(|p| **p == w).copied())
        .collect()
}

/// The top-level test files of `tests/` are pure: whatever needs root (or a namespace, or BPF)
/// is in `tests/privileged/`, where every file calls the root check.
#[test]
fn top_level_test_files_need_no_root() {
    let tests = integration_tests::workspace_root().join("tests");
    let rs = |dir: &Path| -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "rs"))
            .collect();
        files.sort();
        files
    };
    let name = |f: &Path| f.strip_prefix(&tests).unwrap().display().to_string();
    let top = rs(&tests);
    assert!(top.len() > 10, "almost no test files: {top:?}");
    let mut problems = Vec::new();
    for f in &top {
        let found = privileged_names(&code(&std::fs::read_to_string(f).unwrap()));
        if !found.is_empty() {
            problems.push(format!(
                "tests/{} uses {found:?}: tests that need root belong in tests/privileged/",
                name(f)
            ));
        }
    }
    // The scan sees privileged code where it is.
    let privileged = rs(&tests.join("privileged"));
    assert!(!privileged.is_empty());
    for f in &privileged {
        let found = privileged_names(&code(&std::fs::read_to_string(f).unwrap()));
        assert!(
            found.contains("require_root"),
            "tests/{} never calls require_root: {found:?}",
            name(f)
        );
    }
    // Every test target is one of the two kinds: a top-level file or one in privileged/.
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(tests.join("Cargo.toml")).unwrap()).unwrap();
    let targets = manifest["test"].as_array().expect("[[test]] targets");
    for t in targets {
        let path = t["path"].as_str().expect("a [[test]] path");
        let kind = Path::new(path).parent().and_then(|p| p.to_str());
        if !matches!(kind, Some("" | "privileged")) {
            problems.push(format!(
                "tests/Cargo.toml: test {path} is neither top-level nor in privileged/"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_code_scan_drops_strings_before_comments() {
    let scanned =
        code("let u = \"http://x\"; require_root(\"t\"); // Netns\nlet s = \"a\\\"b\"; aya();");
    assert_eq!(
        privileged_names(&scanned),
        BTreeSet::from(["require_root", "aya"])
    );
}
