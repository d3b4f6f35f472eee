//! The order of the upgrade candidates after the default one ([`super::upgrade_order`]), as
//! OpenKruise applies it (`SortUpdateIndexes` in `sidecarset_strategy.go`): first
//! `priorityStrategy`, a stable sort, then `scatterStrategy`. Pure: pods are given by their
//! labels, and an order is a list of indexes into them.
//!
//! Where OpenKruise's result depends on the order its informer happens to list pods in, this
//! order is fixed instead:
//! * pods the default order cannot tell apart are ordered by key (OpenKruise uses Go's unstable
//!   `sort.Slice` on the listed order, so their order is arbitrary, and scatter depends on it);
//! * the values a `*` scatter term stands for come in ascending order (OpenKruise: in the order
//!   the pods are listed), which decides the order of scatter terms that match as many
//!   candidates.
//!
//! A scatter value matches the pods that carry the label with that value. OpenKruise also
//! counts pods *without* the label as matching an empty value in one of its two places; here
//! an empty value only matches pods labelled `key=""`.

use crate::api::{
    CompiledSelector, SidecarSetUpdateStrategy, UpdatePriorityOrderTerm, UpdatePriorityStrategy,
    UpdateScatterTerm,
};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

/// A pod's labels.
pub type Labels = BTreeMap<String, String>;

/// Reorders `order` (indexes into `pods`, in the default order) by the strategy's
/// `priorityStrategy` and then its `scatterStrategy`. `pods` are the labels of every pod of the
/// SidecarSet, candidates or not: scatter weighs the candidates against all of them.
pub fn arrange(
    strategy: &SidecarSetUpdateStrategy,
    pods: &[&Labels],
    mut order: Vec<usize>,
) -> Vec<usize> {
    if let Some(priority) = &strategy.priority_strategy {
        by_priority(priority, pods, &mut order);
    }
    if !strategy.scatter_strategy.is_empty() {
        let terms = expand_scatter_terms(&strategy.scatter_strategy, pods);
        order = scatter(&terms, pods, order);
    }
    order
}

/// Sorts `order` by priority, highest first, keeping the order of pods of equal priority.
/// With `weightPriority` a pod's priority is the sum of the weights of the terms whose
/// selector matches it (a selector that does not compile matches nothing); with
/// `orderPriority` see [`order_rank`]. When both are set (validation refuses it), weights win.
pub fn by_priority(strategy: &UpdatePriorityStrategy, pods: &[&Labels], order: &mut [usize]) {
    if !strategy.weight_priority.is_empty() {
        let terms: Vec<(i64, CompiledSelector)> = strategy
            .weight_priority
            .iter()
            .filter_map(|t| {
                let sel = CompiledSelector::compile(&t.match_selector).ok()?;
                Some((i64::from(t.weight), sel))
            })
            .collect();
        // sort_by_cached_key is stable.
        order.sort_by_cached_key(|&i| {
            let weight: i64 = terms
                .iter()
                .filter(|(_, sel)| sel.matches(pods[i]))
                .map(|(w, _)| w)
                .sum();
            Reverse(weight)
        });
    } else if !strategy.order_priority.is_empty() {
        order.sort_by_cached_key(|&i| order_rank(&strategy.order_priority, pods[i]));
    }
}

/// Where a pod goes under `orderPriority`, lowest first: the position of the first ordered key
/// the pod has, then the number its value ends with, higher first. A pod with none of the keys
/// ranks before every other (position -1), as in OpenKruise.
pub fn order_rank(terms: &[UpdatePriorityOrderTerm], labels: &Labels) -> (i64, Reverse<i64>) {
    for (i, t) in terms.iter().enumerate() {
        if let Some(v) = labels.get(&t.ordered_key) {
            return (
                i64::try_from(i).unwrap_or(i64::MAX),
                Reverse(trailing_number(v)),
            );
        }
    }
    (-1, Reverse(0))
}

/// The number formed by the decimal digits at the end of `v` (`10` in `sts-10`, `7` in
/// `007`); 0 when there are none or they do not fit in an `i64`.
pub fn trailing_number(v: &str) -> i64 {
    let digits = v.bytes().rev().take_while(u8::is_ascii_digit).count();
    v[v.len() - digits..].parse().unwrap_or(0)
}

/// Replaces each `key: "*"` term by one term per value of `key` on `pods` (ascending), and
/// drops repeated terms (the first stays).
pub fn expand_scatter_terms(
    terms: &[UpdateScatterTerm],
    pods: &[&Labels],
) -> Vec<UpdateScatterTerm> {
    fn push(out: &mut Vec<UpdateScatterTerm>, t: UpdateScatterTerm) {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    let mut out = Vec::new();
    for t in terms {
        if t.value != "*" {
            push(&mut out, t.clone());
            continue;
        }
        let values: BTreeSet<&String> = pods.iter().filter_map(|l| l.get(&t.key)).collect();
        for v in values {
            let term = UpdateScatterTerm {
                key: t.key.clone(),
                value: v.clone(),
            };
            push(&mut out, term);
        }
    }
    out
}

fn has(labels: &Labels, term: &UpdateScatterTerm) -> bool {
    labels.get(&term.key) == Some(&term.value)
}

/// Spreads the pods of each term over `order`: the terms that match some candidate are
/// applied one after the other, those matching more candidates first (as given when as many).
/// `terms` are expanded already (see [`expand_scatter_terms`]).
pub fn scatter(terms: &[UpdateScatterTerm], pods: &[&Labels], mut order: Vec<usize>) -> Vec<usize> {
    if terms.is_empty() || order.len() <= 1 {
        return order;
    }
    for term in ranked_terms(terms, pods, &order) {
        order = scatter_by_term(term, pods, order);
    }
    order
}

/// The terms matching at least one candidate, by the number of candidates they match, most
/// first; a stable sort.
fn ranked_terms<'t>(
    terms: &'t [UpdateScatterTerm],
    pods: &[&Labels],
    order: &[usize],
) -> Vec<&'t UpdateScatterTerm> {
    let mut counted: Vec<(usize, &UpdateScatterTerm)> = terms
        .iter()
        .map(|t| (order.iter().filter(|&&i| has(pods[i], t)).count(), t))
        .filter(|(n, _)| *n > 0)
        .collect();
    counted.sort_by_key(|(n, _)| Reverse(*n));
    counted.into_iter().map(|(_, t)| t).collect()
}

/// How a term's candidates are interleaved with the others: after `unmatched_remainder`
/// unmatched ones, `count` times `matched_size` matched then `unmatched_size` unmatched ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Groups {
    count: usize,
    matched_size: usize,
    unmatched_size: usize,
    unmatched_remainder: usize,
}

/// `matched` and `unmatched` (both at least 1) cut into as many groups as the smaller of them,
/// group sizes rounded half away from zero.
fn even_groups(matched: usize, unmatched: usize) -> Groups {
    let count = matched.min(unmatched).max(1);
    let size = |n: usize| (n as f64 / count as f64).round() as usize;
    Groups {
        count,
        matched_size: size(matched).max(1),
        unmatched_size: size(unmatched).max(1),
        unmatched_remainder: 0,
    }
}

/// OpenKruise's `calculateGroupByDensity`: when the candidates hold as many or more unmatched
/// pods per matched one than all the pods do, the candidates are cut evenly; otherwise they
/// are cut into groups of the sizes that cutting all the pods gives, and the unmatched
/// candidates left over go first. The ratio is compared in `f32`, as OpenKruise does.
fn density_groups(
    total_matched: usize,
    total_unmatched: usize,
    matched: usize,
    unmatched: usize,
) -> Groups {
    let total = even_groups(total_matched, total_unmatched);
    let update = even_groups(matched, unmatched);
    if total_unmatched as f32 / total_matched as f32 >= unmatched as f32 / matched as f32 {
        return update;
    }
    let count = (matched / total.matched_size).min(unmatched / total.unmatched_size);
    Groups {
        count,
        matched_size: total.matched_size,
        unmatched_size: total.unmatched_size,
        unmatched_remainder: unmatched - count * total.unmatched_size,
    }
}

/// Moves up to `n` items from the front of `src` to `out`.
fn take(src: &mut &[usize], n: usize, out: &mut Vec<usize>) {
    let k = n.min(src.len());
    out.extend_from_slice(&src[..k]);
    *src = &src[k..];
}

/// OpenKruise's `scatterPodsByRule`: nothing changes unless at least two candidates match the
/// term and two do not. Otherwise the last matching candidate goes last, and the other
/// matching candidates are interleaved with the unmatched ones in groups (see
/// [`density_groups`]), each side keeping its order.
fn scatter_by_term(term: &UpdateScatterTerm, pods: &[&Labels], order: Vec<usize>) -> Vec<usize> {
    let (mut matched, unmatched): (Vec<usize>, Vec<usize>) =
        order.iter().partition(|&&i| has(pods[i], term));
    if matched.len() <= 1 || unmatched.len() <= 1 {
        return order;
    }
    let total_matched = pods.iter().filter(|l| has(l, term)).count();
    // `pods` holds every candidate; max() only guards against callers for which it does not.
    let total_unmatched = (pods.len() - total_matched).max(unmatched.len());
    let total_matched = total_matched.max(matched.len());
    let Some(last) = matched.pop() else {
        return order;
    };
    let g = density_groups(
        total_matched - 1,
        total_unmatched,
        matched.len(),
        unmatched.len(),
    );
    let (mut m, mut u) = (matched.as_slice(), unmatched.as_slice());
    let mut out = Vec::with_capacity(order.len());
    take(&mut u, g.unmatched_remainder, &mut out);
    for _ in 0..g.count {
        take(&mut m, g.matched_size, &mut out);
        take(&mut u, g.unmatched_size, &mut out);
    }
    out.extend_from_slice(m);
    out.extend_from_slice(u);
    out.push(last);
    out
}

#[cfg(test)]
mod tests {
    //! The expected orders of the tables below come from OpenKruise's own tests
    //! (`pkg/util/updatesort/{priority,scatter}_sort_test.go` and
    //! `pkg/controller/sidecarset/sidecarset_strategy_test.go`, v1.9.0), ported as reference
    //! data: the same pods, strategies and expected indexes.

    use super::*;
    use crate::api::UpdatePriorityWeightTerm;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    /// `"a=1,b=2"` → labels; parts without `=` are ignored (as in OpenKruise's test helper).
    fn labels(s: &str) -> Labels {
        s.split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn term(k: &str, v: &str) -> UpdateScatterTerm {
        UpdateScatterTerm {
            key: k.into(),
            value: v.into(),
        }
    }

    fn weights(terms: &[(i32, &str)]) -> UpdatePriorityStrategy {
        UpdatePriorityStrategy {
            weight_priority: terms
                .iter()
                .map(|(w, sel)| UpdatePriorityWeightTerm {
                    weight: *w,
                    match_selector: LabelSelector {
                        match_labels: Some(labels(sel)),
                        ..Default::default()
                    },
                })
                .collect(),
            ..Default::default()
        }
    }

    fn ordered(keys: &[&str]) -> UpdatePriorityStrategy {
        UpdatePriorityStrategy {
            order_priority: keys
                .iter()
                .map(|k| UpdatePriorityOrderTerm {
                    ordered_key: (*k).into(),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Sorts the two pods `[i, j]` and says whether `i` stays first: OpenKruise's
    /// `compare(podI, podJ, true)` (true when i goes first or they tie).
    fn i_first(strategy: &UpdatePriorityStrategy, i: &str, j: &str) -> bool {
        let (li, lj) = (labels(i), labels(j));
        let mut order = vec![0, 1];
        by_priority(strategy, &[&li, &lj], &mut order);
        order == [0, 1]
    }

    #[test]
    fn priority_compare_cases_from_openkruise() {
        let w2 = weights(&[(20, "key=foo"), (10, "key=bar")]);
        let w3a = weights(&[(20, "key1=foo"), (10, "key2=bar"), (15, "key3=baz")]);
        let w3b = weights(&[(20, "key1=foo"), (10, "key2=bar"), (5, "key3=baz")]);
        let o = ordered(&["key1", "key2"]);
        let cases: &[(&UpdatePriorityStrategy, &str, &str, bool)] = &[
            (&w2, "", "", true),
            (&w2, "key=foo", "key=foo", true),
            (&w2, "key=bar", "key=foo", false),
            (&w2, "", "key=bar", false),
            (&w2, "", "key=foo", false),
            (&w3a, "key1=foo", "key2=bar,key3=baz", false),
            (&w3b, "key2=bar,key3=baz", "key1=foo", false),
            (&o, "", "", true),
            (&o, "key1=o-10", "key1=o-5", true),
            (&o, "key1=o-10", "key1=o-10", true),
            (&o, "key1=o-10", "key1=o-20", false),
            (&o, "key2=o-20", "key1=o-10", false),
            (&o, "key2=o-20", "key2=o-10", true),
        ];
        for (n, (s, i, j, want)) in cases.iter().enumerate() {
            assert_eq!(i_first(s, i, j), *want, "case #{n}: {i:?} vs {j:?}");
        }
    }

    #[test]
    fn priority_sort_cases_from_openkruise() {
        let pods = [
            labels("hello=world"),
            labels(""),
            labels("foo=bar"),
            labels(""),
        ];
        let refs: Vec<&Labels> = pods.iter().collect();
        for (name, strategy, want) in [
            (
                "empty strategy",
                UpdatePriorityStrategy::default(),
                [0, 1, 2, 3],
            ),
            (
                "keep the order of pods no rule matches",
                weights(&[(100, "foo=bar"), (90, "hello=world")]),
                [2, 0, 1, 3],
            ),
            (
                "no pod matches any rule",
                weights(&[(100, "not=match"), (90, "not1=match1")]),
                [0, 1, 2, 3],
            ),
        ] {
            let mut order = vec![0, 1, 2, 3];
            by_priority(&strategy, &refs, &mut order);
            assert_eq!(order, want, "{name}");
        }
    }

    #[test]
    fn order_priority_puts_pods_without_any_key_first() {
        // OpenKruise ranks a pod with none of the ordered keys at level -1, before the rest.
        let pods = [
            labels("key2=9"),
            labels("key1=sts-3"),
            labels("other=1"),
            labels("key1=sts-10"),
            labels("key1=none"),
            labels("key2=12"),
        ];
        let refs: Vec<&Labels> = pods.iter().collect();
        let mut order: Vec<usize> = (0..pods.len()).collect();
        by_priority(&ordered(&["key1", "key2"]), &refs, &mut order);
        assert_eq!(order, [2, 3, 1, 4, 5, 0]);
    }

    #[test]
    fn priority_is_stable_over_the_default_order() {
        // Ties keep the incoming order whatever it is (kruise#2106): a reversed input stays
        // reversed among equals.
        let pods: Vec<Labels> = (0..40)
            .map(|i| labels(if i % 3 == 0 { "w=a" } else { "" }))
            .collect();
        let refs: Vec<&Labels> = pods.iter().collect();
        let mut order: Vec<usize> = (0..40).rev().collect();
        by_priority(&weights(&[(1, "w=a")]), &refs, &mut order);
        let heavy: Vec<usize> = (0..40).rev().filter(|i| i % 3 == 0).collect();
        let light: Vec<usize> = (0..40).rev().filter(|i| i % 3 != 0).collect();
        assert_eq!(order, [heavy, light].concat());
    }

    #[test]
    fn trailing_numbers() {
        for (v, n) in [
            ("5", 5),
            ("sts-10", 10),
            ("a1b2", 2),
            ("007", 7),
            ("", 0),
            ("abc", 0),
            ("x-", 0),
            ("99999999999999999999", 0),
            ("9223372036854775807", i64::MAX),
        ] {
            assert_eq!(trailing_number(v), n, "{v:?}");
        }
    }

    #[test]
    fn scatter_by_rule_cases_from_openkruise() {
        let a = term("labelA", "AAA");
        let cases: &[(&[&str], &[usize])] = &[
            (&[""], &[0]),
            (&["labelA=AAA"], &[0]),
            (&["labelA=AAA", "bbb"], &[0, 1]),
            (
                &["", "", "", "", "labelA=AAA", "labelA=AAA"],
                &[4, 0, 1, 2, 3, 5],
            ),
            (
                &["", "", "", "labelA=AAA", "labelA=AAA", "labelA=AAA"],
                &[3, 0, 1, 4, 2, 5],
            ),
            (
                &["", "", "", "labelA=AAA", "", "", "labelA=AAA"],
                &[3, 0, 1, 2, 4, 5, 6],
            ),
            (
                &[
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "labelA=AAA",
                    "labelA=AAA",
                    "labelA=AAA",
                ],
                &[6, 0, 1, 2, 7, 3, 4, 5, 8],
            ),
            (
                &[
                    "",
                    "",
                    "labelA=AAA",
                    "labelA=AAA",
                    "labelA=AAA",
                    "labelA=AAA",
                ],
                &[2, 3, 0, 4, 1, 5],
            ),
            (
                &[
                    "",
                    "",
                    "labelA=AAA",
                    "",
                    "labelA=AAA",
                    "labelA=AAA",
                    "labelA=AAA",
                    "labelA=AAA",
                    "labelA=AAA",
                ],
                &[2, 4, 0, 5, 6, 1, 7, 3, 8],
            ),
            (
                &[
                    "",
                    "labelA=AAA",
                    "",
                    "labelA=AAA",
                    "",
                    "",
                    "labelA=AAA",
                    "labelA=AAA",
                    "labelA=AAA",
                ],
                &[1, 0, 3, 2, 6, 4, 7, 5, 8],
            ),
            (
                &[
                    "",
                    "",
                    "",
                    "",
                    "ee",
                    "a",
                    "",
                    "labelA=AAA",
                    "labelA=AAA",
                    "labelA=AAA,labelB=BBB",
                ],
                &[7, 0, 1, 2, 3, 8, 4, 5, 6, 9],
            ),
        ];
        for (n, (pods, want)) in cases.iter().enumerate() {
            let pods: Vec<Labels> = pods.iter().map(|s| labels(s)).collect();
            let refs: Vec<&Labels> = pods.iter().collect();
            let order: Vec<usize> = (0..pods.len()).collect();
            assert_eq!(scatter_by_term(&a, &refs, order), *want, "case #{n}");
        }
    }

    /// One case of OpenKruise's `TestSort`: the labels of every pod (`None`: a nil pod, in no
    /// count), the strategy, and the expected order of the candidates, which are the first
    /// `want.len()` non-nil pods; the pods after them only count towards the totals.
    fn sort_case(pods: &[Option<&str>], terms: &[UpdateScatterTerm], want: &[usize]) -> Vec<usize> {
        let mut present = Vec::new(); // (OpenKruise's index, labels)
        for (i, p) in pods.iter().enumerate() {
            if let Some(p) = p {
                present.push((i, labels(p)));
            }
        }
        let refs: Vec<&Labels> = present.iter().map(|(_, l)| l).collect();
        let order: Vec<usize> = (0..want.len()).collect();
        scatter(terms, &refs, order)
            .into_iter()
            .map(|i| present[i].0)
            .collect()
    }

    /// Name, pods, terms, expected order (see [`sort_case`]).
    type SortCase = (
        &'static str,
        Vec<Option<&'static str>>,
        Vec<UpdateScatterTerm>,
        Vec<usize>,
    );

    #[test]
    fn scatter_sort_cases_from_openkruise() {
        const A: &str = "labelA=AAA";
        const B: &str = "labelB=BBB";
        const C: &str = "labelC=CCC";
        const AB: &str = "labelA=AAA,labelB=BBB";
        const AC: &str = "labelA=AAA,labelC=CCC";
        const BC: &str = "labelB=BBB,labelC=CCC";
        const SA: &str = "sdfb=eee,labelA=AAA";
        const E: &str = "";
        const S1: &str = "sdfb=eee";
        const S2: &str = "dsf=same";
        let (a, b, c) = (
            term("labelA", "AAA"),
            term("labelB", "BBB"),
            term("labelC", "CCC"),
        );
        let p = |v: &[&'static str]| -> Vec<Option<&'static str>> {
            v.iter().map(|s| Some(*s)).collect()
        };
        let cases: Vec<SortCase> = vec![
            ("a scattered pod", p(&[AB]), vec![a.clone()], vec![0]),
            (
                "all ordinary pods",
                p(&[E, E, E, E, E, E]),
                vec![],
                vec![0, 1, 2, 3, 4, 5],
            ),
            (
                "one pod one label",
                p(&[E, E, E, E, A, A]),
                vec![a.clone()],
                vec![4, 0, 1, 2, 3, 5],
            ),
            (
                "one pod more labels",
                p(&[E, E, E, E, S1, S2, B, A, A, AB]),
                vec![b.clone()],
                vec![6, 0, 1, 2, 3, 4, 5, 7, 8, 9],
            ),
            (
                "2 dimensions + one pod one label",
                p(&[B, B, E, E, A, A]),
                vec![a.clone(), b.clone()],
                vec![0, 4, 2, 3, 5, 1],
            ),
            (
                "2 dimensions + one pod more labels",
                p(&[E, E, E, B, AB, A]),
                vec![a.clone(), b.clone()],
                vec![4, 0, 1, 2, 5, 3],
            ),
            (
                "2 dimensions + same label + sequence: B, A",
                p(&[E, E, E, E, S1, S2, B, A, A, B]),
                vec![b.clone(), a.clone()],
                vec![7, 6, 0, 1, 2, 3, 4, 5, 9, 8],
            ),
            (
                "2 dimensions + same label + sequence: A, B",
                p(&[E, E, E, E, S1, S2, B, A, A, B]),
                vec![a.clone(), b.clone()],
                vec![6, 7, 0, 1, 2, 3, 4, 5, 8, 9],
            ),
            (
                "same pod same label, even scatter pods, even ordinary pods",
                p(&[E, E, E, E, S1, S2, AB, E, E, AB]),
                vec![a.clone(), b.clone()],
                vec![6, 0, 1, 2, 3, 4, 5, 7, 8, 9],
            ),
            (
                "same pod same label, even scatter pods, odd ordinary pods",
                p(&[E, E, E, S1, S2, AB, E, E, AB]),
                vec![a.clone(), b.clone()],
                vec![5, 0, 1, 2, 3, 4, 6, 7, 8],
            ),
            (
                "same pod same label, odd scatter pods, odd ordinary pods (1)",
                p(&[E, E, E, A, S1, S2, AB, E, E, E]),
                vec![a.clone(), b.clone()],
                vec![3, 0, 1, 2, 4, 5, 7, 6],
            ),
            (
                "same pod same label, odd scatter pods, odd ordinary pods (2)",
                p(&[E, E, E, A, E, E, S1, S2, AB, E, E, AB]),
                vec![a.clone(), b.clone()],
                vec![0, 1, 2, 4, 3, 5, 6, 7, 9, 10, 8],
            ),
            (
                "same pod same label, even scatter, even ordinary, more scatter pods",
                p(&[E, E, E, A, SA, S2, AB, E, E, AB]),
                vec![a.clone(), b.clone()],
                vec![6, 3, 0, 1, 4, 2, 5, 7, 8, 9],
            ),
            (
                "same pod same label, even scatter, odd ordinary, more scatter pods",
                p(&[E, A, A, S1, S2, AB, E, E, AB]),
                vec![a.clone(), b.clone()],
                vec![5, 1, 0, 3, 2, 4, 6, 7, 8],
            ),
            (
                "same pod same label, odd scatter, odd ordinary, more scatter pods (1)",
                p(&[A, E, E, A, SA, S2, AB, E, E, AB]),
                vec![a.clone(), b.clone()],
                vec![1, 0, 2, 3, 5, 4, 7, 6],
            ),
            (
                "same pod same label, odd scatter, odd ordinary, more scatter pods (2)",
                p(&[E, E, A, A, E, A, S1, S2, AB, E, E, AB]),
                vec![a.clone(), b.clone()],
                vec![0, 2, 1, 4, 3, 6, 7, 5, 9, 10, 8],
            ),
            (
                "3 dimensions + one pod one label",
                p(&[E, A, A, B, B, C, C, C, C, C]),
                vec![a.clone(), b.clone(), c.clone()],
                vec![3, 1, 5, 0, 6, 7, 8, 9, 2, 4],
            ),
            (
                "3 dimensions + one pod more labels",
                p(&[E, A, AC, BC, B, E, E, C, C, C]),
                vec![a.clone(), b.clone(), c.clone()],
                vec![3, 2, 0, 7, 8, 5, 6, 9, 1, 4],
            ),
            (
                "continuous sort 1",
                p(&[E, E, E, E, A, A, A]),
                vec![a.clone()],
                vec![0, 1, 4, 2, 3, 5],
            ),
            (
                "continuous sort 2",
                p(&[A, A, E, E, E, E, E, E, E, A]),
                vec![a.clone()],
                vec![2, 0, 3, 4, 5, 6, 1],
            ),
            (
                "a nil pod in the list",
                vec![
                    Some(E),
                    Some(A),
                    Some(AC),
                    Some(BC),
                    Some(B),
                    None,
                    Some(E),
                    Some(E),
                    Some(C),
                    Some(C),
                    Some(C),
                ],
                vec![a.clone(), b.clone(), c.clone()],
                vec![3, 2, 0, 8, 9, 6, 7, 10, 1, 4],
            ),
        ];
        for (name, pods, terms, want) in cases {
            assert_eq!(sort_case(&pods, &terms, &want), want, "{name}");
        }
    }

    #[test]
    fn scatter_term_ranking_from_openkruise() {
        // OpenKruise's TestGenerateRules: every pod is a candidate.
        for (pods, terms, want) in [
            (
                vec!["", "", "", "", "labelA=AAA", "labelA=AAA"],
                vec![term("labelA", "AAA")],
                vec![term("labelA", "AAA")],
            ),
            (
                vec!["", "", "labelB=B", "labelB=BBB", "labelA=AAA", "labelA=AAA"],
                vec![term("labelA", "AAA"), term("labelB", "BBB")],
                vec![term("labelA", "AAA"), term("labelB", "BBB")],
            ),
            // Ours: more candidates first, ties in the given order, unmatched terms dropped.
            (
                vec!["b=1", "a=1", "b=1", "a=1", "c=1,b=1"],
                vec![
                    term("a", "1"),
                    term("z", "1"),
                    term("b", "1"),
                    term("c", "1"),
                ],
                vec![term("b", "1"), term("a", "1"), term("c", "1")],
            ),
        ] {
            let pods: Vec<Labels> = pods.iter().map(|s| labels(s)).collect();
            let refs: Vec<&Labels> = pods.iter().collect();
            let order: Vec<usize> = (0..pods.len()).collect();
            let got: Vec<UpdateScatterTerm> = ranked_terms(&terms, &refs, &order)
                .into_iter()
                .cloned()
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn star_expansion() {
        // OpenKruise's TestParseUpdateScatterTerms, case "regular and scatter terms". OpenKruise
        // lists the values of key-4 in the order its informer lists the pods
        // (value-4-0, value-4-1, value-4-2, value-4); ours are ascending.
        let mut pods: Vec<Labels> = (0..100).map(|_| labels("app=sidecar")).collect();
        for (i, v) in [
            "value-4-0",
            "value-4-1",
            "value-4-2",
            "value-4",
            "value-4",
            "value-4",
        ]
        .iter()
        .enumerate()
        {
            pods[i].insert("key-4".into(), (*v).into());
        }
        let refs: Vec<&Labels> = pods.iter().collect();
        let fixed = vec![
            term("key-1", "value-1"),
            term("key-2", "value-2"),
            term("key-3", "value-3"),
        ];
        assert_eq!(expand_scatter_terms(&fixed, &refs), fixed);
        let with_star = [fixed.clone(), vec![term("key-4", "*")]].concat();
        let want = [
            fixed,
            vec![
                term("key-4", "value-4"),
                term("key-4", "value-4-0"),
                term("key-4", "value-4-1"),
                term("key-4", "value-4-2"),
            ],
        ]
        .concat();
        assert_eq!(expand_scatter_terms(&with_star, &refs), want);
        // A term written out and produced by `*` again is kept once, where it first appears.
        let both = [term("key-4", "value-4-1"), term("key-4", "*")];
        let got = expand_scatter_terms(&both, &refs);
        assert_eq!(got[0], term("key-4", "value-4-1"));
        assert_eq!(got.len(), 4);
        // A key no pod has expands to nothing.
        assert!(expand_scatter_terms(&[term("nope", "*")], &refs).is_empty());
    }

    #[test]
    fn empty_value_matches_only_pods_with_the_label() {
        let pods: Vec<Labels> = ["", "k=", "", "k=", "", "k="]
            .iter()
            .map(|s| labels(s))
            .collect();
        let refs: Vec<&Labels> = pods.iter().collect();
        // Pods 1, 3, 5 carry k="" and are spread over 0, 2, 4. (In OpenKruise every pod would
        // match, nothing would be left to spread them over, and the order would stay.)
        assert_eq!(
            scatter(&[term("k", "")], &refs, (0..6).collect()),
            [1, 0, 2, 3, 4, 5]
        );
    }

    #[test]
    fn arrange_applies_priority_then_scatter() {
        // Priority brings the zone=a pods to the front; scatter then spreads them out again.
        let pods: Vec<Labels> = ["zone=a", "zone=b", "zone=a", "zone=b", "zone=a", "zone=b"]
            .iter()
            .map(|s| labels(s))
            .collect();
        let refs: Vec<&Labels> = pods.iter().collect();
        let priority = SidecarSetUpdateStrategy {
            priority_strategy: Some(weights(&[(10, "zone=a")])),
            ..Default::default()
        };
        assert_eq!(
            arrange(&priority, &refs, (0..6).collect()),
            [0, 2, 4, 1, 3, 5]
        );
        let both = SidecarSetUpdateStrategy {
            scatter_strategy: vec![term("zone", "a")],
            ..priority
        };
        assert_eq!(arrange(&both, &refs, (0..6).collect()), [0, 1, 3, 2, 5, 4]);
    }
}
