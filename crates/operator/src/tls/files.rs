//! Files mode: the serving certificate from `tls.crt`/`tls.key` in a directory (cert-manager,
//! a mounted Secret), reloaded when the files change.

use super::{ServingCert, ts};
use axum_server::tls_rustls::RustlsConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tracing::{error, info};

/// Files mode: serve `tls.crt`/`tls.key` from a directory, reload when they change, report not
/// ready while they are missing, invalid or outside their validity. Patches nothing.
pub async fn watch(dir: PathBuf, config: RustlsConfig, cert: ServingCert) {
    let stamp = |d: &std::path::Path| {
        let m = |n: &str| std::fs::metadata(d.join(n)).and_then(|m| m.modified()).ok();
        (m("tls.crt"), m("tls.key"))
    };
    let mut last = stamp(&dir);
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now_stamp = stamp(&dir);
        let changed = now_stamp != last;
        last = now_stamp;
        match load(&dir) {
            Ok((cfg, expires)) => {
                if changed {
                    config.reload_from_config(cfg);
                    info!(dir = %dir.display(), expires = %ts(expires), "serving certificate reloaded from files");
                }
                cert.loaded(expires);
                crate::metrics::metrics().cert_expiry.set(expires);
            }
            Err(e) => {
                if changed || cert.is_loaded() {
                    error!(dir = %dir.display(), error = %e, "serving certificate files are not usable; not ready");
                }
                cert.unusable();
            }
        }
    }
}

/// Loads and checks the files: usable pair, currently valid. Returns the config and expiry.
pub fn load(dir: &Path) -> anyhow::Result<(Arc<rustls::ServerConfig>, i64)> {
    let cert = std::fs::read_to_string(dir.join("tls.crt"))
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("tls.crt").display()))?;
    let key = std::fs::read(dir.join("tls.key"))
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join("tls.key").display()))?;
    let info = super::cert_info(&cert, "tls.crt").map_err(anyhow::Error::msg)?;
    let t = jiff::Timestamp::now().as_second();
    if t < info.not_before || t >= info.not_after {
        anyhow::bail!(
            "tls.crt is not valid now (valid {} to {})",
            ts(info.not_before),
            ts(info.not_after)
        );
    }
    Ok((
        super::server_config_from_pem(cert.as_bytes(), &key)?,
        info.not_after,
    ))
}
