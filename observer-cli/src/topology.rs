//! `roce-observer topology`: a topology file for `fabric`, its host–switch links from each
//! host's LLDP neighbours (`lldpctl -f json`), merged into a file that has the rest
//! (docs/fabric.md#the-topology-file).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use roce_observer::analysis::fabric::{Topology, TopologyFile, lldp};

use crate::output::{self, UsageError};

#[derive(Args, Debug)]
pub struct TopologyArgs {
    /// A host's `lldpctl -f json` output, as HOST=FILE (or FILE, the host named by the file's
    /// name without its extension); repeat for every host.
    #[arg(long = "lldp", value_name = "HOST=FILE", required = true)]
    pub lldp: Vec<String>,
    /// The topology file to merge into (its switches' links, its hosts' addresses); without
    /// it, a file of the hosts and their switches alone.
    #[arg(long, value_name = "FILE")]
    pub base: Option<PathBuf>,
}

pub fn topology(a: TopologyArgs) -> Result<()> {
    let base = match &a.base {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the topology file {}", path.display()))?;
            Topology::read_file(&text, &path.display().to_string())?
        }
        None => TopologyFile::new(),
    };
    let mut hosts: Vec<(String, Vec<lldp::Neighbour>)> = Vec::new();
    for arg in &a.lldp {
        let (host, file) = match arg.split_once('=') {
            Some((h, f)) => (h.to_string(), f.to_string()),
            None => {
                let stem = std::path::Path::new(arg)
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default()
                    .to_string();
                (stem, arg.clone())
            }
        };
        if host.is_empty() || host.contains(':') {
            return Err(UsageError(format!(
                "--lldp {arg}: {host:?} is not a host name (HOST=FILE names it)"
            ))
            .into());
        }
        if hosts.iter().any(|(h, _)| *h == host) {
            return Err(UsageError(format!("--lldp: host {host} is given twice")).into());
        }
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read the LLDP neighbours {file}"))?;
        hosts.push((host, lldp::neighbours(&text, &file)?));
    }
    let merged = lldp::merge(base, &hosts).map_err(|problem| {
        anyhow::anyhow!(
            "the merged topology{}: {problem}",
            a.base
                .as_ref()
                .map_or(String::new(), |b| format!(" (into {})", b.display()))
        )
    })?;
    for (host, n) in &hosts {
        if n.is_empty() {
            eprintln!("roce-observer: warning: {host} has no LLDP neighbour");
        }
    }
    let without: Vec<&str> = merged
        .nodes
        .iter()
        .filter(|n| n.role == roce_observer::analysis::fabric::Role::Host && n.addresses.is_empty())
        .map(|n| n.name.as_str())
        .collect();
    if !without.is_empty() {
        eprintln!(
            "roce-observer: warning: hosts without addresses (their QPs cannot be placed until \
             they have them): {}",
            without.join(", ")
        );
    }
    let text = merged.to_toml().map_err(anyhow::Error::msg)?;
    output::stdout(|out| write!(out, "{text}"))
}
