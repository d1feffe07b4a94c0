//! Arbitrary bytes as a request frame body: decoded, handled by an in-memory
//! broker, and the response encoded. Any panic (in decoding, a handler or
//! encoding) or abort (a hostile length prefix) is a finding.
//!
//! Run: `cd runtime/broker/fuzz && cargo +nightly fuzz run broker_request`

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rill_broker::fuzzing::FuzzBroker;
use rill_protocol::alloc::ReservingAllocator;

#[global_allocator]
static ALLOC: ReservingAllocator = ReservingAllocator;

static BROKER: OnceLock<FuzzBroker> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let broker = BROKER.get_or_init(FuzzBroker::new);
    let _ = broker.handle_frame(data);
});
