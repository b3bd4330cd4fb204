//! The terminal table: totals, the top flows, PFC / PAUSE senders, skip reasons, and the time
//! series and microburst summary.

use std::fmt::Write as _;

use comfy_table::{CellAlignment, ColumnConstraint, Table, presets::NOTHING};

use crate::{
    model::{
        Direction, FlowMirror, PfcReport, Report, connections::LatencySummary, percent, qp_hex,
    },
    units::{count, duration, duration_s, noun},
};

/// How a column's cells line up.
#[derive(Clone, Copy)]
pub(crate) enum Align {
    Left,
    Right,
}

/// Columns as wide as their widest cell (long interface names, file names and IPv6 addresses
/// included), two spaces apart, no borders; lines end without trailing blanks.
pub(crate) fn columns(headers: &[(&str, Align)], rows: Vec<Vec<String>>) -> String {
    let mut t = Table::new();
    t.load_style(NOTHING);
    t.set_header(headers.iter().map(|(h, _)| *h));
    for row in rows {
        t.add_row(row);
    }
    for (i, (_, align)) in headers.iter().enumerate() {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(match align {
                Align::Left => CellAlignment::Left,
                Align::Right => CellAlignment::Right,
            });
            c.set_padding((if i > 0 { 2 } else { 0 }, 0));
            c.set_constraint(ColumnConstraint::ContentWidth);
        }
    }
    let mut out = String::new();
    for line in t.lines() {
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// The terminal table: totals, the top `top` flows by bytes, skip reasons.
pub fn render_table(report: &Report, top: usize) -> String {
    let mut out = String::new();
    let t = &report.totals;
    let names = if report.source.files.is_empty() {
        &report.source.interfaces
    } else {
        &report.source.files
    };
    let src = match names.as_slice() {
        [] => report.source.kind.clone(),
        names => format!("{} {}", report.source.kind, names.join(",")),
    };
    if report.source.kind == "nic" {
        // No wire view: its counts would all be 0, which is not what was there.
        let _ = writeln!(
            out,
            "roce-observer: {src}, {}: the NIC side alone (the wire is not observed)",
            window(report.window.seconds),
        );
        return out;
    }
    let _ = writeln!(
        out,
        "roce-observer: {src}, {}: {}, {} ({}), {}",
        window(report.window.seconds),
        count(t.frames, "frame"),
        count(t.roce_packets, "RoCEv2 packet"),
        human_bytes(t.roce_bytes),
        count(report.flows.len() as u64, "flow")
    );
    let _ = writeln!(
        out,
        "  CE-marked {} ({:.2}%), CNPs {}, NAKs {}, RNR NAKs {}",
        t.ce_packets,
        percent(t.ce_packets, t.roce_packets),
        t.cnp_packets,
        report.flows.iter().map(|f| f.ops.nak).sum::<u64>(),
        report.flows.iter().map(|f| f.ops.rnr_nak).sum::<u64>(),
    );
    let p = &t.psn;
    let mut psns = format!(
        "  PSNs: {} lost, {} out of order, {}, {} resent ({})",
        p.missing,
        p.out_of_order,
        count(p.duplicates, "duplicate"),
        p.retransmissions,
        count(p.retransmission_episodes, "episode"),
    );
    if p.resets > 0 {
        psns.push_str(&format!(", {}", count(p.resets, "QP reuse")));
    }
    if p.violations > 0 {
        psns.push_str(&format!(", {}", count(p.violations, "violation")));
    }
    let _ = writeln!(out, "{psns}");
    if t.egress_frames > 0 {
        let _ = writeln!(
            out,
            "  {} of the frames seen leaving the host (TC egress): flows marked (tx)",
            t.egress_frames
        );
    }
    if t.pause_insert_failures > 0 {
        let _ = writeln!(
            out,
            "  pause table full: {} PAUSE / PFC frames counted in mac_control only",
            t.pause_insert_failures
        );
    }
    if t.flow_insert_failures + t.evicted_packets > 0 {
        let _ = writeln!(
            out,
            "  flow table full: {} packets counted in totals only (raise --max-flows)",
            t.flow_insert_failures + t.evicted_packets
        );
    }
    if let Some(c) = t.capture.filter(|c| c.dropped + c.interface_dropped > 0) {
        let _ = writeln!(
            out,
            "  capture drops: {} frames libpcap had no room for, {} the interface dropped: never seen, their PSNs count as lost",
            c.dropped, c.interface_dropped
        );
    }
    if t.spread_dropped > 0 {
        let _ = writeln!(
            out,
            "  spread drops: {} found the queue of their CPU full (--cpus): never accounted, their PSNs look lost",
            count(t.spread_dropped, "frame")
        );
    }
    if t.interface_missed > 0 {
        let _ = writeln!(
            out,
            "  interface missed: {} dropped by the interfaces' devices for lack of buffer space (rx_missed_errors), RoCE or not{}",
            count(t.interface_missed, "frame"),
            if report.port_dropped() > 0 {
                ": on a mirror port, copies never seen, their PSNs look lost"
            } else {
                ""
            }
        );
    }
    if !report.flows.is_empty() {
        use Align::{Left, Right};
        let peaks = report.flows.iter().any(|f| f.peak_rate_bps.is_some());
        // The mirror a flow came through is part of its key: shown when the rows differ in it.
        let shown = &report.flows[..report.flows.len().min(top)];
        let mirrors = shown
            .iter()
            .map(|f| mirror_name(f.mirror.as_ref()))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1;
        let rows = shown
            .iter()
            .map(|f| {
                let tx = if f.direction == Direction::Egress {
                    " (tx)"
                } else {
                    ""
                };
                let mut row = vec![format!("{} -> {}{tx}", f.src_ip, f.dst_ip)];
                if mirrors {
                    row.push(mirror_name(f.mirror.as_ref()));
                }
                row.extend([
                    f.udp_src_port.to_string(),
                    qp_hex(f.dest_qp),
                    dscps(&f.dscp),
                    f.active_rate_bps.map_or("-".to_string(), human_rate),
                ]);
                if peaks {
                    row.push(f.peak_rate_bps.map_or("-".to_string(), human_rate));
                }
                row.extend([
                    f.packets.to_string(),
                    format!("{:.2}", f.ce_percent()),
                    f.ops.cnp.to_string(),
                    f.ops.nak.to_string(),
                    f.ops.rnr_nak.to_string(),
                ]);
                if f.psn_scope.is_some_and(|s| !s.here) {
                    // Analysed with the flow's other mirror sessions, on its first row.
                    row.extend(std::iter::repeat_n("^".to_string(), 4));
                } else {
                    row.extend([
                        f.psn.missing.to_string(),
                        f.psn.out_of_order.to_string(),
                        f.psn.duplicates.to_string(),
                        f.psn.retransmissions.to_string(),
                    ]);
                }
                row
            })
            .collect();
        let mut headers = vec![("SOURCE -> DESTINATION", Left)];
        if mirrors {
            headers.push(("MIRROR", Left));
        }
        headers.extend([
            ("SPORT", Right),
            ("DEST QP", Right),
            ("DSCP", Right),
            ("RATE", Right),
        ]);
        if peaks {
            headers.push(("PEAK", Right));
        }
        out.push('\n');
        out.push_str(&columns(
            &[
                headers.as_slice(),
                &[
                    ("PACKETS", Right),
                    ("CE%", Right),
                    ("CNPs", Right),
                    ("NAKs", Right),
                    ("RNR", Right),
                    ("LOST", Right),
                    ("REORD", Right),
                    ("DUP", Right),
                    ("RETX", Right),
                ],
            ]
            .concat(),
            rows,
        ));
        if shown.iter().any(|f| f.psn_scope.is_some()) {
            let _ = writeln!(
                out,
                "  A flow seen in several mirror sessions has its PSNs analysed all sessions together, on its first row (^ on the others)"
            );
        }
        if shown.iter().any(|f| f.psn.sprayed > 0) {
            let _ = writeln!(
                out,
                "  Flows of a direction sprayed over several ports in turn (psn.sprayed in --json): each port holds a share of its PSNs, so LOST and REORD there count the other ports' packets, not loss; not in the totals, not judged"
            );
        }
        more(&mut out, report.flows.len(), top, "flow");
    }
    render_connections(&mut out, report, top);
    render_latency(&mut out, report);
    render_points(&mut out, report);
    render_jobs(&mut out, report, top);
    if let Some(pfc) = &report.pfc {
        render_pfc(&mut out, pfc, top);
    }
    let skipped: Vec<String> = t
        .skipped
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    if !skipped.is_empty() {
        let _ = writeln!(out, "\nnot RoCEv2: {}", skipped.join(", "));
    }
    out
}

/// The terminal summary of the time series and the microburst slots (empty without them).
pub fn render_timeline(report: &Report) -> String {
    let mut out = String::new();
    if let Some(s) = &report.series {
        let peak = |v: &[f64]| {
            v.iter().enumerate().fold(
                (0usize, 0.0f64),
                |m, (i, x)| if *x > m.1 { (i, *x) } else { m },
            )
        };
        let (ti, tp) = peak(&s.total.bps);
        let (ci, cp) = peak(&s.total.ce_fraction);
        let (ni, np) = peak(&s.total.cnp_per_s);
        let at = |i: usize| duration_s(s.t.get(i).copied().unwrap_or(0.0));
        let fitted = if s.interval_fitted {
            format!(" (fitted to the {} span)", duration_s(s.span_s))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "\ntime series: {} of {}{fitted}: RoCE peak {} at +{}, CE peak {:.2}% at +{}, CNPs peak {:.0}/s at +{}",
            count(s.t.len() as u64, "interval"),
            duration_s(s.interval_s),
            human_rate(tp),
            at(ti),
            cp * 100.0,
            at(ci),
            np,
            at(ni)
        );
    }
    if let Some(m) = &report.microbursts {
        let link = match m.link_speed_bps {
            Some(bps) => format!(
                "link {}, busy from {}%",
                human_rate(bps as f64),
                m.threshold_percent
            ),
            None => "link speed unknown: give --link-speed for bursts".to_string(),
        };
        let _ = writeln!(out, "\nMICROBURSTS ({} slots, {link})", duration(m.slot_ns));
        use Align::{Left, Right};
        let rows = m
            .interfaces
            .iter()
            .map(|i| {
                vec![
                    i.name.clone(),
                    match i.direction {
                        Direction::Ingress => "in",
                        Direction::Egress => "out",
                    }
                    .to_string(),
                    human_rate(i.peak_bps),
                    i.peak_percent
                        .map_or("-".to_string(), |p| format!("{p:.1}")),
                    i.bursts.to_string(),
                    if i.bursts > 0 {
                        duration(i.longest_burst_ns)
                    } else {
                        "-".to_string()
                    },
                    i.lost_slots.to_string(),
                ]
            })
            .collect();
        out.push_str(&columns(
            &[
                ("INTERFACE", Left),
                ("DIR", Left),
                ("PEAK", Right),
                ("LINK%", Right),
                ("BURSTS", Right),
                ("LONGEST", Right),
                ("LOST SLOTS", Right),
            ],
            rows,
        ));
        let uncertain: u64 = m.interfaces.iter().map(|i| i.uncertain_slots).sum();
        if uncertain > 0 {
            let _ = writeln!(
                out,
                "{} averaged over longer spans: the kernel clock's timer ran late, so their frames' times are known only to the span",
                count(uncertain, "slot")
            );
        }
    }
    out
}

/// The mirror a flow or sender was seen through: "session 101", its kind ("erspan1",
/// "gre_teb"), or "-" for none.
fn mirror_name(m: Option<&FlowMirror>) -> String {
    match m {
        None => "-".to_string(),
        Some(FlowMirror {
            session: Some(id), ..
        }) => format!("session {id}"),
        Some(m) => m.kind.clone().unwrap_or_default(),
    }
}

/// DSCP values: "26", "26,48", "-".
fn dscps(d: &[u8]) -> String {
    if d.is_empty() {
        return "-".to_string();
    }
    d.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
}

/// The PAUSE / PFC table: a row per sender and class.
fn render_pfc(out: &mut String, pfc: &PfcReport, top: usize) {
    use Align::{Left, Right};
    let speed = match pfc.link_speed_bps {
        Some(bps) => format!("pause time at {}", human_rate(bps as f64)),
        None => "pause time unknown: give --link-speed".to_string(),
    };
    let _ = writeln!(
        out,
        "\nPFC / PAUSE from {} ({speed})",
        count(pfc.sources.len() as u64, "sender")
    );
    let mut rows = Vec::new();
    for src in pfc.sources.iter().take(top) {
        let mirror = match &src.mirror {
            None if src.direction == Direction::Egress => "(tx)".to_string(),
            m => mirror_name(m.as_ref()),
        };
        let classes = src
            .priorities
            .iter()
            .map(|p| (p.priority.to_string(), &p.counts))
            .chain(src.link_pause.iter().map(|l| ("all".to_string(), l)));
        for (class, c) in classes {
            rows.push(vec![
                src.src_mac.clone(),
                mirror.clone(),
                class,
                c.frames.to_string(),
                c.xon.to_string(),
                c.quanta.to_string(),
                c.pause_ns.map_or("-".to_string(), duration),
            ]);
        }
        if src.priorities.is_empty() && src.link_pause.is_none() {
            rows.push(vec![
                src.src_mac.clone(),
                mirror,
                "none".to_string(),
                src.pfc_frames.to_string(),
                "0".to_string(),
                "0".to_string(),
                "-".to_string(),
            ]);
        }
    }
    out.push_str(&columns(
        &[
            ("SOURCE MAC", Left),
            ("MIRROR", Left),
            ("PRIO", Right),
            ("FRAMES", Right),
            ("XON", Right),
            ("QUANTA", Right),
            ("PAUSE TIME", Right),
        ],
        rows,
    ));
    more(out, pfc.sources.len(), top, "sender");
}

/// "... N more rows (--top N, or --json for all)" when a table showed `top` of `len` rows.
fn more(out: &mut String, len: usize, top: usize, row: &str) {
    if len > top {
        let _ = writeln!(
            out,
            "  ... {} more {} (--top N, or --json for all)",
            len - top,
            noun((len - top) as u64, row)
        );
    }
}

/// The SPORT cell of a connection: its port when both sides used one and the same; "a/b"
/// when each side used its own; a side that used several shows its busiest and "+N" more.
fn conn_ports(c: &crate::model::connections::Connection) -> String {
    let side = |p: &[u16]| match p {
        [] => "-".to_string(),
        [one] => one.to_string(),
        [first, rest @ ..] => format!("{first}+{}", rest.len()),
    };
    match (c.a.ports.as_slice(), c.b.ports.as_slice()) {
        ([], []) => c.udp_src_port.to_string(),
        (a, b) if a == b || b.is_empty() => side(a),
        ([], b) => side(b),
        (a, b) => format!("{}/{}", side(a), side(b)),
    }
}

/// "p50 / p99" of a latency summary, "-" without samples.
fn p50_p99(l: Option<&LatencySummary>) -> String {
    l.map_or("-".to_string(), |l| {
        format!("{} / {}", duration(l.p50_ns), duration(l.p99_ns))
    })
}

/// The top `top` connections: both sides, their QPs, what each sent, the latency of side A's
/// requests; then how many UD and management flows there were.
fn render_connections(out: &mut String, report: &Report, top: usize) {
    use Align::{Left, Right};
    let shown = &report.connections[..report.connections.len().min(top)];
    if !shown.is_empty() {
        let rows = shown
            .iter()
            .map(|c| {
                let qp = |q: Option<u32>| q.map_or("-".to_string(), qp_hex);
                let lost = c.a.psn.missing + c.b.psn.missing;
                let retx = c.a.psn.retransmissions + c.b.psn.retransmissions;
                vec![
                    format!("{} <-> {}", c.a.ip, c.b.ip),
                    qp(c.a.qp),
                    qp(c.b.qp),
                    c.transport.clone(),
                    c.pmtu.map_or("-".to_string(), |m| m.to_string()),
                    conn_ports(c),
                    c.a.packets.to_string(),
                    c.b.packets.to_string(),
                    human_bytes(c.bytes),
                    c.active_rate_bps.map_or("-".to_string(), human_rate),
                    c.a.messages.as_ref().map_or("-".to_string(), |m| {
                        if m.unknown_size > 0 {
                            format!("{}+{}?", m.count, m.unknown_size)
                        } else {
                            m.count.to_string()
                        }
                    }),
                    match &c.a.messages {
                        Some(m) if m.count > 0 => format!(
                            "{} / {}",
                            message_size(m.p50_bytes),
                            message_size(m.p99_bytes)
                        ),
                        _ => "-".to_string(),
                    },
                    p50_p99(c.a.latency.ack.as_ref()),
                    p50_p99(c.a.latency.read.as_ref()),
                    lost.to_string(),
                    retx.to_string(),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&columns(
            &[
                ("CONNECTION A <-> B", Left),
                ("QP A", Right),
                ("QP B", Right),
                ("TYPE", Left),
                ("PMTU", Right),
                ("SPORT", Right),
                ("A->B", Right),
                ("B->A", Right),
                ("BYTES", Right),
                ("RATE", Right),
                ("MSGS", Right),
                ("SIZE p50 / p99", Right),
                ("ACK p50 / p99", Right),
                ("READ p50 / p99", Right),
                ("LOST", Right),
                ("RETX", Right),
            ],
            rows,
        ));
        let _ = writeln!(
            out,
            "  A sent the most requests (with none, the most packets); messages and latency are A's (--json has B's); MSGS n+m?: m of unknown size"
        );
        more(out, report.connections.len(), top, "connection");
    }
    let (ud, cm): (Vec<_>, Vec<_>) = report.other_traffic.iter().partition(|o| o.kind == "UD");
    if !ud.is_empty() || !cm.is_empty() {
        let packets = |v: &[&crate::model::connections::OtherTraffic]| {
            v.iter().map(|o| o.packets).sum::<u64>()
        };
        let _ = writeln!(
            out,
            "  no connection: {} ({}), {} of connection management ({})",
            count(ud.len() as u64, "UD flow"),
            count(packets(&ud), "packet"),
            count(cm.len() as u64, "flow"),
            count(packets(&cm), "packet"),
        );
    }
}

/// The latency histograms per interface, side and kind, summarised.
fn render_latency(out: &mut String, report: &Report) {
    if report.latency.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nlatency (answers to requests, timed on the wire):");
    for l in &report.latency {
        let s = &l.summary;
        let at = l
            .interface
            .as_ref()
            .map_or(String::new(), |i| format!(" on {i}"));
        let _ = writeln!(
            out,
            "  {:<4} {}{at}: {}, p50 {}, p90 {}, p99 {}, max {}",
            l.kind,
            l.side.replace('_', " "),
            count(s.samples, "sample"),
            duration(s.p50_ns),
            duration(s.p90_ns),
            duration(s.p99_ns),
            duration(s.max_ns),
        );
    }
}

/// The jobs: each one's hosts, period (or why none), iteration times, and its hosts' mean
/// start and end within the phases (a late starter computes longer; a late finisher sends
/// slower or waits).
fn render_jobs(out: &mut String, report: &Report, top: usize) {
    use Align::{Left, Right};
    let Some(j) = &report.jobs else {
        return;
    };
    let _ = writeln!(
        out,
        "\njobs (hosts talking RC; phases on {} bins): {}",
        duration(j.bin_ns),
        j.jobs.len()
    );
    for job in j.jobs.iter().take(top) {
        let period = match (&job.period, &job.no_period) {
            (Some(p), _) => format!(
                "period {} ± {} over {} (spread {:.1}%)",
                duration(p.ns),
                duration(p.stderr_ns),
                count(u64::from(p.iterations), "iteration"),
                p.cv * 100.0
            ),
            (None, Some(why)) => format!("no period: {why}"),
            (None, None) => "no period".into(),
        };
        let _ = writeln!(
            out,
            "  {}: {}, {} in {}; {period}",
            job.id,
            count(job.hosts.len() as u64, "host"),
            human_bytes(job.bytes),
            count(job.phases.len() as u64, "phase"),
        );
        if let (Some(p50), Some(p99)) = (job.iteration_p50_ns, job.iteration_p99_ns) {
            let _ = writeln!(
                out,
                "    iteration time p50 {}, p99 {}",
                duration(p50),
                duration(p99)
            );
        }
        if let Some(name) = &job.name {
            let _ = writeln!(out, "    launched as {name}");
        }
        // Each host's mean start and end from its phases' starts, over the phases it sent in.
        let mut rows = Vec::new();
        for host in &job.hosts {
            let mine: Vec<(u64, u64, u64)> = job
                .phases
                .iter()
                .filter_map(|ph| {
                    ph.hosts
                        .iter()
                        .find(|h| h.host == *host)
                        .map(|h| (h.start_ns - ph.start_ns, h.end_ns - ph.start_ns, h.bytes))
                })
                .collect();
            if mine.is_empty() {
                continue;
            }
            let n = mine.len() as u64;
            let mut row = vec![
                host.to_string(),
                n.to_string(),
                duration(mine.iter().map(|m| m.0).sum::<u64>() / n),
                duration(mine.iter().map(|m| m.1).sum::<u64>() / n),
                human_bytes(mine.iter().map(|m| m.2).sum::<u64>()),
            ];
            if !job.ranks.is_empty() {
                row.insert(1, ranks_of(job, *host));
            }
            rows.push(row);
        }
        let mut headers = vec![
            ("HOST", Left),
            ("PHASES", Right),
            ("MEAN START", Right),
            ("MEAN END", Right),
            ("SENT", Right),
        ];
        if !job.ranks.is_empty() {
            headers.insert(1, ("RANK", Left));
        }
        let table = columns(&headers, rows);
        for line in table.lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    more(out, j.jobs.len(), top, "job");
}

/// The ranks of `job`'s processes on `host`, as their environments tell them (`?`: a process
/// whose rank is not known; `-`: none of the job's processes here).
fn ranks_of(job: &crate::model::jobs::Job, host: std::net::IpAddr) -> String {
    let ranks: Vec<String> = job
        .ranks
        .iter()
        .filter(|r| r.host == host)
        .map(|r| {
            r.process
                .rank
                .map_or_else(|| "?".to_string(), |n| n.to_string())
        })
        .collect();
    if ranks.is_empty() {
        "-".into()
    } else {
        ranks.join(",")
    }
}

/// Several observation points of one traffic: how many saw each packet, the time from one to
/// another per direction (their clocks' offset taken out when both directions tell it), and
/// the packets a point carrying their flow did not see.
fn render_points(out: &mut String, report: &Report) {
    let Some(p) = &report.points else {
        return;
    };
    let seen: Vec<String> = p
        .seen_at
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(i, n)| {
            format!(
                "{} at {}",
                count(*n, "packet"),
                count(i as u64 + 1, "point")
            )
        })
        .collect();
    let _ = writeln!(
        out,
        "
observation points: {} files of the same traffic, each packet counted once: {}",
        p.files.len(),
        seen.join(", ")
    );
    let signed = |ns: i64| {
        if ns < 0 {
            format!("-{}", duration(ns.unsigned_abs()))
        } else {
            duration(ns as u64)
        }
    };
    for c in &p.clocks {
        let _ = writeln!(
            out,
            "  clocks: {} runs {} {} {} (from {} <-> {}, the fastest packet each way taken as equally fast); fabric round trip {}",
            c.b,
            duration(c.offset_ns.unsigned_abs()),
            if c.offset_ns < 0 {
                "behind"
            } else {
                "ahead of"
            },
            c.a,
            c.hosts[0],
            c.hosts[1],
            signed(c.round_trip_ns)
        );
    }
    for w in &p.one_way {
        let _ = writeln!(
            out,
            "  one way {} -> {}, {} -> {}: {}, min {}, p50 {}, p99 {}, max {}{}",
            w.src,
            w.dst,
            w.from,
            w.to,
            count(w.packets, "packet"),
            signed(w.min_ns),
            signed(w.p50_ns),
            signed(w.p99_ns),
            signed(w.max_ns),
            if w.clock_corrected {
                ""
            } else {
                " (seen one way only: the clocks' offset is in these times)"
            }
        );
    }
    for m in &p.missing {
        let psns: Vec<String> = m.psns.iter().map(|p| format!("{p:#08x}")).collect();
        let _ = writeln!(
            out,
            "  not seen at {}: {} of {} -> {} QP {:#08x} sport {} seen last at {} (PSN {})",
            m.not_seen_at,
            count(m.packets, "packet"),
            m.src,
            m.dst,
            m.dest_qp,
            m.udp_src_port,
            m.last_seen,
            psns.join(", ")
        );
    }
}

/// The observation's length: "720 µs", "12.4 s"; a capture of one instant says so.
fn window(seconds: f64) -> String {
    if seconds > 0.0 {
        duration_s(seconds)
    } else {
        "one instant".to_string()
    }
}

/// A message size in binary units (verbs sizes are powers of two more often than not): whole
/// where it is a whole number of them.
fn message_size(b: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut unit = 1024u64;
    let mut i = 0;
    while b >= unit * 1024 && i < UNITS.len() - 1 {
        unit *= 1024;
        i += 1;
    }
    if b.is_multiple_of(unit) {
        format!("{} {}", b / unit, UNITS[i])
    } else {
        format!("{:.1} {}", b as f64 / unit as f64, UNITS[i])
    }
}

/// Bytes in IEC binary units, one convention for every byte count the table and the HTML page
/// show (message sizes, volumes, the totals): KiB, MiB, ... with one decimal. Rates stay in
/// decimal bits per second, as links are rated.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

fn human_rate(bps: f64) -> String {
    const UNITS: [&str; 5] = ["b/s", "kb/s", "Mb/s", "Gb/s", "Tb/s"];
    let mut v = bps;
    let mut i = 0;
    while v >= 1000.0 && i < UNITS.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    format!("{v:.1} {}", UNITS[i])
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use observer_common::{FlowKey, FlowStats, OpClass, SkipReason};

    use super::*;
    use crate::{
        aggregate::Aggregate,
        model::{SCHEMA, Source, ip_of},
    };

    #[test]
    fn the_observers_drops_have_a_line_each() {
        let mut r = Aggregate::new().report(Source::live(vec!["rx0".into()], "auto"), 1.0);
        let lines = |r: &Report| {
            render_table(r, 5)
                .lines()
                .filter(|l| l.contains(" drops: ") || l.contains(" missed: "))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert!(lines(&r).is_empty());
        r.totals.spread_dropped = 3;
        r.totals.interface_missed = 1;
        r.source.mode = Some("mirror".into());
        assert_eq!(
            lines(&r),
            [
                "  spread drops: 3 frames found the queue of their CPU full (--cpus): never accounted, their PSNs look lost",
                "  interface missed: 1 frame dropped by the interfaces' devices for lack of buffer space (rx_missed_errors), RoCE or not: on a mirror port, copies never seen, their PSNs look lost",
            ]
        );
        // A host's own interface lost the host's packets: not the observer's blind spot.
        r.source.mode = Some("host".into());
        assert_eq!(
            lines(&r)[1],
            "  interface missed: 1 frame dropped by the interfaces' devices for lack of buffer space (rx_missed_errors), RoCE or not"
        );
    }

    /// Volumes in the same binary units as message sizes: no KB beside KiB.
    #[test]
    fn byte_counts_use_binary_units_as_message_sizes_do() {
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(862_300), "842.1 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn message_sizes_are_whole_binary_units_where_they_can_be() {
        assert_eq!(message_size(0), "0 B");
        assert_eq!(message_size(1023), "1023 B");
        assert_eq!(message_size(8192), "8 KiB");
        assert_eq!(message_size(3000), "2.9 KiB");
        assert_eq!(message_size(1 << 20), "1 MiB");
        assert_eq!(message_size(1536 << 10), "1.5 MiB");
        assert_eq!(message_size(1 << 31), "2 GiB");
    }

    #[test]
    fn v4_mapped_addresses_print_as_ipv4() {
        let mut b = [0u8; 16];
        b[10] = 0xFF;
        b[11] = 0xFF;
        b[12..].copy_from_slice(&[198, 18, 0, 2]);
        assert_eq!(ip_of(b).to_string(), "198.18.0.2");
        let v6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(ip_of(v6.octets()).to_string(), "2001:db8::1");
    }

    #[test]
    fn report_fields_follow_the_flow_stats() {
        let mut agg = Aggregate::new();
        let key = FlowKey {
            dest_qp: 18,
            udp_src_port: 49152,
            ..Default::default()
        };
        let mut s = FlowStats {
            packets: 10,
            bytes: 1000,
            ecn: [1, 2, 3, 4],
            dscp_mask: (1 << 26) | (1 << 48),
            psn_gaps: 1,
            psn_regressions: 2,
            ..Default::default()
        };
        s.seq.lost = 3;
        s.ops[OpClass::Cnp as usize] = 5;
        s.ops[OpClass::Nak as usize] = 1;
        agg.flows.insert(key, s);
        agg.counters.frames = 12;
        agg.counters.skipped[SkipReason::NotIp as usize] = 2;
        let r = agg.report(Source::live(vec!["veth0".into()], "auto"), 2.0);
        let f = &r.flows[0];
        assert_eq!(
            (f.ecn.not_ect, f.ecn.ect1, f.ecn.ect0, f.ecn.ce),
            (1, 2, 3, 4)
        );
        assert_eq!((f.ops.cnp, f.ops.nak, f.ops.send), (5, 1, 0));
        assert_eq!(f.dscp, vec![26, 48]);
        assert_eq!(f.rate_bps, 4000.0);
        assert_eq!(r.totals.skipped["not_ip"], 2);
        assert_eq!(r.totals.skipped.len(), SkipReason::COUNT);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["schema"], SCHEMA);
        assert_eq!(json["flows"][0]["psn"]["missing"], 3);
        let back: Report = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.totals.evicted_packets, 0);
        let mut evicted = agg.clone();
        evicted.counters.roce_packets = 25;
        let e = evicted.report(r.source.clone(), 2.0);
        assert_eq!(e.totals.evicted_packets, 15);
        assert!(
            render_table(&e, 5).contains("flow table full: 15 packets"),
            "{}",
            render_table(&e, 5)
        );
        let table = render_table(&r, 10);
        assert!(table.contains("0x000012"), "{table}");
        assert!(table.contains("not RoCEv2: not_ip 2"), "{table}");
    }

    /// Lines of the block under the header line `header` up to the next blank line.
    fn block<'a>(text: &'a str, header: &str) -> Vec<&'a str> {
        text.lines()
            .skip_while(|l| !l.starts_with(header))
            .take_while(|l| !l.is_empty() && !l.starts_with("  ..."))
            .collect()
    }

    #[test]
    fn columns_stay_aligned_with_long_names_and_plurals_are_right() {
        let mut agg = Aggregate::new();
        let v6 = |last: u8| {
            let mut b: [u8; 16] = "2001:db8:ffff:ffff:ffff:ffff:ffff:0"
                .parse::<Ipv6Addr>()
                .unwrap()
                .octets();
            b[15] = last;
            b
        };
        let stats = |packets| FlowStats {
            packets,
            bytes: packets * 1000,
            ..Default::default()
        };
        agg.flows.insert(
            FlowKey {
                src_ip: v6(1),
                dst_ip: v6(2),
                dest_qp: 0xABCDEF,
                udp_src_port: 49152,
                ..Default::default()
            },
            stats(1_000_000),
        );
        agg.flows.insert(
            FlowKey {
                dest_qp: 1,
                udp_src_port: 4791,
                ..Default::default()
            },
            stats(1),
        );
        agg.counters.frames = 1;
        agg.counters.roce_packets = 1;
        let mut r = agg.report(Source::pcap(vec!["x.pcap".into()], Vec::new()), 1.0);
        r.microbursts = Some(crate::model::series::Microbursts {
            slot_ns: 100_000,
            link_speed_bps: None,
            threshold_percent: 90.0,
            interfaces: ["a-rather-long-capture-file-name-from-rack-7.pcapng", "eth0"]
                .iter()
                .map(|name| crate::model::series::InterfaceBursts {
                    name: name.to_string(),
                    direction: Direction::Ingress,
                    bytes: 0,
                    peak_bps: 0.0,
                    peak_percent: None,
                    peak_at_ns: 0,
                    busy_slots: 0,
                    bursts: 0,
                    longest_burst_ns: 0,
                    longest_burst_at_ns: 0,
                    top: Vec::new(),
                    lost_slots: 0,
                    uncertain_slots: 0,
                })
                .collect(),
        });
        let text = format!("{}{}", render_table(&r, 1), render_timeline(&r));
        for header in ["SOURCE -> DESTINATION", "INTERFACE"] {
            let lines = block(&text, header);
            assert!(lines.len() >= 2, "{header}: {text}");
            // The last column is right-aligned: aligned rows are equally long.
            assert!(
                lines.iter().all(|l| l.len() == lines[0].len()),
                "{header} columns out of line:\n{}",
                lines.join("\n")
            );
        }
        assert!(text.contains("0xabcdef"), "{text}");
        assert!(text.contains(": 1 frame, 1 RoCEv2 packet ("), "{text}");
        assert!(text.contains("2 flows\n"), "{text}");
        assert!(text.contains("  ... 1 more flow (--top N"), "{text}");
        let one = agg.report(Source::pcap(Vec::new(), Vec::new()), 1.0);
        let mut single = one.clone();
        single.flows.truncate(1);
        assert!(render_table(&single, 5).contains(", 1 flow\n"));
    }

    #[test]
    fn rows_that_differ_only_in_their_mirror_say_which_and_every_row_its_dscp() {
        let mut agg = Aggregate::new();
        let key = |mirror: u16| FlowKey {
            dest_qp: 0x11,
            udp_src_port: 49152,
            mirror,
            ..Default::default()
        };
        let stats = |packets: u64, dscp_mask: u64| FlowStats {
            packets,
            bytes: packets * 1000,
            dscp_mask,
            ..Default::default()
        };
        // One flow seen directly, through ERSPAN session 101 and leaving the host.
        agg.flows.insert(key(0), stats(3, 1 << 26));
        agg.flows
            .insert(key(0x8000 | 0x4000 | 101), stats(2, (1 << 26) | 1));
        agg.flows
            .insert(key(observer_common::DIRECTION_EGRESS), stats(1, 1 << 26));
        let r = agg.report(Source::pcap(Vec::new(), Vec::new()), 1.0);
        let text = render_table(&r, 10);
        let lines = block(&text, "SOURCE -> DESTINATION");
        assert!(
            lines[0].contains("  MIRROR  ") && lines[0].contains(" DSCP "),
            "{text}"
        );
        assert!(
            lines[1].contains(" -  ") && lines[1].contains(" 26 "),
            "{text}"
        );
        assert!(
            lines[2].contains("session 101") && lines[2].contains(" 0,26 "),
            "{text}"
        );
        assert!(lines[3].contains("(tx)"), "{text}");
        // Without a difference in mirrors, no MIRROR column.
        let mut direct = r.clone();
        direct.flows.truncate(1);
        assert!(!render_table(&direct, 10).contains("MIRROR"));
    }
}
