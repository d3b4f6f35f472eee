use super::policy::same_second;
use super::*;
use crate::controller::slim::SlimPod;
use std::collections::BTreeMap;

fn pod(owner: Option<(&str, &str, bool)>, deleting: bool, created: &str) -> SlimPod {
    let mut v = serde_json::json!({"metadata": {"name": "p", "namespace": "a", "uid": "pod-uid",
            "creationTimestamp": created}});
    if let Some((api_version, kind, controller)) = owner {
        v["metadata"]["ownerReferences"] = serde_json::json!([{
            "apiVersion": api_version, "kind": kind, "name": "o", "uid": "owner-uid", "controller": controller
        }]);
    }
    if deleting {
        v["metadata"]["deletionTimestamp"] = serde_json::json!("2026-12-01T00:00:00Z");
    }
    serde_json::from_value(v).unwrap()
}

fn policy() -> Policy {
    Policy {
        per_minute: 2,
        per_hour: 3,
        owner_kinds: parse_owner_kinds(DEFAULT_OWNER_KINDS).unwrap(),
        namespace: "ops".into(),
    }
}

const T0: &str = "2026-12-01T10:00:00Z";
fn t(s: &str) -> i64 {
    s.parse::<jiff::Timestamp>().unwrap().as_second()
}

#[test]
fn only_allowed_owner_kinds_are_evicted() {
    let kinds = parse_owner_kinds(DEFAULT_OWNER_KINDS).unwrap();
    for (owner, deleting, want) in [
        (Some(("apps/v1", "ReplicaSet", true)), false, true),
        (Some(("apps/v1", "StatefulSet", true)), false, true),
        (Some(("apps/v1", "DaemonSet", true)), false, true),
        (
            Some(("apps.kruise.io/v1alpha1", "CloneSet", true)),
            false,
            true,
        ),
        (
            Some(("apps.kruise.io/v1beta1", "StatefulSet", true)),
            false,
            true,
        ),
        (
            Some(("apps.kruise.io/v1alpha1", "DaemonSet", true)),
            false,
            true,
        ),
        (Some(("batch/v1", "Job", true)), false, false),
        // Mirror pods, workflow engines, VMs: not recreated from a template by a kind we know.
        (Some(("v1", "Node", true)), false, false),
        (
            Some(("argoproj.io/v1alpha1", "Workflow", true)),
            false,
            false,
        ),
        (Some(("tekton.dev/v1", "TaskRun", true)), false, false),
        (
            Some(("kubevirt.io/v1", "VirtualMachineInstance", true)),
            false,
            false,
        ),
        (Some(("example.com/v1", "ReplicaSet", true)), false, false),
        (Some(("apps/v1", "ReplicaSet", false)), false, false),
        (None, false, false),
        (Some(("apps/v1", "ReplicaSet", true)), true, false),
    ] {
        assert_eq!(
            allowed_owner(&pod(owner, deleting, T0), &kinds).is_some(),
            want,
            "{owner:?} deleting={deleting}"
        );
    }
}

#[test]
fn owner_kinds_parse_and_bad_ones_name_the_flag() {
    assert_eq!(
        parse_owner_kinds("ReplicaSet.apps, Foo.example.com").unwrap(),
        vec![
            OwnerKind {
                kind: "ReplicaSet".into(),
                group: "apps".into()
            },
            OwnerKind {
                kind: "Foo".into(),
                group: "example.com".into()
            }
        ]
    );
    let e = parse_owner_kinds("ReplicaSet").unwrap_err();
    assert!(
        e.contains("--evict-owner-kinds") && e.contains("Kind.group"),
        "{e}"
    );
}

#[test]
fn the_opt_in_annotation() {
    for (v, want) in [
        (Some("true"), OptIn::New),
        (Some("all"), OptIn::All),
        (Some("false"), OptIn::Off),
        (Some("yes"), OptIn::Off),
        (None, OptIn::Off),
    ] {
        let mut a = BTreeMap::new();
        if let Some(v) = v {
            a.insert(ANNOTATION_EVICT.to_string(), v.to_string());
        }
        assert_eq!(opt_in(&a), want, "{v:?}");
    }
}

#[test]
fn prechecks_in_order() {
    let rs = Some(("apps/v1", "ReplicaSet", true));
    let since = t(T0);
    let state = |evictions: usize, open: bool| SidecarSetState {
        uid: "u".into(),
        generation: 1,
        since,
        evictions: (0..evictions)
            .map(|i| Evicted {
                at: since,
                pod: format!("a/x{i}"),
                owner: "other".into(),
                ..Default::default()
            })
            .collect(),
        open_circuits: if open {
            [("owner-uid".to_string(), "a/ReplicaSet/o".to_string())].into()
        } else {
            BTreeMap::new()
        },
    };
    let p = policy();
    let after = "2026-12-01T10:00:05Z";
    let before = "2026-12-01T09:59:59Z";
    for (opt, created, st, recent, want) in [
        (
            OptIn::Off,
            after,
            state(0, false),
            0,
            Err(Withheld::NotOptedIn),
        ),
        (
            OptIn::New,
            after,
            state(0, false),
            0,
            Ok("owner-uid".to_string()),
        ),
        (
            OptIn::New,
            before,
            state(0, false),
            0,
            Err(Withheld::OlderThanGeneration),
        ),
        (
            OptIn::All,
            before,
            state(0, false),
            0,
            Ok("owner-uid".to_string()),
        ),
        (
            OptIn::New,
            after,
            state(0, true),
            0,
            Err(Withheld::CircuitOpen),
        ),
        (OptIn::New, after, state(0, false), 2, Err(Withheld::Rate)),
        (OptIn::New, after, state(3, false), 0, Err(Withheld::Budget)),
        (
            OptIn::New,
            after,
            state(2, false),
            1,
            Ok("owner-uid".to_string()),
        ),
    ] {
        assert_eq!(
            precheck(&pod(rs, false, created), opt, &st, &p, recent),
            want,
            "{opt:?} created {created} evictions {} open {} recent {recent}",
            st.evictions.len(),
            !st.open_circuits.is_empty()
        );
    }
    let job = Some(("batch/v1", "Job", true));
    assert_eq!(
        precheck(&pod(job, false, after), OptIn::All, &state(0, false), &p, 0),
        Err(Withheld::OwnerNotAllowed)
    );
}

#[test]
fn a_new_generation_starts_over_but_keeps_the_hours_budget() {
    let s = SidecarSetState {
        uid: "u".into(),
        generation: 1,
        since: 100,
        evictions: vec![
            Evicted {
                at: 100,
                pod: "a/old".into(),
                owner: "o".into(),
                ..Default::default()
            },
            Evicted {
                at: 4000,
                pod: "a/new".into(),
                owner: "o".into(),
                ..Default::default()
            },
        ],
        open_circuits: [("o".to_string(), "a/ReplicaSet/o".to_string())].into(),
    };
    let same = s.clone().current("u", 1, 4100, 4100);
    assert_eq!(same.since, 100, "same generation: unchanged");
    assert_eq!(same.evictions.len(), 1, "older than an hour: dropped");
    assert_eq!(same.open_circuits.len(), 1);
    let next = s.clone().current("u", 2, 4100, 4100);
    assert_eq!((next.generation, next.since), (2, 4100));
    assert!(
        next.open_circuits.is_empty(),
        "a change closes the circuits"
    );
    assert_eq!(
        next.evictions.len(),
        1,
        "the budget is per hour, not per generation"
    );
    let other = s.current("u2", 1, 4100, 4100);
    assert_eq!(other.uid, "u2");
    assert!(
        other.evictions.is_empty(),
        "a recreated SidecarSet starts over"
    );
}

#[test]
fn a_replacement_that_comes_back_missing_is_recognised() {
    let rs = Some(("apps/v1", "ReplicaSet", true));
    let evicted = |at: &str, same_second: &[&str]| Evicted {
        at: t(at),
        pod: "a/evicted".into(),
        owner: "owner-uid".into(),
        same_second: same_second.iter().map(|u| u.to_string()).collect(),
        ..Default::default()
    };
    // (eviction, pod's owner uid, pod created, replacement?)
    for (e, owner, created, want) in [
        (evicted(T0, &[]), "owner-uid", "2026-12-01T10:00:03Z", true),
        (evicted(T0, &[]), "owner-uid", "2026-12-01T09:00:00Z", false),
        // Created in the eviction's second: a replacement unless it was already there.
        (evicted(T0, &[]), "owner-uid", T0, true),
        (evicted(T0, &["other-pod"]), "owner-uid", T0, true),
        (evicted(T0, &["pod-uid"]), "owner-uid", T0, false),
        // A sibling created when the pass began, evicted seconds later: no replacement (the
        // eviction's own time counts, not the pass's).
        (evicted("2026-12-01T10:00:06Z", &[]), "owner-uid", T0, false),
        (
            evicted(T0, &[]),
            "someone-else",
            "2026-12-01T10:00:03Z",
            false,
        ),
    ] {
        let mut e = e;
        if owner != "owner-uid" {
            e.owner = owner.into();
        }
        let state = SidecarSetState {
            evictions: vec![e.clone()],
            ..Default::default()
        };
        let got = came_back_missing(&pod(rs, false, created), &state);
        assert_eq!(
            got.is_some(),
            want,
            "eviction at {} (same second {:?}) by {}, pod created {created}",
            e.at,
            e.same_second,
            e.owner
        );
        if want {
            assert_eq!(got, Some(("owner-uid".into(), "a/ReplicaSet/o".into())));
        }
    }
}

/// A StatefulSet's pod comes back under the evicted pod's name (`db-0` evicted, `db-0`
/// recreated without the sidecars): the replacement is told by its uid, so the circuit opens
/// instead of evicting it again and again.
#[test]
fn a_statefulset_replacement_with_the_evicted_pods_name_is_recognised() {
    let sts = Some(("apps/v1", "StatefulSet", true));
    let record = |pod: &str, uid: &str| Evicted {
        at: t(T0),
        pod: pod.into(),
        uid: uid.into(),
        owner: "owner-uid".into(),
        ..Default::default()
    };
    // The pod: a/p, uid pod-uid, created 3 s after the eviction.
    for (e, want, why) in [
        (record("a/p", "old-uid"), true, "same name, another uid"),
        (record("a/p", "pod-uid"), false, "the evicted pod itself"),
        (record("a/q", "old-uid"), true, "another name and uid"),
        (record("a/p", ""), false, "a record without uid, same name"),
        (
            record("a/q", ""),
            true,
            "a record without uid, another name",
        ),
    ] {
        let state = SidecarSetState {
            evictions: vec![e],
            ..Default::default()
        };
        let got = came_back_missing(&pod(sts, false, "2026-12-01T10:00:03Z"), &state);
        assert_eq!(got.is_some(), want, "{why}");
        if want {
            assert_eq!(got, Some(("owner-uid".into(), "a/StatefulSet/o".into())));
        }
    }
    let e: Evicted =
        serde_json::from_str(r#"{"at": 5, "pod": "a/p", "uid": "u1", "owner": "o"}"#).unwrap();
    assert_eq!(e.uid, "u1");
    let old: Evicted = serde_json::from_str(r#"{"at": 5, "pod": "a/p", "owner": "o"}"#).unwrap();
    assert!(!serde_json::to_string(&old).unwrap().contains("uid"));
}

#[test]
fn the_pods_already_there_in_the_second_of_an_eviction() {
    let mk = |uid: &str, owner: &str, created: &str| -> SlimPod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": uid, "namespace": "a",
                "uid": uid, "creationTimestamp": created, "ownerReferences": [{"apiVersion": "apps/v1",
                "kind": "ReplicaSet", "name": "o", "uid": owner, "controller": true}]}}))
            .unwrap()
    };
    let pods = [
        mk("same", "rs", T0),
        mk("earlier", "rs", "2026-12-01T09:59:59Z"),
        mk("other-owner", "rs2", T0),
        mk("same-too", "rs", T0),
    ];
    let refs: Vec<&SlimPod> = pods.iter().collect();
    assert_eq!(same_second(&refs, "rs", t(T0)), ["same", "same-too"]);
    assert!(same_second(&refs, "rs", t(T0) + 1).is_empty());
}

#[test]
fn an_eviction_recorded_before_same_second_existed_still_reads() {
    let e: Evicted = serde_json::from_str(r#"{"at": 5, "pod": "a/p", "owner": "o"}"#).unwrap();
    assert!(e.same_second.is_empty());
    assert!(!serde_json::to_string(&e).unwrap().contains("same_second"));
}

#[test]
fn the_rate_counts_every_sidecarset_over_the_last_minute() {
    let e = |at| Evicted {
        at,
        pod: "a/p".into(),
        owner: "o".into(),
        ..Default::default()
    };
    let states: BTreeMap<String, SidecarSetState> = [
        (
            "a".to_string(),
            SidecarSetState {
                evictions: vec![e(1000), e(1050)],
                ..Default::default()
            },
        ),
        (
            "b".to_string(),
            SidecarSetState {
                evictions: vec![e(930), e(1059)],
                ..Default::default()
            },
        ),
    ]
    .into();
    // 1000 is 60 s before 1060: out; 1050 and 1059 in; 930 out.
    assert_eq!(recent(&states, 1060), 2);
    assert_eq!(recent(&states, 1059), 3, "1000 is 59 s before 1059");
}

/// `since`, for `"true"`: never later than needed for generation 1 (its creation, on the API
/// server's clock), never earlier than the generation took effect.
#[test]
fn since_is_when_the_generation_took_effect() {
    let (created, first_pass, now) = (1000, 5000, 9000);
    // (generation, creationTimestamp, state stored before, since wanted)
    for (generation, created, stored, want) in [
        // Generation 1: it took effect at the creation, whenever the first pass ran.
        (1, Some(created), None, created),
        // A state recorded at a later pass (a former version, or the annotation added later).
        (1, Some(created), Some((1, first_pass)), created),
        // A clock ahead of the API server's: never later than now.
        (1, Some(now + 50), None, now),
        (1, None, None, now),
        // A later generation: its time is not kept by the API; the first pass that sees it.
        (2, Some(created), None, now),
        (2, Some(created), Some((1, first_pass)), now),
        (2, Some(created), Some((2, first_pass)), first_pass),
    ] {
        let before = stored.map(|(generation, since)| SidecarSetState {
            uid: "u".into(),
            generation,
            since,
            ..Default::default()
        });
        let state = before.clone().unwrap_or_default().current(
            "u",
            generation,
            took_effect(generation, created, now),
            now,
        );
        assert_eq!(
            state.since, want,
            "generation {generation} created {created:?} stored {stored:?}"
        );
    }
}

#[test]
fn a_state_is_bounded() {
    let e = |i: usize, uids: usize| Evicted {
        at: i as i64,
        pod: format!("a/p{i}"),
        same_second: (0..uids).map(|u| u.to_string()).collect(),
        ..Default::default()
    };
    // (per hour, evictions, uids in each same_second, evictions kept, uids kept)
    for (per_hour, n, uids, kept, uids_kept) in [
        (20, 5, 3, 5, 3),
        (20, 30, 0, 30, 0),
        (20, 31, 0, 30, 0),
        (2, 40, 60, 12, 50),
    ] {
        let mut s = SidecarSetState {
            evictions: (0..n).map(|i| e(i, uids)).collect(),
            ..Default::default()
        };
        s.bound(per_hour);
        assert_eq!(s.evictions.len(), kept, "{per_hour}/h, {n} evictions");
        assert_eq!(
            s.evictions.last().unwrap().at,
            n as i64 - 1,
            "the newest kept"
        );
        assert!(s.evictions.iter().all(|e| e.same_second.len() == uids_kept));
    }
}

#[test]
fn the_states_of_sidecarsets_gone_are_pruned() {
    let st = |uid: &str| SidecarSetState {
        uid: uid.into(),
        ..Default::default()
    };
    let current = |n: &str| match n {
        "own" => Some("own-uid".to_string()),
        "alive" => Some("alive-uid".to_string()),
        "recreated" => Some("new".to_string()),
        _ => None,
    };
    let mut states: BTreeMap<String, SidecarSetState> = [
        ("own", st("own-uid")),
        ("alive", st("alive-uid")),
        ("recreated", st("old")),
        ("deleted", st("d")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut unknown = states.clone();
    assert_eq!(
        state::prune(&mut states, "own", &current),
        ["deleted", "recreated"]
    );
    assert_eq!(states.keys().collect::<Vec<_>>(), ["alive", "own"]);
    // A view that does not know the pass's own SidecarSet yet: nothing dropped.
    assert!(state::prune(&mut unknown, "new-one", &current).is_empty());
    assert_eq!(unknown.len(), 4);
}

#[test]
fn a_ready_pod_that_a_budget_allowing_no_disruption_selects_is_blocked() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let pod = |ready: &str| -> SlimPod {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "p", "namespace": "a",
            "labels": {"app": "web"}},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}),
        )
        .unwrap()
    };
    let pdb = |selector: Option<serde_json::Value>, allowed: Option<i32>| -> PodDisruptionBudget {
        let mut v = serde_json::json!({"metadata": {"name": "b"}, "spec": {}});
        if let Some(s) = selector {
            v["spec"]["selector"] = s;
        }
        if let Some(a) = allowed {
            v["status"] = serde_json::json!({"disruptionsAllowed": a, "currentHealthy": 1,
                "desiredHealthy": 1, "expectedPods": 1});
        }
        serde_json::from_value(v).unwrap()
    };
    let web = || Some(serde_json::json!({"matchLabels": {"app": "web"}}));
    // (pod ready, budget's selector, disruptions allowed, blocked)
    for (ready, selector, allowed, want) in [
        ("True", web(), Some(0), true),
        ("True", web(), Some(1), false),
        // No status yet: the Eviction API refuses until the budget is processed.
        ("True", web(), None, true),
        ("True", Some(serde_json::json!({})), Some(0), true),
        ("True", None, Some(0), false),
        (
            "True",
            Some(serde_json::json!({"matchLabels": {"app": "db"}})),
            Some(0),
            false,
        ),
        // An unready pod may be let go (unhealthyPodEvictionPolicy): the Eviction API decides.
        ("False", web(), Some(0), false),
    ] {
        assert_eq!(
            disruption::blocked(&pod(ready), &[pdb(selector.clone(), allowed)]),
            want,
            "ready {ready}, selector {selector:?}, allowed {allowed:?}"
        );
    }
    assert!(!disruption::blocked(&pod("True"), &[]));
}
