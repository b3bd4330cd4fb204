//! Microbursts: the kernel's per-interface slot rings mapped into this process, and the
//! registration of interfaces (their entry in the ifindex-modulo array, their counters).

use std::{io, os::fd::AsRawFd};

use aya::{
    Ebpf,
    maps::{MapError, PerCpuArray},
};
use observer_common::{
    BURST_IFACE_SLOTS, BURST_RING_SLOTS, BURST_SPAN_LOG, BurstIface, BurstSlot, BurstSpan, Clock,
    IfaceCounters, maps,
};

use super::LiveError;

/// Has the loaded object count the interfaces `interfaces` (name, ifindex) and keep their
/// microburst slots of `slot_ns` (0: none; else the clock ticks at that period from now on):
/// interface i gets slot i (rings and counters 2i and 2i + 1). Two interfaces in one entry of
/// the ifindex-modulo array are refused, and so are rings the object was not sized for
/// ([`load_object`](super::load_object)). (For a bare loaded object, as the kernel tests and
/// the benchmark use; the observer registers its interfaces one by one as it attaches.)
pub fn observe_bursts(
    ebpf: &mut Ebpf,
    interfaces: &[(&str, u32)],
    slot_ns: u64,
) -> Result<(), LiveError> {
    let rings = if slot_ns > 0 {
        2 * interfaces.len() as u32
    } else {
        0
    };
    if rings > 0 {
        let have = rings_per_cpu(ebpf)?;
        if have < rings {
            return Err(LiveError::BurstRings { have, want: rings });
        }
        super::start_clock(ebpf, slot_ns)?;
    }
    for (i, (name, ifindex)) in interfaces.iter().enumerate() {
        check_entry_clash(interfaces[..i].iter().copied(), name, *ifindex)?;
        register_interface(ebpf, i, *ifindex, rings)?;
    }
    Ok(())
}

/// Entries of `BURSTS` for `rings` rings per CPU (at least one array entry).
pub fn burst_entries(rings: u32) -> Result<u32, LiveError> {
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| LiveError::BurstMap(e))? as u32;
    Ok((cpus * rings * BURST_RING_SLOTS).max(1))
}

/// Rings per CPU the loaded object's `BURSTS` holds.
fn rings_per_cpu(ebpf: &Ebpf) -> Result<u32, LiveError> {
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| LiveError::BurstMap(e))? as u32;
    let map = ebpf.map(maps::BURSTS).ok_or(LiveError::BadMap {
        map: maps::BURSTS,
        problem: "missing",
    })?;
    let entries = match map {
        aya::maps::Map::Array(data) => data
            .info()
            .map_err(|e| LiveError::MapAccess {
                map: maps::BURSTS,
                source: e,
            })?
            .max_entries(),
        _ => {
            return Err(LiveError::BadMap {
                map: maps::BURSTS,
                problem: "not an array",
            });
        }
    };
    Ok(entries / (cpus * BURST_RING_SLOTS))
}

/// Refuses `name` (`ifindex`) when one of `others` (name, ifindex) has the same entry in the
/// kernel's ifindex-modulo interface array.
pub(super) fn check_entry_clash<'a>(
    mut others: impl Iterator<Item = (&'a str, u32)>,
    name: &str,
    ifindex: u32,
) -> Result<(), LiveError> {
    let entry = ifindex % BURST_IFACE_SLOTS;
    match others.find(|(_, o)| o % BURST_IFACE_SLOTS == entry) {
        Some((other, _)) => Err(LiveError::EntryClash {
            first: other.to_string(),
            second: name.to_string(),
            entry,
        }),
        None => Ok(()),
    }
}

fn burst_ifaces(
    ebpf: &mut Ebpf,
) -> Result<aya::maps::Array<&mut aya::maps::MapData, BurstIface>, LiveError> {
    aya::maps::Array::try_from(ebpf.map_mut(maps::BURST_IFACES).ok_or(LiveError::BadMap {
        map: maps::BURST_IFACES,
        problem: "missing",
    })?)
    .map_err(LiveError::InterfaceMap)
}

/// Zeroes the per-interface counters of interface slot `slot` (no interface is registered
/// there: nothing writes them meanwhile).
pub(super) fn zero_iface_counters(ebpf: &mut Ebpf, slot: usize) -> Result<(), LiveError> {
    let fail = |source: MapError| LiveError::MapAccess {
        map: maps::IFACE_COUNTERS,
        source,
    };
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| fail(e.into()))?;
    let mut counters: PerCpuArray<_, IfaceCounters> = PerCpuArray::try_from(
        ebpf.map_mut(maps::IFACE_COUNTERS)
            .ok_or(LiveError::BadMap {
                map: maps::IFACE_COUNTERS,
                problem: "missing",
            })?,
    )
    .map_err(fail)?;
    for dir in 0..2 {
        let zero = aya::maps::PerCpuValues::try_from(vec![IfaceCounters::default(); cpus])
            .map_err(|e| fail(e.into()))?;
        counters.set(2 * slot as u32 + dir, zero, 0).map_err(fail)?;
    }
    Ok(())
}

/// Points the kernel's entry for `ifindex` at interface slot `slot`, in `BURSTS` of `rings`
/// rings per CPU (0: no slots kept).
pub(super) fn register_interface(
    ebpf: &mut Ebpf,
    slot: usize,
    ifindex: u32,
    rings: u32,
) -> Result<(), LiveError> {
    let value = BurstIface {
        ring: 2 * slot as u32,
        ifindex,
        rings,
        _pad: 0,
    };
    burst_ifaces(ebpf)?
        .set(ifindex % BURST_IFACE_SLOTS, value, 0)
        .map_err(LiveError::InterfaceMap)
}

/// Clears the kernel's entry for `ifindex` (if it is still that interface's).
pub(super) fn unregister_interface(ebpf: &mut Ebpf, ifindex: u32) {
    if let Ok(mut ifaces) = burst_ifaces(ebpf) {
        let at = ifindex % BURST_IFACE_SLOTS;
        if ifaces.get(&at, 0).is_ok_and(|v| v.ifindex == ifindex) {
            let _ = ifaces.set(at, BurstIface::default(), 0);
        }
    }
}

/// The span of the clock's slot `tick` at `now_slot`, as the clock would log it if it moved on
/// now: until `now_slot` when that is more than the next slot, else one slot.
fn last_span(tick: u64, now_slot: u64) -> u64 {
    match now_slot.saturating_sub(tick) {
        late @ 2.. => late,
        _ => 1,
    }
}

/// What reading a ring slot found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotRead {
    /// A slot's wire bytes (non-zero): the frames of `slots` slots' time from `slot` on. More
    /// than one when the kernel clock's timer ran late and its tick stood at `slot` that long:
    /// where in that time the frames came is not known.
    Bytes { slot: u64, bytes: u64, slots: u64 },
    /// Slots the ring had reused before they were read.
    Lost(u64),
}

/// A map's value area (BPF_F_MMAPABLE) mapped into this process, shared with the kernel.
struct Mapped<T> {
    ptr: std::ptr::NonNull<T>,
    len_bytes: usize,
}

impl<T> Mapped<T> {
    /// The first `entries` values of the array map `name` of `ebpf`.
    fn new(ebpf: &Ebpf, name: &'static str, entries: usize) -> Result<Self, LiveError> {
        use std::os::fd::AsFd;
        let data = match super::maps::map(ebpf, name)? {
            aya::maps::Map::Array(data) => data,
            _ => {
                return Err(LiveError::BadMap {
                    map: name,
                    problem: "not an array",
                });
            }
        };
        let len_bytes = entries * std::mem::size_of::<T>();
        // SAFETY: mapping the map's value area, which stays as long as the map (the mapping
        // holds a reference to it).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                data.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(LiveError::BurstMap(io::Error::last_os_error()));
        }
        Ok(Self {
            ptr: std::ptr::NonNull::new(ptr.cast()).expect("mmap succeeded"),
            len_bytes,
        })
    }
}

impl<T> Drop for Mapped<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len_bytes) };
    }
}

/// The kernel's microburst rings, mapped into this process: reads complete slots in order,
/// summed over the CPUs' rings, and zeroes them for the ring's next turn.
///
/// Which slots are complete is told by the kernel's own clock (its tick, [`read_clock`]), not
/// by this process's: a frame takes the slot of the tick it reads, and a BPF timer that runs
/// late (a busy or virtual CPU) leaves that tick behind CLOCK_MONOTONIC for as long; a slot
/// read by the time of this process would be read before the frames still arriving in it. How
/// long the tick stood at a slot when that was longer than a slot the clock logs
/// (`BURST_SPANS`); the reader takes the log's new records at each drain and each slot's span
/// with its bytes.
///
/// [`read_clock`]: super::read_clock
pub struct BurstReader {
    slots: Mapped<BurstSlot>,
    spans: Mapped<BurstSpan>,
    /// Rings per CPU, and CPUs.
    rings: usize,
    cpus: usize,
    slot_ns: u64,
    /// The next slot to read (of every ring: they are read slot by slot together).
    next: u64,
    /// Records of the span log taken so far, and those of slots still to read (slot -> the
    /// tick that followed it).
    spans_taken: u64,
    pending: std::collections::BTreeMap<u64, u64>,
    /// The kernel clock's tick at the last live drain.
    tick_seen: Option<u64>,
}

// SAFETY: the mappings are owned by the reader and only touched through &mut self.
unsafe impl Send for BurstReader {}

impl BurstReader {
    /// The rings of a loaded object whose slots [`observe_bursts`] started (for a bare loaded
    /// object, as the kernel tests use; the observer has
    /// [`Observer::burst_reader`](super::Observer::burst_reader)).
    pub fn of_object(ebpf: &Ebpf, slot_ns: u64) -> Result<Self, LiveError> {
        Self::new(ebpf, rings_per_cpu(ebpf)? as usize, slot_ns)
    }

    /// The `rings` rings per CPU of `ebpf`'s slots of `slot_ns`, read from the kernel clock's
    /// slot now on.
    pub(super) fn new(ebpf: &Ebpf, rings: usize, slot_ns: u64) -> Result<Self, LiveError> {
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| LiveError::BurstMap(e))?;
        let clock = super::read_clock(ebpf)?.clock;
        Ok(Self {
            slots: Mapped::new(ebpf, maps::BURSTS, cpus * rings * BURST_RING_SLOTS as usize)?,
            spans: Mapped::new(ebpf, maps::BURST_SPANS, BURST_SPAN_LOG as usize)?,
            rings,
            cpus,
            slot_ns,
            next: clock.tick,
            spans_taken: clock.spans,
            pending: Default::default(),
            tick_seen: None,
        })
    }

    pub fn slot_ns(&self) -> u64 {
        self.slot_ns
    }

    /// How often to drain so that no slot is reused before it is read: a quarter of a ring.
    pub fn period(&self) -> std::time::Duration {
        std::time::Duration::from_nanos((self.slot_ns * BURST_RING_SLOTS as u64 / 4).max(1))
    }

    /// Takes the span log's records up to `count` (`Clock::spans`). Those more than half the
    /// log back are left: the clock may be writing over the oldest as they are read, and their
    /// slots are half a ring or more behind (read or lost by now).
    fn take_spans(&mut self, count: u64) {
        let log = u64::from(BURST_SPAN_LOG);
        // A clock value written back from an older copy (a restart) counts from there on.
        self.spans_taken = self.spans_taken.min(count);
        for n in self.spans_taken.max(count.saturating_sub(log / 2))..count {
            // SAFETY: n % log < BURST_SPAN_LOG, inside the mapping; the clock wrote record n
            // before counting it, and rewrites it only after `log` records more.
            let (slot, end) = unsafe {
                let e = self.spans.ptr.as_ptr().add((n % log) as usize);
                (
                    std::ptr::read_volatile(&raw const (*e).slot),
                    std::ptr::read_volatile(&raw const (*e).end),
                )
            };
            self.pending.insert(slot, end);
        }
        self.spans_taken = count;
    }

    /// Slots' time the frames of slot `s` came over: until the tick moved on, as the clock
    /// logged it when that was more than one slot on; 1 without a record.
    fn span(&self, s: u64) -> u64 {
        self.pending
            .get(&s)
            .map_or(1, |end| end.saturating_sub(s).max(1))
    }

    /// Reads every ring's complete slots while attached: those the kernel clock (`clock`,
    /// [`read_clock`](super::read_clock)) has moved on from twice since, or once before the
    /// last drain (its tick has stood since). A frame that read the tick just before it moved
    /// on has had a tick's time (or a drain's) to add its bytes.
    pub fn drain(&mut self, clock: &Clock, f: impl FnMut(usize, SlotRead)) {
        self.take_spans(clock.spans);
        let upto = if self.tick_seen == Some(clock.tick) {
            clock.tick
        } else {
            clock.tick.saturating_sub(1)
        };
        self.tick_seen = Some(clock.tick);
        self.read(upto, None, f);
    }

    /// Reads every slot left, once detached (no frame comes any more): those up to the kernel
    /// clock's slot (`clock`), which frames took until now (`now_slot`, the slot of
    /// CLOCK_MONOTONIC now). As the clock would have logged it, that slot spans until
    /// `now_slot` when the timer is more than a slot late, else it is one slot.
    pub fn drain_all(&mut self, clock: &Clock, now_slot: u64, f: impl FnMut(usize, SlotRead)) {
        self.take_spans(clock.spans);
        self.read(clock.tick + 1, Some(last_span(clock.tick, now_slot)), f);
    }

    /// Reads every ring's slots before `upto` (exclusive): `f(ring, what)`. Live (`last`
    /// None), a slot whose span ends after `upto` waits; detached, the slot `upto - 1` spans
    /// `last` slots unless the clock recorded its span.
    fn read(&mut self, upto: u64, last: Option<u64>, mut f: impl FnMut(usize, SlotRead)) {
        use std::sync::atomic::{AtomicU64, Ordering};
        let ring_len = BURST_RING_SLOTS as u64;
        // Per ring, slots in a row whose entry the ring had reused for a later slot on some
        // CPU.
        let mut lost = vec![0; self.rings];
        let mut s = self.next;
        while s < upto {
            let mut slots = self.span(s);
            match last {
                None if s + slots > upto => break,
                Some(n) if s + 1 == upto && slots == 1 => slots = n,
                _ => {}
            }
            for (ring, lost) in lost.iter_mut().enumerate() {
                let (mut bytes, mut reused) = (0, false);
                for cpu in 0..self.cpus {
                    let i = (cpu * self.rings + ring) * BURST_RING_SLOTS as usize
                        + (s % ring_len) as usize;
                    // SAFETY: i < cpus * rings * BURST_RING_SLOTS, inside the mapping; a
                    // complete slot is no longer written by its CPU (whose plain stores wrote
                    // the tag, then the bytes).
                    unsafe {
                        let e = self.slots.ptr.as_ptr().add(i);
                        let tag = std::ptr::read_volatile(&raw const (*e).slot);
                        if tag == s {
                            bytes +=
                                AtomicU64::from_ptr(&raw mut (*e).bytes).swap(0, Ordering::AcqRel);
                        } else if tag > s {
                            reused = true;
                        }
                    }
                }
                if reused {
                    *lost += slots;
                }
                if *lost > 0 && (!reused || bytes > 0) {
                    f(ring, SlotRead::Lost(std::mem::take(lost)));
                }
                if bytes > 0 {
                    f(
                        ring,
                        SlotRead::Bytes {
                            slot: s,
                            bytes,
                            slots,
                        },
                    );
                }
            }
            // The tick never stood at the slots a span covers.
            s += slots;
        }
        for (ring, lost) in lost.into_iter().enumerate() {
            if lost > 0 {
                f(ring, SlotRead::Lost(lost));
            }
        }
        self.next = s.max(self.next);
        self.pending = self.pending.split_off(&self.next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Detached, the last slot is one slot unless the timer was more than a slot late: an
    /// on-time timer that has not yet run for the slot just begun makes no span.
    #[test]
    fn the_last_slot_spans_only_behind_a_late_timer() {
        assert_eq!(last_span(100, 100), 1);
        assert_eq!(last_span(100, 101), 1);
        assert_eq!(last_span(100, 102), 2);
        assert_eq!(last_span(100, 600), 500);
        assert_eq!(last_span(100, 99), 1, "a clock read after CLOCK_MONOTONIC");
    }

    #[test]
    fn interfaces_in_one_kernel_entry_are_refused() {
        let others = [("eth0", 5), ("eth1", 6)];
        assert!(check_entry_clash(others.iter().copied(), "eth2", 7).is_ok());
        let e = check_entry_clash(others.iter().copied(), "veth9", 5 + BURST_IFACE_SLOTS)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "interfaces 'eth0' and 'veth9' share the kernel's interface entry 5 (ifindex modulo 4096); observe them in two processes"
        );
    }
}
