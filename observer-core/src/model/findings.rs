//! The `findings` and `checks` sections of the report.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::FlowRef;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The rule's name (see `analysis::findings::RULES`).
    pub rule: String,
    pub severity: Severity,
    pub title: String,
    /// One line with the numbers.
    pub summary: String,
    /// The numbers behind the finding, by name.
    pub evidence: BTreeMap<String, serde_json::Value>,
    /// The flows involved (a bounded number).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flows: Vec<FlowRef>,
    /// What to look at.
    pub hint: String,
}

/// Whether a rule ran and what it concluded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub rule: String,
    /// "fired", "passed" (with the evidence it passed on), "insufficient-data" (what it needed
    /// and what it saw) or "skipped" (why).
    pub status: CheckStatus,
    /// What it concluded from, what it lacked, or why it did not run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckStatus {
    Fired,
    Passed,
    /// It ran, and the report holds too little of what it judges to conclude either way.
    #[serde(rename = "insufficient-data")]
    InsufficientData,
    Skipped,
}
