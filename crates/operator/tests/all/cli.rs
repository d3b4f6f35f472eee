//! The `inject` and `crd` commands, run as a user would.

use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};

/// The repository's root: the commands run there, as a user would from a clone, and read the
/// samples, the chart and the plugin manifest by their paths from it.
const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn bin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sidecarset-operator"))
        .args(args)
        .current_dir(REPO)
        .output()
        .unwrap()
}

fn tmp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("sso-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn inject_sample_pod_with_namespace_labels() {
    let out = bin(&[
        "inject",
        "-f",
        "config/samples/pod.yaml",
        "--sidecarsets",
        "config/samples",
        "--namespace-labels",
        "sidecar-injection=enabled",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod: Value = serde_saphyr::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    let names = |k: &str| -> Vec<String> {
        pod["spec"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("containers"), ["app", "log-shipper"]);
    assert_eq!(names("initContainers"), ["proxy"]);
    assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(
        pod["metadata"]["annotations"]["kruise.io/sidecarset-injected-list"],
        "demo-sidecars"
    );
}

/// The binary with `stdin` on its standard input.
fn bin_stdin(args: &[&str], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sidecarset-operator"))
        .args(args)
        .current_dir(REPO)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A command that refuses its arguments may exit before it reads: a closed pipe is no error.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// `-f -` (and `--sidecarsets -`) read standard input, as kubectl's `-f -` does; one input at most.
#[test]
fn a_file_named_dash_is_standard_input() {
    let read = |p: &str| std::fs::read_to_string(Path::new(REPO).join(p)).unwrap();
    let out = bin_stdin(
        &[
            "inject",
            "-f",
            "-",
            "--sidecarsets",
            "config/samples",
            "--namespace-labels",
            "sidecar-injection=enabled",
        ],
        &read("config/samples/pod.yaml"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod: Value = serde_saphyr::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    assert_eq!(pod["spec"]["containers"][1]["name"], "log-shipper", "{pod}");

    let out = bin_stdin(
        &[
            "explain",
            "pod",
            "-f",
            "config/samples/pod.yaml",
            "--sidecarsets",
            "-",
            "-o",
            "json",
        ],
        &read("config/samples/sidecarset.yaml"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["pod"], "demo/demo");
    assert_eq!(e["sidecarsets"][0]["sidecarset"], "demo-sidecars", "{e}");

    // What is wrong is named as coming from standard input.
    let out = bin_stdin(
        &["inject", "-f", "-", "--sidecarsets", "config/samples"],
        "kind: Service\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("standard input: kind is \"Service\""), "{err}");

    // Standard input is read once: two inputs cannot both be it.
    for args in [
        vec!["inject", "-f", "-", "--sidecarsets", "-"],
        vec!["explain", "pod", "-f", "-", "--sidecarsets", "-"],
    ] {
        let out = bin_stdin(&args, "");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("only one of the inputs can be standard input"),
            "{args:?}: {err}"
        );
    }
}

/// `-f` takes a workload for the pod its controller would create: its pod template, in its
/// namespace, named after it; other documents of the file (a Namespace) are skipped.
#[test]
fn a_workload_stands_for_the_pod_it_creates() {
    let out = bin(&[
        "inject",
        "-f",
        "config/samples/deployment.yaml",
        "--sidecarsets",
        "config/samples",
        "--namespace-labels",
        "sidecar-injection=enabled",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod: Value = serde_saphyr::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    assert_eq!(pod["kind"], "Pod");
    assert_eq!(pod["metadata"]["namespace"], "demo");
    assert_eq!(pod["metadata"]["labels"]["app"], "demo");
    assert_eq!(pod["spec"]["containers"][1]["name"], "log-shipper", "{pod}");

    let cronjob = "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly, namespace: demo}\nspec:\n  schedule: '@daily'\n  jobTemplate:\n    spec:\n      template:\n        metadata: {labels: {app: demo}}\n        spec:\n          restartPolicy: Never\n          containers: [{name: job, image: busybox}]\n";
    let out = bin_stdin(
        &[
            "explain",
            "pod",
            "-f",
            "-",
            "--sidecarsets",
            "config/samples",
            "--namespace-labels",
            "sidecar-injection=enabled",
            "-o",
            "json",
        ],
        cronjob,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["pod"], "demo/nightly");
    assert_eq!(e["sidecarsets"][0]["selects"], true, "{e}");

    let out = bin_stdin(
        &["inject", "-f", "-", "--sidecarsets", "config/samples"],
        "kind: Deployment\nmetadata: {name: x}\nspec: {}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("Deployment has no spec.template"), "{err}");
}

/// The binary alone prints its help and starts nothing: the operator is `run`, never started
/// against whatever cluster the user's kubeconfig names.
#[test]
fn the_binary_alone_prints_its_help() {
    let out = Command::new(env!("CARGO_BIN_EXE_sidecarset-operator"))
        .current_dir(REPO)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("Usage: sidecarset-operator"), "{err}");
    assert!(
        err.lines().any(|l| l.trim_start().starts_with("run ")),
        "{err}"
    );
    assert!(!err.contains("error:"), "nothing was started: {err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn inject_without_a_match_prints_the_pod_unchanged() {
    let out = bin(&[
        "inject",
        "-f",
        "config/samples/pod.yaml",
        "--sidecarsets",
        "config/samples/sidecarset.yaml",
    ]);
    assert!(out.status.success());
    let got: Value = serde_saphyr::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    let want: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(Path::new(REPO).join("config/samples/pod.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(got, want);
}

#[test]
fn bad_input_exits_non_zero_naming_the_file_and_prints_nothing() {
    let bad_ss = tmp(
        "bad.yaml",
        "apiVersion: apps.kruise.io/v1alpha1\nkind: SidecarSet\nmetadata: {name: s}\nspec:\n  containers: [{name: c, image: i}]\n",
    );
    let not_pod = tmp(
        "svc.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
    );
    let broken = tmp("broken.yaml", "kind: Pod\nspec: [\n");
    let wrong_type = tmp(
        "wrong.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: 5}\n",
    );
    for (args, needles) in [
        (
            vec![
                "inject",
                "-f",
                "config/samples/pod.yaml",
                "--sidecarsets",
                bad_ss.as_str(),
            ],
            vec!["bad.yaml", "spec.selector"],
        ),
        (
            vec![
                "inject",
                "-f",
                not_pod.as_str(),
                "--sidecarsets",
                "config/samples",
            ],
            vec!["svc.yaml", "expected a Pod"],
        ),
        (
            vec![
                "inject",
                "-f",
                broken.as_str(),
                "--sidecarsets",
                "config/samples",
            ],
            vec!["broken.yaml", "not YAML"],
        ),
        (
            vec![
                "inject",
                "-f",
                wrong_type.as_str(),
                "--sidecarsets",
                "config/samples",
            ],
            vec!["wrong.yaml", "spec.containers"],
        ),
        (
            vec![
                "inject",
                "-f",
                "/nonexistent/pod.yaml",
                "--sidecarsets",
                "config/samples",
            ],
            vec!["/nonexistent/pod.yaml", "cannot read"],
        ),
        (
            vec![
                "inject",
                "-f",
                "config/samples/pod.yaml",
                "--sidecarsets",
                "config/samples",
                "--namespace-labels",
                "novalue",
            ],
            vec!["--namespace-labels"],
        ),
    ] {
        let out = bin(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        for n in needles {
            assert!(err.contains(n), "{args:?}: stderr lacks {n:?}: {err}");
        }
    }
}

#[test]
fn conflicting_sidecarsets_in_one_folder_are_reported() {
    let dir = std::env::temp_dir().join(format!("sso-cli-conflict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (f, name, sel) in [
        ("a.yaml", "one", "{app: x}"),
        ("b.yaml", "two", "{tier: web}"),
    ] {
        std::fs::write(
            dir.join(f),
            format!("apiVersion: apps.kruise.io/v1alpha1\nkind: SidecarSet\nmetadata: {{name: {name}}}\nspec:\n  selector: {{matchLabels: {sel}}}\n  containers: [{{name: proxy, image: 'p:1'}}]\n"),
        )
        .unwrap();
    }
    let out = bin(&[
        "inject",
        "-f",
        "config/samples/pod.yaml",
        "--sidecarsets",
        dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("proxy") && err.contains("\"two\""),
        "{err}"
    );
}

#[test]
fn crd_is_structural_small_and_has_the_columns() {
    let out = bin(&["crd"]);
    assert!(out.status.success());
    let crd: Value = serde_saphyr::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    // What client-side `kubectl apply` keeps in its last-applied annotation (capped at 256 KiB).
    let applied = serde_json::to_vec(&crd).unwrap().len();
    assert!(
        applied < 256 * 1024,
        "CRD is {applied} bytes of JSON: too big for client-side apply"
    );
    assert_eq!(crd["spec"]["scope"], "Cluster");
    // Both versions served, v1beta1 stored (as OpenKruise 1.9), conversion by our webhook.
    let versions = crd["spec"]["versions"].as_array().unwrap();
    let by_name = |n: &str| versions.iter().find(|v| v["name"] == n).unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(by_name("v1beta1")["storage"], true);
    assert_eq!(by_name("v1alpha1")["storage"], false);
    assert!(versions.iter().all(|v| v["served"] == true));
    let conv = &crd["spec"]["conversion"];
    assert_eq!(conv["strategy"], "Webhook");
    assert_eq!(conv["webhook"]["conversionReviewVersions"], json!(["v1"]));
    assert_eq!(
        conv["webhook"]["clientConfig"]["service"]["path"],
        "/convert"
    );
    for (version, namespace) in [("v1alpha1", true), ("v1beta1", false)] {
        let v = by_name(version);
        assert!(v["subresources"]["status"].is_object());
        let cols: Vec<&str> = v["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            cols,
            [
                "MATCHED", "UPDATED", "READY", "HEALTHY", "STATUS", "AGE", "MESSAGE"
            ]
        );
        let ready = |field: &str| format!(".status.conditions[?(@.type==\"Ready\")].{field}");
        for (col, path, priority) in [
            ("HEALTHY", ready("status"), None),
            ("STATUS", ready("reason"), None),
            ("MESSAGE", ready("message"), Some(1)),
        ] {
            let c = v["additionalPrinterColumns"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == col)
                .unwrap();
            assert_eq!(c["jsonPath"], path, "{version}: {col}");
            assert_eq!(c["priority"].as_i64(), priority, "{version}: {col}");
        }
        let conditions =
            &v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map", "{version}");
        assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
        for f in ["type", "status", "reason", "message", "lastTransitionTime"] {
            assert!(
                conditions["items"]["required"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(f)),
                "{version}: conditions[].{f} is not required"
            );
        }
        assert!(conditions["items"]["properties"]["observedGeneration"].is_object());
        let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert!(spec["description"].as_str().unwrap().contains("injected"));
        assert_eq!(
            spec["properties"]["namespace"].is_object(),
            namespace,
            "{version}: spec.namespace is v1alpha1 only"
        );
        assert_eq!(
            spec["properties"]["customVersion"].is_object(),
            !namespace,
            "{version}: spec.customVersion is v1beta1 only"
        );
        for f in [
            "selector",
            "namespaceSelector",
            "initContainers",
            "containers",
            "volumes",
            "updateStrategy",
            "injectionStrategy",
            "imagePullSecrets",
            "revisionHistoryLimit",
            "patchPodMetadata",
        ] {
            assert!(
                spec["properties"][f].is_object(),
                "{version}: spec.{f} missing"
            );
            assert!(
                spec["properties"][f]["description"].is_string(),
                "{version}: spec.{f} has no description"
            );
        }
        let c = &spec["properties"]["containers"]["items"]["properties"];
        for f in [
            "podInjectPolicy",
            "shareVolumePolicy",
            "transferEnv",
            "upgradeStrategy",
            "image",
            "env",
        ] {
            assert!(c[f].is_object(), "{version}: containers[].{f} missing");
        }
        assert!(
            c["image"]["description"].is_string(),
            "container fields keep their own description"
        );
        let ms = &spec["properties"]["updateStrategy"]["properties"]["maxUnavailable"];
        assert_eq!(ms["x-kubernetes-int-or-string"], true);
    }
    assert!(
        Path::new(REPO)
            .join("charts/sidecarset-operator/crds/sidecarsets.apps.kruise.io.yaml")
            .exists()
    );
}

#[test]
fn run_refuses_trace_settings_it_cannot_honour_before_touching_the_cluster() {
    let missing = std::env::temp_dir().join("sso-cli-no-such-ca.crt");
    let missing = missing.to_string_lossy();
    let key_as_ca = tmp(
        "key-as-ca.pem",
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    );
    let cases: Vec<(Vec<(&str, &str)>, String)> = vec![
        (
            vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
            "OTEL_EXPORTER_OTLP_PROTOCOL=http/json is not supported".into(),
        ),
        (
            vec![("OTEL_EXPORTER_OTLP_CERTIFICATE", &missing)],
            format!("OTEL_EXPORTER_OTLP_CERTIFICATE={missing}: cannot read the file"),
        ),
        (
            vec![
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", &key_as_ca),
            ],
            format!(
                "OTEL_EXPORTER_OTLP_CERTIFICATE={key_as_ca}: the file holds no PEM CERTIFICATE block"
            ),
        ),
        (
            vec![("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/tls/tls.crt")],
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE is set but OTEL_EXPORTER_OTLP_CLIENT_KEY is not"
                .into(),
        ),
    ];
    for (vars, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_sidecarset-operator"))
            .arg("run")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:9")
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{vars:?}: {stderr}");
        assert!(
            stderr.contains(&want),
            "{vars:?}: want {want:?} in {stderr}"
        );
    }
}

/// The binary linked as kubectl-sidecarset, as kubectl finds a plugin on PATH.
fn plugin() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sso-cli-plugin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("kubectl-sidecarset");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sidecarset-operator"), &link).unwrap();
    link
}

#[test]
fn works_as_the_kubectl_plugin() {
    let p = plugin();
    let run = |args: &[&str]| {
        Command::new(&p)
            .args(args)
            .current_dir(REPO)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .output()
            .unwrap()
    };
    // `kubectl sidecarset` alone prints the help and never starts the operator.
    let out = run(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("Usage: kubectl sidecarset"), "{err}");
    let out = run(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    for c in ["check", "explain", "diff", "inject", "crd"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(c)),
            "{c} missing: {help}"
        );
    }
    assert!(
        !help.lines().any(|l| l.trim_start().starts_with("run ")),
        "the operator's `run` is hidden from the plugin: {help}"
    );
    // The same commands as the binary.
    let out = run(&[
        "explain",
        "pod",
        "-f",
        "config/samples/pod.yaml",
        "--sidecarsets",
        "config/samples",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["pod"], "demo/demo");
    assert_eq!(e["sidecarsets"][0]["injection"], "notSelected");
    assert_eq!(
        e["sidecarsets"][0]["missed"][0]["requirement"],
        "sidecar-injection=enabled"
    );
}

#[test]
fn tool_errors_are_one_line_with_documented_exit_codes() {
    let home = std::env::temp_dir().join(format!("sso-cli-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    // A kubeconfig whose API server does not answer (nothing listens on port 1).
    let unreachable = tmp(
        "unreachable.kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    );
    let cases: Vec<(Vec<&str>, &str, i32, &str)> = vec![
        (vec!["explain", "pod"], "", 1, "name the pod"),
        (
            vec!["explain", "pod", "shop/"],
            "",
            1,
            "is not NAMESPACE/NAME",
        ),
        (
            vec!["explain", "pod", "-f", "config/samples/pod.yaml"],
            "",
            1,
            "--sidecarsets",
        ),
        (vec!["explain", "pod", "--bogus"], "", 1, "--bogus"),
        (
            vec!["explain", "pod", "shop/web"],
            "/nonexistent/kubeconfig",
            2,
            "no cluster configuration",
        ),
        (
            vec!["explain", "pod", "shop/web"],
            unreachable.as_str(),
            2,
            "cannot reach the API server at https://127.0.0.1:1/",
        ),
        (
            vec!["diff", "-f", "config/samples/sidecarset.yaml"],
            unreachable.as_str(),
            2,
            "cannot reach the API server",
        ),
        (
            vec!["check"],
            unreachable.as_str(),
            2,
            "cannot reach the API server at https://127.0.0.1:1/",
        ),
        (
            vec!["check", "--pre"],
            unreachable.as_str(),
            2,
            "cannot reach the API server",
        ),
        (
            vec!["diff", "-f", "/nonexistent/ss.yaml"],
            unreachable.as_str(),
            1,
            "/nonexistent/ss.yaml: cannot read",
        ),
    ];
    for (args, kubeconfig, code, needle) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_sidecarset-operator"))
            .args(&args)
            .current_dir(REPO)
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", &home)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed to stdout");
        // clap's usage errors add a usage hint; ours are one line.
        if !needle.starts_with("--") {
            assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        }
    }
}

/// `completion SHELL` prints a completion script that knows the commands and their flags.
#[test]
fn completion_scripts_know_the_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = bin(&["completion", shell]);
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for word in ["explain", "check", "--strict", "--kubeconfig"] {
            assert!(script.contains(word), "{shell}: {word} missing");
        }
    }
    let out = bin(&["completion", "tcsh"]);
    assert_eq!(out.status.code(), Some(1));
}

/// `--kubeconfig FILE` is the kubeconfig, whatever KUBECONFIG says, for every command.
#[test]
fn the_kubeconfig_flag_names_the_cluster() {
    let unreachable = tmp(
        "flag-unreachable.kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    );
    for args in [
        vec![
            "explain",
            "pod",
            "shop/web",
            "--kubeconfig",
            unreachable.as_str(),
        ],
        vec!["--kubeconfig", unreachable.as_str(), "check"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_sidecarset-operator"))
            .args(&args)
            .current_dir(REPO)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("https://127.0.0.1:1/"), "{args:?}: {err}");
    }
}

#[test]
fn the_krew_manifest_installs_the_binary_as_kubectl_sidecarset() {
    let m: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(Path::new(REPO).join("plugins/sidecarset.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(m["kind"], "Plugin");
    assert_eq!(
        m["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(m["metadata"]["name"], "sidecarset");
    assert_eq!(
        m["spec"]["version"],
        format!("v{}", env!("CARGO_PKG_VERSION"))
    );
    let platforms = m["spec"]["platforms"].as_array().unwrap();
    assert!(!platforms.is_empty());
    for p in platforms {
        assert_eq!(p["bin"], "kubectl-sidecarset");
        assert!(
            p["files"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["from"] == "kubectl-sidecarset")
        );
        // The archive carries the licence (hack/krew.sh packs it next to the binary).
        assert!(
            p["files"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["from"] == "LICENSE"),
            "the Krew manifest does not install LICENSE: {p}"
        );
        assert_eq!(p["sha256"].as_str().unwrap().len(), 64);
        assert!(p["selector"]["matchLabels"]["os"].is_string());
    }
}

/// Every tool ends quietly when its reader goes away before it wrote (`... | head -0`): no panic,
/// no backtrace, killed by SIGPIPE as the shell's own tools are (or done, when it wrote nothing).
#[test]
fn the_tools_end_quietly_on_a_closed_pipe() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let cases: &[&[&str]] = &[
        &["crd"],
        &["--help"],
        &["inject", "--help"],
        &[
            "inject",
            "-f",
            "config/samples/pod.yaml",
            "--sidecarsets",
            "config/samples",
        ],
        &["--version"],
    ];
    for args in cases {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sidecarset-operator"))
            .args(*args)
            .current_dir(REPO)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .spawn()
            .unwrap();
        // The reader goes away before the tool writes a byte.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: stderr {stderr:?}"
        );
        assert!(
            out.status.signal() == Some(libc_sigpipe()) || out.status.success(),
            "{args:?}: ended with {:?}, stderr {stderr:?}",
            out.status
        );
    }
}

/// SIGPIPE's number on Linux.
fn libc_sigpipe() -> i32 {
    13
}

/// `policy` prints each part of the policy and its binding as YAML, and names on stderr each SidecarSet left
/// to the webhook with the field that keeps it there; a file without SidecarSets is an input
/// error.
#[test]
fn policy_prints_the_compiled_policy_and_names_what_stays_on_the_webhook() {
    let file = tmp(
        "policy-sidecarsets.yaml",
        "apiVersion: apps.kruise.io/v1alpha1\nkind: SidecarSet\nmetadata: {name: logger}\n\
         spec:\n  selector: {matchLabels: {app: web}}\n  containers:\n  - {name: logger, image: busybox:1.36}\n\
         ---\napiVersion: apps.kruise.io/v1alpha1\nkind: SidecarSet\nmetadata: {name: shipper}\n\
         spec:\n  selector: {matchLabels: {app: api}}\n  containers:\n  - {name: shipper, image: busybox:1.36, shareVolumePolicy: {type: enabled}}\n\
         ---\napiVersion: apps.kruise.io/v1alpha1\nkind: SidecarSet\nmetadata: {name: merger}\n\
         spec:\n  selector: {matchLabels: {app: db}}\n  containers:\n  - {name: merger, image: busybox:1.36}\n\
         \x20 patchPodMetadata:\n  - {annotations: {a.example.com/x: '{}'}, patchPolicy: MergePatchJson}\n",
    );
    let out = bin(&["policy", "-f", &file]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    // logger (app: web) and shipper (app: api) never select one pod: two parts, each a policy
    // and its binding, the binding selecting its SidecarSet's label.
    assert_eq!(
        kinds,
        [
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding"
        ]
    );
    assert!(docs[0].to_string().contains("busybox:1.36"));
    assert_eq!(
        docs[1]["spec"]["matchResources"]["objectSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["web"])
    );
    assert_eq!(
        docs[3]["spec"]["matchResources"]["objectSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["api"])
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("merger: spec.patchPodMetadata uses MergePatchJson"),
        "{stderr}"
    );
    // Sidecars built from the pod's containers (shareVolumePolicy) are compiled.
    assert!(
        !stderr.contains("logger") && !stderr.contains("shipper"),
        "{stderr}"
    );
    assert!(docs[2].to_string().contains("variables.mounts"));

    let empty = tmp(
        "policy-empty.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    );
    let out = bin(&["policy", "-f", &empty]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
