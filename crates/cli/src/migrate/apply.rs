//! What `--apply` writes: the backup, the deletion of OpenKruise's objects, Helm's marks taken
//! off what is kept, our CRD schema, the release record's deletion; and the verification after.

use super::plan::{self, MigrationPlan};
use super::read::Read;
use super::{FIELD_MANAGER, HASH, MigrateError, access};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

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

/// Our CRD's schema over OpenKruise's, without its conversion settings (the running operator
/// owns those: its Service or URL and caBundle).
async fn apply_crd(c: &Client) -> Result<(), MigrateError> {
    let mut v = serde_json::to_value(sidecarset_core::api::crd()).unwrap_or_default();
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("conversion");
    }
    Api::<CustomResourceDefinition>::all(c.clone())
        .patch(
            sidecarset_core::api::CRD_NAME,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&v),
        )
        .await
        .map(|_| ())
        .map_err(|e| access("applying our SidecarSet CRD schema", e))
}

/// Removes OpenKruise as planned: its objects in order, Helm's marks off what is kept, our CRD
/// schema, then the release record; what was done is appended to `out`.
pub(super) async fn remove_openkruise(
    c: &Client,
    p: &MigrationPlan,
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
    apply_crd(c).await?;
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
