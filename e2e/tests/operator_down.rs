//! Run with the operator STOPPED (`cargo test -p sidecarset-e2e --test operator_down -- --ignored`;
//! `make test` does so after stopping it): pods in an excluded namespace are still created; in a
//! selected namespace, creation follows the pod webhook's failurePolicy.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
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
    let result = Api::<Pod>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &pod("p", json!({})))
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
