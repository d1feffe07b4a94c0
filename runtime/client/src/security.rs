//! Security settings: `security.protocol`, TLS (`ssl.*`) and SASL
//! (`sasl.*`), read with Kafka's property names and defaults.
//!
//! Invariants:
//! - Everything that can be checked before connecting is checked when the
//!   client is built: PEM files are read and parsed, the JAAS line is parsed,
//!   the mechanism is known. A bad setting is one [`Error::Config`] naming
//!   the key (and the file), never a failure on first connect.
//! - Secrets (passwords, private keys, JAAS lines, tokens) are held in
//!   [`Password`], whose `Debug`/`Display` print `[hidden]` as Kafka's
//!   `Password` type does, and [`is_secret_key`] keeps their values out of
//!   configuration errors and `Debug` output of a [`ClientConfig`].
//! - TLS is rustls (ring provider): no OpenSSL. Hostname verification is on
//!   unless `ssl.endpoint.identification.algorithm` is empty, as in Kafka.
//! - OAUTHBEARER tokens come from a [`TokenProvider`], registered by name and
//!   selected with `sasl.login.callback.handler.class`; without one, the JAAS
//!   line's `unsecuredLoginStringClaim_sub` makes Kafka's unsecured JWS
//!   (tests and development only).
//!
//! [`ClientConfig`]: crate::ClientConfig

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rill_protocol::sasl::Mechanism;
pub use rill_protocol::SecurityProtocol;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::{Error, Result};
pub use crate::secret::{is_secret_key, Password, HIDDEN};

static REAUTHENTICATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many KIP-368 re-authentications this process's clients completed.
pub fn reauthentications() -> u64 {
    REAUTHENTICATIONS.load(std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn count_reauthentication() {
    REAUTHENTICATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A bearer token for OAUTHBEARER.
#[derive(Clone)]
pub struct BearerToken {
    /// The compact-serialised token sent to the broker.
    pub value: Password,
    /// How long it stays valid from now; the client re-authenticates
    /// (KIP-368) before the broker's session lifetime, which brokers cap at
    /// the token's lifetime.
    pub lifetime: Duration,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BearerToken({HIDDEN}, lifetime {:?})", self.lifetime)
    }
}

/// Supplies OAUTHBEARER tokens (Kafka's login callback handler). Called on
/// every authentication and re-authentication, from a tokio task: keep it
/// quick (cache the token, refresh it elsewhere).
pub trait TokenProvider: Send + Sync {
    /// A currently valid token, or why there is none.
    fn token(&self) -> std::result::Result<BearerToken, String>;
}

fn providers() -> &'static Mutex<HashMap<String, Arc<dyn TokenProvider>>> {
    static P: OnceLock<Mutex<HashMap<String, Arc<dyn TokenProvider>>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

/// Registers an OAUTHBEARER token provider under `name`; clients whose
/// `sasl.login.callback.handler.class` is `name` use it. Registering a name
/// again replaces the provider for clients built afterwards.
pub fn register_token_provider(name: &str, provider: Arc<dyn TokenProvider>) {
    providers()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_string(), provider);
}

/// Kafka's unsecured JWS login (`unsecuredLoginStringClaim_sub`).
struct UnsecuredLogin {
    principal: String,
    lifetime: Duration,
}

impl TokenProvider for UnsecuredLogin {
    fn token(&self) -> std::result::Result<BearerToken, String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as i64;
        Ok(BearerToken {
            value: Password::new(rill_protocol::sasl::unsecured_jws(
                "sub",
                &self.principal,
                now,
                self.lifetime.as_millis() as i64,
            )),
            lifetime: self.lifetime,
        })
    }
}

/// What a SASL login presents.
#[derive(Clone)]
pub(crate) enum SaslLogin {
    Password { user: String, password: Password },
    Token(Arc<dyn TokenProvider>),
}

/// SASL settings of a client.
#[derive(Clone)]
pub struct SaslSettings {
    /// `sasl.mechanism`.
    pub mechanism: Mechanism,
    pub(crate) login: SaslLogin,
}

impl std::fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.login {
            SaslLogin::Password { user, .. } => {
                write!(f, "Sasl({} user={user} password={HIDDEN})", self.mechanism)
            }
            SaslLogin::Token(_) => write!(f, "Sasl({} token provider)", self.mechanism),
        }
    }
}

/// The security part of a client's configuration.
#[derive(Clone)]
pub struct SecurityConfig {
    /// `security.protocol`.
    pub protocol: SecurityProtocol,
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    /// SASL settings when the protocol is SASL_*.
    pub sasl: Option<SaslSettings>,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            sasl: None,
        }
    }
}

impl std::fmt::Debug for SecurityConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.protocol.name())?;
        if let Some(s) = &self.sasl {
            write!(f, " {s:?}")?;
        }
        Ok(())
    }
}

/// A TLS client configuration for HTTPS calls (a Streams app's REST API):
/// certificates and host names checked against the CA certificates in the
/// PEM file `truststore`, or the system's when it is `None`. The error
/// names the file.
pub fn https_client_config(
    truststore: Option<&Path>,
) -> std::result::Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match truststore {
        Some(path) => {
            let bad = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
            for c in CertificateDer::pem_file_iter(path).map_err(|e| bad(&e))? {
                roots.add(c.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
            }
            if roots.is_empty() {
                return Err(bad(&"no PEM certificate in it"));
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(crypto())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Reads a property; the config reader marks it as known.
pub(crate) trait Props {
    fn get(&mut self, key: &'static str) -> Option<String>;
}

fn crypto() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_file(key: &str, path: &str) -> Result<Vec<u8>> {
    std::fs::read(Path::new(path))
        .map_err(|e| Error::config(key, path, format!("could not read the file: {e}")))
}

fn pem_certs(key: &str, shown: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let certs: std::result::Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem).collect();
    match certs {
        Ok(c) if !c.is_empty() => Ok(c),
        Ok(_) => Err(Error::config(
            key,
            shown,
            "no PEM certificate (-----BEGIN CERTIFICATE-----) in it",
        )),
        Err(e) => Err(Error::config(key, shown, format!("not valid PEM: {e}"))),
    }
}

fn check_store_type(key: &'static str, v: Option<String>) -> Result<()> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(()),
        Some(t) if t.eq_ignore_ascii_case("PEM") => Ok(()),
        Some(t) => Err(Error::config(
            key,
            t,
            "only PEM stores are supported; convert the store to PEM (e.g. keytool -importkeystore to PKCS12, then openssl pkcs12 -nodes) and set PEM",
        )),
    }
}

/// A PEM private key, decrypting an `ENCRYPTED PRIVATE KEY` (PKCS#8) with
/// `password`.
fn pem_key(
    key: &'static str,
    shown: &str,
    pem: &[u8],
    password: Option<&Password>,
) -> Result<PrivateKeyDer<'static>> {
    let text = String::from_utf8_lossy(pem);
    if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        let Some(pw) = password else {
            return Err(Error::config(
                key,
                shown,
                "the private key is encrypted: set ssl.key.password",
            ));
        };
        let (_, doc) = pkcs8::SecretDocument::from_pem(&text).map_err(|e| {
            Error::config(key, shown, format!("not a valid encrypted PEM key: {e}"))
        })?;
        let enc = pkcs8::EncryptedPrivateKeyInfo::try_from(doc.as_bytes()).map_err(|e| {
            Error::config(key, shown, format!("not a valid encrypted PKCS#8 key: {e}"))
        })?;
        let plain = enc.decrypt(pw.value()).map_err(|_| {
            Error::config(
                "ssl.key.password",
                HIDDEN,
                "could not decrypt the private key with it (wrong password or unsupported cipher)",
            )
        })?;
        return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            plain.as_bytes().to_vec(),
        )));
    }
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        Error::config(
            key,
            shown,
            format!("no usable PEM private key (PKCS#8, PKCS#1 or SEC1) in it: {e}"),
        )
    })
}

/// Builds the TLS settings from `ssl.*`.
fn tls_config<P: Props>(p: &mut P) -> Result<Arc<rustls::ClientConfig>> {
    check_store_type("ssl.truststore.type", p.get("ssl.truststore.type"))?;
    check_store_type("ssl.keystore.type", p.get("ssl.keystore.type"))?;
    if p.get("ssl.truststore.password")
        .is_some_and(|v| !v.is_empty())
    {
        return Err(Error::config(
            "ssl.truststore.password",
            HIDDEN,
            "a PEM trust store has no password (Kafka refuses it too); remove the setting",
        ));
    }
    let mut roots = RootCertStore::empty();
    let trusted = match (
        p.get("ssl.truststore.location"),
        p.get("ssl.truststore.certificates"),
    ) {
        (Some(path), None) if !path.is_empty() => Some(pem_certs(
            "ssl.truststore.location",
            &path,
            &read_file("ssl.truststore.location", &path)?,
        )?),
        (None, Some(pem)) if !pem.is_empty() => Some(pem_certs(
            "ssl.truststore.certificates",
            "(inline PEM)",
            pem.as_bytes(),
        )?),
        (Some(_), Some(_)) => {
            return Err(Error::config(
                "ssl.truststore.certificates",
                "(inline PEM)",
                "set either ssl.truststore.location or ssl.truststore.certificates, not both",
            ))
        }
        _ => None,
    };
    match trusted {
        Some(certs) => {
            for c in certs {
                roots.add(c).map_err(|e| {
                    Error::config(
                        "ssl.truststore.location",
                        "",
                        format!("a trusted certificate is not usable: {e}"),
                    )
                })?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for c in native.certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(Error::config(
                    "ssl.truststore.location",
                    "",
                    "no trust store was given and the system has no CA certificates; set ssl.truststore.location to a PEM file",
                ));
            }
        }
    }
    let roots = Arc::new(roots);
    let check_hostname = match p.get("ssl.endpoint.identification.algorithm") {
        None => true,
        Some(v) if v.trim().is_empty() => false,
        Some(v) if v.trim().eq_ignore_ascii_case("https") => true,
        Some(v) => {
            return Err(Error::config(
                "ssl.endpoint.identification.algorithm",
                &v,
                "expected https (verify the broker's host name) or empty (do not)",
            ))
        }
    };
    let versions = tls_versions(p.get("ssl.enabled.protocols"))?;
    let builder = rustls::ClientConfig::builder_with_provider(crypto())
        .with_protocol_versions(&versions)
        .map_err(|e| Error::config("ssl.enabled.protocols", "", e.to_string()))?;
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, crypto())
        .build()
        .map_err(|e| Error::config("ssl.truststore.location", "", e.to_string()))?;
    let builder = if check_hostname {
        builder.with_webpki_verifier(verifier)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoHostnameCheck(verifier)))
    };
    let key_password = p
        .get("ssl.key.password")
        .or_else(|| p.get("ssl.keystore.password"))
        .filter(|s| !s.is_empty())
        .map(Password::new);
    let client_auth = match (
        p.get("ssl.keystore.location").filter(|s| !s.is_empty()),
        p.get("ssl.keystore.certificate.chain").filter(|s| !s.is_empty()),
        p.get("ssl.keystore.key").filter(|s| !s.is_empty()),
    ) {
        (Some(path), None, None) => {
            let pem = read_file("ssl.keystore.location", &path)?;
            Some((
                pem_certs("ssl.keystore.location", &path, &pem)?,
                pem_key("ssl.keystore.location", &path, &pem, key_password.as_ref())?,
            ))
        }
        (None, Some(chain), Some(key)) => Some((
            pem_certs("ssl.keystore.certificate.chain", "(inline PEM)", chain.as_bytes())?,
            pem_key("ssl.keystore.key", HIDDEN, key.as_bytes(), key_password.as_ref())?,
        )),
        (None, None, None) => None,
        (Some(_), _, _) => {
            return Err(Error::config(
                "ssl.keystore.location",
                "",
                "set either ssl.keystore.location or ssl.keystore.certificate.chain with ssl.keystore.key, not both",
            ))
        }
        (None, _, _) => {
            return Err(Error::config(
                "ssl.keystore.certificate.chain",
                "",
                "ssl.keystore.certificate.chain and ssl.keystore.key go together",
            ))
        }
    };
    let config = match client_auth {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
            Error::config(
                "ssl.keystore.location",
                "",
                format!("the client certificate and key do not fit together: {e}"),
            )
        })?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

fn tls_versions(v: Option<String>) -> Result<Vec<&'static rustls::SupportedProtocolVersion>> {
    let Some(list) = v.filter(|s| !s.trim().is_empty()) else {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    };
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item {
            "TLSv1.3" => out.push(&rustls::version::TLS13),
            "TLSv1.2" => out.push(&rustls::version::TLS12),
            other => {
                return Err(Error::config(
                    "ssl.enabled.protocols",
                    &list,
                    format!("{other} is not supported; use TLSv1.2 and/or TLSv1.3"),
                ))
            }
        }
    }
    Ok(out)
}

/// Verifies the chain but not the name (`ssl.endpoint.identification.algorithm=`).
#[derive(Debug)]
struct NoHostnameCheck(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for NoHostnameCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// One JAAS login module line (`sasl.jaas.config`).
#[derive(Debug, PartialEq)]
struct Jaas {
    module: String,
    options: HashMap<String, String>,
}

fn skip_whitespace(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars.peek().is_some_and(|c| c.is_whitespace()) {
        chars.next();
    }
}

/// Parses `<LoginModule class> <flag> key="value" ...;`. Errors never quote
/// the line (it holds the password).
fn parse_jaas(line: &str) -> std::result::Result<Jaas, String> {
    let mut chars = line.trim().chars().peekable();
    let mut word = || {
        skip_whitespace(&mut chars);
        let mut w = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || c == '=' || c == ';' {
                break;
            }
            w.push(c);
            chars.next();
        }
        w
    };
    let module = word();
    let flag = word();
    if module.is_empty()
        || !["required", "requisite", "sufficient", "optional"]
            .contains(&flag.to_ascii_lowercase().as_str())
    {
        return Err("expected '<LoginModule class> required key=\"value\" ...;'".into());
    }
    let mut options = HashMap::new();
    loop {
        skip_whitespace(&mut chars);
        match chars.peek() {
            None | Some(';') => break,
            _ => {}
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        skip_whitespace(&mut chars);
        if chars.next() != Some('=') {
            return Err(format!("option '{key}' has no '=value'"));
        }
        skip_whitespace(&mut chars);
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            value.push(n);
                        }
                    }
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => value.push(c),
                }
            }
            if !closed {
                return Err(format!("the value of option '{key}' has no closing quote"));
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || c == ';' {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        options.insert(key, value);
    }
    if chars.next() != Some(';') {
        return Err("the line must end with ';'".into());
    }
    Ok(Jaas { module, options })
}

const PLAIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";
const SCRAM_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";
const OAUTH_MODULE: &str = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";

/// Reads the SASL settings (`sasl.*`).
fn sasl_settings<P: Props>(p: &mut P) -> Result<SaslSettings> {
    let mech_name = p.get("sasl.mechanism").unwrap_or_else(|| "GSSAPI".into());
    let Some(mechanism) = Mechanism::parse(mech_name.trim()) else {
        return Err(Error::config(
            "sasl.mechanism",
            &mech_name,
            "supported mechanisms are PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER (GSSAPI/Kerberos is not; Kafka's default when sasl.mechanism is unset)",
        ));
    };
    let jaas = match p.get("sasl.jaas.config").filter(|s| !s.trim().is_empty()) {
        Some(line) => {
            Some(parse_jaas(&line).map_err(|r| Error::config("sasl.jaas.config", HIDDEN, r))?)
        }
        None => None,
    };
    let user = p.get("sasl.username");
    let password = p.get("sasl.password");
    let callback = p
        .get("sasl.login.callback.handler.class")
        .filter(|s| !s.is_empty());
    let login = match mechanism {
        Mechanism::Plain | Mechanism::ScramSha256 | Mechanism::ScramSha512 => {
            let module = if mechanism == Mechanism::Plain {
                PLAIN_MODULE
            } else {
                SCRAM_MODULE
            };
            let (u, pw) = match (&jaas, user, password) {
                (Some(j), None, None) => {
                    if j.module != module {
                        return Err(Error::config(
                            "sasl.jaas.config",
                            HIDDEN,
                            format!("sasl.mechanism={mechanism} needs the login module {module}, not {}", j.module),
                        ));
                    }
                    (
                        j.options.get("username").cloned(),
                        j.options.get("password").cloned(),
                    )
                }
                (None, u, pw) => (u, pw),
                (Some(_), _, _) => {
                    return Err(Error::config(
                        "sasl.username",
                        "",
                        "set either sasl.jaas.config or sasl.username/sasl.password, not both",
                    ))
                }
            };
            match (u.filter(|s| !s.is_empty()), pw) {
                (Some(user), Some(password)) => SaslLogin::Password {
                    user,
                    password: Password::new(password),
                },
                _ => {
                    return Err(Error::config(
                        "sasl.jaas.config",
                        HIDDEN,
                        format!("{mechanism} needs a user name and password: set sasl.jaas.config={module} required username=\"...\" password=\"...\"; (or sasl.username and sasl.password)"),
                    ))
                }
            }
        }
        Mechanism::OAuthBearer => {
            if let Some(name) = callback {
                let provider = providers()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&name)
                    .cloned();
                match provider {
                    Some(p) => SaslLogin::Token(p),
                    None => {
                        return Err(Error::config(
                            "sasl.login.callback.handler.class",
                            &name,
                            "no token provider is registered under this name (rill_client::register_token_provider)",
                        ))
                    }
                }
            } else {
                let principal = jaas
                    .as_ref()
                    .filter(|j| j.module == OAUTH_MODULE)
                    .and_then(|j| j.options.get("unsecuredLoginStringClaim_sub").cloned());
                let lifetime = jaas
                    .as_ref()
                    .and_then(|j| j.options.get("unsecuredLoginLifetimeSeconds"))
                    .map(|s| s.parse::<u64>())
                    .transpose()
                    .map_err(|_| {
                        Error::config(
                            "sasl.jaas.config",
                            HIDDEN,
                            "unsecuredLoginLifetimeSeconds must be a whole number",
                        )
                    })?
                    .unwrap_or(3600);
                match principal {
                    Some(principal) if !principal.is_empty() => SaslLogin::Token(Arc::new(UnsecuredLogin {
                        principal,
                        lifetime: Duration::from_secs(lifetime),
                    })),
                    _ => {
                        return Err(Error::config(
                            "sasl.login.callback.handler.class",
                            "",
                            format!("OAUTHBEARER needs a token provider: register one and name it here, or for tests set sasl.jaas.config={OAUTH_MODULE} required unsecuredLoginStringClaim_sub=\"<principal>\";"),
                        ))
                    }
                }
            }
        }
    };
    Ok(SaslSettings { mechanism, login })
}

/// Java-only security settings accepted (and ignored) so shared property
/// files work.
pub(crate) const ACCEPTED_JAVA_KEYS: &[&str] = &[
    "ssl.protocol",
    "ssl.provider",
    "ssl.cipher.suites",
    "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation",
    "ssl.engine.factory.class",
    "sasl.kerberos.service.name",
    "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.ticket.renew.window.factor",
    "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds",
    "sasl.login.connect.timeout.ms",
    "sasl.login.read.timeout.ms",
    "sasl.login.retry.backoff.ms",
    "sasl.login.retry.backoff.max.ms",
    "sasl.login.class",
    "sasl.client.callback.handler.class",
];

/// Reads `security.protocol`, `ssl.*` and `sasl.*`.
pub(crate) fn read<P: Props>(p: &mut P) -> Result<SecurityConfig> {
    let raw = p.get("security.protocol");
    let protocol = match raw.as_deref() {
        None => SecurityProtocol::Plaintext,
        Some(v) => SecurityProtocol::parse(v).ok_or_else(|| {
            Error::config(
                "security.protocol",
                v,
                "expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
            )
        })?,
    };
    // Read (and so mark as known) every key, even those this protocol does
    // not use, so one properties file serves several listeners.
    let tls = if protocol.uses_tls() {
        Some(tls_config(p)?)
    } else {
        for k in [
            "ssl.truststore.type",
            "ssl.truststore.location",
            "ssl.truststore.certificates",
            "ssl.truststore.password",
            "ssl.keystore.type",
            "ssl.keystore.location",
            "ssl.keystore.certificate.chain",
            "ssl.keystore.key",
            "ssl.keystore.password",
            "ssl.key.password",
            "ssl.endpoint.identification.algorithm",
            "ssl.enabled.protocols",
        ] {
            p.get(k);
        }
        None
    };
    let sasl = if protocol.uses_sasl() {
        Some(sasl_settings(p)?)
    } else {
        for k in [
            "sasl.mechanism",
            "sasl.jaas.config",
            "sasl.username",
            "sasl.password",
            "sasl.login.callback.handler.class",
        ] {
            p.get(k);
        }
        None
    };
    for k in ACCEPTED_JAVA_KEYS {
        p.get(k);
    }
    Ok(SecurityConfig {
        protocol,
        tls,
        sasl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaas_lines_parse_as_kafka_writes_them() {
        let j = parse_jaas(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="p\"w;x";"#,
        )
        .unwrap();
        assert_eq!(j.module, SCRAM_MODULE);
        assert_eq!(j.options["username"], "alice");
        assert_eq!(j.options["password"], "p\"w;x");
        let j = parse_jaas(&format!(
            "{OAUTH_MODULE} required unsecuredLoginStringClaim_sub=bob ;"
        ))
        .unwrap();
        assert_eq!(j.options["unsecuredLoginStringClaim_sub"], "bob");
        assert!(parse_jaas("PlainLoginModule username=\"a\";").is_err());
        assert!(parse_jaas(&format!("{PLAIN_MODULE} required username=\"a")).is_err());
        assert!(parse_jaas(&format!("{PLAIN_MODULE} required username=\"a\"")).is_err());
    }

    #[test]
    fn secrets_print_hidden() {
        let p = Password::new("hunter2");
        assert_eq!(format!("{p:?} {p}"), "[hidden] [hidden]");
        assert!(is_secret_key("sasl.jaas.config"));
        assert!(is_secret_key("producer.ssl.key.password"));
        assert!(is_secret_key("ssl.keystore.key"));
        assert!(!is_secret_key("ssl.keystore.location"));
    }
}
