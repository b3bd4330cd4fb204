//! `latency`: responders that answer after known latencies, for the passive latency analysis.
//! Three RC connections on a [`Script`]:
//!
//! - A (198.18.70.1 to .101, PSNs wrapping from 0xFFFFFF to 0 in its second part): WRITEs and
//!   a SEND answered by ACKs and NAKs: one ACK per request, coalesced ACKs, more requests in
//!   flight than are timed, go-back-N after a NAK, an RNR NAK and the resend after the RNR
//!   timer, a WRITE lost and sent again after a timeout, and last a WRITE never answered;
//! - B (2001:db8::7201 to ::7301): a WRITE every 250 us for the whole capture, each ACKed on
//!   its own after 5, 20 or 80 us in turn (it also keeps the capture free of long silences);
//! - C (198.18.71.1 to .101): READs answered one at a time, four in flight, and six in flight
//!   (two of them not timed).
//!
//! Every answer comes one of [`LATENCIES_NS`] after the request whose sample it gives. A's
//! frames lie on whole microseconds, B's 333 ns past them and C's 667 ns: no two share a time.

use observer_common::wire;

use super::{qp_v4, qp_v6};
use crate::source::synth::BASE_TS_NS;
use crate::source::synth::qp::{PortRule, RNR_WAIT_NS, rxe_local_sport};
use crate::source::synth::script::{ConnId, ReqId, Script};
use crate::source::synth::workload::Workload;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// The responders' latencies.
pub(super) const LATENCIES_NS: [u64; 5] = [5 * US, 20 * US, 80 * US, 1_500 * US, 12 * MS];

/// The requester's local ACK timeout: 4.096 us * 2^11, to the microsecond.
const ACK_TIMEOUT_NS: u64 = 8_389 * US;

/// B's request interval: longer than its longest latency, so its ACKs come in order.
const HEARTBEAT_NS: u64 = 250 * US;

pub(super) fn latency(w: &mut Workload) {
    schedule(w, None);
}

/// `latency-ports`: the same schedule on connections whose directions use ports of their own:
/// A's sides each take theirs from their own QPN (Soft-RoCE before 2022), B's from flow labels
/// of their own, C's are fixed per QP. C runs between A's hosts, so that an answer finds its
/// requests by PSN among two requester directions, and C's requests travel on the port of A's
/// answers (a coincidence of ports: A's answers are not C's).
pub(super) fn latency_ports(w: &mut Workload) {
    schedule(
        w,
        Some([
            PortRule::LocalQpn,
            PortRule::FlowLabels(0x1_2345, 0x5_4321),
            PortRule::Fixed(rxe_local_sport(0x7081), 57236),
        ]),
    );
}

fn schedule(w: &mut Workload, rules: Option<[PortRule; 3]>) {
    let rule = |i: usize| rules.map_or(PortRule::Symmetric, |r| r[i]);
    let mut tl = Script::new();
    let a = tl.connect(
        qp_v4(
            wire::TRANSPORT_RC,
            70,
            [1, 101],
            [0x7001, 0x7081],
            0xFF_FFF8,
        )
        .with_port_rule(rule(0)),
    );
    let b =
        tl.connect(qp_v6([0x7201, 0x7301], 0, [0x7201, 0x7281], 0x1000).with_port_rule(rule(1)));
    let c_net = if rules.is_some() { 70 } else { 71 };
    let c = tl.connect(
        qp_v4(
            wire::TRANSPORT_RC,
            c_net,
            [1, 101],
            [0x7101, 0x7181],
            0x20_0000,
        )
        .with_port_rule(rule(2)),
    );
    let end = acks(&mut tl, a, BASE_TS_NS + 10 * US);
    reads(&mut tl, c, BASE_TS_NS + 20 * US + 667);
    heartbeat(&mut tl, b, BASE_TS_NS + 333, end + MS);
    tl.run(w);
}

/// Connection A from `t` on; returns when its last request (never answered) is sent.
fn acks(tl: &mut Script, a: ConnId, mut t: u64) -> u64 {
    let [l5, l20, l80, l1500, l12000] = LATENCIES_NS;
    // The requester waits for each answer: every latency once (samples 5 us .. 12 ms).
    for l in LATENCIES_NS {
        let r = tl.write(a, t, 1024);
        let at = tl.sent_at(r) + l;
        tl.ack(at, r);
        t = at + 3 * US;
    }
    // Coalesced: one ACK for 2 or 3 WRITEs sent 1 us apart, after the latency of the newest
    // (samples 5 us, 80 us, 12 ms; the older requests give none). The PSNs wrap in the second.
    for (n, l) in [(2, l5), (3, l80), (3, l12000)] {
        let newest = (0..n)
            .map(|k| tl.write(a, t + k * US, 512))
            .last()
            .expect("n > 0");
        let at = tl.sent_at(newest) + l;
        tl.ack(at, newest);
        t = at + 3 * US;
    }
    // Seven WRITEs in flight: the first four are timed, the fifth is not, nor any after it until
    // an ACK covers the fifth.
    let r: Vec<ReqId> = (0..7).map(|k| tl.write(a, t + k * US, 256)).collect();
    // Covers 0 and 1: the sample of 1 (20 us).
    tl.ack(tl.sent_at(r[1]) + l20, r[1]);
    // Covers the timed 2 and 3 and the untimed 4, which it may be answering: no sample.
    let at = tl.sent_at(r[4]) + l80;
    tl.ack(at, r[4]);
    // Timed again: the ACK covering it and the untimed 5 and 6 before it gives its sample.
    let again = tl.write(a, at + 3 * US, 256);
    let at = tl.sent_at(again) + l1500;
    tl.ack(at, again);
    t = at + 3 * US;
    // Go-back-N: the second WRITE is lost before the observation point, the next two arrive;
    // the NAK naming the lost one answers the first (20 us). The three sent again give no
    // sample; the next WRITE is timed (5 us).
    let first = tl.write(a, t, 1024);
    let lost = tl.write_lost(a, t + US, 1024);
    tl.write(a, t + 2 * US, 1024);
    let last = tl.write(a, t + 3 * US, 1024);
    let nak = tl.sent_at(first) + l20;
    tl.nak(nak, lost);
    let resent = tl.resend_from(nak + 3 * US, lost);
    let at = resent + l80;
    tl.ack(at, last);
    let next = tl.write(a, at + 3 * US, 1024);
    let at = tl.sent_at(next) + l5;
    tl.ack(at, next);
    t = at + 3 * US;
    // A SEND the responder has no receive for, and a WRITE behind it: an RNR NAK (no sample),
    // both sent again after the RNR timer and ACKed (no sample), then a timed WRITE (1.5 ms).
    let send = tl.send(a, t, 256);
    let behind = tl.write(a, t + US, 256);
    let rnr = tl.sent_at(send) + l80;
    tl.rnr_nak(rnr, send);
    let resent = tl.resend_from(rnr + RNR_WAIT_NS, send);
    let at = resent + l20;
    tl.ack(at, behind);
    let next = tl.write(a, at + 3 * US, 256);
    let at = tl.sent_at(next) + l1500;
    tl.ack(at, next);
    t = at + 3 * US;
    // A WRITE lost before the observation point and sent again after the local ACK timeout: it
    // passes for the first time then, in order, and is timed (80 us).
    let lost = tl.write_lost(a, t, 1024);
    let again = tl.resend_from(t + ACK_TIMEOUT_NS, lost);
    let at = again + l80;
    tl.ack(at, lost);
    t = at + 3 * US;
    // A WRITE whose ACK never comes.
    tl.write(a, t, 1024);
    t
}

/// Connection C from `t` on.
fn reads(tl: &mut Script, c: ConnId, mut t: u64) {
    let [l5, l20, l80, l1500, l12000] = LATENCIES_NS;
    // One READ at a time: 512 bytes (a response ONLY) after 5 us, 3000 bytes (FIRST, MIDDLE,
    // LAST) after 80 us.
    for (len, l) in [(512, l5), (3000, l80)] {
        let q = tl.read(c, t, len);
        let at = tl.sent_at(q) + l;
        tl.read_response(at, q);
        t = at + 10 * US;
    }
    // Four READs in flight (FIRST and LAST responses each), all timed: 20 us, 80 us, 1.5 ms,
    // 12 ms.
    let q: Vec<ReqId> = (0..4).map(|k| tl.read(c, t + k * US, 2048)).collect();
    for (&q, l) in q.iter().zip([l20, l80, l1500, l12000]) {
        tl.read_response(tl.sent_at(q) + l, q);
    }
    t = tl.sent_at(q[3]) + l12000 + 10 * US;
    // Six READs in flight: the first four timed (20, 20, 80, 80 us), the last two not; then one
    // more, timed again (5 us).
    let q: Vec<ReqId> = (0..6).map(|k| tl.read(c, t + k * US, 1024)).collect();
    for (&q, l) in q.iter().zip([l20, l20, l80, l80, l80, l1500]) {
        tl.read_response(tl.sent_at(q) + l, q);
    }
    let next = tl.read(c, tl.sent_at(q[5]) + l1500 + 3 * US, 1024);
    tl.read_response(tl.sent_at(next) + l5, next);
}

/// Connection B: a WRITE every [`HEARTBEAT_NS`] from `t` until `end`, each ACKed after 5, 20 or
/// 80 us in turn.
fn heartbeat(tl: &mut Script, b: ConnId, mut t: u64, end: u64) {
    for l in LATENCIES_NS[..3].iter().cycle() {
        if t >= end {
            break;
        }
        let r = tl.write(b, t, 512);
        tl.ack(t + l, r);
        t += HEARTBEAT_NS;
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use observer_common::{FlowKey, LatKind, OpClass};

    use super::*;
    use crate::source::synth::scenarios::scenario;
    use crate::source::synth::scenarios::tests::assert_deterministic;

    fn requester(ip: IpAddr) -> [u8; 16] {
        match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
            IpAddr::V6(v6) => v6.octets(),
        }
    }

    /// The samples of `kind` of the requests `ip` sends.
    fn samples(w: &Workload, ip: IpAddr, kind: LatKind) -> Option<&Vec<u64>> {
        let want = requester(ip);
        w.truth
            .latency
            .iter()
            .find(|((k, kd), _)| k.requester == want && *kd == kind)
            .map(|(_, v)| v)
    }

    #[test]
    fn the_latency_truth_is_what_the_schedule_intends() {
        let w = scenario("latency").unwrap();
        assert_deterministic("latency", &w);
        assert!((300..2000).contains(&w.len()), "{} frames", w.len());
        for pair in w.frames.windows(2) {
            assert!(pair[0].ts_ns < pair[1].ts_ns);
        }
        let [l5, l20, l80, l1500, l12000] = LATENCIES_NS;
        let a = IpAddr::V4(Ipv4Addr::new(198, 18, 70, 1));
        let b = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x7201));
        let c = IpAddr::V4(Ipv4Addr::new(198, 18, 71, 1));
        let a_acks = [
            // One ACK per request: every latency.
            &[l5, l20, l80, l1500, l12000][..],
            // Coalesced: the newest request of each group.
            &[l5, l80, l12000],
            // Seven in flight: two of the four ACKs.
            &[l20, l1500],
            // Go-back-N: the NAK, then the WRITE after the ones sent again.
            &[l20, l5],
            // RNR NAK: the WRITE after the ones sent again.
            &[l1500],
            // The WRITE lost, then sent again after a timeout. The WRITE never answered: none.
            &[l80],
        ]
        .concat();
        assert_eq!(samples(&w, a, LatKind::Ack), Some(&a_acks));
        assert_eq!(samples(&w, a, LatKind::Read), None);
        // C: one at a time, four in flight, six in flight (the last two untimed) and one more.
        let c_reads = vec![l5, l80, l20, l80, l1500, l12000, l20, l20, l80, l80, l5];
        assert_eq!(samples(&w, c, LatKind::Read), Some(&c_reads));
        assert_eq!(samples(&w, c, LatKind::Ack), None);
        // B: every WRITE gets its own ACK and gives its sample: 5, 20, 80 us in turn.
        let hb = samples(&w, b, LatKind::Ack).unwrap();
        let ops = |f: fn(&FlowKey) -> [u8; 16], class: OpClass| -> u64 {
            w.truth
                .flows
                .iter()
                .filter(|(k, _)| f(k) == requester(b))
                .map(|(_, s)| s.ops[class as usize])
                .sum()
        };
        let writes = ops(|k| k.src_ip, OpClass::Write);
        let acks = ops(|k| k.dst_ip, OpClass::Ack);
        assert_eq!((hb.len() as u64, acks), (writes, writes));
        assert!(writes > 100, "{writes}");
        for (i, ns) in hb.iter().enumerate() {
            assert_eq!(*ns, LATENCIES_NS[i % 3]);
        }
        assert_eq!(w.truth.latency.len(), 3);
        // Nothing outside the distribution.
        for ns in w.truth.latency.values().flatten() {
            assert!(LATENCIES_NS.contains(ns), "{ns}");
        }
    }
}
