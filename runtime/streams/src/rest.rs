//! The instance's REST server (axum, on the client's tokio runtime): the
//! group's metadata with every stream thread's `group.instance.id`
//! (KIP-345's "Kafka Streams Change"), interactive queries, Prometheus
//! metrics, health, a dashboard, and shutdown with an optional batch
//! LeaveGroup so partitions move at once instead of after the session
//! timeout.
//!
//! Invariants:
//! - Handlers never block a tokio worker: store reads, calls to other
//!   instances and `close` run on blocking threads.
//! - Mutating endpoints need `Authorization: Bearer <rest.admin.token>`;
//!   with no token configured they answer 403, a missing or wrong token 401.
//!   Read endpoints are open unless `rest.read.requires.token` is true.
//! - Every error is JSON `{"error": ..., "reason": ...}` with a status that
//!   says who is at fault (400 bad request, 404 unknown store/key/route,
//!   503 not ready, 502 owner unreachable).
//! - A key query this instance cannot answer is forwarded once to the
//!   owner (`?forwarded=true` stops loops); the answer names the owner.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::{App, CloseOptions, State as AppState};
use crate::error::{Result, StreamsError};
use crate::metadata::{StoreQueryError, StreamsMetadata};

/// The dashboard: one static page, no build step.
const DASHBOARD: &str = include_str!("dashboard.html");
/// The REST API's OpenAPI document (docs/operations.md links to it).
const OPENAPI: &str = include_str!("openapi.json");

/// How long a call to another instance may take.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct RestServer {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl RestServer {
    /// Binds `listen` (host:port, port 0 picks one; `key` is the setting
    /// it came from, for the error) and serves in the background.
    pub(crate) fn start(inner: Arc<App>, key: &str, listen: &str) -> Result<Self> {
        let bind_err = |e: std::io::Error| {
            StreamsError::config(
                key,
                listen,
                format!("the REST server cannot listen there: {e}"),
            )
        };
        // HTTPS settings first: a bad keystore stops the app before it binds.
        let tls = crate::rest_tls::acceptor(inner.config())?;
        inner.set_rest_peers(crate::rest_tls::peers(inner.config(), PEER_TIMEOUT)?);
        let std_listener = std::net::TcpListener::bind(listen).map_err(bind_err)?;
        std_listener.set_nonblocking(true).map_err(bind_err)?;
        let addr = std_listener.local_addr().map_err(bind_err)?;
        let handle = rill_client::io_handle();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let app = router(inner);
        let _guard = handle.enter();
        let listener = tokio::net::TcpListener::from_std(std_listener).map_err(bind_err)?;
        let stopped = async move {
            let _ = rx.await;
        };
        match tls {
            Some(acceptor) => {
                let listener =
                    crate::rest_tls::TlsListener::new(listener, acceptor).map_err(bind_err)?;
                handle.spawn(serve(listener, app, stopped));
            }
            None => {
                handle.spawn(serve(listener, app, stopped));
            }
        }
        Ok(Self {
            addr,
            shutdown: Some(tx),
        })
    }

    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting; requests in flight finish.
    pub(crate) fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Serves `app` on `listener` (plain or TLS) until `stopped` completes.
async fn serve<L>(
    listener: L,
    app: Router,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stopped)
        .await
    {
        tracing::error!("REST server stopped: {e}");
    }
}

type Shared = Arc<App>;

fn router(inner: Arc<App>) -> Router {
    Router::new()
        .route("/", get(dashboard))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/instances", get(instances))
        .route("/v1/instances/self", get(instance_self))
        .route("/v1/history", get(history))
        .route("/v1/lag", get(group_lag))
        .route("/v1/store-lags", get(store_lags))
        .route("/v1/stores/{store}/keys/{key}", get(store_key))
        .route("/v1/shutdown", post(shutdown))
        .route("/v1/rejoin", post(rejoin))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "not found",
                "no such endpoint; see GET /v1/openapi.json",
            )
        })
        .layer(axum::middleware::map_response(json_errors))
        .with_state(inner)
}

fn error(status: StatusCode, error: &str, reason: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": error, "reason": reason.into()})),
    )
        .into_response()
}

/// Checks the bearer token; `mutating` endpoints always need one.
fn authorize(
    inner: &App,
    headers: &HeaderMap,
    mutating: bool,
) -> std::result::Result<(), Box<Response>> {
    let required = mutating || inner.config().rest_read_requires_token;
    if !required {
        return Ok(());
    }
    let Some(token) = inner.config().rest_admin_token.as_deref() else {
        return Err(Box::new(error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "mutating endpoints are disabled: this instance has no rest.admin.token",
        )));
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let unauthorized = |reason: &str| {
        let mut r = error(StatusCode::UNAUTHORIZED, "unauthorized", reason);
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        Box::new(r)
    };
    match given {
        None => Err(unauthorized(
            "missing Authorization: Bearer <rest.admin.token>",
        )),
        Some(g) if !constant_time_eq(g.as_bytes(), token.as_bytes()) => {
            Err(unauthorized("wrong token"))
        }
        Some(_) => Ok(()),
    }
}

/// The token of an `Authorization: Bearer <token>` value; the scheme is
/// case-insensitive (RFC 9110 §11.1), so `bearer` and `BEARER` work too.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Gives every error axum or its extractors produce without a JSON body
/// (405 method not allowed, a path that does not decode as UTF-8, a bad
/// query string, ...) the same `{"error", "reason"}` shape as the
/// handlers' own. (A URI over hyper's 65,534 bytes or oversized headers
/// are refused by hyper's HTTP/1 parser with an empty 414 / 431 before any
/// of this runs; docs/operations.md says so.)
async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let reason = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request refused")
            .to_string()
    } else {
        text
    };
    let label = status
        .canonical_reason()
        .unwrap_or("error")
        .to_ascii_lowercase();
    let mut out = error(status, &label, reason);
    // Keep what the client needs (Allow on 405, WWW-Authenticate on 401).
    for (name, value) in parts.headers.iter() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// Compares without leaking where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The dashboard page itself is static (no data), so it is served
/// without a token; with `rest.read.requires.token` its own requests carry
/// the token the user types into it (kept in the tab's sessionStorage).
async fn dashboard() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        DASHBOARD,
    )
        .into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn health(State(inner): State<Shared>) -> Response {
    let state = inner.state();
    let ready = state == AppState::Running;
    let live = !matches!(state, AppState::Error | AppState::NotRunning);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({"live": live, "ready": ready, "state": format!("{state:?}")})),
    )
        .into_response()
}

async fn metrics(State(inner): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&inner, &headers, false) {
        return *r;
    }
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        inner.prometheus(),
    )
        .into_response()
}

async fn instance_self(State(inner): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&inner, &headers, false) {
        return *r;
    }
    Json(inner.local_metadata()).into_response()
}

#[derive(Deserialize)]
struct InstancesQuery {
    /// Ask every other instance for its live state (default true).
    probe: Option<bool>,
}

/// GET `path` from another instance (`host:port`), over HTTPS when this
/// instance serves HTTPS, with the caller's Authorization header.
fn peer_get(
    peers: &crate::rest_tls::Peers,
    endpoint: &str,
    path: &str,
    auth: Option<&str>,
) -> std::result::Result<(u16, String), String> {
    let url = format!("{}://{endpoint}{path}", peers.scheme);
    let url = url.as_str();
    let mut req = peers.agent.get(url);
    if let Some(a) = auth {
        req = req.set("Authorization", a);
    }
    match req.call() {
        Ok(r) => {
            let status = r.status();
            r.into_string()
                .map(|b| (status, b))
                .map_err(|e| format!("reading the answer of {url}: {e}"))
        }
        Err(ureq::Error::Status(code, r)) => Ok((code, r.into_string().unwrap_or_default())),
        Err(e) => Err(format!("{url}: {e}")),
    }
}

async fn instances(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<InstancesQuery>,
) -> Response {
    if let Err(r) = authorize(&inner, &headers, false) {
        return *r;
    }
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let probe = q.probe.unwrap_or(true);
    let view = tokio::task::spawn_blocking(move || {
        let mut view = inner.all_metadata();
        if probe {
            // Ask the others in parallel; an instance that does not answer
            // is shown unreachable (the CLI's --offline-only uses this too).
            std::thread::scope(|s| {
                for i in view.instances.iter_mut().filter(|i| !i.local) {
                    let auth = auth.clone();
                    let peers = inner.rest_peers();
                    s.spawn(move || probe_instance(peers, i, auth.as_deref()));
                }
            });
            // How long each unreachable instance has been down, as seen
            // from here (the dashboard shows it with the removal command).
            let now = crate::timestamp::now_ms();
            let mut since = inner.unreachable_since();
            since.retain(|pid, _| {
                view.instances
                    .iter()
                    .any(|i| &i.process_id == pid && i.reachable == Some(false))
            });
            for i in view.instances.iter_mut() {
                if i.reachable == Some(false) {
                    i.unreachable_since_ms =
                        Some(*since.entry(i.process_id.clone()).or_insert(now));
                }
            }
        }
        view
    })
    .await;
    match view {
        Ok(v) => Json(v).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    }
}

/// Fills an instance's live fields from its own `/v1/instances/self`.
fn probe_instance(peers: &crate::rest_tls::Peers, i: &mut StreamsMetadata, auth: Option<&str>) {
    let Some(endpoint) = i.endpoint.clone() else {
        return;
    };
    let answer = peer_get(peers, &endpoint, "/v1/instances/self", auth);
    let live: Option<StreamsMetadata> = match answer {
        Ok((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    };
    i.reachable = Some(live.is_some());
    let Some(live) = live else {
        return;
    };
    if i.process_id == endpoint && live.endpoint.as_deref() == Some(endpoint.as_str()) {
        // Streams groups (KIP-1071) list other instances by endpoint only:
        // the instance's own answer names its process and threads.
        *i = StreamsMetadata {
            local: false,
            reachable: Some(true),
            unreachable_since_ms: None,
            ..live
        };
        return;
    }
    if live.process_id != i.process_id {
        // Another process answers at that address now: the listed one is gone.
        i.reachable = Some(false);
        return;
    }
    i.state = live.state;
    i.errors = live.errors;
    for t in &mut i.threads {
        if let Some(l) = live.threads.iter().find(|l| l.thread_name == t.thread_name) {
            t.thread_state = l.thread_state.clone();
            t.standby_lags = l.standby_lags.clone();
        }
    }
}

/// Lag per input partition for the whole group (committed vs end offsets).
async fn group_lag(State(inner): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&inner, &headers, false) {
        return *r;
    }
    let app = inner.clone();
    // The admin client's blocking calls refuse tokio threads (blocking
    // pool included): ask from a plain thread.
    let lag = tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || app.group_lag())
            .join()
            .map_err(|_| "reading the group's lag panicked".to_string())
    })
    .await;
    match lag.map_err(|e| e.to_string()).and_then(|r| r) {
        Ok(Ok(rows)) => Json(json!({
            "application_id": inner.config().application_id,
            "partitions": rows,
        }))
        .into_response(),
        Ok(Err(e)) => error(
            StatusCode::BAD_GATEWAY,
            "cluster unavailable",
            format!("reading offsets from the cluster: {e}"),
        ),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e),
    }
}

async fn history(State(inner): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&inner, &headers, false) {
        return *r;
    }
    let generation = inner.latest_assignment().map_or(-1, |a| a.generation);
    Json(json!({
        "application_id": inner.config().application_id,
        "generation": generation,
        "events": inner.rebalance_history(),
    }))
    .into_response()
}

#[derive(Deserialize)]
struct KeyQuery {
    #[serde(default)]
    forwarded: bool,
    /// Accept a standby's copy here (KIP-535); the answer gives its lag.
    #[serde(default)]
    stale: bool,
    /// How the path's key becomes bytes: `string` (UTF-8, default) or `hex`.
    key_format: Option<String>,
}

fn decode_key(key: &str, format: Option<&str>) -> std::result::Result<Vec<u8>, String> {
    match format.unwrap_or("string") {
        "string" => Ok(key.as_bytes().to_vec()),
        "hex" => {
            if !key.len().is_multiple_of(2) {
                return Err(format!("key {key:?} is not hex: odd length"));
            }
            (0..key.len())
                .step_by(2)
                .map(|i| {
                    u8::from_str_radix(&key[i..i + 2], 16)
                        .map_err(|_| format!("key {key:?} is not hex"))
                })
                .collect()
        }
        other => Err(format!("key_format {other:?}: expected string or hex")),
    }
}

fn render_value(inner: &App, store: &str, bytes: &[u8]) -> Value {
    let renderer = inner.renderer(store);
    match renderer {
        // The application's serde and renderer: a panic in them answers as
        // an undecodable value, not a dropped connection.
        Some(r) => match crate::user_code::guard(|| r(bytes)) {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => json!({"undecodable": hex(bytes), "reason": e}),
            Err(p) => {
                json!({"undecodable": hex(bytes), "reason": format!("the renderer panicked: {p}")})
            }
        },
        None => match std::str::from_utf8(bytes) {
            Ok(s) => Value::String(s.to_string()),
            Err(_) => json!({"hex": hex(bytes)}),
        },
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// This instance's store partitions with their changelog lags, active and
/// standby (KIP-535's `allLocalStorePartitionLags`).
async fn store_lags(State(inner): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&inner, &headers, false) {
        return *r;
    }
    Json(json!({ "stores": inner.local_store_lags() })).into_response()
}

async fn store_key(
    State(inner): State<Shared>,
    headers: HeaderMap,
    Path((store, key)): Path<(String, String)>,
    Query(q): Query<KeyQuery>,
) -> Response {
    if let Err(r) = authorize(&inner, &headers, false) {
        return *r;
    }
    let bytes = match decode_key(&key, q.key_format.as_deref()) {
        Ok(b) => b,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad key", e),
    };
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let answer = tokio::task::spawn_blocking(move || {
        let local = inner.query_local_stale(&store, &bytes, q.stale);
        let endpoint = inner.endpoint().map(str::to_string);
        match local {
            Ok((md, Some(v), lag)) => (
                StatusCode::OK,
                json!({
                    "store": store, "key": key, "partition": md.partition, "task": md.task,
                    "value": render_value(&inner, &store, &v),
                    "owner": if lag.is_some() { json!(md.active_host) } else { json!(endpoint) },
                    "served_by": if lag.is_some() { "standby" } else { "owner" },
                    "offset_lag": lag.unwrap_or(0),
                }),
            ),
            Ok((md, None, _)) => (
                StatusCode::NOT_FOUND,
                json!({
                    "error": "key not found",
                    "reason": format!("store {store} partition {} has no key {key:?}", md.partition),
                    "owner": endpoint,
                }),
            ),
            Err(StoreQueryError::UnknownStore(s)) => (
                StatusCode::NOT_FOUND,
                json!({"error": "unknown store", "reason": format!("this application has no state store {s:?}")}),
            ),
            Err(e @ StoreQueryError::NotAvailable { .. }) => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "not available", "reason": e.to_string()}),
            ),
            Err(e @ StoreQueryError::Failed { .. }) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"error": "query failed", "reason": e.to_string()}),
            ),
            Err(StoreQueryError::NotLocal { owner, partition, task, .. }) => {
                forward(inner.rest_peers(), &store, &key, q.key_format.as_deref(), &owner, partition, &task, q.forwarded, auth.as_deref())
            }
        }
    })
    .await;
    match answer {
        Ok((status, body)) => (status, Json(body)).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    }
}

/// Asks the owning instance; its answer (plus who answered) or why not.
#[allow(clippy::too_many_arguments)]
fn forward(
    peers: &crate::rest_tls::Peers,
    store: &str,
    key: &str,
    key_format: Option<&str>,
    owner: &str,
    partition: i32,
    task: &str,
    forwarded: bool,
    auth: Option<&str>,
) -> (StatusCode, Value) {
    let misdirected = |reason: String| {
        (
            StatusCode::BAD_GATEWAY,
            json!({"error": "owner unavailable", "reason": reason, "owner": owner,
                   "partition": partition, "task": task}),
        )
    };
    if forwarded || !owner.contains(':') {
        return misdirected(format!(
            "task {task} (store {store} partition {partition}) is owned by {owner}, which cannot answer here"
        ));
    }
    let mut path = format!(
        "/v1/stores/{}/keys/{}?forwarded=true",
        encode(store),
        encode(key)
    );
    if let Some(f) = key_format {
        path.push_str(&format!("&key_format={}", encode(f)));
    }
    match peer_get(peers, owner, &path, auth) {
        Ok((status, body)) => {
            let mut v: Value = serde_json::from_str(&body).unwrap_or_else(|_| json!({"raw": body}));
            if let Some(o) = v.as_object_mut() {
                o.insert("owner".into(), json!(owner));
                o.insert("served_by".into(), json!("forwarded"));
            }
            (
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                v,
            )
        }
        Err(e) => misdirected(format!("asking the owner failed: {e}")),
    }
}

/// Percent-encodes a path segment.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShutdownRequest {
    #[serde(default)]
    leave_group: bool,
}

/// Every live thread rejoins the group now (admin token): `rill groups
/// remove-members` calls it on the live instances after removing dead
/// members, so they take the dead members' tasks without waiting for
/// their next heartbeat to hear of the rebalance.
async fn rejoin(State(inner): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&inner, &headers, true) {
        return *r;
    }
    let threads = inner.request_rejoin();
    (
        StatusCode::ACCEPTED,
        Json(json!({"process_id": inner.process_id(), "threads": threads})),
    )
        .into_response()
}

async fn shutdown(State(inner): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = authorize(&inner, &headers, true) {
        return *r;
    }
    let req: ShutdownRequest = if body.iter().all(|b| b.is_ascii_whitespace()) {
        ShutdownRequest { leave_group: false }
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "bad request",
                    format!("expected {{\"leave_group\": true|false}}: {e}"),
                )
            }
        }
    };
    let state = inner.state();
    if matches!(
        state,
        AppState::PendingShutdown | AppState::NotRunning | AppState::Error
    ) {
        return error(
            StatusCode::CONFLICT,
            "already stopping",
            format!("the instance is {state:?}"),
        );
    }
    let instance_ids: Vec<String> = inner
        .local_thread_metadata()
        .into_iter()
        .filter_map(|t| t.group_instance_id)
        .collect();
    let leave_group = req.leave_group;
    tracing::info!(leave_group, "shutdown requested over REST");
    // Off the runtime: close joins threads and may send a LeaveGroup.
    let closing = inner.clone();
    std::thread::spawn(move || {
        closing.close(CloseOptions {
            timeout: Duration::from_secs(30),
            leave_group,
        })
    });
    (
        StatusCode::ACCEPTED,
        Json(json!({
            "shutting_down": true,
            "leave_group": leave_group,
            "process_id": inner.process_id(),
            "group_instance_ids": instance_ids,
        })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_decode_as_text_or_hex_and_bad_ones_say_why() {
        assert_eq!(decode_key("river", None).unwrap(), b"river");
        assert_eq!(decode_key("00ff", Some("hex")).unwrap(), vec![0, 255]);
        assert!(decode_key("abc", Some("hex"))
            .unwrap_err()
            .contains("odd length"));
        assert!(decode_key("zz", Some("hex"))
            .unwrap_err()
            .contains("not hex"));
        assert!(decode_key("x", Some("base64"))
            .unwrap_err()
            .contains("key_format"));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer t0k"), Some("t0k"));
        assert_eq!(bearer_token("bearer t0k"), Some("t0k"));
        assert_eq!(bearer_token("BEARER  t0k "), Some("t0k"));
        assert_eq!(bearer_token("Basic dXNlcjpwYXNz"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
        assert_eq!(encode("word-1_x.y~"), "word-1_x.y~");
    }
}
