//! Reading the kernel maps.

use aya::{
    Ebpf,
    maps::{PerCpuArray, PerCpuHashMap},
};
use observer_common::{
    Counters, FlowKey, FlowSlot, FlowStats, IfaceCounters, PauseKey, PauseStats, maps,
};

use super::{LiveError, error::chain};
use crate::aggregate::Aggregate;

/// Sums the observer's per-CPU maps of a loaded object (the flow table and the flow cache in
/// front of it); timestamps shifted by `ts_offset_ns` (0 keeps the kernel's monotonic clock).
/// While the program runs, a flow written back from the cache between the two reads can be
/// missed or counted twice; detach first for a final read.
pub fn read_maps(ebpf: &Ebpf, ts_offset_ns: i128) -> Result<Aggregate, LiveError> {
    let read_err = |map: &'static str| {
        move |e: aya::maps::MapError| LiveError::ReadMap {
            map,
            detail: chain(&e),
        }
    };
    let mut agg = Aggregate::new();
    let counters_map = map(ebpf, maps::COUNTERS)?;
    let counters: PerCpuArray<_, Counters> =
        PerCpuArray::try_from(counters_map).map_err(read_err(maps::COUNTERS))?;
    for c in counters
        .get(&0, 0)
        .map_err(read_err(maps::COUNTERS))?
        .iter()
    {
        agg.counters.merge(c);
    }
    let flows_map = map(ebpf, maps::FLOWS)?;
    let flows: PerCpuHashMap<_, FlowKey, FlowStats> =
        PerCpuHashMap::try_from(flows_map).map_err(read_err(maps::FLOWS))?;
    let mut add = |key: FlowKey, s: &FlowStats| {
        let mut s = *s;
        if s.packets > 0 {
            s.first_seen_ns = shift(s.first_seen_ns, ts_offset_ns);
            s.last_seen_ns = shift(s.last_seen_ns, ts_offset_ns);
        }
        agg.merge_flow(key, &s);
    };
    for entry in flows.iter() {
        let (key, per_cpu) = match entry {
            Ok(kv) => kv,
            // An LRU entry evicted while iterating: skip it.
            Err(aya::maps::MapError::KeyNotFound) => continue,
            Err(e) => return Err(read_err(maps::FLOWS)(e)),
        };
        for s in per_cpu.iter() {
            add(key, s);
        }
    }
    let cache_map = map(ebpf, maps::FLOW_CACHE)?;
    let cache: PerCpuArray<_, FlowSlot> =
        PerCpuArray::try_from(cache_map).map_err(read_err(maps::FLOW_CACHE))?;
    for per_cpu in cache.iter() {
        for slot in per_cpu.map_err(read_err(maps::FLOW_CACHE))?.iter() {
            add(slot.key, &slot.stats);
        }
    }
    let pauses_map = map(ebpf, maps::PAUSES)?;
    let pauses: PerCpuHashMap<_, PauseKey, PauseStats> =
        PerCpuHashMap::try_from(pauses_map).map_err(read_err(maps::PAUSES))?;
    for entry in pauses.iter() {
        let (key, per_cpu) = match entry {
            Ok(kv) => kv,
            Err(aya::maps::MapError::KeyNotFound) => continue,
            Err(e) => return Err(read_err(maps::PAUSES)(e)),
        };
        for s in per_cpu.iter() {
            let mut s = *s;
            if s.frames_total() > 0 {
                s.first_seen_ns = shift(s.first_seen_ns, ts_offset_ns);
                s.last_seen_ns = shift(s.last_seen_ns, ts_offset_ns);
            }
            agg.merge_pause(key, &s);
        }
    }
    Ok(agg)
}

/// A map of the loaded object, or `ReadMap` naming it.
pub(super) fn map<'a>(ebpf: &'a Ebpf, name: &'static str) -> Result<&'a aya::maps::Map, LiveError> {
    ebpf.map(name).ok_or(LiveError::ReadMap {
        map: name,
        detail: "missing".into(),
    })
}

fn shift(ns: u64, by: i128) -> u64 {
    (ns as i128 + by).clamp(0, u64::MAX as i128) as u64
}

/// Per-interface counters of interface slot `slot`, summed over CPUs: [ingress, egress].
pub(super) fn iface_counters(ebpf: &Ebpf, slot: usize) -> Result<[IfaceCounters; 2], LiveError> {
    let read_err = |e: aya::maps::MapError| LiveError::ReadMap {
        map: maps::IFACE_COUNTERS,
        detail: chain(&e),
    };
    let counters: PerCpuArray<_, IfaceCounters> =
        PerCpuArray::try_from(map(ebpf, maps::IFACE_COUNTERS)?).map_err(read_err)?;
    let mut out = [IfaceCounters::default(); 2];
    for (dir, total) in out.iter_mut().enumerate() {
        for c in counters
            .get(&(2 * slot as u32 + dir as u32), 0)
            .map_err(read_err)?
            .iter()
        {
            total.merge(c);
        }
    }
    Ok(out)
}
