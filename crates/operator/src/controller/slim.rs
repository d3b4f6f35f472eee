//! The controller's pod cache holds [`SlimPod`]s: what it reads of a pod, deserialized straight
//! from the watch (every other field is skipped by the decoder). A k8s-openapi `Pod` costs about
//! 12 KB in memory even with its lists trimmed, as its structs are large (a `Container` alone is
//! 2.3 KB); a slim pod is a fraction of that (see `make bench-controller`). The pure rollout code
//! takes a `Pod`: [`SlimPod::to_pod`] builds one for a pod when it is looked at.
//!
//! The strings that pods repeat (container names, images, image IDs, restart policies, phases,
//! node names, waiting reasons) are interned: every pod that runs an image shares one copy of its
//! name and digest (`internment::ArcIntern`, freed with the last pod that holds it).
//!
//! Labels and the kept annotations are held out of the pod's `ObjectMeta`, as [`Pairs`]: a
//! sorted boxed slice of interned keys and values (a `BTreeMap<String, String>` allocates a node
//! of about 540 bytes even for one entry, and a string for every key and value). The pods of one
//! workload repeat their labels, and the pods injected by the same SidecarSets repeat their hash
//! annotations, so most of their strings are shared. A `SlimPod` always has
//! `metadata.labels` and `metadata.annotations` unset: read them with [`SlimPod::labels`] and
//! [`SlimPod::annotations`] (which shadow `ResourceExt`'s of the same names).

use internment::ArcIntern;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodSpec,
    PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use sidecarset_core::api::StrMap;
use sidecarset_core::rollout;
use std::collections::BTreeMap;

/// An interned string (see the module's documentation).
pub type IStr = ArcIntern<str>;

fn owned(s: &IStr) -> String {
    String::from(&**s)
}

/// Labels or annotations of a cached pod: pairs sorted by key, without duplicates, keys and
/// values interned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairs(Box<[(IStr, IStr)]>);

impl Pairs {
    /// From a map (already sorted and without duplicates).
    pub fn from_map(m: BTreeMap<String, String>) -> Self {
        Pairs(
            m.into_iter()
                .map(|(k, v)| (IStr::from(k.as_str()), IStr::from(v.as_str())))
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Keeps the pairs whose key `keep` accepts.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        if self.0.iter().all(|(k, _)| keep(k)) {
            return;
        }
        let kept: Vec<(IStr, IStr)> = std::mem::take(&mut self.0)
            .into_vec()
            .into_iter()
            .filter(|(k, _)| keep(k))
            .collect();
        self.0 = kept.into_boxed_slice();
    }

    /// As a map, `None` when empty (how `ObjectMeta` writes an absent field).
    pub fn to_map(&self) -> Option<BTreeMap<String, String>> {
        (!self.is_empty()).then(|| self.iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

impl StrMap for Pairs {
    fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
    fn pairs(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.iter()
    }
}

/// A pod as the controller keeps it. It reads and writes a pod's JSON, with the labels and
/// annotations in `metadata` as usual; in memory they are held in [`Pairs`] (see the module's
/// documentation).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimPod {
    /// Without labels and annotations.
    pub metadata: ObjectMeta,
    labels: Pairs,
    annotations: Pairs,
    pub spec: Option<SlimSpec>,
    pub status: Option<SlimStatus>,
}

/// A pod's JSON as the decoder reads it.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<SlimSpec>,
    #[serde(default)]
    status: Option<SlimStatus>,
}

/// A pod's JSON as it is written back.
#[derive(Serialize)]
struct WireOut<'a> {
    metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<&'a SlimSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a SlimStatus>,
}

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Wire {
            mut metadata,
            spec,
            status,
        } = Wire::deserialize(d)?;
        let labels = Pairs::from_map(metadata.labels.take().unwrap_or_default());
        let annotations = Pairs::from_map(metadata.annotations.take().unwrap_or_default());
        Ok(SlimPod {
            metadata,
            labels,
            annotations,
            spec,
            status,
        })
    }
}

impl Serialize for SlimPod {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        WireOut {
            metadata: self.full_metadata(),
            spec: self.spec.as_ref(),
            status: self.status.as_ref(),
        }
        .serialize(s)
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SlimSpec {
    #[serde(default)]
    pub containers: Vec<SlimContainer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<SlimContainer>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<IStr>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SlimContainer {
    pub name: IStr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<IStr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<IStr>,
    /// For in-place resize (the sidecars' and, for `resourcesPolicy`, the app's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Res>,
}

/// Resources (of a container's spec or status), kept as their interned JSON: the pods of a
/// workload share one copy.
#[derive(Clone, Debug, PartialEq)]
pub struct Res(IStr);

impl<'de> Deserialize<'de> for Res {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(Res(IStr::from(v.to_string().as_str())))
    }
}

impl Serialize for Res {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::from_str::<serde_json::Value>(&self.0)
            .unwrap_or_default()
            .serialize(s)
    }
}

impl Res {
    fn get(&self) -> Option<ResourceRequirements> {
        serde_json::from_str(&self.0).ok()
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SlimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<IStr>,
    /// Only `Ready` and `SidecarSetUpgradable` are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<SlimContainerStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_statuses: Option<Vec<SlimContainerStatus>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SlimContainerStatus {
    pub name: IStr,
    #[serde(default)]
    pub image: IStr,
    #[serde(default, rename = "imageID")]
    pub image_id: IStr,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub restart_count: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<bool>,
    /// Only `state.waiting.reason` is kept (an image that cannot be pulled stalls a rollout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<SlimContainerState>,
    /// What the kubelet runs the container with (in-place resize).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Res>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct SlimContainerState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<SlimWaiting>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct SlimWaiting {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<IStr>,
}

impl k8s_openapi::Resource for SlimPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for SlimPod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl SlimPod {
    /// Drops what the decoder kept but the controller never reads: managed fields, generateName,
    /// finalizers, owners other than the controller, annotations other than the injection and
    /// hot-upgrade ones, conditions other than Ready, SidecarSetUpgradable and the kubelet's resize ones.
    pub fn trim(&mut self) {
        let m = &mut self.metadata;
        m.managed_fields = None;
        m.generate_name = None;
        m.finalizers = None;
        m.self_link = None;
        // Of the owners, the controller (the missing-sidecar check reads its kind and uid).
        if let Some(o) = m.owner_references.as_mut() {
            o.retain(|o| o.controller == Some(true));
        }
        self.annotations.retain(|k| {
            k == sidecarset_core::api::ANNOTATION_HASH
                || k == sidecarset_core::api::ANNOTATION_HASH_WITHOUT_IMAGE
                || k == sidecarset_core::api::ANNOTATION_INJECTED_LIST
                || k == sidecarset_core::rollout::ANNOTATION_INPLACE_UPDATE_STATE
                || sidecarset_core::api::is_hot_upgrade_annotation(k)
        });
        if let Some(s) = self.status.as_mut() {
            for c in s
                .container_statuses
                .iter_mut()
                .chain(s.init_container_statuses.iter_mut())
                .flatten()
            {
                if c.state.as_ref().is_some_and(|s| s.waiting.is_none()) {
                    c.state = None;
                }
            }
        }
        if let Some(c) = self.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c.retain(|c| {
                matches!(
                    c.type_.as_str(),
                    "Ready"
                        | "SidecarSetUpgradable"
                        | rollout::resize::CONDITION_RESIZE_PENDING
                        | rollout::resize::CONDITION_RESIZE_IN_PROGRESS
                )
            });
            for c in c.iter_mut() {
                c.last_probe_time = None;
            }
        }
    }

    /// The pod's labels (`metadata.labels` is always unset).
    pub fn labels(&self) -> &Pairs {
        &self.labels
    }

    /// The pod's kept annotations (`metadata.annotations` is always unset).
    pub fn annotations(&self) -> &Pairs {
        &self.annotations
    }

    /// Replaces the pod's annotations (`metadata.annotations` is not read).
    pub fn set_annotations(&mut self, annotations: BTreeMap<String, String>) {
        self.annotations = Pairs::from_map(annotations);
    }

    /// The metadata with the labels and annotations put back.
    fn full_metadata(&self) -> ObjectMeta {
        ObjectMeta {
            labels: self.labels.to_map(),
            annotations: self.annotations.to_map(),
            ..self.metadata.clone()
        }
    }

    /// The pod as the rollout code reads it (only the fields kept here are set).
    pub fn to_pod(&self) -> Pod {
        let container = |c: &SlimContainer| Container {
            name: owned(&c.name),
            image: c.image.as_ref().map(owned),
            restart_policy: c.restart_policy.as_ref().map(owned),
            resources: c.resources.as_ref().and_then(Res::get),
            ..Default::default()
        };
        let status = |c: &SlimContainerStatus| ContainerStatus {
            name: owned(&c.name),
            image: owned(&c.image),
            image_id: owned(&c.image_id),
            ready: c.ready,
            restart_count: c.restart_count,
            started: c.started,
            state: c
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .map(|w| ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: w.reason.as_ref().map(owned),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            resources: c.resources.as_ref().and_then(Res::get),
            ..Default::default()
        };
        Pod {
            metadata: self.full_metadata(),
            spec: self.spec.as_ref().map(|s| PodSpec {
                containers: s.containers.iter().map(container).collect(),
                init_containers: s
                    .init_containers
                    .as_ref()
                    .map(|l| l.iter().map(container).collect()),
                node_name: s.node_name.as_ref().map(owned),
                ..Default::default()
            }),
            status: self.status.as_ref().map(|s| PodStatus {
                phase: s.phase.as_ref().map(owned),
                conditions: s.conditions.clone(),
                container_statuses: s
                    .container_statuses
                    .as_ref()
                    .map(|l| l.iter().map(status).collect()),
                init_container_statuses: s
                    .init_container_statuses
                    .as_ref()
                    .map(|l| l.iter().map(status).collect()),
                ..Default::default()
            }),
        }
    }

    /// Still running or pending, and not being deleted.
    pub fn is_active(&self) -> bool {
        let phase = self.status.as_ref().and_then(|s| s.phase.as_deref());
        self.metadata.deletion_timestamp.is_none()
            && !matches!(phase, Some("Succeeded") | Some("Failed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod as the API server sends it, with fields the controller does not read.
    fn full() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2026-11-30T10:00:00Z", "labels": {"app": "web"},
                "annotations": {"kruise.io/sidecarset-injected-list": "mesh", "other": "x"},
                "generateName": "web-", "finalizers": ["example.com/keep"], "selfLink": "/api/v1/namespaces/shop/pods/web-1",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r", "controller": true},
                                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "c"}],
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": {"nodeName": "n1", "serviceAccountName": "default",
                "initContainers": [{"name": "sidecar", "image": "s:1", "restartPolicy": "Always", "env": [{"name": "A", "value": "1"}]}],
                "containers": [{"name": "mesh", "image": "m:1", "resources": {"limits": {"cpu": "1"}},
                                "ports": [{"containerPort": 80}]}, {"name": "app", "image": "a:1"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:05Z"},
                               {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {"name": "mesh", "image": "m:1", "imageID": "sha256:1", "ready": true, "restartCount": 2, "started": true,
                     "state": {"running": {"startedAt": "2026-11-30T10:00:03Z"}}},
                    {"name": "app", "image": "a:1", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"a:1\""}}}],
                "initContainerStatuses": [{"name": "sidecar", "image": "s:1", "imageID": "", "ready": true, "restartCount": 1}]}
        })
    }

    #[test]
    fn slim_pod_keeps_what_the_controller_reads() {
        let mut slim: SlimPod = serde_json::from_value(full()).unwrap();
        slim.trim();
        // What a full Pod trimmed to the same fields looks like.
        let mut want: Pod = serde_json::from_value(full()).unwrap();
        want.metadata.managed_fields = None;
        want.metadata.generate_name = None;
        want.metadata.finalizers = None;
        want.metadata.self_link = None;
        want.metadata.owner_references.as_mut().unwrap().truncate(1);
        want.metadata.annotations.as_mut().unwrap().remove("other");
        let keep = |c: &Container| Container {
            name: c.name.clone(),
            image: c.image.clone(),
            restart_policy: c.restart_policy.clone(),
            resources: c.resources.clone(),
            ..Default::default()
        };
        let spec = want.spec.as_ref().unwrap();
        // Of the state, only a waiting reason.
        let keep_status = |c: &ContainerStatus| ContainerStatus {
            state: c
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .map(|w| ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: w.reason.clone(),
                        message: None,
                    }),
                    ..Default::default()
                }),
            ..c.clone()
        };
        let status = want.status.as_ref().unwrap();
        let want = Pod {
            spec: Some(PodSpec {
                containers: spec.containers.iter().map(keep).collect(),
                init_containers: spec
                    .init_containers
                    .as_ref()
                    .map(|l| l.iter().map(keep).collect()),
                node_name: spec.node_name.clone(),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: status.phase.clone(),
                conditions: Some(vec![status.conditions.as_ref().unwrap()[0].clone()]),
                container_statuses: status
                    .container_statuses
                    .as_ref()
                    .map(|l| l.iter().map(keep_status).collect()),
                init_container_statuses: status
                    .init_container_statuses
                    .as_ref()
                    .map(|l| l.iter().map(keep_status).collect()),
                ..Default::default()
            }),
            ..want
        };
        assert_eq!(slim.to_pod(), want);
        assert!(slim.is_active());
    }

    #[test]
    fn pods_share_one_copy_of_the_strings_they_repeat() {
        let a: SlimPod = serde_json::from_value(full()).unwrap();
        let mut other = full();
        other["metadata"]["name"] = json!("web-2");
        let b: SlimPod = serde_json::from_value(other).unwrap();
        let (sa, sb) = (a.status.as_ref().unwrap(), b.status.as_ref().unwrap());
        let (ca, cb) = (
            &sa.container_statuses.as_ref().unwrap()[0],
            &sb.container_statuses.as_ref().unwrap()[0],
        );
        // One allocation for the image ID, the image and the name of both pods' containers.
        for (x, y) in [
            (&ca.image_id, &cb.image_id),
            (&ca.image, &cb.image),
            (&ca.name, &cb.name),
        ] {
            assert_eq!(x, y);
            assert!(std::ptr::eq::<str>(&**x, &**y), "{x} is held twice");
        }
        let (specs_a, specs_b) = (a.spec.as_ref().unwrap(), b.spec.as_ref().unwrap());
        let (ia, ib) = (
            specs_a.containers[0].image.as_ref().unwrap(),
            specs_b.containers[0].image.as_ref().unwrap(),
        );
        assert!(std::ptr::eq::<str>(&**ia, &**ib));
        // Labels and kept annotations too, keys and values, out of `metadata`.
        let (la, lb) = (a.labels().0.first().unwrap(), b.labels().0.first().unwrap());
        assert!(std::ptr::eq::<str>(&*la.0, &*lb.0) && std::ptr::eq::<str>(&*la.1, &*lb.1));
        let (aa, ab) = (&a.annotations().0[0], &b.annotations().0[0]);
        assert!(std::ptr::eq::<str>(&*aa.1, &*ab.1));
        assert_eq!(a.metadata.labels, None);
        assert_eq!(a.metadata.annotations, None);
        // A value that differs is its own string, and reads back as it came.
        assert_eq!(&*sa.phase.clone().unwrap(), "Running");
        assert_eq!(
            serde_json::to_value(&a).unwrap()["status"]["containerStatuses"][0]["imageID"],
            json!("sha256:1")
        );
    }

    #[test]
    fn labels_and_annotations_read_as_a_map_would() {
        let map: BTreeMap<String, String> = [
            ("b", "2"),
            ("a", "1"),
            ("app.kubernetes.io/name", "web"),
            ("c", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut pairs = Pairs::from_map(map.clone());
        for key in ["a", "b", "c", "app.kubernetes.io/name", "", "d", "A", "app"] {
            assert_eq!(pairs.get(key), map.get(key).map(String::as_str), "{key}");
            assert_eq!(pairs.get_str(key), map.get_str(key), "{key}");
        }
        assert_eq!(
            pairs.pairs().collect::<Vec<_>>(),
            map.pairs().collect::<Vec<_>>()
        );
        assert_eq!(pairs.to_map(), Some(map.clone()));
        pairs.retain(|k| k != "b");
        assert_eq!(
            pairs.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["a", "app.kubernetes.io/name", "c"]
        );
        pairs.retain(|_| false);
        assert!(pairs.is_empty() && pairs.to_map().is_none());
        // A selector reads them the same way as the map.
        let sel: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
            serde_json::from_value(json!({"matchLabels": {"a": "1"},
                "matchExpressions": [{"key": "b", "operator": "In", "values": ["2"]},
                                     {"key": "d", "operator": "DoesNotExist"}]}))
            .unwrap();
        let sel = sidecarset_core::api::CompiledSelector::compile(&sel).unwrap();
        let pairs = Pairs::from_map(map.clone());
        assert!(sel.matches(&map) && sel.matches(&pairs));
        let mut other = map.clone();
        other.insert("d".into(), "x".into());
        assert!(!sel.matches(&other) && !sel.matches(&Pairs::from_map(other)));
    }

    #[test]
    fn a_shared_pod_reads_its_own_labels() {
        // `labels()` and `annotations()` on the cache's `Arc<SlimPod>` are the pod's, not the
        // empty `metadata` ones `ResourceExt` would read.
        let p = std::sync::Arc::new(serde_json::from_value::<SlimPod>(full()).unwrap());
        let labels: &Pairs = p.labels();
        assert_eq!(labels.get("app"), Some("web"));
        assert_eq!(
            sidecarset_core::api::injected_list(p.annotations()),
            ["mesh".to_string()].into()
        );
        // And written back where a pod has them.
        let v = serde_json::to_value(p.as_ref()).unwrap();
        assert_eq!(v["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(v["metadata"]["annotations"]["other"], json!("x"));
    }

    #[test]
    fn activity() {
        let cases = [
            (json!({"status": {"phase": "Running"}}), true),
            (json!({"status": {"phase": "Pending"}}), true),
            (json!({}), true),
            (json!({"status": {"phase": "Succeeded"}}), false),
            (json!({"status": {"phase": "Failed"}}), false),
            (
                json!({"metadata": {"deletionTimestamp": "2026-11-30T10:00:00Z"}, "status": {"phase": "Running"}}),
                false,
            ),
        ];
        for (v, want) in cases {
            let p: SlimPod = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(p.is_active(), want, "{v}");
            assert_eq!(
                sidecarset_core::inject::pod_is_active(&p.to_pod()),
                want,
                "{v}"
            );
        }
    }
}
