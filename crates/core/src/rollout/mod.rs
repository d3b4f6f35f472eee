//! Rollout decisions (pure): which pods to upgrade in place now.
//!
//! The controller lists the pods of a SidecarSet, turns each into a [`PodView`] with
//! [`Classifier::view`] (or [`pod_view`]), computes the SidecarSet's [`status`], asks [`plan`]
//! which pods to upgrade this round, and sends [`upgrade_patch`] for each of them (as a JSON
//! patch with a `resourceVersion` precondition). Nothing here does I/O.
//!
//! The rules are OpenKruise's (`sidecarset_strategy.go`, `sidecarset_processor.go`):
//! * `partition` holds back that many of the pods that could be upgraded now, and
//!   `maxUnavailable` is spent by upgraded pods not yet ready or not yet running the new image
//!   ([`Rules::OpenKruise`]); [`Rules::Strict`] (`--rollout-rules=strict`) counts every pod kept
//!   on the old sidecars against `partition` and every not-ready pod against `maxUnavailable`.
//! * Completion is decided from the image *name* the kubelet reports (normalised), or from the
//!   sidecar's instance having changed since the upgrade (a restart, or another image ID than
//!   the one recorded in `kruise.io/sidecarset-inplace-update-state`), so switching between two
//!   tags of the same image (`nginx` → `nginx:1.23`, kruise#1270) completes even when the
//!   runtime reports the other tag; a sidecar that fails after an upgrade (image not pulled) is
//!   not waited for: the next image change reaches it (measured on a real kubelet).
//! * An upgrade writes the latest revision into the pod's hash entry, the in-place update state,
//!   and `patchPodMetadata` again; the pod condition `SidecarSetUpgradable` keeps one entry per
//!   SidecarSet ([`upgradable_condition`]).
//! * A small percentage of `maxUnavailable` rounds up to at least one pod (kruise#1832).
//! * Native sidecars (init containers with `restartPolicy: Always`) are upgraded like
//!   containers: the SidecarSet's own, and its containers injected as native sidecars
//!   ([`crate::api::ANNOTATION_NATIVE_SIDECARS`]), found where the pod has them.

pub mod hot;
pub mod order;
pub mod resize;
mod upgrade;
mod waiting;

pub use hot::reset_patch;
pub use upgrade::{upgrade_patch, upgrade_patch_resized};

use crate::api::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, CompiledSelector, SidecarSet,
    SidecarSetUpdateStrategy, SidecarSetUpgradeSpec, parse_hash_annotation,
};
use crate::index::Entry;
use jsonptr::PointerBuf;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// What the controller knows about one pod for one SidecarSet. Built by [`Classifier::view`];
/// tests may build it directly.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodView {
    /// `namespace/name`.
    pub key: String,
    /// Not finished (Succeeded/Failed) and not being deleted.
    pub active: bool,
    /// The SidecarSet is in the pod's `kruise.io/sidecarset-injected-list` or has an entry in its
    /// `kruise.io/sidecarset-hash` annotation.
    pub injected: bool,
    /// The pod's hash entry for the SidecarSet equals the SidecarSet's current hash.
    pub updated: bool,
    /// The pod's hash-without-image entry equals the SidecarSet's current one: only images
    /// differ, so an in-place upgrade can bring the pod up to date.
    pub upgradable: bool,
    /// The kubelet has acted on the spec: as many container statuses as containers, and every
    /// sidecar's status image equal to its spec image (see [`image_matches`]) or its status not
    /// the instance an in-place upgrade replaced (see `settled`).
    pub consistent: bool,
    /// Phase Running and condition Ready True.
    pub ready: bool,
    /// Selected by `updateStrategy.selector` (true when there is none).
    pub matches_update_selector: bool,
    /// Scheduled to a node (`spec.nodeName` set).
    pub assigned: bool,
    /// Pending 0, Unknown 1, Running 2 (any other phase 0), as in Kubernetes' `ActivePods`.
    pub phase_rank: u8,
    /// When the Ready condition last became True (Unix seconds), if it is True.
    pub ready_since: Option<i64>,
    /// Highest restart count of the pod's containers (and native sidecars).
    pub restarts: i32,
    /// Creation time (Unix seconds); a pod without one counts as the newest (`i64::MAX`).
    pub created: i64,
    /// The pod's labels, for `priorityStrategy` and `scatterStrategy`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// A hot upgrade is over in this pod but for its old container, which is due for its reset
    /// to the empty image (see [`hot`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
    /// The kubelet refused the resize of the sidecars (in-place resize, see [`resize`]): the
    /// reason and its message. The pod is left as it is and named; it spends no
    /// `maxUnavailable` (it runs, with its former resources).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize_refused: Option<String>,
}

impl PodView {
    /// Counted by the SidecarSet's status: active and injected by it.
    pub fn matched(&self) -> bool {
        self.active && self.injected
    }

    /// Counted as ready in the status: ready and consistent.
    pub fn ready_and_consistent(&self) -> bool {
        self.ready && self.consistent
    }

    /// Not consistent yet, and not because the kubelet refused a resize (that pod stays as it
    /// is until the SidecarSet or the node changes).
    pub fn in_flight(&self) -> bool {
        !self.consistent && self.resize_refused.is_none()
    }

    /// Spending `maxUnavailable` under `rules`: with OpenKruise's rules a pod upgraded to the
    /// current sidecars that is not ready or not yet running the new image; with the strict
    /// rules also any other pod that is not ready.
    pub fn unavailable(&self, rules: Rules) -> bool {
        match rules {
            Rules::OpenKruise => self.updated && (!self.ready || self.in_flight()),
            Rules::Strict => !self.ready || (self.updated && self.in_flight()),
        }
    }
}

/// How `partition` and `maxUnavailable` are counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Rules {
    /// As OpenKruise (`sidecarset_strategy.go`): `partition` holds back that many of the pods
    /// that could be upgraded now; `maxUnavailable` is spent by pods already upgraded that are
    /// not ready or not yet running the new image (a pod that was not ready before, for its own
    /// reasons, spends nothing).
    #[default]
    OpenKruise,
    /// Stricter, opt-in (`--rollout-rules=strict`): `partition` is the number of matched pods
    /// kept on the old sidecars, counting pods that cannot be upgraded in place; every pod that
    /// is not ready spends `maxUnavailable`, so an unhealthy workload is never taken further
    /// down.
    Strict,
}

impl std::str::FromStr for Rules {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openkruise" => Ok(Rules::OpenKruise),
            "strict" => Ok(Rules::Strict),
            _ => Err(format!("{s:?}: use openkruise or strict")),
        }
    }
}

/// Classifies pods for one SidecarSet; compiles the update selector once.
#[derive(Debug, Clone)]
pub struct Classifier<'a> {
    entry: &'a Entry,
    /// `None`: no update selector, every pod is selected.
    update_selector: Option<CompiledSelector>,
    /// In-place resize on: the hashes without image from which a resize brings a pod up to
    /// date ([`resize::resizable_from`]). `None`: off.
    resizable: Option<BTreeSet<String>>,
}

impl<'a> Classifier<'a> {
    /// Fails when `spec.updateStrategy.selector` does not compile (validation keeps such
    /// SidecarSets out; old objects may still have one).
    pub fn new(entry: &'a Entry) -> Result<Self, String> {
        let update_selector =
            match &entry.ss.spec.update_strategy.selector {
                None => None,
                Some(sel) => Some(CompiledSelector::compile(sel).map_err(|e| {
                    format!("spec.updateStrategy.selector.{}: {}", e.field, e.message)
                })?),
            };
        Ok(Classifier {
            entry,
            update_selector,
            resizable: None,
        })
    }

    /// Turns in-place resize on: a pod whose hash without image is in `resizable` is
    /// upgradable (see [`resize::resizable_from`]), and the kubelet's progress on a resize
    /// decides whether a pod is consistent.
    pub fn with_resize(mut self, resizable: BTreeSet<String>) -> Self {
        self.resizable = Some(resizable);
        self
    }

    /// What the controller needs to know about `pod` for this SidecarSet.
    pub fn view(&self, pod: &Pod) -> PodView {
        let ss = &self.entry.ss;
        let name = ss.name();
        let meta = &pod.metadata;
        let empty = BTreeMap::new();
        let annotations = meta.annotations.as_ref().unwrap_or(&empty);
        let labels = meta.labels.as_ref().unwrap_or(&empty);
        let hash = hash_entry(annotations, ANNOTATION_HASH, name);
        let hash_wo = hash_entry(annotations, ANNOTATION_HASH_WITHOUT_IMAGE, name);
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
        let ready_condition = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .filter(|c| c.status == "True");
        let native: BTreeSet<&str> = pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .filter(|c| c.restart_policy.as_deref() == Some("Always"))
            .map(|c| c.name.as_str())
            .collect();
        let restarts = status
            .into_iter()
            .flat_map(|s| {
                let init = s
                    .init_container_statuses
                    .iter()
                    .flatten()
                    .filter(|c| native.contains(c.name.as_str()));
                s.container_statuses.iter().flatten().chain(init)
            })
            .map(|c| c.restart_count)
            .max()
            .unwrap_or(0);
        let running_ready = phase == "Running" && ready_condition.is_some();
        let hot = ss.hot_upgrade_containers().next().is_some();
        let resize = self
            .resizable
            .as_ref()
            .map(|_| resize::resize_state(pod, ss));
        let reset = hot
            && hot::reset_due(
                pod,
                ss,
                pod_consistent(pod, ss, &hot::idle_containers(pod, ss)),
                running_ready,
            );
        PodView {
            key: format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or(""),
                meta.name.as_deref().unwrap_or("")
            ),
            active: crate::inject::pod_is_active(pod),
            injected: hash.is_some() || crate::api::injected_list(annotations).contains(name),
            updated: hash.is_some_and(|h| h.hash == *self.entry.hash),
            upgradable: hash_wo.is_some_and(|h| {
                h.hash == *self.entry.hash_without_image
                    || self.resizable.as_ref().is_some_and(|r| r.contains(&h.hash))
            }),
            consistent: pod_consistent(pod, ss, &BTreeSet::new())
                && resize
                    .as_ref()
                    .is_none_or(|r| *r == resize::ResizeState::Done),
            // A pod amid a hot upgrade (an idle container off the empty image) is not ready for
            // the rollout, as OpenKruise's IsPodReady.
            ready: running_ready && (!hot || hot::idle_on_empty(pod, ss)),
            matches_update_selector: self
                .update_selector
                .as_ref()
                .is_none_or(|s| s.matches(labels)),
            assigned: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty()),
            phase_rank: match phase {
                "Unknown" => 1,
                "Running" => 2,
                _ => 0,
            },
            ready_since: ready_condition
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0.as_second()),
            restarts,
            created: meta
                .creation_timestamp
                .as_ref()
                .map_or(i64::MAX, |t| t.0.as_second()),
            labels: labels.clone(),
            reset,
            resize_refused: match resize {
                Some(resize::ResizeState::Refused(why)) => Some(why),
                _ => None,
            },
        }
    }
}

/// [`Classifier::view`] for a single pod. An update selector that does not compile selects no
/// pod (nothing is upgraded by mistake); use [`Classifier::new`] to see the error.
pub fn pod_view(pod: &Pod, entry: &Entry) -> PodView {
    match Classifier::new(entry) {
        Ok(c) => c.view(pod),
        Err(_) => {
            let c = Classifier {
                entry,
                update_selector: None,
                resizable: None,
            };
            PodView {
                matches_update_selector: false,
                ..c.view(pod)
            }
        }
    }
}

fn hash_entry(
    annotations: &BTreeMap<String, String>,
    key: &str,
    name: &str,
) -> Option<SidecarSetUpgradeSpec> {
    parse_hash_annotation(annotations.get(key)?)?.remove(name)
}

/// True when the kubelet has acted on the pod spec, as far as this SidecarSet's sidecars go
/// (but those in `skip`): as many container statuses as containers, and each sidecar present
/// in the pod (containers, both of a hot-upgrade pair, and native sidecars among the init
/// containers) has a status whose image matches its spec image, or that is not the instance an
/// in-place upgrade replaced ([`settled`]).
fn pod_consistent(pod: &Pod, ss: &SidecarSet, skip: &BTreeSet<String>) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let status = pod.status.as_ref();
    let statuses = status
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or(&[]);
    let init_statuses = status
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or(&[]);
    if spec.containers.len() != statuses.len() {
        return false;
    }
    // A hot-upgrade sidecar is its pair of containers.
    let names: Vec<String> = ss
        .spec
        .containers
        .iter()
        .flat_map(|c| c.pod_names())
        .filter(|n| !skip.contains(n))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // The SidecarSet's native sidecars, and its containers where the pod has them as native
    // sidecars (native sidecar mode): a name not in the list is not checked there.
    let native: Vec<&str> = ss
        .spec
        .init_containers
        .iter()
        .filter(|c| c.is_native_sidecar())
        .chain(ss.spec.containers.iter().filter(|c| !c.is_hot_upgrade()))
        .map(|c| c.name())
        .collect();
    let recorded = inplace_state(pod.metadata.annotations.as_ref())
        .remove(ss.name())
        .map(|s| s.last_container_statuses)
        .unwrap_or_default();
    statuses_match(&names, &spec.containers, statuses, &recorded)
        && statuses_match(
            &native,
            spec.init_containers.as_deref().unwrap_or(&[]),
            init_statuses,
            &recorded,
        )
}

/// Each of `names` that is in `containers` has a status that shows the kubelet acted on its spec
/// image ([`settled`]).
fn statuses_match(
    names: &[&str],
    containers: &[Container],
    statuses: &[ContainerStatus],
    recorded: &BTreeMap<String, InPlaceContainerStatus>,
) -> bool {
    names.iter().all(|name| {
        let Some(c) = containers.iter().find(|c| c.name == *name) else {
            return true; // not in this pod: nothing to check
        };
        statuses
            .iter()
            .find(|s| s.name == *name)
            .is_some_and(|s| settled(c.image.as_deref().unwrap_or(""), recorded.get(*name), s))
    })
}

/// Whether status `s` shows that the kubelet has acted on `spec_image`: it names that image
/// ([`image_matches`]), or it is not the instance that ran when the in-place upgrade was
/// recorded (`recorded`, from `kruise.io/sidecarset-inplace-update-state`). What a real kubelet
/// (1.36 with containerd, hack/node.sh) reports after an image change:
/// * it stops the old instance and starts one from the new spec: restartCount + 1, and another
///   image ID unless the new tag names the same image; the runtime names the image by one of
///   its tags, not necessarily the spec's (a tag alias shows the image's first tag);
/// * when the new image cannot be pulled, or the new instance waits in CrashLoopBackOff, the
///   status keeps the old image and image ID, not running (waiting, or terminated/Completed for
///   a native sidecar that exited 0): the kubelet has acted and the sidecar fails. The pod is
///   not ready, so it counts as unavailable, and it stays upgradable: a fixed image reaches it;
/// * a pod never upgraded in place runs what it was created with, under whatever tag.
///
/// So only a running instance with the recorded image ID and no restart since is the old one.
/// Records without a restart count (OpenKruise's) decide by the image ID alone, as OpenKruise;
/// a spec that pins a digest is decided by the image ID.
fn settled(
    spec_image: &str,
    recorded: Option<&InPlaceContainerStatus>,
    s: &ContainerStatus,
) -> bool {
    if image_matches(spec_image, &s.image, &s.image_id) {
        return true;
    }
    let running =
        s.started == Some(true) || s.state.as_ref().is_some_and(|st| st.running.is_some());
    if !running {
        return true;
    }
    if spec_image.contains('@') {
        return false;
    }
    recorded.is_none_or(|r| {
        s.image_id != r.image_id || r.restart_count.is_some_and(|n| s.restart_count > n)
    })
}

/// Normalises an image reference the way container runtimes report it:
/// `nginx` → `docker.io/library/nginx:latest`, `repo/x:1` → `docker.io/repo/x:1`,
/// `index.docker.io/...` → `docker.io/...`. A reference with a digest and no tag gets no
/// `:latest`. Registries (a first component with `.` or `:`, or `localhost`) are kept as they
/// are. The empty string stays empty.
pub fn normalize_image(image: &str) -> String {
    let image = image.trim();
    if image.is_empty() {
        return String::new();
    }
    let (name_tag, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last_slash = name_tag.rfind('/');
    let (name, tag) = match name_tag.rfind(':') {
        Some(i) if last_slash.is_none_or(|s| i > s) => (&name_tag[..i], Some(&name_tag[i + 1..])),
        _ => (name_tag, None),
    };
    let (domain, path) = match name.split_once('/') {
        Some((d, rest))
            if d.contains('.')
                || d.contains(':')
                || d == "localhost"
                || d.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            (d, rest)
        }
        _ => ("docker.io", name),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let mut out = if domain == "docker.io" && !path.contains('/') {
        format!("{domain}/library/{path}")
    } else {
        format!("{domain}/{path}")
    };
    match (tag, digest) {
        (Some(t), _) => {
            out.push(':');
            out.push_str(t);
        }
        (None, None) => out.push_str(":latest"),
        (None, Some(_)) => {}
    }
    if let Some(d) = digest {
        out.push('@');
        out.push_str(d);
    }
    out
}

/// True when a container status (`image`, `imageID`) shows the container runs `spec_image`:
/// the normalised names are equal, or the spec pins a digest (`x@sha256:…`) that the status
/// image or imageID ends with.
pub fn image_matches(spec_image: &str, status_image: &str, status_image_id: &str) -> bool {
    if normalize_image(spec_image) == normalize_image(status_image) {
        return true;
    }
    match spec_image.split_once('@') {
        Some((_, digest)) if !digest.is_empty() => {
            let digest = digest.trim();
            status_image_id.trim().ends_with(digest) || status_image.trim().ends_with(digest)
        }
        _ => false,
    }
}

/// The SidecarSet status counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Active pods injected by the SidecarSet.
    pub matched: i32,
    /// Matched pods whose hash is the current one.
    pub updated: i32,
    /// Matched pods that are ready and consistent.
    pub ready: i32,
    /// Updated and ready (as above).
    pub updated_ready: i32,
}

/// Counts the status of the SidecarSet from the views of its pods.
pub fn status(views: &[PodView]) -> Status {
    let mut s = Status::default();
    for v in views.iter().filter(|v| v.matched()) {
        s.matched += 1;
        s.updated += i32::from(v.updated);
        s.ready += i32::from(v.ready_and_consistent());
        s.updated_ready += i32::from(v.updated && v.ready_and_consistent());
    }
    s
}

/// What to do this round.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Keys of the pods to upgrade now, in upgrade order.
    pub upgrade: Vec<String>,
    /// Matched, selected pods that are not updated and cannot be upgraded in place because
    /// something besides an image changed (sorted by key). Empty when paused or NotUpdate.
    pub not_upgradable: Vec<String>,
    /// Why nothing moves, set when `upgrade` is empty and the rollout is not done.
    pub waiting: Option<String>,
    /// Every matched pod is updated, consistent and ready (true when no pod is matched).
    pub done: bool,
    /// `partition` resolved against the matched pods: pods kept on the old sidecars.
    pub partition: i32,
    /// `maxUnavailable` resolved against the matched pods.
    pub max_unavailable: i32,
    /// Keys of the pods whose old hot-upgrade containers are reset to the empty image now
    /// (sorted). When there are any, no pod is upgraded this round (as OpenKruise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reset: Vec<String>,
    /// Keys of the pods left out of this round because a write to them was refused and its
    /// retry is not due yet (see [`plan_holding`]; sorted): due for a reset, or candidates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<String>,
}

/// Scales an int-or-percentage against `total`: ints are returned as they are; `"N%"` (N a
/// non-negative integer) is `N * total / 100`, rounded up or down. A negative `total` counts
/// as 0. Anything else is an error naming the value.
pub fn scaled(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        IntOrString::Int(i) => Ok(*i),
        IntOrString::String(s) => {
            let pct = parse_percent(s)?;
            let prod = i64::from(pct) * i64::from(total.max(0));
            let n = if round_up {
                (prod + 99) / 100
            } else {
                prod / 100
            };
            Ok(i32::try_from(n).unwrap_or(i32::MAX))
        }
    }
}

fn parse_percent(s: &str) -> Result<u32, String> {
    s.strip_suffix('%')
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or_else(|| format!("{s:?} is not an integer or percentage"))
}

/// `partition` against `total` matched pods, as OpenKruise's `CalculatePartitionReplicas`:
/// a percentage rounds up (above 0% keeps at least one pod), one below 100% upgrades at least
/// one pod when there are several; the result is within `0..=total`.
fn resolve_partition(p: Option<&IntOrString>, total: i32) -> Result<i32, String> {
    const FIELD: &str = "spec.updateStrategy.partition";
    let Some(p) = p else { return Ok(0) };
    let n = scaled(p, total, true).map_err(|e| format!("{FIELD}: {e}"))?;
    if n < 0 {
        return Err(format!("{FIELD}: {n} is negative"));
    }
    let mut n = n.min(total);
    if let IntOrString::String(s) = p
        && parse_percent(s).is_ok_and(|pct| pct < 100)
        && n == total
        && total > 1
    {
        n -= 1;
    }
    Ok(n)
}

/// `maxUnavailable` against `total` matched pods: default 1; a percentage rounds up; a value
/// above zero is at least 1.
fn resolve_max_unavailable(m: Option<&IntOrString>, total: i32) -> Result<i32, String> {
    const FIELD: &str = "spec.updateStrategy.maxUnavailable";
    let Some(m) = m else { return Ok(1) };
    let n = scaled(m, total, true).map_err(|e| format!("{FIELD}: {e}"))?;
    if n < 0 {
        return Err(format!("{FIELD}: {n} is negative"));
    }
    let positive = match m {
        IntOrString::Int(i) => *i > 0,
        IntOrString::String(s) => parse_percent(s).is_ok_and(|p| p > 0),
    };
    Ok(if positive { n.max(1) } else { n })
}

/// OpenKruise's (and Kubernetes' `ActivePods`) order, least valuable first: unassigned before
/// assigned; Pending < Unknown < Running; not ready before ready; when both are ready, ready
/// for a shorter time first (no time first); more restarts first; newer first; then by key.
pub fn upgrade_order(a: &PodView, b: &PodView) -> Ordering {
    a.assigned
        .cmp(&b.assigned)
        .then(a.phase_rank.cmp(&b.phase_rank))
        .then(a.ready.cmp(&b.ready))
        .then_with(|| {
            if a.ready && b.ready {
                match (a.ready_since, b.ready_since) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(x), Some(y)) => y.cmp(&x),
                }
            } else {
                Ordering::Equal
            }
        })
        .then(b.restarts.cmp(&a.restarts))
        .then(b.created.cmp(&a.created))
        .then_with(|| a.key.cmp(&b.key))
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// `1 pod`, `N pods`: for messages.
pub fn pods(n: usize) -> String {
    if n == 1 {
        "1 pod".to_string()
    } else {
        format!("{n} pods")
    }
}

/// Up to five keys, for messages.
pub fn some_keys<'a>(keys: impl Iterator<Item = &'a str>) -> String {
    let all: Vec<&str> = keys.collect();
    let mut s = all.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    if all.len() > 5 {
        s.push_str(&format!(", and {} more", all.len() - 5));
    }
    s
}

/// Decides which pods to upgrade this round (see the module documentation for the rules).
///
/// * `type: NotUpdate` or `paused: true`: nothing (waiting says which).
/// * Candidates: matched, not updated, upgradable, consistent, selected by the update
///   selector; sorted by [`upgrade_order`], then reordered by `priorityStrategy` and
///   `scatterStrategy` (see [`order`]). Selected pods that are not upgradable are listed in
///   `not_upgradable`.
/// * `partition` (int, or percent of the matched pods rounded up): at most
///   `matched - partition - updated` more pods are upgraded: the last candidates stay.
/// * `maxUnavailable` (int, or percent of the matched pods rounded up, at least 1 when above
///   zero; default 1): the budget is `maxUnavailable` minus the matched pods that are not ready
///   or are updated but not yet consistent. Candidates that are not ready are upgraded without
///   using budget; ready ones only within it. With `maxUnavailable: 0` only candidates that
///   are not ready move.
///
/// Errors (a bad or negative partition or maxUnavailable) name the field.
pub fn plan(strategy: &SidecarSetUpdateStrategy, views: &[PodView]) -> Result<Plan, String> {
    plan_with(strategy, views, Rules::OpenKruise)
}

/// [`plan`] with the counting `rules` (OpenKruise's or the strict ones).
pub fn plan_with(
    strategy: &SidecarSetUpdateStrategy,
    views: &[PodView],
    rules: Rules,
) -> Result<Plan, String> {
    plan_holding(strategy, views, rules, &BTreeSet::new())
}

/// [`plan_with`], holding the pods of `held` (keys): pods whose last in-place write (a reset or
/// an upgrade) the API server refused, an admission policy for instance, and whose retry is not
/// due yet. They are left out of this round and listed in [`Plan::held`]; the other pods go on
/// without them:
/// * a held reset does not keep the other pods from being upgraded (a reset due holds every
///   upgrade, as OpenKruise, only while it can be written);
/// * a pod whose reset is held does not spend `maxUnavailable`: a reset is due only once the
///   pod's working containers run the new image and are ready, so the pod serves; only its old,
///   idle container is not back on the empty image;
/// * a held candidate is not upgraded and is not counted as one (as a pod that is not
///   upgradable in place), so the next candidate takes its turn.
///
/// A held pod is never done (not updated, or amid its hot upgrade): the rollout does not
/// complete without it.
pub fn plan_holding(
    strategy: &SidecarSetUpdateStrategy,
    views: &[PodView],
    rules: Rules,
    held: &BTreeSet<String>,
) -> Result<Plan, String> {
    let matched: Vec<&PodView> = views.iter().filter(|v| v.matched()).collect();
    let total = count(matched.len());
    let partition = resolve_partition(strategy.partition.as_ref(), total)?;
    let max_unavailable = resolve_max_unavailable(strategy.max_unavailable.as_ref(), total)?;
    let done = matched
        .iter()
        .all(|v| v.updated && v.ready_and_consistent());
    let mut plan = Plan {
        done,
        partition,
        max_unavailable,
        ..Plan::default()
    };

    if let Some(reason) = waiting::stopped(strategy) {
        if !done {
            plan.waiting = Some(reason.to_string());
        }
        return Ok(plan);
    }

    if resets(&mut plan, &matched, held) {
        return Ok(plan);
    }
    let is_held = |v: &PodView| held.contains(&v.key);

    let old: Vec<&PodView> = matched.iter().copied().filter(|v| !v.updated).collect();
    let selected: Vec<&PodView> = old
        .iter()
        .copied()
        .filter(|v| v.matches_update_selector)
        .collect();
    let mut not_upgradable: Vec<String> = selected
        .iter()
        .filter(|v| !v.upgradable)
        .map(|v| v.key.clone())
        .collect();
    not_upgradable.sort();
    plan.not_upgradable = not_upgradable;
    let mut candidates = candidates(strategy, &matched);
    candidates.retain(|v| !is_held(v));

    let updated = total - count(old.len());
    let allowed = match rules {
        Rules::OpenKruise => candidates
            .len()
            .saturating_sub(usize::try_from(partition).unwrap_or(0)),
        Rules::Strict => usize::try_from((total - partition - updated).max(0)).unwrap_or(0),
    };
    let mut unavailable: Vec<&PodView> = matched
        .iter()
        .copied()
        .filter(|v| v.unavailable(rules) && !(v.reset && is_held(v)))
        .collect();
    unavailable.sort_by(|a, b| a.key.cmp(&b.key));
    let mut budget = (max_unavailable - count(unavailable.len())).max(0);
    let mut blocked = 0usize;
    for v in candidates.iter().take(allowed) {
        if !v.ready {
            plan.upgrade.push(v.key.clone());
        } else if budget > 0 {
            budget -= 1;
            plan.upgrade.push(v.key.clone());
        } else {
            blocked += 1;
        }
    }
    if !plan.upgrade.is_empty() || done {
        return Ok(plan);
    }

    let mut why = if blocked > 0 {
        waiting::max_unavailable_reached(max_unavailable, &unavailable)
    } else if !candidates.is_empty() {
        format!(
            "partition {partition} reached: {} of {total} kept on the old sidecars",
            pods(old.len())
        )
    } else if old.is_empty() {
        waiting::settling(&matched)
    } else {
        waiting::nothing_upgradable(&matched, &old, &selected, &plan.not_upgradable)
    };
    if !plan.held.is_empty() {
        why.push_str(&waiting::held(&plan.held));
    }
    plan.waiting = Some(why);
    Ok(plan)
}

/// Puts into `plan` the held pods and the resets due now: hot upgrades whose new container took
/// over, their old containers to go back to the empty image first, before any other pod is
/// upgraded (held pods left out). True when there are resets: nothing else this round.
fn resets(plan: &mut Plan, matched: &[&PodView], held: &BTreeSet<String>) -> bool {
    let is_held = |v: &PodView| held.contains(&v.key);
    let mut reset: Vec<String> = matched
        .iter()
        .filter(|v| v.reset && !is_held(v))
        .map(|v| v.key.clone())
        .collect();
    plan.held = matched
        .iter()
        .filter(|v| is_held(v) && (v.reset || (!v.updated && v.matches_update_selector)))
        .map(|v| v.key.clone())
        .collect();
    plan.held.sort();
    if reset.is_empty() {
        return false;
    }
    reset.sort();
    plan.waiting = Some(waiting::resetting(&reset));
    plan.reset = reset;
    true
}

/// The pods that can be upgraded now (matched, not updated, selected, upgradable, consistent)
/// in upgrade order: [`upgrade_order`], then `priorityStrategy` and `scatterStrategy`.
fn candidates<'a>(
    strategy: &SidecarSetUpdateStrategy,
    matched: &[&'a PodView],
) -> Vec<&'a PodView> {
    // Indexes into `matched`: scatter weighs the candidates against every matched pod.
    let mut order: Vec<usize> = (0..matched.len())
        .filter(|&i| {
            let v = matched[i];
            !v.updated && v.matches_update_selector && v.upgradable && v.consistent
        })
        .collect();
    order.sort_by(|&a, &b| upgrade_order(matched[a], matched[b]));
    let labels: Vec<&BTreeMap<String, String>> = matched.iter().map(|v| &v.labels).collect();
    let order = order::arrange(strategy, &labels, order);
    order.iter().map(|&i| matched[i]).collect()
}

fn ptr(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

/// The JSON patch that upgrades `pod` in place to the SidecarSet of `entry`:
/// * `replace /spec/containers/<i>/image` for each of the SidecarSet's containers in the pod
///   whose image differs (normalised) from the SidecarSet's, and the same under
///   `/spec/initContainers` for its native sidecars;
/// * `add /metadata/annotations/kruise.io~1sidecarset-hash`: the pod's map with this
///   SidecarSet's entry set to the current hash, `updateTimestamp` `now`, the current
///   `sidecarList`, and the `controllerRevision` the pod had;
/// * `add` the SidecarSet to `kruise.io/sidecarset-injected-list` when it is missing there.
///
/// Never replaces a container or a list; leaves the hash-without-image annotation alone.
/// Returns `None` when the pod was not injected by this SidecarSet, is not upgradable (its
/// hash-without-image differs: an in-place upgrade would leave it different from the
/// SidecarSet), or nothing would change.
/// Pod condition type OpenKruise keeps on pods of SidecarSets.
pub const CONDITION_UPGRADABLE: &str = "SidecarSetUpgradable";

/// The pod condition `SidecarSetUpgradable` after recording `upgradable` for SidecarSet `ss`,
/// as OpenKruise keeps it (`updatePodSidecarSetUpgradableCondition`): the message is a JSON map
/// of SidecarSet name to whether the pod can be upgraded in place to it, so several SidecarSets
/// on one pod each keep their own entry; the status is True (reason `AllSidecarsetUpgradable`)
/// when every entry is true, False (reason `UpdateImmutableField`) otherwise. None when nothing
/// changes (no write needed). `lastTransitionTime` moves only when the status flips.
pub fn upgradable_condition(
    current: Option<&k8s_openapi::api::core::v1::PodCondition>,
    ss: &str,
    upgradable: bool,
    now: &str,
) -> Option<serde_json::Value> {
    let mut entries: BTreeMap<String, bool> = current
        .and_then(|c| c.message.as_deref())
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    if current.is_some() && entries.get(ss) == Some(&upgradable) {
        return None;
    }
    entries.insert(ss.to_string(), upgradable);
    let all = entries.values().all(|v| *v);
    let status = if all { "True" } else { "False" };
    let transition = match current {
        Some(c) if c.status == status => c
            .last_transition_time
            .as_ref()
            .map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_else(|| now.to_string()),
        _ => now.to_string(),
    };
    Some(serde_json::json!({
        "type": CONDITION_UPGRADABLE,
        "status": status,
        "reason": if all { "AllSidecarsetUpgradable" } else { "UpdateImmutableField" },
        "message": serde_json::to_string(&entries).unwrap_or_default(),
        "lastTransitionTime": transition,
    }))
}

/// Pod annotation (OpenKruise's): per SidecarSet, the revision of its last in-place upgrade,
/// when it was made and the image ID each upgraded sidecar ran before it.
pub const ANNOTATION_INPLACE_UPDATE_STATE: &str = "kruise.io/sidecarset-inplace-update-state";

/// One SidecarSet's entry of [`ANNOTATION_INPLACE_UPDATE_STATE`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateState {
    #[serde(default)]
    pub revision: String,
    #[serde(default)]
    pub update_timestamp: String,
    #[serde(default)]
    pub last_container_statuses: BTreeMap<String, InPlaceContainerStatus>,
}

/// What a sidecar ran before its in-place upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceContainerStatus {
    #[serde(rename = "imageID", default)]
    pub image_id: String,
    /// Its restart count then (ours; OpenKruise ignores it): a restart since means the kubelet
    /// acted on the new image even when the image ID stays (a tag alias).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<i32>,
}

/// The pod's [`ANNOTATION_INPLACE_UPDATE_STATE`]; empty when absent or not JSON of that shape.
pub fn inplace_state(
    annotations: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, InPlaceUpdateState> {
    annotations
        .and_then(|a| a.get(ANNOTATION_INPLACE_UPDATE_STATE))
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i32) -> IntOrString {
        IntOrString::Int(i)
    }

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.into())
    }

    #[test]
    fn scaled_values() {
        assert_eq!(scaled(&s("25%"), 10, true), Ok(3));
        assert_eq!(scaled(&s("25%"), 10, false), Ok(2));
        assert_eq!(scaled(&s("5%"), 10, true), Ok(1));
        assert_eq!(scaled(&s("5%"), 10, false), Ok(0));
        assert_eq!(scaled(&s("100%"), 7, true), Ok(7));
        assert_eq!(scaled(&s("0%"), 7, true), Ok(0));
        assert_eq!(scaled(&s("200%"), 3, true), Ok(6));
        assert_eq!(scaled(&s("50%"), 0, true), Ok(0));
        assert_eq!(scaled(&s("50%"), -4, true), Ok(0));
        assert_eq!(scaled(&int(4), 10, true), Ok(4));
        assert_eq!(scaled(&int(-2), 10, true), Ok(-2));
        assert_eq!(scaled(&int(40), 10, true), Ok(40));
        assert_eq!(scaled(&s("4294967295%"), i32::MAX, true), Ok(i32::MAX));
        for bad in [
            "abc",
            "5",
            "%",
            "-5%",
            "+5%",
            " 5%",
            "5 %",
            "1.5%",
            "99999999999%",
            "",
        ] {
            let e = scaled(&s(bad), 10, true).unwrap_err();
            assert!(e.contains("is not an integer or percentage"), "{bad}: {e}");
        }
    }

    #[test]
    fn partition_and_max_unavailable_resolution() {
        assert_eq!(resolve_partition(None, 10), Ok(0));
        assert_eq!(resolve_partition(Some(&int(3)), 10), Ok(3));
        assert_eq!(resolve_partition(Some(&int(30)), 10), Ok(10));
        assert_eq!(resolve_partition(Some(&s("1%")), 10), Ok(1));
        assert_eq!(resolve_partition(Some(&s("99%")), 10), Ok(9));
        assert_eq!(resolve_partition(Some(&s("99%")), 1), Ok(1));
        assert_eq!(resolve_partition(Some(&s("100%")), 10), Ok(10));
        assert_eq!(resolve_partition(Some(&s("0%")), 10), Ok(0));
        let e = resolve_partition(Some(&int(-1)), 10).unwrap_err();
        assert_eq!(e, "spec.updateStrategy.partition: -1 is negative");
        assert_eq!(resolve_max_unavailable(None, 10), Ok(1));
        assert_eq!(resolve_max_unavailable(None, 0), Ok(1));
        assert_eq!(resolve_max_unavailable(Some(&int(0)), 10), Ok(0));
        assert_eq!(resolve_max_unavailable(Some(&s("0%")), 10), Ok(0));
        assert_eq!(resolve_max_unavailable(Some(&s("1%")), 0), Ok(1));
        assert_eq!(resolve_max_unavailable(Some(&s("5%")), 10), Ok(1));
        assert_eq!(resolve_max_unavailable(Some(&s("50%")), 5), Ok(3));
        let e = resolve_max_unavailable(Some(&s("abc")), 10).unwrap_err();
        assert_eq!(
            e,
            "spec.updateStrategy.maxUnavailable: \"abc\" is not an integer or percentage"
        );
    }

    #[test]
    fn normalised_images() {
        for (a, b) in [
            ("nginx", "docker.io/library/nginx:latest"),
            ("nginx:1.23", "docker.io/library/nginx:1.23"),
            ("repo/x:tag", "docker.io/repo/x:tag"),
            (
                "index.docker.io/library/nginx",
                "docker.io/library/nginx:latest",
            ),
            ("library/nginx", "docker.io/library/nginx:latest"),
            ("quay.io/a/b", "quay.io/a/b:latest"),
            ("localhost/a", "localhost/a:latest"),
            ("registry:5000/a:1", "registry:5000/a:1"),
            ("registry:5000/a", "registry:5000/a:latest"),
            ("nginx@sha256:abc", "docker.io/library/nginx@sha256:abc"),
            ("nginx:1@sha256:abc", "docker.io/library/nginx:1@sha256:abc"),
            (" nginx ", "docker.io/library/nginx:latest"),
            ("", ""),
        ] {
            assert_eq!(normalize_image(a), b, "{a}");
            assert_eq!(normalize_image(b), b, "{b} is not a fixed point");
        }
    }

    #[test]
    fn image_matching() {
        assert!(image_matches("nginx", "docker.io/library/nginx:latest", ""));
        assert!(image_matches("repo:tag", "docker.io/library/repo:tag", ""));
        assert!(!image_matches(
            "nginx:1.23",
            "docker.io/library/nginx:latest",
            "x"
        ));
        // The same imageID under another tag is not enough (kruise#1270).
        assert!(!image_matches(
            "nginx:1.23",
            "docker.io/library/nginx:latest",
            "docker.io/library/nginx@sha256:aaa"
        ));
        assert!(image_matches(
            "nginx@sha256:aaa",
            "sha256:0123",
            "docker-pullable://nginx@sha256:aaa"
        ));
        assert!(image_matches(
            "nginx@sha256:aaa",
            "docker.io/library/nginx@sha256:aaa",
            ""
        ));
        assert!(!image_matches(
            "nginx@sha256:aaa",
            "docker.io/library/nginx:latest",
            "docker.io/library/nginx@sha256:bbb"
        ));
        assert!(!image_matches("nginx", "", ""));
    }

    fn v(key: &str) -> PodView {
        PodView {
            key: key.into(),
            active: true,
            injected: true,
            upgradable: true,
            consistent: true,
            ready: true,
            matches_update_selector: true,
            assigned: true,
            phase_rank: 2,
            ..PodView::default()
        }
    }

    #[test]
    fn order_follows_active_pods() {
        let mut pods = [
            PodView {
                created: 5,
                ..v("old")
            },
            PodView {
                created: 9,
                ..v("new")
            },
            PodView {
                restarts: 3,
                ..v("restarts")
            },
            PodView {
                ready_since: Some(100),
                ..v("ready-long")
            },
            PodView {
                ready_since: Some(200),
                ..v("ready-short")
            },
            PodView {
                ready: false,
                ..v("not-ready")
            },
            PodView {
                ready: false,
                phase_rank: 1,
                ..v("unknown")
            },
            PodView {
                ready: false,
                phase_rank: 0,
                ..v("pending")
            },
            PodView {
                ready: false,
                assigned: false,
                phase_rank: 0,
                ..v("unassigned")
            },
            v("tie-b"),
            v("tie-a"),
        ];
        pods.sort_by(upgrade_order);
        let keys: Vec<&str> = pods.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "unassigned",
                "pending",
                "unknown",
                "not-ready",
                "restarts",
                "new",
                "old",
                "tie-a",
                "tie-b",
                "ready-short",
                "ready-long",
            ]
        );
    }

    #[test]
    fn status_counts() {
        let views = [
            PodView {
                updated: true,
                ..v("a")
            },
            PodView {
                updated: true,
                consistent: false,
                ..v("b")
            },
            PodView {
                ready: false,
                ..v("c")
            },
            PodView {
                injected: false,
                ..v("d")
            },
            PodView {
                active: false,
                updated: true,
                ..v("e")
            },
        ];
        assert_eq!(
            status(&views),
            Status {
                matched: 3,
                updated: 2,
                ready: 1,
                updated_ready: 1
            }
        );
    }

    #[test]
    fn plan_never_exceeds_budget() {
        // Exhaustive over small pods sets: ready upgrades never exceed the budget, partition
        // is respected, and every upgrade is a candidate.
        for mask in 0u32..(1 << 10) {
            let views: Vec<PodView> = (0..5)
                .map(|i| PodView {
                    updated: mask & (1 << i) != 0,
                    ready: mask & (1 << (i + 5)) != 0,
                    created: i64::from(i),
                    ..v(&format!("p{i}"))
                })
                .collect();
            for (mu, part, rules) in (0..3).flat_map(|mu| {
                (0..6)
                    .flat_map(move |part| [Rules::OpenKruise, Rules::Strict].map(|r| (mu, part, r)))
            }) {
                {
                    let st = SidecarSetUpdateStrategy {
                        max_unavailable: Some(int(mu)),
                        partition: Some(int(part)),
                        ..Default::default()
                    };
                    let p = plan_with(&st, &views, rules).unwrap();
                    let unavailable = views.iter().filter(|x| x.unavailable(rules)).count() as i32;
                    let ready_up = p
                        .upgrade
                        .iter()
                        .filter(|k| views.iter().any(|x| &x.key == *k && x.ready))
                        .count() as i32;
                    assert!(ready_up <= (mu - unavailable).max(0));
                    let updated = views.iter().filter(|x| x.updated).count() as i32;
                    let old_after = 5 - updated - p.upgrade.len() as i32;
                    assert!(old_after >= part.min(5 - updated));
                    for k in &p.upgrade {
                        assert!(views.iter().any(|x| &x.key == k && !x.updated));
                    }
                    assert_eq!(p.waiting.is_some(), p.upgrade.is_empty() && !p.done);
                }
            }
        }
    }
}
