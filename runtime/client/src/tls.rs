//! The client's TLS handshake (rustls) and how its failures read.
//!
//! Invariant: every failure names the broker and the setting to look at
//! (trust store, host name check, client certificate, `security.protocol`),
//! decided from rustls's typed error, never from message text; the
//! handshake is bounded by `socket.connection.setup.timeout.ms`.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{AlertDescription, CertificateError};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::error::{Error, Result};

/// Runs the TLS handshake on a connected socket.
pub(crate) async fn handshake(
    stream: TcpStream,
    addr: &str,
    config: Arc<rustls::ClientConfig>,
    broker: &str,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>> {
    let host = addr
        .rsplit_once(':')
        .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
        .unwrap_or(addr);
    let name = ServerName::try_from(host.to_string()).map_err(|_| Error::Tls {
        broker: broker.to_string(),
        reason: format!("'{host}' is not a valid TLS server name"),
    })?;
    let connector = TlsConnector::from(config);
    match tokio::time::timeout(timeout, connector.connect(name, stream)).await {
        Err(_) => Err(Error::Tls {
            broker: broker.to_string(),
            reason: format!(
                "no TLS handshake within socket.connection.setup.timeout.ms ({} ms): is this a TLS listener?",
                timeout.as_millis()
            ),
        }),
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(Error::Tls {
            broker: broker.to_string(),
            reason: explain(&e, host),
        }),
    }
}

/// Whether an I/O error on a TLS stream is a TLS failure (an alert, a
/// certificate the broker refused after the handshake under TLS 1.3).
pub(crate) fn is_tls_failure(e: &std::io::Error) -> bool {
    e.get_ref()
        .is_some_and(|i| i.downcast_ref::<rustls::Error>().is_some())
}

pub(crate) fn explain(e: &std::io::Error, host: &str) -> String {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(c)) => match c {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                "the broker's certificate is not signed by a trusted CA (check ssl.truststore.location / ssl.truststore.certificates)".into()
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the broker's certificate has expired".into()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the broker's certificate is not valid yet (check the clocks)".into()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => format!(
                "the broker's certificate is not valid for '{host}' (host name verification, ssl.endpoint.identification.algorithm=https; set it empty to skip the check)"
            ),
            CertificateError::Revoked => "the broker's certificate is revoked".into(),
            other => format!("the broker's certificate was refused: {other:?}"),
        },
        Some(rustls::Error::AlertReceived(a)) => match a {
            AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure
            | AlertDescription::BadCertificate | AlertDescription::UnknownCA => format!(
                "the broker refused the handshake ({a:?}): it may require a client certificate this client lacks or it does not trust (ssl.keystore.*)"
            ),
            AlertDescription::ProtocolVersion => "no common TLS version (ssl.enabled.protocols)".into(),
            other => format!("the broker sent the TLS alert {other:?}"),
        },
        Some(other) => format!("{other}"),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof
            || e.kind() == std::io::ErrorKind::ConnectionReset =>
        {
            "the broker closed the connection during the TLS handshake: is this a PLAINTEXT or SASL_PLAINTEXT listener? (check security.protocol)".into()
        }
        None => e.to_string(),
    }
}
