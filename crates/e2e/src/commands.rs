//! The programs the suite runs: the operator's binary (its CLI commands) and Helm.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The operator's binary: `$SSO_E2E_BIN`, else the workspace's debug build.
pub fn bin() -> PathBuf {
    std::env::var_os("SSO_E2E_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/sidecarset-operator")
        })
}

/// Helm: `$HELM_BIN/helm` (what `hack/tools.sh helm` prints), else helm on PATH.
pub fn helm() -> PathBuf {
    std::env::var_os("HELM_BIN")
        .map(|d| PathBuf::from(d).join("helm"))
        .unwrap_or_else(|| PathBuf::from("helm"))
}

/// The project's chart directory.
pub fn our_chart() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts/sidecarset-operator")
        .to_string_lossy()
        .into_owned()
}

/// Runs `cmd` to its end: its exit code (-1 when killed by a signal) and its stdout then stderr.
pub fn run(cmd: &mut Command) -> anyhow::Result<(i32, String)> {
    let out = cmd.output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

/// Runs Helm with `args`; an error naming the command and its output when it exits non-zero.
pub fn helm_ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> anyhow::Result<String> {
    let (code, text) = run(Command::new(helm()).args(args))?;
    anyhow::ensure!(
        code == 0,
        "helm {}: exit {code}\n{text}",
        args.iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    );
    Ok(text)
}
