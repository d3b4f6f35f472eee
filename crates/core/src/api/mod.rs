//! The SidecarSet API (`apps.kruise.io/v1alpha1` and `v1beta1`), conversion between them, its
//! defaults, validation, hashing and the annotation keys shared with OpenKruise. Pure: no I/O.
//!
//! The operator works on the v1alpha1 shape ([`SidecarSet`]) internally: it is a superset of
//! v1beta1 (which has no `spec.namespace` and keeps the custom version in `spec.customVersion`
//! rather than a label). [`v1beta1::SidecarSet`] is what is stored and watched.

pub mod convert;
mod defaults;
mod field_path;
mod gojson;
mod hash;
mod hot_upgrade;
mod native;
mod opt_out;
pub mod quantity;
pub mod resize;
pub mod resources_policy;
mod selector;
mod update_priority;
pub mod v1beta1;
mod validate;

pub use field_path::{FieldPath, check_field_path, parse_field_path};
pub use hot_upgrade::{
    ANNOTATION_WORKING_HOT_UPGRADE, ENV_SIDECARSET_VERSION, ENV_SIDECARSET_VERSION_ALT,
    hot_upgrade_names, is_hot_upgrade_annotation, version_alt_annotation, version_annotation,
    working_and_idle, working_containers,
};

/// Label of a ControllerRevision naming its SidecarSet (as OpenKruise).
pub const LABEL_SIDECARSET_NAME: &str = "kruise.io/sidecarset-name";
/// Label of a ControllerRevision with the SidecarSet's custom version (OpenKruise's
/// `apps.kruise.io/sidecarset-custom-version` label on the SidecarSet), for
/// `injectionStrategy.revision.customVersion`.
pub const LABEL_REVISION_CUSTOM_VERSION: &str = convert::LABEL_CUSTOM_VERSION;
/// Label of a ControllerRevision with the hash its name ends with (Kubernetes' own label).
pub const LABEL_HASH: &str = "controller.kubernetes.io/hash";
pub use defaults::{default_container, default_pod_requests, default_sidecarset};
pub use hash::{
    hash_input, revision_data, safe_encode, sidecarset_hash, sidecarset_hash_without_image,
    sidecarset_hashes_as_submitted,
};
pub use native::{
    ANNOTATION_NATIVE_SIDECARS, NATIVE_SIDECARS_MIN_MINOR, NATIVE_SIDECARS_OFF, NATIVE_SIDECARS_ON,
    kubelet_runs_native_sidecars, native_sidecars, version_runs_native_sidecars,
};
pub use opt_out::{
    ANNOTATION_OPT_OUT, INJECT_DISABLED, LABEL_INJECT, LABEL_INJECT_ONE_PREFIX, OPT_OUT_ALLOWED,
    OptOut, opt_out_allowed, opt_out_label, opt_out_label_of,
};
pub use resize::{
    ANNOTATION_RESIZE_IN_PLACE, RESIZE_IN_PLACE_OFF, RESIZE_IN_PLACE_ON, resize_in_place,
};
pub use resources_policy::{
    DEFAULT_TARGET_CONTAINERS_NAME_REGEX, ResourceExprs, ResourcesExpr, ResourcesPolicy,
    TargetContainersMode,
};
pub use selector::{
    CompiledSelector, Op, Scope, SelectorError, StrMap, is_qualified_name, selectors_overlap,
};
pub use update_priority::{
    UpdatePriorityOrderTerm, UpdatePriorityStrategy, UpdatePriorityWeightTerm, UpdateScatterTerm,
};
pub use validate::{FieldError, ValidationErrors, conflicts, validate, validate_update};

use k8s_openapi::api::core::v1::{Container, LocalObjectReference, ObjectFieldSelector, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// API group of SidecarSet (the same as OpenKruise's).
pub const GROUP: &str = "apps.kruise.io";
/// The v1alpha1 API version (the shape the operator works on internally).
pub const VERSION: &str = "v1alpha1";
/// The storage version, as in OpenKruise 1.9.
pub const STORAGE_VERSION: &str = v1beta1::VERSION;

/// Pod annotation: per SidecarSet, the hash of the sidecars the pod runs (JSON, OpenKruise shape).
/// On a SidecarSet (written by the mutating webhook after defaulting): its current hash.
pub const ANNOTATION_HASH: &str = "kruise.io/sidecarset-hash";
/// Pod annotation: the same as [`ANNOTATION_HASH`] with images left out of the hash.
pub const ANNOTATION_HASH_WITHOUT_IMAGE: &str = "kruise.io/sidecarset-hash-without-image";
/// Pod annotation: sorted, comma-separated names of the SidecarSets injected into the pod.
pub const ANNOTATION_INJECTED_LIST: &str = "kruise.io/sidecarset-injected-list";
/// Env var set on every injected container.
pub const ENV_IS_INJECTED: &str = "IS_INJECTED";
/// Namespace label that the API server sets on every namespace.
pub const LABEL_NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

/// SidecarSet describes sidecar containers, init containers and volumes that are injected into
/// every pod matching `selector` (and `namespace` / `namespaceSelector`) when the pod is created,
/// and how running pods are upgraded in place when the sidecars' images change.
// The repeated `printcolumn(type_ = ...)` keys are separate columns, not duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "SidecarSet",
    plural = "sidecarsets",
    singular = "sidecarset",
    status = "SidecarSetStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "SidecarSet injects sidecar containers into matching pods and upgrades them in place.",
    printcolumn(
        name = "MATCHED",
        type_ = "integer",
        description = "Number of pods injected by this SidecarSet",
        json_path = ".status.matchedPods"
    ),
    printcolumn(
        name = "UPDATED",
        type_ = "integer",
        description = "Number of matched pods running the current sidecars",
        json_path = ".status.updatedPods"
    ),
    printcolumn(
        name = "READY",
        type_ = "integer",
        description = "Number of matched pods that are ready",
        json_path = ".status.readyPods"
    ),
    printcolumn(
        name = "HEALTHY",
        type_ = "string",
        description = "The Ready condition: every matched pod runs the current sidecars and is ready",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "STATUS",
        type_ = "string",
        description = "Why the SidecarSet is (not) ready: the Ready condition's reason",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "MESSAGE",
        type_ = "string",
        priority = "1",
        description = "The Ready condition's message",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetSpec {
    /// Label selector of the pods to inject into. Required and must not be empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Only inject into pods of this namespace. Mutually exclusive with namespaceSelector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// Only inject into pods of namespaces whose labels match. Absent means every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// Init containers to inject at pod creation, sorted by name and placed after the pod's own.
    /// An init container with `restartPolicy: Always` is a native sidecar.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<SidecarContainer>,

    /// Sidecar containers to inject.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<SidecarContainer>,

    /// Volumes the sidecars may mount. Only the volumes an injected container mounts are added
    /// to a pod; a pod volume of the same name wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,

    /// How running pods are upgraded when the sidecars change.
    #[serde(default)]
    pub update_strategy: SidecarSetUpdateStrategy,

    /// How new pods are injected.
    #[serde(default)]
    pub injection_strategy: SidecarSetInjectionStrategy,

    /// Image pull secrets merged into the pod at creation (no duplicates).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// Number of ControllerRevisions kept for this SidecarSet. Defaults to 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,

    /// Annotations to set on injected pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patch_pod_metadata: Vec<SidecarSetPatchPodMetadata>,
}

/// A container to inject: a full Kubernetes container plus SidecarSet injection settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarContainer {
    #[serde(flatten)]
    pub container: Container,

    /// Where the container goes: before (default for containers) or after (default for init
    /// containers) the pod's own containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_inject_policy: Option<PodInjectPolicy>,

    /// How the sidecar is upgraded in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_strategy: Option<SidecarContainerUpgradeStrategy>,

    /// When enabled, the volumeMounts of the pod's app containers are copied to the sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_volume_policy: Option<ShareVolumePolicy>,

    /// When enabled, the volumeDevices of the pod's app containers are copied to the sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_volume_device_policy: Option<ShareVolumePolicy>,

    /// Env vars copied from an app container of the pod into the sidecar.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transfer_env: Vec<TransferEnvVar>,

    /// Computes the sidecar's resources at pod creation from the pod's containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_policy: Option<ResourcesPolicy>,
}

impl SidecarContainer {
    pub fn name(&self) -> &str {
        &self.container.name
    }

    /// An init container with `restartPolicy: Always` (a Kubernetes native sidecar).
    pub fn is_native_sidecar(&self) -> bool {
        self.container.restart_policy.as_deref() == Some("Always")
    }

    pub fn share_volumes(&self) -> bool {
        Self::enabled(&self.share_volume_policy)
    }

    pub fn share_volume_devices(&self) -> bool {
        Self::enabled(&self.share_volume_device_policy)
    }

    /// A policy shares only when its type is `enabled`: absent, `{}` and `disabled` do not.
    fn enabled(policy: &Option<ShareVolumePolicy>) -> bool {
        matches!(
            policy,
            Some(ShareVolumePolicy {
                type_: Some(ShareVolumePolicyType::Enabled)
            })
        )
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PodInjectPolicy {
    BeforeAppContainer,
    AfterAppContainer,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarContainerUpgradeStrategy {
    /// ColdUpgrade (default) restarts the sidecar with the new image. HotUpgrade (containers
    /// only) injects the sidecar as two containers, `<name>-1` and `<name>-2`: an upgrade starts
    /// the new image in the idle one, then resets the old one to `hotUpgradeEmptyImage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_type: Option<UpgradeType>,
    /// Image of the idle container of a HotUpgrade pair (required with HotUpgrade). It runs the
    /// sidecar's command, args and probes, so it must accept them while doing nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_upgrade_empty_image: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UpgradeType {
    ColdUpgrade,
    HotUpgrade,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ShareVolumePolicy {
    /// `enabled` or `disabled`. Optional, as in OpenKruise: `shareVolumePolicy: {}` is defaulted
    /// to `disabled`; `shareVolumeDevicePolicy: {}` is kept as it is and shares nothing.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<ShareVolumePolicyType>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ShareVolumePolicyType {
    Enabled,
    Disabled,
}

/// Copies env vars from an app container to the sidecar.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransferEnvVar {
    /// Name of the app container to copy from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_container_name: Option<String>,
    /// Take the source container's name from the pod's metadata (name, a label or an annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_container_name_from: Option<SourceContainerNameSource>,
    /// One env var to copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_name: Option<String>,
    /// Several env vars to copy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_names: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceContainerNameSource {
    /// `metadata.name`, `metadata.labels['KEY']` or `metadata.annotations['KEY']`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetUpdateStrategy {
    /// RollingUpdate (default) upgrades running pods in place; NotUpdate only injects new pods.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<UpdateStrategyType>,
    /// Stops in-place upgrades; injection goes on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Only upgrade the pods matching this selector. Not together with a non-zero partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Number or percentage of matched pods kept on the old sidecars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<IntOrString>,
    /// Number or percentage of matched pods that may be unavailable during the upgrade.
    /// Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Which pods are upgraded first: by label weights (weightPriority) or by the number in a
    /// label's value (orderPriority), not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,
    /// Spreads pods with the given labels over the rollout (applied after priorityStrategy).
    /// One term is easiest to reason about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scatter_strategy: Vec<UpdateScatterTerm>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UpdateStrategyType {
    RollingUpdate,
    NotUpdate,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetInjectionStrategy {
    /// Stop injecting into new pods.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Inject a recorded revision instead of the current spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<SidecarSetInjectRevision>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetInjectRevision {
    /// The `apps.kruise.io/sidecarset-custom-version` label of the revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_version: Option<String>,
    /// The name of the ControllerRevision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_name: Option<String>,
    /// Always (default) or Partial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<InjectRevisionPolicy>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum InjectRevisionPolicy {
    Always,
    Partial,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetPatchPodMetadata {
    /// Annotations to set on the pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Retain (default) keeps a pod's existing value; Overwrite replaces it; MergePatchJson
    /// merges the JSON value into the pod's (RFC 7386).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_policy: Option<PatchPolicy>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PatchPolicy {
    Retain,
    Overwrite,
    MergePatchJson,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetStatus {
    /// The generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Active pods that match and were injected by this SidecarSet.
    #[serde(default)]
    pub matched_pods: i32,
    /// Matched pods running the current sidecars.
    #[serde(default)]
    pub updated_pods: i32,
    /// Matched pods that are ready.
    #[serde(default)]
    pub ready_pods: i32,
    /// Matched pods that are updated and ready.
    #[serde(default)]
    pub updated_ready_pods: i32,
    /// Name of the current ControllerRevision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_revision: Option<String>,
    /// Count of hash collisions of the ControllerRevision name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// Active pods this SidecarSet selects that run without its sidecars: created while the
    /// webhook was unreachable (`failurePolicy: Ignore`), or before the operator or this
    /// SidecarSet existed. Recreate them to inject them (the operator does it, through the
    /// Eviction API, with `--evict-pods-without-sidecars`). Not in OpenKruise's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_without_sidecars: Option<i32>,
    /// Standard conditions, for `kubectl wait`, Argo CD, Flux and kstatus: `Ready` (every
    /// matched pod runs the current sidecars and is ready), `Progressing` and `Reconciling` (a
    /// rollout is moving), `Stalled` (it cannot move without a change: paused, NotUpdate, pods
    /// not upgradable in place, an image that cannot be pulled, an invalid strategy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

impl SidecarSet {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// The names recorded in the hash annotation's `sidecarList` (the sidecars that run and can
    /// be upgraded): containers and native-sidecar init containers, sorted by name (OpenKruise
    /// builds the list from a set).
    pub fn sidecar_list(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .spec
            .containers
            .iter()
            .chain(
                self.spec
                    .init_containers
                    .iter()
                    .filter(|c| c.is_native_sidecar()),
            )
            .map(|c| c.name().to_string())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Every sidecar name this SidecarSet injects: containers, then init containers.
    pub fn sidecar_names(&self) -> Vec<String> {
        self.spec
            .containers
            .iter()
            .chain(self.spec.init_containers.iter())
            .map(|c| c.container.name.clone())
            .collect()
    }
}

/// One entry of the pod annotation `kruise.io/sidecarset-hash` (and, without
/// `controllerRevision`, of `kruise.io/sidecarset-hash-without-image`), as OpenKruise writes it.
///
/// An entry converted from the older `{"name": "hash"}` shape has no time and no sidecar list:
/// both are written `null`, as OpenKruise writes them (its time type cannot read `""`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetUpgradeSpec {
    /// RFC 3339; empty: none (written `null`).
    #[serde(default, with = "null_if_empty")]
    pub update_timestamp: String,
    #[serde(rename = "hash")]
    pub hash: String,
    #[serde(default)]
    pub sidecar_set_name: String,
    /// `None` (written `null`) only for an entry converted from the older shape.
    #[serde(default)]
    pub sidecar_list: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub controller_revision: String,
}

impl SidecarSetUpgradeSpec {
    /// The names in `sidecarList` (none when it is `null`).
    pub fn sidecars(&self) -> &[String] {
        self.sidecar_list.as_deref().unwrap_or_default()
    }
}

/// A Go `metav1.Time`: the zero time is `null` in JSON, and `null` reads as the zero time.
mod null_if_empty {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
        if v.is_empty() {
            s.serialize_none()
        } else {
            s.serialize_str(v)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
    }
}

/// The SidecarSets named in a pod's `kruise.io/sidecarset-injected-list` annotation.
pub fn injected_list(annotations: &(impl StrMap + ?Sized)) -> std::collections::BTreeSet<String> {
    annotations
        .get_str(ANNOTATION_INJECTED_LIST)
        .map(|l| {
            l.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// Parses a pod's hash annotation. Accepts OpenKruise's current JSON object shape and its older
/// `{"name": "hash"}` shape. Returns `None` when the value is not JSON of either shape.
pub fn parse_hash_annotation(value: &str) -> Option<BTreeMap<String, SidecarSetUpgradeSpec>> {
    if let Ok(m) = serde_json::from_str::<BTreeMap<String, SidecarSetUpgradeSpec>>(value) {
        return Some(m);
    }
    let old = serde_json::from_str::<BTreeMap<String, String>>(value).ok()?;
    Some(
        old.into_iter()
            .map(|(name, hash)| {
                let spec = SidecarSetUpgradeSpec {
                    update_timestamp: String::new(),
                    hash,
                    sidecar_set_name: name.clone(),
                    sidecar_list: None,
                    controller_revision: String::new(),
                };
                (name, spec)
            })
            .collect(),
    )
}

/// The SidecarSet CRD. The embedded Kubernetes types (containers, volumes) keep the description
/// of each of their fields but not of the fields nested below, which keeps the CRD small enough
/// for client-side `kubectl apply` (its last-applied annotation is capped at 256 KiB) while
/// `kubectl explain sidecarset.spec.containers` still helps.
///
/// Both versions are served and v1beta1 is stored (as OpenKruise 1.9 does, so the CRD installs
/// over OpenKruise's). Conversion goes to the operator's `/convert` through the Service
/// `sidecarset-operator-webhook` in `sidecarset-system`; at run time the operator rewrites the
/// client configuration to its own Service (or URL) and caBundle (see [`conversion_patch`]).
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube_core::CustomResourceExt;
    let alpha = SidecarSet::crd();
    let crd = match kube_core::crd::merge_crds(
        vec![alpha.clone(), v1beta1::SidecarSet::crd()],
        STORAGE_VERSION,
    ) {
        Ok(c) => c,
        Err(_) => alpha,
    };
    let Ok(mut v) = serde_json::to_value(&crd) else {
        return crd;
    };
    v["spec"]["conversion"] = conversion_spec(&CONVERSION_DEFAULT_SERVICE, None);
    if let Some(versions) = v
        .pointer_mut("/spec/versions")
        .and_then(|x| x.as_array_mut())
    {
        for ver in versions {
            for list in ["containers", "initContainers", "volumes"] {
                let path = format!(
                    "/schema/openAPIV3Schema/properties/spec/properties/{list}/items/properties"
                );
                if let Some(props) = ver.pointer_mut(&path).and_then(|p| p.as_object_mut()) {
                    for prop in props.values_mut() {
                        if let Some(obj) = prop.as_object_mut() {
                            for (k, child) in obj.iter_mut() {
                                if k != "description" {
                                    strip_descriptions(child);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    serde_json::from_value(v).unwrap_or(crd)
}

/// Where the API server sends ConversionReviews: a Service in the cluster, or a URL (a local
/// process).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConversionTarget {
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
    Url(String),
}

/// The default conversion Service, as the chart names it with its default values.
pub static CONVERSION_DEFAULT_SERVICE: std::sync::LazyLock<ConversionTarget> =
    std::sync::LazyLock::new(|| ConversionTarget::Service {
        namespace: "sidecarset-system".into(),
        name: "sidecarset-operator-webhook".into(),
        port: 443,
    });

/// Path of the conversion webhook.
pub const CONVERSION_PATH: &str = "/convert";

/// The CRD's `spec.conversion`: webhook conversion to `target`, with `ca_bundle` (PEM) when given.
pub fn conversion_spec(target: &ConversionTarget, ca_bundle: Option<&str>) -> serde_json::Value {
    use base64::Engine as _;
    let mut client = match target {
        ConversionTarget::Service {
            namespace,
            name,
            port,
        } => serde_json::json!({"service": {"namespace": namespace, "name": name,
                                            "path": CONVERSION_PATH, "port": port}}),
        ConversionTarget::Url(u) => serde_json::json!({"url": format!(
            "{}{CONVERSION_PATH}",
            u.trim_end_matches('/')
        )}),
    };
    if let Some(pem) = ca_bundle {
        client["caBundle"] = base64::engine::general_purpose::STANDARD
            .encode(pem.as_bytes())
            .into();
    }
    serde_json::json!({"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1"], "clientConfig": client}})
}

/// The server-side apply patch with which the operator owns the CRD's conversion settings.
pub fn conversion_patch(target: &ConversionTarget, ca_bundle: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {"conversion": conversion_spec(target, ca_bundle)},
    })
}

/// Name of the SidecarSet CRD.
pub const CRD_NAME: &str = "sidecarsets.apps.kruise.io";

fn strip_descriptions(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            // A property literally named "description" is a schema, not a description.
            if m.get("description").is_some_and(|d| d.is_string()) {
                m.remove("description");
            }
            m.values_mut().for_each(strip_descriptions);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

/// The CRD of SidecarSet as YAML, as `sidecarset-operator crd` prints it.
pub fn crd_yaml() -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(&crd())
}
