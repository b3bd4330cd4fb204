//! The kernel memory of a process's BPF maps as the kernel accounts it (each map's `memlock` in
//! its descriptor's fdinfo: `bpf_map_memory_usage`, what the map's `map_mem_usage` counts), and
//! a model of the same accounting: what of it grows with the number of possible CPUs. No
//! library reads either: fdinfo is a text file of the kernel's, and the model follows
//! `htab_map_mem_usage` (kernel/bpf/hashtab.c), `array_map_mem_usage` (arraymap.c) and
//! `cpu_map_mem_usage` (cpumap.c) of Linux 6.4 and later (before, `memlock` was a rounder
//! estimate, and the model is within several percent of it). What the kernel allocates later
//! and does not count (a cpumap entry's queue and thread, the LRU's per-CPU lists) is in
//! neither.

use std::collections::BTreeMap;

use super::bpfsys::{
    BPF_MAP_TYPE_ARRAY as ARRAY, BPF_MAP_TYPE_HASH as HASH, BPF_MAP_TYPE_LRU_HASH as LRU_HASH,
    BPF_MAP_TYPE_LRU_PERCPU_HASH as LRU_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY as PERCPU_ARRAY,
    BPF_MAP_TYPE_PERCPU_HASH as PERCPU_HASH,
};

const CPUMAP: u32 = 16;
/// `BPF_F_NO_PREALLOC`: a hash that allocates its elements as they come.
const NO_PREALLOC: u32 = 1;
/// `BPF_F_MMAPABLE`: an array whose values are whole pages.
const MMAPABLE: u32 = 1 << 10;
/// `HASHTAB_MAP_LOCK_COUNT`: a hash map's per-CPU lock counters.
const HASH_LOCKS: u64 = 8;
/// The kernel's own structures, 64-bit: `struct htab_elem` before its key, `struct bucket`.
const HTAB_ELEM: u64 = 48;
const BUCKET: u64 = 16;
const PAGE: u64 = 4096;

/// One BPF map a process holds open, with the kernel's accounting of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapMemory {
    pub id: u32,
    /// As the kernel keeps it (at most 15 bytes); `map-<id>` when it could not be read.
    pub name: String,
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    /// The kernel's accounting (`memlock`), bytes.
    pub bytes: u64,
    /// The entries per possible CPU of a map the loader sizes by the CPUs (the microburst
    /// rings, the spreading cpumap); none: a fixed size.
    pub entries_per_cpu: Option<u32>,
}

/// The maps the loader sizes by the possible CPUs.
const CPU_SIZED: [&str; 2] = [
    observer_common::maps::BURSTS,
    observer_common::maps::SPREAD_CPUS,
];

/// The BPF maps process `pid` holds open (none: this process), each once however many
/// descriptors it has open, by id. This process's maps are named from their own descriptors
/// (no capability needed); another's by id, which takes CAP_SYS_ADMIN (`map-<id>` without).
pub fn open_maps(pid: Option<u32>) -> std::io::Result<Vec<MapMemory>> {
    let dir = match pid {
        Some(p) => format!("/proc/{p}/fdinfo"),
        None => "/proc/self/fdinfo".into(),
    };
    let cpus = super::bpfsys::possible_cpus().map_err(std::io::Error::other)? as u32;
    let mut by_id = BTreeMap::new();
    for entry in std::fs::read_dir(&dir)? {
        let entry = entry?;
        // A descriptor closed meanwhile is not one of them.
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Some(mut m) = parse_fdinfo(&text) else {
            continue;
        };
        let own = entry
            .file_name()
            .to_str()
            .and_then(|f| f.parse::<std::os::fd::RawFd>().ok())
            .filter(|_| pid.is_none())
            .and_then(|fd| {
                // SAFETY: a descriptor of this process, borrowed for one syscall; one closed or
                // reused meanwhile fails it or names another id, which is checked.
                let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                super::bpfsys::map_id_and_name(fd).ok()
            })
            .filter(|(id, _)| *id == m.id)
            .map(|(_, name)| name);
        m.name = own
            .or_else(|| {
                aya::maps::MapInfo::from_id(m.id)
                    .ok()
                    .and_then(|i| i.name_as_str().map(str::to_string))
            })
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| format!("map-{}", m.id));
        if CPU_SIZED.contains(&m.name.as_str()) && cpus > 0 {
            m.entries_per_cpu = Some(m.max_entries / cpus);
        }
        by_id.insert(m.id, m);
    }
    Ok(by_id.into_values().collect())
}

/// A map descriptor's fdinfo; none for any other descriptor's.
fn parse_fdinfo(text: &str) -> Option<MapMemory> {
    let field = |k: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .and_then(|v| {
                let v = v.trim();
                match v.strip_prefix("0x") {
                    Some(hex) => u64::from_str_radix(hex, 16).ok(),
                    None => v.parse().ok(),
                }
            })
    };
    let u32_of = |k: &str| field(k).and_then(|v| u32::try_from(v).ok());
    Some(MapMemory {
        id: u32_of("map_id")?,
        name: String::new(),
        map_type: u32_of("map_type")?,
        key_size: u32_of("key_size")?,
        value_size: u32_of("value_size")?,
        max_entries: u32_of("max_entries")?,
        map_flags: u32_of("map_flags").unwrap_or(0),
        bytes: field("memlock")?,
        entries_per_cpu: None,
    })
}

fn round8(n: u32) -> u64 {
    u64::from(n).div_ceil(8) * 8
}

impl MapMemory {
    /// The kernel's accounting of this map on a host of `cpus` possible CPUs, as the model
    /// gives it: a preallocated hash's buckets, elements, per-CPU values and locks; an
    /// array's values (per CPU for a per-CPU array); a cpumap's entries; a map the loader
    /// sizes by the CPUs with as many entries more. Only the kernel's fixed header of each map
    /// (a few hundred bytes) is left out; a map of any other type is what the kernel says
    /// here, whatever `cpus`, and so is a hash that allocates as it goes (this observer has
    /// none: the kernel would count its elements as they are, per CPU for a per-CPU one).
    pub fn model(&self, cpus: u64) -> u64 {
        let entries = match self.entries_per_cpu {
            Some(per) => u64::from(per) * cpus,
            None => u64::from(self.max_entries),
        };
        let value = round8(self.value_size);
        match self.map_type {
            HASH | PERCPU_HASH | LRU_HASH | LRU_PERCPU_HASH
                if self.map_flags & NO_PREALLOC == 0 =>
            {
                let percpu = matches!(self.map_type, PERCPU_HASH | LRU_PERCPU_HASH);
                let lru = matches!(self.map_type, LRU_HASH | LRU_PERCPU_HASH);
                let elem = HTAB_ELEM + round8(self.key_size) + if percpu { 8 } else { value };
                // A plain hash keeps an extra element per CPU for updates in place.
                let elems = if percpu || lru {
                    entries
                } else {
                    entries + cpus
                };
                let mut usage =
                    BUCKET * entries.next_power_of_two() + 4 * cpus * HASH_LOCKS + elem * elems;
                if percpu {
                    usage += value * cpus * elems;
                } else if !lru {
                    usage += 8 * cpus;
                }
                usage
            }
            PERCPU_ARRAY => entries * 8 + entries * value * cpus,
            ARRAY if self.map_flags & MMAPABLE != 0 => (entries * value).div_ceil(PAGE) * PAGE,
            ARRAY => entries * value,
            CPUMAP => entries * 8,
            _ => self.bytes,
        }
    }
}

/// The kernel memory of `maps` on a host of `cpus` possible CPUs: what the kernel accounts here
/// (`here` possible CPUs), plus what the model says each CPU more adds (or less takes).
pub fn at_cpus(maps: &[MapMemory], here: u64, cpus: u64) -> u64 {
    maps.iter()
        .map(|m| {
            let grows = m.model(cpus) as i128 - m.model(here) as i128;
            (m.bytes as i128 + grows).max(0) as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_of_a_map_is_read_and_others_are_not() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t2083\nmap_type:\t10\nkey_size:\t40\nvalue_size:\t432\nmax_entries:\t16384\nmap_flags:\t0\nmap_extra:\t0x0\nmemlock:\t15107328\nmap_id:\t77\nfrozen:\t0\n";
        let m = parse_fdinfo(text).unwrap();
        assert_eq!(
            (
                m.id,
                m.map_type,
                m.key_size,
                m.value_size,
                m.max_entries,
                m.map_flags,
                m.bytes
            ),
            (77, 10, 40, 432, 16384, 0, 15_107_328)
        );
        assert_eq!(
            parse_fdinfo("pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1\n"),
            None
        );
        // Flags other than none are hexadecimal (an mmapable array).
        let mmapable = text.replace("map_flags:\t0\n", "map_flags:\t0x400\n");
        assert_eq!(parse_fdinfo(&mmapable).unwrap().map_flags, MMAPABLE);
        // A program's fdinfo has no map fields.
        assert_eq!(
            parse_fdinfo("prog_type:\t6\nprog_jited:\t1\nmemlock:\t4096\nprog_id:\t5\n"),
            None
        );
    }

    #[test]
    fn the_per_cpu_share_grows_with_the_cpus_and_the_rest_does_not() {
        let m = MapMemory {
            id: 1,
            name: "FLOWS".into(),
            map_type: LRU_PERCPU_HASH,
            key_size: 40,
            value_size: 432,
            max_entries: 16384,
            map_flags: 0,
            bytes: 0,
            entries_per_cpu: None,
        };
        // Per CPU: the values (432 B x 16384) and the locks (8 x 4 B).
        assert_eq!(m.model(3) - m.model(2), 432 * 16384 + 32);
        let shared = MapMemory {
            map_type: ARRAY,
            value_size: 12,
            max_entries: 10,
            ..m.clone()
        };
        assert_eq!((shared.model(2), shared.model(256)), (160, 160));
        let other = MapMemory {
            map_type: 27,
            bytes: 4096,
            ..m.clone()
        };
        assert_eq!(other.model(1024), 4096);
        // The microburst rings, sized by the loader: 2048 16-byte slots per CPU, in pages.
        let rings = MapMemory {
            map_type: ARRAY,
            map_flags: MMAPABLE,
            value_size: 16,
            max_entries: 2 * 2048,
            entries_per_cpu: Some(2048),
            ..m.clone()
        };
        assert_eq!((rings.model(2), rings.model(3)), (65536, 98304));
        // What the kernel says here, plus the model's growth.
        let here = MapMemory {
            bytes: m.model(2) + 500,
            ..m.clone()
        };
        assert_eq!(at_cpus(std::slice::from_ref(&here), 2, 2), here.bytes);
        assert_eq!(
            at_cpus(std::slice::from_ref(&here), 2, 192),
            here.bytes + 190 * (432 * 16384 + 32)
        );
    }
}
