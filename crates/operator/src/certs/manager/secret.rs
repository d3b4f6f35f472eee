//! The certificate Secret: read into [`Material`], written under its resourceVersion so that
//! among replicas exactly one write of a step wins.

use super::Manager;
use crate::certs::{ANNOTATION_STEP_SINCE, Material};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};

/// The material a Secret holds.
pub(super) fn to_material(s: &Secret) -> Result<Material, String> {
    let data = s
        .data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    let since = s
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_STEP_SINCE))
        .and_then(|v| v.parse().ok());
    Material::from_data(&data, since)
}

impl Manager {
    /// Creates the Secret, or replaces it under its resourceVersion; returns what was stored.
    pub(super) async fn write(
        &self,
        existing: Option<&Secret>,
        m: &Material,
    ) -> anyhow::Result<Material> {
        let mut meta = ObjectMeta {
            name: Some(self.settings.secret_name.clone()),
            namespace: Some(self.settings.namespace.clone()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    self.settings.field_manager.clone(),
                )]
                .into(),
            ),
            annotations: m
                .step_since
                .map(|s| [(ANNOTATION_STEP_SINCE.to_string(), s.to_string())].into()),
            ..Default::default()
        };
        let secret = |meta: ObjectMeta| Secret {
            metadata: meta,
            type_: Some("kubernetes.io/tls".into()),
            data: Some(
                m.to_data()
                    .into_iter()
                    .map(|(k, v)| (k, ByteString(v)))
                    .collect(),
            ),
            ..Default::default()
        };
        let stored = match existing {
            None => match self
                .secrets()
                .create(&PostParams::default(), &secret(meta))
                .await
            {
                Ok(s) => s,
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    return Err(anyhow::anyhow!(Conflict(
                        "created by another replica first".into()
                    )));
                }
                Err(e) => return Err(e.into()),
            },
            Some(old) => {
                meta.resource_version = old.metadata.resource_version.clone();
                // Keep what others set on the Secret (labels, annotations, owner references).
                let mut labels = old.metadata.labels.clone().unwrap_or_default();
                labels.extend(meta.labels.take().unwrap_or_default());
                meta.labels = Some(labels);
                let mut ann = old.metadata.annotations.clone().unwrap_or_default();
                ann.extend(meta.annotations.take().unwrap_or_default());
                meta.annotations = Some(ann);
                meta.owner_references = old.metadata.owner_references.clone();
                match self
                    .secrets()
                    .replace(
                        &self.settings.secret_name,
                        &PostParams::default(),
                        &secret(meta),
                    )
                    .await
                {
                    Ok(s) => s,
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        return Err(anyhow::anyhow!(Conflict(
                            "changed by another replica first".into()
                        )));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        to_material(&stored).map_err(anyhow::Error::msg)
    }
}

#[derive(Debug)]
struct Conflict(String);
impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "conflict: {}", self.0)
    }
}
impl std::error::Error for Conflict {}

/// True when `e` is a write another replica won.
pub(super) fn is_conflict(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Conflict>().is_some()
}
