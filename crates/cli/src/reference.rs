//! The command-line reference of the documentation site (docs/src/reference/cli.md), written from
//! the clap definitions: every command that is not hidden, each with its flags (environment
//! variable, default, accepted values), and one table of the exit codes. `make manifests` writes
//! it and `make check-manifests` fails when it differs from the code.

use crate::check::{EXIT_FAIL, EXIT_WARN};
use crate::inspect::{EXIT_ACCESS, EXIT_INPUT, EXIT_NOT_FOUND, EXIT_OK};
use crate::migrate::EXIT_REFUSED;
use clap::{Arg, ArgAction, Command};
use std::fmt::Write as _;

/// One exit code: what it means, and which commands use it.
pub struct ExitCodeDoc {
    pub code: u8,
    pub commands: &'static str,
    pub meaning: &'static str,
}

/// Every exit code of the binary, in one scheme across the commands.
pub const EXIT_CODES: &[ExitCodeDoc] = &[
    ExitCodeDoc {
        code: EXIT_OK,
        commands: "every command",
        meaning: "done: `check` found no failure (and with `--strict` no warning), `migrate` printed its plan or did its step",
    },
    ExitCodeDoc {
        code: EXIT_INPUT,
        commands: "every command",
        meaning: "bad usage or input: an unknown command or flag, a file that cannot be read or is invalid, a SidecarSet the API server would refuse; `run`: the operator stopped on an error",
    },
    ExitCodeDoc {
        code: EXIT_ACCESS,
        commands: "`explain`, `diff`, `check`, `migrate`, `version`, `run`",
        meaning: "no access to the cluster: no kubeconfig, unreachable, credentials refused, forbidden by RBAC (the message gives the `kubectl auth can-i` to check); `run`: its telemetry could not start",
    },
    ExitCodeDoc {
        code: EXIT_NOT_FOUND,
        commands: "`explain`, `diff`, `version`",
        meaning: "not found: the pod, its namespace, or the SidecarSet API; `version`: no operator Deployment (the client's version is printed)",
    },
    ExitCodeDoc {
        code: EXIT_WARN,
        commands: "`check --strict`, `migrate`",
        meaning: "`check --strict`: the worst line is a warning (without `--strict` a warning exits 0); `migrate`: refused (a blocker, each named with what to do, or the verification after a step found something missing)",
    },
    ExitCodeDoc {
        code: EXIT_FAIL,
        commands: "`check`",
        meaning: "a check failed",
    },
];

// `check` and `migrate` share code 4 on purpose: "not everything is fine, nothing was broken".
const _: () = assert!(EXIT_WARN == EXIT_REFUSED);

/// The Markdown reference of `cmd` (the binary's clap command, not yet built).
pub fn markdown(cmd: Command) -> String {
    let mut cmd = cmd;
    cmd.build();
    let name = cmd.get_name().to_string();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Command line\n\n<!-- Written by `make manifests` from the clap definitions (crates/cli/src/reference.rs); do not edit. -->\n"
    );
    let _ = writeln!(
        out,
        "One binary, `{name}`, is the operator (`run`) and its tools. Run as `kubectl-sidecarset` (a link on the `PATH`, or installed with Krew) it is the kubectl plugin `kubectl sidecarset`, with the same commands but `run`. Every command takes `-h` (summary) and `--help` (this text).\n"
    );
    let _ = writeln!(out, "## Exit codes\n");
    let _ = writeln!(out, "| code | commands | meaning |\n| --- | --- | --- |");
    for e in EXIT_CODES {
        let _ = writeln!(out, "| {} | {} | {} |", e.code, e.commands, cell(e.meaning));
    }
    let _ = writeln!(out);
    let globals: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set() && !a.is_hide_set())
        .collect();
    if !globals.is_empty() {
        let _ = writeln!(out, "## Global flags\n\nAccepted by every command.\n");
        args_table(&mut out, globals.into_iter());
    }
    for sub in cmd.get_subcommands() {
        command(&mut out, sub, &name);
    }
    out
}

fn command(out: &mut String, cmd: &Command, parent: &str) {
    if cmd.is_hide_set() || cmd.get_name() == "help" {
        return;
    }
    let path = format!("{parent} {}", cmd.get_name());
    let subs: Vec<&Command> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .collect();
    let _ = writeln!(out, "## {path}\n");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", text(&paragraphs(&about.to_string())));
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ").trim();
    let _ = writeln!(out, "```text\n{usage}\n```\n");
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_global_set() && !is_builtin(a))
        .collect();
    if !args.is_empty() {
        args_table(out, args.into_iter());
    }
    for sub in subs {
        command(out, sub, &path);
    }
}

fn is_builtin(a: &Arg) -> bool {
    matches!(
        a.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    )
}

/// The flags of one command as a table: flag, environment variable, default, description; a
/// table whose flags have no environment variable and no default leaves those two columns out.
fn args_table<'a>(out: &mut String, args: impl Iterator<Item = &'a Arg>) {
    let mut rows = Vec::new();
    for a in args {
        let env = a
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .filter(|v| !v.is_empty())
            .collect();
        let default = if defaults.is_empty() || is_flag(a) {
            String::new()
        } else {
            format!("`{}`", defaults.join(","))
        };
        let mut help = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| sentence(&one_line(&h.to_string())))
            .unwrap_or_default();
        let values: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if !values.is_empty() && !is_flag(a) {
            let _ = write!(help, " One of: {}.", values.join(", "));
        }
        rows.push((flag(a), env, default, cell(help.trim())));
    }
    if rows
        .iter()
        .all(|(_, env, default, _)| env.is_empty() && default.is_empty())
    {
        let _ = writeln!(out, "| flag | description |\n| --- | --- |");
        for (flag, _, _, help) in rows {
            let _ = writeln!(out, "| `{flag}` | {help} |");
        }
    } else {
        let _ = writeln!(
            out,
            "| flag | environment | default | description |\n| --- | --- | --- | --- |"
        );
        for (flag, env, default, help) in rows {
            let _ = writeln!(out, "| `{flag}` | {env} | {default} | {help} |");
        }
    }
    let _ = writeln!(out);
}

/// A switch (`--apply`), as opposed to a flag that takes a value.
fn is_flag(a: &Arg) -> bool {
    !a.get_action().takes_values()
}

fn flag(a: &Arg) -> String {
    let value = a
        .get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
    let mut names = Vec::new();
    if let Some(s) = a.get_short() {
        names.push(format!("-{s}"));
    }
    if let Some(l) = a.get_long() {
        names.push(format!("--{l}"));
    }
    if names.is_empty() {
        return format!("<{value}>");
    }
    let mut f = names.join(", ");
    if !is_flag(a) {
        let _ = write!(f, " <{value}>");
    }
    f
}

/// The help text on one line (clap keeps the doc comment's paragraphs).
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// clap drops the full stop of a one-line doc comment: put it back.
fn sentence(s: &str) -> String {
    if s.is_empty() || s.ends_with(['.', '!', '?', ':']) {
        s.to_string()
    } else {
        format!("{s}.")
    }
}

/// A doc comment's paragraphs, each on one line.
fn paragraphs(s: &str) -> String {
    s.split("\n\n")
        .map(|p| sentence(&one_line(p)))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Text for a table cell: `|` escaped, and `<`, `>` outside code spans (Markdown would read
/// `<time>` as an HTML tag).
fn cell(s: &str) -> String {
    text(s).replace('|', "\\|")
}

/// `<` and `>` outside code spans as entities.
fn text(s: &str) -> String {
    s.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 0 {
                part.replace('<', "&lt;").replace('>', "&gt;")
            } else {
                part.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Parser, Subcommand};

    /// A test binary: one global flag, one command with a subcommand, one hidden command.
    #[derive(Parser)]
    #[command(name = "tool")]
    struct Cli {
        /// Log format.
        #[arg(long, global = true, env = "T_LOG", default_value = "text", value_parser = ["text", "json"])]
        log_format: String,
        #[command(subcommand)]
        command: Cmd,
    }

    #[derive(Subcommand)]
    enum Cmd {
        /// Explain things.
        ///
        /// At length | with a pipe.
        Explain {
            #[command(subcommand)]
            what: What,
        },
        #[command(hide = true)]
        Secret,
    }

    #[derive(Subcommand)]
    enum What {
        /// A pod.
        Pod {
            /// NAMESPACE/NAME.
            name: String,
            /// The pod's file (default: <name>.yaml, or `<name>` as is).
            #[arg(short = 'f', long = "filename", value_name = "FILE")]
            file: Option<String>,
            /// Do it.
            #[arg(long)]
            apply: bool,
        },
    }

    #[test]
    fn every_visible_command_and_flag_once() {
        let md = markdown(<Cli as clap::CommandFactory>::command());
        assert!(md.contains("## Global flags"), "{md}");
        assert!(md.contains("| `--log-format <LOG_FORMAT>` | `T_LOG` | `text` | Log format. One of: `text`, `json`. |"), "{md}");
        assert_eq!(
            md.matches("--log-format").count(),
            1,
            "a global flag is listed once: {md}"
        );
        assert!(
            md.contains("## tool explain\n\nExplain things.\n\nAt length | with a pipe."),
            "{md}"
        );
        assert!(md.contains("## tool explain pod\n"), "{md}");
        assert!(md.contains("| `<NAME>` | NAMESPACE/NAME. |"), "{md}");
        assert!(
            md.contains("| `-f, --filename <FILE>` | The pod's file (default: &lt;name&gt;.yaml, or `<name>` as is). |"),
            "{md}"
        );
        assert!(md.contains("| `--apply` | Do it. |"), "{md}");
        assert!(
            md.contains("| flag | description |\n| --- | --- |"),
            "without environment variables or defaults, two columns: {md}"
        );
        assert!(!md.contains("secret"), "hidden commands are left out: {md}");
        assert!(
            !md.contains("| `-h, --help"),
            "the built-in help flags are not listed: {md}"
        );
        for e in EXIT_CODES {
            assert!(
                md.contains(&format!("| {} | ", e.code)),
                "exit code {}: {md}",
                e.code
            );
        }
    }
}
