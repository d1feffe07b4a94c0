//! SaslAuthenticate (key 36): one round of the SASL exchange chosen by
//! SaslHandshake. A failure is answered with SASL_AUTHENTICATION_FAILED and
//! the connection is then closed, as Kafka does; v1+ answers carry the
//! session lifetime (KIP-368).

use bytes::Bytes;
use rill_protocol::kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse};
use rill_protocol::ErrorCode;

use super::sb;
use crate::security::{Authenticator, Session};

/// The answer, and why to close the connection after it (on failure).
pub(super) fn handle(
    session: &mut Session,
    auth: &Authenticator,
    req: SaslAuthenticateRequest,
) -> (SaslAuthenticateResponse, Option<String>) {
    match session.authenticate(auth, &req.auth_bytes) {
        Ok((bytes, lifetime_ms)) => (
            SaslAuthenticateResponse::default()
                .with_auth_bytes(Bytes::from(bytes))
                .with_session_lifetime_ms(lifetime_ms),
            None,
        ),
        Err(message) => (
            SaslAuthenticateResponse::default()
                .with_error_code(ErrorCode::SaslAuthenticationFailed.code())
                .with_error_message(Some(sb(message.clone()))),
            Some(message),
        ),
    }
}
