//! Standby replicas and KIP-441 high availability (issue 20), written once
//! and run on the embedded broker and on Apache Kafka like every streams
//! scenario. The app is the word count (`rill-streams-app`, sub-topology 1
//! holds the RocksDB count store), run as separate processes so an
//! instance can be killed with SIGKILL; everything is observed from
//! outside (REST answers, the `rill` binary, the output topic, the apps'
//! `RESTORED n` lines).
//!
//! - Failover: with `num.standby.replicas=1` every stateful task has one
//!   standby on another instance; after `kill -9` of one instance and
//!   `rill groups remove-members --offline-only`, its tasks resume on the
//!   instances that held their standbys, restoring no more than what was
//!   written since the kill (checked against the size of the changelogs a
//!   full restore would read), and the counts are exact.
//! - Warm-up: a fourth instance without state gets warm-up replicas first
//!   and stateful tasks only once they are within
//!   `acceptable.recovery.lag`; the moved tasks restore at most that much.
//! - Rack awareness (KIP-708): with `client.tag.zone` on two zones and
//!   `rack.aware.assignment.tags=zone`, no standby shares its active's zone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rill_client::admin::{AlterConfigOp, ConfigResource};
use rill_client::{OffsetSpec, TopicPartition};
use serde_json::Value;

use crate::client_scenarios::{admin, wait_until};
use crate::operator_scenarios::{
    covers_exactly_once, expected_ids, get, partitions_by_instance_id, rill_binary, RestApp,
};
use crate::streams_scenarios::{await_counts, Setup, PARTITIONS};

/// Lines whose first word is new each time, so the count store (and its
/// changelog) grows with the input.
fn unique_lines(from: usize, n: usize) -> Vec<String> {
    (from..from + n)
        .map(|i| format!("u{i} v{} shared", i % 500))
        .collect()
}

/// The word count's stateful tasks (sub-topology 1, one per partition).
fn stateful_tasks() -> Vec<String> {
    (0..PARTITIONS).map(|p| format!("1_{p}")).collect()
}

/// Where the group's tasks are, from one instance's view of the group.
#[derive(Debug, Default)]
struct Placement {
    /// task → process id of its active.
    active: BTreeMap<String, String>,
    /// task → process ids keeping a standby.
    standby: BTreeMap<String, Vec<String>>,
    /// process id → endpoint.
    endpoint: BTreeMap<String, String>,
}

fn placement(view: &Value) -> Placement {
    let mut p = Placement::default();
    for i in view["instances"].as_array().into_iter().flatten() {
        let process = i["process_id"].as_str().unwrap_or_default().to_string();
        if let Some(e) = i["endpoint"].as_str() {
            p.endpoint.insert(process.clone(), e.to_string());
        }
        for t in i["threads"].as_array().into_iter().flatten() {
            for task in t["active_tasks"].as_array().into_iter().flatten() {
                p.active
                    .insert(task.as_str().unwrap().to_string(), process.clone());
            }
            for task in t["standby_tasks"].as_array().into_iter().flatten() {
                p.standby
                    .entry(task.as_str().unwrap().to_string())
                    .or_default()
                    .push(process.clone());
            }
        }
    }
    p
}

/// Every stateful task has an active and exactly `n` standbys, none on
/// the active's instance and no two on one instance.
fn standbys_placed(p: &Placement, n: usize) -> bool {
    stateful_tasks().iter().all(|t| {
        let Some(a) = p.active.get(t) else {
            return false;
        };
        let s = p.standby.get(t).cloned().unwrap_or_default();
        let distinct: BTreeSet<&String> = s.iter().collect();
        s.len() == n && distinct.len() == n && !s.contains(a)
    })
}

/// This instance's standby lags (task → changelog records behind).
fn standby_lags(url: &str) -> BTreeMap<String, i64> {
    let (_, me) = get(&format!("{url}/v1/instances/self"), None);
    let mut out = BTreeMap::new();
    for t in me["threads"].as_array().into_iter().flatten() {
        if let Some(m) = t["standby_lags"].as_object() {
            for (task, lag) in m {
                out.insert(task.clone(), lag.as_i64().unwrap_or(i64::MAX));
            }
        }
    }
    out
}

fn url(app: &RestApp) -> String {
    format!("http://{}", app.rest)
}

/// Changelog records a full restore of `tasks` would read.
fn changelog_size(bootstrap: &str, app_id: &str, tasks: &[String]) -> i64 {
    let wanted: BTreeMap<TopicPartition, OffsetSpec> = tasks
        .iter()
        .map(|t| {
            let p: i32 = t.rsplit('_').next().unwrap().parse().unwrap();
            (
                TopicPartition::new(format!("{app_id}-counts-changelog"), p),
                OffsetSpec::Latest,
            )
        })
        .collect();
    admin(bootstrap)
        .list_offsets(&wanted)
        .unwrap()
        .values()
        .map(|o| o.offset)
        .sum()
}

fn restored(apps: &[&RestApp]) -> u64 {
    apps.iter().map(|a| a.restored.load(Ordering::SeqCst)).sum()
}

/// Kill -9 an instance of three; its tasks resume where their standbys
/// were, restoring only the tail.
/// Under `group.protocol=streams` (KIP-1071) the broker assigns standbys:
/// the group configs give one per stateful task, and a 6 s session lets a
/// killed member's tasks move in seconds (Kafka has no request that
/// removes a streams-group member). True when the scenario runs so.
fn streams_group_configs(s: &Setup) -> bool {
    if crate::streams_scenarios::group_protocol() != "streams" {
        return false;
    }
    let set = |k: &str, v: &str| AlterConfigOp::Set(k.into(), v.into());
    admin(&s.bootstrap)
        .incremental_alter_configs(
            &ConfigResource::Group(s.app.clone()),
            &[
                set("streams.num.standby.replicas", "1"),
                set("streams.session.timeout.ms", "6000"),
                set("streams.heartbeat.interval.ms", "500"),
            ],
        )
        .expect("group configs for the streams group");
    let described = admin(&s.bootstrap)
        .describe_configs(&ConfigResource::Group(s.app.clone()))
        .expect("describe group configs");
    assert_eq!(
        described
            .get("streams.num.standby.replicas")
            .map(String::as_str),
        Some("1"),
        "{described:?}"
    );
    true
}

/// A scenario that needs what only the classic assignor does here says so.
fn skipped_under_streams(what: &str) -> bool {
    if crate::streams_scenarios::group_protocol() == "streams" {
        eprintln!("SKIPPED under group.protocol=streams: {what}");
        return true;
    }
    false
}

pub fn streams_standby_failover(bootstrap: &str) {
    let s = Setup::new(bootstrap, "standby");
    let streams_group = streams_group_configs(&s);
    let mut expected = BTreeMap::new();
    // ~7,000 distinct words: each stateful task's changelog holds well
    // over the post-kill input a standby may need to catch up on.
    s.produce(&unique_lines(0, 6000), &mut expected);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let ids: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|n| format!("{}-{n}", s.app))
        .collect();
    // acceptable.recovery.lag below a task's store (~4,500 changelog
    // records): only a standby's holder counts as caught up on it, so the
    // tasks must go there (with Kafka's default of 10,000 any instance
    // would qualify and a full restore would be "acceptable"). The first
    // instance may fill its stores before the others join: they then warm
    // up, and probing rebalances every 5 s settle the layout.
    let env = [(
        "RILL_APP_CONFIG",
        "num.standby.replicas=1,acceptable.recovery.lag=1000,probing.rebalance.interval.ms=5000,rest.admin.token=standby-admin",
    )];
    let mut apps: Vec<RestApp> = (0..3)
        .map(|i| RestApp::start_with(&s, dirs[i].path(), &ids[i], &env))
        .collect();
    let all: BTreeSet<String> = ids.iter().flat_map(|id| expected_ids(id, 2)).collect();
    let url_a = url(&apps[0]);
    let settled = wait_until(Duration::from_secs(90), || {
        let (_, view) = get(&format!("{url_a}/v1/instances"), None);
        let by_id = partitions_by_instance_id(&view, &s.input);
        by_id.keys().cloned().collect::<BTreeSet<_>>() == all
            && covers_exactly_once(&by_id)
            && standbys_placed(&placement(&view), 1)
    });
    assert!(
        settled,
        "every stateful task should have one standby on another instance: {:#}",
        get(&format!("{url_a}/v1/instances"), None).1
    );
    let mut reader = s.reader();
    let mut seen = BTreeMap::new();
    await_counts(&mut reader, &mut seen, &expected, &[]);
    // The standbys caught up (lags are refreshed every few seconds).
    let current = wait_until(Duration::from_secs(60), || {
        let lags: Vec<BTreeMap<String, i64>> = apps.iter().map(|a| standby_lags(&url(a))).collect();
        lags.iter().map(BTreeMap::len).sum::<usize>() == PARTITIONS as usize
            && lags.iter().flat_map(|l| l.values()).all(|&lag| lag == 0)
    });
    assert!(
        current,
        "standbys did not catch up: {:?}",
        apps.iter()
            .map(|a| standby_lags(&url(a)))
            .collect::<Vec<_>>()
    );
    let before = placement(&get(&format!("{url_a}/v1/instances"), None).1);
    // The victim: the instance running the most stateful tasks (a balanced
    // assignment may leave one with none); another one answers the CLI.
    let processes: Vec<String> = apps
        .iter()
        .map(|a| {
            let (_, me) = get(&format!("{}/v1/instances/self", url(a)), None);
            me["process_id"].as_str().unwrap().to_string()
        })
        .collect();
    let tasks_of = |process: &str| -> Vec<String> {
        stateful_tasks()
            .into_iter()
            .filter(|t| before.active[t] == process)
            .collect()
    };
    let v = (0..3)
        .max_by_key(|&i| tasks_of(&processes[i]).len())
        .unwrap();
    let victim_tasks = tasks_of(&processes[v]);
    let mut victim = apps.remove(v);
    let survivor_ids: Vec<String> = (0..3).filter(|&i| i != v).map(|i| ids[i].clone()).collect();
    let url_a = url(&apps[0]);
    // A commit interval (200 ms) passes: nothing is left uncommitted.
    std::thread::sleep(Duration::from_secs(1));
    let restored_before = restored(&[&apps[0], &apps[1]]);
    victim.kill_9();
    let after_kill = unique_lines(6000, 100);
    s.produce(&after_kill, &mut expected);
    let out = std::process::Command::new(rill_binary())
        .args(["groups", "remove-members", "--bootstrap-server", bootstrap])
        .args([
            "--from-url",
            &url_a,
            "--offline-only",
            "--token",
            "standby-admin",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if streams_group {
        // No removal request exists for streams groups: the CLI says so,
        // and the killed member's tasks move when its session ends.
        assert!(
            !out.status.success()
                && String::from_utf8_lossy(&out.stderr).contains("is a streams group"),
            "{out:?}"
        );
    } else {
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The live instances were told to rejoin at once (not at their
        // next heartbeat).
        for a in &apps {
            assert!(
                stdout.contains(&format!("asked {} to rejoin the group now", url(a))),
                "{stdout}"
            );
        }
    }
    let survivors: BTreeSet<String> = survivor_ids
        .iter()
        .flat_map(|id| expected_ids(id, 2))
        .collect();
    let took_over = wait_until(Duration::from_secs(60), || {
        let (_, view) = get(&format!("{url_a}/v1/instances"), None);
        let by_id = partitions_by_instance_id(&view, &s.input);
        by_id.keys().cloned().collect::<BTreeSet<_>>() == survivors && covers_exactly_once(&by_id)
    });
    assert!(
        took_over,
        "{:#}",
        get(&format!("{url_a}/v1/instances"), None).1
    );
    await_counts(&mut reader, &mut seen, &expected, &[]);
    let after = placement(&get(&format!("{url_a}/v1/instances"), None).1);
    for t in &victim_tasks {
        assert_eq!(
            before.standby[t],
            vec![after.active[t].clone()],
            "task {t} should resume where its standby was: before {before:?}, after {after:?}"
        );
    }
    // Only the tail: what the changelogs got since the kill (each
    // post-kill line updates three words), never the whole store.
    let tail_bound = 3 * after_kill.len() as u64;
    let restored_now = restored(&[&apps[0], &apps[1]]) - restored_before;
    let full = changelog_size(bootstrap, &s.app, &victim_tasks);
    assert!(
        full > 2 * tail_bound as i64,
        "the scenario must make a full restore ({full} records) dwarf the tail bound ({tail_bound})"
    );
    eprintln!(
        "standby failover: the survivors restored {restored_now} records; a full restore of {victim_tasks:?} reads {full}"
    );
    assert!(
        restored_now <= tail_bound,
        "the survivors restored {restored_now} records (tail bound {tail_bound}, a full restore reads {full})"
    );
    // The survivors keep standbys of each other's tasks again.
    let rebuilt = wait_until(Duration::from_secs(60), || {
        standbys_placed(
            &placement(&get(&format!("{url_a}/v1/instances"), None).1),
            1,
        )
    });
    assert!(
        rebuilt,
        "{:#}",
        get(&format!("{url_a}/v1/instances"), None).1
    );
    // `rill instances --wide` shows the standbys with their lags (a
    // rebalance may be under way — a probing one, or a member catching up
    // — during which an instance reports its standbys without lags; the
    // lags come back once it runs again).
    let mut wide_out = String::new();
    let lags_shown = wait_until(Duration::from_secs(30), || {
        let wide = std::process::Command::new(rill_binary())
            .args(["instances", "--wide", "--url", &url_a])
            .output()
            .unwrap();
        wide_out = String::from_utf8_lossy(&wide.stdout).into_owned();
        let placed = placement(&get(&format!("{url_a}/v1/instances"), None).1);
        wide.status.success()
            && wide_out.contains("STANDBY TASKS")
            && placed
                .standby
                .keys()
                .any(|t| wide_out.contains(&format!("{t}:")))
    });
    assert!(lags_shown, "{wide_out}");
    // Metrics: standby updates and lags are exported.
    let metrics = http()
        .get(&format!("{url_a}/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(
        metrics.contains("rill_streams_standby_update_records_total"),
        "{metrics}"
    );
}

fn http() -> ureq::Agent {
    crate::operator_scenarios::http()
}

/// KIP-441 warm-up: a fourth instance gets warm-up replicas first and
/// stateful tasks only once caught up.
pub fn streams_standby_warmup(bootstrap: &str) {
    if skipped_under_streams("warm-up tasks and probing rebalances come from the classic assignor here; the embedded streams coordinator assigns no warm-ups yet (Kafka 4.4's group config streams.num.warmup.replicas)") {
        return;
    }
    let s = Setup::new(bootstrap, "warmup");
    let mut expected = BTreeMap::new();
    s.produce(&unique_lines(0, 6000), &mut expected);
    // Uncached, so every input updates the output at once: a pause in a
    // task's output is a pause in its processing.
    let config = "acceptable.recovery.lag=500,max.warmup.replicas=2,probing.rebalance.interval.ms=3000,statestore.cache.max.bytes=0,commit.interval.ms=3000";
    let commit_interval = Duration::from_millis(3000);
    let env = [("RILL_APP_CONFIG", config)];
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let ids: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| format!("{}-{n}", s.app))
        .collect();
    let apps: Vec<RestApp> = (0..3)
        .map(|i| RestApp::start_with(&s, dirs[i].path(), &ids[i], &env))
        .collect();
    let url_a = url(&apps[0]);
    let mut reader = s.reader();
    let mut seen = BTreeMap::new();
    await_counts(&mut reader, &mut seen, &expected, &[]);
    // A steady load while the fourth instance joins.
    let expected = Arc::new(Mutex::new(expected));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (expected, stop) = (expected.clone(), stop.clone());
        let s = s.clone();
        std::thread::spawn(move || {
            let mut i = 6000;
            while !stop.load(Ordering::SeqCst) && i < 6000 + 3000 {
                let mut e = BTreeMap::new();
                s.produce(&unique_lines(i, 10), &mut e);
                for (w, n) in e {
                    *expected.lock().unwrap().entry(w).or_default() += n;
                }
                i += 10;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // Output arrivals per partition, from before the fourth instance joins.
    let mut watch = s.reader();
    let outputs: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(s.output.clone(), p))
        .collect();
    watch.seek_to_end(&outputs).unwrap();
    let arrivals: Arc<Mutex<BTreeMap<i32, Vec<Instant>>>> = Arc::default();
    let watcher = {
        let (arrivals, stop) = (arrivals.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let polled = watch.poll(Duration::from_millis(20)).unwrap();
                let now = Instant::now();
                let mut a = arrivals.lock().unwrap();
                for r in polled {
                    a.entry(r.partition).or_default().push(now);
                }
            }
        })
    };
    let joined = Instant::now();
    let d = RestApp::start_with(&s, dirs[3].path(), &ids[3], &env);
    let url_d = url(&d);
    // Watch d: which stateful tasks it warms up, and when it runs them.
    let mut warmed: BTreeSet<String> = BTreeSet::new();
    let mut got: BTreeSet<String> = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while got.is_empty() && Instant::now() < deadline {
        let (_, me) = get(&format!("{url_d}/v1/instances/self"), None);
        for t in me["threads"].as_array().into_iter().flatten() {
            for task in t["standby_tasks"].as_array().into_iter().flatten() {
                warmed.insert(task.as_str().unwrap().to_string());
            }
            for task in t["active_tasks"].as_array().into_iter().flatten() {
                let task = task.as_str().unwrap().to_string();
                if task.starts_with("1_") {
                    got.insert(task);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !got.is_empty(),
        "the new instance never got a stateful task; warm-ups seen: {warmed:?}; {:#}",
        get(&format!("{url_a}/v1/instances"), None).1
    );
    assert!(
        got.is_subset(&warmed),
        "d took stateful tasks {got:?} it had not warmed up ({warmed:?})"
    );
    // Caught up means within acceptable.recovery.lag (500) per task.
    let moved: Vec<String> = got.iter().cloned().collect();
    let full = changelog_size(bootstrap, &s.app, &moved);
    let bound = 500 * moved.len() as u64;
    let restored_d = d.restored.load(Ordering::SeqCst);
    assert!(
        full > 2 * bound as i64,
        "the scenario must make a full restore ({full} records) dwarf the bound ({bound})"
    );
    eprintln!(
        "warm-up: the new instance took {moved:?} after warming up {warmed:?}, restoring {restored_d} records (a full restore reads {full})"
    );
    assert!(
        restored_d <= bound,
        "d restored {restored_d} records for {moved:?} (bound {bound}, a full restore reads {full})"
    );
    // Keep the load a little longer so the moved tasks' output after the
    // move is seen too.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    load.join().unwrap();
    watcher.join().unwrap();
    // The moved tasks (count task 1_p writes output partition p) never
    // paused longer than a commit interval: not while the newcomer joined,
    // not while the tasks moved to it.
    let arrivals = arrivals.lock().unwrap();
    for task in &moved {
        let p: i32 = task.rsplit('_').next().unwrap().parse().unwrap();
        let times = arrivals.get(&p).cloned().unwrap_or_default();
        assert!(
            times.len() >= 10,
            "task {task}: only {} outputs seen while the load ran",
            times.len()
        );
        let mut last = joined;
        let mut longest = Duration::ZERO;
        for t in times {
            longest = longest.max(t.saturating_duration_since(last));
            last = t;
        }
        eprintln!(
            "warm-up: task {task}: longest output gap {longest:?} over {} outputs",
            arrivals.get(&p).map_or(0, Vec::len)
        );
        assert!(
            longest <= commit_interval,
            "task {task}'s output paused {longest:?}, longer than commit.interval.ms"
        );
    }
    let expected = expected.lock().unwrap().clone();
    await_counts(&mut reader, &mut seen, &expected, &[]);
    drop(apps);
}

/// KIP-708: standbys avoid their active's zone.
pub fn streams_standby_rack_aware(bootstrap: &str) {
    if skipped_under_streams("rack-aware standby placement comes from the classic assignor here; the embedded streams coordinator does not place by client tags yet (Kafka 4.4's group config streams.rack.aware.assignment.tags)") {
        return;
    }
    let s = Setup::new(bootstrap, "rack");
    let mut expected = BTreeMap::new();
    s.produce(&unique_lines(0, 200), &mut expected);
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let zones = ["z1", "z1", "z2", "z2"];
    let mut apps = Vec::new();
    for (i, zone) in zones.iter().enumerate() {
        let config = format!(
            "num.standby.replicas=1,client.tag.zone={zone},rack.aware.assignment.tags=zone"
        );
        let id = format!("{}-{i}", s.app);
        apps.push(RestApp::start_with(
            &s,
            dirs[i].path(),
            &id,
            &[("RILL_APP_CONFIG", config.as_str())],
        ));
    }
    let zone_of: BTreeMap<String, &str> = apps
        .iter()
        .zip(zones)
        .map(|(a, z)| (a.rest.clone(), z))
        .collect();
    let url_a = url(&apps[0]);
    let placed = wait_until(Duration::from_secs(90), || {
        let p = placement(&get(&format!("{url_a}/v1/instances"), None).1);
        p.endpoint.len() == 4 && standbys_placed(&p, 1)
    });
    let p = placement(&get(&format!("{url_a}/v1/instances"), None).1);
    assert!(placed, "{p:?}");
    for t in stateful_tasks() {
        let zone = |process: &String| zone_of[&p.endpoint[process]];
        let (a, sb) = (&p.active[&t], &p.standby[&t][0]);
        assert_ne!(
            zone(a),
            zone(sb),
            "task {t}: active and standby share a zone: {p:?}"
        );
    }
    let mut reader = s.reader();
    await_counts(&mut reader, &mut BTreeMap::new(), &expected, &[]);
}
