//! The eviction policy, pure: who opted in, which owners are allowed, when a replacement came
//! back without its sidecars (the circuit breaker), and the rate and budget checks of one pod.

use super::state::SidecarSetState;
use crate::controller::slim::SlimPod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use std::collections::BTreeMap;

/// The SidecarSet annotation that opts it in to evictions: `"true"` (pods created after its
/// current generation took effect), `"all"` (older pods too); anything else: off.
pub const ANNOTATION_EVICT: &str = "sidecarset-operator.io/evict-pods-without-sidecars";

/// The owner kinds evicted by default: `Kind.group`.
pub const DEFAULT_OWNER_KINDS: &str = "ReplicaSet.apps,StatefulSet.apps,DaemonSet.apps,CloneSet.apps.kruise.io,StatefulSet.apps.kruise.io,DaemonSet.apps.kruise.io";

/// An owner kind, `Kind.group` (`ReplicaSet.apps`; the core group is empty: `Kind.`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerKind {
    pub kind: String,
    pub group: String,
}

/// Parses `--evict-owner-kinds`: a comma-separated list of `Kind.group`.
pub fn parse_owner_kinds(s: &str) -> Result<Vec<OwnerKind>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('.') {
            Some((kind, group)) if !kind.is_empty() => Ok(OwnerKind {
                kind: kind.to_string(),
                group: group.to_string(),
            }),
            _ => Err(format!(
                "--evict-owner-kinds: {p:?} is not Kind.group (e.g. ReplicaSet.apps, CloneSet.apps.kruise.io)"
            )),
        })
        .collect()
}

/// How evictions are allowed (from the flags).
#[derive(Clone, Debug)]
pub struct Policy {
    pub per_minute: u32,
    pub per_hour: u32,
    pub owner_kinds: Vec<OwnerKind>,
    /// Where the state ConfigMap lives (the operator's namespace).
    pub namespace: String,
}

/// The SidecarSet's opt-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptIn {
    Off,
    /// Pods created after the current generation took effect.
    New,
    /// Every pod.
    All,
}

pub fn opt_in(annotations: &BTreeMap<String, String>) -> OptIn {
    match annotations.get(ANNOTATION_EVICT).map(|v| v.trim()) {
        Some("true") => OptIn::New,
        Some("all") => OptIn::All,
        _ => OptIn::Off,
    }
}

/// The controller reference of the pod when its kind is allowed.
pub fn allowed_owner<'a>(pod: &'a SlimPod, kinds: &[OwnerKind]) -> Option<&'a OwnerReference> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    let group = owner
        .api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or("");
    kinds
        .iter()
        .any(|k| k.kind == owner.kind && k.group == group)
        .then_some(owner)
}

/// Why a pod is not evicted (also the metric's reason label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withheld {
    NotOptedIn,
    OwnerNotAllowed,
    OlderThanGeneration,
    CircuitOpen,
    /// The injection decision now would not inject the SidecarSet (conflict, refusal).
    NotInjectable,
    Rate,
    Budget,
    /// The pod changed, was recreated or is gone (uid/resourceVersion preconditions).
    Precondition,
    /// A PodDisruptionBudget allows no disruption of the pod now (its status says so), or
    /// refused the eviction of another pod of the same owner in this pass.
    Disruption,
}

impl Withheld {
    pub fn label(self) -> &'static str {
        match self {
            Withheld::NotOptedIn => "not_opted_in",
            Withheld::OwnerNotAllowed => "owner_not_allowed",
            Withheld::OlderThanGeneration => "older_than_generation",
            Withheld::CircuitOpen => "circuit_open",
            Withheld::NotInjectable => "not_injectable",
            Withheld::Rate => "rate",
            Withheld::Budget => "budget",
            Withheld::Precondition => "precondition",
            Withheld::Disruption => "pdb",
        }
    }
}

/// When the SidecarSet's current generation took effect (unix seconds), or a later time, never
/// an earlier one: generation 1 took effect when the SidecarSet was created (its
/// `creationTimestamp`, on the API server's clock like the pods'); a later generation's time is
/// not kept by the API (the cached SidecarSet has no managedFields), so it is `now`, the first
/// pass that sees it.
pub fn took_effect(generation: i64, created: Option<i64>, now: i64) -> i64 {
    match created {
        Some(c) if generation == 1 => c.min(now),
        _ => now,
    }
}

/// What the pure checks say of one pod, before the fresh read and the injection decision.
/// `recent_all`: evictions of every SidecarSet in the last minute (the rate).
pub fn precheck(
    pod: &SlimPod,
    opt: OptIn,
    state: &SidecarSetState,
    policy: &Policy,
    recent_all: usize,
) -> Result<String, Withheld> {
    if opt == OptIn::Off {
        return Err(Withheld::NotOptedIn);
    }
    let owner = allowed_owner(pod, &policy.owner_kinds).ok_or(Withheld::OwnerNotAllowed)?;
    if opt == OptIn::New {
        let created = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second());
        if created.is_none_or(|c| c < state.since) {
            return Err(Withheld::OlderThanGeneration);
        }
    }
    if state.open_circuits.contains_key(&owner.uid) {
        return Err(Withheld::CircuitOpen);
    }
    if recent_all >= policy.per_minute as usize {
        return Err(Withheld::Rate);
    }
    if state.evictions.len() >= policy.per_hour as usize {
        return Err(Withheld::Budget);
    }
    Ok(owner.uid.clone())
}

/// Whether `pod`, missing its sidecars, is the replacement of a pod evicted for this SidecarSet:
/// its owner had another pod evicted (another uid: a StatefulSet's replacement has the
/// evicted pod's name), and it was created after that eviction (in its second: not one of
/// the pods that were already there, [`super::Evicted::same_second`]). Returns the
/// owner's uid and `namespace/Kind/name`.
pub fn came_back_missing(pod: &SlimPod, state: &SidecarSetState) -> Option<(String, String)> {
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    let created = pod.metadata.creation_timestamp.as_ref()?.0.as_second();
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let evicted_before = state.evictions.iter().any(|e| {
        e.owner == owner.uid
            && another_pod(e, pod, uid)
            && (e.at < created || (e.at == created && !e.same_second.iter().any(|u| u == uid)))
    });
    evicted_before.then(|| {
        (
            owner.uid.clone(),
            format!(
                "{}/{}/{}",
                pod.namespace().unwrap_or_default(),
                owner.kind,
                owner.name
            ),
        )
    })
}

/// Whether the eviction `e` was of another pod than `pod` (uid `uid`): by uid, or by name for
/// records that kept none.
fn another_pod(e: &super::state::Evicted, pod: &SlimPod, uid: &str) -> bool {
    if e.uid.is_empty() {
        e.pod != key(pod)
    } else {
        e.uid != uid
    }
}

/// The uids of `pods` (running without the sidecars) controlled by `owner` and created in the
/// second `at`.
pub(super) fn same_second(pods: &[&SlimPod], owner: &str, at: i64) -> Vec<String> {
    pods.iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == owner)
                && p.metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.as_second())
                    == Some(at)
        })
        .filter_map(|p| p.metadata.uid.clone())
        .collect()
}

/// `namespace/name` of a pod.
pub(super) fn key(pod: &SlimPod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Evictions of every SidecarSet in the last minute.
pub fn recent(states: &BTreeMap<String, SidecarSetState>, now: i64) -> usize {
    states
        .values()
        .flat_map(|s| &s.evictions)
        .filter(|e| now - e.at < 60)
        .count()
}
