//! Golden outputs: every synth scenario and every capture in `../shared/captures` replayed (JSON
//! and table), the ECMP analysis and the HTML report, compared byte for byte with the files in
//! `tests/golden/`. The JSON report may only grow (fields added, never renamed), so a change to
//! any of these files is a change of behaviour to justify in review.
//!
//! `UPDATE_GOLDEN=1 cargo xtask test --test golden` rewrites the files from the current binary.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use integration_tests::{Scratch, files_under, output, shared_capture_files, workspace_root};

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// Where a case's capture files are: synth scenarios written into a scratch folder, or the
/// shared captures beside the checkout.
#[derive(Clone, Copy)]
enum Base {
    Synth,
    Shared,
}

struct Case {
    name: String,
    base: Base,
    args: Vec<String>,
    /// File the output is compared with, under tests/golden/.
    file: String,
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// Extra replay flags some rule scenarios are meant to be replayed with (see `synth --list`).
fn scenario_flags(name: &str) -> &'static str {
    match name {
        "rules-clean" => "--link-speed 10G --uplinks 4",
        "rule-microburst" => "--link-speed 10G",
        "rule-ecmp-imbalance" => "--uplinks 4",
        "pfc" | "e2e" => "--link-speed 100G",
        _ => "",
    }
}

fn cases(scenarios: &[String], shared: &[String]) -> Vec<Case> {
    let mut v = Vec::new();
    for s in scenarios {
        let flags = scenario_flags(s);
        v.push(Case {
            name: format!("replay {s} json"),
            base: Base::Synth,
            args: args(&format!("replay {s}.pcap --json {flags}")),
            file: format!("synth/{s}.json"),
        });
        v.push(Case {
            name: format!("replay {s} table"),
            base: Base::Synth,
            args: args(&format!("replay {s}.pcap --no-color --top 50 {flags}")),
            file: format!("synth/{s}.txt"),
        });
    }
    for (scenario, extra) in [
        ("rule-ecmp-imbalance", "--uplinks 4"),
        ("many-qps", "--uplinks 8 --hash crc32c --fields 5tuple+qp"),
        ("clean", "--uplinks 4 --tiers 2 --uplinks2 4 --seed 7"),
        ("incast", "--uplinks 16 --hash toeplitz --bucket upper-bits"),
    ] {
        for (kind, json) in [("json", " --json"), ("txt", "")] {
            if scenario == "many-qps" && kind == "json" {
                // 1000 flows: the replay case already holds them.
                continue;
            }
            v.push(Case {
                name: format!("ecmp {scenario} {kind}"),
                base: Base::Synth,
                args: args(&format!("ecmp --pcap {scenario}.pcap {extra}{json}")),
                file: format!("ecmp/{scenario}.{kind}"),
            });
        }
    }
    v.push(Case {
        name: "html rules-clean".into(),
        base: Base::Synth,
        args: args(
            "replay rules-clean.pcap --link-speed 10G --uplinks 4 --html /dev/stdout --json",
        ),
        file: "html/rules-clean.html-and-json".into(),
    });
    for f in shared {
        let stem = f
            .trim_start_matches("../shared/captures/")
            .replace('/', "_");
        v.push(Case {
            name: format!("replay {f} json"),
            base: Base::Shared,
            args: args(&format!("replay {f} --json --no-progress")),
            file: format!("captures/{stem}.json"),
        });
        v.push(Case {
            name: format!("replay {f} table"),
            base: Base::Shared,
            args: args(&format!("replay {f} --no-progress --no-color --top 50")),
            file: format!("captures/{stem}.txt"),
        });
    }
    let real: Vec<&String> = shared.iter().filter(|f| f.contains("/real/")).collect();
    if !real.is_empty() {
        let all = real
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        v.push(Case {
            name: "replay real together json".into(),
            base: Base::Shared,
            args: args(&format!("replay {all} --json --no-progress")),
            file: "captures/real-together.json".into(),
        });
        v.push(Case {
            name: "ecmp real together".into(),
            base: Base::Shared,
            args: args(&format!("ecmp --uplinks 4 --pcap {all}")),
            file: "captures/real-together-ecmp.txt".into(),
        });
    }
    v
}

/// What a run printed: stdout, then stderr and the exit code when either is not the plain
/// success (a refused file is part of the behaviour too).
fn observed(dir: &Path, case: &Case) -> String {
    let (status, out, err) = output(Command::new(CLI).current_dir(dir).args(&case.args));
    let mut s = out;
    if !status.success() || !err.is_empty() {
        s.push_str(&format!(
            "--- stderr ---\n{err}--- exit {} ---\n",
            status.code().unwrap_or(-1)
        ));
    }
    s
}

#[test]
fn outputs_equal_the_golden_files() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let scratch = Scratch::new("golden");
    let (status, list, err) = output(Command::new(CLI).args(["synth", "--list"]));
    assert!(status.success(), "{err}");
    let scenarios: Vec<String> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(scenarios.len() >= 20, "{list}");
    for s in &scenarios {
        let (status, _, err) = output(Command::new(CLI).current_dir(scratch.path("")).args([
            "synth",
            "--scenario",
            s,
            "-o",
            &format!("{s}.pcap"),
        ]));
        assert!(status.success(), "synth {s}: {err}");
    }
    let root = workspace_root();
    let mut shared = Vec::new();
    // The shared folders missing (a clone without ../shared, outside CI: skipped loudly).
    let mut missing = Vec::new();
    for sub in ["real", "erspan", "negative"] {
        let Some(files) = shared_capture_files("golden", sub) else {
            missing.push(sub);
            continue;
        };
        let mut names: Vec<String> = files
            .iter()
            .map(|p| {
                format!(
                    "../shared/captures/{sub}/{}",
                    p.file_name().unwrap().to_string_lossy()
                )
            })
            .collect();
        names.sort();
        shared.extend(names);
    }
    let mut differing = Vec::new();
    let cases = cases(&scenarios, &shared);
    for case in &cases {
        let dir = match case.base {
            Base::Synth => scratch.path(""),
            Base::Shared => root.clone(),
        };
        let got = observed(&dir, case);
        let path = golden_dir().join(&case.file);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
        if got != want {
            let line = got
                .lines()
                .zip(want.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(got.lines().count().min(want.lines().count()));
            differing.push(format!(
                "{} ({}): first difference at line {}:\n  got:  {}\n  want: {}",
                case.name,
                case.file,
                line + 1,
                got.lines().nth(line).unwrap_or("<end>"),
                want.lines().nth(line).unwrap_or("<end>")
            ));
        }
    }
    if !update {
        // Every file under tests/golden/ belongs to a case: a scenario or capture that went
        // away must take its golden file with it, not leave it unchecked.
        let files = files_under(&golden_dir());
        let cased: std::collections::BTreeSet<PathBuf> =
            cases.iter().map(|c| golden_dir().join(&c.file)).collect();
        // The golden files of a missing shared folder's captures stay, unchecked this run.
        let of_missing = |f: &PathBuf| {
            let name = f.file_name().unwrap().to_string_lossy().to_string();
            f.parent() == Some(golden_dir().join("captures").as_path())
                && missing.iter().any(|sub| {
                    name.starts_with(&format!("{sub}_")) || name.starts_with(&format!("{sub}-"))
                })
        };
        let orphans: Vec<String> = files
            .iter()
            .filter(|f| !cased.contains(*f) && !of_missing(f))
            .map(|f| f.display().to_string())
            .collect();
        assert!(orphans.is_empty(), "golden files of no case: {orphans:?}");
    }
    assert!(
        differing.is_empty(),
        "{} of {} outputs differ from tests/golden/:\n{}",
        differing.len(),
        cases.len(),
        differing.join("\n")
    );
}
