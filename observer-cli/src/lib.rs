//! The `roce-observer` command line: clap arguments, one module per subcommand, each turning its
//! flags into the library's options and printing what the library returns. `main.rs` is one line
//! calling [`main`]; errors become one line on stderr and a non-zero exit, never a panic.

mod analysis_args;
mod check;
mod demo;
mod diagnose;
mod ecmp;
mod fabric;
mod generate;
mod otlp_args;
mod output;
mod replay;
mod run;
mod snapshot;
mod synth;
mod topology;
mod trace;
mod value_enums;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use diagnose::ATTACHED;

#[derive(Parser, Debug)]
#[command(
    name = "roce-observer",
    version,
    about = "Observe RoCEv2 traffic per queue pair with eBPF/XDP: throughput, ECN/CE marks, CNPs, ACK/NAK/RNR, PSN gaps and retransmissions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Attach to interfaces for a while and report the top queue pairs.
    Diagnose(diagnose::DiagnoseArgs),
    /// Send a synthetic RoCEv2 scenario as raw Ethernet frames on an interface.
    Generate(generate::GenerateArgs),
    /// Analyse capture files (pcap or pcapng; `-` reads standard input) without privileges.
    Replay(replay::ReplayArgs),
    /// Write a synthetic scenario as a pcap file.
    Synth(synth::SynthArgs),
    /// Run the built-in lab: a network namespace with a veth pair, synthetic RoCEv2 traffic
    /// (one congested QP, one lossy QP), observed live.
    Demo(demo::DemoArgs),
    /// Model how a switch's ECMP hash spreads the observed flows (live or from captures) over
    /// its uplinks, against an ideal random hash; pair connections and check source ports.
    Ecmp(ecmp::EcmpArgs),
    /// Which link, switch or host explains the loss and CE marks many hosts' JSON reports
    /// show, over a topology file.
    Fabric(fabric::FabricArgs),
    /// Paris traceroute for RoCE: the path of each QP direction given (its addresses, UDP
    /// source port and DSCP), router by router, from ICMP time-exceeded.
    Trace(trace::TraceArgs),
    /// A topology file for `fabric`: the hosts' links to their switches from each host's
    /// LLDP neighbours (`lldpctl -f json`), merged into a file that has the rest.
    Topology(topology::TopologyArgs),
    /// Run continuously as a sidecar: export per-interface and per-QP counters as OpenMetrics
    /// on /metrics (loopback by default), /healthz, optionally JSON lines; re-attach to
    /// interfaces that come back; SIGHUP reloads --config, SIGTERM/SIGINT detach and exit.
    Run(run::RunArgs),
    /// Check the host's RoCE configuration (PFC, DSCP trust, DCQCN, CNP marking, MTU,
    /// firmware) and the NIC counters that show trouble now; exit status 1 when an item fails.
    Check(check::CheckArgs),
    /// Write the host's NIC side (sysfs subset, the tools' outputs, the netlink readings) as
    /// the tree `check --root` and `replay --nic-root` read: a directory or a tar.gz.
    Snapshot(snapshot::SnapshotArgs),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Diagnose(a) => diagnose::diagnose(a),
        Command::Generate(a) => generate::generate(a),
        Command::Replay(a) => replay::replay(a),
        Command::Synth(a) => synth::synth(a),
        Command::Demo(a) => demo::demo(a),
        Command::Ecmp(a) => ecmp::ecmp(a),
        Command::Fabric(a) => fabric::fabric(a),
        Command::Trace(a) => trace::trace(a),
        Command::Topology(a) => topology::topology(a),
        Command::Run(a) => run::run(a),
        Command::Check(a) => check::check(a),
        Command::Snapshot(a) => snapshot::snapshot_cmd(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of standard output went away (`roce-observer replay ... | head`): nothing
        // is wrong, and nothing more can be said.
        Err(e) if output::is_closed_stdout(&e) => ExitCode::SUCCESS,
        // Already said on standard output (a failed check).
        Err(e) if e.is::<output::Failed>() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("roce-observer: error: {e:#}");
            match e.downcast_ref::<output::UsageError>() {
                Some(_) => ExitCode::from(2),
                None => ExitCode::FAILURE,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// Every flag and argument of every command says what it is in `-h`.
    #[test]
    fn every_argument_has_help() {
        use clap::CommandFactory;
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "roce-observer", &mut missing);
        assert!(missing.is_empty(), "without help: {missing:?}");
    }
}
