//! One eviction pass over a SidecarSet's pods running without its sidecars: the API calls
//! (the state ConfigMap, the fresh read of each pod, the Eviction), in the order the policy
//! requires: the token is spent in the API before the Eviction is sent, and given back when the
//! Eviction is refused. A pod that a PodDisruptionBudget allowing no disruption selects is
//! withheld before any of that ([`super::disruption`]), and once the Eviction API refused a pod
//! of an owner for its budget (HTTP 429), the owner's other pods wait for the next pass.

use super::disruption::{Budgets, blocked};
use super::policy::{
    OptIn, Policy, Withheld, came_back_missing, key, opt_in, precheck, recent, same_second,
    took_effect,
};
use super::state::{Evicted, STATE_CONFIGMAP, SidecarSetState, Stored, load, prune, store};
use crate::controller::slim::SlimPod;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::time::Duration;
use tracing::{debug, info, warn};

/// How soon to look again while pods wait for eviction.
pub const EVICTION_RECHECK: Duration = Duration::from_secs(30);

/// The process's eviction settings.
pub struct Evictions {
    pub policy: Policy,
}

impl Evictions {
    pub fn new(policy: Policy) -> Self {
        Evictions { policy }
    }
}

/// Counts and logs a pod not evicted, and why.
fn withhold(sidecarset: &str, pod: &str, why: Withheld) {
    debug!(
        sidecarset,
        pod,
        reason = why.label(),
        "pod without its sidecars not evicted"
    );
    crate::metrics::metrics()
        .evictions_withheld
        .get_or_create(&crate::metrics::SidecarSetReasonLabels {
            sidecarset: sidecarset.to_string(),
            reason: why.label().into(),
        })
        .inc();
}

/// The body of an Eviction of `pod` (as read: `fresh`), conditional on its uid and
/// resourceVersion. Written here rather than with kube's `Api::evict`: kube 5 sends its
/// `EvictParams::delete_options` under the key `delete_options`, which the API server ignores
/// (it reads `deleteOptions`), so the preconditions would be silently dropped.
pub fn eviction(name: &str, namespace: &str, fresh: &Pod) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"preconditions": {
            "uid": fresh.metadata.uid,
            "resourceVersion": fresh.metadata.resource_version,
        }},
    })
}

/// What one pass over a SidecarSet's missing pods did.
#[derive(Debug, Default)]
pub struct Pass {
    pub evicted: usize,
    /// Owners whose circuit opened in this pass (`namespace/Kind/name`).
    pub opened: Vec<(String, Pod)>,
}

/// The uid of the SidecarSet of a name, None when there is none (the cluster view's).
pub type Current<'a> = &'a (dyn Fn(&str) -> Option<String> + Sync);

/// Looks at the SidecarSet's pods running without its sidecars and evicts those the rules allow
/// (see the module's documentation). `would_inject`: the webhook's decision for a pod as the API
/// server has it now; `current`: the SidecarSets that exist (the states of others are dropped).
/// Errors of the API are logged; the next pass tries again.
pub async fn evict(
    client: &kube::Client,
    ev: &Evictions,
    ss: &sidecarset_core::api::SidecarSet,
    pods: &[&SlimPod],
    would_inject: &(dyn Fn(&Pod) -> bool + Sync),
    current: Current<'_>,
) -> Pass {
    let name = ss.name_any();
    let mut pass = Pass::default();
    let opt = opt_in(ss.annotations());
    if opt == OptIn::Off {
        for p in pods {
            withhold(&name, &key(p), Withheld::NotOptedIn);
        }
        return pass;
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ev.policy.namespace);
    let Some((stored, state, now)) =
        current_state(&api, ss, &ev.policy, current, pods, &mut pass).await
    else {
        return pass;
    };
    let mut evicting = Evicting {
        client,
        api,
        name,
        opt,
        policy: &ev.policy,
        pods,
        would_inject,
        stored,
        state,
        now,
        pass,
        refused: BTreeSet::new(),
        budgets: Budgets::default(),
    };
    for p in pods {
        if evicting.one(p).await.is_break() {
            break;
        }
    }
    evicting.pass
}

/// Reads the state, drops the states of SidecarSets gone, brings the SidecarSet's up to its
/// current generation (bounded) and opens the circuit of each owner whose replacement came back
/// still missing (recorded in `pass`), and writes it back when it changed; with the time it was
/// read (unix seconds). None: the state cannot be read or written (no eviction in this pass).
async fn current_state(
    api: &Api<ConfigMap>,
    ss: &sidecarset_core::api::SidecarSet,
    policy: &Policy,
    current: Current<'_>,
    pods: &[&SlimPod],
    pass: &mut Pass,
) -> Option<(Stored, SidecarSetState, i64)> {
    let name = &ss.name_any();
    let mut stored = match load(api).await {
        Ok(s) => s,
        Err(e) => {
            warn!(sidecarset = %name, error = %e, configmap = STATE_CONFIGMAP, "cannot read the eviction state; no eviction until it can be read");
            return None;
        }
    };
    let now = jiff::Timestamp::now().as_second();
    let uid = ss.uid().unwrap_or_default();
    let generation = ss.metadata.generation.unwrap_or_default();
    let created = ss
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second());
    let gone = prune(&mut stored.states, name, current);
    if !gone.is_empty() {
        info!(sidecarset = %name, dropped = ?gone, configmap = STATE_CONFIGMAP, "dropped the eviction state of SidecarSets that no longer exist");
    }
    let before = stored.states.get(name).cloned();
    let mut state = before.clone().unwrap_or_default().current(
        &uid,
        generation,
        took_effect(generation, created, now),
        now,
    );
    state.bound(policy.per_hour);
    open_circuits(name, pods, &mut state, pass);
    if before.as_ref() != Some(&state) || !gone.is_empty() {
        stored.states.insert(name.to_string(), state.clone());
        if let Err(e) = store(api, &mut stored).await {
            warn!(sidecarset = %name, error = %e, "cannot write the eviction state; no eviction in this pass");
            return None;
        }
    }
    Some((stored, state, now))
}

/// Replacements that came back still missing open their owner's circuit.
fn open_circuits(name: &str, pods: &[&SlimPod], state: &mut SidecarSetState, pass: &mut Pass) {
    for p in pods {
        if let Some((owner, what)) = came_back_missing(p, state)
            && !state.open_circuits.contains_key(&owner)
        {
            warn!(
                sidecarset = %name,
                owner = %what,
                pod = %key(p),
                created = ?p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                resource_version = ?p.metadata.resource_version,
                injected = ?sidecarset_core::api::injected_list(p.annotations()),
                evictions = ?state.evictions.iter().map(|e| (e.pod.as_str(), e.at)).collect::<Vec<_>>(),
                "a pod evicted for missing sidecars came back without them: no more evictions of this owner until the SidecarSet changes"
            );
            state.open_circuit(owner, what.clone());
            pass.opened.push((what, p.to_pod()));
        }
    }
}

/// What became of an Eviction sent.
enum Sent {
    Evicted,
    /// Refused for a PodDisruptionBudget (HTTP 429).
    Disruption,
    /// Refused otherwise, or not answered.
    Failed,
}

/// One pass in progress, after the state was read.
struct Evicting<'a> {
    client: &'a kube::Client,
    /// The state ConfigMap's namespace.
    api: Api<ConfigMap>,
    /// The SidecarSet's name.
    name: String,
    opt: OptIn,
    policy: &'a Policy,
    pods: &'a [&'a SlimPod],
    would_inject: &'a (dyn Fn(&Pod) -> bool + Sync),
    stored: Stored,
    state: SidecarSetState,
    /// When the pass started (unix seconds).
    now: i64,
    pass: Pass,
    /// Owners (uids) of which the Eviction API refused a pod for its disruption budget in this
    /// pass: their other pods wait for the next pass.
    refused: BTreeSet<String>,
    /// The PodDisruptionBudgets of each namespace, listed once in this pass.
    budgets: Budgets,
}

impl Evicting<'_> {
    /// The pods of namespace `ns`.
    fn pods_api(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Evicts `p` if the rules allow it. Break: no more evictions in this pass (the rate or the
    /// budget is spent, or the state cannot be written).
    async fn one(&mut self, p: &SlimPod) -> ControlFlow<()> {
        let pod_key = key(p);
        let recent_all = recent(&self.stored.states, self.now);
        let owner = match precheck(p, self.opt, &self.state, self.policy, recent_all) {
            Ok(o) => o,
            Err(why) => {
                withhold(&self.name, &pod_key, why);
                if matches!(why, Withheld::Rate | Withheld::Budget) {
                    return ControlFlow::Break(());
                }
                return ControlFlow::Continue(());
            }
        };
        if self.refused.contains(&owner) || self.disruption_blocked(p).await {
            withhold(&self.name, &pod_key, Withheld::Disruption);
            return ControlFlow::Continue(());
        }
        let Some(fresh) = self.read_fresh(p, &pod_key).await else {
            return ControlFlow::Continue(());
        };
        if !(self.would_inject)(&fresh) {
            withhold(&self.name, &pod_key, Withheld::NotInjectable);
            return ControlFlow::Continue(());
        }
        let uid = p.metadata.uid.clone().unwrap_or_default();
        self.spend_token(&pod_key, &uid, &owner).await?;
        match self.post_eviction(p, &pod_key, &fresh).await {
            Sent::Evicted => {}
            Sent::Disruption => {
                self.refused.insert(owner);
                self.give_token_back().await?;
            }
            Sent::Failed => self.give_token_back().await?,
        }
        ControlFlow::Continue(())
    }

    /// Whether a PodDisruptionBudget of the pod's namespace selects it and allows no disruption.
    async fn disruption_blocked(&mut self, p: &SlimPod) -> bool {
        let ns = p.namespace().unwrap_or_default();
        blocked(p, self.budgets.of(self.client, &ns).await)
    }

    /// The pod as the API server has it: the same pod (uid), whole, for the decision.
    async fn read_fresh(&self, p: &SlimPod, pod_key: &str) -> Option<Pod> {
        let ns = p.namespace().unwrap_or_default();
        match self.pods_api(&ns).get_opt(&p.name_any()).await {
            Ok(Some(f)) if f.metadata.uid == p.metadata.uid => Some(f),
            Ok(_) => {
                withhold(&self.name, pod_key, Withheld::Precondition);
                None
            }
            Err(e) => {
                warn!(sidecarset = %self.name, pod = %pod_key, error = %e, "cannot read the pod; not evicted");
                None
            }
        }
    }

    /// Spends the token first, in the API: a leader that takes over sees it. The time is the
    /// eviction's, not the pass's start: the pass may have waited on the API for seconds, and a
    /// sibling created in between is no replacement.
    ///
    /// The owner's pods already there in that second are read from the API server, not only
    /// from the cache: a cache that lags (a relist under way, a slow watch) may not hold a
    /// sibling created a moment before, which would later look like a replacement that came
    /// back without its sidecars and wrongly stop the owner's evictions.
    async fn spend_token(&mut self, pod_key: &str, uid: &str, owner: &str) -> ControlFlow<()> {
        let at = jiff::Timestamp::now().as_second();
        let ns = pod_key
            .split_once('/')
            .map(|(ns, _)| ns)
            .unwrap_or_default();
        let mut same = same_second(self.pods, owner, at);
        match self
            .pods_api(ns)
            .list_metadata(&ListParams::default())
            .await
        {
            Ok(list) => {
                for p in list.items {
                    let owned = p
                        .metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.controller == Some(true) && o.uid == owner);
                    let second = p
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.as_second());
                    if let Some(u) = p.metadata.uid
                        && owned
                        && second == Some(at)
                        && !same.contains(&u)
                    {
                        same.push(u);
                    }
                }
            }
            Err(e) => {
                warn!(sidecarset = %self.name, pod = %pod_key, error = %e, "cannot list the pod's siblings; not evicted (tried again later)");
                return ControlFlow::Break(());
            }
        }
        self.state.evictions.push(Evicted {
            at,
            pod: pod_key.to_string(),
            uid: uid.to_string(),
            owner: owner.to_string(),
            same_second: same,
        });
        self.stored
            .states
            .insert(self.name.clone(), self.state.clone());
        if let Err(e) = store(&self.api, &mut self.stored).await {
            warn!(sidecarset = %self.name, error = %e, "cannot record the eviction; not evicted (tried again later)");
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// Sends the Eviction of `p` (as read: `fresh`).
    async fn post_eviction(&mut self, p: &SlimPod, pod_key: &str, fresh: &Pod) -> Sent {
        let name = &self.name;
        let ns = p.namespace().unwrap_or_default();
        let body = eviction(&p.name_any(), &ns, fresh);
        match self
            .pods_api(&ns)
            .create_subresource::<_, serde_json::Value>(
                "eviction",
                &p.name_any(),
                &PostParams::default(),
                &body,
            )
            .await
        {
            Ok(_) => {
                info!(sidecarset = %name, pod = %pod_key, "evicted a pod running without the SidecarSet's sidecars; its controller recreates it");
                crate::metrics::metrics()
                    .pods_evicted
                    .get_or_create(&crate::metrics::label(name))
                    .inc();
                self.pass.evicted += 1;
                Sent::Evicted
            }
            Err(kube::Error::Api(e)) if e.code == 429 => {
                debug!(sidecarset = %name, pod = %pod_key, reason = %e.message, "eviction refused by a PodDisruptionBudget; tried again later (the owner's other pods too)");
                Sent::Disruption
            }
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                withhold(name, pod_key, Withheld::Precondition);
                Sent::Failed
            }
            Err(e) => {
                warn!(sidecarset = %name, pod = %pod_key, error = %e, "cannot evict a pod running without the SidecarSet's sidecars");
                Sent::Failed
            }
        }
    }

    /// Gives the token of a refused eviction back (best effort: a lost write only costs one
    /// token for an hour).
    async fn give_token_back(&mut self) -> ControlFlow<()> {
        self.state.evictions.pop();
        self.stored
            .states
            .insert(self.name.clone(), self.state.clone());
        if let Err(e) = store(&self.api, &mut self.stored).await {
            debug!(sidecarset = %self.name, error = %e, "cannot give the eviction token back");
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}
