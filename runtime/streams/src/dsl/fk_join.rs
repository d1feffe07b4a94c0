//! Foreign-key table–table joins (KIP-213; Kafka's `KTable.join(other,
//! foreignKeyExtractor, joiner)` and `leftJoin`): each row of the left
//! table names a row of the right table by a foreign key taken from its
//! value, and the result table (keyed like the left table) holds the two
//! joined. The tables need not be co-partitioned: the left side subscribes
//! to foreign keys through an internal topic partitioned like the right
//! table, and the right side answers through another partitioned like the
//! left table.
//!
//! The round trip, as Kafka's:
//! 1. left update → `Subscription { instruction, hash of the new left value,
//!    primary key, primary partition }` keyed by the foreign key to
//!    `<app>-<name>-SUBSCRIPTION-REGISTRATION-…-topic`; a changed foreign
//!    key also unsubscribes the old one;
//! 2. right side: the subscription is kept (or deleted) in the subscription
//!    store under `len(fk) || fk || pk`, then answered with the right
//!    table's current value for the foreign key, keyed by the primary key,
//!    to `<app>-…-SUBSCRIPTION-RESPONSE-…-topic` at the partition that
//!    subscribed (KIP-775); a right update answers every subscription of
//!    its key (a prefix scan of the store);
//! 3. left side: an answer is joined with the left row's *current* value
//!    only if that value still hashes to the answer's hash; otherwise it is
//!    stale (the row changed since) and dropped, counted as dropped.
//!
//! Invariants:
//! - the left table sends old values (Kafka's `sendOldValues`), so a
//!   changed foreign key always unsubscribes the old one and an inner join
//!   retracts a result whose new foreign key has no match;
//! - `None` from the extractor is Kafka's null foreign key: an inner join
//!   drops the update (counted), a left join joins the row with nothing;
//! - the result is materialized (`Materialized` names the store and gives
//!   the result's value serde), so it can be read, joined again and grouped;
//! - the wire and store formats start with a version byte; a newer version
//!   is refused with an error rather than misread.

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};

use super::table::{Getter, TableSource};
use super::{erase, Data, KStream, KTable, Materialized, SinkPartitioner};
use crate::error::{Result, StreamsError};
use crate::processor::{Processor, ProcessorContext, Record};
use crate::record::Change;
use crate::serdes::{Serde, Serdes, SharedSerde};
use crate::topology::StoreDef;

/// Takes the foreign key from a left row (`None`: Kafka's null foreign key).
type KeyExtractor<K, V, KO> = Arc<dyn Fn(&K, &V) -> Option<KO> + Send + Sync>;
/// Joins a left value with the right one (`None`: no right row).
type FkJoiner<V, VO, VR> = Arc<dyn Fn(&V, Option<&VO>) -> VR + Send + Sync>;

/// The hash that tells a current answer from a stale one (Kafka hashes the
/// serialized left value with 128-bit Murmur3 too; the seed is Kafka's).
type ValueHash = [u8; 16];
const HASH_SEED: u64 = 104_729;

/// The version this code writes and the newest it reads.
const WRAPPER_VERSION: u8 = 0;

/// What the right side does with a subscription (Kafka's
/// `SubscriptionWrapper.Instruction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Instruction {
    /// Unsubscribe; no answer (the row moved to another foreign key, whose
    /// subscription answers).
    DeleteKeyNoPropagate = 0,
    /// Unsubscribe and answer with nothing (the row was deleted, or a left
    /// join's row moved to the null foreign key).
    DeleteKeyAndPropagate = 1,
    /// Subscribe and answer even when the foreign key has no row, so a
    /// result made with the previous foreign key is replaced.
    PropagateNullIfNoFkValAvailable = 2,
    /// Subscribe and answer only when the foreign key has a row (a new
    /// inner-join row: nothing to retract).
    PropagateOnlyIfFkValAvailable = 3,
}

impl Instruction {
    fn from_byte(b: u8) -> std::result::Result<Self, String> {
        Ok(match b {
            0 => Self::DeleteKeyNoPropagate,
            1 => Self::DeleteKeyAndPropagate,
            2 => Self::PropagateNullIfNoFkValAvailable,
            3 => Self::PropagateOnlyIfFkValAvailable,
            other => return Err(format!("unknown foreign-key join instruction {other}")),
        })
    }
}

/// A left row's subscription to a foreign key (Kafka's `SubscriptionWrapper`).
#[derive(Debug, Clone)]
pub(crate) struct Subscription<K> {
    instruction: Instruction,
    /// Hash of the left value that sent it; `None` for a deleted row.
    hash: Option<ValueHash>,
    primary_key: K,
    /// The left partition to answer to.
    primary_partition: i32,
}

/// The right side's answer (Kafka's `SubscriptionResponseWrapper`).
#[derive(Debug, Clone)]
pub(crate) struct SubscriptionResponse<VO> {
    hash: Option<ValueHash>,
    foreign_value: Option<VO>,
    primary_partition: i32,
}

fn check_version(what: &str, v: u8) -> std::result::Result<(), String> {
    if v > WRAPPER_VERSION {
        return Err(format!(
            "{what} of version {v} is newer than this application reads (up to {WRAPPER_VERSION}); upgrade every instance"
        ));
    }
    Ok(())
}

fn put_hash(b: &mut BytesMut, hash: &Option<ValueHash>) {
    match hash {
        Some(h) => {
            b.put_u8(1);
            b.put_slice(h);
        }
        None => b.put_u8(0),
    }
}

/// Reads the hash flag and hash; the rest of `d` after them.
fn take_hash<'a>(
    what: &str,
    d: &'a [u8],
) -> std::result::Result<(Option<ValueHash>, &'a [u8]), String> {
    match d.split_first() {
        Some((0, rest)) => Ok((None, rest)),
        Some((1, rest)) if rest.len() >= 16 => {
            let (h, rest) = rest.split_at(16);
            Ok((Some(h.try_into().expect("16 bytes")), rest))
        }
        _ => Err(format!("{what} is truncated in its value hash")),
    }
}

fn take_partition<'a>(what: &str, d: &'a [u8]) -> std::result::Result<(i32, &'a [u8]), String> {
    if d.len() < 4 {
        return Err(format!("{what} is truncated in its partition"));
    }
    let (p, rest) = d.split_at(4);
    Ok((i32::from_be_bytes(p.try_into().expect("4 bytes")), rest))
}

/// `version, instruction, hash flag [, hash], partition, primary key`.
struct SubscriptionSerde<K> {
    primary_key: SharedSerde<K>,
}

impl<K: Send + Sync + 'static> Serde<Subscription<K>> for SubscriptionSerde<K> {
    fn serialize(
        &self,
        topic: &str,
        s: &Subscription<K>,
    ) -> std::result::Result<Option<Bytes>, String> {
        let pk = self
            .primary_key
            .serialize(topic, &s.primary_key)?
            .ok_or("a foreign-key join's primary key serialized to null")?;
        let mut b = BytesMut::with_capacity(pk.len() + 23);
        b.put_u8(WRAPPER_VERSION);
        b.put_u8(s.instruction as u8);
        put_hash(&mut b, &s.hash);
        b.put_i32(s.primary_partition);
        b.put_slice(&pk);
        Ok(Some(b.freeze()))
    }
    fn deserialize(
        &self,
        topic: &str,
        data: Option<&[u8]>,
    ) -> std::result::Result<Subscription<K>, String> {
        const WHAT: &str = "a foreign-key subscription";
        let d = data.ok_or("a foreign-key subscription is never null")?;
        let [version, instruction, rest @ ..] = d else {
            return Err(format!("{WHAT} is truncated ({} bytes)", d.len()));
        };
        check_version(WHAT, *version)?;
        let instruction = Instruction::from_byte(*instruction)?;
        let (hash, rest) = take_hash(WHAT, rest)?;
        let (primary_partition, pk) = take_partition(WHAT, rest)?;
        Ok(Subscription {
            instruction,
            hash,
            primary_key: self.primary_key.deserialize(topic, Some(pk))?,
            primary_partition,
        })
    }
}

/// `version, hash flag [, hash], partition, value flag [, foreign value]`.
struct ResponseSerde<VO> {
    foreign_value: SharedSerde<VO>,
}

impl<VO: Send + Sync + 'static> Serde<SubscriptionResponse<VO>> for ResponseSerde<VO> {
    fn serialize(
        &self,
        topic: &str,
        r: &SubscriptionResponse<VO>,
    ) -> std::result::Result<Option<Bytes>, String> {
        let v = match &r.foreign_value {
            Some(v) => self.foreign_value.serialize(topic, v)?,
            None => None,
        };
        let mut b = BytesMut::with_capacity(v.as_ref().map_or(0, Bytes::len) + 23);
        b.put_u8(WRAPPER_VERSION);
        put_hash(&mut b, &r.hash);
        b.put_i32(r.primary_partition);
        match v {
            Some(v) => {
                b.put_u8(1);
                b.put_slice(&v);
            }
            None => b.put_u8(0),
        }
        Ok(Some(b.freeze()))
    }
    fn deserialize(
        &self,
        topic: &str,
        data: Option<&[u8]>,
    ) -> std::result::Result<SubscriptionResponse<VO>, String> {
        const WHAT: &str = "a foreign-key join response";
        let d = data.ok_or("a foreign-key join response is never null")?;
        let [version, rest @ ..] = d else {
            return Err(format!("{WHAT} is empty"));
        };
        check_version(WHAT, *version)?;
        let (hash, rest) = take_hash(WHAT, rest)?;
        let (primary_partition, rest) = take_partition(WHAT, rest)?;
        let foreign_value = match rest.split_first() {
            Some((0, _)) => None,
            Some((1, v)) => Some(self.foreign_value.deserialize(topic, Some(v))?),
            _ => return Err(format!("{WHAT} is truncated in its value")),
        };
        Ok(SubscriptionResponse {
            hash,
            foreign_value,
            primary_partition,
        })
    }
}

/// The subscription store's key: `len(fk) (4 bytes) || fk || pk`, so the
/// subscriptions of one foreign key are one prefix (Kafka's `CombinedKeySchema`).
fn subscription_prefix(fk: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(fk.len() + 4);
    k.extend_from_slice(&(fk.len() as u32).to_be_bytes());
    k.extend_from_slice(fk);
    k
}

fn serialize_key<T: 'static>(
    serde: &SharedSerde<T>,
    topic: &str,
    what: &str,
    v: &T,
) -> Result<Bytes> {
    serde
        .serialize(topic, v)
        .map_err(|reason| StreamsError::Serialization {
            topic: topic.to_string(),
            reason,
        })?
        .ok_or_else(|| StreamsError::Serialization {
            topic: topic.to_string(),
            reason: format!("the {what} serialized to null"),
        })
}

/// 128-bit Murmur3 (x64 variant) of the serialized value.
fn hash_value<V: 'static>(serde: &SharedSerde<V>, topic: &str, v: &V) -> Result<ValueHash> {
    let bytes = serialize_key(serde, topic, "left value", v)?;
    Ok(murmur3_x64_128(&bytes, HASH_SEED))
}

/// Austin Appleby's MurmurHash3_x64_128 (public domain), written from its
/// description; `h1 || h2`, each little-endian.
pub(crate) fn murmur3_x64_128(data: &[u8], seed: u64) -> [u8; 16] {
    const C1: u64 = 0x87c3_7b91_1142_53d5;
    const C2: u64 = 0x4cf5_ad43_2745_937f;
    fn fmix(mut k: u64) -> u64 {
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ (k >> 33)
    }
    let mix1 = |k: u64| k.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
    let mix2 = |k: u64| k.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
    let (mut h1, mut h2) = (seed, seed);
    let mut blocks = data.chunks_exact(16);
    for b in &mut blocks {
        let k1 = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let k2 = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
        h1 ^= mix1(k1);
        h1 = h1
            .rotate_left(27)
            .wrapping_add(h2)
            .wrapping_mul(5)
            .wrapping_add(0x52dc_e729);
        h2 ^= mix2(k2);
        h2 = h2
            .rotate_left(31)
            .wrapping_add(h1)
            .wrapping_mul(5)
            .wrapping_add(0x3849_5ab5);
    }
    let tail = blocks.remainder();
    let word = |bytes: &[u8]| {
        bytes
            .iter()
            .enumerate()
            .fold(0u64, |acc, (i, &b)| acc | (u64::from(b) << (8 * i)))
    };
    if tail.len() > 8 {
        h2 ^= mix2(word(&tail[8..]));
    }
    if !tail.is_empty() {
        h1 ^= mix1(word(&tail[..tail.len().min(8)]));
    }
    let len = data.len() as u64;
    h1 ^= len;
    h2 ^= len;
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    h1 = fmix(h1);
    h2 = fmix(h2);
    h1 = h1.wrapping_add(h2);
    h2 = h2.wrapping_add(h1);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&h1.to_le_bytes());
    out[8..].copy_from_slice(&h2.to_le_bytes());
    out
}

impl<K: Data, V: Data> KTable<K, V> {
    /// Joins each row with the row of `other` whose key `foreign_key` takes
    /// from it; rows without a match have no result (Kafka's
    /// `KTable.join(other, foreignKeyExtractor, joiner, materialized)`,
    /// KIP-213, with the key-and-value extractor of KIP-1104).
    /// `materialized` must give the result's value serde.
    pub fn join_on_foreign_key<KO: Data, VO: Data, VR: Data>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&K, &V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(&V, &VO) -> VR + Send + Sync + 'static,
        materialized: impl Into<Materialized<VR>>,
    ) -> KTable<K, VR> {
        let materialized = materialized.into();
        let j: FkJoiner<V, VO, VR> = Arc::new(move |l, r| joiner(l, r.expect("inner join")));
        self.fk_join(other, Arc::new(foreign_key), j, false, materialized)
    }

    /// As `join_on_foreign_key`, keeping rows without a match (joined with
    /// `None`), including rows whose foreign key is `None` (Kafka's
    /// `KTable.leftJoin(other, foreignKeyExtractor, ...)`).
    pub fn left_join_on_foreign_key<KO: Data, VO: Data, VR: Data>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: impl Fn(&K, &V) -> Option<KO> + Send + Sync + 'static,
        joiner: impl Fn(&V, Option<&VO>) -> VR + Send + Sync + 'static,
        materialized: impl Into<Materialized<VR>>,
    ) -> KTable<K, VR> {
        let materialized = materialized.into();
        self.fk_join(
            other,
            Arc::new(foreign_key),
            Arc::new(joiner),
            true,
            materialized,
        )
    }

    fn fk_join<KO: Data, VO: Data, VR: Data>(
        &self,
        other: &KTable<KO, VO>,
        foreign_key: KeyExtractor<K, V, KO>,
        joiner: FkJoiner<V, VO, VR>,
        left_join: bool,
        materialized: Materialized<VR>,
    ) -> KTable<K, VR> {
        let graph = self.stream.graph.clone();
        let (registration, store_name, response, output) = {
            let mut g = graph.borrow_mut();
            (
                g.next_name("KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION"),
                g.next_name("KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE"),
                g.next_name("KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE"),
                g.next_name("KTABLE-FK-JOIN-OUTPUT-STATE-STORE"),
            )
        };
        let (
            Some((lstore, lget)),
            Some((lks, lvs)),
            Some((rstore, rget)),
            Some((rks, rvs)),
            Some(vrs),
        ) = (
            self.info.getter.clone(),
            self.info.serdes.clone(),
            other.info.getter.clone(),
            other.info.serdes.clone(),
            materialized.value.clone(),
        )
        else {
            let reason = if self.info.getter.is_none() || other.info.getter.is_none() {
                "both tables must be readable by key (a suppressed or joined table needs to_upsert_stream() first)"
            } else if self.info.serdes.is_none() || other.info.serdes.is_none() {
                "both tables need their serdes (give map_values a value serde)"
            } else {
                "the result needs Materialized::with_value_serde"
            };
            let e = StreamsError::Topology(format!("foreign-key join {registration}: {reason}"));
            return self.failed(output, e);
        };
        let output = materialized.name.clone().unwrap_or(output);
        {
            let mut g = graph.borrow_mut();
            // A changed foreign key must unsubscribe the old one.
            g.send_old_values.insert(lstore.clone());
            for (name, cached, logged, backend) in [
                (store_name.clone(), false, true, None),
                (
                    output.clone(),
                    materialized.cached,
                    materialized.logged,
                    materialized.backend,
                ),
            ] {
                g.define_store(StoreDef {
                    name,
                    backend,
                    logged,
                    cached,
                });
            }
        }
        let registration_topic = format!("{registration}-topic");
        let response_topic = format!("{response}-topic");
        // Subscriptions in the registration topic and in the store.
        let subscription_serde: SharedSerde<Subscription<K>> = Arc::new(SubscriptionSerde {
            primary_key: lks.clone(),
        });

        // 1. Left updates become subscriptions, keyed by foreign key.
        let subscriptions = {
            let (rks, lvs, topic) = (rks.clone(), lvs.clone(), registration_topic.clone());
            self.stream.then_named::<Option<KO>, Subscription<K>>(
                registration.clone(),
                false,
                Vec::new(),
                move || {
                    erase::<_, K, Change<V>, Option<KO>, Subscription<K>>(SubscriptionSend {
                        foreign_key: foreign_key.clone(),
                        fk_serde: rks.clone(),
                        value_serde: lvs.clone(),
                        topic: topic.clone(),
                        left_join,
                    })
                },
            )
        };
        let received = subscriptions.through_topic(
            registration_topic.clone(),
            (
                format!("{registration}-sink"),
                format!("{registration}-source"),
            ),
            (Serdes::nullable(rks.clone()), subscription_serde.clone()),
            None,
        );

        // 2. The right side keeps subscriptions and answers them.
        let right_stores = vec![store_name.clone(), rstore.clone()];
        let answers = {
            let (rks, rget, rstore, store, topic) = (
                rks.clone(),
                rget.clone(),
                rstore.clone(),
                store_name.clone(),
                registration_topic.clone(),
            );
            let (pk, vs) = (lks.clone(), subscription_serde.clone());
            received.then::<K, SubscriptionResponse<VO>>(
                "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR",
                false,
                right_stores.clone(),
                move || {
                    erase::<_, Option<KO>, Subscription<K>, K, SubscriptionResponse<VO>>(
                        SubscriptionReceive {
                            store: store.clone(),
                            right_store: rstore.clone(),
                            right: rget.clone(),
                            fk_serde: rks.clone(),
                            pk_serde: pk.clone(),
                            subscription_serde: vs.clone(),
                            topic: topic.clone(),
                        },
                    )
                },
            )
        };
        let right_updates = {
            let (rks, store, vs, topic) = (
                rks.clone(),
                store_name.clone(),
                subscription_serde,
                registration_topic.clone(),
            );
            other.stream.then::<K, SubscriptionResponse<VO>>(
                "KTABLE-FK-JOIN-FOREIGN-TABLE-PROCESSOR",
                false,
                right_stores,
                move || {
                    erase::<_, KO, Change<VO>, K, SubscriptionResponse<VO>>(ForeignTableJoin {
                        store: store.clone(),
                        fk_serde: rks.clone(),
                        subscription_serde: vs.clone(),
                        topic: topic.clone(),
                    })
                },
            )
        };
        // Answers go to the partition that subscribed (KIP-775).
        let partition: SinkPartitioner<K, SubscriptionResponse<VO>> =
            Arc::new(|_, r| Some(r.primary_partition));
        let responses: KStream<K, SubscriptionResponse<VO>> =
            answers.merge(&right_updates).through_topic(
                response_topic,
                (format!("{response}-sink"), format!("{response}-source")),
                (lks.clone(), Arc::new(ResponseSerde { foreign_value: rvs })),
                Some(partition),
            );

        // 3. Answers still current for their row are joined and stored.
        let joined = {
            let (lvs, topic) = (lvs.clone(), registration_topic);
            responses.then::<K, Option<VR>>(
                "KTABLE-FK-JOIN-RESPONSE",
                false,
                vec![lstore.clone()],
                move || {
                    erase::<_, K, SubscriptionResponse<VO>, K, Option<VR>>(ResponseJoin {
                        left_store: lstore.clone(),
                        left: lget.clone(),
                        value_serde: lvs.clone(),
                        topic: topic.clone(),
                        joiner: joiner.clone(),
                        left_join,
                    })
                },
            )
        };
        let (ks2, vs2, out2) = (lks.clone(), vrs.clone(), output.clone());
        let table = joined.then::<K, Change<VR>>(
            "KTABLE-FK-JOIN-OUTPUT",
            false,
            vec![output.clone()],
            move || {
                erase::<_, K, Option<VR>, K, Change<VR>>(TableSource {
                    store: out2.clone(),
                    key_serde: ks2.clone(),
                    value_serde: vs2.clone(),
                    _types: PhantomData,
                })
            },
        );
        KTable::materialized(table, output, (lks, vrs), None)
    }
}

/// Left updates → subscriptions (Kafka's `SubscriptionSendProcessorSupplier`).
struct SubscriptionSend<K, V, KO> {
    foreign_key: KeyExtractor<K, V, KO>,
    fk_serde: SharedSerde<KO>,
    value_serde: SharedSerde<V>,
    /// The registration topic (without the application id), for serdes.
    topic: String,
    left_join: bool,
}

impl<K: Data, V: Data, KO: Data> SubscriptionSend<K, V, KO> {
    fn same_key(&self, a: &Option<KO>, b: &Option<KO>) -> Result<bool> {
        let ser = |k: &Option<KO>| {
            k.as_ref()
                .map(|k| serialize_key(&self.fk_serde, &self.topic, "foreign key", k))
                .transpose()
        };
        Ok(ser(a)? == ser(b)?)
    }
}

impl<K: Data, V: Data, KO: Data> Processor<K, Change<V>, Option<KO>, Subscription<K>>
    for SubscriptionSend<K, V, KO>
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, Option<KO>, Subscription<K>>,
        r: Record<K, Change<V>>,
    ) -> Result<()> {
        use Instruction::*;
        let hash = match &r.value.new {
            Some(v) => Some(hash_value(&self.value_serde, &self.topic, v)?),
            None => None,
        };
        let fk_of = |v: &Option<V>| v.as_ref().and_then(|v| (self.foreign_key)(&r.key, v));
        let (old_fk, new_fk) = (fk_of(&r.value.old), fk_of(&r.value.new));
        let mut sends: Vec<(Option<KO>, Instruction)> = Vec::with_capacity(2);
        if self.left_join {
            if r.value.old.is_some() {
                if old_fk.is_some() && !self.same_key(&old_fk, &new_fk)? {
                    sends.push((old_fk, DeleteKeyAndPropagate));
                }
                sends.push((new_fk, PropagateNullIfNoFkValAvailable));
            } else if r.value.new.is_some() {
                sends.push((new_fk, PropagateNullIfNoFkValAvailable));
            }
        } else if r.value.old.is_some() {
            // Kafka skips the whole update when either key is null.
            if old_fk.is_none() || (r.value.new.is_some() && new_fk.is_none()) {
                tracing::warn!(task = %ctx.task_id(), "skipping a foreign-key join update whose foreign key is null");
                ctx.record_dropped();
                return Ok(());
            }
            if r.value.new.is_some() {
                if !self.same_key(&old_fk, &new_fk)? {
                    sends.push((old_fk, DeleteKeyNoPropagate));
                }
                sends.push((new_fk, PropagateNullIfNoFkValAvailable));
            } else {
                sends.push((old_fk, DeleteKeyAndPropagate));
            }
        } else if r.value.new.is_some() {
            if new_fk.is_none() {
                tracing::warn!(task = %ctx.task_id(), "skipping a foreign-key join row whose foreign key is null");
                ctx.record_dropped();
                return Ok(());
            }
            sends.push((new_fk, PropagateOnlyIfFkValAvailable));
        }
        let partition = ctx.task_id().partition;
        for (fk, instruction) in sends {
            ctx.forward(Record {
                key: fk,
                value: Subscription {
                    instruction,
                    hash,
                    primary_key: r.key.clone(),
                    primary_partition: partition,
                },
                timestamp: r.timestamp,
                headers: r.headers.clone(),
            });
        }
        Ok(())
    }
}

/// Keeps subscriptions and answers them (Kafka's
/// `SubscriptionReceiveProcessorSupplier` + `SubscriptionJoinProcessorSupplier`).
struct SubscriptionReceive<K, KO, VO> {
    store: String,
    right_store: String,
    right: Getter<KO, VO>,
    fk_serde: SharedSerde<KO>,
    pk_serde: SharedSerde<K>,
    subscription_serde: SharedSerde<Subscription<K>>,
    topic: String,
}

impl<K: Data, KO: Data, VO: Data>
    Processor<Option<KO>, Subscription<K>, K, SubscriptionResponse<VO>>
    for SubscriptionReceive<K, KO, VO>
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, SubscriptionResponse<VO>>,
        r: Record<Option<KO>, Subscription<K>>,
    ) -> Result<()> {
        use Instruction::*;
        let sub = r.value;
        let foreign_value = match &r.key {
            // A left join's row with a null foreign key: answered with nothing.
            None if sub.instruction == PropagateNullIfNoFkValAvailable => None,
            None => {
                tracing::warn!(task = %ctx.task_id(), "skipping a foreign-key subscription with a null foreign key");
                ctx.record_dropped();
                return Ok(());
            }
            Some(fk) => {
                let fk_bytes = serialize_key(&self.fk_serde, &self.topic, "foreign key", fk)?;
                let pk =
                    serialize_key(&self.pk_serde, &self.topic, "primary key", &sub.primary_key)?;
                let mut key = subscription_prefix(&fk_bytes);
                key.extend_from_slice(&pk);
                let value =
                    serialize_key(&self.subscription_serde, &self.topic, "subscription", &sub)?;
                {
                    let mut s = ctx.store(&self.store)?;
                    match sub.instruction {
                        DeleteKeyNoPropagate | DeleteKeyAndPropagate => s.delete(&key)?,
                        _ => s.put(&key, &value)?,
                    }
                }
                let rs = ctx.store(&self.right_store)?;
                (self.right)(&rs, fk)?
            }
        };
        let answer = match sub.instruction {
            DeleteKeyNoPropagate => return Ok(()),
            DeleteKeyAndPropagate => None,
            PropagateNullIfNoFkValAvailable => foreign_value,
            PropagateOnlyIfFkValAvailable if foreign_value.is_none() => return Ok(()),
            PropagateOnlyIfFkValAvailable => foreign_value,
        };
        ctx.forward(Record {
            key: sub.primary_key,
            value: SubscriptionResponse {
                hash: sub.hash,
                foreign_value: answer,
                primary_partition: sub.primary_partition,
            },
            timestamp: r.timestamp,
            headers: r.headers,
        });
        Ok(())
    }
}

/// Right updates → answers to every subscription of the key (Kafka's
/// `ForeignTableJoinProcessorSupplier`).
struct ForeignTableJoin<K, KO> {
    store: String,
    fk_serde: SharedSerde<KO>,
    subscription_serde: SharedSerde<Subscription<K>>,
    topic: String,
}

impl<K: Data, KO: Data, VO: Data> Processor<KO, Change<VO>, K, SubscriptionResponse<VO>>
    for ForeignTableJoin<K, KO>
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, SubscriptionResponse<VO>>,
        r: Record<KO, Change<VO>>,
    ) -> Result<()> {
        let fk = serialize_key(&self.fk_serde, &self.topic, "foreign key", &r.key)?;
        let subscribed = ctx
            .store(&self.store)?
            .prefix_scan(&subscription_prefix(&fk))?;
        for (key, value) in subscribed {
            let sub = self
                .subscription_serde
                .deserialize(&self.topic, Some(&value))
                .map_err(|reason| {
                    StreamsError::IllegalState(format!(
                        "foreign-key subscription store {} holds an unreadable entry at key {key:?}: {reason}",
                        self.store
                    ))
                })?;
            ctx.forward(Record {
                key: sub.primary_key,
                value: SubscriptionResponse {
                    hash: sub.hash,
                    foreign_value: r.value.new.clone(),
                    primary_partition: sub.primary_partition,
                },
                timestamp: r.timestamp,
                headers: r.headers.clone(),
            });
        }
        Ok(())
    }
}

/// Answers → joined rows, stale answers dropped (Kafka's
/// `ResponseJoinProcessorSupplier`).
struct ResponseJoin<K, V, VO, VR> {
    left_store: String,
    left: Getter<K, V>,
    value_serde: SharedSerde<V>,
    topic: String,
    joiner: FkJoiner<V, VO, VR>,
    left_join: bool,
}

impl<K: Data, V: Data, VO: Data, VR: Data> Processor<K, SubscriptionResponse<VO>, K, Option<VR>>
    for ResponseJoin<K, V, VO, VR>
{
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, '_, K, Option<VR>>,
        r: Record<K, SubscriptionResponse<VO>>,
    ) -> Result<()> {
        let current = {
            let s = ctx.store(&self.left_store)?;
            (self.left)(&s, &r.key)?
        };
        let current_hash = match &current {
            Some(v) => Some(hash_value(&self.value_serde, &self.topic, v)?),
            None => None,
        };
        if current_hash != r.value.hash {
            // The row changed after subscribing; its newer subscription answers.
            tracing::trace!(task = %ctx.task_id(), "dropping a stale foreign-key join response");
            ctx.record_dropped();
            return Ok(());
        }
        let result = match (current, r.value.foreign_value) {
            (Some(l), Some(fv)) => Some((self.joiner)(&l, Some(&fv))),
            (Some(l), None) if self.left_join => Some((self.joiner)(&l, None)),
            _ => None,
        };
        ctx.forward(Record {
            key: r.key,
            value: result,
            timestamp: r.timestamp,
            headers: r.headers,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_matches_reference_vectors() {
        // From the reference implementation (Python mmh3.hash_bytes).
        let hex = |b: [u8; 16]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        for (data, seed, want) in [
            (&b""[..], 0, "00000000000000000000000000000000"),
            (b"hello", 0, "029bbd41b3a7d8cb191dae486a901e5b"),
            (b"hello", HASH_SEED, "64e71999f3b4bf30c6d1017485ea6a56"),
            (
                b"The quick brown fox jumps over the lazy dog",
                HASH_SEED,
                "c8990faf21594ce72667f01dc85ef8b7",
            ),
            (
                b"0123456789abcdef0",
                HASH_SEED,
                "b6168c749a06e385b8ab3835280a8cbc",
            ),
            (b"abcdefghi", 7, "fb81a2810402f4e25d0574ec34e41fec"),
        ] {
            assert_eq!(
                hex(murmur3_x64_128(data, seed)),
                want,
                "{data:?} seed {seed}"
            );
        }
    }

    #[test]
    fn wrappers_round_trip_and_newer_versions_are_refused() {
        let sub = SubscriptionSerde {
            primary_key: Serdes::string(),
        };
        for hash in [None, Some([7u8; 16])] {
            let s = Subscription {
                instruction: Instruction::PropagateOnlyIfFkValAvailable,
                hash,
                primary_key: "order-1".to_string(),
                primary_partition: 3,
            };
            let b = sub.serialize("t", &s).unwrap().unwrap();
            let back = sub.deserialize("t", Some(&b)).unwrap();
            assert_eq!(
                (
                    back.instruction,
                    back.hash,
                    back.primary_key,
                    back.primary_partition
                ),
                (s.instruction, s.hash, s.primary_key, 3)
            );
            let mut newer = b.to_vec();
            newer[0] = WRAPPER_VERSION + 1;
            let e = sub.deserialize("t", Some(&newer)).unwrap_err();
            assert!(e.contains("newer than this application reads"), "{e}");
        }
        assert!(sub
            .deserialize("t", Some(&[0, 9, 0, 0, 0, 0, 0]))
            .unwrap_err()
            .contains("instruction 9"));
        assert!(sub
            .deserialize("t", Some(&[0, 1, 1, 2]))
            .unwrap_err()
            .contains("truncated"));
        let resp = ResponseSerde {
            foreign_value: Serdes::i64(),
        };
        for (hash, fv) in [(Some([1u8; 16]), Some(42i64)), (None, None)] {
            let r = SubscriptionResponse {
                hash,
                foreign_value: fv,
                primary_partition: 5,
            };
            let b = resp.serialize("t", &r).unwrap().unwrap();
            let back = resp.deserialize("t", Some(&b)).unwrap();
            assert_eq!(
                (back.hash, back.foreign_value, back.primary_partition),
                (hash, fv, 5)
            );
        }
    }

    /// An answer computed for a row's earlier value (the row changed while
    /// it was on its way) must not be joined with the current value.
    #[test]
    fn a_stale_answer_is_dropped_and_counted() {
        use crate::{Consumed, Produced, StreamsBuilder, TopologyTestDriver};
        let b = StreamsBuilder::new();
        let orders = b.table_with(
            "orders",
            Consumed::with(Serdes::string(), Serdes::string()),
            Materialized::default().with_caching_disabled(),
        );
        let customers = b.table_with(
            "customers",
            Consumed::with(Serdes::string(), Serdes::string()),
            Materialized::default().with_caching_disabled(),
        );
        orders
            .join_on_foreign_key(
                &customers,
                |_, v: &String| v.split_once(':').map(|(c, _)| c.to_string()),
                |o: &String, c: &String| format!("{o}/{c}"),
                Materialized::default()
                    .with_value_serde(Serdes::string())
                    .with_caching_disabled(),
            )
            .to_upsert_stream()
            .to_with("out", Produced::with(Serdes::string(), Serdes::string()));
        let t = b.build().unwrap();
        let response = t
            .repartition_topics()
            .find(|t| t.contains("RESPONSE"))
            .unwrap()
            .to_string();
        let mut d = TopologyTestDriver::new(t).unwrap();
        let response = format!("{}-{response}", d.application_id());
        let put = |d: &mut TopologyTestDriver, topic: &str, k: &str, v: &str| {
            d.input_topic(topic, Serdes::string(), Serdes::string())
                .pipe(&k.to_string(), &v.to_string(), 1)
                .unwrap()
        };
        put(&mut d, "customers", "c1", "Alice");
        put(&mut d, "orders", "o1", "c1:book");
        let out = |d: &mut TopologyTestDriver| {
            d.read_output("out", &Serdes::string(), &Serdes::string())
                .unwrap()
        };
        assert_eq!(out(&mut d), vec![("o1".into(), "c1:book/Alice".into())]);
        let answer = |value: &str| {
            let hash = hash_value(&Serdes::string(), "t", &value.to_string()).unwrap();
            ResponseSerde {
                foreign_value: Serdes::string(),
            }
            .serialize(
                "t",
                &SubscriptionResponse {
                    hash: Some(hash),
                    foreign_value: Some("Mallory".to_string()),
                    primary_partition: 0,
                },
            )
            .unwrap()
        };
        d.pipe_raw(&response, Some(Bytes::from("o1")), answer("c1:pen"), 2)
            .unwrap();
        assert_eq!(out(&mut d), vec![], "an answer for an older value is stale");
        assert_eq!(d.skipped_records(), 1);
        d.pipe_raw(&response, Some(Bytes::from("o1")), answer("c1:book"), 3)
            .unwrap();
        assert_eq!(
            out(&mut d),
            vec![("o1".into(), "c1:book/Mallory".into())],
            "an answer for the current value is joined"
        );
    }

    #[test]
    fn a_foreign_keys_subscriptions_are_one_prefix() {
        // "a" must not match the subscriptions of "ab": the length comes first.
        let a = subscription_prefix(b"a");
        let mut ab_key = subscription_prefix(b"ab");
        ab_key.extend_from_slice(b"pk");
        assert!(!ab_key.starts_with(&a));
        let mut a_key = subscription_prefix(b"a");
        a_key.extend_from_slice(b"bpk");
        assert!(a_key.starts_with(&a));
    }
}
