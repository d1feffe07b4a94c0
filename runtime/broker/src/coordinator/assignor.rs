//! Server-side partition assignors for KIP-848 consumer groups: `uniform`
//! (the default) and `range`, both rack-aware when racks are known.
//!
//! - `uniform`: balanced and sticky. Partitions a member keeps in its previous
//!   target assignment stay with it when still valid; free partitions go to
//!   the least-loaded subscribed member, preferring one in a rack that holds a
//!   replica; then partitions move from the most to the least loaded member
//!   that can take them until no member has two more than another that could
//!   take one. With identical subscriptions every member ends within one
//!   partition of every other.
//! - `range`: per topic, subscribed members sorted by group.instance.id (then
//!   member id) take contiguous ranges, the first `partitions % members` one
//!   more, so static members keep their ranges across restarts (KIP-345's
//!   "instance id as the first sort key"). Among members of equal standing a
//!   rack-matching member is not preferred: ranges are positional by design.
//!
//! Invariants: every partition of a subscribed topic is assigned to exactly
//! one member subscribed to it (when there is one); the output is a pure
//! function of the input (deterministic order everywhere).

use std::collections::BTreeMap;

/// A topic as the assignor sees it.
#[derive(Debug, Clone)]
pub struct TopicSpec {
    /// Replica racks of each partition (empty when racks are unknown).
    pub partition_racks: Vec<Vec<String>>,
}

impl TopicSpec {
    pub fn partitions(&self) -> usize {
        self.partition_racks.len()
    }
}

/// A member as the assignor sees it.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack: Option<String>,
    /// Indices into the topic list.
    pub subscribed: Vec<usize>,
    /// The member's previous target assignment: (topic index, partition).
    pub previous: Vec<(usize, i32)>,
}

/// The assignors this coordinator offers (`group.consumer.assignors`).
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// Computes a target assignment: one list of (topic index, partition) per
/// member, in member order.
pub fn assign(
    assignor: &str,
    topics: &[TopicSpec],
    members: &[MemberSpec],
) -> Vec<Vec<(usize, i32)>> {
    match assignor {
        "range" => range(topics, members),
        _ => uniform(topics, members),
    }
}

fn rack_match(topic: &TopicSpec, partition: i32, rack: Option<&str>) -> bool {
    match rack {
        Some(r) => topic
            .partition_racks
            .get(partition as usize)
            .is_some_and(|rs| rs.iter().any(|x| x == r)),
        None => false,
    }
}

fn range(topics: &[TopicSpec], members: &[MemberSpec]) -> Vec<Vec<(usize, i32)>> {
    let mut out = vec![Vec::new(); members.len()];
    for (t, topic) in topics.iter().enumerate() {
        let mut subs: Vec<usize> = (0..members.len())
            .filter(|&m| members[m].subscribed.contains(&t))
            .collect();
        if subs.is_empty() {
            continue;
        }
        subs.sort_by(|&a, &b| {
            let key = |m: &MemberSpec| {
                (
                    m.instance_id.clone().unwrap_or_else(|| m.member_id.clone()),
                    m.member_id.clone(),
                )
            };
            key(&members[a]).cmp(&key(&members[b]))
        });
        let n = subs.len();
        let p = topic.partitions();
        let (base, extra) = (p / n, p % n);
        let mut next = 0;
        for (i, &m) in subs.iter().enumerate() {
            let count = base + usize::from(i < extra);
            out[m].extend((next..next + count).map(|q| (t, q as i32)));
            next += count;
        }
    }
    out
}

fn uniform(topics: &[TopicSpec], members: &[MemberSpec]) -> Vec<Vec<(usize, i32)>> {
    let n = members.len();
    if n == 0 {
        return Vec::new();
    }
    if members
        .iter()
        .all(|m| m.subscribed == members[0].subscribed)
    {
        uniform_homogeneous(topics, members)
    } else {
        uniform_heterogeneous(topics, members)
    }
}

/// Every member subscribes to the same topics: quotas of `P / N` (the first
/// `P % N` slots one more), sticky up to the quota, the rest filled from free
/// partitions, rack-matching first. O(P + N).
fn uniform_homogeneous(topics: &[TopicSpec], members: &[MemberSpec]) -> Vec<Vec<(usize, i32)>> {
    let n = members.len();
    let subs: Vec<usize> = members[0]
        .subscribed
        .iter()
        .copied()
        .filter(|&t| t < topics.len())
        .collect();
    let total: usize = subs.iter().map(|&t| topics[t].partitions()).sum();
    let (base, mut extra) = (total / n, total % n);
    let mut owner: Vec<Vec<bool>> = topics.iter().map(|t| vec![false; t.partitions()]).collect();
    let mut out: Vec<Vec<(usize, i32)>> = vec![Vec::new(); n];
    let valid = |t: usize, p: i32| subs.contains(&t) && (p as usize) < topics[t].partitions();
    // Sticky, up to the base quota.
    let mut leftovers: Vec<Vec<(usize, i32)>> = vec![Vec::new(); n];
    for (m, spec) in members.iter().enumerate() {
        let mut prev = spec.previous.clone();
        prev.sort_unstable();
        for (t, p) in prev {
            if !valid(t, p) || owner[t][p as usize] {
                continue;
            }
            if out[m].len() < base {
                owner[t][p as usize] = true;
                out[m].push((t, p));
            } else {
                leftovers[m].push((t, p));
            }
        }
    }
    // Members with more previous partitions keep one more while extra slots last.
    let mut quota = vec![base; n];
    for m in 0..n {
        if extra == 0 {
            break;
        }
        if let Some(&(t, p)) = leftovers[m].iter().find(|(t, p)| !owner[*t][*p as usize]) {
            owner[t][p as usize] = true;
            out[m].push((t, p));
            quota[m] = base + 1;
            extra -= 1;
        }
    }
    for q in quota.iter_mut() {
        if extra == 0 {
            break;
        }
        if *q == base {
            *q = base + 1;
            extra -= 1;
        }
    }
    fill_free(topics, members, &subs, &mut owner, &mut out, |m, len| {
        len < quota[m]
    });
    for a in &mut out {
        a.sort_unstable();
    }
    out
}

/// Hands free partitions to members while `wants(member, current_len)`:
/// rack-matching partitions first, then any.
fn fill_free(
    topics: &[TopicSpec],
    members: &[MemberSpec],
    subs: &[usize],
    owner: &mut [Vec<bool>],
    out: &mut [Vec<(usize, i32)>],
    wants: impl Fn(usize, usize) -> bool,
) {
    let free: Vec<(usize, i32)> = subs
        .iter()
        .flat_map(|&t| (0..topics[t].partitions()).map(move |p| (t, p as i32)))
        .filter(|(t, p)| !owner[*t][*p as usize])
        .collect();
    let mut by_rack: BTreeMap<&str, Vec<(usize, i32)>> = BTreeMap::new();
    for &(t, p) in &free {
        for r in &topics[t].partition_racks[p as usize] {
            by_rack.entry(r.as_str()).or_default().push((t, p));
        }
    }
    let mut cursor: BTreeMap<&str, usize> = BTreeMap::new();
    let mut any = 0usize;
    for (m, spec) in members.iter().enumerate() {
        if let Some(list) = spec.rack.as_deref().and_then(|r| by_rack.get(r)) {
            let at = cursor.entry(spec.rack.as_deref().unwrap()).or_default();
            while wants(m, out[m].len()) && *at < list.len() {
                let (t, p) = list[*at];
                *at += 1;
                if !owner[t][p as usize] {
                    owner[t][p as usize] = true;
                    out[m].push((t, p));
                }
            }
        }
    }
    for (m, _) in members.iter().enumerate() {
        while wants(m, out[m].len()) && any < free.len() {
            let (t, p) = free[any];
            any += 1;
            if !owner[t][p as usize] {
                owner[t][p as usize] = true;
                out[m].push((t, p));
            }
        }
    }
}

/// Members subscribe to different topics: sticky where valid, then each free
/// partition to the least-loaded member subscribed to it (rack first), then
/// moves from the most to the least loaded member that can take one.
fn uniform_heterogeneous(topics: &[TopicSpec], members: &[MemberSpec]) -> Vec<Vec<(usize, i32)>> {
    let n = members.len();
    let mut owner: Vec<Vec<Option<usize>>> =
        topics.iter().map(|t| vec![None; t.partitions()]).collect();
    let mut out: Vec<Vec<(usize, i32)>> = vec![Vec::new(); n];
    let subscribed = |m: usize, t: usize| members[m].subscribed.contains(&t);
    let total: usize = topics.iter().map(|t| t.partitions()).sum();
    for m in 0..n {
        let mut prev = members[m].previous.clone();
        prev.sort_unstable();
        for (t, p) in prev {
            if t < topics.len()
                && subscribed(m, t)
                && (p as usize) < topics[t].partitions()
                && owner[t][p as usize].is_none()
            {
                owner[t][p as usize] = Some(m);
                out[m].push((t, p));
            }
        }
    }
    for (t, topic) in topics.iter().enumerate() {
        for (p, slot) in owner[t].iter_mut().enumerate() {
            if slot.is_some() {
                continue;
            }
            let best = (0..n).filter(|&m| subscribed(m, t)).min_by_key(|&m| {
                (
                    out[m].len(),
                    !rack_match(topic, p as i32, members[m].rack.as_deref()),
                    m,
                )
            });
            if let Some(m) = best {
                *slot = Some(m);
                out[m].push((t, p as i32));
            }
        }
    }
    for _ in 0..total.max(1) {
        let Some(from) = (0..n).max_by_key(|&m| (out[m].len(), std::cmp::Reverse(m))) else {
            break;
        };
        let candidate = (0..n)
            .filter(|&to| out[from].len() > out[to].len() + 1)
            .filter_map(|to| {
                out[from]
                    .iter()
                    .position(|(t, _)| subscribed(to, *t))
                    .map(|i| (to, i))
            })
            .min_by_key(|(to, _)| (out[*to].len(), *to));
        let Some((to, i)) = candidate else { break };
        let (t, p) = out[from].swap_remove(i);
        owner[t][p as usize] = Some(to);
        out[to].push((t, p));
    }
    for a in &mut out {
        a.sort_unstable();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: usize, racks: &[&str]) -> TopicSpec {
        TopicSpec {
            partition_racks: (0..n)
                .map(|i| {
                    if racks.is_empty() {
                        vec![]
                    } else {
                        vec![racks[i % racks.len()].to_string()]
                    }
                })
                .collect(),
        }
    }

    fn member(id: &str, iid: Option<&str>, rack: Option<&str>, subs: &[usize]) -> MemberSpec {
        MemberSpec {
            member_id: id.into(),
            instance_id: iid.map(str::to_string),
            rack: rack.map(str::to_string),
            subscribed: subs.to_vec(),
            previous: vec![],
        }
    }

    fn check_complete(topics: &[TopicSpec], members: &[MemberSpec], a: &[Vec<(usize, i32)>]) {
        let mut seen = std::collections::BTreeSet::new();
        for (m, parts) in a.iter().enumerate() {
            for &(t, p) in parts {
                assert!(
                    members[m].subscribed.contains(&t),
                    "member {m} got unsubscribed topic {t}"
                );
                assert!(seen.insert((t, p)), "({t},{p}) assigned twice");
            }
        }
        let expected: usize = topics
            .iter()
            .enumerate()
            .filter(|(t, _)| members.iter().any(|m| m.subscribed.contains(t)))
            .map(|(_, x)| x.partitions())
            .sum();
        assert_eq!(seen.len(), expected);
    }

    #[test]
    fn range_sorts_by_instance_id_like_the_kip_345_example() {
        let topics = vec![topic(9, &[])];
        // Member ids changed after a restart; instance ids did not.
        let members = vec![
            member("z-4", Some("A"), None, &[0]),
            member("m-2", Some("B"), None, &[0]),
            member("a-3", Some("C"), None, &[0]),
        ];
        let a = assign("range", &topics, &members);
        assert_eq!(a[0], vec![(0, 0), (0, 1), (0, 2)]);
        assert_eq!(a[1], vec![(0, 3), (0, 4), (0, 5)]);
        assert_eq!(a[2], vec![(0, 6), (0, 7), (0, 8)]);
        check_complete(&topics, &members, &a);
    }

    #[test]
    fn uniform_is_balanced_sticky_and_rack_aware() {
        let topics = vec![
            topic(12, &["r1", "r2", "r3"]),
            topic(7, &["r1", "r2", "r3"]),
        ];
        let mut members: Vec<MemberSpec> = (0..3)
            .map(|i| member(&format!("m{i}"), None, Some(["r1", "r2", "r3"][i]), &[0, 1]))
            .collect();
        let a = assign("uniform", &topics, &members);
        check_complete(&topics, &members, &a);
        let l: Vec<usize> = a.iter().map(Vec::len).collect();
        assert!(
            l.iter().max().unwrap() - l.iter().min().unwrap() <= 1,
            "{l:?}"
        );
        // Rack-aware: each member's partitions have a replica in its rack.
        for (m, parts) in a.iter().enumerate() {
            let matching = parts
                .iter()
                .filter(|(t, p)| rack_match(&topics[*t], *p, members[m].rack.as_deref()))
                .count();
            assert_eq!(matching, parts.len(), "member {m}: {parts:?}");
        }
        // A fourth member joins: the others keep most of what they had.
        for (m, prev) in members.iter_mut().zip(&a) {
            m.previous = prev.clone();
        }
        members.push(member("m3", None, Some("r1"), &[0, 1]));
        let b = assign("uniform", &topics, &members);
        check_complete(&topics, &members, &b);
        let l: Vec<usize> = b.iter().map(Vec::len).collect();
        assert!(
            l.iter().max().unwrap() - l.iter().min().unwrap() <= 1,
            "{l:?}"
        );
        let kept: usize = (0..3)
            .map(|m| b[m].iter().filter(|x| a[m].contains(x)).count())
            .sum();
        assert!(
            kept >= 19 - l[3] - 1,
            "sticky: kept {kept} of {}",
            19 - l[3]
        );
    }

    #[test]
    fn heterogeneous_subscriptions_only_get_their_topics() {
        let topics = vec![topic(4, &[]), topic(4, &[])];
        let members = vec![
            member("a", None, None, &[0]),
            member("b", None, None, &[0, 1]),
            member("c", None, None, &[1]),
        ];
        for assignor in ASSIGNORS {
            let a = assign(assignor, &topics, &members);
            check_complete(&topics, &members, &a);
        }
    }
}
