//! Drives request frames through the whole broker path without a socket:
//! decode, handle against an in-memory broker, encode the response. Used by
//! the `cargo fuzz` target (arbitrary bytes) and by tests that send every
//! API at every supported version.
//!
//! Invariant checked: any frame either fails to decode (the server would
//! close the connection) or yields a response that encodes at the request's
//! version. A panic, or a response that cannot be encoded, is a bug.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use rill_protocol::message::{decode_request, encode_response_frame, RequestBody, ResponseBody};
use rill_protocol::RequestKind;

use crate::api::{self, Ctx};
use crate::broker::Broker;
use crate::config::BrokerConfig;

/// An in-memory single-node broker with a topic, for driving requests.
pub struct FuzzBroker {
    rt: tokio::runtime::Runtime,
    broker: Arc<Broker>,
}

/// What happened to one frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not a request this broker decodes; the connection would be closed.
    Rejected,
    /// Answered with a response of this many bytes.
    Answered(usize),
    /// No response (produce with acks=0) or still waiting after the time limit.
    NoResponse,
}

impl FuzzBroker {
    pub fn new() -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let config = BrokerConfig {
            offsets_topic_partitions: 1,
            group_initial_rebalance_delay_ms: 0,
            ..BrokerConfig::default()
        };
        let broker = Broker::open(config).expect("in-memory broker");
        broker
            .metadata_mut()
            .node_up(1, "127.0.0.1", &[9092], Some("r1".into()));
        broker.ensure_offsets_topic().expect("offsets topic");
        broker
            .create_topic("t", 2, 1, vec![], Default::default(), false)
            .expect("topic t");
        Self { rt, broker }
    }

    /// Handles one frame body (without the size prefix).
    pub fn handle_frame(&self, frame: &[u8]) -> Outcome {
        let Ok(req) = decode_request(Bytes::copy_from_slice(frame), api::supported) else {
            return Outcome::Rejected;
        };
        let mut body = req.body;
        // Long polls would only slow the fuzzer down.
        if let RequestBody::Kafka(RequestKind::Fetch(f)) = &mut body {
            f.max_wait_ms = f.max_wait_ms.min(1);
        }
        let ctx = Ctx {
            broker: &self.broker,
            node_id: 1,
            version: req.header.request_api_version,
            client_id: "fuzz",
            client_host: "127.0.0.1",
            listener: 0,
            principal: "User:ANONYMOUS",
        };
        let handled = self.rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(20), api::handle(&ctx, body)).await
        });
        let response: ResponseBody = match handled {
            Err(_) | Ok(Ok(None)) => return Outcome::NoResponse,
            Ok(Err(_)) => return Outcome::Rejected,
            Ok(Ok(Some(r))) => r,
        };
        let mut out = BytesMut::new();
        if let Err(e) = encode_response_frame(
            &mut out,
            req.api_key,
            req.header.request_api_version,
            req.header.correlation_id,
            &response,
        ) {
            panic!(
                "response to {:?} v{} does not encode: {e}",
                req.api_key, req.header.request_api_version
            );
        }
        Outcome::Answered(out.len())
    }
}

impl Default for FuzzBroker {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_protocol::kafka_protocol::messages::*;
    use rill_protocol::message::{encode_request_frame, Api};
    use rill_protocol::ApiKey;

    fn default_body(key: Api) -> RequestBody {
        let key = match key {
            Api::Kafka(k) => k,
            Api::StreamsGroupHeartbeat => {
                return rill_protocol::messages::StreamsGroupHeartbeatRequest::default().into()
            }
            Api::StreamsGroupDescribe => {
                return rill_protocol::messages::StreamsGroupDescribeRequest::default().into()
            }
        };
        RequestBody::Kafka(match key {
            ApiKey::Produce => RequestKind::Produce(ProduceRequest::default().with_acks(-1)),
            ApiKey::Fetch => RequestKind::Fetch(FetchRequest::default()),
            ApiKey::ListOffsets => RequestKind::ListOffsets(ListOffsetsRequest::default()),
            ApiKey::Metadata => RequestKind::Metadata(MetadataRequest::default()),
            ApiKey::OffsetCommit => RequestKind::OffsetCommit(OffsetCommitRequest::default()),
            ApiKey::OffsetFetch => RequestKind::OffsetFetch(OffsetFetchRequest::default()),
            ApiKey::FindCoordinator => {
                RequestKind::FindCoordinator(FindCoordinatorRequest::default())
            }
            ApiKey::ApiVersions => RequestKind::ApiVersions(ApiVersionsRequest::default()),
            ApiKey::CreateTopics => RequestKind::CreateTopics(CreateTopicsRequest::default()),
            ApiKey::DeleteTopics => RequestKind::DeleteTopics(DeleteTopicsRequest::default()),
            ApiKey::DeleteRecords => RequestKind::DeleteRecords(DeleteRecordsRequest::default()),
            ApiKey::InitProducerId => RequestKind::InitProducerId(InitProducerIdRequest::default()),
            ApiKey::OffsetForLeaderEpoch => {
                RequestKind::OffsetForLeaderEpoch(OffsetForLeaderEpochRequest::default())
            }
            ApiKey::DescribeConfigs => {
                RequestKind::DescribeConfigs(DescribeConfigsRequest::default())
            }
            ApiKey::CreatePartitions => {
                RequestKind::CreatePartitions(CreatePartitionsRequest::default())
            }
            ApiKey::DescribeCluster => {
                RequestKind::DescribeCluster(DescribeClusterRequest::default())
            }
            ApiKey::JoinGroup => RequestKind::JoinGroup(JoinGroupRequest::default()),
            ApiKey::SyncGroup => RequestKind::SyncGroup(SyncGroupRequest::default()),
            ApiKey::Heartbeat => RequestKind::Heartbeat(HeartbeatRequest::default()),
            ApiKey::LeaveGroup => RequestKind::LeaveGroup(LeaveGroupRequest::default()),
            ApiKey::DescribeGroups => RequestKind::DescribeGroups(DescribeGroupsRequest::default()),
            ApiKey::ListGroups => RequestKind::ListGroups(ListGroupsRequest::default()),
            ApiKey::IncrementalAlterConfigs => {
                RequestKind::IncrementalAlterConfigs(IncrementalAlterConfigsRequest::default())
            }
            ApiKey::SaslHandshake => RequestKind::SaslHandshake(SaslHandshakeRequest::default()),
            ApiKey::SaslAuthenticate => {
                RequestKind::SaslAuthenticate(SaslAuthenticateRequest::default())
            }
            ApiKey::AddPartitionsToTxn => {
                RequestKind::AddPartitionsToTxn(AddPartitionsToTxnRequest::default())
            }
            ApiKey::AddOffsetsToTxn => {
                RequestKind::AddOffsetsToTxn(AddOffsetsToTxnRequest::default())
            }
            ApiKey::EndTxn => RequestKind::EndTxn(EndTxnRequest::default()),
            ApiKey::TxnOffsetCommit => {
                RequestKind::TxnOffsetCommit(TxnOffsetCommitRequest::default())
            }
            ApiKey::DescribeProducers => {
                RequestKind::DescribeProducers(DescribeProducersRequest::default())
            }
            ApiKey::DescribeTransactions => {
                RequestKind::DescribeTransactions(DescribeTransactionsRequest::default())
            }
            ApiKey::ListTransactions => {
                RequestKind::ListTransactions(ListTransactionsRequest::default())
            }
            ApiKey::ListConfigResources => {
                RequestKind::ListConfigResources(ListConfigResourcesRequest::default())
            }
            ApiKey::DeleteGroups => RequestKind::DeleteGroups(DeleteGroupsRequest::default()),
            ApiKey::OffsetDelete => RequestKind::OffsetDelete(OffsetDeleteRequest::default()),
            ApiKey::ConsumerGroupHeartbeat => {
                RequestKind::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest::default())
            }
            ApiKey::ConsumerGroupDescribe => {
                RequestKind::ConsumerGroupDescribe(ConsumerGroupDescribeRequest::default())
            }
            other => panic!("{other:?} is not served"),
        })
    }

    /// Every served API at every served version: its response encodes.
    #[test]
    fn every_api_at_every_version_answers_with_an_encodable_response() {
        let fb = FuzzBroker::new();
        let mut answered = 0;
        for &(key, lo, hi) in api::SUPPORTED {
            for v in lo..=hi {
                let header = RequestHeader::default()
                    .with_request_api_key(key.key())
                    .with_request_api_version(v)
                    .with_correlation_id(1)
                    .with_client_id(Some(rill_protocol::StrBytes::from_static_str("t")));
                let mut out = BytesMut::new();
                encode_request_frame(&mut out, &header, &default_body(key))
                    .unwrap_or_else(|e| panic!("{key:?} v{v}: {e}"));
                match fb.handle_frame(&out[4..]) {
                    Outcome::Answered(_) => answered += 1,
                    other => assert!(
                        matches!(
                            key.kafka(),
                            // Long polls; SASL is the connection's, not a handler's.
                            Some(
                                ApiKey::JoinGroup
                                    | ApiKey::SyncGroup
                                    | ApiKey::SaslHandshake
                                    | ApiKey::SaslAuthenticate
                            )
                        ),
                        "{key:?} v{v}: {other:?}"
                    ),
                }
            }
        }
        assert!(answered > 100, "{answered}");
    }

    #[test]
    fn garbage_is_rejected_without_panicking() {
        let fb = FuzzBroker::new();
        let mut seed = 0x1234_5678u64;
        for len in 0..400 {
            let frame: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = fb.handle_frame(&frame);
        }
    }
}
