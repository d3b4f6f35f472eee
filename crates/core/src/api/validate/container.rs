//! One container of a SidecarSet: name, image, restartPolicy, HotUpgrade, mounts, transferEnv
//! and resourcesPolicy.

use super::ValidationErrors;
use crate::api::selector::is_dns_label;
use crate::api::{ResourcesPolicy, SidecarContainer};
use std::collections::{BTreeMap, BTreeSet};

/// One container or init container of the SidecarSet at `path` (`volumes`: the SidecarSet's).
pub(super) fn validate_container(
    c: &SidecarContainer,
    path: &str,
    is_init: bool,
    volumes: &BTreeSet<&str>,
    errs: &mut ValidationErrors,
) {
    let ct = &c.container;
    if !is_dns_label(&ct.name) {
        errs.push(
            format!("{path}.name"),
            format!("{:?} is not a valid container name: lower-case letters, digits and '-', at most 63", ct.name),
        );
    }
    if ct.image.as_deref().unwrap_or("").trim().is_empty() {
        errs.push(format!("{path}.image"), "required");
    }
    match (is_init, ct.restart_policy.as_deref()) {
        (_, None) | (true, Some("Always")) => {}
        (true, Some(other)) => errs.push(
            format!("{path}.restartPolicy"),
            format!("{other:?} is not allowed: use Always (a native sidecar) or leave it unset"),
        ),
        (false, Some(_)) => errs.push(
            format!("{path}.restartPolicy"),
            "only init containers may set restartPolicy (Always makes a native sidecar)",
        ),
    }
    if c.is_hot_upgrade() {
        validate_hot_upgrade(c, path, is_init, errs);
    }
    validate_quantities(c, path, errs);
    validate_mounts(c, path, volumes, errs);
    validate_transfer_env(c, path, errs);
    if let Some(policy) = &c.resources_policy {
        validate_resources_policy(c, policy, &format!("{path}.resourcesPolicy"), is_init, errs);
    }
}

/// Requests and limits are quantities (OpenKruise refuses anything else when it decodes the
/// SidecarSet; accepted, it would make the API server refuse every pod it is injected into).
fn validate_quantities(c: &SidecarContainer, path: &str, errs: &mut ValidationErrors) {
    let Some(r) = &c.container.resources else {
        return;
    };
    for (kind, list) in [("requests", &r.requests), ("limits", &r.limits)] {
        for (name, q) in list.iter().flatten() {
            if crate::api::quantity::canonical(&q.0).is_none() {
                errs.push(
                    format!("{path}.resources.{kind}[{name}]"),
                    format!(
                        "{:?} is not a quantity: use a number with an optional suffix, e.g. 100m, 0.5, 64Mi, 1G",
                        q.0
                    ),
                );
            }
        }
    }
}

/// Volume mounts and devices name the SidecarSet's volumes (or the pod's, when shared).
fn validate_mounts(
    c: &SidecarContainer,
    path: &str,
    volumes: &BTreeSet<&str>,
    errs: &mut ValidationErrors,
) {
    let ct = &c.container;
    for (j, m) in ct.volume_mounts.iter().flatten().enumerate() {
        if !volumes.contains(m.name.as_str()) && !c.share_volumes() {
            errs.push(
                format!("{path}.volumeMounts[{j}].name"),
                format!(
                    "volume {:?} is not in spec.volumes: add it there, or enable shareVolumePolicy to mount the pod's own volume",
                    m.name
                ),
            );
        }
        if m.mount_path.is_empty() {
            errs.push(format!("{path}.volumeMounts[{j}].mountPath"), "required");
        }
    }
    for (j, d) in ct.volume_devices.iter().flatten().enumerate() {
        if !volumes.contains(d.name.as_str()) && !c.share_volume_devices() {
            errs.push(
                format!("{path}.volumeDevices[{j}].name"),
                format!("volume {:?} is not in spec.volumes", d.name),
            );
        }
    }
}

/// transferEnv: one source container (by name or fieldRef) and envName or envNames.
fn validate_transfer_env(c: &SidecarContainer, path: &str, errs: &mut ValidationErrors) {
    for (j, t) in c.transfer_env.iter().enumerate() {
        let tpath = format!("{path}.transferEnv[{j}]");
        let by_name = t
            .source_container_name
            .as_deref()
            .is_some_and(|s| !s.is_empty());
        match (&t.source_container_name_from, by_name) {
            (Some(_), true) => errs.push(
                tpath.clone(),
                "sourceContainerName and sourceContainerNameFrom are mutually exclusive",
            ),
            (None, false) => errs.push(
                tpath.clone(),
                "set sourceContainerName or sourceContainerNameFrom",
            ),
            (Some(from), false) => match from.field_ref.as_ref() {
                None => errs.push(
                    format!("{tpath}.sourceContainerNameFrom.fieldRef"),
                    "required",
                ),
                Some(fr) => {
                    if let Some(v) = fr.api_version.as_deref()
                        && v != "v1"
                    {
                        errs.push(
                            format!("{tpath}.sourceContainerNameFrom.fieldRef.apiVersion"),
                            "must be v1",
                        );
                    }
                    if let Err(e) = super::super::check_field_path(&fr.field_path) {
                        errs.push(
                            format!("{tpath}.sourceContainerNameFrom.fieldRef.fieldPath"),
                            e,
                        );
                    }
                }
            },
            (None, true) => {}
        }
        let has_one = t.env_name.as_deref().is_some_and(|s| !s.is_empty());
        if has_one && !t.env_names.is_empty() {
            errs.push(tpath, "envName and envNames are mutually exclusive");
        } else if !has_one && t.env_names.is_empty() {
            errs.push(tpath, "set envName or envNames");
        }
    }
}

/// A HotUpgrade sidecar. OpenKruise's validating webhook checks none of this (v1.9.0): without
/// an empty image its pod webhook injects `<name>-2` with no image, and every pod the SidecarSet
/// selects is then refused by the API server; on an init container its controller never
/// upgrades the pair. Both are refused here, before any pod is blocked.
fn validate_hot_upgrade(
    c: &SidecarContainer,
    path: &str,
    is_init: bool,
    errs: &mut ValidationErrors,
) {
    if is_init {
        errs.push(
            format!("{path}.upgradeStrategy.upgradeType"),
            "HotUpgrade is for containers only: an init container (a native sidecar too) is upgraded with ColdUpgrade; remove upgradeType or set ColdUpgrade, or move the sidecar to spec.containers",
        );
        return;
    }
    if c.hot_upgrade_empty_image().is_none() {
        errs.push(
            format!("{path}.upgradeStrategy.hotUpgradeEmptyImage"),
            format!(
                "required with HotUpgrade: the image the idle container {:?} runs (it gets the sidecar's command, args and probes, so it must accept them and do nothing)",
                format!("{}-2", c.name())
            ),
        );
    }
    if c.name().len() > 61 {
        errs.push(
            format!("{path}.name"),
            format!(
                "{:?} is too long for HotUpgrade: the pod gets {:?} and {:?}, which must be at most 63 characters; use at most 61",
                c.name(),
                format!("{}-1", c.name()),
                format!("{}-2", c.name())
            ),
        );
    }
}

/// OpenKruise's checks of a resourcesPolicy, in its order.
fn validate_resources_policy(
    c: &SidecarContainer,
    p: &ResourcesPolicy,
    path: &str,
    is_init: bool,
    errs: &mut ValidationErrors,
) {
    use crate::api::resources_policy::expr::{Value, Variables, evaluate};
    if is_init && !c.is_native_sidecar() {
        errs.push(
            path,
            "resourcesPolicy works only on native sidecars: set restartPolicy: Always on this init container, or remove resourcesPolicy",
        );
    }
    let set = |l: Option<&BTreeMap<String, _>>| l.is_some_and(|l| !l.is_empty());
    if c.container
        .resources
        .as_ref()
        .is_some_and(|r| set(r.limits.as_ref()) || set(r.requests.as_ref()))
    {
        errs.push(
            path,
            "resourcesPolicy and resources cannot be set together: remove resources.limits and resources.requests (the policy computes them), or remove resourcesPolicy",
        );
        return;
    }
    // Absent is ".*" (the default); an explicit empty one is refused, as by OpenKruise.
    if let Some(re) = p.target_containers_name_regex.as_deref() {
        let field = format!("{path}.targetContainersNameRegex");
        if re.is_empty() {
            errs.push(
                field,
                "required: a regular expression over the pod's container names, such as \".*\" (every container) or \"^app$\"",
            );
        } else if let Err(e) = regex::Regex::new(re) {
            errs.push(
                field,
                format!("{re:?} is not a valid regular expression: {e}"),
            );
        }
    }
    let x = &p.resources_expr;
    if x.limits.is_none() && x.requests.is_none() {
        errs.push(
            format!("{path}.resourcesExpr"),
            "set limits or requests (or both), each with a cpu and/or a memory expression",
        );
        return;
    }
    for (kind, exprs) in [("limits", &x.limits), ("requests", &x.requests)] {
        let Some(exprs) = exprs else { continue };
        for (var, e) in [("cpu", &exprs.cpu), ("memory", &exprs.memory)] {
            if e.is_empty() {
                continue;
            }
            // OpenKruise checks an expression by evaluating it with its variable as the number 1.
            let mut vars = Variables::from([(var.to_string(), Value::Number(1.0))]);
            if let Err(err) = evaluate(e, &mut vars) {
                errs.push(
                    format!("{path}.resourcesExpr.{kind}.{var}"),
                    format!(
                        "{e:?} is not a valid expression (checked with {var} = 1): {err}; use numbers, \
                         percentages (50%), quantities (100m, 512Mi), the variable {var}, + - * /, \
                         parentheses, max(a, b) and min(a, b)"
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::api::SidecarSet;

    #[test]
    fn requests_and_limits_must_be_quantities() {
        let ss = |cpu: &str| -> SidecarSet {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet", "metadata": {"name": "s"},
                "spec": {"selector": {"matchLabels": {"a": "b"}}, "containers": [{"name": "proxy",
                    "image": "p:1", "resources": {"requests": {"cpu": cpu}, "limits": {"memory": "64Mi"}}}]}}))
            .unwrap()
        };
        for ok in ["100m", "0.5", "1", "2e3", "1G"] {
            assert!(super::super::validate(&ss(ok)).is_ok(), "{ok}");
        }
        // The input harness's sequence (seed 433, step 3) had "lots" accepted.
        for bad in ["lots", "1.5.5", "1 Gi"] {
            let errs = super::super::validate(&ss(bad)).unwrap_err();
            assert_eq!(errs.0.len(), 1, "{errs}");
            assert_eq!(
                errs.0[0].field, "spec.containers[0].resources.requests[cpu]",
                "{errs}"
            );
            assert!(errs.0[0].message.contains("not a quantity"), "{errs}");
        }
    }
}
