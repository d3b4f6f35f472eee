//! The `reason` label values the operator's counters know in advance (exported at 0 from the
//! start by `zero_known_series`).

/// Why a skip notice or its Event was not recorded (the `reason` label of
/// `skip_events_dropped`).
pub mod dropped {
    /// The queue to the Event writer was full.
    pub const QUEUE_FULL: &str = "queue_full";
    /// The namespace's Events were over `events::PER_NAMESPACE`.
    pub const NAMESPACE_RATE: &str = "namespace_rate";
    /// The source of the admission requests was over `events::PER_SOURCE`.
    pub const SOURCE_RATE: &str = "source_rate";
}

/// The `reason` values of `validation_denials` (SidecarSets and pod templates refused).
pub mod denied {
    /// The SidecarSet is invalid.
    pub const INVALID: &str = "invalid";
    /// The review or its object could not be read.
    pub const MALFORMED: &str = "malformed";
    /// The SidecarSet conflicts with another one.
    pub const CONFLICT: &str = "conflict";
    /// A pod with the SidecarSet's sidecars would be invalid.
    pub const INVALID_POD: &str = "invalid_pod";
    pub const ALL: [&str; 4] = [INVALID, MALFORMED, CONFLICT, INVALID_POD];
}

/// The `reason` values of `certificate_changes` (one per certificate manager action).
pub mod cert_change {
    pub const KEEP: &str = "keep";
    pub const GENERATED: &str = "generated";
    pub const LEAF_RENEWED: &str = "leaf_renewed";
    pub const CA_ROTATION_STARTED: &str = "ca_rotation_started";
    pub const CA_PROMOTED: &str = "ca_promoted";
    pub const CA_ROTATION_FINISHED: &str = "ca_rotation_finished";
    pub const ALL: [&str; 6] = [
        KEEP,
        GENERATED,
        LEAF_RENEWED,
        CA_ROTATION_STARTED,
        CA_PROMOTED,
        CA_ROTATION_FINISHED,
    ];
}

/// The `reason` of `injections_skipped` for a pod no SidecarSet selects (the other reasons are
/// the core's [`sidecarset_core::inject::SkipReason`] labels).
pub const NO_SIDECARSET_TO_INJECT: &str = "no_sidecarset_to_inject";

/// The `reason` of `injections_skipped` for a pod that already records the SidecarSets that
/// select it: almost always the API server calling the webhook again for the same pod
/// (`reinvocationPolicy: IfNeeded`) because an admission step after it changed the pod, as the
/// ServiceAccount plugin does on its second round when it mounts the API token into the
/// sidecars just injected. Counted apart so that `no_sidecarset_to_inject` means what it says.
pub const ALREADY_INJECTED: &str = "already_injected";
