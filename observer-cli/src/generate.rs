//! `roce-observer generate`: a synthetic scenario sent as raw Ethernet frames on an interface.

use anyhow::Result;
use clap::Args;
use roce_observer::source::synth;

use crate::synth::{list_scenarios, scenario};

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// Interface to send on.
    #[arg(
        long = "iface",
        short = 'i',
        value_name = "IF",
        required_unless_present = "list"
    )]
    pub iface: Option<String>,
    /// Scenario name (see --list).
    #[arg(long, default_value = "demo")]
    pub scenario: String,
    /// List the scenarios.
    #[arg(long)]
    pub list: bool,
}

pub fn generate(a: GenerateArgs) -> Result<()> {
    let Some(iface) = a.iface.filter(|_| !a.list) else {
        return list_scenarios();
    };
    let w = scenario(&a.scenario)?;
    let sent = synth::send(&iface, &w.frames)?;
    eprintln!(
        "roce-observer: sent {sent} frames of scenario '{}' on {iface}",
        a.scenario
    );
    Ok(())
}
