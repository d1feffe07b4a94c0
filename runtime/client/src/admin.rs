//! The admin client: topics, partitions, cluster, groups, offsets, records,
//! and KIP-345's removal of static members by `group.instance.id`.
//!
//! Every call blocks the calling thread (it must not be a tokio worker) and
//! is bounded by `default.api.timeout.ms`. Batch calls answer per item, as
//! Kafka's `Admin` does with one future per topic/group/member: one bad item
//! never hides the outcome of the others. Topic and partition creation go to
//! any broker (KRaft brokers forward them to the controller); group calls go
//! to the group's coordinator; record deletion and ListOffsets go to each
//! partition's leader. ListGroups asks every broker, since each coordinates
//! its own groups.

mod configs;
pub use configs::{AlterConfigOp, ConfigResource};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_protocol::kafka_protocol::messages::{
    consumer_protocol_assignment::ConsumerProtocolAssignment,
    create_partitions_request::CreatePartitionsTopic,
    create_topics_request::{CreatableTopic, CreatableTopicConfig},
    delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic},
    delete_topics_request::DeleteTopicState,
    leave_group_request::MemberIdentity,
    offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic},
    ConsumerGroupDescribeRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeGroupsRequest, GroupId,
    LeaveGroupRequest, ListGroupsRequest, OffsetDeleteRequest,
};
use rill_protocol::kafka_protocol::protocol::Decodable;
use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind};

use crate::cluster::{BrokerInfo, Cluster, TopicMetadata};
use crate::config::{AdminConfig, ClientConfig};
use crate::error::{Error, Result};
use crate::rpc::{self, sb, topic_name, ListedOffset, MemberRef, OffsetAndMetadata, OffsetSpec};
use crate::runtime::block_on;
use crate::TopicPartition;

/// A topic to create.
#[derive(Debug, Clone)]
pub struct NewTopic {
    /// Name of the topic to create.
    pub name: String,
    /// -1: the broker's default.
    pub partitions: i32,
    /// -1: the broker's default.
    pub replication_factor: i16,
    /// Topic-level configs to set at creation, e.g. `cleanup.policy` or `retention.ms`;
    /// empty to use the broker's defaults.
    pub configs: BTreeMap<String, String>,
}

impl NewTopic {
    /// A topic named `name` with `partitions` partitions and `replication_factor` replicas
    /// (-1 for either: the broker's default) and no topic configs (Kafka's `new NewTopic(...)`).
    pub fn new(name: impl Into<String>, partitions: i32, replication_factor: i16) -> Self {
        Self {
            name: name.into(),
            partitions,
            replication_factor,
            configs: BTreeMap::new(),
        }
    }

    /// Sets a topic-level config such as `cleanup.policy=compact` (builder style); a later
    /// value for the same key replaces the earlier one.
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.insert(key.into(), value.into());
        self
    }
}

/// The cluster as DescribeCluster shows it.
#[derive(Debug, Clone)]
pub struct ClusterDescription {
    /// Cluster id from the Metadata response; `None` if the broker sent none.
    pub cluster_id: Option<String>,
    /// Node id of the broker reported as controller; -1 if none is known.
    pub controller_id: i32,
    /// Brokers in the cluster metadata, in node id order.
    pub brokers: Vec<BrokerInfo>,
}

/// A group as ListGroups lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupListing {
    /// The group's `group.id`.
    pub group_id: String,
    /// Protocol type the members use (`consumer` for consumer groups); empty for a group that
    /// only holds committed offsets.
    pub protocol_type: String,
    /// Group state, e.g. `Stable` or `Empty`; empty when the broker's ListGroups is older than v4.
    pub state: String,
    /// `classic` or `consumer` (empty from brokers before KIP-848).
    pub group_type: String,
}

/// A group member as DescribeGroups / ConsumerGroupDescribe show it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberDescription {
    /// Member id the coordinator gave the member.
    pub member_id: String,
    /// The member's `group.instance.id` (KIP-345); `None` for a dynamic member.
    pub group_instance_id: Option<String>,
    /// The member's `client.id`.
    pub client_id: String,
    /// Host the member connects from, as the broker saw it.
    pub host: String,
    /// Partitions assigned to the member; empty for a classic group whose protocol type is not
    /// `consumer` (its assignment is not decoded).
    pub assignment: Vec<TopicPartition>,
}

/// A group as DescribeGroups / ConsumerGroupDescribe show it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDescription {
    /// The group's `group.id`.
    pub group_id: String,
    /// Group state as the coordinator reports it, e.g. `Stable`, `PreparingRebalance`,
    /// `Empty` or `Dead`.
    pub state: String,
    /// `consumer` for consumer groups (either protocol), else the classic protocol type.
    pub protocol_type: String,
    /// The classic protocol chosen (the assignor), or the KIP-848 server assignor.
    pub protocol: String,
    /// Classic generation, or KIP-848 group epoch.
    pub generation: i32,
    /// Whether the group uses KIP-848's consumer protocol.
    pub consumer_protocol: bool,
    /// Current members of the group, with their assignments.
    pub members: Vec<MemberDescription>,
    /// For a KIP-1071 streams group (`protocol_type` `streams`): epochs and
    /// every member's tasks.
    pub streams: Option<StreamsGroupDetails>,
}

/// A streams group's epochs and tasks (KIP-1071's StreamsGroupDescribe).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamsGroupDetails {
    /// The epoch of the group's current target assignment.
    pub target_assignment_epoch: i32,
    /// Every member's process, epoch and tasks, in the broker's order.
    pub members: Vec<StreamsMemberDetails>,
}

/// One streams-group member's tasks, as `<subtopology>_<partition>` ids.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamsMemberDetails {
    /// The member id.
    pub member_id: String,
    /// The member's `group.instance.id`, for a static member.
    pub instance_id: Option<String>,
    /// The member epoch (-2: a static member away within its session).
    pub member_epoch: i32,
    /// The instance's process id (shared by its threads).
    pub process_id: String,
    /// The instance's `application.server`, `host:port`.
    pub endpoint: Option<String>,
    /// Active tasks the member runs now.
    pub active_tasks: Vec<String>,
    /// Standby tasks the member keeps current.
    pub standby_tasks: Vec<String>,
    /// Warm-up tasks (KIP-441) the member restores.
    pub warmup_tasks: Vec<String>,
    /// Active tasks the group's target assignment gives the member.
    pub target_active_tasks: Vec<String>,
}

/// The admin client.
pub struct Admin {
    cluster: Arc<Cluster>,
    timeout: Duration,
}

/// A per-resource answer's error code as an error naming `context` and the
/// broker's message; `Ok` when the code is 0.
fn resource_result(
    code: i16,
    message: Option<rill_protocol::kafka_protocol::protocol::StrBytes>,
    context: impl FnOnce() -> String,
) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let msg = message.map(|m| m.to_string()).unwrap_or_default();
    Err(Error::broker(code, format!("{}: {msg}", context())))
}

fn unexpected(api: &str) -> Error {
    Error::Protocol {
        broker: "broker".into(),
        reason: format!("{api} answered with another response type"),
    }
}

impl Admin {
    /// An admin client for the properties in `config` (Kafka's `Admin.create(props)`); it uses
    /// `default.api.timeout.ms` as its operation timeout.
    ///
    /// Fails with [`Error::Config`] when `config` is not a valid admin configuration
    /// (see [`AdminConfig::from_config`]).
    pub fn new(config: &ClientConfig) -> Result<Self> {
        let cfg = AdminConfig::from_config(config)?;
        Ok(Self {
            timeout: cfg.common.default_api_timeout,
            cluster: Cluster::new(cfg.common),
        })
    }

    /// The cluster handle (shared metadata and connections).
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    fn run<T>(
        &self,
        what: &'static str,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        block_on(what, f)?
    }

    /// Creates topics; one outcome per topic.
    pub fn create_topics(&self, topics: &[NewTopic]) -> Result<BTreeMap<String, Result<()>>> {
        self.run("Admin::create_topics", async {
            let conn = self.cluster.any_connection().await?;
            let req = CreateTopicsRequest::default()
                .with_timeout_ms(self.timeout.as_millis() as i32)
                .with_topics(
                    topics
                        .iter()
                        .map(|t| {
                            CreatableTopic::default()
                                .with_name(topic_name(&t.name))
                                .with_num_partitions(t.partitions)
                                .with_replication_factor(t.replication_factor)
                                .with_configs(
                                    t.configs
                                        .iter()
                                        .map(|(k, v)| {
                                            CreatableTopicConfig::default()
                                                .with_name(sb(k))
                                                .with_value(Some(sb(v)))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                );
            let (_, resp) = conn
                .call(ApiKey::CreateTopics, 2, 7, RequestKind::CreateTopics(req))
                .await?;
            let ResponseKind::CreateTopics(resp) = resp else {
                return Err(unexpected("CreateTopics"));
            };
            let mut out = BTreeMap::new();
            for t in resp.topics {
                let name = t.name.0.to_string();
                let r = if t.error_code == 0 {
                    Ok(())
                } else {
                    let msg = t.error_message.map(|m| m.to_string()).unwrap_or_default();
                    Err(Error::broker(
                        t.error_code,
                        format!("create topic {name}: {msg}"),
                    ))
                };
                out.insert(name, r);
            }
            // Leaders appear in metadata shortly after creation; wait for them
            // so the topic is usable when this returns (as kafka-topics does).
            for (name, r) in &out {
                if r.is_ok() {
                    let _ = self.cluster.wait_for_topic(name, false, self.timeout).await;
                }
            }
            Ok(out)
        })
    }

    /// Creates one topic.
    pub fn create_topic(&self, topic: NewTopic) -> Result<()> {
        let name = topic.name.clone();
        self.create_topics(&[topic])?
            .remove(&name)
            .unwrap_or_else(|| {
                Err(Error::IllegalState(format!(
                    "CreateTopics did not answer for {name}"
                )))
            })
    }

    /// Makes sure `topics` exist with their partition counts: creates the
    /// missing ones and accepts one that exists already, created before or
    /// by a racing process (`TOPIC_ALREADY_EXISTS`), when its partition
    /// count matches ([`Error::TopicMismatch`] otherwise). Returns, per
    /// topic, whether this call created it. Check-then-create is not
    /// enough: two processes starting together both see the topic missing
    /// and one of them gets `TOPIC_ALREADY_EXISTS`.
    pub fn ensure_topics(&self, topics: &[NewTopic]) -> Result<BTreeMap<String, bool>> {
        let mut created = BTreeMap::new();
        let mut existing = Vec::new();
        for (name, r) in self.create_topics(topics)? {
            match r {
                Ok(()) => {
                    created.insert(name, true);
                }
                Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => existing.push(name),
                Err(e) => return Err(e),
            }
        }
        for name in existing {
            // The racing creator's topic may not be in this broker's
            // metadata yet (KRaft propagates it asynchronously): wait for
            // it as create_topics waits for its own.
            let t = self.run("Admin::ensure_topics", async {
                self.cluster
                    .wait_for_topic(&name, false, self.timeout)
                    .await
            })?;
            let wanted = topics
                .iter()
                .find(|n| n.name == t.name)
                .map_or(0, |n| n.partitions);
            // -1: the broker's default count, which any count matches.
            if wanted > 0 && t.partitions.len() != wanted as usize {
                return Err(Error::TopicMismatch {
                    topic: t.name,
                    existing: t.partitions.len(),
                    wanted,
                });
            }
            created.insert(t.name, false);
        }
        Ok(created)
    }

    /// Deletes topics by name; one outcome per topic.
    pub fn delete_topics(&self, names: &[&str]) -> Result<BTreeMap<String, Result<()>>> {
        self.run("Admin::delete_topics", async {
            let conn = self.cluster.any_connection().await?;
            let v = conn.version(ApiKey::DeleteTopics, 1, 6)?;
            let mut req =
                DeleteTopicsRequest::default().with_timeout_ms(self.timeout.as_millis() as i32);
            if v >= 6 {
                req = req.with_topics(
                    names
                        .iter()
                        .map(|n| DeleteTopicState::default().with_name(Some(topic_name(n))))
                        .collect(),
                );
            } else {
                req = req.with_topic_names(names.iter().map(|n| topic_name(n)).collect());
            }
            let ResponseKind::DeleteTopics(resp) = conn
                .send(ApiKey::DeleteTopics, v, RequestKind::DeleteTopics(req))
                .await?
            else {
                return Err(unexpected("DeleteTopics"));
            };
            Ok(resp
                .responses
                .into_iter()
                .map(|r| {
                    let name = r.name.map(|n| n.0.to_string()).unwrap_or_default();
                    let out = if r.error_code == 0 {
                        Ok(())
                    } else {
                        Err(Error::broker(r.error_code, format!("delete topic {name}")))
                    };
                    (name, out)
                })
                .collect())
        })
    }

    /// Grows a topic to `total` partitions.
    pub fn create_partitions(&self, topic: &str, total: i32) -> Result<()> {
        self.run("Admin::create_partitions", async {
            let conn = self.cluster.any_connection().await?;
            let req = CreatePartitionsRequest::default()
                .with_timeout_ms(self.timeout.as_millis() as i32)
                .with_topics(vec![CreatePartitionsTopic::default()
                    .with_name(topic_name(topic))
                    .with_count(total)
                    .with_assignments(None)]);
            let (_, resp) = conn
                .call(
                    ApiKey::CreatePartitions,
                    0,
                    3,
                    RequestKind::CreatePartitions(req),
                )
                .await?;
            let ResponseKind::CreatePartitions(resp) = resp else {
                return Err(unexpected("CreatePartitions"));
            };
            for r in resp.results {
                resource_result(r.error_code, r.error_message, || {
                    format!("create partitions for {topic} (to {total})")
                })?;
            }
            // The new partitions reach metadata shortly after; wait for them
            // (bounded) so the caller sees the topic as it asked for it.
            let deadline = std::time::Instant::now() + self.timeout;
            while std::time::Instant::now() < deadline {
                let m = self
                    .cluster
                    .refresh(Some(&[topic.to_string()]), false)
                    .await?;
                let t = m.topic(topic);
                if t.is_some_and(|t| {
                    t.partitions.len() >= total as usize
                        && t.partitions.iter().all(|p| p.leader >= 0)
                }) {
                    break;
                }
                tokio::time::sleep(self.cluster.cfg.retry_backoff).await;
            }
            Ok(())
        })
    }

    /// Brokers, controller and cluster id.
    pub fn describe_cluster(&self) -> Result<ClusterDescription> {
        self.run("Admin::describe_cluster", async {
            let m = self.cluster.refresh(Some(&[]), false).await?;
            Ok(ClusterDescription {
                cluster_id: m.cluster_id.clone(),
                controller_id: m.controller_id,
                brokers: m.brokers.values().cloned().collect(),
            })
        })
    }

    /// The cluster's finalized feature levels (Kafka's `describeFeatures`,
    /// KIP-584), as a broker reports them in ApiVersions: feature name →
    /// finalized maximum level, e.g. `transaction.version` → 2 on a Kafka
    /// 4.x cluster that uses KIP-890's transaction version 2.
    pub fn describe_features(&self) -> Result<BTreeMap<String, i16>> {
        self.run("Admin::describe_features", async {
            let conn = self.cluster.any_connection().await?;
            Ok(conn.finalized_features())
        })
    }

    /// Names of all topics (internal ones excluded).
    pub fn list_topics(&self) -> Result<Vec<String>> {
        self.run("Admin::list_topics", async {
            let m = self.cluster.refresh(None, false).await?;
            Ok(m.topics
                .values()
                .filter(|t| !t.internal)
                .map(|t| t.name.clone())
                .collect())
        })
    }

    /// Partitions, leaders and replicas of topics; an unknown topic is an error naming it.
    pub fn describe_topics(&self, names: &[&str]) -> Result<Vec<TopicMetadata>> {
        self.run("Admin::describe_topics", async {
            let wanted: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let m = self.cluster.refresh(Some(&wanted), false).await?;
            names
                .iter()
                .map(|n| match m.topic(n) {
                    Some(t) => Ok(t.clone()),
                    None => Err(Error::UnknownTopic {
                        topic: n.to_string(),
                        detail: m
                            .topic_errors
                            .get(*n)
                            .map(|c| rill_protocol::error::name(*c))
                            .unwrap_or_else(|| "not in metadata".into()),
                    }),
                })
                .collect()
        })
    }

    /// Groups of every broker.
    pub fn list_groups(&self) -> Result<Vec<GroupListing>> {
        self.run("Admin::list_groups", async {
            let m = self.cluster.refresh(Some(&[]), false).await?;
            let mut out = Vec::new();
            for node in m.brokers.keys() {
                let conn = self.cluster.connection(*node).await?;
                let (v, resp) = conn
                    .call(
                        ApiKey::ListGroups,
                        0,
                        5,
                        RequestKind::ListGroups(ListGroupsRequest::default()),
                    )
                    .await?;
                let ResponseKind::ListGroups(resp) = resp else {
                    return Err(unexpected("ListGroups"));
                };
                if resp.error_code != 0 {
                    return Err(Error::broker(
                        resp.error_code,
                        format!("ListGroups on {}", conn.broker()),
                    ));
                }
                out.extend(resp.groups.into_iter().map(|g| GroupListing {
                    group_id: g.group_id.0.to_string(),
                    protocol_type: g.protocol_type.to_string(),
                    state: if v >= 4 {
                        g.group_state.to_string()
                    } else {
                        String::new()
                    },
                    group_type: if v >= 5 {
                        g.group_type.to_string()
                    } else {
                        String::new()
                    },
                }));
            }
            out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
            Ok(out)
        })
    }

    /// Describes groups, whichever protocol they use.
    pub fn describe_groups(
        &self,
        groups: &[&str],
    ) -> Result<BTreeMap<String, Result<GroupDescription>>> {
        self.run("Admin::describe_groups", async {
            let mut out = BTreeMap::new();
            for g in groups {
                out.insert(g.to_string(), self.describe_one(g).await);
            }
            Ok(out)
        })
    }

    async fn describe_one(&self, group: &str) -> Result<GroupDescription> {
        // KIP-848 groups first (as Kafka's Admin does); a classic group
        // answers GROUP_ID_NOT_FOUND there and is described classically.
        let modern = rpc::with_coordinator(&self.cluster, group, self.timeout, |conn| async move {
            if conn
                .broker_versions(ApiKey::ConsumerGroupDescribe)
                .is_none()
            {
                return Ok(None);
            }
            let req =
                ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(sb(group))]);
            let (_, resp) = conn
                .call(
                    ApiKey::ConsumerGroupDescribe,
                    0,
                    1,
                    RequestKind::ConsumerGroupDescribe(req),
                )
                .await?;
            let ResponseKind::ConsumerGroupDescribe(resp) = resp else {
                return Err(unexpected("ConsumerGroupDescribe"));
            };
            let Some(d) = resp.groups.into_iter().next() else {
                return Ok(None);
            };
            // A classic group answers GROUP_ID_NOT_FOUND; a broker that
            // serves the API but runs no KIP-848 groups (Kafka 3.x, where
            // `group.coordinator.rebalance.protocols` is `classic`) answers
            // UNSUPPORTED_VERSION. Both mean: ask DescribeGroups, as Kafka's
            // Admin does.
            if d.error_code == ErrorCode::GroupIdNotFound.code()
                || d.error_code == ErrorCode::UnsupportedVersion.code()
            {
                return Ok(None);
            }
            if d.error_code != 0 {
                return Err(Error::broker(
                    d.error_code,
                    format!("ConsumerGroupDescribe of {group}"),
                ));
            }
            Ok(Some(GroupDescription {
                streams: None,
                group_id: group.to_string(),
                state: d.group_state.to_string(),
                protocol_type: "consumer".into(),
                protocol: d.assignor_name.to_string(),
                generation: d.group_epoch,
                consumer_protocol: true,
                members: d
                    .members
                    .into_iter()
                    .map(|m| MemberDescription {
                        member_id: m.member_id.to_string(),
                        group_instance_id: m.instance_id.map(|i| i.to_string()),
                        client_id: m.client_id.to_string(),
                        host: m.client_host.to_string(),
                        assignment: m
                            .assignment
                            .topic_partitions
                            .iter()
                            .flat_map(|t| {
                                t.partitions
                                    .iter()
                                    .map(|p| TopicPartition::new(t.topic_name.0.to_string(), *p))
                            })
                            .collect(),
                    })
                    .collect(),
            }))
        })
        .await?;
        if let Some(d) = modern {
            return Ok(d);
        }
        if let Some(d) = self.describe_streams_group(group).await? {
            return Ok(d);
        }
        rpc::with_coordinator(&self.cluster, group, self.timeout, |conn| async move {
            let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(sb(group))]);
            let (_, resp) = conn
                .call(
                    ApiKey::DescribeGroups,
                    0,
                    5,
                    RequestKind::DescribeGroups(req),
                )
                .await?;
            let ResponseKind::DescribeGroups(resp) = resp else {
                return Err(unexpected("DescribeGroups"));
            };
            let Some(d) = resp.groups.into_iter().next() else {
                return Err(unexpected("DescribeGroups (no group)"));
            };
            if d.error_code != 0 {
                return Err(Error::broker(
                    d.error_code,
                    format!("DescribeGroups of {group}"),
                ));
            }
            let consumer = d.protocol_type.as_str() == "consumer";
            Ok(GroupDescription {
                streams: None,
                group_id: group.to_string(),
                state: d.group_state.to_string(),
                protocol_type: d.protocol_type.to_string(),
                protocol: d.protocol_data.to_string(),
                generation: -1,
                consumer_protocol: false,
                members: d
                    .members
                    .into_iter()
                    .map(|m| MemberDescription {
                        member_id: m.member_id.to_string(),
                        group_instance_id: m.group_instance_id.map(|i| i.to_string()),
                        client_id: m.client_id.to_string(),
                        host: m.client_host.to_string(),
                        assignment: if consumer {
                            decode_assignment(&m.member_assignment)
                        } else {
                            Vec::new()
                        },
                    })
                    .collect(),
            })
        })
        .await
    }

    /// A KIP-1071 streams group, or `None` when the group is not one (or
    /// the broker has no streams groups).
    async fn describe_streams_group(&self, group: &str) -> Result<Option<GroupDescription>> {
        use rill_protocol::message::{Api, RequestBody, ResponseBody};
        use rill_protocol::messages::streams_group_describe_response::TaskIds;
        use rill_protocol::messages::StreamsGroupDescribeRequest;
        let d = rpc::with_coordinator(&self.cluster, group, self.timeout, |conn| async move {
            let Ok(v) = conn.version(Api::StreamsGroupDescribe, 0, 1) else {
                return Ok(None);
            };
            let req = StreamsGroupDescribeRequest {
                group_ids: vec![sb(group)],
                ..Default::default()
            };
            let resp = conn
                .send_body(
                    Api::StreamsGroupDescribe,
                    v,
                    RequestBody::StreamsGroupDescribe(req),
                )
                .await?;
            let ResponseBody::StreamsGroupDescribe(resp) = resp else {
                return Err(unexpected("StreamsGroupDescribe"));
            };
            Ok(resp.groups.into_iter().next())
        })
        .await?;
        let Some(d) = d else {
            return Ok(None);
        };
        // Not a streams group (GROUP_ID_NOT_FOUND), or streams groups
        // switched off on the broker (UNSUPPORTED_VERSION).
        if d.error_code == ErrorCode::GroupIdNotFound.code()
            || d.error_code == ErrorCode::UnsupportedVersion.code()
        {
            return Ok(None);
        }
        if d.error_code != 0 {
            return Err(Error::broker(
                d.error_code,
                format!("StreamsGroupDescribe of {group}"),
            ));
        }
        let names = |t: &[TaskIds]| -> Vec<String> {
            t.iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(move |p| format!("{}_{p}", t.subtopology_id))
                })
                .collect()
        };
        // Active tasks read every source and repartition-source topic of
        // their sub-topology at their partition.
        let inputs: BTreeMap<String, Vec<String>> = d
            .topology
            .as_ref()
            .and_then(|t| t.subtopologies.as_ref())
            .map(|subs| {
                subs.iter()
                    .map(|s| {
                        let mut topics: Vec<String> =
                            s.source_topics.iter().map(|t| t.to_string()).collect();
                        topics.extend(
                            s.repartition_source_topics
                                .iter()
                                .map(|t| t.name.to_string()),
                        );
                        (s.subtopology_id.to_string(), topics)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let partitions = |t: &[TaskIds]| -> Vec<TopicPartition> {
            t.iter()
                .flat_map(|t| {
                    let topics = inputs.get(t.subtopology_id.as_str());
                    topics.into_iter().flatten().flat_map(move |topic| {
                        t.partitions
                            .iter()
                            .map(move |p| TopicPartition::new(topic.clone(), *p))
                    })
                })
                .collect()
        };
        let members = d
            .members
            .iter()
            .map(|m| MemberDescription {
                member_id: m.member_id.to_string(),
                group_instance_id: m.instance_id.as_ref().map(|i| i.to_string()),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                assignment: partitions(&m.assignment.active_tasks),
            })
            .collect();
        let details = d
            .members
            .iter()
            .map(|m| StreamsMemberDetails {
                member_id: m.member_id.to_string(),
                instance_id: m.instance_id.as_ref().map(|i| i.to_string()),
                member_epoch: m.member_epoch,
                process_id: m.process_id.to_string(),
                endpoint: m
                    .user_endpoint
                    .as_ref()
                    .map(|e| format!("{}:{}", e.host, e.port)),
                active_tasks: names(&m.assignment.active_tasks),
                standby_tasks: names(&m.assignment.standby_tasks),
                warmup_tasks: names(&m.assignment.warmup_tasks),
                target_active_tasks: names(&m.target_assignment.active_tasks),
            })
            .collect();
        Ok(Some(GroupDescription {
            group_id: group.to_string(),
            state: d.group_state.to_string(),
            protocol_type: "streams".into(),
            protocol: d
                .assignor_name
                .as_ref()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            generation: d.group_epoch,
            consumer_protocol: false,
            members,
            streams: Some(StreamsGroupDetails {
                target_assignment_epoch: d.assignment_epoch,
                members: details,
            }),
        }))
    }

    /// Deletes groups (they must be empty); one outcome per group.
    pub fn delete_groups(&self, groups: &[&str]) -> Result<BTreeMap<String, Result<()>>> {
        self.run("Admin::delete_groups", async {
            let mut out = BTreeMap::new();
            for g in groups {
                let r = rpc::with_coordinator(&self.cluster, g, self.timeout, |conn| async move {
                    let req =
                        DeleteGroupsRequest::default().with_groups_names(vec![GroupId(sb(g))]);
                    let (_, resp) = conn
                        .call(ApiKey::DeleteGroups, 0, 2, RequestKind::DeleteGroups(req))
                        .await?;
                    let ResponseKind::DeleteGroups(resp) = resp else {
                        return Err(unexpected("DeleteGroups"));
                    };
                    match resp.results.first() {
                        Some(r) if r.error_code != 0 => {
                            Err(Error::broker(r.error_code, format!("delete group {g}")))
                        }
                        _ => Ok(()),
                    }
                })
                .await;
                out.insert(g.to_string(), r);
            }
            Ok(out)
        })
    }

    /// A group's committed offsets.
    pub fn list_consumer_group_offsets(
        &self,
        group: &str,
    ) -> Result<BTreeMap<TopicPartition, OffsetAndMetadata>> {
        self.run("Admin::list_consumer_group_offsets", async {
            rpc::fetch_committed(&self.cluster, group, None, &MemberRef::none(), self.timeout).await
        })
    }

    /// Sets a group's offsets (the group must have no active members, as in Kafka).
    pub fn alter_consumer_group_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, Result<()>>> {
        self.run("Admin::alter_consumer_group_offsets", async {
            let offsets: BTreeMap<TopicPartition, OffsetAndMetadata> = offsets
                .iter()
                .map(|(tp, o)| (tp.clone(), OffsetAndMetadata::new(*o)))
                .collect();
            rpc::commit(
                &self.cluster,
                group,
                &MemberRef::none(),
                &offsets,
                self.timeout,
            )
            .await
        })
    }

    /// Deletes a group's committed offsets for partitions no member consumes.
    pub fn delete_consumer_group_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Result<()>>> {
        self.run("Admin::delete_consumer_group_offsets", async {
            rpc::with_coordinator(&self.cluster, group, self.timeout, |conn| async move {
                let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                for tp in partitions {
                    by_topic.entry(&tp.topic).or_default().push(tp.partition);
                }
                let req = OffsetDeleteRequest::default()
                    .with_group_id(GroupId(sb(group)))
                    .with_topics(
                        by_topic
                            .into_iter()
                            .map(|(t, ps)| {
                                OffsetDeleteRequestTopic::default()
                                    .with_name(topic_name(t))
                                    .with_partitions(
                                        ps.into_iter()
                                            .map(|p| {
                                                OffsetDeleteRequestPartition::default()
                                                    .with_partition_index(p)
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    );
                let (_, resp) = conn
                    .call(ApiKey::OffsetDelete, 0, 0, RequestKind::OffsetDelete(req))
                    .await?;
                let ResponseKind::OffsetDelete(resp) = resp else {
                    return Err(unexpected("OffsetDelete"));
                };
                if resp.error_code != 0 {
                    return Err(Error::broker(
                        resp.error_code,
                        format!("delete offsets of group {group}"),
                    ));
                }
                let mut out = BTreeMap::new();
                for t in resp.topics {
                    for p in t.partitions {
                        let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
                        let r = if p.error_code == 0 {
                            Ok(())
                        } else {
                            Err(Error::broker(
                                p.error_code,
                                format!("delete offset of group {group} for {tp}"),
                            ))
                        };
                        out.insert(tp, r);
                    }
                }
                Ok(out)
            })
            .await
        })
    }

    /// The offset each partition's [`OffsetSpec`] resolves to (Kafka's
    /// `Admin.listOffsets`).
    pub fn list_offsets(
        &self,
        wanted: &BTreeMap<TopicPartition, OffsetSpec>,
    ) -> Result<BTreeMap<TopicPartition, ListedOffset>> {
        let wanted: BTreeMap<TopicPartition, i64> = wanted
            .iter()
            .map(|(tp, spec)| (tp.clone(), spec.timestamp()))
            .collect();
        self.run("Admin::list_offsets", async {
            let topics: Vec<String> = wanted.keys().map(|tp| tp.topic.clone()).collect();
            self.cluster.refresh(Some(&topics), false).await?;
            rpc::list_offsets(&self.cluster, false, &wanted, self.timeout).await
        })
    }

    /// Deletes records before the given offsets; the new low watermark per partition.
    pub fn delete_records(
        &self,
        before: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, Result<i64>>> {
        self.run("Admin::delete_records", async {
            let topics: Vec<String> = before.keys().map(|tp| tp.topic.clone()).collect();
            let meta = self.cluster.refresh(Some(&topics), false).await?;
            let mut out = BTreeMap::new();
            let mut by_leader: BTreeMap<i32, Vec<(&TopicPartition, i64)>> = BTreeMap::new();
            for (tp, o) in before {
                match meta.leader(&tp.topic, tp.partition) {
                    Some(l) => by_leader.entry(l).or_default().push((tp, *o)),
                    None => {
                        out.insert(
                            tp.clone(),
                            Err(Error::broker(
                                ErrorCode::UnknownTopicOrPartition.code(),
                                format!("delete records of {tp}"),
                            )),
                        );
                    }
                }
            }
            for (leader, parts) in by_leader {
                let conn = self.cluster.connection(leader).await?;
                let mut topics: BTreeMap<&str, Vec<DeleteRecordsPartition>> = BTreeMap::new();
                for (tp, o) in parts {
                    topics.entry(&tp.topic).or_default().push(
                        DeleteRecordsPartition::default()
                            .with_partition_index(tp.partition)
                            .with_offset(o),
                    );
                }
                let req = DeleteRecordsRequest::default()
                    .with_timeout_ms(self.timeout.as_millis() as i32)
                    .with_topics(
                        topics
                            .into_iter()
                            .map(|(t, ps)| {
                                DeleteRecordsTopic::default()
                                    .with_name(topic_name(t))
                                    .with_partitions(ps)
                            })
                            .collect(),
                    );
                let (_, resp) = conn
                    .call(ApiKey::DeleteRecords, 0, 2, RequestKind::DeleteRecords(req))
                    .await?;
                let ResponseKind::DeleteRecords(resp) = resp else {
                    return Err(unexpected("DeleteRecords"));
                };
                for t in resp.topics {
                    for p in t.partitions {
                        let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
                        let r = if p.error_code == 0 {
                            Ok(p.low_watermark)
                        } else {
                            Err(Error::broker(
                                p.error_code,
                                format!("delete records of {tp}"),
                            ))
                        };
                        out.insert(tp, r);
                    }
                }
            }
            Ok(out)
        })
    }

    /// KIP-345: removes static members from a group by `group.instance.id`
    /// (batch LeaveGroup, v3+), e.g. instances known to be gone for good, so
    /// their partitions are reassigned now rather than after the session
    /// timeout. One outcome per instance id (UNKNOWN_MEMBER_ID for an id the
    /// group does not know).
    pub fn remove_members_from_group(
        &self,
        group: &str,
        instance_ids: &[&str],
    ) -> Result<BTreeMap<String, Result<()>>> {
        let members: Vec<(&str, Option<&str>)> = instance_ids.iter().map(|i| (*i, None)).collect();
        self.remove_static_members(group, &members)
    }

    /// Like [`remove_members_from_group`](Self::remove_members_from_group),
    /// but each instance id may name the member id it is expected to have:
    /// the coordinator then refuses the removal with FENCED_INSTANCE_ID if
    /// the instance has rejoined since (its member id changed), so a
    /// member that came back between a check and the removal is never
    /// removed.
    pub fn remove_static_members(
        &self,
        group: &str,
        members: &[(&str, Option<&str>)],
    ) -> Result<BTreeMap<String, Result<()>>> {
        if members.is_empty() {
            return Ok(BTreeMap::new());
        }
        self.run("Admin::remove_members_from_group", async {
            rpc::with_coordinator(&self.cluster, group, self.timeout, |conn| async move {
                let req = LeaveGroupRequest::default()
                    .with_group_id(GroupId(sb(group)))
                    .with_members(
                        members
                            .iter()
                            .map(|(i, member_id)| {
                                MemberIdentity::default()
                                    .with_member_id(sb(member_id.unwrap_or("")))
                                    .with_group_instance_id(Some(sb(i)))
                                    .with_reason(Some(sb("removed by the admin client (KIP-345)")))
                            })
                            .collect(),
                    );
                let (_, resp) = conn
                    .call(ApiKey::LeaveGroup, 3, 5, RequestKind::LeaveGroup(req))
                    .await?;
                let ResponseKind::LeaveGroup(resp) = resp else {
                    return Err(unexpected("LeaveGroup"));
                };
                if resp.error_code != 0 {
                    return Err(Error::broker(
                        resp.error_code,
                        format!("remove members from group {group}"),
                    ));
                }
                let mut out = BTreeMap::new();
                for m in resp.members {
                    let iid = m
                        .group_instance_id
                        .map(|i| i.to_string())
                        .unwrap_or_default();
                    let r = if m.error_code == 0 {
                        Ok(())
                    } else {
                        Err(Error::broker(
                            m.error_code,
                            format!("remove group.instance.id {iid} from group {group}"),
                        ))
                    };
                    out.insert(iid, r);
                }
                Ok(out)
            })
            .await
        })
    }
}

/// The partitions in a classic consumer-protocol assignment (empty if it
/// does not decode: DescribeGroups shows it for information only).
pub fn decode_assignment(bytes: &Bytes) -> Vec<TopicPartition> {
    let mut b = bytes.clone();
    if b.len() < 2 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([b[0], b[1]]);
    let _ = bytes::Buf::get_i16(&mut b);
    match ConsumerProtocolAssignment::decode(&mut b, version.clamp(0, 3)) {
        Ok(a) => a
            .assigned_partitions
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| TopicPartition::new(t.topic.0.to_string(), *p))
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}
