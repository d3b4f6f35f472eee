//! The pod webhook's `matchConditions`: one CEL expression, the union of every SidecarSet's pod
//! selector, so that the API server calls the webhook only for pods some SidecarSet could
//! select. Namespaces are not in it (webhook match conditions see the object, not its
//! namespace): the expression may let through a pod of a namespace no SidecarSet covers, never
//! the other way round. An empty index gives `false`: no pod needs the webhook.

use super::Index;
use crate::api::{CompiledSelector, Op};
use std::collections::BTreeSet;

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
    let has = format!("has({LABELS})");
    let terms: Vec<String> = sel
        .requirements()
        .iter()
        .map(|r| {
            let k = quote(&r.key);
            match &r.op {
                Op::In(v) if v.len() == 1 => format!(
                    "({has} && {k} in {LABELS} && {LABELS}[{k}] == {})",
                    quote(v.iter().next().map(String::as_str).unwrap_or_default())
                ),
                Op::In(v) => format!("({has} && {k} in {LABELS} && {LABELS}[{k}] in {})", list(v)),
                Op::NotIn(v) => format!(
                    "(!{has} || !({k} in {LABELS}) || !({LABELS}[{k}] in {}))",
                    list(v)
                ),
                Op::Exists => format!("({has} && {k} in {LABELS})"),
                Op::DoesNotExist => format!("(!{has} || !({k} in {LABELS}))"),
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
    // Selectors of one `key in (values)` requirement (the common `matchLabels: {app: x}`) are
    // folded per key into one list, so that a thousand of them stay one short term.
    let mut single: std::collections::BTreeMap<&str, BTreeSet<String>> = Default::default();
    let mut terms: BTreeSet<String> = BTreeSet::new();
    for e in index.entries.values() {
        match e.scope.pods.requirements() {
            [r] if matches!(r.op, Op::In(_)) => {
                if let Op::In(v) = &r.op {
                    single
                        .entry(r.key.as_str())
                        .or_default()
                        .extend(v.iter().cloned());
                }
            }
            _ => {
                terms.insert(selector_expression(&e.scope.pods));
            }
        }
    }
    for (key, values) in single {
        let k = quote(key);
        terms.insert(if values.len() == 1 {
            format!(
                "has({LABELS}) && {k} in {LABELS} && {LABELS}[{k}] == {}",
                quote(values.iter().next().map(String::as_str).unwrap_or_default())
            )
        } else {
            format!(
                "has({LABELS}) && {k} in {LABELS} && {LABELS}[{k}] in {}",
                list(&values)
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
}
