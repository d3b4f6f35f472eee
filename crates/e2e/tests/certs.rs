//! Self-managed certificates of the running operator: a deleted Secret comes back without any
//! failed admission; an overwritten caBundle is repaired within seconds. Both tests change
//! cluster-wide state of the operator, so they run one after the other.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use sidecarset_e2e::*;
use sidecarset_operator::certs;
use std::time::{Duration, Instant};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn secret_ca(c: &kube::Client) -> anyhow::Result<String> {
    let s = Api::<Secret>::namespaced(c.clone(), &operator_namespace())
        .get(&cert_secret_name())
        .await?;
    Ok(String::from_utf8(
        s.data
            .unwrap_or_default()
            .get("ca.crt")
            .map(|b| b.0.clone())
            .unwrap_or_default(),
    )?)
}

#[tokio::test]
async fn deleted_secret_is_recreated_while_pods_keep_being_admitted() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let c = client().await;
    let s = suffix();
    let ns = format!("e2e-certs-{s}");
    create_namespace(&c, &ns, json!({})).await?;
    let ss = format!("e2e-certs-{s}");
    let label = format!("certs-{s}");
    create_sidecarset(&c, json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": ss},
        "spec": {"selector": {"matchLabels": {"e2e-app": label}}, "containers": [{"name": "tls-probe", "image": "registry.local/p:1"}]}
    })).await?;
    let p = pod("p", json!({"e2e-app": label}));
    wait_injectable(&c, &ns, &p, "tls-probe", true).await?;

    let secrets: Api<Secret> = Api::namespaced(c.clone(), &operator_namespace());
    let before = secrets.get(&cert_secret_name()).await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let (mut ok, mut failed) = (0, Vec::new());
    // Pods are created back to back before the deletion, while the Secret is gone and after it
    // is back; the loop ends once 10 creations went through after it came back (not after a
    // fixed count or time: a loaded machine creates fewer pods per second, which proves nothing
    // either way), or after 60 s.
    let (mut ok_before, mut ok_after) = (0, 0);
    let start = Instant::now();
    let mut deleted_at = None;
    let mut recreated_after = None;
    while start.elapsed() < Duration::from_secs(60) && ok_after < 10 {
        if deleted_at.is_none() && start.elapsed() > Duration::from_secs(2) && ok_before >= 5 {
            secrets
                .delete(&cert_secret_name(), &DeleteParams::default())
                .await?;
            deleted_at = Some(Instant::now());
        }
        if let (Some(d), None) = (deleted_at, recreated_after)
            && secrets.get_opt(&cert_secret_name()).await?.is_some()
        {
            recreated_after = Some(d.elapsed());
        }
        let mut probe = p.clone();
        probe.metadata.name = Some(format!("loop-{}", ok + failed.len()));
        match pods.create(&PostParams::default(), &probe).await {
            Ok(created) if container_names(&created).contains(&"tls-probe".to_string()) => {
                ok += 1;
                match (deleted_at, recreated_after) {
                    (None, _) => ok_before += 1,
                    (Some(_), Some(_)) => ok_after += 1,
                    _ => {}
                }
            }
            Ok(created) => failed.push(format!("not injected: {:?}", container_names(&created))),
            Err(e) => failed.push(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recreated = recreated_after.ok_or_else(|| {
        anyhow::anyhow!(
            "the Secret was not recreated (deleted: {})",
            deleted_at.is_some()
        )
    })?;
    println!(
        "pod creations around the Secret deletion: {ok} ok ({ok_before} before, {ok_after} after it was back), {} failed; Secret back after {recreated:?}",
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {} pod creations failed: {:?}",
        failed.len(),
        ok + failed.len(),
        &failed[..failed.len().min(3)]
    );
    assert!(
        recreated < Duration::from_secs(30),
        "the Secret came back only after {recreated:?}"
    );
    assert_eq!(
        ok_after, 10,
        "creations after the Secret was back: {ok_after}"
    );
    let after = secrets.get(&cert_secret_name()).await?;
    assert_eq!(
        before.data, after.data,
        "the Secret comes back with the certificates in use"
    );
    let ca = secret_ca(&c).await?;
    for b in ca_bundles(&c, &webhook_config_name()).await? {
        assert!(
            certs::bundle_contains(&b, &ca),
            "a caBundle does not trust the CA"
        );
    }
    delete_sidecarset(&c, &ss).await;
    delete_namespace(&c, &ns).await;
    Ok(())
}

#[tokio::test]
async fn overwritten_ca_bundle_is_repaired_within_5_seconds() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    let c = client().await;
    let name = webhook_config_name();
    let ca = secret_ca(&c).await?;
    let cfg = certs::CertConfig {
        service: "x".into(),
        namespace: "x".into(),
        extra_dns: vec![],
        extra_ips: vec![],
        ca_validity: Duration::from_secs(3600),
        leaf_validity: Duration::from_secs(600),
        renew_at: 0.66,
        overlap: Duration::from_secs(1),
    };
    let (other_ca, _) =
        certs::generate_ca(&cfg, jiff::Timestamp::now().as_second()).map_err(anyhow::Error::msg)?;
    let api: Api<MutatingWebhookConfiguration> = Api::all(c.clone());
    let mut m = api.get(&name).await?;
    for w in m.webhooks.iter_mut().flatten() {
        w.client_config.ca_bundle = Some(ByteString(other_ca.clone().into_bytes()));
    }
    m.metadata.managed_fields = None;
    api.replace(
        &name,
        &PostParams {
            field_manager: Some("e2e-intruder".into()),
            ..Default::default()
        },
        &m,
    )
    .await?;
    let t = Instant::now();
    let repaired = eventually(5, "the caBundle to be repaired", || {
        let (c, name, ca) = (c.clone(), name.clone(), ca.clone());
        async move {
            Ok(ca_bundles(&c, &name)
                .await?
                .iter()
                .all(|b| certs::bundle_contains(b, &ca))
                .then_some(()))
        }
    })
    .await;
    println!("caBundle repaired after {:?}", t.elapsed());
    repaired
}
