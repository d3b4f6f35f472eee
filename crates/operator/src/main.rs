use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use sidecarset_cli::{ToolCommand, inspect, invoked_as_plugin, run_tool};
use sidecarset_operator::run;
use sidecarset_operator::telemetry::otel as telemetry;
use std::process::ExitCode;

// jemalloc returns freed memory to the system and fragments less than glibc's malloc with many
// threads: the pod cache of the controller stays small (see `make bench-controller`).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at start-up (`_RJEM_MALLOC_CONF` in the environment overrides
/// them): a background thread returns freed pages to the system on a timer, also while the
/// process is idle (without it, what a relist or a rollout freed stays resident until the next
/// allocations); freed pages go back after 5 s instead of 10; two arenas, not eight per core
/// (the pod cache is written by one task; more arenas only spread its memory thinner).
#[repr(transparent)]
pub struct MallocConf(*const std::ffi::c_char);
// SAFETY: a pointer to a static, immutable C string.
unsafe impl Sync for MallocConf {}
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: MallocConf =
    MallocConf(c"background_thread:true,dirty_decay_ms:5000,muzzy_decay_ms:0,narenas:2".as_ptr());

/// Injects sidecar containers into pods and keeps them up to date, driven by SidecarSets
/// (apps.kruise.io v1alpha1 and v1beta1, compatible with OpenKruise).
///
/// `run` starts the operator; the other commands are its tools.
///
/// Exit codes of the commands: 0 done; 1 bad usage or input (including a SidecarSet the API
/// server would refuse); 2 no access to the cluster (no kubeconfig, unreachable, credentials
/// refused, forbidden by RBAC); 3 not found (the pod, its namespace, the SidecarSet API); 4 a
/// warning of `check --strict`, or `migrate` refused; 5 a failed check.
#[derive(Parser)]
#[command(name = "sidecarset-operator", version)]
struct Cli {
    /// The kubeconfig file to use, as kubectl's --kubeconfig (default: KUBECONFIG, else
    /// ~/.kube/config, else the pod's service account).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use, as kubectl's --context (default: the current context).
    #[arg(long, global = true, value_name = "CONTEXT")]
    context: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

/// `run`'s flags: the operator's own, and those of its logs and traces (shown under `run` only).
#[derive(clap::Args)]
struct RunCommand {
    /// Log format: text (for people) or json (for log collectors).
    #[arg(long, env = "SSO_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Export traces over OTLP to this collector URL (e.g. http://otel-collector:4318). Without it,
    /// traces go where OTEL_EXPORTER_OTLP_ENDPOINT says, or nowhere when that is unset.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    #[command(flatten)]
    args: run::RunArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run the operator.
    Run(Box<RunCommand>),
    #[command(flatten)]
    Tool(Box<ToolCommand>),
    /// Print the shell completion script: `source <(sidecarset-operator completion bash)`, or
    /// write it where the shell loads completions from (zsh: a `_sidecarset-operator` file on
    /// fpath).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the command-line reference as Markdown (docs/src/reference/cli.md, written by `make
    /// manifests`).
    #[command(hide = true)]
    ReferenceCli,
}

/// jemalloc's figures for `/metrics` (what of the RSS is live objects, what is the allocator's:
/// pages not yet returned, fragmentation, metadata).
fn allocator_stats() -> Vec<(&'static str, u64)> {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The figures are a snapshot taken when the epoch advances.
    if epoch::advance().is_err() {
        return Vec::new();
    }
    let read = |kind, r: tikv_jemalloc_ctl::Result<usize>| r.ok().map(|b| (kind, b as u64));
    [
        read("allocated", stats::allocated::read()),
        read("active", stats::active::read()),
        read("resident", stats::resident::read()),
        read("metadata", stats::metadata::read()),
        read("mapped", stats::mapped::read()),
        read("retained", stats::retained::read()),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The tools end quietly when their reader goes away (`sidecarset-operator crd | head -1`), as
/// kubectl and the shell's own tools do: the default action of SIGPIPE, which Rust's runtime
/// replaces with "ignore" (a write then fails with EPIPE and `println!` panics). Only for the
/// tools and the help: the server (`run`) keeps SIGPIPE ignored, and its sockets never raise it
/// either way (Rust writes to sockets with MSG_NOSIGNAL).
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: called on the main thread before any other thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    sidecarset_operator::metrics::read_allocator_with(allocator_stats);
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
            end_quietly_on_a_closed_pipe();
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                inspect::EXIT_INPUT
            } else {
                inspect::EXIT_OK
            });
        }
    };
    if let Some(path) = &cli.kubeconfig {
        // SAFETY: no other thread exists yet (the runtimes start below); the kube client reads
        // KUBECONFIG when it loads its configuration.
        unsafe { std::env::set_var("KUBECONFIG", path) };
    }
    // Every client of the process (the tools' and the operator's) uses this context.
    sidecarset_cli::target::set_context(cli.context.clone());
    let command = match cli.command {
        Some(c) => c,
        // The binary alone (`sidecarset-operator`, `kubectl sidecarset`): the help, never an
        // operator started against the user's kubeconfig; the operator is `run`.
        None => {
            end_quietly_on_a_closed_pipe();
            eprint!("{help}");
            return ExitCode::from(inspect::EXIT_INPUT);
        }
    };
    match command {
        Command::Completion { shell } => {
            end_quietly_on_a_closed_pipe();
            let mut app = Cli::command();
            clap_complete::generate(
                shell,
                &mut app,
                "sidecarset-operator",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Command::ReferenceCli => {
            end_quietly_on_a_closed_pipe();
            print!("{}", sidecarset_cli::reference::markdown(Cli::command()));
            ExitCode::SUCCESS
        }
        Command::Tool(tool) => {
            end_quietly_on_a_closed_pipe();
            run_tool(*tool)
        }
        Command::Run(r) => run_operator(&r.log_format, r.otlp_endpoint.as_deref(), r.args),
    }
}

/// `run`: the operator on a multi-threaded runtime, with its telemetry.
fn run_operator(log_format: &str, otlp_endpoint: Option<&str>, args: run::RunArgs) -> ExitCode {
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
        match telemetry::init(log_format, otlp_endpoint) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    };
    let result = rt.block_on(run::run(args));
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
