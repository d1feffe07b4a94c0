//! Listener security of the embedded broker: TLS (rustls), SASL
//! authentication (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with unsecured
//! JWS) and KIP-368 session lifetimes.
//!
//! Invariants (Kafka's `SaslServerAuthenticator` behaviour):
//! - A connection on a SASL listener may send only ApiVersions,
//!   SaslHandshake and SaslAuthenticate until it has authenticated; any
//!   other request closes it.
//! - A failed authentication is answered with SASL_AUTHENTICATION_FAILED
//!   (the same message for an unknown user and a wrong password) and the
//!   connection is closed after the answer.
//! - With `connections.max.reauth.ms` set, SaslAuthenticate returns the
//!   session lifetime (capped by a token's expiry); a request other than
//!   SaslHandshake after it ends closes the connection; a SaslHandshake on an
//!   authenticated connection starts re-authentication, which must name the
//!   same mechanism and principal.
//! - Passwords never reach logs: the users file is read into SCRAM
//!   credentials (random salt, 4096 iterations) and PLAIN checks.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use rill_protocol::message::Api;
use rill_protocol::sasl::{self, Mechanism, ScramCredential, ScramServer, SCRAM_MIN_ITERATIONS};
use rill_protocol::ApiKey;
pub use rill_protocol::SecurityProtocol;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// One listener: a protocol and node 1's port (node n listens on
/// `port + n - 1`, or a free port for each node when `port` is 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// The protocol, which is also the listener's name.
    pub protocol: SecurityProtocol,
    /// Node 1's port; 0 picks free ports.
    pub port: u16,
}

impl Listener {
    /// Parses `PROTOCOL://host:port` (`rill broker --listener`); the host
    /// must be the broker's listen host.
    pub fn parse(s: &str) -> Result<(Listener, String), String> {
        let Some((proto, addr)) = s.split_once("://") else {
            return Err(format!(
                "listener '{s}' must look like SASL_SSL://127.0.0.1:9093"
            ));
        };
        let protocol = SecurityProtocol::parse(proto).ok_or_else(|| {
            format!("listener '{s}': protocol must be PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
        })?;
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("listener '{s}' has no :port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("listener '{s}': '{port}' is not a port number"))?;
        Ok((
            Listener { protocol, port },
            host.trim_matches(['[', ']']).to_string(),
        ))
    }
}

/// TLS material of the broker, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The broker's certificate chain (leaf first).
    pub cert_chain: PathBuf,
    /// The broker's private key (unencrypted PEM).
    pub key: PathBuf,
    /// CA certificates for client certificates; when set, SSL listeners
    /// require a client certificate signed by one of them
    /// (`listener.name.ssl.ssl.client.auth=required`); SASL_SSL listeners
    /// authenticate with SASL and do not ask for one.
    pub client_ca: Option<PathBuf>,
}

/// A resource an allow rule grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceType {
    /// A topic: every operation on it (produce, fetch, describe, create,
    /// delete, alter).
    Topic,
    /// A consumer group: join, commit, describe, delete.
    Group,
    /// A transactional id: InitProducerId, AddPartitionsToTxn,
    /// AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeTransactions.
    TransactionalId,
}

/// One allow rule: a principal may use resources whose name matches
/// `pattern` (a literal name, or a prefix when it ends in `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    /// `User:<name>`.
    pub principal: String,
    /// Topic or group.
    pub resource: ResourceType,
    /// Literal name, or prefix followed by `*`.
    pub pattern: String,
}

impl AllowRule {
    /// Parses `User:bob:topic:orders-*` / `User:bob:group:billing`.
    pub fn parse(s: &str) -> Result<AllowRule, String> {
        let s = s.trim();
        let err = || {
            format!("allow rule '{s}' must look like User:<name>:topic:<name or prefix*>, User:<name>:group:<name or prefix*> or User:<name>:transactional-id:<name or prefix*>")
        };
        let (rest, pattern) = s.rsplit_once(':').ok_or_else(err)?;
        let (principal, kind) = rest.rsplit_once(':').ok_or_else(err)?;
        let resource = match kind.to_ascii_lowercase().as_str() {
            "topic" => ResourceType::Topic,
            "group" => ResourceType::Group,
            "transactional-id" | "transactional_id" => ResourceType::TransactionalId,
            _ => return Err(err()),
        };
        if !principal.starts_with("User:") || principal.len() <= 5 || pattern.is_empty() {
            return Err(err());
        }
        Ok(AllowRule {
            principal: principal.to_string(),
            resource,
            pattern: pattern.to_string(),
        })
    }

    fn matches(&self, principal: &str, resource: ResourceType, name: &str) -> bool {
        self.resource == resource
            && self.principal == principal
            && match self.pattern.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => self.pattern == name,
            }
    }
}

/// Simple authorisation (`authorizer.class.name`): when on, a request on a
/// topic or group is allowed for `super.users` and for principals with an
/// allow rule matching it; anything else is answered with
/// TOPIC_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED as Kafka's
/// `StandardAuthorizer` with `allow.everyone.if.no.acl.found=false` does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorization {
    /// Whether requests are authorised at all (off: everything is allowed).
    pub enabled: bool,
    /// `super.users`: principals allowed everything.
    pub super_users: Vec<String>,
    /// Allow rules (`rill.acls`).
    pub rules: Vec<AllowRule>,
}

impl Authorization {
    /// Whether `principal` may use the resource.
    pub fn allows(&self, principal: &str, resource: ResourceType, name: &str) -> bool {
        !self.enabled
            || self.super_users.iter().any(|u| u == principal)
            || self
                .rules
                .iter()
                .any(|r| r.matches(principal, resource, name))
    }

    /// Whether `principal` may write to some topic (an idempotent producer
    /// needs that for InitProducerId, as in Kafka 2.8+).
    pub fn allows_any_topic(&self, principal: &str) -> bool {
        !self.enabled
            || self.super_users.iter().any(|u| u == principal)
            || self
                .rules
                .iter()
                .any(|r| r.principal == principal && r.resource == ResourceType::Topic)
    }
}

/// Security settings of an embedded cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecuritySettings {
    /// Simple authorisation: super users and allow rules.
    pub authorization: Authorization,
    /// TLS material; required when a listener is SSL or SASL_SSL.
    pub tls: Option<TlsFiles>,
    /// SASL users and their passwords (PLAIN and SCRAM); see [`load_users`].
    pub users: BTreeMap<String, String>,
    /// `sasl.enabled.mechanisms`; empty means all four.
    pub mechanisms: Vec<Mechanism>,
    /// `connections.max.reauth.ms` (KIP-368); `None` (Kafka's 0) disables
    /// session lifetimes.
    pub max_reauth: Option<Duration>,
}

/// Reads a users file: one `user=password` per line; `#` starts a comment.
pub fn load_users(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("could not read the users file {}: {e}", path.display()))?;
    let mut users = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((u, p)) = line.split_once('=') else {
            return Err(format!(
                "{} line {}: expected user=password",
                path.display(),
                i + 1
            ));
        };
        let u = u.trim();
        if u.is_empty() {
            return Err(format!(
                "{} line {}: empty user name",
                path.display(),
                i + 1
            ));
        }
        users.insert(u.to_string(), p.trim().to_string());
    }
    Ok(users)
}

fn pem_error(what: &str, path: &Path, e: impl std::fmt::Display) -> String {
    format!("{what} {}: {e}", path.display())
}

/// Builds the TLS acceptor from PEM files; `client_auth` requires client
/// certificates signed by `files.client_ca`.
fn tls_acceptor(files: &TlsFiles, client_auth: bool) -> Result<tokio_rustls::TlsAcceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert_chain)
        .map_err(|e| pem_error("certificate chain", &files.cert_chain, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem_error("certificate chain", &files.cert_chain, e))?;
    if chain.is_empty() {
        return Err(pem_error(
            "certificate chain",
            &files.cert_chain,
            "no certificate in it",
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| pem_error("private key", &files.key, e))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match files.client_ca.as_ref().filter(|_| client_auth) {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).map_err(|e| pem_error("client CA", ca, e))? {
                roots
                    .add(c.map_err(|e| pem_error("client CA", ca, e))?)
                    .map_err(|e| pem_error("client CA", ca, e))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .map_err(|e| pem_error("client CA", ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("the broker certificate and key do not fit together: {e}"))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// The broker-wide authenticator, built once at start.
pub(crate) struct Authenticator {
    /// TLS for SASL_SSL listeners (and SSL ones without a client CA).
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// TLS for SSL listeners when client certificates are required.
    tls_client_auth: Option<tokio_rustls::TlsAcceptor>,
    users: BTreeMap<String, String>,
    scram: HashMap<(Mechanism, String), ScramCredential>,
    mechanisms: Vec<Mechanism>,
    max_reauth: Option<Duration>,
}

impl Authenticator {
    /// Builds TLS acceptors and SCRAM credentials from settings that
    /// `BrokerConfig::validate` checked (TLS files exist for TLS listeners).
    pub fn new(s: &SecuritySettings) -> Result<Authenticator, String> {
        let tls_client_auth = match &s.tls {
            Some(files) if files.client_ca.is_some() => Some(tls_acceptor(files, true)?),
            _ => None,
        };
        let tls = match &s.tls {
            Some(files) => Some(tls_acceptor(files, false)?),
            None => None,
        };
        let mut rng = rand::thread_rng();
        let mut scram = HashMap::new();
        for (user, password) in &s.users {
            for m in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
                let salt: [u8; 16] = rng.gen();
                scram.insert(
                    (m, user.clone()),
                    ScramCredential::new(m, password, &salt, SCRAM_MIN_ITERATIONS),
                );
            }
        }
        Ok(Authenticator {
            tls,
            tls_client_auth,
            users: s.users.clone(),
            scram,
            mechanisms: if s.mechanisms.is_empty() {
                Mechanism::ALL.to_vec()
            } else {
                s.mechanisms.clone()
            },
            max_reauth: s.max_reauth,
        })
    }
}

impl Authenticator {
    /// The TLS acceptor of a listener protocol.
    pub fn acceptor(&self, protocol: SecurityProtocol) -> Option<tokio_rustls::TlsAcceptor> {
        match protocol {
            SecurityProtocol::Ssl => self.tls_client_auth.clone().or_else(|| self.tls.clone()),
            SecurityProtocol::SaslSsl => self.tls.clone(),
            _ => None,
        }
    }
}

/// What the server does with a request, given the connection's session.
pub(crate) enum Admit {
    /// Serve it normally.
    Serve,
    /// A SASL request: handled with the session.
    Sasl,
    /// Close the connection, logging why.
    Close(String),
}

enum State {
    /// No SASL on this listener.
    Open,
    /// Waiting for SaslHandshake.
    Handshake,
    /// Waiting for SaslAuthenticate rounds of this mechanism.
    Authenticating {
        mechanism: Mechanism,
        scram: Option<ScramServer>,
    },
    /// Authenticated.
    Done,
}

/// One connection's authentication state.
pub(crate) struct Session {
    state: State,
    /// The authenticated principal (`User:<name>`), `User:ANONYMOUS` on
    /// listeners without SASL.
    pub principal: String,
    mechanism: Option<Mechanism>,
    expires: Option<Instant>,
    reauthenticating: bool,
}

impl Session {
    pub fn new(protocol: SecurityProtocol) -> Session {
        Session {
            state: if protocol.uses_sasl() {
                State::Handshake
            } else {
                State::Open
            },
            principal: "User:ANONYMOUS".into(),
            mechanism: None,
            expires: None,
            reauthenticating: false,
        }
    }

    /// Whether `api` may be served now.
    pub fn admit(&self, api: impl Into<Api>) -> Admit {
        let api = api.into();
        let sasl_api = api == ApiKey::SaslHandshake || api == ApiKey::SaslAuthenticate;
        match &self.state {
            // Answered with ILLEGAL_SASL_STATE, as Kafka does.
            State::Open if api == ApiKey::SaslHandshake => Admit::Sasl,
            State::Open if sasl_api => {
                Admit::Close("SASL request on a listener without SASL".into())
            }
            State::Open => Admit::Serve,
            State::Handshake if api == ApiKey::SaslHandshake => Admit::Sasl,
            State::Handshake if api == ApiKey::ApiVersions && !self.reauthenticating => {
                Admit::Serve
            }
            State::Handshake => Admit::Close(format!("{api:?} before SASL authentication")),
            State::Authenticating { .. } if api == ApiKey::SaslAuthenticate => Admit::Sasl,
            State::Authenticating { .. } => {
                Admit::Close(format!("{api:?} during SASL authentication"))
            }
            State::Done => {
                let expired = self.expires.is_some_and(|t| Instant::now() >= t);
                if api == ApiKey::SaslHandshake {
                    Admit::Sasl
                } else if expired {
                    Admit::Close("the SASL session expired (connections.max.reauth.ms) without re-authentication".into())
                } else if api == ApiKey::SaslAuthenticate {
                    Admit::Close("SaslAuthenticate without SaslHandshake".into())
                } else {
                    Admit::Serve
                }
            }
        }
    }

    /// SaslHandshake: picks the mechanism. Returns the error code (0, or
    /// UNSUPPORTED_SASL_MECHANISM) and the enabled mechanisms.
    pub fn handshake(&mut self, auth: &Authenticator, mechanism: &str) -> (i16, Vec<&'static str>) {
        let enabled: Vec<&'static str> = auth.mechanisms.iter().map(|m| m.name()).collect();
        if matches!(self.state, State::Open) {
            return (
                rill_protocol::ErrorCode::IllegalSaslState.code(),
                Vec::new(),
            );
        }
        let reauth = matches!(self.state, State::Done);
        let chosen = Mechanism::parse(mechanism).filter(|m| auth.mechanisms.contains(m));
        match chosen {
            Some(m) if reauth && Some(m) != self.mechanism => {
                // KIP-368: re-authentication keeps the mechanism.
                (
                    rill_protocol::ErrorCode::UnsupportedSaslMechanism.code(),
                    enabled,
                )
            }
            Some(m) => {
                self.reauthenticating = reauth;
                self.state = State::Authenticating {
                    mechanism: m,
                    scram: m.is_scram().then(|| ScramServer::new(m)),
                };
                (0, enabled)
            }
            None => (
                rill_protocol::ErrorCode::UnsupportedSaslMechanism.code(),
                enabled,
            ),
        }
    }

    /// One SaslAuthenticate round: the bytes to answer, and the session
    /// lifetime in ms once authenticated; `Err` is the failure message (the
    /// connection is then closed).
    pub fn authenticate(
        &mut self,
        auth: &Authenticator,
        bytes: &[u8],
    ) -> Result<(Vec<u8>, i64), String> {
        let State::Authenticating { mechanism, scram } = &mut self.state else {
            return Err("SaslAuthenticate without SaslHandshake".into());
        };
        let m = *mechanism;
        let failed = |e: sasl::SaslError| {
            format!("Authentication failed during authentication due to invalid credentials with SASL mechanism {m}: {e}")
        };
        let (principal, answer, token_expiry) = match m {
            Mechanism::Plain => {
                let (user, password) = sasl::parse_plain(bytes).map_err(failed)?;
                if auth.users.get(&user).is_none_or(|p| p != &password) {
                    return Err(failed(sasl::SaslError::BadCredentials));
                }
                (user, Vec::new(), None)
            }
            Mechanism::ScramSha256 | Mechanism::ScramSha512 => {
                let server = scram
                    .as_mut()
                    .expect("SCRAM state is made with the mechanism");
                if server.user().is_none() {
                    let nonce: String = rand::thread_rng()
                        .sample_iter(&rand::distributions::Alphanumeric)
                        .take(24)
                        .map(char::from)
                        .collect();
                    let (_, first) = server
                        .server_first(
                            bytes,
                            |u| auth.scram.get(&(m, u.to_string())).cloned(),
                            &nonce,
                        )
                        .map_err(failed)?;
                    return Ok((first, 0));
                }
                let user = server.user().unwrap_or_default().to_string();
                let fin = server.server_final(bytes).map_err(failed)?;
                (user, fin, None)
            }
            Mechanism::OAuthBearer => {
                let token = sasl::parse_oauthbearer(bytes).map_err(failed)?;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis() as i64;
                let t = sasl::validate_unsecured_jws(&token, "sub", now).map_err(failed)?;
                (
                    t.principal,
                    Vec::new(),
                    Some(Duration::from_millis((t.expires_ms - now).max(0) as u64)),
                )
            }
        };
        let principal = format!("User:{principal}");
        if self.reauthenticating && principal != self.principal {
            return Err(format!("re-authentication as {principal} on a connection of {}: the principal may not change", self.principal));
        }
        let lifetime = match (auth.max_reauth, token_expiry) {
            (Some(max), Some(tok)) => Some(max.min(tok)),
            (Some(max), None) => Some(max),
            (None, _) => None,
        };
        self.principal = principal;
        self.mechanism = Some(m);
        self.expires = lifetime.map(|l| Instant::now() + l);
        self.state = State::Done;
        self.reauthenticating = false;
        Ok((answer, lifetime.map_or(0, |l| l.as_millis().max(1) as i64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Authenticator {
        let s = SecuritySettings {
            users: [("alice".to_string(), "alice-secret".to_string())].into(),
            max_reauth: Some(Duration::from_secs(60)),
            ..Default::default()
        };
        Authenticator::new(&s).unwrap()
    }

    #[test]
    fn only_sasl_requests_pass_before_authentication() {
        let a = auth();
        let mut s = Session::new(SecurityProtocol::SaslPlaintext);
        assert!(matches!(s.admit(ApiKey::ApiVersions), Admit::Serve));
        assert!(matches!(s.admit(ApiKey::Metadata), Admit::Close(_)));
        assert_eq!(
            s.handshake(&a, "GSSAPI").0,
            rill_protocol::ErrorCode::UnsupportedSaslMechanism.code()
        );
        assert_eq!(s.handshake(&a, "PLAIN").0, 0);
        assert!(matches!(s.admit(ApiKey::Produce), Admit::Close(_)));
        let (_, lifetime) = s
            .authenticate(&a, &sasl::plain_initial_response("alice", "alice-secret"))
            .unwrap();
        assert_eq!(lifetime, 60_000);
        assert!(matches!(s.admit(ApiKey::Produce), Admit::Serve));
        assert_eq!(s.principal, "User:alice");
    }

    #[test]
    fn wrong_password_fails_without_naming_it() {
        let a = auth();
        let mut s = Session::new(SecurityProtocol::SaslSsl);
        s.handshake(&a, "PLAIN");
        let e = s
            .authenticate(&a, &sasl::plain_initial_response("alice", "nope"))
            .unwrap_err();
        assert!(
            e.contains("invalid credentials") && !e.contains("nope"),
            "{e}"
        );
    }

    #[test]
    fn scram_and_reauthentication_keep_the_principal() {
        let a = auth();
        let mut s = Session::new(SecurityProtocol::SaslSsl);
        for _ in 0..2 {
            assert_eq!(s.handshake(&a, "SCRAM-SHA-512").0, 0);
            let mut c =
                sasl::ScramClient::new(Mechanism::ScramSha512, "alice", "alice-secret", "n1");
            let (first, _) = s.authenticate(&a, &c.client_first()).unwrap();
            let fin = c.client_final(&first).unwrap();
            let (last, lifetime) = s.authenticate(&a, &fin).unwrap();
            c.verify_server_final(&last).unwrap();
            assert_eq!(lifetime, 60_000);
        }
        // Another mechanism on re-authentication is refused.
        assert_ne!(s.handshake(&a, "PLAIN").0, 0);
    }

    #[test]
    fn allow_rules_match_literals_and_prefixes() {
        let a = Authorization {
            enabled: true,
            super_users: vec!["User:admin".into()],
            rules: vec![
                AllowRule::parse("User:bob:topic:orders-*").unwrap(),
                AllowRule::parse("User:bob:group:billing").unwrap(),
            ],
        };
        assert!(a.allows("User:bob", ResourceType::Topic, "orders-eu"));
        assert!(!a.allows("User:bob", ResourceType::Topic, "payments"));
        assert!(a.allows("User:bob", ResourceType::Group, "billing"));
        assert!(!a.allows("User:bob", ResourceType::Group, "billing-2"));
        assert!(a.allows("User:admin", ResourceType::Group, "anything"));
        assert!(!a.allows("User:carol", ResourceType::Topic, "orders-eu"));
        assert!(a.allows_any_topic("User:bob") && !a.allows_any_topic("User:carol"));
        assert!(AllowRule::parse("bob:topic:x").is_err());
        assert!(AllowRule::parse("User:bob:cluster:x").is_err());
    }

    #[test]
    fn listener_flags_parse() {
        let (l, host) = Listener::parse("SASL_SSL://127.0.0.1:9093").unwrap();
        assert_eq!(
            (l.protocol, l.port, host.as_str()),
            (SecurityProtocol::SaslSsl, 9093, "127.0.0.1")
        );
        assert!(Listener::parse("TLS://x:1").is_err());
        assert!(Listener::parse("127.0.0.1:9092").is_err());
    }
}
