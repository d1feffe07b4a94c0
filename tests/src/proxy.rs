//! A fault-injecting TCP proxy in front of a single-node broker (Rill's or
//! Apache Kafka), for client tests that need a lost response or a garbage
//! answer on a real broker.
//!
//! It forwards frames both ways, remembers each request's API and version by
//! correlation id, rewrites broker addresses in Metadata and FindCoordinator
//! answers to its own (so clients keep talking through it), and applies the
//! queued faults to the next answers of an API: close the connection instead
//! of delivering the answer (the broker did the work; the client never hears
//! of it), or deliver garbage in its place. Binds 127.0.0.1 port 0.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rill_protocol::message::{decode_response, encode_response_frame, ResponseBody};
use rill_protocol::{ApiKey, ResponseKind, StrBytes};

/// What to do to an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Close the client connection instead of delivering the answer.
    DropAndClose,
    /// Deliver bytes that are not a valid answer.
    Garbage,
}

struct State {
    upstream: String,
    host: String,
    port: i32,
    faults: Mutex<Vec<(ApiKey, Fault, usize)>>,
    applied: Mutex<HashMap<ApiKey, usize>>,
    stop: AtomicBool,
}

pub struct FaultProxy {
    pub addr: String,
    state: Arc<State>,
}

impl FaultProxy {
    /// A proxy for a single-node broker at `upstream`.
    pub fn start(upstream: &str) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let local = listener.local_addr()?;
        let state = Arc::new(State {
            upstream: upstream.to_string(),
            host: local.ip().to_string(),
            port: local.port() as i32,
            faults: Mutex::new(Vec::new()),
            applied: Mutex::new(HashMap::new()),
            stop: AtomicBool::new(false),
        });
        listener.set_nonblocking(true)?;
        let s = state.clone();
        thread::spawn(move || {
            while !s.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let s = s.clone();
                        thread::spawn(move || {
                            let _ = serve(client, s);
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => break,
                }
            }
        });
        Ok(Self {
            addr: local.to_string(),
            state,
        })
    }

    /// Applies `fault` to the next `times` answers of `api`.
    pub fn inject(&self, api: ApiKey, fault: Fault, times: usize) {
        self.state.faults.lock().unwrap().push((api, fault, times));
    }

    /// How many answers of `api` were faulted so far.
    pub fn applied(&self, api: ApiKey) -> usize {
        self.state
            .applied
            .lock()
            .unwrap()
            .get(&api)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
    }
}

fn read_frame(s: &mut TcpStream) -> io::Result<Bytes> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size)?;
    let n = i32::from_be_bytes(size);
    if !(0..=200 << 20).contains(&n) {
        return Err(io::Error::other(format!("frame size {n}")));
    }
    let mut body = vec![0u8; n as usize];
    s.read_exact(&mut body)?;
    Ok(Bytes::from(body))
}

fn serve(mut client: TcpStream, state: Arc<State>) -> io::Result<()> {
    let mut upstream = TcpStream::connect(&state.upstream)?;
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let requests: Arc<Mutex<HashMap<i32, (ApiKey, i16)>>> = Arc::default();
    // Client → broker.
    {
        let mut c = client.try_clone()?;
        let mut u = upstream.try_clone()?;
        let requests = requests.clone();
        thread::spawn(move || {
            while let Ok(frame) = read_frame(&mut c) {
                if let Some((corr, api, version)) = request_header(&frame) {
                    requests.lock().unwrap().insert(corr, (api, version));
                }
                let mut out = (frame.len() as i32).to_be_bytes().to_vec();
                out.extend_from_slice(&frame);
                if u.write_all(&out).is_err() {
                    break;
                }
            }
            let _ = u.shutdown(Shutdown::Both);
        });
    }
    // Broker → client.
    while let Ok(frame) = read_frame(&mut upstream) {
        let corr = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let Some((api, version)) = requests.lock().unwrap().remove(&corr) else {
            break;
        };
        let fault = {
            let mut faults = state.faults.lock().unwrap();
            match faults.iter_mut().find(|(a, _, n)| *a == api && *n > 0) {
                Some(f) => {
                    f.2 -= 1;
                    Some(f.1)
                }
                None => None,
            }
        };
        if let Some(f) = fault {
            *state.applied.lock().unwrap().entry(api).or_default() += 1;
            match f {
                Fault::DropAndClose => break,
                Fault::Garbage => {
                    // A frame whose correlation id matches no request.
                    let garbage = [0u8, 0, 0, 8, 0x7f, 0x7f, 0x7f, 0x7f, 0xde, 0xad, 0xbe, 0xef];
                    let _ = client.write_all(&garbage);
                    continue;
                }
            }
        }
        let out = match api {
            ApiKey::Metadata | ApiKey::FindCoordinator => {
                let me = Some((state.host.clone(), state.port));
                rewrite_brokers(&frame, api, version, corr, &|_| me.clone()).unwrap_or_else(|| {
                    let mut o = BytesMut::new();
                    rill_protocol::frame::encode_frame(&mut o, &frame);
                    o
                })
            }
            _ => {
                let mut o = BytesMut::new();
                rill_protocol::frame::encode_frame(&mut o, &frame);
                o
            }
        };
        if client.write_all(&out).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
    Ok(())
}

/// A request frame's correlation id, API and version (the answer is read
/// by them); `None` for a frame too short or of an unknown API.
pub(crate) fn request_header(frame: &[u8]) -> Option<(i32, ApiKey, i16)> {
    let b = frame.get(..8)?;
    let api = ApiKey::try_from(i16::from_be_bytes([b[0], b[1]])).ok()?;
    let version = i16::from_be_bytes([b[2], b[3]]);
    let corr = i32::from_be_bytes([b[4], b[5], b[6], b[7]]);
    Some((corr, api, version))
}

/// Rewrites the broker addresses in a Metadata or FindCoordinator answer:
/// node `id` becomes `to(id)` (kept when `None`). `None` when the frame is
/// not such an answer or does not decode.
pub(crate) fn rewrite_brokers(
    frame: &Bytes,
    api: ApiKey,
    version: i16,
    corr: i32,
    to: &dyn Fn(i32) -> Option<(String, i32)>,
) -> Option<BytesMut> {
    let (_, mut body) = decode_response(frame.clone(), api, version).ok()?;
    let point = |node: i32, host: &mut StrBytes, port: &mut i32| {
        if let Some((h, p)) = to(node) {
            *host = StrBytes::from_string(h);
            *port = p;
        }
    };
    match &mut body {
        ResponseBody::Kafka(ResponseKind::Metadata(m)) => {
            for b in m.brokers.iter_mut() {
                point(b.node_id.0, &mut b.host, &mut b.port);
            }
        }
        ResponseBody::Kafka(ResponseKind::FindCoordinator(f)) => {
            if f.port > 0 {
                point(f.node_id.0, &mut f.host, &mut f.port);
            }
            for c in f.coordinators.iter_mut() {
                point(c.node_id.0, &mut c.host, &mut c.port);
            }
        }
        _ => return None,
    }
    let mut out = BytesMut::new();
    encode_response_frame(&mut out, api, version, corr, &body).ok()?;
    Some(out)
}
