//! The NIC side for people: the checklist of `check`, and the `nic` section of a report.

use std::fmt::Write as _;

use super::table::{Align, columns};
use crate::model::nic::{Checklist, Nic};
use crate::units::count;

/// The checklist: a line per item (status, item, subject, evidence), then the sources the host
/// lacks.
pub fn render_checklist(c: &Checklist) -> String {
    let rows = c
        .items
        .iter()
        .map(|i| {
            vec![
                i.status.name().to_uppercase(),
                i.item.clone(),
                i.subject.clone(),
                i.evidence.clone(),
            ]
        })
        .collect();
    let mut out = columns(
        &[
            ("STATUS", Align::Left),
            ("ITEM", Align::Left),
            ("ON", Align::Left),
            ("EVIDENCE", Align::Left),
        ],
        rows,
    );
    absent(&mut out, &c.nic);
    let failed = c
        .items
        .iter()
        .filter(|i| i.status == crate::model::nic::ItemStatus::Fail)
        .count();
    let _ = writeln!(
        out,
        "{}",
        if failed == 0 {
            format!(
                "check: nothing failed ({})",
                count(c.items.len() as u64, "item")
            )
        } else {
            format!(
                "check: {} of {} failed",
                count(failed as u64, "item"),
                c.items.len()
            )
        }
    );
    out
}

fn absent(out: &mut String, nic: &Nic) {
    for a in &nic.absent {
        let on = if a.subject.is_empty() {
            String::new()
        } else {
            format!(" of {}", a.subject)
        };
        let _ = writeln!(out, "absent: {}{on}: {}", a.source, a.reason);
    }
}

/// The `nic` section: counters that moved per device port and netdev, per-priority pauses
/// and discards, and the QP table.
pub fn render_nic(nic: &Nic) -> String {
    let mut out = format!("NIC side over {:.1} s\n", nic.seconds);
    let mut rows = Vec::new();
    for d in &nic.devices {
        for p in &d.ports {
            for (name, c) in p.counters.iter().chain(&p.hw_counters) {
                if c.delta > 0 || c.reset {
                    rows.push(vec![
                        format!("{}/{}", d.name, p.port),
                        name.clone(),
                        format!("+{}{}", c.delta, if c.reset { " (reset)" } else { "" }),
                        c.value.to_string(),
                    ]);
                }
            }
        }
    }
    for i in &nic.interfaces {
        for (name, c) in &i.counters {
            if c.delta > 0 || c.reset {
                rows.push(vec![
                    i.name.clone(),
                    name.clone(),
                    format!("+{}{}", c.delta, if c.reset { " (reset)" } else { "" }),
                    c.value.to_string(),
                ]);
            }
        }
    }
    if rows.is_empty() {
        out.push_str("no NIC counter moved\n");
    } else {
        out.push_str(&columns(
            &[
                ("ON", Align::Left),
                ("COUNTER", Align::Left),
                ("DELTA", Align::Right),
                ("VALUE", Align::Right),
            ],
            rows,
        ));
    }
    if !nic.qps.is_empty() {
        let rows = nic
            .qps
            .iter()
            .map(|r| {
                let q = &r.qp;
                vec![
                    format!(
                        "{}/{}",
                        q.device,
                        q.port.map_or("-".into(), |p| p.to_string())
                    ),
                    q.lqpn.to_string(),
                    q.rqpn.map_or("-".into(), |p| p.to_string()),
                    q.qp_type.clone(),
                    q.state.clone(),
                    q.pid.map_or("-".into(), |p| p.to_string()),
                    q.comm.clone().unwrap_or_else(|| "-".into()),
                    job_cell(q.job.as_ref()),
                    r.wire_packets.map_or("-".into(), |p| p.to_string()),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&columns(
            &[
                ("DEV/PORT", Align::Left),
                ("LQPN", Align::Right),
                ("RQPN", Align::Right),
                ("TYPE", Align::Left),
                ("STATE", Align::Left),
                ("PID", Align::Right),
                ("COMMAND", Align::Left),
                ("JOB/RANK", Align::Left),
                ("WIRE PKTS", Align::Right),
            ],
            rows,
        ));
    }
    absent(&mut out, nic);
    out
}

/// A QP's process's job and rank (`slurm:42/3`), `?` when its environment could not be read,
/// `-` when it tells neither.
fn job_cell(job: Option<&crate::model::nic::ProcessJob>) -> String {
    match job {
        Some(j) if j.unread.is_some() => "?".into(),
        Some(j) if j.job.is_some() || j.rank.is_some() => format!(
            "{}/{}",
            j.job.as_deref().unwrap_or("-"),
            j.rank.map_or("-".into(), |r| r.to_string())
        ),
        _ => "-".into(),
    }
}

/// The checklist as `roce-observer/check/v1` JSON, a newline after it.
pub fn write_checklist_json(c: &Checklist, mut out: impl std::io::Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut out, c)?;
    writeln!(out)
}
