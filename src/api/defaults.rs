//! Defaults applied to SidecarSets by the mutating webhook (and by the offline `inject` command,
//! which sees SidecarSets that never went through the API server). The same values as OpenKruise.

use super::{
    PatchPolicy, PodInjectPolicy, ShareVolumePolicy, ShareVolumePolicyType, SidecarContainer,
    SidecarContainerUpgradeStrategy, SidecarSet, UpdateStrategyType, UpgradeType,
};
use k8s_openapi::api::core::v1::{Container, Probe, Volume};
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
    c.share_volume_policy.get_or_insert(ShareVolumePolicy {
        type_: ShareVolumePolicyType::Disabled,
    });
    // OpenKruise's CRD default: an absent regex is ".*" (an explicit "" stays, and is invalid).
    if let Some(p) = &mut c.resources_policy {
        p.target_containers_name_regex
            .get_or_insert_with(|| super::DEFAULT_TARGET_CONTAINERS_NAME_REGEX.into());
    }
    default_container(&mut c.container);
}

/// The API server's defaults for a container (imagePullPolicy, termination message, port
/// protocol, fieldRef apiVersion, probe timings), so that a SidecarSet's containers hash and
/// compare the same as the containers the API server stores in pods.
pub fn default_container(c: &mut Container) {
    if c.image_pull_policy.is_none() {
        let image = c.image.as_deref().unwrap_or("");
        c.image_pull_policy = Some(default_pull_policy(image).to_string());
    }
    c.termination_message_path
        .get_or_insert_with(|| "/dev/termination-log".into());
    c.termination_message_policy
        .get_or_insert_with(|| "File".into());
    for p in c.ports.iter_mut().flatten() {
        p.protocol.get_or_insert_with(|| "TCP".into());
    }
    for e in c.env.iter_mut().flatten() {
        if let Some(fr) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            fr.api_version.get_or_insert_with(|| "v1".into());
        }
    }
    for p in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(p);
    }
}

fn default_probe(p: &mut Probe) {
    p.timeout_seconds.get_or_insert(1);
    p.period_seconds.get_or_insert(10);
    p.success_threshold.get_or_insert(1);
    p.failure_threshold.get_or_insert(3);
    if let Some(h) = &mut p.http_get {
        h.path.get_or_insert_with(|| "/".into());
        h.scheme.get_or_insert_with(|| "HTTP".into());
    }
}

/// `Always` for `:latest` or untagged images, `IfNotPresent` otherwise (as the API server does).
fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        None => "Always",
        Some((_, "latest")) => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_volume(v: &mut Volume) {
    if let Some(s) = &mut v.config_map {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(s) = &mut v.secret {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(s) = &mut v.downward_api {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
    }
    if let Some(s) = &mut v.projected {
        s.default_mode.get_or_insert(DEFAULT_FILE_MODE);
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
}
