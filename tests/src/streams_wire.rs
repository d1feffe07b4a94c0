//! Byte-for-byte agreement of rill-protocol's generated KIP-1071 codecs
//! (StreamsGroupHeartbeat, StreamsGroupDescribe) with kafka-clients 4.4.0:
//! `tests/java/StreamsWire.java` encodes each message at each version, with
//! every field set and with Kafka's defaults; Rill decodes and re-encodes
//! them to the same bytes, encodes its own defaults to Kafka's bytes, and
//! kafka-clients reads and re-writes what Rill encodes to the same bytes.

use bytes::{Bytes, BytesMut};
use rill_protocol::kafka_protocol::protocol::{Decodable, Encodable};
use rill_protocol::messages::{
    streams_group_heartbeat_request as hbreq, StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse, StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse,
};
use rill_protocol::StrBytes;

use crate::tools::java_program;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex from StreamsWire"))
        .collect()
}

fn encode<M: Encodable>(m: &M, v: i16) -> String {
    let mut out = BytesMut::new();
    m.encode(&mut out, v)
        .unwrap_or_else(|e| panic!("encode v{v}: {e}"));
    hex(&out)
}

fn decode<M: Decodable>(hex_bytes: &str, v: i16, what: &str) -> M {
    let mut b = Bytes::from(unhex(hex_bytes));
    let m = M::decode(&mut b, v)
        .unwrap_or_else(|e| panic!("{what} v{v}: Rill cannot decode kafka-clients' bytes: {e:#}"));
    assert!(
        b.is_empty(),
        "{what} v{v}: {} bytes left after decoding",
        b.len()
    );
    m
}

/// Decodes Kafka's bytes, checks what Rill re-encodes, returns Rill's
/// encoding of its own default at that version.
fn check<M: Decodable + Encodable + Default>(
    name: &str,
    v: i16,
    java: &str,
    check: impl Fn(&M),
) -> String {
    let m: M = decode(java, v, name);
    check(&m);
    assert_eq!(
        encode(&m, v),
        java,
        "{name} v{v}: Rill re-encodes kafka-clients' message differently"
    );
    encode(&M::default(), v)
}

pub fn streams_group_messages_match_kafka_clients() {
    let out = java_program("StreamsWire.java", &["encode"]).expect("java StreamsWire encode");
    let s = |x: &str| StrBytes::from_string(x.to_string());
    let mut lines = 0;
    let mut rill_encoded = Vec::new();
    for line in out.lines() {
        let mut parts = line.split_whitespace();
        let (Some(name), Some(v), Some(java)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("unexpected StreamsWire line {line:?}");
        };
        let v: i16 = v.parse().unwrap();
        lines += 1;
        let (base, default) = match name.split_once('/') {
            Some((b, "default")) => (b, true),
            _ => (name, false),
        };
        let rill_default = match base {
            "StreamsGroupHeartbeatRequest" => {
                check(base, v, java, |m: &StreamsGroupHeartbeatRequest| {
                    if !default {
                        assert_eq!(m.instance_id, Some(s("app-0-thread-1")));
                        let t = m.topology.as_ref().expect("topology");
                        assert_eq!(
                            t.subtopologies[0].copartition_groups[0].source_topics,
                            vec![0]
                        );
                        assert_eq!(m.user_endpoint.as_ref().map(|e| e.port), Some(65000));
                        assert_eq!(m.task_offsets.as_ref().unwrap()[0].offset, 1 << 40);
                        assert!(m.shutdown_application);
                    }
                })
            }
            "StreamsGroupHeartbeatResponse" => {
                check(base, v, java, |m: &StreamsGroupHeartbeatResponse| {
                    if !default {
                        if v == 0 {
                            assert_eq!(m.acceptable_recovery_lag_legacy, 10_000);
                        } else {
                            assert_eq!(m.acceptable_recovery_lag, 10_000);
                            assert!(m.topology_description_required);
                        }
                        assert_eq!(
                            m.partitions_by_user_endpoint.as_ref().unwrap()[0]
                                .user_endpoint
                                .port,
                            9
                        );
                    }
                })
            }
            "StreamsGroupDescribeRequest" => {
                check(base, v, java, |m: &StreamsGroupDescribeRequest| {
                    if !default {
                        assert_eq!(m.group_ids, vec![s("app"), s("other")]);
                        assert_eq!(m.include_topology_description, v >= 1);
                    }
                })
            }
            "StreamsGroupDescribeResponse" => {
                check(base, v, java, |m: &StreamsGroupDescribeResponse| {
                    if !default {
                        assert_eq!(m.groups[1].error_code, 69);
                        assert_eq!(
                            m.groups[0].members[0].instance_id,
                            Some(s("app-0-thread-1"))
                        );
                        if v >= 1 {
                            assert_eq!(m.groups[0].assignor_name, Some(s("sticky")));
                            let d = m.groups[0].topology_description.as_ref().unwrap();
                            assert_eq!(d.subtopologies[0].nodes[0].sink_topic, None);
                        }
                    }
                })
            }
            other => panic!("StreamsWire printed unknown message {other}"),
        };
        if default {
            assert_eq!(
                rill_default, java,
                "{base} v{v}: Rill's defaults encode differently from Kafka's"
            );
        }
        rill_encoded.push((base.to_string(), v, rill_default));
    }
    assert_eq!(lines, 16, "StreamsWire printed {lines} messages:\n{out}");

    // The other way: what Rill builds, kafka-clients reads and writes back.
    let hb = StreamsGroupHeartbeatRequest {
        group_id: s("app"),
        member_id: s("m-2"),
        member_epoch: -2,
        instance_id: Some(s("app-1-thread-2")),
        topology: Some(hbreq::Topology {
            epoch: 2,
            subtopologies: vec![hbreq::Subtopology {
                subtopology_id: s("1"),
                source_topics: vec![s("app-KSTREAM-REPARTITION-0000000003-repartition")],
                ..Default::default()
            }],
            ..Default::default()
        }),
        active_tasks: Some(vec![]),
        ..Default::default()
    };
    for v in 0..=1 {
        rill_encoded.push(("StreamsGroupHeartbeatRequest".into(), v, encode(&hb, v)));
    }
    let mut args = vec!["reencode".to_string()];
    for (name, v, h) in &rill_encoded {
        args.extend([name.clone(), v.to_string(), h.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let back = java_program("StreamsWire.java", &args).expect("java StreamsWire reencode");
    let back: Vec<&str> = back.lines().collect();
    assert_eq!(back.len(), rill_encoded.len());
    for ((name, v, h), java) in rill_encoded.iter().zip(back) {
        assert_eq!(
            java, h,
            "{name} v{v}: kafka-clients re-encodes Rill's message differently"
        );
    }
    eprintln!(
        "streams-group wire: {} messages from kafka-clients and {} from Rill agree byte for byte",
        lines,
        rill_encoded.len()
    );
}
