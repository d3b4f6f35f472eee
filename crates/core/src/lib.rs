//! The pure core of sidecarset-operator: what the webhook, the controller and the command-line
//! tools decide, with no Kubernetes client, no async runtime and no I/O. Cargo refuses a shell
//! import here: none of kube's client, kube-runtime, tokio, hyper or axum is a dependency.
//!
//! - [`api`]: the SidecarSet types of both versions, conversion, defaults, validation,
//!   OpenKruise's hashes byte for byte, selectors, the resources policy.
//! - [`index`]: the SidecarSet index (which SidecarSets could select a pod).
//! - [`inject`]: a pod and its matching SidecarSets → a JSON patch.
//! - [`policy`]: SidecarSets compiled into a MutatingAdmissionPolicy the API server applies.
//! - [`rollout`]: a SidecarSet's update strategy and its pods → what to upgrade now.

pub mod api;
pub mod index;
pub mod inject;
pub mod policy;
pub mod rollout;
