//! Per-CPU map reads over the raw bpf(2) syscall, for what aya 0.14 lacks: batch lookups
//! (`BPF_MAP_LOOKUP_BATCH`, one syscall per `batch` entries instead of two per entry) and
//! lookup-and-delete on per-CPU hashes.
//!
//! Every function first asks the kernel what the map is (`BPF_OBJ_GET_INFO_BY_FD`) and refuses a
//! map whose type, key size or value size differ from the Rust types: the kernel writes key and
//! value sizes it knows into buffers sized from `K` and `V`, so this check is what keeps a wrong
//! type parameter from corrupting memory.
//!
//! A per-CPU value reaches userspace as one slot per possible CPU, each `round_up(size_of::<V>(),
//! 8)` bytes, into 8-byte-aligned buffers: when a slot is exactly a `V` (its size a multiple of
//! 8, as the flow table's is) callbacks get the values where the kernel wrote them, copied
//! nowhere; otherwise the slots are copied out into a reused `Vec<V>`. Either way the hot path
//! allocates nothing per entry.

use std::{
    io,
    mem::{align_of, size_of},
    ops::Range,
    os::fd::{AsRawFd, BorrowedFd, RawFd},
    sync::OnceLock,
};

use aya::Pod;

const BPF_MAP_LOOKUP_ELEM: u32 = 1;
const BPF_MAP_GET_NEXT_KEY: u32 = 4;
const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
const BPF_MAP_LOOKUP_AND_DELETE_ELEM: u32 = 21;
const BPF_MAP_LOOKUP_BATCH: u32 = 24;

pub(super) const BPF_MAP_TYPE_HASH: u32 = 1;
pub(super) const BPF_MAP_TYPE_ARRAY: u32 = 2;
pub(super) const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;
pub(super) const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
pub(super) const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
pub(super) const BPF_MAP_TYPE_LRU_PERCPU_HASH: u32 = 10;

const PERCPU_HASHES: &[u32] = &[BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_LRU_PERCPU_HASH];
const SHARED_HASHES: &[u32] = &[BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_LRU_HASH];
const PERCPU_ARRAYS: &[u32] = &[BPF_MAP_TYPE_PERCPU_ARRAY];

/// The kernel-internal "operation not supported" some map types return (not in libc).
const ENOTSUPP: i32 = 524;

const POSSIBLE_CPUS: &str = "/sys/devices/system/cpu/possible";

/// A failed bpf(2) operation: which one, on which map, and why.
#[derive(Debug, thiserror::Error)]
#[error("{op}{}: {error}", on_fd(.fd))]
pub struct BpfSysError {
    /// The bpf(2) command (`BPF_MAP_LOOKUP_BATCH`, ...), or what else failed.
    pub op: &'static str,
    /// The map's descriptor; none for what concerns no map (reading the possible CPUs).
    pub fd: Option<RawFd>,
    /// The errno, or a description of a refused map.
    pub error: io::Error,
}

fn on_fd(fd: &Option<RawFd>) -> String {
    fd.map(|fd| format!(" on map fd {fd}")).unwrap_or_default()
}

impl BpfSysError {
    /// The errno when the kernel refused the operation.
    pub fn errno(&self) -> Option<i32> {
        self.error.raw_os_error()
    }

    fn new(op: &'static str, map: BorrowedFd<'_>, error: io::Error) -> Self {
        Self {
            op,
            fd: Some(map.as_raw_fd()),
            error,
        }
    }
}

/// What a walk over a map did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Entries handed to the callback.
    pub entries: u64,
    /// bpf(2) calls made, the map-info query included.
    pub syscalls: u64,
    /// Whether batch lookups were used (false: one key at a time, asked for with `batch` 0 or
    /// because the kernel lacks them).
    pub batched: bool,
}

/// Number of possible CPUs, which per-CPU map values are sized by: the CPUs listed in
/// /sys/devices/system/cpu/possible (e.g. "0-1", "0,2-3"). Read once, then cached (the set is
/// fixed at boot).
pub fn possible_cpus() -> Result<usize, BpfSysError> {
    static CPUS: OnceLock<usize> = OnceLock::new();
    if let Some(n) = CPUS.get() {
        return Ok(*n);
    }
    let fail = |error| BpfSysError {
        op: "reading /sys/devices/system/cpu/possible",
        fd: None,
        error,
    };
    let text = std::fs::read_to_string(POSSIBLE_CPUS).map_err(fail)?;
    let n = parse_cpu_list(&text).ok_or_else(|| {
        fail(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a CPU list: {:?}", text.trim()),
        ))
    })?;
    Ok(*CPUS.get_or_init(|| n))
}

/// The number of CPUs in a kernel CPU list ("0-3", "0,2-3", "0"); none when malformed or empty.
fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in s.trim().split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.parse::<usize>().ok()?, hi.parse::<usize>().ok()?),
            None => {
                let c = part.parse::<usize>().ok()?;
                (c, c)
            }
        };
        if hi < lo {
            return None;
        }
        n = n.checked_add(hi - lo + 1)?;
    }
    Some(n)
}

/// Reads every entry of a per-CPU hash map (`BPF_MAP_TYPE_PERCPU_HASH`, `LRU_PERCPU_HASH`) with
/// `BPF_MAP_LOOKUP_BATCH`, up to `batch` entries per syscall (grown when a hash bucket holds
/// more), calling `f(&key, per_cpu_values)` with one `V` per possible CPU.
///
/// Falls back to `BPF_MAP_GET_NEXT_KEY` + `BPF_MAP_LOOKUP_ELEM` when the kernel lacks batch
/// lookups, or when `batch` is 0. Buffers: `batch` x (key size + round_up(value size, 8) x
/// CPUs) bytes, allocated once per call.
///
/// While programs update the map, a batch walk sees each bucket once (entries added or removed
/// meanwhile may or may not be seen); the key-at-a-time walk restarts from the beginning when
/// its current key is deleted under it, so it can repeat entries.
pub fn percpu_hash_for_each<K: Pod, V: Pod>(
    map: BorrowedFd<'_>,
    batch: u32,
    f: impl FnMut(&K, &[V]),
) -> Result<BatchStats, BpfSysError> {
    hash_walk(map, batch, PERCPU_HASHES, PerCpu::<V>::new()?, f)
}

/// Reads every entry of a shared hash map (`BPF_MAP_TYPE_HASH`, `LRU_HASH`: one value per key)
/// as [`percpu_hash_for_each`] reads a per-CPU one: `BPF_MAP_LOOKUP_BATCH`, `batch` entries per
/// syscall, or a key at a time when the kernel lacks it or `batch` is 0. (aya's iterator takes
/// two syscalls per entry: a map of thousands read every interval costs tens of ms.)
pub fn hash_for_each<K: Pod, V: Pod>(
    map: BorrowedFd<'_>,
    batch: u32,
    mut f: impl FnMut(&K, &V),
) -> Result<BatchStats, BpfSysError> {
    hash_walk(map, batch, SHARED_HASHES, PerCpu::<V>::shared(), |k, v| {
        if let [v] = v {
            f(k, v);
        }
    })
}

/// The walk of a hash map of `types`, its values laid out as `values` says.
fn hash_walk<K: Pod, V: Pod>(
    map: BorrowedFd<'_>,
    batch: u32,
    types: &[u32],
    mut values: PerCpu<V>,
    mut f: impl FnMut(&K, &[V]),
) -> Result<BatchStats, BpfSysError> {
    let op = if batch > 0 {
        "BPF_MAP_LOOKUP_BATCH"
    } else {
        "BPF_MAP_GET_NEXT_KEY"
    };
    let mut stats = BatchStats::default();
    check_map::<K, V>(map, op, types, &mut stats)?;
    if batch > 0 && for_each_batched(map, batch, Walk::Whole, &mut values, &mut stats, &mut f)? {
        return Ok(stats);
    }
    let mut key: Option<K> = None;
    // SAFETY: K is Pod: every bit pattern, zero included, is a valid K.
    let mut next: K = unsafe { std::mem::zeroed() };
    let mut buf = Words::new(values.slot_bytes());
    loop {
        let mut attr = ElemAttr {
            map_fd: map.as_raw_fd() as u32,
            key: key.as_ref().map_or(0, |k| ptr_u64(k)),
            value: &raw mut next as u64,
            ..ElemAttr::default()
        };
        stats.syscalls += 1;
        // SAFETY: key and next are key_size bytes (checked against the map).
        match unsafe { sys_bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) } {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(stats),
            Err(e) => return Err(BpfSysError::new("BPF_MAP_GET_NEXT_KEY", map, e)),
        }
        stats.syscalls += 1;
        // SAFETY: next is key_size bytes, buf the per-CPU value size.
        match unsafe { lookup(map, BPF_MAP_LOOKUP_ELEM, &next, buf.bytes_mut()) } {
            Ok(()) => {
                f(&next, values.decode(buf.bytes()));
                stats.entries += 1;
            }
            // Deleted (or evicted) since get_next_key returned it.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(BpfSysError::new("BPF_MAP_LOOKUP_ELEM", map, e)),
        }
        key = Some(next);
    }
}

/// Reads every entry of a per-CPU array (`BPF_MAP_TYPE_PERCPU_ARRAY`) with
/// `BPF_MAP_LOOKUP_BATCH`, `batch` indices per syscall: `f(index, per_cpu_values)`. Falls back to
/// one `BPF_MAP_LOOKUP_ELEM` per index when the kernel lacks batch lookups, or when `batch` is 0.
pub fn percpu_array_for_each<V: Pod>(
    map: BorrowedFd<'_>,
    batch: u32,
    mut f: impl FnMut(u32, &[V]),
) -> Result<BatchStats, BpfSysError> {
    let op = if batch > 0 {
        "BPF_MAP_LOOKUP_BATCH"
    } else {
        "BPF_MAP_LOOKUP_ELEM"
    };
    let mut stats = BatchStats::default();
    let info = check_map::<u32, V>(map, op, PERCPU_ARRAYS, &mut stats)?;
    let mut values = PerCpu::<V>::new()?;
    if batch > 0
        && for_each_batched(
            map,
            batch,
            Walk::Whole,
            &mut values,
            &mut stats,
            &mut |i: &u32, v: &[V]| f(*i, v),
        )?
    {
        return Ok(stats);
    }
    let mut buf = Words::new(values.slot_bytes());
    for i in 0..info.max_entries {
        stats.syscalls += 1;
        // SAFETY: i is the 4-byte key, buf the per-CPU value size.
        unsafe { lookup(map, BPF_MAP_LOOKUP_ELEM, &i, buf.bytes_mut()) }
            .map_err(|e| BpfSysError::new("BPF_MAP_LOOKUP_ELEM", map, e))?;
        f(i, values.decode(buf.bytes()));
        stats.entries += 1;
    }
    Ok(stats)
}

/// `BPF_MAP_LOOKUP_AND_DELETE_ELEM` on a per-CPU hash (kernel 5.14+): the entry's per-CPU
/// values, removed from the map; `None` when the key is absent.
pub fn percpu_hash_take<K: Pod, V: Pod>(
    map: BorrowedFd<'_>,
    key: &K,
) -> Result<Option<Vec<V>>, BpfSysError> {
    const OP: &str = "BPF_MAP_LOOKUP_AND_DELETE_ELEM";
    check_map::<K, V>(map, OP, PERCPU_HASHES, &mut BatchStats::default())?;
    let mut values = PerCpu::<V>::new()?;
    let mut buf = Words::new(values.slot_bytes());
    // SAFETY: key is key_size bytes (checked), buf the per-CPU value size.
    match unsafe { lookup(map, BPF_MAP_LOOKUP_AND_DELETE_ELEM, key, buf.bytes_mut()) } {
        Ok(()) => Ok(Some(values.decode(buf.bytes()).to_vec())),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(BpfSysError::new(OP, map, e)),
    }
}

/// `BPF_MAP_LOOKUP_ELEM` of each of `keys` in a per-CPU hash: `f(key, per_cpu_values)`, `None`
/// for a key the map does not hold. One syscall per key: for a few keys out of many, cheaper
/// than a walk.
pub fn percpu_hash_lookup_each<'k, K: Pod + 'k, V: Pod>(
    map: BorrowedFd<'_>,
    keys: impl IntoIterator<Item = &'k K>,
    mut f: impl FnMut(&K, Option<&[V]>),
) -> Result<BatchStats, BpfSysError> {
    const OP: &str = "BPF_MAP_LOOKUP_ELEM";
    let mut stats = BatchStats::default();
    check_map::<K, V>(map, OP, PERCPU_HASHES, &mut stats)?;
    let mut values = PerCpu::<V>::new()?;
    let mut buf = Words::new(values.slot_bytes());
    for key in keys {
        stats.syscalls += 1;
        // SAFETY: key is key_size bytes (checked), buf the per-CPU value size.
        match unsafe { lookup(map, BPF_MAP_LOOKUP_ELEM, key, buf.bytes_mut()) } {
            Ok(()) => {
                f(key, Some(values.decode(buf.bytes())));
                stats.entries += 1;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => f(key, None),
            Err(e) => return Err(BpfSysError::new(OP, map, e)),
        }
    }
    Ok(stats)
}

/// Reads indices `range` of a per-CPU array with `BPF_MAP_LOOKUP_BATCH`, `batch` indices per
/// syscall (one `BPF_MAP_LOOKUP_ELEM` per index without batch lookups, or with `batch` 0):
/// `f(index, per_cpu_values)`. Indices past the array's end are not read.
pub fn percpu_array_for_each_in<V: Pod>(
    map: BorrowedFd<'_>,
    batch: u32,
    range: Range<u32>,
    mut f: impl FnMut(u32, &[V]),
) -> Result<BatchStats, BpfSysError> {
    const OP: &str = "BPF_MAP_LOOKUP_BATCH";
    let mut stats = BatchStats::default();
    let info = check_map::<u32, V>(map, OP, PERCPU_ARRAYS, &mut stats)?;
    let range = range.start..range.end.min(info.max_entries);
    let mut values = PerCpu::<V>::new()?;
    if range.is_empty() {
        return Ok(stats);
    }
    if batch > 0
        && for_each_batched(
            map,
            batch,
            Walk::Indices(range.clone()),
            &mut values,
            &mut stats,
            &mut |i: &u32, v: &[V]| f(*i, v),
        )?
    {
        return Ok(stats);
    }
    let mut buf = Words::new(values.slot_bytes());
    for i in range {
        stats.syscalls += 1;
        // SAFETY: i is the 4-byte key, buf the per-CPU value size.
        unsafe { lookup(map, BPF_MAP_LOOKUP_ELEM, &i, buf.bytes_mut()) }
            .map_err(|e| BpfSysError::new("BPF_MAP_LOOKUP_ELEM", map, e))?;
        f(i, values.decode(buf.bytes()));
        stats.entries += 1;
    }
    Ok(stats)
}

/// `BPF_MAP_LOOKUP_ELEM` of index `index` of a per-CPU array: one `V` per possible CPU.
pub fn percpu_array_get<V: Pod>(map: BorrowedFd<'_>, index: u32) -> Result<Vec<V>, BpfSysError> {
    const OP: &str = "BPF_MAP_LOOKUP_ELEM";
    let info = check_map::<u32, V>(map, OP, PERCPU_ARRAYS, &mut BatchStats::default())?;
    if index >= info.max_entries {
        return Err(BpfSysError::new(
            OP,
            map,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "index {index} out of range (the array has {} entries)",
                    info.max_entries
                ),
            ),
        ));
    }
    let mut values = PerCpu::<V>::new()?;
    let mut buf = Words::new(values.slot_bytes());
    // SAFETY: index is the 4-byte key, buf the per-CPU value size.
    unsafe { lookup(map, BPF_MAP_LOOKUP_ELEM, &index, buf.bytes_mut()) }
        .map_err(|e| BpfSysError::new(OP, map, e))?;
    Ok(values.decode(buf.bytes()).to_vec())
}

/// Buckets of a hash map (`PERCPU_HASH` or `LRU_PERCPU_HASH` of these key and value types): its
/// capacity rounded up to a power of two, as the kernel sizes the bucket array. The positions
/// [`percpu_hash_for_each_in`] takes are bucket indices below this.
pub fn hash_buckets<K: Pod, V: Pod>(map: BorrowedFd<'_>) -> Result<u32, BpfSysError> {
    let info = check_map::<K, V>(
        map,
        "BPF_OBJ_GET_INFO_BY_FD",
        PERCPU_HASHES,
        &mut BatchStats::default(),
    )?;
    Ok(info
        .max_entries
        .checked_next_power_of_two()
        .unwrap_or(1 << 31))
}

/// [`percpu_hash_for_each`] over a range of hash buckets: from bucket `buckets.start` until a
/// batch ends at or past bucket `buckets.end` (or the map ends), so that several threads can
/// read one map side by side, each its share of the buckets.
///
/// The position a batch lookup takes and returns for a hash map is the index of the next bucket
/// to read (kernel/bpf/hashtab.c, since batch lookups exist, 5.6); the uAPI calls it opaque, and
/// this is the one place that relies on more. A batch holds whole buckets, so the last one may
/// run past `buckets.end`: entries of the buckets just past it can come both from here and from
/// the walk of the next range, read at two instants; a caller that joins ranges keeps one of
/// the two. Without batch lookups in the kernel (or with `batch` 0) the whole map is walked one
/// key at a time when the range starts at 0, and nothing is read otherwise.
pub fn percpu_hash_for_each_in<K: Pod, V: Pod>(
    map: BorrowedFd<'_>,
    batch: u32,
    buckets: Range<u32>,
    mut f: impl FnMut(&K, &[V]),
) -> Result<BatchStats, BpfSysError> {
    if buckets.start == 0 && buckets.end == u32::MAX {
        return percpu_hash_for_each(map, batch, f);
    }
    let mut stats = BatchStats::default();
    check_map::<K, V>(map, "BPF_MAP_LOOKUP_BATCH", PERCPU_HASHES, &mut stats)?;
    if buckets.is_empty() {
        return Ok(stats);
    }
    let mut values = PerCpu::<V>::new()?;
    if batch > 0
        && for_each_batched(
            map,
            batch,
            Walk::Buckets(buckets.clone()),
            &mut values,
            &mut stats,
            &mut f,
        )?
    {
        return Ok(stats);
    }
    // No batch lookups: only one walk (the range from 0) reads, the whole map.
    if buckets.start == 0 {
        let whole = percpu_hash_for_each(map, 0, f)?;
        stats.entries += whole.entries;
        stats.syscalls += whole.syscalls;
    }
    Ok(stats)
}

/// What a batch walk reads.
enum Walk {
    /// The whole map.
    Whole,
    /// A hash map's range of buckets (see [`percpu_hash_for_each_in`]): until a batch ends at
    /// or past its end.
    Buckets(Range<u32>),
    /// An array's range of indices (not empty), and no index past it.
    Indices(Range<u32>),
}

/// The batch walk shared by hashes and arrays: `Ok(false)` when the kernel has no batch lookup
/// for the map (refused on the first call, nothing read yet).
fn for_each_batched<K: Pod, V: Pod>(
    map: BorrowedFd<'_>,
    batch: u32,
    walk: Walk,
    values: &mut PerCpu<V>,
    stats: &mut BatchStats,
    f: &mut impl FnMut(&K, &[V]),
) -> Result<bool, BpfSysError> {
    const OP: &str = "BPF_MAP_LOOKUP_BATCH";
    let fail = |e| BpfSysError::new(OP, map, e);
    let key_size = size_of::<K>();
    let slot = values.slot_bytes();
    // The position token: a u32 bucket index for hashes, the last key for arrays (the generic
    // batch code copies key_size bytes). 8-aligned words, at least 8 bytes.
    let token_bytes = key_size.next_multiple_of(8).max(8);
    let mut token_in = Words::new(token_bytes);
    let mut token_out = Words::new(token_bytes);
    // A walk from a bucket past the first passes its index as the position to go on from; an
    // array's position is the last index read (the generic batch code goes on from the key
    // after it).
    let mut resume = match &walk {
        Walk::Buckets(r) if r.start > 0 => {
            token_in.set_u32(r.start);
            true
        }
        Walk::Indices(r) if r.start > 0 => {
            token_in.set_u32(r.start - 1);
            true
        }
        _ => false,
    };
    // The next index an array's walk reads.
    let mut next = match &walk {
        Walk::Indices(r) => r.start,
        _ => 0,
    };
    let mut count = batch;
    let (mut keys, mut vals) = (Words::default(), Words::default());
    resize(&mut keys, &mut vals, count, key_size, slot).map_err(fail)?;
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if resume { token_in.as_ptr() as u64 } else { 0 },
            out_batch: token_out.as_mut_ptr() as u64,
            keys: keys.as_mut_ptr() as u64,
            values: vals.as_mut_ptr() as u64,
            count: match &walk {
                Walk::Indices(r) => count.min(r.end - next),
                _ => count,
            },
            map_fd: map.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        stats.syscalls += 1;
        // SAFETY: keys and vals hold `count` (>= attr.count) keys and per-CPU values of the
        // sizes the map has (checked); the tokens hold max(key_size, 8) bytes.
        let end = match unsafe { sys_bpf(BPF_MAP_LOOKUP_BATCH, &mut attr) } {
            Ok(_) => false,
            Err(e) => match e.raw_os_error() {
                Some(libc::ENOENT) => true,
                // A hash bucket holds more entries than fit: retry it with room for them.
                Some(libc::ENOSPC) if attr.count == 0 => {
                    count = count.checked_mul(2).ok_or_else(|| fail(e))?;
                    resize(&mut keys, &mut vals, count, key_size, slot).map_err(fail)?;
                    continue;
                }
                Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP) if first => return Ok(false),
                _ => return Err(fail(e)),
            },
        };
        first = false;
        stats.batched = true;
        let n = attr.count.min(count) as usize;
        for (k, v) in keys
            .bytes()
            .chunks_exact(key_size)
            .zip(vals.bytes().chunks_exact(slot))
            .take(n)
        {
            // SAFETY: k holds size_of::<K>() bytes; K is Pod (any bit pattern is valid).
            let key: K = unsafe { std::ptr::read_unaligned(k.as_ptr().cast()) };
            f(&key, values.decode(v));
        }
        stats.entries += n as u64;
        if end {
            return Ok(true);
        }
        if let Walk::Indices(r) = &walk {
            next += n as u32;
            if n == 0 || next >= r.end {
                return Ok(true);
            }
        }
        if n == 0 {
            return Err(fail(io::Error::other(
                "the kernel returned no entries and no end of the map",
            )));
        }
        if let Walk::Buckets(r) = &walk
            && token_out.u32() >= r.end
        {
            return Ok(true);
        }
        std::mem::swap(&mut token_in, &mut token_out);
        resume = true;
    }
}

/// Sizes the batch buffers for `count` entries.
fn resize(
    keys: &mut Words,
    vals: &mut Words,
    count: u32,
    key_size: usize,
    slot: usize,
) -> Result<(), io::Error> {
    let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "batch buffers too large");
    let n = count as usize;
    keys.resize(n.checked_mul(key_size).ok_or_else(too_big)?);
    vals.resize(n.checked_mul(slot).ok_or_else(too_big)?);
    Ok(())
}

/// A byte buffer on 8-byte boundaries, what the kernel writes keys, values and positions into.
#[derive(Default)]
struct Words(Vec<u64>);

impl Words {
    fn new(bytes: usize) -> Self {
        let mut w = Self::default();
        w.resize(bytes);
        w
    }

    /// Room for at least `bytes` bytes.
    fn resize(&mut self, bytes: usize) {
        self.0.resize(bytes.div_ceil(8), 0);
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: u64s are 8 initialized bytes each; u8 has no alignment.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), self.0.len() * 8) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in bytes(); any byte written leaves a valid u64.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.0.len() * 8) }
    }

    fn as_ptr(&self) -> *const u8 {
        self.0.as_ptr().cast()
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr().cast()
    }

    /// The u32 at the start (a hash map's bucket position, in the kernel's byte order).
    fn u32(&self) -> u32 {
        let b = self.bytes();
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }

    fn set_u32(&mut self, v: u32) {
        self.bytes_mut()[..4].copy_from_slice(&v.to_ne_bytes());
    }
}

/// One per-CPU value: the slot layout, and a reused vector the slots are copied into when they
/// cannot be read in place.
struct PerCpu<V> {
    cpus: usize,
    stride: usize,
    out: Vec<V>,
}

impl<V: Pod> PerCpu<V> {
    fn new() -> Result<Self, BpfSysError> {
        let cpus = possible_cpus()?;
        Ok(Self {
            cpus,
            stride: size_of::<V>().next_multiple_of(8),
            out: Vec::with_capacity(cpus),
        })
    }

    /// The one value of a shared map's entry: `value_size` bytes, not rounded.
    fn shared() -> Self {
        Self {
            cpus: 1,
            stride: size_of::<V>(),
            out: Vec::with_capacity(1),
        }
    }

    /// Bytes of one entry's values: a slot per possible CPU.
    fn slot_bytes(&self) -> usize {
        self.stride * self.cpus
    }

    /// The values in the CPU slots of `bytes` (at least `slot_bytes`): in place when a slot is
    /// exactly a `V` and `bytes` is aligned for it (the buffers are 8-aligned and slots a
    /// multiple of 8), else copied out.
    fn decode<'a>(&'a mut self, bytes: &'a [u8]) -> &'a [V] {
        let in_place = self.stride == size_of::<V>()
            && align_of::<V>() <= 8
            && bytes.len() >= self.slot_bytes()
            && (bytes.as_ptr() as usize).is_multiple_of(align_of::<V>());
        if in_place {
            // SAFETY: `cpus` consecutive V-sized slots, aligned for V, inside `bytes`, which
            // this borrow keeps alive and unchanged; V is Pod (any bit pattern is valid).
            return unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast(), self.cpus) };
        }
        self.out.clear();
        for slot in bytes.chunks_exact(self.stride).take(self.cpus) {
            // SAFETY: a slot holds at least size_of::<V>() bytes; V is Pod.
            self.out
                .push(unsafe { std::ptr::read_unaligned(slot.as_ptr().cast()) });
        }
        &self.out
    }
}

/// The map's type and sizes, checked against what the caller expects.
fn check_map<K, V>(
    map: BorrowedFd<'_>,
    op: &'static str,
    types: &[u32],
    stats: &mut BatchStats,
) -> Result<MapInfo, BpfSysError> {
    let mut info = MapInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: map.as_raw_fd() as u32,
        info_len: size_of::<MapInfo>() as u32,
        info: &raw mut info as u64,
    };
    stats.syscalls += 1;
    // SAFETY: info is info_len bytes.
    unsafe { sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }
        .map_err(|e| BpfSysError::new("BPF_OBJ_GET_INFO_BY_FD", map, e))?;
    let (key_size, value_size) = (size_of::<K>(), size_of::<V>());
    if types.contains(&info.map_type)
        && info.key_size as usize == key_size
        && info.value_size as usize == value_size
        && key_size > 0
        && value_size > 0
    {
        return Ok(info);
    }
    let wanted = if types == PERCPU_ARRAYS {
        "PERCPU_ARRAY"
    } else if types == SHARED_HASHES {
        "HASH or LRU_HASH"
    } else {
        "PERCPU_HASH or LRU_PERCPU_HASH"
    };
    Err(BpfSysError::new(
        op,
        map,
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "expected a {wanted} map of {key_size}-byte keys and {value_size}-byte values, found a {} map of {}-byte keys and {}-byte values",
                type_name(info.map_type),
                info.key_size,
                info.value_size
            ),
        ),
    ))
}

fn type_name(t: u32) -> String {
    match t {
        BPF_MAP_TYPE_HASH => "HASH".into(),
        BPF_MAP_TYPE_ARRAY => "ARRAY".into(),
        BPF_MAP_TYPE_PERCPU_HASH => "PERCPU_HASH".into(),
        BPF_MAP_TYPE_PERCPU_ARRAY => "PERCPU_ARRAY".into(),
        BPF_MAP_TYPE_LRU_HASH => "LRU_HASH".into(),
        BPF_MAP_TYPE_LRU_PERCPU_HASH => "LRU_PERCPU_HASH".into(),
        t => format!("type-{t}"),
    }
}

/// A `BPF_MAP_*_ELEM` command on `key`, the value (per-CPU slots) into `value`.
///
/// # Safety
/// `K` and `value` must have the map's key size and per-CPU value size.
unsafe fn lookup<K>(
    map: BorrowedFd<'_>,
    cmd: u32,
    key: &K,
    value: &mut [u8],
) -> Result<(), io::Error> {
    let mut attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: ptr_u64(key),
        value: value.as_mut_ptr() as u64,
        ..ElemAttr::default()
    };
    // SAFETY: the caller's contract.
    unsafe { sys_bpf(cmd, &mut attr) }.map(|_| ())
}

fn ptr_u64<T>(p: &T) -> u64 {
    std::ptr::from_ref(p) as u64
}

/// bpf(2) with `attr` as a prefix of `union bpf_attr` (the kernel zero-fills the rest).
///
/// The bpf(2) system call with `attr` (a `bpf_attr` prefix): its non-negative result (a new
/// fd for the commands that create one).
///
/// # Safety
/// The pointers in `attr` must be valid for what the kernel reads and writes for `cmd`.
pub unsafe fn sys_bpf<A>(cmd: u32, attr: &mut A) -> Result<libc::c_long, io::Error> {
    // SAFETY: attr is a live #[repr(C)] bpf_attr prefix of size_of::<A>() bytes; the pointers
    // inside are the caller's contract.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            (attr as *mut A).cast::<libc::c_void>(),
            size_of::<A>() as libc::c_long,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `union bpf_attr` for `BPF_MAP_*_ELEM` and `BPF_MAP_GET_NEXT_KEY` (`value` is `next_key`).
#[repr(C, align(8))]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_MAP_*_BATCH`.
#[repr(C, align(8))]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C, align(8))]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The head of `struct bpf_map_info` (the kernel fills up to `info_len`).
#[repr(C, align(8))]
#[derive(Default)]
struct MapInfo {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

/// `struct bpf_map_info` up to its name.
#[repr(C, align(8))]
#[derive(Default)]
struct MapInfoNamed {
    head: MapInfo,
    name: [u8; 16],
}

/// The id and name of the map `map` (the kernel's, at most 15 bytes), from the map's own
/// descriptor: unlike a lookup by id, this needs no capability.
pub fn map_id_and_name(map: BorrowedFd<'_>) -> Result<(u32, String), BpfSysError> {
    let mut info = MapInfoNamed::default();
    let mut attr = InfoAttr {
        bpf_fd: map.as_raw_fd() as u32,
        info_len: size_of::<MapInfoNamed>() as u32,
        info: &raw mut info as u64,
    };
    // SAFETY: info is info_len bytes.
    unsafe { sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }
        .map_err(|e| BpfSysError::new("BPF_OBJ_GET_INFO_BY_FD", map, e))?;
    let len = info
        .name
        .iter()
        .position(|b| *b == 0)
        .unwrap_or(info.name.len());
    Ok((
        info.head.id,
        String::from_utf8_lossy(&info.name[..len]).into_owned(),
    ))
}

const _: () = assert!(size_of::<MapInfoNamed>() == 40);
const _: () = assert!(size_of::<ElemAttr>() == 32);
const _: () = assert!(size_of::<BatchAttr>() == 56);
const _: () = assert!(size_of::<InfoAttr>() == 16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list("0,2-3"), Some(3));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-63,128-191\n"), Some(128));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("0-x"), None);
        assert_eq!(parse_cpu_list("0,,1"), None);
    }

    #[test]
    fn error_is_one_line_naming_the_operation() {
        let e = BpfSysError {
            op: "BPF_MAP_LOOKUP_BATCH",
            fd: Some(7),
            error: io::Error::from_raw_os_error(libc::EINVAL),
        };
        assert_eq!(
            e.to_string(),
            "BPF_MAP_LOOKUP_BATCH on map fd 7: Invalid argument (os error 22)"
        );
        assert_eq!(e.errno(), Some(libc::EINVAL));
    }
}
