//! How a pod is changed by the SidecarSets that match it. Pure: the result is a JSON patch
//! (RFC 6902) of only what changes, addressed against the pod exactly as it was received, so
//! fields this build does not know about (a newer Kubernetes) are never touched.

mod annotations;
mod native;
pub mod resources;

pub use annotations::patch_metadata;

use crate::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, ANNOTATION_INJECTED_LIST, ENV_IS_INJECTED,
    PodInjectPolicy, SidecarContainer, SidecarSet, SidecarSetUpgradeSpec, parse_hash_annotation,
};
use crate::index::Entry;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use jsonptr::PointerBuf;
use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, LocalObjectReference, ObjectFieldSelector, Pod, PodSpec,
    ResourceRequirements, Volume,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What the injection of one pod produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Injection {
    /// The JSON patch against the pod as received ([`Injection::patch`]), the values of
    /// [`Injection::direct`] left out (`null` at their operations).
    ops: Patch,
    /// The sidecars and volumes whose operations `ops` leaves out, by the operation's index:
    /// written into the patch's JSON straight from their types ([`Injection::patch_json`]),
    /// never turned into a JSON tree first (that tree cost five times what writing it does).
    direct: Vec<(usize, Direct)>,
    /// SidecarSets injected by this call (not those the pod already had).
    pub injected: Vec<String>,
    /// SidecarSets that match the pod but were not injected, and why.
    pub skipped: Vec<Skipped>,
    /// Set when the pod must be refused: a matching SidecarSet cannot be injected into it (its
    /// resourcesPolicy does not fit the pod). The patch is then empty.
    pub denied: Option<Denial>,
}

/// A value of the patch written straight from its type.
#[derive(Debug, Clone, PartialEq)]
enum Direct {
    Container(Box<Container>),
    Volume(Box<Volume>),
}

impl serde::Serialize for Direct {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Direct::Container(c) => c.serialize(s),
            Direct::Volume(v) => v.serialize(s),
        }
    }
}

impl Injection {
    /// The JSON patch against the pod as received; empty when nothing changes.
    pub fn patch(&self) -> Patch {
        let mut patch = self.ops.clone();
        for (at, c) in &self.direct {
            match patch.0.get_mut(*at) {
                Some(PatchOperation::Add(op)) => op.value = to_value(c),
                Some(PatchOperation::Replace(op)) => op.value = to_value(c),
                _ => {}
            }
        }
        patch
    }

    /// How many operations the patch has (0: nothing changes).
    pub fn patch_len(&self) -> usize {
        self.ops.0.len()
    }

    /// The patch as JSON: the bytes `serde_json` writes for [`Injection::patch`], the sidecars
    /// and volumes written straight from their types.
    pub fn patch_json(&self) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Op<'a> {
            op: &'static str,
            path: &'a PointerBuf,
            value: &'a Direct,
        }
        let mut out = Vec::with_capacity(4096);
        out.push(b'[');
        let mut deferred = self.direct.iter().peekable();
        for (i, op) in self.ops.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let direct = match (deferred.peek(), op) {
                (Some((at, c)), PatchOperation::Add(a)) if *at == i => Some(("add", &a.path, c)),
                (Some((at, c)), PatchOperation::Replace(r)) if *at == i => {
                    Some(("replace", &r.path, c))
                }
                _ => None,
            };
            // Writing into a Vec fails only for a map with non-string keys: none here.
            let _ = match direct {
                Some((op, path, value)) => {
                    deferred.next();
                    serde_json::to_writer(&mut out, &Op { op, path, value })
                }
                None => serde_json::to_writer(&mut out, op),
            };
        }
        out.push(b']');
        out
    }
}

/// Why a pod cannot be created with the SidecarSets that match it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub sidecarset: String,
    /// The sidecar (container or init container) that cannot be built.
    pub container: String,
    /// The SidecarSet's field at fault, e.g. `spec.containers[0].resourcesPolicy.resourcesExpr.limits.cpu`.
    pub field: String,
    /// What went wrong and what to change.
    pub message: String,
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SidecarSet {:?} cannot inject container {:?} into this pod: {}: {}",
            self.sidecarset, self.container, self.field, self.message
        )
    }
}

/// Why a SidecarSet that matches a pod was not injected into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// `injectionStrategy.paused` is true.
    Paused,
    /// One of its containers has the name of a container another SidecarSet injects.
    Conflict,
    /// The pod's namespace is excluded from injection.
    NamespaceExcluded,
    /// The pod runs without the SidecarSet's sidecars although it selects it (seen by the
    /// controller: created while the webhook was unreachable, or before the SidecarSet).
    NotInjected,
    /// A pod evicted for missing the SidecarSet's sidecars was recreated still without them: its
    /// owner is not evicted again until the SidecarSet changes (seen by the controller).
    EvictionStopped,
    /// The pod, or its namespace, declines the SidecarSet by a label, as the SidecarSet allows
    /// ([`crate::api::ANNOTATION_OPT_OUT`]).
    OptedOut,
    /// The SidecarSet injects native sidecars ([`crate::api::ANNOTATION_NATIVE_SIDECARS`]) and
    /// the cluster's version cannot run them (before 1.29).
    NativeSidecarsUnsupported,
}

impl SkipReason {
    /// Every reason, in declaration order (a new variant fails to compile in [`Self::position`]
    /// until it is listed here too).
    pub const ALL: [SkipReason; 7] = [
        SkipReason::Paused,
        SkipReason::Conflict,
        SkipReason::NamespaceExcluded,
        SkipReason::NotInjected,
        SkipReason::EvictionStopped,
        SkipReason::OptedOut,
        SkipReason::NativeSidecarsUnsupported,
    ];

    /// The reason's place in [`Self::ALL`] (exhaustive: the compiler names a variant left out).
    pub const fn position(self) -> usize {
        match self {
            SkipReason::Paused => 0,
            SkipReason::Conflict => 1,
            SkipReason::NamespaceExcluded => 2,
            SkipReason::NotInjected => 3,
            SkipReason::EvictionStopped => 4,
            SkipReason::OptedOut => 5,
            SkipReason::NativeSidecarsUnsupported => 6,
        }
    }

    /// The reason as a metric label.
    pub fn label(self) -> &'static str {
        match self {
            SkipReason::Paused => "paused",
            SkipReason::Conflict => "conflict",
            SkipReason::NamespaceExcluded => "namespace_excluded",
            SkipReason::NotInjected => "not_injected",
            SkipReason::EvictionStopped => "eviction_stopped",
            SkipReason::OptedOut => "opted_out",
            SkipReason::NativeSidecarsUnsupported => "native_sidecars_unsupported",
        }
    }

    /// The reason and type of the Event that reports it: the one list the webhook's and the
    /// controller's Events and `explain` read.
    pub fn event(self) -> (&'static str, &'static str) {
        match self {
            SkipReason::Paused => ("SidecarSetPaused", "Normal"),
            SkipReason::Conflict => ("SidecarSetConflict", "Warning"),
            SkipReason::NamespaceExcluded => ("SidecarSetNamespaceExcluded", "Normal"),
            SkipReason::NotInjected => ("SidecarSetMissing", "Warning"),
            SkipReason::EvictionStopped => ("SidecarSetEvictionStopped", "Warning"),
            SkipReason::OptedOut => ("SidecarSetOptedOut", "Normal"),
            SkipReason::NativeSidecarsUnsupported => {
                ("SidecarSetNativeSidecarsUnsupported", "Warning")
            }
        }
    }
}

/// A matching SidecarSet left out of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub sidecarset: String,
    pub reason: SkipReason,
    /// What happened and what to do, for people (an Event's note).
    pub detail: String,
}

pub use crate::api::{FieldPath, parse_field_path};

/// A SidecarSet that selects a pod running without its sidecars.
pub fn not_injected_skip(sidecarset: &str, evicting: bool) -> Skipped {
    Skipped {
        sidecarset: sidecarset.to_string(),
        reason: SkipReason::NotInjected,
        detail: if evicting {
            "the pod runs without this SidecarSet's sidecars (created while the webhook was unreachable, or before the SidecarSet); the operator evicts it so that its controller recreates it with them".to_string()
        } else {
            "the pod runs without this SidecarSet's sidecars (created while the webhook was unreachable, or before the SidecarSet); recreate it (kubectl rollout restart) to inject them, or run the operator with --evict-pods-without-sidecars".to_string()
        },
    }
}

/// A SidecarSet whose evictions stopped for an owner: its replacement pod came back without the
/// sidecars.
pub fn eviction_stopped_skip(sidecarset: &str, owner: &str) -> Skipped {
    Skipped {
        sidecarset: sidecarset.to_string(),
        reason: SkipReason::EvictionStopped,
        detail: format!(
            "a pod of {owner} evicted because it ran without this SidecarSet's sidecars came back without them \
             (the webhook was not called, or skipped it); no more evictions of {owner}'s pods for this SidecarSet \
             until it changes: `sidecarset-operator explain pod` on a new pod says why it was not injected"
        ),
    }
}

/// The skip of a SidecarSet that selects a pod and allows it to decline, which it does.
pub fn opted_out_skip(sidecarset: &str, by: &crate::api::OptOut) -> Skipped {
    let undo = match by {
        crate::api::OptOut::Pod(_) => "remove the label from the pod's template",
        crate::api::OptOut::Namespace(_) => "remove the label from the namespace",
    };
    Skipped {
        sidecarset: sidecarset.to_string(),
        reason: SkipReason::OptedOut,
        detail: format!(
            "declined by {} (the SidecarSet allows it: annotation {}={}); {undo} and recreate the pod to inject it",
            by.describe(),
            crate::api::ANNOTATION_OPT_OUT,
            crate::api::OPT_OUT_ALLOWED,
        ),
    }
}

/// The skip of a SidecarSet in native sidecar mode in a cluster that cannot run native sidecars.
pub fn native_unsupported_skip(sidecarset: &str) -> Skipped {
    Skipped {
        sidecarset: sidecarset.to_string(),
        reason: SkipReason::NativeSidecarsUnsupported,
        detail: format!(
            "the SidecarSet injects native sidecars (annotation {}={}), which this cluster's Kubernetes \
             cannot run (1.{} or later is needed); upgrade the cluster, or remove the annotation to inject \
             the sidecars as containers, and recreate the pod",
            crate::api::ANNOTATION_NATIVE_SIDECARS,
            crate::api::NATIVE_SIDECARS_ON,
            crate::api::NATIVE_SIDECARS_MIN_MINOR,
        ),
    }
}

/// The skip of a paused SidecarSet that selects a pod.
pub fn paused_skip(sidecarset: &str) -> Skipped {
    Skipped {
        sidecarset: sidecarset.to_string(),
        reason: SkipReason::Paused,
        detail: "its injectionStrategy.paused is true; set it to false to inject new pods \
                 (pods that exist are not changed)"
            .into(),
    }
}

/// The skip of a SidecarSet that selects a pod in an excluded namespace.
pub fn excluded_namespace_skip(sidecarset: &str, namespace: &str) -> Skipped {
    Skipped {
        sidecarset: sidecarset.to_string(),
        reason: SkipReason::NamespaceExcluded,
        detail: format!(
            "namespace {namespace} is excluded from injection (the operator's namespace, kube-system and \
             --skip-namespaces); run the pod in another namespace, or remove the namespace from the exclusions"
        ),
    }
}

/// Whether a new pod gets the pinned revision (`true`) or the latest spec (`false`), as
/// `injectionStrategy.revision.policy` says: `Always` pins every pod; `Partial` (the canary
/// flow) gives the latest spec to the pods `updateStrategy.selector` selects and the pinned
/// revision to the others; with no update selector, `Partial` pins a `partition` percentage of
/// pods (decided from the pod's name, so a recreated pod keeps its side) and none for an integer
/// partition, as OpenKruise.
pub fn pod_gets_pin(ss: &SidecarSet, pod_labels: &BTreeMap<String, String>, pod_key: &str) -> bool {
    let Some(want) = &ss.spec.injection_strategy.revision else {
        return false;
    };
    if want.policy != Some(crate::api::InjectRevisionPolicy::Partial) {
        return true;
    }
    let strategy = &ss.spec.update_strategy;
    if let Some(sel) = &strategy.selector {
        return !crate::api::CompiledSelector::compile(sel).is_ok_and(|s| s.matches(pod_labels));
    }
    match &strategy.partition {
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(p)) => {
            let pct: u64 = p.trim_end_matches('%').trim().parse().unwrap_or(0);
            // FNV-1a of the pod's key, spread over 0..100.
            let h = pod_key.bytes().fold(0xcbf29ce484222325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
            });
            h % 100 < pct
        }
        _ => false,
    }
}

/// True when the pod is still active (not finished, not being deleted): only active pods are
/// injected.
pub fn pod_is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded") | Some("Failed"))
}

fn ptr(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    // Serialising k8s-openapi types into a Value cannot fail (no non-string map keys).
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Injects SidecarSets (already matched, in order; see [`crate::index::Index`]) into a pod
/// being created. `now` is the RFC 3339 time recorded in the hash annotations. SidecarSets
/// already recorded in the pod's hash annotation are skipped, so injecting an injected pod
/// changes nothing.
pub fn inject(pod: &Pod, sidecarsets: &[&Entry], now: &str) -> Injection {
    let no_annotations = BTreeMap::new();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&no_annotations);
    let recorded = annotations
        .get(ANNOTATION_HASH)
        .and_then(|v| parse_hash_annotation(v))
        .unwrap_or_default();
    if !pod_is_active(pod) {
        return Injection::default();
    }
    let (todo, skipped) = claim_container_names(&recorded, sidecarsets);
    if todo.is_empty() {
        return Injection {
            skipped,
            ..Default::default()
        };
    }
    let empty_spec = Default::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty_spec);
    let mut ops = Vec::new();
    // A pod sent without a spec (the API server calls mutating webhooks before validating): the
    // patch must still apply, the API server then names what is missing.
    if pod.spec.is_none() {
        ops.push(add(ptr(&["spec"]), Value::Object(Default::default())));
    }

    // 1. Metadata patches, then the hash and list annotations.
    let new_ann = annotations::injected_annotations(annotations, recorded, &todo, now);
    annotations::annotation_ops(
        pod.metadata.annotations.is_some(),
        annotations,
        &new_ann,
        &mut ops,
    );

    // 2. Containers, built from the app containers the pod came with. A resourcesPolicy reads
    //    the pod's containers other than those of the matching SidecarSets.
    let BuiltSidecars {
        containers: sidecars,
        init: mut init_sidecars,
        native,
        volumes: volumes_needed,
    } = match build_sidecars(pod, spec, sidecarsets, &todo) {
        Ok(built) => built,
        Err(denied) => {
            return Injection {
                skipped,
                denied: Some(denied),
                ..Default::default()
            };
        }
    };
    init_sidecars.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    let mut direct = Vec::new();
    // No containers (the list is empty or absent: the typed pod cannot tell): the whole list
    // is added, which applies in both cases.
    let front = merge_containers(
        "containers",
        &spec.containers,
        sidecars,
        spec.containers.is_empty(),
        &mut ops,
        &mut direct,
    );
    if native.is_empty() {
        merge_containers(
            "initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
            init_sidecars,
            spec.init_containers.is_none(),
            &mut ops,
            &mut direct,
        );
    } else {
        native::merge(spec, &init_sidecars, &native, front, &mut ops);
    }

    // 3. Volumes: only those mounted by injected containers; the pod's own win on a name clash.
    volume_ops(spec, &volumes_needed, &mut ops, &mut direct);
    // 4. Image pull secrets, without duplicates.
    pull_secret_ops(spec, &todo, &mut ops);

    Injection {
        ops: Patch(ops),
        direct,
        injected: todo.iter().map(|e| e.ss.name().to_string()).collect(),
        skipped,
        denied: None,
    }
}

/// One SidecarSet's injection into a pod that has nothing of its own to share or transfer, as
/// the webhook builds it: the admission-policy compiler's input ([`crate::policy`]). Containers
/// and init containers with the side of the app containers they go to, the SidecarSet's volumes
/// they mount (in the webhook's order), its image pull secrets, and the annotations an injection
/// into a pod without annotations writes (`now` in the hash annotations).
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub containers: Vec<(PodInjectPolicy, Value)>,
    pub init_containers: Vec<(PodInjectPolicy, Value)>,
    pub volumes: Vec<Value>,
    pub image_pull_secrets: Vec<String>,
    pub annotations: BTreeMap<String, String>,
}

/// Renders one SidecarSet alone (see [`Rendered`]); `Err` when its resourcesPolicy refuses a pod
/// without app containers.
pub fn render_alone(entry: &Entry, now: &str) -> Result<Rendered, Denial> {
    let pod = Pod {
        spec: Some(PodSpec::default()),
        ..Default::default()
    };
    let spec = PodSpec::default();
    let todo = [entry];
    let BuiltSidecars {
        containers: sidecars,
        mut init,
        native,
        volumes,
    } = build_sidecars(&pod, &spec, &todo, &todo)?;
    init.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    let placed = |field: &str, built: Built| -> Vec<(PodInjectPolicy, Value)> {
        built
            .into_iter()
            .map(|(sc, c)| (placement(field, sc), to_value(&c)))
            .chain(
                // Native sidecars go before the pod's init containers (the policy compiler
                // leaves such SidecarSets to the webhook, which places them exactly).
                (field == "initContainers")
                    .then_some(native.iter())
                    .into_iter()
                    .flatten()
                    .map(|(_, c)| (PodInjectPolicy::BeforeAppContainer, to_value(c))),
            )
            .collect()
    };
    let annotations =
        annotations::injected_annotations(&BTreeMap::new(), BTreeMap::new(), &todo, now);
    Ok(Rendered {
        containers: placed("containers", sidecars),
        init_containers: placed("initContainers", init),
        volumes: volumes.into_iter().map(to_value).collect(),
        image_pull_secrets: entry
            .ss
            .spec
            .image_pull_secrets
            .iter()
            .map(|s| s.name.clone())
            .collect(),
        annotations,
    })
}

/// Which side of the app containers a sidecar goes to: its `podInjectPolicy`, by default before
/// the containers and after the init containers.
fn placement(field: &str, sc: &SidecarContainer) -> PodInjectPolicy {
    let default = if field == "initContainers" {
        PodInjectPolicy::AfterAppContainer
    } else {
        PodInjectPolicy::BeforeAppContainer
    };
    sc.pod_inject_policy.unwrap_or(default)
}

/// The SidecarSets to inject now, in order, and those left out for a container name another
/// one claims. Container names are claimed by the SidecarSets already in the pod, then in order
/// by those injected now; a SidecarSet that would inject a claimed name is left out whole (two
/// containers of one name make the pod invalid, and replacing would take another's sidecar).
fn claim_container_names<'e>(
    recorded: &BTreeMap<String, SidecarSetUpgradeSpec>,
    sidecarsets: &[&'e Entry],
) -> (Vec<&'e Entry>, Vec<Skipped>) {
    let mut claimed: BTreeMap<String, String> = recorded
        .values()
        .flat_map(|e| {
            e.sidecars()
                .iter()
                .map(|c| (c.clone(), e.sidecar_set_name.clone()))
        })
        .collect();
    let mut todo: Vec<&Entry> = Vec::new();
    let mut skipped = Vec::new();
    for e in sidecarsets
        .iter()
        .copied()
        .filter(|e| !recorded.contains_key(e.ss.name()))
    {
        // A hot-upgrade sidecar claims its own name and those of its pair.
        let names: Vec<String> =
            e.ss.spec
                .containers
                .iter()
                .flat_map(|c| {
                    let mut n = vec![c.name().to_string()];
                    if c.is_hot_upgrade() {
                        n.extend(c.pod_names());
                    }
                    n
                })
                .chain(
                    e.ss.spec
                        .init_containers
                        .iter()
                        .map(|c| c.name().to_string()),
                )
                .collect();
        if let Some((c, other)) = names
            .iter()
            .find_map(|n| claimed.get(n).map(|other| (n.as_str(), other)))
        {
            skipped.push(Skipped {
                sidecarset: e.ss.name().to_string(),
                reason: SkipReason::Conflict,
                detail: format!(
                    "container {c:?} is also injected by SidecarSet {other:?}, which was injected instead; \
                     rename the container in one of them, or make their selectors disjoint"
                ),
            });
            continue;
        }
        for n in names {
            claimed.insert(n, e.ss.name().to_string());
        }
        todo.push(e);
    }
    (todo, skipped)
}

/// A SidecarSet's sidecars as built, with the SidecarSet's container spec.
type Built<'a> = Vec<(&'a SidecarContainer, Container)>;

/// What the SidecarSets injected now add to a pod.
struct BuiltSidecars<'a> {
    /// Their containers (those of SidecarSets in native sidecar mode excepted).
    containers: Built<'a>,
    /// Their init containers.
    init: Built<'a>,
    /// The containers of SidecarSets in native sidecar mode, as native sidecars
    /// (`restartPolicy: Always`), in the SidecarSets' order.
    native: Built<'a>,
    /// The volumes they mount.
    volumes: Vec<&'a Volume>,
}

/// The containers and init containers of the SidecarSets injected now, and the volumes they
/// mount; `Err` when a resourcesPolicy refuses the pod.
fn build_sidecars<'a>(
    pod: &Pod,
    spec: &PodSpec,
    sidecarsets: &[&Entry],
    todo: &[&'a Entry],
) -> Result<BuiltSidecars<'a>, Denial> {
    let apps: Vec<&Container> = spec.containers.iter().collect();
    // The names of the matching SidecarSets' containers, which a resourcesPolicy leaves out of
    // its targets: collected only when one of the SidecarSets injected now has one.
    let any_policy = todo.iter().any(|e| {
        e.ss.spec
            .containers
            .iter()
            .chain(e.ss.spec.init_containers.iter())
            .any(|c| c.resources_policy.is_some())
    });
    let sidecar_names: BTreeSet<String> = sidecarsets
        .iter()
        .filter(|_| any_policy)
        .flat_map(|e| {
            e.ss.spec
                .containers
                .iter()
                .flat_map(|c| c.pod_names())
                .chain(
                    e.ss.spec
                        .init_containers
                        .iter()
                        .map(|c| c.name().to_string()),
                )
        })
        .collect();
    let sidecar_names: BTreeSet<&str> = sidecar_names.iter().map(String::as_str).collect();
    let mut sidecars = Vec::new();
    let mut init_sidecars = Vec::new();
    let mut native = Vec::new();
    let mut volumes_needed: Vec<&Volume> = Vec::new();
    for ss in todo.iter().map(|e| &e.ss) {
        let build = |init| build_all(ss, init, pod, spec, &apps, &sidecar_names);
        let (built_init, built) = match (build(true), build(false)) {
            (Ok(i), Ok(c)) => (i, c),
            (Err(denied), _) | (_, Err(denied)) => return Err(denied),
        };
        // Per SidecarSet, the init containers' volumes first, then the containers' (OpenKruise's
        // order).
        for (_, c) in built_init.iter().chain(built.iter()) {
            let mounted = c.volume_mounts.iter().flatten().map(|m| m.name.as_str());
            let devices = c.volume_devices.iter().flatten().map(|d| d.name.as_str());
            for name in mounted.chain(devices) {
                if let Some(v) = ss.spec.volumes.iter().find(|v| v.name == name)
                    && !volumes_needed.iter().any(|x| x.name == name)
                {
                    volumes_needed.push(v);
                }
            }
        }
        if ss.native_sidecars() {
            native.extend(built.into_iter().map(native::as_native));
        } else {
            sidecars.extend(built);
        }
        init_sidecars.extend(built_init);
    }
    Ok(BuiltSidecars {
        containers: sidecars,
        init: init_sidecars,
        native,
        volumes: volumes_needed,
    })
}

/// Adds the volumes the injected containers mount, except those the pod has by that name. One
/// volume's operation is pushed without its value, the volume recorded in `deferred` by the
/// operation's index ([`Injection::direct`]).
fn volume_ops(
    spec: &PodSpec,
    volumes_needed: &[&Volume],
    ops: &mut Vec<PatchOperation>,
    deferred: &mut Vec<(usize, Direct)>,
) {
    let pod_volumes: BTreeSet<&str> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    let new_volumes = volumes_needed
        .iter()
        .filter(|v| !pod_volumes.contains(v.name.as_str()));
    if spec.volumes.is_none() {
        append_ops(
            "volumes",
            true,
            new_volumes.map(|v| to_value(*v)).collect(),
            ops,
        );
        return;
    }
    for v in new_volumes {
        deferred.push((ops.len(), Direct::Volume(Box::new((*v).clone()))));
        ops.push(add(ptr(&["spec", "volumes", "-"]), Value::Null));
    }
}

/// Adds the SidecarSets' image pull secrets the pod does not have, and removes the pod's own
/// repeated ones (OpenKruise merges both lists without duplicates, the pod's first).
fn pull_secret_ops(spec: &PodSpec, todo: &[&Entry], ops: &mut Vec<PatchOperation>) {
    let mut secrets: BTreeSet<&str> = BTreeSet::new();
    let own = spec.image_pull_secrets.as_deref().unwrap_or(&[]);
    let repeated: Vec<usize> = own
        .iter()
        .enumerate()
        .filter(|(_, s)| !secrets.insert(s.name.as_str()))
        .map(|(i, _)| i)
        .collect();
    // From the last, so that each index still names the entry it was computed for.
    for i in repeated.into_iter().rev() {
        ops.push(PatchOperation::Remove(json_patch::RemoveOperation {
            path: ptr(&["spec", "imagePullSecrets", &i.to_string()]),
        }));
    }
    let mut new_secrets = Vec::new();
    for e in todo {
        for s in &e.ss.spec.image_pull_secrets {
            if secrets.insert(s.name.as_str()) {
                new_secrets.push(to_value(&LocalObjectReference {
                    name: s.name.clone(),
                }));
            }
        }
    }
    append_ops(
        "imagePullSecrets",
        spec.image_pull_secrets.is_none(),
        new_secrets,
        ops,
    );
}

/// Builds the sidecars of a SidecarSet's init containers or containers, with the resources their
/// resourcesPolicy computes.
fn build_all<'a>(
    ss: &'a SidecarSet,
    init: bool,
    pod: &Pod,
    spec: &PodSpec,
    apps: &[&Container],
    sidecar_names: &BTreeSet<&str>,
) -> Result<Vec<(&'a SidecarContainer, Container)>, Denial> {
    let (field, list) = if init {
        ("initContainers", &ss.spec.init_containers)
    } else {
        ("containers", &ss.spec.containers)
    };
    list.iter()
        .enumerate()
        .map(|(i, sc)| {
            let mut c = build_sidecar(sc, pod, apps);
            if let Some(policy) = &sc.resources_policy {
                let computed =
                    resources::compute(policy, spec, sidecar_names).map_err(|e| Denial {
                        sidecarset: ss.name().to_string(),
                        container: sc.name().to_string(),
                        field: format!("spec.{field}[{i}].{}", e.field),
                        message: e.message,
                    })?;
                // Only limits and requests are computed; resource claims stay as they are.
                let mut r = c.resources.take().unwrap_or_default();
                r.limits = computed.limits;
                r.requests = computed.requests;
                c.resources = (r != ResourceRequirements::default()).then_some(r);
            }
            Ok(if !init && sc.is_hot_upgrade() {
                let (one, two) = hot_upgrade_pair(sc, c);
                vec![(sc, one), (sc, two)]
            } else {
                vec![(sc, c)]
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|v| v.into_iter().flatten().collect())
}

/// A hot-upgrade sidecar as OpenKruise injects it: `<name>-1` works with the sidecar's image,
/// `<name>-2` idles on `hotUpgradeEmptyImage`; both are the sidecar as built (env, mounts,
/// resources), with `SIDECARSET_VERSION` and `SIDECARSET_VERSION_ALT` appended, read from their
/// own version annotations through the downward API.
fn hot_upgrade_pair(sc: &SidecarContainer, built: Container) -> (Container, Container) {
    let (n1, n2) = crate::api::hot_upgrade_names(sc.name());
    let with_versions = |name: String, image: Option<String>| {
        let mut c = built.clone();
        let mut env = c.env.take().unwrap_or_default();
        for (var, key) in [
            (
                crate::api::ENV_SIDECARSET_VERSION,
                crate::api::version_annotation(&name),
            ),
            (
                crate::api::ENV_SIDECARSET_VERSION_ALT,
                crate::api::version_alt_annotation(&name),
            ),
        ] {
            env.push(EnvVar {
                name: var.into(),
                value: None,
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        api_version: None,
                        field_path: format!("metadata.annotations['{key}']"),
                    }),
                    ..Default::default()
                }),
            });
        }
        c.env = Some(env);
        c.name = name;
        c.image = image;
        c
    };
    let image = built.image.clone();
    let empty = sc.hot_upgrade_empty_image().map(str::to_string);
    (with_versions(n1, image), with_versions(n2, empty))
}

/// Appends `items` to the pod's `spec.<field>` (the whole list when it is absent).
fn append_ops(field: &str, absent: bool, items: Vec<Value>, ops: &mut Vec<PatchOperation>) {
    if items.is_empty() {
        return;
    }
    if absent {
        ops.push(add(ptr(&["spec", field]), Value::Array(items)));
    } else {
        for item in items {
            ops.push(add(ptr(&["spec", field, "-"]), item));
        }
    }
}

/// Places sidecars among the pod's containers: a pod container with a sidecar's name is replaced
/// in place; the others go before (as a block, in order) or after the app containers. Returns
/// how many were added before the pod's own (0 when the whole list was added). An operation of
/// one sidecar is pushed without its value, the sidecar recorded in `deferred` by the
/// operation's index ([`Injection::direct`]).
fn merge_containers(
    field: &str,
    pod: &[Container],
    sidecars: Built,
    absent: bool,
    ops: &mut Vec<PatchOperation>,
    deferred: &mut Vec<(usize, Direct)>,
) -> usize {
    if sidecars.is_empty() {
        return 0;
    }
    let mut before = Vec::new();
    let mut after = Vec::new();
    for (sc, c) in sidecars {
        if let Some(i) = pod.iter().position(|p| p.name == c.name) {
            deferred.push((ops.len(), Direct::Container(Box::new(c))));
            ops.push(PatchOperation::Replace(ReplaceOperation {
                path: ptr(&["spec", field, &i.to_string()]),
                value: Value::Null,
            }));
            continue;
        }
        match placement(field, sc) {
            PodInjectPolicy::BeforeAppContainer => before.push(c),
            PodInjectPolicy::AfterAppContainer => after.push(c),
        }
    }
    if absent {
        let all: Vec<Value> = before.iter().chain(after.iter()).map(to_value).collect();
        if !all.is_empty() {
            ops.push(add(ptr(&["spec", field]), Value::Array(all)));
        }
        return 0;
    }
    let front = before.len();
    let mut add_one = |path: PointerBuf, c: Container| {
        deferred.push((ops.len(), Direct::Container(Box::new(c))));
        ops.push(add(path, Value::Null));
    };
    for (i, c) in before.into_iter().enumerate() {
        add_one(ptr(&["spec", field, &i.to_string()]), c);
    }
    for c in after {
        add_one(ptr(&["spec", field, "-"]), c);
    }
    front
}

/// The container as injected: shared volume mounts (and the env their subPathExpr uses),
/// transferred env, and `IS_INJECTED=true`. The sidecar's own env and mounts always win.
fn build_sidecar(sc: &SidecarContainer, pod: &Pod, apps: &[&Container]) -> Container {
    let mut c = sc.container.clone();
    let mut env = c.env.take().unwrap_or_default();
    let push_env = |env: &mut Vec<EnvVar>, e: &EnvVar| {
        if !env.iter().any(|x| x.name == e.name) {
            env.push(e.clone());
        }
    };
    push_env(
        &mut env,
        &EnvVar {
            name: ENV_IS_INJECTED.into(),
            value: Some("true".into()),
            value_from: None,
        },
    );

    // Shared from the pod's containers, but not from sidecars already in it (marked
    // `IS_INJECTED=true`), as OpenKruise.
    let sources = || apps.iter().filter(|a| !is_injected_sidecar(a));
    if sc.share_volumes() {
        let mut mounts = c.volume_mounts.take().unwrap_or_default();
        for app in sources() {
            for m in app.volume_mounts.iter().flatten() {
                if mounts.iter().any(|x| x.mount_path == m.mount_path) {
                    continue;
                }
                mounts.push(m.clone());
                for var in m
                    .sub_path_expr
                    .as_deref()
                    .map(subpath_vars)
                    .unwrap_or_default()
                {
                    if let Some(e) = app.env.iter().flatten().find(|e| e.name == var) {
                        push_env(&mut env, e);
                    }
                }
            }
        }
        c.volume_mounts = (!mounts.is_empty()).then_some(mounts);
    }
    if sc.share_volume_devices() {
        let mut devices = c.volume_devices.take().unwrap_or_default();
        for app in sources() {
            for d in app.volume_devices.iter().flatten() {
                if !devices.iter().any(|x| x.device_path == d.device_path) {
                    devices.push(d.clone());
                }
            }
        }
        c.volume_devices = (!devices.is_empty()).then_some(devices);
    }

    for t in &sc.transfer_env {
        let source = match (&t.source_container_name, &t.source_container_name_from) {
            (Some(n), _) if !n.is_empty() => Some(n.clone()),
            (_, Some(from)) => from
                .field_ref
                .as_ref()
                .and_then(|f| parse_field_path(&f.field_path))
                .and_then(|fp| resolve_field(pod, &fp)),
            _ => None,
        };
        let Some(app) = source.and_then(|s| apps.iter().find(|a| a.name == s)) else {
            continue;
        };
        let wanted: Vec<&str> = t
            .env_name
            .iter()
            .map(String::as_str)
            .chain(t.env_names.iter().map(String::as_str))
            .collect();
        for name in wanted {
            if let Some(e) = app.env.iter().flatten().find(|e| e.name == name) {
                push_env(&mut env, e);
            }
        }
    }
    c.env = Some(env);
    c
}

/// A container injected as a sidecar: its first `IS_INJECTED` env var has the value `true`
/// (OpenKruise's test).
fn is_injected_sidecar(c: &Container) -> bool {
    c.env
        .iter()
        .flatten()
        .find(|e| e.name == ENV_IS_INJECTED)
        .is_some_and(|e| e.value.as_deref() == Some("true"))
}

fn resolve_field(pod: &Pod, fp: &FieldPath) -> Option<String> {
    match fp {
        FieldPath::Label(k) => pod.metadata.labels.as_ref()?.get(k).cloned(),
        FieldPath::Annotation(k) => pod.metadata.annotations.as_ref()?.get(k).cloned(),
    }
}

/// Names of the `$(VAR)` references in a subPathExpr.
fn subpath_vars(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(start) = rest.find("$(") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    out
}

/// The one entry point for injecting a pod being created, shared by the webhook and the `inject`
/// command: pick the matching SidecarSets from the index and inject them.
pub fn for_pod(
    index: &crate::index::Index,
    pod: &Pod,
    ns_labels: &BTreeMap<String, String>,
    now: &str,
) -> Injection {
    for_pod_pinned(index, pod, ns_labels, now, &|_| None)
}

/// [`for_pod`], where `pinned` may replace a matched SidecarSet by the revision its
/// `injectionStrategy.revision` pins (see [`pinned_entry`]).
pub fn for_pod_pinned(
    index: &crate::index::Index,
    pod: &Pod,
    ns_labels: &BTreeMap<String, String>,
    now: &str,
    pinned: &dyn Fn(&Entry) -> Option<Entry>,
) -> Injection {
    for_pod_in(index, pod, ns_labels, now, pinned, true)
}

/// [`for_pod_pinned`] in a cluster that runs native sidecars or not (`native_sidecars`: its
/// version is 1.29 or later, see [`crate::api::version_runs_native_sidecars`]): where it does
/// not, the SidecarSets in native sidecar mode are left out
/// ([`SkipReason::NativeSidecarsUnsupported`]).
pub fn for_pod_in(
    index: &crate::index::Index,
    pod: &Pod,
    ns_labels: &BTreeMap<String, String>,
    now: &str,
    pinned: &dyn Fn(&Entry) -> Option<Entry>,
    native_sidecars: bool,
) -> Injection {
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let crate::index::Matching {
        inject: mut matched,
        paused,
        opted_out,
    } = index.matching_split(labels, ns_labels);
    let mut unsupported = Vec::new();
    if !native_sidecars {
        (unsupported, matched) = matched.into_iter().partition(|e| e.ss.native_sidecars());
    }
    let mut injection = if matched
        .iter()
        .all(|e| e.ss.spec.injection_strategy.revision.is_none())
    {
        inject(pod, &matched, now)
    } else {
        let owned: Vec<Entry> = matched
            .iter()
            .map(|e| pinned(e).unwrap_or_else(|| (*e).clone()))
            .collect();
        inject(pod, &owned.iter().collect::<Vec<_>>(), now)
    };
    if (!paused.is_empty() || !opted_out.is_empty() || !unsupported.is_empty())
        && pod_is_active(pod)
    {
        let recorded =
            crate::api::injected_list(pod.metadata.annotations.as_ref().unwrap_or(&empty));
        let new = |name: &str| !recorded.contains(name);
        injection.skipped.extend(
            paused
                .iter()
                .filter(|e| new(e.ss.name()))
                .map(|e| paused_skip(e.ss.name())),
        );
        injection.skipped.extend(
            opted_out
                .iter()
                .filter(|(e, _)| new(e.ss.name()))
                .map(|(e, by)| opted_out_skip(e.ss.name(), by)),
        );
        injection.skipped.extend(
            unsupported
                .iter()
                .filter(|e| new(e.ss.name()))
                .map(|e| native_unsupported_skip(e.ss.name())),
        );
        injection
            .skipped
            .sort_by(|a, b| a.sidecarset.cmp(&b.sidecarset));
    }
    injection
}

/// The SidecarSet as a recorded revision made it: the revision's `spec` (containers, init
/// containers, volumes, image pull secrets, patchPodMetadata) over the current object, the
/// revision's name recorded in the pods' hash annotation, and the revision's hashes: those in
/// the revision's `annotations` (copied from the SidecarSet when the revision was made), or
/// computed from the restored spec when the revision has none (as OpenKruise).
pub fn pinned_entry(
    current: &Entry,
    revision_name: &str,
    data: &Value,
    annotations: &BTreeMap<String, String>,
) -> Option<Entry> {
    let spec = data.get("spec")?;
    let mut ss = (*current.ss).clone();
    let take = |k: &str| {
        spec.get(k)
            .filter(|v| !v.is_null())
            .cloned()
            .unwrap_or(Value::Array(vec![]))
    };
    ss.spec.containers = serde_json::from_value(take("containers")).ok()?;
    ss.spec.init_containers = serde_json::from_value(take("initContainers")).ok()?;
    ss.spec.volumes = serde_json::from_value(take("volumes")).ok()?;
    ss.spec.image_pull_secrets = serde_json::from_value(take("imagePullSecrets")).ok()?;
    ss.spec.patch_pod_metadata = serde_json::from_value(take("patchPodMetadata")).ok()?;
    let ann = ss.metadata.annotations.get_or_insert_with(Default::default);
    for key in [ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE] {
        match annotations.get(key).filter(|v| !v.is_empty()) {
            Some(v) => ann.insert(key.to_string(), v.clone()),
            None => ann.remove(key),
        };
    }
    let generation = ss.metadata.generation;
    let status = ss.status.get_or_insert_with(Default::default);
    status.latest_revision = Some(revision_name.to_string());
    status.observed_generation = generation;
    Entry::new(std::sync::Arc::new(ss)).ok()
}

/// On a pod UPDATE: never adds containers; keeps the injection annotations truthful by putting
/// back the ones an update dropped while the injected sidecars are still in the pod.
pub fn on_update(old: &Pod, new: &Pod) -> Patch {
    let old_ann = old.metadata.annotations.clone().unwrap_or_default();
    let new_ann = new.metadata.annotations.clone().unwrap_or_default();
    let names: BTreeSet<&str> = new
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .map(|c| c.name.as_str())
        .collect();
    let still_injected = old_ann
        .get(ANNOTATION_HASH)
        .and_then(|v| parse_hash_annotation(v))
        .is_some_and(|m| {
            m.values().all(|e| {
                e.sidecars().iter().all(|n| {
                    // A hot-upgrade sidecar is in the pod as its pair.
                    let (one, two) = crate::api::hot_upgrade_names(n);
                    names.contains(n.as_str())
                        || (names.contains(one.as_str()) && names.contains(two.as_str()))
                })
            })
        });
    let mut wanted = new_ann.clone();
    if still_injected {
        for key in [
            ANNOTATION_HASH,
            ANNOTATION_HASH_WITHOUT_IMAGE,
            ANNOTATION_INJECTED_LIST,
        ] {
            if let (Some(v), false) = (old_ann.get(key), new_ann.contains_key(key)) {
                wanted.insert(key.to_string(), v.clone());
            }
        }
    }
    let mut ops = Vec::new();
    annotations::annotation_ops(
        new.metadata.annotations.is_some(),
        &new_ann,
        &wanted,
        &mut ops,
    );
    Patch(ops)
}

/// Applies a patch to a pod as JSON (what the API server does with the webhook's answer).
pub fn apply(pod: &mut Value, patch: &Patch) -> Result<(), json_patch::PatchError> {
    json_patch::patch(pod, &patch.0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_skip_reason_is_listed_once_in_its_place() {
        for (i, r) in super::SkipReason::ALL.iter().enumerate() {
            assert_eq!(r.position(), i, "{r:?}");
        }
    }

    use super::*;

    /// Found by the fuzz properties (tests/all/properties.rs): a pod sent with no spec, or with no
    /// containers, got a patch adding at /spec/containers/0, which does not apply.
    #[test]
    fn the_patch_applies_to_a_pod_without_spec_or_containers() {
        let ss: SidecarSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "s"},
            "spec": {"selector": {"matchLabels": {"app": "a"}},
                     "containers": [{"name": "proxy", "image": "p:1"}, {"name": "log", "image": "l:1", "podInjectPolicy": "AfterAppContainer"}],
                     "initContainers": [{"name": "init", "image": "i:1"}]}}))
        .unwrap();
        let (index, errs) = crate::index::Index::from_sidecarsets([ss]);
        assert!(errs.is_empty());
        let ns = crate::index::namespace_labels("ns", &BTreeMap::new());
        let meta = serde_json::json!({"name": "p", "namespace": "ns", "labels": {"app": "a"}});
        for raw in [
            serde_json::json!({"metadata": meta}),
            serde_json::json!({"metadata": meta, "spec": {}}),
            serde_json::json!({"metadata": meta, "spec": {"containers": []}}),
            serde_json::json!({"metadata": meta, "spec": {"containers": null}}),
        ] {
            let pod: Pod = serde_json::from_value(raw.clone()).unwrap();
            let inj = for_pod(&index, &pod, &ns, "t");
            let mut out = raw.clone();
            apply(&mut out, &inj.patch()).unwrap_or_else(|e| panic!("{raw}: {e}"));
            let names = |list: &str| -> Vec<String> {
                out["spec"][list]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| c["name"].as_str().unwrap().to_string())
                    .collect()
            };
            assert_eq!(names("containers"), ["proxy", "log"], "{raw}");
            assert_eq!(names("initContainers"), ["init"], "{raw}");
        }
    }

    /// A HotUpgrade sidecar is injected as OpenKruise's pair (the recorded golden case is in
    /// tests/fixtures/kruise-1.9): `-1` working, `-2` on the empty image, the version env vars
    /// last, the version annotations, and the working container added to the pod's map.
    #[test]
    fn a_hot_upgrade_sidecar_is_injected_as_a_pair() {
        let ss: SidecarSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "s"},
            "spec": {"selector": {"matchLabels": {"app": "a"}},
                     "containers": [
                        {"name": "proxy", "image": "p:1", "env": [{"name": "A", "value": "1"}],
                         "podInjectPolicy": "AfterAppContainer",
                         "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"}},
                        {"name": "log", "image": "l:1"}]}}))
        .unwrap();
        let (index, errs) = crate::index::Index::from_sidecarsets([ss]);
        assert!(errs.is_empty());
        let ns = crate::index::namespace_labels("ns", &BTreeMap::new());
        // (the pod's own working map, the map after injection)
        let cases = [
            (None, r#"{"proxy":"proxy-1"}"#),
            (
                Some(r#"{"mesh":"mesh-2"}"#),
                r#"{"mesh":"mesh-2","proxy":"proxy-1"}"#,
            ),
        ];
        for (before, after) in cases {
            let mut meta =
                serde_json::json!({"name": "p", "namespace": "ns", "labels": {"app": "a"}});
            if let Some(b) = before {
                meta["annotations"] =
                    serde_json::json!({"kruise.io/sidecarset-working-hotupgrade-container": b});
            }
            let raw = serde_json::json!({"metadata": meta, "spec": {"containers": [{"name": "main", "image": "m:1"}]}});
            let pod: Pod = serde_json::from_value(raw.clone()).unwrap();
            let inj = for_pod(&index, &pod, &ns, "t");
            let mut out = raw.clone();
            apply(&mut out, &inj.patch()).unwrap();
            let c = &out["spec"]["containers"];
            let names: Vec<&str> = c
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap())
                .collect();
            assert_eq!(names, ["log", "main", "proxy-1", "proxy-2"]);
            assert_eq!(c[2]["image"], "p:1");
            assert_eq!(c[3]["image"], "empty:1");
            for (i, n) in [(2, "proxy-1"), (3, "proxy-2")] {
                assert_eq!(
                    c[i]["env"],
                    serde_json::json!([
                        {"name": "A", "value": "1"},
                        {"name": "IS_INJECTED", "value": "true"},
                        {"name": "SIDECARSET_VERSION", "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['version.sidecarset.kruise.io/{n}']")}}},
                        {"name": "SIDECARSET_VERSION_ALT", "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['versionalt.sidecarset.kruise.io/{n}']")}}},
                    ]),
                    "{n}"
                );
            }
            let a = &out["metadata"]["annotations"];
            assert_eq!(
                a["kruise.io/sidecarset-working-hotupgrade-container"],
                after
            );
            assert_eq!(a["version.sidecarset.kruise.io/proxy-1"], "1");
            assert_eq!(a["versionalt.sidecarset.kruise.io/proxy-1"], "0");
            assert_eq!(a["version.sidecarset.kruise.io/proxy-2"], "0");
            assert_eq!(a["versionalt.sidecarset.kruise.io/proxy-2"], "1");
            // The hash annotation lists the sidecar by its own name, as OpenKruise does.
            let hash: serde_json::Value =
                serde_json::from_str(a["kruise.io/sidecarset-hash"].as_str().unwrap()).unwrap();
            assert_eq!(
                hash["s"]["sidecarList"],
                serde_json::json!(["log", "proxy"])
            );
            // A pod update keeps the record: the pair stands for `proxy`.
            let injected: Pod = serde_json::from_value(out.clone()).unwrap();
            let mut stripped = injected.clone();
            stripped
                .metadata
                .annotations
                .as_mut()
                .unwrap()
                .remove(ANNOTATION_HASH);
            let fix = on_update(&injected, &stripped);
            assert_eq!(fix.0.len(), 1, "{fix:?}");
        }
    }

    #[test]
    fn field_paths() {
        assert_eq!(
            parse_field_path("metadata.labels['app']"),
            Some(FieldPath::Label("app".into()))
        );
        assert_eq!(
            parse_field_path("metadata.annotations['x.io/c']"),
            Some(FieldPath::Annotation("x.io/c".into()))
        );
        // Refused as OpenKruise refuses them: unsubscripted (metadata.name too), quoted with
        // `"`, or a key that is not a qualified name.
        for bad in [
            "metadata.name",
            "metadata.labels[\"a\"]",
            "metadata.annotations['Bad Key']",
            "metadata.labels",
            "metadata.labels['']",
            "spec.nodeName",
            "metadata.labels[app]",
        ] {
            assert_eq!(parse_field_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn subpath_expr_vars() {
        assert_eq!(subpath_vars("$(POD)/logs/$(NS)"), vec!["POD", "NS"]);
        assert!(subpath_vars("plain").is_empty());
        assert!(subpath_vars("$(BROKEN").is_empty());
    }
}
