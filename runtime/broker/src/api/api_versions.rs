//! ApiVersions (key 18): the versions of every API this broker serves.
//!
//! KIP-511: a request of a version newer than the broker knows is answered
//! with a v0 response carrying UNSUPPORTED_VERSION and ApiVersions' own range,
//! so the client can retry with a version both sides speak; v3+ requests must name
//! the client software with Kafka's pattern, else INVALID_REQUEST.
//!
//! From v3 the answer also carries the cluster's features: Rill supports
//! and finalizes `transaction.version` 2, so Kafka 4.x clients use
//! KIP-890 part 2 (no AddPartitionsToTxn or AddOffsetsToTxn, partitions and
//! groups join the transaction with Produce v12+ and TxnOffsetCommit v5+,
//! EndTxn v5 bumps the epoch every transaction), as they do on Kafka 4.x
//! clusters.

use rill_protocol::kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use rill_protocol::kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use rill_protocol::ErrorCode;

use rill_protocol::message::Api;
use rill_protocol::ApiKey;

use super::{Ctx, SUPPORTED};

/// The range advertised for an API. Like Apache Kafka 4.x, Produce is
/// advertised from v0 although v0-v2 are refused when sent (KIP-896 removed
/// them; KAFKA-18659 kept them advertised because librdkafka < 2.4 enables
/// gzip and snappy only when the Produce range overlaps v2).
/// SaslHandshake is advertised from v0 as Kafka does, but only v1 is
/// served (v0 sends raw SASL tokens outside Kafka frames, pre-1.0 clients).
pub fn advertised(key: Api, lo: i16, hi: i16) -> (i16, i16) {
    match key.kafka() {
        Some(ApiKey::Produce | ApiKey::SaslHandshake) => (0, hi),
        _ => (lo, hi),
    }
}

fn table() -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .map(|&(k, lo, hi)| {
            let (lo, hi) = advertised(k, lo, hi);
            ApiVersion::default()
                .with_api_key(k.key())
                .with_min_version(lo)
                .with_max_version(hi)
        })
        .collect()
}

/// Kafka's `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?` for client software names and versions.
fn valid_software_field(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.')
}

/// The feature levels the embedded cluster supports and runs at.
const TRANSACTION_VERSION: i16 = 2;

pub(super) fn handle(ctx: &Ctx<'_>, req: ApiVersionsRequest) -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default().with_api_keys(table());
    if ctx.version >= 3 {
        resp.supported_features = vec![SupportedFeatureKey::default()
            .with_name(super::sb("transaction.version"))
            .with_min_version(0)
            .with_max_version(TRANSACTION_VERSION)];
        // Clients take finalized features only from an epoch they have not
        // seen (-1 means none); features never change here.
        resp.finalized_features_epoch = 1;
        resp.finalized_features = vec![FinalizedFeatureKey::default()
            .with_name(super::sb("transaction.version"))
            .with_min_version_level(TRANSACTION_VERSION)
            .with_max_version_level(TRANSACTION_VERSION)];
    }
    if ctx.version >= 3
        && !(valid_software_field(&req.client_software_name)
            && valid_software_field(&req.client_software_version))
    {
        tracing::debug!(
            name = %req.client_software_name,
            version = %req.client_software_version,
            "ApiVersions with invalid client software name or version"
        );
        resp.error_code = ErrorCode::InvalidRequest.code();
    }
    resp
}

/// The v0 answer to an ApiVersions request of an unknown version: like
/// Kafka, it lists only ApiVersions' own range, enough for the client to
/// retry with a version both sides speak.
pub(crate) fn unsupported_version_response() -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(ErrorCode::UnsupportedVersion.code())
        .with_api_keys(
            table()
                .into_iter()
                .filter(|k| k.api_key == rill_protocol::ApiKey::ApiVersions as i16)
                .collect(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_names_follow_kafkas_pattern() {
        assert!(valid_software_field("apache-kafka-java"));
        assert!(valid_software_field("4.1.1"));
        assert!(valid_software_field("librdkafka"));
        assert!(!valid_software_field(""));
        assert!(!valid_software_field("-x"));
        assert!(!valid_software_field("a b"));
    }
}
