//! Keeping the pod CREATE webhook's match condition to the SidecarSets' selectors: read back on
//! every pass, written when it differs, repaired when someone else changed it.

use super::match_coverage::{
    Covered, EVERY_POD, MATCH_CONDITION_NAME, MatchCoverage, expression_of, read_back,
};
use crate::cluster::ClusterView;
use crate::names::{MATCH_CONDITIONS_FIELD_MANAGER, POD_CREATE_WEBHOOK, WebhookConfigs};
use backon::{BackoffBuilder, ExponentialBuilder};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// Keeps the CREATE pod webhook's matchConditions to the SidecarSets' selectors
/// ([`sidecarset_core::index::cel`]) and those being admitted (`coverage`), with no condition when the
/// expression would be too long for the API server or it refuses it. On every pass (an index
/// change, a SidecarSet being admitted, and every minute) the configuration is read back and
/// compared with what it should be: what someone else changed is written back (and counted in
/// `sidecarset_operator_match_condition_repairs_total`).
pub async fn keep_pod_match_conditions(
    client: Client,
    state: Arc<ClusterView>,
    config: WebhookConfigs,
    coverage: Arc<MatchCoverage>,
) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let mut written: Option<Option<String>> = None;
    let mut retries = retry_delays();
    let mut warned_long = false;
    let mut last_read: Option<tokio::time::Instant> = None;
    loop {
        let mut wait = RESYNC;
        if state.sidecarsets_synced() {
            let wanted = coverage.wanted(&state.index());
            let mut want = wanted
                .as_ref()
                .and_then(sidecarset_core::index::cel::pod_match_expression);
            if want.is_none() && !warned_long {
                warn!(
                    limit = sidecarset_core::index::cel::MAX_EXPRESSION_BYTES,
                    "the SidecarSets' selectors make a match condition too long (or too many are being admitted at once): the pod webhook is called for every pod"
                );
            }
            warned_long = want.is_none();
            // Read back whenever the condition should change, and at least every RESYNC.
            let due =
                written.as_ref() != Some(&want) || last_read.is_none_or(|t| t.elapsed() >= RESYNC);
            if !due {
                tokio::select! {
                    _ = state.index_changed() => {}
                    _ = coverage.wake.notified() => {}
                    _ = tokio::time::sleep(RESYNC.saturating_sub(last_read.map_or(Duration::ZERO, |t| t.elapsed()))) => {}
                }
                continue;
            }
            last_read = Some(tokio::time::Instant::now());
            match pass(&api, &config, want.as_deref(), written.as_ref()).await {
                Ok(Pass::InPlace) | Ok(Pass::Written) => {
                    if written.as_ref() != Some(&want) {
                        info!(
                            bytes = want.as_ref().map_or(0, String::len),
                            "pod webhook match condition written"
                        );
                    }
                    coverage.set(match (&want, wanted) {
                        (Some(expression), Some(index)) => Covered::Expression {
                            expression: expression.clone(),
                            index,
                        },
                        _ => Covered::Everything,
                    });
                    written = Some(want);
                    retries = retry_delays();
                }
                Err(e) if e.refused && want.is_some() => {
                    warn!(error = %e.message, "the API server refused the pod webhook's match condition: the webhook is called for every pod");
                    want = None;
                    match pass(&api, &config, None, written.as_ref()).await {
                        Ok(_) => {
                            coverage.set(Covered::Everything);
                            written = Some(want);
                        }
                        Err(e) => {
                            debug!(error = %e.message, "cannot write the pod webhook's match condition yet");
                            wait = retries.next().unwrap_or(LAST_RETRY);
                        }
                    }
                }
                Err(e) => {
                    debug!(error = %e.message, "cannot write the pod webhook's match condition yet");
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
) -> Result<Vec<(String, MutatingWebhookConfiguration)>, NotWritten> {
    let other = |e: kube::Error| NotWritten {
        refused: false,
        message: e.to_string(),
    };
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
                return Err(NotWritten {
                    refused: false,
                    message: format!("no MutatingWebhookConfiguration is labelled {selector} yet"),
                });
            }
            Ok(found)
        }
    }
}

enum Pass {
    InPlace,
    Written,
}

/// One pass: reads the configuration back, and writes the condition when it is not `want`;
/// a condition that differs from the one we wrote last (`written`) is a repair.
async fn pass(
    api: &Api<MutatingWebhookConfiguration>,
    target: &WebhookConfigs,
    want: Option<&str>,
    written: Option<&Option<String>>,
) -> Result<Pass, NotWritten> {
    let mut result = Pass::InPlace;
    for (config, existing) in configurations(api, target).await? {
        let Some(found) = read_back(&existing) else {
            return Err(NotWritten {
                refused: false,
                message: format!("{config} has no webhook {POD_CREATE_WEBHOOK} yet"),
            });
        };
        let found = expression_of(&found);
        if found == Some(want) {
            continue;
        }
        if let Some(last) = written
            && found != Some(last.as_deref())
        {
            warn!(config = %config, "the pod webhook's match condition was changed by someone else; writing it back");
            crate::metrics::metrics().match_condition_repairs.inc();
        }
        apply_match_condition(api, &config, want).await?;
        result = Pass::Written;
    }
    Ok(result)
}

/// Why a match condition was not written: `refused` when the API server found it invalid.
struct NotWritten {
    refused: bool,
    message: String,
}

async fn apply_match_condition(
    api: &Api<MutatingWebhookConfiguration>,
    config: &str,
    expression: Option<&str>,
) -> Result<(), NotWritten> {
    let other = |e: kube::Error| NotWritten {
        refused: false,
        message: e.to_string(),
    };
    let entry = serde_json::json!({
        "name": POD_CREATE_WEBHOOK,
        "matchConditions": [{
            "name": MATCH_CONDITION_NAME,
            "expression": expression.unwrap_or(EVERY_POD),
        }],
    });
    let patch = serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": config}, "webhooks": [entry],
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
        Err(kube::Error::Api(e)) if e.code == 422 => Err(NotWritten {
            refused: true,
            message: e.message.clone(),
        }),
        Err(e) => Err(other(e)),
    }
}
