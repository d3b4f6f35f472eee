//! SidecarSets compiled into one `MutatingAdmissionPolicy` (admissionregistration.k8s.io/v1,
//! Kubernetes ≥ 1.36) and its binding: the API server then injects pods itself, with no call to
//! the operator, so a stopped operator neither blocks nor misses the pods those SidecarSets
//! select.
//!
//! **One policy for every SidecarSet it can express**, not one per SidecarSet: the order of
//! policies in the API server is not defined, and several SidecarSets injecting one pod must give
//! the webhook's order (by SidecarSet name) and one hash annotation holding all of them. The
//! policy's CEL decides per pod which SidecarSets select it (pod labels, and the namespace's
//! labels through `namespaceObject`) and builds the webhook's patch from literals: every sidecar,
//! volume and annotation value is rendered by the webhook's own code ([`render_alone`]) when the
//! policy is compiled, so the two cannot drift. What a sidecar takes from the pod's own
//! containers (`transferEnv`, `shareVolumePolicy`, `shareVolumeDevicePolicy`, and the volumes
//! shared mounts name) is CEL over them, with the webhook's rules (`from_pod`); the end-to-end
//! suite compares both on the API server.
//!
//! **The webhook keeps the rest, whole pods at a time.** A SidecarSet the policy cannot express
//! (see [`Fallback`]) stays on the webhook; the policy then leaves alone every pod such a
//! SidecarSet could select (the same label-only test as the webhook's match condition), so a pod
//! is injected entirely by the policy or entirely by the webhook, never by both. The policy also
//! leaves to the webhook pods that arrive with injection annotations already (their hash
//! annotation is merged as JSON, which CEL cannot do), pods with repeated image pull secrets
//! (the webhook removes the repeats) and, when a sidecar shares mounts, pods of more than
//! [`MAX_SHARED_MOUNTS`] mounts and devices (the API server bounds each evaluation's cost). The webhook sees a pod the policy injected with every
//! SidecarSet recorded in its hash annotation, and so changes nothing.
//!
//! A marker label ([`PROBE_LABEL`]) lets the operator see, with a server-side dry run, when the
//! API server applies this version of the policy ([`Compiled::token`]): bindings take effect
//! asynchronously and policies have no status.

mod from_pod;
mod items;
mod literal;
pub mod parts;
mod render;

use crate::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, ANNOTATION_INJECTED_LIST,
    ANNOTATION_WORKING_HOT_UPGRADE, PatchPolicy, PodInjectPolicy, SidecarSet,
};
use crate::index::{Entry, Index};
use crate::inject::{Rendered, render_alone};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

pub use from_pod::MAX_SHARED_MOUNTS;
pub use literal::{string as cel_string, value as cel_value};

/// The API version of the policy objects the compiler writes.
pub const API_VERSION: &str = "admissionregistration.k8s.io/v1";

/// The policy's resource, for a dynamic API client (k8s-openapi has no v1 type yet).
pub fn policy_resource() -> kube_core::ApiResource {
    resource("MutatingAdmissionPolicy", "mutatingadmissionpolicies")
}

/// The binding's resource, for a dynamic API client.
pub fn binding_resource() -> kube_core::ApiResource {
    resource(
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
    )
}

fn resource(kind: &str, plural: &str) -> kube_core::ApiResource {
    kube_core::ApiResource::from_gvk_with_plural(
        &kube_core::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        plural,
    )
}
/// A pod label that makes the policy answer with [`PROBE_ANNOTATION`] set to its token.
pub const PROBE_LABEL: &str = "sidecarset-operator.io/policy-probe";
/// The annotation the policy sets on a probe pod: the token of the policy version applied.
pub const PROBE_ANNOTATION: &str = "sidecarset-operator.io/policy-token";
/// The policy's annotation holding [`Options::now`], so that a recompilation of the same
/// SidecarSets gives the same policy.
pub const COMPILED_AT_ANNOTATION: &str = "sidecarset-operator.io/compiled-at";
/// The policy's annotation naming the SidecarSets it injects, comma-separated.
pub const INCLUDED_ANNOTATION: &str = "sidecarset-operator.io/injected-here";
/// The policy's annotation naming the SidecarSets left to the webhook, with the reason (a JSON
/// object).
pub const FALLBACKS_ANNOTATION: &str = "sidecarset-operator.io/left-to-webhook";
/// Each part's annotation naming the SidecarSets it injects, comma-separated.
pub const PART_ANNOTATION: &str = "sidecarset-operator.io/part-injects";
/// Each part's annotation holding the labels of its probe pod (a JSON object).
pub const PROBE_LABELS_ANNOTATION: &str = "sidecarset-operator.io/probe-labels";

/// The probe labels a part's policy names in [`PROBE_LABELS_ANNOTATION`].
pub fn probe_labels_of(annotations: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    serde_json::from_str(annotations.get(PROBE_LABELS_ANNOTATION)?).ok()
}

/// How each SidecarSet injects, as a compiled policy's annotations say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Modes {
    /// Injected by the policy.
    pub policy: BTreeSet<String>,
    /// Left to the webhook, with the reason.
    pub webhook: BTreeMap<String, String>,
}

impl Modes {
    /// What a compiled policy says of each SidecarSet.
    pub fn of_compiled(c: &Compiled) -> Modes {
        Modes {
            policy: c.included.iter().cloned().collect(),
            webhook: c
                .fallbacks
                .iter()
                .map(|f| (f.sidecarset.clone(), f.reason.clone()))
                .collect(),
        }
    }

    /// Reads a policy's annotations (None: not a policy this compiler wrote).
    pub fn of_annotations(annotations: &BTreeMap<String, String>) -> Option<Modes> {
        let included = annotations.get(INCLUDED_ANNOTATION)?;
        Some(Modes {
            policy: included
                .split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect(),
            webhook: annotations
                .get(FALLBACKS_ANNOTATION)
                .and_then(|v| serde_json::from_str(v).ok())
                .unwrap_or_default(),
        })
    }

    /// How `sidecarset` injects a pod it selects, in words.
    pub fn describe(&self, sidecarset: &str) -> String {
        if self.policy.contains(sidecarset) {
            "the API server (the operator's MutatingAdmissionPolicy), with no call to the operator"
                .into()
        } else if let Some(reason) = self.webhook.get(sidecarset) {
            format!("the webhook: {reason}")
        } else {
            "the webhook (paused, or changed since the policy was compiled)".into()
        }
    }
}

/// How to compile.
#[derive(Debug, Clone)]
pub struct Options {
    /// Name of the policy and of its binding.
    pub name: String,
    /// Time recorded in the hash annotations (`updateTimestamp`) of the pods the policy injects:
    /// CEL has no clock, so it is the time the policy was compiled.
    pub now: String,
    /// `Fail` or `Ignore`, as the pod webhook's.
    pub failure_policy: String,
    /// The pod webhook's namespace and object selectors (the operator's namespace, excluded
    /// namespaces, its own pods), copied into the policy's match constraints.
    pub namespace_selector: Option<Value>,
    pub object_selector: Option<Value>,
    /// Labels of the policy and the binding.
    pub labels: BTreeMap<String, String>,
    /// A namespace whose pods the policy leaves alone, but for probes (the operator's own: the
    /// probe runs there, where it may create pods).
    pub skip_namespace: Option<String>,
    /// Owner of the policy and the binding (an ownerReference), so that they go with it.
    pub owner: Option<Value>,
    /// At most this many SidecarSets in the policy (the operator lowers it when the API server
    /// refuses a policy, for a limit this compiler does not know).
    pub max_sidecarsets: Option<usize>,
}

/// The pod webhook's match-condition term for a SidecarSet the policy injects: the pods its
/// selector selects that do not name it in their injected list (the webhook's condition sees
/// the pod after the policy changed it).
pub fn webhook_term(selector: &crate::api::CompiledSelector, name: &str) -> String {
    let list = format!(
        "object.metadata.annotations[{}]",
        cel_string(ANNOTATION_INJECTED_LIST)
    );
    format!(
        "({}) && !(has(object.metadata.annotations) && {} in object.metadata.annotations && {} in {list}.split(','))",
        crate::index::cel::selector_expression(selector),
        cel_string(ANNOTATION_INJECTED_LIST),
        cel_string(name)
    )
}

/// A SidecarSet the policy leaves to the webhook, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    pub sidecarset: String,
    pub reason: String,
}

/// The compiled policy: one or more parts, each a policy and its binding.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    /// The parts, the first first (see [`part_name`]).
    pub parts: Vec<Part>,
    /// The SidecarSets the policy injects, in name order.
    pub included: Vec<String>,
    /// The SidecarSets left to the webhook (injection not paused), in name order.
    pub fallbacks: Vec<Fallback>,
}

impl Compiled {
    /// The first part, which names what the whole policy injects.
    pub fn head(&self) -> &Part {
        &self.parts[0]
    }

    /// A digest of every part's token.
    pub fn token(&self) -> String {
        let tokens: Vec<&str> = self.parts.iter().map(|p| p.token.as_str()).collect();
        tokens.join(".")
    }
}

/// One part of the policy: SidecarSets that may select one pod together (see [`parts`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// Name of the policy and of its binding.
    pub name: String,
    /// The `MutatingAdmissionPolicy`.
    pub policy: Value,
    /// Its `MutatingAdmissionPolicyBinding`, whose object selector covers its SidecarSets.
    pub binding: Value,
    /// A digest of what the part does; a probe pod of the part gets it in [`PROBE_ANNOTATION`].
    pub token: String,
    /// The SidecarSets the part injects, in name order.
    pub included: Vec<String>,
    /// The labels of a probe pod of this part (its binding lets it through; the part answers it).
    pub probe_labels: BTreeMap<String, String>,
}

/// One SidecarSet the policy injects, as the webhook renders it.
struct Unit<'a> {
    entry: &'a Entry,
    rendered: Rendered,
    /// Annotations other than the merged ones ([`MERGED`]): key → (value, Retain).
    annotations: BTreeMap<String, (String, bool)>,
}

/// Annotations whose value merges every SidecarSet injected: a JSON object or a list.
const MERGED: [&str; 4] = [
    ANNOTATION_HASH,
    ANNOTATION_HASH_WITHOUT_IMAGE,
    ANNOTATION_INJECTED_LIST,
    ANNOTATION_WORKING_HOT_UPGRADE,
];

/// Compiles every SidecarSet of the index whose injection is not paused.
pub fn compile(index: &Index, opts: &Options) -> Compiled {
    let mut units: Vec<Unit> = Vec::new();
    let mut fallbacks: Vec<(&Entry, String)> = Vec::new();
    for entry in index
        .entries()
        .filter(|e| !e.ss.spec.injection_strategy.paused)
    {
        match unit(entry, opts).and_then(|u| no_clash(&u, &units).map(|()| u)) {
            Ok(u) => units.push(u),
            Err(reason) => fallbacks.push((entry, reason)),
        }
    }
    // The API server bounds each CEL expression's length: the SidecarSets past the most that
    // fit (or past `opts.max_sidecarsets`) stay on the webhook.
    let most = most_that_fit(&units, &fallbacks, opts);
    if most < units.len() {
        let reason = format!(
            "the policy holds the first {most} SidecarSets (by name) that fit the API server's limits ({MAX_EXPRESSION_CHARS} characters per CEL expression{})",
            opts.max_sidecarsets
                .map(|m| format!(", and at most {m} SidecarSets: the API server refused more"))
                .unwrap_or_default()
        );
        for u in units.drain(most..) {
            fallbacks.push((u.entry, reason.clone()));
        }
        fallbacks.sort_by(|a, b| a.0.ss.name().cmp(b.0.ss.name()));
    }
    let fallback_entries: Vec<&Entry> = fallbacks.iter().map(|(e, _)| *e).collect();
    let included: Vec<String> = units
        .iter()
        .map(|u| u.entry.ss.name().to_string())
        .collect();
    let fallbacks: Vec<Fallback> = fallbacks
        .into_iter()
        .map(|(e, reason)| Fallback {
            sidecarset: e.ss.name().to_string(),
            reason,
        })
        .collect();
    // The parts: SidecarSets that may select one pod together, at most MAX_PARTS of them; with
    // none, one part that answers probes only.
    let selectors: Vec<&crate::api::CompiledSelector> =
        units.iter().map(|u| &u.entry.scope().pods).collect();
    let found = parts::groups(&selectors);
    let of = |g: &Vec<usize>| parts::cover(&g.iter().map(|&i| selectors[i]).collect::<Vec<_>>());
    let covers: Vec<parts::Cover> = found.iter().map(of).collect();
    let mut groups = parts::merge(found, &covers, parts::MAX_PARTS);
    if groups.is_empty() {
        groups.push(Vec::new());
    }
    let covers: Vec<parts::Cover> = groups.iter().map(of).collect();
    let mut slots: Vec<Option<Unit>> = units.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(groups.len());
    for (k, (group, cover)) in groups.iter().zip(&covers).enumerate() {
        let members: Vec<Unit> = group.iter().filter_map(|&i| slots[i].take()).collect();
        let name = part_name(&opts.name, k);
        let part_opts = Options {
            name: name.clone(),
            ..opts.clone()
        };
        let mut probe_labels = parts::probe_labels(cover);
        probe_labels.insert(PROBE_LABEL.into(), name.clone());
        let (spec, token) = render::spec(&members, &fallback_entries, &part_opts);
        let mine: Vec<String> = members
            .iter()
            .map(|u| u.entry.ss.name().to_string())
            .collect();
        out.push(part(
            opts,
            k == 0,
            PartText {
                name,
                spec,
                token,
                members: mine,
                probe_labels,
                object_selector: parts::object_selector(cover),
            },
            (&included, &fallbacks),
        ));
    }
    Compiled {
        parts: out,
        included,
        fallbacks,
    }
}

/// The name of part `k`: the first part has the name of the options (the policy of earlier
/// versions, which had one part), the others `-1`, `-2`, … after it.
pub fn part_name(name: &str, k: usize) -> String {
    if k == 0 {
        name.to_string()
    } else {
        format!("{name}-{k}")
    }
}

/// The names every part of the policy `name` may have, the first first.
pub fn part_names(name: &str) -> Vec<String> {
    (0..parts::MAX_PARTS).map(|k| part_name(name, k)).collect()
}

/// One part as rendered, before it is wrapped into objects.
struct PartText {
    name: String,
    spec: Value,
    token: String,
    members: Vec<String>,
    probe_labels: BTreeMap<String, String>,
    object_selector: Option<Value>,
}

/// The policy and the binding of one part. The first part carries what the whole policy
/// injects and leaves to the webhook ([`Modes::of_annotations`] reads it).
fn part(
    opts: &Options,
    first: bool,
    t: PartText,
    (included, fallbacks): (&[String], &[Fallback]),
) -> Part {
    let labels: Value = serde_json::to_value(&opts.labels).unwrap_or_default();
    let mut annotations = json!({
        PROBE_ANNOTATION: t.token, COMPILED_AT_ANNOTATION: opts.now,
        PART_ANNOTATION: t.members.join(","),
        PROBE_LABELS_ANNOTATION: serde_json::to_string(&t.probe_labels).unwrap_or_default(),
    });
    if first {
        annotations[INCLUDED_ANNOTATION] = json!(included.join(","));
        annotations[FALLBACKS_ANNOTATION] = json!(
            serde_json::to_string(
                &fallbacks
                    .iter()
                    .map(|f| (f.sidecarset.as_str(), f.reason.as_str()))
                    .collect::<BTreeMap<_, _>>()
            )
            .unwrap_or_default()
        );
    }
    let mut policy = json!({
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": t.name, "labels": labels, "annotations": annotations},
        "spec": t.spec,
    });
    let mut binding = json!({
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": t.name, "labels": labels},
        "spec": {"policyName": t.name},
    });
    if let Some(sel) = t.object_selector {
        binding["spec"]["matchResources"] = json!({"objectSelector": sel});
    }
    if let Some(owner) = &opts.owner {
        policy["metadata"]["ownerReferences"] = json!([owner]);
        binding["metadata"]["ownerReferences"] = json!([owner]);
    }
    Part {
        name: t.name,
        policy,
        binding,
        token: t.token,
        included: t.members,
        probe_labels: t.probe_labels,
    }
}

/// The API server refuses a CEL expression longer than this (code points).
pub const MAX_EXPRESSION_CHARS: usize = 100_000;

/// How many of `units` (from the first) the policy can hold: every expression within
/// [`MAX_EXPRESSION_CHARS`] and at most `opts.max_sidecarsets`.
fn most_that_fit(units: &[Unit], fallbacks: &[(&Entry, String)], opts: &Options) -> usize {
    let fits = |k: usize| -> bool {
        let mut left: Vec<&Entry> = fallbacks.iter().map(|(e, _)| *e).collect();
        left.extend(units[k..].iter().map(|u| u.entry));
        let (spec, _) = render::spec(&units[..k], &left, opts);
        expressions(&spec).all(|e| e.chars().count() <= MAX_EXPRESSION_CHARS)
    };
    let cap = opts.max_sidecarsets.unwrap_or(usize::MAX).min(units.len());
    if fits(cap) {
        return cap;
    }
    // The largest k in [0, cap) that fits (0 always does: a probe-only policy).
    let (mut lo, mut hi) = (0, cap);
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Every CEL expression of a policy spec.
fn expressions(spec: &Value) -> impl Iterator<Item = &str> {
    let list = |k: &str| spec[k].as_array().into_iter().flatten();
    list("matchConditions")
        .chain(list("variables"))
        .filter_map(|v| v["expression"].as_str())
        .chain(list("mutations").filter_map(|m| m["jsonPatch"]["expression"].as_str()))
}

/// Why a SidecarSet cannot be injected by the policy, if it cannot.
pub fn unsupported(ss: &SidecarSet) -> Option<String> {
    let spec = &ss.spec;
    if ss.native_sidecars() {
        return Some(format!(
            "the annotation {}={} injects the containers as native sidecars, placed after the native sidecars \
             a pod already has, which the policy does not compile yet",
            crate::api::ANNOTATION_NATIVE_SIDECARS,
            crate::api::NATIVE_SIDECARS_ON
        ));
    }
    if spec.injection_strategy.revision.is_some() {
        return Some(
            "spec.injectionStrategy.revision pins a revision to inject: the policy injects the current spec only"
                .into(),
        );
    }
    let lists = [
        ("containers", &spec.containers),
        ("initContainers", &spec.init_containers),
    ];
    for (field, list) in lists {
        for (i, c) in list.iter().enumerate() {
            let at = format!("spec.{field}[{i}]");
            if c.resources_policy.is_some() {
                return Some(format!(
                    "{at}.resourcesPolicy computes resources from the pod's containers; CEL in the API server cannot multiply or divide quantities"
                ));
            }
        }
    }
    let merges = spec
        .patch_pod_metadata
        .iter()
        .any(|p| p.patch_policy == Some(PatchPolicy::MergePatchJson));
    merges.then(|| {
        "spec.patchPodMetadata uses MergePatchJson, a JSON merge that CEL in the API server cannot do"
            .into()
    })
}

/// A SidecarSet as the policy injects it, or why it cannot.
fn unit<'a>(entry: &'a Entry, opts: &Options) -> Result<Unit<'a>, String> {
    if let Some(reason) = unsupported(&entry.ss) {
        return Err(reason);
    }
    let rendered = render_alone(entry, &opts.now)
        .map_err(|d| format!("{}: {} (the webhook decides per pod)", d.field, d.message))?;
    let retained: BTreeSet<&String> = entry
        .ss
        .spec
        .patch_pod_metadata
        .iter()
        .filter(|p| p.patch_policy.unwrap_or(PatchPolicy::Retain) == PatchPolicy::Retain)
        .flat_map(|p| p.annotations.keys())
        .collect();
    let annotations = rendered
        .annotations
        .iter()
        .filter(|(k, _)| !MERGED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), (v.clone(), retained.contains(k))))
        .collect();
    Ok(Unit {
        entry,
        rendered,
        annotations,
    })
}

/// The container names a SidecarSet claims in a pod (the webhook's rule): its containers as
/// injected (a hot-upgrade pair's two), their names in the spec, and its init containers. Of two
/// SidecarSets claiming one name, the webhook injects the first one that selects the pod and
/// skips the other; the policy does the same per pod.
fn claimed_names(u: &Unit) -> BTreeSet<String> {
    u.rendered
        .containers
        .iter()
        .chain(u.rendered.init_containers.iter())
        .filter_map(|(_, c)| c["name"].as_str().map(str::to_string))
        .chain(
            u.entry
                .ss
                .spec
                .containers
                .iter()
                .map(|c| c.name().to_string()),
        )
        .collect()
}

/// A SidecarSet must not write an annotation (other than the merged ones) that an earlier one
/// in the policy writes: the webhook lets the later value win per pod, which the policy leaves
/// to the webhook.
fn no_clash(u: &Unit, earlier: &[Unit]) -> Result<(), String> {
    for other in earlier {
        let other_name = other.entry.ss.name();
        if let Some(k) = other
            .annotations
            .keys()
            .find(|k| u.annotations.contains_key(*k))
        {
            return Err(format!(
                "annotation {k:?} is also written by SidecarSet {other_name:?}"
            ));
        }
    }
    Ok(())
}

/// The entries of a JSON object annotation value as text (`"key":value`), in key order.
fn object_entries(text: &str) -> Vec<(String, String)> {
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    m.iter()
        .map(|(k, v)| {
            let key = Value::String(k.clone()).to_string();
            (k.clone(), format!("{key}:{v}"))
        })
        .collect()
}

/// True for a sidecar placed before the app containers.
fn before(p: &PodInjectPolicy) -> bool {
    *p == PodInjectPolicy::BeforeAppContainer
}

#[cfg(test)]
mod tests;
