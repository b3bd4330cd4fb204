//! What the aggregate means: time series and microbursts, ECMP hash models, and the findings
//! rules.

pub mod checklist;
pub mod ecmp;
pub mod fabric;
pub mod findings;
pub mod jobs;
pub mod points;
pub mod series;
