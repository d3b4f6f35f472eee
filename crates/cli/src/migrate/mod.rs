//! `migrate from-openkruise`: moves a cluster from OpenKruise (installed with its Helm chart)
//! to this operator without losing a SidecarSet, a ControllerRevision or a pod, and without a
//! moment in which new pods are created without their sidecars.
//!
//! OpenKruise's chart renders its CRDs and its Namespace as ordinary templates with no keep
//! policy, so `helm uninstall` deletes every SidecarSet. Helm reads the keep policy from the
//! release's stored manifest, never from live objects; rather than rewrite that record or
//! depend on a Helm version's uninstall, this command removes OpenKruise itself, object by
//! object from the release's manifest (webhook configurations first, then workloads, then the
//! rest, never a CRD or a Namespace), and deletes Helm's release record last. That works the
//! same whichever Helm wrote the record (3 and 4 store it alike) and runs no chart hook.
//!
//! Two steps, each a run of `--apply` (the plan says which is next):
//! 1. OpenKruise runs, our operator does not: back up; nothing is changed; print the
//!    `helm install` of our chart next to OpenKruise (`--allow-openkruise`).
//! 2. Both run (our webhooks registered with a caBundle, the Deployment ready): back up,
//!    delete OpenKruise's objects, take Helm's ownership marks off what is kept, apply our CRD
//!    schema, delete the release record, and verify that every SidecarSet, revision and
//!    injected pod is still there with the same UID.
//!
//! Between the two, a pod passes both webhooks: OpenKruise's first (the API server calls
//! configurations in the order of their names), then ours, which skips every SidecarSet the pod
//! already records in `kruise.io/sidecarset-hash`; the pod is exactly what OpenKruise made.
//!
//! Only the kube client, k8s-openapi, serde and the core's `api` module are used; the exit codes
//! are the other tools' (`inspect`), plus 4 for a refused plan.

pub mod plan;
pub mod release;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, ResourceExt};
use plan::{CrdState, FoundRelease, Obj, Options, OtherKinds, Ours, Phase, Snapshot};
use serde_json::{Value, json};
use std::path::PathBuf;

/// Exit codes: 0 done (or a dry run); 1 bad usage or input; 2 no access to the cluster;
/// 4 refused (blockers, or the verification found something lost).
pub use crate::inspect::{EXIT_ACCESS, EXIT_INPUT, EXIT_OK};
pub const EXIT_REFUSED: u8 = 4;

const FIELD_MANAGER: &str = "sidecarset-operator-migrate";
const INJECTED_LIST: &str = "kruise.io/sidecarset-injected-list";
const HASH: &str = "kruise.io/sidecarset-hash";
/// OpenKruise objects that its daemon makes by itself (one per node), not a user's workload.
const INFRASTRUCTURE: &[&str] = &["nodeimages", "nodepodprobes", "sidecarsets"];

#[derive(clap::Subcommand, Debug)]
pub enum MigrateCommand {
    /// From OpenKruise installed with its Helm chart (in any namespace): a dry run prints the
    /// plan; --apply does the next step.
    FromOpenkruise(FromOpenKruiseArgs),
}

#[derive(clap::Args, Debug)]
pub struct FromOpenKruiseArgs {
    /// Do the next step (without it: print the plan, change nothing).
    #[arg(long)]
    pub apply: bool,
    /// Print the plan only (the default; says so explicitly in scripts).
    #[arg(long, conflicts_with = "apply")]
    pub dry_run: bool,
    /// The OpenKruise release, NAMESPACE/NAME, when several are found.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub release: Option<String>,
    /// What becomes of OpenKruise's other workloads (CloneSets, Advanced StatefulSets, ...) in
    /// use; without it the migration refuses while any exists.
    #[arg(long, value_enum)]
    pub other_kinds: Option<OtherKinds>,
    /// Where --apply writes the backup of every SidecarSet, ControllerRevision and Helm record
    /// first (default: openkruise-backup-<time>.json in the current directory).
    #[arg(long, value_name = "FILE")]
    pub backup: Option<PathBuf>,
    /// Our webhook configurations' name (the chart's webhook.configurationName).
    #[arg(long, default_value = "sidecarset-operator")]
    pub webhook_config_name: String,
    /// Our operator's namespace and release (for its readiness and the commands printed).
    #[arg(long, default_value = "sidecarset-system")]
    pub operator_namespace: String,
    #[arg(long, default_value = "sidecarset-operator")]
    pub operator_release: String,
    /// The chart reference printed in `helm install`.
    #[arg(long, default_value = "charts/sidecarset-operator")]
    pub chart: String,
    /// The kube context (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
}

/// What the command printed and its exit code.
pub struct MigrateOutput {
    pub stdout: String,
    pub code: u8,
}

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("{0}")]
    Access(String),
    #[error("{0}")]
    Input(String),
}

impl MigrateError {
    pub fn exit_code(&self) -> u8 {
        match self {
            MigrateError::Access(_) => EXIT_ACCESS,
            MigrateError::Input(_) => EXIT_INPUT,
        }
    }
}

fn access(what: &str, e: kube::Error) -> MigrateError {
    MigrateError::Access(format!(
        "{what}: {e}; check the kube context and that you may read (and, with --apply, delete) it"
    ))
}

async fn connect(context: Option<&str>) -> Result<Client, MigrateError> {
    let config = match context {
        Some(c) => kube::Config::from_kubeconfig(&kube::config::KubeConfigOptions {
            context: Some(c.to_string()),
            ..Default::default()
        })
        .await
        .map_err(|e| MigrateError::Access(format!("cannot use kube context {c:?}: {e}")))?,
        None => kube::Config::infer().await.map_err(|e| {
            MigrateError::Access(format!(
                "no cluster to talk to: {e}; set KUBECONFIG or pass --context"
            ))
        })?,
    };
    Client::try_from(config)
        .map_err(|e| MigrateError::Access(format!("cannot build a client for the cluster: {e}")))
}

fn sidecarset_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apps.kruise.io", "v1beta1", "SidecarSet"),
        "sidecarsets",
    )
}

fn obj_of(meta: &kube::api::ObjectMeta) -> Obj {
    Obj {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
    }
}

/// Every OpenKruise release: the latest record of each Helm release (any namespace) whose
/// chart is `kruise` or whose manifest renders OpenKruise's SidecarSet CRD or pod webhook.
async fn releases(c: &Client) -> Result<(Vec<FoundRelease>, Vec<Secret>), MigrateError> {
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
    for ((ns, name), (_, s)) in latest {
        let where_ = format!("Secret {ns}/{}", s.name_any());
        let Some(data) = s.data.as_ref().and_then(|d| d.get("release")) else {
            continue;
        };
        let v =
            release::decode(&data.0).map_err(|e| MigrateError::Input(format!("{where_}: {e}")))?;
        let rel = release::parse(&v, &where_).map_err(MigrateError::Input)?;
        let objects = release::objects(&rel.manifest, &rel.namespace)
            .map_err(|e| MigrateError::Input(format!("{where_}: {e}")))?;
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
    Ok((found, records))
}

fn sidecarset_operator_crd() -> &'static str {
    sidecarset_core::api::CRD_NAME
}

/// Everything the plan needs, read (never written).
struct Read {
    snapshot: Snapshot,
    /// Full objects for the backup.
    sidecarsets: Vec<DynamicObject>,
    revisions: Vec<ControllerRevision>,
    records: Vec<Secret>,
    /// Pod UID → its hash annotation (checked unchanged after).
    pod_hashes: std::collections::BTreeMap<String, String>,
}

async fn read(c: &Client, o: &FromOpenKruiseArgs) -> Result<Read, MigrateError> {
    let (found, records) = releases(c).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let crd = crds
        .get_opt(sidecarset_core::api::CRD_NAME)
        .await
        .map_err(|e| access("reading the SidecarSet CRD", e))?;
    let crd_state = crd.as_ref().map(|crd| CrdState {
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
    });
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

    // Other OpenKruise objects in use.
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

    let ours_cfg = m
        .get_opt(&o.webhook_config_name)
        .await
        .map_err(|e| access("reading our webhook configuration", e))?;
    let ready_replicas = match Api::<Deployment>::namespaced(c.clone(), &o.operator_namespace)
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
    let ours = Ours {
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
    };

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
        },
        sidecarsets,
        revisions,
        records,
        pod_hashes,
    })
}

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

fn write_backup(r: &Read, path: &std::path::Path) -> Result<usize, MigrateError> {
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

pub async fn from_openkruise(args: &FromOpenKruiseArgs) -> Result<MigrateOutput, MigrateError> {
    let c = connect(args.context.as_deref()).await?;
    let options = Options {
        release: args.release.clone(),
        other_kinds: args.other_kinds,
        webhook_config_name: args.webhook_config_name.clone(),
        operator_namespace: args.operator_namespace.clone(),
        operator_release: args.operator_release.clone(),
        chart: args.chart.clone(),
    };
    let before = read(&c, args).await?;
    let p = plan::plan(&before.snapshot, &options);
    let mut out = plan::render(&p, &before.snapshot, args.apply);
    if !p.blockers.is_empty() {
        return Ok(MigrateOutput {
            stdout: out,
            code: EXIT_REFUSED,
        });
    }
    if !args.apply || p.phase == Phase::NothingToDo {
        return Ok(MigrateOutput {
            stdout: out,
            code: EXIT_OK,
        });
    }

    let path = args.backup.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "openkruise-backup-{}.json",
            jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ")
        ))
    });
    let n = write_backup(&before, &path)?;
    out.push_str(&format!(
        "\nBacked up {n} objects ({} SidecarSets, {} ControllerRevisions, {} Helm records) to {}\n",
        before.sidecarsets.len(),
        before.revisions.len(),
        before.records.len(),
        path.display()
    ));
    if p.phase == Phase::InstallOperator {
        out.push_str("Nothing else was changed: OpenKruise runs as before.\n");
        return Ok(MigrateOutput {
            stdout: out,
            code: EXIT_OK,
        });
    }

    for d in &p.deletions {
        delete(&c, d).await?;
        out.push_str(&format!("deleted {} {}\n", d.kind, d.name));
    }
    for k in &p.kept {
        let name = k.name.rsplit('/').next().unwrap_or(&k.name);
        disown(&c, &k.kind, name).await?;
    }
    apply_crd(&c).await?;
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

    // Verify: nothing lost, nothing recreated, every injected pod's hashes unchanged.
    let after = read(&c, args).await?;
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
    if !lost.is_empty() {
        out.push_str(&format!(
            "\nVerification FAILED ({}); restore from {} with `kubectl create -f`:\n",
            lost.len(),
            path.display()
        ));
        for l in &lost {
            out.push_str(&format!("  - {l}\n"));
        }
        return Ok(MigrateOutput {
            stdout: out,
            code: EXIT_REFUSED,
        });
    }
    out.push_str(&format!(
        "\nVerified: {} SidecarSets, {} ControllerRevisions, {} injected pods, all with the same UIDs (and the pods with the same hashes)\n\nNext:\n",
        after.snapshot.sidecarsets.len(),
        after.snapshot.revisions.len(),
        after.snapshot.injected_pods.len()
    ));
    for n in &p.next {
        out.push_str(&format!("  {n}\n"));
    }
    Ok(MigrateOutput {
        stdout: out,
        code: EXIT_OK,
    })
}
