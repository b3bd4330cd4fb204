//! What several observation points of one traffic say together: the one-way time of each
//! direction between two points and their clocks' offset, estimated from both directions.
//!
//! Between points P and Q (P given first) a packet of a direction seen at both gives
//! `s = t_Q - t_P`: its transit plus the clocks' offset `θ` when it went from P to Q, minus its
//! transit plus `θ` the other way. With both directions of two hosts seen, the one whose times
//! are the larger went P to Q; as NTP does, `θ` is taken half-way between the fastest packet
//! each way (`(min s_PQ + max s_QP) / 2`), and their sum (`min s_PQ - max s_QP`) is the round
//! trip's fabric part whatever the clocks. With one direction only, nothing tells the offset
//! from the transit: the times are given as captured, and say so.

use std::collections::BTreeMap;

use crate::aggregate::sightings::{Crossing, CrossingKey, Points as Seen};
use crate::model::ip_of;
use crate::model::points::{ClockOffset, Missing, OneWay, Points};

/// The `points` section of what the files' points saw.
pub fn summarize(seen: &Seen) -> Points {
    let name = |i: u8| seen.files.get(usize::from(i)).cloned().unwrap_or_default();
    let mut out = Points {
        files: seen.files.clone(),
        seen_at: seen.seen_at.clone(),
        ..Points::default()
    };
    while out.seen_at.len() > 1 && out.seen_at.last() == Some(&0) {
        out.seen_at.pop();
    }
    // Both directions of a pair of hosts between two points, together.
    let mut pairs: BTreeMap<CrossingKey, [Option<&Crossing>; 2]> = BTreeMap::new();
    for ((lo, hi, src, dst), c) in &seen.crossings {
        let (a, b, way) = if src <= dst {
            (*src, *dst, 0)
        } else {
            (*dst, *src, 1)
        };
        pairs.entry((*lo, *hi, a, b)).or_default()[way] = Some(c);
    }
    for ((lo, hi, a, b), ways) in pairs {
        match ways {
            [Some(ab), Some(ba)] => {
                // The direction whose times are the larger went from `lo` to `hi`.
                let (fwd, rev, src, dst) = if median(&ab.samples) >= median(&ba.samples) {
                    (ab, ba, a, b)
                } else {
                    (ba, ab, b, a)
                };
                let (Some(fmin), Some(rmax)) = (fwd.samples.iter().min(), rev.samples.iter().max())
                else {
                    continue;
                };
                let theta = (fmin + rmax).div_euclid(2);
                out.clocks.push(ClockOffset {
                    a: name(lo),
                    b: name(hi),
                    hosts: [ip_of(src), ip_of(dst)],
                    offset_ns: theta,
                    round_trip_ns: fmin - rmax,
                });
                let there: Vec<i64> = fwd.samples.iter().map(|s| s - theta).collect();
                let back: Vec<i64> = rev.samples.iter().map(|s| theta - s).collect();
                out.one_way
                    .push(one_way(name(lo), name(hi), src, dst, there, fwd.more, true));
                out.one_way
                    .push(one_way(name(hi), name(lo), dst, src, back, rev.more, true));
            }
            [Some(c), None] | [None, Some(c)] => {
                let (src, dst) = if ways[0].is_some() { (a, b) } else { (b, a) };
                let m = median(&c.samples);
                if m >= 0 {
                    let s = c.samples.clone();
                    out.one_way
                        .push(one_way(name(lo), name(hi), src, dst, s, c.more, false));
                } else {
                    let s = c.samples.iter().map(|s| -s).collect();
                    out.one_way
                        .push(one_way(name(hi), name(lo), src, dst, s, c.more, false));
                }
            }
            [None, None] => {}
        }
    }
    for ((flow, last, at), m) in &seen.missing {
        out.missing.push(Missing {
            src: ip_of(flow.src_ip),
            dst: ip_of(flow.dst_ip),
            dest_qp: flow.dest_qp,
            udp_src_port: flow.udp_src_port,
            last_seen: name(*last),
            not_seen_at: name(*at),
            packets: m.packets,
            psns: m.psns.clone(),
        });
    }
    out.missing.sort_by_key(|m| std::cmp::Reverse(m.packets));
    out
}

fn median(samples: &[i64]) -> i64 {
    let mut s = samples.to_vec();
    s.sort_unstable();
    s.get(s.len() / 2).copied().unwrap_or(0)
}

fn one_way(
    from: String,
    to: String,
    src: [u8; 16],
    dst: [u8; 16],
    mut samples: Vec<i64>,
    more: u64,
    clock_corrected: bool,
) -> OneWay {
    samples.sort_unstable();
    let n = samples.len();
    let at = |q: f64| samples[((n as f64 * q) as usize).min(n - 1)];
    let sum: i128 = samples.iter().map(|s| i128::from(*s)).sum();
    OneWay {
        from,
        to,
        src: ip_of(src),
        dst: ip_of(dst),
        packets: n as u64 + more,
        min_ns: samples[0],
        p50_ns: at(0.5),
        p99_ns: at(0.99),
        max_ns: samples[n - 1],
        mean_ns: (sum / n as i128) as i64,
        clock_corrected,
    }
}
