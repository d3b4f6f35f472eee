//! Carrying out a plan: the status write, the in-place upgrades of one step, the pods'
//! `SidecarSetUpgradable` condition and the Events. Every write is conditional on what the plan
//! was made from (resourceVersion), so a stale cache or a former leader cannot overwrite newer
//! state.

use super::plan::{self, Note, ReconcilePlan};
use super::slim::SlimPod;
use super::{Ctx, Error};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use sidecarset_core::api::SidecarSet;
use sidecarset_core::api::v1beta1::SidecarSet as StoredSidecarSet;
use sidecarset_core::index::Entry;
use sidecarset_core::rollout;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tracing::{Instrument, debug, info, warn};

/// Publishes the notes as Events on the SidecarSet.
pub async fn publish(ctx: &Ctx, ss: &SidecarSet, notes: Vec<Note>) {
    for n in notes {
        ctx.events
            .publish(ss.object_ref(&()), n.kind, n.reason, n.note)
            .await;
    }
}

/// The merge patch of a planned status: a field the status no longer has is written as null
/// (a merge patch leaves out what it does not name, so `podsWithoutSidecars` would stay).
pub fn status_patch(plan: &ReconcilePlan) -> serde_json::Value {
    let mut status = json!(plan.status);
    if let Some(o) = status.as_object_mut() {
        for key in ["podsWithoutSidecars", "collisionCount", "latestRevision"] {
            o.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    json!({ "status": status })
}

/// Carries out a plan, in order: the status, the reports of excluded pods and of pods without
/// their sidecars, the plan's Events, then the rollout step (the pods' writes).
pub async fn carry_out(
    ctx: &Ctx,
    ss: &SidecarSet,
    entry: &Entry,
    pods: &[Arc<SlimPod>],
    without: &[Arc<SlimPod>],
    planned: &ReconcilePlan,
    latest_revision: &str,
) -> Result<(), Error> {
    let name = ss.name_any();
    if planned.write_status
        && ctx.status_repair(
            &name,
            ss.metadata.resource_version.as_deref(),
            ss.status.as_ref(),
        )
    {
        crate::metrics::metrics().status_repairs.inc();
        tracing::info!(sidecarset = %name, "status repaired: the stored status was not the last one this leader wrote (a late write of a former leader, or a write by someone else)");
    }
    write_status(ctx, ss, planned).await?;
    report_excluded(ctx, entry);
    report_missing(ctx, entry, without).await;
    publish(ctx, ss, planned.notes.clone()).await;
    if let Some(step) = &planned.rollout {
        let step = step.as_ref().map_err(|e| Error::Invalid(e.clone()))?;
        rollout_step(ctx, ss, entry, pods, planned, step, latest_revision).await?;
    }
    Ok(())
}

/// Writes the planned status when it changed, only onto the SidecarSet the plan was made from:
/// the patch carries its resourceVersion, so a write from a stale view (or of a former leader
/// whose request was late) is refused with a conflict instead of replacing newer state. A
/// conflict is replanned at once from the newer object, unless it is with this process's own
/// last write, which the store has not caught up with ([`Ctx::own_last_write`]): that write
/// produced the object planned from with only our status on top, so the status is written again
/// on it (conditional on the resourceVersion it produced) and the reconcile goes on. Each
/// conflict is counted by cause (`sidecarset_operator_status_conflicts_total`).
pub async fn write_status(ctx: &Ctx, ss: &SidecarSet, plan: &ReconcilePlan) -> Result<(), Error> {
    if !plan.write_status {
        return Ok(());
    }
    let name = ss.name_any();
    let planned_from = ss.resource_version();
    let conflict = match patch_status(ctx, &name, plan, planned_from.as_deref()).await {
        Err(Error::Conflict(why)) => why,
        other => return other,
    };
    let own = planned_from
        .as_deref()
        .and_then(|rv| ctx.own_last_write(&name, rv));
    count_status_conflict(own.is_some());
    let Some(own) = own else {
        return Err(Error::Conflict(conflict));
    };
    debug!(sidecarset = %name, resource_version = %own, "the status write conflicted with our own last one, not in the cache yet; writing on top of it");
    let again = patch_status(ctx, &name, plan, Some(&own)).await;
    if matches!(again, Err(Error::Conflict(_))) {
        count_status_conflict(false);
    }
    again
}

fn count_status_conflict(own: bool) {
    let cause = if own { "own" } else { "foreign" };
    crate::metrics::metrics()
        .status_conflicts
        .get_or_create(&crate::metrics::CauseLabel {
            cause: cause.into(),
        })
        .inc();
}

/// The status patch of [`write_status`], conditional on `base` (a resourceVersion); the write
/// remembered on success.
async fn patch_status(
    ctx: &Ctx,
    name: &str,
    plan: &ReconcilePlan,
    base: Option<&str>,
) -> Result<(), Error> {
    let api: Api<StoredSidecarSet> = Api::all(ctx.client.clone());
    let mut body = status_patch(plan);
    if let Some(rv) = base {
        body["metadata"] = json!({ "resourceVersion": rv });
    }
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        Ok(written) => {
            ctx.remember_status(name, &plan.status, base, written.metadata.resource_version);
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Err(Error::Conflict(format!(
            "the SidecarSet changed since it was read ({}); replanning",
            e.message
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Upgrades the step's pods in place, concurrently (the API server is the limit, not us).
/// Returns the keys of the pods upgraded; a pod that changed meanwhile is left for the next
/// reconcile, which its change triggers.
pub async fn upgrade(
    ctx: &Ctx,
    entry: &Entry,
    pods: &BTreeMap<String, &Arc<SlimPod>>,
    keys: &[String],
    revision: &str,
) -> Result<Vec<String>, Error> {
    patch_pods(ctx, entry, pods, keys, revision, Step::Upgrade).await
}

/// What [`patch_pods`] writes into each pod.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Step {
    /// The in-place upgrade ([`rollout::upgrade_patch`]).
    Upgrade,
    /// The reset of old hot-upgrade containers to the empty image ([`rollout::reset_patch`]).
    Reset,
}

/// Writes `step` into the planned pods, 16 at a time; returns the keys of the pods written.
/// A pod that changed meanwhile is replanned; a write refused for the pod itself (see
/// [`refused::refusal`]) holds that pod alone until its retry; any other error of the API fails
/// the step, after every pod was tried.
async fn patch_pods(
    ctx: &Ctx,
    entry: &Entry,
    pods: &BTreeMap<String, &Arc<SlimPod>>,
    keys: &[String],
    revision: &str,
    step: Step,
) -> Result<Vec<String>, Error> {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let read_whole = reads_whole_pods(entry);
    let resizable = match step {
        Step::Upgrade => super::resize::resizable(ctx, entry).unwrap_or_default(),
        Step::Reset => BTreeSet::new(),
    };
    let planned: Vec<(String, Pod)> = keys
        .iter()
        .filter_map(|key| Some((key.clone(), pods.get(key)?.to_pod())))
        .collect();
    tracing::Span::current().record("upgrading", planned.len());
    let results: Vec<(String, Result<Option<Pod>, kube::Error>)> = futures::stream::iter(planned)
        .map(|(key, pod)| {
            let span = tracing::info_span!(
                "upgrade pod",
                namespace = %pod.namespace().unwrap_or_default(),
                pod = %pod.name_any(),
                error = tracing::field::Empty,
            );
            let write = PodWrite {
                entry,
                step,
                now: &now,
                revision,
                read_whole,
                resizable: &resizable,
            };
            let client = ctx.client.clone();
            async move {
                let r = write.patch(client, pod).await;
                if let Err(e) = &r {
                    tracing::Span::current().record("error", e.to_string().as_str());
                }
                (key, r)
            }
            .instrument(span)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let name = entry.ss.name();
    let mut upgraded = Vec::new();
    let mut first_error = None;
    for (key, r) in results {
        match r {
            Ok(None) => ctx.refusals.written(name, &key),
            Ok(Some(pod)) => {
                ctx.refusals.written(name, &key);
                ctx.expectations.expect(
                    name,
                    &key,
                    pod.metadata.resource_version.as_deref(),
                    tokio::time::Instant::now(),
                );
                written(ctx, name, &key, &pod, step).await;
                upgraded.push(key);
            }
            Err(kube::Error::Api(e)) if refused::changed_meanwhile(&e) => {
                info!(sidecarset = %name, pod = %key, reason = %e.message, "pod changed meanwhile; replanning");
            }
            // Refused for this pod alone: retried after its own delay, the others go on.
            Err(kube::Error::Api(e)) if refused::refusal(&e) => {
                let uid = pods.get(&key).and_then(|p| p.uid()).unwrap_or_default();
                let why = format!("HTTP {}: {}", e.code, e.message);
                let now = tokio::time::Instant::now();
                let delay = ctx
                    .refusals
                    .refused(name, &key, &uid, revision, step, &why, now);
                warn!(sidecarset = %name, pod = %key, error = %why, retry_in = ?delay, "the API server refused the pod's write; the other pods go on");
                failed(ctx, name, &key, pods, &kube::Error::Api(e), step).await;
            }
            Err(e) => {
                failed(ctx, name, &key, pods, &e, step).await;
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(upgraded),
    }
}

/// Whether the pods must be read whole before their patch: the cache keeps only the injection
/// annotations, and patchPodMetadata that reads the pod's own values (Retain, MergePatchJson)
/// needs the rest.
fn reads_whole_pods(entry: &Entry) -> bool {
    entry
        .ss
        .spec
        .patch_pod_metadata
        .iter()
        .any(|p| p.patch_policy != Some(sidecarset_core::api::PatchPolicy::Overwrite))
}

/// What one pod's write of a step needs.
#[derive(Clone, Copy)]
struct PodWrite<'a> {
    entry: &'a Entry,
    step: Step,
    /// The time written into the pod's annotations.
    now: &'a str,
    revision: &'a str,
    read_whole: bool,
    /// In-place resize: the hashes without image a resize starts from (empty: off).
    resizable: &'a BTreeSet<String>,
}

impl PodWrite<'_> {
    /// Patches `pod` (read whole first if need be), conditional on its resourceVersion; None:
    /// nothing to write.
    async fn patch(self, client: kube::Client, pod: Pod) -> Result<Option<Pod>, kube::Error> {
        let api: Api<Pod> = Api::namespaced(client, &pod.namespace().unwrap_or_default());
        let pod = if self.read_whole {
            api.get(&pod.name_any()).await?
        } else {
            pod
        };
        // In-place resize: the sidecars' resources first, through the resize subresource.
        let resized = self.step == Step::Upgrade
            && super::resize::needs_resize(&pod, self.entry, self.resizable);
        let pod = if resized {
            super::resize::resize_pod(&api, pod, self.entry).await?
        } else {
            pod
        };
        let patch = match self.step {
            Step::Upgrade => rollout::upgrade_patch_resized(
                &pod,
                self.entry,
                self.now,
                self.revision,
                self.resizable,
            ),
            Step::Reset => rollout::reset_patch(&pod, self.entry, self.now),
        };
        let Some(mut patch) = patch else {
            return Ok(None);
        };
        precondition(&pod, resized, &mut patch);
        api.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
        .map(Some)
    }
}

/// Only if the pod is still what we planned on (a stale cache or another leader): its
/// resourceVersion; after a resize, its uid and hash annotation (the kubelet writes the pod's
/// status as it takes the resize up, and that must not undo the upgrade's write).
fn precondition(pod: &Pod, resized: bool, patch: &mut json_patch::Patch) {
    let test = |path: jsonptr::PointerBuf, value: &str| {
        json_patch::PatchOperation::Test(json_patch::TestOperation {
            path,
            value: value.into(),
        })
    };
    let hash = pod
        .annotations()
        .get(sidecarset_core::api::ANNOTATION_HASH)
        .cloned();
    match (resized, pod.uid(), hash) {
        (true, Some(uid), Some(hash)) => {
            patch.0.insert(
                0,
                test(jsonptr::PointerBuf::from_tokens(["metadata", "uid"]), &uid),
            );
            patch.0.insert(
                1,
                test(
                    jsonptr::PointerBuf::from_tokens([
                        "metadata",
                        "annotations",
                        sidecarset_core::api::ANNOTATION_HASH,
                    ]),
                    &hash,
                ),
            );
        }
        _ => {
            if let Some(rv) = pod.resource_version() {
                patch.0.insert(
                    0,
                    test(
                        jsonptr::PointerBuf::from_tokens(["metadata", "resourceVersion"]),
                        &rv,
                    ),
                );
            }
        }
    }
}

/// Reports a pod written by `step`: an Event for a reset; the metric and the pod's
/// `SidecarSetUpgradable` entry for an upgrade.
async fn written(ctx: &Ctx, name: &str, key: &str, pod: &Pod, step: Step) {
    match step {
        Step::Reset => {
            info!(sidecarset = %name, pod = %key, "old hot-upgrade containers reset to the empty image");
            ctx.events
                .publish(
                    pod.object_ref(&()),
                    crate::events::EventType::Normal,
                    "ResetContainerSucceed",
                    format!("SidecarSet {name}: the old hot-upgrade containers were reset to the empty image"),
                )
                .await;
        }
        Step::Upgrade => {
            info!(sidecarset = %name, pod = %key, "sidecar images upgraded in place");
            crate::metrics::metrics()
                .pods_upgraded
                .get_or_create(&crate::metrics::label(name))
                .inc();
            // As OpenKruise: upgraded, so upgradable (True once every SidecarSet agrees).
            set_upgradable(ctx, pod, name, true).await;
        }
    }
}

/// Reports a pod whose write failed (a Warning Event on the pod for a reset).
async fn failed(
    ctx: &Ctx,
    name: &str,
    key: &str,
    pods: &BTreeMap<String, &Arc<SlimPod>>,
    e: &kube::Error,
    step: Step,
) {
    warn!(sidecarset = %name, pod = %key, error = %e, step = ?step, "in-place pod write failed");
    if step == Step::Reset
        && let Some(pod) = pods.get(key)
    {
        ctx.events
            .publish(
                pod.to_pod().object_ref(&()),
                crate::events::EventType::Warning,
                "ResetContainerFailed",
                format!("SidecarSet {name}: resetting the old hot-upgrade containers to the empty image failed: {e}"),
            )
            .await;
    }
}

/// Carries out the rollout part of a plan and publishes its Events.
pub async fn rollout_step(
    ctx: &Ctx,
    ss: &SidecarSet,
    entry: &Entry,
    pods: &[Arc<SlimPod>],
    plan: &ReconcilePlan,
    step: &rollout::Plan,
    revision: &str,
) -> Result<(), Error> {
    let name = ss.name_any();
    let by_key: BTreeMap<String, &Arc<SlimPod>> = pods
        .iter()
        .map(|p| {
            (
                format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
                p,
            )
        })
        .collect();
    let reset = patch_pods(ctx, entry, &by_key, &step.reset, revision, Step::Reset).await?;
    let upgraded = upgrade(ctx, entry, &by_key, &step.upgrade, revision).await?;
    crate::metrics::metrics()
        .rollout_in_progress
        .get_or_create(&crate::metrics::label(&name))
        .set(i64::from(!step.done));
    for key in &step.not_upgradable {
        if let Some(pod) = by_key.get(key) {
            set_upgradable(ctx, &pod.to_pod(), &name, false).await;
        }
    }
    for key in &plan.upgradable_again {
        if let Some(pod) = by_key.get(key) {
            set_upgradable(ctx, &pod.to_pod(), &name, true).await;
        }
    }
    publish(
        ctx,
        ss,
        plan::step_notes(step, &upgraded, &reset, plan.counts.matched),
    )
    .await;
    Ok(())
}

/// Records in the pod condition `SidecarSetUpgradable` whether the pod can be upgraded in place
/// to SidecarSet `ss` (see [`rollout::upgradable_condition`]); writes only a change.
async fn set_upgradable(ctx: &Ctx, pod: &Pod, ss: &str, upgradable: bool) {
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == rollout::CONDITION_UPGRADABLE));
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let Some(cond) = rollout::upgradable_condition(current, ss, upgradable, &now) else {
        return;
    };
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    // Conditional on the pod as we read it: several SidecarSets keep entries in one condition,
    // and a write from a stale view would drop another's entry (a conflict is retried at the
    // next reconcile, which the pod's change triggers).
    let mut body = json!({"status": {"conditions": [cond]}});
    if let Some(rv) = pod.resource_version() {
        body["metadata"] = json!({"resourceVersion": rv});
    }
    match api
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(body),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            debug!(pod = %pod.name_any(), "pod changed meanwhile; the SidecarSetUpgradable condition is written at the next reconcile")
        }
        Err(e) => {
            warn!(pod = %pod.name_any(), error = %e, "cannot set the SidecarSetUpgradable condition")
        }
    }
}

pub mod refused;
pub mod reports;

pub use reports::{report_excluded, report_missing};

#[cfg(test)]
mod against_a_mock_api_server;
#[cfg(test)]
mod against_a_mock_api_server_resize;
