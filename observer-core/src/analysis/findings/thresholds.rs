//! The rules file (`--rules FILE`, [`Thresholds`]: one TOML table per rule, each with the
//! thresholds struct its rule file defines and documents, defaults included, plus
//! `disabled`): reading and validating it.

use super::{RULES, Thresholds};

/// A rules file that cannot be used. Each is one line naming the file (shown with its
/// source, `{:#}`, where it has one).
#[derive(Debug, thiserror::Error)]
pub enum ThresholdsError {
    #[error("cannot read the rules file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// `detail` is toml's message on one line (toml's own spans lines, with a snippet of the
    /// file, so it is not kept as the source).
    #[error("rules file {path}: {detail}")]
    Parse { path: String, detail: String },
    #[error("rules file {path}: unknown rule '{rule}' in `disabled` (known: {known})")]
    UnknownRule {
        path: String,
        rule: String,
        known: String,
    },
    #[error("rules file {path}: {what}")]
    Invalid { path: String, what: String },
}

impl Thresholds {
    /// Reads a TOML thresholds file.
    pub fn load(path: &str) -> Result<Self, ThresholdsError> {
        let text = std::fs::read_to_string(path).map_err(|source| ThresholdsError::Read {
            path: path.to_string(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses TOML text (`path` names it in errors).
    pub fn parse(text: &str, path: &str) -> Result<Self, ThresholdsError> {
        let t: Thresholds = toml::from_str(text).map_err(|e| ThresholdsError::Parse {
            path: path.to_string(),
            detail: one_line(&e),
        })?;
        for rule in &t.disabled {
            if !RULES.iter().any(|(r, _)| r == rule) {
                return Err(ThresholdsError::UnknownRule {
                    path: path.to_string(),
                    rule: rule.clone(),
                    known: RULES.iter().map(|(r, _)| *r).collect::<Vec<_>>().join(", "),
                });
            }
        }
        let invalid = |what: String| ThresholdsError::Invalid {
            path: path.to_string(),
            what,
        };
        for (name, v) in [
            ("not_ect.min_percent", t.not_ect.min_percent),
            ("dscp_mix.min_percent", t.dscp_mix.min_percent),
            ("pfc_storm.min_pause_percent", t.pfc_storm.min_pause_percent),
            ("incast.min_ce_percent", t.incast.min_ce_percent),
            ("microburst.share_percent", t.microburst.share_percent),
            ("nic_pause_share.min_percent", t.nic_pause_share.min_percent),
            (
                "nic_wire_mismatch.min_difference_percent",
                t.nic_wire_mismatch.min_difference_percent,
            ),
            (
                "ecmp_imbalance.min_percentile",
                t.ecmp_imbalance.min_percentile,
            ),
        ] {
            if !(0.0..=100.0).contains(&v) {
                return Err(invalid(format!(
                    "{name} is a percentage (0 to 100), not {v}"
                )));
            }
        }
        if t.microburst.share_percent == 0.0 {
            return Err(invalid("microburst.share_percent must be above 0".into()));
        }
        let non_negative = |v: f64| v.is_finite() && v >= 0.0;
        if !non_negative(t.ce_without_cnp.max_cnp_per_ce)
            || !non_negative(t.pfc_storm.min_frames_per_s)
        {
            return Err(invalid(
                "ce_without_cnp.max_cnp_per_ce and pfc_storm.min_frames_per_s must be 0 or more"
                    .into(),
            ));
        }
        let above = |v: f64, floor: f64| v.is_finite() && v > floor;
        if !above(t.latency.max_p99_us, 0.0) || !above(t.latency.max_p99_over_p50, 1.0) {
            return Err(invalid(
                "latency.max_p99_us must be above 0 and latency.max_p99_over_p50 above 1".into(),
            ));
        }
        if let Some(p) = t.pfc_idle_priority.roce_priorities.iter().find(|p| **p > 7) {
            return Err(invalid(format!(
                "pfc_idle_priority.roce_priorities: {p} is not a priority (0 to 7)"
            )));
        }
        Ok(t)
    }

    pub(super) fn enabled(&self, rule: &str) -> bool {
        !self.disabled.iter().any(|r| r == rule)
    }
}

/// toml's message spans lines (a snippet of the file): keep it on one.
fn one_line(e: &toml::de::Error) -> String {
    e.to_string()
        .lines()
        .map(str::trim)
        .filter(|l| {
            // Drop the snippet: `|`, `N | text` and `^^^` lines.
            let snippet = l
                .split_once('|')
                .is_some_and(|(n, _)| n.trim().chars().all(|c| c.is_ascii_digit()));
            !l.is_empty() && !snippet && !l.chars().all(|c| c == '^')
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::findings::Loss;

    const EXAMPLE: &str = include_str!("../../../../rules.example.toml");

    #[test]
    fn the_example_rules_file_spells_the_defaults() {
        let t = Thresholds::parse(EXAMPLE, "example").unwrap();
        assert_eq!(t, Thresholds::default());
        assert_eq!(
            Thresholds::parse("", "empty").unwrap(),
            Thresholds::default()
        );
        let t = Thresholds::parse("[loss]\nmin_events = 5\n", "f").unwrap();
        assert_eq!(t.loss.min_events, 5);
        assert_eq!(t.loss.critical_events, Loss::default().critical_events);
    }

    #[test]
    fn bad_rules_files_are_one_line_errors_naming_the_file() {
        for (text, want) in [
            ("[loss]\nmin_events = \"x\"\n", "rules file f.toml:"),
            ("[loss]\nmin_event = 1\n", "unknown field"),
            ("[losses]\n", "unknown field"),
            ("disabled = [\"nope\"]\n", "unknown rule 'nope'"),
            ("[incast]\nmin_ce_percent = 150.0\n", "is a percentage"),
            ("[microburst]\nshare_percent = 0.0\n", "must be above 0"),
            (
                "[pfc_idle_priority]\nroce_priorities = [9]\n",
                "not a priority",
            ),
            ("not toml at all", "rules file f.toml:"),
        ] {
            let e = Thresholds::parse(text, "f.toml").unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains("f.toml"), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let e = Thresholds::load("/nonexistent/rules.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cannot read the rules file /nonexistent/rules.toml"),
            "{e}"
        );
    }

    #[test]
    fn an_unreadable_rules_file_keeps_the_io_error_as_its_source() {
        let e = Thresholds::load("/nonexistent/rules.toml").unwrap_err();
        let ThresholdsError::Read { source, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        // What the CLI prints (anyhow's `{:#}`: the message, then each source after ": ") is
        // the line it printed when the I/O error was part of the message.
        let mut shown = e.to_string();
        let mut cur = std::error::Error::source(&e);
        while let Some(s) = cur {
            shown = format!("{shown}: {s}");
            cur = s.source();
        }
        let io = std::fs::read_to_string("/nonexistent/rules.toml").unwrap_err();
        assert_eq!(
            shown,
            format!("cannot read the rules file /nonexistent/rules.toml: {io}")
        );
    }

    /// A rule's table in the rules file: its name with `_` for `-`.
    fn table_of(rule: &str) -> String {
        rule.replace('-', "_")
    }

    /// The rules file's top-level keys: `disabled` and one table per rule.
    fn example_tables() -> toml::Table {
        toml::from_str(EXAMPLE).unwrap()
    }

    #[test]
    fn every_registered_rule_has_its_table_in_the_example_file_and_in_thresholds() {
        let example = example_tables();
        let defaults: toml::Table =
            toml::from_str(&toml::to_string(&Thresholds::default()).unwrap()).unwrap();
        for rule in crate::analysis::findings::rules() {
            let table = table_of(rule.name());
            assert!(
                example.get(&table).is_some_and(toml::Value::is_table),
                "rules.example.toml has no [{table}] for rule {}",
                rule.name()
            );
            assert!(
                defaults.get(&table).is_some_and(toml::Value::is_table),
                "Thresholds has no field {table} for rule {}",
                rule.name()
            );
        }
    }

    #[test]
    fn every_key_of_the_example_file_belongs_to_a_registered_rule() {
        let tables: Vec<String> = crate::analysis::findings::rules()
            .iter()
            .map(|r| table_of(r.name()))
            .collect();
        for key in example_tables().keys() {
            assert!(
                key == "disabled" || tables.contains(key),
                "rules.example.toml: [{key}] is no registered rule's table"
            );
        }
    }
}
