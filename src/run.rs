//! `sidecarset-operator run`: the watchers that keep the webhook's index current, the webhook
//! configurations (URL mode for a local process, Service mode in a cluster), and the TLS server.

use crate::api::{SidecarSet, default_sidecarset};
use crate::certs;
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
use std::time::Duration;
use tracing::{debug, info, warn};

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
    /// self: the operator makes and rotates its CA and serving certificate (stored in
    /// --cert-secret-name) and writes caBundle; files: serve tls.crt/tls.key from --cert-dir
    /// (cert-manager, OLM) and write nothing.
    #[arg(long, env = "SSO_CERT_MODE", default_value = "self", value_parser = ["self", "files"])]
    pub cert_mode: String,
    /// Files mode: directory with tls.crt and tls.key (reloaded when they change).
    #[arg(
        long,
        env = "SSO_CERT_DIR",
        default_value = "/tmp/k8s-webhook-server/serving-certs"
    )]
    pub cert_dir: PathBuf,
    /// Self mode: the Secret (in --namespace) holding the CA and the serving certificate.
    #[arg(
        long,
        env = "SSO_CERT_SECRET",
        default_value = "sidecarset-operator-webhook-certs"
    )]
    pub cert_secret_name: String,
    /// Self mode: lifetime of the CA (s, m, h or d).
    #[arg(long, env = "SSO_CA_VALIDITY", default_value = "1825d", value_parser = parse_duration)]
    pub ca_validity: Duration,
    /// Self mode: lifetime of the serving certificate.
    #[arg(long, env = "SSO_CERT_VALIDITY", default_value = "90d", value_parser = parse_duration)]
    pub cert_validity: Duration,
    /// Self mode: renew each certificate at this fraction of its lifetime.
    #[arg(long, env = "SSO_CERT_RENEW_AT", default_value_t = 2.0 / 3.0)]
    pub cert_renew_at: f64,
    /// Self mode: how long old and new CAs are both trusted during a CA rotation.
    #[arg(long, env = "SSO_CA_OVERLAP", default_value = "60s", value_parser = parse_duration)]
    pub ca_overlap: Duration,
    /// Self mode: how often the certificates and caBundle are checked without any event.
    #[arg(long, env = "SSO_CERT_RESYNC", default_value = "30s", value_parser = parse_duration)]
    pub cert_resync: Duration,
    /// Self mode: more DNS names for the serving certificate, comma-separated.
    #[arg(long, env = "SSO_CERT_EXTRA_DNS", value_delimiter = ',')]
    pub cert_extra_dns: Vec<String>,
    /// Self mode: IP addresses for the serving certificate, comma-separated (the host of
    /// --webhook-url is added by itself).
    #[arg(long, env = "SSO_CERT_EXTRA_IPS", value_delimiter = ',')]
    pub cert_extra_ips: Vec<std::net::IpAddr>,
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
    /// Files mode with --manage-webhooks: PEM file of the CA written as caBundle.
    #[arg(long, env = "SSO_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// failurePolicy of the pod webhook: Fail (no pod is created without its sidecars) or Ignore.
    #[arg(long, env = "SSO_FAILURE_POLICY", default_value = "Fail", value_parser = ["Fail", "Ignore"])]
    pub failure_policy: String,
    /// timeoutSeconds of the webhooks.
    #[arg(long, env = "SSO_WEBHOOK_TIMEOUT", default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..=30))]
    pub webhook_timeout_seconds: i32,
    /// Keep the SidecarSet CRD's conversion webhook (`spec.conversion`: this operator's Service or
    /// URL, path /convert, and the CA it trusts) with server-side apply. Self mode: the
    /// operator's CA; files mode: --ca-file, else `ca.crt` in --cert-dir. Off when OLM owns the
    /// CRD's conversion settings.
    #[arg(long, env = "SSO_MANAGE_CRD_CONVERSION", default_value_t = true, action = clap::ArgAction::Set)]
    pub manage_crd_conversion: bool,
    /// How rollouts count `partition` and `maxUnavailable`: openkruise (as OpenKruise: partition
    /// holds back that many upgradable pods; only upgraded pods that are not ready or not yet
    /// running the new image spend maxUnavailable) or strict (partition counts every pod kept on
    /// the old sidecars; every not-ready pod spends maxUnavailable).
    #[arg(long, env = "SSO_ROLLOUT_RULES", default_value = "openkruise", value_parser = ["openkruise", "strict"])]
    pub rollout_rules: String,
    /// Keep the pod webhook's matchConditions (CEL) to the union of the SidecarSets' pod
    /// selectors, so that the API server calls it only for pods some SidecarSet could select.
    /// Off when OLM owns the webhook configurations.
    #[arg(long, env = "SSO_POD_MATCH_CONDITIONS", default_value_t = true, action = clap::ArgAction::Set)]
    pub pod_match_conditions: bool,
    /// Start even when OpenKruise's webhooks are installed (pods would be injected twice).
    #[arg(long, env = "SSO_ALLOW_OPENKRUISE", default_value_t = false)]
    pub allow_openkruise: bool,
    /// Serve Prometheus metrics on this address (`/metrics`, plain HTTP); off when unset.
    #[arg(long, env = "SSO_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Run the SidecarSet controller (status, revisions, in-place upgrades) in this process.
    #[arg(long, env = "SSO_CONTROLLER", default_value_t = true, action = clap::ArgAction::Set)]
    pub controller: bool,
    /// Elect one leader among replicas with a Lease; off: this process always reconciles.
    #[arg(long, env = "SSO_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the Lease (in --namespace).
    #[arg(long, env = "SSO_LEADER_LEASE", default_value = "sidecarset-operator")]
    pub leader_lease_name: String,
    /// How long a leader's Lease is valid without renewal.
    #[arg(long, env = "SSO_LEADER_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub leader_lease_duration: Duration,
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
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
        format!(
            "{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into()),
            std::process::id()
        )
    });
    let (skip_tx, skip_rx) = webhook::events::queue();
    state.set_skip_events(skip_tx);
    tokio::spawn(webhook::events::record(
        client.clone(),
        skip_rx,
        identity.clone(),
    ));

    if let Some(addr) = args.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot serve metrics on {addr}"))?;
        info!(listen = %addr, "serving metrics on /metrics");
        tokio::spawn(async move {
            let app = axum::Router::new().route(
                "/metrics",
                axum::routing::get(|headers: axum::http::HeaderMap| async move {
                    let accept = headers
                        .get(axum::http::header::ACCEPT)
                        .and_then(|v| v.to_str().ok());
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            crate::telemetry::content_type(accept),
                        )],
                        crate::telemetry::encode(),
                    )
                }),
            );
            if let Err(e) = axum::serve(listener, app).await {
                warn!(error = %e, "metrics server stopped");
            }
        });
    }
    tokio::spawn(watch_sidecarsets(client.clone(), state.clone()));
    tokio::spawn(watch_namespaces(client.clone(), state.clone()));
    if args.pod_match_conditions {
        tokio::spawn(keep_pod_match_conditions(
            client.clone(),
            state.clone(),
            args.webhook_config_name.clone(),
        ));
    }
    tokio::spawn(watch_revisions(
        client.clone(),
        args.namespace.clone(),
        state.clone(),
    ));

    // Leader election (src/controller/leader.rs): `leadership` gates and cancels reconciles.
    let election = if args.controller && args.leader_elect {
        let settings = crate::controller::leader::Settings {
            namespace: args.namespace.clone(),
            name: args.leader_lease_name.clone(),
            identity: identity.clone(),
            lease_duration: args.leader_lease_duration,
        };
        Some(
            crate::controller::leader::Election::start(client.clone(), settings)
                .map_err(anyhow::Error::msg)?,
        )
    } else {
        None
    };
    let leadership = election.as_ref().map_or_else(
        crate::controller::leader::Leadership::always,
        crate::controller::leader::Election::leadership,
    );
    if args.controller {
        tokio::spawn(crate::controller::run(
            client.clone(),
            args.namespace.clone(),
            leadership,
            identity,
            state.clone(),
            args.rollout_rules.parse().unwrap_or_default(),
        ));
    }

    // Certificates last: the watchers, the controller and leader election start meanwhile.
    let rustls = if args.cert_mode == "self" {
        state.require_ca_trust();
        let owned = args
            .manage_webhooks
            .then(|| webhook_configurations(&args, None));
        if args.manage_crd_conversion {
            state.require_conversion();
        }
        let manager = certs::manager::Manager::new(
            client.clone(),
            cert_settings(&args)?,
            owned,
            state.clone(),
        );
        info!(secret = %format!("{}/{}", args.namespace, args.cert_secret_name), "self-managed certificates");
        let rustls = manager.initial().await;
        tokio::spawn(manager.run());
        rustls
    } else {
        let (tls, expires) = certs::manager::load_files(&args.cert_dir).with_context(|| {
            format!(
                "no usable serving certificate in {}: provide tls.crt and tls.key",
                args.cert_dir.display()
            )
        })?;
        state.mark_tls_loaded(true);
        state.set_cert_expiry(expires);
        crate::telemetry::metrics().cert_expiry.set(expires);
        info!(dir = %args.cert_dir.display(), expires = %certs::ts(expires), "serving certificate from files");
        if args.manage_webhooks {
            apply_webhook_configurations(&client, &args).await?;
        }
        if args.manage_crd_conversion {
            let ca = args
                .ca_file
                .clone()
                .unwrap_or_else(|| args.cert_dir.join("ca.crt"));
            // Not a readiness condition here: a missing CA file must not take the pod webhook
            // down with it (v1beta1 clients and injection work without conversion).
            tokio::spawn(keep_crd_conversion_from_file(
                client.clone(),
                state.clone(),
                conversion_target(&args),
                ca,
                args.cert_resync,
            ));
        }
        let rustls = axum_server::tls_rustls::RustlsConfig::from_config(tls);
        tokio::spawn(certs::manager::watch_files(
            args.cert_dir.clone(),
            rustls.clone(),
            state.clone(),
        ));
        rustls
    };

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
    if let Some(election) = election {
        election.release().await;
    }
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
    let mut found = Vec::new();
    if api.get_opt(KRUISE_WEBHOOKS[0]).await?.is_some() {
        found.push(format!(
            "mutatingwebhookconfiguration/{}",
            KRUISE_WEBHOOKS[0]
        ));
    }
    if vapi.get_opt(KRUISE_WEBHOOKS[1]).await?.is_some() {
        found.push(format!(
            "validatingwebhookconfiguration/{}",
            KRUISE_WEBHOOKS[1]
        ));
    }
    if !found.is_empty() && !allow {
        bail!(
            "OpenKruise is installed (webhook configuration {} exists): it injects SidecarSets too, so every pod \
             would get its sidecars twice. Uninstall OpenKruise first (`helm uninstall kruise -n kruise-system`; \
             SidecarSets, their revisions and injected pods stay), or remove what is left of it: `kubectl delete {}`. \
             Pass --allow-openkruise only if its pod webhook is disabled",
            found
                .iter()
                .map(|f| f.split('/').nth(1).unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", "),
            found.join(" ")
        );
    }
    if !found.is_empty() {
        warn!(
            "OpenKruise's webhooks are installed; starting anyway because --allow-openkruise is set"
        );
    }
    Ok(())
}

/// The watch is on the stored version (v1beta1), so it never depends on the conversion webhook;
/// each object is converted to the internal shape here.
async fn watch_sidecarsets(client: Client, state: Arc<State>) {
    let api: Api<crate::api::v1beta1::SidecarSet> = Api::all(client);
    let mut buffer: Vec<SidecarSet> = Vec::new();
    let internal = |stored: crate::api::v1beta1::SidecarSet| {
        let name = stored.metadata.name.clone().unwrap_or_default();
        match crate::api::convert::from_v1beta1(&stored) {
            Ok(ss) => Some(ss),
            Err(e) => {
                warn!(sidecarset = %name, error = %e, "SidecarSet ignored: it cannot be read");
                None
            }
        }
    };
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Init)) => buffer.clear(),
            Ok(Some(Event::InitApply(ss))) => buffer.extend(internal(ss)),
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
                let Some(ss) = internal(ss) else {
                    state.update_index(|i| i.remove(&name));
                    continue;
                };
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

/// Keeps the SidecarSets' ControllerRevisions (for `injectionStrategy.revision`) in memory.
async fn watch_revisions(client: Client, namespace: String, state: Arc<State>) {
    use k8s_openapi::api::apps::v1::ControllerRevision;
    let api: Api<ControllerRevision> = Api::namespaced(client, &namespace);
    let cfg =
        watcher::Config::default().labels(crate::controller::revisions::LABEL_SIDECARSET_NAME);
    let mut all: HashMap<String, crate::webhook::KnownRevision> = HashMap::new();
    let mut buffer = HashMap::new();
    let entry = |r: &ControllerRevision| {
        let labels = r.metadata.labels.clone().unwrap_or_default();
        let ss = labels
            .get(crate::controller::revisions::LABEL_SIDECARSET_NAME)
            .cloned()
            .unwrap_or_default();
        let custom = labels
            .get(crate::controller::revisions::LABEL_CUSTOM_VERSION)
            .cloned();
        (
            r.metadata.name.clone().unwrap_or_default(),
            crate::webhook::KnownRevision {
                sidecarset: ss,
                custom_version: custom,
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
            },
        )
    };
    let stream = watcher(api, cfg).default_backoff();
    futures::pin_mut!(stream);
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Init)) => buffer.clear(),
            Ok(Some(Event::InitApply(r))) => {
                let (k, v) = entry(&r);
                buffer.insert(k, v);
            }
            Ok(Some(Event::InitDone)) => {
                all = std::mem::take(&mut buffer);
                state.set_revisions(all.clone());
            }
            Ok(Some(Event::Apply(r))) => {
                let (k, v) = entry(&r);
                all.insert(k, v);
                state.set_revisions(all.clone());
            }
            Ok(Some(Event::Delete(r))) => {
                all.remove(&entry(&r).0);
                state.set_revisions(all.clone());
            }
            Ok(None) => return,
            Err(e) => warn!(error = %e, "ControllerRevision watch failed; retrying"),
        }
    }
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

/// The pod webhook for CREATE (injection).
pub const POD_CREATE_WEBHOOK: &str = "mpod.sidecarset-operator.io";
/// The pod webhook for UPDATE (keeps injection annotations truthful), failing open.
pub const POD_UPDATE_WEBHOOK: &str = "mpod-update.sidecarset-operator.io";
/// CEL: the pod as it was carried our injection annotation.
pub const POD_UPDATE_MATCH: &str = "oldObject != null && has(oldObject.metadata.annotations) && 'kruise.io/sidecarset-injected-list' in oldObject.metadata.annotations";

/// Both served versions go to the SidecarSet webhooks as they are (no conversion on the way).
const SIDECARSET_VERSIONS: &[&str] = &[crate::api::VERSION, crate::api::STORAGE_VERSION];

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
    let rule_for =
        |ops: &[&str], group: &str, versions: &[&str], resource: &str| RuleWithOperations {
            api_groups: Some(vec![group.into()]),
            api_versions: Some(versions.iter().map(|v| v.to_string()).collect()),
            operations: Some(ops.iter().map(|o| o.to_string()).collect()),
            resources: Some(vec![resource.into()]),
            scope: None,
        };
    let rule = |group: &str, versions: &[&str], resource: &str| {
        rule_for(&["CREATE", "UPDATE"], group, versions, resource)
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
                name: POD_CREATE_WEBHOOK.into(),
                client_config: client_config("/mutate-pod"),
                rules: Some(vec![rule_for(&["CREATE"], "", &["v1"], "pods")]),
                namespace_selector: Some(ns_selector.clone()),
                failure_policy: Some(args.failure_policy.clone()),
                side_effects: "None".into(),
                admission_review_versions: vec!["v1".into()],
                timeout_seconds: Some(args.webhook_timeout_seconds),
                reinvocation_policy: Some("IfNeeded".into()),
                match_policy: Some("Equivalent".into()),
                ..Default::default()
            },
            // Pod UPDATE only restores injection annotations an update dropped: it is called
            // only for pods that carried them, and never blocks an update (Ignore), so labels,
            // finalizers and unrelated pods never wait on the operator.
            MutatingWebhook {
                name: POD_UPDATE_WEBHOOK.into(),
                client_config: client_config("/mutate-pod"),
                rules: Some(vec![rule_for(&["UPDATE"], "", &["v1"], "pods")]),
                namespace_selector: Some(ns_selector),
                match_conditions: Some(vec![
                    k8s_openapi::api::admissionregistration::v1::MatchCondition {
                        name: "injected-by-a-sidecarset".into(),
                        expression: POD_UPDATE_MATCH.into(),
                    },
                ]),
                failure_policy: Some("Ignore".into()),
                side_effects: "None".into(),
                admission_review_versions: vec!["v1".into()],
                timeout_seconds: Some(args.webhook_timeout_seconds),
                reinvocation_policy: Some("Never".into()),
                match_policy: Some("Equivalent".into()),
                ..Default::default()
            },
            MutatingWebhook {
                name: "msidecarset.sidecarset-operator.io".into(),
                client_config: client_config("/mutate-sidecarset"),
                rules: Some(vec![rule(
                    crate::api::GROUP,
                    SIDECARSET_VERSIONS,
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
                SIDECARSET_VERSIONS,
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
        .patch(name, &pp, &Patch::Apply(&certs::manager::with_types(&m)?))
        .await
        .with_context(|| format!("cannot apply MutatingWebhookConfiguration {name}"))?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(name, &pp, &Patch::Apply(&certs::manager::with_types(&v)?))
        .await
        .with_context(|| format!("cannot apply ValidatingWebhookConfiguration {name}"))?;
    info!(name = %name, url = ?args.webhook_url, "webhook configurations applied");
    Ok(())
}

/// Field manager of the pod webhook's matchConditions. Not [`FIELD_MANAGER`]: an apply of only
/// the conditions under the manager that owns caBundle would take caBundle away.
pub const MATCH_CONDITIONS_FIELD_MANAGER: &str = "sidecarset-operator-match-conditions";

/// Keeps the CREATE pod webhook's matchConditions to the SidecarSets' selectors
/// ([`crate::select::cel`]): written when the index changes (and every 5 minutes), with no
/// condition when the expression would be too long for the API server or it refuses it.
async fn keep_pod_match_conditions(client: Client, state: Arc<State>, config: String) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let mut applied: Option<Option<String>> = None;
    let mut retry = Duration::from_secs(1);
    loop {
        let mut wait = Duration::from_secs(300);
        if state.sidecarsets_synced() {
            let mut want = crate::select::cel::pod_match_expression(&state.index());
            if want.is_none() && applied.as_ref().is_none_or(|a| a.is_some()) {
                warn!(
                    limit = crate::select::cel::MAX_EXPRESSION_BYTES,
                    "the SidecarSets' selectors make a match condition too long: the pod webhook is called for every pod"
                );
            }
            if applied.as_ref() != Some(&want) {
                let mut result = apply_match_condition(&api, &config, want.as_deref()).await;
                if let (Err(e), Some(_)) = (&result, &want)
                    && e.refused
                {
                    warn!(error = %e.message, "the API server refused the pod webhook's match condition: the webhook is called for every pod");
                    want = None;
                    result = apply_match_condition(&api, &config, None).await;
                }
                match result {
                    Ok(()) => {
                        info!(
                            bytes = want.as_ref().map_or(0, String::len),
                            "pod webhook match condition written"
                        );
                        applied = Some(want);
                        retry = Duration::from_secs(1);
                    }
                    Err(e) => {
                        debug!(error = %e.message, "cannot write the pod webhook's match condition yet");
                        wait = retry;
                        retry = (retry * 2).min(Duration::from_secs(30));
                    }
                }
            }
        } else {
            wait = Duration::from_millis(500);
        }
        tokio::select! {
            _ = state.index_changed() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
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
    // Only into an existing entry (an apply would otherwise create an incomplete one).
    let existing = api.get(config).await.map_err(other)?;
    if !existing
        .webhooks
        .iter()
        .flatten()
        .any(|w| w.name == POD_CREATE_WEBHOOK)
    {
        return Err(NotWritten {
            refused: false,
            message: format!("{config} has no webhook {POD_CREATE_WEBHOOK} yet"),
        });
    }
    let mut entry = serde_json::json!({"name": POD_CREATE_WEBHOOK});
    if let Some(e) = expression {
        entry["matchConditions"] =
            serde_json::json!([{"name": "selected-by-a-sidecarset", "expression": e}]);
    }
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

/// Where the API server reaches this operator's `/convert`: its URL (a local process) or its
/// Service.
pub fn conversion_target(args: &RunArgs) -> crate::api::ConversionTarget {
    match &args.webhook_url {
        Some(u) => crate::api::ConversionTarget::Url(u.clone()),
        None => crate::api::ConversionTarget::Service {
            namespace: args.namespace.clone(),
            name: args.webhook_service.clone(),
            port: args.webhook_service_port,
        },
    }
}

/// Files mode: keeps the CRD's conversion settings trusting the CA in `ca_file` (re-read on
/// every pass, so a renewed CA is published), checked every `resync` and whenever the CRD
/// changes.
async fn keep_crd_conversion_from_file(
    client: Client,
    state: Arc<State>,
    target: crate::api::ConversionTarget,
    ca_file: PathBuf,
    resync: Duration,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let wake = Arc::new(tokio::sync::Notify::new());
    let w = wake.clone();
    let c = client.clone();
    tokio::spawn(async move {
        let api: Api<CustomResourceDefinition> = Api::all(c);
        let cfg =
            watcher::Config::default().fields(&format!("metadata.name={}", crate::api::CRD_NAME));
        let stream = watcher(api, cfg).default_backoff();
        futures::pin_mut!(stream);
        while let Ok(Some(_)) | Err(_) = stream.try_next().await {
            w.notify_one();
        }
    });
    let mut reported = String::new();
    loop {
        let problem = match std::fs::read_to_string(&ca_file) {
            Err(e) => format!(
                "cannot read {} ({e}): the CRD's conversion webhook caBundle is not kept; provide the CA there or with --ca-file, or run with --manage-crd-conversion=false when something else (OLM, cert-manager's cainjector) keeps it",
                ca_file.display()
            ),
            Ok(pem) => match certs::crd::ensure(&client, &target, &pem, FIELD_MANAGER).await {
                Ok(certs::crd::Outcome::NoCrd) => format!(
                    "the SidecarSet CRD {} is not installed",
                    crate::api::CRD_NAME
                ),
                Ok(_) => String::new(),
                Err(e) => format!("cannot write the CRD's conversion settings: {e}"),
            },
        };
        state.mark_conversion_ok(problem.is_empty());
        if problem != reported {
            if !problem.is_empty() {
                warn!("{problem}");
            }
            reported = problem;
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(resync) => {}
        }
    }
}

/// Parses `<number><unit>` with unit s, m, h or d (e.g. 90d, 30s).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration: use e.g. 30s, 10m, 12h or 90d"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        _ => {
            return Err(format!(
                "{s:?} is not a duration: use e.g. 30s, 10m, 12h or 90d"
            ));
        }
    };
    if secs == 0 {
        return Err(format!("{s:?} must be longer than zero"));
    }
    Ok(Duration::from_secs(secs))
}

fn cert_settings(args: &RunArgs) -> anyhow::Result<certs::manager::Settings> {
    if !(0.1..1.0).contains(&args.cert_renew_at) {
        bail!(
            "--cert-renew-at {} must be between 0.1 and 1 (a fraction of the lifetime)",
            args.cert_renew_at
        );
    }
    if args.cert_validity >= args.ca_validity {
        bail!("--cert-validity must be shorter than --ca-validity");
    }
    let mut extra_dns = args.cert_extra_dns.clone();
    let mut extra_ips = args.cert_extra_ips.clone();
    if let Some(url) = &args.webhook_url {
        let host = url
            .split("://")
            .nth(1)
            .unwrap_or(url)
            .split('/')
            .next()
            .unwrap_or("");
        let host = host
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(host)
            .trim_matches(['[', ']']);
        match host.parse::<std::net::IpAddr>() {
            Ok(ip) if !extra_ips.contains(&ip) => extra_ips.push(ip),
            Ok(_) => {}
            Err(_) if !host.is_empty() && !extra_dns.iter().any(|d| d == host) => {
                extra_dns.push(host.to_string())
            }
            Err(_) => {}
        }
    }
    Ok(certs::manager::Settings {
        certs: certs::CertConfig {
            service: args.webhook_service.clone(),
            namespace: args.namespace.clone(),
            extra_dns,
            extra_ips,
            ca_validity: args.ca_validity,
            leaf_validity: args.cert_validity,
            renew_at: args.cert_renew_at,
            overlap: args.ca_overlap,
        },
        namespace: args.namespace.clone(),
        secret_name: args.cert_secret_name.clone(),
        webhook_config_name: args.webhook_config_name.clone(),
        field_manager: FIELD_MANAGER.into(),
        resync: args.cert_resync,
        conversion: args.manage_crd_conversion.then(|| conversion_target(args)),
    })
}
