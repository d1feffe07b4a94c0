//! Round trips, version rules and hostile input for the generated messages.
//! (Byte-for-byte agreement with kafka-clients 4.4.0 is checked in the
//! interop suite, which has Java.)

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use super::streams_group_describe_response as dresp;
use super::streams_group_heartbeat_request as hbreq;
use super::streams_group_heartbeat_response as hbresp;
use super::*;

fn s(v: &'static str) -> StrBytes {
    StrBytes::from_static_str(v)
}

/// A heartbeat with every field set away from its default.
pub(crate) fn full_heartbeat_request() -> StreamsGroupHeartbeatRequest {
    let topic = |name: &'static str, partitions: i32| hbreq::TopicInfo {
        name: s(name),
        partitions,
        replication_factor: 3,
        topic_configs: vec![hbreq::KeyValue {
            key: s("cleanup.policy"),
            value: s("compact"),
            ..Default::default()
        }],
        ..Default::default()
    };
    let tasks = |sub: &'static str, p: &[i32]| hbreq::TaskIds {
        subtopology_id: s(sub),
        partitions: p.to_vec(),
        ..Default::default()
    };
    StreamsGroupHeartbeatRequest {
        group_id: s("app"),
        member_id: s("m-1"),
        member_epoch: 7,
        endpoint_information_epoch: 3,
        instance_id: Some(s("app-0-thread-1")),
        rack_id: Some(s("rack-a")),
        rebalance_timeout_ms: 300_000,
        topology: Some(hbreq::Topology {
            epoch: 1,
            subtopologies: vec![hbreq::Subtopology {
                subtopology_id: s("0"),
                source_topics: vec![s("in")],
                source_topic_regex: vec![s("in-.*")],
                state_changelog_topics: vec![topic("app-store-changelog", 0)],
                repartition_sink_topics: vec![s("app-rep")],
                repartition_source_topics: vec![topic("app-rep", 4)],
                copartition_groups: vec![hbreq::CopartitionGroup {
                    source_topics: vec![0],
                    source_topic_regex: vec![0],
                    repartition_source_topics: vec![0],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
        active_tasks: Some(vec![tasks("0", &[0, 2])]),
        standby_tasks: Some(vec![tasks("0", &[1])]),
        warmup_tasks: Some(vec![]),
        process_id: Some(s("5f0c2a3e-0000-4000-8000-000000000001")),
        user_endpoint: Some(hbreq::Endpoint {
            host: s("127.0.0.1"),
            port: 65_000,
            ..Default::default()
        }),
        client_tags: Some(vec![hbreq::KeyValue {
            key: s("zone"),
            value: s("a"),
            ..Default::default()
        }]),
        task_offsets: Some(vec![hbreq::TaskOffset {
            subtopology_id: s("0"),
            partition: 2,
            offset: 1 << 40,
            ..Default::default()
        }]),
        task_end_offsets: Some(vec![]),
        shutdown_application: true,
        ..Default::default()
    }
}

fn encode<M: Encodable>(m: &M, version: i16) -> Bytes {
    let mut b = BytesMut::new();
    m.encode(&mut b, version).unwrap();
    assert_eq!(m.compute_size(version).unwrap(), b.len());
    b.freeze()
}

#[test]
fn full_messages_round_trip_at_every_version() {
    for v in 0..=1 {
        let m = full_heartbeat_request();
        let bytes = encode(&m, v);
        let back = StreamsGroupHeartbeatRequest::decode(&mut bytes.clone(), v).unwrap();
        assert_eq!(back, m, "v{v}");

        let mut r = StreamsGroupHeartbeatResponse {
            error_message: Some(s("none")),
            member_id: s("m-1"),
            member_epoch: 8,
            heartbeat_interval_ms: 5_000,
            task_offset_interval_ms: 60_000,
            status: Some(vec![hbresp::Status {
                status_code: 1,
                status_detail: s("missing source topic in"),
                ..Default::default()
            }]),
            active_tasks: Some(vec![hbresp::TaskIds {
                subtopology_id: s("0"),
                partitions: vec![0, 1],
                ..Default::default()
            }]),
            endpoint_information_epoch: 2,
            partitions_by_user_endpoint: Some(vec![hbresp::EndpointToPartitions {
                active_partitions: vec![hbresp::TopicPartition {
                    topic: s("in"),
                    partitions: vec![0],
                    ..Default::default()
                }],
                ..Default::default()
            }]),
            ..Default::default()
        };
        if v == 0 {
            r.acceptable_recovery_lag_legacy = 10_000;
        } else {
            r.acceptable_recovery_lag = 10_000;
            r.topology_description_required = true;
        }
        let bytes = encode(&r, v);
        assert_eq!(
            StreamsGroupHeartbeatResponse::decode(&mut bytes.clone(), v).unwrap(),
            r
        );

        let d = StreamsGroupDescribeResponse {
            groups: vec![dresp::DescribedGroup {
                group_id: s("app"),
                group_state: s("Stable"),
                group_epoch: 4,
                assignment_epoch: 4,
                topology: Some(dresp::Topology {
                    epoch: 1,
                    subtopologies: Some(vec![]),
                    ..Default::default()
                }),
                members: vec![dresp::Member {
                    member_id: s("m-1"),
                    instance_id: Some(s("app-0-thread-1")),
                    user_endpoint: Some(dresp::Endpoint::default()),
                    ..Default::default()
                }],
                topology_description: (v >= 1).then(dresp::TopologyDescription::default),
                assignor_name: (v >= 1).then(|| s("sticky")),
                ..Default::default()
            }],
            ..Default::default()
        };
        let bytes = encode(&d, v);
        assert_eq!(
            StreamsGroupDescribeResponse::decode(&mut bytes.clone(), v).unwrap(),
            d
        );
    }
}

#[test]
fn known_bytes() {
    // []string GroupIds (empty: varint 1), bool, [v1: bool], no tagged fields.
    let d = StreamsGroupDescribeRequest::default();
    assert_eq!(&encode(&d, 0)[..], &[1, 0, 0]);
    assert_eq!(&encode(&d, 1)[..], &[1, 0, 0, 0]);
    let d = StreamsGroupDescribeRequest {
        group_ids: vec![s("ab")],
        include_authorized_operations: true,
        include_topology_description: true,
        ..Default::default()
    };
    assert_eq!(&encode(&d, 1)[..], &[2, 3, b'a', b'b', 1, 1, 0]);
    // A null nullable struct is int8 -1; the heartbeat's defaults are
    // Kafka's (RebalanceTimeoutMs -1, nullable fields null).
    let hb = encode(&StreamsGroupHeartbeatRequest::default(), 0);
    assert_eq!(
        &hb[..],
        &[
            1, 1, // group id, member id: ""
            0, 0, 0, 0, 0, 0, 0, 0, // member epoch, endpoint epoch
            0, 0, // instance id, rack id: null
            0xff, 0xff, 0xff, 0xff, // rebalance timeout -1
            0xff, // topology: null struct
            0, 0, 0, 0,    // active/standby/warmup tasks, process id: null
            0xff, // user endpoint: null struct
            0, 0, 0, // client tags, task offsets, task end offsets: null
            0, // shutdown application
            0, // no tagged fields
        ]
    );
    assert_eq!(StreamsGroupHeartbeatRequest::header_version(1), 2);
    assert_eq!(StreamsGroupHeartbeatResponse::header_version(1), 1);
}

#[test]
fn fields_a_version_cannot_carry() {
    let r = StreamsGroupHeartbeatResponse {
        topology_description_required: true,
        ..Default::default()
    };
    let err = r.encode(&mut BytesMut::new(), 0).unwrap_err().to_string();
    assert!(err.contains("TopologyDescriptionRequired"), "{err}");
    // Ignorable (as in Kafka): dropped at v0.
    let r = StreamsGroupHeartbeatResponse {
        acceptable_recovery_lag: 5,
        ..Default::default()
    };
    assert!(r.encode(&mut BytesMut::new(), 0).is_ok());
    let r = StreamsGroupHeartbeatResponse {
        acceptable_recovery_lag_legacy: 5,
        ..Default::default()
    };
    assert!(r.encode(&mut BytesMut::new(), 1).is_err());
    let err = StreamsGroupDescribeRequest::default()
        .encode(&mut BytesMut::new(), 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("versions 0-1, not 2"), "{err}");
}

#[test]
fn truncated_and_hostile_input_is_an_error() {
    let full = encode(&full_heartbeat_request(), 1);
    for cut in 0..full.len() {
        assert!(
            StreamsGroupHeartbeatRequest::decode(&mut full.slice(..cut), 1).is_err(),
            "a {cut}-byte prefix decoded"
        );
    }
    // An array claiming 2^31 elements in 3 bytes.
    let hostile = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x07, 0, 0]);
    let err = StreamsGroupDescribeRequest::decode(&mut hostile.clone(), 0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("GroupIds"), "{err}");
    // Unknown tagged fields survive a round trip.
    let mut d = StreamsGroupDescribeRequest::default();
    d.unknown_tagged_fields
        .insert(5, Bytes::from_static(b"xyz"));
    let bytes = encode(&d, 0);
    assert_eq!(&bytes[..], &[1, 0, 1, 5, 3, b'x', b'y', b'z']);
    assert_eq!(
        StreamsGroupDescribeRequest::decode(&mut bytes.clone(), 0).unwrap(),
        d
    );
}
