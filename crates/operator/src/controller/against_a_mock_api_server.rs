//! The controller's writes against a mock API server: the status patch (only when the status
//! changed, to the status subresource), ControllerRevisions (created for a new spec, the
//! oldest deleted past the history limit, a create race left to the next pass) and evictions
//! (a PodDisruptionBudget's refusal, pods their controller would not recreate).

use super::*;
use crate::health::Readiness;
use crate::mock_api::{self, ApiServer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

const REVISIONS: &str = "/apis/apps/v1/namespaces/sidecarset-system/controllerrevisions";

fn sidecarset(status: Option<Value>) -> SidecarSet {
    let mut v = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "mesh", "generation": 3},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "containers": [{"name": "proxy", "image": "proxy:2"}],
                 "revisionHistoryLimit": 1}
    });
    if let Some(s) = status {
        v["status"] = s;
    }
    let mut ss: SidecarSet = serde_json::from_value(v).unwrap();
    default_sidecarset(&mut ss);
    ss
}

fn ctx(client: Client) -> Ctx {
    let readiness = Readiness::default();
    let cluster = Arc::new(ClusterView::new(Vec::<String>::new(), &readiness));
    Ctx::new(
        client,
        "sidecarset-system".into(),
        leader::Leadership::always(),
        "me".into(),
        cluster,
        crate::events::queue().0,
        rollout::Rules::OpenKruise,
    )
}

fn planned(ss: &SidecarSet) -> plan::ReconcilePlan {
    let entry = Entry::new(Arc::new(ss.clone())).unwrap();
    let now = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
    plan::plan(&plan::Observation {
        ss,
        entry: &entry,
        pods: &[],
        views: &[],
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

#[tokio::test]
async fn the_status_is_merge_patched_on_the_status_subresource_only_when_it_changed() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client);
    let ss = sidecarset(None);
    let first = planned(&ss);
    assert!(first.write_status);
    let server = async {
        let patch = api
            .expect(
                "PATCH",
                "/apis/apps.kruise.io/v1beta1/sidecarsets/mesh/status",
            )
            .await;
        assert_eq!(
            patch.content_type.as_deref(),
            Some("application/merge-patch+json")
        );
        assert_eq!(patch.body["status"]["observedGeneration"], 3);
        assert_eq!(patch.body["status"]["latestRevision"], "mesh-abc");
        // Fields the status no longer has are written as null (a merge patch keeps the rest).
        assert!(patch.body["status"]["podsWithoutSidecars"].is_null());
        assert!(
            patch.body["status"]
                .as_object()
                .unwrap()
                .contains_key("podsWithoutSidecars")
        );
        patch.answer(
            200,
            json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
                                 "metadata": {"name": "mesh"}, "spec": {}}),
        );
    };
    let (written, ()) = tokio::join!(act::write_status(&ctx, &ss, &first), server);
    written.unwrap();

    // The stored status is now the planned one: the next reconcile writes nothing.
    let stored = sidecarset(Some(serde_json::to_value(&first.status).unwrap()));
    let again = planned(&stored);
    assert!(!again.write_status);
    let ctx = Arc::new(ctx);
    let second = tokio::spawn({
        let ctx = ctx.clone();
        async move { act::write_status(&ctx, &stored, &again).await }
    });
    api.expect_nothing().await;
    second.await.unwrap().unwrap();
}

/// The revision of another spec, as OpenKruise or an earlier reconcile stored it.
fn old_revision(name: &str, number: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
           "metadata": {"name": name, "namespace": "sidecarset-system", "resourceVersion": "1",
                        "labels": {"kruise.io/sidecarset-name": "mesh"}},
           "data": {"spec": {"containers": [{"name": "proxy", "image": "proxy:1"}]}},
           "revision": number})
}

async fn revisions_listed(api: &mut ApiServer, items: Vec<Value>) {
    let list = api.expect("GET", REVISIONS).await;
    assert!(
        list.uri
            .contains("labelSelector=kruise.io%2Fsidecarset-name%3Dmesh"),
        "{}",
        list.uri
    );
    list.answer(
        200,
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevisionList",
                            "metadata": {"resourceVersion": "1"}, "items": items}),
    );
}

#[tokio::test]
async fn a_new_spec_gets_a_revision_and_the_oldest_beyond_the_history_limit_is_deleted() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client);
    let entry = Entry::new(Arc::new(sidecarset(None))).unwrap();
    let server = async {
        revisions_listed(&mut api, vec![old_revision("mesh-old", 4)]).await;
        let create = api.expect("POST", REVISIONS).await;
        assert_eq!(create.body["revision"], 5);
        assert_eq!(
            create.body["metadata"]["labels"]["kruise.io/sidecarset-name"],
            "mesh"
        );
        let name = create.body["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        create.echo("2");
        // revisionHistoryLimit 1: the old one goes, the new one stays.
        api.expect("DELETE", &format!("{REVISIONS}/mesh-old"))
            .await
            .answer(
                200,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            );
        name
    };
    let (registered, created) = tokio::join!(revisions::register(&ctx, &entry, &[]), server);
    let (latest, collisions) = registered.unwrap();
    assert_eq!((latest, collisions), (created, 0));
    api.expect_nothing().await;
}

#[tokio::test]
async fn a_revision_created_meanwhile_by_another_writer_is_left_to_the_next_pass() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client);
    let entry = Entry::new(Arc::new(sidecarset(None))).unwrap();
    let server = async {
        revisions_listed(&mut api, vec![]).await;
        api.expect("POST", REVISIONS)
            .await
            .fail(409, "AlreadyExists");
    };
    let (registered, ()) = tokio::join!(revisions::register(&ctx, &entry, &[]), server);
    let err = registered.unwrap_err().to_string();
    assert!(err.contains("appeared meanwhile"), "{err}");
    // Nothing deleted or overwritten on a guess.
    api.expect_nothing().await;
}

fn pod(name: &str, owner_kind: &str) -> SlimPod {
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "a", "uid": format!("uid-{name}"),
        "resourceVersion": "7", "creationTimestamp": "2026-12-01T10:00:00Z",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner_kind, "name": "o", "uid": "u",
                             "controller": true}]}}),
    )
    .unwrap()
}

const STATE: &str = "/api/v1/namespaces/ops/configmaps";

fn as_pod(p: &SlimPod, rv: &str) -> serde_json::Value {
    let mut v = serde_json::to_value(p.to_pod()).unwrap();
    v["metadata"]["resourceVersion"] = json!(rv);
    v
}

#[tokio::test]
async fn evictions_are_recorded_first_preconditioned_and_skip_what_must_not_go() {
    let (client, mut api) = mock_api::client();
    let (mut guarded, job, recreated, conflicting, free) = (
        pod("guarded", "ReplicaSet"),
        pod("job", "Job"),
        pod("recreated", "ReplicaSet"),
        pod("conflicting", "ReplicaSet"),
        pod("free", "ReplicaSet"),
    );
    // Another owner: a refusal of its budget holds back only its own pods.
    guarded.metadata.owner_references.as_mut().unwrap()[0].uid = "u-guarded".into();
    let evictions = missing::Evictions::new(missing::Policy {
        per_minute: 10,
        per_hour: 10,
        owner_kinds: missing::parse_owner_kinds(missing::DEFAULT_OWNER_KINDS).unwrap(),
        namespace: "ops".into(),
    });
    let mut ss = sidecarset(None);
    ss.metadata.uid = Some("ss-uid".into());
    ss.metadata.generation = Some(3);
    ss.metadata.annotations =
        Some([(missing::ANNOTATION_EVICT.to_string(), "all".to_string())].into());
    let server = async {
        // The state, read fresh: none yet; this SidecarSet's generation is recorded first.
        api.expect("GET", &format!("{STATE}/{}", missing::STATE_CONFIGMAP))
            .await
            .fail(404, "NotFound");
        let created = api.expect("POST", STATE).await;
        let state: serde_json::Value =
            serde_json::from_str(created.body["data"]["mesh"].as_str().unwrap()).unwrap();
        assert_eq!(
            (state["uid"].as_str(), state["generation"].as_i64()),
            (Some("ss-uid"), Some(3))
        );
        created.echo("100");
        // The namespace's PodDisruptionBudgets, listed once: none allows no disruption.
        api.expect("GET", "/apis/policy/v1/namespaces/a/poddisruptionbudgets")
            .await
            .answer(
                200,
                json!({"kind": "PodDisruptionBudgetList", "apiVersion": "policy/v1",
                "metadata": {}, "items": []}),
            );
        // guarded: read fresh, the token spent in the API first (conditional on what was
        // read), then the Eviction with uid and resourceVersion preconditions; a PDB refuses
        // it and the token is given back.
        api.expect("GET", "/api/v1/namespaces/a/pods/guarded")
            .await
            .answer(200, as_pod(&guarded, "8"));
        // Its owner's pods of the second, read fresh (none here).
        api.expect("GET", "/api/v1/namespaces/a/pods?")
            .await
            .answer(200, json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "items": []}));
        let reserve = api
            .expect("PUT", &format!("{STATE}/{}", missing::STATE_CONFIGMAP))
            .await;
        assert_eq!(reserve.body["metadata"]["resourceVersion"], "100");
        let state: serde_json::Value =
            serde_json::from_str(reserve.body["data"]["mesh"].as_str().unwrap()).unwrap();
        assert_eq!(state["evictions"][0]["pod"], "a/guarded");
        reserve.echo("101");
        let eviction = api
            .expect("POST", "/api/v1/namespaces/a/pods/guarded/eviction")
            .await;
        assert_eq!(
            eviction.body["deleteOptions"]["preconditions"],
            json!({"uid": "uid-guarded", "resourceVersion": "8"}),
            "the eviction must be conditional on the pod as read"
        );
        eviction.fail(429, "TooManyRequests");
        let give_back = api
            .expect("PUT", &format!("{STATE}/{}", missing::STATE_CONFIGMAP))
            .await;
        assert_eq!(give_back.body["metadata"]["resourceVersion"], "101");
        let state: serde_json::Value =
            serde_json::from_str(give_back.body["data"]["mesh"].as_str().unwrap()).unwrap();
        assert_eq!(state["evictions"], json!([]));
        give_back.echo("102");
        // job: never read nor evicted (a Job does not recreate its pods).
        // recreated: the name now holds another pod (another uid): left alone.
        let mut other = as_pod(&recreated, "9");
        other["metadata"]["uid"] = json!("uid-new");
        api.expect("GET", "/api/v1/namespaces/a/pods/recreated")
            .await
            .answer(200, other);
        // conflicting: the webhook would not inject it now: reported, never evicted.
        api.expect("GET", "/api/v1/namespaces/a/pods/conflicting")
            .await
            .answer(200, as_pod(&conflicting, "9"));
        // free: evicted.
        api.expect("GET", "/api/v1/namespaces/a/pods/free")
            .await
            .answer(200, as_pod(&free, "9"));
        api.expect("GET", "/api/v1/namespaces/a/pods?")
            .await
            .answer(200, json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "items": []}));
        let reserve = api
            .expect("PUT", &format!("{STATE}/{}", missing::STATE_CONFIGMAP))
            .await;
        assert_eq!(reserve.body["metadata"]["resourceVersion"], "102");
        reserve.echo("103");
        api.expect("POST", "/api/v1/namespaces/a/pods/free/eviction")
            .await
            .answer(
                201,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            );
    };
    let candidates = [&guarded, &job, &recreated, &conflicting, &free];
    let would_inject =
        |p: &k8s_openapi::api::core::v1::Pod| p.metadata.name.as_deref() != Some("conflicting");
    let (pass, ()) = tokio::join!(
        missing::evict(
            &client,
            &evictions,
            &ss,
            &candidates,
            &would_inject,
            &|n: &str| (n == "mesh").then(|| "ss-uid".to_string())
        ),
        server
    );
    assert_eq!(pass.evicted, 1);
    api.expect_nothing().await;
}

/// A pod as the cache holds it: `ns/a` at resourceVersion `rv`.
fn cached_pod(rv: &str) -> slim::SlimPod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv, "uid": "uid-a"},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]}
    }))
    .unwrap()
}

/// Read-your-writes ([`expectations`]): after an in-place write to pod `ns/a` produced
/// resourceVersion 12, a reconcile while the cache still holds the pod at 10 plans nothing
/// (no request at all: its first would list the ControllerRevisions) and asks to be looked at
/// again; once the cache holds 12 it goes on. (The fault harness's `stale` perturbation found
/// the rollout upgrading past maxUnavailable from such a cache: `hack/faults.sh replay revision
/// 45 stale`.)
#[tokio::test]
async fn a_reconcile_waits_until_the_cache_shows_its_own_pod_writes() {
    use kube::runtime::watcher::Event;
    let (client, mut api) = mock_api::client();
    let mut ctx = ctx(client);
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitApply(cached_pod("10")));
    writer.apply_watcher_event(&Event::InitDone);
    ctx.pods = store;
    let ctx = Arc::new(ctx);
    let t0 = tokio::time::Instant::now();
    ctx.expectations.expect("mesh", "ns/a", Some("12"), t0);
    let ss = Arc::new(sidecarset(None));
    let waiting = tokio::spawn(reconcile(ss.clone(), ctx.clone()));
    api.expect_nothing().await;
    assert!(waiting.await.unwrap().is_ok());
    assert!(waits_for_own_writes(&ctx, "mesh"), "still behind");
    // The cache catches up (the pod's event of our write, or a later one).
    writer.apply_watcher_event(&Event::Apply(cached_pod("13")));
    assert!(!waits_for_own_writes(&ctx, "mesh"));
    ctx.expectations.expect("mesh", "ns/a", Some("14"), t0);
    writer.apply_watcher_event(&Event::Apply(cached_pod("14")));
    let going = tokio::spawn(reconcile(ss, ctx.clone()));
    let first = api.expect("GET", REVISIONS).await;
    drop(first);
    going.abort();
}
