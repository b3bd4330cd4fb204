//! `corpus`, e2e plus every opcode, ECN and DSCP, IPv4 options and frames truncated at every
//! byte offset (for BPF_PROG_TEST_RUN), and `many-qps`, a thousand queue pairs.

use std::net::Ipv4Addr;

use observer_common::OpClass;
use observer_common::wire::{self, op};

use super::demo::e2e;
use super::qp_v4;
use crate::source::synth::frame::{
    Ext, Ip, host_mac, intended_class, intended_message, opcode_defined, opcode_frame, tag, v6,
};
use crate::source::synth::noise::extra_noise;
use crate::source::synth::qp::QpStream;
use crate::source::synth::workload::{PsnEvent, Workload};
use crate::source::synth::{SYNDROME_ACK, SYNDROME_NAK_SEQ};

/// Opcodes the corpus covers: every defined opcode of every transport, the low codes reserved in
/// every transport (0x15, 0x18-0x1F), 0x80-0x9F and the vendor range. Left out: operations
/// defined elsewhere but not for their transport (e.g. a UC READ), because observer-common's
/// classify counts those by their low bits where the IBTA tables call them reserved.
fn corpus_opcodes() -> impl Iterator<Item = u8> {
    (0..=255u8).filter(|&opcode| {
        let low = opcode & 0x1F;
        let low_reserved = low == 0x15 || low >= 0x18;
        let transport_specific = matches!(
            opcode & 0xE0,
            wire::TRANSPORT_UC | wire::TRANSPORT_RD | wire::TRANSPORT_UD
        );
        opcode_defined(opcode) || low_reserved || !transport_specific
    })
}

/// Every kind of AETH syndrome: ACK (credit count 31 and 0), RNR NAK, the five NAK codes and the
/// reserved classes 010, 100 and 111.
const ACK_SYNDROMES: &[u8] = &[
    0x1F, 0x00, 0x2E, 0x60, 0x61, 0x62, 0x63, 0x64, 0x40, 0x80, 0xE0,
];

pub(super) fn corpus(w: &mut Workload) {
    e2e(w);

    // Every opcode, each on its own flow; ACKNOWLEDGE with every kind of syndrome on RC and XRC.
    // RD ACKNOWLEDGE only with an ACK syndrome (see the report on RD responses).
    let mut qp = 0x10_0000;
    for opcode in corpus_opcodes() {
        let syndromes: &[u8] = match opcode {
            0x11 | 0xB1 => ACK_SYNDROMES,
            _ => &[SYNDROME_ACK],
        };
        for &syndrome in syndromes {
            let f = opcode_frame(opcode, syndrome, qp);
            w.push_roce(&f, intended_class(opcode, syndrome));
            // Each flow's one request, seen for the first time: a SEND LAST without its FIRST
            // of unknown size.
            if let Some((kind, size)) = intended_message(&f, usize::MAX) {
                w.truth
                    .messages
                    .entry(f.flow_key())
                    .or_default()
                    .record(kind, size);
            }
            qp += 1;
        }
    }

    // Every DSCP and ECN on one RC flow (consecutive PSNs).
    let mut tos = qp_v4(wire::TRANSPORT_RC, 2, [3, 4], [0x3001, 0x3002], 0);
    for dscp in 0..64u8 {
        tos.req.dscp = dscp;
        tos.req.ecn = dscp % 4;
        tos.write(w, 128);
    }

    // SENDs across packets lost before the observation point (path MTU 1024): a MIDDLE lost
    // (the LAST has no size), then a LAST and the next SEND's FIRST lost (the next LAST has no
    // size either, never one size across both), then a whole SEND (sized again).
    let mut sends = qp_v4(wire::TRANSPORT_RC, 2, [9, 10], [0x3201, 0x3202], 500);
    let send = |q: &mut QpStream, w: &mut Workload, low: u8, len: usize| {
        q.request(w, low, Ext::default(), len);
    };
    send(&mut sends, w, op::SEND_FIRST, 1024);
    sends.lose_next(1);
    send(&mut sends, w, op::SEND_MIDDLE, 1024);
    send(&mut sends, w, op::SEND_MIDDLE, 1024);
    send(&mut sends, w, op::SEND_LAST, 100);
    send(&mut sends, w, op::SEND_FIRST, 1024);
    sends.lose_next(2);
    send(&mut sends, w, op::SEND_LAST, 200);
    send(&mut sends, w, op::SEND_FIRST, 1024);
    send(&mut sends, w, op::SEND_MIDDLE, 1024);
    send(&mut sends, w, op::SEND_LAST, 300);
    sends.send(w, 3000);

    // IPv4 options of 1..=10 words on READs (the RETH must be found behind them).
    let mut opts = qp_v4(wire::TRANSPORT_RC, 2, [5, 6], [0x3101, 0x3102], 0x00FF_FF00);
    for words in 1..=10u8 {
        if let Ip::V4 { option_words, .. } = &mut opts.req.ip {
            *option_words = words;
        }
        if let Ip::V4 { option_words, .. } = &mut opts.resp.ip {
            *option_words = words;
        }
        opts.read(w, 65536);
    }

    // Truncation at every byte offset: a WRITE first (IPv4), a READ request (802.1Q) and an
    // ACKNOWLEDGE carrying a NAK (IPv6). Each request copy gets its own flow (dest QP).
    let mut write = opcode_frame(wire::TRANSPORT_RC | op::WRITE_FIRST, 0, 0);
    write.payload_len = 256;
    let mut read = opcode_frame(wire::TRANSPORT_RC | op::READ_REQUEST, 0, 0);
    read.vlans = vec![tag(wire::ETHERTYPE_VLAN, 5)];
    read.ext.dma_len = 65536;
    for (base, first_qp) in [(write, 0x20_0000), (read, 0x21_0000)] {
        let class = intended_class(base.bth.opcode, 0);
        for keep in 0..=base.frame_len() {
            let mut f = base.clone();
            f.bth.dest_qp = first_qp + keep as u32;
            w.push_cut(&f, class, PsnEvent::None, keep);
            // A RoCE packet from the end of its BTH on: a message, of unknown size while its
            // RETH is cut.
            if keep >= f.bth_end()
                && let Some((kind, size)) = intended_message(&f, keep)
            {
                w.truth
                    .messages
                    .entry(f.flow_key())
                    .or_default()
                    .record(kind, size);
            }
        }
    }
    let mut nak = opcode_frame(
        wire::TRANSPORT_RC | op::ACKNOWLEDGE,
        SYNDROME_NAK_SEQ,
        0x22_0000,
    );
    nak.ip = Ip::V6 {
        src: v6(0x201),
        dst: v6(0x202),
        flow_label: 0,
    };
    for keep in 0..=nak.frame_len() {
        w.push_cut(&nak, OpClass::Nak, PsnEvent::None, keep);
    }

    for (bytes, reason) in extra_noise() {
        w.push_noise(bytes, reason);
    }
}

pub(super) fn many_qps(w: &mut Workload) {
    let mut qps: Vec<QpStream> = (0..1000u32)
        .map(|i| {
            let client = (i / 100) as u8;
            let ip = Ip::v4(
                Ipv4Addr::new(198, 19, client, 1),
                Ipv4Addr::new(198, 19, client, 2),
            );
            let id = 0x4000 | ((i / 100) as u16 * 2);
            let macs = [host_mac(id), host_mac(id + 1)];
            QpStream::new(
                wire::TRANSPORT_RC,
                ip,
                macs,
                [0x1_0000 + i, 0x2_0000 + i],
                i * 7919 % 0x0100_0000,
            )
        })
        .collect();
    for len in [1024, 2048, 3072] {
        for qp in &mut qps {
            qp.write(w, len);
        }
    }
    for qp in &mut qps {
        let last = qp.last_psn();
        qp.ack(w, last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::synth::scenarios::scenario;
    use crate::source::synth::scenarios::tests::class_totals;

    #[test]
    fn corpus_covers_every_opcode_dscp_and_option_length() {
        let w = scenario("corpus").unwrap();
        let mut dscp = 0u64;
        for s in w.truth.flows.values() {
            dscp |= s.dscp_mask;
        }
        assert_eq!(dscp, u64::MAX);
        let opcodes: Vec<u8> = corpus_opcodes().collect();
        assert!(opcodes.len() > 200, "{} opcodes", opcodes.len());
        for opcode in [
            0x00, 0x2B, 0x4C, 0x55, 0x64, 0x65, 0x81, 0x9F, 0xB4, 0xC0, 0xFF,
        ] {
            assert!(opcodes.contains(&opcode), "{opcode:#x}");
        }
        assert!(class_totals(&w.truth)[OpClass::Other as usize] > 0);
    }
}
