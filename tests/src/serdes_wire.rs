//! Rill's serdes from types against Kafka's own serializers (kafka-clients
//! 4.4.0, Jackson, protobuf-java), byte for byte, both ways:
//! `tests/java/SerdesWire.java` writes each case with Kafka's serializer;
//! Rill's [`KafkaSerde`] for the matching Rust type must write the same
//! bytes and read Kafka's bytes back to the same value, and Kafka's
//! deserializer must read Rill's bytes to the expected value. Bad input is
//! refused by both with Kafka's message (a boolean byte of 2, a UUID that is
//! not one, a list with a bad strategy flag or cut short). Lists
//! (`Vec<T>`, Kafka's `ListSerde`) cover both of its layouts and null
//! entries.

use std::collections::BTreeMap;
use std::fmt::Debug;

use rill_streams::uuid::Uuid;
use rill_streams::{Bytes, Json, KafkaSerde, Protobuf};

use crate::tools::java_program_with;

/// protobuf-java for the `Protobuf<T>` cases (Maven Central; `.ci/run` prefetches it).
pub const PROTOBUF_JAVA: &str = "com.google.protobuf:protobuf-java:4.36.2";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex from SerdesWire"))
        .collect()
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Order {
    id: u64,
    item: String,
}

/// google.protobuf.Int64Value.
#[derive(Clone, PartialEq, prost::Message)]
struct Int64Value {
    #[prost(int64, tag = "1")]
    value: i64,
}

/// google.protobuf.Timestamp.
#[derive(Clone, PartialEq, prost::Message)]
struct Timestamp {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// Whether bytes decode to the case's value (`Err` says what they decoded to).
type ReadsBack = Box<dyn Fn(Option<&[u8]>) -> Result<(), String>>;

/// One case: Rill's bytes for the value, and a check that bytes decode to it.
struct Case {
    name: &'static str,
    rill: Option<Vec<u8>>,
    reads_back: ReadsBack,
    /// What Kafka's deserializer prints for the value (SerdesWire's `decode`).
    java_text: String,
}

fn case<T: KafkaSerde + PartialEq + Debug + Clone>(
    name: &'static str,
    value: T,
    java_text: impl Into<String>,
) -> Case {
    let serde = T::serde();
    let rill = serde
        .serialize("t", &value)
        .unwrap_or_else(|e| panic!("{name}: Rill cannot serialize: {e}"))
        .map(|b| b.to_vec());
    Case {
        name,
        rill,
        reads_back: Box::new(move |bytes| {
            let got = serde.deserialize("t", bytes)?;
            if got == value {
                Ok(())
            } else {
                Err(format!("read {got:?}, want {value:?}"))
            }
        }),
        java_text: java_text.into(),
    }
}

fn utf8_hex(s: &str) -> String {
    hex(s.as_bytes())
}

fn cases() -> Vec<Case> {
    let id = Uuid::parse_str("123e4567-e89b-12d3-a456-426614174000").unwrap();
    let raw = vec![1u8, 2, 0xff];
    vec![
        case("string", "rill".to_string(), utf8_hex("rill")),
        case("string_utf8", "é€".to_string(), utf8_hex("é€")),
        case("string_empty", String::new(), ""),
        case("string_null", None::<String>, "null"),
        case("short", 258i16, "258"),
        case("short_neg", -2i16, "-2"),
        case("short_min", i16::MIN, i16::MIN.to_string()),
        case("int", 1i32, "1"),
        case("int_neg", -1i32, "-1"),
        case("int_max", i32::MAX, i32::MAX.to_string()),
        case("long", 1i64, "1"),
        case("long_neg", -1i64, "-1"),
        case("long_min", i64::MIN, i64::MIN.to_string()),
        case("float", 1.5f32, "3fc00000"),
        case("float_neg_zero", -0.0f32, "80000000"),
        // NaN != NaN: compare a NaN's bits through a wrapper below.
        case("double", 1.5f64, "3ff8000000000000"),
        case("bool_true", true, "true"),
        case("bool_false", false, "false"),
        case("uuid", id, id.to_string()),
        case("byte_array", raw.clone(), "0102ff"),
        case("bytes", Bytes::from(raw.clone()), "0102ff"),
        case("byte_buffer", raw, "0102ff"),
        case("void", (), "null"),
        case(
            "json",
            Json(Order {
                id: 1,
                item: "pen".into(),
            }),
            r#"{"id":1,"item":"pen"}"#,
        ),
        case("proto_int64", Protobuf(Int64Value { value: 300 }), "300"),
        case(
            "proto_timestamp",
            Protobuf(Timestamp {
                seconds: 1,
                nanos: 2,
            }),
            "1/2",
        ),
        case(
            "list_int",
            vec![Some(7i32), None, Some(-2)],
            "[7, null, -2]",
        ),
        case("list_long", vec![1i64, -1], "[1, -1]"),
        case("list_double", vec![Some(1.5f64), None], "[1.5, null]"),
        case("list_uuid", vec![Some(id), None], format!("[{id}, null]")),
        case(
            "list_string",
            vec![Some("rill".to_string()), None, Some(String::new())],
            "[rill, null, ]",
        ),
        case("list_empty", Vec::<i32>::new(), "[]"),
        case("list_nested", vec![vec![1i32, 2], vec![]], "[[1, 2], []]"),
    ]
}

/// NaNs: Kafka's `FloatSerializer` keeps a NaN's bits (`floatToRawIntBits`),
/// its `DoubleSerializer` writes the canonical NaN (`doubleToLongBits`);
/// Rill must do the same. Both deserializers keep the bits they read.
fn nan_cases() -> Vec<(&'static str, Option<Vec<u8>>, String)> {
    let f = f32::from_bits(0x7fc0_0001);
    let d = f64::from_bits(0x7ff8_0000_0000_0001);
    let fb = f32::serde().serialize("t", &f).unwrap().map(|b| b.to_vec());
    let db = f64::serde().serialize("t", &d).unwrap().map(|b| b.to_vec());
    vec![
        ("float_nan_payload", fb, "7fc00001".into()),
        ("double_nan_payload", db, "7ff8000000000000".into()),
    ]
}

fn java(args: &[&str]) -> BTreeMap<String, String> {
    let jars =
        crate::kafka_systest::maven_jars(&[PROTOBUF_JAVA]).expect("protobuf-java from Maven");
    let out = java_program_with("SerdesWire.java", &jars, args).expect("java SerdesWire");
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn arg(bytes: &Option<Vec<u8>>) -> String {
    bytes.as_deref().map(hex).unwrap_or_else(|| "null".into())
}

/// The whole check (see the module doc); panics naming each case that differs.
pub fn serdes_match_kafka_clients() {
    let kafka = java(&["encode"]);
    let cases = cases();
    let nans = nan_cases();
    assert_eq!(
        kafka.len(),
        cases.len() + nans.len(),
        "SerdesWire wrote {kafka:?}"
    );
    let mut failures = Vec::new();
    let mut decode_args: Vec<String> = vec!["decode".into()];
    for c in &cases {
        let java_hex = &kafka[c.name];
        if arg(&c.rill) != *java_hex {
            failures.push(format!(
                "{}: Rill writes {}, Kafka writes {java_hex}",
                c.name,
                arg(&c.rill)
            ));
        }
        let java_bytes = (java_hex != "null").then(|| unhex(java_hex));
        if let Err(e) = (c.reads_back)(java_bytes.as_deref()) {
            failures.push(format!("{}: Rill reading Kafka's bytes: {e}", c.name));
        }
        decode_args.extend([c.name.to_string(), arg(&c.rill)]);
    }
    for (name, rill, _) in &nans {
        if arg(rill) != kafka[*name] {
            failures.push(format!(
                "{name}: Rill writes {}, Kafka writes {}",
                arg(rill),
                kafka[*name]
            ));
        }
        decode_args.extend([name.to_string(), arg(rill)]);
    }
    // Bad input: both refuse, with Kafka's words.
    let bad = [
        (
            "bool_bad",
            vec![2u8],
            "Unexpected byte received by BooleanDeserializer: 2",
        ),
        (
            "bool_long",
            vec![1, 0],
            "Size of data received by BooleanDeserializer is not 1",
        ),
        (
            "uuid_bad",
            b"not-a-uuid".to_vec(),
            "Error parsing data into UUID",
        ),
        // Lists: Rill's message starts with Kafka's and may say more.
        (
            "list_int_bad_flag",
            vec![2, 0, 0, 0, 0],
            "Invalid serialization strategy flag value",
        ),
        (
            "list_string_truncated",
            vec![1, 0, 0, 0, 1, 0, 0, 0, 4],
            "End of the stream was reached prematurely",
        ),
    ];
    for (name, bytes, _) in &bad {
        decode_args.extend([name.to_string(), hex(bytes)]);
    }
    let args: Vec<&str> = decode_args.iter().map(String::as_str).collect();
    let read = java(&args);
    for c in &cases {
        if read.get(c.name) != Some(&c.java_text) {
            failures.push(format!(
                "{}: Kafka reads Rill's bytes as {:?}, want {:?}",
                c.name,
                read.get(c.name),
                c.java_text
            ));
        }
    }
    for (name, _, text) in &nans {
        if read.get(*name) != Some(text) {
            failures.push(format!(
                "{name}: Kafka reads {:?}, want {text}",
                read.get(*name)
            ));
        }
    }
    for (name, bytes, message) in &bad {
        let java_says = read.get(*name).cloned().unwrap_or_default();
        if java_says != format!("error: {message}") {
            failures.push(format!(
                "{name}: Kafka says {java_says:?}, want error: {message}"
            ));
        }
        let rill_says = if name.starts_with("bool") {
            bool::serde().deserialize("t", Some(bytes)).err()
        } else if name.starts_with("list_int") {
            Vec::<Option<i32>>::serde()
                .deserialize("t", Some(bytes))
                .err()
        } else if name.starts_with("list_string") {
            Vec::<Option<String>>::serde()
                .deserialize("t", Some(bytes))
                .err()
        } else {
            Uuid::serde().deserialize("t", Some(bytes)).err()
        };
        let alike = match &rill_says {
            Some(says) if name.starts_with("list") => says.starts_with(message),
            Some(says) => says == message,
            None => false,
        };
        if !alike {
            failures.push(format!("{name}: Rill says {rill_says:?}, want {message:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "Rill's serdes differ from Kafka's:\n{}",
        failures.join("\n")
    );
    eprintln!(
        "serdes_wire: {} cases and {} refusals alike in both directions",
        cases.len() + nans.len(),
        bad.len()
    );
}
