//! One writer narrows, against the real API server: the pod webhook's match condition kept by
//! the operator's keeper in this process, once as the leader and once as a follower whose view
//! lacks a SidecarSet, on a configuration of its own (never called: it selects no namespace and
//! fails open), with the API server's own server-side apply and resourceVersion preconditions.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use sidecarset_e2e::*;
use sidecarset_operator::cluster::ClusterView;
use sidecarset_operator::controller::leader::Leadership;
use sidecarset_operator::health::Readiness;
use sidecarset_operator::registration::{MatchCoverage, keep_pod_match_conditions};
use std::sync::Arc;

fn named(name: &str, app: &str) -> sidecarset_core::api::SidecarSet {
    let mut ss: sidecarset_core::api::SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": name, "uid": format!("uid-{name}")},
        "spec": {"selector": {"matchLabels": {"e2e-one-writer": app}},
                 "containers": [{"name": "proxy", "image": "registry.local/proxy:1"}]}
    }))
    .expect("a SidecarSet");
    sidecarset_core::api::default_sidecarset(&mut ss);
    ss
}

/// A synced view holding `all`.
fn view_of(all: Vec<sidecarset_core::api::SidecarSet>) -> Arc<ClusterView> {
    let readiness = Readiness::default();
    let view = Arc::new(ClusterView::new(Vec::<String>::new(), &readiness));
    view.reset_sidecarsets(all);
    view
}

/// Runs a keeper for `name` with `view`, leading or not.
fn keeper(
    c: &kube::Client,
    name: &str,
    view: Arc<ClusterView>,
    leading: bool,
) -> tokio::task::JoinHandle<()> {
    let coverage = MatchCoverage::default();
    if leading {
        coverage.set_leadership(Leadership::always());
    }
    tokio::spawn(keep_pod_match_conditions(
        c.clone(),
        view,
        name.into(),
        Arc::new(coverage),
    ))
}

/// The pod webhook's condition as the API server has it.
async fn condition(api: &Api<MutatingWebhookConfiguration>, name: &str) -> anyhow::Result<String> {
    let c = api.get(name).await?;
    Ok(c.webhooks
        .iter()
        .flatten()
        .find(|w| w.name == "mpod.sidecarset-operator.io")
        .and_then(|w| {
            w.match_conditions
                .as_ref()?
                .first()
                .map(|m| m.expression.clone())
        })
        .unwrap_or_default())
}

#[tokio::test]
async fn a_follower_never_narrows_and_the_leader_does() -> anyhow::Result<()> {
    let c = client().await;
    let name = format!("e2e-one-writer-{}", suffix());
    let api: Api<MutatingWebhookConfiguration> = Api::all(c.clone());
    let config: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "mpod.sidecarset-operator.io", "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "failurePolicy": "Ignore",
            "clientConfig": {"url": "https://127.0.0.1:1/mutate-pod"},
            "namespaceSelector": {"matchLabels": {"e2e-one-writer": "no-namespace-has-this"}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "matchConditions": [{"name": "selected-by-a-sidecarset", "expression": "false"}]
        }]
    }))?;
    api.create(&PostParams::default(), &config).await?;
    let result = async {
        let covers = |e: &str, apps: &[&str]| apps.iter().all(|a| e.contains(&format!("'{a}'")));
        // The leader sees A and B.
        let leader = keeper(
            &c,
            &name,
            view_of(vec![named("a", "web"), named("b", "api")]),
            true,
        );
        eventually(20, "the leader's condition covering A and B", || async {
            let e = condition(&api, &name).await?;
            Ok(covers(&e, &["web", "api"]).then_some(()))
        })
        .await?;
        leader.abort();
        // A follower that has not seen B (and has seen C) widens, never narrows.
        let follower = keeper(
            &c,
            &name,
            view_of(vec![named("a", "web"), named("c", "shop")]),
            false,
        );
        eventually(20, "the follower's union of A, B and C", || async {
            let e = condition(&api, &name).await?;
            Ok(covers(&e, &["web", "api", "shop"]).then_some(()))
        })
        .await?;
        for _ in 0..10 {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            let e = condition(&api, &name).await?;
            anyhow::ensure!(
                covers(&e, &["web", "api", "shop"]),
                "a follower narrowed: {e}"
            );
        }
        follower.abort();
        // B and C deleted: the leader narrows to A.
        let leader = keeper(&c, &name, view_of(vec![named("a", "web")]), true);
        let narrowed = eventually(20, "the leader narrowing to A", || async {
            let e = condition(&api, &name).await?;
            Ok(
                (covers(&e, &["web"]) && !e.contains("'api'") && !e.contains("'shop'"))
                    .then_some(e),
            )
        })
        .await;
        leader.abort();
        narrowed.map(|_| ())
    }
    .await;
    let _ = api.delete(&name, &DeleteParams::default()).await;
    result
}
