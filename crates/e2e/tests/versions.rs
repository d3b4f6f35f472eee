//! Both API versions through a real API server: v1beta1 manifests apply with strict field
//! validation, are defaulted and injected like v1alpha1 ones, and every object reads in either
//! version through the conversion webhook (`/convert`).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sidecarset_core::api::SidecarSet;
use sidecarset_core::api::v1beta1::SidecarSet as SidecarSetV1beta1;
use sidecarset_e2e::*;

fn strict_apply() -> PatchParams {
    PatchParams::apply("e2e").validation_strict()
}

#[tokio::test]
async fn a_v1beta1_manifest_applies_strictly_reads_as_v1alpha1_and_injects() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-beta-{s}");
    create_namespace(&c, &ns, json!({"e2e-beta": s})).await?;
    let name = format!("e2e-beta-{s}");
    let manifest = json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet", "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"e2e-app": format!("beta-{s}")}},
            "namespaceSelector": {"matchLabels": {"e2e-beta": s}},
            "customVersion": "canary-1",
            "containers": [{"name": "proxy", "image": "registry.local/proxy:1",
                            "podInjectPolicy": "AfterAppContainer",
                            "shareVolumePolicy": {"type": "disabled"},
                            "upgradeStrategy": {"upgradeType": "ColdUpgrade"}}],
            "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": "50%"},
            "revisionHistoryLimit": 5
        }
    });
    let beta: Api<SidecarSetV1beta1> = Api::all(c.clone());
    let stored = beta
        .patch(&name, &strict_apply(), &Patch::Apply(&manifest))
        .await?;
    // Defaulted by our webhook in v1beta1 terms, hashes recorded.
    assert_eq!(stored.spec.custom_version.as_deref(), Some("canary-1"));
    assert_eq!(
        stored.spec.update_strategy.partition,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0))
    );
    let ann = stored.metadata.annotations.clone().unwrap_or_default();
    assert!(ann.contains_key("kruise.io/sidecarset-hash"), "{ann:?}");

    // The same object as v1alpha1, converted by the operator's /convert.
    let alpha = Api::<SidecarSet>::all(c.clone()).get(&name).await?;
    assert_eq!(
        alpha
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .get("apps.kruise.io/sidecarset-custom-version")
            .map(String::as_str),
        Some("canary-1")
    );
    assert_eq!(alpha.spec.containers[0].container.name, "proxy");
    assert_eq!(alpha.spec.namespace, None);

    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let probe = pod("probe", json!({"e2e-app": format!("beta-{s}")}));
    wait_injectable(&c, &ns, &probe, "proxy", true).await?;
    let created = pods
        .create(
            &PostParams::default(),
            &pod("web", json!({"e2e-app": format!("beta-{s}")})),
        )
        .await?;
    assert_eq!(container_names(&created), ["app", "proxy"]);

    // Strict validation knows each version's fields: spec.namespace is v1alpha1 only.
    let mut with_namespace = manifest.clone();
    with_namespace["spec"]["namespace"] = json!(ns);
    let err = beta
        .patch(&name, &strict_apply(), &Patch::Apply(&with_namespace))
        .await
        .expect_err("spec.namespace is not a v1beta1 field");
    assert!(format!("{err}").contains("namespace"), "{err}");

    delete_sidecarset(&c, &name).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}

#[tokio::test]
async fn a_v1alpha1_namespace_is_a_namespace_selector_in_v1beta1_and_comes_back()
-> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-alpha-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let name = format!("e2e-alpha-{s}");
    let manifest = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": name, "labels": {"apps.kruise.io/sidecarset-custom-version": "v9"}},
        "spec": {"selector": {"matchLabels": {"e2e-app": format!("alpha-{s}")}}, "namespace": ns,
                 "containers": [{"name": "proxy", "image": "registry.local/proxy:1"}]}
    });
    let alpha: Api<SidecarSet> = Api::all(c.clone());
    alpha
        .patch(&name, &strict_apply(), &Patch::Apply(&manifest))
        .await?;
    let stored: Value =
        serde_json::to_value(Api::<SidecarSetV1beta1>::all(c.clone()).get(&name).await?)?;
    assert_eq!(
        stored["spec"]["namespaceSelector"],
        json!({"matchLabels": {"kubernetes.io/metadata.name": ns}})
    );
    assert_eq!(stored["spec"]["customVersion"], "v9");
    assert!(
        stored["metadata"]["labels"]
            .get("apps.kruise.io/sidecarset-custom-version")
            .is_none()
    );
    let back = alpha.get(&name).await?;
    assert_eq!(back.spec.namespace.as_deref(), Some(ns.as_str()));
    assert_eq!(back.spec.namespace_selector, None);

    // It selects the namespace it names, and only that one.
    let probe = pod("probe", json!({"e2e-app": format!("alpha-{s}")}));
    wait_injectable(&c, &ns, &probe, "proxy", true).await?;
    let other = format!("e2e-alpha-other-{s}");
    create_namespace(&c, &other, json!({})).await?;
    wait_injectable(&c, &other, &probe, "proxy", false).await?;

    delete_sidecarset(&c, &name).await;
    delete_namespace(&c, &ns).await;
    delete_namespace(&c, &other).await;
    Ok(())
}
