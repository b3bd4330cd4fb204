//! Training jobs as the wire shows them: the hosts that talk RC to each other, their
//! communication phases, the iteration period those phases repeat at, and each host's part of
//! each phase (`analysis::jobs` builds them).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::FlowRef;

/// The jobs of a report, on one grid of bins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Jobs {
    /// The bins the phases are measured on (ns), and the first bin's start (unix ns).
    pub bin_ns: u64,
    pub start_ns: u64,
    /// The end of the last bin with any RoCE packet observed (unix ns): how long the wire was
    /// seen, whatever the jobs did.
    #[serde(default)]
    pub end_ns: u64,
    pub jobs: Vec<Job>,
}

/// One job: hosts connected by RC traffic, and what their traffic shows of its iterations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// `job-1`, `job-2`... by first traffic.
    pub id: String,
    pub hosts: Vec<IpAddr>,
    /// The QP directions that carry its traffic.
    pub qps: Vec<FlowRef>,
    pub bytes: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// The end of the last bin any of its QPs carried a packet in (data, ACK, NAK, CNP).
    #[serde(default)]
    pub last_packet_ns: u64,
    /// The iteration period, when its phases repeat regularly enough to tell one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<Period>,
    /// Why no period is given (too few phases, too irregular).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_period: Option<String>,
    /// Iteration times (one phase's start to the next's): median and 99th percentile (ns), over
    /// the iterations counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration_p50_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration_p99_ns: Option<u64>,
    /// Its communication phases, in time order.
    pub phases: Vec<Phase>,
    /// The fewest and most hosts a host sends data to (its data directions of 4 KiB or more),
    /// over the hosts that send any: equal in rings, unequal where hosts play different roles
    /// (a tree's leaves, inner hosts and root) or other traffic joins some of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_peers: Option<(u32, u32)>,
    /// The processes whose QPs carry the job's traffic, with what they tell of their ranks: the
    /// observed host's (the NIC side's QP table joined to the job's QPs), and other hosts' as
    /// their fleet records name them (`seen_by`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<JobRank>,
    /// The job as its launcher names it (`torchelastic:<run id>`, `slurm:<job id>`...), when
    /// every process of `ranks` that names one names this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A process of a job: on the host whose QP table the report read, or on another host whose
/// fleet records name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRank {
    /// The address its QPs receive on.
    pub host: IpAddr,
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// Its QPs among the job's.
    pub qps: u32,
    /// The exporter host whose records named it (`--peer-records`); none: this report's own
    /// QP table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_by: Option<String>,
    /// What its environment and cgroup tell.
    #[serde(flatten)]
    pub process: super::nic::ProcessJob,
}

/// The iteration period and how well the phases keep it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Period {
    pub ns: u64,
    /// Iterations it was measured over (phase starts to the next, within a quarter of the
    /// median).
    pub iterations: u32,
    /// The iteration times' coefficient of variation (standard deviation over mean).
    pub cv: f64,
    /// The period's own uncertainty (ns): the standard error of the mean iteration time.
    pub stderr_ns: u64,
}

/// One communication phase: a burst of the job's traffic between compute gaps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// Unix ns, on the bins (a phase starts at its first busy bin's start and ends at its last
    /// busy bin's end).
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    /// Each host's part: when it sent in this phase, and what the network showed its QPs.
    pub hosts: Vec<HostPhase>,
}

/// A host's sending in one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostPhase {
    pub host: IpAddr,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bytes: u64,
    /// CE-marked packets, CNPs, NAKs and resent PSNs on its QPs (both ways) in the phase.
    pub ce: u64,
    pub cnp: u64,
    pub naks: u64,
    pub retransmissions: u64,
    /// The end of the last data it received up to its first send (its bin included): in this phase
    /// (`fed_in_phase`: it forwards or reduces what came in, as a tree's inner host or root
    /// does), else in the phase before (the data its compute started from); none when neither.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fed_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fed_in_phase: bool,
}

impl HostPhase {
    /// `host` sending from `start_ns` to `end_ns`, `bytes` of it, its QPs quiet and what fed
    /// it not known.
    pub fn quiet(host: IpAddr, start_ns: u64, end_ns: u64, bytes: u64) -> Self {
        Self {
            host,
            start_ns,
            end_ns,
            bytes,
            ce: 0,
            cnp: 0,
            naks: 0,
            retransmissions: 0,
            fed_ns: None,
            fed_in_phase: false,
        }
    }

    /// What the network showed its QPs in the phase: CE marks, CNPs, NAKs and resends.
    pub fn events(&self) -> u64 {
        self.ce + self.cnp + self.naks + self.retransmissions
    }
}
