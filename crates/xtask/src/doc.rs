//! A YAML/JSON document with its keys in order, read with serde-saphyr, and written the way the
//! files of this repository were first written (PyYAML's `safe_dump` in block style, Python's
//! `json.dumps(indent=2)`), so that regenerating a file changes no byte that did not change.
//!
//! `Node` walks a document and names the path of what is missing or of the wrong type.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::Error;

/// One value of a document. Mappings keep their keys in the order they were read or inserted.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Value>),
    Map(Map),
}

/// A mapping in insertion order; `insert` of a present key replaces its value in place.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Map(Vec<(String, Value)>);

impl Map {
    pub fn new() -> Self {
        Map(Vec::new())
    }
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        let value = value.into();
        match self.get_mut(&key) {
            Some(v) => *v = value,
            None => self.0.push((key, value)),
        }
    }
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(i).1)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The mapping under `key`, made (empty, at the end) when absent; Python's `setdefault`.
    pub fn map_entry(&mut self, key: &str) -> Result<&mut Map, Error> {
        if !self.contains_key(key) {
            self.insert(key, Map::new());
        }
        match self.get_mut(key) {
            Some(Value::Map(m)) => Ok(m),
            _ => Err(Error::new(format!("{key}: expected a mapping"))),
        }
    }
    /// The entries whose key `keep` accepts, in order.
    pub fn filtered(&self, keep: impl Fn(&str) -> bool) -> Map {
        Map(self.0.iter().filter(|(k, _)| keep(k)).cloned().collect())
    }
}

impl<K: Into<String>, V: Into<Value>> FromIterator<(K, V)> for Map {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = Map::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i.into())
    }
}
impl From<i32> for Value {
    fn from(i: i32) -> Self {
        Value::Int(i.into())
    }
}
impl From<Map> for Value {
    fn from(m: Map) -> Self {
        Value::Map(m)
    }
}
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Self {
        Value::Seq(v.into_iter().map(Into::into).collect())
    }
}

/// A mapping literal: `map![("a", 1), ("b", "x")]`.
#[macro_export]
macro_rules! map {
    ($(($k:expr, $v:expr)),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut m = $crate::doc::Map::new();
        $(m.insert($k, $v);)*
        m
    }};
}

impl Value {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::Seq(s) => Some(s),
            _ => None,
        }
    }
    /// Python's truth value: false for null, false, 0, "", [] and {}.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::Seq(s) => !s.is_empty(),
            Value::Map(m) => !m.is_empty(),
        }
    }
    /// The strings of a sequence (other items and other values give none).
    pub fn strs(&self) -> Vec<&str> {
        self.as_seq()
            .map(|s| s.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// Reading.

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Seq(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            out.insert(k, v);
        }
        Ok(Value::Map(out))
    }
}

/// YAML as Kubernetes and PyYAML read it (YAML 1.1 scalars): `0440` is octal (288), `yes` and
/// `off` are bools. A key given twice is an error.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! { legacy_octal_numbers: true }
}

/// One YAML document of `text` (read from `what`, named in the error).
pub fn parse_yaml(text: &str, what: &str) -> Result<Value, Error> {
    serde_saphyr::from_str_with_options(text, yaml_options())
        .map_err(|e| Error::new(format!("{what}: not valid YAML: {e}")))
}

/// Every non-empty document of a multi-document YAML stream.
pub fn parse_yaml_all(text: &str, what: &str) -> Result<Vec<Value>, Error> {
    let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(text, yaml_options())
        .map_err(|e| Error::new(format!("{what}: not valid YAML: {e}")))?;
    Ok(docs.into_iter().filter(Value::truthy).collect())
}

// ---------------------------------------------------------------------------------------------
// Walking, with the path in every error.

/// A value and the path it was reached by (`the chart's rendering: Deployment.spec.replicas`).
#[derive(Clone, Debug)]
pub struct Node<'a> {
    pub value: &'a Value,
    root: &'a str,
    path: String,
}

impl<'a> Node<'a> {
    pub fn root(value: &'a Value, name: &'a str) -> Self {
        Node {
            value,
            root: name,
            path: String::new(),
        }
    }
    /// The path from the root, `name: a.b[0].c`.
    pub fn path(&self) -> String {
        if self.path.is_empty() {
            self.root.to_string()
        } else {
            format!("{}: {}", self.root, self.path)
        }
    }
    fn child(&self, value: &'a Value, part: &str) -> Node<'a> {
        let path = if self.path.is_empty() || part.starts_with('[') {
            format!("{}{part}", self.path)
        } else {
            format!("{}.{part}", self.path)
        };
        Node {
            value,
            root: self.root,
            path,
        }
    }
    fn err(&self, what: &str) -> Error {
        Error::new(format!("{} {what}", self.path()))
    }
    /// The value under `key`, or an error naming the path when it is missing.
    pub fn get(&self, key: &str) -> Result<Node<'a>, Error> {
        self.opt(key)
            .ok_or_else(|| self.err(&format!("has no field '{key}'")))
    }
    /// The value under `key` when there is one (and this is a mapping).
    pub fn opt(&self, key: &str) -> Option<Node<'a>> {
        let v = self.value.as_map()?.get(key)?;
        Some(self.child(v, key))
    }
    pub fn str(&self) -> Result<&'a str, Error> {
        self.value
            .as_str()
            .ok_or_else(|| self.err("is not a string"))
    }
    pub fn map(&self) -> Result<&'a Map, Error> {
        self.value
            .as_map()
            .ok_or_else(|| self.err("is not a mapping"))
    }
    pub fn seq(&self) -> Result<&'a [Value], Error> {
        self.value.as_seq().ok_or_else(|| self.err("is not a list"))
    }
    pub fn int(&self) -> Result<i128, Error> {
        match self.value {
            Value::Int(i) => Ok(*i),
            _ => Err(self.err("is not an integer")),
        }
    }
    /// The items of a list, each with its index in the path; null gives none.
    pub fn items(&self) -> Result<Vec<Node<'a>>, Error> {
        if *self.value == Value::Null {
            return Ok(vec![]);
        }
        let items = self.seq()?;
        Ok(items
            .iter()
            .enumerate()
            .map(|(i, v)| self.child(v, &format!("[{i}]")))
            .collect())
    }
    /// The items of the list under `key`; none when it is absent.
    pub fn items_of(&self, key: &str) -> Result<Vec<Node<'a>>, Error> {
        match self.opt(key) {
            Some(n) => n.items(),
            None => Ok(vec![]),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Python's json.dumps(value, indent=2) (ensure_ascii, ", " / ": " separators).

pub fn to_python_json(v: &Value) -> String {
    let mut out = String::new();
    json_value(v, 0, &mut out);
    out
}

fn json_value(v: &Value, level: usize, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Float(f) => out.push_str(&python_float_json(*f)),
        Value::Str(s) => json_str(s, out),
        Value::Seq(items) if items.is_empty() => out.push_str("[]"),
        Value::Map(m) if m.is_empty() => out.push_str("{}"),
        Value::Seq(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                out.push_str(&" ".repeat((level + 1) * 2));
                json_value(item, level + 1, out);
            }
            out.push('\n');
            out.push_str(&" ".repeat(level * 2));
            out.push(']');
        }
        Value::Map(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                out.push_str(&" ".repeat((level + 1) * 2));
                json_str(k, out);
                out.push_str(": ");
                json_value(item, level + 1, out);
            }
            out.push('\n');
            out.push_str(&" ".repeat(level * 2));
            out.push('}');
        }
    }
}

fn json_str(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(ch),
            _ => {
                let mut buf = [0u16; 2];
                for unit in ch.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest digits that read back, positional for exponents
/// -4..16, else `d.ddde+XX`.
fn python_float_repr(f: f64) -> String {
    let sci = format!("{f:e}"); // shortest round-trip digits: "-1.2345e-7"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the point
        let s = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{s}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        let esign = if exp < 0 { "-" } else { "+" };
        format!("{sign}{m}e{esign}{:02}", exp.abs())
    }
}

fn python_float_json(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        python_float_repr(f)
    }
}

#[path = "doc_yaml.rs"]
mod yaml;
pub use yaml::to_pyyaml;

#[cfg(test)]
#[path = "doc_tests.rs"]
mod tests;
