//! `diff -f sidecarset.yaml`: what applying a SidecarSet would do, before it is applied. The
//! decisions come from the webhooks' and the controller's code: defaults, validation and
//! conflicts ([`sidecarset_core::api`]), hashes ([`sidecarset_core::index::Entry`]), scopes, and the rollout's
//! classifier and plan ([`sidecarset_core::rollout`]). Pure: the caller gathers the cluster's SidecarSets
//! and pods.

use super::pods::{Hold, NextStep, Rollout, differences, spec_changes};
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use sidecarset_core::api::{SidecarSet, conflicts, injected_list};
use sidecarset_core::index::Entry;
use sidecarset_core::rollout::Classifier;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What `diff` looks at.
pub struct DiffInput<'a> {
    /// The SidecarSet as it would be stored: defaulted, validated, with the hash annotations the
    /// mutating webhook would write.
    pub new: &'a SidecarSet,
    /// The SidecarSet of that name in the cluster, if any.
    pub current: Option<&'a SidecarSet>,
    /// Every SidecarSet in the cluster (the validating webhook checks conflicts against them).
    pub sidecarsets: &'a [SidecarSet],
    /// Pods the change may concern: those either version selects, and those the current one
    /// injected.
    pub pods: &'a [Pod],
    pub namespace_labels: &'a dyn Fn(&str) -> BTreeMap<String, String>,
    pub skip_namespaces: &'a BTreeSet<String>,
    pub now: &'a str,
}

/// The answer of `diff`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffReport {
    pub sidecarset: String,
    /// A SidecarSet of that name exists (the change updates it).
    pub exists: bool,
    /// Changed spec fields (after defaulting both).
    pub changes: Vec<String>,
    /// Only images of sidecars change: every pod it injected can be upgraded in place.
    pub images_only: bool,
    /// What the validating webhook would refuse (conflicts with other SidecarSets).
    pub conflicts: Vec<String>,
    /// Active pods the new version selects.
    pub selected: usize,
    /// Pods the current version injected.
    pub injected: usize,
    pub pods: Vec<PodChange>,
    pub rollout: RolloutPreview,
    /// How the hot-upgrade sidecars whose image changes are upgraded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hot_upgrade: Vec<String>,
}

/// What happens to one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodChange {
    pub pod: String,
    pub change: Change,
    /// The next rollout step for a pod the SidecarSet injected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<NextStep>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Change {
    /// Injected; its sidecars will be upgraded in place.
    UpgradeInPlace,
    /// Injected; differs in more than images: keeps its sidecars until recreated.
    NotUpgradable,
    /// Injected; already runs what the new version asks for.
    Unchanged,
    /// Selected but not injected: gets the sidecars only when recreated.
    InjectedWhenRecreated,
    /// Selected, in a namespace the operator never injects.
    NamespaceExcluded,
}

/// The rollout the controller would run after the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPreview {
    /// `updateStrategy.type`, `paused`, resolved partition and maxUnavailable.
    pub strategy: String,
    /// Upgradable pods in upgrade order (priorityStrategy, scatterStrategy, then OpenKruise's
    /// order).
    pub order: Vec<String>,
    /// The pods of the first step.
    pub first_step: Vec<String>,
    /// The last pods of the order, kept on the old sidecars by partition.
    pub kept_by_partition: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

fn key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or("default"),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

/// Computes the report (see [`DiffInput`]). Err: the new SidecarSet's selectors do not compile
/// (validation refuses such objects first).
pub fn diff(input: &DiffInput) -> Result<DiffReport, String> {
    let new = input.new;
    let name = new.name().to_string();
    let entry = Entry::new(Arc::new(new.clone())).map_err(|e| e.to_string())?;
    let classifier = Classifier::new(&entry)?;
    let (changes, images_only) = spec_changes_of(input, &entry);
    let conflicts = match conflicts(new, input.sidecarsets.iter()) {
        Ok(()) => vec![],
        Err(e) => e.0.iter().map(|f| f.to_string()).collect(),
    };
    let active: Vec<&Pod> = input
        .pods
        .iter()
        .filter(|p| sidecarset_core::inject::pod_is_active(p))
        .collect();
    let injected: Vec<&Pod> = active
        .iter()
        .copied()
        .filter(|p| is_injected(p, &name))
        .collect();
    let views: Vec<sidecarset_core::rollout::PodView> =
        injected.iter().map(|p| classifier.view(p)).collect();
    let rollout = Rollout::new(&new.spec.update_strategy, views);
    let mut pods = injected_pod_changes(input, &entry, &rollout, &injected);
    let selected: Vec<&Pod> = active
        .iter()
        .copied()
        .filter(|p| selects(input, &entry, p))
        .collect();
    for p in selected.iter().filter(|p| !is_injected(p, &name)) {
        pods.push(selected_pod_change(input, &name, p));
    }
    // Rollout order first, then the others by kind and name.
    let position = |k: &str| {
        rollout
            .order
            .iter()
            .position(|o| o == k)
            .unwrap_or(usize::MAX)
    };
    pods.sort_by(|a, b| {
        (position(&a.pod), a.change, &a.pod).cmp(&(position(&b.pod), b.change, &b.pod))
    });
    let preview = rollout_preview(new, &rollout, &pods);
    Ok(DiffReport {
        hot_upgrade: hot_upgrade_notes(input),
        sidecarset: name,
        exists: input.current.is_some(),
        changes,
        images_only,
        conflicts,
        selected: selected.len(),
        injected: injected.len(),
        pods,
        rollout: preview,
    })
}

/// The changed spec fields, and whether only images change (the hashes without images agree).
fn spec_changes_of(input: &DiffInput, entry: &Entry) -> (Vec<String>, bool) {
    let spec_json = |ss: &SidecarSet| serde_json::to_value(&ss.spec).unwrap_or_default();
    match input.current {
        Some(cur) => {
            let cur_entry = Entry::new(Arc::new(cur.clone())).ok();
            (
                spec_changes(&spec_json(cur), &spec_json(input.new)),
                cur_entry.is_some_and(|c| c.hash_without_image == entry.hash_without_image),
            )
        }
        None => (
            vec!["created (no SidecarSet of this name exists)".into()],
            false,
        ),
    }
}

/// The pod's namespace (`default` when unset).
fn ns_of(p: &Pod) -> String {
    p.metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into())
}

/// The new version's scope covers the pod.
fn selects(input: &DiffInput, entry: &Entry, p: &Pod) -> bool {
    let empty = BTreeMap::new();
    entry.matches(
        p.metadata.labels.as_ref().unwrap_or(&empty),
        &(input.namespace_labels)(&ns_of(p)),
    )
}

/// As the controller picks a SidecarSet's pods: by their injected list.
fn is_injected(p: &Pod, name: &str) -> bool {
    injected_list(p.metadata.annotations.as_ref().unwrap_or(&BTreeMap::new())).contains(name)
}

/// What happens to each pod the SidecarSet injected: its next rollout step and how it is
/// upgraded.
fn injected_pod_changes(
    input: &DiffInput,
    entry: &Entry,
    rollout: &Rollout,
    injected: &[&Pod],
) -> Vec<PodChange> {
    let mut pods = Vec::new();
    for p in injected {
        let k = key(p);
        let Some(view) = rollout.view(&k) else {
            continue;
        };
        let next = rollout.next_step(view, || differences(p, entry, input.now));
        let change = match &next {
            NextStep::NotUpgradable { .. } => Change::NotUpgradable,
            NextStep::UpToDate | NextStep::Updating { .. } => Change::Unchanged,
            _ => Change::UpgradeInPlace,
        };
        let mut detail = if selects(input, entry, p) {
            String::new()
        } else {
            "no longer selected by the new scope; still upgraded (the controller follows the pod's injected list)".into()
        };
        if change == Change::UpgradeInPlace {
            for (sidecar, to, other) in sidecarset_core::rollout::hot::upgrade_targets(p, input.new)
            {
                if !detail.is_empty() {
                    detail.push_str("; ");
                }
                detail.push_str(&format!(
                    "hot upgrade of {sidecar}: {to} gets the new image while {other} keeps working, then {other} is reset to the empty image"
                ));
            }
        }
        pods.push(PodChange {
            pod: k,
            change,
            next: Some(next),
            detail,
        });
    }
    pods
}

/// What happens to a pod the new version selects but the SidecarSet did not inject.
fn selected_pod_change(input: &DiffInput, name: &str, p: &Pod) -> PodChange {
    let ns = ns_of(p);
    let (change, detail) = if input.skip_namespaces.contains(&ns) {
        (
            Change::NamespaceExcluded,
            sidecarset_core::inject::excluded_namespace_skip(name, &ns).detail,
        )
    } else {
        (
            Change::InjectedWhenRecreated,
            "selected, not injected: sidecars are injected only when a pod is created; it gets them when recreated".into(),
        )
    };
    PodChange {
        pod: key(p),
        change,
        next: None,
        detail,
    }
}

/// The rollout after the change: its strategy, order, first step and what partition keeps.
fn rollout_preview(new: &SidecarSet, rollout: &Rollout, pods: &[PodChange]) -> RolloutPreview {
    match &rollout.plan {
        Ok(plan) => {
            let kept: Vec<String> = pods
                .iter()
                .filter(|p| {
                    matches!(
                        p.next,
                        Some(NextStep::Held {
                            by: Hold::Partition,
                            ..
                        })
                    )
                })
                .map(|p| p.pod.clone())
                .collect();
            let st = &new.spec.update_strategy;
            RolloutPreview {
                strategy: format!(
                    "{}{}, partition {}, maxUnavailable {}",
                    match st.type_ {
                        Some(sidecarset_core::api::UpdateStrategyType::NotUpdate) => "NotUpdate",
                        _ => "RollingUpdate",
                    },
                    if st.paused { " (paused)" } else { "" },
                    plan.partition,
                    plan.max_unavailable
                ),
                order: rollout.order.clone(),
                first_step: plan.upgrade.clone(),
                kept_by_partition: kept,
                waiting: plan.waiting.clone(),
            }
        }
        Err(e) => RolloutPreview {
            strategy: format!("invalid: {e}"),
            ..Default::default()
        },
    }
}

/// Hot-upgrade sidecars whose image changes: how their pods move.
fn hot_upgrade_notes(input: &DiffInput) -> Vec<String> {
    let current_image = |n: &str| {
        input.current.and_then(|c| {
            c.spec
                .containers
                .iter()
                .find(|x| x.name() == n)
                .and_then(|x| x.container.image.clone())
        })
    };
    input
        .new
        .hot_upgrade_containers()
        .filter(|c| input.current.is_some() && current_image(c.name()) != c.container.image)
        .map(|c| {
            let (one, two) = sidecarset_core::api::hot_upgrade_names(c.name());
            format!(
                "{name} (HotUpgrade): in each pod the new image {image} starts in the idle container of {one}/{two} (the one on {empty}) while the other keeps working; once the pod is ready again, the old one is reset to {empty}, and only then does the next pod count as available",
                name = c.name(),
                image = c.container.image.as_deref().unwrap_or("-"),
                empty = c.hot_upgrade_empty_image().unwrap_or("-"),
            )
        })
        .collect()
}

/// How the human output names a change.
fn change_label(c: Change) -> &'static str {
    match c {
        Change::UpgradeInPlace => "upgrade in place",
        Change::NotUpgradable => "not upgradable",
        Change::Unchanged => "unchanged",
        Change::InjectedWhenRecreated => "injected when recreated",
        Change::NamespaceExcluded => "namespace excluded",
    }
}

/// The report for people.
pub fn human(r: &DiffReport) -> String {
    let mut s = format!(
        "SidecarSet {} ({})\n",
        r.sidecarset,
        if r.exists { "changed" } else { "new" }
    );
    if r.exists && r.changes.is_empty() {
        s.push_str("No change to the spec.\n");
    } else {
        s.push_str("Changes:\n");
        for c in &r.changes {
            s.push_str(&format!("  {c}\n"));
        }
    }
    if r.exists && !r.changes.is_empty() {
        s.push_str(if r.images_only {
            "Only sidecar images change (hash without images equal): injected pods can be upgraded in place.\n"
        } else {
            "More than images change: pods injected before cannot be upgraded in place (they keep their sidecars until recreated).\n"
        });
    }
    if r.conflicts.is_empty() {
        s.push_str("Conflicts with other SidecarSets: none\n");
    } else {
        s.push_str("The validating webhook would refuse it: conflicts with other SidecarSets:\n");
        for c in &r.conflicts {
            s.push_str(&format!("  {c}\n"));
        }
    }
    s.push_str(&format!(
        "\nPods: {} injected by the current version, {} selected by the new one\n",
        r.injected, r.selected
    ));
    if !r.pods.is_empty() {
        let width = r.pods.iter().map(|p| p.pod.len()).max().unwrap_or(3).max(3);
        s.push_str(&format!("  {:width$}  {:24}  WHAT NEXT\n", "POD", "CHANGE"));
        for p in &r.pods {
            let next = match &p.next {
                Some(n) => n.to_string(),
                None => p.detail.clone(),
            };
            s.push_str(&format!(
                "  {:width$}  {:24}  {next}\n",
                p.pod,
                change_label(p.change)
            ));
            if p.next.is_some() && !p.detail.is_empty() {
                s.push_str(&format!("  {:width$}  {:24}  ({})\n", "", "", p.detail));
            }
        }
    }
    let ro = &r.rollout;
    for h in &r.hot_upgrade {
        s.push_str(&format!("Hot upgrade: {h}\n"));
    }
    s.push_str(&format!("\nRollout: {}\n", ro.strategy));
    if ro.order.is_empty() {
        s.push_str("  no pod to upgrade in place\n");
    } else {
        s.push_str(&format!("  order: {}\n", ro.order.join(", ")));
        s.push_str(&format!(
            "  first step: {}\n",
            if ro.first_step.is_empty() {
                "none".to_string()
            } else {
                ro.first_step.join(", ")
            }
        ));
        if !ro.kept_by_partition.is_empty() {
            s.push_str(&format!(
                "  kept on the old sidecars by partition: {}\n",
                ro.kept_by_partition.join(", ")
            ));
        }
    }
    if let Some(w) = &ro.waiting {
        s.push_str(&format!("  waiting: {w}\n"));
    }
    s
}
