//! `security.protocol`: the four ways Kafka runs a connection (TLS or not,
//! SASL or not), named as in Kafka's configs and listener maps. Shared by
//! the client (which connects that way) and the embedded broker (whose
//! listeners serve that way).

/// `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    /// No TLS, no SASL (Kafka's default).
    Plaintext,
    /// TLS, with client certificates where the listener asks (mTLS).
    Ssl,
    /// SASL over plain TCP.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Parses Kafka's name (case-insensitive, as Kafka).
    pub fn parse(s: &str) -> Option<SecurityProtocol> {
        [
            SecurityProtocol::Plaintext,
            SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext,
            SecurityProtocol::SaslSsl,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
    }

    /// Whether the connection is TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether the connection authenticates with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}
