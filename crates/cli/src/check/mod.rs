//! `check`: is the operator installed and working, one line per check (ok, warn, fail) with the
//! remedy, like `linkerd check`. `--pre`: can it be installed here. What is read is gathered
//! in `gather`; the verdicts are pure ([`eval`]); `rbac` and `cert` read the permissions and
//! the serving certificate.
//!
//! Exit codes: 0 every check ok; 4 a warning, no failure; 5 a failure; 1 bad usage; 2 no access to
//! the cluster at all.

pub mod eval;

mod cert;
mod gather;
mod rbac;

use crate::inspect::cluster::Cluster;
use crate::inspect::{OutputFormat, ToolError, ToolOutput};
use eval::CheckStatus;

pub use cert::verify_leaf;
pub use rbac::{Need, permissions};

pub const EXIT_WARN: u8 = 4;
pub const EXIT_FAIL: u8 = 5;

#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// Before installing: the Kubernetes version, the admission plugins (where the API server's
    /// flags can be read), an existing OpenKruise or CRD.
    #[arg(long)]
    pub pre: bool,
    /// Output format (json: one object per check with check, status, message, remedy).
    #[arg(short = 'o', long = "output", value_enum, default_value = "human")]
    pub output: OutputFormat,
    /// The kube context to use (default: the current one).
    #[arg(long)]
    pub context: Option<String>,
    /// The operator's namespace (the chart's release namespace).
    #[arg(short = 'n', long = "namespace", default_value = "sidecarset-system")]
    pub namespace: String,
    /// The webhook configurations' name (the chart's webhook.configurationName, default the
    /// release's full name).
    #[arg(long, default_value = "sidecarset-operator")]
    pub webhook_config_name: String,
    /// The operator's ServiceAccount whose permissions are reviewed (default: that of its pods,
    /// else `sidecarset-operator`).
    #[arg(long)]
    pub service_account: Option<String>,
    /// The leader-election Lease (default: from the operator's pods, else `sidecarset-operator`).
    #[arg(long)]
    pub lease: Option<String>,
    /// The Secret of the serving certificate (default: from the operator's pods, else
    /// `sidecarset-operator-webhook-certs`).
    #[arg(long)]
    pub cert_secret_name: Option<String>,
    /// Scrape metrics from this URL (http://host:port/metrics) instead of through the API server
    /// (an operator running as a local process).
    #[arg(long)]
    pub metrics_url: Option<String>,
}

/// `check` (`--pre`: before installing): the lines, printed as asked, and the exit code of the worst.
pub async fn check(args: &CheckArgs) -> Result<ToolOutput, ToolError> {
    let c = Cluster::connect(args.context.as_deref()).await?;
    let lines = if args.pre {
        eval::evaluate_pre(&gather::gather_pre(&c).await?)
    } else {
        eval::evaluate(&gather::gather(&c, args).await?)
    };
    let code = match eval::worst(&lines) {
        CheckStatus::Ok => 0,
        CheckStatus::Warn => EXIT_WARN,
        CheckStatus::Fail => EXIT_FAIL,
    };
    let stdout = match args.output {
        OutputFormat::Human => eval::human(&lines),
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(&serde_json::json!({"checks": lines}))
                .unwrap_or_default();
            s.push('\n');
            s
        }
        OutputFormat::Yaml => {
            serde_saphyr::to_string(&serde_json::json!({"checks": lines})).unwrap_or_default()
        }
    };
    Ok(ToolOutput {
        stdout,
        stderr: Vec::new(),
        code,
    })
}
