//! KIP-848 group membership (`group.protocol=consumer`): the broker assigns,
//! the member heartbeats its subscription and owned partitions and
//! reconciles toward what each heartbeat answer assigns.
//!
//! A tokio task sends ConsumerGroupHeartbeat every interval the broker asks
//! for; answers with an assignment are handed to the polling thread, which
//! revokes and assigns (calling the rebalance listener) and acknowledges by
//! updating the owned partitions, which wakes the task to heartbeat at once.
//! Invariants:
//! - the member id is generated once by the client (KIP-1082) and kept for
//!   the consumer's life, also when rejoining with epoch 0 after being fenced;
//! - FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID make the owned partitions lost
//!   and the member rejoin with epoch 0;
//! - FENCED_INSTANCE_ID and UNRELEASED_INSTANCE_ID are fatal (Kafka's
//!   behaviour for static members);
//! - leaving uses epoch -1, or -2 for a static member (KIP-848: the broker
//!   keeps a static member's assignment until its session times out).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rill_protocol::kafka_protocol::messages::{
    consumer_group_heartbeat_request::TopicPartitions, ConsumerGroupHeartbeatRequest, GroupId,
};
use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind};
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::cluster::Cluster;
use crate::config::ConsumerConfig;
use crate::error::{Error, Result};
use crate::rpc::{self, sb, topic_name, MemberRef};
use crate::runtime::{block_on, io_handle};

/// Partitions by topic id, as the protocol carries them.
pub type IdPartitions = Vec<(Uuid, Vec<i32>)>;

#[derive(Debug)]
pub struct Shared {
    pub member_id: String,
    pub epoch: i32,
    pub subscribed: Vec<String>,
    subscription_sent: bool,
    /// What the member owns (acknowledged by the polling thread).
    owned: IdPartitions,
    owned_sent: bool,
    /// An assignment received and not reconciled yet.
    pub target: Option<IdPartitions>,
    pub lost: bool,
    pub fatal: Option<Error>,
    pub interval: Duration,
    pub last_poll: Instant,
    /// Epoch to leave with, once.
    leave: Option<i32>,
    stopped: bool,
}

pub struct ModernMember {
    pub group_id: String,
    pub instance_id: Option<String>,
    pub shared: Arc<Mutex<Shared>>,
    wake: Arc<tokio::sync::Notify>,
    task: Option<tokio::task::JoinHandle<()>>,
}

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// Kafka's `Uuid.toString()`: URL-safe base64 without padding.
pub(super) fn new_member_id() -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = *Uuid::new_v4().as_bytes();
    let mut out = String::with_capacity(22);
    let mut bits: u32 = 0;
    let mut n = 0;
    for b in bytes {
        bits = (bits << 8) | b as u32;
        n += 8;
        while n >= 6 {
            n -= 6;
            out.push(T[((bits >> n) & 63) as usize] as char);
        }
    }
    if n > 0 {
        out.push(T[((bits << (6 - n)) & 63) as usize] as char);
    }
    out
}

/// The epoch a member leaves with (KIP-848, KIP-1071): -2 keeps a static
/// member's assignment until its session ends, -1 gives it up now.
pub(super) fn leave_epoch(is_static: bool, permanently: bool) -> i32 {
    if is_static && !permanently {
        -2
    } else {
        -1
    }
}

/// Waits (bounded) for the heartbeat task to send the leave heartbeat and exit.
pub(super) fn await_leave(task: Option<tokio::task::JoinHandle<()>>) {
    if let Some(t) = task {
        let _ = block_on("Consumer::close", async {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        });
    }
}

impl ModernMember {
    pub fn new(cfg: &ConsumerConfig, group_id: &str) -> Self {
        Self {
            group_id: group_id.to_string(),
            instance_id: cfg.group_instance_id.clone(),
            shared: Arc::new(Mutex::new(Shared {
                member_id: new_member_id(),
                epoch: 0,
                subscribed: Vec::new(),
                subscription_sent: false,
                owned: Vec::new(),
                owned_sent: false,
                target: None,
                lost: false,
                fatal: None,
                interval: Duration::from_millis(100),
                last_poll: Instant::now(),
                leave: None,
                stopped: false,
            })),
            wake: Arc::new(tokio::sync::Notify::new()),
            task: None,
        }
    }

    pub fn fatal(&self) -> Option<Error> {
        lock(&self.shared).fatal.clone()
    }

    pub fn touch_poll(&self) {
        lock(&self.shared).last_poll = Instant::now();
    }

    pub fn member_ref(&self) -> MemberRef {
        let s = lock(&self.shared);
        MemberRef {
            member_id: s.member_id.clone(),
            generation_or_epoch: s.epoch,
            instance_id: self.instance_id.clone(),
            consumer_protocol: true,
        }
    }

    /// Sets the subscription and starts heartbeating if needed.
    pub fn subscribe(
        &mut self,
        cluster: &Arc<Cluster>,
        cfg: &ConsumerConfig,
        topics: &BTreeSet<String>,
    ) {
        let mut changed = false;
        {
            let mut s = lock(&self.shared);
            let topics: Vec<String> = topics.iter().cloned().collect();
            if s.subscribed != topics {
                s.subscribed = topics;
                s.subscription_sent = false;
                changed = true;
            }
        }
        if self.task.as_ref().is_none_or(|t| t.is_finished()) {
            {
                let mut s = lock(&self.shared);
                if s.fatal.is_some() {
                    return;
                }
                s.stopped = false;
                s.leave = None;
            }
            changed = true;
            self.task = Some(io_handle().spawn(heartbeat_loop(
                cluster.clone(),
                cfg.clone(),
                self.group_id.clone(),
                self.instance_id.clone(),
                self.shared.clone(),
                self.wake.clone(),
            )));
        }
        if changed {
            self.wake.notify_one();
        }
    }

    /// An assignment to reconcile, if one arrived.
    pub fn take_target(&self) -> Option<IdPartitions> {
        lock(&self.shared).target.take()
    }

    pub fn take_lost(&self) -> bool {
        std::mem::take(&mut lock(&self.shared).lost)
    }

    /// The polling thread reconciled: report what it owns now.
    pub fn ack_owned(&self, owned: IdPartitions) {
        {
            let mut s = lock(&self.shared);
            s.owned = owned;
            s.owned_sent = false;
        }
        self.wake.notify_one();
    }

    /// Leaves the group (epoch -1, or -2 for a static member unless
    /// `permanently`) and stops heartbeating.
    pub fn leave(&mut self, permanently: bool) {
        lock(&self.shared).leave = Some(leave_epoch(self.instance_id.is_some(), permanently));
        self.wake.notify_one();
        await_leave(self.task.take());
        let mut s = lock(&self.shared);
        s.epoch = 0;
        s.owned.clear();
        s.subscription_sent = false;
        s.owned_sent = false;
        s.target = None;
    }

    /// Stops heartbeating without leaving.
    pub fn stop(&mut self) {
        lock(&self.shared).stopped = true;
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

impl Drop for ModernMember {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn heartbeat_loop(
    cluster: Arc<Cluster>,
    cfg: ConsumerConfig,
    group: String,
    instance: Option<String>,
    shared: Arc<Mutex<Shared>>,
    wake: Arc<tokio::sync::Notify>,
) {
    loop {
        let (req, leaving) = {
            let mut s = lock(&shared);
            if s.stopped || s.fatal.is_some() {
                return;
            }
            let poll_late = s.last_poll.elapsed() > cfg.max_poll_interval && s.epoch > 0;
            if poll_late && s.leave.is_none() {
                warn!(%group, "poll() was not called within max.poll.interval.ms; leaving the group");
                s.leave = Some(if instance.is_some() { -2 } else { -1 });
                s.lost = true;
            }
            let leaving = s.leave;
            let epoch = leaving.unwrap_or(s.epoch);
            let joining = epoch == 0;
            let mut req = ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(sb(&group)))
                .with_member_id(sb(&s.member_id))
                .with_member_epoch(epoch)
                .with_instance_id(instance.as_deref().map(sb))
                .with_rebalance_timeout_ms(if joining {
                    cfg.max_poll_interval.as_millis() as i32
                } else {
                    -1
                });
            if leaving.is_none() {
                if joining || !s.subscription_sent {
                    req = req.with_subscribed_topic_names(Some(
                        s.subscribed.iter().map(|t| topic_name(t)).collect(),
                    ));
                    req = req.with_server_assignor(cfg.group_remote_assignor.as_deref().map(sb));
                    req = req.with_rack_id(cfg.common.client_rack.as_deref().map(sb));
                }
                if joining || !s.owned_sent {
                    req = req.with_topic_partitions(Some(
                        s.owned
                            .iter()
                            .map(|(t, ps)| {
                                TopicPartitions::default()
                                    .with_topic_id(*t)
                                    .with_partitions(ps.clone())
                            })
                            .collect(),
                    ));
                }
            }
            (req, leaving)
        };
        let sent_subscription = req.subscribed_topic_names.is_some();
        let sent_owned = req.topic_partitions.is_some();
        let r: Result<_> = async {
            let conn = rpc::coordinator(&cluster, &group).await?;
            let (_, resp) = conn
                .call(
                    ApiKey::ConsumerGroupHeartbeat,
                    0,
                    1,
                    RequestKind::ConsumerGroupHeartbeat(req),
                )
                .await?;
            match resp {
                ResponseKind::ConsumerGroupHeartbeat(r) => Ok(r),
                _ => Err(Error::Protocol {
                    broker: conn.broker(),
                    reason: "ConsumerGroupHeartbeat answered with another response type".into(),
                }),
            }
        }
        .await;
        let mut retry_soon = false;
        {
            let mut s = lock(&shared);
            match r {
                Ok(resp) if resp.error_code == 0 => {
                    if let Some(l) = leaving {
                        info!(%group, epoch = l, "left the consumer group");
                        s.stopped = true;
                        return;
                    }
                    if resp.member_epoch != s.epoch {
                        debug!(%group, epoch = resp.member_epoch, "member epoch");
                    }
                    s.epoch = resp.member_epoch;
                    if resp.heartbeat_interval_ms > 0 {
                        s.interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
                    }
                    s.subscription_sent |= sent_subscription;
                    s.owned_sent |= sent_owned;
                    if let Some(a) = resp.assignment {
                        s.target = Some(
                            a.topic_partitions
                                .into_iter()
                                .map(|t| (t.topic_id, t.partitions))
                                .collect(),
                        );
                    }
                }
                Ok(resp) => {
                    let code = resp.error_code;
                    let msg = resp
                        .error_message
                        .map(|m| m.to_string())
                        .unwrap_or_default();
                    if code == ErrorCode::FencedInstanceId.code()
                        || code == ErrorCode::UnreleasedInstanceId.code()
                    {
                        let e = Error::FencedInstanceId {
                            group: group.clone(),
                            instance_id: instance.clone().unwrap_or_default(),
                            detail: format!(
                                "ConsumerGroupHeartbeat answered {}: {msg}",
                                rill_protocol::error::name(code)
                            ),
                        };
                        warn!(%group, error = %e, "fatal");
                        s.fatal = Some(e);
                        return;
                    } else if code == ErrorCode::FencedMemberEpoch.code()
                        || code == ErrorCode::UnknownMemberId.code()
                    {
                        warn!(%group, error = %rill_protocol::error::name(code), "fenced; partitions lost, rejoining");
                        s.epoch = 0;
                        s.lost = true;
                        s.target = None;
                        s.owned.clear();
                        s.subscription_sent = false;
                        if leaving.is_some() {
                            s.stopped = true;
                            return;
                        }
                        retry_soon = true;
                    } else if rpc::is_coordinator_error(&Error::broker(code, "")) {
                        cluster.forget_coordinator(&group);
                        retry_soon = true;
                    } else {
                        let e = Error::broker(
                            code,
                            format!("ConsumerGroupHeartbeat to group {group}: {msg}"),
                        );
                        warn!(%group, error = %e, "fatal heartbeat error");
                        s.fatal = Some(e);
                        return;
                    }
                }
                Err(e) => {
                    debug!(%group, error = %e, "heartbeat failed");
                    cluster.forget_coordinator(&group);
                    retry_soon = true;
                }
            }
        }
        let wait = if retry_soon {
            cfg.common.retry_backoff
        } else {
            lock(&shared).interval
        };
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
