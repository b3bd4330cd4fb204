//! Where things are: the workspace root, and every file under a folder.

use std::path::{Path, PathBuf};

/// The workspace's root folder (tests/ is one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is one level below the workspace")
        .to_path_buf()
}

/// Every file under `dir`, at any depth, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// A file (or, with `markers`, the part of it between a begin and an end marker) generated from
/// the code: it must read `generated`; with `UPDATE_DOCS` set it is written so. `from` names
/// what generates it and `test` the test target that writes it.
pub fn generated_file(
    rel: &str,
    markers: Option<(&str, &str)>,
    generated: &str,
    from: &str,
    test: &str,
) {
    let path = workspace_root().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let want = match markers {
        None => generated.to_string(),
        Some((begin, end)) => {
            let a = text.find(begin).expect("the begin marker") + begin.len();
            let b = text.find(end).expect("the end marker");
            format!("{}{generated}{}", &text[..a], &text[b..])
        }
    };
    if std::env::var_os("UPDATE_DOCS").is_some() {
        if text != want {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &want).unwrap();
        }
    } else {
        assert_eq!(
            text, want,
            "{rel} does not match {from}: UPDATE_DOCS=1 cargo xtask test -- --test {test} writes it"
        );
    }
}
