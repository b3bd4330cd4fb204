//! `training`: a training job's ring all-reduce among 8 hosts (198.18.80.1 to .8), 12
//! iterations. Each iteration every host computes for 40 ms (each host's time varies by up to
//! 5%, from a fixed seed), then the ring runs 2(n-1) = 14 steps. In a step, a host WRITEs 4
//! packets of 512 bytes to its successor, spread over 1 ms, and the successor ACKs the last.
//! A host's step waits for its own previous step and for its predecessor's (whose data it
//! forwards), so one late host delays the ring, as in NCCL. The truth holds each iteration's
//! start: the first WRITE of its first step.

use super::qp_v4;
use crate::source::synth::BASE_TS_NS;
use crate::source::synth::workload::{JobTruth, Workload};

const MS: u64 = 1_000_000;

/// The ring's shape and pace.
pub(super) struct Ring {
    pub net: u8,
    pub hosts: usize,
    pub iterations: usize,
    pub compute_ns: u64,
    /// Each host's compute time varies by up to this share, uniformly.
    pub jitter: f64,
    pub step_ns: u64,
    pub packets_per_step: usize,
    pub packet_len: usize,
    pub seed: u64,
    /// A host computing longer by this share (a host straggler).
    pub slow_host: Option<(usize, f64)>,
}

pub(super) const TRAINING: Ring = Ring {
    net: 80,
    hosts: 8,
    iterations: 12,
    compute_ns: 40 * MS,
    jitter: 0.05,
    step_ns: MS,
    packets_per_step: 4,
    packet_len: 512,
    seed: 37,
    slow_host: None,
};

pub(super) fn training(w: &mut Workload) {
    ring(w, &TRAINING);
}

/// `rule-job-straggler`: the same ring, its fourth host (198.18.81.4) computing 25% longer
/// every iteration: it starts its part of each phase late, with nothing on the network.
pub(super) fn rule_job_straggler(w: &mut Workload) {
    ring(
        w,
        &Ring {
            net: 81,
            slow_host: Some((3, 0.25)),
            ..TRAINING
        },
    );
}

/// What a host does at a time: WRITE one packet to its successor, or (as the successor) ACK
/// the host's last packet.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Write(usize),
    Ack(usize),
}

/// A deterministic generator (xorshift64*), uniform in [0, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub(super) fn ring(w: &mut Workload, r: &Ring) {
    let n = r.hosts;
    let steps = 2 * (n - 1);
    let mut rng = Rng(r.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let compute = |rng: &mut Rng, h: usize| {
        let slow = match r.slow_host {
            Some((s, share)) if s == h => 1.0 + share,
            _ => 1.0,
        };
        // Whole microseconds: every step starts on one, so the hosts' few-ns offsets keep
        // every frame's time its own.
        let ns = (r.compute_ns as f64 * slow * (1.0 + r.jitter * (2.0 * rng.next() - 1.0))) as u64;
        ns / 1_000 * 1_000
    };
    // The ring step by step, in time: each host's sends and its successor's ACKs.
    let mut events: Vec<(u64, Event)> = Vec::new();
    let mut starts = Vec::new();
    let mut ready: Vec<u64> = (0..n).map(|h| BASE_TS_NS + compute(&mut rng, h)).collect();
    for _ in 0..r.iterations {
        let mut end = vec![vec![0u64; steps]; n];
        let mut first = u64::MAX;
        for s in 0..steps {
            for h in 0..n {
                let pred = (h + n - 1) % n;
                let start = if s == 0 {
                    ready[h]
                } else {
                    end[h][s - 1].max(end[pred][s - 1])
                };
                end[h][s] = start + r.step_ns;
                // The packets spread over the step (a host's own few ns apart from the
                // others', so no two frames share a time), the ACK at its end.
                let spacing = r.step_ns / r.packets_per_step as u64;
                for k in 0..r.packets_per_step as u64 {
                    events.push((start + k * spacing + 7 * h as u64, Event::Write(h)));
                }
                events.push((end[h][s] - 1_000 + 7 * h as u64, Event::Ack(h)));
                first = first.min(start + 7 * h as u64);
            }
        }
        starts.push(first);
        for h in 0..n {
            let pred = (h + n - 1) % n;
            ready[h] = end[h][steps - 1].max(end[pred][steps - 1]) + compute(&mut rng, h);
        }
    }
    events.sort_unstable();
    let mut qps: Vec<_> = (0..n)
        .map(|h| {
            qp_v4(
                observer_common::wire::TRANSPORT_RC,
                r.net,
                [h as u8 + 1, ((h + 1) % n) as u8 + 1],
                [0x2000 + h as u32, 0x3000 + ((h + 1) % n) as u32],
                (h as u32) << 16,
            )
        })
        .collect();
    for (ts, e) in events {
        w.at(ts);
        match e {
            Event::Write(h) => {
                qps[h].write(w, r.packet_len);
            }
            Event::Ack(h) => {
                let psn = qps[h].last_psn();
                qps[h].ack(w, psn);
            }
        }
    }
    w.truth.jobs.push(JobTruth {
        hosts: (0..n)
            .map(|h| std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, r.net, h as u8 + 1)))
            .collect(),
        iteration_starts_ns: starts,
        slow_host: r.slow_host.map(|(h, _)| {
            std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, r.net, h as u8 + 1))
        }),
    });
}
