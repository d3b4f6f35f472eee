//! The SidecarSet controller: status, revision history and in-place rolling upgrades. The
//! decisions are in the pure [`crate::rollout`]; this shell reads pods from a slim cache,
//! writes status and revisions, patches pods, and records Events. Only the leader writes.

pub mod conditions;
pub mod leader;
pub mod revisions;
pub mod slim;

use crate::api::v1beta1::SidecarSet as StoredSidecarSet;
use crate::api::{SidecarSet, SidecarSetStatus, UpdateStrategyType, default_sidecarset};
use crate::rollout::{self, Classifier};
use crate::select::Entry;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use slim::SlimPod;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{Instrument, debug, info, warn};

/// Shared by reconciles.
pub struct Ctx {
    pub client: Client,
    pub pods: Store<SlimPod>,
    /// Namespace of the operator: ControllerRevisions live there.
    pub namespace: String,
    /// Leader election (src/controller/leader.rs): reconciles run only while this replica leads.
    pub leadership: leader::Leadership,
    /// This replica's name in Events.
    pub identity: String,
    /// Last Event note per (SidecarSet, reason): the same note is not repeated.
    last_events: Mutex<HashMap<(String, String), String>>,
    /// The webhooks' view: excluded namespaces, namespace labels, the SidecarSet index, and the
    /// queue of skipped-injection Events.
    pub webhook: Arc<crate::webhook::State>,
    /// `pod uid/SidecarSet` already reported as selected in an excluded namespace.
    reported_excluded: Mutex<std::collections::HashSet<String>>,
    /// How `partition` and `maxUnavailable` are counted (`--rollout-rules`).
    pub rules: rollout::Rules,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Invalid(String),
}

fn injected_into<K: ResourceExt + ?Sized>(p: &K) -> std::collections::BTreeSet<String> {
    crate::api::injected_list(p.annotations())
}

/// Runs the controller until the process ends.
pub async fn run(
    client: Client,
    namespace: String,
    leadership: leader::Leadership,
    identity: String,
    webhook: Arc<crate::webhook::State>,
    rules: rollout::Rules,
) {
    let (pods, writer) = reflector::store();
    let pod_stream = reflector::reflector(
        writer,
        watcher::watcher(
            Api::<SlimPod>::all(client.clone()),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff()
        .modify(SlimPod::trim),
    )
    .touched_objects();

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        pods,
        namespace,
        leadership,
        identity,
        last_events: Mutex::new(HashMap::new()),
        webhook: webhook.clone(),
        reported_excluded: Mutex::new(Default::default()),
        rules,
    });
    Controller::new(
        // The stored version: the operator's own watch never goes through its conversion
        // webhook (each object is converted in process, see `measured_reconcile`).
        Api::<StoredSidecarSet>::all(client),
        watcher::Config::default().any_semantic(),
    )
    .watches_stream(pod_stream, move |pod: SlimPod| {
        let injected = injected_into(&pod);
        // A pod in an excluded namespace also wakes the SidecarSets that select it (they report
        // it with an Event; see `report_excluded`).
        let mut wake: Vec<String> = Vec::new();
        if let Some(ns) = pod.metadata.namespace.as_deref()
            && webhook.skip_namespaces.contains(ns)
            && pod.is_active()
        {
            let index = webhook.index();
            let (selecting, _) = index.matching_split(pod.labels(), &webhook.namespace_labels(ns));
            wake.extend(
                selecting
                    .iter()
                    .map(|e| e.ss.name().to_string())
                    .filter(|n| !injected.contains(n)),
            );
        }
        injected
            .into_iter()
            .chain(wake)
            .map(|n| ObjectRef::<StoredSidecarSet>::new(&n))
            .collect::<Vec<_>>()
    })
    .shutdown_on_signal()
    .run(measured_reconcile, error_policy, ctx)
    .for_each(|_| async {})
    .await;
}

fn error_policy(ss: Arc<StoredSidecarSet>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    warn!(sidecarset = %ss.name_any(), error = %err, "reconcile failed; retrying in 5 s");
    Action::requeue(Duration::from_secs(5))
}

async fn measured_reconcile(stored: Arc<StoredSidecarSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    // Leadership: the reconcile runs only while this replica leads and is dropped (with any
    // write in flight) the moment it stops leading. Followers keep their caches warm and wait.
    let leadership = ctx.leadership.clone();
    match leadership.run(leading_reconcile(stored, ctx)).await {
        Some(res) => res,
        None => Ok(Action::requeue(Duration::from_secs(5))),
    }
}

async fn leading_reconcile(stored: Arc<StoredSidecarSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ss = Arc::new(
        crate::api::convert::from_v1beta1(&stored)
            .map_err(|e| Error::Invalid(format!("cannot read the stored SidecarSet: {e}")))?,
    );
    let start = std::time::Instant::now();
    let span = tracing::info_span!(
        "reconcile",
        otel.name = "reconcile SidecarSet",
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        sidecarset = %ss.name_any(),
        generation = ss.metadata.generation.unwrap_or_default(),
        matched = tracing::field::Empty,
        updated = tracing::field::Empty,
        ready = tracing::field::Empty,
        upgrading = tracing::field::Empty,
        result = tracing::field::Empty,
    );
    let res = reconcile(ss, ctx).instrument(span.clone()).await;
    let m = crate::telemetry::metrics();
    m.reconcile_seconds.observe(start.elapsed().as_secs_f64());
    let result = if res.is_ok() { "ok" } else { "error" };
    span.record("result", result);
    if let Err(e) = &res {
        span.record("otel.status_code", "error");
        span.record("otel.status_description", e.to_string().as_str());
    }
    m.reconciles
        .get_or_create(&crate::telemetry::ResultLabel {
            result: result.into(),
        })
        .inc();
    res
}

async fn reconcile(ss: Arc<SidecarSet>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = ss.name_any();
    let mut defaulted = (*ss).clone();
    default_sidecarset(&mut defaulted);
    let entry = Entry::new(Arc::new(defaulted)).map_err(|e| Error::Invalid(e.to_string()))?;
    let classifier = Classifier::new(&entry).map_err(Error::Invalid)?;
    // Each namespace's labels once per reconcile, not once per pod.
    let mut ns_labels: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    let pods: Vec<Arc<SlimPod>> = ctx
        .pods
        .state()
        .into_iter()
        .filter(|p| injected_into(p.as_ref()).contains(&name))
        // As OpenKruise: a pod belongs to the SidecarSet only while its selector, namespace and
        // namespaceSelector still select it, so narrowing the selector stops counting and
        // upgrading the pods it no longer selects.
        .filter(|p| {
            let ns = p.metadata.namespace.as_deref().unwrap_or("");
            let labels = ns_labels
                .entry(ns.to_string())
                .or_insert_with(|| ctx.webhook.namespace_labels(ns));
            entry.matches(p.labels(), labels)
        })
        .collect();
    // One full Pod at a time, dropped after its view is taken.
    let views: Vec<rollout::PodView> = pods.iter().map(|p| classifier.view(&p.to_pod())).collect();

    let (latest_revision, collision_count) = revisions::register(&ctx, &entry, &pods).await?;
    let revision = latest_revision.clone();
    let st = rollout::status(&views);
    let planned = rollout::plan_with(&entry.ss.spec.update_strategy, &views, ctx.rules);
    let health = health(&entry, &pods, &views, &st, &planned);
    let span = tracing::Span::current();
    span.record("matched", st.matched);
    span.record("updated", st.updated);
    span.record("ready", st.ready);
    let status = SidecarSetStatus {
        observed_generation: ss.metadata.generation,
        matched_pods: st.matched,
        updated_pods: st.updated,
        ready_pods: st.ready,
        updated_ready_pods: st.updated_ready,
        latest_revision: Some(latest_revision),
        collision_count: Some(collision_count).filter(|c| *c > 0),
        conditions: {
            let previous = ss.status.as_ref().map_or(&[][..], |s| &s.conditions);
            let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
                    .unwrap_or_else(|_| jiff::Timestamp::now()),
            );
            let mut c = conditions::conditions(&health, ss.metadata.generation, previous, &now);
            if let Some(want) = &ss.spec.injection_strategy.revision {
                let pin = match (&want.revision_name, &want.custom_version) {
                    (Some(n), _) => format!("revisionName {n:?}"),
                    (None, Some(v)) => format!("customVersion {v:?}"),
                    _ => "nothing".to_string(),
                };
                c.push(conditions::pinned_revision_condition(
                    ctx.webhook.pin_resolves(&ss),
                    &pin,
                    ss.metadata.generation,
                    previous,
                    &now,
                ));
            }
            c
        },
    };
    let m = crate::telemetry::metrics();
    for (state, n) in [
        ("matched", st.matched),
        ("updated", st.updated),
        ("ready", st.ready),
        ("updated_ready", st.updated_ready),
    ] {
        m.pods
            .get_or_create(&crate::telemetry::PodsLabels {
                sidecarset: name.clone(),
                state: state.into(),
            })
            .set(i64::from(n));
    }
    m.rollout_stalled
        .get_or_create(&crate::telemetry::label(&name))
        .set(i64::from(health.phase == conditions::Phase::Stalled));
    if ss.status.as_ref() != Some(&status) {
        let api: Api<StoredSidecarSet> = Api::all(ctx.client.clone());
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await?;
    }

    report_excluded(&ctx, &entry);
    if let Some(want) = &ss.spec.injection_strategy.revision
        && !ctx.webhook.pin_resolves(&ss)
    {
        // New pods get the current spec instead: say so where users look (the webhook cannot
        // write Events per pod for this without flooding).
        let note = format!(
            "spec.injectionStrategy.revision pins {} but no such ControllerRevision of this SidecarSet exists in {}; new pods get the current spec. Pin an existing revision (kubectl get controllerrevisions -n {} -l kruise.io/sidecarset-name={name})",
            match (&want.revision_name, &want.custom_version) {
                (Some(n), _) => format!("revisionName {n:?}"),
                (None, Some(v)) => format!("customVersion {v:?}"),
                _ => "nothing".to_string(),
            },
            ctx.namespace,
            ctx.namespace
        );
        event(
            &ctx,
            &ss,
            EventType::Warning,
            "PinnedRevisionNotFound",
            note,
        )
        .await;
    }

    let strategy = &entry.ss.spec.update_strategy;
    if strategy.type_ == Some(UpdateStrategyType::NotUpdate) {
        return Ok(Action::requeue(Duration::from_secs(300)));
    }
    let plan = planned.map_err(Error::Invalid)?;
    let by_key: BTreeMap<String, &Arc<SlimPod>> = pods
        .iter()
        .map(|p| {
            (
                format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()),
                p,
            )
        })
        .collect();
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let mut upgraded = Vec::new();
    // The pods of one step are patched concurrently (the API server is the limit, not us).
    // The cache keeps only the injection annotations: with patchPodMetadata that reads the
    // pod's own values (Retain, MergePatchJson) the pod is read whole first.
    let read_whole = entry
        .ss
        .spec
        .patch_pod_metadata
        .iter()
        .any(|p| p.patch_policy != Some(crate::api::PatchPolicy::Overwrite));
    let planned: Vec<(String, Pod)> = plan
        .upgrade
        .iter()
        .filter_map(|key| Some((key.clone(), by_key.get(key)?.to_pod())))
        .collect();
    span.record("upgrading", planned.len());
    let results: Vec<(String, Result<Option<Pod>, kube::Error>)> = futures::stream::iter(planned)
        .map(|(key, pod)| {
            let client = ctx.client.clone();
            let ns = pod.namespace().unwrap_or_default();
            let span = tracing::info_span!(
                "upgrade pod",
                namespace = %ns,
                pod = %pod.name_any(),
                error = tracing::field::Empty,
            );
            let (entry, now, revision) = (&entry, &now, &revision);
            async move {
                let api: Api<Pod> = Api::namespaced(client, &ns);
                let r = async {
                    let pod = if read_whole {
                        match api.get(&pod.name_any()).await {
                            Ok(p) => p,
                            Err(e) => return Err(e),
                        }
                    } else {
                        pod
                    };
                    let Some(mut patch) = rollout::upgrade_patch(&pod, entry, now, revision) else {
                        return Ok(None);
                    };
                    // Only if the pod is still what we planned on (a stale cache or another
                    // leader).
                    if let Some(rv) = pod.resource_version() {
                        patch.0.insert(
                            0,
                            json_patch::PatchOperation::Test(json_patch::TestOperation {
                                path: jsonptr::PointerBuf::from_tokens([
                                    "metadata",
                                    "resourceVersion",
                                ]),
                                value: rv.into(),
                            }),
                        );
                    }
                    api.patch(
                        &pod.name_any(),
                        &PatchParams::default(),
                        &Patch::<()>::Json(patch),
                    )
                    .await
                    .map(Some)
                }
                .await;
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
    let mut first_error = None;
    for (key, r) in results {
        match r {
            Ok(None) => {}
            Ok(Some(pod)) => {
                info!(sidecarset = %name, pod = %key, "sidecar images upgraded in place");
                m.pods_upgraded
                    .get_or_create(&crate::telemetry::label(&name))
                    .inc();
                // As OpenKruise: upgraded, so upgradable (True once every SidecarSet agrees).
                set_upgradable(&ctx, &pod, &name, true).await;
                upgraded.push(key);
            }
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 409 || e.code == 404 => {
                info!(sidecarset = %name, pod = %key, reason = %e.message, "pod changed meanwhile; replanning");
            }
            Err(e) => {
                warn!(sidecarset = %name, pod = %key, error = %e, "in-place upgrade failed");
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e.into());
    }
    m.rollout_in_progress
        .get_or_create(&crate::telemetry::label(&name))
        .set(i64::from(!plan.done));
    if !upgraded.is_empty() {
        let note = format!(
            "upgrading sidecars in place in {} pod(s): {}",
            upgraded.len(),
            preview(&upgraded)
        );
        event(&ctx, &ss, EventType::Normal, "UpgradingPods", note).await;
    }
    if !plan.not_upgradable.is_empty() {
        let note = format!(
            "{} pod(s) differ from this SidecarSet in more than images and are left alone until recreated: {}",
            plan.not_upgradable.len(),
            preview(&plan.not_upgradable)
        );
        event(&ctx, &ss, EventType::Normal, "NotUpgradablePods", note).await;
        for key in &plan.not_upgradable {
            if let Some(pod) = by_key.get(key) {
                set_upgradable(&ctx, &pod.to_pod(), &name, false).await;
            }
        }
    }
    // A pod recorded as not upgradable that is again (the SidecarSet went back to what the pod
    // runs, or changed images only since): its entry goes back to true.
    for (pod, view) in pods.iter().zip(&views) {
        let recorded_false = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == rollout::CONDITION_UPGRADABLE))
            .and_then(|c| c.message.as_deref())
            .and_then(|m| serde_json::from_str::<BTreeMap<String, bool>>(m).ok())
            // Recorded false, or missing from a condition others keep on a pod that runs our
            // current sidecars (our write after the upgrade lost a race).
            .is_some_and(|m| {
                m.get(&name) == Some(&false) || (view.updated && !m.contains_key(&name))
            });
        if recorded_false && view.matched() && (view.updated || view.upgradable) {
            set_upgradable(&ctx, &pod.to_pod(), &name, true).await;
        }
    }
    if let (Some(why), true) = (&plan.waiting, upgraded.is_empty() && !plan.done) {
        event(&ctx, &ss, EventType::Warning, "RolloutWaiting", why.clone()).await;
    }
    if plan.done && st.matched > 0 {
        event(
            &ctx,
            &ss,
            EventType::Normal,
            "RolloutComplete",
            format!("all {} matched pods run the current sidecars", st.matched),
        )
        .await;
    }
    Ok(if plan.done {
        Action::requeue(Duration::from_secs(300))
    } else {
        Action::requeue(Duration::from_secs(2))
    })
}

/// The SidecarSet's state for its conditions (see [`conditions::assess`]); the pods' container
/// statuses are read only for matched pods that are not ready (image pull failures).
fn health(
    entry: &Entry,
    pods: &[Arc<SlimPod>],
    views: &[rollout::PodView],
    st: &rollout::Status,
    planned: &Result<rollout::Plan, String>,
) -> conditions::Health {
    let pull_failures: Vec<(String, String)> = pods
        .iter()
        .zip(views)
        .filter(|(_, v)| v.matched() && !v.ready_and_consistent())
        .filter_map(|(p, v)| {
            conditions::image_pull_failure(&p.to_pod(), &entry.ss).map(|why| (v.key.clone(), why))
        })
        .collect();
    conditions::assess(&conditions::Observed {
        status: st,
        strategy: &entry.ss.spec.update_strategy,
        plan: planned.as_ref().map_err(String::as_str),
        views,
        pull_failures: &pull_failures,
    })
}

/// Pods in excluded namespaces that `entry` selects and would have injected: active, created
/// after the SidecarSet (older pods were never going to be injected) and without it.
pub fn excluded_but_selected<'a>(
    entry: &Entry,
    pods: impl IntoIterator<Item = &'a Pod>,
    excluded: &std::collections::BTreeSet<String>,
    ns_labels: &dyn Fn(&str) -> BTreeMap<String, String>,
) -> Vec<&'a Pod> {
    let since = entry.ss.metadata.creation_timestamp.as_ref().map(|t| t.0);
    pods.into_iter()
        .filter(|p| {
            let Some(ns) = p.metadata.namespace.as_deref() else {
                return false;
            };
            excluded.contains(ns)
                && crate::inject::pod_is_active(p)
                && !injected_into(*p).contains(entry.ss.name())
                && match (since, p.metadata.creation_timestamp.as_ref()) {
                    (Some(since), Some(created)) => created.0 >= since,
                    _ => false,
                }
                && entry.matches(p.labels(), &ns_labels(ns))
        })
        .collect()
}

/// Queues a `SidecarSetNamespaceExcluded` Event for each pod [`excluded_but_selected`] finds, once
/// per pod and SidecarSet in this process (the webhook never sees these pods: the webhook
/// configurations leave excluded namespaces out).
fn report_excluded(ctx: &Ctx, entry: &Entry) {
    let w = &ctx.webhook;
    if w.skip_namespaces.is_empty() {
        return;
    }
    // Full Pods only for those in excluded namespaces (few).
    let pods: Vec<Pod> = ctx
        .pods
        .state()
        .iter()
        .filter(|p| {
            p.metadata
                .namespace
                .as_deref()
                .is_some_and(|ns| w.skip_namespaces.contains(ns))
        })
        .map(|p| p.to_pod())
        .collect();
    let found = excluded_but_selected(entry, pods.iter(), &w.skip_namespaces, &|ns| {
        w.namespace_labels(ns)
    });
    let Ok(mut reported) = ctx.reported_excluded.lock() else {
        return;
    };
    if reported.len() > 100_000 {
        reported.clear();
    }
    for pod in found {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !reported.insert(format!("{uid}/{}", entry.ss.name())) {
            continue;
        }
        let ns = pod.namespace().unwrap_or_default();
        let key = format!("{ns}/{}", pod.name_any());
        info!(pod = %key, sidecarset = %entry.ss.name(), "SidecarSet selects a pod in an excluded namespace");
        if let Some(regarding) = crate::webhook::events::regarding(pod, &ns) {
            w.notify_skipped(crate::webhook::events::SkipNotice {
                regarding,
                pod: key,
                skipped: vec![crate::webhook::excluded_namespace_skip(
                    entry.ss.name(),
                    &ns,
                )],
            });
        }
    }
}

fn preview(keys: &[String]) -> String {
    let mut s = keys.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if keys.len() > 5 {
        s.push_str(&format!(" and {} more", keys.len() - 5));
    }
    s
}

/// Publishes an Event on the SidecarSet unless the same note was the last one of that reason.
async fn event(ctx: &Ctx, ss: &SidecarSet, type_: EventType, reason: &str, note: String) {
    let key = (ss.name_any(), reason.to_string());
    {
        let Ok(mut last) = ctx.last_events.lock() else {
            return;
        };
        if last.get(&key) == Some(&note) {
            return;
        }
        last.insert(key, note.clone());
    }
    // A new Event per distinct note (kube's Recorder folds the notes of one reason into a
    // series that keeps its first note).
    let ev = k8s_openapi::api::events::v1::Event {
        metadata: kube::api::ObjectMeta {
            name: Some(format!(
                "{}.{:x}",
                ss.name_any().to_lowercase(),
                jiff::Timestamp::now().as_nanosecond()
            )),
            namespace: Some("default".into()),
            ..Default::default()
        },
        event_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            jiff::Timestamp::now(),
        )),
        action: Some("Rollout".into()),
        reason: Some(reason.into()),
        note: Some(note),
        type_: Some(
            if type_ == EventType::Warning {
                "Warning"
            } else {
                "Normal"
            }
            .into(),
        ),
        regarding: Some(ss.object_ref(&())),
        reporting_controller: Some(format!("{}/controller", crate::run::FIELD_MANAGER)),
        reporting_instance: Some(ctx.identity.clone()),
        ..Default::default()
    };
    let api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(ctx.client.clone(), "default");
    if let Err(e) = api.create(&kube::api::PostParams::default(), &ev).await {
        warn!(sidecarset = %ss.name_any(), error = %e, "cannot record an Event");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_selected_in_excluded_namespaces() {
        let ss: SidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "mesh", "creationTimestamp": "2026-11-30T10:00:00Z"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": [{"name": "proxy", "image": "p:1"}]}
        }))
        .unwrap();
        let entry = Entry::new(Arc::new(ss)).unwrap();
        let pod =
            |name: &str, ns: &str, app: &str, created: Option<&str>, extra: serde_json::Value| {
                let mut v =
                    json!({"metadata": {"name": name, "namespace": ns, "labels": {"app": app}}});
                if let Some(t) = created {
                    v["metadata"]["creationTimestamp"] = json!(t);
                }
                if let Some(o) = extra.as_object() {
                    for (k, x) in o {
                        if k == "annotations" {
                            v["metadata"]["annotations"] = x.clone();
                        } else {
                            v[k] = x.clone();
                        }
                    }
                }
                serde_json::from_value::<Pod>(v).unwrap()
            };
        let after = Some("2026-11-30T10:05:00Z");
        let pods = [
            pod("selected", "kube-system", "web", after, json!({})),
            pod(
                "same-second",
                "kube-system",
                "web",
                Some("2026-11-30T10:00:00Z"),
                json!({}),
            ),
            pod(
                "older-than-the-sidecarset",
                "kube-system",
                "web",
                Some("2026-11-30T09:59:59Z"),
                json!({}),
            ),
            pod("no-creation-time", "kube-system", "web", None, json!({})),
            pod("not-excluded", "shop", "web", after, json!({})),
            pod("other-label", "kube-system", "api", after, json!({})),
            pod(
                "finished",
                "kube-system",
                "web",
                after,
                json!({"status": {"phase": "Succeeded"}}),
            ),
            pod(
                "already-injected",
                "kube-system",
                "web",
                after,
                json!({"annotations": {"kruise.io/sidecarset-injected-list": "mesh"}}),
            ),
        ];
        let excluded: std::collections::BTreeSet<String> = ["kube-system".to_string()].into();
        let found: Vec<String> = excluded_but_selected(&entry, pods.iter(), &excluded, &|ns| {
            crate::select::namespace_labels(ns, &BTreeMap::new())
        })
        .into_iter()
        .map(|p| p.name_any())
        .collect();
        assert_eq!(found, ["selected", "same-second"]);
    }
}
