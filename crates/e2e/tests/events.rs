//! Events for pods a matching SidecarSet was not injected into: on the pod's controller (or the
//! pod), once per object, reason and SidecarSet, never for a dry run.

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::*;

async fn events(c: &kube::Client, ns: &str, reason: &str) -> anyhow::Result<Vec<Event>> {
    let l = Api::<Event>::namespaced(c.clone(), ns)
        .list(&ListParams::default())
        .await?;
    Ok(l.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect())
}

/// A SidecarSet injecting a container "mesh" into pods labelled `e2e-app: label`.
async fn create_mesh(c: &kube::Client, name: &str, label: &str) -> kube::Result<SidecarSet> {
    create_sidecarset(
        c,
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                     "containers": [{"name": "mesh", "image": "registry.local/mesh:1"}]}
        }),
    )
    .await
}

fn regarding(e: &Event) -> (String, String) {
    let r = e.regarding.clone().unwrap_or_default();
    (r.kind.unwrap_or_default(), r.name.unwrap_or_default())
}

#[tokio::test]
async fn paused_injection_is_reported_on_the_pod_and_once_on_the_replicaset() -> anyhow::Result<()>
{
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-events-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let ss = format!("e2e-paused-{s}");
    let label = format!("paused-{s}");
    create_mesh(&c, &ss, &label).await?;
    let probe = pod("probe", json!({"e2e-app": label}));
    // Known to the operator first, then paused: its pods are matched but not injected.
    wait_injectable(&c, &ns, &probe, "mesh", true).await?;
    Api::<SidecarSet>::all(c.clone())
        .patch(
            &ss,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"injectionStrategy": {"paused": true}}})),
        )
        .await?;
    wait_injectable(&c, &ns, &probe, "mesh", false).await?;

    // A dry run: no Event may name it.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(c.clone(), &ns);
    dry_run(&c, &ns, &pod("dry", json!({"e2e-app": label}))).await?;
    // A bare pod: the Event is on the pod.
    pods.create(
        &PostParams::default(),
        &pod("solo", json!({"e2e-app": label})),
    )
    .await?;
    // A Deployment of 3: one Event, on its ReplicaSet.
    create_web_deployment(&c, &ns, &label, 3).await?;
    eventually(60, "3 pods of the Deployment", || {
        let pods = pods.clone();
        let lp = ListParams::default().labels(&format!("e2e-app={label}"));
        async move {
            let l = pods.list(&lp).await?;
            Ok((l.items.iter().filter(|p| name_of(*p) != "solo").count() == 3).then_some(()))
        }
    })
    .await?;
    let found = eventually(
        20,
        "SidecarSetPaused Events on the pod and the ReplicaSet",
        || {
            let (c, ns) = (c.clone(), ns.clone());
            async move {
                let ev = events(&c, &ns, "SidecarSetPaused").await?;
                let on_pod = ev
                    .iter()
                    .any(|e| regarding(e) == ("Pod".into(), "solo".into()));
                let on_rs = ev.iter().any(|e| regarding(e).0 == "ReplicaSet");
                Ok((on_pod && on_rs).then_some(ev))
            }
        },
    )
    .await?;
    // The queue is drained in order: anything about the dry run would be there by now.
    let rs_events: Vec<&Event> = found
        .iter()
        .filter(|e| regarding(e).0 == "ReplicaSet")
        .collect();
    assert_eq!(rs_events.len(), 1, "one Event for 3 pods: {rs_events:#?}");
    assert!(
        rs_events[0]
            .regarding
            .as_ref()
            .unwrap()
            .name
            .as_deref()
            .unwrap()
            .starts_with("web-")
    );
    assert!(
        found.iter().all(|e| regarding(e).1 != "dry"),
        "an Event for a dry run: {found:#?}"
    );
    assert_eq!(found.len(), 2, "{found:#?}");
    let solo = found.iter().find(|e| regarding(e).1 == "solo").unwrap();
    let note = solo.note.clone().unwrap_or_default();
    assert!(
        note.contains(&format!("SidecarSet {ss:?} matches pod {ns}/solo"))
            && note.contains("injectionStrategy.paused"),
        "{note}"
    );
    assert_eq!(solo.type_.as_deref(), Some("Normal"));
    assert_eq!(
        solo.related.as_ref().and_then(|r| r.name.clone()),
        Some(ss.clone())
    );
    assert_eq!(
        solo.reporting_controller.as_deref(),
        Some("sidecarset-operator/webhook")
    );
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}

#[tokio::test]
async fn a_sidecarset_selecting_a_pod_in_an_excluded_namespace_is_reported() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    // The operator's own namespace is excluded: the webhooks never see its pods, the controller
    // does.
    let excluded = operator_namespace();
    let ss = format!("e2e-excl-{s}");
    let label = format!("excl-{s}");
    create_mesh(&c, &ss, &label).await?;
    wait_injectable(
        &c,
        "default",
        &pod("probe", json!({"e2e-app": label})),
        "mesh",
        true,
    )
    .await?;
    let name = format!("excluded-{s}");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(c.clone(), &excluded);
    let created = pods
        .create(
            &PostParams::default(),
            &pod(&name, json!({"e2e-app": label})),
        )
        .await?;
    let result = async {
        anyhow::ensure!(
            !container_names(&created).contains(&"mesh".to_string()),
            "a pod in the excluded namespace {excluded} was injected"
        );
        let ev = eventually(20, "a SidecarSetNamespaceExcluded Event on the pod", || {
            let (c, excluded, name) = (c.clone(), excluded.clone(), name.clone());
            async move {
                let ev = events(&c, &excluded, "SidecarSetNamespaceExcluded").await?;
                Ok(ev
                    .into_iter()
                    .find(|e| regarding(e) == ("Pod".into(), name.clone())))
            }
        })
        .await?;
        let note = ev.note.clone().unwrap_or_default();
        anyhow::ensure!(
            note.contains(&format!("SidecarSet {ss:?} matches pod {excluded}/{name}"))
                && note.contains(&format!("namespace {excluded} is excluded")),
            "{note}"
        );
        anyhow::ensure!(ev.related.as_ref().and_then(|r| r.name.clone()) == Some(ss.clone()));
        anyhow::Ok(())
    }
    .await;
    let _ = pods
        .delete(&name, &kube::api::DeleteParams::default())
        .await;
    delete_sidecarset(&c, &ss).await;
    result
}

// Each replica deduplicates in memory; across replicas, the Event's name (object, reason,
// SidecarSet, 10-minute window) makes the second create fail with AlreadyExists.
#[tokio::test]
async fn two_replicas_record_one_event_for_the_same_skip() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ObjectReference;
    use sidecarset_core::inject::{SkipReason, Skipped};
    use sidecarset_operator::events;
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-events-replicas-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    // Both records must fall in one window: not right before its end.
    let window = events::REPEAT_AFTER.as_secs();
    let left = window - jiff::Timestamp::now().as_second() as u64 % window;
    if left < 10 {
        tokio::time::sleep(std::time::Duration::from_secs(left + 1)).await;
    }
    let notice = events::SkipNotice {
        regarding: ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("ReplicaSet".into()),
            namespace: Some(ns.clone()),
            name: Some("web-5f7c9".into()),
            uid: Some(format!("uid-{s}")),
            ..Default::default()
        },
        pod: format!("{ns}/web-5f7c9-"),
        skipped: vec![Skipped {
            sidecarset: format!("e2e-mesh-{s}"),
            reason: SkipReason::Paused,
            detail: "its injectionStrategy.paused is true".into(),
        }],
    };
    let mut tasks = Vec::new();
    for replica in ["replica-a", "replica-b"] {
        let (tx, rx) = events::queue();
        tx.send(notice.clone()).await?;
        drop(tx);
        tasks.push(tokio::spawn(events::record(c.clone(), rx, replica.into())));
    }
    for t in tasks {
        t.await?;
    }
    let got = events(&c, &ns, "SidecarSetPaused").await?;
    let result = (|| {
        anyhow::ensure!(
            got.len() == 1,
            "{} Events for one skip seen by two replicas: {:?}",
            got.len(),
            got.iter()
                .map(|e| (&e.metadata.name, &e.reporting_instance))
                .collect::<Vec<_>>()
        );
        anyhow::ensure!(regarding(&got[0]) == ("ReplicaSet".into(), "web-5f7c9".into()));
        Ok(())
    })();
    delete_namespace(&c, &ns).await;
    result
}
