//! Day-2 tools: `explain pod` (why a pod is the way it is) and `diff` (what a SidecarSet change
//! would do before it is applied), against the cluster or, for `explain`, offline from files.
//! The decisions are made by the webhook's and the controller's own code ([`explain`],
//! [`diff`] and [`pods`] are pure); [`cluster`] reads what they need.
//!
//! Exit codes (also of the `inject` and `crd` commands): 0 done; 1 bad usage or input (a file
//! that cannot be read or is not valid, a SidecarSet the API server would refuse); 2 no access to
//! the cluster (no kubeconfig, unreachable, credentials refused, forbidden by RBAC); 3 not found
//! (the pod, its namespace, or the SidecarSet API).

pub mod cluster;
pub mod diff;
pub mod explain;
pub mod pods;
#[cfg(test)]
mod tests;

use crate::offline::InputError;
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use sidecarset_core::index::Index;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub const EXIT_OK: u8 = 0;
pub const EXIT_INPUT: u8 = 1;
pub const EXIT_ACCESS: u8 = 2;
pub const EXIT_NOT_FOUND: u8 = 3;

/// Why a tool command failed; [`ToolError::exit_code`] is its exit code.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{0}")]
    Access(String),
    #[error("{0}")]
    NotFound(String),
}

impl ToolError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ToolError::Usage(_) | ToolError::Input(_) => EXIT_INPUT,
            ToolError::Access(_) => EXIT_ACCESS,
            ToolError::NotFound(_) => EXIT_NOT_FOUND,
        }
    }
}

pub(crate) fn invalid_input(what: &str, message: &str) -> InputError {
    InputError::Invalid {
        path: PathBuf::from(what),
        message: message.into(),
    }
}

/// `-o`: human (default), json, yaml.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Human,
    Json,
    Yaml,
}

fn render<T: Serialize>(v: &T, format: OutputFormat, human: fn(&T) -> String) -> String {
    match format {
        OutputFormat::Human => human(v),
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
            s.push('\n');
            s
        }
        OutputFormat::Yaml => serde_saphyr::to_string(v).unwrap_or_default(),
    }
}

/// What a tool command printed and how it ends.
#[derive(Debug, Default)]
pub struct ToolOutput {
    pub stdout: String,
    /// Lines for stderr (notes, or why the exit code is not 0).
    pub stderr: Vec<String>,
    pub code: u8,
}

/// Options shared by `explain` and `diff`.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "human")]
    pub output: OutputFormat,
    /// The operator's namespace: its pods are never injected; its ControllerRevisions name the
    /// revisions pods run (default: found from the webhook configuration's Service or the
    /// operator's Deployment, else sidecarset-system).
    #[arg(long)]
    pub operator_namespace: Option<String>,
    /// More namespaces whose pods are never injected (as the operator's --skip-namespaces). In a
    /// cluster they are read from the pod webhook's namespaceSelector when it can be read.
    #[arg(long, value_delimiter = ',', default_value = "kube-system")]
    pub skip_namespaces: Vec<String>,
    /// The MutatingWebhookConfiguration to read the excluded namespaces from.
    #[arg(long, default_value = "sidecarset-operator")]
    pub webhook_config_name: String,
}

impl CommonArgs {
    fn skip_set(&self) -> BTreeSet<String> {
        self.skip_set_with(
            self.operator_namespace
                .as_deref()
                .unwrap_or(crate::target::DEFAULT_OPERATOR_NAMESPACE),
        )
    }

    fn skip_set_with(&self, operator_namespace: &str) -> BTreeSet<String> {
        let mut s: BTreeSet<String> = self
            .skip_namespaces
            .iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect();
        s.insert(operator_namespace.to_string());
        s
    }

    /// The operator's namespace: `--operator-namespace`, else found in the cluster.
    async fn operator_namespace_of(&self, c: &cluster::Cluster) -> String {
        crate::target::operator_namespace(
            &c.client,
            self.operator_namespace.as_deref(),
            &self.webhook_config_name,
        )
        .await
        .name
    }

    async fn skip_set_of(
        &self,
        c: &cluster::Cluster,
        operator_namespace: &str,
    ) -> BTreeSet<String> {
        match c.excluded_namespaces(&self.webhook_config_name).await {
            Some(found) if !found.is_empty() => found,
            _ => self.skip_set_with(operator_namespace),
        }
    }
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ExplainCommand {
    /// Why a pod has (or lacks) each SidecarSet's sidecars, which revision it runs, whether it
    /// can be upgraded in place and what the next rollout step does to it.
    Pod(ExplainPodArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct ExplainPodArgs {
    /// The pod: NAMESPACE/NAME, or NAME with -n.
    #[arg(value_name = "POD")]
    pub pod: Option<String>,
    /// The pod's namespace (default: the kube context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Offline: the pod from this file (YAML or JSON, e.g. `kubectl get pod -o yaml`; - reads
    /// standard input), or a workload's pod template (Deployment, StatefulSet, DaemonSet, Job,
    /// CronJob, ReplicaSet) as the pod its controller would create.
    #[arg(
        short = 'f',
        long = "filename",
        requires = "sidecarsets",
        conflicts_with = "pod"
    )]
    pub file: Option<PathBuf>,
    /// Offline: the SidecarSets of this file or folder (`kubectl get sidecarsets -o yaml` works;
    /// - reads standard input).
    #[arg(long, requires = "file")]
    pub sidecarsets: Option<PathBuf>,
    /// Offline: labels of the pod's namespace, as k=v[,k=v...].
    #[arg(long, default_value = "")]
    pub namespace_labels: String,
    /// List every SidecarSet, not only those that select the pod, injected it, or miss it by one
    /// selector term.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(clap::Args, Debug, Clone)]
pub struct DiffArgs {
    /// The SidecarSet(s) to preview: a YAML file (several documents allowed; - reads standard
    /// input) or a folder.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    #[command(flatten)]
    pub common: CommonArgs,
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// What `explain pod` explains the pod with, from files or from the cluster.
struct PodContext {
    pod: Pod,
    namespace_labels: BTreeMap<String, String>,
    index: Index,
    skip: BTreeSet<String>,
    peers: BTreeMap<String, Vec<Pod>>,
    revisions: Vec<explain::SidecarSetRevision>,
    /// How each SidecarSet injects, when the operator keeps an admission policy.
    modes: Option<sidecarset_core::policy::Modes>,
}

/// Offline: the pod and the SidecarSets from files (`-f`, `--sidecarsets`).
fn context_from_files(args: &ExplainPodArgs, file: &Path) -> Result<PodContext, ToolError> {
    let dir = args.sidecarsets.as_ref().ok_or_else(|| {
        ToolError::Usage("-f needs --sidecarsets FILE_OR_DIR (offline mode)".into())
    })?;
    crate::offline::one_stdin(&[file, dir]).map_err(ToolError::Usage)?;
    let (_, pod) = crate::offline::read_pod(file)?;
    let docs = crate::offline::read_sidecarset_docs(dir)?;
    let labels = crate::offline::parse_labels(&args.namespace_labels)
        .map_err(|e| ToolError::Usage(format!("--namespace-labels: {e}")))?;
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let (index, _) = Index::from_sidecarsets(docs.into_iter().map(|d| d.ss));
    Ok(PodContext {
        pod,
        namespace_labels: sidecarset_core::index::namespace_labels(&ns, &labels),
        index,
        skip: args.common.skip_set(),
        peers: BTreeMap::new(),
        revisions: Vec::new(),
        modes: None,
    })
}

/// The pod named on the command line (`NAMESPACE/NAME`, or `NAME` with `-n`): namespace (if
/// given) and name.
fn pod_name(args: &ExplainPodArgs) -> Result<(Option<String>, String), ToolError> {
    let Some(target) = args.pod.as_deref() else {
        return Err(ToolError::Usage(
            "name the pod (NAMESPACE/NAME, or NAME -n NAMESPACE), or give -f POD_FILE --sidecarsets DIR to work offline".into(),
        ));
    };
    match target.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((Some(ns.to_string()), name.to_string()))
        }
        Some(_) => Err(ToolError::Usage(format!(
            "{target:?} is not NAMESPACE/NAME"
        ))),
        None => Ok((args.namespace.clone(), target.to_string())),
    }
}

/// From the cluster: the pod, its namespace's labels, the SidecarSets, and for each that
/// injected it the other pods and its ControllerRevisions (notes on `stderr` for what is missing).
async fn context_from_cluster(
    args: &ExplainPodArgs,
    stderr: &mut Vec<String>,
) -> Result<PodContext, ToolError> {
    let (ns, name) = pod_name(args)?;
    let c = cluster::Cluster::connect().await?;
    let ns = ns.unwrap_or_else(|| c.default_namespace.clone());
    let pod = c.pod(&ns, &name).await?;
    let ns_labels = c.namespace_labels(&ns).await?;
    let sidecarsets = c.sidecarsets().await?;
    let (index, bad) = Index::from_sidecarsets(sidecarsets);
    for (n, e) in bad {
        stderr.push(format!("note: SidecarSet {n:?} left out: {e}"));
    }
    let operator_ns = args.common.operator_namespace_of(&c).await;
    let skip = args.common.skip_set_of(&c, &operator_ns).await;
    let injected: BTreeSet<String> = sidecarset_core::api::injected_list(
        pod.metadata
            .annotations
            .as_ref()
            .unwrap_or(&BTreeMap::new()),
    );
    let mut peers = BTreeMap::new();
    let mut revisions = Vec::new();
    for ss in index.iter().filter(|s| injected.contains(s.name())) {
        match c.pods_selected(ss).await {
            Ok(pods) => {
                peers.insert(ss.name().to_string(), pods);
            }
            // Without the other pods the step is planned with this one alone.
            Err(e) => stderr.push(format!(
                "note: the next rollout step of {:?} is planned with this pod alone: {e}",
                ss.name()
            )),
        }
        match c.revisions(&operator_ns, ss.name()).await {
            Some(r) => revisions.extend(r),
            None => stderr.push(format!(
                "note: cannot list the ControllerRevisions of {:?} in {}: revisions are named as recorded at injection",
                ss.name(),
                operator_ns
            )),
        }
    }
    Ok(PodContext {
        pod,
        namespace_labels: ns_labels,
        index,
        skip,
        peers,
        revisions,
        modes: c.injection_modes().await,
    })
}

/// `explain pod`.
pub async fn explain_pod(args: &ExplainPodArgs) -> Result<ToolOutput, ToolError> {
    let now = now();
    let mut stderr = Vec::new();
    let ctx = match &args.file {
        Some(file) => context_from_files(args, file)?,
        None => context_from_cluster(args, &mut stderr).await?,
    };
    let PodContext {
        pod,
        namespace_labels: ns_labels,
        index,
        skip,
        peers,
        revisions,
        modes,
    } = ctx;
    let mut e = explain::explain_pod(&explain::PodInput {
        pod: &pod,
        namespace_labels: ns_labels,
        index: &index,
        skip_namespaces: &skip,
        peers: &peers,
        revisions: &revisions,
        all: args.all,
        now: &now,
    });
    if let Some(modes) = &modes {
        for v in e.sidecarsets.iter_mut().filter(|v| v.selects) {
            v.injected_by = Some(modes.describe(&v.sidecarset));
        }
    }
    if args.file.is_some() && e.sidecarsets.iter().any(|v| v.next.is_some()) {
        stderr.push(
            "note: offline: the next rollout step is planned with this pod alone (in a cluster, the SidecarSet's other pods count for partition and maxUnavailable)".to_string(),
        );
    }
    Ok(ToolOutput {
        stdout: render(&e, args.common.output, explain::human),
        stderr,
        code: EXIT_OK,
    })
}

/// The SidecarSets of a file as the API server would store them: defaulted and validated (the
/// read fails otherwise), with the hash annotations the mutating webhook would write.
pub fn sidecarsets_as_admitted(
    path: &std::path::Path,
) -> Result<Vec<sidecarset_core::api::SidecarSet>, ToolError> {
    let docs = crate::offline::read_sidecarset_docs(path)?;
    Ok(docs.into_iter().map(|d| d.ss).collect())
}

/// `diff -f FILE`.
pub async fn diff(args: &DiffArgs) -> Result<ToolOutput, ToolError> {
    let now = now();
    let new_sets = sidecarsets_as_admitted(&args.file)?;
    let c = cluster::Cluster::connect().await?;
    let cluster_sets = c.sidecarsets().await?;
    let ns_labels = c.all_namespace_labels().await?;
    let operator_ns = args.common.operator_namespace_of(&c).await;
    let skip = args.common.skip_set_of(&c, &operator_ns).await;
    let mut out = ToolOutput::default();
    let mut reports = Vec::new();
    for new in &new_sets {
        let current = cluster_sets.iter().find(|s| s.name() == new.name());
        // The cluster as it would be with the other new SidecarSets of the file applied too.
        let others: Vec<sidecarset_core::api::SidecarSet> = cluster_sets
            .iter()
            .filter(|s| new_sets.iter().all(|n| n.name() != s.name()))
            .chain(new_sets.iter().filter(|n| n.name() != new.name()))
            .cloned()
            .collect();
        let mut pods = c.pods_selected(new).await?;
        if let Some(cur) = current {
            for p in c.pods_selected(cur).await? {
                if !pods.iter().any(|x| x.metadata.uid == p.metadata.uid) {
                    pods.push(p);
                }
            }
        }
        let labels_of = |ns: &str| {
            ns_labels
                .get(ns)
                .cloned()
                .unwrap_or_else(|| sidecarset_core::index::namespace_labels(ns, &BTreeMap::new()))
        };
        let report = diff::diff(&diff::DiffInput {
            new,
            current,
            sidecarsets: &others,
            pods: &pods,
            namespace_labels: &labels_of,
            skip_namespaces: &skip,
            now: &now,
        })
        .map_err(|e| ToolError::Input(invalid_input(&args.file.display().to_string(), &e)))?;
        if !report.conflicts.is_empty() {
            out.code = EXIT_INPUT;
            out.stderr.push(format!(
                "error: the validating webhook would refuse SidecarSet {:?}: it conflicts with another SidecarSet ({})",
                report.sidecarset,
                report.conflicts.join("; ")
            ));
        }
        reports.push(report);
    }
    out.stdout = match (args.common.output, reports.len()) {
        (OutputFormat::Human, _) => reports
            .iter()
            .map(diff::human)
            .collect::<Vec<_>>()
            .join("\n"),
        (f, 1) => render(&reports[0], f, diff::human),
        (f, _) => render(&reports, f, |r| {
            r.iter().map(diff::human).collect::<Vec<_>>().join("\n")
        }),
    };
    Ok(out)
}
