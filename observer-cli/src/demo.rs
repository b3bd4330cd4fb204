//! `roce-observer demo`: the built-in lab. A network namespace with a veth pair, this binary's
//! `diagnose` attached to one end, the demo scenario sent on the other, the report printed.

use std::{
    io::{BufRead, BufReader, Read},
    path::PathBuf,
    process::Stdio,
    time::Duration,
};

use anyhow::{Context, Result, bail};
use clap::Args;
use roce_observer::{
    lab::{self, Lab},
    source::{live, synth},
    units::parse_duration,
};

use crate::{diagnose::ATTACHED, synth::scenario};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// How long the observer watches the lab.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Print the JSON report instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn demo(a: DemoArgs) -> Result<()> {
    live::check_privileges().context("the demo creates a network namespace and attaches XDP")?;
    let workload = scenario("demo")?;
    let lab = Lab::create("roce-demo")?;
    eprintln!(
        "demo: lab namespace {} with veth pair {} <-> {}; observer on {}",
        lab.ns.name(),
        lab.tx,
        lab.rx,
        lab.rx
    );
    let exe: PathBuf = std::env::current_exe().context("cannot find this executable")?;
    let mut observer = KillOnDrop(
        lab.ns
            .command(&exe)
            .args(["diagnose", "--iface", &lab.rx, "--top", "10"])
            .arg("--duration")
            .arg(format!("{}ms", a.duration.as_millis()))
            .args(a.json.then_some("--json"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start the observer in the lab")?,
    );
    let mut stderr = BufReader::new(observer.0.stderr.take().expect("piped"));
    let mut line = String::new();
    loop {
        line.clear();
        if stderr.read_line(&mut line)? == 0 {
            let status = observer.0.wait()?;
            bail!("the observer exited ({status}) before attaching");
        }
        eprint!("{line}");
        if line.starts_with(ATTACHED) {
            break;
        }
    }
    let tx = lab.tx.clone();
    let frames = workload.frames.clone();
    let sent = lab.ns.run_in(move || {
        lab::pin_current_thread()?;
        synth::send(&tx, &frames).map_err(anyhow::Error::from)
    })??;
    eprintln!(
        "demo: sent {sent} synthetic frames on {} (several QPs, one congested with CE marks and CNPs, one with loss and go-back-N)",
        lab.tx
    );
    let mut report = String::new();
    observer
        .0
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut report)?;
    let mut rest = String::new();
    stderr.read_to_string(&mut rest)?;
    eprint!("{rest}");
    let status = observer.0.wait()?;
    crate::output::stdout(|out| out.write_all(report.as_bytes()))?;
    if !status.success() {
        bail!("the observer failed ({status})");
    }
    drop(lab);
    eprintln!("demo: lab removed");
    Ok(())
}

/// A child process killed (and reaped) if the demo ends early on an error.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
