//! The command line's kubectl habits, run as a user would: `version`, `--context` anywhere on the
//! line, the operator's flags under `run` only, and next steps printed as the user invoked the
//! binary (`kubectl sidecarset ...` as the plugin).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sso-cli-conv-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `exe` with `args`, the kubeconfig given and no other way to a cluster.
fn run_with(exe: &Path, args: &[&str], kubeconfig: &str) -> Output {
    Command::new(exe)
        .args(args)
        .current_dir(REPO)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", dir())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap()
}

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sidecarset-operator"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A kubeconfig with two contexts on two servers nothing listens on: `first` (current) on port
/// 1, `second` on port 2, so a message's URL tells which context a command used.
fn two_contexts() -> String {
    let p = dir().join("two.kubeconfig");
    std::fs::write(
        &p,
        "apiVersion: v1\nkind: Config\nclusters:\n- {name: one, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}\n- {name: two, cluster: {server: 'https://127.0.0.1:2', insecure-skip-tls-verify: true}}\nusers: [{name: u, user: {token: t}}]\ncontexts:\n- {name: first, context: {cluster: one, user: u}}\n- {name: second, context: {cluster: two, user: u}}\ncurrent-context: first\n",
    )
    .unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn version_prints_the_client_and_degrades_without_a_cluster() {
    let none = "/nonexistent/kubeconfig";
    let out = run_with(bin(), &["version", "--client"], none);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("Client Version: {}\n", env!("CARGO_PKG_VERSION"))
    );
    let out = run_with(bin(), &["version", "--client", "-o", "json"], none);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clientVersion"], env!("CARGO_PKG_VERSION"));
    // No cluster: the client's version still, the reason on one line, exit code 2.
    let out = run_with(bin(), &["version"], &two_contexts());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("Client Version: "));
    let err = text(&out.stderr);
    assert!(
        err.contains("operator version") && err.contains("https://127.0.0.1:1/"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let out = run_with(bin(), &["version", "-o", "json"], &two_contexts());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["error"].as_str().unwrap().contains("cannot reach"), "{v}");
}

#[test]
fn the_context_flag_is_accepted_anywhere_and_used_by_every_tool() {
    let kc = two_contexts();
    for args in [
        vec!["--context", "second", "version"],
        vec!["version", "--context", "second"],
        vec!["check", "--context", "second"],
        vec![
            "diff",
            "-f",
            "config/samples/sidecarset.yaml",
            "--context=second",
        ],
        vec!["explain", "pod", "shop/web", "--context", "second"],
    ] {
        let out = run_with(bin(), &args, &kc);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("127.0.0.1:2"),
            "{args:?} used the other context: {err}"
        );
    }
    // A context the kubeconfig lacks, named in the error (migrate names no server).
    for args in [
        vec!["check", "--context", "nowhere"],
        vec!["--context", "nowhere", "migrate", "from-openkruise"],
    ] {
        let out = run_with(bin(), &args, &kc);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("cannot use kube context \"nowhere\""),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn the_operators_flags_are_shown_under_run_only() {
    let none = "/nonexistent/kubeconfig";
    for args in [
        vec!["--help"],
        vec!["check", "--help"],
        vec!["version", "--help"],
        vec!["explain", "pod", "--help"],
    ] {
        let help = text(&run_with(bin(), &args, none).stdout);
        for flag in ["--log-format", "--otlp-endpoint", "--listen", "--cert-mode"] {
            assert!(!help.contains(flag), "{args:?} shows {flag}: {help}");
        }
        assert!(help.contains("--context"), "{args:?}: {help}");
    }
    let help = text(&run_with(bin(), &["run", "--help"], none).stdout);
    for flag in ["--log-format", "--otlp-endpoint", "--listen", "--context"] {
        assert!(help.contains(flag), "run --help lacks {flag}");
    }
    // A run-only flag before a tool is a usage error, not silently ignored.
    let out = run_with(bin(), &["--log-format", "json", "crd"], none);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
}

#[test]
fn the_operator_namespace_flag_is_the_same_on_every_command() {
    let none = "/nonexistent/kubeconfig";
    for args in [
        vec!["check", "--help"],
        vec!["version", "--help"],
        vec!["diff", "--help"],
        vec!["explain", "pod", "--help"],
        vec!["migrate", "from-openkruise", "--help"],
    ] {
        let help = text(&run_with(bin(), &args, none).stdout);
        assert!(help.contains("--operator-namespace"), "{args:?}: {help}");
        assert!(
            help.contains("found from the webhook configuration"),
            "{args:?}: {help}"
        );
    }
    // -n names the namespace of the object named: the pod of `explain pod`.
    let help = text(&run_with(bin(), &["explain", "pod", "--help"], none).stdout);
    assert!(help.contains("-n, --namespace"), "{help}");
    let help = text(&run_with(bin(), &["check", "--help"], none).stdout);
    assert!(!help.contains("-n, --namespace"), "{help}");
}

/// An API server that answers 404 to every request (a cluster without the SidecarSet API), and
/// a kubeconfig for it.
fn cluster_without_the_api() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let mut line = String::new();
                    // One request: its lines up to the blank one (GETs have no body).
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#;
                    let _ = write!(
                        s,
                        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
        }
    });
    let p = dir().join("no-api.kubeconfig");
    std::fs::write(
        &p,
        format!("apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\nusers: [{{name: u, user: {{}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"),
    )
    .unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn next_steps_are_printed_as_the_user_invoked_the_binary() {
    let kc = cluster_without_the_api();
    let args = ["diff", "-f", "config/samples/sidecarset.yaml"];
    let out = run_with(bin(), &args, &kc);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("(sidecarset-operator crd | kubectl apply"),
        "{err}"
    );

    let link = dir().join("kubectl-sidecarset");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let out = run_with(&link, &args, &kc);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("(kubectl sidecarset crd | kubectl apply"),
        "{err}"
    );
    assert!(!err.contains("sidecarset-operator crd"), "{err}");
}
