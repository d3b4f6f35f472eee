//! `resourcesPolicy` of a sidecar container (OpenKruise 1.9): the sidecar's resources are
//! computed at pod creation from the resources of the pod's own containers.

pub mod expr;
pub mod quantity;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The regex used when `targetContainersNameRegex` is not set: every container.
pub const DEFAULT_TARGET_CONTAINERS_NAME_REGEX: &str = ".*";

/// Computes the sidecar's resources when a pod is created, from the resources of the pod's
/// containers whose names match `targetContainersNameRegex` (its containers and native-sidecar
/// init containers, never the sidecars of SidecarSets). Not together with `resources`. Pod
/// creation is refused when no container matches.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesPolicy {
    /// `sum` or `max`: the variables `cpu` and `memory` are the sum, or the largest, of the
    /// target containers' values.
    pub target_containers_mode: TargetContainersMode,

    /// Regular expression matched against container names (anywhere in the name; anchor it
    /// with ^ and $). Defaults to ".*".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = ".*"))]
    pub target_containers_name_regex: Option<String>,

    /// The expressions of the sidecar's limits and requests.
    pub resources_expr: ResourcesExpr,
}

impl ResourcesPolicy {
    /// The regex in force (an unset one matches every name).
    pub fn name_regex(&self) -> &str {
        self.target_containers_name_regex.as_deref().unwrap_or("")
    }
}

/// How the target containers' resources are combined.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TargetContainersMode {
    /// The sum over the target containers.
    Sum,
    /// The largest value among the target containers.
    Max,
}

/// Expressions such as `max(cpu*50%, 50m)` or `memory + 100Mi`: numbers, percentages,
/// quantities, the variable `cpu` or `memory`, `+ - * /`, parentheses, `max(a, b)`, `min(a, b)`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesExpr {
    /// Limits. `cpu`/`memory` are the target containers' limits; when one of them has no limit
    /// the sidecar gets none either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceExprs>,
    /// Requests. `cpu`/`memory` are the target containers' requests (a missing one counts 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceExprs>,
}

/// One expression per resource; an empty one leaves that resource unset.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceExprs {
    /// CPU expression; its variable is `cpu`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cpu: String,
    /// Memory expression; its variable is `memory`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub memory: String,
}
