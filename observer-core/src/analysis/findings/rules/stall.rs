//! Stalls: requests that asked for an answer and got none for longer than the local ACK timeout
//! while the observation went on, and resends after such a wait.

use serde::{Deserialize, Serialize};

use crate::units::{count, duration};
use crate::{
    analysis::findings::{Outcome, Severity, finding},
    model::{FlowRef, Report, qp_hex},
};

rule! {
    /// The rule ([`ABOUT`]): `stall` below, with its [`Stall`] table.
    StallRule {
        name: "stall",
        summary: "requests left unanswered longer than the local ACK timeout (a stalled connection)",
        scenario: Some("rule-stall"),
        evaluate: |r, t, _ctx| {
            stall(r, &t.stall)
        },
    }
}

/// The `[stall]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Stall {
    /// Milliseconds without an answer from which a connection counts as stalled: by default the
    /// usual local ACK timeout (4.096 us * 2^14, the rdma-core and perftest default).
    pub min_ms: f64,
}

impl Default for Stall {
    fn default() -> Self {
        Self { min_ms: 67.1 }
    }
}

fn stall(r: &Report, c: &Stall) -> Outcome {
    let min_ns = (c.min_ms * 1e6) as u64;
    // Connections with both directions seen: only there can an answer be missed. The
    // report's connections say which (a shared port can be a coincidence); a report without
    // them (one read back from elsewhere) is joined by port, swapped addresses and mirror.
    let connections = r.paired_connections();
    // Without connections: the flows by their ends, port and mirror (not QP 1's).
    let ends: std::collections::HashSet<_> = if r.connections.is_empty() {
        r.flows
            .iter()
            .filter(|b| b.dest_qp != 1)
            .map(|b| (b.src_ip, b.dst_ip, b.udp_src_port, &b.mirror))
            .collect()
    } else {
        std::collections::HashSet::new()
    };
    let answers_seen = |f: &crate::model::Flow| {
        f.psn.unanswered.is_some()
            || connections.of(f).is_some()
            || r.connections.is_empty()
                && ends.contains(&(f.dst_ip, f.src_ip, f.udp_src_port, &f.mirror))
    };
    let paired = r
        .flows
        .iter()
        .filter(|f| f.psn_followed() && answers_seen(f))
        .count();
    let followed = r.flows.iter().filter(|f| f.psn_followed()).count();
    if followed == 0 {
        return Outcome::InsufficientData(
            "no flow with requests of a connected QP (RC, XRC) to follow answers of".into(),
        );
    }
    let mut stalls: Vec<(u64, u64, &crate::model::Flow, bool)> = Vec::new();
    for f in &r.flows {
        if let Some(u) = f.psn.unanswered
            && u.for_ns >= min_ns
        {
            stalls.push((u.since_ns, u.for_ns, f, false));
        } else if let Some(w) = f.psn.longest_resend_wait
            && w.for_ns >= min_ns
        {
            stalls.push((w.at_ns, w.for_ns, f, true));
        }
    }
    if stalls.is_empty() && paired == 0 {
        // No answer could be seen missing, and no resend waited long: too little to say
        // that requests were answered.
        return Outcome::InsufficientData(format!(
            "no connection seen in both directions to follow answers in ({} followed one way, no resend after {} or more)",
            count(followed as u64, "flow"),
            duration(min_ns)
        ));
    }
    if stalls.is_empty() {
        return Outcome::Passed(format!(
            "every request answered within {} ({} followed, {paired} with answers seen)",
            duration(min_ns),
            count(followed as u64, "flow")
        ));
    }
    stalls.sort_by_key(|s| std::cmp::Reverse(s.1));
    let (since, longest, f, resumed) = stalls[0];
    finding(
        ABOUT.name,
        Severity::Critical,
        "Connections stalled: requests left unanswered",
        format!(
            "{} stalled; longest: {} -> {} QP {} waited {} from t={} ns{}",
            count(stalls.len() as u64, "flow"),
            f.src_ip,
            f.dst_ip,
            qp_hex(f.dest_qp),
            duration(longest),
            since,
            if resumed {
                ", then resent"
            } else {
                ", still unanswered when the observation ended"
            }
        ),
        vec![
            ("stalled_flows", (stalls.len() as u64).into()),
            ("longest_ns", longest.into()),
            ("since_ns", since.into()),
            ("resumed", resumed.into()),
            ("threshold_ms", c.min_ms.into()),
        ],
        stalls.iter().map(|s| FlowRef::of_flow(s.2)).collect(),
        "A request that asked for an answer got none (no ACK, NAK or response covering it) for longer than the local ACK timeout while the rest of the traffic went on: the responder hung, its answers were dropped, or it answered PSNs the requester never sent (see psn-violation). Check the responder's NIC counters (out-of-sequence, local ACK timeouts, QPs in the error state) and the application on that host.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, flow, insufficient, passed, report, run};
    use crate::model::{Unanswered, Wait};

    /// A flow back on the same port that the report did not pair with it (a coincidence of
    /// ports) shows no answers: too little to judge, not a pass.
    #[test]
    fn a_port_shared_by_coincidence_is_no_connection_seen_both_ways() {
        use crate::model::connections::testing::{connection, side};
        let t = Thresholds::default();
        let mut r = report();
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.write) = (10, 10);
        r.flows.push(f);
        let mut back = flow("10.0.0.2", "10.0.0.1");
        (back.dest_qp, back.packets, back.ops.ack) = (0x22, 2, 2);
        r.flows.push(back);
        assert!(passed(run(&StallRule, &r, &t)).starts_with("every request answered"));
        // The report's pairing: two one-sided connections.
        let qp = r.flows[0].dest_qp;
        r.connections = vec![
            connection(
                None,
                side("10.0.0.1", None, 10),
                side("10.0.0.2", Some(qp), 0),
            ),
            connection(
                None,
                side("10.0.0.2", None, 2),
                side("10.0.0.1", Some(0x22), 0),
            ),
        ];
        let note = insufficient(run(&StallRule, &r, &t));
        assert!(
            note.starts_with("no connection seen in both directions"),
            "{note}"
        );
    }

    #[test]
    fn unanswered_requests_and_long_resend_waits_fire() {
        let t = Thresholds::default();
        let mut r = report();
        insufficient(run(&StallRule, &r, &t));
        let mut f = flow("10.0.0.1", "10.0.0.2");
        (f.packets, f.ops.write) = (10, 10);
        r.flows.push(f);
        // One direction only: no answer can be seen missing.
        let note = insufficient(run(&StallRule, &r, &t));
        assert!(
            note.starts_with("no connection seen in both directions"),
            "{note}"
        );
        // Its ACKs back: answered, as far as the observation shows.
        let mut back = flow("10.0.0.2", "10.0.0.1");
        (back.dest_qp, back.packets, back.ops.ack) = (0x22, 2, 2);
        r.flows.push(back);
        let note = passed(run(&StallRule, &r, &t));
        assert_eq!(
            note,
            "every request answered within 67.1 ms (1 flow followed, 1 with answers seen)"
        );
        r.flows.pop();
        r.flows[0].psn.unanswered = Some(Unanswered {
            since_ns: 1_000,
            for_ns: 10_000_000,
            psn: 9,
            answered_psn: Some(5),
        });
        passed(run(&StallRule, &r, &t));
        r.flows[0].psn.unanswered.as_mut().unwrap().for_ns = 2_000_000_000;
        let f = fired(run(&StallRule, &r, &t));
        assert!(
            f.summary.contains("waited 2.0 s from t=1000 ns"),
            "{}",
            f.summary
        );
        r.flows[0].psn.unanswered = None;
        r.flows[0].psn.longest_resend_wait = Some(Wait {
            at_ns: 7,
            for_ns: 500_000_000,
        });
        assert_eq!(fired(run(&StallRule, &r, &t)).evidence["resumed"], true);
    }
}
