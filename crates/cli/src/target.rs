//! Where the commands point, the same way in every command: the kube context (`--context`, one
//! for the whole process, as kubectl's), the operator's namespace (`--operator-namespace`, else
//! found in the cluster), and the name the user invoked the binary by, for the next-step commands
//! the tools print (`kubectl sidecarset check` when run as the kubectl plugin).

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// The namespace the chart and the manifests install the operator into by default.
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "sidecarset-system";

/// The label the chart and the OLM bundle put on the operator's Deployment.
pub const OPERATOR_LABEL: &str = "app.kubernetes.io/name=sidecarset-operator";

static CONTEXT: OnceLock<String> = OnceLock::new();

/// Sets the kube context of every client this process makes (`--context`); once, before any.
pub fn set_context(context: Option<String>) {
    if let Some(c) = context {
        let _ = CONTEXT.set(c);
    }
}

/// The kube context given with `--context`, if any.
pub fn context() -> Option<&'static str> {
    CONTEXT.get().map(String::as_str)
}

/// The client configuration kubectl would use: `--context` of the kubeconfig (`--kubeconfig`,
/// `KUBECONFIG`, `~/.kube/config`) when given, else the in-cluster service account or the
/// kubeconfig's current context.
pub async fn kube_config() -> Result<kube::Config, kube::Error> {
    match context() {
        Some(c) => kube::Config::from_kubeconfig(&kube::config::KubeConfigOptions {
            context: Some(c.to_string()),
            ..Default::default()
        })
        .await
        .map_err(kube::Error::InferKubeconfig),
        None => kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig),
    }
}

/// The commands of the binary that a printed next step may name.
const TOOLS: &[&str] = &[
    "check",
    "crd",
    "diff",
    "explain",
    "inject",
    "migrate",
    "policy",
    "version",
    "completion",
];

/// The name the binary was invoked by, as the user types it.
pub fn invoked_name(plugin: bool) -> &'static str {
    if plugin {
        "kubectl sidecarset"
    } else {
        "sidecarset-operator"
    }
}

/// `text` with every command of this binary it prints (`sidecarset-operator check ...`) written
/// as the user invoked it: `kubectl sidecarset check ...` when run as the kubectl plugin. Only a
/// whole word `sidecarset-operator` followed by one of the tools' names is changed (a chart
/// path, a release or a namespace of that name is left alone).
pub fn as_invoked(text: &str, plugin: bool) -> String {
    const BIN: &str = "sidecarset-operator ";
    if !plugin {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(BIN) {
        let (before, after) = rest.split_at(i);
        out.push_str(before);
        let word_start = before
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || "-_/.:".contains(c)));
        let tail = &after[BIN.len()..];
        let names_a_tool = TOOLS.iter().any(|t| {
            tail.strip_prefix(t).is_some_and(|r| {
                r.chars()
                    .next()
                    .is_none_or(|c| !c.is_alphanumeric() && c != '-')
            })
        });
        if word_start && names_a_tool {
            out.push_str(invoked_name(true));
            out.push(' ');
        } else {
            out.push_str(BIN);
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

/// The operator's namespace, and how it was found (for the messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorNamespace {
    pub name: String,
    pub found_by: String,
}

/// Chooses the operator's namespace: the one given, else the namespace of the Service the pod
/// webhook calls, else the only namespace holding a Deployment labelled as the operator, else
/// the default.
pub fn choose_operator_namespace(
    given: Option<&str>,
    webhook_service: Option<(String, String)>,
    deployments: &BTreeSet<String>,
) -> OperatorNamespace {
    if let Some(n) = given {
        return OperatorNamespace {
            name: n.to_string(),
            found_by: "--operator-namespace".into(),
        };
    }
    if let Some((config, ns)) = webhook_service {
        return OperatorNamespace {
            name: ns,
            found_by: format!("the webhook Service of MutatingWebhookConfiguration {config}"),
        };
    }
    if deployments.len() == 1
        && let Some(ns) = deployments.iter().next()
    {
        return OperatorNamespace {
            name: ns.clone(),
            found_by: format!("the Deployment labelled {OPERATOR_LABEL}"),
        };
    }
    OperatorNamespace {
        name: DEFAULT_OPERATOR_NAMESPACE.into(),
        found_by: if deployments.len() > 1 {
            format!(
                "the default: Deployments labelled {OPERATOR_LABEL} in several namespaces ({}); pass --operator-namespace",
                deployments.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        } else {
            "the default (no webhook Service or operator Deployment found)".into()
        },
    }
}

/// The operator's namespace: `given`, else found in the cluster (the webhook configuration
/// `webhook_config_name`'s Service, else the Deployments labelled as the operator). What cannot
/// be read (RBAC, an operator running outside the cluster) is skipped, never an error.
pub async fn operator_namespace(
    client: &kube::Client,
    given: Option<&str>,
    webhook_config_name: &str,
) -> OperatorNamespace {
    if given.is_some() {
        return choose_operator_namespace(given, None, &BTreeSet::new());
    }
    let webhook_service = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(webhook_config_name)
        .await
        .ok()
        .flatten()
        .and_then(|c| {
            c.webhooks
                .unwrap_or_default()
                .into_iter()
                .find_map(|w| w.client_config.service.map(|s| s.namespace))
        })
        .map(|ns| (webhook_config_name.to_string(), ns));
    let deployments = if webhook_service.is_some() {
        BTreeSet::new()
    } else {
        Api::<Deployment>::all(client.clone())
            .list_metadata(&ListParams::default().labels(OPERATOR_LABEL))
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter_map(|d| d.metadata.namespace)
                    .collect()
            })
            .unwrap_or_default()
    };
    choose_operator_namespace(None, webhook_service, &deployments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_steps_are_written_as_invoked() {
        let cases: &[(&str, bool, &str)] = &[
            (
                "run `sidecarset-operator check`",
                false,
                "run `sidecarset-operator check`",
            ),
            (
                "run `sidecarset-operator check`",
                true,
                "run `kubectl sidecarset check`",
            ),
            (
                "sidecarset-operator crd | kubectl apply -f -",
                true,
                "kubectl sidecarset crd | kubectl apply -f -",
            ),
            (
                "sidecarset-operator migrate from-openkruise --apply",
                true,
                "kubectl sidecarset migrate from-openkruise --apply",
            ),
            // A chart path, a release, a namespace or the binary's name alone stay.
            (
                "helm install sidecarset-operator charts/sidecarset-operator -n sidecarset-operator",
                true,
                "helm install sidecarset-operator charts/sidecarset-operator -n sidecarset-operator",
            ),
            (
                "kubectl -n x rollout status deploy/sidecarset-operator check",
                true,
                "kubectl -n x rollout status deploy/sidecarset-operator check",
            ),
            (
                "sidecarset-operator checks",
                true,
                "sidecarset-operator checks",
            ),
            (
                "a: sidecarset-operator diff x; b: sidecarset-operator explain pod y",
                true,
                "a: kubectl sidecarset diff x; b: kubectl sidecarset explain pod y",
            ),
        ];
        for (text, plugin, want) in cases {
            assert_eq!(as_invoked(text, *plugin), *want, "{text:?} plugin={plugin}");
        }
    }

    #[test]
    fn the_operator_namespace_is_given_found_or_defaulted() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let hook = || Some(("sso".to_string(), "from-hook".to_string()));
        type Case<'a> = (
            Option<&'a str>,
            Option<(String, String)>,
            BTreeSet<String>,
            &'a str,
            &'a str,
        );
        let cases: Vec<Case> = vec![
            (
                Some("given"),
                hook(),
                set(&["dep"]),
                "given",
                "--operator-namespace",
            ),
            (
                None,
                hook(),
                set(&["dep"]),
                "from-hook",
                "MutatingWebhookConfiguration sso",
            ),
            (None, None, set(&["dep"]), "dep", "Deployment labelled"),
            (
                None,
                None,
                set(&["a", "b"]),
                "sidecarset-system",
                "several namespaces (a, b)",
            ),
            (None, None, set(&[]), "sidecarset-system", "the default"),
        ];
        for (given, hook, deps, want, how) in cases {
            let got = choose_operator_namespace(given, hook, &deps);
            assert_eq!(got.name, want, "{given:?} {deps:?}");
            assert!(got.found_by.contains(how), "{}", got.found_by);
        }
    }
}
