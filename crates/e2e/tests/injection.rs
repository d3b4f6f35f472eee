//! Injection through a real API server: pods, Deployments, namespace scoping, native sidecars,
//! SidecarSet defaulting, validation and conflicts, server-side dry run.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::*;

#[tokio::test]
async fn bare_pod_is_injected_and_non_matching_pod_is_untouched() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-pod-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let ss = format!("e2e-mesh-{s}");
    create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
        "spec": {"selector": {"matchLabels": {"e2e-app": format!("web-{s}")}},
                 "containers": [{"name": "proxy", "image": "registry.local/proxy:1", "env": [{"name": "MODE", "value": "e2e"}]}],
                 "volumes": [{"name": "proxy-conf", "emptyDir": {}}]}
    })).await?;
    let probe = pod("probe", json!({"e2e-app": format!("web-{s}")}));
    wait_injectable(&c, &ns, &probe, "proxy", true).await?;

    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let created = pods
        .create(
            &PostParams::default(),
            &pod("web", json!({"e2e-app": format!("web-{s}")})),
        )
        .await?;
    assert_eq!(container_names(&created), ["proxy", "app"]);
    let proxy = &created.spec.as_ref().unwrap().containers[0];
    let env: Vec<(String, Option<String>)> = proxy
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    assert!(
        env.contains(&("IS_INJECTED".into(), Some("true".into()))),
        "{env:?}"
    );
    let ann = created.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(ann.get("kruise.io/sidecarset-injected-list"), Some(&ss));
    assert!(
        ann.get("kruise.io/sidecarset-hash")
            .is_some_and(|h| h.contains(&ss))
    );
    assert!(
        created
            .spec
            .as_ref()
            .unwrap()
            .volumes
            .iter()
            .flatten()
            .all(|v| v.name != "proxy-conf"),
        "unmounted volume added"
    );

    let other = pods
        .create(
            &PostParams::default(),
            &pod("other", json!({"e2e-app": "something-else"})),
        )
        .await?;
    assert_eq!(container_names(&other), ["app"]);
    assert!(
        !other
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("kruise.io/sidecarset-injected-list")
    );

    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}

#[tokio::test]
async fn deployment_pods_are_injected() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-deploy-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let ss = format!("e2e-logger-{s}");
    let label = format!("shop-{s}");
    create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                 "containers": [{"name": "logger", "image": "registry.local/logger:1", "podInjectPolicy": "AfterAppContainer"}]}
    })).await?;
    wait_injectable(
        &c,
        &ns,
        &pod("probe", json!({"e2e-app": label})),
        "logger",
        true,
    )
    .await?;

    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "shop"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"e2e-app": label}},
                 "template": {"metadata": {"labels": {"e2e-app": label}},
                              "spec": {"containers": [{"name": "app", "image": "registry.local/shop:1"}]}}}
    }))?;
    Api::<Deployment>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &deploy)
        .await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let lp = ListParams::default().labels(&format!("e2e-app={label}"));
    let list = eventually(60, "2 pods of the Deployment", || {
        let (pods, lp) = (pods.clone(), lp.clone());
        async move {
            let l = pods.list(&lp).await?;
            Ok((l.items.len() == 2).then_some(l.items))
        }
    })
    .await?;
    for p in &list {
        assert_eq!(container_names(p), ["app", "logger"], "pod {}", name_of(p));
    }
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}

#[tokio::test]
async fn namespace_and_namespace_selector_scoping_follow_label_changes() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let (ns_a, ns_b) = (format!("e2e-scope-a-{s}"), format!("e2e-scope-b-{s}"));
    create_namespace(&c, &ns_a, json!({})).await?;
    create_namespace(&c, &ns_b, json!({})).await?;
    let label = format!("scoped-{s}");
    let (by_name, by_labels) = (format!("e2e-by-name-{s}"), format!("e2e-by-labels-{s}"));
    create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": by_name},
        "spec": {"namespace": ns_a, "selector": {"matchLabels": {"e2e-app": label}},
                 "containers": [{"name": "only-a", "image": "registry.local/a:1"}]}
    })).await?;
    create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": by_labels},
        "spec": {"namespaceSelector": {"matchLabels": {format!("e2e-mesh-{s}"): "on"}},
                 "selector": {"matchLabels": {"e2e-app": label}},
                 "containers": [{"name": "meshed", "image": "registry.local/m:1"}]}
    })).await?;
    let p = pod("p", json!({"e2e-app": label}));
    wait_injectable(&c, &ns_a, &p, "only-a", true).await?;
    wait_injectable(&c, &ns_b, &p, "only-a", false).await?;
    wait_injectable(&c, &ns_b, &p, "meshed", false).await?;

    // Label namespace b at run time: its new pods get the sidecar; remove it: they do not.
    let nss: Api<Namespace> = Api::all(c.clone());
    let label_patch =
        |v: Option<&str>| json!({"metadata": {"labels": {format!("e2e-mesh-{s}"): v}}});
    nss.patch(
        &ns_b,
        &PatchParams::default(),
        &Patch::Merge(label_patch(Some("on"))),
    )
    .await?;
    wait_injectable(&c, &ns_b, &p, "meshed", true).await?;
    let created = Api::<Pod>::namespaced(c.clone(), &ns_b)
        .create(&PostParams::default(), &p)
        .await?;
    assert_eq!(container_names(&created), ["meshed", "app"]);
    nss.patch(
        &ns_b,
        &PatchParams::default(),
        &Patch::Merge(label_patch(None)),
    )
    .await?;
    wait_injectable(&c, &ns_b, &p, "meshed", false).await?;

    delete_sidecarset(&c, &by_name).await;
    delete_sidecarset(&c, &by_labels).await;
    delete_namespace(&c, &ns_a).await;
    delete_namespace(&c, &ns_b).await;
    Ok(())
}

#[tokio::test]
async fn native_sidecar_init_container_is_injected() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-native-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let ss = format!("e2e-native-{s}");
    let label = format!("native-{s}");
    create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                 "initContainers": [{"name": "native-proxy", "image": "registry.local/proxy:1", "restartPolicy": "Always"},
                                    {"name": "a-setup", "image": "registry.local/setup:1"}]}
    })).await?;
    let p = pod("p", json!({"e2e-app": label}));
    wait_injectable(&c, &ns, &p, "native-proxy", true).await?;
    let created = Api::<Pod>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &p)
        .await?;
    let inits = &created
        .spec
        .as_ref()
        .unwrap()
        .init_containers
        .clone()
        .unwrap();
    assert_eq!(
        inits.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["a-setup", "native-proxy"]
    );
    assert_eq!(inits[1].restart_policy.as_deref(), Some("Always"));
    assert_eq!(inits[0].restart_policy, None);
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}

#[tokio::test]
async fn sidecarsets_are_defaulted_and_invalid_or_conflicting_ones_refused() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let base = format!("e2e-base-{s}");
    let created = create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": base},
        "spec": {"selector": {"matchLabels": {"e2e-app": format!("v-{s}")}},
                 "containers": [{"name": format!("envoy-{s}"), "image": "registry.local/envoy:1"}]}
    })).await?;
    // Defaults from the mutating webhook, visible through the API server.
    let us = &created.spec.update_strategy;
    assert_eq!(serde_json::to_value(us.type_)?, json!("RollingUpdate"));
    assert_eq!(created.spec.revision_history_limit, Some(10));
    assert!(
        created
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("kruise.io/sidecarset-hash")
    );

    let invalid = create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": format!("e2e-invalid-{s}")},
        "spec": {"selector": {"matchLabels": {"e2e-app": "x"}},
                 "containers": [{"name": "c", "image": "i:1", "volumeMounts": [{"name": "missing", "mountPath": "/m"}]}]}
    })).await;
    let msg = invalid.expect_err("invalid SidecarSet refused").to_string();
    assert!(
        msg.contains("spec.containers[0].volumeMounts[0].name") && msg.contains("spec.volumes"),
        "{msg}"
    );

    let no_selector = create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": format!("e2e-nosel-{s}")},
        "spec": {"containers": [{"name": "c", "image": "i:1"}]}
    })).await;
    let msg = no_selector.expect_err("selector required").to_string();
    assert!(msg.contains("spec.selector"), "{msg}");

    // Overlapping selectors (Exists on another key can match the same pod) with the same name.
    let conflicting = sidecarset_operator_wait(&c, &base).await.and(create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": format!("e2e-clash-{s}")},
        "spec": {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                 "containers": [{"name": format!("envoy-{s}"), "image": "registry.local/envoy:2"}]}
    })).await.map_err(anyhow::Error::from));
    let msg = conflicting
        .expect_err("conflicting SidecarSet refused")
        .to_string();
    assert!(
        msg.contains(&base) && msg.contains("spec.containers[0].name"),
        "{msg}"
    );

    delete_sidecarset(&c, &base).await;
    Ok(())
}

/// Waits until the operator's index holds `name` (its conflict check reads the index).
async fn sidecarset_operator_wait(c: &kube::Client, name: &str) -> anyhow::Result<()> {
    let api: Api<SidecarSet> = Api::all(c.clone());
    api.get(name).await?;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    Ok(())
}

#[tokio::test]
async fn server_side_dry_run_shows_the_injection_and_creates_nothing() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-dry-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let ss = format!("e2e-dry-{s}");
    let label = format!("dry-{s}");
    create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": [{"name": "dry", "image": "registry.local/d:1"}]}
    })).await?;
    let p = pod("dry-pod", json!({"e2e-app": label}));
    wait_injectable(&c, &ns, &p, "dry", true).await?;
    let shown = dry_run(&c, &ns, &p).await?;
    assert_eq!(container_names(&shown), ["dry", "app"]);
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    assert!(
        pods.get_opt("dry-pod").await?.is_none(),
        "dry run created the pod"
    );
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}

#[tokio::test]
async fn a_pinned_revision_is_injected() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-pin-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let ss = format!("e2e-pin-{s}");
    let label = format!("pin-{s}");
    create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": [{"name": "pinned", "image": "registry.local/pinned:1"}]}
    })).await?;
    let sets: Api<SidecarSet> = Api::all(c.clone());
    let r1 = eventually(30, "the first revision", || {
        let (sets, ss) = (sets.clone(), ss.clone());
        async move { Ok(sets.get(&ss).await?.status.and_then(|s| s.latest_revision)) }
    })
    .await?;
    // The pin must name a revision the operator knows (validation), which its revision watch
    // learns a moment after the status names it.
    eventually(10, "the pin to be accepted", || {
        let (sets, ss, r1) = (sets.clone(), ss.clone(), r1.clone());
        async move {
            Ok(sets
                .patch(
                    &ss,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {
                    "containers": [{"name": "pinned", "image": "registry.local/pinned:2"}],
                    "injectionStrategy": {"revision": {"revisionName": r1}}}})),
                )
                .await
                .ok()
                .map(|_| ()))
        }
    })
    .await?;
    let p = pod("p", json!({"e2e-app": label}));
    let got = eventually(30, "a pod injected with the pinned revision", || {
        let (c, ns, p) = (c.clone(), ns.clone(), p.clone());
        async move {
            let mut probe = p.clone();
            probe.metadata.name = None;
            probe.metadata.generate_name = Some("pin-".into());
            let d = dry_run(&c, &ns, &probe).await?;
            let image = d
                .spec
                .as_ref()
                .and_then(|s| s.containers.iter().find(|c| c.name == "pinned"))
                .and_then(|c| c.image.clone());
            Ok((image.as_deref() == Some("registry.local/pinned:1")).then_some(d))
        }
    })
    .await?;
    let hash = got
        .metadata
        .annotations
        .unwrap_or_default()
        .get("kruise.io/sidecarset-hash")
        .cloned()
        .unwrap_or_default();
    assert!(
        hash.contains(&r1),
        "the hash annotation records the pinned revision {r1}: {hash}"
    );
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}

/// The image a dry run of a pod labelled `labels` gets for `container`.
async fn injected_image(
    c: &kube::Client,
    ns: &str,
    labels: serde_json::Value,
    container: &str,
) -> anyhow::Result<Option<String>> {
    let mut probe = pod("probe", labels);
    probe.metadata.name = None;
    probe.metadata.generate_name = Some("probe-".into());
    let d = dry_run(c, ns, &probe).await?;
    Ok(d.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|x| x.name == container))
        .and_then(|x| x.image.clone()))
}

#[tokio::test]
async fn the_canary_flow_partial_injects_the_latest_into_canaries_and_the_pinned_version_elsewhere()
-> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-canary-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let ss = format!("e2e-canary-{s}");
    let label = format!("canary-{s}");
    // v1, with its custom version.
    create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": ss, "labels": {"apps.kruise.io/sidecarset-custom-version": "v1"}},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": [{"name": "proxy", "image": "registry.local/proxy:1"}]}
    })).await?;
    let sets: Api<SidecarSet> = Api::all(c.clone());
    let v1 = eventually(30, "the v1 revision", || {
        let (sets, ss) = (sets.clone(), ss.clone());
        async move { Ok(sets.get(&ss).await?.status.and_then(|s| s.latest_revision)) }
    })
    .await?;
    // v2 for the canaries only (OpenKruise's documented flow): the new spec, its custom version
    // added with it, v1 pinned with policy Partial, the update selector naming the canaries.
    eventually(10, "the v2 spec to be accepted", || {
        let (sets, ss) = (sets.clone(), ss.clone());
        async move {
            Ok(sets.patch(&ss, &PatchParams::default(), &Patch::Merge(json!({
                "metadata": {"labels": {"apps.kruise.io/sidecarset-custom-version": "v2"}},
                "spec": {"containers": [{"name": "proxy", "image": "registry.local/proxy:2"}],
                         "injectionStrategy": {"revision": {"customVersion": "v1", "policy": "Partial"}},
                         "updateStrategy": {"selector": {"matchLabels": {"canary": "true"}}}}}))).await.ok().map(|_| ()))
        }
    })
    .await?;
    let canary = json!({"e2e-app": label, "canary": "true"});
    let stable = json!({"e2e-app": label});
    eventually(30, "canaries on v2 and the others on v1", || {
        let (c, ns, canary, stable) = (c.clone(), ns.clone(), canary.clone(), stable.clone());
        async move {
            let a = injected_image(&c, &ns, canary, "proxy").await?;
            let b = injected_image(&c, &ns, stable, "proxy").await?;
            Ok((a.as_deref() == Some("registry.local/proxy:2")
                && b.as_deref() == Some("registry.local/proxy:1"))
            .then_some(()))
        }
    })
    .await?;
    // The v2 revision carries its custom version (the label added with the change reached it),
    // and a pod pinned to v1 records v1's revision.
    let v2 = eventually(30, "the v2 revision", || {
        let (sets, ss, v1) = (sets.clone(), ss.clone(), v1.clone());
        async move {
            Ok(sets
                .get(&ss)
                .await?
                .status
                .and_then(|s| s.latest_revision)
                .filter(|r| *r != v1))
        }
    })
    .await?;
    let revs: Api<k8s_openapi::api::apps::v1::ControllerRevision> =
        Api::namespaced(c.clone(), &operator_namespace());
    let labels = revs.get(&v2).await?.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("apps.kruise.io/sidecarset-custom-version")
            .map(String::as_str),
        Some("v2")
    );
    let mut p = pod("stable", stable.clone());
    p.metadata.name = Some("stable".into());
    let created = Api::<Pod>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &p)
        .await?;
    let ann = created.metadata.annotations.unwrap_or_default();
    assert!(ann["kruise.io/sidecarset-hash"].contains(&v1), "{ann:?}");
    // A pin to a version that has no revision is refused, naming the field.
    let err = sets
        .patch(
            &ss,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"injectionStrategy": {"revision": {"customVersion": "v9"}}}}),
            ),
        )
        .await
        .expect_err("an unknown custom version is refused");
    assert!(
        err.to_string()
            .contains("spec.injectionStrategy.revision.customVersion"),
        "{err}"
    );
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}
