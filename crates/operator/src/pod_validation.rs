//! A SidecarSet's containers, init containers and volumes checked by the API server's own pod
//! validation, once per SidecarSet write (from the validating webhook), never per pod.
//!
//! The webhook's own rules (`api::validate`) know the SidecarSet; only the API server knows every
//! rule of a pod spec (enums such as `imagePullPolicy`, quantities, ports, probes, volume sources
//! ...). Without this check such a SidecarSet is admitted and then every pod it selects is
//! refused at creation. So the validating webhook builds a synthetic pod template from the
//! SidecarSet ([`synthetic_template`]), asks the API server to create it with `dryRun=All`
//! ([`PodValidator::check`]) and maps the field paths of the refusal back to the SidecarSet's
//! ([`sidecarset_field`]).
//!
//! A **PodTemplate**, not a Pod: the API server validates its `template.spec` with the same
//! pod-spec validation as a pod's `spec`, but a dry-run PodTemplate does not go through what a
//! Pod goes through besides validation: Pod Security admission (the operator's namespace
//! enforces `restricted`, which would refuse most sidecars for reasons that say nothing about
//! the SidecarSet), ResourceQuota and LimitRange, and other mutating webhooks on pods. And the
//! operator's RBAC only gains `create` on podtemplates in its own namespace, which runs nothing;
//! `create` on pods would let its ServiceAccount run any pod there.
//!
//! When the dry-run cannot be made (any answer other than 422 Invalid, a timeout, no permission),
//! the SidecarSet is **admitted with an admission warning** saying it was not checked and why
//! (and a log line): the check adds to the webhook's own validation, it must not make every
//! SidecarSet write depend on one more API call succeeding (the webhook is `failurePolicy: Fail`,
//! so refusing would block all SidecarSet writes whenever the API server is slow or the RBAC of
//! an older chart lacks the permission). What is lost is only what was lost before this check:
//! pods are then refused at creation, with the API server's message.

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplate,
    PodTemplateSpec, Volume,
};
use kube::api::{Api, ObjectMeta, PostParams};
use sidecarset_core::api::{FieldError, SidecarSet, SidecarSetSpec};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The prefix of the generated name of a synthetic pod template.
pub const GENERATE_NAME: &str = "sidecarset-validation-";
/// Annotation on the synthetic template naming the SidecarSet it checks (seen in audit logs).
pub const ANNOTATION_SIDECARSET: &str = "sidecarset-operator.io/validation-of";
/// The placeholder app container's name when no sidecar has it (otherwise a suffix is added).
pub const PLACEHOLDER_CONTAINER: &str = "sidecarset-validation-app";
/// Its image (never pulled: the template is never stored).
pub const PLACEHOLDER_IMAGE: &str = "sidecarset-validation.invalid/app:0";

/// What [`PodValidator::check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodValidation {
    /// The API server accepts the SidecarSet's containers, init containers and volumes.
    Valid,
    /// The API server refuses them; the field paths are the SidecarSet's.
    Invalid(Vec<FieldError>),
    /// The check could not be made; why (admitted with this as a warning).
    Unchecked(String),
}

/// Only the fields of a SidecarSet a pod is validated from: when an UPDATE leaves them unchanged,
/// the API server is not asked again.
pub fn pod_fields_changed(new: &SidecarSetSpec, old: &SidecarSetSpec) -> bool {
    new.containers != old.containers
        || new.init_containers != old.init_containers
        || new.volumes != old.volumes
}

/// The pod template the API server validates for a SidecarSet: its init containers (native
/// sidecars with their `restartPolicy: Always`) and containers in the SidecarSet's order, so that
/// `spec.initContainers[i]` and `spec.containers[i]` are the SidecarSet's, then a placeholder
/// app container (a pod needs one; its name is none of the sidecars'). Its volumes are the
/// SidecarSet's in order, then a placeholder for each volume a container mounts that is not
/// there (shareVolumePolicy mounts the pod's own volumes): an emptyDir for a volumeMount, a
/// PersistentVolumeClaim for a volumeDevice (block devices need one).
pub fn synthetic_template(ss: &SidecarSet) -> PodTemplate {
    let spec = &ss.spec;
    let sidecars: Vec<&Container> = spec
        .init_containers
        .iter()
        .chain(&spec.containers)
        .map(|c| &c.container)
        .collect();
    let taken: BTreeSet<&str> = sidecars.iter().map(|c| c.name.as_str()).collect();
    let mut app_name = PLACEHOLDER_CONTAINER.to_string();
    let mut n = 0;
    while taken.contains(app_name.as_str()) {
        n += 1;
        app_name = format!("{PLACEHOLDER_CONTAINER}-{n}");
    }
    let mut containers: Vec<Container> = spec
        .containers
        .iter()
        .map(|c| c.container.clone())
        .collect();
    containers.push(Container {
        name: app_name,
        image: Some(PLACEHOLDER_IMAGE.into()),
        ..Default::default()
    });

    let mut volumes = spec.volumes.clone();
    let mut named: BTreeSet<String> = volumes.iter().map(|v| v.name.clone()).collect();
    // Placeholders in a fixed order (by name), block devices first claimed as PVCs.
    let mut missing: BTreeMap<String, bool> = BTreeMap::new();
    for c in &sidecars {
        for d in c.volume_devices.iter().flatten() {
            if !named.contains(&d.name) {
                missing.insert(d.name.clone(), true);
            }
        }
        for m in c.volume_mounts.iter().flatten() {
            if !named.contains(&m.name) {
                missing.entry(m.name.clone()).or_insert(false);
            }
        }
    }
    for (name, block) in missing {
        named.insert(name.clone());
        volumes.push(if block {
            Volume {
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: "placeholder".into(),
                    ..Default::default()
                }),
                name,
                ..Default::default()
            }
        } else {
            Volume {
                empty_dir: Some(EmptyDirVolumeSource::default()),
                name,
                ..Default::default()
            }
        });
    }

    PodTemplate {
        metadata: ObjectMeta {
            generate_name: Some(GENERATE_NAME.into()),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_SIDECARSET.to_string(),
                ss.name().to_string(),
            )])),
            ..Default::default()
        },
        template: Some(PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                init_containers: (!spec.init_containers.is_empty()).then(|| {
                    spec.init_containers
                        .iter()
                        .map(|c| c.container.clone())
                        .collect()
                }),
                containers,
                volumes: (!volumes.is_empty()).then_some(volumes),
                ..Default::default()
            }),
        }),
    }
}

/// The SidecarSet field a field path of the API server's refusal of [`synthetic_template`] is
/// about: `template.spec.containers[1].imagePullPolicy` is `spec.containers[1].imagePullPolicy`,
/// `...initContainers[i]...` and `...volumes[i]...` alike (the template keeps the SidecarSet's
/// order). None for a path the SidecarSet's fields did not make (the placeholders, pod-level
/// fields): that is not the SidecarSet's fault.
pub fn sidecarset_field(pod_field: &str, ss: &SidecarSetSpec) -> Option<String> {
    let rest = pod_field.strip_prefix("template.").unwrap_or(pod_field);
    let rest = rest.strip_prefix("spec.")?;
    for (list, len) in [
        ("initContainers", ss.init_containers.len()),
        ("containers", ss.containers.len()),
        ("volumes", ss.volumes.len()),
    ] {
        let Some(after) = rest.strip_prefix(list) else {
            continue;
        };
        if after.is_empty() {
            // The list as a whole (e.g. two native sidecars in conflict).
            return Some(format!("spec.{list}"));
        }
        let Some(index) = after.strip_prefix('[') else {
            continue;
        };
        let (digits, tail) = index.split_once(']')?;
        let i: usize = digits.parse().ok()?;
        if i >= len {
            return None;
        }
        if !(tail.is_empty() || tail.starts_with('.') || tail.starts_with('[')) {
            return None;
        }
        return Some(format!("spec.{list}[{i}]{tail}"));
    }
    None
}

/// What the API server's 422 refusal of the synthetic template says, as the SidecarSet's field
/// errors. Causes about fields the SidecarSet did not make turn the whole answer into
/// [`PodValidation::Unchecked`] (a fault of the template, not of the SidecarSet).
pub fn outcome_of_refusal(status: &kube::core::Status, ss: &SidecarSetSpec) -> PodValidation {
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.as_slice())
        .unwrap_or_default();
    if causes.is_empty() {
        return PodValidation::Unchecked(format!(
            "the API server refused the pod built from it without naming a field: {}",
            status.message
        ));
    }
    let mut errors = Vec::new();
    for cause in causes {
        match sidecarset_field(&cause.field, ss) {
            Some(field) => errors.push(FieldError {
                field,
                message: format!("{} (the API server's pod validation)", cause.message),
            }),
            None => {
                return PodValidation::Unchecked(format!(
                    "the API server refused a field of the pod built from it that is not the SidecarSet's ({}: {})",
                    cause.field, cause.message
                ));
            }
        }
    }
    PodValidation::Invalid(errors)
}

/// Asks the API server to validate SidecarSets as pods (see the module documentation).
/// Dry-runs in flight at once: a forged stream of SidecarSet reviews cannot turn into as
/// many API calls (more wait for a slot within the same timeout, then are admitted unchecked).
pub const DRY_RUNS_IN_FLIGHT: usize = 4;
/// Outcomes remembered (by the pod spec checked), and for how long: the same containers and
/// volumes are not sent to the API server again (a SidecarSet applied over and over, or forged
/// reviews repeating one).
pub const OUTCOMES_KEPT: usize = 256;
pub const OUTCOME_TTL: Duration = Duration::from_secs(600);

type Outcomes = HashMap<[u8; 32], (PodValidation, std::time::Instant)>;

#[derive(Clone)]
pub struct PodValidator {
    client: kube::Client,
    namespace: String,
    timeout: Duration,
    in_flight: Arc<tokio::sync::Semaphore>,
    outcomes: Arc<Mutex<Outcomes>>,
}

/// What identifies a check: the pod spec of the template (not its name or annotation).
fn outcome_key(template: &PodTemplate) -> [u8; 32] {
    use sha2::Digest;
    let spec = serde_json::to_vec(&template.template).unwrap_or_default();
    sha2::Sha256::digest(&spec).into()
}

impl PodValidator {
    /// Dry-runs pod templates in `namespace` (the operator's), each call bounded by `timeout`.
    pub fn new(client: kube::Client, namespace: impl Into<String>, timeout: Duration) -> Self {
        PodValidator {
            client,
            namespace: namespace.into(),
            timeout,
            in_flight: Arc::new(tokio::sync::Semaphore::new(DRY_RUNS_IN_FLIGHT)),
            outcomes: Default::default(),
        }
    }

    fn remembered(&self, key: &[u8; 32]) -> Option<PodValidation> {
        let outcomes = self.outcomes.lock().ok()?;
        outcomes
            .get(key)
            .filter(|(_, at)| at.elapsed() < OUTCOME_TTL)
            .map(|(o, _)| o.clone())
    }

    fn remember(&self, key: [u8; 32], outcome: &PodValidation) {
        if matches!(outcome, PodValidation::Unchecked(_)) {
            return;
        }
        if let Ok(mut outcomes) = self.outcomes.lock() {
            if outcomes.len() >= OUTCOMES_KEPT {
                outcomes.retain(|_, (_, at)| at.elapsed() < OUTCOME_TTL);
                if outcomes.len() >= OUTCOMES_KEPT {
                    outcomes.clear();
                }
            }
            outcomes.insert(key, (outcome.clone(), std::time::Instant::now()));
        }
    }

    /// One server-side dry-run create of the SidecarSet's synthetic pod template (or the
    /// outcome of the same pod spec checked lately).
    pub async fn check(&self, ss: &SidecarSet) -> PodValidation {
        let api: Api<PodTemplate> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = PostParams {
            dry_run: true,
            field_manager: Some("sidecarset-operator".into()),
        };
        let template = synthetic_template(ss);
        let key = outcome_key(&template);
        if let Some(outcome) = self.remembered(&key) {
            tracing::debug!(
                sidecarset = ss.name(),
                ?outcome,
                "pod validation: the same pod spec was checked lately"
            );
            return outcome;
        }
        let start = std::time::Instant::now();
        let answer = tokio::time::timeout(self.timeout, async {
            let _slot = self.in_flight.acquire().await;
            api.create(&params, &template).await
        })
        .await;
        let outcome = match answer {
            Ok(Ok(_)) => PodValidation::Valid,
            Ok(Err(kube::Error::Api(status))) if status.code == 422 => {
                outcome_of_refusal(&status, &ss.spec)
            }
            Ok(Err(kube::Error::Api(status))) => PodValidation::Unchecked(format!(
                "the dry-run of a pod template in namespace {} failed ({} {}): {}",
                self.namespace, status.code, status.reason, status.message
            )),
            Ok(Err(e)) => PodValidation::Unchecked(format!(
                "the dry-run of a pod template in namespace {} failed: {e}",
                self.namespace
            )),
            Err(_) => PodValidation::Unchecked(format!(
                "the API server did not answer the dry-run within {:?} (at most {DRY_RUNS_IN_FLIGHT} run at once)",
                self.timeout
            )),
        };
        tracing::debug!(sidecarset = ss.name(), elapsed = ?start.elapsed(), ?outcome, "pod validation dry-run");
        self.remember(key, &outcome);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ss(spec: serde_json::Value) -> SidecarSet {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"a": "b"}});
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "mesh"}, "spec": spec}))
        .unwrap()
    }

    fn pod_spec(t: &PodTemplate) -> serde_json::Value {
        serde_json::to_value(t.template.as_ref().unwrap().spec.as_ref().unwrap()).unwrap()
    }

    #[test]
    fn the_template_keeps_the_sidecarsets_order_and_adds_only_what_a_pod_needs() {
        let s = ss(json!({
            "initContainers": [
                {"name": "z-init", "image": "i:1"},
                {"name": "a-native", "image": "n:1", "restartPolicy": "Always"}],
            "containers": [
                {"name": "proxy", "image": "p:1", "imagePullPolicy": "Sometimes",
                 "podInjectPolicy": "AfterAppContainer", "upgradeStrategy": {"upgradeType": "ColdUpgrade"},
                 "volumeMounts": [{"name": "certs", "mountPath": "/c"}, {"name": "pods-own", "mountPath": "/o"}],
                 "volumeDevices": [{"name": "disk", "devicePath": "/dev/x"}]},
                {"name": "sidecarset-validation-app", "image": "l:1"}],
            "volumes": [{"name": "certs", "secret": {"secretName": "c"}}]
        }));
        let t = synthetic_template(&s);
        assert_eq!(t.metadata.generate_name.as_deref(), Some(GENERATE_NAME));
        assert_eq!(t.metadata.name, None);
        assert_eq!(
            t.metadata.annotations.as_ref().unwrap()[ANNOTATION_SIDECARSET],
            "mesh"
        );
        let spec = pod_spec(&t);
        // Init containers in the SidecarSet's order (not sorted as injection does), native
        // sidecars keep restartPolicy.
        assert_eq!(
            spec["initContainers"],
            json!([{"name": "z-init", "image": "i:1"},
                   {"name": "a-native", "image": "n:1", "restartPolicy": "Always"}])
        );
        // Containers as they are (the SidecarSet-only fields are not pod fields), then the
        // placeholder app, whose name does not clash with a sidecar's.
        let containers = spec["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 3);
        assert_eq!(containers[0]["imagePullPolicy"], "Sometimes");
        assert!(containers[0].get("podInjectPolicy").is_none());
        assert!(containers[0].get("upgradeStrategy").is_none());
        assert_eq!(containers[1]["name"], "sidecarset-validation-app");
        assert_eq!(
            containers[2],
            json!({"name": "sidecarset-validation-app-1", "image": PLACEHOLDER_IMAGE})
        );
        // The SidecarSet's volumes first, then placeholders for the pod's own.
        assert_eq!(
            spec["volumes"],
            json!([{"name": "certs", "secret": {"secretName": "c"}},
                   {"name": "disk", "persistentVolumeClaim": {"claimName": "placeholder"}},
                   {"name": "pods-own", "emptyDir": {}}])
        );
        // Nothing else at the pod level.
        let keys: Vec<&String> = spec.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["containers", "initContainers", "volumes"]);
    }

    #[test]
    fn only_init_containers_and_no_volumes() {
        let t = synthetic_template(&ss(
            json!({"initContainers": [{"name": "n", "image": "n:1"}]}),
        ));
        let spec = pod_spec(&t);
        assert_eq!(
            spec["containers"],
            json!([{"name": PLACEHOLDER_CONTAINER, "image": PLACEHOLDER_IMAGE}])
        );
        assert!(spec.get("volumes").is_none());
    }

    #[test]
    fn api_server_paths_map_to_the_sidecarsets() {
        let s = ss(json!({
            "initContainers": [{"name": "n", "image": "n:1"}],
            "containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}],
            "volumes": [{"name": "v", "emptyDir": {}}]
        }))
        .spec;
        let cases: [(&str, Option<&str>); 16] = [
            (
                "template.spec.containers[1].imagePullPolicy",
                Some("spec.containers[1].imagePullPolicy"),
            ),
            (
                "spec.containers[0].ports[2].containerPort",
                Some("spec.containers[0].ports[2].containerPort"),
            ),
            (
                "template.spec.containers[0].resources.limits[cpu]",
                Some("spec.containers[0].resources.limits[cpu]"),
            ),
            (
                "template.spec.initContainers[0].livenessProbe",
                Some("spec.initContainers[0].livenessProbe"),
            ),
            (
                "template.spec.volumes[0].emptyDir.sizeLimit",
                Some("spec.volumes[0].emptyDir.sizeLimit"),
            ),
            ("template.spec.volumes[0]", Some("spec.volumes[0]")),
            ("template.spec.initContainers", Some("spec.initContainers")),
            // The placeholder app container and placeholder volumes are not the SidecarSet's.
            ("template.spec.containers[2].image", None),
            ("template.spec.volumes[1].emptyDir", None),
            ("template.spec.initContainers[1].name", None),
            // Pod-level and metadata fields, and paths that only look alike.
            ("template.spec.hostNetwork", None),
            ("metadata.generateName", None),
            ("template.spec.containersX[0]", None),
            ("template.spec.containers[x].name", None),
            ("template.spec.containers[0]name", None),
            ("", None),
        ];
        for (pod, want) in cases {
            assert_eq!(sidecarset_field(pod, &s).as_deref(), want, "{pod:?}");
        }
    }

    fn status(causes: &[(&str, &str)]) -> kube::core::Status {
        serde_json::from_value(json!({
            "status": "Failure", "code": 422, "reason": "Invalid",
            "message": "PodTemplate \"sidecarset-validation-x\" is invalid: ...",
            "details": {"kind": "PodTemplate", "causes": causes.iter()
                .map(|(f, m)| json!({"reason": "FieldValueNotSupported", "field": f, "message": m}))
                .collect::<Vec<_>>()}
        }))
        .unwrap()
    }

    #[test]
    fn a_refusal_becomes_the_sidecarsets_field_errors() {
        let s = ss(json!({"containers": [{"name": "a", "image": "a:1"}]})).spec;
        let got = outcome_of_refusal(
            &status(&[(
                "template.spec.containers[0].imagePullPolicy",
                "Unsupported value: \"Sometimes\"",
            )]),
            &s,
        );
        assert_eq!(
            got,
            PodValidation::Invalid(vec![FieldError {
                field: "spec.containers[0].imagePullPolicy".into(),
                message: "Unsupported value: \"Sometimes\" (the API server's pod validation)"
                    .into()
            }])
        );
        // A cause about the placeholder: not the SidecarSet's fault, not refused.
        let got = outcome_of_refusal(
            &status(&[
                ("template.spec.containers[0].imagePullPolicy", "bad"),
                ("template.spec.containers[1].image", "bad"),
            ]),
            &s,
        );
        assert!(
            matches!(&got, PodValidation::Unchecked(why) if why.contains("template.spec.containers[1].image")),
            "{got:?}"
        );
        // No causes at all.
        assert!(matches!(
            outcome_of_refusal(&status(&[]), &s),
            PodValidation::Unchecked(_)
        ));
    }

    #[test]
    fn only_changes_to_pod_fields_are_checked_again() {
        let a = ss(json!({"containers": [{"name": "a", "image": "a:1"}]})).spec;
        let mut b = a.clone();
        b.update_strategy.paused = true;
        assert!(!pod_fields_changed(&b, &a));
        b.containers[0].container.image = Some("a:2".into());
        assert!(pod_fields_changed(&b, &a));
        let mut c = a.clone();
        c.volumes.push(Volume {
            name: "v".into(),
            ..Default::default()
        });
        assert!(pod_fields_changed(&c, &a));
    }
}
