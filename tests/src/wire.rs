//! A small blocking Kafka client for scenarios: raw requests over one TCP
//! connection per broker, with ApiVersions negotiation, plus helpers that
//! route produce/fetch/list-offsets to partition leaders.
//!
//! It is deliberately low-level so scenarios can send exactly the request
//! they mean (including malformed ones) to the embedded broker and to Apache
//! Kafka and compare the answers. Every read has a timeout, so a broker that
//! never answers fails the test instead of hanging it.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rill_protocol::kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use rill_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use rill_protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use rill_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use rill_protocol::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use rill_protocol::kafka_protocol::messages::*;
use rill_protocol::message::{
    decode_response, encode_request_frame, peek_correlation_id, Api, RequestBody, ResponseBody,
};
use rill_protocol::records::{self, Compression, Record};
use rill_protocol::{ApiKey, ErrorCode, RequestKind, ResponseKind, StrBytes};

pub const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// One connection to one broker.
pub struct Conn {
    stream: TcpStream,
    next_correlation: i32,
    versions: HashMap<i16, (i16, i16)>,
    pub addr: String,
}

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub fn tn(s: &str) -> TopicName {
    TopicName(sb(s))
}

impl Conn {
    /// Connects and negotiates API versions.
    pub fn connect(addr: &str) -> io::Result<Self> {
        let sock = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::other(format!("cannot resolve {addr}")))?;
        let stream = TcpStream::connect_timeout(&sock, Duration::from_secs(10))?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        let mut c = Self {
            stream,
            next_correlation: 1,
            versions: HashMap::new(),
            addr: addr.to_string(),
        };
        let req = ApiVersionsRequest::default()
            .with_client_software_name(sb("rill-tests"))
            .with_client_software_version(sb("0.1.0"));
        let resp = match c.request(ApiKey::ApiVersions, 3, RequestKind::ApiVersions(req))? {
            ResponseKind::ApiVersions(r) => r,
            other => return Err(io::Error::other(format!("unexpected {other:?}"))),
        };
        if resp.error_code != 0 {
            return Err(io::Error::other(format!(
                "ApiVersions failed: {}",
                resp.error_code
            )));
        }
        for k in resp.api_keys {
            c.versions.insert(k.api_key, (k.min_version, k.max_version));
        }
        Ok(c)
    }

    /// The highest version both sides speak, capped at `want`.
    pub fn version(&self, key: ApiKey, want: i16) -> i16 {
        let crate_max = key.valid_versions().max;
        let (_, broker_max) = self.versions.get(&(key as i16)).copied().unwrap_or((0, 0));
        want.min(broker_max).min(crate_max)
    }

    pub fn broker_range(&self, key: impl Into<Api>) -> Option<(i16, i16)> {
        self.versions.get(&key.into().key()).copied()
    }

    /// Sends one request and waits for its response.
    pub fn request(
        &mut self,
        key: ApiKey,
        version: i16,
        body: RequestKind,
    ) -> io::Result<ResponseKind> {
        match self.request_body(key.into(), version, body.into())? {
            ResponseBody::Kafka(k) => Ok(k),
            other => Err(io::Error::other(format!("{key:?} answered with {other:?}"))),
        }
    }

    /// Sends one request of any API (also KIP-1071's) and waits for its response.
    pub fn request_body(
        &mut self,
        key: Api,
        version: i16,
        body: RequestBody,
    ) -> io::Result<ResponseBody> {
        let corr = self.send_body(key, version, &body)?;
        self.receive_body(key, version, corr)
    }

    /// Sends a request without waiting (acks=0 produce); returns its correlation id.
    pub fn send(&mut self, key: ApiKey, version: i16, body: &RequestKind) -> io::Result<i32> {
        self.send_body(key.into(), version, &body.clone().into())
    }

    fn send_body(&mut self, key: Api, version: i16, body: &RequestBody) -> io::Result<i32> {
        let corr = self.next_correlation;
        self.next_correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key.key())
            .with_request_api_version(version)
            .with_correlation_id(corr)
            .with_client_id(Some(sb("rill-tests")));
        let mut out = BytesMut::new();
        encode_request_frame(&mut out, &header, body).map_err(io::Error::other)?;
        self.stream.write_all(&out)?;
        Ok(corr)
    }

    pub fn receive(&mut self, key: ApiKey, version: i16, corr: i32) -> io::Result<ResponseKind> {
        match self.receive_body(key.into(), version, corr)? {
            ResponseBody::Kafka(k) => Ok(k),
            other => Err(io::Error::other(format!("{key:?} answered with {other:?}"))),
        }
    }

    fn receive_body(&mut self, key: Api, version: i16, corr: i32) -> io::Result<ResponseBody> {
        let frame = self.read_frame()?;
        if peek_correlation_id(&frame) != Some(corr) {
            return Err(io::Error::other(format!(
                "correlation id {:?} does not match request {corr}",
                peek_correlation_id(&frame)
            )));
        }
        let (_, body) = decode_response(frame, key, version).map_err(io::Error::other)?;
        Ok(body)
    }

    /// Writes raw bytes (for malformed-request tests).
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    pub fn read_frame(&mut self) -> io::Result<Bytes> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len)?;
        let n = i32::from_be_bytes(len);
        if !(0..=256 << 20).contains(&n) {
            return Err(io::Error::other(format!("bad response size {n}")));
        }
        let mut buf = vec![0u8; n as usize];
        self.stream.read_exact(&mut buf)?;
        Ok(Bytes::from(buf))
    }

    /// True if the broker closed the connection (read returns EOF or reset).
    pub fn is_closed_by_peer(&mut self) -> bool {
        let _ = self.stream.set_read_timeout(Some(Duration::from_secs(10)));
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }
}

/// Connections to a whole cluster, routed by partition leadership.
pub struct Client {
    bootstrap: Vec<String>,
    conns: HashMap<i32, Conn>,
    pub metadata: MetadataResponse,
}

/// What one fetch returned for a partition.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub error: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub records: Vec<Record>,
    pub raw: Bytes,
}

impl Client {
    pub fn new(bootstrap: &str) -> io::Result<Self> {
        let mut c = Self {
            bootstrap: bootstrap.split(',').map(str::to_string).collect(),
            conns: HashMap::new(),
            metadata: MetadataResponse::default(),
        };
        c.refresh(None)?;
        Ok(c)
    }

    /// Any live broker (for cluster-level requests).
    pub fn any(&mut self) -> io::Result<&mut Conn> {
        let id = self
            .metadata
            .brokers
            .first()
            .map(|b| b.node_id.0)
            .ok_or_else(|| io::Error::other("no brokers in metadata"))?;
        self.node(id)
    }

    pub fn node(&mut self, id: i32) -> io::Result<&mut Conn> {
        if !self.conns.contains_key(&id) {
            let b = self
                .metadata
                .brokers
                .iter()
                .find(|b| b.node_id.0 == id)
                .ok_or_else(|| io::Error::other(format!("no broker {id}")))?;
            let conn = Conn::connect(&format!("{}:{}", b.host.as_str(), b.port))?;
            self.conns.insert(id, conn);
        }
        Ok(self.conns.get_mut(&id).unwrap())
    }

    /// Refreshes metadata for some topics (`None`: all) without auto-creating.
    pub fn refresh(&mut self, topics: Option<&[&str]>) -> io::Result<&MetadataResponse> {
        let req = MetadataRequest::default()
            .with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| MetadataRequestTopic::default().with_name(Some(tn(t))))
                    .collect()
            }))
            .with_allow_auto_topic_creation(false);
        let mut last_err = None;
        let addrs: Vec<String> = self
            .metadata
            .brokers
            .iter()
            .map(|b| format!("{}:{}", b.host.as_str(), b.port))
            .chain(self.bootstrap.iter().cloned())
            .collect();
        for addr in addrs {
            match Conn::connect(&addr) {
                Ok(mut conn) => {
                    let v = conn.version(ApiKey::Metadata, 12);
                    match conn.request(ApiKey::Metadata, v, RequestKind::Metadata(req.clone())) {
                        Ok(ResponseKind::Metadata(m)) => {
                            self.metadata = m;
                            // Drop connections to brokers that left.
                            let live: Vec<i32> =
                                self.metadata.brokers.iter().map(|b| b.node_id.0).collect();
                            self.conns.retain(|id, _| live.contains(id));
                            return Ok(&self.metadata);
                        }
                        Ok(other) => {
                            last_err = Some(io::Error::other(format!("unexpected {other:?}")))
                        }
                        Err(e) => last_err = Some(e),
                    }
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("no bootstrap address")))
    }

    pub fn leader(&mut self, topic: &str, partition: i32) -> io::Result<i32> {
        for attempt in 0..2 {
            if attempt == 1 {
                self.refresh(Some(&[topic]))?;
            }
            if let Some(l) = self
                .metadata
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == topic))
                .and_then(|t| t.partitions.iter().find(|p| p.partition_index == partition))
                .map(|p| p.leader_id.0)
                .filter(|l| *l >= 0)
            {
                return Ok(l);
            }
        }
        Err(io::Error::other(format!(
            "no leader for {topic}-{partition}"
        )))
    }

    pub fn topic_id(&mut self, topic: &str) -> Option<uuid::Uuid> {
        self.metadata
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == topic))
            .map(|t| t.topic_id)
    }

    /// CreateTopics; returns the per-topic error code and message.
    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        rf: i16,
        configs: &[(&str, &str)],
    ) -> io::Result<(i16, Option<String>)> {
        let topic = CreatableTopic::default()
            .with_name(tn(name))
            .with_num_partitions(partitions)
            .with_replication_factor(rf)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(sb(k))
                            .with_value(Some(sb(v)))
                    })
                    .collect(),
            );
        let req = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(30_000);
        let conn = self.any()?;
        let v = conn.version(ApiKey::CreateTopics, 7);
        let ResponseKind::CreateTopics(r) =
            conn.request(ApiKey::CreateTopics, v, RequestKind::CreateTopics(req))?
        else {
            return Err(io::Error::other("unexpected response"));
        };
        let t = &r.topics[0];
        let out = (
            t.error_code,
            t.error_message.as_ref().map(|m| m.to_string()),
        );
        if t.error_code == 0 {
            self.wait_for_topic(name, partitions.max(1) as usize)?;
            // Apache Kafka can name a leader in Metadata a moment before
            // that broker serves the partition (NOT_LEADER_OR_FOLLOWER, which
            // clients retry); wait until every leader answers ListOffsets.
            let deadline = Instant::now() + Duration::from_secs(10);
            for p in 0..partitions.max(1) {
                while matches!(self.list_offset(name, p, -1), Ok((6, _, _)))
                    && Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        Ok(out)
    }

    /// Waits (bounded) until every partition of `topic` has a leader.
    pub fn wait_for_topic(&mut self, topic: &str, partitions: usize) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.refresh(Some(&[topic]))?;
            let ready = self.metadata.topics.iter().any(|t| {
                t.error_code == 0
                    && t.name.as_ref().is_some_and(|n| n.as_str() == topic)
                    && t.partitions.len() >= partitions
                    && t.partitions.iter().all(|p| p.leader_id.0 >= 0)
            });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "topic {topic} not ready after 30s"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Produces one batch to a partition's leader; returns (error code, base offset).
    pub fn produce_batch(
        &mut self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        acks: i16,
    ) -> io::Result<(i16, i64)> {
        let leader = self.leader(topic, partition)?;
        let conn = self.node(leader)?;
        // v12: by name (v13 needs topic ids; the id-based path has its own scenario).
        let v = conn.version(ApiKey::Produce, 12);
        let req = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(tn(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch))])]);
        let ResponseKind::Produce(r) =
            conn.request(ApiKey::Produce, v, RequestKind::Produce(req))?
        else {
            return Err(io::Error::other("unexpected response"));
        };
        let p = &r.responses[0].partition_responses[0];
        Ok((p.error_code, p.base_offset))
    }

    /// Produces keyed records (one batch), panicking on a broker error.
    pub fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        kvs: &[(&str, &str)],
        codec: Compression,
    ) -> io::Result<i64> {
        let now = now_ms();
        let recs: Vec<Record> = kvs
            .iter()
            .enumerate()
            .map(|(i, (k, v))| {
                records::simple_record(
                    i as i64,
                    now,
                    Some(Bytes::from(k.to_string())),
                    Some(Bytes::from(v.to_string())),
                )
            })
            .collect();
        let batch = records::encode_records(&recs, codec).map_err(io::Error::other)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (code, base) = self.produce_batch(topic, partition, batch.clone(), -1)?;
            if code == 0 {
                return Ok(base);
            }
            // A real producer retries these after refreshing metadata (Kafka
            // answers NOT_LEADER_OR_FOLLOWER until a new leader is ready).
            if is_retriable(code) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
                self.refresh(Some(&[topic]))?;
                continue;
            }
            return Err(io::Error::other(format!(
                "produce to {topic}-{partition} failed: {}",
                rill_protocol::error::name(code)
            )));
        }
    }

    /// One fetch from a partition's leader.
    pub fn fetch_once(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
        max_bytes: i32,
    ) -> io::Result<Fetched> {
        let leader = self.leader(topic, partition)?;
        let topic_id = self.topic_id(topic).unwrap_or_default();
        let conn = self.node(leader)?;
        let v = conn.version(ApiKey::Fetch, 17);
        let mut ft = FetchTopic::default().with_partitions(vec![FetchPartition::default()
            .with_partition(partition)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(max_bytes)]);
        if v >= 13 {
            ft.topic_id = topic_id;
        } else {
            ft.topic = tn(topic);
        }
        let mut req = FetchRequest::default()
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes)
            .with_topics(vec![ft]);
        if v >= 7 {
            req.session_epoch = -1;
        }
        if v < 15 {
            req.replica_id = BrokerId(-1);
        }
        let ResponseKind::Fetch(r) = conn.request(ApiKey::Fetch, v, RequestKind::Fetch(req))?
        else {
            return Err(io::Error::other("unexpected response"));
        };
        if r.error_code != 0 {
            return Err(io::Error::other(format!(
                "fetch error {}",
                rill_protocol::error::name(r.error_code)
            )));
        }
        let p = &r.responses[0].partitions[0];
        let raw = p.records.clone().unwrap_or_default();
        let records = if raw.is_empty() {
            Vec::new()
        } else {
            records::decode_records(&raw).map_err(io::Error::other)?
        };
        Ok(Fetched {
            error: p.error_code,
            high_watermark: p.high_watermark,
            log_start_offset: p.log_start_offset,
            records,
            raw,
        })
    }

    /// Reads a partition from `offset` until `count` records arrived (bounded by time).
    pub fn consume(
        &mut self,
        topic: &str,
        partition: i32,
        mut offset: i64,
        count: usize,
    ) -> io::Result<Vec<Record>> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut out = Vec::new();
        while out.len() < count {
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "only {} of {count} records from {topic}-{partition} after 60s",
                    out.len()
                )));
            }
            let f = self.fetch_once(topic, partition, offset, 500, 1 << 20)?;
            if is_retriable(f.error) {
                std::thread::sleep(Duration::from_millis(100));
                self.refresh(Some(&[topic]))?;
                continue;
            }
            if f.error != 0 {
                return Err(io::Error::other(format!(
                    "fetch {topic}-{partition}@{offset}: {}",
                    rill_protocol::error::name(f.error)
                )));
            }
            for r in f.records {
                if r.offset >= offset {
                    offset = r.offset + 1;
                    out.push(r);
                }
            }
        }
        Ok(out)
    }

    /// ListOffsets for one partition: (error, offset, timestamp).
    pub fn list_offset(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> io::Result<(i16, i64, i64)> {
        let leader = self.leader(topic, partition)?;
        let conn = self.node(leader)?;
        let v = conn.version(ApiKey::ListOffsets, 9);
        let req = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(tn(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(timestamp)])]);
        let ResponseKind::ListOffsets(r) =
            conn.request(ApiKey::ListOffsets, v, RequestKind::ListOffsets(req))?
        else {
            return Err(io::Error::other("unexpected response"));
        };
        let p = &r.topics[0].partitions[0];
        Ok((p.error_code, p.offset, p.timestamp))
    }

    pub fn close(self) {}
}

/// Errors a Kafka client retries (after a metadata refresh), bounded in time by callers.
pub fn is_retriable(code: i16) -> bool {
    [
        ErrorCode::NotLeaderOrFollower,
        ErrorCode::LeaderNotAvailable,
        ErrorCode::UnknownTopicOrPartition,
        ErrorCode::UnknownLeaderEpoch,
        ErrorCode::NotCoordinator,
        ErrorCode::CoordinatorLoadInProgress,
        ErrorCode::CoordinatorNotAvailable,
    ]
    .iter()
    .any(|e| e.code() == code)
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The name of a wire error code.
pub fn err_name(code: i16) -> String {
    rill_protocol::error::name(code)
}

pub fn error_code(code: i16) -> Option<ErrorCode> {
    ErrorCode::try_from_code(code)
}
