//! The self-contained suite: every data-plane scenario on Rill's embedded
//! cluster (the same scenario code runs on Apache Kafka in `interop`).

use rill_tests::backend::Embedded;
use rill_tests::scenarios;

macro_rules! on_embedded {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let cluster = Embedded::default_cluster();
            scenarios::$name(&cluster.bootstrap());
        }
    )*};
}

on_embedded!(
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

#[test]
fn every_scenario_is_run_here() {
    // Keeps this list and scenarios::ALL in step.
    assert_eq!(scenarios::ALL.len(), 11);
}
