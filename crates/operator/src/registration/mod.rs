//! What the API server is told about the operator: the webhook configurations (URL mode for a
//! local process, Service mode in a cluster), the pod webhook's match conditions kept to the
//! SidecarSets' selectors, the CRD's conversion settings in files mode, and the check that
//! OpenKruise's injector is not installed too.
//!
//! One file per part: [`openkruise`], [`configurations`], [`match_coverage`], [`match_record`]
//! and [`match_conditions`] (the pod webhook's match condition), [`crd_conversion`], [`policy`]
//! (the MutatingAdmissionPolicy of `--injection policy|auto`).

pub mod configurations;
pub mod crd_conversion;
pub mod match_conditions;
pub mod match_coverage;
pub mod match_record;
pub mod openkruise;
pub mod policy;

pub use configurations::{POD_UPDATE_MATCH, apply_webhook_configurations, webhook_configurations};
pub use crd_conversion::keep_crd_conversion_from_file;
pub use match_conditions::{RESYNC, keep_pod_match_conditions};
pub use match_coverage::{
    EVERY_POD, MATCH_CONDITION_NAME, MAX_PENDING, MAX_PENDING_BYTES, MatchCoverage, PENDING_TTL,
    PER_SOURCE, PER_SOURCE_BYTES,
};
pub use openkruise::check_openkruise;

#[cfg(test)]
mod against_a_mock_api_server;
#[cfg(test)]
mod against_a_mock_api_server_one_writer;
