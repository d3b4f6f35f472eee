//! The SidecarSet CRD's conversion webhook settings (`spec.conversion`): where the API server
//! sends ConversionReviews and the CA it trusts for them. Kept like the webhook configurations'
//! caBundle: server-side apply under the operator's field manager, checked on every pass and
//! repaired when anything else changed it.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use sidecarset_core::api::{CRD_NAME, ConversionTarget, conversion_patch};
use tracing::info;

/// True when the CRD sends conversions to `target` and its caBundle passes `check` against
/// `bundle` (PEM): [`bundle_contains`] (it trusts every CA of it) or
/// [`super::bundle_is`] (exactly those).
pub fn conversion_ok(
    crd: &CustomResourceDefinition,
    target: &ConversionTarget,
    bundle: &str,
    check: fn(&[u8], &str) -> bool,
) -> bool {
    let Some(conv) = &crd.spec.conversion else {
        return false;
    };
    if conv.strategy != "Webhook" {
        return false;
    }
    let Some(cc) = conv.webhook.as_ref().and_then(|w| w.client_config.as_ref()) else {
        return false;
    };
    let target_ok = match target {
        ConversionTarget::Url(u) => {
            cc.url.as_deref()
                == Some(&format!(
                    "{}{}",
                    u.trim_end_matches('/'),
                    sidecarset_core::api::CONVERSION_PATH
                ))
        }
        ConversionTarget::Service {
            namespace,
            name,
            port,
        } => cc.service.as_ref().is_some_and(|s| {
            &s.namespace == namespace
                && &s.name == name
                && s.path.as_deref() == Some(sidecarset_core::api::CONVERSION_PATH)
                && s.port.unwrap_or(443) == *port
        }),
    };
    target_ok && cc.ca_bundle.as_ref().is_some_and(|b| check(&b.0, bundle))
}

/// What a pass found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConversionPass {
    /// Already right.
    InPlace,
    /// Written now.
    Written,
    /// The CRD is not installed: nothing to do (it is installed with the chart or `make
    /// manifests`; the operator never creates it).
    NoCrd,
}

/// Makes the CRD's conversion settings right, writing them only when they differ.
pub async fn ensure(
    client: &Client,
    target: &ConversionTarget,
    bundle: &str,
    field_manager: &str,
) -> anyhow::Result<ConversionPass> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(crd) = api.get_opt(CRD_NAME).await? else {
        return Ok(ConversionPass::NoCrd);
    };
    if conversion_ok(&crd, target, bundle, super::bundle_is) {
        return Ok(ConversionPass::InPlace);
    }
    // Server-side apply cannot drop a field another manager owns (e.g. the chart's `service`
    // when this process is reached by URL), and the API server refuses a client configuration
    // with both: the other kind goes first, with a merge patch.
    let cc = crd
        .spec
        .conversion
        .as_ref()
        .and_then(|c| c.webhook.as_ref())
        .and_then(|w| w.client_config.as_ref());
    let other = match target {
        ConversionTarget::Url(_) => cc.is_some_and(|c| c.service.is_some()).then_some("service"),
        ConversionTarget::Service { .. } => cc.is_some_and(|c| c.url.is_some()).then_some("url"),
    };
    if let Some(other) = other {
        let mut conversion = sidecarset_core::api::conversion_spec(target, Some(bundle));
        conversion["webhook"]["clientConfig"][other] = serde_json::Value::Null;
        api.patch(
            CRD_NAME,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"conversion": conversion}})),
        )
        .await?;
    }
    let pp = PatchParams::apply(field_manager).force();
    api.patch(
        CRD_NAME,
        &pp,
        &Patch::Apply(&conversion_patch(target, Some(bundle))),
    )
    .await?;
    info!(crd = CRD_NAME, target = ?target, cas = super::bundle_ders(bundle.as_bytes()).len(), "conversion webhook and caBundle written to the CRD");
    crate::metrics::metrics().ca_bundle_writes.inc();
    Ok(ConversionPass::Written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::bundle_contains;

    fn crd_with(conversion: serde_json::Value) -> CustomResourceDefinition {
        let mut v = serde_json::to_value(sidecarset_core::api::crd()).unwrap();
        v["spec"]["conversion"] = conversion;
        serde_json::from_value(v).unwrap()
    }

    fn ca_pem() -> String {
        let cfg = crate::certs::CertConfig {
            service: "svc".into(),
            namespace: "ns".into(),
            extra_dns: vec![],
            extra_ips: vec![],
            ca_validity: std::time::Duration::from_secs(86400 * 30),
            leaf_validity: std::time::Duration::from_secs(86400),
            renew_at: 0.5,
            overlap: std::time::Duration::from_secs(60),
        };
        crate::certs::generate_ca(&cfg, 1_800_000_000).unwrap().0
    }

    #[test]
    fn conversion_settings_are_checked_field_by_field() {
        let pki = ca_pem();
        let other = ca_pem();
        let svc = ConversionTarget::Service {
            namespace: "ops".into(),
            name: "sso-webhook".into(),
            port: 443,
        };
        let url = ConversionTarget::Url("https://127.0.0.1:9443/".into());
        let right = crd_with(sidecarset_core::api::conversion_spec(&svc, Some(&pki)));
        assert!(conversion_ok(&right, &svc, &pki, bundle_contains));
        // Another CA, another target, no CA, strategy None, the chart's default Service.
        assert!(!conversion_ok(&right, &svc, &other, bundle_contains));
        assert!(!conversion_ok(&right, &url, &pki, bundle_contains));
        assert!(!conversion_ok(
            &crd_with(sidecarset_core::api::conversion_spec(&svc, None)),
            &svc,
            &pki,
            bundle_contains
        ));
        assert!(!conversion_ok(
            &crd_with(serde_json::json!({"strategy": "None"})),
            &svc,
            &pki,
            bundle_contains
        ));
        assert!(!conversion_ok(
            &sidecarset_core::api::crd(),
            &svc,
            &pki,
            bundle_contains
        ));
        let by_url = crd_with(sidecarset_core::api::conversion_spec(&url, Some(&pki)));
        assert!(conversion_ok(&by_url, &url, &pki, bundle_contains));
        // A bundle holding both CAs (a rotation) trusts each of them.
        let both = format!("{pki}{other}");
        let during = crd_with(sidecarset_core::api::conversion_spec(&svc, Some(&both)));
        assert!(
            conversion_ok(&during, &svc, &pki, bundle_contains)
                && conversion_ok(&during, &svc, &other, bundle_contains)
        );
        // But it is not the bundle of one of them alone: once a rotation finished, the CRD is
        // written again without the retired CA.
        assert!(!conversion_ok(&during, &svc, &pki, crate::certs::bundle_is));
        assert!(conversion_ok(&right, &svc, &pki, crate::certs::bundle_is));
        assert!(conversion_ok(&during, &svc, &both, crate::certs::bundle_is));
    }
}
