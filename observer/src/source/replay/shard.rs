//! Replay of one capture over several threads, with the same result as on one.
//!
//! The calling thread reads the file: it cuts the records, keeps the time span and the
//! warnings, and tells the [`Sharded`] observer of every frame in file order (the time series'
//! clock and the microburst slots see every frame, as on one thread). It reads each frame's two
//! IP hosts ahead (while the bytes it has just read are in its cache) to deal the frame to a
//! shard, and hands each buffer it has read to every shard, with the frames of each shard in it
//! and where the observer's [`Sharded::mark`] changed (bounded queues: a few buffers in flight,
//! memory stays constant in the file's size; the last shard done with a buffer gives it back).
//! Each shard accounts its frames, in file order, in an aggregate of its own, and follows the
//! marks with its part of the observer; the aggregates and parts are joined at the end.
//!
//! Everything the analysis of a packet reads lies between its two hosts: its flow and the
//! reverse direction (responses, latency), the PSN analysis of mirror copies of every session
//! together, the connection manager's traffic between them. So frames are dealt by the pair of
//! hosts of their RoCE packet, whatever the direction or mirror; frames that are no RoCE packet
//! go by their IP hosts when they have some, else to the first shard (PAUSE / PFC frames, in
//! file order there). A frame whose hosts the reader cannot tell (a mirror copy: its hosts are
//! inside) goes to every shard, which parses it and keeps it if it is its own. The shards' flow
//! tables, hosts and requester directions are then disjoint, and their counters add up.
//!
//! A capture between two hosts only stays on one shard: the threads help with captures of
//! many host pairs (a fabric's mirror port, a switch's traffic), not one perftest pair.

use std::{
    io::Read,
    sync::{Arc, Mutex, PoisonError, mpsc},
    thread,
};

use super::{Link, Reader, Replay, link::host_pair};
use crate::aggregate::Aggregate;

/// A frame observer whose work can be split over shards, and a shard's part of it (the
/// core's).
pub use observer_core::aggregate::{ShardPart, Sharded};

/// Bytes read at a time: a buffer handed to the shards.
pub(super) const CHUNK: usize = 1 << 20;
/// Buffers queued for a shard at most (the reader waits for a slow shard).
const QUEUE: usize = 4;

/// A frame in a buffer: where it lies, its place among the block's frames, and whether its
/// shard is known (else every shard parses it to see whose it is).
#[derive(Clone, Copy)]
struct Desc {
    ts_ns: u64,
    at: u32,
    len: u32,
    index: u32,
    link: Link,
    known: bool,
}

/// A buffer read, the frames of each shard in it (with those whose shard the reader could not
/// tell in every list), and the marks (the frame before which each applies).
struct Block<M> {
    buf: Vec<u8>,
    frames: u32,
    shards: Vec<Vec<Desc>>,
    marks: Vec<(u32, M)>,
}

impl<M> Block<M> {
    fn new(shards: usize) -> Self {
        Self {
            buf: Vec::new(),
            frames: 0,
            shards: (0..shards).map(|_| Vec::new()).collect(),
            marks: Vec::new(),
        }
    }
}

/// The shard of a pair of hosts.
#[inline(always)]
fn shard_of(hosts: u64, shards: usize) -> usize {
    (((hosts >> 32) * shards as u64) >> 32) as usize
}

impl<O: Sharded> Replay<O> {
    /// Reads one file to its end with `shards` threads accounting its frames (`r` hands its
    /// buffers over).
    pub(super) fn sharded<R: Read>(&mut self, mut r: Reader<'_, R>, shards: usize) {
        let source = self.begin(&r.ctx.name);
        let shards = shards.max(1);
        let chunk = r.feed.chunk();
        // Blocks given back, the latest on top: its buffer was used last (and may still be
        // in a cache).
        let pool: Mutex<Vec<Block<O::Mark>>> = Mutex::new(Vec::new());
        let results = thread::scope(|s| {
            let mut queues = Vec::with_capacity(shards);
            let mut workers = Vec::with_capacity(shards);
            for me in 0..shards {
                let (tx, rx) = mpsc::sync_channel::<Arc<Block<O::Mark>>>(QUEUE);
                let part = self.observer.part();
                let pool = &pool;
                workers.push(s.spawn(move || work(me, shards, rx, pool, part)));
                queues.push(tx);
            }
            let empty = Aggregate::default();
            let mut pending: Block<O::Mark> = Block::new(shards);
            let mut mark = self.observer.mark();
            let ship = |block: Block<O::Mark>| {
                // The shards hold the only references: the last done gives the block back.
                let block = Arc::new(block);
                let (last, others) = queues.split_last().expect("a shard");
                // A shard that stopped has panicked: the scope says so when it ends.
                others.iter().all(|q| q.send(Arc::clone(&block)).is_ok())
                    && last.send(block).is_ok()
            };
            // A block given back: its lists for `pending`, its buffer to read into next.
            let recycled = |pending: &mut Block<O::Mark>| -> Vec<u8> {
                match pool.lock().unwrap_or_else(PoisonError::into_inner).pop() {
                    Some(b) => {
                        pending.shards = b.shards;
                        pending.marks = b.marks;
                        pending.shards.iter_mut().for_each(Vec::clear);
                        pending.marks.clear();
                        // A buffer grown for a huge record is not kept.
                        if b.buf.len() <= 2 * chunk {
                            b.buf
                        } else {
                            Vec::new()
                        }
                    }
                    None => Vec::new(),
                }
            };
            r.feed.give(recycled(&mut pending));
            while let Some(f) = r.next() {
                if let Some(buf) = r.feed.retired() {
                    let mut next = Block::new(shards);
                    r.feed.give(recycled(&mut next));
                    let full = std::mem::replace(&mut pending, next);
                    if !ship(Block { buf, ..full }) {
                        break;
                    }
                }
                self.span(f.ts_ns);
                let len = f.orig_len.max(f.len as u32);
                self.observer.frame(source, f.ts_ns, u64::from(len), &empty);
                let index = pending.frames;
                pending.frames += 1;
                let now = self.observer.mark();
                if now != mark {
                    pending.marks.push((index, now));
                    mark = now;
                }
                let data = r.data(&f);
                let mut d = Desc {
                    ts_ns: f.ts_ns,
                    at: (r.feed.record_at() + f.at) as u32,
                    len: f.len as u32,
                    index,
                    link: f.link,
                    known: true,
                };
                match f.link.hosts(data) {
                    Some(hosts) => pending.shards[shard_of(hosts, shards)].push(d),
                    None => {
                        d.known = false;
                        for list in &mut pending.shards {
                            list.push(d);
                        }
                    }
                }
            }
            // The frames read last lie in the current buffer, or in the one handed over when
            // the end (or a break) was found.
            let buf = r.feed.retired().unwrap_or_else(|| r.feed.take_buffer());
            ship(Block { buf, ..pending });
            drop(queues);
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect::<Vec<_>>()
        });
        let mut parts = Vec::with_capacity(results.len());
        for (agg, part) in results {
            self.agg.absorb(agg);
            parts.push(part);
        }
        self.observer.join(parts);
        self.end(r);
    }
}

/// Shard `me` of `shards`: accounts its frames of every block, follows the marks.
fn work<P: ShardPart>(
    me: usize,
    shards: usize,
    blocks: mpsc::Receiver<Arc<Block<P::Mark>>>,
    pool: &Mutex<Vec<Block<P::Mark>>>,
    mut part: P,
) -> (Aggregate, P)
where
    P::Mark: Copy,
{
    let mut agg = Aggregate::default();
    for block in blocks {
        let mut marks = block.marks.iter().peekable();
        let list = &block.shards[me];
        for (j, d) in list.iter().enumerate() {
            // The reader's core brought the frames in: a frame's first read here waits for
            // its bytes to cross over unless asked for ahead.
            if let Some(ahead) = list.get(j + PREFETCH) {
                prefetch(&block.buf, ahead.at as usize);
            }
            // The marks up to this frame, in order: between two of the shard's frames its
            // flow table stands still.
            while let Some((_, m)) = marks.next_if(|(at, _)| *at <= d.index) {
                part.mark(*m, &agg);
            }
            let at = d.at as usize;
            let data = block.buf.get(at..at + d.len as usize).unwrap_or_default();
            let parsed = d.link.parse(data);
            if !d.known {
                let owner = match &parsed.result {
                    Ok(p) => shard_of(host_pair(&p.src_ip, &p.dst_ip), shards),
                    Err(_) => 0,
                };
                if owner != me {
                    continue;
                }
            }
            let _ = agg.push_parsed(parsed, data, d.ts_ns);
        }
        for (_, m) in marks {
            part.mark(*m, &agg);
        }
        // The last shard done with a block gives its buffers back.
        if let Some(b) = Arc::into_inner(block) {
            pool.lock().unwrap_or_else(PoisonError::into_inner).push(b);
        }
    }
    part.end(&agg);
    (agg, part)
}

/// Frames of a shard's list asked for ahead of the one accounted.
const PREFETCH: usize = 8;

/// Asks for the first two cache lines of a frame at `at` in `buf` (its headers), without
/// waiting for them.
#[inline(always)]
fn prefetch(buf: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in [at, at + 64] {
        if let Some(b) = buf.get(line) {
            // SAFETY: a prefetch reads nothing the program sees and never faults; the address
            // is in `buf` anyway.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    std::ptr::from_ref(b).cast(),
                );
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (buf, at);
}
