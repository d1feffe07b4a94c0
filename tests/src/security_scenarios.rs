//! Security scenarios (TLS, mTLS, SASL PLAIN/SCRAM/OAUTHBEARER, KIP-368
//! re-authentication, failures), written once against a [`SecureCluster`]
//! and run on the embedded broker (`embedded` target) and on Apache Kafka
//! (`interop` target).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rill_broker::SecurityProtocol;
use rill_client::admin::NewTopic;
use rill_client::{Admin, ClientConfig, Consumer, Error, Producer, ProducerRecord};

use crate::client_scenarios::{poll_n, send_and_wait};
use crate::secure::{Login, Pki, SecureCluster, REAUTH};
use crate::unique_topic;

/// Every listener and login the scenarios use.
pub const LOGINS: &[(SecurityProtocol, Login)] = &[
    (SecurityProtocol::Ssl, Login::Mtls),
    (SecurityProtocol::SaslPlaintext, Login::Sasl("PLAIN")),
    (
        SecurityProtocol::SaslPlaintext,
        Login::Sasl("SCRAM-SHA-256"),
    ),
    (SecurityProtocol::SaslSsl, Login::Sasl("PLAIN")),
    (SecurityProtocol::SaslSsl, Login::Sasl("SCRAM-SHA-512")),
    (SecurityProtocol::SaslSsl, Login::Sasl("OAUTHBEARER")),
];

fn with(mut c: ClientConfig, extra: &[(&str, &str)]) -> ClientConfig {
    c.insert("client.id", "rill-security-scenario");
    c.insert("default.api.timeout.ms", "30000");
    for (k, v) in extra {
        c.insert(*k, *v);
    }
    c
}

/// Admin, produce, group consume and commit over every listener and login.
pub fn secure_round_trips(c: &SecureCluster) {
    for &(protocol, login) in LOGINS {
        let what = format!("{} {:?} on {}", protocol.name(), login, c.backend);
        let cfg = c.config(protocol, login);
        let topic = unique_topic("secure-rt");
        let admin =
            Admin::new(&with(cfg.clone(), &[])).unwrap_or_else(|e| panic!("{what}: admin: {e}"));
        admin
            .create_topic(NewTopic::new(&topic, 2, 1))
            .unwrap_or_else(|e| panic!("{what}: create topic: {e}"));
        assert!(
            admin.list_topics().unwrap().contains(&topic),
            "{what}: topic listed"
        );
        let p = Producer::new(&with(cfg.clone(), &[("linger.ms", "5")])).unwrap();
        send_and_wait(
            &p,
            (0..50).map(|i| {
                ProducerRecord::new(&topic)
                    .key(format!("k{i}"))
                    .value(format!("v{i}"))
            }),
        );
        p.close(Duration::from_secs(10)).unwrap();
        let group = unique_topic("secure-group");
        let mut consumer = Consumer::new(&with(
            cfg.clone(),
            &[
                ("group.id", group.as_str()),
                ("auto.offset.reset", "earliest"),
                ("enable.auto.commit", "false"),
                ("session.timeout.ms", "10000"),
            ],
        ))
        .unwrap();
        consumer.subscribe(&[topic.as_str()]).unwrap();
        let recs = poll_n(&mut consumer, 50, Duration::from_secs(30));
        let values: BTreeSet<String> = recs
            .iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).to_string())
            .collect();
        assert_eq!(values.len(), 50, "{what}: every record consumed once");
        consumer
            .commit_sync()
            .unwrap_or_else(|e| panic!("{what}: commit: {e}"));
        consumer.close().unwrap();
        let committed: i64 = admin
            .list_consumer_group_offsets(&group)
            .unwrap_or_else(|e| panic!("{what}: committed offsets: {e}"))
            .values()
            .map(|o| o.offset)
            .sum();
        assert_eq!(committed, 50, "{what}: committed offsets");
    }
}

/// Runs `f` and returns its error and how long it took; fails if it
/// succeeded.
fn fails(what: &str, f: impl FnOnce() -> rill_client::Result<()>) -> (Error, Duration) {
    let t = Instant::now();
    match f() {
        Ok(()) => panic!("{what}: expected a failure, it succeeded"),
        Err(e) => (e, t.elapsed()),
    }
}

fn list_topics(cfg: ClientConfig) -> rill_client::Result<()> {
    Admin::new(&with(
        cfg,
        &[("socket.connection.setup.timeout.ms", "5000")],
    ))?
    .list_topics()
    .map(|_| ())
}

/// Every failure is one clear error, fast, not retried: wrong passwords,
/// an unknown mechanism, untrusted and mismatched certificates, a missing
/// client certificate, TLS to a plain port and plain to a TLS port.
pub fn secure_failures_are_clear_and_bounded(c: &SecureCluster) {
    let limit = Duration::from_secs(8);
    for mech in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let mut cfg = c.config(SecurityProtocol::SaslSsl, Login::Sasl(mech));
        let jaas = cfg
            .get("sasl.jaas.config")
            .unwrap()
            .replace("alice-secret", "wrong-password");
        cfg.insert("sasl.jaas.config", jaas);
        let (e, took) = fails(mech, || list_topics(cfg));
        let text = e.to_string();
        assert!(matches!(e, Error::Authentication { .. }), "{mech}: {text}");
        assert!(
            text.contains(mech) && text.contains("127.0.0.1"),
            "names mechanism and broker: {text}"
        );
        assert!(
            !text.contains("wrong-password"),
            "no password in errors: {text}"
        );
        assert!(took < limit, "{mech}: failed in {took:?}");
    }
    // An unknown user reads like a wrong password.
    let cfg = c
        .config(SecurityProtocol::SaslPlaintext, Login::Sasl("PLAIN"))
        .set("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"mallory\" password=\"x\";");
    let (e, _) = fails("unknown user", || list_topics(cfg));
    assert!(matches!(e, Error::Authentication { .. }), "{e}");

    let cases: Vec<(&str, ClientConfig, &str)> = vec![
        (
            "untrusted CA",
            c.config(SecurityProtocol::SaslSsl, Login::Sasl("PLAIN"))
                .set(
                    "ssl.truststore.location",
                    c.pki.other_ca.display().to_string(),
                ),
            "trusted CA",
        ),
        (
            "host name mismatch",
            c.config(SecurityProtocol::SaslSsl, Login::Sasl("PLAIN"))
                .set(
                    "bootstrap.servers",
                    c.bootstrap(SecurityProtocol::SaslSsl)
                        .replace("127.0.0.1", "localhost"),
                ),
            "not valid for 'localhost'",
        ),
        (
            "no client certificate on the mTLS listener",
            c.config(SecurityProtocol::Ssl, Login::Sasl("PLAIN"))
                .set("security.protocol", "SSL"),
            "client certificate",
        ),
        (
            "TLS to a PLAINTEXT port",
            c.config(SecurityProtocol::SaslSsl, Login::Sasl("PLAIN"))
                .set(
                    "bootstrap.servers",
                    c.bootstrap(SecurityProtocol::Plaintext),
                ),
            "PLAINTEXT",
        ),
        (
            "PLAINTEXT to a TLS port",
            ClientConfig::new().set("bootstrap.servers", c.bootstrap(SecurityProtocol::SaslSsl)),
            "security.protocol",
        ),
        (
            "SASL to a listener without SASL",
            c.config(SecurityProtocol::SaslPlaintext, Login::Sasl("PLAIN"))
                .set(
                    "bootstrap.servers",
                    c.bootstrap(SecurityProtocol::Plaintext),
                ),
            "SASL",
        ),
    ];
    for (what, cfg, needle) in cases {
        let (e, took) = fails(what, || list_topics(cfg));
        let text = e.to_string();
        assert!(
            e.is_security_failure(),
            "{what} on {}: a TLS/SASL error, got: {text}",
            c.backend
        );
        assert!(
            text.contains(needle),
            "{what} on {}: '{needle}' in: {text}",
            c.backend
        );
        assert!(took < limit, "{what}: failed in {took:?}");
    }
    // With the host name check off, `localhost` is accepted (as Kafka with
    // ssl.endpoint.identification.algorithm empty).
    let cfg = c
        .config(SecurityProtocol::SaslSsl, Login::Sasl("PLAIN"))
        .set(
            "bootstrap.servers",
            c.bootstrap(SecurityProtocol::SaslSsl)
                .replace("127.0.0.1", "localhost"),
        )
        .set("ssl.endpoint.identification.algorithm", "");
    list_topics(cfg).expect("host name check disabled");
    // An encrypted client key with its password works; without, the
    // config error names the key to set.
    let key_pem = std::fs::read_to_string(&c.pki.client_key_encrypted).unwrap();
    let base = c
        .config(SecurityProtocol::Ssl, Login::Mtls)
        .set("ssl.keystore.key", key_pem);
    list_topics(base.clone().set("ssl.key.password", Pki::KEY_PASSWORD))
        .expect("encrypted key with ssl.key.password");
    let (e, _) = fails("encrypted key without password", || list_topics(base));
    assert!(e.to_string().contains("ssl.key.password"), "{e}");
}

/// KIP-368: with `connections.max.reauth.ms` of a few seconds, a consumer
/// and a producer keep working for three session lifetimes, re-authenticating
/// on their connections rather than being cut off.
pub fn secure_reauthentication_keeps_clients_working(c: &SecureCluster) {
    for login in ["SCRAM-SHA-512", "OAUTHBEARER"] {
        let cfg = c.config(SecurityProtocol::SaslSsl, Login::Sasl(login));
        let topic = unique_topic("secure-reauth");
        Admin::new(&with(cfg.clone(), &[]))
            .unwrap()
            .create_topic(NewTopic::new(&topic, 1, 1))
            .unwrap();
        let p = Producer::new(&with(cfg.clone(), &[("linger.ms", "0")])).unwrap();
        let mut consumer = Consumer::new(&with(
            cfg,
            &[
                ("group.id", unique_topic("secure-reauth-group").as_str()),
                ("auto.offset.reset", "earliest"),
                ("session.timeout.ms", "10000"),
            ],
        ))
        .unwrap();
        consumer.subscribe(&[topic.as_str()]).unwrap();
        let before = rill_client::security::reauthentications();
        let until = Instant::now() + REAUTH * 3;
        let (mut sent, mut read) = (0usize, 0usize);
        while Instant::now() < until {
            send_and_wait(&p, [ProducerRecord::new(&topic).value(format!("r{sent}"))]);
            sent += 1;
            read += consumer
                .poll(Duration::from_millis(200))
                .unwrap_or_else(|e| panic!("{login}: poll during re-authentication: {e}"))
                .len();
        }
        read += poll_n(&mut consumer, sent - read, Duration::from_secs(20)).len();
        assert_eq!(read, sent, "{login} on {}: every record read", c.backend);
        let reauths = rill_client::security::reauthentications() - before;
        assert!(
            reauths >= 2,
            "{login} on {}: {reauths} re-authentications in {:?} with sessions of {REAUTH:?}",
            c.backend,
            REAUTH * 3
        );
        p.close(Duration::from_secs(10)).unwrap();
        consumer.close().unwrap();
    }
}

/// Secrets never appear in `Debug` output or configuration errors.
pub fn secure_secrets_stay_hidden(c: &SecureCluster) {
    let cfg = c.config(SecurityProtocol::SaslSsl, Login::Sasl("PLAIN"));
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("alice-secret"), "{shown}");
    let bad = cfg.clone().set("sasl.mechanism", "SCRAM-SHA-256").set(
        "sasl.jaas.config",
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=\"alice-secret\";",
    );
    let e = Producer::new(&bad).err().expect("module mismatch refused");
    assert!(!e.to_string().contains("alice-secret"), "{e}");
    assert!(e.to_string().contains("sasl.jaas.config"), "{e}");
    let typo = cfg.set("sasl.pasword", "alice-secret");
    let e = Producer::new(&typo).err().expect("unknown key refused");
    assert!(
        !e.to_string().contains("alice-secret") && e.to_string().contains("sasl.pasword"),
        "{e}"
    );
}

/// A static-member word count (2 instances × 2 threads, RocksDB) whose
/// every client talks SASL_SSL (SCRAM-SHA-512, re-authenticating every few
/// seconds), rolled once: no rebalance, no partition moves, nothing lost.
/// The harness observes the group over the PLAINTEXT listener.
pub fn secure_streams_roll_static(c: &SecureCluster) {
    use crate::rolling::{describe, roll, AppTopology, RollConfig, Runtime};
    let mut cfg = RollConfig::small(Runtime::Rill, AppTopology::WordCount);
    cfg.instances = 2;
    cfg.rounds = 1;
    cfg.partitions = 4;
    cfg.app_properties = c
        .config(SecurityProtocol::SaslSsl, Login::Sasl("SCRAM-SHA-512"))
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let r = roll(c.bootstrap(SecurityProtocol::Plaintext), &cfg);
    let d = describe(&cfg, &r);
    eprintln!("SECURE ROLL on {}: {d}", c.backend);
    assert!(r.produced > 0, "{d}");
    assert_eq!(r.rebalances, 0, "{d}");
    assert_eq!(r.moves(), 0, "{d}");
    assert_eq!(r.lost, 0, "{d}");
}

/// `rill topics` over SASL_SSL with the security settings in a Kafka
/// properties file (`--command-config`, the Kafka tools' flag); a wrong
/// password is one line naming the mechanism, without the password.
pub fn secure_cli_command_config(c: &SecureCluster) {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, cfg: &ClientConfig| {
        let text: String = cfg
            .iter()
            .map(|(k, v)| format!("{k}={}\n", v.replace('\n', "\\n")))
            .collect();
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let good = write(
        "client.properties",
        &c.config(SecurityProtocol::SaslSsl, Login::Sasl("SCRAM-SHA-256")),
    );
    let topic = unique_topic("secure-cli");
    // Every log line the client writes (trace level) goes to stderr: none
    // may carry a secret.
    let rill = |args: &[&str]| {
        std::process::Command::new(crate::operator_scenarios::rill_binary())
            .args(args)
            .env("RILL_LOG", "trace")
            .output()
            .unwrap()
    };
    let out = rill(&[
        "topics",
        "create",
        "--topic",
        &topic,
        "--partitions",
        "2",
        "--command-config",
        good.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "create over SASL_SSL: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(
        logs.contains("authenticated"),
        "trace logs were written: {logs}"
    );
    assert!(
        !logs.contains("alice-secret"),
        "no password in the logs: {logs}"
    );
    let out = rill(&["topics", "list", "--command-config", good.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&topic),
        "listed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut bad_cfg = c.config(SecurityProtocol::SaslSsl, Login::Sasl("SCRAM-SHA-256"));
    let jaas = bad_cfg
        .get("sasl.jaas.config")
        .unwrap()
        .replace("alice-secret", "not-the-password");
    bad_cfg.insert("sasl.jaas.config", jaas);
    let bad = write("bad.properties", &bad_cfg);
    let t = Instant::now();
    let out = rill(&["topics", "list", "--command-config", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "wrong password refused");
    assert!(
        err.contains("SCRAM-SHA-256") && err.contains("authentication"),
        "{err}"
    );
    assert!(!err.contains("not-the-password"), "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "refused in {:?}",
        t.elapsed()
    );
}

/// The REST API over HTTPS (`rest.ssl.keystore.location`): two instances
/// of a word count whose clients use SASL_SSL; either lists both (the other
/// probed over HTTPS, its certificate checked against
/// `rest.ssl.truststore.location`), a key query is forwarded to its owner
/// over HTTPS, plain HTTP is refused, and no answer, metric or `Debug`
/// output carries the SASL password.
pub fn secure_rest_over_https(c: &SecureCluster) {
    use crate::streams_scenarios::{await_counts, lines, start, wordcount, Setup};
    use rill_streams::{Serdes, StoreBackend};
    let s = Setup::new(c.bootstrap(SecurityProtocol::Plaintext), "secure-rest");
    let mut expected = std::collections::BTreeMap::new();
    s.produce(&lines(0, 100), &mut expected);
    let dir = tempfile::tempdir().unwrap();
    let keystore = dir.path().join("rest-keystore.pem");
    std::fs::write(
        &keystore,
        std::fs::read_to_string(&c.pki.broker_chain).unwrap()
            + &std::fs::read_to_string(&c.pki.broker_key).unwrap(),
    )
    .unwrap();
    let security: Vec<(String, String)> = c
        .config(SecurityProtocol::SaslSsl, Login::Sasl("PLAIN"))
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let cfg = |state: &std::path::Path, id: &str| {
        let mut extra: Vec<(&str, String)> = vec![
            ("group.instance.id", id.to_string()),
            ("application.server", "127.0.0.1:0".into()),
            ("rest.ssl.keystore.location", keystore.display().to_string()),
            (
                "rest.ssl.truststore.location",
                c.pki.ca.display().to_string(),
            ),
        ];
        extra.extend(security.iter().map(|(k, v)| (k.as_str(), v.clone())));
        s.config(state, &extra)
    };
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ca = cfg(d1.path(), &format!("{}-a", s.app));
    let shown = format!("{ca:?}");
    assert!(
        !shown.contains("alice-secret") && shown.contains("[hidden]"),
        "{shown}"
    );
    let a = start(wordcount(&s.input, &s.output, StoreBackend::InMemory), ca);
    let b = start(
        wordcount(&s.input, &s.output, StoreBackend::InMemory),
        cfg(d2.path(), &format!("{}-b", s.app)),
    );
    a.expose_store("counts", Serdes::i64(), |n| serde_json::json!(n));
    b.expose_store("counts", Serdes::i64(), |n| serde_json::json!(n));
    let mut roots = rustls::RootCertStore::empty();
    let ca_pem = std::fs::read(&c.pki.ca).unwrap();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&ca_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let https = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .tls_config(std::sync::Arc::new(tls))
        .build();
    let get = |url: &str| -> (u16, String) {
        match https.get(url).call() {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
            Err(e) => panic!("GET {url}: {e}"),
        }
    };
    let (ea, eb) = (
        a.rest_address().unwrap().to_string(),
        b.rest_address().unwrap().to_string(),
    );
    let mut last = String::new();
    let settled = crate::client_scenarios::wait_until(Duration::from_secs(60), || {
        let (st, body) = get(&format!("https://{ea}/v1/instances"));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        last = body;
        st == 200
            && v["instances"].as_array().is_some_and(|is| {
                is.len() == 2
                    && is
                        .iter()
                        .all(|i| i["local"] == true || i["reachable"] == true)
            })
    });
    assert!(settled, "instances over HTTPS never settled: {last}");
    // The tools over HTTPS: `rill instances --url https://...` trusts the
    // CA from --command-config (the app's key); without it the
    // certificate is refused.
    let props = dir.path().join("tools.properties");
    std::fs::write(
        &props,
        format!("rest.ssl.truststore.location={}\n", c.pki.ca.display()),
    )
    .unwrap();
    let rill = |extra: &[&str]| {
        std::process::Command::new(crate::operator_scenarios::rill_binary())
            .args(["instances", "--url", &format!("https://{ea}")])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = rill(&["--command-config", props.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.contains(&format!("{}-a-thread-1", s.app))
            && text.contains(&format!("{}-b-thread-1", s.app)),
        "rill instances over HTTPS: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = rill(&[]);
    assert!(
        !out.status.success(),
        "an untrusted REST certificate is refused"
    );
    assert!(!last.contains("alice-secret"), "{last}");
    let (_, metrics) = get(&format!("https://{eb}/metrics"));
    assert!(
        !metrics.contains("alice-secret") && metrics.contains("rill_"),
        "metrics served over HTTPS"
    );
    await_counts(
        &mut s.reader(),
        &mut std::collections::BTreeMap::new(),
        &expected,
        &[&a, &b],
    );
    let owned_by_b = crate::operator_scenarios::word_owned_by(&a, expected.keys(), &eb);
    let (st, body) = get(&format!("https://{ea}/v1/stores/counts/keys/{owned_by_b}"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(st, 200, "{body}");
    assert_eq!(
        v["served_by"], "forwarded",
        "forwarded to b over HTTPS: {body}"
    );
    assert_eq!(v["value"], expected[&owned_by_b], "{body}");
    // Plain HTTP to the HTTPS port gets no answer.
    let plain = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(5))
        .build();
    assert!(
        plain.get(&format!("http://{ea}/health")).call().is_err(),
        "HTTP refused on the HTTPS port"
    );
    a.close();
    b.close();
}

/// OAUTHBEARER with a token provider from the API
/// (`register_token_provider`, named by `sasl.login.callback.handler.class`):
/// the client authenticates with the provider's token; an unregistered
/// name is refused when the client is built.
pub fn secure_oauthbearer_token_provider(c: &SecureCluster) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    struct Provider(AtomicUsize);
    impl rill_client::TokenProvider for Provider {
        fn token(&self) -> Result<rill_client::BearerToken, String> {
            self.0.fetch_add(1, Ordering::Relaxed);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64;
            Ok(rill_client::BearerToken {
                value: rill_client::security::Password::new(rill_protocol::sasl::unsecured_jws(
                    "sub", "carol", now, 60_000,
                )),
                lifetime: Duration::from_secs(60),
            })
        }
    }
    let provider = Arc::new(Provider(AtomicUsize::new(0)));
    let name = unique_topic("token-provider");
    rill_client::register_token_provider(&name, provider.clone());
    let cfg = ClientConfig::new()
        .set("bootstrap.servers", c.bootstrap(SecurityProtocol::SaslSsl))
        .set("security.protocol", "SASL_SSL")
        .set("sasl.mechanism", "OAUTHBEARER")
        .set("sasl.login.callback.handler.class", name.as_str())
        .set("ssl.truststore.location", c.pki.ca.display().to_string());
    let topic = unique_topic("secure-oauth");
    let admin = Admin::new(&with(cfg.clone(), &[])).unwrap();
    admin
        .create_topic(NewTopic::new(&topic, 1, 1))
        .expect("create with a provided token");
    let p = Producer::new(&with(cfg, &[])).unwrap();
    send_and_wait(&p, [ProducerRecord::new(&topic).value("v")]);
    p.close(Duration::from_secs(10)).unwrap();
    assert!(
        provider.0.load(Ordering::Relaxed) >= 1,
        "the provider was asked"
    );
    // An unregistered name is a configuration error naming the key.
    let bad = ClientConfig::new()
        .set("bootstrap.servers", c.bootstrap(SecurityProtocol::SaslSsl))
        .set("security.protocol", "SASL_SSL")
        .set("sasl.mechanism", "OAUTHBEARER")
        .set(
            "sasl.login.callback.handler.class",
            "nobody-registered-this",
        );
    let e = Producer::new(&bad).err().expect("unknown provider refused");
    assert!(
        e.to_string().contains("sasl.login.callback.handler.class"),
        "{e}"
    );
}

/// The scenarios, for the backends' test macros.
#[macro_export]
macro_rules! for_each_security_scenario {
    ($m:ident) => {
        $m!(
            secure_round_trips,
            secure_failures_are_clear_and_bounded,
            secure_reauthentication_keeps_clients_working,
            secure_secrets_stay_hidden,
            secure_streams_roll_static,
            secure_cli_command_config,
            secure_rest_over_https,
            secure_oauthbearer_token_provider,
        );
    };
}
