//! Files mode: the CRD's conversion settings kept trusting the CA of a file.

use crate::certs;
use crate::names::FIELD_MANAGER;
use futures::TryStreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// Files mode: keeps the CRD's conversion settings trusting the CA in `ca_file` (re-read on
/// every pass, so a renewed CA is published), checked every `resync` and whenever the CRD
/// changes.
pub async fn keep_crd_conversion_from_file(
    client: Client,
    watches: Client,
    target: sidecarset_core::api::ConversionTarget,
    ca_file: PathBuf,
    resync: Duration,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let wake = Arc::new(tokio::sync::Notify::new());
    let w = wake.clone();
    let c = watches;
    tokio::spawn(async move {
        let api: Api<CustomResourceDefinition> = Api::all(c);
        let cfg = watcher::Config::default()
            .fields(&format!("metadata.name={}", sidecarset_core::api::CRD_NAME));
        let stream = watcher::watcher(api, cfg).default_backoff();
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
                Ok(certs::crd::ConversionPass::NoCrd) => format!(
                    "the SidecarSet CRD {} is not installed",
                    sidecarset_core::api::CRD_NAME
                ),
                Ok(_) => String::new(),
                Err(e) => format!("cannot write the CRD's conversion settings: {e}"),
            },
        };
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
