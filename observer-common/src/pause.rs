//! The pause table: 802.3x PAUSE and 802.1Qbb PFC frames per sender (source MAC and mirror
//! session) and priority. Map types (`#[repr(C)]`, no implicit padding) and the update used by
//! both the kernel program and userspace aggregation.

use core::mem::size_of;

use crate::flow::mirror_key;
use crate::parse::{Mirror, Pause};
use crate::wire::PFC_PRIORITIES;

/// Index of 802.3x PAUSE (all priorities at once) in the [`PauseStats`] arrays; 0..=7 are the
/// PFC priorities.
pub const LINK_PAUSE: usize = PFC_PRIORITIES;
/// Entries of the [`PauseStats`] arrays.
pub const PAUSE_CLASSES: usize = PFC_PRIORITIES + 1;

/// Who sent the pause frames: the source MAC, and the mirror they were copied through
/// (`FlowKey::mirror`'s encoding; 0 when seen directly).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PauseKey {
    pub src_mac: [u8; 6],
    pub mirror: u16,
}
const _: () = assert!(size_of::<PauseKey>() == 8);

impl PauseKey {
    #[inline(always)]
    pub fn of(p: &Pause, mirror: &Option<Mirror>) -> Self {
        Self {
            src_mac: p.src_mac,
            mirror: match mirror {
                Some(m) => mirror_key(m),
                None => 0,
            },
        }
    }
}

/// Pause frames of one sender. Arrays are indexed by PFC priority, and [`LINK_PAUSE`] for
/// 802.3x PAUSE.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PauseStats {
    /// Frames that named the class: PFC frames with its class-enable bit set, or PAUSE frames.
    pub frames: [u64; PAUSE_CLASSES],
    /// Of those, XON frames (time 0: resume).
    pub xon: [u64; PAUSE_CLASSES],
    /// Pause times asked for, summed, in quanta of 512 bit times.
    pub quanta: [u64; PAUSE_CLASSES],
    /// PFC frames (one frame may name several priorities, or none).
    pub pfc_frames: u64,
    pub first_seen_ns: u64,
    pub last_seen_ns: u64,
}
const _: () = assert!(size_of::<PauseStats>() == (3 * PAUSE_CLASSES + 3) * 8);

impl PauseStats {
    /// Accounts one pause frame seen at `now_ns`.
    #[inline(always)]
    pub fn record(&mut self, p: &Pause, now_ns: u64) {
        if self.frames_total() == 0 || now_ns < self.first_seen_ns {
            self.first_seen_ns = now_ns;
        }
        if now_ns > self.last_seen_ns {
            self.last_seen_ns = now_ns;
        }
        if p.is_pfc() {
            self.pfc_frames += 1;
            let mut i = 0;
            while i < PFC_PRIORITIES {
                if p.class_enable & (1 << i) != 0 {
                    self.count(i, p.quanta[i]);
                }
                i += 1;
            }
        } else {
            self.count(LINK_PAUSE, p.quanta[0]);
        }
    }

    #[inline(always)]
    fn count(&mut self, class: usize, quanta: u16) {
        self.frames[class] += 1;
        self.quanta[class] += quanta as u64;
        if quanta == 0 {
            self.xon[class] += 1;
        }
    }

    /// PFC plus PAUSE frames: 0 for an empty entry.
    #[inline(always)]
    pub fn frames_total(&self) -> u64 {
        self.pfc_frames + self.frames[LINK_PAUSE]
    }

    /// Adds another partial view of the same sender (another CPU's value).
    pub fn merge(&mut self, o: &PauseStats) {
        if o.frames_total() == 0 {
            return;
        }
        if self.frames_total() == 0 || o.first_seen_ns < self.first_seen_ns {
            self.first_seen_ns = o.first_seen_ns;
        }
        if o.last_seen_ns > self.last_seen_ns {
            self.last_seen_ns = o.last_seen_ns;
        }
        for c in 0..PAUSE_CLASSES {
            self.frames[c] += o.frames[c];
            self.xon[c] += o.xon[c];
            self.quanta[c] += o.quanta[c];
        }
        self.pfc_frames += o.pfc_frames;
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), no padding (asserted above), every bit pattern valid.
    unsafe impl aya::Pod for super::PauseKey {}
    unsafe impl aya::Pod for super::PauseStats {}
}
