//! The end state of a run as one JSON document, the masks learnt from two fault-free runs
//! (the JSON pointers whose values differed between them: uids, timestamps, ...), and the
//! comparison of a perturbed run's end state with the fault-free one up to those masks.

use super::run::Run;
use super::scenarios::{BYSTANDER, is_sidecar, working};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Map, Value, json};
use sidecarset_core::api::v1beta1::SidecarSet;
use std::collections::{BTreeMap, BTreeSet};

pub const MASKED: &str = "<masked>";

/// The end state: the SidecarSet (generation, status), the pods' names, the pods' states as a
/// multiset (names left out: which pods a rollout step picks depends on when each became ready
/// and was created, to the second, as in OpenKruise, so it differs between runs; how many pods
/// are in each state does not), the ControllerRevisions. The run's suffix reads `<run>`.
pub async fn snapshot(run: &Run) -> anyhow::Result<Value> {
    let n = &run.names;
    let ss = Api::<SidecarSet>::all(run.c.clone()).get(&n.name).await?;
    let pods = Api::<Pod>::namespaced(run.c.clone(), &n.pods_ns)
        .list(&ListParams::default().labels(&format!("e2e-app={}", n.label)))
        .await?
        .items;
    let mut names: Vec<String> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    let mut multiset: Vec<Value> = pods.iter().map(pod_state).collect();
    // Sorted without the times, which differ between runs (the masks then hide them).
    multiset.sort_by_key(|v| without_times(v).to_string());
    let revisions = Api::<ControllerRevision>::namespaced(run.c.clone(), &n.ns)
        .list(&ListParams::default().labels(&format!("kruise.io/sidecarset-name={}", n.name)))
        .await?
        .items;
    let mut revisions: Vec<Value> = revisions
        .iter()
        .map(|r| {
            json!({"name": r.metadata.name, "revision": r.revision, "data": r.data,
                   "labels": kruise_only(r.metadata.labels.as_ref())})
        })
        .collect();
    revisions.sort_by_key(|v| v["revision"].as_i64());
    let bystander = Api::<Pod>::namespaced(run.c.clone(), &n.pods_ns)
        .get(BYSTANDER)
        .await?;
    let hash = ss
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kruise.io/sidecarset-hash"))
        .cloned();
    let state = json!({
        "sidecarset": {"generation": ss.metadata.generation, "status": ss.status, "hash": hash},
        "pods": names,
        "podStates": multiset,
        "revisions": revisions,
        "bystander": pod_state(&bystander),
    });
    // The run's names are the only thing that must differ between runs.
    let text = state.to_string().replace(&n.suffix, "<run>");
    Ok(serde_json::from_str(&text)?)
}

/// A pod as the end state keeps it: containers and images, the `kruise.io/` annotations
/// (JSON ones parsed, so a mask can pick a field inside), restart counts and readiness.
///
/// Left out: `controllerRevision` in `kruise.io/sidecarset-hash`, which the webhook writes only
/// once the controller has registered the revision (OpenKruise copies `status.latestRevision`,
/// empty until the first status write, the same way): a pod created in the first moments of a
/// SidecarSet, or while a restarted replica waits for the Lease, lacks it also fault-free.
pub fn pod_state(p: &Pod) -> Value {
    let spec = p.spec.clone().unwrap_or_default();
    let containers: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| json!([c.name, c.image]))
        .collect();
    let inits: Vec<Value> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| json!([c.name, c.image]))
        .collect();
    let st = p.status.clone().unwrap_or_default();
    let restarts: BTreeMap<String, i32> = st
        .container_statuses
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), c.restart_count))
        .collect();
    let work = working(p);
    let running = st
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == work)
        .map(|c| c.image.clone());
    let ready = st
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    json!({"containers": containers, "initContainers": inits,
           "annotations": kruise_only(p.metadata.annotations.as_ref()),
           "restarts": restarts, "sidecarRunning": running, "ready": ready})
}

fn kruise_only(m: Option<&BTreeMap<String, String>>) -> Value {
    let mut out = Map::new();
    for (k, v) in m.into_iter().flatten() {
        if k.starts_with("kruise.io/") {
            let mut parsed = serde_json::from_str::<Value>(v)
                .ok()
                .filter(|p| p.is_object() || p.is_array())
                .unwrap_or_else(|| Value::String(v.clone()));
            if k == "kruise.io/sidecarset-hash"
                && let Some(sets) = parsed.as_object_mut()
            {
                for set in sets.values_mut() {
                    if let Some(o) = set.as_object_mut() {
                        o.remove("controllerRevision");
                    }
                }
            }
            out.insert(k.clone(), parsed);
        }
    }
    Value::Object(out)
}

/// `v` without its `updateTimestamp` fields.
fn without_times(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "updateTimestamp")
                .map(|(k, x)| (k.clone(), without_times(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_times).collect()),
        other => other.clone(),
    }
}

/// The JSON pointers at which `a` and `b` differ (leaves, or the node where their shapes do).
pub fn differences(a: &Value, b: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    diff_into(a, b, String::new(), &mut out);
    out
}

fn diff_into(a: &Value, b: &Value, at: String, out: &mut BTreeSet<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let esc = k.replace('~', "~0").replace('/', "~1");
                diff_into(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    format!("{at}/{esc}"),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff_into(p, q, format!("{at}/{i}"), out);
            }
        }
        _ if a != b => {
            out.insert(at);
        }
        _ => {}
    }
}

/// `v` with every masked pointer (that exists in it) replaced by [`MASKED`].
pub fn masked(v: &Value, masks: &BTreeSet<String>) -> Value {
    let mut v = v.clone();
    for m in masks {
        if let Some(x) = v.pointer_mut(m) {
            *x = Value::String(MASKED.into());
        }
    }
    v
}

/// How `got` differs from `want` up to `masks`: one line per pointer, with both values.
pub fn compare(want: &Value, got: &Value, masks: &BTreeSet<String>) -> Vec<String> {
    let (w, g) = (masked(want, masks), masked(got, masks));
    differences(&w, &g)
        .into_iter()
        .map(|p| {
            let show = |v: &Value| {
                v.pointer(&p)
                    .map(|x| x.to_string())
                    .unwrap_or_else(|| "(absent)".into())
            };
            format!("{p}: fault-free {}, here {}", show(&w), show(&g))
        })
        .collect()
}

/// The bystander pod (selected by no SidecarSet) as it was created: its one container, no
/// `kruise.io/` annotation.
pub fn bystander_untouched(s: &Value) -> Vec<String> {
    let b = &s["bystander"];
    let want = json!([["app", "registry.local/app:1"]]);
    match b["containers"] == want
        && b["annotations"] == json!({})
        && b["initContainers"] == json!([])
    {
        true => Vec::new(),
        false => vec![format!("the pod no SidecarSet selects was changed: {b}")],
    }
}

/// The status counts against a recount from the end state's pods: matched (carrying the
/// sidecar and the SidecarSet's hash annotation), updated (its hash the SidecarSet's), ready,
/// updated and ready, and the selected pods without the sidecar.
pub fn recount(s: &Value) -> Vec<String> {
    let hash = s["sidecarset"]["hash"].as_str();
    let st = &s["sidecarset"]["status"];
    let pods = s["podStates"].as_array().cloned().unwrap_or_default();
    let (mut matched, mut updated, mut ready, mut updated_ready, mut without) = (0, 0, 0, 0, 0);
    for p in &pods {
        let sidecar = p["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c[0].as_str().is_some_and(is_sidecar));
        let entry = p["annotations"]["kruise.io/sidecarset-hash"]
            .as_object()
            .and_then(|m| m.values().next().cloned());
        if !sidecar {
            without += 1;
            continue;
        }
        let Some(entry) = entry else { continue };
        matched += 1;
        let up = hash.is_some() && entry["hash"].as_str() == hash;
        let r = p["ready"] == true;
        updated += i64::from(up);
        ready += i64::from(r);
        updated_ready += i64::from(up && r);
    }
    let field = |f: &str| st[f].as_i64().unwrap_or(0);
    [
        ("matchedPods", matched),
        ("updatedPods", updated),
        ("readyPods", ready),
        ("updatedReadyPods", updated_ready),
        ("podsWithoutSidecars", without),
    ]
    .into_iter()
    .filter(|(f, n)| field(f) != *n)
    .map(|(f, n)| format!("status.{f} is {} but the pods recount {n}", field(f)))
    .collect()
}

/// Successful writes of each pod (its spec or metadata: not its status, not evictions) by
/// every operator process of a run, from their records.
pub fn pod_writes(records: &[(usize, Value)]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (_, w) in records {
        if w["op"] == "write"
            && w["resource"] == "pods"
            && w["subresource"].is_null()
            && w["method"] != "POST"
            && w["status"].as_u64().is_some_and(|s| s < 400)
        {
            *out.entry(w["name"].as_str().unwrap_or("").to_string())
                .or_default() += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_the_differences_and_hide_only_them() {
        let a = json!({"s": {"n": 1, "t": "10:00"}, "l": [1, 2], "x": [1]});
        let b = json!({"s": {"n": 1, "t": "10:01"}, "l": [1, 3], "x": [1, 2]});
        let m = differences(&a, &b);
        assert_eq!(
            m.iter().map(String::as_str).collect::<Vec<_>>(),
            ["/l/1", "/s/t", "/x"]
        );
        let c = json!({"s": {"n": 2, "t": "11:00"}, "l": [1, 9], "x": []});
        assert_eq!(compare(&a, &c, &m), ["/s/n: fault-free 1, here 2"]);
    }
}
