//! Where frames come from: the kernel programs on live interfaces, capture files, or the
//! generator. Each ends in the same [`crate::aggregate::Aggregate`].

pub mod live;
pub mod replay;
pub mod synth;
