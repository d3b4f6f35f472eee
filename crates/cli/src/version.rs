//! `version`: the client's version, and the operator's as deployed in the cluster, read from its
//! Deployment (the `app.kubernetes.io/version` label the chart sets, else the image's tag): a
//! user who may list Deployments in the operator's namespace needs no other permission. Without
//! a cluster the client's version is still printed, with the reason and exit code 2.

use crate::inspect::cluster::Cluster;
use crate::inspect::{EXIT_ACCESS, EXIT_NOT_FOUND, EXIT_OK, OutputFormat, ToolError, ToolOutput};
use crate::target::OPERATOR_LABEL;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};
use serde::Serialize;
use std::collections::BTreeMap;

/// The client's version (this binary's).
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(clap::Args, Debug, Clone)]
pub struct VersionArgs {
    /// The client's version only; the cluster is not read.
    #[arg(long)]
    pub client: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "human")]
    pub output: OutputFormat,
    /// The operator's namespace (default: found from the webhook configuration's Service or the
    /// operator's Deployment, else sidecarset-system).
    #[arg(long)]
    pub operator_namespace: Option<String>,
    /// The webhook configurations' name, to find the operator's namespace by.
    #[arg(long, default_value = "sidecarset-operator")]
    pub webhook_config_name: String,
}

/// One Deployment of the operator.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OperatorVersion {
    pub namespace: String,
    pub deployment: String,
    pub version: String,
    pub image: String,
    pub ready_replicas: i32,
    pub replicas: i32,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Versions {
    client_version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    operator: Option<Vec<OperatorVersion>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The version an image reference carries: its tag, else its digest, else `unknown`
/// (`registry:5000/sidecarset-operator` has no tag: the port is not one).
pub fn image_version(image: &str) -> String {
    if let Some((_, digest)) = image.split_once('@') {
        return digest.to_string();
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) if !tag.is_empty() => tag.to_string(),
        _ => "unknown (the image has no tag)".into(),
    }
}

/// The operator's version of one Deployment: its `app.kubernetes.io/version` label, else its
/// image's tag.
pub fn of_deployment(d: &Deployment) -> OperatorVersion {
    let labels = d.metadata.labels.clone().unwrap_or_default();
    let image = d
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|p| {
            p.containers
                .iter()
                .find(|c| c.args.iter().flatten().any(|a| a == "run"))
                .or_else(|| p.containers.first())
        })
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let version = labels
        .get("app.kubernetes.io/version")
        .filter(|v| !v.is_empty())
        .cloned()
        .unwrap_or_else(|| image_version(&image));
    OperatorVersion {
        namespace: d.metadata.namespace.clone().unwrap_or_default(),
        deployment: d.metadata.name.clone().unwrap_or_default(),
        version,
        image,
        ready_replicas: d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        replicas: d.spec.replicas.unwrap_or(1),
    }
}

fn human(v: &Versions) -> String {
    let mut s = format!("Client Version: {}\n", v.client_version);
    for o in v.operator.iter().flatten() {
        s.push_str(&format!(
            "Operator Version: {} (Deployment {}/{}, image {}, {}/{} ready)\n",
            o.version, o.namespace, o.deployment, o.image, o.ready_replicas, o.replicas
        ));
    }
    s
}

fn render(v: &Versions, format: OutputFormat) -> String {
    match format {
        OutputFormat::Human => human(v),
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
            s.push('\n');
            s
        }
        OutputFormat::Yaml => serde_saphyr::to_string(v).unwrap_or_default(),
    }
}

/// The operator's Deployments in the namespace found, or why they cannot be read.
async fn operator(args: &VersionArgs) -> Result<Vec<OperatorVersion>, ToolError> {
    let c = Cluster::connect().await?;
    let ns = crate::target::operator_namespace(
        &c.client,
        args.operator_namespace.as_deref(),
        &args.webhook_config_name,
    )
    .await;
    let list = Api::<Deployment>::namespaced(c.client.clone(), &ns.name)
        .list(&ListParams::default().labels(OPERATOR_LABEL))
        .await
        .map_err(|e| {
            c.error(
                &format!("list the operator's Deployments in {}", ns.name),
                &format!("list deployments -n {}", ns.name),
                e,
            )
        })?;
    if list.items.is_empty() {
        return Err(ToolError::NotFound(format!(
            "no Deployment labelled {OPERATOR_LABEL} in namespace {} (from {}): pass --operator-namespace, or the operator runs outside the cluster",
            ns.name, ns.found_by
        )));
    }
    let by_name: BTreeMap<String, OperatorVersion> = list
        .items
        .iter()
        .map(of_deployment)
        .map(|v| (v.deployment.clone(), v))
        .collect();
    Ok(by_name.into_values().collect())
}

/// `version`: the client's version always; the operator's unless `--client`. When the operator's
/// cannot be read the client's is still printed, and the reason goes to stderr with its exit code
/// (2 no access, 3 not found).
pub async fn version(args: &VersionArgs) -> Result<ToolOutput, ToolError> {
    let mut v = Versions {
        client_version: CLIENT_VERSION,
        operator: None,
        error: None,
    };
    let mut out = ToolOutput::default();
    if !args.client {
        match operator(args).await {
            Ok(o) => v.operator = Some(o),
            Err(e) => {
                out.code = match e {
                    ToolError::NotFound(_) => EXIT_NOT_FOUND,
                    _ => EXIT_ACCESS,
                };
                out.stderr.push(format!("error: operator version: {e}"));
                v.error = Some(e.to_string());
            }
        }
    }
    if out.code == 0 {
        out.code = EXIT_OK;
    }
    out.stdout = render(&v, args.output);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_of_an_image() {
        let cases = [
            ("sidecarset-operator:0.1.0", "0.1.0"),
            (
                "registry.local:5000/sso/sidecarset-operator:0.2.0-rc.1",
                "0.2.0-rc.1",
            ),
            (
                "registry.local:5000/sidecarset-operator",
                "unknown (the image has no tag)",
            ),
            ("sidecarset-operator@sha256:abc", "sha256:abc"),
            ("sidecarset-operator:1.0@sha256:abc", "sha256:abc"),
            ("", "unknown (the image has no tag)"),
        ];
        for (image, want) in cases {
            assert_eq!(image_version(image), want, "{image}");
        }
    }

    #[test]
    fn the_operator_version_is_the_label_else_the_tag() {
        let d = |labels: serde_json::Value| -> Deployment {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "sso", "namespace": "ops", "labels": labels},
                "spec": {"replicas": 2, "selector": {}, "template": {"spec": {"containers": [
                    {"name": "proxy", "image": "proxy:9"},
                    {"name": "manager", "image": "r/sidecarset-operator:0.3.0", "args": ["run"]},
                ]}}},
                "status": {"readyReplicas": 1},
            }))
            .unwrap()
        };
        let labelled = of_deployment(&d(
            serde_json::json!({"app.kubernetes.io/version": "0.4.0"}),
        ));
        assert_eq!(labelled.version, "0.4.0");
        assert_eq!(labelled.image, "r/sidecarset-operator:0.3.0");
        assert_eq!((labelled.ready_replicas, labelled.replicas), (1, 2));
        let unlabelled = of_deployment(&d(serde_json::json!({})));
        assert_eq!(unlabelled.version, "0.3.0");
        assert_eq!(unlabelled.namespace, "ops");
    }
}
