//! Helpers of the end-to-end suite. The suite is cluster-agnostic: it reads `KUBECONFIG`, creates
//! its own namespaces and SidecarSets (names carry a per-run suffix) and deletes them.
//!
//! Env: `SSO_E2E_NAMESPACE` — the operator's namespace (excluded from injection; default
//! `sidecarset-system`); `SSO_E2E_FAILURE_POLICY` — the pod webhook's failurePolicy (default Fail).

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sidecarset_operator::api::SidecarSet;
use std::time::{Duration, Instant};

pub fn operator_namespace() -> String {
    std::env::var("SSO_E2E_NAMESPACE").unwrap_or_else(|_| "sidecarset-system".into())
}

pub fn failure_policy() -> String {
    std::env::var("SSO_E2E_FAILURE_POLICY").unwrap_or_else(|_| "Fail".into())
}

pub async fn client() -> Client {
    sidecarset_operator::webhook::server::install_crypto_provider();
    Client::try_default()
        .await
        .expect("KUBECONFIG must point to the test cluster")
}

/// A short unique suffix for names of this test run.
pub fn suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{:x}{:x}", std::process::id() % 4096, nanos % 0xfffff)
}

pub async fn create_namespace(c: &Client, name: &str, labels: Value) -> anyhow::Result<()> {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &ns)
        .await
        .context("create namespace")?;
    Ok(())
}

pub async fn delete_namespace(c: &Client, name: &str) {
    let _ = Api::<Namespace>::all(c.clone())
        .delete(name, &DeleteParams::background())
        .await;
}

pub async fn create_sidecarset(c: &Client, v: Value) -> kube::Result<SidecarSet> {
    let ss: SidecarSet = serde_json::from_value(v).expect("test SidecarSet decodes");
    Api::<SidecarSet>::all(c.clone())
        .create(&PostParams::default(), &ss)
        .await
}

pub async fn delete_sidecarset(c: &Client, name: &str) {
    let _ = Api::<SidecarSet>::all(c.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

pub fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]}
    }))
    .unwrap()
}

pub fn container_names(p: &Pod) -> Vec<String> {
    p.spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

pub fn init_container_names(p: &Pod) -> Vec<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map(|l| l.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

/// Server-side dry-run create (what `kubectl apply --dry-run=server` does): the pod as admission
/// left it, nothing stored.
pub async fn dry_run(c: &Client, ns: &str, p: &Pod) -> kube::Result<Pod> {
    Api::<Pod>::namespaced(c.clone(), ns)
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            p,
        )
        .await
}

/// Polls until a dry-run of `p` is injected with `container` (the operator's index follows
/// SidecarSets and namespace labels through watches, a few milliseconds behind the API).
pub async fn wait_injectable(
    c: &Client,
    ns: &str,
    p: &Pod,
    container: &str,
    want: bool,
) -> anyhow::Result<()> {
    // A generated name, so the probe works even when a pod of that name exists.
    let mut p = p.clone();
    p.metadata.generate_name = Some("probe-".into());
    p.metadata.name = None;
    let p = &p;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = dry_run(c, ns, p).await?;
        let has = container_names(&got)
            .iter()
            .chain(init_container_names(&got).iter())
            .any(|n| n == container);
        if has == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "after 20 s a pod in {ns} is {} {container}: {:?}",
                if want { "still without" } else { "still with" },
                container_names(&got)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `f` returns Some, polling every 250 ms, up to `secs`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {secs} s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub fn name_of<K: ResourceExt>(k: &K) -> String {
    k.name_any()
}
