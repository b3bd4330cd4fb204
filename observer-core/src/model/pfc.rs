//! The `pfc` section: PAUSE / PFC frames per sender, priority and direction.

use super::*;

/// The `pfc` section: who asked whom to pause, on which priority, for how long.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PfcReport {
    /// The link speed pause times are computed for (bits/s): `--link-speed`, or the observed
    /// interfaces' speed in host mode. Absent when unknown: `pause_ns` are then absent too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_speed_bps: Option<u64>,
    /// Senders, most paused first.
    pub sources: Vec<PauseSource>,
}

/// The PAUSE / PFC frames of one sender (a switch port or a NIC).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PauseSource {
    pub src_mac: String,
    /// Set when the frames were seen inside mirror copies; part of the sender's identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<FlowMirror>,
    /// "egress" for frames the observed host sent (TC egress, host mode); part of the identity.
    #[serde(default)]
    pub direction: Direction,
    /// PFC frames (one frame may name several priorities, or none).
    pub pfc_frames: u64,
    /// Per PFC priority named at least once, ascending.
    pub priorities: Vec<PausePriority>,
    /// 802.3x PAUSE frames (the whole link); absent when there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_pause: Option<PauseCounts>,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PausePriority {
    pub priority: u8,
    #[serde(flatten)]
    pub counts: PauseCounts,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PauseCounts {
    /// Frames naming this class, XON frames included.
    pub frames: u64,
    /// Frames with time 0 (resume).
    pub xon: u64,
    /// Pause times asked for, summed, in quanta of 512 bit times.
    pub quanta: u64,
    /// `quanta` as time at the link speed: the pause asked for. A refresh before the previous
    /// pause ran out overlaps it, so this bounds the time actually paused from above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_ns: Option<u64>,
}

impl PauseCounts {
    fn of(s: &PauseStats, class: usize) -> Self {
        Self {
            frames: s.frames[class],
            xon: s.xon[class],
            quanta: s.quanta[class],
            pause_ns: None,
        }
    }

    fn set_speed(&mut self, bps: Option<u64>) {
        self.pause_ns = bps.filter(|b| *b > 0).map(|bps| {
            let ns = self.quanta as u128 * PAUSE_QUANTUM_BITS as u128 * 1_000_000_000 / bps as u128;
            ns.min(u64::MAX as u128) as u64
        });
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_string(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

impl PauseSource {
    pub fn new(key: &PauseKey, s: &PauseStats) -> Self {
        Self {
            src_mac: mac_string(key.src_mac),
            mirror: flow_mirror(key.mirror, 0),
            direction: Direction::of(key.mirror),
            pfc_frames: s.pfc_frames,
            priorities: (0..PFC_PRIORITIES)
                .filter(|p| s.frames[*p] > 0)
                .map(|p| PausePriority {
                    priority: p as u8,
                    counts: PauseCounts::of(s, p),
                })
                .collect(),
            link_pause: (s.frames[LINK_PAUSE] > 0).then(|| PauseCounts::of(s, LINK_PAUSE)),
            first_seen_ns: s.first_seen_ns,
            last_seen_ns: s.last_seen_ns,
        }
    }

    /// Quanta asked for on every class.
    pub fn total_quanta(&self) -> u64 {
        self.priorities.iter().map(|p| p.counts.quanta).sum::<u64>()
            + self.link_pause.as_ref().map_or(0, |l| l.quanta)
    }
}

impl PfcReport {
    /// The section for an aggregate's pause table, or none when it is empty.
    pub fn new(pauses: &BTreeMap<PauseKey, PauseStats>) -> Option<Self> {
        let mut sources: Vec<PauseSource> = pauses
            .iter()
            .filter(|(_, s)| s.frames_total() > 0)
            .map(|(k, s)| PauseSource::new(k, s))
            .collect();
        sources.sort_by(|a, b| {
            b.total_quanta()
                .cmp(&a.total_quanta())
                .then(a.src_mac.cmp(&b.src_mac))
                .then(a.direction.cmp(&b.direction))
        });
        (!sources.is_empty()).then_some(Self {
            link_speed_bps: None,
            sources,
        })
    }

    /// Sets the link speed and the pause times that follow from it (none clears them).
    pub fn set_link_speed(&mut self, bps: Option<u64>) {
        self.link_speed_bps = bps.filter(|b| *b > 0);
        for src in &mut self.sources {
            for p in &mut src.priorities {
                p.counts.set_speed(self.link_speed_bps);
            }
            if let Some(l) = &mut src.link_pause {
                l.set_speed(self.link_speed_bps);
            }
        }
    }
}
