use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use sidecarset_operator::telemetry::otel as telemetry;
use sidecarset_operator::{api, cli, inspect, run};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

// jemalloc returns freed memory to the system and fragments less than glibc's malloc with many
// threads: the pod cache of the controller stays small (see `make bench-controller`).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Injects sidecar containers into pods and keeps them up to date, driven by SidecarSets
/// (apps.kruise.io v1alpha1 and v1beta1, compatible with OpenKruise).
///
/// Exit codes of the commands: 0 done; 1 bad usage or input (including a SidecarSet the API
/// server would refuse); 2 no access to the cluster (no kubeconfig, unreachable, credentials
/// refused, forbidden by RBAC); 3 not found (the pod, its namespace, the SidecarSet API).
#[derive(Parser)]
#[command(name = "sidecarset-operator", version)]
struct Cli {
    /// Log format: text (for people) or json (for log collectors).
    #[arg(long, global = true, env = "SSO_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Export traces over OTLP to this collector URL (e.g. http://otel-collector:4318). Without it,
    /// traces go where OTEL_EXPORTER_OTLP_ENDPOINT says, or nowhere when that is unset.
    #[arg(long, global = true, value_name = "URL")]
    otlp_endpoint: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the operator (the default).
    Run(Box<run::RunArgs>),
    /// Print the SidecarSet CustomResourceDefinition as YAML.
    Crd,
    /// Inject a pod file offline with the SidecarSets of a file or folder; print the pod as YAML.
    Inject {
        /// The pod (YAML or JSON).
        #[arg(short = 'f', long = "filename")]
        pod: PathBuf,
        /// A YAML file (several documents allowed) or a folder of them.
        #[arg(long)]
        sidecarsets: PathBuf,
        /// Labels of the pod's namespace, as k=v[,k=v...].
        #[arg(long, default_value = "")]
        namespace_labels: String,
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
    /// Move a cluster to this operator without losing a SidecarSet: `migrate from-openkruise`
    /// (a dry run prints the plan; --apply does the next step).
    Migrate {
        #[command(subcommand)]
        from: sidecarset_operator::migrate::MigrateCommand,
    },
}

/// The name kubectl runs a plugin `kubectl sidecarset` by.
const PLUGIN_NAME: &str = "kubectl-sidecarset";

/// Invoked as `kubectl sidecarset ...` (the binary installed, or linked, as kubectl-sidecarset).
fn invoked_as_plugin() -> bool {
    std::env::args_os()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .is_some_and(|s| s == PLUGIN_NAME)
}

/// Runs a tool command (explain, diff) on a small runtime and prints what it says.
fn tool(
    f: impl std::future::Future<Output = Result<inspect::Outcome, inspect::ToolError>>,
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
    match rt.block_on(f) {
        Ok(out) => {
            print!("{}", out.stdout);
            for line in &out.stderr {
                eprintln!("{line}");
            }
            ExitCode::from(out.code)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `migrate from-openkruise` on a small runtime: the plan (and what was done) on stdout.
fn migrate(args: &sidecarset_operator::migrate::FromOpenKruiseArgs) -> ExitCode {
    use sidecarset_operator::migrate;
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
    match rt.block_on(migrate::from_openkruise(args)) {
        Ok(out) => {
            print!("{}", out.stdout);
            ExitCode::from(out.code)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn main() -> ExitCode {
    let plugin = invoked_as_plugin();
    let mut app = Cli::command();
    if plugin {
        app = app
            .name("kubectl sidecarset")
            .bin_name("kubectl sidecarset")
            .mut_subcommand("run", |s| s.hide(true));
    }
    let help = app.render_long_help();
    // Usage errors exit with 1 (clap's own 2 is "no cluster access" here).
    let cli = match app
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                inspect::EXIT_INPUT
            } else {
                inspect::EXIT_OK
            });
        }
    };
    let command = match cli.command {
        Some(c) => c,
        // `kubectl sidecarset` alone: the help, never the operator.
        None if plugin => {
            eprint!("{help}");
            return ExitCode::from(inspect::EXIT_INPUT);
        }
        None => {
            let m = <run::RunArgs as clap::Args>::augment_args(clap::Command::new("run"))
                .get_matches_from(["run"]);
            Command::Run(Box::new(
                run::RunArgs::from_arg_matches(&m).expect("defaults parse"),
            ))
        }
    };
    match command {
        Command::Explain {
            what: inspect::ExplainCommand::Pod(args),
        } => tool(inspect::explain_pod(&args)),
        Command::Diff(args) => tool(inspect::diff(&args)),
        Command::Migrate {
            from: sidecarset_operator::migrate::MigrateCommand::FromOpenkruise(args),
        } => migrate(&args),
        Command::Crd => match api::crd_yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot print the CRD: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Inject {
            pod,
            sidecarsets,
            namespace_labels,
        } => {
            let labels = match cli::parse_labels(&namespace_labels) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("error: --namespace-labels: {e}");
                    return ExitCode::from(inspect::EXIT_INPUT);
                }
            };
            let now = jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
            match cli::inject_files(&pod, &sidecarsets, &labels, &now) {
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
        Command::Run(args) => {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let telemetry = {
                let _in_runtime = rt.enter();
                match telemetry::init(&cli.log_format, cli.otlp_endpoint.as_deref()) {
                    Ok(t) => t,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                }
            };
            let result = rt.block_on(run::run(*args));
            if let Err(e) = &result {
                tracing::error!("{e:#}");
                eprintln!("error: {e:#}");
            }
            {
                let _in_runtime = rt.enter();
                telemetry.shutdown();
            }
            if result.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
