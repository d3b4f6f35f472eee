//! Pods a SidecarSet selects that run without its sidecars (created before it, or while the
//! webhook was unreachable under failurePolicy Ignore) are counted in the SidecarSet's status
//! and reported once on their owner; recreated pods stop being counted.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::*;

async fn without(c: &kube::Client, ss: &str) -> anyhow::Result<Option<i32>> {
    let s = Api::<SidecarSet>::all(c.clone()).get(ss).await?;
    Ok(s.status.and_then(|s| s.pods_without_sidecars))
}

#[tokio::test]
async fn pods_running_without_their_sidecars_are_counted_and_reported_on_their_owner()
-> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-without-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let label = format!("without-{s}");
    // Pods first: a Deployment of 2 and a bare pod, before any SidecarSet selects them.
    create_web_deployment(&c, &ns, &label, 2).await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    pods.create(
        &PostParams::default(),
        &pod("solo", json!({"e2e-app": label})),
    )
    .await?;
    eventually(60, "3 pods", || {
        let pods = pods.clone();
        async move { Ok((pods.list(&ListParams::default()).await?.items.len() == 3).then_some(())) }
    })
    .await?;

    let ss = format!("e2e-without-{s}");
    create_sidecarset(
        &c,
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
            "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                     "containers": [{"name": "mesh", "image": "registry.local/mesh:1"}]}
        }),
    )
    .await?;
    eventually(30, "status.podsWithoutSidecars = 3", || {
        let (c, ss) = (c.clone(), ss.clone());
        async move { Ok((without(&c, &ss).await? == Some(3)).then_some(())) }
    })
    .await?;
    let events = eventually(
        30,
        "SidecarSetMissing Events on the ReplicaSet and the pod",
        || {
            let (c, ns) = (c.clone(), ns.clone());
            async move {
                let ev: Vec<Event> = Api::<Event>::namespaced(c, &ns)
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .filter(|e| e.reason.as_deref() == Some("SidecarSetMissing"))
                    .collect();
                let kinds: Vec<String> = ev
                    .iter()
                    .filter_map(|e| e.regarding.as_ref()?.kind.clone())
                    .collect();
                Ok(
                    (kinds.iter().any(|k| k == "ReplicaSet") && kinds.iter().any(|k| k == "Pod"))
                        .then_some(ev),
                )
            }
        },
    )
    .await?;
    assert_eq!(events.len(), 2, "one Event per owner: {events:#?}");
    let note = events[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("without this SidecarSet's sidecars")
            && note.contains("--evict-pods-without-sidecars"),
        "{note}"
    );
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));

    // Recreated: the bare pod comes back injected and is no longer counted.
    pods.delete("solo", &DeleteParams::default().grace_period(0))
        .await?;
    eventually(30, "status.podsWithoutSidecars = 2", || {
        let (c, ss) = (c.clone(), ss.clone());
        async move { Ok((without(&c, &ss).await? == Some(2)).then_some(())) }
    })
    .await?;
    let again = pods
        .create(
            &PostParams::default(),
            &pod("solo", json!({"e2e-app": label})),
        )
        .await?;
    assert!(container_names(&again).contains(&"mesh".to_string()));
    // The Deployment's pods rolled: every pod injected, nothing counted.
    pods.delete_collection(
        &DeleteParams::default().grace_period(0),
        &ListParams::default().labels("pod-template-hash"),
    )
    .await?;
    eventually(60, "no pod without its sidecars", || {
        let (c, ss) = (c.clone(), ss.clone());
        async move { Ok((without(&c, &ss).await?.is_none()).then_some(())) }
    })
    .await?;
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}
