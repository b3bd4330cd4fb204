//! PAUSE / PFC frames on the wire in the sidecar: the kernel's pause table (per sender MAC,
//! mirror and direction, per-CPU LRU) or a capture's, folded at each drain into cumulative
//! counts per sender and class. An entry the LRU evicted and inserted again (fewer frames than
//! at the last drain, or a later first sighting) is a new incarnation counted on top of the
//! old one, so the exported counters never go back. The first [`MAX_PFC_SENDERS`] senders get
//! series of their own; later ones are summed as `src_mac="other"`.

use std::collections::{BTreeMap, HashMap};

use observer_common::{LINK_PAUSE, PAUSE_CLASSES, PauseKey, PauseStats, wire::PAUSE_QUANTUM_BITS};

use super::openmetrics::{PfcRow, direction_label, mirror_label};
use roce_observer::model::mac_string;

/// Senders exported as series of their own (in the order the drains first saw them); the rest
/// are summed per direction and mirror as `src_mac="other"`. A host or mirror port sees a few
/// switch ports and NICs; the kernel's table holds up to `MAX_PAUSE_SENDERS` (1024).
pub const MAX_PFC_SENDERS: usize = 64;

/// One sender's (or the others') cumulative counts.
#[derive(Clone, Copy, Debug, Default)]
struct SenderTotals {
    frames: [u64; PAUSE_CLASSES],
    xon: [u64; PAUSE_CLASSES],
    quanta: [u64; PAUSE_CLASSES],
    seconds: [f64; PAUSE_CLASSES],
    /// Some of its quanta were turned into time (a link speed was known for them).
    timed: bool,
}

impl SenderTotals {
    fn add(&mut self, d: &PauseStats, speed_bps: Option<u64>) {
        for c in 0..PAUSE_CLASSES {
            self.frames[c] = self.frames[c].saturating_add(d.frames[c]);
            self.xon[c] = self.xon[c].saturating_add(d.xon[c]);
            self.quanta[c] = self.quanta[c].saturating_add(d.quanta[c]);
            if let Some(bps) = speed_bps.filter(|b| *b > 0) {
                self.seconds[c] += d.quanta[c] as f64 * PAUSE_QUANTUM_BITS as f64 / bps as f64;
                self.timed = true;
            }
        }
    }
}

/// What an entry counted since `prev` (field by field; a value read lower is held).
fn growth(now: &PauseStats, prev: &PauseStats) -> PauseStats {
    let mut d = PauseStats::default();
    for c in 0..PAUSE_CLASSES {
        d.frames[c] = now.frames[c].saturating_sub(prev.frames[c]);
        d.xon[c] = now.xon[c].saturating_sub(prev.xon[c]);
        d.quanta[c] = now.quanta[c].saturating_sub(prev.quanta[c]);
    }
    d
}

/// The pause table folded drain by drain.
#[derive(Debug, Default)]
pub(super) struct PauseBook {
    /// Each entry as the last drain read it (only those in the table then).
    prev: HashMap<PauseKey, PauseStats>,
    senders: BTreeMap<PauseKey, SenderTotals>,
    /// The senders beyond the cap, by mirror field (direction and mirror).
    other: BTreeMap<u16, SenderTotals>,
    /// Whether a link speed was ever known (the seconds family is exported from then on).
    timed: bool,
}

impl PauseBook {
    /// Folds a reading of the table in; `speed_bps` turns quanta into time when known.
    pub(super) fn update(
        &mut self,
        table: &BTreeMap<PauseKey, PauseStats>,
        speed_bps: Option<u64>,
    ) {
        self.timed |= speed_bps.is_some_and(|b| b > 0);
        let mut next = HashMap::with_capacity(table.len());
        for (key, now) in table {
            if now.frames_total() == 0 {
                continue;
            }
            let d = match self.prev.get(key) {
                Some(p)
                    if now.frames_total() >= p.frames_total()
                        && now.first_seen_ns <= p.first_seen_ns =>
                {
                    growth(now, p)
                }
                // New, or evicted and inserted again since: everything it holds is new.
                _ => *now,
            };
            next.insert(*key, *now);
            let totals = if self.senders.contains_key(key) || self.senders.len() < MAX_PFC_SENDERS {
                self.senders.entry(*key).or_default()
            } else {
                self.other.entry(key.mirror).or_default()
            };
            // Pauses inside mirror copies were sent on the mirrored links, whose speed is not
            // the observed port's (a capture on a mirror port too): no time for them.
            let direct = matches!(
                observer_common::MirrorOf::of(key.mirror),
                observer_common::MirrorOf::Direct
            );
            totals.add(&d, speed_bps.filter(|_| direct));
        }
        // An entry gone from the table was evicted: if it comes back, it starts anew.
        self.prev = next;
    }

    /// The series: per sender (and the others) and class with frames.
    pub(super) fn rows(&self) -> Vec<PfcRow> {
        let senders = self
            .senders
            .iter()
            .map(|(k, t)| (mac_string(k.src_mac), k.mirror, t));
        let other = self.other.iter().map(|(m, t)| ("other".to_string(), *m, t));
        let mut rows = Vec::new();
        for (src_mac, mirror, t) in senders.chain(other) {
            for c in 0..PAUSE_CLASSES {
                if t.frames[c] == 0 {
                    continue;
                }
                rows.push(PfcRow {
                    src_mac: src_mac.clone(),
                    priority: if c == LINK_PAUSE {
                        "link".to_string()
                    } else {
                        c.to_string()
                    },
                    dir: direction_label(mirror),
                    mirror: mirror_label(mirror),
                    frames: t.frames[c],
                    xon: t.xon[c],
                    quanta: t.quanta[c],
                    seconds: (self.timed && t.timed).then_some(t.seconds[c]),
                });
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(frames3: u64, quanta3: u64, first_seen_ns: u64) -> PauseStats {
        let mut s = PauseStats {
            pfc_frames: frames3,
            first_seen_ns,
            last_seen_ns: first_seen_ns,
            ..PauseStats::default()
        };
        s.frames[3] = frames3;
        s.quanta[3] = quanta3;
        s
    }

    fn key(n: u16) -> PauseKey {
        PauseKey {
            src_mac: [2, 0, 0, 0, (n >> 8) as u8, n as u8],
            mirror: 0,
        }
    }

    #[test]
    fn evictions_count_on_top_and_senders_beyond_the_cap_are_other() {
        let mut b = PauseBook::default();
        let one = |n, s| BTreeMap::from([(key(n), s)]);
        b.update(&one(1, stats(10, 100, 5)), None);
        b.update(&one(1, stats(15, 150, 5)), None);
        // Evicted and inserted again: fewer frames.
        b.update(&one(1, stats(2, 20, 9)), None);
        // Gone from the table, then back with more than before: a new incarnation too.
        b.update(&BTreeMap::new(), None);
        b.update(&one(1, stats(30, 300, 12)), Some(100_000_000_000));
        let rows = b.rows();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.frames, r.quanta), (15 + 2 + 30, 150 + 20 + 300));
        assert_eq!(
            (r.priority.as_str(), r.dir, r.mirror.as_str()),
            ("3", "rx", "")
        );
        assert_eq!(r.src_mac, "02:00:00:00:00:01");
        // Only the last drain's 300 quanta had a speed: 300 x 512 bits at 100 Gb/s.
        assert_eq!(r.seconds, Some(300.0 * 512.0 / 1e11));

        let mut b = PauseBook::default();
        let many: BTreeMap<PauseKey, PauseStats> = (0..MAX_PFC_SENDERS as u16 + 3)
            .map(|n| (key(n), stats(1, 7, 1)))
            .collect();
        b.update(&many, None);
        let rows = b.rows();
        assert_eq!(rows.len(), MAX_PFC_SENDERS + 1);
        let other = rows.iter().find(|r| r.src_mac == "other").unwrap();
        assert_eq!((other.frames, other.quanta, other.seconds), (3, 21, None));
    }

    #[test]
    fn pauses_inside_mirror_copies_get_no_time_from_the_observed_ports_speed() {
        let mut b = PauseBook::default();
        let mirrored = PauseKey {
            mirror: 0x8000 | (3 << 10),
            ..key(1)
        };
        let table = BTreeMap::from([(key(2), stats(1, 100, 1)), (mirrored, stats(1, 100, 1))]);
        b.update(&table, Some(100_000_000_000));
        let rows = b.rows();
        let seconds: Vec<(String, Option<f64>)> =
            rows.iter().map(|r| (r.mirror.clone(), r.seconds)).collect();
        assert_eq!(
            seconds,
            [
                ("erspan3".to_string(), None),
                (String::new(), Some(100.0 * 512.0 / 1e11))
            ]
        );
    }
}
