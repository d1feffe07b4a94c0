//! Secure clusters for the security scenarios: certificates made in the test
//! (rcgen; nothing checked in), and one cluster per backend with four
//! listeners — PLAINTEXT, SSL requiring client certificates (mTLS),
//! SASL_PLAINTEXT and SASL_SSL — SASL users `alice` and `bob` for PLAIN and
//! SCRAM, unsecured OAUTHBEARER, and a short `connections.max.reauth.ms` so
//! every SASL connection re-authenticates (KIP-368) during the tests.
//!
//! Apache Kafka gets the same: PEM key and trust stores, SCRAM users created
//! by Kafka's own `kafka-storage format --add-scram`, PLAIN users in the
//! listener's JAAS line.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
use rill_broker::{EmbeddedCluster, SecurityProtocol, TlsFiles};
use rill_client::ClientConfig;

use crate::backend::{free_port, ApacheKafka, Embedded, KafkaOptions};

/// SASL users of every secure cluster.
pub const USERS: [(&str, &str); 2] = [("alice", "alice-secret"), ("bob", "bob-secret")];

/// `connections.max.reauth.ms` of the secure clusters.
pub const REAUTH: Duration = Duration::from_secs(4);

/// Test certificates, as PEM files in a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    /// The CA every good certificate is signed by.
    pub ca: PathBuf,
    /// Another CA, trusted by nobody.
    pub other_ca: PathBuf,
    /// Broker certificate (SAN: IP 127.0.0.1 only, so `localhost` mismatches).
    pub broker_chain: PathBuf,
    pub broker_key: PathBuf,
    /// Broker certificate that expired in 2021.
    pub expired_chain: PathBuf,
    pub expired_key: PathBuf,
    /// Client certificate for mTLS (CN=rill-client).
    pub client_chain: PathBuf,
    pub client_key: PathBuf,
    /// The client key encrypted (PKCS#8, PBES2) with [`Pki::KEY_PASSWORD`].
    pub client_key_encrypted: PathBuf,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write PEM");
    p
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().expect("CA key");
    (params.self_signed(&key).expect("self-signed CA"), key)
}

fn leaf(
    cn: &str,
    sans: Vec<SanType>,
    ca: &(rcgen::Certificate, KeyPair),
    expired: bool,
) -> (String, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.subject_alt_names = sans;
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let key = KeyPair::generate().expect("leaf key");
    let cert = params.signed_by(&key, &ca.0, &ca.1).expect("signed leaf");
    (cert.pem(), key)
}

impl Pki {
    /// Password of [`Pki::client_key_encrypted`].
    pub const KEY_PASSWORD: &'static str = "key-pass";

    pub fn generate() -> Pki {
        let dir = tempfile::Builder::new()
            .prefix("rill-pki-")
            .tempdir()
            .expect("tempdir");
        let d = dir.path();
        let root = ca("Rill test CA");
        let other = ca("Untrusted CA");
        let ip = SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]));
        let (broker, broker_key) = leaf("broker", vec![ip.clone()], &root, false);
        let (expired, expired_key) = leaf("expired-broker", vec![ip], &root, true);
        let (client, client_key) = leaf("rill-client", vec![], &root, false);
        let der = client_key.serialize_der();
        let info = pkcs8::PrivateKeyInfo::try_from(der.as_slice()).expect("PKCS#8");
        let encrypted = info
            .encrypt(rand_core::OsRng, Self::KEY_PASSWORD)
            .expect("encrypt key")
            .to_pem("ENCRYPTED PRIVATE KEY", pkcs8::LineEnding::LF)
            .expect("PEM");
        Pki {
            ca: write(d, "ca.pem", &root.0.pem()),
            other_ca: write(d, "other-ca.pem", &other.0.pem()),
            broker_chain: write(d, "broker.pem", &broker),
            broker_key: write(d, "broker.key", &broker_key.serialize_pem()),
            expired_chain: write(d, "expired.pem", &expired),
            expired_key: write(d, "expired.key", &expired_key.serialize_pem()),
            client_chain: write(d, "client.pem", &client),
            client_key: write(d, "client.key", &client_key.serialize_pem()),
            client_key_encrypted: write(d, "client-enc.key", &encrypted),
            dir,
        }
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).expect("read PEM")
    }
}

/// A cluster with the four listeners, on one backend.
pub struct SecureCluster {
    /// "embedded" or "Apache Kafka".
    pub backend: &'static str,
    pub pki: Pki,
    plaintext: String,
    ssl: String,
    sasl_plaintext: String,
    sasl_ssl: String,
    _embedded: Option<Embedded>,
    _kafka: Option<ApacheKafka>,
}

/// How a client logs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Login {
    /// SSL with the client certificate (mTLS).
    Mtls,
    /// SASL with a mechanism, as `alice`.
    Sasl(&'static str),
}

impl SecureCluster {
    /// The embedded cluster with the four listeners.
    pub fn embedded() -> SecureCluster {
        let pki = Pki::generate();
        let e = Embedded::start(
            EmbeddedCluster::builder()
                .listener(SecurityProtocol::Plaintext, 0)
                .listener(SecurityProtocol::Ssl, 0)
                .listener(SecurityProtocol::SaslPlaintext, 0)
                .listener(SecurityProtocol::SaslSsl, 0)
                .tls(TlsFiles {
                    cert_chain: pki.broker_chain.clone(),
                    key: pki.broker_key.clone(),
                    client_ca: Some(pki.ca.clone()),
                })
                .sasl_users(USERS)
                .max_reauth(REAUTH)
                .config(|c| {
                    c.group_initial_rebalance_delay_ms = 0;
                    c.group_consumer_heartbeat_interval_ms = 500;
                }),
        );
        let c = e.cluster();
        let addr = |p| c.bootstrap_servers_for(p).expect("listener exists");
        SecureCluster {
            backend: "embedded",
            plaintext: addr(SecurityProtocol::Plaintext),
            ssl: addr(SecurityProtocol::Ssl),
            sasl_plaintext: addr(SecurityProtocol::SaslPlaintext),
            sasl_ssl: addr(SecurityProtocol::SaslSsl),
            pki,
            _embedded: Some(e),
            _kafka: None,
        }
    }

    /// Apache Kafka (KRaft) with the four listeners.
    pub fn apache_kafka() -> SecureCluster {
        Self::apache_kafka_with(Some(REAUTH))
    }

    /// Apache Kafka with the four listeners and `connections.max.reauth.ms`
    /// set to `reauth` (`None`: Kafka's default 0, no session lifetime).
    pub fn apache_kafka_with(reauth: Option<Duration>) -> SecureCluster {
        let pki = Pki::generate();
        let (ssl, sasl_plain, sasl_ssl) = (free_port(), free_port(), free_port());
        let plain_users: String = USERS
            .iter()
            .map(|(u, p)| format!(" user_{u}=\"{p}\""))
            .collect();
        let mut props: Vec<(String, String)> = [
            ("ssl.keystore.type", "PEM".to_string()),
            (
                "ssl.keystore.certificate.chain",
                Pki::read(&pki.broker_chain),
            ),
            ("ssl.keystore.key", Pki::read(&pki.broker_key)),
            ("ssl.truststore.type", "PEM".into()),
            ("ssl.truststore.certificates", Pki::read(&pki.ca)),
            ("listener.name.ssl.ssl.client.auth", "required".into()),
            (
                "sasl.enabled.mechanisms",
                "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER".into(),
            ),
            (
                "connections.max.reauth.ms",
                reauth.map_or(0, |r| r.as_millis()).to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for l in ["sasl_plaintext", "sasl_ssl"] {
            props.push((
                format!("listener.name.{l}.plain.sasl.jaas.config"),
                format!("org.apache.kafka.common.security.plain.PlainLoginModule required{plain_users};"),
            ));
            for m in ["scram-sha-256", "scram-sha-512"] {
                props.push((
                    format!("listener.name.{l}.{m}.sasl.jaas.config"),
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;".into(),
                ));
            }
            props.push((
                format!("listener.name.{l}.oauthbearer.sasl.jaas.config"),
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
                    .into(),
            ));
        }
        let mut format_args = Vec::new();
        for (u, p) in USERS {
            for m in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
                format_args.push("--add-scram".to_string());
                format_args.push(format!("{m}=[name={u},password={p}]"));
            }
        }
        let k = ApacheKafka::start_with(KafkaOptions {
            properties: props,
            extra_listeners: vec![
                ("SSL".into(), ssl),
                ("SASL_PLAINTEXT".into(), sasl_plain),
                ("SASL_SSL".into(), sasl_ssl),
            ],
            format_args,
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("secure Apache Kafka did not start: {e}"));
        SecureCluster {
            backend: "Apache Kafka",
            plaintext: k.bootstrap.clone(),
            ssl: format!("127.0.0.1:{ssl}"),
            sasl_plaintext: format!("127.0.0.1:{sasl_plain}"),
            sasl_ssl: format!("127.0.0.1:{sasl_ssl}"),
            pki,
            _embedded: None,
            _kafka: Some(k),
        }
    }

    /// The address of a listener.
    pub fn bootstrap(&self, protocol: SecurityProtocol) -> &str {
        match protocol {
            SecurityProtocol::Plaintext => &self.plaintext,
            SecurityProtocol::Ssl => &self.ssl,
            SecurityProtocol::SaslPlaintext => &self.sasl_plaintext,
            SecurityProtocol::SaslSsl => &self.sasl_ssl,
        }
    }

    /// Client properties for `protocol` logging in as `login` (user alice).
    pub fn config(&self, protocol: SecurityProtocol, login: Login) -> ClientConfig {
        let mut c = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap(protocol))
            .set("security.protocol", protocol.name());
        if protocol.uses_tls() {
            c.insert("ssl.truststore.type", "PEM");
            c.insert("ssl.truststore.location", self.pki.ca.display().to_string());
        }
        match login {
            Login::Mtls => {
                c.insert("ssl.keystore.type", "PEM");
                c.insert(
                    "ssl.keystore.certificate.chain",
                    Pki::read(&self.pki.client_chain),
                );
                c.insert("ssl.keystore.key", Pki::read(&self.pki.client_key));
            }
            Login::Sasl("OAUTHBEARER") => {
                c.insert("sasl.mechanism", "OAUTHBEARER");
                c.insert(
                    "sasl.jaas.config",
                    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"alice\";",
                );
            }
            Login::Sasl(m) => {
                let module = if m == "PLAIN" {
                    "plain.PlainLoginModule"
                } else {
                    "scram.ScramLoginModule"
                };
                c.insert("sasl.mechanism", m);
                c.insert(
                    "sasl.jaas.config",
                    format!("org.apache.kafka.common.security.{module} required username=\"alice\" password=\"alice-secret\";"),
                );
            }
        }
        c
    }
}

/// One secure Apache Kafka per test binary (a JVM broker takes seconds to
/// start); scenarios use unique topic and group names.
pub fn shared_secure_kafka() -> &'static SecureCluster {
    // get_or_init runs the start once; other callers wait for it.
    static K: OnceLock<SecureCluster> = OnceLock::new();
    K.get_or_init(SecureCluster::apache_kafka)
}
