//! Fetching: one Fetch request in flight per broker, answers handed from the
//! I/O tasks to the polling thread over a crossbeam channel, records decoded
//! on the polling thread one batch at a time as they are taken (Kafka's
//! `CompletedFetch`): buffered answers stay in the compact form the broker
//! sent, so a buffer of small records costs its wire size, not a
//! `ConsumerRecord` per record.
//!
//! `poll` returns buffered records while the next fetches are already on the
//! wire (Kafka's fetch pipelining). Invariants:
//! - a fetched partition is used only if it is still assigned and its
//!   position still equals the offset it was fetched from; anything else (a
//!   seek, a revocation, a pause that dropped its buffer) is discarded, so a
//!   stale answer never moves a position;
//! - positions advance only as records are returned to the application;
//! - a partition with one buffered answer is fetched again from the offset
//!   after it (one answer ahead, so the next one is on the wire while the
//!   application works through the buffer); with two it is not fetched
//!   (memory stays bounded by two `max.partition.fetch.bytes` per
//!   partition). An answer is used only if it starts where the buffered
//!   records, or the position, end;
//! - with a buffer limit (a stream thread's share of `input.buffer.max.bytes`,
//!   KIP-770) each partition is fetched with at most half the limit over
//!   the assigned partitions (at least [`MIN_PARTITION_FETCH_BYTES`], at
//!   most `max.partition.fetch.bytes`), and only partitions with nothing
//!   buffered are fetched once the buffered answers hold half the limit:
//!   the answers of one round of fetches add at most half the limit to a
//!   buffer under half of it, so the buffer stays under the limit however
//!   many partitions are assigned (while the share is above the floor).
//!   A partition whose answer held only part of a batch (a batch larger
//!   than its share) is fetched with `max.partition.fetch.bytes` until an
//!   answer of it is buffered: a small share never stalls a partition;
//! - a request whose partitions are all at their high watermark (it can only
//!   long-poll) waits at most `HELD_BACK_FETCH_WAIT` while another partition
//!   of the same leader is held back by a full buffer, so that partition's
//!   next fetch is not stuck behind it for fetch.max.wait.ms;
//! - once a buffered answer is used up the position moves to the offset
//!   after its last batch, also past batches that return nothing (control
//!   batches, aborted transactions, records compacted away), as Kafka's
//!   consumer does;
//! - control batches (transaction markers) are never returned.
//!
//! `isolation.level=read_committed` (KIP-98): the broker answers only up to
//! the last stable offset, with the aborted transactions that overlap the
//! answer (producer id, first offset). As Java's `CompletedFetch`, each
//! buffered answer keeps them in a min-heap by first offset; before a batch
//! of a producer is read, every aborted transaction starting at or before
//! its last offset puts its producer in the aborted set; a transactional
//! batch of a producer in the set is skipped, and that producer's ABORT
//! marker takes it out again (a later transaction of the same producer is
//! read). read_uncommitted returns aborted records, as Kafka does.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use rill_protocol::kafka_protocol::messages::{
    fetch_request::{FetchPartition, FetchTopic, ForgottenTopic},
    BrokerId, FetchRequest,
};
use rill_protocol::records::{validate_batch, BatchError, BatchHeader, BatchIter, BatchRecords};
use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind};
use tracing::debug;

use super::fetch_session::{FetchPosition, FetchSessions, SessionRequest, Wanted};
use super::{ConsumerRecord, Subscriptions};
use crate::cluster::Cluster;
use crate::config::ConsumerConfig;
use crate::error::{needs_metadata_refresh, Error, Result};
use crate::rpc::topic_name;
use crate::runtime::io_handle;
use crate::TopicPartition;

/// How long a fetch of caught-up partitions may wait on the broker while
/// another partition of the same leader waits for its buffer to drain (see
/// `Fetcher::send_fetches`): short, so the held-back partition's fetch
/// follows within it; not zero, so an application working through a long
/// buffer sends at most ~100 empty fetches a second.
const HELD_BACK_FETCH_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

/// The least a partition is fetched with under a buffer limit: with very
/// many partitions the limit yields to this (a fetch of a few KiB per
/// partition would cost the broker more than the memory it saves).
pub const MIN_PARTITION_FETCH_BYTES: usize = 64 * 1024;

/// One partition's part of a fetch answer.
pub struct PartitionFetch {
    pub tp: TopicPartition,
    pub fetch_offset: i64,
    pub error: i16,
    /// The partition's end as this consumer can read it: the high
    /// watermark, or with read_committed the last stable offset (as Java's
    /// lag and fetch logic use it).
    pub high_watermark: i64,
    pub records: Bytes,
    /// read_committed: the aborted transactions overlapping the answer, as
    /// (producer id, first offset); empty for read_uncommitted.
    pub aborted_transactions: Vec<(i64, i64)>,
}

/// A whole fetch answer from one broker.
pub struct FetchAnswer {
    pub node: i32,
    pub result: Result<Vec<PartitionFetch>>,
    /// The fetch session the answer leaves (KIP-227), when it was sent
    /// through one: whether the request was full, the id the broker
    /// answered, and every partition the request fetched.
    session: Option<(bool, i32, Wanted)>,
}

/// What processing an answer asks the consumer to do.
#[derive(Default)]
pub struct FetchEffects {
    /// Partitions whose offset is out of range (reset them).
    pub out_of_range: Vec<TopicPartition>,
    /// Metadata is stale (a leader moved).
    pub refresh_metadata: bool,
    /// An error to give the application (a corrupt batch).
    pub error: Option<Error>,
}

pub struct Fetcher {
    tx: Sender<FetchAnswer>,
    rx: Receiver<FetchAnswer>,
    in_flight: HashSet<i32>,
    /// Fetch sessions by broker (KIP-227).
    sessions: FetchSessions,
    /// Fetched answers per partition, in fetch order.
    buffered: VecDeque<BufferedFetch>,
    /// The most bytes of answers to buffer (see the module header); `None`:
    /// one answer ahead per partition, each up to `max.partition.fetch.bytes`.
    buffer_limit: Option<usize>,
    /// Partitions whose last answer held only part of a batch: fetched with
    /// `max.partition.fetch.bytes` until an answer is buffered.
    oversized: HashSet<TopicPartition>,
    /// The last high watermark (last stable offset with read_committed)
    /// each partition's leader reported (for lag, Kafka's `records-lag`
    /// metric). Looked up per record by a stream thread's readiness check;
    /// keyed by assigned partitions, so the unseeded FxHash is safe.
    high_watermarks: rustc_hash::FxHashMap<TopicPartition, i64>,
    /// How many records the last `take` returned: the next one's starting
    /// capacity (growing a poll's vector from empty copied every record
    /// several times).
    last_taken: usize,
}

/// One partition's part of an answer, kept as the broker sent it and decoded
/// one batch at a time as its records are taken.
struct BufferedFetch {
    tp: TopicPartition,
    /// `tp`'s topic, shared by the records decoded from this answer.
    topic: Arc<str>,
    /// Whole batches not decoded yet.
    raw: Bytes,
    /// Records below this offset are not returned (a fetch may start in the
    /// middle of a batch).
    fetch_offset: i64,
    /// The offset after the last whole batch: where the next fetch starts.
    next_offset: i64,
    /// The batch being returned, read a record at a time, and its leader
    /// epoch.
    current: Option<(BatchRecords, Option<i32>)>,
    /// Aborted transactions not reached yet, as (first offset, producer
    /// id), smallest first offset on top.
    aborted: BinaryHeap<Reverse<(i64, i64)>>,
    /// Producers whose aborted transaction the batches have entered and
    /// whose ABORT marker has not come yet: their transactional batches
    /// are skipped.
    aborted_producers: HashSet<i64>,
}

/// Control record type of an ABORT marker (Kafka's `ControlRecordType`;
/// COMMIT is 1).
const CONTROL_TYPE_ABORT: i16 = 0;

impl BufferedFetch {
    fn is_used_up(&self) -> bool {
        self.current.is_none() && self.raw.is_empty()
    }

    /// Opens the next batch as `current` (skipping control batches,
    /// aborted transactions and records below the fetch offset). A batch
    /// that fails stays next.
    fn decode_next(&mut self, check_crcs: bool) -> Result<()> {
        let h = BatchHeader::parse(&self.raw).map_err(|e| self.corrupt(self.fetch_offset, &e))?;
        let batch = self.raw.slice(..h.total_size().min(self.raw.len()));
        if h.has_producer_id() {
            // Kafka's CompletedFetch: every aborted transaction that started
            // at or before this batch's end has been entered by now.
            while let Some(Reverse((first, pid))) = self.aborted.peek().copied() {
                if first > h.last_offset() {
                    break;
                }
                self.aborted.pop();
                self.aborted_producers.insert(pid);
            }
            if h.is_control() {
                // Only a producer in the set has a marker worth reading
                // (read_uncommitted, or no aborted transaction, reads none).
                if self.aborted_producers.contains(&h.producer_id)
                    && self.is_abort_marker(&batch, &h, check_crcs)?
                {
                    self.aborted_producers.remove(&h.producer_id);
                }
            } else if h.is_transactional() && self.aborted_producers.contains(&h.producer_id) {
                debug!(
                    partition = %self.tp,
                    offset = h.base_offset,
                    producer_id = h.producer_id,
                    "skipping a batch of an aborted transaction"
                );
                self.raw = self.raw.slice(batch.len()..);
                return Ok(());
            }
        }
        if h.next_offset() <= self.fetch_offset || h.is_control() {
            self.raw = self.raw.slice(batch.len()..);
            return Ok(());
        }
        let records = self.decode(&batch, &h, check_crcs)?;
        self.raw = self.raw.slice(batch.len()..);
        let epoch = (h.partition_leader_epoch >= 0).then_some(h.partition_leader_epoch);
        self.current = Some((records, epoch));
        Ok(())
    }

    /// The next record of `current` at or after the fetch offset; `None`
    /// when the batch is used up (then `current` is cleared). A malformed
    /// record is an error at its position; the batch's later records are
    /// not read.
    fn next_record(&mut self) -> Option<Result<ConsumerRecord>> {
        let (records, epoch) = self.current.as_mut()?;
        let epoch = *epoch;
        loop {
            match records.next() {
                None => {
                    self.current = None;
                    return None;
                }
                Some(Ok(r)) if r.offset < self.fetch_offset => continue,
                Some(Ok(r)) => {
                    let log_append_time = records.log_append_time();
                    if records.is_done() {
                        // Used up now, so the answer is too once `raw` is.
                        self.current = None;
                    }
                    return Some(Ok(ConsumerRecord {
                        topic: self.topic.clone(),
                        partition: self.tp.partition,
                        offset: r.offset,
                        timestamp: r.timestamp,
                        log_append_time,
                        key: r.key,
                        value: r.value,
                        headers: r.headers,
                        leader_epoch: epoch,
                    }));
                }
                Some(Err(e)) => {
                    let base = records.base_offset();
                    self.current = None;
                    return Some(Err(self.corrupt(base, &e)));
                }
            }
        }
    }

    /// A reader of the batch's records (its CRC checked first when
    /// `check_crcs`).
    fn decode(&self, batch: &Bytes, h: &BatchHeader, check_crcs: bool) -> Result<BatchRecords> {
        if check_crcs {
            validate_batch(batch, false).map_err(|e| self.corrupt(h.base_offset, &e))?;
        }
        BatchRecords::new(batch, h).map_err(|e| Error::Protocol {
            broker: format!("leader of {}", self.tp),
            reason: format!(
                "undecodable record batch at offset {} of {}: {e}",
                h.base_offset, self.tp
            ),
        })
    }

    /// Whether a control batch is an ABORT marker: its first record's key
    /// is (version i16 >= 0, type i16) with type 0. An empty control batch
    /// is not; a key shorter than 4 bytes or with a negative version is a
    /// corrupt batch, as Kafka's `ControlRecordType.parse` says.
    fn is_abort_marker(&self, batch: &Bytes, h: &BatchHeader, check_crcs: bool) -> Result<bool> {
        let first = match self.decode(batch, h, check_crcs)?.next() {
            None => return Ok(false),
            Some(Ok(first)) => first,
            Some(Err(e)) => return Err(self.corrupt(h.base_offset, &e)),
        };
        match first.key.as_deref() {
            Some([v0, v1, t0, t1, ..]) if i16::from_be_bytes([*v0, *v1]) >= 0 => {
                Ok(i16::from_be_bytes([*t0, *t1]) == CONTROL_TYPE_ABORT)
            }
            key => Err(self.corrupt(
                h.base_offset,
                &format!(
                    "control record key {key:?} is not (version >= 0, type) of 4 bytes or more"
                ),
            )),
        }
    }

    fn corrupt(&self, offset: i64, e: &dyn std::fmt::Display) -> Error {
        Error::Protocol {
            broker: format!("leader of {}", self.tp),
            reason: format!(
                "corrupt record batch at offset {offset} of {}: {e}",
                self.tp
            ),
        }
    }
}

impl Default for Fetcher {
    fn default() -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        Self {
            tx,
            rx,
            in_flight: HashSet::new(),
            sessions: FetchSessions::default(),
            buffered: VecDeque::new(),
            buffer_limit: None,
            oversized: HashSet::new(),
            high_watermarks: Default::default(),
            last_taken: 0,
        }
    }
}

impl Fetcher {
    /// The last high watermark fetched for `tp`.
    pub fn high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.high_watermarks.get(tp).copied()
    }

    /// Bounds the buffered answers to about `limit` bytes (see the module
    /// header); `None` lifts the bound.
    pub fn set_buffer_limit(&mut self, limit: Option<usize>) {
        self.buffer_limit = limit;
    }

    /// Bytes of fetched answers not yet returned.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered.iter().map(|b| b.raw.len()).sum()
    }

    /// Where the next fetch of `tp` starts (after its buffered records, else
    /// at `position`), and how many answers it has buffered.
    fn next_fetch(&self, tp: &TopicPartition, position: i64) -> (i64, usize) {
        let mut next = position;
        let mut chunks = 0;
        for b in &self.buffered {
            if &b.tp == tp {
                next = b.next_offset;
                chunks += 1;
            }
        }
        (next, chunks)
    }

    /// Drops buffered records of partitions (seek, revoke, unsubscribe).
    pub fn clear(&mut self, tp: Option<&TopicPartition>) {
        match tp {
            Some(tp) => self.buffered.retain(|b| &b.tp != tp),
            None => {
                self.buffered.clear();
                self.oversized.clear();
            }
        }
    }

    /// Waits up to `timeout` for a fetch answer.
    pub fn wait(&self, timeout: std::time::Duration) -> Option<FetchAnswer> {
        self.rx.recv_timeout(timeout).ok()
    }

    pub fn try_answer(&self) -> Option<FetchAnswer> {
        self.rx.try_recv().ok()
    }

    /// Buffers an answer (its batches' framing checked, records decoded
    /// later by `take`); returns what the consumer must do.
    pub fn process(&mut self, answer: FetchAnswer, subs: &Subscriptions) -> FetchEffects {
        self.in_flight.remove(&answer.node);
        let mut fx = FetchEffects::default();
        let parts = match answer.result {
            Ok(p) => {
                if let Some((full, id, wanted)) = answer.session {
                    self.sessions.answered(answer.node, full, id, wanted);
                }
                p
            }
            Err(e) => {
                // The broker may have lost or refused the session (or the
                // connection broke): the next request is a full one.
                self.sessions.reset(answer.node);
                debug!(node = answer.node, error = %e, "fetch failed");
                fx.refresh_metadata = true;
                return fx;
            }
        };
        for pf in parts {
            let Some(state) = subs.assignment.get(&pf.tp) else {
                continue;
            };
            // The high watermark is the partition's, whatever offset the
            // answer was fetched from: in a fetch session (KIP-227) the
            // broker sends it again only once it moves, so it is kept even
            // from an answer not used below.
            if pf.high_watermark >= 0 && pf.error == 0 {
                match self.high_watermarks.get_mut(&pf.tp) {
                    Some(hw) => *hw = pf.high_watermark,
                    None => {
                        self.high_watermarks
                            .insert(pf.tp.clone(), pf.high_watermark);
                    }
                }
            }
            let Some(position) = state.position else {
                continue;
            };
            let (expected, chunks) = self.next_fetch(&pf.tp, position);
            if expected != pf.fetch_offset {
                continue;
            }
            if pf.error != 0 && chunks > 0 {
                // A fetch ahead failed: the buffered records are still good;
                // the partition is fetched again once they are returned.
                continue;
            }
            if pf.error != 0 {
                if pf.error == ErrorCode::OffsetOutOfRange.code() {
                    fx.out_of_range.push(pf.tp.clone());
                } else if needs_metadata_refresh(pf.error)
                    || crate::error::is_retriable_code(pf.error)
                {
                    fx.refresh_metadata = true;
                } else {
                    fx.error = Some(Error::broker(
                        pf.error,
                        format!("fetch {} at offset {}", pf.tp, pf.fetch_offset),
                    ));
                }
                continue;
            }
            match whole_batches(&pf) {
                Ok(Some((end, next_offset))) if next_offset > pf.fetch_offset => {
                    if !self.oversized.is_empty() {
                        self.oversized.remove(&pf.tp);
                    }
                    self.buffered.push_back(BufferedFetch {
                        topic: Arc::from(pf.tp.topic.as_str()),
                        raw: pf.records.slice(..end),
                        tp: pf.tp,
                        fetch_offset: pf.fetch_offset,
                        next_offset,
                        current: None,
                        aborted: pf
                            .aborted_transactions
                            .iter()
                            .map(|(pid, first)| Reverse((*first, *pid)))
                            .collect(),
                        aborted_producers: HashSet::new(),
                    })
                }
                // Bytes but no whole batch: the next batch is larger than
                // what the partition was fetched with.
                Ok(None) if !pf.records.is_empty() => {
                    self.oversized.insert(pf.tp);
                }
                Ok(_) => {}
                Err(e) => fx.error = Some(e),
            }
        }
        fx
    }

    /// Takes up to `max` records of fetchable partitions, advancing positions.
    /// A batch that fails to decode (or its CRC check) is an error once the
    /// records before it were returned; the position stays at it.
    pub fn take(
        &mut self,
        max: usize,
        subs: &mut Subscriptions,
        cfg: &ConsumerConfig,
    ) -> Result<Vec<ConsumerRecord>> {
        let mut out = Vec::with_capacity(self.last_taken.min(max));
        let taken = self.take_into(&mut out, max, subs, cfg);
        self.last_taken = out.len();
        taken.map(|()| out)
    }

    fn take_into(
        &mut self,
        out: &mut Vec<ConsumerRecord>,
        max: usize,
        subs: &mut Subscriptions,
        cfg: &ConsumerConfig,
    ) -> Result<()> {
        let mut i = 0;
        while i < self.buffered.len() && out.len() < max {
            let b = &mut self.buffered[i];
            let Some(state) = subs.assignment.get_mut(&b.tp) else {
                self.buffered.remove(i);
                continue;
            };
            if state.paused {
                i += 1;
                continue;
            }
            while out.len() < max {
                match b.next_record() {
                    Some(Ok(r)) => {
                        state.position = Some(r.offset + 1);
                        if r.leader_epoch.is_some() {
                            state.leader_epoch = r.leader_epoch;
                        }
                        out.push(r);
                        continue;
                    }
                    Some(Err(e)) => {
                        // The position stays at the malformed record: the
                        // next fetch reads it again, as Kafka's does.
                        if out.is_empty() {
                            self.buffered.remove(i);
                            return Err(e);
                        }
                        self.buffered.remove(i);
                        return Ok(());
                    }
                    None => {}
                }
                if b.raw.is_empty() {
                    break;
                }
                if let Err(e) = b.decode_next(cfg.check_crcs) {
                    if out.is_empty() {
                        self.buffered.remove(i);
                        return Err(e);
                    }
                    return Ok(());
                }
            }
            if b.is_used_up() {
                if state.position.is_some_and(|p| p < b.next_offset) {
                    state.position = Some(b.next_offset);
                }
                self.buffered.remove(i);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Sends a Fetch to every leader of fetchable partitions with none in flight.
    pub fn send_fetches(
        &mut self,
        cluster: &Arc<Cluster>,
        subs: &Subscriptions,
        cfg: &ConsumerConfig,
    ) {
        let meta = cluster.metadata();
        // With a fetch in flight to every broker no partition can get one
        // now (one request per broker at a time): the walk over every
        // assigned partition is skipped. A stream thread of a 1,000-partition
        // word count calls this on every poll and spent a tenth of its CPU here.
        if !meta.brokers.is_empty() && meta.brokers.keys().all(|b| self.in_flight.contains(b)) {
            return;
        }
        let planned = self.plan_fetches(subs, cfg, |tp| {
            let leader = meta.leader(&tp.topic, tp.partition)?;
            let epoch = meta
                .topic(&tp.topic)
                .and_then(|t| t.partitions.get(tp.partition as usize))
                .map_or(-1, |p| p.leader_epoch);
            Some((leader, epoch))
        });
        for p in planned {
            self.in_flight.insert(p.node);
            let req = self.sessions.request(p.node, p.parts);
            let tx = self.tx.clone();
            let cluster = cluster.clone();
            let cfg = cfg.clone();
            io_handle().spawn(async move {
                let full = req.is_full();
                let (result, session) = match fetch(&cluster, p.node, &req, &cfg, p.max_wait).await
                {
                    Ok((parts, id)) => (Ok(parts), Some((full, id, req.wanted))),
                    Err(e) => (Err(e), None),
                };
                let _ = tx.send(FetchAnswer {
                    node: p.node,
                    result,
                    session,
                });
            });
        }
    }

    /// The fetches to send now: per leader without a request in flight,
    /// its fetchable partitions (`leader_of`: a partition's leader and
    /// leader epoch) and how long the broker may wait for data.
    fn plan_fetches(
        &self,
        subs: &Subscriptions,
        cfg: &ConsumerConfig,
        leader_of: impl Fn(&TopicPartition) -> Option<(i32, i32)>,
    ) -> Vec<PlannedFetch> {
        let mut by_node: BTreeMap<i32, Vec<(TopicPartition, FetchPosition)>> = BTreeMap::new();
        let full_size = cfg.max_partition_fetch_bytes;
        // Under a buffer limit: each partition's share of it, and whether
        // partitions with an answer buffered may be fetched ahead.
        let (share, read_ahead) = match self.buffer_limit {
            None => (full_size, true),
            Some(limit) => {
                let share = (limit / 2 / subs.assignment.len().max(1))
                    .max(MIN_PARTITION_FETCH_BYTES)
                    .min(full_size.max(0) as usize);
                (share as i32, self.buffered_bytes() < limit / 2)
            }
        };
        // Leaders with a partition held back only by its full buffer: it
        // needs a fetch as soon as the application takes an answer.
        let mut held_back: HashSet<i32> = HashSet::new();
        for (tp, st) in &subs.assignment {
            let Some(position) = st.position else {
                continue;
            };
            if st.paused {
                continue;
            }
            let Some((leader, epoch)) = leader_of(tp) else {
                continue;
            };
            // Its leader gets no request now, whatever this partition needs.
            if self.in_flight.contains(&leader) {
                continue;
            }
            let (pos, chunks) = self.next_fetch(tp, position);
            if chunks >= 2 || (chunks == 1 && !read_ahead) {
                held_back.insert(leader);
                continue;
            }
            let max_bytes = if share < full_size && self.oversized.contains(tp) {
                full_size
            } else {
                share
            };
            by_node.entry(leader).or_default().push((
                tp.clone(),
                FetchPosition {
                    offset: pos,
                    leader_epoch: epoch,
                    max_bytes,
                },
            ));
        }
        by_node
            .into_iter()
            .map(|(node, parts)| {
                // A request whose partitions are all at their high watermark
                // waits on the broker up to fetch.max.wait.ms for new data,
                // and with one request in flight per broker (Kafka's rule) it
                // would hold back the next fetch of a partition that still
                // has data: measured, a ~0.5 s stall each time a backlog
                // drained unevenly. While such a partition waits, the
                // request waits briefly instead; once nothing is held back
                // it long-polls as usual. (With read_committed the mark is
                // the last stable offset, the end this consumer can read.)
                let caught_up = parts.iter().all(|(tp, at)| {
                    self.high_watermarks
                        .get(tp)
                        .is_some_and(|hw| at.offset >= *hw)
                });
                let max_wait = if caught_up && held_back.contains(&node) {
                    cfg.fetch_max_wait.min(HELD_BACK_FETCH_WAIT)
                } else {
                    cfg.fetch_max_wait
                };
                PlannedFetch {
                    node,
                    parts,
                    max_wait,
                }
            })
            .collect()
    }
}

/// One Fetch request to send: its leader, partitions (with the offset to
/// fetch from, the leader epoch and the byte limit) and the broker's
/// maximum wait.
struct PlannedFetch {
    node: i32,
    parts: Vec<(TopicPartition, FetchPosition)>,
    max_wait: std::time::Duration,
}

/// Sends one Fetch request (`req`: full, or the changes to the broker's
/// fetch session) and reads its answer: the partitions it carries, each
/// with the offset it was fetched from, and the session id the broker
/// answered (0: none).
async fn fetch(
    cluster: &Cluster,
    node: i32,
    req: &SessionRequest,
    cfg: &ConsumerConfig,
    max_wait: std::time::Duration,
) -> Result<(Vec<PartitionFetch>, i32)> {
    let conn = cluster.connection(node).await?;
    let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
    for (tp, at) in &req.send {
        topics.entry(&tp.topic).or_default().push(
            FetchPartition::default()
                .with_partition(tp.partition)
                .with_current_leader_epoch(at.leader_epoch)
                .with_fetch_offset(at.offset)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(at.max_bytes),
        );
    }
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait.as_millis().min(i32::MAX as u128) as i32)
        .with_min_bytes(cfg.fetch_min_bytes)
        .with_max_bytes(cfg.fetch_max_bytes)
        .with_isolation_level(i8::from(cfg.read_committed))
        .with_session_id(req.session_id)
        .with_session_epoch(req.epoch)
        .with_rack_id(rill_protocol::StrBytes::from_string(
            cfg.common.client_rack.clone().unwrap_or_default(),
        ))
        .with_topics(
            topics
                .into_iter()
                .map(|(t, ps)| {
                    FetchTopic::default()
                        .with_topic(topic_name(t))
                        .with_partitions(ps)
                })
                .collect(),
        )
        .with_forgotten_topics_data(
            req.forgotten
                .iter()
                .map(|(t, ps)| {
                    ForgottenTopic::default()
                        .with_topic(topic_name(t))
                        .with_partitions(ps.clone())
                })
                .collect(),
        );
    let (_, resp) = conn
        .call(ApiKey::Fetch, 4, 12, RequestKind::Fetch(request))
        .await?;
    let ResponseKind::Fetch(resp) = resp else {
        return Err(Error::Protocol {
            broker: conn.broker(),
            reason: "Fetch answered with another response type".into(),
        });
    };
    if resp.error_code != 0 {
        return Err(Error::broker(
            resp.error_code,
            format!("Fetch from {}", conn.broker()),
        ));
    }
    let mut out = Vec::new();
    for t in resp.responses {
        // An incremental answer may carry any partition of the session,
        // named in this request or not: its offset is the session's.
        let Some(offsets) = req.wanted.get(t.topic.0.as_str()) else {
            continue;
        };
        for p in t.partitions {
            let Some(at) = offsets.get(&p.partition_index) else {
                continue;
            };
            out.push(PartitionFetch {
                tp: TopicPartition::new(t.topic.0.to_string(), p.partition_index),
                fetch_offset: at.offset,
                error: p.error_code,
                high_watermark: if cfg.read_committed && p.last_stable_offset >= 0 {
                    p.last_stable_offset
                } else {
                    p.high_watermark
                },
                records: p.records.unwrap_or_default(),
                // Only read_committed filters (read_uncommitted returns
                // aborted records, as Kafka), whatever a broker sends.
                aborted_transactions: if cfg.read_committed {
                    p.aborted_transactions
                        .unwrap_or_default()
                        .iter()
                        .map(|a| (a.producer_id.0, a.first_offset))
                        .collect()
                } else {
                    Vec::new()
                },
            });
        }
    }
    Ok((out, resp.session_id))
}

/// The length of the whole batches at the start of a partition's answer
/// and the offset after the last of them (`None` when there is none). A
/// batch cut off at the end is normal (`max.partition.fetch.bytes`); a
/// malformed first batch is an error.
fn whole_batches(pf: &PartitionFetch) -> Result<Option<(usize, i64)>> {
    let mut iter = BatchIter::new(&pf.records);
    let mut last = None;
    for (at, h) in iter.by_ref() {
        last = Some((at + h.total_size(), h.next_offset()));
    }
    if let Some((_, e)) = iter.stopped_at() {
        if last.is_none() && !matches!(e, BatchError::Truncated { .. }) {
            return Err(Error::Protocol {
                broker: format!("leader of {}", pf.tp),
                reason: format!(
                    "bad record batch in {} at offset {}: {e}",
                    pf.tp, pf.fetch_offset
                ),
            });
        }
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::{PartitionState, SubscriptionKind};
    use rill_protocol::records::{encode_records, set_base_offset, simple_record, Compression};

    /// A batch of `count` records at offsets `base..base + count`.
    fn batch(base: i64, count: i64) -> Bytes {
        let recs: Vec<_> = (0..count)
            .map(|i| simple_record(i, 1, None, Some(Bytes::from(format!("v{}", base + i)))))
            .collect();
        let mut b = encode_records(&recs, Compression::None).unwrap().to_vec();
        set_base_offset(&mut b, base);
        Bytes::from(b)
    }

    fn answer(tp: &TopicPartition, fetch_offset: i64, records: Bytes) -> FetchAnswer {
        FetchAnswer {
            session: None,
            node: 1,
            result: Ok(vec![PartitionFetch {
                tp: tp.clone(),
                fetch_offset,
                error: 0,
                high_watermark: 100,
                records,
                aborted_transactions: Vec::new(),
            }]),
        }
    }

    /// A subscription assigned `tp` at offset 0, and a consumer config.
    fn assigned(tp: &TopicPartition) -> (Subscriptions, ConsumerConfig) {
        let subs = Subscriptions {
            kind: SubscriptionKind::Assigned,
            topics: Default::default(),
            pattern: None,
            assignment: BTreeMap::from([(
                tp.clone(),
                PartitionState {
                    position: Some(0),
                    ..Default::default()
                },
            )]),
        };
        let cfg = ConsumerConfig::from_config(
            &crate::ClientConfig::new().set("bootstrap.servers", "127.0.0.1:1"),
        )
        .unwrap();
        (subs, cfg)
    }

    #[test]
    fn fetches_one_answer_ahead_and_keeps_offsets_in_order() {
        let tp = TopicPartition::new("t", 0);
        let (mut subs, cfg) = assigned(&tp);
        let mut f = Fetcher::default();
        f.process(answer(&tp, 0, batch(0, 3)), &subs);
        // One answer buffered: the next fetch starts after it.
        assert_eq!(f.next_fetch(&tp, 0), (3, 1));
        f.process(answer(&tp, 3, batch(3, 3)), &subs);
        assert_eq!(f.next_fetch(&tp, 0), (6, 2));
        // A stale answer (from before the buffered one) is not used.
        f.process(answer(&tp, 3, batch(3, 3)), &subs);
        assert_eq!(f.next_fetch(&tp, 0), (6, 2));
        let got: Vec<i64> = f
            .take(4, &mut subs, &cfg)
            .unwrap()
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(got, vec![0, 1, 2, 3]);
        assert_eq!(subs.assignment[&tp].position, Some(4));
        assert_eq!(f.next_fetch(&tp, 4), (6, 1));
        let got: Vec<i64> = f
            .take(10, &mut subs, &cfg)
            .unwrap()
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(got, vec![4, 5]);
        assert_eq!(f.next_fetch(&tp, 6), (6, 0));
        // An error on a fetch ahead leaves the buffered records alone.
        f.process(answer(&tp, 6, batch(6, 2)), &subs);
        let mut failed = answer(&tp, 8, Bytes::new());
        if let Ok(parts) = failed.result.as_mut() {
            parts[0].error = ErrorCode::OffsetOutOfRange.code();
        }
        let fx = f.process(failed, &subs);
        assert!(fx.out_of_range.is_empty());
        assert_eq!(f.next_fetch(&tp, 6), (8, 1));
    }

    #[test]
    fn a_fetch_of_caught_up_partitions_waits_briefly_while_another_is_held_back() {
        let full = TopicPartition::new("t", 0);
        let idle = TopicPartition::new("t", 1);
        let (mut subs, cfg) = assigned(&full);
        subs.assignment.insert(
            idle.clone(),
            PartitionState {
                position: Some(0),
                ..Default::default()
            },
        );
        let on_one = |_: &TopicPartition| Some((1, 0));
        let mut f = Fetcher::default();
        // `idle` is at its high watermark (0), `full` has two answers buffered.
        let mut empty = answer(&idle, 0, Bytes::new());
        if let Ok(parts) = empty.result.as_mut() {
            parts[0].high_watermark = 0;
        }
        f.process(empty, &subs);
        f.process(answer(&full, 0, batch(0, 3)), &subs);
        f.process(answer(&full, 3, batch(3, 3)), &subs);
        let plan = f.plan_fetches(&subs, &cfg, on_one);
        assert_eq!(plan.len(), 1);
        let parts: Vec<_> = plan[0]
            .parts
            .iter()
            .map(|(tp, at)| (tp, at.offset))
            .collect();
        assert_eq!(parts, vec![(&idle, 0)]);
        assert_eq!(plan[0].max_wait, HELD_BACK_FETCH_WAIT);
        // One answer taken: `full` is fetched again (from 6) with `idle`; it
        // has data, so the usual wait applies (the broker answers at once).
        assert_eq!(f.take(3, &mut subs, &cfg).unwrap().len(), 3);
        let plan = f.plan_fetches(&subs, &cfg, on_one);
        let parts: Vec<_> = plan[0]
            .parts
            .iter()
            .map(|(tp, at)| (tp, at.offset))
            .collect();
        assert_eq!(parts, vec![(&full, 6), (&idle, 0)]);
        assert_eq!(plan[0].max_wait, cfg.fetch_max_wait);
        // Nothing held back (a paused partition is not waiting to be
        // fetched): the caught-up partition long-polls.
        subs.assignment.get_mut(&full).unwrap().paused = true;
        let plan = f.plan_fetches(&subs, &cfg, on_one);
        let parts: Vec<_> = plan[0]
            .parts
            .iter()
            .map(|(tp, at)| (tp, at.offset))
            .collect();
        assert_eq!(parts, vec![(&idle, 0)]);
        assert_eq!(plan[0].max_wait, cfg.fetch_max_wait);
        // A leader with a request in flight gets no second one.
        f.in_flight.insert(1);
        assert!(f.plan_fetches(&subs, &cfg, on_one).is_empty());
    }

    #[test]
    fn a_buffer_limit_sizes_fetches_and_stops_reading_ahead() {
        let tps: Vec<_> = (0..4).map(|p| TopicPartition::new("t", p)).collect();
        let (mut subs, cfg) = assigned(&tps[0]);
        for tp in &tps[1..] {
            subs.assignment.insert(
                tp.clone(),
                PartitionState {
                    position: Some(0),
                    ..Default::default()
                },
            );
        }
        let on_one = |_: &TopicPartition| Some((1, 0));
        let plan_of = |f: &Fetcher| -> Vec<(i32, i64, i32)> {
            let plan = f.plan_fetches(&subs, &cfg, on_one);
            plan.iter()
                .flat_map(|p| &p.parts)
                .map(|(tp, at)| (tp.partition, at.offset, at.max_bytes))
                .collect()
        };
        let full = cfg.max_partition_fetch_bytes;
        let mut f = Fetcher::default();
        // No limit: every partition with max.partition.fetch.bytes.
        assert!(plan_of(&f).iter().all(|p| p.2 == full));
        // Half of 1 MiB over 4 partitions: 128 KiB each.
        f.set_buffer_limit(Some(1 << 20));
        assert_eq!(
            plan_of(&f),
            (0..4).map(|p| (p, 0, 128 << 10)).collect::<Vec<_>>()
        );
        // A smaller share is raised to the floor.
        f.set_buffer_limit(Some(200 << 10));
        assert!(plan_of(&f)
            .iter()
            .all(|p| p.2 == MIN_PARTITION_FETCH_BYTES as i32));
        // t-0 has an answer buffered: fetched ahead while the buffer holds
        // less than half the limit, not once it holds more.
        f.process(answer(&tps[0], 0, batch(0, 50)), &subs);
        assert_eq!(plan_of(&f)[0], (0, 50, MIN_PARTITION_FETCH_BYTES as i32));
        f.set_buffer_limit(Some(f.buffered_bytes()));
        assert_eq!(
            plan_of(&f).iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        // t-1's answer held only part of a batch: fetched with the full
        // size until an answer of it is buffered.
        let whole = batch(0, 50);
        f.process(answer(&tps[1], 0, whole.slice(..20)), &subs);
        let plan = plan_of(&f);
        assert_eq!(plan[0], (1, 0, full));
        assert!(plan[1..]
            .iter()
            .all(|p| p.2 == MIN_PARTITION_FETCH_BYTES as i32));
        f.process(answer(&tps[1], 0, whole), &subs);
        assert_eq!(
            plan_of(&f).iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![2, 3]
        );
        f.set_buffer_limit(None);
        assert_eq!(
            plan_of(&f)
                .iter()
                .map(|p| (p.0, p.1, p.2))
                .collect::<Vec<_>>(),
            vec![(0, 50, full), (1, 50, full), (2, 0, full), (3, 0, full)]
        );
        assert_eq!(f.take(100, &mut subs, &cfg).unwrap().len(), 100);
        assert_eq!(f.buffered_bytes(), 0);
    }

    #[test]
    fn a_used_up_answer_moves_the_position_past_control_batches() {
        let tp = TopicPartition::new("t", 0);
        let (mut subs, cfg) = assigned(&tp);
        // Records 0..2, then a transaction marker (control batch) at 2.
        let mut marker = simple_record(0, 1, Some(Bytes::from_static(&[0, 0, 0, 1])), None);
        marker.control = true;
        marker.transactional = true;
        let mut control = encode_records(&[marker], Compression::None)
            .unwrap()
            .to_vec();
        set_base_offset(&mut control, 2);
        let mut bytes = batch(0, 2).to_vec();
        bytes.extend_from_slice(&control);
        let mut f = Fetcher::default();
        f.process(answer(&tp, 0, Bytes::from(bytes)), &subs);
        assert_eq!(f.next_fetch(&tp, 0), (3, 1));
        let got: Vec<i64> = f
            .take(10, &mut subs, &cfg)
            .unwrap()
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(got, vec![0, 1]);
        // The marker is never returned, but the position is past it, so the
        // next fetch does not ask for it again.
        assert_eq!(subs.assignment[&tp].position, Some(3));
        assert_eq!(f.next_fetch(&tp, 3), (3, 0));
    }

    /// A transactional batch of producer `pid` with `count` records at
    /// `base..base + count`.
    fn txn_batch(pid: i64, base: i64, count: i64) -> Vec<u8> {
        let recs: Vec<_> = (0..count)
            .map(|i| {
                let mut r = simple_record(i, 1, None, Some(Bytes::from(format!("v{}", base + i))));
                r.transactional = true;
                r.producer_id = pid;
                r.producer_epoch = 0;
                r.sequence = i as i32;
                r
            })
            .collect();
        let mut b = encode_records(&recs, Compression::None).unwrap().to_vec();
        set_base_offset(&mut b, base);
        b
    }

    /// A transaction marker of producer `pid` at `offset`, built by hand as
    /// a coordinator writes it: a control batch (attribute bit 5) whose one
    /// record's key is (version 0, type) and value (version 0, coordinator
    /// epoch 0).
    fn marker(pid: i64, offset: i64, abort: bool) -> Vec<u8> {
        let kind: i16 = if abort { 0 } else { 1 };
        let mut key = 0i16.to_be_bytes().to_vec();
        key.extend_from_slice(&kind.to_be_bytes());
        let mut value = 0i16.to_be_bytes().to_vec();
        value.extend_from_slice(&0i32.to_be_bytes());
        let mut r = simple_record(0, 1, Some(Bytes::from(key)), Some(Bytes::from(value)));
        r.control = true;
        r.transactional = true;
        r.producer_id = pid;
        r.producer_epoch = 0;
        r.sequence = -1;
        let mut b = encode_records(&[r], Compression::None).unwrap().to_vec();
        set_base_offset(&mut b, offset);
        let h = BatchHeader::parse(&b).unwrap();
        assert!(h.is_control() && h.is_transactional() && h.producer_id == pid);
        b
    }

    /// Producer 1 aborts a transaction at 0..2 (marker 4), producer 2
    /// commits one at 2..4 (marker 5), producer 1 aborts another at 6..8
    /// (marker 9), a plain batch at 8, and producer 1 commits at 10 (marker 11).
    fn interleaved_transactions() -> Bytes {
        let mut bytes = txn_batch(1, 0, 2);
        bytes.extend(txn_batch(2, 2, 2));
        bytes.extend(marker(1, 4, true));
        bytes.extend(marker(2, 5, false));
        bytes.extend(txn_batch(1, 6, 2));
        bytes.extend(batch(8, 1));
        bytes.extend(marker(1, 9, true));
        bytes.extend(txn_batch(1, 10, 1));
        bytes.extend(marker(1, 11, false));
        Bytes::from(bytes)
    }

    fn offsets_read(aborted: Vec<(i64, i64)>, fetch_offset: i64) -> (Vec<i64>, Option<i64>) {
        let tp = TopicPartition::new("t", 0);
        let (mut subs, cfg) = assigned(&tp);
        subs.assignment.get_mut(&tp).unwrap().position = Some(fetch_offset);
        let mut a = answer(&tp, fetch_offset, interleaved_transactions());
        if let Ok(parts) = a.result.as_mut() {
            parts[0].aborted_transactions = aborted;
        }
        let mut f = Fetcher::default();
        f.process(a, &subs);
        let got = f
            .take(100, &mut subs, &cfg)
            .unwrap()
            .iter()
            .map(|r| r.offset)
            .collect();
        (got, subs.assignment[&tp].position)
    }

    #[test]
    fn read_committed_skips_aborted_transactions_and_never_returns_markers() {
        // The broker lists both aborted transactions of producer 1.
        let (got, position) = offsets_read(vec![(1, 0), (1, 6)], 0);
        assert_eq!(got, vec![2, 3, 8, 10]);
        assert_eq!(position, Some(12), "past the last marker");
        // Fetching from the middle of the first aborted transaction: the
        // broker still lists it (it overlaps the answer).
        let (got, _) = offsets_read(vec![(1, 0), (1, 6)], 1);
        assert_eq!(got, vec![2, 3, 8, 10]);
        // Only the second one is aborted: the first is read.
        let (got, _) = offsets_read(vec![(1, 6)], 0);
        assert_eq!(got, vec![0, 1, 2, 3, 8, 10]);
    }

    #[test]
    fn read_uncommitted_returns_aborted_records() {
        // No aborted list (a read_uncommitted fetch): everything but the
        // markers, as Kafka's consumer returns it.
        let (got, position) = offsets_read(Vec::new(), 0);
        assert_eq!(got, vec![0, 1, 2, 3, 6, 7, 8, 10]);
        assert_eq!(position, Some(12));
    }

    #[test]
    fn a_control_batch_with_a_short_key_is_corrupt() {
        let tp = TopicPartition::new("t", 0);
        let (mut subs, cfg) = assigned(&tp);
        let mut r = simple_record(0, 1, Some(Bytes::from_static(&[0])), None);
        r.control = true;
        r.transactional = true;
        r.producer_id = 1;
        r.producer_epoch = 0;
        let bad = encode_records(&[r], Compression::None).unwrap();
        let mut a = answer(&tp, 0, bad);
        if let Ok(parts) = a.result.as_mut() {
            parts[0].aborted_transactions = vec![(1, 0)];
        }
        let mut f = Fetcher::default();
        f.process(a, &subs);
        let e = f.take(10, &mut subs, &cfg).unwrap_err().to_string();
        assert!(e.contains("control record key") && e.contains("t-0"), "{e}");
        assert_eq!(subs.assignment[&tp].position, Some(0));
    }

    #[test]
    fn a_corrupt_batch_fails_after_the_records_before_it_and_keeps_its_position() {
        let tp = TopicPartition::new("t", 0);
        let (mut subs, cfg) = assigned(&tp);
        let mut bad = batch(2, 2).to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0xff; // inside the records: the CRC no longer matches
        let mut bytes = batch(0, 2).to_vec();
        bytes.extend_from_slice(&bad);
        let mut f = Fetcher::default();
        let fx = f.process(answer(&tp, 0, Bytes::from(bytes)), &subs);
        assert!(
            fx.error.is_none(),
            "framing is intact; the CRC is checked when decoding"
        );
        let got: Vec<i64> = f
            .take(10, &mut subs, &cfg)
            .unwrap()
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(got, vec![0, 1]);
        let err = f.take(10, &mut subs, &cfg).unwrap_err().to_string();
        assert!(err.contains("offset 2 of t-0"), "{err}");
        assert_eq!(subs.assignment[&tp].position, Some(2));
        // The bad answer is dropped: the next fetch asks for offset 2 again.
        assert_eq!(f.next_fetch(&tp, 2), (2, 0));
    }
}
