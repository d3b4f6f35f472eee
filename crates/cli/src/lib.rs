//! The command-line tools of sidecarset-operator, on the same core as the webhook and the
//! controller and without the webhook server: the offline `inject` ([`offline`]), `explain` and
//! `diff` ([`inspect`], which talk to the cluster with a kube client), `check` ([`check`]: is the
//! installation healthy), `crd`, and the kubectl
//! plugin (`kubectl sidecarset ...`). The operator's binary parses [`ToolCommand`] next to its own
//! `run` and hands it to [`run_tool`].

pub mod check;
mod command;
pub mod inspect;
pub mod migrate;
pub mod offline;
pub mod reference;
pub mod target;
pub mod version;

pub use command::{PLUGIN_NAME, ToolCommand, invoked_as_plugin, run_tool};

/// The process's one rustls crypto provider (ring, kube's default); installing it twice is a
/// no-op.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
