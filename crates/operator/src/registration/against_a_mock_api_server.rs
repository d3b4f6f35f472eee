//! The pod webhook's match conditions against a mock API server, on tokio's paused clock.

use super::*;
use crate::cluster::ClusterView;
use crate::health::Readiness;
use crate::mock_api::{self, ApiServer, Scenario};
use crate::names::{MATCH_CONDITIONS_FIELD_MANAGER, POD_CREATE_WEBHOOK, WebhookConfigs};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

pub(super) const CONFIG: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/sso";

/// A replica that leads (only the leader narrows).
pub(super) fn leader() -> Arc<MatchCoverage> {
    let c = MatchCoverage::default();
    c.set_leadership(crate::controller::leader::Leadership::always());
    Arc::new(c)
}

/// The configuration as the API server has it after `apply` landed: its condition and its
/// record, at `resource_version`.
pub(super) fn live_after(apply: &mock_api::Call, resource_version: &str) -> Value {
    let mut c = configuration(true);
    c["metadata"]["resourceVersion"] = json!(resource_version);
    c["metadata"]["annotations"] = apply.body["metadata"]["annotations"].clone();
    c["webhooks"][1]["matchConditions"] = apply.body["webhooks"][0]["matchConditions"].clone();
    c
}

pub(super) fn view(app: &str) -> Arc<ClusterView> {
    let readiness = Readiness::default();
    let view = Arc::new(ClusterView::new(Vec::<String>::new(), &readiness));
    view.reset_sidecarsets(vec![sidecarset(app)]);
    view
}

pub(super) fn sidecarset(app: &str) -> sidecarset_core::api::SidecarSet {
    let mut ss: sidecarset_core::api::SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "mesh"},
        "spec": {"selector": {"matchLabels": {"app": app}},
                 "containers": [{"name": "proxy", "image": "proxy:1"}]}
    }))
    .unwrap();
    sidecarset_core::api::default_sidecarset(&mut ss);
    ss
}

/// The configuration as installed, with the pod CREATE webhook or without it.
pub(super) fn configuration(with_pod_webhook: bool) -> Value {
    let mut webhooks = vec![json!({"name": "other.sidecarset-operator.io",
        "admissionReviewVersions": ["v1"], "sideEffects": "None", "clientConfig": {}})];
    if with_pod_webhook {
        webhooks.push(
            json!({"name": POD_CREATE_WEBHOOK, "admissionReviewVersions": ["v1"],
                             "sideEffects": "None", "clientConfig": {}}),
        );
    }
    json!({"apiVersion": "admissionregistration.k8s.io/v1",
           "kind": "MutatingWebhookConfiguration", "metadata": {"name": "sso"},
           "webhooks": webhooks})
}

/// The next write: its match condition's expression (None: the condition removed).
async fn applied(api: &mut ApiServer) -> (Option<String>, mock_api::Call) {
    api.expect("GET", CONFIG)
        .await
        .answer(200, configuration(true));
    let apply = api.expect("PATCH", CONFIG).await;
    assert_eq!(
        apply.content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    assert!(
        apply
            .uri
            .contains(&format!("fieldManager={MATCH_CONDITIONS_FIELD_MANAGER}")),
        "{}",
        apply.uri
    );
    assert!(apply.uri.contains("force=true"), "{}", apply.uri);
    let entries = apply.body["webhooks"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "only the pod CREATE entry is applied");
    assert_eq!(entries[0]["name"], POD_CREATE_WEBHOOK);
    let expression = entries[0]["matchConditions"][0]["expression"]
        .as_str()
        .map(String::from);
    (expression, apply)
}

#[tokio::test(start_paused = true)]
async fn the_condition_follows_the_selectors_and_is_dropped_when_refused() {
    let (client, mut api) = mock_api::client();
    let view = view("web");
    let task = tokio::spawn(keep_pod_match_conditions(
        client,
        view.clone(),
        "sso".into(),
        leader(),
    ));
    let (expression, apply) = applied(&mut api).await;
    let expression = expression.expect("a condition for the selectors");
    assert!(expression.contains("web"), "{expression}");
    let live_web = live_after(&apply, "2");
    apply.echo("2");
    api.expect_nothing().await;

    // A SidecarSet changes: the condition is rewritten at once; the API server refuses it
    // (422), so the webhook goes without a condition rather than with a stale one.
    view.reset_sidecarsets(vec![sidecarset("api")]);
    let (expression, apply) = applied(&mut api).await;
    assert!(expression.expect("the new selectors").contains("api"));
    apply.fail(422, "Invalid");
    // Read back (it still has the condition for "web"), then written without one.
    api.expect("GET", CONFIG).await.answer(200, live_web);
    let apply = api.expect("PATCH", CONFIG).await;
    // Written as a condition every pod matches: leaving it out would not remove the one the
    // chart rendered (server-side apply keeps what another field manager also set).
    assert_eq!(
        apply.body["webhooks"][0]["matchConditions"],
        serde_json::json!([{"name": "selected-by-a-sidecarset", "expression": "true"}])
    );
    apply.echo("3");
    api.expect_nothing().await;
    task.abort();
}

/// The apply of the pod webhook's condition: only that entry, by the operator's own field
/// manager, forced, with `expression`.
fn the_condition_applied(expression: &str) -> impl FnOnce(&mock_api::Call) + Send + use<> {
    let expression = expression.to_string();
    move |apply: &mock_api::Call| {
        assert!(
            apply
                .uri
                .contains(&format!("fieldManager={MATCH_CONDITIONS_FIELD_MANAGER}"))
                && apply.uri.contains("force=true"),
            "{}",
            apply.uri
        );
        assert_eq!(
            apply.body["webhooks"],
            json!([{"name": POD_CREATE_WEBHOOK,
                    "matchConditions": [{"name": MATCH_CONDITION_NAME, "expression": expression}]}])
        );
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_is_applied_before_the_pod_webhook_entry_exists() {
    let (client, api) = mock_api::client();
    let task = tokio::spawn(keep_pod_match_conditions(
        client,
        view("web"),
        "sso".into(),
        leader(),
    ));
    // Never an apply that would create an incomplete entry: the configuration is read
    // again (after a backoff) until the entry is there.
    let done = Scenario::new("the condition is applied only once the pod webhook's entry exists")
        .answer("GET", CONFIG, 200, configuration(false))
        .answer("GET", CONFIG, 200, configuration(false))
        .answer("GET", CONFIG, 200, configuration(false))
        .answer("GET", CONFIG, 200, configuration(true))
        .echo("PATCH", CONFIG, "2")
        .checking(|apply| {
            let e = apply.body["webhooks"][0]["matchConditions"][0]["expression"]
                .as_str()
                .unwrap_or_default();
            assert!(e.contains("web"), "{e}");
        })
        .run(api);
    done.await.unwrap();
    task.abort();
}

/// The install window (issue: an install whose image cannot be pulled blocked every pod): the
/// chart renders a condition that matches nothing; the first replica that runs widens it to the
/// SidecarSets' selectors at once, and with none left reads "false" back as current.
#[tokio::test(start_paused = true)]
async fn the_charts_initial_condition_is_widened_by_the_first_replica() {
    let (client, api) = mock_api::client();
    let view = view("web");
    let task = tokio::spawn(keep_pod_match_conditions(
        client,
        view.clone(),
        "sso".into(),
        leader(),
    ));
    let web = sidecarset_core::index::cel::pod_match_expression(&view.index()).unwrap();
    let written = Arc::new(std::sync::Mutex::new(Value::Null));
    let api = Scenario::new("the chart's \"false\" widened to the SidecarSets' selectors")
        .answer("GET", CONFIG, 200, configuration_with(Some("false")))
        .echo("PATCH", CONFIG, "2")
        .checking({
            let written = written.clone();
            let check = the_condition_applied(&web);
            move |apply| {
                check(apply);
                *written.lock().unwrap() = live_after(apply, "2");
            }
        })
        .run(api)
        .await
        .unwrap();
    // The SidecarSet deleted: the leader narrows back to nothing, as the chart had it.
    view.reset_sidecarsets(vec![]);
    let live = written.lock().unwrap().clone();
    let mut api = Scenario::new("narrowed to \"false\" when no SidecarSet is left")
        .answer("GET", CONFIG, 200, live)
        .echo("PATCH", CONFIG, "3")
        .checking(the_condition_applied("false"))
        .run(api)
        .await
        .unwrap();
    api.expect_nothing().await;
    task.abort();
}

/// OLM's configurations: random names, found by label; each one carries the condition.
#[tokio::test(start_paused = true)]
async fn configurations_found_by_label_each_get_the_condition() {
    let (client, mut api) = mock_api::client();
    let selector = "olm.webhook-description-generate-name=mpod.sidecarset-operator.io";
    let task = tokio::spawn(keep_pod_match_conditions(
        client,
        view("web"),
        WebhookConfigs::Selected(selector.into()),
        leader(),
    ));
    const LIST: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations?";
    // None yet (OLM has not created it): nothing is written, the list is asked again.
    let list = api.expect("GET", LIST).await;
    assert!(
        list.uri.contains(
            "labelSelector=olm.webhook-description-generate-name%3Dmpod.sidecarset-operator.io"
        ),
        "{}",
        list.uri
    );
    list.answer(
        200,
        json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": []}),
    );
    // Two (a CSV being replaced): both get the condition, by their own names.
    let named = |name: &str, with: Option<&str>| {
        let mut c = configuration_with(with);
        c["metadata"]["name"] = json!(name);
        c
    };
    api.expect("GET", LIST).await.answer(
        200,
        json!({"apiVersion": "v1", "kind": "List", "metadata": {},
               "items": [named("mpod.sidecarset-operator.io-abcde", None),
                         named("mpod.sidecarset-operator.io-fghij", None)]}),
    );
    let mut expressions = vec![];
    let mut written = vec![];
    for name in ["abcde", "fghij"] {
        let path = format!(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/mpod.sidecarset-operator.io-{name}?"
        );
        let apply = api.expect("PATCH", &path).await;
        assert_eq!(
            apply.body["metadata"]["name"],
            json!(format!("mpod.sidecarset-operator.io-{name}"))
        );
        expressions.push(
            apply.body["webhooks"][0]["matchConditions"][0]["expression"]
                .as_str()
                .unwrap()
                .to_string(),
        );
        written.push(live_after(&apply, "2"));
        apply.echo("2");
    }
    assert!(expressions[0].contains("web") && expressions[0] == expressions[1]);
    api.expect_nothing().await;
    // A minute later: read back; the one OLM rewrote (an update drops the condition) is
    // written again, the other is left alone.
    tokio::time::sleep(RESYNC).await;
    api.expect("GET", LIST).await.answer(
        200,
        json!({"apiVersion": "v1", "kind": "List", "metadata": {},
               "items": [renamed(written[0].clone(), "mpod.sidecarset-operator.io-abcde"),
                         // OLM's update dropped the condition (the record is left).
                         without_condition(renamed(written[1].clone(), "mpod.sidecarset-operator.io-fghij"))]}),
    );
    let apply = api
        .expect(
            "PATCH",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/mpod.sidecarset-operator.io-fghij?",
        )
        .await;
    apply.echo("3");
    api.expect_nothing().await;
    task.abort();
}

/// `c` named `name`.
fn renamed(mut c: Value, name: &str) -> Value {
    c["metadata"]["name"] = json!(name);
    c
}

/// `c` without the pod webhook's conditions.
fn without_condition(mut c: Value) -> Value {
    c["webhooks"][1]["matchConditions"] = Value::Null;
    c
}

/// The configuration with our condition set to `expression`.
pub(super) fn configuration_with(expression: Option<&str>) -> Value {
    let mut c = configuration(true);
    if let Some(e) = expression {
        c["webhooks"][1]["matchConditions"] =
            json!([{"name": MATCH_CONDITION_NAME, "expression": e}]);
    }
    c
}

#[tokio::test(start_paused = true)]
async fn the_condition_is_read_back_on_every_pass_and_a_changed_one_written_again() {
    let (client, mut api) = mock_api::client();
    let view = view("web");
    let task = tokio::spawn(keep_pod_match_conditions(
        client,
        view.clone(),
        "sso".into(),
        leader(),
    ));
    let (expression, apply) = applied(&mut api).await;
    let expression = expression.unwrap();
    let live = live_after(&apply, "2");
    apply.echo("2");
    let before = crate::metrics::metrics().match_condition_repairs.get();
    // A minute later the configuration is read again: as written, nothing is written.
    tokio::time::sleep(RESYNC).await;
    api.expect("GET", CONFIG).await.answer(200, live.clone());
    api.expect_nothing().await;
    // Someone dropped our condition (a Helm upgrade, kubectl apply): the next pass sees it
    // and writes it back, and counts the repair.
    tokio::time::sleep(RESYNC).await;
    api.expect("GET", CONFIG)
        .await
        .answer(200, without_condition(live));
    let apply = api.expect("PATCH", CONFIG).await;
    assert_eq!(
        apply.body["webhooks"][0]["matchConditions"][0]["expression"],
        json!(expression)
    );
    apply.echo("4");
    api.expect_nothing().await;
    assert_eq!(
        crate::metrics::metrics().match_condition_repairs.get(),
        before + 1
    );
    task.abort();
}

/// The admission goes through a follower (any replica answers the webhook): it widens, and
/// answers once the live record holds an entry for the SidecarSet.
#[tokio::test(start_paused = true)]
async fn a_new_sidecarset_is_admitted_only_once_the_condition_covers_its_selector() {
    let (client, mut api) = mock_api::client();
    let view = view("web");
    let coverage = Arc::new(MatchCoverage::default());
    let task = tokio::spawn(keep_pod_match_conditions(
        client,
        view.clone(),
        "sso".into(),
        coverage.clone(),
    ));
    api.expect("GET", CONFIG)
        .await
        .answer(200, configuration_with(Some("false")));
    let apply = api.expect("PATCH", CONFIG).await;
    let live = live_after(&apply, "2");
    apply.echo("2");
    api.expect_nothing().await;
    // The SidecarSet in the index is covered at once; one selecting app=api is not: its
    // admission waits while the condition is widened to cover both.
    assert!(coverage.covers(&sidecarset("web")));
    let mut api_ss = sidecarset("api");
    api_ss.metadata.name = Some("api-mesh".into());
    assert!(!coverage.covers(&api_ss));
    let admission = tokio::spawn({
        let (c, ss, index) = (coverage.clone(), api_ss.clone(), view.index());
        async move {
            c.widen_for(&ss, &index, "10.0.0.1", Duration::from_secs(2))
                .await
        }
    });
    api.expect("GET", CONFIG).await.answer(200, live);
    let apply = api.expect("PATCH", CONFIG).await;
    assert_eq!(apply.body["metadata"]["resourceVersion"], json!("2"));
    let widened = apply.body["webhooks"][0]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        widened.contains("'web'") && widened.contains("'api'"),
        "{widened}"
    );
    assert!(
        !admission.is_finished(),
        "admitted before the condition was written"
    );
    let live = live_after(&apply, "3");
    apply.echo("3");
    admission.await.unwrap().expect("admitted once covered");
    // Once the index holds it, the condition covers it already: read back, not written again.
    view.reset_sidecarsets(vec![sidecarset("web"), api_ss.clone()]);
    api.expect("GET", CONFIG).await.answer(200, live);
    api.expect_nothing().await;
    assert!(coverage.covers(&api_ss));

    // When the condition cannot be written, the admission is refused after its timeout
    // (the SidecarSet write fails with a message to retry), never admitted uncovered.
    let mut other = sidecarset("shop");
    other.metadata.name = Some("shop-mesh".into());
    let admission = tokio::spawn({
        let (c, ss, index) = (coverage.clone(), other.clone(), view.index());
        async move {
            c.widen_for(&ss, &index, "10.0.0.1", Duration::from_secs(2))
                .await
        }
    });
    api.expect("GET", CONFIG).await.fail(500, "InternalError");
    let refused = admission.await.unwrap().unwrap_err();
    assert!(refused.contains("retry"), "{refused}");
    task.abort();
}

/// What the condition read back stands for: none or "true" is every pod; the chart's "false"
/// on a new install is the empty record's rendering, which covers no SidecarSet, so the first
/// SidecarSet widens it.
#[test]
fn the_condition_read_back_every_pod_or_an_expression() {
    let read = |e: Option<&str>| {
        let c: k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration =
            serde_json::from_value(configuration_with(e)).unwrap();
        match_coverage::read_back(&c).unwrap()
    };
    let coverage = MatchCoverage::default();
    for every_pod in [None, Some("true"), Some(" true ")] {
        let (record, _) = match_record::understood(None, read(every_pod).as_deref());
        assert_eq!(record.expression(), None, "{every_pod:?}");
        coverage.set(record);
        assert!(coverage.covers(&sidecarset("web")));
    }
    let (record, ours) = match_record::understood(None, read(Some("false")).as_deref());
    assert!(ours);
    coverage.set(record);
    assert!(
        !coverage.covers(&sidecarset("web")),
        "the chart's initial condition covers no SidecarSet"
    );
}
