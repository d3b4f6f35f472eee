//! The local cluster's audit log (`hack/cluster.sh` with `SSO_AUDIT_POLICY=hack/audit-policy.yaml`,
//! as `hack/e2e-local.sh` starts it): who wrote what, when. Tests run each process under a user
//! of its own (an impersonating kubeconfig, [`crate::proxy::kubeconfig_through`]) and count the
//! writes of each.

use serde_json::Value;
use std::path::PathBuf;

/// The kwok cluster's directory (`$SSO_WORK/kwok/clusters/$SSO_CLUSTER_NAME`).
pub fn cluster_dir() -> PathBuf {
    let work = std::env::var("SSO_WORK")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.local"));
    let name =
        std::env::var("SSO_CLUSTER_NAME").unwrap_or_else(|_| "sidecarset-operator-test".into());
    work.join("kwok/clusters").join(name)
}

/// The API server's audit events (stage ResponseComplete) so far.
pub fn events() -> anyhow::Result<Vec<Value>> {
    let path = cluster_dir().join("logs/audit.log");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        anyhow::anyhow!(
            "no audit log at {} ({e}): start the cluster with SSO_AUDIT_POLICY=hack/audit-policy.yaml (hack/e2e-local.sh does)",
            path.display()
        )
    })?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .collect())
}

/// Who made a request: the impersonated user, else the user.
pub fn actor(e: &Value) -> &str {
    e["impersonatedUser"]["username"]
        .as_str()
        .or(e["user"]["username"].as_str())
        .unwrap_or("")
}

/// When the request was received.
pub fn at(e: &Value) -> jiff::Timestamp {
    e["requestReceivedTimestamp"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(jiff::Timestamp::MIN)
}

/// `resource[/subresource]` of the request.
pub fn resource(e: &Value) -> String {
    let o = &e["objectRef"];
    match o["subresource"].as_str() {
        Some(sub) if !sub.is_empty() => format!("{}/{sub}", o["resource"].as_str().unwrap_or("")),
        _ => o["resource"].as_str().unwrap_or("").to_string(),
    }
}

/// Whether it is a write (create, update, patch, delete).
pub fn is_write(e: &Value) -> bool {
    matches!(
        e["verb"].as_str(),
        Some("create" | "update" | "patch" | "delete" | "deletecollection")
    )
}
