//! PFC pause storms: a priority paused for a large share of the window, or paused very often.

use serde::{Deserialize, Serialize};

use crate::units::count;
use crate::{
    analysis::findings::{Outcome, Severity, finding},
    model::Report,
};

rule! {
    /// The rule ([`ABOUT`]): `pfc_storm` below, with its [`PfcStorm`] table. Pauses are judged
    /// whether RoCE is seen or not.
    PfcStormRule {
        name: "pfc-storm",
        summary: "PFC pause storms: a priority paused for a large share of the time",
        scenario: Some("rule-pfc-storm"),
        needs_roce: false,
        evaluate: |r, t, _ctx| {
            pfc_storm(r, &t.pfc_storm)
        },
    }
}

/// The `[pfc_storm]` table of the rules file, every key optional.
/// The defaults are its `Default` below; `rules.example.toml` spells them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PfcStorm {
    /// Pause time asked for, as a share of the observed window, from which a priority storms
    /// (needs the link speed).
    pub min_pause_percent: f64,
    /// Or PFC frames per second on one priority (without a link speed too).
    pub min_frames_per_s: f64,
}

impl Default for PfcStorm {
    fn default() -> Self {
        Self {
            min_pause_percent: 10.0,
            min_frames_per_s: 1000.0,
        }
    }
}

fn pfc_storm(r: &Report, c: &PfcStorm) -> Outcome {
    let Some(pfc) = &r.pfc else {
        // PFC is hop by hop: a mirror or capture without MAC control frames cannot show a
        // storm, so none seen is no evidence of none.
        return Outcome::InsufficientData("no PAUSE / PFC frame to judge".into());
    };
    let window = r.window.seconds;
    let mut storms = Vec::new();
    for src in &pfc.sources {
        for p in &src.priorities {
            let share = p
                .counts
                .pause_ns
                .filter(|_| window > 0.0)
                // Refreshes before the previous pause ran out overlap: at most all the time.
                .map(|ns| (ns as f64 / (window * 1e9) * 100.0).min(100.0));
            let rate = (window > 0.0).then(|| p.counts.frames as f64 / window);
            if share.is_some_and(|s| s >= c.min_pause_percent)
                || rate.is_some_and(|f| f >= c.min_frames_per_s)
            {
                storms.push(format!(
                    "{} priority {}: {}{}{}",
                    src.src_mac,
                    p.priority,
                    count(p.counts.frames, "frame"),
                    rate.map_or(String::new(), |f| format!(" ({f:.0}/s)")),
                    share.map_or(String::new(), |s| format!(", paused {s:.1}% of the time")),
                ));
            }
        }
    }
    if storms.is_empty() {
        return Outcome::Passed(format!(
            "PFC below {}% paused and {} frames/s on every priority",
            c.min_pause_percent, c.min_frames_per_s
        ));
    }
    finding(
        ABOUT.name,
        Severity::Critical,
        "PFC pause storm",
        format!(
            "{} heavily: {}",
            match storms.len() {
                1 => "1 sender-priority pauses".to_string(),
                n => format!("{n} sender-priorities pause"),
            },
            storms[0]
        ),
        vec![
            ("storms", storms.clone().into()),
            ("window_seconds", window.into()),
            (
                "link_speed_bps",
                pfc.link_speed_bps
                    .map_or(serde_json::Value::Null, Into::into),
            ),
        ],
        Vec::new(),
        "A port that keeps pausing spreads congestion upstream (head-of-line blocking, possibly a deadlock): find the congested receiver behind the pausing port, check that ECN/DCQCN reacts before PFC does (ECN marking threshold below the PFC XOFF threshold), and that no NIC is stuck (a PFC watchdog on the switch helps).",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Thresholds;
    use crate::analysis::findings::testing::{fired, insufficient, passed, pfc, report, run};

    #[test]
    fn a_priority_paused_long_or_often_storms() {
        let t = Thresholds::default();
        let mut r = report();
        assert_eq!(
            insufficient(run(&PfcStormRule, &r, &t)),
            "no PAUSE / PFC frame to judge"
        );
        // The report's window is 1 s: 0.2 s paused is 20%.
        r.pfc = Some(pfc(&[(3, 10, 0, Some(200_000_000))]));
        let f = fired(run(&PfcStormRule, &r, &t));
        assert_eq!(f.severity, Severity::Critical);
        assert!(
            f.summary.contains("paused 20.0% of the time"),
            "{}",
            f.summary
        );
        // Without a link speed: frames per second.
        r.pfc = Some(pfc(&[(3, 2000, 0, None)]));
        let f = fired(run(&PfcStormRule, &r, &t));
        assert!(f.summary.contains("(2000/s)"), "{}", f.summary);
        r.pfc = Some(pfc(&[(3, 10, 0, Some(1_000_000))]));
        passed(run(&PfcStormRule, &r, &t));
    }
}
