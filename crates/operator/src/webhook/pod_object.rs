//! The pod of a CREATE review, decoded for injection: the fields [`sidecarset_core::inject`]
//! reads (metadata; the containers' names, env, mounts, devices, resources and restart policy;
//! the volumes' and image pull secrets' names; the phase), every other field skipped while
//! parsing instead of built into the typed pod and dropped. A pod of ten containers decodes in
//! a fraction of the time; the injection is the same (`tests/all/properties.rs` checks the
//! webhook's patch against the core's injection of the fully decoded pod, and
//! `tests/all/responses.rs` the answers byte for byte).
//!
//! A pod this decoder refuses is refused with the full decoder's message (the field path of
//! what is wrong); a value of the wrong type in a field injection does not read is not looked
//! at (the API server never sends one: it serialises its own typed pod).

use k8s_openapi::api::core::v1::{
    Container, EnvVar, LocalObjectReference, Pod, PodSpec, PodStatus, ResourceRequirements, Volume,
    VolumeDevice, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};

/// `T` from a JSON object only. A derived struct also accepts an array of its fields in order
/// (`"spec": []` decodes as an empty spec), which the full decoder refuses and a JSON patch
/// cannot address (`/spec/containers` under an array): found by the mutated-review property
/// test, whose review had `"spec": []` and got a patch that did not apply.
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData)).map(Obj)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimPod {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<ObjectMeta>,
    #[serde(default)]
    spec: Option<Obj<SlimSpec>>,
    #[serde(default)]
    status: Option<Obj<SlimStatus>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimSpec {
    #[serde(default)]
    containers: Option<Vec<Obj<SlimContainer>>>,
    #[serde(default)]
    init_containers: Option<Vec<Obj<SlimContainer>>>,
    #[serde(default)]
    volumes: Option<Vec<Obj<Named>>>,
    #[serde(default)]
    image_pull_secrets: Option<Vec<LocalObjectReference>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimContainer {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    env: Option<Vec<EnvVar>>,
    #[serde(default)]
    volume_mounts: Option<Vec<VolumeMount>>,
    #[serde(default)]
    volume_devices: Option<Vec<VolumeDevice>>,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
    #[serde(default)]
    restart_policy: Option<String>,
}

#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct SlimStatus {
    #[serde(default)]
    phase: Option<String>,
}

impl Obj<SlimContainer> {
    fn into_container(self) -> Container {
        let Obj(c) = self;
        c.into_container()
    }
}

impl SlimContainer {
    fn into_container(self) -> Container {
        Container {
            name: self.name.unwrap_or_default(),
            env: self.env,
            volume_mounts: self.volume_mounts,
            volume_devices: self.volume_devices,
            resources: self.resources,
            restart_policy: self.restart_policy,
            ..Default::default()
        }
    }
}

/// The pod in `raw` with what injection reads, or what is wrong with it and where.
pub fn decode_for_injection(raw: &serde_json::value::RawValue) -> Result<Pod, String> {
    let slim = match serde_json::from_str::<Obj<SlimPod>>(raw.get()).map(|Obj(p)| p) {
        Ok(p)
            if p.api_version.as_deref().is_none_or(|v| v == "v1")
                && p.kind.as_deref().is_none_or(|k| k == "Pod") =>
        {
            p
        }
        // The full decoder says what is wrong, with the field's path.
        _ => return super::prologue::decode_object::<Pod>(raw),
    };
    Ok(Pod {
        metadata: slim.metadata.unwrap_or_default(),
        spec: slim.spec.map(|Obj(s)| PodSpec {
            containers: s
                .containers
                .unwrap_or_default()
                .into_iter()
                .map(Obj::into_container)
                .collect(),
            init_containers: s
                .init_containers
                .map(|l| l.into_iter().map(Obj::into_container).collect()),
            volumes: s.volumes.map(|l| {
                l.into_iter()
                    .map(|Obj(v)| Volume {
                        name: v.name.unwrap_or_default(),
                        ..Default::default()
                    })
                    .collect()
            }),
            image_pull_secrets: s.image_pull_secrets,
            ..Default::default()
        }),
        status: slim.status.map(|Obj(s)| PodStatus {
            phase: s.phase,
            ..Default::default()
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: serde_json::Value) -> Box<serde_json::value::RawValue> {
        serde_json::value::to_raw_value(&v).unwrap()
    }

    #[test]
    fn what_injection_reads_is_decoded_as_the_full_decoder_does() {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}, "annotations": {"x": "y"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}]},
            "spec": {"containers": [{"name": "app", "image": "i", "ports": [{"containerPort": 80}],
                                     "env": [{"name": "E", "value": "v"}, {"name": "F", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                                     "volumeMounts": [{"name": "d", "mountPath": "/d", "subPathExpr": "$(E)"}],
                                     "volumeDevices": [{"name": "b", "devicePath": "/dev/b"}],
                                     "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}}}],
                     "initContainers": [{"name": "native", "image": "n", "restartPolicy": "Always",
                                         "resources": {"requests": {"cpu": "100m"}}}],
                     "volumes": [{"name": "d", "emptyDir": {}}],
                     "imagePullSecrets": [{"name": "s"}], "nodeName": "n1"},
            "status": {"phase": "Pending", "podIP": "10.0.0.1"}});
        let slim = decode_for_injection(&raw(pod.clone())).unwrap();
        let full: Pod = serde_json::from_value(pod).unwrap();
        assert_eq!(slim.metadata, full.metadata);
        let (s, f) = (slim.spec.unwrap(), full.spec.unwrap());
        for (s, f) in s
            .containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .zip(
                f.containers
                    .iter()
                    .chain(f.init_containers.iter().flatten()),
            )
        {
            assert_eq!(s.name, f.name);
            assert_eq!(s.env, f.env);
            assert_eq!(s.volume_mounts, f.volume_mounts);
            assert_eq!(s.volume_devices, f.volume_devices);
            assert_eq!(s.resources, f.resources);
            assert_eq!(s.restart_policy, f.restart_policy);
        }
        assert_eq!(
            s.volumes
                .unwrap()
                .iter()
                .map(|v| &v.name)
                .collect::<Vec<_>>(),
            f.volumes
                .as_ref()
                .unwrap()
                .iter()
                .map(|v| &v.name)
                .collect::<Vec<_>>()
        );
        assert_eq!(s.image_pull_secrets, f.image_pull_secrets);
        assert_eq!(slim.status.unwrap().phase, full.status.unwrap().phase);
    }

    #[test]
    fn absent_null_and_empty_parts_decode_as_the_full_decoder_decodes_them() {
        for pod in [
            serde_json::json!({}),
            serde_json::json!({"metadata": null, "spec": null, "status": null}),
            serde_json::json!({"spec": {}}),
            serde_json::json!({"spec": {"containers": null, "initContainers": null, "volumes": null}}),
            serde_json::json!({"spec": {"containers": [], "initContainers": [], "volumes": []}}),
        ] {
            let slim = decode_for_injection(&raw(pod.clone())).unwrap();
            let full: Pod = serde_json::from_value(pod.clone()).unwrap();
            assert_eq!(slim, full, "{pod}");
        }
    }

    #[test]
    fn a_pod_refused_is_refused_with_the_full_decoders_message() {
        for (pod, says) in [
            (serde_json::json!({"apiVersion": "v2", "kind": "Pod"}), "v2"),
            (serde_json::json!({"kind": "Service"}), "Service"),
            (
                serde_json::json!({"spec": {"containers": [{"name": 5}]}}),
                "spec.containers[0].name",
            ),
            (
                serde_json::json!({"metadata": {"labels": {"a": 1}}}),
                "metadata.labels.a",
            ),
            // Arrays where objects belong (a derived struct would take them as its fields).
            (serde_json::json!({"spec": []}), "spec"),
            (serde_json::json!({"status": []}), "status"),
            (
                serde_json::json!({"spec": {"containers": [[]]}}),
                "spec.containers[0]",
            ),
            (
                serde_json::json!({"spec": {"volumes": [["v"]]}}),
                "spec.volumes[0]",
            ),
            (serde_json::json!([]), "sequence"),
        ] {
            let err = decode_for_injection(&raw(pod.clone())).unwrap_err();
            assert!(err.contains(says), "{pod}: {err}");
        }
    }
}
