//! Run with the operator STOPPED (`make test` runs `prepare_pods_for_the_operator_down_checks`
//! while it is up, stops it, then runs the others with `--ignored`): pods in an excluded
//! namespace and pods no SidecarSet selects are still created, a pod a SidecarSet selects
//! follows the pod webhook's failurePolicy, and any pod's labels and finalizers still change.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sidecarset_e2e::*;

#[tokio::test]
#[ignore = "needs the operator stopped; run by `make test` after stopping it"]
async fn with_the_operator_down_excluded_namespaces_work_and_others_follow_failure_policy()
-> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();

    // The operator's own namespace is excluded by the webhook's namespaceSelector.
    let excluded = operator_namespace();
    let pods: Api<Pod> = Api::namespaced(c.clone(), &excluded);
    let name = format!("e2e-down-{s}");
    let created = pods
        .create(&PostParams::default(), &pod(&name, json!({})))
        .await?;
    assert_eq!(container_names(&created), ["app"]);
    pods.delete(&name, &DeleteParams::default()).await?;

    let ns = format!("e2e-down-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    // A pod no SidecarSet selects never reaches the webhook (its matchConditions), whatever
    // the failure policy: created as it is.
    let plain = Api::<Pod>::namespaced(c.clone(), &ns)
        .create(
            &PostParams::default(),
            &pod("plain", json!({"e2e-down": "nobody-selects-this"})),
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!("a pod no SidecarSet selects was refused with the operator down: {e}")
        })?;
    assert_eq!(container_names(&plain), ["app"]);
    // One a SidecarSet selects (prepare_pods_for_the_operator_down_checks made it) follows the
    // failure policy.
    let result = Api::<Pod>::namespaced(c.clone(), &ns)
        .create(
            &PostParams::default(),
            &pod("p", json!({"e2e-down": "injected"})),
        )
        .await;
    match failure_policy().as_str() {
        "Fail" => {
            let msg = result
                .expect_err("failurePolicy Fail must refuse the pod")
                .to_string();
            assert!(
                msg.contains("mpod.sidecarset-operator.io"),
                "the error should name the webhook: {msg}"
            );
        }
        _ => {
            let p = result?;
            assert_eq!(container_names(&p), ["app"]);
        }
    }
    delete_namespace(&c, &ns).await;
    Ok(())
}

/// The namespace `prepare` fills while the operator runs: an injected pod and a plain one.
const PREPARED: &str = "e2e-down-prepared";

#[tokio::test]
#[ignore = "run by `make test` while the operator is still up, before operator_down"]
async fn prepare_pods_for_the_operator_down_checks() -> anyhow::Result<()> {
    let c = client().await;
    create_namespace(&c, PREPARED, json!({})).await?;
    create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": PREPARED},
        "spec": {"selector": {"matchLabels": {"e2e-down": "injected"}},
                 "containers": [{"name": "proxy", "image": "registry.local/proxy:1"}]}
    }))
    .await?;
    let probe = pod("probe", json!({"e2e-down": "injected"}));
    wait_injectable(&c, PREPARED, &probe, "proxy", true).await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), PREPARED);
    let injected = pods
        .create(
            &PostParams::default(),
            &pod("injected", json!({"e2e-down": "injected"})),
        )
        .await?;
    assert_eq!(container_names(&injected), ["proxy", "app"]);
    pods.create(
        &PostParams::default(),
        &pod("plain", json!({"e2e-down": "plain"})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the operator stopped and `prepare_pods_for_the_operator_down_checks` run before"]
async fn with_the_operator_down_labels_and_finalizers_of_any_pod_still_change() -> anyhow::Result<()>
{
    let c = client().await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), PREPARED);
    for name in ["injected", "plain"] {
        // A label, a finalizer added and removed: pod UPDATEs that must never wait on the
        // operator (the UPDATE webhook takes only pods we injected, and fails open).
        pods.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"e2e-touched": "yes"}}})),
        )
        .await
        .map_err(|e| anyhow::anyhow!("labelling {name} with the operator down: {e}"))?;
        pods.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["e2e.sidecarset-operator.io/hold"]}})),
        )
        .await
        .map_err(|e| anyhow::anyhow!("adding a finalizer to {name} with the operator down: {e}"))?;
        pods.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!("removing the finalizer of {name} with the operator down: {e}")
        })?;
        let p = pods.get(name).await?;
        assert_eq!(
            p.metadata
                .labels
                .unwrap_or_default()
                .get("e2e-touched")
                .map(String::as_str),
            Some("yes")
        );
        assert!(p.metadata.finalizers.unwrap_or_default().is_empty());
    }
    let _ = Api::<sidecarset_core::api::v1beta1::SidecarSet>::all(c.clone())
        .delete(PREPARED, &DeleteParams::default())
        .await;
    delete_namespace(&c, PREPARED).await;
    Ok(())
}
