//! The standard status conditions of a SidecarSet, computed from what a reconcile observed (the
//! pod counts, the rollout plan, the pods' views). Pure.
//!
//! * `Ready`: every matched pod runs the current sidecars and is ready, at the current generation
//!   (`kubectl wait --for=condition=Ready sidecarset/NAME`).
//! * `Progressing`: a rollout is moving: pods are being upgraded, or updated pods are becoming
//!   ready. `Reconciling` says the same for kstatus (Flux, `kpt live status`, cli-utils), which
//!   reads `Reconciling` and `Stalled` on custom resources.
//! * `Stalled`: the rollout cannot move without a change: `updateStrategy.paused`, `type:
//!   NotUpdate` with pods on older sidecars, a pod whose in-place write the API server refuses
//!   (the other pods go on meanwhile), pods that differ in more than images, a sidecar image the
//!   kubelet cannot pull, a resize of sidecars the kubelet refused (in-place resize), or an
//!   invalid strategy.
//!
//! A rollout held on purpose by `partition`, `updateStrategy.selector` or `maxUnavailable: 0` is
//! neither progressing nor stalled; `Ready` is then False with the reason `Partitioned`,
//! `UpdateSelector` or `MaxUnavailableZero`.
//! With `--injection=policy|auto`, `InjectedByPolicy` says whether the API server injects the
//! SidecarSet's pods itself or the webhook does, and why.
//!
//! Every condition carries the same reason and message (the state of the SidecarSet), and keeps
//! its `lastTransitionTime` while its status does not change.

use crate::cluster::injection::Injection;
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
    /// Pods whose last in-place write the API server refused (sorted by key).
    pub refused: &'a [Refused],
}

/// A pod whose last in-place write the API server refused (kept by
/// [`super::act::refused::Refusals`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// `namespace/name`.
    pub key: String,
    /// What was refused: `"hot-upgrade reset"` or `"in-place upgrade"`.
    pub write: &'static str,
    /// The API server's answer.
    pub why: String,
    /// How long until the write is tried again; None: due now (planned this round).
    pub retry_in: Option<std::time::Duration>,
}

use sidecarset_core::rollout::{pods, some_keys as some};

fn health(phase: Phase, reason: &'static str, message: String) -> Health {
    Health {
        phase,
        reason,
        message,
    }
}

/// Decides the SidecarSet's state (see the module documentation). The checks go in order: the
/// first that applies decides.
pub fn assess(o: &HealthInputs) -> Health {
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
    let s = Situation::new(o, plan);
    if plan.done {
        return complete(o.status);
    }
    stopped_by_strategy(&s)
        .or_else(|| refused(&s))
        .or_else(|| moving(&s))
        .or_else(|| held_or_stuck(&s))
        .unwrap_or_else(|| {
            // Candidates held by maxUnavailable (pods that are not ready), or waiting for the
            // kubelet to report what their spec asks for.
            health(
                Phase::Progressing,
                "WaitingForPods",
                format!("{}; {}", s.counts, s.waiting()),
            )
        })
}

/// What [`assess`]'s checks read: the inputs, the plan, and what is derived from them.
struct Situation<'a> {
    o: &'a HealthInputs<'a>,
    plan: &'a Plan,
    /// `"U of M matched pods updated, R ready"`.
    counts: String,
    /// Matched pods on older sidecars.
    old: usize,
    /// Updated pods on their way to ready (not those that cannot pull their image).
    in_flight: usize,
}

impl<'a> Situation<'a> {
    fn new(o: &'a HealthInputs<'a>, plan: &'a Plan) -> Self {
        let st = o.status;
        let failed_keys: Vec<&str> = o.pull_failures.iter().map(|(k, _)| k.as_str()).collect();
        let in_flight = o
            .views
            .iter()
            .filter(|v| v.matched() && v.updated && !v.ready_and_consistent())
            .filter(|v| v.resize_refused.is_none())
            .filter(|v| !failed_keys.contains(&v.key.as_str()))
            .count();
        Situation {
            o,
            plan,
            counts: format!(
                "{} of {} matched pods updated, {} ready",
                st.updated, st.matched, st.updated_ready
            ),
            old: usize::try_from(st.matched - st.updated).unwrap_or(0),
            in_flight,
        }
    }

    /// What the rollout waits for, as the plan says it (else the counts).
    fn waiting(&self) -> String {
        self.plan
            .waiting
            .clone()
            .unwrap_or_else(|| self.counts.clone())
    }

    /// Progressing, waiting for pods in flight.
    fn waiting_for_pods(&self) -> Health {
        health(
            Phase::Progressing,
            "WaitingForPods",
            format!("{}; waiting for {}", self.counts, self.waiting()),
        )
    }

    /// The matched pods on older sidecars.
    fn old_views(&self) -> impl Iterator<Item = &'a PodView> + use<'a> {
        self.o.views.iter().filter(|v| v.matched() && !v.updated)
    }
}

/// Ready: the plan is done.
fn complete(st: &Status) -> Health {
    let message = if st.matched == 0 {
        "no pod is injected by this SidecarSet".to_string()
    } else {
        format!(
            "all {} matched pods run the current sidecars and are ready",
            st.matched
        )
    };
    health(Phase::Ready, "RolloutComplete", message)
}

/// `type: NotUpdate` or `paused`: stalled while pods keep older sidecars, else waiting for the
/// pods in flight.
fn stopped_by_strategy(s: &Situation) -> Option<Health> {
    let (reason, why) = if s.o.strategy.type_ == Some(UpdateStrategyType::NotUpdate) {
        (
            "NotUpdate",
            "spec.updateStrategy.type is NotUpdate: pods are injected at creation and never upgraded in place",
        )
    } else if s.o.strategy.paused {
        (
            "Paused",
            "spec.updateStrategy.paused is true: in-place upgrades are stopped",
        )
    } else {
        return None;
    };
    if s.old > 0 {
        return Some(health(
            Phase::Stalled,
            reason,
            format!("{why}; {} keep older sidecars ({})", pods(s.old), s.counts),
        ));
    }
    Some(s.waiting_for_pods())
}

/// Pods whose in-place write the API server refuses: stalled, naming them (each is retried
/// after its own delay, and the other pods go on meanwhile).
fn refused(s: &Situation) -> Option<Health> {
    let refused = s.o.refused;
    if refused.is_empty() {
        return None;
    }
    let named: Vec<String> = refused
        .iter()
        .map(|r| format!("{} ({}: {})", r.key, r.write, r.why))
        .collect();
    Some(health(
        Phase::Stalled,
        "PodWriteRefused",
        format!(
            "{}; the API server refused the write to {}: {}; each is retried with a growing delay while the other pods go on: allow the write (the admission policy or webhook that refuses it) or recreate the pod",
            s.counts,
            pods(refused.len()),
            some(named.iter().map(String::as_str))
        ),
    ))
}

/// Pods being upgraded or on their way to ready; else sidecar images the kubelet cannot pull;
/// else nothing left on older sidecars (waiting for the last pods).
fn moving(s: &Situation) -> Option<Health> {
    let (plan, counts) = (s.plan, &s.counts);
    if !plan.upgrade.is_empty() {
        return Some(health(
            Phase::Progressing,
            "UpgradingPods",
            format!(
                "{counts}; upgrading {} in place: {}",
                pods(plan.upgrade.len()),
                some(plan.upgrade.iter().map(String::as_str))
            ),
        ));
    }
    if s.in_flight > 0 {
        return Some(s.waiting_for_pods());
    }
    let failures = s.o.pull_failures;
    if !failures.is_empty() {
        return Some(health(
            Phase::Stalled,
            "ImagePullFailed",
            format!(
                "{counts}; the kubelet cannot pull a sidecar image of {}: {}; the rollout waits for them (maxUnavailable {}): fix the image or its pull secret",
                pods(failures.len()),
                some(
                    failures
                        .iter()
                        .map(|(k, why)| format!("{k} ({why})"))
                        .collect::<Vec<_>>()
                        .iter()
                        .map(String::as_str)
                ),
                plan.max_unavailable
            ),
        ));
    }
    resize_refused(s).or_else(|| (s.old == 0).then(|| s.waiting_for_pods()))
}

/// Pods whose sidecars' resize the kubelet refused (in-place resize): stalled, naming them and
/// the kubelet's reason; they are left as they are (with their former resources) and the
/// other pods go on.
fn resize_refused(s: &Situation) -> Option<Health> {
    let named: Vec<String> =
        s.o.views
            .iter()
            .filter(|v| v.matched())
            .filter_map(|v| Some(format!("{} ({})", v.key, v.resize_refused.as_deref()?)))
            .collect();
    if named.is_empty() {
        return None;
    }
    Some(health(
        Phase::Stalled,
        "ResizeRefused",
        format!(
            "{}; the kubelet refused to resize the sidecars of {}: {}; they keep their former resources while the other pods go on: free the node's resources (Deferred), lower the SidecarSet's resources (Infeasible), or recreate the pods",
            s.counts,
            pods(named.len()),
            some(named.iter().map(String::as_str))
        ),
    ))
}

/// Older pods kept on purpose (partition, update selector, `maxUnavailable: 0`) or that cannot
/// be upgraded in place.
fn held_or_stuck(s: &Situation) -> Option<Health> {
    let (plan, counts, old) = (s.plan, &s.counts, s.old);
    if plan.partition > 0 && old <= usize::try_from(plan.partition).unwrap_or(0) {
        return Some(health(
            Phase::Held,
            "Partitioned",
            format!(
                "{counts}; spec.updateStrategy.partition {} keeps {} on older sidecars",
                plan.partition,
                pods(old)
            ),
        ));
    }
    if !plan.not_upgradable.is_empty() {
        return Some(health(
            Phase::Stalled,
            "PodsNotUpgradable",
            format!(
                "{counts}; {} differ from this SidecarSet in more than images and cannot be upgraded in place: {}; recreate them",
                pods(plan.not_upgradable.len()),
                some(plan.not_upgradable.iter().map(String::as_str))
            ),
        ));
    }
    let unselected = s.old_views().filter(|v| !v.matches_update_selector).count();
    if unselected == old {
        return Some(health(
            Phase::Held,
            "UpdateSelector",
            format!(
                "{counts}; {} not selected by spec.updateStrategy.selector keep older sidecars",
                pods(unselected)
            ),
        ));
    }
    let candidates = s
        .old_views()
        .filter(|v| v.matches_update_selector && v.upgradable && v.consistent)
        .count();
    (candidates > 0 && plan.max_unavailable == 0).then(|| {
        health(
            Phase::Held,
            "MaxUnavailableZero",
            format!(
                "{counts}; spec.updateStrategy.maxUnavailable is 0: only pods that are not ready are upgraded, {} wait",
                pods(candidates)
            ),
        )
    })
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

/// Condition type present with `--injection=policy|auto`: True while the API server injects
/// the SidecarSet's pods itself (its MutatingAdmissionPolicy, applied as a dry-run probe shows),
/// False while the webhook does, with the reason.
pub const INJECTED_BY_POLICY: &str = "InjectedByPolicy";

/// The [`INJECTED_BY_POLICY`] condition for how the SidecarSet's pods are injected; its
/// `lastTransitionTime` is kept while the status stays.
pub fn injection_condition(
    injection: &Injection,
    generation: Option<i64>,
    previous: &[Condition],
    now: &Time,
) -> Condition {
    let (status, reason, message) = match injection {
        Injection::Policy => (
            "True",
            "PolicyActive",
            "the API server injects this SidecarSet's pods (the operator's MutatingAdmissionPolicy), with no call to the operator".to_string(),
        ),
        Injection::PolicyPending => (
            "False",
            "PolicyPending",
            "compiled into the MutatingAdmissionPolicy, which the API server does not apply yet (a dry-run probe shows it when it does, usually within seconds); the webhook injects meanwhile".to_string(),
        ),
        Injection::Webhook(why) => (
            "False",
            "LeftToWebhook",
            format!("the webhook injects this SidecarSet's pods: {why}"),
        ),
        Injection::NotServed => (
            "False",
            "PolicyNotServed",
            "the webhook injects this SidecarSet's pods: the API server does not serve MutatingAdmissionPolicy at admissionregistration.k8s.io/v1 (Kubernetes 1.36 or later)".to_string(),
        ),
    };
    Condition {
        type_: INJECTED_BY_POLICY.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: previous
            .iter()
            .find(|c| c.type_ == INJECTED_BY_POLICY && c.status == status)
            .map_or_else(|| now.clone(), |c| c.last_transition_time.clone()),
    }
}

#[cfg(test)]
mod tests;
