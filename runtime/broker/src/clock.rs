//! The broker's wall clock, in one place so every timestamp it stamps
//! (record append times, retention, group state) reads the same way.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock milliseconds since the epoch (record timestamps, retention).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
