//! Tests that start their own operator processes next to the cluster (webhooks by URL on
//! 127.0.0.1), so they only run where the API server can reach this machine's loopback: the
//! local cluster. `hack/e2e-local.sh` runs them with `--ignored` after the main operator and its
//! webhook configurations are gone, one at a time (`--test-threads=1`): each test's operator
//! intercepts pods of every namespace while it runs.

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use sidecarset_e2e::*;
use sidecarset_operator::certs;
use std::time::{Duration, Instant};

const TARGET_NS: &str = "default";

async fn cleanup(c: &kube::Client, config: &str, ns: &str) {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let _ = Api::<MutatingWebhookConfiguration>::all(c.clone())
        .delete(config, &DeleteParams::default())
        .await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(c.clone())
        .delete(config, &DeleteParams::default())
        .await;
    delete_namespace(c, ns).await;
}

/// Arguments that give an operator its own namespace, certificate Secret and webhook
/// configuration names, so that it does not touch another's.
fn instance_args(ns: &str, name: &str) -> Vec<String> {
    [
        "--namespace",
        ns,
        "--cert-secret-name",
        name,
        "--webhook-config-name",
        name,
    ]
    .map(String::from)
    .to_vec()
}

/// [`instance_args`] plus webhook configurations it writes itself, by URL on 127.0.0.1:`port`,
/// failing closed.
fn standalone_args(ns: &str, name: &str, port: u16) -> Vec<String> {
    let mut v = instance_args(ns, name);
    v.extend(
        [
            "--manage-webhooks",
            "--webhook-url",
            &format!("https://127.0.0.1:{port}"),
            "--failure-policy",
            "Fail",
        ]
        .map(String::from),
    );
    v
}

/// Waits until the webhook configurations `name` carry a CA bundle (the instance's SidecarSet
/// webhooks can then be called).
async fn wait_webhooks_trusted(c: &kube::Client, name: &str) -> anyhow::Result<()> {
    eventually(15, "the operator's certificates and webhooks", || {
        let (c, name) = (c.clone(), name.to_string());
        async move {
            let bundles = ca_bundles(&c, &name).await.unwrap_or_default();
            Ok((!bundles.is_empty() && bundles.iter().all(|b| !b.is_empty())).then_some(()))
        }
    })
    .await
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Waits until the operator at `addr` serves the leaf certificate `want` (trusting `bundle`).
async fn wait_served(
    addr: std::net::SocketAddr,
    bundle: &str,
    want: Vec<u8>,
    what: &str,
) -> anyhow::Result<()> {
    eventually(10, what, || {
        let want = want.clone();
        async move {
            Ok(served_leaf(addr, bundle.as_bytes())
                .await
                .ok()
                .filter(|l| *l == want)
                .map(|_| ()))
        }
    })
    .await
}

fn log_path(name: &str) -> String {
    std::env::temp_dir()
        .join(format!("{name}.log"))
        .to_string_lossy()
        .into_owned()
}

fn tail(path: &str) -> String {
    let t = std::fs::read_to_string(path).unwrap_or_default();
    t.lines()
        .rev()
        .take(15)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn fresh_start_without_secret_is_ready_and_injects_within_15_seconds() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-fresh-{s}"), format!("e2e-fresh-{s}"));
    create_namespace(&c, &ns, json!({})).await?;
    let port = free_port();
    let log = log_path(&name);
    let t0 = Instant::now();
    let op = Operator::start(&as_strs(&standalone_args(&ns, &name, port)), port, &log)?;
    let result = async {
        let ss = format!("e2e-fresh-{s}");
        let label = format!("fresh-{s}");
        // The SidecarSet webhooks of this instance must be up before a SidecarSet can be created.
        eventually(15, "the operator's certificates and webhooks", || {
            let (c, name, ns) = (c.clone(), name.clone(), ns.clone());
            async move {
                let secret = Api::<Secret>::namespaced(c.clone(), &ns).get_opt(&name).await?;
                let bundles = ca_bundles(&c, &name).await.unwrap_or_default();
                Ok((secret.is_some() && !bundles.is_empty() && bundles.iter().all(|b| !b.is_empty())).then_some(()))
            }
        })
        .await?;
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
            "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": [{"name": "fresh", "image": "registry.local/f:1"}]}
        })).await?;
        wait_injectable(&c, TARGET_NS, &pod("p", json!({"e2e-app": label})), "fresh", true).await?;
        let ready = served_leaf(op.addr(), &ca_bundles(&c, &name).await?[0]).await?;
        let elapsed = t0.elapsed();
        println!("fresh start to an injected pod: {elapsed:?}");
        anyhow::ensure!(!ready.is_empty());
        anyhow::ensure!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
        delete_sidecarset(&c, &ss).await;
        anyhow::Ok(())
    }
    .await;
    drop(op);
    cleanup(&c, &name, &ns).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log:\n{}", tail(&log)))
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn rotations_with_two_replicas_fail_no_admission() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-rot-{s}"), format!("e2e-rot-{s}"));
    create_namespace(&c, &ns, json!({})).await?;
    let secs: u64 = std::env::var("SSO_E2E_ROTATION_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let (pa, pb) = (free_port(), free_port());
    let common = |extra: &[&str]| -> Vec<String> {
        let mut v = instance_args(&ns, &name);
        v.extend(
            [
                "--ca-validity",
                "180s",
                "--cert-validity",
                "60s",
                "--cert-renew-at",
                "0.5",
                "--ca-overlap",
                "8s",
                "--cert-resync",
                "1s",
                "--cert-extra-ips",
                "127.0.0.1",
            ]
            .iter()
            .chain(extra)
            .map(|s| s.to_string()),
        );
        v
    };
    let a_args = common(&[
        "--manage-webhooks",
        "--webhook-url",
        &format!("https://127.0.0.1:{pa}"),
        "--failure-policy",
        "Fail",
    ]);
    // B is not reachable by URL: A alone points the CRD's conversion webhook at itself.
    let b_args = common(&["--manage-crd-conversion=false"]);
    let (log_a, log_b) = (
        log_path(&format!("{name}-a")),
        log_path(&format!("{name}-b")),
    );
    let a = Operator::start(&as_strs(&a_args), pa, &log_a)?;
    let b = Operator::start(&as_strs(&b_args), pb, &log_b)?;
    let result = async {
        eventually(15, "the replicas' certificates", || {
            let (c, name) = (c.clone(), name.clone());
            async move { Ok(ca_bundles(&c, &name).await.ok().filter(|b| b.iter().all(|x| !x.is_empty())).map(|_| ())) }
        })
        .await?;
        // Both replicas serving before the first probe (B starts serving once its own first
        // certificate pass has seen A's webhook configurations).
        for (who, port) in [("A", pa), ("B", pb)] {
            eventually(15, &format!("replica {who} serving"), || {
                let c = c.clone();
                let name = name.clone();
                async move {
                    let bundle = ca_bundles(&c, &name).await?.remove(0);
                    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                    Ok(served_leaf(addr, &bundle).await.ok().map(|_| ()))
                }
            })
            .await?;
        }
        let pods: Api<Pod> = Api::namespaced(c.clone(), TARGET_NS);
        let secrets: Api<Secret> = Api::namespaced(c.clone(), &ns);
        let (mut admitted, mut failed) = (0u32, Vec::<String>::new());
        let mut cas_seen = std::collections::BTreeSet::new();
        let mut leaves_seen = std::collections::BTreeSet::new();
        let mut stale_since: Option<Instant> = None;
        let mut worst_stale = Duration::ZERO;
        let mut rotation_started: Option<Instant> = None;
        let mut rotation_times = Vec::new();
        let start = Instant::now();
        let mut i = 0;
        while start.elapsed() < Duration::from_secs(secs) {
            i += 1;
            // An admission through replica A's webhook (server-side dry run: nothing stored).
            let mut p = pod(&format!("rot-{i}"), json!({"e2e": "rotation"}));
            p.metadata.namespace = Some(TARGET_NS.into());
            match pods.create(&PostParams { dry_run: true, ..Default::default() }, &p).await {
                Ok(_) => admitted += 1,
                Err(e) => failed.push(format!("{:?}: {e}", start.elapsed())),
            }
            if i % 5 == 0 {
                // Both replicas serve a leaf that the published caBundle trusts, and converge on
                // the Secret's leaf.
                let secret = secrets.get(&name).await?;
                let data = secret.data.clone().unwrap_or_default();
                let tls = String::from_utf8(data.get("tls.crt").map(|b| b.0.clone()).unwrap_or_default())?;
                let want = certs::bundle_ders(tls.as_bytes()).into_iter().next().unwrap_or_default();
                cas_seen.insert(data.get("ca.crt").map(|b| b.0.clone()).unwrap_or_default());
                leaves_seen.insert(want.clone());
                if data.contains_key("next-ca.crt") && rotation_started.is_none() {
                    rotation_started = Some(Instant::now());
                }
                if let Some(r) = rotation_started
                    && !data.contains_key("next-ca.crt")
                    && !data.contains_key("prev-ca.crt")
                {
                    rotation_times.push(r.elapsed());
                    rotation_started = None;
                }
                let bundle = ca_bundles(&c, &name).await?.remove(0);
                let la = served_leaf(a.addr(), &bundle).await.map_err(|e| anyhow::anyhow!("replica A: {e:#}"))?;
                let lb = served_leaf(b.addr(), &bundle).await.map_err(|e| anyhow::anyhow!("replica B: {e:#}"))?;
                if la == want && lb == want {
                    stale_since = None;
                } else {
                    let since = *stale_since.get_or_insert_with(Instant::now);
                    worst_stale = worst_stale.max(since.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!(
            "rotation test: {admitted} admissions, {} failed, over {secs} s; {} CAs and {} serving certificates seen; \
             CA rotations end to end: {rotation_times:?}; longest time a replica served an older (still trusted) leaf: {worst_stale:?}",
            failed.len(),
            cas_seen.len(),
            leaves_seen.len()
        );
        anyhow::ensure!(failed.is_empty(), "failed admissions: {:?}", &failed[..failed.len().min(5)]);
        anyhow::ensure!(cas_seen.len() >= 2, "no CA rotation happened in {secs} s");
        anyhow::ensure!(leaves_seen.len() >= 3, "too few serving certificates: {}", leaves_seen.len());
        anyhow::ensure!(worst_stale < Duration::from_secs(10), "a replica lagged {worst_stale:?} behind the Secret");
        anyhow::Ok(())
    }
    .await;
    drop(a);
    drop(b);
    cleanup(&c, &name, &ns).await;
    result.map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\nreplica A log:\n{}\nreplica B log:\n{}",
            tail(&log_a),
            tail(&log_b)
        )
    })
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn files_mode_switches_certificates_without_restart_and_writes_nothing() -> anyhow::Result<()>
{
    let c = client().await;
    let s = suffix();
    let dir = std::env::temp_dir().join(format!("sso-files-{s}"));
    std::fs::create_dir_all(&dir)?;
    let cfg = certs::CertConfig {
        service: "svc".into(),
        namespace: "ns".into(),
        extra_dns: vec![],
        extra_ips: vec!["127.0.0.1".parse()?],
        ca_validity: Duration::from_secs(3600),
        leaf_validity: Duration::from_secs(600),
        renew_at: 0.66,
        overlap: Duration::from_secs(1),
    };
    let now = jiff::Timestamp::now().as_second();
    let first = certs::act(&certs::Action::Generate("test".into()), None, &cfg, now)
        .map_err(anyhow::Error::msg)?;
    let second = certs::act(&certs::Action::Generate("test".into()), None, &cfg, now)
        .map_err(anyhow::Error::msg)?;
    let write = |m: &certs::Material| -> std::io::Result<()> {
        std::fs::write(dir.join("tls.key.new"), &m.tls_key)?;
        std::fs::write(dir.join("tls.crt.new"), &m.tls_cert)?;
        std::fs::rename(dir.join("tls.key.new"), dir.join("tls.key"))?;
        std::fs::rename(dir.join("tls.crt.new"), dir.join("tls.crt"))
    };
    write(&first)?;
    let secret_name = format!("e2e-files-{s}");
    let port = free_port();
    let log = log_path(&secret_name);
    let op = Operator::start(
        &[
            "--cert-mode",
            "files",
            "--cert-dir",
            dir.to_str().unwrap_or_default(),
            "--cert-secret-name",
            &secret_name,
        ],
        port,
        &log,
    )?;
    let result = async {
        let both = format!("{}{}", first.ca_cert, second.ca_cert);
        let leaf = |m: &certs::Material| certs::bundle_ders(m.tls_cert.as_bytes()).remove(0);
        let addr = op.addr();
        wait_served(addr, &both, leaf(&first), "the first certificate served").await?;
        write(&second)?;
        let t = Instant::now();
        wait_served(
            addr,
            &both,
            leaf(&second),
            "the replaced certificate served",
        )
        .await?;
        println!(
            "files mode: new certificate served {:?} after the files changed",
            t.elapsed()
        );
        let secrets: Api<Secret> = Api::namespaced(c.clone(), &operator_namespace());
        anyhow::ensure!(
            secrets.get_opt(&secret_name).await?.is_none(),
            "files mode wrote a Secret"
        );
        anyhow::Ok(())
    }
    .await;
    drop(op);
    let _ = std::fs::remove_dir_all(&dir);
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log:\n{}", tail(&log)))
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn a_new_leader_finishes_a_half_done_rollout_within_max_unavailable() -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{ListParams, Patch, PatchParams};
    use sidecarset_core::api::SidecarSet;

    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-lead-{s}"), format!("e2e-lead-{s}"));
    create_namespace(&c, &ns, json!({})).await?;
    // The operators skip their own namespace: the pods live in another one.
    let pods_ns = format!("e2e-lead-pods-{s}");
    create_namespace(&c, &pods_ns, json!({})).await?;
    let (pa, pb) = (free_port(), free_port());
    let common = |extra: &[&str]| -> Vec<String> {
        let mut v = instance_args(&ns, &name);
        v.extend(
            [
                "--leader-lease-name",
                &name,
                "--leader-lease-duration",
                "4s",
                "--cert-extra-ips",
                "127.0.0.1",
            ]
            .iter()
            .chain(extra)
            .map(|s| s.to_string()),
        );
        v
    };
    let (log_a, log_b) = (
        log_path(&format!("{name}-a")),
        log_path(&format!("{name}-b")),
    );
    let leases: Api<Lease> = Api::namespaced(c.clone(), &ns);
    // B starts first and becomes the leader; A serves the webhooks (URL mode) and waits.
    // A alone (reachable by URL) points the CRD's conversion webhook at itself.
    let b = Operator::start(
        &as_strs(&common(&["--manage-crd-conversion=false"])),
        pb,
        &log_b,
    )?;
    let holder = |l: Option<Lease>| {
        l.and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .unwrap_or_default()
    };
    eventually(20, "replica B to lead", || {
        let (leases, name) = (leases.clone(), name.clone());
        async move { Ok((!holder(leases.get_opt(&name).await?).is_empty()).then_some(())) }
    })
    .await?;
    let b_identity = holder(leases.get_opt(&name).await?);
    let a_args = common(&[
        "--manage-webhooks",
        "--webhook-url",
        &format!("https://127.0.0.1:{pa}"),
    ]);
    let a = Operator::start(&as_strs(&a_args), pa, &log_a)?;
    let mut b = Some(b);
    let result = async {
        eventually(20, "replica A's webhooks", || {
            let (c, name) = (c.clone(), name.clone());
            async move { Ok(ca_bundles(&c, &name).await.ok().filter(|b| b.iter().all(|x| !x.is_empty())).map(|_| ())) }
        }).await?;
        let label = format!("lead-{s}");
        create_sidecarset(&c, json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": [{"name": "proxy", "image": "registry.local/proxy:1"}],
                     "updateStrategy": {"maxUnavailable": 1}}})).await?;
        wait_injectable(&c, &pods_ns, &pod("probe", json!({"e2e-app": label})), "proxy", true).await?;
        let deploy: Deployment = serde_json::from_value(json!({"metadata": {"name": "app"},
            "spec": {"replicas": 6, "selector": {"matchLabels": {"e2e-app": label}},
                     "template": {"metadata": {"labels": {"e2e-app": label}}, "spec": {"containers": [{"name": "app", "image": "registry.local/app:1"}]}}}}))?;
        Api::<Deployment>::namespaced(c.clone(), &pods_ns).create(&PostParams::default(), &deploy).await?;
        let sets: Api<SidecarSet> = Api::all(c.clone());
        let status = |sets: Api<SidecarSet>, name: String| async move {
            anyhow::Ok(sets.get(&name).await?.status.unwrap_or_default())
        };
        eventually(60, "6 ready pods", || { let (sets, name) = (sets.clone(), name.clone()); async move { Ok((status(sets, name).await?.updated_ready_pods == 6).then_some(())) } }).await?;
        let patched = sets.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"containers": [{"name": "proxy", "image": "registry.local/proxy:2"}]}}))).await?;
        let generation = patched.metadata.generation;
        let pods: Api<Pod> = Api::namespaced(c.clone(), &pods_ns);
        let lp = ListParams::default().labels(&format!("e2e-app={label}"));
        let unavailable = |l: &[Pod]| l.iter().filter(|p| {
            let ready = p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let spec = p.spec.as_ref().and_then(|s| s.containers.iter().find(|c| c.name == "proxy")).and_then(|c| c.image.clone()).unwrap_or_default();
            let st = p.status.as_ref().and_then(|s| s.container_statuses.as_ref()).and_then(|l| l.iter().find(|c| c.name == "proxy")).map(|c| c.image.clone()).unwrap_or_default();
            !ready || spec != st
        }).count();
        let mut worst = 0;
        let start = Instant::now();
        let mut killed_at = None;
        loop {
            let l = pods.list(&lp).await?.items;
            worst = worst.max(unavailable(&l));
            let st = status(sets.clone(), name.clone()).await?;
            if st.observed_generation != generation {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue; // the status of the previous spec
            }
            if killed_at.is_none() && st.updated_pods >= 2 {
                drop(b.take()); // kill the leader mid-rollout
                killed_at = Some(Instant::now());
            }
            if st.updated_ready_pods == 6 && killed_at.is_some() {
                break;
            }
            anyhow::ensure!(start.elapsed() < Duration::from_secs(120), "rollout did not finish: {st:?}");
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        let new_holder = holder(leases.get_opt(&name).await?);
        println!("leader {b_identity} killed after 2 upgrades; {new_holder} finished the rollout {:?} later; at most {worst} pod(s) unavailable",
                 killed_at.map(|k| k.elapsed()).unwrap_or_default());
        anyhow::ensure!(new_holder != b_identity, "the Lease did not move to the other replica");
        anyhow::ensure!(worst <= 1, "maxUnavailable 1 exceeded across the leader change: {worst}");
        delete_sidecarset(&c, &name).await;
        anyhow::Ok(())
    }
    .await;
    drop(a);
    drop(b);
    cleanup(&c, &name, &ns).await;
    delete_namespace(&c, &pods_ns).await;
    result.map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\nreplica A log:\n{}\nreplica B log:\n{}",
            tail(&log_a),
            tail(&log_b)
        )
    })
}

type Received = std::sync::Arc<
    std::sync::Mutex<
        Vec<opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest>,
    >,
>;

/// A private CA, a certificate for a collector on 127.0.0.1 and a client certificate, as PEM
/// files in a fresh directory.
struct Pki {
    dir: std::path::PathBuf,
    ca: String,
    server: (String, String),
    client: (String, String),
    client_pem: (String, String),
}

impl Pki {
    fn new(name: &str) -> anyhow::Result<Pki> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, SanType,
        };
        let dir = std::env::temp_dir().join(format!("{name}-pki"));
        std::fs::create_dir_all(&dir)?;
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::default();
        ca.distinguished_name
            .push(DnType::CommonName, "e2e collector CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_pem = ca.self_signed(&ca_key)?.pem();
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |cn: &str, usage: ExtendedKeyUsagePurpose| -> anyhow::Result<(String, String)> {
            let key = KeyPair::generate()?;
            let mut p = CertificateParams::new(vec!["localhost".to_string()])?;
            p.subject_alt_names
                .push(SanType::IpAddress("127.0.0.1".parse()?));
            p.distinguished_name.push(DnType::CommonName, cn);
            p.extended_key_usages = vec![usage];
            Ok((p.signed_by(&key, &issuer)?.pem(), key.serialize_pem()))
        };
        let server = leaf("collector", ExtendedKeyUsagePurpose::ServerAuth)?;
        let client = leaf("sidecarset-operator", ExtendedKeyUsagePurpose::ClientAuth)?;
        let write = |file: &str, body: &str| -> anyhow::Result<String> {
            let path = dir.join(file);
            std::fs::write(&path, body)?;
            Ok(path.to_string_lossy().into_owned())
        };
        write("server.crt", &server.0)?;
        write("server.key", &server.1)?;
        Ok(Pki {
            ca: write("ca.crt", &ca_pem)?,
            client: (
                write("client.crt", &client.0)?,
                write("client.key", &client.1)?,
            ),
            server,
            client_pem: client,
            dir,
        })
    }

    /// Replaces the client certificate and key files the way the kubelet updates a Secret
    /// volume (new files, then a rename): with the pair signed by the CA, or with a self-signed
    /// pair the collector refuses.
    fn put_client(&self, from_ca: bool) -> anyhow::Result<()> {
        let (cert, key) = if from_ca {
            self.client_pem.clone()
        } else {
            let key = rcgen::KeyPair::generate()?;
            let cert =
                rcgen::CertificateParams::new(vec!["localhost".to_string()])?.self_signed(&key)?;
            (cert.pem(), key.serialize_pem())
        };
        for (path, body) in [(&self.client.0, cert), (&self.client.1, key)] {
            let tmp = format!("{path}.new");
            std::fs::write(&tmp, body)?;
            std::fs::rename(&tmp, path)?;
        }
        Ok(())
    }

    /// A rustls server configuration that presents the collector's certificate and requires a
    /// client certificate signed by the CA.
    fn server_config(&self, alpn: &[&[u8]]) -> anyhow::Result<rustls::ServerConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&self.ca)? {
            roots.add(c?)?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            provider.clone(),
        )
        .build()?;
        let chain = CertificateDer::pem_slice_iter(self.server.0.as_bytes())
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(self.server.1.as_bytes())?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A small OTLP/HTTP receiver on 127.0.0.1: keeps every decoded export request. With `pki`, it
/// speaks TLS and only accepts clients with a certificate from the CA.
async fn otlp_receiver(pki: Option<&Pki>) -> anyhow::Result<(u16, Received)> {
    otlp_receiver_on(0, pki).await
}

/// [`otlp_receiver`] on `port` (0: any free one).
async fn otlp_receiver_on(port: u16, pki: Option<&Pki>) -> anyhow::Result<(u16, Received)> {
    use axum::http::{StatusCode, header};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let got: Received = Default::default();
    let store = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let store = store.clone();
            async move {
                match ExportTraceServiceRequest::decode(body) {
                    Ok(r) => {
                        store.lock().unwrap().push(r);
                        (
                            StatusCode::OK,
                            [(header::CONTENT_TYPE, "application/x-protobuf")],
                            Vec::new(),
                        )
                    }
                    Err(e) => (
                        StatusCode::BAD_REQUEST,
                        [(header::CONTENT_TYPE, "text/plain")],
                        e.to_string().into_bytes(),
                    ),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let port = listener.local_addr()?.port();
    match pki {
        None => {
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
        Some(pki) => {
            let config = axum_server::tls_rustls::RustlsConfig::from_config(std::sync::Arc::new(
                pki.server_config(&[b"http/1.1"])?,
            ));
            let server = axum_server::from_tcp_rustls(listener.into_std()?, config)?;
            tokio::spawn(async move { server.serve(app.into_make_service()).await });
        }
    }
    Ok((port, got))
}

/// A small OTLP/gRPC receiver on 127.0.0.1: keeps every export request. With `pki`, it speaks
/// TLS and only accepts clients with a certificate from the CA.
async fn otlp_grpc_receiver(pki: Option<&Pki>) -> anyhow::Result<(u16, Received)> {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    struct Keep(Received);
    #[tonic::async_trait]
    impl TraceService for Keep {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            self.0.lock().unwrap().push(request.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }
    let got: Received = Default::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let service = TraceServiceServer::new(Keep(got.clone()));
    let mut server = tonic::transport::Server::builder();
    if let Some(pki) = pki {
        use tonic::transport::{Certificate, Identity, ServerTlsConfig};
        server = server.tls_config(
            ServerTlsConfig::new()
                .identity(Identity::from_pem(&pki.server.0, &pki.server.1))
                .client_ca_root(Certificate::from_pem(std::fs::read(&pki.ca)?)),
        )?;
    }
    tokio::spawn(async move {
        server
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
    });
    Ok((port, got))
}

/// A received span: its name, its attributes and its resource's, as strings.
#[derive(Debug)]
struct Span {
    name: String,
    attrs: std::collections::BTreeMap<String, String>,
    resource: std::collections::BTreeMap<String, String>,
    /// Hex, as in a traceparent header.
    trace_id: String,
    parent_span_id: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn spans(got: &Received) -> Vec<Span> {
    use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value::Value};
    let map = |kvs: &[KeyValue]| {
        kvs.iter()
            .map(|kv| {
                let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(Value::StringValue(s)) => s.clone(),
                    Some(Value::IntValue(i)) => i.to_string(),
                    Some(Value::BoolValue(b)) => b.to_string(),
                    Some(Value::DoubleValue(d)) => d.to_string(),
                    other => format!("{other:?}"),
                };
                (kv.key.clone(), v)
            })
            .collect()
    };
    let mut out = Vec::new();
    for req in got.lock().unwrap().iter() {
        for rs in &req.resource_spans {
            let resource = rs
                .resource
                .as_ref()
                .map(|r| map(&r.attributes))
                .unwrap_or_default();
            for ss in &rs.scope_spans {
                for s in &ss.spans {
                    out.push(Span {
                        name: s.name.clone(),
                        attrs: map(&s.attributes),
                        resource: std::collections::BTreeMap::clone(&resource),
                        trace_id: hex(&s.trace_id),
                        parent_span_id: hex(&s.parent_span_id),
                    });
                }
            }
        }
    }
    out
}

// Multi-threaded: the receiver keeps answering while the test waits for the process to exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn traces_of_admissions_and_reconciles_reach_an_otlp_http_receiver_at_shutdown()
-> anyhow::Result<()> {
    traces_reach_a_receiver_at_shutdown("http/protobuf", Tls::Off).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn traces_of_admissions_and_reconciles_reach_an_otlp_grpc_receiver_at_shutdown()
-> anyhow::Result<()> {
    traces_reach_a_receiver_at_shutdown("grpc", Tls::Off).await
}

// The collector has a certificate from a private CA and requires a client certificate: the
// operator is given the CA and its client pair through the standard OTEL_* variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn traces_reach_an_https_receiver_with_a_private_ca_and_mutual_tls() -> anyhow::Result<()> {
    traces_reach_a_receiver_at_shutdown("http/protobuf", Tls::Mutual).await
}

// The operator starts with a client certificate the collector refuses; the files are renewed
// while it runs, and the export at shutdown (its first connection) uses the new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn a_renewed_client_certificate_is_used_without_a_restart_over_https() -> anyhow::Result<()> {
    traces_reach_a_receiver_at_shutdown("http/protobuf", Tls::RenewedWhileRunning).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn a_renewed_client_certificate_is_used_without_a_restart_over_grpc() -> anyhow::Result<()> {
    traces_reach_a_receiver_at_shutdown("grpc", Tls::RenewedWhileRunning).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn traces_reach_a_grpc_receiver_with_a_private_ca_and_mutual_tls() -> anyhow::Result<()> {
    traces_reach_a_receiver_at_shutdown("grpc", Tls::Mutual).await
}

#[derive(Clone, Copy, PartialEq)]
enum Tls {
    /// Plain text.
    Off,
    /// A collector with a certificate from a private CA that requires client certificates.
    Mutual,
    /// The same, with the client certificate renewed after the operator started.
    RenewedWhileRunning,
}

async fn traces_reach_a_receiver_at_shutdown(protocol: &str, tls: Tls) -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-otlp-{s}"), format!("e2e-otlp-{s}"));
    create_namespace(&c, &ns, json!({})).await?;
    let pki = (tls != Tls::Off).then(|| Pki::new(&name)).transpose()?;
    if let Some(pki) = &pki {
        pki.put_client(tls != Tls::RenewedWhileRunning)?;
    }
    let (otlp_port, got) = if protocol == "grpc" {
        otlp_grpc_receiver(pki.as_ref()).await?
    } else {
        otlp_receiver(pki.as_ref()).await?
    };
    let port = free_port();
    let log = log_path(&name);
    let scheme = if tls == Tls::Off { "http" } else { "https" };
    let endpoint = format!("{scheme}://127.0.0.1:{otlp_port}");
    // A minute between exports: what arrives before the process ends can only come from the
    // flush at shutdown.
    let mut env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
    ];
    if let Some(pki) = &pki {
        env.extend([
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.ca.as_str()),
            (
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                pki.client.0.as_str(),
            ),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", pki.client.1.as_str()),
        ]);
    }
    let mut op = Operator::start_with_env(
        &as_strs(&standalone_args(&ns, &name, port)),
        &env,
        port,
        &log,
    )?;
    let ss = format!("e2e-traced-{s}");
    let pod_name = format!("traced-{s}");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let trace_id = format!("{:032x}", nanos ^ (u128::from(std::process::id()) << 64));
    let client_span = format!("{:016x}", (nanos as u64) | 1);
    let result = async {
        let label = format!("traced-{s}");
        wait_webhooks_trusted(&c, &name).await?;
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
            "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": [{"name": "traced", "image": "registry.local/t:1"}]}
        })).await?;
        wait_injectable(&c, TARGET_NS, &pod("p", json!({"e2e-app": label})), "traced", true).await?;
        // The pod is created in a trace of the test's own: kube-apiserver passes the client's
        // traceparent on to the webhooks it calls, and the admission span joins that trace.
        let mut req = kube::core::Request::new(format!("/api/v1/namespaces/{TARGET_NS}/pods"))
            .create(
                &PostParams::default(),
                serde_json::to_vec(&pod(&pod_name, json!({"e2e-app": label})))?,
            )?;
        req.headers_mut()
            .insert("traceparent", format!("00-{trace_id}-{client_span}-01").parse()?);
        let created: Pod = c.request(req).await?;
        anyhow::ensure!(container_names(&created).contains(&"traced".to_string()));
        // The controller has seen the pod once the status counts it.
        eventually(20, "the SidecarSet's status to count the pod", || {
            let (c, ss) = (c.clone(), ss.clone());
            async move {
                let got = Api::<sidecarset_core::api::SidecarSet>::all(c).get(&ss).await?;
                Ok((got.status.map(|s| s.matched_pods) == Some(1)).then_some(()))
            }
        })
        .await?;
        if let Some(pki) = &pki
            && tls == Tls::RenewedWhileRunning
        {
            pki.put_client(true)?;
        }
        let before = spans(&got).len();
        delete_sidecarset(&c, &ss).await;
        let t = Instant::now();
        let status = op.terminate(40)?;
        println!("operator exited {status} {:?} after SIGTERM", t.elapsed());
        anyhow::ensure!(status.success(), "the operator exited with {status}");
        anyhow::ensure!(before == 0, "{before} spans arrived before shutdown despite the 60 s export delay");
        let all = spans(&got);
        println!("{} spans received at shutdown", all.len());
        let admission = all
            .iter()
            .find(|sp| sp.name == "mutate-pod" && sp.attrs.get("pod") == Some(&pod_name))
            .ok_or_else(|| anyhow::anyhow!("no mutate-pod span for {pod_name}; names: {:?}",
                all.iter().map(|s| &s.name).collect::<std::collections::BTreeSet<_>>()))?;
        println!(
            "admission span: trace {} parent {} (the request's traceparent: trace {trace_id} span {client_span})",
            admission.trace_id, admission.parent_span_id
        );
        anyhow::ensure!(
            admission.trace_id == trace_id && !admission.parent_span_id.is_empty(),
            "the admission span did not join the request's trace {trace_id}: trace {} parent {:?}",
            admission.trace_id,
            admission.parent_span_id
        );
        let a = &admission.attrs;
        anyhow::ensure!(
            a.get("namespace").map(String::as_str) == Some(TARGET_NS)
                && a.get("operation").map(String::as_str) == Some("CREATE")
                && a.get("kind").map(String::as_str) == Some("Pod")
                && a.get("dry_run").map(String::as_str) == Some("false")
                && a.get("result").map(String::as_str) == Some("patched")
                && a.get("sidecarsets") == Some(&ss)
                && a.get("uid").is_some_and(|u| !u.is_empty())
                && a.get("patch_operations").is_some_and(|n| n != "0"),
            "admission span attributes: {a:?}"
        );
        anyhow::ensure!(
            admission.resource.get("service.name").map(String::as_str) == Some("sidecarset-operator"),
            "resource: {:?}",
            admission.resource
        );
        anyhow::ensure!(
            all.iter().any(|sp| sp.name == "validate-sidecarset" && sp.attrs.get("sidecarset") == Some(&ss)),
            "no validate-sidecarset span for {ss}"
        );
        anyhow::ensure!(
            all.iter().any(|sp| sp.name == "reconcile SidecarSet"
                && sp.attrs.get("sidecarset") == Some(&ss)
                && sp.attrs.get("matched").map(String::as_str) == Some("1")),
            "no reconcile span for {ss} counting the pod"
        );
        anyhow::Ok(())
    }
    .await;
    drop(op);
    delete_sidecarset(&c, &ss).await;
    let _ = Api::<Pod>::namespaced(c.clone(), TARGET_NS)
        .delete(&pod_name, &DeleteParams::default())
        .await;
    cleanup(&c, &name, &ns).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log:\n{}", tail(&log)))
}

// The collector is down when the operator starts: failed spans are counted and the outage is
// logged (once, not per batch); when a collector comes up on that address, export resumes and
// that is logged too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn a_collector_outage_is_counted_and_logged_and_export_resumes() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-outage-{s}"), format!("e2e-outage-{s}"));
    create_namespace(&c, &ns, json!({})).await?;
    let (port, otlp_port, metrics_port) = (free_port(), free_port(), free_port());
    let metrics = format!("127.0.0.1:{metrics_port}");
    let log = log_path(&name);
    let mut args = standalone_args(&ns, &name, port);
    args.extend(["--metrics-listen".to_string(), metrics.clone()]);
    let mut op = Operator::start_with_env(
        &as_strs(&args),
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &format!("http://127.0.0.1:{otlp_port}"),
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ],
        port,
        &log,
    )?;
    let ss = format!("e2e-outage-{s}");
    let sample = |state: &str| {
        format!("sidecarset_operator_trace_spans_exported_total{{result=\"{state}\"}}")
    };
    let result = async {
        wait_webhooks_trusted(&c, &name).await?;
        // Admissions and reconciles make spans.
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
            "spec": {"selector": {"matchLabels": {"e2e-app": format!("outage-{s}")}}, "containers": [{"name": "o", "image": "registry.local/o:1"}]}
        })).await?;
        let failed = eventually(20, "failed spans to be counted", || {
            let metrics = metrics.clone();
            let sample = sample("failed");
            async move {
                let v = value(&scrape_metrics(&metrics, "metrics").await?, &sample);
                Ok((v > 0.0).then_some(v))
            }
        })
        .await?;
        // More failed batches (validations of dry-run updates, exported 200 ms apart), then the
        // log: one line for the outage so far.
        let touch = || {
            let (c, ss) = (c.clone(), ss.clone());
            async move {
                Api::<sidecarset_core::api::SidecarSet>::all(c)
                    .patch(
                        &ss,
                        &PatchParams { dry_run: true, ..Default::default() },
                        &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
                    )
                    .await
            }
        };
        for _ in 0..3 {
            touch().await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let more = value(&scrape_metrics(&metrics, "metrics").await?, &sample("failed"));
        anyhow::ensure!(more > failed, "failed spans {failed} then {more}: later batches were not counted");
        let text = std::fs::read_to_string(&log)?;
        let lines = text.matches("cannot export traces").count();
        anyhow::ensure!(lines == 1, "{lines} lines saying \"cannot export traces\" (want 1 per outage start)");
        println!("{more} spans failed in several batches; the outage was logged once");
        let (_, got) = otlp_receiver_on(otlp_port, None).await?;
        // New spans: validations of dry-run updates of the SidecarSet.
        eventually(20, "spans to reach the collector once it is up", || {
            let (got, metrics) = (got.clone(), metrics.clone());
            let sample = sample("exported");
            let touched = touch();
            async move {
                touched.await?;
                let exported = value(&scrape_metrics(&metrics, "metrics").await?, &sample);
                Ok((exported > 0.0 && !spans(&got).is_empty()).then_some(()))
            }
        })
        .await?;
        eventually(5, "the log to say export works again", || {
            let log = log.clone();
            async move { Ok(std::fs::read_to_string(&log)?.contains("exporting traces again").then_some(())) }
        })
        .await?;
        anyhow::Ok(())
    }
    .await;
    drop(op.terminate(20));
    delete_sidecarset(&c, &ss).await;
    cleanup(&c, &name, &ns).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log:\n{}", tail(&log)))
}

/// The CRD's conversion caBundle, decoded (PEM), and where it points.
async fn crd_conversion(c: &kube::Client) -> anyhow::Result<(Vec<u8>, Option<String>)> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = Api::<CustomResourceDefinition>::all(c.clone())
        .get(sidecarset_core::api::CRD_NAME)
        .await?;
    let cc = crd
        .spec
        .conversion
        .and_then(|cv| cv.webhook)
        .and_then(|w| w.client_config);
    Ok((
        cc.as_ref()
            .and_then(|c| c.ca_bundle.clone())
            .map(|b| b.0)
            .unwrap_or_default(),
        cc.and_then(|c| c.url),
    ))
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn the_crd_conversion_webhook_points_here_and_is_repaired_when_overwritten()
-> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-conv-{s}"), format!("e2e-conv-{s}"));
    create_namespace(&c, &ns, json!({})).await?;
    let port = free_port();
    let log = log_path(&name);
    let op = Operator::start(&as_strs(&standalone_args(&ns, &name, port)), port, &log)?;
    let url = format!("https://127.0.0.1:{port}/convert");
    let result = async {
        let ours = eventually(15, "the CRD's conversion webhook to point here", || {
            let (c, url) = (c.clone(), url.clone());
            async move {
                let (bundle, at) = crd_conversion(&c).await?;
                Ok((at.as_deref() == Some(url.as_str()) && !bundle.is_empty()).then_some(bundle))
            }
        })
        .await?;
        // Someone else overwrites caBundle (another manager, forced).
        let other = certs::generate_ca(
            &certs::CertConfig {
                service: "x".into(), namespace: "x".into(), extra_dns: vec![], extra_ips: vec![],
                ca_validity: Duration::from_secs(86400), leaf_validity: Duration::from_secs(3600),
                renew_at: 0.5, overlap: Duration::from_secs(60),
            },
            jiff::Timestamp::now().as_second(),
        )
        .map_err(anyhow::Error::msg)?
        .0;
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        Api::<CustomResourceDefinition>::all(c.clone())
            .patch(
                sidecarset_core::api::CRD_NAME,
                &PatchParams::apply("e2e-intruder").force(),
                &Patch::Apply(&sidecarset_core::api::conversion_patch(
                    &sidecarset_core::api::ConversionTarget::Url(format!("https://127.0.0.1:{port}")),
                    Some(&other),
                )),
            )
            .await?;
        let t = Instant::now();
        eventually(10, "the conversion caBundle to be repaired", || {
            let (c, ours) = (c.clone(), ours.clone());
            async move {
                let (bundle, _) = crd_conversion(&c).await?;
                Ok((bundle == ours).then_some(()))
            }
        })
        .await?;
        println!("CRD conversion caBundle repaired {:?} after it was overwritten", t.elapsed());
        // v1alpha1 works through it.
        create_sidecarset(&c, json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"e2e-app": format!("conv-{s}")}}, "containers": [{"name": "c", "image": "registry.local/c:1"}]}}))
        .await?;
        delete_sidecarset(&c, &name).await;
        anyhow::Ok(())
    }
    .await;
    drop(op);
    cleanup(&c, &name, &ns).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log:\n{}", tail(&log)))
}

#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn pods_without_their_sidecars_are_evicted_within_pdbs_and_the_rate() -> anyhow::Result<()> {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::api::ListParams;
    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-evict-{s}"), format!("e2e-evict-{s}"));
    let app = format!("e2e-evict-app-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    create_namespace(&c, &app, json!({})).await?;
    let port = free_port();
    let log = log_path(&name);
    let mut args = standalone_args(&ns, &name, port);
    args.extend(
        [
            "--evict-pods-without-sidecars=true",
            "--evictions-per-minute",
            "2",
            "--evictions-per-hour",
            "3",
        ]
        .map(String::from),
    );
    let mut op = Some(Operator::start(&as_strs(&args), port, &log)?);
    let app2 = format!("e2e-evict-app2-{s}");
    create_namespace(&c, &app2, json!({})).await?;
    let result = async {
        let label = format!("evict-{s}");
        let pods: Api<Pod> = Api::namespaced(c.clone(), &app);
        // Three pods and a PDB that allows no disruption, before any SidecarSet selects them.
        create_web_deployment(&c, &app, &label, 3).await?;
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 3, "selector": {"matchLabels": {"e2e-app": label}}}
        }))?;
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), &app);
        pdbs.create(&PostParams::default(), &pdb).await?;
        let running = |pods: Api<Pod>| async move {
            let l = pods.list(&ListParams::default()).await?;
            Ok::<_, anyhow::Error>(l.items)
        };
        let originals: Vec<String> = eventually(60, "3 ready pods and the PDB counting them", || {
            let (pods, pdbs) = (pods.clone(), pdbs.clone());
            async move {
                let l = running(pods).await?;
                let healthy = pdbs
                    .get("web")
                    .await?
                    .status
                    .and_then(|s| s.current_healthy)
                    .unwrap_or(0);
                Ok((l.len() == 3 && healthy == 3)
                    .then(|| l.iter().filter_map(|p| p.metadata.uid.clone()).collect()))
            }
        })
        .await?;
        wait_webhooks_trusted(&c, &name).await?;
        let ss = format!("e2e-evict-{s}");
        // Opted in, older pods too ("all"): the pods predate the SidecarSet.
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": ss, "annotations": {"sidecarset-operator.io/evict-pods-without-sidecars": "all"}},
            "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": [{"name": "mesh", "image": "registry.local/mesh:1"}]}
        })).await?;
        let sets: Api<sidecarset_core::api::SidecarSet> = Api::all(c.clone());
        eventually(30, "status.podsWithoutSidecars = 3", || {
            let (sets, ss) = (sets.clone(), ss.clone());
            async move {
                Ok((sets.get(&ss).await?.status.and_then(|s| s.pods_without_sidecars) == Some(3))
                    .then_some(()))
            }
        })
        .await?;
        // The PDB allows no eviction: the pods stay.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now: Vec<String> = running(pods.clone())
            .await?
            .iter()
            .filter_map(|p| p.metadata.uid.clone())
            .collect();
        anyhow::ensure!(
            originals.iter().all(|u| now.contains(u)),
            "a pod was evicted despite the PodDisruptionBudget"
        );
        // The replacements must come through the webhook: a new pod of the Deployment is
        // injected (through the API server, so the pod webhook's match conditions cover the new
        // SidecarSet) before evictions may start; otherwise a replacement created without its
        // sidecar rightly opens the owner's circuit and the rest is never evicted.
        wait_injectable(&c, &app, &pod("probe", json!({"e2e-app": label})), "mesh", true).await?;
        // Without the PDB: evicted at 2 a minute (a burst of 2, then one every 30 s), recreated
        // with their sidecars.
        pdbs.delete("web", &DeleteParams::default()).await?;
        let t0 = Instant::now();
        let mut gone_at: Vec<Duration> = Vec::new();
        let deadline = t0 + Duration::from_secs(90);
        while gone_at.len() < 3 {
            anyhow::ensure!(Instant::now() < deadline, "only {} of 3 pods evicted in 90 s", gone_at.len());
            let l = running(pods.clone()).await?;
            let left = originals
                .iter()
                .filter(|u| l.iter().any(|p| p.metadata.uid.as_ref() == Some(*u) && p.metadata.deletion_timestamp.is_none()))
                .count();
            while gone_at.len() < 3 - left {
                gone_at.push(t0.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        println!("evictions after the PDB was deleted: {gone_at:?}");
        anyhow::ensure!(
            gone_at[2] >= gone_at[0] + Duration::from_secs(20),
            "the third eviction came {:?} after the first: faster than 2 a minute",
            gone_at[2] - gone_at[0]
        );
        eventually(60, "every pod injected and none counted", || {
            let (pods, sets, ss) = (pods.clone(), sets.clone(), ss.clone());
            async move {
                let l = running(pods).await?;
                let all = l.len() == 3
                    && l.iter().all(|p| container_names(p).contains(&"mesh".to_string()));
                let none = sets.get(&ss).await?.status.is_some_and(|s| s.pods_without_sidecars.is_none());
                Ok((all && none).then_some(()))
            }
        })
        .await?;
        // The hour's budget (3) is spent, and it is kept in the API: a new leader (a new
        // process) does not evict the pods the SidecarSet now selects too.
        let label2 = format!("evict2-{s}");
        create_web_deployment(&c, &app2, &label2, 2).await?;
        let pods2: Api<Pod> = Api::namespaced(c.clone(), &app2);
        let second: Vec<String> = eventually(60, "2 pods of the second Deployment", || {
            let pods2 = pods2.clone();
            async move {
                let l = running(pods2).await?;
                Ok((l.len() == 2).then(|| l.iter().filter_map(|p| p.metadata.uid.clone()).collect()))
            }
        })
        .await?;
        op.take();
        op = Some(Operator::start(&as_strs(&args), port, &log)?);
        let sets: Api<sidecarset_core::api::SidecarSet> = Api::all(c.clone());
        // Through the new process's conversion webhook (v1alpha1): retried until it serves.
        let widen = json!({"spec": {"selector": {
            "matchLabels": null,
            "matchExpressions": [{"key": "e2e-app", "operator": "In", "values": [label, label2]}]}}});
        eventually(30, "the SidecarSet's selector widened through the new process", || {
            let (sets, ss, widen) = (sets.clone(), ss.clone(), widen.clone());
            async move {
                Ok(sets.patch(&ss, &PatchParams::default(), &Patch::Merge(widen)).await.ok().map(|_| ()))
            }
        })
        .await?;
        eventually(30, "status.podsWithoutSidecars = 2 after the restart", || {
            let (sets, ss) = (sets.clone(), ss.clone());
            async move {
                Ok((sets.get(&ss).await?.status.and_then(|s| s.pods_without_sidecars) == Some(2))
                    .then_some(()))
            }
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(15)).await;
        let left = running(pods2.clone()).await?;
        let kept = second
            .iter()
            .filter(|u| left.iter().any(|p| p.metadata.uid.as_ref() == Some(*u) && p.metadata.deletion_timestamp.is_none()))
            .count();
        println!("after a restart with the hour's budget of 3 spent: {kept} of 2 newly selected pods kept");
        anyhow::ensure!(kept == 2, "a new leader evicted past the hour's budget: {kept} of 2 pods kept");
        delete_sidecarset(&c, &ss).await;
        anyhow::Ok(())
    }
    .await;
    drop(op);
    delete_namespace(&c, &app2).await;
    delete_namespace(&c, &app).await;
    cleanup(&c, &name, &ns).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log:\n{}", tail(&log)))
}

/// The operator's metrics on `addr`.
async fn metrics_of(addr: &str) -> String {
    scrape_metrics(addr, "metrics").await.unwrap_or_default()
}

/// Waits until the SidecarSet `name` has a status that observed its generation.
async fn wait_status(c: &kube::Client, name: &str) -> anyhow::Result<()> {
    let sets: Api<sidecarset_core::api::SidecarSet> = Api::all(c.clone());
    eventually(30, "the SidecarSet's status", || {
        let sets = sets.clone();
        let name = name.to_string();
        async move {
            let ss = sets.get(&name).await?;
            Ok(
                (ss.status.as_ref().and_then(|s| s.observed_generation) == ss.metadata.generation
                    && ss.metadata.generation.is_some())
                .then_some(()),
            )
        }
    })
    .await
}

/// Two SidecarSets inject a container of the same name into a Deployment's pods: the webhook
/// injects the first and skips the second (a conflict), so the second's pods run without its
/// sidecars for good. With evictions on and both opted in, evicting them would only recreate
/// them the same way, forever: the operator must report, never evict. A pod whose controller is
/// not a kind that recreates pods from a template (here a ConfigMap) is never evicted either.
/// Runs `SSO_E2E_SOAK_SECS` (default 20) seconds: at 60 evictions a minute, a loop shows within
/// the first seconds; longer soaks (600 s was run by hand) are for runs by hand.
#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn evictions_never_loop_on_a_conflict_nor_touch_pods_of_unknown_owners() -> anyhow::Result<()>
{
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ListParams;
    let soak = std::env::var("SSO_E2E_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20u64);
    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-loop-{s}"), format!("e2e-loop-{s}"));
    let app = format!("e2e-loop-app-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    create_namespace(&c, &app, json!({})).await?;
    let port = free_port();
    let log = log_path(&name);
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut args = standalone_args(&ns, &name, port);
    args.extend(
        [
            "--evict-pods-without-sidecars=true",
            "--evictions-per-minute",
            "60",
            "--metrics-listen",
            &metrics,
        ]
        .map(String::from),
    );
    let label = format!("loop-{s}");
    let opted = json!({"sidecarset-operator.io/evict-pods-without-sidecars": "all"});
    let (first, second, third) = (
        format!("e2e-loop-a-{s}"),
        format!("e2e-loop-b-{s}"),
        format!("e2e-loop-c-{s}"),
    );
    // The conflicting pair gets in before the operator (and its validating webhook, which
    // refuses the second) runs: as after a migration, or two applied at the same instant.
    // v1beta1, the stored version: no conversion webhook is needed while no operator runs.
    let stored: Api<sidecarset_core::api::v1beta1::SidecarSet> = Api::all(c.clone());
    for ss in [&first, &second] {
        stored
            .create(&PostParams::default(), &serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
                "metadata": {"name": ss, "annotations": opted},
                "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                         "containers": [{"name": "proxy", "image": format!("registry.local/{ss}:1")}]}
            }))?)
            .await?;
    }
    let op = Operator::start(&as_strs(&args), port, &log)?;
    let result = async {
        wait_webhooks_trusted(&c, &name).await?;
        wait_default_sa(&c, &app).await?;
        wait_injectable(&c, &app, &pod("probe", json!({"e2e-app": label})), "proxy", true).await?;
        create_web_deployment(&c, &app, &label, 2).await?;
        // A pod whose controller is a ConfigMap (as mirror pods have a Node, workflow pods their
        // workflow): created before the SidecarSet that selects it.
        let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &app);
        let owner = cms
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "owner"}}))?)
            .await?;
        let mut orphan = pod("owned-by-a-configmap", json!({"e2e-orphan": label}));
        orphan.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid, "controller": true}))?]);
        let pods: Api<Pod> = Api::namespaced(c.clone(), &app);
        pods.create(&PostParams::default(), &orphan).await?;
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": third, "annotations": opted},
            "spec": {"selector": {"matchLabels": {"e2e-orphan": label}},
                     "containers": [{"name": "other", "image": "registry.local/other:1"}]}
        })).await?;
        let uids = |l: &[Pod]| -> std::collections::BTreeSet<String> {
            l.iter().filter_map(|p| p.metadata.uid.clone()).collect()
        };
        let originals = eventually(60, "2 web pods with the first SidecarSet, and the orphan", || {
            let pods = pods.clone();
            let first = first.clone();
            async move {
                let l = pods.list(&ListParams::default()).await?.items;
                let web = l.iter().filter(|p| p.name_any().starts_with("web-")).count();
                let injected = l
                    .iter()
                    .filter(|p| p.name_any().starts_with("web-"))
                    .all(|p| p.annotations().get("kruise.io/sidecarset-injected-list").is_some_and(|v| v.contains(first.as_str())));
                Ok((web == 2 && injected && l.len() == 3).then(|| uids(&l)))
            }
        })
        .await?;
        let sets: Api<sidecarset_core::api::SidecarSet> = Api::all(c.clone());
        eventually(30, "the second SidecarSet to count its 2 pods without sidecars", || {
            let (sets, second) = (sets.clone(), second.clone());
            async move {
                Ok((sets.get(&second).await?.status.and_then(|s| s.pods_without_sidecars) == Some(2))
                    .then_some(()))
            }
        })
        .await?;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(soak) {
            let now = uids(&pods.list(&ListParams::default()).await?.items);
            anyhow::ensure!(
                now == originals,
                "pods were evicted after {:?}: {} of the original pods left",
                t0.elapsed(),
                originals.intersection(&now).count()
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let m = metrics_of(&metrics).await;
        let evicted = value(&m, &format!("sidecarset_operator_pods_evicted_total{{sidecarset=\"{second}\"}}"))
            + value(&m, &format!("sidecarset_operator_pods_evicted_total{{sidecarset=\"{third}\"}}"));
        let withheld = |ss: &str, reason: &str| {
            value(&m, &format!("sidecarset_operator_evictions_withheld_total{{sidecarset=\"{ss}\",reason=\"{reason}\"}}"))
        };
        let (not_injectable, not_allowed) = (withheld(&second, "not_injectable"), withheld(&third, "owner_not_allowed"));
        use k8s_openapi::api::core::v1::Event;
        let events: Vec<Event> = Api::<Event>::namespaced(c.clone(), &app)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("SidecarSetMissing"))
            .filter(|e| e.involved_object.kind.as_deref() == Some("ReplicaSet"))
            .collect();
        println!(
            "{soak} s with two conflicting SidecarSets and evictions on: {evicted} evictions, \
             {not_injectable} withheld as not injectable, {not_allowed} withheld for the owner's kind, \
             {} SidecarSetMissing Event(s) on the ReplicaSet",
            events.len()
        );
        anyhow::ensure!(evicted == 0.0, "{evicted} pods evicted");
        anyhow::ensure!(not_injectable > 0.0, "the conflict was never looked at (withheld: 0)");
        anyhow::ensure!(not_allowed > 0.0, "the ConfigMap-owned pod was never looked at");
        anyhow::ensure!(events.len() == 1, "{} SidecarSetMissing Events on the ReplicaSet, want 1", events.len());
        for ss in [&first, &second, &third] {
            delete_sidecarset(&c, ss).await;
        }
        anyhow::Ok(())
    }
    .await;
    drop(op);
    for ss in [&first, &second, &third] {
        delete_sidecarset(&c, ss).await;
    }
    delete_namespace(&c, &app).await;
    cleanup(&c, &name, &ns).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log:\n{}", tail(&log)))
}

/// A StatefulSet whose pods come back without the sidecars for a cause the webhook cannot see:
/// here no pod webhook at all (the operator runs without webhook configurations, as when pods
/// are created while the webhook is absent or under `failurePolicy: Ignore` and unreachable),
/// while the operator's own injection decision says the SidecarSet would be injected. Its
/// `db-0`, evicted, is recreated bare under the same name: the replacement is recognised by its
/// uid, so the owner's circuit opens after that one eviction: no loop (no second eviction in
/// `SSO_E2E_SOAK_SECS`, default 20, at 60 evictions a minute), and one
/// `SidecarSetEvictionStopped` Event on the StatefulSet.
#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn a_statefulset_whose_pods_come_back_bare_is_evicted_once_not_in_a_loop()
-> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Event;
    use kube::api::ListParams;
    let soak = std::env::var("SSO_E2E_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20u64);
    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-sts-{s}"), format!("e2e-sts-{s}"));
    let app = format!("e2e-sts-app-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    create_namespace(&c, &app, json!({})).await?;
    let port = free_port();
    let log = log_path(&name);
    let metrics = format!("127.0.0.1:{}", free_port());
    // No --manage-webhooks: no pod webhook; the CRD's conversion points here (v1alpha1 reads).
    let mut args = instance_args(&ns, &name);
    args.extend(
        [
            "--webhook-url",
            &format!("https://127.0.0.1:{port}"),
            "--evict-pods-without-sidecars=true",
            "--evictions-per-minute",
            "60",
            "--metrics-listen",
            &metrics,
        ]
        .map(String::from),
    );
    let label = format!("sts-{s}");
    let ss = format!("e2e-sts-{s}");
    // v1beta1, the stored version: no conversion webhook is needed before the operator runs.
    let stored: Api<sidecarset_core::api::v1beta1::SidecarSet> = Api::all(c.clone());
    stored
        .create(&PostParams::default(), &serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": ss, "annotations": {"sidecarset-operator.io/evict-pods-without-sidecars": "all"}},
            "spec": {"selector": {"matchLabels": {"e2e-app": label}},
                     "containers": [{"name": "mesh", "image": "registry.local/mesh:1"}]}
        }))?)
        .await?;
    let result = async {
        wait_default_sa(&c, &app).await?;
        let sts: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "db"},
            "spec": {"replicas": 1, "serviceName": "db",
                     "selector": {"matchLabels": {"e2e-app": label}},
                     "template": {"metadata": {"labels": {"e2e-app": label}},
                                  "spec": {"containers": [{"name": "app", "image": "registry.local/db:1"}]}}}
        }))?;
        Api::<StatefulSet>::namespaced(c.clone(), &app)
            .create(&PostParams::default(), &sts)
            .await?;
        let pods: Api<Pod> = Api::namespaced(c.clone(), &app);
        // db-0's uid while it exists and is not being deleted, and whether it has the sidecar.
        let db0 = |pods: Api<Pod>| async move {
            let p = pods.get_opt("db-0").await?;
            Ok::<_, anyhow::Error>(
                p.filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| (p.metadata.uid.clone().unwrap_or_default(), container_names(&p).contains(&"mesh".to_string()))),
            )
        };
        let mut uids = vec![eventually(60, "db-0 created", || {
            let pods = pods.clone();
            async move { Ok(db0(pods).await?.map(|(u, _)| u)) }
        })
        .await?];
        // The operator starts once the first db-0 is known: started before, it can evict and
        // the StatefulSet recreate db-0 before the first look, which then takes the
        // replacement for the first pod and waits for a second eviction that never comes.
        let _op = Operator::start(&as_strs(&args), port, &log)?;
        // Evicted (its sidecar missing) and recreated by the StatefulSet, bare again.
        let replacement = eventually(90, "db-0 evicted and recreated under its name", || {
            let (pods, first) = (pods.clone(), uids[0].clone());
            async move { Ok(db0(pods).await?.filter(|(u, _)| *u != first)) }
        })
        .await?;
        anyhow::ensure!(!replacement.1, "the replacement has the sidecar: no pod webhook was expected");
        uids.push(replacement.0);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(soak) {
            if let Some((u, _)) = db0(pods.clone()).await?
                && !uids.contains(&u)
            {
                uids.push(u);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let m = metrics_of(&metrics).await;
        let evicted = value(&m, &format!("sidecarset_operator_pods_evicted_total{{sidecarset=\"{ss}\"}}"));
        let circuit_open = value(
            &m,
            &format!("sidecarset_operator_evictions_withheld_total{{sidecarset=\"{ss}\",reason=\"circuit_open\"}}"),
        );
        anyhow::ensure!(
            uids.len() == 2 && evicted == 1.0,
            "db-0 evicted in a loop: {} instances, {evicted} evictions",
            uids.len()
        );
        let stopped = |events: &[Event]| {
            events
                .iter()
                .filter(|e| e.reason.as_deref() == Some("SidecarSetEvictionStopped"))
                .filter(|e| e.involved_object.kind.as_deref() == Some("StatefulSet"))
                .filter(|e| e.involved_object.name.as_deref() == Some("db"))
                .count()
        };
        let events = eventually(30, "the SidecarSetEvictionStopped Event on the StatefulSet", || {
            let events: Api<Event> = Api::namespaced(c.clone(), &app);
            async move {
                let l = events.list(&ListParams::default()).await?.items;
                Ok((stopped(&l) > 0).then_some(l))
            }
        })
        .await?;
        println!(
            "StatefulSet db, {soak} s after its db-0 came back bare: {} db-0 instance(s), {evicted} eviction(s), \
             {circuit_open} withheld for the open circuit, {} SidecarSetEvictionStopped Event(s) on the StatefulSet",
            uids.len(),
            stopped(&events)
        );
        anyhow::ensure!(circuit_open > 0.0, "the replacement was never looked at again");
        anyhow::ensure!(stopped(&events) == 1, "{} SidecarSetEvictionStopped Events, want 1", stopped(&events));
        anyhow::Ok(())
    }
    .await;
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &app).await;
    cleanup(&c, &name, &ns).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log:\n{}", tail(&log)))
}

/// A status written behind the leader's back (a former leader's late write, another writer)
/// does not stand: its watch event wakes the SidecarSet's reconcile, which rewrites it from its
/// plan, although nothing else changed and no periodic resync runs (`--resync-period 0`).
#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn a_status_written_behind_the_leaders_back_is_repaired_on_its_event() -> anyhow::Result<()> {
    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-resync-{s}"), format!("e2e-resync-{s}"));
    create_namespace(&c, &ns, json!({})).await?;
    let port = free_port();
    let log = log_path(&name);
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut args = standalone_args(&ns, &name, port);
    args.extend(["--resync-period", "0", "--metrics-listen", &metrics].map(String::from));
    let op = Operator::start(&as_strs(&args), port, &log)?;
    let ss = format!("e2e-resync-{s}");
    let result = async {
        wait_webhooks_trusted(&c, &name).await?;
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
            "spec": {"selector": {"matchLabels": {"e2e-app": format!("resync-{s}")}},
                     "containers": [{"name": "c", "image": "registry.local/c:1"}]}
        })).await?;
        wait_status(&c, &ss).await?;
        let sets: Api<sidecarset_core::api::SidecarSet> = Api::all(c.clone());
        let good = sets.get(&ss).await?.status;
        // A late write: counts the SidecarSet never had.
        sets.patch_status(
            &ss,
            &PatchParams::default(),
            &Patch::Merge(json!({
            "status": {"matchedPods": 7, "updatedPods": 3, "readyPods": 2}})),
        )
        .await?;
        let t = Instant::now();
        eventually(20, "the status to be repaired", || {
            let (sets, ss, good) = (sets.clone(), ss.clone(), good.clone());
            async move {
                let now = sets.get(&ss).await?.status;
                Ok(
                    (now.as_ref().map(|s| s.matched_pods) == good.as_ref().map(|s| s.matched_pods)
                        && now.as_ref().map(|s| s.ready_pods)
                            == good.as_ref().map(|s| s.ready_pods))
                    .then_some(()),
                )
            }
        })
        .await?;
        let repairs = value(
            &metrics_of(&metrics).await,
            "sidecarset_operator_status_repairs_total",
        );
        println!(
            "a foreign status write repaired {:?} after it; status_repairs_total {repairs}",
            t.elapsed()
        );
        anyhow::ensure!(repairs >= 1.0, "the repair was not counted");
        delete_sidecarset(&c, &ss).await;
        anyhow::Ok(())
    }
    .await;
    drop(op);
    delete_sidecarset(&c, &ss).await;
    cleanup(&c, &name, &ns).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log:\n{}", tail(&log)))
}

/// The operator loses, at run time, the right to write the SidecarSet CRD's conversion settings
/// (RBAC edited), and someone overwrites them: every replica shares that trouble, and it does not
/// make their admissions wrong, so the replica stays Ready and keeps injecting pods; the
/// condition (`/readyz`'s text, the `degraded` metric the chart's alert reads) says what.
#[tokio::test]
#[ignore = "starts operator processes reachable only from a local API server; run by hack/e2e-local.sh"]
async fn losing_the_right_to_write_the_crd_conversion_leaves_the_replica_ready_and_admitting()
-> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let c = client().await;
    let s = suffix();
    let (ns, name) = (format!("e2e-rbac-{s}"), format!("e2e-rbac-{s}"));
    let user = format!("e2e-restricted-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let roles: Api<ClusterRole> = Api::all(c.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(c.clone());
    let groups = [
        "",
        "apps",
        "apps.kruise.io",
        "coordination.k8s.io",
        "admissionregistration.k8s.io",
        "events.k8s.io",
        "policy",
        "authorization.k8s.io",
    ];
    let role = |crd_verbs: &[&str]| -> anyhow::Result<ClusterRole> {
        Ok(serde_json::from_value(
            json!({"metadata": {"name": name}, "rules": [
                {"apiGroups": groups, "resources": ["*"], "verbs": ["*"]},
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": crd_verbs}
            ]}),
        )?)
    };
    roles
        .create(
            &PostParams::default(),
            &role(&["get", "list", "watch", "patch", "update"])?,
        )
        .await?;
    bindings
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}))?,
        )
        .await?;
    let dir = std::env::temp_dir().join(&name);
    std::fs::create_dir_all(&dir)?;
    let kc = dir.join("restricted.kubeconfig");
    sidecarset_e2e::proxy::kubeconfig_through(None, &kc, Some(&user))?;
    // Only this user's rights: no system:masters.
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&kc)?)?;
    for u in doc["users"].as_array_mut().into_iter().flatten() {
        u["user"]["as-groups"] = json!(["system:authenticated"]);
    }
    std::fs::write(&kc, serde_json::to_string_pretty(&doc)?)?;
    let port = free_port();
    let log = log_path(&name);
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut args = standalone_args(&ns, &name, port);
    args.extend(["--cert-resync", "2s", "--metrics-listen", &metrics].map(String::from));
    // The pod it would run as (only a name: an Event's regarding object need not exist).
    let pod_name = format!("e2e-rbac-operator-{s}");
    let op = Operator::start_with_env(
        &as_strs(&args),
        &[
            ("KUBECONFIG", &kc.to_string_lossy()),
            ("POD_NAME", &pod_name),
        ],
        port,
        &log,
    )?;
    let ss = format!("e2e-rbac-{s}");
    let target = format!("e2e-rbac-pods-{s}");
    let result = async {
        wait_webhooks_trusted(&c, &name).await?;
        let url = format!("https://127.0.0.1:{port}/convert");
        eventually(15, "the CRD's conversion webhook to point here", || {
            let (c, url) = (c.clone(), url.clone());
            async move {
                let (bundle, at) = crd_conversion(&c).await?;
                Ok((at.as_deref() == Some(url.as_str()) && !bundle.is_empty()).then_some(()))
            }
        })
        .await?;
        create_namespace(&c, &target, json!({})).await?;
        wait_default_sa(&c, &target).await?;
        create_sidecarset(&c, json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
            "spec": {"selector": {"matchLabels": {"e2e-app": format!("rbac-{s}")}},
                     "containers": [{"name": "mesh", "image": "registry.local/mesh:1"}]}
        })).await?;
        wait_injectable(
            &c,
            &target,
            &pod("probe", json!({"e2e-app": format!("rbac-{s}")})),
            "mesh",
            true,
        )
        .await?;
        // The right goes; then someone else points the conversion elsewhere.
        roles
            .replace(
                &name,
                &PostParams::default(),
                &role(&["get", "list", "watch"])?,
            )
            .await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        Api::<CustomResourceDefinition>::all(c.clone())
            .patch(
                sidecarset_core::api::CRD_NAME,
                &PatchParams::apply("e2e-intruder").force(),
                &Patch::Apply(&sidecarset_core::api::conversion_patch(
                    &sidecarset_core::api::ConversionTarget::Url(
                        "https://127.0.0.1:1/convert".into(),
                    ),
                    None,
                )),
            )
            .await?;
        eventually(20, "the degraded condition crd_conversion", || {
            let metrics = metrics.clone();
            async move {
                let m = metrics_of(&metrics).await;
                Ok((value(
                    &m,
                    "sidecarset_operator_degraded{condition=\"crd_conversion\"}",
                ) == 1.0)
                    .then_some(()))
            }
        })
        .await?;
        // A Warning Event on its pod names the condition (the operator's namespace is `ns`).
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), &ns);
        let warning = eventually(20, "a Degraded Event on the operator's pod", || {
            let (events, pod_name) = (events.clone(), pod_name.clone());
            async move {
                Ok(events
                    .list(&Default::default())
                    .await?
                    .items
                    .into_iter()
                    .find(|e| {
                        e.reason.as_deref() == Some("Degraded")
                            && e.type_.as_deref() == Some("Warning")
                            && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                                == Some(pod_name.as_str())
                            && e.note
                                .as_deref()
                                .is_some_and(|n| n.contains("crd_conversion"))
                    }))
            }
        })
        .await?;
        println!(
            "Event on the operator's pod: {} {:?}",
            warning.reason.unwrap_or_default(),
            warning.note
        );
        // Ready, and saying what is wrong.
        let readyz = readyz(port).await?;
        anyhow::ensure!(
            readyz.0 == 200,
            "/readyz answered {}: {}",
            readyz.0,
            readyz.1
        );
        anyhow::ensure!(
            readyz.1.contains("degraded:") && readyz.1.contains("conversion"),
            "/readyz: {}",
            readyz.1
        );
        // Admissions flow: a pod is injected.
        let pods: Api<Pod> = Api::namespaced(c.clone(), &target);
        let mut injected = 0;
        for i in 0..5 {
            let p = pods
                .create(
                    &PostParams::default(),
                    &pod(&format!("p{i}"), json!({"e2e-app": format!("rbac-{s}")})),
                )
                .await?;
            injected += usize::from(container_names(&p).contains(&"mesh".to_string()));
        }
        println!(
            "conversion settings not writable: /readyz {} ({}), {injected}/5 pods injected",
            readyz.0,
            readyz
                .1
                .lines()
                .filter(|l| l.starts_with("degraded"))
                .collect::<Vec<_>>()
                .join("; ")
        );
        anyhow::ensure!(injected == 5, "{injected} of 5 pods injected");
        anyhow::Ok(())
    }
    .await;
    drop(op);
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &target).await;
    let _ = roles.delete(&name, &DeleteParams::default()).await;
    let _ = bindings.delete(&name, &DeleteParams::default()).await;
    // Point the CRD's conversion back where the suite's operator (or the next test) sets it:
    // whoever runs next repairs it; leave no stale caBundle of this test's CA.
    cleanup(&c, &name, &ns).await;
    result.map_err(|e| anyhow::anyhow!("{e:#}\noperator log:\n{}", tail(&log)))
}

/// GET https://127.0.0.1:`port`/readyz (certificate not checked): status and body.
async fn readyz(port: u16) -> anyhow::Result<(u16, String)> {
    let url = format!("https://127.0.0.1:{port}/readyz");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sk", "-w", "\n%{http_code}", &url])
            .output()
    })
    .await??;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    Ok((code.trim().parse().unwrap_or(0), body.to_string()))
}
