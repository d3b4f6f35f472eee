//! Serving the webhook router over TLS (rustls), with the certificate reloaded in place.

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Installs the process-wide rustls crypto provider (ring, the one kube uses). Safe to call more
/// than once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What is wrong with a certificate and key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the certificate PEM holds no certificate: {0}")]
    NoCert(String),
    #[error("the key PEM holds no private key: {0}")]
    NoKey(String),
    #[error("the certificate and key cannot serve TLS (is the key the certificate's?): {0}")]
    Config(rustls::Error),
}

/// Builds a rustls server config (HTTP/1.1 and HTTP/2) from PEM; checks that the key belongs to
/// the certificate.
pub fn server_config_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<Arc<ServerConfig>, TlsError> {
    install_crypto_provider();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::NoCert(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::NoCert("no CERTIFICATE block".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::NoKey(e.to_string()))?;
    let mut cfg = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(TlsError::Config)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Reads `tls.crt` and `tls.key` from a directory.
pub fn server_config_from_dir(dir: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|source| TlsError::Read { path, source })
    };
    server_config_from_pem(&read("tls.crt")?, &read("tls.key")?)
}
