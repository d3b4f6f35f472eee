//! TLS to the OTLP collector from PEM files that are read again when they change: a CA bundle
//! (`OTEL_EXPORTER_OTLP_CERTIFICATE`) and a client certificate and key for mutual TLS. Secrets
//! mounted from cert-manager are renewed in place; every new connection to the collector uses the
//! files as they are then, without a restart. A renewal that cannot be read (half written, wrong
//! content) keeps the last good material and is logged once.

use super::otel::{TlsFiles, load_tls};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// What identifies a file's content without reading it: inode, size and modification time (the
/// kubelet swaps a Secret volume's files through a symlink, so all three change).
type Stamp = Vec<Option<(u64, u64, SystemTime)>>;

fn stamp(files: &TlsFiles) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let paths = files
        .ca
        .iter()
        .chain(files.client.iter().flat_map(|(c, k)| [c, k]));
    paths
        .map(|f| {
            std::fs::metadata(&f.path).ok().map(|m| {
                (
                    m.ino(),
                    m.len(),
                    m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                )
            })
        })
        .collect()
}

struct Loaded {
    stamp: Stamp,
    verifier: Arc<WebPkiServerVerifier>,
    key: Option<Arc<CertifiedKey>>,
    /// Client certificate chain as loaded, for tests and logs.
    client_chain: Vec<CertificateDer<'static>>,
}

/// The TLS material, reloaded on change; see the module documentation.
pub struct ReloadingTls {
    files: TlsFiles,
    provider: Arc<rustls::crypto::CryptoProvider>,
    state: Mutex<Loaded>,
    /// The stamp of the last renewal that could not be loaded, so that it is logged once.
    failed: Mutex<Option<Stamp>>,
}

impl std::fmt::Debug for ReloadingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingTls")
            .field("files", &self.files)
            .finish()
    }
}

fn load(
    files: &TlsFiles,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Loaded, String> {
    // Stamp before reading: a change while reading is then seen on the next handshake.
    let stamp = stamp(files);
    let material = load_tls(files)?;
    let mut roots = rustls::RootCertStore::empty();
    match (&material.ca, &files.ca) {
        (Some(pem), Some(f)) => {
            for c in CertificateDer::pem_slice_iter(pem) {
                let c = c.map_err(|e| format!("{}={}: {e}", f.var, f.path))?;
                roots.add(c).map_err(|e| {
                    format!(
                        "{}={}: a certificate of the bundle cannot be a trust anchor: {e}",
                        f.var, f.path
                    )
                })?;
            }
        }
        _ => {
            // No CA file (only a client certificate): the system's trust roots.
            let native = rustls_native_certs::load_native_certs();
            for c in native.certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(
                    "no system trust roots found to verify the collector: set OTEL_EXPORTER_OTLP_CERTIFICATE to its CA"
                        .into(),
                );
            }
        }
    }
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("cannot verify the collector with the CA bundle: {e}"))?;
    let (key, client_chain) = match (&material.client, &files.client) {
        (Some((cert_pem, key_pem)), Some((cert_file, key_file))) => {
            let chain = CertificateDer::pem_slice_iter(cert_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{}={}: {e}", cert_file.var, cert_file.path))?;
            let der = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| format!("{}={}: {e}", key_file.var, key_file.path))?;
            let signing = provider.key_provider.load_private_key(der).map_err(|e| {
                format!(
                    "{}={}: the key cannot sign: {e}",
                    key_file.var, key_file.path
                )
            })?;
            let certified = CertifiedKey::new(chain.clone(), signing);
            certified.keys_match().map_err(|e| {
                format!(
                    "{}={} does not belong to {}={}: {e}",
                    key_file.var, key_file.path, cert_file.var, cert_file.path
                )
            })?;
            (Some(Arc::new(certified)), chain)
        }
        _ => (None, Vec::new()),
    };
    Ok(Loaded {
        stamp,
        verifier,
        key,
        client_chain,
    })
}

impl ReloadingTls {
    /// Reads the files once; an error names the variable and the file.
    pub fn new(files: TlsFiles) -> Result<Arc<ReloadingTls>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let state = load(&files, &provider)?;
        Ok(Arc::new(ReloadingTls {
            files,
            provider,
            state: Mutex::new(state),
            failed: Mutex::new(None),
        }))
    }

    /// The verifier and client key for a new connection, reloading the files first when they
    /// changed.
    fn current(&self) -> (Arc<WebPkiServerVerifier>, Option<Arc<CertifiedKey>>) {
        let now = stamp(&self.files);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.stamp != now {
            match load(&self.files, &self.provider) {
                Ok(fresh) => {
                    tracing::info!(files = ?self.files, "reloaded the OTLP TLS files");
                    *state = fresh;
                }
                Err(e) => {
                    let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
                    if failed.as_ref() != Some(&now) {
                        tracing::warn!(
                            "the OTLP TLS files changed but cannot be used, keeping the previous ones: {e}"
                        );
                        *failed = Some(now);
                    }
                }
            }
        }
        (state.verifier.clone(), state.key.clone())
    }

    /// The verifier in use, without looking at the files (the handshake's signature checks come
    /// after its certificate check, which reloaded them).
    fn verifier(&self) -> Arc<WebPkiServerVerifier> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .verifier
            .clone()
    }

    /// The client certificate chain in use (after reloading when the files changed).
    pub fn client_chain(&self) -> Vec<CertificateDer<'static>> {
        let _ = self.current();
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .client_chain
            .clone()
    }

    /// A rustls client configuration that uses the files as they are at each handshake.
    pub fn client_config(self: &Arc<Self>, alpn: &[&[u8]]) -> Result<rustls::ClientConfig, String> {
        let mut config = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS to the collector: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Verifier(self.clone())))
            .with_client_cert_resolver(Arc::new(Resolver(self.clone())));
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }
}

/// Verifies the collector with the CA of the files as they are now.
#[derive(Debug)]
struct Verifier(Arc<ReloadingTls>);

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0.current().0.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verifier().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verifier().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0
            .provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Presents the client certificate of the files as they are now.
#[derive(Debug)]
struct Resolver(Arc<ReloadingTls>);

impl ResolvesClientCert for Resolver {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        let key = self.0.current().1?;
        key.key.choose_scheme(sigschemes).is_some().then_some(key)
    }

    fn has_certs(&self) -> bool {
        self.0.files.client.is_some()
    }
}

/// A gRPC channel to `url` (https) whose connections use `tls`. tonic's own TLS settings are
/// fixed when the channel is made, so the channel is given a plain-text URL and this connector
/// does the TLS handshake itself, with the files as they are at that moment.
pub fn grpc_channel(
    url: &str,
    tls: &Arc<ReloadingTls>,
    timeout: std::time::Duration,
) -> Result<tonic::transport::Channel, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("OTLP endpoint {url:?} is not a URL: {e}"))?;
    let host = uri
        .host()
        .ok_or_else(|| format!("OTLP endpoint {url:?} has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let server_name = ServerName::try_from(host.clone())
        .map_err(|e| format!("OTLP endpoint {url:?}: {e}"))?
        .to_owned();
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_else(|| host.clone());
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls.client_config(&[b"h2"])?));
    let connect = tower::service_fn(move |_: http::Uri| {
        let (connector, server_name, host) = (connector.clone(), server_name.clone(), host.clone());
        async move {
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let stream = connector.connect(server_name, tcp).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{authority}"))
        .map_err(|e| format!("OTLP endpoint {url:?}: {e}"))?
        .origin(uri.clone())
        .timeout(timeout);
    Ok(endpoint.connect_with_connector_lazy(connect))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::otel::FileSetting;

    struct Pair {
        cert: String,
        key: String,
    }

    fn pair(cn: &str) -> Pair {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![cn.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// Writes like the kubelet: new files, then an atomic rename over the old ones.
    fn put(dir: &std::path::Path, name: &str, body: &str) {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, body).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::pem_slice_iter(pem.as_bytes())
            .next()
            .unwrap()
            .unwrap()
            .to_vec()
    }

    #[test]
    fn renewed_files_are_used_and_broken_renewals_keep_the_last_good_ones() {
        let dir = std::env::temp_dir().join(format!("sso-otlp-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca, first, second, third) = (pair("ca"), pair("a"), pair("b"), pair("c"));
        put(&dir, "ca.crt", &ca.cert);
        put(&dir, "tls.crt", &first.cert);
        put(&dir, "tls.key", &first.key);
        let setting = |var, file: &str| FileSetting {
            var,
            path: dir.join(file).to_string_lossy().into_owned(),
        };
        let files = TlsFiles {
            ca: Some(setting("OTEL_EXPORTER_OTLP_CERTIFICATE", "ca.crt")),
            client: Some((
                setting("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "tls.crt"),
                setting("OTEL_EXPORTER_OTLP_CLIENT_KEY", "tls.key"),
            )),
        };
        let tls = ReloadingTls::new(files.clone()).unwrap();
        let in_use = |tls: &ReloadingTls| tls.client_chain()[0].to_vec();
        assert_eq!(in_use(&tls), der(&first.cert), "at start");

        // (step, certificate file, key file, the certificate then in use)
        let steps: Vec<(&str, &str, &str, &Pair)> = vec![
            ("renewed", &second.cert, &second.key, &second),
            (
                "certificate of another key: kept",
                &third.cert,
                &second.key,
                &second,
            ),
            (
                "half written: kept",
                "-----BEGIN CERT",
                &second.key,
                &second,
            ),
            ("fixed", &third.cert, &third.key, &third),
        ];
        for (what, cert, key, want) in steps {
            put(&dir, "tls.crt", cert);
            put(&dir, "tls.key", key);
            assert_eq!(in_use(&tls), der(&want.cert), "{what}");
        }

        // A client configuration resolves the current key.
        let config = tls.client_config(&[b"h2"]).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
        assert!(config.client_auth_cert_resolver.has_certs());
        let schemes = config
            .crypto_provider()
            .signature_verification_algorithms
            .supported_schemes();
        let key = config
            .client_auth_cert_resolver
            .resolve(&[], &schemes)
            .expect("a client key");
        assert_eq!(key.cert[0].to_vec(), der(&third.cert));

        // A startup with a broken file is refused, naming the variable.
        put(&dir, "tls.key", &first.key);
        let err = ReloadingTls::new(files).unwrap_err();
        assert!(
            err.starts_with("OTEL_EXPORTER_OTLP_CLIENT_KEY=") && err.contains("does not belong to"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
