//! `roce-observer snapshot`: the host's NIC side written as the copied tree `check --root` and
//! `replay --nic-root` read, to a directory or a tar.gz, for later, a ticket or a colleague.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;
use roce_observer::{
    source::nic::host::{self, Host, Selection, snapshot},
    source::nic::tree,
    units::parse_duration,
};

use crate::output;

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    /// Where to write: a new directory, or a file named .tar.gz / .tgz. Never overwritten.
    #[arg(value_name = "OUT")]
    pub out: PathBuf,
    /// RoCE netdev to record (repeat for several); the netdevs behind the RDMA devices are
    /// recorded too. With neither option: every RDMA device and its netdevs.
    #[arg(long = "iface", short = 'i', value_name = "IF")]
    pub ifaces: Vec<String>,
    /// RDMA device to record (repeat for several), e.g. mlx5_0.
    #[arg(long = "rdma-dev", value_name = "DEV")]
    pub rdma_devs: Vec<String>,
    /// Take two readings this far apart (OUT/before and OUT/after), as `check` does.
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// Read a copied tree instead of this host (a directory or a tar.gz; give it twice for two
    /// readings): to re-pack or select from a tree.
    #[arg(long, value_name = "TREE", conflicts_with = "interval")]
    pub root: Vec<PathBuf>,
}

pub fn snapshot_cmd(a: SnapshotArgs) -> Result<()> {
    for r in &a.root {
        if roce_observer::units::same_file(&a.out, r) || a.out.starts_with(r) {
            bail!(output::UsageError(format!(
                "{} is an input of this run (--root {}): refusing to write there",
                a.out.display(),
                r.display()
            )));
        }
    }
    let sel = Selection {
        interfaces: a.ifaces.clone(),
        rdma_devices: a.rdma_devs.clone(),
        no_qps: false,
        no_modules: false,
        gpus: true,
    };
    let mut opened = Vec::new();
    for r in &a.root {
        opened.push(tree::open(r)?);
    }
    let roots: Vec<PathBuf> = opened.iter().flat_map(|o| o.readings.clone()).collect();
    let readings = match (roots.as_slice(), a.interval) {
        ([], None) => vec![snapshot(&Host::Live, &sel)?],
        ([], Some(d)) => {
            let before = snapshot(&Host::Live, &sel)?;
            std::thread::sleep(d);
            vec![before, snapshot(&Host::Live, &sel)?]
        }
        (roots @ ([_] | [_, _]), _) => roots
            .iter()
            .map(|r| snapshot(&Host::Root(r.clone()), &sel))
            .collect::<Result<Vec<_>, _>>()?,
        _ => bail!(output::UsageError(
            "--root: give one tree, or two readings (before and after)".into()
        )),
    };
    tree::save(&a.out, &readings)?;
    let absent: usize = readings.iter().map(|s| host::absences(s).len()).sum();
    let s = readings.last().expect("one reading at least");
    eprintln!(
        "roce-observer: wrote {} ({} reading{}: {} RDMA device{}, {} netdev{}; {absent} source{} absent, each with its reason in absent.json)",
        a.out.display(),
        readings.len(),
        if readings.len() == 1 { "" } else { "s" },
        s.devices().len(),
        if s.devices().len() == 1 { "" } else { "s" },
        s.interfaces.len(),
        if s.interfaces.len() == 1 { "" } else { "s" },
        if absent == 1 { "" } else { "s" },
    );
    Ok(())
}
