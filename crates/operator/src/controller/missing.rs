//! Pods that a SidecarSet selects but that run without its sidecars: reported on the pod's
//! owner (a `SidecarSetMissing` Event, deduplicated like the webhook's), counted in the status
//! and a metric, and, with `--evict-pods-without-sidecars` **and** the SidecarSet's opt-in
//! annotation ([`ANNOTATION_EVICT`]), evicted so that their controllers recreate them injected.
//!
//! An eviction must never loop or hit the wrong pod, so a pod is evicted only when all hold:
//! * the SidecarSet opted in (`"true"`: pods created after its current generation took effect,
//!   [`policy::took_effect`]: generation 1 at the SidecarSet's creation, a later one when a
//!   leader first saw it; `"all"`: older pods too);
//! * its controller is of an allowed kind (`--evict-owner-kinds`: ReplicaSet, StatefulSet,
//!   DaemonSet and OpenKruise's CloneSet, Advanced StatefulSet and Advanced DaemonSet by
//!   default), so something recreates it from a template;
//! * the webhook's own injection decision, run now on the pod as the API server has it (read
//!   fresh, not from the cache), injects this SidecarSet: a container-name conflict or a refusal
//!   means the replacement would come back the same way, so it is reported, never evicted;
//! * the owner's circuit is closed: once a replacement of a pod evicted for this SidecarSet comes
//!   back still without its sidecars (the webhook unreachable under `Ignore`, say), the owner is
//!   not evicted again until the SidecarSet changes, and a `SidecarSetEvictionStopped` Event on
//!   the owner says why;
//! * the rate (`--evictions-per-minute`, for all SidecarSets) and the SidecarSet's budget
//!   (`--evictions-per-hour`) allow it.
//!
//! The rate, the budget, when each generation took effect and the open circuits are kept in the
//! API (a ConfigMap, [`STATE_CONFIGMAP`], in the operator's namespace), written with its
//! resourceVersion before each eviction: a new leader continues from them, and two writers
//! cannot both spend the same token. The Eviction itself carries the pod's uid and
//! resourceVersion as preconditions (a recreated pod of the same name, or a changed one, is never
//! evicted from a stale view), and the Eviction API respects PodDisruptionBudgets (a refused
//! eviction is tried again later). To keep a blocked pod cheap, a pod that a budget allowing no
//! disruption selects is not tried at all ([`disruption`]: the namespace's budgets listed once
//! per pass), and once a pod of an owner was refused, its other pods wait for the next pass.
//!
//! The ConfigMap holds every SidecarSet's state: the states of SidecarSets that no longer
//! exist are dropped, each is bounded, and a write that would bring it near the API server's
//! 1 MiB limit is not sent but reported ([`state`]).
//!
//! The pure rules are in [`policy`] and [`disruption`], the state kept in the API in [`state`],
//! and the pass that makes the API calls in [`pass`].

pub mod disruption;
pub mod pass;
pub mod policy;
pub mod state;

pub use pass::{Current, EVICTION_RECHECK, Evictions, Pass, evict, eviction};
pub use policy::{
    ANNOTATION_EVICT, DEFAULT_OWNER_KINDS, OptIn, OwnerKind, Policy, Withheld, allowed_owner,
    came_back_missing, opt_in, parse_owner_kinds, precheck, recent, took_effect,
};
pub use state::{Evicted, STATE_CONFIGMAP, SidecarSetState};

#[cfg(test)]
mod against_a_mock_api_server;
#[cfg(test)]
mod tests;
