//! Internal topics (Kafka Streams' `InternalTopicManager`): the
//! repartition and changelog topics a topology needs, created before the
//! stream threads start, with partition counts settled as Kafka settles
//! them, and the co-partitioning a sub-topology's sources need checked.
//!
//! Invariants: an existing internal topic with another partition count is
//! an error naming it (never silently used); changelog topics are
//! compacted; a source topic that does not exist is an error naming it.

use std::collections::{BTreeMap, BTreeSet};

use rill_client::admin::NewTopic;
use rill_client::Admin;

use crate::error::{Result, StreamsError};
use crate::state_manager::changelog_topic;
use crate::streams_config::StreamsConfig;
use crate::topology::{TopicName, Topology};

/// Partition counts of the internal topics (resolved names), settled as
/// Kafka settles them: first each internal topic takes the largest count
/// among its writer's sources (Kafka's `RepartitionTopics`), growing to a
/// fixed point (a foreign-key join's two topics form a cycle); then each
/// sub-topology's internal sources are made co-partitioned with the rest
/// of its sources (Kafka's `CopartitionedTopicsEnforcer`): the count of its
/// user topics if it reads any, else the largest of its internal ones.
/// Sub-topologies reading user topics of different counts are left for
/// the caller to report.
fn internal_topic_counts(
    topology: &Topology,
    app: &str,
    existing: &BTreeMap<String, i32>,
) -> BTreeMap<String, i32> {
    let mut counts: BTreeMap<String, i32> = BTreeMap::new();
    let known = |t: &TopicName, counts: &BTreeMap<String, i32>| match t {
        TopicName::User(_) => existing.get(&t.resolve(app)).copied(),
        TopicName::Internal(_) => counts.get(&t.resolve(app)).copied(),
    };
    // Counts only grow, to at most the largest user topic's: this ends.
    let rounds = 2 + 2 * topology.repartition_topics.len();
    for _ in 0..rounds {
        let mut changed = false;
        for st in topology.subtopologies() {
            let Some(n) = st
                .source_topics
                .iter()
                .filter_map(|t| known(t, &counts))
                .max()
            else {
                continue;
            };
            for t in st
                .sink_topics
                .iter()
                .filter(|t| matches!(t, TopicName::Internal(_)))
            {
                let c = counts.entry(t.resolve(app)).or_insert(0);
                if *c < n {
                    *c = n;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    for st in topology.subtopologies() {
        let of = |user: bool| -> BTreeSet<i32> {
            st.source_topics
                .iter()
                .filter(|t| matches!(t, TopicName::User(_)) == user)
                .filter_map(|t| known(t, &counts))
                .collect()
        };
        let (user, internal) = (of(true), of(false));
        let n = match (user.len(), internal.last()) {
            (1, _) => user.first().copied(),
            (0, Some(&max)) => Some(max),
            _ => None,
        };
        if let Some(n) = n {
            for t in &st.source_topics {
                if matches!(t, TopicName::Internal(_)) {
                    counts.insert(t.resolve(app), n);
                }
            }
        }
    }
    counts
}

/// Creates missing internal topics and validates sources (Kafka's
/// `InternalTopicManager` + co-partitioning checks).
pub(crate) fn prepare_topics(
    config: &StreamsConfig,
    topology: &Topology,
    admin: &Admin,
) -> Result<()> {
    let app = &config.application_id;
    let existing: BTreeMap<String, i32> = {
        let names = admin
            .list_topics()
            .map_err(|e| StreamsError::client("listing topics", e))?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        admin
            .describe_topics(&refs)
            .map_err(|e| StreamsError::client("describing topics", e))?
            .into_iter()
            .map(|t| (t.name.clone(), t.partitions.len() as i32))
            .collect()
    };
    if let Some(dlq) = &config.dead_letter_queue_topic {
        // Kafka Streams does not create it either; sending to a missing
        // topic would block each failed record for max.block.ms instead.
        if !existing.contains_key(dlq) {
            return Err(StreamsError::config(
                "errors.dead.letter.queue.topic.name",
                dlq,
                "names a topic that does not exist; create it first (Kafka Streams does not create dead-letter topics)",
            ));
        }
    }
    let rf = config.replication_factor;
    let mut counts = internal_topic_counts(topology, app, &existing);
    let mut create: Vec<NewTopic> = Vec::new();
    for st in topology.subtopologies() {
        let mut sources: Vec<(String, i32)> = Vec::new();
        for t in &st.source_topics {
            let name = t.resolve(app);
            if let Some(&n) = counts.get(&name).or(existing.get(&name)) {
                sources.push((name, n));
            } else if matches!(t, TopicName::User(_)) {
                return Err(StreamsError::Topology(format!(
                    "source topic {name} of sub-topology {} does not exist; create it first",
                    st.id
                )));
            }
        }
        for (name, &n) in &existing {
            if st
                .source_patterns
                .iter()
                .any(|p| crate::topology::full_match(p, name))
            {
                sources.push((name.clone(), n));
            }
        }
        let distinct: BTreeSet<i32> = sources.iter().map(|(_, n)| *n).collect();
        if distinct.len() > 1 {
            return Err(StreamsError::Topology(format!(
                "sub-topology {} joins topics that are not co-partitioned: {}",
                st.id,
                sources
                    .iter()
                    .map(|(t, n)| format!("{t} ({n} partitions)"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let n = distinct.into_iter().next().unwrap_or(1);
        // Repartition topics this sub-topology writes take its partition count.
        for t in &st.sink_topics {
            if let TopicName::Internal(_) = t {
                let name = t.resolve(app);
                let n = counts.get(&name).copied().unwrap_or(n);
                check_or_create(&name, n, &existing, &mut create, rf, false)?;
                counts.insert(name, n);
            }
        }
        for store in &st.stores {
            if topology.stores[store].logged {
                check_or_create(
                    &changelog_topic(app, store),
                    n,
                    &existing,
                    &mut create,
                    rf,
                    true,
                )?;
            }
        }
    }
    if !create.is_empty() {
        // Another instance may create some of them first; ensure_topics
        // accepts those only when their partition counts match.
        admin
            .ensure_topics(&create)
            .map_err(|e| StreamsError::client("creating internal topics", e))?;
    }
    Ok(())
}

fn check_or_create(
    name: &str,
    partitions: i32,
    existing: &BTreeMap<String, i32>,
    create: &mut Vec<NewTopic>,
    rf: i16,
    compact: bool,
) -> Result<()> {
    match existing.get(name) {
        Some(&n) if n != partitions => Err(StreamsError::Topology(format!(
            "internal topic {name} has {n} partitions but the topology needs {partitions}; delete it or reset the application"
        ))),
        Some(_) => Ok(()),
        None => {
            let mut t = NewTopic::new(name, partitions, rf);
            if compact {
                t = t.config("cleanup.policy", "compact");
            }
            create.push(t);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Consumed, Grouped, Joined, Materialized, Serdes, StreamsBuilder};

    fn counts_of(t: &Topology, existing: &[(&str, i32)]) -> BTreeMap<String, i32> {
        let existing = existing.iter().map(|(t, n)| (t.to_string(), *n)).collect();
        internal_topic_counts(t, "app", &existing)
            .into_iter()
            .map(|(k, v)| (k.trim_start_matches("app-").to_string(), v))
            .collect()
    }

    /// The count of the one topic whose name contains `part`.
    fn count_of_topic(counts: &BTreeMap<String, i32>, part: &str) -> i32 {
        counts
            .iter()
            .find(|(k, _)| k.contains(part))
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{part} in {counts:?}"))
    }

    #[test]
    fn internal_topics_read_beside_user_topics_take_their_partition_count() {
        // A stream re-keyed (raw: 2 partitions) then joined with a table
        // of 4: the repartition topic must have 4, not its writer's 2.
        let s = Serdes::string;
        let b = StreamsBuilder::new();
        let table = b.table_with("table", Consumed::with(s(), s()), Materialized::default());
        b.stream_with(&["raw"], Consumed::with(s(), s()))
            .select_key(|_, v: &String| v.clone())
            .join_with(
                &table,
                |a: &String, b: &String| format!("{a}{b}"),
                Joined::with(s(), s()),
            )
            .to_with("out", crate::Produced::with(s(), s()));
        let t = b.build().unwrap();
        let counts = counts_of(&t, &[("raw", 2), ("table", 4)]);
        assert_eq!(
            counts.values().copied().collect::<Vec<_>>(),
            vec![4],
            "{counts:?}"
        );
    }

    #[test]
    fn a_right_table_two_repartitions_away_keeps_its_upstream_count() {
        // The left table reads a 3-partition topic; the right table is
        // events (6) counted, re-grouped and reduced: both repartition
        // topics and the subscription topic take 6 (as in Kafka), the
        // response topic the left side's 3.
        let s = Serdes::string;
        let b = StreamsBuilder::new();
        let left = b.table_with("left", Consumed::with(s(), s()), Materialized::default());
        let right = b
            .stream_with(&["events"], Consumed::with(s(), s()))
            .group_by_with(
                |_, v: &String| v.clone(),
                Grouped::with(s(), s()).with_name("first"),
            )
            .count(Materialized::as_store("counts"))
            .group_by_with(
                |k: &String, n: &i64| (format!("{}", n % 7), k.clone()),
                Grouped::with(s(), s()).with_name("second"),
            )
            .reduce(
                |a: &String, b: &String| format!("{a}{b}"),
                |a: &String, _| a.clone(),
                Materialized::as_store("reduced").with_value_serde(s()),
            );
        left.join_on_foreign_key(
            &right,
            |_, v: &String| Some(v.clone()),
            |a: &String, b: &String| format!("{a}{b}"),
            Materialized::default().with_value_serde(s()),
        )
        .to_upsert_stream()
        .to_with("out", crate::Produced::with(s(), s()));
        let t = b.build().unwrap();
        let counts = counts_of(&t, &[("left", 3), ("events", 6)]);
        let get = |part: &str| count_of_topic(&counts, part);
        assert_eq!(get("first-repartition"), 6, "{counts:?}");
        assert_eq!(get("second-repartition"), 6, "{counts:?}");
        assert_eq!(get("SUBSCRIPTION-REGISTRATION"), 6, "{counts:?}");
        assert_eq!(get("SUBSCRIPTION-RESPONSE"), 3, "{counts:?}");
    }

    #[test]
    fn a_foreign_key_join_of_an_aggregated_table_settles_every_internal_topic() {
        // orders (3 partitions) re-grouped into a table, joined on a
        // foreign key with customers (2): the re-grouping's topic takes
        // its writer's 3, the response topic the left side's 3, the
        // subscription topic the right side's 2.
        let s = Serdes::string;
        let b = StreamsBuilder::new();
        let customers = b.table_with(
            "customers",
            Consumed::with(s(), s()),
            Materialized::default(),
        );
        b.stream_with(&["orders"], Consumed::with(s(), s()))
            .group_by_with(
                |_, v: &String| v.clone(),
                Grouped::with(s(), s()).with_name("by-order"),
            )
            .reduce(|_, v| v.clone(), Materialized::as_store("latest"))
            .join_on_foreign_key(
                &customers,
                |_, v: &String| Some(v.clone()),
                |a: &String, b: &String| format!("{a}{b}"),
                Materialized::default().with_value_serde(s()),
            )
            .to_upsert_stream()
            .to_with("out", crate::Produced::with(s(), s()));
        let t = b.build().unwrap();
        let counts = counts_of(&t, &[("orders", 3), ("customers", 2)]);
        let get = |part: &str| count_of_topic(&counts, part);
        assert_eq!(counts.len(), 3, "{counts:?}");
        assert_eq!(get("by-order-repartition"), 3);
        assert_eq!(get("SUBSCRIPTION-RESPONSE"), 3);
        assert_eq!(get("SUBSCRIPTION-REGISTRATION"), 2);
    }
}
