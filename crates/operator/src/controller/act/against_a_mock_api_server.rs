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
    sidecarset_core::inject::apply(&mut pod, &injection.patch()).unwrap();
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
        injection: None,
        without_sidecars: 0,
        evicting: false,
        refused: &[],
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

/// The SidecarSet `mesh` at resourceVersion 10 with `containers`.
fn sidecarset_of(containers: Value) -> SidecarSet {
    let mut ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "mesh", "generation": 3, "resourceVersion": "10"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": containers}
    }))
    .unwrap();
    default_sidecarset(&mut ss);
    ss
}

/// Container statuses for every container as its spec says: running, ready, the image ID
/// named after the image; the pod Running and Ready.
fn running_as_specified(pod: &mut Value) {
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            json!({"name": c["name"], "image": c["image"],
                   "imageID": format!("id-{}", c["image"].as_str().unwrap()),
                   "ready": true, "restartCount": 0, "started": true,
                   "state": {"running": {"startedAt": "2026-12-01T10:00:01Z"}}})
        })
        .collect();
    pod["status"] = json!({"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": statuses});
}

/// Pod `a/<name>` (uid `uid-<name>`) injected by `old`, running and ready.
fn pod_injected_by(old: &SidecarSet, name: &str) -> Value {
    let (index, _) = sidecarset_core::index::Index::from_sidecarsets([old.clone()]);
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "a", "uid": format!("uid-{name}"),
                     "resourceVersion": "7", "labels": {"app": "web"},
                     "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    });
    let typed: Pod = serde_json::from_value(pod.clone()).unwrap();
    let injection =
        sidecarset_core::inject::for_pod(&index, &typed, &BTreeMap::new(), "2026-12-01T10:00:00Z");
    assert_eq!(injection.injected, vec!["mesh".to_string()]);
    sidecarset_core::inject::apply(&mut pod, &injection.patch()).unwrap();
    running_as_specified(&mut pod);
    pod
}

/// What the API server saw in one reconcile.
#[derive(Default, Debug)]
struct Seen {
    /// Pods whose spec was patched, in order (the refused one included).
    patched: Vec<String>,
    /// The status patches' bodies.
    statuses: Vec<Value>,
}

/// Runs one reconcile's plan and act for `pods` (planned with the refusals `ctx` keeps, as the
/// controller does) against a server that refuses every write to pod `refuse` with an admission
/// webhook's 403 and accepts the rest.
async fn reconcile_refusing(
    api: &mut ApiServer,
    ctx: &Ctx,
    ss: &SidecarSet,
    pods: &[Value],
    refuse: &str,
) -> (Result<(), Error>, Seen, ReconcilePlan) {
    let pods: Vec<Arc<SlimPod>> = pods
        .iter()
        .map(|p| Arc::new(serde_json::from_value(p.clone()).unwrap()))
        .collect();
    let by_name: BTreeMap<String, Value> = pods
        .iter()
        .map(|p| (p.name_any(), serde_json::to_value(p.to_pod()).unwrap()))
        .collect();
    let entry = Entry::new(Arc::new(ss.clone())).unwrap();
    let classifier = rollout::Classifier::new(&entry).unwrap();
    let views: Vec<rollout::PodView> = pods.iter().map(|p| classifier.view(&p.to_pod())).collect();
    let now = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
    let refused = ctx
        .refusals
        .standing("mesh", &pods, "mesh-abc", tokio::time::Instant::now());
    let planned = plan::plan(&plan::Observation {
        ss,
        entry: &entry,
        pods: &pods,
        views: &views,
        latest_revision: "mesh-abc",
        collision_count: 0,
        pin_resolves: true,
        conflict: None,
        injection: None,
        without_sidecars: 0,
        evicting: false,
        refused: &refused,
        revisions_namespace: "sidecarset-system",
        rules: rollout::Rules::OpenKruise,
        now: &now,
    });
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel();
    let reconcile = async {
        let r = carry_out(ctx, ss, &entry, &pods, &[], &planned, "mesh-abc").await;
        let _ = done_tx.send(());
        r
    };
    let server = async {
        let mut seen = Seen::default();
        loop {
            let call = tokio::select! {
                _ = &mut done_rx => return seen,
                call = api.next() => call,
            };
            let path = call.uri.split('?').next().unwrap_or("").to_string();
            let pod_name = path
                .strip_prefix("/api/v1/namespaces/a/pods/")
                .map(String::from);
            match (call.method.as_str(), pod_name) {
                ("PATCH", _) if path == STATUS => {
                    seen.statuses.push(call.body.clone());
                    call.answer(200, stored_at("11"));
                }
                ("PATCH", Some(name)) if name.ends_with("/status") => {
                    let pod = by_name[name.trim_end_matches("/status")].clone();
                    call.answer(200, pod);
                }
                ("PATCH", Some(name)) if name == refuse => {
                    seen.patched.push(name);
                    call.answer(
                        403,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "Forbidden", "code": 403,
                               "message": "admission webhook \"images.example.com\" denied the request: proxy:2 is not an allowed image"}),
                    );
                }
                ("PATCH", Some(name)) => {
                    seen.patched.push(name.clone());
                    call.answer(200, by_name[&name].clone());
                }
                ("POST", _) if path.ends_with("/events") => call.echo("1"),
                (method, _) => panic!("unexpected {method} {path}"),
            }
        }
    };
    let (result, seen) = tokio::join!(reconcile, server);
    (result, seen, planned)
}

/// The `Stalled` condition of a status patch.
fn stalled(status_patch: &Value) -> Value {
    status_patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Stalled")
        .cloned()
        .unwrap()
}

/// One pod's in-place upgrade refused by an admission webhook (403): the other pods are
/// upgraded at the next reconcile (maxUnavailable 1 upgrades one pod at a time, the refused pod
/// first in order), the SidecarSet reports `Stalled` naming the pod and the answer, and the
/// refused pod is tried again only once its delay (5 s, then 10 s) has passed.
#[tokio::test(start_paused = true)]
async fn a_refused_upgrade_holds_its_pod_alone_and_stalls_naming_it() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client);
    let old = sidecarset_of(json!([{"name": "proxy", "image": "proxy:1"}]));
    let ss = sidecarset_of(json!([{"name": "proxy", "image": "proxy:2"}]));
    let pods: Vec<Value> = ["p1", "p2", "p3"]
        .iter()
        .map(|n| pod_injected_by(&old, n))
        .collect();

    let (first, seen, planned) = reconcile_refusing(&mut api, &ctx, &ss, &pods, "p1").await;
    let step = planned.rollout.as_ref().unwrap().as_ref().unwrap();
    assert_eq!(step.upgrade, ["a/p1"], "maxUnavailable 1: p1 first");
    assert_eq!(seen.patched, ["p1"]);

    // The next reconcile (the pods as they were): p1 waits for its retry, p2 goes.
    let (second, seen, _) = reconcile_refusing(&mut api, &ctx, &ss, &pods, "p1").await;
    assert_eq!(
        seen.patched,
        ["p2"],
        "the refused pod must not hold the others (first reconcile: {first:?})"
    );
    first.unwrap();
    second.unwrap();
    let condition = stalled(&seen.statuses[0]);
    assert_eq!(condition["status"], "True", "{condition}");
    assert_eq!(condition["reason"], "PodWriteRefused");
    let message = condition["message"].as_str().unwrap();
    assert!(
        message.contains("a/p1 (in-place upgrade: HTTP 403: admission webhook \"images.example.com\" denied the request: proxy:2 is not an allowed image)"),
        "{message}"
    );

    // Its retry is due after 5 s: tried again, refused again, then held for 10 s.
    tokio::time::advance(std::time::Duration::from_secs(5)).await;
    let (third, seen, _) = reconcile_refusing(&mut api, &ctx, &ss, &pods, "p1").await;
    third.unwrap();
    assert_eq!(seen.patched, ["p1"]);
    let standing = ctx.refusals.standing(
        "mesh",
        &pods
            .iter()
            .map(|p| Arc::new(serde_json::from_value(p.clone()).unwrap()))
            .collect::<Vec<_>>(),
        "mesh-abc",
        tokio::time::Instant::now(),
    );
    assert_eq!(
        standing[0].retry_in,
        Some(std::time::Duration::from_secs(10))
    );
    api.expect_nothing().await;
}

/// A hot upgrade whose reset of the old container (to the empty image) an admission webhook
/// refuses for one pod: today every other pod waits for that reset for ever. The reset is held
/// for its delay, the next pod is upgraded meanwhile, and the SidecarSet is `Stalled` naming
/// the pod.
#[tokio::test(start_paused = true)]
async fn a_refused_hot_upgrade_reset_holds_its_pod_alone_and_stalls_naming_it() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client);
    let hot = |image: &str| {
        sidecarset_of(json!([{"name": "proxy", "image": image,
            "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"}}]))
    };
    let (old, ss) = (hot("proxy:1"), hot("proxy:2"));
    // h1 went through its hot upgrade: proxy:2 runs in the other container, ready; the old
    // container is due for its reset.
    let mut h1 = pod_injected_by(&old, "h1");
    let typed: Pod = serde_json::from_value(h1.clone()).unwrap();
    let entry = Entry::new(Arc::new(ss.clone())).unwrap();
    let upgrade = rollout::upgrade_patch(&typed, &entry, "2026-12-01T10:05:00Z", "mesh-abc")
        .expect("an upgrade");
    sidecarset_core::inject::apply(&mut h1, &upgrade).unwrap();
    running_as_specified(&mut h1);
    let p2 = pod_injected_by(&old, "p2");
    let pods = vec![h1, p2];
    let classifier = rollout::Classifier::new(&entry).unwrap();
    let view = classifier.view(&serde_json::from_value(pods[0].clone()).unwrap());
    assert!(view.reset && view.updated, "{view:?}");

    let (first, seen, planned) = reconcile_refusing(&mut api, &ctx, &ss, &pods, "h1").await;
    let step = planned.rollout.as_ref().unwrap().as_ref().unwrap();
    assert_eq!(
        (step.reset.as_slice(), step.upgrade.len()),
        (&["a/h1".to_string()][..], 0),
        "the reset goes first and alone"
    );
    assert_eq!(seen.patched, ["h1"]);

    let (second, seen, _) = reconcile_refusing(&mut api, &ctx, &ss, &pods, "h1").await;
    assert_eq!(
        seen.patched,
        ["p2"],
        "the refused reset must not hold the others (first reconcile: {first:?})"
    );
    first.unwrap();
    second.unwrap();
    let condition = stalled(&seen.statuses[0]);
    assert_eq!(
        (condition["status"].as_str(), condition["reason"].as_str()),
        (Some("True"), Some("PodWriteRefused")),
        "{condition}"
    );
    let message = condition["message"].as_str().unwrap();
    assert!(
        message.contains("a/h1 (hot-upgrade reset: HTTP 403: admission webhook"),
        "{message}"
    );
    api.expect_nothing().await;
}

/// Pods running without the SidecarSet's sidecars are reported to the Event recorder when they
/// come, not again at every reconcile: a SidecarSet selecting many pods it never injected filled
/// the recorder's queue at each wake-up, and most notices were dropped. One notice per owner
/// (the recorder makes one Event of them anyway); a new pod, or one recreated, is reported.
#[tokio::test]
async fn pods_without_the_sidecars_are_reported_when_they_come_not_at_every_reconcile() {
    let (client, mut api) = mock_api::client();
    let (skips, mut notices) = crate::events::queue();
    let readiness = Readiness::default();
    let ctx = Ctx::new(
        client,
        "sidecarset-system".into(),
        leader::Leadership::always(),
        "me".into(),
        Arc::new(ClusterView::new(Vec::<String>::new(), &readiness)),
        skips,
        rollout::Rules::OpenKruise,
    );
    let entry = Entry::new(Arc::new(sidecarset("proxy:2"))).unwrap();
    let bare = |name: &str, uid: &str, owner: Option<&str>| -> Arc<SlimPod> {
        let mut v = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "a", "uid": uid, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]},
            "status": {"phase": "Running"}});
        if let Some(o) = owner {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                "kind": "ReplicaSet", "name": o, "uid": format!("uid-{o}"), "controller": true}]);
        }
        Arc::new(serde_json::from_value(v).unwrap())
    };
    let mut drain = || {
        let mut got = Vec::new();
        while let Ok(n) = notices.try_recv() {
            got.push(n.regarding.name.unwrap_or_default());
        }
        got
    };
    let pods = vec![
        bare("w1", "u1", Some("web-1")),
        bare("w2", "u2", Some("web-1")),
        bare("solo", "u3", None),
    ];
    report_missing(&ctx, &entry, &pods).await;
    let first = drain();
    assert!(
        !first.is_empty() && first.iter().all(|r| r == "web-1" || r == "solo"),
        "{first:?}"
    );
    for _ in 0..3 {
        report_missing(&ctx, &entry, &pods).await;
    }
    let again = drain();
    assert!(
        again.is_empty(),
        "reported again without a change: {} notices ({again:?})",
        again.len()
    );
    assert_eq!(first, ["web-1", "solo"], "one notice per owner");
    // A new pod of the ReplicaSet, and `solo` recreated (another uid): reported; `w2` gone.
    let pods = vec![
        bare("w1", "u1", Some("web-1")),
        bare("w3", "u4", Some("web-1")),
        bare("solo", "u5", None),
    ];
    report_missing(&ctx, &entry, &pods).await;
    assert_eq!(drain(), ["web-1", "solo"]);
    // w2 back (selected again): reported again.
    let pods = vec![bare("w2", "u2", Some("web-1"))];
    report_missing(&ctx, &entry, &pods).await;
    assert_eq!(drain(), ["web-1"]);
    api.expect_nothing().await;
}

/// Pods the SidecarSet selects in an excluded namespace are reported once, read from the pods
/// the pod index saw it select (not every pod of the excluded namespaces at every reconcile).
#[tokio::test]
async fn pods_selected_in_excluded_namespaces_are_reported_once() {
    use kube::runtime::watcher::Event;
    let (client, mut api) = mock_api::client();
    let (skips, mut notices) = crate::events::queue();
    let readiness = Readiness::default();
    let mut ctx = Ctx::new(
        client,
        "sidecarset-system".into(),
        leader::Leadership::always(),
        "me".into(),
        Arc::new(ClusterView::new(["kube-system".to_string()], &readiness)),
        skips,
        rollout::Rules::OpenKruise,
    );
    let (store, mut writer) = kube::runtime::reflector::store::<SlimPod>();
    ctx.pods = store;
    let mut ss = sidecarset("proxy:2");
    ss.metadata.creation_timestamp =
        Some(Time(jiff::Timestamp::from_second(1_800_000_000).unwrap()));
    let entry = Entry::new(Arc::new(ss)).unwrap();
    let pod = |name: &str, uid: &str, app: &str| -> SlimPod {
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "kube-system",
            "uid": uid, "labels": {"app": app}, "creationTimestamp": "2027-01-15T08:00:00Z"},
            "status": {"phase": "Running"}}),
        )
        .unwrap()
    };
    let selects = |p: &SlimPod| {
        if p.labels().get("app").is_some_and(|a| a == "web") {
            vec!["mesh".to_string()]
        } else {
            Vec::new()
        }
    };
    let mut seen = |p: SlimPod| {
        writer.apply_watcher_event(&Event::Apply(p.clone()));
        ctx.pod_index.lock().unwrap().step(
            &Event::Apply(p),
            &ctx.cluster.skip_namespaces,
            &selects,
        );
    };
    seen(pod("web-1", "u1", "web"));
    seen(pod("dns", "u2", "dns"));
    let mut drain = || {
        let mut got = Vec::new();
        while let Ok(n) = notices.try_recv() {
            got.push(n.pod);
        }
        got
    };
    report_excluded(&ctx, &entry);
    assert_eq!(drain(), ["kube-system/web-1"]);
    report_excluded(&ctx, &entry);
    report_excluded(&ctx, &entry);
    assert!(drain().is_empty(), "reported again without a change");
    seen(pod("web-2", "u3", "web"));
    report_excluded(&ctx, &entry);
    assert_eq!(drain(), ["kube-system/web-2"]);
    api.expect_nothing().await;
}
