//! The policy split into parts the API server skips cheaply: SidecarSets that can never select
//! the same pod need no common order, so they may sit in different policies, and each part's
//! binding carries a label selector covering its SidecarSets. The API server matches a binding's
//! selector natively (no CEL) and evaluates a part's CEL only for the pods that selector lets
//! through, so a pod pays for the SidecarSets that could select it rather than for every
//! SidecarSet of the cluster.
//!
//! Two SidecarSets go into one part when their pod selectors may both hold for one pod (a
//! conservative test: only a label key on which they cannot both hold separates them; the
//! namespaces they cover are not looked at). Past [`MAX_PARTS`] such groups, groups with the same
//! label keys are merged, so the API server never walks more than [`MAX_PARTS`] bindings per pod.

use crate::api::{CompiledSelector, Op, selectors_overlap};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// At most this many policies (and bindings) per operator.
pub const MAX_PARTS: usize = 16;

/// True when no set of labels satisfies both selectors ([`selectors_overlap`], exact per key).
pub fn disjoint(a: &CompiledSelector, b: &CompiledSelector) -> bool {
    !selectors_overlap(a, b, &[])
}

/// Indexes of the selectors, grouped: selectors that may select one pod share a group (through
/// any chain of such pairs). Groups in the order of their first member; members in order.
pub fn groups(selectors: &[&CompiledSelector]) -> Vec<Vec<usize>> {
    let n = selectors.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for i in 0..n {
        for j in i + 1..n {
            let (ri, rj) = (root(&mut parent, i), root(&mut parent, j));
            if ri != rj && !disjoint(selectors[i], selectors[j]) {
                parent[ri.max(rj)] = ri.min(rj);
            }
        }
    }
    let mut by_root: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..n {
        let r = root(&mut parent, i);
        by_root.entry(r).or_default().push(i);
    }
    by_root.into_values().collect()
}

/// A label requirement every selector of a group implies: the key with one of these values
/// (`Some`), or the key with any value (`None`).
pub type Cover = BTreeMap<String, Option<BTreeSet<String>>>;

/// What every one of `selectors` implies, as requirements on keys that each of them requires:
/// the union of their allowed values where each names values, else the key's presence. A pod
/// any of them selects meets it; it may let through pods none selects (the part's CEL decides).
pub fn cover(selectors: &[&CompiledSelector]) -> Cover {
    let mut out: Option<Cover> = None;
    for sel in selectors {
        let mut mine: Cover = BTreeMap::new();
        for r in sel.requirements() {
            match &r.op {
                Op::In(v) => {
                    let slot = mine.entry(r.key.clone()).or_insert(None);
                    *slot = Some(match slot.take() {
                        None => v.clone(),
                        Some(s) => s.intersection(v).cloned().collect(),
                    });
                }
                Op::Exists => {
                    mine.entry(r.key.clone()).or_insert(None);
                }
                Op::NotIn(_) | Op::DoesNotExist => {}
            }
        }
        out = Some(match out {
            None => mine,
            Some(acc) => acc
                .into_iter()
                .filter_map(|(k, a)| {
                    let b = mine.get(&k)?;
                    Some((
                        k,
                        match (a, b) {
                            (Some(a), Some(b)) => Some(a.union(b).cloned().collect()),
                            _ => None,
                        },
                    ))
                })
                .collect(),
        });
    }
    // A key no value of which is allowed (a selector that selects nothing) filters nothing
    // useful: dropped, rather than written as an `In` with no values, which is invalid.
    let mut out = out.unwrap_or_default();
    out.retain(|_, v| v.as_ref().is_none_or(|s| !s.is_empty()));
    out
}

/// The cover as a binding's `objectSelector` (None: every pod).
pub fn object_selector(cover: &Cover) -> Option<Value> {
    if cover.is_empty() {
        return None;
    }
    let exprs: Vec<Value> = cover
        .iter()
        .map(|(k, v)| match v {
            Some(values) => json!({"key": k, "operator": "In", "values": values}),
            None => json!({"key": k, "operator": "Exists"}),
        })
        .collect();
    Some(json!({"matchExpressions": exprs}))
}

/// Labels a probe pod needs for the binding's selector to let it through.
pub fn probe_labels(cover: &Cover) -> BTreeMap<String, String> {
    cover
        .iter()
        .map(|(k, v)| {
            let value = v
                .as_ref()
                .and_then(|s| s.iter().next().cloned())
                .unwrap_or_else(|| "probe".into());
            (k.clone(), value)
        })
        .collect()
}

/// Merges `groups` (index lists, with each group's cover) down to at most `max`: groups are
/// ordered by the label keys their covers name, then by first member, and cut into `max` runs
/// of near-equal length, so that groups on the same keys merge (their cover keeps those keys,
/// with the union of the values).
pub fn merge(groups: Vec<Vec<usize>>, covers: &[Cover], max: usize) -> Vec<Vec<usize>> {
    if groups.len() <= max || max == 0 {
        return groups;
    }
    let mut order: Vec<(Vec<&String>, Vec<usize>)> = groups
        .into_iter()
        .zip(covers)
        .map(|(g, c)| (c.keys().collect(), g))
        .collect();
    order.sort();
    let n = order.len();
    let mut out: Vec<Vec<usize>> = Vec::with_capacity(max);
    let mut it = order.into_iter();
    for k in 0..max {
        // Runs of n / max, the first n % max one longer.
        let len = n / max + usize::from(k < n % max);
        let mut merged: Vec<usize> = it.by_ref().take(len).flat_map(|(_, g)| g).collect();
        merged.sort_unstable();
        out.push(merged);
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    /// `"app=a,tier in (x|y),!gone,zone,team notin (q)"` as a selector.
    fn sel(text: &str) -> CompiledSelector {
        let mut exprs = Vec::new();
        for t in text.split(',').filter(|t| !t.is_empty()) {
            let (key, op, values): (&str, &str, Vec<String>) = if let Some(k) = t.strip_prefix('!')
            {
                (k, "DoesNotExist", vec![])
            } else if let Some((k, v)) = t.split_once('=') {
                (k, "In", vec![v.into()])
            } else if let Some((k, v)) = t.split_once(" notin ") {
                let v = v.trim_matches(|c| c == '(' || c == ')');
                (k, "NotIn", v.split('|').map(String::from).collect())
            } else if let Some((k, v)) = t.split_once(" in ") {
                let v = v.trim_matches(|c| c == '(' || c == ')');
                (k, "In", v.split('|').map(String::from).collect())
            } else {
                (t, "Exists", vec![])
            };
            exprs.push(LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: (!values.is_empty()).then_some(values),
            });
        }
        CompiledSelector::compile(&LabelSelector {
            match_expressions: Some(exprs),
            match_labels: None,
        })
        .unwrap()
    }

    #[test]
    fn selectors_are_disjoint_only_when_one_key_admits_nothing_for_both() {
        for (a, b, want) in [
            ("app=a", "app=b", true),
            ("app=a", "app=a", false),
            ("app=a", "tier=x", false),
            ("app in (a|b)", "app in (b|c)", false),
            ("app in (a|b)", "app in (c|d)", true),
            ("app=a", "!app", true),
            ("app", "!app", true),
            ("app", "app notin (a)", false),
            ("app=a", "app notin (a)", true),
            ("app in (a|b)", "app notin (a)", false),
            ("!app", "app notin (a)", false),
            ("", "app=a", false),
            ("", "", false),
            ("app=a,tier=x", "app=a,tier=y", true),
            ("app=a,tier=x", "app=a,zone", false),
            // A selector that selects nothing is disjoint from every other.
            ("app=a,app=b", "zone", true),
        ] {
            assert_eq!(disjoint(&sel(a), &sel(b)), want, "{a:?} vs {b:?}");
            assert_eq!(disjoint(&sel(b), &sel(a)), want, "{b:?} vs {a:?}");
        }
    }

    #[test]
    fn groups_join_every_chain_of_selectors_that_may_select_one_pod() {
        for (sels, want) in [
            (
                vec!["app=a", "app=b", "app=c"],
                vec![vec![0], vec![1], vec![2]],
            ),
            (vec!["app=a", "tier=x", "app=b"], vec![vec![0, 1, 2]]),
            (
                vec!["app=a,s=1", "app=b", "app=a,s=2", "app=a"],
                vec![vec![0, 2, 3], vec![1]],
            ),
            (vec![], vec![]),
        ] {
            let compiled: Vec<CompiledSelector> = sels.iter().map(|s| sel(s)).collect();
            let refs: Vec<&CompiledSelector> = compiled.iter().collect();
            assert_eq!(groups(&refs), want, "{sels:?}");
        }
    }

    #[test]
    fn a_cover_keeps_the_keys_every_selector_requires() {
        let set = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>());
        for (sels, want) in [
            (vec!["app=a"], vec![("app", set(&["a"]))]),
            (vec!["app=a", "app=b"], vec![("app", set(&["a", "b"]))]),
            (
                vec!["app=a,tier=x", "app=b"],
                vec![("app", set(&["a", "b"]))],
            ),
            (vec!["app=a", "app"], vec![("app", None)]),
            (
                vec!["app in (a|b),app in (b|c)"],
                vec![("app", set(&["b"]))],
            ),
            (vec!["app=a", "tier=x"], vec![]),
            (vec!["app notin (a),!gone"], vec![]),
            (vec!["app=a,app=b"], vec![]),
            (vec![""], vec![]),
        ] {
            let compiled: Vec<CompiledSelector> = sels.iter().map(|s| sel(s)).collect();
            let refs: Vec<&CompiledSelector> = compiled.iter().collect();
            let want: Cover = want.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            assert_eq!(cover(&refs), want, "{sels:?}");
        }
    }

    #[test]
    fn a_probe_gets_labels_its_binding_lets_through() {
        let compiled = [sel("app in (b|a),zone"), sel("app=c,zone")];
        let refs: Vec<&CompiledSelector> = compiled.iter().collect();
        let c = cover(&refs);
        assert_eq!(
            object_selector(&c).unwrap(),
            json!({"matchExpressions": [
                {"key": "app", "operator": "In", "values": ["a", "b", "c"]},
                {"key": "zone", "operator": "Exists"}]})
        );
        let labels = probe_labels(&c);
        assert_eq!(labels["app"], "a");
        assert_eq!(labels["zone"], "probe");
        // Every selector's cover lets the probe of its part through.
        let probe: BTreeMap<String, String> = labels;
        for (k, v) in &c {
            assert!(v.as_ref().is_none_or(|s| s.contains(&probe[k])), "{k}");
        }
        assert_eq!(object_selector(&Cover::new()), None);
    }

    #[test]
    fn past_the_most_parts_groups_on_the_same_keys_merge() {
        // 5 groups: 3 on keys app and kind, 2 on keys kind and tier; at most 2 parts.
        let sels = [
            "app=a,kind=1",
            "tier=x,kind=2",
            "app=b,kind=1",
            "tier=y,kind=2",
            "app=c,kind=1",
        ];
        let compiled: Vec<CompiledSelector> = sels.iter().map(|s| sel(s)).collect();
        let refs: Vec<&CompiledSelector> = compiled.iter().collect();
        let gs = groups(&refs);
        assert_eq!(gs.len(), 5);
        let covers: Vec<Cover> = gs
            .iter()
            .map(|g| cover(&g.iter().map(|&i| refs[i]).collect::<Vec<_>>()))
            .collect();
        let merged = merge(gs.clone(), &covers, 2);
        assert_eq!(merged, vec![vec![0, 2, 4], vec![1, 3]]);
        // The merged covers keep the keys: app in (a, b, c) and kind 1; kind 2 and tier.
        let merged_cover = |g: &Vec<usize>| cover(&g.iter().map(|&i| refs[i]).collect::<Vec<_>>());
        assert_eq!(
            object_selector(&merged_cover(&merged[0])).unwrap(),
            json!({"matchExpressions": [
                {"key": "app", "operator": "In", "values": ["a", "b", "c"]},
                {"key": "kind", "operator": "In", "values": ["1"]}]})
        );
        assert_eq!(merged_cover(&merged[1]).len(), 2);
        // Every member is in exactly one part.
        let all: BTreeSet<usize> = merged.iter().flatten().copied().collect();
        assert_eq!(all.len(), 5);
        assert_eq!(merge(gs.clone(), &covers, 5), gs);
        let three = merge(gs, &covers, 3);
        assert_eq!(three.len(), 3);
        assert_eq!(three.iter().map(Vec::len).sum::<usize>(), 5);
    }
}
