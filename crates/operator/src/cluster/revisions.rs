//! The SidecarSets' ControllerRevisions as the cluster view keeps them: what pinning
//! (`injectionStrategy.revision`) and the controller's revision history need.

use k8s_openapi::api::apps::v1::ControllerRevision;
use sidecarset_core::api::{LABEL_REVISION_CUSTOM_VERSION, LABEL_SIDECARSET_NAME, SidecarSet};
use std::collections::BTreeMap;

/// A SidecarSet's ControllerRevision as the cluster view keeps it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KnownRevision {
    /// Its `kruise.io/sidecarset-name` label.
    pub sidecarset: String,
    /// Its `apps.kruise.io/sidecarset-custom-version` label.
    pub custom_version: Option<String>,
    pub data: serde_json::Value,
    /// Its annotations (the SidecarSet's hashes when the revision was made).
    pub annotations: BTreeMap<String, String>,
    /// Its `.revision` number (higher is newer).
    pub number: i64,
    /// The uid of the SidecarSet that owns it, when it has an owner.
    pub owner_uid: Option<String>,
    /// Its own uid and resourceVersion (the preconditions of the controller's writes to it).
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// Which revision `injectionStrategy.revision` pins for a SidecarSet, among the known ones:
/// `revisionName` names it; otherwise the newest revision whose custom-version label is
/// `customVersion` (as OpenKruise's `GetHistorySidecarSet`). None when none fits.
pub fn resolve_pin<'a>(
    sidecarset: &SidecarSet,
    want: &sidecarset_core::api::SidecarSetInjectRevision,
    revisions: &'a super::Revisions,
) -> Option<(&'a String, &'a KnownRevision)> {
    // Revisions of an earlier SidecarSet of this name are not this one's history.
    let uid = sidecarset.metadata.uid.as_deref();
    let mine = revisions.iter().filter(|(_, r)| {
        r.sidecarset == sidecarset.name()
            && (uid.is_none() || r.owner_uid.is_none() || r.owner_uid.as_deref() == uid)
    });
    match (&want.revision_name, &want.custom_version) {
        (Some(name), _) => mine.into_iter().find(|(n, _)| *n == name),
        (None, Some(v)) => mine
            .filter(|(_, r)| r.custom_version.as_ref() == Some(v))
            .max_by(|a, b| a.1.number.cmp(&b.1.number).then(a.0.cmp(b.0))),
        (None, None) => None,
    }
}

impl KnownRevision {
    /// What the view keeps of a ControllerRevision, by its name.
    pub fn of(r: &ControllerRevision) -> (String, KnownRevision) {
        let labels = r.metadata.labels.clone().unwrap_or_default();
        (
            r.metadata.name.clone().unwrap_or_default(),
            KnownRevision {
                sidecarset: labels
                    .get(LABEL_SIDECARSET_NAME)
                    .cloned()
                    .unwrap_or_default(),
                custom_version: labels.get(LABEL_REVISION_CUSTOM_VERSION).cloned(),
                data: r.data.0.clone(),
                annotations: r.metadata.annotations.clone().unwrap_or_default(),
                number: r.revision.unwrap_or(0),
                owner_uid: r
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .find(|o| o.kind == "SidecarSet")
                    .map(|o| o.uid.clone()),
                uid: r.metadata.uid.clone(),
                resource_version: r.metadata.resource_version.clone(),
            },
        )
    }

    /// True when it belongs to another object than the SidecarSet with this uid (a SidecarSet
    /// of the same name deleted and created again).
    pub fn owned_by_other(&self, ss_uid: Option<&str>) -> bool {
        matches!((self.owner_uid.as_deref(), ss_uid), (Some(o), Some(u)) if o != u)
    }
}
