//! The jobs analysis on ring all-reduces simulated step by step (each host's step waits for its
//! own previous step and for its predecessor's), binned as the pipeline bins them; the truth is
//! the simulation's own iteration starts.

use super::sim::{self, Ring};
use super::*;
use crate::model::Direction;

const BIN: u64 = 1_000_000;
/// Bytes a host sends in a step.
const BYTES_PER_STEP: u64 = 4 << 20;

fn ip(net: u8, h: usize) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(198, 18, net, h as u8 + 1))
}

/// The all-reduce's QPs (hosts 198.18.<net>.1.., a QP per host and peer it sends to) on 1 ms
/// bins, and each iteration's start (its first send, ns).
fn simulate_on(net: u8, r: &Ring) -> (Vec<QpBins>, Vec<u64>) {
    let s = sim::schedule(r, 1_000_000);
    let mut by: BTreeMap<(usize, usize), BTreeMap<u32, Delta>> = BTreeMap::new();
    for st in &s.steps {
        let bins = by.entry((st.host, st.to)).or_default();
        let (first, last) = (st.start_ns / BIN, (st.end_ns - 1) / BIN);
        let per = BYTES_PER_STEP / (last - first + 1);
        for bin in first..=last {
            let d = bins.entry(bin as u32).or_default();
            d.bytes += per;
            d.packets += per / 1024;
            // A slowed step: a tenth of its packets CE-marked, one resent per bin.
            if st.slowed {
                d.ce += per / 10_240;
                d.retransmissions += 1;
            }
        }
    }
    let qps = by
        .into_iter()
        .map(|((h, to), bins)| QpBins {
            flow: FlowRef {
                src_ip: ip(net, h),
                dst_ip: ip(net, to),
                udp_src_port: 49152 + h as u16,
                dest_qp: 0x100 + 0x10 * h as u32 + to as u32,
                direction: Direction::Ingress,
            },
            connected: true,
            data: true,
            bins: bins.into_iter().collect(),
        })
        .collect();
    (qps, s.onsets)
}

fn simulate(r: &Ring) -> (Vec<QpBins>, Vec<u64>) {
    simulate_on(0, r)
}

/// The mean iteration time of the simulation's own starts (ns), over the regular ones (within a
/// quarter of the median, as the period is defined).
fn true_period(onsets: &[u64]) -> f64 {
    let times: Vec<u64> = onsets.windows(2).map(|w| w[1] - w[0]).collect();
    let m = median(&times) as f64;
    let near: Vec<f64> = times
        .iter()
        .map(|t| *t as f64)
        .filter(|t| (t - m).abs() <= 0.25 * m)
        .collect();
    near.iter().sum::<f64>() / near.len() as f64
}

/// An estimator independent of the analysis: the highest peak of the binned bytes'
/// autocorrelation past its first fall below a tenth (the first period: later ones overlap
/// less), placed at the centroid of its lobe above half its height (ns).
fn autocorrelation_period(qps: &[QpBins]) -> f64 {
    let len = qps
        .iter()
        .flat_map(|q| q.bins.last())
        .map(|(b, _)| *b as usize + 1)
        .max()
        .unwrap();
    let mut x = vec![0.0f64; len];
    for q in qps {
        for (b, d) in &q.bins {
            x[*b as usize] += d.bytes as f64;
        }
    }
    let mean = x.iter().sum::<f64>() / len as f64;
    for v in &mut x {
        *v -= mean;
    }
    let r = |lag: usize| -> f64 { (0..len - lag).map(|i| x[i] * x[i + lag]).sum::<f64>() };
    let r0 = r(0);
    let max_lag = len / 3;
    let below = (1..max_lag).find(|&l| r(l) < 0.1 * r0).unwrap();
    let rs: Vec<f64> = (0..=max_lag).map(r).collect();
    let peak = (below..max_lag)
        .max_by(|a, b| rs[*a].total_cmp(&rs[*b]))
        .unwrap();
    // The lobe around the peak (down to half its height each way): its centroid.
    let half = 0.5 * rs[peak];
    let lo = (below..=peak)
        .rev()
        .take_while(|&l| rs[l] > half)
        .last()
        .unwrap();
    let hi = (peak..max_lag)
        .take_while(|&l| rs[l] > half)
        .last()
        .unwrap();
    let (mut sum, mut weight) = (0.0, 0.0);
    for (l, r) in rs.iter().enumerate().take(hi + 1).skip(lo) {
        sum += l as f64 * (r - half);
        weight += r - half;
    }
    sum / weight * BIN as f64
}

fn analyse(qps: &[QpBins]) -> Jobs {
    jobs(BIN, 0, qps, &Options::default())
}

#[test]
fn a_ring_all_reduce_is_one_job_whose_period_is_the_iteration() {
    // Ten iterations are enough for the period within 1%.
    for (seed, iterations) in (1..=10).flat_map(|s| [(s, 11), (s, 30)]) {
        let ring = Ring {
            seed,
            iterations,
            ..Ring::default()
        };
        let (qps, onsets) = simulate(&ring);
        let j = analyse(&qps);
        assert_eq!(j.jobs.len(), 1);
        let job = &j.jobs[0];
        assert_eq!(job.hosts.len(), 8);
        assert_eq!(job.phases.len(), ring.iterations, "seed {seed}");
        let p = job.period.as_ref().unwrap_or_else(|| panic!("{job:?}"));
        let truth = true_period(&onsets);
        let acf = autocorrelation_period(&qps);
        let err = |x: f64| (p.ns as f64 - x).abs() / x;
        assert!(err(truth) < 0.01, "seed {seed}: {} vs truth {truth}", p.ns);
        assert!(
            err(acf) < 0.01,
            "seed {seed}: {} vs autocorrelation {acf}",
            p.ns
        );
        assert_eq!(p.iterations as usize, ring.iterations - 1);
        assert!(p.cv < 0.1, "{p:?}");
        // Every host sends in every phase, starting in its bins.
        for (ph, onset) in job.phases.iter().zip(&onsets) {
            assert_eq!(ph.hosts.len(), 8);
            assert_eq!(ph.start_ns, onset / BIN * BIN);
        }
    }
}

#[test]
fn the_period_is_the_iteration_never_a_step_of_the_ring() {
    // Steps with pauses of their own between them: a regular level below the iteration's.
    let ring = Ring {
        step_pause_ns: 3_000_000,
        ..Ring::default()
    };
    let (qps, onsets) = simulate(&ring);
    let job = &analyse(&qps).jobs[0];
    assert_eq!(job.phases.len(), ring.iterations);
    let p = job.period.as_ref().unwrap();
    assert!(
        (p.ns as f64 / true_period(&onsets) - 1.0).abs() < 0.01,
        "{p:?}"
    );
}

#[test]
fn a_slow_iteration_is_not_the_period_but_shows_in_the_tail() {
    let ring = Ring {
        slow_iteration: Some((12, 3.0)),
        ..Ring::default()
    };
    let (qps, onsets) = simulate(&ring);
    let job = &analyse(&qps).jobs[0];
    let p = job.period.as_ref().unwrap();
    let truth = true_period(&onsets);
    assert!((p.ns as f64 / truth - 1.0).abs() < 0.01, "{p:?} vs {truth}");
    assert_eq!(p.iterations as usize, ring.iterations - 2);
    assert!(job.iteration_p99_ns.unwrap() as f64 > 2.0 * truth);
    assert!((job.iteration_p50_ns.unwrap() as f64 / truth - 1.0).abs() < 0.05);
}

#[test]
fn too_few_iterations_give_no_period_and_say_why() {
    let ring = Ring {
        iterations: 3,
        ..Ring::default()
    };
    let (qps, _) = simulate(&ring);
    let job = &analyse(&qps).jobs[0];
    assert!(job.period.is_none());
    assert_eq!(job.phases.len(), 3);
    assert_eq!(
        job.no_period.as_deref(),
        Some("3 phases: a period needs 3 iterations at least")
    );
    // One burst: one phase, no idle run to tell iterations by.
    let one = Ring {
        iterations: 1,
        ..Ring::default()
    };
    let job = &analyse(&simulate(&one).0).jobs[0];
    assert_eq!(job.phases.len(), 1);
    assert_eq!(
        job.no_period.as_deref(),
        Some("one phase: no idle run of 2 bins or more between its traffic")
    );
    // Three iterations of a ring whose steps pause: three phases and no period, never the
    // steps' (the steps are regular, but shorter than the compute gaps that split the phases).
    let short = Ring {
        iterations: 3,
        step_pause_ns: 3_000_000,
        ..Ring::default()
    };
    let job = &analyse(&simulate(&short).0).jobs[0];
    assert_eq!(job.phases.len(), 3, "{:?}", job.no_period);
    assert!(job.period.is_none());
}

#[test]
fn rings_of_other_hosts_are_other_jobs_and_small_qps_join_nothing() {
    let (mut qps, _) = simulate(&Ring::default());
    let (other, _) = simulate_on(
        1,
        &Ring {
            hosts: 4,
            compute_ns: 90_000_000,
            seed: 7,
            ..Ring::default()
        },
    );
    qps.extend(other);
    // A probe between the two rings' hosts: too small to join them.
    qps.push(QpBins {
        flow: FlowRef {
            src_ip: ip(0, 0),
            dst_ip: ip(1, 0),
            udp_src_port: 4000,
            dest_qp: 0x999,
            direction: Direction::Ingress,
        },
        connected: true,
        data: true,
        bins: vec![(
            5,
            Delta {
                bytes: 1000,
                packets: 1,
                ..Delta::default()
            },
        )],
    });
    let j = analyse(&qps);
    assert_eq!(
        j.jobs.len(),
        2,
        "{:?}",
        j.jobs.iter().map(|j| &j.hosts).collect::<Vec<_>>()
    );
    let sizes: Vec<usize> = j.jobs.iter().map(|j| j.hosts.len()).collect();
    assert!(sizes.contains(&8) && sizes.contains(&4), "{sizes:?}");
    for job in &j.jobs {
        let p = job.period.as_ref().unwrap();
        let want = if job.hosts.len() == 4 { 90.0 } else { 60.0 };
        // Compute plus the collective (2(n-1) steps of 2.5 ms).
        let steps = 2.0 * (job.hosts.len() as f64 - 1.0) * 2.5;
        assert!(
            ((p.ns as f64 / 1e6) / (want + steps) - 1.0).abs() < 0.05,
            "{}: {p:?}",
            job.id
        );
    }
}

#[test]
fn a_slow_host_starts_its_phases_late() {
    let ring = Ring {
        slow_host: Some((3, 0.2)),
        ..Ring::default()
    };
    let (qps, _) = simulate(&ring);
    let job = &analyse(&qps).jobs[0];
    let slow = ip(0, 3);
    let mut last_to_start = 0;
    for ph in &job.phases[1..] {
        let latest = ph
            .hosts
            .iter()
            .max_by_key(|h| (h.start_ns, h.host))
            .unwrap();
        last_to_start += usize::from(latest.host == slow);
    }
    assert!(last_to_start >= job.phases.len() - 2, "{last_to_start}");
}

/// Busy runs of `busy` bins every `period` bins, `count` of them, with a stall of `stall` bins
/// after each iteration in `stalls`: one QP between two hosts.
fn pattern(period: u32, busy: u32, count: u32, stalls: &[u32], stall: u32) -> Vec<QpBins> {
    let mut bins = Vec::new();
    let mut at = 0;
    for i in 0..count {
        for b in 0..busy {
            bins.push((
                at + b,
                Delta {
                    bytes: 10_000,
                    packets: 10,
                    ..Delta::default()
                },
            ));
        }
        at += period;
        if stalls.contains(&i) {
            at += stall;
        }
    }
    let flow = FlowRef {
        src_ip: ip(9, 0),
        dst_ip: ip(9, 1),
        udp_src_port: 5000,
        dest_qp: 0x77,
        direction: Direction::Ingress,
    };
    vec![QpBins {
        flow,
        connected: true,
        data: true,
        bins,
    }]
}

#[test]
fn stalls_and_checkpoints_are_passed_over_for_the_iterations() {
    // Two stalls, unevenly placed, and two evenly placed (checkpoints every 10 iterations,
    // shorter than the 10 iterations between them).
    for stalls in [&[7u32, 19][..], &[9, 19]] {
        let job = &analyse(&pattern(40, 12, 30, stalls, 200)).jobs[0];
        let p = job
            .period
            .as_ref()
            .unwrap_or_else(|| panic!("{stalls:?}: {job:?}"));
        assert_eq!(p.ns, 40 * BIN, "{stalls:?}");
        assert_eq!(job.phases.len(), 30);
    }
}

/// A binary tree all-reduce (reduce up to host 0, broadcast back down): its QPs take turns
/// inside each iteration (leaves' first, the root's last), yet it is one job of its 8 hosts,
/// a phase per iteration with every host in it, and its period within 1%. Its hosts' roles
/// make some start or finish last every phase with none slow: the clean tree names no
/// straggler; its leaves are fed in the phase before (their compute), its inner hosts and
/// root in the phase (their children's data).
#[test]
fn a_tree_all_reduce_is_one_job_its_roles_no_straggler() {
    use crate::analysis::findings::{Outcome, Thresholds, rules, testing};
    let rule = *rules()
        .iter()
        .find(|r| r.name() == "job-straggler")
        .unwrap();
    for seed in 1..=5 {
        let tree = Ring {
            tree: true,
            seed,
            ..Ring::default()
        };
        let (qps, onsets) = simulate(&tree);
        let jobs = analyse(&qps);
        assert_eq!(jobs.jobs.len(), 1, "{jobs:#?}");
        let job = &jobs.jobs[0];
        assert_eq!(job.hosts.len(), 8);
        assert_eq!(job.phases.len(), tree.iterations);
        for (i, (ph, onset)) in job.phases.iter().zip(&onsets).enumerate() {
            assert_eq!(ph.hosts.len(), 8);
            assert_eq!(ph.start_ns, onset / BIN * BIN);
            for h in &ph.hosts {
                let leaf = h.host >= ip(0, 4);
                assert_eq!(h.fed_in_phase, !leaf, "{h:?}");
                assert_eq!(h.fed_ns.is_some(), !leaf || i > 0, "{h:?}");
            }
        }
        let p = job.period.as_ref().unwrap();
        let truth = true_period(&onsets);
        assert!((p.ns as f64 / truth - 1.0).abs() < 0.01, "{p:?} vs {truth}");
        let mut r = testing::report();
        r.jobs = Some(jobs);
        match testing::run(rule, &r, &Thresholds::default()) {
            Outcome::Passed(why) => assert_eq!(
                why,
                "no host late in most phases: 30 phases in 1 job; job-1 compared within the hosts fed alike (hosts in different roles)"
            ),
            _ => panic!("seed {seed}: not passed"),
        }
    }
}

/// The straggler's goals in trees of 8 and 16 hosts, 10 seeds each: a leaf computing 10% longer
/// named with the cause host, a leaf whose link is twice as slow named with the cause network,
/// an inner host computing 30% longer named; and a slowdown the tree hides (an inner host or
/// the root with slack: their children's data comes later than their own compute ends) names
/// no one, as it costs the job under 2% of its period. Four leaves (8 hosts) compare less
/// surely than eight (16 hosts).
#[test]
fn tree_stragglers_are_named_within_their_role() {
    use crate::analysis::findings::{Outcome, Thresholds, rules, testing};
    let rule = *rules()
        .iter()
        .find(|r| r.name() == "job-straggler")
        .unwrap();
    let judge = |tree: &Ring| {
        let (qps, onsets) = simulate(tree);
        let mut r = testing::report();
        r.jobs = Some(analyse(&qps));
        match testing::run(rule, &r, &Thresholds::default()) {
            Outcome::Fired(f) => (Some(f), true_period(&onsets)),
            Outcome::Passed(_) => (None, true_period(&onsets)),
            _ => panic!("neither fired nor passed"),
        }
    };
    let mut figures = Vec::new();
    for hosts in [8usize, 16] {
        let leaf = hosts - 1;
        let cases = [
            (
                "leaf computing 10% longer",
                Some((leaf, 0.10)),
                None,
                "host",
                "compute",
            ),
            (
                "leaf with a slow link",
                None,
                Some((leaf, 1.0)),
                "network",
                "sending",
            ),
            (
                "inner host computing 30% longer",
                Some((1, 0.30)),
                None,
                "host",
                "hold",
            ),
        ];
        for (what, slow_host, slow_link, cause, late_in) in cases {
            let slow = slow_host.or(slow_link).unwrap().0;
            let (mut named, mut samples) = (0, 0);
            for seed in 1..=10 {
                let (f, _) = judge(&Ring {
                    tree: true,
                    hosts,
                    seed,
                    slow_host,
                    slow_link,
                    ..Ring::default()
                });
                let f = f.unwrap_or_else(|| panic!("{hosts} hosts, {what}, seed {seed}: none"));
                assert_eq!(f.evidence["host"], ip(0, slow).to_string(), "{what}");
                assert_eq!(f.evidence["cause"], cause, "{what}");
                assert_eq!(f.evidence["late_in"], late_in, "{what}");
                named += f.evidence["late_samples"].as_u64().unwrap();
                samples += f.evidence["samples"].as_u64().unwrap();
            }
            let share = 100.0 * named as f64 / samples as f64;
            figures.push(format!(
                "{hosts} hosts, {what}: named in {share:.1}% of samples"
            ));
            let want = if hosts == 8 && late_in == "compute" {
                85.0
            } else {
                95.0
            };
            assert!(share >= want, "{figures:?}");
        }
        for (what, slow) in [("inner host 10% longer", 1), ("root 30% longer", 0)] {
            let share = if slow == 0 { 0.30 } else { 0.10 };
            for seed in 1..=5 {
                let tree = Ring {
                    tree: true,
                    hosts,
                    seed,
                    ..Ring::default()
                };
                let (_, clean) = judge(&tree);
                let (f, period) = judge(&Ring {
                    slow_host: Some((slow, share)),
                    ..tree
                });
                match f {
                    Some(f) => assert_eq!(f.evidence["host"], ip(0, slow).to_string()),
                    None => assert!(
                        period < clean * 1.02,
                        "{hosts} hosts, {what}: {period} vs {clean}"
                    ),
                }
            }
        }
    }
    // Four hosts: two leaves and two fed in the phase, too few alike to compare.
    let mut r = testing::report();
    r.jobs = Some(analyse(
        &simulate(&Ring {
            tree: true,
            hosts: 4,
            slow_host: Some((3, 0.3)),
            ..Ring::default()
        })
        .0,
    ));
    match testing::run(rule, &r, &Thresholds::default()) {
        Outcome::InsufficientData(why) => assert_eq!(
            why,
            "job-1's hosts send data to 1 to 2 peers each: hosts in different roles, fewer than 3 fed alike in each phase (a host late by its place cannot be told from a slow one)"
        ),
        _ => panic!("a tree of 4 judged"),
    }
    eprintln!("{}", figures.join("\n"));
}

/// The straggler's goals, over 20 seeds of 30 iterations each: a host computing 10% longer
/// (each host's compute jittered by up to 5%) named in at least 95% of the iterations, a host
/// whose link is twice as slow (its packets marked and resent) likewise, the cause right in at
/// least 90% of the runs; the clean ring never names one.
#[test]
fn stragglers_are_named_in_most_iterations_with_their_cause() {
    use crate::analysis::findings::{Outcome, Thresholds, rules, testing};
    let rule = *rules()
        .iter()
        .find(|r| r.name() == "job-straggler")
        .unwrap();
    let straggler = |ring: &Ring| {
        let mut r = testing::report();
        r.jobs = Some(analyse(&simulate(ring).0));
        match testing::run(rule, &r, &Thresholds::default()) {
            Outcome::Fired(f) => (Some(f), false),
            o => (None, matches!(o, Outcome::Passed(_))),
        }
    };
    let (mut kinds, mut right, mut runs) = (Vec::new(), 0, 0);
    let mut figures = Vec::new();
    for (kind, cause) in [("host", "host"), ("link", "network")] {
        let (mut k_named, mut k_samples, mut k_right) = (0u64, 0u64, 0);
        for seed in 1..=20 {
            let slow = (seed as usize * 3) % 8;
            let ring = match kind {
                "host" => Ring {
                    seed,
                    slow_host: Some((slow, 0.10)),
                    ..Ring::default()
                },
                _ => Ring {
                    seed,
                    slow_link: Some((slow, 1.0)),
                    ..Ring::default()
                },
            };
            runs += 1;
            // Compute samples are iterations (29), phase samples phases (30).
            let (f, _) = straggler(&ring);
            let Some(f) = f else {
                k_samples += 29;
                continue;
            };
            let n = |k: &str| f.evidence[k].as_u64().unwrap();
            k_samples += n("samples");
            if f.evidence["host"] == ip(0, slow).to_string() {
                k_named += n("late_samples");
                if f.evidence["cause"] == cause {
                    k_right += 1;
                }
            }
        }
        figures.push(format!(
            "{kind} straggler: named in {:.1}% of samples, cause right in {k_right} of 20 runs",
            100.0 * k_named as f64 / k_samples as f64
        ));
        kinds.push((k_named, k_samples));
        right += k_right;
    }
    let mut clean = 0;
    for seed in 1..=20 {
        let (f, passed) = straggler(&Ring {
            seed,
            ..Ring::default()
        });
        assert!(f.is_none(), "seed {seed}: {f:?}");
        clean += usize::from(passed);
    }
    figures.push(format!("clean ring: no straggler in {clean} of 20 runs"));
    eprintln!("{}", figures.join("\n"));
    for (named, samples) in kinds {
        assert!(named * 100 >= samples * 95, "{figures:?}");
    }
    assert!(right * 10 >= runs * 9, "{figures:?}");
    assert_eq!(clean, 20);
}

/// A hang is flagged once the wire has been watched for three periods past the hung phase's
/// start (the period and two more: `job_hang.min_silent_periods`), never before.
#[test]
fn a_hang_is_flagged_within_three_periods() {
    use crate::analysis::findings::{Outcome, Thresholds, rules, testing};
    let rule = *rules().iter().find(|r| r.name() == "job-hang").unwrap();
    let ring = Ring {
        iterations: 20,
        hang: Some((12, 5)),
        ..Ring::default()
    };
    let (qps, onsets) = simulate(&ring);
    let period = true_period(&onsets[..onsets.len() - 1]);
    let hung = *onsets.last().unwrap();
    // Another QP seen until `periods` periods after the hang began.
    let watched = |periods: f64| {
        let mut all = qps.clone();
        let until = ((hung as f64 + periods * period) / BIN as f64) as u32;
        all.push(QpBins {
            flow: FlowRef {
                src_ip: ip(7, 0),
                dst_ip: ip(7, 1),
                udp_src_port: 7000,
                dest_qp: 0x55,
                direction: Direction::Ingress,
            },
            connected: true,
            data: true,
            bins: (0..until)
                .step_by(5)
                .map(|b| {
                    (
                        b,
                        Delta {
                            bytes: 4096,
                            packets: 4,
                            ..Delta::default()
                        },
                    )
                })
                .chain([(
                    until,
                    Delta {
                        bytes: 4096,
                        packets: 4,
                        ..Delta::default()
                    },
                )])
                .collect(),
        });
        let mut r = testing::report();
        r.jobs = Some(analyse(&all));
        testing::run(rule, &r, &Thresholds::default())
    };
    assert!(matches!(watched(2.9), Outcome::Passed(_)));
    let Outcome::Fired(f) = watched(3.05) else {
        panic!("no hang after 3 periods")
    };
    assert_eq!(f.evidence["missing_hosts"], ip(0, 5).to_string());
}

/// Two rings on the same 8 hosts at once (their own QPs, periods of 75 and 62 ms): two jobs,
/// each with its own period; one ring after another on new QPs: two jobs; one ring on the same
/// QPs throughout, or a ring with a straggler, stays one.
#[test]
fn two_jobs_on_the_same_hosts_are_kept_apart_by_their_bursts() {
    let (a, a_onsets) = simulate(&Ring {
        seed: 3,
        ..Ring::default()
    });
    let (mut b, b_onsets) = simulate(&Ring {
        seed: 4,
        compute_ns: 37_000_000,
        iterations: 36,
        ..Ring::default()
    });
    for q in &mut b {
        q.flow.dest_qp += 0x1000;
        q.flow.udp_src_port += 1000;
    }
    let mut both = a.clone();
    both.extend(b.iter().cloned());
    let j = analyse(&both);
    assert_eq!(
        j.jobs.len(),
        2,
        "{:?}",
        j.jobs
            .iter()
            .map(|j| (&j.hosts, &j.period))
            .collect::<Vec<_>>()
    );
    let mut periods: Vec<f64> = j
        .jobs
        .iter()
        .map(|j| j.period.as_ref().unwrap().ns as f64)
        .collect();
    periods.sort_by(f64::total_cmp);
    let mut truths = [true_period(&a_onsets), true_period(&b_onsets)];
    truths.sort_by(f64::total_cmp);
    for (p, t) in periods.iter().zip(truths) {
        assert!((p / t - 1.0).abs() < 0.01, "{p} vs {t}");
    }
    for job in &j.jobs {
        assert_eq!(job.hosts.len(), 8);
        assert_eq!(job.qps.len(), 8);
    }
    // One after another: the second ring starts after the first ends, on new QPs.
    let end = a
        .iter()
        .flat_map(|q| q.bins.last())
        .map(|(b, _)| *b)
        .max()
        .unwrap();
    let mut later = b.clone();
    for q in &mut later {
        for (bin, _) in &mut q.bins {
            *bin += end + 500;
        }
    }
    let mut seq = a.clone();
    seq.extend(later);
    assert_eq!(analyse(&seq).jobs.len(), 2);
    // The same QPs throughout (a gap and on again), and a straggler: one job.
    let mut again = a.clone();
    for (q, l) in again.iter_mut().zip(&b) {
        q.bins
            .extend(l.bins.iter().map(|(bin, d)| (bin + end + 500, *d)));
    }
    assert_eq!(analyse(&again).jobs.len(), 1);
    let (slow, _) = simulate(&Ring {
        slow_host: Some((2, 0.25)),
        ..Ring::default()
    });
    assert_eq!(analyse(&slow).jobs.len(), 1);
}

/// QPs between the same hosts busy every `period` bins from `offset`, for `busy` bins each,
/// `count` times (QP numbers from `qp`).
fn turns(qp: u32, period: u32, offset: u32, busy: u32, count: u32) -> Vec<QpBins> {
    (0..4)
        .map(|h| QpBins {
            flow: FlowRef {
                src_ip: ip(5, h),
                dst_ip: ip(5, (h + 1) % 4),
                udp_src_port: 6000 + qp as u16 + h as u16,
                dest_qp: qp + h as u32,
                direction: Direction::Ingress,
            },
            connected: true,
            data: true,
            bins: (0..count)
                .flat_map(|i| (0..busy).map(move |b| offset + i * period + b))
                .map(|b| {
                    (
                        b,
                        Delta {
                            bytes: 10_000,
                            packets: 10,
                            ..Delta::default()
                        },
                    )
                })
                .collect(),
        })
        .collect()
}

/// QPs that take turns within each iteration (a reduce, then a broadcast 40 bins later: no
/// bin in common) are one job; the same shapes on their own clocks (periods 3% apart, drifting)
/// are two.
#[test]
fn qps_taking_turns_in_step_are_one_job_and_drifting_ones_two() {
    let mut qps = turns(0x100, 100, 0, 10, 30);
    qps.extend(turns(0x200, 100, 40, 10, 30));
    let j = analyse(&qps);
    assert_eq!(
        j.jobs.len(),
        1,
        "{:?}",
        j.jobs.iter().map(|j| &j.period).collect::<Vec<_>>()
    );
    assert_eq!(j.jobs[0].qps.len(), 8);
    let mut qps = turns(0x100, 100, 0, 10, 30);
    qps.extend(turns(0x200, 103, 40, 10, 30));
    assert_eq!(analyse(&qps).jobs.len(), 2);
    // The same shape again after the first ends, on new QPs: two jobs.
    let mut qps = turns(0x100, 100, 0, 10, 30);
    qps.extend(turns(0x200, 100, 3500, 10, 30));
    assert_eq!(analyse(&qps).jobs.len(), 2);
}
