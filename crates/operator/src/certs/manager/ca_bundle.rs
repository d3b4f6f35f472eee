//! The caBundles that must trust the CA: the webhook configurations' (written with server-side
//! apply under our field manager) and the CRD's conversion settings (when kept).

use super::{Manager, with_types};
use crate::certs::{Material, bundle_contains, bundle_ders, bundle_is};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tracing::{info, warn};
use x509_parser::prelude::FromDer;

impl Manager {
    /// Whether every caBundle that must trust a CA before it signs what is served does: both
    /// webhook configurations and the CRD's conversion settings (when kept).
    pub(super) async fn bundle_applied(&self, bundle: &str) -> anyhow::Result<bool> {
        Ok(self.webhooks_trust(bundle).await? && self.crd_trusts(bundle).await?)
    }

    pub(super) async fn webhooks_trust(&self, bundle: &str) -> anyhow::Result<bool> {
        self.webhooks_bundles(bundle, bundle_contains).await
    }

    /// Whether every webhook's caBundle passes `check` against `bundle`.
    async fn webhooks_bundles(
        &self,
        bundle: &str,
        check: fn(&[u8], &str) -> bool,
    ) -> anyhow::Result<bool> {
        let name = &self.settings.webhook_config_name;
        let m = Api::<MutatingWebhookConfiguration>::all(self.client.clone())
            .get_opt(name)
            .await?;
        let v = Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
            .get_opt(name)
            .await?;
        let trusts = |b: Option<&ByteString>| b.is_some_and(|b| check(&b.0, bundle));
        let m_ok = m.as_ref().is_some_and(|m| {
            m.webhooks
                .iter()
                .flatten()
                .all(|w| trusts(w.client_config.ca_bundle.as_ref()))
                && (self.owned.is_some() || m.webhooks.as_ref().is_some_and(|w| !w.is_empty()))
        });
        let v_ok = v.as_ref().is_some_and(|v| {
            v.webhooks
                .iter()
                .flatten()
                .all(|w| trusts(w.client_config.ca_bundle.as_ref()))
        });
        Ok(m_ok && v_ok)
    }

    /// The CAs still valid at `now` that a regenerated `next` must keep trusting (as its
    /// previous CA, dropped after the overlap like a rotation's): those the pod webhook's
    /// caBundle trusts now, the one this replica serves under, and those of the Secret being
    /// replaced when they still parse. Without them the new CA alone would be published while
    /// replicas still serve the old leaf, and every admission they answer would fail TLS.
    pub(super) async fn cas_to_keep(
        &self,
        replaced: Option<&k8s_openapi::api::core::v1::Secret>,
        next: &Material,
        now: i64,
    ) -> anyhow::Result<Option<String>> {
        let mut pems: Vec<u8> = Vec::new();
        let published = Api::<MutatingWebhookConfiguration>::all(self.client.clone())
            .get_opt(&self.settings.webhook_config_name)
            .await?;
        for w in published.iter().flat_map(|c| c.webhooks.iter().flatten()) {
            if let Some(b) = &w.client_config.ca_bundle {
                pems.extend_from_slice(&b.0);
                pems.push(b'\n');
            }
        }
        if let Some(m) = self.current.lock().ok().and_then(|g| g.clone()) {
            pems.extend_from_slice(m.ca_bundle().as_bytes());
        }
        if let Some(ca) = replaced
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(crate::certs::KEY_CA_CERT))
        {
            pems.extend_from_slice(&ca.0);
            pems.push(b'\n');
        }
        let new = bundle_ders(next.ca_bundle().as_bytes());
        let mut kept: Vec<Vec<u8>> = Vec::new();
        for der in bundle_ders(&pems) {
            let valid = x509_parser::prelude::X509Certificate::from_der(&der)
                .is_ok_and(|(_, c)| c.is_ca() && now < c.validity().not_after.timestamp());
            if valid && !new.contains(&der) && !kept.contains(&der) {
                kept.push(der);
            }
        }
        if !kept.is_empty() {
            info!(
                kept = kept.len(),
                "the new CA is published next to the CAs trusted until now, for the overlap"
            );
        }
        Ok((!kept.is_empty()).then(|| kept.iter().map(|d| der_to_pem(d)).collect()))
    }

    /// Whether the CRD's conversion settings (when kept) point here and trust `bundle`; true
    /// when they are not kept or the CRD is not installed.
    pub(super) async fn crd_trusts(&self, bundle: &str) -> anyhow::Result<bool> {
        let Some(target) = &self.settings.conversion else {
            return Ok(true);
        };
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let crd = Api::<CustomResourceDefinition>::all(self.client.clone())
            .get_opt(sidecarset_core::api::CRD_NAME)
            .await?;
        Ok(crd.is_none_or(|crd| {
            crate::certs::crd::conversion_ok(&crd, target, bundle, bundle_contains)
        }))
    }

    /// Writes the caBundle with server-side apply under our field manager (repairing it when
    /// someone overwrote it); updates readiness. Ok(true) when every caBundle kept (the CRD's
    /// too) trusts every CA of the material now.
    pub(super) async fn publish_bundle(&self, m: &Material) -> anyhow::Result<bool> {
        let bundle = m.ca_bundle();
        let crd_ok = self.publish_to_crd(&bundle).await;
        // Written unless every caBundle is exactly this one: trusting more (the previous CA
        // after a rotation finished) is rewritten too, or a retired CA stays trusted.
        if self.webhooks_bundles(&bundle, bundle_is).await? {
            self.reports.ca_trusted.set(true);
            return Ok(crd_ok);
        }
        match &self.owned {
            Some((mutating, validating)) => {
                self.apply_owned_configurations(&bundle, mutating, validating)
                    .await?
            }
            None => self.apply_bundle_only(&bundle).await?,
        }
        let name = &self.settings.webhook_config_name;
        info!(name = %name, cas = bundle_ders(bundle.as_bytes()).len(), "caBundle written to the webhook configurations");
        crate::metrics::metrics().ca_bundle_writes.inc();
        self.reports.ca_trusted.set(true);
        Ok(crd_ok)
    }

    /// Writes `bundle` into the CRD's conversion settings when they are kept; false when that
    /// failed. Conversion only matters for v1alpha1 clients; the operator itself reads v1beta1,
    /// so a failure here is reported but does not hold back the webhooks.
    async fn publish_to_crd(&self, bundle: &str) -> bool {
        let Some(target) = &self.settings.conversion else {
            return true;
        };
        match crate::certs::crd::ensure(&self.client, target, bundle, &self.settings.field_manager)
            .await
        {
            Ok(crate::certs::crd::ConversionPass::NoCrd) => {
                // Nothing converts without the CRD: nothing to trust a CA either.
                self.mark_conversion(false);
                warn!(
                    crd = sidecarset_core::api::CRD_NAME,
                    "the SidecarSet CRD is not installed: install it (the chart's crds/, or `sidecarset-operator crd | kubectl apply -f -`)"
                );
                true
            }
            Ok(_) => {
                self.mark_conversion(true);
                true
            }
            Err(e) => {
                self.mark_conversion(false);
                warn!(crd = sidecarset_core::api::CRD_NAME, error = %e, "cannot write the CRD's conversion webhook settings");
                false
            }
        }
    }

    /// Applies the configurations the operator owns whole, with `bundle` in every webhook.
    async fn apply_owned_configurations(
        &self,
        bundle: &str,
        mutating: &MutatingWebhookConfiguration,
        validating: &ValidatingWebhookConfiguration,
    ) -> anyhow::Result<()> {
        let pp = PatchParams::apply(&self.settings.field_manager).force();
        let name = &self.settings.webhook_config_name;
        let mut mutating = mutating.clone();
        let mut validating = validating.clone();
        for w in mutating.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = Some(ByteString(bundle.to_string().into_bytes()));
        }
        for w in validating.webhooks.iter_mut().flatten() {
            w.client_config.ca_bundle = Some(ByteString(bundle.to_string().into_bytes()));
        }
        Api::<MutatingWebhookConfiguration>::all(self.client.clone())
            .patch(name, &pp, &Patch::Apply(&with_types(&mutating)?))
            .await?;
        Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
            .patch(name, &pp, &Patch::Apply(&with_types(&validating)?))
            .await?;
        Ok(())
    }

    /// Applies only the caBundle of each webhook of the installed configurations (someone
    /// else owns the rest); an error, and the CA not trusted, when one is not installed.
    async fn apply_bundle_only(&self, bundle: &str) -> anyhow::Result<()> {
        let pp = PatchParams::apply(&self.settings.field_manager).force();
        let name = &self.settings.webhook_config_name;
        let mapi: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let vapi: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let b64 = ByteString(bundle.to_string().into_bytes());
        let mnames = webhook_names(
            mapi.get_opt(name).await?.map(|c| {
                c.webhooks
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| w.name)
                    .collect()
            }),
            "MutatingWebhookConfiguration",
            name,
        );
        let vnames = webhook_names(
            vapi.get_opt(name).await?.map(|c| {
                c.webhooks
                    .unwrap_or_default()
                    .into_iter()
                    .map(|w| w.name)
                    .collect()
            }),
            "ValidatingWebhookConfiguration",
            name,
        );
        let (mnames, vnames) = match (mnames, vnames) {
            (Ok(m), Ok(v)) => (m, v),
            (Err(e), _) | (_, Err(e)) => {
                self.reports.ca_trusted.set(false);
                return Err(e);
            }
        };
        let entries = |names: &[String]| -> Vec<serde_json::Value> {
            names
                .iter()
                .map(|n| json!({"name": n, "clientConfig": {"caBundle": b64}}))
                .collect()
        };
        let mpatch = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                            "metadata": {"name": name}, "webhooks": entries(&mnames)});
        let vpatch = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                            "metadata": {"name": name}, "webhooks": entries(&vnames)});
        mapi.patch(name, &pp, &Patch::Apply(&mpatch)).await?;
        vapi.patch(name, &pp, &Patch::Apply(&vpatch)).await?;
        Ok(())
    }
}

/// One certificate as PEM (the caBundle's text format).
fn der_to_pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .filter_map(|c| std::str::from_utf8(c).ok())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

/// The webhook names of a configuration, or an error saying it must be installed.
fn webhook_names(
    names: Option<Vec<String>>,
    kind: &str,
    name: &str,
) -> anyhow::Result<Vec<String>> {
    names.ok_or_else(|| {
        anyhow::anyhow!("{kind} {name} does not exist: install it (the Helm chart does) or run with --manage-webhooks")
    })
}
