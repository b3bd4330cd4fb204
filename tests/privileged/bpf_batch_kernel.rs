//! roce_observer::source::live::bpfsys against real kernel maps, made here with raw BPF_MAP_CREATE and filled
//! with BPF_MAP_UPDATE_ELEM: every entry exactly once with every CPU's value (values differ per
//! CPU, so a slot or stride mix-up shows), batching visible in the syscall count, the
//! key-at-a-time walk agreeing, take, and one-line errors on what is not the expected map.
//! Without privileges (the possible CPUs, a descriptor that is no map): bpf_batch.rs.

use std::{
    io,
    mem::size_of,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    time::Instant,
};

use integration_tests::{assert_one_line, cpus, flow_key as key, median, require_root};
use observer_common::{FlowKey, FlowSlot, FlowStats};
use roce_observer::source::live::bpfsys::{
    BatchStats, hash_buckets, hash_for_each, percpu_array_for_each, percpu_array_for_each_in,
    percpu_array_get, percpu_hash_for_each, percpu_hash_for_each_in, percpu_hash_lookup_each,
    percpu_hash_take,
};

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
const BPF_MAP_TYPE_LRU_PERCPU_HASH: u32 = 10;
const BPF_NOEXIST: u64 = 1;

/// The flow table's size in these tests: room to spare, so that the LRU evicts nothing.
const TABLE: u32 = 1 << 17;

#[repr(C, align(8))]
#[derive(Default)]
struct CreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

#[repr(C, align(8))]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

fn sys_bpf<A>(cmd: u32, attr: &mut A) -> io::Result<libc::c_long> {
    // SAFETY: attr is a bpf_attr prefix whose pointers the callers keep valid.
    unsafe { roce_observer::source::live::bpfsys::sys_bpf(cmd, attr) }
}

fn create_map<K, V>(map_type: u32, max_entries: u32) -> OwnedFd {
    let mut attr = CreateAttr {
        map_type,
        key_size: size_of::<K>() as u32,
        value_size: size_of::<V>() as u32,
        max_entries,
        ..CreateAttr::default()
    };
    let fd = sys_bpf(BPF_MAP_CREATE, &mut attr).expect("BPF_MAP_CREATE");
    // SAFETY: a new descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Writes one value per possible CPU (slots of round_up(size, 8) bytes).
fn update<K: Copy, V: Copy>(map: BorrowedFd<'_>, key: &K, per_cpu: &[V], flags: u64) {
    let stride = size_of::<V>().next_multiple_of(8);
    let mut buf = vec![0u8; stride * per_cpu.len()];
    for (slot, v) in buf.chunks_exact_mut(stride).zip(per_cpu) {
        // SAFETY: the slot holds size_of::<V>() bytes; V is plain data.
        unsafe { std::ptr::write_unaligned(slot.as_mut_ptr().cast::<V>(), *v) };
    }
    let mut attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: std::ptr::from_ref(key) as u64,
        value: buf.as_ptr() as u64,
        flags,
        ..ElemAttr::default()
    };
    sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr).expect("BPF_MAP_UPDATE_ELEM");
}

fn id_of(k: &FlowKey) -> u32 {
    u32::from_be_bytes(k.src_ip[12..].try_into().unwrap())
}

/// Flow `id`'s stats on CPU `cpu`: first, middle and last fields differ per flow and CPU.
fn stats(id: u32, cpu: usize) -> FlowStats {
    let c = cpu as u64;
    FlowStats {
        packets: u64::from(id) * 1000 + c + 1,
        bytes: !(u64::from(id) << 8 | c),
        psn_gaps: c,
        last_seen_ns: u64::from(id) ^ (c << 40),
        seq_track: observer_common::SeqTrack {
            next_hi: id,
            ..Default::default()
        },
        pcp_mask: 0x8000_0000 | cpu as u32,
        ..FlowStats::default()
    }
}

fn per_cpu_stats(id: u32, cpus: usize) -> Vec<FlowStats> {
    (0..cpus).map(|c| stats(id, c)).collect()
}

fn flow_table(entries: u32) -> OwnedFd {
    flow_table_of(BPF_MAP_TYPE_LRU_PERCPU_HASH, entries)
}

fn flow_table_of(map_type: u32, entries: u32) -> OwnedFd {
    let cpus = cpus();
    let map = create_map::<FlowKey, FlowStats>(map_type, TABLE);
    for id in 0..entries {
        update(map.as_fd(), &key(id), &per_cpu_stats(id, cpus), BPF_NOEXIST);
    }
    map
}

/// Walks the table: asserts every one of `entries` flows comes once with all its CPU values.
fn check_walk(map: BorrowedFd<'_>, entries: u32, batch: u32) -> BatchStats {
    let cpus = cpus();
    let mut seen = vec![false; entries as usize];
    let walk = percpu_hash_for_each::<FlowKey, FlowStats>(map, batch, |k, v| {
        let id = id_of(k);
        assert!(id < entries, "batch {batch}: unknown flow {id}");
        assert_eq!(*k, key(id), "batch {batch}: key of flow {id}");
        assert!(!seen[id as usize], "batch {batch}: flow {id} twice");
        seen[id as usize] = true;
        assert_eq!(v.len(), cpus, "batch {batch}: one value per CPU");
        for (c, s) in v.iter().enumerate() {
            assert_eq!(*s, stats(id, c), "batch {batch}: flow {id} CPU {c}");
        }
    })
    .unwrap_or_else(|e| panic!("batch {batch}: {e}"));
    let missing = seen.iter().filter(|s| !**s).count();
    assert_eq!(missing, 0, "batch {batch}: {missing} flows never seen");
    assert_eq!(walk.entries, u64::from(entries), "batch {batch}: {walk:?}");
    assert_eq!(walk.batched, batch > 0, "batch {batch}: {walk:?}");
    walk
}

#[test]
fn hash_walk_of_an_empty_and_a_one_entry_table() {
    if !require_root("hash_walk_of_an_empty_and_a_one_entry_table") {
        return;
    }
    for entries in [0, 1] {
        let map = flow_table(entries);
        for batch in [0, 1, 7, 4096] {
            let walk = check_walk(map.as_fd(), entries, batch);
            // The info query, then one batch call that reaches the end.
            if batch > 0 {
                assert_eq!(
                    walk.syscalls, 2,
                    "{entries} entries, batch {batch}: {walk:?}"
                );
            }
        }
    }
}

#[test]
fn hash_walk_of_100k_flows_batches() {
    if !require_root("hash_walk_of_100k_flows_batches") {
        return;
    }
    const N: u32 = 100_000;
    let map = flow_table(N);
    for batch in [1, 7, 4096] {
        let walk = check_walk(map.as_fd(), N, batch);
        eprintln!("batch {batch}: {walk:?}");
        let ideal = u64::from(N.div_ceil(batch));
        match batch {
            // Batch 1: buckets of two or more grow it (ENOSPC), so fewer calls than entries.
            1 => assert!(walk.syscalls <= u64::from(N) + 10, "{walk:?}"),
            // A batch ends before a bucket that does not fit: at most a few entries short.
            7 => assert!(walk.syscalls <= 2 * ideal + 2, "{walk:?}"),
            _ => assert!(
                walk.syscalls >= ideal && walk.syscalls <= ideal + 3,
                "batch {batch}: {walk:?}, about {ideal} calls expected"
            ),
        }
    }
}

/// Walks over shares of the buckets, as readers side by side do: together every flow with all
/// its CPU values, each share's own flows once, and only a share's last batch running into the
/// next share (those flows come twice, never more).
#[test]
fn bucket_range_walks_cover_the_table_between_them() {
    if !require_root("bucket_range_walks_cover_the_table_between_them") {
        return;
    }
    const N: u32 = 50_000;
    let map = flow_table(N);
    let buckets = hash_buckets::<FlowKey, FlowStats>(map.as_fd()).unwrap();
    assert_eq!(buckets, TABLE.next_power_of_two());
    let cpus = cpus();
    for (shares, batch) in [(2, 256), (3, 7), (4, 4096), (5, 1)] {
        let mut times = vec![0u32; N as usize];
        for i in 0..shares {
            let from = buckets / shares * i;
            let to = if i + 1 == shares {
                u32::MAX
            } else {
                buckets / shares * (i + 1)
            };
            let mut mine = 0u64;
            let walk = percpu_hash_for_each_in::<FlowKey, FlowStats>(
                map.as_fd(),
                batch,
                from..to,
                |k, v| {
                    let id = id_of(k);
                    assert_eq!(*k, key(id));
                    assert_eq!(v.len(), cpus);
                    for (c, s) in v.iter().enumerate() {
                        assert_eq!(*s, stats(id, c), "flow {id} CPU {c}");
                    }
                    times[id as usize] += 1;
                    mine += 1;
                },
            )
            .unwrap();
            assert_eq!(walk.entries, mine);
            assert!(walk.batched, "{walk:?}");
        }
        let twice = times.iter().filter(|t| **t == 2).count() as u64;
        eprintln!("{shares} shares, batch {batch}: {twice} flows read twice");
        assert!(
            times.iter().all(|t| *t == 1 || *t == 2),
            "{shares} shares, batch {batch}: every flow once or twice"
        );
        // Only where shares meet, at most a batch each, or the bucket there when it holds more
        // (the kernel hands over whole buckets; 50,000 keys in 65,536 buckets seldom put more
        // than 8 in one, but the hash seed is random per map).
        assert!(
            twice <= u64::from(shares - 1) * 2 * u64::from(batch.max(8)),
            "{shares} shares, batch {batch}: {twice} flows twice"
        );
    }
    // A range past the last bucket reads nothing; an empty one too.
    let past = percpu_hash_for_each_in::<FlowKey, FlowStats>(
        map.as_fd(),
        64,
        buckets..u32::MAX,
        |_, _| panic!("nothing past the last bucket"),
    )
    .unwrap();
    assert_eq!(past.entries, 0);
    percpu_hash_for_each_in::<FlowKey, FlowStats>(map.as_fd(), 64, 5..5, |_, _| panic!()).unwrap();
}

/// The key-at-a-time walk (what runs without batch lookups) finds the same flows.
#[test]
fn key_at_a_time_walk_agrees_on_a_plain_percpu_hash() {
    if !require_root("key_at_a_time_walk_agrees_on_a_plain_percpu_hash") {
        return;
    }
    let map = flow_table_of(BPF_MAP_TYPE_PERCPU_HASH, 3000);
    let batched = check_walk(map.as_fd(), 3000, 256);
    let single = check_walk(map.as_fd(), 3000, 0);
    // Info, then get_next_key + lookup per entry, and the get_next_key that ends.
    assert_eq!(single.syscalls, 1 + 2 * 3000 + 1, "{single:?}");
    assert!(batched.syscalls < 20, "{batched:?}");
}

#[test]
fn batch_walk_beats_key_at_a_time_on_100k_flows() {
    if !require_root("batch_walk_beats_key_at_a_time_on_100k_flows") {
        return;
    }
    const N: u32 = 100_000;
    let map = flow_table(N);
    let time = |batch: u32| {
        let runs: Vec<f64> = (0..3)
            .map(|_| {
                let mut packets = 0u64;
                let t = Instant::now();
                let walk =
                    percpu_hash_for_each::<FlowKey, FlowStats>(map.as_fd(), batch, |_, v| {
                        packets += v.iter().map(|s| s.packets).sum::<u64>();
                    })
                    .unwrap();
                let s = t.elapsed().as_secs_f64();
                assert_eq!(walk.entries, u64::from(N));
                assert!(packets > 0);
                s
            })
            .collect();
        median(&runs)
    };
    let batched = time(4096);
    let single = time(0);
    // Printed only: timings depend on the machine and the build profile.
    eprintln!(
        "100k flows x {} CPUs: batch 4096 {:.1} ms, get_next_key+lookup {:.1} ms: {:.1}x faster batched",
        cpus(),
        batched * 1e3,
        single * 1e3,
        single / batched
    );
}

/// Odd sizes: 5-byte keys (packed unrounded in the batch key buffer) and 12-byte values (slots
/// rounded up to 16 bytes).
#[test]
fn odd_key_and_value_sizes() {
    if !require_root("odd_key_and_value_sizes") {
        return;
    }
    let cpus = cpus();
    let map = create_map::<[u8; 5], [u32; 3]>(BPF_MAP_TYPE_PERCPU_HASH, 1024);
    let value = |id: u8, c: usize| {
        [
            u32::from(id),
            c as u32,
            0xdead_0000 | u32::from(id) << 8 | c as u32,
        ]
    };
    for id in 0..200u8 {
        let v: Vec<[u32; 3]> = (0..cpus).map(|c| value(id, c)).collect();
        update(map.as_fd(), &[id, 1, 2, 3, id], &v, BPF_NOEXIST);
    }
    for batch in [0, 3, 64] {
        let mut seen = [false; 200];
        let walk = percpu_hash_for_each::<[u8; 5], [u32; 3]>(map.as_fd(), batch, |k, v| {
            let id = k[0];
            assert_eq!(*k, [id, 1, 2, 3, id]);
            assert!(
                !std::mem::replace(&mut seen[id as usize], true),
                "{id} twice"
            );
            let want: Vec<[u32; 3]> = (0..cpus).map(|c| value(id, c)).collect();
            assert_eq!(v, want, "key {id}");
        })
        .unwrap();
        assert_eq!(walk.entries, 200, "batch {batch}");
        assert!(seen.iter().all(|s| *s));
    }
    let got = percpu_hash_take::<[u8; 5], [u32; 3]>(map.as_fd(), &[9, 1, 2, 3, 9]).unwrap();
    assert_eq!(got, Some((0..cpus).map(|c| value(9, c)).collect()));
}

/// Shared hash maps (one value per key, as the latency states and messages are): every entry
/// once, batched or a key at a time, with values of an odd size (the batch's value buffer is
/// not rounded up as a per-CPU map's slots are) and the messages' own.
#[test]
fn shared_hash_walk_reads_each_entry_once() {
    if !require_root("shared_hash_walk_reads_each_entry_once") {
        return;
    }
    const N: u32 = 3000;
    let value = |id: u32| [id, 0xbeef_0000 | (id & 0xffff), !id];
    for map_type in [BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_LRU_HASH] {
        // Room for the free entries an LRU keeps per CPU (128 each at most), so that none is
        // evicted whichever CPUs the test runs on.
        let map = create_map::<u32, [u32; 3]>(map_type, N + 128 * cpus() as u32);
        for id in 0..N {
            update(map.as_fd(), &id, &[value(id)], BPF_NOEXIST);
        }
        for batch in [0, 3, 256] {
            let mut seen = vec![false; N as usize];
            let walk = hash_for_each::<u32, [u32; 3]>(map.as_fd(), batch, |k, v| {
                assert!(
                    !std::mem::replace(&mut seen[*k as usize], true),
                    "{k} twice"
                );
                assert_eq!(*v, value(*k), "key {k}");
            })
            .unwrap();
            assert_eq!(walk.entries, u64::from(N), "type {map_type} batch {batch}");
            assert!(seen.iter().all(|s| *s));
            assert_eq!(walk.batched, batch > 0);
            if batch == 256 {
                assert!(walk.syscalls < 3 + u64::from(N) / 100, "{walk:?}");
            }
        }
    }
    // The messages' map as the kernel declares it.
    let map = create_map::<FlowKey, observer_common::MsgStats>(
        BPF_MAP_TYPE_LRU_HASH,
        500 + 128 * cpus() as u32,
    );
    let msgs = |id: u32| {
        let mut m = observer_common::MsgStats::default();
        for i in 0..=id % 7 {
            m.record(observer_common::MsgKind::Send, Some(u64::from(64 + id + i)));
        }
        m
    };
    for id in 1..=500 {
        update(map.as_fd(), &key(id), &[msgs(id)], BPF_NOEXIST);
    }
    let mut n = 0;
    hash_for_each::<FlowKey, observer_common::MsgStats>(map.as_fd(), 64, |k, m| {
        assert_eq!(*m, msgs(id_of(k)));
        n += 1;
    })
    .unwrap();
    assert_eq!(n, 500);
}

#[test]
fn array_walk_and_get() {
    if !require_root("array_walk_and_get") {
        return;
    }
    const N: u32 = 4096;
    let cpus = cpus();
    let slot = |i: u32, c: usize| FlowSlot {
        key: key(i),
        stats: stats(i, c),
    };
    let map = create_map::<u32, FlowSlot>(BPF_MAP_TYPE_PERCPU_ARRAY, N);
    for i in 0..N {
        let v: Vec<FlowSlot> = (0..cpus).map(|c| slot(i, c)).collect();
        update(map.as_fd(), &i, &v, 0);
    }
    for batch in [0, 1, 100, 4096, 10_000] {
        let mut next = 0u32;
        let walk = percpu_array_for_each::<FlowSlot>(map.as_fd(), batch, |i, v| {
            assert_eq!(i, next, "batch {batch}: indices in order");
            next += 1;
            assert_eq!(v.len(), cpus);
            for (c, s) in v.iter().enumerate() {
                assert_eq!(*s, slot(i, c), "batch {batch}: index {i} CPU {c}");
            }
        })
        .unwrap_or_else(|e| panic!("batch {batch}: {e}"));
        assert_eq!(next, N, "batch {batch}");
        assert_eq!(walk.entries, u64::from(N), "batch {batch}: {walk:?}");
        assert_eq!(walk.batched, batch > 0);
        eprintln!("array batch {batch}: {walk:?}");
        if batch > 0 {
            // Info, then full batches; the end (ENOENT) comes with the last entries or alone.
            let full = u64::from(N.div_ceil(batch));
            assert!(
                walk.syscalls == 1 + full || walk.syscalls == 2 + full,
                "batch {batch}: {walk:?}"
            );
        }
    }
    for i in [0, 1, 2047, N - 1] {
        let v = percpu_array_get::<FlowSlot>(map.as_fd(), i).unwrap();
        assert_eq!(v, (0..cpus).map(|c| slot(i, c)).collect::<Vec<_>>());
    }
    let e = percpu_array_get::<FlowSlot>(map.as_fd(), N).unwrap_err();
    assert_one_line(&e.to_string(), "BPF_MAP_LOOKUP_ELEM", map.as_raw_fd());
    assert!(e.to_string().contains("out of range"), "{e}");
}

#[test]
fn array_range_reads_just_its_indices() {
    if !require_root("array_range_reads_just_its_indices") {
        return;
    }
    const N: u32 = 1000;
    let cpus = cpus();
    let map = create_map::<u32, FlowKey>(BPF_MAP_TYPE_PERCPU_ARRAY, N);
    let value = |i: u32, c: usize| key(i * 16 + c as u32);
    for i in 0..N {
        let v: Vec<FlowKey> = (0..cpus).map(|c| value(i, c)).collect();
        update(map.as_fd(), &i, &v, 0);
    }
    for batch in [0, 1, 7, 256] {
        for range in [
            0..0,
            0..1,
            0..300,
            1..2,
            299..301,
            500..N,
            998..N + 5,
            N..N + 3,
        ] {
            let mut got = Vec::new();
            let walk =
                percpu_array_for_each_in::<FlowKey>(map.as_fd(), batch, range.clone(), |i, v| {
                    assert_eq!(v.len(), cpus);
                    for (c, k) in v.iter().enumerate() {
                        assert_eq!(
                            *k,
                            value(i, c),
                            "batch {batch}, {range:?}: index {i} CPU {c}"
                        );
                    }
                    got.push(i);
                })
                .unwrap_or_else(|e| panic!("batch {batch}, {range:?}: {e}"));
            let want: Vec<u32> = (range.start..range.end.min(N)).collect();
            assert_eq!(got, want, "batch {batch}, {range:?}");
            assert_eq!(walk.entries, want.len() as u64, "batch {batch}, {range:?}");
        }
    }
}

#[test]
fn lookups_of_given_keys() {
    if !require_root("lookups_of_given_keys") {
        return;
    }
    let cpus = cpus();
    let map = flow_table(100);
    let keys = [key(3), key(500), key(0), key(99), key(3)];
    let mut got = Vec::new();
    let stats = percpu_hash_lookup_each::<FlowKey, FlowStats>(map.as_fd(), &keys, |k, v| {
        got.push((id_of(k), v.map(<[FlowStats]>::to_vec)));
    })
    .unwrap();
    let want = |id| Some(per_cpu_stats(id, cpus));
    assert_eq!(
        got,
        [
            (3, want(3)),
            (500, None),
            (0, want(0)),
            (99, want(99)),
            (3, want(3))
        ]
    );
    assert_eq!((stats.entries, stats.syscalls), (4, 6), "{stats:?}");
}

#[test]
fn take_returns_the_values_and_removes_the_key() {
    if !require_root("take_returns_the_values_and_removes_the_key") {
        return;
    }
    let cpus = cpus();
    let map = flow_table(10);
    let got = percpu_hash_take::<FlowKey, FlowStats>(map.as_fd(), &key(3)).unwrap();
    assert_eq!(got, Some(per_cpu_stats(3, cpus)));
    assert_eq!(
        percpu_hash_take::<FlowKey, FlowStats>(map.as_fd(), &key(3)).unwrap(),
        None,
        "taken twice"
    );
    assert_eq!(
        percpu_hash_take::<FlowKey, FlowStats>(map.as_fd(), &key(99)).unwrap(),
        None,
        "never there"
    );
    let mut left = Vec::new();
    percpu_hash_for_each::<FlowKey, FlowStats>(map.as_fd(), 64, |k, _| left.push(id_of(k)))
        .unwrap();
    left.sort_unstable();
    assert_eq!(left, [0, 1, 2, 4, 5, 6, 7, 8, 9]);
}

/// Wrong map type or sizes: refused before the kernel writes anything into buffers sized for
/// other types.
#[test]
fn the_wrong_map_is_refused() {
    if !require_root("the_wrong_map_is_refused") {
        return;
    }
    let hash = flow_table(5);
    let array = create_map::<u32, FlowSlot>(BPF_MAP_TYPE_PERCPU_ARRAY, 16);
    let (h, a) = (hash.as_fd(), array.as_fd());
    let cases = [
        (
            percpu_hash_for_each::<FlowKey, FlowStats>(a, 64, |_, _| panic!()).unwrap_err(),
            "BPF_MAP_LOOKUP_BATCH",
            a.as_raw_fd(),
        ),
        (
            // A value type smaller than the map's: the kernel would overrun its buffers.
            percpu_hash_for_each::<FlowKey, u64>(h, 64, |_, _| panic!()).unwrap_err(),
            "BPF_MAP_LOOKUP_BATCH",
            h.as_raw_fd(),
        ),
        (
            percpu_hash_for_each::<[u8; 8], FlowStats>(h, 0, |_, _| panic!()).unwrap_err(),
            "BPF_MAP_GET_NEXT_KEY",
            h.as_raw_fd(),
        ),
        (
            // A per-CPU map read as a shared one: its values are one per CPU.
            hash_for_each::<FlowKey, FlowStats>(h, 64, |_, _| panic!()).unwrap_err(),
            "BPF_MAP_LOOKUP_BATCH",
            h.as_raw_fd(),
        ),
        (
            percpu_array_for_each::<FlowSlot>(h, 64, |_, _| panic!()).unwrap_err(),
            "BPF_MAP_LOOKUP_BATCH",
            h.as_raw_fd(),
        ),
        (
            percpu_hash_take::<u32, FlowSlot>(a, &0).unwrap_err(),
            "BPF_MAP_LOOKUP_AND_DELETE_ELEM",
            a.as_raw_fd(),
        ),
        (
            percpu_array_get::<FlowStats>(a, 0).unwrap_err(),
            "BPF_MAP_LOOKUP_ELEM",
            a.as_raw_fd(),
        ),
    ];
    for (e, op, fd) in cases {
        let msg = e.to_string();
        eprintln!("{msg}");
        assert_one_line(&msg, op, fd);
        assert!(msg.contains("expected a"), "{msg}");
        assert_eq!(e.errno(), None);
    }
    // Still intact and readable with the right types.
    check_walk(h, 5, 64);
}
