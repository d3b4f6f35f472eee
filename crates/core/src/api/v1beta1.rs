//! `apps.kruise.io/v1beta1` SidecarSet, the storage version (as in OpenKruise 1.9).
//!
//! It differs from v1alpha1 in two places only: there is no `spec.namespace` (a namespace is a
//! `namespaceSelector` on `kubernetes.io/metadata.name`), and the custom version is
//! `spec.customVersion` instead of the label `apps.kruise.io/sidecarset-custom-version`. Every
//! other type is shared with v1alpha1, so a field added to one version is in both. The operator
//! works on the v1alpha1 shape internally (a superset); [`super::convert`] moves objects between
//! the two without losing anything.

use super::{
    SidecarContainer, SidecarSetInjectionStrategy, SidecarSetPatchPodMetadata, SidecarSetStatus,
    SidecarSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{LocalObjectReference, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API version of this module's SidecarSet.
pub const VERSION: &str = "v1beta1";

/// SidecarSet describes sidecar containers, init containers and volumes that are injected into
/// every pod matching `selector` (and `namespaceSelector`) when the pod is created, and how
/// running pods are upgraded in place when the sidecars' images change.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "apps.kruise.io",
    version = "v1beta1",
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

    /// Only inject into pods of namespaces whose labels match. Absent means every namespace;
    /// one namespace is `matchLabels: {kubernetes.io/metadata.name: NAME}`.
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

    /// Recorded on the SidecarSet's ControllerRevisions as the label
    /// `apps.kruise.io/sidecarset-custom-version`, so that `injectionStrategy.revision
    /// .customVersion` can pin it. (In v1alpha1 this is that label on the SidecarSet.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_version: Option<String>,
}
