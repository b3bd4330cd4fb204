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
        maps::{LruPerCpuHashMap, PerCpuArray},
        programs::XdpContext,
    };
    use observer_common::{
        Counters, DEFAULT_MAX_FLOWS, FlowKey, FlowStats, parse,
        parse::{Bytes, Plain},
    };

    #[map(name = "FLOWS")]
    static FLOWS: LruPerCpuHashMap<FlowKey, FlowStats> =
        LruPerCpuHashMap::with_max_entries(DEFAULT_MAX_FLOWS, 0);

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

    #[xdp]
    pub fn roce_observe(ctx: XdpContext) -> u32 {
        observe(&ctx);
        xdp_action::XDP_PASS
    }

    #[inline(always)]
    fn observe(ctx: &XdpContext) {
        let pkt = Packet {
            start: ctx.data(),
            end: ctx.data_end(),
        };
        let result = parse(&pkt);
        let Some(counters) = COUNTERS.get_ptr_mut(0) else {
            return;
        };
        // SAFETY: a per-CPU map value; XDP runs with preemption off on this CPU.
        let counters = unsafe { &mut *counters };
        counters.record(&result);
        let Ok(p) = result else {
            return;
        };
        let now = unsafe { bpf_ktime_get_ns() };
        let key = FlowKey::of(&p);
        let stats = match FLOWS.get_ptr_mut(&key) {
            Some(s) => s,
            None => {
                let Some(zero) = ZERO_STATS.get_ptr(0) else {
                    return;
                };
                // Another CPU may insert the key between lookup and insert: EEXIST is fine.
                // SAFETY: ZERO_STATS is never written.
                let _ = FLOWS.insert(&key, unsafe { &*zero }, BPF_NOEXIST as u64);
                match FLOWS.get_ptr_mut(&key) {
                    Some(s) => s,
                    None => {
                        counters.flow_insert_failures += 1;
                        return;
                    }
                }
            }
        };
        // SAFETY: per-CPU value of this CPU.
        unsafe { (*stats).record(&p, now) };
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
