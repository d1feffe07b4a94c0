//! Operator scenarios (metadata, REST, CLI, dashboard), written once and run
//! on the embedded broker and on Apache Kafka like every streams scenario.
//!
//! What they prove, from outside the app wherever possible (HTTP answers,
//! DescribeGroups, the `rill` binary's output and exit code):
//! - any instance lists every instance's stream threads with their
//!   `group.instance.id`s, and the partitions cover the input exactly once;
//! - an interactive query for a key another instance owns is forwarded to
//!   it and returns the right count;
//! - tokens: missing or wrong → 401, none configured → 403;
//! - `POST /v1/shutdown` with `leave_group` removes the instance's static
//!   members at once (not after the 30 s session timeout);
//! - after `kill -9`, `rill groups remove-members --from-url --offline-only`
//!   removes exactly the dead instance's members.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::Path;
use std::time::{Duration, Instant};

use rill_streams::{KafkaStreams, Serdes, State, StoreBackend};
use serde_json::Value;

use crate::client_scenarios::{admin, wait_until};
use crate::streams_scenarios::{lines, start, wordcount, Setup, PARTITIONS};

pub(crate) fn http() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build()
}

/// (status, JSON body) of a request; non-JSON bodies come back as a string.
fn answer(what: &str, url: &str, sent: Result<ureq::Response, ureq::Error>) -> (u16, Value) {
    let resp = match sent {
        Ok(resp) | Err(ureq::Error::Status(_, resp)) => resp,
        Err(e) => panic!("{what} {url}: {e}"),
    };
    let status = resp.status();
    let body = resp.into_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

fn with_token(r: ureq::Request, token: Option<&str>) -> ureq::Request {
    match token {
        Some(t) => r.set("Authorization", &format!("Bearer {t}")),
        None => r,
    }
}

/// (status, JSON body) of a GET.
pub(crate) fn get(url: &str, token: Option<&str>) -> (u16, Value) {
    answer("GET", url, with_token(http().get(url), token).call())
}

/// (status, JSON body) of a POST with a raw body.
fn post(url: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let r = http().post(url).set("Content-Type", "application/json");
    answer("POST", url, with_token(r, token).send_string(body))
}

/// group.instance.id → partitions of `topic`, from a `/v1/instances` answer.
pub(crate) fn partitions_by_instance_id(view: &Value, topic: &str) -> BTreeMap<String, Vec<i32>> {
    let mut out = BTreeMap::new();
    for i in view["instances"].as_array().expect("instances") {
        for t in i["threads"].as_array().expect("threads") {
            let id = t["group_instance_id"].as_str().unwrap_or("-").to_string();
            let ps: Vec<i32> = t["partitions"]
                .as_array()
                .expect("partitions")
                .iter()
                .filter(|p| p["topic"] == topic)
                .map(|p| p["partition"].as_i64().unwrap() as i32)
                .collect();
            out.insert(id, ps);
        }
    }
    out
}

/// Every partition of `topic` appears exactly once.
pub(crate) fn covers_exactly_once(by_id: &BTreeMap<String, Vec<i32>>) -> bool {
    let mut all: Vec<i32> = by_id.values().flatten().copied().collect();
    all.sort();
    all == (0..PARTITIONS).collect::<Vec<_>>()
}

pub(crate) fn expected_ids(prefix: &str, threads: usize) -> BTreeSet<String> {
    (1..=threads)
        .map(|n| format!("{prefix}-thread-{n}"))
        .collect()
}

/// Static instance ids the broker reports for the group right now.
fn group_members(bootstrap: &str, group: &str) -> BTreeMap<String, String> {
    admin(bootstrap)
        .describe_groups(&[group])
        .unwrap()
        .remove(group)
        .unwrap()
        .map(|g| {
            g.members
                .into_iter()
                .filter_map(|m| m.group_instance_id.map(|i| (i, m.member_id)))
                .collect()
        })
        .unwrap_or_default()
}

fn rest_config(
    s: &Setup,
    dir: &Path,
    instance: &str,
    token: Option<&str>,
) -> rill_streams::StreamsConfig {
    let mut extra = vec![
        ("group.instance.id", instance.to_string()),
        ("num.stream.threads", "2".to_string()),
        ("application.server", "127.0.0.1:0".to_string()),
    ];
    if let Some(t) = token {
        extra.push(("rest.admin.token", t.to_string()));
    }
    s.config(dir, &extra)
}

fn base(app: &KafkaStreams) -> String {
    format!("http://{}", app.rest_address().expect("REST server runs"))
}

/// A word of the `counts` store whose partition the instance at
/// `endpoint` owns, as `app`'s metadata says.
pub(crate) fn word_owned_by<'w>(
    app: &KafkaStreams,
    words: impl IntoIterator<Item = &'w String>,
    endpoint: &str,
) -> String {
    words
        .into_iter()
        .find(|w| {
            app.query_metadata_for_key("counts", *w, &Serdes::string())
                .unwrap()
                .active_host
                .as_deref()
                == Some(endpoint)
        })
        .unwrap_or_else(|| panic!("no word is owned by {endpoint}"))
        .clone()
}

/// Two instances × two threads, each serving REST: metadata from either
/// instance, interactive queries across instances, metrics, health, token
/// checks, and JSON errors for bad requests.
pub fn streams_rest_metadata_and_queries(bootstrap: &str) {
    let s = Setup::new(bootstrap, "rest");
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (ia, ib) = (format!("{}-a", s.app), format!("{}-b", s.app));
    let mut expected = BTreeMap::new();
    s.produce(&lines(0, 200), &mut expected);
    let a = start(
        wordcount(&s.input, &s.output, StoreBackend::RocksDb),
        rest_config(&s, d1.path(), &ia, Some("secret-a")),
    );
    let b = start(
        wordcount(&s.input, &s.output, StoreBackend::InMemory),
        rest_config(&s, d2.path(), &ib, None),
    );
    a.expose_store("counts", Serdes::i64(), |n| serde_json::json!(n));
    b.expose_store("counts", Serdes::i64(), |n| serde_json::json!(n));
    let want: BTreeSet<String> = expected_ids(&ia, 2)
        .into_iter()
        .chain(expected_ids(&ib, 2))
        .collect();

    // Either instance lists all four instance ids, and the input's
    // partitions are covered exactly once.
    let settled = wait_until(Duration::from_secs(60), || {
        [&a, &b].iter().all(|x| {
            let (st, view) = get(&format!("{}/v1/instances", base(x)), None);
            let by_id = partitions_by_instance_id(&view, &s.input);
            let running = view["instances"].as_array().is_some_and(|is| {
                is.iter().all(|i| {
                    i["state"] == "Running"
                        && i["threads"]
                            .as_array()
                            .is_some_and(|ts| ts.iter().all(|t| t["thread_state"] == "Running"))
                })
            });
            st == 200
                && running
                && by_id.keys().cloned().collect::<BTreeSet<_>>() == want
                && covers_exactly_once(&by_id)
        })
    });
    let (_, view) = get(&format!("{}/v1/instances", base(&a)), None);
    assert!(settled, "instances never settled: {view:#}");
    // The other instance was probed live; member ids and states are there.
    for i in view["instances"].as_array().unwrap() {
        // The answering instance is local; the other one was probed.
        let local = i["local"].as_bool() == Some(true);
        assert!(local || i["reachable"] == true, "{i:#}");
        assert_eq!(i["state"], "Running", "{i:#}");
        assert!(
            i["stores"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == "counts"),
            "{i:#}"
        );
        for t in i["threads"].as_array().unwrap() {
            assert!(
                t["member_id"].as_str().is_some_and(|m| !m.is_empty()),
                "{t:#}"
            );
            assert_eq!(t["thread_state"], "Running", "{t:#}");
        }
    }
    // The library API agrees with REST.
    let lib = a.metadata_for_all_instances();
    assert_eq!(lib.instances.len(), 2);
    let lib_ids: BTreeSet<String> = lib
        .instances
        .iter()
        .flat_map(|i| i.threads.iter().filter_map(|t| t.group_instance_id.clone()))
        .collect();
    if crate::streams_scenarios::group_protocol() == "streams" {
        // A streams group tells an instance the others' endpoints and
        // partitions, not their threads (as Kafka Streams' metadata); REST
        // fills those in by probing (above). The broker sends the map when
        // it changed, at the member's next heartbeat (5 s apart).
        let remote_has_partitions = || {
            a.metadata_for_all_instances()
                .instances
                .iter()
                .any(|i| !i.local && i.threads.iter().any(|t| !t.partitions.is_empty()))
        };
        assert!(
            wait_until(Duration::from_secs(20), remote_has_partitions),
            "{:?}",
            a.metadata_for_all_instances()
        );
    } else {
        assert_eq!(lib_ids, want);
    }
    assert_eq!(a.metadata_for_store("counts").len(), 2);
    let (st, me) = get(&format!("{}/v1/instances/self", base(&b)), None);
    assert_eq!(st, 200);
    assert_eq!(me["process_id"], b.process_id());
    assert_eq!(me["local"], true);

    // Interactive queries: wait for the counts, then ask `a` for a word
    // that `b` owns: the answer comes from b and is the right count.
    crate::streams_scenarios::await_counts(
        &mut s.reader(),
        &mut BTreeMap::new(),
        &expected,
        &[&a, &b],
    );
    // Key metadata hashes over the topic's partitions, whatever part of the
    // group the instance has heard of yet (it once took the count from the
    // highest task in its view: a view without the last partition's task
    // sent queries to the wrong owner).
    for w in expected.keys() {
        let md = a
            .query_metadata_for_key("counts", w, &Serdes::string())
            .unwrap();
        let want = rill_client::producer::partition_for_key(
            w.as_bytes(),
            crate::streams_scenarios::PARTITIONS as usize,
        );
        assert_eq!(md.partition, want, "{w}: {md:?}");
    }
    let b_endpoint = b.rest_address().unwrap().to_string();
    let a_endpoint = a.rest_address().unwrap().to_string();
    // A task may still move after the counts are in (a streams group's
    // assignment settles over heartbeats): a query that raced a rebalance
    // is asked again, a bounded number of times. One that did not is
    // answered at once, and a wrong answer fails with both instances' view.
    let rebalances = || (a.rebalance_history().len(), b.rebalance_history().len());
    let mut attempt = 0;
    let (wb, wa, forwarded, owned) = loop {
        let before = rebalances();
        let (wb, wa) = (
            word_owned_by(&a, expected.keys(), &b_endpoint),
            word_owned_by(&a, expected.keys(), &a_endpoint),
        );
        let forwarded = get(&format!("{}/v1/stores/counts/keys/{wb}", base(&a)), None);
        let owned = get(&format!("{}/v1/stores/counts/keys/{wa}", base(&a)), None);
        let answered = forwarded.0 == 200 && owned.0 == 200;
        attempt += 1;
        if answered || rebalances() == before || attempt == 5 {
            break (wb, wa, forwarded, owned);
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    let views = || {
        format!(
            "after {attempt} attempt(s); a's threads {:#?}\nb's threads {:#?}\na's rebalances {:#?}\nb's rebalances {:#?}\n{}",
            a.metadata_for_local_threads(),
            b.metadata_for_local_threads(),
            a.rebalance_history(),
            b.rebalance_history(),
            crate::recent_logs(&s.app)
        )
    };
    let (st, ans) = forwarded;
    assert_eq!(st, 200, "{ans:#}\n{}", views());
    assert_eq!(ans["value"], expected[&wb], "{ans:#}");
    assert_eq!(ans["owner"], b_endpoint.as_str(), "{ans:#}");
    assert_eq!(ans["served_by"], "forwarded", "{ans:#}");
    let (st, ans) = owned;
    // A miss here has been seen under load (twice in 2026-12 full suites);
    // asked again over 3 s, the answers say whether the value was late or
    // never there, and the library's own read of the store agrees or not.
    let again = || {
        [200u64, 800, 2000]
            .iter()
            .map(|ms| {
                std::thread::sleep(Duration::from_millis(*ms));
                let (st, ans) = get(&format!("{}/v1/stores/counts/keys/{wa}", base(&a)), None);
                format!(
                    "after +{ms} ms: {st} {ans}; library: {:?}",
                    a.query_store("counts", &wa, &Serdes::string(), &Serdes::i64())
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    if st != 200 {
        panic!(
            "the owner answered {st} {ans:#} for {wa:?}; asked again:\n{}\n{}",
            again(),
            views()
        );
    }
    assert_eq!(ans["served_by"], "owner", "{ans:#}\n{}", views());
    assert_eq!(ans["value"], expected[&wa]);
    // The library's local query: the owner answers, the other names the owner.
    assert_eq!(
        b.query_store("counts", &wb, &Serdes::string(), &Serdes::i64()),
        Ok(Some(expected[&wb]))
    );
    match a.query_store("counts", &wb, &Serdes::string(), &Serdes::i64()) {
        Err(rill_streams::StoreQueryError::NotLocal { owner, .. }) => assert_eq!(owner, b_endpoint),
        other => panic!("expected NotLocal naming {b_endpoint}, got {other:?}"),
    }
    // Unknown store and unknown key: 404 with a reason.
    let (st, ans) = get(&format!("{}/v1/stores/nope/keys/x", base(&a)), None);
    assert_eq!(st, 404, "{ans:#}");
    assert!(ans["reason"].as_str().unwrap().contains("nope"), "{ans:#}");
    let (st, ans) = get(
        &format!("{}/v1/stores/counts/keys/no-such-word", base(&b)),
        None,
    );
    assert_eq!(st, 404, "{ans:#}");
    let (st, ans) = get(
        &format!("{}/v1/stores/counts/keys/zz?key_format=hex", base(&b)),
        None,
    );
    assert_eq!(st, 400, "{ans:#}");
    let (st, _) = get(&format!("{}/v1/no-such-endpoint", base(&b)), None);
    assert_eq!(st, 404);

    // Health, metrics, OpenAPI.
    let (st, h) = get(&format!("{}/health", base(&a)), None);
    assert_eq!((st, &h["ready"]), (200, &Value::Bool(true)), "{h:#}");
    let fetch_metrics = || {
        http()
            .get(&format!("{}/metrics", base(&a)))
            .call()
            .unwrap()
            .into_string()
            .unwrap()
    };
    // Lag is sampled once a second by each thread.
    wait_until(Duration::from_secs(10), || {
        fetch_metrics().contains("rill_streams_records_lag{")
    });
    let metrics = fetch_metrics();
    let processed: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("rill_streams_process_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(processed > 0, "{metrics}");
    for family in [
        "rill_streams_records_lag{",
        "rill_streams_rebalances_total{",
        "rill_streams_commit_latency_max_seconds{",
        "rill_streams_restore_records_total{",
        // A histogram with _count and _sum, not a counter named _sum.
        "# TYPE rill_streams_commit_latency_seconds histogram",
        "rill_streams_commit_latency_seconds_count{",
        "rill_streams_commit_latency_seconds_sum{",
        "rill_streams_commit_latency_seconds_bucket{",
        "process_resident_memory_bytes ",
        "process_cpu_seconds_total ",
        "rill_streams_build_info{version=",
        "rill_streams_state{application_id=",
        "process_max_fds ",
        // `a` keeps its counts in RocksDB, under the default bound (`auto`).
        "rill_streams_rocksdb_memory_bound_bytes{",
        "rill_streams_rocksdb_block_cache_usage_bytes{",
        "rill_streams_rocksdb_memtable_usage_bytes{",
        "store=\"counts\"} ",
    ] {
        assert!(metrics.contains(family), "{family} missing:\n{metrics}");
    }
    let gauge = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing:\n{metrics}"))
    };
    let bound = gauge("rill_streams_rocksdb_memory_bound_bytes{");
    assert!(
        (64.0 * 1048576.0..=1024.0 * 1048576.0).contains(&bound),
        "the default bound is a quarter of memory within 64 MiB..1 GiB: {bound}"
    );
    assert!(gauge("rill_streams_rocksdb_stores{") >= 1.0, "{metrics}");
    assert!(
        gauge("rill_streams_rocksdb_block_cache_usage_bytes{") <= 1.05 * bound,
        "{metrics}"
    );
    // Stable thread labels (no per-process client id), and one 0/1 series
    // per application state with exactly one 1.
    assert!(metrics.contains("thread=\"StreamThread-1\""), "{metrics}");
    assert!(
        metrics
            .split("thread=\"")
            .skip(1)
            .all(|rest| rest.starts_with("StreamThread-")),
        "{metrics}"
    );
    let states: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("rill_streams_state{"))
        .collect();
    assert_eq!(states.len(), 7, "{metrics}");
    assert_eq!(
        states
            .iter()
            .filter(|l| l.ends_with(" 1") || l.ends_with(" 1.0"))
            .count(),
        1,
        "{metrics}"
    );
    let (st, doc) = get(&format!("{}/v1/openapi.json", base(&a)), None);
    assert_eq!(st, 200);
    assert!(doc["paths"]["/v1/shutdown"]["post"].is_object());

    // Tokens: b has none configured → 403; a's: missing or wrong → 401;
    // right token with a bad body → 400. Nothing shut down.
    let (st, ans) = post(&format!("{}/v1/shutdown", base(&b)), Some("anything"), "{}");
    assert_eq!(st, 403, "{ans:#}");
    let (st, _) = post(&format!("{}/v1/shutdown", base(&a)), None, "{}");
    assert_eq!(st, 401);
    let (st, _) = post(&format!("{}/v1/shutdown", base(&a)), Some("wrong"), "{}");
    assert_eq!(st, 401);
    let (st, ans) = post(
        &format!("{}/v1/shutdown", base(&a)),
        Some("secret-a"),
        r#"{"leave_group": "yes"}"#,
    );
    assert_eq!(st, 400, "{ans:#}");
    // The scheme is case-insensitive: `bearer` reaches the body check.
    let (st, ans) = answer(
        "POST",
        "shutdown",
        http()
            .post(&format!("{}/v1/shutdown", base(&a)))
            .set("Authorization", "bearer secret-a")
            .send_string(r#"{"leave_group": "yes"}"#),
    );
    assert_eq!(st, 400, "{ans:#}");
    // Errors from routing and extractors are JSON too: a wrong method
    // (405, with Allow), a key that is not UTF-8 (400).
    let (st, ans) = answer(
        "DELETE",
        "instances",
        http()
            .request("DELETE", &format!("{}/v1/instances", base(&a)))
            .call(),
    );
    assert_eq!(st, 405, "{ans:#}");
    assert!(
        ans["error"].is_string() && ans["reason"].is_string(),
        "{ans:#}"
    );
    let (st, ans) = get(&format!("{}/v1/stores/counts/keys/%FF", base(&a)), None);
    assert!(st == 400 || st == 404, "{st} {ans:#}");
    assert!(
        ans["error"].is_string() && ans["reason"].is_string(),
        "{ans:#}"
    );
    assert_eq!((a.state(), b.state()), (State::Running, State::Running));
    assert!(a.close());
    assert!(b.close());
}

/// `POST /v1/shutdown` with `leave_group`: the instance's static members
/// leave in one batch at once, so the survivor owns every partition long
/// before the 30 s session timeout would have moved them.
pub fn streams_rest_shutdown_leaves_group(bootstrap: &str) {
    let s = Setup::new(bootstrap, "restdown");
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (ia, ib) = (format!("{}-a", s.app), format!("{}-b", s.app));
    s.produce(&lines(0, 50), &mut BTreeMap::new());
    // a also requires the token for reads (rest.read.requires.token).
    let a = start(
        wordcount(&s.input, &s.output, StoreBackend::InMemory),
        s.config(
            d1.path(),
            &[
                ("group.instance.id", ia.clone()),
                ("num.stream.threads", "2".into()),
                ("application.server", "127.0.0.1:0".into()),
                ("rest.admin.token", "tok".into()),
                ("rest.read.requires.token", "true".into()),
            ],
        ),
    );
    let b = start(
        wordcount(&s.input, &s.output, StoreBackend::InMemory),
        rest_config(&s, d2.path(), &ib, Some("tok")),
    );
    let (st, _) = get(&format!("{}/v1/instances", base(&a)), None);
    assert_eq!(st, 401, "reads need the token on a");
    let (st, _) = get(&format!("{}/v1/instances", base(&a)), Some("nope"));
    assert_eq!(st, 401);
    // The dashboard page holds no data, so it loads without the token (its
    // own requests then ask for it); the data stays behind the token.
    let page = http().get(&format!("{}/", base(&a))).call().unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.into_string().unwrap().contains("rill-token"));
    let (st, _) = get(&format!("{}/v1/lag", base(&a)), None);
    assert_eq!(st, 401, "group lag needs the token on a");
    let (st, _) = get(&format!("{}/v1/instances", base(&b)), None);
    assert_eq!(st, 200, "reads are open on b");
    let all: BTreeSet<String> = expected_ids(&ia, 2)
        .into_iter()
        .chain(expected_ids(&ib, 2))
        .collect();
    assert!(
        wait_until(Duration::from_secs(60), || {
            group_members(bootstrap, &s.app)
                .keys()
                .cloned()
                .collect::<BTreeSet<_>>()
                == all
        }),
        "{:?}",
        group_members(bootstrap, &s.app)
    );
    let asked = Instant::now();
    let (st, ans) = post(
        &format!("{}/v1/shutdown", base(&b)),
        Some("tok"),
        r#"{"leave_group": true}"#,
    );
    assert_eq!(st, 202, "{ans:#}");
    let ids: BTreeSet<String> = ans["group_instance_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, expected_ids(&ib, 2));
    let survivors = expected_ids(&ia, 2);
    // Well inside the 30 s session timeout: only a leave gets here this fast.
    let left = wait_until(Duration::from_secs(15), || {
        group_members(bootstrap, &s.app)
            .keys()
            .cloned()
            .collect::<BTreeSet<_>>()
            == survivors
    });
    let left_after = asked.elapsed();
    assert!(
        left,
        "b's members still in the group: {:?}",
        group_members(bootstrap, &s.app)
    );
    assert!(b.wait_for_state(State::NotRunning, Duration::from_secs(30)));
    // The survivor owns every input partition (seen through its REST API).
    let owns_all = wait_until(Duration::from_secs(30), || {
        let (_, view) = get(&format!("{}/v1/instances", base(&a)), Some("tok"));
        let by_id = partitions_by_instance_id(&view, &s.input);
        by_id.keys().cloned().collect::<BTreeSet<_>>() == survivors && covers_exactly_once(&by_id)
    });
    let (_, view) = get(&format!("{}/v1/instances", base(&a)), Some("tok"));
    assert!(owns_all, "{view:#}");
    eprintln!(
        "MEASURED: b's members left the group {:.2} s after the shutdown request; survivor owned every partition after {:.2} s (session timeout 30 s)",
        left_after.as_secs_f64(),
        asked.elapsed().as_secs_f64()
    );
    assert!(a.close());
}

/// A `rill-streams-app` process serving REST.
/// The word-count app (`rill-streams-app`) as a child process with its
/// REST address.
pub(crate) struct RestApp {
    child: std::process::Child,
    pub(crate) rest: String,
    /// Changelog records its tasks restored so far (its `RESTORED n` lines).
    pub(crate) restored: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl RestApp {
    pub(crate) fn start(s: &Setup, state_dir: &Path, instance: &str) -> Self {
        Self::start_with(s, state_dir, instance, &[])
    }

    /// Starts the app with extra environment variables.
    pub(crate) fn start_with(
        s: &Setup,
        state_dir: &Path,
        instance: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let mut child = Self::command(s, state_dir, instance, env)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("app starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = crossbeam_channel::bounded(2);
        let restored = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = restored.clone();
        let name = instance.to_string();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(|l| l.ok())
            {
                if let Some(n) = line.strip_prefix("RESTORED ") {
                    let n: u64 = n.trim().parse().unwrap_or(0);
                    counter.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
                } else if line.starts_with("REST ") || line == "RUNNING" {
                    let _ = tx.send(line);
                } else if line.contains("ERROR") || line.contains("WARN") {
                    // The app's logs (with RUST_LOG set) go to its stdout.
                    eprintln!("[{name}] {line}");
                }
            }
        });
        let rest = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the app prints its REST address");
        let running = rx.recv_timeout(Duration::from_secs(60));
        assert_eq!(running.as_deref(), Ok("RUNNING"));
        RestApp {
            child,
            rest: rest.trim_start_matches("REST ").to_string(),
            restored,
        }
    }

    /// The app's command line: the word count, 2 threads, REST on any port.
    fn command(
        s: &Setup,
        state_dir: &Path,
        instance: &str,
        env: &[(&str, &str)],
    ) -> std::process::Command {
        let mut cmd = std::process::Command::new(crate::streams_scenarios::app_binary());
        cmd.args(["--bootstrap", &s.bootstrap, "--application-id", &s.app])
            .args(["--input", &s.input, "--output", &s.output])
            .args(["--topology", "wordcount"])
            .args(["--state-dir", &state_dir.display().to_string()])
            .args(["--group-instance-id", instance, "--threads", "2"])
            .args(["--application-server", "127.0.0.1:0"])
            // The scenario's group protocol (classic or KIP-1071 streams).
            .env(
                "RILL_CONFIG_GROUP_PROTOCOL",
                crate::streams_scenarios::group_protocol(),
            )
            .envs(env.iter().copied());
        cmd
    }

    /// SIGTERM and wait: a clean close, the static members stay in the group.
    fn stop(&mut self) {
        crate::send_signal(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
    }

    pub(crate) fn kill_9(&mut self) {
        crate::send_signal(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for RestApp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `rill` binary next to the test binaries (built by `cargo test --workspace`).
pub fn rill_binary() -> std::path::PathBuf {
    crate::built_binary("rill")
}

/// The tools take Kafka properties as Kafka's do: `--command-config FILE`
/// (here the only place the cluster is named) and `--set` over it; a key
/// the admin client does not know is refused at once, naming the key and
/// the file, and nothing is created.
pub fn tools_read_kafka_properties_files(bootstrap: &str) {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("tools.properties");
    std::fs::write(
        &good,
        format!(
            "# as for kafka-topics.sh\nbootstrap.servers={bootstrap}\nrequest.timeout.ms=30000\n"
        ),
    )
    .unwrap();
    let topic = crate::unique_topic("props");
    let rill = |args: &[&str]| {
        std::process::Command::new(rill_binary())
            .args(args)
            .output()
            .unwrap()
    };
    let good_arg = good.to_str().unwrap();
    let o = rill(&[
        "topics",
        "create",
        "--command-config",
        good_arg,
        "--set",
        "client.id=rill-tools-test",
        "--topic",
        &topic,
        "--partitions",
        "2",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        wait_until(Duration::from_secs(30), || {
            let o = rill(&["topics", "list", "--command-config", good_arg]);
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l == topic)
        }),
        "the topic never showed up in `rill topics list --command-config`"
    );
    let bad = dir.path().join("consumer.properties");
    std::fs::write(
        &bad,
        format!("bootstrap.servers={bootstrap}\ngroup.id=tools\n"),
    )
    .unwrap();
    let other = crate::unique_topic("props-refused");
    let started = Instant::now();
    let o = rill(&[
        "topics",
        "create",
        "--command-config",
        bad.to_str().unwrap(),
        "--topic",
        &other,
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a consumer key was accepted");
    assert!(
        err.contains("group.id") && err.contains("consumer.properties"),
        "the error names neither the key nor the file: {err}"
    );
    assert!(
        !err.contains('{'),
        "a Debug struct instead of a sentence: {err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refusing took {:?}",
        started.elapsed()
    );
    let topics = admin(bootstrap).list_topics().unwrap();
    assert!(
        !topics.contains(&other),
        "the refused command created {other}"
    );
    let o = rill(&["topics", "list", "--set", "nonsense"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nonsense"));
    // Nothing listens at the address: one sentence naming it, in seconds
    // (it used to hang for 61 s and print a Debug struct).
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let started = Instant::now();
    let o = rill(&["topics", "list", "--bootstrap-server", &dead]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains(&dead) && err.contains("refused"), "{err}");
    assert!(!err.contains('{'), "a Debug struct: {err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    // --if-not-exists (kafka-topics'): an existing topic with the same
    // partition count is success, another count is refused naming both.
    let again = crate::unique_topic("props-again");
    let create = |partitions: &str| {
        rill(&[
            "topics",
            "create",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            &again,
            "--partitions",
            partitions,
            "--if-not-exists",
        ])
    };
    let first = create("2");
    assert!(first.status.success(), "{first:?}");
    let o = create("2");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("exists already"),
        "{o:?}"
    );
    let o = create("3");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains(&again) && err.contains("2 partitions"),
        "{o:?}"
    );
}

/// `rill groups remove-members --from-url` never hits a live member
/// (issue 17). Two instances a and b (separate processes, static):
/// 1. b restarts at a new address (SIGTERM, same `group.instance.id`, a new
///    REST port). Static membership keeps the group stable, so a's
///    metadata still lists b's old address; `--offline-only` must keep b's
///    members anyway (the group has new member ids for them), and the
///    metadata must come to show b's new address.
/// 2. Without `--offline-only`, a removal from a's URL would include a's
///    own members: refused, non-zero, nothing removed.
/// 3. kill -9 b: `--offline-only` removes exactly b's members at once and
///    a takes its partitions; a's members are untouched (same member ids).
pub fn streams_cli_removes_offline_members(bootstrap: &str) {
    let s = Setup::new(bootstrap, "offline");
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (ia, ib) = (format!("{}-a", s.app), format!("{}-b", s.app));
    s.produce(&lines(0, 50), &mut BTreeMap::new());
    let a = RestApp::start(&s, d1.path(), &ia);
    let mut b = RestApp::start(&s, d2.path(), &ib);
    let all: BTreeSet<String> = expected_ids(&ia, 2)
        .into_iter()
        .chain(expected_ids(&ib, 2))
        .collect();
    let url_a = format!("http://{}", a.rest);
    assert!(
        wait_until(Duration::from_secs(60), || {
            let (_, view) = get(&format!("{url_a}/v1/instances"), None);
            let by_id = partitions_by_instance_id(&view, &s.input);
            by_id.keys().cloned().collect::<BTreeSet<_>>() == all && covers_exactly_once(&by_id)
        }),
        "group never settled"
    );
    let remove_members = |extra: &[&str]| {
        std::process::Command::new(rill_binary())
            .args(["groups", "remove-members", "--bootstrap-server", bootstrap])
            .args(["--from-url", &url_a])
            .args(extra)
            .output()
            .unwrap()
    };
    // `groups describe --from-url` shows the generation classic
    // DescribeGroups does not report.
    let described = std::process::Command::new(rill_binary())
        .args(["groups", "describe", "--bootstrap-server", bootstrap])
        .args(["--group", &s.app, "--from-url", &url_a])
        .output()
        .unwrap();
    let described_out = String::from_utf8_lossy(&described.stdout);
    assert!(
        described.status.success() && !described_out.contains("generation n/a"),
        "{described:?}"
    );
    // Every thread's member is listed by its instance id; a streams group
    // (KIP-1071) also shows its target assignment epoch and each member's
    // active tasks, all of them assigned.
    for id in &all {
        assert!(
            described_out.contains(id.as_str()),
            "{id} missing: {described_out}"
        );
    }
    if crate::streams_scenarios::group_protocol() == "streams" {
        assert!(
            described_out.contains("target assignment epoch")
                && described_out.contains("TARGET ACTIVE"),
            "{described_out}"
        );
        let json = std::process::Command::new(rill_binary())
            .args([
                "groups",
                "describe",
                "--json",
                "--bootstrap-server",
                bootstrap,
            ])
            .args(["--group", &s.app])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&json.stdout).unwrap_or_else(|e| {
            panic!(
                "groups describe --json: {e}: {}",
                String::from_utf8_lossy(&json.stdout)
            )
        });
        let members = v[0]["streams"]["members"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let active: Vec<String> = members
            .iter()
            .flat_map(|m| m["active_tasks"].as_array().cloned().unwrap_or_default())
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect();
        let unique: BTreeSet<&String> = active.iter().collect();
        let subtopologies: BTreeSet<&str> =
            active.iter().filter_map(|t| t.split('_').next()).collect();
        let every: BTreeSet<String> = subtopologies
            .iter()
            .flat_map(|st| (0..PARTITIONS).map(move |p| format!("{st}_{p}")))
            .collect();
        assert_eq!(members.len(), all.len(), "{v:#}");
        assert!(
            subtopologies.contains("0")
                && unique.len() == active.len()
                && unique.into_iter().cloned().collect::<BTreeSet<_>>() == every,
            "every task active exactly once on the described members: {v:#}"
        );
    }
    // 1. b comes back at a new address.
    let old_b = b.rest.clone();
    b.stop();
    b = RestApp::start(&s, d2.path(), &ib);
    assert_ne!(b.rest, old_b, "the restarted instance got the same port");
    let streams_group = crate::streams_scenarios::group_protocol() == "streams";
    if !streams_group {
        let dry = remove_members(&["--offline-only", "--dry-run"]);
        let dry_out = String::from_utf8_lossy(&dry.stdout);
        assert!(
            dry.status.success(),
            "{dry_out}{}",
            String::from_utf8_lossy(&dry.stderr)
        );
        assert!(
            !dry_out.contains("would remove"),
            "live members listed for removal after a restart at a new address: {dry_out}"
        );
    }
    // Every instance's metadata comes to show b's new address.
    let moved = wait_until(Duration::from_secs(60), || {
        let (_, view) = get(&format!("{url_a}/v1/instances"), None);
        view["instances"]
            .as_array()
            .is_some_and(|is| is.iter().any(|i| i["endpoint"] == b.rest.as_str()))
    });
    assert!(
        moved,
        "a's metadata never showed b at {}: {:#}",
        b.rest,
        get(&format!("{url_a}/v1/instances"), None).1
    );
    if streams_group {
        // KIP-1071: Kafka has no request that removes a streams-group
        // member; the CLI says so and removes nothing.
        let before = group_members(bootstrap, &s.app);
        let refused = remove_members(&["--offline-only"]);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success()
                && err.contains("is a streams group")
                && err.contains("KIP-1071"),
            "{refused:?}"
        );
        assert_eq!(
            group_members(bootstrap, &s.app),
            before,
            "a refusal removed members"
        );
        eprintln!("SKIPPED under group.protocol=streams: removing offline members (steps 2-3); Kafka has no request that removes a streams-group member");
        return;
    }
    // 2. A removal that includes the answering instance is refused.
    let before = group_members(bootstrap, &s.app);
    let refused = remove_members(&[]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        err.contains("refusing") && err.contains(&format!("{ia}-thread-1")),
        "{err}"
    );
    assert_eq!(
        group_members(bootstrap, &s.app),
        before,
        "a refusal removed members"
    );
    assert_eq!(before.keys().cloned().collect::<BTreeSet<_>>(), all);
    // 3. b dies.
    b.kill_9();
    // Static members of a killed process stay until the session timeout
    // (30 s here); the CLI removes them now.
    let dry = std::process::Command::new(rill_binary())
        .args(["groups", "remove-members", "--bootstrap-server", bootstrap])
        .args(["--from-url", &url_a, "--offline-only", "--dry-run"])
        .output()
        .unwrap();
    let dry_out = String::from_utf8_lossy(&dry.stdout);
    assert!(
        dry.status.success(),
        "{dry_out}{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    for id in expected_ids(&ib, 2) {
        assert!(dry_out.contains(&format!("would remove {id}")), "{dry_out}");
    }
    for id in expected_ids(&ia, 2) {
        assert!(
            !dry_out.contains(&format!("would remove {id}"))
                && dry_out.contains(&format!(
                    "keeping {id}: it is a thread of the instance that answered"
                )),
            "live member listed: {dry_out}"
        );
    }
    assert_eq!(
        group_members(bootstrap, &s.app),
        before,
        "a dry run removed something"
    );
    let out = std::process::Command::new(rill_binary())
        .args(["groups", "remove-members", "--bootstrap-server", bootstrap])
        .args(["--from-url", &url_a, "--offline-only"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rill failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for id in expected_ids(&ib, 2) {
        assert!(
            stdout.contains(&format!("removed {id} from group {}", s.app)),
            "{stdout}"
        );
    }
    let survivors = expected_ids(&ia, 2);
    let after = group_members(bootstrap, &s.app);
    assert_eq!(
        after.keys().cloned().collect::<BTreeSet<_>>(),
        survivors,
        "{stdout}"
    );
    for id in &survivors {
        assert_eq!(after[id], before[id], "the live member {id} was touched");
    }
    // The survivor takes every partition (it rebalances without the dead one).
    let owns_all = wait_until(Duration::from_secs(30), || {
        let (_, view) = get(&format!("{url_a}/v1/instances"), None);
        let by_id = partitions_by_instance_id(&view, &s.input);
        by_id.keys().cloned().collect::<BTreeSet<_>>() == survivors && covers_exactly_once(&by_id)
    });
    assert!(
        owns_all,
        "{:#}",
        get(&format!("{url_a}/v1/instances"), None).1
    );
    // Removing an id the group does not know fails clearly, non-zero.
    let bad = std::process::Command::new(rill_binary())
        .args(["groups", "remove-members", "--bootstrap-server", bootstrap])
        .args(["--group", &s.app, "--instance-id", "no-such-instance"])
        .output()
        .unwrap();
    let bad_out = String::from_utf8_lossy(&bad.stdout);
    assert!(!bad.status.success(), "{bad_out}");
    assert!(bad_out.contains("FAILED no-such-instance"), "{bad_out}");
    // `rill instances` shows the survivor's ids.
    let inst = std::process::Command::new(rill_binary())
        .args(["instances", "--url", &url_a])
        .output()
        .unwrap();
    let inst_out = String::from_utf8_lossy(&inst.stdout);
    assert!(inst.status.success(), "{inst_out}");
    for id in &survivors {
        assert!(inst_out.contains(id.as_str()), "{inst_out}");
    }
    // It fits a terminal; --wide has the member ids.
    assert!(
        inst_out.lines().all(|l| l.chars().count() <= 100),
        "wider than 100 columns:\n{inst_out}"
    );
    let wide = std::process::Command::new(rill_binary())
        .args(["instances", "--wide", "--url", &url_a])
        .output()
        .unwrap();
    let wide_out = String::from_utf8_lossy(&wide.stdout);
    assert!(wide_out.contains("MEMBER ID"), "{wide_out}");
    // A refused connection is one sentence naming the URL once.
    let dead = std::process::Command::new(rill_binary())
        .args(["instances", "--url", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&dead.stderr);
    assert!(!dead.status.success());
    assert_eq!(err.matches("127.0.0.1:1").count(), 1, "{err}");
    drop(a);
}

/// Only `RILL_CONFIG_*` variables are configuration (issue 17): an app
/// starts with `RILL_LOG` and `RILL_REST_TOKEN` set (the first stopped
/// every app with "unknown configuration key" when every `RILL_*` variable
/// was read as one), `RILL_CONFIG_NUM_STREAM_THREADS=3` gives it three
/// threads, and a misspelt `RILL_CONFIG_` key stops it at once with an
/// error that names the variable.
pub fn streams_config_from_environment(bootstrap: &str) {
    let s = Setup::new(bootstrap, "envcfg");
    let dir = tempfile::tempdir().unwrap();
    let id = format!("{}-a", s.app);
    let app = RestApp::start_with(
        &s,
        dir.path(),
        &id,
        &[
            ("RILL_LOG", "warn"),
            ("RILL_REST_TOKEN", "not-a-config-key"),
            ("RILL_CONFIG_NUM_STREAM_THREADS", "3"),
        ],
    );
    let url = format!("http://{}/v1/instances", app.rest);
    let (status, view) = get(&url, None);
    assert_eq!(status, 200, "{view:#}");
    let ids: BTreeSet<String> = partitions_by_instance_id(&view, &s.input)
        .into_keys()
        .collect();
    assert_eq!(ids, expected_ids(&id, 3), "{view:#}");
    drop(app);

    let started = Instant::now();
    let out = RestApp::command(
        &s,
        dir.path(),
        &id,
        &[("RILL_CONFIG_NUM_STREAM_THREAD", "3")],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("num.stream.thread")
            && stderr.contains("environment variable RILL_CONFIG_NUM_STREAM_THREAD"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The dashboard renders the live group in headless Chromium (interop
/// only: it installs Debian's chromium).
pub fn dashboard_renders_live_group(bootstrap: &str) {
    let chromium = crate::tools::chromium().expect("chromium installs");
    let s = Setup::new(bootstrap, "dash");
    let dir = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let inst = format!("{}-dash", s.app);
    let inst_b = format!("{}-gone", s.app);
    let mut expected = BTreeMap::new();
    s.produce(&lines(0, 20), &mut expected);
    let app = start(
        wordcount(&s.input, &s.output, StoreBackend::InMemory),
        rest_config(&s, dir.path(), &inst, None),
    );
    // A second instance that stops: its static members stay in the group
    // (until the session timeout), so its partitions stall and its address
    // stops answering.
    let b = start(
        wordcount(&s.input, &s.output, StoreBackend::InMemory),
        rest_config(&s, dir_b.path(), &inst_b, None),
    );
    // Both instances' threads (probed), and every input partition owned
    // once in the group view itself (unprobed): a streams group reports
    // the other instance's tasks at a later heartbeat than its threads'
    // own answers, and the stopped instance must be known with its tasks.
    let settled = wait_until(Duration::from_secs(60), || {
        let (_, view) = get(&format!("{}/v1/instances", base(&app)), None);
        let (_, unprobed) = get(&format!("{}/v1/instances?probe=false", base(&app)), None);
        partitions_by_instance_id(&view, &s.input).len() == 4
            && covers_exactly_once(&partitions_by_instance_id(&unprobed, &s.input))
    });
    assert!(settled, "the two instances never shared the input");
    let protocol = crate::streams_scenarios::group_protocol();
    let (_, view) = get(&format!("{}/v1/instances", base(&app)), None);
    assert_eq!(view["group_protocol"], protocol, "{view:#}");
    let b_ids = expected_ids(&inst_b, 2);
    let b_address = b.rest_address().expect("REST server runs").to_string();
    assert!(b.close());
    // Input for every partition after b stopped: b's stay behind.
    s.produce(&lines(20, 200), &mut expected);
    let generation = app
        .latest_assignment()
        .map(|a| a.generation)
        .expect("assigned");
    let (st, lag) = get(&format!("{}/v1/lag", base(&app)), None);
    assert_eq!(st, 200, "GET /v1/lag: {lag:#}");
    let profile = tempfile::tempdir().unwrap();
    // Headless Chromium on the page, the page's scripts given 10 s.
    let page = |what: &str| {
        std::process::Command::new(&chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--virtual-time-budget=10000",
                "--window-size=1100,1400",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(what)
            .arg(format!("{}/", base(&app)))
            .output()
            .expect("chromium runs")
    };
    let out = page("--dump-dom");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The rows come from the page's JavaScript calling the REST API.
    for id in expected_ids(&inst, 2) {
        assert!(
            dom.contains(&format!("data-instance-id=\"{id}\"")),
            "{id} not rendered:\n{dom}"
        );
    }
    assert!(
        dom.contains(&format!("<b id=\"generation\">{generation}</b>")),
        "generation {generation} not rendered:\n{dom}"
    );
    assert!(
        dom.contains(&format!("{}-", s.input)),
        "partitions not rendered:\n{dom}"
    );
    // Group-wide lag: every input partition, and the stopped instance's
    // partitions behind (their lag comes from committed vs end offsets,
    // which no thread of this instance fetches).
    for p in 0..PARTITIONS {
        assert!(
            dom.contains(&format!("data-lag-partition=\"{}-{p}\"", s.input)),
            "partition {p} missing from the group lag:\n{dom}"
        );
    }
    let stalled = dom
        .split("<tr data-lag-partition=")
        .skip(1)
        .filter(|row| {
            // A streams group names other instances by endpoint only.
            b_ids
                .iter()
                .any(|id| row.contains(&format!("data-owner=\"{id}\"")))
                || (protocol == "streams" && row.contains(&format!(" @ {b_address}<")))
        })
        .filter(|row| !row.contains("data-lag=\"0\""))
        .count();
    assert!(
        stalled > 0,
        "no lag shown for the stopped instance's partitions:\n{dom}"
    );
    // The stopped instance: unreachable, for how long, and what to run
    // (a streams group has no removal request: its tasks move when the
    // sessions end, and the page says so instead).
    assert!(
        dom.contains("unreachable, down for") && dom.contains("data-down-seconds="),
        "no downtime for the stopped instance:\n{dom}"
    );
    if protocol == "streams" {
        assert!(
            dom.contains("streams group, member epoch")
                && dom.contains("sessions end")
                && dom.contains("streams.session.timeout.ms")
                // (the page's script holds the classic hint's text; rendered,
                // it would carry this page's address)
                && !dom.contains("--from-url http"),
            "no streams-group wording:\n{dom}"
        );
    } else {
        assert!(
            dom.contains("rill groups remove-members") && dom.contains("--offline-only"),
            "no removal command:\n{dom}"
        );
    }
    // Time ticks in UTC and generation ticks on the timeline.
    assert!(
        dom.contains("time (UTC)") && dom.contains("class=\"gen-tick\""),
        "timeline axes missing:\n{dom}"
    );
    // `RILL_DASHBOARD_SCREENSHOT=<file.png>` also saves what the page looks
    // like (docs/img/dashboard.png was made so).
    if let Some(png) = std::env::var_os("RILL_DASHBOARD_SCREENSHOT") {
        let shot = page(&format!(
            "--screenshot={}",
            std::path::Path::new(&png).display()
        ));
        assert!(shot.status.success(), "{shot:?}");
    }
    assert!(app.close());
}
