//! `cargo xtask bench` (after bench-export): `fabric`'s localization at scale, on evidence
//! generated on a k-ary fat-tree (k=16 by default: 1,024 hosts, 320 switches, 3,072 links):
//! `--qps` QPs (100,000) between random hosts, taking the paths their switches' hashes give
//! them; each trial 1 to 3 links (between switches, chosen at random) losing or CE-marking
//! 0.1% to 1% of the packets that cross them, or delaying them by 10 to 100 µs (weighed on
//! the QPs' ACK latency against their baselines, trials taking loss, CE and delay in turn). Each trial's evidence is localized three ways:
//! with every QP's path known (traced), hashed (the switches' hashes given), and unknown (the
//! topology without hashes: candidates).
//!
//! Printed per way: accuracy (the faulty links are the first suspects, all of them; also per
//! signal), precision
//! (the suspects that are a faulty link), the verdicts, and the median time to localize the
//! trial's QPs on one core, against the target of under 1 s for 100k QPs.

use std::{process::ExitCode, time::Instant};

use integration_tests::median;
use roce_observer::analysis::{
    ecmp::predict::SplitMix64,
    fabric::{
        Options, QpEvidence, Signal, Topology, Verdict, localize,
        sim::{self, Fault, Workload},
        topology::LinkId,
    },
};

/// Under this many seconds to localize 100k QPs on one core.
const TARGET_SECONDS_PER_100K: f64 = 1.0;

#[derive(clap::Parser)]
#[command(name = "bench-fabric")]
struct Args {
    /// The fat-tree's k (even).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(4..=32))]
    k: u32,
    /// QPs per trial.
    #[arg(long, default_value_t = 100_000)]
    qps: usize,
    /// Packets per QP.
    #[arg(long, default_value_t = 2_000)]
    packets: u64,
    /// Trials (random faults).
    #[arg(long, default_value_t = 10)]
    trials: u32,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Default)]
struct Way {
    name: &'static str,
    hits: u32,
    /// Per signal (loss, CE, latency): trials, and those hit.
    by_signal: [(u32, u32); 3],
    named: usize,
    named_right: usize,
    found: u32,
    not_enough: u32,
    clean: u32,
    seconds: Vec<f64>,
}

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    if args.k % 2 != 0 {
        eprintln!("bench-fabric: --k must be even");
        return ExitCode::FAILURE;
    }
    let truth = sim::fat_tree(args.k, Some(1));
    let blind = sim::fat_tree(args.k, None);
    let fabric_links: Vec<LinkId> = (0..truth.links.len() as LinkId)
        .filter(|l| truth.host_end(*l).is_none())
        .collect();
    let mut rng = SplitMix64::new(7);
    let mut ways = [
        Way {
            name: "known",
            ..Way::default()
        },
        Way {
            name: "hashed",
            ..Way::default()
        },
        Way {
            name: "unknown",
            ..Way::default()
        },
    ];
    let opts = Options::default();
    for trial in 0..args.trials {
        let n = 1 + rng.below(3) as usize;
        let mut faulty: Vec<LinkId> = Vec::new();
        while faulty.len() < n {
            let l = fabric_links[rng.below(fabric_links.len() as u32) as usize];
            if !faulty.contains(&l) {
                faulty.push(l);
            }
        }
        let kind = (trial % 3) as usize;
        let signal = [Signal::Loss, Signal::Ce, Signal::Latency][kind];
        let rate = 0.001 + f64::from(rng.below(10)) * 0.001;
        let faults: Vec<Fault> = faulty
            .iter()
            .filter(|_| signal != Signal::Latency)
            .map(|&link| Fault {
                link,
                loss: if signal == Signal::Loss { rate } else { 0.0 },
                ce: if signal == Signal::Ce { rate } else { 0.0 },
            })
            .collect();
        let delays: Vec<sim::Delay> = faulty
            .iter()
            .filter(|_| signal == Signal::Latency)
            .map(|&link| sim::Delay {
                link,
                ns: (rate * 1e7) as u64,
            })
            .collect();
        let work = Workload {
            qps: args.qps,
            packets: args.packets,
            background: 1e-7,
            seed: 1000 + u64::from(trial),
        };
        let ev = sim::evidence_delayed(&truth, &work, &faults, &delays);
        let traced: Vec<QpEvidence> = ev
            .iter()
            .map(|(e, p)| QpEvidence {
                path: Some(p.clone()),
                ..e.clone()
            })
            .collect();
        let untraced: Vec<QpEvidence> = ev.into_iter().map(|(e, _)| e).collect();
        let inputs: [(&Topology, &[QpEvidence]); 3] =
            [(&truth, &traced), (&truth, &untraced), (&blind, &untraced)];
        for (way, (topo, evidence)) in ways.iter_mut().zip(inputs) {
            let t = Instant::now();
            let l = localize(topo, evidence, signal, &opts);
            way.seconds.push(t.elapsed().as_secs_f64());
            match l.verdict {
                Verdict::Found => way.found += 1,
                Verdict::NotEnoughEvidence(_) => way.not_enough += 1,
                Verdict::Clean(_) => way.clean += 1,
            }
            let first: Vec<Option<LinkId>> = l.suspects.iter().take(n).map(|s| s.link).collect();
            way.by_signal[kind].0 += 1;
            if matches!(l.verdict, Verdict::Found)
                && faulty.iter().all(|f| first.contains(&Some(*f)))
            {
                way.hits += 1;
                way.by_signal[kind].1 += 1;
            }
            way.named += l.suspects.len();
            way.named_right += l
                .suspects
                .iter()
                .filter(|s| s.link.is_some_and(|x| faulty.contains(&x)))
                .count();
        }
    }
    let per_100k = |w: &Way| median(&w.seconds) * 100_000.0 / args.qps as f64;
    let share = |(n, hits): (u32, u32)| f64::from(hits) / f64::from(n.max(1));
    if args.json {
        let ways: Vec<serde_json::Value> = ways
            .iter()
            .map(|w| {
                serde_json::json!({
                    "paths": w.name,
                    "accuracy": f64::from(w.hits) / f64::from(args.trials),
                    "accuracy_by_signal": {
                        "loss": share(w.by_signal[0]),
                        "ce": share(w.by_signal[1]),
                        "latency": share(w.by_signal[2]),
                    },
                    "precision": w.named_right as f64 / w.named.max(1) as f64,
                    "found": w.found,
                    "not_enough_evidence": w.not_enough,
                    "clean": w.clean,
                    "median_seconds": median(&w.seconds),
                    "seconds_per_100k": per_100k(w),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "bench": "fabric",
                "k": args.k,
                "hosts": truth.nodes.iter().filter(|n| !n.addresses.is_empty()).count(),
                "links": truth.links.len(),
                "qps": args.qps,
                "trials": args.trials,
                "target_seconds_per_100k": TARGET_SECONDS_PER_100K,
                "ways": ways,
            })
        );
        return ExitCode::SUCCESS;
    }
    println!(
        "bench-fabric: k={} fat-tree ({} hosts, {} links), {} QPs of {} packets, {} trials of 1-3 faulty links at 0.1-1% loss or CE, or 10-100 us of delay",
        args.k,
        truth
            .nodes
            .iter()
            .filter(|n| !n.addresses.is_empty())
            .count(),
        truth.links.len(),
        args.qps,
        args.packets,
        args.trials
    );
    for w in &ways {
        let t = per_100k(w);
        println!(
            "  paths {:<8} accuracy {:>3.0}% (every faulty link first; loss {:.0}%, CE {:.0}%, latency {:.0}%), precision {:>3.0}%; found {}, not enough evidence {}, clean {}; localized in {:.3} s median, {:.3} s per 100k QPs (target under {TARGET_SECONDS_PER_100K} s: {})",
            w.name,
            f64::from(w.hits) * 100.0 / f64::from(args.trials),
            share(w.by_signal[0]) * 100.0,
            share(w.by_signal[1]) * 100.0,
            share(w.by_signal[2]) * 100.0,
            w.named_right as f64 * 100.0 / w.named.max(1) as f64,
            w.found,
            w.not_enough,
            w.clean,
            median(&w.seconds),
            t,
            if t < TARGET_SECONDS_PER_100K {
                "PASS"
            } else {
                "MISS"
            }
        );
    }
    ExitCode::SUCCESS
}
