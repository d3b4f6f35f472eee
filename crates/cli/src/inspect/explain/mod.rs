//! `explain pod`: why a pod is the way it is, SidecarSet by SidecarSet. The decisions come from
//! the webhook's and the controller's own code: the SidecarSet index and scopes
//! ([`sidecarset_core::index`], [`sidecarset_core::api::Scope`]), the injection ([`sidecarset_core::inject::for_pod`]), the
//! rollout classifier and plan ([`sidecarset_core::rollout`]). Pure: the caller gathers the pod, its
//! namespace's labels, the SidecarSets and the other pods of each (from the cluster or files).

use super::pods::NextStep;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use sidecarset_core::api::{
    ANNOTATION_HASH, Scope, SidecarSet, SidecarSetUpgradeSpec, injected_list, parse_hash_annotation,
};
use sidecarset_core::index::Index;
use sidecarset_core::inject::SkipReason;
use std::collections::{BTreeMap, BTreeSet};

mod human;
mod injected;

pub use human::human;

/// A ControllerRevision of a SidecarSet, by the hash it records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarSetRevision {
    pub sidecarset: String,
    pub name: String,
    /// Its `kruise.io/sidecarset-hash` annotation.
    pub hash: String,
}

/// What `explain pod` looks at.
pub struct PodInput<'a> {
    pub pod: &'a Pod,
    /// The labels of the pod's namespace (with `kubernetes.io/metadata.name`).
    pub namespace_labels: BTreeMap<String, String>,
    pub index: &'a Index,
    /// Namespaces the operator never injects (its own, kube-system, --skip-namespaces).
    pub skip_namespaces: &'a BTreeSet<String>,
    /// The pods injected by each SidecarSet (the explained pod may be among them), for the
    /// rollout plan; a SidecarSet without an entry is planned with the explained pod alone.
    pub peers: &'a BTreeMap<String, Vec<Pod>>,
    pub revisions: &'a [SidecarSetRevision],
    /// List every SidecarSet, not only those that select the pod, injected it or miss it by one
    /// selector term.
    pub all: bool,
    /// RFC 3339, for the injection run (it records the time).
    pub now: &'a str,
}

/// The answer of `explain pod`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    /// `namespace/name`.
    pub pod: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The pod's `kruise.io/sidecarset-injected-list`.
    pub injected: Vec<String>,
    pub sidecarsets: Vec<Verdict>,
    /// How many SidecarSets were left out (neither selecting the pod nor close to it).
    pub others: usize,
}

/// One SidecarSet's relation to the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub sidecarset: String,
    /// Its selector, namespace and namespaceSelector cover the pod now.
    pub selects: bool,
    /// The terms of its scope the pod (or its namespace) does not meet.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missed: Vec<Term>,
    pub injection: InjectionState,
    /// Why not injected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Why>,
    /// The reason of the Event the operator records for it on the pod's controller (or the
    /// pod), when it records one (`SidecarSetOptedOut`, `SidecarSetConflict`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<Revision>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<Sidecar>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgradable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<NextStep>,
    /// How it injects the pods it selects, when the operator compiles SidecarSets into an
    /// admission policy (`--injection policy|auto`): by the API server or by the webhook, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub injected_by: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum InjectionState {
    Injected,
    Skipped,
    NotSelected,
    /// The pod records the SidecarSet, which does not exist any more.
    Deleted,
}

/// Why a SidecarSet that selects the pod is not in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Why {
    /// `injectionStrategy.paused`.
    Paused,
    /// A container name another SidecarSet of the pod injects.
    Conflict,
    /// The operator's namespace, kube-system or a --skip-namespaces one.
    NamespaceExcluded,
    /// The pod is older than the SidecarSet.
    CreatedBefore,
    /// The injection would refuse the pod now (a resourcesPolicy).
    Refused,
    /// It would be injected if the pod were created now.
    NotInjectedAtCreation,
    /// The pod is a manifest not created yet (no creationTimestamp): it will be injected.
    WillBeInjected,
    /// The pod has finished.
    PodFinished,
    /// The pod or its namespace declines it by a label, as the SidecarSet allows.
    OptedOut,
    /// It injects native sidecars, which the cluster's version cannot run.
    NativeSidecarsUnsupported,
}

/// A selector term the pod misses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Term {
    /// `spec.selector`, `spec.namespace` or `spec.namespaceSelector`.
    pub field: String,
    /// In kubectl's selector syntax, e.g. `app=web`.
    pub requirement: String,
    /// The pod's (or namespace's) value of that label; none when it does not have it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has: Option<String>,
}

impl std::fmt::Display for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = self
            .requirement
            .trim_start_matches('!')
            .split(['=', ' '])
            .next()
            .unwrap_or("");
        let whose = if self.field == "spec.selector" {
            "the pod"
        } else {
            "its namespace"
        };
        match &self.has {
            Some(v) if self.field == "spec.namespace" => {
                write!(
                    f,
                    "{} needs {}, the pod is in {v}",
                    self.field, self.requirement
                )
            }
            Some(v) => write!(
                f,
                "{} needs {}, {whose} has {key}={v}",
                self.field, self.requirement
            ),
            None => write!(
                f,
                "{} needs {}, {whose} has no label {key}",
                self.field, self.requirement
            ),
        }
    }
}

/// Which sidecar revision the pod runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// The pod's hash for the SidecarSet.
    pub pod_hash: String,
    /// The revision with that hash, when known (else the one recorded at injection).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_revision: Option<String>,
    pub latest_hash: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest_revision: Option<String>,
    pub updated: bool,
}

/// One sidecar: its image in the pod's spec, in the SidecarSet, and what the kubelet runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sidecar {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sidecarset_image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_image: Option<String>,
    /// For a container of a hot-upgrade pair: `working` or `idle`, and its version annotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot_upgrade: Option<String>,
}

/// `namespace/name` of a pod.
fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// The terms of `ss`'s scope that a pod with `pod_labels`, in namespace `ns` with `ns_labels`,
/// misses; Err when its selectors do not compile.
pub fn missed_terms(
    ss: &SidecarSet,
    pod_labels: &BTreeMap<String, String>,
    ns: &str,
    ns_labels: &BTreeMap<String, String>,
) -> Result<Vec<Term>, String> {
    let scope = Scope::of(&ss.spec).map_err(|e| e.to_string())?;
    let mut out: Vec<Term> = scope
        .pods
        .misses(pod_labels)
        .into_iter()
        .map(|r| Term {
            field: "spec.selector".into(),
            requirement: r.to_string(),
            has: pod_labels.get(&r.key).cloned(),
        })
        .collect();
    if let Some(n) = &scope.namespaces {
        let namespace_field = ss.spec.namespace.as_deref().is_some_and(|n| !n.is_empty());
        for r in n.misses(ns_labels) {
            out.push(if namespace_field {
                Term {
                    field: "spec.namespace".into(),
                    requirement: ss.spec.namespace.clone().unwrap_or_default(),
                    has: Some(ns.to_string()),
                }
            } else {
                Term {
                    field: "spec.namespaceSelector".into(),
                    requirement: r.to_string(),
                    has: ns_labels.get(&r.key).cloned(),
                }
            });
        }
    }
    Ok(out)
}

/// The pod's hash annotation entry for the SidecarSet `name`.
fn hash_entry(pod: &Pod, name: &str) -> Option<SidecarSetUpgradeSpec> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_HASH)
        .and_then(|v| parse_hash_annotation(v))?
        .remove(name)
}

/// Explains the pod (see [`PodInput`]).
pub fn explain_pod(input: &PodInput) -> PodExplanation {
    let pod = input.pod;
    let empty = BTreeMap::new();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    let injected: BTreeSet<String> = injected_list(annotations);
    let recorded: BTreeSet<String> = annotations
        .get(ANNOTATION_HASH)
        .and_then(|v| parse_hash_annotation(v))
        .map(|m| m.into_keys().collect())
        .unwrap_or_default();
    // What the webhook would do with this pod now.
    let injection =
        sidecarset_core::inject::for_pod(input.index, pod, &input.namespace_labels, input.now);
    let mut verdicts = Vec::new();
    let mut others = 0;
    for ss in input.index.iter() {
        let is_injected = injected.contains(ss.name()) || recorded.contains(ss.name());
        match verdict(input, ss, is_injected, &injection) {
            Some(v) => verdicts.push(v),
            None => others += 1,
        }
    }
    for gone in injected
        .iter()
        .chain(recorded.iter())
        .collect::<BTreeSet<_>>()
    {
        if input.index.get(gone).is_none() {
            verdicts.push(Verdict::bare(
                gone.clone(),
                InjectionState::Deleted,
                "the pod records this SidecarSet, which does not exist any more: its sidecars stay until the pod is recreated".into(),
            ));
        }
    }
    verdicts.sort_by(|a, b| a.sidecarset.cmp(&b.sidecarset));
    PodExplanation {
        pod: key(pod),
        created: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
        phase: pod.status.as_ref().and_then(|s| s.phase.clone()),
        injected: injected.into_iter().collect(),
        sidecarsets: verdicts,
        others,
    }
}

impl Verdict {
    /// A verdict with only a state and a detail (nothing selected, no revision, no sidecars).
    fn bare(sidecarset: String, injection: InjectionState, detail: String) -> Verdict {
        Verdict {
            sidecarset,
            selects: false,
            missed: vec![],
            injection,
            reason: None,
            event: None,
            detail,
            revision: None,
            sidecars: vec![],
            upgradable: None,
            next: None,
            injected_by: None,
        }
    }
}

/// One SidecarSet's verdict on the pod; `None` when it is left out (neither selecting the pod,
/// nor injected, nor missing it by one term, without `--all`).
fn verdict(
    input: &PodInput,
    ss: &std::sync::Arc<SidecarSet>,
    is_injected: bool,
    injection: &sidecarset_core::inject::Injection,
) -> Option<Verdict> {
    let pod = input.pod;
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let name = ss.name();
    let missed = match missed_terms(ss, labels, ns, &input.namespace_labels) {
        Ok(m) => m,
        Err(e) => {
            return Some(Verdict::bare(
                name.into(),
                InjectionState::NotSelected,
                format!("its selectors do not compile: {e}"),
            ));
        }
    };
    let selects = missed.is_empty();
    if !(selects || is_injected || missed.len() == 1 || input.all) {
        return None;
    }
    let mut v = Verdict {
        selects,
        missed,
        ..Verdict::bare(name.into(), InjectionState::NotSelected, String::new())
    };
    if is_injected {
        injected::injected_verdict(input, ss, &mut v);
        if let Some(label) = ignored_opt_out(ss, labels, &input.namespace_labels) {
            v.detail.push_str(&format!(
                "; {label} is ignored: this SidecarSet does not allow opting out (no annotation {}={})",
                sidecarset_core::api::ANNOTATION_OPT_OUT,
                sidecarset_core::api::OPT_OUT_ALLOWED
            ));
        }
    } else if selects {
        v.injection = InjectionState::Skipped;
        let (why, event, detail) = skip_reason(input, ss, injection, created);
        v.reason = Some(why);
        v.event = event.map(str::to_string);
        v.detail = detail;
    } else {
        v.detail = v
            .missed
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join("; ");
    }
    Some(v)
}

/// The opt-out label of the pod or its namespace that a mandatory SidecarSet ignores, in words.
fn ignored_opt_out(
    ss: &SidecarSet,
    labels: &BTreeMap<String, String>,
    ns_labels: &BTreeMap<String, String>,
) -> Option<String> {
    if sidecarset_core::api::opt_out_allowed(ss.metadata.annotations.as_ref()) {
        return None;
    }
    sidecarset_core::api::opt_out_label_of(ss.name(), labels, ns_labels).map(|o| o.describe())
}

/// Why a SidecarSet that selects the pod did not inject it: the reason, the Event's reason when
/// the operator records one, and a sentence.
fn skip_reason(
    input: &PodInput,
    ss: &SidecarSet,
    injection: &sidecarset_core::inject::Injection,
    created: Option<jiff::Timestamp>,
) -> (Why, Option<&'static str>, String) {
    let (why, detail) = skip_reason_why(input, ss, injection, created);
    let event = injection
        .skipped
        .iter()
        .find(|s| s.sidecarset == ss.name())
        .map(|s| s.reason)
        .or(match why {
            Why::NamespaceExcluded => Some(SkipReason::NamespaceExcluded),
            Why::NotInjectedAtCreation | Why::CreatedBefore => Some(SkipReason::NotInjected),
            _ => None,
        })
        .map(|r| r.event().0);
    (why, event, detail)
}

fn skip_reason_why(
    input: &PodInput,
    ss: &SidecarSet,
    injection: &sidecarset_core::inject::Injection,
    created: Option<jiff::Timestamp>,
) -> (Why, String) {
    let name = ss.name();
    let pod = input.pod;
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    if input.skip_namespaces.contains(ns) {
        let s = sidecarset_core::inject::excluded_namespace_skip(name, ns);
        return (Why::NamespaceExcluded, s.detail);
    }
    if !sidecarset_core::inject::pod_is_active(pod) {
        return (
            Why::PodFinished,
            "the pod has finished or is being deleted: nothing is injected into it".into(),
        );
    }
    let since = ss.metadata.creation_timestamp.as_ref().map(|t| t.0);
    if let (Some(pod_t), Some(ss_t)) = (created, since)
        && pod_t < ss_t
    {
        return (
            Why::CreatedBefore,
            format!(
                "the pod was created at {pod_t}, before the SidecarSet ({ss_t}): sidecars are injected only when a pod is created; recreate the pod (e.g. kubectl rollout restart) to inject it"
            ),
        );
    }
    if let Some(d) = injection.denied.as_ref().filter(|d| d.sidecarset == name) {
        return (
            Why::Refused,
            format!("the webhook would refuse this pod now: {d}"),
        );
    }
    if let Some(s) = injection.skipped.iter().find(|s| s.sidecarset == name) {
        let why = match s.reason {
            SkipReason::Paused => Why::Paused,
            SkipReason::Conflict => Why::Conflict,
            SkipReason::NamespaceExcluded => Why::NamespaceExcluded,
            SkipReason::NotInjected | SkipReason::EvictionStopped => Why::NotInjectedAtCreation,
            SkipReason::OptedOut => Why::OptedOut,
            SkipReason::NativeSidecarsUnsupported => Why::NativeSidecarsUnsupported,
        };
        return (why, s.detail.clone());
    }
    if created.is_none() && injection.injected.iter().any(|n| n == name) {
        return (
            Why::WillBeInjected,
            "the pod has not been created (no creationTimestamp): the webhook will inject it when it is".into(),
        );
    }
    (
        Why::NotInjectedAtCreation,
        "it selects the pod and would inject it if the pod were created now, but did not at its creation: the SidecarSet's scope or injection strategy, or the pod's labels, changed since, or the webhook did not see the pod (failurePolicy Ignore while the operator was down, or a label that selects it was added by a mutating webhook that runs after ours: the API server does not call ours again for it); recreate the pod to inject it".into(),
    )
}
