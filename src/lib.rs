//! sidecarset-operator: injects and upgrades sidecar containers driven by OpenKruise-compatible
//! SidecarSets (`apps.kruise.io/v1alpha1`).
//!
//! The pure core (`api`, `select`, `inject`) holds the behaviour; `webhook` and `cli` are thin
//! shells around it.

pub mod api;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod events;
pub mod health;
pub mod index;
pub mod inject;
pub mod inspect;
pub mod metrics;
pub mod migrate;
pub mod pod_validation;
pub mod registration;
pub mod rollout;
pub mod run;
pub mod telemetry;
pub mod tls;
pub mod webhook;
