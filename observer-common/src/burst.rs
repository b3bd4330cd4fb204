//! Microburst slots: the kernel adds every frame's wire bytes to the slot of its interface,
//! direction and time (the clock's ticks: slot-wide periods of CLOCK_MONOTONIC) in its CPU's
//! ring, which userspace maps into memory, sums over the CPUs once slots are complete, and
//! zeroes. Per CPU, so that no two CPUs add to one cache line at line rate.

use core::mem::size_of;

use crate::parse::{OpClass, RocePacket};

/// Slots in one interface-direction ring of one CPU (a power of two): at 100 us slots, 205 ms
/// of history, four times the reader's period.
pub const BURST_RING_SLOTS: u32 = 2048;

/// Records in the `BURST_SPANS` log (a power of two). A record covers two slots at least, so a
/// reader that drains every quarter ring ([`BURST_RING_SLOTS`]) finds at most a quarter of it
/// new.
pub const BURST_SPAN_LOG: u32 = 1024;

/// Interfaces whose slots the kernel keeps (rings: two per interface, ingress and egress).
pub const MAX_BURST_IFACES: u32 = 64;

/// One slot of a ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BurstSlot {
    /// The slot number (monotonic ns / slot width) whose bytes these are.
    pub slot: u64,
    /// Wire bytes (frame + preamble, FCS, gap) of this CPU's frames; a CPU that finds another
    /// slot's number here starts it afresh, the reader zeroes it once the slot is complete.
    pub bytes: u64,
}
const _: () = assert!(size_of::<BurstSlot>() == 16);

/// A slot the programs' clock stood at for longer than a slot (its timer ran late, missing a
/// tick): the frames of slot `slot` came until the tick moved on to `end`, over `end - slot`
/// slots' time. Record n of the `BURST_SPANS` log is at n % [`BURST_SPAN_LOG`]; the clock
/// writes it, then counts it in `Clock::spans`, then moves the tick on.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BurstSpan {
    pub slot: u64,
    pub end: u64,
}
const _: () = assert!(size_of::<BurstSpan>() == 16);

/// Entries of `BURST_IFACES`, an array indexed by ifindex modulo its size (an array lookup
/// costs the kernel program almost nothing; a hash lookup per frame cost 20 ns): the loader
/// refuses two observed interfaces in one entry.
pub const BURST_IFACE_SLOTS: u32 = 4096;

/// What the kernel needs to know of an observed interface (value of `BURST_IFACES` at
/// `ifindex % BURST_IFACE_SLOTS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BurstIface {
    /// First ring of the interface: ingress at `ring`, egress at `ring + 1`.
    pub ring: u32,
    /// The interface this entry is for (0: none).
    pub ifindex: u32,
    /// Rings per CPU in `BURSTS` (0: no slots kept).
    pub rings: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<BurstIface>() == 16);

/// Bytes a frame occupies on the wire besides the frame the observer sees: preamble and start
/// delimiter (8), FCS (4) and the minimum inter-frame gap (12).
pub const WIRE_OVERHEAD: u32 = 24;

/// Index of `slot` of ring `ring` of CPU `cpu` in the `BURSTS` array of `rings` rings per CPU.
#[inline(always)]
pub const fn burst_index(cpu: u32, rings: u32, ring: u32, slot: u64) -> u32 {
    (cpu * rings + ring) * BURST_RING_SLOTS + (slot as u32 & (BURST_RING_SLOTS - 1))
}

/// Entries of `IFACE_COUNTERS`: one per ring (interface slot i: ingress 2i, egress 2i + 1).
pub const IFACE_COUNTER_SLOTS: u32 = 2 * MAX_BURST_IFACES;

/// Per-interface, per-direction totals (value of the per-CPU `IFACE_COUNTERS` at the
/// interface's ring): every frame, and the RoCEv2 packets among them by ECN codepoint and
/// operation class. Kept whether microburst slots are kept or not; an interface re-created
/// under the same name keeps its entry, so the totals continue.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IfaceCounters {
    pub frames: u64,
    /// Frame lengths as seen (no preamble, FCS or gap).
    pub frame_bytes: u64,
    pub roce_packets: u64,
    /// From the IP length fields, as `FlowStats::bytes`.
    pub roce_bytes: u64,
    /// Indexed by the ECN codepoint: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: [u64; 4],
    /// Indexed by [`OpClass`].
    pub ops: [u64; OpClass::COUNT],
}
const _: () = assert!(size_of::<IfaceCounters>() == (8 + OpClass::COUNT) * 8);

impl IfaceCounters {
    /// Accounts one frame of `len` bytes.
    #[inline(always)]
    pub fn frame(&mut self, len: u32) {
        self.frames += 1;
        self.frame_bytes += len as u64;
    }

    /// Accounts one RoCEv2 packet (after [`frame`](Self::frame)).
    #[inline(always)]
    pub fn roce(&mut self, p: &RocePacket) {
        self.roce_packets += 1;
        self.roce_bytes += p.ip_len as u64;
        self.ecn[(p.ecn() & 3) as usize] += 1;
        self.ops[p.op_class() as usize] += 1;
    }

    pub fn merge(&mut self, o: &IfaceCounters) {
        self.frames += o.frames;
        self.frame_bytes += o.frame_bytes;
        self.roce_packets += o.roce_packets;
        self.roce_bytes += o.roce_bytes;
        for (a, b) in self.ecn.iter_mut().zip(o.ecn) {
            *a += b;
        }
        for (a, b) in self.ops.iter_mut().zip(o.ops) {
            *a += b;
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), no padding (asserted above), every bit pattern valid.
    unsafe impl aya::Pod for super::BurstSlot {}
    unsafe impl aya::Pod for super::BurstIface {}
    unsafe impl aya::Pod for super::IfaceCounters {}
}
