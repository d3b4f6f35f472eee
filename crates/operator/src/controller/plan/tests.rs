//! The plan of a reconcile from observed state, without a server.

use super::*;
use serde_json::json;

fn sidecarset(strategy: serde_json::Value, status: Option<serde_json::Value>) -> SidecarSet {
    let mut v = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": "mesh", "generation": 3},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "containers": [{"name": "proxy", "image": "proxy:2"}],
                 "updateStrategy": strategy}
    });
    if let Some(s) = status {
        v["status"] = s;
    }
    let mut ss: SidecarSet = serde_json::from_value(v).unwrap();
    sidecarset_core::api::default_sidecarset(&mut ss);
    ss
}

fn slim(key: &str, upgradable: Option<&str>) -> Arc<SlimPod> {
    let (ns, name) = key.split_once('/').unwrap();
    let mut v = json!({"metadata": {"name": name, "namespace": ns}});
    if let Some(m) = upgradable {
        v["status"] = json!({"conditions": [{"type": rollout::CONDITION_UPGRADABLE, "status": "False", "message": m}]});
    }
    Arc::new(serde_json::from_value(v).unwrap())
}

/// A matched pod: `updated` (current sidecars), `ready`, `upgradable` (only images differ).
fn view(key: &str, updated: bool, ready: bool, upgradable: bool) -> PodView {
    PodView {
        key: key.into(),
        active: true,
        injected: true,
        updated,
        upgradable,
        consistent: true,
        ready,
        matches_update_selector: true,
        assigned: true,
        phase_rank: 2,
        created: 1,
        ..Default::default()
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::from_second(1_800_000_000).unwrap())
}

fn plan_for(ss: &SidecarSet, pods: &[Arc<SlimPod>], views: &[PodView]) -> ReconcilePlan {
    let entry = Entry::new(Arc::new(ss.clone())).unwrap();
    let now = now();
    plan(&Observation {
        ss,
        entry: &entry,
        pods,
        views,
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

#[test]
fn a_rollout_upgrades_within_max_unavailable_and_rechecks_while_pods_are_in_flight() {
    let ss = sidecarset(json!({"maxUnavailable": 1}), None);
    let pods: Vec<_> = ["a/p1", "a/p2", "a/p3"]
        .iter()
        .map(|k| slim(k, None))
        .collect();
    let views = [
        view("a/p1", false, true, true),
        view("a/p2", false, true, true),
        view("a/p3", true, true, false),
    ];
    let p = plan_for(&ss, &pods, &views);
    let step = p.rollout.as_ref().unwrap().as_ref().unwrap();
    assert_eq!(step.upgrade.len(), 1, "{step:?}");
    assert_eq!(p.next, Next::After(IN_FLIGHT_RECHECK));
    assert_eq!(
        (p.counts.matched, p.counts.updated, p.counts.ready),
        (3, 1, 3)
    );
    assert!(p.write_status, "no status yet");
    assert_eq!(p.status.latest_revision.as_deref(), Some("mesh-abc"));
    assert_eq!(p.status.observed_generation, Some(3));

    // The upgraded pod not ready yet: nothing more, but look again soon.
    let views = [
        view("a/p1", true, false, false),
        view("a/p2", false, true, true),
        view("a/p3", true, true, false),
    ];
    let p = plan_for(&ss, &pods, &views);
    let step = p.rollout.as_ref().unwrap().as_ref().unwrap();
    assert!(step.upgrade.is_empty());
    assert_eq!(p.next, Next::After(IN_FLIGHT_RECHECK));
}

#[test]
fn paused_partition_held_done_and_not_update_wait_for_a_change() {
    let pods: Vec<_> = ["a/p1", "a/p2"].iter().map(|k| slim(k, None)).collect();
    let old = [
        view("a/p1", false, true, true),
        view("a/p2", false, true, true),
    ];
    for (what, strategy) in [
        ("paused", json!({"paused": true})),
        ("partition holds every pod", json!({"partition": 2})),
        ("NotUpdate", json!({"type": "NotUpdate"})),
    ] {
        let p = plan_for(&sidecarset(strategy, None), &pods, &old);
        assert_eq!(p.next, Next::OnChange, "{what}");
        if let Some(Ok(step)) = &p.rollout {
            assert!(step.upgrade.is_empty(), "{what}: {step:?}");
        }
    }
    // Done.
    let new = [
        view("a/p1", true, true, false),
        view("a/p2", true, true, false),
    ];
    let p = plan_for(&sidecarset(json!({}), None), &pods, &new);
    assert!(p.rollout.as_ref().unwrap().as_ref().unwrap().done);
    assert_eq!(p.next, Next::OnChange);
    // Pods that cannot be upgraded in place (more than images changed): nothing to do until
    // they are recreated.
    let stuck = [
        view("a/p1", false, true, false),
        view("a/p2", false, true, false),
    ];
    let p = plan_for(&sidecarset(json!({}), None), &pods, &stuck);
    let step = p.rollout.as_ref().unwrap().as_ref().unwrap();
    assert_eq!(step.not_upgradable, ["a/p1", "a/p2"]);
    assert_eq!(p.next, Next::OnChange);
}

#[test]
fn an_unchanged_status_is_not_written_again() {
    let pods: Vec<_> = ["a/p1"].iter().map(|k| slim(k, None)).collect();
    let views = [view("a/p1", true, true, false)];
    let first = plan_for(&sidecarset(json!({}), None), &pods, &views);
    assert!(first.write_status);
    let stored = serde_json::to_value(&first.status).unwrap();
    let again = plan_for(&sidecarset(json!({}), Some(stored)), &pods, &views);
    assert!(!again.write_status, "{:?}", again.status);
}

#[test]
fn pods_recorded_not_upgradable_that_are_again_get_their_entry_back() {
    let pods = vec![
        slim("a/back", Some(r#"{"mesh":false}"#)),
        slim("a/still", Some(r#"{"mesh":false}"#)),
        slim("a/lost-race", Some(r#"{"other":true}"#)),
        slim("a/fine", Some(r#"{"mesh":true}"#)),
    ];
    let views = [
        view("a/back", false, true, true),
        view("a/still", false, true, false),
        view("a/lost-race", true, true, false),
        view("a/fine", true, true, false),
    ];
    let p = plan_for(&sidecarset(json!({}), None), &pods, &views);
    assert_eq!(p.upgradable_again, ["a/back", "a/lost-race"]);
}

#[test]
fn a_pod_upgraded_in_place_whose_condition_write_was_lost_gets_one() {
    // No condition at all on any of them: the write after the upgrade lost a pods/status race.
    let in_place = |key: &str, ss: &str| {
        let mut p = (*slim(key, None)).clone();
        p.set_annotations(
            [(
                rollout::ANNOTATION_INPLACE_UPDATE_STATE.to_string(),
                json!({ss: {"revision": "r2", "updateTimestamp": "t"}}).to_string(),
            )]
            .into(),
        );
        Arc::new(p)
    };
    let pods = vec![
        in_place("a/upgraded", "mesh"),
        // Injected with the current revision, never upgraded: none (as OpenKruise).
        slim("a/injected", None),
        // Upgraded in place by another SidecarSet only.
        in_place("a/other", "other"),
        // Upgraded in place, but not on the current sidecars yet.
        in_place("a/behind", "mesh"),
    ];
    let views = [
        view("a/upgraded", true, true, false),
        view("a/injected", true, true, false),
        view("a/other", true, true, false),
        view("a/behind", false, true, false),
    ];
    let p = plan_for(&sidecarset(json!({}), None), &pods, &views);
    assert_eq!(p.upgradable_again, ["a/upgraded"]);
}

#[test]
fn a_pin_that_resolves_to_nothing_is_reported() {
    let mut ss = sidecarset(json!({}), None);
    ss.spec.injection_strategy.revision =
        serde_json::from_value(json!({"customVersion": "v9"})).unwrap();
    let entry = Entry::new(Arc::new(ss.clone())).unwrap();
    let now = now();
    let p = plan(&Observation {
        ss: &ss,
        entry: &entry,
        pods: &[],
        views: &[],
        latest_revision: "mesh-abc",
        collision_count: 2,
        pin_resolves: false,
        conflict: None,
        injection: None,
        without_sidecars: 0,
        evicting: false,
        refused: &[],
        revisions_namespace: "ops",
        rules: rollout::Rules::OpenKruise,
        now: &now,
    });
    assert_eq!(p.notes.len(), 1);
    assert_eq!(p.notes[0].reason, "PinnedRevisionNotFound");
    assert!(p.notes[0].note.contains("customVersion \"v9\"") && p.notes[0].note.contains("-n ops"));
    assert_eq!(p.status.collision_count, Some(2));
    assert!(
        p.status
            .conditions
            .iter()
            .any(|c| c.type_ == "PinnedRevisionFound" && c.status == "False")
    );
}

#[test]
fn step_notes_say_what_happened() {
    let step = rollout::Plan {
        upgrade: vec!["a/p1".into()],
        not_upgradable: vec!["a/p9".into()],
        waiting: Some("waiting for a/p1 to be ready".into()),
        done: false,
        partition: 0,
        max_unavailable: 1,
        reset: vec![],
        held: vec![],
    };
    let reasons = |n: Vec<Note>| n.into_iter().map(|n| n.reason).collect::<Vec<_>>();
    assert_eq!(
        reasons(step_notes(&step, &["a/p1".to_string()], &[], 3)),
        ["UpgradingPods", "NotUpgradablePods"]
    );
    assert_eq!(
        reasons(step_notes(&step, &[], &[], 3)),
        ["NotUpgradablePods", "RolloutWaiting"]
    );
    let done = rollout::Plan {
        done: true,
        ..Default::default()
    };
    assert_eq!(reasons(step_notes(&done, &[], &[], 3)), ["RolloutComplete"]);
    // A hot upgrade's resets: said as such, not as a rollout waiting.
    let resetting = rollout::Plan {
        reset: vec!["a/p2".into()],
        waiting: Some("resetting".into()),
        ..Default::default()
    };
    assert_eq!(
        reasons(step_notes(&resetting, &[], &["a/p2".to_string()], 3)),
        ["HotUpgradeReset"]
    );
    assert!(step_notes(&done, &[], &[], 0).is_empty());
    let many: Vec<String> = (0..7).map(|i| format!("a/p{i}")).collect();
    assert_eq!(preview(&many), "a/p0, a/p1, a/p2, a/p3, a/p4 and 2 more");
}

#[test]
fn a_count_that_drops_to_nothing_is_removed_from_the_status() {
    let pods: Vec<_> = ["a/p1"].iter().map(|k| slim(k, None)).collect();
    let views = [view("a/p1", true, true, false)];
    let p = plan_for(&sidecarset(json!({}), None), &pods, &views);
    assert_eq!(p.status.pods_without_sidecars, None);
    let patch = crate::controller::act::status_patch(&p);
    assert!(patch["status"]["podsWithoutSidecars"].is_null());
    assert!(
        patch["status"]
            .as_object()
            .unwrap()
            .contains_key("podsWithoutSidecars")
    );
    assert_eq!(patch["status"]["matchedPods"], 1);
}

#[test]
fn a_conflict_that_got_in_shows_as_a_condition_and_is_written() {
    let ss = sidecarset(json!({}), None);
    let entry = Entry::new(Arc::new(ss.clone())).unwrap();
    let now = now();
    let observe = |conflict: Option<&str>| {
        plan(&Observation {
            ss: &ss,
            entry: &entry,
            pods: &[],
            views: &[],
            latest_revision: "mesh-abc",
            collision_count: 0,
            pin_resolves: true,
            conflict: conflict.map(String::from),
            injection: None,
            without_sidecars: 0,
            evicting: false,
            refused: &[],
            revisions_namespace: "ops",
            rules: rollout::Rules::OpenKruise,
            now: &now,
        })
    };
    let with = observe(Some(
        "container \"proxy\" is also injected by SidecarSet \"other\"",
    ));
    let c: Vec<_> = with
        .status
        .conditions
        .iter()
        .filter(|c| c.type_ == conditions::CONFLICT)
        .collect();
    assert_eq!(c.len(), 1, "{:?}", with.status.conditions);
    assert!(c[0].message.contains("\"other\""));
    assert!(with.write_status);
    let without = observe(None);
    assert!(
        without
            .status
            .conditions
            .iter()
            .all(|c| c.type_ != conditions::CONFLICT)
    );
}

#[test]
fn how_pods_are_injected_shows_as_a_condition_only_in_policy_modes() {
    use crate::cluster::injection::Injection;
    let ss = sidecarset(json!({}), None);
    let entry = Entry::new(Arc::new(ss.clone())).unwrap();
    let now = now();
    let observe = |injection: Option<Injection>| {
        plan(&Observation {
            ss: &ss,
            entry: &entry,
            pods: &[],
            views: &[],
            latest_revision: "mesh-abc",
            collision_count: 0,
            pin_resolves: true,
            conflict: None,
            injection,
            without_sidecars: 0,
            evicting: false,
            refused: &[],
            revisions_namespace: "ops",
            rules: rollout::Rules::OpenKruise,
            now: &now,
        })
    };
    let condition = |p: &ReconcilePlan| {
        p.status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::INJECTED_BY_POLICY)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    // Webhook mode: no condition (the status stays what it was before policies).
    assert_eq!(condition(&observe(None)), None);
    let cases = [
        (
            Injection::Policy,
            "True",
            "PolicyActive",
            "API server injects",
        ),
        (
            Injection::PolicyPending,
            "False",
            "PolicyPending",
            "the webhook injects meanwhile",
        ),
        (
            Injection::Webhook("spec.containers[0].transferEnv copies env".into()),
            "False",
            "LeftToWebhook",
            "transferEnv",
        ),
        (
            Injection::NotServed,
            "False",
            "PolicyNotServed",
            "does not serve",
        ),
    ];
    for (injection, status, reason, says) in cases {
        let planned = observe(Some(injection.clone()));
        let (s, r, m) = condition(&planned).unwrap_or_default();
        assert_eq!((s.as_str(), r.as_str()), (status, reason), "{injection:?}");
        assert!(m.contains(says), "{injection:?}: {m}");
        assert!(
            planned.write_status,
            "{injection:?}: a new condition is written"
        );
    }
}

#[test]
fn a_refused_resize_is_named_and_blocks_only_its_pod() {
    let ss = sidecarset(json!({"maxUnavailable": 1}), None);
    let pods: Vec<_> = ["a/p1", "a/p2", "a/p3"]
        .iter()
        .map(|k| slim(k, None))
        .collect();
    // p1 was resized and the kubelet refused it; p2 and p3 are still to go.
    let mut refused = view("a/p1", true, true, true);
    refused.consistent = false;
    refused.resize_refused = Some("Infeasible: Node didn't have enough capacity: cpu".into());
    let views = vec![
        refused,
        view("a/p2", false, true, true),
        view("a/p3", false, true, true),
    ];
    let p = plan_for(&ss, &pods, &views);
    let step = p.rollout.as_ref().unwrap().as_ref().unwrap();
    assert_eq!(
        step.upgrade,
        vec!["a/p2".to_string()],
        "maxUnavailable not spent by p1"
    );
    let note = p
        .notes
        .iter()
        .find(|n| n.reason == "ResizeRefused")
        .unwrap();
    assert!(note.note.contains("a/p1 (Infeasible"), "{}", note.note);
    // Once the others are done: stalled, naming p1 and the kubelet's reason.
    let views = vec![
        views[0].clone(),
        view("a/p2", true, true, true),
        view("a/p3", true, true, true),
    ];
    let p = plan_for(&ss, &pods, &views);
    assert_eq!(p.health.phase, conditions::Phase::Stalled);
    assert_eq!(p.health.reason, "ResizeRefused");
    assert!(
        p.health.message.contains("a/p1 (Infeasible"),
        "{}",
        p.health.message
    );
    assert_eq!(p.next, Next::OnChange, "no recheck loop for a refusal");
}
