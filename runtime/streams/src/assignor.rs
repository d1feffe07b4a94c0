//! The streams partition assignor (Kafka's `StreamsPartitionAssignor`, run
//! by the group leader inside the classic protocol).
//!
//! It assigns tasks, not partitions: every partition of a task goes to the
//! same member, so co-partitioned topics meet in one task. Balanced (no
//! member gets more than ⌈tasks / members⌉) and sticky: a task stays with the
//! member that owned it (members report their tasks in the subscription's
//! user data), else goes to a member whose process has its state on disk,
//! else to the least loaded member. Members are ordered by
//! `group.instance.id`, so with static members the outcome does not depend
//! on member ids that change across restarts (KIP-345).
//!
//! The assignment's user data carries the whole group's view (every
//! member's instance id, process id, `application.server` endpoint, tasks
//! and partitions), so any instance can answer metadata questions for all.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rill_client::consumer::assignor::{Assignment, PartitionAssignor, Subscription};
use rill_client::TopicPartition;
use serde::{Deserialize, Serialize};

use crate::task_id::TaskId;
use crate::topology::{full_match, Topology};

/// Name of this assignor in the group protocol (Kafka's `StreamsPartitionAssignor` calls itself
/// "stream"); every member of the application must offer it.
pub const PROTOCOL_NAME: &str = "rill-streams";
const VERSION: u32 = 1;

/// What a member tells the leader (subscription user data, JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SubscriptionInfo {
    pub version: u32,
    pub process_id: String,
    pub endpoint: Option<String>,
    /// The stream thread behind this member (for metadata).
    #[serde(default)]
    pub thread_name: String,
    /// Tasks this member runs now.
    pub prev_tasks: Vec<String>,
    /// Tasks whose state this member's process has on disk.
    pub state_tasks: Vec<String>,
    /// An instance's uncaught-error handler chose shutdown-application (KIP-671).
    #[serde(default)]
    pub shutdown_requested: bool,
    /// Bumped when this member asks for a rebalance only to refresh the
    /// group's metadata (its endpoint moved): a follower that rejoins with
    /// unchanged subscription bytes gets the old assignment back without a
    /// rebalance, in Kafka's classic protocol.
    #[serde(default)]
    pub metadata_refresh: u32,
}

/// One member in the leader's answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct MemberInfo {
    /// Member id the group coordinator gave this consumer at JoinGroup (a dynamic member gets a new
    /// one when it rejoins).
    pub member_id: String,
    /// The member's `group.instance.id` (`<group.instance.id>-thread-<n>` for stream thread `n`);
    /// `None` for a dynamic member.
    pub instance_id: Option<String>,
    /// Process id of the instance the member belongs to (a UUID kept in `state.dir`); members with
    /// the same id share one state directory.
    pub process_id: String,
    /// The instance's `application.server` (`host:port`) for interactive queries; `None` if it has
    /// none.
    pub endpoint: Option<String>,
    /// Name of the stream thread behind the member, `<client.id>-StreamThread-<n>`; empty if its
    /// subscription did not say.
    #[serde(default)]
    pub thread_name: String,
    /// Ids (`<subtopology>_<partition>`) of the tasks assigned to the member in this generation.
    pub tasks: Vec<String>,
    /// Input partitions of those tasks, as `(topic, partition)`.
    pub partitions: Vec<(String, i32)>,
}

/// What the leader tells every member (assignment user data, JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AssignmentInfo {
    /// Version of this user-data format (currently 1).
    pub version: u32,
    /// Group generation of the assignment: the leader writes -1 and each member fills in the
    /// generation it received it in.
    pub generation: i32,
    /// Every member of the group with its tasks, static members first (by `group.instance.id`),
    /// then dynamic ones by member id.
    pub members: Vec<MemberInfo>,
    /// Problems the leader found (missing source topics, partition mismatches).
    pub errors: Vec<String>,
    /// Some member asked every instance to shut down (KIP-671's SHUTDOWN_REQUESTED).
    #[serde(default)]
    pub shutdown_requested: bool,
}

/// This member's side of the exchange, shared with its stream thread.
#[derive(Debug, Default)]
pub struct LocalInfo {
    pub subscription: SubscriptionInfo,
    /// The last assignment received.
    pub assignment: Option<AssignmentInfo>,
    pub generation: i32,
}

pub(crate) struct StreamsAssignor {
    pub topology: Arc<Topology>,
    pub application_id: String,
    pub local: Arc<Mutex<LocalInfo>>,
}

/// The tasks of each sub-topology and the partitions behind each task.
pub(crate) fn tasks_for(
    topology: &Topology,
    application_id: &str,
    partitions_per_topic: &BTreeMap<String, i32>,
    errors: &mut Vec<String>,
) -> BTreeMap<TaskId, Vec<TopicPartition>> {
    let mut out = BTreeMap::new();
    for st in topology.subtopologies() {
        let mut topics: Vec<(String, i32)> = Vec::new();
        for t in &st.source_topics {
            let name = t.resolve(application_id);
            match partitions_per_topic.get(&name) {
                Some(&n) => topics.push((name, n)),
                None => errors.push(format!(
                    "source topic {name} of sub-topology {} does not exist",
                    st.id
                )),
            }
        }
        for (name, &n) in partitions_per_topic {
            if st.source_patterns.iter().any(|p| full_match(p, name)) {
                topics.push((name.clone(), n));
            }
        }
        let counts: BTreeSet<i32> = topics.iter().map(|(_, n)| *n).collect();
        if counts.len() > 1 {
            errors.push(format!(
                "sub-topology {} reads topics that are not co-partitioned: {topics:?}",
                st.id
            ));
        }
        let max = counts.into_iter().max().unwrap_or(0);
        for p in 0..max {
            let parts = topics
                .iter()
                .filter(|(_, n)| p < *n)
                .map(|(t, _)| TopicPartition::new(t.clone(), p))
                .collect();
            out.insert(TaskId::new(st.id, p), parts);
        }
    }
    out
}

fn parse_tasks(v: &[String]) -> BTreeSet<TaskId> {
    v.iter().filter_map(|t| t.parse().ok()).collect()
}

/// The balanced, sticky task placement; `members` in assignment order.
pub(crate) fn place_tasks(
    tasks: &[TaskId],
    members: &[(String, BTreeSet<TaskId>, BTreeSet<TaskId>)],
) -> BTreeMap<String, Vec<TaskId>> {
    let mut out: BTreeMap<String, Vec<TaskId>> = members
        .iter()
        .map(|(m, _, _)| (m.clone(), Vec::new()))
        .collect();
    if members.is_empty() {
        return out;
    }
    // Balanced overall and per sub-topology (as Kafka balances each
    // sub-topology's tasks), so stateful and stateless tasks both spread.
    let cap = tasks.len().div_ceil(members.len());
    let mut per_sub: BTreeMap<u32, usize> = BTreeMap::new();
    for t in tasks {
        *per_sub.entry(t.subtopology).or_default() += 1;
    }
    let sub_cap: BTreeMap<u32, usize> = per_sub
        .iter()
        .map(|(&st, &n)| (st, n.div_ceil(members.len())))
        .collect();
    let in_sub = |v: &[TaskId], st: u32| v.iter().filter(|t| t.subtopology == st).count();
    let give = |out: &mut BTreeMap<String, Vec<TaskId>>, m: &str, t: TaskId| -> bool {
        let v = out.get_mut(m).expect("member listed");
        if v.len() < cap && in_sub(v, t.subtopology) < sub_cap[&t.subtopology] {
            v.push(t);
            true
        } else {
            false
        }
    };
    let mut left: Vec<TaskId> = Vec::new();
    for &t in tasks {
        let prev = members.iter().find(|(_, prev, _)| prev.contains(&t));
        if !prev.is_some_and(|(m, _, _)| give(&mut out, m, t)) {
            left.push(t);
        }
    }
    let mut rest = Vec::new();
    for t in left {
        let holder = members.iter().find(|(_, _, state)| state.contains(&t));
        if !holder.is_some_and(|(m, _, _)| give(&mut out, m, t)) {
            rest.push(t);
        }
    }
    for t in rest {
        let (m, _, _) = members
            .iter()
            .min_by_key(|(m, _, _)| (in_sub(&out[m], t.subtopology), out[m].len()))
            .expect("members is not empty");
        out.get_mut(m).expect("member listed").push(t);
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

impl PartitionAssignor for StreamsAssignor {
    fn name(&self) -> &str {
        PROTOCOL_NAME
    }

    fn subscription_user_data(&self, _topics: &BTreeSet<String>) -> Option<Bytes> {
        let local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let mut info = local.subscription.clone();
        info.version = VERSION;
        serde_json::to_vec(&info).ok().map(Bytes::from)
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        subscriptions: &BTreeMap<String, Subscription>,
    ) -> rill_client::Result<BTreeMap<String, Assignment>> {
        let mut errors = Vec::new();
        let tasks = tasks_for(
            &self.topology,
            &self.application_id,
            partitions_per_topic,
            &mut errors,
        );
        let mut subs: Vec<&Subscription> = subscriptions.values().collect();
        subs.sort_by(|a, b| {
            (
                a.group_instance_id.is_none(),
                &a.group_instance_id,
                &a.member_id,
            )
                .cmp(&(
                    b.group_instance_id.is_none(),
                    &b.group_instance_id,
                    &b.member_id,
                ))
        });
        let infos: BTreeMap<&str, SubscriptionInfo> = subs
            .iter()
            .map(|s| {
                let info = s
                    .user_data
                    .as_ref()
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or_default();
                (s.member_id.as_str(), info)
            })
            .collect();
        // Stickiness keyed by group.instance.id: a static member that comes
        // back after a restart reports no tasks of its own, but the last
        // assignment this member saw still says what its instance id ran.
        let previous: BTreeMap<String, Vec<String>> = self
            .local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .assignment
            .as_ref()
            .map(|a| {
                a.members
                    .iter()
                    .filter_map(|m| m.instance_id.clone().map(|id| (id, m.tasks.clone())))
                    .collect()
            })
            .unwrap_or_default();
        let members: Vec<(String, BTreeSet<TaskId>, BTreeSet<TaskId>)> = subs
            .iter()
            .map(|s| {
                let i = &infos[s.member_id.as_str()];
                let mut prev = parse_tasks(&i.prev_tasks);
                if prev.is_empty() {
                    if let Some(t) = s.group_instance_id.as_ref().and_then(|id| previous.get(id)) {
                        prev = parse_tasks(t);
                    }
                }
                (s.member_id.clone(), prev, parse_tasks(&i.state_tasks))
            })
            .collect();
        let ids: Vec<TaskId> = tasks.keys().copied().collect();
        let placed = place_tasks(&ids, &members);
        for e in &errors {
            tracing::error!(application.id = %self.application_id, "assignment: {e}");
        }
        let shutdown_requested = infos.values().any(|i| i.shutdown_requested);
        if shutdown_requested {
            tracing::error!(application.id = %self.application_id, "a member requested shutdown of the whole application");
        }
        let mut info = AssignmentInfo {
            version: VERSION,
            generation: -1,
            members: Vec::new(),
            errors,
            shutdown_requested,
        };
        for s in &subs {
            let mine = &placed[&s.member_id];
            let sub = &infos[s.member_id.as_str()];
            info.members.push(MemberInfo {
                member_id: s.member_id.clone(),
                instance_id: s.group_instance_id.clone(),
                process_id: sub.process_id.clone(),
                endpoint: sub.endpoint.clone(),
                thread_name: sub.thread_name.clone(),
                tasks: mine.iter().map(|t| t.to_string()).collect(),
                partitions: mine
                    .iter()
                    .flat_map(|t| tasks[t].iter().map(|tp| (tp.topic.clone(), tp.partition)))
                    .collect(),
            });
        }
        let data = Bytes::from(serde_json::to_vec(&info).map_err(|e| {
            rill_client::Error::IllegalState(format!("assignment does not encode: {e}"))
        })?);
        Ok(subs
            .iter()
            .map(|s| {
                let partitions = placed[&s.member_id]
                    .iter()
                    .flat_map(|t| tasks[t].iter().cloned())
                    .collect();
                (
                    s.member_id.clone(),
                    Assignment {
                        partitions,
                        user_data: Some(data.clone()),
                    },
                )
            })
            .collect())
    }

    fn on_assignment(&self, assignment: &Assignment, generation: i32) {
        let info = assignment
            .user_data
            .as_ref()
            .and_then(|b| serde_json::from_slice::<AssignmentInfo>(b).ok())
            .map(|mut i| {
                i.generation = generation;
                i
            });
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        local.generation = generation;
        local.assignment = info;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u32, p: i32) -> TaskId {
        TaskId::new(s, p)
    }

    fn stateless_topology() -> Arc<Topology> {
        use crate::{Consumed, Produced, Serdes, StreamsBuilder};
        let b = StreamsBuilder::new();
        b.stream(&["in"], Consumed::with(Serdes::bytes(), Serdes::bytes()))
            .to("out", Produced::with(Serdes::bytes(), Serdes::bytes()));
        Arc::new(b.build().unwrap())
    }

    fn sub(member: &str, instance: &str) -> Subscription {
        let info = SubscriptionInfo {
            version: VERSION,
            process_id: format!("p-{instance}"),
            ..Default::default()
        };
        Subscription {
            member_id: member.into(),
            group_instance_id: Some(instance.into()),
            topics: vec!["in".into()],
            user_data: Some(Bytes::from(serde_json::to_vec(&info).unwrap())),
            ..Default::default()
        }
    }

    #[test]
    fn sticky_by_instance_id_when_members_come_back_without_tasks() {
        let assignor = StreamsAssignor {
            topology: stateless_topology(),
            application_id: "app".into(),
            local: Arc::default(),
        };
        let parts = BTreeMap::from([("in".to_string(), 4)]);
        // "b" sorts after "a", so a fresh group gives "a" tasks 0_0 and 0_1;
        // the last assignment says the opposite, and it wins.
        let mut history = AssignmentInfo::default();
        for (member, instance, tasks) in [("m1", "a", ["0_2", "0_3"]), ("m2", "b", ["0_0", "0_1"])]
        {
            history.members.push(MemberInfo {
                member_id: member.into(),
                instance_id: Some(instance.into()),
                tasks: tasks.map(String::from).into(),
                ..Default::default()
            });
        }
        assignor.local.lock().unwrap().assignment = Some(history);
        // Both restarted: new member ids, no tasks of their own.
        let subs = BTreeMap::from([
            ("n1".to_string(), sub("n1", "a")),
            ("n2".to_string(), sub("n2", "b")),
        ]);
        let out = assignor.assign(&parts, &subs).unwrap();
        let parts_of =
            |m: &str| -> Vec<i32> { out[m].partitions.iter().map(|tp| tp.partition).collect() };
        assert_eq!(parts_of("n1"), vec![2, 3]);
        assert_eq!(parts_of("n2"), vec![0, 1]);
        // Without history, instance ids order a fresh assignment.
        assignor.local.lock().unwrap().assignment = None;
        let out = assignor.assign(&parts, &subs).unwrap();
        assert_eq!(out["n1"].partitions.len(), 2);
        assert_eq!(out["n1"].partitions[0].partition, 0);
    }

    #[test]
    fn each_subtopology_spreads_over_the_members() {
        // Two sub-topologies × 4 partitions; the two old members ran all 8.
        let all: Vec<TaskId> = (0..2).flat_map(|s| (0..4).map(move |p| t(s, p))).collect();
        let t1: BTreeSet<_> = [t(0, 0), t(0, 2), t(1, 0), t(1, 2)].into();
        let t2: BTreeSet<_> = [t(0, 1), t(0, 3), t(1, 1), t(1, 3)].into();
        let none = BTreeSet::new;
        let placed = place_tasks(
            &all,
            &[
                ("a1".into(), t1, none()),
                ("a2".into(), t2, none()),
                ("b1".into(), none(), none()),
                ("b2".into(), none(), none()),
            ],
        );
        for (m, v) in &placed {
            assert_eq!(v.len(), 2, "{m}: {v:?}");
            assert_eq!(
                v.iter().filter(|t| t.subtopology == 1).count(),
                1,
                "{m}: {v:?}"
            );
        }
        assert_eq!(placed["a1"], vec![t(0, 0), t(1, 0)]);
        assert_eq!(placed["a2"], vec![t(0, 1), t(1, 1)]);
    }

    #[test]
    fn balanced_and_sticky() {
        let tasks: Vec<TaskId> = (0..6).map(|p| t(0, p)).collect();
        let none = BTreeSet::new;
        // Fresh group: 3 members get 2 each.
        let placed = place_tasks(
            &tasks,
            &[
                ("a".into(), none(), none()),
                ("b".into(), none(), none()),
                ("c".into(), none(), none()),
            ],
        );
        assert!(placed.values().all(|v| v.len() == 2), "{placed:?}");
        // Previous owners keep their tasks; a newcomer takes from the overloaded.
        let prev_a: BTreeSet<_> = [t(0, 0), t(0, 1), t(0, 2)].into();
        let prev_b: BTreeSet<_> = [t(0, 3), t(0, 4), t(0, 5)].into();
        let placed = place_tasks(
            &tasks,
            &[
                ("a".into(), prev_a, none()),
                ("b".into(), prev_b, none()),
                ("c".into(), none(), none()),
            ],
        );
        assert_eq!(placed["a"], vec![t(0, 0), t(0, 1)]);
        assert_eq!(placed["b"], vec![t(0, 3), t(0, 4)]);
        assert_eq!(placed["c"], vec![t(0, 2), t(0, 5)]);
        // Local state attracts a task when nobody owned it.
        let state_c: BTreeSet<_> = [t(0, 5)].into();
        let placed = place_tasks(
            &[t(0, 5), t(0, 0)],
            &[("a".into(), none(), none()), ("c".into(), none(), state_c)],
        );
        assert_eq!(placed["c"], vec![t(0, 5)]);
    }
}
