//! In-place resize of sidecars, an opt-in per SidecarSet: when the only difference between a
//! pod's sidecars and the SidecarSet is their CPU and memory (`resources`, or what
//! `resourcesPolicy` computes; images may differ too), the rollout resizes them through the
//! pod's `resize` subresource instead of leaving the pod "not upgradable in place". OpenKruise's
//! API has no field for it, so it is the project's own metadata:
//!
//! - on the SidecarSet, the annotation `sidecarset-operator.io/resize-in-place: "true"`
//!   (absent or `"false"`: a resource change makes pods not upgradable, as OpenKruise does).
//!
//! The hashes stay OpenKruise's: `kruise.io/sidecarset-hash-without-image` still covers the
//! resources, so a SidecarSet without the annotation behaves exactly as before.

use std::collections::BTreeMap;

/// SidecarSet annotation: with the value [`RESIZE_IN_PLACE_ON`], sidecars whose resources
/// changed are resized in place.
pub const ANNOTATION_RESIZE_IN_PLACE: &str = "sidecarset-operator.io/resize-in-place";
/// The value of [`ANNOTATION_RESIZE_IN_PLACE`] that turns in-place resize on.
pub const RESIZE_IN_PLACE_ON: &str = "true";
/// The value of [`ANNOTATION_RESIZE_IN_PLACE`] that leaves it off (the same as no annotation).
pub const RESIZE_IN_PLACE_OFF: &str = "false";

/// Whether the SidecarSet's annotations turn in-place resize on.
pub fn resize_in_place(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION_RESIZE_IN_PLACE))
        .is_some_and(|v| v == RESIZE_IN_PLACE_ON)
}

/// The annotation's value checked: `(field, message)` when it is neither `"true"` nor `"false"`.
pub fn check_resize_annotation(
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<(String, String)> {
    let v = annotations?.get(ANNOTATION_RESIZE_IN_PLACE)?;
    (v != RESIZE_IN_PLACE_ON && v != RESIZE_IN_PLACE_OFF).then(|| {
        (
            format!("metadata.annotations[{ANNOTATION_RESIZE_IN_PLACE}]"),
            format!("{v:?} is not a valid value: use \"true\" to resize sidecars in place when only their resources change, or \"false\" (or no annotation) to leave such pods not upgradable"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_true_turns_it_on_and_other_values_are_refused_by_name() {
        let a = |v: &str| BTreeMap::from([(ANNOTATION_RESIZE_IN_PLACE.to_string(), v.to_string())]);
        assert!(resize_in_place(Some(&a("true"))));
        assert!(!resize_in_place(Some(&a("false"))));
        assert!(!resize_in_place(Some(&a("yes"))));
        assert!(!resize_in_place(None));
        assert!(check_resize_annotation(Some(&a("true"))).is_none());
        assert!(check_resize_annotation(Some(&a("false"))).is_none());
        let (field, msg) = check_resize_annotation(Some(&a("yes"))).unwrap();
        assert!(field.contains(ANNOTATION_RESIZE_IN_PLACE), "{field}");
        assert!(msg.contains("\"yes\""), "{msg}");
    }
}
