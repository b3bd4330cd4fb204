//! ECMP hashing validation: switch hash models checked against published test vectors,
//! connection pairing with the drivers' source-port rule, per-uplink prediction with balance
//! metrics against a seeded random ideal, two tiers, and what would bring the busiest uplink
//! under a target. The report object is [`crate::model::ecmp::EcmpReport`].

pub mod analysis;
pub mod hash;
pub mod pairing;
pub mod predict;

pub use analysis::{EcmpOptions, analyse};
pub use hash::{Bucket, Fields, FlowFields, HashFn, HashModel, MICROSOFT_RSS_KEY};
pub use pairing::{Connection, Pairing, SourcePort, flow_label_to_udp_sport, pair, rdma_udp_sport};
pub use predict::{FlowLoad, Spread, balance, random_ideal, spread, two_tiers};
