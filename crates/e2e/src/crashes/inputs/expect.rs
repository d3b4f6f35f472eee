//! What the pods must become after a step, computed from the spec and the pods as they were,
//! with OpenKruise's rules restated here (not the operator's planner):
//!
//! * a pod is selected when the namespaceSelector (absent, or the pods' namespace by name) and
//!   the selector (its `tier` requirements; the run's `e2e-app` label is always required)
//!   select it; a pod that is not is left alone;
//! * a selected pod carrying the sidecar is *updated* when its sidecar is the spec's (image, env,
//!   resources), *upgradable* when only the image differs, and left alone otherwise (a change of
//!   env or resources is not upgraded in place: it reaches new pods only);
//! * with `updateStrategy.type: NotUpdate` or `paused: true` no pod is upgraded; otherwise all
//!   upgradable pods but `partition` of them are (an integer, or a percentage of the matched
//!   pods rounded up, below 100 % keeping one pod fewer than all when there are several:
//!   OpenKruise's `CalculatePartitionReplicas`); which ones stay is the operator's choice;
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
    spec["selector"]["matchExpressions"]
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

#[derive(Clone, Debug)]
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
        let want = match (&p.sidecar, selected) {
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
