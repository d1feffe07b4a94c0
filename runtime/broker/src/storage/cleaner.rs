//! Log compaction for `cleanup.policy=compact` (changelog topics use it).
//!
//! Like Kafka's log cleaner, in one pass over the closed segments:
//! 1. skip unless the dirty share (bytes past the cleaner checkpoint) reaches
//!    `min.cleanable.dirty.ratio`, and leave segments younger than
//!    `min.compaction.lag.ms` alone;
//! 2. map every key to its latest offset in the cleanable range;
//! 3. rewrite each segment keeping only records that are the latest for their
//!    key; tombstones (null values) are kept until `delete.retention.ms` has
//!    passed since their batch was written, so readers can see the delete.
//!
//! Invariants: the active segment is never touched; offsets are never changed
//! (batches keep their records' offsets, leaving gaps); a batch whose records
//! all survive is kept byte for byte; a segment is replaced atomically
//! (write `.cleaned`, fsync, rename).

use std::collections::HashMap;
use std::io;

use bytes::{Bytes, BytesMut};
use rill_protocol::records::{
    self, BatchIter, RecordBatchEncoder, RecordEncodeOptions, NO_SEQUENCE,
};
use tracing::info;

use std::collections::BTreeMap;

use super::segment::Segment;
use crate::config::LogSettings;

/// What one compaction pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanStats {
    /// Closed segments rewritten without their superseded records.
    pub segments_rewritten: usize,
    /// Records dropped: older values of a key, and tombstones past
    /// `delete.retention.ms`.
    pub records_removed: u64,
    /// Size of the rewritten segments before the pass.
    pub bytes_before: u64,
    /// Their size after it.
    pub bytes_after: u64,
}

/// What the cleaner works on: a log's segments (keyed by base offset) and
/// its cleaner checkpoint, under the log's lock (the caller holds it).
pub(super) struct Cleanable<'a> {
    pub settings: &'a LogSettings,
    pub segments: &'a mut BTreeMap<i64, Segment>,
    /// Offsets below this have been compacted; moved up by a clean.
    pub cleaner_checkpoint: &'a mut i64,
}

pub(super) fn clean(log: Cleanable<'_>, now_ms: i64, force: bool) -> io::Result<CleanStats> {
    let mut stats = CleanStats::default();
    let Cleanable {
        settings,
        segments,
        cleaner_checkpoint,
    } = log;
    if !settings.cleanup_compact || segments.len() < 2 {
        return Ok(stats);
    }
    let active_base = *segments.keys().next_back().unwrap();
    let lag_cutoff = now_ms.saturating_sub(settings.min_compaction_lag_ms);
    // Cleanable: closed segments old enough, from the start up to the first too-young one.
    let cleanable: Vec<i64> = segments
        .iter()
        .filter(|(b, _)| **b < active_base)
        .take_while(|(_, s)| s.max_timestamp <= lag_cutoff)
        .map(|(b, _)| *b)
        .collect();
    if cleanable.is_empty() {
        return Ok(stats);
    }
    let total: u64 = cleanable.iter().map(|b| segments[b].size()).sum();
    let dirty: u64 = cleanable
        .iter()
        .map(|b| &segments[b])
        .filter(|s| s.next_offset > *cleaner_checkpoint)
        .map(|s| s.size())
        .sum();
    let ratio = if total == 0 {
        0.0
    } else {
        dirty as f64 / total as f64
    };
    if !force && (dirty == 0 || ratio < settings.min_cleanable_dirty_ratio) {
        return Ok(stats);
    }

    // Pass 1: latest offset per key.
    let mut latest: HashMap<Bytes, i64> = HashMap::new();
    let mut contents = Vec::with_capacity(cleanable.len());
    for base in &cleanable {
        let seg = &segments[base];
        let bytes = Bytes::from(seg.read_at(0, seg.size() as usize)?);
        for r in records::decode_records(&bytes).map_err(io::Error::other)? {
            if let Some(k) = r.key {
                latest.insert(k, r.offset);
            }
        }
        contents.push((*base, bytes));
    }

    // Pass 2: rewrite.
    let tombstone_cutoff = now_ms.saturating_sub(settings.delete_retention_ms);
    for (base, bytes) in contents {
        let mut out = BytesMut::with_capacity(bytes.len());
        let mut removed = 0u64;
        for (at, h) in BatchIter::new(&bytes) {
            let raw = bytes.slice(at..at + h.total_size());
            let recs = records::decode_records(&raw).map_err(io::Error::other)?;
            let n = recs.len();
            let keep: Vec<_> = recs
                .into_iter()
                .filter(|r| match &r.key {
                    None => true,
                    Some(k) => {
                        latest.get(k) == Some(&r.offset)
                            && (r.value.is_some() || h.max_timestamp > tombstone_cutoff)
                    }
                })
                .collect();
            removed += (n - keep.len()) as u64;
            if keep.len() == n {
                out.extend_from_slice(&raw);
                continue;
            }
            if keep.is_empty() {
                continue;
            }
            let first = keep[0].offset;
            let keep: Vec<_> = keep
                .into_iter()
                .map(|mut r| {
                    // Keep offset - sequence constant so the encoder writes one batch.
                    let delta = (r.offset - first) as i32;
                    r.sequence = if h.base_sequence >= 0 {
                        h.base_sequence
                            .wrapping_add((r.offset - h.base_offset) as i32)
                    } else {
                        NO_SEQUENCE.wrapping_add(delta)
                    };
                    r
                })
                .collect();
            RecordBatchEncoder::encode(
                &mut out,
                keep.iter(),
                &RecordEncodeOptions {
                    version: 2,
                    compression: h.compression().unwrap_or(records::Compression::None),
                },
            )
            .map_err(io::Error::other)?;
        }
        if removed == 0 {
            continue;
        }
        let interval = settings.index_interval_bytes;
        let seg = segments.get_mut(&base).unwrap();
        stats.bytes_before += seg.size();
        seg.replace_contents(&out, interval)?;
        stats.bytes_after += seg.size();
        stats.segments_rewritten += 1;
        stats.records_removed += removed;
    }
    if let Some(b) = cleanable.last() {
        *cleaner_checkpoint = segments[b].next_offset;
    }
    if stats.segments_rewritten > 0 {
        info!(
            segments = stats.segments_rewritten,
            removed = stats.records_removed,
            before = stats.bytes_before,
            after = stats.bytes_after,
            "compacted log"
        );
    }
    Ok(stats)
}
