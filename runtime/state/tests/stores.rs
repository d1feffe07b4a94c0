//! One store contract, run on both backends (RocksDB and in-memory), plus
//! checkpoint and lock behaviour.

use bytes::Bytes;
use rill_state::{Checkpoint, Error, InMemoryStore, KeyValueStore, RocksDbStore, TaskDirLock};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn keys(kvs: &[(Bytes, Bytes)]) -> Vec<String> {
    kvs.iter()
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect()
}

fn contract(store: &mut dyn KeyValueStore) {
    assert_eq!(store.get(b"missing").unwrap(), None);
    for k in ["b", "a", "ab", "abc", "c", "\u{ff}"] {
        store
            .put(k.as_bytes(), format!("v-{k}").as_bytes())
            .unwrap();
    }
    assert_eq!(store.get(b"ab").unwrap(), Some(b("v-ab")));
    store.put(b"ab", b"again").unwrap();
    assert_eq!(store.get(b"ab").unwrap(), Some(b("again")));
    assert_eq!(
        keys(&store.all().unwrap()),
        ["a", "ab", "abc", "b", "c", "\u{ff}"]
    );
    assert_eq!(keys(&store.range(b"ab", b"b").unwrap()), ["ab", "abc", "b"]);
    assert!(store.range(b"c", b"a").unwrap().is_empty());
    assert_eq!(keys(&store.prefix_scan(b"ab").unwrap()), ["ab", "abc"]);
    store.delete(b"abc").unwrap();
    store.delete(b"never-there").unwrap();
    assert_eq!(keys(&store.prefix_scan(b"a").unwrap()), ["a", "ab"]);
    store
        .put_all(&[(b("a"), None), (b("d"), Some(b("v-d")))])
        .unwrap();
    assert_eq!(keys(&store.all().unwrap()), ["ab", "b", "c", "d", "\u{ff}"]);
    store.flush().unwrap();
    store.clear().unwrap();
    assert!(store.all().unwrap().is_empty());
    store.put(b"after-clear", b"1").unwrap();
    assert_eq!(store.get(b"after-clear").unwrap(), Some(b("1")));
}

#[test]
fn in_memory_store_contract() {
    contract(&mut InMemoryStore::new("mem"));
}

#[test]
fn rocksdb_store_contract_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rocksdb/counts");
    {
        let mut s = RocksDbStore::open("counts", &path).unwrap();
        contract(&mut s);
        s.put(b"kept", b"yes").unwrap();
        s.flush().unwrap();
        assert!(s.persistent());
    }
    let s = RocksDbStore::open("counts", &path).unwrap();
    assert_eq!(s.get(b"kept").unwrap(), Some(b("yes")));
    assert_eq!(s.approximate_num_entries().unwrap(), 2);
}

#[test]
fn checkpoint_round_trip_and_corruption() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(Checkpoint::read(dir.path()).unwrap(), None);
    let mut cp = Checkpoint::default();
    cp.offsets.insert(("app-counts-changelog".into(), 3), 1042);
    cp.offsets.insert(("app-other changelog".into(), 0), 0);
    cp.write(dir.path()).unwrap();
    assert_eq!(Checkpoint::read(dir.path()).unwrap(), Some(cp));

    for bad in [
        "",
        "1\n0\n",
        "0\nx\n",
        "0\n2\nt 0 5\n",
        "0\n1\nt zero 5\n",
        "0\n1\nt 0 -1\n",
    ] {
        std::fs::write(Checkpoint::file(dir.path()), bad).unwrap();
        let err = Checkpoint::read(dir.path()).unwrap_err();
        assert!(
            matches!(err, Error::CorruptCheckpoint { .. }),
            "{bad:?} gave {err}"
        );
        assert!(err.to_string().contains(".checkpoint"), "{err}");
    }
    Checkpoint::delete(dir.path()).unwrap();
    Checkpoint::delete(dir.path()).unwrap();
    assert_eq!(Checkpoint::read(dir.path()).unwrap(), None);
}

#[test]
fn task_dir_lock_is_exclusive_until_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("0_1");
    let held = TaskDirLock::acquire(&task).unwrap();
    let err = TaskDirLock::acquire(&task).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    assert!(err.to_string().contains("0_1"), "{err}");
    drop(held);
    TaskDirLock::acquire(&task).unwrap();
}

/// The database's identity: a new one whenever RocksDB creates it anew.
fn identity(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("IDENTITY")).unwrap()
}

#[test]
fn clearing_an_empty_rocksdb_store_leaves_it_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rocksdb/counts");
    let mut s = RocksDbStore::open("counts", &path).unwrap();
    let before = identity(&path);
    s.clear().unwrap();
    assert_eq!(
        identity(&path),
        before,
        "an empty store was destroyed and created again"
    );
    // Deleted keys leave it empty too.
    s.put(b"k", b"v").unwrap();
    s.delete(b"k").unwrap();
    s.clear().unwrap();
    assert_eq!(identity(&path), before);
    // The control: a store with a key is wiped (created again) and empty.
    s.put(b"k", b"v").unwrap();
    s.clear().unwrap();
    assert_ne!(identity(&path), before);
    assert!(s.all().unwrap().is_empty());
}
