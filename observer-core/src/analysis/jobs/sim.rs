//! An all-reduce simulated step by step, as NCCL runs one: each host computes, then
//! - a ring runs 2(n-1) steps, and a host's step waits for its own previous step and for its
//!   predecessor's (whose data it forwards), so one late host delays the ring;
//! - or a binary tree reduces up to host 0 (a host sends to its parent once its children's
//!   data is in) and broadcasts back down (a host sends to its children, one after the other,
//!   once its parent's is in).
//!
//! The analysis's tests bin its schedule; the generator's training scenarios turn it into
//! frames: both check the analysis against the same ground truth, the schedule's own
//! iteration starts.

/// The all-reduce's shape, its pace, and what goes wrong in it.
#[derive(Clone, Debug)]
pub struct Ring {
    pub hosts: usize,
    /// A binary tree (host h's parent is (h - 1) / 2) instead of a ring.
    pub tree: bool,
    pub iterations: usize,
    pub compute_ns: u64,
    /// Each host's compute time varies by up to this share, uniformly (drawn per host and
    /// iteration from `seed`).
    pub jitter: f64,
    pub step_ns: u64,
    /// Idle time after each of a host's steps (a collective's own pauses).
    pub step_pause_ns: u64,
    /// A host computing longer by this share (a host straggler).
    pub slow_host: Option<(usize, f64)>,
    /// A host whose sends take longer by this share (its link or path is slow: a network
    /// straggler).
    pub slow_link: Option<(usize, f64)>,
    /// An iteration whose compute takes this many times longer on every host.
    pub slow_iteration: Option<(usize, f64)>,
    /// An iteration whose steps take this many times longer on every host (the fabric
    /// congested: a slow collective).
    pub congested_iteration: Option<(usize, f64)>,
    /// (iteration, host): the host never finishes computing for that iteration; its peers
    /// send what they can without it and wait (a hang).
    pub hang: Option<(usize, usize)>,
    pub seed: u64,
}

impl Default for Ring {
    fn default() -> Self {
        Ring {
            hosts: 8,
            tree: false,
            iterations: 30,
            compute_ns: 60_000_000,
            jitter: 0.05,
            step_ns: 2_500_000,
            step_pause_ns: 0,
            slow_host: None,
            slow_link: None,
            slow_iteration: None,
            congested_iteration: None,
            hang: None,
            seed: 1,
        }
    }
}

/// One host's step: it sends to `to` (in a ring, its successor) from `start_ns` to `end_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub host: usize,
    pub to: usize,
    pub iteration: usize,
    pub step: usize,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Its link or the fabric made it slower (its packets marked, lost and resent).
    pub slowed: bool,
}

/// What the ring did.
#[derive(Clone, Debug, Default)]
pub struct Schedule {
    /// Every step sent, by iteration, step and host.
    pub steps: Vec<Step>,
    /// Each iteration's start: its first send (ns), for every iteration that began.
    pub onsets: Vec<u64>,
    /// When the hung iteration began (its first send), if one hung.
    pub hang_ns: Option<u64>,
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

/// The all-reduce `r` from `t0_ns`: every step, in time order of iterations. Compute times
/// are whole microseconds (so offsets of a few ns keep hosts' frames apart).
pub fn schedule(r: &Ring, t0_ns: u64) -> Schedule {
    let n = r.hosts.max(2);
    let mut rng = Rng(r.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let compute = |rng: &mut Rng, h: usize, i: usize| -> Option<u64> {
        let mut c = r.compute_ns as f64 * (1.0 + r.jitter * (2.0 * rng.next() - 1.0));
        if let Some((s, share)) = r.slow_host
            && s == h
        {
            c *= 1.0 + share;
        }
        if let Some((s, times)) = r.slow_iteration
            && s == i
        {
            c *= times;
        }
        let hung = r.hang.is_some_and(|(at, host)| at == i && host == h);
        (!hung).then_some(c as u64 / 1_000 * 1_000)
    };
    // A step's length, and whether it was slowed.
    let step_of = |h: usize, i: usize| {
        let mut times = 1.0;
        if let Some((s, share)) = r.slow_link
            && s == h
        {
            times *= 1.0 + share;
        }
        if let Some((s, t)) = r.congested_iteration
            && s == i
        {
            times *= t;
        }
        ((r.step_ns as f64 * times) as u64, times != 1.0)
    };
    let mut out = Schedule::default();
    // When each host is ready to start the next iteration (None: never).
    let mut ready: Vec<Option<u64>> = (0..n)
        .map(|h| compute(&mut rng, h, 0).map(|c| t0_ns + c))
        .collect();
    for i in 0..r.iterations {
        // When each host is done with the iteration (None: never).
        let done = if r.tree {
            tree_iteration(n, i, &ready, &step_of, &mut out)
        } else {
            ring_iteration(n, i, &ready, r.step_pause_ns, &step_of, &mut out)
        };
        let Some(done) = done else { break };
        for h in 0..n {
            ready[h] = done[h].zip(compute(&mut rng, h, i + 1)).map(|(d, c)| d + c);
        }
    }
    out
}

/// The steps of iteration `i` of a ring of `n` hosts ready at `ready`, into `out`: when each
/// host is done (None for all: the iteration never began; a host None: it hung).
fn ring_iteration(
    n: usize,
    i: usize,
    ready: &[Option<u64>],
    pause_ns: u64,
    step_of: &dyn Fn(usize, usize) -> (u64, bool),
    out: &mut Schedule,
) -> Option<Vec<Option<u64>>> {
    let steps = 2 * (n - 1);
    let mut end: Vec<Vec<Option<u64>>> = vec![vec![None; steps]; n];
    let mut first = None::<u64>;
    for s in 0..steps {
        for h in 0..n {
            let pred = (h + n - 1) % n;
            let start = if s == 0 {
                ready[h]
            } else {
                match (end[h][s - 1], end[pred][s - 1]) {
                    (Some(own), Some(p)) => Some((own + pause_ns).max(p)),
                    _ => None,
                }
            };
            let Some(start) = start else { continue };
            let (len, slowed) = step_of(h, i);
            let stop = start + len;
            end[h][s] = Some(stop);
            out.steps.push(Step {
                host: h,
                to: (h + 1) % n,
                iteration: i,
                step: s,
                start_ns: start,
                end_ns: stop,
                slowed,
            });
            first = Some(first.map_or(start, |f| f.min(start)));
        }
    }
    let first = first?;
    out.onsets.push(first);
    if end.iter().any(|e| e[steps - 1].is_none()) {
        out.hang_ns = Some(first);
        return None;
    }
    Some(
        (0..n)
            .map(|h| {
                let pred = (h + n - 1) % n;
                end[h][steps - 1].max(end[pred][steps - 1])
            })
            .collect(),
    )
}

/// The steps of iteration `i` of a binary tree of `n` hosts ready at `ready`, into `out` (see
/// [`ring_iteration`]). Reduce: a host sends to its parent once it is ready and its children's
/// sends have ended (step 0). Broadcast: host 0 once the reduce is in, any other once its
/// parent's send to it has ended, sends to its children one after the other (steps 1, 2).
fn tree_iteration(
    n: usize,
    i: usize,
    ready: &[Option<u64>],
    step_of: &dyn Fn(usize, usize) -> (u64, bool),
    out: &mut Schedule,
) -> Option<Vec<Option<u64>>> {
    let children = |h: usize| (2 * h + 1..=2 * h + 2).filter(move |c| *c < n);
    let mut steps = Vec::new();
    let mut send = |h: usize, to: usize, step: usize, start: u64| -> u64 {
        let (len, slowed) = step_of(h, i);
        steps.push(Step {
            host: h,
            to,
            iteration: i,
            step,
            start_ns: start,
            end_ns: start + len,
            slowed,
        });
        start + len
    };
    // Reduce, leaves first: when each host's data (with its subtree's) is in at its parent, or
    // (host 0) when the whole reduce is in.
    let mut up: Vec<Option<u64>> = vec![None; n];
    for h in (0..n).rev() {
        let inputs: Option<Vec<u64>> = children(h).map(|c| up[c]).collect();
        let start = inputs.and_then(|v| ready[h].map(|r| v.into_iter().fold(r, u64::max)));
        up[h] = match (h, start) {
            (_, None) => None,
            (0, Some(s)) => Some(s),
            (_, Some(s)) => Some(send(h, (h - 1) / 2, 0, s)),
        };
    }
    // Broadcast, root first.
    let mut have: Vec<Option<u64>> = vec![None; n];
    have[0] = up[0];
    let mut done: Vec<Option<u64>> = vec![None; n];
    for h in 0..n {
        let Some(mut at) = have[h] else { continue };
        for (k, c) in children(h).enumerate() {
            at = send(h, c, 1 + k, at);
            have[c] = Some(at);
        }
        done[h] = Some(at);
    }
    steps.sort_by_key(|s| (s.start_ns, s.host));
    let first = steps.first()?.start_ns;
    out.steps.extend(steps);
    out.onsets.push(first);
    if done.iter().any(Option::is_none) {
        out.hang_ns = Some(first);
        return None;
    }
    Some(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hung_host_stops_the_ring_after_its_peers_first_steps() {
        let s = schedule(
            &Ring {
                hosts: 4,
                iterations: 10,
                hang: Some((5, 2)),
                ..Ring::default()
            },
            0,
        );
        assert_eq!(s.onsets.len(), 6);
        assert_eq!(s.hang_ns, Some(s.onsets[5]));
        let last: Vec<&Step> = s.steps.iter().filter(|x| x.iteration == 5).collect();
        // Host 2 sends nothing; host 3 waits for it at its second step, host 0 at its third,
        // host 1 at its fourth.
        let sent = |h| last.iter().filter(|x| x.host == h).count();
        assert_eq!([sent(0), sent(1), sent(2), sent(3)], [2, 3, 0, 1]);
    }

    #[test]
    fn a_slow_link_makes_its_host_finish_last() {
        let s = schedule(
            &Ring {
                slow_link: Some((3, 0.5)),
                jitter: 0.0,
                iterations: 3,
                ..Ring::default()
            },
            0,
        );
        for i in 0..3 {
            let ends = |h| {
                s.steps
                    .iter()
                    .filter(|x| x.iteration == i && x.host == h)
                    .map(|x| x.end_ns)
                    .max()
                    .unwrap()
            };
            assert!((0..8).filter(|h| *h != 3).all(|h| ends(h) < ends(3)));
        }
    }
}
