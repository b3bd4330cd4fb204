//! Files of one traffic merged: a flow carried over from one file to another is said once.

use super::*;

/// A copy of a packet never lags it by this much: a PSN seen again after that long is a
/// resend after a timeout, to the PSN analysis too.
pub(super) const COPY_LAG_NS: u64 = points::SIGHT_WINDOW_NS;

pub(super) type HashMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;

/// What overlapping files hold of each other's traffic, per flow: the first file in the order
/// given that carried it while overlapping others in time (to name, once, each file that holds
/// flows of a file before it).
pub(super) struct Overlap {
    pub(super) first: HashMap<FlowKey, usize>,
    pub(super) named: Vec<bool>,
}

impl Overlap {
    pub(super) fn new(files: usize) -> Self {
        Self {
            first: HashMap::default(),
            named: vec![false; files],
        }
    }

    /// File `i` carried flow `flow` while overlapping another file in time. Whichever of it
    /// and the flow's first file so far comes later in the order given holds traffic of a file
    /// before it (named unless it was already); the earlier is the flow's first file from now
    /// on. (A later file that carried it before was named then.)
    pub(super) fn carried(&mut self, i: usize, flow: FlowKey) -> Option<usize> {
        let first = self.first.entry(flow).or_insert(i);
        let later = match (*first).cmp(&i) {
            std::cmp::Ordering::Equal => return None,
            std::cmp::Ordering::Less => i,
            std::cmp::Ordering::Greater => std::mem::replace(first, i),
        };
        let named = self.named.get_mut(later)?;
        (!std::mem::replace(named, true)).then_some(later)
    }
}
