//! An injected SidecarSet's verdict: its sidecars (images in the pod, in the SidecarSet, and
//! running), the revision the pod runs, and the next rollout step.

use super::{InjectionState, PodInput, Revision, Sidecar, Verdict, hash_entry};
use crate::inspect::pods::{Rollout, differences};
use k8s_openapi::api::core::v1::Pod;
use sidecarset_core::api::{SidecarSet, injected_list};
use sidecarset_core::index::Entry;
use sidecarset_core::rollout::Classifier;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Fills `v` for a SidecarSet the pod records as injected.
pub(super) fn injected_verdict(input: &PodInput, ss: &Arc<SidecarSet>, v: &mut Verdict) {
    let pod = input.pod;
    let name = ss.name();
    v.injection = InjectionState::Injected;
    if !v.selects {
        v.detail = format!(
            "injected at creation; no longer selected ({}), but the controller still counts and upgrades the pod (it follows the pod's injected list)",
            v.missed
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        );
    } else {
        v.detail = "injected at creation".into();
    }
    let Some(entry) = input
        .index
        .iter()
        .find(|s| s.name() == name)
        .and_then(|s| Entry::new(s.clone()).ok())
    else {
        return;
    };
    v.sidecars = sidecars(pod, ss);
    v.revision = revision(input, ss, &entry);
    let Ok(classifier) = Classifier::new(&entry) else {
        return;
    };
    let mut views: Vec<sidecarset_core::rollout::PodView> = input
        .peers
        .get(name)
        .into_iter()
        .flatten()
        // As the controller picks a SidecarSet's pods: by their injected list.
        .filter(|p| {
            injected_list(p.metadata.annotations.as_ref().unwrap_or(&BTreeMap::new()))
                .contains(name)
        })
        .map(|p| classifier.view(p))
        .collect();
    let me = classifier.view(pod);
    if !views.iter().any(|x| x.key == me.key) {
        views.push(me.clone());
    }
    v.upgradable = Some(me.updated || me.upgradable);
    let rollout = Rollout::new(&entry.ss.spec.update_strategy, views);
    v.next = Some(rollout.next_step(&me, || differences(pod, &entry, input.now)));
}

/// The containers of a hot-upgrade pair by name: their role (`working` or `idle`) and the image
/// the SidecarSet wants there (the working one its image, the idle one its empty image).
fn hot_upgrade_pairs(
    ss: &SidecarSet,
    pod_ann: &BTreeMap<String, String>,
) -> BTreeMap<String, (String, Option<String>)> {
    let mut hot = BTreeMap::new();
    for c in ss.hot_upgrade_containers() {
        let (working, idle) = sidecarset_core::api::working_and_idle(c.name(), pod_ann);
        hot.insert(working, ("working".into(), c.container.image.clone()));
        hot.insert(
            idle,
            (
                "idle".into(),
                c.hot_upgrade_empty_image().map(str::to_string),
            ),
        );
    }
    hot
}

/// The sidecars: the pod's spec image, the SidecarSet's, and what runs, by container name.
fn sidecars(pod: &Pod, ss: &SidecarSet) -> Vec<Sidecar> {
    let name = ss.name();
    let spec = pod.spec.clone().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    let sidecar_specs: Vec<_> = ss
        .spec
        .containers
        .iter()
        .chain(
            ss.spec
                .init_containers
                .iter()
                .filter(|c| c.is_native_sidecar()),
        )
        .collect();
    // A hot-upgrade sidecar is listed as its pair: the working container should run the
    // SidecarSet's image, the idle one its empty image.
    let pod_ann = pod.metadata.annotations.clone().unwrap_or_default();
    let hot = hot_upgrade_pairs(ss, &pod_ann);
    let mut names: Vec<String> = crate::inspect::pods::injected_sidecars(pod, name)
        .into_iter()
        .flat_map(
            |n| match ss.hot_upgrade_containers().find(|c| c.name() == n) {
                Some(c) => c.pod_names(),
                None => vec![n],
            },
        )
        .collect();
    for c in &sidecar_specs {
        for n in c.pod_names() {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    names.sort();
    let mut out = Vec::new();
    for n in names {
        let in_pod = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == n);
        let running = status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .find(|c| c.name == n)
            .map(|c| c.image.clone())
            .filter(|i| !i.is_empty());
        out.push(Sidecar {
            name: n.clone(),
            pod_image: in_pod.and_then(|c| c.image.clone()),
            sidecarset_image: match hot.get(&n) {
                Some((_, image)) => image.clone(),
                None => sidecar_specs
                    .iter()
                    .find(|c| c.container.name == n)
                    .and_then(|c| c.container.image.clone()),
            },
            running_image: running,
            hot_upgrade: hot.get(&n).map(|(role, _)| {
                let version = pod_ann
                    .get(&sidecarset_core::api::version_annotation(&n))
                    .map(String::as_str)
                    .unwrap_or("-");
                format!("{role}, version {version}")
            }),
        });
    }
    out
}

/// The revision the pod runs against the latest, when the pod records a hash for the SidecarSet.
fn revision(input: &PodInput, ss: &SidecarSet, entry: &Entry) -> Option<Revision> {
    let name = ss.name();
    let latest_revision = ss.status.as_ref().and_then(|s| s.latest_revision.clone());
    let h = hash_entry(input.pod, name)?;
    let updated = h.hash == *entry.hash;
    let pod_revision = if updated {
        latest_revision.clone()
    } else {
        input
            .revisions
            .iter()
            .find(|r| r.sidecarset == name && r.hash == h.hash)
            .map(|r| r.name.clone())
            .or_else(|| Some(h.controller_revision.clone()).filter(|r| !r.is_empty()))
    };
    Some(Revision {
        pod_hash: h.hash.clone(),
        pod_revision,
        latest_hash: entry.hash.to_string(),
        latest_revision,
        updated,
    })
}
