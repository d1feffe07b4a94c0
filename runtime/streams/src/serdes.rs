//! Serdes: how keys and values become bytes and back (Kafka's `Serde`).
//!
//! A serde sees the record's topic, like Kafka's, and `None` for a null
//! key or value. Non-nullable serdes refuse null with an error (it becomes a
//! deserialization error naming topic, partition and offset); wrap one in
//! [`Serdes::nullable`] to get `Option<T>`. Integers are big-endian, as
//! Kafka's `IntegerSerializer` / `LongSerializer` write them, so Rill and
//! Kafka Streams apps can read each other's topics.

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

mod list;
mod typed;
pub use typed::{Json, KafkaSerde, KafkaSerialize, Protobuf};

/// Converts `T` to and from bytes.
pub trait Serde<T>: Send + Sync + 'static {
    /// Encodes `data` for `topic`; `Ok(None)` writes a null. An `Err` message becomes a
    /// [`StreamsError::Serialization`](crate::StreamsError::Serialization).
    fn serialize(&self, topic: &str, data: &T) -> Result<Option<Bytes>, String>;
    /// Encodes `data`, which the caller no longer needs (a sink's record):
    /// serdes whose type already holds the bytes (`String`, `Bytes`)
    /// override this to hand them over instead of copying.
    fn serialize_owned(&self, topic: &str, data: T) -> Result<Option<Bytes>, String> {
        self.serialize(topic, &data)
    }
    /// Decodes bytes read from `topic`; `data` is `None` for a null key or value. An `Err` message
    /// becomes a deserialization error, handled per `default.deserialization.exception.handler`.
    fn deserialize(&self, topic: &str, data: Option<&[u8]>) -> Result<T, String>;
    /// Deserializes from the consumed buffer; serdes that can share it
    /// (bytes) override this to avoid a copy.
    fn deserialize_bytes(&self, topic: &str, data: Option<&Bytes>) -> Result<T, String> {
        self.deserialize(topic, data.map(|b| &b[..]))
    }
    /// The length of every non-null value this serde writes, when it is
    /// fixed: `Some` for Kafka's fixed-length serdes (`Short` 2, `Integer`
    /// and `Float` 4, `Long` and `Double` 8, `UUID` 36) and nullable wrappers
    /// of them. [`Serdes::list`] then writes entries without length prefixes
    /// and nulls as an index list, as Kafka's `ListSerializer` does for those
    /// serdes.
    fn fixed_size(&self) -> Option<usize> {
        None
    }
}

/// A shareable serde.
pub type SharedSerde<T> = Arc<dyn Serde<T>>;

/// The built-in serdes.
pub struct Serdes;

impl Serdes {
    /// Passes the bytes through unchanged (Kafka's `Serdes.ByteArray`); null is an error.
    pub fn bytes() -> SharedSerde<Bytes> {
        Arc::new(BytesSerde)
    }
    /// UTF-8 strings (Kafka's `Serdes.String`); invalid UTF-8 or null is an error.
    pub fn string() -> SharedSerde<String> {
        Arc::new(StringSerde)
    }
    /// 4-byte big-endian integers (Kafka's `Serdes.Integer`); null or another length is an error.
    pub fn i32() -> SharedSerde<i32> {
        Arc::new(I32Serde)
    }
    /// 8-byte big-endian integers (Kafka's `Serdes.Long`); null or another length is an error.
    pub fn i64() -> SharedSerde<i64> {
        Arc::new(I64Serde)
    }
    /// 2-byte big-endian integers (Kafka's `Serdes.Short`); null or another length is an error.
    pub fn i16() -> SharedSerde<i16> {
        Arc::new(I16Serde)
    }
    /// IEEE 754 single precision, 4 bytes big-endian (Kafka's `Serdes.Float`:
    /// `Float.floatToRawIntBits`); null or another length is an error.
    pub fn f32() -> SharedSerde<f32> {
        Arc::new(F32Serde)
    }
    /// IEEE 754 double precision, 8 bytes big-endian (Kafka's `Serdes.Double`:
    /// `Double.doubleToLongBits`, so every NaN is written as the canonical
    /// NaN); null or another length is an error.
    ///
    /// ```
    /// let bytes = rill_streams::Serdes::f64().serialize("t", &1.5).unwrap().unwrap();
    /// assert_eq!(&bytes[..], &[0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
    /// ```
    pub fn f64() -> SharedSerde<f64> {
        Arc::new(F64Serde)
    }
    /// One byte, `01` or `00` (Kafka's `Serdes.Boolean`); null, another
    /// length or another byte is an error.
    pub fn bool() -> SharedSerde<bool> {
        Arc::new(typed::BoolSerde)
    }
    /// UUIDs as their 36-character lowercase text (Kafka's `Serdes.UUID`).
    pub fn uuid() -> SharedSerde<uuid::Uuid> {
        Arc::new(typed::UuidSerde)
    }
    /// Byte vectors unchanged (Kafka's `Serdes.ByteArray`); null is an error.
    pub fn byte_array() -> SharedSerde<Vec<u8>> {
        Arc::new(typed::VecSerde)
    }
    /// JSON through serde_json.
    pub fn json<T>() -> SharedSerde<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
    {
        Arc::new(JsonSerde(PhantomData))
    }
    /// Null-tolerant: null bytes are `None` and `None` is written as null.
    pub fn nullable<T: Send + Sync + 'static>(inner: SharedSerde<T>) -> SharedSerde<Option<T>> {
        Arc::new(NullableSerde(inner))
    }
    /// Ignores the bytes entirely (`()`); for keys an app does not use.
    pub fn unit() -> SharedSerde<()> {
        Arc::new(UnitSerde)
    }
    /// Lists of `inner`'s values in the format of Kafka's `Serdes.ListSerde`
    /// (KIP-466), so Rill and Kafka Streams read each other's lists. A null
    /// entry is an entry `inner` writes as null: `Serdes::list(Serdes::nullable(Serdes::i32()))`
    /// reads Java's `[1, null]` as `vec![Some(1), None]`, while a list of a
    /// non-nullable serde refuses one. `Vec<T>` for any `T: KafkaSerde`
    /// infers this serde (except `Vec<u8>`, which is `ByteArray`).
    ///
    /// ```
    /// use rill_streams::Serdes;
    /// let s = Serdes::list(Serdes::nullable(Serdes::i32()));
    /// let b = s.serialize("t", &vec![Some(7), None]).unwrap().unwrap();
    /// // Kafka's ListSerializer over IntegerSerializer: the constant-size flag,
    /// // one null at index 1, two entries, 7's four bytes.
    /// assert_eq!(&b[..], &[0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 7]);
    /// assert_eq!(s.deserialize("t", Some(&b)).unwrap(), vec![Some(7), None]);
    /// ```
    pub fn list<T: Send + Sync + 'static>(inner: SharedSerde<T>) -> SharedSerde<Vec<T>> {
        Arc::new(list::ListSerde::new(inner))
    }
}

fn need(data: Option<&[u8]>) -> Result<&[u8], String> {
    data.ok_or_else(|| "null, but the serde is not nullable (use Serdes::nullable)".to_string())
}

struct BytesSerde;
impl Serde<Bytes> for BytesSerde {
    fn serialize(&self, _: &str, data: &Bytes) -> Result<Option<Bytes>, String> {
        Ok(Some(data.clone()))
    }
    fn serialize_owned(&self, _: &str, data: Bytes) -> Result<Option<Bytes>, String> {
        Ok(Some(data))
    }
    fn deserialize(&self, _: &str, data: Option<&[u8]>) -> Result<Bytes, String> {
        Ok(Bytes::copy_from_slice(need(data)?))
    }
    fn deserialize_bytes(&self, _: &str, data: Option<&Bytes>) -> Result<Bytes, String> {
        data.cloned().ok_or_else(|| need(None).unwrap_err())
    }
}

struct StringSerde;
impl Serde<String> for StringSerde {
    fn serialize(&self, _: &str, data: &String) -> Result<Option<Bytes>, String> {
        Ok(Some(Bytes::copy_from_slice(data.as_bytes())))
    }
    fn serialize_owned(&self, _: &str, data: String) -> Result<Option<Bytes>, String> {
        Ok(Some(Bytes::from(data.into_bytes())))
    }
    fn deserialize(&self, _: &str, data: Option<&[u8]>) -> Result<String, String> {
        String::from_utf8(need(data)?.to_vec()).map_err(|e| format!("not UTF-8: {e}"))
    }
}

/// A fixed-width number in Kafka's big-endian layout.
macro_rules! int_serde {
    ($name:ident, $t:ty, $n:expr) => {
        struct $name;
        impl Serde<$t> for $name {
            fn serialize(&self, _: &str, data: &$t) -> Result<Option<Bytes>, String> {
                Ok(Some(Bytes::copy_from_slice(&data.to_be_bytes())))
            }
            fn fixed_size(&self) -> Option<usize> {
                Some($n)
            }
            fn deserialize(&self, _: &str, data: Option<&[u8]>) -> Result<$t, String> {
                let d = need(data)?;
                let arr: [u8; $n] = d.try_into().map_err(|_| {
                    format!(
                        "expected {} bytes for {}, got {}",
                        $n,
                        stringify!($t),
                        d.len()
                    )
                })?;
                Ok(<$t>::from_be_bytes(arr))
            }
        }
    };
}
int_serde!(I32Serde, i32, 4);
int_serde!(I64Serde, i64, 8);
int_serde!(I16Serde, i16, 2);
int_serde!(F32Serde, f32, 4);
int_serde!(F64Bits, f64, 8);

/// Kafka's `DoubleSerializer` writes `Double.doubleToLongBits`: every NaN as
/// the canonical `0x7ff8000000000000` (its `FloatSerializer` keeps a NaN's
/// raw bits). Reading keeps whatever bits were written.
struct F64Serde;
impl Serde<f64> for F64Serde {
    fn serialize(&self, topic: &str, data: &f64) -> Result<Option<Bytes>, String> {
        let canonical = if data.is_nan() { f64::NAN } else { *data };
        F64Bits.serialize(topic, &canonical)
    }
    fn deserialize(&self, topic: &str, data: Option<&[u8]>) -> Result<f64, String> {
        F64Bits.deserialize(topic, data)
    }
    fn fixed_size(&self) -> Option<usize> {
        F64Bits.fixed_size()
    }
}

struct JsonSerde<T>(PhantomData<fn() -> T>);
impl<T> Serde<T> for JsonSerde<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    fn serialize(&self, _: &str, data: &T) -> Result<Option<Bytes>, String> {
        serde_json::to_vec(data)
            .map(|v| Some(Bytes::from(v)))
            .map_err(|e| format!("JSON: {e}"))
    }
    fn deserialize(&self, _: &str, data: Option<&[u8]>) -> Result<T, String> {
        serde_json::from_slice(need(data)?).map_err(|e| format!("JSON: {e}"))
    }
}

struct NullableSerde<T>(SharedSerde<T>);
impl<T: Send + Sync + 'static> Serde<Option<T>> for NullableSerde<T> {
    fn serialize(&self, topic: &str, data: &Option<T>) -> Result<Option<Bytes>, String> {
        match data {
            Some(d) => self.0.serialize(topic, d),
            None => Ok(None),
        }
    }
    fn serialize_owned(&self, topic: &str, data: Option<T>) -> Result<Option<Bytes>, String> {
        match data {
            Some(d) => self.0.serialize_owned(topic, d),
            None => Ok(None),
        }
    }
    fn deserialize(&self, topic: &str, data: Option<&[u8]>) -> Result<Option<T>, String> {
        data.map(|d| self.0.deserialize(topic, Some(d))).transpose()
    }
    fn deserialize_bytes(&self, topic: &str, data: Option<&Bytes>) -> Result<Option<T>, String> {
        data.map(|d| self.0.deserialize_bytes(topic, Some(d)))
            .transpose()
    }
    fn fixed_size(&self) -> Option<usize> {
        self.0.fixed_size()
    }
}

/// A serde that refuses everything: stands in where the builder already
/// recorded a missing-serde error, so `build()` reports it instead of a panic.
pub(crate) fn missing<T: Send + Sync + 'static>() -> SharedSerde<T> {
    Arc::new(MissingSerde(PhantomData))
}

struct MissingSerde<T>(PhantomData<fn() -> T>);
impl<T: 'static> Serde<T> for MissingSerde<T> {
    fn serialize(&self, topic: &str, _: &T) -> Result<Option<Bytes>, String> {
        Err(format!("no serde configured for {topic}"))
    }
    fn deserialize(&self, topic: &str, _: Option<&[u8]>) -> Result<T, String> {
        Err(format!("no serde configured for {topic}"))
    }
}

struct UnitSerde;
impl Serde<()> for UnitSerde {
    fn serialize(&self, _: &str, _: &()) -> Result<Option<Bytes>, String> {
        Ok(None)
    }
    fn deserialize(&self, _: &str, _: Option<&[u8]>) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_kafkas_bytes() {
        // Java: new DoubleSerializer().serialize("t", 1.5), FloatSerializer 1.5f,
        // ShortSerializer (short) 258.
        let d = Serdes::f64().serialize("t", &1.5).unwrap().unwrap();
        assert_eq!(&d[..], &[0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
        let f = Serdes::f32().serialize("t", &1.5).unwrap().unwrap();
        assert_eq!(&f[..], &[0x3f, 0xc0, 0, 0]);
        let s = Serdes::i16().serialize("t", &258).unwrap().unwrap();
        assert_eq!(&s[..], &[1, 2]);
        assert_eq!(Serdes::f64().deserialize("t", Some(&d)), Ok(1.5));
        assert_eq!(
            Serdes::f64().deserialize("t", Some(&[1, 2, 3])),
            Err("expected 8 bytes for f64, got 3".to_string())
        );
        assert!(Serdes::i16().deserialize("t", None).is_err());
    }

    #[test]
    fn serializing_by_value_gives_the_same_bytes_and_hands_the_buffer_over() {
        let s = Serdes::string();
        let word = String::from("rill");
        let at = word.as_ptr();
        let owned = s.serialize_owned("t", word).unwrap().unwrap();
        assert_eq!(
            owned,
            s.serialize("t", &"rill".to_string()).unwrap().unwrap()
        );
        assert_eq!(owned.as_ptr(), at, "the String's buffer, not a copy");
        let b = Serdes::bytes();
        let bytes = Bytes::from_static(b"xy");
        assert_eq!(b.serialize_owned("t", bytes.clone()).unwrap(), Some(bytes));
        let n = Serdes::nullable(Serdes::string());
        assert_eq!(n.serialize_owned("t", None).unwrap(), None);
        assert_eq!(
            n.serialize_owned("t", Some("a".into())).unwrap(),
            Some(Bytes::from_static(b"a"))
        );
        // A serde without its own serialize_owned serializes by reference.
        let i = Serdes::i64();
        assert_eq!(
            i.serialize_owned("t", 7).unwrap(),
            i.serialize("t", &7).unwrap()
        );
    }

    #[test]
    fn integers_are_big_endian_like_kafka() {
        let b = Serdes::i64().serialize("t", &1).unwrap().unwrap();
        assert_eq!(&b[..], &[0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(Serdes::i64().deserialize("t", Some(&b)).unwrap(), 1);
        let err = Serdes::i32().deserialize("t", Some(&[1, 2])).unwrap_err();
        assert!(err.contains("expected 4 bytes"), "{err}");
    }

    #[test]
    fn null_needs_a_nullable_serde() {
        assert!(Serdes::string().deserialize("t", None).is_err());
        let n = Serdes::nullable(Serdes::string());
        assert_eq!(n.deserialize("t", None).unwrap(), None);
        assert_eq!(n.serialize("t", &None).unwrap(), None);
        assert_eq!(
            n.deserialize("t", Some(b"x")).unwrap(),
            Some("x".to_string())
        );
        assert!(Serdes::string().deserialize("t", Some(&[0xff])).is_err());
    }
}
