//! `explain pod`: why a pod is the way it is, SidecarSet by SidecarSet. The decisions come from
//! the webhook's and the controller's own code: the SidecarSet index and scopes
//! ([`sidecarset_core::index`], [`sidecarset_core::api::Scope`]), the injection ([`sidecarset_core::inject::for_pod`]), the
//! rollout classifier and plan ([`sidecarset_core::rollout`]). Pure: the caller gathers the pod, its
//! namespace's labels, the SidecarSets and the other pods of each (from the cluster or files).

use super::pods::{NextStep, Rollout, differences};
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use sidecarset_core::api::{
    ANNOTATION_HASH, Scope, SidecarSet, SidecarSetUpgradeSpec, injected_list, parse_hash_annotation,
};
use sidecarset_core::index::{Entry, Index};
use sidecarset_core::inject::SkipReason;
use sidecarset_core::rollout::Classifier;
use std::collections::{BTreeMap, BTreeSet};

/// A ControllerRevision of a SidecarSet, by the hash it records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownRevision {
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
    pub revisions: &'a [KnownRevision],
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
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<Revision>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<Sidecar>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgradable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<NextStep>,
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
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let injected: BTreeSet<String> = injected_list(annotations);
    let recorded: BTreeSet<String> = annotations
        .get(ANNOTATION_HASH)
        .and_then(|v| parse_hash_annotation(v))
        .map(|m| m.into_keys().collect())
        .unwrap_or_default();
    // What the webhook would do with this pod now.
    let injection =
        sidecarset_core::inject::for_pod(input.index, pod, &input.namespace_labels, input.now);
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let mut verdicts = Vec::new();
    let mut others = 0;
    for ss in input.index.iter() {
        let name = ss.name();
        let is_injected = injected.contains(name) || recorded.contains(name);
        let missed = match missed_terms(ss, labels, ns, &input.namespace_labels) {
            Ok(m) => m,
            Err(e) => {
                verdicts.push(Verdict {
                    sidecarset: name.into(),
                    selects: false,
                    missed: vec![],
                    injection: InjectionState::NotSelected,
                    reason: None,
                    detail: format!("its selectors do not compile: {e}"),
                    revision: None,
                    sidecars: vec![],
                    upgradable: None,
                    next: None,
                });
                continue;
            }
        };
        let selects = missed.is_empty();
        if !(selects || is_injected || missed.len() == 1 || input.all) {
            others += 1;
            continue;
        }
        let mut v = Verdict {
            sidecarset: name.into(),
            selects,
            missed,
            injection: InjectionState::NotSelected,
            reason: None,
            detail: String::new(),
            revision: None,
            sidecars: vec![],
            upgradable: None,
            next: None,
        };
        if is_injected {
            injected_verdict(input, ss, &mut v);
        } else if selects {
            v.injection = InjectionState::Skipped;
            let (why, detail) = skip_reason(input, ss, &injection, created);
            v.reason = Some(why);
            v.detail = detail;
        } else {
            v.detail = v
                .missed
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join("; ");
        }
        verdicts.push(v);
    }
    for gone in injected
        .iter()
        .chain(recorded.iter())
        .collect::<BTreeSet<_>>()
    {
        if input.index.get(gone).is_none() {
            verdicts.push(Verdict {
                sidecarset: gone.clone(),
                selects: false,
                missed: vec![],
                injection: InjectionState::Deleted,
                reason: None,
                detail: "the pod records this SidecarSet, which does not exist any more: its sidecars stay until the pod is recreated".into(),
                revision: None,
                sidecars: vec![],
                upgradable: None,
                next: None,
            });
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

fn skip_reason(
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

fn injected_verdict(input: &PodInput, ss: &std::sync::Arc<SidecarSet>, v: &mut Verdict) {
    let pod = input.pod;
    let name = ss.name();
    v.injection = InjectionState::Injected;
    if !v.selects {
        v.detail = format!(
            "injected at creation; no longer selected ({}), but the controller still counts and upgrades the pod (it follows the pod's injected list)",
            v.missed
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        );
    } else {
        v.detail = "injected at creation".into();
    }
    let Some(entry) = input
        .index
        .iter()
        .find(|s| s.name() == name)
        .and_then(|s| Entry::new(s.clone()).ok())
    else {
        return;
    };
    // Sidecars: the pod's spec image, the SidecarSet's, and what runs.
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let sidecar_specs: Vec<_> = ss
        .spec
        .containers
        .iter()
        .chain(
            ss.spec
                .init_containers
                .iter()
                .filter(|c| c.is_native_sidecar()),
        )
        .collect();
    // A hot-upgrade sidecar is listed as its pair: the working container should run the
    // SidecarSet's image, the idle one its empty image.
    let pod_ann = pod.metadata.annotations.clone().unwrap_or_default();
    let mut hot: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
    for c in ss.hot_upgrade_containers() {
        let (working, idle) = sidecarset_core::api::working_and_idle(c.name(), &pod_ann);
        hot.insert(working, ("working".into(), c.container.image.clone()));
        hot.insert(
            idle,
            (
                "idle".into(),
                c.hot_upgrade_empty_image().map(str::to_string),
            ),
        );
    }
    let mut names: Vec<String> = super::pods::injected_sidecars(pod, name)
        .into_iter()
        .flat_map(
            |n| match ss.hot_upgrade_containers().find(|c| c.name() == n) {
                Some(c) => c.pod_names(),
                None => vec![n],
            },
        )
        .collect();
    for c in &sidecar_specs {
        for n in c.pod_names() {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    names.sort();
    for n in names {
        let in_pod = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == n);
        let running = status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .find(|c| c.name == n)
            .map(|c| c.image.clone())
            .filter(|i| !i.is_empty());
        v.sidecars.push(Sidecar {
            name: n.clone(),
            pod_image: in_pod.and_then(|c| c.image.clone()),
            sidecarset_image: match hot.get(&n) {
                Some((_, image)) => image.clone(),
                None => sidecar_specs
                    .iter()
                    .find(|c| c.container.name == n)
                    .and_then(|c| c.container.image.clone()),
            },
            running_image: running,
            hot_upgrade: hot.get(&n).map(|(role, _)| {
                let version = pod_ann
                    .get(&sidecarset_core::api::version_annotation(&n))
                    .map(String::as_str)
                    .unwrap_or("-");
                format!("{role}, version {version}")
            }),
        });
    }
    let latest_revision = ss.status.as_ref().and_then(|s| s.latest_revision.clone());
    if let Some(h) = hash_entry(pod, name) {
        let updated = h.hash == *entry.hash;
        let pod_revision = if updated {
            latest_revision.clone()
        } else {
            input
                .revisions
                .iter()
                .find(|r| r.sidecarset == name && r.hash == h.hash)
                .map(|r| r.name.clone())
                .or_else(|| Some(h.controller_revision.clone()).filter(|r| !r.is_empty()))
        };
        v.revision = Some(Revision {
            pod_hash: h.hash.clone(),
            pod_revision,
            latest_hash: entry.hash.to_string(),
            latest_revision,
            updated,
        });
    }
    let Ok(classifier) = Classifier::new(&entry) else {
        return;
    };
    let mut views: Vec<sidecarset_core::rollout::PodView> = input
        .peers
        .get(name)
        .into_iter()
        .flatten()
        // As the controller picks a SidecarSet's pods: by their injected list.
        .filter(|p| {
            injected_list(p.metadata.annotations.as_ref().unwrap_or(&BTreeMap::new()))
                .contains(name)
        })
        .map(|p| classifier.view(p))
        .collect();
    let me = classifier.view(pod);
    if !views.iter().any(|x| x.key == me.key) {
        views.push(me.clone());
    }
    v.upgradable = Some(me.updated || me.upgradable);
    let rollout = Rollout::new(&entry.ss.spec.update_strategy, views);
    v.next = Some(rollout.next_step(&me, || differences(pod, &entry, input.now)));
}

/// The explanation for people.
pub fn human(e: &PodExplanation) -> String {
    let mut s = String::new();
    s.push_str(&format!("Pod {}", e.pod));
    let mut facts = Vec::new();
    if let Some(p) = &e.phase {
        facts.push(p.clone());
    }
    if let Some(c) = &e.created {
        facts.push(format!("created {c}"));
    }
    if !facts.is_empty() {
        s.push_str(&format!(" ({})", facts.join(", ")));
    }
    s.push('\n');
    s.push_str(&format!(
        "Injected by: {}\n",
        if e.injected.is_empty() {
            "none".to_string()
        } else {
            e.injected.join(", ")
        }
    ));
    if e.sidecarsets.is_empty() {
        s.push_str("\nNo SidecarSet selects this pod or comes close to it.\n");
    }
    for v in &e.sidecarsets {
        s.push('\n');
        let state = match (v.injection, v.reason) {
            (InjectionState::Injected, _) => "injected".to_string(),
            (InjectionState::Deleted, _) => "injected, SidecarSet deleted".to_string(),
            (InjectionState::NotSelected, _) => "not selected".to_string(),
            (InjectionState::Skipped, Some(r)) => format!("skipped ({})", why_label(r)),
            (InjectionState::Skipped, None) => "skipped".to_string(),
        };
        s.push_str(&format!("SidecarSet {}: {state}\n", v.sidecarset));
        if !v.detail.is_empty() {
            s.push_str(&format!("  {}\n", v.detail));
        }
        if let Some(r) = &v.revision {
            let rev = |name: &Option<String>, hash: &str| {
                let short: String = hash.chars().take(12).collect();
                match name {
                    Some(n) => format!("{n} (hash {short}…)"),
                    None => format!("hash {short}…"),
                }
            };
            if r.updated {
                s.push_str(&format!(
                    "  revision: {}, the latest\n",
                    rev(&r.latest_revision, &r.latest_hash)
                ));
            } else {
                s.push_str(&format!(
                    "  revision: {}; latest is {}\n",
                    rev(&r.pod_revision, &r.pod_hash),
                    rev(&r.latest_revision, &r.latest_hash)
                ));
            }
        }
        for c in &v.sidecars {
            let img = |i: &Option<String>| i.clone().unwrap_or_else(|| "-".into());
            s.push_str(&format!(
                "  sidecar {}: pod {}, SidecarSet {}, running {}{}\n",
                c.name,
                img(&c.pod_image),
                img(&c.sidecarset_image),
                img(&c.running_image),
                c.hot_upgrade
                    .as_ref()
                    .map(|h| format!(" (hot upgrade: {h})"))
                    .unwrap_or_default()
            ));
        }
        if let Some(u) = v.upgradable {
            s.push_str(&format!(
                "  upgradable in place: {}\n",
                if u { "yes" } else { "no" }
            ));
        }
        if let Some(n) = &v.next {
            s.push_str(&format!("  next rollout step: {n}\n"));
        }
    }
    if e.others > 0 {
        s.push_str(&format!(
            "\n{} other SidecarSet(s) miss this pod by more than one selector term (--all lists them).\n",
            e.others
        ));
    }
    s
}

fn why_label(w: Why) -> &'static str {
    match w {
        Why::Paused => "paused",
        Why::Conflict => "conflict",
        Why::NamespaceExcluded => "namespace excluded",
        Why::CreatedBefore => "pod created before the SidecarSet",
        Why::Refused => "the webhook would refuse the pod",
        Why::NotInjectedAtCreation => "not injected at creation",
        Why::WillBeInjected => "will be injected at creation",
        Why::PodFinished => "pod finished",
    }
}
