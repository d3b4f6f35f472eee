//! The standard status conditions of a SidecarSet, computed from what a reconcile observed (the
//! pod counts, the rollout plan, the pods' views). Pure.
//!
//! * `Ready`: every matched pod runs the current sidecars and is ready, at the current generation
//!   (`kubectl wait --for=condition=Ready sidecarset/NAME`).
//! * `Progressing`: a rollout is moving: pods are being upgraded, or updated pods are becoming
//!   ready. `Reconciling` says the same for kstatus (Flux, `kpt live status`, cli-utils), which
//!   reads `Reconciling` and `Stalled` on custom resources.
//! * `Stalled`: the rollout cannot move without a change: `updateStrategy.paused`, `type:
//!   NotUpdate` with pods on older sidecars, pods that differ in more than images, a sidecar image
//!   the kubelet cannot pull, or an invalid strategy.
//!
//! A rollout held on purpose by `partition`, `updateStrategy.selector` or `maxUnavailable: 0` is
//! neither progressing nor stalled; `Ready` is then False with the reason `Partitioned`,
//! `UpdateSelector` or `MaxUnavailableZero`.
//! Every condition carries the same reason and message (the state of the SidecarSet), and keeps
//! its `lastTransitionTime` while its status does not change.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use sidecarset_core::api::{SidecarSet, SidecarSetUpdateStrategy, UpdateStrategyType};
use sidecarset_core::rollout::{Plan, PodView, Status};

pub const READY: &str = "Ready";
pub const PROGRESSING: &str = "Progressing";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";

/// The condition types, in the order they are written.
pub const TYPES: [&str; 4] = [READY, PROGRESSING, RECONCILING, STALLED];

/// Waiting reasons of a container status that mean the kubelet cannot get the image.
pub const IMAGE_PULL_FAILURES: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// Where the SidecarSet stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Every matched pod is updated and ready.
    Ready,
    /// The rollout moves.
    Progressing,
    /// Old pods are kept on purpose (partition, update selector).
    Held,
    /// The rollout cannot move without a change.
    Stalled,
}

/// The state of a SidecarSet: a phase, a CamelCase reason and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub phase: Phase,
    pub reason: &'static str,
    pub message: String,
}

/// What a reconcile observed, as [`assess`] needs it.
#[derive(Debug, Clone, Copy)]
pub struct HealthInputs<'a> {
    pub status: &'a Status,
    pub strategy: &'a SidecarSetUpdateStrategy,
    /// [`sidecarset_core::rollout::plan`]'s answer (its error names the field of a bad strategy).
    pub plan: Result<&'a Plan, &'a str>,
    pub views: &'a [PodView],
    /// Matched pods whose sidecar image the kubelet cannot pull: key and what it reports
    /// (see [`image_pull_failure`]).
    pub pull_failures: &'a [(String, String)],
}

use sidecarset_core::rollout::{pods, some_keys as some};

fn health(phase: Phase, reason: &'static str, message: String) -> Health {
    Health {
        phase,
        reason,
        message,
    }
}

/// Decides the SidecarSet's state (see the module documentation).
pub fn assess(o: &HealthInputs) -> Health {
    let st = o.status;
    let plan = match o.plan {
        Ok(p) => p,
        Err(e) => {
            return health(
                Phase::Stalled,
                "InvalidStrategy",
                format!("the update strategy is invalid: {e}"),
            );
        }
    };
    let counts = format!(
        "{} of {} matched pods updated, {} ready",
        st.updated, st.matched, st.updated_ready
    );
    if plan.done {
        let message = if st.matched == 0 {
            "no pod is injected by this SidecarSet".to_string()
        } else {
            format!(
                "all {} matched pods run the current sidecars and are ready",
                st.matched
            )
        };
        return health(Phase::Ready, "RolloutComplete", message);
    }
    let old = usize::try_from(st.matched - st.updated).unwrap_or(0);
    let waiting = || plan.waiting.clone().unwrap_or_else(|| counts.clone());
    let failed_keys: Vec<&str> = o.pull_failures.iter().map(|(k, _)| k.as_str()).collect();
    // Updated pods on their way to ready (not those that cannot pull their image).
    let in_flight = o
        .views
        .iter()
        .filter(|v| v.matched() && v.updated && !v.ready_and_consistent())
        .filter(|v| !failed_keys.contains(&v.key.as_str()))
        .count();
    let in_flight_message = || format!("{counts}; waiting for {}", waiting());

    let stopped = if o.strategy.type_ == Some(UpdateStrategyType::NotUpdate) {
        Some((
            "NotUpdate",
            "spec.updateStrategy.type is NotUpdate: pods are injected at creation and never upgraded in place",
        ))
    } else if o.strategy.paused {
        Some((
            "Paused",
            "spec.updateStrategy.paused is true: in-place upgrades are stopped",
        ))
    } else {
        None
    };
    if let Some((reason, why)) = stopped {
        if old > 0 {
            return health(
                Phase::Stalled,
                reason,
                format!("{why}; {} keep older sidecars ({counts})", pods(old)),
            );
        }
        return health(Phase::Progressing, "WaitingForPods", in_flight_message());
    }
    if !plan.upgrade.is_empty() {
        return health(
            Phase::Progressing,
            "UpgradingPods",
            format!(
                "{counts}; upgrading {} in place: {}",
                pods(plan.upgrade.len()),
                some(plan.upgrade.iter().map(String::as_str))
            ),
        );
    }
    if in_flight > 0 {
        return health(Phase::Progressing, "WaitingForPods", in_flight_message());
    }
    if !o.pull_failures.is_empty() {
        return health(
            Phase::Stalled,
            "ImagePullFailed",
            format!(
                "{counts}; the kubelet cannot pull a sidecar image of {}: {}; the rollout waits for them (maxUnavailable {}): fix the image or its pull secret",
                pods(o.pull_failures.len()),
                some(
                    o.pull_failures
                        .iter()
                        .map(|(k, why)| format!("{k} ({why})"))
                        .collect::<Vec<_>>()
                        .iter()
                        .map(String::as_str)
                ),
                plan.max_unavailable
            ),
        );
    }
    if old == 0 {
        return health(Phase::Progressing, "WaitingForPods", in_flight_message());
    }
    if plan.partition > 0 && old <= usize::try_from(plan.partition).unwrap_or(0) {
        return health(
            Phase::Held,
            "Partitioned",
            format!(
                "{counts}; spec.updateStrategy.partition {} keeps {} on older sidecars",
                plan.partition,
                pods(old)
            ),
        );
    }
    if !plan.not_upgradable.is_empty() {
        return health(
            Phase::Stalled,
            "PodsNotUpgradable",
            format!(
                "{counts}; {} differ from this SidecarSet in more than images and cannot be upgraded in place: {}; recreate them",
                pods(plan.not_upgradable.len()),
                some(plan.not_upgradable.iter().map(String::as_str))
            ),
        );
    }
    let old_views = || o.views.iter().filter(|v| v.matched() && !v.updated);
    let unselected = old_views().filter(|v| !v.matches_update_selector).count();
    if unselected == old {
        return health(
            Phase::Held,
            "UpdateSelector",
            format!(
                "{counts}; {} not selected by spec.updateStrategy.selector keep older sidecars",
                pods(unselected)
            ),
        );
    }
    let candidates = old_views()
        .filter(|v| v.matches_update_selector && v.upgradable && v.consistent)
        .count();
    if candidates > 0 && plan.max_unavailable == 0 {
        return health(
            Phase::Held,
            "MaxUnavailableZero",
            format!(
                "{counts}; spec.updateStrategy.maxUnavailable is 0: only pods that are not ready are upgraded, {} wait",
                pods(candidates)
            ),
        );
    }
    // Candidates held by maxUnavailable (pods that are not ready), or waiting for the kubelet to
    // report what their spec asks for.
    health(
        Phase::Progressing,
        "WaitingForPods",
        format!("{counts}; {}", waiting()),
    )
}

/// What a pod's sidecar container statuses (containers, and native sidecars) report as an image
/// pull failure: `"proxy: ImagePullBackOff"`, or `None`.
pub fn image_pull_failure(pod: &Pod, ss: &SidecarSet) -> Option<String> {
    let names = ss.pod_container_names();
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .filter(|c| names.contains(&c.name))
        .find_map(|c| {
            let reason = c.state.as_ref()?.waiting.as_ref()?.reason.as_deref()?;
            IMAGE_PULL_FAILURES
                .contains(&reason)
                .then(|| format!("{}: {reason}", c.name))
        })
}

/// The conditions for `health` at `generation`: each keeps its `lastTransitionTime` from
/// `previous` while its status stays the same, and takes `now` when it changes.
pub fn conditions(
    health: &Health,
    generation: Option<i64>,
    previous: &[Condition],
    now: &Time,
) -> Vec<Condition> {
    TYPES
        .iter()
        .map(|&type_| {
            let on = match type_ {
                READY => health.phase == Phase::Ready,
                STALLED => health.phase == Phase::Stalled,
                _ => health.phase == Phase::Progressing,
            };
            let status = if on { "True" } else { "False" };
            let last_transition_time = previous
                .iter()
                .find(|c| c.type_ == type_ && c.status == status)
                .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
            Condition {
                type_: type_.to_string(),
                status: status.to_string(),
                reason: health.reason.to_string(),
                message: health.message.clone(),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

/// Condition type present while `injectionStrategy.revision` pins a revision: True when the
/// pin names a revision of this SidecarSet, False (`RevisionNotFound`) when new pods get the
/// current spec instead.
pub const PINNED_REVISION: &str = "PinnedRevisionFound";

/// The [`PINNED_REVISION`] condition; its `lastTransitionTime` is kept while the status stays.
pub fn pinned_revision_condition(
    resolved: bool,
    pin: &str,
    generation: Option<i64>,
    previous: &[Condition],
    now: &Time,
) -> Condition {
    let status = if resolved { "True" } else { "False" };
    Condition {
        type_: PINNED_REVISION.to_string(),
        status: status.to_string(),
        reason: if resolved {
            "RevisionFound"
        } else {
            "RevisionNotFound"
        }
        .to_string(),
        message: if resolved {
            format!("new pods get the pinned revision ({pin})")
        } else {
            format!(
                "no ControllerRevision of this SidecarSet matches {pin}: new pods get the current spec; pin an existing revision"
            )
        },
        observed_generation: generation,
        last_transition_time: previous
            .iter()
            .find(|c| c.type_ == PINNED_REVISION && c.status == status)
            .map_or_else(|| now.clone(), |c| c.last_transition_time.clone()),
    }
}

/// Condition type present while the SidecarSet conflicts with another one (the same container
/// name, a volume defined differently, an annotation overwritten, on pods both can select):
/// the validating webhook refuses such a SidecarSet, but two written at the same moment, or
/// while the webhook was away, can both be stored. Pods then get only one of them.
pub const CONFLICT: &str = "Conflict";

/// The [`CONFLICT`] condition for what the conflict check found (None: no conflict, and no
/// condition); its `lastTransitionTime` is kept while it stays.
pub fn conflict_condition(
    conflict: Option<&str>,
    generation: Option<i64>,
    previous: &[Condition],
    now: &Time,
) -> Option<Condition> {
    let found = conflict?;
    Some(Condition {
        type_: CONFLICT.to_string(),
        status: "True".to_string(),
        reason: "ConflictsWithSidecarSet".to_string(),
        message: format!(
            "{found}; pods both select get the sidecars of only one of them: change one of the two"
        ),
        observed_generation: generation,
        last_transition_time: previous
            .iter()
            .find(|c| c.type_ == CONFLICT && c.status == "True")
            .map_or_else(|| now.clone(), |c| c.last_transition_time.clone()),
    })
}

#[cfg(test)]
mod tests {
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
        let why =
            "spec.containers[0].name: container \"proxy\" is also injected by SidecarSet \"b\"";
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
        let again =
            pinned_revision_condition(false, "x", Some(4), std::slice::from_ref(&missing), &t1);
        assert_eq!(again.last_transition_time, t0);
        let found =
            pinned_revision_condition(true, "x", Some(4), std::slice::from_ref(&missing), &t1);
        assert_eq!(
            (found.status.as_str(), found.last_transition_time.clone()),
            ("True", t1)
        );
    }
}
