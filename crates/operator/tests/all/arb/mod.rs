//! Arbitrary JSON for property tests: objects built from `keys` (so that the code under test
//! meets the field names it looks for), arrays and scalars, nested up to `depth`; and the case
//! count of every property ([`config`]).

// Shared by several test crates, each of which uses only part of it.
#![allow(dead_code)]

use proptest::prelude::*;
use serde_json::{Value, json};

pub fn json_value(depth: u32, keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|i| json!(i)),
        "[a-z]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(depth, 32, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(keys.to_vec()).prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A property's config: `default_cases` cases (what `cargo test` runs, kept fast), or
/// `PROPTEST_CASES` when set (`make fuzz` sets it to run the same properties long).
pub fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        // Long runs shrink a failure quickly enough and never stop on rejected cases.
        max_shrink_iters: 4096,
        ..ProptestConfig::default()
    }
}

/// Structural mutations of a JSON document: a member removed, a value replaced by arbitrary
/// JSON, a scalar changed in type, an array emptied or an element duplicated; `path` picks where
/// (taken modulo the number of nodes, so any number works).
#[derive(Debug, Clone)]
pub enum Mutation {
    Remove(usize),
    Replace(usize, Value),
    Duplicate(usize),
    Empty(usize),
}

pub fn mutation(keys: &'static [&'static str]) -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Remove),
        (any::<usize>(), json_value(2, keys)).prop_map(|(i, v)| Mutation::Replace(i, v)),
        any::<usize>().prop_map(Mutation::Duplicate),
        any::<usize>().prop_map(Mutation::Empty),
    ]
}

/// Every node's JSON pointer, in document order (the root is "").
pub fn pointers(v: &Value) -> Vec<String> {
    fn walk(v: &Value, at: String, out: &mut Vec<String>) {
        out.push(at.clone());
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    let k = k.replace('~', "~0").replace('/', "~1");
                    walk(c, format!("{at}/{k}"), out);
                }
            }
            Value::Array(a) => {
                for (i, c) in a.iter().enumerate() {
                    walk(c, format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, String::new(), &mut out);
    out
}

/// Applies one mutation to `doc` (never at the root, so the document stays an object).
pub fn mutate(doc: &mut Value, m: &Mutation) {
    let ptrs = pointers(doc);
    if ptrs.len() < 2 {
        return;
    }
    let pick = |i: usize| ptrs[1 + i % (ptrs.len() - 1)].clone();
    match m {
        Mutation::Replace(i, v) => {
            if let Some(slot) = doc.pointer_mut(&pick(*i)) {
                *slot = v.clone();
            }
        }
        Mutation::Remove(i) => {
            let p = pick(*i);
            let (parent, last) = p.rsplit_once('/').unwrap_or(("", &p));
            let last = last.replace("~1", "/").replace("~0", "~");
            match doc.pointer_mut(parent) {
                Some(Value::Object(o)) => {
                    o.remove(&last);
                }
                Some(Value::Array(a)) => {
                    if let Ok(i) = last.parse::<usize>()
                        && i < a.len()
                    {
                        a.remove(i);
                    }
                }
                _ => {}
            }
        }
        Mutation::Duplicate(i) => {
            if let Some(Value::Array(a)) = doc.pointer_mut(&pick(*i))
                && let Some(first) = a.first().cloned()
            {
                a.push(first);
            }
        }
        Mutation::Empty(i) => match doc.pointer_mut(&pick(*i)) {
            Some(Value::Array(a)) => a.clear(),
            Some(Value::Object(o)) => o.clear(),
            Some(Value::String(s)) => s.clear(),
            _ => {}
        },
    }
}
