//! An in-place upgrade to an image that cannot be pulled, on kwok's model of a kubelet
//! (hack/kwok-stages.yaml: an image containing "unpullable" fails as measured on a real kubelet,
//! see crates/e2e/tests/real_node.rs): the status keeps the old image, the rollout stops at
//! maxUnavailable and says which pod, and fixing the image reaches every pod, the stuck one too.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::*;
use std::time::{Duration, Instant};

fn sidecar(p: &Pod) -> Option<ContainerStatus> {
    let s = p.status.as_ref()?;
    s.container_statuses
        .iter()
        .flatten()
        .chain(s.init_container_statuses.iter().flatten())
        .find(|c| c.name == "proxy")
        .cloned()
}

fn spec_image(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == "proxy")
        })
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

async fn stops_and_resumes(native: bool) -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let tag = if native { "nunpull" } else { "unpull" };
    let (ns, ss, label) = (
        format!("e2e-{tag}-{s}"),
        format!("e2e-{tag}-{s}"),
        format!("{tag}-{s}"),
    );
    create_namespace(&c, &ns, json!({})).await?;
    let list = if native {
        "initContainers"
    } else {
        "containers"
    };
    let mut proxy = json!({"name": "proxy", "image": "registry.local/proxy:1"});
    if native {
        proxy["restartPolicy"] = json!("Always");
    }
    create_sidecarset(&c, json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}}, list: [proxy], "updateStrategy": {"maxUnavailable": 1}}})).await?;
    wait_injectable(
        &c,
        &ns,
        &pod("probe", json!({"e2e-app": label})),
        "proxy",
        true,
    )
    .await?;
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "app"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"e2e-app": label}},
                 "template": {"metadata": {"labels": {"e2e-app": label}},
                              "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]}}}
    }))?;
    Api::<Deployment>::namespaced(c.clone(), &ns)
        .create(&PostParams::default(), &deploy)
        .await?;
    let ssapi = Api::<SidecarSet>::all(c.clone());
    let pods_api = Api::<Pod>::namespaced(c.clone(), &ns);
    let status = || async {
        let x = ssapi.get(&ss).await?;
        let g = x.metadata.generation;
        let st = serde_json::to_value(x.status.unwrap_or_default())?;
        anyhow::Ok((st["observedGeneration"].as_i64() == g, st))
    };
    let wait = |what: &'static str, f: fn(&serde_json::Value) -> bool| {
        let status = &status;
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let (current, st) = status().await?;
                if current && f(&st) {
                    return anyhow::Ok(st);
                }
                anyhow::ensure!(Instant::now() < deadline, "{what}: {st}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    wait("3 pods injected and ready", |s| s["updatedReadyPods"] == 3).await?;
    let set = |image: &str| {
        let patch =
            json!([{"op": "replace", "path": format!("/spec/{list}/0/image"), "value": image}]);
        let ssapi = ssapi.clone();
        let ss = ss.clone();
        async move {
            ssapi
                .patch(
                    &ss,
                    &PatchParams::default(),
                    &Patch::<()>::Json(serde_json::from_value(patch)?),
                )
                .await?;
            anyhow::Ok(())
        }
    };
    set("registry.local/proxy:unpullable").await?;
    wait("one pod upgraded", |s| s["updatedPods"] == 1).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let stuck = loop {
        let pods = pods_api
            .list(&ListParams::default().labels(&format!("e2e-app={label}")))
            .await?;
        let failing = pods.items.iter().find(|p| {
            spec_image(p).ends_with(":unpullable")
                && sidecar(p).is_some_and(|s| {
                    let st = s.state.clone().unwrap_or_default();
                    s.image == "registry.local/proxy:1"
                        && !s.ready
                        && if native {
                            st.terminated
                                .is_some_and(|t| t.reason.as_deref() == Some("Completed"))
                        } else {
                            st.waiting
                                .is_some_and(|w| w.reason.as_deref() == Some("ErrImagePull"))
                        }
                })
        });
        if let Some(p) = failing {
            break p.metadata.name.clone().unwrap_or_default();
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no pod shows the pull failure with the old image"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, st) = status().await?;
    assert_eq!(
        st["updatedPods"], 1,
        "the rollout must stop at maxUnavailable 1: {st}"
    );
    let events = Api::<Event>::all(c.clone())
        .list(&ListParams::default().fields(&format!("involvedObject.name={ss}")))
        .await?;
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("RolloutWaiting")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("maxUnavailable") && m.contains(&stuck))),
        "no RolloutWaiting Event naming maxUnavailable and {stuck}: {:?}",
        events.items.iter().map(|e| &e.message).collect::<Vec<_>>()
    );
    // Fixing the image reaches every pod, the stuck one too.
    set("registry.local/proxy:3").await?;
    wait("every pod on proxy:3", |s| {
        s["updatedPods"] == 3 && s["updatedReadyPods"] == 3
    })
    .await?;
    for p in pods_api
        .list(&ListParams::default().labels(&format!("e2e-app={label}")))
        .await?
        .items
    {
        assert_eq!(
            sidecar(&p).map(|s| s.image),
            Some("registry.local/proxy:3".into())
        );
    }
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}

#[tokio::test]
async fn unpullable_container_sidecar_stops_the_rollout_and_a_fix_reaches_every_pod()
-> anyhow::Result<()> {
    stops_and_resumes(false).await
}

#[tokio::test]
async fn unpullable_native_sidecar_stops_the_rollout_and_a_fix_reaches_every_pod()
-> anyhow::Result<()> {
    stops_and_resumes(true).await
}
