//! Kafka's `Serdes.ListSerde` (KIP-466) format, so lists written by Rill and
//! by Kafka Streams read each other.
//!
//! Layout (big-endian): one strategy byte, `0` constant-size (the inner serde
//! has a [`fixed_size`](Serde::fixed_size): Kafka's `Short`, `Integer`,
//! `Float`, `Long`, `Double`, `UUID`) or `1` variable-size. Constant-size:
//! the count of null entries and their indexes (`i32` each), the entry count,
//! then each non-null entry's bytes. Variable-size: the entry count, then per
//! entry its length (`-1` for null) and bytes.
//!
//! Invariant: reading never trusts a count or length it has not checked
//! against the bytes left; a short, negative or impossible one is an error
//! naming what was wrong, never a panic or a huge allocation.

use bytes::{BufMut, Bytes, BytesMut};

use super::{Serde, SharedSerde};

const CONSTANT_SIZE: u8 = 0;
const VARIABLE_SIZE: u8 = 1;
/// A null entry's length in the variable-size layout.
const NULL_ENTRY: i32 = -1;
/// Kafka's words for bytes that end before the list does.
const PREMATURE_END: &str = "End of the stream was reached prematurely";

pub(super) struct ListSerde<T> {
    inner: SharedSerde<T>,
}

impl<T> ListSerde<T> {
    pub(super) fn new(inner: SharedSerde<T>) -> Self {
        Self { inner }
    }
}

fn len_i32(n: usize, what: &str) -> Result<i32, String> {
    i32::try_from(n).map_err(|_| format!("list {what} {n} does not fit Kafka's 32-bit length"))
}

/// A cursor over the bytes being read, failing with Kafka's words when they
/// end early.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(PREMATURE_END.to_string());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn i32(&mut self) -> Result<i32, String> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A count of items of at least `min_item` bytes each: non-negative and
    /// no more than the bytes left could hold.
    fn count(&mut self, what: &str, min_item: usize) -> Result<usize, String> {
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| format!("list {what} is negative ({n})"))?;
        if n.saturating_mul(min_item) > self.0.len() {
            return Err(format!(
                "list {what} {n} is more than the {} bytes left can hold",
                self.0.len()
            ));
        }
        Ok(n)
    }
}

impl<T: Send + Sync + 'static> Serde<Vec<T>> for ListSerde<T> {
    fn serialize(&self, topic: &str, data: &Vec<T>) -> Result<Option<Bytes>, String> {
        let entries = data
            .iter()
            .enumerate()
            .map(|(i, v)| {
                self.inner
                    .serialize(topic, v)
                    .map_err(|e| format!("list entry {i}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let count = len_i32(entries.len(), "size")?;
        let payload: usize = entries.iter().flatten().map(Bytes::len).sum();
        let mut out = BytesMut::with_capacity(1 + 8 + 4 * entries.len() + payload);
        match self.inner.fixed_size() {
            Some(size) => {
                out.put_u8(CONSTANT_SIZE);
                let nulls: Vec<usize> = (0..entries.len())
                    .filter(|&i| entries[i].is_none())
                    .collect();
                out.put_i32(nulls.len() as i32); // ≤ count, which fits
                for i in nulls {
                    out.put_i32(i as i32);
                }
                out.put_i32(count);
                for (i, e) in entries.iter().enumerate() {
                    if let Some(b) = e {
                        if b.len() != size {
                            return Err(format!(
                                "list entry {i} is {} bytes, but its serde's fixed size is {size}",
                                b.len()
                            ));
                        }
                        out.put_slice(b);
                    }
                }
            }
            None => {
                out.put_u8(VARIABLE_SIZE);
                out.put_i32(count);
                for e in &entries {
                    match e {
                        Some(b) => {
                            out.put_i32(len_i32(b.len(), "entry length")?);
                            out.put_slice(b);
                        }
                        None => out.put_i32(NULL_ENTRY),
                    }
                }
            }
        }
        Ok(Some(out.freeze()))
    }

    fn deserialize(&self, topic: &str, data: Option<&[u8]>) -> Result<Vec<T>, String> {
        let mut r = Reader(super::need(data)?);
        let flag = r.take(1)?[0];
        let entry = |i: usize, bytes: Option<&[u8]>| {
            self.inner
                .deserialize(topic, bytes)
                .map_err(|e| format!("list entry {i}: {e}"))
        };
        match flag {
            CONSTANT_SIZE => {
                let Some(size) = self.inner.fixed_size() else {
                    return Err(
                        "the list was written with constant-size entries, but its entry serde has \
                         no fixed size"
                            .to_string(),
                    );
                };
                let null_count = r.count("null index count", 4)?;
                let mut nulls = Vec::with_capacity(null_count);
                for _ in 0..null_count {
                    nulls.push(r.i32()?);
                }
                nulls.sort_unstable();
                nulls.dedup();
                let count = r.count("size", 0)?;
                let null_entries = nulls
                    .iter()
                    .filter(|&&i| usize::try_from(i).is_ok_and(|i| i < count))
                    .count();
                if (count - null_entries).saturating_mul(size) > r.0.len() {
                    return Err(PREMATURE_END.to_string());
                }
                let mut out = Vec::with_capacity(count);
                for i in 0..count {
                    if nulls.binary_search(&(i as i32)).is_ok() {
                        out.push(entry(i, None)?);
                    } else {
                        out.push(entry(i, Some(r.take(size)?))?);
                    }
                }
                Ok(out)
            }
            VARIABLE_SIZE => {
                // Every entry has at least its 4-byte length.
                let count = r.count("size", 4)?;
                let mut out = Vec::with_capacity(count);
                for i in 0..count {
                    match r.i32()? {
                        NULL_ENTRY => out.push(entry(i, None)?),
                        n => {
                            let n = usize::try_from(n)
                                .map_err(|_| format!("list entry {i} has length {n}"))?;
                            out.push(entry(i, Some(r.take(n)?))?);
                        }
                    }
                }
                Ok(out)
            }
            other => Err(format!(
                "Invalid serialization strategy flag value: {other} (Kafka's lists use 0 or 1)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{KafkaSerde, Serdes};
    use uuid::Uuid;

    #[test]
    fn lists_round_trip_with_null_entries_in_both_layouts() {
        let ints = Vec::<Option<i64>>::serde();
        let v = vec![Some(1), None, Some(-1), None];
        let b = ints.serialize("t", &v).unwrap().unwrap();
        assert_eq!(b[0], 0, "constant-size");
        assert_eq!(b.len(), 1 + 4 + 2 * 4 + 4 + 2 * 8);
        assert_eq!(ints.deserialize("t", Some(&b)).unwrap(), v);

        let strings = Vec::<Option<String>>::serde();
        let v = vec![Some(String::new()), None, Some("é".into())];
        let b = strings.serialize("t", &v).unwrap().unwrap();
        assert_eq!(b[0], 1, "variable-size");
        assert_eq!(strings.deserialize("t", Some(&b)).unwrap(), v);

        let ids = Vec::<Uuid>::serde();
        let v = vec![Uuid::nil(), Uuid::from_u128(7)];
        let b = ids.serialize("t", &v).unwrap().unwrap();
        assert_eq!((b[0], b.len()), (0, 1 + 4 + 4 + 2 * 36));
        assert_eq!(ids.deserialize("t", Some(&b)).unwrap(), v);

        let empty = Vec::<i32>::serde()
            .serialize("t", &vec![])
            .unwrap()
            .unwrap();
        assert_eq!(&empty[..], &[0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let nested = Vec::<Vec<i32>>::serde();
        let v = vec![vec![1, 2], vec![]];
        let b = nested.serialize("t", &v).unwrap().unwrap();
        assert_eq!(nested.deserialize("t", Some(&b)).unwrap(), v);
    }

    #[test]
    fn bad_lists_are_refused_in_one_sentence() {
        let ints = Serdes::list(Serdes::i32());
        let err = |bytes: &[u8]| ints.deserialize("t", Some(bytes)).unwrap_err();
        assert!(err(&[]).contains("prematurely"));
        assert!(err(&[2]).starts_with("Invalid serialization strategy flag value: 2"));
        // A null entry where the entry serde is not nullable.
        let with_null = Serdes::list(Serdes::nullable(Serdes::i32()))
            .serialize("t", &vec![None])
            .unwrap()
            .unwrap();
        assert!(
            err(&with_null).starts_with("list entry 0: null"),
            "{}",
            err(&with_null)
        );
        // Counts that the bytes cannot hold: no huge allocation, no panic.
        assert!(err(&[0, 0x7f, 0xff, 0xff, 0xff]).contains("bytes left"));
        assert!(err(&[0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff]).contains("prematurely"));
        assert!(err(&[1, 0xff, 0xff, 0xff, 0xfe]).contains("negative"));
        assert!(err(&[1, 0, 0, 0, 1, 0, 0, 0, 9, 1]).contains("prematurely"));
        assert!(err(&[1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe]).contains("length -2"));
        // Constant-size bytes for an entry serde without a fixed size.
        let strings = Serdes::list(Serdes::string());
        let e = strings
            .deserialize("t", Some(&[0, 0, 0, 0, 0, 0, 0, 0, 0]))
            .unwrap_err();
        assert!(e.contains("no fixed size"), "{e}");
        assert!(ints.deserialize("t", None).unwrap_err().starts_with("null"));
    }
}
