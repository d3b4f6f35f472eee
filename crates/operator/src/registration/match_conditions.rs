//! Keeping the pod CREATE webhook's match condition to the SidecarSets' selectors: read back on
//! every pass, written (under the resourceVersion read) when it must change. Any replica only
//! widens; only the leader, with a synced view, narrows ([`super::match_record`]).

use super::match_coverage::{
    EVERY_POD, MATCH_CONDITION_NAME, MatchCoverage, PENDING_TTL, read_back,
};
use super::match_record::{ANNOTATION, Published, understood};
use crate::cluster::ClusterView;
use crate::names::{MATCH_CONDITIONS_FIELD_MANAGER, POD_CREATE_WEBHOOK, WebhookConfigs};
use backon::{BackoffBuilder, ExponentialBuilder};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use sidecarset_core::index::Index;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// Keeps the CREATE pod webhook's matchConditions to the SidecarSets' selectors
/// ([`sidecarset_core::index::cel`]) and those being admitted (`coverage`), as "every pod" when
/// the expression would be too long for the API server or it refuses it. On every pass (an index
/// change, a SidecarSet being admitted, and every minute) the configuration is read back: a
/// follower writes the union of the live record and what it wants (it never narrows); the leader
/// writes what it wants and the entries of others it has seen for less than [`PENDING_TTL`]. A
/// condition someone else changed is kept (and counted in
/// `sidecarset_operator_match_condition_repairs_total`) until the leader narrows it.
pub async fn keep_pod_match_conditions(
    client: Client,
    state: Arc<ClusterView>,
    config: WebhookConfigs,
    coverage: Arc<MatchCoverage>,
) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let mut retries = retry_delays();
    let mut memory = Memory::default();
    let mut done: Option<(bool, Published)> = None;
    let mut last_read: Option<Instant> = None;
    loop {
        let mut wait = RESYNC;
        if state.sidecarsets_synced() && coverage.ready() {
            let view = state.index();
            let want = (coverage.leads(), coverage.wanted(&view));
            let abandoned = coverage.abandoned();
            memory.warn_when_too_long(&want.1);
            // Read back whenever what this replica wants changed, and at least every RESYNC.
            let due =
                done.as_ref() != Some(&want) || last_read.is_none_or(|t| t.elapsed() >= RESYNC);
            if !due {
                let since = last_read.map_or(Duration::ZERO, |t| t.elapsed());
                tokio::select! {
                    _ = state.index_changed() => {}
                    _ = coverage.wake.notified() => {}
                    _ = tokio::time::sleep(RESYNC.saturating_sub(since)) => {}
                }
                continue;
            }
            last_read = Some(Instant::now());
            let wanted = Wanted {
                leading: want.0,
                mine: &want.1,
                view: &view,
                abandoned: &abandoned,
            };
            match pass(&api, &config, &wanted, &mut memory).await {
                Ok(live) => {
                    coverage.set(live);
                    done = Some(want);
                    retries = retry_delays();
                }
                Err(e) => {
                    debug!(error = %e, "cannot write the pod webhook's match condition yet");
                    wait = retries.next().unwrap_or(LAST_RETRY);
                }
            }
        } else {
            wait = Duration::from_millis(500);
        }
        tokio::select! {
            _ = state.index_changed() => {}
            _ = coverage.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// What one pass writes from.
struct Wanted<'a> {
    /// This replica leads (it narrows).
    leading: bool,
    /// Its view and its admissions.
    mine: &'a Published,
    view: &'a Index,
    /// Entries of creates this replica refused ([`MatchCoverage::abandoned`]): dropped.
    abandoned: &'a std::collections::BTreeSet<String>,
}

/// What the keeper remembers between passes.
#[derive(Default)]
struct Memory {
    /// When the leader first saw each pending entry (by its own clock), per configuration.
    seen: HashMap<String, HashMap<String, Instant>>,
    /// The expression the API server refused last (422): every pod instead while it is wanted.
    refused: Option<String>,
    warned_long: bool,
}

impl Memory {
    fn warn_when_too_long(&mut self, mine: &Published) {
        let long = mine.expression().is_none() && !mine.total().every_pod;
        if long && !self.warned_long {
            warn!(
                limit = sidecarset_core::index::cel::MAX_EXPRESSION_BYTES,
                "the SidecarSets' selectors make a match condition too long: the pod webhook is called for every pod"
            );
        }
        self.warned_long = long;
    }
}

/// Writes that failed are retried at most this far apart.
const LAST_RETRY: Duration = Duration::from_secs(30);

/// The waits before the retries of a failed write: 1 s, doubling up to [`LAST_RETRY`], without
/// end. The keeper waits in a `select!` that other wake-ups (the index, a SidecarSet being
/// admitted) cut short, so it takes the delays one by one rather than handing the write to a
/// retrying combinator.
fn retry_delays() -> impl Iterator<Item = Duration> {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_secs(1))
        .with_factor(2.0)
        .with_max_delay(LAST_RETRY)
        .without_max_times()
        .build()
}

/// How often the configuration is read back without a change.
pub const RESYNC: Duration = Duration::from_secs(60);

/// The configurations `target` names, each with its name.
async fn configurations(
    api: &Api<MutatingWebhookConfiguration>,
    target: &WebhookConfigs,
) -> Result<Vec<(String, MutatingWebhookConfiguration)>, String> {
    let other = |e: kube::Error| e.to_string();
    match target {
        WebhookConfigs::Named(name) => {
            let c = api.get(name).await.map_err(other)?;
            Ok(vec![(name.clone(), c)])
        }
        WebhookConfigs::Selected(selector) => {
            let list = api
                .list(&kube::api::ListParams::default().labels(selector))
                .await
                .map_err(other)?;
            let found: Vec<_> = list
                .items
                .into_iter()
                .filter_map(|c| Some((c.metadata.name.clone()?, c)))
                .collect();
            if found.is_empty() {
                return Err(format!(
                    "no MutatingWebhookConfiguration is labelled {selector} yet"
                ));
            }
            Ok(found)
        }
    }
}

/// Writes that met another writer's (409) are computed again from a fresh read this many times
/// in one pass.
const CONFLICT_RETRIES: usize = 5;

/// One pass over every configuration: read back, compute the record to publish, write it under
/// the resourceVersion read (a conflict reads again); returns the record as it is live now (on
/// several configurations: the entries every one of them holds).
async fn pass(
    api: &Api<MutatingWebhookConfiguration>,
    target: &WebhookConfigs,
    wanted: &Wanted<'_>,
    memory: &mut Memory,
) -> Result<Published, String> {
    let mut confirmed: Option<Published> = None;
    for (name, existing) in configurations(api, target).await? {
        let live = keep_one(api, &name, existing, wanted, memory).await?;
        confirmed = Some(match confirmed {
            None => live,
            Some(mut c) => {
                c.pending.retain(|id, _| live.pending.contains_key(id));
                c
            }
        });
    }
    confirmed.ok_or_else(|| "no configuration".to_string())
}

/// Keeps one configuration: returns the record live after the pass.
async fn keep_one(
    api: &Api<MutatingWebhookConfiguration>,
    name: &str,
    mut existing: MutatingWebhookConfiguration,
    wanted: &Wanted<'_>,
    memory: &mut Memory,
) -> Result<Published, String> {
    for _ in 0..CONFLICT_RETRIES {
        let Some(condition) = read_back(&existing) else {
            return Err(format!("{name} has no webhook {POD_CREATE_WEBHOOK} yet"));
        };
        let annotation = existing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION));
        let (live, ours) = understood(annotation.map(String::as_str), condition.as_deref());
        let mut next = if wanted.leading {
            Published::narrowed(
                &live,
                wanted.mine,
                wanted.view,
                memory.seen.entry(name.to_string()).or_default(),
                PENDING_TTL,
            )
        } else {
            Published::widened(&live, wanted.mine)
        };
        next.pending.retain(|id, _| !wanted.abandoned.contains(id));
        let mut expression = next.expression();
        if expression.is_some() && expression == memory.refused {
            next.refused = true;
            expression = None;
        }
        let live_condition = condition
            .as_deref()
            .map(str::trim)
            .filter(|c| *c != EVERY_POD);
        // A follower leaves the configuration alone when its condition stays and it holds
        // this replica's entries; the leader when it is exactly what it would write.
        let unchanged = live_condition == expression.as_deref()
            && !live.pending.keys().any(|k| wanted.abandoned.contains(k))
            && match wanted.leading {
                true => ours && next == live,
                false => wanted
                    .mine
                    .pending
                    .keys()
                    .all(|k| live.pending.contains_key(k)),
            };
        if unchanged {
            return Ok(live);
        }
        let record = serde_json::to_string(&next).map_err(|e| e.to_string())?;
        if !ours && annotation.is_some() {
            warn!(config = %name, "the pod webhook's match condition was changed by someone else: kept by the followers, written again by the leader");
            crate::metrics::metrics().match_condition_repairs.inc();
        }
        let rv = existing.metadata.resource_version.clone();
        match apply(api, name, rv.as_deref(), &record, expression.as_deref()).await {
            Ok(()) => {
                if live_condition != expression.as_deref() {
                    info!(
                        config = %name,
                        leader = wanted.leading,
                        bytes = expression.as_ref().map_or(0, String::len),
                        "pod webhook match condition written"
                    );
                }
                return Ok(next);
            }
            Err(Refusal::Conflict) => {
                debug!(config = %name, "another replica wrote the match condition first; reading it again");
                existing = api.get(name).await.map_err(|e| e.to_string())?;
            }
            Err(Refusal::Invalid(why)) if expression.is_some() => {
                warn!(error = %why, "the API server refused the pod webhook's match condition: the webhook is called for every pod");
                memory.refused = expression;
                existing = api.get(name).await.map_err(|e| e.to_string())?;
            }
            Err(Refusal::Invalid(why) | Refusal::Other(why)) => return Err(why),
        }
    }
    Err(format!(
        "{name}: other writers kept changing it; trying again"
    ))
}

/// Why a write did not land.
enum Refusal {
    /// Another writer changed the configuration since it was read (409).
    Conflict,
    /// The API server found it invalid (422).
    Invalid(String),
    Other(String),
}

/// Applies the pod CREATE entry's condition (`expression`, None: every pod) and the record,
/// under `resource_version` (a precondition: the write fails with 409 when someone wrote in
/// between).
async fn apply(
    api: &Api<MutatingWebhookConfiguration>,
    config: &str,
    resource_version: Option<&str>,
    record: &str,
    expression: Option<&str>,
) -> Result<(), Refusal> {
    let entry = serde_json::json!({
        "name": POD_CREATE_WEBHOOK,
        "matchConditions": [{
            "name": MATCH_CONDITION_NAME,
            "expression": expression.unwrap_or(EVERY_POD),
        }],
    });
    let mut metadata = serde_json::json!({"name": config, "annotations": {ANNOTATION: record}});
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = rv.into();
    }
    let patch = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": metadata, "webhooks": [entry],
    });
    match api
        .patch(
            config,
            &PatchParams::apply(MATCH_CONDITIONS_FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(Refusal::Conflict),
        Err(kube::Error::Api(e)) if e.code == 422 => Err(Refusal::Invalid(e.message.clone())),
        Err(e) => Err(Refusal::Other(e.to_string())),
    }
}
