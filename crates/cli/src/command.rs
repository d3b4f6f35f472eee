//! The tool subcommands (`crd`, `inject`, `policy`, `explain`, `diff`, `check`, `migrate`,
//! `version`) and what they print and exit with. What they print names this binary as the user
//! invoked it ([`crate::target::as_invoked`]).

use crate::{inspect, offline};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The subcommands of the binary that are tools rather than the operator.
#[derive(Subcommand)]
pub enum ToolCommand {
    /// Print the SidecarSet CustomResourceDefinition as YAML.
    Crd,
    /// Inject a pod file offline with the SidecarSets of a file or folder; print the pod as YAML.
    ///
    /// The webhook's code, on the objects as the API server would hand them to it: each
    /// SidecarSet defaulted, validated and hashed as the mutating webhook does (hash annotations
    /// in the file are recomputed, not trusted); the pod's requests defaulted from its limits in
    /// every container and init container, before the injection (a resourcesPolicy reads them)
    /// and again after it. Unlike on a cluster, the API server's other pod defaults
    /// (terminationMessagePath, imagePullPolicy, dnsPolicy, ...) and admission plugins (the
    /// ServiceAccount token volume and its mounts, which a sidecar with shareVolumePolicy enabled
    /// would share) are not applied.
    Inject {
        /// The pod, or a workload whose pod template stands for it (Deployment, StatefulSet,
        /// DaemonSet, Job, CronJob, ReplicaSet); YAML or JSON, - reads standard input.
        #[arg(short = 'f', long = "filename")]
        pod: PathBuf,
        /// A YAML file (several documents allowed; - reads standard input) or a folder of them.
        #[arg(long)]
        sidecarsets: PathBuf,
        /// Labels of the pod's namespace, as k=v[,k=v...].
        #[arg(long, default_value = "")]
        namespace_labels: String,
    },
    /// Compile SidecarSets into the MutatingAdmissionPolicy and binding that let the API server
    /// inject pods itself (Kubernetes 1.36 or later); print both as YAML. The SidecarSets the
    /// policy cannot express stay on the webhook: each is named on stderr with the reason.
    Policy {
        /// A YAML file (several documents allowed) or a folder of them.
        #[arg(short = 'f', long = "filename")]
        sidecarsets: PathBuf,
    },
    /// Explain an object: `explain pod NAMESPACE/NAME` (against the cluster), or `explain pod -f
    /// pod.yaml --sidecarsets DIR` (offline).
    Explain {
        #[command(subcommand)]
        what: inspect::ExplainCommand,
    },
    /// Preview a SidecarSet change against the cluster before applying it: the pods it would
    /// select, upgrade in place or leave alone (and why), conflicts with other SidecarSets, and
    /// the rollout order.
    Diff(inspect::DiffArgs),
    /// Is the operator installed and working: the CRD and its conversion, the webhook
    /// configurations (caBundle, failure policies, match conditions), Ready endpoints, the
    /// leader, OpenKruise alongside, metrics, the serving certificate, its ServiceAccount's RBAC;
    /// one line per check (ok, warn, fail) with the remedy. `--pre`: can it be installed here.
    /// Exit code: 0 all ok or warnings only (4 on a warning with --strict), 5 a failure.
    Check(crate::check::CheckArgs),
    /// Move a cluster to this operator without losing a SidecarSet: `migrate from-openkruise`
    /// (a dry run prints the plan; --apply does the next step).
    Migrate {
        #[command(subcommand)]
        from: crate::migrate::MigrateCommand,
    },
    /// Print the client's version and the operator's, read from its Deployment in the cluster
    /// (`--client`: the client's only). Exit code: 0; 2 the cluster cannot be read, 3 no operator
    /// Deployment found (the client's version is printed either way).
    Version(crate::version::VersionArgs),
}

/// The name kubectl runs a plugin `kubectl sidecarset` by.
pub const PLUGIN_NAME: &str = "kubectl-sidecarset";

/// Invoked as `kubectl sidecarset ...` (the binary installed, or linked, as kubectl-sidecarset).
pub fn invoked_as_plugin() -> bool {
    std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .is_some_and(|s| s == PLUGIN_NAME)
}

/// Runs a tool command; what it prints goes to stdout and stderr, the exit code is returned.
pub fn run_tool(command: ToolCommand) -> ExitCode {
    match command {
        ToolCommand::Explain {
            what: inspect::ExplainCommand::Pod(args),
        } => on_cluster(inspect::explain_pod(&args)),
        ToolCommand::Diff(args) => on_cluster(inspect::diff(&args)),
        ToolCommand::Check(args) => on_cluster(crate::check::check(&args)),
        ToolCommand::Version(args) => on_cluster(crate::version::version(&args)),
        ToolCommand::Migrate {
            from: crate::migrate::MigrateCommand::FromOpenkruise(args),
        } => migrate(&args),
        ToolCommand::Crd => match sidecarset_core::api::crd_yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot print the CRD: {e}");
                ExitCode::FAILURE
            }
        },
        ToolCommand::Policy { sidecarsets } => {
            let now = jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
            match offline::compile_files(&sidecarsets, &now) {
                Ok((yaml, fallbacks)) => {
                    for f in fallbacks {
                        eprintln!("left to the webhook: {}: {}", f.sidecarset, f.reason);
                    }
                    print!("{yaml}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(inspect::EXIT_INPUT)
                }
            }
        }
        ToolCommand::Inject {
            pod,
            sidecarsets,
            namespace_labels,
        } => {
            if let Err(e) = offline::one_stdin(&[&pod, &sidecarsets]) {
                eprintln!("error: {e}");
                return ExitCode::from(inspect::EXIT_INPUT);
            }
            let labels = match offline::parse_labels(&namespace_labels) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("error: --namespace-labels: {e}");
                    return ExitCode::from(inspect::EXIT_INPUT);
                }
            };
            let now = jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
            match offline::inject_files(&pod, &sidecarsets, &labels, &now) {
                Ok(y) => {
                    print!("{y}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Runs a tool command that talks to the cluster (explain, diff) on a small runtime and prints
/// what it says.
fn on_cluster(
    f: impl std::future::Future<Output = Result<inspect::ToolOutput, inspect::ToolError>>,
) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(inspect::EXIT_INPUT);
        }
    };
    let plugin = invoked_as_plugin();
    let said = |s: &str| crate::target::as_invoked(s, plugin);
    match rt.block_on(f) {
        Ok(out) => {
            print!("{}", said(&out.stdout));
            for line in &out.stderr {
                eprintln!("{}", said(line));
            }
            ExitCode::from(out.code)
        }
        Err(e) => {
            eprintln!("error: {}", said(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}

/// `migrate from-openkruise` on a small runtime: the plan (and what was done) on stdout.
fn migrate(args: &crate::migrate::FromOpenKruiseArgs) -> ExitCode {
    use crate::migrate;
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(migrate::EXIT_INPUT);
        }
    };
    let plugin = invoked_as_plugin();
    let said = |s: &str| crate::target::as_invoked(s, plugin);
    match rt.block_on(migrate::from_openkruise(args)) {
        Ok(out) => {
            print!("{}", said(&out.stdout));
            ExitCode::from(out.code)
        }
        Err(e) => {
            eprintln!("error: {}", said(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}
