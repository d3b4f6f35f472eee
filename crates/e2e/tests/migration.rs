//! Moving a cluster from OpenKruise 1.9 to this operator, recreated from data recorded on the
//! real OpenKruise (crates/core/tests/fixtures/kruise-1.9): the CRD as OpenKruise leaves it (v1beta1 stored,
//! its conversion webhook pointing at OpenKruise's Service), a SidecarSet stored as v1beta1 with
//! OpenKruise's hash annotations, its ControllerRevision in `kruise-system`, and running pods
//! that OpenKruise injected (its annotations and revision names). Then our CRD is applied over
//! it and the operator started, with no storage migration in between.
//!
//! It deletes and recreates the SidecarSet CRD, so `hack/e2e-local.sh` runs it alone, after the
//! other suites (`--ignored`).

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sidecarset_core::api::convert::{API_VERSION_V1BETA1, convert};
use sidecarset_core::api::{CRD_NAME, SidecarSet, v1beta1};
use sidecarset_e2e::*;
use std::time::Duration;

const CASE: &str = "x12-rich-container-hash";
const PODS: usize = 3;

fn recorded() -> anyhow::Result<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../core/tests/fixtures/kruise-1.9")
        .join(format!("{CASE}.yaml"));
    Ok(serde_saphyr::from_str(&std::fs::read_to_string(&path)?)?)
}

/// Our CRD with OpenKruise's conversion settings (its webhook Service in kruise-system, no
/// caBundle we could use): the state a cluster is in once OpenKruise is uninstalled.
fn kruise_shaped_crd() -> anyhow::Result<CustomResourceDefinition> {
    let mut v = serde_json::to_value(sidecarset_core::api::crd())?;
    v["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": ["v1", "v1beta1"],
        "clientConfig": {"service": {"namespace": "kruise-system", "name": "kruise-webhook-service", "path": "/convert", "port": 443}}}});
    Ok(serde_json::from_value(v)?)
}

async fn recreate_crd(c: &kube::Client, crd: &CustomResourceDefinition) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(c.clone());
    let _ = api.delete(CRD_NAME, &DeleteParams::default()).await;
    eventually(60, "the old CRD to be gone", || {
        let api = api.clone();
        async move { Ok(api.get_opt(CRD_NAME).await?.is_none().then_some(())) }
    })
    .await?;
    api.create(&PostParams::default(), crd).await?;
    eventually(30, "the CRD to be established", || {
        let api = api.clone();
        async move {
            let crd = api.get(CRD_NAME).await?;
            let ok = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(ok.then_some(()))
        }
    })
    .await
}

#[tokio::test]
#[ignore = "recreates the SidecarSet CRD and starts its own operator; run alone by hack/e2e-local.sh"]
async fn a_cluster_openkruise_ran_moves_over_without_storage_migration() -> anyhow::Result<()> {
    let c = client().await;
    let data = recorded()?;
    let s = suffix();
    let ns = format!("e2e-migrate-{s}");
    let op_ns = format!("e2e-migrate-op-{s}");

    // 1. The cluster as OpenKruise left it.
    recreate_crd(&c, &kruise_shaped_crd()?).await?;
    create_namespace(&c, &ns, json!({})).await?;
    create_namespace(&c, &op_ns, json!({})).await?;
    let _ = create_namespace(&c, "kruise-system", json!({})).await;
    let stored = &data["kruise"]["sidecarsets"][0];
    let ss_name = stored["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let kruise_hash = stored["metadata"]["annotations"]["kruise.io/sidecarset-hash"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut as_beta = convert(stored, API_VERSION_V1BETA1)?;
    as_beta["metadata"]["labels"] = json!({"e2e-migrate": s});
    let beta: Api<v1beta1::SidecarSet> = Api::all(c.clone());
    beta.create(&PostParams::default(), &serde_json::from_value(as_beta)?)
        .await?;
    let rev = &data["kruise"]["revisions"][0];
    let rev_name = rev["name"].as_str().unwrap_or_default().to_string();
    Api::<ControllerRevision>::namespaced(c.clone(), "kruise-system")
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": rev_name, "labels": rev["labels"]},
                "data": {"spec": {"containers": stored["spec"]["containers"]}}, "revision": 1
            }))?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let mut uids = Vec::new();
    for i in 0..PODS {
        let mut p = data["kruise"]["pod"].clone();
        p["metadata"]["name"] = json!(format!("rich-{i}"));
        p["metadata"]["namespace"] = json!(ns);
        let p: Pod = serde_json::from_value(p)?;
        // The namespace's ServiceAccount appears a moment after the namespace.
        let created = eventually(30, "the pod to be created", || {
            let (pods, p) = (pods.clone(), p.clone());
            async move { Ok(pods.create(&PostParams::default(), &p).await.ok()) }
        })
        .await?;
        uids.push(created.metadata.uid.clone().unwrap_or_default());
    }

    // 2. Our CRD over it (what `make deploy` and the README do), then the operator.
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    crds.patch(
        CRD_NAME,
        &PatchParams::apply("sidecarset-operator").force(),
        &Patch::Apply(&sidecarset_core::api::crd()),
    )
    .await?;
    let stored_versions = crds
        .get(CRD_NAME)
        .await?
        .status
        .and_then(|s| s.stored_versions)
        .unwrap_or_default();
    assert_eq!(stored_versions, ["v1beta1"]);
    let port = free_port();
    let log = std::env::temp_dir()
        .join(format!("sso-e2e-migrate-{s}.log"))
        .to_string_lossy()
        .to_string();
    let op = Operator::start(
        &[
            "--namespace",
            &op_ns,
            "--cert-secret-name",
            "migrate",
            "--webhook-config-name",
            &format!("e2e-migrate-{s}"),
            "--manage-webhooks",
            "--webhook-url",
            &format!("https://127.0.0.1:{port}"),
        ],
        port,
        &log,
    )?;
    let result = async {
        // The conversion webhook is ours now: the SidecarSet reads as v1alpha1.
        let alpha: Api<SidecarSet> = Api::all(c.clone());
        eventually(
            30,
            "the SidecarSet to read as v1alpha1 through our /convert",
            || {
                let alpha = alpha.clone();
                let ss_name = ss_name.clone();
                async move { Ok(alpha.get(&ss_name).await.ok().map(|_| ())) }
            },
        )
        .await?;
        // Pods OpenKruise injected count as matched and updated (its hashes are ours), and
        // the latest revision is the one OpenKruise named.
        let status = |alpha: Api<SidecarSet>, n: String| async move {
            Ok::<Value, anyhow::Error>(serde_json::to_value(alpha.get(&n).await?.status)?)
        };
        eventually(
            60,
            "status to count OpenKruise's pods as updated and ready",
            || {
                let (alpha, n) = (alpha.clone(), ss_name.clone());
                async move {
                    let st = status(alpha, n).await?;
                    Ok((st["matchedPods"] == PODS
                        && st["updatedPods"] == PODS
                        && st["readyPods"] == PODS)
                        .then_some(st))
                }
            },
        )
        .await
        .map(|st| assert_eq!(st["latestRevision"], rev_name, "{st}"))?;

        // 3. An image change upgrades them in place.
        alpha
            .patch(
                &ss_name,
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/containers/0/image", "value": "envoy:1.32"}
                ]))?),
            )
            .await?;
        let new_hash = alpha
            .get(&ss_name)
            .await?
            .annotations()
            .get("kruise.io/sidecarset-hash")
            .cloned()
            .unwrap_or_default();
        anyhow::ensure!(
            !new_hash.is_empty() && new_hash != kruise_hash,
            "the SidecarSet's hash did not change: {new_hash}"
        );
        eventually(90, "every pod upgraded in place", || {
            let (alpha, n, pods) = (alpha.clone(), ss_name.clone(), pods.clone());
            async move {
                let st = status(alpha, n).await?;
                let list = pods.list(&Default::default()).await?.items;
                let upgraded = list
                    .iter()
                    .filter(|p| {
                        p.spec.as_ref().is_some_and(|s| {
                            s.containers.iter().any(|c| {
                                c.name == "rich" && c.image.as_deref() == Some("envoy:1.32")
                            })
                        })
                    })
                    .count();
                Ok((st["updatedReadyPods"] == PODS && upgraded == PODS).then_some(()))
            }
        })
        .await?;
        for (i, uid) in uids.iter().enumerate() {
            let p = pods.get(&format!("rich-{i}")).await?;
            assert_eq!(
                p.metadata.uid.as_ref(),
                Some(uid),
                "rich-{i} was recreated, not upgraded in place"
            );
            let ann = p.metadata.annotations.clone().unwrap_or_default();
            assert!(
                ann["kruise.io/sidecarset-hash"].contains(&new_hash),
                "{ann:?}"
            );
        }
        anyhow::Ok(())
    }
    .await;
    drop(op);
    {
        use k8s_openapi::api::admissionregistration::v1::{
            MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
        };
        let config = format!("e2e-migrate-{s}");
        let _ = Api::<MutatingWebhookConfiguration>::all(c.clone())
            .delete(&config, &DeleteParams::default())
            .await;
        let _ = Api::<ValidatingWebhookConfiguration>::all(c.clone())
            .delete(&config, &DeleteParams::default())
            .await;
    }
    let _ = Api::<SidecarSet>::all(c.clone())
        .delete(&ss_name, &DeleteParams::default())
        .await;
    delete_namespace(&c, &ns).await;
    delete_namespace(&c, &op_ns).await;
    delete_namespace(&c, "kruise-system").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    result.map_err(|e| {
        let tail = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = tail.lines().rev().take(20).collect();
        anyhow::anyhow!(
            "{e:#}\noperator log (last lines, newest first):\n{}",
            tail.join("\n")
        )
    })
}
