//! `upgradeStrategy.upgradeType: HotUpgrade`, in OpenKruise's names: a hot-upgrade sidecar `c`
//! runs in a pod as two containers, `c-1` and `c-2`. One of them works (the pod annotation
//! [`ANNOTATION_WORKING_HOT_UPGRADE`] names it); the other, the idle one, runs the SidecarSet's
//! `hotUpgradeEmptyImage`. An upgrade puts the new image into the idle container, the two hand
//! the work over between themselves, and the old one is then reset to the empty image.
//!
//! Each of the two containers reads its version and the other's through env vars
//! ([`ENV_SIDECARSET_VERSION`], [`ENV_SIDECARSET_VERSION_ALT`]) taken from the pod's annotations
//! ([`version_annotation`], [`version_alt_annotation`]): "1" for the first sidecar injected, "0"
//! for the empty container, and the SidecarSet's `resourceVersion` after an upgrade.

use super::{SidecarContainer, SidecarSet, UpgradeType};
use std::collections::BTreeMap;

/// Pod annotation: a JSON object of sidecar name → the container of its pair that works now,
/// e.g. `{"proxy":"proxy-1"}`.
pub const ANNOTATION_WORKING_HOT_UPGRADE: &str =
    "kruise.io/sidecarset-working-hotupgrade-container";
/// Env var of each hot-upgrade container: its own version.
pub const ENV_SIDECARSET_VERSION: &str = "SIDECARSET_VERSION";
/// Env var of each hot-upgrade container: the version of the other container of its pair.
pub const ENV_SIDECARSET_VERSION_ALT: &str = "SIDECARSET_VERSION_ALT";

const VERSION_PREFIX: &str = "version.sidecarset.kruise.io/";
const VERSION_ALT_PREFIX: &str = "versionalt.sidecarset.kruise.io/";

/// The two containers of hot-upgrade sidecar `name`: `name-1`, `name-2`.
pub fn hot_upgrade_names(name: &str) -> (String, String) {
    (format!("{name}-1"), format!("{name}-2"))
}

/// Pod annotation with the version of hot-upgrade container `container` (`proxy-1`).
pub fn version_annotation(container: &str) -> String {
    format!("{VERSION_PREFIX}{container}")
}

/// Pod annotation with the version of the other container of `container`'s pair.
pub fn version_alt_annotation(container: &str) -> String {
    format!("{VERSION_ALT_PREFIX}{container}")
}

/// Whether `key` is one of the hot-upgrade annotations (the controller keeps them).
pub fn is_hot_upgrade_annotation(key: &str) -> bool {
    key == ANNOTATION_WORKING_HOT_UPGRADE
        || key.starts_with(VERSION_PREFIX)
        || key.starts_with(VERSION_ALT_PREFIX)
}

/// The pod's [`ANNOTATION_WORKING_HOT_UPGRADE`] map; empty when absent or not a JSON object of
/// strings (as OpenKruise reads it).
pub fn working_containers(annotations: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    annotations
        .get(ANNOTATION_WORKING_HOT_UPGRADE)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// `(working, idle)` containers of hot-upgrade sidecar `name` in a pod with `annotations`: the
/// working one is the one the annotation names when it names `name-1`, else `name-2` (as
/// OpenKruise's `GetPodHotUpgradeContainers`).
pub fn working_and_idle(name: &str, annotations: &BTreeMap<String, String>) -> (String, String) {
    let (one, two) = hot_upgrade_names(name);
    if working_containers(annotations).get(name) == Some(&one) {
        (one, two)
    } else {
        (two, one)
    }
}

impl SidecarContainer {
    /// `upgradeStrategy.upgradeType` is HotUpgrade.
    pub fn is_hot_upgrade(&self) -> bool {
        self.upgrade_strategy
            .as_ref()
            .and_then(|u| u.upgrade_type)
            .is_some_and(|t| t == UpgradeType::HotUpgrade)
    }

    /// `upgradeStrategy.hotUpgradeEmptyImage`, when set and not blank.
    pub fn hot_upgrade_empty_image(&self) -> Option<&str> {
        self.upgrade_strategy
            .as_ref()
            .and_then(|u| u.hot_upgrade_empty_image.as_deref())
            .filter(|i| !i.trim().is_empty())
    }

    /// The names this sidecar has in a pod: its own, or the two of a hot-upgrade pair.
    pub fn pod_names(&self) -> Vec<String> {
        if self.is_hot_upgrade() {
            let (a, b) = hot_upgrade_names(self.name());
            vec![a, b]
        } else {
            vec![self.name().to_string()]
        }
    }
}

impl SidecarSet {
    /// The hot-upgrade sidecars among the containers.
    pub fn hot_upgrade_containers(&self) -> impl Iterator<Item = &SidecarContainer> {
        self.spec.containers.iter().filter(|c| c.is_hot_upgrade())
    }

    /// The names of this SidecarSet's containers and native sidecars as they are in a pod (a
    /// hot-upgrade sidecar `c` is `c-1` and `c-2`), sorted.
    pub fn pod_container_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .spec
            .containers
            .iter()
            .flat_map(|c| c.pod_names())
            .chain(
                self.spec
                    .init_containers
                    .iter()
                    .filter(|c| c.is_native_sidecar())
                    .map(|c| c.name().to_string()),
            )
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_working_container_is_read_as_openkruise_reads_it() {
        // (annotation value, working, idle)
        let cases = [
            (None, "proxy-2", "proxy-1"),
            (Some(r#"{"proxy":"proxy-1"}"#), "proxy-1", "proxy-2"),
            (Some(r#"{"proxy":"proxy-2"}"#), "proxy-2", "proxy-1"),
            (Some(r#"{"other":"other-1"}"#), "proxy-2", "proxy-1"),
            (Some("not json"), "proxy-2", "proxy-1"),
            (Some(r#"{"proxy":"elsewhere"}"#), "proxy-2", "proxy-1"),
        ];
        for (value, working, idle) in cases {
            let a = match value {
                Some(v) => ann(&[(ANNOTATION_WORKING_HOT_UPGRADE, v)]),
                None => ann(&[]),
            };
            assert_eq!(
                working_and_idle("proxy", &a),
                (working.to_string(), idle.to_string()),
                "{value:?}"
            );
        }
    }

    #[test]
    fn annotation_names() {
        assert_eq!(
            version_annotation("proxy-1"),
            "version.sidecarset.kruise.io/proxy-1"
        );
        assert_eq!(
            version_alt_annotation("proxy-2"),
            "versionalt.sidecarset.kruise.io/proxy-2"
        );
        for k in [
            ANNOTATION_WORKING_HOT_UPGRADE,
            "version.sidecarset.kruise.io/x-1",
            "versionalt.sidecarset.kruise.io/x-2",
        ] {
            assert!(is_hot_upgrade_annotation(k), "{k}");
        }
        assert!(!is_hot_upgrade_annotation("kruise.io/sidecarset-hash"));
    }
}
