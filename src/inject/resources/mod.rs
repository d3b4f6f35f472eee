//! `resourcesPolicy` at injection: the sidecar's limits and requests computed from the pod's
//! own containers, as OpenKruise 1.9 computes them.

pub mod expr;
pub mod quantity;
