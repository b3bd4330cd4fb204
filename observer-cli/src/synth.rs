//! `roce-observer synth`: a synthetic scenario written as a pcap file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use clap::Args;
use roce_observer::source::{nic::host::write_tree, synth};

use crate::output;

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Scenario name (see --list).
    #[arg(long, required_unless_present = "list")]
    pub scenario: Option<String>,
    /// Output pcap file (`-` for standard output).
    #[arg(short, long, value_name = "FILE", required_unless_present = "list")]
    pub output: Option<PathBuf>,
    /// List the scenarios.
    #[arg(long)]
    pub list: bool,
}

/// The scenarios, a line each.
pub fn list_scenarios() -> Result<()> {
    output::stdout(|out| {
        for (name, what) in synth::SCENARIOS {
            writeln!(out, "{name:<12} {what}")?;
        }
        Ok(())
    })
}

/// The scenario called `name`, or an error listing the known ones.
pub fn scenario(name: &str) -> Result<synth::Workload> {
    synth::scenario(name).ok_or_else(|| {
        let names: Vec<&str> = synth::SCENARIOS.iter().map(|(n, _)| *n).collect();
        anyhow!("unknown scenario '{name}' (known: {})", names.join(", "))
    })
}

/// Where a scenario's NIC readings go: `FILE.nic/` beside the capture `FILE`.
pub fn nic_dir(pcap: &Path) -> PathBuf {
    let mut name = pcap.as_os_str().to_owned();
    name.push(".nic");
    PathBuf::from(name)
}

pub fn synth(a: SynthArgs) -> Result<()> {
    let (Some(name), Some(out)) = (a.scenario, a.output) else {
        return list_scenarios();
    };
    let w = scenario(&name)?;
    if out.as_os_str() == "-" {
        if w.nic.is_some() {
            eprintln!(
                "roce-observer: scenario '{name}' has NIC readings too: they are written beside an output file, not with -"
            );
        }
        return synth::write_pcap(std::io::stdout().lock(), &w.frames).map_err(output::closed_pipe);
    }
    let f =
        std::fs::File::create(&out).with_context(|| format!("cannot create {}", out.display()))?;
    synth::write_pcap(std::io::BufWriter::new(f), &w.frames)
        .map_err(output::closed_pipe)
        .with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!(
        "roce-observer: wrote {} frames of scenario '{name}' to {}",
        w.frames.len(),
        out.display()
    );
    if let Some(nic) = &w.nic {
        // The host's two NIC readings, as copied trees beside the capture.
        let dir = nic_dir(&out);
        for (sub, s) in [("before", &nic.before), ("after", &nic.after)] {
            let d = dir.join(sub);
            if d.exists() {
                std::fs::remove_dir_all(&d)
                    .with_context(|| format!("cannot replace {}", d.display()))?;
            }
            write_tree(&d, s).with_context(|| format!("cannot write {}", d.display()))?;
        }
        eprintln!(
            "roce-observer: wrote its NIC readings to {0}/before and {0}/after (replay --nic-root {0}/before --nic-root {0}/after)",
            dir.display()
        );
    }
    Ok(())
}
