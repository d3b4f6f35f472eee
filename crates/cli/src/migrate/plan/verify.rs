//! What the verification after step 2 compares: identities (UIDs) and, of SidecarSets, the
//! objects themselves.

use super::Obj;

/// What changed in an object between `before` and `after` (JSON), as the paths that differ,
/// ignoring what the API server and the controllers write by themselves: `status`,
/// `metadata.resourceVersion`, `metadata.generation` and `metadata.managedFields`. Empty when
/// it is as it was (a field pruned by a schema is a change).
pub fn changed(before: &serde_json::Value, after: &serde_json::Value) -> Vec<String> {
    fn strip(v: &serde_json::Value) -> serde_json::Value {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("status");
        }
        if let Some(m) = v
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        {
            for k in ["resourceVersion", "generation", "managedFields"] {
                m.remove(k);
            }
        }
        v
    }
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value::{Array, Object};
        match (a, b) {
            (Object(x), Object(y)) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let null = serde_json::Value::Null;
                    let (l, r) = (x.get(k).unwrap_or(&null), y.get(k).unwrap_or(&null));
                    walk(&format!("{path}.{k}"), l, r, out);
                }
            }
            (Array(x), Array(y)) if x.len() == y.len() => {
                for (i, (l, r)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), l, r, out);
                }
            }
            _ if a != b => out.push(path.trim_start_matches('.').to_string()),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", &strip(before), &strip(after), &mut out);
    out
}

/// Objects of `before` that are gone from `after`, or came back with another UID
/// (deleted and recreated), as sentences.
pub fn lost(what: &str, before: &[Obj], after: &[Obj]) -> Vec<String> {
    let now: std::collections::BTreeMap<String, &str> =
        after.iter().map(|o| (o.key(), o.uid.as_str())).collect();
    before
        .iter()
        .filter_map(|b| match now.get(&b.key()) {
            None => Some(format!("{what} {} is gone (uid {})", b.key(), b.uid)),
            Some(uid) if *uid != b.uid => Some(format!(
                "{what} {} was recreated (uid {} before, {uid} now)",
                b.key(),
                b.uid
            )),
            Some(_) => None,
        })
        .collect()
}
