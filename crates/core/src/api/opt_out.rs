//! Opt-outs a SidecarSet allows: a pod, or every pod of a namespace, declines the SidecarSet's
//! injection with a label, but only when the SidecarSet says so. OpenKruise's API has no field
//! for it, so both sides are the project's own metadata:
//!
//! - on the SidecarSet, the annotation `sidecarset-operator.io/opt-out: allowed` (absent: the
//!   SidecarSet is mandatory and every opt-out label is ignored);
//! - on the pod or on its namespace, the label `inject.sidecarset-operator.io/<sidecarset>:
//!   disabled` declines that SidecarSet, and `sidecarset-operator.io/inject: disabled` declines
//!   every SidecarSet that allows opting out.
//!
//! The SidecarSet's name is the label key's name part (as OpenKruise's
//! `version.sidecarset.kruise.io/<container>`), which holds the 63 characters a SidecarSet name
//! may have. With none of these set, nothing changes.

use super::StrMap;

/// SidecarSet annotation: with the value [`OPT_OUT_ALLOWED`], pods and namespaces may decline
/// the SidecarSet's injection.
pub const ANNOTATION_OPT_OUT: &str = "sidecarset-operator.io/opt-out";
/// The one value of [`ANNOTATION_OPT_OUT`].
pub const OPT_OUT_ALLOWED: &str = "allowed";
/// Pod or Namespace label: with the value [`INJECT_DISABLED`], declines every SidecarSet that
/// allows opting out.
pub const LABEL_INJECT: &str = "sidecarset-operator.io/inject";
/// Prefix of the per-SidecarSet label: `inject.sidecarset-operator.io/<sidecarset name>`.
pub const LABEL_INJECT_ONE_PREFIX: &str = "inject.sidecarset-operator.io/";
/// The value of an opt-out label.
pub const INJECT_DISABLED: &str = "disabled";

/// The label that declines the SidecarSet `name` alone.
pub fn opt_out_label(name: &str) -> String {
    format!("{LABEL_INJECT_ONE_PREFIX}{name}")
}

/// Whether the SidecarSet's annotations allow opting out.
pub fn opt_out_allowed(annotations: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    annotations
        .and_then(|a| a.get(ANNOTATION_OPT_OUT))
        .is_some_and(|v| v == OPT_OUT_ALLOWED)
}

/// Where an opt-out label was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptOut {
    /// On the pod, this label.
    Pod(String),
    /// On the pod's namespace, this label.
    Namespace(String),
}

impl OptOut {
    /// The label that declines, and where, in words.
    pub fn describe(&self) -> String {
        match self {
            OptOut::Pod(k) => format!("the pod's label {k}={INJECT_DISABLED}"),
            OptOut::Namespace(k) => format!("its namespace's label {k}={INJECT_DISABLED}"),
        }
    }
}

/// The opt-out label of a pod (first) or of its namespace that declines the SidecarSet `name`,
/// whether or not the SidecarSet allows it (see [`opt_out_allowed`]). The per-SidecarSet label
/// is looked at before the general one.
pub fn opt_out_label_of(
    name: &str,
    pod_labels: &(impl StrMap + ?Sized),
    ns_labels: &(impl StrMap + ?Sized),
) -> Option<OptOut> {
    let one = opt_out_label(name);
    let declines = |labels: &dyn Fn(&str) -> Option<bool>| -> Option<String> {
        [one.as_str(), LABEL_INJECT]
            .into_iter()
            .find(|k| labels(k) == Some(true))
            .map(str::to_string)
    };
    declines(&|k| pod_labels.get_str(k).map(|v| v == INJECT_DISABLED))
        .map(OptOut::Pod)
        .or_else(|| {
            declines(&|k| ns_labels.get_str(k).map(|v| v == INJECT_DISABLED)).map(OptOut::Namespace)
        })
}

/// The value of [`ANNOTATION_OPT_OUT`], checked: absent or [`OPT_OUT_ALLOWED`].
pub(super) fn check_annotation(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<(), String> {
    match annotations.and_then(|a| a.get(ANNOTATION_OPT_OUT)) {
        None => Ok(()),
        Some(v) if v == OPT_OUT_ALLOWED => Ok(()),
        Some(v) => Err(format!(
            "{v:?} is not a value of this annotation: set it to {OPT_OUT_ALLOWED:?} to let pods and namespaces \
             decline this SidecarSet (labels {LABEL_INJECT_ONE_PREFIX}<name> or {LABEL_INJECT} = {INJECT_DISABLED}), \
             or remove it to keep the SidecarSet mandatory"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn which_label_declines_which_sidecarset() {
        let one = "inject.sidecarset-operator.io/mesh";
        let all = LABEL_INJECT;
        let pod = |k: &str| OptOut::Pod(k.to_string());
        let ns = |k: &str| OptOut::Namespace(k.to_string());
        type Labels<'a> = &'a [(&'a str, &'a str)];
        #[rustfmt::skip]
        let cases: &[(&str, Labels, Labels, Option<OptOut>)] = &[
            ("no labels", &[], &[], None),
            ("pod, this SidecarSet", &[(one, "disabled")], &[], Some(pod(one))),
            ("pod, every SidecarSet", &[(all, "disabled")], &[], Some(pod(all))),
            ("pod, both: the named one first", &[(all, "disabled"), (one, "disabled")], &[], Some(pod(one))),
            ("pod, another SidecarSet", &[("inject.sidecarset-operator.io/logs", "disabled")], &[], None),
            ("pod, another value", &[(one, "false"), (all, "enabled")], &[], None),
            ("namespace, this SidecarSet", &[], &[(one, "disabled")], Some(ns(one))),
            ("namespace, every SidecarSet", &[], &[(all, "disabled")], Some(ns(all))),
            ("pod before namespace", &[(all, "disabled")], &[(one, "disabled")], Some(pod(all))),
            ("a pod's enabled does not undo its namespace's opt-out", &[(one, "enabled")], &[(one, "disabled")], Some(ns(one))),
        ];
        for (what, p, n, want) in cases {
            assert_eq!(
                opt_out_label_of("mesh", &labels(p), &labels(n)),
                *want,
                "{what}"
            );
        }
    }

    #[test]
    fn only_allowed_allows() {
        for (value, allowed, valid) in [
            (None, false, true),
            (Some("allowed"), true, true),
            (Some("Allowed"), false, false),
            (Some("true"), false, false),
            (Some(""), false, false),
        ] {
            let a = value.map(|v| labels(&[(ANNOTATION_OPT_OUT, v)]));
            assert_eq!(opt_out_allowed(a.as_ref()), allowed, "{value:?}");
            assert_eq!(check_annotation(a.as_ref()).is_ok(), valid, "{value:?}");
        }
        let err = check_annotation(Some(&labels(&[(ANNOTATION_OPT_OUT, "yes")]))).unwrap_err();
        assert!(err.contains("\"allowed\"") && err.contains("yes"), "{err}");
    }

    #[test]
    fn validation_names_the_annotation() {
        let ss = |value: &str| -> super::super::SidecarSet {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
                "metadata": {"name": "mesh", "annotations": {ANNOTATION_OPT_OUT: value}},
                "spec": {"selector": {"matchLabels": {"app": "web"}},
                         "containers": [{"name": "proxy", "image": "proxy:1"}]}}))
            .unwrap()
        };
        assert!(super::super::validate(&ss("allowed")).is_ok());
        let errs = super::super::validate(&ss("true")).unwrap_err();
        assert_eq!(
            errs.0[0].field,
            "metadata.annotations[sidecarset-operator.io/opt-out]"
        );
    }

    #[test]
    fn every_sidecarset_name_fits_the_label_key() {
        let name = "a".repeat(63);
        assert!(super::super::is_qualified_name(&opt_out_label(&name)));
        assert!(super::super::is_qualified_name(LABEL_INJECT));
    }
}
