//! Sidecar fields read from the pod's own containers, as CEL the policy evaluates per pod:
//! `transferEnv`, `shareVolumePolicy` and `shareVolumeDevicePolicy`, exactly as the webhook
//! builds them ([`crate::inject`]'s `build_sidecar`), and the SidecarSet volumes the shared
//! mounts then need.
//!
//! The webhook's rules, mirrored here:
//! - the sidecar's own env comes first, then `IS_INJECTED=true` unless it has one, then the env
//!   the shared mounts' `subPathExpr` names, then the transferred env, each name once (the first
//!   wins; an env var the source container lacks is skipped);
//! - shared mounts (devices) come from the pod's containers in order, but for those marked as
//!   injected sidecars (their first `IS_INJECTED` is `true`), after the sidecar's own; a mount
//!   whose `mountPath` (device whose `devicePath`) the sidecar has already is skipped;
//! - the source container of `transferEnv` is any container of the pod of that name (named in
//!   the spec, or by a pod label or annotation: absent, nothing is copied);
//! - init containers share and transfer from the pod's containers as containers do;
//! - a SidecarSet's volumes are those its containers mount, shared mounts included, in the
//!   order of its init containers then containers, of each its mounts then its devices.

use super::Unit;
use super::literal::{string, value};
use crate::api::{ENV_IS_INJECTED, FieldPath, SidecarContainer, parse_field_path};
use serde_json::{Value, json};

/// `$(VAR)` references in a `subPathExpr` (the webhook's: from `$(` to the next `)`).
const SUBPATH_VAR: &str = r"\$\([^)]*\)";

/// The policy leaves to the webhook a pod whose containers have more volume mounts and devices
/// than this, together, when a sidecar shares them: the API server bounds the cost of each CEL
/// evaluation, and a pod of 2,000 mounts shared into one sidecar was measured within it.
pub const MAX_SHARED_MOUNTS: usize = 1000;

/// True for a sidecar built from the pod's containers.
pub(super) fn reads_pod(sc: &SidecarContainer) -> bool {
    sc.share_volumes() || sc.share_volume_devices() || !sc.transfer_env.is_empty()
}

fn shares(sc: &SidecarContainer) -> bool {
    sc.share_volumes() || sc.share_volume_devices()
}

/// True when a SidecarSet's volumes depend on the pod: one of its sidecars shares mounts or
/// devices, and it has volumes a shared mount may name.
pub(super) fn volumes_read_pod(u: &Unit) -> bool {
    let spec = &u.entry.ss.spec;
    !spec.volumes.is_empty()
        && spec
            .containers
            .iter()
            .chain(spec.init_containers.iter())
            .any(shares)
}

/// True when some sidecar of the policy shares the pod's mounts or devices.
pub(super) fn any_shares(units: &[Unit]) -> bool {
    units.iter().any(|u| {
        let spec = &u.entry.ss.spec;
        spec.containers
            .iter()
            .chain(spec.init_containers.iter())
            .any(shares)
    })
}

/// The CEL test of a pod small enough for the shared mounts to be computed within the API
/// server's cost bound ([`MAX_SHARED_MOUNTS`]).
pub(super) fn within_cost() -> String {
    format!(
        "variables.containers.map(a, (has(a.volumeMounts) ? size(a.volumeMounts) : 0) + \
         (has(a.volumeDevices) ? size(a.volumeDevices) : 0)).sum() <= {MAX_SHARED_MOUNTS}"
    )
}

/// The pod-wide variables the sidecars built from the pod read: its containers, those a
/// sidecar may share from (not injected sidecars), and their mounts and devices in order, each
/// mount with the env its `subPathExpr` names.
pub(super) fn pod_variables(units: &[Unit]) -> Vec<Value> {
    let any = units.iter().any(|u| {
        let spec = &u.entry.ss.spec;
        spec.containers
            .iter()
            .chain(spec.init_containers.iter())
            .any(reads_pod)
    });
    if !any {
        return Vec::new();
    }
    let injected = string(ENV_IS_INJECTED);
    let mut out = vec![var(
        "containers",
        "has(object.spec.containers) ? object.spec.containers : []",
    )];
    if any_shares(units) {
        out.extend([
            var(
                "apps",
                &format!(
                    "variables.containers.filter(a, !(has(a.env) && a.env.exists(e, e.name == {injected}) && \
                     a.env.filter(e, e.name == {injected}).map(e, has(e.value) && e.value == 'true')[0]))"
                ),
            ),
            var(
                "mounts",
                "variables.apps.map(a, has(a.volumeMounts) ? a.volumeMounts : []).flatten()",
            ),
            var("mountPaths", "variables.mounts.map(m, m.mountPath)"),
            var(
                "mountEnv",
                &format!(
                    "variables.apps.map(a, has(a.volumeMounts) ? a.volumeMounts.map(m, \
                     has(m.subPathExpr) && has(a.env) ? m.subPathExpr.findAll({}).map(s, \
                     a.env.filter(e, e.name == s.substring(2, s.size() - 1))).flatten() : []) : []).flatten()",
                    string(SUBPATH_VAR)
                ),
            ),
            var(
                "devices",
                "variables.apps.map(a, has(a.volumeDevices) ? a.volumeDevices : []).flatten()",
            ),
            var("devicePaths", "variables.devices.map(d, d.devicePath)"),
        ]);
    }
    out
}

fn var(name: &str, expression: &str) -> Value {
    json!({"name": name, "expression": expression})
}

/// The prefix of the variables of spec container `j` of unit `unit` (`init`: an init container).
fn prefix(unit: usize, init: bool, j: usize) -> String {
    format!("x{unit}{}{j}", if init { 'i' } else { 'c' })
}

/// A CEL list of string literals.
fn strings<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.map(string).collect();
    format!("[{}]", items.join(", "))
}

/// The variables of one sidecar built from the pod: the positions (in `variables.mounts`,
/// `variables.devices`) of the mounts and devices it gets, and the env it may get.
pub(super) fn container_variables(
    unit: usize,
    init: bool,
    j: usize,
    sc: &SidecarContainer,
) -> Vec<Value> {
    let p = prefix(unit, init, j);
    let c = &sc.container;
    let mut out = Vec::new();
    let kept = |list: &str, paths: &str, own: Vec<&str>, field: &str| {
        let mut cond = format!("variables.{paths}.indexOf(m.{field}) == k");
        if !own.is_empty() {
            cond = format!("!(m.{field} in {}) && {cond}", strings(own.into_iter()));
        }
        format!("variables.{list}.transformList(k, m, {cond}, k)")
    };
    if sc.share_volumes() {
        let own = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.as_str());
        out.push(var(
            &format!("{p}m"),
            &kept("mounts", "mountPaths", own.collect(), "mountPath"),
        ));
    }
    if sc.share_volume_devices() {
        let own = c
            .volume_devices
            .iter()
            .flatten()
            .map(|d| d.device_path.as_str());
        out.push(var(
            &format!("{p}d"),
            &kept("devices", "devicePaths", own.collect(), "devicePath"),
        ));
    }
    let mut env = Vec::new();
    if sc.share_volumes() {
        env.push(format!(
            "variables.{p}m.map(k, variables.mountEnv[k]).flatten()"
        ));
    }
    env.extend(sc.transfer_env.iter().filter_map(transferred));
    if !env.is_empty() {
        out.push(var(&format!("{p}e"), &env.join(" + ")));
        out.push(var(
            &format!("{p}n"),
            &format!("variables.{p}e.map(x, x.name)"),
        ));
    }
    out
}

/// The env one `transferEnv` entry copies (every var of the wanted names of the source
/// container, in the order of the names: the first of a name is kept), or None when it copies
/// nothing whatever the pod.
fn transferred(t: &crate::api::TransferEnvVar) -> Option<String> {
    let source = match (&t.source_container_name, &t.source_container_name_from) {
        (Some(n), _) if !n.is_empty() => format!("a.name == {}", string(n)),
        (_, Some(from)) => {
            let (map, key) = match from
                .field_ref
                .as_ref()
                .and_then(|f| parse_field_path(&f.field_path))?
            {
                FieldPath::Label(k) => ("object.metadata.labels", k),
                FieldPath::Annotation(k) => ("object.metadata.annotations", k),
            };
            let key = string(&key);
            format!("has({map}) && {key} in {map} && a.name == {map}[{key}]")
        }
        _ => return None,
    };
    let wanted: Vec<&str> = t
        .env_name
        .iter()
        .chain(t.env_names.iter())
        .map(String::as_str)
        .collect();
    if wanted.is_empty() {
        return None;
    }
    // The pod's container names are unique (the API server refuses the pod otherwise).
    Some(format!(
        "variables.containers.filter(a, {source}).map(a, has(a.env) ? {}.map(n, a.env.filter(e, e.name == n)).flatten() : []).flatten()",
        strings(wanted.into_iter())
    ))
}

/// The CEL of one rendered sidecar built from the pod (spec container `j` of unit `unit`):
/// the rendered literal, its env, mounts and devices extended from the pod. `hot`: a container
/// of a hot-upgrade pair, whose rendered env ends with the pair's two version vars.
pub(super) fn container(
    unit: usize,
    init: bool,
    j: usize,
    sc: &SidecarContainer,
    rendered: &Value,
    hot: bool,
) -> String {
    let p = prefix(unit, init, j);
    let Value::Object(fields) = rendered else {
        return format!("dyn({})", value(rendered));
    };
    let mut out: Vec<String> = Vec::new();
    for (k, v) in fields {
        let shared = (k == "volumeMounts" && sc.share_volumes())
            || (k == "volumeDevices" && sc.share_volume_devices());
        if k == "env" || shared {
            continue;
        }
        out.push(format!("{}: dyn({})", string(k), value(v)));
    }
    out.push(env(&p, sc, rendered, hot));
    for (field, on, letter, list) in [
        ("volumeMounts", sc.share_volumes(), 'm', "mounts"),
        ("volumeDevices", sc.share_volume_devices(), 'd', "devices"),
    ] {
        if !on {
            continue;
        }
        let got = format!("variables.{p}{letter}.map(k, variables.{list}[k])");
        let own = rendered[field].as_array().cloned().unwrap_or_default();
        out.push(if own.is_empty() {
            format!(
                "?{}: size(variables.{p}{letter}) > 0 ? optional.of(dyn({got})) : optional.none()",
                string(field)
            )
        } else {
            format!(
                "{}: dyn({} + {got})",
                string(field),
                value(&Value::Array(own))
            )
        });
    }
    format!("dyn({{{}}})", out.join(", "))
}

/// `'env': …`: the rendered env (without a hot-upgrade pair's two last vars), the pod's env
/// whose names it does not have (each name once), then the pair's vars.
fn env(p: &str, sc: &SidecarContainer, rendered: &Value, hot: bool) -> String {
    let mut own = rendered["env"].as_array().cloned().unwrap_or_default();
    let suffix = if hot && own.len() >= 2 {
        own.split_off(own.len() - 2)
    } else {
        Vec::new()
    };
    let has_env = sc.share_volumes() || sc.transfer_env.iter().any(|t| transferred(t).is_some());
    let mut parts = vec![value(&Value::Array(own.clone()))];
    if has_env {
        let names = strings(own.iter().filter_map(|e| e["name"].as_str()));
        parts.push(format!(
            "variables.{p}e.transformList(k, e, !(e.name in {names}) && variables.{p}n.indexOf(e.name) == k, e)"
        ));
    }
    if !suffix.is_empty() {
        parts.push(value(&Value::Array(suffix)));
    }
    format!("'env': dyn({})", parts.join(" + "))
}

/// The spec position of each rendered container (`init` false) or init container of a unit.
pub(super) fn spec_positions(u: &Unit, init: bool) -> Vec<Option<usize>> {
    let spec = &u.entry.ss.spec;
    let (list, rendered) = if init {
        (&spec.init_containers, &u.rendered.init_containers)
    } else {
        (&spec.containers, &u.rendered.containers)
    };
    rendered
        .iter()
        .map(|(_, c)| {
            let name = c["name"].as_str().unwrap_or_default();
            list.iter().position(|sc| {
                sc.name() == name || (!init && sc.pod_names().iter().any(|n| n == name))
            })
        })
        .collect()
}

/// The names of the volumes a unit's sidecars mount, as the pod makes them, in the webhook's
/// order (repeats kept: the first counts).
pub(super) fn volume_names(unit: usize, u: &Unit) -> String {
    let spec = &u.entry.ss.spec;
    let mut parts = Vec::new();
    let lists = [(true, &spec.init_containers), (false, &spec.containers)];
    for (init, list) in lists {
        for (j, sc) in list.iter().enumerate() {
            let p = prefix(unit, init, j);
            let c = &sc.container;
            parts.push(strings(
                c.volume_mounts.iter().flatten().map(|m| m.name.as_str()),
            ));
            if sc.share_volumes() {
                parts.push(format!("variables.{p}m.map(k, variables.mounts[k].name)"));
            }
            parts.push(strings(
                c.volume_devices.iter().flatten().map(|d| d.name.as_str()),
            ));
            if sc.share_volume_devices() {
                parts.push(format!("variables.{p}d.map(k, variables.devices[k].name)"));
            }
        }
    }
    parts.retain(|p| p != "[]");
    if parts.is_empty() {
        "[]".into()
    } else {
        parts.join(" + ")
    }
}

/// A unit's volumes by name (the first of each name), as a CEL map.
pub(super) fn volume_map(u: &Unit) -> String {
    let mut seen = std::collections::BTreeSet::new();
    let fields: Vec<String> = u
        .entry
        .ss
        .spec
        .volumes
        .iter()
        .filter(|v| seen.insert(v.name.clone()))
        .map(|v| {
            let v = serde_json::to_value(v).unwrap_or_default();
            format!(
                "{}: dyn({})",
                string(v["name"].as_str().unwrap_or_default()),
                value(&v)
            )
        })
        .collect();
    format!("{{{}}}", fields.join(", "))
}
