//! Reading the kernel maps: the one reader of the flow table, the flow cache, the pause table
//! and the counters, for a snapshot ([`read_maps`]) and for the daemon's drains
//! ([`read_flow_table`] on several threads, then [`read_flow_cache`]).
//!
//! Every read goes through [`bpfsys`]: batched lookups (`BPF_MAP_LOOKUP_BATCH`, [`BATCH`]
//! entries per syscall), one key at a time on kernels without them. A batch walk sees each hash
//! bucket once while the programs update the map (a key-at-a-time walk can repeat entries when
//! its current key is deleted under it).

use std::{
    os::fd::{AsFd, BorrowedFd},
    sync::mpsc,
};

use aya::{Ebpf, maps::Map};
use observer_common::cm::{CmConn, CmKey};
use observer_common::{
    Counters, FLOW_LOG_SLOTS, FlowKey, FlowSlot, FlowStats, IfaceCounters, LatHist, LatKey,
    LatScopeKey, LatState, MsgStats, PauseKey, PauseStats, maps,
};

use super::{LiveError, bpfsys};
use crate::aggregate::Aggregate;

/// Entries per batched read (a few hundred: the buffers stay in cache; measured faster than
/// 4096).
const BATCH: u32 = 256;

/// What reading the flow maps hands over: the flow table's entries, then the flow cache's slots.
pub trait FlowSink {
    /// A flow-table entry: one value per possible CPU.
    fn table_entry(&mut self, key: &FlowKey, per_cpu: &[FlowStats]);
    /// One CPU's flow-cache slot (empty ones included: no packets).
    fn cache_slot(&mut self, key: &FlowKey, stats: &FlowStats);
}

/// Reads the flow table, then the per-CPU flow cache in front of it, into `sink`. A cache slot
/// read while the kernel gives it to another flow can pair a torn key with stats: a key that
/// does not hash to its slot is one, and is left out. While the programs run, a flow written back
/// from the cache between the two reads can be missed or counted twice; detach first for a final
/// read.
pub fn read_flows(ebpf: &Ebpf, sink: &mut impl FlowSink) -> Result<(), LiveError> {
    let flows = map_fd(ebpf, maps::FLOWS)?;
    bpfsys::percpu_hash_for_each::<FlowKey, FlowStats>(flows, BATCH, |k, v| sink.table_entry(k, v))
        .map_err(read_error(maps::FLOWS))?;
    read_flow_cache(ebpf, |key, stats| sink.cache_slot(key, stats))
}

/// Entries a table reader hands over at a time (a chunk of the daemon's readings, 200 bytes,
/// or 384 with the fleet records' counters, stays under the allocator's 128 KiB threshold for
/// a mapping of its own).
const CHUNK: usize = 256;
/// Chunks in flight per reader (bounds the memory of readers running ahead).
const CHUNKS_AHEAD: usize = 4;
/// Fewer buckets than this per reader are read by one thread.
const MIN_BUCKETS_PER_READER: u32 = 1 << 14;

/// Reads the flow table on up to `readers` threads (this one among them), each walking its share
/// of the hash buckets: each entry's per-CPU values go through `extract` on the reading thread,
/// and what it returns to `sink` on this one, which takes in the other readers' entries between
/// batches of its own. The kernel's copy of the per-CPU values (every CPU's, whole) is most of a
/// drain's cost and bound by memory latency, so readers side by side nearly divide its time.
///
/// An entry just past the end of one reader's share can come twice (also from the next reader:
/// see [`bpfsys::percpu_hash_for_each_in`]), read at two instants; `sink` keeps one. A kernel
/// that refused a share's starting bucket gets the whole table read again, each entry coming
/// twice. Read the cache ([`read_flow_cache`]) after the table, as [`read_flows`] does.
pub fn read_flow_table<R: Send>(
    ebpf: &Ebpf,
    readers: usize,
    extract: impl Fn(&FlowKey, &[FlowStats]) -> R + Sync,
    mut sink: impl FnMut(R),
) -> Result<(), LiveError> {
    let flows = map_fd(ebpf, maps::FLOWS)?;
    let buckets =
        bpfsys::hash_buckets::<FlowKey, FlowStats>(flows).map_err(read_error(maps::FLOWS))?;
    let readers = readers
        .clamp(1, 64)
        .min((buckets / MIN_BUCKETS_PER_READER).max(1) as usize) as u32;
    // Reader i's share: buckets from start(i) to start(i + 1), the last one to the end.
    let start = |i: u32| (u64::from(buckets) * u64::from(i) / u64::from(readers)) as u32;
    let end = |i: u32| {
        if i + 1 == readers {
            u32::MAX
        } else {
            start(i + 1)
        }
    };
    let extract = &extract;
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel::<Vec<R>>(CHUNKS_AHEAD * readers as usize);
        let others: Vec<_> = (1..readers)
            .map(|i| {
                let tx = tx.clone();
                scope.spawn(move || {
                    let mut chunk = Vec::with_capacity(CHUNK);
                    let walked = bpfsys::percpu_hash_for_each_in::<FlowKey, FlowStats>(
                        flows,
                        BATCH,
                        start(i)..end(i),
                        |k, v| {
                            chunk.push(extract(k, v));
                            if chunk.len() == CHUNK {
                                // The receiver goes away only after every reader ended (or on
                                // a panic, when nothing is wanted any more).
                                let _ = tx
                                    .send(std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK)));
                            }
                        },
                    );
                    if !chunk.is_empty() {
                        let _ = tx.send(chunk);
                    }
                    walked
                })
            })
            .collect();
        drop(tx);
        let mut own = 0usize;
        let walked = bpfsys::percpu_hash_for_each_in::<FlowKey, FlowStats>(
            flows,
            BATCH,
            start(0)..end(0),
            |k, v| {
                sink(extract(k, v));
                own += 1;
                if own.is_multiple_of(BATCH as usize) {
                    for chunk in rx.try_iter() {
                        chunk.into_iter().for_each(&mut sink);
                    }
                }
            },
        );
        for chunk in rx {
            chunk.into_iter().for_each(&mut sink);
        }
        let first = walked.map_err(read_error(maps::FLOWS))?;
        let mut refused = false;
        for walk in others {
            match walk.join() {
                Ok(walked) => refused |= !walked.map_err(read_error(maps::FLOWS))?.batched,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        if first.batched && refused {
            // Batch lookups work, yet a share's starting bucket was refused: the kernel does not
            // take a bucket index as a position. The whole table again, in one walk (what the
            // shares read already comes twice).
            bpfsys::percpu_hash_for_each::<FlowKey, FlowStats>(flows, BATCH, |k, v| {
                sink(extract(k, v))
            })
            .map_err(read_error(maps::FLOWS))?;
        }
        Ok(())
    })
}

/// Reads the per-CPU flow cache: `f(key, stats)` per CPU's slot (empty ones included: no
/// packets), torn slots (a key that does not hash to its slot) left out.
pub fn read_flow_cache(
    ebpf: &Ebpf,
    mut f: impl FnMut(&FlowKey, &FlowStats),
) -> Result<(), LiveError> {
    let cache = map_fd(ebpf, maps::FLOW_CACHE)?;
    bpfsys::percpu_array_for_each::<FlowSlot>(cache, BATCH, |index, slots| {
        for s in whole_slots(index, slots) {
            f(&s.key, &s.stats);
        }
    })
    .map_err(read_error(maps::FLOW_CACHE))?;
    Ok(())
}

/// The slots of cache entry `index` (one per CPU) whose key belongs there.
fn whole_slots(index: u32, slots: &[FlowSlot]) -> impl Iterator<Item = &FlowSlot> {
    slots.iter().filter(move |s| s.key.slot() == index)
}

/// Keys each CPU has written to the flow log (`FLOW_LOG`) ever: what [`read_flow_log`] reads
/// from and up to.
pub fn flow_log_written(ebpf: &Ebpf) -> Result<Vec<u64>, LiveError> {
    per_cpu::<u64>(ebpf, maps::FLOW_LOG_HEAD, 0)
}

/// The keys written back to the flow table since `from` (per CPU, as [`flow_log_written`] gave
/// them) up to `to` (read later), in no order and with repeats; `None` when some of them were
/// overwritten (a CPU wrote a whole ring since `from`) before they could be read, or the CPUs
/// do not match: then only a walk of the whole table is exact.
pub fn read_flow_log(
    ebpf: &Ebpf,
    from: &[u64],
    to: &[u64],
) -> Result<Option<Vec<FlowKey>>, LiveError> {
    // Key number n is at n % FLOW_LOG_SLOTS; while a CPU has written fewer than the ring holds
    // since `from`, none of the keys from there on has been overwritten (the one being written
    // now included).
    let whole = |written: &[u64]| {
        written.len() == from.len()
            && written
                .iter()
                .zip(from)
                .all(|(w, f)| w.wrapping_sub(*f) < u64::from(FLOW_LOG_SLOTS))
    };
    if !whole(to) {
        return Ok(None);
    }
    let log = map_fd(ebpf, maps::FLOW_LOG)?;
    let mut keys = Vec::new();
    for (cpu, (&f, &t)) in from.iter().zip(to).enumerate() {
        if t == f {
            continue;
        }
        let start = (f % u64::from(FLOW_LOG_SLOTS)) as u32;
        let end = start as u64 + (t - f);
        // One range, or two where the ring wraps.
        let ranges = if end <= u64::from(FLOW_LOG_SLOTS) {
            [start..end as u32, 0..0]
        } else {
            [
                start..FLOW_LOG_SLOTS,
                0..(end - u64::from(FLOW_LOG_SLOTS)) as u32,
            ]
        };
        for range in ranges.into_iter().filter(|r| !r.is_empty()) {
            bpfsys::percpu_array_for_each_in::<FlowKey>(log, BATCH, range, |_, per_cpu| {
                keys.extend(per_cpu.get(cpu));
            })
            .map_err(read_error(maps::FLOW_LOG))?;
        }
    }
    if !whole(&flow_log_written(ebpf)?) {
        return Ok(None);
    }
    Ok(Some(keys))
}

/// Looks `keys` up in the flow table: `f(key, Some(extract(key, per_cpu_values)))` for each
/// entry it holds, `f(key, None)` for each key it does not.
pub fn read_flow_entries<R>(
    ebpf: &Ebpf,
    keys: &[FlowKey],
    extract: impl Fn(&FlowKey, &[FlowStats]) -> R,
    mut f: impl FnMut(&FlowKey, Option<R>),
) -> Result<(), LiveError> {
    let flows = map_fd(ebpf, maps::FLOWS)?;
    bpfsys::percpu_hash_lookup_each::<FlowKey, FlowStats>(flows, keys, |k, v| {
        f(k, v.map(|v| extract(k, v)));
    })
    .map_err(read_error(maps::FLOWS))?;
    Ok(())
}

/// Deletes `key` from the flow table: its last per-CPU values, none when it is not there.
pub fn take_flow(ebpf: &Ebpf, key: &FlowKey) -> Result<Option<Vec<FlowStats>>, LiveError> {
    bpfsys::percpu_hash_take::<FlowKey, FlowStats>(map_fd(ebpf, maps::FLOWS)?, key)
        .map_err(read_error(maps::FLOWS))
}

/// The global counters, summed over CPUs.
pub fn read_counters(ebpf: &Ebpf) -> Result<Counters, LiveError> {
    let mut total = Counters::default();
    for c in per_cpu(ebpf, maps::COUNTERS, 0)? {
        total.merge(&c);
    }
    Ok(total)
}

/// Per-interface counters of interface slot `slot`, summed over CPUs: [ingress, egress].
pub fn iface_counters(ebpf: &Ebpf, slot: usize) -> Result<[IfaceCounters; 2], LiveError> {
    let mut out = [IfaceCounters::default(); 2];
    for (dir, total) in out.iter_mut().enumerate() {
        for c in per_cpu(ebpf, maps::IFACE_COUNTERS, 2 * slot as u32 + dir as u32)? {
            total.merge(&c);
        }
    }
    Ok(out)
}

/// Sums the observer's per-CPU maps of a loaded object (the counters, the flow table and the
/// flow cache in front of it, the pause table); timestamps shifted by `ts_offset_ns` (0 keeps
/// the kernel's monotonic clock). While the program runs, a flow written back from the cache
/// between the two reads can be missed or counted twice; detach first for a final read.
pub fn read_maps(ebpf: &Ebpf, ts_offset_ns: i128) -> Result<Aggregate, LiveError> {
    let mut agg = Aggregate::new();
    agg.counters = read_counters(ebpf)?;
    read_flows(
        ebpf,
        &mut Shifted {
            agg: &mut agg,
            by: ts_offset_ns,
        },
    )?;
    let pauses = map_fd(ebpf, maps::PAUSES)?;
    bpfsys::percpu_hash_for_each::<PauseKey, PauseStats>(pauses, BATCH, |key, per_cpu| {
        for s in per_cpu {
            let mut s = *s;
            if s.frames_total() > 0 {
                s.first_seen_ns = shift(s.first_seen_ns, ts_offset_ns);
                s.last_seen_ns = shift(s.last_seen_ns, ts_offset_ns);
            }
            agg.merge_pause(*key, &s);
        }
    })
    .map_err(read_error(maps::PAUSES))?;
    read_latency(ebpf, &mut agg)?;
    read_messages(ebpf, &mut agg)?;
    Ok(agg)
}

/// The pause table: each sender's values summed over CPUs (the daemon's drains).
pub fn read_pauses(
    ebpf: &Ebpf,
) -> Result<std::collections::BTreeMap<PauseKey, PauseStats>, LiveError> {
    let mut out = std::collections::BTreeMap::new();
    let pauses = map_fd(ebpf, maps::PAUSES)?;
    bpfsys::percpu_hash_for_each::<PauseKey, PauseStats>(pauses, BATCH, |key, per_cpu| {
        let total: &mut PauseStats = out.entry(*key).or_default();
        for s in per_cpu {
            total.merge(s);
        }
    })
    .map_err(read_error(maps::PAUSES))?;
    Ok(out)
}

/// Adds the messages of every flow (one shared value each).
pub fn read_messages(ebpf: &Ebpf, agg: &mut Aggregate) -> Result<(), LiveError> {
    for (key, stats) in &read_shared::<FlowKey, MsgStats>(ebpf, maps::MSGS)? {
        agg.merge_messages(*key, stats);
    }
    Ok(())
}

/// Appends the messages of every flow, as the kernel holds them, to `out`: a list, since a map
/// of them costs a move of each kilobyte value per rehash. A batched read gives each key once;
/// a read a key at a time (a kernel without batch lookups) can give one twice.
pub fn read_message_list(ebpf: &Ebpf, out: &mut Vec<(FlowKey, MsgStats)>) -> Result<(), LiveError> {
    shared_for_each::<FlowKey, MsgStats>(ebpf, maps::MSGS, |k, v| out.push((*k, *v)))
}

/// Every entry of a shared (not per-CPU) LRU hash map, each key once (a key-at-a-time walk
/// starts over when the LRU evicts the key it stands on, so an entry can come twice; the
/// kernel holds one value per key), read in batches.
fn read_shared<K: aya::Pod + Eq + std::hash::Hash, V: aya::Pod>(
    ebpf: &Ebpf,
    name: &'static str,
) -> Result<rustc_hash::FxHashMap<K, V>, LiveError> {
    let mut out = rustc_hash::FxHashMap::default();
    shared_for_each::<K, V>(ebpf, name, |k, v| {
        out.insert(*k, *v);
    })?;
    Ok(out)
}

/// Every entry of a shared (not per-CPU) hash map, read in batches.
fn shared_for_each<K: aya::Pod, V: aya::Pod>(
    ebpf: &Ebpf,
    name: &'static str,
    f: impl FnMut(&K, &V),
) -> Result<(), LiveError> {
    let fd = match map(ebpf, name)? {
        Map::LruHashMap(d) | Map::HashMap(d) => d.fd().as_fd(),
        _ => {
            return Err(LiveError::BadMap {
                map: name,
                problem: "not a shared hash map",
            });
        }
    };
    bpfsys::hash_for_each::<K, V>(fd, BATCH, f).map_err(read_error(name))?;
    Ok(())
}

/// Adds the latency maps: the per-connection states (one shared value each) and the
/// per-interface histograms (per-CPU); and what the connection manager said of connections.
pub fn read_latency(ebpf: &Ebpf, agg: &mut Aggregate) -> Result<(), LiveError> {
    for (key, state) in &read_shared::<LatKey, LatState>(ebpf, maps::LAT)? {
        agg.merge_latency(*key, state);
    }
    let scopes = map_fd(ebpf, maps::LAT_SCOPES)?;
    bpfsys::percpu_hash_for_each::<LatScopeKey, LatHist>(scopes, BATCH, |key, per_cpu| {
        for h in per_cpu {
            agg.merge_latency_scope(*key, h);
        }
    })
    .map_err(read_error(maps::LAT_SCOPES))?;
    for (key, conn) in &read_shared::<CmKey, CmConn>(ebpf, maps::CM_CONNS)? {
        agg.cm_conns.entry(*key).or_default().merge(conn);
    }
    Ok(())
}

/// Flows summed into an aggregate, their times shifted.
struct Shifted<'a> {
    agg: &'a mut Aggregate,
    by: i128,
}

impl Shifted<'_> {
    fn add(&mut self, key: &FlowKey, s: &FlowStats) {
        let mut s = *s;
        if s.packets > 0 {
            s.first_seen_ns = shift(s.first_seen_ns, self.by);
            s.last_seen_ns = shift(s.last_seen_ns, self.by);
            // The PSN analysis's times too (0: none kept), so that evidence times compare
            // with the flows' and with each other.
            let t = &mut s.seq_track;
            for ns in [&mut t.req_ns, &mut t.ackreq_ns, &mut t.resp_ns] {
                if *ns != 0 {
                    *ns = shift(*ns, self.by);
                }
            }
            for ns in [&mut s.seq.timeout_at_ns, &mut s.seq.violation_ns] {
                if *ns != 0 {
                    *ns = shift(*ns, self.by);
                }
            }
        }
        self.agg.merge_flow(*key, &s);
    }
}

impl FlowSink for Shifted<'_> {
    fn table_entry(&mut self, key: &FlowKey, per_cpu: &[FlowStats]) {
        for s in per_cpu {
            self.add(key, s);
        }
    }

    fn cache_slot(&mut self, key: &FlowKey, stats: &FlowStats) {
        self.add(key, stats);
    }
}

/// Index `index` of the per-CPU array `name`: one value per possible CPU.
fn per_cpu<V: aya::Pod>(ebpf: &Ebpf, name: &'static str, index: u32) -> Result<Vec<V>, LiveError> {
    bpfsys::percpu_array_get::<V>(map_fd(ebpf, name)?, index).map_err(read_error(name))
}

/// A per-CPU map of the loaded object, or `BadMap` naming it.
fn map_fd<'a>(ebpf: &'a Ebpf, name: &'static str) -> Result<BorrowedFd<'a>, LiveError> {
    match map(ebpf, name)? {
        Map::PerCpuLruHashMap(d) | Map::PerCpuHashMap(d) | Map::PerCpuArray(d) => {
            Ok(d.fd().as_fd())
        }
        _ => Err(LiveError::BadMap {
            map: name,
            problem: "not a per-CPU map",
        }),
    }
}

/// A map of the loaded object, or `BadMap` naming it.
pub(super) fn map<'a>(ebpf: &'a Ebpf, name: &'static str) -> Result<&'a Map, LiveError> {
    ebpf.map(name).ok_or(LiveError::BadMap {
        map: name,
        problem: "missing",
    })
}

fn read_error(map: &'static str) -> impl Fn(bpfsys::BpfSysError) -> LiveError {
    move |source| LiveError::ReadMap { map, source }
}

fn shift(ns: u64, by: i128) -> u64 {
    (ns as i128 + by).clamp(0, u64::MAX as i128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_cache_slots_are_left_out() {
        let key = FlowKey {
            dest_qp: 0xab,
            udp_src_port: 49152,
            ..FlowKey::default()
        };
        let mut other = key;
        other.dest_qp += 1;
        assert_ne!(key.slot(), other.slot());
        let slot = |key| FlowSlot {
            key,
            stats: FlowStats {
                packets: 1,
                ..FlowStats::default()
            },
        };
        // CPU 0 holds the entry's flow, CPU 1 a key torn by a write for another entry.
        let slots = [slot(key), slot(other)];
        let whole: Vec<_> = whole_slots(key.slot(), &slots).map(|s| s.key).collect();
        assert_eq!(whole, [key]);
    }
}
