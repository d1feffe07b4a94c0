//! Issue 46's memory test: 1,000 RocksDB stores under one
//! `RocksDbShared` bound of 256 MiB take sustained writes and reads from
//! two threads (as two stream threads would) for `SECS` seconds, writing
//! several times the bound: the shared cache stays within its capacity, the
//! memtables within their share, every read returns what was written, and
//! nothing fails. It prints what the process's resident memory did: the
//! floor per open, empty store (each RocksDB instance's own structures,
//! outside any cache) and the growth under the writes: the cache (with the
//! memtables charged to it, `CACHE_SHARE` of the bound) plus what RocksDB
//! keeps outside it (table readers of open files, flush buffers, allocator
//! slack), which the rest of the bound is for. On the 2-core machine of
//! 2026-12-06: 124 KiB per store, and 272–286 MiB of growth for the 256 MiB
//! bound (1.06–1.12×, issue 46's "bound + 20 %"; 19–21 MiB of it table
//! readers); with the cache taking the whole bound it was 322–331 MiB
//! (1.26–1.29×). `MEMORY_BOUND_STORES` opens another number of stores (100:
//! 254–268 MiB). Resident memory is printed, not asserted (a measurement).
//!
//! As Kafka Streams users do for many stores, a config setter caps each
//! store's open table files (RocksDB keeps every one open by default, and a
//! thousand stores under write pressure ran out of the 20,000 descriptors).
//!
//! Its own test binary, one test, so `/proc/self/status` is this test alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rill_state::{
    rocksdb, KeyValueStore, RocksDbConfigSetter, RocksDbShared, RocksDbStore, StoreContext,
};

/// Kafka's advice for many stores: bound the table files each keeps open.
struct FewOpenFiles;

impl RocksDbConfigSetter for FewOpenFiles {
    fn set_config(
        &self,
        _: &StoreContext<'_>,
        options: &mut rocksdb::Options,
        _: &mut rocksdb::BlockBasedOptions,
    ) {
        // RocksDB's minimum: 10 table files cached, 10 for the rest.
        options.set_max_open_files(20);
    }
}

/// Stores opened: `MEMORY_BOUND_STORES`, 1,000 by default.
fn store_count() -> usize {
    std::env::var("MEMORY_BOUND_STORES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000)
}
const BOUND: u64 = 256 << 20;
const SECS: u64 = 20;

/// `VmRSS` and `VmHWM` (KiB) of this process.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// glibc gives each thread that allocates its own heap arena (up to 8 per
/// core), and RocksDB's flush and compaction threads plus two writers
/// fragment them; Kafka's memory guide advises the same (jemalloc, or
/// `MALLOC_ARENA_MAX`) for RocksDB under a bound.
#[allow(unsafe_code)] // mallopt(3) with a constant
fn limit_malloc_arenas() {
    // SAFETY: mallopt only reads its two integer arguments.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

#[test]
#[ignore = "heavy: 1,000 RocksDB instances for 30 s and ~16,000 file descriptors; \
            cargo test --release -p rill-state --test memory_bound -- --ignored --nocapture"]
fn a_thousand_stores_under_sustained_writes_keep_cache_and_memtables_within_the_bound() {
    let fds = rill_state::raise_open_files_limit().unwrap_or(0);
    if fds < 16_384 {
        eprintln!(
            "SKIPPED (loudly): a_thousand_stores_under_sustained_writes_keep_cache_and_memtables_within_the_bound \
             needs 16,384 file descriptors; the hard limit here is {fds}"
        );
        return;
    }
    limit_malloc_arenas();
    let stores_n = store_count();
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = rss_kib();
    let shared = RocksDbShared::new(BOUND, 0.5, Some(std::sync::Arc::new(FewOpenFiles)));
    let opening = Instant::now();
    let stores: Vec<RocksDbStore> = (0..stores_n)
        .map(|i| {
            RocksDbStore::open_with(
                format!("s{i}"),
                &dir.path().join(format!("{i}")),
                Some(&format!("0_{i}")),
                &shared,
            )
            .unwrap()
        })
        .collect();
    let open_ms = opening.elapsed().as_millis();
    let (opened, _) = rss_kib();
    println!(
        "{stores_n} stores opened in {open_ms} ms; {} KiB per store before any write",
        (opened.saturating_sub(base)) / stores_n as u64
    );

    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib().0, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(SECS);
    let mut halves: Vec<Vec<RocksDbStore>> = vec![Vec::new(), Vec::new()];
    for (i, s) in stores.into_iter().enumerate() {
        halves[i % 2].push(s);
    }
    let writers: Vec<_> = halves
        .into_iter()
        .enumerate()
        .map(|(w, mut stores)| {
            std::thread::spawn(move || {
                let mut written = 0u64;
                let mut next = vec![0u64; stores.len()];
                let mut round = 0u64;
                while Instant::now() < deadline {
                    for (s, n) in stores.iter_mut().zip(next.iter_mut()) {
                        // 200 × (16-byte key, 100-byte value) per batch.
                        let batch: Vec<_> = (*n..*n + 200)
                            .map(|k| {
                                (
                                    Bytes::from(format!("{w}-{k:014}")),
                                    Some(Bytes::from(vec![(k % 251) as u8; 100])),
                                )
                            })
                            .collect();
                        s.put_all(&batch).unwrap();
                        *n += 200;
                        written += 200 * 116;
                        // Read back earlier keys so data blocks fill the cache.
                        for back in [*n / 3, *n / 2, *n - 1] {
                            let v = s.get(format!("{w}-{back:014}").as_bytes()).unwrap();
                            assert_eq!(v.map(|v| v[0]), Some((back % 251) as u8));
                        }
                    }
                    round += 1;
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                (written, round, stores)
            })
        })
        .collect();
    let mut written = 0;
    let mut rounds = Vec::new();
    let mut kept = Vec::new();
    for w in writers {
        let (bytes, round, stores) = w.join().unwrap();
        written += bytes;
        rounds.push(round);
        kept.extend(stores);
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let (_, hwm) = rss_kib();
    let m = shared.memory();
    let peak_kib = peak.load(Ordering::Relaxed).max(hwm);
    let over = peak_kib.saturating_sub(opened) * 1024;
    println!(
        "{} MiB written to {stores_n} stores in {SECS} s ({rounds:?} rounds per thread); \
         peak RSS {} MiB above the {} MiB the open stores held (bound {} MiB); \
         cache {} MiB used, memtables {} MiB of {} MiB, table readers {} MiB outside the cache",
        written >> 20,
        over >> 20,
        opened >> 10,
        BOUND >> 20,
        m.block_cache_usage >> 20,
        m.memtable_usage >> 20,
        m.memtable_limit >> 20,
        m.stores
            .iter()
            .map(|s| s.estimate_table_readers_mem)
            .sum::<u64>()
            >> 20,
    );
    assert!(
        written > 2 * BOUND,
        "the test must write well over the bound"
    );
    assert_eq!(m.stores.len(), stores_n);
    assert!(
        m.block_cache_usage as f64 <= 1.05 * BOUND as f64,
        "the cache outgrew its capacity: {m:?}"
    );
    assert!(
        m.memtable_usage <= m.memtable_limit + (16 << 20),
        "the memtables outgrew their share: {m:?}"
    );
    // Every store still reads back what it was given.
    for s in &kept {
        let w: u64 = s.name()[1..].parse::<u64>().unwrap() % 2;
        let v = s.get(format!("{w}-{:014}", 0).as_bytes()).unwrap();
        assert_eq!(v.map(|v| v[0]), Some(0), "{}", s.name());
    }
    drop(kept);
}
