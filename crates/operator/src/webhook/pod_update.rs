//! Pod UPDATE on `POST /mutate-pod` (a webhook entry of its own, `failurePolicy: Ignore`, only
//! for pods carrying our injection annotation): never adds containers, lets in-place image
//! upgrades through, keeps the injection annotations truthful while the injected containers
//! are there.

use super::review::{Request, Response};
use k8s_openapi::api::core::v1::Pod;
use sidecarset_core::inject;
use std::collections::BTreeMap;

/// What a pod UPDATE reads of the old and the new pod: the annotations and the container names
/// (a slim decode: an update is admitted on every pod change, and a whole Pod costs far more).
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct UpdatedPod {
    metadata: UpdatedMeta,
    spec: Option<UpdatedSpec>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct UpdatedMeta {
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct UpdatedSpec {
    containers: Vec<Named>,
    init_containers: Option<Vec<Named>>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Named {
    name: String,
}

impl UpdatedPod {
    /// A Pod with only what [`inject::on_update`] reads.
    fn into_pod(self) -> Pod {
        let container = |n: Named| k8s_openapi::api::core::v1::Container {
            name: n.name,
            ..Default::default()
        };
        Pod {
            metadata: kube::api::ObjectMeta {
                annotations: self.metadata.annotations,
                ..Default::default()
            },
            spec: self.spec.map(|s| k8s_openapi::api::core::v1::PodSpec {
                containers: s.containers.into_iter().map(container).collect(),
                init_containers: s
                    .init_containers
                    .map(|v| v.into_iter().map(container).collect()),
                ..Default::default()
            }),
            status: None,
        }
    }
}

/// Pod UPDATE: keeps the injection annotations while the injected containers are there.
pub(super) fn admit_pod_update(req: &Request, raw: &serde_json::value::RawValue) -> Response {
    let new: UpdatedPod = match serde_json::from_str(raw.get()) {
        Ok(p) => p,
        Err(e) => {
            return Response::deny(
                &req.uid,
                400,
                format!("request.object is not a valid Pod: {e}"),
            );
        }
    };
    let old: Option<UpdatedPod> = req
        .old_object
        .as_deref()
        .and_then(|r| serde_json::from_str(r.get()).ok());
    match old {
        Some(old) => Response::allow(&req.uid)
            .with_patch(inject::on_update(&old.into_pod(), &new.into_pod())),
        None => Response::allow(&req.uid),
    }
}
