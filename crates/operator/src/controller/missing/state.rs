//! The eviction state kept in the API (the ConfigMap [`STATE_CONFIGMAP`] in the operator's
//! namespace): when each generation took effect, the evictions of the last hour and the open
//! circuits, read fresh and written conditionally on its resourceVersion.
//!
//! The ConfigMap holds every SidecarSet's state, so it is kept small: the states of SidecarSets
//! that no longer exist (or were recreated under the same name) are dropped ([`prune`]), each
//! state is bounded ([`SidecarSetState::bound`]), and a write that would bring it over
//! [`SAFE_SIZE`] is not sent ([`StoreError::TooLarge`]: a warning and the `degraded` metric's
//! `eviction_state` condition) rather than failing in the API server at its 1 MiB limit.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tracing::warn;

/// The ConfigMap (in the operator's namespace) that keeps the eviction state.
pub const STATE_CONFIGMAP: &str = "sidecarset-operator-evictions";

/// Most open circuits kept per SidecarSet (the oldest go first).
const MAX_CIRCUITS: usize = 200;

/// Most uids kept in one eviction's [`Evicted::same_second`]: past them, a pod of the owner
/// created in that second and left out counts as a replacement, which can only open the
/// owner's circuit (stop its evictions), never evict more.
pub const MAX_SAME_SECOND: usize = 50;

/// Evictions kept per SidecarSet beyond the hourly budget (`--evictions-per-hour` lowered
/// meanwhile, records of a former leader): the newest are kept.
pub const EVICTIONS_SLACK: usize = 10;

/// The largest ConfigMap written (the API server refuses more than 1 MiB of data).
pub const SAFE_SIZE: usize = 900 * 1024;

/// The `degraded` metric's condition set while the state is too large to be written.
pub const DEGRADED_CONDITION: &str = "eviction_state";

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
    /// The SidecarSet's uid and generation, and when (unix seconds) this generation took effect
    /// (generation 1: the SidecarSet's creation; a later one: when a leader first saw it, see
    /// [`super::policy::took_effect`]): pods created before are not evicted (unless `"all"`).
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
    /// (its circuits closed, `since` = `took_effect`) but keeps the evictions of the last hour
    /// (the budget). `took_effect` is when the generation took effect or later, never earlier
    /// ([`super::policy::took_effect`]): for the same generation, `since` moves back to it
    /// when it is earlier (a state recorded at a later pass).
    pub fn current(
        mut self,
        uid: &str,
        generation: i64,
        took_effect: i64,
        now: i64,
    ) -> SidecarSetState {
        if self.uid != uid {
            return SidecarSetState {
                uid: uid.to_string(),
                generation,
                since: took_effect,
                ..Default::default()
            };
        }
        if self.generation != generation {
            self.generation = generation;
            self.since = took_effect;
            self.open_circuits.clear();
        } else {
            self.since = self.since.min(took_effect);
        }
        self.evictions.retain(|e| now - e.at < 3600);
        self
    }

    /// Bounds the state: at most `per_hour` + [`EVICTIONS_SLACK`] evictions (the newest) and
    /// [`MAX_SAME_SECOND`] uids in each; the open circuits are bounded when opened.
    pub fn bound(&mut self, per_hour: u32) {
        let keep = per_hour as usize + EVICTIONS_SLACK;
        if self.evictions.len() > keep {
            self.evictions.drain(..self.evictions.len() - keep);
        }
        for e in &mut self.evictions {
            e.same_second.truncate(MAX_SAME_SECOND);
        }
    }
}

/// Drops the states of SidecarSets that no longer exist: `current` gives the uid of the
/// SidecarSet of a name, None when there is none. `own` (the SidecarSet of the pass) is always
/// kept, and nothing is dropped when `current` does not know it (a view not complete yet).
/// Returns the names dropped.
pub fn prune(
    states: &mut BTreeMap<String, SidecarSetState>,
    own: &str,
    current: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    if current(own).is_none() {
        return Vec::new();
    }
    let gone: Vec<String> = states
        .iter()
        .filter(|(k, s)| k.as_str() != own && current(k).is_none_or(|uid| uid != s.uid))
        .map(|(k, _)| k.clone())
        .collect();
    for k in &gone {
        states.remove(k);
    }
    gone
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

/// Why the state was not written.
#[derive(Debug)]
pub enum StoreError {
    Api(kube::Error),
    /// The data would take this many bytes, over [`SAFE_SIZE`].
    TooLarge(usize),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Api(e) => e.fmt(f),
            StoreError::TooLarge(n) => write!(
                f,
                "the eviction state would take {n} bytes, over the {SAFE_SIZE} kept under the API server's 1 MiB limit"
            ),
        }
    }
}

/// The ConfigMap's data: a key per SidecarSet, and its size in bytes.
pub fn encode(states: &BTreeMap<String, SidecarSetState>) -> (BTreeMap<String, String>, usize) {
    let data: BTreeMap<String, String> = states
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::to_string(v).unwrap_or_default()))
        .collect();
    let size = data.iter().map(|(k, v)| k.len() + v.len()).sum();
    (data, size)
}

/// Sets the `degraded` metric's [`DEGRADED_CONDITION`], warning when it turns on.
fn degraded(on: bool, size: usize) {
    let gauge = crate::metrics::metrics()
        .degraded
        .get_or_create(&crate::metrics::ConditionLabel {
            condition: DEGRADED_CONDITION.into(),
        })
        .clone();
    let was = gauge.set(i64::from(on));
    if on && was == 0 {
        warn!(
            configmap = STATE_CONFIGMAP,
            size,
            limit = SAFE_SIZE,
            "the eviction state is too large to be written: no eviction until it shrinks (fewer SidecarSets opted in, or a lower --evictions-per-hour)"
        );
    }
}

/// Writes the states, conditional on the resourceVersion read (create when there was none);
/// not when they would take over [`SAFE_SIZE`].
pub(super) async fn store(api: &Api<ConfigMap>, stored: &mut Stored) -> Result<(), StoreError> {
    let (data, size) = encode(&stored.states);
    if size > SAFE_SIZE {
        degraded(true, size);
        return Err(StoreError::TooLarge(size));
    }
    degraded(false, size);
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
                .await
        }
        None => api.create(&PostParams::default(), &cm).await,
    }
    .map_err(StoreError::Api)?;
    stored.resource_version = written.metadata.resource_version;
    Ok(())
}
