//! Why a rollout waits: the sentences of [`Plan::waiting`](super::Plan::waiting).

use super::{PodView, pods, some_keys};
use crate::api::{SidecarSetUpdateStrategy, UpdateStrategyType};

/// The strategy stops the rollout: `type: NotUpdate` or `paused: true`.
pub(super) fn stopped(strategy: &SidecarSetUpdateStrategy) -> Option<&'static str> {
    if strategy.type_ == Some(UpdateStrategyType::NotUpdate) {
        Some("NotUpdate: spec.updateStrategy.type is NotUpdate, so pods are only injected")
    } else if strategy.paused {
        Some("paused: spec.updateStrategy.paused is true")
    } else {
        None
    }
}

/// Old hot-upgrade containers are being reset to the empty image (`reset`: their pods).
pub(super) fn resetting(reset: &[String]) -> String {
    format!(
        "resetting the old hot-upgrade containers of {} to the empty image ({})",
        pods(reset.len()),
        some_keys(reset.iter().map(String::as_str))
    )
}

/// Ready candidates are held: `maxUnavailable` is spent by the `unavailable` pods.
pub(super) fn max_unavailable_reached(max_unavailable: i32, unavailable: &[&PodView]) -> String {
    let prefix = if max_unavailable == 0 {
        "maxUnavailable is 0: only pods that are not ready are upgraded".to_string()
    } else {
        format!("maxUnavailable {max_unavailable} reached")
    };
    format!(
        "{prefix}: {} updating or not ready ({})",
        pods(unavailable.len()),
        some_keys(unavailable.iter().map(|v| v.key.as_str()))
    )
}

/// Every pod is updated; some are not yet ready and consistent.
pub(super) fn settling(matched: &[&PodView]) -> String {
    let in_flight: Vec<&str> = matched
        .iter()
        .filter(|v| !v.ready_and_consistent())
        .map(|v| v.key.as_str())
        .collect();
    format!(
        "every pod is updated; waiting for {} to become ready and consistent ({})",
        pods(in_flight.len()),
        some_keys(in_flight.iter().copied())
    )
}

/// Old pods remain but none can be upgraded now: not upgradable in place, not selected, not
/// consistent yet, or updated pods still in flight.
pub(super) fn nothing_upgradable(
    matched: &[&PodView],
    old: &[&PodView],
    selected: &[&PodView],
    not_upgradable: &[String],
) -> String {
    let mut parts = Vec::new();
    let n = not_upgradable.len();
    if n > 0 {
        parts.push(format!(
            "{} not upgradable in place (a field besides the image changed; recreate them): {}",
            pods(n),
            some_keys(not_upgradable.iter().map(String::as_str))
        ));
    }
    let unselected = old.len() - selected.len();
    if unselected > 0 {
        parts.push(format!(
            "{} not selected by spec.updateStrategy.selector",
            pods(unselected)
        ));
    }
    let inconsistent: Vec<&str> = selected
        .iter()
        .filter(|v| v.upgradable && !v.consistent)
        .map(|v| v.key.as_str())
        .collect();
    if !inconsistent.is_empty() {
        parts.push(format!(
            "{} whose container statuses do not yet match their spec ({})",
            pods(inconsistent.len()),
            some_keys(inconsistent.iter().copied())
        ));
    }
    let in_flight: Vec<&str> = matched
        .iter()
        .filter(|v| v.updated && !v.ready_and_consistent())
        .map(|v| v.key.as_str())
        .collect();
    if !in_flight.is_empty() {
        parts.push(format!(
            "{} updated and not yet ready and consistent ({})",
            pods(in_flight.len()),
            some_keys(in_flight.iter().copied())
        ));
    }
    format!("no pod can be upgraded now: {}", parts.join("; "))
}

/// The pods left out while their refused write waits for its retry (`held`), as a clause.
pub(super) fn held(held: &[String]) -> String {
    format!(
        "; waiting for the retry of a refused write to {} ({})",
        pods(held.len()),
        some_keys(held.iter().map(String::as_str))
    )
}
