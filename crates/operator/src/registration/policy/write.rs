//! Writing the parts of the policy, reading them back, and probing each.

use super::{FIELD_MANAGER, Keeper, MANAGED_BY};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sidecarset_core::policy::{self, Compiled, PROBE_ANNOTATION, Part};
use std::collections::{BTreeMap, BTreeSet};
use tracing::info;

impl Keeper {
    /// Our policies (every part) as the API server holds them, by name.
    pub(super) async fn live_parts(&self) -> anyhow::Result<BTreeMap<String, DynamicObject>> {
        let names: BTreeSet<String> = policy::part_names(&self.settings.name)
            .into_iter()
            .collect();
        let lp = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
        Ok(self
            .policies()
            .list(&lp)
            .await?
            .items
            .into_iter()
            .filter(|p| names.contains(&p.name_any()))
            .map(|mut p| {
                // A list's items carry no apiVersion and kind; what is compared with the
                // rendered policy needs them (else every pass would write every part again).
                p.types = Some(kube::core::TypeMeta {
                    api_version: policy::API_VERSION.into(),
                    kind: "MutatingAdmissionPolicy".into(),
                });
                (p.name_any(), p)
            })
            .collect())
    }

    /// Writes every part's policy and binding that differs from what is rendered, then deletes
    /// the parts no longer rendered (after: a pod is never left without a part that covers
    /// it). Returns whether anything was written.
    pub(super) async fn write(
        &self,
        compiled: &Compiled,
        live: &BTreeMap<String, DynamicObject>,
    ) -> anyhow::Result<bool> {
        let mut wrote = false;
        for part in &compiled.parts {
            wrote |= self.write_part(part, live.get(&part.name)).await?;
        }
        let kept: BTreeSet<&str> = compiled.parts.iter().map(|p| p.name.as_str()).collect();
        for name in live.keys().filter(|n| !kept.contains(n.as_str())) {
            for api in [self.bindings(), self.policies()] {
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            crate::metrics::metrics().policy_writes.inc();
            info!(%name, "deleted a part of the injection policy no longer needed");
            wrote = true;
        }
        if wrote {
            info!(
                token = %compiled.token(),
                parts = compiled.parts.len(),
                policy = compiled.included.len(),
                webhook = compiled.fallbacks.len(),
                "wrote the injection policy"
            );
        }
        Ok(wrote)
    }

    async fn write_part(&self, part: &Part, live: Option<&DynamicObject>) -> anyhow::Result<bool> {
        let mut wrote = false;
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let m = crate::metrics::metrics();
        let live = live.map(|l| serde_json::to_value(l).unwrap_or_default());
        if !live.as_ref().is_some_and(|l| contains(l, &part.policy)) {
            self.policies()
                .patch(&part.name, &pp, &Patch::Apply(&part.policy))
                .await?;
            m.policy_writes.inc();
            wrote = true;
        }
        let binding = self.bindings().get_opt(&part.name).await?;
        let binding = binding.map(|b| serde_json::to_value(b).unwrap_or_default());
        // The binding as rendered, whole: a selector the API server holds but the part no
        // longer renders must go too (server-side apply of the same field manager drops it).
        if !binding
            .as_ref()
            .is_some_and(|b| contains(b, &part.binding) && same_match(b, &part.binding))
        {
            self.bindings()
                .patch(&part.name, &pp, &Patch::Apply(&part.binding))
                .await?;
            m.policy_writes.inc();
            wrote = true;
        }
        Ok(wrote)
    }

    /// The token of the version of `part` the API server applies now, from a dry-run probe pod
    /// with the part's probe labels.
    pub(super) async fn probe(&self, part: &Part) -> anyhow::Result<Option<String>> {
        let probe: Pod = serde_json::from_value(json!({
            "metadata": {"generateName": "sidecarset-policy-probe-", "labels": part.probe_labels},
            "spec": {
                "automountServiceAccountToken": false,
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "probe", "image": "probe",
                    "securityContext": {"allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]}}}],
            },
        }))?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        let got = pods
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &probe,
            )
            .await?;
        Ok(got.annotations().get(PROBE_ANNOTATION).cloned())
    }
}

/// True when the binding `have` has the match resources `want` renders (none when it renders
/// none): [`contains`] alone does not see a field the rendering dropped.
fn same_match(have: &Value, want: &Value) -> bool {
    let get = |v: &Value| v["spec"].get("matchResources").cloned();
    match (get(have), get(want)) {
        (_, Some(w)) => get(have).is_some_and(|h| contains(&h, &w)),
        (Some(h), None) => h.get("objectSelector").is_none_or(|s| s == &json!({})),
        (None, None) => true,
    }
}

/// True when `have` holds every field of `want` with its value (lists item by item): the API
/// server adds defaults and metadata to what was written.
pub(super) fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| contains(hv, v))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(a, b)| contains(a, b))
        }
        (h, w) => h == w,
    }
}
