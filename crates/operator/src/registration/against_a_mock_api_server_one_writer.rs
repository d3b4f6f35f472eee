//! One writer narrows: several replicas keep the pod webhook's match condition; a follower only
//! widens (whatever its view), the leader narrows, keeping others' entries for their TTL.

use super::against_a_mock_api_server::{
    CONFIG, configuration_with, leader, live_after, sidecarset,
};
use super::match_record::{Pending, Published};
use super::*;
use crate::cluster::ClusterView;
use crate::health::Readiness;
use crate::mock_api::{self, ApiServer};
use serde_json::{Value, json};
use sidecarset_core::index::Index;
use sidecarset_core::index::cel::PodCoverage;
use std::sync::Arc;
use std::time::Duration;

/// A SidecarSet `name` with uid `uid-<name>` selecting `app`.
fn named(name: &str, app: &str) -> sidecarset_core::api::SidecarSet {
    let mut ss = sidecarset(app);
    ss.metadata.name = Some(name.into());
    ss.metadata.uid = Some(format!("uid-{name}"));
    ss
}

/// A synced view holding `all`.
fn view_of(all: Vec<sidecarset_core::api::SidecarSet>) -> Arc<ClusterView> {
    let readiness = Readiness::default();
    let view = Arc::new(ClusterView::new(Vec::<String>::new(), &readiness));
    view.reset_sidecarsets(all);
    view
}

fn index_of(all: Vec<sidecarset_core::api::SidecarSet>) -> Index {
    Index::from_sidecarsets(all).0
}

/// The configuration as a writer of this version left it: `record` and its rendering.
fn with_record(record: &Published, resource_version: &str) -> Value {
    let expression = record.expression().unwrap_or_else(|| EVERY_POD.into());
    let mut c = configuration_with(Some(&expression));
    c["metadata"]["resourceVersion"] = json!(resource_version);
    c["metadata"]["annotations"] =
        json!({match_record::ANNOTATION: serde_json::to_string(record).unwrap()});
    c
}

fn expression_of(apply: &mock_api::Call) -> String {
    apply.body["webhooks"][0]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn record_of(apply: &mock_api::Call) -> Published {
    let a = apply.body["metadata"]["annotations"][match_record::ANNOTATION]
        .as_str()
        .expect("the record is written with the condition");
    serde_json::from_str(a).unwrap()
}

fn keeper(
    view: Arc<ClusterView>,
    coverage: Arc<MatchCoverage>,
) -> (tokio::task::JoinHandle<()>, ApiServer) {
    let (client, api) = mock_api::client();
    let task = tokio::spawn(keep_pod_match_conditions(
        client,
        view,
        "sso".into(),
        coverage,
    ));
    (task, api)
}

/// The issue: a follower whose view has not seen SidecarSet B yet wrote the condition from its
/// own view, narrowing what the leader had just widened for B: pods only B selects were created
/// without sidecars. A follower writes the union of the live record and its view.
#[tokio::test(start_paused = true)]
async fn a_follower_with_a_stale_view_keeps_what_the_leader_widened() {
    let leaders = Published {
        selected: PodCoverage::of_index(&index_of(vec![named("a", "web"), named("b", "api")])),
        ..Default::default()
    };
    // The follower has not seen B; it has seen C, which the leader's record lacks.
    let view = view_of(vec![named("a", "web"), named("c", "shop")]);
    let (task, mut api) = keeper(view.clone(), Arc::new(MatchCoverage::default()));
    api.expect("GET", CONFIG)
        .await
        .answer(200, with_record(&leaders, "7"));
    let apply = api.expect("PATCH", CONFIG).await;
    let written = expression_of(&apply);
    for app in ["'web'", "'api'", "'shop'"] {
        assert!(
            written.contains(app),
            "the follower's condition must still cover {app}: {written}"
        );
    }
    assert_eq!(
        apply.body["metadata"]["resourceVersion"],
        json!("7"),
        "written under the resourceVersion read"
    );
    assert!(record_of(&apply).selected.covers(&leaders.selected));
    let live = live_after(&apply, "8");
    apply.echo("8");
    // Its view loses C (deleted) and still lacks B: it reads back and never narrows.
    view.reset_sidecarsets(vec![named("a", "web")]);
    for _ in 0..3 {
        api.expect("GET", CONFIG).await.answer(200, live.clone());
        api.expect_nothing().await;
        tokio::time::sleep(RESYNC).await;
    }
    task.abort();
}

/// The leader narrows once B is deleted, and keeps another replica's entry (a SidecarSet being
/// admitted that its view does not hold) until it has seen it for PENDING_TTL.
#[tokio::test(start_paused = true)]
async fn the_leader_narrows_after_b_is_deleted_and_keeps_others_entries_for_their_ttl() {
    let both = index_of(vec![named("a", "web"), named("b", "api")]);
    let mut live_record = Published {
        selected: PodCoverage::of_index(&both),
        ..Default::default()
    };
    let shop = PodCoverage::of_sidecarset(&named("c", "shop")).unwrap();
    live_record.pending.insert(
        "c.uid-c.0".into(),
        Pending {
            uid: Some("uid-c".into()),
            covers: shop,
        },
    );
    let view = view_of(vec![named("a", "web"), named("b", "api")]);
    let started = tokio::time::Instant::now();
    let (task, mut api) = keeper(view.clone(), leader());
    // As the leader would write it: nothing to do.
    api.expect("GET", CONFIG)
        .await
        .answer(200, with_record(&live_record, "3"));
    api.expect_nothing().await;
    // B deleted: narrowed at once; C's entry is kept.
    view.reset_sidecarsets(vec![named("a", "web")]);
    api.expect("GET", CONFIG)
        .await
        .answer(200, with_record(&live_record, "3"));
    let apply = api.expect("PATCH", CONFIG).await;
    let written = expression_of(&apply);
    assert!(!written.contains("'api'"), "{written}");
    assert!(
        written.contains("'web'") && written.contains("'shop'"),
        "{written}"
    );
    let mut live = live_after(&apply, "4");
    apply.echo("4");
    // C never reaches the leader's view: its entry goes once seen for PENDING_TTL.
    let apply = loop {
        let call = api.next().await;
        match call.method.as_str() {
            "GET" => call.answer(200, live.clone()),
            _ => break call,
        }
    };
    assert!(started.elapsed() >= PENDING_TTL, "{:?}", started.elapsed());
    let written = expression_of(&apply);
    assert!(
        !written.contains("'shop'") && written.contains("'web'"),
        "{written}"
    );
    live = live_after(&apply, "5");
    apply.echo("5");
    tokio::time::sleep(RESYNC).await;
    api.expect("GET", CONFIG).await.answer(200, live);
    api.expect_nothing().await;
    task.abort();
}

/// A rolling upgrade: an older version wrote its own expression (no record). A follower of this
/// version keeps it whole (it does not understand it); the leader narrows it to its view.
#[tokio::test(start_paused = true)]
async fn an_older_versions_condition_is_kept_by_followers_and_narrowed_by_the_leader() {
    let old = sidecarset_core::index::cel::pod_match_expression(&index_of(vec![
        named("a", "web"),
        named("b", "api"),
    ]))
    .unwrap();
    let (task, mut api) = keeper(
        view_of(vec![named("a", "web"), named("c", "shop")]),
        Arc::new(MatchCoverage::default()),
    );
    api.expect("GET", CONFIG)
        .await
        .answer(200, configuration_with(Some(&old)));
    let apply = api.expect("PATCH", CONFIG).await;
    let written = expression_of(&apply);
    assert!(
        written.contains(&old) && written.contains("'shop'"),
        "{written}"
    );
    let after_follower = live_after(&apply, "2");
    apply.echo("2");
    task.abort();

    let (task, mut api) = keeper(view_of(vec![named("a", "web")]), leader());
    api.expect("GET", CONFIG).await.answer(200, after_follower);
    let apply = api.expect("PATCH", CONFIG).await;
    assert_eq!(
        expression_of(&apply),
        sidecarset_core::index::cel::pod_match_expression(&index_of(vec![named("a", "web")]))
            .unwrap()
    );
    let live = live_after(&apply, "3");
    apply.echo("3");
    tokio::time::sleep(RESYNC).await;
    api.expect("GET", CONFIG).await.answer(200, live);
    api.expect_nothing().await;
    task.abort();
}

/// Two writers at once: the follower's write meets the leader's (409); it reads again and
/// writes the union with what the leader wrote, under the new resourceVersion.
#[tokio::test(start_paused = true)]
async fn a_write_that_meets_another_is_computed_again_from_a_fresh_read() {
    let (task, mut api) = keeper(
        view_of(vec![named("a", "web"), named("c", "shop")]),
        Arc::new(MatchCoverage::default()),
    );
    let web = Published {
        selected: PodCoverage::of_index(&index_of(vec![named("a", "web")])),
        ..Default::default()
    };
    let web_api = Published {
        selected: PodCoverage::of_index(&index_of(vec![named("a", "web"), named("b", "api")])),
        ..Default::default()
    };
    api.expect("GET", CONFIG)
        .await
        .answer(200, with_record(&web, "5"));
    let apply = api.expect("PATCH", CONFIG).await;
    assert_eq!(apply.body["metadata"]["resourceVersion"], json!("5"));
    apply.fail(409, "Conflict");
    api.expect("GET", CONFIG)
        .await
        .answer(200, with_record(&web_api, "6"));
    let apply = api.expect("PATCH", CONFIG).await;
    assert_eq!(apply.body["metadata"]["resourceVersion"], json!("6"));
    let written = expression_of(&apply);
    for app in ["'web'", "'api'", "'shop'"] {
        assert!(written.contains(app), "{app}: {written}");
    }
    apply.echo("7");
    api.expect_nothing().await;
    task.abort();
}

/// Forged `/validate-sidecarset` reviews (anyone who reaches the webhook port can send one):
/// before, more than 64 pending SidecarSets made the condition match every pod for two minutes. Now each
/// source has a budget of entries and bytes, the total is bounded, and beyond them the review
/// is refused (the client retries), never widened to every pod.
#[tokio::test(start_paused = true)]
async fn forged_reviews_cannot_widen_beyond_a_budget_per_source() {
    let coverage = Arc::new(MatchCoverage::default());
    let short = Duration::from_millis(10);
    let forged = |i: usize| {
        let mut ss = sidecarset(&format!("forged-{i}"));
        ss.metadata.name = Some(format!("forged-{i}"));
        ss
    };
    // No keeper runs: each waits, is not confirmed, and stays pending.
    for i in 0..PER_SOURCE {
        let e = coverage
            .widen_for(&forged(i), &Index::default(), "10.9.9.9", short)
            .await;
        assert!(e.unwrap_err().contains("not written within"));
    }
    let refused = coverage
        .widen_for(&forged(PER_SOURCE), &Index::default(), "10.9.9.9", short)
        .await
        .unwrap_err();
    assert!(
        refused.contains("from 10.9.9.9 are already being admitted"),
        "{refused}"
    );
    // A big selector is refused by the byte budget.
    let mut big = sidecarset("x");
    big.metadata.name = Some("big".into());
    big.spec.selector = Some(
        serde_json::from_value(json!({"matchExpressions": [{"key": "app", "operator": "In",
            "values": (0..2000).map(|i| format!("value-{i}")).collect::<Vec<_>>()}]}))
        .unwrap(),
    );
    let refused = coverage
        .widen_for(&big, &Index::default(), "10.9.9.8", short)
        .await
        .unwrap_err();
    assert!(refused.contains("bytes"), "{refused}");
    // Other sources, up to the total; then refused too.
    let mut i = PER_SOURCE + 1;
    let mut source = 0;
    while coverage.admitting() < MAX_PENDING {
        let from = format!("10.0.0.{}", source / PER_SOURCE);
        let _ = coverage
            .widen_for(&forged(i), &Index::default(), &from, short)
            .await;
        i += 1;
        source += 1;
    }
    let refused = coverage
        .widen_for(&forged(i), &Index::default(), "10.1.1.1", short)
        .await
        .unwrap_err();
    assert!(
        refused.contains(&format!("at most {MAX_PENDING} and")),
        "{refused}"
    );
    let wanted = coverage.wanted(&Index::default());
    assert_eq!(coverage.admitting(), MAX_PENDING);
    assert!(
        wanted.expression().is_some(),
        "the condition never widens to every pod for pending reviews"
    );
    // They expire.
    tokio::time::sleep(PENDING_TTL).await;
    assert_eq!(coverage.admitting(), 0);
}

/// The same with a condition that carries no record (written before this version): the
/// follower keeps it whole. Seen failing before this change: the follower wrote its own view,
/// `... in ['shop', 'web']`, dropping 'api'.
#[tokio::test(start_paused = true)]
async fn a_follower_keeps_a_condition_without_a_record_whole() {
    let leaders = sidecarset_core::index::cel::pod_match_expression(&index_of(vec![
        named("a", "web"),
        named("b", "api"),
    ]))
    .unwrap();
    let view = view_of(vec![named("a", "web"), named("c", "shop")]);
    let (task, mut api) = keeper(view, Arc::new(MatchCoverage::default()));
    api.expect("GET", CONFIG)
        .await
        .answer(200, configuration_with(Some(&leaders)));
    let apply = api.expect("PATCH", CONFIG).await;
    let written = expression_of(&apply);
    assert!(written.contains(&leaders), "{written}");
    for app in ["'web'", "'api'", "'shop'"] {
        assert!(
            written.contains(app),
            "the follower's condition must still cover {app}: {written}"
        );
    }
    task.abort();
}

/// The issue behind a refused image change: a SidecarSet the view already holds was changed
/// without touching its selector. The keeper drops an entry the view holds as it is, so none
/// was ever written for the change and every retry was refused ("not written within 2s"). It
/// is answered at once when the live condition covers it; a change that widens the selector
/// still waits for an entry in the record.
#[tokio::test(start_paused = true)]
async fn a_change_the_view_already_holds_the_selector_of_is_answered_at_once() {
    let a = named("a", "web");
    let view = view_of(vec![a.clone()]);
    let coverage = leader();
    let live_record = Published {
        selected: PodCoverage::of_index(&index_of(vec![a.clone()])),
        ..Default::default()
    };
    let (task, mut api) = keeper(view.clone(), coverage.clone());
    api.expect("GET", CONFIG)
        .await
        .answer(200, with_record(&live_record, "3"));
    api.expect_nothing().await;
    // A new image: answered without a write.
    let mut changed = a.clone();
    changed.spec.containers[0].container.image = Some("proxy:2".into());
    let short = Duration::from_secs(2);
    coverage
        .widen_for(&changed, &view.index(), "10.0.0.1", short)
        .await
        .expect("a change that keeps the selector is covered already");
    api.expect_nothing().await;
    // A wider selector (web → api): waits for its entry.
    let wider = named("a", "api");
    let waiting = {
        let (coverage, index) = (coverage.clone(), view.index());
        tokio::spawn(async move { coverage.widen_for(&wider, &index, "10.0.0.1", short).await })
    };
    api.expect("GET", CONFIG)
        .await
        .answer(200, with_record(&live_record, "3"));
    let apply = api.expect("PATCH", CONFIG).await;
    let record = record_of(&apply);
    assert!(
        record
            .pending
            .values()
            .any(|p| p.uid.as_deref() == Some("uid-a")),
        "{record:?}"
    );
    assert!(
        !waiting.is_finished(),
        "answered before its entry was written"
    );
    apply.echo("4");
    waiting
        .await
        .unwrap()
        .expect("covered once its entry is live");
    task.abort();
}

/// With an admission policy injecting it, the condition holds a SidecarSet as its selector
/// leaving out the pods that record it: a change that keeps the selector (a new image) is
/// covered by that form too, and answered at once (it was refused for 2 s after a restart).
#[tokio::test]
async fn a_change_of_a_sidecarset_the_policy_injects_is_answered_at_once() {
    let a = named("a", "web");
    let view = view_of(vec![a.clone()]);
    let coverage = leader();
    coverage.set_compiled(Some(std::collections::BTreeSet::from(["a".to_string()])));
    let live_record = Published {
        selected: PodCoverage::of_index_compiled(
            &index_of(vec![a.clone()]),
            &std::collections::BTreeSet::from(["a".to_string()]),
        ),
        ..Default::default()
    };
    let (task, mut api) = keeper(view.clone(), coverage.clone());
    api.expect("GET", CONFIG)
        .await
        .answer(200, with_record(&live_record, "3"));
    api.expect_nothing().await;
    let mut changed = a.clone();
    changed.spec.containers[0].container.image = Some("proxy:2".into());
    coverage
        .widen_for(&changed, &view.index(), "10.0.0.1", Duration::from_secs(2))
        .await
        .expect("a change that keeps the selector is covered by the policy's form");
    api.expect_nothing().await;
    task.abort();
}

/// A create this replica refused (its entry was written, but not before the review's deadline)
/// never exists: its entry leaves the record at the next pass, on a follower as on the leader.
/// Seen in the policy-mode e2e: a SidecarSet refused once at start-up kept its plain selector in
/// the condition for PENDING_TTL, so with every replica stopped the pods the admission policy
/// had injected were still sent to the webhook and refused. Seen failing before the change: no
/// write came after the refusal ("no request came; expected PATCH").
#[tokio::test(start_paused = true)]
async fn a_refused_creates_entry_leaves_the_record_at_the_next_pass() {
    for coverage in [Arc::new(MatchCoverage::default()), leader()] {
        let a = index_of(vec![named("a", "web")]);
        let live_record = Published {
            selected: PodCoverage::of_index(&a),
            ..Default::default()
        };
        let view = view_of(vec![named("a", "web")]);
        let (task, mut api) = keeper(view.clone(), coverage.clone());
        api.expect("GET", CONFIG)
            .await
            .answer(200, with_record(&live_record, "3"));
        api.expect_nothing().await;
        // C is created: its entry is written, but the write is answered after the deadline.
        let admitting = {
            let coverage = coverage.clone();
            let index = view.index();
            tokio::spawn(async move {
                coverage
                    .widen_for(
                        &named("c", "shop"),
                        &index,
                        "10.0.0.1",
                        Duration::from_secs(1),
                    )
                    .await
            })
        };
        api.expect("GET", CONFIG)
            .await
            .answer(200, with_record(&live_record, "3"));
        let apply = api.expect("PATCH", CONFIG).await;
        assert!(expression_of(&apply).contains("'shop'"));
        let refused = admitting.await.unwrap();
        assert!(refused.unwrap_err().contains("not written within"));
        let live = live_after(&apply, "4");
        apply.echo("4");
        // The next pass drops it.
        api.expect("GET", CONFIG).await.answer(200, live);
        let apply = api.expect("PATCH", CONFIG).await;
        let written = expression_of(&apply);
        assert!(
            written.contains("'web'") && !written.contains("'shop'"),
            "{written}"
        );
        assert!(record_of(&apply).pending.is_empty());
        apply.echo("5");
        task.abort();
    }
}
