//! Every Event the operator writes, and the reporting controllers it writes them under.
//!
//! The controller's Events on SidecarSets ([`SidecarSetEvents`]): a new Event per distinct note
//! of a reason, the same note not repeated.
//!
//! Degraded readiness conditions on the operator's own pod ([`degraded_events`]): Warning
//! `Degraded` / Normal `Recovered`, spaced by [`DEGRADED_EVENT_SPACING`] per condition.
//!
//! Events for pods that a matching SidecarSet was not injected into (paused, conflict, namespace
//! excluded). The webhook never waits for them: it hands a [`SkipNotice`] to a bounded queue and
//! a background task records the Events, at most one per object, reason and SidecarSet in
//! [`REPEAT_AFTER`]. Events go on the pod's controller (the ReplicaSet, Job, …), since the pod
//! may not exist yet when it is admitted, or on the pod when it has no controller.
//!
//! Replicas share the deduplication through the Event's name: it is derived from the object, the
//! reason, the SidecarSet and the [`REPEAT_AFTER`] window, so the second replica to record the
//! same Event in a window gets AlreadyExists and leaves it.
//!
//! One file per kind: [`skips`] (with their budgets, [`budget`]), [`sidecarset`], [`degraded`];
//! this module writes the Events of the last two.

pub mod budget;
pub mod degraded;
pub mod sidecarset;
pub mod skips;

pub use budget::{Buckets, PER_NAMESPACE, PER_SOURCE, Rate};
pub use degraded::{DEGRADED_EVENT_SPACING, DegradedEvents, DegradedNote, degraded_events};
pub use sidecarset::SidecarSetEvents;
pub use skips::{
    Admission, Dedupe, QUEUE, REPEAT_AFTER, Sender, SkipNotice, event, event_name, queue, record,
    regarding,
};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use tracing::warn;

/// `reportingController` of the webhook's Events.
pub const REPORTING_WEBHOOK: &str = "sidecarset-operator/webhook";
/// `reportingController` of the controller's Events.
pub const REPORTING_CONTROLLER: &str = "sidecarset-operator/controller";

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// The namespace an Event on `regarding` goes to, and the object's name: a namespaced object (a
/// pod) gets its Events in its namespace, a cluster-scoped one (a SidecarSet) in "default".
fn event_place(regarding: &ObjectReference) -> (String, String) {
    let ns = regarding
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into());
    (ns, regarding.name.clone().unwrap_or_default())
}

/// Creates one Event (events.k8s.io/v1) on `regarding`, in its namespace ("default" for a
/// cluster-scoped object); a failure is logged, never returned (Events are best effort).
pub async fn create(
    client: &kube::Client,
    regarding: ObjectReference,
    kind: EventType,
    action: &str,
    reason: &str,
    note: String,
    instance: &str,
) {
    let (ns, name) = event_place(&regarding);
    let now = jiff::Timestamp::now();
    let ev = Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", name.to_lowercase(), now.as_nanosecond())),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(action.into()),
        reason: Some(reason.into()),
        note: Some(note),
        type_: Some(
            match kind {
                EventType::Warning => "Warning",
                EventType::Normal => "Normal",
            }
            .into(),
        ),
        regarding: Some(regarding),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(instance.to_string()),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    if let Err(e) = api.create(&PostParams::default(), &ev).await {
        warn!(regarding = %name, reason, error = %e, "cannot record an Event");
    }
}
