//! Pods that a SidecarSet selects but that run without its sidecars: reported on the pod's
//! owner (a `SidecarSetMissing` Event, deduplicated like the webhook's), counted in the status
//! and a metric, and, with `--evict-pods-without-sidecars` **and** the SidecarSet's opt-in
//! annotation ([`ANNOTATION_EVICT`]), evicted so that their controllers recreate them injected.
//!
//! An eviction must never loop or hit the wrong pod, so a pod is evicted only when all hold:
//! * the SidecarSet opted in (`"true"`: pods created after its current generation took effect;
//!   `"all"`: older pods too);
//! * its controller is of an allowed kind (`--evict-owner-kinds`: ReplicaSet, StatefulSet,
//!   DaemonSet and OpenKruise's CloneSet, Advanced StatefulSet and Advanced DaemonSet by
//!   default), so something recreates it from a template;
//! * the webhook's own injection decision, run now on the pod as the API server has it (read
//!   fresh, not from the cache), injects this SidecarSet: a container-name conflict or a refusal
//!   means the replacement would come back the same way, so it is reported, never evicted;
//! * the owner's circuit is closed: once a replacement of a pod evicted for this SidecarSet comes
//!   back still without its sidecars (the webhook unreachable under `Ignore`, say), the owner is
//!   not evicted again until the SidecarSet changes, and a `SidecarSetEvictionStopped` Event on
//!   the owner says why;
//! * the rate (`--evictions-per-minute`, for all SidecarSets) and the SidecarSet's budget
//!   (`--evictions-per-hour`) allow it.
//!
//! The rate, the budget, when each generation took effect and the open circuits are kept in the
//! API (a ConfigMap, [`STATE_CONFIGMAP`], in the operator's namespace), written with its
//! resourceVersion before each eviction: a new leader continues from them, and two writers
//! cannot both spend the same token. The Eviction itself carries the pod's uid and
//! resourceVersion as preconditions (a recreated pod of the same name, or a changed one, is never
//! evicted from a stale view), and the Eviction API respects PodDisruptionBudgets (a refused
//! eviction is tried again later).

use super::slim::SlimPod;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, PostParams};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use tracing::{debug, info, warn};

/// The SidecarSet annotation that opts it in to evictions: `"true"` (pods created after its
/// current generation took effect), `"all"` (older pods too); anything else: off.
pub const ANNOTATION_EVICT: &str = "sidecarset-operator.io/evict-pods-without-sidecars";

/// The ConfigMap (in the operator's namespace) that keeps the eviction state.
pub const STATE_CONFIGMAP: &str = "sidecarset-operator-evictions";

/// How soon to look again while pods wait for eviction.
pub const EVICTION_RECHECK: Duration = Duration::from_secs(30);

/// The owner kinds evicted by default: `Kind.group`.
pub const DEFAULT_OWNER_KINDS: &str = "ReplicaSet.apps,StatefulSet.apps,DaemonSet.apps,CloneSet.apps.kruise.io,StatefulSet.apps.kruise.io,DaemonSet.apps.kruise.io";

/// Most open circuits kept per SidecarSet (the oldest go first).
const MAX_CIRCUITS: usize = 200;

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

/// One eviction, as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evicted {
    /// Unix seconds.
    pub at: i64,
    pub pod: String,
    #[serde(default)]
    pub owner: String,
    /// The owner's pods (uids) already running without the sidecars in the second of the
    /// eviction: creation times have one-second resolution, so a pod created in that second is
    /// the replacement only when it is not one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub same_second: Vec<String>,
}

/// The state of one SidecarSet (a key of the ConfigMap).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetState {
    /// The SidecarSet's uid and generation, and when (unix seconds) this generation was first
    /// seen by a leader: pods created before are not evicted (unless `"all"`).
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub generation: i64,
    #[serde(default)]
    pub since: i64,
    /// Evictions of the last hour.
    #[serde(default)]
    pub evictions: Vec<Evicted>,
    /// Owners (uid → `namespace/Kind/name`) whose circuit is open for this generation.
    #[serde(default)]
    pub open_circuits: BTreeMap<String, String>,
}

impl SidecarSetState {
    /// The state for `uid`/`generation` at `now`: a new SidecarSet or generation starts over
    /// (its circuits closed, `since` now) but keeps the evictions of the last hour (the budget).
    pub fn current(mut self, uid: &str, generation: i64, now: i64) -> SidecarSetState {
        if self.uid != uid {
            return SidecarSetState {
                uid: uid.to_string(),
                generation,
                since: now,
                ..Default::default()
            };
        }
        if self.generation != generation {
            self.generation = generation;
            self.since = now;
            self.open_circuits.clear();
        }
        self.evictions.retain(|e| now - e.at < 3600);
        self
    }
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
        }
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
/// its owner had a pod evicted, and it was created after that eviction (in its second: not one of
/// the pods that were already there, [`Evicted::same_second`]). Returns the
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
            && e.pod != key(pod)
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

/// The uids of `pods` (running without the sidecars) controlled by `owner` and created in the
/// second `at`.
fn same_second(pods: &[&SlimPod], owner: &str, at: i64) -> Vec<String> {
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

fn key(pod: &SlimPod) -> String {
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

/// The process's eviction settings.
pub struct Evictions {
    pub policy: Policy,
}

impl Evictions {
    pub fn new(policy: Policy) -> Self {
        Evictions { policy }
    }
}

/// The state ConfigMap, read fresh: its states by SidecarSet, and its resourceVersion.
struct Stored {
    states: BTreeMap<String, SidecarSetState>,
    resource_version: Option<String>,
}

async fn load(api: &Api<ConfigMap>) -> Result<Stored, kube::Error> {
    let cm = api.get_opt(STATE_CONFIGMAP).await?;
    let states = cm
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .map(|d| {
            d.iter()
                .filter_map(|(k, v)| match serde_json::from_str(v) {
                    Ok(s) => Some((k.clone(), s)),
                    Err(e) => {
                        warn!(configmap = STATE_CONFIGMAP, key = %k, error = %e, "unreadable eviction state ignored (it starts over)");
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Stored {
        states,
        resource_version: cm.and_then(|c| c.metadata.resource_version),
    })
}

/// Writes the states, conditional on the resourceVersion read (create when there was none).
async fn store(api: &Api<ConfigMap>, stored: &mut Stored) -> Result<(), kube::Error> {
    let data: BTreeMap<String, String> = stored
        .states
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::to_string(v).unwrap_or_default()))
        .collect();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(STATE_CONFIGMAP.into()),
            resource_version: stored.resource_version.clone(),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    "sidecarset-operator".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    let written = match &stored.resource_version {
        Some(_) => {
            api.replace(STATE_CONFIGMAP, &PostParams::default(), &cm)
                .await?
        }
        None => api.create(&PostParams::default(), &cm).await?,
    };
    stored.resource_version = written.metadata.resource_version;
    Ok(())
}

fn withhold(sidecarset: &str, pod: &str, why: Withheld) {
    debug!(
        sidecarset,
        pod,
        reason = why.label(),
        "pod without its sidecars not evicted"
    );
    crate::metrics::metrics()
        .evictions_withheld
        .get_or_create(&crate::metrics::SidecarSetReasonLabels {
            sidecarset: sidecarset.to_string(),
            reason: why.label().into(),
        })
        .inc();
}

/// The body of an Eviction of `pod` (as read: `fresh`), conditional on its uid and
/// resourceVersion. Written here rather than with kube's `Api::evict`: kube 5 sends its
/// `EvictParams::delete_options` under the key `delete_options`, which the API server ignores
/// (it reads `deleteOptions`), so the preconditions would be silently dropped.
pub fn eviction(name: &str, namespace: &str, fresh: &Pod) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"preconditions": {
            "uid": fresh.metadata.uid,
            "resourceVersion": fresh.metadata.resource_version,
        }},
    })
}

/// What one pass over a SidecarSet's missing pods did.
#[derive(Debug, Default)]
pub struct Pass {
    pub evicted: usize,
    /// Owners whose circuit opened in this pass (`namespace/Kind/name`).
    pub opened: Vec<(String, Pod)>,
}

/// Looks at the SidecarSet's pods running without its sidecars and evicts those the rules allow
/// (see the module's documentation). `would_inject`: the webhook's decision for a pod as the API
/// server has it now. Errors of the API are logged; the next pass tries again.
pub async fn evict(
    client: &kube::Client,
    ev: &Evictions,
    ss: &sidecarset_core::api::SidecarSet,
    pods: &[&SlimPod],
    would_inject: &(dyn Fn(&Pod) -> bool + Sync),
) -> Pass {
    let name = ss.name_any();
    let mut pass = Pass::default();
    let opt = opt_in(ss.annotations());
    if opt == OptIn::Off {
        for p in pods {
            withhold(&name, &key(p), Withheld::NotOptedIn);
        }
        return pass;
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ev.policy.namespace);
    let mut stored = match load(&api).await {
        Ok(s) => s,
        Err(e) => {
            warn!(sidecarset = %name, error = %e, configmap = STATE_CONFIGMAP, "cannot read the eviction state; no eviction until it can be read");
            return pass;
        }
    };
    let now = jiff::Timestamp::now().as_second();
    let uid = ss.uid().unwrap_or_default();
    let generation = ss.metadata.generation.unwrap_or_default();
    let before = stored.states.get(&name).cloned();
    let mut state = before
        .clone()
        .unwrap_or_default()
        .current(&uid, generation, now);
    // Replacements that came back still missing open their owner's circuit.
    for p in pods {
        if let Some((owner, what)) = came_back_missing(p, &state)
            && !state.open_circuits.contains_key(&owner)
        {
            warn!(
                sidecarset = %name,
                owner = %what,
                pod = %key(p),
                created = ?p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                resource_version = ?p.metadata.resource_version,
                injected = ?sidecarset_core::api::injected_list(p.annotations()),
                evictions = ?state.evictions.iter().map(|e| (e.pod.as_str(), e.at)).collect::<Vec<_>>(),
                "a pod evicted for missing sidecars came back without them: no more evictions of this owner until the SidecarSet changes"
            );
            if state.open_circuits.len() >= MAX_CIRCUITS
                && let Some(first) = state.open_circuits.keys().next().cloned()
            {
                state.open_circuits.remove(&first);
            }
            state.open_circuits.insert(owner, what.clone());
            pass.opened.push((what, p.to_pod()));
        }
    }
    if before.as_ref() != Some(&state) {
        stored.states.insert(name.clone(), state.clone());
        if let Err(e) = store(&api, &mut stored).await {
            warn!(sidecarset = %name, error = %e, "cannot write the eviction state; no eviction in this pass");
            return pass;
        }
    }
    let pods_api = |ns: &str| -> Api<Pod> { Api::namespaced(client.clone(), ns) };
    for p in pods {
        let pod_key = key(p);
        let recent_all = recent(&stored.states, now);
        let owner = match precheck(p, opt, &state, &ev.policy, recent_all) {
            Ok(o) => o,
            Err(why) => {
                withhold(&name, &pod_key, why);
                if matches!(why, Withheld::Rate | Withheld::Budget) {
                    break;
                }
                continue;
            }
        };
        let ns = p.namespace().unwrap_or_default();
        // The pod as the API server has it: the same pod (uid), whole, for the decision.
        let fresh = match pods_api(&ns).get_opt(&p.name_any()).await {
            Ok(Some(f)) if f.metadata.uid == p.metadata.uid => f,
            Ok(_) => {
                withhold(&name, &pod_key, Withheld::Precondition);
                continue;
            }
            Err(e) => {
                warn!(sidecarset = %name, pod = %pod_key, error = %e, "cannot read the pod; not evicted");
                continue;
            }
        };
        if !would_inject(&fresh) {
            withhold(&name, &pod_key, Withheld::NotInjectable);
            continue;
        }
        // Spend the token first, in the API: a leader that takes over sees it. The time is the
        // eviction's, not the pass's start: the pass may have waited on the API for seconds, and
        // a sibling created in between is no replacement.
        let at = jiff::Timestamp::now().as_second();
        state.evictions.push(Evicted {
            at,
            pod: pod_key.clone(),
            owner: owner.clone(),
            same_second: same_second(pods, &owner, at),
        });
        stored.states.insert(name.clone(), state.clone());
        if let Err(e) = store(&api, &mut stored).await {
            warn!(sidecarset = %name, error = %e, "cannot record the eviction; not evicted (tried again later)");
            return pass;
        }
        let body = eviction(&p.name_any(), &ns, &fresh);
        let refused = match pods_api(&ns)
            .create_subresource::<_, serde_json::Value>(
                "eviction",
                &p.name_any(),
                &PostParams::default(),
                &body,
            )
            .await
        {
            Ok(_) => {
                info!(sidecarset = %name, pod = %pod_key, "evicted a pod running without the SidecarSet's sidecars; its controller recreates it");
                crate::metrics::metrics()
                    .pods_evicted
                    .get_or_create(&crate::metrics::label(&name))
                    .inc();
                pass.evicted += 1;
                false
            }
            Err(kube::Error::Api(e)) if e.code == 429 => {
                debug!(sidecarset = %name, pod = %pod_key, reason = %e.message, "eviction refused by a PodDisruptionBudget; tried again later");
                true
            }
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                withhold(&name, &pod_key, Withheld::Precondition);
                true
            }
            Err(e) => {
                warn!(sidecarset = %name, pod = %pod_key, error = %e, "cannot evict a pod running without the SidecarSet's sidecars");
                true
            }
        };
        if refused {
            // Give the token back (best effort: a lost write only costs one token for an hour).
            state.evictions.pop();
            stored.states.insert(name.clone(), state.clone());
            if let Err(e) = store(&api, &mut stored).await {
                debug!(sidecarset = %name, error = %e, "cannot give the eviction token back");
                return pass;
            }
        }
    }
    pass
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(owner: Option<(&str, &str, bool)>, deleting: bool, created: &str) -> SlimPod {
        let mut v = serde_json::json!({"metadata": {"name": "p", "namespace": "a", "uid": "pod-uid",
            "creationTimestamp": created}});
        if let Some((api_version, kind, controller)) = owner {
            v["metadata"]["ownerReferences"] = serde_json::json!([{
                "apiVersion": api_version, "kind": kind, "name": "o", "uid": "owner-uid", "controller": controller
            }]);
        }
        if deleting {
            v["metadata"]["deletionTimestamp"] = serde_json::json!("2026-12-01T00:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    }

    fn policy() -> Policy {
        Policy {
            per_minute: 2,
            per_hour: 3,
            owner_kinds: parse_owner_kinds(DEFAULT_OWNER_KINDS).unwrap(),
            namespace: "ops".into(),
        }
    }

    const T0: &str = "2026-12-01T10:00:00Z";
    fn t(s: &str) -> i64 {
        s.parse::<jiff::Timestamp>().unwrap().as_second()
    }

    #[test]
    fn only_allowed_owner_kinds_are_evicted() {
        let kinds = parse_owner_kinds(DEFAULT_OWNER_KINDS).unwrap();
        for (owner, deleting, want) in [
            (Some(("apps/v1", "ReplicaSet", true)), false, true),
            (Some(("apps/v1", "StatefulSet", true)), false, true),
            (Some(("apps/v1", "DaemonSet", true)), false, true),
            (
                Some(("apps.kruise.io/v1alpha1", "CloneSet", true)),
                false,
                true,
            ),
            (
                Some(("apps.kruise.io/v1beta1", "StatefulSet", true)),
                false,
                true,
            ),
            (
                Some(("apps.kruise.io/v1alpha1", "DaemonSet", true)),
                false,
                true,
            ),
            (Some(("batch/v1", "Job", true)), false, false),
            // Mirror pods, workflow engines, VMs: not recreated from a template by a kind we know.
            (Some(("v1", "Node", true)), false, false),
            (
                Some(("argoproj.io/v1alpha1", "Workflow", true)),
                false,
                false,
            ),
            (Some(("tekton.dev/v1", "TaskRun", true)), false, false),
            (
                Some(("kubevirt.io/v1", "VirtualMachineInstance", true)),
                false,
                false,
            ),
            (Some(("example.com/v1", "ReplicaSet", true)), false, false),
            (Some(("apps/v1", "ReplicaSet", false)), false, false),
            (None, false, false),
            (Some(("apps/v1", "ReplicaSet", true)), true, false),
        ] {
            assert_eq!(
                allowed_owner(&pod(owner, deleting, T0), &kinds).is_some(),
                want,
                "{owner:?} deleting={deleting}"
            );
        }
    }

    #[test]
    fn owner_kinds_parse_and_bad_ones_name_the_flag() {
        assert_eq!(
            parse_owner_kinds("ReplicaSet.apps, Foo.example.com").unwrap(),
            vec![
                OwnerKind {
                    kind: "ReplicaSet".into(),
                    group: "apps".into()
                },
                OwnerKind {
                    kind: "Foo".into(),
                    group: "example.com".into()
                }
            ]
        );
        let e = parse_owner_kinds("ReplicaSet").unwrap_err();
        assert!(
            e.contains("--evict-owner-kinds") && e.contains("Kind.group"),
            "{e}"
        );
    }

    #[test]
    fn the_opt_in_annotation() {
        for (v, want) in [
            (Some("true"), OptIn::New),
            (Some("all"), OptIn::All),
            (Some("false"), OptIn::Off),
            (Some("yes"), OptIn::Off),
            (None, OptIn::Off),
        ] {
            let mut a = BTreeMap::new();
            if let Some(v) = v {
                a.insert(ANNOTATION_EVICT.to_string(), v.to_string());
            }
            assert_eq!(opt_in(&a), want, "{v:?}");
        }
    }

    #[test]
    fn prechecks_in_order() {
        let rs = Some(("apps/v1", "ReplicaSet", true));
        let since = t(T0);
        let state = |evictions: usize, open: bool| SidecarSetState {
            uid: "u".into(),
            generation: 1,
            since,
            evictions: (0..evictions)
                .map(|i| Evicted {
                    at: since,
                    pod: format!("a/x{i}"),
                    owner: "other".into(),
                    ..Default::default()
                })
                .collect(),
            open_circuits: if open {
                [("owner-uid".to_string(), "a/ReplicaSet/o".to_string())].into()
            } else {
                BTreeMap::new()
            },
        };
        let p = policy();
        let after = "2026-12-01T10:00:05Z";
        let before = "2026-12-01T09:59:59Z";
        for (opt, created, st, recent, want) in [
            (
                OptIn::Off,
                after,
                state(0, false),
                0,
                Err(Withheld::NotOptedIn),
            ),
            (
                OptIn::New,
                after,
                state(0, false),
                0,
                Ok("owner-uid".to_string()),
            ),
            (
                OptIn::New,
                before,
                state(0, false),
                0,
                Err(Withheld::OlderThanGeneration),
            ),
            (
                OptIn::All,
                before,
                state(0, false),
                0,
                Ok("owner-uid".to_string()),
            ),
            (
                OptIn::New,
                after,
                state(0, true),
                0,
                Err(Withheld::CircuitOpen),
            ),
            (OptIn::New, after, state(0, false), 2, Err(Withheld::Rate)),
            (OptIn::New, after, state(3, false), 0, Err(Withheld::Budget)),
            (
                OptIn::New,
                after,
                state(2, false),
                1,
                Ok("owner-uid".to_string()),
            ),
        ] {
            assert_eq!(
                precheck(&pod(rs, false, created), opt, &st, &p, recent),
                want,
                "{opt:?} created {created} evictions {} open {} recent {recent}",
                st.evictions.len(),
                !st.open_circuits.is_empty()
            );
        }
        let job = Some(("batch/v1", "Job", true));
        assert_eq!(
            precheck(&pod(job, false, after), OptIn::All, &state(0, false), &p, 0),
            Err(Withheld::OwnerNotAllowed)
        );
    }

    #[test]
    fn a_new_generation_starts_over_but_keeps_the_hours_budget() {
        let s = SidecarSetState {
            uid: "u".into(),
            generation: 1,
            since: 100,
            evictions: vec![
                Evicted {
                    at: 100,
                    pod: "a/old".into(),
                    owner: "o".into(),
                    ..Default::default()
                },
                Evicted {
                    at: 4000,
                    pod: "a/new".into(),
                    owner: "o".into(),
                    ..Default::default()
                },
            ],
            open_circuits: [("o".to_string(), "a/ReplicaSet/o".to_string())].into(),
        };
        let same = s.clone().current("u", 1, 4100);
        assert_eq!(same.since, 100, "same generation: unchanged");
        assert_eq!(same.evictions.len(), 1, "older than an hour: dropped");
        assert_eq!(same.open_circuits.len(), 1);
        let next = s.clone().current("u", 2, 4100);
        assert_eq!((next.generation, next.since), (2, 4100));
        assert!(
            next.open_circuits.is_empty(),
            "a change closes the circuits"
        );
        assert_eq!(
            next.evictions.len(),
            1,
            "the budget is per hour, not per generation"
        );
        let other = s.current("u2", 1, 4100);
        assert_eq!(other.uid, "u2");
        assert!(
            other.evictions.is_empty(),
            "a recreated SidecarSet starts over"
        );
    }

    #[test]
    fn a_replacement_that_comes_back_missing_is_recognised() {
        let rs = Some(("apps/v1", "ReplicaSet", true));
        let evicted = |at: &str, same_second: &[&str]| Evicted {
            at: t(at),
            pod: "a/evicted".into(),
            owner: "owner-uid".into(),
            same_second: same_second.iter().map(|u| u.to_string()).collect(),
        };
        // (eviction, pod's owner uid, pod created, replacement?)
        for (e, owner, created, want) in [
            (evicted(T0, &[]), "owner-uid", "2026-12-01T10:00:03Z", true),
            (evicted(T0, &[]), "owner-uid", "2026-12-01T09:00:00Z", false),
            // Created in the eviction's second: a replacement unless it was already there.
            (evicted(T0, &[]), "owner-uid", T0, true),
            (evicted(T0, &["other-pod"]), "owner-uid", T0, true),
            (evicted(T0, &["pod-uid"]), "owner-uid", T0, false),
            // A sibling created when the pass began, evicted seconds later: no replacement (the
            // eviction's own time counts, not the pass's).
            (evicted("2026-12-01T10:00:06Z", &[]), "owner-uid", T0, false),
            (
                evicted(T0, &[]),
                "someone-else",
                "2026-12-01T10:00:03Z",
                false,
            ),
        ] {
            let mut e = e;
            if owner != "owner-uid" {
                e.owner = owner.into();
            }
            let state = SidecarSetState {
                evictions: vec![e.clone()],
                ..Default::default()
            };
            let got = came_back_missing(&pod(rs, false, created), &state);
            assert_eq!(
                got.is_some(),
                want,
                "eviction at {} (same second {:?}) by {}, pod created {created}",
                e.at,
                e.same_second,
                e.owner
            );
            if want {
                assert_eq!(got, Some(("owner-uid".into(), "a/ReplicaSet/o".into())));
            }
        }
    }

    #[test]
    fn the_pods_already_there_in_the_second_of_an_eviction() {
        let mk = |uid: &str, owner: &str, created: &str| -> SlimPod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": uid, "namespace": "a",
                "uid": uid, "creationTimestamp": created, "ownerReferences": [{"apiVersion": "apps/v1",
                "kind": "ReplicaSet", "name": "o", "uid": owner, "controller": true}]}}))
            .unwrap()
        };
        let pods = [
            mk("same", "rs", T0),
            mk("earlier", "rs", "2026-12-01T09:59:59Z"),
            mk("other-owner", "rs2", T0),
            mk("same-too", "rs", T0),
        ];
        let refs: Vec<&SlimPod> = pods.iter().collect();
        assert_eq!(same_second(&refs, "rs", t(T0)), ["same", "same-too"]);
        assert!(same_second(&refs, "rs", t(T0) + 1).is_empty());
    }

    #[test]
    fn an_eviction_recorded_before_same_second_existed_still_reads() {
        let e: Evicted = serde_json::from_str(r#"{"at": 5, "pod": "a/p", "owner": "o"}"#).unwrap();
        assert!(e.same_second.is_empty());
        assert!(!serde_json::to_string(&e).unwrap().contains("same_second"));
    }

    #[test]
    fn the_rate_counts_every_sidecarset_over_the_last_minute() {
        let e = |at| Evicted {
            at,
            pod: "a/p".into(),
            owner: "o".into(),
            ..Default::default()
        };
        let states: BTreeMap<String, SidecarSetState> = [
            (
                "a".to_string(),
                SidecarSetState {
                    evictions: vec![e(1000), e(1050)],
                    ..Default::default()
                },
            ),
            (
                "b".to_string(),
                SidecarSetState {
                    evictions: vec![e(930), e(1059)],
                    ..Default::default()
                },
            ),
        ]
        .into();
        // 1000 is 60 s before 1060: out; 1050 and 1059 in; 930 out.
        assert_eq!(recent(&states, 1060), 2);
        assert_eq!(recent(&states, 1059), 3, "1000 is 59 s before 1059");
    }
}
