//! What watches the frames beside the aggregate as they are read (the time series and
//! microbursts), and how its work on the flow table splits over the shards of a replay on
//! several threads.

use super::Aggregate;

/// What watches the frames as they are read, beside the aggregate (the pipeline's time series
/// and microbursts): told of each capture file, then of each frame before it is accounted.
pub trait FrameObserver {
    /// A capture file named `name` is read: frames of `source` N come from the Nth file told
    /// of (counted from 0). Every file of a merge is told of before its first frame.
    fn begin_source(&mut self, name: &str);
    /// A frame of `len` bytes on the wire at `ts_ns`, from `source`; `flows` is the flow table
    /// before it.
    fn frame(&mut self, source: usize, ts_ns: u64, len: u64, flows: &Aggregate);
}

/// No observer: the counts alone.
impl FrameObserver for () {
    fn begin_source(&mut self, _: &str) {}
    fn frame(&mut self, _: usize, _: u64, _: u64, _: &Aggregate) {}
}

/// A frame observer whose work on the flow table can be split over shards: it sees every frame
/// (on the reading thread, with no flow table), and a part of it in each shard follows where
/// it stands, with the shard's flow table.
pub trait Sharded: FrameObserver {
    /// Where the observer stands after a frame: a shard's part is told of each change.
    type Mark: Copy + Eq + Send + Sync;
    /// What each shard keeps.
    type Part: ShardPart<Mark = Self::Mark> + Send;
    /// A part for a shard, before the first frame.
    fn part(&self) -> Self::Part;
    /// Where the observer stands now.
    fn mark(&self) -> Self::Mark;
    /// The shards' parts, after their last frame.
    fn join(&mut self, parts: Vec<Self::Part>);
}

/// A shard's part of a [`Sharded`] observer.
pub trait ShardPart {
    type Mark;
    /// The observer moved to `mark` before the next frame; `agg` is the shard's flow table
    /// before it.
    fn mark(&mut self, mark: Self::Mark, agg: &Aggregate);
    /// The last frame was accounted; `agg` is the shard's final flow table.
    fn end(&mut self, agg: &Aggregate);
}

/// No observer: the counts alone.
impl Sharded for () {
    type Mark = ();
    type Part = ();
    fn part(&self) {}
    fn mark(&self) {}
    fn join(&mut self, _: Vec<()>) {}
}

impl ShardPart for () {
    type Mark = ();
    fn mark(&mut self, _: (), _: &Aggregate) {}
    fn end(&mut self, _: &Aggregate) {}
}
