//! The pod webhook's `matchConditions`: one CEL expression, the union of every SidecarSet's pod
//! selector, so that the API server calls the webhook only for pods some SidecarSet could
//! select. Namespaces are not in it (webhook match conditions see the object, not its
//! namespace): the expression may let through a pod of a namespace no SidecarSet covers, never
//! the other way round. An empty index gives `false`: no pod needs the webhook.

use super::Index;
use crate::api::{CompiledSelector, Op, Scope, SelectorError};
use std::collections::{BTreeMap, BTreeSet};

/// Beyond this size the expression is not used (the webhook is then called for every pod, as
/// without a condition): the API server bounds the cost of each expression, and a condition
/// that long is cheaper to evaluate in the webhook than in CEL.
pub const MAX_EXPRESSION_BYTES: usize = 64 * 1024;

const LABELS: &str = "object.metadata.labels";

fn quote(s: &str) -> String {
    // Label keys and values are [A-Za-z0-9._/-] (validated); escape anyway.
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn list(values: &BTreeSet<String>) -> String {
    let items: Vec<String> = values.iter().map(|v| quote(v)).collect();
    format!("[{}]", items.join(", "))
}

/// The CEL of one selector over the pod's labels (which may be absent).
pub fn selector_expression(sel: &CompiledSelector) -> String {
    selector_expression_over(sel, LABELS)
}

/// The CEL of one selector over the labels at `labels` (a CEL field path whose last field may be
/// absent), for example `namespaceObject.metadata.labels` in an admission policy.
pub fn selector_expression_over(sel: &CompiledSelector, labels: &str) -> String {
    let has = format!("has({labels})");
    let terms: Vec<String> = sel
        .requirements()
        .iter()
        .map(|r| {
            let k = quote(&r.key);
            match &r.op {
                Op::In(v) if v.len() == 1 => format!(
                    "({has} && {k} in {labels} && {labels}[{k}] == {})",
                    quote(v.iter().next().map(String::as_str).unwrap_or_default())
                ),
                Op::In(v) => format!("({has} && {k} in {labels} && {labels}[{k}] in {})", list(v)),
                Op::NotIn(v) => format!(
                    "(!{has} || !({k} in {labels}) || !({labels}[{k}] in {}))",
                    list(v)
                ),
                Op::Exists => format!("({has} && {k} in {labels})"),
                Op::DoesNotExist => format!("(!{has} || !({k} in {labels}))"),
            }
        })
        .collect();
    if terms.is_empty() {
        "true".into()
    } else {
        terms.join(" && ")
    }
}

/// The union over the index; `None` when it is longer than [`MAX_EXPRESSION_BYTES`].
pub fn pod_match_expression(index: &Index) -> Option<String> {
    PodCoverage::of_index(index).expression()
}

/// What a match condition covers, in a form whose union is exact (a set union, not an `||` of
/// strings that would grow with every writer): selectors of one `key in (values)` requirement
/// (the common `matchLabels: {app: x}`) as values per key, any other selector as its CEL term,
/// or every pod. Several writers publish it, each adding what it knows; the expression is
/// rendered from it ([`PodCoverage::expression`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCoverage {
    /// Label key → the values a single-requirement selector accepts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, BTreeSet<String>>,
    /// Any other selector as its CEL term ([`selector_expression`]), or a whole condition written
    /// by someone else, kept as it is.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub terms: BTreeSet<String>,
    /// Every pod (no condition).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub every_pod: bool,
}

impl PodCoverage {
    /// Every pod.
    pub fn every_pod() -> PodCoverage {
        PodCoverage {
            every_pod: true,
            ..Default::default()
        }
    }

    /// What one pod selector covers.
    pub fn of_selector(sel: &CompiledSelector) -> PodCoverage {
        let mut c = PodCoverage::default();
        c.add_selector(sel);
        c
    }

    /// What a SidecarSet's pod selector covers; an error when its selectors do not compile.
    pub fn of_sidecarset(ss: &crate::api::SidecarSet) -> Result<PodCoverage, SelectorError> {
        Ok(PodCoverage::of_selector(&Scope::of(&ss.spec)?.pods))
    }

    /// What the index's SidecarSets cover together.
    pub fn of_index(index: &Index) -> PodCoverage {
        let mut c = PodCoverage::default();
        for e in index.entries.values() {
            c.add_selector(&e.scope.pods);
        }
        c
    }

    /// [`PodCoverage::of_index`], where a SidecarSet named in `compiled` (injected by an
    /// admission policy, see [`crate::policy`]) covers only the pods it selects that do not
    /// record it in their injected list yet ([`crate::policy::webhook_term`]): the API server
    /// then does not call the webhook for a pod the policy injected. Safe whether or not the
    /// policy is in effect: the webhook changes nothing for a SidecarSet a pod records already.
    pub fn of_index_compiled(index: &Index, compiled: &BTreeSet<String>) -> PodCoverage {
        let mut c = PodCoverage::default();
        for e in index.entries.values() {
            let name = e.ss.name();
            if compiled.contains(name) {
                c.terms
                    .insert(crate::policy::webhook_term(&e.scope.pods, name));
            } else {
                c.add_selector(&e.scope.pods);
            }
        }
        c
    }

    fn add_selector(&mut self, sel: &CompiledSelector) {
        match sel.requirements() {
            [r] if matches!(r.op, Op::In(_)) => {
                if let Op::In(v) = &r.op {
                    self.labels
                        .entry(r.key.clone())
                        .or_default()
                        .extend(v.iter().cloned());
                }
            }
            _ => {
                self.terms.insert(selector_expression(sel));
            }
        }
    }

    /// A condition written by someone else, as it is ("true": every pod, "false": nothing).
    pub fn of_expression(expression: &str) -> PodCoverage {
        match expression.trim() {
            "true" => PodCoverage::every_pod(),
            "false" => PodCoverage::default(),
            e => PodCoverage {
                terms: BTreeSet::from([e.to_string()]),
                ..Default::default()
            },
        }
    }

    /// Adds what `other` covers.
    pub fn union(&mut self, other: &PodCoverage) {
        for (k, v) in &other.labels {
            self.labels
                .entry(k.clone())
                .or_default()
                .extend(v.iter().cloned());
        }
        self.terms.extend(other.terms.iter().cloned());
        self.every_pod |= other.every_pod;
    }

    /// True when every pod `other` covers is covered here, as far as the structure shows (a
    /// term is covered by the same term only: never true when it is not).
    pub fn covers(&self, other: &PodCoverage) -> bool {
        self.every_pod
            || (!other.every_pod
                && other.terms.is_subset(&self.terms)
                && other
                    .labels
                    .iter()
                    .all(|(k, v)| self.labels.get(k).is_some_and(|have| v.is_subset(have))))
    }

    /// The CEL expression; `None` for every pod, or when it is longer than
    /// [`MAX_EXPRESSION_BYTES`]. Nothing covered gives `false`.
    pub fn expression(&self) -> Option<String> {
        if self.every_pod {
            return None;
        }
        let mut terms = self.terms.clone();
        for (key, values) in &self.labels {
            let k = quote(key);
            terms.insert(if values.len() == 1 {
                format!(
                    "has({LABELS}) && {k} in {LABELS} && {LABELS}[{k}] == {}",
                    quote(values.iter().next().map(String::as_str).unwrap_or_default())
                )
            } else {
                format!(
                    "has({LABELS}) && {k} in {LABELS} && {LABELS}[{k}] in {}",
                    list(values)
                )
            });
        }
        let expr = if terms.is_empty() {
            "false".to_string()
        } else if terms.len() == 1 {
            terms.into_iter().next().unwrap_or_default()
        } else {
            terms
                .iter()
                .map(|t| format!("({t})"))
                .collect::<Vec<_>>()
                .join(" || ")
        };
        (expr.len() <= MAX_EXPRESSION_BYTES).then_some(expr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SidecarSet;

    fn ss(name: &str, selector: serde_json::Value) -> SidecarSet {
        serde_json::from_value(serde_json::json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": name}, "spec": {"selector": selector, "containers": [{"name": "c", "image": "i"}]}}))
        .unwrap()
    }

    #[test]
    fn each_operator_becomes_a_guarded_cel_term() {
        let sel = |v: serde_json::Value| {
            let ls = serde_json::from_value(v).unwrap();
            selector_expression(&CompiledSelector::compile(&ls).unwrap())
        };
        let l = LABELS;
        let h = format!("has({l})");
        let cases = [
            (
                serde_json::json!({"matchLabels": {"app": "web"}}),
                format!("({h} && 'app' in {l} && {l}['app'] == 'web')"),
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]}),
                format!("({h} && 'tier' in {l} && {l}['tier'] in ['a', 'b'])"),
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}),
                format!("(!{h} || !('tier' in {l}) || !({l}['tier'] in ['a']))"),
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "x", "operator": "Exists"}]}),
                format!("({h} && 'x' in {l})"),
            ),
            (
                serde_json::json!({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}),
                format!("(!{h} || !('x' in {l}))"),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(sel(input.clone()), want, "{input}");
        }
        assert_eq!(
            sel(serde_json::json!({"matchLabels": {"a": "1", "b": "2"}})),
            format!(
                "({h} && 'a' in {l} && {l}['a'] == '1') && ({h} && 'b' in {l} && {l}['b'] == '2')"
            )
        );
    }

    #[test]
    fn the_union_covers_every_sidecarset_once_and_nothing_without_any() {
        assert_eq!(
            pod_match_expression(&Index::new()).as_deref(),
            Some("false")
        );
        let (index, _) = Index::from_sidecarsets([
            ss("a", serde_json::json!({"matchLabels": {"app": "web"}})),
            ss("b", serde_json::json!({"matchLabels": {"app": "web"}})),
            ss("c", serde_json::json!({"matchLabels": {"app": "db"}})),
        ]);
        let e = pod_match_expression(&index).unwrap();
        assert_eq!(e.matches(" || ").count(), 0, "folded into one list: {e}");
        assert!(e.contains("in ['db', 'web']"), "{e}");
        // With a selector of another shape: two terms.
        let (index, _) = Index::from_sidecarsets([
            ss("a", serde_json::json!({"matchLabels": {"app": "web"}})),
            ss(
                "c",
                serde_json::json!({"matchLabels": {"app": "db", "tier": "x"}}),
            ),
        ]);
        let e = pod_match_expression(&index).unwrap();
        assert_eq!(e.matches(" || ").count(), 1, "{e}");
    }

    #[test]
    fn single_label_selectors_fold_into_one_list_per_key() {
        let (index, _) = Index::from_sidecarsets((0..1000).map(|i| {
            ss(
                &format!("s{i}"),
                serde_json::json!({"matchLabels": {"app": format!("app-{i}")}}),
            )
        }));
        let e = pod_match_expression(&index).unwrap();
        assert!(!e.contains(" || "), "one term: {}", &e[..200]);
        assert!(e.contains("'app-0'") && e.contains("'app-999'"));
        assert!(e.len() < 16 * 1024, "{} bytes", e.len());
    }

    #[test]
    fn too_long_means_no_condition() {
        let many: Vec<SidecarSet> = (0..2000)
            .map(|i| ss(&format!("s{i}"), serde_json::json!({"matchLabels": {"app": format!("app-{i}"), "team": format!("t{i}")}})))
            .collect();
        let (index, _) = Index::from_sidecarsets(many);
        assert_eq!(pod_match_expression(&index), None);
    }

    #[test]
    fn coverages_unite_exactly_and_render_as_the_index_of_both() {
        let a = ss("a", serde_json::json!({"matchLabels": {"app": "web"}}));
        let b = ss(
            "b",
            serde_json::json!({"matchLabels": {"app": "db", "tier": "x"}}),
        );
        let c = ss("c", serde_json::json!({"matchLabels": {"app": "shop"}}));
        let (left, _) = Index::from_sidecarsets([a.clone(), b.clone()]);
        let (right, _) = Index::from_sidecarsets([c.clone(), b.clone()]);
        let (all, _) = Index::from_sidecarsets([a, b, c.clone()]);
        let mut u = PodCoverage::of_index(&left);
        u.union(&PodCoverage::of_index(&right));
        assert_eq!(u, PodCoverage::of_index(&all));
        assert_eq!(u.expression(), pod_match_expression(&all));
        // Union is idempotent: writing it again changes nothing.
        let before = u.clone();
        u.union(&PodCoverage::of_index(&right));
        assert_eq!(u, before);
        assert!(u.covers(&PodCoverage::of_sidecarset(&c).unwrap()));
        assert!(!PodCoverage::of_index(&left).covers(&PodCoverage::of_sidecarset(&c).unwrap()));
        // Every pod covers everything and is rendered as no expression; a foreign condition
        // is one term, "false" is nothing.
        assert!(PodCoverage::every_pod().covers(&u));
        assert!(!u.covers(&PodCoverage::every_pod()));
        assert_eq!(PodCoverage::every_pod().expression(), None);
        assert_eq!(
            PodCoverage::of_expression(" true "),
            PodCoverage::every_pod()
        );
        assert_eq!(PodCoverage::of_expression("false"), PodCoverage::default());
        assert_eq!(
            PodCoverage::of_expression("x == 1").expression().as_deref(),
            Some("x == 1")
        );
        // The structure survives a round trip through JSON (it is published in an annotation).
        let json = serde_json::to_string(&u).unwrap();
        assert_eq!(serde_json::from_str::<PodCoverage>(&json).unwrap(), u);
    }
}
