//! The serving certificate: reading certificates and keys (rustls configurations, X.509
//! validity), the certificate being served ([`ServingCert`], which reports readiness through a
//! [`Gate`]), and serving certificate files reloaded when they change ([`files`]). Issuing and
//! rotating certificates is the job of the `certs` module, above this one.

pub mod files;
pub mod follow;

use crate::health::Gate;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use x509_parser::prelude::{FromDer, X509Certificate};

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

/// What a certificate is, read back from PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    pub not_before: i64,
    pub not_after: i64,
    pub is_ca: bool,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    pub public_key: Vec<u8>,
    pub der: Vec<u8>,
}

pub(crate) fn pem_der(pem: &str, what: &str) -> Result<Vec<u8>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .ok_or_else(|| format!("{what}: no CERTIFICATE block"))?
        .map(|c| c.to_vec())
        .map_err(|e| format!("{what}: bad PEM: {e}"))
}

/// Splits a PEM bundle into the DER of each certificate (to compare bundles whatever their text).
pub fn bundle_ders(pem: &[u8]) -> Vec<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem)
        .filter_map(|c| c.ok().map(|c| c.to_vec()))
        .collect()
}

/// Parses the first certificate of a PEM text.
pub fn cert_info(pem: &str, what: &str) -> Result<CertInfo, String> {
    let der = pem_der(pem, what)?;
    let (_, cert) = X509Certificate::from_der(&der)
        .map_err(|e| format!("{what}: not an X.509 certificate: {e}"))?;
    let mut dns_names = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => dns_names.push(d.to_string()),
                x509_parser::extensions::GeneralName::IPAddress(b) => {
                    if let Ok(a) = <[u8; 4]>::try_from(*b) {
                        ips.push(IpAddr::from(a));
                    } else if let Ok(a) = <[u8; 16]>::try_from(*b) {
                        ips.push(IpAddr::from(a));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(CertInfo {
        not_before: cert.validity().not_before.timestamp(),
        not_after: cert.validity().not_after.timestamp(),
        is_ca: cert.is_ca(),
        dns_names,
        ips,
        public_key: cert.public_key().subject_public_key.data.to_vec(),
        der: der.clone(),
    })
}

/// How far in the future a certificate's start may be and still count as valid: the replicas'
/// clocks may differ by this much (their own and the API server's). A certificate that starts
/// later than that is "not yet valid" to this replica; that is a reason to wait and report the
/// clock, never to make a new CA (which would take the trust away from every replica whose clock
/// is right).
pub const CLOCK_SKEW: i64 = 300;

/// RFC 3339 rendering of unix seconds, for messages.
pub fn ts(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| secs.to_string())
}

/// The certificate this process serves: whether one is loaded (a readiness gate) and when it
/// expires. Cheap to clone; every clone is the same state.
#[derive(Clone, Debug)]
pub struct ServingCert {
    loaded: Gate,
    expiry: std::sync::Arc<AtomicI64>,
}

impl ServingCert {
    pub fn new(loaded: Gate) -> Self {
        ServingCert {
            loaded,
            expiry: Default::default(),
        }
    }
    /// A usable certificate expiring at `expires` (unix seconds) is served.
    pub fn loaded(&self, expires: i64) {
        self.expiry.store(expires, Ordering::SeqCst);
        self.loaded.set(true);
    }
    /// No usable certificate is served.
    pub fn unusable(&self) {
        self.loaded.set(false);
    }
    pub fn is_loaded(&self) -> bool {
        self.loaded.is_open()
    }
    /// Expiry of the served certificate (unix seconds), when known.
    pub fn expiry(&self) -> Option<i64> {
        Some(self.expiry.load(Ordering::SeqCst)).filter(|t| *t > 0)
    }
}
