//! The consumer: Kafka's `KafkaConsumer` semantics for a synchronous
//! polling thread.
//!
//! Everything the application sees happens inside its own calls, as with
//! Java's consumer: `poll` joins or reconciles the group, runs the rebalance
//! listener, sets positions (committed offset, else `auto.offset.reset`),
//! auto-commits, and returns records. Heartbeats and fetches run as tokio
//! tasks meanwhile.
//!
//! Subscription semantics are KIP-70's (see `docs/client.md`):
//! - `subscribe` / `subscribe_pattern` change only the subscription; the
//!   assignment stays until the next rebalance, whose revocation callback
//!   receives the whole previous assignment (eager protocols);
//! - with `enable.auto.commit`, `unsubscribe` commits the consumed offsets
//!   before it clears the assignment, as KIP-70 specifies (Kafka reverted
//!   this in KAFKA-4234; Rill keeps KIP-70's behaviour, documented).
//!
//! Invariants: after a fatal error (FENCED_INSTANCE_ID) every call fails
//! with [`Error::Stopped`] and nothing more is committed; positions move only
//! when records are returned, seeked, or reset; the listener is never called
//! from another thread.

pub mod assignor;
mod classic;
mod fetch_session;
mod fetcher;
mod modern;
pub mod streams;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use regex::Regex;
use tracing::{debug, info, warn};

use crate::cluster::Cluster;
use crate::config::{ClientConfig, ConsumerConfig, GroupProtocol, OffsetReset};
use crate::error::{Error, Result};
use crate::rpc::{self, MemberRef, OffsetAndMetadata, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use crate::runtime::block_on;
use crate::TopicPartition;
use assignor::{PartitionAssignor, RebalanceProtocol};
use classic::ClassicMember;
use fetcher::Fetcher;
use modern::ModernMember;
use streams::{StreamsGroupSpec, StreamsGroupView, StreamsMember};

/// A record as `poll` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerRecord {
    /// Shared by the records of one fetched partition (no name is
    /// allocated per record).
    pub topic: std::sync::Arc<str>,
    /// Partition the record was read from.
    pub partition: i32,
    /// The record's offset in its partition.
    pub offset: i64,
    /// Record timestamp in ms since the Unix epoch: create time or log append time, see
    /// `log_append_time`.
    pub timestamp: i64,
    /// Whether `timestamp` is the broker's append time (else the producer's).
    pub log_append_time: bool,
    /// Record key; `None` for a null key.
    pub key: Option<Bytes>,
    /// Record value; `None` for a null value (a tombstone).
    pub value: Option<Bytes>,
    /// Record headers as `(key, value)` pairs in the order written; `None` is a null header value.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Partition leader epoch of the batch the record came in; `None` if the batch has none (-1).
    pub leader_epoch: Option<i32>,
}

impl ConsumerRecord {
    /// The topic and partition the record was read from, as an owned [`TopicPartition`].
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.topic.to_string(), self.partition)
    }
}

/// Callbacks around rebalances (Kafka's `ConsumerRebalanceListener`), run
/// inside `poll` (and `unsubscribe` / `close`) on the polling thread; they
/// may use the consumer, e.g. to commit in `on_partitions_revoked`.
pub trait RebalanceListener: Send {
    /// Called before partitions are taken away in a rebalance, or at `unsubscribe` / `close`,
    /// while their offsets can still be committed. Default: does nothing.
    fn on_partitions_revoked(&mut self, _consumer: &mut Consumer, _partitions: &[TopicPartition]) {}
    /// Called after a rebalance with the partitions newly assigned (with a cooperative
    /// protocol only the added ones), before records are fetched from them. Default: does nothing.
    fn on_partitions_assigned(&mut self, _consumer: &mut Consumer, _partitions: &[TopicPartition]) {
    }
    /// Partitions taken away without a chance to commit (the member was
    /// fenced or its session expired). Kafka's default calls `on_partitions_revoked`.
    fn on_partitions_lost(&mut self, consumer: &mut Consumer, partitions: &[TopicPartition]) {
        self.on_partitions_revoked(consumer, partitions)
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct PartitionState {
    /// The next offset to return; `None` until it is set.
    pub position: Option<i64>,
    pub leader_epoch: Option<i32>,
    pub paused: bool,
    /// A pending reset (seek to beginning/end, or out of range).
    pub reset: Option<OffsetReset>,
}

/// How the consumer gets its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionKind {
    /// Neither subscribed nor assigned; `poll` fails.
    None,
    /// Subscribed to a list of topics (`subscribe`); the group assigns the partitions.
    Topics,
    /// Subscribed to the topics matching a regex (`subscribe_pattern`); the group assigns the
    /// partitions.
    Pattern,
    /// Partitions given by hand with `assign`; no group membership.
    Assigned,
}

pub(crate) struct Subscriptions {
    pub kind: SubscriptionKind,
    /// Subscribed topic names (for a pattern: the topics it matches now).
    pub topics: BTreeSet<String>,
    pub pattern: Option<Regex>,
    pub assignment: BTreeMap<TopicPartition, PartitionState>,
}

enum Group {
    Classic(ClassicMember),
    Modern(ModernMember),
    Streams(Box<StreamsMember>),
}

#[derive(Clone, Copy)]
enum Callback {
    Revoked,
    Assigned,
    Lost,
}

/// Identity of the consumer in its group (for logging and transactional use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The consumer's `group.id`.
    pub group_id: String,
    /// Member id the coordinator gave this consumer; empty before it has joined the group.
    pub member_id: String,
    /// Classic generation or KIP-848 member epoch.
    pub generation_id: i32,
    /// The consumer's `group.instance.id`; `None` for a dynamic member.
    pub group_instance_id: Option<String>,
}

type CommitCallback = Box<dyn FnOnce(Result<()>) + Send>;
type CommitOutcome = (CommitCallback, Result<()>);

/// A Kafka consumer, used from one thread at a time.
pub struct Consumer {
    cfg: ConsumerConfig,
    cluster: Arc<Cluster>,
    subs: Subscriptions,
    fetcher: Fetcher,
    group: Option<Group>,
    assignors: Vec<Arc<dyn PartitionAssignor>>,
    listener: Option<Box<dyn RebalanceListener>>,
    in_callback: bool,
    /// A rebalance callback asked the poll it runs in to return when it ends.
    end_poll: bool,
    next_auto_commit: Instant,
    last_metadata_refresh: Option<Instant>,
    fatal: Option<Error>,
    closed: bool,
    async_commits: (
        crossbeam_channel::Sender<CommitOutcome>,
        crossbeam_channel::Receiver<CommitOutcome>,
    ),
}

fn validate_topic(t: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(Error::InvalidTopic {
            topic: t.to_string(),
            reason: reason.to_string(),
        })
    };
    if t.is_empty() {
        return bad("empty");
    }
    if t == "." || t == ".." {
        return bad("'.' and '..' are not allowed");
    }
    if t.len() > 249 {
        return bad("longer than 249 characters");
    }
    if !t
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

impl Consumer {
    /// A consumer with the assignors named in `partition.assignment.strategy`.
    pub fn new(config: &ClientConfig) -> Result<Self> {
        let cfg = ConsumerConfig::from_config(config)?;
        let assignors = if cfg.group_protocol == GroupProtocol::Classic {
            cfg.assignment_strategies
                .iter()
                .map(|n| assignor::builtin(n))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        Ok(Self::build(cfg, assignors))
    }

    /// A consumer with custom assignors (in preference order), replacing
    /// `partition.assignment.strategy`.
    pub fn with_assignors(
        config: &ClientConfig,
        assignors: Vec<Arc<dyn PartitionAssignor>>,
    ) -> Result<Self> {
        let cfg = ConsumerConfig::from_config(config)?;
        if assignors.is_empty() {
            return Err(Error::config(
                "partition.assignment.strategy",
                "",
                "needs at least one assignor",
            ));
        }
        Ok(Self::build(cfg, assignors))
    }

    fn build(cfg: ConsumerConfig, assignors: Vec<Arc<dyn PartitionAssignor>>) -> Self {
        let cluster = Cluster::new(cfg.common.clone());
        let group = cfg.group_id.as_deref().map(|g| match cfg.group_protocol {
            GroupProtocol::Classic => Group::Classic(ClassicMember::new(&cfg, g, &assignors)),
            GroupProtocol::Consumer => Group::Modern(ModernMember::new(&cfg, g)),
        });
        Self {
            next_auto_commit: Instant::now() + cfg.auto_commit_interval,
            cfg,
            cluster,
            subs: Subscriptions {
                kind: SubscriptionKind::None,
                topics: BTreeSet::new(),
                pattern: None,
                assignment: BTreeMap::new(),
            },
            fetcher: Fetcher::default(),
            group,
            assignors,
            listener: None,
            in_callback: false,
            end_poll: false,
            last_metadata_refresh: None,
            fatal: None,
            closed: false,
            async_commits: crossbeam_channel::unbounded(),
        }
    }

    fn usable(&self, what: &str) -> Result<()> {
        if self.closed {
            return Err(Error::Closed("consumer"));
        }
        if let Some(e) = &self.fatal {
            return Err(Error::Stopped(Box::new(e.clone())));
        }
        if self.in_callback && what == "poll" {
            return Err(Error::IllegalState(
                "poll() called from a rebalance listener".into(),
            ));
        }
        Ok(())
    }

    fn group_id(&self) -> Result<&str> {
        self.cfg.group_id.as_deref().ok_or_else(|| {
            Error::config(
                "group.id",
                "",
                "required to subscribe or commit (use assign() without a group)",
            )
        })
    }

    /// Sets the rebalance listener.
    pub fn set_rebalance_listener(&mut self, listener: impl RebalanceListener + 'static) {
        self.listener = Some(Box::new(listener));
    }

    /// Subscribes to topics (KIP-70: the assignment changes only at the next
    /// rebalance). An empty list unsubscribes.
    pub fn subscribe(&mut self, topics: &[&str]) -> Result<()> {
        self.usable("subscribe")?;
        self.group_id()?;
        if topics.is_empty() {
            return self.unsubscribe();
        }
        if self.subs.kind == SubscriptionKind::Assigned {
            return Err(Error::IllegalState(
                "subscribe() after assign(): subscriptions to topics, patterns and assigned partitions are mutually exclusive".into(),
            ));
        }
        for t in topics {
            validate_topic(t)?;
        }
        let new: BTreeSet<String> = topics.iter().map(|t| t.to_string()).collect();
        self.cluster.add_interest(topics.iter().copied());
        let changed = self.subs.kind != SubscriptionKind::Topics || self.subs.topics != new;
        self.subs.kind = SubscriptionKind::Topics;
        self.subs.pattern = None;
        self.subs.topics = new;
        if changed {
            self.request_rejoin();
        }
        Ok(())
    }

    /// Joins the group as a member of a KIP-1071 streams group (Kafka
    /// Streams' `group.protocol=streams`): the broker assigns tasks of the
    /// topology in `spec`, and the consumer reads the input partitions of
    /// its active tasks. Replaces the consumer's group protocol; the
    /// assignment is read with [`Consumer::streams_group`].
    pub fn subscribe_streams(&mut self, spec: StreamsGroupSpec) -> Result<()> {
        self.usable("subscribe")?;
        let group = self.group_id()?.to_string();
        if self.subs.kind == SubscriptionKind::Assigned {
            return Err(Error::IllegalState(
                "subscribe_streams() after assign(): subscriptions are mutually exclusive".into(),
            ));
        }
        let mut topics = BTreeSet::new();
        for s in &spec.topology.subtopologies {
            topics.extend(s.source_topics.iter().map(|t| t.to_string()));
            topics.extend(
                s.repartition_source_topics
                    .iter()
                    .map(|t| t.name.to_string()),
            );
        }
        for t in &topics {
            validate_topic(t)?;
        }
        self.cluster.add_interest(topics.iter().map(String::as_str));
        self.subs.kind = SubscriptionKind::Topics;
        self.subs.pattern = None;
        self.subs.topics = topics;
        self.group = Some(Group::Streams(Box::new(StreamsMember::new(
            &self.cfg, &group, spec,
        ))));
        Ok(())
    }

    /// The streams group as this member last heard of it, when it is one
    /// ([`Consumer::subscribe_streams`]).
    pub fn streams_group(&self) -> Option<StreamsGroupView> {
        match &self.group {
            Some(Group::Streams(m)) => Some(m.view()),
            _ => None,
        }
    }

    /// Streams groups: the changelog offset sums of the tasks whose state
    /// this member's process holds, reported when it (re)joins.
    pub fn set_streams_task_offsets(
        &self,
        offsets: BTreeMap<(String, i32), i64>,
        ends: BTreeMap<(String, i32), i64>,
    ) {
        if let Some(Group::Streams(m)) = &self.group {
            m.set_task_offsets(offsets, ends);
        }
    }

    /// Streams groups: asks every instance of the application to shut
    /// down (KIP-671 over KIP-1071's ShutdownApplication).
    pub fn request_streams_shutdown(&self) {
        if let Some(Group::Streams(m)) = &self.group {
            m.request_shutdown();
        }
    }

    /// Subscribes to every topic whose whole name matches `pattern`,
    /// re-evaluated as topics come and go (every `metadata.max.age.ms`).
    pub fn subscribe_pattern(&mut self, pattern: &str) -> Result<()> {
        self.usable("subscribe")?;
        self.group_id()?;
        if self.subs.kind == SubscriptionKind::Assigned {
            return Err(Error::IllegalState(
                "subscribe_pattern() after assign(): subscriptions are mutually exclusive".into(),
            ));
        }
        let re = Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|e| Error::config("subscription pattern", pattern, e.to_string()))?;
        self.subs.kind = SubscriptionKind::Pattern;
        self.subs.pattern = Some(re);
        // The topics are resolved at the next poll; until then the old set stays.
        self.refresh_pattern(true)?;
        Ok(())
    }

    /// Assigns partitions by hand (no group membership).
    pub fn assign(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.usable("assign")?;
        if matches!(
            self.subs.kind,
            SubscriptionKind::Topics | SubscriptionKind::Pattern
        ) {
            return Err(Error::IllegalState(
                "assign() after subscribe(): subscriptions are mutually exclusive".into(),
            ));
        }
        if partitions.is_empty() {
            return self.unsubscribe();
        }
        for tp in partitions {
            validate_topic(&tp.topic)?;
        }
        let wanted: BTreeSet<&TopicPartition> = partitions.iter().collect();
        let removed: Vec<TopicPartition> = self
            .subs
            .assignment
            .keys()
            .filter(|tp| !wanted.contains(tp))
            .cloned()
            .collect();
        for tp in removed {
            self.subs.assignment.remove(&tp);
            self.fetcher.clear(Some(&tp));
        }
        for tp in partitions {
            self.subs.assignment.entry(tp.clone()).or_default();
        }
        self.subs.kind = SubscriptionKind::Assigned;
        self.subs.topics = partitions.iter().map(|tp| tp.topic.clone()).collect();
        self.cluster
            .add_interest(self.subs.topics.iter().map(String::as_str));
        Ok(())
    }

    /// Stops consuming: with auto-commit the consumed offsets are committed
    /// first (KIP-70's behaviour), the listener sees the partitions
    /// revoked, and a dynamic member leaves its group.
    pub fn unsubscribe(&mut self) -> Result<()> {
        self.usable("unsubscribe")?;
        if self.cfg.enable_auto_commit && self.group.is_some() && !self.subs.assignment.is_empty() {
            if let Err(e) = self.commit_consumed(None) {
                warn!(error = %e, "committing consumed offsets on unsubscribe failed");
            }
        }
        let owned: Vec<TopicPartition> = self.subs.assignment.keys().cloned().collect();
        if matches!(
            self.subs.kind,
            SubscriptionKind::Topics | SubscriptionKind::Pattern
        ) && !owned.is_empty()
        {
            self.callback(Callback::Revoked, &owned);
        }
        match self.group.as_mut() {
            Some(Group::Classic(m))
                if matches!(
                    self.subs.kind,
                    SubscriptionKind::Topics | SubscriptionKind::Pattern
                ) =>
            {
                if m.instance_id.is_none() {
                    m.leave(&self.cluster, "the consumer unsubscribed");
                } else {
                    // KIP-345: a static member keeps its id and membership;
                    // it only stops heartbeating (no self-fencing on rejoin).
                    m.stop();
                }
            }
            Some(Group::Modern(m))
                if matches!(
                    self.subs.kind,
                    SubscriptionKind::Topics | SubscriptionKind::Pattern
                ) =>
            {
                m.leave(false);
            }
            _ => {}
        }
        self.subs.assignment.clear();
        self.subs.topics.clear();
        self.subs.pattern = None;
        self.subs.kind = SubscriptionKind::None;
        self.fetcher.clear(None);
        Ok(())
    }

    /// The subscribed topics (a pattern's current matches).
    pub fn subscription(&self) -> BTreeSet<String> {
        match self.subs.kind {
            SubscriptionKind::Topics | SubscriptionKind::Pattern => self.subs.topics.clone(),
            _ => BTreeSet::new(),
        }
    }

    /// The partitions currently assigned.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.subs.assignment.keys().cloned().collect()
    }

    /// The consumer's group identity.
    pub fn group_metadata(&self) -> Option<GroupMetadata> {
        let group_id = self.cfg.group_id.clone()?;
        let r = self.member_ref();
        Some(GroupMetadata {
            group_id,
            member_id: r.member_id,
            generation_id: r.generation_or_epoch,
            group_instance_id: self.cfg.group_instance_id.clone(),
        })
    }

    fn member_ref(&self) -> MemberRef {
        match (&self.group, self.subs.kind) {
            (Some(Group::Classic(m)), SubscriptionKind::Topics | SubscriptionKind::Pattern) => {
                m.member_ref()
            }
            (Some(Group::Modern(m)), SubscriptionKind::Topics | SubscriptionKind::Pattern) => {
                m.member_ref()
            }
            (Some(Group::Streams(m)), SubscriptionKind::Topics) => m.member_ref(),
            _ => MemberRef::none(),
        }
    }

    /// Makes the next `poll` rejoin the group (Kafka's `enforceRebalance`),
    /// e.g. after the subscription user data changed. Classic protocol only:
    /// with `group.protocol=consumer` the coordinator decides, and this does nothing.
    pub fn enforce_rebalance(&mut self) -> Result<()> {
        self.usable("enforce_rebalance")?;
        self.request_rejoin();
        Ok(())
    }

    /// Called from a rebalance callback: the `poll` the callback runs in
    /// returns as soon as the callback ends (with no records), instead of
    /// waiting out its timeout. A stream thread whose new tasks' partitions
    /// stay paused while their stores open has work to do before then.
    /// Called elsewhere, the next `poll` returns at once.
    pub fn end_poll(&mut self) {
        self.end_poll = true;
    }

    fn request_rejoin(&mut self) {
        if let Some(Group::Classic(m)) = &self.group {
            m.request_rejoin();
        }
    }

    fn callback(&mut self, which: Callback, parts: &[TopicPartition]) {
        let Some(mut l) = self.listener.take() else {
            return;
        };
        self.in_callback = true;
        match which {
            Callback::Revoked => l.on_partitions_revoked(self, parts),
            Callback::Assigned => l.on_partitions_assigned(self, parts),
            Callback::Lost => l.on_partitions_lost(self, parts),
        }
        self.in_callback = false;
        if self.listener.is_none() {
            self.listener = Some(l);
        }
    }

    /// Returns records, at most `max.poll.records`, waiting up to `timeout`.
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        self.usable("poll")?;
        if self.subs.kind == SubscriptionKind::None {
            return Err(Error::IllegalState(
                "the consumer is not subscribed to any topics or assigned any partitions".into(),
            ));
        }
        let deadline = Instant::now() + timeout;
        self.run_async_commit_callbacks();
        loop {
            self.update_group()?;
            if std::mem::take(&mut self.end_poll) {
                return Ok(Vec::new());
            }
            self.maybe_auto_commit();
            self.ensure_metadata(false);
            self.update_positions()?;
            while let Some(a) = self.fetcher.try_answer() {
                self.handle_answer(a)?;
            }
            let records =
                self.fetcher
                    .take(self.cfg.max_poll_records, &mut self.subs, &self.cfg)?;
            self.fetcher
                .send_fetches(&self.cluster, &self.subs, &self.cfg);
            if !records.is_empty() {
                return Ok(records);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let wait = (deadline - now).min(Duration::from_millis(100));
            if let Some(a) = self.fetcher.wait(wait) {
                self.handle_answer(a)?;
            }
        }
    }

    fn handle_answer(&mut self, a: fetcher::FetchAnswer) -> Result<()> {
        let fx = self.fetcher.process(a, &self.subs);
        for tp in fx.out_of_range {
            let Some(st) = self.subs.assignment.get_mut(&tp) else {
                continue;
            };
            if self.cfg.auto_offset_reset == OffsetReset::None {
                return Err(Error::OffsetOutOfRange {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset: st.position.unwrap_or(-1),
                });
            }
            info!(partition = %tp, offset = ?st.position, "fetch offset out of range; resetting");
            st.position = None;
            st.reset = Some(self.cfg.auto_offset_reset);
        }
        if fx.refresh_metadata {
            // A failed fetch (connection refused, NOT_LEADER_OR_FOLLOWER…)
            // means the snapshot's leader is wrong even though it is fresh
            // (a broker stopped after a controlled shutdown moved its
            // leaderships): refresh now, throttled by `retry.backoff.ms`.
            self.ensure_metadata(true);
        }
        match fx.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Refreshes metadata when `forced`, an assigned partition has no known
    /// leader or the snapshot is old (throttled by `retry.backoff.ms`).
    fn ensure_metadata(&mut self, forced: bool) {
        let meta = self.cluster.metadata();
        let missing = self
            .subs
            .assignment
            .keys()
            .any(|tp| meta.leader(&tp.topic, tp.partition).is_none());
        if !forced && !missing && !self.cluster.metadata_is_stale() {
            return;
        }
        if self
            .last_metadata_refresh
            .is_some_and(|t| t.elapsed() < self.cfg.common.retry_backoff)
        {
            return;
        }
        self.last_metadata_refresh = Some(Instant::now());
        let topics: Vec<String> = self
            .subs
            .assignment
            .keys()
            .map(|tp| tp.topic.clone())
            .collect();
        let auto = self.cfg.allow_auto_create_topics;
        let _ = block_on("Consumer::poll", self.cluster.refresh(Some(&topics), auto));
    }

    /// Re-resolves a pattern subscription; requests a rejoin when its topics changed.
    fn refresh_pattern(&mut self, force: bool) -> Result<()> {
        let Some(re) = self.subs.pattern.clone() else {
            return Ok(());
        };
        if !force && !self.cluster.metadata_is_stale() && self.cluster.metadata().complete {
            return Ok(());
        }
        let meta = block_on("Consumer::poll", self.cluster.refresh(None, false))??;
        let matched: BTreeSet<String> = meta
            .topics
            .values()
            .filter(|t| !(self.cfg.exclude_internal_topics && t.internal))
            .map(|t| t.name.clone())
            .filter(|n| re.is_match(n))
            .collect();
        if matched != self.subs.topics {
            debug!(?matched, "pattern subscription changed");
            self.cluster
                .add_interest(matched.iter().map(String::as_str));
            self.subs.topics = matched;
            self.request_rejoin();
        }
        Ok(())
    }

    fn update_group(&mut self) -> Result<()> {
        if !matches!(
            self.subs.kind,
            SubscriptionKind::Topics | SubscriptionKind::Pattern
        ) {
            return Ok(());
        }
        if self.subs.kind == SubscriptionKind::Pattern {
            self.refresh_pattern(false)?;
        }
        match self.group.as_ref() {
            Some(Group::Classic(_)) => self.update_classic(),
            Some(Group::Modern(_)) => self.update_modern(),
            Some(Group::Streams(_)) => self.update_streams(),
            None => Ok(()),
        }
    }

    fn fail(&mut self, e: Error) -> Error {
        if e.is_fatal() {
            warn!(error = %e, "consumer stopped");
            self.fatal = Some(e.clone());
        }
        e
    }

    fn update_classic(&mut self) -> Result<()> {
        let Some(Group::Classic(m)) = self.group.as_ref() else {
            return Ok(());
        };
        if let Some(e) = m.fatal() {
            return Err(self.fail(e));
        }
        m.touch_poll();
        let lost = m.take_lost();
        let needs_join = m.needs_join();
        let cooperative = m.rebalance_protocol == RebalanceProtocol::Cooperative;
        if lost && !self.subs.assignment.is_empty() {
            let parts = self.assignment();
            self.subs.assignment.clear();
            self.fetcher.clear(None);
            self.callback(Callback::Lost, &parts);
        }
        if !needs_join {
            return Ok(());
        }
        // Kafka's onJoinPrepare: commit, then (eager) revoke everything.
        if self.cfg.enable_auto_commit && !self.subs.assignment.is_empty() {
            if let Err(e) = self.commit_consumed(None) {
                warn!(error = %e, "auto-commit before rebalance failed");
            }
        }
        if !cooperative {
            // Eager: everything is revoked before the join; the listener hears
            // it even when nothing is owned (KIP-70's examples).
            let parts = self.assignment();
            self.callback(Callback::Revoked, &parts);
            self.subs.assignment.clear();
            self.fetcher.clear(None);
        }
        let owned = self.assignment();
        let topics = self.subs.topics.clone();
        let assignors = self.assignors.clone();
        let cluster = self.cluster.clone();
        let joined = {
            let Some(Group::Classic(m)) = self.group.as_mut() else {
                return Ok(());
            };
            m.join(&cluster, &self.cfg, &topics, &owned, &assignors)
        };
        let joined = match joined {
            Ok(j) => j,
            Err(e) => return Err(self.fail(e)),
        };
        // Kafka's onJoinComplete.
        let new: BTreeSet<TopicPartition> = joined.assigned.iter().cloned().collect();
        let old: BTreeSet<TopicPartition> = owned.iter().cloned().collect();
        if cooperative {
            let revoked: Vec<TopicPartition> = old.difference(&new).cloned().collect();
            if !revoked.is_empty() {
                self.callback(Callback::Revoked, &revoked);
                for tp in &revoked {
                    self.subs.assignment.remove(tp);
                    self.fetcher.clear(Some(tp));
                }
                // KIP-429: rejoin so the revoked partitions can move.
                self.request_rejoin();
            }
            let added: Vec<TopicPartition> = new.difference(&old).cloned().collect();
            for tp in &added {
                self.subs.assignment.entry(tp.clone()).or_default();
            }
            self.callback(Callback::Assigned, &added);
        } else {
            for tp in &new {
                self.subs.assignment.entry(tp.clone()).or_default();
            }
            let all: Vec<TopicPartition> = new.into_iter().collect();
            self.callback(Callback::Assigned, &all);
        }
        self.cluster
            .add_interest(self.subs.assignment.keys().map(|tp| tp.topic.as_str()));
        Ok(())
    }

    fn update_modern(&mut self) -> Result<()> {
        let topics = self.subs.topics.clone();
        let cluster = self.cluster.clone();
        let Some(Group::Modern(m)) = self.group.as_mut() else {
            return Ok(());
        };
        if let Some(e) = m.fatal() {
            return Err(self.fail(e));
        }
        m.touch_poll();
        m.subscribe(&cluster, &self.cfg, &topics);
        let lost = m.take_lost();
        let target = m.take_target();
        if lost && !self.subs.assignment.is_empty() {
            let parts = self.assignment();
            self.subs.assignment.clear();
            self.fetcher.clear(None);
            self.callback(Callback::Lost, &parts);
            if let Some(Group::Modern(m)) = self.group.as_ref() {
                m.ack_owned(Vec::new());
            }
        }
        let Some(target) = target else {
            return Ok(());
        };
        // Topic ids to names (refreshing metadata for ids not known yet).
        let mut meta = self.cluster.metadata();
        if target.iter().any(|(id, _)| meta.topic_by_id(id).is_none()) {
            let wanted: Vec<String> = topics.iter().cloned().collect();
            meta = block_on("Consumer::poll", self.cluster.refresh(Some(&wanted), false))??;
        }
        let mut new = BTreeSet::new();
        for (id, ps) in &target {
            match meta.topic_by_id(id) {
                Some(t) => new.extend(ps.iter().map(|p| TopicPartition::new(t.name.clone(), *p))),
                None => warn!(topic_id = %id, "assigned a topic id the metadata does not know yet"),
            }
        }
        let old: BTreeSet<TopicPartition> = self.subs.assignment.keys().cloned().collect();
        let revoked: Vec<TopicPartition> = old.difference(&new).cloned().collect();
        let added: Vec<TopicPartition> = new.difference(&old).cloned().collect();
        if !revoked.is_empty() {
            if self.cfg.enable_auto_commit {
                if let Err(e) = self.commit_consumed(Some(&revoked)) {
                    warn!(error = %e, "auto-commit of revoked partitions failed");
                }
            }
            self.callback(Callback::Revoked, &revoked);
            for tp in &revoked {
                self.subs.assignment.remove(tp);
                self.fetcher.clear(Some(tp));
            }
        }
        for tp in &added {
            self.subs.assignment.entry(tp.clone()).or_default();
        }
        if !added.is_empty() {
            self.callback(Callback::Assigned, &added);
        }
        let meta = self.cluster.metadata();
        let mut owned: BTreeMap<uuid::Uuid, Vec<i32>> = BTreeMap::new();
        for tp in self.subs.assignment.keys() {
            if let Some(t) = meta.topic(&tp.topic) {
                owned.entry(t.id).or_default().push(tp.partition);
            }
        }
        if let Some(Group::Modern(m)) = self.group.as_ref() {
            m.ack_owned(owned.into_iter().collect());
        }
        Ok(())
    }

    /// KIP-1071 reconciliation: lost tasks first, then revoke what the
    /// new assignment drops before taking on what it adds; the listener
    /// hears the revoked partitions and then the whole new assignment (the
    /// tasks it keeps are still running), and the broker hears the owned
    /// tasks at once.
    fn update_streams(&mut self) -> Result<()> {
        let cluster = self.cluster.clone();
        let Some(Group::Streams(m)) = self.group.as_mut() else {
            return Ok(());
        };
        if let Some(e) = m.fatal() {
            return Err(self.fail(e));
        }
        m.touch_poll();
        m.ensure_started(&cluster, &self.cfg);
        let lost = m.take_lost();
        let target = m.take_target();
        if lost && !self.subs.assignment.is_empty() {
            let parts = self.assignment();
            self.subs.assignment.clear();
            self.fetcher.clear(None);
            self.callback(Callback::Lost, &parts);
        }
        let Some(target) = target else {
            return Ok(());
        };
        let new: BTreeSet<TopicPartition> = match self.group.as_ref() {
            Some(Group::Streams(m)) => match m.partitions_of(&target.active) {
                Ok(p) => p.into_iter().collect(),
                Err(e) => {
                    self.fatal = Some(e.clone());
                    return Err(e);
                }
            },
            _ => return Ok(()),
        };
        let old: BTreeSet<TopicPartition> = self.subs.assignment.keys().cloned().collect();
        let revoked: Vec<TopicPartition> = old.difference(&new).cloned().collect();
        if !revoked.is_empty() {
            self.callback(Callback::Revoked, &revoked);
            for tp in &revoked {
                self.subs.assignment.remove(tp);
                self.fetcher.clear(Some(tp));
            }
        }
        for tp in &new {
            self.subs.assignment.entry(tp.clone()).or_default();
        }
        // The owned tasks are known before the listener runs: it reads the
        // standbys from `streams_group()`.
        if let Some(Group::Streams(m)) = self.group.as_ref() {
            m.ack_owned(target);
        }
        let all: Vec<TopicPartition> = new.into_iter().collect();
        self.callback(Callback::Assigned, &all);
        self.cluster
            .add_interest(self.subs.assignment.keys().map(|tp| tp.topic.as_str()));
        Ok(())
    }

    /// Sets positions of partitions that have none: the committed offset,
    /// else `auto.offset.reset` (or a pending seek to beginning/end).
    fn update_positions(&mut self) -> Result<()> {
        let missing: Vec<TopicPartition> = self
            .subs
            .assignment
            .iter()
            .filter(|(_, s)| s.position.is_none())
            .map(|(tp, _)| tp.clone())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let timeout = self.cfg.common.default_api_timeout;
        let mut to_reset: BTreeMap<TopicPartition, i64> = BTreeMap::new();
        let need_committed: Vec<TopicPartition> = missing
            .iter()
            .filter(|tp| self.subs.assignment[*tp].reset.is_none())
            .cloned()
            .collect();
        let committed = match (&self.cfg.group_id, need_committed.is_empty()) {
            (Some(g), false) => {
                let member = self.member_ref();
                block_on(
                    "Consumer::poll",
                    rpc::fetch_committed(&self.cluster, g, Some(&need_committed), &member, timeout),
                )??
            }
            _ => BTreeMap::new(),
        };
        for tp in missing {
            let st = self.subs.assignment.get_mut(&tp).expect("listed above");
            if st.reset.is_none() {
                if let Some(c) = committed.get(&tp) {
                    st.position = Some(c.offset);
                    st.leader_epoch = c.leader_epoch;
                    continue;
                }
            }
            let strategy = st.reset.unwrap_or(self.cfg.auto_offset_reset);
            let ts = match strategy {
                OffsetReset::Earliest => EARLIEST_TIMESTAMP,
                OffsetReset::Latest => LATEST_TIMESTAMP,
                OffsetReset::None => {
                    return Err(Error::NoOffsetForPartition {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                    })
                }
            };
            to_reset.insert(tp, ts);
        }
        if to_reset.is_empty() {
            return Ok(());
        }
        let offsets = block_on(
            "Consumer::poll",
            rpc::list_offsets(&self.cluster, self.cfg.read_committed, &to_reset, timeout),
        )??;
        for (tp, found) in offsets {
            let (offset, epoch) = (found.offset, found.leader_epoch);
            if let Some(st) = self.subs.assignment.get_mut(&tp) {
                if st.position.is_none() {
                    debug!(partition = %tp, offset, "position reset");
                    st.position = Some(offset);
                    st.leader_epoch = epoch;
                    st.reset = None;
                }
            }
        }
        Ok(())
    }

    fn maybe_auto_commit(&mut self) {
        if !self.cfg.enable_auto_commit
            || self.group.is_none()
            || Instant::now() < self.next_auto_commit
        {
            return;
        }
        self.next_auto_commit = Instant::now() + self.cfg.auto_commit_interval;
        if let Err(e) = self.commit_consumed(None) {
            warn!(error = %e, "auto-commit failed");
        }
    }

    fn consumed_offsets(
        &self,
        only: Option<&[TopicPartition]>,
    ) -> BTreeMap<TopicPartition, OffsetAndMetadata> {
        self.subs
            .assignment
            .iter()
            .filter(|(tp, _)| only.is_none_or(|o| o.contains(tp)))
            .filter_map(|(tp, s)| {
                s.position.map(|p| {
                    (
                        tp.clone(),
                        OffsetAndMetadata {
                            offset: p,
                            leader_epoch: s.leader_epoch,
                            metadata: String::new(),
                        },
                    )
                })
            })
            .collect()
    }

    fn commit_consumed(&mut self, only: Option<&[TopicPartition]>) -> Result<()> {
        let offsets = self.consumed_offsets(only);
        if offsets.is_empty() {
            return Ok(());
        }
        self.commit_offsets_inner(&offsets)
    }

    fn commit_offsets_inner(
        &mut self,
        offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
    ) -> Result<()> {
        let group = self.group_id()?.to_string();
        let member = self.member_ref();
        let results = block_on(
            "Consumer::commit_sync",
            rpc::commit(
                &self.cluster,
                &group,
                &member,
                offsets,
                self.cfg.common.default_api_timeout,
            ),
        )?;
        let results = match results {
            Ok(r) => r,
            Err(e) => {
                let instance = self.cfg.group_instance_id.clone();
                return Err(self.fail(commit_error(&group, instance.as_deref(), e)));
            }
        };
        for (_, r) in results {
            if let Err(e) = r {
                let instance = self.cfg.group_instance_id.clone();
                return Err(self.fail(commit_error(&group, instance.as_deref(), e)));
            }
        }
        Ok(())
    }

    /// Commits the positions of every assigned partition (what `poll` returned).
    pub fn commit_sync(&mut self) -> Result<()> {
        self.usable("commit")?;
        self.commit_consumed(None)
    }

    /// Commits the given offsets (the next offset to read, per partition).
    pub fn commit_offsets_sync(
        &mut self,
        offsets: &BTreeMap<TopicPartition, OffsetAndMetadata>,
    ) -> Result<()> {
        self.usable("commit")?;
        self.commit_offsets_inner(offsets)
    }

    /// Commits the consumed positions in the background; `callback` runs
    /// inside a later `poll` (or `close`) with the outcome.
    pub fn commit_async(
        &mut self,
        callback: impl FnOnce(Result<()>) + Send + 'static,
    ) -> Result<()> {
        self.usable("commit")?;
        let group = self.group_id()?.to_string();
        let member = self.member_ref();
        let offsets = self.consumed_offsets(None);
        let cluster = self.cluster.clone();
        let timeout = self.cfg.common.default_api_timeout;
        let tx = self.async_commits.0.clone();
        let instance = self.cfg.group_instance_id.clone();
        let cb: CommitCallback = Box::new(callback);
        crate::runtime::io_handle().spawn(async move {
            let r = if offsets.is_empty() {
                Ok(())
            } else {
                match rpc::commit(&cluster, &group, &member, &offsets, timeout).await {
                    Ok(results) => results
                        .into_values()
                        .find_map(|r| r.err())
                        .map_or(Ok(()), |e| {
                            Err(commit_error(&group, instance.as_deref(), e))
                        }),
                    Err(e) => Err(commit_error(&group, instance.as_deref(), e)),
                }
            };
            let _ = tx.send((cb, r));
        });
        Ok(())
    }

    fn run_async_commit_callbacks(&mut self) {
        while let Ok((cb, r)) = self.async_commits.1.try_recv() {
            if let Err(e) = &r {
                if e.is_fatal() {
                    self.fatal = Some(e.clone());
                }
            }
            cb(r);
        }
    }

    /// Committed offsets of partitions.
    pub fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, OffsetAndMetadata>> {
        self.usable("committed")?;
        let group = self.group_id()?.to_string();
        let member = self.member_ref();
        block_on(
            "Consumer::committed",
            rpc::fetch_committed(
                &self.cluster,
                &group,
                Some(partitions),
                &member,
                self.cfg.common.default_api_timeout,
            ),
        )?
    }

    fn assigned_state(&mut self, tp: &TopicPartition) -> Result<&mut PartitionState> {
        self.subs.assignment.get_mut(tp).ok_or_else(|| {
            Error::IllegalState(format!("partition {tp} is not assigned to this consumer"))
        })
    }

    /// Sets the next offset `poll` returns for a partition.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        self.usable("seek")?;
        if offset < 0 {
            return Err(Error::IllegalState(format!(
                "seek to negative offset {offset} for {tp}"
            )));
        }
        let st = self.assigned_state(tp)?;
        st.position = Some(offset);
        st.leader_epoch = None;
        st.reset = None;
        self.fetcher.clear(Some(tp));
        Ok(())
    }

    /// Seeks partitions to their first offset (evaluated at the next poll or position).
    pub fn seek_to_beginning(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.seek_reset(partitions, OffsetReset::Earliest)
    }

    /// Seeks partitions to their end (evaluated at the next poll or position).
    pub fn seek_to_end(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        self.seek_reset(partitions, OffsetReset::Latest)
    }

    fn seek_reset(&mut self, partitions: &[TopicPartition], how: OffsetReset) -> Result<()> {
        self.usable("seek")?;
        for tp in partitions {
            let st = self.assigned_state(tp)?;
            st.position = None;
            st.reset = Some(how);
            self.fetcher.clear(Some(tp));
        }
        Ok(())
    }

    /// The next offset `poll` returns for a partition (resolving it if needed).
    pub fn position(&mut self, tp: &TopicPartition) -> Result<i64> {
        self.usable("position")?;
        self.assigned_state(tp)?;
        self.update_positions()?;
        self.subs.assignment[tp]
            .position
            .ok_or_else(|| Error::IllegalState(format!("no position for {tp}")))
    }

    /// How far each assigned partition's position is behind its high
    /// watermark (its last stable offset with `isolation.level=read_committed`,
    /// as Kafka), as of the last fetch (Kafka's `records-lag`); partitions
    /// not fetched yet are left out.
    pub fn lags(&self) -> Vec<(TopicPartition, i64)> {
        self.subs
            .assignment
            .iter()
            .filter_map(|(tp, st)| {
                let hw = self.fetcher.high_watermark(tp)?;
                Some((tp.clone(), (hw - st.position?).max(0)))
            })
            .collect()
    }

    /// Whether every assigned partition has been returned up to its high
    /// watermark as of the last fetch (no partition has a
    /// [`lag`](Self::lag) above 0). A paused partition with records left
    /// is not caught up (a paused partition is usually one whose records
    /// wait to be processed); one not fetched yet is: nothing is known to be
    /// waiting there.
    pub fn caught_up(&self) -> bool {
        self.subs
            .assignment
            .keys()
            .all(|tp| self.lag(tp).is_none_or(|l| l == 0))
    }

    /// One assigned partition's lag as of the last fetch (as [`lags`](Self::lags)),
    /// looked up without building the whole list.
    pub fn lag(&self, tp: &TopicPartition) -> Option<i64> {
        let st = self.subs.assignment.get(tp)?;
        let hw = self.fetcher.high_watermark(tp)?;
        Some((hw - st.position?).max(0))
    }

    /// Bounds the fetched records this consumer buffers ahead of `poll` to
    /// about `bytes` however many partitions are assigned (Rill's; Kafka
    /// Streams' `input.buffer.max.bytes`, KIP-770, sets it on each stream
    /// thread's consumer): each partition is fetched with at most half of
    /// `bytes` over the assigned partitions (at least 64 KiB, at most
    /// `max.partition.fetch.bytes`, or that in full for a partition whose
    /// next batch is larger), and partitions with records buffered are not
    /// fetched ahead once the buffer holds half of `bytes`, so the buffer
    /// stays under `bytes` while the share is above 64 KiB. `None` (the
    /// default): one answer ahead per partition, each up to
    /// `max.partition.fetch.bytes`, as without a bound.
    pub fn set_fetch_buffer_limit(&mut self, bytes: Option<usize>) {
        self.fetcher.set_buffer_limit(bytes);
    }

    /// Bytes of fetched records buffered and not yet returned by `poll`.
    pub fn fetch_buffer_bytes(&self) -> usize {
        self.fetcher.buffered_bytes()
    }

    /// Stops fetching from partitions (they stay assigned).
    pub fn pause(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in partitions {
            self.assigned_state(tp)?.paused = true;
        }
        Ok(())
    }

    /// Resumes fetching from partitions paused with [`pause`](Self::pause).
    ///
    /// Fails with [`Error::IllegalState`] if a partition is not assigned to this consumer.
    pub fn resume(&mut self, partitions: &[TopicPartition]) -> Result<()> {
        for tp in partitions {
            self.assigned_state(tp)?.paused = false;
        }
        Ok(())
    }

    /// The assigned partitions that are paused, in (topic, partition) order.
    pub fn paused(&self) -> Vec<TopicPartition> {
        self.subs
            .assignment
            .iter()
            .filter(|(_, s)| s.paused)
            .map(|(tp, _)| tp.clone())
            .collect()
    }

    /// Closes the consumer: commits consumed offsets (auto-commit), revokes
    /// the partitions in the listener, and leaves the group if it is a
    /// dynamic member. A static member leaves only with [`Consumer::close_and_leave`].
    pub fn close(mut self) -> Result<()> {
        self.close_inner(false)
    }

    /// Closes and leaves the group even as a static member (KIP-345 / KIP-1092).
    pub fn close_and_leave(mut self) -> Result<()> {
        self.close_inner(true)
    }

    fn close_inner(&mut self, leave: bool) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let subscribed = matches!(
            self.subs.kind,
            SubscriptionKind::Topics | SubscriptionKind::Pattern
        );
        if self.fatal.is_none() {
            if self.cfg.enable_auto_commit
                && self.group.is_some()
                && !self.subs.assignment.is_empty()
            {
                if let Err(e) = self.commit_consumed(None) {
                    warn!(error = %e, "commit on close failed");
                }
            }
            self.run_async_commit_callbacks();
            if subscribed && !self.subs.assignment.is_empty() {
                let parts = self.assignment();
                self.callback(Callback::Revoked, &parts);
            }
        }
        let cluster = self.cluster.clone();
        match self.group.as_mut() {
            Some(Group::Classic(m)) if subscribed => {
                if (m.instance_id.is_none() || leave) && self.fatal.is_none() {
                    m.leave(
                        &cluster,
                        if leave {
                            "the consumer closed and left the group"
                        } else {
                            "the consumer is closing"
                        },
                    );
                } else {
                    m.stop();
                }
            }
            Some(Group::Modern(m)) if subscribed => {
                if self.fatal.is_none() {
                    m.leave(leave);
                } else {
                    m.stop();
                }
            }
            Some(Group::Streams(m)) if subscribed => {
                if self.fatal.is_none() {
                    m.leave(leave);
                } else {
                    m.stop();
                }
            }
            _ => {}
        }
        self.closed = true;
        Ok(())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if !self.closed && tokio::runtime::Handle::try_current().is_err() {
            let _ = self.close_inner(false);
        }
    }
}

/// Maps rebalance-related commit errors to Kafka's `CommitFailedException`.
fn commit_error(group: &str, instance_id: Option<&str>, e: Error) -> Error {
    use rill_protocol::ErrorCode;
    match e.code() {
        Some(
            ErrorCode::RebalanceInProgress
            | ErrorCode::IllegalGeneration
            | ErrorCode::UnknownMemberId
            | ErrorCode::StaleMemberEpoch,
        ) => Error::CommitFailed {
            group: group.to_string(),
            reason: format!(
                "{e}; the group rebalanced and the partitions may now belong to another member"
            ),
        },
        Some(ErrorCode::FencedInstanceId) => Error::FencedInstanceId {
            group: group.to_string(),
            instance_id: instance_id.unwrap_or_default().to_string(),
            detail: e.to_string(),
        },
        _ => e,
    }
}
