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
    /// Exit with 4 on a warning too (for CI and scripts); without it a warning exits 0 and only a
    /// failure exits non-zero (5).
    #[arg(long)]
    pub strict: bool,
    /// Output format (json: one object per check with check, status, message, remedy).
    #[arg(short = 'o', long = "output", value_enum, default_value = "human")]
    pub output: OutputFormat,
    /// The operator's namespace, the chart's release namespace (default: found from the webhook
    /// configuration's Service or the operator's Deployment, else sidecarset-system). `-n` and
    /// `--namespace` are accepted for it too: `check` names no object of its own.
    #[arg(long, short_alias = 'n', alias = "namespace")]
    pub operator_namespace: Option<String>,
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

impl CheckArgs {
    /// The operator's namespace (resolved by [`check`] before the checks run).
    pub fn operator_ns(&self) -> &str {
        self.operator_namespace
            .as_deref()
            .unwrap_or(crate::target::DEFAULT_OPERATOR_NAMESPACE)
    }
}

/// The exit code of the worst line: a warning is 0, or 4 with `--strict`; a failure 5.
pub fn exit_code(worst: CheckStatus, strict: bool) -> u8 {
    match worst {
        CheckStatus::Ok => 0,
        CheckStatus::Warn if strict => EXIT_WARN,
        CheckStatus::Warn => 0,
        CheckStatus::Fail => EXIT_FAIL,
    }
}

/// `check` (`--pre`: before installing): the lines, printed as asked, and the exit code of the worst.
pub async fn check(args: &CheckArgs) -> Result<ToolOutput, ToolError> {
    let c = Cluster::connect().await?;
    let found = crate::target::operator_namespace(
        &c.client,
        args.operator_namespace.as_deref(),
        &args.webhook_config_name,
    )
    .await;
    let mut args = args.clone();
    args.operator_namespace = Some(found.name);
    let args = &args;
    let lines = if args.pre {
        eval::evaluate_pre(&gather::gather_pre(&c).await?)
    } else {
        eval::evaluate(&gather::gather(&c, args).await?)
    };
    let code = exit_code(eval::worst(&lines), args.strict);
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

#[cfg(test)]
mod exit_code_tests {
    use super::*;

    #[test]
    fn a_warning_fails_only_under_strict() {
        assert_eq!(exit_code(CheckStatus::Ok, false), 0);
        assert_eq!(exit_code(CheckStatus::Ok, true), 0);
        assert_eq!(exit_code(CheckStatus::Warn, false), 0);
        assert_eq!(exit_code(CheckStatus::Warn, true), EXIT_WARN);
        assert_eq!(exit_code(CheckStatus::Fail, false), EXIT_FAIL);
        assert_eq!(exit_code(CheckStatus::Fail, true), EXIT_FAIL);
    }
}
