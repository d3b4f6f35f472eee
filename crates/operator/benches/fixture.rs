//! The benchmark case of the architecture's budget: a pod of 10 containers against 100
//! SidecarSets of which 3 match (one before the app containers with env and resources, one
//! after them with `shareVolumePolicy`, one namespace-scoped with `transferEnv`).
#![allow(dead_code)]

use serde_json::{Value, json};
use sidecarset_core::api::{SidecarSet, default_sidecarset};
use sidecarset_core::index::Index;

pub fn pod() -> Value {
    let containers: Vec<Value> = (0..10)
        .map(|i| {
            json!({"name": format!("app-{i}"), "image": format!("registry.local/app-{i}:1.0"),
                   "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                   "ports": [{"containerPort": 8000 + i}],
                   "volumeMounts": [{"name": "data", "mountPath": format!("/data/{i}")}],
                   "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "bench", "namespace": "shop", "labels": {"app": "web", "tier": "frontend", "version": "v1"}},
           "spec": {"containers": containers, "volumes": [{"name": "data", "emptyDir": {}}]}})
}

pub fn sidecarsets() -> Vec<SidecarSet> {
    (0..100)
        .map(|i| {
            // 3 of them match app=web: ss-000 (before the app containers, with env and
            // resources), ss-033 (after them, sharing their volumes) and ss-066 (in the pod's
            // namespace only, with env transferred from an app container). The others select
            // other apps.
            let app = if i % 33 == 0 && i < 99 { "web".to_string() } else { format!("other-{i}") };
            let mut container = json!({"name": format!("sidecar-{i}"), "image": format!("registry.local/sidecar-{i}:2.0"),
                                       "env": [{"name": "MODE", "value": "x"}],
                                       "volumeMounts": [{"name": format!("conf-{i}"), "mountPath": "/etc/sidecar"}],
                                       "shareVolumePolicy": {"type": "enabled"}});
            let mut spec = json!({
                "selector": {"matchLabels": {"app": app}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                "volumes": [{"name": format!("conf-{i}"), "configMap": {"name": format!("conf-{i}")}}]
            });
            match i {
                0 => {
                    container["podInjectPolicy"] = json!("BeforeAppContainer");
                    container["shareVolumePolicy"] = json!({"type": "disabled"});
                    container["env"] = json!([{"name": "MODE", "value": "x"}, {"name": "LEVEL", "value": "info"},
                                              {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
                    container["resources"] = json!({"requests": {"cpu": "50m", "memory": "32Mi"},
                                                    "limits": {"cpu": "200m", "memory": "128Mi"}});
                }
                33 => container["podInjectPolicy"] = json!("AfterAppContainer"),
                66 => {
                    container["shareVolumePolicy"] = json!({"type": "disabled"});
                    container["transferEnv"] = json!([{"sourceContainerName": "app-0", "envNames": ["A", "B"]}]);
                    spec["namespace"] = json!("shop");
                }
                _ => {}
            }
            spec["containers"] = json!([container]);
            let mut ss: SidecarSet = serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": format!("ss-{i:03}")},
                "spec": spec
            }))
            .unwrap();
            default_sidecarset(&mut ss);
            ss
        })
        .collect()
}

pub fn index() -> Index {
    let (index, errors) = Index::from_sidecarsets(sidecarsets());
    assert!(errors.is_empty());
    index
}
