//! The plan of one reconcile: a pure function of what was observed (the SidecarSet, its pods,
//! its latest revision), tested without a server. [`super::act`] carries it out.

use super::conditions;
use super::slim::SlimPod;
use crate::events::EventType;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use sidecarset_core::api::{SidecarSet, SidecarSetStatus, UpdateStrategyType};
use sidecarset_core::index::Entry;
use sidecarset_core::rollout::{self, PodView};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What a reconcile saw.
pub struct Observation<'a> {
    /// The SidecarSet as stored (its status is the one last written).
    pub ss: &'a SidecarSet,
    /// The same, defaulted, with its compiled scope and hashes.
    pub entry: &'a Entry,
    /// Its pods (injected and still selected), and their views.
    pub pods: &'a [Arc<SlimPod>],
    pub views: &'a [PodView],
    pub latest_revision: &'a str,
    pub collision_count: i32,
    /// Whether `injectionStrategy.revision` names a known revision.
    pub pin_resolves: bool,
    /// What conflicts with another SidecarSet of the view, if anything (see
    /// [`conditions::conflict_condition`]).
    pub conflict: Option<String>,
    /// How its pods are injected (None: `--injection=webhook`, no condition).
    pub injection: Option<crate::cluster::injection::Injection>,
    /// Active pods it selects that run without its sidecars.
    pub without_sidecars: usize,
    /// Whether those are evicted (`--evict-pods-without-sidecars`).
    pub evicting: bool,
    /// Pods whose last in-place write the API server refused (see [`super::act::refused`]):
    /// reported, and held out of the rollout until their retry is due.
    pub refused: &'a [conditions::Refused],
    /// Where the ControllerRevisions are (for messages).
    pub revisions_namespace: &'a str,
    pub rules: rollout::Rules,
    pub now: &'a Time,
}

/// An Event to publish on the SidecarSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub kind: EventType,
    pub reason: &'static str,
    pub note: String,
}

/// When to look again without a change to the SidecarSet or its pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Only when something changes (the watches wake the reconcile).
    OnChange,
    /// Soon as well: pods are in flight (a safety net; their changes wake it first).
    After(Duration),
}

/// How soon to look again while pods are in flight.
pub const IN_FLIGHT_RECHECK: Duration = Duration::from_secs(5);

/// What to do.
#[derive(Debug)]
pub struct ReconcilePlan {
    pub status: SidecarSetStatus,
    /// The status differs from the stored one.
    pub write_status: bool,
    pub health: conditions::Health,
    pub counts: rollout::Status,
    /// The rollout's step; None with `updateStrategy.type: NotUpdate`. An error names what is
    /// wrong with the update strategy.
    pub rollout: Option<Result<rollout::Plan, String>>,
    /// Pods recorded as not upgradable that are upgradable again (or updated).
    pub upgradable_again: Vec<String>,
    /// Events to publish whatever the pod writes do.
    pub notes: Vec<Note>,
    pub next: Next,
}

fn pin_label(ss: &SidecarSet) -> String {
    match ss
        .spec
        .injection_strategy
        .revision
        .as_ref()
        .map(|w| (&w.revision_name, &w.custom_version))
    {
        Some((Some(n), _)) => format!("revisionName {n:?}"),
        Some((None, Some(v))) => format!("customVersion {v:?}"),
        _ => "nothing".to_string(),
    }
}

/// The `SidecarSetUpgradable` entries of a pod's condition, when it has one.
fn recorded_upgradable(pod: &SlimPod) -> Option<BTreeMap<String, bool>> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == rollout::CONDITION_UPGRADABLE))
        .and_then(|c| c.message.as_deref())
        .and_then(|m| serde_json::from_str(m).ok())
}

/// The pod's `kruise.io/sidecarset-inplace-update-state` has an entry for SidecarSet `ss`: it
/// was upgraded in place by it.
fn upgraded_in_place(pod: &SlimPod, ss: &str) -> bool {
    pod.annotations()
        .get(rollout::ANNOTATION_INPLACE_UPDATE_STATE)
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .is_some_and(|v| v.get(ss).is_some())
}

/// The SidecarSet's state for its conditions (see [`conditions::assess`]); the pods' container
/// statuses are read only for matched pods that are not ready (image pull failures).
fn health(
    o: &Observation,
    st: &rollout::Status,
    planned: &Result<rollout::Plan, String>,
) -> conditions::Health {
    let (entry, pods, views) = (o.entry, o.pods, o.views);
    let pull_failures: Vec<(String, String)> = pods
        .iter()
        .zip(views)
        .filter(|(_, v)| v.matched() && !v.ready_and_consistent())
        .filter_map(|(p, v)| {
            conditions::image_pull_failure(&p.to_pod(), &entry.ss).map(|why| (v.key.clone(), why))
        })
        .collect();
    conditions::assess(&conditions::HealthInputs {
        status: st,
        strategy: &entry.ss.spec.update_strategy,
        plan: planned.as_ref().map_err(String::as_str),
        views,
        pull_failures: &pull_failures,
        refused: o.refused,
    })
}

/// Plans one reconcile.
pub fn plan(o: &Observation) -> ReconcilePlan {
    let name = o.ss.name_any();
    let counts = rollout::status(o.views);
    let strategy = &o.entry.ss.spec.update_strategy;
    let not_update = strategy.type_ == Some(UpdateStrategyType::NotUpdate);
    let held: std::collections::BTreeSet<String> = o
        .refused
        .iter()
        .filter(|r| r.retry_in.is_some())
        .map(|r| r.key.clone())
        .collect();
    let planned = rollout::plan_holding(strategy, o.views, o.rules, &held);
    let health = health(o, &counts, &planned);
    let previous = o.ss.status.as_ref().map_or(&[][..], |s| &s.conditions);
    let mut conditions = conditions::conditions(&health, o.ss.metadata.generation, previous, o.now);
    let mut notes = Vec::new();
    if o.ss.spec.injection_strategy.revision.is_some() {
        let (condition, note) = pinned_revision(o, &name, previous);
        conditions.push(condition);
        notes.extend(note);
    }
    // A conflict that got in anyway (written at the same moment as the other, or while the
    // webhook was away).
    conditions.extend(conditions::conflict_condition(
        o.conflict.as_deref(),
        o.ss.metadata.generation,
        previous,
        o.now,
    ));
    conditions.extend(
        o.injection
            .as_ref()
            .map(|i| conditions::injection_condition(i, o.ss.metadata.generation, previous, o.now)),
    );
    notes.extend(resize_refused_note(o.views));
    let status = SidecarSetStatus {
        observed_generation: o.ss.metadata.generation,
        matched_pods: counts.matched,
        updated_pods: counts.updated,
        ready_pods: counts.ready,
        updated_ready_pods: counts.updated_ready,
        latest_revision: Some(o.latest_revision.to_string()),
        collision_count: Some(o.collision_count).filter(|c| *c > 0),
        pods_without_sidecars: Some(o.without_sidecars as i32).filter(|n| *n > 0),
        conditions,
    };
    let write_status = o.ss.status.as_ref() != Some(&status);
    let upgradable_again = upgradable_again(o, &name);
    let (rollout, next) = if not_update {
        (None, Next::OnChange)
    } else {
        let next = next_for_rollout(o, &planned);
        (Some(planned), next)
    };
    ReconcilePlan {
        status,
        write_status,
        health,
        counts,
        rollout,
        upgradable_again,
        notes,
        next: with_evictions(o, next),
    }
}

/// A Warning naming the pods whose sidecars' resize the kubelet refused (in-place resize):
/// they keep their former resources; the other pods go on.
fn resize_refused_note(views: &[PodView]) -> Option<Note> {
    let refused: Vec<String> = views
        .iter()
        .filter(|v| v.matched())
        .filter_map(|v| Some(format!("{} ({})", v.key, v.resize_refused.as_deref()?)))
        .collect();
    (!refused.is_empty()).then(|| Note {
        kind: EventType::Warning,
        reason: "ResizeRefused",
        note: format!(
            "the kubelet refused to resize the sidecars of {} pod(s), left as they are with their former resources: {}",
            refused.len(),
            preview(&refused)
        ),
    })
}

/// The `PinnedRevisionFound` condition of a SidecarSet that pins a revision, and, when the pin
/// does not resolve, the Warning that says so.
fn pinned_revision(
    o: &Observation,
    name: &str,
    previous: &[Condition],
) -> (Condition, Option<Note>) {
    let pin = pin_label(o.ss);
    let condition = conditions::pinned_revision_condition(
        o.pin_resolves,
        &pin,
        o.ss.metadata.generation,
        previous,
        o.now,
    );
    // New pods get the current spec instead: say so where users look (the webhook cannot write
    // Events per pod for this without flooding).
    let note = (!o.pin_resolves).then(|| Note {
        kind: EventType::Warning,
        reason: "PinnedRevisionNotFound",
        note: format!(
            "spec.injectionStrategy.revision pins {pin} but no such ControllerRevision of this SidecarSet exists in {ns}; new pods get the current spec. Pin an existing revision (kubectl get controllerrevisions -n {ns} -l kruise.io/sidecarset-name={name})",
            ns = o.revisions_namespace
        ),
    });
    (condition, note)
}

/// Pods recorded as not upgradable that are again (the SidecarSet went back to what the pod
/// runs, or changed images only since): their entry goes back to true. Also a pod running our
/// current sidecars whose entry is missing from a condition others keep (our write after the
/// upgrade lost a race).
fn upgradable_again(o: &Observation, name: &str) -> Vec<String> {
    o.pods
        .iter()
        .zip(o.views)
        .filter(|(pod, view)| {
            view.matched()
                && (view.updated || view.upgradable)
                && match recorded_upgradable(pod) {
                    Some(m) => {
                        m.get(name) == Some(&false) || (view.updated && !m.contains_key(name))
                    }
                    // No condition at all: our write after an in-place upgrade lost a race
                    // (pods/status conflict) before any SidecarSet kept one. Only a pod this
                    // SidecarSet upgraded in place gets it (as in OpenKruise, a pod injected
                    // with the current revision has none).
                    None => view.updated && upgraded_in_place(pod, name),
                }
        })
        .map(|(_, v)| v.key.clone())
        .collect()
}

/// When to look again for the rollout: soon while pods are in flight or being written, and when
/// the first refused write is due for its retry.
fn next_for_rollout(o: &Observation, planned: &Result<rollout::Plan, String>) -> Next {
    let next = next_for_pods(o, planned);
    let Some(retry) = o.refused.iter().filter_map(|r| r.retry_in).min() else {
        return next;
    };
    // Never sooner than a second: a retry due within it is taken by the next look.
    let retry = retry.max(Duration::from_secs(1));
    match next {
        Next::After(d) => Next::After(d.min(retry)),
        Next::OnChange => Next::After(retry),
    }
}

/// [`next_for_rollout`] for the pods in flight or being written.
fn next_for_pods(o: &Observation, planned: &Result<rollout::Plan, String>) -> Next {
    let in_flight = o.views.iter().any(|v| {
        v.matched() && v.updated && !v.ready_and_consistent() && v.resize_refused.is_none()
    });
    match planned {
        Ok(p) if !p.done && (in_flight || !p.upgrade.is_empty() || !p.reset.is_empty()) => {
            Next::After(IN_FLIGHT_RECHECK)
        }
        // Done, paused, held by a partition, waiting for pods that cannot be upgraded in
        // place or for unavailable pods to recover: their changes wake the reconcile.
        _ => Next::OnChange,
    }
}

/// `next`, or a look in a while when pods wait for eviction (the rate lets more go).
fn with_evictions(o: &Observation, next: Next) -> Next {
    let evict_soon = o.evicting && o.without_sidecars > 0;
    if evict_soon && next == Next::OnChange {
        return Next::After(super::missing::EVICTION_RECHECK);
    }
    next
}

/// First keys of a list, for Event notes.
pub fn preview(keys: &[String]) -> String {
    let mut s = keys.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if keys.len() > 5 {
        s.push_str(&format!(" and {} more", keys.len() - 5));
    }
    s
}

/// The Events of a rollout step once its pod writes are done: which pods were upgraded, which
/// cannot be, why nothing moves, or that the rollout is complete.
pub fn step_notes(
    p: &rollout::Plan,
    upgraded: &[String],
    reset: &[String],
    matched: i32,
) -> Vec<Note> {
    let mut notes = Vec::new();
    if !reset.is_empty() {
        notes.push(Note {
            kind: EventType::Normal,
            reason: "HotUpgradeReset",
            note: format!(
                "hot upgrade: the old containers of {} pod(s) were reset to the empty image: {}",
                reset.len(),
                preview(reset)
            ),
        });
    }
    if !upgraded.is_empty() {
        notes.push(Note {
            kind: EventType::Normal,
            reason: "UpgradingPods",
            note: format!(
                "upgrading sidecars in place in {} pod(s): {}",
                upgraded.len(),
                preview(upgraded)
            ),
        });
    }
    if !p.not_upgradable.is_empty() {
        notes.push(Note {
            kind: EventType::Normal,
            reason: "NotUpgradablePods",
            note: format!(
                "{} pod(s) differ from this SidecarSet in more than images and are left alone until recreated: {}",
                p.not_upgradable.len(),
                preview(&p.not_upgradable)
            ),
        });
    }
    if let (Some(why), true) = (
        &p.waiting,
        upgraded.is_empty() && p.reset.is_empty() && !p.done,
    ) {
        notes.push(Note {
            kind: EventType::Warning,
            reason: "RolloutWaiting",
            note: why.clone(),
        });
    }
    if p.done && matched > 0 {
        notes.push(Note {
            kind: EventType::Normal,
            reason: "RolloutComplete",
            note: format!("all {matched} matched pods run the current sidecars"),
        });
    }
    notes
}

#[cfg(test)]
mod tests;
