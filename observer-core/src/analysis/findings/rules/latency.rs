//! Slow answers: the passive ACK or READ latency has a 99th percentile above a threshold, or
//! far above its median (queueing), tied to what coincided with the slow intervals: CE marks,
//! CNPs, PFC pauses, microbursts.

use serde::{Deserialize, Serialize};

use crate::units::{count, duration};
use crate::{
    analysis::findings::{Outcome, Severity, finding},
    model::{
        FlowRef, Report,
        connections::{Connection, LatencySummary},
    },
};

rule! {
    /// The rule ([`ABOUT`]): `latency` below, with its [`Latency`] table.
    LatencyRule {
        name: "latency",
        summary: "Slow answers: p99 ACK or READ latency above a threshold, or far above the median",
        scenario: Some("rule-latency"),
        evaluate: |r, t, _ctx| {
            latency(r, &t.latency)
        },
    }
}

/// The `[latency]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Latency {
    /// A 99th percentile above this (microseconds) is slow. RoCE round trips in a data center
    /// are microseconds to tens of microseconds unloaded; software RoCE (rxe) takes hundreds.
    pub max_p99_us: f64,
    /// A 99th percentile this many times the median is queueing, whatever the distance. (ACK
    /// coalescing and delayed ACKs alone spread ACK latency by ten to a hundred times.)
    pub max_p99_over_p50: f64,
    /// Samples a histogram needs before it is judged.
    pub min_samples: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            max_p99_us: 1000.0,
            max_p99_over_p50: 200.0,
            min_samples: 20,
        }
    }
}

/// Why a summary is slow, if it is.
fn slow(s: &LatencySummary, c: &Latency) -> Option<String> {
    let p99_us = s.p99_ns as f64 / 1e3;
    if p99_us > c.max_p99_us {
        Some(format!("above {} µs", c.max_p99_us))
    } else if s.p50_ns > 0 && s.p99_ns as f64 > c.max_p99_over_p50 * s.p50_ns as f64 {
        Some(format!("over {}x the median", c.max_p99_over_p50))
    } else {
        None
    }
}

fn side_words(side: &str) -> &'static str {
    match side {
        "requests_out" => "this host's requests (fabric and peer round trip)",
        "mirror" => "mirror copies (tap to responder to tap)",
        _ => "requests arriving (answered beyond where they were seen)",
    }
}

fn latency(r: &Report, c: &Latency) -> Outcome {
    let judged: Vec<_> = r
        .latency
        .iter()
        .filter(|l| l.summary.samples >= c.min_samples)
        .collect();
    if judged.is_empty() {
        let samples: u64 = r.latency.iter().map(|l| l.summary.samples).sum();
        return Outcome::InsufficientData(format!(
            "{} of ACK or READ latency, {} needed in one histogram",
            count(samples, "sample"),
            c.min_samples
        ));
    }
    let hits: Vec<_> = judged
        .iter()
        .filter_map(|l| slow(&l.summary, c).map(|why| (*l, why)))
        .collect();
    if hits.is_empty() {
        let worst = judged.iter().map(|l| l.summary.p99_ns).max().unwrap_or(0);
        return Outcome::Passed(format!(
            "{} judged, highest p99 {}",
            count(judged.len() as u64, "latency histogram"),
            duration(worst)
        ));
    }
    // The connections slow on their own, per kind.
    let slow_connections = |kind: &str| -> Vec<&Connection> {
        r.connections
            .iter()
            .filter(|conn| {
                [&conn.a, &conn.b].iter().any(|side| {
                    let s = if kind == "read" {
                        &side.latency.read
                    } else {
                        &side.latency.ack
                    };
                    s.as_ref()
                        .is_some_and(|s| s.samples >= c.min_samples && slow(s, c).is_some())
                })
            })
            .collect()
    };
    let mut parts = Vec::new();
    let mut flows = Vec::new();
    let mut evidence = Vec::new();
    for (l, why) in &hits {
        let conns = slow_connections(&l.kind);
        for conn in &conns {
            for side in [&conn.a, &conn.b] {
                if let Some(k) = side.keys.first() {
                    flows.push(FlowRef::of_key(k));
                }
            }
        }
        let at = l
            .interface
            .as_ref()
            .map_or(String::new(), |i| format!(" on {i}"));
        parts.push(format!(
            "p99 {} latency {} (p50 {}, {}){at} on {}, {}",
            l.kind.to_uppercase(),
            duration(l.summary.p99_ns),
            duration(l.summary.p50_ns),
            why,
            count(conns.len() as u64, "connection"),
            side_words(&l.side),
        ));
        evidence.push(serde_json::json!({
            "kind": l.kind,
            "side": l.side,
            "interface": l.interface,
            "samples": l.summary.samples,
            "p50_ns": l.summary.p50_ns,
            "p99_ns": l.summary.p99_ns,
            "max_ns": l.summary.max_ns,
            "connections": conns.len(),
        }));
    }
    let (during, coincide) = coinciding(r, c);
    let summary = format!("{}{}", parts.join("; "), during);
    finding(
        ABOUT.name,
        Severity::Warning,
        "Slow answers: high RoCE latency",
        summary,
        vec![("histograms", evidence.into()), ("coinciding", coincide)],
        flows,
        "A p99 far above the median is queueing: look at what coincides (PFC pauses on the RoCE priority, CE marks and CNPs: DCQCN reacting, microbursts: incast). Without any of those in view, the queue is beyond this observation point, or the answering side is slow (its CPU for SENDs with RNR retries, its PCIe, its NIC's cache).",
    )
}

/// What coincided in time with the slow intervals of the series (those whose ACK or READ p99
/// exceeded the threshold): CE marks, CNPs, PFC pauses (senders seen then), microbursts
/// (bursts that began then). The phrase for the summary and the evidence.
fn coinciding(r: &Report, c: &Latency) -> (String, serde_json::Value) {
    let Some(series) = &r.series else {
        return (
            String::new(),
            serde_json::json!({"note": "no time series: nothing to tie the latency to"}),
        );
    };
    let Some(lat) = &series.latency else {
        return (String::new(), serde_json::Value::Null);
    };
    let limit_ns = (c.max_p99_us * 1e3) as u64;
    // Slow intervals: a p99 above the threshold, or above the ratio times its median.
    let slow_bins: Vec<usize> = (0..series.t.len())
        .filter(|&i| {
            let at = |v: &Vec<Option<u64>>| v.get(i).copied().flatten();
            let slow = |p99: Option<u64>, p50: Option<u64>| {
                p99.is_some_and(|p| {
                    p > limit_ns
                        || p50.is_some_and(|m| m > 0 && p as f64 > c.max_p99_over_p50 * m as f64)
                })
            };
            slow(at(&lat.ack_p99_ns), at(&lat.ack_p50_ns))
                || slow(at(&lat.read_p99_ns), at(&lat.read_p50_ns))
        })
        .collect();
    if slow_bins.is_empty() {
        return (
            String::new(),
            serde_json::json!({"note": "no single interval slow (p99 above the threshold or the ratio): the slow samples are spread out"}),
        );
    }
    let interval_ns = (series.interval_s * 1e9) as u64;
    let window = |i: usize| {
        let start = series.start_ns + (series.t[i] * 1e9) as u64;
        (start, start + interval_ns)
    };
    let slow_ns: u64 = slow_bins
        .iter()
        .map(|&i| (series.covered_s(i) * 1e9) as u64)
        .sum();
    let mut ce = 0u64;
    let mut packets = 0u64;
    let mut cnps = 0.0;
    for &i in &slow_bins {
        let p = series.total.packets.get(i).copied().unwrap_or(0);
        packets += p;
        ce += (series.total.ce_fraction.get(i).copied().unwrap_or(0.0) * p as f64).round() as u64;
        cnps += series.total.cnp_per_s.get(i).copied().unwrap_or(0.0) * series.covered_s(i);
    }
    let inside = |t: u64| {
        slow_bins
            .iter()
            .any(|&i| (window(i).0..window(i).1).contains(&t))
    };
    let overlaps = |a: u64, b: u64| {
        slow_bins.iter().any(|&i| {
            let (s, e) = window(i);
            a < e && b >= s
        })
    };
    // PFC: per priority, the pause asked for by senders seen during the slow intervals.
    let mut pauses: std::collections::BTreeMap<u8, (u64, Option<u64>)> = Default::default();
    if let Some(pfc) = &r.pfc {
        for src in pfc
            .sources
            .iter()
            .filter(|s| overlaps(s.first_seen_ns, s.last_seen_ns))
        {
            for p in &src.priorities {
                let e = pauses.entry(p.priority).or_default();
                e.0 += p.counts.frames;
                if let Some(ns) = p.counts.pause_ns {
                    *e.1.get_or_insert(0) += ns;
                }
            }
        }
    }
    let bursts: u64 = r.microbursts.as_ref().map_or(0, |m| {
        m.interfaces
            .iter()
            .flat_map(|i| &i.top)
            .filter(|b| inside(b.at_ns))
            .count() as u64
    });
    let mut said = Vec::new();
    for (prio, (frames, ns)) in &pauses {
        said.push(
            match ns {
                Some(ns) => format!("{} of PFC pause on priority {prio}", duration(*ns)),
                None => format!("{} on priority {prio}", count(*frames, "PFC frame")),
            } + " (over the whole observation, from senders active then)",
        );
    }
    if ce > 0 {
        said.push(format!(
            "{:.1}% CE marks",
            100.0 * ce as f64 / packets.max(1) as f64
        ));
    }
    if cnps >= 0.5 {
        said.push(count(cnps.round() as u64, "CNP"));
    }
    if bursts > 0 {
        said.push(count(bursts, "microburst"));
    }
    let phrase = if said.is_empty() {
        format!(
            ", over {} of slow intervals with no CE mark, CNP, PFC pause or microburst in view",
            duration(slow_ns)
        )
    } else {
        format!(
            ", during {} of slow intervals with {}",
            duration(slow_ns),
            said.join(", ")
        )
    };
    let evidence = serde_json::json!({
        "slow_intervals": slow_bins.len(),
        "slow_ns": slow_ns,
        "ce_packets": ce,
        "packets": packets,
        "cnps": cnps.round() as u64,
        "pfc": pauses.iter().map(|(p, (f, ns))| serde_json::json!({"priority": p, "frames": f, "pause_ns": ns})).collect::<Vec<_>>(),
        "microbursts": bursts,
    });
    (phrase, evidence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, insufficient, passed, report, run};
    use crate::model::connections::{LatencyBucket, LatencyScope};

    fn summary(samples: u64, p50_ns: u64, p99_ns: u64) -> LatencySummary {
        LatencySummary {
            samples,
            min_ns: p50_ns / 2,
            p50_ns,
            p90_ns: p99_ns,
            p99_ns,
            max_ns: p99_ns,
            mean_ns: p50_ns,
            buckets: vec![LatencyBucket {
                lo_ns: 0,
                hi_ns: p99_ns + 1,
                count: samples,
            }],
        }
    }

    fn with(samples: u64, p50_ns: u64, p99_ns: u64) -> Report {
        let mut r = report();
        r.latency.push(LatencyScope {
            interface: None,
            ifindex: 0,
            kind: "ack".into(),
            side: "requests_in".into(),
            summary: summary(samples, p50_ns, p99_ns),
        });
        r
    }

    #[test]
    fn the_summary_names_what_coincided_with_the_slow_intervals() {
        use crate::model::series::{LatencySeries, Metrics, Series};
        let mut r = with(300, 18_000, 2_100_000);
        // Three 1 s intervals; the middle one slow, with 10% CE and 50 CNPs/s.
        r.series = Some(Series {
            interval_s: 1.0,
            start_ns: 0,
            t: vec![0.0, 1.0, 2.0],
            total: Metrics {
                bps: vec![0.0; 3],
                packets: vec![100, 100, 100],
                ce_fraction: vec![0.0, 0.1, 0.0],
                cnp_per_s: vec![0.0, 50.0, 0.0],
                naks: vec![0; 3],
                psn_gaps: vec![0; 3],
                retransmissions: vec![0; 3],
            },
            interfaces: Vec::new(),
            flows: Vec::new(),
            latency: Some(LatencySeries {
                ack_samples: vec![100; 3],
                ack_p50_ns: vec![Some(18_000); 3],
                ack_p99_ns: vec![Some(20_000), Some(2_100_000), Some(20_000)],
                read_samples: vec![0; 3],
                read_p50_ns: vec![None; 3],
                read_p99_ns: vec![None; 3],
            }),
            span_s: 3.0,
            interval_fitted: false,
        });
        let f = fired(run(&LatencyRule, &r, &Thresholds::default()));
        assert!(
            f.summary
                .ends_with(", during 1.0 s of slow intervals with 10.0% CE marks, 50 CNPs"),
            "{}",
            f.summary
        );
        // Nothing in view: said so.
        r.series.as_mut().unwrap().total.ce_fraction = vec![0.0; 3];
        r.series.as_mut().unwrap().total.cnp_per_s = vec![0.0; 3];
        let f = fired(run(&LatencyRule, &r, &Thresholds::default()));
        assert!(
            f.summary.ends_with(
                ", over 1.0 s of slow intervals with no CE mark, CNP, PFC pause or microburst in view"
            ),
            "{}",
            f.summary
        );
    }

    #[test]
    fn a_high_p99_fires_a_low_one_passes_too_few_samples_say_so() {
        let t = Thresholds::default();
        let f = fired(run(&LatencyRule, &with(100, 18_000, 2_100_000), &t));
        assert!(
            f.summary.starts_with(
                "p99 ACK latency 2.1 ms (p50 18.0 µs, above 1000 µs) on 0 connections"
            ),
            "{}",
            f.summary
        );
        // Queueing by the ratio, under the absolute threshold.
        let f = fired(run(&LatencyRule, &with(100, 2_000, 900_000), &t));
        assert!(f.summary.contains("over 200x the median"), "{}", f.summary);
        assert_eq!(
            passed(run(&LatencyRule, &with(100, 20_000, 60_000), &t)),
            "1 latency histogram judged, highest p99 60.0 µs"
        );
        assert_eq!(
            insufficient(run(&LatencyRule, &with(5, 18_000, 2_100_000), &t)),
            "5 samples of ACK or READ latency, 20 needed in one histogram"
        );
        assert_eq!(
            insufficient(run(&LatencyRule, &report(), &t)),
            "0 samples of ACK or READ latency, 20 needed in one histogram"
        );
    }
}
