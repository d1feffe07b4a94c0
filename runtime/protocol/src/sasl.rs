//! SASL mechanisms as Kafka uses them, with no I/O: the bytes a client sends
//! in SaslAuthenticate and the checks a broker makes on them.
//!
//! Shared by the client (`rill-client`, which carries the bytes in
//! SaslHandshake v1 + SaslAuthenticate) and the embedded broker, so both
//! sides speak one encoding:
//! - PLAIN (RFC 4616): `authzid NUL user NUL password`.
//! - SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) without channel
//!   binding (`n,,` GS2 header), as Kafka's `ScramSaslClient`/`ScramSaslServer`;
//!   at least 4096 iterations, as Kafka's `ScramMechanism` requires.
//! - OAUTHBEARER (RFC 7628): the client's initial response carrying a bearer
//!   token, and Kafka's unsecured JWS tokens (`alg: none`) for tests and
//!   development (`OAuthBearerUnsecuredLoginCallbackHandler`).
//!
//! Invariants: nothing here panics on peer bytes; every malformed message is
//! a [`SaslError`] that names the step, and never echoes a password, proof
//! or token. Keys are compared in constant time (`hmac`'s `verify_slice`).

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// Fewest PBKDF2 iterations accepted (Kafka's `ScramMechanism.minIterations`).
pub const SCRAM_MIN_ITERATIONS: u32 = 4096;

/// A SASL mechanism Kafka brokers offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// `PLAIN`: user name and password in clear (use it over TLS).
    Plain,
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
    /// `OAUTHBEARER`: a bearer token from a token provider.
    OAuthBearer,
}

impl Mechanism {
    /// Every mechanism, in the order Kafka documents them.
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
        Mechanism::OAuthBearer,
    ];

    /// The name on the wire and in `sasl.mechanism`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// The mechanism named `s` (as Kafka, case-sensitive upper case).
    pub fn parse(s: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Whether this is a SCRAM mechanism.
    pub fn is_scram(self) -> bool {
        matches!(self, Mechanism::ScramSha256 | Mechanism::ScramSha512)
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a SASL exchange failed. Never carries a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    /// A peer message did not parse.
    #[error("malformed {step}: {reason}")]
    Malformed {
        /// Which message (e.g. "SCRAM server-first message").
        step: &'static str,
        /// What was wrong with it.
        reason: String,
    },
    /// The credentials were wrong (or the user is unknown: the same answer,
    /// so a client cannot probe for user names).
    #[error("authentication failed: invalid credentials")]
    BadCredentials,
    /// The server's signature did not verify: it does not know the password.
    #[error("the server's SCRAM signature did not verify")]
    BadServerSignature,
    /// The server said no, with its reason.
    #[error("the server refused: {0}")]
    Refused(String),
}

fn malformed(step: &'static str, reason: impl Into<String>) -> SaslError {
    SaslError::Malformed {
        step,
        reason: reason.into(),
    }
}

// ---------------------------------------------------------------- PLAIN

/// The PLAIN initial response (RFC 4616), with an empty authorisation id.
pub fn plain_initial_response(user: &str, password: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(user.len() + password.len() + 2);
    out.push(0);
    out.extend_from_slice(user.as_bytes());
    out.push(0);
    out.extend_from_slice(password.as_bytes());
    out
}

/// A PLAIN response as a broker reads it: `(user, password)`. An
/// authorisation id other than empty or the user itself is refused, as
/// Kafka's `PlainSaslServer` does.
pub fn parse_plain(bytes: &[u8]) -> Result<(String, String), SaslError> {
    const STEP: &str = "PLAIN response";
    let parts: Vec<&[u8]> = bytes.split(|b| *b == 0).collect();
    if parts.len() != 3 {
        return Err(malformed(STEP, "expected authzid NUL user NUL password"));
    }
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| malformed(STEP, "not UTF-8"));
    let (authz, user, pass) = (text(parts[0])?, text(parts[1])?, text(parts[2])?);
    if user.is_empty() {
        return Err(malformed(STEP, "empty user name"));
    }
    if !authz.is_empty() && authz != user {
        return Err(SaslError::Refused(
            "the authorization id must be empty or the user name".into(),
        ));
    }
    Ok((user, pass))
}

// ---------------------------------------------------------------- SCRAM

/// The stored form of a SCRAM password (what a broker keeps per user and
/// mechanism, as Kafka's `ScramCredential`).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// Random salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// `H(ClientKey)`.
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ScramCredential(iterations={}, keys redacted)",
            self.iterations
        )
    }
}

fn hmac(m: Mechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    match m {
        Mechanism::ScramSha512 => {
            let mut mac = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        _ => {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
    }
}

fn hash(m: Mechanism, data: &[u8]) -> Vec<u8> {
    match m {
        Mechanism::ScramSha512 => Sha512::digest(data).to_vec(),
        _ => Sha256::digest(data).to_vec(),
    }
}

fn salted_password(m: Mechanism, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    match m {
        Mechanism::ScramSha512 => {
            let mut out = vec![0u8; 64];
            pbkdf2::pbkdf2_hmac::<Sha512>(password.as_bytes(), salt, iterations, &mut out);
            out
        }
        _ => {
            let mut out = vec![0u8; 32];
            pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut out);
            out
        }
    }
}

fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

impl ScramCredential {
    /// The credential for `password` with the given salt and iterations.
    pub fn new(m: Mechanism, password: &str, salt: &[u8], iterations: u32) -> ScramCredential {
        let salted = salted_password(m, password, salt, iterations);
        let client_key = hmac(m, &salted, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            iterations,
            stored_key: hash(m, &client_key),
            server_key: hmac(m, &salted, b"Server Key"),
        }
    }
}

/// SCRAM `saslname` escaping (RFC 5802 §5.1): `=` and `,` are escaped.
fn escape_name(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

fn unescape_name(s: &str) -> Result<String, SaslError> {
    let out = s.replace("=2C", ",").replace("=3D", "=");
    if out.len() + 2 * (s.matches("=2C").count() + s.matches("=3D").count()) != s.len() {
        return Err(malformed(
            "SCRAM client-first message",
            "bad escape in the user name",
        ));
    }
    Ok(out)
}

/// `key=value` attributes of a SCRAM message, in order.
fn attributes<'a>(msg: &'a str, step: &'static str) -> Result<Vec<(char, &'a str)>, SaslError> {
    msg.split(',')
        .map(|part| {
            let mut chars = part.chars();
            match (chars.next(), chars.next()) {
                (Some(k), Some('=')) if k.is_ascii_alphabetic() => Ok((k, &part[2..])),
                _ => Err(malformed(
                    step,
                    format!(
                        "attribute '{}' is not k=value",
                        part.chars().take(16).collect::<String>()
                    ),
                )),
            }
        })
        .collect()
}

fn attr<'a>(
    attrs: &[(char, &'a str)],
    key: char,
    step: &'static str,
) -> Result<&'a str, SaslError> {
    attrs
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| *v)
        .ok_or_else(|| malformed(step, format!("no '{key}=' attribute")))
}

fn b64(step: &'static str, v: &str) -> Result<Vec<u8>, SaslError> {
    STANDARD
        .decode(v)
        .map_err(|_| malformed(step, "bad base64"))
}

const GS2_HEADER: &str = "n,,";

/// The client side of one SCRAM exchange: first → (server-first) → final →
/// (server-final).
pub struct ScramClient {
    mechanism: Mechanism,
    password: String,
    client_nonce: String,
    client_first_bare: String,
    server_signature: Option<Vec<u8>>,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScramClient({})", self.mechanism)
    }
}

impl ScramClient {
    /// Starts an exchange for `user`; `nonce` must be fresh and random
    /// (printable, no commas).
    pub fn new(mechanism: Mechanism, user: &str, password: &str, nonce: &str) -> ScramClient {
        ScramClient {
            mechanism,
            password: password.to_string(),
            client_nonce: nonce.to_string(),
            client_first_bare: format!("n={},r={}", escape_name(user), nonce),
            server_signature: None,
        }
    }

    /// The client-first message.
    pub fn client_first(&self) -> Vec<u8> {
        format!("{GS2_HEADER}{}", self.client_first_bare).into_bytes()
    }

    /// Reads the server-first message and returns the client-final one.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, SaslError> {
        const STEP: &str = "SCRAM server-first message";
        let server_first =
            std::str::from_utf8(server_first).map_err(|_| malformed(STEP, "not UTF-8"))?;
        let attrs = attributes(server_first, STEP)?;
        if let Ok(e) = attr(&attrs, 'e', STEP) {
            return Err(SaslError::Refused(e.to_string()));
        }
        let nonce = attr(&attrs, 'r', STEP)?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(malformed(
                STEP,
                "the server nonce does not extend the client nonce",
            ));
        }
        let salt = b64(STEP, attr(&attrs, 's', STEP)?)?;
        let iterations: u32 = attr(&attrs, 'i', STEP)?
            .parse()
            .map_err(|_| malformed(STEP, "iteration count is not a number"))?;
        if iterations < SCRAM_MIN_ITERATIONS {
            return Err(malformed(
                STEP,
                format!("{iterations} iterations is below the minimum {SCRAM_MIN_ITERATIONS}"),
            ));
        }
        let m = self.mechanism;
        let salted = salted_password(m, &self.password, &salt, iterations);
        let client_key = hmac(m, &salted, b"Client Key");
        let stored_key = hash(m, &client_key);
        let without_proof = format!("c={},r={nonce}", STANDARD.encode(GS2_HEADER));
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = hmac(m, &stored_key, auth_message.as_bytes());
        let proof = xor(&client_key, &client_signature);
        let server_key = hmac(m, &salted, b"Server Key");
        self.server_signature = Some(hmac(m, &server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", STANDARD.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server proved it knows the key.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), SaslError> {
        const STEP: &str = "SCRAM server-final message";
        let s = std::str::from_utf8(server_final).map_err(|_| malformed(STEP, "not UTF-8"))?;
        let attrs = attributes(s, STEP)?;
        if let Ok(e) = attr(&attrs, 'e', STEP) {
            return Err(SaslError::Refused(e.to_string()));
        }
        let v = b64(STEP, attr(&attrs, 'v', STEP)?)?;
        match &self.server_signature {
            Some(expected) if constant_time_eq(expected, &v) => Ok(()),
            Some(_) => Err(SaslError::BadServerSignature),
            None => Err(malformed(STEP, "arrived before the server-first message")),
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The server side of one SCRAM exchange.
pub struct ScramServer {
    mechanism: Mechanism,
    state: ServerState,
}

enum ServerState {
    Start,
    SentFirst {
        user: String,
        credential: Option<ScramCredential>,
        nonce: String,
        client_first_bare: String,
        server_first: String,
    },
    Done,
}

impl std::fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScramServer({})", self.mechanism)
    }
}

impl ScramServer {
    /// A server exchange for `mechanism`.
    pub fn new(mechanism: Mechanism) -> ScramServer {
        ScramServer {
            mechanism,
            state: ServerState::Start,
        }
    }

    /// Reads the client-first message. `lookup` finds the user's credential
    /// (an unknown user still gets a server-first message, from a made-up
    /// credential, so the answer does not reveal which users exist);
    /// `server_nonce` is fresh randomness appended to the client's nonce.
    /// Returns the user name and the server-first message.
    pub fn server_first(
        &mut self,
        client_first: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
        server_nonce: &str,
    ) -> Result<(String, Vec<u8>), SaslError> {
        const STEP: &str = "SCRAM client-first message";
        let msg = std::str::from_utf8(client_first).map_err(|_| malformed(STEP, "not UTF-8"))?;
        let Some(bare) = msg.strip_prefix(GS2_HEADER) else {
            return Err(malformed(
                STEP,
                "channel binding and authorization ids are not supported (expected 'n,,')",
            ));
        };
        let attrs = attributes(bare, STEP)?;
        let user = unescape_name(attr(&attrs, 'n', STEP)?)?;
        let client_nonce = attr(&attrs, 'r', STEP)?;
        if client_nonce.is_empty() {
            return Err(malformed(STEP, "empty nonce"));
        }
        let credential = lookup(&user);
        let nonce = format!("{client_nonce}{server_nonce}");
        let (salt, iterations) = match &credential {
            Some(c) => (c.salt.clone(), c.iterations),
            None => (
                hash(self.mechanism, user.as_bytes())[..16].to_vec(),
                SCRAM_MIN_ITERATIONS,
            ),
        };
        let server_first = format!("r={nonce},s={},i={iterations}", STANDARD.encode(salt));
        self.state = ServerState::SentFirst {
            user: user.clone(),
            credential,
            nonce,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
        };
        Ok((user, server_first.into_bytes()))
    }

    /// Reads the client-final message; on a valid proof returns the
    /// server-final message.
    pub fn server_final(&mut self, client_final: &[u8]) -> Result<Vec<u8>, SaslError> {
        const STEP: &str = "SCRAM client-final message";
        let ServerState::SentFirst {
            credential,
            nonce,
            client_first_bare,
            server_first,
            ..
        } = std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(malformed(STEP, "arrived out of order"));
        };
        let msg = std::str::from_utf8(client_final).map_err(|_| malformed(STEP, "not UTF-8"))?;
        let Some((without_proof, proof)) = msg.rsplit_once(",p=") else {
            return Err(malformed(STEP, "no proof"));
        };
        let attrs = attributes(without_proof, STEP)?;
        if attr(&attrs, 'r', STEP)? != nonce {
            return Err(malformed(STEP, "the nonce does not match"));
        }
        if attr(&attrs, 'c', STEP)? != STANDARD.encode(GS2_HEADER) {
            return Err(malformed(STEP, "unexpected channel binding"));
        }
        let proof = b64(STEP, proof)?;
        let Some(cred) = credential else {
            return Err(SaslError::BadCredentials);
        };
        let m = self.mechanism;
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
        let client_signature = hmac(m, &cred.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(SaslError::BadCredentials);
        }
        let client_key = xor(&proof, &client_signature);
        if !constant_time_eq(&hash(m, &client_key), &cred.stored_key) {
            return Err(SaslError::BadCredentials);
        }
        let server_signature = hmac(m, &cred.server_key, auth_message.as_bytes());
        Ok(format!("v={}", STANDARD.encode(server_signature)).into_bytes())
    }

    /// The authenticated user, once the exchange has passed.
    pub fn user(&self) -> Option<&str> {
        match &self.state {
            ServerState::SentFirst { user, .. } => Some(user),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------- OAUTHBEARER

/// The OAUTHBEARER initial client response (RFC 7628 §3.1) for `token`,
/// with SASL extensions as Kafka sends them (KIP-342).
pub fn oauthbearer_initial_response(token: &str, extensions: &[(String, String)]) -> Vec<u8> {
    let mut s = format!("{GS2_HEADER}\x01auth=Bearer {token}\x01");
    for (k, v) in extensions {
        s.push_str(&format!("{k}={v}\x01"));
    }
    s.push('\x01');
    s.into_bytes()
}

/// The bearer token of an OAUTHBEARER initial response.
pub fn parse_oauthbearer(bytes: &[u8]) -> Result<String, SaslError> {
    const STEP: &str = "OAUTHBEARER response";
    let s = std::str::from_utf8(bytes).map_err(|_| malformed(STEP, "not UTF-8"))?;
    let Some(rest) = s.strip_prefix("n,") else {
        return Err(malformed(STEP, "no GS2 header"));
    };
    let Some((_authz, kvs)) = rest.split_once(",\x01") else {
        return Err(malformed(STEP, "no key-value section"));
    };
    for kv in kvs.split('\x01') {
        if let Some(token) = kv.strip_prefix("auth=Bearer ") {
            return Ok(token.trim().to_string());
        }
    }
    Err(malformed(STEP, "no 'auth=Bearer' value"))
}

/// An unsecured JWS (`alg: none`), as Kafka's
/// `OAuthBearerUnsecuredLoginCallbackHandler` makes: for tests and
/// development only, never for production.
pub fn unsecured_jws(
    principal_claim: &str,
    principal: &str,
    issued_ms: i64,
    lifetime_ms: i64,
) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#);
    let claims = serde_json::json!({
        principal_claim: principal,
        "iat": issued_ms as f64 / 1000.0,
        "exp": (issued_ms + lifetime_ms) as f64 / 1000.0,
    });
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("{header}.{payload}.")
}

/// What a broker reads from an unsecured JWS: the principal and the expiry
/// (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsecuredToken {
    /// The principal claim (`sub` by default).
    pub principal: String,
    /// `exp` in milliseconds.
    pub expires_ms: i64,
}

/// Validates an unsecured JWS as Kafka's
/// `OAuthBearerUnsecuredValidatorCallbackHandler` does: `alg: none`, a
/// principal claim and an expiry in the future.
pub fn validate_unsecured_jws(
    token: &str,
    principal_claim: &str,
    now_ms: i64,
) -> Result<UnsecuredToken, SaslError> {
    const STEP: &str = "unsecured JWS";
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 || !parts[2].is_empty() {
        return Err(malformed(
            STEP,
            "expected header.payload. with an empty signature",
        ));
    }
    let json = |p: &str| -> Result<serde_json::Value, SaslError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(p.trim_end_matches('='))
            .map_err(|_| malformed(STEP, "bad base64url"))?;
        serde_json::from_slice(&bytes).map_err(|_| malformed(STEP, "not JSON"))
    };
    let header = json(parts[0])?;
    if header.get("alg").and_then(|a| a.as_str()) != Some("none") {
        return Err(SaslError::Refused(
            "only unsecured tokens (alg none) are accepted".into(),
        ));
    }
    let claims = json(parts[1])?;
    let principal = claims
        .get(principal_claim)
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| malformed(STEP, format!("no '{principal_claim}' claim")))?
        .to_string();
    let exp = claims
        .get("exp")
        .and_then(|v| v.as_f64())
        .ok_or_else(|| malformed(STEP, "no 'exp' claim"))?;
    let expires_ms = (exp * 1000.0) as i64;
    if expires_ms <= now_ms {
        return Err(SaslError::Refused("the token has expired".into()));
    }
    Ok(UnsecuredToken {
        principal,
        expires_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_round_trip_and_authzid() {
        let b = plain_initial_response("alice", "s3cret");
        assert_eq!(parse_plain(&b).unwrap(), ("alice".into(), "s3cret".into()));
        assert!(parse_plain(b"bob\0alice\0pw").is_err());
        assert!(parse_plain(b"alice\0alice\0pw").is_ok());
        assert!(parse_plain(b"only-one-part").is_err());
    }

    /// RFC 7677 §3's SCRAM-SHA-256 example, byte for byte.
    #[test]
    fn scram_sha256_matches_rfc7677() {
        let mut c = ScramClient::new(
            Mechanism::ScramSha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO",
        );
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let fin = c.client_final(server_first).unwrap();
        assert_eq!(
            String::from_utf8(fin).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert_eq!(
            c.verify_server_final(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Err(SaslError::BadServerSignature)
        );
    }

    #[test]
    fn scram_client_and_server_agree_and_refuse_wrong_passwords() {
        for m in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            let cred = ScramCredential::new(m, "right", b"0123456789abcdef", 4096);
            for (password, ok) in [("right", true), ("wrong", false)] {
                let mut c = ScramClient::new(m, "a,b=c", password, "cnonce");
                let mut s = ScramServer::new(m);
                let (user, first) = s
                    .server_first(
                        &c.client_first(),
                        |u| (u == "a,b=c").then(|| cred.clone()),
                        "snonce",
                    )
                    .unwrap();
                assert_eq!(user, "a,b=c");
                let fin = c.client_final(&first).unwrap();
                match s.server_final(&fin) {
                    Ok(v) => {
                        assert!(ok);
                        c.verify_server_final(&v).unwrap();
                    }
                    Err(e) => {
                        assert!(!ok);
                        assert_eq!(e, SaslError::BadCredentials);
                    }
                }
            }
        }
    }

    #[test]
    fn scram_unknown_user_looks_like_a_wrong_password() {
        let m = Mechanism::ScramSha512;
        let mut c = ScramClient::new(m, "nobody", "pw", "cn");
        let mut s = ScramServer::new(m);
        let (_, first) = s.server_first(&c.client_first(), |_| None, "sn").unwrap();
        let fin = c.client_final(&first).unwrap();
        assert_eq!(s.server_final(&fin), Err(SaslError::BadCredentials));
    }

    #[test]
    fn scram_client_refuses_weak_or_foreign_server_messages() {
        let mut c = ScramClient::new(Mechanism::ScramSha256, "u", "p", "abc");
        assert!(c.client_final(b"r=abcdef,s=AAAA,i=100").is_err());
        assert!(c.client_final(b"r=xyz,s=AAAA,i=4096").is_err());
        assert!(c.client_final(b"garbage").is_err());
        assert!(matches!(
            c.client_final(b"e=invalid-proof"),
            Err(SaslError::Refused(_))
        ));
    }

    #[test]
    fn oauthbearer_round_trip_and_expiry() {
        let token = unsecured_jws("sub", "alice", 1_000_000, 60_000);
        let resp = oauthbearer_initial_response(&token, &[("traceId".into(), "1".into())]);
        let back = parse_oauthbearer(&resp).unwrap();
        assert_eq!(back, token);
        let t = validate_unsecured_jws(&back, "sub", 1_000_000).unwrap();
        assert_eq!(t.principal, "alice");
        assert_eq!(t.expires_ms, 1_060_000);
        assert!(validate_unsecured_jws(&back, "sub", 2_000_000).is_err());
        assert!(validate_unsecured_jws("a.b", "sub", 0).is_err());
    }
}
