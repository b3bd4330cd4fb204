//! Shared between the kernel program and userspace: the RoCEv2 wire constants, the one packet
//! parser (over the [`Bytes`] access trait), and the `#[repr(C)]` map types with the per-flow
//! update code, so that live capture, capture replay and tests compute the same answer.
#![no_std]

pub mod burst;
pub mod cm;
pub mod flow;
pub mod lab;
pub mod latency;
pub mod loghist;
pub mod message;
pub mod parse;
pub mod pause;
pub mod seq;
pub mod wire;

pub use burst::{
    BURST_IFACE_SLOTS, BURST_RING_SLOTS, BURST_SPAN_LOG, BurstIface, BurstSlot, BurstSpan,
    IFACE_COUNTER_SLOTS, IfaceCounters, MAX_BURST_IFACES, WIRE_OVERHEAD, burst_index,
};
pub use flow::{
    Clock, ClockValue, Counters, DIRECTION_EGRESS, FLOW_CACHE_SLOTS, FLOW_LOG_SLOTS, FlowKey,
    FlowSlot, FlowStats, HostPair, MIRROR_UNION, MirrorOf, QP_CM, UNTAGGED, mirror_key,
    union_mirror,
};
pub use lab::{LabCounts, LabFault};
pub use latency::{
    LAT_BUCKETS, LAT_PEER_SLOTS, LAT_SLOTS, LatHist, LatKey, LatKind, LatLinkKey, LatPeers,
    LatSample, LatScopeKey, LatSide, LatState, lat_bucket, lat_bucket_bounds,
};
pub use loghist::LogScale;
pub use message::{MSG_BUCKETS, MSG_SCALE, MsgKind, MsgStats};
pub use parse::{
    Aeth, Bth, Bytes, Mirror, MirrorKind, OpClass, Parsed, Pause, RocePacket, SkipReason,
    Transport, VlanTag, parse, parse_frame, parse_frame_from, parse_from,
};
pub use pause::{LINK_PAUSE, PAUSE_CLASSES, PauseKey, PauseStats};
pub use seq::{SeqClass, SeqCounts, SeqInput, SeqTrack};

/// Map names shared by the kernel object and the loader.
pub mod maps {
    pub const FLOWS: &str = "FLOWS";
    pub const COUNTERS: &str = "COUNTERS";
    /// Per-CPU direct-mapped cache of hot flows in front of FLOWS (see `FlowSlot`).
    pub const FLOW_CACHE: &str = "FLOW_CACHE";
    /// Per-CPU ring of the keys written back from the cache to FLOWS (`FlowKey`,
    /// `FLOW_LOG_SLOTS` entries), and the number written ever (`u64`, one entry): a drain reads
    /// just the entries written since the last one.
    pub const FLOW_LOG: &str = "FLOW_LOG";
    pub const FLOW_LOG_HEAD: &str = "FLOW_LOG_HEAD";
    /// The shared (not per-CPU) flow table of the benchmark-only shared-map variant.
    pub const FLOWS_SHARED: &str = "FLOWS_SHARED";
    /// Counters of the baseline program (frames only), used by the benchmark.
    pub const BASELINE: &str = "BASELINE";
    /// PAUSE / PFC frames per sender and priority (`PauseKey` -> `PauseStats`, per-CPU LRU).
    pub const PAUSES: &str = "PAUSES";
    /// Microburst slot rings (mmapable array of BurstSlot).
    pub const BURSTS: &str = "BURSTS";
    /// The slots the clock's tick stood at longer than a slot (mmapable array of BurstSpan, a
    /// log of `BURST_SPAN_LOG` records).
    pub const BURST_SPANS: &str = "BURST_SPANS";
    /// Mirror mode spread over CPUs: the cpumap (CPU -> queue and observer program), and the
    /// CPUs spread over (entry 0: their number n, entries 1..=n: the CPUs).
    pub const SPREAD_CPUS: &str = "SPREAD_CPUS";
    pub const SPREAD: &str = "SPREAD";
    /// The programs' clock (`ClockValue`, one entry), ticked by a BPF timer.
    pub const CLOCK: &str = "CLOCK";
    /// ifindex % BURST_IFACE_SLOTS -> BurstIface (an array).
    pub const BURST_IFACES: &str = "BURST_IFACES";
    /// Per-CPU `IfaceCounters` per observed interface and direction (indexed like the rings).
    pub const IFACE_COUNTERS: &str = "IFACE_COUNTERS";
    /// Per-CPU scratch value the PSN analysis's input goes through.
    pub const SEQ_INPUT: &str = "SEQ_INPUT";
    /// Passive latency per requester direction of a connection (`LatKey` -> `LatState`, one
    /// shared LRU value per key: requests and answers may be handled on different CPUs).
    pub const LAT: &str = "LAT";
    /// Per pair of hosts (`LatKey` with port 0), the requester directions not answered yet
    /// (`LatPeers`, one shared LRU value): how answers on a port of their own find theirs.
    pub const LAT_PEERS: &str = "LAT_PEERS";
    /// The requests' port of the answers that found theirs through `LAT_PEERS`
    /// (`LatLinkKey` -> u16, LRU).
    pub const LAT_LINKS: &str = "LAT_LINKS";
    /// What the connection manager's REQ and REP said of each connection (`CmKey` ->
    /// `CmConn`, one shared LRU value).
    pub const CM_CONNS: &str = "CM_CONNS";
    /// Latency histograms per interface, kind and side (`LatScopeKey` -> `LatHist`, per-CPU).
    pub const LAT_SCOPES: &str = "LAT_SCOPES";
    /// Messages per flow, in its analysis entry (`FlowKey` -> `MsgStats`, one shared LRU
    /// value per key).
    pub const MSGS: &str = "MSGS";
}

/// Program names in the kernel object.
pub mod programs {
    /// The observer: parses every frame, accounts RoCEv2 per flow, always passes.
    pub const OBSERVE: &str = "roce_observe";
    /// The observer that drops every frame after accounting: mirror mode with --consume only.
    pub const OBSERVE_CONSUME: &str = "roce_observe_consume";
    /// Host mode, TC egress: accounts transmitted frames (flow key marked egress), passes on.
    pub const OBSERVE_EGRESS: &str = "roce_observe_egress";
    /// Host mode, TC ingress: accounts received frames as `OBSERVE` does, where a sidecar's
    /// `OBSERVE` holds the interface's XDP hook (`diagnose` beside it).
    pub const OBSERVE_INGRESS: &str = "roce_observe_ingress";
    /// Mirror mode spread over CPUs: sends each frame to its hosts' CPU (a cpumap).
    pub const SPREAD: &str = "roce_spread";
    /// `SPREAD` without the arrival stamp (kernels refusing XDP metadata to XDP programs).
    pub const SPREAD_BARE: &str = "roce_spread_bare";
    /// `OBSERVE` and `OBSERVE_CONSUME` as cpumap programs, on the CPUs frames are spread to.
    pub const OBSERVE_CPUMAP: &str = "roce_observe_cpumap";
    pub const OBSERVE_CONSUME_CPUMAP: &str = "roce_observe_consume_cpumap";
    /// Starts the clock's timer (the loader runs it once with BPF_PROG_TEST_RUN).
    pub const START_CLOCK: &str = "start_clock";
    /// A program that only counts frames: the benchmark's baseline.
    pub const BASELINE: &str = "count_frames";
    /// Counts the mirror copies the spreading's cpumap dropped (a BTF tracepoint).
    pub const SPREAD_DROPS: &str = "spread_drops";
    /// The same, dropping the frames: the sustained-rate benchmark's baseline.
    pub const BASELINE_DROP: &str = "count_frames_drop";
    /// Benchmark only: the observer without the flow cache (per-CPU LRU table lookups).
    pub const OBSERVE_UNCACHED: &str = "roce_observe_uncached";
    /// Benchmark only: the observer without the cache over one shared LRU table.
    pub const OBSERVE_SHARED: &str = "roce_observe_shared";
}

/// CPUs mirror copies can be spread over (the loader sizes the maps to the host's).
pub const MAX_SPREAD_CPUS: u32 = 1024;
/// The entry of the `SPREAD` array that holds the id of the `SPREAD_CPUS` cpumap, after the
/// CPUs: the drop counter counts that map's drops only (0: none yet).
pub const SPREAD_MAP_ID: u32 = MAX_SPREAD_CPUS + 1;
/// The entry of the `SPREAD` array that says the spreading program attached stamps no arrival
/// times (non-zero: `roce_spread_bare`): the CPUs it sends copies to take no latency sample,
/// which would be timed after their queue.
pub const SPREAD_UNTIMED: u32 = SPREAD_MAP_ID + 1;

/// The spread hash of a packet's two IP addresses, the same whichever is the source: the CPU a
/// spread mirror port sends its copy to (`SPREAD[1 + hash % n]`), so that both directions of a
/// connection, its copies from every mirror session and the two hosts' connection-manager
/// traffic meet on one CPU.
#[inline(always)]
pub fn spread_hash(a: &[u8; 16], b: &[u8; 16]) -> u32 {
    // Each address hashed alone, then added: the sum is the same either way round (a XOR of
    // the two would cancel what they share and give every pair of one subnet the same hash).
    let (ha, hb) = (address_hash(a), address_hash(b));
    ha.wrapping_add(hb).wrapping_mul(0x9E37_79B1) >> 16
}

/// Whether `roce_spread` stamps a copy with the time it arrived: a packet passive latency may
/// time (a request with AckReq or a READ, an answer), as [`latency::role`] says without the PSN
/// analysis's class. (The first request of a new incarnation without AckReq, which only the
/// analysis knows, is timed when it is accounted.)
#[inline(always)]
pub fn spread_stamped(p: &RocePacket) -> bool {
    latency::role(&SeqInput::of(p), SeqClass::InOrder).is_some()
}

/// A multiplicative hash of an address's four words.
#[inline(always)]
fn address_hash(x: &[u8; 16]) -> u32 {
    let mut h = 0u32;
    let mut i = 0;
    while i < 16 {
        h = (h ^ u32::from_ne_bytes([x[i], x[i + 1], x[i + 2], x[i + 3]]))
            .wrapping_mul(0x9E37_79B1);
        i += 4;
    }
    h ^ (h >> 15)
}

/// Default capacity of the flow table.
pub const DEFAULT_MAX_FLOWS: u32 = 16_384;
/// Capacity of the pause table (senders of PAUSE / PFC frames: switch ports and NICs).
pub const MAX_PAUSE_SENDERS: u32 = 1024;
/// Requester directions of connections whose latency the kernel follows (the least recent go).
pub const LAT_CONNS: u32 = 4096;
/// Latency histograms per interface, kind and side.
pub const LAT_SCOPE_ENTRIES: u32 = 256;
/// Flows whose messages the kernel follows (the least recent go).
pub const MSG_FLOWS: u32 = 8192;
/// Host pairs whose connection-manager traffic the kernel remembers (the least recent go).
pub const CM_PAIRS: u32 = 4096;

#[cfg(test)]
mod tests {
    use super::spread_hash;

    /// The spread hash is the same either way round and tells apart the pairs of one subnet
    /// (hosts .1 and .2 of ten /24s go to both of two CPUs).
    #[test]
    fn spread_hash_is_symmetric_and_spreads_one_subnets_pairs() {
        let v4 = |c: u8, d: u8| {
            let mut a = [0u8; 16];
            a[10] = 0xFF;
            a[11] = 0xFF;
            a[12..].copy_from_slice(&[198, 19, c, d]);
            a
        };
        let mut per_cpu = [0; 2];
        for c in 0..10 {
            let (a, b) = (v4(c, 1), v4(c, 2));
            assert_eq!(spread_hash(&a, &b), spread_hash(&b, &a));
            per_cpu[(spread_hash(&a, &b) % 2) as usize] += 1;
        }
        assert!(per_cpu.iter().all(|&n| n >= 3), "{per_cpu:?}");
    }
}
