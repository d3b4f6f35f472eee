//! The cluster view fed with watch events, no server.

use super::feed::{ControllerRevisions, Feed, Namespaces, SidecarSets};
use super::*;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PartialObjectMeta;
use kube::runtime::watcher::Event;
use serde_json::json;
use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;

fn stored(name: &str, app: &str) -> StoredSidecarSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": app}},
                 "containers": [{"name": "proxy", "image": "proxy:1"}]}
    }))
    .unwrap()
}

fn names(view: &ClusterView) -> Vec<String> {
    view.index().iter().map(|s| s.name_any()).collect()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn sidecarsets_initial_list_changes_and_deletes() {
    let readiness = Readiness::default();
    let view = ClusterView::new(["kube-system".to_string()], &readiness);
    let mut feed = Feed::<SidecarSets>::default();
    assert!(!view.sidecarsets_synced());
    assert!(
        readiness
            .not_ready()
            .contains(&"SidecarSets not listed yet")
    );
    feed.step(&view, Event::Init);
    feed.step(&view, Event::InitApply(stored("mesh", "web")));
    feed.step(&view, Event::InitApply(stored("log", "api")));
    assert!(
        names(&view).is_empty(),
        "nothing until the list is complete"
    );
    feed.step(&view, Event::InitDone);
    assert!(view.sidecarsets_synced());
    assert_eq!(names(&view), ["log", "mesh"]);
    // Defaulted on the way in.
    let mesh = view.index().get("mesh").cloned().unwrap();
    assert_eq!(
        mesh.spec.containers[0]
            .container
            .image_pull_policy
            .as_deref(),
        Some("IfNotPresent")
    );
    let pod = labels(&[("app", "web")]);
    let ns = view.namespace_labels("shop");
    assert_eq!(
        view.index()
            .matching_all(&pod, &ns)
            .map(|s| s.name_any())
            .collect::<Vec<_>>(),
        ["mesh"]
    );

    feed.step(&view, Event::Apply(stored("mesh", "api")));
    assert!(view.index().matching_all(&pod, &ns).next().is_none());
    feed.step(&view, Event::Delete(stored("log", "api")));
    assert_eq!(names(&view), ["mesh"]);
}

#[test]
fn a_relist_keeps_the_old_view_until_it_is_complete() {
    let readiness = Readiness::default();
    let view = ClusterView::new(Vec::<String>::new(), &readiness);
    let mut feed = Feed::<SidecarSets>::default();
    for ev in [
        Event::Init,
        Event::InitApply(stored("a", "x")),
        Event::InitApply(stored("b", "x")),
        Event::InitDone,
    ] {
        feed.step(&view, ev);
    }
    // The watch restarts: "b" was deleted meanwhile, "c" created.
    feed.step(&view, Event::Init);
    feed.step(&view, Event::InitApply(stored("a", "x")));
    assert_eq!(names(&view), ["a", "b"], "old view while relisting");
    feed.step(&view, Event::InitApply(stored("c", "x")));
    feed.step(&view, Event::InitDone);
    assert_eq!(names(&view), ["a", "c"]);
}

#[test]
fn an_invalid_or_unreadable_sidecarset_never_injects() {
    let readiness = Readiness::default();
    let view = ClusterView::new(Vec::<String>::new(), &readiness);
    let mut feed = Feed::<SidecarSets>::default();
    feed.step(&view, Event::Init);
    feed.step(&view, Event::InitApply(stored("good", "web")));
    let mut empty = stored("empty-selector", "web");
    empty.spec.selector = Some(Default::default());
    feed.step(&view, Event::InitApply(empty));
    feed.step(&view, Event::InitDone);
    assert_eq!(names(&view), ["good"], "an empty selector is left out");

    // A stored object changed into one whose selector is invalid: taken out, not kept as it was.
    let mut bad = stored("good", "web");
    bad.spec.selector = Some(
        serde_json::from_value(
            json!({"matchExpressions": [{"key": "app", "operator": "Sometimes"}]}),
        )
        .unwrap(),
    );
    feed.step(&view, Event::Apply(bad));
    assert!(names(&view).is_empty());
}

fn ns(name: &str, l: &[(&str, &str)]) -> PartialObjectMeta<Namespace> {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels(l)}
    }))
    .unwrap()
}

#[test]
fn namespaces_labels_listed_changed_and_deleted() {
    let readiness = Readiness::default();
    let view = ClusterView::new(Vec::<String>::new(), &readiness);
    let mut feed = Feed::<Namespaces>::default();
    feed.step(&view, Event::Init);
    feed.step(&view, Event::InitApply(ns("shop", &[("mesh", "on")])));
    assert!(!view.namespaces_synced());
    feed.step(&view, Event::InitDone);
    assert!(view.namespaces_synced());
    assert_eq!(view.namespace_labels("shop")["mesh"], "on");
    assert_eq!(
        view.namespace_labels("shop")[sidecarset_core::api::LABEL_NAMESPACE_NAME],
        "shop",
        "the name label is always there"
    );
    assert!(view.knows_namespace("shop") && !view.knows_namespace("new"));
    feed.step(&view, Event::Apply(ns("shop", &[("mesh", "off")])));
    assert_eq!(view.namespace_labels("shop")["mesh"], "off");
    feed.step(&view, Event::Delete(ns("shop", &[])));
    assert!(!view.knows_namespace("shop"));
    assert!(!view.namespace_labels("shop").contains_key("mesh"));
    assert!(
        readiness
            .not_ready()
            .iter()
            .all(|w| !w.contains("Namespaces"))
    );
}

fn revision(name: &str, ss: &str, number: i64, custom: Option<&str>) -> ControllerRevision {
    let mut l = json!({"kruise.io/sidecarset-name": ss});
    if let Some(c) = custom {
        l["apps.kruise.io/sidecarset-custom-version"] = json!(c);
    }
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": name, "namespace": "sidecarset-system", "labels": l},
        "data": {"spec": {"containers": []}}, "revision": number
    }))
    .unwrap()
}

#[test]
fn revisions_feed_pinning_and_history() {
    let readiness = Readiness::default();
    let view = ClusterView::new(Vec::<String>::new(), &readiness);
    let mut feed = Feed::<ControllerRevisions>::default();
    feed.step(&view, Event::Init);
    feed.step(
        &view,
        Event::InitApply(revision("mesh-b", "mesh", 2, Some("v2"))),
    );
    feed.step(
        &view,
        Event::InitApply(revision("mesh-a", "mesh", 1, Some("v1"))),
    );
    feed.step(&view, Event::InitApply(revision("log-a", "log", 1, None)));
    assert!(!view.revisions_synced());
    feed.step(&view, Event::InitDone);
    assert!(view.revisions_synced());
    let of: Vec<String> = view
        .revisions_of("mesh")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(of, ["mesh-a", "mesh-b"], "oldest first");

    let mut ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "mesh"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": [],
                 "injectionStrategy": {"revision": {"customVersion": "v1"}}}
    }))
    .unwrap();
    assert!(view.pin_resolves(&ss));
    ss.spec
        .injection_strategy
        .revision
        .as_mut()
        .unwrap()
        .custom_version = Some("v9".into());
    assert!(!view.pin_resolves(&ss));
    feed.step(
        &view,
        Event::Apply(revision("mesh-c", "mesh", 3, Some("v9"))),
    );
    assert!(view.pin_resolves(&ss));
    feed.step(
        &view,
        Event::Delete(revision("mesh-c", "mesh", 3, Some("v9"))),
    );
    assert!(!view.pin_resolves(&ss));
}

#[test]
fn a_watch_is_fresh_until_it_has_failed_for_longer_than_the_threshold() {
    use super::watch::fresh;
    use std::time::Duration;
    let limit = Duration::from_secs(120);
    assert!(fresh(0, 1_000_000, limit), "not failing");
    assert!(fresh(1_000_000, 1_000_000 + 119_999, limit));
    assert!(!fresh(1_000_000, 1_000_000 + 120_000, limit));
    // A clock that went back never makes it stale.
    assert!(fresh(1_000_000, 999_000, limit));
}

/// A watch the API server tears down every second (each change of the CRD's spec re-initialises
/// the SidecarSets' storage) still gets events between its failures: it is failing all along,
/// and degraded once that lasts `--watch-stale-after`; it recovers once [`SETTLE`] went by
/// without a failure, events or not.
#[test]
fn a_watch_that_keeps_failing_between_events_is_failing_all_along() {
    use super::watch::{SETTLE, WatchHealth, fresh};
    use std::time::Duration;
    let readiness = Readiness::default();
    let h = WatchHealth::new("sidecarsets", "watch_sidecarsets", "stale", &readiness);
    let stale_after = Duration::from_secs(120);
    let t0 = 1_000_000_000i64;
    // Torn down every second for three minutes, an event right after each reconnection.
    for s in 0..180 {
        h.failed_at(t0 + s * 1000);
        h.ok_at(t0 + s * 1000 + 300);
    }
    let now = t0 + 180_000;
    assert_eq!(
        h.failing_since_at(now),
        t0,
        "failing since the first teardown"
    );
    assert!(
        !fresh(h.failing_since_at(now), now, stale_after),
        "degraded"
    );
    // Quiet and healthy again: still failing within SETTLE of the last failure, not after.
    let last = t0 + 179_000;
    let settle = SETTLE.as_millis() as i64;
    h.ok_at(last + settle - 1);
    assert_eq!(h.failing_since_at(last + settle - 1), t0);
    assert_eq!(h.failing_since_at(last + settle), 0, "recovered");
    // One failure alone is over after SETTLE, without an event: never degraded with the default.
    h.failed_at(now);
    assert_eq!(h.failing_since_at(now + settle - 1), now);
    assert!(fresh(
        h.failing_since_at(now + settle - 1),
        now + settle - 1,
        stale_after
    ));
    assert_eq!(h.failing_since_at(now + settle), 0);
}

/// A controller that does not read its wake-ups (busy, or stalled at its lower priority) must
/// not hold the view back: 3,000 SidecarSet events all reach the index, and the wake-ups stay
/// one per SidecarSet however often each changes.
#[tokio::test]
async fn the_sidecarset_feed_never_waits_on_the_controller() {
    use super::watch::{Wakeups, WatchHealth, feed_sidecarsets};
    let readiness = Readiness::default();
    let view = ClusterView::new(Vec::<String>::new(), &readiness);
    let health = WatchHealth::new("sidecarsets", "watch_sidecarsets", "stale", &readiness);
    let (_store, writer) = kube::runtime::reflector::store();
    let wake = Arc::new(Wakeups::default());
    let mut events: Vec<Result<Event<StoredSidecarSet>, kube::runtime::watcher::Error>> =
        vec![Ok(Event::Init)];
    events.extend((0..1500).map(|i| Ok(Event::InitApply(stored(&format!("ss-{i}"), "web")))));
    events.push(Ok(Event::InitDone));
    for round in 0..2 {
        events.extend((0..1500).map(|i| {
            Ok(Event::Apply(stored(
                &format!("ss-{i}"),
                if round == 0 { "api" } else { "web" },
            )))
        }));
    }
    events.extend((1500..3000).map(|i| Ok(Event::Apply(stored(&format!("ss-{i}"), "web")))));
    let fed = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        feed_sidecarsets(
            futures::stream::iter(events),
            &view,
            &health,
            Some((writer, wake.clone())),
        ),
    )
    .await;
    assert!(
        fed.is_ok(),
        "the feed waited on a controller that does not read (the view froze at {} SidecarSets)",
        view.index().len()
    );
    assert_eq!(view.index().len(), 3000);
    assert_eq!(wake.len(), 3000, "one wake-up per SidecarSet, coalesced");
    let taken = wake.take();
    assert_eq!(taken.first().map(String::as_str), Some("ss-0"));
    assert!(wake.is_empty());
}

/// The controller takes a woken name and reads the object from its store: the objects of a
/// (re)list are in the store only once the list is complete, so their names must not wake it
/// before (it would find nothing and drop them), and every listed SidecarSet must reach it.
#[tokio::test]
async fn every_listed_sidecarset_reaches_the_controller_from_its_store() {
    use super::watch::{Wakeups, WatchHealth, feed_sidecarsets};
    use futures::StreamExt;
    let readiness = Arc::new(Readiness::default());
    let view = Arc::new(ClusterView::new(Vec::<String>::new(), &readiness));
    let health = WatchHealth::new("sidecarsets", "watch_sidecarsets", "stale", &readiness);
    let (store, writer) = kube::runtime::reflector::store();
    let wake = Arc::new(Wakeups::default());
    let (tx, rx) = futures::channel::mpsc::unbounded::<
        Result<Event<StoredSidecarSet>, kube::runtime::watcher::Error>,
    >();
    let feeding = tokio::spawn({
        let (view, wake) = (view.clone(), wake.clone());
        async move { feed_sidecarsets(rx, &view, &health, Some((writer, wake))).await }
    });
    let settle = || tokio::time::sleep(std::time::Duration::from_millis(50));
    for ev in [
        Event::Init,
        Event::InitApply(stored("a", "web")),
        Event::InitApply(stored("b", "web")),
    ] {
        tx.unbounded_send(Ok(ev)).unwrap();
    }
    settle().await;
    assert!(
        wake.is_empty(),
        "names of a list still in progress woke the controller: {:?}",
        wake.take()
    );
    tx.unbounded_send(Ok(Event::InitDone)).unwrap();
    tx.unbounded_send(Ok(Event::Apply(stored("c", "web"))))
        .unwrap();
    settle().await;
    let got: Vec<String> = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        wake.clone()
            .stream(store)
            .take(3)
            .map(|o| o.name_any())
            .collect(),
    )
    .await
    .expect("the controller got every SidecarSet");
    assert_eq!(got, ["a", "b", "c"]);
    drop(tx);
    feeding.await.unwrap();
}

/// Sets a series of every family labelled by SidecarSet for `name`.
fn record_series_of(name: &str) {
    let m = crate::metrics::metrics();
    let l = crate::metrics::label(name);
    m.injections.get_or_create(&l).inc();
    m.pods_upgraded.get_or_create(&l).inc();
    m.pods_evicted.get_or_create(&l).inc();
    m.rollout_in_progress.get_or_create(&l).set(1);
    m.rollout_stalled.get_or_create(&l).set(1);
    m.pods_without_sidecars.get_or_create(&l).set(2);
    for state in ["matched", "updated", "ready", "updated_ready"] {
        m.pods
            .get_or_create(&crate::metrics::PodsLabels {
                sidecarset: name.into(),
                state: state.into(),
            })
            .set(3);
    }
    for reason in ["not_opted_in", "rate", "budget", "precondition"] {
        m.evictions_withheld
            .get_or_create(&crate::metrics::SidecarSetReasonLabels {
                sidecarset: name.into(),
                reason: reason.into(),
            })
            .inc();
    }
}

/// The encoded series labelled with the SidecarSet `name`.
fn series_of(name: &str) -> Vec<String> {
    let label = format!("sidecarset=\"{name}\"");
    crate::metrics::encode()
        .lines()
        .filter(|l| l.contains(&label))
        .map(str::to_string)
        .collect()
}

/// A deleted SidecarSet's series leave `/metrics`: at its Delete event, or at the end of a
/// relist it is missing from (deleted while the watch was down). (The names are this test's
/// own: the registry is the process's.)
#[tokio::test]
async fn the_metric_series_of_a_deleted_sidecarset_are_removed() {
    use super::watch::{WatchHealth, feed_sidecarsets};
    let readiness = Readiness::default();
    let view = ClusterView::new(Vec::<String>::new(), &readiness);
    let health = WatchHealth::new("sidecarsets", "watch_sidecarsets", "stale", &readiness);
    let (deleted, relisted, kept) = ("metrics-deleted", "metrics-unlisted", "metrics-kept");
    let feed = |events: Vec<Event<StoredSidecarSet>>| {
        feed_sidecarsets(
            futures::stream::iter(events.into_iter().map(Ok)),
            &view,
            &health,
            None,
        )
    };
    feed(vec![
        Event::Init,
        Event::InitApply(stored(deleted, "web")),
        Event::InitApply(stored(relisted, "web")),
        Event::InitDone,
        Event::Apply(stored(kept, "web")),
    ])
    .await;
    for name in [deleted, relisted, kept] {
        record_series_of(name);
        assert_eq!(series_of(name).len(), 14, "{name}: {:?}", series_of(name));
    }

    feed(vec![Event::Delete(stored(deleted, "web"))]).await;
    assert_eq!(series_of(deleted), Vec::<String>::new(), "after its Delete");
    assert_eq!(series_of(relisted).len(), 14);

    feed(vec![
        Event::Init,
        Event::InitApply(stored(kept, "web")),
        Event::InitDone,
    ])
    .await;
    assert_eq!(
        series_of(relisted),
        Vec::<String>::new(),
        "after a relist without it"
    );
    assert_eq!(series_of(kept).len(), 14, "the others' series stay");
}

/// A reconcile in flight when its SidecarSet is deleted sets its series again after the watch
/// removed them: they are removed again when it ends, and only for a SidecarSet that is gone.
#[tokio::test]
async fn a_reconcile_ending_after_the_deletion_leaves_no_series() {
    use super::watch::{WatchHealth, feed_sidecarsets};
    let readiness = Readiness::default();
    let view = ClusterView::new(Vec::<String>::new(), &readiness);
    let health = WatchHealth::new("sidecarsets", "watch_sidecarsets", "stale", &readiness);
    let (gone, here) = ("metrics-late-gone", "metrics-late-here");
    let events = [
        Event::Apply(stored(gone, "web")),
        Event::Apply(stored(here, "web")),
        Event::Delete(stored(gone, "web")),
    ];
    feed_sidecarsets(
        futures::stream::iter(events.into_iter().map(Ok)),
        &view,
        &health,
        None,
    )
    .await;
    assert!(view.sidecarset_exists(here) && !view.sidecarset_exists(gone));
    for name in [gone, here] {
        record_series_of(name);
        view.remove_metrics_if_deleted(name);
    }
    assert_eq!(series_of(gone), Vec::<String>::new());
    assert_eq!(series_of(here).len(), 14);
}

#[test]
fn a_forced_wakeup_is_told_apart_once() {
    let w = super::watch::Wakeups::default();
    w.push("a");
    w.force("b");
    assert_eq!(w.take(), ["a", "b"], "both wait, in order");
    assert!(!w.take_forced("a"), "a plain wake-up is not forced");
    assert!(w.take_forced("b"));
    assert!(!w.take_forced("b"), "forgotten once asked");
}
