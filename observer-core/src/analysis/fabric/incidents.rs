//! One incident is one incident: a suspect named window after window is followed as one, with
//! hysteresis. It opens in the first window that names it; a window that names it again keeps
//! it open; a clean window (the evidence weighed and nothing of it) counts towards its end, and
//! `quiet` of them in a row close it; a window whose evidence cannot tell neither keeps it nor
//! counts towards its end. A suspect named again after it closed is a new incident.

use std::collections::BTreeMap;

use super::localize::{Localization, Signal, SuspectKind, Verdict};

/// One window's localizations (one per signal), with its bounds (unix ns).
#[derive(Clone, Debug)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
    pub runs: Vec<Localization>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Incident {
    pub signal: Signal,
    pub kind: SuspectKind,
    pub name: String,
    /// The first window that named it, and the end of the last one.
    pub start_ns: u64,
    pub end_ns: u64,
    /// The windows that named it.
    pub windows: usize,
    /// Its largest share of bad QPs among those crossing it, and its bad packets summed.
    pub peak_rate: f64,
    pub bad_packets: u64,
    /// Still open after the last window (fewer than `quiet` clean windows since).
    pub open: bool,
}

/// The incidents of `windows` (in time order), closed after `quiet` clean windows in a row.
pub fn incidents(windows: &[Window], quiet: usize) -> Vec<Incident> {
    let quiet = quiet.max(1);
    // Open incidents by (signal, kind, name): their index in `out` and clean windows since.
    let mut open: BTreeMap<(&'static str, &'static str, String), (usize, usize)> = BTreeMap::new();
    let mut out: Vec<Incident> = Vec::new();
    for w in windows {
        for l in &w.runs {
            let named: Vec<_> = match l.verdict {
                Verdict::Found => l.suspects.iter().collect(),
                _ => Vec::new(),
            };
            for s in &named {
                let key = (l.signal.name(), s.kind.name(), s.name.clone());
                match open.get_mut(&key) {
                    Some((i, clean)) => {
                        let inc = &mut out[*i];
                        inc.end_ns = w.end_ns;
                        inc.windows += 1;
                        inc.peak_rate = inc.peak_rate.max(s.rate);
                        inc.bad_packets += s.bad_packets;
                        *clean = 0;
                    }
                    None => {
                        open.insert(key, (out.len(), 0));
                        out.push(Incident {
                            signal: l.signal,
                            kind: s.kind,
                            name: s.name.clone(),
                            start_ns: w.start_ns,
                            end_ns: w.end_ns,
                            windows: 1,
                            peak_rate: s.rate,
                            bad_packets: s.bad_packets,
                            open: true,
                        });
                    }
                }
            }
            // The signal's other open incidents: a clean window counts towards their end; one
            // that cannot tell does not.
            let counts = !matches!(l.verdict, Verdict::NotEnoughEvidence(_));
            let signal = l.signal.name();
            let mut closed = Vec::new();
            for (key, (i, clean)) in open.iter_mut() {
                if key.0 != signal
                    || named
                        .iter()
                        .any(|s| s.kind.name() == key.1 && s.name == key.2)
                {
                    continue;
                }
                if counts {
                    *clean += 1;
                }
                if *clean >= quiet {
                    out[*i].open = false;
                    closed.push(key.clone());
                }
            }
            for k in closed {
                open.remove(&k);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::fabric::{Options, localize, sim};

    #[test]
    fn a_fault_with_a_gap_is_one_incident_and_one_after_quiet_windows_another() {
        let truth = sim::leaf_spine(2, 3, 2, Some(4));
        let link = truth
            .link_between(truth.node("l1").unwrap(), truth.node("s0").unwrap())
            .unwrap();
        let run = |faulty: bool, seed: u64| {
            let work = sim::Workload {
                qps: 300,
                packets: 2000,
                background: 0.0,
                seed,
            };
            let faults: Vec<sim::Fault> = if faulty {
                vec![sim::Fault {
                    link,
                    loss: 0.01,
                    ce: 0.0,
                }]
            } else {
                Vec::new()
            };
            let ev: Vec<_> = sim::evidence(&truth, &work, &faults)
                .into_iter()
                .map(|(e, _)| e)
                .collect();
            vec![localize(&truth, &ev, Signal::Loss, &Options::default())]
        };
        // Faulty, faulty, clean, faulty (one gap: the same incident), clean, clean (closed),
        // faulty again (a new one, still open).
        let pattern = [true, true, false, true, false, false, true];
        let windows: Vec<Window> = pattern
            .iter()
            .enumerate()
            .map(|(i, f)| Window {
                start_ns: i as u64 * 60_000_000_000,
                end_ns: (i as u64 + 1) * 60_000_000_000,
                runs: run(*f, i as u64),
            })
            .collect();
        let inc = incidents(&windows, 2);
        assert_eq!(inc.len(), 2, "{inc:?}");
        assert_eq!((inc[0].start_ns, inc[0].end_ns), (0, 4 * 60_000_000_000));
        assert_eq!((inc[0].windows, inc[0].open), (3, false));
        assert_eq!(inc[0].name, truth.link_name(link));
        assert_eq!(
            (inc[1].start_ns, inc[1].windows, inc[1].open),
            (6 * 60_000_000_000, 1, true)
        );
        // With no hysteresis (one clean window closes), the gap splits the first.
        assert_eq!(incidents(&windows, 1).len(), 3);
        // A window that cannot tell does not close it.
        let mut unsure = windows.clone();
        for w in &mut unsure[4..6] {
            w.runs[0].verdict = Verdict::NotEnoughEvidence("paths not known".into());
        }
        assert_eq!(incidents(&unsure, 2).len(), 1);
    }
}
