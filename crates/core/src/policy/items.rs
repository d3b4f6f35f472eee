//! The SidecarSets' rendered items (containers, init containers, volumes) as policy variables,
//! referenced by the mutation, and the lists of items a pod gets.

use super::from_pod;
use super::literal::{string, value};
use super::render::{concat, m, var};
use super::{PodInjectPolicy, Unit};
use serde_json::{Value, json};

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Literal {
    Container,
    Init,
    Volume,
}

impl Literal {
    /// The variable holding a SidecarSet's items of this kind, as a list.
    pub(super) fn variable(self, unit: usize) -> String {
        match self {
            Literal::Container => format!("c{unit}"),
            Literal::Init => format!("i{unit}"),
            Literal::Volume => format!("v{unit}"),
        }
    }

    pub(super) fn items<'u>(self, u: &'u Unit) -> Vec<(PodInjectPolicy, &'u Value)> {
        match self {
            Literal::Container => u.rendered.containers.iter().map(|(p, c)| (*p, c)).collect(),
            Literal::Init => u
                .rendered
                .init_containers
                .iter()
                .map(|(p, c)| (*p, c))
                .collect(),
            Literal::Volume => u
                .rendered
                .volumes
                .iter()
                .map(|v| (PodInjectPolicy::AfterAppContainer, v))
                .collect(),
        }
    }
}

/// One rendered item of a SidecarSet, by reference to its variable.
pub(super) struct ItemRef {
    pub(super) unit: usize,
    pub(super) name: String,
    pub(super) placement: PodInjectPolicy,
    /// `variables.c3[0]`.
    pub(super) reference: String,
}

/// The items of one kind of every SidecarSet, in order.
pub(super) fn literals(units: &[Unit], kind: Literal) -> Vec<ItemRef> {
    units
        .iter()
        .enumerate()
        .flat_map(|(i, u)| {
            kind.items(u)
                .into_iter()
                .enumerate()
                .map(move |(k, (placement, v))| ItemRef {
                    unit: i,
                    name: v["name"].as_str().unwrap_or_default().to_string(),
                    placement,
                    reference: format!("variables.{}[{k}]", kind.variable(i)),
                })
        })
        .collect()
}

/// The variables holding each SidecarSet's rendered items: every literal once, referenced from
/// the mutation (the API server bounds the length of each expression). A sidecar built from
/// the pod's containers is its literal extended by CEL ([`from_pod`]), after its own variables;
/// the volumes of a SidecarSet whose shared mounts may name them are a map by name.
pub(super) fn literal_variables(units: &[Unit]) -> Vec<Value> {
    let mut out = Vec::new();
    for (i, u) in units.iter().enumerate() {
        let spec = &u.entry.ss.spec;
        for (init, list) in [(true, &spec.init_containers), (false, &spec.containers)] {
            for (j, sc) in list.iter().enumerate() {
                if from_pod::reads_pod(sc) {
                    out.extend(from_pod::container_variables(i, init, j, sc));
                }
            }
        }
        for kind in [Literal::Container, Literal::Init, Literal::Volume] {
            if kind == Literal::Volume && from_pod::volumes_read_pod(u) {
                out.push(var(&kind.variable(i), &from_pod::volume_map(u)));
                continue;
            }
            let init = kind == Literal::Init;
            let list = if init {
                &spec.init_containers
            } else {
                &spec.containers
            };
            let positions = match kind {
                Literal::Volume => Vec::new(),
                _ => from_pod::spec_positions(u, init),
            };
            let items: Vec<String> = kind
                .items(u)
                .iter()
                .enumerate()
                .map(|(k, (_, v))| match positions.get(k).copied().flatten() {
                    Some(j) if from_pod::reads_pod(&list[j]) => {
                        let hot = !init && list[j].is_hot_upgrade();
                        from_pod::container(i, init, j, &list[j], v, hot)
                    }
                    _ => format!("dyn({})", value(v)),
                })
                .collect();
            if !items.is_empty() {
                out.push(var(&kind.variable(i), &format!("[{}]", items.join(", "))));
            }
        }
    }
    out
}

/// `volumes` when the volumes of some SidecarSet depend on the pod's shared mounts: every
/// injected SidecarSet's volumes in order (`vall`), of one name the first, but those the pod has.
pub(super) fn pod_volumes(units: &[Unit]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut all = Vec::new();
    for (i, u) in units.iter().enumerate() {
        let v = Literal::Volume.variable(i);
        if from_pod::volumes_read_pod(u) {
            out.push(var(&format!("vn{i}"), &from_pod::volume_names(i, u)));
            all.push(format!(
                "(variables.{} ? variables.vn{i}.filter(n, n in variables.{v}).map(n, variables.{v}[n]) : [])",
                m(i)
            ));
        } else if !u.rendered.volumes.is_empty() {
            all.push(format!("(variables.{} ? variables.{v} : [])", m(i)));
        }
    }
    let all = if all.is_empty() {
        "[]".to_string()
    } else {
        all.join(" + ")
    };
    out.push(var("vall", &all));
    out.push(var("vallNames", "variables.vall.map(x, x.name)"));
    out.push(var(
        "volumes",
        "variables.vall.transformList(k, v, !(v.name in variables.volumeNames) && variables.vallNames.indexOf(v.name) == k, v)",
    ));
    out
}

/// The position of `u` among `units`.
fn index(units: &[Unit], u: &Unit) -> usize {
    units
        .iter()
        .position(|x| std::ptr::eq(x, u))
        .unwrap_or_default()
}

#[derive(Clone, Copy)]
pub(super) enum Item {
    Volume,
    Secret,
}

/// Volumes (or pull secrets) of the injected SidecarSets the pod does not have by name; of one
/// name, the first SidecarSet's.
pub(super) fn new_items(units: &[Unit], kind: Item) -> String {
    let list = |u: &Unit| -> Vec<(String, String)> {
        match kind {
            Item::Volume => u
                .rendered
                .volumes
                .iter()
                .enumerate()
                .map(|(k, v)| {
                    let name = v["name"].as_str().unwrap_or_default().to_string();
                    let at = index(units, u);
                    (
                        name,
                        format!("variables.{}[{k}]", Literal::Volume.variable(at)),
                    )
                })
                .collect(),
            Item::Secret => u
                .rendered
                .image_pull_secrets
                .iter()
                .map(|s| (s.clone(), value(&json!({"name": s}))))
                .collect(),
        }
    };
    let pod_names = match kind {
        Item::Volume => "volumeNames",
        Item::Secret => "secretNames",
    };
    let mut items = Vec::new();
    for (i, u) in units.iter().enumerate() {
        for (name, literal) in list(u) {
            let mut cond = format!(
                "variables.{} && !({} in variables.{pod_names})",
                m(i),
                string(&name)
            );
            for (j, earlier) in units[..i].iter().enumerate() {
                if list(earlier).iter().any(|(n, _)| *n == name) {
                    cond.push_str(&format!(" && !variables.{}", m(j)));
                }
            }
            items.push((cond, literal));
        }
    }
    concat(items.into_iter())
}
