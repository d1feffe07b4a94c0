//! The message-codec generator: reads Kafka-format JSON message schemas
//! (`runtime/protocol/schemas/*.json`) and writes one Rust module per
//! message (`src/messages/<snake_name>.rs`) with its structs, their
//! `Default` (the schema's defaults), a writer and a reader per struct, and
//! `kafka-protocol`'s `Encodable`, `Decodable`, `Message`, `HeaderVersion`
//! (and `Request`) traits on the message, so the rest of Rill handles these
//! messages as it handles `kafka-protocol`'s.
//!
//! It runs as a test: `generated_modules_are_current` fails when a checked-in
//! module differs from what the schemas give, and rewrites the modules when
//! `RILL_REGENERATE=1` is set. It supports what Kafka's streams-group
//! messages use (fixed-width integers, bool, string, arrays, structs,
//! nullable strings/arrays/structs, fields added or removed by version,
//! ignorable fields, classic and flexible versions, unknown tagged fields
//! kept) and refuses anything else (known tagged fields, bytes, records,
//! uuid, float64, nested arrays, nullability on only some of a field's
//! versions) with an error naming the field, rather than guess.

use std::fmt::Write as _;

use serde_json::Value;

/// Schemas this crate generates codecs for, by file name in `schemas/`.
pub(crate) const SCHEMAS: &[&str] = &[
    "StreamsGroupHeartbeatRequest",
    "StreamsGroupHeartbeatResponse",
    "StreamsGroupDescribeRequest",
    "StreamsGroupDescribeResponse",
];

#[derive(Clone, Copy, Debug, PartialEq)]
struct Versions {
    lo: i16,
    hi: i16,
}

impl Versions {
    const NONE: Versions = Versions { lo: 1, hi: 0 };

    fn parse(s: &str) -> Result<Self, String> {
        let bad = || format!("bad version range {s:?}");
        if s == "none" {
            return Ok(Self::NONE);
        }
        if let Some(lo) = s.strip_suffix('+') {
            return Ok(Versions {
                lo: lo.parse().map_err(|_| bad())?,
                hi: i16::MAX,
            });
        }
        if let Some((lo, hi)) = s.split_once('-') {
            return Ok(Versions {
                lo: lo.parse().map_err(|_| bad())?,
                hi: hi.parse().map_err(|_| bad())?,
            });
        }
        let v = s.parse().map_err(|_| bad())?;
        Ok(Versions { lo: v, hi: v })
    }

    fn is_empty(self) -> bool {
        self.lo > self.hi
    }

    /// The versions of `self` within the message's `valid` ones.
    fn within(self, valid: Versions) -> Versions {
        Versions {
            lo: self.lo.max(valid.lo),
            hi: self.hi.min(valid.hi),
        }
    }

    /// A Rust condition on `version` for these versions, `None` when it
    /// holds for every valid version.
    fn condition(self, valid: Versions) -> Option<String> {
        let v = self.within(valid);
        if v.is_empty() {
            return Some("false".into());
        }
        match (v.lo <= valid.lo, v.hi >= valid.hi) {
            (true, true) => None,
            (false, true) => Some(format!("version >= {}", v.lo)),
            (true, false) => Some(format!("version <= {}", v.hi)),
            (false, false) if v.lo == v.hi => Some(format!("version == {}", v.lo)),
            (false, false) => Some(format!("({}..={}).contains(&version)", v.lo, v.hi)),
        }
    }
}

#[derive(Clone, Debug)]
enum Ty {
    Bool,
    Int(&'static str),
    Str,
    Array(Box<Ty>),
    Struct(String),
}

#[derive(Clone, Debug)]
struct Field {
    name: String,
    ty: Ty,
    versions: Versions,
    nullable: bool,
    default: Option<String>,
    ignorable: bool,
    about: String,
}

#[derive(Clone, Debug)]
struct StructDef {
    name: String,
    about: String,
    fields: Vec<Field>,
}

struct Schema {
    api_key: i16,
    request: bool,
    name: String,
    valid: Versions,
    flexible: Versions,
    /// The message itself first, then every nested and common struct.
    structs: Vec<StructDef>,
}

/// Drops `//` comments outside strings (Kafka's schemas carry them).
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let mut in_str = false;
        let mut escaped = false;
        let mut cut = line.len();
        let bytes = line.as_bytes();
        for i in 0..bytes.len() {
            let b = bytes[i];
            if in_str {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_str = false,
                    _ => {}
                }
            } else if b == b'"' {
                in_str = true;
            } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
                cut = i;
                break;
            }
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

fn str_of<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a str, String> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{at}: missing string {key:?}"))
}

fn parse_type(t: &str, at: &str) -> Result<Ty, String> {
    Ok(match t {
        "bool" => Ty::Bool,
        "int8" => Ty::Int("i8"),
        "int16" => Ty::Int("i16"),
        "int32" => Ty::Int("i32"),
        "int64" => Ty::Int("i64"),
        "uint16" => Ty::Int("u16"),
        "string" => Ty::Str,
        _ if t.starts_with("[]") => {
            let inner = parse_type(&t[2..], at)?;
            if matches!(inner, Ty::Array(_)) {
                return Err(format!("{at}: arrays of arrays are not supported"));
            }
            Ty::Array(Box::new(inner))
        }
        _ if t.starts_with(|c: char| c.is_ascii_uppercase()) => Ty::Struct(t.to_string()),
        _ => {
            return Err(format!(
                "{at}: type {t:?} is not supported by this generator"
            ))
        }
    })
}

fn struct_name(ty: &Ty) -> Option<&str> {
    match ty {
        Ty::Struct(n) => Some(n),
        Ty::Array(inner) => struct_name(inner),
        _ => None,
    }
}

fn parse_fields(
    fields: &Value,
    owner: &str,
    out: &mut Vec<StructDef>,
) -> Result<Vec<Field>, String> {
    let list = fields
        .as_array()
        .ok_or_else(|| format!("{owner}: \"fields\" is not a list"))?;
    let mut parsed = Vec::new();
    for f in list {
        let name = str_of(f, "name", owner)?.to_string();
        let at = format!("{owner}.{name}");
        if f.get("tag").is_some() || f.get("taggedVersions").is_some() {
            return Err(format!(
                "{at}: known tagged fields are not supported by this generator"
            ));
        }
        let ty = parse_type(str_of(f, "type", &at)?, &at)?;
        let versions = Versions::parse(str_of(f, "versions", &at)?)?;
        let nullable = match f.get("nullableVersions").and_then(Value::as_str) {
            None => false,
            Some(n) => {
                let n = Versions::parse(n)?;
                if n.lo > versions.lo || n.hi < versions.hi {
                    return Err(format!(
                        "{at}: nullable on only some of its versions is not supported"
                    ));
                }
                if matches!(ty, Ty::Bool | Ty::Int(_)) {
                    return Err(format!("{at}: a nullable {ty:?} is not a Kafka type"));
                }
                true
            }
        };
        let default = match f.get("default") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Bool(b)) => Some(b.to_string()),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(other) => return Err(format!("{at}: default {other} is not supported")),
        };
        if let Some(inner) = f.get("fields") {
            let sname = struct_name(&ty)
                .ok_or_else(|| format!("{at}: fields on a non-struct type"))?
                .to_string();
            let nested = parse_fields(inner, &sname, out)?;
            if out.iter().any(|s| s.name == sname) {
                return Err(format!("{at}: struct {sname} is defined twice"));
            }
            out.push(StructDef {
                name: sname,
                about: str_of(f, "about", &at).unwrap_or_default().to_string(),
                fields: nested,
            });
        }
        parsed.push(Field {
            name,
            ty,
            versions,
            nullable,
            default,
            ignorable: f.get("ignorable").and_then(Value::as_bool).unwrap_or(false),
            about: str_of(f, "about", &at).unwrap_or_default().to_string(),
        });
    }
    Ok(parsed)
}

fn parse(src: &str) -> Result<Schema, String> {
    let v: Value =
        serde_json::from_str(&strip_comments(src)).map_err(|e| format!("not JSON: {e}"))?;
    let name = str_of(&v, "name", "schema")?.to_string();
    let request = match str_of(&v, "type", &name)? {
        "request" => true,
        "response" => false,
        t => {
            return Err(format!(
                "{name}: type {t:?} is neither request nor response"
            ))
        }
    };
    let api_key = v
        .get("apiKey")
        .and_then(Value::as_i64)
        .ok_or_else(|| format!("{name}: missing apiKey"))? as i16;
    let valid = Versions::parse(str_of(&v, "validVersions", &name)?)?;
    let flexible = Versions::parse(str_of(&v, "flexibleVersions", &name)?)?;
    let mut nested = Vec::new();
    let fields = parse_fields(
        v.get("fields")
            .ok_or_else(|| format!("{name}: no fields"))?,
        &name,
        &mut nested,
    )?;
    if let Some(common) = v.get("commonStructs").and_then(Value::as_array) {
        for c in common {
            let cname = str_of(c, "name", &name)?.to_string();
            let fields = parse_fields(
                c.get("fields")
                    .ok_or_else(|| format!("{cname}: no fields"))?,
                &cname,
                &mut nested,
            )?;
            if nested.iter().any(|s| s.name == cname) {
                return Err(format!("{name}: struct {cname} is defined twice"));
            }
            nested.push(StructDef {
                name: cname,
                about: String::new(),
                fields,
            });
        }
    }
    let mut structs = vec![StructDef {
        name: name.clone(),
        about: String::new(),
        fields,
    }];
    structs.extend(nested);
    for s in &structs {
        for f in &s.fields {
            if let Some(n) = struct_name(&f.ty) {
                if !structs.iter().any(|d| d.name == n) {
                    return Err(format!("{}.{}: struct {n} is not defined", s.name, f.name));
                }
            }
        }
    }
    Ok(Schema {
        api_key,
        request,
        name,
        valid,
        flexible,
        structs,
    })
}

pub(crate) fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn base_type(ty: &Ty) -> String {
    match ty {
        Ty::Bool => "bool".into(),
        Ty::Int(t) => t.to_string(),
        Ty::Str => "StrBytes".into(),
        Ty::Array(inner) => format!("Vec<{}>", base_type(inner)),
        Ty::Struct(n) => n.clone(),
    }
}

fn rust_type(f: &Field) -> String {
    let base = base_type(&f.ty);
    if f.nullable {
        format!("Option<{base}>")
    } else {
        base
    }
}

fn default_expr(f: &Field) -> Result<String, String> {
    let d = f.default.as_deref();
    if f.nullable && d == Some("null") {
        return Ok("None".into());
    }
    let base = match (&f.ty, d) {
        (Ty::Bool, None) => "false".to_string(),
        (Ty::Bool, Some(b @ ("true" | "false"))) => b.to_string(),
        (Ty::Int(t), None) => format!("0{t}"),
        (Ty::Int(t), Some(n)) => {
            let v: i64 = n
                .parse()
                .map_err(|_| format!("{}: default {n:?} is not a number", f.name))?;
            match (*t, v) {
                ("i32", v) if v == i64::from(i32::MIN) => "i32::MIN".into(),
                ("i64", v) if v == i64::MIN => "i64::MIN".into(),
                (t, v) => format!("{v}{t}"),
            }
        }
        (Ty::Str, None) => "StrBytes::from_static_str(\"\")".into(),
        (Ty::Str, Some(s)) => format!("StrBytes::from_static_str({s:?})"),
        (Ty::Array(_), None) => "Vec::new()".into(),
        (Ty::Struct(n), None) => format!("{n}::default()"),
        (_, Some(d)) => {
            return Err(format!(
                "{}: default {d:?} is not supported for its type",
                f.name
            ))
        }
    };
    Ok(if f.nullable {
        format!("Some({base})")
    } else {
        base
    })
}

/// A condition that holds when `self.<id>` is not the field's default
/// (written the way clippy wants it for bools, options and vectors).
fn differs_from_default(f: &Field, id: &str) -> Result<String, String> {
    let d = default_expr(f)?;
    Ok(match d.as_str() {
        "false" => format!("self.{id}"),
        "true" => format!("!self.{id}"),
        "None" => format!("self.{id}.is_some()"),
        "Vec::new()" => format!("!self.{id}.is_empty()"),
        _ => format!("self.{id} != {d}"),
    })
}

fn elem_write(ty: &Ty) -> String {
    match ty {
        Ty::Bool => "{ c::put_bool(buf, *e); Ok(()) }".into(),
        Ty::Int(t) => format!("{{ c::put_{t}(buf, *e); Ok(()) }}"),
        Ty::Str => "c::put_str(buf, e, flexible)".into(),
        Ty::Struct(_) => "e.write(buf, version)".into(),
        Ty::Array(_) => unreachable!("refused by parse_type"),
    }
}

fn elem_read(ty: &Ty) -> String {
    match ty {
        Ty::Bool => "c::get_bool(buf)".into(),
        Ty::Int(t) => format!("c::get_{t}(buf)"),
        Ty::Str => "c::get_str(buf, flexible)".into(),
        Ty::Struct(n) => format!("{n}::read(buf, version)"),
        Ty::Array(_) => unreachable!("refused by parse_type"),
    }
}

fn field_write(f: &Field, field: &str) -> String {
    match (&f.ty, f.nullable) {
        (Ty::Bool, _) => format!("c::put_bool(buf, self.{field});"),
        (Ty::Int(t), _) => format!("c::put_{t}(buf, self.{field});"),
        (Ty::Str, false) => format!("c::put_str(buf, &self.{field}, flexible)?;"),
        (Ty::Str, true) => format!("c::put_opt_str(buf, self.{field}.as_ref(), flexible)?;"),
        (Ty::Array(inner), false) => {
            format!(
                "c::put_array(buf, &self.{field}, flexible, |buf, e| {})?;",
                elem_write(inner)
            )
        }
        (Ty::Array(inner), true) => format!(
            "c::put_opt_array(buf, self.{field}.as_deref(), flexible, |buf, e| {})?;",
            elem_write(inner)
        ),
        (Ty::Struct(_), false) => format!("self.{field}.write(buf, version)?;"),
        (Ty::Struct(_), true) => {
            format!(
                "c::put_opt_struct(buf, self.{field}.as_ref(), |buf, e| e.write(buf, version))?;"
            )
        }
    }
}

fn field_read(f: &Field) -> String {
    match (&f.ty, f.nullable) {
        (Ty::Bool, _) => "c::get_bool(buf)".into(),
        (Ty::Int(t), _) => format!("c::get_{t}(buf)"),
        (Ty::Str, false) => "c::get_str(buf, flexible)".into(),
        (Ty::Str, true) => "c::get_opt_str(buf, flexible)".into(),
        (Ty::Array(inner), false) => {
            format!("c::get_array(buf, flexible, |buf| {})", elem_read(inner))
        }
        (Ty::Array(inner), true) => format!(
            "c::get_opt_array(buf, flexible, |buf| {})",
            elem_read(inner)
        ),
        (Ty::Struct(n), false) => format!("{n}::read(buf, version)"),
        (Ty::Struct(n), true) => format!("c::get_opt_struct(buf, |buf| {n}::read(buf, version))"),
    }
}

/// Rust keywords a Kafka field name could turn into.
fn field_ident(name: &str) -> String {
    let s = snake(name);
    match s.as_str() {
        "type" | "match" | "ref" | "self" | "struct" | "mod" | "move" => format!("r#{s}"),
        _ => s,
    }
}

fn emit_struct(out: &mut String, s: &StructDef, schema: &Schema, top: bool) -> Result<(), String> {
    let valid = schema.valid;
    let about = if top {
        format!("The {} message (API key {}).", schema.name, schema.api_key)
    } else if s.about.is_empty() {
        format!("`{}` of the {} message.", s.name, schema.name)
    } else {
        s.about.clone()
    };
    writeln!(out, "/// {about}").unwrap();
    writeln!(out, "#[derive(Debug, Clone, PartialEq)]").unwrap();
    writeln!(out, "pub struct {} {{", s.name).unwrap();
    for f in &s.fields {
        let v = f.versions.within(valid);
        let when = if v.lo <= valid.lo && v.hi >= valid.hi {
            String::new()
        } else if v.hi >= valid.hi {
            format!(" (v{}+)", v.lo)
        } else if v.lo == v.hi {
            format!(" (v{} only)", v.lo)
        } else {
            format!(" (v{}-v{})", v.lo, v.hi)
        };
        writeln!(out, "    /// {}{when}", f.about).unwrap();
        writeln!(out, "    pub {}: {},", field_ident(&f.name), rust_type(f)).unwrap();
    }
    writeln!(
        out,
        "    /// Tagged fields Rill does not know, kept so the message re-encodes as it came."
    )
    .unwrap();
    writeln!(out, "    pub unknown_tagged_fields: BTreeMap<i32, Bytes>,").unwrap();
    writeln!(out, "}}\n").unwrap();

    writeln!(out, "impl Default for {} {{", s.name).unwrap();
    writeln!(out, "    fn default() -> Self {{").unwrap();
    writeln!(out, "        Self {{").unwrap();
    for f in &s.fields {
        writeln!(
            out,
            "            {}: {},",
            field_ident(&f.name),
            default_expr(f)?
        )
        .unwrap();
    }
    writeln!(out, "            unknown_tagged_fields: BTreeMap::new(),").unwrap();
    writeln!(out, "        }}\n    }}\n}}\n").unwrap();

    let flexible = match schema.flexible.condition(valid) {
        None => "true".to_string(),
        Some(c) => c,
    };
    // Structs whose fields neither change by version nor nest structs
    // ignore the version (named `_version` so rustc does not warn).
    let uses_version = s
        .fields
        .iter()
        .any(|f| struct_name(&f.ty).is_some() || f.versions.condition(valid).is_some())
        || schema.flexible.condition(valid).is_some();
    let version_param = if uses_version { "version" } else { "_version" };
    writeln!(out, "impl {} {{", s.name).unwrap();
    writeln!(out, "    pub(crate) fn write<B: ByteBufMut>(&self, buf: &mut B, {version_param}: i16) -> Result<()> {{").unwrap();
    writeln!(out, "        let flexible = {flexible};").unwrap();
    for f in &s.fields {
        let id = field_ident(&f.name);
        let w = field_write(f, &id);
        match f.versions.condition(valid) {
            None => writeln!(out, "        {w}").unwrap(),
            Some(cond) => {
                writeln!(out, "        if {cond} {{\n            {w}").unwrap();
                if f.ignorable {
                    writeln!(out, "        }}").unwrap();
                } else {
                    writeln!(
                        out,
                        "        }} else if {} {{",
                        differs_from_default(f, &id)?
                    )
                    .unwrap();
                    writeln!(
                        out,
                        "            anyhow::bail!(\"{}.{} cannot be sent at version {{version}}\");\n        }}",
                        s.name, f.name
                    )
                    .unwrap();
                }
            }
        }
    }
    writeln!(out, "        if flexible {{\n            c::put_tagged_fields(buf, &self.unknown_tagged_fields)?;\n        }}").unwrap();
    writeln!(out, "        Ok(())\n    }}\n").unwrap();

    writeln!(
        out,
        "    pub(crate) fn read<B: ByteBuf>(buf: &mut B, {version_param}: i16) -> Result<Self> {{"
    )
    .unwrap();
    writeln!(out, "        let flexible = {flexible};").unwrap();
    writeln!(out, "        let mut this = Self::default();").unwrap();
    for f in &s.fields {
        let id = field_ident(&f.name);
        let r = format!(
            "this.{id} = {}.context(\"{}.{}\")?;",
            field_read(f),
            s.name,
            f.name
        );
        match f.versions.condition(valid) {
            None => writeln!(out, "        {r}").unwrap(),
            Some(cond) => {
                writeln!(out, "        if {cond} {{\n            {r}\n        }}").unwrap()
            }
        }
    }
    writeln!(out, "        if flexible {{\n            this.unknown_tagged_fields = c::get_tagged_fields(buf)?;\n        }}").unwrap();
    writeln!(out, "        Ok(this)\n    }}\n}}\n").unwrap();
    Ok(())
}

/// The module for one schema, as the generator writes it.
pub(crate) fn generate(file: &str, src: &str) -> Result<String, String> {
    let schema = parse(src).map_err(|e| format!("{file}.json: {e}"))?;
    if schema.name != file {
        return Err(format!("{file}.json names its message {}", schema.name));
    }
    if schema.valid.hi == i16::MAX || schema.valid.is_empty() {
        return Err(format!("{file}.json: validVersions must be a closed range"));
    }
    let (lo, hi) = (schema.valid.lo, schema.valid.hi);
    let mut out = String::new();
    writeln!(
        out,
        "//! {} (API key {}), versions {lo}-{hi}.",
        schema.name, schema.api_key
    )
    .unwrap();
    writeln!(out, "//!").unwrap();
    writeln!(
        out,
        "//! Generated by `messages::codegen` from `schemas/{file}.json`; do not edit."
    )
    .unwrap();
    writeln!(
        out,
        "//! Regenerate with `RILL_REGENERATE=1 cargo test --release -p rill-protocol codegen`."
    )
    .unwrap();
    writeln!(out).unwrap();
    writeln!(
        out,
        "// Every struct gets the same shape whatever its fields: a written-out"
    )
    .unwrap();
    writeln!(
        out,
        "// Default (the schema's defaults) and a reader that fills a default."
    )
    .unwrap();
    writeln!(
        out,
        "#![allow(clippy::derivable_impls, clippy::field_reassign_with_default)]"
    )
    .unwrap();
    writeln!(out).unwrap();
    writeln!(out, "use std::collections::BTreeMap;\n").unwrap();
    writeln!(out, "use anyhow::Context;").unwrap();
    writeln!(out, "use bytes::Bytes;").unwrap();
    writeln!(
        out,
        "use kafka_protocol::protocol::buf::{{ByteBuf, ByteBufMut}};"
    )
    .unwrap();
    writeln!(
        out,
        "use kafka_protocol::protocol::{{Decodable, Encodable, HeaderVersion, Message, StrBytes, VersionRange}};\n"
    )
    .unwrap();
    writeln!(out, "use super::codec::{{self as c, Result}};\n").unwrap();
    for (i, s) in schema.structs.iter().enumerate() {
        emit_struct(&mut out, s, &schema, i == 0)?;
    }
    let name = &schema.name;
    let (flex_header, classic_header) = if schema.request { (2, 1) } else { (1, 0) };
    let header_fn = match schema.flexible.condition(schema.valid) {
        None => format!("    fn header_version(_version: i16) -> i16 {{\n        {flex_header}\n    }}\n"),
        Some(cond) => format!(
            "    fn header_version(version: i16) -> i16 {{\n        if {cond} {{\n            {flex_header}\n        }} else {{\n            {classic_header}\n        }}\n    }}\n"
        ),
    };
    write!(
        out,
        "impl Encodable for {name} {{
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> Result<()> {{
        c::check_version({name:?}, version, {lo}, {hi})?;
        self.write(buf, version)
    }}

    fn compute_size(&self, version: i16) -> Result<usize> {{
        let mut scratch = Vec::new();
        self.encode(&mut scratch, version)?;
        Ok(scratch.len())
    }}
}}

impl Decodable for {name} {{
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> Result<Self> {{
        c::check_version({name:?}, version, {lo}, {hi})?;
        Self::read(buf, version)
    }}
}}

impl Message for {name} {{
    const VERSIONS: VersionRange = VersionRange {{ min: {lo}, max: {hi} }};
    const DEPRECATED_VERSIONS: Option<VersionRange> = None;
}}

impl HeaderVersion for {name} {{
{header_fn}}}
"
    )
    .unwrap();
    if schema.request {
        let resp = name.trim_end_matches("Request").to_string() + "Response";
        write!(
            out,
            "
impl kafka_protocol::protocol::Request for {name} {{
    const KEY: i16 = {};
    type Response = super::{}::{resp};
}}
",
            schema.api_key,
            snake(&resp)
        )
        .unwrap();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn crate_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    /// The checked-in modules are what the schemas give (after rustfmt);
    /// with `RILL_REGENERATE=1` they are rewritten.
    #[test]
    fn generated_modules_are_current() {
        let regenerate = std::env::var("RILL_REGENERATE").is_ok_and(|v| v == "1");
        let mut stale = Vec::new();
        for file in SCHEMAS {
            let src =
                std::fs::read_to_string(crate_dir().join("schemas").join(format!("{file}.json")))
                    .unwrap_or_else(|e| panic!("schemas/{file}.json: {e}"));
            let code = rustfmt(&generate(file, &src).unwrap_or_else(|e| panic!("{e}")));
            let path = crate_dir()
                .join("src/messages")
                .join(format!("{}.rs", snake(file)));
            if regenerate {
                std::fs::write(&path, &code).unwrap();
            }
            if std::fs::read_to_string(&path).unwrap_or_default() != code {
                stale.push(path.display().to_string());
            }
        }
        assert!(
            stale.is_empty(),
            "generated modules differ from their schemas: {stale:?}; run RILL_REGENERATE=1 cargo test --release -p rill-protocol codegen"
        );
    }

    /// `code` as `cargo fmt` leaves it (rustfmt reads the repository's
    /// settings from the crate directory upwards).
    fn rustfmt(code: &str) -> String {
        use std::io::Write;
        let mut child = std::process::Command::new("rustfmt")
            .args(["--edition", "2021", "--emit", "stdout"])
            .current_dir(crate_dir())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("rustfmt (part of the Rust toolchain) runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(code.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "rustfmt failed on generated code");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn refuses_what_it_cannot_generate() {
        let with = |field: &str| {
            format!(
                r#"{{"apiKey": 1, "type": "request", "name": "X", "validVersions": "0-1",
                   "flexibleVersions": "0+", "fields": [{field}]}}"#
            )
        };
        for (field, why) in [
            (
                r#"{"name": "A", "type": "bytes", "versions": "0+"}"#,
                "not supported",
            ),
            (
                r#"{"name": "A", "type": "int32", "versions": "0+", "tag": 0, "taggedVersions": "0+"}"#,
                "tagged",
            ),
            (
                r#"{"name": "A", "type": "string", "versions": "0+", "nullableVersions": "1+"}"#,
                "only some",
            ),
            (
                r#"{"name": "A", "type": "[]Missing", "versions": "0+"}"#,
                "not defined",
            ),
            (
                r#"{"name": "A", "type": "[][]int32", "versions": "0+"}"#,
                "arrays of arrays",
            ),
        ] {
            let err = generate("X", &with(field)).err().unwrap_or_default();
            assert!(err.contains(why), "{field}: {err}");
        }
    }

    #[test]
    fn version_conditions() {
        let valid = Versions::parse("0-1").unwrap();
        assert_eq!(Versions::parse("0+").unwrap().condition(valid), None);
        assert_eq!(
            Versions::parse("1+").unwrap().condition(valid).as_deref(),
            Some("version >= 1")
        );
        assert_eq!(
            Versions::parse("0").unwrap().condition(valid).as_deref(),
            Some("version <= 0")
        );
        assert_eq!(
            Versions::parse("none").unwrap().condition(valid).as_deref(),
            Some("false")
        );
        assert_eq!(
            strip_comments("{\"a\": \"x//y\"} // c"),
            "{\"a\": \"x//y\"} \n"
        );
    }
}
