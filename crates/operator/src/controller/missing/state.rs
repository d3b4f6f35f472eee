//! The eviction state kept in the API (the ConfigMap [`STATE_CONFIGMAP`] in the operator's
//! namespace): when each generation took effect, the evictions of the last hour and the open
//! circuits, read fresh and written conditionally on its resourceVersion.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tracing::warn;

/// The ConfigMap (in the operator's namespace) that keeps the eviction state.
pub const STATE_CONFIGMAP: &str = "sidecarset-operator-evictions";

/// Most open circuits kept per SidecarSet (the oldest go first).
const MAX_CIRCUITS: usize = 200;

/// One eviction, as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evicted {
    /// Unix seconds.
    pub at: i64,
    pub pod: String,
    /// The evicted pod's uid: a replacement can have its name (a StatefulSet's `db-0`), never its
    /// uid. Empty in records written before it was kept (the name is compared then).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default)]
    pub owner: String,
    /// The owner's pods (uids) already running without the sidecars in the second of the
    /// eviction: creation times have one-second resolution, so a pod created in that second is
    /// the replacement only when it is not one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub same_second: Vec<String>,
}

/// The state of one SidecarSet (a key of the ConfigMap).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetState {
    /// The SidecarSet's uid and generation, and when (unix seconds) this generation was first
    /// seen by a leader: pods created before are not evicted (unless `"all"`).
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub generation: i64,
    #[serde(default)]
    pub since: i64,
    /// Evictions of the last hour.
    #[serde(default)]
    pub evictions: Vec<Evicted>,
    /// Owners (uid → `namespace/Kind/name`) whose circuit is open for this generation.
    #[serde(default)]
    pub open_circuits: BTreeMap<String, String>,
}

impl SidecarSetState {
    /// The state for `uid`/`generation` at `now`: a new SidecarSet or generation starts over
    /// (its circuits closed, `since` now) but keeps the evictions of the last hour (the budget).
    pub fn current(mut self, uid: &str, generation: i64, now: i64) -> SidecarSetState {
        if self.uid != uid {
            return SidecarSetState {
                uid: uid.to_string(),
                generation,
                since: now,
                ..Default::default()
            };
        }
        if self.generation != generation {
            self.generation = generation;
            self.since = now;
            self.open_circuits.clear();
        }
        self.evictions.retain(|e| now - e.at < 3600);
        self
    }
}

impl SidecarSetState {
    /// Opens the circuit of `owner` (`what`: `namespace/Kind/name`), closing the oldest first
    /// when `MAX_CIRCUITS` are open.
    pub fn open_circuit(&mut self, owner: String, what: String) {
        if self.open_circuits.len() >= MAX_CIRCUITS
            && let Some(first) = self.open_circuits.keys().next().cloned()
        {
            self.open_circuits.remove(&first);
        }
        self.open_circuits.insert(owner, what);
    }
}

/// The state ConfigMap, read fresh: its states by SidecarSet, and its resourceVersion.
pub(super) struct Stored {
    pub(super) states: BTreeMap<String, SidecarSetState>,
    pub(super) resource_version: Option<String>,
}

/// Reads the state ConfigMap.
pub(super) async fn load(api: &Api<ConfigMap>) -> Result<Stored, kube::Error> {
    let cm = api.get_opt(STATE_CONFIGMAP).await?;
    let states = cm
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .map(|d| {
            d.iter()
                .filter_map(|(k, v)| match serde_json::from_str(v) {
                    Ok(s) => Some((k.clone(), s)),
                    Err(e) => {
                        warn!(configmap = STATE_CONFIGMAP, key = %k, error = %e, "unreadable eviction state ignored (it starts over)");
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Stored {
        states,
        resource_version: cm.and_then(|c| c.metadata.resource_version),
    })
}

/// Writes the states, conditional on the resourceVersion read (create when there was none).
pub(super) async fn store(api: &Api<ConfigMap>, stored: &mut Stored) -> Result<(), kube::Error> {
    let data: BTreeMap<String, String> = stored
        .states
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::to_string(v).unwrap_or_default()))
        .collect();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(STATE_CONFIGMAP.into()),
            resource_version: stored.resource_version.clone(),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    "sidecarset-operator".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    let written = match &stored.resource_version {
        Some(_) => {
            api.replace(STATE_CONFIGMAP, &PostParams::default(), &cm)
                .await?
        }
        None => api.create(&PostParams::default(), &cm).await?,
    };
    stored.resource_version = written.metadata.resource_version;
    Ok(())
}
