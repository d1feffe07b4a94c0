//! Kafka's error codes.
//!
//! The enum itself is `kafka-protocol`'s `ResponseError` (generated from Kafka's
//! `Errors.java` table, so codes such as FENCED_INSTANCE_ID = 82 and
//! UNRELEASED_INSTANCE_ID = 111 match Kafka exactly). Wire fields carry an `i16`
//! where 0 means "no error"; [`ErrorCodeExt`] converts between the two shapes so
//! handlers can work with `Result<_, ErrorCode>`.

pub use kafka_protocol::error::ResponseError as ErrorCode;

/// Conversions between wire `i16` error codes and [`ErrorCode`].
pub trait ErrorCodeExt {
    /// The wire value of an optional error: `None` is 0 (NONE).
    fn wire(self) -> i16;
}

impl ErrorCodeExt for Option<ErrorCode> {
    fn wire(self) -> i16 {
        self.map_or(0, |e| e.code())
    }
}

impl ErrorCodeExt for ErrorCode {
    fn wire(self) -> i16 {
        self.code()
    }
}

/// Reads a wire error code: `Ok(())` for 0, the error otherwise (codes Kafka
/// does not define come back as `ErrorCode::Unknown(code)`).
pub fn check(code: i16) -> Result<(), ErrorCode> {
    match ErrorCode::try_from_code(code) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// The symbolic Kafka name of a wire code (`FENCED_INSTANCE_ID`), for logs and
/// error messages; `NONE` for 0 and `UNKNOWN(<code>)` for codes Kafka does not define.
pub fn name(code: i16) -> String {
    if code == 0 {
        return "NONE".to_string();
    }
    match ErrorCode::try_from_code(code) {
        Some(ErrorCode::Unknown(_)) | None => format!("UNKNOWN({code})"),
        Some(e) => upper_snake(&format!("{e:?}")),
    }
}

fn upper_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, ch) in camel.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_kafka() {
        assert_eq!(ErrorCode::FencedInstanceId.code(), 82);
        assert_eq!(ErrorCode::UnreleasedInstanceId.code(), 111);
        assert_eq!(ErrorCode::MemberIdRequired.code(), 79);
        assert_eq!(ErrorCode::GroupMaxSizeReached.code(), 81);
        assert_eq!(check(0), Ok(()));
        assert_eq!(check(82), Err(ErrorCode::FencedInstanceId));
        assert_eq!(check(30000), Err(ErrorCode::Unknown(30000)));
    }

    #[test]
    fn names_are_kafkas() {
        assert_eq!(name(82), "FENCED_INSTANCE_ID");
        assert_eq!(name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(name(0), "NONE");
        assert_eq!(name(30000), "UNKNOWN(30000)");
    }
}
