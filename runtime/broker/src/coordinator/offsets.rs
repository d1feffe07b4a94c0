//! A committed offset as the coordinator stores it (Kafka's `OffsetAndMetadata`).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    pub offset: i64,
    /// Leader epoch of the last consumed record, -1 when unknown (KIP-320).
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp: i64,
}
