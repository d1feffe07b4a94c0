//! Task ids (Kafka's `TaskId`): `<subtopology>_<partition>`, the name of a
//! task in assignments, state directories, metrics and REST answers.

use std::fmt;

/// `<subtopology>_<partition>` (Kafka's `TaskId`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    /// The sub-topology the task runs (numbered from 0).
    pub subtopology: u32,
    /// The input partition the task processes, the same number in each of its co-partitioned source
    /// topics.
    pub partition: i32,
}

impl TaskId {
    /// The task for partition `partition` of sub-topology `subtopology`.
    pub fn new(subtopology: u32, partition: i32) -> Self {
        Self {
            subtopology,
            partition,
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.subtopology, self.partition)
    }
}

impl std::str::FromStr for TaskId {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (a, b) = s
            .split_once('_')
            .ok_or_else(|| format!("task id {s:?} is not <subtopology>_<partition>"))?;
        Ok(TaskId {
            subtopology: a
                .parse()
                .map_err(|_| format!("task id {s:?}: bad sub-topology"))?,
            partition: b
                .parse()
                .map_err(|_| format!("task id {s:?}: bad partition"))?,
        })
    }
}
