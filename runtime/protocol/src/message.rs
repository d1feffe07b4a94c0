//! Requests and responses as whole frames: header + body, by API version.
//!
//! Invariants:
//! - The request header version follows the API and version (`ApiKey::request_header_version`),
//!   so flexible versions get tagged fields and old ones do not.
//! - ApiVersions responses always use response header v0, whatever the request
//!   version (KIP-511: a client that does not yet know the broker's versions must
//!   be able to read the answer).
//! - Every API has one [`Api`] value, whether its messages come from
//!   `kafka-protocol` or from this crate's [`crate::messages`] (KIP-1071's
//!   StreamsGroupHeartbeat and StreamsGroupDescribe, which `kafka-protocol`
//!   0.18 lacks); bodies are [`RequestBody`] / [`ResponseBody`], so framing,
//!   version ranges and header versions are decided in one place for both.
//! - A request that cannot be decoded is reported with as much of its identity as
//!   could be read (API key, version, correlation id), so the broker can answer
//!   with Kafka's error response where Kafka sends one and log what was wrong.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message};

use crate::frame;
use crate::messages::{
    StreamsGroupDescribeRequest, StreamsGroupDescribeResponse, StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse, STREAMS_GROUP_DESCRIBE, STREAMS_GROUP_HEARTBEAT,
};

/// An API: one `kafka-protocol` has, or one whose messages this crate
/// generates ([`crate::messages`]). Prints as Kafka names the API.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// An API whose messages `kafka-protocol` has.
    Kafka(ApiKey),
    /// StreamsGroupHeartbeat (key 88, KIP-1071).
    StreamsGroupHeartbeat,
    /// StreamsGroupDescribe (key 89, KIP-1071).
    StreamsGroupDescribe,
}

impl Api {
    /// The API for a wire key, if either crate knows it.
    pub fn from_key(key: i16) -> Option<Self> {
        match key {
            STREAMS_GROUP_HEARTBEAT => Some(Self::StreamsGroupHeartbeat),
            STREAMS_GROUP_DESCRIBE => Some(Self::StreamsGroupDescribe),
            k => ApiKey::try_from(k).ok().map(Self::Kafka),
        }
    }

    /// The wire key.
    pub fn key(self) -> i16 {
        match self {
            Self::Kafka(k) => k as i16,
            Self::StreamsGroupHeartbeat => STREAMS_GROUP_HEARTBEAT,
            Self::StreamsGroupDescribe => STREAMS_GROUP_DESCRIBE,
        }
    }

    /// The `kafka-protocol` key, for an API that crate has.
    pub fn kafka(self) -> Option<ApiKey> {
        match self {
            Self::Kafka(k) => Some(k),
            _ => None,
        }
    }

    /// The versions the message code can encode and decode.
    pub fn valid_versions(self) -> (i16, i16) {
        let r = match self {
            Self::Kafka(k) => k.valid_versions(),
            Self::StreamsGroupHeartbeat => StreamsGroupHeartbeatRequest::VERSIONS,
            Self::StreamsGroupDescribe => StreamsGroupDescribeRequest::VERSIONS,
        };
        (r.min, r.max)
    }

    /// The request header version for an API version.
    pub fn request_header_version(self, version: i16) -> i16 {
        match self {
            Self::Kafka(k) => k.request_header_version(version),
            Self::StreamsGroupHeartbeat => StreamsGroupHeartbeatRequest::header_version(version),
            Self::StreamsGroupDescribe => StreamsGroupDescribeRequest::header_version(version),
        }
    }

    /// The response header version: ApiVersions always uses v0 (KIP-511).
    pub fn response_header_version(self, version: i16) -> i16 {
        match self {
            Self::Kafka(ApiKey::ApiVersions) => 0,
            Self::Kafka(k) => k.response_header_version(version),
            Self::StreamsGroupHeartbeat => StreamsGroupHeartbeatResponse::header_version(version),
            Self::StreamsGroupDescribe => StreamsGroupDescribeResponse::header_version(version),
        }
    }
}

impl From<ApiKey> for Api {
    fn from(k: ApiKey) -> Self {
        Self::Kafka(k)
    }
}

impl PartialEq<ApiKey> for Api {
    fn eq(&self, other: &ApiKey) -> bool {
        *self == Self::Kafka(*other)
    }
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Kafka(k) => write!(f, "{k:?}"),
            Self::StreamsGroupHeartbeat => f.write_str("StreamsGroupHeartbeat"),
            Self::StreamsGroupDescribe => f.write_str("StreamsGroupDescribe"),
        }
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// A request body of any [`Api`].
#[derive(Debug, Clone, PartialEq)]
pub enum RequestBody {
    /// A `kafka-protocol` request.
    Kafka(RequestKind),
    /// A StreamsGroupHeartbeat request.
    StreamsGroupHeartbeat(StreamsGroupHeartbeatRequest),
    /// A StreamsGroupDescribe request.
    StreamsGroupDescribe(StreamsGroupDescribeRequest),
}

/// A response body of any [`Api`].
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseBody {
    /// A `kafka-protocol` response.
    Kafka(ResponseKind),
    /// A StreamsGroupHeartbeat response.
    StreamsGroupHeartbeat(StreamsGroupHeartbeatResponse),
    /// A StreamsGroupDescribe response.
    StreamsGroupDescribe(StreamsGroupDescribeResponse),
}

impl From<RequestKind> for RequestBody {
    fn from(k: RequestKind) -> Self {
        Self::Kafka(k)
    }
}

impl From<ResponseKind> for ResponseBody {
    fn from(k: ResponseKind) -> Self {
        Self::Kafka(k)
    }
}

impl From<StreamsGroupHeartbeatRequest> for RequestBody {
    fn from(r: StreamsGroupHeartbeatRequest) -> Self {
        Self::StreamsGroupHeartbeat(r)
    }
}

impl From<StreamsGroupDescribeRequest> for RequestBody {
    fn from(r: StreamsGroupDescribeRequest) -> Self {
        Self::StreamsGroupDescribe(r)
    }
}

impl From<StreamsGroupHeartbeatResponse> for ResponseBody {
    fn from(r: StreamsGroupHeartbeatResponse) -> Self {
        Self::StreamsGroupHeartbeat(r)
    }
}

impl From<StreamsGroupDescribeResponse> for ResponseBody {
    fn from(r: StreamsGroupDescribeResponse) -> Self {
        Self::StreamsGroupDescribe(r)
    }
}

impl RequestBody {
    /// Encodes the body at `version`.
    pub fn encode(&self, out: &mut BytesMut, version: i16) -> anyhow::Result<()> {
        match self {
            Self::Kafka(k) => k.encode(out, version),
            Self::StreamsGroupHeartbeat(r) => r.encode(out, version),
            Self::StreamsGroupDescribe(r) => r.encode(out, version),
        }
    }

    /// Decodes a body of `api` at `version`.
    pub fn decode(api: Api, buf: &mut Bytes, version: i16) -> anyhow::Result<Self> {
        Ok(match api {
            Api::Kafka(k) => Self::Kafka(RequestKind::decode(k, buf, version)?),
            Api::StreamsGroupHeartbeat => {
                Self::StreamsGroupHeartbeat(StreamsGroupHeartbeatRequest::decode(buf, version)?)
            }
            Api::StreamsGroupDescribe => {
                Self::StreamsGroupDescribe(StreamsGroupDescribeRequest::decode(buf, version)?)
            }
        })
    }
}

impl ResponseBody {
    /// Encodes the body at `version`.
    pub fn encode(&self, out: &mut BytesMut, version: i16) -> anyhow::Result<()> {
        match self {
            Self::Kafka(k) => k.encode(out, version),
            Self::StreamsGroupHeartbeat(r) => r.encode(out, version),
            Self::StreamsGroupDescribe(r) => r.encode(out, version),
        }
    }

    /// Decodes a body of `api` at `version`.
    pub fn decode(api: Api, buf: &mut Bytes, version: i16) -> anyhow::Result<Self> {
        Ok(match api {
            Api::Kafka(k) => Self::Kafka(ResponseKind::decode(k, buf, version)?),
            Api::StreamsGroupHeartbeat => {
                Self::StreamsGroupHeartbeat(StreamsGroupHeartbeatResponse::decode(buf, version)?)
            }
            Api::StreamsGroupDescribe => {
                Self::StreamsGroupDescribe(StreamsGroupDescribeResponse::decode(buf, version)?)
            }
        })
    }
}

/// Why a request frame could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum RequestDecodeError {
    /// The frame is shorter than the 8 bytes holding API key, version and
    /// correlation id; carries its length in bytes.
    #[error("request frame of {0} bytes is too short for a request header")]
    TooShort(usize),
    /// The API key is unknown to `kafka-protocol`, or not one this broker
    /// serves (`supported` gave `None`).
    #[error("unknown API key {api_key} (correlation id {correlation_id})")]
    UnknownApiKey {
        /// The raw API key read from the header.
        api_key: i16,
        /// Correlation id of the request, for the error response.
        correlation_id: i32,
    },
    /// The version is outside the broker's advertised range, or beyond what
    /// `kafka-protocol` can decode; nothing past the correlation id is decoded.
    #[error("{api_key:?} v{version} is not supported (supported: v{min}-v{max}; correlation id {correlation_id})")]
    UnsupportedVersion {
        /// The API the request is for.
        api_key: Api,
        /// The API version the request claimed.
        version: i16,
        /// Lowest version the broker advertises for this API.
        min: i16,
        /// Highest version the broker advertises for this API.
        max: i16,
        /// Correlation id of the request, for the error response.
        correlation_id: i32,
    },
    /// The request header did not decode at the header version that the API and
    /// version call for.
    #[error("malformed {api_key:?} v{version} request header: {reason}")]
    MalformedHeader {
        /// The API the request is for.
        api_key: Api,
        /// The API version the request claimed.
        version: i16,
        /// The header decoder's error message.
        reason: String,
    },
    /// The header decoded but the body did not; the header is kept so the
    /// broker can still answer with its correlation id.
    #[error("malformed {:?} v{} request body (correlation id {}): {reason}", header.request_api_key, header.request_api_version, header.correlation_id)]
    MalformedBody {
        /// The decoded request header (version, correlation id, client id).
        header: Box<RequestHeader>,
        /// The API the request is for.
        api_key: Api,
        /// The body decoder's error message.
        reason: String,
    },
}

impl RequestDecodeError {
    /// The API key and version the request claimed, when they could be read.
    pub fn api(&self) -> Option<(Api, i16)> {
        match self {
            Self::UnsupportedVersion {
                api_key, version, ..
            } => Some((*api_key, *version)),
            Self::MalformedHeader {
                api_key, version, ..
            } => Some((*api_key, *version)),
            Self::MalformedBody {
                api_key, header, ..
            } => Some((*api_key, header.request_api_version)),
            _ => None,
        }
    }
}

/// A decoded request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The API the request is for, from `header.request_api_key`.
    pub api_key: Api,
    /// The request header, decoded at the header version for the API and version.
    pub header: RequestHeader,
    /// The request body, decoded at `header.request_api_version`.
    pub body: RequestBody,
}

impl Request {
    /// The API version of the request (`header.request_api_version`).
    pub fn version(&self) -> i16 {
        self.header.request_api_version
    }
}

/// Reads API key, version and correlation id from the first 8 bytes of a request
/// frame, which are laid out the same in every header version.
pub fn peek_request_identity(frame: &[u8]) -> Option<(i16, i16, i32)> {
    if frame.len() < 8 {
        return None;
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    Some((key, version, correlation))
}

/// Decodes one request frame (without its size prefix). `supported` gives the
/// version range accepted for an API key (the broker's advertised range); a
/// version outside it is reported as [`RequestDecodeError::UnsupportedVersion`]
/// without decoding the body.
pub fn decode_request(
    frame: Bytes,
    supported: impl Fn(Api) -> Option<(i16, i16)>,
) -> Result<Request, RequestDecodeError> {
    let Some((key, version, correlation_id)) = peek_request_identity(&frame) else {
        return Err(RequestDecodeError::TooShort(frame.len()));
    };
    let api_key = Api::from_key(key).ok_or(RequestDecodeError::UnknownApiKey {
        api_key: key,
        correlation_id,
    })?;
    let Some((min, max)) = supported(api_key) else {
        return Err(RequestDecodeError::UnknownApiKey {
            api_key: key,
            correlation_id,
        });
    };
    // The crate can only decode what its generated code knows.
    let (crate_min, crate_max) = api_key.valid_versions();
    if version < min || version > max || version < crate_min || version > crate_max {
        return Err(RequestDecodeError::UnsupportedVersion {
            api_key,
            version,
            min,
            max,
            correlation_id,
        });
    }
    let mut buf = frame;
    let header_version = api_key.request_header_version(version);
    let header = RequestHeader::decode(&mut buf, header_version).map_err(|e| {
        RequestDecodeError::MalformedHeader {
            api_key,
            version,
            reason: e.to_string(),
        }
    })?;
    let body = RequestBody::decode(api_key, &mut buf, version).map_err(|e| {
        RequestDecodeError::MalformedBody {
            header: Box::new(header.clone()),
            api_key,
            reason: e.to_string(),
        }
    })?;
    // Trailing bytes are ignored, as Kafka does: librdkafka's v9+ Metadata
    // request for all topics leaves a 4-byte array-count placeholder where a
    // 1-byte varint belongs (rdkafka_request.c), and Kafka accepts it.
    Ok(Request {
        api_key,
        header,
        body,
    })
}

/// Why a message could not be encoded (a field set that the version cannot carry).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode {api_key:?} v{version} {what}: {reason}")]
pub struct EncodeError {
    /// The API being encoded; `ApiVersions` when a request header named an
    /// unknown API key.
    pub api_key: Api,
    /// The API version being encoded.
    pub version: i16,
    /// Which part failed to encode: `"header"` or `"body"`.
    pub what: &'static str,
    /// The encoder's error message.
    pub reason: String,
}

/// The response header version for an API: ApiVersions always uses v0 (KIP-511).
pub fn response_header_version(api_key: impl Into<Api>, version: i16) -> i16 {
    api_key.into().response_header_version(version)
}

/// Appends a whole response frame (size prefix, header, body) to `out`.
/// On error `out` is left as it was.
pub fn encode_response_frame(
    out: &mut BytesMut,
    api_key: impl Into<Api>,
    version: i16,
    correlation_id: i32,
    body: &ResponseBody,
) -> Result<(), EncodeError> {
    let api_key = api_key.into();
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    encode_frame(
        out,
        api_key,
        version,
        |out| header.encode(out, api_key.response_header_version(version)),
        |out| body.encode(out, version),
    )
}

/// Writes size prefix, header and body; on error `out` is left as it was.
fn encode_frame(
    out: &mut BytesMut,
    api_key: Api,
    version: i16,
    header: impl FnOnce(&mut BytesMut) -> anyhow::Result<()>,
    body: impl FnOnce(&mut BytesMut) -> anyhow::Result<()>,
) -> Result<(), EncodeError> {
    let start = out.len();
    let at = frame::begin_frame(out);
    let result = header(out)
        .map_err(|e| ("header", e))
        .and_then(|_| body(out).map_err(|e| ("body", e)));
    match result {
        Ok(()) => {
            frame::finish_frame(out, at);
            Ok(())
        }
        Err((what, e)) => {
            out.truncate(start);
            Err(EncodeError {
                api_key,
                version,
                what,
                reason: e.to_string(),
            })
        }
    }
}

/// Appends a whole request frame (size prefix, header, body) to `out`.
pub fn encode_request_frame(
    out: &mut BytesMut,
    header: &RequestHeader,
    body: &RequestBody,
) -> Result<(), EncodeError> {
    let api_key = Api::from_key(header.request_api_key).ok_or_else(|| EncodeError {
        api_key: Api::Kafka(ApiKey::ApiVersions),
        version: header.request_api_version,
        what: "header",
        reason: format!("unknown API key {}", header.request_api_key),
    })?;
    let version = header.request_api_version;
    encode_frame(
        out,
        api_key,
        version,
        |out| header.encode(out, api_key.request_header_version(version)),
        |out| body.encode(out, version),
    )
}

/// Why a response frame could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("malformed {api_key:?} v{version} response: {reason}")]
pub struct ResponseDecodeError {
    /// The API of the request the response answers.
    pub api_key: Api,
    /// The API version of that request, which the response is decoded at.
    pub version: i16,
    /// The decoder's error message, prefixed with `header:` when the response
    /// header failed.
    pub reason: String,
}

/// Reads the correlation id at the front of a response frame.
pub fn peek_correlation_id(frame: &[u8]) -> Option<i32> {
    (frame.len() >= 4).then(|| i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]))
}

/// Decodes a response frame (without its size prefix) to the request it answers.
pub fn decode_response(
    frame: Bytes,
    api_key: impl Into<Api>,
    version: i16,
) -> Result<(ResponseHeader, ResponseBody), ResponseDecodeError> {
    let api_key = api_key.into();
    let err = |reason: String| ResponseDecodeError {
        api_key,
        version,
        reason,
    };
    let mut buf = frame;
    let header = ResponseHeader::decode(&mut buf, api_key.response_header_version(version))
        .map_err(|e| err(format!("header: {e}")))?;
    let body = ResponseBody::decode(api_key, &mut buf, version).map_err(|e| err(e.to_string()))?;
    Ok((header, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest, MetadataResponse};
    use kafka_protocol::protocol::StrBytes;

    fn all_supported(k: Api) -> Option<(i16, i16)> {
        Some(k.valid_versions())
    }

    fn request_frame(key: ApiKey, version: i16, body: RequestKind) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("t")));
        let mut out = BytesMut::new();
        encode_request_frame(&mut out, &header, &body.into()).unwrap();
        out.freeze().slice(4..)
    }

    #[test]
    fn round_trips_flexible_and_legacy_requests() {
        for version in [0, 4, 9, 12, 13] {
            let frame = request_frame(
                ApiKey::Metadata,
                version,
                RequestKind::Metadata(MetadataRequest::default()),
            );
            let req = decode_request(frame, all_supported).unwrap();
            assert_eq!(req.api_key, ApiKey::Metadata);
            assert_eq!(req.header.correlation_id, 42);
            assert_eq!(req.version(), version);
        }
    }

    #[test]
    fn reports_unsupported_versions_with_identity() {
        let frame = request_frame(
            ApiKey::ApiVersions,
            3,
            RequestKind::ApiVersions(ApiVersionsRequest::default()),
        );
        let err = decode_request(frame, |_| Some((0, 2))).unwrap_err();
        match err {
            RequestDecodeError::UnsupportedVersion {
                api_key,
                version,
                correlation_id,
                ..
            } => {
                assert_eq!(api_key, Api::Kafka(ApiKey::ApiVersions));
                assert_eq!(version, 3);
                assert_eq!(correlation_id, 42);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn rejects_unknown_keys_short_and_truncated_frames() {
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 1]), all_supported),
            Err(RequestDecodeError::TooShort(2))
        ));
        assert!(matches!(
            decode_request(
                Bytes::from_static(&[0x7f, 0, 0, 0, 0, 0, 0, 1]),
                all_supported
            ),
            Err(RequestDecodeError::UnknownApiKey {
                api_key: 0x7f00,
                ..
            })
        ));
        let full = request_frame(
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(MetadataRequest::default()),
        );
        for cut in 8..full.len() {
            assert!(decode_request(full.slice(..cut), all_supported).is_err());
        }
    }

    #[test]
    fn trailing_bytes_are_ignored_like_kafka() {
        // librdkafka's all-topics Metadata v12 request carries 3 extra bytes.
        let mut f = request_frame(
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(MetadataRequest::default()),
        )
        .to_vec();
        f.extend_from_slice(&[1, 0, 0]);
        assert!(decode_request(Bytes::from(f), all_supported).is_ok());
    }

    #[test]
    fn api_versions_response_uses_header_v0() {
        let mut out = BytesMut::new();
        let body = ResponseKind::Metadata(MetadataResponse::default()).into();
        encode_response_frame(&mut out, ApiKey::Metadata, 12, 7, &body).unwrap();
        let frame = out.freeze().slice(4..);
        assert_eq!(peek_correlation_id(&frame), Some(7));
        let (h, _) = decode_response(frame, ApiKey::Metadata, 12).unwrap();
        assert_eq!(h.correlation_id, 7);
        assert_eq!(response_header_version(ApiKey::ApiVersions, 3), 0);
    }

    #[test]
    fn streams_group_apis_frame_like_kafka_protocol_ones() {
        use crate::messages::{StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse};
        for version in 0..=1 {
            let header = RequestHeader::default()
                .with_request_api_key(88)
                .with_request_api_version(version)
                .with_correlation_id(9);
            let body = StreamsGroupHeartbeatRequest {
                group_id: StrBytes::from_static_str("app"),
                member_epoch: 3,
                ..Default::default()
            };
            let mut out = BytesMut::new();
            encode_request_frame(&mut out, &header, &body.clone().into()).unwrap();
            let req = decode_request(out.freeze().slice(4..), all_supported).unwrap();
            assert_eq!(req.api_key, Api::StreamsGroupHeartbeat);
            assert_eq!(req.header.correlation_id, 9);
            assert_eq!(req.body, RequestBody::StreamsGroupHeartbeat(body));

            let resp: ResponseBody = StreamsGroupHeartbeatResponse {
                member_epoch: 4,
                ..Default::default()
            }
            .into();
            let mut out = BytesMut::new();
            encode_response_frame(&mut out, Api::StreamsGroupHeartbeat, version, 9, &resp).unwrap();
            let (h, back) =
                decode_response(out.freeze().slice(4..), Api::StreamsGroupHeartbeat, version)
                    .unwrap();
            assert_eq!(h.correlation_id, 9);
            assert_eq!(back, resp);
        }
        assert_eq!(Api::from_key(89), Some(Api::StreamsGroupDescribe));
        assert_eq!(Api::from_key(3), Some(Api::Kafka(ApiKey::Metadata)));
        assert_eq!(
            format!("{:?}", Api::StreamsGroupDescribe),
            "StreamsGroupDescribe"
        );
        // Flexible from v0: header v2 requests, v1 responses.
        assert_eq!(Api::StreamsGroupHeartbeat.request_header_version(0), 2);
        assert_eq!(Api::StreamsGroupHeartbeat.response_header_version(0), 1);
    }
}
