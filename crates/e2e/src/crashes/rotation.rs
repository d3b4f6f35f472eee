//! The `rotation` scenario: two replicas with self-managed certificates so short-lived
//! ([`ROTATION_ARGS`]) that the CA rotates during the run (next CA published, then served, then
//! the old one dropped; the serving certificate is renewed on the way), while a SidecarSet's
//! pods are admitted: a dry-run admission of a selected pod every [`PROBE_EVERY`] and
//! [`ROTATION_PODS`] real pods, two once the new CA is published and two once it is served.
//!
//! Its own oracles (violations of the run):
//! * no admission refused and none without the sidecar, from the SidecarSet's first injection to
//!   the end (a refusal of a request sent in the 3 s after an operator process died, or while it
//!   died, is excused: the request it was serving, or a connection the API server had open to
//!   it, broke; that is the crash, not the rotation);
//! * at the end both replicas serve the Secret's serving certificate, signed by the new CA, the
//!   rotation has finished, and every caBundle trusts that CA and no longer the first one.

use super::run::Run;
use super::scenarios::{SIDECAR, app_pod, create_set_with, injectable, is_sidecar, settled, until};
use crate::{ca_bundles, container_names, served_leaf};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, PostParams};
use serde_json::json;
use sidecarset_operator::certs;
use std::time::Duration;

/// CA for 40 s, serving certificate for 16 s, each renewed at half its life, CAs overlapping
/// 3 s, checked every second: the CA rotation starts 20 s after the first certificates, its
/// new certificate is served about 3 s later, the old CA dropped 3 s after that.
pub const ROTATION_ARGS: &[&str] = &[
    "--ca-validity",
    "40s",
    "--cert-validity",
    "16s",
    "--cert-renew-at",
    "0.5",
    "--ca-overlap",
    "3s",
    "--cert-resync",
    "1s",
];
pub const ROTATION_PODS: usize = 4;
pub const PROBE_EVERY: Duration = Duration::from_millis(250);

/// The Secret's data as text, by key.
async fn secret(run: &Run) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let s = Api::<Secret>::namespaced(run.c.clone(), &run.names.ns)
        .get(&run.names.name)
        .await?;
    Ok(s.data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect())
}

/// One admission of `p` (a dry run unless `store`): a refusal or a pod without the sidecar is a
/// violation (unless excused, see the module); returns whether the pod was admitted.
async fn admit(run: &Run, p: &Pod, store: bool) -> bool {
    let pods: Api<Pod> = Api::namespaced(run.c.clone(), &run.names.pods_ns);
    let pp = PostParams {
        dry_run: !store,
        ..Default::default()
    };
    let name = p.metadata.name.clone().unwrap_or_default();
    let at = run.started.elapsed().as_secs_f64();
    match pods.create(&pp, p).await {
        Ok(got) if container_names(&got).iter().any(|c| is_sidecar(c)) => true,
        Ok(got) => {
            run.violation(format!(
                "rotation: {name} admitted without its sidecar at {at:.1} s: {:?}",
                container_names(&got)
            ));
            true
        }
        Err(kube::Error::Api(e)) if e.code == 409 => true,
        Err(e) => {
            let e = match e {
                kube::Error::Api(s) => s.message,
                other => other.to_string(),
            };
            // The exit of a process that died while the request was in flight is seen by the
            // monitor up to 50 ms after the refusal comes back.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let until = run.started.elapsed().as_secs_f64();
            let crashed = run
                .exits()
                .iter()
                .any(|(_, _, t)| *t >= at - 3.0 && *t <= until);
            match crashed {
                true => eprintln!(
                    "[faults] rotation: admission refused right after a crash (excused): {e}"
                ),
                false => run.violation(format!(
                    "rotation: admission of {name} refused at {at:.1} s: {e}"
                )),
            }
            false
        }
    }
}

/// Probes admission until `done` holds of the Secret (at most 90 s).
async fn probing_until(
    run: &Run,
    what: &str,
    done: impl Fn(&std::collections::BTreeMap<String, String>) -> bool,
) -> anyhow::Result<()> {
    let mut probe = app_pod(run, "probe");
    probe.metadata.name = Some("probe".into());
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        admit(run, &probe, false).await;
        if secret(run).await.is_ok_and(|s| done(&s)) {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "timed out after 90 s waiting for {what}"
        );
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// Creates `pod-{i}` (stored), retried while refused (each refusal a violation, see [`admit`]).
async fn create(run: &Run, i: usize) -> anyhow::Result<()> {
    let p = &app_pod(run, &format!("pod-{i}"));
    until(60, &format!("pod-{i} created"), move || async move {
        Ok(admit(run, p, true).await.then_some(()))
    })
    .await
}

pub async fn rotation(run: &Run) -> anyhow::Result<()> {
    let spec = json!({"containers": [{"name": SIDECAR, "image": "registry.local/proxy:1"}]});
    let generation = create_set_with(run, json!({}), spec).await?;
    injectable(run).await?;
    let first = secret(run).await?;
    let old_ca = first.get(certs::KEY_CA_CERT).cloned().unwrap_or_default();
    probing_until(run, "the next CA published", |s| {
        s.contains_key(certs::KEY_NEXT_CA_CERT) || s.get(certs::KEY_CA_CERT) != Some(&old_ca)
    })
    .await?;
    create(run, 0).await?;
    create(run, 1).await?;
    probing_until(run, "the new CA served", |s| {
        s.get(certs::KEY_CA_CERT) != Some(&old_ca)
    })
    .await?;
    create(run, 2).await?;
    create(run, 3).await?;
    probing_until(run, "the old CA dropped", |s| {
        !s.contains_key(certs::KEY_PREV_CA_CERT) && !s.contains_key(certs::KEY_NEXT_CA_CERT)
    })
    .await?;
    // The bundles follow within seconds, well before the next rotation would publish another
    // CA next to the new one (and so rewrite them anyway, hiding a retired CA left trusted).
    if let Err(e) = retired_everywhere(run, &old_ca).await {
        run.violation(format!("rotation: once the old CA was dropped, {e:#}"));
    }
    settled(run, generation, ROTATION_PODS, ROTATION_PODS).await?;
    if let Err(e) = served_everywhere(run, &old_ca).await {
        run.violation(format!("rotation: at the end, {e:#}"));
    }
    Ok(())
}

/// Within 5 s: no caBundle trusts `old_ca` any more.
async fn retired_everywhere(run: &Run, old_ca: &str) -> anyhow::Result<()> {
    let mut still = Vec::new();
    for _ in 0..20 {
        still = ca_bundles(&run.c, &run.names.name)
            .await?
            .iter()
            .enumerate()
            .filter(|(_, b)| certs::bundle_contains(b, old_ca))
            .map(|(i, _)| i)
            .collect();
        if still.is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    anyhow::bail!("caBundles {still:?} still trust the retired CA after 5 s")
}

/// Within 15 s: every replica serves the Secret's serving certificate, its CA is not `old_ca`,
/// the rotation has finished, and every caBundle trusts the CA and no longer `old_ca`.
async fn served_everywhere(run: &Run, old_ca: &str) -> anyhow::Result<()> {
    let mut last = String::new();
    for _ in 0..60 {
        match served_now(run, old_ca).await {
            Ok(()) => return Ok(()),
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    anyhow::bail!("{last} (for 15 s)")
}

async fn served_now(run: &Run, old_ca: &str) -> anyhow::Result<()> {
    let s = secret(run).await?;
    let ca = s.get(certs::KEY_CA_CERT).cloned().unwrap_or_default();
    anyhow::ensure!(ca != old_ca, "the Secret's CA is still the first one");
    anyhow::ensure!(
        !s.contains_key(certs::KEY_PREV_CA_CERT),
        "the rotation has not finished: the Secret still keeps the previous CA"
    );
    let tls = s.get(certs::KEY_TLS_CERT).cloned().unwrap_or_default();
    let want = certs::bundle_ders(tls.as_bytes());
    for (i, b) in ca_bundles(&run.c, &run.names.name)
        .await?
        .iter()
        .enumerate()
    {
        anyhow::ensure!(
            certs::bundle_contains(b, &ca),
            "caBundle {i} does not trust the Secret's CA"
        );
        // The rotation finished: the first CA is retired and no longer trusted.
        anyhow::ensure!(
            !certs::bundle_contains(b, old_ca),
            "caBundle {i} still trusts the first CA after the rotation finished"
        );
    }
    for (slot, port) in run.ports.iter().enumerate() {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], *port));
        let leaf = served_leaf(addr, ca.as_bytes())
            .await
            .map_err(|e| anyhow::anyhow!("replica {slot} (port {port}): {e:#}"))?;
        anyhow::ensure!(
            want.first() == Some(&leaf),
            "replica {slot} serves another certificate than the Secret's"
        );
    }
    Ok(())
}
