//! A network fault proxy for a whole cluster (tokio), for the fault
//! scenarios of `fault_scenarios`: one listener per broker, so an app
//! instance can be cut off from every broker (or one) while the harness's
//! own clients keep their direct connections.
//!
//! Each listener forwards frames to its broker and back, and rewrites the
//! broker addresses in Metadata and FindCoordinator answers to the matching
//! listener (clients stay behind the proxy after bootstrap). Faults apply
//! per broker, for a set time:
//! - `Delay(d)`: every frame waits `d` before it is forwarded;
//! - `Drop`: frames are discarded (requests never answered);
//! - `BlackHole`: nothing moves, new connections are accepted but not
//!   forwarded, until the fault ends, then the held frames go on (a network
//!   partition that heals; no RST, no FIN).
//!
//! `reset` ends every open connection to a broker with a TCP RST.
//!
//! Invariants: binds 127.0.0.1 port 0 only; the proxy's runtime and every
//! connection task end when the proxy is dropped.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rill_protocol::ApiKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

use crate::proxy::{request_header, rewrite_brokers};

/// A fault on the connections to one broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetFault {
    Delay(Duration),
    Drop,
    BlackHole,
}

struct Route {
    node: i32,
    upstream: String,
    port: u16,
}

struct Shared {
    routes: Vec<Route>,
    /// Node → fault and when it ends.
    faults: Mutex<HashMap<i32, (NetFault, Instant)>>,
    /// Node ids whose connections are to be reset.
    resets: broadcast::Sender<i32>,
}

impl Shared {
    fn fault(&self, node: i32) -> Option<(NetFault, Instant)> {
        let mut f = self.faults.lock().unwrap();
        match f.get(&node) {
            Some((_, until)) if *until <= Instant::now() => {
                f.remove(&node);
                None
            }
            other => other.copied(),
        }
    }

    /// Waits out a black hole; `false` when the frame is to be dropped.
    async fn gate(&self, node: i32) -> bool {
        loop {
            match self.fault(node) {
                None => return true,
                Some((NetFault::Delay(d), _)) => {
                    tokio::time::sleep(d).await;
                    return true;
                }
                Some((NetFault::Drop, _)) => return false,
                Some((NetFault::BlackHole, until)) => {
                    let left = until.saturating_duration_since(Instant::now());
                    tokio::time::sleep(left.min(Duration::from_millis(100))).await;
                }
            }
        }
    }

    fn to_proxy(&self, node: i32) -> Option<(String, i32)> {
        self.routes
            .iter()
            .find(|r| r.node == node)
            .map(|r| ("127.0.0.1".to_string(), i32::from(r.port)))
    }
}

/// One listener per broker, with faults per broker.
pub struct ClusterProxy {
    shared: Arc<Shared>,
    rt: Option<tokio::runtime::Runtime>,
}

impl ClusterProxy {
    /// A proxy for the brokers `(node id, address)`.
    pub fn start(brokers: &[(i32, String)]) -> io::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("net-proxy")
            .enable_all()
            .build()?;
        let listeners = rt.block_on(async {
            let mut ls = Vec::new();
            for _ in brokers {
                ls.push(TcpListener::bind("127.0.0.1:0").await?);
            }
            io::Result::Ok(ls)
        })?;
        let routes = brokers
            .iter()
            .zip(&listeners)
            .map(|((node, upstream), l)| {
                Ok(Route {
                    node: *node,
                    upstream: upstream.clone(),
                    port: l.local_addr()?.port(),
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        let shared = Arc::new(Shared {
            routes,
            faults: Mutex::default(),
            resets: broadcast::channel(64).0,
        });
        for (listener, (node, _)) in listeners.into_iter().zip(brokers) {
            let (shared, node) = (shared.clone(), *node);
            rt.spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(serve(client, node, shared.clone()));
                }
            });
        }
        Ok(Self {
            shared,
            rt: Some(rt),
        })
    }

    /// The proxy's addresses, comma-separated (a `bootstrap.servers` value).
    pub fn bootstrap(&self) -> String {
        self.shared
            .routes
            .iter()
            .map(|r| format!("127.0.0.1:{}", r.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Applies `fault` to broker `node` (every broker when `None`) for
    /// `period`, replacing a fault in force.
    pub fn fault(&self, node: Option<i32>, fault: NetFault, period: Duration) {
        let until = Instant::now() + period;
        let mut f = self.shared.faults.lock().unwrap();
        for r in &self.shared.routes {
            if node.is_none_or(|n| n == r.node) {
                f.insert(r.node, (fault, until));
            }
        }
    }

    /// Ends every open connection to broker `node` (every broker when
    /// `None`) with a TCP RST.
    pub fn reset(&self, node: Option<i32>) {
        for r in &self.shared.routes {
            if node.is_none_or(|n| n == r.node) {
                let _ = self.shared.resets.send(r.node);
            }
        }
    }
}

impl Drop for ClusterProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

async fn read_frame(r: &mut OwnedReadHalf) -> io::Result<Bytes> {
    let n = r.read_i32().await?;
    if !(0..=200 << 20).contains(&n) {
        return Err(io::Error::other(format!("frame size {n}")));
    }
    let mut body = vec![0u8; n as usize];
    r.read_exact(&mut body).await?;
    Ok(Bytes::from(body))
}

async fn write_frame(w: &mut OwnedWriteHalf, frame: &[u8]) -> io::Result<()> {
    w.write_all(&(frame.len() as i32).to_be_bytes()).await?;
    w.write_all(frame).await
}

type Requests = Arc<Mutex<HashMap<i32, (ApiKey, i16)>>>;

async fn serve(client: TcpStream, node: i32, shared: Arc<Shared>) {
    let mut resets = shared.resets.subscribe();
    // A RST, not a FIN, whenever the proxy ends the connection.
    let _ = client.set_zero_linger();
    let _ = client.set_nodelay(true);
    let reset = async move {
        loop {
            match resets.recv().await {
                Ok(n) if n == node => return,
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                _ => {}
            }
        }
    };
    let work = async {
        // A new connection waits out a black hole before it reaches the broker.
        if !shared.gate(node).await {
            return;
        }
        let Some(route) = shared.routes.iter().find(|r| r.node == node) else {
            return;
        };
        let Ok(upstream) = TcpStream::connect(&route.upstream).await else {
            return;
        };
        let _ = upstream.set_nodelay(true);
        let (mut cr, mut cw) = client.into_split();
        let (mut ur, mut uw) = upstream.into_split();
        let requests: Requests = Arc::default();
        let up = {
            let requests = requests.clone();
            let shared = shared.clone();
            async move {
                while let Ok(frame) = read_frame(&mut cr).await {
                    if !shared.gate(node).await {
                        continue;
                    }
                    if let Some((corr, api, version)) = request_header(&frame) {
                        requests.lock().unwrap().insert(corr, (api, version));
                    }
                    if write_frame(&mut uw, &frame).await.is_err() {
                        break;
                    }
                }
            }
        };
        let down = async {
            while let Ok(frame) = read_frame(&mut ur).await {
                if frame.len() < 4 || !shared.gate(node).await {
                    continue;
                }
                let corr = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                let asked = requests.lock().unwrap().remove(&corr);
                let rewritten: Option<BytesMut> = match asked {
                    Some((api @ (ApiKey::Metadata | ApiKey::FindCoordinator), version)) => {
                        rewrite_brokers(&frame, api, version, corr, &|n| shared.to_proxy(n))
                    }
                    _ => None,
                };
                let sent = match rewritten {
                    // `rewrite_brokers` encodes the size prefix too.
                    Some(out) => cw.write_all(&out).await,
                    None => write_frame(&mut cw, &frame).await,
                };
                if sent.is_err() {
                    break;
                }
            }
        };
        tokio::select! {
            _ = up => {}
            _ = down => {}
        }
    };
    tokio::select! {
        _ = work => {}
        _ = reset => {}
    }
}
