use super::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;
use sidecarset_core::rollout::{self, PodView};

fn v(key: &str) -> PodView {
    PodView {
        key: key.into(),
        active: true,
        injected: true,
        upgradable: true,
        consistent: true,
        ready: true,
        matches_update_selector: true,
        assigned: true,
        phase_rank: 2,
        ..PodView::default()
    }
}

fn updated(key: &str) -> PodView {
    PodView {
        updated: true,
        ..v(key)
    }
}

fn strategy(j: serde_json::Value) -> SidecarSetUpdateStrategy {
    serde_json::from_value(j).unwrap()
}

/// assess() over the real plan of these views, as the controller calls it.
fn run(
    st: &SidecarSetUpdateStrategy,
    views: &[PodView],
    pull_failures: &[(String, String)],
) -> Health {
    let plan = rollout::plan(st, views);
    assess(&HealthInputs {
        status: &rollout::status(views),
        strategy: st,
        plan: plan.as_ref().map_err(String::as_str),
        views,
        pull_failures,
        refused: &[],
    })
}

#[test]
fn states_from_counts_and_plan() {
    let rolling = strategy(json!({}));
    let not_ready_updated = PodView {
        ready: false,
        ..updated("ns/b")
    };
    let failed = vec![("ns/b".to_string(), "proxy: ImagePullBackOff".to_string())];
    let not_upgradable = PodView {
        upgradable: false,
        ..v("ns/c")
    };
    let unselected = PodView {
        matches_update_selector: false,
        ..v("ns/c")
    };
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        SidecarSetUpdateStrategy,
        Vec<PodView>,
        Vec<(String, String)>,
        Phase,
        &str,
        &str,
    )> = vec![
        (
            "no pod",
            rolling.clone(),
            vec![],
            vec![],
            Phase::Ready,
            "RolloutComplete",
            "no pod is injected",
        ),
        (
            "all updated and ready",
            rolling.clone(),
            vec![updated("ns/a"), updated("ns/b")],
            vec![],
            Phase::Ready,
            "RolloutComplete",
            "all 2 matched pods",
        ),
        (
            "finished pods do not count",
            rolling.clone(),
            vec![
                updated("ns/a"),
                PodView {
                    active: false,
                    ..v("ns/done")
                },
            ],
            vec![],
            Phase::Ready,
            "RolloutComplete",
            "all 1 matched pods",
        ),
        (
            "upgrading",
            rolling.clone(),
            vec![updated("ns/a"), v("ns/b")],
            vec![],
            Phase::Progressing,
            "UpgradingPods",
            "upgrading 1 pod in place: ns/b",
        ),
        (
            "an updated pod becoming ready holds the budget",
            rolling.clone(),
            vec![not_ready_updated.clone(), v("ns/c")],
            vec![],
            Phase::Progressing,
            "WaitingForPods",
            "maxUnavailable 1 reached",
        ),
        (
            "all updated, one not ready yet",
            rolling.clone(),
            vec![updated("ns/a"), not_ready_updated.clone()],
            vec![],
            Phase::Progressing,
            "WaitingForPods",
            "2 of 2 matched pods updated, 1 ready",
        ),
        (
            "the updated pod cannot pull its image: stalled at maxUnavailable",
            rolling.clone(),
            vec![not_ready_updated.clone(), v("ns/c")],
            failed.clone(),
            Phase::Stalled,
            "ImagePullFailed",
            "ns/b (proxy: ImagePullBackOff)",
        ),
        (
            "a pull failure while other pods are upgraded still progresses",
            strategy(json!({"maxUnavailable": 3})),
            vec![not_ready_updated.clone(), v("ns/c")],
            failed.clone(),
            Phase::Progressing,
            "UpgradingPods",
            "ns/c",
        ),
        (
            "paused with old pods",
            strategy(json!({"paused": true})),
            vec![updated("ns/a"), v("ns/b")],
            vec![],
            Phase::Stalled,
            "Paused",
            "1 pod keep older sidecars",
        ),
        (
            "paused, all updated, one not ready",
            strategy(json!({"paused": true})),
            vec![updated("ns/a"), not_ready_updated.clone()],
            vec![],
            Phase::Progressing,
            "WaitingForPods",
            "",
        ),
        (
            "NotUpdate with old pods",
            strategy(json!({"type": "NotUpdate"})),
            vec![v("ns/a")],
            vec![],
            Phase::Stalled,
            "NotUpdate",
            "never upgraded in place",
        ),
        (
            "NotUpdate, all updated",
            strategy(json!({"type": "NotUpdate"})),
            vec![updated("ns/a")],
            vec![],
            Phase::Ready,
            "RolloutComplete",
            "",
        ),
        (
            "not upgradable",
            rolling.clone(),
            vec![updated("ns/a"), not_upgradable.clone()],
            vec![],
            Phase::Stalled,
            "PodsNotUpgradable",
            "cannot be upgraded in place: ns/c; recreate them",
        ),
        (
            "partition keeps the last pod",
            strategy(json!({"partition": 1})),
            vec![updated("ns/a"), v("ns/b")],
            vec![],
            Phase::Held,
            "Partitioned",
            "partition 1 keeps 1 pod",
        ),
        (
            "partition wins over not upgradable pods it keeps anyway",
            strategy(json!({"partition": 1})),
            vec![updated("ns/a"), not_upgradable.clone()],
            vec![],
            Phase::Held,
            "Partitioned",
            "",
        ),
        (
            "partition not reached yet: upgrading",
            strategy(json!({"partition": 1})),
            vec![v("ns/a"), v("ns/b")],
            vec![],
            Phase::Progressing,
            "UpgradingPods",
            "",
        ),
        (
            "update selector keeps the rest",
            strategy(json!({"selector": {"matchLabels": {"canary": "true"}}})),
            vec![updated("ns/a"), unselected.clone()],
            vec![],
            Phase::Held,
            "UpdateSelector",
            "1 pod not selected",
        ),
        (
            "maxUnavailable 0 and every candidate ready: held",
            strategy(json!({"maxUnavailable": 0})),
            vec![v("ns/a")],
            vec![],
            Phase::Held,
            "MaxUnavailableZero",
            "maxUnavailable is 0",
        ),
        (
            "maxUnavailable 0: a candidate that is not ready is upgraded",
            strategy(json!({"maxUnavailable": 0})),
            vec![PodView {
                ready: false,
                ..v("ns/a")
            }],
            vec![],
            Phase::Progressing,
            "UpgradingPods",
            "ns/a",
        ),
        (
            "a candidate whose status does not match its spec yet",
            rolling.clone(),
            vec![PodView {
                consistent: false,
                ..v("ns/a")
            }],
            vec![],
            Phase::Progressing,
            "WaitingForPods",
            "container statuses do not yet match",
        ),
        (
            "invalid strategy",
            SidecarSetUpdateStrategy {
                max_unavailable: Some(IntOrString::String("lots".into())),
                ..Default::default()
            },
            vec![v("ns/a")],
            vec![],
            Phase::Stalled,
            "InvalidStrategy",
            "spec.updateStrategy.maxUnavailable",
        ),
    ];
    for (what, st, views, failures, phase, reason, message) in cases {
        let h = run(&st, &views, &failures);
        assert_eq!((h.phase, h.reason), (phase, reason), "{what}: {h:?}");
        assert!(h.message.contains(message), "{what}: {}", h.message);
    }
}

fn time(s: &str) -> Time {
    serde_json::from_value(json!(s)).unwrap()
}

#[test]
fn conditions_keep_their_transition_time_while_unchanged() {
    let t0 = time("2026-12-01T10:00:00Z");
    let t1 = time("2026-12-01T10:05:00Z");
    let progressing = health(Phase::Progressing, "UpgradingPods", "a".into());
    let first = conditions(&progressing, Some(3), &[], &t0);
    let got: Vec<(&str, &str)> = first
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("Ready", "False"),
            ("Progressing", "True"),
            ("Reconciling", "True"),
            ("Stalled", "False")
        ]
    );
    assert!(first.iter().all(|c| c.observed_generation == Some(3)
        && c.last_transition_time == t0
        && c.reason == "UpgradingPods"));
    // Same statuses, another message: times kept, message and generation follow.
    let again = conditions(
        &health(Phase::Progressing, "WaitingForPods", "b".into()),
        Some(4),
        &first,
        &t1,
    );
    assert!(again.iter().all(|c| c.last_transition_time == t0
        && c.message == "b"
        && c.observed_generation == Some(4)));
    // Ready: Ready and Progressing change (new time), Stalled stays False (old time).
    let ready = conditions(
        &health(Phase::Ready, "RolloutComplete", "c".into()),
        Some(4),
        &again,
        &t1,
    );
    let times: Vec<(&str, &str, &Time)> = ready
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), &c.last_transition_time))
        .collect();
    assert_eq!(
        times,
        [
            ("Ready", "True", &t1),
            ("Progressing", "False", &t1),
            ("Reconciling", "False", &t1),
            ("Stalled", "False", &t0)
        ]
    );
    // Held: nothing true.
    let held = conditions(
        &health(Phase::Held, "Partitioned", "d".into()),
        Some(4),
        &ready,
        &t1,
    );
    assert!(held.iter().all(|c| c.status == "False"));
    let stalled = conditions(
        &health(Phase::Stalled, "Paused", "e".into()),
        None,
        &held,
        &t1,
    );
    assert_eq!(
        stalled
            .iter()
            .filter(|c| c.status == "True")
            .map(|c| c.type_.as_str())
            .collect::<Vec<_>>(),
        ["Stalled"]
    );
}

#[test]
fn image_pull_failures_of_sidecars_only() {
    let ss: SidecarSet = serde_json::from_value(json!({
        "metadata": {"name": "mesh"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "containers": [{"name": "proxy", "image": "p:2"}],
                 "initContainers": [{"name": "agent", "image": "g:2", "restartPolicy": "Always"},
                                    {"name": "setup", "image": "s:1"}]}
    }))
    .unwrap();
    let pod = |statuses: serde_json::Value, init: serde_json::Value| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"},
                "status": {"containerStatuses": statuses, "initContainerStatuses": init}}))
        .unwrap()
    };
    let waiting = |name: &str, reason: &str| {
        json!({"name": name, "image": "", "imageID": "", "ready": false, "restartCount": 0,
                   "state": {"waiting": {"reason": reason}}})
    };
    let cases = [
        (
            pod(json!([waiting("proxy", "ImagePullBackOff")]), json!([])),
            Some("proxy: ImagePullBackOff"),
        ),
        (
            pod(json!([]), json!([waiting("agent", "ErrImagePull")])),
            Some("agent: ErrImagePull"),
        ),
        // The app's own image, a non-native init container, another waiting reason.
        (
            pod(json!([waiting("app", "ImagePullBackOff")]), json!([])),
            None,
        ),
        (
            pod(json!([]), json!([waiting("setup", "ErrImagePull")])),
            None,
        ),
        (
            pod(json!([waiting("proxy", "ContainerCreating")]), json!([])),
            None,
        ),
    ];
    for (p, want) in cases {
        assert_eq!(image_pull_failure(&p, &ss).as_deref(), want);
    }
}

#[test]
fn the_conflict_condition_is_there_only_while_a_conflict_is() {
    let t0 = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
    let t1 = Time(jiff::Timestamp::from_second(1_800_000_100).unwrap());
    let why = "spec.containers[0].name: container \"proxy\" is also injected by SidecarSet \"b\"";
    // (conflict, previous conditions, now) → (present, transition time)
    let first = conflict_condition(Some(why), Some(2), &[], &t0).unwrap();
    let stays = conflict_condition(Some(why), Some(3), std::slice::from_ref(&first), &t1);
    let gone = conflict_condition(None, Some(4), std::slice::from_ref(&first), &t1);
    let cases = [
        ("a conflict appears", Some(&first), Some(t0.clone())),
        (
            "it stays: its time is kept",
            stays.as_ref(),
            Some(t0.clone()),
        ),
        ("it is resolved: no condition", gone.as_ref(), None),
    ];
    for (what, c, time) in cases {
        assert_eq!(c.map(|c| c.last_transition_time.clone()), time, "{what}");
        if let Some(c) = c {
            assert_eq!(
                (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
                (CONFLICT, "True", "ConflictsWithSidecarSet"),
                "{what}"
            );
            assert!(
                c.message.contains("SidecarSet \"b\""),
                "{what}: {}",
                c.message
            );
        }
    }
    assert_eq!(first.observed_generation, Some(2));
}

#[test]
fn the_pinned_revision_condition_says_whether_the_pin_resolves() {
    let t0 = Time(jiff::Timestamp::from_second(1_800_000_000).unwrap());
    let t1 = Time(jiff::Timestamp::from_second(1_800_000_100).unwrap());
    let missing = pinned_revision_condition(false, "customVersion \"v9\"", Some(3), &[], &t0);
    assert_eq!(
        (missing.status.as_str(), missing.reason.as_str()),
        ("False", "RevisionNotFound")
    );
    assert!(missing.message.contains("v9"));
    assert_eq!(missing.observed_generation, Some(3));
    // Unchanged status keeps its transition time; a flip takes the new one.
    let again = pinned_revision_condition(false, "x", Some(4), std::slice::from_ref(&missing), &t1);
    assert_eq!(again.last_transition_time, t0);
    let found = pinned_revision_condition(true, "x", Some(4), std::slice::from_ref(&missing), &t1);
    assert_eq!(
        (found.status.as_str(), found.last_transition_time.clone()),
        ("True", t1)
    );
}

/// A pod whose write the API server refuses stalls the SidecarSet, named with the write and the
/// answer, also while other pods are upgraded; paused says paused first, a done rollout is done.
#[test]
fn a_refused_pod_write_stalls_and_names_the_pod() {
    let st = strategy(json!({"maxUnavailable": 2}));
    let views = [updated("ns/a"), v("ns/b"), v("ns/c")];
    let refused = [Refused {
        key: "ns/b".into(),
        write: "in-place upgrade",
        why: "HTTP 403: admission webhook \"images\" denied the request".into(),
        retry_in: Some(std::time::Duration::from_secs(5)),
    }];
    let held: std::collections::BTreeSet<String> = ["ns/b".to_string()].into();
    let plan = rollout::plan_holding(&st, &views, rollout::Rules::OpenKruise, &held);
    assert_eq!(plan.as_ref().unwrap().upgrade, ["ns/c"], "the others go on");
    let inputs = |st: &SidecarSetUpdateStrategy, plan: Result<&rollout::Plan, &str>| {
        assess(&HealthInputs {
            status: &rollout::status(&views),
            strategy: st,
            plan,
            views: &views,
            pull_failures: &[],
            refused: &refused,
        })
    };
    let h = inputs(&st, plan.as_ref().map_err(String::as_str));
    assert_eq!(
        (h.phase, h.reason),
        (Phase::Stalled, "PodWriteRefused"),
        "{h:?}"
    );
    assert!(
        h.message.contains(
            "the API server refused the write to 1 pod: ns/b (in-place upgrade: HTTP 403: admission webhook \"images\" denied the request)"
        ),
        "{}",
        h.message
    );
    let paused = strategy(json!({"paused": true}));
    let p = rollout::plan(&paused, &views);
    assert_eq!(
        inputs(&paused, p.as_ref().map_err(String::as_str)).reason,
        "Paused"
    );
}
