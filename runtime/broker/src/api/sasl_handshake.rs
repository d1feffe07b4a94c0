//! SaslHandshake (key 17): picks the SASL mechanism of a connection, or of
//! its re-authentication (KIP-368). Only v1 is served: its tokens travel in
//! SaslAuthenticate requests (v0's raw tokens are not supported).

use rill_protocol::kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};

use super::sb;
use crate::security::{Authenticator, Session};

pub(super) fn handle(
    session: &mut Session,
    auth: &Authenticator,
    req: SaslHandshakeRequest,
) -> SaslHandshakeResponse {
    let (code, enabled) = session.handshake(auth, &req.mechanism);
    SaslHandshakeResponse::default()
        .with_error_code(code)
        .with_mechanisms(enabled.into_iter().map(sb).collect())
}
