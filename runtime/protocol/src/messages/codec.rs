//! The wire primitives the generated message codecs call: Kafka's fixed-width
//! integers (big-endian), booleans, unsigned varints, strings and arrays in
//! both the classic (int16 / int32 lengths) and the flexible (KIP-482:
//! unsigned varint length + 1, 0 for null) encodings, nullable structs (an
//! int8 marker, -1 for null, as Kafka writes them) and tagged-field sections.
//!
//! Invariants: no read panics or allocates more than the input can back (an
//! array's element count is checked against the bytes left before anything
//! is reserved, every element taking at least one byte); every error names
//! what was being read.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use bytes::Bytes;
use kafka_protocol::protocol::buf::{ByteBuf, ByteBufMut};
use kafka_protocol::protocol::StrBytes;

pub(crate) type Result<T> = anyhow::Result<T>;

/// Fails unless `version` is one `name` has.
pub(crate) fn check_version(name: &str, version: i16, min: i16, max: i16) -> Result<()> {
    if version < min || version > max {
        bail!("{name} has versions {min}-{max}, not {version}");
    }
    Ok(())
}

fn need<B: ByteBuf>(buf: &B, n: usize, what: &str) -> Result<()> {
    if buf.remaining() < n {
        bail!("{what} needs {n} bytes but {} are left", buf.remaining());
    }
    Ok(())
}

macro_rules! fixed {
    ($put:ident, $get:ident, $t:ty, $bput:ident, $bget:ident) => {
        pub(crate) fn $put<B: ByteBufMut>(buf: &mut B, v: $t) {
            buf.$bput(v);
        }
        pub(crate) fn $get<B: ByteBuf>(buf: &mut B) -> Result<$t> {
            need(buf, std::mem::size_of::<$t>(), stringify!($t))?;
            Ok(buf.$bget())
        }
    };
}

fixed!(put_i8, get_i8, i8, put_i8, get_i8);
fixed!(put_i16, get_i16, i16, put_i16, get_i16);
fixed!(put_i32, get_i32, i32, put_i32, get_i32);
fixed!(put_i64, get_i64, i64, put_i64, get_i64);
fixed!(put_u16, get_u16, u16, put_u16, get_u16);

pub(crate) fn put_bool<B: ByteBufMut>(buf: &mut B, v: bool) {
    buf.put_u8(u8::from(v));
}

/// Any non-zero byte is true, as Kafka reads it.
pub(crate) fn get_bool<B: ByteBuf>(buf: &mut B) -> Result<bool> {
    need(buf, 1, "bool")?;
    Ok(buf.get_u8() != 0)
}

pub(crate) fn put_uvarint<B: ByteBufMut>(buf: &mut B, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

pub(crate) fn get_uvarint<B: ByteBuf>(buf: &mut B) -> Result<u32> {
    let mut v: u32 = 0;
    for i in 0..5 {
        need(buf, 1, "unsigned varint")?;
        let b = buf.get_u8();
        if i == 4 && b > 0x0f {
            bail!("unsigned varint does not fit 32 bits");
        }
        v |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    bail!("unsigned varint longer than 5 bytes")
}

/// A length for the flexible encoding or the classic one (int16 for
/// strings, `short`; int32 for arrays); `None` is null.
fn put_len<B: ByteBufMut>(
    buf: &mut B,
    len: Option<usize>,
    flexible: bool,
    short: bool,
) -> Result<()> {
    let max = if short {
        i16::MAX as usize
    } else {
        i32::MAX as usize
    };
    match (len, flexible) {
        (None, true) => put_uvarint(buf, 0),
        (None, false) if short => buf.put_i16(-1),
        (None, false) => buf.put_i32(-1),
        (Some(n), true) => match u32::try_from(n).ok().and_then(|n| n.checked_add(1)) {
            Some(n) => put_uvarint(buf, n),
            None => bail!("length {n} does not fit an unsigned varint"),
        },
        (Some(n), false) if n > max => bail!("length {n} is over {max}"),
        (Some(n), false) if short => buf.put_i16(n as i16),
        (Some(n), false) => buf.put_i32(n as i32),
    }
    Ok(())
}

fn get_len<B: ByteBuf>(
    buf: &mut B,
    flexible: bool,
    short: bool,
    what: &str,
) -> Result<Option<usize>> {
    let n: i64 = if flexible {
        i64::from(get_uvarint(buf).with_context(|| format!("{what} length"))?) - 1
    } else if short {
        i64::from(get_i16(buf).with_context(|| format!("{what} length"))?)
    } else {
        i64::from(get_i32(buf).with_context(|| format!("{what} length"))?)
    };
    match n {
        -1 => Ok(None),
        n if n < -1 => bail!("{what} has length {n}"),
        n => {
            let n = n as usize;
            // Every element or byte takes at least one byte of input.
            need(buf, n, what)?;
            Ok(Some(n))
        }
    }
}

pub(crate) fn put_str<B: ByteBufMut>(buf: &mut B, v: &StrBytes, flexible: bool) -> Result<()> {
    put_opt_str(buf, Some(v), flexible)
}

pub(crate) fn put_opt_str<B: ByteBufMut>(
    buf: &mut B,
    v: Option<&StrBytes>,
    flexible: bool,
) -> Result<()> {
    put_len(buf, v.map(|s| s.len()), flexible, true)?;
    if let Some(s) = v {
        buf.put_slice(s.as_bytes());
    }
    Ok(())
}

pub(crate) fn get_str<B: ByteBuf>(buf: &mut B, flexible: bool) -> Result<StrBytes> {
    match get_opt_str(buf, flexible)? {
        Some(s) => Ok(s),
        None => bail!("a non-nullable string is null"),
    }
}

pub(crate) fn get_opt_str<B: ByteBuf>(buf: &mut B, flexible: bool) -> Result<Option<StrBytes>> {
    let Some(n) = get_len(buf, flexible, true, "string")? else {
        return Ok(None);
    };
    let bytes = buf.try_get_bytes(n).context("string")?;
    Ok(Some(
        StrBytes::from_utf8(bytes).context("string is not UTF-8")?,
    ))
}

pub(crate) fn put_array<B: ByteBufMut, T>(
    buf: &mut B,
    items: &[T],
    flexible: bool,
    each: impl FnMut(&mut B, &T) -> Result<()>,
) -> Result<()> {
    put_opt_array(buf, Some(items), flexible, each)
}

pub(crate) fn put_opt_array<B: ByteBufMut, T>(
    buf: &mut B,
    items: Option<&[T]>,
    flexible: bool,
    mut each: impl FnMut(&mut B, &T) -> Result<()>,
) -> Result<()> {
    put_len(buf, items.map(<[T]>::len), flexible, false)?;
    for item in items.unwrap_or_default() {
        each(buf, item)?;
    }
    Ok(())
}

pub(crate) fn get_array<B: ByteBuf, T>(
    buf: &mut B,
    flexible: bool,
    each: impl FnMut(&mut B) -> Result<T>,
) -> Result<Vec<T>> {
    match get_opt_array(buf, flexible, each)? {
        Some(v) => Ok(v),
        None => bail!("a non-nullable array is null"),
    }
}

pub(crate) fn get_opt_array<B: ByteBuf, T>(
    buf: &mut B,
    flexible: bool,
    mut each: impl FnMut(&mut B) -> Result<T>,
) -> Result<Option<Vec<T>>> {
    let Some(n) = get_len(buf, flexible, false, "array")? else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(each(buf).with_context(|| format!("array element {i}"))?);
    }
    Ok(Some(out))
}

/// A nullable struct: int8 -1 for null, 1 before a present one.
pub(crate) fn put_opt_struct<B: ByteBufMut, T>(
    buf: &mut B,
    v: Option<&T>,
    write: impl FnOnce(&mut B, &T) -> Result<()>,
) -> Result<()> {
    match v {
        None => {
            buf.put_i8(-1);
            Ok(())
        }
        Some(s) => {
            buf.put_i8(1);
            write(buf, s)
        }
    }
}

pub(crate) fn get_opt_struct<B: ByteBuf, T>(
    buf: &mut B,
    read: impl FnOnce(&mut B) -> Result<T>,
) -> Result<Option<T>> {
    if get_i8(buf).context("struct marker")? < 0 {
        Ok(None)
    } else {
        read(buf).map(Some)
    }
}

/// A flexible struct's tagged-field section: count, then (tag, size, bytes)
/// in ascending tag order.
pub(crate) fn put_tagged_fields<B: ByteBufMut>(
    buf: &mut B,
    fields: &BTreeMap<i32, Bytes>,
) -> Result<()> {
    put_uvarint(
        buf,
        u32::try_from(fields.len()).context("tagged field count")?,
    );
    for (tag, value) in fields {
        put_uvarint(buf, u32::try_from(*tag).context("tagged field number")?);
        put_uvarint(
            buf,
            u32::try_from(value.len()).context("tagged field size")?,
        );
        buf.put_slice(value);
    }
    Ok(())
}

pub(crate) fn get_tagged_fields<B: ByteBuf>(buf: &mut B) -> Result<BTreeMap<i32, Bytes>> {
    let n = get_uvarint(buf).context("tagged field count")?;
    need(buf, n as usize, "tagged fields")?;
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let tag = get_uvarint(buf).context("tagged field number")?;
        let size = get_uvarint(buf).context("tagged field size")? as usize;
        need(buf, size, "tagged field")?;
        let tag = i32::try_from(tag).context("tagged field number")?;
        if out.insert(tag, buf.try_get_bytes(size)?).is_some() {
            bail!("tagged field {tag} appears twice");
        }
    }
    Ok(out)
}
