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
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sidecarset_core::policy::{
    self, COMPILED_AT_ANNOTATION, Compiled, Modes, Options, PROBE_ANNOTATION, PROBE_LABEL,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

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
    /// The token a probe last showed applied, and when.
    confirmed: std::sync::Mutex<Option<(String, std::time::Instant)>>,
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
        let live = self.policies().get_opt(&self.settings.name).await?;
        let mut compiled = self.compile(view, webhook.as_ref(), live.as_ref());
        let mut wrote = false;
        if leader {
            // A policy the API server refuses holds too much: halve it until one is taken.
            loop {
                let e = match self.write(&compiled, live.as_ref()).await {
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
                compiled = self.compile(view, webhook.as_ref(), live.as_ref());
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
        let confirmed = self.confirmed.lock().ok().and_then(|c| c.clone());
        modes.active = if needs_probe(confirmed.as_ref(), &compiled.token, wrote) {
            let applied = self.probe().await?;
            let active = applied.as_deref() == Some(&compiled.token);
            if let Ok(mut c) = self.confirmed.lock() {
                *c = active.then(|| (compiled.token.clone(), std::time::Instant::now()));
            }
            active
        } else {
            true
        };
        m.policy_active.set(i64::from(modes.active));
        Ok(modes)
    }

    /// Compiles the view; with the live policy's compile time when that gives the live policy
    /// back (nothing changed), else with the time now.
    fn compile(
        &self,
        view: &sidecarset_core::index::Index,
        webhook: Option<&PodWebhook>,
        live: Option<&DynamicObject>,
    ) -> Compiled {
        let live_annotation = |k: &str| live.and_then(|l| l.annotations().get(k).cloned());
        let opts = |now: String| self.options(now, webhook);
        if let Some(at) = live_annotation(COMPILED_AT_ANNOTATION) {
            let again = policy::compile(view, &opts(at));
            if live_annotation(PROBE_ANNOTATION).as_deref() == Some(again.token.as_str()) {
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

    /// Writes the policy and the binding when they differ from what is rendered.
    /// Writes what differs; returns whether anything was written.
    async fn write(
        &self,
        compiled: &Compiled,
        live: Option<&DynamicObject>,
    ) -> anyhow::Result<bool> {
        let mut wrote = false;
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let name = &self.settings.name;
        let m = crate::metrics::metrics();
        let live = live.map(|l| serde_json::to_value(l).unwrap_or_default());
        if !live.as_ref().is_some_and(|l| contains(l, &compiled.policy)) {
            self.policies()
                .patch(name, &pp, &Patch::Apply(&compiled.policy))
                .await?;
            m.policy_writes.inc();
            wrote = true;
            info!(
                token = %compiled.token,
                policy = compiled.included.len(),
                webhook = compiled.fallbacks.len(),
                "wrote the injection policy"
            );
        }
        let binding = self.bindings().get_opt(name).await?;
        let binding = binding.map(|b| serde_json::to_value(b).unwrap_or_default());
        if !binding
            .as_ref()
            .is_some_and(|b| contains(b, &compiled.binding))
        {
            self.bindings()
                .patch(name, &pp, &Patch::Apply(&compiled.binding))
                .await?;
            m.policy_writes.inc();
            wrote = true;
        }
        Ok(wrote)
    }

    /// The token of the policy version the API server applies now, from a dry-run probe pod.
    async fn probe(&self) -> anyhow::Result<Option<String>> {
        let probe: Pod = serde_json::from_value(json!({
            "metadata": {"generateName": "sidecarset-policy-probe-", "labels": {PROBE_LABEL: "1"}},
            "spec": {
                "automountServiceAccountToken": false,
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "probe", "image": "probe",
                    "securityContext": {"allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]}}}],
            },
        }))?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        let got = pods
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &probe,
            )
            .await?;
        Ok(got.annotations().get(PROBE_ANNOTATION).cloned())
    }

    /// Deletes our policy and binding (mode `webhook`), if there are any.
    async fn delete_ours(&self) -> anyhow::Result<()> {
        let name = &self.settings.name;
        for api in [self.bindings(), self.policies()] {
            let ours = api.get_opt(name).await?.is_some_and(|o| {
                o.labels().get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
            });
            if ours {
                api.delete(name, &DeleteParams::default()).await?;
                info!(%name, "deleted the injection policy (--injection=webhook)");
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

/// True when `have` holds every field of `want` with its value (lists item by item): the API
/// server adds defaults and metadata to what was written.
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| contains(hv, v))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(a, b)| contains(a, b))
        }
        (h, w) => h == w,
    }
}

#[cfg(test)]
mod tests {
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
}
