//! `resourcesPolicy` at injection: the sidecar's limits and requests computed from the pod's
//! own containers, as OpenKruise 1.9 computes them (`pkg/webhook/pod/mutating/sidecarset_resources.go`).
//!
//! * The target containers are the pod's native-sidecar init containers (restartPolicy Always)
//!   and then its containers, whose names match the regex (anywhere in the name), leaving out
//!   every container name of the SidecarSets that match the pod. None matching is an error, and
//!   pod creation is refused.
//! * `sum` adds their values up, `max` takes the largest. A limit is known only when every
//!   target has it (one target without a CPU limit makes the sidecar's CPU limit absent, whatever
//!   the expression); a missing request counts as 0.
//! * Each non-empty expression is evaluated with one variable: `memory` when the word `memory`
//!   appears in it (case-sensitive, as OpenKruise looks for it), `cpu` otherwise, bound to the
//!   combined value of that field's resource. A number result becomes millicores when the
//!   variable is `cpu`, whole units when it is `memory`.

// The expression language and its quantities belong to the API (validation evaluates them too).
pub use crate::api::resources_policy::{expr, quantity};

use crate::api::{ResourcesPolicy, TargetContainersMode};
use expr::{Value, Variables, evaluate, is_word_in};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use quantity::{Format, Quantity, go_f64_to_i64};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// Why the sidecar's resources cannot be computed for a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The field under the sidecar container, such as `resourcesPolicy.resourcesExpr.limits.cpu`.
    pub field: String,
    /// What went wrong and what to change.
    pub message: String,
}

/// The computed limits and requests (each absent when empty).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Computed {
    pub limits: Option<BTreeMap<String, K8sQuantity>>,
    pub requests: Option<BTreeMap<String, K8sQuantity>>,
}

const REGEX_FIELD: &str = "resourcesPolicy.targetContainersNameRegex";

#[derive(Clone, Copy)]
enum Kind {
    Limits,
    Requests,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Limits => "limits",
            Kind::Requests => "requests",
        }
    }
}

/// The pod containers the policy reads, in OpenKruise's order.
pub fn target_containers<'a>(
    policy: &ResourcesPolicy,
    pod: &'a PodSpec,
    sidecar_names: &BTreeSet<&str>,
) -> Result<Vec<&'a Container>, PolicyError> {
    let regex = policy.name_regex();
    let re = regex::Regex::new(regex).map_err(|e| PolicyError {
        field: REGEX_FIELD.into(),
        message: format!("{regex:?} is not a valid regular expression: {e}"),
    })?;
    let candidates: Vec<&Container> = pod
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .chain(pod.containers.iter())
        .filter(|c| !sidecar_names.contains(c.name.as_str()))
        .collect();
    let targets: Vec<&Container> = candidates
        .iter()
        .copied()
        .filter(|c| re.is_match(&c.name))
        .collect();
    if targets.is_empty() {
        let names: Vec<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
        return Err(PolicyError {
            field: REGEX_FIELD.into(),
            message: format!(
                "no container of the pod matches {regex:?} (the candidates are the pod's containers and \
                 native-sidecar init containers, not the sidecars of SidecarSets: {}); change the regex \
                 in the SidecarSet or the container names of the pod",
                if names.is_empty() {
                    "there are none".to_string()
                } else {
                    names.join(", ")
                }
            ),
        });
    }
    Ok(targets)
}

fn value_of(c: &Container, kind: Kind, resource: &str) -> Result<Option<Quantity>, PolicyError> {
    let list = c.resources.as_ref().and_then(|r| match kind {
        Kind::Limits => r.limits.as_ref(),
        Kind::Requests => r.requests.as_ref(),
    });
    let Some(raw) = list.and_then(|l| l.get(resource)) else {
        return Ok(None);
    };
    // As Kubernetes decodes a quantity from JSON: surrounding spaces are ignored.
    Quantity::parse(raw.0.trim()).map(Some).map_err(|e| PolicyError {
        field: "resourcesPolicy".into(),
        message: format!(
            "container {:?} of the pod has resources.{}.{resource} {:?}, which is not a quantity: {e}",
            c.name,
            kind.name(),
            raw.0
        ),
    })
}

/// The combined value of one resource over the targets; `None` is "unknown" (a limit some
/// target does not have).
fn combine(
    targets: &[&Container],
    mode: TargetContainersMode,
    kind: Kind,
    resource: &str,
) -> Result<Option<Quantity>, PolicyError> {
    let mut all_have = true;
    let mut acc: Option<Quantity> = match mode {
        TargetContainersMode::Sum => Some(Quantity::new(0, Format::DecimalSI)),
        TargetContainersMode::Max => None,
    };
    for c in targets {
        let Some(mut q) = value_of(c, kind, resource)? else {
            all_have = false;
            continue;
        };
        acc = match (mode, acc) {
            (TargetContainersMode::Sum, Some(mut sum)) => {
                sum.add(&q).map_err(|e| PolicyError {
                    field: "resourcesPolicy.targetContainersMode".into(),
                    message: format!("the sum of {resource} {}: {e}", kind.name()),
                })?;
                Some(sum)
            }
            (_, Some(max)) if q.cmp(&max) != Ordering::Greater => Some(max),
            _ => Some(q),
        };
    }
    Ok(match (kind, mode) {
        (Kind::Limits, _) if !all_have => None,
        // OpenKruise keeps a sum of requests only when it is not zero.
        (Kind::Requests, TargetContainersMode::Sum)
            if acc.as_ref().is_some_and(Quantity::is_zero) =>
        {
            None
        }
        _ => acc,
    })
}

/// Evaluates one expression with the combined value.
fn evaluate_one(expr: &str, combined: Quantity, field: &str) -> Result<Quantity, PolicyError> {
    let var = if is_word_in(expr, "memory") {
        "memory"
    } else {
        "cpu"
    };
    let shown = combined.to_string();
    let mut vars = Variables::from([(var.to_string(), Value::Quantity(combined))]);
    match evaluate(expr, &mut vars) {
        Ok(Value::Quantity(q)) => Ok(q),
        Ok(Value::Number(n)) if var == "cpu" => Ok(Quantity::new_milli(
            go_f64_to_i64(n * 1000.0),
            Format::DecimalSI,
        )),
        Ok(Value::Number(n)) => Ok(Quantity::new(go_f64_to_i64(n), Format::DecimalSI)),
        Err(e) => Err(PolicyError {
            field: field.into(),
            message: format!(
                "{expr:?} cannot be computed for this pod, where {var} is {shown}: {e}; change the \
                 expression in the SidecarSet"
            ),
        }),
    }
}

/// The sidecar's limits and requests for the pod.
pub fn compute(
    policy: &ResourcesPolicy,
    pod: &PodSpec,
    sidecar_names: &BTreeSet<&str>,
) -> Result<Computed, PolicyError> {
    let targets = target_containers(policy, pod, sidecar_names)?;
    let mode = policy.target_containers_mode;
    let mut out = Computed::default();
    for (kind, exprs) in [
        (Kind::Limits, &policy.resources_expr.limits),
        (Kind::Requests, &policy.resources_expr.requests),
    ] {
        let Some(exprs) = exprs else { continue };
        let mut list = BTreeMap::new();
        for (resource, expr) in [("cpu", &exprs.cpu), ("memory", &exprs.memory)] {
            if expr.is_empty() {
                continue;
            }
            let combined = match (kind, combine(&targets, mode, kind, resource)?) {
                (_, Some(q)) => q,
                // Unlimited: no limit, whatever the expression.
                (Kind::Limits, None) => continue,
                (Kind::Requests, None) => Quantity::zero(),
            };
            let field = format!("resourcesPolicy.resourcesExpr.{}.{resource}", kind.name());
            let q = evaluate_one(expr, combined, &field)?;
            list.insert(resource.to_string(), K8sQuantity(q.to_string()));
        }
        let list = (!list.is_empty()).then_some(list);
        match kind {
            Kind::Limits => out.limits = list,
            Kind::Requests => out.requests = list,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SidecarContainer;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Golden {
        name: String,
        #[serde(default)]
        sidecar_set_containers: Vec<String>,
        pod: PodSpec,
        sidecar: SidecarContainer,
        resources: Option<ResourceRequirements>,
        error: Option<String>,
    }

    fn golden() -> Vec<Golden> {
        serde_saphyr::from_str(include_str!(
            "../../../tests/fixtures/resources-policy/policy.yaml"
        ))
        .unwrap()
    }

    fn compute_case(c: &Golden) -> Result<Computed, PolicyError> {
        let names: BTreeSet<&str> = c
            .sidecar_set_containers
            .iter()
            .map(String::as_str)
            .collect();
        compute(c.sidecar.resources_policy.as_ref().unwrap(), &c.pod, &names)
    }

    #[test]
    fn sidecar_resources_are_computed_as_openkruise_computes_them() {
        let cases = golden();
        assert!(cases.len() >= 20);
        for c in &cases {
            match (compute_case(c), &c.resources, &c.error) {
                (Ok(got), Some(want), None) => {
                    let want_list = |l: &Option<BTreeMap<String, K8sQuantity>>| {
                        l.as_ref().filter(|l| !l.is_empty()).cloned()
                    };
                    assert_eq!(got.limits, want_list(&want.limits), "{}: limits", c.name);
                    assert_eq!(
                        got.requests,
                        want_list(&want.requests),
                        "{}: requests",
                        c.name
                    );
                }
                (Err(e), None, Some(_)) => {
                    assert!(e.field.starts_with("resourcesPolicy"), "{}: {e:?}", c.name);
                    assert!(e.message.len() > 20, "{}: {e:?}", c.name);
                }
                (got, _, _) => panic!(
                    "{}: got {got:?}, want {:?} / {:?}",
                    c.name, c.resources, c.error
                ),
            }
        }
    }

    #[test]
    fn errors_name_the_field_and_say_what_to_do() {
        let cases = golden();
        let err = |name: &str| {
            let c = cases.iter().find(|c| c.name == name).unwrap();
            compute_case(c).unwrap_err()
        };
        for (case, field, words) in [
            (
                "no container matches",
                REGEX_FIELD,
                &["\"^nothing$\"", "app", "change the regex"][..],
            ),
            (
                "a pod with no containers besides the sidecars",
                REGEX_FIELD,
                &["there are none"][..],
            ),
            (
                "an invalid regex refuses the pod",
                REGEX_FIELD,
                &["not a valid regular expression"][..],
            ),
            (
                "two quantities cannot be multiplied at injection",
                "resourcesPolicy.resourcesExpr.limits.cpu",
                &[
                    "\"cpu * 100m\"",
                    "cpu is 1",
                    "multiplication of two quantities",
                    "change the expression",
                ][..],
            ),
            (
                "a negative result refuses the pod",
                "resourcesPolicy.resourcesExpr.requests.cpu",
                &["negative: -500m"][..],
            ),
            (
                "the variable is memory only where the word memory is written in lower case",
                "resourcesPolicy.resourcesExpr.limits.memory",
                &["undefined variable \"memory\""][..],
            ),
        ] {
            let e = err(case);
            assert_eq!(e.field, field, "{case}");
            for w in words {
                assert!(
                    e.message.contains(w),
                    "{case}: {w:?} not in {:?}",
                    e.message
                );
            }
        }
    }
}
