//! SidecarSets validated as pods by the real API server (crates/operator/src/pod_validation.rs): a SidecarSet
//! whose containers, init containers or volumes no pod could have is refused at once, with the
//! SidecarSet's field path of what the API server reports, instead of being admitted and then
//! failing every pod it selects.

use serde_json::{Value, json};
use sidecarset_e2e::*;

fn sidecarset(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"e2e-app": name}});
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
           "metadata": {"name": name}, "spec": spec})
}

/// The refusal's message of creating `v`, or an error when it is admitted.
async fn refusal(c: &kube::Client, v: Value) -> anyhow::Result<String> {
    let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
    match create_sidecarset(c, v).await {
        Ok(_) => {
            delete_sidecarset(c, &name).await;
            anyhow::bail!("SidecarSet {name} was admitted")
        }
        Err(kube::Error::Api(s)) => Ok(s.message),
        Err(e) => Err(e.into()),
    }
}

#[tokio::test]
async fn sidecarsets_no_pod_could_have_are_refused_with_the_field_the_api_server_names()
-> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    // (what is wrong, spec, the field path the refusal must name, what the API server says)
    let cases = [
        (
            "imagePullPolicy",
            json!({"containers": [
                {"name": "ok", "image": "registry.local/ok:1"},
                {"name": "proxy", "image": "registry.local/proxy:1", "imagePullPolicy": "Sometimes"}]}),
            "spec.containers[1].imagePullPolicy",
            "Unsupported value: \"Sometimes\"",
        ),
        (
            "volume",
            json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1",
                                   "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}],
                   "volumes": [{"name": "other", "emptyDir": {}},
                               {"name": "cfg", "hostPath": {"path": "/etc/../root"}}]}),
            "spec.volumes[1].hostPath.path",
            "must not contain '..'",
        ),
        (
            "port",
            json!({"initContainers": [{"name": "native", "image": "registry.local/n:1",
                                       "restartPolicy": "Always",
                                       "ports": [{"containerPort": 70000}]}]}),
            "spec.initContainers[0].ports[0].containerPort",
            "between 1 and 65535",
        ),
        (
            "requests over limits",
            json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1",
                                   "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}),
            "spec.containers[0].resources.requests",
            "must be less than or equal to cpu limit",
        ),
    ];
    for (what, spec, field, says) in cases {
        let name = format!("e2e-podval-{}-{s}", what.to_lowercase().replace(" ", "-"));
        let message = refusal(&c, sidecarset(&name, spec))
            .await
            .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        assert!(
            message.contains(&format!("{field}: ")),
            "{what}: the refusal does not name {field}: {message}"
        );
        assert!(
            message.contains(says),
            "{what}: the refusal does not say {says:?}: {message}"
        );
        assert!(
            message.contains("the API server's pod validation"),
            "{what}: {message}"
        );
        assert!(
            !message.contains("template.spec") && !message.contains("PodTemplate"),
            "{what}: the refusal names the synthetic pod's fields: {message}"
        );
    }

    // A valid one (native sidecar, the pod's own volume shared, a volume of its own) is admitted.
    let name = format!("e2e-podval-ok-{s}");
    let created = create_sidecarset(
        &c,
        sidecarset(
            &name,
            json!({
                "initContainers": [{"name": "native", "image": "registry.local/n:1", "restartPolicy": "Always",
                                    "ports": [{"containerPort": 8080}],
                                    "readinessProbe": {"tcpSocket": {"port": 8080}}}],
                "containers": [{"name": "proxy", "image": "registry.local/proxy:1", "imagePullPolicy": "IfNotPresent",
                                "shareVolumePolicy": {"type": "enabled"},
                                "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"},
                                                 {"name": "pods-own", "mountPath": "/data"}],
                                "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}}],
                "volumes": [{"name": "cfg", "emptyDir": {}}]
            }),
        ),
    )
    .await;
    delete_sidecarset(&c, &name).await;
    created.map_err(|e| anyhow::anyhow!("a valid SidecarSet was refused: {e}"))?;

    // An update that makes a valid SidecarSet invalid is refused too.
    let name = format!("e2e-podval-upd-{s}");
    create_sidecarset(
        &c,
        sidecarset(
            &name,
            json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1"}]}),
        ),
    )
    .await?;
    let api = kube::Api::<sidecarset_core::api::SidecarSet>::all(c.clone());
    let patch = json!({"spec": {"containers": [{"name": "proxy", "image": "registry.local/proxy:1",
                                                 "imagePullPolicy": "Sometimes"}]}});
    let updated = api
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await;
    delete_sidecarset(&c, &name).await;
    match updated {
        Err(kube::Error::Api(st)) => assert!(
            st.message.contains("spec.containers[0].imagePullPolicy: "),
            "{}",
            st.message
        ),
        other => anyhow::bail!("the invalid update was not refused: {other:?}"),
    }
    Ok(())
}

/// HotUpgrade, refused by the real API server (through the validating webhook) where it cannot
/// work, naming the field: no empty image, on an init container, and a switch of upgradeType
/// on update (either way). A valid one is admitted, and a pod it selects is injected with the
/// pair (dry run: the API server validates the pod as it would store it).
#[tokio::test]
async fn hot_upgrade_bad_input_is_refused_naming_the_field() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let hot = |empty: Option<&str>| {
        let mut c = json!({"name": "proxy", "image": "registry.local/proxy:1",
                           "upgradeStrategy": {"upgradeType": "HotUpgrade"}});
        if let Some(e) = empty {
            c["upgradeStrategy"]["hotUpgradeEmptyImage"] = e.into();
        }
        c
    };
    let mut native = hot(Some("registry.local/empty:1"));
    native["restartPolicy"] = json!("Always");
    // (what, spec, the field the refusal names, what it says)
    let cases = [
        (
            "no-empty-image",
            json!({"containers": [hot(None)]}),
            "spec.containers[0].upgradeStrategy.hotUpgradeEmptyImage",
            "required with HotUpgrade",
        ),
        (
            "init-container",
            json!({"updateStrategy": {"type": "NotUpdate"}, "initContainers": [native],
                   "containers": [{"name": "c", "image": "registry.local/c:1"}]}),
            "spec.initContainers[0].upgradeStrategy.upgradeType",
            "HotUpgrade is for containers only",
        ),
    ];
    for (what, spec, field, says) in cases {
        let name = format!("e2e-hot-{what}-{s}");
        let message = refusal(&c, sidecarset(&name, spec))
            .await
            .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
        assert!(
            message.contains(&format!("{field}: ")) && message.contains(says),
            "{what}: the refusal does not name {field} with {says:?}: {message}"
        );
    }

    let api = kube::Api::<sidecarset_core::api::SidecarSet>::all(c.clone());
    for (from, to) in [("ColdUpgrade", "HotUpgrade"), ("HotUpgrade", "ColdUpgrade")] {
        let name = format!("e2e-hot-switch-{}-{s}", from.to_lowercase());
        let with = |t: &str| {
            json!({"containers": [{"name": "proxy", "image": "registry.local/proxy:1",
                "upgradeStrategy": {"upgradeType": t, "hotUpgradeEmptyImage": "registry.local/empty:1"}}]})
        };
        create_sidecarset(&c, sidecarset(&name, with(from))).await?;
        let updated = api
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&json!({"spec": with(to)})),
            )
            .await;
        if from == "HotUpgrade" {
            // Admitted: a pod it selects gets the pair, which the API server accepts.
            let ns = format!("e2e-hot-{s}");
            create_namespace(&c, &ns, json!({})).await?;
            let probe = pod("p", json!({"e2e-app": name}));
            let p = match wait_injectable(&c, &ns, &probe, "proxy-1", true).await {
                Ok(()) => dry_run(&c, &ns, &probe).await.map_err(anyhow::Error::from),
                Err(e) => Err(e),
            };
            delete_namespace(&c, &ns).await;
            let p = p?;
            assert_eq!(
                container_names(&p)[..2],
                ["proxy-1", "proxy-2"],
                "{:?}",
                container_names(&p)
            );
            let images: Vec<_> = p
                .spec
                .as_ref()
                .unwrap()
                .containers
                .iter()
                .map(|c| c.image.clone().unwrap_or_default())
                .collect();
            assert_eq!(
                images[..2],
                ["registry.local/proxy:1", "registry.local/empty:1"]
            );
            let ann = p.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                ann["kruise.io/sidecarset-working-hotupgrade-container"],
                r#"{"proxy":"proxy-1"}"#
            );
        }
        delete_sidecarset(&c, &name).await;
        match updated {
            Err(kube::Error::Api(st)) => assert!(
                st.message
                    .contains("spec.containers[0].upgradeStrategy.upgradeType: ")
                    && st.message.contains("is immutable"),
                "{from} -> {to}: {}",
                st.message
            ),
            other => anyhow::bail!("{from} -> {to} was not refused: {other:?}"),
        }
    }
    Ok(())
}
