//! The evidence of many hosts' reports: each QP once (the sender's egress and the receiver's
//! ingress both show a QP crossing the fabric), with the most packets, losses and marks any
//! of them saw. A sprayed direction (seen on several UDP source ports at once) is left out:
//! its ports' paths differ and its PSN holes are the other ports' packets.

use std::collections::HashMap;

use crate::model::Report;

use super::{
    FabricError,
    localize::{AckShift, QpEvidence},
};

/// A JSON report (`replay --json`, `diagnose --json`) read from `reader` (`origin` names it
/// in errors).
pub fn read_report(reader: impl std::io::Read, origin: &str) -> Result<Report, FabricError> {
    serde_json::from_reader(std::io::BufReader::new(reader)).map_err(|source| FabricError::Report {
        origin: origin.into(),
        source,
    })
}

/// The QP of a control message (the connection manager): not a QP's traffic.
const QP_CM: u32 = 1;

/// The QPs of one report: loss is the PSNs found missing or sent again (whichever is more:
/// the receiver's side sees holes, the sender's the resends of the same PSNs), CE the
/// packets that arrived marked, and the CNPs a connection's side sent go to the direction
/// they answer (its peer's towards it; its busiest port's when it used several).
pub fn evidence_of(report: &Report) -> Vec<QpEvidence> {
    let mut out: Vec<QpEvidence> = report
        .flows
        .iter()
        .filter(|f| f.dest_qp != QP_CM && f.psn.sprayed == 0)
        .map(|f| QpEvidence {
            packets: f.packets,
            lost: f.psn.missing.max(f.psn.retransmissions),
            ce: f.ecn.ce,
            ..QpEvidence::new(f.src_ip, f.dst_ip, f.udp_src_port, f.dest_qp)
        })
        .collect();
    for c in &report.connections {
        for (me, peer) in [(&c.a, &c.b), (&c.b, &c.a)] {
            let Some(qp) = me.qp.filter(|_| me.ops.cnp > 0) else {
                continue;
            };
            let answered = out
                .iter_mut()
                .filter(|e| e.src == peer.ip && e.dst == me.ip && e.dest_qp == qp)
                .max_by_key(|e| (peer.ports.first() == Some(&e.src_port), e.packets));
            if let Some(e) = answered {
                e.cnp += me.ops.cnp;
            }
        }
    }
    out
}

/// The QPs of fleet records: the `qp_intervals` table's JSONEachRow lines (`replay
/// --records DIR`, `run`'s records as ClickHouse holds them) read from `reader`, each QP's
/// intervals summed per exporter, direction, vantage and mirror session (one host's view of
/// it; [`merge`] then takes the most any view saw), its loss the larger of its PSNs missing
/// and resent over them. A count may be a number or a quoted one (some ClickHouse versions
/// quote 64-bit integers); a row without one is refused. `origin` names the file in errors.
pub fn records_evidence(
    reader: impl std::io::BufRead,
    origin: &str,
) -> Result<Vec<QpEvidence>, FabricError> {
    Ok(records_windows(reader, origin, None)?
        .into_values()
        .next()
        .unwrap_or_default())
}

/// [`records_evidence`] per window of `window` ns (by each row's `interval_start_ns`, the
/// windows counted from the epoch), keyed by the window's start; one window (key 0) when
/// `window` is none.
pub fn records_windows(
    reader: impl std::io::BufRead,
    origin: &str,
    window: Option<u64>,
) -> Result<std::collections::BTreeMap<u64, Vec<QpEvidence>>, FabricError> {
    let mut per_window: std::collections::BTreeMap<u64, ViewSums> = Default::default();
    for_each_json_line(reader, origin, |row, bad| {
        let r = TableRow {
            row,
            bad,
            table: "qp_intervals",
        };
        let label = |name: &str| {
            row.get(name)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let key: Key = (
            r.addr("src_addr")?,
            r.addr("dst_addr")?,
            u16::try_from(r.count("src_port")?).map_err(|_| bad("src_port out of range".into()))?,
            u32::try_from(r.count("dest_qp")?).map_err(|_| bad("dest_qp out of range".into()))?,
        );
        let counts = [
            r.count("packets")?,
            r.count("psn_missing")?,
            r.count("psn_retransmissions")?,
            r.count("ce")?,
        ];
        if key.3 == QP_CM {
            return Ok(());
        }
        let start = match window {
            Some(w) => r.count("interval_start_ns")? / w.max(1) * w.max(1),
            None => 0,
        };
        let exporter = match label("exporter") {
            e if e.is_empty() => label("host"),
            e => e,
        };
        let view: View = [
            exporter,
            label("direction"),
            label("vantage"),
            label("mirror_session"),
        ];
        per_window.entry(start).or_default().add(view, key, counts);
        Ok(())
    })?;
    Ok(per_window
        .into_iter()
        .map(|(w, sums)| (w, sums.evidence()))
        .collect())
}

/// ACK latency samples a window needs for its median to count towards a QP's baseline.
const BASELINE_ACKS: u64 = 8;
/// Windows of [`BASELINE_ACKS`] a QP needs for a baseline.
const BASELINE_WINDOWS: usize = 4;

/// A connection side: its address and QP, its peer's.
type SideKey = (std::net::IpAddr, u32, std::net::IpAddr, u32);

/// One side over one window: the packets and CNPs it sent, its busiest UDP source port (of
/// its busiest interval), and its intervals' ACK latency (samples, median).
#[derive(Default)]
struct SideSums {
    packets: u64,
    cnp: u64,
    /// The port and the packets of the interval it came from.
    port: Option<u16>,
    port_packets: u64,
    acks: Vec<(u64, u64)>,
}

impl SideSums {
    /// The window's ACK samples and their median: the sample-weighted median of its
    /// intervals' medians (the table keeps each interval's summary, not its samples).
    fn ack(&self) -> (u64, u64) {
        let samples: u64 = self.acks.iter().map(|a| a.0).sum();
        let mut by_p50 = self.acks.clone();
        by_p50.sort_unstable_by_key(|a| a.1);
        let mut seen = 0;
        for (n, p50) in by_p50 {
            seen += n;
            if seen * 2 >= samples {
                return (samples, p50);
            }
        }
        (samples, 0)
    }
}

/// A side's exporter host, address, QP, peer's address and QP, process, job and rank.
type SideProcess = (
    String,
    std::net::IpAddr,
    u32,
    std::net::IpAddr,
    u32,
    u32,
    String,
    String,
);

/// The processes of fleet records' `connection_sides` table (its JSONEachRow lines, read from
/// `reader`; `origin` names it in errors): each side whose QP its exporter's QP table named,
/// once however many intervals name it (by its exporter's host, address, QP, peer's address
/// and QP, and process), over the intervals that name it. A row without the process's columns
/// (records older than them) is an error of its line.
pub fn records_processes(
    reader: impl std::io::BufRead,
    origin: &str,
) -> Result<Vec<crate::analysis::jobs::PeerProcess>, FabricError> {
    let mut index: HashMap<SideProcess, usize> = HashMap::new();
    let mut out: Vec<crate::analysis::jobs::PeerProcess> = Vec::new();
    for_each_json_line(reader, origin, |row, bad| {
        let r = TableRow {
            row,
            bad,
            table: "connection_sides",
        };
        let pid =
            u32::try_from(r.count("qp_pid")?).map_err(|_| bad("qp_pid out of range".into()))?;
        let (job, rank) = (r.text("qp_job")?, r.text("qp_rank")?);
        let (qp, peer_qp) = (r.count("qp")?, r.count("peer_qp")?);
        if pid == 0 || qp == 0 || peer_qp == 0 {
            return Ok(());
        }
        let (start, end) = (r.count("interval_start_ns")?, r.count("interval_end_ns")?);
        let key = (
            r.text("host")?.to_string(),
            r.addr("addr")?,
            u32::try_from(qp).map_err(|_| bad("qp out of range".into()))?,
            r.addr("peer_addr")?,
            u32::try_from(peer_qp).map_err(|_| bad("peer_qp out of range".into()))?,
            pid,
            job.to_string(),
            rank.to_string(),
        );
        if let Some(&i) = index.get(&key) {
            let p = &mut out[i];
            (p.first_ns, p.last_ns) = (p.first_ns.min(start), p.last_ns.max(end));
            return Ok(());
        }
        let rank = match rank {
            "" => None,
            t => Some(
                t.parse::<u32>()
                    .map_err(|_| bad(format!("qp_rank {t:?} is not a rank")))?,
            ),
        };
        index.insert(key.clone(), out.len());
        let (seen_by, addr, qp, peer_addr, peer_qp, pid, job, _) = key;
        out.push(crate::analysis::jobs::PeerProcess {
            seen_by,
            addr,
            qp,
            peer_addr,
            peer_qp,
            pid,
            process: crate::model::nic::ProcessJob {
                job: (!job.is_empty()).then_some(job),
                rank,
                ..Default::default()
            },
            first_ns: start,
            last_ns: end,
        });
        Ok(())
    })?;
    Ok(out)
}

/// The evidence of fleet records' `connection_sides` table (its JSONEachRow lines, read from
/// `reader`; `origin` names it in errors) per window of `window` ns (one window, key 0, when
/// none), per exporter: a side's requests direction with its ACK latency against its own
/// baseline (the lower quartile of its windows' medians, over at least four windows of eight
/// samples or more: none otherwise), and the answers' way back (its peer's busiest port);
/// and the CNPs a side sent, given to its peer's direction towards it. A side whose QP or
/// peer's QP is not known (0) tells neither.
pub fn sides_windows(
    reader: impl std::io::BufRead,
    origin: &str,
    window: Option<u64>,
) -> Result<std::collections::BTreeMap<u64, Vec<QpEvidence>>, FabricError> {
    let mut sides: HashMap<(String, SideKey), std::collections::BTreeMap<u64, SideSums>> =
        HashMap::new();
    let mut order = Vec::new();
    for_each_json_line(reader, origin, |row, bad| {
        let r = TableRow {
            row,
            bad,
            table: "connection_sides",
        };
        let qp = |name: &str| -> Result<u32, FabricError> {
            u32::try_from(r.count(name)?).map_err(|_| bad(format!("{name} out of range")))
        };
        let key: SideKey = (
            r.addr("addr")?,
            qp("qp")?,
            r.addr("peer_addr")?,
            qp("peer_qp")?,
        );
        let ports = row
            .get("ports")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad("no ports: not a connection_sides row".into()))?;
        let port = match ports.first() {
            Some(p) => Some(
                json_count(Some(p))
                    .and_then(|p| u16::try_from(p).ok())
                    .ok_or_else(|| bad("a port out of range".into()))?,
            ),
            None => None,
        };
        let (packets, cnp, samples, p50) = (
            r.count("packets")?,
            r.count("ops_cnp")?,
            r.count("ack_samples")?,
            r.count("ack_p50_ns")?,
        );
        if key.1 == 0 || key.3 == 0 || key.1 == QP_CM || key.3 == QP_CM {
            return Ok(());
        }
        let start = match window {
            Some(w) => r.count("interval_start_ns")? / w.max(1) * w.max(1),
            None => 0,
        };
        let exporter = ["exporter", "host"]
            .iter()
            .find_map(|n| {
                row.get(*n)
                    .and_then(serde_json::Value::as_str)
                    .filter(|e| !e.is_empty())
            })
            .unwrap_or_default()
            .to_string();
        let side = sides.entry((exporter, key)).or_insert_with_key(|k| {
            order.push(k.clone());
            Default::default()
        });
        let w = side.entry(start).or_default();
        w.packets = w.packets.saturating_add(packets);
        w.cnp = w.cnp.saturating_add(cnp);
        // (The busiest port; on a tie the lowest, so the rows' order never decides.)
        if port.is_some()
            && (w.port.is_none()
                || packets > w.port_packets
                || (packets == w.port_packets && port < w.port))
        {
            (w.port, w.port_packets) = (port, packets);
        }
        if samples > 0 {
            w.acks.push((samples, p50));
        }
        Ok(())
    })?;
    // The sides by exporter and key, not as the rows came (a database's come in any order).
    order.sort_unstable();
    // A side's port in a window, else in any window, as its exporter saw it, else as any
    // exporter did (a host that saw only one direction of the connection): its packets too.
    let mut by_side: HashMap<SideKey, Vec<&str>> = HashMap::new();
    for (e, k) in &order {
        by_side.entry(*k).or_default().push(e);
    }
    let port_of = |exporter: &str, k: &SideKey, start: u64| -> Option<(u16, u64)> {
        let at = |e: &str| sides.get(&(e.to_string(), *k));
        let in_window = |e: &str| {
            at(e)
                .and_then(|ws| ws.get(&start))
                .and_then(|w| w.port.map(|p| (p, w.packets)))
        };
        let any = |e: &str| at(e).and_then(|ws| ws.values().find_map(|w| w.port.map(|p| (p, 0))));
        let others = by_side.get(k).map(Vec::as_slice).unwrap_or_default();
        in_window(exporter)
            .or_else(|| others.iter().find_map(|e| in_window(e)))
            .or_else(|| any(exporter))
            .or_else(|| others.iter().find_map(|e| any(e)))
    };
    let mut out: std::collections::BTreeMap<u64, Vec<QpEvidence>> = Default::default();
    for k in &order {
        let (exporter, (addr, qp, peer, peer_qp)) = k;
        let windows = &sides[k];
        let peer_key: SideKey = (*peer, *peer_qp, *addr, *qp);
        let mut medians: Vec<u64> = windows
            .values()
            .map(SideSums::ack)
            .filter(|a| a.0 >= BASELINE_ACKS)
            .map(|a| a.1)
            .collect();
        medians.sort_unstable();
        // The lower quartile (the lowest of four).
        let baseline =
            (medians.len() >= BASELINE_WINDOWS).then(|| medians[(medians.len() - 1) / 4]);
        for (start, w) in windows {
            let at = out.entry(*start).or_default();
            let peer_port = port_of(exporter, &peer_key, *start);
            if let Some((port, _)) = port_of(exporter, &k.1, *start) {
                let (samples, p50_ns) = w.ack();
                at.push(QpEvidence {
                    packets: w.packets,
                    ack: baseline
                        .filter(|_| samples > 0)
                        .map(|baseline_ns| AckShift {
                            samples,
                            p50_ns,
                            baseline_ns,
                            reverse: peer_port.map(|p| (p.0, *qp)),
                            reverse_path: None,
                        }),
                    ..QpEvidence::new(*addr, *peer, port, *peer_qp)
                });
            }
            if w.cnp > 0
                && let Some((port, packets)) = peer_port
            {
                at.push(QpEvidence {
                    packets,
                    cnp: w.cnp,
                    ..QpEvidence::new(*peer, *addr, port, *qp)
                });
            }
        }
    }
    Ok(out)
}

/// The PFC pause frames each host received, per window of `window` ns (one window, key 0,
/// when none), from fleet records' `pauses` table (its JSONEachRow lines, read from `reader`;
/// `origin` names it in errors): the rows a host's own observer saw arrive (`receive`,
/// vantage `host`), every priority together, keyed by the row's `host` (or its exporter's
/// first part). A mirror's rows name no receiving host and are left out.
pub fn pauses_windows(
    reader: impl std::io::BufRead,
    origin: &str,
    window: Option<u64>,
) -> Result<std::collections::BTreeMap<u64, std::collections::BTreeMap<String, u64>>, FabricError> {
    let mut out: std::collections::BTreeMap<u64, std::collections::BTreeMap<String, u64>> =
        Default::default();
    for_each_json_line(reader, origin, |row, bad| {
        let r = TableRow {
            row,
            bad,
            table: "pauses",
        };
        let (direction, vantage) = (r.text("direction")?, r.text("vantage")?);
        // (XON frames resume, they do not pause.)
        let frames = r.count("frames")?.saturating_sub(r.count("xon")?);
        if direction != "receive" || vantage != "host" || frames == 0 {
            return Ok(());
        }
        let host = match row.get("host").and_then(serde_json::Value::as_str) {
            Some(h) if !h.is_empty() => h.to_string(),
            _ => r
                .text("exporter")?
                .split('/')
                .next()
                .unwrap_or_default()
                .to_string(),
        };
        let start = match window {
            Some(w) => r.count("interval_start_ns")? / w.max(1) * w.max(1),
            None => 0,
        };
        let sum = out.entry(start).or_default().entry(host).or_default();
        *sum = sum.saturating_add(frames);
        Ok(())
    })?;
    Ok(out)
}

/// The NIC counter of PFC pause frames received, as the sidecars export it: a Prometheus
/// query of its increase per scrape target is [`prometheus_pauses`]' input.
pub const PROMETHEUS_PAUSES: &str = "roce_nic_pfc_pause_frames_total";

/// The pause frames each scrape target's NIC received: `result` is the `data.result` of a
/// query of [`PROMETHEUS_PAUSES`]' increase (`dir="rx"`), summed per target (`instance`, its
/// host part: the name or address before the port), rounded.
pub fn prometheus_pauses(
    result: &serde_json::Value,
    origin: &str,
) -> Result<std::collections::BTreeMap<String, u64>, FabricError> {
    let bad = |problem: String| FabricError::Prometheus {
        origin: origin.into(),
        problem,
    };
    let series = result
        .as_array()
        .ok_or_else(|| bad(format!("{PROMETHEUS_PAUSES}: not an instant vector")))?;
    let mut out = std::collections::BTreeMap::new();
    for s in series {
        let instance = s
            .get("metric")
            .and_then(|m| m.get("instance"))
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| {
                bad(format!(
                    "{PROMETHEUS_PAUSES}: a series without its instance"
                ))
            })?;
        if s.get("metric")
            .and_then(|m| m.get("dir"))
            .and_then(serde_json::Value::as_str)
            != Some("rx")
        {
            continue;
        }
        let value = s
            .get("value")
            .and_then(|v| v.get(1))
            .and_then(serde_json::Value::as_str)
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| bad(format!("{PROMETHEUS_PAUSES}: a sample that is not a count")))?;
        // "host:port", "[v6]:port", or a bare name or address (bracketed or not).
        let bare = instance.trim_matches(['[', ']']);
        let host = match instance.rsplit_once(':') {
            _ if bare.parse::<std::net::IpAddr>().is_ok() => bare,
            Some((h, port)) if port.parse::<u16>().is_ok() => h.trim_matches(['[', ']']),
            _ => instance,
        };
        let sum: &mut u64 = out.entry(host.to_string()).or_default();
        *sum = sum.saturating_add(value.round() as u64);
    }
    Ok(out)
}

/// A records table's row, read column by column; what is missing or not of its type is an
/// error of the row's line that names the column and the table.
struct TableRow<'r> {
    row: &'r serde_json::Value,
    bad: &'r dyn Fn(String) -> FabricError,
    table: &'static str,
}

impl<'r> TableRow<'r> {
    fn text(&self, name: &str) -> Result<&'r str, FabricError> {
        self.row
            .get(name)
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| (self.bad)(format!("no {name}: not a {} row", self.table)))
    }

    fn count(&self, name: &str) -> Result<u64, FabricError> {
        json_count(self.row.get(name))
            .ok_or_else(|| (self.bad)(format!("{name} is not a count: not a {} row", self.table)))
    }

    fn addr(&self, name: &str) -> Result<std::net::IpAddr, FabricError> {
        let t = self.text(name)?;
        t.parse()
            .map_err(|_| (self.bad)(format!("{name} {t:?} is not an IP address")))
    }
}

/// A count of a JSON row: a number, or a quoted one (some ClickHouse versions quote 64-bit
/// integers).
fn json_count(v: Option<&serde_json::Value>) -> Option<u64> {
    match v {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.parse().ok(),
        _ => None,
    }
}

/// Calls `each` with every JSON line of `reader` (blank lines skipped) and the error maker for
/// that line (`origin` and its number); a line that cannot be read or is not JSON is an error
/// of that line.
fn for_each_json_line(
    reader: impl std::io::BufRead,
    origin: &str,
    mut each: impl FnMut(&serde_json::Value, &dyn Fn(String) -> FabricError) -> Result<(), FabricError>,
) -> Result<(), FabricError> {
    for (i, line) in reader.lines().enumerate() {
        let bad = |problem: String| FabricError::Records {
            origin: origin.into(),
            line: i + 1,
            problem,
        };
        let line = line.map_err(|e| bad(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| bad(e.to_string()))?;
        each(&value, &bad)?;
    }
    Ok(())
}

type Key = (std::net::IpAddr, std::net::IpAddr, u16, u32);
type View = [String; 4];

/// Each QP's counts (packets, PSNs missing, PSNs resent, CE) summed per view, in the order
/// first seen.
#[derive(Default)]
struct ViewSums {
    by_view: HashMap<(View, Key), [u64; 4]>,
    order: Vec<(View, Key)>,
}

impl ViewSums {
    fn add(&mut self, view: View, key: Key, counts: [u64; 4]) {
        let order = &mut self.order;
        let sum = self.by_view.entry((view.clone(), key)).or_insert_with(|| {
            order.push((view, key));
            [0; 4]
        });
        for (s, c) in sum.iter_mut().zip(counts) {
            *s = s.saturating_add(c);
        }
    }

    fn evidence(self) -> Vec<QpEvidence> {
        let by_view = self.by_view;
        self.order
            .into_iter()
            .map(|view_key| {
                let [packets, missing, resent, ce] = by_view[&view_key];
                let k = view_key.1;
                QpEvidence {
                    packets,
                    lost: missing.max(resent),
                    ce,
                    ..QpEvidence::new(k.0, k.1, k.2, k.3)
                }
            })
            .collect()
    }
}

/// A sidecar's evidence (`run --jsonl`): its QP series summed over the file's intervals, and
/// what its `rest` series holds (QPs beyond `--max-series`, which cannot be placed).
#[derive(Debug, Default)]
pub struct SidecarEvidence {
    pub evidence: Vec<QpEvidence>,
    /// The rest series' packets, PSNs lost (missing or resent, whichever more) and CE.
    pub rest: [u64; 3],
}

/// Whether a JSON line is a sidecar's interval (`run --jsonl`) rather than a fleet record.
pub fn is_sidecar_line(line: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(line)
        .is_ok_and(|v| v.get("qps").is_some_and(serde_json::Value::is_array))
}

/// The QPs of a sidecar's JSON lines (`run --jsonl FILE`: one object per interval, its QP
/// series' deltas): each QP's intervals summed per direction and mirror session. `origin`
/// names the file in errors.
pub fn sidecar_evidence(
    reader: impl std::io::BufRead,
    origin: &str,
) -> Result<SidecarEvidence, FabricError> {
    Ok(sidecar_windows(reader, origin, None)?
        .into_values()
        .next()
        .unwrap_or_default())
}

/// [`sidecar_evidence`] per window of `window` ns (by each line's `start_unix_ns`, the windows
/// counted from the epoch), keyed by the window's start; one window (key 0) when `window` is
/// none.
pub fn sidecar_windows(
    reader: impl std::io::BufRead,
    origin: &str,
    window: Option<u64>,
) -> Result<std::collections::BTreeMap<u64, SidecarEvidence>, FabricError> {
    let mut per_window: std::collections::BTreeMap<u64, (ViewSums, [u64; 4])> = Default::default();
    for_each_json_line(reader, origin, |v, bad| {
        let qps = v
            .get("qps")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| bad("no qps: not a line of run --jsonl".into()))?;
        let start = match window {
            Some(w) => {
                v.get("start_unix_ns")
                    .and_then(serde_json::Value::as_u64)
                    .ok_or_else(|| bad("no start_unix_ns: a line without its time".into()))?
                    / w.max(1)
                    * w.max(1)
            }
            None => 0,
        };
        let (sums, rest) = per_window.entry(start).or_default();
        let counts = |o: &serde_json::Value, what: &str| -> Result<[u64; 4], FabricError> {
            let mut c = [0u64; 4];
            for (slot, name) in
                c.iter_mut()
                    .zip(["packets", "psn_missing", "retransmissions", "ce_packets"])
            {
                *slot = o
                    .get(name)
                    .and_then(serde_json::Value::as_u64)
                    .ok_or_else(|| bad(format!("{what} has no count {name}")))?;
            }
            Ok(c)
        };
        for q in qps {
            let text = |name: &str| q.get(name).and_then(serde_json::Value::as_str);
            let number = |name: &str| q.get(name).and_then(serde_json::Value::as_u64);
            let addr = |name: &str| -> Result<std::net::IpAddr, FabricError> {
                text(name)
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| bad(format!("a QP's {name} is not an IP address")))
            };
            let (Some(sport), Some(qp)) = (
                number("sport").and_then(|p| u16::try_from(p).ok()),
                number("qp").and_then(|p| u32::try_from(p).ok()),
            ) else {
                return Err(bad("a QP without its sport or qp".into()));
            };
            let key: Key = (addr("src")?, addr("dst")?, sport, qp);
            let c = counts(q, "a QP")?;
            if qp == QP_CM {
                continue;
            }
            let view: View = [
                origin.to_string(),
                text("dir").unwrap_or_default().to_string(),
                String::new(),
                text("mirror").unwrap_or_default().to_string(),
            ];
            sums.add(view, key, c);
        }
        if let Some(r) = v.get("rest") {
            for (s, c) in rest.iter_mut().zip(counts(r, "the rest")?) {
                *s = s.saturating_add(c);
            }
        }
        Ok(())
    })?;
    Ok(per_window
        .into_iter()
        .map(|(w, (sums, rest))| {
            (
                w,
                SidecarEvidence {
                    evidence: sums.evidence(),
                    rest: [rest[0], rest[1].max(rest[2]), rest[3]],
                },
            )
        })
        .collect())
}

/// The counters the fleet's Prometheus server holds for each QP (the sidecars' per-QP
/// families), in the order [`prometheus_evidence`] takes their query results.
pub const PROMETHEUS_COUNTERS: [&str; 4] = [
    "roce_qp_packets_total",
    "roce_qp_psn_missing_total",
    "roce_qp_retransmissions_total",
    "roce_qp_ce_packets_total",
];

/// The QPs of a Prometheus server's instant vectors: `results[i]` is the `data.result` array of
/// a query of [`PROMETHEUS_COUNTERS`]`[i]`'s increase over the window. Series are summed per
/// scrape target (`instance`), direction and mirror session, counts rounded (an increase is
/// extrapolated to the window's edges); the `qp="rest"` series go to the rest. `origin` names
/// the server in errors.
pub fn prometheus_evidence(
    results: [&serde_json::Value; 4],
    origin: &str,
) -> Result<SidecarEvidence, FabricError> {
    let bad = |problem: String| FabricError::Prometheus {
        origin: origin.into(),
        problem,
    };
    let mut per_series: HashMap<(View, Key), [u64; 4]> = HashMap::new();
    let mut order = Vec::new();
    let mut rest = [0u64; 4];
    for (i, result) in results.into_iter().enumerate() {
        let series = result
            .as_array()
            .ok_or_else(|| bad(format!("{}: not an instant vector", PROMETHEUS_COUNTERS[i])))?;
        for s in series {
            let label = |name: &str| {
                s.get("metric")
                    .and_then(|m| m.get(name))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
            };
            let value = s
                .get("value")
                .and_then(|v| v.get(1))
                .and_then(serde_json::Value::as_str)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    bad(format!(
                        "{}: a sample that is not a count",
                        PROMETHEUS_COUNTERS[i]
                    ))
                })?;
            let count = value.round() as u64;
            if label("qp") == "rest" {
                rest[i] = rest[i].saturating_add(count);
                continue;
            }
            let qp = label("qp");
            let qp = qp
                .strip_prefix("0x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| qp.parse().ok());
            let (Ok(src), Ok(dst), Ok(sport), Some(qp)) = (
                label("src").parse(),
                label("dst").parse(),
                label("sport").parse::<u16>(),
                qp,
            ) else {
                return Err(bad(format!(
                    "{}: a series without a QP's src, dst, sport and qp labels",
                    PROMETHEUS_COUNTERS[i]
                )));
            };
            if qp == QP_CM {
                continue;
            }
            let view: View = [
                label("instance").to_string(),
                label("dir").to_string(),
                String::new(),
                label("mirror").to_string(),
            ];
            let key: Key = (src, dst, sport, qp);
            let sums = per_series.entry((view.clone(), key)).or_insert_with(|| {
                order.push((view, key));
                [0; 4]
            });
            sums[i] = sums[i].saturating_add(count);
        }
    }
    let mut sums = ViewSums::default();
    for vk in order {
        let c = per_series[&vk];
        sums.add(vk.0, vk.1, c);
    }
    Ok(SidecarEvidence {
        evidence: sums.evidence(),
        rest: [rest[0], rest[1].max(rest[2]), rest[3]],
    })
}

/// The paths traces found (`trace --json` files), host to host by node name, keyed by QP
/// direction (source, destination, UDP source port). A router no node of the topology has,
/// or an unanswered TTL before the last answer, is kept as what it is (its address, or `*`):
/// the localization then counts the trace as not on the topology and places its QP as if
/// untraced.
pub fn traced_paths(
    topo: &super::Topology,
    traces: &[crate::model::trace::Trace],
) -> HashMap<(std::net::IpAddr, std::net::IpAddr, u16), Vec<String>> {
    let name = |a: &std::net::IpAddr| {
        topo.node_of(a)
            .map_or_else(|| a.to_string(), |n| topo.name(n).to_string())
    };
    traces
        .iter()
        .map(|t| {
            let mut path = vec![name(&t.src)];
            match t.routers() {
                Some(routers) => path.extend(routers.iter().map(name)),
                None => path.push("*".into()),
            }
            path.push(name(&t.dst));
            ((t.src, t.dst, t.sport), path)
        })
        .collect()
}

/// A trace file (`trace --json`) read from `reader`.
pub fn read_traces(
    reader: impl std::io::Read,
    origin: &str,
) -> Result<crate::model::trace::TraceFile, FabricError> {
    let file: crate::model::trace::TraceFile =
        serde_json::from_reader(std::io::BufReader::new(reader)).map_err(|source| {
            FabricError::Traces {
                origin: origin.into(),
                problem: source.to_string(),
            }
        })?;
    if file.schema != crate::model::trace::TRACE_SCHEMA {
        return Err(FabricError::Traces {
            origin: origin.into(),
            problem: format!(
                "schema {:?}, not {}",
                file.schema,
                crate::model::trace::TRACE_SCHEMA
            ),
        });
    }
    Ok(file)
}

/// One evidence per QP (addresses, UDP source port, destination QP): where several hosts saw
/// it, the most packets, losses and marks any saw, and a traced path if any had one. In the
/// QPs' order, whatever the inputs' (rows from a database come in any order, and the votes'
/// sums must not change with it).
pub fn merge(evidence: impl IntoIterator<Item = QpEvidence>) -> Vec<QpEvidence> {
    let mut by_qp: HashMap<(std::net::IpAddr, std::net::IpAddr, u16, u32), QpEvidence> =
        HashMap::new();
    for e in evidence {
        let key = (e.src, e.dst, e.src_port, e.dest_qp);
        match by_qp.get_mut(&key) {
            Some(m) => {
                m.packets = m.packets.max(e.packets);
                m.lost = m.lost.max(e.lost);
                m.ce = m.ce.max(e.ce);
                m.cnp = m.cnp.max(e.cnp);
                // The view of the longest round trip: the requester's host sees the whole of
                // it, the responder's only its own answering time, a mirror what lies between
                // it and the responder. A way back any view has.
                let reverse = m.ack.as_ref().and_then(|a| a.reverse);
                // (Ties broken by the median, so the inputs' order never decides.)
                let trip =
                    |a: &Option<AckShift>| a.as_ref().map(|a| (a.baseline_ns, a.samples, a.p50_ns));
                if trip(&e.ack) > trip(&m.ack) {
                    m.ack = e.ack;
                }
                if let Some(a) = &mut m.ack
                    && a.reverse.is_none()
                {
                    a.reverse = reverse;
                }
                if m.path.is_none() {
                    m.path = e.path;
                }
            }
            None => {
                by_qp.insert(key, e);
            }
        }
    }
    let mut merged: Vec<QpEvidence> = by_qp.into_values().collect();
    merged.sort_unstable_by_key(|e| (e.src, e.dst, e.src_port, e.dest_qp));
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qp(port: u16, packets: u64, lost: u64, ce: u64) -> QpEvidence {
        QpEvidence {
            packets,
            lost,
            ce,
            ..QpEvidence::new(
                "198.18.0.1".parse().unwrap(),
                "198.18.0.2".parse().unwrap(),
                port,
                0x11,
            )
        }
    }

    #[test]
    fn a_sidecars_intervals_are_summed_per_qp_and_its_rest_kept_apart() {
        let line = |port: u16, packets: u64, missing: u64, resent: u64, rest_lost: u64| {
            format!(
                r#"{{"qps":[{{"src":"198.18.0.1","dst":"198.18.0.2","qp":17,"sport":{port},"dir":"rx","mirror":"","packets":{packets},"ce_packets":1,"psn_missing":{missing},"retransmissions":{resent}}}],"rest":{{"packets":7,"ce_packets":0,"psn_missing":{rest_lost},"retransmissions":0}}}}"#
            )
        };
        let text = [
            line(1, 100, 2, 0, 1),
            String::new(),
            line(1, 50, 1, 0, 0),
            line(2, 10, 0, 4, 0),
            // The connection manager's QP is not traffic.
            line(1, 5, 0, 0, 0).replace("\"qp\":17", "\"qp\":1"),
        ]
        .join("\n");
        let s = sidecar_evidence(text.as_bytes(), "h0.jsonl").unwrap();
        assert_eq!(s.evidence.len(), 2);
        let e = &s.evidence[0];
        assert_eq!((e.src_port, e.packets, e.lost, e.ce), (1, 150, 3, 2));
        assert_eq!((s.evidence[1].packets, s.evidence[1].lost), (10, 4));
        assert_eq!(s.rest, [28, 1, 0]);
        assert!(is_sidecar_line(&line(1, 1, 0, 0, 0)));
        assert!(!is_sidecar_line(r#"{"src_addr":"198.18.0.1"}"#));
        let e = sidecar_evidence("{\"qps\":[{\"src\":\"x\"}]}".as_bytes(), "h0.jsonl")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "h0.jsonl line 1: a QP without its sport or qp");
    }

    #[test]
    fn a_traced_path_is_named_by_nodes_and_an_unknown_router_kept_as_its_address() {
        use crate::model::trace::{Answer, End, Hop, Trace};
        let topo = super::super::sim::leaf_spine(2, 2, 1, None);
        let (h0, h1) = (
            super::super::sim::host_address(0),
            super::super::sim::host_address(1),
        );
        let hop = |ttl, a: Option<&str>, answer| Hop {
            ttl,
            address: a.map(|a| a.parse().unwrap()),
            rtt_us: None,
            answer,
        };
        let te = Some(Answer::TimeExceeded);
        let trace = |sport, hops| Trace {
            src: h0,
            dst: h1,
            sport,
            dscp: 26,
            dest_qp: 1,
            hops,
            end: End::Silent,
        };
        let traces = [
            // A router on no node of the topology: its address stands in.
            trace(1, vec![hop(1, Some("198.19.9.9"), te), hop(2, None, None)]),
            // A hole before the last answer: not known in full.
            trace(
                2,
                vec![
                    hop(1, None, None),
                    hop(2, Some("198.19.9.8"), te),
                    hop(3, None, None),
                ],
            ),
        ];
        let p = traced_paths(&topo, &traces);
        assert_eq!(p[&(h0, h1, 1)], ["h0", "198.19.9.9", "h1"]);
        assert_eq!(p[&(h0, h1, 2)], ["h0", "*", "h1"]);
    }

    #[test]
    fn prometheus_vectors_are_summed_per_target_and_rounded() {
        let series = |instance: &str, qp: &str, v: &str| {
            serde_json::json!({"metric": {"instance": instance, "src": "198.18.0.1",
                "dst": "198.18.0.2", "qp": qp, "sport": "49152", "dir": "rx", "mirror": ""},
                "value": [1700000000.0, v]})
        };
        let packets = serde_json::json!([
            series("h1:9477", "0x000011", "150.4"),
            series("h2:9477", "0x000011", "149.6"),
            {"metric": {"qp": "rest", "instance": "h1:9477"}, "value": [0, "40"]},
        ]);
        let missing = serde_json::json!([series("h1:9477", "0x000011", "2.2")]);
        let empty = serde_json::json!([]);
        let ce = serde_json::json!([{"metric": {"qp": "rest"}, "value": [0, "3"]}]);
        let s = prometheus_evidence([&packets, &missing, &empty, &ce], "http://p:9090").unwrap();
        assert_eq!(s.evidence.len(), 2);
        assert_eq!(
            (
                s.evidence[0].dest_qp,
                s.evidence[0].packets,
                s.evidence[0].lost
            ),
            (0x11, 150, 2)
        );
        assert_eq!(merge(s.evidence).len(), 1);
        assert_eq!(s.rest, [40, 0, 3]);
        let bad = serde_json::json!([{"metric": {"qp": "0x11"}, "value": [0, "1"]}]);
        let e = prometheus_evidence([&bad, &empty, &empty, &empty], "http://p:9090")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "Prometheus at http://p:9090: roce_qp_packets_total: a series without a QP's src, dst, sport and qp labels"
        );
    }

    #[test]
    fn a_qp_seen_by_two_hosts_is_one() {
        let mut traced = qp(1, 90, 0, 4);
        traced.path = Some(vec!["h0".into(), "l0".into(), "h1".into()]);
        let m = merge([qp(1, 100, 3, 0), qp(2, 5, 0, 0), traced]);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].packets, m[0].lost, m[0].ce), (100, 3, 4));
        assert!(m[0].path.is_some());
        assert_eq!(m[1].src_port, 2);
    }

    #[test]
    fn records_sum_a_qps_intervals_per_view() {
        let row = |direction: &str, packets: u64, missing: u64, resent: u64, ce: u64| {
            serde_json::json!({
                "exporter": "h1/1/1", "direction": direction, "vantage": "host",
                "mirror_session": "", "src_addr": "198.18.0.1", "dst_addr": "2001:db8::2",
                "src_port": 50000, "dest_qp": 66,
                // ClickHouse may quote 64-bit integers.
                "packets": packets.to_string(), "psn_missing": missing,
                "psn_retransmissions": resent, "ce": ce,
            })
            .to_string()
        };
        let text = [
            row("receive", 100, 2, 0, 1),
            row("receive", 50, 1, 0, 0),
            String::new(),
            row("transmit", 160, 0, 5, 0),
        ]
        .join("\n");
        let e = merge(records_evidence(text.as_bytes(), "t.jsonl").unwrap());
        assert_eq!(e.len(), 1);
        // The receiver's intervals summed (150 packets, 3 missing), the sender's (160, 5
        // resent): the most either saw, not their sum.
        assert_eq!(
            (e[0].packets, e[0].lost, e[0].ce, e[0].dest_qp),
            (160, 5, 1, 66)
        );
        let bad = records_evidence(
            "{\"src_addr\": \"x\", \"dst_addr\": \"198.18.0.1\"}".as_bytes(),
            "t.jsonl",
        );
        assert_eq!(
            bad.unwrap_err().to_string(),
            "t.jsonl line 1: src_addr \"x\" is not an IP address"
        );
        let mut no_ce: serde_json::Value =
            serde_json::from_str(&row("receive", 1, 0, 0, 0)).unwrap();
        no_ce.as_object_mut().unwrap().remove("ce");
        let no_ce = no_ce.to_string();
        let bad = records_evidence(no_ce.as_bytes(), "t.jsonl").unwrap_err();
        assert_eq!(
            bad.to_string(),
            "t.jsonl line 1: ce is not a count: not a qp_intervals row"
        );
        let bad = records_evidence("{\n".as_bytes(), "t.jsonl")
            .unwrap_err()
            .to_string();
        assert!(bad.starts_with("t.jsonl line 1: "), "{bad}");
    }

    #[test]
    fn connection_sides_give_ack_shifts_against_a_baseline_and_cnps_to_the_marked_way() {
        // Side a (198.18.0.1, QP 0x11) sends requests to b (2001:db8::2, QP 0x22) from port
        // 50000; b answers from 50001 (another port: NICs differ) and sends CNPs. Two
        // intervals per one-minute window; the fifth window's ACKs are slow.
        let minute = 60_000_000_000u64;
        let row = |side: &str, start: u64, samples: u64, p50: u64, cnp: u64| {
            let (addr, qp, peer, peer_qp, port) = if side == "a" {
                ("198.18.0.1", 0x11, "2001:db8::2", 0x22, 50000)
            } else {
                ("2001:db8::2", 0x22, "198.18.0.1", 0x11, 50001)
            };
            serde_json::json!({
                "exporter": "h1/1/1", "interval_start_ns": start.to_string(), "side": side,
                "addr": addr, "qp": qp, "peer_addr": peer, "peer_qp": peer_qp,
                "ports": [port], "packets": 1000, "ops_cnp": cnp,
                "ack_samples": samples, "ack_p50_ns": p50.to_string(),
            })
            .to_string()
        };
        let mut lines = Vec::new();
        for w in 0..6u64 {
            let slow = if w == 4 { 6 } else { 1 };
            lines.push(row("a", w * minute, 10, 10_000 * slow, 0));
            lines.push(row("a", w * minute + minute / 2, 30, 12_000 * slow, 0));
            lines.push(row("b", w * minute, 0, 0, u64::from(w == 4) * 7));
        }
        let text = lines.join("\n");
        let by_window = sides_windows(text.as_bytes(), "cs.jsonl", Some(minute)).unwrap();
        assert_eq!(by_window.len(), 6);
        let a = |w: u64| {
            by_window[&(w * minute)]
                .iter()
                .find(|e| e.src_port == 50000)
                .unwrap()
                .clone()
        };
        // The window's median is the sample-weighted median of its intervals' (30 of 40
        // samples at 12 µs); the baseline the lower quartile of the six windows' medians.
        let slow = a(4).ack.unwrap();
        assert_eq!(
            (slow.samples, slow.p50_ns, slow.baseline_ns, slow.reverse),
            (40, 72_000, 12_000, Some((50001, 0x11)))
        );
        assert_eq!(a(0).ack.unwrap().p50_ns, 12_000);
        assert_eq!((a(0).dest_qp, a(0).packets), (0x22, 2000));
        // b's CNPs tell of a's packets towards it marked: a's direction, on a's port.
        let marked: Vec<&QpEvidence> = by_window[&(4 * minute)]
            .iter()
            .filter(|e| e.cnp > 0)
            .collect();
        assert_eq!(marked.len(), 1);
        assert_eq!(
            (
                marked[0].src,
                marked[0].src_port,
                marked[0].dest_qp,
                marked[0].cnp
            ),
            ("198.18.0.1".parse().unwrap(), 50000, 0x22, 7)
        );
        // Merged with the QP table's row of that direction: one QP, its CNPs and shift kept.
        let m = merge(by_window[&(4 * minute)].iter().cloned());
        let a_dir: Vec<&QpEvidence> = m.iter().filter(|e| e.src_port == 50000).collect();
        assert_eq!(a_dir.len(), 1);
        assert_eq!((a_dir[0].cnp, a_dir[0].ack.is_some()), (7, true));
        // One window: no baseline.
        let one = sides_windows(text.as_bytes(), "cs.jsonl", None).unwrap();
        assert!(one[&0].iter().all(|e| e.ack.is_none()));
        let bad = sides_windows(
            r#"{"addr":"198.18.0.1","qp":1,"peer_addr":"198.18.0.2","peer_qp":2}"#.as_bytes(),
            "cs.jsonl",
            None,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(bad, "cs.jsonl line 1: no ports: not a connection_sides row");
    }

    #[test]
    fn pauses_are_the_frames_each_host_received() {
        let row = |host: &str, start: u64, direction: &str, vantage: &str, frames: u64| {
            serde_json::json!({
                "exporter": "x9/mlx5_0/1", "host": host, "interval_start_ns": start.to_string(),
                "direction": direction, "vantage": vantage, "priority": 3,
                "frames": frames.to_string(), "xon": u64::from(frames == 6),
            })
            .to_string()
        };
        let text = [
            row("h1", 0, "receive", "host", 6),
            row("h1", 10, "receive", "host", 2),
            row("h1", 70, "receive", "host", 1),
            // Sent, or seen on a mirror: not a host's received pauses.
            row("h1", 0, "transmit", "host", 9),
            row("h2", 0, "receive", "mirror", 9),
            // No host name: the exporter's first part.
            row("", 0, "receive", "host", 4),
        ]
        .join("\n");
        let w = pauses_windows(text.as_bytes(), "p.jsonl", Some(60)).unwrap();
        assert_eq!(w[&0]["h1"], 7);
        assert_eq!(w[&0]["x9"], 4);
        assert_eq!(w[&60]["h1"], 1);
        assert!(!w[&0].contains_key("h2"));
        let bad = pauses_windows("{\"frames\": 1}".as_bytes(), "p.jsonl", None)
            .unwrap_err()
            .to_string();
        assert_eq!(bad, "p.jsonl line 1: no direction: not a pauses row");
        // Prometheus: received only, per target's host part.
        let series = |instance: &str, dir: &str, v: &str| {
            serde_json::json!({"metric": {"instance": instance, "dir": dir, "prio": "3"},
                "value": [0, v]})
        };
        let r = serde_json::json!([
            series("h1:9477", "rx", "6.6"),
            series("h1:9477", "tx", "50"),
            series("[2001:db8::5]:9477", "rx", "2"),
            series("h3", "rx", "1"),
            series("2001:db8::7", "rx", "3"),
            series("[2001:db8::8]", "rx", "4"),
        ]);
        let p = prometheus_pauses(&r, "http://p:9090").unwrap();
        assert_eq!(p["h1"], 7);
        assert_eq!(p["2001:db8::5"], 2);
        assert_eq!(p["h3"], 1);
        assert_eq!(p["2001:db8::7"], 3);
        assert_eq!(p["2001:db8::8"], 4);
        assert_eq!(p.len(), 5);
    }

    #[test]
    fn a_reports_cnps_go_to_the_direction_they_answer() {
        let mut r = crate::aggregate::Aggregate::new()
            .report(crate::model::Source::pcap(Vec::new(), Vec::new()), 1.0);
        let (a, b) = ("198.18.0.1", "198.18.0.2");
        let flow = |src: &str, dst: &str, port: u16, qp: u32, packets: u64| {
            let mut f =
                crate::model::Flow::empty(src.parse().unwrap(), dst.parse().unwrap(), port, qp);
            f.packets = packets;
            f
        };
        // a writes to b's QP 0x22 from two ports (the connection's a.ports names 50000 its
        // busiest; the flows' counts say 50001: the connection's word goes); b's CNPs to a's
        // 0x11.
        r.flows = vec![
            flow(a, b, 50001, 0x22, 900),
            flow(a, b, 50000, 0x22, 10),
            flow(b, a, 50002, 0x11, 40),
        ];
        let ops = serde_json::to_value(crate::model::Ops::default()).unwrap();
        let side = |ip: &str, qp: u32, port: u16, cnp: u64| {
            let mut ops = ops.clone();
            ops["cnp"] = cnp.into();
            serde_json::json!({"ip": ip, "qp": qp, "ports": [port], "packets": 1, "bytes": 1,
                "ops": ops, "ce": 0, "psn": crate::model::connections::PsnSummary::default(),
                "latency": {}})
        };
        r.connections = vec![
            serde_json::from_value(serde_json::json!({
                "transport": "RC", "udp_src_port": 50000, "packets": 2, "bytes": 2,
                "first_seen_ns": 0, "last_seen_ns": 1,
                "a": side(a, 0x11, 50000, 0), "b": side(b, 0x22, 50002, 6),
            }))
            .unwrap(),
        ];
        let e = evidence_of(&r);
        let cnp: Vec<(u16, u64)> = e.iter().map(|e| (e.src_port, e.cnp)).collect();
        assert_eq!(cnp, [(50001, 0), (50000, 6), (50002, 0)]);
        // Without that port among the flows, the busiest flow.
        r.flows.remove(1);
        let e = evidence_of(&r);
        let cnp: Vec<(u16, u64)> = e.iter().map(|e| (e.src_port, e.cnp)).collect();
        assert_eq!(cnp, [(50001, 6), (50002, 0)]);
    }

    #[test]
    fn a_report_gives_its_flows_but_the_connection_manager() {
        let mut r = crate::aggregate::Aggregate::new()
            .report(crate::model::Source::pcap(Vec::new(), Vec::new()), 1.0);
        let mut f = crate::model::Flow::empty(
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
            50000,
            0x42,
        );
        f.packets = 1000;
        f.psn.missing = 2;
        f.psn.retransmissions = 5;
        f.ecn.ce = 7;
        let mut cm = f.clone();
        cm.dest_qp = QP_CM;
        r.flows = vec![f, cm];
        let e = evidence_of(&r);
        assert_eq!(e.len(), 1);
        assert_eq!(
            (
                e[0].src_port,
                e[0].dest_qp,
                e[0].packets,
                e[0].lost,
                e[0].ce
            ),
            (50000, 0x42, 1000, 5, 7)
        );
    }

    /// A side's process over its intervals, once per process; sides without one, and lines
    /// that are not side rows, as the reader says.
    #[test]
    fn records_name_each_sides_process_once_over_its_intervals() {
        let row = |start: u64, pid: u32, rank: &str| {
            format!(
                r#"{{"host":"node-1","addr":"198.18.0.1","qp":16,"peer_addr":"198.18.0.2","peer_qp":"17","qp_pid":{pid},"qp_job":"slurm:42","qp_rank":"{rank}","interval_start_ns":{start},"interval_end_ns":{}}}"#,
                start + 10
            )
        };
        let lines = [
            row(100, 70, "3"),
            row(300, 70, "3"),
            row(200, 70, "3"),
            // The QP's number reused by another process, and a side of no known process.
            row(500, 71, ""),
            row(600, 0, ""),
        ]
        .join("\n");
        let got = records_processes(lines.as_bytes(), "sides").unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        let p = &got[0];
        assert_eq!(
            (p.seen_by.as_str(), p.qp, p.peer_qp, p.pid),
            ("node-1", 16, 17, 70)
        );
        assert_eq!(
            (p.addr.to_string(), p.peer_addr.to_string()),
            ("198.18.0.1".into(), "198.18.0.2".into())
        );
        assert_eq!((p.first_ns, p.last_ns), (100, 310));
        assert_eq!(
            (p.process.rank, p.process.job.as_deref()),
            (Some(3), Some("slurm:42"))
        );
        assert_eq!(
            (got[1].pid, got[1].process.rank, got[1].first_ns),
            (71, None, 500)
        );
        let bad = format!("{}\n{}", row(100, 70, "3"), row(100, 70, "x"));
        assert_eq!(
            records_processes(bad.as_bytes(), "sides")
                .unwrap_err()
                .to_string(),
            "sides line 2: qp_rank \"x\" is not a rank"
        );
    }
}
