//! Checks that read the truth, against the real API server: the conflict check lists the
//! SidecarSets from the API server (a SidecarSet created a moment ago, which the operator's
//! cache may not hold yet, is seen), a conflict that got in anyway shows as a `Conflict`
//! condition on both SidecarSets, and the revision history is cut without deleting the revision
//! a `customVersion` pin resolves to.

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use sidecarset_core::api::{LABEL_REVISION_CUSTOM_VERSION, LABEL_SIDECARSET_NAME, SidecarSet};
use sidecarset_e2e::*;

/// A SidecarSet injecting a container `proxy` into pods labelled `e2e-app: app`.
fn sidecarset(name: &str, app: &str, image: &str) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
           "metadata": {"name": name},
           "spec": {"selector": {"matchLabels": {"e2e-app": app}},
                    "containers": [{"name": "proxy", "image": image}]}})
}

/// The status of the SidecarSet's condition `type_`, if it has one.
async fn condition(c: &kube::Client, name: &str, type_: &str) -> anyhow::Result<Option<String>> {
    let ss = Api::<SidecarSet>::all(c.clone()).get(name).await?;
    let status = serde_json::to_value(ss.status.unwrap_or_default())?;
    Ok(status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(String::from)))
}

#[tokio::test]
async fn a_conflicting_sidecarset_created_right_after_the_other_is_refused() -> anyhow::Result<()> {
    let c = client().await;
    // Created back to back, each pair three times: the second is checked against the API
    // server's list, which holds the first (the operator's cache may not yet).
    for round in 0..3 {
        let s = suffix();
        let (a, b) = (format!("e2e-conf-a-{s}"), format!("e2e-conf-b-{s}"));
        let app = format!("conf-{s}");
        create_sidecarset(&c, sidecarset(&a, &app, "registry.local/proxy:1")).await?;
        let second = create_sidecarset(&c, sidecarset(&b, &app, "registry.local/proxy:2")).await;
        delete_sidecarset(&c, &a).await;
        delete_sidecarset(&c, &b).await;
        match second {
            Err(kube::Error::Api(e)) => assert!(
                e.code == 403 || e.message.contains("conflicts with another"),
                "round {round}: refused for another reason: {}",
                e.message
            ),
            Err(e) => return Err(e.into()),
            Ok(_) => panic!(
                "round {round}: SidecarSet {b} was admitted although {a}, created just before, injects the same container into the same pods"
            ),
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_conflict_that_got_in_shows_as_a_condition_on_both() -> anyhow::Result<()> {
    let c = client().await;
    // Two conflicting SidecarSets written at the same moment can both be stored (each one's
    // check ran before the other was stored). Tried a few times until both get in; then both
    // must show the Conflict condition.
    for _ in 0..8 {
        let s = suffix();
        let (a, b) = (format!("e2e-cond-a-{s}"), format!("e2e-cond-b-{s}"));
        let app = format!("cond-{s}");
        let (ra, rb) = futures::future::join(
            create_sidecarset(&c, sidecarset(&a, &app, "registry.local/proxy:1")),
            create_sidecarset(&c, sidecarset(&b, &app, "registry.local/proxy:2")),
        )
        .await;
        if ra.is_err() || rb.is_err() {
            // One saw the other: nothing conflicting got in; try again.
            delete_sidecarset(&c, &a).await;
            delete_sidecarset(&c, &b).await;
            continue;
        }
        let shown = async {
            for name in [&a, &b] {
                eventually(
                    30,
                    &format!("SidecarSet {name}'s Conflict condition"),
                    || async {
                        Ok(condition(&c, name, "Conflict")
                            .await?
                            .filter(|s| s == "True"))
                    },
                )
                .await?;
            }
            Ok::<(), anyhow::Error>(())
        }
        .await;
        delete_sidecarset(&c, &a).await;
        delete_sidecarset(&c, &b).await;
        return shown;
    }
    eprintln!("two conflicting SidecarSets never got in together in 8 tries: nothing to show");
    Ok(())
}

#[tokio::test]
async fn history_cleanup_keeps_the_revision_a_custom_version_pin_resolves_to() -> anyhow::Result<()>
{
    let c = client().await;
    let s = suffix();
    let name = format!("e2e-pin-hist-{s}");
    let revisions: Api<ControllerRevision> = Api::namespaced(c.clone(), &operator_namespace());
    let by_version = |v: &'static str| {
        let (revisions, name) = (revisions.clone(), name.clone());
        move || {
            let (revisions, name) = (revisions.clone(), name.clone());
            async move {
                let l = revisions
                    .list(&ListParams::default().labels(&format!("{LABEL_SIDECARSET_NAME}={name}")))
                    .await?;
                Ok(l.items.into_iter().find(|r| {
                    r.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_REVISION_CUSTOM_VERSION))
                        .is_some_and(|x| x == v)
                }))
            }
        }
    };
    let mut v1 = sidecarset(&name, &format!("pin-{s}"), "registry.local/proxy:1");
    v1["metadata"]["labels"] = json!({LABEL_REVISION_CUSTOM_VERSION: "v1"});
    v1["spec"]["revisionHistoryLimit"] = json!(1);
    create_sidecarset(&c, v1).await?;
    let result = async {
        let first = eventually(30, "the revision of v1", by_version("v1")).await?;
        let first_name = first.metadata.name.clone().unwrap_or_default();
        // A new spec (v2) that pins new pods to v1: the history limit is 1, so the controller
        // cuts it, but never the revision new pods get.
        Api::<SidecarSet>::all(c.clone())
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"labels": {LABEL_REVISION_CUSTOM_VERSION: "v2"}},
                    "spec": {"containers": [{"name": "proxy", "image": "registry.local/proxy:2"}],
                             "injectionStrategy": {"revision": {"customVersion": "v1", "policy": "Always"}}}})),
            )
            .await?;
        eventually(30, "the revision of v2", by_version("v2")).await?;
        // The cut happens right after the new revision is made: give it a moment.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let still = revisions.get_opt(&first_name).await?;
        assert!(
            still.is_some(),
            "revision {first_name}, which spec.injectionStrategy.revision.customVersion v1 resolves to, was deleted by the history cleanup"
        );
        assert_eq!(
            condition(&c, &name, "PinnedRevisionFound").await?.as_deref(),
            Some("True")
        );
        Ok(())
    }
    .await;
    delete_sidecarset(&c, &name).await;
    result
}
