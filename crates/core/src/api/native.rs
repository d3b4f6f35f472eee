//! Native sidecar mode, an opt-in per SidecarSet: its `containers` are injected as Kubernetes
//! native sidecars (init containers with `restartPolicy: Always`, KEP-753) placed before the
//! pod's own init containers, so they start before every other container of the pod, stop after
//! them, and do not keep a Job's pod from completing. OpenKruise's API has no field for it, so it
//! is the project's own metadata:
//!
//! - on the SidecarSet, the annotation `sidecarset-operator.io/native-sidecars: "true"`
//!   (absent or `"false"`: the containers are injected as containers, as OpenKruise does).
//!
//! The SidecarSet's `initContainers` are not affected (one with `restartPolicy: Always` is a
//! native sidecar in either mode). The hashes do not include the annotation: they are
//! OpenKruise's, computed from the spec; a pod keeps the form it was created with (Kubernetes
//! cannot move a container between the lists of a running pod) and is upgraded in place in
//! that form.

use super::{PodInjectPolicy, SidecarSet};
use std::collections::BTreeMap;

/// SidecarSet annotation: with the value [`NATIVE_SIDECARS_ON`], the SidecarSet's containers are
/// injected as native sidecars.
pub const ANNOTATION_NATIVE_SIDECARS: &str = "sidecarset-operator.io/native-sidecars";
/// The value of [`ANNOTATION_NATIVE_SIDECARS`] that turns native sidecar mode on.
pub const NATIVE_SIDECARS_ON: &str = "true";
/// The value of [`ANNOTATION_NATIVE_SIDECARS`] that leaves it off (the same as no annotation).
pub const NATIVE_SIDECARS_OFF: &str = "false";
/// The first Kubernetes minor version (1.x) that runs native sidecars by default (the
/// `SidecarContainers` feature, beta and on from 1.29, GA in 1.33).
pub const NATIVE_SIDECARS_MIN_MINOR: u32 = 29;

/// Whether the SidecarSet's annotations turn native sidecar mode on.
pub fn native_sidecars(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION_NATIVE_SIDECARS))
        .is_some_and(|v| v == NATIVE_SIDECARS_ON)
}

impl SidecarSet {
    /// Whether this SidecarSet injects its containers as native sidecars
    /// ([`ANNOTATION_NATIVE_SIDECARS`]).
    pub fn native_sidecars(&self) -> bool {
        native_sidecars(self.metadata.annotations.as_ref())
    }
}

/// Whether a Kubernetes version (`major`, `minor` as the API server's `/version` reports them,
/// e.g. `"1"`, `"29+"`) runs native sidecars: 1.29 or later. `None` when the version cannot be
/// read.
pub fn version_runs_native_sidecars(major: &str, minor: &str) -> Option<bool> {
    let number = |s: &str| -> Option<u32> {
        let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    let (major, minor) = (number(major)?, number(minor)?);
    Some(major > 1 || (major == 1 && minor >= NATIVE_SIDECARS_MIN_MINOR))
}

/// Whether a kubelet of this version (a Node's `status.nodeInfo.kubeletVersion`, e.g.
/// `"v1.28.15"`, `"v1.30.4-eks-a737599"`, `"v1.29.3+k3s1"`) runs native sidecars: 1.29 or later.
/// An older kubelet does not know an init container's `restartPolicy: Always`: it waits for the
/// sidecar to end before starting the app, and the pod never starts. `None` when the version
/// cannot be read (a simulated node's `"fake"`, a development build's `v0.0.0`).
pub fn kubelet_runs_native_sidecars(version: &str) -> Option<bool> {
    let v = version.trim().trim_start_matches('v');
    let mut parts = v.split(['.', '-', '+']);
    let number = |s: Option<&str>| -> Option<u32> {
        let s = s?;
        (!s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (major, minor) = (number(parts.next())?, number(parts.next())?);
    if major == 0 {
        return None;
    }
    Some(major > 1 || minor >= NATIVE_SIDECARS_MIN_MINOR)
}

/// The annotation's value checked, and the features native sidecar mode cannot go with: each
/// `(field, message)` names the annotation and what to change.
///
/// - `upgradeStrategy.upgradeType: HotUpgrade`: a hot upgrade runs a pair of containers and
///   hands the work over between them (the working-container annotation, the empty image in the
///   idle one), a scheme built on regular containers; a native sidecar is restarted in place by
///   the kubelet when its image changes (Kubernetes 1.32 or later), which is ColdUpgrade.
/// - `podInjectPolicy: AfterAppContainer`: a native sidecar starts before the pod's init and app
///   containers and stops after them; "after the app containers" asks for the opposite order.
pub(super) fn check(ss: &SidecarSet) -> Vec<(String, String)> {
    let field = format!("metadata.annotations[{ANNOTATION_NATIVE_SIDECARS}]");
    match ss
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_NATIVE_SIDECARS))
    {
        None => return vec![],
        Some(v) if v == NATIVE_SIDECARS_OFF => return vec![],
        Some(v) if v == NATIVE_SIDECARS_ON => {}
        Some(v) => {
            return vec![(
                field,
                format!(
                    "{v:?} is not a value of this annotation: set it to {NATIVE_SIDECARS_ON:?} to inject this \
                     SidecarSet's containers as native sidecars (init containers with restartPolicy: Always), \
                     or to {NATIVE_SIDECARS_OFF:?} (or remove it) to inject them as containers"
                ),
            )];
        }
    }
    let mut errs = Vec::new();
    for (i, c) in ss.spec.containers.iter().enumerate() {
        if c.is_hot_upgrade() {
            errs.push((
                format!("spec.containers[{i}].upgradeStrategy.upgradeType"),
                format!(
                    "HotUpgrade cannot apply to a native sidecar, and the annotation {ANNOTATION_NATIVE_SIDECARS}: \
                     {NATIVE_SIDECARS_ON:?} injects container {:?} as one: a native sidecar is upgraded in place by \
                     the kubelet restarting it on the new image; use ColdUpgrade, or remove the annotation",
                    c.name()
                ),
            ));
        }
        if c.pod_inject_policy == Some(PodInjectPolicy::AfterAppContainer) {
            errs.push((
                format!("spec.containers[{i}].podInjectPolicy"),
                format!(
                    "AfterAppContainer cannot apply to a native sidecar, and the annotation {ANNOTATION_NATIVE_SIDECARS}: \
                     {NATIVE_SIDECARS_ON:?} injects container {:?} as one: native sidecars start before the pod's \
                     init and app containers and stop after them; use BeforeAppContainer, or remove the annotation",
                    c.name()
                ),
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ss(value: Option<&str>, containers: serde_json::Value) -> SidecarSet {
        let mut meta = json!({"name": "mesh"});
        if let Some(v) = value {
            meta["annotations"] = json!({ANNOTATION_NATIVE_SIDECARS: v});
        }
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": meta,
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "containers": containers}}))
        .unwrap()
    }

    #[test]
    fn only_true_turns_it_on() {
        let plain = json!([{"name": "proxy", "image": "proxy:1"}]);
        #[rustfmt::skip]
        let cases: &[(Option<&str>, bool, bool)] = &[
            // (value, on, valid)
            (None, false, true),
            (Some("true"), true, true),
            (Some("false"), false, true),
            (Some("True"), false, false),
            (Some("yes"), false, false),
            (Some(""), false, false),
        ];
        for (value, on, valid) in cases {
            let s = ss(*value, plain.clone());
            assert_eq!(s.native_sidecars(), *on, "{value:?}");
            assert_eq!(check(&s).is_empty(), *valid, "{value:?}");
            assert_eq!(super::super::validate(&s).is_ok(), *valid, "{value:?}");
        }
        let errs = super::super::validate(&ss(Some("yes"), plain)).unwrap_err();
        assert_eq!(
            errs.0[0].field,
            "metadata.annotations[sidecarset-operator.io/native-sidecars]"
        );
        assert!(errs.0[0].message.contains("\"yes\""), "{errs}");
    }

    #[test]
    fn features_that_cannot_apply_to_native_sidecars_are_refused_with_the_annotation_named() {
        let hot = json!({"name": "proxy", "image": "proxy:1",
            "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": "empty:1"}});
        let after =
            json!({"name": "log", "image": "log:1", "podInjectPolicy": "AfterAppContainer"});
        let fine = json!({"name": "agent", "image": "agent:1", "podInjectPolicy": "BeforeAppContainer",
            "upgradeStrategy": {"upgradeType": "ColdUpgrade"}});
        #[rustfmt::skip]
        let cases: &[(&str, serde_json::Value, &[&str])] = &[
            ("ColdUpgrade, BeforeAppContainer", json!([fine]), &[]),
            ("HotUpgrade", json!([fine, hot]), &["spec.containers[1].upgradeStrategy.upgradeType"]),
            ("AfterAppContainer", json!([after]), &["spec.containers[0].podInjectPolicy"]),
            ("both", json!([hot, after]), &["spec.containers[0].upgradeStrategy.upgradeType", "spec.containers[1].podInjectPolicy"]),
        ];
        for (what, containers, fields) in cases {
            let on = ss(Some("true"), containers.clone());
            let errs = super::super::validate(&on).err().unwrap_or_default();
            let got: Vec<&str> = errs.0.iter().map(|e| e.field.as_str()).collect();
            assert_eq!(got, *fields, "{what}: {errs}");
            for e in &errs.0 {
                assert!(
                    e.message.contains(ANNOTATION_NATIVE_SIDECARS),
                    "{what}: {e}"
                );
            }
            // Without the annotation (or with "false") the same SidecarSet is valid.
            for value in [None, Some("false")] {
                assert!(
                    super::super::validate(&ss(value, containers.clone())).is_ok(),
                    "{what}, {value:?}"
                );
            }
        }
    }

    #[test]
    fn kubelet_versions() {
        for (version, want) in [
            ("v1.29.0", Some(true)),
            ("v1.36.3", Some(true)),
            ("v1.28.15", Some(false)),
            ("v1.27.3+k3s1", Some(false)),
            ("v1.30.4-eks-a737599", Some(true)),
            ("v1.28.9-gke.1000000", Some(false)),
            ("1.31.0", Some(true)),
            ("v2.0.0", Some(true)),
            ("v0.0.0-master+$Format:%H$", None),
            ("fake", None),
            ("kwok-v0.7.0", None),
            ("", None),
            ("v1", None),
            ("v1.x.0", None),
        ] {
            assert_eq!(kubelet_runs_native_sidecars(version), want, "{version:?}");
        }
    }

    #[test]
    fn versions() {
        #[rustfmt::skip]
        let cases: &[(&str, &str, Option<bool>)] = &[
            ("1", "28", Some(false)),
            ("1", "29", Some(true)),
            ("1", "29+", Some(true)),
            ("1", "36", Some(true)),
            ("1", "28+", Some(false)),
            ("2", "0", Some(true)),
            ("0", "99", Some(false)),
            ("", "29", None),
            ("1", "", None),
        ];
        for (major, minor, want) in cases {
            assert_eq!(
                version_runs_native_sidecars(major, minor),
                *want,
                "{major}.{minor}"
            );
        }
    }
}
