//! Where the containers of a SidecarSet in native sidecar mode
//! ([`crate::api::ANNOTATION_NATIVE_SIDECARS`]) go in a pod: its `initContainers`, as
//! `restartPolicy: Always` init containers, before the pod's own init containers (so the kubelet
//! starts them first and stops them last) and after the native sidecars other SidecarSets
//! injected there before, in the order of the SidecarSets being injected.

use super::{
    Built, PodInjectPolicy, SidecarContainer, add, is_injected_sidecar, placement, ptr, to_value,
};
use json_patch::{PatchOperation, RemoveOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use serde_json::Value;

/// The `restartPolicy` of a native sidecar.
const ALWAYS: &str = "Always";

/// A SidecarSet's container as built, made a native sidecar.
pub(super) fn as_native(
    (sc, mut c): (&SidecarContainer, Container),
) -> (&SidecarContainer, Container) {
    c.restart_policy = Some(ALWAYS.to_string());
    (sc, c)
}

/// An init container injected as a native sidecar (by any SidecarSet, in either mode).
fn is_injected_native(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some(ALWAYS) && is_injected_sidecar(c)
}

/// The init containers' ops when native sidecars are injected: the SidecarSets' own init
/// containers as [`super::merge_containers`] places them (the `BeforeAppContainer` block first,
/// the others after the pod's), and the native sidecars after the injected native sidecars the
/// pod starts with (those leading its list), before every other init container of the pod. A pod
/// init container with a native sidecar's name is replaced in place; a pod container with one is
/// removed from `containers` (the sidecar takes its place, as a same-named container is
/// replaced in regular mode). `front`: how many containers were just added before the pod's
/// own containers.
pub(super) fn merge(
    spec: &PodSpec,
    init: &Built,
    native: &Built,
    front: usize,
    ops: &mut Vec<PatchOperation>,
) {
    let moved: Vec<usize> = spec
        .containers
        .iter()
        .enumerate()
        .filter(|(_, c)| native.iter().any(|(_, n)| n.name == c.name))
        .map(|(i, _)| i)
        .collect();
    for i in moved.into_iter().rev() {
        ops.push(PatchOperation::Remove(RemoveOperation {
            path: ptr(&["spec", "containers", &(i + front).to_string()]),
        }));
    }

    let pod = spec.init_containers.as_deref().unwrap_or(&[]);
    let mut replace = |i: usize, c: &Container| {
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: ptr(&["spec", "initContainers", &i.to_string()]),
            value: to_value(c),
        }))
    };
    let (mut before, mut after, mut natives) = (Vec::new(), Vec::new(), Vec::new());
    for (sc, c) in init {
        match pod.iter().position(|p| p.name == c.name) {
            Some(i) => replace(i, c),
            None => match placement("initContainers", sc) {
                PodInjectPolicy::BeforeAppContainer => before.push(to_value(c)),
                PodInjectPolicy::AfterAppContainer => after.push(to_value(c)),
            },
        }
    }
    for (_, c) in native {
        match pod.iter().position(|p| p.name == c.name) {
            Some(i) => replace(i, c),
            None => natives.push(to_value(c)),
        }
    }
    if spec.init_containers.is_none() {
        let all: Vec<Value> = before.into_iter().chain(natives).chain(after).collect();
        if !all.is_empty() {
            ops.push(add(ptr(&["spec", "initContainers"]), Value::Array(all)));
        }
        return;
    }
    let leading = pod.iter().take_while(|c| is_injected_native(c)).count();
    let at = before.len() + leading;
    let ordered = before
        .into_iter()
        .enumerate()
        .chain(natives.into_iter().enumerate().map(|(j, c)| (at + j, c)));
    for (i, c) in ordered {
        ops.push(add(ptr(&["spec", "initContainers", &i.to_string()]), c));
    }
    for c in after {
        ops.push(add(ptr(&["spec", "initContainers", "-"]), c));
    }
}

#[cfg(test)]
mod tests {
    use crate::api::{SidecarSet, default_sidecarset};
    use crate::index::{Index, namespace_labels};
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    fn sidecarset(name: &str, native: bool, spec: Value) -> SidecarSet {
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": "web"}});
        let mut meta = json!({"name": name});
        if native {
            meta["annotations"] = json!({"sidecarset-operator.io/native-sidecars": "true"});
        }
        let mut ss: SidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": meta, "spec": spec}))
        .unwrap();
        default_sidecarset(&mut ss);
        crate::api::validate(&ss).unwrap();
        ss
    }

    fn c(name: &str) -> Value {
        json!({"name": name, "image": format!("{name}:1")})
    }

    /// A native sidecar another SidecarSet injected before (the pod records that SidecarSet).
    fn injected_native(name: &str) -> Value {
        json!({"name": name, "image": "x:1", "restartPolicy": "Always",
               "env": [{"name": "IS_INJECTED", "value": "true"}]})
    }

    /// `name` for a container, `name*` for one with `restartPolicy: Always`.
    fn names(pod: &Value, list: &str) -> Vec<String> {
        pod["spec"][list]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let n = c["name"].as_str().unwrap().to_string();
                match c["restartPolicy"].as_str() {
                    Some("Always") => format!("{n}*"),
                    _ => n,
                }
            })
            .collect()
    }

    struct Case {
        what: &'static str,
        sidecarsets: Vec<SidecarSet>,
        /// The pod's `spec` (its `initContainers` left out when `None`).
        init: Option<Vec<Value>>,
        containers: Vec<Value>,
        /// SidecarSets the pod records as injected already.
        recorded: &'static [&'static str],
        want_init: &'static [&'static str],
        want_containers: &'static [&'static str],
    }

    #[test]
    fn where_native_sidecars_go() {
        let mesh = || sidecarset("mesh", true, json!({"containers": [c("proxy")]}));
        let logs = || sidecarset("logs", false, json!({"containers": [c("log")]}));
        let cases = vec![
            Case {
                what: "no init containers: the list is created",
                sidecarsets: vec![mesh()],
                init: None,
                containers: vec![c("app")],
                recorded: &[],
                want_init: &["proxy*"],
                want_containers: &["app"],
            },
            Case {
                what: "an empty init container list",
                sidecarsets: vec![mesh()],
                init: Some(vec![]),
                containers: vec![c("app")],
                recorded: &[],
                want_init: &["proxy*"],
                want_containers: &["app"],
            },
            Case {
                what: "before the pod's own init containers",
                sidecarsets: vec![mesh()],
                init: Some(vec![c("setup"), c("migrate")]),
                containers: vec![c("app")],
                recorded: &[],
                want_init: &["proxy*", "setup", "migrate"],
                want_containers: &["app"],
            },
            Case {
                what: "two native SidecarSets: in the webhook's order (by name), containers in spec order",
                sidecarsets: vec![
                    mesh(),
                    sidecarset(
                        "a-agent",
                        true,
                        json!({"containers": [c("agent"), c("b-agent")]}),
                    ),
                ],
                init: Some(vec![c("setup")]),
                containers: vec![c("app")],
                recorded: &[],
                want_init: &["agent*", "b-agent*", "proxy*", "setup"],
                want_containers: &["app"],
            },
            Case {
                what: "one native, one regular",
                sidecarsets: vec![mesh(), logs()],
                init: Some(vec![c("setup")]),
                containers: vec![c("app")],
                recorded: &[],
                want_init: &["proxy*", "setup"],
                want_containers: &["log", "app"],
            },
            Case {
                what: "after the native sidecars already injected, before the pod's init containers",
                sidecarsets: vec![mesh()],
                init: Some(vec![injected_native("early"), c("setup")]),
                containers: vec![c("app")],
                recorded: &["other"],
                want_init: &["early*", "proxy*", "setup"],
                want_containers: &["app"],
            },
            Case {
                what: "a native sidecar of the pod's own is the pod's init container",
                sidecarsets: vec![mesh()],
                init: Some(vec![
                    json!({"name": "own", "image": "own:1", "restartPolicy": "Always"}),
                ]),
                containers: vec![c("app")],
                recorded: &[],
                want_init: &["proxy*", "own*"],
                want_containers: &["app"],
            },
            Case {
                what: "the SidecarSet's own init containers keep their places around the native sidecars",
                sidecarsets: vec![sidecarset(
                    "mesh",
                    true,
                    json!({
                    "initContainers": [
                        {"name": "iptables", "image": "i:1", "podInjectPolicy": "BeforeAppContainer"},
                        c("z-config"),
                    ],
                    "containers": [c("proxy")]}),
                )],
                init: Some(vec![injected_native("early"), c("setup")]),
                containers: vec![c("app")],
                recorded: &["other"],
                want_init: &["iptables", "early*", "proxy*", "setup", "z-config"],
                want_containers: &["app"],
            },
            Case {
                what: "the SidecarSet's own init containers, no init container list",
                sidecarsets: vec![sidecarset(
                    "mesh",
                    true,
                    json!({
                    "initContainers": [
                        {"name": "iptables", "image": "i:1", "podInjectPolicy": "BeforeAppContainer"},
                        c("z-config"),
                    ],
                    "containers": [c("proxy")]}),
                )],
                init: None,
                containers: vec![c("app")],
                recorded: &[],
                want_init: &["iptables", "proxy*", "z-config"],
                want_containers: &["app"],
            },
            Case {
                what: "a pod container of the sidecar's name is moved out of containers",
                sidecarsets: vec![mesh(), logs()],
                init: Some(vec![c("setup")]),
                containers: vec![c("app"), c("proxy"), c("web")],
                recorded: &[],
                want_init: &["proxy*", "setup"],
                want_containers: &["log", "app", "web"],
            },
            Case {
                what: "a pod init container of the sidecar's name is replaced in place",
                sidecarsets: vec![mesh()],
                init: Some(vec![c("setup"), c("proxy")]),
                containers: vec![c("app")],
                recorded: &[],
                want_init: &["setup", "proxy*"],
                want_containers: &["app"],
            },
            Case {
                what: "without the annotation: containers, as OpenKruise",
                sidecarsets: vec![sidecarset(
                    "mesh",
                    false,
                    json!({"containers": [c("proxy")]}),
                )],
                init: Some(vec![c("setup")]),
                containers: vec![c("app")],
                recorded: &[],
                want_init: &["setup"],
                want_containers: &["proxy", "app"],
            },
        ];
        for case in cases {
            let (index, errs) = Index::from_sidecarsets(case.sidecarsets.clone());
            assert!(errs.is_empty(), "{}", case.what);
            let mut meta = json!({"name": "p", "namespace": "ns", "labels": {"app": "web"}});
            if !case.recorded.is_empty() {
                meta["annotations"] =
                    json!({"kruise.io/sidecarset-injected-list": case.recorded.join(",")});
            }
            let mut spec = json!({"containers": case.containers});
            if let Some(init) = &case.init {
                spec["initContainers"] = json!(init);
            }
            let raw = json!({"metadata": meta, "spec": spec});
            let pod: Pod = serde_json::from_value(raw.clone()).unwrap();
            let ns = namespace_labels("ns", &BTreeMap::new());
            let inj = super::super::for_pod(&index, &pod, &ns, "t");
            assert!(
                inj.skipped.is_empty() && inj.denied.is_none(),
                "{}: {inj:?}",
                case.what
            );
            let mut out = raw.clone();
            super::super::apply(&mut out, &inj.patch())
                .unwrap_or_else(|e| panic!("{}: {e}", case.what));
            assert_eq!(
                names(&out, "initContainers"),
                case.want_init,
                "{}",
                case.what
            );
            assert_eq!(
                names(&out, "containers"),
                case.want_containers,
                "{}",
                case.what
            );
            // Injected again (the pod as created): nothing changes.
            let again: Pod = serde_json::from_value(out.clone()).unwrap();
            let second = super::super::for_pod(&index, &again, &ns, "t2");
            assert!(
                second.patch().0.is_empty(),
                "{}: {:?}",
                case.what,
                second.patch()
            );
        }
    }
}
