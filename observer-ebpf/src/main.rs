//! Kernel side of roce-observer: an XDP program that parses every frame with the shared parser,
//! accounts RoCEv2 per flow and always returns XDP_PASS (host mode never drops or changes a
//! packet). No per-packet logging.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

#[cfg(target_arch = "bpf")]
mod kernel {
    use core::mem::size_of;

    use aya_ebpf::{
        bindings::{BPF_NOEXIST, xdp_action},
        helpers::bpf_ktime_get_ns,
        macros::{map, xdp},
        maps::{LruHashMap, LruPerCpuHashMap, PerCpuArray},
        programs::XdpContext,
    };
    use observer_common::{
        Counters, DEFAULT_MAX_FLOWS, FlowKey, FlowStats, parse,
        parse::{Bytes, Plain},
    };

    #[map(name = "FLOWS")]
    static FLOWS: LruPerCpuHashMap<FlowKey, FlowStats> =
        LruPerCpuHashMap::with_max_entries(DEFAULT_MAX_FLOWS, 0);

    /// The same table as one shared (not per-CPU) LRU hash: only the benchmark's
    /// `roce_observe_shared` uses it, to measure the map-type trade-off.
    #[map(name = "FLOWS_SHARED")]
    static FLOWS_SHARED: LruHashMap<FlowKey, FlowStats> =
        LruHashMap::with_max_entries(DEFAULT_MAX_FLOWS, 0);

    #[map(name = "COUNTERS")]
    static COUNTERS: PerCpuArray<Counters> = PerCpuArray::with_max_entries(1, 0);

    /// A zeroed FlowStats that is never written: the value new flows are inserted with (the
    /// 512-byte BPF stack has no room for one).
    #[map(name = "ZERO_STATS")]
    static ZERO_STATS: PerCpuArray<FlowStats> = PerCpuArray::with_max_entries(1, 0);

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

    /// Parse, count, and account the packet in `$flows` (both hash map types have the same
    /// methods but no common trait).
    macro_rules! observe {
        ($ctx:expr, $flows:expr) => {{
            let pkt = Packet {
                start: $ctx.data(),
                end: $ctx.data_end(),
            };
            let result = parse(&pkt);
            if let Some(counters) = COUNTERS.get_ptr_mut(0) {
                // SAFETY: a per-CPU map value; XDP runs with preemption off on this CPU.
                let counters = unsafe { &mut *counters };
                counters.record(&result);
                if let Ok(p) = result {
                    let now = unsafe { bpf_ktime_get_ns() };
                    let key = FlowKey::of(&p);
                    let stats = match $flows.get_ptr_mut(&key) {
                        Some(s) => Some(s),
                        None => match ZERO_STATS.get_ptr(0) {
                            Some(zero) => {
                                // Another CPU may insert the key between lookup and insert:
                                // EEXIST is fine. SAFETY: ZERO_STATS is never written.
                                let _ = $flows.insert(&key, unsafe { &*zero }, BPF_NOEXIST as u64);
                                $flows.get_ptr_mut(&key)
                            }
                            None => None,
                        },
                    };
                    match stats {
                        // SAFETY: a live map value.
                        Some(s) => unsafe { (*s).record(&p, now) },
                        None => counters.flow_insert_failures += 1,
                    }
                }
            }
        }};
    }

    #[xdp]
    pub fn roce_observe(ctx: XdpContext) -> u32 {
        observe!(ctx, FLOWS);
        xdp_action::XDP_PASS
    }

    /// Benchmark only: the observer over the shared LRU map (updates are not atomic, so it is
    /// exact only while a flow stays on one CPU; never attached by the loader).
    #[xdp]
    pub fn roce_observe_shared(ctx: XdpContext) -> u32 {
        observe!(ctx, FLOWS_SHARED);
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
