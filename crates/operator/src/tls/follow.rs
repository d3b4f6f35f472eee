//! Files mode with `--cert-secret-watch` (OLM): serve, of the mounted certificate and the one in
//! the Secret it is mounted from, the one the pod webhook's caBundle trusts.
//!
//! OLM switches CAs without an overlap: when it replaces a CSV it may garbage-collect the old
//! CSV's certificate Secret and make a new CA, then writes the new certificate into the Secret
//! and the new CA into the webhook configurations (the caBundle holds the new CA only). The
//! kubelet updates a mounted Secret up to a minute later, so a replica serving its files is
//! untrusted until then (measured by hack/e2e-olm.sh: `x509: certificate signed by unknown
//! authority`, and with `failurePolicy: Ignore` pods created without their sidecars). Following
//! the Secret through the API, and serving the certificate the caBundle trusts (not merely the
//! newest: the Secret is written before the configurations), closes that gap to the watches'
//! latency.

use super::{ServingCert, ts};
use crate::names::{POD_CREATE_WEBHOOK, WebhookConfigs};
use axum_server::tls_rustls::RustlsConfig;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tracing::{info, warn};
use x509_parser::prelude::{FromDer, X509Certificate};

/// A certificate and key that could be served, and where they come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub source: String,
    pub cert_pem: String,
    pub key_pem: Vec<u8>,
}

/// True when a CA of `bundle` (PEM) signed the first certificate of `cert_pem`.
pub fn trusted_by(cert_pem: &str, bundle: &[u8]) -> bool {
    let Ok(der) = super::pem_der(cert_pem, "tls.crt") else {
        return false;
    };
    let Ok((_, cert)) = X509Certificate::from_der(&der) else {
        return false;
    };
    super::bundle_ders(bundle).iter().any(|ca| {
        X509Certificate::from_der(ca)
            .is_ok_and(|(_, ca)| cert.verify_signature(Some(ca.public_key())).is_ok())
    })
}

/// Which candidate to serve: the first, in the order given, that is valid at `now` and trusted
/// by every caBundle in `bundles`. None when none is (then what is served stays served), or when
/// there is no caBundle to go by (then the caller serves its files as before).
pub fn choose<'a>(
    candidates: &'a [Candidate],
    bundles: &[Vec<u8>],
    now: i64,
) -> Option<&'a Candidate> {
    if bundles.is_empty() {
        return None;
    }
    candidates.iter().find(|c| {
        super::cert_info(&c.cert_pem, &c.source)
            .is_ok_and(|i| i.not_before <= now + super::CLOCK_SKEW && now < i.not_after)
            && bundles.iter().all(|b| trusted_by(&c.cert_pem, b))
    })
}

/// The caBundles of the pod CREATE webhook in the configurations `target` names.
pub fn pod_webhook_bundles(
    target: &WebhookConfigs,
    configs: &[Arc<MutatingWebhookConfiguration>],
) -> Vec<Vec<u8>> {
    configs
        .iter()
        .filter(|c| match target {
            WebhookConfigs::Named(n) => c.metadata.name.as_deref() == Some(n.as_str()),
            WebhookConfigs::Selected(_) => true,
        })
        .flat_map(|c| c.webhooks.iter().flatten())
        .filter(|w| w.name == POD_CREATE_WEBHOOK)
        .filter_map(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.clone()))
        .collect()
}

fn from_secret(s: &Secret) -> Option<Candidate> {
    let data = s.data.as_ref()?;
    let cert = String::from_utf8(data.get("tls.crt")?.0.clone()).ok()?;
    let key = data.get("tls.key")?.0.clone();
    Some(Candidate {
        source: format!("Secret {}", s.metadata.name.as_deref().unwrap_or("?")),
        cert_pem: cert,
        key_pem: key,
    })
}

fn from_files(dir: &std::path::Path) -> Option<Candidate> {
    Some(Candidate {
        source: format!("files in {}", dir.display()),
        cert_pem: std::fs::read_to_string(dir.join("tls.crt")).ok()?,
        key_pem: std::fs::read(dir.join("tls.key")).ok()?,
    })
}

/// Settings of [`follow`].
pub struct Follow {
    pub namespace: String,
    pub secret: String,
    pub configs: WebhookConfigs,
    pub dir: PathBuf,
}

/// Serves the candidate [`choose`] picks whenever the Secret, the webhook configurations or the
/// files change (files are looked at every 2 s); with no caBundle to go by (the configurations
/// cannot be read), it serves the files as [`super::files::watch`] does. `served` is the
/// certificate loaded at start.
pub async fn follow(
    watches: Client,
    f: Follow,
    config: RustlsConfig,
    cert: ServingCert,
    served: String,
) {
    let wake = Arc::new(Notify::new());
    let (secrets, secrets_w) = reflector::store::<Secret>();
    let (configs, configs_w) = reflector::store::<MutatingWebhookConfiguration>();
    {
        let api: Api<Secret> = Api::namespaced(watches.clone(), &f.namespace);
        let cfg = watcher::Config::default().fields(&format!("metadata.name={}", f.secret));
        let wake = wake.clone();
        tokio::spawn(async move {
            let s = reflector(secrets_w, watcher(api, cfg))
                .default_backoff()
                .touched_objects();
            futures::pin_mut!(s);
            while let Some(r) = s.next().await {
                if r.is_ok() {
                    wake.notify_one();
                }
            }
        });
    }
    {
        let api: Api<MutatingWebhookConfiguration> = Api::all(watches.clone());
        let cfg = match &f.configs {
            WebhookConfigs::Named(n) => {
                watcher::Config::default().fields(&format!("metadata.name={n}"))
            }
            WebhookConfigs::Selected(s) => watcher::Config::default().labels(s),
        };
        let wake = wake.clone();
        tokio::spawn(async move {
            let s = reflector(configs_w, watcher(api, cfg))
                .default_backoff()
                .touched_objects();
            futures::pin_mut!(s);
            while let Ok(Some(_)) | Err(_) = s.try_next().await {
                wake.notify_one();
            }
        });
    }
    let mut served = served;
    let mut untrusted_reported = false;
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
        let mut candidates: Vec<Candidate> = secrets
            .state()
            .iter()
            .filter_map(|s| from_secret(s))
            .collect();
        let files = from_files(&f.dir);
        candidates.extend(files.clone());
        let bundles = pod_webhook_bundles(&f.configs, &configs.state());
        let now = jiff::Timestamp::now().as_second();
        let pick = match choose(&candidates, &bundles, now) {
            Some(c) => {
                untrusted_reported = false;
                Some(c.clone())
            }
            None if bundles.is_empty() => files,
            None => {
                if !untrusted_reported && !bundles.iter().all(|b| trusted_by(&served, b)) {
                    warn!(secret = %f.secret, "the pod webhook's caBundle trusts neither the mounted certificate nor the Secret's: keeping the one served");
                    untrusted_reported = true;
                }
                None
            }
        };
        let Some(pick) = pick else { continue };
        if pick.cert_pem == served {
            if let Ok(i) = super::cert_info(&served, "tls.crt") {
                cert.loaded(i.not_after);
            }
            continue;
        }
        match super::server_config_from_pem(pick.cert_pem.as_bytes(), &pick.key_pem) {
            Ok(cfg) => {
                config.reload_from_config(cfg);
                let expires =
                    super::cert_info(&pick.cert_pem, "tls.crt").map_or(0, |i| i.not_after);
                cert.loaded(expires);
                crate::metrics::metrics().cert_expiry.set(expires);
                info!(source = %pick.source, expires = %ts(expires), "serving certificate reloaded: the pod webhook's caBundle trusts it");
                served = pick.cert_pem;
            }
            Err(e) => warn!(source = %pick.source, error = %e, "serving certificate not usable"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

    fn ca() -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        (p.self_signed(&key).unwrap(), key)
    }

    fn leaf(source: &str, ca: &(rcgen::Certificate, KeyPair)) -> Candidate {
        let key = KeyPair::generate().unwrap();
        let p = CertificateParams::new(vec!["svc.ns.svc".to_string()]).unwrap();
        let issuer = rcgen::Issuer::from_ca_cert_der(ca.0.der(), &ca.1).unwrap();
        let c = p.signed_by(&key, &issuer).unwrap();
        Candidate {
            source: source.into(),
            cert_pem: c.pem(),
            key_pem: key.serialize_pem().into_bytes(),
        }
    }

    /// OLM's CA switch: the Secret already holds the new CA's certificate while the caBundle
    /// still has the old CA, then the caBundle switches while the mounted files are still old.
    #[test]
    fn the_certificate_the_cabundle_trusts_is_served_whichever_source_has_it() {
        let (old, new) = (ca(), ca());
        let now = jiff::Timestamp::now().as_second();
        let files = leaf("files", &old);
        let secret = leaf("secret", &new);
        let candidates = vec![secret.clone(), files.clone()];
        let old_bundle = vec![old.0.pem().into_bytes()];
        let new_bundle = vec![new.0.pem().into_bytes()];
        // Secret written, caBundle not yet: keep the old certificate (the files').
        assert_eq!(choose(&candidates, &old_bundle, now), Some(&files));
        // caBundle switched, kubelet not yet: the Secret's, before the files catch up.
        assert_eq!(choose(&candidates, &new_bundle, now), Some(&secret));
        // Both CAs published: the first candidate (the Secret, the newest).
        let both = vec![format!("{}{}", old.0.pem(), new.0.pem()).into_bytes()];
        assert_eq!(choose(&candidates, &both, now), Some(&secret));
        // Two configurations with different CAs (a CSV being replaced): none fits both.
        let two = vec![old_bundle[0].clone(), new_bundle[0].clone()];
        assert_eq!(choose(&candidates, &two, now), None);
        // No caBundle to go by: no choice here (the files are served).
        assert_eq!(choose(&candidates, &[], now), None);
        // A certificate outside its validity is never chosen (rcgen's start: 1975).
        assert_eq!(choose(&candidates, &new_bundle, 0), None);
        assert!(trusted_by(&files.cert_pem, &old_bundle[0]));
        assert!(!trusted_by(&files.cert_pem, &new_bundle[0]));
        assert!(!trusted_by("not a certificate", &old_bundle[0]));
    }

    #[test]
    fn the_pod_webhooks_cabundles_are_read_from_the_configurations_named() {
        let cfg = |name: &str, hook: &str, bundle: &str| {
            Arc::new(
                serde_json::from_value::<MutatingWebhookConfiguration>(serde_json::json!({
                    "metadata": {"name": name},
                    "webhooks": [{"name": hook, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                                  "clientConfig": {"caBundle": bundle}}]
                }))
                .unwrap(),
            )
        };
        let configs = vec![
            cfg("mpod-abc", POD_CREATE_WEBHOOK, "QQ=="),
            cfg("other", "msidecarset.sidecarset-operator.io", "Qg=="),
        ];
        let sel = WebhookConfigs::Selected("x=y".into());
        assert_eq!(pod_webhook_bundles(&sel, &configs), vec![b"A".to_vec()]);
        let named = WebhookConfigs::Named("nope".into());
        assert!(pod_webhook_bundles(&named, &configs).is_empty());
    }
}
