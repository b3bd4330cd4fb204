//! The `ecmp` object of the report: a flow set run through a switch hash model.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EcmpReport {
    pub model: Model,
    /// Flows modelled (mirror copies and host egress included as seen).
    pub flows: u64,
    /// Per uplink, by bytes (the measured rates of one window) and by flows.
    pub uplinks: Vec<Uplink>,
    pub balance_bytes: Balance,
    pub balance_flows: Balance,
    /// The same flows under an ideal random hash (mean of the trials).
    pub random_bytes: Balance,
    /// Share of the random trials whose busiest uplink (max/mean by bytes) was lighter than
    /// the model's: 0.5 is typical of a random hash, near 1 is worse than nearly all.
    pub random_percentile: f64,
    /// From `random_percentile`: "worse than random" (busier than 95% of the random
    /// placements or more), "better than random" (5% or fewer), "as good as random" between,
    /// each with the percentile; or why there is nothing to judge.
    pub verdict: String,
    /// Of the `top_k` largest flows, how many share an uplink with another of them.
    pub top_k: usize,
    pub top_k_colliding: usize,
    pub connections: Connections,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier2: Option<Tier2>,
    pub what_if: WhatIf,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub uplinks: u32,
    pub hash: String,
    pub fields: String,
    pub seed: u32,
    pub bucket: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Uplink {
    pub uplink: u32,
    pub bytes: u64,
    pub flows: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Connections {
    pub paired: usize,
    pub unpaired_flows: usize,
    pub conforming: usize,
    pub overridden: usize,
    /// Paired connections whose 5-tuple other QPs share.
    pub shared_tuple: usize,
    /// Paired connections whose directions have ports of their own (paired on their PSNs).
    #[serde(default)]
    pub per_direction: usize,
    /// Flows sharing their 5-tuple with a flow to another QP (paired or not): no entropy.
    pub shared_tuple_flows: usize,
    /// Flows to QP 1 (UD connection management), never paired.
    pub qp1_flows: usize,
    /// Why the unpaired flows are unpaired.
    #[serde(default)]
    pub unpaired_why: Unpaired,
}

/// Why flows stay unpaired, in flows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unpaired {
    /// No flow the other way on the same address pair and source port: a one-way capture, UD,
    /// a CNP flow on a source port of its own, or the other direction not observed.
    pub one_way: usize,
    /// The other way was seen, but only through another mirror session (not modelled).
    pub other_mirror: usize,
    /// Several QPs share the 5-tuple and the drivers' rule cannot match them up.
    pub shared_tuple: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tier2 {
    pub uplinks: u32,
    pub hash: String,
    pub seed: u32,
    pub bucket: String,
    /// Per spine (leaf uplink), the balance of its flows over its own uplinks by bytes.
    pub spines: Vec<Balance>,
    /// Spines that received several flows but use fewer than half the uplinks a random hash
    /// would have used for them: polarization.
    pub polarized: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    pub target: f64,
    /// max/mean by bytes with the destination QP added to the hash; absent when the model
    /// hashes it already (`5tuple+qp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_dest_qp: Option<f64>,
    /// The fewest QPs per connection (NCCL_IB_QPS_PER_CONNECTION, 1 to 16) from which on, up to
    /// 16, max/mean stays under the target: each paired connection split into that many, an
    /// equal share apiece, both directions of QP j on the drivers' port for QPNs (a + j, b + j);
    /// unpaired flows stay as they are. 1 when the flows as measured already meet the
    /// target (`meets_target`), whatever more QPs would give. None if no such count.
    pub qps_per_connection: Option<u32>,
    /// The flows as measured already stay under the target.
    #[serde(default)]
    pub meets_target: bool,
    /// What would help, from the cause: absent when the target is met or there are no flows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// Balance of a load vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Balance {
    /// Largest load over the mean: 1 is perfect, N is everything on one of N.
    pub max_over_mean: f64,
    /// Standard deviation over the mean.
    pub cv: f64,
    /// Jain's fairness index: (sum x)^2 / (n sum x^2), 1 is perfect, 1/n is one member.
    pub jain: f64,
    /// Members with no load.
    pub idle: u32,
}
