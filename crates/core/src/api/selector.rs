//! Label selectors compiled once for matching, and an exact test of whether two selectors can
//! select a common label set.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::{BTreeMap, BTreeSet};

/// Labels (or annotations) as they are read: a value by key and the pairs in key order. Objects
/// from the API hold them in a `BTreeMap`; the controller's pod cache holds a compact sorted list
/// of interned strings, read through this too.
pub trait StrMap {
    fn get_str(&self, key: &str) -> Option<&str>;
    fn pairs(&self) -> impl Iterator<Item = (&str, &str)> + '_;
}

impl StrMap for BTreeMap<String, String> {
    fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
    fn pairs(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Op,
}

impl Requirement {
    pub fn matches(&self, labels: &(impl StrMap + ?Sized)) -> bool {
        let v = labels.get_str(&self.key);
        match &self.op {
            Op::In(vals) => v.is_some_and(|v| vals.contains(v)),
            Op::NotIn(vals) => v.is_none_or(|v| !vals.contains(v)),
            Op::Exists => v.is_some(),
            Op::DoesNotExist => v.is_none(),
        }
    }
}

/// As kubectl writes selectors: `app=web`, `tier in (a,b)`, `env notin (dev)`, `canary`,
/// `!canary`.
impl std::fmt::Display for Requirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &BTreeSet<String>| v.iter().cloned().collect::<Vec<_>>().join(",");
        match &self.op {
            Op::In(v) if v.len() == 1 => write!(f, "{}={}", self.key, list(v)),
            Op::In(v) => write!(f, "{} in ({})", self.key, list(v)),
            Op::NotIn(v) => write!(f, "{} notin ({})", self.key, list(v)),
            Op::Exists => write!(f, "{}", self.key),
            Op::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

/// A label selector ready to match: `matchLabels` become `In` requirements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompiledSelector {
    reqs: Vec<Requirement>,
}

/// What is wrong with a selector, relative to the selector's field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SelectorError {
    pub field: String,
    pub message: String,
}

impl CompiledSelector {
    /// Compiles a selector. Errors name the field (relative to the selector) and what is wrong.
    pub fn compile(sel: &LabelSelector) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            check_key(k, &format!("matchLabels[{k}]"))?;
            check_value(v, &format!("matchLabels[{k}]"))?;
            reqs.push(Requirement {
                key: k.clone(),
                op: Op::In(BTreeSet::from([v.clone()])),
            });
        }
        for (i, e) in sel.match_expressions.iter().flatten().enumerate() {
            let field = format!("matchExpressions[{i}]");
            check_key(&e.key, &format!("{field}.key"))?;
            let values: BTreeSet<String> = e.values.iter().flatten().cloned().collect();
            for v in &values {
                check_value(v, &format!("{field}.values"))?;
            }
            let op = match e.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(err(
                        &format!("{field}.values"),
                        "must be non-empty for In and NotIn",
                    ));
                }
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(err(
                        &format!("{field}.values"),
                        "must be empty for Exists and DoesNotExist",
                    ));
                }
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                other => {
                    return Err(err(
                        &format!("{field}.operator"),
                        &format!(
                            "unsupported operator {other:?}: use In, NotIn, Exists or DoesNotExist"
                        ),
                    ));
                }
            };
            reqs.push(Requirement {
                key: e.key.clone(),
                op,
            });
        }
        Ok(CompiledSelector { reqs })
    }

    /// A selector pinning one label to one value.
    pub fn label_equals(key: &str, value: &str) -> Self {
        CompiledSelector {
            reqs: vec![Requirement {
                key: key.into(),
                op: Op::In(BTreeSet::from([value.into()])),
            }],
        }
    }

    /// True when the selector has no requirement (it selects everything).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, labels: &(impl StrMap + ?Sized)) -> bool {
        self.reqs.iter().all(|r| r.matches(labels))
    }

    /// The requirements these labels do not meet (empty when the selector matches).
    pub fn misses<'a>(&'a self, labels: &(impl StrMap + ?Sized)) -> Vec<&'a Requirement> {
        self.reqs.iter().filter(|r| !r.matches(labels)).collect()
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.reqs
    }
}

fn err(field: &str, message: &str) -> SelectorError {
    SelectorError {
        field: field.into(),
        message: message.into(),
    }
}

/// A DNS label (RFC 1123): the names of containers, volumes and namespaces.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && is_dns_subdomain(s) && !s.contains('.')
}

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|p| {
            let b = p.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// A qualified label (or annotation) key: `[prefix/]name`.
pub fn is_qualified_name(k: &str) -> bool {
    match k.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_name_part(name),
        None => is_name_part(k),
    }
}

fn check_key(k: &str, field: &str) -> Result<(), SelectorError> {
    if is_qualified_name(k) {
        Ok(())
    } else {
        Err(err(
            field,
            &format!(
                "invalid label key {k:?}: a key is an optional DNS prefix and '/', then up to 63 \
                 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
            ),
        ))
    }
}

/// A label value: empty, or up to 63 letters, digits, '-', '_' or '.', starting and ending with
/// a letter or digit.
pub fn is_label_value(v: &str) -> bool {
    v.is_empty() || is_name_part(v)
}

fn check_value(v: &str, field: &str) -> Result<(), SelectorError> {
    if is_label_value(v) {
        Ok(())
    } else {
        Err(err(
            field,
            &format!(
                "invalid label value {v:?}: up to 63 letters, digits, '-', '_' or '.', starting \
                 and ending with a letter or digit"
            ),
        ))
    }
}

/// True when some label set satisfies both selectors. Exact: the requirements on each key are
/// checked for joint satisfiability, keys being independent. `always_present` names keys that
/// every object carries (such as `kubernetes.io/metadata.name` on namespaces).
pub fn selectors_overlap(
    a: &CompiledSelector,
    b: &CompiledSelector,
    always_present: &[&str],
) -> bool {
    let mut keys: BTreeSet<&str> = a
        .reqs
        .iter()
        .chain(&b.reqs)
        .map(|r| r.key.as_str())
        .collect();
    keys.extend(always_present.iter().copied());
    keys.into_iter().all(|key| {
        let reqs = a.reqs.iter().chain(&b.reqs).filter(|r| r.key == key);
        key_satisfiable(reqs, always_present.contains(&key))
    })
}

fn key_satisfiable<'a>(reqs: impl Iterator<Item = &'a Requirement>, must_exist: bool) -> bool {
    let mut allowed: Option<BTreeSet<&str>> = None; // None = any value
    let mut denied: BTreeSet<&str> = BTreeSet::new();
    let mut must_exist = must_exist;
    let mut must_not_exist = false;
    for r in reqs {
        match &r.op {
            Op::In(vals) => {
                must_exist = true;
                let vals: BTreeSet<&str> = vals.iter().map(String::as_str).collect();
                allowed = Some(match allowed {
                    None => vals,
                    Some(prev) => prev.intersection(&vals).copied().collect(),
                });
            }
            Op::NotIn(vals) => denied.extend(vals.iter().map(String::as_str)),
            Op::Exists => must_exist = true,
            Op::DoesNotExist => must_not_exist = true,
        }
    }
    if must_not_exist {
        // Absent satisfies NotIn; it cannot satisfy In or Exists.
        return !must_exist;
    }
    match allowed {
        // A value outside `denied` always exists: there are infinitely many label values.
        None => true,
        Some(allowed) => allowed.iter().any(|v| !denied.contains(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(yaml: &str) -> CompiledSelector {
        let s: LabelSelector = serde_saphyr::from_str(yaml).unwrap();
        CompiledSelector::compile(&s).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn missed_requirements_in_kubectl_syntax() {
        let s = sel("{matchLabels: {app: web}, matchExpressions: [
            {key: tier, operator: In, values: [b, a]}, {key: env, operator: NotIn, values: [dev]},
            {key: canary, operator: Exists}, {key: legacy, operator: DoesNotExist}]}");
        let all: Vec<String> = s.requirements().iter().map(|r| r.to_string()).collect();
        assert_eq!(
            all,
            [
                "app=web",
                "tier in (a,b)",
                "env notin (dev)",
                "canary",
                "!legacy"
            ]
        );
        let missed = |l: &[(&str, &str)]| -> Vec<String> {
            s.misses(&labels(l)).iter().map(|r| r.to_string()).collect()
        };
        assert_eq!(
            missed(&[("app", "web"), ("tier", "a"), ("canary", "")]),
            Vec::<String>::new()
        );
        assert_eq!(
            missed(&[
                ("app", "api"),
                ("tier", "a"),
                ("env", "dev"),
                ("legacy", "1")
            ]),
            ["app=web", "env notin (dev)", "canary", "!legacy"]
        );
    }

    #[test]
    fn matching_table() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
        let cases: &[Case] = &[
            ("{matchLabels: {app: a}}", &[("app", "a")], true),
            ("{matchLabels: {app: a}}", &[("app", "b")], false),
            ("{matchLabels: {app: a}}", &[], false),
            (
                "{matchExpressions: [{key: app, operator: In, values: [a, b]}]}",
                &[("app", "b")],
                true,
            ),
            (
                "{matchExpressions: [{key: app, operator: NotIn, values: [a]}]}",
                &[],
                true,
            ),
            (
                "{matchExpressions: [{key: app, operator: NotIn, values: [a]}]}",
                &[("app", "a")],
                false,
            ),
            (
                "{matchExpressions: [{key: app, operator: Exists}]}",
                &[("app", "")],
                true,
            ),
            (
                "{matchExpressions: [{key: app, operator: DoesNotExist}]}",
                &[("app", "x")],
                false,
            ),
            (
                "{matchLabels: {app: a}, matchExpressions: [{key: tier, operator: In, values: [web]}]}",
                &[("app", "a"), ("tier", "db")],
                false,
            ),
            ("{}", &[("x", "y")], true),
        ];
        for (s, l, want) in cases {
            assert_eq!(sel(s).matches(&labels(l)), *want, "{s} vs {l:?}");
        }
    }

    #[test]
    fn invalid_selectors_name_the_field() {
        let cases = [
            (
                "{matchExpressions: [{key: app, operator: Equals, values: [a]}]}",
                "matchExpressions[0].operator",
            ),
            (
                "{matchExpressions: [{key: app, operator: In}]}",
                "matchExpressions[0].values",
            ),
            (
                "{matchExpressions: [{key: app, operator: Exists, values: [a]}]}",
                "matchExpressions[0].values",
            ),
            (
                "{matchExpressions: [{key: 'bad key', operator: Exists}]}",
                "matchExpressions[0].key",
            ),
            ("{matchLabels: {app: 'not valid!'}}", "matchLabels[app]"),
        ];
        for (s, field) in cases {
            let ls: LabelSelector = serde_saphyr::from_str(s).unwrap();
            let e = CompiledSelector::compile(&ls).unwrap_err();
            assert_eq!(e.field, field, "{s}");
        }
    }

    #[test]
    fn overlap_table() {
        let cases = [
            // Missed by OpenKruise's heuristic: Exists on a key the other side does not mention.
            (
                "{matchLabels: {app: a}}",
                "{matchExpressions: [{key: tier, operator: Exists}]}",
                true,
            ),
            ("{matchLabels: {app: a}}", "{matchLabels: {app: b}}", false),
            (
                "{matchLabels: {app: a}}",
                "{matchLabels: {tier: web}}",
                true,
            ),
            (
                "{matchLabels: {app: a}}",
                "{matchExpressions: [{key: app, operator: In, values: [a, b]}]}",
                true,
            ),
            (
                "{matchLabels: {app: a}}",
                "{matchExpressions: [{key: app, operator: NotIn, values: [a]}]}",
                false,
            ),
            (
                "{matchLabels: {app: a}}",
                "{matchExpressions: [{key: app, operator: DoesNotExist}]}",
                false,
            ),
            (
                "{matchExpressions: [{key: app, operator: In, values: [a, b]}]}",
                "{matchExpressions: [{key: app, operator: NotIn, values: [a]}]}",
                true,
            ),
            (
                "{matchExpressions: [{key: app, operator: In, values: [a, b]}]}",
                "{matchExpressions: [{key: app, operator: NotIn, values: [a, b]}]}",
                false,
            ),
            (
                "{matchExpressions: [{key: app, operator: DoesNotExist}]}",
                "{matchExpressions: [{key: app, operator: NotIn, values: [a]}]}",
                true,
            ),
            (
                "{matchExpressions: [{key: app, operator: Exists}]}",
                "{matchExpressions: [{key: app, operator: NotIn, values: [a]}]}",
                true,
            ),
            (
                "{matchExpressions: [{key: app, operator: In, values: [a, b]}]}",
                "{matchLabels: {app: c}}",
                false,
            ),
        ];
        for (a, b, want) in cases {
            assert_eq!(selectors_overlap(&sel(a), &sel(b), &[]), want, "{a} vs {b}");
            assert_eq!(
                selectors_overlap(&sel(b), &sel(a), &[]),
                want,
                "{b} vs {a} (symmetry)"
            );
        }
    }

    #[test]
    fn always_present_keys_cannot_be_absent() {
        let a =
            sel("{matchExpressions: [{key: kubernetes.io/metadata.name, operator: DoesNotExist}]}");
        let b = sel("{}");
        assert!(selectors_overlap(&a, &b, &[]));
        assert!(!selectors_overlap(&a, &b, &["kubernetes.io/metadata.name"]));
    }
}

/// Where a SidecarSet applies: its pod selector and its namespace scope (from `namespace` or
/// `namespaceSelector`, as a selector over namespace labels).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub pods: CompiledSelector,
    /// `None`: every namespace.
    pub namespaces: Option<CompiledSelector>,
}

impl Scope {
    /// Compiles the scope of a SidecarSet spec. Errors carry the full field path.
    pub fn of(spec: &super::SidecarSetSpec) -> Result<Self, SelectorError> {
        let prefix = |e: SelectorError, p: &str| SelectorError {
            field: format!("{p}.{}", e.field),
            ..e
        };
        let pods = match &spec.selector {
            Some(s) => CompiledSelector::compile(s).map_err(|e| prefix(e, "spec.selector"))?,
            None => {
                return Err(err(
                    "spec.selector",
                    "required: set matchLabels or matchExpressions",
                ));
            }
        };
        let namespaces = match (&spec.namespace, &spec.namespace_selector) {
            (Some(ns), _) if !ns.is_empty() => Some(CompiledSelector::label_equals(
                super::LABEL_NAMESPACE_NAME,
                ns,
            )),
            (_, Some(s)) => Some(
                CompiledSelector::compile(s).map_err(|e| prefix(e, "spec.namespaceSelector"))?,
            ),
            _ => None,
        };
        Ok(Scope { pods, namespaces })
    }

    /// True when a pod with these labels, in a namespace with these labels, is in scope.
    pub fn matches(
        &self,
        pod_labels: &(impl StrMap + ?Sized),
        ns_labels: &(impl StrMap + ?Sized),
    ) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|n| n.matches(ns_labels))
            && self.pods.matches(pod_labels)
    }

    /// True when some pod in some namespace is in both scopes.
    pub fn overlaps(&self, other: &Scope) -> bool {
        let ns_overlap = match (&self.namespaces, &other.namespaces) {
            (Some(a), Some(b)) => selectors_overlap(a, b, &[super::LABEL_NAMESPACE_NAME]),
            (Some(a), None) | (None, Some(a)) => selectors_overlap(
                a,
                &CompiledSelector::default(),
                &[super::LABEL_NAMESPACE_NAME],
            ),
            (None, None) => true,
        };
        ns_overlap && selectors_overlap(&self.pods, &other.pods, &[])
    }
}
