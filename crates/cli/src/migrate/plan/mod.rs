//! The migration's plan: a pure function of what the preflight saw ([`Snapshot`]) and what
//! the user chose ([`Options`]). It says which phase the cluster is in, what each step does to
//! which object, what is kept and why, and what refuses the migration (blockers, each one
//! sentence that names the object and what to do).

use super::release::{ManifestObject, Release};
use serde::Serialize;

mod render;
#[cfg(test)]
mod tests;
mod verify;

pub use render::render;
pub use verify::{changed, lost};

/// OpenKruise's webhook configurations (what its chart renders, and what the operator refuses
/// to run next to).
pub const KRUISE_MUTATING: &str = "kruise-mutating-webhook-configuration";
pub const KRUISE_VALIDATING: &str = "kruise-validating-webhook-configuration";

/// The OpenKruise version (major, minor) whose SidecarSet schema step 2 applies (our CRD, with
/// every field of OpenKruise 1.9): a newer OpenKruise may store fields that schema would prune.
pub const SCHEMA_OF: (u64, u64) = (1, 9);

/// What to do with OpenKruise's other workloads (CloneSets, Advanced StatefulSets, ...), whose
/// only controller is OpenKruise's manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OtherKinds {
    /// Remove OpenKruise anyway: the objects and their pods stay, but nothing reconciles them
    /// (no scaling, no updates, no replacement of a deleted pod) until OpenKruise is back.
    Orphan,
}

/// An object whose identity is checked before and after (`namespace` empty when
/// cluster-scoped).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Obj {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl Obj {
    pub fn key(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }
}

/// An OpenKruise release found in the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoundRelease {
    /// The latest record.
    pub release: Release,
    pub objects: Vec<ManifestObject>,
    /// Namespace of its record Secrets (the release namespace).
    pub secret_namespace: String,
    /// Every record Secret of the release (all versions).
    pub secrets: Vec<String>,
}

/// The SidecarSet CRD as found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrdState {
    pub uid: String,
    /// Served versions, and the storage one.
    pub served: Vec<String>,
    pub storage: String,
    pub deleting: bool,
}

/// Our own webhook configuration and operator, as found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ours {
    /// Our MutatingWebhookConfiguration exists.
    pub registered: bool,
    /// Every webhook of it carries a caBundle (the operator, or cert-manager, wrote it).
    pub ca_bundle: bool,
    /// Ready replicas of the operator's Deployment, `None` when it has none or runs 0
    /// replicas (the operator runs outside the cluster, webhooks by URL).
    pub ready_replicas: Option<i32>,
}

impl Ours {
    pub fn ready(&self) -> bool {
        self.registered && self.ca_bundle && self.ready_replicas.is_none_or(|n| n > 0)
    }
}

/// Everything the preflight read.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub releases: Vec<FoundRelease>,
    pub crd: Option<CrdState>,
    pub sidecarsets: Vec<Obj>,
    pub revisions: Vec<Obj>,
    /// Pods carrying `kruise.io/sidecarset-injected-list`.
    pub injected_pods: Vec<Obj>,
    /// Other OpenKruise objects in use: (resource, count).
    pub others: Vec<(String, usize)>,
    /// OpenKruise's webhook configurations that exist ("mutatingwebhookconfiguration/NAME").
    pub kruise_webhooks: Vec<String>,
    pub ours: Ours,
    /// Helm release records that could not be decoded ("NAMESPACE/SECRET: why"): skipped.
    pub unreadable_records: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// `NAMESPACE/NAME` of the release, when several are found.
    pub release: Option<String>,
    pub other_kinds: Option<OtherKinds>,
    /// Our webhook configurations' name.
    pub webhook_config_name: String,
    /// Our operator's namespace and Helm release, for the commands printed.
    pub operator_namespace: String,
    pub operator_release: String,
    /// The chart reference for `helm install`.
    pub chart: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationPhase {
    /// No OpenKruise: nothing to migrate.
    NothingToDo,
    /// OpenKruise runs, our operator is not ready yet: back up, then install ours next to it.
    InstallOperator,
    /// Both run: back up, remove OpenKruise (webhooks first), forget its release, verify.
    RemoveOpenKruise,
}

/// One deletion, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Deletion {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Kept {
    pub kind: String,
    pub name: String,
    pub why: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct MigrationPlan {
    pub phase: MigrationPhase,
    pub blockers: Vec<String>,
    /// The release (`NAMESPACE/NAME`, chart version), when one was found.
    pub release: Option<String>,
    pub crds_are_release_templates: bool,
    pub kept: Vec<Kept>,
    /// Deletions, in order: webhook configurations, then workloads, then the rest.
    pub deletions: Vec<Deletion>,
    /// Release record Secrets to delete last (`NAMESPACE/NAME`).
    pub release_secrets: Vec<String>,
    pub notes: Vec<String>,
    /// What to run after this step.
    pub next: Vec<String>,
}

fn is_crd(o: &ManifestObject) -> bool {
    o.kind == "CustomResourceDefinition"
}

fn is_webhook_config(kind: &str) -> bool {
    matches!(
        kind,
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration"
    )
}

fn is_workload(kind: &str) -> bool {
    matches!(kind, "Deployment" | "DaemonSet" | "StatefulSet")
}

/// Cluster-scoped kinds a chart may render (for messages only; the deletion asks discovery).
fn cluster_scoped(kind: &str) -> bool {
    matches!(
        kind,
        "Namespace"
            | "CustomResourceDefinition"
            | "ClusterRole"
            | "ClusterRoleBinding"
            | "MutatingWebhookConfiguration"
            | "ValidatingWebhookConfiguration"
            | "PriorityClass"
            | "APIService"
    )
}

/// Why an object of the release must stay, if it must.
fn keep_reason(o: &ManifestObject) -> Option<String> {
    if o.keep {
        return Some("its manifest says helm.sh/resource-policy: keep".into());
    }
    if is_crd(o) {
        return Some(if o.name == sidecarset_core::api::CRD_NAME {
            "deleting it deletes every SidecarSet (and, through ownership, their ControllerRevisions)".into()
        } else {
            format!(
                "deleting it deletes every {} object",
                o.name.split('.').next().unwrap_or(&o.name)
            )
        });
    }
    if o.kind == "Namespace" {
        return Some(
            "deleting it deletes everything in it (OpenKruise keeps the SidecarSets' ControllerRevisions in its namespace)"
                .into(),
        );
    }
    None
}

fn select<'a>(
    s: &'a Snapshot,
    o: &Options,
    blockers: &mut Vec<String>,
) -> Option<&'a FoundRelease> {
    match (&o.release, s.releases.as_slice()) {
        (Some(want), all) => {
            let found = all
                .iter()
                .find(|r| format!("{}/{}", r.release.namespace, r.release.name) == *want);
            if found.is_none() {
                let names: Vec<String> = all
                    .iter()
                    .map(|r| format!("{}/{}", r.release.namespace, r.release.name))
                    .collect();
                blockers.push(format!(
                    "--release {want}: no OpenKruise Helm release of that namespace/name (found: {}); pass one of them",
                    if names.is_empty() { "none".into() } else { names.join(", ") }
                ));
            }
            found
        }
        (None, []) => None,
        (None, [one]) => Some(one),
        (None, all) => {
            let names: Vec<String> = all
                .iter()
                .map(|r| format!("{}/{}", r.release.namespace, r.release.name))
                .collect();
            blockers.push(format!(
                "{} Helm releases of OpenKruise were found ({}); say which one to migrate with --release NAMESPACE/NAME",
                all.len(),
                names.join(", ")
            ));
            None
        }
    }
}

/// The plan for a snapshot. Blockers make `--apply` refuse; the rest says what happens.
pub fn plan(s: &Snapshot, o: &Options) -> MigrationPlan {
    let mut blockers = Vec::new();
    let mut notes = Vec::new();
    let rel = select(s, o, &mut blockers);

    let mut p = MigrationPlan {
        phase: MigrationPhase::NothingToDo,
        blockers: Vec::new(),
        release: rel.map(|r| {
            format!(
                "{}/{} (chart {} {}, revision {})",
                r.release.namespace,
                r.release.name,
                r.release.chart_name,
                r.release.chart_version,
                r.release.version
            )
        }),
        crds_are_release_templates: rel.is_some_and(|r| r.objects.iter().any(is_crd)),
        kept: Vec::new(),
        deletions: Vec::new(),
        release_secrets: Vec::new(),
        notes: Vec::new(),
        next: Vec::new(),
    };

    if rel.is_none() && s.releases.is_empty() {
        if s.kruise_webhooks.is_empty() {
            notes.push("no OpenKruise found (no Helm release of its chart, no webhook configuration of it): nothing to migrate".into());
            p.next.push(install_command(o, false));
        } else {
            blockers.push(format!(
                "OpenKruise's {} exist but no Helm release of OpenKruise was found in any namespace (installed with kubectl or kustomize, or Helm storing releases in ConfigMaps/SQL{}): this command migrates Helm installs only; see \"OpenKruise installed without Helm\" in the documentation (docs/src/migrate.md) for the steps by hand",
                s.kruise_webhooks.join(" and "),
                if s.unreadable_records.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; or its record is one of the unreadable ones: {}",
                        s.unreadable_records.join("; ")
                    )
                }
            ));
        }
    }
    for r in &s.unreadable_records {
        notes.push(format!(
            "Helm release record {r}: skipped (not readable as a Helm 3/4 release, so not taken for OpenKruise's)"
        ));
    }

    if let Some(r) = rel {
        release_blockers(r, s, o, &mut blockers, &mut notes);
        p.kept = kept_objects(r);
        p.deletions = deletions(r, s);
        p.release_secrets = r
            .secrets
            .iter()
            .map(|n| format!("{}/{n}", r.secret_namespace))
            .collect();
        if !p.crds_are_release_templates {
            notes.push("the release does not render the CRDs as templates (crds.managed=false or crds/): Helm would keep them anyway".into());
        }
        phase_and_next(&mut p, s, o, &mut notes);
    }
    p.blockers = blockers;
    p.notes = notes;
    p
}

/// What refuses the migration of release `r` (not deployed, the CRD missing, deleted or before
/// OpenKruise 1.9, other kinds in use, our configuration sorting first), and the notes.
fn release_blockers(
    r: &FoundRelease,
    s: &Snapshot,
    o: &Options,
    blockers: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    if let Some(b) = newer_than_schema(&r.release) {
        blockers.push(b);
    }
    if r.release.status != "deployed" {
        blockers.push(format!(
            "the release {}/{} is {:?}, not \"deployed\": finish or roll back that Helm operation first (`helm history {} -n {}`)",
            r.release.namespace, r.release.name, r.release.status, r.release.name, r.release.namespace
        ));
    }
    match &s.crd {
        None => blockers.push(format!(
            "the CRD {} does not exist: there is no SidecarSet to migrate; remove OpenKruise as you like and install the operator",
            sidecarset_core::api::CRD_NAME
        )),
        Some(c) => {
            if c.deleting {
                blockers.push(format!(
                    "the CRD {} is being deleted (deletionTimestamp is set): its SidecarSets are going; restore them from a backup before migrating",
                    sidecarset_core::api::CRD_NAME
                ));
            }
            if !c.served.iter().any(|v| v == "v1beta1") || c.storage != "v1beta1" {
                blockers.push(format!(
                    "the CRD {} serves {:?} and stores {:?}: that is OpenKruise before 1.9; upgrade OpenKruise to 1.9 first (its SidecarSets then store as v1beta1), then migrate",
                    sidecarset_core::api::CRD_NAME, c.served, c.storage
                ));
            }
        }
    }
    let in_use: Vec<String> = s
        .others
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    if !in_use.is_empty() {
        match o.other_kinds {
            Some(OtherKinds::Orphan) => notes.push(format!(
                "--other-kinds=orphan: {} stay, with their pods, but nothing reconciles them once OpenKruise's manager is gone (no scaling, no updates, no replacement of deleted pods); their CRDs are kept",
                in_use.join(", ")
            )),
            None => blockers.push(format!(
                "OpenKruise is used for more than SidecarSets ({}): removing it stops their controller; move them to built-in workloads first and run this again, keep OpenKruise (do not migrate), or pass --other-kinds=orphan to leave them without a controller",
                in_use.join(", ")
            )),
        }
    }
    // The API server calls mutating webhook configurations in the order of their names: ours
    // must come after OpenKruise's, so that a pod both see is injected by OpenKruise and
    // left alone by us (it records the SidecarSets it injected; we skip those).
    if o.webhook_config_name.as_str() <= KRUISE_MUTATING {
        blockers.push(format!(
            "our webhook configuration name {:?} sorts before {KRUISE_MUTATING:?}: the API server would call ours first while both run; use a name that sorts after it (the chart's default, sidecarset-operator, does)",
            o.webhook_config_name
        ));
    }
}

/// `major.minor` of a version such as `1.9.0`, `v1.10.1` or `1.9.0-rc.1`.
fn major_minor(v: &str) -> Option<(u64, u64)> {
    let mut parts = v.trim().trim_start_matches('v').split(['.', '-', '+']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Why the release's OpenKruise is too new to migrate (newer than [`SCHEMA_OF`], or no version
/// to tell), if it is: step 2 applies our SidecarSet schema, and fields a newer OpenKruise
/// stores but that schema lacks would be pruned from every SidecarSet.
fn newer_than_schema(r: &Release) -> Option<String> {
    let (what, v) = if r.app_version.is_empty() {
        ("chart version", &r.chart_version)
    } else {
        ("app version", &r.app_version)
    };
    let (major, minor) = SCHEMA_OF;
    match major_minor(v) {
        Some(found) if found <= SCHEMA_OF => None,
        Some(_) => Some(format!(
            "the release {}/{} is OpenKruise {v} ({what}), newer than {major}.{minor}, whose SidecarSet schema this command applies: SidecarSets of OpenKruise {v} may hold fields that schema would drop; migrate with a sidecarset-operator made for OpenKruise {v}, or stay on OpenKruise",
            r.namespace, r.name
        )),
        None => Some(format!(
            "the release {}/{} does not say which OpenKruise it is ({what} {v:?}): this command migrates OpenKruise {major}.{minor} and older only (newer SidecarSets may hold fields our schema would drop); check the release with `helm list -n {}`",
            r.namespace, r.name, r.namespace
        )),
    }
}

/// The objects of the release that must stay, and why.
fn kept_objects(r: &FoundRelease) -> Vec<Kept> {
    let mut kept = Vec::new();
    for obj in &r.objects {
        if let Some(why) = keep_reason(obj) {
            kept.push(Kept {
                kind: obj.kind.clone(),
                name: if cluster_scoped(&obj.kind) {
                    obj.name.clone()
                } else {
                    format!("{}/{}", obj.namespace, obj.name)
                },
                why,
            });
        }
    }
    kept
}

/// The deletions, in order: webhook configurations (OpenKruise's, rendered or not), then
/// workloads, then the rest; never what must stay.
fn deletions(r: &FoundRelease, s: &Snapshot) -> Vec<Deletion> {
    let mut dels: Vec<(u8, Deletion)> = r
        .objects
        .iter()
        .filter(|obj| keep_reason(obj).is_none())
        .map(|obj| {
            let rank = if is_webhook_config(&obj.kind) {
                0
            } else if is_workload(&obj.kind) {
                1
            } else {
                2
            };
            (
                rank,
                Deletion {
                    api_version: obj.api_version.clone(),
                    kind: obj.kind.clone(),
                    namespace: if cluster_scoped(&obj.kind) {
                        String::new()
                    } else {
                        obj.namespace.clone()
                    },
                    name: obj.name.clone(),
                },
            )
        })
        .collect();
    // OpenKruise's webhook configurations even where the chart did not render them
    // (renamed templates, or added by hand): they go first, whatever made them.
    for w in &s.kruise_webhooks {
        let (kind, name) = match w.split_once('/') {
            Some(("mutatingwebhookconfiguration", n)) => ("MutatingWebhookConfiguration", n),
            Some((_, n)) => ("ValidatingWebhookConfiguration", n),
            None => continue,
        };
        if !dels.iter().any(|(_, d)| d.kind == kind && d.name == name) {
            dels.push((
                0,
                Deletion {
                    api_version: "admissionregistration.k8s.io/v1".into(),
                    kind: kind.into(),
                    namespace: String::new(),
                    name: name.into(),
                },
            ));
        }
    }
    dels.sort_by_key(|(rank, _)| *rank);
    dels.into_iter().map(|(_, d)| d).collect()
}

/// The phase the cluster is in (our operator ready or not), its notes, and what to run next.
fn phase_and_next(p: &mut MigrationPlan, s: &Snapshot, o: &Options, notes: &mut Vec<String>) {
    p.phase = if s.ours.ready() {
        MigrationPhase::RemoveOpenKruise
    } else {
        MigrationPhase::InstallOperator
    };
    match p.phase {
        MigrationPhase::InstallOperator => {
            if s.ours.registered && !s.ours.ca_bundle {
                notes.push(format!(
                    "our webhook configuration {} exists but not every webhook has a caBundle yet: the operator has not served yet",
                    o.webhook_config_name
                ));
            } else if s.ours.registered {
                notes.push(format!(
                    "our webhook configuration {} exists but the operator's Deployment in {} has no ready replica",
                    o.webhook_config_name, o.operator_namespace
                ));
            }
            p.next.push(install_command(o, true));
            p.next.push(
                "sidecarset-operator migrate from-openkruise --apply   # again, once the operator is ready: removes OpenKruise"
                    .into(),
            );
        }
        MigrationPhase::RemoveOpenKruise => {
            p.next.push(format!(
                "helm upgrade {} {} -n {} --reuse-values --set openkruise.coexistence=false   # ours alone now: its controller and the CRD's conversion settings on, every webhook Fail again",
                o.operator_release, o.chart, o.operator_namespace
            ));
        }
        MigrationPhase::NothingToDo => {}
    }
}

/// The `helm install` of our chart; next to OpenKruise in its coexistence mode
/// (`openkruise.coexistence=true`).
pub fn install_command(o: &Options, next_to_openkruise: bool) -> String {
    format!(
        "helm install {} {} -n {} --create-namespace{}",
        o.operator_release,
        o.chart,
        o.operator_namespace,
        // Next to OpenKruise, ours writes nothing OpenKruise's manager writes (no controller:
        // no SidecarSet status, revision or pod; not the CRD's conversion settings) and its
        // webhooks fail open: until the operator serves (the chart registers the webhooks
        // before its pods are ready) nothing is refused, and OpenKruise injects and validates.
        // Step 2 turns all of it back once OpenKruise is gone.
        if next_to_openkruise {
            " --set openkruise.coexistence=true"
        } else {
            ""
        }
    )
}
