//! The pod of a CREATE review, decoded for injection: the fields [`sidecarset_core::inject`]
//! reads (metadata; the containers' names, env, mounts, devices, restart policy, and their
//! resources when a SidecarSet may read them; the volumes' and image pull secrets' names; the
//! phase), every other field skipped while parsing instead of built into the typed pod and
//! dropped. A pod of ten containers decodes in
//! a fraction of the time; the injection is the same (`tests/all/properties.rs` checks the
//! webhook's patch against the core's injection of the fully decoded pod, and
//! `tests/all/responses.rs` the answers byte for byte).
//!
//! A pod this decoder refuses is refused with the full decoder's message (the field path of
//! what is wrong); a value of the wrong type in a field injection does not read is not looked
//! at (the API server never sends one: it serialises its own typed pod).

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, LocalObjectReference, Pod, PodSpec, PodStatus, Volume,
    VolumeDevice, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

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
struct SlimPod<'a> {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<ObjectMeta>,
    #[serde(default, borrow)]
    spec: Option<Obj<SlimSpec<'a>>>,
    #[serde(default)]
    status: Option<Obj<SlimStatus>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimSpec<'a> {
    #[serde(default, borrow)]
    containers: Option<Vec<Obj<SlimContainer<'a>>>>,
    #[serde(default, borrow)]
    init_containers: Option<Vec<Obj<SlimContainer<'a>>>>,
    #[serde(default)]
    volumes: Option<Vec<Obj<Named>>>,
    #[serde(default)]
    image_pull_secrets: Option<Vec<LocalObjectReference>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimContainer<'a> {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    env: Option<Vec<SlimEnvVar>>,
    #[serde(default)]
    volume_mounts: Option<Vec<VolumeMount>>,
    #[serde(default)]
    volume_devices: Option<Vec<VolumeDevice>>,
    /// Kept as it stands in the review: decoded only when an injection may read it.
    #[serde(default, borrow)]
    resources: Option<&'a RawValue>,
    #[serde(default)]
    restart_policy: Option<String>,
}

/// An env var, small while its list grows: `EnvVar` holds its source inline (360 bytes), and
/// a list decoded in place moves every element it holds each time it grows.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimEnvVar {
    // (the full decoder takes a missing name as empty too)
    #[serde(default)]
    name: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    value_from: Option<Box<EnvVarSource>>,
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

impl SlimContainer<'_> {
    /// The container, its resources decoded when `resources` (`Err` when they do not decode).
    fn into_container(self, resources: bool) -> Result<Container, serde_json::Error> {
        let resources = match self.resources {
            Some(raw) if resources => Some(serde_json::from_str(raw.get())?),
            _ => None,
        };
        Ok(Container {
            name: self.name.unwrap_or_default(),
            env: self.env.map(|l| {
                l.into_iter()
                    .map(|e| EnvVar {
                        name: e.name,
                        value: e.value,
                        value_from: e.value_from.map(|b| *b),
                    })
                    .collect()
            }),
            volume_mounts: self.volume_mounts,
            volume_devices: self.volume_devices,
            resources,
            restart_policy: self.restart_policy,
            ..Default::default()
        })
    }
}

/// The pod in `raw` with what injection reads, or what is wrong with it and where. The
/// resources of its containers are decoded only when `resources` (some SidecarSet's injection
/// may read them: [`sidecarset_core::index::Index::reads_app_resources`]); otherwise they are
/// left out, and not checked.
pub fn decode_for_injection(
    raw: &serde_json::value::RawValue,
    resources: bool,
) -> Result<Pod, String> {
    let slim = serde_json::from_str::<Obj<SlimPod>>(raw.get())
        .ok()
        .map(|Obj(p)| p)
        .filter(|p| {
            p.api_version.as_deref().is_none_or(|v| v == "v1")
                && p.kind.as_deref().is_none_or(|k| k == "Pod")
        })
        .and_then(|p| slim_pod(p, resources).ok());
    match slim {
        Some(pod) => Ok(pod),
        // The full decoder says what is wrong, with the field's path.
        None => super::prologue::decode_object::<Pod>(raw),
    }
}

fn slim_pod(slim: SlimPod<'_>, resources: bool) -> Result<Pod, serde_json::Error> {
    // (Pushed into a list of the right size: collecting `Result`s grows it step by step, each
    // step moving every container, 2 KiB each, again.)
    let containers = |l: Vec<Obj<SlimContainer<'_>>>| -> Result<Vec<Container>, serde_json::Error> {
        let mut out = Vec::with_capacity(l.len());
        for Obj(c) in l {
            out.push(c.into_container(resources)?);
        }
        Ok(out)
    };
    let spec = match slim.spec {
        None => None,
        Some(Obj(s)) => Some(PodSpec {
            containers: containers(s.containers.unwrap_or_default())?,
            init_containers: s.init_containers.map(containers).transpose()?,
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
    };
    Ok(Pod {
        metadata: slim.metadata.unwrap_or_default(),
        spec,
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
        let slim = decode_for_injection(&raw(pod.clone()), true).unwrap();
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
    fn resources_are_decoded_only_when_asked_for_and_checked_only_then() {
        let pod = serde_json::json!({"spec": {
            "containers": [{"name": "app", "env": [{"name": "E", "value": "v"}],
                            "resources": {"limits": {"cpu": "1"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"memory": "1Gi"}}}]}});
        let full: Pod = serde_json::from_value(pod.clone()).unwrap();
        let with = decode_for_injection(&raw(pod.clone()), true).unwrap();
        let without = decode_for_injection(&raw(pod.clone()), false).unwrap();
        let (f, w, wo) = (
            full.spec.unwrap(),
            with.spec.unwrap(),
            without.spec.unwrap(),
        );
        for (i, (f, (w, wo))) in f
            .containers
            .iter()
            .chain(f.init_containers.iter().flatten())
            .zip(
                w.containers
                    .iter()
                    .chain(w.init_containers.iter().flatten())
                    .zip(
                        wo.containers
                            .iter()
                            .chain(wo.init_containers.iter().flatten()),
                    ),
            )
            .enumerate()
        {
            assert!(f.resources.is_some(), "container {i}");
            assert_eq!(w.resources, f.resources, "container {i}");
            assert_eq!(wo.resources, None, "container {i}");
            assert_eq!((&w.name, &w.env), (&f.name, &f.env), "container {i}");
            assert_eq!((&wo.name, &wo.env), (&f.name, &f.env), "container {i}");
        }
        // Resources that do not decode: refused with their path when read, not looked at
        // otherwise.
        let bad = serde_json::json!({"spec": {"containers": [{"name": "app", "resources": {"limits": 5}}]}});
        let err = decode_for_injection(&raw(bad.clone()), true).unwrap_err();
        assert!(err.contains("spec.containers[0].resources.limits"), "{err}");
        let pod = decode_for_injection(&raw(bad), false).unwrap();
        assert_eq!(pod.spec.unwrap().containers[0].name, "app");
    }

    #[test]
    fn absent_null_and_empty_parts_decode_as_the_full_decoder_decodes_them() {
        for pod in [
            serde_json::json!({}),
            serde_json::json!({"metadata": null, "spec": null, "status": null}),
            serde_json::json!({"spec": {}}),
            serde_json::json!({"spec": {"containers": null, "initContainers": null, "volumes": null}}),
            serde_json::json!({"spec": {"containers": [], "initContainers": [], "volumes": []}}),
            serde_json::json!({"spec": {"containers": [{"env": [{"value": "v"}, {"name": "n", "value": null,
                "valueFrom": null}, {"name": "m", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                "resources": null}]}}),
        ] {
            let slim = decode_for_injection(&raw(pod.clone()), true).unwrap();
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
            let err = decode_for_injection(&raw(pod.clone()), true).unwrap_err();
            assert!(err.contains(says), "{pod}: {err}");
        }
    }
}
