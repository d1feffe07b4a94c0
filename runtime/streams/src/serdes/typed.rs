//! Serdes from types (the Scala DSL's implicit serdes): a type that
//! implements [`KafkaSerde`] needs no `Consumed`, `Produced`, `Grouped` or
//! `Materialized` to be read and written; the DSL's one-argument forms
//! (`stream`, `to`, `group_by`, `count("store")`) take its serde.
//!
//! Invariant: every impl writes the bytes Kafka's own serializer for the
//! matching Java type writes (big-endian numbers, UTF-8 strings, `0x01`/`0x00`
//! booleans, UUIDs as their 36-character text, null for `()` and `None`), so
//! Rill and Kafka Streams apps read each other's topics. Kafka has no serde
//! for `i8`, unsigned or 128-bit integers or `char`, so neither does this
//! trait: any format for them would be Rill's alone.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use bytes::Bytes;

use super::{need, Serde, Serdes, SharedSerde};

/// A type with a default serde in Kafka's byte format, so the DSL can infer
/// it (`builder.stream::<String, i64>("in")`, `.to("out")`).
///
/// | Rust type | Kafka serde | bytes |
/// |---|---|---|
/// | `String` | `Serdes.String` | UTF-8 |
/// | `i16`, `i32`, `i64` | `Short`, `Integer`, `Long` | big-endian two's complement |
/// | `f32`, `f64` | `Float`, `Double` | IEEE 754, big-endian (a double's NaN canonical) |
/// | `bool` | `Boolean` | `01` / `00` |
/// | `uuid::Uuid` | `UUID` | the 36-character lowercase hyphenated text |
/// | `Vec<u8>`, `Bytes` | `ByteArray`, `Bytes` | unchanged |
/// | `Vec<T>` (`T` not `u8`) | `ListSerde` (KIP-466) over `T`'s | Kafka's list format; `Vec<Option<T>>` for null entries |
/// | `()` | `Void` | null (reading ignores the bytes) |
/// | `Option<T>` | (nullable) | `None` is null, else `T`'s bytes |
/// | [`Json<T>`] | (Jackson) | compact JSON (serde_json) |
/// | [`Protobuf<T>`] | protobuf-java `toByteArray` | protobuf binary, no schema-registry framing |
///
/// Your own type: implement it with any serde, or wrap it in [`Json`] or
/// [`Protobuf`]:
///
/// ```
/// use rill_streams::{KafkaSerde, Serdes, SharedSerde};
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize)]
/// struct Order { id: u64, item: String }
///
/// impl KafkaSerde for Order {
///     fn serde() -> SharedSerde<Self> {
///         Serdes::json()
///     }
/// }
/// let bytes = Order::serde().serialize("t", &Order { id: 1, item: "pen".into() }).unwrap();
/// assert_eq!(bytes.as_deref(), Some(&br#"{"id":1,"item":"pen"}"#[..]));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no default serde (it does not implement KafkaSerde)",
    label = "no default serde for `{Self}`",
    note = "wrap it (Json<{Self}>, Protobuf<{Self}>), implement KafkaSerde for it, or pass serdes \
            explicitly (stream_with + Consumed::with, to_with + Produced::with, group_by_with + \
            Grouped::with, Materialized::with_value_serde); windowed keys: Produced::time_windowed \
            or Produced::session_windowed"
)]
pub trait KafkaSerde: Sized + Send + Sync + 'static {
    /// This type's serde.
    fn serde() -> SharedSerde<Self>;
}

/// A type a sink can write with a default serde: every [`KafkaSerde`] type,
/// and `&'static str` (written as UTF-8 like `String`; it cannot be read back).
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no default serializer (it does not implement KafkaSerialize)",
    label = "no default serializer for `{Self}`",
    note = "implement KafkaSerde for it, wrap it (Json<{Self}>), or pass serdes explicitly \
            (to_with + Produced::with)"
)]
pub trait KafkaSerialize: Sized + Send + Sync + 'static {
    /// A serde that writes this type (reading may be refused).
    fn serializer() -> SharedSerde<Self>;
}

impl<T: KafkaSerde> KafkaSerialize for T {
    fn serializer() -> SharedSerde<T> {
        T::serde()
    }
}

/// `&'static str` keys and values (literals) are written as UTF-8, like
/// Kafka's `StringSerializer`:
///
/// ```
/// use rill_streams::KafkaSerialize;
/// let bytes = <&'static str>::serializer().serialize("t", &"é").unwrap().unwrap();
/// assert_eq!(&bytes[..], &[0xc3, 0xa9]);
/// ```
impl KafkaSerialize for &'static str {
    fn serializer() -> SharedSerde<Self> {
        Arc::new(StaticStrSerde)
    }
}

impl KafkaSerialize for Option<&'static str> {
    fn serializer() -> SharedSerde<Self> {
        Serdes::nullable(Arc::new(StaticStrSerde))
    }
}

struct StaticStrSerde;
impl Serde<&'static str> for StaticStrSerde {
    fn serialize(&self, _: &str, data: &&'static str) -> Result<Option<Bytes>, String> {
        Ok(Some(Bytes::from_static(data.as_bytes())))
    }
    fn deserialize(&self, topic: &str, _: Option<&[u8]>) -> Result<&'static str, String> {
        Err(format!(
            "&'static str is write-only: read {topic} as String"
        ))
    }
}

/// UTF-8, as Kafka's `StringSerializer`:
///
/// ```
/// use rill_streams::KafkaSerde;
/// let s = String::serde();
/// assert_eq!(&s.serialize("t", &"rill".to_string()).unwrap().unwrap()[..], b"rill");
/// assert_eq!(s.deserialize("t", Some(&[0xc3, 0xa9])).unwrap(), "é");
/// ```
impl KafkaSerde for String {
    fn serde() -> SharedSerde<Self> {
        Serdes::string()
    }
}

/// Big-endian, as Kafka's `ShortSerializer`, `IntegerSerializer` and
/// `LongSerializer`:
///
/// ```
/// use rill_streams::KafkaSerde;
/// assert_eq!(&i16::serde().serialize("t", &258).unwrap().unwrap()[..], &[1, 2]);
/// assert_eq!(&i16::serde().serialize("t", &-2).unwrap().unwrap()[..], &[0xff, 0xfe]);
/// assert_eq!(&i32::serde().serialize("t", &1).unwrap().unwrap()[..], &[0, 0, 0, 1]);
/// assert_eq!(&i64::serde().serialize("t", &-1).unwrap().unwrap()[..], &[0xff; 8]);
/// assert_eq!(i64::serde().deserialize("t", Some(&[0, 0, 0, 0, 0, 0, 1, 0])).unwrap(), 256);
/// ```
impl KafkaSerde for i64 {
    fn serde() -> SharedSerde<Self> {
        Serdes::i64()
    }
}

impl KafkaSerde for i32 {
    fn serde() -> SharedSerde<Self> {
        Serdes::i32()
    }
}

impl KafkaSerde for i16 {
    fn serde() -> SharedSerde<Self> {
        Serdes::i16()
    }
}

/// IEEE 754, big-endian, as Kafka's `FloatSerializer` and
/// `DoubleSerializer`: a float's raw bits (`floatToRawIntBits`: a NaN keeps
/// its payload), a double's `doubleToLongBits` (every NaN canonical):
///
/// ```
/// use rill_streams::KafkaSerde;
/// assert_eq!(&f32::serde().serialize("t", &1.5).unwrap().unwrap()[..], &[0x3f, 0xc0, 0, 0]);
/// assert_eq!(&f64::serde().serialize("t", &1.5).unwrap().unwrap()[..], &[0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
/// let nan = f32::from_bits(0x7fc0_0001);
/// let b = f32::serde().serialize("t", &nan).unwrap().unwrap();
/// assert_eq!(&b[..], &[0x7f, 0xc0, 0, 1]);
/// let nan = f64::from_bits(0x7ff8_0000_0000_0001);
/// let b = f64::serde().serialize("t", &nan).unwrap().unwrap();
/// assert_eq!(&b[..], &[0x7f, 0xf8, 0, 0, 0, 0, 0, 0]);
/// ```
impl KafkaSerde for f64 {
    fn serde() -> SharedSerde<Self> {
        Serdes::f64()
    }
}

impl KafkaSerde for f32 {
    fn serde() -> SharedSerde<Self> {
        Serdes::f32()
    }
}

/// One byte, as Kafka's `BooleanSerializer`; reading refuses what Kafka's
/// `BooleanDeserializer` refuses:
///
/// ```
/// use rill_streams::KafkaSerde;
/// assert_eq!(&bool::serde().serialize("t", &true).unwrap().unwrap()[..], &[1]);
/// assert_eq!(&bool::serde().serialize("t", &false).unwrap().unwrap()[..], &[0]);
/// assert!(bool::serde().deserialize("t", Some(&[2])).unwrap_err().contains("Unexpected byte"));
/// assert!(bool::serde().deserialize("t", Some(&[])).unwrap_err().contains("is not 1"));
/// ```
impl KafkaSerde for bool {
    fn serde() -> SharedSerde<Self> {
        Serdes::bool()
    }
}

/// The 36-character lowercase hyphenated text, as Kafka's `UUIDSerializer`
/// (`UUID.toString()` in UTF-8). Reading takes what `Uuid::parse_str` takes,
/// which also accepts the simple, braced and URN forms Java refuses.
///
/// ```
/// use rill_streams::{uuid::Uuid, KafkaSerde};
/// let id = Uuid::parse_str("123e4567-e89b-12d3-a456-426614174000").unwrap();
/// let b = Uuid::serde().serialize("t", &id).unwrap().unwrap();
/// assert_eq!(&b[..], b"123e4567-e89b-12d3-a456-426614174000");
/// assert_eq!(Uuid::serde().deserialize("t", Some(&b)).unwrap(), id);
/// ```
impl KafkaSerde for uuid::Uuid {
    fn serde() -> SharedSerde<Self> {
        Serdes::uuid()
    }
}

/// The bytes unchanged, as Kafka's `BytesSerializer`; reading shares the
/// consumed buffer:
///
/// ```
/// use rill_streams::{Bytes, KafkaSerde};
/// let b = Bytes::from_static(&[1, 2, 0xff]);
/// assert_eq!(Bytes::serde().serialize("t", &b).unwrap(), Some(b.clone()));
/// let read = Bytes::serde().deserialize_bytes("t", Some(&b)).unwrap();
/// assert_eq!(read.as_ptr(), b.as_ptr(), "the same buffer, not a copy");
/// ```
impl KafkaSerde for Bytes {
    fn serde() -> SharedSerde<Self> {
        Serdes::bytes()
    }
}

/// The bytes unchanged, as Kafka's `ByteArraySerializer`:
///
/// ```
/// use rill_streams::KafkaSerde;
/// let b = Vec::<u8>::serde().serialize("t", &vec![1, 2, 0xff]).unwrap().unwrap();
/// assert_eq!(&b[..], &[1, 2, 0xff]);
/// ```
impl KafkaSerde for Vec<u8> {
    fn serde() -> SharedSerde<Self> {
        Serdes::byte_array()
    }
}

/// A list, as Kafka's `Serdes.ListSerde` over `T`'s serde ([`Serdes::list`]);
/// `Vec<Option<T>>` holds lists with null entries:
///
/// ```
/// use rill_streams::KafkaSerde;
/// let s = Vec::<String>::serde();
/// let b = s.serialize("t", &vec!["ab".to_string()]).unwrap().unwrap();
/// // the variable-size flag, one entry, its length, its bytes
/// assert_eq!(&b[..], &[1, 0, 0, 0, 1, 0, 0, 0, 2, b'a', b'b']);
/// let nulls = Vec::<Option<String>>::serde().serialize("t", &vec![None]).unwrap().unwrap();
/// assert_eq!(&nulls[..], &[1, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
/// assert!(s.deserialize("t", Some(&nulls)).unwrap_err().contains("entry 0"));
/// ```
impl<T: KafkaSerde> KafkaSerde for Vec<T> {
    fn serde() -> SharedSerde<Self> {
        Serdes::list(T::serde())
    }
}

/// Null, as Kafka's `VoidSerializer`; reading ignores the bytes, so `()`
/// stands for a key an app does not read (Kafka's `VoidDeserializer`
/// refuses anything but null):
///
/// ```
/// use rill_streams::KafkaSerde;
/// assert_eq!(<()>::serde().serialize("t", &()).unwrap(), None);
/// assert_eq!(<()>::serde().deserialize("t", Some(b"ignored")), Ok(()));
/// ```
impl KafkaSerde for () {
    fn serde() -> SharedSerde<Self> {
        Serdes::unit()
    }
}

/// `None` is null (a tombstone as a value), `Some(t)` is `t`'s bytes:
///
/// ```
/// use rill_streams::KafkaSerde;
/// let s = Option::<String>::serde();
/// assert_eq!(s.serialize("t", &None).unwrap(), None);
/// assert_eq!(&s.serialize("t", &Some("a".into())).unwrap().unwrap()[..], b"a");
/// assert_eq!(s.deserialize("t", None).unwrap(), None);
/// ```
impl<T: KafkaSerde> KafkaSerde for Option<T> {
    fn serde() -> SharedSerde<Self> {
        Serdes::nullable(T::serde())
    }
}

/// A value written as JSON (serde_json, compact), read back into `T`.
///
/// It derefs to `T`, so `|o: &Json<Order>| o.amount` reads a field. The
/// bytes equal Jackson's `writeValueAsBytes` for the same field order and
/// integer or string values (floats may print differently).
///
/// ```
/// use rill_streams::{Json, KafkaSerde};
///
/// #[derive(Clone, serde::Serialize, serde::Deserialize, PartialEq, Debug)]
/// struct Order { id: u64, item: String }
///
/// let s = Json::<Order>::serde();
/// let b = s.serialize("t", &Json(Order { id: 1, item: "pen".into() })).unwrap().unwrap();
/// assert_eq!(&b[..], br#"{"id":1,"item":"pen"}"#);
/// assert_eq!(s.deserialize("t", Some(&b)).unwrap().item, "pen");
/// assert!(s.deserialize("t", Some(b"{")).unwrap_err().starts_with("JSON"));
/// ```
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct Json<T>(pub T);

/// A protobuf message written in protobuf's binary encoding
/// (`encode_to_vec`, what protobuf-java's `toByteArray` writes), read back
/// with `T::decode`.
///
/// This is **not** Confluent's `KafkaProtobufSerializer` format: there is no
/// schema-registry framing (magic byte, schema id, message indexes). Declare
/// messages with `#[derive(prost::Message)]` (add `prost` 0.14 to your
/// dependencies; [`rill_streams::prost`](crate::prost) is the version Rill uses).
///
/// ```
/// use rill_streams::{KafkaSerde, Protobuf};
///
/// // google.protobuf.Int64Value
/// #[derive(Clone, PartialEq, prost::Message)]
/// struct Int64Value {
///     #[prost(int64, tag = "1")]
///     value: i64,
/// }
/// let s = Protobuf::<Int64Value>::serde();
/// let b = s.serialize("t", &Protobuf(Int64Value { value: 300 })).unwrap().unwrap();
/// assert_eq!(&b[..], &[0x08, 0xac, 0x02]); // Int64Value.of(300).toByteArray()
/// assert_eq!(s.deserialize("t", Some(&b)).unwrap().value, 300);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Protobuf<T>(pub T);

macro_rules! wrapper {
    ($w:ident) => {
        impl<T> $w<T> {
            /// The wrapped value.
            pub fn into_inner(self) -> T {
                self.0
            }
        }
        impl<T> Deref for $w<T> {
            type Target = T;
            fn deref(&self) -> &T {
                &self.0
            }
        }
        impl<T> DerefMut for $w<T> {
            fn deref_mut(&mut self) -> &mut T {
                &mut self.0
            }
        }
        impl<T> From<T> for $w<T> {
            fn from(t: T) -> Self {
                Self(t)
            }
        }
    };
}
wrapper!(Json);
wrapper!(Protobuf);

impl<T> KafkaSerde for Json<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    fn serde() -> SharedSerde<Self> {
        Serdes::json()
    }
}

impl<T: prost::Message + Default + 'static> KafkaSerde for Protobuf<T> {
    fn serde() -> SharedSerde<Self> {
        Arc::new(ProtobufSerde(PhantomData))
    }
}

struct ProtobufSerde<T>(PhantomData<fn() -> T>);
impl<T: prost::Message + Default + 'static> Serde<Protobuf<T>> for ProtobufSerde<T> {
    fn serialize(&self, _: &str, data: &Protobuf<T>) -> Result<Option<Bytes>, String> {
        Ok(Some(Bytes::from(data.0.encode_to_vec())))
    }
    fn deserialize(&self, _: &str, data: Option<&[u8]>) -> Result<Protobuf<T>, String> {
        T::decode(need(data)?)
            .map(Protobuf)
            .map_err(|e| format!("protobuf: {e}"))
    }
    fn deserialize_bytes(&self, _: &str, data: Option<&Bytes>) -> Result<Protobuf<T>, String> {
        // `bytes` fields share the consumed buffer.
        let data = data.cloned().ok_or_else(|| need(None).unwrap_err())?;
        T::decode(data)
            .map(Protobuf)
            .map_err(|e| format!("protobuf: {e}"))
    }
}

pub(super) struct BoolSerde;
impl Serde<bool> for BoolSerde {
    fn serialize(&self, _: &str, data: &bool) -> Result<Option<Bytes>, String> {
        Ok(Some(Bytes::from_static(if *data { &[1] } else { &[0] })))
    }
    fn deserialize(&self, _: &str, data: Option<&[u8]>) -> Result<bool, String> {
        match need(data)? {
            [0] => Ok(false),
            [1] => Ok(true),
            // Kafka's messages; Java prints the byte signed.
            [b] => Err(format!(
                "Unexpected byte received by BooleanDeserializer: {}",
                *b as i8
            )),
            _ => Err("Size of data received by BooleanDeserializer is not 1".to_string()),
        }
    }
}

pub(super) struct UuidSerde;
impl Serde<uuid::Uuid> for UuidSerde {
    fn serialize(&self, _: &str, data: &uuid::Uuid) -> Result<Option<Bytes>, String> {
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        let s = data.hyphenated().encode_lower(&mut buf);
        Ok(Some(Bytes::copy_from_slice(s.as_bytes())))
    }
    fn deserialize(&self, _: &str, data: Option<&[u8]>) -> Result<uuid::Uuid, String> {
        let d = need(data)?;
        std::str::from_utf8(d)
            .ok()
            .and_then(|s| uuid::Uuid::parse_str(s).ok())
            .ok_or_else(|| "Error parsing data into UUID".to_string())
    }
    fn fixed_size(&self) -> Option<usize> {
        Some(uuid::fmt::Hyphenated::LENGTH)
    }
}

pub(super) struct VecSerde;
impl Serde<Vec<u8>> for VecSerde {
    fn serialize(&self, _: &str, data: &Vec<u8>) -> Result<Option<Bytes>, String> {
        Ok(Some(Bytes::copy_from_slice(data)))
    }
    fn serialize_owned(&self, _: &str, data: Vec<u8>) -> Result<Option<Bytes>, String> {
        Ok(Some(Bytes::from(data)))
    }
    fn deserialize(&self, _: &str, data: Option<&[u8]>) -> Result<Vec<u8>, String> {
        Ok(need(data)?.to_vec())
    }
}
