//! Where in the fabric: many hosts' per-QP evidence, joined with the paths their QPs take
//! over a topology, localized to the links, switches and hosts that explain it (docs/fabric.md).
//! Needs no kernel: it runs wherever the records are.

pub mod findings;
pub mod incidents;
pub mod input;
pub mod lldp;
pub mod localize;
pub mod paths;
pub mod sim;
pub mod topology;

pub use findings::{FABRIC_RULES, findings};
pub use incidents::{Incident, Window, incidents};
pub use input::{
    PROMETHEUS_COUNTERS, PROMETHEUS_PAUSES, SidecarEvidence, evidence_of, is_sidecar_line, merge,
    pauses_windows, prometheus_evidence, prometheus_pauses, read_report, read_traces,
    records_evidence, records_processes, records_windows, sidecar_evidence, sidecar_windows,
    sides_windows, traced_paths,
};
pub use localize::{
    AckShift, Localization, Options, QpEvidence, Signal, Suspect, SuspectKind, Verdict, localize,
};
pub use paths::{PathSource, Paths, Router};
pub use topology::{Role, TOPOLOGY_SCHEMA, Topology, TopologyFile};

#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    #[error("topology {origin}: {problem}")]
    Topology { origin: String, problem: String },
    #[error("{origin} line {line}: {problem}")]
    Records {
        origin: String,
        line: usize,
        problem: String,
    },
    #[error("{origin}: {problem}")]
    Lldp { origin: String, problem: String },
    #[error("Prometheus at {origin}: {problem}")]
    Prometheus { origin: String, problem: String },
    #[error("{origin} is not a trace file (trace --json): {problem}")]
    Traces { origin: String, problem: String },
    #[error("{origin} is not a roce-observer JSON report: {source}")]
    Report {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
}
