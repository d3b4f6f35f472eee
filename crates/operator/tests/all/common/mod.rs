//! Shared by the webhook tests and the webhook load benchmark: a CA and serving certificate
//! (rcgen), the real webhook app served over TLS on 127.0.0.1, and a keep-alive HTTPS client
//! that trusts only that CA.
#![allow(dead_code)]

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::ServerName;
use sidecarset_operator::tls as server;
use sidecarset_operator::webhook::{self, State};
use std::net::SocketAddr;
use std::sync::Arc;

pub struct Pki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

pub fn pki() -> Pki {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    Pki {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// Serves the webhook app with `state` on an ephemeral port; returns the address.
pub async fn serve(state: Arc<State>, pki: &Pki) -> SocketAddr {
    let cfg =
        server::server_config_from_pem(pki.cert_pem.as_bytes(), pki.key_pem.as_bytes()).unwrap();
    state.cert.loaded(4_102_444_800);
    let handle = axum_server::Handle::new();
    let h = handle.clone();
    tokio::spawn(async move {
        axum_server::bind_rustls(
            "127.0.0.1:0".parse::<SocketAddr>().unwrap(),
            axum_server::tls_rustls::RustlsConfig::from_config(cfg),
        )
        .handle(h)
        .serve(webhook::router(state).into_make_service_with_connect_info::<SocketAddr>())
        .await
        .unwrap();
    });
    handle.listening().await.expect("server did not start")
}

/// One keep-alive HTTPS/1.1 connection trusting only the test CA.
pub struct Client {
    sender: SendRequest<Full<Bytes>>,
}

impl Client {
    pub async fn connect(addr: SocketAddr, ca_pem: &str) -> Client {
        server::install_crypto_provider();
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let cfg = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await
            .unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        Client { sender }
    }

    pub async fn request(&mut self, method: &str, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        self.sender.ready().await.unwrap();
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let resp = self.sender.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        (status, body)
    }
}

/// An admission.k8s.io/v1 AdmissionReview as the API server sends it.
pub fn review(
    uid: &str,
    kind: (&str, &str, &str),
    resource: &str,
    op: &str,
    namespace: &str,
    object: &serde_json::Value,
    old: Option<&serde_json::Value>,
) -> Vec<u8> {
    let (group, version, kind) = kind;
    // In the API server's order (its AdmissionRequest's fields as declared, operation before
    // object), not a JSON map's (alphabetical): what the webhook really parses.
    let j = |v: serde_json::Value| serde_json::to_string(&v).unwrap();
    let fields = [
        ("uid", j(uid.into())),
        (
            "kind",
            j(serde_json::json!({"group": group, "version": version, "kind": kind})),
        ),
        (
            "resource",
            j(serde_json::json!({"group": group, "version": version, "resource": resource})),
        ),
        (
            "requestKind",
            j(serde_json::json!({"group": group, "version": version, "kind": kind})),
        ),
        (
            "requestResource",
            j(serde_json::json!({"group": group, "version": version, "resource": resource})),
        ),
        ("namespace", j(namespace.into())),
        ("operation", j(op.into())),
        (
            "userInfo",
            j(serde_json::json!({"username": "system:admin", "groups": ["system:masters"]})),
        ),
        ("object", j(object.clone())),
        (
            "oldObject",
            j(old.cloned().unwrap_or(serde_json::Value::Null)),
        ),
        ("dryRun", "false".to_string()),
        (
            "options",
            j(serde_json::json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"})),
        ),
    ];
    let request = fields
        .iter()
        .map(|(k, v)| format!("\"{k}\":{v}"))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{{request}}}}}"#
    )
    .into_bytes()
}

/// Decodes the response: (allowed, status message, the patch if any).
pub fn response(body: &[u8]) -> (bool, String, Option<json_patch::Patch>) {
    use base64::Engine;
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    let r = &v["response"];
    let patch = r["patch"].as_str().map(|p| {
        assert_eq!(r["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    });
    (
        r["allowed"].as_bool().unwrap(),
        r["status"]["message"].as_str().unwrap_or("").to_string(),
        patch,
    )
}
