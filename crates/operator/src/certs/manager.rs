//! The shell of the self-managed certificates: keeps the Secret, the served certificate and the
//! `caBundle` of the webhook configurations in step. Every replica runs it; Secret writes carry
//! the resourceVersion, so among replicas exactly one write of a step wins and the others adopt
//! it. Triggered by watches on the Secret and the webhook configurations, and by a resync timer.

use super::{Action, CertConfig, Material, act, check, decide, ts};
use crate::health::Gate;
use crate::tls::{self as server, ServingCert};
use axum_server::tls_rustls::RustlsConfig;
use backon::{BackoffBuilder, ExponentialBuilder};
use futures::TryStreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Client, Resource};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

/// Settings of the certificate manager.
#[derive(Clone, Debug)]
pub struct ManagerSettings {
    pub certs: CertConfig,
    pub namespace: String,
    pub secret_name: String,
    /// Name of the Mutating and Validating webhook configurations whose caBundle is kept.
    pub webhook_config_name: String,
    pub field_manager: String,
    pub resync: Duration,
    /// Where the SidecarSet CRD's conversion webhook points; its caBundle is kept with the
    /// webhook configurations'. None: the CRD's conversion settings are left alone (OLM).
    pub conversion: Option<sidecarset_core::api::ConversionTarget>,
}

/// Full webhook configurations to apply (when the operator owns them, e.g. URL mode), else only
/// the caBundle of the existing ones is written.
pub type OwnedConfigs = Option<(MutatingWebhookConfiguration, ValidatingWebhookConfiguration)>;

/// What the manager reports: the certificate served, whether the webhook configurations trust
/// its CA, and (when it keeps them) whether the CRD's conversion settings point here with it.
#[derive(Clone, Debug)]
pub struct Reports {
    pub cert: ServingCert,
    pub ca_trusted: Gate,
    pub conversion: Option<Gate>,
}

/// This replica's clock, in Unix seconds (injectable: tests run a replica whose clock is off).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

pub struct Manager {
    /// For reads and writes (every request bounded in time).
    client: Client,
    /// For the watches.
    watches: Client,
    clock: Clock,
    settings: ManagerSettings,
    owned: OwnedConfigs,
    reports: Reports,
    /// The material in use: served, and used to recreate a deleted Secret as it was.
    current: Mutex<Option<Material>>,
    tls: Mutex<Option<RustlsConfig>>,
    wake: Notify,
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// The first retry of a failed reconcile comes this long after it.
const FIRST_RETRY: Duration = Duration::from_millis(200);
/// Retries of a failed reconcile are at most this far apart.
const LAST_RETRY: Duration = Duration::from_secs(10);

/// The waits before the retries of a failed reconcile: `first`, doubling up to [`LAST_RETRY`],
/// without end.
fn retry_delays(first: Duration) -> impl Iterator<Item = Duration> {
    ExponentialBuilder::new()
        .with_min_delay(first)
        .with_factor(2.0)
        .with_max_delay(LAST_RETRY)
        .without_max_times()
        .build()
}

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(now)
}

impl Manager {
    /// A manager using one client for everything and the system clock (tests).
    pub fn new(
        client: Client,
        settings: ManagerSettings,
        owned: OwnedConfigs,
        reports: Reports,
    ) -> Arc<Self> {
        Self::with(
            client.clone(),
            client,
            system_clock(),
            settings,
            owned,
            reports,
        )
    }

    /// A manager whose reads and writes go through `calls`, its watches through `watches`, and
    /// that reads the time from `clock`.
    pub fn with(
        calls: Client,
        watches: Client,
        clock: Clock,
        settings: ManagerSettings,
        owned: OwnedConfigs,
        reports: Reports,
    ) -> Arc<Self> {
        Arc::new(Manager {
            client: calls,
            watches,
            clock,
            settings,
            owned,
            reports,
            current: Mutex::new(None),
            tls: Mutex::new(None),
            wake: Notify::new(),
        })
    }

    fn mark_conversion(&self, ok: bool) {
        if let Some(g) = &self.reports.conversion {
            g.set(ok);
        }
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.settings.namespace)
    }

    /// Reconciles until a certificate is in use, retrying with backoff, and returns the TLS
    /// config to serve (hot-swapped in place afterwards).
    pub async fn initial(self: &Arc<Self>) -> RustlsConfig {
        let mut delays = retry_delays(FIRST_RETRY);
        loop {
            let delay = delays.next().unwrap_or(LAST_RETRY);
            match self.reconcile().await {
                Ok(()) => {
                    if let Some(cfg) = self.tls.lock().ok().and_then(|g| g.clone()) {
                        return cfg;
                    }
                }
                Err(e) => warn!(error = %e, retry_in = ?delay, "certificates not ready yet"),
            }
            tokio::time::sleep(delay).await;
        }
    }

    /// Runs forever: watches, resync timer, reconcile with backoff on errors.
    pub async fn run(self: Arc<Self>) {
        self.clone().spawn_watches();
        // Running, a failed reconcile is retried first after twice the first retry of
        // `initial`, as it always was.
        let mut delays = retry_delays(FIRST_RETRY * 2);
        loop {
            let wait = match self.reconcile().await {
                Ok(()) => {
                    delays = retry_delays(FIRST_RETRY * 2);
                    self.settings.resync
                }
                Err(e) => {
                    let delay = delays.next().unwrap_or(LAST_RETRY);
                    warn!(error = %e, retry_in = ?delay, "certificate reconcile failed");
                    delay
                }
            };
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    fn spawn_watches(self: Arc<Self>) {
        let by_name = |n: &str| watcher::Config::default().fields(&format!("metadata.name={n}"));
        let s = self.clone();
        let secret_cfg = by_name(&self.settings.secret_name);
        tokio::spawn(async move {
            let secrets: Api<Secret> = Api::namespaced(s.watches.clone(), &s.settings.namespace);
            let stream = watcher::watcher(secrets, secret_cfg).default_backoff();
            s.trigger_on(stream).await
        });
        let s = self.clone();
        let cfg = by_name(&self.settings.webhook_config_name);
        tokio::spawn(async move {
            let api: Api<MutatingWebhookConfiguration> = Api::all(s.watches.clone());
            s.trigger_on(watcher::watcher(api, cfg).default_backoff())
                .await
        });
        if self.settings.conversion.is_some() {
            let s = self.clone();
            let cfg = by_name(sidecarset_core::api::CRD_NAME);
            tokio::spawn(async move {
                let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
                    Api::all(s.watches.clone());
                s.trigger_on(watcher::watcher(api, cfg).default_backoff())
                    .await
            });
        }
        let s = self.clone();
        let cfg = by_name(&self.settings.webhook_config_name);
        tokio::spawn(async move {
            let api: Api<ValidatingWebhookConfiguration> = Api::all(s.watches.clone());
            s.trigger_on(watcher::watcher(api, cfg).default_backoff())
                .await
        });
    }

    async fn trigger_on<K>(
        &self,
        stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    ) {
        futures::pin_mut!(stream);
        loop {
            match stream.try_next().await {
                Ok(Some(_)) => self.wake.notify_one(),
                Ok(None) => return,
                Err(e) => debug!(error = %e, "certificate watch interrupted; retrying"),
            }
        }
    }

    /// One pass: make the Secret right, serve its leaf, make the caBundles trust it.
    pub async fn reconcile(&self) -> anyhow::Result<()> {
        let cfg = &self.settings.certs;
        let t = (self.clock)();
        let secret = self.secrets().get_opt(&self.settings.secret_name).await?;
        let stored = match &secret {
            None => None,
            Some(s) => match to_material(s) {
                Ok(m) => Some(m),
                Err(e) => {
                    warn!(secret = %self.key(), problem = %e, "the certificate Secret is unusable; replacing it");
                    None
                }
            },
        };
        let in_memory = self.current.lock().ok().and_then(|g| g.clone());
        let applied = match &stored {
            Some(m) => self.bundle_applied(&m.ca_bundle()).await?,
            None => false,
        };

        let material = match (&secret, stored) {
            // Deleted while we hold valid material: put it back as it was, nothing changes for
            // the API server or the other replicas.
            (None, _) if in_memory.as_ref().is_some_and(|m| check(m, cfg, t).is_ok()) => {
                let m = in_memory.clone().unwrap_or_else(|| unreachable!());
                info!(secret = %self.key(), "the certificate Secret was deleted; recreating it from the certificates in use");
                self.write(None, &m).await?
            }
            (existing, stored) => {
                let action = decide(stored.as_ref(), cfg, t, applied);
                if let Action::Wait(why) = &action {
                    warn!(secret = %self.key(), reason = %why, "the certificate Secret is left as it is");
                }
                if matches!(action, Action::Keep | Action::Wait(_)) {
                    stored.unwrap_or_else(|| unreachable!("decide keeps only existing material"))
                } else {
                    let mut next =
                        act(&action, stored.as_ref(), cfg, t).map_err(anyhow::Error::msg)?;
                    if matches!(action, Action::Generate(_)) {
                        // Replicas still serve a leaf of the CA trusted now: keep trusting it
                        // next to the new one for an overlap.
                        next.prev_ca_cert = self.cas_to_keep(secret.as_ref(), &next, t).await?;
                    }
                    match self.write(existing.as_ref(), &next).await {
                        Ok(m) => {
                            self.log_action(&action, &m);
                            m
                        }
                        Err(e) if is_conflict(&e) => {
                            debug!(
                                "another replica wrote the certificate Secret first; adopting it"
                            );
                            self.wake.notify_one();
                            return Ok(());
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        };

        // Every caBundle trusts a new CA before any replica serves a certificate it signed:
        // the bundle first, then the certificate. One of another CA that is still valid stays
        // served until the bundles trust the new one (a fresh install has nothing else).
        let published = self.publish_bundle(&material).await;
        let trusted = matches!(published, Ok(true));
        if trusted || !self.serving_another_valid_ca(&material, t) {
            self.serve(&material)?;
        } else {
            warn!(secret = %self.key(), "not serving the new CA's certificate yet: not every caBundle trusts that CA; retrying");
            self.wake.notify_one();
        }
        published.map(|_| ())
    }

    /// True while the certificate served is of another CA than `next`'s and still valid at
    /// `now`.
    fn serving_another_valid_ca(&self, next: &Material, now: i64) -> bool {
        let Some(current) = self.current.lock().ok().and_then(|g| g.clone()) else {
            return false;
        };
        current.ca_cert != next.ca_cert
            && super::cert_info(&current.tls_cert, "tls.crt").is_ok_and(|i| now < i.not_after)
    }

    fn key(&self) -> String {
        format!("{}/{}", self.settings.namespace, self.settings.secret_name)
    }

    fn log_action(&self, action: &Action, m: &Material) {
        let expiry = super::cert_info(&m.tls_cert, "tls.crt")
            .map(|i| ts(i.not_after))
            .unwrap_or_default();
        let secret = self.key();
        use crate::metrics::cert_change;
        let kind = match action {
            Action::Keep | Action::Wait(_) => cert_change::KEEP,
            Action::Generate(_) => cert_change::GENERATED,
            Action::RenewLeaf(_) => cert_change::LEAF_RENEWED,
            Action::StartCaRotation => cert_change::CA_ROTATION_STARTED,
            Action::PromoteCa => cert_change::CA_PROMOTED,
            Action::FinishCaRotation => cert_change::CA_ROTATION_FINISHED,
        };
        crate::metrics::metrics()
            .cert_changes
            .get_or_create(&crate::metrics::reason(kind))
            .inc();
        match action {
            Action::Keep | Action::Wait(_) => {}
            Action::Generate(why) => {
                info!(%secret, reason = %why, leaf_expires = %expiry, "generated a new CA and serving certificate")
            }
            Action::RenewLeaf(why) => {
                info!(%secret, reason = %why, leaf_expires = %expiry, "renewed the serving certificate")
            }
            Action::StartCaRotation => {
                info!(%secret, "CA rotation step 1/3: the next CA is published next to the current one")
            }
            Action::PromoteCa => {
                info!(%secret, leaf_expires = %expiry, "CA rotation step 2/3: serving a certificate of the new CA; the old CA stays trusted")
            }
            Action::FinishCaRotation => {
                info!(%secret, "CA rotation step 3/3: the old CA is no longer trusted")
            }
        }
    }

    /// Hot-swaps the served certificate when it changed.
    fn serve(&self, m: &Material) -> anyhow::Result<()> {
        let same = self
            .current
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(|c| c.tls_cert == m.tls_cert))
            .unwrap_or(false);
        if let Ok(mut g) = self.current.lock() {
            *g = Some(m.clone());
        }
        let expires = super::cert_info(&m.tls_cert, "tls.crt")
            .map(|i| i.not_after)
            .unwrap_or(0);
        crate::metrics::metrics().cert_expiry.set(expires);
        if same {
            self.reports.cert.loaded(expires);
            return Ok(());
        }
        let cfg = server::server_config_from_pem(m.tls_cert.as_bytes(), m.tls_key.as_bytes())?;
        let mut tls = self
            .tls
            .lock()
            .map_err(|_| anyhow::anyhow!("TLS state poisoned"))?;
        match tls.as_ref() {
            Some(existing) => existing.reload_from_config(cfg),
            None => *tls = Some(RustlsConfig::from_config(cfg)),
        }
        self.reports.cert.loaded(expires);
        info!(expires = %ts(expires), "serving certificate loaded");
        Ok(())
    }
}

/// An object as JSON with its apiVersion and kind (server-side apply needs them).
pub fn with_types<K: Resource<DynamicType = ()> + serde::Serialize>(
    obj: &K,
) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(obj)?;
    v["apiVersion"] = K::api_version(&()).into();
    v["kind"] = K::kind(&()).into();
    Ok(v)
}

mod ca_bundle;
mod secret;

use secret::{is_conflict, to_material};

#[cfg(test)]
mod against_a_mock_api_server;
