//! Criterion micro-benches of the wire layer's hot paths: validating a
//! produced record batch (CRC-32C over the batch), walking batch headers as
//! a fetch does, and decoding a request frame.
//!
//! Command: `cargo bench -p rill-benches --bench protocol`

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rill_protocol::kafka_protocol::messages::{MetadataRequest, RequestHeader};
use rill_protocol::message::{decode_request, encode_request_frame};
use rill_protocol::records::{
    encode_records, simple_record, validate_batch, BatchIter, Compression,
};
use rill_protocol::{ApiKey, RequestKind, StrBytes};

fn batch(n: usize, value_len: usize) -> Bytes {
    let recs: Vec<_> = (0..n)
        .map(|i| {
            simple_record(
                i as i64,
                1_700_000_000_000,
                Some(Bytes::from(format!("key-{i}"))),
                Some(Bytes::from(vec![b'x'; value_len])),
            )
        })
        .collect();
    encode_records(&recs, Compression::None).unwrap()
}

fn benches(c: &mut Criterion) {
    let b16k = batch(150, 100);
    let mut g = c.benchmark_group("batch");
    g.throughput(Throughput::Bytes(b16k.len() as u64));
    g.bench_function("validate 16 KiB batch (CRC-32C)", |b| {
        b.iter(|| validate_batch(&b16k, true).unwrap())
    });
    let log: Vec<u8> = (0..64).flat_map(|_| b16k.to_vec()).collect();
    g.throughput(Throughput::Bytes(log.len() as u64));
    g.bench_function("walk 1 MiB of batch headers", |b| {
        b.iter(|| BatchIter::new(&log).count())
    });
    g.finish();

    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Metadata as i16)
        .with_request_api_version(12)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("bench")));
    let mut out = BytesMut::new();
    encode_request_frame(
        &mut out,
        &header,
        &RequestKind::Metadata(MetadataRequest::default()).into(),
    )
    .unwrap();
    let frame = out.freeze().slice(4..);
    c.bench_function("decode Metadata v12 request", |b| {
        b.iter_batched(
            || frame.clone(),
            |f| decode_request(f, |k| Some(k.valid_versions())).unwrap(),
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(protocol, benches);
criterion_main!(protocol);
