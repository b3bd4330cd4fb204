//! `training`: a training job's ring all-reduce among 8 hosts (198.18.80.1 to .8), 12
//! iterations. Each iteration every host computes for 40 ms (each host's time varies by up to
//! 5%, from a fixed seed), then the ring runs 2(n-1) = 14 steps. In a step, a host WRITEs 4
//! packets of 512 bytes to its successor, spread over 1 ms, and the successor ACKs the last.
//! A host's step waits for its own previous step and for its predecessor's (whose data it
//! forwards), so one late host delays the ring, as in NCCL. The truth holds each iteration's
//! start: the first WRITE of its first step.

use observer_common::wire::TRANSPORT_RC;
use observer_core::analysis::jobs::sim::{self, Ring};

use super::qp_v4;
use crate::source::synth::workload::{JobTruth, Workload};
use crate::source::synth::{BASE_TS_NS, SYNDROME_NAK_SEQ};

const MS: u64 = 1_000_000;

/// The ring and its frames.
pub(super) struct Training {
    /// Hosts 198.18.<net>.1..
    pub net: u8,
    pub ring: Ring,
    pub packets_per_step: usize,
    pub packet_len: usize,
    /// When not 0, another pair of hosts (198.18.<net>.20 to .21) WRITEs 2 KiB every 5 ms from
    /// the start until this long after the ring's last frame (other traffic on the wire).
    pub bystander_ns: u64,
}

pub(super) fn training_ring() -> Training {
    Training {
        net: 80,
        ring: Ring {
            hosts: 8,
            iterations: 12,
            compute_ns: 40 * MS,
            jitter: 0.05,
            step_ns: MS,
            seed: 37,
            ..Ring::default()
        },
        packets_per_step: 4,
        packet_len: 512,
        bystander_ns: 0,
    }
}

pub(super) fn training(w: &mut Workload) {
    ring(w, &training_ring());
}

/// `rule-job-straggler`: the same ring, its fourth host (198.18.81.4) computing 25% longer
/// every iteration: it starts its part of each phase late, with nothing on the network.
pub(super) fn rule_job_straggler(w: &mut Workload) {
    let mut t = training_ring();
    t.net = 81;
    t.ring.slow_host = Some((3, 0.25));
    ring(w, &t);
}

/// `training-network-straggler`: the ring with its sixth host's link slow (198.18.83.6): its
/// steps take twice as long, their packets CE-marked, lost and resent; it finishes its part of
/// each phase last while its peers wait on it.
pub(super) fn training_network_straggler(w: &mut Workload) {
    let mut t = training_ring();
    t.net = 83;
    t.ring.slow_link = Some((5, 1.0));
    ring(w, &t);
}

/// `rule-job-irregular-iteration`: the ring with its seventh iteration's collective four times
/// as slow, every host's packets CE-marked, lost and resent (the fabric congested then).
pub(super) fn rule_job_irregular_iteration(w: &mut Workload) {
    let mut t = training_ring();
    t.net = 84;
    t.ring.congested_iteration = Some((6, 4.0));
    ring(w, &t);
}

/// `training-two-jobs`: two rings on the same 8 hosts (198.18.86.1 to .8) at once, each on
/// its own QPs: the training ring's pace, and one computing 25 ms per iteration for 18
/// iterations.
pub(super) fn training_two_jobs(w: &mut Workload) {
    let mut a = training_ring();
    a.net = 86;
    let mut b = training_ring();
    b.net = 86;
    b.ring.compute_ns = 25 * MS;
    b.ring.iterations = 18;
    b.ring.seed = 38;
    rings(w, &[a, b]);
}

/// `training-tree`: the training ring's hosts and pace (198.18.87.1 to .8) in a binary tree
/// all-reduce instead: each host reduces its children's data and sends it to its parent, host
/// .1 broadcasts the result back down, each host to its children one after the other.
pub(super) fn training_tree(w: &mut Workload) {
    let mut t = training_ring();
    t.net = 87;
    t.ring.tree = true;
    ring(w, &t);
}

/// `training-tree-straggler`: the tree (198.18.88.1 to .8) with a leaf, its eighth host
/// (198.18.88.8), computing 25% longer every iteration: it sends its data to its parent late,
/// with nothing on the network; among the leaves (fed by the broadcast before) it computes
/// longest.
pub(super) fn training_tree_straggler(w: &mut Workload) {
    let mut t = training_ring();
    t.net = 88;
    t.ring.tree = true;
    t.ring.slow_host = Some((7, 0.25));
    ring(w, &t);
}

/// `rule-job-hang`: the ring's fourth host (198.18.85.4) never finishes computing for its ninth
/// iteration: its peers send what they can without it and wait. Another pair of hosts goes on
/// writing for 250 ms more: the wire was watched.
pub(super) fn rule_job_hang(w: &mut Workload) {
    let mut t = training_ring();
    t.net = 85;
    t.ring.hang = Some((8, 3));
    t.bystander_ns = 250 * MS;
    ring(w, &t);
}

/// What a host does at a time: WRITE one packet to its successor (or lose it before the
/// observation point), or (as the successor) ACK the host's last packet; in a slowed step also
/// NAK the lost packet, notify congestion, and (the host) go back to the lost packet.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// (host, CE-marked)
    Write(usize, bool),
    Lose(usize),
    Nak(usize),
    Cnp(usize),
    Resend(usize),
    Ack(usize),
    /// The other pair's WRITE and its ACK.
    Bystander,
}

/// The ring `t` as frames (see [`rings`]).
pub(super) fn ring(w: &mut Workload, t: &Training) {
    rings(w, std::slice::from_ref(t));
}

/// Rings as frames, at once: each host's QP to its successor carries its steps (ring `k`'s QPs
/// numbered from 0x2000 + 0x100 k, its frames 3k ns after the first ring's). A slowed step (a
/// slow link's, or a congested iteration's) has every other packet CE-marked and its third
/// packet lost before the observation point (the fourth arrives out of order): the successor
/// NAKs it and sends a CNP, the host goes back to it (a resend of both).
pub(super) fn rings(w: &mut Workload, ts: &[Training]) {
    // Frames 7h + 3k ns past a step's µs stay apart for up to 4 rings of up to 8 hosts (and a
    // resend's second frame 1 ns after its first), and ring k's QPNs (0x100 k on) apart for
    // up to 16 rings.
    assert!(
        (1..=4).contains(&ts.len()) && ts.iter().all(|t| t.ring.hosts <= 8),
        "1 to 4 rings of up to 8 hosts"
    );
    // A resend's frames follow its first 1 ns apart: inside the few ns its host has.
    w.set_frame_gap(1);
    let mut events: Vec<(u64, Event)> = Vec::new();
    // Every ring's QPs, one after another: (ring, host) is `base[ring] + host`.
    let mut qps = Vec::new();
    // Each QP's packet length (its ring's).
    let mut lens = Vec::new();
    let mut base = Vec::new();
    let mut schedules = Vec::new();
    for (k, t) in ts.iter().enumerate() {
        let r = &t.ring;
        let n = r.hosts;
        let schedule = sim::schedule(r, BASE_TS_NS);
        base.push(qps.len());
        // A QP per host and peer it sends to: in a ring its successor; in a tree its parent
        // and children, in the order they first send.
        let mut edges: Vec<(usize, usize)> = Vec::new();
        if r.tree {
            for st in &schedule.steps {
                if !edges.contains(&(st.host, st.to)) {
                    edges.push((st.host, st.to));
                }
            }
        } else {
            edges.extend((0..n).map(|h| (h, (h + 1) % n)));
        }
        let qpn = 0x2000 + 0x100 * k as u32;
        for &(h, to) in &edges {
            let (a, b) = (h as u32, to as u32);
            let pair = if r.tree {
                [qpn + 8 * a + b, qpn + 0x1000 + 8 * b + a]
            } else {
                [qpn + a, qpn + 0x1000 + b]
            };
            qps.push(qp_v4(
                TRANSPORT_RC,
                t.net,
                [h as u8 + 1, to as u8 + 1],
                pair,
                a << 16,
            ));
            lens.push(t.packet_len);
        }
        for st in &schedule.steps {
            let g = base[k]
                + edges
                    .iter()
                    .position(|e| *e == (st.host, st.to))
                    .expect("every step's QP");
            // Every step starts and ends on a whole µs: the hosts' frames a few ns apart keep
            // every frame's time its own.
            let off = 7 * st.host as u64 + 3 * k as u64;
            let spacing = (st.end_ns - st.start_ns) / t.packets_per_step as u64;
            let lossy = st.slowed;
            for p in 0..t.packets_per_step {
                let at = st.start_ns + p as u64 * spacing + off;
                // Every other packet of a slowed step CE-marked, its next to last lost.
                let e = if lossy && p + 2 == t.packets_per_step {
                    Event::Lose(g)
                } else {
                    Event::Write(g, lossy && p % 2 == 0)
                };
                events.push((at, e));
            }
            if lossy {
                events.push((st.end_ns - 1_000 + off, Event::Nak(g)));
                events.push((st.end_ns - 850 + off, Event::Cnp(g)));
                events.push((st.end_ns - 700 + off, Event::Resend(g)));
                events.push((st.end_ns - 400 + off, Event::Ack(g)));
            } else {
                events.push((st.end_ns - 1_000 + off, Event::Ack(g)));
            }
        }
        schedules.push(schedule);
    }
    let first = &ts[0];
    if first.bystander_ns > 0 {
        let end = events.iter().map(|e| e.0).max().unwrap_or(BASE_TS_NS) + first.bystander_ns;
        // 460 ns past a µs: a time none of the rings' frames has (theirs are 0-52, 150-202,
        // 300-353 and 600-652 ns past one).
        let mut at = BASE_TS_NS + 460;
        while at < end {
            events.push((at, Event::Bystander));
            at += 5 * MS;
        }
    }
    events.sort_unstable();
    let mut bystander = qp_v4(TRANSPORT_RC, first.net, [20, 21], [0x4000, 0x4001], 0);
    // Per QP, the PSN lost in its current step.
    let mut lost: Vec<Option<u32>> = vec![None; qps.len()];
    for (ts, e) in events {
        w.at(ts);
        match e {
            Event::Write(h, marked) => {
                // (Every request is the `ce_every`-th with it at 1.)
                qps[h].ce_every = u32::from(marked);
                qps[h].write(w, lens[h]);
            }
            Event::Lose(h) => {
                qps[h].ce_every = 0;
                lost[h] = Some(qps[h].next_psn());
                qps[h].lose_next(1);
                qps[h].write(w, lens[h]);
            }
            Event::Nak(h) => {
                let psn = lost[h].expect("a lost packet before its NAK");
                qps[h].nak(w, psn, SYNDROME_NAK_SEQ);
            }
            Event::Cnp(h) => {
                qps[h].cnp_if_marked(w);
            }
            Event::Resend(h) => {
                let psn = lost[h].take().expect("a lost packet before its resend");
                qps[h].retransmit_from(w, psn);
            }
            Event::Ack(h) => {
                let psn = qps[h].last_psn();
                qps[h].ack(w, psn);
            }
            Event::Bystander => {
                let psn = bystander.write(w, 2048);
                bystander.ack(w, psn);
            }
        }
    }
    for (k, (t, schedule)) in ts.iter().zip(&schedules).enumerate() {
        let r = &t.ring;
        let ip =
            |h: usize| std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, t.net, h as u8 + 1));
        // Each iteration's first WRITE.
        let starts: Vec<u64> = (0..schedule.onsets.len())
            .filter_map(|i| {
                let steps = schedule.steps.iter().filter(|s| s.iteration == i);
                steps
                    .map(|s| s.start_ns + 7 * s.host as u64 + 3 * k as u64)
                    .min()
            })
            .collect();
        w.truth.jobs.push(JobTruth {
            hosts: (0..r.hosts).map(ip).collect(),
            hang_ns: schedule.hang_ns.and(starts.last().copied()),
            iteration_starts_ns: starts,
            slow_host: r.slow_host.map(|(h, _)| ip(h)),
            slow_link: r.slow_link.map(|(h, _)| ip(h)),
        });
    }
}
