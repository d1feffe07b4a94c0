//! Storage tests: append/read, recovery after a crash (torn and corrupt
//! tails), indexes, retention, compaction, idempotent-producer state across
//! restarts, DeleteRecords persistence. Time is passed in explicitly.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use rill_protocol::records::{self, Compression, Record};
use rill_protocol::ErrorCode;

use super::log::PartitionLog;
use crate::config::LogSettings;

const T0: i64 = 1_700_000_000_000;

fn settings(pairs: &[(&str, &str)]) -> Arc<LogSettings> {
    let m: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(LogSettings::resolve(&m, &BTreeMap::new()))
}

fn batch(keys: &[&str], value: &str, ts: i64) -> Vec<u8> {
    let recs: Vec<Record> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            records::simple_record(
                i as i64,
                ts,
                Some(Bytes::from(k.to_string())),
                Some(Bytes::from(value.to_string())),
            )
        })
        .collect();
    records::encode_records(&recs, Compression::None)
        .unwrap()
        .to_vec()
}

fn tombstone(key: &str, ts: i64) -> Vec<u8> {
    records::encode_records(
        &[records::simple_record(
            0,
            ts,
            Some(Bytes::from(key.to_string())),
            None,
        )],
        Compression::None,
    )
    .unwrap()
    .to_vec()
}

fn idempotent(pid: i64, seq: i32, n: usize, ts: i64) -> Vec<u8> {
    let recs: Vec<Record> = (0..n)
        .map(|i| {
            let mut r = records::simple_record(
                i as i64,
                ts,
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from("v")),
            );
            r.producer_id = pid;
            r.producer_epoch = 0;
            r.sequence = seq + i as i32;
            r
        })
        .collect();
    records::encode_records(&recs, Compression::Lz4)
        .unwrap()
        .to_vec()
}

fn read_all(log: &PartitionLog) -> Vec<Record> {
    let start = log.offsets().log_start_offset;
    let mut out = Vec::new();
    let mut at = start;
    loop {
        let r = log.read(at, 1 << 20, true).unwrap();
        if r.records.is_empty() {
            break;
        }
        let recs = records::decode_records(&r.records).unwrap();
        at = records::BatchIter::new(&r.records)
            .map(|(_, h)| h.next_offset())
            .last()
            .unwrap();
        out.extend(recs.into_iter().filter(|r| r.offset >= start));
    }
    out
}

fn keys(recs: &[Record]) -> Vec<String> {
    recs.iter()
        .map(|r| String::from_utf8_lossy(r.key.as_deref().unwrap()).to_string())
        .collect()
}

#[test]
fn appends_are_dense_and_readable_in_memory_and_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    for log in [
        PartitionLog::in_memory("t", 0, settings(&[]), T0),
        PartitionLog::open("t", 0, &dir.path().join("t-0"), settings(&[]), T0).unwrap(),
    ] {
        assert_eq!(
            log.append(batch(&["a", "b"], "x", T0), 0, T0)
                .unwrap()
                .base_offset,
            0
        );
        assert_eq!(
            log.append(batch(&["c"], "y", T0), 0, T0)
                .unwrap()
                .base_offset,
            2
        );
        assert_eq!(keys(&read_all(&log)), vec!["a", "b", "c"]);
        assert_eq!(log.offsets().high_watermark, 3);
        assert!(matches!(
            log.read(4, 100, true),
            Err(super::ReadError::OutOfRange(_))
        ));
        assert!(log.read(3, 100, true).unwrap().records.is_empty());
    }
}

#[test]
fn recovery_truncates_a_torn_tail_and_keeps_everything_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    {
        let log = PartitionLog::open("t", 0, &path, settings(&[]), T0).unwrap();
        for i in 0..10 {
            log.append(batch(&[&format!("k{i}")], "v", T0), 0, T0)
                .unwrap();
        }
        // No clean close: like a killed process, the checkpoint is stale.
    }
    // Simulate a crash mid-write: half a batch at the end.
    let seg = path.join(format!("{:020}.log", 0));
    let half = &batch(&["torn"], "v", T0)[..30];
    OpenOptions::new()
        .append(true)
        .open(&seg)
        .unwrap()
        .write_all(half)
        .unwrap();
    let log = PartitionLog::open("t", 0, &path, settings(&[]), T0).unwrap();
    assert_eq!(log.offsets().high_watermark, 10);
    assert_eq!(read_all(&log).len(), 10);
    // The log is appendable right after the truncation point.
    assert_eq!(
        log.append(batch(&["next"], "v", T0), 0, T0)
            .unwrap()
            .base_offset,
        10
    );
}

#[test]
fn recovery_drops_a_corrupt_batch_and_everything_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let mut sizes = Vec::new();
    {
        let log = PartitionLog::open("t", 0, &path, settings(&[]), T0).unwrap();
        for i in 0..5 {
            let b = batch(&[&format!("k{i}")], "vvvv", T0);
            sizes.push(b.len());
            log.append(b, 0, T0).unwrap();
        }
    }
    // Flip a byte inside the record data of the fourth batch.
    let seg = path.join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    let at: usize = sizes[..3].iter().sum::<usize>() + sizes[3] - 2;
    bytes[at] ^= 0xff;
    std::fs::write(&seg, &bytes).unwrap();
    std::fs::remove_file(path.join("state.json")).unwrap();
    let log = PartitionLog::open("t", 0, &path, settings(&[]), T0).unwrap();
    assert_eq!(
        log.offsets().high_watermark,
        3,
        "batches 3 and 4 are gone, 0..3 survive"
    );
    assert_eq!(keys(&read_all(&log)), vec!["k0", "k1", "k2"]);
}

#[test]
fn clean_close_reopens_without_recovery_and_indexes_still_find_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let s = settings(&[
        ("segment.bytes", "1048576"),
        ("index.interval.bytes", "100"),
    ]);
    {
        let log = PartitionLog::open("t", 0, &path, s.clone(), T0).unwrap();
        for i in 0..3000 {
            log.append(batch(&[&format!("k{i}")], &"v".repeat(400), T0 + i), 0, T0)
                .unwrap();
        }
        assert!(log.segment_count() > 1, "1 MiB segments rolled");
        log.close().unwrap();
    }
    assert!(path.join(format!("{:020}.index", 0)).exists());
    let log = PartitionLog::open("t", 0, &path, s, T0).unwrap();
    assert_eq!(log.offsets().high_watermark, 3000);
    for target in [0i64, 1, 999, 2500, 2999] {
        let r = log.read(target, 1000, true).unwrap();
        let first = records::decode_records(&r.records).unwrap()[0].offset;
        assert_eq!(first, target, "reading from {target}");
    }
    assert_eq!(
        log.offset_for_timestamp(T0 + 1234).unwrap(),
        Some((1234, T0 + 1234))
    );
}

#[test]
fn idempotent_producer_state_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    {
        let log = PartitionLog::open("t", 0, &path, settings(&[]), T0).unwrap();
        log.append(idempotent(7, 0, 3, T0), 0, T0).unwrap();
        log.checkpoint().unwrap();
        log.append(idempotent(7, 3, 2, T0), 0, T0).unwrap(); // after the checkpoint
    }
    let log = PartitionLog::open("t", 0, &path, settings(&[]), T0).unwrap();
    // Retries of both batches are recognised as duplicates with their offsets.
    let dup = log.append(idempotent(7, 3, 2, T0), 0, T0).unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.base_offset, 3);
    assert!(
        log.append(idempotent(7, 0, 3, T0), 0, T0)
            .unwrap()
            .duplicate
    );
    let gap = log.append(idempotent(7, 9, 1, T0), 0, T0).unwrap_err();
    assert_eq!(gap.code, ErrorCode::OutOfOrderSequenceNumber);
    assert_eq!(
        log.append(idempotent(7, 5, 1, T0), 0, T0)
            .unwrap()
            .base_offset,
        5
    );
}

#[test]
fn retention_by_time_and_size_deletes_whole_old_segments() {
    let day = 86_400_000;
    let log = PartitionLog::in_memory(
        "t",
        0,
        settings(&[
            ("segment.bytes", "1048576"),
            ("retention.ms", &day.to_string()),
        ]),
        T0,
    );
    for i in 0..6000 {
        let ts = if i < 3000 { T0 - 3 * day } else { T0 };
        log.append(batch(&[&format!("k{i}")], &"v".repeat(400), ts), 0, T0)
            .unwrap();
    }
    let segments = log.segment_count();
    assert!(segments >= 3, "{segments} segments");
    let deleted = log.apply_retention(T0).unwrap();
    assert!(deleted >= 1);
    let start = log.offsets().log_start_offset;
    assert!(start > 0 && start <= 3000, "log start {start}");
    assert!(matches!(
        log.read(0, 100, true),
        Err(super::ReadError::OutOfRange(_))
    ));

    let log = PartitionLog::in_memory(
        "t",
        0,
        settings(&[("segment.bytes", "1048576"), ("retention.bytes", "1500000")]),
        T0,
    );
    for i in 0..6000 {
        log.append(batch(&[&format!("k{i}")], &"v".repeat(400), T0), 0, T0)
            .unwrap();
    }
    log.apply_retention(T0).unwrap();
    assert!(
        log.size_bytes() <= 1500000 + 1048576,
        "size {}",
        log.size_bytes()
    );
    assert_eq!(log.offsets().high_watermark, 6000);
}

#[test]
fn compaction_keeps_the_latest_value_per_key_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&[
        ("cleanup.policy", "compact"),
        ("segment.bytes", "1048576"),
        ("delete.retention.ms", "0"),
    ]);
    let log = PartitionLog::open("t", 0, &dir.path().join("t-0"), s.clone(), T0).unwrap();
    // 20 keys overwritten 150 times each, ~1.2 MB: at least one closed segment.
    for round in 0..150 {
        for k in 0..20 {
            log.append(
                batch(
                    &[&format!("key{k}")],
                    &format!("{round}-{}", "x".repeat(400)),
                    T0,
                ),
                0,
                T0,
            )
            .unwrap();
        }
    }
    log.append(tombstone("key0", T0 - 10), 0, T0).unwrap();
    // Roll so the tombstone is in a closed segment too.
    for k in 0..3000 {
        log.append(batch(&[&format!("filler{k}")], &"y".repeat(400), T0), 0, T0)
            .unwrap();
    }
    let before = log.size_bytes();
    let stats = log.compact(T0, true).unwrap();
    assert!(stats.records_removed > 2000, "{stats:?}");
    assert!(log.size_bytes() < before);
    let recs = read_all(&log);
    let mut latest: BTreeMap<String, (i64, Option<Bytes>)> = BTreeMap::new();
    let mut last_offset = -1;
    for r in &recs {
        assert!(r.offset > last_offset, "offsets stay increasing");
        last_offset = r.offset;
        let k = String::from_utf8_lossy(r.key.as_deref().unwrap()).to_string();
        assert!(
            latest
                .insert(k.clone(), (r.offset, r.value.clone()))
                .is_none()
                || k.starts_with("filler"),
            "{k} appears twice after compaction"
        );
    }
    assert!(
        !latest.contains_key("key0"),
        "the expired tombstone and the key are gone"
    );
    for k in 1..20 {
        let v = latest[&format!("key{k}")].1.clone().unwrap();
        assert!(v.starts_with(b"149-"), "key{k} kept its latest value");
    }
    // Survives a reopen.
    log.close().unwrap();
    let log = PartitionLog::open("t", 0, &dir.path().join("t-0"), s, T0).unwrap();
    assert_eq!(read_all(&log).len(), recs.len());
}

#[test]
fn delete_records_moves_the_start_and_persists() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    {
        let log = PartitionLog::open("t", 0, &path, settings(&[]), T0).unwrap();
        for i in 0..10 {
            log.append(batch(&[&format!("k{i}")], "v", T0), 0, T0)
                .unwrap();
        }
        assert_eq!(log.delete_records_before(4, T0), Ok(4));
        assert!(log.delete_records_before(11, T0).is_err());
    }
    let log = PartitionLog::open("t", 0, &path, settings(&[]), T0).unwrap();
    assert_eq!(log.offsets().log_start_offset, 4);
    assert_eq!(
        keys(&read_all(&log)),
        vec!["k4", "k5", "k6", "k7", "k8", "k9"]
    );
}

#[test]
fn leader_epochs_answer_offset_for_leader_epoch() {
    let log = PartitionLog::in_memory("t", 0, settings(&[]), T0);
    log.append(batch(&["a", "b"], "v", T0), 0, T0).unwrap();
    log.append(batch(&["c"], "v", T0), 2, T0).unwrap();
    log.append(batch(&["d"], "v", T0), 5, T0).unwrap();
    assert_eq!(log.end_offset_for_epoch(0), (0, 2));
    assert_eq!(log.end_offset_for_epoch(1), (0, 2));
    assert_eq!(log.end_offset_for_epoch(2), (2, 3));
    assert_eq!(log.end_offset_for_epoch(5), (5, 4));
    assert_eq!(log.end_offset_for_epoch(9), (-1, -1));
}

#[test]
fn compression_type_recompresses_batches() {
    let log = PartitionLog::in_memory("t", 0, settings(&[("compression.type", "zstd")]), T0);
    log.append(batch(&["a", "b", "c"], "vvvvvvvvvvvvvvvv", T0), 0, T0)
        .unwrap();
    let r = log.read(0, 1 << 20, true).unwrap();
    let h = records::BatchHeader::parse(&r.records).unwrap();
    assert_eq!(h.compression(), Some(Compression::Zstd));
    assert_eq!(keys(&read_all(&log)), vec!["a", "b", "c"]);
    // Producer state still works on recompressed idempotent batches.
    log.append(idempotent(3, 0, 2, T0), 0, T0).unwrap();
    assert!(
        log.append(idempotent(3, 0, 2, T0), 0, T0)
            .unwrap()
            .duplicate
    );
}

/// A disk-full failure starts an episode once (one log line however many
/// appends fail); another I/O error starts none; a successful append ends
/// it (its own line).
#[test]
fn disk_full_is_one_episode_until_an_append_succeeds() {
    use super::log::{disk_full_ends, disk_full_starts};
    use std::io::ErrorKind;
    use std::sync::atomic::AtomicBool;
    let flag = AtomicBool::new(false);
    assert!(!disk_full_starts(&flag, ErrorKind::Other));
    assert!(!disk_full_ends(&flag));
    assert!(disk_full_starts(&flag, ErrorKind::StorageFull));
    assert!(!disk_full_starts(&flag, ErrorKind::StorageFull));
    assert!(disk_full_ends(&flag));
    assert!(!disk_full_ends(&flag));
    assert!(disk_full_starts(&flag, ErrorKind::StorageFull));
}

/// A transactional batch of `n` records from producer `pid` (epoch 0).
fn transactional(pid: i64, seq: i32, n: usize, ts: i64) -> Vec<u8> {
    let mut b = idempotent(pid, seq, n, ts);
    records::set_transactional(&mut b);
    b
}

#[test]
fn read_committed_stops_at_open_transactions_and_lists_aborted_ones() {
    use rill_protocol::records::ControlRecordType::{Abort, Commit};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t-0");
    {
        let log = PartitionLog::open("t", 0, &path, settings(&[]), T0).unwrap();
        log.append(batch(&["plain"], "v", T0), 0, T0).unwrap(); // 0
        log.append(transactional(1, 0, 2, T0), 0, T0).unwrap(); // 1-2, aborted below
        log.append(transactional(2, 0, 2, T0), 0, T0).unwrap(); // 3-4, committed below
        assert_eq!(log.offsets().last_stable_offset, 1);
        let r = log.read_isolated(0, 1 << 20, true, true).unwrap();
        assert_eq!(
            records::decode_records(&r.records).unwrap().len(),
            1,
            "only the plain record is stable"
        );
        assert_eq!(log.append_marker(Abort, 1, 0, 0, 0, T0).unwrap(), 5);
        assert_eq!(log.offsets().last_stable_offset, 3);
        log.append_marker(Commit, 2, 0, 0, 0, T0).unwrap(); // 6
        log.checkpoint().unwrap();
        log.append(transactional(3, 0, 1, T0), 0, T0).unwrap(); // 7, open, after the checkpoint
        log.append(transactional(4, 0, 1, T0), 0, T0).unwrap(); // 8, aborted after the checkpoint
        log.append_marker(Abort, 4, 0, 0, 0, T0).unwrap(); // 9
                                                           // An older epoch's marker is refused; a repeated one changes nothing.
        assert_eq!(
            log.append_marker(Abort, 4, -1, 0, 0, T0).unwrap_err().code,
            ErrorCode::InvalidProducerEpoch
        );
    }
    // Reopened without a clean close: the index after the checkpoint is
    // rebuilt from the markers in the log.
    let log = PartitionLog::open("t", 0, &path, settings(&[]), T0).unwrap();
    let o = log.offsets();
    assert_eq!((o.high_watermark, o.last_stable_offset), (10, 7));
    let r = log.read_isolated(0, 1 << 20, true, true).unwrap();
    let got: Vec<i64> = records::decode_records(&r.records)
        .unwrap()
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(
        got,
        vec![0, 1, 2, 3, 4, 5, 6],
        "whole batches below the LSO"
    );
    let aborted: Vec<(i64, i64)> = r
        .aborted
        .iter()
        .map(|a| (a.producer_id, a.first_offset))
        .collect();
    assert_eq!(aborted, vec![(1, 1)]);
    // The producer whose abort came after the checkpoint is fenced at its
    // old epoch and listed as aborted for a reader past the LSO.
    log.append_marker(Commit, 3, 0, 0, 0, T0).unwrap(); // 10: LSO moves to the end
    let r = log.read_isolated(7, 1 << 20, true, true).unwrap();
    assert_eq!(r.last_stable_offset, 11);
    let aborted: Vec<(i64, i64)> = r
        .aborted
        .iter()
        .map(|a| (a.producer_id, a.first_offset))
        .collect();
    assert_eq!(aborted, vec![(4, 8)]);
    let producers = log.active_producers();
    assert!(producers.iter().all(|p| p.current_txn_start_offset == -1));
    // read_uncommitted reads everything and lists no aborted transactions.
    let r = log.read_isolated(0, 1 << 20, true, false).unwrap();
    assert!(r.aborted.is_empty());
    assert_eq!(records::BatchIter::new(&r.records).count(), 9);
}
