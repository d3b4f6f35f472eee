//! Defaults applied to SidecarSets by the mutating webhook (and by the offline `inject` command,
//! which sees SidecarSets that never went through the API server). The same values as OpenKruise.

use super::quantity;
use super::{
    PatchPolicy, PodInjectPolicy, ShareVolumePolicy, ShareVolumePolicyType, SidecarContainer,
    SidecarContainerUpgradeStrategy, SidecarSet, UpdateStrategyType, UpgradeType,
};
use k8s_openapi::api::core::v1::{Container, HTTPGetAction, ObjectFieldSelector, Probe, Volume};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Default revisionHistoryLimit.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;
const DEFAULT_FILE_MODE: i32 = 0o644;

/// Fills every unset field that has a default. Idempotent.
pub fn default_sidecarset(ss: &mut SidecarSet) {
    let spec = &mut ss.spec;
    let us = &mut spec.update_strategy;
    us.type_.get_or_insert(UpdateStrategyType::RollingUpdate);
    us.max_unavailable.get_or_insert(IntOrString::Int(1));
    us.partition.get_or_insert(IntOrString::Int(0));
    for c in &mut spec.containers {
        default_sidecar(c, PodInjectPolicy::BeforeAppContainer);
    }
    for c in &mut spec.init_containers {
        default_sidecar(c, PodInjectPolicy::AfterAppContainer);
    }
    for v in &mut spec.volumes {
        default_volume(v);
    }
    spec.revision_history_limit
        .get_or_insert(DEFAULT_REVISION_HISTORY_LIMIT);
    for p in &mut spec.patch_pod_metadata {
        p.patch_policy.get_or_insert(PatchPolicy::Retain);
    }
    if let Some(rev) = &mut spec.injection_strategy.revision {
        rev.policy
            .get_or_insert(super::InjectRevisionPolicy::Always);
    }
}

fn default_sidecar(c: &mut SidecarContainer, policy: PodInjectPolicy) {
    c.pod_inject_policy.get_or_insert(policy);
    let us = c
        .upgrade_strategy
        .get_or_insert_with(SidecarContainerUpgradeStrategy::default);
    us.upgrade_type.get_or_insert(UpgradeType::ColdUpgrade);
    // `shareVolumePolicy` is a struct in OpenKruise's Go types (never omitted, so `{}` is what a
    // Go client sends): its type defaults to disabled. `shareVolumeDevicePolicy` is a pointer
    // there and is not defaulted: `{}` stays `{}` (and counts in the hash as such).
    c.share_volume_policy
        .get_or_insert_with(ShareVolumePolicy::default)
        .type_
        .get_or_insert(ShareVolumePolicyType::Disabled);
    for t in &mut c.transfer_env {
        if let Some(fr) = t
            .source_container_name_from
            .as_mut()
            .and_then(|s| s.field_ref.as_mut())
        {
            default_field_selector(fr);
        }
    }
    // OpenKruise's CRD default: an absent regex is ".*" (an explicit "" stays, and is invalid).
    if let Some(p) = &mut c.resources_policy {
        p.target_containers_name_regex
            .get_or_insert_with(|| super::DEFAULT_TARGET_CONTAINERS_NAME_REGEX.into());
    }
    default_container(&mut c.container);
}

/// Sets a string field Go declares as a plain `string`: unset and `""` are the same there.
fn set_if_empty(field: &mut Option<String>, value: &str) {
    if field.as_deref().is_none_or(str::is_empty) {
        *field = Some(value.to_string());
    }
}

/// Sets a number field Go declares as a plain `int32`: unset and `0` are the same there.
fn set_if_zero(field: &mut Option<i32>, value: i32) {
    if field.is_none_or(|v| v == 0) {
        *field = Some(value);
    }
}

fn default_field_selector(fr: &mut ObjectFieldSelector) {
    if fr.api_version.as_deref().is_none_or(str::is_empty) {
        fr.api_version = Some("v1".into());
    }
}

/// OpenKruise's defaults for a sidecar container (its `setDefaultContainer`, built from the
/// Kubernetes defaulting functions): imagePullPolicy, termination message, port protocol,
/// fieldRef apiVersion, resource quantities rounded up to a milli (and written canonically),
/// liveness and readiness probe timings, and the HTTP defaults of probes and lifecycle hooks.
/// Like OpenKruise, not the startup probe (the API server defaults it in the pod): the hash
/// of the SidecarSet must be OpenKruise's.
pub fn default_container(c: &mut Container) {
    if c.image_pull_policy.as_deref().is_none_or(str::is_empty) {
        let image = c.image.as_deref().unwrap_or("");
        c.image_pull_policy = Some(default_pull_policy(image).to_string());
    }
    set_if_empty(&mut c.termination_message_path, "/dev/termination-log");
    set_if_empty(&mut c.termination_message_policy, "File");
    for p in c.ports.iter_mut().flatten() {
        set_if_empty(&mut p.protocol, "TCP");
    }
    for e in c.env.iter_mut().flatten() {
        let Some(from) = e.value_from.as_mut() else {
            continue;
        };
        if let Some(fr) = from.field_ref.as_mut() {
            default_field_selector(fr);
        }
        // Not defaulted by OpenKruise, but written canonically by its encoder.
        if let Some(d) = from
            .resource_field_ref
            .as_mut()
            .and_then(|r| r.divisor.as_mut())
            && let Some(q) = quantity::canonical(&d.0)
        {
            d.0 = q;
        }
    }
    if let Some(r) = c.resources.as_mut() {
        for list in [r.limits.as_mut(), r.requests.as_mut()]
            .into_iter()
            .flatten()
        {
            for q in list.values_mut() {
                if let Some(rounded) = quantity::canonical_resource(&q.0) {
                    q.0 = rounded;
                }
            }
        }
    }
    for p in [&mut c.liveness_probe, &mut c.readiness_probe]
        .into_iter()
        .flatten()
    {
        default_probe(p);
    }
    if let Some(l) = c.lifecycle.as_mut() {
        for h in [l.post_start.as_mut(), l.pre_stop.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Some(g) = h.http_get.as_mut() {
                default_http_get(g);
            }
        }
    }
}

/// The API server's pod defaulting that changes what an injection computes: in every container
/// and init container with `resources.limits`, each resource limited but not requested is
/// requested at its limit (Kubernetes' `SetDefaults_Pod`). The API server applies it before
/// the mutating webhooks see a pod (a `resourcesPolicy` reads the result) and again to what
/// they return. Works on the pod's JSON, so unknown fields stay as they are. Idempotent.
pub fn default_pod_requests(pod: &mut serde_json::Value) {
    use serde_json::Value;
    for list in ["containers", "initContainers"] {
        let containers = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten() {
            let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut) else {
                continue;
            };
            let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
                continue;
            };
            let requests = resources
                .entry("requests")
                .or_insert_with(|| Value::Object(Default::default()));
            if requests.is_null() {
                *requests = Value::Object(Default::default());
            }
            if let Some(requests) = requests.as_object_mut() {
                for (name, q) in limits {
                    requests.entry(name).or_insert(q);
                }
            }
        }
    }
}

fn default_probe(p: &mut Probe) {
    set_if_zero(&mut p.timeout_seconds, 1);
    set_if_zero(&mut p.period_seconds, 10);
    set_if_zero(&mut p.success_threshold, 1);
    set_if_zero(&mut p.failure_threshold, 3);
    if let Some(h) = &mut p.http_get {
        default_http_get(h);
    }
}

fn default_http_get(h: &mut HTTPGetAction) {
    set_if_empty(&mut h.path, "/");
    set_if_empty(&mut h.scheme, "HTTP");
}

/// `Always` for `:latest` or untagged images, `IfNotPresent` otherwise (as the API server does:
/// a digest without a tag, or an image it cannot parse, such as an empty one, is
/// `IfNotPresent`).
fn default_pull_policy(image: &str) -> &'static str {
    if image.is_empty() {
        return "IfNotPresent";
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, _)) => (name, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.split_once(':') {
        Some((_, "latest")) => "Always",
        Some(_) => "IfNotPresent",
        None if digest => "IfNotPresent",
        None => "Always",
    }
}

/// OpenKruise's volume defaults (its `SetDefaultPodVolumes`): a volume without a source is an
/// emptyDir, file modes 0644, hostPath type `""`, fieldRef apiVersion, token expiry one hour.
fn default_volume(v: &mut Volume) {
    let only_name = serde_json::to_value(&*v)
        .ok()
        .and_then(|j| j.as_object().map(|m| m.keys().all(|k| k == "name")))
        .unwrap_or(false);
    if only_name {
        v.empty_dir = Some(Default::default());
    }
    if let Some(s) = &mut v.host_path {
        s.type_.get_or_insert_with(String::new);
    }
    if let Some(s) = &mut v.config_map {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(s) = &mut v.secret {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(s) = &mut v.downward_api {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
        for item in s.items.iter_mut().flatten() {
            if let Some(fr) = item.field_ref.as_mut() {
                default_field_selector(fr);
            }
        }
    }
    if let Some(s) = &mut v.projected {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
        for src in s.sources.iter_mut().flatten() {
            if let Some(d) = src.downward_api.as_mut() {
                for item in d.items.iter_mut().flatten() {
                    if let Some(fr) = item.field_ref.as_mut() {
                        default_field_selector(fr);
                    }
                }
            }
            if let Some(t) = src.service_account_token.as_mut() {
                t.expiration_seconds.get_or_insert(3600);
            }
        }
    }
    // Not defaulted by OpenKruise, but written canonically by its encoder.
    if let Some(q) = v.empty_dir.as_mut().and_then(|e| e.size_limit.as_mut())
        && let Some(c) = quantity::canonical(&q.0)
    {
        q.0 = c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_policy_follows_the_tag() {
        for (image, want) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.25", "IfNotPresent"),
            ("registry.local:5000/proxy", "Always"),
            ("registry.local:5000/proxy:v2", "IfNotPresent"),
            ("proxy@sha256:abcd", "IfNotPresent"),
            ("proxy:latest@sha256:abcd", "Always"),
            ("proxy:1@sha256:abcd", "IfNotPresent"),
            ("", "IfNotPresent"),
        ] {
            assert_eq!(default_pull_policy(image), want, "{image}");
        }
    }

    #[test]
    fn resources_policy_regex_defaults_to_every_name_but_an_empty_one_stays() {
        let mut ss: SidecarSet = serde_saphyr::from_str(
            r#"
metadata: {name: s}
spec:
  containers:
  - name: a
    image: i
    resourcesPolicy: {targetContainersMode: sum, resourcesExpr: {limits: {cpu: cpu}}}
  - name: b
    image: i
    resourcesPolicy: {targetContainersMode: max, targetContainersNameRegex: "", resourcesExpr: {}}
  initContainers:
  - name: c
    image: i
    restartPolicy: Always
    resourcesPolicy: {targetContainersMode: max, targetContainersNameRegex: "^app$", resourcesExpr: {}}
"#,
        )
        .unwrap();
        default_sidecarset(&mut ss);
        let regex = |c: &SidecarContainer| {
            c.resources_policy
                .as_ref()
                .unwrap()
                .target_containers_name_regex
                .clone()
        };
        assert_eq!(regex(&ss.spec.containers[0]).as_deref(), Some(".*"));
        assert_eq!(regex(&ss.spec.containers[1]).as_deref(), Some(""));
        assert_eq!(regex(&ss.spec.init_containers[0]).as_deref(), Some("^app$"));
    }

    #[test]
    fn defaults_are_idempotent_and_fill_openkruise_values() {
        let mut ss: SidecarSet = serde_saphyr::from_str(
            r#"
apiVersion: apps.kruise.io/v1alpha1
kind: SidecarSet
metadata: {name: s}
spec:
  selector: {matchLabels: {app: a}}
  containers: [{name: c, image: "img:1", ports: [{containerPort: 80}]}]
  initContainers: [{name: i, image: img}]
  patchPodMetadata: [{annotations: {a: b}}]
"#,
        )
        .unwrap();
        default_sidecarset(&mut ss);
        let once = ss.clone();
        default_sidecarset(&mut ss);
        assert_eq!(once, ss);
        let s = &ss.spec;
        assert_eq!(
            s.update_strategy.type_,
            Some(UpdateStrategyType::RollingUpdate)
        );
        assert_eq!(s.update_strategy.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(s.update_strategy.partition, Some(IntOrString::Int(0)));
        assert_eq!(s.revision_history_limit, Some(10));
        assert_eq!(
            s.containers[0].pod_inject_policy,
            Some(PodInjectPolicy::BeforeAppContainer)
        );
        assert_eq!(
            s.init_containers[0].pod_inject_policy,
            Some(PodInjectPolicy::AfterAppContainer)
        );
        assert_eq!(
            s.containers[0].container.image_pull_policy.as_deref(),
            Some("IfNotPresent")
        );
        assert_eq!(
            s.init_containers[0].container.image_pull_policy.as_deref(),
            Some("Always")
        );
        assert_eq!(
            s.containers[0].container.ports.as_ref().unwrap()[0]
                .protocol
                .as_deref(),
            Some("TCP")
        );
        assert_eq!(
            s.patch_pod_metadata[0].patch_policy,
            Some(PatchPolicy::Retain)
        );
        assert_eq!(
            s.containers[0]
                .upgrade_strategy
                .as_ref()
                .unwrap()
                .upgrade_type,
            Some(UpgradeType::ColdUpgrade)
        );
    }

    #[test]
    fn pod_requests_default_to_limits_only_where_missing() {
        let mut pod = serde_json::json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                            "requests": {"memory": "200Mi"}}, "x-unknown": 1},
                {"name": "b"},
                {"name": "c", "resources": {"limits": {}}}
            ],
            "initContainers": [{"name": "i", "resources": {"limits": {"cpu": "100m"}}}]
        }});
        default_pod_requests(&mut pod);
        let want = serde_json::json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                                            "requests": {"cpu": "1", "memory": "200Mi"}}, "x-unknown": 1},
                {"name": "b"},
                {"name": "c", "resources": {"limits": {}, "requests": {}}}
            ],
            "initContainers": [{"name": "i", "resources": {"limits": {"cpu": "100m"},
                                                          "requests": {"cpu": "100m"}}}]
        }});
        assert_eq!(pod, want);
        default_pod_requests(&mut pod);
        assert_eq!(pod, want, "idempotent");
    }
}
