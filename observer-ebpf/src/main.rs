//! Kernel side of roce-observer: an XDP program that parses every frame with the shared parser,
//! accounts RoCEv2 per flow and always returns XDP_PASS (host mode never drops or changes a
//! packet), and a TC egress program that does the same for transmitted frames (flow key marked
//! egress) and always passes on to the next program. No per-packet logging.
//!
//! Per flow, the hot path is a per-CPU direct-mapped cache (FLOW_CACHE, an array: the verifier
//! inlines its lookup) in front of the per-CPU LRU flow table (FLOWS): a packet whose flow holds
//! its slot costs no hash-table lookup; another flow taking the slot writes the old one back.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// The BPF target has no compare-and-swap, so core's atomic types have no fetch_add there; the
// intrinsic lowers to the BPF atomic add instruction.
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

#[cfg(target_arch = "bpf")]
mod kernel {
    use core::mem::size_of;

    use aya_ebpf::{
        bindings::{BPF_F_MMAPABLE, BPF_NOEXIST, TC_ACT_UNSPEC, bpf_timer, xdp_action},
        btf_maps,
        helpers::{
            bpf_get_smp_processor_id, bpf_ktime_get_ns,
            generated::{
                bpf_timer_init, bpf_timer_set_callback, bpf_timer_start, bpf_xdp_adjust_meta,
            },
        },
        macros::{btf_map, classifier, map, raw_tracepoint, xdp},
        maps::{Array, CpuMap, LruHashMap, LruPerCpuHashMap, PerCpuArray},
        programs::{RawTracePointContext, TcContext, XdpContext},
    };
    use observer_common::{
        BURST_IFACE_SLOTS, BURST_RING_SLOTS, BURST_SPAN_LOG, BurstIface, BurstSlot, BurstSpan,
        CM_PAIRS, Clock, ClockValue, Counters, DEFAULT_MAX_FLOWS, DIRECTION_EGRESS,
        FLOW_CACHE_SLOTS, FLOW_LOG_SLOTS, FlowKey, FlowSlot, FlowStats, HostPair,
        IFACE_COUNTER_SLOTS, IfaceCounters, LAT_CONNS, LAT_SCOPE_ENTRIES, LatHist, LatKey,
        LatLinkKey, LatPeers, LatScopeKey, LatState, MAX_PAUSE_SENDERS, MSG_FLOWS, Mirror, MsgKind,
        MsgStats, Pause, PauseKey, PauseStats, QP_CM, RocePacket, SPREAD_MAP_ID, SPREAD_UNTIMED,
        SeqClass, SeqInput, SkipReason, WIRE_OVERHEAD, burst_index,
        cm::{CmConn, CmKey, CmMad, mad_at, read_cm},
        latency::lat_bucket_index,
        latency::role,
        message::{is_boundary, kind_index, msg_bucket_index},
        parse::{Bytes, NO_PAUSE, Plain, read_pause},
        parse_frame,
        seq::{F_FRESH, MESSAGE_BITS},
        spread_hash, spread_stamped, union_mirror,
    };

    #[map(name = "FLOWS")]
    static FLOWS: LruPerCpuHashMap<FlowKey, FlowStats> =
        LruPerCpuHashMap::with_max_entries(DEFAULT_MAX_FLOWS, 0);

    #[map(name = "FLOW_CACHE")]
    static FLOW_CACHE: PerCpuArray<FlowSlot> = PerCpuArray::with_max_entries(FLOW_CACHE_SLOTS, 0);

    /// The keys written back to FLOWS, per CPU (a ring), and how many ever: the daemon's drain
    /// looks up just these instead of reading the whole table.
    #[map(name = "FLOW_LOG")]
    static FLOW_LOG: PerCpuArray<FlowKey> = PerCpuArray::with_max_entries(FLOW_LOG_SLOTS, 0);

    #[map(name = "FLOW_LOG_HEAD")]
    static FLOW_LOG_HEAD: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

    #[map(name = "COUNTERS")]
    static COUNTERS: PerCpuArray<Counters> = PerCpuArray::with_max_entries(1, 0);

    /// The programs' clock and the timer that ticks it (a BTF map: the verifier finds the
    /// timer through the value's BTF).
    #[btf_map]
    static CLOCK: btf_maps::Array<ClockEntry, 1> = btf_maps::Array::new();

    /// The value of `CLOCK`.
    #[repr(C)]
    struct ClockEntry {
        clock: Clock,
        timer: bpf_timer,
    }
    const _: () = assert!(size_of::<ClockEntry>() == size_of::<ClockValue>());

    /// Benchmark only: the same table as one shared (not per-CPU) LRU hash, used by
    /// `roce_observe_shared` to measure the map-type trade-off.
    #[map(name = "FLOWS_SHARED")]
    static FLOWS_SHARED: LruHashMap<FlowKey, FlowStats> =
        LruHashMap::with_max_entries(DEFAULT_MAX_FLOWS, 0);

    /// A zeroed FlowStats that is never written: what uncached variants insert new flows with
    /// (the 512-byte BPF stack has no room for one).
    #[map(name = "ZERO_STATS")]
    static ZERO_STATS: PerCpuArray<FlowStats> = PerCpuArray::with_max_entries(1, 0);

    /// PAUSE / PFC frames per sender (source MAC, mirror session) and priority.
    #[map(name = "PAUSES")]
    static PAUSES: LruPerCpuHashMap<PauseKey, PauseStats> =
        LruPerCpuHashMap::with_max_entries(MAX_PAUSE_SENDERS, 0);

    /// A zeroed PauseStats that is never written: new pause senders are inserted from it.
    #[map(name = "ZERO_PAUSE")]
    static ZERO_PAUSE: PerCpuArray<PauseStats> = PerCpuArray::with_max_entries(1, 0);

    /// Microburst slot rings (per CPU, two per observed interface: ingress, egress), mapped into
    /// the reader's memory. The loader sizes it to the CPUs and the interfaces observed.
    #[map(name = "BURSTS")]
    static BURSTS: Array<BurstSlot> = Array::with_max_entries(2 * BURST_RING_SLOTS, BPF_F_MMAPABLE);

    /// The slots the clock's tick stood at for longer than a slot (`BurstSpan`, a log written
    /// by `set_tick`), mapped into the reader's memory.
    #[map(name = "BURST_SPANS")]
    static BURST_SPANS: Array<BurstSpan> = Array::with_max_entries(BURST_SPAN_LOG, BPF_F_MMAPABLE);

    /// The observed interfaces and their rings, at ifindex % BURST_IFACE_SLOTS (an array: the
    /// verifier inlines its lookup); frames of other interfaces keep no slots.
    #[map(name = "BURST_IFACES")]
    static BURST_IFACES: Array<BurstIface> = Array::with_max_entries(BURST_IFACE_SLOTS, 0);

    /// Per observed interface and direction (indexed like the rings): every frame, and the
    /// RoCEv2 packets by ECN codepoint and operation class.
    #[map(name = "IFACE_COUNTERS")]
    static IFACE_COUNTERS: PerCpuArray<IfaceCounters> =
        PerCpuArray::with_max_entries(IFACE_COUNTER_SLOTS, 0);

    /// One `SeqInput` per CPU: the PSN analysis's input goes through it (see `account_flow`).
    #[map(name = "SEQ_INPUT")]
    static SEQ_INPUT: PerCpuArray<SeqInput> = PerCpuArray::with_max_entries(1, 0);

    /// When connection-manager traffic (MADs to QP 1) between two hosts was last seen, on the
    /// PSN analysis's clock: a PSN jump after it is a new incarnation of the QP number.
    #[map(name = "CM_SEEN")]
    static CM_SEEN: LruHashMap<HostPair, u64> = LruHashMap::with_max_entries(CM_PAIRS, 0);

    /// What the connection manager's REQ and REP said of each connection (one shared value per
    /// connection; a REQ and its REP are far apart in time).
    #[map(name = "CM_CONNS")]
    static CM_CONNS: LruHashMap<CmKey, CmConn> = LruHashMap::with_max_entries(CM_PAIRS, 0);

    /// A zeroed CmConn that is never written.
    #[map(name = "ZERO_CM")]
    static ZERO_CM: PerCpuArray<CmConn> = PerCpuArray::with_max_entries(1, 0);

    /// One `CmKey` per CPU, for the lookups in `CM_CONNS`.
    #[map(name = "CM_CONN_KEY")]
    static CM_CONN_KEY: PerCpuArray<CmKey> = PerCpuArray::with_max_entries(1, 0);

    /// One `HostPair` per CPU, for the lookups in `CM_SEEN` (no room on the stack).
    #[map(name = "CM_KEY")]
    static CM_KEY: PerCpuArray<HostPair> = PerCpuArray::with_max_entries(1, 0);

    /// One `FlowKey` per CPU: the packet's flow key lives here, not on the 512-byte stack the
    /// parser nearly fills.
    #[map(name = "FLOW_KEY")]
    static FLOW_KEY: PerCpuArray<FlowKey> = PerCpuArray::with_max_entries(1, 0);

    /// Passive latency per requester direction of a connection: one value shared by the CPUs
    /// (a request and its answer may be handled on different ones); each timed request is one
    /// word, published by one store; histogram counts are added atomically.
    #[map(name = "LAT")]
    static LAT: LruHashMap<LatKey, LatState> = LruHashMap::with_max_entries(LAT_CONNS, 0);

    /// Per pair of hosts, the requester directions not answered yet: how answers on a port of
    /// their own find their requests' `LAT` entry (one shared value, one word per direction).
    #[map(name = "LAT_PEERS")]
    static LAT_PEERS: LruHashMap<LatKey, LatPeers> = LruHashMap::with_max_entries(LAT_CONNS, 0);

    /// A zeroed LatPeers that is never written.
    #[map(name = "ZERO_PEERS")]
    static ZERO_PEERS: PerCpuArray<LatPeers> = PerCpuArray::with_max_entries(1, 0);

    /// The requests' port of answers that found theirs through `LAT_PEERS`.
    #[map(name = "LAT_LINKS")]
    static LAT_LINKS: LruHashMap<LatLinkKey, u16> = LruHashMap::with_max_entries(LAT_CONNS, 0);

    /// A zeroed LatState that is never written: new latency entries are inserted from it.
    #[map(name = "ZERO_LAT")]
    static ZERO_LAT: PerCpuArray<LatState> = PerCpuArray::with_max_entries(1, 0);

    /// One `LatArgs` per CPU: what `account_latency` is told besides the packet.
    #[map(name = "LAT_ARGS")]
    static LAT_ARGS: PerCpuArray<LatArgs> = PerCpuArray::with_max_entries(1, 0);

    /// The arguments of `account_latency`, passed through a map.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct LatArgs {
        /// What `account_flow` tells, in one store.
        head: LatHead,
        /// The key of the per-interface histogram (map memory: no room on the stack).
        scope: LatScopeKey,
        /// The key of an answer's link to its requests' port (map memory too).
        link: LatLinkKey,
    }

    #[repr(C)]
    #[derive(Clone, Copy)]
    struct LatHead {
        ifindex: u32,
        class: u8,
        /// Set by `account_flow` for the packet being handled, cleared by `after_accounting`.
        pending: u8,
        /// The PSN analysis's flags the message update reads (`MESSAGE_BITS`), shifted down.
        analysis: u8,
        _pad: u8,
    }

    /// One `LatKey` per CPU, for the lookups in `LAT` (no room on the stack).
    #[map(name = "LAT_KEY")]
    static LAT_KEY: PerCpuArray<LatKey> = PerCpuArray::with_max_entries(1, 0);

    /// Latency histograms per interface, kind and side.
    #[map(name = "LAT_SCOPES")]
    static LAT_SCOPES: LruPerCpuHashMap<LatScopeKey, LatHist> =
        LruPerCpuHashMap::with_max_entries(LAT_SCOPE_ENTRIES, 0);

    /// Messages per flow, in its analysis entry (a mirror copy's: every session's together):
    /// one value shared by the CPUs, counts added atomically (see `account_message`). Which
    /// packets are new comes from the per-CPU PSN analysis: like it, exact while a flow stays on
    /// one CPU (docs/mirroring.md).
    #[map(name = "MSGS")]
    static MSGS: LruHashMap<FlowKey, MsgStats> = LruHashMap::with_max_entries(MSG_FLOWS, 0);

    /// A zeroed MsgStats that is never written: new message entries are inserted from it.
    #[map(name = "ZERO_MSG")]
    static ZERO_MSG: PerCpuArray<MsgStats> = PerCpuArray::with_max_entries(1, 0);

    /// Mirror mode spread over CPUs: per CPU, its queue of frames and the observer that runs
    /// there (set by the loader; the key is the CPU number). The loader sizes it to the host's
    /// CPUs: the kernel refuses more entries than it was built for.
    #[map(name = "SPREAD_CPUS")]
    static SPREAD_CPUS: CpuMap = CpuMap::with_max_entries(1, 0);

    /// The CPUs frames are spread over: entry 0 holds their number n, entries 1 to n the CPUs;
    /// entry `SPREAD_MAP_ID` the id of SPREAD_CPUS (whose drops `spread_drops` counts), entry
    /// `SPREAD_UNTIMED` whether the spreading program stamps no arrival times.
    #[map(name = "SPREAD")]
    static SPREAD: Array<u32> = Array::with_max_entries(SPREAD_UNTIMED + 1, 0);

    #[map(name = "BASELINE")]
    static BASELINE: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

    /// XDP context memory, read through the same trait as `&[u8]` in userspace.
    struct Packet {
        start: usize,
        end: usize,
    }

    impl Bytes for Packet {
        #[inline(always)]
        fn load<T: Plain>(&self, off: usize) -> Option<T> {
            let at = self.start + off;
            if at + size_of::<T>() > self.end {
                return None;
            }
            // SAFETY: bounds checked against data_end just above; T is Plain.
            Some(unsafe { core::ptr::read_unaligned(at as *const T) })
        }
    }

    /// CLOCK_MONOTONIC ns of the clock's latest tick (see `Clock`): one load.
    #[inline(always)]
    fn now_ns() -> u64 {
        match CLOCK.get_ptr(0) {
            // SAFETY: a live array value, written by the timer with plain stores.
            Some(c) => unsafe { core::ptr::read_volatile(&(*c).clock.now_ns) },
            None => 0,
        }
    }

    /// CLOCK_MONOTONIC, for `bpf_timer_init`.
    const CLOCK_MONOTONIC: u64 = 1;
    /// `bpf_timer_start`: the time is absolute (kernel 6.7 and later).
    const BPF_F_TIMER_ABS: u64 = 1;
    const EBUSY: i64 = 16;
    /// `start_clock`'s result when `bpf_timer_init` fails: this plus its errno.
    const INIT_FAILED: u32 = 1000;

    /// The clock's tick: publishes the tick's time and slot, arms the timer for the next.
    /// (A timer callback: the kernel calls it with the map, the key and the value.)
    #[inline(never)]
    extern "C" fn tick(_map: *mut core::ffi::c_void, _key: *mut u32, e: *mut ClockEntry) -> i32 {
        // SAFETY: the kernel passes this map's live value.
        let e = unsafe { &mut *e };
        let now = unsafe { bpf_ktime_get_ns() };
        let period = e.clock.period_ns;
        if period == 0 {
            return 0;
        }
        let at = now - now % period;
        // Late against the tick it was armed for (the one after the last published), however
        // many ticks it missed meanwhile.
        let due = e.clock.now_ns + period;
        set_tick(&mut e.clock, at, period);
        let late = now.saturating_sub(due);
        e.clock.ticks += 1;
        e.clock.late_sum_ns += late;
        if late > e.clock.late_max_ns {
            e.clock.late_max_ns = late;
        }
        // SAFETY: the timer of this value, initialized by `start_clock`.
        unsafe {
            if e.clock.absolute != 0 {
                bpf_timer_start(&mut e.timer, at + period, BPF_F_TIMER_ABS);
            } else {
                bpf_timer_start(&mut e.timer, at + period - now, 0);
            }
        }
        0
    }

    /// Publishes a tick: its slot first, then its time (frames read either alone). A tick the
    /// clock leaves for one more than a slot on (the timer missed a tick: it ran late) is
    /// logged in `BURST_SPANS` first, and counted: its slot holds the frames of that longer
    /// time. (Only a tick of the same period: a restart at another one numbers its slots
    /// afresh.)
    #[inline(always)]
    fn set_tick(c: &mut Clock, at: u64, period: u64) {
        let tick = at / period;
        // SAFETY: fields of live map values; BURST_SPANS and `spans` are written by the clock
        // alone.
        unsafe {
            let prev = core::ptr::read_volatile(&c.tick);
            if prev > 0
                && tick > prev + 1
                && prev.wrapping_mul(period) == core::ptr::read_volatile(&c.now_ns)
            {
                let n = core::ptr::read_volatile(&c.spans);
                if let Some(s) = BURST_SPANS.get_ptr_mut(n as u32 & (BURST_SPAN_LOG - 1)) {
                    core::ptr::write_volatile(&mut (*s).slot, prev);
                    core::ptr::write_volatile(&mut (*s).end, tick);
                    core::ptr::write_volatile(&mut c.spans, n + 1);
                }
            }
            core::ptr::write_volatile(&mut c.tick, tick);
            core::ptr::write_volatile(&mut c.now_ns, at);
        }
    }

    /// Starts the clock's timer at the period the loader wrote into `CLOCK` (it runs this
    /// program once with BPF_PROG_TEST_RUN). XDP_PASS when it runs; otherwise the step that
    /// failed: 10 no period, 12 callback, 13 start, or `INIT_FAILED` + the errno of the init.
    #[xdp]
    pub fn start_clock(_ctx: XdpContext) -> u32 {
        let Some(e) = CLOCK.get_ptr_mut(0) else {
            return 10;
        };
        // SAFETY: the live array value.
        let e = unsafe { &mut *e };
        let period = e.clock.period_ns;
        if period == 0 {
            return 10;
        }
        let now = unsafe { bpf_ktime_get_ns() };
        let at = now - now % period;
        set_tick(&mut e.clock, at, period);
        // SAFETY: the timer of this value and this map; `tick` is a timer callback.
        unsafe {
            let r = bpf_timer_init(
                &mut e.timer,
                &CLOCK as *const _ as *mut core::ffi::c_void,
                CLOCK_MONOTONIC,
            );
            // Started before (a restart with another period): keep its timer.
            if r != 0 && r != -EBUSY {
                return INIT_FAILED + (-r) as u32;
            }
            if bpf_timer_set_callback(&mut e.timer, tick as *mut core::ffi::c_void) != 0 {
                return 12;
            }
            e.clock.absolute = 1;
            if bpf_timer_start(&mut e.timer, at + period, BPF_F_TIMER_ABS) != 0 {
                e.clock.absolute = 0;
                if bpf_timer_start(&mut e.timer, at + period - now, 0) != 0 {
                    return 13;
                }
            }
        }
        xdp_action::XDP_PASS
    }

    /// Parses the frame and records the result in COUNTERS (and a PAUSE / PFC frame in PAUSES,
    /// marked egress when `$egress`); the RoCE packet and the counters if it is one, and whether
    /// the frame is a copy (a mirror copy, a RoCE packet, a PAUSE / PFC frame).
    macro_rules! parse_and_count {
        ($ctx:expr, $egress:expr) => {{
            let pkt = Packet {
                start: $ctx.data(),
                end: $ctx.data_end(),
            };
            let parsed = parse_frame(&pkt);
            // PAUSE / PFC frames seen by XDP are copies too: a NIC consumes the real ones.
            let copy =
                parsed.mirror.is_some() || parsed.result.is_ok() || parsed.pause_at != NO_PAUSE;
            let roce = match COUNTERS.get_ptr_mut(0) {
                Some(counters) => {
                    // SAFETY: a per-CPU map value; XDP runs with preemption off on this CPU.
                    let counters = unsafe { &mut *counters };
                    counters.record(&parsed.result);
                    counters.record_mirror(&parsed.mirror);
                    match parsed.result {
                        Ok(p) => Some((p, counters)),
                        // Off the RoCE path: a PAUSE / PFC frame is never RoCE.
                        Err(_) => {
                            if parsed.pause_at != NO_PAUSE {
                                record_pause(
                                    &read_pause(&pkt, parsed.pause_at as usize),
                                    &parsed.mirror,
                                    $egress,
                                    counters,
                                );
                            }
                            None
                        }
                    }
                }
                None => None,
            };
            (roce, copy)
        }};
    }

    /// Accounts a PAUSE / PFC frame in the pause table (not the hot path: a hash lookup).
    #[inline(always)]
    #[allow(
        clippy::needless_borrows_for_generic_args,
        reason = "by value would copy the zero stats onto the 512-byte BPF stack"
    )]
    fn record_pause(pause: &Pause, mirror: &Option<Mirror>, egress: bool, counters: &mut Counters) {
        if pause.opcode == 0 {
            return;
        }
        let mut key = PauseKey::of(pause, mirror);
        if egress {
            key.mirror |= DIRECTION_EGRESS;
        }
        let stats = match PAUSES.get_ptr_mut(key) {
            Some(s) => Some(s),
            None => match ZERO_PAUSE.get_ptr(0) {
                Some(zero) => {
                    // SAFETY: ZERO_PAUSE is never written. EEXIST (another CPU) is fine.
                    let _ = PAUSES.insert(key, unsafe { &*zero }, BPF_NOEXIST as u64);
                    PAUSES.get_ptr_mut(key)
                }
                None => None,
            },
        };
        match stats {
            // SAFETY: a live map value of this CPU.
            Some(s) => unsafe { (*s).record(pause, now_ns()) },
            None => counters.pause_insert_failures += 1,
        }
    }

    /// The observed interface `ifindex` is (its entry in BURST_IFACES), if it is one.
    #[inline(always)]
    fn observed(ifindex: u32) -> Option<&'static BurstIface> {
        match BURST_IFACES.get(ifindex % BURST_IFACE_SLOTS) {
            Some(iface) if iface.ifindex == ifindex => Some(iface),
            _ => None,
        }
    }

    /// Adds a frame of `len` bytes to this CPU's microburst slot of its interface, direction and
    /// tick (plain stores: no other CPU writes this CPU's ring; the reader reads complete slots).
    #[inline(always)]
    fn account_burst(iface: &BurstIface, ring: u32, len: u32) {
        if iface.rings == 0 {
            return;
        }
        let Some(c) = CLOCK.get_ptr(0) else {
            return;
        };
        // SAFETY: a live array value.
        let slot = unsafe { core::ptr::read_volatile(&(*c).clock.tick) };
        let cpu = unsafe { bpf_get_smp_processor_id() };
        if let Some(s) = BURSTS.get_ptr_mut(burst_index(cpu, iface.rings, ring, slot)) {
            let bytes = u64::from(len + WIRE_OVERHEAD);
            // SAFETY: this CPU's cell of a live array value.
            unsafe {
                if (*s).slot != slot {
                    (*s).slot = slot;
                    (*s).bytes = bytes;
                } else {
                    (*s).bytes += bytes;
                }
            }
        }
    }

    /// `account!`'s result: the frame is a copy (decapsulated from GRE/ERSPAN, a RoCE packet, a
    /// PAUSE / PFC frame), which `--consume` drops.
    const COPY: u32 = 1;
    /// `account!`'s result: the frame is a RoCE packet, which `after_accounting` may have work
    /// for.
    const ROCE: u32 = 2;

    /// Accounts the frame in the interface's counters and microburst slot, the counters, the
    /// flow cache and the flow table; what it was (`COPY`, `ROCE`). `egress`: a transmitted
    /// frame (TC).
    macro_rules! account {
        ($ctx:expr, $egress:expr, $ifindex:expr, $len:expr) => {{
            let iface = match observed($ifindex) {
                Some(iface) => {
                    let ring = iface.ring + $egress as u32;
                    account_burst(iface, ring, $len);
                    IFACE_COUNTERS.get_ptr_mut(ring)
                }
                None => None,
            };
            if let Some(c) = iface {
                // SAFETY: this CPU's value.
                unsafe { (*c).frame($len) };
            }
            let (roce, copy) = parse_and_count!($ctx, $egress);
            let done = if copy { COPY } else { 0 } | if roce.is_some() { ROCE } else { 0 };
            if let Some((p, counters)) = roce {
                if let Some(c) = iface {
                    // SAFETY: this CPU's value.
                    unsafe { (*c).roce(&p) };
                }
                if let Some(key) = FLOW_KEY.get_ptr_mut(0) {
                    // SAFETY: this CPU's value.
                    let key = unsafe { &mut *key };
                    *key = FlowKey::of(&p);
                    if $egress {
                        key.mirror |= DIRECTION_EGRESS;
                    }
                    account_flow(&p, key, counters, $ifindex);
                }
            }
            done
        }};
    }

    /// After the accounting of a RoCE packet to QP 1 (a MAD; its key is in `FLOW_KEY`): what a
    /// connection manager's REQ or REP says. Functions of their own, called by the programs
    /// after the accounting returned (as the latency update is): in the parser's paths the
    /// verifier could not walk them.
    /// (The context's fields are read with volatile loads: plain ones LLVM moves into the
    /// caller and passes as arguments, widened by shifts the verifier refuses on packet
    /// pointers.)
    #[inline(never)]
    fn account_cm_xdp(ctx: XdpContext) {
        // SAFETY: reading fields of the program's context.
        let (start, end) = unsafe {
            (
                core::ptr::read_volatile(&(*ctx.ctx).data) as usize,
                core::ptr::read_volatile(&(*ctx.ctx).data_end) as usize,
            )
        };
        account_cm_of(&Packet { start, end });
    }

    #[inline(never)]
    fn account_cm_tc(ctx: TcContext) {
        // SAFETY: reading fields of the program's context.
        let (start, end) = unsafe {
            (
                core::ptr::read_volatile(&(*ctx.skb.skb).data) as usize,
                core::ptr::read_volatile(&(*ctx.skb.skb).data_end) as usize,
            )
        };
        account_cm_of(&Packet { start, end });
    }

    #[inline(always)]
    fn account_cm_of(pkt: &Packet) {
        let Some(key) = FLOW_KEY.get_ptr(0) else {
            return;
        };
        // SAFETY: this CPU's value: the key of the RoCE packet just accounted.
        let key = unsafe { &*key };
        if key.dest_qp != QP_CM {
            return;
        }
        account_cm(&read_cm(pkt, mad_at(pkt.end - pkt.start)), key);
    }

    /// Takes in a REQ or REP of the connection manager (`m`, sent in flow `key`).
    #[inline(always)]
    fn account_cm(m: &CmMad, key: &FlowKey) {
        let Some(ck) = CM_CONN_KEY.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: this CPU's value.
        let ck = unsafe { &mut *ck };
        if !ck.set(m, key) {
            return;
        }
        if let Some(conn) = shared_entry(&CM_CONNS, &*ck, &ZERO_CM) {
            conn.record(m);
        }
    }

    /// Accounts a RoCE packet in the flow cache (and the flow table behind it).
    #[inline(always)]
    fn account_flow(p: &RocePacket, key: &mut FlowKey, counters: &mut Counters, ifindex: u32) {
        // The analysis's input through a map: loaded back, it carries none of the ranges the
        // parser's paths gave it, and the verifier merges those paths there. Stored first, it
        // takes no stack meanwhile.
        let Some(scratch) = SEQ_INPUT.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: this CPU's value.
        unsafe { (*scratch).set(p) };
        let now = now_ns();
        let Some(slot) = cached(key, counters) else {
            return;
        };
        slot.stats.count(p, now);
        let mut stats = &mut slot.stats;
        // A mirror copy is counted in its session's flow and analysed with the copies of
        // every session of its flow (a QP sprayed over mirrored links is whole only there), in
        // that flow's own cache slot, under the key changed in place.
        if key.is_copy() {
            key.mirror = union_mirror(key.mirror);
            let Some(u) = cached(key, counters) else {
                return;
            };
            u.stats.seen(p, now);
            stats = &mut u.stats;
        }
        // SAFETY: this CPU's value.
        let input = unsafe { core::ptr::read_volatile(scratch) };
        if key.dest_qp == QP_CM {
            if let Some(pair) = host_pair(key) {
                let _ = CM_SEEN.insert(pair, &now, 0);
            }
        }
        // Connection-manager traffic in the tick of the flow's last request counts as after it:
        // the clock cannot order them, and a jump after a connection set up again is a new
        // incarnation, not loss, unless the clock rules it out.
        let class = stats.seq().packet(&input, now, |t| {
            // SAFETY: a live map value, read once.
            host_pair(key)
                .and_then(|pair| unsafe { CM_SEEN.get(pair) })
                .is_some_and(|c| *c >= t)
        });
        // The latency update runs after the accounting returns, its inputs passed through a
        // map; nothing here branches on them (the verifier merges the analysis's paths once it
        // returns, and could not walk their product with the latency update's).
        if let Some(args) = LAT_ARGS.get_ptr_mut(0) {
            // SAFETY: this CPU's value.
            unsafe {
                core::ptr::write_volatile(
                    &raw mut (*args).head,
                    LatHead {
                        ifindex,
                        class: class as u8,
                        pending: 1,
                        analysis: ((stats.seq_track.flags & MESSAGE_BITS) / F_FRESH) as u8,
                        _pad: 0,
                    },
                );
            }
        }
    }

    /// An arrival time that says: take no latency sample (the packet's own time is not known).
    const UNTIMED: u64 = u64::MAX;

    /// The updates that follow the accounting of a RoCE packet (`account_flow` marks it
    /// pending): the latency of a request or answer, the messages of a message boundary. Each
    /// is a function of its own whose inputs come from maps; clears the pending mark. `done`:
    /// what `account!` returned (a frame that is not RoCE pays a test of it; a RoCE packet
    /// without the mark, a load and a test). Inlined into the programs, after the accounting
    /// returned: its map lookups' keys take a slot of the program's own small frame, not of
    /// the accounting's, which nearly fills the 512 bytes (a call of its own cost a RoCE packet
    /// 6-7 ns). `arrival_ns`: when the packet arrived (a spreading CPU's stamp), 0 for now,
    /// or [`UNTIMED`].
    #[inline(always)]
    fn after_accounting(done: u32, arrival_ns: u64) {
        if done & ROCE == 0 {
            return;
        }
        let Some(args) = LAT_ARGS.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: this CPU's value.
        if unsafe { (*args).head.pending } == 0 {
            return;
        }
        let Some(input) = SEQ_INPUT.get_ptr(0) else {
            return;
        };
        // SAFETY: this CPU's values.
        let (latency, message) = unsafe {
            (*args).head.pending = 0;
            (
                role(&*input, SeqClass::of((*args).head.class)),
                is_boundary(&*input),
            )
        };
        if let Some(answer) = latency
            && arrival_ns != UNTIMED
        {
            account_latency(answer, arrival_ns);
        }
        if message {
            account_message();
        }
    }

    /// The message update (`MsgStats`), as replay makes it, for the boundary packet
    /// `account_flow` just handled (in its analysis entry, the key `account_flow` left).
    #[inline(never)]
    fn account_message() {
        let (Some(args), Some(key), Some(input)) = (
            LAT_ARGS.get_ptr(0),
            FLOW_KEY.get_ptr(0),
            SEQ_INPUT.get_ptr(0),
        ) else {
            return;
        };
        // SAFETY: this CPU's values.
        let (analysis, key, input) =
            unsafe { (u32::from((*args).head.analysis) * F_FRESH, &*key, &*input) };
        if analysis & F_FRESH == 0 {
            return;
        }
        let Some(stats) = shared_entry(&MSGS, key, &ZERO_MSG) else {
            return;
        };
        if let Some((kind, size)) = stats.packet(input, analysis) {
            record_message_shared(stats, kind, size);
        }
    }

    /// The value of `key` in the shared LRU `map` (one value for every CPU: see `LAT`, `MSGS`),
    /// inserted from `zero`, a value never written, when missing.
    #[inline(always)]
    fn shared_entry<K, V>(
        map: &LruHashMap<K, V>,
        key: &K,
        zero: &PerCpuArray<V>,
    ) -> Option<&'static mut V> {
        let p = match map.get_ptr_mut(key) {
            Some(p) => p,
            None => {
                let zero = zero.get_ptr(0)?;
                // SAFETY: `zero` is never written. EEXIST (another CPU inserted it) is fine.
                let _ = map.insert(key, unsafe { &*zero }, BPF_NOEXIST as u64);
                map.get_ptr_mut(key)?
            }
        };
        // SAFETY: a live map value, shared by the CPUs (its users say how they write it).
        Some(unsafe { &mut *p })
    }

    /// `MsgStats::record` on a value several CPUs write: counts added atomically, the extremes
    /// by plain stores (a race may keep a slightly less extreme value).
    #[inline(always)]
    fn record_message_shared(s: &mut MsgStats, kind: MsgKind, size: Option<u64>) {
        // SAFETY: fields of a live map value; atomic adds.
        unsafe {
            let Some(size) = size else {
                add(&raw mut s.unknown_size, 1);
                return;
            };
            let none = core::ptr::read_volatile(&s.count[0]) == 0
                && core::ptr::read_volatile(&s.count[1]) == 0
                && core::ptr::read_volatile(&s.count[2]) == 0;
            if none || size < core::ptr::read_volatile(&s.min) {
                core::ptr::write_volatile(&mut s.min, size);
            }
            if size > core::ptr::read_volatile(&s.max) {
                core::ptr::write_volatile(&mut s.max, size);
            }
            let k = kind_index(kind);
            add(&raw mut s.count[k], 1);
            add(&raw mut s.bytes[k], size);
            add(&raw mut s.buckets[msg_bucket_index(size)], 1);
        }
    }

    /// The latency update of a request or answer (`LatState`), as replay makes it, for the
    /// packet `account_flow` just handled. A function of its own, called by the programs after
    /// the accounting returned, whose inputs come from maps (the packet's key, its analysis
    /// input, `LatArgs`): the verifier then meets it in a few states, not in one per path of
    /// the parser and the PSN analysis, whose product it could not walk; and its stack frame
    /// does not add to the accounting's, which nearly fills the 512 bytes calls share.
    #[inline(never)]
    fn account_latency(answer: bool, arrival_ns: u64) {
        let (Some(args), Some(key), Some(input)) = (
            LAT_ARGS.get_ptr_mut(0),
            FLOW_KEY.get_ptr(0),
            SEQ_INPUT.get_ptr(0),
        ) else {
            return;
        };
        // SAFETY: this CPU's values.
        let (args, key, input) = unsafe { (&mut *args, &*key, &*input) };
        // Latency wants the time of this packet itself, finer than a tick: when it arrived,
        // if a spreading CPU stamped it (before its queue), or now.
        let now = if arrival_ns != 0 {
            arrival_ns
        } else {
            unsafe { bpf_ktime_get_ns() }
        };
        let ifindex = args.head.ifindex;
        let class = SeqClass::of(args.head.class);
        let Some(lk) = LAT_KEY.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: this CPU's value.
        let lk = unsafe { &mut *lk };
        lk.set(key, answer);
        if !answer {
            let Some(state) = shared_entry(&LAT, &*lk, &ZERO_LAT) else {
                return;
            };
            state.note_direction(key);
            state.request(input, key.dest_qp, class, key.is_union(), now);
            // SAFETY: a live map value; the answers' CPU writes `answered`.
            if unsafe { core::ptr::read_volatile(&state.answered) } == 0 {
                let port = lk.udp_src_port;
                lk.udp_src_port = 0;
                if let Some(peers) = shared_entry(&LAT_PEERS, &*lk, &ZERO_PEERS) {
                    peers.note(port, input.psn, now);
                }
            }
            return;
        }
        // SAFETY: a live map value (shared: see LAT).
        let own = LAT
            .get_ptr_mut(&*lk)
            .filter(|state| unsafe { (**state).fits(input.psn) });
        let state = match own {
            Some(state) => state,
            None => {
                // No requests under the answers' port that it can answer: the directions use
                // ports of their own (another connection's requests may use this answer port).
                // The link found before, while its requests can be the ones answered; else the
                // only unanswered direction the answer fits, linked from now on.
                let link = &mut args.link;
                link.set(lk, key);
                // SAFETY: a live map value.
                let mut port = match LAT_LINKS.get_ptr(&*link) {
                    Some(port) => unsafe { core::ptr::read_volatile(port) },
                    None => 0,
                };
                if port != 0 {
                    lk.udp_src_port = port;
                    // SAFETY: a live map value (shared: see LAT).
                    let fits = LAT
                        .get_ptr(&*lk)
                        .is_some_and(|state| unsafe { (*state).fits(input.psn) });
                    if !fits {
                        port = 0;
                    }
                }
                if port == 0 {
                    lk.udp_src_port = 0;
                    let Some(peers) = LAT_PEERS.get_ptr_mut(&*lk) else {
                        return;
                    };
                    // SAFETY: a live map value (shared: one word per direction).
                    let peers = unsafe { &mut *peers };
                    let Some(found) = peers.fit(input.psn, now) else {
                        return;
                    };
                    peers.forget(found);
                    let _ = LAT_LINKS.insert(&*link, &found, 0);
                    port = found;
                }
                lk.udp_src_port = port;
                match LAT.get_ptr_mut(&*lk) {
                    Some(state) => state,
                    None => return,
                }
            }
        };
        // SAFETY: a live map value (shared: see LAT).
        let state = unsafe { &mut *state };
        if state.answered == 0 {
            state.answered = 1;
            // Answered: its requests leave the unanswered ones (those of a link are gone).
            let port = lk.udp_src_port;
            lk.udp_src_port = 0;
            if let Some(peers) = LAT_PEERS.get_ptr_mut(&*lk) {
                // SAFETY: a live map value (shared: one word per direction).
                unsafe { (*peers).forget(port) };
            }
            lk.udp_src_port = port;
        }
        let Some((kind, ns)) = state.answer(input, now) else {
            return;
        };
        record_shared(&mut state.hist[(kind as usize) & 1], ns);
        args.scope = LatScopeKey {
            ifindex,
            kind: kind as u8,
            side: state.side(lk) as u8,
            _pad: 0,
        };
        let scope = &args.scope;
        let hist = match LAT_SCOPES.get_ptr_mut(scope) {
            Some(h) => h,
            None => {
                let Some(zero) = ZERO_LAT.get_ptr(0) else {
                    return;
                };
                // SAFETY: ZERO_LAT is never written.
                let _ = LAT_SCOPES.insert(scope, unsafe { &(*zero).hist[0] }, BPF_NOEXIST as u64);
                match LAT_SCOPES.get_ptr_mut(scope) {
                    Some(h) => h,
                    None => return,
                }
            }
        };
        // SAFETY: this CPU's value.
        unsafe { (*hist).record(ns) };
    }

    /// `LatHist::record` on a value several CPUs write: counts added atomically, the extremes
    /// by plain stores (a race may keep a slightly less extreme value).
    #[inline(always)]
    fn record_shared(h: &mut LatHist, ns: u64) {
        let i = lat_bucket_index(ns);
        // SAFETY: fields of a live map value; atomic adds.
        unsafe {
            if core::ptr::read_volatile(&h.count) == 0 || ns < core::ptr::read_volatile(&h.min_ns) {
                core::ptr::write_volatile(&mut h.min_ns, ns);
            }
            if ns > core::ptr::read_volatile(&h.max_ns) {
                core::ptr::write_volatile(&mut h.max_ns, ns);
            }
            add(&raw mut h.count, 1);
            add(&raw mut h.sum_ns, ns);
            add(&raw mut h.buckets[i], 1);
        }
    }

    /// An atomic add (the BPF atomic add instruction).
    #[inline(always)]
    unsafe fn add(p: *mut u64, v: u64) {
        // SAFETY: the caller's pointer is into a live map value.
        unsafe {
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                p, v,
            );
        }
    }

    /// The hosts of `key`, in this CPU's `CM_KEY`.
    #[inline(always)]
    fn host_pair(key: &FlowKey) -> Option<&'static HostPair> {
        let pair = CM_KEY.get_ptr_mut(0)?;
        // SAFETY: this CPU's value.
        unsafe {
            (*pair).set(key);
            Some(&*pair)
        }
    }

    /// This CPU's cache slot of `key`, taken over (its old flow written back) when another
    /// flow held it.
    #[inline(always)]
    fn cached(key: &FlowKey, counters: &mut Counters) -> Option<&'static mut FlowSlot> {
        let slot = FLOW_CACHE.get_ptr_mut(key.slot())?;
        // SAFETY: this CPU's slot.
        let slot = unsafe { &mut *slot };
        if slot.stats.packets == 0 || slot.key != *key {
            take_slot(slot, key, counters);
        }
        Some(slot)
    }

    #[inline(always)]
    fn xdp_ifindex(ctx: &XdpContext) -> u32 {
        ctx.ingress_ifindex() as u32
    }

    /// The frame's length (the linear part: multi-buffer frames count their first buffer).
    #[inline(always)]
    fn xdp_len(ctx: &XdpContext) -> u32 {
        (ctx.data_end() - ctx.data()) as u32
    }

    /// Host and mirror mode: account, then pass every frame on unchanged.
    #[xdp]
    pub fn roce_observe(ctx: XdpContext) -> u32 {
        let raw = ctx.ctx;
        let done = observe_xdp(ctx);
        after_accounting(done, 0);
        if done & ROCE != 0 {
            account_cm_xdp(XdpContext::new(raw));
        }
        xdp_action::XDP_PASS
    }

    /// The accounting of an XDP frame (all but the updates after it); what it was (`COPY`,
    /// `ROCE`).
    /// The context by value: a reference would take a slot of the caller's stack frame, and
    /// the verifier counts frames in 16 bytes, which this one nearly fills out of 512.
    #[inline(never)]
    fn observe_xdp(ctx: XdpContext) -> u32 {
        let ctx = &ctx;
        account!(ctx, false, xdp_ifindex(ctx), xdp_len(ctx))
    }

    /// Headers the parser may need, made linear in a transmitted skb whose linear part ends
    /// before them (Ethernet + 2 VLAN tags + IPv6 + UDP + BTH + RETH is 112 bytes).
    const EGRESS_HEADERS: u32 = 128;

    /// Host mode, TC egress (tcx, or clsact): account transmitted frames with the flow key
    /// marked egress, then pass on to the next program or filter (TC_ACT_UNSPEC is tcx's
    /// TCX_NEXT, and cls_bpf's "continue"): never drops, redirects or changes a packet.
    #[classifier]
    pub fn roce_observe_egress(ctx: TcContext) -> i32 {
        let raw = ctx.skb.skb;
        let done = observe_egress(ctx);
        after_accounting(done, 0);
        if done & ROCE != 0 {
            account_cm_tc(TcContext::new(raw));
        }
        TC_ACT_UNSPEC
    }

    /// The accounting of a transmitted frame (all but the updates after it); what it was.
    #[inline(never)]
    fn observe_egress(ctx: TcContext) -> u32 {
        observe_tc::<true>(ctx)
    }

    /// Beside an XDP program of roce-observer's own on the interface (a sidecar running there),
    /// `diagnose` in host mode attaches here instead of XDP: TC ingress (tcx, or clsact) sees
    /// every frame that program passed, which in host mode is every frame. Accounts received
    /// frames as the XDP program does, then passes on (TC_ACT_UNSPEC): never drops, redirects
    /// or changes a packet.
    #[classifier]
    pub fn roce_observe_ingress(ctx: TcContext) -> i32 {
        let raw = ctx.skb.skb;
        let done = observe_tc_ingress(ctx);
        after_accounting(done, 0);
        if done & ROCE != 0 {
            account_cm_tc(TcContext::new(raw));
        }
        TC_ACT_UNSPEC
    }

    /// The accounting of a frame received at TC ingress; what it was.
    #[inline(never)]
    fn observe_tc_ingress(ctx: TcContext) -> u32 {
        observe_tc::<false>(ctx)
    }

    /// A frame at TC (egress when `EGRESS`, else ingress): its headers made linear where the
    /// parser would stop short of them, then accounted.
    #[inline(always)]
    fn observe_tc<const EGRESS: bool>(ctx: TcContext) -> u32 {
        let ctx = &ctx;
        let linear = (ctx.data_end() - ctx.data()) as u32;
        let len = ctx.len();
        if linear < len && linear < EGRESS_HEADERS {
            // Only when the parser would stop short in the linear part: TCP and most other
            // traffic keep their headers there, and a pull un-clones and copies the skb.
            let pkt = Packet {
                start: ctx.data(),
                end: ctx.data_end(),
            };
            if matches!(parse_frame(&pkt).result, Err(SkipReason::Truncated)) {
                // Linearizes the headers; the packet's bytes stay as they are.
                let _ = ctx.pull_data(if len < EGRESS_HEADERS {
                    len
                } else {
                    EGRESS_HEADERS
                });
            }
        }
        if EGRESS && let Some(counters) = COUNTERS.get_ptr_mut(0) {
            // SAFETY: a per-CPU map value; TC runs with bottom halves off.
            unsafe { (*counters).egress_frames += 1 };
        }
        // SAFETY: reading the context's ifindex field.
        let ifindex = unsafe { (*ctx.skb.skb).ifindex };
        account!(ctx, EGRESS, ifindex, len)
    }

    /// Mirror mode with --consume: account, then drop the copies (GRE/ERSPAN copies and RoCE
    /// frames need not climb the stack); the host's own traffic (ARP, ND, SSH, ...) passes.
    /// Never attached in host mode.
    #[xdp]
    pub fn roce_observe_consume(ctx: XdpContext) -> u32 {
        consume(ctx, 0)
    }

    /// Accounts the frame, then drops it if it is a copy (`roce_observe_consume`); `arrival_ns`
    /// as `after_accounting` takes it.
    #[inline(always)]
    fn consume(ctx: XdpContext, arrival_ns: u64) -> u32 {
        let raw = ctx.ctx;
        let done = observe_xdp(ctx);
        after_accounting(done, arrival_ns);
        if done & ROCE != 0 {
            account_cm_xdp(XdpContext::new(raw));
        }
        if done & COPY != 0 {
            xdp_action::XDP_DROP
        } else {
            xdp_action::XDP_PASS
        }
    }

    /// Writes the slot's flow back to FLOWS and gives the slot to `key`, continuing the PSN
    /// tracking of its table entry.
    #[inline(always)]
    #[allow(
        clippy::needless_borrows_for_generic_args,
        reason = "by value would copy the 432-byte stats onto the 512-byte BPF stack"
    )]
    fn take_slot(slot: &mut FlowSlot, key: &FlowKey, counters: &mut Counters) {
        if slot.stats.packets != 0 {
            let written = match FLOWS.get_ptr_mut(&slot.key) {
                // SAFETY: a live map value of this CPU.
                Some(v) => {
                    unsafe { (*v).merge(&slot.stats) };
                    true
                }
                // The value argument may point into a map value (the slot).
                None => {
                    FLOWS
                        .insert(&slot.key, &slot.stats, BPF_NOEXIST as u64)
                        .is_ok()
                        // Another CPU may have inserted the key meanwhile (EEXIST): merge.
                        || match FLOWS.get_ptr_mut(&slot.key) {
                            Some(v) => {
                                unsafe { (*v).merge(&slot.stats) };
                                true
                            }
                            None => false,
                        }
                }
            };
            // (The PSN analysis of mirror sessions together holds no packet of its own.)
            if !written && !slot.key.is_union() {
                counters.flow_insert_failures += slot.stats.packets;
            }
            log_written(&slot.key);
        }
        // Stats zeroed before the key changes, so that a reader on another CPU (the daemon's
        // drain) does not pair the new key with the old flow's counts. Program order only (the
        // BPF target has no compiler fence); the reader also drops keys torn mid-write.
        // SAFETY: zeroing plain integers in place (no 432-byte temporary on the stack).
        unsafe { core::ptr::write_bytes(&mut slot.stats as *mut FlowStats, 0, 1) };
        // The PSN analysis continues from the table's value, map value to map value.
        if let Some(prev) = FLOWS.get_ptr(key) {
            // SAFETY: a live map value of this CPU.
            slot.stats.seq_track.assign(unsafe { &(*prev).seq_track });
            // The path MTU learned stays known (OR-merged: no double count).
            slot.stats.seq.pmtu_mask = unsafe { (*prev).seq.pmtu_mask };
        }
        slot.key = *key;
    }

    /// Appends `key`, just written to FLOWS, to this CPU's log. The key goes in before the count
    /// that shows it (a volatile store, after the write to FLOWS): a reader that sees the count
    /// finds the key, and the entry as written.
    #[inline(always)]
    fn log_written(key: &FlowKey) {
        let Some(head) = FLOW_LOG_HEAD.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: this CPU's value.
        let n = unsafe { *head };
        if let Some(entry) = FLOW_LOG.get_ptr_mut(n as u32 & (FLOW_LOG_SLOTS - 1)) {
            // SAFETY: this CPU's values.
            unsafe {
                *entry = *key;
                core::ptr::write_volatile(head, n + 1);
            }
        }
    }

    /// Mirror mode spread over CPUs: sends each frame to the CPU its hosts hash to (a hash of
    /// the copied packet's two addresses, whichever way it goes), whose cpumap program
    /// (`roce_observe_cpumap`, `roce_observe_consume_cpumap`) accounts it. Everything the
    /// per-CPU analysis joins (a flow, its answers, its copies from every session, the hosts'
    /// connection-manager traffic) so stays on one CPU. Frames that are not RoCE go to the first
    /// CPU; with no CPU to send to, a frame passes unaccounted (the loader never leaves it so).
    #[xdp]
    pub fn roce_spread(ctx: XdpContext) -> u32 {
        spread(ctx, true)
    }

    /// `roce_spread` without the arrival stamp, for kernels that refuse XDP metadata to XDP
    /// programs (`bpf_xdp_adjust_meta`): the CPUs it sends copies to take no latency sample
    /// (the loader sets `SPREAD[SPREAD_UNTIMED]`).
    #[xdp]
    pub fn roce_spread_bare(ctx: XdpContext) -> u32 {
        spread(ctx, false)
    }

    /// `roce_spread`'s work; `stamping`: the frames passive latency may time carry their
    /// arrival time.
    #[inline(always)]
    fn spread(ctx: XdpContext, stamping: bool) -> u32 {
        let pkt = Packet {
            start: ctx.data(),
            end: ctx.data_end(),
        };
        let (hash, stamp) = match parse_frame(&pkt).result {
            Ok(p) => (spread_hash(&p.src_ip, &p.dst_ip), spread_stamped(&p)),
            Err(_) => (0, false),
        };
        let n = match SPREAD.get(0) {
            Some(n) if *n > 0 => *n,
            _ => return xdp_action::XDP_PASS,
        };
        let Some(cpu) = SPREAD.get(1 + hash % n) else {
            return xdp_action::XDP_PASS;
        };
        // Only a frame sent on: a cpumap program reads the stamp.
        if stamping && stamp {
            stamp_arrival(&ctx);
        }
        match SPREAD_CPUS.redirect(*cpu, u64::from(xdp_action::XDP_PASS)) {
            Ok(action) | Err(action) => action,
        }
    }

    /// Mirror mode spread over CPUs: counts the frames SPREAD_CPUS dropped because the queue of
    /// the CPU they were sent to was full (the tracepoint of a cpumap's bulk flush, on the
    /// sending CPU; its other failures come after the cpumap program accounted the frame).
    /// Without it such a copy would be a PSN missing on the wire. A raw tracepoint: it needs no
    /// kernel BTF.
    #[raw_tracepoint(tracepoint = "xdp_cpumap_enqueue")]
    pub fn spread_drops(ctx: RawTracePointContext) -> i32 {
        // The tracepoint's arguments are (map_id, processed, drops, to_cpu), a u64 each.
        let (map_id, drops): (u64, u64) = (ctx.arg(0), ctx.arg(2));
        let (map_id, drops) = (map_id as u32, drops as u32);
        if drops == 0 {
            return 0;
        }
        // Another program's cpumap, or ours before the loader named it: not ours to count.
        match SPREAD.get(SPREAD_MAP_ID) {
            Some(id) if *id != 0 && *id == map_id => {}
            _ => return 0,
        }
        if let Some(c) = COUNTERS.get_ptr_mut(0) {
            // SAFETY: this CPU's value; the flush runs with bottom halves off, after the XDP
            // program that redirected (a NAPI poll's end, the generic path, a cpumap thread's
            // batch), never within one.
            unsafe { (*c).spread_dropped += u64::from(drops) };
        }
        0
    }

    /// `roce_observe` as the cpumap program of a CPU frames are spread to (`roce_spread`).
    #[xdp(map = "cpumap")]
    pub fn roce_observe_cpumap(ctx: XdpContext) -> u32 {
        let arrival_ns = take_arrival(&ctx);
        let raw = ctx.ctx;
        let done = observe_xdp(ctx);
        after_accounting(done, arrival_ns);
        if done & ROCE != 0 {
            account_cm_xdp(XdpContext::new(raw));
        }
        xdp_action::XDP_PASS
    }

    /// `roce_observe_consume` as the cpumap program of a CPU frames are spread to.
    #[xdp(map = "cpumap")]
    pub fn roce_observe_consume_cpumap(ctx: XdpContext) -> u32 {
        let arrival_ns = take_arrival(&ctx);
        consume(ctx, arrival_ns)
    }

    /// XDP metadata `roce_spread` puts in front of a frame passive latency may time: the time
    /// it arrived, before the queue of the CPU it is sent to (whose wait would otherwise be in
    /// the sample).
    #[repr(C)]
    struct Arrival {
        magic: u64,
        ns: u64,
    }

    /// `Arrival::magic`: the metadata is this program's.
    const ARRIVAL_MAGIC: u64 = 0x726f_6365_6172_7276;

    /// In `roce_spread`: stamps the frame with its arrival time in XDP metadata (the frame's
    /// bytes stay as they are).
    #[inline(always)]
    fn stamp_arrival(ctx: &XdpContext) {
        // SAFETY: the helper on this program's context; it checks the room itself.
        if unsafe { bpf_xdp_adjust_meta(ctx.ctx, -(size_of::<Arrival>() as i32)) } != 0 {
            return;
        }
        let (meta, data) = (ctx.metadata(), ctx.data());
        if meta + size_of::<Arrival>() > data {
            return;
        }
        // SAFETY: the metadata's bytes, bounds checked above.
        unsafe {
            let a = meta as *mut Arrival;
            (*a).magic = ARRIVAL_MAGIC;
            (*a).ns = bpf_ktime_get_ns();
        }
    }

    /// In a cpumap program: the arrival time `roce_spread` stamped (0: none; [`UNTIMED`]: the
    /// spreading program stamps none). The metadata is
    /// left where it is, in front of the frame's bytes (which are as they came): some kernels
    /// (6.18.44 among them) refuse `bpf_xdp_adjust_meta` to cpumap programs, and the stack
    /// takes the frame from its data, not its metadata.
    #[inline(always)]
    fn take_arrival(ctx: &XdpContext) -> u64 {
        // No stamps at all (`roce_spread_bare`): no sample, rather than one timed after the
        // queue.
        if SPREAD.get(SPREAD_UNTIMED).is_some_and(|u| *u != 0) {
            return UNTIMED;
        }
        let (meta, data) = (ctx.metadata(), ctx.data());
        // (A `>` test: the verifier learns the metadata's length from it, not from `!=`.)
        if meta + size_of::<Arrival>() > data {
            return 0;
        }
        // SAFETY: the metadata's bytes, bounds checked above.
        let (magic, ns) = unsafe {
            let a = meta as *const Arrival;
            ((*a).magic, (*a).ns)
        };
        if magic != ARRIVAL_MAGIC {
            return 0;
        }
        ns
    }

    /// Benchmark only: the observer without the cache, every packet looked up in `$flows`.
    macro_rules! observe_uncached {
        ($ctx:expr, $flows:expr) => {{
            if let (Some((p, counters)), _) = parse_and_count!($ctx, false) {
                let key = FlowKey::of(&p);
                let stats = match $flows.get_ptr_mut(&key) {
                    Some(s) => Some(s),
                    None => match ZERO_STATS.get_ptr(0) {
                        Some(zero) => {
                            // SAFETY: ZERO_STATS is never written. EEXIST (a race) is fine.
                            let _ = $flows.insert(&key, unsafe { &*zero }, BPF_NOEXIST as u64);
                            $flows.get_ptr_mut(&key)
                        }
                        None => None,
                    },
                };
                match stats {
                    // SAFETY: a live map value.
                    Some(s) => {
                        unsafe { (*s).record(&p, now_ns()) };
                    }
                    None => counters.flow_insert_failures += 1,
                }
            }
        }};
    }

    /// Benchmark only: per-CPU LRU table, no cache.
    #[xdp]
    pub fn roce_observe_uncached(ctx: XdpContext) -> u32 {
        observe_uncached!(ctx, FLOWS);
        xdp_action::XDP_PASS
    }

    /// Benchmark only: one shared LRU table, no cache (updates are not atomic: exact only while
    /// a flow stays on one CPU; never attached by the loader).
    #[xdp]
    pub fn roce_observe_shared(ctx: XdpContext) -> u32 {
        observe_uncached!(ctx, FLOWS_SHARED);
        xdp_action::XDP_PASS
    }

    /// The benchmark's baseline: counts frames, passes them.
    #[xdp]
    pub fn count_frames(_ctx: XdpContext) -> u32 {
        if let Some(n) = BASELINE.get_ptr_mut(0) {
            unsafe { *n += 1 };
        }
        xdp_action::XDP_PASS
    }

    /// The sustained-rate benchmark's baseline: counts frames, drops them (as the consuming
    /// observer drops copies, so that neither pays the stack).
    #[xdp]
    pub fn count_frames_drop(_ctx: XdpContext) -> u32 {
        if let Some(n) = BASELINE.get_ptr_mut(0) {
            unsafe { *n += 1 };
        }
        xdp_action::XDP_DROP
    }

    #[panic_handler]
    fn panic(_info: &core::panic::PanicInfo) -> ! {
        loop {}
    }
}

#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

#[cfg(not(target_arch = "bpf"))]
fn main() {
    eprintln!("observer-ebpf is built for bpfel-unknown-none by observer/build.rs");
}
