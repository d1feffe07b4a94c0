//! One connection to one broker (rskafka's `Messenger` shape).
//!
//! Requests are written under a lock by whoever sends them; one reader task
//! per connection reads response frames and hands each to the waiter
//! registered under its correlation id. Invariants:
//! - a response is matched only by correlation id, and decoded with the API
//!   and version of the request it answers;
//! - the first read error, undecodable response, unknown correlation id or
//!   request timeout **poisons** the connection: every waiter gets the error,
//!   later requests fail at once, and the owner reconnects (Kafka's
//!   `NetworkClient` also closes a connection whose request timed out);
//!   garbage from one broker never affects another connection;
//! - ApiVersions is the first request (KIP-511 header v0 answer); every later
//!   request uses the highest version both sides support, within the range
//!   the caller can handle.
//! - Security (`security.protocol`): the TLS handshake (rustls) runs before
//!   any Kafka frame, under `socket.connection.setup.timeout.ms`; SASL
//!   (`crate::sasl::open`) runs after ApiVersions and before the connection
//!   is handed out, as SaslHandshake v1 + SaslAuthenticate. A refused login
//!   or certificate is a typed error ([`Error::Authentication`],
//!   [`Error::Tls`]), never retried.
//! - Re-authentication (KIP-368): when the broker returns a session
//!   lifetime, a task re-authenticates at 85–95 % of it (Kafka's window) on
//!   the same connection. It holds the write lock for the whole exchange, so
//!   no request is written between SaslHandshake and the last
//!   SaslAuthenticate; requests already written are answered first (a broker
//!   answers a connection's requests in order) and are not dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rill_protocol::kafka_protocol::messages::{ApiVersionsRequest, RequestHeader};
use rill_protocol::message::{
    decode_response, encode_request_frame, peek_correlation_id, Api, RequestBody, ResponseBody,
};
use rill_protocol::{ApiKey, RequestKind, ResponseKind, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use crate::error::{Error, Result};
use crate::security::SecurityConfig;

/// Where a connection goes and how it behaves.
#[derive(Debug, Clone)]
pub struct ConnectionSettings {
    pub client_id: String,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub max_response_bytes: usize,
    pub security: SecurityConfig,
}

pub(crate) type Writer = Box<dyn AsyncWrite + Send + Unpin>;
type Reader = Box<dyn AsyncRead + Send + Unpin>;

type Waiter = oneshot::Sender<Result<Bytes>>;

struct Shared {
    pending: HashMap<i32, Waiter>,
    poisoned: Option<Error>,
}

/// A request written to a connection whose answer has not been read yet.
pub struct PendingAnswer {
    api: Api,
    version: i16,
    rx: oneshot::Receiver<Result<Bytes>>,
}

/// A connection to one broker.
pub struct Connection {
    /// Broker node id, or -1 for a bootstrap address.
    pub node_id: i32,
    pub addr: String,
    settings: ConnectionSettings,
    writer: tokio::sync::Mutex<Writer>,
    shared: Arc<Mutex<Shared>>,
    next_correlation_id: AtomicI32,
    /// The broker's supported version range per API key.
    versions: HashMap<i16, (i16, i16)>,
    /// The cluster's finalized feature levels as this broker reported them
    /// (ApiVersions v3+, KIP-584), e.g. `transaction.version`.
    features: HashMap<String, i16>,
    reader: tokio::task::JoinHandle<()>,
    /// The KIP-368 re-authentication task, when the broker set a lifetime.
    background: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        if let Some(t) = self
            .background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            t.abort();
        }
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connection(node {} at {})", self.node_id, self.addr)
    }
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connection {
    /// Connects (TLS when configured) and negotiates API versions; SASL is
    /// [`crate::sasl::open`]'s, on top of this.
    pub async fn connect(
        node_id: i32,
        addr: &str,
        settings: ConnectionSettings,
    ) -> Result<Arc<Self>> {
        let broker = describe(node_id, addr);
        let stream = tokio::time::timeout(settings.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| Error::Connection {
                broker: broker.clone(),
                reason: format!(
                    "no connection within socket.connection.setup.timeout.ms ({} ms)",
                    settings.connect_timeout.as_millis()
                ),
            })?
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::ConnectionRefused => Error::ConnectionRefused {
                    broker: broker.clone(),
                },
                _ => Error::Connection {
                    broker: broker.clone(),
                    reason: e.to_string(),
                },
            })?;
        let _ = stream.set_nodelay(true);
        let (read, write): (Reader, Writer) = match &settings.security.tls {
            Some(tls) => {
                let tls = crate::tls::handshake(
                    stream,
                    addr,
                    tls.clone(),
                    &broker,
                    settings.connect_timeout,
                )
                .await?;
                let (r, w) = tokio::io::split(tls);
                (Box::new(r), Box::new(w))
            }
            None => {
                let (r, w) = stream.into_split();
                (Box::new(r), Box::new(w))
            }
        };
        let shared = Arc::new(Mutex::new(Shared {
            pending: HashMap::new(),
            poisoned: None,
        }));
        let reader = tokio::spawn(read_loop(
            read,
            shared.clone(),
            broker.clone(),
            settings.max_response_bytes,
        ));
        let mut conn = Connection {
            node_id,
            addr: addr.to_string(),
            settings,
            writer: tokio::sync::Mutex::new(write),
            shared,
            next_correlation_id: AtomicI32::new(0),
            versions: HashMap::new(),
            features: HashMap::new(),
            reader,
            background: Mutex::new(None),
        };
        (conn.versions, conn.features) = conn.negotiate().await?;
        Ok(Arc::new(conn))
    }

    /// The connection's security settings.
    pub(crate) fn security(&self) -> &SecurityConfig {
        &self.settings.security
    }

    /// Ties a background task (KIP-368 re-authentication) to the
    /// connection: it is aborted when the connection is dropped.
    pub(crate) fn attach_task(&self, task: tokio::task::JoinHandle<()>) {
        *self.background.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// Supported versions per API key, and the finalized feature levels.
    #[allow(clippy::type_complexity)] // the two tables of one answer
    async fn negotiate(&self) -> Result<(HashMap<i16, (i16, i16)>, HashMap<String, i16>)> {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("rill-client"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let resp = match self
            .send(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(req))
            .await?
        {
            ResponseKind::ApiVersions(r) => r,
            other => return Err(self.unexpected(ApiKey::ApiVersions, &other)),
        };
        if resp.error_code != 0 {
            return Err(Error::broker(
                resp.error_code,
                format!("ApiVersions with {}", self.broker()),
            ));
        }
        let versions = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        let features = resp
            .finalized_features
            .iter()
            .map(|f| (f.name.to_string(), f.max_version_level))
            .collect();
        Ok((versions, features))
    }

    pub fn broker(&self) -> String {
        describe(self.node_id, &self.addr)
    }

    /// Whether the connection can still carry requests.
    pub fn is_healthy(&self) -> bool {
        lock(&self.shared).poisoned.is_none() && !self.reader.is_finished()
    }

    /// The broker's version range of an API, if it has it.
    pub fn broker_versions(&self, api: impl Into<Api>) -> Option<(i16, i16)> {
        self.versions.get(&api.into().key()).copied()
    }

    /// The finalized level of a cluster feature (KIP-584) as this broker
    /// reported it when the connection opened; `None` when not finalized.
    pub fn finalized_feature(&self, name: &str) -> Option<i16> {
        self.features.get(name).copied()
    }

    /// Every finalized feature level this broker reported.
    pub fn finalized_features(&self) -> std::collections::BTreeMap<String, i16> {
        self.features.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// The highest version both sides support within `[min, max]`.
    pub fn version(&self, api: impl Into<Api>, min: i16, max: i16) -> Result<i16> {
        let api = api.into();
        let (omin, omax) = api.valid_versions();
        let (bmin, bmax) = self.broker_versions(api).unwrap_or((i16::MAX, -1));
        let lo = min.max(omin).max(bmin);
        let hi = max.min(omax).min(bmax);
        if lo > hi {
            return Err(Error::UnsupportedVersion {
                broker: self.broker(),
                api: format!("{api:?}"),
                min: min.max(omin),
                max: max.min(omax),
            });
        }
        Ok(hi)
    }

    /// Sends a request at the best common version in `[min, max]` and waits
    /// for its response.
    pub async fn call(
        &self,
        api: ApiKey,
        min: i16,
        max: i16,
        body: RequestKind,
    ) -> Result<(i16, ResponseKind)> {
        let v = self.version(api, min, max)?;
        Ok((v, self.send(api, v, body).await?))
    }

    /// Sends a request at an exact version and waits for its response.
    pub async fn send(&self, api: ApiKey, version: i16, body: RequestKind) -> Result<ResponseKind> {
        self.send_timeout(api, version, body, self.settings.request_timeout)
            .await
    }

    /// As [`Connection::send`], with its own timeout (JoinGroup waits up to
    /// the rebalance timeout, longer than `request.timeout.ms`).
    pub async fn send_timeout(
        &self,
        api: ApiKey,
        version: i16,
        body: RequestKind,
        timeout: Duration,
    ) -> Result<ResponseKind> {
        let pending = self.start(api, version, body).await?;
        self.answer(pending, timeout).await
    }

    /// Writes a request and returns its answer-to-come (await it with
    /// [`Connection::answer`]). Requests started one after another on a
    /// connection reach the broker in that order, which the idempotent
    /// producer relies on to keep several batches of a partition in flight.
    pub async fn start(
        &self,
        api: ApiKey,
        version: i16,
        body: RequestKind,
    ) -> Result<PendingAnswer> {
        self.start_body(api.into(), version, body.into()).await
    }

    /// [`Connection::start`] for any API, also those `kafka-protocol` lacks.
    async fn start_body(&self, api: Api, version: i16, body: RequestBody) -> Result<PendingAnswer> {
        match self.write(api, version, &body, true).await? {
            Some(rx) => Ok(PendingAnswer { api, version, rx }),
            None => Err(self.poison_error()),
        }
    }

    /// Sends a request of any API (also KIP-1071's, which `kafka-protocol`
    /// lacks) at an exact version and waits for its response.
    pub async fn send_body(
        &self,
        api: Api,
        version: i16,
        body: RequestBody,
    ) -> Result<ResponseBody> {
        let pending = self.start_body(api, version, body).await?;
        self.answer_body(pending, self.settings.request_timeout)
            .await
    }

    /// Waits up to `timeout` for the answer to a started request.
    pub async fn answer(&self, pending: PendingAnswer, timeout: Duration) -> Result<ResponseKind> {
        let api = pending.api;
        match self.answer_body(pending, timeout).await? {
            ResponseBody::Kafka(k) => Ok(k),
            other => Err(Error::Protocol {
                broker: self.broker(),
                reason: format!("{api:?} answered with {other:?}"),
            }),
        }
    }

    async fn answer_body(&self, pending: PendingAnswer, timeout: Duration) -> Result<ResponseBody> {
        let PendingAnswer { api, version, rx } = pending;
        let frame = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(self.poison_error()),
            Err(_) => {
                let e = Error::RequestTimeout {
                    api: format!("{api:?}"),
                    broker: self.broker(),
                    timeout_ms: timeout.as_millis() as u64,
                };
                self.poison(e.clone());
                return Err(e);
            }
        };
        match decode_response(frame, api, version) {
            Ok((_, body)) => Ok(body),
            Err(e) => {
                // As Kafka's NetworkClient: a broken answer closes the
                // connection and the request fails as a (retriable) network error.
                let err = Error::Connection {
                    broker: self.broker(),
                    reason: format!("closed after an undecodable answer: {e}"),
                };
                self.poison(err.clone());
                Err(err)
            }
        }
    }

    /// Sends a request the broker does not answer (Produce with acks=0).
    pub async fn send_no_response(
        &self,
        api: ApiKey,
        version: i16,
        body: RequestKind,
    ) -> Result<()> {
        self.write(api.into(), version, &body.into(), false)
            .await
            .map(|_| ())
    }

    async fn write(
        &self,
        api: Api,
        version: i16,
        body: &RequestBody,
        expect_response: bool,
    ) -> Result<Option<oneshot::Receiver<Result<Bytes>>>> {
        // Encoded before taking the lock: concurrent senders only queue
        // for the socket write.
        let (buf, rx) = self.prepare(api, version, body, expect_response)?;
        let mut w = self.writer.lock().await;
        self.write_frame(&mut w, api, &buf).await?;
        Ok(rx)
    }

    /// Sends a request on a writer the caller already holds (the SASL
    /// exchange keeps the lock from SaslHandshake to the last
    /// SaslAuthenticate) and waits for its answer.
    pub(crate) async fn send_locked(
        &self,
        w: &mut Writer,
        api: ApiKey,
        version: i16,
        body: RequestKind,
    ) -> Result<ResponseKind> {
        let (buf, rx) = self.prepare(api.into(), version, &body.into(), true)?;
        self.write_frame(w, api.into(), &buf).await?;
        let rx = rx.expect("a receiver was asked for");
        self.answer(
            PendingAnswer {
                api: api.into(),
                version,
                rx,
            },
            self.settings.request_timeout,
        )
        .await
    }

    /// Encodes a request under the next correlation id and registers its
    /// waiter (when an answer is expected).
    #[allow(clippy::type_complexity)]
    fn prepare(
        &self,
        api: Api,
        version: i16,
        body: &RequestBody,
        expect_response: bool,
    ) -> Result<(BytesMut, Option<oneshot::Receiver<Result<Bytes>>>)> {
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let header = RequestHeader::default()
            .with_request_api_key(api.key())
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.settings.client_id.clone())));
        let mut buf = BytesMut::new();
        encode_request_frame(&mut buf, &header, body).map_err(|e| Error::Protocol {
            broker: self.broker(),
            reason: e.to_string(),
        })?;
        let mut s = lock(&self.shared);
        if let Some(e) = &s.poisoned {
            return Err(e.clone());
        }
        let rx = expect_response.then(|| {
            let (tx, rx) = oneshot::channel();
            s.pending.insert(correlation_id, tx);
            rx
        });
        Ok((buf, rx))
    }

    /// Writes an encoded frame; a failed write poisons the connection.
    async fn write_frame(&self, w: &mut Writer, api: Api, buf: &[u8]) -> Result<()> {
        if let Err(e) = write_flush(w, buf).await {
            let err = Error::Connection {
                broker: self.broker(),
                reason: format!("writing {api:?}: {e}"),
            };
            self.poison(err.clone());
            return Err(err);
        }
        Ok(())
    }

    /// The writer, for an exchange that must not interleave with requests.
    pub(crate) async fn lock_writer(&self) -> tokio::sync::MutexGuard<'_, Writer> {
        self.writer.lock().await
    }

    fn poison_error(&self) -> Error {
        lock(&self.shared)
            .poisoned
            .clone()
            .unwrap_or_else(|| Error::Connection {
                broker: self.broker(),
                reason: "closed".into(),
            })
    }

    /// Fails every waiter and every later request with `e`.
    pub fn poison(&self, e: Error) {
        poison(&self.shared, e);
    }

    fn unexpected(&self, api: ApiKey, got: &ResponseKind) -> Error {
        Error::Protocol {
            broker: self.broker(),
            reason: format!("{api:?} answered with {:?}", std::mem::discriminant(got)),
        }
    }
}

/// Writes a whole frame and flushes it (TLS buffers records until flushed).
async fn write_flush(w: &mut Writer, buf: &[u8]) -> std::io::Result<()> {
    w.write_all(buf).await?;
    w.flush().await
}

fn describe(node_id: i32, addr: &str) -> String {
    if node_id < 0 {
        format!("bootstrap server {addr}")
    } else {
        format!("broker {node_id} ({addr})")
    }
}

/// A TLS record header (handshake or alert, TLS 1.0–1.3) where a Kafka
/// size prefix was expected: a PLAINTEXT client talking to a TLS listener.
fn looks_like_tls(head: &[u8; 4]) -> bool {
    matches!(head[0], 0x15 | 0x16) && head[1] == 0x03 && head[2] <= 0x04
}

fn poison(shared: &Mutex<Shared>, e: Error) {
    let mut s = lock(shared);
    if s.poisoned.is_none() {
        debug!(error = %e, "connection poisoned");
        s.poisoned = Some(e.clone());
    }
    for (_, w) in s.pending.drain() {
        let _ = w.send(Err(e.clone()));
    }
}

async fn read_loop(mut read: Reader, shared: Arc<Mutex<Shared>>, broker: String, max_frame: usize) {
    let pool = crate::frames::shared_pool();
    let err = loop {
        let mut size = [0u8; 4];
        if let Err(e) = read.read_exact(&mut size).await {
            if crate::tls::is_tls_failure(&e) {
                // TLS 1.3 reports a refused client certificate here, after
                // the handshake.
                break Error::Tls {
                    broker: broker.clone(),
                    reason: crate::tls::explain(&e, &broker),
                };
            }
            break Error::Connection {
                broker: broker.clone(),
                reason: if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    "the broker closed the connection".into()
                } else {
                    e.to_string()
                },
            };
        }
        let len = i32::from_be_bytes(size);
        if looks_like_tls(&size) {
            break Error::Tls {
                broker: broker.clone(),
                reason: "the broker answered with TLS: this listener is SSL or SASL_SSL, set security.protocol to match".into(),
            };
        }
        if len < 4 || len as usize > max_frame {
            break Error::Protocol {
                broker: broker.clone(),
                reason: format!("response frame of {len} bytes (limit {max_frame})"),
            };
        }
        let frame = match crate::frames::read_frame(&mut read, len as usize, pool).await {
            Ok(frame) => frame,
            Err(e) => {
                break Error::Connection {
                    broker: broker.clone(),
                    reason: e.to_string(),
                }
            }
        };
        let Some(id) = peek_correlation_id(&frame) else {
            break Error::Protocol {
                broker: broker.clone(),
                reason: "response without a correlation id".into(),
            };
        };
        let waiter = lock(&shared).pending.remove(&id);
        match waiter {
            Some(w) => {
                let _ = w.send(Ok(frame));
            }
            None => {
                break Error::Protocol {
                    broker: broker.clone(),
                    reason: format!("response with unknown correlation id {id}"),
                };
            }
        }
    };
    let err = match err {
        Error::Protocol { broker, reason } => {
            warn!(%broker, %reason, "closing connection after a protocol error");
            Error::Connection {
                broker,
                reason: format!("closed after a protocol error: {reason}"),
            }
        }
        other => other,
    };
    poison(&shared, err);
}
