//! PodDisruptionBudgets read before an eviction: a pod that a budget allowing no disruption
//! selects is withheld without spending a token or calling the Eviction API, which would refuse
//! it. The budgets of a namespace are listed once per pass; the Eviction API stays the judge
//! (a budget's status may be stale either way).

use crate::controller::slim::SlimPod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use sidecarset_core::api::CompiledSelector;
use std::collections::BTreeMap;
use tracing::debug;

/// Whether a budget of `pdbs` (the pod's namespace's) selects `pod` and allows no disruption.
/// Only a ready pod is withheld: the Eviction API may let an unready one go while the budget
/// allows no disruption (`unhealthyPodEvictionPolicy`). A budget without a selector selects no
/// pod; an empty one, every pod of its namespace.
pub fn blocked(pod: &SlimPod, pdbs: &[PodDisruptionBudget]) -> bool {
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready
        && pdbs.iter().any(|pdb| {
            let selects = pdb
                .spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(|s| CompiledSelector::compile(s).ok())
                .is_some_and(|s| s.matches(pod.labels()));
            let allowed = pdb
                .status
                .as_ref()
                .and_then(|s| s.disruptions_allowed)
                .unwrap_or(0);
            selects && allowed <= 0
        })
}

/// The budgets of each namespace, listed at most once in a pass.
#[derive(Default)]
pub struct Budgets {
    by_namespace: BTreeMap<String, Vec<PodDisruptionBudget>>,
}

impl Budgets {
    /// The budgets of `ns`, listed the first time; none when they cannot be listed (the
    /// Eviction API still applies them).
    pub async fn of(&mut self, client: &kube::Client, ns: &str) -> &[PodDisruptionBudget] {
        if !self.by_namespace.contains_key(ns) {
            let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
            let listed = match api.list(&ListParams::default()).await {
                Ok(l) => l.items,
                Err(e) => {
                    debug!(namespace = ns, error = %e, "cannot list the PodDisruptionBudgets; the Eviction API applies them");
                    Vec::new()
                }
            };
            self.by_namespace.insert(ns.to_string(), listed);
        }
        &self.by_namespace[ns]
    }
}
