//! What the pods must become after a step, computed from the spec and the pods as they were,
//! with OpenKruise's rules restated here (not the operator's planner):
//!
//! * a pod is selected when the namespaceSelector (absent, or the pods' namespace by name) and
//!   the selector (its `tier` requirements; the run's `e2e-app` label is always required)
//!   select it; a pod that is not is left alone;
//! * a selected pod carrying the sidecar is *updated* when its sidecar is the spec's (image, env,
//!   resources), *upgradable* when only the image differs, and left alone otherwise (a change of
//!   env or resources is not upgraded in place: it reaches new pods only);
//! * only pods `updateStrategy.selector` selects (every pod when there is none) are candidates
//!   for an in-place upgrade; the others keep their sidecar;
//! * with `updateStrategy.type: NotUpdate` or `paused: true` no pod is upgraded; otherwise all
//!   candidates but `partition` of them are (an integer, or a percentage of all the matched
//!   pods rounded up, below 100 % keeping one pod fewer than all when there are several:
//!   OpenKruise's `CalculatePartitionReplicas`, subtracted from the number of candidates as
//!   its `GetNextUpgradePods` does); which ones stay is the operator's choice;
//! * `priorityStrategy` and `scatterStrategy` change the order of the upgrades, never how many
//!   end upgraded; with `weightPriority` (and no scatter, which reorders after it) a pod's
//!   priority is the sum of the weights of the terms that select it, and the upgrades go from
//!   the highest priority down (OpenKruise's `SortUpdateIndexes`: a stable sort by priority of
//!   the ready pods), so no pod starts its upgrade while one of higher priority waits beyond the
//!   same batch of `maxUnavailable` picks, and `partition` keeps back the lowest ([`order`]);
//! * never more than `maxUnavailable` pods mid-upgrade at once (default 1; a percentage of the
//!   matched pods rounded up; above 0, at least 1);
//! * a new pod gets the spec's sidecar, or the pinned revision's
//!   (`injectionStrategy.revision.customVersion`, policy Always), or none while
//!   `injectionStrategy.paused` or when it is not selected.

use super::generate::{SIDECAR, pinned_containers};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The sidecar as the generator varies it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sidecar {
    pub image: String,
    pub mode: Option<String>,
    pub cpu: Option<String>,
}

impl Sidecar {
    /// From a container as JSON (a spec's, or a pod's).
    pub fn of(c: &Value) -> Sidecar {
        let mode = c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "MODE")
            .and_then(|e| e["value"].as_str().map(String::from));
        Sidecar {
            image: c["image"].as_str().unwrap_or("").to_string(),
            mode,
            cpu: c["resources"]["requests"]["cpu"].as_str().map(String::from),
        }
    }

    /// The spec's (its first container: the generator keeps one).
    pub fn of_spec(containers: &Value) -> Sidecar {
        Sidecar::of(&containers[0])
    }

    fn without_image(&self) -> (Option<&String>, Option<&String>) {
        (self.mode.as_ref(), self.cpu.as_ref())
    }
}

/// A pod as the checks see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodObs {
    pub name: String,
    pub tier: String,
    pub sidecar: Option<Sidecar>,
    pub ready: bool,
}

impl PodObs {
    pub fn of(p: &Pod) -> PodObs {
        let c = serde_json::to_value(p.spec.as_ref().map(|s| &s.containers)).unwrap_or_default();
        let sidecar = c
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == SIDECAR)
            .map(Sidecar::of);
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        PodObs {
            name: p.metadata.name.clone().unwrap_or_default(),
            tier: p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("tier").cloned())
                .unwrap_or_default(),
            sidecar,
            ready,
        }
    }
}

/// Does the namespaceSelector select the pods' namespace?
pub fn ns_selected(spec: &Value, pods_ns: &str) -> bool {
    let ns = &spec["namespaceSelector"];
    ns.is_null()
        || ns["matchLabels"]
            .as_object()
            .into_iter()
            .flatten()
            .all(|(k, v)| k == "kubernetes.io/metadata.name" && v == pods_ns)
}

/// Does the selector select a pod of this `tier` (the run's label assumed)?
pub fn tier_selected(spec: &Value, tier: &str) -> bool {
    selects_tier(&spec["selector"], tier)
}

/// Does `updateStrategy.selector` select a pod of this `tier` (none: every pod)? Only the pods
/// it selects are upgraded in place (OpenKruise's `GetNextUpgradePods`); the others keep their
/// sidecar.
pub fn update_selected(spec: &Value, tier: &str) -> bool {
    let sel = &spec["updateStrategy"]["selector"];
    sel.is_null() || selects_tier(sel, tier)
}

/// Does `sel` (its `tier` requirements, in `matchLabels` or `matchExpressions`) select a pod of
/// this `tier` (the run's label assumed)?
fn selects_tier(sel: &Value, tier: &str) -> bool {
    let labels_ok = sel["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| k != "tier" || v == tier);
    labels_ok
        && sel["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|e| {
                let values: Vec<&str> = e["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let has = !tier.is_empty();
                match e["operator"].as_str() {
                    Some("In") => has && values.contains(&tier),
                    Some("NotIn") => !has || !values.contains(&tier),
                    Some("Exists") => has,
                    Some("DoesNotExist") => !has,
                    _ => false,
                }
            })
}

/// An int-or-percentage scaled to `total`, rounded up.
fn scaled_up(v: &Value, total: usize) -> Option<usize> {
    match v {
        Value::Number(n) => n.as_u64().map(|n| n as usize),
        Value::String(s) => {
            let pct: usize = s.strip_suffix('%')?.parse().ok()?;
            Some((pct * total).div_ceil(100))
        }
        _ => None,
    }
}

/// OpenKruise's `CalculatePartitionReplicas`.
pub fn partition(v: &Value, total: usize) -> usize {
    let Some(n) = scaled_up(v, total) else {
        return 0;
    };
    let below_100 = v.as_str().is_some_and(|s| s != "100%");
    let n = if below_100 && total > 1 && n == total {
        n - 1
    } else {
        n
    };
    n.min(total)
}

/// `maxUnavailable` of `total` matched pods.
pub fn max_unavailable(v: &Value, total: usize) -> usize {
    if v.is_null() {
        return 1;
    }
    let n = scaled_up(v, total).unwrap_or(1);
    let positive = match v {
        Value::Number(n) => n.as_u64().is_some_and(|n| n > 0),
        Value::String(s) => s.trim_end_matches('%').parse::<u64>().is_ok_and(|p| p > 0),
        _ => false,
    };
    if positive { n.max(1) } else { n }
}

/// What a pod must be once the system followed the step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Want {
    /// As it was.
    Same(Option<Sidecar>),
    /// As it was, or upgraded to the target (one of [`Expectation::upgrades`]).
    SameOrTarget(Sidecar),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expectation {
    pub pods: BTreeMap<String, Want>,
    /// How many of the upgradable pods end on the target.
    pub upgrades: usize,
    pub target: Sidecar,
    /// The selected pods (the others: no write of the operator to them).
    pub selected: BTreeSet<String>,
    /// The pods the status counts (selected; not a pod without the sidecar while injection is
    /// paused).
    pub counted: BTreeSet<String>,
    pub max_unavailable: usize,
}

/// The expectation for `spec` from the pods as they were (`before`).
pub fn expect(spec: &Value, pods_ns: &str, before: &[PodObs]) -> Expectation {
    let target = Sidecar::of_spec(&spec["containers"]);
    let ns = ns_selected(spec, pods_ns);
    let us = &spec["updateStrategy"];
    let rolling = us["type"] != "NotUpdate" && us["paused"] != true;
    let injection_paused = spec["injectionStrategy"]["paused"] == true;
    let mut e = Expectation {
        pods: BTreeMap::new(),
        upgrades: 0,
        target: target.clone(),
        selected: BTreeSet::new(),
        counted: BTreeSet::new(),
        max_unavailable: 0,
    };
    let mut waiting = 0;
    for p in before {
        let selected = ns && tier_selected(spec, &p.tier);
        let candidate = selected && update_selected(spec, &p.tier);
        let want = match (&p.sidecar, candidate) {
            (Some(s), true) if s != &target && s.without_image() == target.without_image() => {
                waiting += 1;
                Want::SameOrTarget(s.clone())
            }
            (s, _) => Want::Same(s.clone()),
        };
        if selected {
            e.selected.insert(p.name.clone());
            if p.sidecar.is_some() || !injection_paused {
                e.counted.insert(p.name.clone());
            }
        }
        e.pods.insert(p.name.clone(), want);
    }
    let matched = before
        .iter()
        .filter(|p| e.selected.contains(&p.name) && p.sidecar.is_some())
        .count();
    let held = partition(&us["partition"], matched);
    e.upgrades = if rolling {
        waiting - held.min(waiting)
    } else {
        0
    };
    e.max_unavailable = max_unavailable(&us["maxUnavailable"], matched);
    e
}

/// A pod's priority under `updateStrategy.priorityStrategy.weightPriority`: the sum of the
/// weights of the terms whose `matchSelector` selects a pod of `tier`. `None` when the order is
/// not the priority's alone: no weight terms, or a `scatterStrategy` (applied after the
/// priority, it may move a pod of lower priority forward).
pub fn weight_priority(spec: &Value, tier: &str) -> Option<i64> {
    let us = &spec["updateStrategy"];
    let terms = us["priorityStrategy"]["weightPriority"].as_array()?;
    if terms.is_empty()
        || us["scatterStrategy"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
    {
        return None;
    }
    Some(
        terms
            .iter()
            .filter(|t| selects_tier(&t["matchSelector"], tier))
            .map(|t| t["weight"].as_i64().unwrap_or(0))
            .sum(),
    )
}

/// The order of a step's upgrades against the priority of `spec` ([`weight_priority`]):
/// `started` the pods in the order their sidecar's image changed (the API server's order, as a
/// watch delivers it), `tiers` each pod's tier, `kept` the candidates left on the old sidecar at
/// the end, `max_unavailable` the batch size. A pod of higher priority must start within the
/// batch of any pod of lower priority started before it (fewer than `max_unavailable` places
/// later: the operator picks the highest first, up to `max_unavailable` at a time), and a pod
/// kept back by `partition` must not have a higher priority than one upgraded.
pub fn order(
    spec: &Value,
    started: &[String],
    tiers: &BTreeMap<String, String>,
    kept: &[String],
    max_unavailable: usize,
) -> Vec<String> {
    let prio = |p: &String| tiers.get(p).and_then(|t| weight_priority(spec, t));
    if started.iter().chain(kept).any(|p| prio(p).is_none()) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, early) in started.iter().enumerate() {
        for (j, late) in started.iter().enumerate().skip(i + max_unavailable.max(1)) {
            if prio(late) > prio(early) {
                out.push(format!(
                    "{late} (priority {:?}) started its upgrade {} places after {early} (priority {:?}), \
                     beyond a batch of maxUnavailable {max_unavailable}: the higher priority goes first",
                    prio(late).unwrap_or(0),
                    j - i,
                    prio(early).unwrap_or(0)
                ));
            }
        }
    }
    for k in kept {
        if let Some(u) = started.iter().find(|u| prio(u) < prio(k)) {
            out.push(format!(
                "{k} (priority {:?}) was kept back by partition while {u} (priority {:?}) was upgraded: \
                 partition keeps the lowest priority back",
                prio(k).unwrap_or(0),
                prio(u).unwrap_or(0)
            ));
        }
    }
    out
}

/// How `now` differs from the expectation (nothing: it holds).
pub fn differences(e: &Expectation, now: &[PodObs]) -> Vec<String> {
    let mut out = Vec::new();
    let mut upgraded = 0;
    let now_by: BTreeMap<&str, &PodObs> = now.iter().map(|p| (p.name.as_str(), p)).collect();
    for (name, want) in &e.pods {
        let Some(p) = now_by.get(name.as_str()) else {
            out.push(format!("{name} is gone"));
            continue;
        };
        match want {
            Want::Same(s) if &p.sidecar != s => out.push(format!(
                "{name}: want {s:?} (as it was), is {:?}",
                p.sidecar
            )),
            Want::SameOrTarget(_) if p.sidecar.as_ref() == Some(&e.target) => upgraded += 1,
            Want::SameOrTarget(s) if p.sidecar.as_ref() != Some(s) => out.push(format!(
                "{name}: want {s:?} (as it was) or {:?} (upgraded), is {:?}",
                e.target, p.sidecar
            )),
            _ => {}
        }
    }
    if upgraded != e.upgrades {
        out.push(format!(
            "{upgraded} pods upgraded to {:?}, want {}",
            e.target, e.upgrades
        ));
    }
    out
}

/// The sidecar a new pod of `tier` gets (`None`: none), `history` the accepted specs'
/// (customVersion, containers).
pub fn new_pod(
    spec: &Value,
    history: &[(Value, Value)],
    pods_ns: &str,
    tier: &str,
) -> Option<Sidecar> {
    if !ns_selected(spec, pods_ns)
        || !tier_selected(spec, tier)
        || spec["injectionStrategy"]["paused"] == true
    {
        return None;
    }
    let pin = &spec["injectionStrategy"]["revision"]["customVersion"];
    match pin.as_str().and_then(|cv| pinned_containers(history, cv)) {
        Some(c) => Some(Sidecar::of_spec(&c)),
        None => Some(Sidecar::of_spec(&spec["containers"])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obs(name: &str, tier: &str, image: u32, mode: &str) -> PodObs {
        PodObs {
            name: name.into(),
            tier: tier.into(),
            sidecar: Some(Sidecar {
                image: format!("i:{image}"),
                mode: Some(mode.into()),
                cpu: Some("10m".into()),
            }),
            ready: true,
        }
    }

    fn spec(image: u32, mode: &str, strategy: Value) -> Value {
        json!({"containers": [{"name": "proxy", "image": format!("i:{image}"),
               "env": [{"name": "MODE", "value": mode}], "resources": {"requests": {"cpu": "10m"}}}],
               "selector": {"matchLabels": {"e2e-app": "x"},
                            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]},
               "updateStrategy": strategy})
    }

    #[test]
    fn partition_and_pause_and_immutable_fields() {
        let pods = [
            obs("p0", "a", 1, "a"),
            obs("p1", "a", 1, "a"),
            obs("p2", "a", 1, "b"),
            obs("p3", "b", 1, "a"),
            obs("p4", "a", 1, "a"),
        ];
        let e = expect(&spec(2, "a", json!({"partition": 1})), "ns", &pods);
        assert_eq!(e.upgrades, 2, "three upgradable, one held");
        assert_eq!(
            e.pods["p2"],
            Want::Same(pods[2].sidecar.clone()),
            "env differs"
        );
        assert_eq!(
            e.pods["p3"],
            Want::Same(pods[3].sidecar.clone()),
            "not selected"
        );
        assert!(!e.selected.contains("p3"));
        let paused = expect(&spec(2, "a", json!({"paused": true})), "ns", &pods);
        assert_eq!(paused.upgrades, 0);
        let mut now = pods.to_vec();
        now[0].sidecar.as_mut().unwrap().image = "i:2".into();
        assert_eq!(
            differences(&e, &now),
            [
                "1 pods upgraded to Sidecar { image: \"i:2\", mode: Some(\"a\"), cpu: Some(\"10m\") }, want 2"
            ]
        );
        now[1].sidecar.as_mut().unwrap().image = "i:2".into();
        assert!(differences(&e, &now).is_empty());
    }

    /// Pods of tiers a, b, a, b, a on image 1, all selected (the selector has no tier
    /// requirement); the spec's image 2 and `updateStrategy` of `strategy`.
    fn five() -> Vec<PodObs> {
        (0..5)
            .map(|i| obs(&format!("p{i}"), ["a", "b"][i % 2], 1, "a"))
            .collect()
    }

    fn all_tiers(strategy: Value) -> Value {
        let mut s = spec(2, "a", strategy);
        s["selector"] = json!({"matchLabels": {"e2e-app": "x"}});
        s
    }

    #[test]
    fn only_the_pods_the_update_selector_selects_are_upgraded() {
        let sel = |op: &str, values: Value| -> Value {
            let mut e = json!({"key": "tier", "operator": op});
            if !values.is_null() {
                e["values"] = values;
            }
            json!({"matchExpressions": [e]})
        };
        let (in_a, not_in_a, exists) = (
            sel("In", json!(["a"])),
            sel("NotIn", json!(["a"])),
            sel("Exists", Value::Null),
        );
        // (update selector, the rest of updateStrategy, upgrades, the pods kept as they were)
        let table: Vec<(Value, Value, usize, Vec<&str>)> = vec![
            (Value::Null, json!({}), 5, vec![]),
            (in_a.clone(), json!({}), 3, vec!["p1", "p3"]),
            (not_in_a.clone(), json!({}), 2, vec!["p0", "p2", "p4"]),
            (exists.clone(), json!({}), 5, vec![]),
            (
                json!({"matchLabels": {"tier": "b"}}),
                json!({}),
                2,
                vec!["p0", "p2", "p4"],
            ),
            // partition against all 5 matched pods, subtracted from the candidates: 1 of 3
            (in_a.clone(), json!({"partition": 1}), 2, vec!["p1", "p3"]),
            // 50 % of 5 is 3 (of the 3 candidates it would be 2, leaving one upgrade)
            (
                in_a.clone(),
                json!({"partition": "50%"}),
                0,
                vec!["p1", "p3"],
            ),
            // 40 % of 5 is 2: both candidates stay (of the 2 candidates it would be 1)
            (
                not_in_a.clone(),
                json!({"partition": "40%"}),
                0,
                vec!["p0", "p2", "p4"],
            ),
            (in_a.clone(), json!({"paused": true}), 0, vec!["p1", "p3"]),
            (
                in_a.clone(),
                json!({"type": "NotUpdate"}),
                0,
                vec!["p1", "p3"],
            ),
        ];
        let pods = five();
        for (sel, mut strategy, upgrades, same) in table {
            let case = format!("selector {sel}, strategy {strategy}");
            if !sel.is_null() {
                strategy["selector"] = sel;
            }
            let e = expect(&all_tiers(strategy), "ns", &pods);
            assert_eq!(e.upgrades, upgrades, "{case}");
            for p in &pods {
                let want = match same.contains(&p.name.as_str()) {
                    true => Want::Same(p.sidecar.clone()),
                    false => Want::SameOrTarget(p.sidecar.clone().unwrap()),
                };
                assert_eq!(e.pods[&p.name], want, "{case}: {}", p.name);
            }
            // The update selector narrows the upgrades, not what the SidecarSet selects.
            assert_eq!(e.selected.len(), 5, "{case}");
            assert_eq!(e.max_unavailable, 1, "{case}");
        }
        // A pod outside the update selector upgraded by mistake is reported.
        let e = expect(&all_tiers(json!({"selector": in_a})), "ns", &pods);
        let mut now = pods.clone();
        for p in &mut now {
            p.sidecar.as_mut().unwrap().image = "i:2".into();
        }
        let d = differences(&e, &now);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].starts_with("p1: want") && d[1].starts_with("p3: want"),
            "{d:?}"
        );
    }

    #[test]
    fn priority_and_scatter_change_no_end_state() {
        let pods = five();
        for strategy in [json!({}), json!({"partition": 2}), json!({"paused": true})] {
            let base = expect(&all_tiers(strategy.clone()), "ns", &pods);
            for (field, v) in [
                (
                    "priorityStrategy",
                    json!({"weightPriority": [{"weight": 50, "matchSelector": {"matchLabels": {"tier": "a"}}}]}),
                ),
                (
                    "priorityStrategy",
                    json!({"orderPriority": [{"orderedKey": "tier"}]}),
                ),
                ("scatterStrategy", json!([{"key": "tier", "value": "a"}])),
                ("scatterStrategy", json!([{"key": "tier", "value": "*"}])),
            ] {
                let mut s = strategy.clone();
                s[field] = v.clone();
                assert_eq!(
                    expect(&all_tiers(s), "ns", &pods),
                    base,
                    "{strategy} {field} {v}"
                );
            }
        }
    }

    #[test]
    fn the_upgrades_follow_the_weight_priority() {
        let b_first = json!({"weightPriority": [
            {"weight": 100, "matchSelector": {"matchLabels": {"tier": "b"}}},
            {"weight": 0, "matchSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}}]});
        let a_first = json!({"weightPriority": [{"weight": 50, "matchSelector": {"matchLabels": {"tier": "a"}}}]});
        let tiers: BTreeMap<String, String> = [("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")]
            .into_iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect();
        let v = |l: &[&str]| l.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // (priority, scatter, started, kept, maxUnavailable, violations)
        let table = [
            (
                b_first.clone(),
                None,
                v(&["b1", "b2", "a1", "a2"]),
                v(&[]),
                1,
                0,
            ),
            (
                b_first.clone(),
                None,
                v(&["b2", "b1", "a2", "a1"]),
                v(&[]),
                1,
                0,
            ),
            // a2 before both b: each b starts a place or more after it at batch 1
            (
                b_first.clone(),
                None,
                v(&["a2", "b1", "b2", "a1"]),
                v(&[]),
                1,
                2,
            ),
            (
                b_first.clone(),
                None,
                v(&["b1", "a1", "b2", "a2"]),
                v(&[]),
                1,
                1,
            ),
            // in one batch of 2 the order within the batch is free
            (
                b_first.clone(),
                None,
                v(&["b1", "a1", "b2", "a2"]),
                v(&[]),
                2,
                0,
            ),
            (
                b_first.clone(),
                None,
                v(&["a1", "a2", "b1", "b2"]),
                v(&[]),
                2,
                3,
            ),
            (
                a_first.clone(),
                None,
                v(&["a1", "a2", "b1", "b2"]),
                v(&[]),
                1,
                0,
            ),
            (
                a_first.clone(),
                None,
                v(&["b1", "a1", "a2", "b2"]),
                v(&[]),
                1,
                2,
            ),
            // partition keeps the lowest back
            (
                b_first.clone(),
                None,
                v(&["b1", "b2"]),
                v(&["a1", "a2"]),
                1,
                0,
            ),
            (
                b_first.clone(),
                None,
                v(&["b1", "a1"]),
                v(&["b2", "a2"]),
                1,
                1,
            ),
            (a_first.clone(), None, v(&["a1"]), v(&["a2", "b1"]), 1, 0),
            // equal priorities, no priority, or a scatter after it: no order to check
            (a_first.clone(), None, v(&["b2", "b1"]), v(&[]), 1, 0),
            (
                json!(null),
                None,
                v(&["a1", "b1", "a2", "b2"]),
                v(&["b2"]),
                1,
                0,
            ),
            (
                json!({"orderPriority": [{"orderedKey": "tier"}]}),
                None,
                v(&["a1", "b1"]),
                v(&[]),
                1,
                0,
            ),
            (
                b_first.clone(),
                Some(json!([{"key": "tier", "value": "a"}])),
                v(&["a1", "b1", "a2", "b2"]),
                v(&[]),
                1,
                0,
            ),
        ];
        for (i, (priority, scatter, started, kept, max, want)) in table.into_iter().enumerate() {
            let mut us = json!({"priorityStrategy": priority});
            if let Some(s) = scatter {
                us["scatterStrategy"] = s;
            }
            let got = order(&json!({"updateStrategy": us}), &started, &tiers, &kept, max);
            assert_eq!(
                got.len(),
                want,
                "row {i}: {started:?} kept {kept:?}: {got:?}"
            );
        }
    }

    #[test]
    fn openkruise_rounding() {
        assert_eq!(partition(&json!("50%"), 3), 2);
        assert_eq!(partition(&json!("90%"), 4), 3);
        assert_eq!(partition(&json!("100%"), 4), 4);
        assert_eq!(partition(&json!(7), 4), 4);
        assert_eq!(max_unavailable(&json!("50%"), 3), 2);
        assert_eq!(max_unavailable(&json!("1%"), 3), 1);
        assert_eq!(max_unavailable(&Value::Null, 3), 1);
    }
}
