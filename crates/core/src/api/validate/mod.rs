//! Validation of a SidecarSet on its own, and of its conflicts with other SidecarSets. Every
//! error names the field path and what to do.

mod container;

use super::selector::{Scope, is_dns_label, is_label_value, is_qualified_name};
use super::{
    PatchPolicy, SidecarSet, SidecarSetSpec, SidecarSetUpdateStrategy, UpdateStrategyType,
    UpgradeType,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One problem at one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every problem found, in field order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for ValidationErrors {}

impl ValidationErrors {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_result(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
}

/// Validates one SidecarSet (as defaulted by the mutating webhook).
/// What an UPDATE may not change, as OpenKruise refuses it
/// (`validateSidecarContainerConflict`): every container of the new spec must be a container of
/// the old one (a renamed or added container would never reach the pods already injected, and
/// in-place upgrades only change images), and a container's `upgradeStrategy.upgradeType` is
/// immutable.
pub fn validate_update(new: &SidecarSet, old: &SidecarSet) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    let old_types: std::collections::BTreeMap<&str, Option<UpgradeType>> = old
        .spec
        .containers
        .iter()
        .map(|c| {
            (
                c.name(),
                c.upgrade_strategy.as_ref().and_then(|u| u.upgrade_type),
            )
        })
        .collect();
    for (i, c) in new.spec.containers.iter().enumerate() {
        match old_types.get(c.name()) {
            None => errs.push(
                format!("spec.containers[{i}].name"),
                format!(
                    "container {:?} is not in the SidecarSet being updated: containers cannot be renamed or added (pods already injected would never get them); create a new SidecarSet for it, or delete and recreate this one",
                    c.name()
                ),
            ),
            Some(Some(was)) => {
                let now = c.upgrade_strategy.as_ref().and_then(|u| u.upgrade_type);
                if now.is_some_and(|n| n != *was) {
                    errs.push(
                        format!("spec.containers[{i}].upgradeStrategy.upgradeType"),
                        format!(
                            "is immutable: container {:?} was {was:?}; keep it, or create a new SidecarSet",
                            c.name()
                        ),
                    );
                }
            }
            Some(None) => {}
        }
    }
    if errs.0.is_empty() { Ok(()) } else { Err(errs) }
}

pub fn validate(ss: &SidecarSet) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    let name = ss.name();
    if name.is_empty() {
        errs.push("metadata.name", "required");
    } else if name.len() > 63 || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-') {
        errs.push(
            "metadata.name",
            format!("{name:?} is invalid: use at most 63 letters, digits and '-' (no dots)"),
        );
    }
    if let Err(message) = super::opt_out::check_annotation(ss.metadata.annotations.as_ref()) {
        errs.push(
            format!("metadata.annotations[{}]", super::ANNOTATION_OPT_OUT),
            message,
        );
    }
    for (field, message) in super::native::check(ss) {
        errs.push(field, message);
    }
    if let Some((field, message)) =
        super::resize::check_resize_annotation(ss.metadata.annotations.as_ref())
    {
        errs.push(field, message);
    }
    validate_spec(&ss.spec, &mut errs);
    errs.into_result()
}

/// The spec, field by field, in the order the errors are reported.
fn validate_spec(spec: &SidecarSetSpec, errs: &mut ValidationErrors) {
    validate_scope(spec, errs);
    if spec.containers.is_empty() && spec.init_containers.is_empty() {
        errs.push(
            "spec.containers",
            "at least one container or init container is required",
        );
    }

    validate_containers(spec, errs);
    validate_volumes(spec, errs);
    validate_update_strategy(&spec.update_strategy, errs);

    if let Some(rev) = &spec.injection_strategy.revision
        && rev.revision_name.as_deref().unwrap_or("").is_empty()
        && rev.custom_version.as_deref().unwrap_or("").is_empty()
    {
        errs.push(
            "spec.injectionStrategy.revision",
            "set revisionName or customVersion",
        );
    }

    for (i, s) in spec.image_pull_secrets.iter().enumerate() {
        if s.name.is_empty() {
            errs.push(format!("spec.imagePullSecrets[{i}].name"), "required");
        }
    }
    if let Some(l) = spec.revision_history_limit
        && l < 0
    {
        errs.push(
            "spec.revisionHistoryLimit",
            format!("{l} is negative: use 0 or more"),
        );
    }

    validate_patch_pod_metadata(spec, errs);
}

/// The selector (not empty), the namespace (a DNS label, not with a namespaceSelector).
fn validate_scope(spec: &SidecarSetSpec, errs: &mut ValidationErrors) {
    match Scope::of(spec) {
        Ok(scope) if scope.pods.is_empty() => errs.push(
            "spec.selector",
            "must not be empty: an empty selector would inject into every pod; set matchLabels or matchExpressions",
        ),
        Ok(_) => {}
        Err(e) => errs.push(e.field, e.message),
    }
    if let Some(ns) = spec.namespace.as_deref().filter(|n| !n.is_empty()) {
        if !is_dns_label(ns) {
            errs.push(
                "spec.namespace",
                format!("{ns:?} is not a valid namespace name"),
            );
        }
        if spec.namespace_selector.is_some() {
            errs.push(
                "spec.namespace",
                "namespace and namespaceSelector are mutually exclusive: keep one of them",
            );
        }
    }
}

/// Each container and init container, and their names unique across both lists (a
/// HotUpgrade sidecar's pair included).
fn validate_containers(spec: &SidecarSetSpec, errs: &mut ValidationErrors) {
    // Container names are unique across containers and init containers, as in a pod.
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let volume_names: BTreeSet<&str> = spec.volumes.iter().map(|v| v.name.as_str()).collect();
    for (kind, list, is_init) in [
        ("spec.initContainers", &spec.init_containers, true),
        ("spec.containers", &spec.containers, false),
    ] {
        for (i, c) in list.iter().enumerate() {
            let path = format!("{kind}[{i}]");
            if let Some(first) = names.insert(c.name().to_string(), path.clone()) {
                errs.push(
                    format!("{path}.name"),
                    format!(
                        "duplicate name {:?}: already used by {first}; containers and init containers are injected into one pod, where every name must be unique: rename one of them",
                        c.name()
                    ),
                );
            }
            if c.is_hot_upgrade() && !is_init {
                for n in c.pod_names() {
                    if let Some(first) = names.insert(n.clone(), path.clone()) {
                        errs.push(
                            format!("{path}.name"),
                            format!(
                                "HotUpgrade injects {n:?}, a name already used by {first}: rename one of them"
                            ),
                        );
                    }
                }
            }
            container::validate_container(c, &path, is_init, &volume_names, errs);
        }
    }
}

/// The volumes: valid and unique names, one source each.
fn validate_volumes(spec: &SidecarSetSpec, errs: &mut ValidationErrors) {
    let mut seen = BTreeSet::new();
    for (i, v) in spec.volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}]");
        if !is_dns_label(&v.name) {
            errs.push(
                format!("{path}.name"),
                format!("{:?} is not a valid volume name (a DNS label)", v.name),
            );
        }
        if !seen.insert(v.name.as_str()) {
            errs.push(
                format!("{path}.name"),
                format!("duplicate volume name {:?}", v.name),
            );
        }
        let sources = serde_json::to_value(v)
            .ok()
            .and_then(|j| {
                j.as_object()
                    .map(|o| o.keys().filter(|k| *k != "name").count())
            })
            .unwrap_or(0);
        if sources > 1 {
            errs.push(
                path,
                "a volume may have only one source (emptyDir, configMap, secret, ...)",
            );
        }
    }
}

/// partition and maxUnavailable, partition against selector, the selector, and the order.
fn validate_update_strategy(us: &SidecarSetUpdateStrategy, errs: &mut ValidationErrors) {
    for (field, v) in [
        ("partition", &us.partition),
        ("maxUnavailable", &us.max_unavailable),
    ] {
        if let Some(v) = v
            && let Err(m) = int_or_percent(v)
        {
            errs.push(format!("spec.updateStrategy.{field}"), m);
        }
    }
    let partition_set = us
        .partition
        .as_ref()
        .is_some_and(|p| !matches!(p, IntOrString::Int(0)))
        && us.partition != Some(IntOrString::String("0%".into()));
    if us.type_ != Some(UpdateStrategyType::NotUpdate) && partition_set && us.selector.is_some() {
        errs.push(
            "spec.updateStrategy.partition",
            "partition and selector are mutually exclusive: use one way to limit the rollout",
        );
    }
    if let Some(sel) = &us.selector
        && let Err(e) = super::CompiledSelector::compile(sel)
    {
        errs.push(
            format!("spec.updateStrategy.selector.{}", e.field),
            e.message,
        );
    }
    validate_update_order(us, errs);
}

/// patchPodMetadata: annotations valid, each patched once, MergePatchJson values JSON objects.
fn validate_patch_pod_metadata(spec: &SidecarSetSpec, errs: &mut ValidationErrors) {
    let mut keys = BTreeSet::new();
    for (i, p) in spec.patch_pod_metadata.iter().enumerate() {
        let path = format!("spec.patchPodMetadata[{i}]");
        if p.annotations.is_empty() {
            errs.push(format!("{path}.annotations"), "must not be empty");
        }
        for (k, v) in &p.annotations {
            let apath = format!("{path}.annotations[{k}]");
            if !is_qualified_name(k) {
                errs.push(
                    apath.clone(),
                    format!("{k:?} is not a valid annotation key"),
                );
            }
            if !keys.insert(k.as_str()) {
                errs.push(
                    apath.clone(),
                    format!("annotation {k:?} is patched twice in this SidecarSet"),
                );
            }
            if p.patch_policy == Some(PatchPolicy::MergePatchJson)
                && !serde_json::from_str::<serde_json::Value>(v).is_ok_and(|j| j.is_object())
            {
                errs.push(apath, "MergePatchJson needs a JSON object as the value");
            }
        }
    }
}

/// `priorityStrategy` and `scatterStrategy`: OpenKruise's checks (one kind of priority, weights
/// from 0 to 100, non-empty valid selectors, non-empty keys, no repeated scatter term), plus
/// checks of what could never match a pod (keys that are not label keys, values that are not
/// label values, an ordered key given twice). Checked whatever the update type, so that a
/// SidecarSet switched to RollingUpdate later is already valid.
fn validate_update_order(us: &SidecarSetUpdateStrategy, errs: &mut ValidationErrors) {
    const BAD_KEY: &str = "is not a valid label key: an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit";
    if let Some(p) = &us.priority_strategy {
        let path = "spec.updateStrategy.priorityStrategy";
        if !p.weight_priority.is_empty() && !p.order_priority.is_empty() {
            errs.push(
                path,
                "weightPriority and orderPriority are mutually exclusive: keep one of them",
            );
        }
        for (i, t) in p.weight_priority.iter().enumerate() {
            let tpath = format!("{path}.weightPriority[{i}]");
            if !(0..=100).contains(&t.weight) {
                errs.push(
                    format!("{tpath}.weight"),
                    format!("{} is out of range: use a weight from 0 to 100", t.weight),
                );
            }
            match super::CompiledSelector::compile(&t.match_selector) {
                Ok(sel) if sel.is_empty() => errs.push(
                    format!("{tpath}.matchSelector"),
                    "must not be empty: set matchLabels or matchExpressions to say which pods get the weight",
                ),
                Ok(_) => {}
                Err(e) => errs.push(format!("{tpath}.matchSelector.{}", e.field), e.message),
            }
        }
        let mut keys: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, t) in p.order_priority.iter().enumerate() {
            let field = format!("{path}.orderPriority[{i}].orderedKey");
            let key = t.ordered_key.as_str();
            if key.is_empty() {
                errs.push(field, "required: the label key whose value orders the pods");
            } else if !is_qualified_name(key) {
                errs.push(field, format!("{key:?} {BAD_KEY}"));
            } else if let Some(first) = keys.get(key) {
                errs.push(
                    field,
                    format!(
                        "{key:?} is already orderPriority[{first}].orderedKey: pods with the key rank by that term, so this one never applies; remove it"
                    ),
                );
            } else {
                keys.insert(key, i);
            }
        }
    }
    let mut terms: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (i, t) in us.scatter_strategy.iter().enumerate() {
        let path = format!("spec.updateStrategy.scatterStrategy[{i}]");
        if t.key.is_empty() {
            errs.push(
                format!("{path}.key"),
                "required: the label key of the pods to spread out",
            );
        } else if !is_qualified_name(&t.key) {
            errs.push(format!("{path}.key"), format!("{:?} {BAD_KEY}", t.key));
        }
        if t.value != "*" && !is_label_value(&t.value) {
            errs.push(
                format!("{path}.value"),
                format!(
                    "{:?} is not a valid label value: use up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or * for every value of the key",
                    t.value
                ),
            );
        }
        if let Some(first) = terms.get(&(t.key.as_str(), t.value.as_str())) {
            errs.push(
                path,
                format!(
                    "duplicate term {}={}: already given at scatterStrategy[{first}]; remove one",
                    t.key, t.value
                ),
            );
        } else {
            terms.insert((t.key.as_str(), t.value.as_str()), i);
        }
    }
}

fn int_or_percent(v: &IntOrString) -> Result<(), String> {
    match v {
        IntOrString::Int(i) if *i < 0 => {
            Err(format!("{i} is negative: use 0 or more, or a percentage"))
        }
        IntOrString::Int(_) => Ok(()),
        IntOrString::String(s) => match s.strip_suffix('%').and_then(|n| n.parse::<u32>().ok()) {
            Some(p) if p <= 100 => Ok(()),
            _ => Err(format!(
                "{s:?} is invalid: use a non-negative integer or a percentage from 0% to 100%"
            )),
        },
    }
}

/// Conflicts of `ss` with other SidecarSets: when some pod can be selected by both, they may not
/// inject a container or init container of the same name, volumes of the same name with
/// different definitions, or the same annotation where either overwrites it. The overlap of
/// selectors is decided exactly (see [`super::selectors_overlap`]).
pub fn conflicts<'a>(
    ss: &SidecarSet,
    others: impl IntoIterator<Item = &'a SidecarSet>,
) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    let Ok(scope) = Scope::of(&ss.spec) else {
        return Ok(());
    };
    let mine: BTreeMap<String, String> = sidecar_paths(ss);
    for other in others {
        if other.name() == ss.name() {
            continue;
        }
        let Ok(other_scope) = Scope::of(&other.spec) else {
            continue;
        };
        if !scope.overlaps(&other_scope) {
            continue;
        }
        let theirs = sidecar_paths(other);
        let mut reported = BTreeSet::new();
        for (name, path) in &mine {
            if theirs.contains_key(name) && reported.insert(path) {
                errs.push(
                    format!("{path}.name"),
                    format!(
                        "container {name:?} is also injected by SidecarSet {:?}, whose selectors can match the same pods: rename one, or make their selectors or namespaces disjoint",
                        other.name()
                    ),
                );
            }
        }
        for (i, v) in ss.spec.volumes.iter().enumerate() {
            if let Some(ov) = other.spec.volumes.iter().find(|o| o.name == v.name)
                && ov != v
            {
                errs.push(
                    format!("spec.volumes[{i}]"),
                    format!(
                        "volume {:?} is defined differently by SidecarSet {:?}, whose selectors can match the same pods: use the same definition or another name",
                        v.name,
                        other.name()
                    ),
                );
            }
        }
        for (i, p) in ss.spec.patch_pod_metadata.iter().enumerate() {
            for k in p.annotations.keys() {
                let clash = other.spec.patch_pod_metadata.iter().any(|op| {
                    op.annotations.contains_key(k)
                        && (op.patch_policy == Some(PatchPolicy::Overwrite)
                            || p.patch_policy == Some(PatchPolicy::Overwrite))
                });
                if clash {
                    errs.push(
                        format!("spec.patchPodMetadata[{i}].annotations[{k}]"),
                        format!(
                            "annotation {k:?} is also patched by SidecarSet {:?} and one of them overwrites it: the result would depend on order",
                            other.name()
                        ),
                    );
                }
            }
        }
    }
    errs.into_result()
}

fn sidecar_paths(ss: &SidecarSet) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (i, c) in ss.spec.init_containers.iter().enumerate() {
        m.insert(c.name().to_string(), format!("spec.initContainers[{i}]"));
    }
    for (i, c) in ss.spec.containers.iter().enumerate() {
        m.insert(c.name().to_string(), format!("spec.containers[{i}]"));
        // A hot-upgrade pair's containers are in the pods under their own names.
        for n in c.pod_names() {
            m.insert(n, format!("spec.containers[{i}]"));
        }
    }
    m
}

#[cfg(test)]
mod update_tests {
    use super::*;

    fn ss(containers: serde_json::Value) -> SidecarSet {
        let mut s: SidecarSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "s"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "containers": containers}}))
        .unwrap();
        super::super::default_sidecarset(&mut s);
        s
    }

    #[test]
    fn updates_refused_as_openkruise_refuses_them() {
        let old = ss(
            serde_json::json!([{"name": "proxy", "image": "p:1"}, {"name": "log", "image": "l:1"}]),
        );
        let cases: [(serde_json::Value, Option<&str>); 6] = [
            // Image, env and order changes are fine; so is dropping a container.
            (
                serde_json::json!([{"name": "proxy", "image": "p:2"}, {"name": "log", "image": "l:1"}]),
                None,
            ),
            (
                serde_json::json!([{"name": "log", "image": "l:1", "env": [{"name": "A", "value": "1"}]}, {"name": "proxy", "image": "p:1"}]),
                None,
            ),
            (serde_json::json!([{"name": "proxy", "image": "p:1"}]), None),
            // A renamed or added container, an upgrade type changed.
            (
                serde_json::json!([{"name": "proxy2", "image": "p:1"}, {"name": "log", "image": "l:1"}]),
                Some("spec.containers[0].name"),
            ),
            (
                serde_json::json!([{"name": "proxy", "image": "p:1"}, {"name": "log", "image": "l:1"}, {"name": "new", "image": "n:1"}]),
                Some("spec.containers[2].name"),
            ),
            (
                serde_json::json!([{"name": "proxy", "image": "p:1"}, {"name": "log", "image": "l:1", "upgradeStrategy": {"upgradeType": "HotUpgrade"}}]),
                Some("spec.containers[1].upgradeStrategy.upgradeType"),
            ),
        ];
        for (containers, want) in cases {
            let got = validate_update(&ss(containers.clone()), &old);
            match want {
                None => assert!(got.is_ok(), "{containers}: {got:?}"),
                Some(field) => {
                    let errs = got.expect_err(&containers.to_string());
                    assert_eq!(errs.0.len(), 1, "{errs}");
                    assert_eq!(errs.0[0].field, field, "{errs}");
                }
            }
        }
    }
}

#[cfg(test)]
mod hot_upgrade_tests {
    use super::*;

    fn ss(spec: serde_json::Value) -> SidecarSet {
        let mut spec = spec;
        spec["selector"] = serde_json::json!({"matchLabels": {"a": "b"}});
        let mut s: SidecarSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "s"},
            "spec": spec}))
        .unwrap();
        super::super::default_sidecarset(&mut s);
        s
    }

    #[test]
    fn hot_upgrade_sidecars_are_validated() {
        let hot = |name: &str, empty: Option<&str>| {
            let mut c = serde_json::json!({"name": name, "image": "p:1", "upgradeStrategy": {"upgradeType": "HotUpgrade"}});
            if let Some(e) = empty {
                c["upgradeStrategy"]["hotUpgradeEmptyImage"] = e.into();
            }
            c
        };
        let long = "p".repeat(62);
        // (spec, the fields refused)
        let cases: Vec<(serde_json::Value, Vec<&str>)> = vec![
            (
                serde_json::json!({"containers": [hot("proxy", Some("e:1"))]}),
                vec![],
            ),
            (
                serde_json::json!({"containers": [hot("proxy", None)]}),
                vec!["spec.containers[0].upgradeStrategy.hotUpgradeEmptyImage"],
            ),
            (
                serde_json::json!({"containers": [hot("proxy", Some("  "))]}),
                vec!["spec.containers[0].upgradeStrategy.hotUpgradeEmptyImage"],
            ),
            (
                serde_json::json!({"updateStrategy": {"type": "NotUpdate"}, "initContainers": [hot("init", Some("e:1"))]}),
                vec!["spec.initContainers[0].upgradeStrategy.upgradeType"],
            ),
            (
                serde_json::json!({"initContainers": [{"restartPolicy": "Always", "name": "native", "image": "n:1", "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "e:1"}}]}),
                vec!["spec.initContainers[0].upgradeStrategy.upgradeType"],
            ),
            // The pair's names clash with another container's, or are too long.
            (
                serde_json::json!({"containers": [hot("proxy", Some("e:1")), {"name": "proxy-2", "image": "x:1"}]}),
                vec!["spec.containers[1].name"],
            ),
            (
                serde_json::json!({"containers": [hot(&long, Some("e:1"))]}),
                vec!["spec.containers[0].name"],
            ),
            // An empty image without HotUpgrade is ignored, as OpenKruise does.
            (
                serde_json::json!({"containers": [{"name": "c", "image": "c:1", "upgradeStrategy": {"hotUpgradeEmptyImage": "e:1"}}]}),
                vec![],
            ),
        ];
        for (spec, want) in cases {
            let errs = validate(&ss(spec.clone())).err().unwrap_or_default();
            let got: Vec<&str> = errs.0.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(got, want, "{spec}: {errs}");
        }
    }

    /// Switching upgradeType either way is refused on update (OpenKruise's
    /// `validateSidecarContainerConflict`).
    #[test]
    fn the_upgrade_type_is_immutable_both_ways() {
        let c = |t: &str| serde_json::json!({"containers": [{"name": "proxy", "image": "p:1", "upgradeStrategy": {"upgradeType": t, "hotUpgradeEmptyImage": "e:1"}}]});
        for (old, new, refused) in [
            ("ColdUpgrade", "HotUpgrade", true),
            ("HotUpgrade", "ColdUpgrade", true),
            ("HotUpgrade", "HotUpgrade", false),
        ] {
            let got = validate_update(&ss(c(new)), &ss(c(old)));
            assert_eq!(got.is_err(), refused, "{old} -> {new}: {got:?}");
            if let Err(e) = got {
                assert_eq!(
                    e.0[0].field,
                    "spec.containers[0].upgradeStrategy.upgradeType"
                );
            }
        }
    }

    /// A hot-upgrade pair's names conflict with another SidecarSet's containers.
    #[test]
    fn hot_upgrade_pair_names_conflict_across_sidecarsets() {
        let a = ss(
            serde_json::json!({"containers": [{"name": "proxy", "image": "p:1", "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "e:1"}}]}),
        );
        let mut b = ss(serde_json::json!({"containers": [{"name": "proxy-1", "image": "x:1"}]}));
        b.metadata.name = Some("other".into());
        let errs = conflicts(&a, [&b]).unwrap_err();
        assert_eq!(errs.0.len(), 1, "{errs}");
        assert_eq!(errs.0[0].field, "spec.containers[0].name");
    }
}

#[cfg(test)]
mod name_clash_tests {
    use super::*;

    #[test]
    fn injected_names_clash_across_containers_and_init_containers() {
        // (init containers, containers, the fields refused)
        let cases: [(&[&str], &[&str], &[&str]); 6] = [
            (&["init"], &["proxy"], &[]),
            (&["proxy"], &["proxy"], &["spec.containers[0].name"]),
            (
                &["a", "proxy"],
                &["b", "proxy"],
                &["spec.containers[1].name"],
            ),
            (&["x", "x"], &["y"], &["spec.initContainers[1].name"]),
            (&[], &["y", "y"], &["spec.containers[1].name"]),
            (
                &["p", "q"],
                &["q", "p"],
                &["spec.containers[0].name", "spec.containers[1].name"],
            ),
        ];
        for (init, containers, want) in cases {
            let list = |names: &[&str]| -> Vec<serde_json::Value> {
                names
                    .iter()
                    .map(|n| serde_json::json!({"name": n, "image": "i:1"}))
                    .collect()
            };
            let ss: SidecarSet = serde_json::from_value(serde_json::json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": "s"},
                "spec": {"selector": {"matchLabels": {"a": "b"}},
                         "initContainers": list(init), "containers": list(containers)}}))
            .unwrap();
            let errs = validate(&ss).err().unwrap_or_default();
            let got: Vec<&str> = errs.0.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(got, want, "{init:?} {containers:?}: {errs}");
            for e in &errs.0 {
                assert!(
                    e.message.contains("already used by spec.") && e.message.contains("rename"),
                    "{e}"
                );
            }
        }
    }
}
