//! Which static members `rill groups remove-members --from-url` may remove
//! (KIP-345 removal by `group.instance.id`), decided from evidence that
//! cannot be stale.
//!
//! The instance list comes from one instance's metadata, which is the
//! group's view as the leader last wrote it: a static member that restarts
//! keeps its assignment without a rebalance, so the list can name an old
//! address for an instance that is alive elsewhere. So an id is offline
//! only when all of these hold:
//! - it is not one of the answering instance's own threads;
//! - no instance that answered a probe (`GET /v1/instances/self` at any
//!   listed endpoint) reports it as its own, and the listed instance's
//!   endpoint does not answer at all (an answer without its thread list,
//!   e.g. 401, keeps its ids: something is alive there);
//! - the listed instance has an endpoint (without one nothing can be
//!   probed: it is kept, to be removed by `--instance-id` if gone);
//! - the group (DescribeGroups) still has the member id the metadata
//!   recorded for it: a different one means it rejoined since, so it is
//!   alive somewhere.
//!
//! The removal then names that member id, so the coordinator refuses it
//! (FENCED_INSTANCE_ID) if the member rejoins between the check and the
//! removal.
//!
//! Invariant: a kept id is never removed; every kept id has a reason the
//! command prints.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// How long a probe of one instance may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a probe of an endpoint found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Nothing answered HTTP there.
    NoAnswer,
    /// An instance answered with its metadata: the `group.instance.id`s of
    /// its own threads.
    Threads(Vec<String>),
    /// Something answered, without its thread list (the HTTP status).
    Answered(u16),
}

/// One static member the metadata lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its `group.instance.id`.
    pub instance_id: String,
    /// The member id the metadata recorded for it, when it did.
    pub member_id: Option<String>,
    /// The listed instance's endpoint, when it has one.
    pub endpoint: Option<String>,
    /// Whether it is one of the answering instance's own threads.
    pub local: bool,
}

/// Why a listed id is not removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// A thread of the instance that answered.
    Answering,
    /// An instance that answered at this endpoint runs it.
    RunsAt(String),
    /// Its instance has no endpoint to probe.
    NoEndpoint,
    /// Its endpoint answered with this HTTP status but no thread list.
    Answers(String, u16),
    /// Its member id changed since the metadata's generation.
    Rejoined(i64),
    /// The group does not have it (nothing to remove; not a live member).
    NotInGroup,
}

impl Kept {
    /// Whether this is evidence the member is alive (removing it would
    /// hurt a live instance), as opposed to nothing to remove.
    pub fn is_live(&self) -> bool {
        !matches!(self, Kept::NotInGroup)
    }
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kept::Answering => write!(f, "it is a thread of the instance that answered"),
            Kept::RunsAt(at) => write!(f, "the instance at {at} answered and runs it"),
            Kept::NoEndpoint => write!(
                f,
                "its instance has no application.server to probe (remove it with --instance-id if it is gone)"
            ),
            Kept::Answers(at, status) => {
                write!(f, "{at} answers (HTTP {status}) without listing its threads")
            }
            Kept::Rejoined(generation) => write!(
                f,
                "it rejoined the group since generation {generation} (its member id changed), so it is alive, probably at a new address"
            ),
            Kept::NotInGroup => write!(f, "the group has no such member"),
        }
    }
}

/// The decision: ids to remove with the member id each must still have,
/// and ids kept with the reason.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// (instance id, its current member id).
    pub remove: Vec<(String, String)>,
    /// (instance id, why it is kept).
    pub keep: Vec<(String, Kept)>,
}

/// The static members `view` (a `/v1/instances` answer) lists.
pub fn listed(view: &Value) -> Vec<Listed> {
    let mut out = Vec::new();
    for i in view["instances"].as_array().into_iter().flatten() {
        for t in i["threads"].as_array().into_iter().flatten() {
            if let Some(id) = t["group_instance_id"].as_str() {
                out.push(Listed {
                    instance_id: id.to_string(),
                    member_id: t["member_id"].as_str().map(str::to_string),
                    endpoint: i["endpoint"].as_str().map(str::to_string),
                    local: i["local"].as_bool() == Some(true),
                });
            }
        }
    }
    out
}

/// Decides from the listed members, the probes of their endpoints and the
/// group's current members (instance id → member id).
pub fn plan(
    listed: &[Listed],
    probes: &BTreeMap<String, Probe>,
    group: &BTreeMap<String, String>,
    generation: i64,
) -> Plan {
    // Ids some live instance reports as its own, wherever it answered.
    let mut alive: BTreeMap<&str, &str> = BTreeMap::new();
    for (endpoint, p) in probes {
        if let Probe::Threads(ids) = p {
            for id in ids {
                alive.insert(id, endpoint);
            }
        }
    }
    let mut out = Plan::default();
    for l in listed {
        let id = l.instance_id.clone();
        let keep = |reason: Kept| (id.clone(), reason);
        if l.local {
            out.keep.push(keep(Kept::Answering));
            continue;
        }
        if let Some(at) = alive.get(l.instance_id.as_str()) {
            out.keep.push(keep(Kept::RunsAt(at.to_string())));
            continue;
        }
        let Some(endpoint) = &l.endpoint else {
            out.keep.push(keep(Kept::NoEndpoint));
            continue;
        };
        if let Some(Probe::Answered(status)) = probes.get(endpoint) {
            out.keep
                .push(keep(Kept::Answers(endpoint.clone(), *status)));
            continue;
        }
        let Some(current) = group.get(&l.instance_id) else {
            out.keep.push(keep(Kept::NotInGroup));
            continue;
        };
        if l.member_id.as_ref().is_some_and(|m| m != current) {
            out.keep.push(keep(Kept::Rejoined(generation)));
            continue;
        }
        out.remove.push((id, current.clone()));
    }
    out
}

/// Probes an instance's REST endpoint for its own threads.
pub fn probe(endpoint: &str, token: Option<&str>) -> Probe {
    let agent = crate::http::agent(PROBE_TIMEOUT);
    let mut req = agent.get(&format!(
        "{}://{endpoint}/v1/instances/self",
        crate::http::scheme()
    ));
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    match req.call() {
        Ok(r) => {
            let status = r.status();
            match r.into_json::<Value>() {
                Ok(v) => Probe::Threads(
                    v["threads"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|t| t["group_instance_id"].as_str().map(str::to_string))
                        .collect(),
                ),
                Err(_) => Probe::Answered(status),
            }
        }
        Err(ureq::Error::Status(code, _)) => Probe::Answered(code),
        Err(_) => Probe::NoAnswer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(id: &str, member: &str, endpoint: &str, local: bool) -> Listed {
        Listed {
            instance_id: id.into(),
            member_id: Some(member.into()),
            endpoint: Some(endpoint.into()),
            local,
        }
    }

    fn group(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn a_dead_instance_with_its_recorded_member_ids_is_removed() {
        let listed = [l("a-1", "m1", "h:1", true), l("b-1", "m2", "h:2", false)];
        let probes = BTreeMap::from([("h:2".to_string(), Probe::NoAnswer)]);
        let p = plan(&listed, &probes, &group(&[("a-1", "m1"), ("b-1", "m2")]), 3);
        assert_eq!(p.remove, vec![("b-1".to_string(), "m2".to_string())]);
        assert_eq!(p.keep.len(), 1);
    }

    #[test]
    fn an_instance_back_at_a_new_address_is_kept() {
        // b restarted elsewhere: the metadata still lists its old address
        // (no answer there), but the group has a new member id for it.
        let listed = [l("a-1", "m1", "h:1", true), l("b-1", "m2", "h:2", false)];
        let probes = BTreeMap::from([("h:2".to_string(), Probe::NoAnswer)]);
        let p = plan(&listed, &probes, &group(&[("a-1", "m1"), ("b-1", "m9")]), 3);
        assert!(p.remove.is_empty(), "{p:?}");
        assert_eq!(p.keep[1].1, Kept::Rejoined(3), "{p:?}");
    }

    #[test]
    fn ids_a_live_instance_reports_are_kept_wherever_it_answered() {
        // c answers at b's old address and runs b's ids (a takeover).
        let listed = [l("b-1", "m2", "h:2", false), l("a-1", "m1", "h:1", true)];
        let probes = BTreeMap::from([("h:2".to_string(), Probe::Threads(vec!["b-1".to_string()]))]);
        let p = plan(&listed, &probes, &group(&[("a-1", "m1"), ("b-1", "m2")]), 3);
        assert!(p.remove.is_empty(), "{p:?}");
        // An answer without a thread list keeps the ids too.
        let probes = BTreeMap::from([("h:2".to_string(), Probe::Answered(401))]);
        let p = plan(&listed, &probes, &group(&[("b-1", "m2")]), 3);
        assert!(p.remove.is_empty(), "{p:?}");
        assert_eq!(p.keep[0].1, Kept::Answers("h:2".into(), 401), "{p:?}");
    }
}
