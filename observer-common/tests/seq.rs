//! The PSN analysis on sequences whose truth is known by construction: each test states what
//! the sender did (reordered, copied, went back, lost, reused the QP) and checks the class of
//! every packet and the counts.

use observer_common::seq::{REUSE_IDLE_NS, Request, Seq, SeqClass, WINDOW};
use observer_common::{FlowStats, OpClass};

use SeqClass::*;

const US: u64 = 1_000;

fn send(psn: u32) -> Request {
    Request {
        psn: psn & 0xFF_FFFF,
        class: OpClass::Send,
        has_len: false,
        read_len: 0,
        wants_answer: true,
    }
}

fn read(psn: u32, len: u32) -> Request {
    Request {
        psn,
        class: OpClass::ReadRequest,
        has_len: true,
        read_len: len,
        wants_answer: true,
    }
}

/// A flow's analysis, fed one request at a time.
#[derive(Default)]
struct Flow {
    s: FlowStats,
    now: u64,
}

impl Flow {
    fn seq(&mut self) -> Seq<'_> {
        Seq {
            counts: &mut self.s.seq,
            track: &mut self.s.seq_track,
            gaps: &mut self.s.psn_gaps,
            regressions: &mut self.s.psn_regressions,
        }
    }

    /// One request `gap_ns` after the previous one.
    fn at(&mut self, gap_ns: u64, r: Request) -> SeqClass {
        self.now += gap_ns;
        let now = self.now;
        self.seq().request(&r, now, |_| false)
    }

    fn psns(&mut self, psns: impl IntoIterator<Item = u32>) -> Vec<SeqClass> {
        psns.into_iter().map(|p| self.at(US, send(p))).collect()
    }

    fn lost(&self) -> u64 {
        self.s.seq.lost + self.s.seq_track.open_holes().0
    }
}

#[test]
fn in_order_is_nothing_but_in_order() {
    let mut f = Flow::default();
    assert!(f.psns(0..200).iter().all(|c| *c == InOrder));
    let c = f.s.seq;
    assert_eq!(
        (c.out_of_order, c.duplicates, c.retransmissions, f.lost()),
        (0, 0, 0, 0)
    );
    assert_eq!((f.s.psn_gaps, f.s.psn_regressions), (0, 0));
}

#[test]
fn reordering_is_out_of_order_not_loss() {
    let mut f = Flow::default();
    let got = f.psns([0, 1, 3, 2, 4, 6, 5, 7]);
    assert_eq!(
        got,
        [
            InOrder, InOrder, Ahead, OutOfOrder, InOrder, Ahead, OutOfOrder, InOrder
        ]
    );
    assert_eq!(f.s.seq.out_of_order, 2);
    assert_eq!(
        (f.s.seq.retransmissions, f.s.seq.duplicates, f.lost()),
        (0, 0, 0)
    );
    // A burst delayed together (three late packets in a row) fills holes: still reordering.
    let mut f = Flow::default();
    let got = f.psns([0, 4, 1, 2, 3, 5]);
    assert_eq!(
        got,
        [InOrder, Ahead, OutOfOrder, OutOfOrder, OutOfOrder, InOrder]
    );
    assert_eq!((f.s.seq.out_of_order, f.s.seq.retransmissions), (3, 0));
}

#[test]
fn exact_duplicate_copies_are_duplicates() {
    let mut f = Flow::default();
    let got = f.psns([0, 0, 1, 1, 2, 2, 3]);
    assert_eq!(
        got,
        [
            InOrder, Duplicate, InOrder, Duplicate, InOrder, Duplicate, InOrder
        ]
    );
    // Two taps merged with a lag: each copy comes one packet late.
    let mut f = Flow::default();
    let got = f.psns([0, 1, 0, 2, 1, 3, 2, 4, 3]);
    assert_eq!(got.iter().filter(|c| **c == Duplicate).count(), 4);
    assert_eq!(
        (f.s.seq.duplicates, f.s.seq.retransmissions, f.lost()),
        (4, 0, 0)
    );
}

#[test]
fn go_back_n_is_a_retransmission_run() {
    // Loss after the tap: everything was seen, then the sender went back to 5.
    let mut f = Flow::default();
    f.psns(0..10);
    let got = f.psns(5..12);
    assert_eq!(got[0], Duplicate, "not known as a run yet");
    assert!(got[1..5].iter().all(|c| *c == Retransmission));
    assert_eq!(got[5..], [InOrder, InOrder]);
    let c = f.s.seq;
    assert_eq!(
        (c.retransmissions, c.duplicates, c.retx_episodes),
        (5, 0, 1)
    );
    // Loss before the tap: 5 never passed, the resend fills it and repeats the rest.
    let mut f = Flow::default();
    f.psns((0..5).chain(6..10));
    let got = f.psns(5..11);
    assert_eq!(got[0], OutOfOrder);
    assert_eq!(got[1], Retransmission);
    let c = f.s.seq;
    assert_eq!(
        (c.retransmissions, c.out_of_order, c.retx_episodes, f.lost()),
        (5, 0, 1, 0)
    );
    assert_eq!(f.s.psn_gaps, 1);
}

#[test]
fn a_resend_after_a_timeout_is_a_retransmission() {
    let mut f = Flow::default();
    f.psns(0..10);
    assert_eq!(f.at(50_000 * US, send(9)), Retransmission);
    assert_eq!(f.s.seq.timeout_max_ns, 50_000 * US);
    assert_eq!(f.s.seq.retx_episodes, 1);
    assert_eq!(f.at(US, send(10)), InOrder);
}

#[test]
fn holes_that_leave_the_window_are_lost_and_open_ones_count_at_the_end() {
    let mut f = Flow::default();
    f.psns((0..5).chain(6..10));
    assert_eq!(f.s.seq.lost, 0);
    assert_eq!(f.s.seq_track.open_holes(), (1, 1));
    f.psns(10..100);
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (1, 1));
    assert_eq!(f.s.seq_track.open_holes(), (0, 0));
    // Two ranges (20-22 and 40) lost far apart: two events, four PSNs.
    let mut f = Flow::default();
    f.psns((0..20).chain(23..40).chain(41..200));
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (4, 2));
    // A jump beyond the window: its PSNs leave at once.
    let mut f = Flow::default();
    f.psns([0, 1, 2, 200, 201]);
    assert_eq!(
        (f.lost(), f.s.seq.lost_events + f.s.seq_track.open_holes().1),
        (197, 1)
    );
}

#[test]
fn reordering_beyond_the_window_is_late_not_lost() {
    let mut f = Flow::default();
    f.psns((0..10).chain(11..11 + WINDOW + 20));
    assert_eq!(f.s.seq.lost, 1);
    assert_eq!(f.at(US, send(10)), OutOfOrder);
    assert_eq!(
        (f.s.seq.lost, f.s.seq.out_of_order, f.s.seq.retransmissions),
        (0, 1, 0)
    );
    // A go-back beyond the window resends what was seen: retransmission.
    let mut f = Flow::default();
    f.psns(0..200);
    assert_eq!(f.at(US, send(100)), Retransmission);
    assert_eq!(f.at(US, send(101)), Retransmission);
}

#[test]
fn qp_reuse_starts_a_new_incarnation() {
    // Far jump.
    let mut f = Flow::default();
    f.psns(0..10);
    assert_eq!(f.at(US, send(0x50_0000)), NewIncarnation);
    assert_eq!(f.psns(0x50_0001..0x50_0005), [InOrder; 4]);
    assert_eq!((f.s.seq.resets, f.s.psn_gaps, f.lost()), (1, 0, 0));
    // Near jump (beyond the window) after the QP was idle.
    let mut f = Flow::default();
    f.psns(1000..1010);
    assert_eq!(f.at(REUSE_IDLE_NS, send(500)), NewIncarnation);
    assert_eq!(f.at(REUSE_IDLE_NS, send(7000)), NewIncarnation);
    assert_eq!(
        (f.s.seq.resets, f.s.seq.retransmissions, f.s.psn_regressions),
        (2, 0, 0)
    );
    // Soon after, the same near jump is loss (connection-manager traffic: the next test).
    let mut f = Flow::default();
    f.psns(0..10);
    assert_eq!(f.at(US, send(3000)), Ahead);
}

#[test]
fn psn_wrap_is_in_order() {
    let mut f = Flow::default();
    let got = f.psns([0xFF_FFFE, 0xFF_FFFF, 0, 2, 1, 3]);
    assert_eq!(got, [InOrder, InOrder, InOrder, Ahead, OutOfOrder, InOrder]);
    let mut f = Flow::default();
    f.psns(0xFF_FFF0..0xFF_FFFF + 5);
    let got = f.psns([0xFF_FFFE, 0xFF_FFFF, 0, 1, 2, 3, 4, 5]);
    // Sent up to 3 (after the wrap); the sender went back to 0xFFFFFE.
    assert_eq!(got[0], Duplicate);
    assert!(got[1..6].iter().all(|c| *c == Retransmission));
    assert_eq!(got[6..], [InOrder, InOrder]);
    assert_eq!((f.s.seq.retransmissions, f.s.seq.duplicates), (6, 0));
}

#[test]
fn a_request_inside_a_reads_range_is_a_violation_under_the_known_pmtu() {
    // Path MTU unknown: the READ of 3000 bytes consumes 1 to 12 PSNs; a SEND two PSNs on is
    // in range, and counted as an overlap for path MTUs 256, 512 and 1024.
    let mut f = Flow::default();
    f.psns(90..100);
    assert_eq!(f.at(US, read(100, 3000)), InOrder);
    assert_eq!(f.at(US, send(102)), InOrder);
    assert_eq!(f.s.seq.violations, [1, 1, 1, 0, 0]);
    assert_eq!(f.s.seq.violation_mask, 0b111);
    assert_eq!(
        (f.s.seq.violation_psn, f.s.seq.violation_read_psn),
        (102, 100)
    );
    // Path MTU 1024 known (a FIRST packet carried 1024 bytes): the READ consumes 100-102, the
    // next request must be 103.
    let mut f = Flow::default();
    f.s.seq.pmtu_mask = 1 << 2;
    f.psns(90..100);
    f.at(US, read(100, 3000));
    assert_eq!(f.at(US, send(102)), Violation);
    assert_eq!(f.at(US, send(103)), InOrder);
    // A READ re-requested from the middle of its range (partial responses) is no violation.
    let mut f = Flow::default();
    f.s.seq.pmtu_mask = 1 << 2;
    f.psns(90..100);
    f.at(US, read(100, 3000));
    assert_ne!(f.at(US, read(101, 2000)), Violation);
    assert_eq!(f.s.seq.violations, [0; 5]);
    // With the path MTU known, a READ's next PSN is exact: a request after it skipped is a gap.
    let mut f = Flow::default();
    f.s.seq.pmtu_mask = 1 << 2;
    f.at(US, read(100, 3000));
    assert_eq!(f.at(US, send(104)), Ahead);
}

#[test]
fn a_late_packet_takes_its_loss_event_back_once() {
    let mut f = Flow::default();
    f.psns((0..10).chain(11..11 + WINDOW + 20));
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (1, 1));
    assert_eq!(f.at(US, send(10)), OutOfOrder);
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (0, 0));
    // A copy of the late packet is no second late packet.
    assert_eq!(f.at(US, send(10)), Retransmission);
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (0, 0));
    // The range kept is one run of holes: PSNs seen before it are resends, not late.
    let mut f = Flow::default();
    f.psns((0..40).chain(41..60).chain([130]));
    assert_eq!(f.lost(), 8 + 63);
    let got = f.psns(50..56);
    assert!(got.iter().all(|c| *c == Retransmission), "{got:?}");
    assert_eq!(f.s.seq.lost, 8);
}

#[test]
fn a_hole_leaving_one_psn_at_a_time_stays_one_range() {
    // PSNs 10..=12 never come in time; they leave the window one packet at a time.
    let mut f = Flow::default();
    f.psns((0..10).chain(13..13 + WINDOW + 10));
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (3, 1));
    // Each of them arriving late is out of order, whichever comes first.
    assert_eq!(f.at(US, send(10)), OutOfOrder);
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (2, 1));
    assert_eq!(f.at(US, send(12)), OutOfOrder);
    assert_eq!(f.at(US, send(11)), OutOfOrder);
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (0, 0));
    assert_eq!(f.s.seq.retransmissions, 0);
    // The same when the hole leaves at once behind a jump of more than the window.
    let mut f = Flow::default();
    f.psns((0..10).chain(13..13 + WINDOW - 2).chain([13 + WINDOW + 40]));
    f.psns([10, 11]);
    assert_eq!((f.s.seq.out_of_order, f.s.seq.retransmissions), (2, 0));
}

#[test]
fn after_connection_manager_traffic_only_a_jump_beyond_any_go_back_is_a_new_incarnation() {
    // MADs between the two hosts since the last request, no silence: 2^16 PSNs on is a new
    // connection; a burst of loss (a few hundred PSNs) stays loss, whatever other QPs set up.
    let cm = |f: &mut Flow, psn: u32| {
        f.now += US;
        let now = f.now;
        f.seq().request(&send(psn), now, |_| true)
    };
    let mut f = Flow::default();
    f.psns(0..10);
    assert_eq!(cm(&mut f, 10 + 300), Ahead);
    assert_eq!((f.s.seq.resets, f.lost()), (0, 300));
    let mut f = Flow::default();
    f.psns(0..10);
    assert_eq!(cm(&mut f, 10 + (1 << 16)), NewIncarnation);
    assert_eq!((f.s.seq.resets, f.lost()), (1, 0));
    // Without them, the same jump is loss.
    let mut f = Flow::default();
    f.psns((0..10).chain([10 + (1 << 16)]));
    assert_eq!((f.s.seq.resets, f.lost()), (0, 1 << 16));
    // Behind, to a PSN this incarnation never sent: no resend goes there.
    let mut f = Flow::default();
    f.psns(1000..1010);
    assert_eq!(cm(&mut f, 500), NewIncarnation);
    assert_eq!(f.psns(501..520), [InOrder; 19]);
    assert_eq!((f.s.seq.resets, f.s.seq.retransmissions), (1, 0));
}

#[test]
fn a_long_go_back_after_a_timeout_is_a_resend_not_a_new_incarnation() {
    let mut f = Flow::default();
    f.psns(0..200);
    assert_eq!(f.at(500_000 * US, send(100)), Retransmission);
    assert!(f.psns(101..200).iter().all(|c| *c == Retransmission));
    assert_eq!(f.at(US, send(200)), InOrder);
    let c = f.s.seq;
    assert_eq!((c.resets, c.retransmissions, c.retx_episodes), (0, 100, 1));
    assert_eq!(c.timeout_max_ns, 500_000 * US);
}

#[test]
fn copies_lagging_behind_reordered_packets_are_no_go_back() {
    let mut f = Flow::default();
    let got = f.psns([0, 2, 0, 1, 2, 3, 1, 4, 3, 5]);
    assert_eq!(f.s.seq.retransmissions, 0, "{got:?}");
    assert_eq!(
        (f.s.seq.out_of_order, f.s.seq.duplicates),
        (1, 4),
        "{got:?}"
    );
}

#[test]
fn a_read_is_forgotten_once_past_its_range() {
    use observer_common::seq::F_READ;
    let mut f = Flow::default();
    f.at(US, read(100, 4096));
    assert_ne!(f.s.seq_track.flags & F_READ, 0);
    f.psns(117..120);
    assert_eq!(f.s.seq_track.flags & F_READ, 0);
    assert_eq!(f.s.seq.violations, [0; 5]);
}

#[test]
fn a_new_incarnation_counts_the_old_ones_open_holes_as_separate_losses() {
    let mut f = Flow::default();
    f.psns((0..10).chain(11..50).chain(51..75));
    f.at(US, send(0x50_0000));
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (2, 2));
}

#[test]
fn a_late_packet_just_past_the_window_leaves_no_range_to_join() {
    let mut f = Flow::default();
    f.psns((0..57).chain(59..122));
    f.psns([57, 122, 58]);
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (0, 0));
    f.psns((124..200).chain([201]));
    // One new hole (123), out of the window: one loss, one event.
    assert_eq!((f.s.seq.lost, f.s.seq.lost_events), (1, 1));
}

/// One behaviour as the sender made it: requests at PSNs relative to a base, each after a
/// silence (ns). Run at a base far from the wrap and at one that puts 0xFFFFFF -> 0 in the
/// middle of it, the analysis must see the same thing.
struct Behaviour {
    name: &'static str,
    /// The flow knows the path MTU (bit k: 256 << k), as after a FIRST packet.
    pmtu_mask: u32,
    /// (silence before it, request at base + offset).
    steps: Vec<(u64, i64, Request)>,
}

impl Behaviour {
    fn sends(name: &'static str, offsets: impl IntoIterator<Item = i64>) -> Self {
        Self {
            name,
            pmtu_mask: 0,
            steps: offsets.into_iter().map(|o| (US, o, send(0))).collect(),
        }
    }

    /// The classes and the flow's counts, the behaviour run at `base`.
    fn run(&self, base: u32) -> (Vec<SeqClass>, Flow) {
        let mut f = Flow::default();
        f.s.seq.pmtu_mask = self.pmtu_mask;
        let classes = self
            .steps
            .iter()
            .map(|&(gap, off, r)| {
                let psn = (i64::from(base) + off).rem_euclid(1 << 24) as u32;
                f.at(gap, Request { psn, ..r })
            })
            .collect();
        (classes, f)
    }
}

/// (gaps, regressions, out of order, duplicates, retransmissions, episodes, lost, lost events,
/// resets, violations under path MTU 1024).
fn counts(f: &Flow) -> [u64; 10] {
    let c = f.s.seq;
    [
        f.s.psn_gaps,
        f.s.psn_regressions,
        c.out_of_order,
        c.duplicates,
        c.retransmissions,
        c.retx_episodes,
        f.lost(),
        c.lost_events + f.s.seq_track.open_holes().1,
        c.resets,
        u64::from(c.violations[2]),
    ]
}

#[test]
fn every_behaviour_classifies_the_same_with_the_psns_wrapping_inside_it() {
    let window = i64::from(WINDOW);
    // Each behaviour's PSNs cross offset 0 (the wrap, at base 0) in its middle; the counts are
    // what the sender did, worked out by hand.
    let cases: Vec<(Behaviour, [u64; 10])> = vec![
        // Two pairs swapped on the way, one pair across the wrap.
        (
            Behaviour::sends("reorder", [-4, -3, -1, -2, 0, 2, 1, 3]),
            [2, 2, 2, 0, 0, 0, 0, 0, 0, 0],
        ),
        // A mirror copies three packets around the wrap twice.
        (
            Behaviour::sends("copies", [-3, -2, -2, -1, -1, 0, 0, 1]),
            [0, 3, 0, 3, 0, 0, 0, 0, 0, 0],
        ),
        // Go-back-N: -1 and 0 lost before the tap, the rest seen, then the sender goes back
        // to -1 after the responder's NAK: one episode of 5 resent PSNs.
        (
            Behaviour::sends("go-back-n", (-5..-1).chain(1..4).chain(-1..4)),
            [1, 5, 0, 0, 5, 1, 0, 0, 0, 0],
        ),
        // A resend of -2..=1 after a 50 ms timeout.
        (
            Behaviour {
                name: "timeout resend",
                pmtu_mask: 0,
                steps: (-6..2)
                    .map(|o| (US, o, send(0)))
                    .chain([(50_000 * US, -2, send(0))])
                    .chain((-1..2).map(|o| (US, o, send(0))))
                    .collect(),
            },
            [0, 4, 0, 0, 4, 1, 0, 0, 0, 0],
        ),
        // The QP number reused: an incarnation across the wrap, then a far jump.
        (
            Behaviour::sends("qp reuse", (-5..5).chain(0x50_0000..0x50_0004)),
            [0, 0, 0, 0, 0, 0, 0, 0, 1, 0],
        ),
        // Reused after a silence, the new incarnation starting just past the wrap (beyond
        // the window from the old one's last PSN).
        (
            Behaviour {
                name: "qp reuse after idle",
                pmtu_mask: 0,
                steps: (-200..-190)
                    .map(|o| (US, o, send(0)))
                    .chain([(REUSE_IDLE_NS, 5, send(0))])
                    .chain((6..10).map(|o| (US, o, send(0))))
                    .collect(),
            },
            [0, 0, 0, 0, 0, 0, 0, 0, 1, 0],
        ),
        // Path MTU 1024: a READ of 3000 bytes at -1 consumes -1, 0 and 1; a SEND at 1 is
        // inside it, the next request at 2 is in order.
        (
            Behaviour {
                name: "read then overlap",
                pmtu_mask: 1 << 2,
                steps: (-4..-1)
                    .map(|o| (US, o, send(0)))
                    .chain([(US, -1, read(0, 3000)), (US, 1, send(0)), (US, 2, send(0))])
                    .collect(),
            },
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        ),
        // -1, 0 and 1 never arrive; their hole leaves the window: one lost range of 3.
        (
            Behaviour::sends("loss", (-10..-1).chain(2..2 + window + 5)),
            [1, 0, 0, 0, 0, 0, 3, 1, 0, 0],
        ),
    ];
    for (b, want) in &cases {
        let (far_classes, far) = b.run(0x10_0000);
        let (classes, wrapped) = b.run(0);
        assert_eq!(counts(&far), *want, "{}: far from the wrap", b.name);
        assert_eq!(counts(&wrapped), *want, "{}: across the wrap", b.name);
        assert_eq!(classes, far_classes, "{}", b.name);
    }
    // The violation names the READ and the request by their wrapped PSNs.
    let (_, f) = cases[6].0.run(0);
    assert_eq!(
        (f.s.seq.violation_psn, f.s.seq.violation_read_psn),
        (1, 0xFF_FFFF)
    );
}
