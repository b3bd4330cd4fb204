//! ECMP hashing validation (issue 5, in progress): switch hash models checked against published
//! test vectors, and connection pairing with the drivers' source-port rule. Prediction,
//! metrics against the random ideal, what-if and the `ecmp` command follow.

pub mod hash;
pub mod pairing;

pub use hash::{Bucket, Fields, FlowFields, HashFn, HashModel, MICROSOFT_RSS_KEY};
pub use pairing::{Connection, Pairing, SourcePort, flow_label_to_udp_sport, pair, rdma_udp_sport};
