//! What `--apply` writes: the backup, the deletion of OpenKruise's objects, Helm's marks taken
//! off what is kept, our CRD schema, the release record's deletion; and the verification after.

use super::plan::{self, MigrationPlan};
use super::read::Read;
use super::{FIELD_MANAGER, HASH, MigrateError, access};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use sidecarset_core::api::ConversionTarget;

/// An object for the backup: what `kubectl create -f` takes back (no resourceVersion, no
/// managedFields), with its UID kept for the record (the API server assigns a new one).
fn for_backup(mut v: Value) -> Value {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "resourceVersion",
            "managedFields",
            "generation",
            "creationTimestamp",
        ] {
            m.remove(k);
        }
    }
    v
}

/// Writes every SidecarSet, ControllerRevision and Helm record of `r` to `path` as one List;
/// the number of objects.
pub(super) fn write_backup(r: &Read, path: &std::path::Path) -> Result<usize, MigrateError> {
    let mut items = Vec::new();
    for s in &r.sidecarsets {
        let mut v = serde_json::to_value(s).unwrap_or_default();
        v["apiVersion"] = json!("apps.kruise.io/v1beta1");
        v["kind"] = json!("SidecarSet");
        items.push(for_backup(v));
    }
    for x in &r.revisions {
        let mut v = serde_json::to_value(x).unwrap_or_default();
        v["apiVersion"] = json!("apps/v1");
        v["kind"] = json!("ControllerRevision");
        items.push(for_backup(v));
    }
    for x in &r.records {
        let mut v = serde_json::to_value(x).unwrap_or_default();
        v["apiVersion"] = json!("v1");
        v["kind"] = json!("Secret");
        items.push(for_backup(v));
    }
    let n = items.len();
    let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items});
    let text = serde_json::to_string_pretty(&list).unwrap_or_default();
    // Written whole, then renamed: a backup file is never half a backup.
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, text.as_bytes())
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| {
            MigrateError::Input(format!(
                "cannot write the backup {}: {e}; pass --backup with a writable path",
                path.display()
            ))
        })?;
    Ok(n)
}

/// Deletes one object of the release (gone already is fine).
async fn delete(c: &Client, d: &plan::Deletion) -> Result<(), MigrateError> {
    let (group, version) = match d.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", d.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &d.kind);
    let what = if d.namespace.is_empty() {
        format!("{} {}", d.kind, d.name)
    } else {
        format!("{} {}/{}", d.kind, d.namespace, d.name)
    };
    let (ar, caps) = match kube::discovery::pinned_kind(c, &gvk).await {
        Ok(x) => x,
        // The API is gone: so is the object.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(access(&format!("discovering {what}"), e)),
    };
    let api: Api<DynamicObject> = match caps.scope {
        kube::discovery::Scope::Cluster => Api::all_with(c.clone(), &ar),
        kube::discovery::Scope::Namespaced => Api::namespaced_with(c.clone(), &d.namespace, &ar),
    };
    match api.delete(&d.name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(access(&format!("deleting {what}"), e)),
    }
}

/// Takes Helm's ownership marks off a kept object, so no release claims it (a later
/// `helm install` of OpenKruise would otherwise adopt it again, and its uninstall delete it).
async fn disown(c: &Client, kind: &str, name: &str) -> Result<(), MigrateError> {
    let patch = json!({"metadata": {
        "annotations": {"meta.helm.sh/release-name": null, "meta.helm.sh/release-namespace": null},
        "labels": {"app.kubernetes.io/managed-by": null}}});
    let pp = PatchParams::default();
    let r = match kind {
        "CustomResourceDefinition" => Api::<CustomResourceDefinition>::all(c.clone())
            .patch(name, &pp, &Patch::Merge(&patch))
            .await
            .map(|_| ()),
        "Namespace" => Api::<k8s_openapi::api::core::v1::Namespace>::all(c.clone())
            .patch(name, &pp, &Patch::Merge(&patch))
            .await
            .map(|_| ()),
        _ => Ok(()),
    };
    match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(access(&format!("taking Helm's marks off {kind} {name}"), e)),
    }
}

/// The CRD's conversion settings that point at our operator: where our pod webhook is served
/// (its URL without the path, or its Service) and the CA it is trusted with; `None` when our
/// configuration has no webhook with a caBundle.
pub(super) fn our_conversion(cfg: &MutatingWebhookConfiguration) -> Option<Value> {
    let cc = &cfg
        .webhooks
        .as_deref()?
        .iter()
        .find(|w| {
            w.client_config
                .ca_bundle
                .as_ref()
                .is_some_and(|b| !b.0.is_empty())
        })?
        .client_config;
    let pem = String::from_utf8(cc.ca_bundle.as_ref()?.0.clone()).ok()?;
    let target = match (&cc.url, &cc.service) {
        (Some(url), _) => ConversionTarget::Url(url.rsplit_once('/')?.0.to_string()),
        (None, Some(s)) => ConversionTarget::Service {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            port: s.port.unwrap_or(443),
        },
        (None, None) => return None,
    };
    Some(sidecarset_core::api::conversion_spec(&target, Some(&pem)))
}

/// Our CRD's schema over OpenKruise's, with its conversion webhook pointed at our operator
/// (`ours`: our webhook configuration's name), so that v1alpha1 keeps working once
/// OpenKruise's manager is gone and before our operator manages the conversion settings itself
/// (the `helm upgrade` printed next). Without our configuration's caBundle, the conversion
/// settings are left as they are.
async fn apply_crd(c: &Client, ours: &str) -> Result<(), MigrateError> {
    let cfg = Api::<MutatingWebhookConfiguration>::all(c.clone())
        .get_opt(ours)
        .await
        .map_err(|e| access("reading our webhook configuration", e))?;
    let conversion = cfg.as_ref().and_then(our_conversion);
    let crds = Api::<CustomResourceDefinition>::all(c.clone());
    if let Some(conversion) = &conversion {
        // The client configuration's other field (OpenKruise's Service, or a URL) belongs to
        // another field manager: applied alone, ours would be merged next to it (both a URL
        // and a Service, which the API server refuses). Replace it first.
        let mut replace = conversion.clone();
        let cc = &mut replace["webhook"]["clientConfig"];
        let other = if cc.get("url").is_some() {
            "service"
        } else {
            "url"
        };
        cc[other] = Value::Null;
        crds.patch(
            sidecarset_core::api::CRD_NAME,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &Patch::Merge(&json!({"spec": {"conversion": replace}})),
        )
        .await
        .map_err(|e| access("pointing the CRD's conversion webhook at our operator", e))?;
    }
    let mut v = serde_json::to_value(sidecarset_core::api::crd()).unwrap_or_default();
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        match conversion {
            Some(conversion) => spec.insert("conversion".into(), conversion),
            None => spec.remove("conversion"),
        };
    }
    crds.patch(
        sidecarset_core::api::CRD_NAME,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&v),
    )
    .await
    .map(|_| ())
    .map_err(|e| access("applying our SidecarSet CRD schema", e))
}

/// Removes OpenKruise as planned: its objects in order, Helm's marks off what is kept, our CRD
/// schema and conversion settings, then the release record; what was done is appended to `out`.
pub(super) async fn remove_openkruise(
    c: &Client,
    p: &MigrationPlan,
    ours: &str,
    out: &mut String,
) -> Result<(), MigrateError> {
    for d in &p.deletions {
        delete(c, d).await?;
        out.push_str(&format!("deleted {} {}\n", d.kind, d.name));
    }
    for k in &p.kept {
        let name = k.name.rsplit('/').next().unwrap_or(&k.name);
        disown(c, &k.kind, name).await?;
    }
    apply_crd(c, ours).await?;
    for r in &p.release_secrets {
        let (ns, name) = r.split_once('/').unwrap_or(("", r));
        match Api::<Secret>::namespaced(c.clone(), ns)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(access(&format!("deleting Helm's record {r}"), e)),
        }
    }
    out.push_str(&format!(
        "deleted Helm's release record ({} Secrets); OpenKruise's objects listed as kept stay, unowned\n",
        p.release_secrets.len()
    ));
    Ok(())
}

/// What was lost between `before` and `after`: SidecarSets, revisions or injected pods gone or
/// recreated, the CRD recreated, a pod's hashes changed, OpenKruise's webhooks back.
pub(super) fn lost_between(before: &Read, after: &Read) -> Vec<String> {
    let mut lost = plan::lost(
        "SidecarSet",
        &before.snapshot.sidecarsets,
        &after.snapshot.sidecarsets,
    );
    // The same SidecarSet (same UID) as it was: our schema applied over OpenKruise's must not
    // have pruned or changed a field of any of them.
    for b in &before.sidecarsets {
        let Some(a) = after
            .sidecarsets
            .iter()
            .find(|a| a.metadata.uid == b.metadata.uid)
        else {
            continue;
        };
        let (bv, av) = (
            serde_json::to_value(b).unwrap_or_default(),
            serde_json::to_value(a).unwrap_or_default(),
        );
        let diff = plan::changed(&bv, &av);
        if !diff.is_empty() {
            lost.push(format!(
                "SidecarSet {} changed: {}",
                b.metadata.name.as_deref().unwrap_or_default(),
                diff.join(", ")
            ));
        }
    }
    lost.extend(plan::lost(
        "ControllerRevision",
        &before.snapshot.revisions,
        &after.snapshot.revisions,
    ));
    lost.extend(plan::lost(
        "pod",
        &before.snapshot.injected_pods,
        &after.snapshot.injected_pods,
    ));
    if let (Some(b), Some(a)) = (&before.snapshot.crd, &after.snapshot.crd)
        && a.uid != b.uid
    {
        lost.push(format!(
            "the CRD {} was recreated",
            sidecarset_core::api::CRD_NAME
        ));
    }
    for (uid, hash) in &before.pod_hashes {
        if after.pod_hashes.get(uid).is_some_and(|now| now != hash) {
            lost.push(format!("pod uid {uid}: its {HASH} annotation changed"));
        }
    }
    if !after.snapshot.kruise_webhooks.is_empty() {
        lost.push(format!(
            "OpenKruise's {} still exist (recreated?)",
            after.snapshot.kruise_webhooks.join(" and ")
        ));
    }
    lost
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(client: Value) -> MutatingWebhookConfiguration {
        serde_json::from_value(json!({"metadata": {"name": "ours"}, "webhooks": [
            {"name": "mpod.sidecarset-operator.io", "clientConfig": client,
             "sideEffects": "None", "admissionReviewVersions": ["v1"]}]}))
        .unwrap()
    }

    #[test]
    fn the_conversion_points_where_our_pod_webhook_is_served_with_its_ca() {
        use base64::Engine;
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
        let by_url = our_conversion(&cfg(
            json!({"url": "https://127.0.0.1:9443/mutate-pod", "caBundle": b64}),
        ))
        .unwrap();
        assert_eq!(
            by_url["webhook"]["clientConfig"],
            json!({"url": "https://127.0.0.1:9443/convert", "caBundle": b64})
        );
        assert_eq!(by_url["strategy"], "Webhook");
        let by_service = our_conversion(&cfg(json!({"service": {"namespace": "sso",
            "name": "sso-webhook", "path": "/mutate-pod", "port": 8443}, "caBundle": b64})))
        .unwrap();
        assert_eq!(
            by_service["webhook"]["clientConfig"],
            json!({"service": {"namespace": "sso", "name": "sso-webhook", "path": "/convert",
                   "port": 8443}, "caBundle": b64})
        );
        // Our operator has not served yet: nothing to point at.
        assert!(
            our_conversion(&cfg(json!({"url": "https://127.0.0.1:9443/mutate-pod"}))).is_none()
        );
    }
}
