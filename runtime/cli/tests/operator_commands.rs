//! The operator commands against an embedded cluster: topics and groups
//! answer what the cluster holds, and bad input exits non-zero naming what
//! was wrong. (`instances`, `shutdown` and `groups remove-members
//! --from-url` run against live apps in rill-tests' operator scenarios, on
//! both backends.)

use std::process::{Command, Output};

use rill_tests::backend::Embedded;

fn rill(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(args)
        .output()
        .expect("rill runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn topics_and_groups_commands() {
    let cluster = Embedded::for_clients();
    let b = cluster.bootstrap();
    let topic = rill_tests::unique_topic("cli-topic");

    let o = rill(&[
        "topics",
        "create",
        "--bootstrap-server",
        &b,
        "--topic",
        &topic,
        "--partitions",
        "3",
        "--config",
        "cleanup.policy=compact",
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));

    let o = rill(&["topics", "list", "--bootstrap-server", &b]);
    assert!(stdout(&o).lines().any(|l| l == topic), "{}", stdout(&o));

    let o = rill(&[
        "topics",
        "add-partitions",
        "--bootstrap-server",
        &b,
        "--topic",
        &topic,
        "--partitions",
        "5",
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let o = rill(&[
        "topics",
        "describe",
        "--bootstrap-server",
        &b,
        "--topic",
        &topic,
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v[0]["partitions"].as_array().unwrap().len(), 5, "{v:#}");

    // Creating it again fails and says why; so does a bad --config.
    let o = rill(&[
        "topics",
        "create",
        "--bootstrap-server",
        &b,
        "--topic",
        &topic,
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains(&topic), "{}", stderr(&o));
    let o = rill(&[
        "topics",
        "create",
        "--bootstrap-server",
        &b,
        "--topic",
        "x",
        "--config",
        "nonsense",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("key=value"), "{}", stderr(&o));

    // A consumer group with a static member shows up in list and describe.
    let group = rill_tests::unique_topic("cli-group");
    let mut consumer = rill_client::Consumer::new(
        &rill_client::ClientConfig::new()
            .set("bootstrap.servers", b.clone())
            .set("group.id", group.clone())
            .set("group.instance.id", "cli-member-1"),
    )
    .unwrap();
    consumer.subscribe(&[topic.as_str()]).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while consumer.assignment().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no assignment");
        consumer
            .poll(std::time::Duration::from_millis(100))
            .unwrap();
    }
    let o = rill(&["groups", "list", "--bootstrap-server", &b]);
    assert!(stdout(&o).contains(&group), "{}", stdout(&o));
    let o = rill(&[
        "groups",
        "describe",
        "--bootstrap-server",
        &b,
        "--group",
        &group,
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(
        v[0]["members"][0]["group_instance_id"], "cli-member-1",
        "{v:#}"
    );
    assert_eq!(
        v[0]["members"][0]["assignment"].as_array().unwrap().len(),
        5,
        "{v:#}"
    );
    // Batch removal by instance id: one known, one unknown → non-zero, a line each.
    let o = rill(&[
        "groups",
        "remove-members",
        "--bootstrap-server",
        &b,
        "--group",
        &group,
        "--instance-id",
        "cli-member-1",
        "--instance-id",
        "nobody",
    ]);
    let out = stdout(&o);
    assert!(!o.status.success(), "{out}");
    assert!(out.contains("removed cli-member-1"), "{out}");
    assert!(out.contains("FAILED nobody"), "{out}");
    drop(consumer);

    // An unreachable REST URL fails with the URL named.
    let o = rill(&["instances", "--url", "http://127.0.0.1:9"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("127.0.0.1:9"), "{}", stderr(&o));
}
