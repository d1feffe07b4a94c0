//! Network front end of one broker node: a TCP accept loop and one task per
//! connection.
//!
//! Invariants:
//! - Requests on a connection are handled one at a time and answered in
//!   order, as Kafka does (it mutes a channel while a request is in flight);
//!   clients may still pipeline, the bytes wait in the socket buffer.
//! - Bad input never takes the broker down: an oversized or negative frame, an
//!   unknown API key, an unsupported version (except ApiVersions, answered per
//!   KIP-511) or an undecodable body closes that connection only; a panic in a
//!   handler is caught, logged and closes that connection only.
//! - Stopping a node closes its listener and every connection it accepted,
//!   including ones parked in a long-polling fetch.
//! - A request must arrive whole within `request_read_timeout` (30 s) of
//!   its first byte, or the connection is closed: a client that sends part of
//!   a large frame and stalls (or trickles it) would otherwise hold up to
//!   `socket.request.max.bytes` of buffer for as long as it stays
//!   connected.
//! - A node listens on every configured listener (PLAINTEXT, SSL,
//!   SASL_PLAINTEXT, SASL_SSL); TLS is accepted before the first frame and
//!   must complete within `request_read_timeout`; on a SASL listener the
//!   connection's [`Session`] admits only the SASL APIs until it has
//!   authenticated (see [`crate::security`]).

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use bytes::BytesMut;
use futures::FutureExt;
use rill_protocol::frame::FrameDecoder;
use rill_protocol::message::{decode_request, encode_response_frame, Api, RequestDecodeError};
use rill_protocol::{ApiKey, ResponseKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn, Instrument};

use crate::api::{self, Ctx};
use crate::broker::Broker;
use crate::security::{Admit, Authenticator, SecurityProtocol, Session};

/// Binds a listener with SO_REUSEADDR so a restarted node gets its port back.
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// One bound listener of a node: its socket, index in the broker's
/// listener list (which port Metadata answers with) and protocol.
pub(crate) struct BoundListener {
    pub socket: TcpListener,
    pub index: usize,
    pub protocol: SecurityProtocol,
}

/// A running node's accept loops, one per listener.
pub(crate) struct NodeServer {
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl NodeServer {
    pub fn spawn(
        broker: Arc<Broker>,
        node_id: i32,
        listeners: Vec<BoundListener>,
        auth: Arc<Authenticator>,
    ) -> std::io::Result<Self> {
        let (shutdown, rx) = watch::channel(false);
        let mut tasks = Vec::new();
        for l in listeners {
            let addr = l.socket.local_addr()?;
            let span = tracing::info_span!("node", id = node_id);
            info!(node = node_id, %addr, protocol = l.protocol.name(), "broker node listening");
            tasks.push(tokio::spawn(
                accept_loop(broker.clone(), node_id, l, auth.clone(), rx.clone()).instrument(span),
            ));
        }
        Ok(Self { shutdown, tasks })
    }

    /// Closes the listeners and every connection, and waits for the accept loops.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }

    /// Signals shutdown without waiting (for `Drop`).
    pub fn signal_stop(&self) {
        let _ = self.shutdown.send(true);
    }
}

async fn accept_loop(
    broker: Arc<Broker>,
    node_id: i32,
    listener: BoundListener,
    auth: Arc<Authenticator>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    let (index, protocol) = (listener.index, listener.protocol);
    let listener = listener.socket;
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let broker = broker.clone();
                    let rx = shutdown.clone();
                    let auth = auth.clone();
                    let _ = stream.set_nodelay(true);
                    let conn = Conn { broker, node_id, peer, listener: index, protocol, auth };
                    connections.spawn(accept(conn, stream, rx).instrument(tracing::debug_span!("conn", %peer)));
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// What a connection task knows about where it was accepted.
struct Conn {
    broker: Arc<Broker>,
    node_id: i32,
    peer: SocketAddr,
    listener: usize,
    protocol: SecurityProtocol,
    auth: Arc<Authenticator>,
}

/// Runs the TLS handshake when the listener needs it, then serves.
async fn accept(c: Conn, stream: tokio::net::TcpStream, mut shutdown: watch::Receiver<bool>) {
    if !c.protocol.uses_tls() {
        return serve(c, stream, shutdown).await;
    }
    let Some(acceptor) = c.auth.acceptor(c.protocol) else {
        return;
    };
    let limit = c.broker.config.request_read_timeout;
    let tls = tokio::select! {
        _ = shutdown.changed() => return,
        r = tokio::time::timeout(limit, acceptor.accept(stream)) => r,
    };
    match tls {
        Ok(Ok(s)) => serve(c, s, shutdown).await,
        Ok(Err(e)) => debug!(peer = %c.peer, error = %e, "TLS handshake failed"),
        Err(_) => debug!(peer = %c.peer, "no TLS handshake within {} ms", limit.as_millis()),
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    c: Conn,
    mut stream: S,
    mut shutdown: watch::Receiver<bool>,
) {
    let Conn {
        broker,
        node_id,
        peer,
        listener,
        protocol,
        auth,
    } = c;
    let mut session = Session::new(protocol);
    let decoder = FrameDecoder::new(broker.config.socket_request_max_bytes);
    let mut inbuf = BytesMut::with_capacity(64 * 1024);
    let mut outbuf = BytesMut::with_capacity(64 * 1024);
    let client_host = peer.ip().to_string();
    // When the buffered partial request started arriving.
    let mut partial_since: Option<tokio::time::Instant> = None;
    loop {
        let mut progressed = false;
        loop {
            let frame = match decoder.decode(&mut inbuf) {
                Ok(Some(f)) => {
                    progressed = true;
                    f
                }
                Ok(None) => break,
                Err(e) => {
                    warn!(%peer, error = %e, "closing connection: bad frame");
                    return;
                }
            };
            let request = match decode_request(frame.freeze(), api::supported) {
                Ok(r) => r,
                Err(RequestDecodeError::UnsupportedVersion {
                    api_key: Api::Kafka(ApiKey::ApiVersions),
                    correlation_id,
                    version,
                    ..
                }) => {
                    debug!(%peer, version, "ApiVersions version unsupported; answering with v0");
                    let body =
                        ResponseKind::ApiVersions(api::unsupported_version_response()).into();
                    if encode_response_frame(
                        &mut outbuf,
                        ApiKey::ApiVersions,
                        0,
                        correlation_id,
                        &body,
                    )
                    .is_err()
                        || write_out(&mut stream, &mut outbuf).await.is_err()
                    {
                        return;
                    }
                    continue;
                }
                Err(e) => {
                    warn!(%peer, error = %e, "closing connection: undecodable request");
                    return;
                }
            };
            let client_id = request
                .header
                .client_id
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default();
            let ctx = Ctx {
                broker: &broker,
                node_id,
                version: request.version(),
                client_id: &client_id,
                client_host: &client_host,
                listener,
                principal: &session.principal,
            };
            let correlation_id = request.header.correlation_id;
            let (api_key, version) = (request.api_key, request.version());
            match session.admit(api_key) {
                Admit::Serve => {}
                Admit::Close(why) => {
                    warn!(%peer, ?api_key, "closing connection: {why}");
                    return;
                }
                Admit::Sasl => {
                    let (body, close) = api::handle_sasl(&mut session, &auth, request.body);
                    let body = body.into();
                    if encode_response_frame(&mut outbuf, api_key, version, correlation_id, &body)
                        .is_err()
                        || write_out(&mut stream, &mut outbuf).await.is_err()
                    {
                        return;
                    }
                    if let Some(why) = close {
                        info!(%peer, "closing connection: {why}");
                        return;
                    }
                    continue;
                }
            }
            // A fetch may park; answers to earlier pipelined requests go out first.
            if api_key == ApiKey::Fetch
                && !outbuf.is_empty()
                && write_out(&mut stream, &mut outbuf).await.is_err()
            {
                return;
            }
            let handled = tokio::select! {
                r = AssertUnwindSafe(api::handle(&ctx, request.body)).catch_unwind() => r,
                _ = shutdown.changed() => return,
            };
            match handled {
                Ok(Ok(Some(body))) => {
                    if let Err(e) =
                        encode_response_frame(&mut outbuf, api_key, version, correlation_id, &body)
                    {
                        error!(%peer, error = %e, "could not encode response; closing connection");
                        return;
                    }
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => {
                    warn!(%peer, ?api_key, version, error = %e, "closing connection");
                    return;
                }
                Err(panic) => {
                    let msg = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    error!(%peer, ?api_key, version, panic = %msg, "request handler panicked; closing connection");
                    return;
                }
            }
            // Batch writes only while further whole requests are already buffered.
            let another_ready =
                matches!(decoder.peek_size(&inbuf), Ok(Some(n)) if inbuf.len() >= 4 + n);
            if !another_ready
                && !outbuf.is_empty()
                && write_out(&mut stream, &mut outbuf).await.is_err()
            {
                return;
            }
        }
        if !outbuf.is_empty() && write_out(&mut stream, &mut outbuf).await.is_err() {
            return;
        }
        // The clock runs from the first byte of the request still
        // incomplete: a connection that completes requests keeps going.
        partial_since = match (inbuf.is_empty(), progressed, partial_since) {
            (true, _, _) => None,
            (false, false, Some(t)) => Some(t),
            (false, _, _) => Some(tokio::time::Instant::now()),
        };
        let read_timeout = broker.config.request_read_timeout;
        let partial_deadline = partial_since.map(|t| t + read_timeout);
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = async {
                match partial_deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {
                warn!(%peer, buffered = inbuf.len(), "closing connection: a request did not arrive whole within {} ms", read_timeout.as_millis());
                return;
            }
            read = stream.read_buf(&mut inbuf) => match read {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) => {
                    debug!(%peer, error = %e, "read failed");
                    return;
                }
            }
        }
    }
}

async fn write_out<S: AsyncWrite + Unpin>(
    stream: &mut S,
    out: &mut BytesMut,
) -> std::io::Result<()> {
    stream.write_all(out).await?;
    stream.flush().await?;
    out.clear();
    Ok(())
}
