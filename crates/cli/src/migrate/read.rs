//! What the migration reads (never writes): OpenKruise's Helm releases, the SidecarSet CRD,
//! SidecarSets, their ControllerRevisions, injected pods, OpenKruise's other objects and
//! webhooks, and our own operator ([`read`]).

use super::plan::{self, CrdState, FoundRelease, Obj, Ours, Snapshot};
use super::{
    FromOpenKruiseArgs, HASH, INFRASTRUCTURE, INJECTED_LIST, MigrateError, access, release,
};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Client, ResourceExt};

/// The SidecarSet API at its storage version.
fn sidecarset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps.kruise.io", "v1beta1", "SidecarSet"),
        "sidecarsets",
    )
}

/// The identity of an object (namespace, name, UID).
fn obj_of(meta: &kube::api::ObjectMeta) -> Obj {
    Obj {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
    }
}

/// What [`releases`] found: OpenKruise's releases, their record Secrets, and the latest records
/// of releases that could not be decoded ("NAMESPACE/SECRET: why").
struct Releases {
    found: Vec<FoundRelease>,
    records: Vec<Secret>,
    unreadable: Vec<String>,
}

/// Every OpenKruise release: the latest record of each Helm release (any namespace) whose
/// chart is `kruise` or whose manifest renders OpenKruise's SidecarSet CRD or pod webhook. A
/// record that cannot be decoded (another tool's Secret of Helm's type, a damaged record of
/// some other release) is set aside, not an error: the plan names it.
async fn releases(c: &Client) -> Result<Releases, MigrateError> {
    let secrets: Api<Secret> = Api::all(c.clone());
    let lp = ListParams::default()
        .fields(&format!("type={}", release::RELEASE_SECRET_TYPE))
        .labels("owner=helm");
    let list = secrets
        .list(&lp)
        .await
        .map_err(|e| access("listing Helm's release Secrets", e))?
        .items;
    let mut latest: std::collections::BTreeMap<(String, String), (u64, &Secret)> =
        Default::default();
    for s in &list {
        let secret_name = s.name_any();
        let Some((name, version)) = release::secret_name_parts(&secret_name) else {
            continue;
        };
        let key = (s.namespace().unwrap_or_default(), name.to_string());
        if latest.get(&key).is_none_or(|(v, _)| *v < version) {
            latest.insert(key, (version, s));
        }
    }
    let mut found = Vec::new();
    let mut records = Vec::new();
    let mut unreadable = Vec::new();
    for ((ns, name), (_, s)) in latest {
        let where_ = format!("Secret {ns}/{}", s.name_any());
        let Some(data) = s.data.as_ref().and_then(|d| d.get("release")) else {
            continue;
        };
        let decoded = release::decode(&data.0)
            .map_err(|e| format!("{where_}: {e}"))
            .and_then(|v| release::parse(&v, &where_))
            .and_then(|rel| {
                release::objects(&rel.manifest, &rel.namespace)
                    .map(|objects| (rel, objects))
                    .map_err(|e| format!("{where_}: {e}"))
            });
        let (rel, objects) = match decoded {
            Ok(x) => x,
            Err(e) => {
                unreadable.push(format!("{ns}/{}: {e}", s.name_any()));
                continue;
            }
        };
        let is_kruise = rel.chart_name == "kruise"
            || objects.iter().any(|o| {
                (o.kind == "CustomResourceDefinition" && o.name == sidecarset_operator_crd())
                    || (o.kind == "MutatingWebhookConfiguration" && o.name == plan::KRUISE_MUTATING)
            });
        if !is_kruise {
            continue;
        }
        let mut all: Vec<&Secret> = list
            .iter()
            .filter(|x| {
                x.namespace().as_deref() == Some(ns.as_str())
                    && release::secret_name_parts(&x.name_any()).is_some_and(|(n, _)| n == name)
            })
            .collect();
        all.sort_by_key(|x| release::secret_name_parts(&x.name_any()).map(|(_, v)| v));
        records.extend(all.iter().map(|x| (*x).clone()));
        found.push(FoundRelease {
            release: rel,
            objects,
            secret_namespace: ns.clone(),
            secrets: all.iter().map(|x| x.name_any()).collect(),
        });
    }
    Ok(Releases {
        found,
        records,
        unreadable,
    })
}

/// The SidecarSet CRD's name.
fn sidecarset_operator_crd() -> &'static str {
    sidecarset_core::api::CRD_NAME
}

/// Everything the plan needs, read (never written).
pub(super) struct Read {
    pub(super) snapshot: Snapshot,
    /// Full objects for the backup.
    pub(super) sidecarsets: Vec<DynamicObject>,
    pub(super) revisions: Vec<ControllerRevision>,
    pub(super) records: Vec<Secret>,
    /// Pod UID → its hash annotation (checked unchanged after).
    pub(super) pod_hashes: std::collections::BTreeMap<String, String>,
}

/// Everything the plan needs, read in one pass.
pub(super) async fn read(c: &Client, o: &FromOpenKruiseArgs) -> Result<Read, MigrateError> {
    let Releases {
        found,
        records,
        unreadable,
    } = releases(c).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let crd = crds
        .get_opt(sidecarset_core::api::CRD_NAME)
        .await
        .map_err(|e| access("reading the SidecarSet CRD", e))?;
    let crd_state = crd.as_ref().map(crd_state);
    // v1beta1 is the storage version: listing it needs no conversion webhook (OpenKruise's may
    // be unreachable, ours not there yet).
    let serves_beta = crd_state
        .as_ref()
        .is_some_and(|c| c.served.iter().any(|v| v == "v1beta1"));
    let sidecarsets = if serves_beta {
        Api::<DynamicObject>::all_with(c.clone(), &sidecarset_resource())
            .list(&ListParams::default())
            .await
            .map_err(|e| access("listing SidecarSets (v1beta1)", e))?
            .items
    } else {
        Vec::new()
    };
    let revisions = Api::<ControllerRevision>::all(c.clone())
        .list(&ListParams::default().labels("kruise.io/sidecarset-name"))
        .await
        .map_err(|e| access("listing the SidecarSets' ControllerRevisions", e))?
        .items;
    let pods = Api::<Pod>::all(c.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| access("listing pods", e))?
        .items;
    let injected: Vec<_> = pods
        .iter()
        .filter(|p| p.annotations().contains_key(INJECTED_LIST))
        .collect();
    let pod_hashes = injected
        .iter()
        .map(|p| {
            (
                p.uid().unwrap_or_default(),
                p.annotations().get(HASH).cloned().unwrap_or_default(),
            )
        })
        .collect();
    let others = other_kruise_objects(c).await?;
    let kruise_webhooks = kruise_webhooks(c).await?;
    let ours = ours(c, o).await?;
    Ok(Read {
        snapshot: Snapshot {
            releases: found,
            crd: crd_state,
            sidecarsets: sidecarsets.iter().map(|s| obj_of(&s.metadata)).collect(),
            revisions: revisions.iter().map(|r| obj_of(&r.metadata)).collect(),
            injected_pods: injected.iter().map(|p| obj_of(&p.metadata)).collect(),
            others,
            kruise_webhooks,
            ours,
            unreadable_records: unreadable,
        },
        sidecarsets,
        revisions,
        records,
        pod_hashes,
    })
}

/// The SidecarSet CRD's UID, served and storage versions, and whether it is being deleted.
fn crd_state(crd: &CustomResourceDefinition) -> CrdState {
    CrdState {
        uid: crd.uid().unwrap_or_default(),
        served: crd
            .spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect(),
        storage: crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
            .unwrap_or_default(),
        deleting: crd.metadata.deletion_timestamp.is_some(),
    }
}

/// Other OpenKruise objects in use: (resource, count) for each of its resources.
async fn other_kruise_objects(c: &Client) -> Result<Vec<(String, usize)>, MigrateError> {
    let mut others = Vec::new();
    let discovery = kube::Discovery::new(c.clone())
        .filter(&["apps.kruise.io", "policy.kruise.io"])
        .run()
        .await
        .map_err(|e| access("discovering OpenKruise's APIs", e))?;
    for g in discovery.groups() {
        // Every resource at its most stable version: the preferred version of apps.kruise.io
        // (v1beta1, for SidecarSets) does not serve CloneSets (v1alpha1).
        for (ar, _) in g.resources_by_stability() {
            if INFRASTRUCTURE.contains(&ar.plural.as_str()) {
                continue;
            }
            let n = Api::<DynamicObject>::all_with(c.clone(), &ar)
                .list_metadata(&ListParams::default())
                .await
                .map_err(|e| access(&format!("listing {}.{}", ar.plural, ar.group), e))?
                .items
                .len();
            others.push((format!("{}.{}", ar.plural, ar.group), n));
        }
    }
    Ok(others)
}

/// OpenKruise's webhook configurations that exist ("mutatingwebhookconfiguration/NAME").
async fn kruise_webhooks(c: &Client) -> Result<Vec<String>, MigrateError> {
    let mut kruise_webhooks = Vec::new();
    let m: Api<MutatingWebhookConfiguration> = Api::all(c.clone());
    let v: Api<ValidatingWebhookConfiguration> = Api::all(c.clone());
    if m.get_opt(plan::KRUISE_MUTATING)
        .await
        .map_err(|e| access("reading OpenKruise's webhook configuration", e))?
        .is_some()
    {
        kruise_webhooks.push(format!(
            "mutatingwebhookconfiguration/{}",
            plan::KRUISE_MUTATING
        ));
    }
    if v.get_opt(plan::KRUISE_VALIDATING)
        .await
        .map_err(|e| access("reading OpenKruise's webhook configuration", e))?
        .is_some()
    {
        kruise_webhooks.push(format!(
            "validatingwebhookconfiguration/{}",
            plan::KRUISE_VALIDATING
        ));
    }
    Ok(kruise_webhooks)
}

/// Our webhook configuration (registered, every webhook with a caBundle) and our Deployment's
/// ready replicas.
async fn ours(c: &Client, o: &FromOpenKruiseArgs) -> Result<Ours, MigrateError> {
    let ours_cfg = Api::<MutatingWebhookConfiguration>::all(c.clone())
        .get_opt(&o.webhook_config_name)
        .await
        .map_err(|e| access("reading our webhook configuration", e))?;
    let ready_replicas = match Api::<Deployment>::namespaced(
        c.clone(),
        o.operator_namespace
            .as_deref()
            .unwrap_or(crate::target::DEFAULT_OPERATOR_NAMESPACE),
    )
    .list(&ListParams::default().labels("app.kubernetes.io/name=sidecarset-operator"))
    .await
    {
        Ok(l) => {
            let wanted: i32 = l.items.iter().map(|d| d.spec.replicas.unwrap_or(1)).sum();
            (wanted > 0).then(|| {
                l.items
                    .iter()
                    .map(|d| {
                        d.status
                            .as_ref()
                            .and_then(|s| s.ready_replicas)
                            .unwrap_or(0)
                    })
                    .sum()
            })
        }
        Err(_) => None,
    };
    Ok(Ours {
        registered: ours_cfg.is_some(),
        ca_bundle: ours_cfg.as_ref().is_some_and(|cfg| {
            let hooks = cfg.webhooks.as_deref().unwrap_or_default();
            !hooks.is_empty()
                && hooks.iter().all(|w| {
                    w.client_config
                        .ca_bundle
                        .as_ref()
                        .is_some_and(|b| !b.0.is_empty())
                })
        }),
        ready_replicas,
    })
}
