//! `group.protocol=streams` (KIP-1071): what a stream thread tells the
//! broker about the application, and how the broker's answer becomes the
//! runtime's view of the group.
//!
//! - [`group_spec`] describes the topology as Kafka Streams 4.4 does
//!   (`StreamThread.initBrokerTopology`): sub-topology ids are the decimal
//!   sub-topology numbers; source topics are the user topics; repartition
//!   topics are listed as the sub-topology's repartition sources (partition
//!   count 0: the broker derives it) and sinks; changelogs carry partition
//!   count 0 (the broker refuses any other); a sub-topology reading several
//!   topics asks for them co-partitioned. Lists are sorted, so every
//!   instance sends byte-identical topologies (the broker compares them).
//! - [`assignment_info`] turns the member's tasks and the broker's
//!   per-endpoint partitions into the same [`AssignmentInfo`] the classic
//!   assignor writes, so standby tasks, metadata and interactive queries
//!   work the same on both protocols. The broker reports instances by
//!   `application.server` only: instances without one are not listed, and
//!   another instance's process id is its endpoint.
//!
//! Invariant: a topology the streams protocol cannot carry (a pattern
//! source; KIP-1071 has no regex yet) is an error naming the sub-topology
//! before the thread joins, never a silent difference.

use std::collections::{BTreeMap, BTreeSet};

use rill_client::consumer::streams::{
    CopartitionGroup, KeyValue, StrBytes, StreamsGroupSpec, StreamsGroupView, Subtopology,
    TopicInfo, Topology as WireTopology,
};
use rill_client::TopicPartition;

use crate::assignor::{AssignmentInfo, MemberInfo};
use crate::error::{Result, StreamsError};
use crate::state_manager::changelog_topic;
use crate::task_id::TaskId;
use crate::thread_state::ThreadContext;
use crate::topology::{TopicName, Topology};

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn config(pairs: &[(&str, &str)]) -> Vec<KeyValue> {
    pairs
        .iter()
        .map(|(k, v)| KeyValue {
            key: sb(k),
            value: sb(v),
            ..Default::default()
        })
        .collect()
}

/// Names sorted and deduplicated (every instance sends identical lists).
fn sorted(names: impl Iterator<Item = String>) -> Vec<String> {
    names.collect::<BTreeSet<_>>().into_iter().collect()
}

/// The topology as KIP-1071's StreamsGroupHeartbeat carries it.
pub(crate) fn wire_topology(topology: &Topology, app: &str, rf: i16) -> Result<WireTopology> {
    let mut subs = Vec::new();
    for st in topology.subtopologies() {
        if let Some(p) = st.source_patterns.first() {
            return Err(StreamsError::Topology(format!(
                "sub-topology {} reads the topic pattern {p}, which group.protocol=streams cannot carry (KIP-1071 has no pattern subscriptions yet); use group.protocol=classic",
                st.id
            )));
        }
        let sources = sorted(
            st.source_topics
                .iter()
                .filter(|t| matches!(t, TopicName::User(_)))
                .map(|t| t.resolve(app)),
        );
        let repartition_sources = sorted(
            st.source_topics
                .iter()
                .filter(|t| matches!(t, TopicName::Internal(_)))
                .map(|t| t.resolve(app)),
        );
        let repartition_sinks = sorted(
            st.sink_topics
                .iter()
                .filter(|t| matches!(t, TopicName::Internal(_)))
                .map(|t| t.resolve(app)),
        );
        let changelogs = sorted(
            st.stores
                .iter()
                .filter(|s| topology.stores.get(*s).is_some_and(|d| d.logged))
                .map(|s| changelog_topic(app, s)),
        );
        // Rill co-partitions every input of a sub-topology (as its
        // InternalTopicManager checks): one group when there are several.
        let copartition_groups = if sources.len() + repartition_sources.len() > 1 {
            vec![CopartitionGroup {
                source_topics: (0..sources.len() as i16).collect(),
                repartition_source_topics: (0..repartition_sources.len() as i16).collect(),
                ..Default::default()
            }]
        } else {
            Vec::new()
        };
        subs.push(Subtopology {
            subtopology_id: sb(&st.id.to_string()),
            source_topics: sources.iter().map(|t| sb(t)).collect(),
            repartition_sink_topics: repartition_sinks.iter().map(|t| sb(t)).collect(),
            repartition_source_topics: repartition_sources
                .iter()
                .map(|t| TopicInfo {
                    name: sb(t),
                    partitions: 0,
                    replication_factor: rf,
                    topic_configs: config(&[("cleanup.policy", "delete")]),
                    ..Default::default()
                })
                .collect(),
            state_changelog_topics: changelogs
                .iter()
                .map(|t| TopicInfo {
                    name: sb(t),
                    partitions: 0,
                    replication_factor: rf,
                    topic_configs: config(&[("cleanup.policy", "compact")]),
                    ..Default::default()
                })
                .collect(),
            copartition_groups,
            ..Default::default()
        });
    }
    // Kafka's client sorts sub-topologies by id (as strings).
    subs.sort_by(|a, b| a.subtopology_id.cmp(&b.subtopology_id));
    Ok(WireTopology {
        epoch: 0,
        subtopologies: subs,
        ..Default::default()
    })
}

/// Changelog offset sums of the tasks whose checkpoints are in the state
/// directory (what KIP-1071's TaskOffsets carry), by (sub-topology, partition).
fn task_offsets(ctx: &ThreadContext) -> BTreeMap<(String, i32), i64> {
    let dir = ctx.config.state_dir.join(&ctx.config.application_id);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for e in entries.flatten() {
        let Some(id) = e
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<TaskId>().ok())
        else {
            continue;
        };
        if let Ok((cp, None)) = rill_state::state_dir::read_checkpoint(&e.path()) {
            if !cp.offsets.is_empty() {
                let sum = cp.offsets.values().sum();
                out.insert((id.subtopology.to_string(), id.partition), sum);
            }
        }
    }
    out
}

/// What the thread's member tells the streams group when it joins.
pub(crate) fn group_spec(ctx: &ThreadContext) -> Result<StreamsGroupSpec> {
    let topology = wire_topology(
        &ctx.topology,
        &ctx.config.application_id,
        ctx.config.replication_factor,
    )?;
    let endpoint = match &ctx.endpoint {
        None => None,
        Some(e) => {
            let (host, port) = e
                .rsplit_once(':')
                .and_then(|(h, p)| p.parse::<u16>().ok().map(|p| (h.to_string(), p)))
                .ok_or_else(|| {
                    StreamsError::config("application.server", e, "expected host:port")
                })?;
            Some((host, port))
        }
    };
    Ok(StreamsGroupSpec {
        topology,
        process_id: ctx.process_id.clone(),
        endpoint,
        client_tags: ctx.config.client_tags.clone(),
        task_offsets: task_offsets(ctx),
        task_end_offsets: BTreeMap::new(),
    })
}

fn task_names(tasks: &BTreeMap<String, Vec<i32>>) -> Vec<String> {
    tasks
        .iter()
        .flat_map(|(s, ps)| ps.iter().map(move |p| format!("{s}_{p}")))
        .collect()
}

/// The runtime's view of the group from the member's streams-group view:
/// this thread's own entry (with its instance id, which standby lookup
/// uses) and one entry per other instance endpoint the broker reported.
pub(crate) fn assignment_info(
    ctx: &ThreadContext,
    view: &StreamsGroupView,
    partitions: &[TopicPartition],
) -> AssignmentInfo {
    let app = &ctx.config.application_id;
    let mut standby = view.owned.standby.clone();
    for (s, ps) in &view.owned.warmup {
        standby.entry(s.clone()).or_default().extend(ps);
    }
    let mut members = vec![MemberInfo {
        member_id: view.member_id.clone(),
        instance_id: ctx.instance_id(),
        process_id: ctx.process_id.clone(),
        endpoint: ctx.endpoint.clone(),
        thread_name: ctx.name.clone(),
        tasks: task_names(&view.owned.active),
        standby_tasks: task_names(&standby),
        partitions: partitions
            .iter()
            .map(|tp| (tp.topic.clone(), tp.partition))
            .collect(),
    }];
    let task_of = |tp: &TopicPartition| {
        ctx.topology
            .subtopology_of_topic(app, &tp.topic)
            .map(|s| TaskId::new(s, tp.partition).to_string())
    };
    for e in view.endpoints.iter().flatten() {
        if ctx.endpoint.as_deref() == Some(e.endpoint.as_str()) {
            continue;
        }
        let tasks = |v: &[TopicPartition]| -> Vec<String> {
            v.iter()
                .filter_map(task_of)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        members.push(MemberInfo {
            member_id: String::new(),
            instance_id: None,
            process_id: e.endpoint.clone(),
            endpoint: Some(e.endpoint.clone()),
            thread_name: String::new(),
            tasks: tasks(&e.active),
            standby_tasks: tasks(&e.standby),
            partitions: e
                .active
                .iter()
                .map(|tp| (tp.topic.clone(), tp.partition))
                .collect(),
        });
    }
    AssignmentInfo {
        version: crate::assignor::VERSION,
        generation: view.member_epoch,
        members,
        errors: Vec::new(),
        shutdown_requested: view
            .statuses
            .iter()
            .any(|(c, _)| *c == rill_client::consumer::streams::status::SHUTDOWN_APPLICATION),
        next_probing_rebalance_ms: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Consumed, Grouped, Materialized, Produced, Serdes, StreamsBuilder};

    #[test]
    fn a_repartitioning_count_is_described_as_kafka_streams_does() {
        let b = StreamsBuilder::new();
        b.stream_with(
            &["lines"],
            Consumed::with(Serdes::string(), Serdes::string()),
        )
        .group_by_with(
            |_k: &String, v: &String| v.clone(),
            Grouped::with(Serdes::string(), Serdes::string()),
        )
        .count(Materialized::as_store("counts"))
        .to_upsert_stream()
        .to_with("out", Produced::with(Serdes::string(), Serdes::i64()));
        let t = b.build().unwrap();
        let w = wire_topology(&t, "app", -1).unwrap();
        assert_eq!(w.subtopologies.len(), 2);
        let s0 = &w.subtopologies[0];
        assert_eq!(s0.subtopology_id.as_str(), "0");
        assert_eq!(s0.source_topics, vec![sb("lines")]);
        assert_eq!(s0.repartition_sink_topics.len(), 1);
        assert!(s0.state_changelog_topics.is_empty());
        let s1 = &w.subtopologies[1];
        assert!(s1.source_topics.is_empty());
        assert_eq!(
            s1.repartition_source_topics[0].name,
            s0.repartition_sink_topics[0]
        );
        assert_eq!(s1.repartition_source_topics[0].partitions, 0);
        assert_eq!(
            s1.state_changelog_topics[0].name.as_str(),
            "app-counts-changelog"
        );
        assert_eq!(s1.state_changelog_topics[0].partitions, 0);
        assert!(s1.copartition_groups.is_empty());
    }

    #[test]
    fn pattern_sources_are_refused_with_the_subtopology_named() {
        let b = StreamsBuilder::new();
        b.stream_pattern_with("in-.*", Consumed::with(Serdes::bytes(), Serdes::bytes()))
            .to_with("out", Produced::with(Serdes::bytes(), Serdes::bytes()));
        let t = b.build().unwrap();
        let e = wire_topology(&t, "app", -1).unwrap_err().to_string();
        assert!(e.contains("sub-topology 0") && e.contains("in-.*"), "{e}");
    }
}
