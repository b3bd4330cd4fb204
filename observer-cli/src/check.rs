//! `roce-observer check`: the host's RoCE configuration checklist, one line per item with its
//! evidence; exit status 1 when an item fails (for a fleet's CI).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use roce_observer::{
    analysis::checklist::{Expect, Intent, checklist},
    render,
    source::nic::host::{Host, Selection, snapshot},
    source::nic::window::window,
    units::parse_duration,
};

use crate::output;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// RoCE netdev to check (repeat for several); the netdevs behind the RDMA devices are
    /// checked too. With neither option: every RDMA device and its netdevs.
    #[arg(long = "iface", short = 'i', value_name = "IF")]
    pub ifaces: Vec<String>,
    /// RDMA device to check (repeat for several), e.g. mlx5_0.
    #[arg(long = "rdma-dev", value_name = "DEV")]
    pub rdma_devs: Vec<String>,
    /// Print the roce-observer/check/v1 JSON instead of the lines.
    #[arg(long)]
    pub json: bool,
    /// How long to watch the counters (pause storms, discards, transport errors) between the
    /// two readings.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// The priority RoCE data is meant to use [default: 3]
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..8))]
    pub roce_priority: Option<u8>,
    /// The DSCP RoCE data is sent with [default: 26]
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..64))]
    pub roce_dscp: Option<u8>,
    /// The priority CNPs are meant to use [default: 6]
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..8))]
    pub cnp_priority: Option<u8>,
    /// The DSCP CNPs are sent with [default: 48]
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..64))]
    pub cnp_dscp: Option<u8>,
    /// RoCE runs lossy (ECN only, no PFC).
    #[arg(long)]
    pub lossy: bool,
    /// What the ports classify by: dscp (the APP table) or pcp (the VLAN tag) [default: dscp]
    #[arg(long, value_enum)]
    pub trust: Option<TrustArg>,
    /// The IP ToS rdma_cm connections are made with (default_roce_tos, e.g. 106: DSCP 26 and
    /// ECT(0)); without it, its DSCP must be the RoCE DSCP.
    #[arg(long, value_name = "TOS")]
    pub tos: Option<u8>,
    /// The fleet's definition of "approved": a TOML file with any of these flags' values
    /// (roce_priority, roce_dscp, cnp_priority, cnp_dscp, lossy, trust, mtu, firmware, tos) and
    /// the DCQCN parameters ([roce_np], [roce_rp]: file = value); the flags given override it.
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
    /// The MTU every RoCE netdev of the fleet has.
    #[arg(long)]
    pub mtu: Option<u32>,
    /// The firmware version every RoCE device of the fleet runs.
    #[arg(long, value_name = "VERSION")]
    pub firmware: Option<String>,
    /// Read a copied tree instead of this host (sysfs under DIR/sys, and the tools' outputs:
    /// see docs/nic.md), a directory or a tar.gz `snapshot` wrote. Give it twice for two
    /// copies taken --interval apart (a snapshot of two readings holds both).
    #[arg(long, value_name = "DIR")]
    pub root: Vec<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TrustArg {
    Dscp,
    Pcp,
}

pub fn check(a: CheckArgs) -> Result<()> {
    let sel = Selection {
        interfaces: a.ifaces.clone(),
        rdma_devices: a.rdma_devs.clone(),
        no_qps: false,
        no_modules: false,
        gpus: true,
    };
    // Trees (directories or tar.gz, one reading or before/ and after/), open while read.
    let (_opened, roots) = output::open_trees("--root", &a.root)?;
    let nic = match roots.as_slice() {
        [] => {
            let before = snapshot(&Host::Live, &sel)?;
            std::thread::sleep(a.interval);
            let after = snapshot(&Host::Live, &sel)?;
            window(&before, &after)
        }
        [one] => {
            let s = snapshot(&Host::Root(one.clone()), &sel)?;
            window(&s, &s)
        }
        [before, after] => {
            let b = snapshot(&Host::Root(before.clone()), &sel)?;
            let a2 = snapshot(&Host::Root(after.clone()), &sel)?;
            let mut nic = window(&b, &a2);
            if nic.seconds <= 0.0 {
                // Copies without their time: --interval says how far apart.
                nic.seconds = a.interval.as_secs_f64();
            }
            nic
        }
        _ => bail!(output::UsageError(
            "--root: give one copied tree (or a snapshot of two readings), or two taken --interval apart".into()
        )),
    };
    let mut intent = Intent::default();
    if let Some(path) = &a.expect {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --expect {}", path.display()))?;
        Expect::parse(&text)
            .map_err(|e| anyhow::anyhow!("--expect {}: {e}", path.display()))?
            .apply(&mut intent);
    }
    // The flags given over the file.
    intent.roce_priority = a.roce_priority.unwrap_or(intent.roce_priority);
    intent.roce_dscp = a.roce_dscp.unwrap_or(intent.roce_dscp);
    intent.cnp_priority = a.cnp_priority.unwrap_or(intent.cnp_priority);
    intent.cnp_dscp = a.cnp_dscp.unwrap_or(intent.cnp_dscp);
    intent.lossy |= a.lossy;
    if let Some(t) = a.trust {
        intent.trust_pcp = t == TrustArg::Pcp;
    }
    intent.mtu = a.mtu.or(intent.mtu);
    intent.firmware = a.firmware.clone().or(intent.firmware);
    intent.tos = a.tos.or(intent.tos);
    let c = checklist(nic, &intent);
    if a.json {
        output::stdout(|out| render::nic::write_checklist_json(&c, out))?;
    } else {
        let text = render::nic::render_checklist(&c);
        output::stdout(|out| out.write_all(text.as_bytes()))?;
    }
    if c.failed() {
        return Err(output::Failed.into());
    }
    Ok(())
}
