//! `explain pod` for people.

use super::{InjectionState, PodExplanation, Why};

/// The explanation for people.
pub fn human(e: &PodExplanation) -> String {
    let mut s = String::new();
    s.push_str(&format!("Pod {}", e.pod));
    let mut facts = Vec::new();
    if let Some(p) = &e.phase {
        facts.push(p.clone());
    }
    if let Some(c) = &e.created {
        facts.push(format!("created {c}"));
    }
    if !facts.is_empty() {
        s.push_str(&format!(" ({})", facts.join(", ")));
    }
    s.push('\n');
    s.push_str(&format!(
        "Injected by: {}\n",
        if e.injected.is_empty() {
            "none".to_string()
        } else {
            e.injected.join(", ")
        }
    ));
    if e.sidecarsets.is_empty() {
        s.push_str("\nNo SidecarSet selects this pod or comes close to it.\n");
    }
    for v in &e.sidecarsets {
        s.push('\n');
        let state = match (v.injection, v.reason) {
            (InjectionState::Injected, _) => "injected".to_string(),
            (InjectionState::Deleted, _) => "injected, SidecarSet deleted".to_string(),
            (InjectionState::NotSelected, _) => "not selected".to_string(),
            (InjectionState::Skipped, Some(r)) => format!("skipped ({})", why_label(r)),
            (InjectionState::Skipped, None) => "skipped".to_string(),
        };
        s.push_str(&format!("SidecarSet {}: {state}\n", v.sidecarset));
        if !v.detail.is_empty() {
            s.push_str(&format!("  {}\n", v.detail));
        }
        if let Some(reason) = &v.event {
            s.push_str(&format!("  Event: {reason}\n"));
        }
        if let Some(r) = &v.revision {
            let rev = |name: &Option<String>, hash: &str| {
                let short: String = hash.chars().take(12).collect();
                match name {
                    Some(n) => format!("{n} (hash {short}…)"),
                    None => format!("hash {short}…"),
                }
            };
            if r.updated {
                s.push_str(&format!(
                    "  revision: {}, the latest\n",
                    rev(&r.latest_revision, &r.latest_hash)
                ));
            } else {
                s.push_str(&format!(
                    "  revision: {}; latest is {}\n",
                    rev(&r.pod_revision, &r.pod_hash),
                    rev(&r.latest_revision, &r.latest_hash)
                ));
            }
        }
        for c in &v.sidecars {
            let img = |i: &Option<String>| i.clone().unwrap_or_else(|| "-".into());
            s.push_str(&format!(
                "  sidecar {}: pod {}, SidecarSet {}, running {}{}\n",
                c.name,
                img(&c.pod_image),
                img(&c.sidecarset_image),
                img(&c.running_image),
                c.hot_upgrade
                    .as_ref()
                    .map(|h| format!(" (hot upgrade: {h})"))
                    .unwrap_or_default()
            ));
        }
        if let Some(u) = v.upgradable {
            s.push_str(&format!(
                "  upgradable in place: {}\n",
                if u { "yes" } else { "no" }
            ));
        }
        if let Some(by) = &v.injected_by {
            s.push_str(&format!("  injects through {by}\n"));
        }
        if let Some(n) = &v.next {
            s.push_str(&format!("  next rollout step: {n}\n"));
        }
    }
    if e.others > 0 {
        s.push_str(&format!(
            "\n{} other SidecarSet(s) miss this pod by more than one selector term (--all lists them).\n",
            e.others
        ));
    }
    s
}

/// The reason, as the human output names it.
fn why_label(w: Why) -> &'static str {
    match w {
        Why::Paused => "paused",
        Why::Conflict => "conflict",
        Why::NamespaceExcluded => "namespace excluded",
        Why::CreatedBefore => "pod created before the SidecarSet",
        Why::Refused => "the webhook would refuse the pod",
        Why::NotInjectedAtCreation => "not injected at creation",
        Why::WillBeInjected => "will be injected at creation",
        Why::PodFinished => "pod finished",
        Why::OptedOut => "opted out",
        Why::NativeSidecarsUnsupported => "native sidecars not supported by the cluster",
    }
}
