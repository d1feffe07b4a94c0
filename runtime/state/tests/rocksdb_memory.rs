//! The instance-wide RocksDB memory bound and the config setter
//! (`RocksDbShared`): stores share one cache, memtables are charged to it,
//! an undersized bound slows stores down and never fails them, and the
//! setter is asked for every store, kept across `clear`, told of each close,
//! and cannot break the bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rill_state::{
    rocksdb, Error, KeyValueStore, RocksDbConfigSetter, RocksDbShared, RocksDbStore, StoreContext,
};

const MIB: u64 = 1 << 20;

fn key(i: u64) -> Bytes {
    Bytes::from(format!("key-{i:012}"))
}

fn value(i: u64) -> Bytes {
    Bytes::from(format!("{i:0>100}"))
}

/// Writes `n` records in batches of 1,000 (`put_all`, as a task's flush does).
fn write(store: &mut RocksDbStore, from: u64, n: u64) {
    for start in (from..from + n).step_by(1000) {
        let batch: Vec<_> = (start..(start + 1000).min(from + n))
            .map(|i| (key(i), Some(value(i))))
            .collect();
        store.put_all(&batch).unwrap();
    }
}

#[test]
fn stores_share_one_cache_and_their_memtables_are_charged_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let shared = RocksDbShared::new(64 * MIB, 0.5, None);
    let mut a = RocksDbStore::open_with("a", &dir.path().join("a"), Some("0_0"), &shared).unwrap();
    let mut b = RocksDbStore::open_with("b", &dir.path().join("b"), Some("0_1"), &shared).unwrap();
    write(&mut a, 0, 20_000);
    write(&mut b, 0, 20_000);
    let m = shared.memory();
    assert_eq!(m.bound, 64 * MIB);
    // The cache takes CACHE_SHARE of the bound (the rest is for what RocksDB
    // allocates outside it), the memtables half of the cache.
    let capacity = (64.0 * MIB as f64 * rill_state::CACHE_SHARE) as u64;
    assert_eq!(m.block_cache_capacity, capacity);
    assert!((48 * MIB..64 * MIB).contains(&capacity), "{capacity}");
    assert_eq!(m.memtable_limit, capacity / 2);
    // ~2 × 2.3 MiB of memtables, counted by the manager and reserved in the cache.
    assert!(m.memtable_usage >= 4 * MIB, "{m:?}");
    assert!(m.block_cache_usage >= m.memtable_usage, "{m:?}");
    a.flush().unwrap();
    b.flush().unwrap();
    // Reads bring data blocks into the one cache; both stores report on it.
    for i in (0..20_000).step_by(7) {
        assert_eq!(a.get(&key(i)).unwrap(), Some(value(i)));
        assert_eq!(b.get(&key(i)).unwrap(), Some(value(i)));
    }
    let m = shared.memory();
    assert_eq!(m.stores.len(), 2, "{m:?}");
    assert!(m.stores.iter().any(|s| s.task == "0_1" && s.store == "b"));
    assert!(m.block_cache_usage > 0, "{m:?}");
    drop(a);
    assert_eq!(
        shared.memory().stores.len(),
        1,
        "a closed store is not reported"
    );
}

#[test]
fn an_undersized_bound_slows_stores_down_and_never_fails_them() {
    let dir = tempfile::tempdir().unwrap();
    // 16 MiB for 40 stores that each take in ~4 MiB: 10× the bound.
    let shared = RocksDbShared::new(16 * MIB, 0.5, None);
    let mut stores: Vec<RocksDbStore> = (0..40)
        .map(|i| {
            RocksDbStore::open_with(
                format!("s{i}"),
                &dir.path().join(format!("s{i}")),
                Some(&format!("0_{i}")),
                &shared,
            )
            .unwrap()
        })
        .collect();
    for round in 0..4 {
        for s in &mut stores {
            write(s, round * 10_000, 10_000);
        }
    }
    let m = shared.memory();
    assert!(
        m.memtable_usage <= m.memtable_limit + 2 * MIB,
        "memtables are flushed near the limit: {m:?}"
    );
    assert!(m.pressure_flushes > 0, "{m:?}");
    for s in &stores {
        for i in (0..40_000).step_by(997) {
            assert_eq!(s.get(&key(i)).unwrap(), Some(value(i)), "{}", s.name());
        }
        assert_eq!(s.all().unwrap().len(), 40_000);
    }
}

/// Records what it was asked, and tries to break the bound with a cache of
/// its own.
struct Recording {
    seen: Mutex<Vec<(String, Option<String>)>>,
    closed: AtomicUsize,
    own: rocksdb::Cache,
}

impl RocksDbConfigSetter for Recording {
    fn set_config(
        &self,
        store: &StoreContext<'_>,
        options: &mut rocksdb::Options,
        table: &mut rocksdb::BlockBasedOptions,
    ) {
        self.seen
            .lock()
            .unwrap()
            .push((store.store.to_string(), store.task.map(str::to_string)));
        // Its own 1 GiB cache: the bound must win anyway.
        table.set_block_cache(&self.own);
        table.set_block_size(8 << 10);
        options.set_level_zero_file_num_compaction_trigger(8);
    }
    fn close(&self, _store: &StoreContext<'_>) {
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn the_setter_is_asked_for_every_store_cannot_break_the_bound_and_hears_each_close() {
    let dir = tempfile::tempdir().unwrap();
    let rec = Arc::new(Recording {
        seen: Mutex::default(),
        closed: AtomicUsize::new(0),
        own: rocksdb::Cache::new_lru_cache(1 << 30),
    });
    let shared = RocksDbShared::new(32 * MIB, 0.5, Some(rec.clone()));
    let mut s =
        RocksDbStore::open_with("counts", &dir.path().join("c"), Some("1_4"), &shared).unwrap();
    let g = RocksDbStore::open_with("table", &dir.path().join("g"), None, &shared).unwrap();
    assert_eq!(
        *rec.seen.lock().unwrap(),
        [
            ("counts".to_string(), Some("1_4".to_string())),
            ("table".to_string(), None)
        ]
    );
    write(&mut s, 0, 5_000);
    s.flush().unwrap();
    for i in 0..5_000 {
        assert_eq!(s.get(&key(i)).unwrap(), Some(value(i)));
    }
    // The blocks just read went to the shared cache, none to the setter's.
    let m = shared.memory();
    assert_eq!(
        m.block_cache_capacity,
        (32.0 * MIB as f64 * rill_state::CACHE_SHARE) as u64
    );
    assert!(m.block_cache_usage > 0, "{m:?}");
    assert_eq!(rec.own.get_usage(), 0, "the setter's cache was used");
    // `clear` reopens with the same options, without asking again.
    s.clear().unwrap();
    assert!(s.all().unwrap().is_empty());
    assert_eq!(rec.seen.lock().unwrap().len(), 2);
    drop(s);
    drop(g);
    assert_eq!(rec.closed.load(Ordering::SeqCst), 2);
}

/// A setter that only touches the store's `Options`.
struct OnOptions(fn(&mut rocksdb::Options));

impl RocksDbConfigSetter for OnOptions {
    fn set_config(
        &self,
        _: &StoreContext<'_>,
        options: &mut rocksdb::Options,
        _: &mut rocksdb::BlockBasedOptions,
    ) {
        (self.0)(options)
    }
}

#[test]
fn a_panicking_setter_is_an_error_naming_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let shared = RocksDbShared::new(
        0,
        0.5,
        Some(Arc::new(OnOptions(|_| panic!("no options for you")))),
    );
    let e =
        RocksDbStore::open_with("orders", &dir.path().join("o"), Some("0_0"), &shared).unwrap_err();
    assert!(matches!(e, Error::ConfigSetter { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "state store orders: the RocksDB config setter panicked: no options for you"
    );
}

#[test]
fn without_a_bound_each_store_reports_its_own_cache() {
    let dir = tempfile::tempdir().unwrap();
    let shared = RocksDbShared::unbounded();
    let mut a = RocksDbStore::open_with("a", &dir.path().join("a"), Some("0_0"), &shared).unwrap();
    let _b = RocksDbStore::open_with("b", &dir.path().join("b"), Some("0_1"), &shared).unwrap();
    write(&mut a, 0, 1_000);
    a.flush().unwrap();
    let m = shared.memory();
    assert_eq!(m.bound, 0);
    assert_eq!(m.memtable_limit, 0);
    // RocksDB's own 32 MiB cache per store.
    assert_eq!(m.block_cache_capacity, 64 * MIB, "{m:?}");
}

#[test]
fn a_codec_not_built_in_fails_the_open_naming_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let shared = RocksDbShared::new(
        0,
        0.5,
        Some(Arc::new(OnOptions(|o| {
            o.set_compression_type(rocksdb::DBCompressionType::Lz4)
        }))),
    );
    let e = RocksDbStore::open_with("orders", &dir.path().join("o"), Some("0_0"), &shared)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("state store orders: RocksDB error: ") && e.contains("LZ4"),
        "{e}"
    );
}

/// A writer collecting what a test's tracing subscriber formats.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn opening_reopening_and_clearing_a_store_log_nothing() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let dir = tempfile::tempdir().unwrap();
    let shared = RocksDbShared::new(64 * MIB, 0.5, None);
    tracing::subscriber::with_default(subscriber, || {
        let path = dir.path().join("s");
        let mut s = RocksDbStore::open_with("s", &path, Some("0_0"), &shared).unwrap();
        write(&mut s, 0, 2_000);
        s.flush().unwrap();
        drop(s);
        let mut s = RocksDbStore::open_with("s", &path, Some("0_0"), &shared).unwrap();
        s.clear().unwrap();
        // The control: an event of the test's own is captured.
        tracing::error!("control");
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].contains("control"),
        "opening a store logged {} lines besides the control, starting {:?}",
        lines.len().saturating_sub(1),
        lines.iter().take(3).collect::<Vec<_>>()
    );
}
