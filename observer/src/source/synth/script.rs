//! Answers at chosen times: a [`Script`] plans the requests of reliable connections and their
//! responders' answers at capture times the scenario chooses, then emits them in time order
//! through each connection's [`QpStream`] (which keeps the PSN truth as usual). As it emits an
//! answer it records in [`Truth::latency`](super::Truth::latency) the sample the observer must
//! take from it, from the generator's own record of the requests: which ones the answer answers,
//! when each passed the observation point, which were lost before it or sent again.
//!
//! The rules applied to that record (the observer's passive latency analysis):
//!
//! - **ACK latency**: a request with AckReq (every request a timeline plans but a READ), seen
//!   for the first time, to the first answer covering it: an ACK covers the requests up to the
//!   one it names, a NAK (PSN sequence error) those before the one it names. An answer gives the
//!   latency of the newest request it covers when that one is timed, nothing otherwise.
//! - At most [`LAT_SLOTS`] AckReq requests of a connection are timed in flight; the next one is
//!   not, and from it on none is until an answer covers it.
//! - Karn's rule: a request passing the observation point again (sent again) is not timed, and
//!   the timed requests from it on no longer are: they count as untimed in the rule above (no
//!   timing until an answer covers the first of them). A request lost before the observation
//!   point passes it for the first time when it is sent again: it is a new request there.
//! - An RNR NAK answers the requests before the one it names, as an ACK of them would; the
//!   one it names waits for the RNR timer and is sent again (Karn's rule from it on).

//! - **READ latency**: a READ request seen for the first time to the first packet of its
//!   response; at most [`LAT_SLOTS`] READs of a connection are timed in flight, the others never.
//! - A sample is the difference of the two frames' capture times.

use std::collections::BTreeMap;
use std::ops::RangeBounds;

use observer_common::{LAT_SLOTS, LatKey, LatKind};

use super::qp::QpStream;
use super::workload::Workload;
use super::{FRAME_GAP_NS, SYNDROME_NAK_SEQ, SYNDROME_RNR_NAK};

/// A connection of a [`Script`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnId(usize);

/// A request planned on a [`Script`]: its connection and its rank among that connection's
/// requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqId {
    conn: usize,
    rank: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReqKind {
    Write,
    Send,
    Read,
}

#[derive(Clone, Debug)]
struct Request {
    kind: ReqKind,
    len: usize,
    at_ns: u64,
    /// Lost before the observation point on its first transmission.
    lost: bool,
    /// It passed the observation point.
    passed: bool,
    /// Its PSN and the PSNs it consumes, once emitted.
    psn: Option<u32>,
    psns: u32,
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Request(usize),
    /// An ACK of every request up to this one.
    Ack(usize),
    /// A NAK (PSN sequence error) naming this request: the ones before it arrived.
    Nak(usize),
    /// An RNR NAK naming this request.
    RnrNak(usize),
    /// Go-back-N from this request: it and the `count` planned after it are sent again.
    Resend {
        from: usize,
        count: usize,
    },
    /// The responses to this READ.
    ReadResponse(usize),
}

#[derive(Clone, Debug)]
struct Step {
    at_ns: u64,
    conn: usize,
    action: Action,
}

#[derive(Clone, Debug)]
struct Conn {
    qp: QpStream,
    requests: Vec<Request>,
    ledger: Ledger,
}

/// Requests and answers of several connections at chosen capture times. Each request is one
/// packet (a WRITE or SEND of at most the path MTU, or a READ request); answers name the
/// requests they answer. Frames of one step after its first (a READ's responses, a resend)
/// follow [`FRAME_GAP_NS`] apart. [`Script::run`] panics when two frames would not come in
/// strictly increasing time.
#[derive(Clone, Debug, Default)]
pub struct Script {
    conns: Vec<Conn>,
    steps: Vec<Step>,
}

impl Script {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a connection: `qp` emits its frames (it should have emitted none yet).
    pub fn connect(&mut self, qp: QpStream) -> ConnId {
        self.conns.push(Conn {
            qp,
            requests: Vec::new(),
            ledger: Ledger::default(),
        });
        ConnId(self.conns.len() - 1)
    }

    fn request(&mut self, c: ConnId, at_ns: u64, kind: ReqKind, len: usize, lost: bool) -> ReqId {
        let conn = &mut self.conns[c.0];
        if kind != ReqKind::Read {
            assert!(
                len <= conn.qp.pmtu as usize,
                "a request of {len} bytes would take several packets"
            );
        }
        if let Some(last) = conn.requests.last() {
            assert!(
                at_ns > last.at_ns,
                "the requests of a connection are planned in time order"
            );
        }
        let rank = conn.requests.len();
        conn.requests.push(Request {
            kind,
            len,
            at_ns,
            lost,
            passed: false,
            psn: None,
            psns: 1,
        });
        self.steps.push(Step {
            at_ns,
            conn: c.0,
            action: Action::Request(rank),
        });
        ReqId { conn: c.0, rank }
    }

    /// An RDMA WRITE of `len` bytes (one packet) at `at_ns`.
    pub fn write(&mut self, c: ConnId, at_ns: u64, len: usize) -> ReqId {
        self.request(c, at_ns, ReqKind::Write, len, false)
    }

    /// An RDMA WRITE of `len` bytes (one packet) sent at `at_ns` and lost before the observation
    /// point: its PSN is used, no frame is emitted.
    pub fn write_lost(&mut self, c: ConnId, at_ns: u64, len: usize) -> ReqId {
        self.request(c, at_ns, ReqKind::Write, len, true)
    }

    /// A SEND of `len` bytes (one packet) at `at_ns`.
    pub fn send(&mut self, c: ConnId, at_ns: u64, len: usize) -> ReqId {
        self.request(c, at_ns, ReqKind::Send, len, false)
    }

    /// An RDMA READ request of `dma_len` bytes at `at_ns` (its responses:
    /// [`Script::read_response`]).
    pub fn read(&mut self, c: ConnId, at_ns: u64, dma_len: u32) -> ReqId {
        self.request(c, at_ns, ReqKind::Read, dma_len as usize, false)
    }

    /// When request `r` is (first) sent.
    pub fn sent_at(&self, r: ReqId) -> u64 {
        self.conns[r.conn].requests[r.rank].at_ns
    }

    fn answer(&mut self, at_ns: u64, r: ReqId, action: Action) {
        self.steps.push(Step {
            at_ns,
            conn: r.conn,
            action,
        });
    }

    /// The responder ACKs every request up to `upto` at `at_ns`.
    pub fn ack(&mut self, at_ns: u64, upto: ReqId) {
        self.answer(at_ns, upto, Action::Ack(upto.rank));
    }

    /// The responder NAKs request `missing` (PSN sequence error: it did not arrive, the ones
    /// before it did) at `at_ns`.
    pub fn nak(&mut self, at_ns: u64, missing: ReqId) {
        self.answer(at_ns, missing, Action::Nak(missing.rank));
    }

    /// The responder answers request `r` with an RNR NAK at `at_ns`.
    pub fn rnr_nak(&mut self, at_ns: u64, r: ReqId) {
        self.answer(at_ns, r, Action::RnrNak(r.rank));
    }

    /// Go-back-N at `at_ns`: the requester sends `from` and every request it sent after it again
    /// (those planned before `at_ns`). Returns when the last of them is sent.
    pub fn resend_from(&mut self, at_ns: u64, from: ReqId) -> u64 {
        let count = self.conns[from.conn].requests[from.rank..]
            .iter()
            .take_while(|r| r.at_ns < at_ns)
            .count();
        assert!(count > 0, "nothing sent to send again");
        self.answer(
            at_ns,
            from,
            Action::Resend {
                from: from.rank,
                count,
            },
        );
        at_ns + (count as u64 - 1) * FRAME_GAP_NS
    }

    /// The responder sends the responses to READ `read` from `at_ns` on.
    pub fn read_response(&mut self, at_ns: u64, read: ReqId) {
        assert_eq!(
            self.conns[read.conn].requests[read.rank].kind,
            ReqKind::Read,
            "responses answer a READ"
        );
        self.answer(at_ns, read, Action::ReadResponse(read.rank));
    }

    /// Emits every step into `w` in time order (steps planned at the same time in the order
    /// planned), with the latency samples their answers give.
    pub fn run(mut self, w: &mut Workload) {
        let mut steps = std::mem::take(&mut self.steps);
        steps.sort_by_key(|s| s.at_ns);
        for s in steps {
            self.conns[s.conn].step(w, s.at_ns, s.action);
        }
    }
}

impl Conn {
    /// The PSN request `rank` was sent with, and its last (a READ consumes several).
    fn psns(&self, rank: usize) -> (u32, u32) {
        let r = &self.requests[rank];
        let psn = r.psn.expect("answers come after the request they answer");
        (psn, psn.wrapping_add(r.psns - 1) & 0xFF_FFFF)
    }

    /// Request `rank` passed the observation point at `at_ns`: for the first time, or again.
    fn passed(&mut self, rank: usize, at_ns: u64) {
        let r = &mut self.requests[rank];
        let read = r.kind == ReqKind::Read;
        if r.passed {
            self.ledger.again(rank, read, at_ns);
        } else {
            r.passed = true;
            self.ledger.seen(rank, read, at_ns);
        }
    }

    fn step(&mut self, w: &mut Workload, at_ns: u64, action: Action) {
        let first = w.frames.len();
        // Every step but a lost request puts its first frame at `at_ns`.
        let lost = matches!(action, Action::Request(rank) if self.requests[rank].lost);
        if lost {
            self.qp.lose_next(1);
        } else {
            w.at(at_ns);
        }
        let sample = match action {
            Action::Request(rank) => {
                let r = &self.requests[rank];
                let (kind, len) = (r.kind, r.len);
                let psn = match kind {
                    ReqKind::Write => self.qp.write(w, len),
                    ReqKind::Send => self.qp.send(w, len),
                    ReqKind::Read => self.qp.read_request(w, len as u32),
                };
                let next = self.qp.next_psn();
                let r = &mut self.requests[rank];
                r.psn = Some(psn);
                r.psns = next.wrapping_sub(psn) & 0xFF_FFFF;
                if !lost {
                    self.passed(rank, w.frames[first].ts_ns);
                }
                None
            }
            Action::Ack(rank) => {
                let (_, last) = self.psns(rank);
                self.qp.ack(w, last);
                let ts = w.frames[first].ts_ns;
                self.ledger
                    .answered(..=rank, ts)
                    .map(|ns| (LatKind::Ack, ns))
            }
            Action::Nak(rank) => {
                let (psn, _) = self.psns(rank);
                self.qp.nak(w, psn, SYNDROME_NAK_SEQ);
                let ts = w.frames[first].ts_ns;
                self.ledger
                    .answered(..rank, ts)
                    .map(|ns| (LatKind::Ack, ns))
            }
            Action::RnrNak(rank) => {
                let (psn, _) = self.psns(rank);
                self.qp.nak(w, psn, SYNDROME_RNR_NAK);
                let ts = w.frames[first].ts_ns;
                self.ledger.no_longer_timed(rank);
                self.ledger
                    .answered(..rank, ts)
                    .map(|ns| (LatKind::Ack, ns))
            }
            Action::Resend { from, count } => {
                let (psn, _) = self.psns(from);
                let sent = self.qp.retransmit_from(w, psn);
                assert_eq!(
                    sent, count,
                    "the requests sent again are those planned before"
                );
                for (rank, k) in (from..from + count).zip(first..) {
                    self.passed(rank, w.frames[k].ts_ns);
                }
                None
            }
            Action::ReadResponse(rank) => {
                let (psn, _) = self.psns(rank);
                self.qp
                    .read_response(w, psn, self.requests[rank].len as u32);
                let ts = w.frames[first].ts_ns;
                self.ledger
                    .read_answered(rank, ts)
                    .map(|ns| (LatKind::Read, ns))
            }
        };
        for (k, f) in w.frames[first..].iter().enumerate() {
            assert_eq!(
                f.ts_ns,
                at_ns + k as u64 * FRAME_GAP_NS,
                "frame {k} of a step at {at_ns} ns: the workload's frame gap must be the default"
            );
        }
        if let Some((kind, ns)) = sample {
            let key = LatKey::of_request(&self.qp.req.flow_key());
            w.truth.latency.entry((key, kind)).or_default().push(ns);
        }
    }
}

/// A request as the observation point saw it: when, and whether it is timed.
#[derive(Clone, Copy, Debug)]
struct Seen {
    at_ns: u64,
    timed: bool,
}

/// The generator's record of one connection's requests awaiting an answer, by rank, as the
/// observation point saw them, and the latency rules applied to it (the module's doc).
#[derive(Clone, Debug, Default)]
struct Ledger {
    /// AckReq requests not answered yet.
    acks: BTreeMap<usize, Seen>,
    /// The first AckReq request left untimed, or no longer timed: no request is timed until an
    /// answer covers it.
    untimed_from: Option<usize>,
    /// READ requests not answered yet.
    reads: BTreeMap<usize, Seen>,
}

fn timed(m: &BTreeMap<usize, Seen>) -> usize {
    m.values().filter(|s| s.timed).count()
}

impl Ledger {
    /// Request `rank` passed the observation point for the first time at `at_ns`.
    fn seen(&mut self, rank: usize, read: bool, at_ns: u64) {
        if read {
            let timed = timed(&self.reads) < LAT_SLOTS;
            self.reads.insert(rank, Seen { at_ns, timed });
            return;
        }
        let timed = self.untimed_from.is_none() && timed(&self.acks) < LAT_SLOTS;
        if !timed && self.untimed_from.is_none() {
            self.untimed_from = Some(rank);
        }
        self.acks.insert(rank, Seen { at_ns, timed });
    }

    /// Karn's rule from request `rank` on: the timed ones are no longer, and count as untimed.
    fn no_longer_timed(&mut self, rank: usize) {
        let mut forgotten = None;
        for (&r, s) in self.acks.range_mut(rank..) {
            if s.timed {
                s.timed = false;
                forgotten = forgotten.or(Some(r));
            }
        }
        if let Some(f) = forgotten {
            self.untimed_from = Some(self.untimed_from.map_or(f, |u| u.min(f)));
        }
        for (_, s) in self.reads.range_mut(rank..) {
            s.timed = false;
        }
    }

    /// Request `rank` passed the observation point again at `at_ns` (Karn's rule).
    fn again(&mut self, rank: usize, read: bool, at_ns: u64) {
        self.no_longer_timed(rank);
        // Answered already (an RNR NAK covers it): in flight again, untimed.
        let m = if read {
            &mut self.reads
        } else {
            &mut self.acks
        };
        m.entry(rank).or_insert(Seen {
            at_ns,
            timed: false,
        });
    }

    /// An ACK or NAK at `at_ns` covers the AckReq requests of `ranks`: the sample it gives.
    fn answered(&mut self, ranks: impl RangeBounds<usize> + Clone, at_ns: u64) -> Option<u64> {
        if self.untimed_from.is_some_and(|u| ranks.contains(&u)) {
            self.untimed_from = None;
        }
        let covered: Vec<usize> = self.acks.range(ranks).map(|(&r, _)| r).collect();
        let newest = covered.last().map(|r| self.acks[r]);
        for r in &covered {
            self.acks.remove(r);
        }
        newest.filter(|s| s.timed).map(|s| at_ns - s.at_ns)
    }

    /// The first response to READ `rank` at `at_ns`: the sample it gives. (Responses come in
    /// order: the READs before it are answered.)
    fn read_answered(&mut self, rank: usize, at_ns: u64) -> Option<u64> {
        let s = self.reads.get(&rank).copied();
        self.reads = self.reads.split_off(&(rank + 1));
        s.filter(|s| s.timed).map(|s| at_ns - s.at_ns)
    }
}

#[cfg(test)]
mod tests {
    use observer_common::wire;

    use super::*;
    use crate::source::synth::BASE_TS_NS;
    use crate::source::synth::qp::RNR_WAIT_NS;
    use crate::source::synth::scenarios::qp_v4;

    const US: u64 = 1_000;
    const T: u64 = BASE_TS_NS;

    /// An RC QP from 198.18.`net`.1 to .2, its PSNs wrapping after the second request.
    fn qp(net: u8) -> QpStream {
        qp_v4(wire::TRANSPORT_RC, net, [1, 2], [0x9001, 0x9002], 0xFF_FFFE)
    }

    fn key(net: u8) -> LatKey {
        LatKey::of_request(&qp(net).req.flow_key())
    }

    /// The samples of `kind`, whatever the requester.
    fn samples(w: &Workload, kind: LatKind) -> Vec<u64> {
        w.truth
            .latency
            .iter()
            .filter(|((_, k), _)| *k == kind)
            .flat_map(|(_, v)| v.iter().copied())
            .collect()
    }

    #[test]
    fn an_answer_gives_the_latency_of_the_newest_request_it_covers() {
        let mut tl = Script::new();
        let c = tl.connect(qp(90));
        tl.write(c, T, 100);
        let b = tl.write(c, T + US, 100);
        // Coalesced: the newest (30 us), not the oldest (31 us).
        tl.ack(T + 31 * US, b);
        let d = tl.write(c, T + 40 * US, 100);
        tl.ack(T + 47 * US, d);
        // A NAK covers what precedes the request it names: e (9 us).
        let e = tl.write(c, T + 50 * US, 100);
        let lost = tl.write_lost(c, T + 51 * US, 100);
        let g = tl.write(c, T + 52 * US, 100);
        tl.nak(tl.sent_at(e) + 9 * US, lost);
        // What is sent again gives no sample.
        let last = tl.resend_from(T + 60 * US, lost);
        assert_eq!(last, T + 61 * US);
        tl.ack(last + 4 * US, g);
        let h = tl.write(c, T + 70 * US, 100);
        tl.ack(T + 72 * US, h);
        let mut w = Workload::default();
        tl.run(&mut w);
        assert_eq!(samples(&w, LatKind::Ack), [30 * US, 7 * US, 9 * US, 2 * US]);
        assert!(samples(&w, LatKind::Read).is_empty());
        // Requests a, b, d, e, g, then lost and g again, h; four ACKs and a NAK.
        assert_eq!(w.len(), 13);
    }

    #[test]
    fn a_request_lost_before_the_observation_point_is_timed_when_it_first_passes() {
        let mut tl = Script::new();
        let c = tl.connect(qp(96));
        // Go-back-N: the lost request passes for the first time (timed, from then: 4 us); the
        // one after it passes again (no sample). The NAK answers the first (10 us).
        tl.write(c, T, 100);
        let lost = tl.write_lost(c, T + US, 100);
        let g = tl.write(c, T + 2 * US, 100);
        tl.nak(T + 10 * US, lost);
        tl.resend_from(T + 20 * US, lost);
        tl.ack(T + 24 * US, lost);
        tl.ack(T + 26 * US, g);
        // The last request lost, sent again after a timeout: 7 us.
        let last = tl.write_lost(c, T + 30 * US, 100);
        let again = tl.resend_from(T + 8 * 1_000 * US, last);
        tl.ack(again + 7 * US, last);
        let mut w = Workload::default();
        tl.run(&mut w);
        assert_eq!(samples(&w, LatKind::Ack), [10 * US, 4 * US, 7 * US]);
    }

    #[test]
    fn past_the_slots_and_after_a_resend_timing_waits_for_an_answer() {
        let mut tl = Script::new();
        let c = tl.connect(qp(91));
        let r: Vec<ReqId> = (0..6).map(|k| tl.write(c, T + k * US, 100)).collect();
        // 0..3 timed, 4 not (the first untimed), 5 not either. An ACK covering timed requests
        // only: the sample of 2 (18 us).
        tl.ack(T + 20 * US, r[2]);
        // Covers the timed 3 and the untimed 4: none.
        tl.ack(T + 30 * US, r[4]);
        // Timed again; the untimed 5 before it does not matter (9 us).
        let r6 = tl.write(c, T + 31 * US, 100);
        tl.ack(T + 40 * US, r6);
        // Karn: two timed requests sent again: the ACK of both gives no sample, and the
        // request sent before it is not timed either.
        let r7 = tl.write(c, T + 50 * US, 100);
        let r8 = tl.write(c, T + 51 * US, 100);
        tl.resend_from(T + 60 * US, r7);
        let r9 = tl.write(c, T + 63 * US, 100);
        tl.ack(T + 70 * US, r8);
        tl.ack(T + 75 * US, r9);
        let r10 = tl.write(c, T + 100 * US, 100);
        tl.ack(T + 101 * US, r10);
        let mut w = Workload::default();
        tl.run(&mut w);
        assert_eq!(samples(&w, LatKind::Ack), [18 * US, 9 * US, US]);
    }

    #[test]
    fn rnr_naks_and_reads_past_the_slots_give_no_sample() {
        let mut tl = Script::new();
        let c = tl.connect(qp(92));
        let s = tl.send(c, T, 100);
        tl.rnr_nak(T + 10 * US, s);
        let again = tl.resend_from(T + 10 * US + RNR_WAIT_NS, s);
        tl.ack(again + 5 * US, s);
        let t = again + 10 * US;
        let w1 = tl.write(c, t, 100);
        tl.ack(t + 6 * US, w1);
        // Five READs in flight (two PSNs each): the fifth is never timed; one after them is.
        let t = t + 10 * US;
        let q: Vec<ReqId> = (0..5).map(|k| tl.read(c, t + k * US, 2048)).collect();
        for (k, &q) in (0..).zip(&q) {
            tl.read_response(t + 20 * US + 3 * k * US, q);
        }
        let q5 = tl.read(c, t + 40 * US, 100);
        tl.read_response(t + 44 * US, q5);
        let mut w = Workload::default();
        tl.run(&mut w);
        assert_eq!(samples(&w, LatKind::Ack), [6 * US]);
        assert_eq!(
            samples(&w, LatKind::Read),
            [20 * US, 22 * US, 24 * US, 26 * US, 4 * US]
        );
    }

    #[test]
    fn samples_are_kept_per_requester_and_kind() {
        let mut tl = Script::new();
        let a = tl.connect(qp(93));
        let b = tl.connect(qp(94));
        let ra = tl.write(a, T, 100);
        let rb = tl.read(b, T + 500, 100);
        tl.ack(T + 3 * US, ra);
        tl.read_response(T + 500 + 8 * US, rb);
        let mut w = Workload::default();
        tl.run(&mut w);
        assert_eq!(w.truth.latency.len(), 2);
        assert_eq!(w.truth.latency[&(key(93), LatKind::Ack)], [3 * US]);
        assert_eq!(w.truth.latency[&(key(94), LatKind::Read)], [8 * US]);
    }

    #[test]
    #[should_panic(expected = "does not come after the last one")]
    fn two_frames_at_one_time_are_refused() {
        let mut tl = Script::new();
        let a = tl.connect(qp(95));
        let r = tl.write(a, T, 100);
        tl.write(a, T + US, 100);
        // At the time of the second request.
        tl.ack(T + US, r);
        tl.run(&mut Workload::default());
    }
}
