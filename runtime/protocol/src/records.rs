//! Record batches, format v2 (magic 2), the only format Kafka 4.x accepts.
//!
//! Layout of the 61-byte batch header (big-endian):
//!
//! ```text
//! 0  baseOffset i64 | 8  batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8
//! 17 crc u32        | 21 attributes i16  | 23 lastOffsetDelta i32      | 27 baseTimestamp i64
//! 35 maxTimestamp i64 | 43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32
//! 57 recordCount i32 | 61 records...
//! ```
//!
//! Invariants kept here:
//! - The CRC-32C covers bytes 21..end (attributes onwards), so the broker can
//!   stamp `baseOffset` and `partitionLeaderEpoch` without recomputing it, which
//!   is what Kafka's log does on append.
//! - [`validate_batch`] never trusts a length or count field: every size is
//!   checked against the bytes actually present before it is used.
//! - Compression goes through `kafka-protocol`'s codecs (gzip, snappy both
//!   Xerial-framed and raw, lz4, zstd). Records are written by
//!   [`BatchBuilder`] (an uncompressed batch is built in its own buffer, no
//!   copy; a batch handed out is never written again) and read by
//!   [`BatchRecords`] (a record at a time, every
//!   length checked against the bytes present); [`decode_records`] keeps
//!   `kafka-protocol`'s decoder for tools and tests. A batch header is
//!   validated here first so a hostile count never reaches either.

use bytes::{Bytes, BytesMut};
pub use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
    TimestampType, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
};

/// Size of the v2 batch header, up to and including `recordCount`.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes before the `batchLength` field's counted region (baseOffset + batchLength).
pub const LOG_OVERHEAD: usize = 12;
/// Smallest possible encoded record: length, attributes, and five one-byte varints.
const MIN_RECORD_LEN: usize = 7;

const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// What is wrong with a record batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Fewer bytes are present than the header or `batchLength` calls for.
    #[error("record batch truncated: needs {needed} bytes, {available} present")]
    Truncated {
        /// Bytes needed: 61 for the header, or the batch's whole size on the wire.
        needed: usize,
        /// Bytes actually present.
        available: usize,
    },
    /// `batchLength` is smaller than the 49 header bytes it must cover (or
    /// negative); carries the value read.
    #[error("record batch length field {0} is invalid")]
    BadLength(i32),
    /// The magic byte is not 2 (message formats v0 and v1 are not accepted);
    /// carries the value read.
    #[error("record batch magic {0} is not supported (only v2)")]
    UnsupportedMagic(i8),
    /// The stored CRC-32C does not match the one computed over attributes to
    /// end of batch.
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC-32C stored in the batch header.
        stored: u32,
        /// CRC-32C computed over the batch's bytes from `attributes` onwards.
        computed: u32,
    },
    /// The attributes name a codec other than none, gzip, snappy, lz4 or zstd
    /// (codes 0-4); carries the code read.
    #[error("record batch compression codec {0} is unknown")]
    UnknownCompression(i16),
    /// `recordCount` is negative, more than the uncompressed record bytes could
    /// hold (7 bytes a record at least), or zero in a non-control batch under
    /// the strict check.
    #[error("record batch record count {count} is invalid for {bytes} bytes of records")]
    BadRecordCount {
        /// The `recordCount` field as read.
        count: i32,
        /// Bytes of records after the 61-byte header (compressed size if compressed).
        bytes: usize,
    },
    /// `lastOffsetDelta` is negative, or, under the strict check, not `recordCount - 1`.
    #[error(
        "record batch lastOffsetDelta {last_offset_delta} does not match record count {count}"
    )]
    OffsetDeltaMismatch {
        /// The `lastOffsetDelta` field as read.
        last_offset_delta: i32,
        /// The `recordCount` field as read.
        count: i32,
    },
    /// `kafka-protocol`'s codec failed to decode, encode or compress the
    /// records; carries its error message.
    #[error("record batch could not be decoded: {0}")]
    Decode(String),
}

/// The fixed header of a v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the batch's first record; 0 from a producer until the broker assigns it.
    pub base_offset: i64,
    /// Bytes from after this field to the end of the batch (the batch's whole
    /// size minus 12).
    pub batch_length: i32,
    /// Leader epoch the broker stamps on append; -1
    /// (`NO_PARTITION_LEADER_EPOCH`) when not set.
    pub partition_leader_epoch: i32,
    /// Record format version; 2 is the only one accepted.
    pub magic: i8,
    /// CRC-32C of the bytes from `attributes` to the end of the batch.
    pub crc: u32,
    /// Flag bits: compression codec (bits 0-2), timestamp type (bit 3),
    /// transactional (bit 4), control (bit 5).
    pub attributes: i16,
    /// Offset of the last record relative to `base_offset`; `recordCount - 1`
    /// in a batch as a producer writes it.
    pub last_offset_delta: i32,
    /// Timestamp of the first record in ms since the epoch; record timestamps
    /// are deltas from it.
    pub base_timestamp: i64,
    /// Largest record timestamp in ms since the epoch, or the broker's append
    /// time under LogAppendTime.
    pub max_timestamp: i64,
    /// Id of the idempotent or transactional producer; -1 (`NO_PRODUCER_ID`)
    /// for a plain producer.
    pub producer_id: i64,
    /// Epoch of `producer_id`; -1 (`NO_PRODUCER_EPOCH`) when there is none.
    pub producer_epoch: i16,
    /// Sequence number of the first record, for idempotence; -1 (`NO_SEQUENCE`)
    /// when there is none.
    pub base_sequence: i32,
    /// Number of records the header claims; [`validate_batch`] checks it
    /// against the bytes.
    pub record_count: i32,
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchHeader {
    /// Parses the header fields; checks only that 61 bytes are present.
    pub fn parse(b: &[u8]) -> Result<Self, BatchError> {
        if b.len() < BATCH_HEADER_LEN {
            return Err(BatchError::Truncated {
                needed: BATCH_HEADER_LEN,
                available: b.len(),
            });
        }
        Ok(Self {
            base_offset: be_i64(b, 0),
            batch_length: be_i32(b, 8),
            partition_leader_epoch: be_i32(b, 12),
            magic: b[16] as i8,
            crc: be_i32(b, 17) as u32,
            attributes: be_i16(b, 21),
            last_offset_delta: be_i32(b, 23),
            base_timestamp: be_i64(b, 27),
            max_timestamp: be_i64(b, 35),
            producer_id: be_i64(b, 43),
            producer_epoch: be_i16(b, 51),
            base_sequence: be_i32(b, 53),
            record_count: be_i32(b, 57),
        })
    }

    /// Whole size of the batch on the wire, including baseOffset and batchLength.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }

    /// Offset of the batch's last record (`base_offset + last_offset_delta`).
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }

    /// Offset following this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    /// The raw codec from the attributes' low 3 bits: 0 none, 1 gzip, 2 snappy,
    /// 3 lz4, 4 zstd.
    pub fn compression_code(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }

    /// The batch's compression codec, or `None` for an unknown code (5-7).
    pub fn compression(&self) -> Option<Compression> {
        match self.compression_code() {
            0 => Some(Compression::None),
            1 => Some(Compression::Gzip),
            2 => Some(Compression::Snappy),
            3 => Some(Compression::Lz4),
            4 => Some(Compression::Zstd),
            _ => None,
        }
    }

    /// `LogAppend` when the timestamp-type attribute bit is set, else `Creation`.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & ATTR_TIMESTAMP_TYPE != 0 {
            TimestampType::LogAppend
        } else {
            TimestampType::Creation
        }
    }

    /// Whether the batch is part of a transaction (attribute bit 4).
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Whether the batch holds control records, such as transaction markers
    /// (attribute bit 5).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Whether a producer id is set (not negative): the batch comes from an
    /// idempotent or transactional producer.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// The sequence number of the batch's last record (sequences wrap at i32::MAX).
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return NO_SEQUENCE;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        if last > i32::MAX as i64 {
            (last - i32::MAX as i64 - 1) as i32
        } else {
            last as i32
        }
    }
}

/// CRC-32C of a batch's checksummed region (attributes to end).
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[21..])
}

/// Validates one complete batch occupying exactly `batch` (as a producer sends
/// it, or as it sits in a log): length, magic, CRC, compression codec, and a
/// record count that the bytes could hold. `strict_offsets` additionally
/// requires `lastOffsetDelta == recordCount - 1`, which holds for every batch a
/// producer writes (compaction may later leave gaps, so logs are checked without it).
pub fn validate_batch(batch: &[u8], strict_offsets: bool) -> Result<BatchHeader, BatchError> {
    let h = BatchHeader::parse(batch)?;
    if h.batch_length < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32 {
        return Err(BatchError::BadLength(h.batch_length));
    }
    if h.total_size() != batch.len() {
        return Err(BatchError::Truncated {
            needed: h.total_size(),
            available: batch.len(),
        });
    }
    if h.magic != 2 {
        return Err(BatchError::UnsupportedMagic(h.magic));
    }
    let computed = compute_crc(batch);
    if computed != h.crc {
        return Err(BatchError::CrcMismatch {
            stored: h.crc,
            computed,
        });
    }
    if h.compression().is_none() {
        return Err(BatchError::UnknownCompression(h.compression_code()));
    }
    let record_bytes = batch.len() - BATCH_HEADER_LEN;
    let uncompressed = h.compression_code() == 0;
    if h.record_count < 0
        || (uncompressed && h.record_count as usize * MIN_RECORD_LEN > record_bytes)
        || (h.record_count == 0 && !h.is_control() && strict_offsets)
    {
        return Err(BatchError::BadRecordCount {
            count: h.record_count,
            bytes: record_bytes,
        });
    }
    if h.last_offset_delta < 0
        || (strict_offsets && h.record_count > 0 && h.last_offset_delta != h.record_count - 1)
    {
        return Err(BatchError::OffsetDeltaMismatch {
            last_offset_delta: h.last_offset_delta,
            count: h.record_count,
        });
    }
    Ok(h)
}

/// Walks the batches laid end to end in `bytes`, yielding `(position, header)`
/// for each whole batch. It stops at the first incomplete or malformed header
/// and records where in [`BatchIter::stopped_at`]; CRCs are not checked here
/// (use [`validate_batch`] on the slice when that is wanted).
pub struct BatchIter<'a> {
    bytes: &'a [u8],
    pos: usize,
    stopped: Option<(usize, BatchError)>,
}

impl<'a> BatchIter<'a> {
    /// Iterates the batches in `bytes` from position 0.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            pos: 0,
            stopped: None,
        }
    }

    /// Position and reason the iteration stopped early, if it did.
    pub fn stopped_at(&self) -> Option<&(usize, BatchError)> {
        self.stopped.as_ref()
    }

    /// Bytes consumed by the whole batches yielded so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl Iterator for BatchIter<'_> {
    type Item = (usize, BatchHeader);

    fn next(&mut self) -> Option<Self::Item> {
        if self.stopped.is_some() || self.pos >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.pos..];
        let h = match BatchHeader::parse(rest) {
            Ok(h) => h,
            Err(e) => {
                self.stopped = Some((self.pos, e));
                return None;
            }
        };
        if h.batch_length < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32 {
            self.stopped = Some((self.pos, BatchError::BadLength(h.batch_length)));
            return None;
        }
        if h.total_size() > rest.len() {
            self.stopped = Some((
                self.pos,
                BatchError::Truncated {
                    needed: h.total_size(),
                    available: rest.len(),
                },
            ));
            return None;
        }
        let at = self.pos;
        self.pos += h.total_size();
        Some((at, h))
    }
}

/// Overwrites a batch's base offset (not covered by the CRC).
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Overwrites a batch's partition leader epoch (not covered by the CRC).
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[12..16].copy_from_slice(&epoch.to_be_bytes());
}

/// Switches a batch to LogAppendTime with the given broker timestamp and
/// recomputes its CRC (`message.timestamp.type=LogAppendTime`).
pub fn set_log_append_time(batch: &mut [u8], timestamp: i64) {
    let attrs = be_i16(batch, 21) | ATTR_TIMESTAMP_TYPE;
    batch[21..23].copy_from_slice(&attrs.to_be_bytes());
    batch[35..43].copy_from_slice(&timestamp.to_be_bytes());
    let crc = compute_crc(batch);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// Marks a batch as part of a transaction (attribute bit 4) and recomputes
/// its CRC: a transactional producer's batches carry it (KIP-98).
pub fn set_transactional(batch: &mut [u8]) {
    let attrs = be_i16(batch, 21) | ATTR_TRANSACTIONAL;
    batch[21..23].copy_from_slice(&attrs.to_be_bytes());
    let crc = compute_crc(batch);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// The type of a control record: the two transaction markers (KIP-98).
/// Kafka's `ControlRecordType`; other types exist for KRaft's own log and
/// never appear in a data partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlRecordType {
    /// The producer's transaction was aborted: its records in this
    /// partition since the transaction began are to be skipped by
    /// `read_committed` readers.
    Abort,
    /// The producer's transaction committed.
    Commit,
}

impl ControlRecordType {
    /// The record key: version 0 (i16) and the type (i16: 0 abort, 1 commit).
    pub fn key(self) -> [u8; 4] {
        let t: i16 = match self {
            ControlRecordType::Abort => 0,
            ControlRecordType::Commit => 1,
        };
        let mut k = [0u8; 4];
        k[2..].copy_from_slice(&t.to_be_bytes());
        k
    }

    /// Parses a control record's key; `None` for a type other than the
    /// transaction markers, or a key too short to hold one.
    pub fn parse(key: &[u8]) -> Option<Self> {
        if key.len() < 4 {
            return None;
        }
        match be_i16(key, 2) {
            0 => Some(ControlRecordType::Abort),
            1 => Some(ControlRecordType::Commit),
            _ => None,
        }
    }
}

/// A transaction marker batch as a transaction coordinator writes it: one
/// control record (key: [`ControlRecordType::key`], value: version 0 and
/// the coordinator epoch), transactional and control attribute bits set,
/// the producer's id and epoch, no sequence.
pub fn control_batch(
    kind: ControlRecordType,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    timestamp: i64,
) -> Bytes {
    let mut value = [0u8; 6];
    value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
    let mut b = BatchBuilder::with_capacity(32);
    b.append(timestamp, Some(&kind.key()), Some(&value), &[]);
    b.build_flagged(
        Compression::None,
        ProducerStamp {
            producer_id,
            producer_epoch,
            base_sequence: NO_SEQUENCE,
        },
        ATTR_TRANSACTIONAL | ATTR_CONTROL,
    )
    .expect("an uncompressed batch always builds")
}

/// The marker type of a control batch (the key of its first record), or
/// `None` when `batch` is not a readable control batch of a known type.
pub fn control_batch_type(batch: &Bytes) -> Option<ControlRecordType> {
    let h = BatchHeader::parse(batch).ok()?;
    if !h.is_control() {
        return None;
    }
    let recs = decode_records(&batch.slice(..h.total_size().min(batch.len()))).ok()?;
    ControlRecordType::parse(recs.first()?.key.as_deref()?)
}

/// Encodes records into one or more v2 batches with the given codec. Offsets
/// in the records are relative to each other; the broker assigns real ones.
pub fn encode_records(records: &[Record], compression: Compression) -> Result<Bytes, BatchError> {
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .map_err(|e| BatchError::Decode(e.to_string()))?;
    Ok(out.freeze())
}

/// Decodes every record in a sequence of batches, validating each batch's
/// header and CRC before its records are decompressed and read.
pub fn decode_records(bytes: &Bytes) -> Result<Vec<Record>, BatchError> {
    let mut out = Vec::new();
    let mut iter = BatchIter::new(bytes);
    for (at, h) in iter.by_ref() {
        let slice = bytes.slice(at..at + h.total_size());
        validate_batch(&slice, false)?;
        let mut buf = slice;
        let set =
            RecordBatchDecoder::decode(&mut buf).map_err(|e| BatchError::Decode(e.to_string()))?;
        out.extend(set.records);
    }
    if let Some((_, e)) = iter.stopped_at() {
        return Err(e.clone());
    }
    Ok(out)
}

/// A record with the fields a producer sets; batch-level fields take the
/// values of a non-idempotent, non-transactional producer.
///
/// `kafka-protocol`'s encoder keeps records in one batch while
/// `offset - sequence` stays constant and derives the batch's base sequence
/// from the first record, so a non-idempotent record carries
/// `sequence = NO_SEQUENCE + offset_delta` (base sequence -1 on the wire).
pub fn simple_record(
    offset_delta: i64,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        timestamp_type: TimestampType::Creation,
        offset: offset_delta,
        sequence: NO_SEQUENCE.wrapping_add(offset_delta as i32),
        timestamp,
        key,
        value,
        headers: Default::default(),
    }
}

/// The identity an idempotent producer stamps on a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerStamp {
    /// Producer id from `InitProducerId`; -1 (`NO_PRODUCER_ID`) for none.
    pub producer_id: i64,
    /// Epoch of that producer id; -1 (`NO_PRODUCER_EPOCH`) for none.
    pub producer_epoch: i16,
    /// Sequence number of the batch's first record in its partition; -1
    /// (`NO_SEQUENCE`) for none.
    pub base_sequence: i32,
}

impl ProducerStamp {
    /// No producer id (a non-idempotent producer).
    pub const NONE: ProducerStamp = ProducerStamp {
        producer_id: NO_PRODUCER_ID,
        producer_epoch: NO_PRODUCER_EPOCH,
        base_sequence: NO_SEQUENCE,
    };
}

/// Builds one v2 record batch record by record, the way a producer fills a
/// batch while it lingers (Kafka's `MemoryRecordsBuilder`): records are
/// encoded as they are appended, so a batch costs its bytes and nothing
/// per record; compression, the producer stamp and the CRC are applied once
/// in [`BatchBuilder::build`].
///
/// The buffer starts with room for the batch header, so an uncompressed
/// batch is built in place: its header is written in front of the records
/// and the buffer itself is handed out, not copied into a second one (a
/// producer builds every batch it sends, so that copy was one more pass
/// over every byte produced and a fresh buffer per batch).
#[derive(Debug)]
pub struct BatchBuilder {
    /// `BATCH_HEADER_LEN` bytes of header room, then the encoded records;
    /// empty after an in-place build (the bytes are in `built`).
    buf: BytesMut,
    /// The last in-place build, sharing what was `buf`: a later build (new
    /// producer id after a reset, so a new stamp) or append starts from a
    /// copy of it; the producer does neither on its normal path.
    built: Option<Bytes>,
    /// Encoded length of the records appended so far.
    records_len: usize,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

fn varint_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

fn put_varint(out: &mut BytesMut, v: i64) {
    use bytes::BufMut;
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

fn opt_len(b: Option<&[u8]>) -> i64 {
    b.map_or(-1, |b| b.len() as i64)
}

impl BatchBuilder {
    /// An empty builder with room for `bytes` bytes of encoded records before
    /// it reallocates.
    pub fn with_capacity(bytes: usize) -> Self {
        let mut buf = BytesMut::with_capacity(BATCH_HEADER_LEN + bytes);
        buf.resize(BATCH_HEADER_LEN, 0);
        Self {
            buf,
            built: None,
            records_len: 0,
            count: 0,
            base_timestamp: 0,
            max_timestamp: 0,
        }
    }

    /// Takes the bytes of an in-place build back into `buf` (a copy; only
    /// a rebuild or an append after a build needs it).
    fn unshare(&mut self) {
        if let Some(b) = self.built.take() {
            self.buf = BytesMut::from(&b[..]);
        }
    }

    /// Records appended so far.
    pub fn record_count(&self) -> i32 {
        self.count
    }

    /// Whether no record has been appended yet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The batch's size on the wire without compression.
    pub fn size_in_bytes(&self) -> usize {
        BATCH_HEADER_LEN + self.records_len
    }

    /// The bytes a record adds to a batch (upper bound: the timestamp delta
    /// is counted at its widest).
    pub fn record_size_upper_bound(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> usize {
        Self::body_len(i64::MAX, i32::MAX, key, value, headers) + 5
    }

    fn body_len(
        timestamp_delta: i64,
        offset_delta: i32,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> usize {
        let mut n = 1 + varint_len(timestamp_delta) + varint_len(offset_delta as i64);
        n += varint_len(opt_len(key)) + key.map_or(0, <[u8]>::len);
        n += varint_len(opt_len(value)) + value.map_or(0, <[u8]>::len);
        n += varint_len(headers.len() as i64);
        for (k, v) in headers {
            n += varint_len(k.len() as i64) + k.len();
            n += varint_len(opt_len(*v)) + v.map_or(0, <[u8]>::len);
        }
        n
    }

    /// Appends a record; returns the bytes it added.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> usize {
        if self.count == 0 {
            self.base_timestamp = timestamp;
            self.max_timestamp = timestamp;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let delta = timestamp.wrapping_sub(self.base_timestamp);
        let body = Self::body_len(delta, self.count, key, value, headers);
        self.unshare();
        let out = &mut self.buf;
        let before = out.len();
        out.reserve(body + 5);
        put_varint(out, body as i64);
        out.extend_from_slice(&[0]); // attributes
        put_varint(out, delta);
        put_varint(out, self.count as i64);
        put_varint(out, opt_len(key));
        if let Some(k) = key {
            out.extend_from_slice(k);
        }
        put_varint(out, opt_len(value));
        if let Some(v) = value {
            out.extend_from_slice(v);
        }
        put_varint(out, headers.len() as i64);
        for (k, v) in headers {
            put_varint(out, k.len() as i64);
            out.extend_from_slice(k.as_bytes());
            put_varint(out, opt_len(*v));
            if let Some(v) = v {
                out.extend_from_slice(v);
            }
        }
        self.count += 1;
        let added = out.len() - before;
        self.records_len += added;
        added
    }

    /// The finished batch: header, (compressed) records, CRC-32C.
    pub fn build(
        &mut self,
        compression: Compression,
        stamp: ProducerStamp,
    ) -> Result<Bytes, BatchError> {
        self.build_flagged(compression, stamp, 0)
    }

    /// As [`build`](Self::build), with `flags` (the transactional and
    /// control attribute bits) set in the batch's attributes.
    pub fn build_flagged(
        &mut self,
        compression: Compression,
        stamp: ProducerStamp,
        flags: i16,
    ) -> Result<Bytes, BatchError> {
        use bytes::BufMut;
        use kafka_protocol::compression::Compressor;
        self.unshare();
        let codec: i16 = match compression {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        };
        let mut out = if compression == Compression::None {
            // In place: the header room is the front of the buffer.
            self.buf.split()
        } else {
            let mut out = BytesMut::with_capacity(BATCH_HEADER_LEN + self.records_len);
            out.resize(BATCH_HEADER_LEN, 0);
            let records = &self.buf[BATCH_HEADER_LEN..];
            let fill = |tmp: &mut BytesMut| -> anyhow::Result<()> {
                tmp.put_slice(records);
                Ok(())
            };
            let compressed = match compression {
                Compression::Gzip => kafka_protocol::compression::Gzip::compress(&mut out, fill),
                Compression::Snappy => {
                    kafka_protocol::compression::Snappy::compress(&mut out, fill)
                }
                Compression::Lz4 => kafka_protocol::compression::Lz4::compress(&mut out, fill),
                Compression::Zstd => kafka_protocol::compression::Zstd::compress(&mut out, fill),
                Compression::None => Ok(()),
            };
            compressed.map_err(|e| BatchError::Decode(format!("compressing a batch: {e}")))?;
            out
        };
        let len = (out.len() - LOG_OVERHEAD) as i32;
        let mut h = &mut out[..BATCH_HEADER_LEN];
        h.put_i64(0); // base offset: the broker assigns it
        h.put_i32(len);
        h.put_i32(NO_PARTITION_LEADER_EPOCH);
        h.put_i8(2);
        h.put_u32(0); // crc, set below
        h.put_i16(codec | flags);
        h.put_i32(self.count - 1);
        h.put_i64(self.base_timestamp);
        h.put_i64(self.max_timestamp);
        h.put_i64(stamp.producer_id);
        h.put_i16(stamp.producer_epoch);
        h.put_i32(stamp.base_sequence);
        h.put_i32(self.count);
        let crc = compute_crc(&out);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        let out = out.freeze();
        if compression == Compression::None {
            self.built = Some(out.clone());
        }
        Ok(out)
    }
}

/// One record of a batch as a consumer hands it out: key, value and header
/// values are slices of the batch (nothing is copied but header names).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchRecord {
    /// The record's offset (the batch's base offset plus its delta).
    pub offset: i64,
    /// Create time (base timestamp plus delta), or the batch's append time
    /// for every record of a LogAppendTime batch, as Kafka's consumer reads it.
    pub timestamp: i64,
    /// `None` for a null key.
    pub key: Option<Bytes>,
    /// `None` for a null value (a tombstone).
    pub value: Option<Bytes>,
    /// Headers in the order written, duplicates kept; `None` is a null value.
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// The records of one batch, read one at a time (Kafka's
/// `DefaultRecordBatch` iterator): no vector of the batch's records is built,
/// so a consumer moves each record once, from here to where it is returned.
/// A compressed body is decompressed whole when the reader is made. Every
/// length is checked against the bytes present; the first malformed record
/// ends the iteration with its error.
#[derive(Debug, Clone)]
pub struct BatchRecords {
    body: Bytes,
    pos: usize,
    left: i32,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
}

/// Reads a zigzag varint (Kafka's `VarLong`, also used for `VarInt` fields)
/// at `*pos`, advancing it; `None` if the bytes end first or it runs past
/// ten bytes.
fn get_varint(b: &[u8], pos: &mut usize) -> Option<i64> {
    let mut z: u64 = 0;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        z |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some((z >> 1) as i64 ^ -((z & 1) as i64));
        }
    }
    None
}

impl BatchRecords {
    /// A reader of `batch`'s records; `h` is its parsed header (CRC checks
    /// are the caller's: [`validate_batch`]).
    pub fn new(batch: &Bytes, h: &BatchHeader) -> Result<Self, BatchError> {
        use kafka_protocol::compression::Decompressor;
        if batch.len() < BATCH_HEADER_LEN || h.total_size() > batch.len() {
            return Err(BatchError::Truncated {
                needed: h.total_size().max(BATCH_HEADER_LEN),
                available: batch.len(),
            });
        }
        let mut raw = batch.slice(BATCH_HEADER_LEN..h.total_size());
        let whole = |b: &mut Bytes| Ok(std::mem::take(b));
        let body = match h.compression() {
            Some(Compression::None) => Ok(raw),
            Some(Compression::Gzip) => {
                kafka_protocol::compression::Gzip::decompress(&mut raw, whole)
            }
            Some(Compression::Snappy) => {
                kafka_protocol::compression::Snappy::decompress(&mut raw, whole)
            }
            Some(Compression::Lz4) => kafka_protocol::compression::Lz4::decompress(&mut raw, whole),
            Some(Compression::Zstd) => {
                kafka_protocol::compression::Zstd::decompress(&mut raw, whole)
            }
            None => return Err(BatchError::UnknownCompression(h.compression_code())),
        }
        .map_err(|e| BatchError::Decode(format!("decompressing a batch: {e}")))?;
        if h.record_count < 0 {
            return Err(BatchError::BadRecordCount {
                count: h.record_count,
                bytes: body.len(),
            });
        }
        Ok(Self {
            body,
            pos: 0,
            left: h.record_count,
            base_offset: h.base_offset,
            base_timestamp: h.base_timestamp,
            log_append_time: (h.timestamp_type() == TimestampType::LogAppend)
                .then_some(h.max_timestamp),
        })
    }

    /// The batch's base offset.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// Whether the timestamps are the broker's append time.
    pub fn log_append_time(&self) -> bool {
        self.log_append_time.is_some()
    }

    fn malformed(&mut self, what: &str) -> BatchError {
        // Nothing after a malformed record is read.
        self.left = 0;
        BatchError::Decode(format!(
            "record at byte {} of the batch's records: {what}",
            self.pos
        ))
    }

    /// `len` bytes at `*pos` (`None` for length -1), advancing it.
    fn bytes(&self, pos: &mut usize, end: usize, len: i64) -> Result<Option<Bytes>, &'static str> {
        match len {
            -1 => Ok(None),
            l if l < -1 => Err("a negative length"),
            l if (l as u64) > (end - *pos) as u64 => Err("a length past its end"),
            l => {
                let at = *pos;
                *pos += l as usize;
                Ok(Some(self.body.slice(at..*pos)))
            }
        }
    }

    fn read(&self) -> Result<(BatchRecord, usize), &'static str> {
        let b = &self.body[..];
        let mut pos = self.pos;
        let len = get_varint(b, &mut pos).ok_or("a truncated length")?;
        if len < 0 || (len as u64) > (b.len() - pos) as u64 {
            return Err("a length past the batch's end");
        }
        let end = pos + len as usize;
        let b = &b[..end];
        pos += 1; // attributes: unused in format v2
        let varint = |pos: &mut usize| get_varint(b, pos).ok_or("a truncated field");
        let ts_delta = varint(&mut pos)?;
        let offset_delta = varint(&mut pos)?;
        let key_len = varint(&mut pos)?;
        let key = self.bytes(&mut pos, end, key_len)?;
        let value_len = varint(&mut pos)?;
        let value = self.bytes(&mut pos, end, value_len)?;
        let count = varint(&mut pos)?;
        if count < 0 || count as u64 > (end - pos) as u64 {
            return Err("a header count past its end");
        }
        let mut headers = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let key_len = varint(&mut pos)?;
            let name = self
                .bytes(&mut pos, end, key_len)?
                .ok_or("a null header name")?;
            let name = std::str::from_utf8(&name).map_err(|_| "a header name not in UTF-8")?;
            let value_len = varint(&mut pos)?;
            headers.push((name.to_owned(), self.bytes(&mut pos, end, value_len)?));
        }
        if pos != end {
            return Err("bytes left over after its headers");
        }
        let timestamp = self
            .log_append_time
            .unwrap_or(self.base_timestamp.wrapping_add(ts_delta));
        let record = BatchRecord {
            offset: self.base_offset.wrapping_add(offset_delta),
            timestamp,
            key,
            value,
            headers,
        };
        Ok((record, end))
    }
}

impl BatchRecords {
    /// Whether every record has been read (or a malformed one ended it).
    pub fn is_done(&self) -> bool {
        self.left <= 0
    }
}

impl Iterator for BatchRecords {
    type Item = Result<BatchRecord, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left <= 0 {
            return None;
        }
        match self.read() {
            Ok((record, end)) => {
                self.pos = end;
                self.left -= 1;
                Some(Ok(record))
            }
            Err(what) => Some(Err(self.malformed(what))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<Record> {
        (0..n)
            .map(|i| {
                simple_record(
                    i as i64,
                    1_700_000_000_000 + i as i64,
                    Some(Bytes::from(format!("key-{i}"))),
                    Some(Bytes::from(format!("value-{i}-{}", "x".repeat(i % 50)))),
                )
            })
            .collect()
    }

    #[test]
    fn every_codec_round_trips_and_validates() {
        let records = sample(100);
        for codec in CODECS {
            let bytes = encode_records(&records, codec).unwrap();
            let h = validate_batch(&bytes, true).unwrap();
            assert_eq!(h.compression(), Some(codec));
            assert_eq!(h.record_count, 100);
            assert_eq!(h.last_offset_delta, 99);
            let back = decode_records(&bytes).unwrap();
            assert_eq!(back.len(), 100);
            assert_eq!(back[7].key.as_deref(), Some(&b"key-7"[..]));
            assert_eq!(back[99].value, records[99].value);
        }
    }

    #[test]
    fn stamping_offset_and_epoch_keeps_crc_valid() {
        let mut bytes = encode_records(&sample(3), Compression::None)
            .unwrap()
            .to_vec();
        set_base_offset(&mut bytes, 1234);
        set_partition_leader_epoch(&mut bytes, 7);
        let h = validate_batch(&bytes, true).unwrap();
        assert_eq!(h.base_offset, 1234);
        assert_eq!(h.partition_leader_epoch, 7);
        assert_eq!(h.next_offset(), 1237);
        set_log_append_time(&mut bytes, 42);
        let h = validate_batch(&bytes, true).unwrap();
        assert_eq!(h.max_timestamp, 42);
        assert_eq!(h.timestamp_type(), TimestampType::LogAppend);
    }

    #[test]
    fn detects_corruption_and_lies() {
        let good = encode_records(&sample(5), Compression::None)
            .unwrap()
            .to_vec();
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        assert!(matches!(
            validate_batch(&flipped, true),
            Err(BatchError::CrcMismatch { .. })
        ));
        let mut magic = good.clone();
        magic[16] = 1;
        assert_eq!(
            validate_batch(&magic, true),
            Err(BatchError::UnsupportedMagic(1))
        );
        assert!(matches!(
            validate_batch(&good[..good.len() - 3], true),
            Err(BatchError::Truncated { .. })
        ));
        let mut count = good.clone();
        count[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        let crc = compute_crc(&count);
        count[17..21].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_batch(&count, true),
            Err(BatchError::BadRecordCount { .. })
        ));
        let mut len = good.clone();
        len[8..12].copy_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(validate_batch(&len, true), Err(BatchError::BadLength(-1)));
    }

    #[test]
    fn iterates_batches_and_stops_at_a_torn_tail() {
        let a = encode_records(&sample(2), Compression::None).unwrap();
        let b = encode_records(&sample(4), Compression::Lz4).unwrap();
        let mut log = a.to_vec();
        log.extend_from_slice(&b);
        log.extend_from_slice(&a[..30]);
        let mut it = BatchIter::new(&log);
        let seen: Vec<_> = it.by_ref().map(|(at, h)| (at, h.record_count)).collect();
        assert_eq!(seen, vec![(0, 2), (a.len(), 4)]);
        assert_eq!(it.position(), a.len() + b.len());
        assert!(matches!(
            it.stopped_at(),
            Some((_, BatchError::Truncated { .. }))
        ));
    }

    #[test]
    fn control_batches_round_trip() {
        for kind in [ControlRecordType::Abort, ControlRecordType::Commit] {
            let b = control_batch(kind, 42, 3, 7, 1_000);
            let h = validate_batch(&b, true).unwrap();
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.record_count),
                (42, 3, 1)
            );
            assert_eq!(control_batch_type(&b), Some(kind));
        }
        let plain = encode_records(&sample(2), Compression::None).unwrap();
        assert_eq!(control_batch_type(&plain), None);
        let mut t = plain.to_vec();
        set_transactional(&mut t);
        let h = validate_batch(&t, true).unwrap();
        assert!(h.is_transactional() && !h.is_control());
    }

    #[test]
    fn sequences_wrap() {
        let mut h =
            BatchHeader::parse(&encode_records(&sample(3), Compression::None).unwrap()).unwrap();
        h.base_sequence = i32::MAX - 1;
        h.last_offset_delta = 2;
        assert_eq!(h.last_sequence(), 0);
    }

    #[test]
    fn batch_builder_matches_the_decoder_for_every_codec() {
        for codec in CODECS {
            let mut b = BatchBuilder::with_capacity(1024);
            for i in 0..50i64 {
                let key = format!("k{i}");
                let value = "v".repeat(i as usize);
                let h: &[(&str, Option<&[u8]>)] = if i % 2 == 0 {
                    &[("trace", Some(b"abc")), ("none", None)]
                } else {
                    &[]
                };
                b.append(
                    1_700_000_000_000 + (i % 7) - 3,
                    (i % 5 != 0).then_some(key.as_bytes()),
                    (i % 11 != 0).then_some(value.as_bytes()),
                    h,
                );
            }
            let stamp = ProducerStamp {
                producer_id: 42,
                producer_epoch: 3,
                base_sequence: 100,
            };
            let batch = b.build(codec, stamp).unwrap();
            let h = validate_batch(&batch, true).unwrap();
            assert_eq!(h.record_count, 50);
            assert_eq!(h.last_sequence(), 149);
            assert_eq!(h.max_timestamp, 1_700_000_000_003);
            let recs = decode_records(&batch).unwrap();
            assert_eq!(recs.len(), 50, "{codec:?}");
            for (i, r) in recs.iter().enumerate() {
                let i = i as i64;
                assert_eq!(r.offset, i);
                assert_eq!(r.timestamp, 1_700_000_000_000 + (i % 7) - 3);
                assert_eq!(r.key.is_some(), i % 5 != 0);
                assert_eq!(
                    r.value.as_ref().map(|v| v.len()),
                    (i % 11 != 0).then_some(i as usize)
                );
                assert_eq!(r.headers.len(), if i % 2 == 0 { 2 } else { 0 });
                assert_eq!(r.producer_id, 42);
                assert_eq!(r.sequence, 100 + i as i32);
            }
        }
    }

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// What `BatchRecords` reads of `batch`, as (offset, timestamp, key,
    /// value, headers).
    fn read_all(batch: &Bytes) -> Vec<BatchRecord> {
        let h = validate_batch(batch, false).unwrap();
        BatchRecords::new(batch, &h)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn batch_records_read_what_kafka_protocol_reads_for_every_codec() {
        let records = sample(100);
        for codec in CODECS {
            let mut bytes = BytesMut::from(&encode_records(&records, codec).unwrap()[..]);
            set_base_offset(&mut bytes, 1_000);
            let bytes = bytes.freeze();
            let theirs = decode_records(&bytes).unwrap();
            let ours = read_all(&bytes);
            assert_eq!(ours.len(), theirs.len(), "{codec:?}");
            for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
                assert_eq!(o.offset, t.offset);
                assert_eq!(o.offset, 1_000 + i as i64);
                assert_eq!(o.timestamp, t.timestamp);
                assert_eq!(o.key, t.key);
                assert_eq!(o.value, t.value);
                assert!(o.headers.is_empty());
            }
        }
    }

    #[test]
    fn batch_records_keep_duplicate_and_null_headers_and_null_fields() {
        let mut b = BatchBuilder::with_capacity(256);
        b.append(
            5,
            None,
            Some(b"v"),
            &[("h", Some(b"1")), ("h", None), ("h", Some(b"3"))],
        );
        b.append(9, Some(b"k"), None, &[]);
        let batch = b.build(Compression::None, ProducerStamp::NONE).unwrap();
        let got = read_all(&batch);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].offset, got[0].timestamp), (0, 5));
        assert_eq!(got[0].key, None);
        let names: Vec<_> = got[0]
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("h", Some(Bytes::from_static(b"1"))),
                ("h", None),
                ("h", Some(Bytes::from_static(b"3")))
            ]
        );
        assert_eq!((got[1].offset, got[1].timestamp), (1, 9));
        assert_eq!(got[1].value, None);
    }

    #[test]
    fn an_in_place_build_can_be_rebuilt_with_a_new_stamp_and_appended_to() {
        let mut b = BatchBuilder::with_capacity(8);
        b.append(1, Some(b"k1"), Some(b"v1"), &[]);
        let first = b.build(Compression::None, ProducerStamp::NONE).unwrap();
        let stamp = ProducerStamp {
            producer_id: 9,
            producer_epoch: 3,
            base_sequence: 40,
        };
        let second = b.build(Compression::None, stamp).unwrap();
        // The first batch handed out is not rewritten by the second build.
        let h1 = validate_batch(&first, true).unwrap();
        let h2 = validate_batch(&second, true).unwrap();
        assert_eq!((h1.producer_id, h1.base_sequence), (-1, -1));
        assert_eq!((h2.producer_id, h2.base_sequence), (9, 40));
        assert_eq!(first[BATCH_HEADER_LEN..], second[BATCH_HEADER_LEN..]);
        assert_eq!(b.size_in_bytes(), second.len());
        b.append(2, Some(b"k2"), None, &[]);
        let third = b.build(Compression::Lz4, stamp).unwrap();
        let got = read_all(&third);
        let keys: Vec<_> = got.iter().map(|r| r.key.clone().unwrap()).collect();
        assert_eq!(
            keys,
            vec![Bytes::from_static(b"k1"), Bytes::from_static(b"k2")]
        );
        assert_eq!(got[1].value, None);
    }

    #[test]
    fn a_log_append_time_batch_gives_every_record_the_append_time() {
        let mut b = BatchBuilder::with_capacity(64);
        b.append(100, Some(b"a"), Some(b"1"), &[]);
        b.append(200, Some(b"b"), Some(b"2"), &[]);
        let mut batch =
            BytesMut::from(&b.build(Compression::None, ProducerStamp::NONE).unwrap()[..]);
        set_log_append_time(&mut batch, 777);
        let got = read_all(&batch.freeze());
        assert_eq!(
            got.iter().map(|r| r.timestamp).collect::<Vec<_>>(),
            vec![777, 777]
        );
    }

    #[test]
    fn a_malformed_record_is_an_error_never_a_panic() {
        let mut b = BatchBuilder::with_capacity(256);
        for i in 0..4 {
            b.append(i, Some(b"key"), Some(b"value"), &[("name", Some(b"x"))]);
        }
        let good = b.build(Compression::None, ProducerStamp::NONE).unwrap();
        let h = validate_batch(&good, true).unwrap();
        // Every single-byte change in the records (the header stays valid;
        // the CRC is not checked here): each record reads or fails, and
        // nothing after a failure is read.
        for at in BATCH_HEADER_LEN..good.len() {
            for byte in [0x00, 0x7f, 0x80, 0xff] {
                let mut bad = BytesMut::from(&good[..]);
                bad[at] = byte;
                let bad = bad.freeze();
                let mut seen_error = false;
                for r in BatchRecords::new(&bad, &h).unwrap() {
                    assert!(!seen_error, "a record after an error");
                    seen_error = r.is_err();
                }
            }
        }
        // A count larger than the records present ends in an error.
        let mut more = BytesMut::from(&good[..]);
        more[57..61].copy_from_slice(&5i32.to_be_bytes());
        let more = more.freeze();
        let h5 = BatchHeader::parse(&more).unwrap();
        let got: Vec<_> = BatchRecords::new(&more, &h5).unwrap().collect();
        assert_eq!(got.len(), 5);
        assert!(got[..4].iter().all(Result::is_ok));
        assert!(matches!(&got[4], Err(BatchError::Decode(m)) if m.contains("truncated")));
    }
}
