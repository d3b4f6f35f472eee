//! The API server's version, read once at start from discovery (`/version`): whether the
//! cluster runs native sidecars, for SidecarSets in native sidecar mode
//! ([`sidecarset_core::api::ANNOTATION_NATIVE_SIDECARS`]).

use super::ClusterView;
use sidecarset_core::api::version_runs_native_sidecars;
use std::time::Duration;
use tracing::{info, warn};

/// Starts [`learn`].
pub fn spawn(client: &kube::Client, cluster: &std::sync::Arc<ClusterView>) {
    tokio::spawn(learn(client.clone(), cluster.clone()));
}

/// Asks the API server for its version until it answers, and records in `cluster` whether it
/// runs native sidecars. A version that cannot be read (a distribution's own numbering) leaves
/// them allowed: the API server then refuses what it cannot run.
pub async fn learn(client: kube::Client, cluster: std::sync::Arc<ClusterView>) {
    let mut wait = Duration::from_millis(200);
    let info = loop {
        match client.apiserver_version().await {
            Ok(info) => break info,
            Err(e) => {
                warn!(error = %e, "cannot read the API server's version yet");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    };
    match version_runs_native_sidecars(&info.major, &info.minor) {
        Some(runs) => {
            cluster.set_native_sidecars(runs);
            let version = &info.git_version;
            if runs {
                info!(%version, "API server version read: native sidecars can be injected");
            } else {
                warn!(%version, "API server version read: it cannot run native sidecars (1.29 or later is needed); SidecarSets with sidecarset-operator.io/native-sidecars: \"true\" are refused, and pods are created without their sidecars (SidecarSetNativeSidecarsUnsupported Events)");
            }
        }
        None => warn!(major = %info.major, minor = %info.minor,
                      "the API server's version cannot be read as numbers: native sidecars are assumed to run"),
    }
}
