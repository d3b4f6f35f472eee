//! The one scheduler against a mock API server: the real reconcile, error policy, queue and
//! kube-runtime runner ([`reconciles`]), on tokio's paused clock. Which SidecarSet a reconcile
//! is for shows in its first request (the list of its ControllerRevisions).

use super::*;
use crate::health::Readiness;
use crate::mock_api::{self, Scenario};
use kube::runtime::watcher::Event;
use serde_json::json;
use tokio::time::Instant;

const REVISIONS: &str = "/apis/apps/v1/namespaces/sidecarset-system/controllerrevisions";
const STATUS: &str = "/apis/apps.kruise.io/v1beta1/sidecarsets/mesh/status";

fn stored(name: &str, generation: i64) -> StoredSidecarSet {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
        "metadata": {"name": name, "generation": generation, "resourceVersion": "10", "uid": format!("uid-{name}")},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "containers": [{"name": format!("{name}-proxy"), "image": "proxy:2"}]}
    }))
    .unwrap()
}

/// A SidecarSet store holding `names`, listed (ready) or not yet.
fn store_of(
    names: &[&str],
    listed: bool,
) -> (
    Store<StoredSidecarSet>,
    reflector::store::Writer<StoredSidecarSet>,
) {
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Init);
    for n in names {
        writer.apply_watcher_event(&Event::InitApply(stored(n, 1)));
    }
    if listed {
        writer.apply_watcher_event(&Event::InitDone);
    }
    (store, writer)
}

fn ctx(client: Client, concurrency: u16) -> Arc<Ctx> {
    Arc::new(bare_ctx(client, concurrency))
}

fn bare_ctx(client: Client, concurrency: u16) -> Ctx {
    let readiness = Readiness::default();
    let cluster = Arc::new(ClusterView::new(Vec::<String>::new(), &readiness));
    let mut ctx = Ctx::new(
        client,
        "sidecarset-system".into(),
        leader::Leadership::always(),
        "me".into(),
        cluster,
        crate::events::queue().0,
        rollout::Rules::OpenKruise,
    );
    ctx.queue = queue::ReconcileQueue::new(concurrency);
    ctx
}

/// Runs the scheduler until the test ends.
fn drive(ctx: &Arc<Ctx>, store: Store<StoredSidecarSet>) -> wakes::AbortOnDrop {
    let stream = reconciles(ctx.clone(), store, std::future::pending());
    wakes::AbortOnDrop(tokio::spawn(stream.for_each(|_| async {})))
}

/// The SidecarSet as a status write returns it.
fn written() -> serde_json::Value {
    let mut ss = serde_json::to_value(stored("mesh", 1)).unwrap();
    ss["metadata"]["resourceVersion"] = json!("12");
    ss
}

/// The SidecarSet a revision list is for.
fn listed_for(uri: &str) -> String {
    let at = uri.find("sidecarset-name%3D").expect(uri) + "sidecarset-name%3D".len();
    uri[at..].split('&').next().unwrap_or_default().to_string()
}

/// What each request was for, and when.
type Log = Arc<Mutex<Vec<(Instant, String)>>>;

fn logged(log: &Log) -> impl FnOnce(&mock_api::Call) + Send + 'static {
    let log = log.clone();
    move |c: &mock_api::Call| {
        let what = if c.uri.starts_with(REVISIONS) && c.method == "GET" {
            listed_for(&c.uri)
        } else {
            format!("{} {}", c.method, c.uri)
        };
        log.lock().unwrap().push((Instant::now(), what));
    }
}

/// A reconcile that fails is retried after its backoff (1 s, then 2 s), through the queue; a
/// success starts the backoff over.
#[tokio::test(start_paused = true)]
async fn a_failed_reconcile_comes_back_after_its_backoff_and_a_success_resets_it() {
    let (client, api) = mock_api::client();
    let ctx = ctx(client, 8);
    let (store, _writer) = store_of(&["mesh"], true);
    let _driver = drive(&ctx, store);
    let log: Log = Log::default();
    // Woken by the pass of a replica that leads from the start.
    let t0 = Instant::now();
    let api = Scenario::new("fails twice, then succeeds")
        .fail("GET", REVISIONS, 500, "InternalError")
        .checking(logged(&log))
        .fail("GET", REVISIONS, 500, "InternalError")
        .checking(logged(&log))
        .answer(
            "GET",
            REVISIONS,
            200,
            json!({"apiVersion": "apps/v1", "kind": "ControllerRevisionList",
                   "metadata": {"resourceVersion": "1"}, "items": []}),
        )
        .checking(logged(&log))
        .echo("POST", REVISIONS, "11")
        .answer("PATCH", STATUS, 200, written())
        .run(api)
        .await
        .unwrap();
    assert_eq!(ctx.queue.due("mesh"), None, "a retry after the success");
    // Woken by a pod 10 s later, it fails again: retried after 1 s, not 4 s.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let t1 = Instant::now();
    ctx.queue.wake("mesh");
    let mut api = Scenario::new("fails after a success")
        .fail("GET", REVISIONS, 500, "InternalError")
        .checking(logged(&log))
        .fail("GET", REVISIONS, 500, "InternalError")
        .checking(logged(&log))
        .run(api)
        .await
        .unwrap();
    let at: Vec<Duration> = log
        .lock()
        .unwrap()
        .iter()
        .map(|(t, _)| t.duration_since(t0))
        .collect();
    let s = Duration::from_secs;
    let after = t1.duration_since(t0);
    assert_eq!(at, [s(0), s(1), s(3), after, after + s(1)], "{log:?}");
    // The next retry is 2 s away; nothing before.
    tokio::time::sleep(Duration::from_millis(1900)).await;
    api.expect_nothing().await;
}

/// A spec change goes ahead of the SidecarSets its pods woke before: fed by the SidecarSet
/// watch's wake-ups ([`wakes::own_changes`]) into the queue, handed to the runner in that order
/// (one slot).
#[tokio::test(start_paused = true)]
async fn a_spec_change_overtakes_queued_wake_ups() {
    let (client, api) = mock_api::client();
    let ctx = ctx(client, 1);
    // The controller's store has not listed yet: nothing is handed over before it has.
    let names = ["a", "b", "c", "spec"];
    let (store, mut writer) = store_of(&names, false);
    let _driver = drive(&ctx, store);
    for n in ["a", "b", "c"] {
        ctx.queue.wake(n);
    }
    // "spec" was seen before; its spec changes.
    let (watched, mut watch) = store_of(&[], true);
    let mut changes = changes::RelevantChanges::default();
    assert!(changes.changed(&stored("spec", 1)));
    watch.apply_watcher_event(&Event::Apply(stored("spec", 2)));
    let trigger = Arc::new(crate::cluster::watch::Wakeups::default());
    trigger.push("spec");
    let _changes = wakes::AbortOnDrop(tokio::spawn(wakes::own_changes(
        trigger.clone(),
        watched,
        changes,
        ctx.queue.clone(),
    )));
    while !trigger.is_empty() {
        tokio::task::yield_now().await;
    }
    tokio::task::yield_now().await;
    writer.apply_watcher_event(&Event::InitDone);
    let log: Log = Log::default();
    let mut scenario = Scenario::new("one reconcile at a time, each failing at once");
    for _ in names {
        scenario = scenario
            .fail("GET", REVISIONS, 500, "InternalError")
            .checking(logged(&log));
    }
    scenario.run(api).await.unwrap();
    let order: Vec<String> = log.lock().unwrap().iter().map(|(_, n)| n.clone()).collect();
    assert_eq!(order, ["spec", "a", "b", "c"]);
}

/// A replica that leads from the start reconciles every SidecarSet once its store has listed
/// (the new leader's pass runs in the scheduler's task: with a task of its own waiting for the
/// store too, the scheduler never started; see [`reconciles`]).
#[tokio::test(start_paused = true)]
async fn a_new_leaders_pass_reconciles_everything_once_the_store_has_listed() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client, 8);
    let (store, mut writer) = store_of(&["a", "b"], false);
    let _driver = drive(&ctx, store);
    tokio::time::sleep(Duration::from_secs(1)).await;
    api.expect_nothing().await;
    writer.apply_watcher_event(&Event::InitDone);
    let log: Log = Log::default();
    Scenario::new("the pass: each SidecarSet once")
        .fail("GET", REVISIONS, 500, "InternalError")
        .checking(logged(&log))
        .fail("GET", REVISIONS, 500, "InternalError")
        .checking(logged(&log))
        .run(api)
        .await
        .unwrap();
    let mut names: Vec<String> = log.lock().unwrap().iter().map(|(_, n)| n.clone()).collect();
    names.sort();
    assert_eq!(names, ["a", "b"]);
}

/// A pod wakes the SidecarSet while its reconcile writes: one more reconcile follows that one,
/// at once.
#[tokio::test(start_paused = true)]
async fn a_wake_up_during_a_reconcile_is_not_lost() {
    let (client, mut api) = mock_api::client();
    let ctx = ctx(client, 8);
    let (store, _writer) = store_of(&["mesh"], true);
    let _driver = drive(&ctx, store);
    ctx.queue.wake("mesh");
    api.expect("GET", REVISIONS).await.answer(
        200,
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevisionList",
               "metadata": {"resourceVersion": "1"}, "items": []}),
    );
    api.expect("POST", REVISIONS).await.echo("11");
    let write = api.expect("PATCH", STATUS).await;
    // A pod event while the status is being written.
    ctx.queue.wake("mesh");
    let t = Instant::now();
    write.answer(200, written());
    let again = api.expect("GET", REVISIONS).await;
    assert_eq!(listed_for(&again.uri), "mesh");
    assert_eq!(Instant::now(), t, "the next reconcile waited");
}

/// The scans of a reconcile over many pods (its own pods, every pod for those without its
/// sidecars) let the controller thread's other tasks (the pod watch) run between chunks, and
/// find what a scan at once finds.
#[tokio::test]
async fn long_scans_yield_to_the_other_tasks() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (client, _api) = mock_api::client();
    let mut ctx = bare_ctx(client, 8);
    let (pods, mut writer) = reflector::store::<SlimPod>();
    let n = 3 * observe::SCAN_CHUNK;
    for i in 0..n {
        // Every other pod injected with "mesh"; all selected by it.
        let mut p = json!({"metadata": {"name": format!("p{i}"), "namespace": "shop",
                                        "labels": {"app": "mesh"}}});
        if i % 2 == 0 {
            p["metadata"]["annotations"] = json!({"kruise.io/sidecarset-injected-list": "mesh"});
        }
        let p: SlimPod = serde_json::from_value(p).unwrap();
        writer.apply_watcher_event(&Event::Apply(p.clone()));
        ctx.pod_index.lock().unwrap().step(
            &Event::Apply(p),
            &Default::default(),
            &|_: &SlimPod| Vec::new(),
        );
    }
    ctx.pods = pods;
    let ss = sidecarset_core::api::convert::from_v1beta1(&stored("mesh", 1)).unwrap();
    let mut defaulted = ss.clone();
    default_sidecarset(&mut defaulted);
    let entry = Entry::new(Arc::new(defaulted)).unwrap();
    let turns = AtomicUsize::new(0);
    let other_task = async {
        loop {
            turns.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
        }
    };
    let scans = async {
        let own = observe::observe_pods(&ctx, &entry).await;
        let without = observe::observe_missing(&ctx, &entry).await;
        (own.len(), without.len())
    };
    let found = tokio::select! {
        biased;
        found = scans => found,
        () = other_task => unreachable!(),
    };
    assert_eq!(found, (n / 2, n / 2));
    let at_once = (
        pods_of(&ctx.pod_index, &ctx.pods, &ctx.cluster, &entry).len(),
        missing_pods(&ctx.pod_index, &ctx.pods, &ctx.cluster, &entry, true).len(),
    );
    assert_eq!(found, at_once);
    // Its own pods in two chunks (one yield), every pod in three (two yields).
    let turns = turns.load(Ordering::SeqCst);
    assert!(turns >= 3, "the other task had {turns} turns");
}
