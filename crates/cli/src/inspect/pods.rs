//! What `explain` and `diff` say about one pod of one SidecarSet: how its sidecars differ from
//! what the SidecarSet would inject (found by running the injection itself), and what the next
//! rollout step does to it (found by running the controller's plan). Pure.

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::Value;
use sidecarset_core::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, ANNOTATION_INJECTED_LIST,
    SidecarSetUpdateStrategy, UpdateStrategyType, default_container, parse_hash_annotation,
};
use sidecarset_core::index::Entry;
use sidecarset_core::rollout::{self, Plan, PodView};
use std::collections::BTreeSet;

/// The rollout of one SidecarSet over its pods, as the controller would plan it now.
#[derive(Debug, Clone)]
pub struct Rollout {
    pub strategy: SidecarSetUpdateStrategy,
    pub views: Vec<PodView>,
    /// [`rollout::plan`]'s answer (an error names the bad field).
    pub plan: Result<Plan, String>,
    /// Every pod that can be upgraded in place, in the order the rollout takes them (the plan's
    /// own order, with partition and maxUnavailable lifted).
    pub order: Vec<String>,
}

impl Rollout {
    pub fn new(strategy: &SidecarSetUpdateStrategy, views: Vec<PodView>) -> Rollout {
        let plan = rollout::plan(strategy, &views);
        let unlimited = SidecarSetUpdateStrategy {
            type_: Some(UpdateStrategyType::RollingUpdate),
            paused: false,
            partition: None,
            max_unavailable: Some(IntOrString::Int(i32::MAX)),
            ..strategy.clone()
        };
        let order = rollout::plan(&unlimited, &views)
            .map(|p| p.upgrade)
            .unwrap_or_default();
        Rollout {
            strategy: strategy.clone(),
            views,
            plan,
            order,
        }
    }

    pub fn view(&self, key: &str) -> Option<&PodView> {
        self.views.iter().find(|v| v.key == key)
    }

    /// What the next rollout step does to the pod `view` (one of [`Rollout::views`]).
    /// `differences` is called only for a pod that cannot be upgraded in place.
    pub fn next_step(
        &self,
        view: &PodView,
        differences: impl FnOnce() -> Result<Vec<String>, String>,
    ) -> NextStep {
        let held = |by: Hold, detail: String| NextStep::Held { by, detail };
        if !view.active {
            return NextStep::Finished;
        }
        if view.updated {
            return if view.ready_and_consistent() {
                NextStep::UpToDate
            } else {
                NextStep::Updating {
                    detail: if view.reset {
                        "is amid a hot upgrade: its new container took over, and the old one is reset to the empty image in the next step".into()
                    } else if view.consistent {
                        "runs the current sidecars; waiting for the pod to become ready".into()
                    } else {
                        "updated; waiting for the kubelet to run the new images".into()
                    },
                }
            };
        }
        if self.strategy.type_ == Some(UpdateStrategyType::NotUpdate) {
            return held(
                Hold::NotUpdate,
                "spec.updateStrategy.type is NotUpdate: the pod keeps its sidecars until it is recreated".into(),
            );
        }
        if self.strategy.paused {
            return held(
                Hold::Paused,
                "spec.updateStrategy.paused is true: set it to false to go on".into(),
            );
        }
        let plan = match &self.plan {
            Ok(p) => p,
            Err(e) => {
                return held(
                    Hold::InvalidStrategy,
                    format!("the update strategy is invalid: {e}"),
                );
            }
        };
        if !view.matches_update_selector {
            return held(
                Hold::UpdateSelector,
                "not selected by spec.updateStrategy.selector".into(),
            );
        }
        if !view.upgradable {
            return match differences() {
                Ok(differences) => NextStep::NotUpgradable { differences },
                Err(e) => NextStep::NotUpgradable {
                    differences: vec![e],
                },
            };
        }
        if !view.consistent {
            return held(
                Hold::WaitingForKubelet,
                "its container statuses do not match its spec yet (the kubelet is catching up)"
                    .into(),
            );
        }
        self.step_in_plan(plan, view)
    }

    /// Where a pod that can be upgraded now stands in the plan: in the next step, or held by
    /// partition or maxUnavailable.
    fn step_in_plan(&self, plan: &Plan, view: &PodView) -> NextStep {
        let held = |by: Hold, detail: String| NextStep::Held { by, detail };
        if let Some(i) = plan.upgrade.iter().position(|k| *k == view.key) {
            return NextStep::UpgradeNow {
                position: i + 1,
                of: plan.upgrade.len(),
            };
        }
        let matched = self.views.iter().filter(|v| v.matched()).count();
        let updated = self
            .views
            .iter()
            .filter(|v| v.matched() && v.updated)
            .count();
        let allowed = usize::try_from(
            i64::try_from(matched - updated).unwrap_or(0) - i64::from(plan.partition),
        )
        .unwrap_or(0);
        let position = self.order.iter().position(|k| *k == view.key);
        match position {
            Some(p) if p >= allowed => held(
                Hold::Partition,
                format!(
                    "spec.updateStrategy.partition {} keeps the last {} of the rollout order on the old sidecars; this pod is number {} of {}",
                    plan.partition,
                    plan.partition,
                    p + 1,
                    self.order.len()
                ),
            ),
            Some(p) if !plan.upgrade.is_empty() => held(
                Hold::MaxUnavailable,
                format!(
                    "waits for a later step (the next step's pods take all of maxUnavailable {}); number {} of {} in the rollout order",
                    plan.max_unavailable,
                    p + 1,
                    self.order.len()
                ),
            ),
            _ => held(
                Hold::MaxUnavailable,
                plan.waiting
                    .clone()
                    .unwrap_or_else(|| format!("maxUnavailable {} reached", plan.max_unavailable)),
            ),
        }
    }
}

/// What the next rollout step does to a pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum NextStep {
    /// Upgraded in place in the next step (`position` of the `of` pods of that step).
    UpgradeNow { position: usize, of: usize },
    /// Runs the current sidecars and is ready.
    UpToDate,
    /// Runs the current sidecars' spec; not ready or not yet running the new images.
    Updating { detail: String },
    /// Would be upgraded in place, but not now.
    Held { by: Hold, detail: String },
    /// Differs from the SidecarSet in more than images: left alone until recreated.
    NotUpgradable { differences: Vec<String> },
    /// The pod has finished or is being deleted.
    Finished,
}

/// Why an upgradable pod is not upgraded now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Hold {
    NotUpdate,
    Paused,
    InvalidStrategy,
    UpdateSelector,
    WaitingForKubelet,
    Partition,
    MaxUnavailable,
}

impl std::fmt::Display for NextStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NextStep::UpgradeNow { position, of } => write!(
                f,
                "upgraded in place in the next step (pod {position} of {of} in that step)"
            ),
            NextStep::UpToDate => write!(f, "nothing: it runs the current sidecars and is ready"),
            NextStep::Updating { detail } => write!(f, "nothing: it {detail}"),
            NextStep::Held { by, detail } => {
                let by = match by {
                    Hold::NotUpdate => "NotUpdate",
                    Hold::Paused => "paused",
                    Hold::InvalidStrategy => "an invalid strategy",
                    Hold::UpdateSelector => "the update selector",
                    Hold::WaitingForKubelet => "the kubelet",
                    Hold::Partition => "partition",
                    Hold::MaxUnavailable => "maxUnavailable",
                };
                write!(f, "held by {by}: {detail}")
            }
            NextStep::NotUpgradable { differences } => write!(
                f,
                "nothing: not upgradable in place, it differs in {}; recreate the pod to get the current sidecars",
                differences.join(", ")
            ),
            NextStep::Finished => write!(f, "nothing: the pod has finished or is being deleted"),
        }
    }
}

/// The names of the sidecars a SidecarSet injected into `pod` (its hash annotation's
/// `sidecarList`; empty for OpenKruise's older annotation shape).
pub fn injected_sidecars(pod: &Pod, sidecarset: &str) -> Vec<String> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_HASH))
        .and_then(|v| parse_hash_annotation(v))
        .and_then(|mut m| m.remove(sidecarset))
        .and_then(|e| e.sidecar_list)
        .unwrap_or_default()
}

/// How the sidecars of `entry`'s SidecarSet in `pod` differ, besides images, from what that
/// SidecarSet would inject into the pod now: the pod's own containers are kept, this
/// SidecarSet's sidecars and records are taken out, and the webhook's injection is run on what
/// is left; the result is compared with the pod field by field, both sides defaulted as the API
/// server defaults containers: `containers[proxy].env[MODE].value: "a" -> "b"` (the pod's value,
/// then the SidecarSet's). A sidecar only on one side is named as
/// added or removed. Err: the injection would refuse the pod (a resourcesPolicy).
pub fn differences(pod: &Pod, entry: &Entry, now: &str) -> Result<Vec<String>, String> {
    let name = entry.ss.name();
    let mut names: BTreeSet<String> = injected_sidecars(pod, name).into_iter().collect();
    names.extend(entry.ss.sidecar_names());
    names.extend(entry.ss.pod_container_names());
    let mut bare = pod.clone();
    bare.metadata.deletion_timestamp = None;
    bare.status = None;
    if let Some(spec) = bare.spec.as_mut() {
        spec.containers.retain(|c| !names.contains(&c.name));
        if let Some(init) = spec.init_containers.as_mut() {
            init.retain(|c| !names.contains(&c.name));
        }
    }
    if let Some(a) = bare.metadata.annotations.as_mut() {
        for key in [ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE] {
            if let Some(mut m) = a.get(key).and_then(|v| parse_hash_annotation(v)) {
                m.remove(name);
                a.insert(
                    key.to_string(),
                    serde_json::to_string(&m).unwrap_or_default(),
                );
            }
        }
        let list: Vec<String> = sidecarset_core::api::injected_list(a)
            .into_iter()
            .filter(|n| n != name)
            .collect();
        a.insert(ANNOTATION_INJECTED_LIST.to_string(), list.join(","));
    }
    let injection = sidecarset_core::inject::inject(&bare, &[entry], now);
    if let Some(d) = &injection.denied {
        return Err(format!("the injection would refuse the pod now: {d}"));
    }
    let mut v = serde_json::to_value(&bare).map_err(|e| e.to_string())?;
    sidecarset_core::inject::apply(&mut v, &injection.patch()).map_err(|e| e.to_string())?;
    let expected: Pod = serde_json::from_value(v).map_err(|e| e.to_string())?;
    let lists = |p: &Pod| -> [(&'static str, Vec<Container>); 2] {
        let spec = p.spec.clone().unwrap_or_default();
        [
            ("containers", spec.containers),
            ("initContainers", spec.init_containers.unwrap_or_default()),
        ]
    };
    let mut out = Vec::new();
    for ((list, actual), (_, wanted)) in lists(pod).into_iter().zip(lists(&expected)) {
        for n in &names {
            let a = actual.iter().find(|c| c.name == *n);
            let w = wanted.iter().find(|c| c.name == *n);
            match (a, w) {
                (Some(_), None) => out.push(format!("{list}[{n}] (no longer in the SidecarSet)")),
                (None, Some(_)) => out.push(format!("{list}[{n}] (added to the SidecarSet)")),
                (Some(a), Some(w)) => walk(
                    &format!("{list}[{n}]"),
                    &Value::Object(comparable(&without_api_server_mounts(a, w))),
                    &Value::Object(comparable(w)),
                    &mut out,
                ),
                (None, None) => {}
            }
        }
    }
    Ok(out)
}

/// Where the API server's ServiceAccount admission mounts the token into every container of a
/// pod (also into the sidecars, as it runs again after the webhooks).
pub const SERVICE_ACCOUNT_TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// `actual` without the volume mounts the API server adds after injection (the service account
/// token) when `wanted` does not mount that path itself.
fn without_api_server_mounts(actual: &Container, wanted: &Container) -> Container {
    let mut a = actual.clone();
    let wants_token = wanted
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == SERVICE_ACCOUNT_TOKEN_PATH);
    if let Some(m) = a.volume_mounts.as_mut()
        && !wants_token
    {
        m.retain(|m| m.mount_path != SERVICE_ACCOUNT_TOKEN_PATH);
    }
    a
}

/// A container as a JSON object without its image, defaulted as the API server defaults it,
/// empty values left out.
fn comparable(c: &Container) -> serde_json::Map<String, Value> {
    let mut c = c.clone();
    default_container(&mut c);
    if let Some(p) = c.startup_probe.as_mut() {
        default_probe(p);
    }
    let mut v = serde_json::to_value(&c).unwrap_or_default();
    prune(&mut v);
    let mut m = match v {
        Value::Object(m) => m,
        _ => Default::default(),
    };
    m.remove("image");
    m
}

/// The API server's defaults of a probe (the startup probe is not defaulted in SidecarSets).
fn default_probe(p: &mut Probe) {
    for (f, d) in [
        (&mut p.timeout_seconds, 1),
        (&mut p.period_seconds, 10),
        (&mut p.success_threshold, 1),
        (&mut p.failure_threshold, 3),
    ] {
        if f.is_none_or(|v| v == 0) {
            *f = Some(d);
        }
    }
    if let Some(h) = p.http_get.as_mut() {
        h.path.get_or_insert_with(|| "/".into());
        h.scheme.get_or_insert_with(|| "HTTP".into());
    }
}

/// Removes nulls and empty objects and lists, at every level.
fn prune(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for x in m.values_mut() {
                prune(x);
            }
            m.retain(|_, x| !is_empty(x));
        }
        Value::Array(a) => a.iter_mut().for_each(prune),
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// `spec` field paths that differ between two SidecarSet specs (as JSON), for `diff`:
/// `spec.containers[proxy].image: "p:1" -> "p:2"`. Lists of named items (containers, volumes,
/// env) are compared by name.
pub fn spec_changes(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk("spec", old, new, &mut out);
    out
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(59).collect::<String>())
    } else {
        s
    }
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                walk(&format!("{path}.{k}"), va, vb, out);
            }
        }
        (Value::Array(x), Value::Array(y)) if named(x) && named(y) => {
            let name = |v: &Value| v["name"].as_str().unwrap_or("").to_string();
            let names: Vec<String> = {
                let mut n: Vec<String> = x.iter().map(name).collect();
                for m in y.iter().map(name) {
                    if !n.contains(&m) {
                        n.push(m);
                    }
                }
                n
            };
            for n in names {
                let find = |l: &[Value]| l.iter().find(|v| name(v) == n).cloned();
                match (find(x), find(y)) {
                    (Some(va), Some(vb)) => walk(&format!("{path}[{n}]"), &va, &vb, out),
                    (Some(_), None) => out.push(format!("{path}[{n}]: removed")),
                    (None, Some(_)) => out.push(format!("{path}[{n}]: added")),
                    (None, None) => {}
                }
            }
        }
        (Value::Null, v) => out.push(format!("{path}: set to {}", short(v))),
        (v, Value::Null) => out.push(format!("{path}: {} removed", short(v))),
        _ => out.push(format!("{path}: {} -> {}", short(a), short(b))),
    }
}

/// A non-empty list of objects with distinct names.
fn named(l: &[Value]) -> bool {
    let names: Option<BTreeSet<&str>> = l
        .iter()
        .map(|v| v.get("name").and_then(Value::as_str))
        .collect();
    !l.is_empty() && names.is_some_and(|n| n.len() == l.len())
}
