//! The status write against a mock API server: conditional on the resourceVersion planned from,
//! and a conflict with this process's own last write (the cache has not caught up with it)
//! written again on top of that write, the reconcile's pod writes still sent.

use super::*;
use crate::cluster::ClusterView;
use crate::controller::leader;
use crate::health::Readiness;
use crate::mock_api::{self, ApiServer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;
use sidecarset_core::api::default_sidecarset;

const STATUS: &str = "/apis/apps.kruise.io/v1beta1/sidecarsets/mesh/status";
const POD: &str = "/api/v1/namespaces/a/pods/p1";

fn ctx(client: kube::Client) -> Ctx {
    let readiness = Readiness::default();
    Ctx::new(
        client,
        "sidecarset-system".into(),
        leader::Leadership::always(),
        "me".into(),
        Arc::new(ClusterView::new(Vec::<String>::new(), &readiness)),
        crate::events::queue().0,
        rollout::Rules::OpenKruise,
    )
}

/// The SidecarSet with the sidecar `image`, as the cache has it at resourceVersion 10.
fn sidecarset(image: &str) -> SidecarSet {
    let mut ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "mesh", "generation": 3, "resourceVersion": "10"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "containers": [{"name": "proxy", "image": image}]}
    }))
    .unwrap();
    default_sidecarset(&mut ss);
    ss
}

/// A running, ready pod injected with the `proxy:1` sidecar.
fn injected_pod() -> Arc<SlimPod> {
    let old = sidecarset("proxy:1");
    let (index, _) = sidecarset_core::index::Index::from_sidecarsets([old]);
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p1", "namespace": "a", "uid": "uid-p1", "resourceVersion": "7",
                     "labels": {"app": "web"}, "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    });
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let injection =
        sidecarset_core::inject::for_pod(&index, &typed, &BTreeMap::new(), "2026-12-01T10:00:00Z");
    assert_eq!(injection.injected, vec!["mesh".to_string()]);
    sidecarset_core::inject::apply(&mut pod, &injection.patch).unwrap();
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            json!({"name": c["name"], "image": c["image"], "imageID": format!("id-{}", c["name"]),
                   "ready": true, "restartCount": 0, "started": true,
                   "state": {"running": {"startedAt": "2026-12-01T10:00:01Z"}}})
        })
        .collect();
    pod["status"] = json!({"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": statuses});
    Arc::new(serde_json::from_value(pod).unwrap())
}

fn plan_with(ss: &SidecarSet, entry: &Entry, pods: &[Arc<SlimPod>]) -> ReconcilePlan {
    let classifier = rollout::Classifier::new(entry).unwrap();
    let views: Vec<rollout::PodView> = pods.iter().map(|p| classifier.view(&p.to_pod())).collect();
    let now = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
    plan::plan(&plan::Observation {
        ss,
        entry,
        pods,
        views: &views,
        latest_revision: "mesh-abc",
        collision_count: 0,
        pin_resolves: true,
        conflict: None,
        without_sidecars: 0,
        evicting: false,
        revisions_namespace: "sidecarset-system",
        rules: rollout::Rules::OpenKruise,
        now: &now,
    })
}

fn conflicts(cause: &str) -> u64 {
    crate::metrics::metrics()
        .status_conflicts
        .get_or_create(&crate::metrics::CauseLabel {
            cause: cause.into(),
        })
        .get()
}

/// The answer of the API server to a status patch: the SidecarSet at `rv`.
fn stored_at(rv: &str) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
           "metadata": {"name": "mesh", "resourceVersion": rv}, "spec": {}})
}

#[tokio::test]
async fn the_status_write_is_conditional_on_what_was_planned_from_and_a_conflict_replans() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client);
    let ss = sidecarset("proxy:2");
    let entry = Entry::new(Arc::new(ss.clone())).unwrap();
    let planned = plan_with(&ss, &entry, &[]);
    assert!(planned.write_status);
    let foreign = conflicts("foreign");
    let server = async {
        let patch = api.expect("PATCH", STATUS).await;
        assert_eq!(
            patch.body["metadata"]["resourceVersion"], "10",
            "the status patch must carry the resourceVersion it was planned from"
        );
        patch.fail(409, "Conflict");
    };
    let (written, ()) = tokio::join!(write_status(&ctx, &ss, &planned), server);
    assert!(
        matches!(written, Err(Error::Conflict(_))),
        "a conflict is replanned: {written:?}"
    );
    // Never written again without a precondition, nor on a guess.
    api.expect_nothing().await;
    assert!(conflicts("foreign") > foreign, "counted as foreign");
}

/// Answers what the rollout step sends after the status (the pod's patch, its
/// `SidecarSetUpgradable` condition, Events) until `done`; returns the pod patches.
async fn answer_the_rest(api: &mut ApiServer, done: impl Future<Output = ()>) -> Vec<Value> {
    tokio::pin!(done);
    let mut pod_patches = Vec::new();
    loop {
        let call = tokio::select! {
            () = &mut done => return pod_patches,
            call = api.next() => call,
        };
        match (
            call.method.as_str(),
            call.uri.split('?').next().unwrap_or(""),
        ) {
            ("PATCH", POD) => {
                pod_patches.push(call.body.clone());
                call.answer(200, serde_json::to_value(injected_pod().to_pod()).unwrap());
            }
            ("PATCH", path) if path == format!("{POD}/status") => {
                call.answer(200, serde_json::to_value(injected_pod().to_pod()).unwrap())
            }
            ("POST", path) if path.ends_with("/events") => call.echo("1"),
            (method, path) => panic!("unexpected {method} {path}"),
        }
    }
}

#[tokio::test]
async fn a_conflict_with_our_own_last_status_write_still_sends_the_pod_patches() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client);
    let ss = sidecarset("proxy:2");
    let entry = Entry::new(Arc::new(ss.clone())).unwrap();
    // A first reconcile wrote a status on resourceVersion 10, which made 11.
    let first = plan_with(&ss, &entry, &[]);
    let server = async {
        let patch = api.expect("PATCH", STATUS).await;
        assert_eq!(patch.body["metadata"]["resourceVersion"], "10");
        patch.answer(200, stored_at("11"));
    };
    let (written, ()) = tokio::join!(write_status(&ctx, &ss, &first), server);
    written.unwrap();

    // The next reconcile, from a cache still at 10, with a pod to upgrade.
    let pods = vec![injected_pod()];
    let planned = plan_with(&ss, &entry, &pods);
    let step = planned.rollout.as_ref().unwrap().as_ref().unwrap();
    assert_eq!(step.upgrade, vec!["a/p1".to_string()], "{step:?}");
    let own = conflicts("own");
    let reconcile = carry_out(&ctx, &ss, &entry, &pods, &[], &planned, "mesh-abc");
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let reconcile = async {
        let r = reconcile.await;
        let _ = done_tx.send(());
        r
    };
    let server = async {
        let refused = api.expect("PATCH", STATUS).await;
        assert_eq!(refused.body["metadata"]["resourceVersion"], "10");
        refused.fail(409, "Conflict");
        // Written again on top of our own write: conditional on what it produced.
        let again = api.expect("PATCH", STATUS).await;
        assert_eq!(again.body["metadata"]["resourceVersion"], "11");
        assert_eq!(again.body["status"], status_patch(&planned)["status"]);
        again.answer(200, stored_at("12"));
        answer_the_rest(&mut api, async {
            let _ = done_rx.await;
        })
        .await
    };
    let (result, pod_patches) = tokio::join!(reconcile, server);
    result.unwrap();
    assert_eq!(pod_patches.len(), 1, "the pod's upgrade was sent");
    assert_eq!(
        pod_patches[0][0],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}),
        "the pod's patch is conditional on the pod as planned"
    );
    assert!(conflicts("own") > own, "counted as our own");
    // The store catching up later: both writes are ours, not statuses to repair.
    assert!(!ctx.status_repair("mesh", Some("11"), Some(&first.status)));
    assert!(!ctx.status_repair("mesh", Some("12"), Some(&planned.status)));
}

/// A second conflict, on top of our own write: someone else wrote after it; replanned, no pod
/// written from a plan that may be stale.
#[tokio::test]
async fn a_conflict_after_our_own_last_write_with_someone_elses_replans() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client);
    let ss = sidecarset("proxy:2");
    let entry = Entry::new(Arc::new(ss.clone())).unwrap();
    ctx.remember_status("mesh", &Default::default(), Some("10"), Some("11".into()));
    let pods = vec![injected_pod()];
    let planned = plan_with(&ss, &entry, &pods);
    let foreign = conflicts("foreign");
    let server = async {
        api.expect("PATCH", STATUS).await.fail(409, "Conflict");
        let again = api.expect("PATCH", STATUS).await;
        assert_eq!(again.body["metadata"]["resourceVersion"], "11");
        again.fail(409, "Conflict");
    };
    let (result, ()) = tokio::join!(
        carry_out(&ctx, &ss, &entry, &pods, &[], &planned, "mesh-abc"),
        server
    );
    assert!(matches!(result, Err(Error::Conflict(_))), "{result:?}");
    api.expect_nothing().await;
    assert!(conflicts("foreign") > foreign);
}
