//! SASL authentication of a connection (SaslHandshake v1 +
//! SaslAuthenticate) and KIP-368 re-authentication.
//!
//! Invariants:
//! - The caller holds the connection's write lock for the whole exchange,
//!   so no other request is written between SaslHandshake and the last
//!   SaslAuthenticate (the broker reads that window as authentication).
//! - A refusal is one [`Error::Authentication`] naming the mechanism and
//!   the broker, with the broker's reason; it is not retried (the Java
//!   client's `SaslAuthenticationException`).
//! - Re-authentication runs at 85–95 % of the session lifetime the broker
//!   returned (Kafka's `ReauthInfo` window); a failure closes the
//!   connection with that error.

use std::sync::Weak;
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use rill_protocol::kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use rill_protocol::sasl::{self, Mechanism, ScramClient};
use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind, StrBytes};
use tracing::{debug, warn};

use crate::conn::Connection;
use crate::error::{Error, Result};
use crate::security::{SaslLogin, SaslSettings};

type Writer<'a> = tokio::sync::MutexGuard<'a, crate::conn::Writer>;

fn auth_error(conn: &Connection, m: Mechanism, reason: impl Into<String>) -> Error {
    Error::Authentication {
        broker: conn.broker(),
        mechanism: m.name().to_string(),
        reason: reason.into(),
    }
}

/// Opens a connection: TCP, TLS and ApiVersions (`Connection::connect`),
/// then SASL when the settings ask for it, with the re-authentication task
/// tied to the connection.
pub(crate) async fn open(
    node_id: i32,
    addr: &str,
    settings: crate::conn::ConnectionSettings,
) -> Result<std::sync::Arc<Connection>> {
    let conn = Connection::connect(node_id, addr, settings).await?;
    if let Some(sasl) = conn.security().sasl.clone() {
        let lifetime = {
            let mut w = conn.lock_writer().await;
            authenticate(&conn, &mut w, &sasl).await?
        };
        if let Some(lifetime) = lifetime {
            conn.attach_task(tokio::spawn(reauthenticate_loop(
                std::sync::Arc::downgrade(&conn),
                sasl,
                lifetime,
            )));
        }
    }
    Ok(conn)
}

/// Authenticates on `conn`; returns the session lifetime when the broker
/// set one (re-authenticate before it ends).
pub(crate) async fn authenticate(
    conn: &Connection,
    w: &mut Writer<'_>,
    s: &SaslSettings,
) -> Result<Option<Duration>> {
    let m = s.mechanism;
    let hv = conn.version(ApiKey::SaslHandshake, 1, 1).map_err(|_| {
        auth_error(conn, m, "the broker does not offer SASL (SaslHandshake v1): is this a SASL listener? (check security.protocol)")
    })?;
    let req = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(m.name()));
    let resp = match conn
        .send_locked(
            w,
            ApiKey::SaslHandshake,
            hv,
            RequestKind::SaslHandshake(req),
        )
        .await?
    {
        ResponseKind::SaslHandshake(r) => r,
        _ => return Err(auth_error(conn, m, "unexpected answer to SaslHandshake")),
    };
    if resp.error_code == ErrorCode::UnsupportedSaslMechanism.code() {
        let offered: Vec<String> = resp.mechanisms.iter().map(|s| s.to_string()).collect();
        return Err(auth_error(
            conn,
            m,
            format!(
                "the broker does not enable this mechanism; it offers [{}] (sasl.mechanism)",
                offered.join(", ")
            ),
        ));
    }
    if resp.error_code == ErrorCode::IllegalSaslState.code() {
        return Err(auth_error(
            conn,
            m,
            "the listener does not use SASL (ILLEGAL_SASL_STATE): check security.protocol",
        ));
    }
    if resp.error_code != 0 {
        return Err(auth_error(
            conn,
            m,
            format!(
                "SaslHandshake: {}",
                rill_protocol::error::name(resp.error_code)
            ),
        ));
    }
    let av = conn.version(ApiKey::SaslAuthenticate, 0, 2)?;
    let last = match &s.login {
        SaslLogin::Password { user, password } if m == Mechanism::Plain => check(
            conn,
            m,
            round(
                conn,
                w,
                av,
                sasl::plain_initial_response(user, password.value()),
            )
            .await?,
        )?,
        SaslLogin::Password { user, password } => {
            let nonce: String = rand::thread_rng()
                .sample_iter(&rand::distributions::Alphanumeric)
                .take(32)
                .map(char::from)
                .collect();
            let mut client = ScramClient::new(m, user, password.value(), &nonce);
            let first = check(conn, m, round(conn, w, av, client.client_first()).await?)?;
            let fin = client
                .client_final(&first.auth_bytes)
                .map_err(|e| auth_error(conn, m, e.to_string()))?;
            let last = check(conn, m, round(conn, w, av, fin).await?)?;
            client
                .verify_server_final(&last.auth_bytes)
                .map_err(|e| auth_error(conn, m, e.to_string()))?;
            last
        }
        SaslLogin::Token(provider) => {
            let token = provider
                .token()
                .map_err(|e| auth_error(conn, m, format!("the token provider failed: {e}")))?;
            let first = check(
                conn,
                m,
                round(
                    conn,
                    w,
                    av,
                    sasl::oauthbearer_initial_response(token.value.value(), &[]),
                )
                .await?,
            )?;
            if !first.auth_bytes.is_empty() {
                // RFC 7628 §3.2.2: an error challenge (JSON); answer with
                // %x01 and the broker then fails the exchange.
                let detail = String::from_utf8_lossy(&first.auth_bytes).to_string();
                let _ = round(conn, w, av, vec![1]).await;
                return Err(auth_error(
                    conn,
                    m,
                    format!("the broker refused the token: {detail}"),
                ));
            }
            first
        }
    };
    let lifetime = (last.session_lifetime_ms > 0)
        .then(|| Duration::from_millis(last.session_lifetime_ms as u64));
    debug!(broker = %conn.broker(), mechanism = %m, ?lifetime, "authenticated");
    Ok(lifetime)
}

async fn round(
    conn: &Connection,
    w: &mut Writer<'_>,
    version: i16,
    bytes: Vec<u8>,
) -> Result<ResponseKind> {
    let req = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(bytes));
    conn.send_locked(
        w,
        ApiKey::SaslAuthenticate,
        version,
        RequestKind::SaslAuthenticate(req),
    )
    .await
}

struct Answer {
    auth_bytes: Bytes,
    session_lifetime_ms: i64,
}

fn check(conn: &Connection, m: Mechanism, r: ResponseKind) -> Result<Answer> {
    let ResponseKind::SaslAuthenticate(r) = r else {
        return Err(auth_error(conn, m, "unexpected answer to SaslAuthenticate"));
    };
    if r.error_code != 0 {
        let reason = r
            .error_message
            .map(|s| s.to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| rill_protocol::error::name(r.error_code));
        return Err(auth_error(conn, m, reason));
    }
    Ok(Answer {
        auth_bytes: r.auth_bytes,
        session_lifetime_ms: r.session_lifetime_ms,
    })
}

/// When to re-authenticate: 85–95 % of the lifetime, as Kafka's clients.
fn reauth_after(lifetime: Duration) -> Duration {
    lifetime.mul_f64(rand::thread_rng().gen_range(0.85..0.95))
}

/// Re-authenticates `conn` before each session ends, until the connection
/// is gone or the broker stops setting a lifetime.
pub(crate) async fn reauthenticate_loop(
    conn: Weak<Connection>,
    s: SaslSettings,
    mut lifetime: Duration,
) {
    loop {
        tokio::time::sleep(reauth_after(lifetime)).await;
        let Some(c) = conn.upgrade() else { return };
        if !c.is_healthy() {
            return;
        }
        let result = {
            let mut w = c.lock_writer().await;
            authenticate(&c, &mut w, &s).await
        };
        match result {
            Ok(Some(next)) => {
                crate::security::count_reauthentication();
                debug!(broker = %c.broker(), "re-authenticated (KIP-368)");
                lifetime = next;
            }
            Ok(None) => {
                crate::security::count_reauthentication();
                return;
            }
            Err(e) => {
                warn!(broker = %c.broker(), error = %e, "re-authentication failed; closing the connection");
                c.poison(e);
                return;
            }
        }
    }
}
