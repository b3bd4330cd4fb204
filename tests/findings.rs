//! The findings engine end to end, through the real binary: every rule fires on the `rule-*`
//! scenario built for it (exactly that rule, with its evidence and flows), `rules-clean` and
//! the real captures fire none, thresholds and `disabled` come from a TOML file, the terminal
//! output leads with the findings, and the time series sums to the totals. No privileges
//! needed.

use std::{
    collections::BTreeSet,
    net::IpAddr,
    path::PathBuf,
    process::{Command, ExitStatus},
};

use integration_tests::{Scratch, output};
use observer_common::{FlowKey, FlowStats, OpClass};
use roce_observer::{
    analysis::findings::{Check, CheckStatus, Finding, RULES, Severity},
    analysis::series::FlowRef,
    model::Report,
    source::nic::host::write_tree,
    source::synth::{self, Workload},
};
use serde_json::Value;

const CLI: &str = env!("CARGO_BIN_EXE_roce-observer-under-test");

/// The flags every rule scenario is built for.
const FLAGS: [&str; 5] = ["--link-speed", "10G", "--uplinks", "4", "--jobs"];

/// The scenario `name` (built by the library) and the pcap written from it.
fn capture(dir: &Scratch, name: &str) -> (Workload, PathBuf) {
    let w = synth::scenario(name).unwrap_or_else(|| panic!("no scenario {name}"));
    let path = dir.path(&format!("{name}.pcap"));
    let f = std::fs::File::create(&path).unwrap();
    synth::write_pcap(std::io::BufWriter::new(f), &w.frames).unwrap();
    (w, path)
}

/// `roce-observer replay FILES ARGS`: (status, stdout, stderr).
fn run_replay(files: &[PathBuf], args: &[&str]) -> (ExitStatus, String, String) {
    output(
        Command::new(CLI)
            .arg("replay")
            .args(files)
            .arg("--no-progress")
            .args(args),
    )
}

/// `roce-observer replay FILES --json ARGS`, which must succeed, as a report.
fn replay_json(files: &[PathBuf], args: &[&str]) -> Report {
    let (status, out, err) = run_replay(files, &[&["--json"][..], args].concat());
    assert!(status.success(), "replay {files:?} {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn fired(r: &Report) -> BTreeSet<&str> {
    r.findings.iter().map(|f| f.rule.as_str()).collect()
}

fn check<'a>(r: &'a Report, rule: &str) -> &'a Check {
    r.checks
        .iter()
        .find(|c| c.rule == rule)
        .unwrap_or_else(|| panic!("no check of {rule}: {:?}", r.checks))
}

fn finding<'a>(r: &'a Report, rule: &str) -> &'a Finding {
    r.findings
        .iter()
        .find(|f| f.rule == rule)
        .unwrap_or_else(|| panic!("no finding of {rule}: {:?}", r.findings))
}

fn evidence_u64(f: &Finding, key: &str) -> u64 {
    f.evidence
        .get(key)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{}: evidence {key} not a count: {:?}", f.rule, f.evidence))
}

fn evidence_f64(f: &Finding, key: &str) -> f64 {
    f.evidence
        .get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{}: evidence {key} not a number: {:?}", f.rule, f.evidence))
}

fn evidence_str<'a>(f: &'a Finding, key: &str) -> &'a str {
    f.evidence
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{}: evidence {key} not a string: {:?}", f.rule, f.evidence))
}

fn evidence_strings(f: &Finding, key: &str) -> Vec<String> {
    f.evidence
        .get(key)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{}: evidence {key} not a list: {:?}", f.rule, f.evidence))
        .iter()
        .map(|v| v.as_str().expect("a list of strings").to_string())
        .collect()
}

/// The flows of the scenario's truth that `pick` selects, as findings name them.
fn truth_flows(w: &Workload, pick: impl Fn(&FlowStats) -> bool) -> BTreeSet<FlowRef> {
    w.truth
        .flows
        .iter()
        .filter(|(_, s)| pick(s))
        .map(|(k, _): (&FlowKey, _)| FlowRef::of_key(k))
        .collect()
}

fn named(f: &Finding) -> BTreeSet<FlowRef> {
    let set: BTreeSet<FlowRef> = f.flows.iter().cloned().collect();
    assert_eq!(set.len(), f.flows.len(), "{}: a flow named twice", f.rule);
    set
}

fn op(s: &FlowStats, o: OpClass) -> u64 {
    s.ops[o as usize]
}

fn sum(w: &Workload, f: impl Fn(&FlowStats) -> u64) -> u64 {
    w.truth.flows.values().map(f).sum()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Replays the scenario with [`FLAGS`] and checks that exactly `expected` fired, each with a
/// `fired` check, a title, summary and hint, the other rules passed or skipped, and every rule
/// checked once. Returns the truth and the report.
fn rule_scenario(name: &str, expected: &[&str]) -> (Workload, Report) {
    let dir = Scratch::new(&format!("findings-{name}"));
    let (w, path) = capture(&dir, name);
    // A scenario with a host's NIC side: its two readings as copied trees.
    let mut args: Vec<String> = FLAGS.iter().map(|s| s.to_string()).collect();
    if let Some(nic) = &w.nic {
        for (sub, s) in [("before", &nic.before), ("after", &nic.after)] {
            let d = dir.path(sub);
            write_tree(&d, s).unwrap();
            args.extend(["--nic-root".to_string(), d.to_str().unwrap().to_string()]);
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = replay_json(&[path], &args);
    let want: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(
        fired(&r),
        want,
        "{name}: fired {:?}; checks {:?}",
        r.findings
            .iter()
            .map(|f| (&f.rule, &f.summary))
            .collect::<Vec<_>>(),
        r.checks
    );
    assert_eq!(
        r.checks.iter().map(|c| c.rule.as_str()).collect::<Vec<_>>(),
        RULES.iter().map(|(rule, _)| *rule).collect::<Vec<_>>(),
        "{name}: every rule checked once, in order"
    );
    for c in &r.checks {
        let want_fired = want.contains(c.rule.as_str());
        assert_eq!(
            c.status == CheckStatus::Fired,
            want_fired,
            "{name}: check {c:?}"
        );
        assert!(!c.note.is_empty(), "{name}: check {c:?} says nothing");
    }
    // The flags were given: nothing that depends on them may be skipped.
    for rule in [
        "microburst",
        "ecmp-imbalance",
        "job-straggler",
        "job-irregular-iteration",
        "job-hang",
    ] {
        assert_ne!(
            check(&r, rule).status,
            CheckStatus::Skipped,
            "{name}: {rule}"
        );
    }
    for f in &r.findings {
        assert!(!f.title.trim().is_empty(), "{name}: {f:?}");
        assert!(!f.summary.trim().is_empty(), "{name}: {f:?}");
        assert!(!f.hint.trim().is_empty(), "{name}: {f:?}");
        assert!(!f.evidence.is_empty(), "{name}: {f:?}");
        assert!(!f.summary.contains('\n'), "{name}: one-line summary");
        assert_eq!(check(&r, &f.rule).note, f.summary, "{name}");
    }
    // Most severe first.
    assert!(
        r.findings
            .windows(2)
            .all(|p| p[0].severity >= p[1].severity),
        "{name}: order {:?}",
        r.findings
    );
    (w, r)
}

#[test]
fn ce_without_cnp_fires_on_ce_marks_that_draw_no_cnp() {
    let (w, r) = rule_scenario("rule-ce-without-cnp", &["ce-without-cnp"]);
    let f = finding(&r, "ce-without-cnp");
    assert_eq!(f.severity, Severity::Critical);
    let ce = w.truth.counters.ce_packets;
    assert!(ce >= 20, "the scenario marks at least 10 per sender: {ce}");
    assert_eq!(evidence_u64(f, "ce_packets"), ce);
    assert_eq!(evidence_u64(f, "cnps_back"), 0);
    assert_eq!(w.truth.counters.cnp_packets, 0);
    assert_eq!(evidence_strings(f, "host_pairs").len(), 2);
    // The CE-marked data flows, and only those.
    assert_eq!(named(f), truth_flows(&w, |s| s.ecn[3] > 0));
    assert_eq!(named(f), truth_flows(&w, |s| op(s, OpClass::Write) > 0));
    assert!(f.summary.contains("198.18.41.100"), "{}", f.summary);
}

#[test]
fn not_ect_names_exactly_the_not_ect_sender() {
    let (w, r) = rule_scenario("rule-not-ect", &["not-ect"]);
    let f = finding(&r, "not-ect");
    assert_eq!(f.severity, Severity::Warning);
    let offender = truth_flows(&w, |s| {
        op(s, OpClass::Write) > 0 && s.ecn[synth::NOT_ECT as usize] == s.packets
    });
    assert_eq!(offender.len(), 1, "one Not-ECT sender in the scenario");
    assert_eq!(named(f), offender);
    let flow = &f.flows[0];
    assert_eq!(
        (flow.src_ip, flow.dst_ip),
        (ip("198.18.42.3"), ip("198.18.42.103"))
    );
    assert_eq!(evidence_u64(f, "flows"), 1);
    assert_eq!(evidence_str(f, "senders"), "198.18.42.3");
    let data: u64 = w
        .truth
        .flows
        .iter()
        .filter(|(k, _)| offender.contains(&FlowRef::of_key(k)))
        .map(|(_, s)| op(s, OpClass::Write))
        .sum();
    assert_eq!(evidence_u64(f, "data_packets"), data);
    // The others send ECT(0): ECN is in use, so the rule judged.
    assert!(sum(&w, |s| s.ecn[synth::ECT0 as usize]) > 0);
}

#[test]
fn cnp_priority_fires_on_cnps_in_best_effort() {
    let (w, r) = rule_scenario("rule-cnp-priority", &["cnp-priority"]);
    let f = finding(&r, "cnp-priority");
    assert_eq!(f.severity, Severity::Warning);
    let cnps = w.truth.counters.cnp_packets;
    assert!(cnps > 0);
    assert_eq!(evidence_u64(f, "cnps"), cnps);
    assert_eq!(evidence_str(f, "cnp_dscps"), "0");
    assert_eq!(evidence_str(f, "data_dscps"), "26");
    assert_eq!(evidence_u64(f, "flows_best_effort"), 2);
    assert_eq!(evidence_u64(f, "flows_same_class"), 0);
    // The flows that carry the CNPs (receiver to sender).
    assert_eq!(named(f), truth_flows(&w, |s| op(s, OpClass::Cnp) > 0));
    for s in w.truth.flows.values().filter(|s| op(s, OpClass::Cnp) > 0) {
        assert_eq!(s.cnp_dscp_mask, 1, "CNPs in DSCP 0 only");
    }
}

#[test]
fn dscp_mix_fires_on_data_in_dscp_26_and_0() {
    let (w, r) = rule_scenario("rule-dscp-mix", &["dscp-mix"]);
    let f = finding(&r, "dscp-mix");
    assert_eq!(f.severity, Severity::Warning);
    assert!(f.title.contains("best effort"), "{}", f.title);
    let dscps = evidence_strings(f, "dscps");
    assert_eq!(dscps.len(), 2, "{dscps:?}");
    assert!(dscps[0].starts_with("DSCP 0: ") && dscps[0].ends_with("1 flow"));
    assert!(dscps[1].starts_with("DSCP 26: ") && dscps[1].ends_with("2 flows"));
    // The data flow in DSCP 0.
    assert_eq!(
        named(f),
        truth_flows(&w, |s| op(s, OpClass::Write) > 0 && s.dscp_mask == 1)
    );
    assert_eq!(f.flows[0].src_ip, ip("198.18.44.3"));
    // All ECT(0), no CE: nothing for the ECN rules.
    assert_eq!(w.truth.counters.ce_packets, 0);
    assert_eq!(sum(&w, |s| s.ecn[synth::NOT_ECT as usize]), 0);
}

#[test]
fn loss_fires_on_gaps_naks_and_go_back_n() {
    let (w, r) = rule_scenario("rule-loss", &["loss"]);
    let f = finding(&r, "loss");
    // DSCP 26 is a RoCE class: loss there is critical.
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(f.evidence["lossless_class_configured"], Value::Bool(true));
    assert_eq!(evidence_u64(f, "psn_gaps"), sum(&w, |s| s.psn_gaps));
    // Every dropped PSN was sent again: nothing missing in the end.
    assert_eq!(evidence_u64(f, "psns_missing"), sum(&w, |s| s.seq.lost));
    assert_eq!(
        evidence_u64(f, "retransmissions"),
        sum(&w, |s| s.seq.retransmissions)
    );
    assert_eq!(evidence_u64(f, "naks"), sum(&w, |s| s.seq.nak_seq));
    assert_eq!(
        (
            sum(&w, |s| s.psn_gaps),
            sum(&w, |s| s.seq.lost),
            sum(&w, |s| s.seq.nak_seq),
            sum(&w, |s| s.seq.retx_episodes)
        ),
        (2, 0, 2, 2)
    );
    // The lossy QPs: their data flows (go-back-N) and NAK flows.
    assert_eq!(
        named(f),
        truth_flows(&w, |s| s.seq.retx_episodes + s.seq.nak_seq > 0)
    );
    assert_eq!(f.flows.len(), 4);
}

/// Packets a spraying fabric swapped in pairs: out of order, not lost, not resent.
#[test]
fn reorder_fires_on_reordering_and_loss_does_not() {
    let (w, r) = rule_scenario("rule-reorder", &["reorder"]);
    let f = finding(&r, "reorder");
    // Seven reordered WRITEs, two swapped pairs each.
    assert_eq!(sum(&w, |s| s.seq.out_of_order), 14);
    assert_eq!(evidence_u64(f, "out_of_order"), 14);
    assert_eq!(named(f), truth_flows(&w, |s| s.seq.out_of_order > 0));
    assert_eq!(check(&r, "loss").status, CheckStatus::Passed);
}

/// Packets the mirror copied twice: duplicates, not retransmissions, not loss.
#[test]
fn duplicate_copies_fire_on_copies_and_loss_does_not() {
    let (w, r) = rule_scenario("rule-duplicate-copies", &["duplicate-copies"]);
    let f = finding(&r, "duplicate-copies");
    assert_eq!(sum(&w, |s| s.seq.duplicates), 5);
    assert_eq!(evidence_u64(f, "duplicates"), 5);
    assert_eq!(sum(&w, |s| s.seq.retransmissions), 0);
    assert_eq!(named(f), truth_flows(&w, |s| s.seq.duplicates > 0));
}

/// A SEND at the last PSN of a READ of 3000 bytes at path MTU 1024: one violation, named with
/// the READ's PSN and the request's.
#[test]
fn psn_violation_fires_on_a_request_inside_a_read() {
    let (w, r) = rule_scenario("rule-psn-violation", &["psn-violation"]);
    let f = finding(&r, "psn-violation");
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(evidence_u64(f, "violations"), 1);
    let read = evidence_u64(f, "first_other_psn");
    assert_eq!(evidence_u64(f, "first_psn"), read + 2);
    assert_eq!(evidence_u64(f, "pmtu"), 1024);
    // The truth: under path MTU 1024 (index 2), one overlap.
    assert_eq!(sum(&w, |s| u64::from(s.seq.violations[2])), 1);
    assert!(
        f.summary.contains("inside the READ at PSN"),
        "{}",
        f.summary
    );
}

/// The same fault as two real failure captures hold it, each side's UDP port from its own QPN:
/// the READ's responses travel on the other port, the pairing joins them, so the path MTU is
/// known and the SEND inside the READ is a violation; the request then left unanswered while
/// another QP goes on is a stall.
#[test]
fn psn_violation_and_stall_fire_with_ports_per_direction() {
    let (_, r) = rule_scenario("rule-psn-violation-split", &["psn-violation", "stall"]);
    let f = finding(&r, "psn-violation");
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(evidence_u64(f, "violations"), 1);
    assert_eq!(evidence_u64(f, "pmtu"), 1024);
    let read = evidence_u64(f, "first_other_psn");
    assert_eq!(evidence_u64(f, "first_psn"), read + 2);
    let s = finding(&r, "stall");
    assert_eq!(s.severity, Severity::Critical);
    assert_eq!(s.flows[0].src_ip, ip("198.18.75.1"));
    assert_eq!(f.flows[0].src_ip, ip("198.18.75.1"));
}

/// A receiver that stops answering while the other QP goes on for 300 ms.
#[test]
fn stall_fires_on_requests_left_unanswered() {
    let (_, r) = rule_scenario("rule-stall", &["stall"]);
    let f = finding(&r, "stall");
    assert_eq!(f.severity, Severity::Critical);
    assert_eq!(evidence_u64(f, "stalled_flows"), 1);
    // 15 waits of 20 ms after the last unanswered WRITE.
    let longest = evidence_u64(f, "longest_ns");
    assert!((300_000_000..301_000_000).contains(&longest), "{longest}");
    assert_eq!(f.evidence["resumed"], Value::Bool(false));
    assert_eq!(f.flows[0].src_ip, ip("198.18.53.1"));
}

/// QP numbers reused by new connections, one after a second's silence, one at once after the
/// connection manager's MADs between the same hosts: new incarnations, no loss.
#[test]
fn qp_reuse_fires_on_a_new_incarnation_and_loss_does_not() {
    let (w, r) = rule_scenario("rule-qp-reuse", &["qp-reuse"]);
    let f = finding(&r, "qp-reuse");
    assert_eq!(f.severity, Severity::Info);
    assert_eq!(sum(&w, |s| s.seq.resets), 2);
    assert_eq!(evidence_u64(f, "resets"), 2);
    assert_eq!(named(f), truth_flows(&w, |s| s.seq.resets > 0));
    assert_eq!(check(&r, "loss").status, CheckStatus::Passed);
    assert_eq!(r.totals.psn.missing, 0);
    // Without the MADs, the same jump with no silence before it is loss: it takes them to tell.
    let no_cm: Vec<_> = w
        .frames
        .iter()
        .filter(|f| {
            observer_common::parse_frame(f.bytes.as_slice())
                .result
                .is_ok_and(|p| p.bth.dest_qp != observer_common::QP_CM)
        })
        .cloned()
        .collect();
    let dir = Scratch::new("qp-reuse-no-cm");
    let path = dir.path("no-cm.pcap");
    let file = std::fs::File::create(&path).unwrap();
    synth::write_pcap(std::io::BufWriter::new(file), &no_cm).unwrap();
    let r = replay_json(&[path], &[]);
    assert_eq!(r.totals.psn.resets, 1);
    assert_eq!(r.totals.psn.missing, 0x2_0000 - 1);
}

/// The retried SEND after an RNR NAK has the PSN of the one refused: a retransmission after the
/// RNR wait, which the loss rule tells apart: only `rnr` fires.
#[test]
fn rnr_fires_on_rnr_naks_and_the_retries_are_not_loss() {
    let (w, r) = rule_scenario("rule-rnr", &["rnr"]);
    let f = finding(&r, "rnr");
    assert_eq!(f.severity, Severity::Warning);
    let rnr = sum(&w, |s| op(s, OpClass::RnrNak));
    assert_eq!(rnr, 2);
    assert_eq!(evidence_u64(f, "rnr_naks"), rnr);
    assert_eq!(evidence_str(f, "receivers"), "198.18.46.102");
    assert_eq!(named(f), truth_flows(&w, |s| op(s, OpClass::RnrNak) > 0));
    // One regression per retried SEND, each explained by an RNR NAK coming back: not a loss.
    assert_eq!(sum(&w, |s| s.psn_regressions), rnr);
    let check = r
        .checks
        .iter()
        .find(|c| c.rule == "loss")
        .expect("loss check");
    assert_eq!(check.status, CheckStatus::Passed, "{check:?}");
}

#[test]
fn pfc_storm_fires_on_priority_3_paused_most_of_the_time() {
    let (w, r) = rule_scenario("rule-pfc-storm", &["pfc-storm"]);
    let f = finding(&r, "pfc-storm");
    assert_eq!(f.severity, Severity::Critical);
    let storms = evidence_strings(f, "storms");
    assert_eq!(storms.len(), 1, "{storms:?}");
    let frames: u64 = w.truth.pauses.values().map(|p| p.frames[3]).sum();
    assert_eq!(frames, 40);
    assert!(
        storms[0].contains(&format!("priority 3: {frames} frames")),
        "{storms:?}"
    );
    assert_eq!(evidence_u64(f, "link_speed_bps"), 10_000_000_000);
    // Both criteria: far above 1000 frames/s, and paused more than 10% of the window.
    let window = r.window.seconds;
    assert!(frames as f64 / window > 10_000.0, "{window}");
    let pfc = r.pfc.as_ref().expect("a pfc section");
    let p3 = &pfc.sources[0].priorities[0];
    assert_eq!((p3.priority, p3.counts.frames, p3.counts.xon), (3, 40, 1));
    let paused = p3.counts.pause_ns.unwrap() as f64 / (window * 1e9);
    assert!((0.5..1.0).contains(&paused), "paused {paused}");
    assert!(f.flows.is_empty());
}

#[test]
fn pfc_idle_priority_fires_on_pauses_of_a_priority_without_roce() {
    let (w, r) = rule_scenario("rule-pfc-idle-priority", &["pfc-idle-priority"]);
    let f = finding(&r, "pfc-idle-priority");
    assert_eq!(f.severity, Severity::Warning);
    let frames: u64 = w.truth.pauses.values().map(|p| p.frames[5]).sum();
    assert_eq!(frames, 3);
    assert_eq!(
        evidence_strings(f, "idle_priorities"),
        vec![format!("priority 5: {frames} pause frames")]
    );
    assert_eq!(evidence_str(f, "roce_priorities"), "3");
    // A few frames: no storm.
    assert!(frames as f64 / r.window.seconds < 1000.0);
    assert_eq!(check(&r, "pfc-storm").status, CheckStatus::Passed);
    assert!(r.flows.iter().all(|fl| fl.untagged && fl.pcp.is_empty()));
}

#[test]
fn incast_fires_on_six_senders_to_one_congested_receiver() {
    let (w, r) = rule_scenario("rule-incast", &["incast"]);
    let f = finding(&r, "incast");
    assert_eq!(f.severity, Severity::Warning);
    let receiver = ip("198.18.49.100");
    let into: Vec<(&FlowKey, &FlowStats)> = w
        .truth
        .flows
        .iter()
        .filter(|(k, s)| FlowRef::of_key(k).dst_ip == receiver && op(s, OpClass::Write) > 0)
        .collect();
    assert_eq!(into.len(), 6);
    let packets: u64 = into.iter().map(|(_, s)| s.packets).sum();
    let ce: u64 = into.iter().map(|(_, s)| s.ecn[3]).sum();
    let percent = ce as f64 * 100.0 / packets as f64;
    assert!(percent >= 1.0, "{percent}");
    assert_eq!(
        evidence_strings(f, "receivers"),
        vec![format!("{receiver}: 6 senders, {percent:.1}% CE")]
    );
    assert_eq!(
        named(f),
        into.iter().map(|(k, _)| FlowRef::of_key(k)).collect()
    );
    // The receiver answers with CNPs in DSCP 48: cnp-priority stays silent. Each sender's
    // marks stay below the 10 ce-without-cnp needs to judge its receiver: too few, not a pass.
    assert!(w.truth.counters.cnp_packets > 0);
    assert_eq!(check(&r, "cnp-priority").status, CheckStatus::Passed);
    assert!(into.iter().all(|(_, s)| s.ecn[3] < 10), "{into:?}");
    let c = check(&r, "ce-without-cnp");
    assert_eq!(c.status, CheckStatus::InsufficientData, "{c:?}");
    assert_eq!(
        c.note,
        format!("{ce} CE marks on 6 host pairs, none with the 10 needed to judge its receiver")
    );
}

#[test]
fn microburst_fires_on_frames_back_to_back_near_line_rate() {
    let (_, r) = rule_scenario("rule-microburst", &["microburst"]);
    let f = finding(&r, "microburst");
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(evidence_u64(f, "slot_ns"), 100_000);
    assert_eq!(evidence_f64(f, "threshold_percent"), 90.0);
    let per = evidence_strings(f, "interfaces");
    assert_eq!(per.len(), 1, "{per:?}");
    assert!(
        per[0].contains("rule-microburst.pcap in: 1 burst,"),
        "{per:?}"
    );
    let mb = r.microbursts.as_ref().unwrap();
    assert_eq!(mb.link_speed_bps, Some(10_000_000_000));
    let i = &mb.interfaces[0];
    assert_eq!(i.bursts, 1);
    assert!(i.longest_burst_ns >= 300_000, "{}", i.longest_burst_ns);
    let peak = i.peak_percent.unwrap();
    assert!((90.0..100.0).contains(&peak), "peak {peak}% of the link");
}

/// A slot above 100% of the link speed given: the speed is wrong or several links are in the
/// capture. The run warns and the finding says so.
#[test]
fn a_burst_above_the_link_speed_warns_that_the_speed_is_wrong() {
    let dir = Scratch::new("findings-overspeed");
    let (_, pcap) = capture(&dir, "rule-microburst");
    let r = replay_json(&[pcap], &["--link-speed", "5G"]);
    let w: Vec<&String> = r
        .source
        .warnings
        .iter()
        .filter(|w| w.contains("of the link speed (5 Gb/s): the link speed is wrong"))
        .collect();
    assert_eq!(w.len(), 1, "{:?}", r.source.warnings);
    let f = finding(&r, "microburst");
    assert!(
        f.summary
            .ends_with("above 100%: the link speed is wrong, or this holds several links' traffic"),
        "{}",
        f.summary
    );
    // At the right speed, neither.
    let dir = Scratch::new("findings-rightspeed");
    let (_, pcap) = capture(&dir, "rule-microburst");
    let r = replay_json(&[pcap], &["--link-speed", "10G"]);
    assert!(r.source.warnings.is_empty(), "{:?}", r.source.warnings);
    assert!(!finding(&r, "microburst").summary.contains("above 100%"));
}
#[test]
fn ecmp_imbalance_fires_when_every_qp_shares_one_5_tuple() {
    let (w, r) = rule_scenario("rule-ecmp-imbalance", &["ecmp-imbalance"]);
    let f = finding(&r, "ecmp-imbalance");
    assert_eq!(f.severity, Severity::Warning);
    let ports: BTreeSet<u16> = w.truth.flows.keys().map(|k| k.udp_src_port).collect();
    assert_eq!(ports.len(), 1, "one source port for every QP");
    assert_eq!(w.truth.flows.len(), 32, "16 QPs, both directions");
    // The data all on one uplink of 4: nearly 4x the mean, random hashing far less.
    assert!(evidence_f64(f, "max_over_mean") > 3.5, "{:?}", f.evidence);
    assert!(
        evidence_f64(f, "random_max_over_mean") < 2.5,
        "{:?}",
        f.evidence
    );
    assert!(evidence_f64(f, "random_percentile") >= 95.0);
    // The 16 data flows on one uplink; their ACKs, no load, are no data flows.
    assert_eq!(evidence_u64(f, "idle_uplinks"), 3);
    let e = r.ecmp.as_ref().unwrap();
    assert_eq!((e.model.uplinks, e.flows), (4, 16));
    assert!(
        e.verdict.starts_with("worse than random: busier than "),
        "{}",
        e.verdict
    );
}

/// The generator's ring with one host computing 25% longer: that host, its cause the host
/// (its QPs quiet), in most iterations; the same ring without it fires nothing.
#[test]
fn job_straggler_names_the_host_that_computes_longer() {
    let (w, r) = rule_scenario("rule-job-straggler", &["job-straggler"]);
    let f = finding(&r, "job-straggler");
    let truth = &w.truth.jobs[0];
    let slow = truth.slow_host.unwrap();
    assert_eq!(evidence_str(f, "host"), slow.to_string());
    assert_eq!(evidence_str(f, "cause"), "host");
    assert_eq!(evidence_str(f, "late_in"), "compute");
    let (late, samples) = (evidence_u64(f, "late_samples"), evidence_u64(f, "samples"));
    assert_eq!(samples, truth.iteration_starts_ns.len() as u64 - 1);
    assert!(late * 100 >= samples * 95, "{late} of {samples}");
    // Its QPs, both ways.
    assert!(!f.flows.is_empty());
    assert!(f.flows.iter().all(|q| q.src_ip == slow || q.dst_ip == slow));
    let (_, clean) = rule_scenario("training", &[]);
    assert_eq!(check(&clean, "job-straggler").status, CheckStatus::Passed);
}

/// The ring with one host's link slow (marked, lossy): that host, finishing last, its cause
/// the network; its loss and slow answers are the loss and latency rules'.
#[test]
fn job_straggler_names_a_slow_link_as_the_network() {
    let (w, r) = rule_scenario(
        "training-network-straggler",
        &["job-straggler", "loss", "latency"],
    );
    let f = finding(&r, "job-straggler");
    let truth = &w.truth.jobs[0];
    assert_eq!(
        evidence_str(f, "host"),
        truth.slow_link.unwrap().to_string()
    );
    assert_eq!(evidence_str(f, "cause"), "network");
    assert_eq!(evidence_str(f, "late_in"), "finish");
    let (late, samples) = (evidence_u64(f, "late_samples"), evidence_u64(f, "samples"));
    assert_eq!(samples, truth.iteration_starts_ns.len() as u64);
    assert!(late * 100 >= samples * 95, "{late} of {samples}");
}

/// The ring's seventh collective four times as slow, marked and lossy: that iteration, its
/// time in the phase, the network its cause.
#[test]
fn job_irregular_iteration_names_the_slow_iteration_and_the_network() {
    let (w, r) = rule_scenario(
        "rule-job-irregular-iteration",
        &["job-irregular-iteration", "loss", "latency"],
    );
    let f = finding(&r, "job-irregular-iteration");
    let starts = &w.truth.jobs[0].iteration_starts_ns;
    // On the jobs' 1 ms bins.
    let bin = 1_000_000;
    let start = evidence_u64(f, "iteration_start_ns");
    assert!(
        start <= starts[6] && starts[6] - start < bin,
        "{start} {}",
        starts[6]
    );
    let time = evidence_u64(f, "iteration_ns");
    assert!(time.abs_diff(starts[7] - starts[6]) < bin, "{time}");
    assert_eq!(evidence_str(f, "cause"), "network");
    assert_eq!(evidence_u64(f, "irregular_iterations"), 1);
    assert!(evidence_u64(f, "network_events") > 100);
    assert_eq!(evidence_u64(f, "usual_network_events"), 0);
}

/// The ring whose fourth host never comes back from its ninth compute, the wire watched 250 ms
/// more: the job hung, that host missing from its last phase, its peers' first steps there.
#[test]
fn job_hang_names_the_host_missing_from_the_last_phase() {
    let (w, r) = rule_scenario("rule-job-hang", &["job-hang"]);
    let f = finding(&r, "job-hang");
    let truth = &w.truth.jobs[0];
    let hung = truth.hang_ns.unwrap();
    assert_eq!(evidence_str(f, "missing_hosts"), "198.18.85.4");
    let start = evidence_u64(f, "last_phase_start_ns");
    assert!(start <= hung && hung - start < 1_000_000, "{start} {hung}");
    assert_eq!(evidence_u64(f, "last_phase_hosts"), 7);
    assert!(evidence_u64(f, "last_phase_bytes") < evidence_u64(f, "median_phase_bytes") / 2);
    assert!(f.flows.iter().all(|q| q.src_ip.to_string() == "198.18.85.4"
        || q.dst_ip.to_string() == "198.18.85.4"));
    assert!(!f.flows.is_empty());
    // The clean ring ends with the capture: active to the end, no hang.
    let (_, clean) = rule_scenario("training", &[]);
    assert_eq!(check(&clean, "job-hang").status, CheckStatus::Passed);
    assert_eq!(
        check(&clean, "job-irregular-iteration").status,
        CheckStatus::Passed
    );
}

#[test]
fn rules_clean_fires_nothing_and_checks_every_rule() {
    let (w, r) = rule_scenario("rules-clean", &[]);
    assert!(r.findings.is_empty());
    // What the rules had to look at is there: CE with CNPs, a pause, both flags' models.
    let c = &w.truth.counters;
    assert!(c.ce_packets >= 20 && c.cnp_packets > 0, "{c:?}");
    assert!(r.pfc.is_some());
    for rule in [
        "ce-without-cnp",
        "not-ect",
        "cnp-priority",
        "dscp-mix",
        "pfc-storm",
        "pfc-idle-priority",
        "incast",
        "microburst",
        "ecmp-imbalance",
    ] {
        assert_eq!(
            check(&r, rule).status,
            CheckStatus::Passed,
            "{:?}",
            check(&r, rule)
        );
    }
    let e = r.ecmp.as_ref().unwrap();
    assert!(e.flows >= 8, "enough flows to judge: {}", e.verdict);
    assert!(!e.verdict.starts_with("too few"), "{}", e.verdict);
}

/// The NIC rules on a well-configured host's readings: each passes on what it judged, the
/// cross-check has no address to tell the host's traffic by.
#[test]
fn rules_clean_nic_fires_nothing_and_judges_the_nic_side() {
    let (w, r) = rule_scenario("rules-clean-nic", &[]);
    let nic = r.nic.as_ref().expect("the nic section");
    assert_eq!(nic.seconds, 1.0);
    // The QP table joined to the wire: the packets the scenario sent to that QP number.
    let [row] = nic.qps.as_slice() else {
        panic!("{:?}", nic.qps)
    };
    let (packets, bytes) = w
        .truth
        .flows
        .iter()
        .filter(|(k, _)| k.dest_qp == row.qp.lqpn)
        .fold((0, 0), |(p, b), (_, s)| (p + s.packets, b + s.bytes));
    assert!(packets > 0);
    assert_eq!(
        (row.wire_packets, row.wire_bytes),
        (Some(packets), Some(bytes))
    );
    assert_eq!(row.qp.comm.as_deref(), Some("python3"));
    // The counters' deltas over the second, as the scenario grew them.
    let port = &nic.devices[0].ports[0];
    assert_eq!(port.hw("np_cnp_sent"), Some(380));
    assert_eq!(port.hw("np_ecn_marked_roce_packets"), Some(400));
    let prio3 = nic.interfaces[0]
        .priorities
        .iter()
        .find(|p| p.priority == 3)
        .unwrap();
    assert_eq!((prio3.rx_pause, prio3.rx_pause_us), (40, Some(2000)));
    for (rule, _) in RULES.iter().filter(|(r, _)| r.starts_with("nic-")) {
        let want = if *rule == "nic-wire-mismatch" {
            CheckStatus::InsufficientData
        } else {
            CheckStatus::Passed
        };
        assert_eq!(check(&r, rule).status, want, "{:?}", check(&r, rule));
    }
    // Without the NIC side, its rules have too little to judge, and say where it comes from.
    let (_, r) = rule_scenario("rules-clean", &[]);
    assert!(r.nic.is_none());
    assert!(
        check(&r, "nic-pause-storm").note.contains("--nic-root"),
        "{:?}",
        check(&r, "nic-pause-storm")
    );
}

#[test]
fn nic_rules_fire_on_their_scenarios_with_the_counts_they_changed() {
    let (_, r) = rule_scenario("rule-nic-pfc-priorities", &["nic-pfc-priorities"]);
    assert_eq!(
        finding(&r, "nic-pfc-priorities").summary,
        "PFC enabled on ens1f0np0: priorities 0, 3, 4"
    );
    let (_, r) = rule_scenario("rule-nic-ecn-without-cnp", &["nic-ecn-without-cnp"]);
    let f = finding(&r, "nic-ecn-without-cnp");
    assert_eq!(evidence_u64(f, "np_ecn_marked_roce_packets"), 400);
    let (_, r) = rule_scenario("rule-nic-transport-errors", &["nic-transport-errors"]);
    // 0xFFFFFFFD to 4 across the 32-bit wrap is 7.
    assert_eq!(
        finding(&r, "nic-transport-errors").summary,
        "in 1.0 s, mlx5_0/1: out_of_sequence +7, packet_seq_err +2"
    );
    let (_, r) = rule_scenario("rule-nic-pause-share", &["nic-pause-share"]);
    assert_eq!(
        finding(&r, "nic-pause-share").summary,
        "ens1f0np0 priority 3: held by received pauses 35.0% of the time"
    );
    let (_, r) = rule_scenario("rule-nic-pause-storm", &["nic-pause-storm"]);
    assert_eq!(finding(&r, "nic-pause-storm").severity, Severity::Critical);
    let (_, r) = rule_scenario("rule-nic-lossless-discards", &["nic-lossless-discards"]);
    // mlx5's buffer discards count per traffic class; ETS maps priority 3 to class 3. Class
    // 0's discards are lossy traffic's: not named.
    assert_eq!(
        finding(&r, "nic-lossless-discards").summary,
        "in 1.0 s, ens1f0np0 traffic class 3 buffer: 120 discarded"
    );
    let (w, r) = rule_scenario("rule-nic-wire-mismatch", &["nic-wire-mismatch"]);
    // The wire's CE marks to the host are the scenario's truth; its NIC counted none.
    let host: IpAddr = "198.18.40.101".parse().unwrap();
    let ce: u64 = w
        .truth
        .flows
        .iter()
        .filter(|(k, _)| ip_of(&k.dst_ip) == host)
        .map(|(_, s)| s.ecn[3])
        .sum();
    assert!(ce >= 10, "{ce}");
    assert_eq!(
        finding(&r, "nic-wire-mismatch").summary,
        format!("CE-marked arrivals: wire {ce}, NIC 0")
    );
}

fn ip_of(a: &[u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(*a);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

#[test]
fn every_rule_scenario_is_listed_by_synth() {
    let (status, out, err) = output(Command::new(CLI).args(["synth", "--list"]));
    assert!(status.success(), "{err}");
    let names: BTreeSet<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.contains("rules-clean"));
    for (rule, _) in RULES {
        if *rule == "flow-table-full" || *rule == "observer-drops" {
            // A replay's flow table is unbounded and it drops nothing: tested live.
            continue;
        }
        assert!(names.contains(format!("rule-{rule}").as_str()), "{rule}");
    }
}

/// A capture without a single RoCEv2 packet (frames the observer skips, MAC control aside):
/// no check passes on it, each says it had too little or could not run, and the one-line notice
/// comes before anything else.
#[test]
fn a_capture_without_roce_passes_no_check_and_says_so_first() {
    let dir = Scratch::new("findings-no-roce");
    let mut w = Workload::default();
    for (bytes, reason) in synth::basic_noise() {
        if reason != observer_common::SkipReason::MacControl {
            w.push_noise(bytes, reason);
        }
    }
    assert_eq!(w.truth.counters.roce_packets, 0);
    let frames = w.frames.len();
    assert!(frames > 5, "{frames}");
    let path = dir.path("no-roce.pcap");
    let f = std::fs::File::create(&path).unwrap();
    synth::write_pcap(std::io::BufWriter::new(f), &w.frames).unwrap();
    let notice = format!("no RoCEv2 packet in {frames} frames: nothing below is about RoCE");
    for flags in [&[][..], &FLAGS[..]] {
        let r = replay_json(std::slice::from_ref(&path), flags);
        assert_eq!(r.notice.as_deref(), Some(notice.as_str()), "{flags:?}");
        assert!(r.findings.is_empty(), "{flags:?}: {:?}", r.findings);
        assert_eq!(r.checks.len(), RULES.len());
        for c in &r.checks {
            assert!(
                matches!(
                    c.status,
                    CheckStatus::InsufficientData | CheckStatus::Skipped
                ),
                "{flags:?}: {c:?}"
            );
            assert!(!c.note.is_empty(), "{c:?}");
        }
        let (status, out, err) = run_replay(std::slice::from_ref(&path), flags);
        assert!(status.success(), "{err}");
        assert_eq!(out.lines().next(), Some(notice.as_str()), "{out}");
        assert!(out.contains("findings: none (0 checks passed)"), "{out}");
        // With both flags, only the NIC rules (no NIC side) are not checked.
        let not_checked: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("not checked: "))
            .collect();
        if !flags.is_empty() {
            assert_eq!(not_checked.len(), 1, "{out}");
            assert!(not_checked[0].contains("no NIC side"), "{out}");
        }
    }
}

/// Each rule's passed note states the evidence it looked at, on the scenarios where the rule
/// had something to judge and found nothing (`rules-clean`, with both flags), and each of
/// those numbers is the scenario's truth.
#[test]
fn passed_checks_state_the_evidence_they_judged() {
    let (w, r) = rule_scenario("rules-clean", &[]);
    let requests = sum(&w, |s| {
        op(s, OpClass::Send) + op(s, OpClass::Write) + op(s, OpClass::ReadRequest)
    });
    let followed = w
        .truth
        .flows
        .values()
        .filter(|s| op(s, OpClass::Send) + op(s, OpClass::Write) + op(s, OpClass::ReadRequest) > 0)
        .count();
    let reads = sum(&w, |s| op(s, OpClass::ReadRequest));
    // not-ect judges flows of 10 data packets or more, READ responses included.
    let data_flows = w
        .truth
        .flows
        .values()
        .filter(|s| {
            op(s, OpClass::Send)
                + op(s, OpClass::Write)
                + op(s, OpClass::ReadRequest)
                + op(s, OpClass::ReadResponse)
                >= 10
        })
        .count();
    for (rule, want) in [
        ("loss", format!("over {requests} request packets (")),
        (
            "reorder",
            format!("0 packets out of order over {requests} request packets"),
        ),
        (
            "duplicate-copies",
            format!("0 duplicates over {requests} request packets"),
        ),
        (
            "psn-violation",
            format!("no violation over {followed} flows, {reads} READs"),
        ),
        (
            "qp-reuse",
            format!("no QP number reused over {followed} flows"),
        ),
        (
            "stall",
            format!("({followed} flows followed, {followed} with answers seen)"),
        ),
        (
            "not-ect",
            format!("RoCE data is sent ECN-capable ({data_flows} flows judged)"),
        ),
        (
            "cnp-priority",
            "CNPs travel in DSCP 48, apart from the data's (26)".to_string(),
        ),
        ("dscp-mix", "RoCE data uses one DSCP (26)".to_string()),
        (
            "pfc-idle-priority",
            "pauses only on RoCE priorities (3)".to_string(),
        ),
        ("rnr", "0 RNR NAKs".to_string()),
    ] {
        let c = check(&r, rule);
        assert_eq!(c.status, CheckStatus::Passed, "{c:?}");
        assert!(
            c.note.contains(&want),
            "{rule}: {:?} lacks {want:?}",
            c.note
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Real captures.
// ---------------------------------------------------------------------------------------------

fn real_captures(test: &str) -> Option<Vec<PathBuf>> {
    let files = integration_tests::shared_capture_files(test, "real")?;
    assert!(!files.is_empty());
    Some(files)
}

fn assert_no_findings(files: &[PathBuf], args: &[&str]) {
    let r = replay_json(files, args);
    assert!(
        r.findings.is_empty(),
        "{:?} {args:?}: {:?}",
        files
            .iter()
            .map(|f| f.file_name().unwrap())
            .collect::<Vec<_>>(),
        r.findings
            .iter()
            .map(|f| (&f.rule, &f.summary))
            .collect::<Vec<_>>()
    );
    assert_eq!(r.checks.len(), RULES.len());
}

#[test]
fn every_real_capture_alone_fires_nothing() {
    let Some(files) = real_captures("every_real_capture_alone_fires_nothing") else {
        return;
    };
    for file in &files {
        assert_no_findings(std::slice::from_ref(file), &[]);
        assert_no_findings(std::slice::from_ref(file), &FLAGS);
    }
}

/// All real captures in one replay. The NCCL ones are the same jobs captured on each node, so
/// the packets between two nodes are in both nodes' files: read as observation points, each
/// counts once (no duplicate, resend or loss), and nothing fires.
#[test]
fn the_real_captures_together_fire_nothing() {
    let Some(files) = real_captures("the_real_captures_together_fire_nothing") else {
        return;
    };
    for args in [&[][..], &FLAGS[..]] {
        let r = replay_json(&files, args);
        assert_eq!(fired(&r), BTreeSet::new(), "{args:?}");
        let p = &r.totals.psn;
        assert_eq!(
            (
                p.duplicates,
                p.retransmissions,
                p.missing,
                p.gaps,
                p.out_of_order
            ),
            (0, 0, 0, 0, 0),
            "{p:?}"
        );
        let points = r.points.as_ref().expect("points");
        assert!(points.seen_at.get(1).is_some_and(|n| *n > 0), "{points:?}");
        assert!(points.missing.is_empty(), "{points:?}");
        assert_eq!(r.checks.len(), RULES.len());
    }
}

// ---------------------------------------------------------------------------------------------
// Thresholds from a TOML file.
// ---------------------------------------------------------------------------------------------

#[test]
fn a_raised_threshold_silences_ce_without_cnp() {
    let dir = Scratch::new("findings-threshold");
    let (w, pcap) = capture(&dir, "rule-ce-without-cnp");
    let ce = w.truth.counters.ce_packets;
    // At the scenario's CE count (all its marks on one host pair would reach it) it still fires.
    let at = dir.file(
        "at.toml",
        &format!("[ce_without_cnp]\nmin_ce_packets = {}\n", ce / 2),
    );
    let at = at.to_str().unwrap();
    let r = replay_json(
        std::slice::from_ref(&pcap),
        &[&FLAGS[..], &["--rules", at][..]].concat(),
    );
    assert_eq!(fired(&r), BTreeSet::from(["ce-without-cnp"]));
    let above = dir.file(
        "above.toml",
        &format!("[ce_without_cnp]\nmin_ce_packets = {}\n", ce + 1),
    );
    let above = above.to_str().unwrap();
    let r = replay_json(&[pcap], &[&FLAGS[..], &["--rules", above][..]].concat());
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    // Fewer marks than it needs on any host pair: too little to judge, not a pass.
    let c = check(&r, "ce-without-cnp");
    assert_eq!(c.status, CheckStatus::InsufficientData, "{c:?}");
    assert!(
        c.note.starts_with(&format!(
            "{ce} CE marks on 2 host pairs, none with the {}",
            ce + 1
        )),
        "{c:?}"
    );
}

#[test]
fn a_disabled_rule_is_silent_and_skipped() {
    let dir = Scratch::new("findings-disabled");
    let (_, pcap) = capture(&dir, "rule-loss");
    let rules = dir.file("rules.toml", "disabled = [\"loss\"]\n");
    let r = replay_json(
        &[pcap],
        &[&FLAGS[..], &["--rules", rules.to_str().unwrap()][..]].concat(),
    );
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    let c = check(&r, "loss");
    assert_eq!(c.status, CheckStatus::Skipped);
    assert!(c.note.contains("disabled"), "{c:?}");
    assert!(
        r.checks
            .iter()
            .filter(|c| c.rule != "loss")
            .all(|c| c.status != CheckStatus::Fired)
    );
}

#[test]
fn bad_rules_files_are_one_line_errors_naming_the_file() {
    let dir = Scratch::new("findings-bad-rules");
    let (_, pcap) = capture(&dir, "rule-loss");
    for (name, text, want) in [
        (
            "malformed.toml",
            "[loss]\nmin_events = \"x\"\n",
            "expected u64",
        ),
        (
            "unknown-key.toml",
            "[loss]\nmin_event = 1\n",
            "unknown field `min_event`",
        ),
        (
            "unknown-rule.toml",
            "disabled = [\"nope\"]\n",
            "unknown rule 'nope'",
        ),
    ] {
        let path = dir.file(name, text);
        let path_text = path.to_str().unwrap();
        let (status, out, err) = run_replay(
            std::slice::from_ref(&pcap),
            &["--json", "--rules", path_text],
        );
        assert!(!status.success(), "{name}: exit {status}");
        assert_eq!(status.code(), Some(1), "{name}: {err}");
        assert!(out.is_empty(), "{name}: {out}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{name}: one line: {err}");
        let line = lines[0];
        assert!(line.starts_with("roce-observer: error: "), "{name}: {line}");
        assert!(line.contains(path_text), "{name}: names the file: {line}");
        assert!(line.contains(want), "{name}: {line}");
        assert!(!line.contains("panicked"), "{name}: {line}");
    }
}

// ---------------------------------------------------------------------------------------------
// Terminal output, time series.
// ---------------------------------------------------------------------------------------------

#[test]
fn the_terminal_report_leads_with_the_findings_without_colour_on_a_pipe() {
    let dir = Scratch::new("findings-terminal");
    let (_, pcap) = capture(&dir, "rule-loss");
    let r = replay_json(std::slice::from_ref(&pcap), &FLAGS);
    let loss = finding(&r, "loss");
    let (status, out, err) = output(
        Command::new(CLI)
            .arg("replay")
            .arg(&pcap)
            .args(FLAGS)
            .arg("--no-progress")
            .env_remove("NO_COLOR"),
    );
    assert!(status.success(), "{err}");
    assert!(out.starts_with("findings:\n"), "findings first: {out}");
    assert!(out.contains("CRITICAL"), "{out}");
    assert!(out.contains(&format!("[{}]", loss.rule)), "{out}");
    assert!(out.contains(&loss.summary), "{out}");
    assert!(out.contains(&format!("hint: {}", loss.hint)), "{out}");
    for flow in &loss.flows {
        assert!(out.contains(&format!("- {flow}")), "{flow}: {out}");
    }
    // Then the numbers.
    let table = out.find("roce-observer: pcap").expect("the table");
    assert!(out.find("hint:").unwrap() < table);
    assert!(!out.contains("\x1b["), "no ANSI escapes on a pipe: {out:?}");

    // Nothing found: one line says so.
    let (_, clean) = capture(&dir, "rules-clean");
    let (status, out, err) = run_replay(&[clean], &FLAGS);
    assert!(status.success(), "{err}");
    // Every wire rule passed but the job rules (its traffic holds no training job to judge,
    // and they say so); the NIC rules, without a NIC side, say so on one line.
    let wire_rules = RULES.iter().filter(|(r, _)| !r.starts_with("nic-")).count();
    assert!(
        out.starts_with(&format!(
            "findings: none ({} checks passed)",
            wire_rules - 3
        )),
        "{out}"
    );
    for rule in ["job-straggler", "job-irregular-iteration", "job-hang"] {
        assert!(
            out.contains(&format!("too little to judge: {rule}: ")),
            "{out}"
        );
    }
    assert_eq!(
        out.lines().filter(|l| l.contains("no NIC side")).count(),
        1,
        "{out}"
    );
}

#[test]
fn the_time_series_sums_to_the_totals() {
    let dir = Scratch::new("findings-series");
    let mut files: Vec<PathBuf> = ["rules-clean", "rule-loss", "rule-pfc-idle-priority"]
        .into_iter()
        .map(|name| capture(&dir, name).1)
        .collect();
    // The real captures span seconds: many intervals of 10 ms.
    if let Some(real) = real_captures("the_time_series_sums_to_the_totals") {
        files.extend(real);
    }
    let mut most = 0;
    for file in &files {
        let r = replay_json(std::slice::from_ref(file), &["--interval", "10ms"]);
        let s = r.series.as_ref().expect("a series");
        assert_eq!(s.interval_s, 0.01, "{}", file.display());
        assert_eq!(
            s.total.packets.iter().sum::<u64>(),
            r.totals.roce_packets,
            "{}",
            file.display()
        );
        assert_eq!(s.t.len(), s.total.packets.len(), "{}", file.display());
        assert!(
            s.t.len() as f64 >= r.window.seconds / 0.01,
            "{}: {} intervals over {} s",
            file.display(),
            s.t.len(),
            r.window.seconds
        );
        most = most.max(s.t.len());
    }
    if files.len() > 3 {
        assert!(most > 100, "a real capture spans many intervals: {most}");
    }
}

#[test]
fn an_interval_below_the_microburst_slot_is_a_one_line_error() {
    let dir = Scratch::new("findings-interval");
    let (_, pcap) = capture(&dir, "rule-loss");
    for (flags, given, shortest) in [
        (&["--interval", "50us"][..], "50.0 µs", "100 µs"),
        (
            &["--interval", "0.5ms", "--burst-slot", "1ms"][..],
            "500 µs",
            "1.0 ms",
        ),
        (
            &["--interval", "5us", "--burst-slot", "off"][..],
            "5.0 µs",
            "10.0 µs",
        ),
    ] {
        let (status, out, err) = run_replay(
            std::slice::from_ref(&pcap),
            &[&["--json"][..], flags].concat(),
        );
        assert_eq!(status.code(), Some(1), "{flags:?}: {err}");
        assert!(out.is_empty(), "{out}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(
            lines,
            [format!(
                "roce-observer: error: --interval {given} is below replay's shortest, {shortest}"
            )],
            "{flags:?}"
        );
    }
    // At the slot it is fine.
    let r = replay_json(&[pcap], &["--interval", "100us"]);
    assert_eq!(r.series.unwrap().interval_s, 100e-6);
}

/// What a short capture's frames say, read by hand from the fixed offsets of untagged IPv4
/// RoCE frames (every frame of the `incast` scenario): per frame its time, IP length, whether
/// it is a CNP, and its flow (source, destination, UDP source port, destination QP).
struct HandFrame {
    ts_ns: u64,
    ip_len: u64,
    cnp: bool,
    flow: FlowRef,
}

fn hand_frames(w: &Workload) -> Vec<HandFrame> {
    w.frames
        .iter()
        .map(|f| {
            let b = &f.bytes;
            assert_eq!(b[12..14], [0x08, 0x00], "IPv4, untagged");
            assert_eq!((b[14], b[23]), (0x45, 17), "no options, UDP");
            assert_eq!(u16::from_be_bytes([b[36], b[37]]), 4791, "RoCEv2");
            let v4 = |o: usize| IpAddr::from([b[o], b[o + 1], b[o + 2], b[o + 3]]);
            HandFrame {
                ts_ns: f.ts_ns,
                ip_len: u64::from(u16::from_be_bytes([b[16], b[17]])),
                cnp: b[42] == 0x81,
                flow: FlowRef {
                    src_ip: v4(26),
                    dst_ip: v4(30),
                    udp_src_port: u16::from_be_bytes([b[34], b[35]]),
                    dest_qp: u32::from_be_bytes([0, b[47], b[48], b[49]]),
                    direction: Default::default(),
                },
            }
        })
        .collect()
}

/// A rate as the report prints it: one decimal, in the SI unit that keeps it below 1000.
fn printed_rate(bps: f64) -> String {
    let (v, unit) = match bps {
        b if b >= 1e9 => (b / 1e9, "Gb/s"),
        b if b >= 1e6 => (b / 1e6, "Mb/s"),
        b if b >= 1e3 => (b / 1e3, "kb/s"),
        b => (b, "b/s"),
    };
    format!("{v:.1} {unit}")
}

fn assert_close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= want.abs() * 1e-9,
        "{what}: {got} reported, {want} by hand"
    );
}

/// The `incast` capture lasts some 0.72 ms: the rates the report gives (the window, the time
/// series' RoCE and CNP rates and their peaks, each flow's RATE and PEAK) are the ones worked
/// out here from the generated frames alone: bits (IP lengths) or CNPs over the time each
/// interval covers, the last one ending with the last frame; a flow's active rate over its
/// first to last packet.
#[test]
fn a_short_captures_rates_are_the_hand_computed_ones() {
    let dir = Scratch::new("findings-rates");
    let (w, pcap) = capture(&dir, "incast");
    let frames = hand_frames(&w);
    let first = frames[0].ts_ns;
    let span = frames.last().unwrap().ts_ns - first;
    assert!((700_000..800_000).contains(&span), "{span} ns");
    // Fitted: the shortest of 100 us x 1, 2, 5 x 10^k giving at most 100 intervals: 100 us,
    // eight of them, the last covering what is left up to the last frame.
    let interval = 100_000u64;
    let n = span.div_ceil(interval) as usize;
    assert_eq!(n, 8);
    let covered_s = |i: usize| {
        let ns = if i + 1 < n {
            interval
        } else {
            span - (n as u64 - 1) * interval
        };
        ns as f64 / 1e9
    };
    // A frame exactly at the end of the span belongs to the last interval.
    let index = |ts: u64| (((ts - first) / interval) as usize).min(n - 1);
    let mut bytes = vec![0u64; n];
    let mut cnps = vec![0u64; n];
    let mut per_flow: std::collections::BTreeMap<FlowRef, (Vec<u64>, u64, u64, u64)> =
        Default::default();
    for f in &frames {
        let i = index(f.ts_ns);
        bytes[i] += f.ip_len;
        cnps[i] += u64::from(f.cnp);
        let e = per_flow
            .entry(f.flow.clone())
            .or_insert_with(|| (vec![0; n], f.ts_ns, f.ts_ns, 0));
        e.0[i] += f.ip_len;
        e.2 = f.ts_ns;
        e.3 += f.ip_len;
    }
    let bps: Vec<f64> = (0..n)
        .map(|i| bytes[i] as f64 * 8.0 / covered_s(i))
        .collect();
    // A flow's rate while active (first to last packet) and its busiest interval's.
    let flow_rates = |f: &roce_observer::model::Flow| {
        let (series, first_ns, last_ns, total) = &per_flow[&FlowRef::of_flow(f)];
        let active = *total as f64 * 8.0 / ((last_ns - first_ns) as f64 / 1e9);
        let peak = (0..n)
            .map(|i| series[i] as f64 * 8.0 / covered_s(i))
            .fold(0.0, f64::max);
        (active, peak)
    };
    let cnp_per_s: Vec<f64> = (0..n).map(|i| cnps[i] as f64 / covered_s(i)).collect();
    // The first interval with the highest value, as the summary line names it.
    let peak = |v: &[f64]| {
        v.iter()
            .enumerate()
            .fold((0, 0.0f64), |m, (i, x)| if *x > m.1 { (i, *x) } else { m })
    };

    let r = replay_json(std::slice::from_ref(&pcap), &[]);
    assert_close(r.window.seconds, span as f64 / 1e9, "window");
    let s = r.series.as_ref().expect("a series");
    assert!(s.interval_fitted);
    assert_eq!(s.interval_s, 100e-6);
    assert_eq!(s.t.len(), n);
    assert_close(s.span_s, span as f64 / 1e9, "span");
    for i in 0..n {
        assert_close(
            s.total.bps[i],
            bps[i],
            &format!("RoCE rate of interval {i}"),
        );
        assert_close(
            s.total.cnp_per_s[i],
            cnp_per_s[i],
            &format!("CNPs/s of interval {i}"),
        );
    }
    assert_eq!(cnps.iter().sum::<u64>(), w.truth.counters.cnp_packets);
    assert_eq!(r.flows.len(), per_flow.len());
    for f in &r.flows {
        let (active, flow_peak) = flow_rates(f);
        assert_close(f.active_rate_bps.unwrap(), active, &format!("{f:?} RATE"));
        assert_close(f.peak_rate_bps.unwrap(), flow_peak, &format!("{f:?} PEAK"));
    }

    // The terminal report prints the same numbers.
    let (status, out, err) = run_replay(std::slice::from_ref(&pcap), &[]);
    assert!(status.success(), "{err}");
    let header = format!(
        "roce-observer: pcap {}, {:.0} µs: {} frames",
        pcap.display(),
        span as f64 / 1e3,
        frames.len()
    );
    assert!(out.contains(&header), "{header}: {out}");
    let at = |i: usize| match i {
        0 => "0 s".to_string(),
        i => format!("{} µs", i * 100),
    };
    let (ti, tp) = peak(&bps);
    let (ni, np) = peak(&cnp_per_s);
    let line = format!(
        "time series: 8 intervals of 100 µs (fitted to the {:.0} µs span): RoCE peak {} at +{}",
        span as f64 / 1e3,
        printed_rate(tp),
        at(ti)
    );
    assert!(out.contains(&line), "{line}: {out}");
    let cnp_line = format!("CNPs peak {np:.0}/s at +{}", at(ni));
    assert!(out.contains(&cnp_line), "{cnp_line}: {out}");
    for f in &r.flows {
        let (active, flow_peak) = flow_rates(f);
        let row = out
            .lines()
            .find(|l| {
                l.starts_with(&format!("{} -> {} ", f.src_ip, f.dst_ip))
                    && l.contains(&format!(" {} ", f.udp_src_port))
            })
            .unwrap_or_else(|| panic!("no row of {f:?}: {out}"));
        let cells: Vec<&str> = row
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert!(
            cells.contains(&printed_rate(active).as_str())
                && cells.contains(&printed_rate(flow_peak).as_str()),
            "{row}: RATE {}, PEAK {}",
            printed_rate(active),
            printed_rate(flow_peak)
        );
    }

    // One interval longer than the capture: its rates are over the capture's own span (80
    // CNPs in some 720 us are over 100,000 CNPs/s, not 80/s).
    let r = replay_json(&[pcap], &["--interval", "1ms"]);
    let s = r.series.as_ref().unwrap();
    assert_eq!(s.t.len(), 1);
    let secs = span as f64 / 1e9;
    assert_close(
        s.total.bps[0],
        bytes.iter().sum::<u64>() as f64 * 8.0 / secs,
        "1 ms",
    );
    assert_close(
        s.total.cnp_per_s[0],
        w.truth.counters.cnp_packets as f64 / secs,
        "CNPs/s over 1 ms",
    );
    assert!(s.total.cnp_per_s[0] > 100_000.0);
}
