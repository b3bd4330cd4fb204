//! `pfc`: RoCE on priority 3 beside a PFC storm, PFC on two priorities at once, an empty
//! class-enable vector and 802.3x PAUSE.

use observer_common::wire;

use super::{ack_all, qp_v4};
use crate::source::synth::encap::{link_pause, pfc, quanta_at};
use crate::source::synth::qp::QpStream;
use crate::source::synth::workload::Workload;
use crate::source::synth::{DATA_DSCP, ECT0};

/// Switch ports (and a NIC) sending PAUSE / PFC frames in the `pfc` scenario.
pub const PFC_SENDERS: [[u8; 6]; 3] = [
    [0x02, 0x00, 0x00, 0x00, 0x0F, 0x01],
    [0x02, 0x00, 0x00, 0x00, 0x0F, 0x02],
    [0x02, 0x00, 0x00, 0x00, 0x0F, 0x03],
];

/// RoCE on priority 3 interleaved with a PFC storm on priority 3 from one switch port (pause
/// refreshed, then XON), PFC on priorities 3 and 4 at once from another (times of priorities
/// not enabled must be ignored), an empty class-enable vector, and 802.3x PAUSE from a NIC.
pub(super) fn pfc_scenario(w: &mut Workload) {
    const RC: u8 = wire::TRANSPORT_RC;
    let [storm, dual, nic] = PFC_SENDERS;
    let mut qps: Vec<QpStream> = (0..4u8)
        .map(|i| {
            qp_v4(
                RC,
                5,
                [1 + 2 * i, 2 + 2 * i],
                [0x5001 + u32::from(i), 0x5101],
                10,
            )
            .with_tos(DATA_DSCP, ECT0)
        })
        .collect();
    for step in 0..40 {
        for qp in qps.iter_mut() {
            qp.write(w, 4096);
            qp.ack_if_due(w, 4);
        }
        // Priority 3 paused for 65535 quanta, refreshed every step, released at the end.
        let q3 = if step == 39 { 0 } else { 0xFFFF };
        w.push_pause(&pfc(storm, 0x08, quanta_at(3, q3)), None);
        if step % 4 == 0 {
            let (q3, q4) = if step == 36 { (0, 0) } else { (0x1000, 0x0800) };
            // Priority 5's time is set but not enabled: ignored.
            w.push_pause(&pfc(dual, 0x18, [0, 0, 0, q3, q4, 0x7777, 0, 0]), None);
        }
        if step % 10 == 5 {
            w.push_pause(&link_pause(nic, if step == 35 { 0 } else { 0x0200 }), None);
        }
    }
    w.push_pause(&pfc(storm, 0x00, [0x1111; 8]), None);
    ack_all(w, qps.iter_mut());
}

#[cfg(test)]
mod tests {
    use observer_common::{LINK_PAUSE, OpClass, PauseKey};

    use super::*;
    use crate::source::synth::scenarios::scenario;

    #[test]
    fn pfc_scenario_pauses_priority_3_and_4_and_the_link() {
        let w = scenario("pfc").unwrap();
        let [storm, dual, nic] = PFC_SENDERS.map(|m| {
            &w.truth.pauses[&PauseKey {
                src_mac: m,
                mirror: 0,
            }]
        });
        // Storm: 39 pauses of 65535 quanta on priority 3, one XON, and one empty vector.
        assert_eq!(
            (storm.pfc_frames, storm.frames[3], storm.xon[3]),
            (41, 40, 1)
        );
        assert_eq!(storm.quanta[3], 39 * 65535);
        assert_eq!(
            storm.frames.iter().sum::<u64>(),
            40,
            "only priority 3 named"
        );
        // Priorities 3 and 4 together; 5's time is not enabled and never counted.
        assert_eq!(
            (dual.frames[3], dual.frames[4], dual.frames[5]),
            (10, 10, 0)
        );
        assert_eq!((dual.xon[3], dual.xon[4], dual.quanta[5]), (1, 1, 0));
        // 802.3x PAUSE: the whole link.
        assert_eq!(
            (nic.pfc_frames, nic.frames[LINK_PAUSE], nic.xon[LINK_PAUSE]),
            (0, 4, 1)
        );
        assert_eq!(nic.quanta[LINK_PAUSE], 3 * 0x200);
        // The RoCE beside it is clean.
        assert!(
            w.truth
                .flows
                .values()
                .all(|s| s.psn_gaps + s.psn_regressions == 0)
        );
        assert!(
            w.truth
                .flows
                .values()
                .any(|s| s.ops[OpClass::Write as usize] > 0)
        );
    }
}
