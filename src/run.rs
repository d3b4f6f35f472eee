//! `sidecarset-operator run`: the watchers that keep the webhook's index current, the webhook
//! configurations (URL mode for a local process, Service mode in a cluster), and the TLS server.

use crate::api::{SidecarSet, default_sidecarset};
use crate::webhook::{self, State, server};
use anyhow::{Context, bail};
use futures::TryStreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kube::Client;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tracing::{error, info, warn};

/// Field manager of everything the operator writes.
pub const FIELD_MANAGER: &str = "sidecarset-operator";
/// OpenKruise's webhook configurations; their presence means a second injector.
const KRUISE_WEBHOOKS: [&str; 2] = [
    "kruise-mutating-webhook-configuration",
    "kruise-validating-webhook-configuration",
];

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Address the webhook server listens on.
    #[arg(long, env = "SSO_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,
    /// Directory with tls.crt and tls.key for the webhook server (reloaded when they change).
    #[arg(
        long,
        env = "SSO_CERT_DIR",
        default_value = "/tmp/k8s-webhook-server/serving-certs"
    )]
    pub cert_dir: PathBuf,
    /// The operator's namespace (its pods are never injected).
    #[arg(long, env = "POD_NAMESPACE", default_value = "sidecarset-system")]
    pub namespace: String,
    /// More namespaces whose pods are never injected, comma-separated.
    #[arg(
        long,
        env = "SSO_SKIP_NAMESPACES",
        value_delimiter = ',',
        default_value = "kube-system"
    )]
    pub skip_namespaces: Vec<String>,
    /// Create and keep the webhook configurations (server-side apply). Off when a Helm chart or
    /// OLM owns them.
    #[arg(long, env = "SSO_MANAGE_WEBHOOKS", default_value_t = false)]
    pub manage_webhooks: bool,
    /// Name of the Mutating and Validating webhook configurations.
    #[arg(
        long,
        env = "SSO_WEBHOOK_CONFIG_NAME",
        default_value = "sidecarset-operator"
    )]
    pub webhook_config_name: String,
    /// URL mode: the API server calls `<URL>/mutate-pod` etc. (for a local process, e.g.
    /// https://127.0.0.1:9443). Without it, Service mode is used.
    #[arg(long, env = "SSO_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// Service mode: the webhook Service's name (in the operator's namespace).
    #[arg(
        long,
        env = "SSO_WEBHOOK_SERVICE",
        default_value = "sidecarset-operator-webhook"
    )]
    pub webhook_service: String,
    /// Service mode: the webhook Service's port.
    #[arg(long, env = "SSO_WEBHOOK_SERVICE_PORT", default_value_t = 443)]
    pub webhook_service_port: i32,
    /// PEM file of the CA that signed the serving certificate, written as caBundle.
    #[arg(long, env = "SSO_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// failurePolicy of the pod webhook: Fail (no pod is created without its sidecars) or Ignore.
    #[arg(long, env = "SSO_FAILURE_POLICY", default_value = "Fail", value_parser = ["Fail", "Ignore"])]
    pub failure_policy: String,
    /// timeoutSeconds of the webhooks.
    #[arg(long, env = "SSO_WEBHOOK_TIMEOUT", default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..=30))]
    pub webhook_timeout_seconds: i32,
    /// Start even when OpenKruise's webhooks are installed (pods would be injected twice).
    #[arg(long, env = "SSO_ALLOW_OPENKRUISE", default_value_t = false)]
    pub allow_openkruise: bool,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    server::install_crypto_provider();
    let client = Client::try_default()
        .await
        .context("cannot reach the Kubernetes API: set KUBECONFIG or run in a cluster")?;
    check_openkruise(&client, args.allow_openkruise).await?;

    let mut skip: Vec<String> = args.skip_namespaces.clone();
    skip.push(args.namespace.clone());
    let state = Arc::new(State::new(skip.into_iter().filter(|s| !s.is_empty())));

    let tls = server::server_config_from_dir(&args.cert_dir).with_context(|| {
        format!(
            "no usable serving certificate in {}: provide tls.crt and tls.key",
            args.cert_dir.display()
        )
    })?;
    state.mark_tls_loaded(true);
    let rustls = axum_server::tls_rustls::RustlsConfig::from_config(tls);

    if args.manage_webhooks {
        apply_webhook_configurations(&client, &args).await?;
    }

    tokio::spawn(watch_sidecarsets(client.clone(), state.clone()));
    tokio::spawn(watch_namespaces(client.clone(), state.clone()));
    tokio::spawn(reload_certs(
        args.cert_dir.clone(),
        rustls.clone(),
        state.clone(),
    ));

    let handle = axum_server::Handle::new();
    let h2 = handle.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutting down: finishing requests in flight");
        h2.graceful_shutdown(Some(Duration::from_secs(20)));
    });
    info!(listen = %args.listen, "serving webhooks");
    axum_server::bind_rustls(args.listen, rustls)
        .handle(handle)
        .serve(webhook::router(state).into_make_service())
        .await
        .with_context(|| format!("cannot serve on {}", args.listen))?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    ctrl_c.await.unwrap_or(());
}

async fn check_openkruise(client: &Client, allow: bool) -> anyhow::Result<()> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let vapi: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let found = api.get_opt(KRUISE_WEBHOOKS[0]).await?.is_some()
        || vapi.get_opt(KRUISE_WEBHOOKS[1]).await?.is_some();
    if found && !allow {
        bail!(
            "OpenKruise is installed (webhook configuration {} exists): it injects SidecarSets too, so every pod \
             would get its sidecars twice. Uninstall OpenKruise first, or pass --allow-openkruise if its pod \
             webhook is disabled",
            KRUISE_WEBHOOKS[0]
        );
    }
    if found {
        warn!(
            "OpenKruise's webhooks are installed; starting anyway because --allow-openkruise is set"
        );
    }
    Ok(())
}

/// Keeps the SidecarSet index current. The first full list replaces the index at once.
async fn watch_sidecarsets(client: Client, state: Arc<State>) {
    let api: Api<SidecarSet> = Api::all(client);
    let mut buffer: Vec<SidecarSet> = Vec::new();
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Init)) => buffer.clear(),
            Ok(Some(Event::InitApply(ss))) => buffer.push(ss),
            Ok(Some(Event::InitDone)) => {
                let (index, errors) =
                    crate::select::Index::from_sidecarsets(buffer.drain(..).map(defaulted));
                for (name, e) in errors {
                    warn!(sidecarset = %name, error = %e, "SidecarSet ignored: its selectors are invalid");
                }
                info!(count = index.len(), "SidecarSets listed");
                state.set_index(index);
                state.mark_sidecarsets_synced();
            }
            Ok(Some(Event::Apply(ss))) => {
                let name = ss.metadata.name.clone().unwrap_or_default();
                state.update_index(|i| {
                    if let Err(e) = i.upsert(Arc::new(defaulted(ss))) {
                        warn!(sidecarset = %name, error = %e, "SidecarSet ignored: its selectors are invalid");
                    }
                });
            }
            Ok(Some(Event::Delete(ss))) => {
                let name = ss.metadata.name.clone().unwrap_or_default();
                state.update_index(|i| i.remove(&name));
            }
            Ok(None) => return,
            Err(e) => warn!(error = %e, "SidecarSet watch failed; retrying"),
        }
    }
}

fn defaulted(mut ss: SidecarSet) -> SidecarSet {
    default_sidecarset(&mut ss);
    ss.metadata.managed_fields = None;
    ss
}

fn watcher<K>(
    api: Api<K>,
    cfg: watcher::Config,
) -> impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, cfg)
}

/// Keeps namespace labels current (metadata only).
async fn watch_namespaces(client: Client, state: Arc<State>) {
    let api: Api<PartialObjectMeta<Namespace>> = Api::all(client);
    let mut buffer: HashMap<String, BTreeMap<String, String>> = HashMap::new();
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let key = |m: &PartialObjectMeta<Namespace>| {
        (
            m.metadata.name.clone().unwrap_or_default(),
            m.metadata.labels.clone().unwrap_or_default(),
        )
    };
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Init)) => buffer.clear(),
            Ok(Some(Event::InitApply(ns))) => {
                let (n, l) = key(&ns);
                buffer.insert(n, l);
            }
            Ok(Some(Event::InitDone)) => {
                state.set_namespaces(std::mem::take(&mut buffer));
                state.mark_namespaces_synced();
            }
            Ok(Some(Event::Apply(ns))) => {
                let (n, l) = key(&ns);
                state.update_namespaces(|m| {
                    m.insert(n, l);
                });
            }
            Ok(Some(Event::Delete(ns))) => {
                let (n, _) = key(&ns);
                state.update_namespaces(|m| {
                    m.remove(&n);
                });
            }
            Ok(None) => return,
            Err(e) => warn!(error = %e, "Namespace watch failed; retrying"),
        }
    }
}

/// Reloads the serving certificate when its files change; a bad pair is logged and the current
/// one kept.
async fn reload_certs(
    dir: PathBuf,
    config: axum_server::tls_rustls::RustlsConfig,
    state: Arc<State>,
) {
    let stamp = |d: &PathBuf| -> Option<(SystemTime, SystemTime)> {
        let m = |n: &str| std::fs::metadata(d.join(n)).and_then(|m| m.modified()).ok();
        Some((m("tls.crt")?, m("tls.key")?))
    };
    let mut last = stamp(&dir);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = stamp(&dir);
        if now == last {
            continue;
        }
        last = now;
        match server::server_config_from_dir(&dir) {
            Ok(cfg) => {
                config.reload_from_config(cfg);
                state.mark_tls_loaded(true);
                info!(dir = %dir.display(), "serving certificate reloaded");
            }
            Err(e) => {
                error!(dir = %dir.display(), error = %e, "serving certificate not reloaded; keeping the current one")
            }
        }
    }
}

/// The webhook configurations the operator serves, in URL or Service mode.
pub fn webhook_configurations(
    args: &RunArgs,
    ca_bundle: Option<Vec<u8>>,
) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let client_config = |path: &str| WebhookClientConfig {
        ca_bundle: ca_bundle.clone().map(ByteString),
        url: args
            .webhook_url
            .as_ref()
            .map(|u| format!("{}{path}", u.trim_end_matches('/'))),
        service: args.webhook_url.is_none().then(|| ServiceReference {
            name: args.webhook_service.clone(),
            namespace: args.namespace.clone(),
            path: Some(path.into()),
            port: Some(args.webhook_service_port),
        }),
    };
    let mut excluded: Vec<String> = args.skip_namespaces.clone();
    excluded.push(args.namespace.clone());
    excluded.retain(|s| !s.is_empty());
    excluded.sort();
    excluded.dedup();
    let ns_selector = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: crate::api::LABEL_NAMESPACE_NAME.into(),
            operator: "NotIn".into(),
            values: Some(excluded),
        }]),
        match_labels: None,
    };
    let rule = |group: &str, version: &str, resource: &str| RuleWithOperations {
        api_groups: Some(vec![group.into()]),
        api_versions: Some(vec![version.into()]),
        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
        resources: Some(vec![resource.into()]),
        scope: None,
    };
    let meta = || ObjectMeta {
        name: Some(args.webhook_config_name.clone()),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/managed-by".into(),
            FIELD_MANAGER.into(),
        )])),
        ..Default::default()
    };
    let mutating = MutatingWebhookConfiguration {
        metadata: meta(),
        webhooks: Some(vec![
            MutatingWebhook {
                name: "mpod.sidecarset-operator.io".into(),
                client_config: client_config("/mutate-pod"),
                rules: Some(vec![rule("", "v1", "pods")]),
                namespace_selector: Some(ns_selector),
                failure_policy: Some(args.failure_policy.clone()),
                side_effects: "None".into(),
                admission_review_versions: vec!["v1".into()],
                timeout_seconds: Some(args.webhook_timeout_seconds),
                reinvocation_policy: Some("IfNeeded".into()),
                match_policy: Some("Equivalent".into()),
                ..Default::default()
            },
            MutatingWebhook {
                name: "msidecarset.sidecarset-operator.io".into(),
                client_config: client_config("/mutate-sidecarset"),
                rules: Some(vec![rule(
                    crate::api::GROUP,
                    crate::api::VERSION,
                    "sidecarsets",
                )]),
                failure_policy: Some("Fail".into()),
                side_effects: "None".into(),
                admission_review_versions: vec!["v1".into()],
                timeout_seconds: Some(args.webhook_timeout_seconds),
                match_policy: Some("Equivalent".into()),
                ..Default::default()
            },
        ]),
    };
    let validating = ValidatingWebhookConfiguration {
        metadata: meta(),
        webhooks: Some(vec![ValidatingWebhook {
            name: "vsidecarset.sidecarset-operator.io".into(),
            client_config: client_config("/validate-sidecarset"),
            rules: Some(vec![rule(
                crate::api::GROUP,
                crate::api::VERSION,
                "sidecarsets",
            )]),
            failure_policy: Some("Fail".into()),
            side_effects: "None".into(),
            admission_review_versions: vec!["v1".into()],
            timeout_seconds: Some(args.webhook_timeout_seconds),
            match_policy: Some("Equivalent".into()),
            ..Default::default()
        }]),
    };
    (mutating, validating)
}

async fn apply_webhook_configurations(client: &Client, args: &RunArgs) -> anyhow::Result<()> {
    let ca = match &args.ca_file {
        Some(p) => Some(
            std::fs::read(p).with_context(|| format!("cannot read --ca-file {}", p.display()))?,
        ),
        None => None,
    };
    let (m, v) = webhook_configurations(args, ca);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let name = &args.webhook_config_name;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(name, &pp, &Patch::Apply(&with_types(&m)?))
        .await
        .with_context(|| format!("cannot apply MutatingWebhookConfiguration {name}"))?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(name, &pp, &Patch::Apply(&with_types(&v)?))
        .await
        .with_context(|| format!("cannot apply ValidatingWebhookConfiguration {name}"))?;
    info!(name = %name, url = ?args.webhook_url, "webhook configurations applied");
    Ok(())
}

fn with_types<K: kube::Resource<DynamicType = ()> + serde::Serialize>(
    obj: &K,
) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(obj)?;
    v["apiVersion"] = K::api_version(&()).into();
    v["kind"] = K::kind(&()).into();
    Ok(v)
}
