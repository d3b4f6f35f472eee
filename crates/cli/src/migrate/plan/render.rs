//! The plan as people read it.

use super::{MigrationPhase, MigrationPlan, Snapshot};
use std::fmt::Write;

/// The release, what was found, and our operator's state: the plan's first lines.
fn what_was_found(p: &MigrationPlan, s: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "OpenKruise release: {}",
        p.release.as_deref().unwrap_or("none found")
    );
    if p.release.is_some() {
        let _ = writeln!(
            out,
            "  CRDs rendered as release templates: {}",
            if p.crds_are_release_templates {
                "yes (a plain `helm uninstall` would delete them, and every SidecarSet with them)"
            } else {
                "no"
            }
        );
    }
    let _ = writeln!(
        out,
        "Found: {} SidecarSets, {} ControllerRevisions of SidecarSets, {} pods injected by SidecarSets",
        s.sidecarsets.len(),
        s.revisions.len(),
        s.injected_pods.len()
    );
    if s.others.iter().any(|(_, n)| *n > 0) {
        let list: Vec<String> = s
            .others
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let _ = writeln!(out, "Other OpenKruise objects in use: {}", list.join(", "));
    }
    let _ = writeln!(
        out,
        "Our operator: {}",
        if s.ours.ready() {
            "registered and ready"
        } else if s.ours.registered {
            "registered, not ready"
        } else {
            "not installed"
        }
    );
    out
}

/// The plan as people read it.
pub fn render(p: &MigrationPlan, s: &Snapshot, apply: bool) -> String {
    let mut out = what_was_found(p, s);
    let phase = match p.phase {
        MigrationPhase::NothingToDo => "nothing to do",
        MigrationPhase::InstallOperator => {
            "1 of 2: back up; nothing is changed; then install the operator next to OpenKruise (in its coexistence mode it writes nothing OpenKruise's manager writes)"
        }
        MigrationPhase::RemoveOpenKruise => {
            "2 of 2: back up, remove OpenKruise (its webhooks first), apply our CRD schema with its conversion webhook pointed at our operator, forget its Helm release, verify nothing was lost"
        }
    };
    let _ = writeln!(out, "\nStep {phase}");
    if p.phase == MigrationPhase::RemoveOpenKruise {
        let _ = writeln!(out, "Delete, in this order:");
        for d in &p.deletions {
            if d.namespace.is_empty() {
                let _ = writeln!(out, "  {} {}", d.kind, d.name);
            } else {
                let _ = writeln!(out, "  {} {}/{}", d.kind, d.namespace, d.name);
            }
        }
        for r in &p.release_secrets {
            let _ = writeln!(out, "  Secret {r} (Helm's release record; last)");
        }
    }
    if !p.kept.is_empty() {
        let _ = writeln!(out, "Kept (taken out of Helm's hands):");
        for k in &p.kept {
            let _ = writeln!(out, "  {} {}: {}", k.kind, k.name, k.why);
        }
    }
    for n in &p.notes {
        let _ = writeln!(out, "Note: {n}");
    }
    if !p.blockers.is_empty() {
        let _ = writeln!(out, "\nRefused: {} blocker(s):", p.blockers.len());
        for b in &p.blockers {
            let _ = writeln!(out, "  - {b}");
        }
    } else if !apply && p.phase != MigrationPhase::NothingToDo {
        let _ = writeln!(
            out,
            "\nDry run: nothing was changed. Run again with --apply to do this step."
        );
    }
    // After removing OpenKruise, what comes next is printed once the verification passed.
    if !p.next.is_empty()
        && (apply || p.phase == MigrationPhase::NothingToDo)
        && p.phase != MigrationPhase::RemoveOpenKruise
        && p.blockers.is_empty()
    {
        let _ = writeln!(out, "\nNext:");
        for n in &p.next {
            let _ = writeln!(out, "  {n}");
        }
    }
    out
}
