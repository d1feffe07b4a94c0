//! Decoding requests whose array lengths lie must fail cleanly, not abort.
//! Runs with the same allocator the broker binaries install.

use bytes::Bytes;
use rill_protocol::alloc::ReservingAllocator;
use rill_protocol::message::decode_request;

#[global_allocator]
static ALLOC: ReservingAllocator = ReservingAllocator;

fn all_supported(k: rill_protocol::message::Api) -> Option<(i16, i16)> {
    Some(k.valid_versions())
}

#[test]
fn metadata_request_claiming_54m_topics_is_an_error() {
    // api_key 3 (Metadata), version 0, correlation id, empty client id, then a
    // topic array length of 0x033c0c00 with no elements behind it.
    let frame = Bytes::from_static(&[
        0, 3, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0x03, 0x3c, 0x0c, 0x00, 0xb6,
    ]);
    assert!(decode_request(frame, all_supported).is_err());
}

#[test]
fn arrays_claiming_i32_max_elements_are_errors_in_every_api() {
    use rill_protocol::message::Api;
    let apis = rill_protocol::ApiKey::iter()
        .map(Api::Kafka)
        .chain([Api::StreamsGroupHeartbeat, Api::StreamsGroupDescribe]);
    for key in apis {
        let (min, max) = key.valid_versions();
        for version in [min, max] {
            let mut f = Vec::new();
            f.extend_from_slice(&key.key().to_be_bytes());
            f.extend_from_slice(&version.to_be_bytes());
            f.extend_from_slice(&7i32.to_be_bytes());
            f.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
            if key.request_header_version(version) >= 2 {
                f.push(0); // no tagged fields
            }
            // A body made only of huge length prefixes, in both encodings.
            for _ in 0..8 {
                f.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
                f.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
            }
            let _ = decode_request(Bytes::from(f), all_supported);
        }
    }
}
