//! Operator commands: `rill instances`, `rill shutdown`, `rill groups ...`
//! and `rill topics ...`.
//!
//! The instance commands talk to a Rill app's REST API (JSON shapes in
//! runtime/streams/src/openapi.json); the group and topic commands use the admin client
//! against any Kafka-compatible cluster. `groups remove-members` is KIP-345's
//! batch removal of static members by `group.instance.id` (one LeaveGroup
//! v3+ carrying every id), with `--from-url` taking the ids from an
//! instance's metadata and `--offline-only` keeping only the members
//! proven offline (see `offline`: probes, the answering instance, member
//! ids in DescribeGroups); without `--offline-only` a `--from-url` removal
//! that would hit a live member is refused.
//!
//! Every failure names what failed and the process exits non-zero.

use std::time::{Duration, Instant};

use crate::offline;
use crate::settings::{CommandConfig, REST_TOKEN};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use rill_client::admin::{GroupDescription, NewTopic, StreamsGroupDetails};
use serde_json::{json, Value};

pub type CliResult = Result<(), String>;

const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// GET a JSON document from an instance.
fn get_json(url: &str, token: Option<&str>) -> Result<Value, String> {
    let agent = crate::http::agent(HTTP_TIMEOUT);
    let mut req = agent.get(url);
    if let Some(t) = token {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    match req.call() {
        Ok(r) => r
            .into_json()
            .map_err(|e| format!("{url} did not answer JSON: {e}")),
        Err(ureq::Error::Status(code, r)) => Err(format!(
            "{url} answered {code}: {}",
            r.into_string().unwrap_or_default()
        )),
        Err(e) => Err(format!("{url}: {}", transport_reason(&e))),
    }
}

/// Why a request got no HTTP answer, without the URL (ureq's own message
/// repeats it, and every caller names the URL already).
fn transport_reason(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Status(code, _) => format!("answered {code}"),
        ureq::Error::Transport(t) => match t.message() {
            Some(m) => format!("{} ({m})", t.kind()).to_lowercase(),
            None => t.kind().to_string().to_lowercase(),
        },
    }
}

/// Whether anything answers HTTP at `endpoint` (any status counts: a
/// starting instance answers /health with 503 and is still alive).
fn answers(endpoint: &str) -> bool {
    let agent = crate::http::agent(Duration::from_secs(2));
    match agent
        .get(&format!("{}://{endpoint}/health", crate::http::scheme()))
        .call()
    {
        Ok(_) | Err(ureq::Error::Status(..)) => true,
        Err(_) => false,
    }
}

fn spinner(msg: impl Into<String>) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("template"));
    pb.set_message(msg.into());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// A thread's standby tasks, each with its lag when the answering
/// instance knows it (`1_0:12` — 12 changelog records behind).
fn standbys(t: &Value) -> String {
    let list: Vec<String> = t["standby_tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|id| {
            let id = s(id);
            match t["standby_lags"][&id].as_i64() {
                Some(lag) => format!("{id}:{lag}"),
                None => id,
            }
        })
        .collect();
    if list.is_empty() {
        "-".into()
    } else {
        list.join(",")
    }
}

fn partitions(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|p| format!("{}-{}", s(&p["topic"]), p["partition"]))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Prints rows as aligned columns.
fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        line(r.clone());
    }
}

// ---------------------------------------------------------------- instances

#[derive(Args, Debug)]
pub struct InstancesArgs {
    /// An instance's REST address (http://HOST:PORT).
    #[arg(long)]
    url: String,
    /// Bearer token, if the instance requires one for reads (or
    /// rest.admin.token in --command-config).
    #[arg(long, env = "RILL_REST_TOKEN")]
    token: Option<String>,
    #[command(flatten)]
    settings: CommandConfig,
    /// Print the JSON answer instead of a table.
    #[arg(long)]
    json: bool,
    /// Every column (member ids, reachability, each partition), wider than
    /// a terminal.
    #[arg(long)]
    wide: bool,
}

pub fn instances(a: InstancesArgs) -> CliResult {
    let token = a.settings.token(a.token.as_deref())?;
    let view = get_json(
        &format!("{}/v1/instances", a.settings.rest_base(&a.url)?),
        token.as_deref(),
    )?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&view).expect("json"));
        return Ok(());
    }
    println!(
        "application {}  generation {}",
        s(&view["application_id"]),
        s(&view["generation"])
    );
    let mut rows = Vec::new();
    for i in view["instances"].as_array().into_iter().flatten() {
        let reach = match i["reachable"].as_bool() {
            Some(false) => "unreachable",
            Some(true) => "up",
            None if i["local"].as_bool() == Some(true) => "up (answered)",
            None => "?",
        };
        for t in i["threads"].as_array().into_iter().flatten() {
            if a.wide {
                rows.push(vec![
                    s(&i["endpoint"]),
                    s(&i["state"]),
                    reach.to_string(),
                    s(&t["thread_name"]),
                    s(&t["group_instance_id"]),
                    s(&t["member_id"]),
                    s(&t["thread_state"]),
                    partitions(&t["partitions"]),
                    standbys(t),
                ]);
            } else {
                // Fits 100 columns (with ids of ~35 characters): a static
                // thread by its group.instance.id (which ends in its
                // number), a dynamic one by its number, the partitions and
                // standby tasks by count; --wide and --json have the rest.
                let name = s(&t["thread_name"]);
                let thread = match s(&t["group_instance_id"]) {
                    id if !id.is_empty() => id,
                    _ => name
                        .rsplit_once("StreamThread-")
                        .map_or(name.clone(), |(_, n)| format!("thread-{n} (dynamic)")),
                };
                let state = match (s(&i["state"]), reach) {
                    (st, "unreachable") => format!("{st} (unreachable)"),
                    (st, _) => st,
                };
                rows.push(vec![
                    s(&i["endpoint"]),
                    state,
                    thread,
                    s(&t["thread_state"]),
                    t["partitions"].as_array().map_or(0, Vec::len).to_string(),
                    t["standby_tasks"]
                        .as_array()
                        .map_or(0, Vec::len)
                        .to_string(),
                ]);
            }
        }
    }
    if a.wide {
        table(
            &[
                "ENDPOINT",
                "STATE",
                "REACHABLE",
                "THREAD",
                "GROUP.INSTANCE.ID",
                "MEMBER ID",
                "THREAD STATE",
                "PARTITIONS",
                "STANDBY TASKS (TASK:LAG)",
            ],
            &rows,
        );
    } else {
        table(
            &[
                "ENDPOINT",
                "STATE",
                "THREAD (GROUP.INSTANCE.ID)",
                "THREAD STATE",
                "PARTS",
                "STANDBY",
            ],
            &rows,
        );
    }
    Ok(())
}

// ----------------------------------------------------------------- shutdown

#[derive(Args, Debug)]
pub struct ShutdownArgs {
    /// The instance's REST address (http://HOST:PORT).
    #[arg(long)]
    url: String,
    /// Its static members leave the group at once (batch LeaveGroup), so
    /// its partitions move now instead of after session.timeout.ms.
    #[arg(long)]
    leave_group: bool,
    /// The instance's rest.admin.token (or rest.admin.token in --command-config).
    #[arg(long, env = "RILL_REST_TOKEN")]
    token: Option<String>,
    #[command(flatten)]
    settings: CommandConfig,
    /// Return without waiting for the instance to stop answering.
    #[arg(long)]
    no_wait: bool,
}

pub fn shutdown(a: ShutdownArgs) -> CliResult {
    let Some(token) = a.settings.token(a.token.as_deref())? else {
        return Err(format!(
            "no REST token: pass --token, set RILL_REST_TOKEN, or put {REST_TOKEN} in --command-config"
        ));
    };
    let base = a.settings.rest_base(&a.url)?;
    let url = format!("{base}/v1/shutdown");
    let agent = crate::http::agent(HTTP_TIMEOUT);
    let answer = agent
        .post(&url)
        .set("Authorization", &format!("Bearer {token}"))
        .send_json(json!({"leave_group": a.leave_group}));
    let body: Value = match answer {
        Ok(r) => r.into_json().map_err(|e| format!("{url}: {e}"))?,
        Err(ureq::Error::Status(code, r)) => {
            return Err(format!(
                "{url} refused the shutdown ({code}): {}",
                r.into_string().unwrap_or_default()
            ))
        }
        Err(e) => return Err(format!("{url}: {}", transport_reason(&e))),
    };
    println!(
        "shutting down process {} (leave_group: {}, members {})",
        s(&body["process_id"]),
        a.leave_group,
        s(&body["group_instance_ids"])
    );
    if a.no_wait {
        return Ok(());
    }
    let endpoint = base
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .to_string();
    let pb = spinner(format!("waiting for {endpoint} to stop"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while answers(&endpoint) {
        if Instant::now() > deadline {
            pb.finish_and_clear();
            return Err(format!("{endpoint} still answers after 60 s"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    pb.finish_and_clear();
    println!("{endpoint} stopped");
    Ok(())
}

// ------------------------------------------------------------------- groups

#[derive(Subcommand, Debug)]
pub enum GroupsCommand {
    /// List consumer groups.
    List(GroupsListArgs),
    /// Describe groups: members with member id, group.instance.id, client id, host, assignment.
    Describe(GroupsDescribeArgs),
    /// Remove static members by group.instance.id in one batch LeaveGroup (KIP-345).
    RemoveMembers(RemoveMembersArgs),
}

#[derive(Args, Debug)]
pub struct GroupsListArgs {
    /// The cluster (`bootstrap.servers`; or in --command-config).
    #[arg(long)]
    bootstrap_server: Option<String>,
    #[command(flatten)]
    settings: CommandConfig,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct GroupsDescribeArgs {
    /// The cluster (`bootstrap.servers`; or in --command-config).
    #[arg(long)]
    bootstrap_server: Option<String>,
    #[command(flatten)]
    settings: CommandConfig,
    /// The group (default: every group).
    #[arg(long)]
    group: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// A Rill instance's REST address: its metadata gives the generation
    /// that classic DescribeGroups does not report.
    #[arg(long)]
    from_url: Option<String>,
    /// Bearer token for that REST read, if required.
    #[arg(long, env = "RILL_REST_TOKEN")]
    token: Option<String>,
}

#[derive(Args, Debug)]
pub struct RemoveMembersArgs {
    /// The cluster (`bootstrap.servers`; or in --command-config).
    #[arg(long)]
    bootstrap_server: Option<String>,
    #[command(flatten)]
    settings: CommandConfig,
    /// The group (the application.id); with --from-url it defaults to the app's.
    #[arg(long)]
    group: Option<String>,
    /// A group.instance.id to remove (repeatable).
    #[arg(
        long = "instance-id",
        required_unless_present = "from_url",
        conflicts_with = "from_url"
    )]
    instance_ids: Vec<String>,
    /// Take the instance ids from an instance's REST API (GET /v1/instances).
    #[arg(long)]
    from_url: Option<String>,
    /// With --from-url: only instances whose REST endpoint no longer answers.
    #[arg(long, requires = "from_url")]
    offline_only: bool,
    /// Show what would be removed; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Bearer token for the REST read, if required (or rest.admin.token in
    /// --command-config).
    #[arg(long, env = "RILL_REST_TOKEN")]
    token: Option<String>,
}

pub fn groups(cmd: GroupsCommand) -> CliResult {
    match cmd {
        GroupsCommand::List(a) => groups_list(a),
        GroupsCommand::Describe(a) => groups_describe(a),
        GroupsCommand::RemoveMembers(a) => remove_members(a),
    }
}

fn groups_list(a: GroupsListArgs) -> CliResult {
    let groups = a
        .settings
        .admin(a.bootstrap_server.as_deref())?
        .list_groups()
        .map_err(|e| format!("listing groups: {e}"))?;
    if a.json {
        let v: Vec<Value> = groups
            .iter()
            .map(|g| json!({"group_id": g.group_id, "protocol_type": g.protocol_type, "state": g.state, "group_type": g.group_type}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            vec![
                g.group_id.clone(),
                g.group_type.clone(),
                g.protocol_type.clone(),
                g.state.clone(),
            ]
        })
        .collect();
    table(&["GROUP", "TYPE", "PROTOCOL TYPE", "STATE"], &rows);
    Ok(())
}

fn groups_describe(a: GroupsDescribeArgs) -> CliResult {
    let admin = a.settings.admin(a.bootstrap_server.as_deref())?;
    let names: Vec<String> = match a.group {
        Some(g) => vec![g],
        None => admin
            .list_groups()
            .map_err(|e| format!("listing groups: {e}"))?
            .into_iter()
            .map(|g| g.group_id)
            .collect(),
    };
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let described = admin
        .describe_groups(&refs)
        .map_err(|e| format!("describing groups {names:?}: {e}"))?;
    // The application's generation as its own metadata knows it.
    let rest_generation: Option<(String, i64)> = match &a.from_url {
        Some(url) => {
            let view = get_json(
                &format!("{}/v1/instances?probe=false", a.settings.rest_base(url)?),
                a.settings.token(a.token.as_deref())?.as_deref(),
            )?;
            view["generation"]
                .as_i64()
                .map(|g| (s(&view["application_id"]), g))
        }
        None => None,
    };
    let mut out = Vec::new();
    let mut failed = Vec::new();
    for (name, d) in described {
        match d {
            Ok(d) => out.push(d),
            Err(e) => failed.push(format!("group {name}: {e}")),
        }
    }
    if a.json {
        let v: Vec<Value> = out
            .iter()
            .map(|d| {
                json!({
                    "group_id": d.group_id, "state": d.state, "protocol_type": d.protocol_type,
                    "protocol": d.protocol, "generation": d.generation,
                    "consumer_protocol": d.consumer_protocol,
                    "members": d.members.iter().map(|m| json!({
                        "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id, "host": m.host,
                        "assignment": m.assignment.iter().map(|tp| json!({"topic": tp.topic, "partition": tp.partition})).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                    "streams": d.streams.as_ref().map(|st| json!({
                        "target_assignment_epoch": st.target_assignment_epoch,
                        "members": st.members.iter().map(|m| json!({
                            "member_id": m.member_id, "group_instance_id": m.instance_id,
                            "member_epoch": m.member_epoch, "process_id": m.process_id,
                            "endpoint": m.endpoint, "active_tasks": m.active_tasks,
                            "standby_tasks": m.standby_tasks, "warmup_tasks": m.warmup_tasks,
                            "target_active_tasks": m.target_active_tasks,
                        })).collect::<Vec<_>>(),
                    })),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else {
        for d in &out {
            // Classic DescribeGroups carries no generation (Kafka's tool
            // does not show one either); KIP-848 groups have an epoch.
            let generation = match (d.consumer_protocol, d.generation) {
                (true, e) => format!("epoch {e}"),
                (false, g) if g >= 0 => format!("generation {g}"),
                (false, _) => match &rest_generation {
                    Some((app, g)) if *app == d.group_id => {
                        format!("generation {g} (from the app's metadata)")
                    }
                    _ => "generation n/a (classic DescribeGroups does not report it; --from-url reads it from a Rill app)".into(),
                },
            };
            if let Some(st) = &d.streams {
                print_streams_group(d, st);
                continue;
            }
            println!(
                "group {}  state {}  {generation}  protocol {}",
                d.group_id, d.state, d.protocol
            );
            let rows: Vec<Vec<String>> = d
                .members
                .iter()
                .map(|m| {
                    vec![
                        m.member_id.clone(),
                        m.group_instance_id.clone().unwrap_or_else(|| "-".into()),
                        m.client_id.clone(),
                        m.host.clone(),
                        m.assignment
                            .iter()
                            .map(|tp| tp.to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                    ]
                })
                .collect();
            table(
                &[
                    "MEMBER ID",
                    "GROUP.INSTANCE.ID",
                    "CLIENT ID",
                    "HOST",
                    "ASSIGNMENT",
                ],
                &rows,
            );
            println!();
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// A KIP-1071 streams group as StreamsGroupDescribe reports it: the group
/// and target assignment epochs (equal once the group has reconciled), and
/// each member's tasks — what it runs now and what the target gives it.
fn print_streams_group(d: &GroupDescription, st: &StreamsGroupDetails) {
    println!(
        "group {}  state {}  group epoch {}  target assignment epoch {}  protocol streams",
        d.group_id, d.state, d.generation, st.target_assignment_epoch
    );
    let tasks = |t: &[String]| {
        if t.is_empty() {
            "-".to_string()
        } else {
            t.join(",")
        }
    };
    let rows: Vec<Vec<String>> = st
        .members
        .iter()
        .map(|m| {
            vec![
                m.member_id.clone(),
                m.instance_id.clone().unwrap_or_else(|| "-".into()),
                m.member_epoch.to_string(),
                m.process_id.clone(),
                m.endpoint.clone().unwrap_or_else(|| "-".into()),
                tasks(&m.active_tasks),
                tasks(&m.standby_tasks),
                tasks(&m.warmup_tasks),
                tasks(&m.target_active_tasks),
            ]
        })
        .collect();
    table(
        &[
            "MEMBER ID",
            "GROUP.INSTANCE.ID",
            "EPOCH",
            "PROCESS",
            "ENDPOINT",
            "ACTIVE",
            "STANDBY",
            "WARM-UP",
            "TARGET ACTIVE",
        ],
        &rows,
    );
    println!();
}

fn remove_members(a: RemoveMembersArgs) -> CliResult {
    let admin = a.settings.admin(a.bootstrap_server.as_deref())?;
    // Live instances (REST bases) to tell to rejoin after a removal.
    let mut live_instances: Vec<String> = Vec::new();
    let describe = |group: &str| -> Result<GroupDescription, String> {
        let d = admin
            .describe_groups(&[group])
            .map_err(|e| format!("describing group {group}: {e}"))?
            .remove(group)
            .unwrap_or_else(|| Err(rill_client::Error::IllegalState("no answer".into())))
            .map_err(|e| format!("describing group {group}: {e}"))?;
        if d.streams.is_some() {
            // LeaveGroup only removes classic and KIP-848 members; Kafka
            // has no request that removes a KIP-1071 streams-group member.
            return Err(format!(
                "group {group} is a streams group (group.protocol=streams, KIP-1071): Kafka has no request that removes its members, so nothing was removed; a stopped member's tasks move when its session ends (the group config streams.session.timeout.ms)"
            ));
        }
        Ok(d)
    };
    let (group, targets): (String, Vec<(String, Option<String>)>) = match &a.from_url {
        None => {
            let group = a
                .group
                .clone()
                .ok_or("--group is required with --instance-id")?;
            describe(&group)?;
            (
                group,
                a.instance_ids.iter().map(|i| (i.clone(), None)).collect(),
            )
        }
        Some(url) => {
            let token = a.settings.token(a.token.as_deref())?;
            let view = get_json(
                &format!("{}/v1/instances?probe=false", a.settings.rest_base(url)?),
                token.as_deref(),
            )?;
            let app = s(&view["application_id"]);
            let group = a.group.clone().unwrap_or(app);
            let listed = offline::listed(&view);
            let endpoints: std::collections::BTreeSet<String> = listed
                .iter()
                .filter(|l| !l.local)
                .filter_map(|l| l.endpoint.clone())
                .collect();
            let pb = spinner(format!("checking {} instances", endpoints.len()));
            let probes: std::collections::BTreeMap<String, offline::Probe> =
                std::thread::scope(|sc| {
                    let handles: Vec<_> = endpoints
                        .iter()
                        .map(|e| {
                            let token = token.as_deref();
                            sc.spawn(move || (e.clone(), offline::probe(e, token)))
                        })
                        .collect();
                    handles.into_iter().filter_map(|h| h.join().ok()).collect()
                });
            let described = describe(&group)?;
            let current: std::collections::BTreeMap<String, String> = described
                .members
                .into_iter()
                .filter_map(|m| m.group_instance_id.map(|i| (i, m.member_id)))
                .collect();
            let plan = offline::plan(
                &listed,
                &probes,
                &current,
                view["generation"].as_i64().unwrap_or(-1),
            );
            live_instances.push(a.settings.rest_base(url)?);
            live_instances.extend(
                probes
                    .iter()
                    .filter(|(_, p)| matches!(p, offline::Probe::Threads(_)))
                    .map(|(e, _)| format!("{}://{e}", crate::http::scheme())),
            );
            pb.finish_and_clear();
            if !a.offline_only {
                // Every listed id was asked for: refuse if any is live.
                let live: Vec<String> = plan
                    .keep
                    .iter()
                    .filter(|(_, why)| why.is_live())
                    .map(|(id, why)| format!("{id} ({why})"))
                    .collect();
                if !live.is_empty() {
                    return Err(format!(
                        "refusing to remove members of group {group} that are alive: {}; nothing was removed (--offline-only removes only the offline ones)",
                        live.join("; ")
                    ));
                }
            }
            for (id, why) in &plan.keep {
                println!("keeping {id}: {why}");
            }
            let targets = plan
                .remove
                .into_iter()
                .map(|(id, member)| (id, Some(member)))
                .collect();
            (group, targets)
        }
    };
    if targets.is_empty() {
        println!("no members to remove from group {group}");
        return Ok(());
    }
    if a.dry_run {
        for (id, _) in &targets {
            println!("would remove {id} from group {group}");
        }
        return Ok(());
    }
    let refs: Vec<(&str, Option<&str>)> = targets
        .iter()
        .map(|(id, m)| (id.as_str(), m.as_deref()))
        .collect();
    let ids: Vec<&str> = refs.iter().map(|(id, _)| *id).collect();
    let results = admin
        .remove_static_members(&group, &refs)
        .map_err(|e| format!("removing {} from group {group}: {e}", ids.join(", ")))?;
    let mut failed = 0;
    for id in &ids {
        match results.get(*id) {
            Some(Ok(())) => println!("removed {id} from group {group}"),
            Some(Err(e)) if e.code() == Some(rill_client::ErrorCode::FencedInstanceId) => {
                failed += 1;
                println!("FAILED {id}: it rejoined the group during the check, so it was kept");
            }
            Some(Err(e)) => {
                failed += 1;
                println!("FAILED {id}: {e}");
            }
            None => {
                failed += 1;
                println!("FAILED {id}: the coordinator did not answer for it");
            }
        }
    }
    if failed < ids.len() {
        let token = a.settings.token(a.token.as_deref())?;
        ask_to_rejoin(&live_instances, token.as_deref());
    }
    if failed > 0 {
        Err(format!(
            "{failed} of {} members were not removed",
            ids.len()
        ))
    } else {
        Ok(())
    }
}

/// Tells live instances to rejoin now: the removal started a rebalance,
/// which they would otherwise hear of only at their next heartbeat (up to
/// `heartbeat.interval.ms` later). Needs the admin token; without it, or
/// if an instance does not answer, it just says so.
fn ask_to_rejoin(bases: &[String], token: Option<&str>) {
    if bases.is_empty() {
        return;
    }
    let Some(token) = token else {
        println!(
            "(no rest.admin.token: the live instances join the rebalance at their next heartbeat)"
        );
        return;
    };
    let agent = crate::http::agent(HTTP_TIMEOUT);
    for base in bases {
        let url = format!("{base}/v1/rejoin");
        match agent
            .post(&url)
            .set("Authorization", &format!("Bearer {token}"))
            .call()
        {
            Ok(_) => println!("asked {base} to rejoin the group now"),
            Err(ureq::Error::Status(code, _)) => {
                println!(
                    "{url} refused the rejoin request ({code}); it joins at its next heartbeat"
                )
            }
            Err(e) => println!(
                "{url}: {}; it joins at its next heartbeat",
                transport_reason(&e)
            ),
        }
    }
}

// ------------------------------------------------------------------- topics

#[derive(Subcommand, Debug)]
pub enum TopicsCommand {
    /// List the topics (internal ones left out).
    List {
        /// The cluster (`bootstrap.servers`; or in --command-config).
        #[arg(long)]
        bootstrap_server: Option<String>,
        #[command(flatten)]
        settings: CommandConfig,
    },
    /// Create a topic (Kafka's kafka-topics --create).
    Create {
        /// The cluster (`bootstrap.servers`; or in --command-config).
        #[arg(long)]
        bootstrap_server: Option<String>,
        #[command(flatten)]
        settings: CommandConfig,
        /// The topic's name.
        #[arg(long)]
        topic: String,
        /// How many partitions it gets.
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// -1: the broker's default.
        #[arg(long, default_value_t = -1)]
        replication_factor: i16,
        /// A topic config key=value (repeatable).
        #[arg(long = "config")]
        configs: Vec<String>,
        /// Succeed when the topic exists already with this partition count
        /// (kafka-topics' --if-not-exists; safe when several processes
        /// create it at once).
        #[arg(long)]
        if_not_exists: bool,
    },
    /// Partitions, leaders, replicas and ISR of topics.
    Describe {
        /// The cluster (`bootstrap.servers`; or in --command-config).
        #[arg(long)]
        bootstrap_server: Option<String>,
        #[command(flatten)]
        settings: CommandConfig,
        /// A topic to describe (repeatable; none: every topic).
        #[arg(long)]
        topic: Vec<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Raise a topic's partition count (Kafka's --alter --partitions).
    AddPartitions {
        /// The cluster (`bootstrap.servers`; or in --command-config).
        #[arg(long)]
        bootstrap_server: Option<String>,
        #[command(flatten)]
        settings: CommandConfig,
        /// The topic to grow.
        #[arg(long)]
        topic: String,
        /// The new total.
        #[arg(long)]
        partitions: i32,
    },
}

pub fn topics(cmd: TopicsCommand) -> CliResult {
    match cmd {
        TopicsCommand::List {
            bootstrap_server,
            settings,
        } => {
            for t in settings
                .admin(bootstrap_server.as_deref())?
                .list_topics()
                .map_err(|e| format!("listing topics: {e}"))?
            {
                println!("{t}");
            }
            Ok(())
        }
        TopicsCommand::Create {
            bootstrap_server,
            settings,
            topic,
            partitions,
            replication_factor,
            configs,
            if_not_exists,
        } => {
            let mut nt = NewTopic::new(&topic, partitions, replication_factor);
            for c in &configs {
                let (k, v) = c
                    .split_once('=')
                    .ok_or_else(|| format!("--config {c:?}: expected key=value"))?;
                nt = nt.config(k, v);
            }
            let pb = spinner(format!("creating {topic}"));
            let admin = settings.admin(bootstrap_server.as_deref())?;
            if if_not_exists {
                let r = admin.ensure_topics(&[nt]);
                pb.finish_and_clear();
                let created = r.map_err(|e| format!("creating topic {topic}: {e}"))?;
                if created.get(&topic) == Some(&true) {
                    println!("created topic {topic} with {partitions} partitions");
                } else {
                    println!("topic {topic} exists already");
                }
                return Ok(());
            }
            let r = admin
                .create_topics(&[nt])
                .map_err(|e| format!("creating topic {topic}: {e}"));
            pb.finish_and_clear();
            match r?.remove(&topic) {
                Some(Ok(())) | None => {
                    println!("created topic {topic} with {partitions} partitions");
                    Ok(())
                }
                Some(Err(e)) => Err(format!("creating topic {topic}: {e}")),
            }
        }
        TopicsCommand::Describe {
            bootstrap_server,
            settings,
            topic,
            json,
        } => {
            let admin = settings.admin(bootstrap_server.as_deref())?;
            let names = if topic.is_empty() {
                admin
                    .list_topics()
                    .map_err(|e| format!("listing topics: {e}"))?
            } else {
                topic
            };
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let md = admin
                .describe_topics(&refs)
                .map_err(|e| format!("describing {names:?}: {e}"))?;
            if json {
                let v: Vec<Value> = md
                    .iter()
                    .map(|t| json!({
                        "name": t.name, "id": t.id.to_string(), "internal": t.internal,
                        "partitions": t.partitions.iter().map(|p| json!({
                            "partition": p.partition, "leader": p.leader, "replicas": p.replicas, "isr": p.isr,
                        })).collect::<Vec<_>>(),
                    }))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v).expect("json"));
                return Ok(());
            }
            let mut rows = Vec::new();
            for t in &md {
                for p in &t.partitions {
                    rows.push(vec![
                        t.name.clone(),
                        p.partition.to_string(),
                        p.leader.to_string(),
                        format!("{:?}", p.replicas),
                        format!("{:?}", p.isr),
                    ]);
                }
            }
            table(&["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"], &rows);
            Ok(())
        }
        TopicsCommand::AddPartitions {
            bootstrap_server,
            settings,
            topic,
            partitions,
        } => {
            let pb = spinner(format!("raising {topic} to {partitions} partitions"));
            let r = settings
                .admin(bootstrap_server.as_deref())?
                .create_partitions(&topic, partitions)
                .map_err(|e| format!("adding partitions to {topic}: {e}"));
            pb.finish_and_clear();
            r?;
            println!("{topic} now has {partitions} partitions");
            Ok(())
        }
    }
}
