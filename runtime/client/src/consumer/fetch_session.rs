//! Fetch sessions (KIP-227), the consumer's side: per broker, the partitions
//! the broker's session holds, so a Fetch request names only what changed
//! and its answer carries only partitions with news.
//!
//! - Without a session a request is *full*: every partition this consumer
//!   fetches from the broker, `session_id` 0 and epoch 0 (asking for one).
//!   An answer with a session id ≠ 0 opens the session at epoch 1; id 0
//!   (the broker keeps none, e.g. Rill's embedded broker) keeps requests full.
//! - With a session a request is *incremental*: the partitions that are new
//!   or whose fetch offset, leader epoch or byte limit differ from what the
//!   session holds, and those it should drop (`forgotten_topics_data`); the rest
//!   the broker fetches from the offsets it keeps. So a partition fetched
//!   again from an unchanged offset (its answer was not used) gets the same
//!   records again, as in a full request.
//! - Invariant: after an answer the session holds exactly the partitions
//!   of the request's *wanted* set (with their offsets, epochs and limits), and the
//!   next epoch is the answered one + 1 (wrapping to 1). One request per
//!   broker is in flight at a time (the fetcher's rule), so answers come
//!   in epoch order.
//! - Any failed answer (a session the broker lost or an epoch it refused,
//!   a broken connection) drops the session: the next request is full.

use std::collections::HashMap;

use crate::TopicPartition;

/// What a request names for one partition: where to fetch from, the
/// leader epoch the consumer knows, and the most bytes to answer with
/// (`partition_max_bytes`; the broker's session keeps all three).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FetchPosition {
    pub offset: i64,
    pub leader_epoch: i32,
    pub max_bytes: i32,
}

/// Partitions by topic, then partition index (looked up by `&str` while
/// an answer is read, without building a `TopicPartition`).
pub(crate) type Wanted = HashMap<String, HashMap<i32, FetchPosition>>;

/// One broker's session.
#[derive(Debug, Default)]
struct Session {
    id: i32,
    /// The epoch of the next incremental request.
    epoch: i32,
    parts: Wanted,
}

/// The sessions of one consumer, by broker id.
#[derive(Debug, Default)]
pub(crate) struct FetchSessions {
    by_node: HashMap<i32, Session>,
}

/// What to send to one broker, and what its session becomes once answered.
#[derive(Debug)]
pub(crate) struct SessionRequest {
    pub session_id: i32,
    pub epoch: i32,
    /// The partitions to name in the request.
    pub send: Vec<(TopicPartition, FetchPosition)>,
    /// Partitions the broker's session drops.
    pub forgotten: Vec<(String, Vec<i32>)>,
    /// Every partition fetched from the broker: the session afterwards.
    pub wanted: Wanted,
}

impl SessionRequest {
    pub fn is_full(&self) -> bool {
        self.session_id == 0
    }
}

impl FetchSessions {
    /// The request for `node` fetching `parts`: full without a session,
    /// else only what changed.
    pub fn request(
        &self,
        node: i32,
        parts: Vec<(TopicPartition, FetchPosition)>,
    ) -> SessionRequest {
        let mut wanted: Wanted = HashMap::new();
        for (tp, at) in &parts {
            wanted
                .entry(tp.topic.clone())
                .or_default()
                .insert(tp.partition, *at);
        }
        let Some(s) = self.by_node.get(&node).filter(|s| s.id != 0) else {
            return SessionRequest {
                session_id: 0,
                epoch: 0,
                send: parts,
                forgotten: Vec::new(),
                wanted,
            };
        };
        let send = parts
            .into_iter()
            .filter(|(tp, at)| {
                s.parts
                    .get(tp.topic.as_str())
                    .and_then(|t| t.get(&tp.partition))
                    != Some(at)
            })
            .collect();
        let mut forgotten = Vec::new();
        for (topic, held) in &s.parts {
            let now = wanted.get(topic.as_str());
            let gone: Vec<i32> = held
                .keys()
                .filter(|p| now.is_none_or(|t| !t.contains_key(p)))
                .copied()
                .collect();
            if !gone.is_empty() {
                forgotten.push((topic.clone(), gone));
            }
        }
        SessionRequest {
            session_id: s.id,
            epoch: s.epoch,
            send,
            forgotten,
            wanted,
        }
    }

    /// `node` answered the request (`session_id`: the id its answer
    /// carries): the session now holds the request's wanted partitions.
    pub fn answered(&mut self, node: i32, full: bool, session_id: i32, wanted: Wanted) {
        if full {
            if session_id == 0 {
                self.by_node.remove(&node);
            } else {
                self.by_node.insert(
                    node,
                    Session {
                        id: session_id,
                        epoch: 1,
                        parts: wanted,
                    },
                );
            }
            return;
        }
        match self.by_node.get_mut(&node) {
            Some(s) if s.id == session_id => {
                s.epoch = if s.epoch == i32::MAX { 1 } else { s.epoch + 1 };
                s.parts = wanted;
            }
            _ => {
                self.by_node.remove(&node);
            }
        }
    }

    /// A request to `node` failed: its next one is full.
    pub fn reset(&mut self, node: i32) {
        self.by_node.remove(&node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    /// `tp` fetched from `offset` at leader epoch `epoch`, up to 1 MiB.
    fn at(tp: TopicPartition, offset: i64, epoch: i32) -> (TopicPartition, FetchPosition) {
        let max_bytes = 1 << 20;
        (
            tp,
            FetchPosition {
                offset,
                leader_epoch: epoch,
                max_bytes,
            },
        )
    }

    fn names(req: &SessionRequest) -> Vec<String> {
        let mut v: Vec<String> = req
            .send
            .iter()
            .map(|(tp, at)| format!("{tp}@{}", at.offset))
            .collect();
        v.sort();
        v
    }

    /// Opens a session with id 7 holding `parts`.
    fn open(parts: Vec<(TopicPartition, FetchPosition)>) -> FetchSessions {
        let mut s = FetchSessions::default();
        let req = s.request(1, parts);
        assert!(req.is_full());
        s.answered(1, true, 7, req.wanted);
        s
    }

    #[test]
    fn without_a_session_a_request_is_full_and_asks_for_one() {
        let s = FetchSessions::default();
        let req = s.request(1, vec![at(tp("a", 0), 5, 0), at(tp("a", 1), 9, 0)]);
        assert_eq!((req.session_id, req.epoch), (0, 0));
        assert_eq!(names(&req), ["a-0@5", "a-1@9"]);
        assert!(req.forgotten.is_empty());
    }

    #[test]
    fn an_incremental_request_names_only_what_changed_and_forgets_what_left() {
        let mut s = open(vec![
            at(tp("a", 0), 5, 0),
            at(tp("a", 1), 9, 0),
            at(tp("b", 0), 1, 0),
        ]);
        // a-0 advanced, a-1 unchanged, b-0 no longer fetched, c-0 new, and
        // a-1's leader epoch moved on another round.
        let req = s.request(
            1,
            vec![
                at(tp("a", 0), 8, 0),
                at(tp("a", 1), 9, 0),
                at(tp("c", 0), 0, 0),
            ],
        );
        assert_eq!((req.session_id, req.epoch), (7, 1));
        assert_eq!(names(&req), ["a-0@8", "c-0@0"]);
        assert_eq!(req.forgotten, vec![("b".to_string(), vec![0])]);
        s.answered(1, false, 7, req.wanted);
        let req = s.request(
            1,
            vec![
                at(tp("a", 0), 8, 0),
                at(tp("a", 1), 9, 3),
                at(tp("c", 0), 0, 0),
            ],
        );
        assert_eq!(req.epoch, 2);
        assert_eq!(names(&req), ["a-1@9"]);
        assert!(req.forgotten.is_empty());
        // Nothing changed: an empty incremental request (the broker still
        // answers with any partition that has new records).
        s.answered(1, false, 7, req.wanted);
        let req = s.request(
            1,
            vec![
                at(tp("a", 0), 8, 0),
                at(tp("a", 1), 9, 3),
                at(tp("c", 0), 0, 0),
            ],
        );
        assert!(req.send.is_empty() && req.forgotten.is_empty());
        assert_eq!(req.epoch, 3);
    }

    #[test]
    fn an_unused_answer_is_fetched_again_from_the_same_offset() {
        // The session's offset for a-0 is still 5 (the consumer dropped the
        // answer): a-0 is not named and the broker reads from 5 again.
        let s = open(vec![at(tp("a", 0), 5, 0)]);
        let req = s.request(1, vec![at(tp("a", 0), 5, 0)]);
        assert!(req.send.is_empty());
        assert_eq!(req.wanted["a"][&0], at(tp("a", 0), 5, 0).1);
    }

    #[test]
    fn a_changed_byte_limit_is_sent_again() {
        let s = open(vec![at(tp("a", 0), 5, 0), at(tp("a", 1), 5, 0)]);
        let (a1, mut smaller) = at(tp("a", 1), 5, 0);
        smaller.max_bytes = 64 * 1024;
        let req = s.request(1, vec![at(tp("a", 0), 5, 0), (a1, smaller)]);
        assert_eq!(names(&req), ["a-1@5"]);
        assert_eq!(req.send[0].1.max_bytes, 64 * 1024);
    }

    #[test]
    fn a_broker_without_sessions_gets_full_requests() {
        let mut s = FetchSessions::default();
        let req = s.request(1, vec![at(tp("a", 0), 5, 0)]);
        s.answered(1, true, 0, req.wanted);
        let req = s.request(1, vec![at(tp("a", 0), 6, 0)]);
        assert!(req.is_full());
        assert_eq!(names(&req), ["a-0@6"]);
    }

    #[test]
    fn a_failure_or_a_stale_session_id_starts_over_with_a_full_request() {
        let mut s = open(vec![at(tp("a", 0), 5, 0)]);
        s.reset(1);
        assert!(s.request(1, vec![at(tp("a", 0), 5, 0)]).is_full());
        let mut s = open(vec![at(tp("a", 0), 5, 0)]);
        let req = s.request(1, vec![at(tp("a", 0), 6, 0)]);
        s.answered(1, false, 8, req.wanted);
        assert!(s.request(1, vec![at(tp("a", 0), 6, 0)]).is_full());
        // Sessions are per broker.
        let s = open(vec![at(tp("a", 0), 5, 0)]);
        assert!(s.request(2, vec![at(tp("a", 1), 5, 0)]).is_full());
        assert!(!s.request(1, vec![at(tp("a", 0), 5, 0)]).is_full());
    }

    #[test]
    fn the_epoch_wraps_to_one() {
        let mut s = open(vec![at(tp("a", 0), 5, 0)]);
        s.by_node.get_mut(&1).unwrap().epoch = i32::MAX;
        let req = s.request(1, vec![at(tp("a", 0), 5, 0)]);
        assert_eq!(req.epoch, i32::MAX);
        s.answered(1, false, 7, req.wanted);
        assert_eq!(s.request(1, vec![at(tp("a", 0), 5, 0)]).epoch, 1);
    }
}
