//! Timestamp extractors (Kafka's `TimestampExtractor`): the time a record
//! counts as for windows, stream time and punctuation.
//!
//! A task applies its source's extractor as records arrive (Kafka's
//! `RecordQueue`), before they are ordered by timestamp across partitions.
//! `partition_time` is the largest timestamp extracted so far from the
//! record's partition (-1 before the first). An extractor may:
//! - return a timestamp ≥ 0: the record's time;
//! - return a negative timestamp: the record is dropped, logged and counted
//!   in `dropped-records` (Kafka's `LogAndSkipOnInvalidTimestamp`);
//! - fail: the stream thread stops with an error naming the topic,
//!   partition and offset (Kafka's default `FailOnInvalidTimestamp`).
//!
//! Config: `default.timestamp.extractor` takes Kafka's class names (simple
//! or fully qualified); `Consumed::with_timestamp_extractor` sets one
//! source's. Unlike Kafka's, a custom extractor sees the record's bytes
//! (it runs before deserialization, which Rill does at processing time).

use std::sync::Arc;

use rill_client::ConsumerRecord;

/// Picks a record's timestamp.
pub trait TimestampExtractor: Send + Sync + 'static {
    /// The record's timestamp; `Err` stops the thread with the reason.
    fn extract(&self, record: &ConsumerRecord, partition_time: i64) -> Result<i64, String>;
}

/// Any `Fn(&ConsumerRecord, partition_time) -> timestamp` is an extractor.
impl<F> TimestampExtractor for F
where
    F: Fn(&ConsumerRecord, i64) -> i64 + Send + Sync + 'static,
{
    fn extract(&self, record: &ConsumerRecord, partition_time: i64) -> Result<i64, String> {
        Ok(self(record, partition_time))
    }
}

/// The record's own timestamp; a negative one is an error (Kafka's default).
pub struct FailOnInvalidTimestamp;

impl TimestampExtractor for FailOnInvalidTimestamp {
    fn extract(&self, record: &ConsumerRecord, _: i64) -> Result<i64, String> {
        if record.timestamp < 0 {
            return Err(format!(
                "the record's timestamp {} is negative (default.timestamp.extractor is FailOnInvalidTimestamp; \
                 LogAndSkipOnInvalidTimestamp drops such records, UsePartitionTimeOnInvalidTimestamp uses the partition's time)",
                record.timestamp
            ));
        }
        Ok(record.timestamp)
    }
}

/// The record's own timestamp; a negative one drops the record.
pub struct LogAndSkipOnInvalidTimestamp;

impl TimestampExtractor for LogAndSkipOnInvalidTimestamp {
    fn extract(&self, record: &ConsumerRecord, _: i64) -> Result<i64, String> {
        Ok(record.timestamp)
    }
}

/// The record's own timestamp; a negative one becomes the partition's time
/// (an error before the partition has one).
pub struct UsePartitionTimeOnInvalidTimestamp;

impl TimestampExtractor for UsePartitionTimeOnInvalidTimestamp {
    fn extract(&self, record: &ConsumerRecord, partition_time: i64) -> Result<i64, String> {
        match (record.timestamp, partition_time) {
            (ts, _) if ts >= 0 => Ok(ts),
            (_, pt) if pt >= 0 => Ok(pt),
            (ts, _) => Err(format!(
                "the record's timestamp {ts} is negative and its partition has no time yet (UsePartitionTimeOnInvalidTimestamp)"
            )),
        }
    }
}

/// The wall-clock time when the record is read (processing-time semantics).
pub struct WallclockTimestampExtractor;

impl TimestampExtractor for WallclockTimestampExtractor {
    fn extract(&self, _: &ConsumerRecord, _: i64) -> Result<i64, String> {
        Ok(now_ms())
    }
}

/// Wall-clock milliseconds since the Unix epoch (0 before it).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A shareable extractor.
pub type SharedExtractor = Arc<dyn TimestampExtractor>;

/// Kafka's class name (simple or fully qualified) to an extractor.
pub(crate) fn by_name(name: &str) -> Option<SharedExtractor> {
    let simple = name.rsplit('.').next().unwrap_or(name);
    Some(match simple {
        "FailOnInvalidTimestamp" => Arc::new(FailOnInvalidTimestamp),
        "LogAndSkipOnInvalidTimestamp" => Arc::new(LogAndSkipOnInvalidTimestamp),
        "UsePartitionTimeOnInvalidTimestamp" => Arc::new(UsePartitionTimeOnInvalidTimestamp),
        "WallclockTimestampExtractor" => Arc::new(WallclockTimestampExtractor),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts: i64) -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition: 0,
            offset: 7,
            timestamp: ts,
            log_append_time: false,
            key: None,
            value: None,
            headers: Vec::new(),
            leader_epoch: None,
        }
    }

    #[test]
    fn the_built_in_extractors_treat_negative_timestamps_as_kafkas_do() {
        assert_eq!(FailOnInvalidTimestamp.extract(&at(5), -1), Ok(5));
        let e = FailOnInvalidTimestamp.extract(&at(-3), 9).unwrap_err();
        assert!(e.contains("-3") && e.contains("negative"), "{e}");
        assert_eq!(LogAndSkipOnInvalidTimestamp.extract(&at(-3), 9), Ok(-3));
        assert_eq!(
            UsePartitionTimeOnInvalidTimestamp.extract(&at(-3), 9),
            Ok(9)
        );
        assert!(UsePartitionTimeOnInvalidTimestamp
            .extract(&at(-3), -1)
            .is_err());
        assert!(WallclockTimestampExtractor.extract(&at(-3), -1).unwrap() > 1_600_000_000_000);
        assert!(
            by_name("org.apache.kafka.streams.processor.LogAndSkipOnInvalidTimestamp").is_some()
        );
        assert!(by_name("NoSuchExtractor").is_none());
        let custom = |r: &ConsumerRecord, _pt: i64| r.offset * 10;
        assert_eq!(custom.extract(&at(1), -1), Ok(70));
    }
}
