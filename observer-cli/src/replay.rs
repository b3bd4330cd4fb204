//! `roce-observer replay`: capture files through the same parser, aggregation and analysis.

use std::{path::PathBuf, time::Duration};

use anyhow::{Result, bail};
use clap::Args;
use roce_observer::{
    analysis::series::{DEFAULT_SLOT_NS, shortest_interval},
    pipeline::{NicPlan, default_replay_threads, replay_report},
    source::nic::host::{Host, Selection},
    units::parse_link_speed,
};

use crate::{analysis_args::AnalysisArgs, output};

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Capture files (pcap or pcapng; Ethernet, Linux cooked SLL/SLL2, raw IP), `-` for stdin.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<String>,
    /// Rows in the table.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Print the roce-observer/report/v1 JSON (every flow) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// No progress line on stderr (it is only shown for large files on a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// Speed of the links (100G, 25G, 400G, 10000M): turns pause quanta into time, and
    /// microburst slots into shares of the link.
    #[arg(long, value_parser = parse_link_speed, value_name = "SPEED")]
    pub link_speed: Option<u64>,
    /// Threads accounting the frames of one capture, beside the one reading it: 1 reads and
    /// accounts on one thread (several files are merged on one thread). The default: the
    /// available CPUs, at most 8. The report is the same whatever the number.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: Option<u32>,
    /// The NIC side of the observed host, from copied trees (docs/nic.md): one taken before
    /// the capture and one after (give it twice), for the report's `nic` section.
    #[arg(long, value_name = "DIR")]
    pub nic_root: Vec<PathBuf>,
    /// An address of the host the capture was taken on (repeat for several): its own requests'
    /// round trips are `requests_out` latency, its answers to others `requests_in`. Without
    /// it the host is the one address every flow has at one end, when there is one.
    #[arg(long = "local-ip", value_name = "IP")]
    pub local_ips: Vec<std::net::IpAddr>,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

pub fn replay(a: ReplayArgs) -> Result<()> {
    // An interval shorter than a microburst slot could not hold its busiest slot.
    let slot = a.analysis.burst_slot.unwrap_or(DEFAULT_SLOT_NS);
    a.analysis
        .validate(Duration::from_nanos(shortest_interval(slot)), "replay")?;
    // Standard input is a file too when redirected from one (`- < cap.pcap`).
    let inputs: Vec<PathBuf> = a
        .files
        .iter()
        .map(|f| PathBuf::from(if f == "-" { "/dev/stdin" } else { f.as_str() }))
        .chain(a.analysis.inputs())
        .collect();
    a.analysis.files().check(&inputs)?;
    output::refuse_twice(&a.files)?;
    let mut options = a.analysis.options()?;
    options.local_hosts = a.local_ips.clone();
    // Trees: directories or tar.gz, two of them or one snapshot of two readings, open until
    // the report is made.
    let (_opened, roots) = output::open_trees("--nic-root", &a.nic_root)?;
    options.nic = match roots.as_slice() {
        [] => None,
        [before, after] => {
            let plan = NicPlan::start(Host::Root(before.clone()), Selection::default())?;
            Some(NicPlan {
                host: Host::Root(after.clone()),
                ..plan
            })
        }
        _ => bail!(output::UsageError(
            "--nic-root: give two copied trees, taken before and after the capture (or one snapshot of two readings)".into()
        )),
    };
    let threads = a
        .threads
        .map_or_else(default_replay_threads, |n| n as usize);
    let report = replay_report(
        &a.files,
        !a.no_progress,
        a.link_speed,
        Some(&options),
        threads,
    )?;
    output::finish(
        &report,
        a.analysis.files(),
        a.json,
        a.top,
        a.analysis.color(),
    )
}
