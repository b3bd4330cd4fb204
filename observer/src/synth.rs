//! Synthetic RoCEv2 generator (being written).
