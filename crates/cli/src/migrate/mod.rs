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
//!    `helm install` of our chart next to OpenKruise (`openkruise.coexistence=true`: the
//!    operator writes nothing OpenKruise's manager writes, and its webhooks fail open).
//! 2. Both run (our webhooks registered with a caBundle, the Deployment ready): back up,
//!    delete OpenKruise's objects, take Helm's ownership marks off what is kept, apply our CRD
//!    schema, delete the release record, and verify that every SidecarSet, revision and
//!    injected pod is still there with the same UID (and every SidecarSet as it was); print
//!    the `helm upgrade` that turns the coexistence mode off.
//!
//! Between the two, a pod passes both webhooks: OpenKruise's first (the API server calls
//! configurations in the order of their names), then ours, which skips every SidecarSet the pod
//! already records in `kruise.io/sidecarset-hash`; the pod is exactly what OpenKruise made.
//!
//! Only the kube client, k8s-openapi, serde and the core's `api` module are used; the exit codes
//! are the other tools' (`inspect`), plus 4 for a refused plan.

pub mod plan;
pub mod release;

mod apply;
mod read;

use kube::Client;
use plan::{MigrationPhase, Options, OtherKinds};
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

#[derive(clap::Args, Debug, Clone)]
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
    /// Our operator's namespace, for its readiness and the commands printed (default: found from
    /// the webhook configuration's Service or the operator's Deployment, else sidecarset-system).
    #[arg(long)]
    pub operator_namespace: Option<String>,
    /// Our operator's Helm release (for the commands printed).
    #[arg(long, default_value = "sidecarset-operator")]
    pub operator_release: String,
    /// The chart reference printed in `helm install`.
    #[arg(long, default_value = "charts/sidecarset-operator")]
    pub chart: String,
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

/// An API error, with what was being done and what to check.
fn access(what: &str, e: kube::Error) -> MigrateError {
    MigrateError::Access(format!(
        "{what}: {e}; check the kube context and that you may read (and, with --apply, delete) it"
    ))
}

/// A client for the kube context of `--context` (else the default one).
async fn connect() -> Result<Client, MigrateError> {
    let config =
        crate::target::kube_config()
            .await
            .map_err(|e| match crate::target::context() {
                Some(c) => MigrateError::Access(format!("cannot use kube context {c:?}: {e}")),
                None => MigrateError::Access(format!(
                    "no cluster to talk to: {e}; set KUBECONFIG or pass --context"
                )),
            })?;
    Client::try_from(config)
        .map_err(|e| MigrateError::Access(format!("cannot build a client for the cluster: {e}")))
}

/// `migrate from-openkruise`: the plan, and with `--apply` its next step (see the module).
pub async fn from_openkruise(args: &FromOpenKruiseArgs) -> Result<MigrateOutput, MigrateError> {
    let c = connect().await?;
    let found = crate::target::operator_namespace(
        &c,
        args.operator_namespace.as_deref(),
        &args.webhook_config_name,
    )
    .await;
    let mut resolved = args.clone();
    resolved.operator_namespace = Some(found.name.clone());
    let args = &resolved;
    let options = Options {
        release: args.release.clone(),
        other_kinds: args.other_kinds,
        webhook_config_name: args.webhook_config_name.clone(),
        operator_namespace: found.name,
        operator_release: args.operator_release.clone(),
        chart: args.chart.clone(),
    };
    let before = read::read(&c, args).await?;
    let p = plan::plan(&before.snapshot, &options);
    let mut out = plan::render(&p, &before.snapshot, args.apply);
    if !p.blockers.is_empty() {
        return Ok(MigrateOutput {
            stdout: out,
            code: EXIT_REFUSED,
        });
    }
    if !args.apply || p.phase == MigrationPhase::NothingToDo {
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
    let n = apply::write_backup(&before, &path)?;
    out.push_str(&format!(
        "\nBacked up {n} objects ({} SidecarSets, {} ControllerRevisions, {} Helm records) to {}\n",
        before.sidecarsets.len(),
        before.revisions.len(),
        before.records.len(),
        path.display()
    ));
    if p.phase == MigrationPhase::InstallOperator {
        out.push_str("Nothing else was changed: OpenKruise runs as before.\n");
        return Ok(MigrateOutput {
            stdout: out,
            code: EXIT_OK,
        });
    }
    apply::remove_openkruise(&c, &p, &args.webhook_config_name, &mut out).await?;

    // Verify: nothing lost, nothing recreated, every injected pod's hashes unchanged.
    let after = read::read(&c, args).await?;
    let lost = apply::lost_between(&before, &after);
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
