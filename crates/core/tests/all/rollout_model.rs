//! The rollout planner checked over every reachable state of a small model.
//!
//! Each pod slot of the model is empty or holds a pod: on the old or the current sidecars
//! (`updated`), with the kubelet having acted on its spec or not (`consistent`), ready or not,
//! and `taken_down`: the rollout upgraded it while it was ready and it has not been ready and
//! consistent since. Which slots can be upgraded in place, are selected by the update selector,
//! and their labels (priority and scatter) are fixed by the configuration.
//!
//! From the steady state (every pod old, consistent and ready) a breadth-first search takes
//! every transition:
//! * the planner, the real [`rollout::plan_holding`] on the pods' views, with no pod held or
//!   any one pod held (a refused write whose retry is not due), its upgrades written in full or
//!   only in part (the other writes failed);
//! * the kubelet acting on an upgraded pod; a pod turning ready, or not ready;
//! * a pod deleted; a pod created in an empty slot (injected with the current sidecars, not yet
//!   started).
//!
//! In every reachable state and on every planner step it checks:
//! * `maxUnavailable`: the pods the rollout took down never exceed it (int values, in every
//!   state); a planner step never takes the count above it nor raises it when it is there
//!   already (every value, percentages against the live pod count); with the strict rules the
//!   same holds for every pod that is not ready or is updating;
//! * `partition`: with OpenKruise's rules a step upgrades at most the candidates beyond
//!   `partition`; with the strict rules a step never leaves more than `matched − partition`
//!   pods updated (unless it was so already);
//! * a step upgrades only candidates (matched, old, upgradable, selected, consistent), none
//!   held, none twice; with `weightPriority` (and no scatter) a ready pod is upgraded only when
//!   every candidate of higher priority is too;
//! * liveness: from every reachable state, with no more faults (every write succeeds, the
//!   kubelet acts, pods become ready, none is deleted), the planner upgrades every eligible pod
//!   but those `partition` keeps, within `matched` rounds.
//!
//! The default run, part of `cargo test`, takes every value of each dimension of the
//! configuration (`maxUnavailable`, `partition`, rules, priority and scatter, which pods are
//! eligible) with up to three pods, not every product; `SSO_MODEL_FULL=1` (or
//! `cargo test -- --ignored rollout_model`) every configuration up to three pods and a
//! thirteenth of them with four.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;
use sidecarset_core::api::SidecarSetUpdateStrategy;
use sidecarset_core::rollout::{self, Plan, PodView, Rules};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Pod {
    updated: bool,
    consistent: bool,
    ready: bool,
    taken_down: bool,
}

impl Pod {
    /// Ready and consistent again: no longer down because of the rollout.
    fn settle(mut self) -> Pod {
        if self.ready && self.consistent {
            self.taken_down = false;
        }
        self
    }
}

impl fmt::Display for Pod {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let b = |x: bool, c: char| if x { c } else { '-' };
        write!(
            f,
            "{}{}{}{}",
            if self.updated { 'N' } else { 'o' },
            b(self.consistent, 'c'),
            b(self.ready, 'r'),
            b(self.taken_down, 'D')
        )
    }
}

type State = Vec<Option<Pod>>;

fn show(s: &State) -> String {
    s.iter()
        .enumerate()
        .map(|(i, p)| match p {
            Some(p) => format!("p{i}:{p}"),
            None => format!("p{i}:gone"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How the slots are ordered for the rollout.
#[derive(Clone, Copy, Debug)]
enum Order {
    Default,
    /// `weightPriority`: pods labelled `tier: gold` (odd slots) weigh 10.
    Weight,
    /// `scatterStrategy` on `zone: a` (every other slot).
    Scatter,
    Both,
}

/// Which slots cannot be upgraded in place, or are not selected.
#[derive(Clone, Copy, Debug)]
enum Shape {
    AllEligible,
    LastNotUpgradable,
    FirstNotSelected,
}

#[derive(Clone, Debug)]
struct Config {
    n: usize,
    rules: Rules,
    max_unavailable: Option<IntOrString>,
    partition: Option<IntOrString>,
    order: Order,
    shape: Shape,
}

impl Config {
    fn strategy(&self) -> SidecarSetUpdateStrategy {
        let mut s = json!({});
        if let Some(m) = &self.max_unavailable {
            s["maxUnavailable"] = serde_json::to_value(m).unwrap();
        }
        if let Some(p) = &self.partition {
            s["partition"] = serde_json::to_value(p).unwrap();
        }
        if matches!(self.order, Order::Weight | Order::Both) {
            s["priorityStrategy"] = json!({"weightPriority": [
                {"weight": 10, "matchSelector": {"matchLabels": {"tier": "gold"}}}
            ]});
        }
        if matches!(self.order, Order::Scatter | Order::Both) {
            s["scatterStrategy"] = json!([{"key": "zone", "value": "a"}]);
        }
        serde_json::from_value(s).unwrap()
    }

    fn upgradable(&self, i: usize) -> bool {
        !(matches!(self.shape, Shape::LastNotUpgradable) && i + 1 == self.n && self.n > 1)
    }

    fn selected(&self, i: usize) -> bool {
        !(matches!(self.shape, Shape::FirstNotSelected) && i == 0 && self.n > 1)
    }

    fn gold(i: usize) -> bool {
        i % 2 == 1
    }

    fn view(&self, i: usize, p: &Pod) -> PodView {
        let mut labels = BTreeMap::new();
        labels.insert("zone".to_string(), ["a", "b"][i % 2].to_string());
        if Config::gold(i) {
            labels.insert("tier".to_string(), "gold".to_string());
        }
        PodView {
            key: key(i),
            active: true,
            injected: true,
            updated: p.updated,
            upgradable: p.updated || self.upgradable(i),
            consistent: p.consistent,
            ready: p.ready,
            matches_update_selector: self.selected(i),
            assigned: true,
            phase_rank: 2,
            ready_since: None,
            restarts: 0,
            created: i64::try_from(i).unwrap(),
            labels,
            reset: false,
            // Resize refusals (in-place resize) are not in this model.
            resize_refused: None,
        }
    }

    fn views(&self, s: &State) -> Vec<PodView> {
        s.iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_ref().map(|p| self.view(i, p)))
            .collect()
    }

    /// Could be upgraded now, held aside (the model's own reading of the rules).
    fn candidate(&self, i: usize, p: &Pod) -> bool {
        !p.updated && self.upgradable(i) && self.selected(i) && p.consistent
    }
}

fn key(i: usize) -> String {
    format!("ns/p{i}")
}

fn slot(k: &str) -> usize {
    k.strip_prefix("ns/p").unwrap().parse().unwrap()
}

fn pct(v: &str) -> i64 {
    v.strip_suffix('%').unwrap().parse().unwrap()
}

/// `maxUnavailable` against `total` pods, as the API documents it (default 1; a percentage
/// rounds up; above zero means at least one).
fn max_unavailable(c: &Config, total: i64) -> i64 {
    match &c.max_unavailable {
        None => 1,
        Some(IntOrString::Int(i)) => i64::from(*i),
        Some(IntOrString::String(s)) => {
            let n = (pct(s) * total + 99) / 100;
            if pct(s) > 0 { n.max(1) } else { n }
        }
    }
}

/// `partition` against `total` pods (OpenKruise's `CalculatePartitionReplicas`).
fn partition(c: &Config, total: i64) -> i64 {
    match &c.partition {
        None => 0,
        Some(IntOrString::Int(i)) => i64::from(*i).min(total),
        Some(IntOrString::String(s)) => {
            let n = ((pct(s) * total + 99) / 100).min(total);
            if pct(s) < 100 && n == total && total > 1 {
                n - 1
            } else {
                n
            }
        }
    }
}

/// A violated property, with the state and step it was seen at.
type Failure = String;

fn count(s: &State, f: impl Fn(&Pod) -> bool) -> i64 {
    i64::try_from(s.iter().flatten().filter(|p| f(p)).count()).unwrap()
}

/// `s` with the pods of `keys` upgraded (written; not yet acted on by the kubelet).
fn upgraded(s: &State, keys: &[&String]) -> State {
    let mut next = s.clone();
    for k in keys {
        let p = next[slot(k)].as_mut().unwrap();
        p.taken_down = p.ready;
        p.updated = true;
        p.consistent = false;
    }
    next
}

fn plan_of(c: &Config, s: &State, held: &BTreeSet<String>) -> Result<Plan, Failure> {
    let strategy = c.strategy();
    rollout::plan_holding(&strategy, &c.views(s), c.rules, held).map_err(|e| format!("error {e}"))
}

/// The properties of one planner step from `s` holding `held`.
fn check_step(c: &Config, s: &State, held: &BTreeSet<String>, plan: &Plan) -> Result<(), Failure> {
    let total = count(s, |_| true);
    let m = max_unavailable(c, total);
    let p = partition(c, total);
    if i64::from(plan.max_unavailable) != m || i64::from(plan.partition) != p {
        return Err(format!(
            "resolved maxUnavailable {} partition {}, want {m} and {p}",
            plan.max_unavailable, plan.partition
        ));
    }
    let mut seen = BTreeSet::new();
    for k in &plan.upgrade {
        let i = slot(k);
        if !seen.insert(k) || held.contains(k) || !c.candidate(i, s[i].as_ref().unwrap()) {
            return Err(format!("{k} upgraded: not a candidate, held, or twice"));
        }
    }
    let keys: Vec<&String> = plan.upgrade.iter().collect();
    let after = upgraded(s, &keys);
    let down = |s: &State| count(s, |p| p.taken_down);
    if down(&after) > m.max(down(s)) {
        return Err(format!(
            "maxUnavailable {m}: {} pods taken down after the step, {} before",
            down(&after),
            down(s)
        ));
    }
    let cands = i64::try_from(
        s.iter()
            .enumerate()
            .filter(|(i, x)| x.is_some_and(|x| c.candidate(*i, &x)) && !held.contains(&key(*i)))
            .count(),
    )
    .unwrap();
    let n_up = i64::try_from(plan.upgrade.len()).unwrap();
    match c.rules {
        Rules::OpenKruise => {
            if n_up > (cands - p).max(0) {
                return Err(format!(
                    "partition {p}: {n_up} of {cands} candidates upgraded"
                ));
            }
        }
        Rules::Strict => {
            let unavailable = |s: &State| count(s, |x| !x.ready || (x.updated && !x.consistent));
            if unavailable(&after) > m.max(unavailable(s)) {
                return Err(format!(
                    "strict maxUnavailable {m}: {} unavailable after, {} before",
                    unavailable(&after),
                    unavailable(s)
                ));
            }
            let updated = |s: &State| count(s, |x| x.updated);
            if updated(&after) > (total - p).max(updated(s)) {
                return Err(format!(
                    "strict partition {p}: {} of {total} updated after, {} before",
                    updated(&after),
                    updated(s)
                ));
            }
        }
    }
    if matches!(c.order, Order::Weight) {
        for b in plan.upgrade.iter().map(|k| slot(k)) {
            let ready_b = s[b].unwrap().ready;
            let skipped = (0..c.n).find(|&a| {
                Config::gold(a)
                    && !Config::gold(b)
                    && s[a].is_some_and(|x| c.candidate(a, &x))
                    && !held.contains(&key(a))
                    && !plan.upgrade.contains(&key(a))
            });
            if let (true, Some(a)) = (ready_b, skipped) {
                return Err(format!("priority: p{b} upgraded before p{a}"));
            }
        }
    }
    Ok(())
}

/// Properties of every state.
fn check_state(c: &Config, s: &State) -> Result<(), Failure> {
    if let Some(IntOrString::Int(m)) = &c.max_unavailable {
        let down = count(s, |p| p.taken_down);
        if down > i64::from(*m).max(0) {
            return Err(format!("maxUnavailable {m}: {down} pods taken down"));
        }
    }
    Ok(())
}

/// Liveness: from `s`, with no fault, the rollout reaches its end within `matched + 1` rounds
/// (a round: the planner's step written in full, then the kubelet and readiness catch up).
fn check_converges(c: &Config, s: &State) -> Result<(), Failure> {
    let settle = |s: &State| -> State {
        s.iter()
            .map(|p| {
                p.map(|mut p| {
                    p.consistent = true;
                    p.ready = true;
                    p.settle()
                })
            })
            .collect()
    };
    let mut cur = settle(s);
    let total = count(&cur, |_| true);
    for _ in 0..=total {
        let plan = plan_of(c, &cur, &BTreeSet::new())?;
        if plan.upgrade.is_empty() {
            break;
        }
        cur = settle(&upgraded(&cur, &plan.upgrade.iter().collect::<Vec<_>>()));
    }
    let eligible_old = i64::try_from(
        cur.iter()
            .enumerate()
            .filter(|(i, p)| p.is_some_and(|p| !p.updated && c.upgradable(*i) && c.selected(*i)))
            .count(),
    )
    .unwrap();
    let p = partition(c, total);
    let old = count(&cur, |x| !x.updated);
    let m = max_unavailable(c, total);
    let stuck = match c.rules {
        Rules::OpenKruise => eligible_old > p,
        Rules::Strict => eligible_old > 0 && old > p,
    };
    if stuck && m > 0 {
        return Err(format!(
            "no convergence: {eligible_old} eligible pods still old (partition {p}) at {}",
            show(&cur)
        ));
    }
    let plan = plan_of(c, &cur, &BTreeSet::new())?;
    let all_eligible = matches!(c.shape, Shape::AllEligible) || c.n == 1;
    if !stuck && !plan.upgrade.is_empty() {
        return Err(format!("upgrades {:?} past the end", plan.upgrade));
    }
    if all_eligible && p == 0 && m > 0 && !plan.done {
        return Err(format!("not done at {}", show(&cur)));
    }
    Ok(())
}

/// Every subset of `keys` (the writes that succeeded), the full one first.
fn subsets(keys: &[String]) -> Vec<Vec<&String>> {
    let n = keys.len();
    (0..1usize << n)
        .rev()
        .map(|mask| {
            (0..n)
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| &keys[i])
                .collect()
        })
        .collect()
}

/// The states one step from `s`, each with what the step was.
fn successors(c: &Config, s: &State) -> Result<Vec<(String, State)>, Failure> {
    let mut out = Vec::new();
    let mut helds = vec![BTreeSet::new()];
    helds.extend(
        (0..c.n)
            .filter(|&i| s[i].is_some())
            .map(|i| BTreeSet::from([key(i)])),
    );
    for held in helds {
        let plan = plan_of(c, s, &held)?;
        check_step(c, s, &held, &plan).map_err(|e| format!("plan holding {held:?}: {e}"))?;
        for keys in subsets(&plan.upgrade) {
            if !keys.is_empty() {
                out.push((
                    format!("plan (held {held:?}) writes {keys:?}"),
                    upgraded(s, &keys),
                ));
            }
        }
    }
    for i in 0..c.n {
        let mut set = |label: String, p: Option<Pod>| {
            let mut next = s.clone();
            next[i] = p.map(Pod::settle);
            out.push((label, next));
        };
        match s[i] {
            None => set(
                format!("p{i} created"),
                Some(Pod {
                    updated: true,
                    consistent: false,
                    ready: false,
                    taken_down: false,
                }),
            ),
            Some(p) => {
                if !p.consistent {
                    set(
                        format!("kubelet acts on p{i}"),
                        Some(Pod {
                            consistent: true,
                            ..p
                        }),
                    );
                }
                set(
                    format!("p{i} ready={}", !p.ready),
                    Some(Pod {
                        ready: !p.ready,
                        ..p
                    }),
                );
                set(format!("p{i} deleted"), None);
            }
        }
    }
    Ok(out)
}

/// The trace from the initial state to `s`.
fn trace(parents: &HashMap<State, Option<(State, String)>>, s: &State) -> String {
    let mut steps = vec![show(s)];
    let mut cur = s.clone();
    while let Some(Some((prev, label))) = parents.get(&cur) {
        steps.push(format!("{}  --{label}-->", show(prev)));
        cur = prev.clone();
    }
    steps.reverse();
    steps.join("\n  ")
}

/// Explores every state reachable from the steady state of `c`; returns how many there are.
fn explore(c: &Config) -> Result<usize, String> {
    let init: State = vec![
        Some(Pod {
            updated: false,
            consistent: true,
            ready: true,
            taken_down: false,
        });
        c.n
    ];
    let mut parents: HashMap<State, Option<(State, String)>> = HashMap::new();
    parents.insert(init.clone(), None);
    let mut queue = VecDeque::from([init]);
    while let Some(s) = queue.pop_front() {
        let fail = |e: Failure, parents: &HashMap<_, _>| {
            format!("{c:?}\n{e}\ntrace:\n  {}", trace(parents, &s))
        };
        let checked = check_state(c, &s)
            .and_then(|()| check_converges(c, &s))
            .and_then(|()| successors(c, &s));
        let next = checked.map_err(|e| fail(e, &parents))?;
        for (label, n) in next {
            if !parents.contains_key(&n) {
                parents.insert(n.clone(), Some((s.clone(), label)));
                queue.push_back(n);
            }
        }
    }
    Ok(parents.len())
}

/// The configurations with `pods` pods: every one, or (`every` > 1) every `every`-th of them in
/// the product's order, which with 7, 11 or 13 still takes each value of each dimension.
fn configs(pods: usize, every: usize) -> Vec<Config> {
    let int = |i| Some(IntOrString::Int(i));
    let s = |v: &str| Some(IntOrString::String(v.to_string()));
    let mus = [None, int(0), int(1), int(2), s("0%"), s("34%"), s("50%")];
    let parts = [None, int(1), int(2), s("50%"), s("90%")];
    let orders = [Order::Default, Order::Weight, Order::Scatter, Order::Both];
    let shapes = [
        Shape::AllEligible,
        Shape::LastNotUpgradable,
        Shape::FirstNotSelected,
    ];
    let mut out = Vec::new();
    for n in [pods] {
        for rules in [Rules::OpenKruise, Rules::Strict] {
            for (a, mu) in mus.iter().enumerate() {
                for (b, part) in parts.iter().enumerate() {
                    for (d, order) in orders.iter().enumerate() {
                        for (e, shape) in shapes.iter().enumerate() {
                            if (a * 60 + b * 12 + d * 3 + e) % every != 0 {
                                continue;
                            }
                            out.push(Config {
                                n,
                                rules,
                                max_unavailable: mu.clone(),
                                partition: part.clone(),
                                order: *order,
                                shape: *shape,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// Explores the configurations of `runs` (pods, see [`configs`]).
fn run(runs: &[(usize, usize)]) {
    let start = std::time::Instant::now();
    let (mut states, mut biggest, mut count) = (0, 0, 0);
    for &(pods, every) in runs {
        let before = states;
        for c in configs(pods, every) {
            let n = explore(&c).unwrap_or_else(|e| panic!("{e}"));
            states += n;
            biggest = biggest.max(n);
            count += 1;
        }
        eprintln!(
            "rollout model: {pods} pods, every {every}: {} states ({:?} so far)",
            states - before,
            start.elapsed()
        );
    }
    eprintln!(
        "rollout model: {count} configurations, {states} states (largest {biggest}) in {:?}",
        start.elapsed()
    );
}

/// Every configuration up to three pods, a thirteenth of them with four.
const FULL: &[(usize, usize)] = &[(1, 1), (2, 1), (3, 1), (4, 13)];

#[test]
fn every_reachable_rollout_state_keeps_the_invariants() {
    if std::env::var_os("SSO_MODEL_FULL").is_some() {
        run(FULL);
    } else {
        run(&[(1, 1), (2, 7), (3, 13)]);
    }
}

#[test]
#[ignore = "a minute: every configuration up to three pods, some with four (SSO_MODEL_FULL=1 runs it in the default test)"]
fn every_reachable_rollout_state_keeps_the_invariants_full() {
    run(FULL);
}
