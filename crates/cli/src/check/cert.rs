//! The serving certificate: read from the Secret the operator serves from, or from the URL the
//! webhooks call, and judged against the webhooks' caBundle ([`verify_leaf`]).

use super::eval::{self, ServedCert};
use crate::inspect::cluster::Cluster;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use std::time::Duration;

#[cfg(test)]
mod tests;

/// Whether `bundle` (PEM) has a CA that signed `leaf` (DER), and the leaf's notAfter.
pub fn verify_leaf(leaf: &[u8], bundle: &[u8]) -> Result<(Result<(), String>, i64), String> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) = X509Certificate::from_der(leaf)
        .map_err(|e| format!("the certificate cannot be parsed: {e}"))?;
    let not_after = cert.validity().not_after.timestamp();
    if bundle.is_empty() {
        return Ok((Err("the caBundle is empty".into()), not_after));
    }
    let mut cas = Vec::new();
    for pem in x509_parser::pem::Pem::iter_from_buffer(bundle) {
        let pem = pem.map_err(|e| format!("the caBundle is not PEM: {e}"))?;
        cas.push(pem.contents);
    }
    let trusted = cas.iter().any(|der| {
        X509Certificate::from_der(der).is_ok_and(|(_, ca)| {
            ca.subject() == cert.issuer() && cert.verify_signature(Some(ca.public_key())).is_ok()
        })
    });
    let issuer = cert.issuer().to_string();
    Ok((
        if trusted {
            Ok(())
        } else {
            Err(format!(
                "no CA of the caBundle ({} certificate(s)) signed it (issuer {issuer})",
                cas.len()
            ))
        },
        not_after,
    ))
}

/// The certificate in the `tls.crt` of Secret `ns/name`, judged against `bundle`.
pub(super) async fn served_from_secret(
    c: &Cluster,
    ns: &str,
    name: &str,
    bundle: &[u8],
) -> Result<ServedCert, String> {
    let s = Api::<Secret>::namespaced(c.client.clone(), ns)
        .get(name)
        .await
        .map_err(|e| match e {
            // The API server's own words, not the whole Status structure.
            kube::Error::Api(s) if s.code == 404 => format!("Secret {ns}/{name} not found"),
            kube::Error::Api(s) => format!("get secret {ns}/{name}: {} ({})", s.message, s.code),
            e => format!("get secret {ns}/{name}: {e}"),
        })?;
    let crt = s
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .ok_or_else(|| format!("secret {ns}/{name} has no tls.crt"))?;
    let der = x509_parser::pem::Pem::iter_from_buffer(&crt.0)
        .next()
        .ok_or_else(|| format!("secret {ns}/{name}: tls.crt holds no certificate"))?
        .map_err(|e| format!("secret {ns}/{name}: tls.crt is not PEM: {e}"))?
        .contents;
    let (trusted, not_after) = verify_leaf(&der, bundle)?;
    Ok(ServedCert {
        source: format!("secret {ns}/{name}"),
        trusted,
        not_after,
    })
}

/// The leaf certificate a URL serves (read without judging it; [`verify_leaf`] judges).
pub(super) async fn served_by_url(url: &str, bundle: &[u8]) -> Result<ServedCert, String> {
    let base = eval::url_base(url).to_string();
    let hostport = base
        .strip_prefix("https://")
        .ok_or_else(|| format!("{url:?} is not https"))?
        .to_string();
    let leaf = tokio::task::spawn_blocking(move || fetch_leaf(&hostport))
        .await
        .map_err(|e| e.to_string())??;
    let (trusted, not_after) = verify_leaf(&leaf, bundle)?;
    Ok(ServedCert {
        source: base,
        trusted,
        not_after,
    })
}

/// The leaf certificate `hostport` serves in a TLS handshake.
fn fetch_leaf(hostport: &str) -> Result<Vec<u8>, String> {
    use std::io::Write;
    use std::net::ToSocketAddrs;
    crate::install_crypto_provider();
    let host = hostport
        .rsplit_once(':')
        .map_or(hostport, |(h, _)| h)
        .trim_matches(['[', ']']);
    let config = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(Capture))
        .with_no_client_auth();
    let server_name =
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), server_name)
        .map_err(|e| e.to_string())?;
    let addr = hostport
        .to_socket_addrs()
        .map_err(|e| format!("{hostport}: {e}"))?
        .next()
        .ok_or_else(|| format!("{hostport}: no address"))?;
    let mut sock = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("connect {hostport}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    let _ = tls.flush();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)
            .map_err(|e| format!("TLS handshake with {hostport}: {e}"))?;
    }
    conn.peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .ok_or_else(|| format!("{hostport} served no certificate"))
}

/// Accepts any server certificate: the handshake only reads it; [`verify_leaf`] decides.
#[derive(Debug)]
struct Capture;

impl rustls::client::danger::ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
