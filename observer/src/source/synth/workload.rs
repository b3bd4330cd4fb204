//! Frames and their ground truth: a [`Workload`] appends each frame together with what the
//! observer must count for it ([`Truth`]), from the generator's intent: the operation class it
//! chose, the [`PsnEvent`] it injected, the [`SkipReason`] it broke a frame for.

use std::collections::BTreeMap;

use observer_common::seq::RETX_IDLE_NS;
use observer_common::wire::{self, op};
use observer_common::{
    Counters, FlowKey, FlowStats, LINK_PAUSE, LatKey, LatKind, MsgStats, OpClass, Pause, PauseKey,
    PauseStats, SkipReason, mirror_key,
};

use super::encap::{Encap, encapsulate, pause_frame, pfc_frame};
use super::frame::{ExtHeader, RoceFrame, ext_headers};
use super::{BASE_TS_NS, CE, FRAME_GAP_NS};

/// Frames plus independent ground truth.
#[derive(Clone, Debug, Default)]
pub struct Workload {
    pub frames: Vec<Frame>,
    pub truth: Truth,
    /// The NIC side of a host beside the frames (the `rule-nic-*` scenarios).
    pub nic: Option<NicReadings>,
    /// Spacing of the frames' timestamps; 0 means [`FRAME_GAP_NS`].
    frame_gap_ns: u64,
    /// Added once to the gap before the next frame ([`Workload::wait`]).
    wait_ns: u64,
    /// The capture time of the next frame, when chosen ([`Workload::at`]).
    at_ns: Option<u64>,
    /// When each flow's last request was seen: a resend after [`RETX_IDLE_NS`] of silence
    /// follows a wait (a timeout, an RNR timer).
    last_request_ns: BTreeMap<FlowKey, u64>,
}

/// Two readings of a host's NIC side: before the frames and after them.
#[derive(Clone, Debug)]
pub struct NicReadings {
    pub before: crate::source::nic::host::Snapshot,
    pub after: crate::source::nic::host::Snapshot,
}

/// One frame and its capture timestamp (strictly increasing within a workload).
#[derive(Clone, Debug)]
pub struct Frame {
    pub bytes: Vec<u8>,
    pub ts_ns: u64,
}

/// `frames` played `times` times, each round `gap_ns` after the last one ended: a long capture
/// from a short scenario.
pub fn played_again(frames: &[Frame], times: u64, gap_ns: u64) -> Vec<Frame> {
    let (Some(first), Some(last)) = (frames.first(), frames.last()) else {
        return Vec::new();
    };
    let span = last.ts_ns - first.ts_ns;
    (0..times)
        .flat_map(|k| {
            frames.iter().map(move |f| Frame {
                bytes: f.bytes.clone(),
                ts_ns: f.ts_ns + k * (span + gap_ns),
            })
        })
        .collect()
}

/// What the observer must report. In `flows`, `first_seen_ns`, `last_seen_ns`, `psn_next_lo`,
/// `psn_next_hi` and `psn_valid` are left 0; `counters.flow_insert_failures` is 0. In `pauses`,
/// `first_seen_ns` and `last_seen_ns` are left 0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Truth {
    pub flows: BTreeMap<FlowKey, FlowStats>,
    pub pauses: BTreeMap<PauseKey, PauseStats>,
    pub counters: Counters,
    /// The passive latency samples (ns) the observer must measure, per requester direction and
    /// kind, in the order the answers come. Only answers placed by a
    /// [`Script`](super::Script) are accounted here: elsewhere answers follow their
    /// requests back to back, at no latency of the scenario's choosing, and this stays empty.
    pub latency: BTreeMap<(LatKey, LatKind), Vec<u64>>,
    /// The messages the observer must count per flow, as the scenario made them.
    pub messages: BTreeMap<FlowKey, MsgStats>,
    /// The connections of the scenario's queue pairs, and whether packets went each way
    /// (\[requester to responder, back\]; CNPs not counted).
    pub connections: BTreeMap<ConnTruth, [bool; 2]>,
    /// The connection manager's exchanges the workload holds: what its REQ and REP said.
    pub cm: BTreeMap<observer_common::cm::CmKey, observer_common::cm::CmConn>,
    /// The training jobs the workload runs.
    pub jobs: Vec<JobTruth>,
}

/// A training job as the generator ran it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobTruth {
    pub hosts: Vec<std::net::IpAddr>,
    /// Each iteration's start: the first packet of its communication phase (unix ns).
    pub iteration_starts_ns: Vec<u64>,
    /// The host made to compute longer than its peers (a host straggler), if any.
    pub slow_host: Option<std::net::IpAddr>,
    /// The host whose link was made slow, marked and lossy (a network straggler), if any.
    pub slow_link: Option<std::net::IpAddr>,
    /// When the iteration that hung began (its first packet, unix ns), if one hung.
    pub hang_ns: Option<u64>,
}

/// One connection as the generator made it: both ends' addresses (IPv4 v4-mapped) and QPNs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnTruth {
    pub requester: [u8; 16],
    pub requester_qp: u32,
    pub responder: [u8; 16],
    pub responder_qp: u32,
}

/// What the generator did with a request packet, as the PSN analysis must classify it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PsnEvent {
    /// In sequence, not a tracked request, or the flow's first request.
    #[default]
    None,
    /// Ahead of the expected PSN: some before it were lost upstream (or are late).
    Gap,
    /// A late packet filling a hole (reordered).
    OutOfOrder,
    /// A copy of a packet already sent, outside any resend.
    Duplicate,
    /// Sent again by the sender; `episode` on the first of a resend run (a run must resend at
    /// least one PSN the observer saw, or come after a timeout, to be known as one).
    Retransmission { episode: bool },
    /// Inside a READ's consumed range under the path MTU the observer knows: a violation, which
    /// moves nothing else. (Overlaps under candidate path MTUs are counted apart, whatever the
    /// class: [`Workload::overlap`].)
    Violation,
    /// A new incarnation of the QP number.
    NewIncarnation,
}

impl Workload {
    /// Appends a RoCE frame and accounts it with `class` (no PSN event).
    pub fn push_roce(&mut self, frame: &RoceFrame, class: OpClass) {
        self.push_roce_psn(frame, class, PsnEvent::None);
    }

    /// Appends a RoCE frame and accounts it with `class` and the PSN `event` it causes.
    pub fn push_roce_psn(&mut self, frame: &RoceFrame, class: OpClass, event: PsnEvent) {
        self.account_roce(frame, class, event);
        self.push_frame(frame.to_bytes());
    }

    /// Appends the first `keep` bytes of `frame`, like a mirror that truncates copies. Cut before
    /// the end of the BTH it is skipped as [`SkipReason::Truncated`]; otherwise it is a RoCE packet
    /// with its full IP length, `class` (the class of the whole frame; an ACKNOWLEDGE cut inside its
    /// AETH counts as [`OpClass::Ack`], its syndrome being invisible) and `event`.
    pub fn push_cut(&mut self, frame: &RoceFrame, class: OpClass, event: PsnEvent, keep: usize) {
        let mut bytes = frame.to_bytes();
        bytes.truncate(keep);
        if keep < frame.bth_end() {
            self.push_noise(bytes, SkipReason::Truncated);
            return;
        }
        let aeth_cut = frame.bth.opcode & 0x1F == op::ACKNOWLEDGE
            && ext_headers(frame.bth.opcode).contains(&ExtHeader::Aeth)
            && keep < frame.headers_end();
        let class = if aeth_cut { OpClass::Ack } else { class };
        self.account_roce(frame, class, event);
        self.push_frame(bytes);
    }

    /// Appends a frame the observer must skip for `reason`.
    pub fn push_noise(&mut self, bytes: Vec<u8>, reason: SkipReason) {
        self.truth.counters.frames += 1;
        self.truth.counters.skipped[reason as usize] += 1;
        self.push_frame(bytes);
    }

    /// A mirror copy (ERSPAN session `session`, or none for ERSPAN I / GRE TEB) whose inner
    /// frame is skipped for `reason`.
    pub fn push_mirror_noise(&mut self, bytes: Vec<u8>, reason: SkipReason, session: Option<u16>) {
        match session {
            Some(id) => self.truth.counters.mirror_sessions[usize::from(id & 0x03FF)] += 1,
            None => self.truth.counters.mirror_sessionless += 1,
        }
        self.push_noise(bytes, reason);
    }

    /// Appends a PAUSE / PFC frame, as a mirror copy through `encap` when given, and accounts
    /// it: per enabled priority (PFC) or as 802.3x PAUSE, a frame, its quanta, XON when 0.
    pub fn push_pause(&mut self, pause: &Pause, encap: Option<Encap>) {
        let frame = if pause.is_pfc() {
            pfc_frame(pause.src_mac, pause.class_enable, pause.quanta)
        } else {
            pause_frame(pause.src_mac, pause.quanta[0])
        };
        let mirror = encap.map(Encap::mirror);
        let key = PauseKey {
            src_mac: pause.src_mac,
            mirror: mirror.as_ref().map_or(0, mirror_key),
        };
        let s = self.truth.pauses.entry(key).or_default();
        let mut count = |class: usize, quanta: u16| {
            s.frames[class] += 1;
            s.quanta[class] += u64::from(quanta);
            s.xon[class] += u64::from(quanta == 0);
        };
        if pause.is_pfc() {
            s.pfc_frames += 1;
            for (p, &quanta) in pause.quanta.iter().enumerate() {
                if pause.class_enable & (1 << p) != 0 {
                    count(p, quanta);
                }
            }
        } else {
            count(LINK_PAUSE, pause.quanta[0]);
        }
        match encap {
            None => self.push_noise(frame, SkipReason::MacControl),
            Some(e) => {
                let m = e.mirror();
                self.truth.counters.mirror_truncated += u64::from(m.truncated);
                self.push_mirror_noise(encapsulate(&frame, e), SkipReason::MacControl, m.session);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Spaces the timestamps of the frames appended from now on `gap_ns` apart (at least 1 ns;
    /// the default is [`FRAME_GAP_NS`]).
    pub fn set_frame_gap(&mut self, gap_ns: u64) {
        self.frame_gap_ns = gap_ns.max(1);
    }

    /// Request `key` lies inside a READ's consumed range under the path MTUs of `mask` (bit k:
    /// 256 << k).
    pub fn overlap(&mut self, key: &observer_common::FlowKey, mask: u32) {
        if let Some(f) = self.truth.flows.get_mut(key) {
            for (k, v) in f.seq.violations.iter_mut().enumerate() {
                *v += mask >> k & 1;
            }
        }
    }

    /// The next frame comes `ns` later than it would (a sender waiting out a timer).
    pub fn wait(&mut self, ns: u64) {
        self.wait_ns += ns;
    }

    /// The next appended frame gets capture time `ts_ns` (instead of the gap after the last
    /// one and any [`Workload::wait`]); the frames after it follow at the usual gap. Panics
    /// unless `ts_ns` comes after the last frame: timestamps stay strictly increasing.
    pub fn at(&mut self, ts_ns: u64) {
        if let Some(last) = self.frames.last() {
            assert!(
                ts_ns > last.ts_ns,
                "a frame placed at {ts_ns} ns does not come after the last one ({} ns)",
                last.ts_ns
            );
        }
        self.at_ns = Some(ts_ns);
    }

    /// The capture timestamp the next appended frame gets.
    pub fn next_ts(&self) -> u64 {
        if let Some(ts) = self.at_ns {
            return ts;
        }
        let gap = match self.frame_gap_ns {
            0 => FRAME_GAP_NS,
            gap => gap,
        };
        self.frames
            .last()
            .map_or(BASE_TS_NS, |f| f.ts_ns + gap + self.wait_ns)
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    fn push_frame(&mut self, bytes: Vec<u8>) {
        let ts_ns = self.next_ts();
        self.wait_ns = 0;
        self.at_ns = None;
        self.frames.push(Frame { bytes, ts_ns });
    }

    fn account_roce(&mut self, frame: &RoceFrame, class: OpClass, event: PsnEvent) {
        let ip_len = u64::from(frame.ip_len());
        let ecn = frame.ecn & 3;
        let key = frame.flow_key();
        let now = self.next_ts();
        // The flow's silence before this packet, when it is a request the PSN analysis follows.
        let followed = class.is_request()
            && matches!(
                frame.bth.opcode & 0xE0,
                wire::TRANSPORT_RC | wire::TRANSPORT_UC | wire::TRANSPORT_XRC
            );
        let idle = if followed {
            self.last_request_ns
                .insert(key, now)
                .map(|last| now.saturating_sub(last))
        } else {
            None
        };
        let f = self.truth.flows.entry(key).or_default();
        f.packets += 1;
        f.bytes += ip_len;
        f.ecn[usize::from(ecn)] += 1;
        f.ops[class as usize] += 1;
        f.dscp_mask |= 1 << (frame.dscp & 63);
        if class == OpClass::Cnp {
            f.cnp_dscp_mask |= 1 << (frame.dscp & 63);
        }
        for (i, tag) in frame.vlans.iter().take(2).enumerate() {
            f.see_vlan(i == 1, tag.vid);
        }
        f.transport_mask |= 1 << (frame.bth.opcode >> 5);
        f.pcp_mask |= match frame.vlans.first() {
            Some(tag) => 1 << (tag.pcp & 7),
            None => observer_common::UNTAGGED,
        };
        match event {
            PsnEvent::None => {}
            PsnEvent::Gap => f.psn_gaps += 1,
            PsnEvent::OutOfOrder => {
                f.psn_regressions += 1;
                f.seq.out_of_order += 1;
            }
            PsnEvent::Duplicate => {
                f.psn_regressions += 1;
                f.seq.duplicates += 1;
            }
            PsnEvent::Retransmission { episode } => {
                f.psn_regressions += 1;
                f.seq.retransmissions += 1;
                f.seq.retx_episodes += u64::from(episode);
                // An episode after the sender waited (a timeout, an RNR timer).
                if episode && idle.is_some_and(|idle| idle >= RETX_IDLE_NS) {
                    f.seq.retx_waited += 1;
                }
            }
            PsnEvent::Violation => {}
            PsnEvent::NewIncarnation => f.seq.resets += 1,
        }
        // FIRST and MIDDLE packets carry one path MTU; NAKs with the sequence error code.
        if matches!(
            frame.bth.opcode & 0x1F,
            0x00 | 0x01 | 0x06 | 0x07 | 0x0D | 0x0E
        ) && frame.bth.opcode & 0xE0 != wire::TRANSPORT_UD
        {
            f.seq.pmtu_mask |= observer_common::seq::pmtu_bit(frame.payload_len as u32);
        }
        if class == OpClass::Nak && frame.ext.syndrome == 0x60 {
            f.seq.nak_seq += 1;
        }
        let c = &mut self.truth.counters;
        c.frames += 1;
        c.roce_packets += 1;
        c.roce_bytes += ip_len;
        c.ce_packets += u64::from(ecn == CE);
        c.cnp_packets += u64::from(class == OpClass::Cnp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::synth::SYNDROME_NAK_SEQ;
    use crate::source::synth::frame::opcode_frame;
    use observer_common::wire;

    #[test]
    fn a_frame_placed_at_a_time_gets_it_and_the_next_follow_at_the_gap() {
        let f = opcode_frame(wire::TRANSPORT_RC | op::SEND_ONLY, 0, 1);
        let mut w = Workload::default();
        w.push_roce(&f, OpClass::Send);
        w.at(BASE_TS_NS + 7_777);
        assert_eq!(w.next_ts(), BASE_TS_NS + 7_777);
        w.push_roce(&f, OpClass::Send);
        w.push_roce(&f, OpClass::Send);
        let ts: Vec<u64> = w.frames.iter().map(|f| f.ts_ns - BASE_TS_NS).collect();
        assert_eq!(ts, [0, 7_777, 7_777 + FRAME_GAP_NS]);
    }

    #[test]
    #[should_panic(expected = "does not come after the last one")]
    fn a_frame_placed_before_the_last_is_refused() {
        let f = opcode_frame(wire::TRANSPORT_RC | op::SEND_ONLY, 0, 1);
        let mut w = Workload::default();
        w.push_roce(&f, OpClass::Send);
        w.at(BASE_TS_NS);
    }

    #[test]
    fn push_cut_decides_from_the_offset() {
        let mut nak = opcode_frame(wire::TRANSPORT_RC | op::ACKNOWLEDGE, SYNDROME_NAK_SEQ, 7);
        nak.payload_len = 0;
        let mut w = Workload::default();
        let bth_end = nak.bth_end();
        for keep in [
            bth_end - 1,
            bth_end,
            bth_end + 3,
            bth_end + 4,
            nak.frame_len(),
        ] {
            w.push_cut(&nak, OpClass::Nak, PsnEvent::None, keep);
        }
        let s = w.truth.flows[&nak.flow_key()];
        assert_eq!(w.truth.counters.skipped[SkipReason::Truncated as usize], 1);
        assert_eq!(
            (s.ops[OpClass::Ack as usize], s.ops[OpClass::Nak as usize]),
            (2, 2)
        );
        assert_eq!(s.bytes, 4 * u64::from(nak.ip_len()));
    }
}
