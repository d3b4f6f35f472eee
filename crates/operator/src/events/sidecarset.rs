//! The controller's Events on SidecarSets: a new Event per distinct note of a reason, the same
//! note not repeated.

use super::{EventType, create, event_place};
use k8s_openapi::api::core::v1::ObjectReference;
use std::collections::HashMap;

/// Notes remembered per (SidecarSet, reason) before the memory is cleared (a bound, far above
/// any real number of SidecarSets times reasons).
const NOTES_KEPT: usize = 10_000;

/// The controller's Events on SidecarSets. A new Event per distinct note (kube's Recorder folds
/// the notes of one reason into a series that keeps its first note); the same note as the last
/// one of that reason is not repeated.
pub struct SidecarSetEvents {
    client: kube::Client,
    /// This replica's name (`reportingInstance`).
    instance: String,
    last: std::sync::Mutex<HashMap<(String, String), String>>,
}

impl SidecarSetEvents {
    pub fn new(client: kube::Client, instance: String) -> Self {
        SidecarSetEvents {
            client,
            instance,
            last: Default::default(),
        }
    }

    /// True when this note is new for the SidecarSet and reason (and remembers it).
    fn is_new(&self, sidecarset: &str, reason: &str, note: &str) -> bool {
        let Ok(mut last) = self.last.lock() else {
            return false;
        };
        let key = (sidecarset.to_string(), reason.to_string());
        if last.get(&key).map(String::as_str) == Some(note) {
            return false;
        }
        if last.len() >= NOTES_KEPT {
            last.clear();
        }
        last.insert(key, note.to_string());
        true
    }

    /// Publishes an Event on the SidecarSet unless the same note was the last one of that reason.
    pub async fn publish(
        &self,
        regarding: ObjectReference,
        kind: EventType,
        reason: &str,
        note: String,
    ) {
        let (ns, name) = event_place(&regarding);
        if !self.is_new(&format!("{ns}/{name}"), reason, &note) {
            return;
        }
        create(
            &self.client,
            regarding,
            kind,
            "Rollout",
            reason,
            note,
            &self.instance,
        )
        .await;
    }
}
