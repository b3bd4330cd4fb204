//! The map types of the test labs' link program (`observer-ebpf/src/lab.rs`): a netns fabric's
//! fault injection and per-link counters. Not used by the observer.

/// A link's fault: per million RoCEv2 frames leaving, how many are dropped and how many of the
/// ECN-capable ones are marked CE.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LabFault {
    pub drop_per_million: u32,
    pub ce_per_million: u32,
}

const _: () = assert!(core::mem::size_of::<LabFault>() == 8);

/// RoCEv2 frames that left (dropped ones included), dropped, and marked CE; per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LabCounts {
    pub frames: u64,
    pub dropped: u64,
    pub marked: u64,
}

const _: () = assert!(core::mem::size_of::<LabCounts>() == 24);

/// The lab program's map names.
pub const LAB_FAULT: &str = "LAB_FAULT";
pub const LAB_COUNTS: &str = "LAB_COUNTS";

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain integers, no padding (asserted above).
    unsafe impl aya::Pod for super::LabFault {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::LabCounts {}
}
