//! Hot upgrades checked over every reachable state of a small model, on real pods: the real
//! classifier ([`Classifier::view`]), planner ([`rollout::plan`]), upgrade and reset patches
//! ([`upgrade_patch`], [`reset_patch`]) applied as JSON patches, and a kubelet that acts on each
//! container's spec in any order.
//!
//! One or two pods of a SidecarSet with the hot-upgrade sidecar `proxy` (containers `proxy-1`
//! and `proxy-2`, the idle one on the empty image) start on version 1 of its image. Steps:
//! * the controller: one reconcile (the plan's resets, or its upgrades, written);
//! * the kubelet: runs a container's spec image (the container restarts, not ready yet); a
//!   container becomes ready; one container fails its readiness (a fault, once per run);
//! * the SidecarSet's image changes, up to version 3 (also amid a hot upgrade).
//!
//! Checked on every write of the controller: a pod that had a working sidecar (a container of
//! the pair on a real image, running it and ready) still has one the write does not touch, so
//! the kubelet restarts no working container and resets none before its successor serves. And
//! from every state, with no more changes or faults, the rollout ends: every pod updated, ready,
//! consistent, its idle container back on the empty image, within six rounds.

use json_patch::Patch;
use serde_json::{Value, json};
use sidecarset_core::api::{SidecarSet, default_sidecarset};
use sidecarset_core::index::Entry;
use sidecarset_core::rollout::{self, Classifier, reset_patch, upgrade_patch};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, OnceLock};

const EMPTY: &str = "proxy-empty:1";
const PAIR: [&str; 2] = ["proxy-1", "proxy-2"];
const VERSIONS: u8 = 3;

/// The SidecarSet at `version` (built once).
fn entry(version: u8) -> &'static Entry {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    &ENTRIES.get_or_init(|| (1..=VERSIONS).map(build_entry).collect())[usize::from(version - 1)]
}

/// The SidecarSet at `version` (image `proxy:<version>`, resourceVersion 40 + version).
fn build_entry(version: u8) -> Entry {
    let mut ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "ss", "resourceVersion": (40 + u32::from(version)).to_string()},
        "spec": {"selector": {"matchLabels": {"app": "a"}},
            "updateStrategy": {"maxUnavailable": 1},
            "containers": [
                {"name": "proxy", "image": format!("proxy:{version}"),
                 "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": EMPTY}},
                {"name": "log", "image": "log:1"}]}}))
    .unwrap();
    default_sidecarset(&mut ss);
    Entry::new(Arc::new(ss)).unwrap()
}

fn status(name: &str, image: &str, ready: bool, restarts: i32) -> Value {
    json!({"name": name, "image": image, "imageID": format!("id-{image}"), "ready": ready,
           "restartCount": restarts, "started": true, "state": {"running": {}}})
}

/// Pod `i` as injected with version 1: proxy-1 working on `proxy:1`, proxy-2 on the empty image.
fn pod(i: usize, v1: &Entry) -> Value {
    let list = |h: &str| {
        json!({"ss": {"hash": h, "sidecarSetName": "ss", "sidecarList": ["log", "proxy"]}})
            .to_string()
    };
    let ann = json!({
        "kruise.io/sidecarset-injected-list": "ss",
        "kruise.io/sidecarset-hash": list(&v1.hash),
        "kruise.io/sidecarset-hash-without-image": list(&v1.hash_without_image),
        "kruise.io/sidecarset-working-hotupgrade-container": json!({"proxy": "proxy-1"}).to_string(),
        "version.sidecarset.kruise.io/proxy-1": "41", "versionalt.sidecarset.kruise.io/proxy-1": "0",
        "version.sidecarset.kruise.io/proxy-2": "0", "versionalt.sidecarset.kruise.io/proxy-2": "41",
    });
    json!({
        "metadata": {"name": format!("p{i}"), "namespace": "ns", "annotations": ann,
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n", "containers": [
            {"name": "proxy-1", "image": "proxy:1"}, {"name": "proxy-2", "image": EMPTY},
            {"name": "log", "image": "log:1"}, {"name": "main", "image": "app:1"}]},
        "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                status("proxy-1", "proxy:1", true, 0), status("proxy-2", EMPTY, true, 0),
                status("log", "log:1", true, 0), status("main", "app:1", true, 0)]}
    })
}

fn spec_image(pod: &Value, name: &str) -> String {
    pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .map(|c| c["image"].as_str().unwrap().to_string())
        .unwrap()
}

fn status_index(pod: &Value, name: &str) -> usize {
    pod["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .position(|s| s["name"] == name)
        .unwrap()
}

/// Container `name` runs its spec image, a real one, and is ready: it serves.
fn serves(pod: &Value, name: &str) -> bool {
    let s = &pod["status"]["containerStatuses"][status_index(pod, name)];
    let spec = spec_image(pod, name);
    spec != EMPTY && s["image"] == spec.as_str() && s["ready"] == true
}

fn has_working_sidecar(pod: &Value) -> bool {
    PAIR.iter().any(|c| serves(pod, c))
}

/// The pod's Ready condition follows its containers.
fn sync_ready(pod: &mut Value) {
    let all = pod["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["ready"] == true);
    pod["status"]["conditions"][0]["status"] = json!(if all { "True" } else { "False" });
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct State {
    version: u8,
    faults: u8,
    /// The pods, as JSON text.
    pods: Vec<String>,
}

fn pods_of(s: &State) -> Vec<Value> {
    s.pods
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect()
}

fn with_pods(s: &State, pods: &[Value]) -> State {
    State {
        pods: pods.iter().map(Value::to_string).collect(),
        ..s.clone()
    }
}

/// One reconcile: the plan's resets or upgrades written. None when it writes nothing.
fn reconcile(s: &State) -> Result<Option<(String, Vec<Value>)>, String> {
    let entry = entry(s.version);
    let classifier = Classifier::new(entry)?;
    let mut pods = pods_of(s);
    let typed: Vec<k8s_openapi::api::core::v1::Pod> = pods
        .iter()
        .map(|p| serde_json::from_value(p.clone()).unwrap())
        .collect();
    let views: Vec<_> = typed.iter().map(|p| classifier.view(p)).collect();
    let plan = rollout::plan(&entry.ss.spec.update_strategy, &views)?;
    let mut wrote = Vec::new();
    for (i, p) in typed.iter().enumerate() {
        let key = format!("ns/p{i}");
        let patch: Option<Patch> = if plan.reset.contains(&key) {
            reset_patch(p, entry, "2026-01-01T00:00:00Z")
        } else if plan.upgrade.contains(&key) {
            upgrade_patch(p, entry, "2026-01-01T00:00:00Z", "rev")
        } else {
            None
        };
        let Some(patch) = patch else { continue };
        let before = pods[i].clone();
        json_patch::patch(&mut pods[i], &patch).map_err(|e| e.to_string())?;
        if has_working_sidecar(&before) && !working_kept(&before, &pods[i]) {
            return Err(format!(
                "p{i} loses its working sidecar to the write {}",
                serde_json::to_string(&patch).unwrap()
            ));
        }
        wrote.push(format!("p{i}"));
    }
    Ok((!wrote.is_empty()).then(|| (format!("reconcile writes {wrote:?}"), pods)))
}

/// A container that served before the write still serves after it (the write left its spec).
fn working_kept(before: &Value, after: &Value) -> bool {
    PAIR.iter().any(|c| serves(before, c) && serves(after, c))
}

/// The kubelet's and the user's steps.
fn environment(s: &State) -> Vec<(String, State)> {
    environment_up_to(s, VERSIONS)
}

/// [`environment`], the SidecarSet changed up to version `last`.
fn environment_up_to(s: &State, last: u8) -> Vec<(String, State)> {
    let mut out = Vec::new();
    let pods = pods_of(s);
    for (i, pod) in pods.iter().enumerate() {
        for name in PAIR {
            let k = status_index(pod, name);
            let st = &pod["status"]["containerStatuses"][k];
            let image = spec_image(pod, name);
            let mut next = pods.clone();
            let p = &mut next[i];
            if st["image"] != image.as_str() {
                let restarts = i32::try_from(st["restartCount"].as_i64().unwrap()).unwrap();
                p["status"]["containerStatuses"][k] = status(name, &image, false, restarts + 1);
                sync_ready(p);
                out.push((
                    format!("kubelet runs {image} in p{i}/{name}"),
                    with_pods(s, &next),
                ));
            } else if st["ready"] == false {
                p["status"]["containerStatuses"][k]["ready"] = json!(true);
                sync_ready(p);
                out.push((format!("p{i}/{name} ready"), with_pods(s, &next)));
            } else if s.faults > 0 {
                p["status"]["containerStatuses"][k]["ready"] = json!(false);
                sync_ready(p);
                let mut n = with_pods(s, &next);
                n.faults -= 1;
                out.push((format!("p{i}/{name} fails its readiness"), n));
            }
        }
    }
    if s.version < last {
        out.push((
            format!("SidecarSet image changed to proxy:{}", s.version + 1),
            State {
                version: s.version + 1,
                ..s.clone()
            },
        ));
    }
    out
}

/// The rollout's end: every pod updated, ready, consistent, nothing to reset.
fn finished(s: &State) -> bool {
    let entry = entry(s.version);
    let classifier = Classifier::new(entry).unwrap();
    pods_of(s).iter().all(|p| {
        let v = classifier.view(&serde_json::from_value(p.clone()).unwrap());
        v.updated && v.ready && v.consistent && !v.reset
    })
}

/// From `s`, with the kubelet catching up after each reconcile and nothing else happening, the
/// rollout ends within six rounds. `memo`: states known to end so.
fn converges(s: &State, memo: &mut HashSet<State>) -> Result<(), String> {
    let mut cur = State {
        faults: 0,
        ..s.clone()
    };
    let mut path = Vec::new();
    for _ in 0..6 {
        // The kubelet catches up: every spec run, every container ready.
        loop {
            let next = environment(&cur)
                .into_iter()
                .find(|(label, _)| label.starts_with("kubelet") || label.ends_with("ready"));
            match next {
                Some((_, n)) => cur = n,
                None => break,
            }
        }
        if memo.contains(&cur) || finished(&cur) {
            memo.extend(path);
            return Ok(());
        }
        path.push(cur.clone());
        let written = reconcile(&cur).map_err(|e| {
            format!("going on from the last state below with no more faults nor changes: {e}")
        })?;
        if let Some((_, pods)) = written {
            cur = with_pods(&cur, &pods);
        }
    }
    Err("the rollout does not end once nothing else happens".into())
}

/// Explores `n` pods with the SidecarSet changed up to version `last`; returns the states.
fn explore(n: usize, last: u8) -> usize {
    let v1 = entry(1);
    let init = State {
        version: 1,
        faults: 1,
        pods: (0..n).map(|i| pod(i, v1).to_string()).collect(),
    };
    let mut parents: HashMap<State, Option<(State, String)>> = HashMap::new();
    parents.insert(init.clone(), None);
    let mut queue = VecDeque::from([init]);
    let mut memo = HashSet::new();
    while let Some(s) = queue.pop_front() {
        let steps = converges(&s, &mut memo).and_then(|()| {
            let mut steps = environment_up_to(&s, last);
            if let Some((label, pods)) = reconcile(&s)? {
                steps.push((label, with_pods(&s, &pods)));
            }
            Ok(steps)
        });
        let steps = steps.unwrap_or_else(|e| {
            let mut trace = Vec::new();
            let mut cur = s.clone();
            while let Some(Some((prev, label))) = parents.get(&cur) {
                trace.push(label.clone());
                cur = prev.clone();
            }
            trace.reverse();
            panic!("{n} pods: {e}\ntrace:\n  {}", trace.join("\n  "));
        });
        for (label, next) in steps {
            if !parents.contains_key(&next) {
                parents.insert(next.clone(), Some((s.clone(), label)));
                queue.push_back(next);
            }
        }
    }
    parents.len()
}

fn run(runs: &[(usize, u8)]) {
    let start = std::time::Instant::now();
    let counts: Vec<usize> = runs.iter().map(|&(n, last)| explore(n, last)).collect();
    eprintln!(
        "hot-upgrade model: {counts:?} states for (pods, versions) {runs:?} in {:?}",
        start.elapsed()
    );
}

#[test]
fn a_hot_upgrade_never_leaves_a_pod_without_a_working_sidecar() {
    run(&[(1, 3), (2, 2)]);
}

#[test]
#[ignore = "a minute: two pods, three versions"]
fn a_hot_upgrade_never_leaves_a_pod_without_a_working_sidecar_three_versions() {
    run(&[(2, 3)]);
}
