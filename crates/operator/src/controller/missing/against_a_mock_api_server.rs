//! The eviction pass against a mock API server: what it costs when PodDisruptionBudgets refuse
//! (no token spent nor Eviction sent for a pod a budget holds, no more tries of an owner after a
//! refusal) and how the state ConfigMap is kept small.

use super::state::{Stored, store};
use super::*;
use crate::controller::slim::SlimPod;
use crate::mock_api::{self, ApiServer};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const STATE: &str = "/api/v1/namespaces/ops/configmaps";
const PDBS: &str = "/apis/policy/v1/namespaces";

fn evictions(per_hour: u32) -> Evictions {
    Evictions::new(Policy {
        per_minute: 100,
        per_hour,
        owner_kinds: parse_owner_kinds(DEFAULT_OWNER_KINDS).unwrap(),
        namespace: "ops".into(),
    })
}

/// A SidecarSet `name` (uid `ss-uid`, generation 3) opted in for every pod.
fn sidecarset(name: &str) -> sidecarset_core::api::SidecarSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": name, "uid": "ss-uid", "generation": 3,
                     "annotations": {ANNOTATION_EVICT: "all"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "containers": [{"name": "proxy", "image": "proxy:2"}]}
    }))
    .unwrap()
}

/// A ready pod `ns/name` of the ReplicaSet of uid `owner`, labelled `app`.
fn pod(ns: &str, name: &str, owner: &str, app: &str) -> SlimPod {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns,
        "uid": format!("uid-{name}"), "resourceVersion": "7",
        "creationTimestamp": "2026-12-01T10:00:00Z", "labels": {"app": app},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                             "uid": owner, "controller": true}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
    .unwrap()
}

fn as_pod(p: &SlimPod) -> Value {
    serde_json::to_value(p.to_pod()).unwrap()
}

fn pdbs(items: Value) -> Value {
    json!({"kind": "PodDisruptionBudgetList", "apiVersion": "policy/v1", "metadata": {},
           "items": items})
}

fn pdb(selector: Value, allowed: i32) -> Value {
    json!({"metadata": {"name": "budget"}, "spec": {"selector": selector},
           "status": {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 2,
                      "expectedPods": 2}})
}

/// The state read (none yet) and this SidecarSet's written.
async fn fresh_state(api: &mut ApiServer) {
    api.expect("GET", &format!("{STATE}/{STATE_CONFIGMAP}"))
        .await
        .fail(404, "NotFound");
    api.expect("POST", STATE).await.echo("100");
}

/// `p` read, its token spent, the Eviction answered `code`, and the token given back when refused.
async fn eviction_of(api: &mut ApiServer, p: &SlimPod, code: u16) {
    let (ns, name) = (p.metadata.namespace.as_deref().unwrap(), p.name_any());
    api.expect("GET", &format!("/api/v1/namespaces/{ns}/pods/{name}"))
        .await
        .answer(200, as_pod(p));
    api.expect("GET", &format!("/api/v1/namespaces/{ns}/pods?"))
        .await
        .answer(200, siblings(&[]));
    api.expect("PUT", &format!("{STATE}/{STATE_CONFIGMAP}"))
        .await
        .echo("101");
    let eviction = api
        .expect(
            "POST",
            &format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"),
        )
        .await;
    if code == 429 {
        eviction.fail(429, "TooManyRequests");
        api.expect("PUT", &format!("{STATE}/{STATE_CONFIGMAP}"))
            .await
            .echo("102");
    } else {
        eviction.answer(
            201,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        );
    }
}

/// The metadata list of a namespace's pods (the siblings read before an eviction).
fn siblings(items: &[Value]) -> Value {
    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
           "metadata": {"resourceVersion": "1"}, "items": items})
}

fn withheld(sidecarset: &str, reason: &str) -> u64 {
    crate::metrics::metrics()
        .evictions_withheld
        .get_or_create(&crate::metrics::SidecarSetReasonLabels {
            sidecarset: sidecarset.into(),
            reason: reason.into(),
        })
        .get()
}

fn uid_of(name: &'static str) -> impl Fn(&str) -> Option<String> + Sync {
    move |n: &str| (n == name).then(|| "ss-uid".to_string())
}

/// Once the Eviction API refused a pod for its budget, the owner's other pods are not tried in
/// this pass (each would cost a read, two writes and an Eviction refused the same way); another
/// owner's are.
#[tokio::test]
async fn a_budget_refusal_holds_back_the_owners_other_pods() {
    let (client, mut api) = mock_api::client();
    let ss = sidecarset("refusal");
    let (a1, a2, a3, b1) = (
        pod("a", "a1", "rs-a", "web"),
        pod("a", "a2", "rs-a", "web"),
        pod("a", "a3", "rs-a", "web"),
        pod("a", "b1", "rs-b", "web"),
    );
    let server = async {
        fresh_state(&mut api).await;
        api.expect("GET", &format!("{PDBS}/a/poddisruptionbudgets"))
            .await
            .answer(200, pdbs(json!([])));
        eviction_of(&mut api, &a1, 429).await;
        // a2 and a3: nothing.
        eviction_of(&mut api, &b1, 201).await;
    };
    let (ev, pods, current) = (evictions(10), [&a1, &a2, &a3, &b1], uid_of("refusal"));
    let would_inject = |_: &Pod| true;
    let (pass, ()) = tokio::join!(
        evict(&client, &ev, &ss, &pods, &would_inject, &current),
        server
    );
    assert_eq!(pass.evicted, 1);
    api.expect_nothing().await;
    assert_eq!(withheld("refusal", "pdb"), 2);
}

/// A pod that a PodDisruptionBudget allowing no disruption selects is withheld before its read,
/// its token and its Eviction; the budgets of a namespace are listed once in a pass.
#[tokio::test]
async fn a_budget_allowing_no_disruption_withholds_without_a_call() {
    let (client, mut api) = mock_api::client();
    let ss = sidecarset("budget");
    let (held, other, held_too, in_b) = (
        pod("a", "held", "rs-a", "web"),
        pod("a", "other", "rs-o", "db"),
        pod("a", "held-too", "rs-t", "web"),
        pod("b", "in-b", "rs-b", "web"),
    );
    let server = async {
        fresh_state(&mut api).await;
        api.expect("GET", &format!("{PDBS}/a/poddisruptionbudgets"))
            .await
            .answer(
                200,
                pdbs(json!([pdb(json!({"matchLabels": {"app": "web"}}), 0)])),
            );
        // held: nothing; other: not selected, evicted.
        eviction_of(&mut api, &other, 201).await;
        // held-too: no second list. in-b: b's budget selects every pod and allows none.
        api.expect("GET", &format!("{PDBS}/b/poddisruptionbudgets"))
            .await
            .answer(200, pdbs(json!([pdb(json!({}), 0)])));
    };
    let (ev, pods, current) = (
        evictions(10),
        [&held, &other, &held_too, &in_b],
        uid_of("budget"),
    );
    let would_inject = |_: &Pod| true;
    let (pass, ()) = tokio::join!(
        evict(&client, &ev, &ss, &pods, &would_inject, &current),
        server
    );
    assert_eq!(pass.evicted, 1);
    api.expect_nothing().await;
    assert_eq!(withheld("budget", "pdb"), 3);
}

/// The states of SidecarSets deleted (or recreated under the same name) are dropped from the
/// ConfigMap, and the pass's own state is bounded.
#[tokio::test]
async fn the_states_of_sidecarsets_gone_are_dropped_and_each_is_bounded() {
    let (client, mut api) = mock_api::client();
    let ss = sidecarset("mesh");
    let now = jiff::Timestamp::now().as_second();
    let many = |n: usize| -> Vec<Evicted> {
        (0..n)
            .map(|i| Evicted {
                at: now - 100,
                pod: format!("a/p{i}"),
                uid: format!("u{i}"),
                owner: "rs".into(),
                same_second: (0..80).map(|j| format!("uid-{j}")).collect(),
            })
            .collect()
    };
    let state = |uid: &str, evictions: Vec<Evicted>| {
        serde_json::to_string(&SidecarSetState {
            uid: uid.into(),
            generation: 3,
            since: now - 1000,
            evictions,
            ..Default::default()
        })
        .unwrap()
    };
    let stored = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": STATE_CONFIGMAP, "namespace": "ops", "resourceVersion": "5"},
        "data": {"mesh": state("ss-uid", many(40)), "alive": state("alive-uid", many(1)),
                 "deleted": state("deleted-uid", many(1)),
                 "recreated": state("old-uid", many(1))}});
    let current = |n: &str| match n {
        "mesh" => Some("ss-uid".to_string()),
        "alive" => Some("alive-uid".to_string()),
        "recreated" => Some("new-uid".to_string()),
        _ => None,
    };
    let server = async {
        api.expect("GET", &format!("{STATE}/{STATE_CONFIGMAP}"))
            .await
            .answer(200, stored);
        let put = api
            .expect("PUT", &format!("{STATE}/{STATE_CONFIGMAP}"))
            .await;
        let data = put.body["data"].as_object().unwrap().clone();
        put.echo("6");
        data
    };
    let ev = evictions(10);
    let would_inject = |_: &Pod| true;
    let (_, data) = tokio::join!(
        evict(&client, &ev, &ss, &[], &would_inject, &current),
        server
    );
    api.expect_nothing().await;
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(keys, ["alive", "mesh"]);
    let mesh: SidecarSetState = serde_json::from_str(data["mesh"].as_str().unwrap()).unwrap();
    assert_eq!(mesh.evictions.len(), 10 + state::EVICTIONS_SLACK);
    assert_eq!(mesh.evictions[0].pod, "a/p20", "the newest are kept");
    assert!(
        mesh.evictions
            .iter()
            .all(|e| e.same_second.len() == state::MAX_SAME_SECOND)
    );
}

/// A state that would take more than the safe size is not sent (the API server would refuse it
/// past 1 MiB, stopping every eviction): an error saying so, and no request.
#[tokio::test(start_paused = true)]
async fn a_state_over_the_safe_size_is_not_written() {
    let (client, mut api) = mock_api::client();
    let cms: Api<ConfigMap> = Api::namespaced(client, "ops");
    let big = SidecarSetState {
        uid: "u".into(),
        evictions: vec![
            Evicted {
                same_second: vec!["x".repeat(40); 50],
                ..Default::default()
            };
            30
        ],
        ..Default::default()
    };
    let mut stored = Stored {
        states: (0..20).map(|i| (format!("ss{i}"), big.clone())).collect(),
        resource_version: Some("5".into()),
    };
    let err = tokio::time::timeout(Duration::from_secs(10), store(&cms, &mut stored))
        .await
        .expect("the state was sent to the API server")
        .unwrap_err();
    assert!(
        matches!(err, state::StoreError::TooLarge(n) if n > state::SAFE_SIZE),
        "{err}"
    );
    api.expect_nothing().await;
    stored.states = BTreeMap::new();
    let (written, ()) = tokio::join!(store(&cms, &mut stored), async {
        api.expect("PUT", &format!("{STATE}/{STATE_CONFIGMAP}"))
            .await
            .echo("6");
    });
    written.unwrap();
}

/// A sibling created a moment before the eviction, which the cache did not hold yet (a relist
/// under way, a watch behind), is read from the API server with the eviction's token: seen
/// later without its sidecars, it is no replacement that came back missing, and the owner's
/// evictions go on (found by the fault harness: `hack/faults.sh replay evict 4 relist`).
#[tokio::test]
async fn a_sibling_the_cache_missed_is_no_replacement() {
    let (client, mut api) = mock_api::client();
    let ss = sidecarset("sibling");
    let a1 = pod("a", "a1", "rs-a", "web");
    let now = jiff::Timestamp::now();
    let mut late = pod("a", "late", "rs-a", "web");
    late.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    let late_meta = json!({"metadata": {"name": "late", "namespace": "a", "uid": "uid-late",
        "creationTimestamp": now.to_string(),
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs-a",
                             "uid": "rs-a", "controller": true}]}});
    let server = async {
        fresh_state(&mut api).await;
        api.expect("GET", &format!("{PDBS}/a/poddisruptionbudgets"))
            .await
            .answer(200, pdbs(json!([])));
        api.expect("GET", "/api/v1/namespaces/a/pods/a1")
            .await
            .answer(200, as_pod(&a1));
        api.expect("GET", "/api/v1/namespaces/a/pods?")
            .await
            .answer(200, siblings(std::slice::from_ref(&late_meta)));
        let reserve = api
            .expect("PUT", &format!("{STATE}/{STATE_CONFIGMAP}"))
            .await;
        let state: SidecarSetState =
            serde_json::from_str(reserve.body["data"]["sibling"].as_str().unwrap()).unwrap();
        reserve.echo("101");
        api.expect("POST", "/api/v1/namespaces/a/pods/a1/eviction")
            .await
            .answer(
                201,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            );
        state
    };
    // The cache holds a1 only.
    let (ev, pods, current) = (evictions(10), [&a1], uid_of("sibling"));
    let would_inject = |_: &Pod| true;
    let (pass, state) = tokio::join!(
        evict(&client, &ev, &ss, &pods, &would_inject, &current),
        server
    );
    assert_eq!(pass.evicted, 1);
    let e = &state.evictions[0];
    if e.at == now.as_second() {
        assert_eq!(e.same_second, ["uid-late"]);
        assert_eq!(came_back_missing(&late, &state), None);
    }
}
