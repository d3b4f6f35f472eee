//! Helpers of the end-to-end suite. The suite is cluster-agnostic: it reads `KUBECONFIG`, creates
//! its own namespaces and SidecarSets (names carry a per-run suffix) and deletes them.
//!
//! Env: `SSO_E2E_NAMESPACE` — the operator's namespace (excluded from injection; default
//! `sidecarset-system`); `SSO_E2E_FAILURE_POLICY` — the pod webhook's failurePolicy (default Fail).

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sidecarset_core::api::SidecarSet;
use std::time::{Duration, Instant};

pub fn operator_namespace() -> String {
    std::env::var("SSO_E2E_NAMESPACE").unwrap_or_else(|_| "sidecarset-system".into())
}

pub fn failure_policy() -> String {
    std::env::var("SSO_E2E_FAILURE_POLICY").unwrap_or_else(|_| "Fail".into())
}

pub async fn client() -> Client {
    sidecarset_operator::tls::install_crypto_provider();
    Client::try_default()
        .await
        .expect("KUBECONFIG must point to the test cluster")
}

/// A short unique suffix for names of this test run.
pub fn suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{:x}{:x}", std::process::id() % 4096, nanos % 0xfffff)
}

pub async fn create_namespace(c: &Client, name: &str, labels: Value) -> anyhow::Result<()> {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &ns)
        .await
        .context("create namespace")?;
    Ok(())
}

pub async fn delete_namespace(c: &Client, name: &str) {
    let _ = Api::<Namespace>::all(c.clone())
        .delete(name, &DeleteParams::background())
        .await;
}

/// Creates a v1alpha1 SidecarSet. The API server converts it to v1beta1 through the operator's
/// `/convert`; right after an operator (re)points the CRD's conversion webhook at itself the API
/// server may still call the previous one for a moment, so a conversion failure is retried for
/// up to 15 s (any other error is returned at once).
pub async fn create_sidecarset(c: &Client, v: Value) -> kube::Result<SidecarSet> {
    let ss: SidecarSet = serde_json::from_value(v).expect("test SidecarSet decodes");
    let api = Api::<SidecarSet>::all(c.clone());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match api.create(&PostParams::default(), &ss).await {
            // The conversion webhook not yet pointed at a running replica, or a replica that
            // published its caBundle a moment before it listens (URL mode: no Service
            // endpoints to wait for).
            Err(kube::Error::Api(e))
                if (e.message.contains("conversion webhook")
                    || (e.message.contains("failed calling webhook")
                        && e.message.contains("connection refused")))
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await
            }
            other => return other,
        }
    }
}

pub async fn delete_sidecarset(c: &Client, name: &str) {
    let _ = Api::<SidecarSet>::all(c.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

pub fn pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]}
    }))
    .unwrap()
}

/// Creates a Deployment "web" of `replicas` pods labelled `e2e-app: label` (one app container).
pub async fn create_web_deployment(
    c: &Client,
    ns: &str,
    label: &str,
    replicas: i32,
) -> anyhow::Result<()> {
    let deploy: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"e2e-app": label}},
                 "template": {"metadata": {"labels": {"e2e-app": label}},
                              "spec": {"containers": [{"name": "app", "image": "registry.local/web:1"}]}}}
    }))?;
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &deploy)
        .await?;
    Ok(())
}

pub fn container_names(p: &Pod) -> Vec<String> {
    p.spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

pub fn init_container_names(p: &Pod) -> Vec<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map(|l| l.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

/// Server-side dry-run create (what `kubectl apply --dry-run=server` does): the pod as admission
/// left it, nothing stored.
pub async fn dry_run(c: &Client, ns: &str, p: &Pod) -> kube::Result<Pod> {
    Api::<Pod>::namespaced(c.clone(), ns)
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            p,
        )
        .await
}

/// Polls until a dry-run of `p` is injected with `container` (the operator's index follows
/// SidecarSets and namespace labels through watches, a few milliseconds behind the API).
pub async fn wait_injectable(
    c: &Client,
    ns: &str,
    p: &Pod,
    container: &str,
    want: bool,
) -> anyhow::Result<()> {
    // A generated name, so the probe works even when a pod of that name exists.
    let mut p = p.clone();
    p.metadata.generate_name = Some("probe-".into());
    p.metadata.name = None;
    let p = &p;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = dry_run(c, ns, p).await?;
        let has = container_names(&got)
            .iter()
            .chain(init_container_names(&got).iter())
            .any(|n| n == container);
        if has == want {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "after 20 s a pod in {ns} is {} {container}: {:?}",
                if want { "still without" } else { "still with" },
                container_names(&got)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `f` returns Some, polling every 250 ms, up to `secs`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {secs} s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits for the namespace's default ServiceAccount: pods are refused until
/// kube-controller-manager made it.
pub async fn wait_default_sa(c: &Client, ns: &str) -> anyhow::Result<()> {
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(c.clone(), ns);
    eventually(30, "the namespace's default ServiceAccount", || {
        let sa = sa.clone();
        async move { Ok(sa.get_opt("default").await?.map(|_| ())) }
    })
    .await
}

pub fn name_of<K: ResourceExt>(k: &K) -> String {
    k.name_any()
}

/// The certificate Secret and webhook configuration names of the operator under test.
pub fn cert_secret_name() -> String {
    std::env::var("SSO_E2E_CERT_SECRET")
        .unwrap_or_else(|_| "sidecarset-operator-webhook-certs".into())
}

pub fn webhook_config_name() -> String {
    std::env::var("SSO_E2E_WEBHOOK_CONFIG").unwrap_or_else(|_| "sidecarset-operator".into())
}

/// The caBundles of every webhook of the Mutating and Validating configurations named `name`.
pub async fn ca_bundles(c: &Client, name: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let m = Api::<MutatingWebhookConfiguration>::all(c.clone())
        .get(name)
        .await?;
    let v = Api::<ValidatingWebhookConfiguration>::all(c.clone())
        .get(name)
        .await?;
    let mut out: Vec<Vec<u8>> = m
        .webhooks
        .iter()
        .flatten()
        .map(|w| {
            w.client_config
                .ca_bundle
                .clone()
                .map(|b| b.0)
                .unwrap_or_default()
        })
        .collect();
    out.extend(v.webhooks.iter().flatten().map(|w| {
        w.client_config
            .ca_bundle
            .clone()
            .map(|b| b.0)
            .unwrap_or_default()
    }));
    Ok(out)
}

/// TLS handshake with `addr`, trusting only `ca_bundle`; returns the served leaf (DER).
pub async fn served_leaf(addr: std::net::SocketAddr, ca_bundle: &[u8]) -> anyhow::Result<Vec<u8>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    sidecarset_operator::tls::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_bundle) {
        roots.add(c?)?;
    }
    let cfg = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .context("TLS handshake with the published caBundle")?;
    let (_, conn) = tls.get_ref();
    let leaf = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .context("no certificate served")?;
    Ok(leaf.to_vec())
}

/// A running operator process (killed on drop), for tests that start their own.
pub struct Operator {
    child: std::process::Child,
    pub port: u16,
}

impl Operator {
    pub fn start(args: &[&str], port: u16, log: &str) -> anyhow::Result<Operator> {
        Self::start_with_env(args, &[], port, log)
    }

    /// [`Operator::start`] with more environment variables.
    pub fn start_with_env(
        args: &[&str],
        env: &[(&str, &str)],
        port: u16,
        log: &str,
    ) -> anyhow::Result<Operator> {
        let bin = std::env::var_os("SSO_E2E_BIN")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../target/debug/sidecarset-operator")
            });
        anyhow::ensure!(
            bin.exists(),
            "{} does not exist: run `cargo build --bin sidecarset-operator` first",
            bin.display()
        );
        let logf = std::fs::File::create(log)?;
        let child = std::process::Command::new(bin)
            .arg("run")
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(args)
            // No Service endpoint to wait for (webhooks by URL): stop at once on SIGTERM, as
            // hack/run-local.sh does; a test may set it.
            .env("SSO_SHUTDOWN_DELAY", "0")
            .envs(env.iter().copied())
            .stdout(logf.try_clone()?)
            .stderr(logf)
            .spawn()?;
        Ok(Operator { child, port })
    }

    /// The process's exit status if it has exited (a crash: killed by SIGABRT), else None.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Sends SIGTERM (what Kubernetes sends) and waits up to `secs` for the process to exit.
    pub fn terminate(&mut self, secs: u64) -> anyhow::Result<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()?;
        anyhow::ensure!(sent.success(), "kill -TERM {pid} failed");
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!("the operator did not exit within {secs} s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// GET http://`host`/`path` (the operator's metrics listener), the whole response with headers.
pub async fn scrape_metrics(host: &str, path: &str) -> anyhow::Result<String> {
    scrape_metrics_accepting(host, path, None).await
}

/// [`scrape_metrics`] with an `Accept` header.
pub async fn scrape_metrics_accepting(
    host: &str,
    path: &str,
    accept: Option<&str>,
) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(host).await?;
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n{accept}\r\n").as_bytes())
        .await?;
    let mut body = String::new();
    s.read_to_string(&mut body).await?;
    anyhow::ensure!(
        body.starts_with("HTTP/1.") && body.contains(" 200 "),
        "metrics answered: {}",
        body.lines().next().unwrap_or("")
    );
    Ok(body)
}

/// The value of one sample: `name{labels}` exactly as exported (labels in export order); 0 when
/// absent.
pub fn value(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name_and_labels)
                .and_then(|rest| rest.trim().parse::<f64>().ok())
        })
        .unwrap_or(0.0)
}
pub mod audit;
pub mod commands;
pub mod crashes;
pub mod kruise;
pub mod proxy;
