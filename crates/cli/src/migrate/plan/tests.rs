//! Plans for snapshots of OpenKruise installs, and how they read.

use super::*;
use crate::migrate::release::objects;

const MANIFEST: &str = "---
# Source: kruise/templates/apps.kruise.io_sidecarsets.yaml
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: sidecarsets.apps.kruise.io}
---
# Source: kruise/templates/apps.kruise.io_clonesets.yaml
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: clonesets.apps.kruise.io}
---
apiVersion: v1
kind: Namespace
metadata: {name: kruise-system}
---
apiVersion: v1
kind: Service
metadata: {name: kruise-webhook-service, namespace: kruise-system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: kruise-controller-manager, namespace: kruise-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kruise-manager-role}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: kruise-mutating-webhook-configuration}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: kruise-validating-webhook-configuration}
";

fn release(ns: &str, name: &str, status: &str) -> FoundRelease {
    FoundRelease {
        release: Release {
            name: name.into(),
            namespace: ns.into(),
            version: 2,
            status: status.into(),
            chart_name: "kruise".into(),
            chart_version: "1.8.3".into(),
            app_version: "1.8.3".into(),
            manifest: MANIFEST.into(),
        },
        objects: objects(MANIFEST, ns).unwrap(),
        secret_namespace: ns.into(),
        secrets: vec![
            format!("sh.helm.release.v1.{name}.v1"),
            format!("sh.helm.release.v1.{name}.v2"),
        ],
    }
}

fn snapshot() -> Snapshot {
    Snapshot {
        releases: vec![release("default", "kruise", "deployed")],
        crd: Some(CrdState {
            uid: "u".into(),
            served: vec!["v1alpha1".into(), "v1beta1".into()],
            storage: "v1beta1".into(),
            deleting: false,
        }),
        kruise_webhooks: vec![
            format!("mutatingwebhookconfiguration/{KRUISE_MUTATING}"),
            format!("validatingwebhookconfiguration/{KRUISE_VALIDATING}"),
        ],
        ..Default::default()
    }
}

fn options() -> Options {
    Options {
        release: None,
        other_kinds: None,
        webhook_config_name: "sidecarset-operator".into(),
        operator_namespace: "sidecarset-system".into(),
        operator_release: "sidecarset-operator".into(),
        chart: "charts/sidecarset-operator".into(),
    }
}

fn ready() -> Ours {
    Ours {
        registered: true,
        ca_bundle: true,
        ready_replicas: Some(1),
    }
}

/// Table: a change to the snapshot or the options → the blocker expected (a fragment), or
/// none.
#[test]
fn blockers() {
    type Case = (
        &'static str,
        fn(&mut Snapshot, &mut Options),
        Option<&'static str>,
    );
    let cases: Vec<Case> = vec![
        ("a plain release", |_, _| {}, None),
        (
            "two releases",
            |s, _| {
                s.releases
                    .push(release("kruise-system", "kruise", "deployed"))
            },
            Some("2 Helm releases of OpenKruise were found (default/kruise, kruise-system/kruise)"),
        ),
        (
            "two releases, one chosen",
            |s, o| {
                s.releases
                    .push(release("kruise-system", "kruise", "deployed"));
                o.release = Some("kruise-system/kruise".into());
            },
            None,
        ),
        (
            "a release chosen that is not there",
            |_, o| o.release = Some("x/y".into()),
            Some("--release x/y: no OpenKruise Helm release"),
        ),
        (
            "a pending upgrade",
            |s, _| s.releases[0].release.status = "pending-upgrade".into(),
            Some("is \"pending-upgrade\", not \"deployed\""),
        ),
        (
            "webhooks without a release",
            |s, _| s.releases.clear(),
            Some("no Helm release of OpenKruise was found in any namespace"),
        ),
        ("no CRD", |s, _| s.crd = None, Some("does not exist")),
        (
            "a CRD being deleted",
            |s, _| s.crd.as_mut().unwrap().deleting = true,
            Some("is being deleted"),
        ),
        (
            "OpenKruise before 1.9",
            |s, _| {
                let c = s.crd.as_mut().unwrap();
                c.served = vec!["v1alpha1".into()];
                c.storage = "v1alpha1".into();
            },
            Some("upgrade OpenKruise to 1.9 first"),
        ),
        (
            "CloneSets in use",
            |s, _| s.others.push(("clonesets.apps.kruise.io".into(), 3)),
            Some("used for more than SidecarSets (3 clonesets.apps.kruise.io)"),
        ),
        (
            "CloneSets in use, orphaned by choice",
            |s, o| {
                s.others.push(("clonesets.apps.kruise.io".into(), 3));
                o.other_kinds = Some(OtherKinds::Orphan);
            },
            None,
        ),
        (
            "other kinds with no objects",
            |s, _| s.others.push(("clonesets.apps.kruise.io".into(), 0)),
            None,
        ),
        (
            "OpenKruise newer than the schema we apply",
            |s, _| s.releases[0].release.app_version = "1.10.0".into(),
            Some("is OpenKruise 1.10.0 (app version), newer than 1.9"),
        ),
        (
            "OpenKruise 1.9 with a v and a patch",
            |s, _| s.releases[0].release.app_version = "v1.9.3".into(),
            None,
        ),
        (
            "OpenKruise 2.0 by its chart version",
            |s, _| {
                s.releases[0].release.app_version = String::new();
                s.releases[0].release.chart_version = "2.0.0-rc.1".into();
            },
            Some("is OpenKruise 2.0.0-rc.1 (chart version), newer than 1.9"),
        ),
        (
            "no version to tell",
            |s, _| s.releases[0].release.app_version = "latest".into(),
            Some("does not say which OpenKruise it is (app version \"latest\")"),
        ),
        (
            "an unreadable record of another release",
            |s, _| {
                s.unreadable_records
                    .push("team-a/sh.helm.release.v1.app.v3: the release is not JSON".into())
            },
            None,
        ),
        (
            "webhooks without a release, and an unreadable record",
            |s, _| {
                s.releases.clear();
                s.unreadable_records
                    .push("default/sh.helm.release.v1.kruise.v2: the release is not base64".into());
            },
            Some(
                "or its record is one of the unreadable ones: default/sh.helm.release.v1.kruise.v2",
            ),
        ),
        (
            "our webhooks would run first",
            |_, o| o.webhook_config_name = "aaa-sidecars".into(),
            Some("sorts before \"kruise-mutating-webhook-configuration\""),
        ),
    ];
    for (what, change, want) in cases {
        let (mut s, mut o) = (snapshot(), options());
        change(&mut s, &mut o);
        let p = plan(&s, &o);
        match want {
            None => assert!(p.blockers.is_empty(), "{what}: {:?}", p.blockers),
            Some(w) => assert!(
                p.blockers.iter().any(|b| b.contains(w)),
                "{what}: want {w:?} in {:?}",
                p.blockers
            ),
        }
    }
}

#[test]
fn nothing_to_do_without_openkruise() {
    let s = Snapshot::default();
    let p = plan(&s, &options());
    assert_eq!(p.phase, MigrationPhase::NothingToDo);
    assert!(p.blockers.is_empty());
    assert_eq!(
        p.next,
        [
            "helm install sidecarset-operator charts/sidecarset-operator -n sidecarset-system --create-namespace"
        ]
    );
}

#[test]
fn the_phase_follows_our_operator() {
    let mut s = snapshot();
    let cases = [
        (Ours::default(), MigrationPhase::InstallOperator),
        (
            Ours {
                ca_bundle: false,
                ..ready()
            },
            MigrationPhase::InstallOperator,
        ),
        (
            Ours {
                ready_replicas: Some(0),
                ..ready()
            },
            MigrationPhase::InstallOperator,
        ),
        // 0 replicas in the cluster: it runs outside (webhooks by URL), the caBundle says it served.
        (
            Ours {
                ready_replicas: None,
                ..ready()
            },
            MigrationPhase::RemoveOpenKruise,
        ),
        (ready(), MigrationPhase::RemoveOpenKruise),
    ];
    for (ours, want) in cases {
        s.ours = ours.clone();
        let p = plan(&s, &options());
        assert_eq!(p.phase, want, "{ours:?}");
        if want == MigrationPhase::InstallOperator {
            assert!(
                p.next[0].ends_with(
                    "helm install sidecarset-operator charts/sidecarset-operator -n sidecarset-system --create-namespace --set openkruise.coexistence=true"
                ),
                "{:?}",
                p.next
            );
        } else {
            assert!(
                p.next[0].starts_with(
                    "helm upgrade sidecarset-operator charts/sidecarset-operator -n sidecarset-system --reuse-values --set openkruise.coexistence=false "
                ),
                "{:?}",
                p.next
            );
        }
    }
}

#[test]
fn crds_and_namespaces_are_kept_and_webhooks_go_first_then_workloads_then_the_release() {
    let mut s = snapshot();
    s.ours = ready();
    let p = plan(&s, &options());
    assert!(p.crds_are_release_templates);
    let kept: Vec<(&str, &str)> = p
        .kept
        .iter()
        .map(|k| (k.kind.as_str(), k.name.as_str()))
        .collect();
    assert_eq!(
        kept,
        [
            ("CustomResourceDefinition", "sidecarsets.apps.kruise.io"),
            ("CustomResourceDefinition", "clonesets.apps.kruise.io"),
            ("Namespace", "kruise-system"),
        ]
    );
    assert!(p.kept[0].why.contains("every SidecarSet"));
    assert!(p.kept[1].why.contains("every clonesets object"));
    let dels: Vec<String> = p
        .deletions
        .iter()
        .map(|d| format!("{} {}/{}", d.kind, d.namespace, d.name))
        .collect();
    assert_eq!(
        dels,
        [
            "MutatingWebhookConfiguration /kruise-mutating-webhook-configuration",
            "ValidatingWebhookConfiguration /kruise-validating-webhook-configuration",
            "Deployment kruise-system/kruise-controller-manager",
            "Service kruise-system/kruise-webhook-service",
            "ClusterRole /kruise-manager-role",
        ]
    );
    assert_eq!(
        p.release_secrets,
        [
            "default/sh.helm.release.v1.kruise.v1",
            "default/sh.helm.release.v1.kruise.v2"
        ]
    );
}

#[test]
fn a_keep_policy_in_the_manifest_is_honoured_and_stray_kruise_webhooks_are_removed() {
    let mut s = snapshot();
    s.ours = ready();
    let m = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  annotations: {helm.sh/resource-policy: keep}\n";
    s.releases[0].objects = objects(m, "default").unwrap();
    let p = plan(&s, &options());
    assert_eq!(p.kept.len(), 1);
    assert!(p.kept[0].why.contains("resource-policy"));
    assert!(!p.crds_are_release_templates);
    let names: Vec<&str> = p.deletions.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, [KRUISE_MUTATING, KRUISE_VALIDATING]);
}

#[test]
fn lost_objects_are_named() {
    let o = |n: &str, u: &str| Obj {
        namespace: String::new(),
        name: n.into(),
        uid: u.into(),
    };
    let before = [o("a", "1"), o("b", "2"), o("c", "3")];
    let after = [o("a", "1"), o("c", "9")];
    assert_eq!(
        lost("SidecarSet", &before, &after),
        [
            "SidecarSet b is gone (uid 2)",
            "SidecarSet c was recreated (uid 3 before, 9 now)"
        ]
    );
    assert!(lost("SidecarSet", &before, &before).is_empty());
}

#[test]
fn unreadable_records_are_named_in_the_notes() {
    let mut s = snapshot();
    s.unreadable_records
        .push("team-a/sh.helm.release.v1.app.v3: the release is not JSON".into());
    let p = plan(&s, &options());
    assert!(p.blockers.is_empty(), "{:?}", p.blockers);
    assert!(
        p.notes.iter().any(|n| n.starts_with(
            "Helm release record team-a/sh.helm.release.v1.app.v3: the release is not JSON: skipped"
        )),
        "{:?}",
        p.notes
    );
}

#[test]
fn a_sidecarset_is_compared_whole_but_for_what_the_server_and_controllers_write() {
    let before = serde_json::json!({
        "metadata": {"name": "a", "uid": "1", "resourceVersion": "5", "generation": 2,
                     "managedFields": [{"manager": "x"}], "labels": {"l": "1"}},
        "spec": {"containers": [{"name": "c", "image": "i:1", "resources": {"limits": {"cpu": "1"}}}]},
        "status": {"matchedPods": 1}
    });
    let mut same = before.clone();
    same["metadata"]["resourceVersion"] = "9".into();
    same["metadata"]["managedFields"] = serde_json::json!([]);
    same["status"]["matchedPods"] = 3.into();
    assert!(changed(&before, &same).is_empty());
    // A field pruned by a schema, and a label changed.
    let mut pruned = before.clone();
    pruned["spec"]["containers"][0]
        .as_object_mut()
        .unwrap()
        .remove("resources");
    pruned["metadata"]["labels"]["l"] = "2".into();
    assert_eq!(
        changed(&before, &pruned),
        ["metadata.labels.l", "spec.containers[0].resources"]
    );
}
