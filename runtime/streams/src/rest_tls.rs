//! HTTPS for the REST server (`rest.ssl.keystore.location`) and for its
//! calls to other instances (`rest.ssl.truststore.location`).
//!
//! Invariants:
//! - With a keystore, the REST server speaks HTTPS only. TLS handshakes run
//!   on their own tasks, each bounded by [`HANDSHAKE_TIMEOUT`], so a client
//!   that connects and never completes its handshake holds up nobody.
//! - Calls to other instances (probes, forwarded key queries) use `https://`
//!   when this instance serves HTTPS (an application's instances share one
//!   configuration), verified against the trust store or the system's CA
//!   certificates, host names included.
//! - A bad keystore or trust store stops the app at start with the key and
//!   file named.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::error::{Result, StreamsError};
use crate::streams_config::StreamsConfig;

/// How long a REST client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn file_error(key: &str, path: &Path, e: impl std::fmt::Display) -> StreamsError {
    StreamsError::config(key, &path.display().to_string(), e.to_string())
}

/// The TLS acceptor of the REST server, when `rest.ssl.keystore.location` is set.
pub(crate) fn acceptor(cfg: &StreamsConfig) -> Result<Option<TlsAcceptor>> {
    let Some(path) = &cfg.rest_ssl_keystore else {
        return Ok(None);
    };
    const KEY: &str = "rest.ssl.keystore.location";
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(KEY, path, e))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| file_error(KEY, path, e))?;
    if chain.is_empty() {
        return Err(file_error(KEY, path, "no PEM certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(path).map_err(|e| {
        file_error(
            KEY,
            path,
            format!("no unencrypted PEM private key in it: {e}"),
        )
    })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| file_error(KEY, path, e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            file_error(
                KEY,
                path,
                format!("the certificate and key do not fit together: {e}"),
            )
        })?;
    Ok(Some(TlsAcceptor::from(Arc::new(config))))
}

/// How this instance calls the others' REST APIs.
pub(crate) struct Peers {
    /// `http` or `https`.
    pub scheme: &'static str,
    pub agent: ureq::Agent,
}

/// Builds the client for calls to other instances.
pub(crate) fn peers(cfg: &StreamsConfig, timeout: Duration) -> Result<Peers> {
    let builder = ureq::AgentBuilder::new().timeout(timeout);
    if cfg.rest_ssl_keystore.is_none() {
        return Ok(Peers {
            scheme: "http",
            agent: builder.build(),
        });
    }
    let tls = rill_client::security::https_client_config(cfg.rest_ssl_truststore.as_deref())
        .map_err(|e| StreamsError::config("rest.ssl.truststore.location", "", e))?;
    Ok(Peers {
        scheme: "https",
        agent: builder.tls_config(tls).build(),
    })
}

/// A listener that hands axum TLS streams whose handshake has completed.
pub(crate) struct TlsListener {
    local: SocketAddr,
    ready: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Accepts on `listener` and runs each handshake on its own task.
    pub fn new(listener: tokio::net::TcpListener, acceptor: TlsAcceptor) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        let accept_task = tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::debug!("REST accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "REST TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "REST TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            local,
            ready,
            accept_task,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task only ends when the listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
