//! The streams partition assignor (Kafka's `StreamsPartitionAssignor`, run
//! by the group leader inside the classic protocol).
//!
//! It assigns tasks, not partitions: every partition of a task goes to the
//! same member, so co-partitioned topics meet in one task. Tasks go to
//! instances (the members sharing a process id) and then to their threads:
//! balanced by thread count and sticky (a task stays where it ran, else
//! goes where its state is least behind, else to the least loaded), with
//! KIP-441's high availability on top: standby replicas on other instances
//! (`num.standby.replicas`, rack-aware by client tags, KIP-708), and a
//! stateful task that would move to an instance not yet caught up stays
//! where its state is while a warm-up replica catches up, until a probing
//! rebalance ([`assign_tasks`]). Members are ordered by
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
/// The user-data version this member speaks: 2 decodes a compressed
/// assignment (1: JSON only). The leader compresses only when every
/// member's subscription says 2 or more, so a group mid-way through a
/// rolling upgrade from version 1 keeps working.
pub(crate) const VERSION: u32 = 2;

/// The first version whose members decode a compressed assignment.
const COMPRESSED_SINCE: u32 = 2;

/// The assignment's user data: the group's whole view (every member's
/// endpoint, tasks and partitions) goes to every member, so it grows with
/// members × members. As JSON, 100 members' assignments overflowed the
/// record the coordinator stores for the group (Apache Kafka's 1 MiB
/// `max.message.bytes` of `__consumer_offsets`: SyncGroup answered
/// UNKNOWN_SERVER_ERROR); deflated, the repeated topic names, ids and
/// keys shrink it several times over. JSON starts with `{`, a zlib
/// stream never does (its first byte is 0x78 for the default window), so
/// [`decode_assignment`] reads both.
fn encode_assignment(info: &AssignmentInfo, compress: bool) -> serde_json::Result<Bytes> {
    let json = serde_json::to_vec(info)?;
    if !compress {
        return Ok(Bytes::from(json));
    }
    use std::io::Write;
    let mut z = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(json.len() / 4),
        flate2::Compression::default(),
    );
    z.write_all(&json).map_err(serde_json::Error::io)?;
    Ok(Bytes::from(z.finish().map_err(serde_json::Error::io)?))
}

/// The assignment's user data, JSON or deflated JSON; `None` if it is
/// neither (a newer format this member does not know).
fn decode_assignment(data: &[u8]) -> Option<AssignmentInfo> {
    if data.first() == Some(&b'{') {
        return serde_json::from_slice(data).ok();
    }
    serde_json::from_reader(flate2::read::ZlibDecoder::new(data)).ok()
}

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
    /// Standby (and warm-up) tasks this member runs now, so they stay put.
    #[serde(default)]
    pub standby_tasks: Vec<String>,
    /// KIP-441 task lags: for every task whose state this member's process
    /// has (running it as active, as a standby, or only on disk), how many
    /// changelog records its stores are behind the changelogs' ends (0:
    /// running as active). Kafka's members send offset sums and the leader
    /// reads the end offsets; Rill's members subtract themselves, because
    /// the assignor runs inside the consumer's join, on the client's
    /// runtime, where it must not block on a request of its own.
    #[serde(default)]
    pub task_lags: BTreeMap<String, i64>,
    /// The changelog end-offset sums this member knows, per task (its
    /// active tasks' own positions, its standbys' fetched ends, listed ends
    /// of tasks on disk): the leader takes the highest report as a task's
    /// end, so an instance without the task's state is `end` behind (KIP-441
    /// counts a missing store as offset sum 0) and, for a small store, may
    /// already count as caught up.
    #[serde(default)]
    pub task_ends: BTreeMap<String, i64>,
    /// `client.tag.*` (KIP-708).
    #[serde(default)]
    pub client_tags: BTreeMap<String, String>,
    /// Bumped when this member asks for a probing rebalance (KIP-441): a
    /// known member that rejoins with changed subscription bytes makes the
    /// leader assign again.
    #[serde(default)]
    pub probing_rebalance: u32,
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
    /// Ids of the standby tasks (including warm-up replicas) the member keeps up to date.
    #[serde(default)]
    pub standby_tasks: Vec<String>,
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
    /// Wall-clock time (ms since the epoch) of the next probing rebalance,
    /// when warm-up replicas are running (KIP-441); the first member listed
    /// asks for it.
    #[serde(default)]
    pub next_probing_rebalance_ms: Option<i64>,
}

/// This member's side of the exchange, shared with its stream thread.
#[derive(Debug, Default)]
pub struct LocalInfo {
    pub subscription: SubscriptionInfo,
    /// The last assignment received.
    pub assignment: Option<AssignmentInfo>,
    pub generation: i32,
    /// An assignment said the application shuts down (KIP-671). Sticky: the
    /// requester leaves at once, and the rebalance that follows may hand out
    /// a new assignment before the thread looked at this one.
    pub shutdown_seen: bool,
}

pub(crate) struct StreamsAssignor {
    pub topology: Arc<Topology>,
    pub application_id: String,
    pub local: Arc<Mutex<LocalInfo>>,
    pub ha: HaConfig,
    /// `probing.rebalance.interval.ms`.
    pub probing_interval_ms: i64,
}

impl StreamsAssignor {
    /// Tasks of sub-topologies with a logged store: the ones standbys and
    /// warm-ups are for.
    fn stateful(&self, tasks: &BTreeMap<TaskId, Vec<TopicPartition>>) -> BTreeSet<TaskId> {
        let logged: BTreeSet<u32> = self
            .topology
            .subtopologies()
            .iter()
            .filter(|st| {
                st.stores
                    .iter()
                    .any(|s| self.topology.stores.get(s).is_some_and(|d| d.logged))
            })
            .map(|st| st.id)
            .collect();
        tasks
            .keys()
            .filter(|t| logged.contains(&t.subtopology))
            .copied()
            .collect()
    }
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

/// The high-availability settings the leader assigns with (KIP-441, KIP-708).
#[derive(Debug, Clone, Default)]
pub(crate) struct HaConfig {
    /// `num.standby.replicas`.
    pub standbys: u32,
    /// `acceptable.recovery.lag`.
    pub acceptable_lag: i64,
    /// `max.warmup.replicas`.
    pub max_warmups: u32,
    /// `rack.aware.assignment.tags`.
    pub rack_tags: Vec<String>,
}

/// One member as the task placement sees it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Member {
    pub id: String,
    /// The instance (process id) the member's thread belongs to; members of
    /// one process share its state directory.
    pub process: String,
    pub prev_active: BTreeSet<TaskId>,
    pub prev_standby: BTreeSet<TaskId>,
    /// Changelog records the process is behind on each task it has state
    /// for (0 for a task it runs as active).
    pub lags: BTreeMap<TaskId, i64>,
    /// Changelog end-offset sums the member reported.
    pub ends: BTreeMap<TaskId, i64>,
    pub tags: BTreeMap<String, String>,
}

/// Where the tasks go.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Placement {
    pub active: BTreeMap<String, Vec<TaskId>>,
    /// Standby and warm-up replicas per member.
    pub standby: BTreeMap<String, Vec<TaskId>>,
    /// Warm-up replicas among the standbys: a probing rebalance should follow.
    pub warmups: usize,
    /// Standby replicas that found no instance to run on.
    pub unplaced_standbys: usize,
}

/// An instance: the members of one process.
struct Client {
    members: Vec<usize>,
    prev_active: BTreeSet<TaskId>,
    prev_standby: BTreeSet<TaskId>,
    lags: BTreeMap<TaskId, i64>,
    tags: BTreeMap<String, String>,
}

fn clients_of(members: &[Member]) -> Vec<Client> {
    let mut out: Vec<Client> = Vec::new();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        let key = if m.process.is_empty() {
            &m.id
        } else {
            &m.process
        };
        let c = *index.entry(key).or_insert_with(|| {
            out.push(Client {
                members: Vec::new(),
                prev_active: BTreeSet::new(),
                prev_standby: BTreeSet::new(),
                lags: BTreeMap::new(),
                tags: m.tags.clone(),
            });
            out.len() - 1
        });
        let c = &mut out[c];
        c.members.push(i);
        c.prev_active.extend(&m.prev_active);
        c.prev_standby.extend(&m.prev_standby);
        for (&t, &lag) in &m.lags {
            let e = c.lags.entry(t).or_insert(lag);
            *e = (*e).min(lag);
        }
        for &t in &m.prev_active {
            c.lags.insert(t, 0);
        }
    }
    out
}

/// KIP-441's high-availability placement, at the level of instances and
/// then of their threads:
///
/// 1. Actives, balanced by thread count (no instance above its share of
///    all tasks, nor of each sub-topology's) and sticky: a task stays on
///    the instance that ran it, else goes to the instance with the least
///    lag on it, else to the least loaded. Stateful tasks are placed first;
///    stateless ones then fill what is left, so they even out the load.
/// 2. A stateful task placed on an instance that is not caught up
///    (further behind than `acceptable.recovery.lag`) while another one
///    is stays with the caught-up one (its previous owner first), and the
///    intended instance gets a warm-up replica (at most
///    `max.warmup.replicas` in all); the probing rebalance moves it once
///    warm.
///    An instance left above its share then hands tasks on to instances
///    with room that are caught up on them.
/// 3. `num.standby.replicas` standbys per stateful task, each on a
///    different instance than the active and each other, preferring
///    instances whose `rack.aware.assignment.tags` values differ from
///    those already holding the task (KIP-708), then the previous standby
///    (or any state on disk), then the fewest standbys per thread.
/// 4. Within an instance, each thread keeps what it ran when its share
///    allows, of the instance's tasks and of each sub-topology's; the rest
///    go to its least loaded threads.
pub(crate) fn assign_tasks(
    tasks: &[TaskId],
    stateful: &BTreeSet<TaskId>,
    members: &[Member],
    ha: &HaConfig,
) -> Placement {
    let mut out = Placement {
        active: members.iter().map(|m| (m.id.clone(), Vec::new())).collect(),
        standby: members.iter().map(|m| (m.id.clone(), Vec::new())).collect(),
        ..Default::default()
    };
    if members.is_empty() {
        return out;
    }
    let clients = clients_of(members);
    let mut end_of: BTreeMap<TaskId, i64> = BTreeMap::new();
    for m in members {
        for (&t, &e) in &m.ends {
            let x = end_of.entry(t).or_insert(e);
            *x = (*x).max(e);
        }
    }
    // How far an instance is behind on a task: its reported lag, else the
    // whole changelog (no state at all), when some member knows its end.
    let lag_of = |c: usize, t: &TaskId| -> Option<i64> {
        clients[c]
            .lags
            .get(t)
            .copied()
            .or_else(|| end_of.get(t).copied())
    };
    let total = members.len();
    let threads = |c: usize| clients[c].members.len();
    let mut per_sub: BTreeMap<u32, usize> = BTreeMap::new();
    for t in tasks {
        *per_sub.entry(t.subtopology).or_default() += 1;
    }
    // Each instance's share, in proportion to its threads; the remainder
    // goes to the instances that ran the most tasks (fewest moves).
    let mut cap: Vec<usize> = (0..clients.len())
        .map(|c| tasks.len() * threads(c) / total)
        .collect();
    let mut by_prev: Vec<usize> = (0..clients.len()).collect();
    by_prev.sort_by_key(|&c| (std::cmp::Reverse(clients[c].prev_active.len()), c));
    let mut remainder = tasks.len() - cap.iter().sum::<usize>();
    for &c in by_prev.iter().cycle().take(clients.len() * 2) {
        if remainder == 0 {
            break;
        }
        cap[c] += 1;
        remainder -= 1;
    }
    let sub_cap = |c: usize, st: u32| (per_sub[&st] * threads(c)).div_ceil(total);
    let mut active: Vec<Vec<TaskId>> = vec![Vec::new(); clients.len()];
    let in_sub = |v: &[TaskId], st: u32| v.iter().filter(|t| t.subtopology == st).count();
    let fits = |active: &[Vec<TaskId>], c: usize, t: TaskId| {
        active[c].len() < cap[c] && in_sub(&active[c], t.subtopology) < sub_cap(c, t.subtopology)
    };
    let least_loaded = |active: &[Vec<TaskId>], t: TaskId| {
        (0..clients.len())
            .min_by_key(|&c| {
                (
                    in_sub(&active[c], t.subtopology) * total / threads(c),
                    active[c].len() * total / threads(c),
                    c,
                )
            })
            .expect("clients is not empty")
    };
    let (stateful_tasks, stateless_tasks): (Vec<TaskId>, Vec<TaskId>) =
        tasks.iter().partition(|t| stateful.contains(t));
    for group in [&stateful_tasks, &stateless_tasks] {
        let mut left = Vec::new();
        for &t in group {
            match (0..clients.len()).find(|&c| clients[c].prev_active.contains(&t)) {
                Some(c) if fits(&active, c, t) => active[c].push(t),
                _ => left.push(t),
            }
        }
        for t in left {
            let mut holders: Vec<usize> = (0..clients.len())
                .filter(|&c| clients[c].lags.contains_key(&t))
                .collect();
            holders.sort_by_key(|&c| (clients[c].lags[&t], c));
            match holders.into_iter().find(|&c| fits(&active, c, t)) {
                Some(c) => active[c].push(t),
                None => {
                    let c = least_loaded(&active, t);
                    active[c].push(t);
                }
            }
        }
    }
    // Tasks stay where their state is while a warm-up catches up.
    let caught_up = |c: usize, t: &TaskId| lag_of(c, t).is_some_and(|lag| lag <= ha.acceptable_lag);
    // (task, the instance it was meant for) for tasks kept with their state.
    let mut kept: Vec<(TaskId, usize)> = Vec::new();
    for &t in &stateful_tasks {
        let Some(d) = (0..clients.len()).find(|&c| active[c].contains(&t)) else {
            continue;
        };
        if caught_up(d, &t) {
            continue;
        }
        let source = (0..clients.len())
            .filter(|&c| caught_up(c, &t))
            .min_by_key(|&c| (!clients[c].prev_active.contains(&t), lag_of(c, &t), c));
        if let Some(s) = source {
            active[d].retain(|x| *x != t);
            active[s].push(t);
            kept.push((t, d));
        }
    }
    // Keeping tasks with their state can leave an instance above its
    // share: hand tasks on to instances with room that are caught up on
    // them (or take any stateless task).
    loop {
        let mut moved = false;
        for s in 0..clients.len() {
            while active[s].len() > cap[s] {
                let next = active[s].iter().copied().find_map(|x| {
                    (0..clients.len())
                        .find(|&u| {
                            u != s
                                && active[u].len() < cap[u]
                                && (!stateful.contains(&x) || caught_up(u, &x))
                        })
                        .map(|u| (x, u))
                });
                let Some((x, u)) = next else { break };
                active[s].retain(|y| *y != x);
                active[u].push(x);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    // Warm-ups where a kept task should go and its sub-topology still has
    // room there (the hand-back above may have filled the instance's total
    // with stateless tasks; the stateful share is what the warm-up is for).
    let mut warm: Vec<BTreeSet<TaskId>> = vec![BTreeSet::new(); clients.len()];
    for (t, d) in kept {
        let st = t.subtopology;
        let used = in_sub(&active[d], st) + warm[d].iter().filter(|w| w.subtopology == st).count();
        if out.warmups < ha.max_warmups as usize && used < sub_cap(d, st) && !active[d].contains(&t)
        {
            warm[d].insert(t);
            out.warmups += 1;
        }
    }
    // Standbys on other instances, rack-aware.
    let mut standby: Vec<BTreeSet<TaskId>> = warm;
    let mut standby_load: Vec<usize> = standby.iter().map(BTreeSet::len).collect();
    for &t in &stateful_tasks {
        let Some(a) = (0..clients.len()).find(|&c| active[c].contains(&t)) else {
            continue;
        };
        let mut holding: Vec<usize> = vec![a];
        holding.extend((0..clients.len()).filter(|&c| standby[c].contains(&t)));
        for _ in 0..ha.standbys {
            let same_tags = |c: usize| {
                ha.rack_tags
                    .iter()
                    .filter(|tag| {
                        let v = clients[c].tags.get(*tag);
                        v.is_some() && holding.iter().any(|&h| clients[h].tags.get(*tag) == v)
                    })
                    .count()
            };
            let pick = (0..clients.len())
                .filter(|c| !holding.contains(c))
                .min_by_key(|&c| {
                    (
                        same_tags(c),
                        !clients[c].prev_standby.contains(&t),
                        clients[c].lags.get(&t).copied().unwrap_or(i64::MAX),
                        standby_load[c] * total / threads(c),
                        c,
                    )
                });
            match pick {
                Some(c) => {
                    standby[c].insert(t);
                    standby_load[c] += 1;
                    holding.push(c);
                }
                None => out.unplaced_standbys += 1,
            }
        }
    }
    // Threads within each instance: a thread keeps what it ran up to its
    // share of the instance's tasks and of each sub-topology's (a thread
    // that ran every task alone keeps half of each sub-topology, not all
    // of the first one).
    for (c, client) in clients.iter().enumerate() {
        let ms = &client.members;
        active[c].sort();
        let share = active[c].len().div_ceil(ms.len());
        let sub_share = |st: u32| in_sub(&active[c], st).div_ceil(ms.len());
        let mut mine: BTreeMap<usize, Vec<TaskId>> = ms.iter().map(|&m| (m, Vec::new())).collect();
        let mut left = Vec::new();
        for &t in &active[c] {
            match ms.iter().find(|&&m| members[m].prev_active.contains(&t)) {
                Some(m)
                    if mine[m].len() < share
                        && in_sub(&mine[m], t.subtopology) < sub_share(t.subtopology) =>
                {
                    mine.get_mut(m).expect("listed").push(t)
                }
                _ => left.push(t),
            }
        }
        for t in left {
            let m = *ms
                .iter()
                .min_by_key(|&&m| (in_sub(&mine[&m], t.subtopology), mine[&m].len()))
                .expect("an instance has a member");
            mine.get_mut(&m).expect("listed").push(t);
        }
        let mut spare: BTreeMap<usize, Vec<TaskId>> = ms.iter().map(|&m| (m, Vec::new())).collect();
        for &t in &standby[c] {
            let sticky = ms.iter().find(|&&m| {
                members[m].prev_standby.contains(&t) || members[m].prev_active.contains(&t)
            });
            let m = match sticky {
                Some(&m) => m,
                None => *ms
                    .iter()
                    .min_by_key(|&&m| (spare[&m].len(), mine[&m].len()))
                    .expect("an instance has a member"),
            };
            spare.get_mut(&m).expect("listed").push(t);
        }
        for (m, mut v) in mine {
            v.sort();
            out.active.insert(members[m].id.clone(), v);
        }
        for (m, mut v) in spare {
            v.sort();
            out.standby.insert(members[m].id.clone(), v);
        }
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
        let previous: BTreeMap<String, (Vec<String>, Vec<String>)> = self
            .local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .assignment
            .as_ref()
            .map(|a| {
                a.members
                    .iter()
                    .filter_map(|m| {
                        m.instance_id
                            .clone()
                            .map(|id| (id, (m.tasks.clone(), m.standby_tasks.clone())))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let members: Vec<Member> = subs
            .iter()
            .map(|s| {
                let i = &infos[s.member_id.as_str()];
                let mut prev_active = parse_tasks(&i.prev_tasks);
                let mut prev_standby = parse_tasks(&i.standby_tasks);
                if prev_active.is_empty() && prev_standby.is_empty() {
                    if let Some((a, sb)) =
                        s.group_instance_id.as_ref().and_then(|id| previous.get(id))
                    {
                        prev_active = parse_tasks(a);
                        prev_standby = parse_tasks(sb);
                    }
                }
                let parse = |m: &BTreeMap<String, i64>| -> BTreeMap<TaskId, i64> {
                    m.iter()
                        .filter_map(|(t, &v)| t.parse().ok().map(|t| (t, v)))
                        .collect()
                };
                let mut lags = parse(&i.task_lags);
                // A member too old to report lags still has its state on disk.
                for t in parse_tasks(&i.state_tasks) {
                    lags.entry(t).or_insert(i64::MAX);
                }
                Member {
                    id: s.member_id.clone(),
                    process: i.process_id.clone(),
                    prev_active,
                    prev_standby,
                    lags,
                    ends: parse(&i.task_ends),
                    tags: i.client_tags.clone(),
                }
            })
            .collect();
        let ids: Vec<TaskId> = tasks.keys().copied().collect();
        let stateful = self.stateful(&tasks);
        let placed = assign_tasks(&ids, &stateful, &members, &self.ha);
        if placed.unplaced_standbys > 0 {
            tracing::warn!(
                application.id = %self.application_id,
                "num.standby.replicas={} but {} standby replicas found no instance other than their active's to run on",
                self.ha.standbys,
                placed.unplaced_standbys
            );
        }
        if placed.warmups > 0 {
            tracing::info!(
                application.id = %self.application_id,
                warmups = placed.warmups,
                "tasks stay where their state is while warm-up replicas catch up; a probing rebalance follows in {} ms",
                self.probing_interval_ms
            );
        }
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
            next_probing_rebalance_ms: (placed.warmups > 0)
                .then(|| crate::timestamp::now_ms() + self.probing_interval_ms),
        };
        for s in &subs {
            let mine = &placed.active[&s.member_id];
            let sub = &infos[s.member_id.as_str()];
            info.members.push(MemberInfo {
                member_id: s.member_id.clone(),
                instance_id: s.group_instance_id.clone(),
                process_id: sub.process_id.clone(),
                endpoint: sub.endpoint.clone(),
                thread_name: sub.thread_name.clone(),
                tasks: mine.iter().map(|t| t.to_string()).collect(),
                standby_tasks: placed.standby[&s.member_id]
                    .iter()
                    .map(|t| t.to_string())
                    .collect(),
                partitions: mine
                    .iter()
                    .flat_map(|t| tasks[t].iter().map(|tp| (tp.topic.clone(), tp.partition)))
                    .collect(),
            });
        }
        // Compressed only if every member reads it (an old member's or an
        // undecodable subscription says version 1 or 0).
        let compress = infos.values().all(|i| i.version >= COMPRESSED_SINCE);
        let data = encode_assignment(&info, compress).map_err(|e| {
            rill_client::Error::IllegalState(format!("assignment does not encode: {e}"))
        })?;
        Ok(subs
            .iter()
            .map(|s| {
                let partitions = placed.active[&s.member_id]
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
            .and_then(|b| decode_assignment(b))
            .map(|mut i| {
                i.generation = generation;
                i
            });
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        local.generation = generation;
        local.shutdown_seen |= info.as_ref().is_some_and(|i| i.shutdown_requested);
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
        b.stream_with(&["in"], Consumed::with(Serdes::bytes(), Serdes::bytes()))
            .to_with("out", Produced::with(Serdes::bytes(), Serdes::bytes()));
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

    fn assignor() -> StreamsAssignor {
        StreamsAssignor {
            topology: stateless_topology(),
            application_id: "app".into(),
            local: Arc::default(),
            ha: HaConfig::default(),
            probing_interval_ms: 600_000,
        }
    }

    fn member(id: &str, process: &str) -> Member {
        Member {
            id: id.into(),
            process: process.into(),
            ..Default::default()
        }
    }

    fn ha(standbys: u32) -> HaConfig {
        HaConfig {
            standbys,
            acceptable_lag: 100,
            max_warmups: 2,
            rack_tags: Vec::new(),
        }
    }

    #[test]
    fn a_shutdown_request_outlives_the_next_assignment() {
        // The requester leaves as soon as it saw the request answered; the
        // rebalance that follows must not hide the request from a member
        // whose thread had not looked yet (KIP-671).
        let assignor = assignor();
        let with = |shutdown| Assignment {
            partitions: Vec::new(),
            user_data: Some(Bytes::from(
                serde_json::to_vec(&AssignmentInfo {
                    shutdown_requested: shutdown,
                    ..Default::default()
                })
                .unwrap(),
            )),
        };
        assignor.on_assignment(&with(false), 1);
        assert!(!assignor.local.lock().unwrap().shutdown_seen);
        assignor.on_assignment(&with(true), 2);
        assignor.on_assignment(&with(false), 3);
        let local = assignor.local.lock().unwrap();
        assert!(local.shutdown_seen);
        assert_eq!(local.generation, 3);
    }

    #[test]
    fn the_assignment_is_deflated_only_when_every_member_reads_it() {
        let assignor = assignor();
        let parts = BTreeMap::from([("in".to_string(), 200)]);
        // 100 static members as 50 instances of two threads would be.
        let mut subs: BTreeMap<String, Subscription> = (0..100)
            .map(|i| {
                let m = format!("app-i{:02}-thread-{}-{i:032x}", i / 2, i % 2 + 1);
                let s = sub(&m, &format!("app-i{:02}-thread-{}", i / 2, i % 2 + 1));
                (m, s)
            })
            .collect();
        let out = assignor.assign(&parts, &subs).unwrap();
        let data = out.values().next().unwrap().user_data.clone().unwrap();
        assert_ne!(data.first(), Some(&b'{'), "deflated");
        let plain = encode_assignment(&decode_assignment(&data).unwrap(), false).unwrap();
        assert!(
            data.len() * 4 < plain.len(),
            "{} deflated bytes vs {} as JSON",
            data.len(),
            plain.len()
        );
        // A member that reads it sees the whole group.
        assignor.on_assignment(out.values().next().unwrap(), 7);
        let seen = assignor.local.lock().unwrap().assignment.clone().unwrap();
        assert_eq!((seen.members.len(), seen.generation), (100, 7));
        // One member still on version 1 (a rolling upgrade): JSON for all.
        let old = subs.keys().nth(3).unwrap().clone();
        let info = SubscriptionInfo {
            version: 1,
            process_id: "p-old".into(),
            ..Default::default()
        };
        subs.get_mut(&old).unwrap().user_data =
            Some(Bytes::from(serde_json::to_vec(&info).unwrap()));
        let out = assignor.assign(&parts, &subs).unwrap();
        let data = out[&old].user_data.clone().unwrap();
        assert_eq!(data.first(), Some(&b'{'));
        assert_eq!(
            serde_json::from_slice::<AssignmentInfo>(&data)
                .unwrap()
                .members
                .len(),
            100
        );
        // Neither JSON nor deflate: no assignment info, no panic.
        assert!(decode_assignment(b"\x00\x01garbage").is_none());
    }

    #[test]
    fn sticky_by_instance_id_when_members_come_back_without_tasks() {
        let assignor = assignor();
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
        let mut a1 = member("a1", "a1");
        a1.prev_active = [t(0, 0), t(0, 2), t(1, 0), t(1, 2)].into();
        let mut a2 = member("a2", "a2");
        a2.prev_active = [t(0, 1), t(0, 3), t(1, 1), t(1, 3)].into();
        let members = [a1, a2, member("b1", "b1"), member("b2", "b2")];
        let placed = assign_tasks(&all, &BTreeSet::new(), &members, &ha(0)).active;
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
        let none = BTreeSet::new();
        // Fresh group: 3 members get 2 each.
        let fresh = [member("a", "a"), member("b", "b"), member("c", "c")];
        let placed = assign_tasks(&tasks, &none, &fresh, &ha(0)).active;
        assert!(placed.values().all(|v| v.len() == 2), "{placed:?}");
        // Previous owners keep their tasks; a newcomer takes from the overloaded.
        let mut a = member("a", "a");
        a.prev_active = [t(0, 0), t(0, 1), t(0, 2)].into();
        let mut b = member("b", "b");
        b.prev_active = [t(0, 3), t(0, 4), t(0, 5)].into();
        let placed = assign_tasks(&tasks, &none, &[a, b, member("c", "c")], &ha(0)).active;
        assert_eq!(placed["a"], vec![t(0, 0), t(0, 1)]);
        assert_eq!(placed["b"], vec![t(0, 3), t(0, 4)]);
        assert_eq!(placed["c"], vec![t(0, 2), t(0, 5)]);
        // Local state attracts a task when nobody owned it.
        let mut c = member("c", "c");
        c.lags.insert(t(0, 5), 3);
        let placed = assign_tasks(&[t(0, 5), t(0, 0)], &none, &[member("a", "a"), c], &ha(0));
        assert_eq!(placed.active["c"], vec![t(0, 5)]);
    }

    /// One thread of an instance ran every task alone (it joined first);
    /// with its second thread in, each thread gets half of each
    /// sub-topology, and the first keeps what it ran within that.
    #[test]
    fn threads_of_an_instance_share_each_subtopology() {
        let all: Vec<TaskId> = (0..2).flat_map(|s| (0..10).map(move |p| t(s, p))).collect();
        let stateful: BTreeSet<TaskId> = (0..10).map(|p| t(1, p)).collect();
        let mut first = member("a-1", "a");
        first.prev_active = all.iter().copied().collect();
        let members = [first, member("a-2", "a")];
        let placed = assign_tasks(&all, &stateful, &members, &ha(0)).active;
        for (m, v) in &placed {
            assert_eq!(v.len(), 10, "{m}: {v:?}");
            for st in 0..2 {
                assert_eq!(
                    v.iter().filter(|t| t.subtopology == st).count(),
                    5,
                    "{m}, sub-topology {st}: {v:?}"
                );
            }
        }
        // What the first thread keeps, it ran: it gives up none it could keep.
        assert!(placed["a-1"]
            .iter()
            .all(|t| members[0].prev_active.contains(t)));
    }

    /// Two threads per instance: a fourth instance joining three gets its
    /// share (balance is per instance, by thread count, not per member).
    #[test]
    fn a_new_instance_gets_its_share() {
        let tasks: Vec<TaskId> = (0..12).map(|p| t(0, p)).collect();
        let mut members = Vec::new();
        for (i, inst) in ["a", "b", "c"].iter().enumerate() {
            for th in 0..2 {
                let mut m = member(&format!("{inst}{th}"), inst);
                m.prev_active = (0..2).map(|k| t(0, (i * 4 + th * 2 + k) as i32)).collect();
                members.push(m);
            }
        }
        members.push(member("d0", "d"));
        members.push(member("d1", "d"));
        let placed = assign_tasks(&tasks, &BTreeSet::new(), &members, &ha(0)).active;
        for (m, v) in &placed {
            assert!(!v.is_empty() && v.len() <= 2, "{m}: {v:?} in {placed:?}");
        }
        assert_eq!(placed["d0"].len() + placed["d1"].len(), 3, "{placed:?}");
    }

    /// Every stateful task gets its standbys on other instances, never on
    /// the active's; and they stay where they were.
    #[test]
    fn standbys_go_to_other_instances_and_stay() {
        let tasks: Vec<TaskId> = (0..6).map(|p| t(0, p)).collect();
        let stateful: BTreeSet<TaskId> = tasks.iter().copied().collect();
        let members = [
            member("a0", "a"),
            member("a1", "a"),
            member("b0", "b"),
            member("b1", "b"),
            member("c0", "c"),
            member("c1", "c"),
        ];
        let process = |m: &str| m[..1].to_string();
        let p = assign_tasks(&tasks, &stateful, &members, &ha(1));
        assert_eq!(p.unplaced_standbys, 0);
        let holder = |map: &BTreeMap<String, Vec<TaskId>>, task: TaskId| -> Vec<String> {
            map.iter()
                .filter(|(_, v)| v.contains(&task))
                .map(|(m, _)| m.clone())
                .collect()
        };
        for &task in &tasks {
            let a = holder(&p.active, task);
            let s = holder(&p.standby, task);
            assert_eq!((a.len(), s.len()), (1, 1), "{task}: {p:?}");
            assert_ne!(process(&a[0]), process(&s[0]), "{task}: {p:?}");
        }
        let per_instance = |x: &str| {
            p.standby
                .iter()
                .filter(|(m, _)| process(m) == x)
                .map(|(_, v)| v.len())
                .sum::<usize>()
        };
        assert_eq!(
            (per_instance("a"), per_instance("b"), per_instance("c")),
            (2, 2, 2)
        );
        // The same group again, reporting what it runs: nothing moves.
        let again: Vec<Member> = members
            .iter()
            .map(|m| {
                let mut m = m.clone();
                m.prev_active = p.active[&m.id].iter().copied().collect();
                m.prev_standby = p.standby[&m.id].iter().copied().collect();
                m.lags = m.prev_standby.iter().map(|&t| (t, 5)).collect();
                m
            })
            .collect();
        let q = assign_tasks(&tasks, &stateful, &again, &ha(1));
        assert_eq!(q, p);
        // Only one instance: the standbys have nowhere to go, and say so.
        let alone = assign_tasks(&tasks, &stateful, &members[..2], &ha(1));
        assert_eq!(alone.unplaced_standbys, 6);
        assert!(alone.standby.values().all(Vec::is_empty));
    }

    /// KIP-441: an instance that dies leaves its tasks to those holding
    /// their standbys; a new instance without state gets warm-ups, not
    /// tasks, until it has caught up.
    #[test]
    fn failover_to_standbys_and_warmups_for_newcomers() {
        let tasks: Vec<TaskId> = (0..4).map(|p| t(0, p)).collect();
        let stateful: BTreeSet<TaskId> = tasks.iter().copied().collect();
        // a ran 0 and 1 (standbys on b), b ran 2 and 3 (standbys on c).
        let mut b = member("b", "b");
        b.prev_active = [t(0, 2), t(0, 3)].into();
        b.prev_standby = [t(0, 0), t(0, 1)].into();
        b.lags = [(t(0, 0), 7), (t(0, 1), 9)].into();
        let mut c = member("c", "c");
        c.prev_standby = [t(0, 2), t(0, 3)].into();
        c.lags = [(t(0, 2), 1), (t(0, 3), 1)].into();
        // a is gone: its tasks go to b, which is caught up on them, and c
        // (balanced) would get two of b's — but it is caught up on 2 and 3.
        let p = assign_tasks(&tasks, &stateful, &[b.clone(), c.clone()], &ha(1));
        let all_active: Vec<TaskId> = p.active.values().flatten().copied().collect();
        assert_eq!(all_active.len(), 4, "{p:?}");
        assert_eq!(p.active["b"], vec![t(0, 0), t(0, 1)], "{p:?}");
        assert_eq!(p.active["c"], vec![t(0, 2), t(0, 3)], "{p:?}");
        assert_eq!(p.warmups, 0);
        // A new instance d without state: balance wants to give it a task,
        // but d is not caught up, so the task stays and d warms up.
        let mut b2 = member("b", "b");
        b2.prev_active = [t(0, 0), t(0, 1)].into();
        let mut c2 = member("c", "c");
        c2.prev_active = [t(0, 2), t(0, 3)].into();
        let d = member("d", "d");
        let p = assign_tasks(&tasks, &stateful, &[b2.clone(), c2.clone(), d], &ha(0));
        assert!(p.active["d"].is_empty(), "{p:?}");
        assert_eq!(p.warmups, 1, "{p:?}");
        assert_eq!(p.standby["d"].len(), 1, "{p:?}");
        let warming = p.standby["d"][0];
        // The probing rebalance: d is within acceptable.recovery.lag now.
        let mut d = member("d", "d");
        d.prev_standby = [warming].into();
        d.lags = [(warming, 40)].into();
        let q = assign_tasks(&tasks, &stateful, &[b2, c2, d], &ha(0));
        assert_eq!(q.active["d"], vec![warming], "{q:?}");
        assert_eq!(q.warmups, 0);
    }

    /// KIP-441 counts an instance without a task's state as the whole
    /// changelog behind: a small store is within `acceptable.recovery.lag`
    /// anywhere, so a newcomer gets its share at once, without warm-ups.
    #[test]
    fn small_stores_move_at_once() {
        let tasks: Vec<TaskId> = (0..4).map(|p| t(0, p)).collect();
        let stateful: BTreeSet<TaskId> = tasks.iter().copied().collect();
        let mut a = member("a", "a");
        a.prev_active = stateful.clone();
        a.ends = tasks.iter().map(|&t| (t, 40)).collect();
        let p = assign_tasks(&tasks, &stateful, &[a.clone(), member("b", "b")], &ha(0));
        assert_eq!(p.active["b"].len(), 2, "{p:?}");
        assert_eq!(p.warmups, 0);
        // The same with stores past the acceptable lag: warm-ups instead.
        a.ends = tasks.iter().map(|&t| (t, 4_000)).collect();
        let p = assign_tasks(&tasks, &stateful, &[a, member("b", "b")], &ha(0));
        assert!(p.active["b"].is_empty(), "{p:?}");
        assert_eq!(p.warmups, 2);
    }

    /// The stateless tasks an instance hands back must not take the room a
    /// newcomer's warm-up is for: one instance ran every stateful task
    /// (large stores), two others only stateless ones, and the newcomer
    /// still gets warm-ups, so a probing rebalance follows.
    #[test]
    fn stateless_hand_back_leaves_room_for_warmups() {
        let stateless: Vec<TaskId> = (0..4).map(|p| t(0, p)).collect();
        let stateful: BTreeSet<TaskId> = (0..4).map(|p| t(1, p)).collect();
        let tasks: Vec<TaskId> = stateless.iter().chain(&stateful).copied().collect();
        let mut a = member("a", "a");
        a.prev_active = stateful.iter().copied().chain([t(0, 0)]).collect();
        a.ends = stateful.iter().map(|&t| (t, 4_000)).collect();
        let mut b = member("b", "b");
        b.prev_active = [t(0, 1), t(0, 2)].into();
        let mut c = member("c", "c");
        c.prev_active = [t(0, 3)].into();
        let p = assign_tasks(
            &tasks,
            &stateful,
            &[a.clone(), b.clone(), c.clone(), member("d", "d")],
            &ha(0),
        );
        assert_eq!(p.warmups, 2, "{p:?}");
        // The probing rebalance: the first two warm-ups caught up and take
        // their tasks; the newcomer warms up the next one.
        let warm: Vec<(String, TaskId)> = p
            .standby
            .iter()
            .flat_map(|(m, v)| v.iter().map(move |t| (m.clone(), *t)))
            .collect();
        let mut round2 = vec![a, b, c, member("d", "d")];
        for (m, task) in &warm {
            let x = round2.iter_mut().find(|x| &x.id == m).unwrap();
            x.prev_standby.insert(*task);
            x.lags.insert(*task, 10);
        }
        let q = assign_tasks(&tasks, &stateful, &round2, &ha(0));
        for (m, task) in &warm {
            assert!(q.active[m].contains(task), "{m} should run {task}: {q:?}");
        }
        assert_eq!(q.warmups, 1, "{q:?}");
        assert_eq!(q.standby["d"].len(), 1, "{q:?}");
    }

    /// KIP-708: with zone tags, a standby goes to another zone than its
    /// active whenever one has an instance.
    #[test]
    fn rack_aware_standbys_avoid_the_active_zone() {
        let tasks: Vec<TaskId> = (0..8).map(|p| t(0, p)).collect();
        let stateful: BTreeSet<TaskId> = tasks.iter().copied().collect();
        let zone_of = |p: &str| if p < "c" { "z1" } else { "z2" };
        let members: Vec<Member> = ["a", "b", "c", "d"]
            .iter()
            .map(|p| {
                let mut m = member(p, p);
                m.tags.insert("zone".into(), zone_of(p).into());
                m
            })
            .collect();
        let mut cfg = ha(1);
        cfg.rack_tags = vec!["zone".into()];
        let p = assign_tasks(&tasks, &stateful, &members, &cfg);
        for &task in &tasks {
            let find = |map: &BTreeMap<String, Vec<TaskId>>| {
                map.iter()
                    .find(|(_, v)| v.contains(&task))
                    .map(|(m, _)| m.clone())
                    .unwrap()
            };
            let (a, s) = (find(&p.active), find(&p.standby));
            assert_ne!(zone_of(&a), zone_of(&s), "{task}: active {a}, standby {s}");
        }
        // Without the tag setting, the same members may share a zone.
        let p = assign_tasks(&tasks, &stateful, &members, &ha(1));
        assert_eq!(p.unplaced_standbys, 0);
    }
}
