//! The certificate manager against a mock API server: the Secret created by two replicas at
//! once, the order of a CA rotation, and a caBundle repaired after someone overwrote it.

use super::*;
use crate::certs::bundle_contains;
use crate::health::Readiness;
use crate::mock_api::{self, ApiServer, Call};
use k8s_openapi::ByteString;
use serde_json::{Value, json};

const SECRET: &str = "/api/v1/namespaces/ns/secrets";
const MUTATING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/sso";
const VALIDATING: &str =
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/sso";

fn cert_config() -> CertConfig {
    CertConfig {
        service: "svc".into(),
        namespace: "ns".into(),
        extra_dns: vec![],
        extra_ips: vec![],
        ca_validity: Duration::from_secs(30 * 24 * 3600),
        leaf_validity: Duration::from_secs(3 * 24 * 3600),
        renew_at: 2.0 / 3.0,
        // A rotation step may follow the previous one at once (the test decides when).
        overlap: Duration::ZERO,
    }
}

fn manager(client: Client, readiness: &Readiness) -> Arc<Manager> {
    manager_with(client, readiness, system_clock(), |_| {})
}

/// A manager whose clock is `clock` and whose settings `tweak` changes.
fn manager_with(
    client: Client,
    readiness: &Readiness,
    clock: Clock,
    tweak: impl FnOnce(&mut ManagerSettings),
) -> Arc<Manager> {
    let mut settings = ManagerSettings {
        certs: cert_config(),
        namespace: "ns".into(),
        secret_name: "certs".into(),
        webhook_config_name: "sso".into(),
        field_manager: "sidecarset-operator".into(),
        resync: Duration::from_secs(300),
        conversion: None,
    };
    tweak(&mut settings);
    let reports = Reports {
        cert: ServingCert::new(readiness.gate("no certificate")),
        ca_trusted: readiness.gate("CA not trusted"),
        conversion: settings
            .conversion
            .is_some()
            .then(|| readiness.gate("conversion")),
    };
    Manager::with(client.clone(), client, clock, settings, None, reports)
}

fn generated() -> Material {
    act(
        &Action::Generate("test".into()),
        None,
        &cert_config(),
        now(),
    )
    .unwrap()
}

fn secret(m: &Material, resource_version: &str) -> Value {
    let mut annotations = serde_json::Map::new();
    if let Some(since) = m.step_since {
        annotations.insert(
            super::super::ANNOTATION_STEP_SINCE.into(),
            since.to_string().into(),
        );
    }
    let data: serde_json::Map<String, Value> = m
        .to_data()
        .into_iter()
        .map(|(k, v)| (k, serde_json::to_value(ByteString(v)).unwrap()))
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
           "metadata": {"name": "certs", "namespace": "ns", "resourceVersion": resource_version,
                        "annotations": annotations},
           "data": data})
}

/// A webhook configuration of `kind` whose one webhook trusts `bundle`.
fn configuration(kind: &str, bundle: &str) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
           "metadata": {"name": "sso"},
           "webhooks": [{"name": "w.sidecarset.io", "admissionReviewVersions": ["v1"],
                         "sideEffects": "None",
                         "clientConfig": {"caBundle": serde_json::to_value(ByteString(bundle.as_bytes().to_vec())).unwrap()}}]})
}

/// Answers the two reads of the webhook configurations (whether they trust a bundle).
async fn configurations_trust(api: &mut ApiServer, bundle: &str) {
    api.expect("GET", MUTATING)
        .await
        .answer(200, configuration("MutatingWebhookConfiguration", bundle));
    api.expect("GET", VALIDATING)
        .await
        .answer(200, configuration("ValidatingWebhookConfiguration", bundle));
}

/// The caBundle a server-side apply of a webhook configuration writes.
fn applied_bundle(call: &Call) -> String {
    assert_eq!(
        call.content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    assert!(
        call.uri.contains("fieldManager=sidecarset-operator"),
        "{}",
        call.uri
    );
    assert!(call.uri.contains("force=true"), "{}", call.uri);
    let b64: ByteString =
        serde_json::from_value(call.body["webhooks"][0]["clientConfig"]["caBundle"].clone())
            .unwrap();
    String::from_utf8(b64.0).unwrap()
}

/// The rest of a pass once the configurations are found not to trust `bundle`: the names of
/// their webhooks are read, then the bundle is applied to both; returns what was applied.
async fn bundle_written(api: &mut ApiServer, stale: &str) -> (String, String) {
    configurations_trust(api, stale).await;
    let mutating = api.expect("PATCH", MUTATING).await;
    let m = applied_bundle(&mutating);
    mutating.echo("10");
    let validating = api.expect("PATCH", VALIDATING).await;
    let v = applied_bundle(&validating);
    validating.echo("11");
    (m, v)
}

#[tokio::test]
async fn a_secret_another_replica_created_first_is_adopted_not_overwritten() {
    let (client, mut api) = mock_api::client();
    let readiness = Readiness::default();
    let m = manager(client, &readiness);
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .fail(404, "NotFound");
    // What the webhooks trust now (nothing yet: a new install).
    api.expect("GET", MUTATING).await.fail(404, "NotFound");
    let create = api.expect("POST", SECRET).await;
    assert_eq!(create.body["metadata"]["name"], "certs");
    create.fail(409, "AlreadyExists");
    pass.await.unwrap().unwrap();
    // Nothing written over theirs, nothing served, no caBundle of ours published.
    api.expect_nothing().await;
    assert_eq!(m.reports.cert.expiry(), None);

    // The next pass serves theirs.
    let theirs = generated();
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&theirs, "7"));
    configurations_trust(&mut api, &theirs.ca_bundle()).await;
    configurations_trust(&mut api, &theirs.ca_bundle()).await;
    pass.await.unwrap().unwrap();
    api.expect_nothing().await;
    let leaf = super::super::cert_info(&theirs.tls_cert, "tls.crt").unwrap();
    assert_eq!(m.reports.cert.expiry(), Some(leaf.not_after));
    assert!(m.reports.ca_trusted.is_open());
}

#[tokio::test]
async fn a_new_ca_signs_the_served_certificate_only_once_the_webhooks_trust_it() {
    let (client, mut api) = mock_api::client();
    let readiness = Readiness::default();
    let m = manager(client, &readiness);
    let old = generated();
    let rotating = act(&Action::StartCaRotation, Some(&old), &cert_config(), now()).unwrap();
    let (Some((next_ca, _)), both) = (&rotating.next_ca, rotating.ca_bundle()) else {
        panic!("a rotation has a next CA");
    };

    // Step 1 is stored (both CAs in the Secret), but the webhooks trust only the old CA: the
    // old CA's certificate stays served and the bundle with both CAs is published.
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&rotating, "5"));
    configurations_trust(&mut api, &old.ca_bundle()).await;
    configurations_trust(&mut api, &old.ca_bundle()).await;
    let (mutating, validating) = bundle_written(&mut api, &old.ca_bundle()).await;
    assert_eq!(
        (mutating.as_str(), validating.as_str()),
        (both.as_str(), both.as_str())
    );
    assert!(both.contains(next_ca.trim()) && both.contains(old.ca_cert.trim()));
    pass.await.unwrap().unwrap();
    api.expect_nothing().await;
    let old_leaf = super::super::cert_info(&old.tls_cert, "tls.crt").unwrap();
    assert_eq!(m.reports.cert.expiry(), Some(old_leaf.not_after));

    // Step 2 once they trust both: the Secret is replaced under the resourceVersion read, and
    // only then is the new CA's certificate served.
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&rotating, "5"));
    configurations_trust(&mut api, &both).await;
    let promote = api.expect("PUT", &format!("{SECRET}/certs")).await;
    assert_eq!(promote.body["metadata"]["resourceVersion"], "5");
    assert_eq!(m.reports.cert.expiry(), Some(old_leaf.not_after));
    let promoted: Secret = serde_json::from_value(promote.body.clone()).unwrap();
    let promoted = to_material(&promoted).unwrap();
    assert_eq!(promoted.ca_cert.trim(), next_ca.trim());
    promote.echo("6");
    configurations_trust(&mut api, &both).await;
    pass.await.unwrap().unwrap();
    let new_leaf = super::super::cert_info(&promoted.tls_cert, "tls.crt").unwrap();
    assert_eq!(m.reports.cert.expiry(), Some(new_leaf.not_after));
}

/// A pass over a Secret that is fine while both configurations publish `published`: the bundle
/// of the Secret's CAs is written to both, the Secret left alone.
async fn bundle_written_back(published: impl FnOnce(&Material) -> String) {
    let (client, mut api) = mock_api::client();
    let readiness = Readiness::default();
    let m = manager(client, &readiness);
    let ours = generated();
    let published = published(&ours);
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&ours, "3"));
    configurations_trust(&mut api, &published).await;
    configurations_trust(&mut api, &published).await;
    let (mutating, validating) = bundle_written(&mut api, &published).await;
    assert_eq!(mutating, ours.ca_bundle());
    assert_eq!(validating, ours.ca_bundle());
    pass.await.unwrap().unwrap();
    // The Secret itself was fine: never rewritten.
    api.expect_nothing().await;
    assert!(m.reports.ca_trusted.is_open());
}

#[tokio::test]
async fn a_ca_bundle_someone_overwrote_is_written_back() {
    bundle_written_back(|_| generated().ca_bundle()).await;
}

#[tokio::test]
async fn a_ca_bundle_still_trusting_a_retired_ca_is_written_without_it() {
    // Once a rotation finished, the Secret holds the new CA alone; the bundles still trust the
    // old one too. Trusting every CA of the Secret is not enough: the retired CA must go.
    bundle_written_back(|ours| format!("{}{}", ours.ca_bundle(), generated().ca_bundle())).await;
}

const CRD: &str =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/sidecarsets.apps.kruise.io";

fn conversion_target() -> sidecarset_core::api::ConversionTarget {
    sidecarset_core::api::ConversionTarget::Service {
        namespace: "ns".into(),
        name: "svc".into(),
        port: 443,
    }
}

/// The SidecarSet CRD whose conversion settings trust `bundle`.
fn crd_trusting(bundle: &str) -> Value {
    let mut v = serde_json::to_value(sidecarset_core::api::crd()).unwrap();
    v["spec"]["conversion"] =
        sidecarset_core::api::conversion_spec(&conversion_target(), Some(bundle));
    v["metadata"]["resourceVersion"] = json!("1");
    v
}

#[tokio::test]
async fn a_replica_whose_clock_is_behind_keeps_the_ca_it_finds() {
    let (client, mut api) = mock_api::client();
    let readiness = Readiness::default();
    // This replica's clock is an hour behind the one that made the certificates: to it they
    // are not valid yet. It must not make a new CA (every other replica's certificate would
    // lose the trust of the API server); it serves what the Secret holds and writes nothing.
    let behind: Clock = Arc::new(|| now() - 3600);
    let m = manager_with(client, &readiness, behind, |_| {});
    let theirs = generated();
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&theirs, "7"));
    configurations_trust(&mut api, &theirs.ca_bundle()).await;
    configurations_trust(&mut api, &theirs.ca_bundle()).await;
    pass.await.unwrap().unwrap();
    api.expect_nothing().await;
    let leaf = super::super::cert_info(&theirs.tls_cert, "tls.crt").unwrap();
    assert_eq!(m.reports.cert.expiry(), Some(leaf.not_after));
}

#[tokio::test]
async fn a_replica_a_few_minutes_behind_does_not_renew_a_short_lived_leaf() {
    let (client, mut api) = mock_api::client();
    let readiness = Readiness::default();
    // 10-minute leaves start a minute before they are made; a replica 4 minutes behind is
    // within the tolerated skew.
    let short = |c: &mut CertConfig| c.leaf_validity = Duration::from_secs(600);
    let mut cfg = cert_config();
    short(&mut cfg);
    let theirs = act(&Action::Generate("test".into()), None, &cfg, now()).unwrap();
    let behind: Clock = Arc::new(|| now() - 240);
    let m = manager_with(client, &readiness, behind, |s| short(&mut s.certs));
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&theirs, "7"));
    configurations_trust(&mut api, &theirs.ca_bundle()).await;
    configurations_trust(&mut api, &theirs.ca_bundle()).await;
    pass.await.unwrap().unwrap();
    api.expect_nothing().await;
}

#[tokio::test]
async fn the_new_ca_is_promoted_only_once_the_crds_bundle_trusts_it_too() {
    let (client, mut api) = mock_api::client();
    let readiness = Readiness::default();
    let m = manager_with(client, &readiness, system_clock(), |s| {
        s.conversion = Some(conversion_target())
    });
    let old = generated();
    let rotating = act(&Action::StartCaRotation, Some(&old), &cert_config(), now()).unwrap();
    let both = rotating.ca_bundle();
    // Both webhook configurations trust both CAs, the CRD only the old one (its write fails):
    // no promotion, the old CA's certificate stays served.
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&rotating, "5"));
    configurations_trust(&mut api, &both).await;
    api.expect("GET", CRD)
        .await
        .answer(200, crd_trusting(&old.ca_bundle()));
    // The pass publishes: the CRD first (refused), then the webhooks (already right).
    api.expect("GET", CRD)
        .await
        .answer(200, crd_trusting(&old.ca_bundle()));
    api.expect("PATCH", CRD).await.fail(403, "Forbidden");
    configurations_trust(&mut api, &both).await;
    pass.await.unwrap().unwrap();
    api.expect_nothing().await;
    let old_leaf = super::super::cert_info(&old.tls_cert, "tls.crt").unwrap();
    assert_eq!(m.reports.cert.expiry(), Some(old_leaf.not_after));

    // Once the CRD trusts both too, the next pass promotes.
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&rotating, "5"));
    configurations_trust(&mut api, &both).await;
    api.expect("GET", CRD)
        .await
        .answer(200, crd_trusting(&both));
    let promote = api.expect("PUT", &format!("{SECRET}/certs")).await;
    promote.echo("6");
    pass.abort();
}

#[tokio::test]
async fn a_certificate_of_a_new_ca_is_not_served_before_the_bundles_trust_that_ca() {
    let (client, mut api) = mock_api::client();
    let readiness = Readiness::default();
    let m = manager_with(client, &readiness, system_clock(), |s| {
        s.certs.overlap = Duration::from_secs(3600)
    });
    // Serving the old CA's certificate.
    let old = generated();
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&old, "3"));
    configurations_trust(&mut api, &old.ca_bundle()).await;
    configurations_trust(&mut api, &old.ca_bundle()).await;
    pass.await.unwrap().unwrap();
    let old_leaf = super::super::cert_info(&old.tls_cert, "tls.crt").unwrap();
    assert_eq!(m.reports.cert.expiry(), Some(old_leaf.not_after));

    // Another replica promoted a new CA, but the webhook configurations trust only the old
    // one (they were overwritten since) and this replica cannot write them now: it keeps
    // serving the old CA's certificate, which the API server still trusts.
    let rotating = act(&Action::StartCaRotation, Some(&old), &cert_config(), now()).unwrap();
    let promoted = act(&Action::PromoteCa, Some(&rotating), &cert_config(), now()).unwrap();
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&promoted, "9"));
    configurations_trust(&mut api, &old.ca_bundle()).await;
    configurations_trust(&mut api, &old.ca_bundle()).await;
    configurations_trust(&mut api, &old.ca_bundle()).await;
    api.expect("PATCH", MUTATING)
        .await
        .fail(500, "InternalError");
    assert!(pass.await.unwrap().is_err());
    let served = m.current.lock().unwrap().clone().unwrap();
    assert!(
        served.tls_cert == old.tls_cert && served.tls_cert != promoted.tls_cert,
        "the new CA's certificate was served before any bundle trusted that CA"
    );
}

/// A Secret found corrupted is regenerated while the replicas still serve the old CA's leaf
/// (each until it reconciles): the new CA is published next to the old one, kept as the
/// previous CA for the overlap, so the API server keeps trusting every replica meanwhile.
#[tokio::test]
async fn a_regenerated_ca_is_published_next_to_the_one_the_replicas_still_serve() {
    let (client, mut api) = mock_api::client();
    let readiness = Readiness::default();
    let m = manager_with(client, &readiness, system_clock(), |s| {
        s.certs.overlap = Duration::from_secs(3600)
    });
    let old = generated();
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, secret(&old, "3"));
    configurations_trust(&mut api, &old.ca_bundle()).await;
    configurations_trust(&mut api, &old.ca_bundle()).await;
    pass.await.unwrap().unwrap();

    // The Secret's CA key is corrupted: a new CA and leaf are made.
    let mut corrupted = secret(&old, "4");
    corrupted["data"]["ca.key"] = serde_json::to_value(ByteString(b"garbage".to_vec())).unwrap();
    let pass = tokio::spawn({
        let m = m.clone();
        async move { m.reconcile().await }
    });
    api.expect("GET", &format!("{SECRET}/certs"))
        .await
        .answer(200, corrupted);
    configurations_trust(&mut api, &old.ca_bundle()).await;
    // What the webhooks trust now is read before the Secret is replaced.
    let mut replace = api.next().await;
    if replace.method == "GET" {
        assert!(replace.uri.starts_with(MUTATING), "{}", replace.uri);
        replace.answer(
            200,
            configuration("MutatingWebhookConfiguration", &old.ca_bundle()),
        );
        replace = api.next().await;
    }
    assert_eq!(
        (
            replace.method.as_str(),
            replace.uri.starts_with(&format!("{SECRET}/certs"))
        ),
        ("PUT", true)
    );
    let data = |k: &str| -> Option<String> {
        serde_json::from_value::<ByteString>(replace.body["data"][k].clone())
            .ok()
            .map(|b| String::from_utf8(b.0).unwrap())
    };
    let new_ca = data("ca.crt").unwrap();
    assert!(
        !bundle_contains(old.ca_cert.as_bytes(), &new_ca),
        "a new CA"
    );
    assert!(
        data("prev-ca.crt").is_some_and(|p| bundle_contains(p.as_bytes(), &old.ca_cert)),
        "the old CA is kept as the previous CA"
    );
    replace.echo("5");
    // The bundles are read (they trust only the old CA), then written.
    configurations_trust(&mut api, &old.ca_bundle()).await;
    let (mutating, validating) = bundle_written(&mut api, &old.ca_bundle()).await;
    for bundle in [&mutating, &validating] {
        assert!(
            bundle_contains(bundle.as_bytes(), &old.ca_cert),
            "the old CA was dropped from the caBundle while replicas still serve its leaf"
        );
        assert!(bundle_contains(bundle.as_bytes(), &new_ca));
    }
    pass.await.unwrap().unwrap();
}
