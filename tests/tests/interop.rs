//! The interop suite (feature `interop`): the data-plane scenarios on Apache
//! Kafka 4.x, and third-party clients (kcat/librdkafka, confluent-kafka, the
//! Java clients, Kafka's perf tools) against Rill's embedded cluster. It
//! installs what it needs (apt-get, pip, mvn) on first use.

use rill_tests::backend::shared_kafka;
use rill_tests::scenarios;

macro_rules! on_apache_kafka {
    ($($name:ident),* $(,)?) => {
        mod apache_kafka {
            use super::*;
            $(
                #[test]
                fn $name() {
                    scenarios::$name(shared_kafka());
                }
            )*
        }
    };
}

on_apache_kafka!(
    produce_fetch_every_codec,
    list_offsets_by_timestamp,
    idempotent_producer_deduplicates,
    produce_rejections,
    fetch_semantics,
    topic_administration,
    delete_records,
    simple_offset_commits,
    cluster_and_topic_ids,
    produce_by_topic_id,
    malformed_requests,
);
