//! sidecarset-operator: injects and upgrades sidecar containers driven by OpenKruise-compatible
//! SidecarSets (`apps.kruise.io/v1alpha1`).
//!
//! The pure core (`api`, `select`, `inject`) holds the behaviour; `webhook` and `cli` are thin
//! shells around it.

pub mod api;
pub mod certs;
pub mod cli;
pub mod controller;
pub mod inject;
pub mod inspect;
pub mod pod_validation;
pub mod rollout;
pub mod run;
pub mod select;
pub mod telemetry;
pub mod webhook;
