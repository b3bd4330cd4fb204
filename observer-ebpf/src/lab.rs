//! The test labs' link, not part of the observer: a TC program attached to one interface's
//! egress in a netns lab. It counts the RoCEv2 frames (UDP 4791, IPv4 or IPv6, untagged)
//! leaving there and, as its configuration asks, drops a share of them or marks a share of the
//! ECN-capable ones CE, as a faulty link or a congested switch port would; and it clears the
//! frame's hash, so that the next router hashes the 5-tuple. The lab's kernels
//! have no netem, red or tc actions: BPF is the only way to make a link lossy.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

#[cfg(target_arch = "bpf")]
mod kernel {
    use aya_ebpf::{
        bindings::{TC_ACT_OK, TC_ACT_SHOT},
        helpers::{bpf_get_prandom_u32, generated::bpf_set_hash_invalid},
        macros::{classifier, map},
        maps::{Array, PerCpuArray},
        programs::TcContext,
    };
    use observer_common::{LabCounts, LabFault};

    const ETH_HLEN: usize = 14;
    const ROCE_PORT: u16 = 4791;

    /// The fault: per million frames, how many are dropped and how many marked CE.
    #[map(name = "LAB_FAULT")]
    static LAB_FAULT: Array<LabFault> = Array::with_max_entries(1, 0);

    #[map(name = "LAB_COUNTS")]
    static LAB_COUNTS: PerCpuArray<LabCounts> = PerCpuArray::with_max_entries(1, 0);

    fn chance(per_million: u32) -> bool {
        per_million > 0 && unsafe { bpf_get_prandom_u32() } % 1_000_000 < per_million
    }

    /// The offset of the ECN byte's field and whether the frame is RoCEv2.
    fn roce(ctx: &TcContext) -> Option<(usize, bool)> {
        let ethertype = u16::from_be(ctx.load::<u16>(12).ok()?);
        let (l4, v4, proto) = match ethertype {
            0x0800 => {
                let ihl = (ctx.load::<u8>(ETH_HLEN).ok()? & 0x0f) as usize * 4;
                (ETH_HLEN + ihl, true, ctx.load::<u8>(ETH_HLEN + 9).ok()?)
            }
            0x86dd => (ETH_HLEN + 40, false, ctx.load::<u8>(ETH_HLEN + 6).ok()?),
            _ => return None,
        };
        if proto != 17 || u16::from_be(ctx.load::<u16>(l4 + 2).ok()?) != ROCE_PORT {
            return None;
        }
        Some((l4, v4))
    }

    #[classifier]
    pub fn lab_link(ctx: TcContext) -> i32 {
        // A wire carries no socket's hash: without this, a Linux router's multipath choice
        // for a frame a local socket sent would follow the socket's random hash (it reuses an
        // L4 hash the frame already has) instead of the frame's 5-tuple, as a switch's does.
        // SAFETY: the program's own context.
        unsafe { bpf_set_hash_invalid(ctx.skb.skb) };
        let Some((_, v4)) = roce(&ctx) else {
            return TC_ACT_OK;
        };
        let Some(counts) = LAB_COUNTS.get_ptr_mut(0) else {
            return TC_ACT_OK;
        };
        let fault = LAB_FAULT.get(0).copied().unwrap_or_default();
        // SAFETY: a per-CPU value, this CPU's.
        let counts = unsafe { &mut *counts };
        counts.frames += 1;
        if chance(fault.drop_per_million) {
            counts.dropped += 1;
            return TC_ACT_SHOT;
        }
        if chance(fault.ce_per_million) && mark_ce(&ctx, v4).is_some() {
            counts.marked += 1;
        }
        TC_ACT_OK
    }

    /// Sets CE on an ECN-capable frame (as a switch marks: never on Not-ECT, nor again).
    fn mark_ce(ctx: &TcContext, v4: bool) -> Option<()> {
        if v4 {
            let tos: u8 = ctx.load(ETH_HLEN + 1).ok()?;
            if tos & 3 == 0 || tos & 3 == 3 {
                return None;
            }
            // The checksum covers 16-bit words: the TOS byte is the low byte of the first.
            let first: u16 = ctx.load(ETH_HLEN).ok()?;
            ctx.store(ETH_HLEN + 1, &(tos | 3), 0).ok()?;
            let marked: u16 = ctx.load(ETH_HLEN).ok()?;
            ctx.l3_csum_replace(ETH_HLEN + 10, first as u64, marked as u64, 2)
                .ok()?;
        } else {
            // The traffic class straddles the first two bytes; ECN is bits 4-5 of the second.
            let b: u8 = ctx.load(ETH_HLEN + 1).ok()?;
            let ecn = (b >> 4) & 3;
            if ecn == 0 || ecn == 3 {
                return None;
            }
            ctx.store(ETH_HLEN + 1, &(b | 0x30), 0).ok()?;
        }
        Some(())
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
    eprintln!("the lab's link program is built for bpfel-unknown-none by observer/build.rs");
}
