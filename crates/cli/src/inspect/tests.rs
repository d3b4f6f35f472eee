//! Tables of `explain pod` and `diff` decisions, offline. Pods are injected by the real
//! injection code and given a kubelet-like status, as in a cluster.

use super::diff::{Change, DiffInput, diff};
use super::explain::{InjectionState, PodInput, Verdict, Why, explain_pod};
use super::pods::{Hold, NextStep};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use sidecarset_core::api::{SidecarSet, default_sidecarset};
use sidecarset_core::index::{Index, namespace_labels};
use std::collections::{BTreeMap, BTreeSet};

const NOW: &str = "2026-12-01T12:00:00Z";

fn ss(name: &str, spec: Value) -> SidecarSet {
    let mut v = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
        "metadata": {"name": name, "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "containers": [{"name": "proxy", "image": "proxy:1",
                                 "env": [{"name": "MODE", "value": "a"}]}]}});
    for (k, x) in spec.as_object().unwrap() {
        v["spec"][k] = x.clone();
    }
    let mut s: SidecarSet = serde_json::from_value(v).unwrap();
    default_sidecarset(&mut s);
    s
}

fn with_image(s: &SidecarSet, image: &str) -> SidecarSet {
    let mut s = s.clone();
    s.spec.containers[0].container.image = Some(image.into());
    s
}

fn ns_labels(ns: &str) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    if ns == "shop" {
        l.insert("team".to_string(), "shop".to_string());
    }
    if ns == "quiet" {
        l.insert(
            "sidecarset-operator.io/inject".to_string(),
            "disabled".to_string(),
        );
    }
    namespace_labels(ns, &l)
}

/// A pod created at `created` (seconds after 10:00), injected by `sets` as the webhook does,
/// running and ready with the kubelet reporting its spec images.
fn pod(name: &str, ns: &str, labels: Value, created: Option<u32>, sets: &[SidecarSet]) -> Pod {
    let mut v = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "app:1"}]}});
    let p: Pod = serde_json::from_value(v.clone()).unwrap();
    let (index, _) = Index::from_sidecarsets(sets.iter().cloned());
    let inj = sidecarset_core::inject::for_pod(&index, &p, &ns_labels(ns), NOW);
    sidecarset_core::inject::apply(&mut v, &inj.patch()).unwrap();
    if let Some(c) = created {
        v["metadata"]["creationTimestamp"] = json!(format!(
            "2026-12-01T{:02}:{:02}:{:02}Z",
            10 + c / 3600,
            (c / 60) % 60,
            c % 60
        ));
    }
    let statuses: Vec<Value> = v["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": true, "restartCount": 0}))
        .collect();
    v["status"] = json!({"phase": "Running", "containerStatuses": statuses,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"}]});
    serde_json::from_value(v).unwrap()
}

/// `s` with the proxy's env MODE set to `value`.
fn with_env(s: &SidecarSet, value: &str) -> SidecarSet {
    let mut s = s.clone();
    s.spec.containers[0].container.env.as_mut().unwrap()[0].value = Some(value.into());
    s
}

struct World {
    sets: Vec<SidecarSet>,
    peers: BTreeMap<String, Vec<Pod>>,
}

impl World {
    fn explain(&self, p: &Pod, all: bool) -> super::explain::PodExplanation {
        let (index, _) = Index::from_sidecarsets(self.sets.iter().cloned());
        let skip: BTreeSet<String> = ["kube-system".to_string()].into();
        explain_pod(&PodInput {
            pod: p,
            namespace_labels: ns_labels(p.metadata.namespace.as_deref().unwrap()),
            index: &index,
            skip_namespaces: &skip,
            peers: &self.peers,
            revisions: &[],
            all,
            now: NOW,
        })
    }

    fn verdict(&self, p: &Pod, name: &str) -> Verdict {
        let e = self.explain(p, false);
        e.sidecarsets
            .into_iter()
            .find(|v| v.sidecarset == name)
            .unwrap_or_else(|| panic!("{name} not listed"))
    }
}

fn world(sets: Vec<SidecarSet>) -> World {
    World {
        sets,
        peers: BTreeMap::new(),
    }
}

#[test]
fn explain_injection_decisions() {
    let mesh = ss("mesh", json!({}));
    let web = json!({"app": "web"});
    // (what, SidecarSets in the cluster, the pod, SidecarSet asked about, state, reason, detail)
    type Case = (
        &'static str,
        Vec<SidecarSet>,
        Pod,
        &'static str,
        InjectionState,
        Option<Why>,
        &'static str,
    );
    let paused = ss("mesh", json!({"injectionStrategy": {"paused": true}}));
    let mut claimed = pod("p", "shop", web.clone(), Some(60), &[]);
    claimed.metadata.annotations = Some(
        [(
            "kruise.io/sidecarset-hash".to_string(),
            json!({"other": {"hash": "h", "sidecarSetName": "other", "sidecarList": ["proxy"]}})
                .to_string(),
        )]
        .into(),
    );
    let refusing = ss(
        "mesh",
        json!({"containers": [{"name": "proxy", "image": "proxy:1",
            "resourcesPolicy": {"targetContainersMode": "sum", "targetContainersNameRegex": "^db$",
                                "resourcesExpr": {"limits": {"cpu": "cpu*50%"}}}}]}),
    );
    let optional = {
        let mut s = mesh.clone();
        s.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("sidecarset-operator.io/opt-out".into(), "allowed".into());
        s
    };
    let declines = json!({"app": "web", "inject.sidecarset-operator.io/mesh": "disabled"});
    let cases: Vec<Case> = vec![
        (
            "opted out by the pod",
            vec![optional.clone()],
            pod("p", "shop", declines.clone(), Some(60), &[]),
            "mesh",
            InjectionState::Skipped,
            Some(Why::OptedOut),
            "declined by the pod's label inject.sidecarset-operator.io/mesh=disabled",
        ),
        (
            "opted out by its namespace",
            vec![optional.clone()],
            pod("p", "quiet", web.clone(), Some(60), &[]),
            "mesh",
            InjectionState::Skipped,
            Some(Why::OptedOut),
            "declined by its namespace's label sidecarset-operator.io/inject=disabled",
        ),
        (
            "a mandatory SidecarSet ignores the opt-out",
            vec![mesh.clone()],
            pod(
                "p",
                "shop",
                declines.clone(),
                Some(60),
                std::slice::from_ref(&mesh),
            ),
            "mesh",
            InjectionState::Injected,
            None,
            "the pod's label inject.sidecarset-operator.io/mesh=disabled is ignored: this SidecarSet does not allow opting out",
        ),
        (
            "injected",
            vec![mesh.clone()],
            pod(
                "p",
                "shop",
                web.clone(),
                Some(60),
                std::slice::from_ref(&mesh),
            ),
            "mesh",
            InjectionState::Injected,
            None,
            "injected at creation",
        ),
        (
            "paused",
            vec![paused.clone()],
            pod(
                "p",
                "shop",
                web.clone(),
                Some(60),
                std::slice::from_ref(&paused),
            ),
            "mesh",
            InjectionState::Skipped,
            Some(Why::Paused),
            "injectionStrategy.paused is true",
        ),
        (
            "conflict with a sidecar another SidecarSet put in the pod",
            vec![mesh.clone()],
            claimed,
            "mesh",
            InjectionState::Skipped,
            Some(Why::Conflict),
            "container \"proxy\" is also injected by SidecarSet \"other\"",
        ),
        (
            "namespace excluded",
            vec![mesh.clone()],
            pod("p", "kube-system", web.clone(), Some(60), &[]),
            "mesh",
            InjectionState::Skipped,
            Some(Why::NamespaceExcluded),
            "namespace kube-system is excluded",
        ),
        (
            "created before the SidecarSet",
            vec![mesh.clone()],
            pod("p", "shop", web.clone(), None, &[]).tap_created("2026-12-01T09:00:00Z"),
            "mesh",
            InjectionState::Skipped,
            Some(Why::CreatedBefore),
            "before the SidecarSet",
        ),
        (
            "selected now, not at creation",
            vec![mesh.clone()],
            pod("p", "shop", web.clone(), Some(60), &[]),
            "mesh",
            InjectionState::Skipped,
            Some(Why::NotInjectedAtCreation),
            "recreate the pod",
        ),
        (
            "a manifest not created yet",
            vec![mesh.clone()],
            pod("p", "shop", web.clone(), None, &[]),
            "mesh",
            InjectionState::Skipped,
            Some(Why::WillBeInjected),
            "will inject it",
        ),
        (
            "the injection would refuse the pod now",
            vec![refusing.clone()],
            pod("p", "shop", web.clone(), Some(60), &[]),
            "mesh",
            InjectionState::Skipped,
            Some(Why::Refused),
            "targetContainersNameRegex",
        ),
        (
            "pod selector term missed",
            vec![mesh.clone()],
            pod("p", "shop", json!({"app": "api"}), Some(60), &[]),
            "mesh",
            InjectionState::NotSelected,
            None,
            "spec.selector needs app=web, the pod has app=api",
        ),
        (
            "namespaceSelector term missed",
            vec![ss(
                "mesh",
                json!({"namespaceSelector": {"matchLabels": {"team": "shop"}}}),
            )],
            pod("p", "default", web.clone(), Some(60), &[]),
            "mesh",
            InjectionState::NotSelected,
            None,
            "spec.namespaceSelector needs team=shop, its namespace has no label team",
        ),
        (
            "namespace missed",
            vec![ss("mesh", json!({"namespace": "shop"}))],
            pod("p", "default", web.clone(), Some(60), &[]),
            "mesh",
            InjectionState::NotSelected,
            None,
            "spec.namespace needs shop, the pod is in default",
        ),
        (
            "injected, then no longer selected",
            vec![mesh.clone()],
            pod(
                "p",
                "shop",
                web.clone(),
                Some(60),
                std::slice::from_ref(&mesh),
            )
            .tap_labels(json!({"app": "old"})),
            "mesh",
            InjectionState::Injected,
            None,
            "the controller still counts and upgrades the pod",
        ),
        (
            "the SidecarSet that injected the pod was deleted",
            vec![],
            pod(
                "p",
                "shop",
                web.clone(),
                Some(60),
                std::slice::from_ref(&mesh),
            ),
            "mesh",
            InjectionState::Deleted,
            None,
            "does not exist any more",
        ),
    ];
    for (what, sets, p, name, state, why, detail) in cases {
        let v = world(sets).verdict(&p, name);
        assert_eq!((v.injection, v.reason), (state, why), "{what}: {v:?}");
        assert!(v.detail.contains(detail), "{what}: {:?}", v.detail);
        // The Event the operator records for the same skip, from the core's one list.
        let event = match why {
            Some(Why::OptedOut) => Some("SidecarSetOptedOut"),
            Some(Why::Paused) => Some("SidecarSetPaused"),
            Some(Why::Conflict) => Some("SidecarSetConflict"),
            Some(Why::NamespaceExcluded) => Some("SidecarSetNamespaceExcluded"),
            Some(Why::NotInjectedAtCreation | Why::CreatedBefore) => Some("SidecarSetMissing"),
            _ => None,
        };
        assert_eq!(v.event.as_deref(), event, "{what}: {v:?}");
    }
}

trait Tap {
    fn tap_created(self, t: &str) -> Self;
    fn tap_labels(self, l: Value) -> Self;
}

impl Tap for Pod {
    fn tap_created(mut self, t: &str) -> Pod {
        self.metadata.creation_timestamp = Some(serde_json::from_value(json!(t)).unwrap());
        self
    }
    fn tap_labels(mut self, l: Value) -> Pod {
        self.metadata.labels = Some(serde_json::from_value(l).unwrap());
        self
    }
}

#[test]
fn explain_lists_near_misses_and_counts_the_rest() {
    let near = ss(
        "near",
        json!({"selector": {"matchLabels": {"app": "web", "tier": "x"}}}),
    );
    let far = ss(
        "far",
        json!({"selector": {"matchLabels": {"app": "db", "tier": "y"}}}),
    );
    let w = world(vec![near, far]);
    let p = pod("p", "shop", json!({"app": "web"}), Some(60), &[]);
    let e = w.explain(&p, false);
    let names: Vec<&str> = e
        .sidecarsets
        .iter()
        .map(|v| v.sidecarset.as_str())
        .collect();
    assert_eq!((names, e.others), (vec!["near"], 1));
    assert_eq!(e.sidecarsets[0].missed[0].requirement, "tier=x");
    assert_eq!(e.sidecarsets[0].missed[0].has, None);
    let e = w.explain(&p, true);
    assert_eq!((e.sidecarsets.len(), e.others), (2, 0));
    assert_eq!(e.sidecarsets[0].missed.len(), 2, "far misses app and tier");
}

#[test]
fn explain_revisions_upgradability_and_next_step() {
    let v1 = ss("mesh", json!({}));
    let v2 = with_image(&v1, "proxy:2");
    let web = json!({"app": "web"});
    // Injected by v1, the cluster now has v2 (image only).
    let old = |n: &str, t: u32| pod(n, "shop", web.clone(), Some(t), std::slice::from_ref(&v1));
    // Injected by a version whose env differed.
    let env_changed = pod("env", "shop", web.clone(), Some(50), &[with_env(&v1, "b")]);
    // Cases: (what, strategy patch, pods of the SidecarSet, explained pod, expected next step)
    type Case = (&'static str, Value, Vec<Pod>, usize, NextStep);
    let held = |by: Hold| NextStep::Held {
        by,
        detail: String::new(),
    };
    let cases: Vec<Case> = vec![
        (
            "alone: upgraded now",
            json!({}),
            vec![old("a", 10)],
            0,
            NextStep::UpgradeNow { position: 1, of: 1 },
        ),
        (
            "maxUnavailable 1: the newest goes first, the other waits",
            json!({}),
            vec![old("a", 10), old("b", 20)],
            0,
            held(Hold::MaxUnavailable),
        ),
        (
            "maxUnavailable 1: the newest goes first",
            json!({}),
            vec![old("a", 10), old("b", 20)],
            1,
            NextStep::UpgradeNow { position: 1, of: 1 },
        ),
        (
            "partition 1 keeps the last of the order (the oldest)",
            json!({"partition": 1, "maxUnavailable": 5}),
            vec![old("a", 10), old("b", 20)],
            0,
            held(Hold::Partition),
        ),
        (
            "paused",
            json!({"paused": true}),
            vec![old("a", 10)],
            0,
            held(Hold::Paused),
        ),
        (
            "NotUpdate",
            json!({"type": "NotUpdate"}),
            vec![old("a", 10)],
            0,
            held(Hold::NotUpdate),
        ),
        (
            "not selected by the update selector",
            json!({"selector": {"matchLabels": {"canary": "true"}}}),
            vec![old("a", 10)],
            0,
            held(Hold::UpdateSelector),
        ),
        (
            "more than the image differs",
            json!({}),
            vec![env_changed.clone()],
            0,
            NextStep::NotUpgradable {
                differences: vec!["containers[proxy].env[MODE].value: \"b\" -> \"a\"".into()],
            },
        ),
    ];
    for (what, strategy, pods, me, want) in cases {
        let mut cur = v2.clone();
        let mut st = serde_json::to_value(&cur.spec.update_strategy).unwrap();
        for (k, x) in strategy.as_object().unwrap() {
            st[k] = x.clone();
        }
        cur.spec.update_strategy = serde_json::from_value(st).unwrap();
        let w = World {
            sets: vec![cur],
            peers: [("mesh".to_string(), pods.clone())].into(),
        };
        let v = w.verdict(&pods[me], "mesh");
        let rev = v.revision.as_ref().unwrap();
        assert!(!rev.updated, "{what}");
        assert_ne!(rev.pod_hash, rev.latest_hash, "{what}");
        let proxy = v.sidecars.iter().find(|s| s.name == "proxy").unwrap();
        assert_eq!(
            (
                proxy.pod_image.as_deref(),
                proxy.sidecarset_image.as_deref()
            ),
            (Some("proxy:1"), Some("proxy:2")),
            "{what}"
        );
        let got = v.next.clone().unwrap();
        match (&got, &want) {
            (NextStep::Held { by, .. }, NextStep::Held { by: want_by, .. }) => {
                assert_eq!(by, want_by, "{what}: {got}")
            }
            _ => assert_eq!(got, want, "{what}: {got}"),
        }
        assert_eq!(
            v.upgradable,
            Some(!matches!(want, NextStep::NotUpgradable { .. })),
            "{what}"
        );
    }
    // The API server mounts the service account token into the sidecars too (its admission runs
    // again after the webhooks): not a difference.
    let mut with_token = pod(
        "token",
        "shop",
        web.clone(),
        Some(60),
        &[with_env(&v1, "b")],
    );
    for c in &mut with_token.spec.as_mut().unwrap().containers {
        c.volume_mounts.get_or_insert_with(Vec::new).push(
            serde_json::from_value(json!({"name": "kube-api-access-x", "readOnly": true,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}))
            .unwrap(),
        );
    }
    let w = World {
        sets: vec![v2.clone()],
        peers: BTreeMap::new(),
    };
    assert_eq!(
        w.verdict(&with_token, "mesh").next,
        Some(NextStep::NotUpgradable {
            differences: vec!["containers[proxy].env[MODE].value: \"b\" -> \"a\"".into()]
        })
    );
    // Up to date.
    let w = world(vec![v1.clone()]);
    let v = w.verdict(&old("a", 10), "mesh");
    assert!(v.revision.unwrap().updated);
    assert_eq!(v.next, Some(NextStep::UpToDate));
}

#[test]
fn diff_upgrades_some_pods_and_leaves_others() {
    let v1 = ss("mesh", json!({}));
    let web = json!({"app": "web"});
    let old = |n: &str, t: u32| pod(n, "shop", web.clone(), Some(t), std::slice::from_ref(&v1));
    let env_changed = pod("env", "shop", web.clone(), Some(5), &[with_env(&v1, "b")]);
    let pods = vec![
        old("a", 10),
        old("b", 20),
        old("c", 30),
        env_changed,
        pod("fresh", "shop", web.clone(), Some(40), &[]),
        pod("system", "kube-system", web.clone(), Some(40), &[]),
        pod("other", "shop", json!({"app": "db"}), Some(40), &[]),
    ];
    let mut v2 = with_image(&v1, "proxy:2");
    // Partition counts every pod not updated: the pod that cannot be upgraded is one of the 2.
    v2.spec.update_strategy.partition =
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2));
    // Hash annotations as the mutating webhook writes them.
    let admitted = |s: &SidecarSet| {
        let mut s = s.clone();
        let raw = serde_json::to_value(&s).unwrap();
        let (h, hw) = sidecarset_core::api::sidecarset_hashes_as_submitted(&s, &raw);
        let a = s.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(sidecarset_core::api::ANNOTATION_HASH.into(), h);
        a.insert(
            sidecarset_core::api::ANNOTATION_HASH_WITHOUT_IMAGE.into(),
            hw,
        );
        s
    };
    let (cur, new) = (admitted(&v1), admitted(&v2));
    let skip: BTreeSet<String> = ["kube-system".to_string()].into();
    let run = |new: &SidecarSet, others: &[SidecarSet]| {
        diff(&DiffInput {
            new,
            current: Some(&cur),
            sidecarsets: others,
            pods: &pods,
            namespace_labels: &ns_labels,
            skip_namespaces: &skip,
            now: NOW,
        })
        .unwrap()
    };
    let r = run(&new, std::slice::from_ref(&cur));
    assert_eq!(
        r.changes,
        [
            "spec.containers[proxy].image: \"proxy:1\" -> \"proxy:2\"",
            "spec.updateStrategy.partition: 0 -> 2"
        ]
    );
    assert!(r.images_only);
    assert!(r.conflicts.is_empty(), "{:?}", r.conflicts);
    assert_eq!((r.injected, r.selected), (4, 6));
    let by_pod: BTreeMap<&str, Change> =
        r.pods.iter().map(|p| (p.pod.as_str(), p.change)).collect();
    assert_eq!(
        by_pod,
        [
            ("shop/a", Change::UpgradeInPlace),
            ("shop/b", Change::UpgradeInPlace),
            ("shop/c", Change::UpgradeInPlace),
            ("shop/env", Change::NotUpgradable),
            ("shop/fresh", Change::InjectedWhenRecreated),
            ("kube-system/system", Change::NamespaceExcluded),
        ]
        .into()
    );
    // Newest first (OpenKruise's order among ready pods of equal standing); partition keeps the
    // last one, maxUnavailable 1 takes one pod per step.
    assert_eq!(r.rollout.order, ["shop/c", "shop/b", "shop/a"]);
    assert_eq!(r.rollout.first_step, ["shop/c"]);
    assert_eq!(r.rollout.kept_by_partition, ["shop/a"]);
    let env = r.pods.iter().find(|p| p.pod == "shop/env").unwrap();
    assert!(
        matches!(&env.next, Some(NextStep::NotUpgradable { differences }) if differences == &["containers[proxy].env[MODE].value: \"b\" -> \"a\"".to_string()]),
        "{env:?}"
    );
    let human = super::diff::human(&r);
    assert!(human.contains("first step: shop/c"), "{human}");

    // Another SidecarSet injecting "proxy" into overlapping pods: the webhook's conflict check.
    let rival = admitted(&ss(
        "rival",
        json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}),
    ));
    let r = run(&new, &[cur.clone(), rival]);
    assert_eq!(r.conflicts.len(), 1, "{:?}", r.conflicts);
    assert!(r.conflicts[0].contains("\"rival\""), "{:?}", r.conflicts);

    // A selector that leaves pod c out: still upgraded (the controller follows injected lists).
    let mut narrowed = v2.clone();
    narrowed.spec.selector = Some(
        serde_json::from_value(json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]})).unwrap(),
    );
    let narrowed = admitted(&narrowed);
    let mut pods2 = pods.clone();
    pods2[2]
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("canary".into(), "1".into());
    let r = diff(&DiffInput {
        new: &narrowed,
        current: Some(&cur),
        sidecarsets: std::slice::from_ref(&cur),
        pods: &pods2,
        namespace_labels: &ns_labels,
        skip_namespaces: &skip,
        now: NOW,
    })
    .unwrap();
    let c = r.pods.iter().find(|p| p.pod == "shop/c").unwrap();
    assert_eq!(c.change, Change::UpgradeInPlace);
    assert!(c.detail.contains("no longer selected"), "{c:?}");

    // More than images: not images-only, every injected pod is left alone.
    let r = run(&admitted(&with_env(&v1, "z")), std::slice::from_ref(&cur));
    assert!(!r.images_only);
    assert!(
        r.pods
            .iter()
            .filter(|p| p.next.is_some())
            .all(|p| p.change == Change::NotUpgradable),
        "{:?}",
        r.pods
    );
    assert!(r.rollout.order.is_empty());
}

#[test]
fn diff_of_a_new_sidecarset() {
    let new = ss(
        "fresh",
        json!({"containers": [{"name": "agent", "image": "a:1"}]}),
    );
    let pods = vec![pod("p", "shop", json!({"app": "web"}), Some(40), &[])];
    let skip = BTreeSet::new();
    let r = diff(&DiffInput {
        new: &new,
        current: None,
        sidecarsets: &[],
        pods: &pods,
        namespace_labels: &ns_labels,
        skip_namespaces: &skip,
        now: NOW,
    })
    .unwrap();
    assert!(!r.exists);
    assert_eq!(r.pods.len(), 1);
    assert_eq!(r.pods[0].change, Change::InjectedWhenRecreated);
    assert!(super::diff::human(&r).contains("SidecarSet fresh (new)"));
}

/// A HotUpgrade sidecar: `explain` lists its pair (which container works, which idles on the
/// empty image, their versions); `diff` says which container gets the new image and that the
/// old one is reset after.
#[test]
fn explain_and_diff_describe_hot_upgrades() {
    let hot = json!({"containers": [{"name": "proxy", "image": "proxy:1",
        "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"}}]});
    let v1 = ss("mesh", hot);
    let v2 = with_image(&v1, "proxy:2");
    let web = json!({"app": "web"});
    let a = pod(
        "a",
        "shop",
        web.clone(),
        Some(10),
        std::slice::from_ref(&v1),
    );
    let mut w = world(vec![v2.clone()]);
    w.peers.insert("mesh".into(), vec![a.clone()]);
    let v = w.verdict(&a, "mesh");
    type Row = (String, Option<String>, Option<String>, Option<String>);
    let pairs: Vec<Row> = v
        .sidecars
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                s.pod_image.clone(),
                s.sidecarset_image.clone(),
                s.hot_upgrade.clone(),
            )
        })
        .collect();
    let some = |s: &str| Some(s.to_string());
    assert_eq!(
        pairs,
        [
            (
                "proxy-1".into(),
                some("proxy:1"),
                some("proxy:2"),
                some("working, version 1")
            ),
            (
                "proxy-2".into(),
                some("empty:1"),
                some("empty:1"),
                some("idle, version 0")
            ),
        ]
    );
    assert_eq!(v.next, Some(NextStep::UpgradeNow { position: 1, of: 1 }));
    let human = super::explain::human(&w.explain(&a, false));
    assert!(human.contains("sidecar proxy-1: pod proxy:1, SidecarSet proxy:2, running proxy:1 (hot upgrade: working, version 1)"), "{human}");

    let admitted = |s: &SidecarSet| {
        let mut s = s.clone();
        let raw = serde_json::to_value(&s).unwrap();
        let (h, hw) = sidecarset_core::api::sidecarset_hashes_as_submitted(&s, &raw);
        let an = s.metadata.annotations.get_or_insert_with(Default::default);
        an.insert(sidecarset_core::api::ANNOTATION_HASH.into(), h);
        an.insert(
            sidecarset_core::api::ANNOTATION_HASH_WITHOUT_IMAGE.into(),
            hw,
        );
        s
    };
    let (cur, new) = (admitted(&v1), admitted(&v2));
    let skip: BTreeSet<String> = BTreeSet::new();
    let pods = vec![a];
    let r = diff(&DiffInput {
        new: &new,
        current: Some(&cur),
        sidecarsets: &[],
        pods: &pods,
        namespace_labels: &ns_labels,
        skip_namespaces: &skip,
        now: NOW,
    })
    .unwrap();
    assert_eq!(r.pods[0].change, Change::UpgradeInPlace);
    assert!(
        r.pods[0].detail.contains("hot upgrade of proxy: proxy-2 gets the new image while proxy-1 keeps working, then proxy-1 is reset to the empty image"),
        "{:?}",
        r.pods[0]
    );
    assert_eq!(r.hot_upgrade.len(), 1);
    assert!(
        r.hot_upgrade[0].contains("proxy-1/proxy-2 (the one on empty:1)"),
        "{r:?}"
    );
    assert!(super::diff::human(&r).contains("Hot upgrade: proxy (HotUpgrade)"));
}
