//! `roce-observer fabric`: which link, switch or host explains the loss and CE marks many
//! hosts' reports show, over a topology file (docs/fabric.md).

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use roce_observer::{
    analysis::fabric::{self, Options, Signal, Topology},
    render,
};

use crate::output::{self, UsageError};

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("server").args(["prometheus", "clickhouse"]).multiple(true))]
pub struct FabricArgs {
    /// The hosts' evidence over one window: JSON reports (`replay --json`, `diagnose
    /// --json`), fleet records (a `--records` directory, or its `qp_intervals.jsonl`), or
    /// sidecars' JSON lines (`run --jsonl`); a QP several hosts saw counts once.
    #[arg(value_name = "REPORT", required_unless_present = "server")]
    pub reports: Vec<String>,
    /// Also take the evidence from the fleet's Prometheus server (`http://host:9090`): each
    /// QP's counters' increase over `--window`, as the sidecars export them.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// Also take the evidence from the fleet records in a ClickHouse server
    /// (`http://[user[:password]@]host:8123`, or CLICKHOUSE_USER and CLICKHOUSE_PASSWORD):
    /// the rows of the records' tables whose interval began in `--window`.
    #[arg(long, value_name = "URL")]
    pub clickhouse: Option<String>,
    /// With --clickhouse: the database holding the records' tables.
    #[arg(long, default_value = "roce", requires = "clickhouse")]
    pub database: String,
    /// With --prometheus: the window the increases are taken over; with --clickhouse: the
    /// span whose rows are read (with --windows: the span cut into windows).
    #[arg(long, default_value = "5m", value_parser = roce_observer::units::parse_duration, requires = "server")]
    pub window: std::time::Duration,
    /// With --prometheus or --clickhouse: the window's end, in unix seconds (default: the
    /// Prometheus server's now, the local clock's for ClickHouse; with --windows, the last
    /// window ending at the multiple of its length at or before it).
    #[arg(long, value_name = "UNIX_SECONDS", requires = "server")]
    pub at: Option<f64>,
    /// With --prometheus: label matchers narrowing the series, e.g. 'job="roce"'.
    #[arg(long, value_name = "MATCHERS", requires = "prometheus")]
    pub selector: Option<String>,
    /// Paths traced by `roce-observer trace --json` (repeat for several files): a traced QP
    /// direction is placed on its own path.
    #[arg(long = "paths", value_name = "FILE")]
    pub paths: Vec<String>,
    /// The topology file (TOML, docs/fabric.md).
    #[arg(long, value_name = "FILE")]
    pub topology: String,
    /// The evidence weighed.
    #[arg(long, value_enum, default_value = "all")]
    pub signal: SignalArg,
    /// A QP with fewer packets says nothing.
    #[arg(long, default_value_t = Options::default().min_packets)]
    pub min_packets: u64,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML page to FILE: the topology drawn per signal, links
    /// shaded by their share of bad QPs, the suspects marked.
    #[arg(long, value_name = "FILE", conflicts_with = "windows")]
    pub html: Option<std::path::PathBuf>,
    /// Localize each window of this length on its own (sidecars' lines and records carry
    /// their times; a Prometheus server is asked once per window of --window), and follow
    /// each suspect across windows as one incident.
    #[arg(long, value_name = "DURATION", value_parser = roce_observer::units::parse_duration)]
    pub windows: Option<std::time::Duration>,
    /// With --windows: clean windows in a row that close an incident.
    #[arg(long, default_value_t = 2, requires = "windows", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub quiet: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SignalArg {
    /// Lost or resent request PSNs.
    Loss,
    /// CE-marked packets, or the CNPs that tell of them.
    Ce,
    /// ACK latency risen above each QP's own baseline (records' connection sides, with
    /// --windows: the baseline is the QP's own windows').
    Latency,
    /// PFC pauses the QPs' source hosts received (records' pauses, or the NICs' counters on
    /// --prometheus).
    Pfc,
    /// Loss, then CE.
    Both,
    /// Loss, CE, latency where the evidence has a baseline, PFC where it has pause counts.
    All,
}

impl From<SignalArg> for Vec<Signal> {
    fn from(s: SignalArg) -> Self {
        match s {
            SignalArg::Loss => vec![Signal::Loss],
            SignalArg::Ce => vec![Signal::Ce],
            SignalArg::Latency => vec![Signal::Latency],
            SignalArg::Pfc => vec![Signal::Pfc],
            SignalArg::Both => vec![Signal::Loss, Signal::Ce],
            SignalArg::All => vec![Signal::Loss, Signal::Ce, Signal::Latency, Signal::Pfc],
        }
    }
}

pub fn fabric(a: FabricArgs) -> Result<()> {
    if let Some(html) = &a.html {
        let inputs: Vec<std::path::PathBuf> = a
            .reports
            .iter()
            .chain(&a.paths)
            .chain(std::iter::once(&a.topology))
            .map(std::path::PathBuf::from)
            .collect();
        output::refuse_overwrite("--html", html, &inputs)?;
        output::check_writable("--html", html)?;
    }
    let text = std::fs::read_to_string(&a.topology)
        .with_context(|| format!("cannot read the topology file {}", a.topology))?;
    let topo = Topology::parse(&text, &a.topology)?;
    // The traced paths first: a bad file stops the run before anything is read.
    let mut traces = Vec::new();
    for path in &a.paths {
        let reader =
            std::fs::File::open(path).with_context(|| format!("cannot read the paths {path}"))?;
        traces.extend(fabric::read_traces(reader, path)?.traces);
    }
    if a.signal == SignalArg::Latency && a.windows.is_none() {
        return Err(UsageError(
            "--signal latency needs --windows: a QP's ACK latency is weighed against its own \
             baseline, its other windows'"
                .into(),
        )
        .into());
    }
    let window_ns = a.windows.map(|w| (w.as_nanos() as u64).max(1));
    // The evidence by window (one window, key 0, without --windows).
    let mut by_window: std::collections::BTreeMap<u64, Vec<fabric::QpEvidence>> =
        Default::default();
    let mut evidence = Vec::new();
    // The pause frames each host received, by window (key 0 without --windows), and whether
    // any input could tell pauses at all.
    let mut pauses: std::collections::BTreeMap<u64, std::collections::BTreeMap<String, u64>> =
        Default::default();
    let mut pause_counts = false;
    // The windows --window holds, ending at --at (the local clock's now by default: the
    // windows need one end to share) floored to a multiple of their length, as records' and
    // sidecars' windows are counted from the epoch: (how many, their end); without --windows,
    // one window ending at --at or now.
    let now_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    };
    let end_ns = a.at.map_or_else(now_ns, |t| (t * 1e9) as u64);
    let span = match window_ns {
        // (Only a server is asked for windows; files carry their own.)
        Some(_) if a.prometheus.is_none() && a.clickhouse.is_none() => (1, 0, 0),
        Some(w) => {
            let n = (a.window.as_nanos() as u64).div_ceil(w).max(1);
            // A Prometheus server is asked once per window; ClickHouse once, but each window
            // is weighed.
            let (most, what) = match a.prometheus {
                Some(_) => (MAX_PROMETHEUS_WINDOWS, "queries"),
                None => (MAX_WINDOWS, "windows to weigh"),
            };
            if n > most {
                return Err(UsageError(format!(
                    "--windows: --window {:.0}s holds {n} windows, more than {most} {what}: \
                     give longer windows or a shorter --window",
                    a.window.as_secs_f64()
                ))
                .into());
            }
            let end = end_ns / w * w;
            (n, end.saturating_sub(n * w), end)
        }
        None => (1, end_ns.saturating_sub(a.window.as_nanos() as u64), end_ns),
    };
    if let Some(url) = &a.clickhouse {
        // The records' rows of the whole span, each table in one query, streamed through the
        // files' readers.
        let ch = roce_observer::source::clickhouse::ClickHouse::new(
            url,
            &a.database,
            std::time::Duration::from_secs(300),
        )?;
        let (windows, start, end) = span;
        // Every window of the span, those without rows too (as a Prometheus server's).
        if let Some(w) = window_ns {
            for k in 0..windows {
                by_window.entry(start + k * w).or_default();
            }
        }
        let origin = |table: &str| format!("{} ({}.{table})", ch.url(), a.database);
        let qps = fabric::records_windows(
            ch.records("qp_intervals", start, end)?,
            &origin("qp_intervals"),
            window_ns,
        )?;
        if qps.is_empty() {
            eprintln!(
                "roce-observer: warning: {}: no QP rows began between unix {:.3} s and {:.3} s",
                origin("qp_intervals"),
                start as f64 / 1e9,
                end as f64 / 1e9
            );
        }
        add_evidence(&mut by_window, qps);
        add_evidence(
            &mut by_window,
            fabric::sides_windows(
                ch.records("connection_sides", start, end)?,
                &origin("connection_sides"),
                window_ns,
            )?,
        );
        // (The schema's pauses table: no row is no host paused.)
        pause_counts = true;
        add_pauses(
            &mut pauses,
            fabric::pauses_windows(
                ch.records("pauses", start, end)?,
                &origin("pauses"),
                window_ns,
            )?,
        );
    }
    if let Some(url) = &a.prometheus {
        // One query per window (see `span`).
        let (windows, _, end_ns) = match window_ns {
            Some(_) => span,
            None => (1, 0, 0),
        };
        let mut rest = [0u64; 3];
        for k in 0..windows {
            let (length, at, start) = match window_ns {
                Some(w) => {
                    let start = end_ns.saturating_sub((windows - k) * w);
                    (
                        std::time::Duration::from_nanos(w),
                        Some((start + w) as f64 / 1e9),
                        Some(start),
                    )
                }
                None => (a.window, a.at, None),
            };
            let r = roce_observer::source::prometheus::increases(
                url,
                &fabric::PROMETHEUS_COUNTERS,
                length,
                at,
                a.selector.as_deref(),
                std::time::Duration::from_secs(30),
            )?;
            let s = fabric::prometheus_evidence([&r[0], &r[1], &r[2], &r[3]], url)?;
            for (sum, r) in rest.iter_mut().zip(s.rest) {
                *sum = sum.saturating_add(r);
            }
            let p = roce_observer::source::prometheus::increases(
                url,
                &[fabric::PROMETHEUS_PAUSES],
                length,
                at,
                a.selector.as_deref(),
                std::time::Duration::from_secs(30),
            )?;
            // NICs' counters there, paused or not.
            pause_counts |= p[0].as_array().is_some_and(|v| !v.is_empty());
            add_pauses(
                &mut pauses,
                [(start.unwrap_or(0), fabric::prometheus_pauses(&p[0], url)?)].into(),
            );
            match start {
                Some(start) => by_window.entry(start).or_default().extend(s.evidence),
                None => evidence.extend(s.evidence),
            }
        }
        warn_rest(url, rest);
    }
    for path in &a.reports {
        // Records sent over OTLP (OTLP/JSON lines, as a collector's file exporter writes
        // them): their tables, read as a records directory's.
        if std::path::Path::new(path).is_file()
            && first_line_is(path, roce_observer::export::otlp_json::is_request_line)?
        {
            let reader = std::fs::File::open(path)
                .with_context(|| format!("cannot read the report {path}"))?;
            let tables =
                roce_observer::export::otlp_json::tables_of(std::io::BufReader::new(reader), path)?;
            let table = |name: &str| tables.get(name).map_or(&[][..], Vec::as_slice);
            let origin = |name: &str| format!("{path} ({name} records)");
            add_evidence(
                &mut by_window,
                fabric::records_windows(table("qp_intervals"), &origin("qp_intervals"), window_ns)?,
            );
            add_evidence(
                &mut by_window,
                fabric::sides_windows(
                    table("connection_sides"),
                    &origin("connection_sides"),
                    window_ns,
                )?,
            );
            // (Its pauses are one of its tables: none is none seen.)
            pause_counts = true;
            if tables.contains_key("pauses") {
                add_pauses(
                    &mut pauses,
                    fabric::pauses_windows(table("pauses"), &origin("pauses"), window_ns)?,
                );
            }
            continue;
        }
        // A records directory is read through its QP table and its connection sides (ACK
        // latency, CNPs) when it has them.
        let (file, is_records) = if std::path::Path::new(path).is_dir() {
            let table = std::path::Path::new(path).join("qp_intervals.jsonl");
            if !table.is_file() {
                anyhow::bail!(
                    "{path} is a directory without qp_intervals.jsonl: not a --records directory"
                );
            }
            let sides = std::path::Path::new(path).join("connection_sides.jsonl");
            let pause_table = std::path::Path::new(path).join("pauses.jsonl");
            if pause_table.is_file() {
                read_pauses(&pause_table.display().to_string(), window_ns, &mut pauses)?;
                pause_counts = true;
            }
            if sides.is_file() {
                read_sides(&sides.display().to_string(), window_ns, &mut by_window)?;
            }
            (table.display().to_string(), true)
        } else if path.ends_with("pauses.jsonl") {
            read_pauses(path, window_ns, &mut pauses)?;
            pause_counts = true;
            continue;
        } else if path.ends_with("connection_sides.jsonl") {
            read_sides(path, window_ns, &mut by_window)?;
            continue;
        } else {
            (path.clone(), path.ends_with(".jsonl"))
        };
        let reader =
            std::fs::File::open(&file).with_context(|| format!("cannot read the report {file}"))?;
        if is_records && is_sidecar(&file)? {
            for (w, s) in
                fabric::sidecar_windows(std::io::BufReader::new(reader), &file, window_ns)?
            {
                warn_rest(&file, s.rest);
                by_window.entry(w).or_default().extend(s.evidence);
            }
        } else if is_records {
            add_evidence(
                &mut by_window,
                fabric::records_windows(std::io::BufReader::new(reader), &file, window_ns)?,
            );
        } else if window_ns.is_some() {
            return Err(UsageError(format!(
                "--windows needs the evidence's times: {file} is a JSON report, one window \
                 (give sidecars' lines or records)"
            ))
            .into());
        } else {
            let report = fabric::read_report(reader, &file)?;
            evidence.extend(fabric::evidence_of(&report));
        }
    }
    let traced = fabric::traced_paths(&topo, &traces);
    let opts = Options {
        min_packets: a.min_packets,
        ..Options::default()
    };
    if a.signal == SignalArg::Pfc && !pause_counts {
        return Err(UsageError(
            "--signal pfc needs pause counts: records with their pauses.jsonl, or --prometheus \
             (the NICs' counters)"
                .into(),
        )
        .into());
    }
    // Each host's pauses, by window, on the topology's nodes (a name, or an address); the
    // hosts the topology does not have, told once.
    let mut unknown_hosts = std::collections::BTreeSet::new();
    // The topology's hosts the pause counts name, and whether any of them was paused.
    let mut counted_hosts = std::collections::BTreeSet::new();
    let mut paused_any = false;
    let mut node_pauses: std::collections::BTreeMap<
        u64,
        std::collections::HashMap<fabric::topology::NodeId, u64>,
    > = Default::default();
    for (w, hosts) in pauses {
        // Without windows, every window's pauses are the one window's.
        let into = node_pauses
            .entry(if window_ns.is_some() { w } else { 0 })
            .or_default();
        for (host, frames) in hosts {
            let node = topo
                .node(&host)
                .filter(|n| topo.nodes[*n as usize].role == fabric::Role::Host)
                .or_else(|| {
                    host.parse::<std::net::IpAddr>()
                        .ok()
                        .and_then(|ip| topo.host_of(&ip))
                });
            match node {
                Some(n) => {
                    *into.entry(n).or_default() += frames;
                    counted_hosts.insert(n);
                    paused_any |= frames > 0;
                }
                None => {
                    unknown_hosts.insert(host);
                }
            }
        }
    }
    let unknown_hosts_any = !unknown_hosts.is_empty();
    if unknown_hosts_any {
        eprintln!(
            "roce-observer: warning: pauses of hosts the topology does not name as hosts, left out: {}",
            unknown_hosts.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    // (Counts that name hosts, none of them the topology's; records without pause rows
    // name none, and say no host was paused.)
    if a.signal == SignalArg::Pfc && counted_hosts.is_empty() && unknown_hosts_any {
        anyhow::bail!(
            "--signal pfc: the pause counts name none of the topology's hosts (records by their \
             host column, Prometheus by its scrape targets' names or addresses)"
        );
    }
    let mut signals = Vec::<Signal>::from(a.signal);
    // `all` weighs PFC only where some host of the topology was paused: a host observer
    // rarely sees pause frames (RDMA NICs take them in hardware), so no pauses there is not
    // "none".
    if a.signal == SignalArg::All && !paused_any {
        signals.retain(|s| *s != Signal::Pfc);
    }
    // `all` weighs latency only where some QP has a baseline to weigh it against.
    if a.signal == SignalArg::All
        && !by_window
            .values()
            .chain(std::iter::once(&evidence))
            .flatten()
            .any(|e| e.ack.is_some())
    {
        signals.retain(|s| *s != Signal::Latency);
    }
    let no_pauses = Default::default();
    let localize = |evidence: Vec<fabric::QpEvidence>, w: u64| -> Vec<fabric::Localization> {
        let mut evidence = fabric::merge(evidence);
        let paused = node_pauses.get(&w).unwrap_or(&no_pauses);
        for e in &mut evidence {
            e.paused = topo
                .host_of(&e.src)
                .and_then(|n| paused.get(&n))
                .copied()
                .unwrap_or(0);
            if let Some(p) = traced.get(&(e.src, e.dst, e.src_port)) {
                e.path = Some(p.clone());
            }
            if let Some(ack) = &mut e.ack
                && let Some((port, _)) = ack.reverse
            {
                ack.reverse_path = traced.get(&(e.dst, e.src, port)).cloned();
            }
        }
        // (`all`: latency in a window only where a QP of it has a baseline.)
        let any_ack = evidence.iter().any(|e| e.ack.is_some());
        signals
            .iter()
            .filter(|s| **s != Signal::Latency || any_ack || a.signal == SignalArg::Latency)
            .map(|s| fabric::localize(&topo, &evidence, *s, &opts))
            .collect()
    };
    if let Some(w) = window_ns {
        // Every window from the first to the last, those without evidence too (they cannot
        // tell, and neither keep nor close an incident).
        let (Some(first), Some(last)) = (
            by_window.keys().next().copied(),
            by_window.keys().next_back().copied(),
        ) else {
            anyhow::bail!("no evidence in the inputs given: no window to weigh");
        };
        let count = (last - first) / w + 1;
        if count > MAX_WINDOWS {
            anyhow::bail!(
                "--windows: the evidence spans {count} windows (from unix {:.0} s to {:.0} s), \
                 more than {MAX_WINDOWS}: give longer windows or files of one span",
                first as f64 / 1e9,
                last as f64 / 1e9
            );
        }
        let windows: Vec<fabric::Window> = (0..count)
            .map(|k| {
                let start = first + k * w;
                fabric::Window {
                    start_ns: start,
                    end_ns: start.saturating_add(w),
                    runs: localize(by_window.remove(&start).unwrap_or_default(), start),
                }
            })
            .collect();
        let quiet = a.quiet as usize;
        let incidents = fabric::incidents(&windows, quiet);
        return output::stdout(|out| {
            if a.json {
                render::fabric::write_incidents_json(&windows, &incidents, quiet, out)
            } else {
                write!(
                    out,
                    "{}",
                    render::fabric::render_incidents(&windows, &incidents, quiet)
                )
            }
        });
    }
    evidence.extend(by_window.into_values().flatten());
    let runs = localize(evidence, 0);
    if let Some(html) = &a.html {
        std::fs::write(html, render::fabric_html::html(&topo, &runs))
            .with_context(|| format!("cannot write the HTML page {}", html.display()))?;
    }
    output::stdout(|out| {
        if a.json {
            render::fabric::write_json(&runs, out)
        } else {
            write!(out, "{}", render::fabric::render(&runs))
        }
    })
}

/// Reads a records' `pauses` table into `pauses`.
fn read_pauses(
    file: &str,
    window_ns: Option<u64>,
    pauses: &mut std::collections::BTreeMap<u64, std::collections::BTreeMap<String, u64>>,
) -> Result<()> {
    let reader =
        std::fs::File::open(file).with_context(|| format!("cannot read the records {file}"))?;
    add_pauses(
        pauses,
        fabric::pauses_windows(std::io::BufReader::new(reader), file, window_ns)?,
    );
    Ok(())
}

/// Adds one input's pauses (per window, per host) to `pauses`.
fn add_pauses(
    pauses: &mut std::collections::BTreeMap<u64, std::collections::BTreeMap<String, u64>>,
    more: std::collections::BTreeMap<u64, std::collections::BTreeMap<String, u64>>,
) {
    for (w, hosts) in more {
        let into = pauses.entry(w).or_default();
        for (host, frames) in hosts {
            *into.entry(host).or_default() += frames;
        }
    }
}

/// Reads a records' `connection_sides` table into `by_window`.
fn read_sides(
    file: &str,
    window_ns: Option<u64>,
    by_window: &mut std::collections::BTreeMap<u64, Vec<fabric::QpEvidence>>,
) -> Result<()> {
    let reader =
        std::fs::File::open(file).with_context(|| format!("cannot read the records {file}"))?;
    add_evidence(
        by_window,
        fabric::sides_windows(std::io::BufReader::new(reader), file, window_ns)?,
    );
    Ok(())
}

/// Adds one input's evidence (per window) to `by_window`.
fn add_evidence(
    by_window: &mut std::collections::BTreeMap<u64, Vec<fabric::QpEvidence>>,
    more: std::collections::BTreeMap<u64, Vec<fabric::QpEvidence>>,
) {
    for (w, e) in more {
        by_window.entry(w).or_default().extend(e);
    }
}

/// The most windows `--windows` asks a Prometheus server for (five queries each).
const MAX_PROMETHEUS_WINDOWS: u64 = 1_000;

/// The most windows `--windows` weighs (each is a localization of its own).
const MAX_WINDOWS: u64 = 10_000;

/// Whether a JSON-lines file is a sidecar's (`run --jsonl`), by its first line.
fn is_sidecar(file: &str) -> Result<bool> {
    first_line_is(file, fabric::is_sidecar_line)
}

/// Whether a file's first non-blank line passes `test` (none: no).
fn first_line_is(file: &str, test: fn(&str) -> bool) -> Result<bool> {
    use std::io::BufRead;
    let reader = std::io::BufReader::new(
        std::fs::File::open(file).with_context(|| format!("cannot read the report {file}"))?,
    );
    for line in reader.lines() {
        let line = line.with_context(|| format!("cannot read the report {file}"))?;
        if !line.trim().is_empty() {
            return Ok(test(&line));
        }
    }
    Ok(false)
}

/// Says how much evidence a sidecar's rest series holds (QPs beyond its --max-series).
fn warn_rest(origin: &str, [packets, lost, ce]: [u64; 3]) {
    if lost > 0 || ce > 0 {
        eprintln!(
            "roce-observer: warning: {origin}: {packets} packets of QPs in the sidecars' rest \
             series ({lost} lost, {ce} CE) cannot be placed: raise their --max-series"
        );
    }
}
