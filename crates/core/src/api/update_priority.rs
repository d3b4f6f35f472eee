//! `updateStrategy.priorityStrategy` and `updateStrategy.scatterStrategy`: the order in which a
//! rolling update picks pods, in OpenKruise's JSON shape (`apps/pub/update_priority.go` and
//! `UpdateScatterStrategy`). The order itself is in `rollout::order`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which pods are upgraded first. Set one of `weightPriority` and `orderPriority`, not both.
/// Applied after the default order (not ready, newer, ... first); pods the rules cannot tell
/// apart keep that order.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityStrategy {
    /// Pods are sorted by the number at the end of the value of the first of these label keys
    /// that they have (`5` in `5`, `10` in `sts-10`; no number counts as 0), higher numbers
    /// first. Pods having the first key come before pods having only the second, and so on.
    /// Pods having none of the keys come first of all (as in OpenKruise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order_priority: Vec<UpdatePriorityOrderTerm>,
    /// Pods are sorted by the sum of the weights of the terms whose selector matches their
    /// labels, higher sums first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weight_priority: Vec<UpdatePriorityWeightTerm>,
}

/// One key of `orderPriority`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityOrderTerm {
    /// A pod label key; its value's trailing number orders the pods that have it.
    pub ordered_key: String,
}

/// One term of `weightPriority`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityWeightTerm {
    /// Added to the priority of the pods the selector matches, from 0 to 100.
    pub weight: i32,
    /// Selects pods by their labels. Must not be empty.
    pub match_selector: LabelSelector,
}

/// One term of `scatterStrategy`: pods labelled `key=value` are spread out over the rollout
/// instead of being upgraded in one batch. The value `*` stands for every value of `key` found
/// on the SidecarSet's pods, each a term of its own.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub struct UpdateScatterTerm {
    /// A pod label key.
    pub key: String,
    /// The label's value, or `*` for each of its values.
    pub value: String,
}
