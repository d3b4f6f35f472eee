//! The JSON that OpenKruise's Go code writes for a SidecarSet's parts, byte for byte.
//!
//! OpenKruise hashes `json.Marshal` of Go structs and names ControllerRevisions after the FNV
//! hash of Go-encoded data; serde's JSON of our types differs in key order, in what is left out
//! and in escaping. This module rebuilds Go's output from the serde JSON value of a type, driven
//! by a table of the Go struct layout ([`core_v1`] for the Kubernetes types, [`kruise`] for
//! OpenKruise's own):
//!
//! * fields in Go declaration order, embedded structs flattened;
//! * `omitempty`: an empty string, `false`, `0`, an empty or absent slice or map, and an absent
//!   pointer are left out; a **struct value is never left out** (an absent `resources` is
//!   `"resources":{}`); a pointer that is set is written even when it points at a zero value;
//! * without `omitempty`: an absent pointer, slice or map is `null`, an absent string `""`, an
//!   absent number `0`;
//! * quantities in Kubernetes' canonical form ([`super::quantity`]), int-or-string as a number or
//!   a string, map keys sorted, no whitespace, `<`, `>`, `&`, U+2028 and U+2029 escaped as Go does.
//!
//! A key the table does not know (a field of a Kubernetes newer than the table) is not dropped:
//! it is appended after the known fields, unknown keys in sorted order, its value written as
//! generic JSON (keys sorted). Go would have no field for it, so such a value can never match
//! an OpenKruise hash anyway; keeping it means a change to it still changes our hash.

pub(crate) mod core_v1;
pub(crate) mod kruise;

use serde_json::{Map, Number, Value};

/// The tag says `omitempty`.
pub(crate) const OMIT: u8 = 1;
/// The Go field is a pointer (`*T`).
pub(crate) const PTR: u8 = 2;

/// A Go struct as encoding/json sees it.
pub(crate) struct Ty {
    pub fields: &'static [Field],
}

/// One field of a Go struct.
pub(crate) struct Field {
    pub name: &'static str,
    pub flags: u8,
    pub shape: Shape,
    pub elem: Elem,
}

/// How a field holds its element type.
#[derive(Clone, Copy)]
pub(crate) enum Shape {
    /// A single value (or a pointer to one, with [`PTR`]).
    One,
    /// `[]T`.
    Slice,
    /// `map[string]T`.
    Map,
    /// An embedded struct whose fields are written in place (`json:",inline"`); `name` unused.
    Inline,
}

/// The Go element type of a field.
#[derive(Clone, Copy)]
pub(crate) enum Elem {
    Str,
    Bool,
    /// Any Go integer type.
    Int,
    /// `resource.Quantity`: a struct written as its canonical string; zero is `"0"`.
    Quantity,
    /// `intstr.IntOrString`: a struct written as a number or a string; zero is `0`.
    IntOrString,
    /// `metav1.Time`: a struct written as its RFC 3339 string; zero is `null`.
    Time,
    /// Raw JSON (`metav1.FieldsV1`).
    Raw,
    Struct(&'static Ty),
}

pub(crate) const fn f(name: &'static str, flags: u8, shape: Shape, elem: Elem) -> Field {
    Field {
        name,
        flags,
        shape,
        elem,
    }
}

/// A JSON value as Go writes it: object members in the order they are to be written.
#[derive(Clone, Debug, PartialEq)]
pub enum Go {
    Null,
    Bool(bool),
    Num(Number),
    Str(String),
    Arr(Vec<Go>),
    Obj(Vec<(String, Go)>),
}

/// How numbers are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Numbers {
    /// As Go writes its integer fields: the integer as it is.
    Typed,
    /// As Go writes a number decoded into `interface{}` (a `float64`): integers beyond 2^53
    /// lose precision, large and tiny ones use an exponent.
    Float64,
}

impl Go {
    /// The JSON text, with Go's escaping and no whitespace.
    pub fn to_json(&self, numbers: Numbers) -> String {
        let mut out = String::new();
        self.write(&mut out, numbers);
        out
    }

    fn write(&self, out: &mut String, numbers: Numbers) {
        match self {
            Go::Null => out.push_str("null"),
            Go::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Go::Num(n) => write_number(n, numbers, out),
            Go::Str(s) => write_string(s, out),
            Go::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out, numbers);
                }
                out.push(']');
            }
            Go::Obj(members) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(k, out);
                    out.push(':');
                    v.write(out, numbers);
                }
                out.push('}');
            }
        }
    }

    /// The value as Go writes it after decoding it into `map[string]interface{}`: every
    /// object's keys sorted.
    pub fn sorted(self) -> Go {
        match self {
            Go::Arr(items) => Go::Arr(items.into_iter().map(Go::sorted).collect()),
            Go::Obj(members) => {
                let mut members: Vec<(String, Go)> =
                    members.into_iter().map(|(k, v)| (k, v.sorted())).collect();
                members.sort_by(|a, b| a.0.cmp(&b.0));
                Go::Obj(members)
            }
            v => v,
        }
    }
}

/// Go's encoding of a struct of type `ty` whose serde JSON is `v` (an absent or null value is
/// the struct's zero value).
pub(crate) fn encode_struct(ty: &Ty, v: Option<&Value>) -> Go {
    let empty = Map::new();
    let map = v.and_then(Value::as_object).unwrap_or(&empty);
    let mut members = Vec::new();
    let mut known = Vec::new();
    encode_fields(ty, map, &mut members, &mut known);
    let mut unknown: Vec<(&String, &Value)> = map
        .iter()
        .filter(|(k, v)| !v.is_null() && !known.contains(&k.as_str()))
        .collect();
    unknown.sort_by(|a, b| a.0.cmp(b.0));
    members.extend(unknown.into_iter().map(|(k, v)| (k.clone(), generic(v))));
    Go::Obj(members)
}

/// A list of structs of type `ty`, as Go writes a slice of them (`None`: a nil slice, `null`).
pub(crate) fn encode_slice(ty: &Ty, items: Option<&[Value]>) -> Go {
    match items {
        None => Go::Null,
        Some(items) => Go::Arr(items.iter().map(|v| encode_struct(ty, Some(v))).collect()),
    }
}

/// Go's encoding of the field `name` of a struct of type `ty` whose serde JSON is `v`; `None`
/// when Go leaves it out (or `ty` has no such field).
pub(crate) fn encode_named_field(ty: &Ty, v: &Value, name: &str) -> Option<Go> {
    let field = ty.fields.iter().find(|f| f.name == name)?;
    encode_field(field, v.get(name).filter(|v| !v.is_null()))
}

fn encode_fields(
    ty: &Ty,
    map: &Map<String, Value>,
    members: &mut Vec<(String, Go)>,
    known: &mut Vec<&'static str>,
) {
    for field in ty.fields {
        if let (Shape::Inline, Elem::Struct(inner)) = (field.shape, field.elem) {
            encode_fields(inner, map, members, known);
            continue;
        }
        known.push(field.name);
        if let Some(v) = encode_field(field, map.get(field.name).filter(|v| !v.is_null())) {
            members.push((field.name.to_string(), v));
        }
    }
}

/// One field, or `None` when Go leaves it out.
fn encode_field(field: &Field, v: Option<&Value>) -> Option<Go> {
    let omit = field.flags & OMIT != 0;
    match field.shape {
        Shape::Slice => match v {
            None => (!omit).then_some(Go::Null),
            Some(Value::Array(items)) if items.is_empty() && omit => None,
            Some(Value::Array(items)) => Some(Go::Arr(
                items.iter().map(|x| encode_elem(field.elem, x)).collect(),
            )),
            Some(other) => Some(generic(other)),
        },
        Shape::Map => match v {
            None => (!omit).then_some(Go::Null),
            Some(Value::Object(m)) if m.is_empty() && omit => None,
            Some(Value::Object(m)) => {
                let mut members: Vec<(String, Go)> = m
                    .iter()
                    .map(|(k, x)| (k.clone(), encode_elem(field.elem, x)))
                    .collect();
                members.sort_by(|a, b| a.0.cmp(&b.0));
                Some(Go::Obj(members))
            }
            Some(other) => Some(generic(other)),
        },
        Shape::One | Shape::Inline if field.flags & PTR != 0 => match v {
            None => (!omit).then_some(Go::Null),
            Some(v) => Some(encode_elem(field.elem, v)),
        },
        Shape::One | Shape::Inline => match (field.elem, v) {
            (Elem::Struct(_), Some(v)) if !v.is_object() => Some(generic(v)),
            (Elem::Struct(ty), v) => Some(encode_struct(ty, v)),
            (Elem::Quantity, None) => Some(Go::Str("0".into())),
            (Elem::IntOrString, None) => Some(Go::Num(0.into())),
            (Elem::Time | Elem::Raw, None) => Some(Go::Null),
            (Elem::Str, None) => (!omit).then(|| Go::Str(String::new())),
            (Elem::Bool, None) => (!omit).then_some(Go::Bool(false)),
            (Elem::Int, None) => (!omit).then(|| Go::Num(0.into())),
            (Elem::Str, Some(Value::String(s))) if omit && s.is_empty() => None,
            (Elem::Bool, Some(Value::Bool(false))) if omit => None,
            (Elem::Int, Some(Value::Number(n))) if omit && is_zero(n) => None,
            (elem, Some(v)) => Some(encode_elem(elem, v)),
        },
    }
}

fn is_zero(n: &Number) -> bool {
    n.as_i64() == Some(0) || n.as_u64() == Some(0) || n.as_f64() == Some(0.0)
}

/// A value of the element type (present: pointers and slice or map members).
fn encode_elem(elem: Elem, v: &Value) -> Go {
    match (elem, v) {
        (Elem::Struct(ty), Value::Object(_)) => encode_struct(ty, Some(v)),
        (Elem::Quantity, Value::String(s)) => {
            Go::Str(super::quantity::canonical(s).unwrap_or_else(|| s.clone()))
        }
        (Elem::Quantity, Value::Number(n)) => {
            let s = n.to_string();
            Go::Str(super::quantity::canonical(&s).unwrap_or(s))
        }
        _ => generic(v),
    }
}

/// Any JSON value, objects with their keys sorted (as Go writes a `map[string]interface{}`).
pub(crate) fn generic(v: &Value) -> Go {
    match v {
        Value::Null => Go::Null,
        Value::Bool(b) => Go::Bool(*b),
        Value::Number(n) => Go::Num(n.clone()),
        Value::String(s) => Go::Str(s.clone()),
        Value::Array(items) => Go::Arr(items.iter().map(generic).collect()),
        Value::Object(m) => {
            let mut members: Vec<(String, Go)> =
                m.iter().map(|(k, v)| (k.clone(), generic(v))).collect();
            members.sort_by(|a, b| a.0.cmp(&b.0));
            Go::Obj(members)
        }
    }
}

/// A JSON string as Go's encoding/json writes it (HTML-safe).
fn write_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{00}'..='\u{1f}' => {
                let b = c as u8;
                out.push_str("\\u00");
                out.push(HEX[(b >> 4) as usize] as char);
                out.push(HEX[(b & 0xf) as usize] as char);
            }
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_number(n: &Number, numbers: Numbers, out: &mut String) {
    match (numbers, n.as_i64(), n.as_u64()) {
        (Numbers::Typed, Some(i), _) => out.push_str(&i.to_string()),
        (Numbers::Typed, None, Some(u)) => out.push_str(&u.to_string()),
        _ => out.push_str(&go_float(n.as_f64().unwrap_or(0.0))),
    }
}

/// A float64 as Go's encoding/json writes it: the shortest decimal that reads back the same,
/// without an exponent from 1e-6 up to 1e21, with one (`1e+21`, `1e-7`) outside.
pub(crate) fn go_float(x: f64) -> String {
    let abs = x.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        // Rust's Display is the shortest round-trip decimal without an exponent, as Go's 'f'.
        return format!("{x}");
    }
    let e = format!("{x:e}");
    match e.split_once('e') {
        Some((mantissa, exp)) if exp.starts_with('-') => format!("{mantissa}e{exp}"),
        Some((mantissa, exp)) => {
            let exp = if exp.len() < 2 {
                format!("0{exp}")
            } else {
                exp.to_string()
            };
            format!("{mantissa}e+{exp}")
        }
        None => e,
    }
}

#[cfg(test)]
mod tests;
