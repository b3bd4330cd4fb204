//! The terminal view of traced paths (`roce-observer trace`): one line per QP direction, then
//! its hops.

use std::fmt::Write as _;

use crate::model::trace::{Answer, End, Trace};

/// The traces as text.
pub fn render(traces: &[Trace]) -> String {
    let mut s = String::new();
    for t in traces {
        let end = match t.end {
            End::Reached => "reached",
            End::Silent => "silent (the last TTLs unanswered: a RoCE NIC drops the probe)",
            End::Unreachable => "unreachable (a router said so)",
            End::MaxTtl => "max-ttl (routers answered up to the largest TTL)",
        };
        let _ = writeln!(
            s,
            "{}:{} -> {}:4791  DSCP {}  QP {:#x}: {end}",
            t.src, t.sport, t.dst, t.dscp, t.dest_qp
        );
        for h in &t.hops {
            let who = h.address.map_or("*".to_string(), |a| a.to_string());
            let rtt = h.rtt_us.map_or(String::new(), |us| {
                format!("  {:.3} ms", us as f64 / 1000.0)
            });
            let what = match h.answer {
                Some(Answer::TimeExceeded) | None => String::new(),
                Some(Answer::Reached) => "  (the destination)".to_string(),
                Some(Answer::Unreachable { icmp_type, code }) => {
                    format!("  (unreachable: ICMP type {icmp_type} code {code})")
                }
            };
            let _ = writeln!(s, "  {:>2}  {who}{rtt}{what}", h.ttl);
        }
    }
    s
}

/// The traces as the JSON document `fabric --paths` reads.
pub fn write_json(traces: Vec<Trace>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let file = crate::model::trace::TraceFile {
        schema: crate::model::trace::TRACE_SCHEMA.to_string(),
        traces,
    };
    serde_json::to_writer_pretty(&mut *out, &file)?;
    writeln!(out)
}
