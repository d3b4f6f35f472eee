//! sidecarset-operator: injects and upgrades sidecar containers driven by OpenKruise-compatible
//! SidecarSets (`apps.kruise.io/v1alpha1`).
//!
//! The pure core (`api`, `index`, `inject`, `rollout`) is the `sidecarset-core` crate and holds
//! the behaviour; code here names it as `sidecarset_core::…` (nothing is re-exported, so "go to
//! definition" lands where the code lives). This crate is the shell: the cluster view, the controller, the webhooks, the certificates,
//! registration, telemetry and `run`. The command-line tools are the `sidecarset-cli` crate.

pub mod certs;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod events;
pub mod faults;
pub mod health;
pub mod metrics;
#[cfg(test)]
mod mock_api;
pub mod names;
pub mod pod_validation;
pub mod registration;
pub mod run;
pub mod shutdown;
pub mod telemetry;
pub mod tls;
pub mod webhook;
