//! ECMP hashing validation (issue 5, in progress): switch hash models checked against published
//! test vectors, connection pairing with the drivers' source-port rule, per-uplink prediction
//! with balance metrics against a seeded random ideal, and two tiers. The report object, the
//! what-if and the `ecmp` command follow.

pub mod analysis;
pub mod hash;
pub mod pairing;
pub mod predict;

pub use analysis::{EcmpOptions, EcmpReport, analyse};
pub use hash::{Bucket, Fields, FlowFields, HashFn, HashModel, MICROSOFT_RSS_KEY};
pub use pairing::{Connection, Pairing, SourcePort, flow_label_to_udp_sport, pair, rdma_udp_sport};
pub use predict::{Balance, FlowLoad, Spread, balance, random_ideal, spread, two_tiers};
