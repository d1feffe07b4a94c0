//! A partition's log: ordered segments, the idempotent-producer state, the
//! leader-epoch cache, and the checkpoint that makes restarts cheap.
//!
//! Invariants:
//! - Offsets are dense at append time: each batch's base offset is the log end
//!   offset (LEO) when it is appended; compaction may later leave gaps.
//! - `log_start_offset <= next_offset`; reads below the start or above the end
//!   are OFFSET_OUT_OF_RANGE. The high watermark equals the LEO: every replica
//!   of the embedded cluster shares this one log, so an append is replicated
//!   as soon as it is written.
//! - Recovery after a crash: `state.json` records a recovery point (all data
//!   before it was accounted for when the checkpoint was written), the
//!   producer state and leader epochs as of that point, and the log start
//!   offset. On open, segments from the one holding the recovery point onward
//!   are read batch by batch, CRC-checked, their indexes rebuilt, and a torn or
//!   corrupt tail truncated, like Kafka's `LogLoader`. Without a checkpoint the
//!   whole log is recovered.
//! - Validation that needs no lock (CRC, sizes, timestamps, keys on compacted
//!   topics) runs before the partition lock is taken.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use rill_protocol::records::{
    self, validate_batch, BatchError, BatchHeader, BatchIter, ControlRecordType,
};
use rill_protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use super::producer_state::{ProducerStateManager, ProducerSummary, SequenceCheck};
use super::segment::{file_stem, Segment};
use super::txn_index::{AbortedTxn, TxnIndex};
use crate::config::LogSettings;

/// Why an append was refused; `code` goes on the wire, `message` in logs and
/// the response's error message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct AppendError {
    pub code: ErrorCode,
    pub message: String,
}

impl AppendError {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    /// Broker timestamp when the topic uses LogAppendTime, else -1.
    pub log_append_time: i64,
    pub log_start_offset: i64,
    /// The batch was a retry of one already in the log.
    pub duplicate: bool,
}

#[derive(Debug, Clone)]
pub struct ReadResult {
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// First offset of the earliest open transaction, or the high watermark.
    pub last_stable_offset: i64,
    /// For `read_committed` reads: aborted transactions overlapping the
    /// records returned (empty otherwise).
    pub aborted: Vec<AbortedTxn>,
}

/// Offsets a reader can see right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOffsets {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// Where `read_committed` readers stop (KIP-98).
    pub last_stable_offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
pub struct OutOfRange {
    pub offset: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
struct EpochEntry {
    epoch: i32,
    start_offset: i64,
}

/// What `state.json` holds.
#[derive(Debug, Serialize, Deserialize)]
struct Checkpoint {
    recovery_point: i64,
    log_start_offset: i64,
    cleaner_checkpoint: i64,
    epochs: Vec<EpochEntry>,
    producers: ProducerStateManager,
    /// Open and aborted transactions (absent in checkpoints written before
    /// transactions were supported: replay from the recovery point fills it).
    #[serde(default)]
    txns: TxnIndex,
}

pub(super) struct LogInner {
    pub settings: Arc<LogSettings>,
    pub segments: BTreeMap<i64, Segment>,
    pub log_start_offset: i64,
    pub next_offset: i64,
    producers: ProducerStateManager,
    txns: TxnIndex,
    epochs: Vec<EpochEntry>,
    /// Offsets below this have been compacted (Kafka's cleaner-offset-checkpoint).
    pub cleaner_checkpoint: i64,
    unflushed_messages: i64,
    last_flush_ms: i64,
}

/// One topic partition's log.
pub struct PartitionLog {
    pub topic: String,
    pub partition: i32,
    dir: Option<PathBuf>,
    inner: Mutex<LogInner>,
    appended: Notify,
}

impl std::fmt::Debug for PartitionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PartitionLog({}-{})", self.topic, self.partition)
    }
}

fn io_err(tp: &str, e: io::Error) -> AppendError {
    AppendError::new(
        ErrorCode::KafkaStorageError,
        format!("storage error on {tp}: {e}"),
    )
}

/// Whether the broker is in a disk-full episode: set by the first append
/// that fails for lack of space (which logs it, naming the directory),
/// cleared by the next append that succeeds (which logs the recovery).
/// Clients only see KAFKA_STORAGE_ERROR, so without this log an operator
/// would see nothing but client timeouts.
static DISK_FULL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the failure `kind` starts a disk-full episode on `flag` (true
/// once per episode: the caller logs it).
pub(super) fn disk_full_starts(flag: &std::sync::atomic::AtomicBool, kind: io::ErrorKind) -> bool {
    kind == io::ErrorKind::StorageFull && !flag.swap(true, std::sync::atomic::Ordering::Relaxed)
}

/// Whether a successful append ends a disk-full episode on `flag`.
pub(super) fn disk_full_ends(flag: &std::sync::atomic::AtomicBool) -> bool {
    flag.load(std::sync::atomic::Ordering::Relaxed)
        && flag.swap(false, std::sync::atomic::Ordering::Relaxed)
}

impl PartitionLog {
    /// [`io_err`], logging the start of a disk-full episode once.
    fn append_io_err(&self, tp: &str, e: io::Error) -> AppendError {
        if disk_full_starts(&DISK_FULL, e.kind()) {
            let dir = self
                .dir
                .as_ref()
                .map_or_else(|| "(in memory)".to_string(), |d| d.display().to_string());
            tracing::error!(
                partition = tp,
                "disk full: writing {dir} failed ({e}); produce requests fail with KAFKA_STORAGE_ERROR until space is freed"
            );
        }
        io_err(tp, e)
    }
}

impl PartitionLog {
    /// An empty in-memory log.
    pub fn in_memory(topic: &str, partition: i32, settings: Arc<LogSettings>, now_ms: i64) -> Self {
        let mut segments = BTreeMap::new();
        segments.insert(0, Segment::new_memory(0, now_ms));
        Self::from_parts(
            topic,
            partition,
            None,
            LogInner::new(settings, segments, 0, now_ms),
        )
    }

    fn from_parts(topic: &str, partition: i32, dir: Option<PathBuf>, inner: LogInner) -> Self {
        Self {
            topic: topic.to_string(),
            partition,
            dir,
            inner: Mutex::new(inner),
            appended: Notify::new(),
        }
    }

    /// Opens (creating if needed) the log in `dir`, recovering it.
    pub fn open(
        topic: &str,
        partition: i32,
        dir: &Path,
        settings: Arc<LogSettings>,
        now_ms: i64,
    ) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        let mut bases = Vec::new();
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            if name.ends_with(".cleaned") || name.ends_with(".tmp") {
                // Leftovers of a compaction or checkpoint write cut short.
                let _ = fs::remove_file(&path);
                continue;
            }
            if let Some(stem) = name.strip_suffix(".log") {
                if let Ok(base) = stem.parse::<i64>() {
                    bases.push(base);
                }
            }
        }
        bases.sort_unstable();
        let checkpoint: Option<Checkpoint> = fs::read(dir.join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let (recovery_point, mut producers, mut txns, mut epochs, log_start, cleaner_checkpoint) =
            match checkpoint {
                Some(c) => (
                    c.recovery_point,
                    c.producers,
                    c.txns,
                    c.epochs,
                    c.log_start_offset,
                    c.cleaner_checkpoint,
                ),
                None => (
                    0,
                    ProducerStateManager::default(),
                    TxnIndex::default(),
                    Vec::new(),
                    0,
                    0,
                ),
            };
        // Recover from the segment holding the recovery point onward.
        let first_to_recover = bases
            .iter()
            .rev()
            .find(|&&b| b <= recovery_point)
            .copied()
            .unwrap_or(i64::MIN);
        let tp = format!("{topic}-{partition}");
        let mut segments = BTreeMap::new();
        let mut truncated_at: Option<i64> = None;
        for &base in &bases {
            let path = dir.join(format!("{}.log", file_stem(base)));
            if truncated_at.is_some() {
                // Everything after a corrupt batch is discarded, as Kafka does.
                warn!(partition = %tp, segment = base, "deleting segment after a corrupt batch");
                Segment::open_file(
                    &path,
                    base,
                    settings.index_interval_bytes,
                    false,
                    &mut |_, _| {},
                )?
                .0
                .delete()?;
                continue;
            }
            let recover = base >= first_to_recover;
            let mut on_batch = |h: &BatchHeader, marker: Option<ControlRecordType>| {
                if h.base_offset >= recovery_point {
                    producers.record(h);
                    if h.is_control() {
                        producers.note_marker(h.producer_id, h.producer_epoch);
                    }
                    txns.on_batch(h, marker);
                    note_epoch(&mut epochs, h.partition_leader_epoch, h.base_offset);
                }
            };
            let (seg, problem) = Segment::open_file(
                &path,
                base,
                settings.index_interval_bytes,
                recover,
                &mut on_batch,
            )?;
            if let Some(problem) = problem {
                warn!(partition = %tp, segment = base, %problem, "truncated the log during recovery");
                truncated_at = Some(seg.next_offset);
            }
            segments.insert(base, seg);
        }
        let mut next_offset = segments
            .values()
            .next_back()
            .map_or(log_start, |s: &Segment| s.next_offset);
        if segments.is_empty() {
            next_offset = log_start.max(0);
            segments.insert(next_offset, Segment::create_file(dir, next_offset, now_ms)?);
        }
        let first_base = *segments.keys().next().unwrap();
        let mut inner = LogInner::new(settings, segments, log_start.max(first_base), now_ms);
        inner.next_offset = next_offset;
        inner.log_start_offset = inner.log_start_offset.min(next_offset);
        inner.producers = producers;
        inner.producers.truncate_from(next_offset);
        txns.truncate_from(next_offset);
        inner.txns = txns;
        epochs.retain(|e| e.start_offset <= next_offset);
        inner.epochs = epochs;
        inner.cleaner_checkpoint = cleaner_checkpoint.min(next_offset);
        let log = Self::from_parts(topic, partition, Some(dir.to_path_buf()), inner);
        {
            let inner = log.lock();
            log.write_checkpoint(&inner)?;
            // One line per partition (50 for __consumer_offsets alone) is
            // debug detail; the broker logs one summary at info.
            debug!(partition = %tp, log_start = inner.log_start_offset, log_end = inner.next_offset,
                  segments = inner.segments.len(), producers = inner.producers.len(), "loaded log");
        }
        Ok(log)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, LogInner> {
        // A panic while holding the lock cannot leave a half-written batch
        // visible (size moves only after a full write), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    pub fn name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }

    pub fn settings(&self) -> Arc<LogSettings> {
        self.lock().settings.clone()
    }

    pub fn offsets(&self) -> LogOffsets {
        let inner = self.lock();
        LogOffsets {
            log_start_offset: inner.log_start_offset,
            high_watermark: inner.next_offset,
            last_stable_offset: inner.txns.last_stable_offset(inner.next_offset),
        }
    }

    /// Producers with state here, for DescribeProducers (KIP-664).
    pub fn active_producers(&self) -> Vec<ProducerSummary> {
        let inner = self.lock();
        inner
            .producers
            .summaries()
            .into_iter()
            .map(|mut p| {
                p.current_txn_start_offset = inner.txns.open_since(p.producer_id).unwrap_or(-1);
                p
            })
            .collect()
    }

    /// Writes a transaction marker for `producer_id` (KIP-98), as the
    /// transaction coordinator does at the end of a transaction. A marker
    /// with an epoch older than the producer's is INVALID_PRODUCER_EPOCH;
    /// a newer one fences the older epoch's later appends here.
    pub fn append_marker(
        &self,
        kind: ControlRecordType,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<i64, AppendError> {
        let tp = self.name();
        let mut inner = self.lock();
        if let Some(current) = inner.producers.epoch_of(producer_id) {
            if producer_epoch < current {
                return Err(AppendError::new(
                    ErrorCode::InvalidProducerEpoch,
                    format!("marker for producer {producer_id} epoch {producer_epoch} is older than epoch {current} on {tp}"),
                ));
            }
        }
        let mut batch =
            records::control_batch(kind, producer_id, producer_epoch, coordinator_epoch, now_ms)
                .to_vec();
        let stamped = self.write_batch(&mut inner, &tp, &mut batch, leader_epoch, now_ms)?;
        let offset = stamped.base_offset;
        inner.producers.note_marker(producer_id, producer_epoch);
        inner.txns.on_batch(&stamped, Some(kind));
        // Markers decide what read_committed readers see: make them durable
        // now rather than at the next flush interval.
        let active = inner.segments.values().next_back().unwrap();
        active.fsync().map_err(|e| self.append_io_err(&tp, e))?;
        inner.unflushed_messages = 0;
        inner.last_flush_ms = now_ms;
        drop(inner);
        self.appended.notify_waiters();
        Ok(offset)
    }

    #[cfg(test)]
    pub fn size_bytes(&self) -> u64 {
        self.lock().segments.values().map(Segment::size).sum()
    }

    #[cfg(test)]
    pub fn segment_count(&self) -> usize {
        self.lock().segments.len()
    }

    /// Notified after every append; fetch long-polls wait on it.
    pub fn appended(&self) -> &Notify {
        &self.appended
    }

    /// Validates and appends one producer batch (the whole `records` field of
    /// a produce partition, which must hold exactly one batch, as Kafka
    /// requires for produce v3+).
    pub fn append(
        &self,
        mut batch: Vec<u8>,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, AppendError> {
        let tp = self.name();
        let settings = self.settings();
        let h = self.validate(&batch, &settings, now_ms)?;
        let mut inner = self.lock();
        match inner.producers.check(&h) {
            Ok(SequenceCheck::Append) => {}
            Ok(SequenceCheck::Duplicate(meta)) => {
                debug!(partition = %tp, producer = h.producer_id, seq = h.base_sequence, "duplicate batch");
                return Ok(AppendInfo {
                    base_offset: meta.first_offset,
                    log_append_time: -1,
                    log_start_offset: inner.log_start_offset,
                    duplicate: true,
                });
            }
            Err((code, msg)) => return Err(AppendError::new(code, format!("{msg} on {tp}"))),
        }
        let base_offset = inner.next_offset;
        if let Some(target) = settings.compression.filter(|c| Some(*c) != h.compression()) {
            // `compression.type` names a codec: store the batch recompressed,
            // as Kafka's LogValidator does.
            batch = recompress(&batch, target).map_err(|e| {
                AppendError::new(
                    ErrorCode::CorruptMessage,
                    format!("record batch for {tp}: {e}"),
                )
            })?;
        }
        let mut log_append_time = -1;
        if settings.log_append_time {
            // The CRC covers the timestamps, not the base offset or epoch
            // `write_batch` stamps next.
            records::set_log_append_time(&mut batch, now_ms);
            log_append_time = now_ms;
        }
        let stamped = self.write_batch(&mut inner, &tp, &mut batch, leader_epoch, now_ms)?;
        inner.producers.record(&stamped);
        inner.txns.on_batch(&stamped, None);
        inner.unflushed_messages += stamped.record_count as i64;
        if inner.unflushed_messages >= settings.flush_messages
            || now_ms.saturating_sub(inner.last_flush_ms) >= settings.flush_ms
        {
            let active = inner.segments.values().next_back().unwrap();
            active.fsync().map_err(|e| self.append_io_err(&tp, e))?;
            inner.unflushed_messages = 0;
            inner.last_flush_ms = now_ms;
        }
        let log_start_offset = inner.log_start_offset;
        drop(inner);
        self.appended.notify_waiters();
        Ok(AppendInfo {
            base_offset,
            log_append_time,
            log_start_offset,
            duplicate: false,
        })
    }

    /// Writes a validated batch at the log end: rolls the active segment
    /// when due, stamps the base offset and leader epoch, appends, and moves
    /// the log end and the leader-epoch cache. The batch's header as written.
    fn write_batch(
        &self,
        inner: &mut LogInner,
        tp: &str,
        batch: &mut [u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<BatchHeader, AppendError> {
        let last_delta = BatchHeader::parse(batch).map_or(0, |h| h.last_offset_delta);
        if self.should_roll(inner, batch.len(), last_delta, now_ms) {
            self.roll(inner, now_ms)
                .map_err(|e| self.append_io_err(tp, e))?;
        }
        let base_offset = inner.next_offset;
        records::set_base_offset(batch, base_offset);
        records::set_partition_leader_epoch(batch, leader_epoch);
        let stamped = BatchHeader::parse(batch).expect("a validated batch has a header");
        let interval = inner.settings.index_interval_bytes;
        let active = inner
            .segments
            .values_mut()
            .next_back()
            .expect("a log always has a segment");
        active
            .append(batch, &stamped, interval, now_ms)
            .map_err(|e| self.append_io_err(tp, e))?;
        if disk_full_ends(&DISK_FULL) {
            info!(partition = %tp, "appends succeed again: the disk-full episode is over");
        }
        inner.next_offset = stamped.next_offset();
        note_epoch(&mut inner.epochs, leader_epoch, base_offset);
        Ok(stamped)
    }

    fn validate(
        &self,
        batch: &[u8],
        settings: &LogSettings,
        now_ms: i64,
    ) -> Result<BatchHeader, AppendError> {
        let tp = self.name();
        // Exactly one batch (Kafka: "Produce requests with version 3 and above
        // must contain exactly one record batch per partition").
        let mut iter = BatchIter::new(batch);
        let first = iter.next();
        if let Some((_, h)) = first {
            if h.total_size() < batch.len() {
                return Err(AppendError::new(
                    ErrorCode::InvalidRecord,
                    format!("produce to {tp} carries more than one record batch"),
                ));
            }
        }
        let h = validate_batch(batch, true).map_err(|e| {
            let code = match e {
                // Kafka: "Produce requests with version 3 and above are only
                // allowed to contain record batches with magic version 2".
                BatchError::UnsupportedMagic(_)
                | BatchError::BadRecordCount { .. }
                | BatchError::OffsetDeltaMismatch { .. } => ErrorCode::InvalidRecord,
                _ => ErrorCode::CorruptMessage,
            };
            AppendError::new(code, format!("invalid record batch for {tp}: {e}"))
        })?;
        if batch.len() > settings.max_message_bytes {
            return Err(AppendError::new(
                ErrorCode::MessageTooLarge,
                format!(
                    "record batch of {} bytes for {tp} exceeds max.message.bytes ({})",
                    batch.len(),
                    settings.max_message_bytes
                ),
            ));
        }
        if h.is_control() {
            return Err(AppendError::new(
                ErrorCode::InvalidRecord,
                format!("clients may not write control batches ({tp})"),
            ));
        }
        if h.is_transactional() && !h.has_producer_id() {
            return Err(AppendError::new(
                ErrorCode::InvalidRecord,
                format!("transactional record batch for {tp} carries no producer id"),
            ));
        }
        if !settings.log_append_time {
            if h.max_timestamp > now_ms.saturating_add(settings.timestamp_after_max_ms) {
                return Err(AppendError::new(
                    ErrorCode::InvalidTimestamp,
                    format!(
                        "timestamp {} for {tp} is more than message.timestamp.after.max.ms ({}) ahead of the broker",
                        h.max_timestamp, settings.timestamp_after_max_ms
                    ),
                ));
            }
            if h.base_timestamp >= 0
                && h.base_timestamp < now_ms.saturating_sub(settings.timestamp_before_max_ms)
            {
                return Err(AppendError::new(
                    ErrorCode::InvalidTimestamp,
                    format!(
                        "timestamp {} for {tp} is more than message.timestamp.before.max.ms ({}) behind the broker",
                        h.base_timestamp, settings.timestamp_before_max_ms
                    ),
                ));
            }
        }
        if settings.cleanup_compact {
            let bytes = Bytes::copy_from_slice(batch);
            let recs = records::decode_records(&bytes).map_err(|e| {
                AppendError::new(
                    ErrorCode::CorruptMessage,
                    format!("record batch for {tp}: {e}"),
                )
            })?;
            if recs.iter().any(|r| r.key.is_none()) {
                return Err(AppendError::new(
                    ErrorCode::InvalidRecord,
                    format!("compacted topic partition {tp} cannot accept a record without a key"),
                ));
            }
        }
        Ok(h)
    }

    fn should_roll(
        &self,
        inner: &LogInner,
        batch_len: usize,
        last_delta: i32,
        now_ms: i64,
    ) -> bool {
        let active = inner.segments.values().next_back().unwrap();
        if active.is_empty() {
            return false;
        }
        active.size() + batch_len as u64 > inner.settings.segment_bytes
            || now_ms.saturating_sub(active.created_ms) >= inner.settings.segment_ms
            || inner.next_offset + last_delta as i64 - active.base_offset > i32::MAX as i64
            || active.size() + batch_len as u64 > u32::MAX as u64
    }

    /// Closes the active segment and starts a new one at the LEO.
    fn roll(&self, inner: &mut LogInner, now_ms: i64) -> io::Result<()> {
        let next = inner.next_offset;
        if let Some(active) = inner.segments.values().next_back() {
            if active.base_offset == next {
                return Ok(());
            }
            active.save_indexes()?;
        }
        let seg = match &self.dir {
            Some(dir) => Segment::create_file(dir, next, now_ms)?,
            None => Segment::new_memory(next, now_ms),
        };
        inner.segments.insert(next, seg);
        debug!(partition = %self.name(), base_offset = next, "rolled segment");
        self.write_checkpoint(inner)
    }

    /// Reads whole batches from `offset`, up to `max_bytes` (at least one batch
    /// when `min_one_batch`, KIP-74), from the segment holding `offset`.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<ReadResult, ReadError> {
        self.read_isolated(offset, max_bytes, min_one_batch, false)
    }

    /// [`Self::read`] for a reader at an isolation level: `read_committed`
    /// reads stop at the last stable offset and carry the aborted
    /// transactions overlapping what they return (KIP-98).
    pub fn read_isolated(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        read_committed: bool,
    ) -> Result<ReadResult, ReadError> {
        let inner = self.lock();
        let lso = inner.txns.last_stable_offset(inner.next_offset);
        let upper = if read_committed {
            lso
        } else {
            inner.next_offset
        };
        let result = |mut records: Bytes| {
            let mut aborted = Vec::new();
            if read_committed && !records.is_empty() {
                // Whole batches below the LSO only.
                let keep = BatchIter::new(&records)
                    .take_while(|(_, h)| h.base_offset < upper)
                    .map(|(p, h)| p + h.total_size())
                    .last()
                    .unwrap_or(0);
                records.truncate(keep);
                let end = BatchIter::new(&records)
                    .last()
                    .map_or(offset, |(_, h)| h.next_offset());
                aborted = inner.txns.aborted_between(offset, end);
            }
            ReadResult {
                records,
                high_watermark: inner.next_offset,
                log_start_offset: inner.log_start_offset,
                last_stable_offset: lso,
                aborted,
            }
        };
        if offset < inner.log_start_offset || offset > inner.next_offset {
            return Err(ReadError::OutOfRange(OutOfRange {
                offset,
                log_start_offset: inner.log_start_offset,
                log_end_offset: inner.next_offset,
            }));
        }
        if offset >= upper {
            return Ok(result(Bytes::new()));
        }
        let start_base = inner
            .segments
            .range(..=offset)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        for (_, seg) in inner.segments.range(start_base..) {
            let Some(at) = seg.locate_offset(offset).map_err(ReadError::Io)? else {
                continue;
            };
            let first_len = at.header.total_size();
            if first_len > max_bytes {
                if !min_one_batch {
                    return Ok(result(Bytes::new()));
                }
                return Ok(result(Bytes::from(
                    seg.read_at(at.position, first_len).map_err(ReadError::Io)?,
                )));
            }
            let mut buf = seg.read_at(at.position, max_bytes).map_err(ReadError::Io)?;
            let whole = BatchIter::new(&buf)
                .map(|(p, h)| p + h.total_size())
                .last()
                .unwrap_or(0);
            buf.truncate(whole);
            return Ok(result(Bytes::from(buf)));
        }
        Ok(result(Bytes::new()))
    }

    /// Every record from the log start to the end, in order — how a
    /// coordinator replays its compacted internal topic at start.
    /// Compaction leaves gaps: each read continues after the last batch.
    pub fn replay(&self, mut f: impl FnMut(records::Record)) -> io::Result<()> {
        let mut offset = self.offsets().log_start_offset;
        loop {
            let chunk = self
                .read(offset, 1 << 20, true)
                .map_err(|e| io::Error::other(e.to_string()))?;
            if chunk.records.is_empty() {
                return Ok(());
            }
            for r in records::decode_records(&chunk.records).map_err(io::Error::other)? {
                f(r);
            }
            offset = BatchIter::new(&chunk.records)
                .map(|(_, h)| h.next_offset())
                .last()
                .unwrap_or(offset + 1);
        }
    }

    /// The first record at or after `timestamp`: (offset, timestamp), for
    /// ListOffsets. `None` when no record is that recent.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> io::Result<Option<(i64, i64)>> {
        let inner = self.lock();
        for seg in inner.segments.values() {
            let Some(at) = seg.locate_timestamp(timestamp)? else {
                continue;
            };
            let bytes = Bytes::from(seg.read_at(at.position, at.header.total_size())?);
            let recs = records::decode_records(&bytes).map_err(io::Error::other)?;
            if let Some(r) = recs
                .iter()
                .find(|r| r.timestamp >= timestamp && r.offset >= inner.log_start_offset)
            {
                return Ok(Some((r.offset, r.timestamp)));
            }
        }
        Ok(None)
    }

    /// The record with the largest timestamp (ListOffsets MAX_TIMESTAMP, KIP-734).
    pub fn max_timestamp_offset(&self) -> io::Result<Option<(i64, i64)>> {
        let max = {
            let inner = self.lock();
            inner
                .segments
                .values()
                .map(|s| s.max_timestamp)
                .max()
                .unwrap_or(-1)
        };
        if max < 0 {
            return Ok(None);
        }
        self.offset_for_timestamp(max)
    }

    /// OffsetForLeaderEpoch (KIP-101/279): the largest epoch ≤ `epoch` and the
    /// offset where it ended, or (-1, -1) when unknown.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let inner = self.lock();
        let Some(last) = inner.epochs.last() else {
            return (-1, -1);
        };
        if epoch == last.epoch {
            return (last.epoch, inner.next_offset);
        }
        let idx = inner.epochs.partition_point(|e| e.epoch <= epoch);
        if idx == 0 || idx == inner.epochs.len() {
            return (-1, -1);
        }
        (inner.epochs[idx - 1].epoch, inner.epochs[idx].start_offset)
    }

    /// DeleteRecords: moves the log start offset to `offset` (-1 = high
    /// watermark) and drops segments wholly below it. Returns the new start.
    pub fn delete_records_before(&self, offset: i64, now_ms: i64) -> Result<i64, OutOfRange> {
        let mut inner = self.lock();
        let target = if offset == -1 {
            inner.next_offset
        } else {
            offset
        };
        if target < 0 || target > inner.next_offset {
            return Err(OutOfRange {
                offset,
                log_start_offset: inner.log_start_offset,
                log_end_offset: inner.next_offset,
            });
        }
        if target > inner.log_start_offset {
            inner.log_start_offset = target;
            if let Err(e) = self.drop_segments_below_start(&mut inner, now_ms) {
                warn!(partition = %self.name(), error = %e, "could not delete segments");
            }
            let start = inner.log_start_offset;
            inner.producers.evict_before(start);
            inner.txns.evict_before(start);
            if let Err(e) = self.write_checkpoint(&inner) {
                warn!(partition = %self.name(), error = %e, "could not write checkpoint");
            }
        }
        Ok(inner.log_start_offset)
    }

    fn drop_segments_below_start(&self, inner: &mut LogInner, now_ms: i64) -> io::Result<()> {
        let start = inner.log_start_offset;
        let active_base = *inner.segments.keys().next_back().unwrap();
        if start == inner.next_offset && inner.next_offset > active_base {
            self.roll(inner, now_ms)?;
        }
        let doomed: Vec<i64> = inner
            .segments
            .iter()
            .filter(|(b, s)| {
                **b != *inner.segments.keys().next_back().unwrap() && s.next_offset <= start
            })
            .map(|(b, _)| *b)
            .collect();
        for b in doomed {
            if let Some(seg) = inner.segments.remove(&b) {
                seg.delete()?;
            }
        }
        Ok(())
    }

    /// Applies `retention.ms` / `retention.bytes` (for `cleanup.policy`
    /// containing `delete`). Returns the number of segments deleted.
    pub fn apply_retention(&self, now_ms: i64) -> io::Result<usize> {
        let mut inner = self.lock();
        if !inner.settings.cleanup_delete {
            return Ok(0);
        }
        let retention_ms = inner.settings.retention_ms;
        let retention_bytes = inner.settings.retention_bytes;
        let expired = |s: &Segment| {
            let ts = if s.max_timestamp >= 0 {
                s.max_timestamp
            } else {
                s.last_modified_ms
            };
            retention_ms >= 0 && !s.is_empty() && now_ms.saturating_sub(ts) > retention_ms
        };
        // An expired active segment is rolled so it can go too (Kafka does the same).
        if inner.segments.values().next_back().is_some_and(expired) {
            self.roll(&mut inner, now_ms)?;
        }
        let mut total: u64 = inner.segments.values().map(Segment::size).sum();
        let mut doomed = Vec::new();
        let count = inner.segments.len();
        for (i, (base, seg)) in inner.segments.iter().enumerate() {
            if i + 1 == count {
                break; // never the active segment
            }
            let over_size =
                retention_bytes >= 0 && total.saturating_sub(seg.size()) >= retention_bytes as u64;
            if expired(seg) || over_size {
                total -= seg.size();
                doomed.push(*base);
            } else {
                break;
            }
        }
        let n = doomed.len();
        for b in doomed {
            let seg = inner.segments.remove(&b).unwrap();
            inner.log_start_offset = inner.log_start_offset.max(seg.next_offset);
            seg.delete()?;
        }
        if n > 0 {
            let start = inner.log_start_offset;
            inner.producers.evict_before(start);
            inner.txns.evict_before(start);
            self.write_checkpoint(&inner)?;
            info!(partition = %self.name(), segments = n, log_start = start, "retention deleted segments");
        }
        Ok(n)
    }

    /// Compacts the closed segments if the topic is compacted and dirty enough.
    pub fn compact(&self, now_ms: i64, force: bool) -> io::Result<super::cleaner::CleanStats> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let stats = super::cleaner::clean(
            super::cleaner::Cleanable {
                settings: &inner.settings,
                segments: &mut inner.segments,
                cleaner_checkpoint: &mut inner.cleaner_checkpoint,
            },
            now_ms,
            force,
        )?;
        if stats.segments_rewritten > 0 {
            self.write_checkpoint(inner)?;
        }
        Ok(stats)
    }

    /// Rolls the active segment if `segment.ms` has passed, and fsyncs if
    /// `flush.ms` has; called by the broker's maintenance loop.
    pub fn tick(&self, now_ms: i64) -> io::Result<()> {
        let mut inner = self.lock();
        let active = inner.segments.values().next_back().unwrap();
        if !active.is_empty()
            && now_ms.saturating_sub(active.created_ms) >= inner.settings.segment_ms
        {
            self.roll(&mut inner, now_ms)?;
        }
        if inner.unflushed_messages > 0
            && now_ms.saturating_sub(inner.last_flush_ms) >= inner.settings.flush_ms
        {
            inner.segments.values().next_back().unwrap().fsync()?;
            inner.unflushed_messages = 0;
            inner.last_flush_ms = now_ms;
        }
        Ok(())
    }

    /// Writes the checkpoint with the recovery point at the log end.
    pub fn checkpoint(&self) -> io::Result<()> {
        let inner = self.lock();
        self.write_checkpoint(&inner)
    }

    fn write_checkpoint(&self, inner: &LogInner) -> io::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let cp = Checkpoint {
            recovery_point: inner.next_offset,
            log_start_offset: inner.log_start_offset,
            cleaner_checkpoint: inner.cleaner_checkpoint,
            epochs: inner.epochs.clone(),
            producers: inner.producers.clone(),
            txns: inner.txns.clone(),
        };
        let bytes = serde_json::to_vec(&cp).map_err(io::Error::other)?;
        let tmp = dir.join("state.json.tmp");
        fs::write(&tmp, bytes)?;
        fs::rename(tmp, dir.join("state.json"))
    }

    /// Clean close: saves indexes and the checkpoint so the next open skips recovery.
    pub fn close(&self) -> io::Result<()> {
        let inner = self.lock();
        for seg in inner.segments.values() {
            seg.save_indexes()?;
        }
        if let Some(active) = inner.segments.values().next_back() {
            active.fsync()?;
        }
        self.write_checkpoint(&inner)
    }
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    OutOfRange(OutOfRange),
    #[error("storage error: {0}")]
    Io(io::Error),
}

/// Re-encodes one batch with another codec, keeping offsets deltas,
/// timestamps, headers and the producer id/epoch/sequence.
fn recompress(batch: &[u8], codec: records::Compression) -> Result<Vec<u8>, BatchError> {
    let recs = records::decode_records(&Bytes::copy_from_slice(batch))?;
    Ok(records::encode_records(&recs, codec)?.to_vec())
}

fn note_epoch(epochs: &mut Vec<EpochEntry>, epoch: i32, start_offset: i64) {
    if epoch < 0 {
        return;
    }
    if epochs.last().is_none_or(|e| e.epoch < epoch) {
        epochs.push(EpochEntry {
            epoch,
            start_offset,
        });
    }
}

impl LogInner {
    fn new(
        settings: Arc<LogSettings>,
        segments: BTreeMap<i64, Segment>,
        log_start_offset: i64,
        now_ms: i64,
    ) -> Self {
        let next_offset = segments.values().next_back().map_or(0, |s| s.next_offset);
        Self {
            settings,
            segments,
            log_start_offset,
            next_offset,
            producers: ProducerStateManager::default(),
            txns: TxnIndex::default(),
            epochs: Vec::new(),
            cleaner_checkpoint: 0,
            unflushed_messages: 0,
            last_flush_ms: now_ms,
        }
    }
}
