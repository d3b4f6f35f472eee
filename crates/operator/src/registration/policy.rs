//! The MutatingAdmissionPolicy that injects pods inside the API server (`--injection policy` or
//! `auto`), compiled from the view by [`sidecarset_core::policy`].
//!
//! Every replica compiles it and tells the pod webhook's match condition which SidecarSets the
//! policy injects ([`MatchCoverage::set_compiled`]): the webhook is then called only for pods
//! that do not record those SidecarSets yet, so pods the policy injected are created even with
//! every replica stopped. That condition is safe whether the policy is in effect or not (the
//! webhook changes nothing for a SidecarSet a pod records), so no replica waits for the policy
//! before narrowing it. The leader alone writes the policy and its binding (server-side apply,
//! written again when they differ from what it renders: a hand edit is undone within
//! [`RESYNC`]), owned by the pod webhook's configuration so that an uninstall removes them, and
//! deletes them when the mode is `webhook`. A dry-run probe pod in the operator's namespace
//! shows when the API server applies the current version (`sidecarset_operator_policy_active`).

use super::MatchCoverage;
use crate::cluster::ClusterView;
use crate::cluster::injection::InjectionModes;
use crate::cluster::watch::Wakeups;
use crate::controller::leader::Leadership;
use crate::names::{POD_CREATE_WEBHOOK, WebhookConfigs};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sidecarset_core::policy::{
    self, COMPILED_AT_ANNOTATION, Compiled, Modes, Options, PROBE_ANNOTATION,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

mod write;

/// How often the policy is read back and rewritten if changed by hand.
pub const RESYNC: Duration = Duration::from_secs(10);
/// How long a probe that showed the current version applied is trusted while nothing is
/// written: the API server applies a policy it stores until it changes, so an idle cluster is
/// probed every few minutes, not at every [`RESYNC`] (a dry-run pod creation each time).
pub const CONFIRMED_FOR: Duration = Duration::from_secs(300);

/// Whether to probe again: unless the token was seen applied within [`CONFIRMED_FOR`] and this
/// pass wrote nothing.
fn needs_probe(confirmed: Option<&(String, std::time::Instant)>, token: &str, wrote: bool) -> bool {
    wrote || !confirmed.is_some_and(|(t, at)| t == token && at.elapsed() < CONFIRMED_FOR)
}
const FIELD_MANAGER: &str = "sidecarset-operator-policy";
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "sidecarset-operator");

/// `--injection`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Webhook,
    Policy,
    Auto,
}

impl Mode {
    pub fn parse(s: &str) -> Mode {
        match s {
            "policy" => Mode::Policy,
            "auto" => Mode::Auto,
            _ => Mode::Webhook,
        }
    }
}

/// What the keeper needs from the flags.
#[derive(Clone, Debug)]
pub struct Settings {
    pub mode: Mode,
    /// Name of the policy and its binding.
    pub name: String,
    /// The operator's namespace: the probe runs there; no other pod of it is injected.
    pub namespace: String,
    pub skip_namespaces: Vec<String>,
    pub failure_policy: String,
    pub webhook_configs: WebhookConfigs,
}

/// Starts [`keep_injection_policy`] with the settings of the flags.
pub fn spawn(
    args: &crate::config::RunArgs,
    client: Client,
    cluster: Arc<ClusterView>,
    coverage: Option<Arc<MatchCoverage>>,
    leadership: Option<Leadership>,
    wake: Option<Arc<Wakeups>>,
) {
    let mode = Mode::parse(&args.injection);
    if let (Some(c), false) = (&coverage, mode == Mode::Webhook) {
        c.await_policy();
    }
    let settings = Settings {
        mode,
        name: args.webhook_config_name.clone(),
        namespace: args.namespace.clone(),
        skip_namespaces: args.skip_namespaces.clone(),
        failure_policy: args.failure_policy.clone(),
        webhook_configs: WebhookConfigs::from_args(
            &args.webhook_config_name,
            args.webhook_config_selector.as_deref(),
        ),
    };
    tokio::spawn(keep_injection_policy(
        client, cluster, settings, coverage, leadership, wake,
    ));
}

/// Keeps the policy (see the module's text) until the process ends.
pub async fn keep_injection_policy(
    client: Client,
    state: Arc<ClusterView>,
    settings: Settings,
    coverage: Option<Arc<MatchCoverage>>,
    leadership: Option<Leadership>,
    wake: Option<Arc<Wakeups>>,
) {
    let leads = || leadership.as_ref().is_some_and(Leadership::is_leader);
    if settings.mode == Mode::Webhook {
        // Only a policy left by an earlier mode to remove, once, by a leader (without the
        // chart's policy permissions in this mode, a refusal just means there is none).
        let keeper = Keeper {
            client,
            settings,
            served: false,
            cap: Default::default(),
            confirmed: Default::default(),
        };
        loop {
            if leads() {
                if let Err(e) = keeper.delete_ours().await {
                    tracing::debug!(error = %e, "no injection policy to remove");
                }
                return;
            }
            tokio::time::sleep(RESYNC).await;
        }
    }
    let served = served(&client).await;
    if settings.mode == Mode::Policy && !served {
        warn!(
            "--injection=policy: the API server does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes 1.36 or later); every pod is injected by the webhook"
        );
    }
    let keeper = Keeper {
        client,
        settings,
        served,
        cap: Default::default(),
        confirmed: Default::default(),
    };
    // After a probe that did not see the policy applied yet, the next one comes this soon
    // (doubling up to RESYNC): the API server compiles policies about once a second, so the
    // SidecarSets' conditions follow a write within seconds rather than a resync later.
    let mut reprobe = REPROBE;
    loop {
        let mut wait = RESYNC;
        if state.sidecarsets_synced() {
            let view = state.index();
            match keeper.pass(&view, coverage.as_deref(), leads()).await {
                // The SidecarSets whose injection changed get their condition written again.
                Ok(modes) => {
                    if modes.served && !modes.active && leads() {
                        wait = reprobe;
                        reprobe = (reprobe * 2).min(RESYNC);
                    } else {
                        reprobe = REPROBE;
                    }
                    for name in state.set_injection(Some(modes)) {
                        if let Some(w) = &wake {
                            w.force(&name);
                        }
                    }
                }
                Err(e) => {
                    warn!(error = %e, "cannot keep the injection policy yet");
                    if let Some(c) = &coverage {
                        c.stop_awaiting_policy();
                    }
                }
            }
        }
        tokio::select! {
            _ = state.index_changed() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The first wait before probing again a policy not yet seen applied.
const REPROBE: Duration = Duration::from_secs(1);

/// Whether the API server serves MutatingAdmissionPolicy at v1 (asked until it answers).
async fn served(client: &Client) -> bool {
    let mut wait = Duration::from_millis(200);
    loop {
        match client
            .list_api_group_resources("admissionregistration.k8s.io/v1")
            .await
        {
            Ok(list) => {
                return list
                    .resources
                    .iter()
                    .any(|r| r.name == "mutatingadmissionpolicies");
            }
            Err(e) => {
                warn!(error = %e, "cannot discover MutatingAdmissionPolicy yet");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(10));
            }
        }
    }
}

struct Keeper {
    client: Client,
    settings: Settings,
    served: bool,
    /// At most this many SidecarSets in the policy, once the API server refused more (a limit
    /// the compiler does not know, such as the CEL cost budget).
    cap: std::sync::Mutex<Option<usize>>,
    /// Per part, the token a probe last showed applied, and when.
    confirmed: std::sync::Mutex<BTreeMap<String, (String, std::time::Instant)>>,
}

impl Keeper {
    fn policies(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &policy::policy_resource())
    }

    fn bindings(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &policy::binding_resource())
    }

    async fn pass(
        &self,
        view: &sidecarset_core::index::Index,
        coverage: Option<&MatchCoverage>,
        leader: bool,
    ) -> anyhow::Result<InjectionModes> {
        let m = crate::metrics::metrics();
        let active = view
            .entries()
            .filter(|e| !e.ss.spec.injection_strategy.paused)
            .count() as i64;
        if !self.served {
            if let Some(c) = coverage {
                c.set_compiled(None);
            }
            set_counts(0, active);
            m.policy_active.set(0);
            return Ok(InjectionModes::default());
        }
        let webhook = self.pod_webhook().await?;
        let live = self.live_parts().await?;
        let mut compiled = self.compile(view, webhook.as_ref(), &live);
        let mut wrote = false;
        if leader {
            // A policy the API server refuses holds too much: halve it until one is taken.
            loop {
                let e = match self.write(&compiled, &live).await {
                    Ok(w) => {
                        wrote = w;
                        break;
                    }
                    Err(e) => e,
                };
                let refused = matches!(
                    e.downcast_ref::<kube::Error>(),
                    Some(kube::Error::Api(s)) if s.code == 422
                );
                if !refused || compiled.included.is_empty() {
                    return Err(e);
                }
                let half = compiled.included.len() / 2;
                warn!(error = %e, sidecarsets = half, "the API server refused the injection policy; compiling fewer SidecarSets into it");
                if let Ok(mut cap) = self.cap.lock() {
                    *cap = Some(half);
                }
                compiled = self.compile(view, webhook.as_ref(), &live);
            }
        }
        if let Some(c) = coverage {
            c.set_compiled(Some(
                compiled.included.iter().cloned().collect::<BTreeSet<_>>(),
            ));
        }
        set_counts(
            compiled.included.len() as i64,
            active - compiled.included.len() as i64,
        );
        let mut modes = InjectionModes {
            modes: Modes::of_compiled(&compiled),
            served: true,
            // Known to the leader alone, which probes (and alone writes conditions).
            active: false,
        };
        if !leader {
            return Ok(modes);
        }
        // Active once every part is seen applied (the parts take effect one by one).
        let confirmed = self.confirmed.lock().map(|c| c.clone()).unwrap_or_default();
        let mut active = true;
        let mut seen = BTreeMap::new();
        for part in &compiled.parts {
            let mine = confirmed.get(&part.name);
            if let (false, Some(mine)) = (needs_probe(mine, &part.token, wrote), mine) {
                seen.insert(part.name.clone(), mine.clone());
                continue;
            }
            let applied = self.probe(part).await?;
            if applied.as_deref() == Some(part.token.as_str()) {
                seen.insert(
                    part.name.clone(),
                    (part.token.clone(), std::time::Instant::now()),
                );
            } else {
                active = false;
            }
        }
        if let Ok(mut c) = self.confirmed.lock() {
            *c = seen;
        }
        modes.active = active;
        m.policy_active.set(i64::from(modes.active));
        Ok(modes)
    }

    /// Compiles the view; with the live policy's compile time when that gives every live part
    /// back (nothing changed), else with the time now.
    fn compile(
        &self,
        view: &sidecarset_core::index::Index,
        webhook: Option<&PodWebhook>,
        live: &BTreeMap<String, DynamicObject>,
    ) -> Compiled {
        let opts = |now: String| self.options(now, webhook);
        let head = live.get(&self.settings.name);
        if let Some(at) = head.and_then(|l| l.annotations().get(COMPILED_AT_ANNOTATION)) {
            let again = policy::compile(view, &opts(at.clone()));
            let same = again.parts.len() == live.len()
                && again.parts.iter().all(|p| {
                    live.get(&p.name)
                        .and_then(|l| l.annotations().get(PROBE_ANNOTATION))
                        == Some(&p.token)
                });
            if same {
                return again;
            }
        }
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        policy::compile(view, &opts(now))
    }

    fn options(&self, now: String, webhook: Option<&PodWebhook>) -> Options {
        let s = &self.settings;
        let skipped: Vec<&String> = s
            .skip_namespaces
            .iter()
            .filter(|n| **n != s.namespace)
            .collect();
        let default_ns = (!skipped.is_empty()).then(|| {
            json!({"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": skipped}]})
        });
        Options {
            name: s.name.clone(),
            now,
            failure_policy: webhook
                .and_then(|w| w.failure_policy.clone())
                .unwrap_or_else(|| s.failure_policy.clone()),
            namespace_selector: webhook
                .map(|w| without_namespace(w.namespace_selector.clone(), &s.namespace))
                .unwrap_or(default_ns),
            object_selector: webhook.and_then(|w| w.object_selector.clone()),
            labels: BTreeMap::from([(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string())]),
            skip_namespace: Some(s.namespace.clone()),
            owner: webhook.map(|w| w.owner.clone()),
            max_sidecarsets: self.cap.lock().ok().and_then(|c| *c),
        }
    }

    /// Deletes every part of our policy (mode `webhook`), if there are any: by name, which is
    /// all the chart grants in this mode.
    async fn delete_ours(&self) -> anyhow::Result<()> {
        for name in policy::part_names(&self.settings.name) {
            for api in [self.bindings(), self.policies()] {
                let ours = api.get_opt(&name).await?.is_some_and(|o| {
                    o.labels().get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
                });
                if ours {
                    api.delete(&name, &DeleteParams::default()).await?;
                    info!(%name, "deleted the injection policy (--injection=webhook)");
                }
            }
        }
        Ok(())
    }

    /// The pod CREATE webhook's selectors and failure policy, and its configuration as owner.
    async fn pod_webhook(&self) -> anyhow::Result<Option<PodWebhook>> {
        let api: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let configs = match &self.settings.webhook_configs {
            WebhookConfigs::Named(n) => api.get_opt(n).await?.into_iter().collect::<Vec<_>>(),
            WebhookConfigs::Selected(s) => api.list(&ListParams::default().labels(s)).await?.items,
        };
        Ok(configs.iter().find_map(PodWebhook::of))
    }
}

fn set_counts(policy: i64, webhook: i64) {
    let m = crate::metrics::metrics();
    for (mode, n) in [("policy", policy), ("webhook", webhook.max(0))] {
        m.policy_sidecarsets
            .get_or_create(&crate::metrics::ModeLabel { mode: mode.into() })
            .set(n);
    }
}

/// What the policy copies from the pod CREATE webhook.
struct PodWebhook {
    owner: Value,
    failure_policy: Option<String>,
    namespace_selector: Option<Value>,
    object_selector: Option<Value>,
}

impl PodWebhook {
    fn of(config: &MutatingWebhookConfiguration) -> Option<PodWebhook> {
        let hook = config
            .webhooks
            .iter()
            .flatten()
            .find(|w| w.name == POD_CREATE_WEBHOOK)?;
        let to_value = |v| serde_json::to_value(v).ok();
        Some(PodWebhook {
            owner: json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "name": config.name_any(),
                "uid": config.metadata.uid.clone().unwrap_or_default(),
            }),
            failure_policy: hook.failure_policy.clone(),
            namespace_selector: hook.namespace_selector.as_ref().and_then(to_value),
            object_selector: hook.object_selector.as_ref().and_then(to_value),
        })
    }
}

/// The webhook's namespace selector without `ns` among the names it excludes (the policy
/// leaves that namespace out in its condition instead, so that the probe can run there).
fn without_namespace(selector: Option<Value>, ns: &str) -> Option<Value> {
    let mut sel = selector?;
    if let Some(exprs) = sel["matchExpressions"].as_array_mut() {
        for e in exprs.iter_mut() {
            if e["key"] == "kubernetes.io/metadata.name"
                && e["operator"] == "NotIn"
                && let Some(values) = e["values"].as_array_mut()
            {
                values.retain(|v| v != ns);
            }
        }
        exprs.retain(|e| {
            !(e["operator"] == "NotIn" && e["values"].as_array().is_some_and(Vec::is_empty))
        });
    }
    Some(sel)
}

#[cfg(test)]
mod tests {
    use super::write::contains;
    use super::*;

    #[test]
    fn what_is_written_is_found_in_what_the_api_server_returns() {
        let want = json!({"a": 1, "b": {"c": [1, {"d": "x"}]}});
        for (have, expected) in [
            (
                json!({"a": 1, "b": {"c": [1, {"d": "x", "e": 2}]}, "z": 0}),
                true,
            ),
            (json!({"a": 1, "b": {"c": [1, {"d": "y"}]}}), false),
            (json!({"a": 1, "b": {"c": [1]}}), false),
            (json!({"b": {"c": [1, {"d": "x"}]}}), false),
        ] {
            assert_eq!(contains(&have, &want), expected, "{have}");
        }
    }

    #[test]
    fn the_operator_namespace_is_dropped_from_the_excluded_names_only() {
        let sel = json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["sso", "kube-system"]},
            {"key": "team", "operator": "In", "values": ["a"]}]});
        assert_eq!(
            without_namespace(Some(sel), "sso").unwrap(),
            json!({"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]},
                {"key": "team", "operator": "In", "values": ["a"]}]})
        );
        let only = json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["sso"]}]});
        assert_eq!(
            without_namespace(Some(only), "sso").unwrap(),
            json!({"matchExpressions": []})
        );
        assert_eq!(without_namespace(None, "sso"), None);
    }

    #[test]
    fn modes_parse_with_webhook_as_the_default() {
        assert_eq!(Mode::parse("policy"), Mode::Policy);
        assert_eq!(Mode::parse("auto"), Mode::Auto);
        assert_eq!(Mode::parse("webhook"), Mode::Webhook);
    }

    use std::time::Instant;

    #[test]
    fn an_idle_policy_is_probed_again_only_once_its_confirmation_is_old() {
        let now = Instant::now();
        let fresh = Some(("t1".to_string(), now));
        let old = now
            .checked_sub(CONFIRMED_FOR + Duration::from_secs(1))
            .map(|at| ("t1".to_string(), at));
        let cases = [
            // (confirmed, token, wrote, probe)
            (None, "t1", false, true),
            (fresh.clone(), "t1", false, false),
            (fresh.clone(), "t1", true, true),
            (fresh.clone(), "t2", false, true),
            (old.clone(), "t1", false, true),
        ];
        for (i, (confirmed, token, wrote, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                needs_probe(confirmed.as_ref(), token, wrote),
                want,
                "case {i}: {confirmed:?} {token} wrote={wrote}"
            );
        }
    }

    #[test]
    fn webhook_mode_may_remove_every_part_by_name_in_the_chart_and_the_bundle() {
        let chart = include_str!("../../../../charts/sidecarset-operator/templates/rbac.yaml");
        let range = format!("untilStep 1 {} 1", policy::parts::MAX_PARTS);
        assert!(
            chart.contains(&range),
            "the chart's rbac.yaml lacks {range:?}"
        );
        let csv = include_str!(
            "../../../../bundle/manifests/sidecarset-operator.clusterserviceversion.yaml"
        );
        for name in policy::part_names("sidecarset-operator") {
            assert!(
                csv.contains(&format!("          - {name}\n")),
                "the bundle's webhook-mode rule lacks {name}"
            );
        }
    }
}
