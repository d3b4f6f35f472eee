use clap::{Parser, Subcommand};
use sidecarset_operator::telemetry::otel as telemetry;
use sidecarset_operator::{api, cli, run};
use std::path::PathBuf;
use std::process::ExitCode;

// jemalloc returns freed memory to the system and fragments less than glibc's malloc with many
// threads: the pod cache of the controller stays small (see `make bench-controller`).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Injects sidecar containers into pods and keeps them up to date, driven by SidecarSets
/// (apps.kruise.io/v1alpha1, compatible with OpenKruise).
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or_else(|| {
        use clap::FromArgMatches;
        let m = <run::RunArgs as clap::Args>::augment_args(clap::Command::new("run"))
            .get_matches_from(["run"]);
        Command::Run(Box::new(
            run::RunArgs::from_arg_matches(&m).expect("defaults parse"),
        ))
    });
    match command {
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
                    return ExitCode::from(2);
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
