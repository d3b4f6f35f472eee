//! Opt-outs a SidecarSet allows, and "why not injected" Events, through the API server: a pod
//! (or its namespace) declines a SidecarSet annotated `sidecarset-operator.io/opt-out: allowed`
//! and is created without it, with a `SidecarSetOptedOut` Event and the same reason in
//! `explain`, and is never counted as missing its sidecars (so never evicted for them); a
//! mandatory SidecarSet ignores the same labels; a container-name conflict gets its Event on the
//! pod. The tools run as the binary a user runs (`SSO_E2E_BIN`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use sidecarset_core::api::SidecarSet;
use sidecarset_e2e::commands::bin;
use sidecarset_e2e::*;

/// A SidecarSet injecting `container` into pods labelled `e2e-app: label`; `allows`: it lets
/// pods and namespaces opt out.
fn sidecarset(name: &str, label: &str, container: &str, allows: bool) -> Value {
    let annotations = if allows {
        json!({"sidecarset-operator.io/opt-out": "allowed"})
    } else {
        json!({})
    };
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                 "containers": [{"name": container, "image": format!("registry.local/{container}:1")}]}
    })
}

/// The Events of `reason` on the pod `name`.
async fn pod_events(
    c: &kube::Client,
    ns: &str,
    name: &str,
    reason: &str,
) -> anyhow::Result<Vec<Event>> {
    let l = Api::<Event>::namespaced(c.clone(), ns)
        .list(&ListParams::default())
        .await?;
    Ok(l.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Pod") && r.name.as_deref() == Some(name)
            })
        })
        .collect())
}

/// Waits for the one Event of `reason` on the pod naming the SidecarSet `ss`.
async fn wait_event(
    c: &kube::Client,
    ns: &str,
    name: &str,
    reason: &str,
    ss: &str,
) -> anyhow::Result<Event> {
    eventually(20, &format!("a {reason} Event on pod {ns}/{name}"), || {
        let (c, ns, name, ss) = (c.clone(), ns.to_string(), name.to_string(), ss.to_string());
        async move {
            Ok(pod_events(&c, &ns, &name, reason)
                .await?
                .into_iter()
                .find(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some(&ss)))
        }
    })
    .await
}

/// `explain pod NS/NAME -o json`, parsed; the verdict on `ss`.
async fn explain(ns: &str, name: &str, ss: &str) -> anyhow::Result<Value> {
    let b = bin();
    let args = vec![
        "explain".to_string(),
        "pod".into(),
        format!("{ns}/{name}"),
        "-o".into(),
        "json".into(),
    ];
    let out =
        tokio::task::spawn_blocking(move || std::process::Command::new(b).args(&args).output())
            .await??;
    anyhow::ensure!(
        out.status.success(),
        "explain {ns}/{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e: Value = serde_json::from_slice(&out.stdout)?;
    e["sidecarsets"]
        .as_array()
        .and_then(|l| l.iter().find(|v| v["sidecarset"] == ss))
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("{ss} not in the explanation: {e:#}"))
}

async fn without(c: &kube::Client, ss: &str) -> anyhow::Result<Option<i32>> {
    let s = Api::<SidecarSet>::all(c.clone()).get(ss).await?;
    Ok(s.status.and_then(|s| s.pods_without_sidecars))
}

#[tokio::test]
async fn a_pod_declines_an_allowing_sidecarset_and_not_a_mandatory_one() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-optout-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let label = format!("optout-{s}");
    let (allowing, mandatory) = (format!("e2e-optional-{s}"), format!("e2e-mandatory-{s}"));
    let declines = json!({
        "e2e-app": label,
        format!("inject.sidecarset-operator.io/{allowing}"): "disabled",
        "sidecarset-operator.io/inject": "disabled",
    });
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let result = async {
        // Before the SidecarSets: one pod that declines, one that does not.
        pods.create(&PostParams::default(), &pod("early-out", declines.clone()))
            .await?;
        pods.create(
            &PostParams::default(),
            &pod("early", json!({"e2e-app": label})),
        )
        .await?;
        create_sidecarset(&c, sidecarset(&allowing, &label, "mesh", true)).await?;
        create_sidecarset(&c, sidecarset(&mandatory, &label, "agent", false)).await?;
        wait_injectable(
            &c,
            &ns,
            &pod("probe", json!({"e2e-app": label})),
            "mesh",
            true,
        )
        .await?;
        wait_injectable(
            &c,
            &ns,
            &pod("probe", json!({"e2e-app": label})),
            "agent",
            true,
        )
        .await?;

        let created = pods
            .create(&PostParams::default(), &pod("out", declines.clone()))
            .await?;
        let names = container_names(&created);
        anyhow::ensure!(
            !names.contains(&"mesh".to_string()),
            "the pod declined {allowing}, which allows it, but got its sidecar: {names:?}"
        );
        anyhow::ensure!(
            names.contains(&"agent".to_string()),
            "{mandatory} is mandatory, the opt-out must be ignored: {names:?}"
        );

        let ev = wait_event(&c, &ns, "out", "SidecarSetOptedOut", &allowing).await?;
        let note = ev.note.clone().unwrap_or_default();
        anyhow::ensure!(
            ev.type_.as_deref() == Some("Normal")
                && note.contains(&format!("SidecarSet {allowing:?} matches pod {ns}/out"))
                && note.contains(&format!(
                    "inject.sidecarset-operator.io/{allowing}=disabled"
                )),
            "{ev:#?}"
        );

        let v = explain(&ns, "out", &allowing).await?;
        anyhow::ensure!(
            v["injection"] == "skipped"
                && v["reason"] == "optedOut"
                && v["event"] == "SidecarSetOptedOut"
                && v["detail"]
                    .as_str()
                    .unwrap_or("")
                    .contains("declined by the pod's label"),
            "{v:#}"
        );
        let v = explain(&ns, "out", &mandatory).await?;
        anyhow::ensure!(
            v["injection"] == "injected"
                && v["detail"].as_str().unwrap_or("").contains("is ignored"),
            "{v:#}"
        );

        // The pods created before: the declining one does not miss the allowing SidecarSet's
        // sidecars (never reported nor evicted for them); the mandatory one misses both.
        eventually(
            30,
            "podsWithoutSidecars: 1 (allowing), 2 (mandatory)",
            || {
                let (c, a, m) = (c.clone(), allowing.clone(), mandatory.clone());
                async move {
                    let (a, m) = (without(&c, &a).await?, without(&c, &m).await?);
                    Ok((a == Some(1) && m == Some(2)).then_some(()))
                }
            },
        )
        .await?;
        wait_event(&c, &ns, "early", "SidecarSetMissing", &allowing).await?;
        wait_event(&c, &ns, "early-out", "SidecarSetMissing", &mandatory).await?;
        let missing = pod_events(&c, &ns, "early-out", "SidecarSetMissing").await?;
        anyhow::ensure!(
            missing
                .iter()
                .all(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) != Some(&allowing)),
            "the pod that declines {allowing} was reported missing its sidecars: {missing:#?}"
        );
        anyhow::Ok(())
    }
    .await;
    delete_sidecarset(&c, &allowing).await;
    delete_sidecarset(&c, &mandatory).await;
    delete_namespace(&c, &ns).await;
    result
}

#[tokio::test]
async fn a_namespace_declines_every_sidecarset_that_allows_it() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-optout-ns-{s}");
    create_namespace(
        &c,
        &ns,
        json!({"sidecarset-operator.io/inject": "disabled"}),
    )
    .await?;
    let label = format!("optout-ns-{s}");
    let ss = format!("e2e-optional-ns-{s}");
    let result = async {
        create_sidecarset(&c, sidecarset(&ss, &label, "mesh", true)).await?;
        let probe = pod("probe", json!({"e2e-app": label}));
        // Injected elsewhere; not here once the operator knows the namespace's label.
        wait_injectable(&c, "default", &probe, "mesh", true).await?;
        wait_injectable(&c, &ns, &probe, "mesh", false).await?;
        let created = Api::<Pod>::namespaced(c.clone(), &ns)
            .create(
                &PostParams::default(),
                &pod("web", json!({"e2e-app": label})),
            )
            .await?;
        anyhow::ensure!(
            !container_names(&created).contains(&"mesh".to_string()),
            "injected in a namespace that declines {ss}: {:?}",
            container_names(&created)
        );
        let ev = wait_event(&c, &ns, "web", "SidecarSetOptedOut", &ss).await?;
        let note = ev.note.clone().unwrap_or_default();
        anyhow::ensure!(
            note.contains("its namespace's label sidecarset-operator.io/inject=disabled"),
            "{note}"
        );
        let v = explain(&ns, "web", &ss).await?;
        anyhow::ensure!(v["reason"] == "optedOut", "{v:#}");
        anyhow::Ok(())
    }
    .await;
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    result
}

#[tokio::test]
async fn a_container_name_conflict_is_reported_on_the_pod() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-why-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let label = format!("why-{s}");
    let ss = format!("e2e-why-{s}");
    let result = async {
        create_sidecarset(&c, sidecarset(&ss, &label, "mesh", false)).await?;
        let labels = json!({"e2e-app": label});
        wait_injectable(&c, &ns, &pod("probe", labels.clone()), "mesh", true).await?;
        // The pod arrives with a sidecar "mesh" another SidecarSet injected (OpenKruise, say).
        let mut claimed = pod("claimed", labels);
        claimed.metadata.annotations = Some(
            [(
                "kruise.io/sidecarset-hash".to_string(),
                json!({"e2e-other": {"hash": "h", "sidecarSetName": "e2e-other", "sidecarList": ["mesh"]}})
                    .to_string(),
            )]
            .into(),
        );
        Api::<Pod>::namespaced(c.clone(), &ns)
            .create(&PostParams::default(), &claimed)
            .await?;
        let ev = wait_event(&c, &ns, "claimed", "SidecarSetConflict", &ss).await?;
        let note = ev.note.clone().unwrap_or_default();
        anyhow::ensure!(
            ev.type_.as_deref() == Some("Warning")
                && note.contains("container \"mesh\" is also injected by SidecarSet \"e2e-other\""),
            "{ev:#?}"
        );
        let v = explain(&ns, "claimed", &ss).await?;
        anyhow::ensure!(
            v["reason"] == "conflict" && v["event"] == "SidecarSetConflict",
            "{v:#}"
        );
        anyhow::Ok(())
    }
    .await;
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    result
}
