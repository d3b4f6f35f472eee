//! In-place resize of sidecars (opt-in: [`crate::api::ANNOTATION_RESIZE_IN_PLACE`]).
//!
//! * Which pods can be resized: a pod whose `kruise.io/sidecarset-hash-without-image` entry is
//!   the one of an earlier revision of the SidecarSet that differs from the current one only in
//!   the sidecars' images, `resources` and `resourcesPolicy` ([`resizable_from`]). The pod's
//!   annotations are not extended: the revisions (ControllerRevisions, ours or OpenKruise's)
//!   carry both hashes and the sidecars of each spec.
//! * What is resized: each of the SidecarSet's sidecars in the pod (containers, and native
//!   sidecars among the init containers) whose `resources` differ, by value, from what the
//!   SidecarSet gives it now: its `resources`, or what its `resourcesPolicy` computes from the
//!   pod's own containers ([`resize_patch`], the body of a patch of the pod's `resize`
//!   subresource).
//! * How it went: the kubelet's pod conditions `PodResizePending` (reason `Infeasible` or
//!   `Deferred`: refused) and `PodResizeInProgress`, and the container statuses' `resources`
//!   ([`resize_state`]).

use crate::api::{SidecarSet, parse_hash_annotation};
use crate::inject::resources;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Pod condition the kubelet sets while a resize waits (reason `Infeasible` or `Deferred`).
pub const CONDITION_RESIZE_PENDING: &str = "PodResizePending";
/// Pod condition the kubelet sets while it carries a resize out (reason `Error` when it failed).
pub const CONDITION_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

/// The fields of a sidecar a resize may change; the rest must be equal.
const RESIZED_FIELDS: [&str; 3] = ["image", "resources", "resourcesPolicy"];

/// The sidecars of revision data (`{"spec": {"containers": [...], "initContainers": [...]}}`)
/// without the fields a resize (or an image upgrade) changes.
fn shape(data: &Value) -> Option<Value> {
    let spec = data.get("spec")?;
    let strip = |list: Option<&Value>| -> Value {
        match list.and_then(Value::as_array) {
            None => Value::Null,
            Some(items) => Value::Array(
                items
                    .iter()
                    .map(|c| {
                        let mut c = c.clone();
                        if let Some(m) = c.as_object_mut() {
                            for f in RESIZED_FIELDS {
                                m.remove(f);
                            }
                        }
                        c
                    })
                    .collect(),
            ),
        }
    };
    Some(json!([
        strip(spec.get("containers")),
        strip(spec.get("initContainers"))
    ]))
}

/// The `kruise.io/sidecarset-hash-without-image` values of the revisions whose sidecars differ
/// from `current` (the revision data of the SidecarSet now) only in images, resources and
/// resourcesPolicy: a pod that records one of them can be brought up to date by a resize (and
/// an image change). Each revision is given as its data and its recorded hash without image.
/// Hot-upgrade SidecarSets are left out (a resize of a pair is not supported): empty.
pub fn resizable_from<'a>(
    ss: &SidecarSet,
    current: &Value,
    revisions: impl IntoIterator<Item = (&'a Value, Option<&'a str>)>,
) -> BTreeSet<String> {
    if ss.hot_upgrade_containers().next().is_some() {
        return BTreeSet::new();
    }
    let Some(now) = shape(current) else {
        return BTreeSet::new();
    };
    revisions
        .into_iter()
        .filter_map(|(data, hash)| Some((shape(data)?, hash?)))
        .filter(|(s, _)| *s == now)
        .map(|(_, h)| h.to_string())
        .collect()
}

/// One sidecar of the pod that the SidecarSet gives other resources than it has.
#[derive(Debug, Clone, PartialEq)]
pub struct Resize {
    /// `containers` or `initContainers`.
    pub field: &'static str,
    pub name: String,
    pub from: Option<ResourceRequirements>,
    pub to: ResourceRequirements,
}

/// The SidecarSet's sidecars as the pod has them: `(field, pod container, SidecarSet's)`.
fn sidecars<'a>(
    spec: &'a PodSpec,
    ss: &'a SidecarSet,
) -> Vec<(
    &'static str,
    &'a Container,
    &'a crate::api::SidecarContainer,
)> {
    let mut out = Vec::new();
    let init = spec.init_containers.as_deref().unwrap_or(&[]);
    for sc in ss.spec.containers.iter().filter(|c| !c.is_hot_upgrade()) {
        if let Some(c) = spec.containers.iter().find(|c| c.name == sc.name()) {
            out.push(("containers", c, sc));
        } else if let Some(c) = init
            .iter()
            .find(|c| c.name == sc.name() && c.restart_policy.as_deref() == Some("Always"))
        {
            out.push(("initContainers", c, sc));
        }
    }
    for sc in ss
        .spec
        .init_containers
        .iter()
        .filter(|c| c.is_native_sidecar())
    {
        if let Some(c) = init.iter().find(|c| c.name == sc.name()) {
            out.push(("initContainers", c, sc));
        }
    }
    out
}

/// Every sidecar name the pod records (the `sidecarList` of each SidecarSet in its hash
/// annotation) and `ss`'s own: what `resourcesPolicy` leaves out of its targets.
fn sidecar_names<'a>(
    pod: &'a Pod,
    ss: &'a SidecarSet,
    owned: &'a mut Vec<String>,
) -> BTreeSet<&'a str> {
    owned.extend(ss.sidecar_names());
    if let Some(h) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::api::ANNOTATION_HASH))
        .and_then(|v| parse_hash_annotation(v))
    {
        for e in h.into_values() {
            owned.extend(e.sidecar_list.unwrap_or_default());
        }
    }
    owned.iter().map(String::as_str).collect()
}

/// Requests as the API server defaults them at creation: a limit without a request asks for
/// the limit.
fn defaulted(mut r: ResourceRequirements) -> ResourceRequirements {
    if let Some(limits) = &r.limits {
        let requests = r.requests.get_or_insert_with(BTreeMap::new);
        for (k, v) in limits {
            requests.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    r
}

/// Two quantities equal by value (`1` and `1000m`); unparsable ones by their text.
fn quantity_eq(a: &str, b: &str) -> bool {
    use resources::quantity::Quantity as Q;
    match (Q::parse(a), Q::parse(b)) {
        (Ok(mut x), Ok(y)) => x.cmp(&y) == std::cmp::Ordering::Equal,
        _ => a == b,
    }
}

/// Equal by value (`1` and `1000m`), key by key; an absent map is an empty one.
fn same_map(
    a: Option<&BTreeMap<String, Quantity>>,
    b: Option<&BTreeMap<String, Quantity>>,
) -> bool {
    let empty = BTreeMap::new();
    let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| quantity_eq(&v.0, &w.0)))
}

fn same_resources(a: Option<&ResourceRequirements>, b: &ResourceRequirements) -> bool {
    let a = a.cloned().unwrap_or_default();
    same_map(a.limits.as_ref(), b.limits.as_ref())
        && same_map(a.requests.as_ref(), b.requests.as_ref())
}

/// The sidecars of `pod` whose resources differ from what `ss` gives them now. An error names
/// the SidecarSet's field when its `resourcesPolicy` cannot be computed for this pod.
pub fn resizes(pod: &Pod, ss: &SidecarSet) -> Result<Vec<Resize>, String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Vec::new());
    };
    let mut owned = Vec::new();
    let names = sidecar_names(pod, ss, &mut owned);
    let mut out = Vec::new();
    for (field, c, sc) in sidecars(spec, ss) {
        let mut want = sc.container.resources.clone().unwrap_or_default();
        if let Some(policy) = &sc.resources_policy {
            let computed = resources::compute(policy, spec, &names)
                .map_err(|e| format!("container {}: {}: {}", sc.name(), e.field, e.message))?;
            want.limits = computed.limits;
            want.requests = computed.requests;
        }
        let want = defaulted(want);
        if !same_resources(c.resources.as_ref(), &want) {
            out.push(Resize {
                field,
                name: c.name.clone(),
                from: c.resources.clone(),
                to: want,
            });
        }
    }
    Ok(out)
}

/// One map of a resize patch: the wanted values, and `null` for what the pod has beyond them.
fn map_patch(
    from: Option<&BTreeMap<String, Quantity>>,
    to: Option<&BTreeMap<String, Quantity>>,
) -> Value {
    let mut m = Map::new();
    for k in from.into_iter().flat_map(BTreeMap::keys) {
        m.insert(k.clone(), Value::Null);
    }
    for (k, v) in to.into_iter().flatten() {
        m.insert(k.clone(), Value::String(v.0.clone()));
    }
    Value::Object(m)
}

/// The strategic merge patch of the pod's `resize` subresource that gives its sidecars what
/// the SidecarSet gives them now (None: nothing to resize). Only `limits` and `requests` are
/// written; resource claims and `resizePolicy` stay as they are (the kubelet restarts a
/// container only when its `resizePolicy` asks for it).
pub fn resize_patch(pod: &Pod, ss: &SidecarSet) -> Result<Option<Value>, String> {
    let todo = resizes(pod, ss)?;
    if todo.is_empty() {
        return Ok(None);
    }
    let mut spec = Map::new();
    for r in todo {
        let from = r.from.unwrap_or_default();
        let entry = json!({
            "name": r.name,
            "resources": {
                "limits": map_patch(from.limits.as_ref(), r.to.limits.as_ref()),
                "requests": map_patch(from.requests.as_ref(), r.to.requests.as_ref()),
            }
        });
        if let Some(list) = spec
            .entry(r.field)
            .or_insert_with(|| Value::Array(Vec::new()))
            .as_array_mut()
        {
            list.push(entry);
        }
    }
    Ok(Some(json!({ "spec": spec })))
}

/// Where a pod's resize stands, as far as the kubelet tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResizeState {
    /// Nothing pending: the sidecars run with their spec's resources (or the kubelet reports
    /// none, as before Kubernetes 1.33).
    Done,
    /// The kubelet has not acted yet, or is carrying it out.
    InProgress,
    /// Refused: `PodResizePending` with reason `Infeasible` or `Deferred`, or
    /// `PodResizeInProgress` with reason `Error`; the reason and the kubelet's message.
    Refused(String),
}

/// Where the resize of `ss`'s sidecars in `pod` stands ([`ResizeState`]).
pub fn resize_state(pod: &Pod, ss: &SidecarSet) -> ResizeState {
    let status = pod.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let find = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t && c.status == "True")
    };
    let why = |c: &k8s_openapi::api::core::v1::PodCondition| {
        format!(
            "{}: {}",
            c.reason.as_deref().unwrap_or(&c.type_),
            c.message.as_deref().unwrap_or("no message")
        )
    };
    if let Some(c) = find(CONDITION_RESIZE_PENDING) {
        return ResizeState::Refused(why(c));
    }
    if let Some(c) = find(CONDITION_RESIZE_IN_PROGRESS) {
        return if c.reason.as_deref() == Some("Error") {
            ResizeState::Refused(why(c))
        } else {
            ResizeState::InProgress
        };
    }
    let Some(spec) = pod.spec.as_ref() else {
        return ResizeState::Done;
    };
    let statuses = status
        .into_iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .collect::<Vec<_>>();
    let behind = sidecars(spec, ss).into_iter().any(|(_, c, _)| {
        let Some(actual) = statuses
            .iter()
            .find(|s| s.name == c.name)
            .and_then(|s| s.resources.as_ref())
        else {
            return false;
        };
        let want = c.resources.clone().unwrap_or_default();
        !reported_matches(&want, actual)
    });
    if behind {
        ResizeState::InProgress
    } else {
        ResizeState::Done
    }
}

/// The kubelet reports CPU and memory: each of those the spec names has the reported value.
fn reported_matches(want: &ResourceRequirements, actual: &ResourceRequirements) -> bool {
    let check = |w: Option<&BTreeMap<String, Quantity>>, a: Option<&BTreeMap<String, Quantity>>| {
        ["cpu", "memory"].iter().all(|k| {
            match (w.and_then(|m| m.get(*k)), a.and_then(|m| m.get(*k))) {
                (Some(w), Some(a)) => quantity_eq(&w.0, &a.0),
                (Some(_), None) => false,
                _ => true,
            }
        })
    };
    check(want.limits.as_ref(), actual.limits.as_ref())
        && check(want.requests.as_ref(), actual.requests.as_ref())
}

#[cfg(test)]
mod tests;
